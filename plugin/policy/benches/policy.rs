//! Criterion benchmarks of the plugin's decision (`check_submit`, on slurmctld's submit path)
//! and of the governor's pass (`governance::plan`).
//!
//!     cargo bench -p teamshare-policy --bench policy
//!
//! Percentiles (p50/p99 per call) come from the `submit_latency` bench next to this one.

// Test code: a scenario reads top to bottom, so the workspace's 80-line limit is not for it.
#![allow(clippy::too_many_lines)]

mod common;

use criterion::{black_box, criterion_group, criterion_main, BatchSize, Criterion};
use std::collections::BTreeSet;

use teamshare_policy::governance::{self, idleness, ClusterJob, PassInput, Phase, Planner};
use teamshare_policy::submit::{check_submit, StateView};

fn bench_check_submit(c: &mut Criterion) {
    let config = common::config();
    let state = common::state();
    let admitted = common::admitted();
    let mut group = c.benchmark_group("check_submit");
    for (name, req) in common::requests() {
        group.bench_function(name, |b| {
            b.iter(|| {
                check_submit(
                    black_box(&config),
                    black_box(&req),
                    StateView::Fresh {
                        state: black_box(&state),
                        admitted: black_box(&admitted),
                        now: common::NOW,
                    },
                )
            })
        });
    }
    let typed = common::typed_config();
    let typed_state = common::typed_state();
    for (name, req) in common::typed_requests() {
        group.bench_function(name, |b| {
            b.iter(|| {
                check_submit(
                    black_box(&typed),
                    black_box(&req),
                    StateView::Fresh {
                        state: black_box(&typed_state),
                        admitted: black_box(&admitted),
                        now: common::NOW,
                    },
                )
            })
        });
    }
    let (_, req) = &common::requests()[0];
    group.bench_function("in_quota_stale_state", |b| {
        b.iter(|| check_submit(black_box(&config), black_box(req), StateView::Stale))
    });
    group.finish();
}

fn bench_plan(c: &mut Criterion) {
    let config = common::config();
    let jobs = common::cluster_jobs();
    let fairshare = common::fairshare();
    let mut group = c.benchmark_group("governance_plan");
    group.sample_size(50);
    group.bench_function("1000_running_1000_pending", |b| {
        b.iter(|| governance::plan(black_box(&common::govern_input(&config, &jobs, &fairshare))))
    });
    // The plan plus the state's JSON, as the governor writes it every pass.
    group.bench_function("1000_running_1000_pending_with_state_json", |b| {
        b.iter_batched(
            || (),
            |()| {
                let p = governance::plan(&common::govern_input(&config, &jobs, &fairshare));
                black_box(p.state.to_json())
            },
            BatchSize::SmallInput,
        )
    });
    // Quotas per GPU type: one plan per type (two here), merged.
    let typed = common::typed_config();
    let typed_jobs = common::typed_cluster_jobs();
    let by_type =
        std::collections::BTreeMap::from([("h100".to_string(), 512), ("a100".to_string(), 512)]);
    group.bench_function("typed_1000_running_1000_pending", |b| {
        b.iter(|| {
            governance::plan(black_box(&common::typed_govern_input(
                &typed,
                &typed_jobs,
                &fairshare,
                &by_type,
            )))
        })
    });
    group.finish();
}

