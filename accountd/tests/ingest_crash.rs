//! `kill -9` of `accountd ingest` mid-batch, then a rerun: the report equals the one of an
//! uninterrupted ingest, and re-ingesting changes nothing (DESIGN §7: nothing counted twice or
//! lost when a daemon dies mid-work).

// Test code: a scenario reads top to bottom, so the workspace's 80-line limit is not for it.
#![allow(clippy::too_many_lines)]

use std::fs;
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_accountd");

const CONFIG: &str = r#"[cluster]
name = "crashcluster"

[gpu_types.default]
rate_per_hour = 2.0

[[team]]
name = "agents"
quota = 2

[[team]]
name = "training"
quota = 4
"#;

/// A `sacct` stand-in that prints `n` records, slowly enough to be killed mid-way.
fn site(n: usize) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    fs::write(dir.path().join("teamshare.toml"), CONFIG).unwrap();
    fs::write(dir.path().join("slurm.conf"), "ClusterName=crashcluster\n").unwrap();
    fs::create_dir(dir.path().join("bin")).unwrap();
    let mut out = fs::File::create(dir.path().join("sacct.out")).unwrap();
    for i in 0..n {
        let team = if i % 3 == 0 { "agents" } else { "training" };
        let gpus = 1 + i % 4;
        // Runs of 10 to 59 minutes on 2024-05-01, in UTC as accountd asks sacct for.
        let start = 3600 + (i % 20_000) as i64;
        let dur = 600 + (i % 50) as i64 * 60;
        let t = |s: i64| {
            format!(
                "2024-05-01T{:02}:{:02}:{:02}",
                s / 3600 % 24,
                s / 60 % 60,
                s % 60
            )
        };
        writeln!(
            out,
            "{id}|{id}|crashcluster|{team}|u{u}|gpu|teamshare|COMPLETED|{sub}|{st}|{en}|00:{m:02}:00|billing={g},cpu={g},gres/gpu={g},node=1|{sub}|2880|1|billing={g},cpu={g},gres/gpu={g},node=1",
            id = 1000 + i,
            u = i % 7,
            sub = t(start - 5),
            st = t(start),
            en = t(start + dur),
            m = dur / 60 % 60,
            g = gpus
        )
        .unwrap();
    }
    let script = format!(
        "#!/bin/sh\n# slow enough that a kill lands mid-ingest\ncat '{}' | while IFS= read -r l; do printf '%s\\n' \"$l\"; done\n",
        dir.path().join("sacct.out").display()
    );
    let bin = dir.path().join("bin/sacct");
    fs::write(&bin, script).unwrap();
    fs::set_permissions(&bin, fs::Permissions::from_mode(0o755)).unwrap();
    dir
}

fn command(dir: &Path, db: &str, args: &[&str]) -> Command {
    let mut c = Command::new(BIN);
    c.arg("--config")
        .arg(dir.join("teamshare.toml"))
        .arg("--database")
        .arg(dir.join(db))
        .args(args)
        .env("TZ", "UTC")
        .env("SLURM_CONF", dir.join("slurm.conf"))
        .env(
            "PATH",
            format!(
                "{}:{}",
                dir.join("bin").display(),
                std::env::var("PATH").unwrap_or_default()
            ),
        );
    c
}

const WINDOW: [&str; 4] = ["--since", "2024-05-01", "--until", "2024-05-02"];

fn ingest(dir: &Path, db: &str) -> Output {
    command(dir, db, &[&["ingest"][..], &WINDOW].concat())
        .output()
        .unwrap()
}

fn report(dir: &Path, db: &str) -> String {
    let o = command(
        dir,
        db,
        &[&["report", "teams", "--format", "json"][..], &WINDOW].concat(),
    )
    .output()
    .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8(o.stdout).unwrap()
}

#[test]
fn kill_9_during_ingest_then_rerun_gives_the_uninterrupted_report() {
    let dir = site(20_000);
    let d = dir.path();

    let clean = ingest(d, "clean.db");
    assert!(
        clean.status.success(),
        "{}",
        String::from_utf8_lossy(&clean.stderr)
    );
    let expected = report(d, "clean.db");
    assert!(expected.contains("\"agents\"") && expected.contains("\"training\""));

    // Kill at several points of the run (while sacct streams, while storing).
    let mut killed_mid_run = 0;
    for delay_ms in [50u64, 300, 800] {
        let mut child = command(d, "crash.db", &[&["ingest"][..], &WINDOW].concat())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let t = Instant::now();
        while t.elapsed() < Duration::from_millis(delay_ms) {
            if child.try_wait().unwrap().is_some() {
                break;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        if child.try_wait().unwrap().is_none() {
            killed_mid_run += 1;
            // SIGKILL: no cleanup of any kind runs.
            child.kill().unwrap();
        }
        let _ = child.wait();
    }
    assert!(
        killed_mid_run > 0,
        "ingest finished before any kill: make the stand-in slower"
    );

    let rerun = ingest(d, "crash.db");
    assert!(
        rerun.status.success(),
        "{}",
        String::from_utf8_lossy(&rerun.stderr)
    );
    assert_eq!(report(d, "crash.db"), expected);
    // And again: nothing changes.
    assert!(ingest(d, "crash.db").status.success());
    assert_eq!(report(d, "crash.db"), expected);
}
