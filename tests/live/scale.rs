//! Issue 9 at CI's size: governance under a burst of work never leaves the plugin on a stale
//! state, and an in-quota job submitted in the middle of the burst still reclaims at once.

use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::time::{Duration, Instant};

use teamshare_live_tests::{ensure, unix_now, Cluster, Scenario, TestResult};

use crate::governance::{fill, isolated, wait_victims};

pub const SCENARIOS: &[Scenario] = &[(
    "scale::c01_a_burst_never_leaves_the_plugin_on_stale_state",
    burst,
)];

const MINUTE: Duration = Duration::from_secs(60);
/// Waiting jobs the burst adds: each arrives at the bottom of the borrow band and needs the
/// governor's update to its team's band, and one in ten is a non-preemptible job to park.
const BURST: usize = 240;

/// The cluster full (training: 4 in quota + 4 borrowed, at its ceiling of 8), then BURST
/// training submissions as fast as sbatch goes, while the state's age is sampled every 100 ms;
/// halfway, agents (nothing running, quota 2) submits one job, which must preempt a borrower. The plugin must never find the state stale (its log says so when it does), and
/// the state must never be older than state_max_age (5 s).
fn burst(c: &Cluster) -> TestResult {
    isolated(c, |c| {
        fill(c, "training", 8, &[])?;
        wait_victims(c, 4)?;
        let stale_lines = |c: &Cluster| {
            c.slurmctld_log()
                .matches("governance state is stale")
                .count()
        };
        let stale_before = stale_lines(c);
        let done = AtomicBool::new(false);
        let max_age = AtomicI64::new(0);
        let mut latency = None;
        let r = std::thread::scope(|s| -> TestResult {
            s.spawn(|| {
                while !done.load(Ordering::Relaxed) {
                    if let Ok(st) = c.state() {
                        if let Some(g) = st["generated_at"].as_i64() {
                            max_age.fetch_max(unix_now() - g, Ordering::Relaxed);
                        }
                    }
                    std::thread::sleep(Duration::from_millis(100));
                }
            });
            let result = (|| -> TestResult {
                let mut burst = Vec::new();
                for i in 0..BURST {
                    // training is at its ceiling (8): every one waits, as a borrower in its
                    // band, or parked (inference may not borrow).
                    let class = match i % 10 {
                        0 => "--qos=inference",
                        n if n % 2 == 0 => "--qos=experiment",
                        _ => "--qos=standard",
                    };
                    burst.push(c.sbatch(&[
                        "-A",
                        "training",
                        "-p",
                        "gpu",
                        "--gres=gpu:1",
                        class,
                        "--wrap",
                        "sleep 3600",
                    ])?);
                    if i == BURST / 2 {
                        let t0 = Instant::now();
                        let id = c.sbatch(&[
                            "-A",
                            "agents",
                            "-p",
                            "gpu",
                            "--gres=gpu:1",
                            "--wrap",
                            "sleep 3600",
                        ])?;
                        c.wait_for("the in-quota agents job to run", MINUTE, || {
                            Ok((c.job_state(&id)? == "RUNNING").then_some(()))
                        })?;
                        latency = Some(t0.elapsed());
                    }
                }
                // Every burst job parked (held) or in its band: the governor caught up.
                let list = burst.join(",");
                c.wait_for("the governor to settle the burst", 2 * MINUTE, || {
                    let out = c.ok("squeue", &["-h", "-t", "PD", "-j", &list, "-o", "%Q"])?;
                    let unsettled = out
                        .lines()
                        .filter_map(|l| l.trim().parse::<u32>().ok())
                        .filter(|p| {
                            *p != 0
                                && teamshare_policy::priority::level(*p)
                                    <= teamshare_policy::priority::BORROW_BASE
                        })
                        .count();
                    Ok((unsettled == 0).then_some(()))
                })
            })();
            done.store(true, Ordering::Relaxed);
            result
        });
        let age = max_age.load(Ordering::Relaxed);
        eprintln!(
            "c01: {BURST} submissions; oldest state seen {age} s; in-quota job ran {:.2} s after sbatch",
            latency.map_or(f64::NAN, |l| l.as_secs_f64())
        );
        r?;
        ensure(stale_lines(c) == stale_before, || {
            "the plugin found the governance state stale during the burst".into()
        })?;
        ensure(age <= 5, || {
            format!("the published state was {age} s old (state_max_age is 5 s)")
        })
    })
}
