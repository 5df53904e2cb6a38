//! Idle GPUs first (issue 29, an extension of DESIGN §4 rule 3, off by default): on the
//! placement cluster (tests/live/teamshare-placement.toml: ops quota 3, apps 4, vision 5;
//! n1, n2, n3 with 4 GPUs each), with the fake NVML showing n2's GPUs idle (1 %) and n1's and
//! n3's busy (80 %), ops borrows two GPUs from vision: X on n2 (idle), then Y on n3 (busy).
//! When vision takes its quota back, the order as today takes Y (the most recently started);
//! with `idle_first_reclaim` it takes X, which has been idle for the whole window although
//! it started earlier. The daemon reads the samples the samplers spool through its own
//! collection, as on a site.

use std::collections::BTreeMap;
use std::time::Duration;

use teamshare_live_tests::{ensure, Cluster, TestResult};

use crate::accounting::start_samplers;
use crate::governance::isolated;
use crate::placement::{running, sleep_on};

type Scenario = (&'static str, fn(&Cluster) -> TestResult);

pub const SCENARIOS: &[Scenario] = &[(
    "idle::i01_idle_borrowed_jobs_are_reclaimed_first_where_configured",
    idle_first,
)];

const MINUTE: Duration = Duration::from_secs(60);

/// The window the scenario configures: a job must have run this long, sampled idle.
const WINDOW: &str = "20s";

/// The cluster full: ops 3 on n1 (its quota), X on n2 and Y on n3 (borrowed, X first);
/// apps 1 on n1 and 3 on n2; vision 3 on n3. Returns (X, Y).
fn fill(c: &Cluster) -> Result<(String, String), String> {
    for _ in 0..3 {
        sleep_on(c, "ops", "n1")?;
    }
    c.wait_running("ops", 3, 2 * MINUTE)?;
    let x = sleep_on(c, "ops", "n2")?;
    c.wait_running("ops", 4, 2 * MINUTE)?;
    // Y starts at least a second after X (start times are whole seconds).
    std::thread::sleep(Duration::from_millis(1100));
    let y = sleep_on(c, "ops", "n3")?;
    c.wait_running("ops", 5, 2 * MINUTE)?;
    for node in ["n1", "n2", "n2", "n2"] {
        sleep_on(c, "apps", node)?;
    }
    for _ in 0..3 {
        sleep_on(c, "vision", "n3")?;
    }
    c.wait_running("apps", 4, 2 * MINUTE)?;
    c.wait_running("vision", 3, 2 * MINUTE)?;
    Ok((x, y))
}

/// Wait until the published victims begin with `first`.
fn wait_first_victim(c: &Cluster, first: &str, why: &str) -> TestResult {
    c.wait_for(
        &format!("job {first} first among the victims ({why})"),
        2 * MINUTE,
        || {
            let s = c.state()?;
            let head = s["victims"]
                .as_array()
                .and_then(|v| v.first())
                .and_then(|v| v["job_id"].as_u64());
            Ok((head.map(|h| h.to_string()).as_deref() == Some(first)).then_some(()))
        },
    )
    .map_err(|e| format!("{e}\n{}\n{}", c.diagnosis(), c.governor_log_tail(30)))?;
    c.wait_governor_pass()
}

/// A vision job of 1 GPU into the full cluster: it must run, having taken exactly `victim`.
fn reclaim_one(c: &Cluster, victim: &str) -> Result<String, String> {
    let before: BTreeMap<String, (String, String, String)> = running(c)?;
    let v = c.sbatch(&[
        "-A",
        "vision",
        "-p",
        "gpu",
        "--gres=gpu:1",
        "--wrap",
        "sleep 3600",
    ])?;
    c.wait_for(&format!("vision job {v} to run"), MINUTE, || {
        Ok((c.job_state(&v)? == "RUNNING").then_some(()))
    })
    .map_err(|e| format!("{e}\n{}\n{}", c.diagnosis(), c.governor_log_tail(30)))?;
    c.wait_governor_pass()?;
    c.wait_governor_pass()?;
    let after = running(c)?;
    let gone: Vec<&String> = before.keys().filter(|j| !after.contains_key(*j)).collect();
    ensure(gone == [victim], || {
        format!(
            "jobs preempted for vision's {v}: {gone:?}, expected [{victim}]\nbefore: {before:?}\nafter: {after:?}\n{}",
            c.governor_log_tail(30)
        )
    })?;
    Ok(v)
}

fn idle_first(c: &Cluster) -> TestResult {
    isolated(c, |c| {
        let spool = c.dir.join("etc/samples");
        let _samplers = start_samplers(c, &spool, &[("n1", 80), ("n2", 1), ("n3", 80)])?;
        let (x, y) = fill(c)?;
        // As today (the option off): the most recently started borrowed job goes.
        wait_first_victim(c, &y, "the order as today")?;
        let v1 = reclaim_one(c, &y)?;
        // Y runs again once vision's job ends (the governor lifts the requeue delay).
        c.ok("scancel", &[&v1])?;
        c.wait_for(&format!("job {y} to run again"), 2 * MINUTE, || {
            Ok((c.job_state(&y)? == "RUNNING").then_some(()))
        })
        .map_err(|e| format!("{e}\n{}", c.diagnosis()))?;
        // Idle first: X, idle on n2 for the whole window, goes although it started first.
        let on = c.original_config().replace(
            "on_stale_state = \"fail-open\"\n",
            &format!(
                "on_stale_state = \"fail-open\"\nidle_window = \"{WINDOW}\"\nidle_first_reclaim = true\n"
            ),
        );
        ensure(on != c.original_config(), || {
            "teamshare-placement.toml has no on_stale_state line to add the idle settings after"
                .into()
        })?;
        c.reconfigure(&on)?;
        wait_first_victim(c, &x, "idle for the window")?;
        let log = c.governor_log();
        ensure(log.contains("idle for the whole idle window"), || {
            "the governor's log does not say which jobs it found idle".into()
        })?;
        reclaim_one(c, &x)?;
        let state = c.job_state(&y)?;
        ensure(state == "RUNNING", || format!("busy job {y} is {state}"))
    })
}
