//! DESIGN §4 on the live cluster: 2 nodes x 4 GPUs; agents quota 2 + 2, training 4 + 4,
//! research 2 + 6, all lending unless a scenario says otherwise. Jobs are one-GPU sleeps.
//!
//! Each scenario starts from an empty queue (and restores the configuration it changed).

use std::time::{Duration, Instant};

use teamshare_live_tests::{ensure, unix_now, Cluster, Scenario, TestResult};

pub const SCENARIOS: &[Scenario] = &[
    (
        "governance::s01_borrowing_up_to_quota_plus_borrow_limit",
        borrowing,
    ),
    (
        "governance::s02_reclaim_preempts_exactly_what_is_needed",
        reclaim,
    ),
    (
        "governance::s03_jobs_that_started_borrowing_are_guaranteed_once_inside_quota",
        guarantee,
    ),
    (
        "governance::s04_lend_limit_keeps_idle_quota_for_its_team",
        lend_limit,
    ),
    ("governance::s05_priority_classes_within_a_team", classes),
    (
        "governance::s06_idle_capacity_by_fair_share_and_fifo",
        idle_sharing,
    ),
    ("governance::s07_min_runtime_before_reclaim", min_runtime),
    ("governance::s08_submit_time_refusals", refusals),
    ("governance::s09_stale_state", stale_state),
    (
        "governance::s10_drained_node_shrinks_what_is_lendable",
        drained_node,
    ),
];

const MINUTE: Duration = Duration::from_secs(60);
const LONG: u32 = 3600;

/// Run a scenario between two resets, restoring the configuration whatever happened.
pub fn isolated(c: &Cluster, f: impl FnOnce(&Cluster) -> TestResult) -> TestResult {
    c.reset()?;
    let r = f(c);
    let restored = c.restore_config();
    let reset = c.reset();
    // The scenario's own failure first: a cleanup that fails after it must not hide it.
    match (r, restored.and(reset)) {
        (Err(e), Err(cleanup)) => Err(format!("{e}\n(and cleaning up after it: {cleanup})")),
        (r, cleanup) => r.and(cleanup),
    }
}

/// Fill `team` with `n` long jobs and wait until they all run.
pub fn fill(c: &Cluster, team: &str, n: usize, extra: &[&str]) -> Result<Vec<String>, String> {
    let before = c.count(team, "RUNNING")?;
    let ids = c.submit_sleeps(team, n, LONG, extra)?;
    c.wait_running(team, before + n, 2 * MINUTE)?;
    Ok(ids)
}

/// Wait until the governor has ranked `n` running borrowed jobs as reclaim victims.
pub fn wait_victims(c: &Cluster, n: usize) -> TestResult {
    c.wait_for(&format!("{n} reclaim victims in the state"), MINUTE, || {
        let s = c.state()?;
        Ok((s["victims"].as_array().map(|v| v.len()) == Some(n)).then_some(()))
    })?;
    // The plugin reads the state file a moment later.
    c.wait_governor_pass()
}

fn borrowing(c: &Cluster) -> TestResult {
    isolated(c, |c| {
        let ids = c.submit_sleeps("training", 9, LONG, &[])?;
        c.wait_running("training", 8, 2 * MINUTE)?;
        c.wait_governor_pass()?;
        ensure(c.count("training", "RUNNING")? == 8, || {
            "training should hold exactly 8".into()
        })?;
        let ninth = ids
            .iter()
            .find(|id| c.job_state(id).ok().as_deref() == Some("PENDING"))
            .ok_or("no training job is pending")?;
        // From 24.11 the reason reads None for about a second every few seconds while the
        // scheduler re-evaluates the job: a readable reason must show within a few seconds.
        let readable = ["AssocGrpGRES", "Resources", "Priority"];
        let mut reason = String::new();
        let seen = c.wait_for("a readable reason", Duration::from_secs(20), || {
            reason = c.reason(ninth)?;
            Ok(readable.contains(&reason.as_str()).then_some(()))
        });
        ensure(seen.is_ok(), || {
            format!("the 9th job's reason {reason:?} is not one a user can read")
        })
    })
}

