//! The daemon's threads and its configuration.

use super::*;

/// The state file as published: (its identity, which each atomic rewrite changes; the digest).
pub(crate) fn published(site: &Site) -> Option<((u64, i64, i64), String)> {
    use std::os::unix::fs::MetadataExt as _;
    let path = site.path("state.json");
    let m = fs::metadata(&path).ok()?;
    let text = fs::read_to_string(&path).ok()?;
    let state: serde_json::Value = serde_json::from_str(&text).ok()?;
    Some((
        (m.ino(), m.mtime(), m.mtime_nsec()),
        state["config_digest"].as_str()?.to_string(),
    ))
}

/// How many times the state file is rewritten within `window`.
pub(crate) fn rewrites_within(site: &Site, window: Duration) -> usize {
    let mut seen = published(site).map(|p| p.0);
    let mut n = 0;
    let until = Instant::now() + window;
    while Instant::now() < until {
        let now = published(site).map(|p| p.0);
        if now.is_some() && now != seen {
            n += 1;
            seen = now;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    n
}

#[test]
fn governance_keeps_its_cadence_while_sacct_hangs() {
    let site = daemon_site();
    let dir = site.dir.path().display().to_string();
    site.script(
        "sacct",
        &format!("touch '{dir}/sacct.started'\nsleep 30\ntouch '{dir}/sacct.finished'\n"),
    );
    let mut daemon = Daemon::start(&site, &["--govern-interval", "200ms"]);
    daemon.wait_for(30, "sacct never started", |_| {
        site.path("sacct.started").exists()
    });
    // The ingest thread is stuck in sacct; the governor publishes every 200 ms all the same.
    let rewrites = rewrites_within(&site, Duration::from_secs(3));
    assert!(
        !site.path("sacct.finished").exists(),
        "sacct finished: the test proves nothing"
    );
    assert!(
        rewrites >= 5,
        "the state was rewritten {rewrites} times in 3 s while sacct hung: {:#?}",
        daemon.log
    );
    // A stop does not wait for sacct's timeout: the ingest step is left after the grace.
    let status = daemon.stop(20);
    assert_eq!(status.code(), Some(0), "{:#?}", daemon.log);
    let last = daemon.log.last().unwrap();
    assert!(last.contains("stopping"), "{:#?}", daemon.log);
    assert!(
        last.contains("did not finish within 5s"),
        "{:#?}",
        daemon.log
    );
    assert!(!site.path("sacct.finished").exists());
}

#[test]
fn run_follows_teamshare_toml_edits_and_sighup() {
    let site = daemon_site();
    let toml = site.path("teamshare.toml");
    let original = fs::read_to_string(&toml).unwrap();
    let digest = teamshare_config::digest;
    // Same length, so that one edit can be hidden from the poll (below).
    let valid = original.replace("weight = 40", "weight = 41");
    let invalid = original.replace("weight = 40", "weight = -1");
    let hidden = original.replace("weight = 40", "weight = 42");
    assert!(valid.len() == invalid.len() && invalid.len() == hidden.len());

    let mut daemon = Daemon::start(&site, &["--govern-interval", "200ms", "--no-ingest"]);
    daemon.wait_for(30, "no state with the first digest", |_| {
        published(&site).is_some_and(|p| p.1 == digest(&original))
    });
    assert!(
        daemon.log[0].contains(&format!("(digest {})", digest(&original))),
        "{:#?}",
        daemon.log
    );

    // Edits land whole (as an editor's rename does), so that no poll sees half a file.
    let replace = |text: &str| {
        let tmp = site.path("teamshare.toml.new");
        fs::write(&tmp, text).unwrap();
        fs::rename(&tmp, &toml).unwrap();
    };
    // A valid edit: in force within a poll, for the governor too.
    replace(&valid);
    daemon.wait_for(10, "the valid edit was not followed", |log| {
        log.iter().any(|l| l.contains("reloaded"))
            && published(&site).is_some_and(|p| p.1 == digest(&valid))
    });
    let reloaded: Vec<&String> = daemon
        .log
        .iter()
        .filter(|l| l.contains("reloaded"))
        .collect();
    assert!(
        reloaded[0].contains(&format!(
            "digest {} -> {}",
            digest(&original),
            digest(&valid)
        )),
        "{reloaded:?}"
    );

    // An invalid edit: said once, on one line, and the last good configuration stays.
    replace(&invalid);
    daemon.wait_for(10, "the invalid edit was not said", |log| {
        log.iter().any(|l| l.contains("not reloaded"))
    });
    assert!(rewrites_within(&site, Duration::from_millis(4500)) >= 5);
    assert_eq!(published(&site).unwrap().1, digest(&valid));
    daemon.drain();
    let rejected: Vec<&String> = daemon
        .log
        .iter()
        .filter(|l| l.contains("not reloaded"))
        .collect();
    assert_eq!(rejected.len(), 1, "said once per change: {:#?}", daemon.log);
    assert!(rejected[0].contains("teamshare.toml:"), "{}", rejected[0]);
    assert!(rejected[0].contains(": error: "), "{}", rejected[0]);
    assert!(
        rejected[0].contains(&format!("(digest {})", digest(&valid))),
        "{}",
        rejected[0]
    );
    assert!(
        !daemon
            .log
            .iter()
            .any(|l| l.trim_start().starts_with("hint:")),
        "{:#?}",
        daemon.log
    );

    // An edit the poll cannot see (same size, same inode, the time put back): SIGHUP reads it.
    let before = fs::metadata(&toml).unwrap().modified().unwrap();
    {
        let mut f = fs::OpenOptions::new().write(true).open(&toml).unwrap();
        f.write_all(hidden.as_bytes()).unwrap();
        f.set_modified(before).unwrap();
    }
    std::thread::sleep(Duration::from_millis(2500));
    assert_eq!(published(&site).unwrap().1, digest(&valid));
    daemon.signal("HUP");
    daemon.wait_for(10, "SIGHUP did not reload", |log| {
        log.iter().any(|l| l.contains("reloaded on SIGHUP"))
            && published(&site).is_some_and(|p| p.1 == digest(&hidden))
    });

    let status = daemon.stop(20);
    assert_eq!(status.code(), Some(0), "{:#?}", daemon.log);
}
