//! Quotas per GPU type (issue 10), on a cluster of their own (`Spec::TYPED`): n1 and n2 with
//! 4 A100 each, n3 with 4 H100, and tests/live/teamshare-typed.toml:
//!
//! | team     | quota           | borrow limit   | lends            |
//! |----------|-----------------|----------------|------------------|
//! | agents   | 2 H100          | 4, any types   | all idle quota   |
//! | training | 6 A100          | 2 H100 only    | all idle quota   |
//! | research | 2 H100, 2 A100  | 4 A100 only    | 2 H100, 1 A100   |

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use teamshare_live_tests::{ensure, gres_text, Cluster, TestResult};

use crate::governance::{isolated, refused};

type Scenario = (&'static str, fn(&Cluster) -> TestResult);

pub const SCENARIOS: &[Scenario] = &[
    (
        "typed::t01_another_types_quota_is_borrowed_and_reclaimed_in_that_type",
        borrow_and_reclaim,
    ),
    (
        "typed::t02_ceilings_and_lend_limits_hold_per_type_with_a_node_drained",
        sampled_with_drain,
    ),
    (
        "typed::t03_untyped_and_impossible_requests_are_refused_and_left_over_ones_held",
        untyped_requests,
    ),
];

const MINUTE: Duration = Duration::from_secs(60);
const LONG: u32 = 3600;

/// Submit `n` sleeps of one GPU of `gpu_type` for `team`.
fn submit(
    c: &Cluster,
    team: &str,
    gpu_type: &str,
    n: usize,
    secs: u32,
) -> Result<Vec<String>, String> {
    let gres = format!("--gres=gpu:{gpu_type}:1");
    let wrap = format!("sleep {secs}");
    (0..n)
        .map(|_| {
            c.sbatch(&["-A", team, "-p", "gpu", &gres, "--wrap", &wrap])
                .map_err(|e| format!("{team} {gpu_type} job refused: {e}"))
        })
        .collect()
}

/// GPUs each (team, type) holds now, from one squeue call (its allocation's typed TRES);
/// shards as type `shard`.
pub(crate) fn held(c: &Cluster) -> Result<BTreeMap<(String, String), u32>, String> {
    let out = c.ok(
        "squeue",
        &["-h", "-t", "R,CG", "-O", "Account:|,tres-alloc:|"],
    )?;
    let mut held = BTreeMap::new();
    for line in out.lines() {
        let Some((team, tres)) = line.split_once('|') else {
            continue;
        };
        for entry in tres.trim().trim_end_matches('|').split(',') {
            let Some((name, n)) = entry.split_once('=') else {
                continue;
            };
            // Shards (`gres/shard=N`) as the type teamshare governs them under.
            let kind = name
                .strip_prefix("gres/gpu:")
                .or((name == "gres/shard").then_some("shard"));
            if let Some(k) = kind {
                let n: u32 = n
                    .parse()
                    .map_err(|_| format!("bad TRES count in {line:?}"))?;
                *held
                    .entry((team.trim().to_string(), k.to_string()))
                    .or_insert(0) += n;
            }
        }
    }
    Ok(held)
}

pub(crate) fn held_of(h: &BTreeMap<(String, String), u32>, team: &str, gpu_type: &str) -> u32 {
    h.get(&(team.to_string(), gpu_type.to_string()))
        .copied()
        .unwrap_or(0)
}

fn wait_held(c: &Cluster, team: &str, gpu_type: &str, n: u32) -> TestResult {
    c.wait_for(
        &format!("{team} to hold {n} {gpu_type}"),
        2 * MINUTE,
        || Ok((held_of(&held(c)?, team, gpu_type) == n).then_some(())),
    )
    .map_err(|e| format!("{e}\n{}", c.diagnosis()))
}

/// The victims the state ranks in `gpu_type`'s pool.
fn pool_victims(c: &Cluster, gpu_type: &str) -> Result<Vec<String>, String> {
    let s = c.state()?;
    let mut ids: Vec<String> = s["pools"][gpu_type]["victims"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .map(|v| v["job_id"].as_u64().unwrap_or(0).to_string())
        .collect();
    ids.sort();
    Ok(ids)
}

fn sorted(ids: &[String]) -> Vec<String> {
    let mut v = ids.to_vec();
    v.sort();
    v
}

/// Start times of the jobs, as squeue shows them (RUNNING only).
fn starts(c: &Cluster, ids: &[String]) -> Result<BTreeMap<String, String>, String> {
    let out = c.ok(
        "squeue",
        &["-h", "-t", "R", "-j", &ids.join(","), "-o", "%i|%S"],
    )?;
    Ok(out
        .lines()
        .filter_map(|l| l.split_once('|'))
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect())
}

/// Acceptance 1 and 2: agents, with quota only in H100, borrows A100 (lent by the teams that
/// hold A100 quota) and H100 (research's idle H100). When training takes its A100 back, only
/// agents' A100 borrowers are preempted, within 2 s; its H100 jobs, borrowed ones included
/// (started later, so first in a reclaim order blind to types), keep running.
fn borrow_and_reclaim(c: &Cluster) -> TestResult {
    isolated(c, |c| {
        let in_quota = submit(c, "agents", "h100", 2, LONG)?;
        wait_held(c, "agents", "h100", 2)?;
        let a100 = submit(c, "agents", "a100", 2, LONG)?;
        wait_held(c, "agents", "a100", 2)?;
        let h100_borrowed = submit(c, "agents", "h100", 2, LONG)?;
        wait_held(c, "agents", "h100", 4)?;
        submit(c, "research", "a100", 2, LONG)?;
        wait_held(c, "research", "a100", 2)?;
        c.wait_governor_pass()?;

        // Governed as borrowing A100 and H100, each in its own type.
        ensure(pool_victims(c, "a100")? == sorted(&a100), || {
            format!(
                "A100 victims {:?}, expected agents' {a100:?}",
                pool_victims(c, "a100")
            )
        })?;
        ensure(pool_victims(c, "h100")? == sorted(&h100_borrowed), || {
            format!(
                "H100 victims {:?}, expected agents' borrowed {h100_borrowed:?}",
                pool_victims(c, "h100")
            )
        })?;
        let s = c.state()?;
        let a100_agents = s["pools"]["a100"]["teams"]["agents"]["running_gpus"].as_u64();
        ensure(a100_agents == Some(2), || {
            format!("the state counts {a100_agents:?} A100 for agents")
        })?;
        // Its borrow limit (4, any types) is spent: one more job of either type waits.
        let extra = submit(c, "agents", "a100", 1, LONG)?.remove(0);
        for _ in 0..2 {
            c.wait_governor_pass()?;
        }
        ensure(c.job_state(&extra)? == "PENDING", || {
            "agents borrowed beyond its limit of 4".into()
        })?;
        let before = starts(c, &[in_quota.clone(), h100_borrowed.clone()].concat())?;

        // training takes its 6 A100: 4 are free, 2 are agents' borrowed ones.
        let mut latencies = Vec::new();
        let mut training = Vec::new();
        for _ in 0..6 {
            training.push((
                submit(c, "training", "a100", 1, LONG)?.remove(0),
                Instant::now(),
            ));
        }
        for (id, t0) in &training {
            c.wait_for(&format!("training job {id} to run"), MINUTE, || {
                Ok((c.job_state(id)? == "RUNNING").then_some(()))
            })
            .map_err(|e| format!("{e}\n{}", c.diagnosis()))?;
            latencies.push(t0.elapsed());
        }
        eprintln!("typed reclaim: sbatch to RUNNING of training's 6 A100 jobs: {latencies:?}");
        let slowest = latencies.iter().max().copied().unwrap_or_default();
        ensure(slowest <= Duration::from_secs(2), || {
            format!("an in-quota A100 job took {slowest:?} to run (at most 2 s)")
        })?;
        c.wait_for("agents' A100 jobs to leave RUNNING", MINUTE, || {
            Ok((held_of(&held(c)?, "agents", "a100") == 0).then_some(()))
        })?;
        // Requeued, not lost.
        for id in &a100 {
            let st = c.job_state(id)?;
            ensure(st == "PENDING", || format!("agents' A100 job {id} is {st}"))?;
        }
        let after = starts(c, &[in_quota.clone(), h100_borrowed.clone()].concat())?;
        ensure(after == before, || {
            format!("agents' H100 jobs were touched by an A100 reclaim: {before:?} -> {after:?}")
        })?;
        let h = held(c)?;
        ensure(
            held_of(&h, "training", "a100") == 6 && held_of(&h, "research", "a100") == 2,
            || format!("A100 holders after the reclaim: {h:?}"),
        )?;
        reported_per_type(c)
    })
}

/// Acceptance 1, the report: agents' A100 hours are borrowed (it has no A100 quota), its H100
/// hours in quota and borrowed; per type, what was lent equals what was borrowed, and the A100
/// lent came from the teams that hold A100 quota (training, research) or the pool, never
/// from agents.
fn reported_per_type(c: &Cluster) -> TestResult {
    let out = c.accountd_cmd(&["ingest", "--since", "now-1h", "--until", "now+1h"])?;
    ensure(out.status.success(), || {
        format!("ingest failed: {}", String::from_utf8_lossy(&out.stderr))
    })?;
    let out = c.accountd_cmd(&[
        "report", "teams", "--since", "now-1h", "--until", "now+1h", "--format", "json",
    ])?;
    ensure(out.status.success(), || {
        format!("report failed: {}", String::from_utf8_lossy(&out.stderr))
    })?;
    let rows: serde_json::Value =
        serde_json::from_slice(&out.stdout).map_err(|e| format!("report JSON: {e}"))?;
    let rows = rows.as_array().ok_or("the report is not an array")?;
    let of = |team: &str, k: &str, field: &str| -> f64 {
        rows.iter()
            .find(|r| r["team"] == team)
            .and_then(|r| r["by_type"].as_array())
            .and_then(|types| types.iter().find(|t| t["gpu_type"] == k))
            .and_then(|t| t[field].as_f64())
            .unwrap_or(0.0)
    };
    let text = || String::from_utf8_lossy(&out.stdout).into_owned();
    ensure(
        of("agents", "a100", "borrowed_hours") > 0.0
            && of("agents", "a100", "in_quota_hours") == 0.0,
        || format!("agents' A100 hours are not all borrowed:\n{}", text()),
    )?;
    ensure(
        of("agents", "h100", "in_quota_hours") > 0.0
            && of("agents", "h100", "borrowed_hours") > 0.0,
        || {
            format!(
                "agents' H100 hours are not in quota and borrowed:\n{}",
                text()
            )
        },
    )?;
    ensure(of("agents", "a100", "lent_hours") == 0.0, || {
        format!(
            "agents, without A100 quota, is reported lending A100:\n{}",
            text()
        )
    })?;
    ensure(of("training", "a100", "lent_hours") > 0.0, || {
        format!(
            "training's idle A100 quota is not reported lent:\n{}",
            text()
        )
    })?;
    for k in ["a100", "h100"] {
        let sum = |field: &str| -> f64 {
            ["agents", "training", "research", "(pool)"]
                .iter()
                .map(|t| of(t, k, field))
                .sum()
        };
        let (lent, borrowed) = (sum("lent_hours"), sum("borrowed_hours"));
        ensure((lent - borrowed).abs() < 1e-6, || {
            format!("{k}: lent {lent} h, borrowed {borrowed} h:\n{}", text())
        })?;
    }
    Ok(())
}

/// One team's limits, per type, as the configuration says.
struct Limits {
    team: &'static str,
    quota: [(&'static str, u32); 2],
    /// Per type (a table) or `None` with `any` set.
    borrow_of: [(&'static str, u32); 2],
    /// A number: borrowed GPUs over all types together.
    any: Option<u32>,
}

const LIMITS: [Limits; 3] = [
    Limits {
        team: "agents",
        quota: [("h100", 2), ("a100", 0)],
        borrow_of: [("h100", 4), ("a100", 4)],
        any: Some(4),
    },
    Limits {
        team: "training",
        quota: [("h100", 0), ("a100", 6)],
        borrow_of: [("h100", 2), ("a100", 0)],
        any: None,
    },
    Limits {
        team: "research",
        quota: [("h100", 2), ("a100", 2)],
        borrow_of: [("h100", 0), ("a100", 4)],
        any: None,
    },
];

/// Acceptance 3: first research's lend limit of 1 A100 ([`lend_limit_per_type`]). Then, with
/// n2 (4 A100) drained, A100 quotas (8) exceed the A100 capacity (4): no
/// A100 is lendable. Sampled every 0.5 s while every team asks for more than it may hold of
/// both types: each team's ceiling holds per type (and agents' over all types), A100s run
/// only inside quotas, the H100 borrowed never exceed what is lent (research's lend limit of
/// 2 H100, agents' idle quota), and once research wants its H100 back, they go back to it.
fn sampled_with_drain(c: &Cluster) -> TestResult {
    isolated(c, |c| {
        lend_limit_per_type(c)?;
        c.reset()?;
        c.ok(
            "scontrol",
            &[
                "update",
                "nodename=n2",
                "state=drain",
                "reason=teamshare-test",
            ],
        )?;
        let r = (|| {
            c.wait_for("A100 capacity 4 in the state", MINUTE, || {
                Ok((c.state()?["pools"]["a100"]["capacity"].as_u64() == Some(4)).then_some(()))
            })?;
            c.wait_governor_pass()?;
            // More than anyone may hold, of both types.
            submit(c, "training", "a100", 8, LONG)?;
            submit(c, "agents", "a100", 4, LONG)?;
            submit(c, "agents", "h100", 6, LONG)?;
            submit(c, "training", "h100", 3, LONG)?;
            let stop = AtomicBool::new(false);
            let violations = std::thread::scope(|scope| {
                let sampler = scope.spawn(|| sample(c, &stop));
                // research's 2 idle H100 go to agents or training (fair-share decides).
                let settled = wait_held(c, "training", "a100", 4).and_then(|_| {
                    c.wait_for("2 H100 borrowed", 2 * MINUTE, || {
                        let h = held(c)?;
                        let borrowed = held_of(&h, "agents", "h100").saturating_sub(2)
                            + held_of(&h, "training", "h100");
                        Ok((borrowed == 2 && held_of(&h, "agents", "h100") >= 2).then_some(()))
                    })
                });
                // Sample well past the moment it settled: several governor passes.
                std::thread::sleep(Duration::from_secs(8));
                stop.store(true, Ordering::SeqCst);
                let v = sampler
                    .join()
                    .unwrap_or_else(|_| Err("the sampler panicked".into()));
                settled.and(v)
            })?;
            ensure(violations.is_empty(), || {
                format!(
                    "limits broken in {} samples: {:?}",
                    violations.len(),
                    &violations[..violations.len().min(5)]
                )
            })?;
            // Settled: training's A100 quota takes the 4 left, and no A100 is borrowed (none
            // is lendable); the H100 borrowed are research's 2 idle ones.
            let h = held(c)?;
            ensure(held_of(&h, "agents", "a100") == 0, || {
                format!("A100 borrowed where none is lendable: {h:?}")
            })?;
            // research takes its H100 back: the borrowed H100 go, agents keeps its quota.
            submit(c, "research", "h100", 2, LONG)?;
            wait_held(c, "research", "h100", 2)?;
            wait_held(c, "agents", "h100", 2)?;
            wait_held(c, "training", "h100", 0)?;
            let h = held(c)?;
            ensure(held_of(&h, "training", "a100") == 4, || {
                format!("training's A100 moved with an H100 reclaim: {h:?}")
            })
        })();
        let resumed = c.ok("scontrol", &["update", "nodename=n2", "state=resume"]);
        r.and(resumed.map(|_| ()))
    })
}

/// All nodes up, the A100 are all quota (training 6, research 2). With training holding its
/// 6, only research's idle A100 are lendable, and research lends at most 1 of its 2: agents,
/// asking for 3 A100, holds 1, sampled every 0.2 s until it does and over three governor
/// passes after.
fn lend_limit_per_type(c: &Cluster) -> TestResult {
    submit(c, "training", "a100", 6, LONG)?;
    wait_held(c, "training", "a100", 6)?;
    submit(c, "agents", "a100", 3, LONG)?;
    let within = |c: &Cluster| -> Result<u32, String> {
        let n = held_of(&held(c)?, "agents", "a100");
        ensure(n <= 1, || {
            format!("agents holds {n} A100: research lends at most 1 and nothing else is idle")
        })?;
        Ok(n)
    };
    c.wait_for(
        "agents to borrow research's 1 lendable A100",
        2 * MINUTE,
        || Ok((within(c)? == 1).then_some(())),
    )
    .map_err(|e| format!("{e}\n{}", c.diagnosis()))?;
    for _ in 0..3 {
        c.wait_governor_pass()?;
        within(c)?;
    }
    Ok(())
}

/// Samples until `stop`; returns the samples that broke a rule.
fn sample(c: &Cluster, stop: &AtomicBool) -> Result<Vec<String>, String> {
    let mut bad = Vec::new();
    let mut n = 0;
    while !stop.load(Ordering::SeqCst) {
        let h = held(c)?;
        n += 1;
        for l in &LIMITS {
            let mut borrowed_all = 0;
            for ((k, q), (_, b)) in l.quota.iter().zip(l.borrow_of.iter()) {
                let u = held_of(&h, l.team, k);
                if u > q + b {
                    bad.push(format!("{} holds {u} {k} > {q} + {b}", l.team));
                }
                borrowed_all += u.saturating_sub(*q);
            }
            if let Some(any) = l.any {
                if borrowed_all > any {
                    bad.push(format!("{} borrows {borrowed_all} in all > {any}", l.team));
                }
            }
        }
        // No A100 is lendable with n2 drained: every A100 runs inside its team's quota.
        for l in &LIMITS {
            let u = held_of(&h, l.team, "a100");
            if u > l.quota[1].1 {
                bad.push(format!(
                    "{} borrows A100 ({u}) while none is lendable",
                    l.team
                ));
            }
        }
        // H100: nothing unallocated; research lends at most 2 (its whole idle H100 quota).
        let borrowed_h100: u32 = LIMITS
            .iter()
            .map(|l| held_of(&h, l.team, "h100").saturating_sub(l.quota[0].1))
            .sum();
        let research_idle = 2u32.saturating_sub(held_of(&h, "research", "h100"));
        let agents_idle = 2u32.saturating_sub(held_of(&h, "agents", "h100"));
        if borrowed_h100 > research_idle.min(2) + agents_idle {
            bad.push(format!(
                "{borrowed_h100} H100 borrowed, more than lent: {h:?}"
            ));
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    eprintln!("typed: {n} samples");
    if n < 10 {
        return Err(format!("only {n} samples were taken"));
    }
    Ok(bad)
}

/// Acceptance 4: the design's answer to untyped requests (docs/design/gpu-types.md):
/// refused at submit with the accepted form; and a pending untyped job left from before the
/// configuration became typed is held by the governor with the reason in its AdminComment.
fn untyped_requests(c: &Cluster) -> TestResult {
    isolated(c, |c| {
        let sbatch = |team: &str, gres: &str| {
            c.sbatch(&["-A", team, "-p", "gpu", gres, "--wrap", "sleep 60"])
        };
        refused(
            sbatch("agents", "--gres=gpu:1"),
            "an untyped request",
            "teamshare: GPUs are governed per type on this cluster, so a job must name one: --gres=gpu:<type>:N or --gpus=<type>:N (types: a100, h100)",
        )?;
        refused(
            c.sbatch(&[
                "-A", "agents", "-p", "gpu", "--gpus=2", "--wrap", "sleep 60",
            ]),
            "an untyped --gpus",
            "GPUs are governed per type",
        )?;
        refused(
            sbatch("agents", "--gres=gpu:h100:1,gpu:a100:1"),
            "two types",
            "a job may ask for one GPU type here; this one asks for a100 and h100",
        )?;
        refused(
            sbatch("agents", "--gres=gpu:l40s:1"),
            "a type not offered",
            "GPU type l40s is not offered in the governed partitions (gpu); types: a100, h100",
        )?;
        refused(
            sbatch("training", "--gres=gpu:a100:7"),
            "more A100 than training may ever hold",
            "team training may hold at most 6 a100 GPUs (a100 quota 6 + borrow limit 0); this job asks for 7",
        )?;
        refused(
            sbatch("agents", "--gres=gpu:h100:5"),
            "more H100 than the cluster has",
            "have 4 usable h100 GPUs; this job asks for 5",
        )?;
        // A typed job is accepted; a user's update to untyped GPUs is refused like a
        // submission, with the same reason.
        let held = c.sbatch_as_user(&[
            "-A",
            "agents",
            "-p",
            "gpu",
            "--gres=gpu:h100:1",
            "--hold",
            "--wrap",
            "sleep 60",
        ])?;
        let update = c.run_as_user(
            "scontrol",
            &[
                "update",
                &format!("jobid={held}"),
                "Account=agents",
                "TresPerJob=gres:gpu:1",
                "TresPerNode=",
                "TresPerTask=",
                "TresPerSocket=",
            ],
        )?;
        let said = c
            .modify_refusal(&update)
            .map_err(|e| format!("an update to untyped GPUs: {e}"))?;
        ensure(
            said.contains("GPUs are governed per type on this cluster"),
            || format!("an update to untyped GPUs was refused with {said:?}"),
        )?;
        let tres = c.ok("squeue", &["-h", "-j", &held, "-O", "tres-per-node"])?;
        ensure(gres_text(&tres) == "gres:gpu:h100:1", || {
            format!("the refused update changed the job's request to {tres:?}")
        })?;

        // Left over from an untyped configuration: an untyped job waiting for its begin time.
        let untyped = c
            .original_config()
            .replace("quota = { h100 = 2 }", "quota = 2")
            .replace("quota = { a100 = 6 }", "quota = 6")
            .replace("quota = { h100 = 2, a100 = 2 }", "quota = 4")
            .replace("borrow_limit = { h100 = 2 }", "borrow_limit = 2")
            .replace("borrow_limit = { a100 = 4 }", "borrow_limit = 4")
            .replace("lend_limit = { h100 = 2, a100 = 1 }", "lend_limit = 3");
        c.reconfigure(&untyped)?;
        let leftover = c
            .sbatch(&[
                "-A",
                "research",
                "-p",
                "gpu",
                "--gres=gpu:1",
                "--begin=now+1hour",
                "--wrap",
                "sleep 60",
            ])
            .map_err(|e| format!("the untyped configuration refused an untyped job: {e}"))?;
        c.restore_config()?;
        c.wait_for("the governor to hold the untyped job", MINUTE, || {
            let out = c.ok("scontrol", &["show", "job", &leftover])?;
            Ok((out.contains("JobHeldAdmin")
                && out.contains("AdminComment=teamshare: held: GPUs are governed per type"))
            .then_some(()))
        })
        .map_err(|e| format!("{e}\n{}", c.diagnosis()))
    })
}