fn reclaim(c: &Cluster) -> TestResult {
    isolated(c, |c| {
        let training = fill(c, "training", 8, &[])?;
        wait_victims(c, 4)?;
        // Both at once, as a team reclaiming its quota would.
        let t0 = Instant::now();
        let agents = c.submit_sleeps("agents", 2, LONG, &[])?;
        let mut latencies = Vec::new();
        for id in &agents {
            c.wait_for(&format!("agents job {id} to run"), MINUTE, || {
                Ok((c.job_state(id)? == "RUNNING").then_some(()))
            })?;
            latencies.push(t0.elapsed());
        }
        eprintln!("reclaim latency (sbatch to RUNNING, 2 jobs submitted together): {latencies:?}");
        c.wait_for(
            "the preempted training jobs to leave RUNNING",
            MINUTE,
            || Ok((c.count("training", "RUNNING")? == 6).then_some(())),
        )?;
        // Exactly two were preempted (requeued: pending again, not lost).
        let preempted: Vec<&String> = training
            .iter()
            .filter(|id| c.job_state(id).ok().as_deref() != Some("RUNNING"))
            .collect();
        ensure(preempted.len() == 2, || {
            format!("preempted {preempted:?}, expected 2")
        })?;
        ensure(c.count("training", "RUNNING")? >= 4, || {
            "training lost its quota".into()
        })?;
        ensure(c.count("agents", "RUNNING")? == 2, || {
            "agents does not hold 2".into()
        })
    })
}

fn guarantee(c: &Cluster) -> TestResult {
    isolated(c, |c| {
        let short = c.submit_sleeps("training", 4, 8, &[])?;
        let long = c.submit_sleeps("training", 4, LONG, &[])?;
        c.wait_running("training", 8, 2 * MINUTE)?;
        c.wait_completed_in_sacct(&short, 2 * MINUTE)?;
        // squeue lists jobs in priority order, which the governor's plan moves: compare the
        // sets, by job id.
        let mut starts_before = c.jobs("training", "RUNNING")?;
        starts_before.sort();
        fill(c, "agents", 4, &[])?;
        wait_victims(c, 2)?;
        for (_, victim_team) in victims(c)? {
            ensure(victim_team == "agents", || {
                format!("a {victim_team} job is ranked as a victim")
            })?;
        }
        c.submit_sleeps("research", 2, LONG, &[])?;
        c.wait_running("research", 2, MINUTE)?;
        c.wait_running("agents", 2, MINUTE)?;
        let mut starts_after = c.jobs("training", "RUNNING")?;
        starts_after.sort();
        ensure(starts_after == starts_before, || {
            format!("training's jobs changed: {starts_before:?} -> {starts_after:?}")
        })?;
        ensure(
            long.iter()
                .all(|id| starts_after.iter().any(|(j, _)| j == id)),
            || "a long training job is not running".into(),
        )
    })
}

