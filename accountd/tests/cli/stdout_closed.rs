//! stdout closed early (`| head`).

use super::*;

#[test]
fn a_reader_that_goes_away_ends_the_command_quietly() {
    let site = prepared_site();
    // A year day by day: far more than a pipe holds (64 KiB), so the report meets the closed
    // pipe mid-way.
    let mut child = site
        .command(
            false,
            &[
                "report",
                "teams",
                "--by-day",
                "--since",
                "2024-01-01",
                "--until",
                "2025-01-01",
            ],
        )
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = String::new();
    {
        let mut reader = std::io::BufReader::new(child.stdout.take().unwrap());
        reader.read_line(&mut first).unwrap();
    } // the pipe is closed here, as `| head -1` does
    assert!(first.starts_with("GPU usage on testcluster"), "{first}");
    let o = child.wait_with_output().unwrap();
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert!(!stderr(&o).contains("panicked"), "{}", stderr(&o));
    assert!(!stderr(&o).contains("Broken pipe"), "{}", stderr(&o));

    // Commands that print little: the pipe is closed before they write at all.
    site.fake("sacctmgr", ASSOCIATIONS);
    for args in [
        &["check-config", "--capacity", "8"][..],
        &["setup-slurm", "--dry-run"][..],
        &["report", "fairshare"][..],
    ] {
        let mut child = site
            .command(true, args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        drop(child.stdout.take());
        let o = child.wait_with_output().unwrap();
        assert_eq!(code(&o), 0, "{args:?}: {}", stderr(&o));
        assert!(!stderr(&o).contains("panicked"), "{args:?}: {}", stderr(&o));
    }
}

#[test]
fn squeue_lines_the_governor_cannot_read_are_counted_and_said_once() {
    let site = daemon_site();
    site.fake_squeue(
        &format!("{SQUEUE_OUT}77|agents|RUNNING|not-a-priority|x\n"),
        "2\n6\n77\n",
    );
    let mut daemon = Daemon::start(&site, &["--govern-interval", "200ms", "--no-ingest"]);
    daemon.wait_for(30, "no metrics address", |log| {
        log.iter().any(|l| l.contains("metrics on http://"))
    });
    let addr = daemon
        .log
        .iter()
        .find_map(|l| l.split("metrics on http://").nth(1))
        .and_then(|rest| rest.split("/metrics").next())
        .unwrap()
        .to_string();
    // Several passes, each meeting the line: counted at each, said once.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let body = http_get(&addr, "/metrics");
        let n: f64 = body
            .lines()
            .find_map(|l| l.strip_prefix("teamshare_governor_unreadable_jobs_total "))
            .unwrap_or_else(|| panic!("{body}"))
            .parse()
            .unwrap();
        if n >= 3.0 {
            assert!(body.contains("# TYPE teamshare_governor_unreadable_jobs_total counter"));
            break;
        }
        assert!(Instant::now() < deadline, "{body}");
        std::thread::sleep(Duration::from_millis(100));
    }
    daemon.drain();
    let said: Vec<&String> = daemon
        .log
        .iter()
        .filter(|l| l.contains("cannot read squeue line"))
        .collect();
    assert_eq!(said.len(), 1, "{:#?}", daemon.log);
    assert!(said[0].contains("not-a-priority"), "{}", said[0]);
    // The readable job is still governed.
    let state = fs::read_to_string(site.path("state.json")).unwrap();
    let state: serde_json::Value = serde_json::from_str(&state).unwrap();
    assert_eq!(state["teams"]["training"]["running_gpus"], 5);
    assert_eq!(daemon.stop(20).code(), Some(0));
}
