//! `accountd run`: the daemon, once and in passes.

use super::*;

/// Two nodes: 4 untyped GPUs and 4 h100.
pub(crate) const SINFO_OUT: &str = "n1|gpu:4|idle\nn2|gpu:h100:4(S:0-1)|mix\n";
/// training runs 5 GPUs (its quota is 4: one borrowed).
pub(crate) const SQUEUE_OUT: &str = "6|training|RUNNING|64000|2024-05-01T10:00:00|2024-05-01T10:00:00|cpu=1,node=1,billing=1,gres/gpu=5|N/A|gres:gpu:5|N/A|1|1|None|1|n1|2024-05-01T10:00:00|6|N/A|N/A|*|OK|N/A|N/A|(null)|\n";

/// A site for the daemon: state and spool beside the configuration, every Slurm command faked.
pub(crate) fn daemon_site() -> Site {
    let config = format!(
        "{CONFIG}state_file = \"state.json\"\nsample_spool = \"spool\"\nmetrics_listen = \"127.0.0.1:0\"\n"
    );
    let site = Site::new(&config);
    site.fake("sinfo", SINFO_OUT);
    // Job 2 runs in the sacct fixture, 6 in the governor's queue: slurmctld knows both.
    site.fake_squeue(SQUEUE_OUT, "2\n6\n");
    site.fake("sacct", SACCT_FIXTURE);
    site.fake("sacctmgr", "");
    site.fake("scontrol", "");
    site.fake("scancel", "");
    // One node's spool with one sample of job 1's GPU.
    let ready = site.path("spool/n1/ready");
    fs::create_dir_all(&ready).unwrap();
    fs::write(
        ready.join("1714525200000-1-0.jsonl"),
        "{\"node\":\"n1\",\"gpu_uuid\":\"GPU-a\",\"ts_ms\":1714525200000,\"interval_ms\":10000,\"minor\":0,\"job_id_raw\":1,\"job_start\":1714525200,\"util_gpu\":50,\"util_mem\":5,\"mem_used\":1,\"mem_total\":2,\"processes\":1}\n",
    )
    .unwrap();
    site
}

pub(crate) fn count_rows(site: &Site, sql: &str) -> i64 {
    let conn = rusqlite::Connection::open(site.path("accountd.db")).unwrap();
    conn.query_row(sql, [], |r| r.get(0)).unwrap()
}

