//! Per-call latency distribution of `check_submit` (criterion reports means and medians of
//! batches, not per-call percentiles): every call is timed on its own with `Instant`, after a
//! warm-up, and p50/p90/p99/p99.9/max are printed per request kind. Also `governance::plan`
//! (1,000 running + 1,000 pending jobs), timed per pass.
//!
//!     cargo bench -p teamshare-policy --bench submit_latency [-- --calls N]
//!
//! The `Instant::now()` pair around each call is included in the numbers; its own cost is
//! measured and printed (`timer overhead`) so it can be subtracted.

// Test code: a scenario reads top to bottom, so the workspace's 80-line limit is not for it.
#![allow(clippy::too_many_lines)]

mod common;

use std::hint::black_box;
use std::time::{Duration, Instant};

use teamshare_config::Config;
use teamshare_policy::governance;
use teamshare_policy::submit::{check_submit, StateView, Verdict};

fn percentile(sorted: &[u64], p: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = ((p / 100.0) * (sorted.len() as f64 - 1.0)).round() as usize;
    sorted[rank.min(sorted.len() - 1)]
}

fn summary(name: &str, mut ns: Vec<u64>, unit: &str) {
    ns.sort_unstable();
    let div = if unit == "us" { 1000.0 } else { 1.0 };
    let mean = ns.iter().sum::<u64>() as f64 / ns.len() as f64;
    println!(
        "{name:<34} {:>8} {:>9.2} {:>9.2} {:>9.2} {:>9.2} {:>9.2} {:>10.2}  {unit}",
        ns.len(),
        mean / div,
        percentile(&ns, 50.0) as f64 / div,
        percentile(&ns, 90.0) as f64 / div,
        percentile(&ns, 99.0) as f64 / div,
        percentile(&ns, 99.9) as f64 / div,
        *ns.last().unwrap_or(&0) as f64 / div,
    );
}

fn main() {
    let mut calls: usize = 100_000;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        // cargo bench passes --bench; anything else is ignored.
        if a == "--calls" {
            calls = args.next().and_then(|v| v.parse().ok()).expect("--calls N");
        }
    }
    let config = common::config();
    time_check_submit(&config, calls);
    time_plan(&config);
}

/// `check_submit`, call by call, for each request kind (and the timer's own cost).
fn time_check_submit(config: &Config, calls: usize) {
    let state = common::state();
    let admitted = common::admitted();

    // The cost of the timer itself.
    let mut timer = Vec::with_capacity(calls);
    for _ in 0..calls {
        let t = Instant::now();
        let d = t.elapsed();
        timer.push(d.as_nanos() as u64);
    }

    println!(
        "{:<34} {:>8} {:>9} {:>9} {:>9} {:>9} {:>9} {:>10}",
        "check_submit (per call)", "calls", "mean", "p50", "p90", "p99", "p99.9", "max"
    );
    summary("timer overhead (Instant pair)", timer, "ns");
    for (name, req) in common::requests() {
        let run = || {
            check_submit(
                black_box(config),
                black_box(&req),
                StateView::Fresh {
                    state: black_box(&state),
                    admitted: black_box(&admitted),
                    now: common::NOW,
                },
            )
        };
        // Sanity: the fixture exercises what its name says.
        let v = run();
        let accepted = matches!(v, Verdict::Accept(_));
        assert_eq!(accepted, !name.starts_with("reject"), "{name}: {v:?}");
        // Warm-up: caches, branch predictors, the allocator's free lists.
        let warm = Instant::now();
        while warm.elapsed() < Duration::from_millis(300) {
            black_box(run());
        }
        let mut ns = Vec::with_capacity(calls);
        for _ in 0..calls {
            let t = Instant::now();
            let v = run();
            let d = t.elapsed();
            black_box(v);
            ns.push(d.as_nanos() as u64);
        }
        summary(name, ns, "ns");
    }
}

/// The governor's pass, pass by pass: plan + state JSON.
fn time_plan(config: &Config) {
    let jobs = common::cluster_jobs();
    let fairshare = common::fairshare();
    let passes = 300;
    for _ in 0..20 {
        black_box(governance::plan(&common::govern_input(
            config, &jobs, &fairshare,
        )));
    }
    let mut plan_ns = Vec::with_capacity(passes);
    let mut json_ns = Vec::with_capacity(passes);
    let mut victims = 0;
    for _ in 0..passes {
        let t = Instant::now();
        let p = governance::plan(&common::govern_input(config, &jobs, &fairshare));
        let d = t.elapsed();
        let t2 = Instant::now();
        let json = p.state.to_json();
        let d2 = t2.elapsed();
        victims = p.state.victims.len();
        black_box((p, json));
        plan_ns.push(d.as_nanos() as u64);
        json_ns.push((d + d2).as_nanos() as u64);
    }
    println!();
    println!(
        "{:<34} {:>8} {:>9} {:>9} {:>9} {:>9} {:>9} {:>10}",
        "governance::plan (per pass)", "passes", "mean", "p50", "p90", "p99", "p99.9", "max"
    );
    summary("1000 running + 1000 pending", plan_ns, "us");
    summary("  + state.to_json()", json_ns, "us");
    println!(
        "(the plan found {victims} victims among {} jobs)",
        jobs.len()
    );
}
