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

pub const SCENARIOS: &[Scenario] = &[
    (
        "idle::i01_idle_borrowed_jobs_are_reclaimed_first_where_configured",
        idle_first,
    ),
    (
        "idle::i02_the_idle_policy_tells_then_requeues_never_busy_exempt_or_unknown",
        idle_policy,
    ),
];

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

/// The job's AdminComment as squeue shows it (empty when none).
fn admin_comment(c: &Cluster, id: &str) -> Result<String, String> {
    let out = c.ok("squeue", &["-h", "-j", id, "-O", "admin_comment:1000"])?;
    Ok(out.trim().to_string())
}

/// The job's start time and restart count (`scontrol show job`).
fn run_of(c: &Cluster, id: &str) -> Result<(String, String), String> {
    let out = c.ok("scontrol", &["show", "job", id])?;
    let field = |name: &str| {
        out.split_whitespace()
            .find_map(|w| w.strip_prefix(name))
            .unwrap_or("")
            .to_string()
    };
    Ok((field("StartTime="), field("Restarts=")))
}

/// Issue 29's idle policy on the placement cluster, vision (quota 5) in its own quota: A on
/// n1 (busy, 80 %), B on n2 (idle, 1 %), E on n2 in the exempt class (idle), U on n3 (idle
/// until n3's sampler stops). Notice after 20 s idle, requeue 40 s later if still idle.
/// B is noticed in its AdminComment and by the hook, then requeued; U is noticed, then its
/// samples stop: the notice is taken back and nothing follows; A and E are never touched.
fn idle_policy(c: &Cluster) -> TestResult {
    isolated(c, |c| {
        let spool = c.dir.join("etc/samples");
        let _samplers = start_samplers(c, &spool, &[("n1", 80), ("n2", 1)])?;
        let n3_sampler = start_samplers(c, &spool, &[("n3", 1)])?;
        let hook_log = c.dir.join("log/idle-hook.log");
        let hook = c.dir.join("etc/idle-hook.sh");
        std::fs::write(
            &hook,
            format!("#!/bin/sh\necho \"$@\" >> {}\n", hook_log.display()),
        )
        .map_err(|e| e.to_string())?;
        c.ok("chmod", &["755", &hook.to_string_lossy()])?;
        let on = c.original_config().replace(
            "on_stale_state = \"fail-open\"\n",
            &format!(
                "on_stale_state = \"fail-open\"\n\n[governance.idle_policy]\nnotice_after = \"20s\"\naction = \"requeue\"\nact_after = \"40s\"\nexempt_classes = [\"standard\"]\nhook = \"{}\"\n",
                hook.display()
            ),
        );
        ensure(on != c.original_config(), || {
            "teamshare-placement.toml has no on_stale_state line to add the idle policy after"
                .into()
        })?;
        c.reconfigure(&on)?;
        let a = sleep_on(c, "vision", "n1")?;
        let b = sleep_on(c, "vision", "n2")?;
        let e = c.sbatch(&[
            "-A",
            "vision",
            "-p",
            "gpu",
            "--gres=gpu:1",
            "-w",
            "n2",
            "--qos=standard",
            "--wrap",
            "sleep 3600",
        ])?;
        let u = sleep_on(c, "vision", "n3")?;
        c.wait_running("vision", 4, 2 * MINUTE)?;
        let (a_run, e_run, u_run) = (run_of(c, &a)?, run_of(c, &e)?, run_of(c, &u)?);
        // Noticed within a minute of being idle for notice_after: the AdminComment and the hook.
        for job in [&b, &u] {
            c.wait_for(&format!("job {job}'s idle notice"), 2 * MINUTE, || {
                Ok(admin_comment(c, job)?
                    .starts_with("teamshare: idle: its GPUs were below")
                    .then_some(()))
            })
            .map_err(|err| format!("{err}\n{}\n{}", c.diagnosis(), c.governor_log_tail(40)))?;
            if job == &b {
                // How long after B had been idle for notice_after its notice was seen (reported, not
                // asserted: the "within a minute" is a figure of the closing note).
                let start = c.ok("date", &["-u", "-d", &run_of(c, &b)?.0, "+%s"])?;
                let now = c.ok("date", &["-u", "+%s"])?;
                if let (Ok(start), Ok(now)) =
                    (start.trim().parse::<i64>(), now.trim().parse::<i64>())
                {
                    eprintln!(
                        "idle::i02: job {b}'s notice seen {} s after it had been idle for notice_after (20 s)",
                        now - start - 20
                    );
                }
            }
        }
        let hooked = std::fs::read_to_string(&hook_log).map_err(|e| format!("hook log: {e}"))?;
        ensure(
            hooked.contains(&format!("event=notice job={b} user="))
                && hooked.contains("team=vision"),
            || format!("the hook was not run for {b}'s notice:\n{hooked}"),
        )?;
        // n3's samples stop: U is unknown, its notice taken back.
        drop(n3_sampler);
        c.wait_for(&format!("job {u}'s notice taken back"), 2 * MINUTE, || {
            Ok(admin_comment(c, &u)?.is_empty().then_some(()))
        })
        .map_err(|err| format!("{err}\n{}", c.governor_log_tail(40)))?;
        // B, still idle, is requeued 40 s after its notice.
        c.wait_for(&format!("job {b} requeued as idle"), 3 * MINUTE, || {
            Ok(run_of(c, &b)?.1.ne("0").then_some(()))
        })
        .map_err(|err| format!("{err}\n{}\n{}", c.diagnosis(), c.governor_log_tail(40)))?;
        let comment = admin_comment(c, &b)?;
        ensure(comment.starts_with("teamshare: idle: requeued at"), || {
            format!("job {b}'s AdminComment after the requeue: {comment:?}")
        })?;
        let hooked = std::fs::read_to_string(&hook_log).map_err(|e| format!("hook log: {e}"))?;
        ensure(hooked.contains(&format!("event=requeue job={b} ")), || {
            format!("the hook was not run for {b}'s requeue:\n{hooked}")
        })?;
        // A (busy), E (exempt) and U (unknown) run on, untouched, and the log says why B went.
        for (job, run, what) in [
            (&a, a_run, "busy"),
            (&e, e_run, "exempt"),
            (&u, u_run, "unknown"),
        ] {
            ensure(run_of(c, job)? == run, || {
                format!("the {what} job {job} was restarted")
            })?;
            ensure(c.job_state(job)? == "RUNNING", || {
                format!("the {what} job {job} does not run")
            })?;
            ensure(
                !hooked.contains(&format!("job={job} ")) || job == &u,
                || format!("the hook ran for the {what} job {job}:\n{hooked}"),
            )?;
        }
        ensure(!hooked.contains(&format!("event=requeue job={u} ")), || {
            format!("the unknown job {u} was acted on:\n{hooked}")
        })?;
        let log = c.governor_log();
        ensure(
            log.contains("idle policy: job") && log.contains("idle_gpu_s="),
            || "the governor's log does not give the samples behind the idle policy's steps".into(),
        )?;
        // The actions' report reaches the metrics with the next pass.
        let requeues = "teamshare_idle_policy_steps_total{step=\"requeue\",team=\"vision\"} 1\n";
        c.wait_for("the requeue step in the metrics", MINUTE, || {
            Ok(c.metrics()?.contains(requeues).then_some(()))
        })
        .map_err(|err| format!("{err}\n{}", c.metrics().unwrap_or_default()))?;
        // The owner reads the note with `accountd status --user`, the administrator the steps
        // in `accountd report users` (from the database).
        let status = c.accountd_cmd(&["status", "--user", "root"])?;
        let status = String::from_utf8_lossy(&status.stdout).into_owned();
        ensure(
            status
                .lines()
                .any(|l| l.starts_with(&format!("{b} ")) && l.contains("idle: requeued at")),
            || format!("accountd status --user root does not show {b}'s note:\n{status}"),
        )?;
        c.wait_for("the idle policy's steps in report users", MINUTE, || {
            let out = c.accountd_cmd(&["report", "users", "--format", "json"])?;
            let rows: serde_json::Value =
                serde_json::from_slice(&out.stdout).unwrap_or(serde_json::Value::Null);
            let vision = rows.as_array().and_then(|r| {
                r.iter()
                    .find(|u| u["user"] == "root" && u["team"] == "vision")
            });
            Ok(vision
                .filter(|u| {
                    u["idle_policy"]["requeue"].as_u64() >= Some(1)
                        && u["idle_policy"]["notice"].as_u64() >= Some(2)
                })
                .map(|_| ()))
        })
        .map_err(|err| {
            let out = c.accountd_cmd(&["report", "users"]).ok();
            let text = out.map(|o| String::from_utf8_lossy(&o.stdout).into_owned());
            format!("{err}\n{}", text.unwrap_or_default())
        })
    })
}