#[test]
fn run_once_does_every_step_once() {
    let site = daemon_site();
    let o = site.run(true, &["run", "--once"]);
    let err = stderr(&o);
    assert_eq!(code(&o), 0, "{err}");
    assert!(
        err.contains("accountd run: started: governing every 1s"),
        "{err}"
    );
    assert!(err.contains("metrics on http://127.0.0.1:"), "{err}");
    // Governor: the state is published and the limits set.
    let state = fs::read_to_string(site.path("state.json")).unwrap();
    let state: serde_json::Value = serde_json::from_str(&state).unwrap();
    assert_eq!(state["teams"]["training"]["running_gpus"], 5);
    assert!(
        site.args_of("sacctmgr")
            .iter()
            .any(|a| a.starts_with("GrpTRES=gres/gpu=")),
        "{:?}",
        site.args_of("sacctmgr")
    );
    // Ingest: the fixture's runs of this cluster.
    assert_eq!(
        count_rows(
            &site,
            "SELECT count(*) FROM job_runs WHERE cluster = 'testcluster'"
        ),
        5
    );
    // Samples collected, and removed from the spool.
    assert_eq!(count_rows(&site, "SELECT count(*) FROM gpu_samples"), 1);
    assert!(fs::read_dir(site.path("spool/n1/ready"))
        .unwrap()
        .next()
        .is_none());
    // Capacity: one row (measured twice, unchanged), with its typed part.
    assert_eq!(
        count_rows(
            &site,
            "SELECT count(*) FROM capacity_samples WHERE gpus = 8"
        ),
        1
    );
    assert_eq!(
        count_rows(
            &site,
            "SELECT gpus FROM capacity_sample_types WHERE gpu_type = 'h100'"
        ),
        4
    );
    // No governor: no squeue.
    let site = daemon_site();
    let o = site.run(true, &["run", "--once", "--no-govern", "--no-ingest"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert!(stderr(&o).contains("not governing"), "{}", stderr(&o));
    assert!(site.args_of("squeue").is_empty());
    assert!(site.args_of("sacct").is_empty());
    assert_eq!(
        count_rows(&site, "SELECT count(*) FROM capacity_samples"),
        1
    );
}

/// The daemon's log (accountd::logging): at info, what a pass did, each line with its fields
/// and the spans of its pass and of the actions on its plan; at debug, the plan's decisions
/// and the pass's durations besides.
#[test]
fn the_log_says_the_plan_at_debug_only() {
    for (level, debug) in [("info", false), ("debug", true)] {
        let site = daemon_site();
        let o = site
            .command(true, &["run", "--once"])
            .env("ACCOUNTD_LOG", level)
            .output()
            .unwrap();
        let err = stderr(&o);
        assert_eq!(code(&o), 0, "{err}");
        // The line as before, then its field, then pass 1 and the actions on its plan (with
        // --once, the pass waits for them).
        assert!(
            err.lines().any(|l| l.ends_with(
                " INFO accountd run: team training GPU limit -> gres/gpu=5 team=training pass{pass=1}:act{pass=1}"
            )),
            "{err}"
        );
        let said = |text: &str| err.lines().any(|l| l.contains(text));
        assert_eq!(said(" DEBUG accountd run: "), debug, "{err}");
        assert_eq!(
            said(" DEBUG accountd run: plan: team training GPU limit (none) -> 5: "),
            debug,
            "{err}"
        );
        assert_eq!(
            said(" DEBUG accountd run: pass: Slurm read, plan made, state published jobs=1 capacity=8 "),
            debug,
            "{err}"
        );
        assert_eq!(
            said(" DEBUG accountd run: act: the actions on the plan are done "),
            debug,
            "{err}"
        );
        assert_eq!(
            said(" DEBUG accountd run: ingest round: done ingest_ms="),
            debug,
            "{err}"
        );
    }
}

#[test]
fn run_once_reports_a_failing_step_and_does_the_others() {
    let site = daemon_site();
    let sacct = site.path("bin").join("sacct");
    fs::write(
        &sacct,
        "#!/bin/sh\necho 'sacct: error: slurmdbd is down' >&2\nexit 1\n",
    )
    .unwrap();
    let o = site.run(true, &["run", "--once"]);
    let err = stderr(&o);
    assert_eq!(code(&o), 1, "{err}");
    let failures: Vec<&str> = err.lines().filter(|l| l.contains(" failed: ")).collect();
    assert_eq!(failures.len(), 1, "{err}");
    assert!(
        failures[0].contains("accountd run: ingest failed: "),
        "{err}"
    );
    assert!(failures[0].contains("slurmdbd is down"), "{err}");
    // A timestamp first: 2024-05-01T00:00:00Z.
    assert!(failures[0].as_bytes()[19] == b'Z', "{err}");
    assert!(err.contains("1 step failed"), "{err}");
    assert!(site.path("state.json").exists());
    assert_eq!(
        count_rows(&site, "SELECT count(*) FROM capacity_samples"),
        1
    );
    assert_eq!(count_rows(&site, "SELECT count(*) FROM gpu_samples"), 1);
}

pub(crate) fn http_get(addr: &str, path: &str) -> String {
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out
}

#[test]
fn run_serves_metrics_until_sigterm_and_exits_0() {
    let site = daemon_site();
    let mut child = site
        .command(true, &["run", "--govern-interval", "200ms", "--no-ingest"])
        .stderr(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    let stderr_pipe = child.stderr.take().unwrap();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stderr_pipe)
            .lines()
            .map_while(Result::ok)
        {
            let _ = tx.send(line);
        }
    });
    let mut log = Vec::new();
    let addr = loop {
        let line = rx
            .recv_timeout(Duration::from_secs(30))
            .unwrap_or_else(|_| panic!("no start line: {log:?}"));
        log.push(line.clone());
        if let Some(rest) = line.split("metrics on http://").nth(1) {
            break rest.split("/metrics").next().unwrap().to_string();
        }
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    let body = loop {
        let response = http_get(&addr, "/metrics");
        assert!(response.starts_with("HTTP/1.1 200 OK"), "{response}");
        // The encoder writes labels in name order.
        if response.contains("teamshare_gpus_in_use{kind=\"borrowed\",team=\"training\"} 1") {
            break response;
        }
        assert!(
            Instant::now() < deadline,
            "no governor pass seen: {response}"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    // Header names are case-insensitive (hyper writes them in lower case).
    assert!(
        body.to_ascii_lowercase()
            .contains("content-type: text/plain; version=0.0.4"),
        "{body}"
    );
    assert!(body.contains("teamshare_capacity_gpus 8\n"), "{body}");
    assert!(
        body.contains("teamshare_quota_gpus{team=\"agents\"} 2\n"),
        "{body}"
    );
    assert!(http_get(&addr, "/").starts_with("HTTP/1.1 404 "));

    let kill = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(kill.success());
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        assert!(Instant::now() < deadline, "still running after SIGTERM");
        std::thread::sleep(Duration::from_millis(50));
    };
    while let Ok(line) = rx.recv_timeout(Duration::from_secs(5)) {
        log.push(line);
    }
    assert_eq!(status.code(), Some(0), "{log:#?}");
    assert!(log.last().unwrap().contains("stopping"), "{log:#?}");
    assert!(std::net::TcpStream::connect(&addr).is_err());
}
