//! Reclaim by placement (issue 24, DESIGN §4 rule 3) on a cluster of its own
//! (`Spec::PLACEMENT`: n1, n2, n3 with 4 GPUs each; tests/live/teamshare-placement.toml):
//! ops (quota 3) runs 7 one-GPU jobs, its four oldest on n1, two on n2, one on n3; apps
//! (quota 4) holds its quota on n2 and n3; vision (quota 5) runs one job on n3. Every GPU is
//! busy and only ops is above its quota.
//!
//! A vision job that fits its unused quota must start without waiting for ops' jobs to end,
//! taking only ops' jobs, only where it then fits, only as many as it needs, and leaving ops
//! at or above its quota, even though the jobs it needs are those phase 1 counts inside ops'
//! quota (its oldest). Each scenario asserts the exact victims.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use teamshare_live_tests::{ensure, Cluster, TestResult};

use crate::governance::isolated;

type Scenario = (&'static str, fn(&Cluster) -> TestResult);

pub const SCENARIOS: &[Scenario] = &[
    (
        "placement::p01_an_in_quota_job_takes_the_over_quota_teams_jobs_where_it_fits",
        three_on_one_node,
    ),
    (
        "placement::p02_a_whole_node_job_takes_a_whole_node",
        whole_node,
    ),
    (
        "placement::p03_a_two_node_job_takes_what_each_of_its_nodes_needs",
        two_nodes,
    ),
    (
        "placement::p04_reclaimed_jobs_run_again_without_slurms_requeue_delay",
        run_again,
    ),
];

const MINUTE: Duration = Duration::from_secs(60);

/// The running jobs: id -> (account, nodes, start time).
pub(crate) fn running(c: &Cluster) -> Result<BTreeMap<String, (String, String, String)>, String> {
    let out = c.ok("squeue", &["-h", "-t", "R", "-o", "%i|%a|%N|%S"])?;
    Ok(out
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split('|').collect();
            (f.len() == 4).then(|| {
                (
                    f[0].to_string(),
                    (f[1].to_string(), f[2].to_string(), f[3].to_string()),
                )
            })
        })
        .collect())
}

/// A long one-GPU job of `team` pinned to `node`.
pub(crate) fn sleep_on(c: &Cluster, team: &str, node: &str) -> Result<String, String> {
    c.sbatch(&[
        "-A",
        team,
        "-p",
        "gpu",
        "--gres=gpu:1",
        "-w",
        node,
        "--wrap",
        "sleep 3600",
    ])
    .map_err(|e| format!("{team} job on {node} refused: {e}"))
}

/// The cluster full as the module says; returns ops' job ids, oldest first.
fn fill(c: &Cluster) -> Result<Vec<String>, String> {
    let sleep = |team: &str, node: &str| sleep_on(c, team, node);
    let mut ops = Vec::new();
    for node in ["n1", "n1", "n1", "n1", "n2", "n2", "n3"] {
        ops.push(sleep("ops", node)?);
    }
    // ops' borrowed jobs start once the governor opened its limit; then the others' jobs,
    // inside their quotas, on what is left.
    c.wait_running("ops", 7, 2 * MINUTE)?;
    for node in ["n2", "n2", "n3", "n3"] {
        sleep("apps", node)?;
    }
    sleep("vision", "n3")?;
    c.wait_running("apps", 4, 2 * MINUTE)?;
    c.wait_running("vision", 1, 2 * MINUTE)?;
    // ops' 4 borrowed jobs are the victims the plugin prices new jobs against.
    crate::governance::wait_victims(c, 4)?;
    Ok(ops)
}

/// Submit a vision job with these GPU arguments into the full cluster, wait until it runs
/// and check that exactly `expected` of ops' jobs (places in `fill`'s list) left, on the
/// nodes it runs on, and nothing else did.
fn reclaim(c: &Cluster, args: &[&str], expected: &[usize], nodes: &str) -> TestResult {
    reclaimed(c, args, expected, nodes).map(|_| ())
}

