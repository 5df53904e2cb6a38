//! The real `accountd sample` killed with SIGKILL while sampling every 200 ms, restarted, and
//! collected on the head: nothing written is lost, nothing is counted twice, collecting again
//! changes nothing, and the report says what the script played.

// Test code: a scenario reads top to bottom, so the workspace's 80-line limit is not for it.
#![allow(clippy::too_many_lines)]

mod sample_support;

use std::collections::BTreeSet;
use std::fs;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use accountd::sacct::JobRun;
use accountd::store::Store;
use sample_support::{samples_in, Site, JOB_START};

/// Start the sampler; wait until it has written `more` batches beyond `before`.
fn run_until(site: &Site, before: usize, more: usize) -> Child {
    let mut child = site
        .sampler(&["--interval", "200ms", "--job-refresh", "1s"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while site.ready_files().len() < before + more {
        if let Some(status) = child.try_wait().unwrap() {
            panic!("the sampler exited ({status}) before writing {more} batches");
        }
        assert!(
            Instant::now() < deadline,
            "the sampler wrote too little in 30 s"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    child
}

fn key(s: &serde_json::Value) -> (String, i64) {
    (
        s["gpu_uuid"].as_str().unwrap().to_string(),
        s["ts_ms"].as_i64().unwrap(),
    )
}

fn count(store: &Store, sql: &str) -> i64 {
    store.connection().query_row(sql, [], |r| r.get(0)).unwrap()
}

#[test]
fn kill_9_then_restart_loses_and_duplicates_nothing() {
    let site = Site::new();

    // First run, killed mid-sampling (SIGKILL: no handler, no flush).
    let mut first = run_until(&site, 0, 6);
    first.kill().unwrap();
    first.wait().unwrap();
    // What a kill during a write leaves: a partial batch in tmp/ under the dead pid.
    let partial = site.path(&format!(
        "spool/n1/tmp/9999999999999-{}-99.jsonl.tmp",
        first.id()
    ));
    fs::write(&partial, "{\"node\":\"n1\",\"gpu_uuid\":\"GPU-33").unwrap();
    let after_first = site.ready_files();

    // Restarted: resumes on the same tick grid, clears the partial batch.
    let mut second = run_until(&site, after_first.len(), 6);
    second.kill().unwrap();
    second.wait().unwrap();
    assert!(
        !partial.exists(),
        "the restarted sampler removes a dead run's partial batch"
    );

    let files = site.ready_files();
    assert!(files
        .iter()
        .all(|f| after_first.is_empty() || f >= &after_first[0]));
    assert!(
        after_first.iter().all(|f| files.contains(f)),
        "a batch written is never lost"
    );
    let samples = samples_in(&files);
    let keys: BTreeSet<(String, i64)> = samples.iter().map(key).collect();
    assert_eq!(
        keys.len(),
        samples.len(),
        "no tick sampled twice, across the restart too"
    );
    let ticks: BTreeSet<i64> = samples
        .iter()
        .map(|s| s["ts_ms"].as_i64().unwrap())
        .collect();
    assert_eq!(
        samples.len(),
        ticks.len() * 4,
        "every tick has all four GPUs"
    );
    assert!(
        ticks.iter().all(|t| t % 200 == 0),
        "ticks on the 200 ms grid"
    );

    // The head: sacct's view of job 42, then the spool, twice.
    {
        let mut store = Store::open(&site.path("accountd.db")).unwrap();
        let run = JobRun {
            cluster: "testcluster".into(),
            job_id_raw: 42,
            job_id: "42".into(),
            account: "agents".into(),
            user: "alice".into(),
            partition: "gpu".into(),
            qos: "normal".into(),
            state: "RUNNING".into(),
            submit: Some(JOB_START),
            start: JOB_START,
            end: None,
            elapsed: None,
            gpus: 2,
            gpus_by_type: Default::default(),
            alloc_tres: "cpu=2,gres/gpu=2,node=1".into(),
            eligible: Some(JOB_START),
            time_limit: None,
            nnodes: Some(1),
        };
        store.record_runs(&[run], JOB_START, None).unwrap();
    }
    let collect = || {
        let out = site.accountd().arg("collect-samples").output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(out.status.success(), "{stderr}");
        stderr
    };
    let said = collect();
    assert!(
        said.contains(&format!("{} new samples", samples.len())),
        "{said}"
    );
    assert!(
        site.ready_files().is_empty(),
        "collected batches leave the spool"
    );
    let store = Store::open(&site.path("accountd.db")).unwrap();
    assert_eq!(
        count(&store, "SELECT count(*) FROM gpu_samples") as usize,
        samples.len()
    );

    // At-least-once delivery: the same batches again (a head that died before deleting them).
    let dir = site.path("spool/n1/ready");
    for (i, s) in samples.chunks(4).enumerate() {
        let text: String = s.iter().map(|x| format!("{x}\n")).collect();
        fs::write(dir.join(format!("{:013}-1-{i}.jsonl", i)), text).unwrap();
    }
    let said = collect();
    assert!(
        said.contains(" 0 new samples") || said.contains(": 0 new"),
        "{said}"
    );
    assert_eq!(
        count(&store, "SELECT count(*) FROM gpu_samples") as usize,
        samples.len()
    );
    assert_eq!(
        count(&store, "SELECT sum(samples) FROM gpu_sample_hours") as usize,
        samples.len()
    );

    // The report: job 42 held minors 3 (90 %) and 0 (0 %): mean 45 %, half its GPU-time idle.
    // Its period ends at `now` in whole seconds: let the last tick's second pass.
    std::thread::sleep(Duration::from_millis(1100));
    let out = site
        .accountd()
        .args(["report", "jobs", "--since", "now-1d", "--format", "json"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rows: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(rows.as_array().unwrap().len(), 1, "{stdout}");
    let job = &rows[0];
    assert_eq!(job["job"], "42");
    assert_eq!(job["user"], "alice");
    assert_eq!(job["team"], "agents");
    assert_eq!(job["mean_util_percent"], 45.0);
    let sampled = job["sampled_gpu_hours"].as_f64().unwrap();
    let idle = job["idle_gpu_hours"].as_f64().unwrap();
    let expected = (ticks.len() * 2) as f64 * 0.2 / 3600.0;
    assert!((sampled - expected).abs() < 1e-9, "{sampled} vs {expected}");
    assert!((idle - expected / 2.0).abs() < 1e-9, "{idle}");
}

#[test]
fn a_malformed_batch_is_reported_with_its_place_and_the_rest_collected() {
    let site = Site::new();
    let out = site.sampler(&["--once", "--no-jobs"]).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let good = site.ready_files();
    let bad = site.path("spool/n1/ready/0000000000001-1-1.jsonl");
    fs::write(
        &bad,
        "{\"node\":\"n1\",\"gpu_uuid\":\"GPU-x\",\"ts_ms\":1000,\"util_gpu\":\"high\"}\n",
    )
    .unwrap();
    let out = site.accountd().arg("collect-samples").output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains(&format!("{}:1:", bad.display())),
        "{stderr}"
    );
    assert!(stderr.contains("4 new samples"), "{stderr}");
    assert!(site
        .path("spool/n1/rejected/0000000000001-1-1.jsonl")
        .exists());
    assert!(!good[0].exists());
}