/// Issue 29: the plan at 10,000 waiting jobs as before idleness (no idle set,
/// `idle_first_reclaim` off) against idle-first with one running job in ten idle, and the
/// governor's idle computation (`idle_jobs` over the 1,000 running jobs' windows).
fn bench_plan_with_idleness(c: &mut Criterion) {
    let plain = common::config();
    let idle_first = common::idle_first_config();
    let jobs = common::cluster_jobs_waiting(10_000);
    let fairshare = common::fairshare();
    let windows = common::idle_windows(&jobs, 10);
    let window = idle_first.governance.idle_window;
    let idle = idleness::idle_jobs(&jobs, &windows, window, common::NOW);
    let no_idle = BTreeSet::new();
    let mut group = c.benchmark_group("governance_plan_idleness");
    group.sample_size(50);
    group.bench_function("10000_pending_no_idle_set", |b| {
        b.iter(|| {
            governance::plan(black_box(&common::govern_input_idle(
                &plain, &jobs, &fairshare, &no_idle,
            )))
        })
    });
    group.bench_function("10000_pending_idle_first_10pct_idle", |b| {
        b.iter(|| {
            governance::plan(black_box(&common::govern_input_idle(
                &idle_first,
                &jobs,
                &fairshare,
                &idle,
            )))
        })
    });
    group.bench_function("idle_jobs_1000_running", |b| {
        b.iter(|| idleness::idle_jobs(black_box(&jobs), black_box(&windows), window, common::NOW))
    });
    group.finish();
    // Say how many jobs the idle-first plan saw idle and how many victims each plan chose, so
    // the comparison is of plans that did the same amount of work.
    let victims = |p: &governance::Plan| {
        let first_idle = p
            .state
            .victims
            .iter()
            .take_while(|v| idle.contains(&v.job_id))
            .count();
        format!("{} ({} idle first)", p.state.victims.len(), first_idle)
    };
    let before = governance::plan(&common::govern_input_idle(
        &plain, &jobs, &fairshare, &no_idle,
    ));
    let after = governance::plan(&common::govern_input_idle(
        &idle_first,
        &jobs,
        &fairshare,
        &idle,
    ));
    eprintln!(
        "idleness: {} of {} running jobs idle; victims {} without, {} idle-first",
        idle.len(),
        windows.len(),
        victims(&before),
        victims(&after)
    );
}

/// Issue 26, one planning path: the governor's planning per pass at 1,000 / 10,000 / 50,000
/// waiting jobs (1,000 running), before (`plan` from scratch over the jobs read) and after
/// (its kept `Planner` handed the jobs read, which under churn differ from the last read by
/// one job ended, one started and one submitted, and by the priorities that moved), every
/// priority and the state made.
fn bench_governor_pass(c: &mut Criterion) {
    let config = common::config();
    let fairshare = common::fairshare();
    let mut group = c.benchmark_group("governor_pass");
    group.sample_size(20);
    for pending in [1_000u64, 10_000, 50_000] {
        // Steady state: Slurm holds the priorities the plans gave (the governor applied them).
        let applied = |mut jobs: Vec<ClusterJob>| {
            let p = governance::plan(&common::govern_input(&config, &jobs, &fairshare));
            for j in &mut jobs {
                if let Some(q) = p.priorities.get(&j.id) {
                    j.priority = *q;
                }
            }
            jobs
        };
        let read = applied(common::cluster_jobs_waiting(pending));
        let churned = applied(churned(&read));
        group.bench_function(format!("plan_{pending}_pending"), |b| {
            b.iter(|| {
                governance::plan(black_box(&common::govern_input(&config, &read, &fairshare)))
            })
        });
        let mut planner = Planner::new(&config);
        let mut flip = false;
        group.bench_function(format!("planner_{pending}_pending_churn"), |b| {
            b.iter(|| {
                flip = !flip;
                let jobs = if flip { &churned } else { &read };
                planner.hold_read(jobs);
                black_box(planner.plan(&PassInput {
                    capacity: common::CAPACITY,
                    fairshare: &fairshare,
                    now: common::NOW,
                    now_ms: common::NOW.saturating_mul(1_000),
                    publish: true,
                    all_priorities: true,
                }))
            })
        });
    }
    group.finish();
}

/// The jobs of the next read under churn: the first running job ended, the first pending one
/// started, one more submitted.
fn churned(read: &[ClusterJob]) -> Vec<ClusterJob> {
    let mut jobs = read.to_vec();
    if let Some(i) = jobs.iter().position(|j| j.phase == Phase::Running) {
        jobs.remove(i);
    }
    if let Some(j) = jobs.iter_mut().find(|j| j.phase == Phase::Pending) {
        j.phase = Phase::Running;
        j.start = Some(common::NOW);
    }
    if let Some(last) = jobs.last().cloned() {
        jobs.push(ClusterJob {
            id: u64::from(u32::MAX),
            phase: Phase::Pending,
            start: None,
            ..last
        });
    }
    jobs
}

criterion_group!(
    benches,
    bench_check_submit,
    bench_plan,
    bench_plan_with_idleness,
    bench_governor_pass
);
criterion_main!(benches);
