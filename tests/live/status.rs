//! `accountd status` on the live cluster (2 nodes x 4 GPUs; agents quota 2 + 2, training
//! 4 + 4, research 2 + 6, all lending): the figures Slurm and the governor hold now.

use std::process::Output;
use std::time::Duration;

use teamshare_live_tests::{ensure, Cluster, Scenario, TestResult};

use crate::governance::{fill, isolated};

pub const SCENARIOS: &[Scenario] = &[(
    "status::t1_borrowing_lending_and_waiting_jobs_as_accountd_status_shows_them",
    borrowing_lending_waiting,
)];

const MINUTE: Duration = Duration::from_secs(60);
const LONG: u32 = 3600;

fn stdout(out: &Output, what: &str) -> Result<String, String> {
    ensure(out.status.success(), || {
        format!(
            "{what} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        )
    })?;
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The cells of the table line whose first cell is `first`.
fn line(text: &str, first: &str) -> Result<Vec<String>, String> {
    text.lines()
        .map(|l| l.split_whitespace().map(String::from).collect::<Vec<_>>())
        .find(|cells| cells.first().map(String::as_str) == Some(first))
        .ok_or_else(|| format!("no {first} line in:\n{text}"))
}

fn expect_line(text: &str, first: &str, cells: &[&str]) -> TestResult {
    let got = line(text, first)?;
    ensure(got == cells, || {
        format!("{first}: expected {cells:?}, got {got:?} in:\n{text}")
    })
}

fn team<'a>(v: &'a serde_json::Value, name: &str) -> Result<&'a serde_json::Value, String> {
    v["teams"]
        .as_array()
        .and_then(|t| t.iter().find(|t| t["team"] == name))
        .ok_or_else(|| format!("no team {name} in {v}"))
}

/// research runs 1 of its 2; training runs 4 in its quota and borrows 3 (agents' 2 idle GPUs
/// and research's 1), so its 8th job waits for GPUs to borrow; an agents job waits for a
/// dependency.
fn borrowing_lending_waiting(c: &Cluster) -> TestResult {
    isolated(c, |c| {
        fill(c, "research", 1, &[])?;
        let training = c.submit_sleeps("training", 8, LONG, &[])?;
        c.wait_running("training", 7, 2 * MINUTE)?;
        let after = format!("--dependency=afterany:{}", training[0]);
        c.submit_sleeps("agents", 1, LONG, &[&after])?;
        c.wait_governor_pass()?;
        c.wait_governor_pass()?;
        ensure(c.count("training", "RUNNING")? == 7, || {
            format!("training should hold 7\n{}", c.diagnosis())
        })?;

        let table = stdout(&c.accountd_cmd(&["status"])?, "accountd status")?;
        eprintln!("accountd status:\n{table}");
        expect_line(
            &table,
            "TEAM",
            &[
                "TEAM",
                "QUOTA",
                "IN-USE",
                "IN-QUOTA",
                "BORROWED",
                "MAY-HOLD",
                "LENT",
                "WAITING-JOBS",
                "WAITING-GPUS",
            ],
        )?;
        expect_line(
            &table,
            "agents",
            &["agents", "2", "0", "0", "0", "2", "2", "1", "1"],
        )?;
        expect_line(
            &table,
            "research",
            &["research", "2", "1", "1", "0", "2", "1", "0", "0"],
        )?;
        expect_line(
            &table,
            "training",
            &["training", "4", "7", "4", "3", "7", "0", "1", "1"],
        )?;
        expect_line(
            &table,
            "(pool)",
            &["(pool)", "0", "-", "-", "-", "-", "0", "-", "-"],
        )?;
        for want in [
            "GPUs: capacity 8, in use 8, free 0\n",
            ", current (stale after 5 s)\n",
            "  training: 1 job (1 GPU): teamshare: waiting for idle GPUs to borrow (may hold 7 now)\n",
            "  agents: 1 job (1 GPU): Slurm: Dependency\n",
        ] {
            ensure(table.contains(want), || {
                format!("{want:?} is not in:\n{table}")
            })?;
        }

        let json = stdout(
            &c.accountd_cmd(&["status", "--format", "json"])?,
            "accountd status --format json",
        )?;
        let v: serde_json::Value =
            serde_json::from_str(&json).map_err(|e| format!("not JSON ({e}): {json}"))?;
        ensure(
            v["capacity"] == 8 && v["in_use"] == 8 && v["free"] == 0,
            || format!("cluster figures: {v}"),
        )?;
        ensure(v["state"]["current"] == true, || {
            format!("state: {}", v["state"])
        })?;
        let t = team(&v, "training")?;
        for (key, want) in [
            ("quota", 4),
            ("in_use", 7),
            ("in_quota", 4),
            ("borrowed", 3),
            ("may_hold", 7),
            ("waiting_jobs", 1),
            ("waiting_gpus", 1),
        ] {
            ensure(t[key] == want, || format!("training {key}: {t}"))?;
        }
        ensure(t["lent"].as_f64() == Some(0.0), || format!("training: {t}"))?;
        let lent = |name: &str| team(&v, name).map(|t| t["lent"].as_f64());
        ensure(
            lent("agents")? == Some(2.0) && lent("research")? == Some(1.0),
            || format!("lent: {}", v["teams"]),
        )?;
        let agents = team(&v, "agents")?;
        ensure(
            agents["waiting_reasons"][0]["reason"] == "Slurm: Dependency",
            || format!("agents: {agents}"),
        )?;

        // One team; a team that does not exist is a usage error.
        let one: serde_json::Value = serde_json::from_str(&stdout(
            &c.accountd_cmd(&["status", "--team", "research", "--format", "json"])?,
            "accountd status --team research",
        )?)
        .map_err(|e| e.to_string())?;
        ensure(
            one["teams"].as_array().map(Vec::len) == Some(1)
                && one["teams"][0]["team"] == "research",
            || format!("--team research: {one}"),
        )?;
        let nosuch = c.accountd_cmd(&["status", "--team", "nosuch"])?;
        let err = String::from_utf8_lossy(&nosuch.stderr);
        ensure(
            nosuch.status.code() == Some(2) && err.contains("--team nosuch: no such team"),
            || format!("--team nosuch: {} {err}", nosuch.status),
        )?;

        // Without the governor the state ages: flagged, the last limits still shown.
        c.stop_governor();
        std::thread::sleep(Duration::from_secs(7));
        let stale = c.accountd_cmd(&["status"]);
        let started = c.start_governor();
        let stale = stdout(&stale?, "accountd status (stale state)")?;
        started?;
        eprintln!("accountd status, governor stopped:\n{stale}");
        ensure(
            stale.contains(": NOT CURRENT: ") && stale.contains("stale: published"),
            || format!("a stale state is not flagged:\n{stale}"),
        )?;
        expect_line(
            &stale,
            "training",
            &["training", "4", "7", "4", "3", "7", "0", "1", "1"],
        )
    })
}
