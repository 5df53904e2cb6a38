//! `accountd replay` against a history made for real: three teams borrow and reclaim on the live
//! cluster, accountd ingests what sacct recorded, and the replay of the cluster's own settings
//! must reproduce the observed waits and GPU-hours within a tolerance tighter than the
//! default, while siloed quotas visibly change them.

use std::time::Duration;

use serde_json::Value;
use teamshare_live_tests::{ensure, unix_now, Cluster, Scenario, TestResult};

pub const SCENARIOS: &[Scenario] = &[(
    "replay::r01_the_clusters_own_settings_reproduce_its_history",
    calibration,
)];

const MINUTE: Duration = Duration::from_secs(60);

/// One-GPU sleeps of `secs` with a time limit of 3 minutes (backfill plans with limits).
fn sleeps(c: &Cluster, team: &str, n: usize, secs: u32) -> Result<Vec<String>, String> {
    c.submit_sleeps(team, n, secs, &["--time=3"])
}

fn calibration(c: &Cluster) -> TestResult {
    c.reset()?;
    c.start_governor()?;
    let since = unix_now() - 1;

    // research borrows 4 GPUs of the idle quotas (quota 2, 6 jobs); training reclaims its 4:
    // research's borrowed jobs are preempted and requeued; agents starts in its own quota;
    // research's 3 later jobs wait as borrowers until GPUs come free.
    let mut ids = sleeps(c, "research", 6, 40)?;
    c.wait_running("research", 6, MINUTE)?;
    ids.extend(sleeps(c, "training", 4, 30)?);
    c.wait_running("training", 4, MINUTE)?;
    ids.extend(sleeps(c, "agents", 2, 30)?);
    c.wait_running("agents", 2, MINUTE)?;
    ids.extend(sleeps(c, "research", 3, 20)?);
    // The requeued jobs run again after Slurm's requeue delay (121 s).
    c.wait_completed_in_sacct(&ids, 8 * MINUTE)?;

    let dir = std::env::temp_dir().join(format!("teamshare-replay-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let db = dir.join("accountd.db");
    let out = c.accountd(&db, &["ingest", "--since", "now-1h", "--until", "now+1m"])?;
    ensure(out.status.success(), || {
        format!(
            "accountd ingest failed: {}",
            String::from_utf8_lossy(&out.stderr)
        )
    })?;
    let window = format!("now-{}s", unix_now() - since);
    let out = c.accountd(
        &db,
        &[
            "replay",
            "--since",
            &window,
            "--capacity",
            "8",
            "--gpus-per-node",
            "4",
            "--tolerance-secs",
            "40",
            "--format",
            "json",
        ],
    )?;
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    let _ = std::fs::remove_dir_all(&dir);
    ensure(out.status.success(), || {
        format!(
            "accountd replay exited {:?}: the model does not fit the history it replays\n{stdout}\n{stderr}\n{}",
            out.status.code(),
            c.governor_log_tail(40)
        )
    })?;
    let json: Value =
        serde_json::from_str(&stdout).map_err(|e| format!("replay is not JSON ({e}): {stdout}"))?;
    let calibration = &json["calibration"];
    ensure(calibration["fits"] == Value::Bool(true), || {
        format!("calibration does not fit: {calibration}")
    })?;
    for team in ["agents", "training", "research"] {
        ensure(
            calibration["rows"]
                .as_array()
                .is_some_and(|rows| rows.iter().any(|r| r["team"] == team)),
            || format!("no calibration of {team}: {calibration}"),
        )?;
    }

    let column = |name: &str| -> Result<&Value, String> {
        json["columns"]
            .as_array()
            .and_then(|cols| cols.iter().find(|col| col["candidate"] == name))
            .ok_or_else(|| format!("no column {name} in {stdout}"))
    };
    let row = |col: &Value, team: &str| -> Result<Value, String> {
        col["figures"]["rows"]
            .as_array()
            .and_then(|rows| rows.iter().find(|r| r["team"] == team))
            .cloned()
            .ok_or_else(|| format!("no row {team} in {col}"))
    };
    // Borrowing and reclaim happened for real: research's borrowed jobs were preempted.
    let today = row(column("as-today")?, "research")?;
    let preempted = today["preemptions"].as_u64().unwrap_or(0);
    ensure(preempted >= 3, || {
        format!(
            "research was preempted {preempted} times in the history, not the 4 expected:\n{today}"
        )
    })?;
    // Replayed siloed, research may not borrow: its jobs wait for its own 2 GPUs.
    let current = row(column("teamshare.toml")?, "research")?;
    let siloed = row(column("siloed")?, "research")?;
    let p95 = |r: &Value| r["wait"]["p95_secs"].as_i64().unwrap_or(0);
    ensure(p95(&siloed) >= p95(&current) + 30, || {
        format!(
            "siloed research p95 wait {} s, under the cluster's settings {} s: siloed should wait longer\n{stdout}",
            p95(&siloed),
            p95(&current)
        )
    })?;
    eprintln!(
        "replay calibration: research p95 wait observed {} s, replayed {} s, siloed {} s",
        p95(&today),
        p95(&current),
        p95(&siloed)
    );
    Ok(())
}