fn victims(c: &Cluster) -> Result<Vec<(u64, String)>, String> {
    let s = c.state()?;
    Ok(s["victims"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .map(|v| {
            (
                v["job_id"].as_u64().unwrap_or(0),
                v["team"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect())
}

fn lend_limit(c: &Cluster) -> TestResult {
    isolated(c, |c| {
        let text = c.original_config().replace(
            "name = \"research\"\nquota = 2\nborrow_limit = 6",
            "name = \"research\"\nquota = 2\nborrow_limit = 6\nlend_limit = 0",
        );
        ensure(text != c.original_config(), || {
            "test config has no research team block".into()
        })?;
        c.reconfigure(&text)?;
        c.submit_sleeps("training", 8, LONG, &[])?;
        c.wait_running("training", 6, 2 * MINUTE)?;
        // Several passes later it still holds 6: research's 2 GPUs stay free for research.
        for _ in 0..3 {
            c.wait_governor_pass()?;
            ensure(c.count("training", "RUNNING")? == 6, || {
                "training went past 6".into()
            })?;
        }
        c.submit_sleeps("research", 2, LONG, &[])?;
        c.wait_running("research", 2, MINUTE)?;
        ensure(c.count("training", "RUNNING")? == 6, || {
            "research's jobs preempted training".into()
        })
    })
}

fn classes(c: &Cluster) -> TestResult {
    isolated(c, |c| {
        // agents at quota with two experiment jobs; training in its quota.
        let exp = fill(c, "agents", 2, &["--qos=experiment"])?;
        let training = fill(c, "training", 4, &[])?;
        c.wait_governor_pass()?;
        let inf = c
            .submit_sleeps("agents", 1, LONG, &["--qos=inference"])?
            .remove(0);
        c.wait_for("the inference job to run", MINUTE, || {
            Ok((c.job_state(&inf)? == "RUNNING").then_some(()))
        })?;
        c.wait_for("one experiment job displaced", MINUTE, || {
            let n = exp
                .iter()
                .filter(|id| c.job_state(id).ok().as_deref() == Some("RUNNING"))
                .count();
            Ok((n == 1).then_some(()))
        })?;
        for id in &training {
            ensure(c.job_state(id)? == "RUNNING", || {
                format!("training job {id} was touched")
            })?;
        }
        // A non-preemptible class never borrows: a second and third inference job while
        // GPUs are idle: only the quota (2) runs.
        let more = c.submit_sleeps("agents", 2, LONG, &["--qos=inference"])?;
        c.wait_for("a second inference job to run", MINUTE, || {
            Ok((more
                .iter()
                .filter(|id| c.job_state(id).ok().as_deref() == Some("RUNNING"))
                .count()
                >= 1)
                .then_some(()))
        })?;
        for _ in 0..3 {
            c.wait_governor_pass()?;
        }
        let running_inf = std::iter::once(&inf)
            .chain(more.iter())
            .filter(|id| c.job_state(id).ok().as_deref() == Some("RUNNING"))
            .count();
        ensure(running_inf == 2, || {
            format!("{running_inf} inference jobs run; quota is 2")
        })?;
        // And is never a victim.
        let v = victims(c)?;
        ensure(v.iter().all(|(id, _)| id.to_string() != inf), || {
            "inference job ranked as victim".into()
        })
    })
}

/// Seed usage history with accountd's own ingest, reading a scripted `sacct`.
fn seed_history(c: &Cluster, heavy: &str) -> TestResult {
    let dir = c.dir.join("fake-sacct");
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let now = unix_now();
    let fmt = |t: i64| {
        let out = std::process::Command::new("date")
            .args(["-u", "-d", &format!("@{t}"), "+%Y-%m-%dT%H:%M:%S"])
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
            .unwrap_or_default();
        out
    };
    // 8 GPUs for 10 hours, ending an hour ago.
    let (start, end) = (now - 11 * 3600, now - 3600);
    let line = format!(
        "900001|900001|teamshare-live|{heavy}|root|gpu|teamshare|COMPLETED|{}|{}|{}|10:00:00|billing=8,cpu=8,gres/gpu=8,node=2|{}|720|2|billing=8,cpu=8,gres/gpu=8,node=2\n",
        fmt(start - 60),
        fmt(start),
        fmt(end),
        fmt(start - 60)
    );
    let script = format!("#!/bin/sh\ncat <<'EOF'\n{line}EOF\n");
    let sacct = dir.join("sacct");
    std::fs::write(&sacct, script).map_err(|e| e.to_string())?;
    std::process::Command::new("chmod")
        .arg("+x")
        .arg(&sacct)
        .status()
        .map_err(|e| e.to_string())?;
    let path = format!(
        "{}:{}",
        dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let out = c
        .cmd(&c.accountd)
        .env("PATH", path)
        .arg("--config")
        .arg(c.dir.join("etc/teamshare.toml"))
        .args(["ingest", "--since", "now-1d", "--until", "now"])
        .output()
        .map_err(|e| e.to_string())?;
    ensure(out.status.success(), || {
        format!(
            "seeding ingest failed: {}",
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

fn idle_sharing(c: &Cluster) -> TestResult {
    isolated(c, |c| {
        // agents used a lot recently: research has the better fair-share factor.
        seed_history(c, "agents")?;
        c.stop_governor();
        c.start_governor()?;
        let run = |first: &str, second: &str| -> Result<String, String> {
            let t = fill(c, "training", 4, &[])?;
            fill(c, "agents", 2, &[])?;
            fill(c, "research", 2, &[])?;
            let a = c.submit_sleeps(first, 1, LONG, &[])?.remove(0);
            std::thread::sleep(Duration::from_millis(1100)); // distinct submit seconds for fifo
            let b = c.submit_sleeps(second, 1, LONG, &[])?.remove(0);
            c.wait_governor_pass()?;
            // One GPU frees up.
            c.ok("scancel", &[&t[0]])?;
            let winner = c.wait_for("a borrower to start", MINUTE, || {
                for id in [&a, &b] {
                    if c.job_state(id)? == "RUNNING" {
                        return Ok(Some(id.clone()));
                    }
                }
                Ok(None)
            })?;
            let winner_team = if winner == a { first } else { second }.to_string();
            c.reset()?;
            Ok(winner_team)
        };
        let w = run("agents", "research")?;
        ensure(w == "research", || {
            format!("fair-share: {w} got the free GPU, expected research")
        })?;
        let text = c
            .original_config()
            .replace("idle_sharing = \"fair-share\"", "idle_sharing = \"fifo\"");
        c.reconfigure(&text)?;
        let w = run("agents", "research")?;
        ensure(w == "agents", || {
            format!("fifo: {w} got the free GPU, expected agents (older job)")
        })
    })
}

fn min_runtime(c: &Cluster) -> TestResult {
    isolated(c, |c| {
        let text = c.original_config().replace(
            "min_runtime_before_reclaim = \"0s\"",
            "min_runtime_before_reclaim = \"20s\"",
        );
        c.reconfigure(&text)?;
        fill(c, "training", 8, &[])?;
        let filled = Instant::now();
        wait_victims(c, 4)?;
        let id = c.submit_sleeps("agents", 1, LONG, &[])?.remove(0);
        // While the borrowed jobs are younger than 20 s, nobody is preempted.
        while filled.elapsed() < Duration::from_secs(15) {
            ensure(c.job_state(&id)? == "PENDING", || {
                format!(
                    "agents job ran after {:?}, before min_runtime",
                    filled.elapsed()
                )
            })?;
            ensure(c.count("training", "RUNNING")? == 8, || {
                "a young borrowed job was preempted".into()
            })?;
            std::thread::sleep(Duration::from_millis(500));
        }
        c.wait_for(
            "the agents job to reclaim once the victims are old enough",
            2 * MINUTE,
            || Ok((c.job_state(&id)? == "RUNNING").then_some(())),
        )?;
        ensure(filled.elapsed() >= Duration::from_secs(18), || {
            "reclaimed too early".into()
        })
    })
}

/// A submission that must have been refused with `message` in what sbatch said.
pub fn refused(r: Result<String, String>, what: &str, message: &str) -> TestResult {
    match r {
        Ok(id) => Err(format!("{what}: job {id} was accepted")),
        Err(e) => ensure(e.contains(message), || {
            format!("{what}: expected {message:?}, got {e}")
        }),
    }
}

fn refusals(c: &Cluster) -> TestResult {
    isolated(c, |c| {
        refused(
            c.sbatch_as_user(&[
                "-A",
                "nosuch",
                "-p",
                "gpu",
                "--gres=gpu:1",
                "--wrap",
                "true",
            ]),
            "unknown team",
            "teamshare: account nosuch is not a team",
        )?;
        refused(
            c.sbatch_as_user(&[
                "-A",
                "agents",
                "-p",
                "gpu",
                "--gres=gpu:1",
                "--qos=gold",
                "--wrap",
                "true",
            ]),
            "unknown class",
            "teamshare: gold is not a priority class; use --qos=inference|standard|experiment",
        )?;
        refused(
            c.sbatch_as_user(&["-A", "agents", "-p", "gpu", "--gpus=5", "--wrap", "true"]),
            "over quota + borrow limit",
            "teamshare: team agents may hold at most 4 GPUs (quota 2 + borrow limit 2); this job asks for 5",
        )?;
        refused(
            c.sbatch_as_user(&[
                "-A",
                "agents",
                "-p",
                "gpu",
                "--gres=gpu:1",
                "--qos=teamshare",
                "--wrap",
                "true",
            ]),
            "internal QOS",
            "teamshare: QOS teamshare is set by teamshare itself",
        )?;
        // A user may not raise a job's priority or switch its QOS afterwards either.
        let id = c.held_gpu_job_as_user("agents")?;
        // --hold is the user's: the plugin keeps it.
        let reason = c.reason(&id)?;
        ensure(reason == "JobHeldUser", || {
            format!("a job submitted with --hold is not held: reason {reason:?}")
        })?;
        let out = c.run(
            "runuser",
            &[
                "-u",
                teamshare_live_tests::PLAIN_USER,
                "--",
                "scontrol",
                "update",
                &format!("jobid={id}"),
                "qos=normal",
            ],
        )?;
        ensure(!out.status.success(), || {
            "a user changed the QOS of a job".into()
        })?;
        // Larger than the cluster: with one node drained the cluster has 4 GPUs.
        with_n2_drained(c, || {
            c.wait_governor_pass()?;
            refused(
                c.sbatch_as_user(&["-A", "research", "-p", "gpu", "--gpus=6", "--wrap", "true"]),
                "larger than the cluster",
                "teamshare: the governed partitions (gpu) have 4 usable GPUs; this job asks for 6",
            )
        })
    })
}

fn stale_state(c: &Cluster) -> TestResult {
    isolated(c, |c| {
        let log_before = c
            .slurmctld_log()
            .matches("governance state is stale")
            .count();
        c.stop_governor();
        let stopped = Instant::now();
        // state_max_age is 5 s in the test configuration.
        std::thread::sleep(Duration::from_secs(6).saturating_sub(stopped.elapsed()));
        // fail-open: accepted (without the power to preempt), and logged once for many jobs.
        let ids = c.submit_sleeps("agents", 3, 30, &[])?;
        c.wait_for("fail-open jobs to run", MINUTE, || {
            let n = ids
                .iter()
                .filter(|id| c.job_state(id).ok().as_deref() == Some("RUNNING"))
                .count();
            Ok((n >= 1).then_some(()))
        })?;
        let logged = c
            .slurmctld_log()
            .matches("governance state is stale")
            .count()
            - log_before;
        ensure(logged == 1, || {
            format!("stale state logged {logged} times for 3 jobs")
        })?;
        // fail-closed: refused with its message.
        let text = c.original_config().replace(
            "on_stale_state = \"fail-open\"",
            "on_stale_state = \"fail-closed\"",
        );
        let reloads = c
            .slurmctld_log()
            .matches("job_submit/teamshare: reloaded")
            .count();
        std::fs::write(c.dir.join("etc/teamshare.toml"), &text).map_err(|e| e.to_string())?;
        c.wait_for("the plugin to reload", MINUTE, || {
            Ok((c
                .slurmctld_log()
                .matches("job_submit/teamshare: reloaded")
                .count()
                > reloads)
                .then_some(()))
        })?;
        refused(
            c.sbatch(&[
                "-A",
                "agents",
                "-p",
                "gpu",
                "--gres=gpu:1",
                "--wrap",
                "true",
            ]),
            "fail-closed",
            "teamshare: team usage is not current",
        )?;
        // The governor comes back: jobs are accepted again.
        c.start_governor()?;
        c.wait_governor_pass()?;
        c.sbatch(&[
            "-A",
            "agents",
            "-p",
            "gpu",
            "--gres=gpu:1",
            "--wrap",
            "true",
        ])
        .map_err(|e| format!("after the governor restarted a job was refused: {e}"))?;
        Ok(())
    })
}

/// Run `f` with node n2 drained (capacity 4, seen by the governor), resuming it whatever
/// happened.
pub fn with_n2_drained(c: &Cluster, f: impl FnOnce() -> TestResult) -> TestResult {
    c.ok(
        "scontrol",
        &[
            "update",
            "nodename=n2",
            "state=drain",
            "reason=teamshare-test",
        ],
    )?;
    let r = c
        .wait_for("capacity 4 in the state", MINUTE, || {
            Ok((c.state()?["capacity"].as_u64() == Some(4)).then_some(()))
        })
        .and_then(|_| f());
    let resumed = c.ok("scontrol", &["update", "nodename=n2", "state=resume"]);
    r.and(resumed.map(|_| ()))
}

fn drained_node(c: &Cluster) -> TestResult {
    isolated(c, |c| {
        with_n2_drained(c, || {
            // Only training's quota fits; nothing is lendable beyond what is idle.
            c.submit_sleeps("training", 6, LONG, &[])?;
            c.wait_running("training", 4, 2 * MINUTE)?;
            c.wait_governor_pass()?;
            let limit = c.state()?["teams"]["training"]["gpu_limit"].as_u64();
            ensure(limit == Some(4), || {
                format!("training's limit is {limit:?} with capacity 4")
            })?;
            // agents is under quota but the drained node took its GPUs: training's in-quota
            // jobs are still never preempted for it.
            let a = c.submit_sleeps("agents", 1, LONG, &[])?.remove(0);
            for _ in 0..4 {
                c.wait_governor_pass()?;
                ensure(c.count("training", "RUNNING")? == 4, || {
                    "an in-quota job was preempted".into()
                })?;
            }
            ensure(c.job_state(&a)? == "PENDING", || {
                "agents ran on GPUs that do not exist".into()
            })
        })
    })
}