/// [`reclaim`], returning the vision job's id and the ops jobs it took.
fn reclaimed(
    c: &Cluster,
    args: &[&str],
    expected: &[usize],
    nodes: &str,
) -> Result<(String, Vec<String>), String> {
    let ops = fill(c)?;
    let before = running(c)?;
    let mut full = vec!["-A", "vision", "-p", "gpu"];
    full.extend_from_slice(args);
    full.extend_from_slice(&["--wrap", "sleep 3600"]);
    let t0 = Instant::now();
    let id = c.sbatch(&full)?;
    c.wait_for(&format!("vision job {id} to run"), MINUTE, || {
        Ok((c.job_state(&id)? == "RUNNING").then_some(()))
    })
    .map_err(|e| format!("{e}\n{}\n{}", c.diagnosis(), c.governor_log_tail(30)))?;
    let latency = t0.elapsed();
    // Two more governor passes: nothing else may go afterwards.
    c.wait_governor_pass()?;
    c.wait_governor_pass()?;
    let after = running(c)?;
    eprintln!("in-quota job {id} ({args:?}) ran {latency:.2?} after sbatch");
    let mut gone: Vec<&String> = before.keys().filter(|j| !after.contains_key(*j)).collect();
    gone.sort();
    let mut want: Vec<&String> = expected.iter().map(|i| &ops[*i]).collect();
    want.sort();
    ensure(gone == want, || {
        format!(
            "jobs preempted: {gone:?}, expected ops' {want:?}\nbefore: {before:?}\nafter: {after:?}\n{}",
            c.governor_log_tail(30)
        )
    })?;
    // Requeued, not ended: they run again when the GPUs come back.
    for j in &gone {
        let state = c.job_state(j)?;
        ensure(state == "PENDING", || {
            format!("victim {j} is {state}, not requeued")
        })?;
    }
    let (_, on, _) = &after[&id];
    ensure(on == nodes, || {
        format!("job {id} runs on {on}, expected {nodes}")
    })?;
    // Those that stayed kept their run; ops stays at or above its quota (3).
    for (j, run) in &before {
        if !gone.contains(&j) {
            ensure(after.get(j) == Some(run), || {
                format!("job {j} changed: {run:?} -> {:?}", after.get(j))
            })?;
        }
    }
    let ops_left = after.values().filter(|(a, _, _)| a == "ops").count();
    ensure(ops_left >= 3, || {
        format!("ops left at {ops_left}, below its quota 3")
    })?;
    Ok((id, gone.into_iter().cloned().collect()))
}

/// 3 GPUs fit only on n1, where ops' jobs 2, 3 and 4 go (the youngest there first); ops
/// keeps 1, 5, 6 and 7.
fn three_on_one_node(c: &Cluster) -> TestResult {
    isolated(c, |c| reclaim(c, &["--gres=gpu:3"], &[1, 2, 3], "n1"))
}

/// A whole node: n1, all four of ops' jobs there (its four oldest); ops keeps its quota.
fn whole_node(c: &Cluster) -> TestResult {
    isolated(c, |c| reclaim(c, &["--gres=gpu:4"], &[0, 1, 2, 3], "n1"))
}

/// Two nodes with two GPUs each: n2 (ops 5 and 6, the first in victim order) and n1 (ops 3
/// and 4); ops keeps 1, 2 and 7.
fn two_nodes(c: &Cluster) -> TestResult {
    isolated(c, |c| {
        reclaim(c, &["-N", "2", "--gres=gpu:2"], &[2, 3, 4, 5], "n[1-2]")
    })
}

/// Slurm holds a requeued job back for 121 s (its begin time); the governor lifts that delay
/// once it protects nothing (docs/design/reclaim-by-placement.md), so reclaimed borrowers run
/// again as soon as GPUs come back: here the vision job that took n1 ends, and ops' three jobs
/// requeued for it (pinned to n1) start again within seconds, not minutes.
fn run_again(c: &Cluster) -> TestResult {
    isolated(c, |c| {
        let (vision, victims) = reclaimed(c, &["--gres=gpu:3"], &[1, 2, 3], "n1")?;
        let requeued = Instant::now();
        c.ok("scancel", &[&vision])?;
        c.wait_for("ops' requeued jobs to run again", MINUTE, || {
            for j in &victims {
                if c.job_state(j)? != "RUNNING" {
                    return Ok(None);
                }
            }
            Ok(Some(()))
        })
        .map_err(|e| format!("{e}\n{}\n{}", c.diagnosis(), c.governor_log_tail(20)))?;
        let after = requeued.elapsed();
        eprintln!("requeued jobs {victims:?} ran again {after:.1?} after the reclaim");
        ensure(after < Duration::from_secs(60), || {
            format!("the requeued jobs waited {after:?}: Slurm's requeue delay was not lifted")
        })?;
        let log = c.governor_log();
        ensure(
            victims
                .iter()
                .all(|j| log.contains(&format!("job {j} may start again"))),
            || format!("the governor's log does not say it let {victims:?} go"),
        )
    })
}
