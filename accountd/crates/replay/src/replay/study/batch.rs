//! The simulations of a study: the calibration's, and the batch of candidates and capacity
//! curve points run side by side, their progress told to the caller.

use teamshare_config::Config;

use super::super::idle_first::{lost_work, LostWork};
use super::super::metrics::{self, figures};
use super::super::{curve as replay_curve, sim, Outcome, SimParams, Trace};
use super::{Candidate, Progress};

/// Replay `trace` under `config` alone (the calibration), its progress told.
pub(super) fn simulate(
    trace: &Trace,
    config: &Config,
    params: &SimParams,
    label: &str,
    progress: &dyn Progress,
) -> Outcome {
    progress.begin(vec![label.to_string()], 1);
    let outcome = sim::simulate(trace, config, params, &mut |t| progress.at(0, t));
    progress.end();
    outcome
}

/// One simulation of a batch: a candidate at the trace's capacity or (`gpus`) at a point of
/// the capacity curve.
pub(super) struct Run<'c> {
    pub(super) label: String,
    pub(super) config: &'c Config,
    pub(super) params: SimParams,
    pub(super) gpus: Option<u32>,
}

/// What a run of a batch found: its figures, and the work its preemptions threw away (for
/// idle-first's saving).
pub(super) struct Found {
    pub(super) figures: metrics::Figures,
    pub(super) lost: LostWork,
}

/// Every run's figures, in the order of `runs`, computed on up to `threads` threads (each
/// run is one simulation, deterministic on its own: the figures are the same however many
/// threads there are). A curve point's smaller trace is made by the thread that replays it,
/// so that no more of them exist at once than there are threads.
pub(super) fn simulate_all(
    trace: &Trace,
    runs: &[Run<'_>],
    threads: usize,
    progress: &dyn Progress,
) -> Vec<Found> {
    let full = total_gpus(trace);
    progress.begin(
        runs.iter().map(|r| r.label.clone()).collect(),
        threads.clamp(1, runs.len().max(1)),
    );
    let one = |i: usize| {
        let run = &runs[i];
        let smaller = run
            .gpus
            .map(|g| without_gpus(trace, full.saturating_sub(g)));
        let t = smaller.as_ref().unwrap_or(trace);
        let outcome = sim::simulate(t, run.config, &run.params, &mut |at| progress.at(i, at));
        progress.done(i);
        Found {
            figures: figures(t, &outcome, run.config),
            lost: lost_work(t, &outcome),
        }
    };
    let workers = threads.clamp(1, runs.len().max(1));
    let out: Vec<Found> = if workers == 1 {
        (0..runs.len()).map(one).collect()
    } else {
        // The runs most likely to take longest first (the fewest GPUs: the longest queues),
        // so that no thread is left with a long one at the end.
        let mut order: Vec<usize> = (0..runs.len()).collect();
        order.sort_by_key(|&i| runs[i].gpus.unwrap_or(u32::MAX));
        let next = std::sync::atomic::AtomicUsize::new(0);
        let slots: Vec<std::sync::Mutex<Option<Found>>> =
            runs.iter().map(|_| std::sync::Mutex::new(None)).collect();
        std::thread::scope(|scope| {
            for _ in 0..workers {
                scope.spawn(|| loop {
                    let n = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    let Some(&i) = order.get(n) else {
                        break;
                    };
                    let found = one(i);
                    *slots[i].lock().unwrap_or_else(|e| e.into_inner()) = Some(found);
                });
            }
        });
        slots
            .into_iter()
            .map(|s| {
                s.into_inner()
                    .unwrap_or_else(|e| e.into_inner())
                    .expect("every run was replayed")
            })
            .collect()
    };
    progress.end();
    out
}

/// A capacity curve's points: each simulated candidate at each smaller capacity, with the
/// configuration it is replayed under there, and the points that have none.
#[derive(Default)]
pub(super) struct CurvePlan {
    pub(super) points: Vec<CurvePlanPoint>,
    pub(super) skipped: Vec<replay_curve::SkippedPoint>,
}

pub(super) struct CurvePlanPoint {
    pub(super) candidate: usize,
    pub(super) gpus: u32,
    pub(super) config: Config,
    pub(super) quotas: String,
}

/// The plan of a curve of `points` capacities, `step` GPUs apart below the trace's.
pub(super) fn curve_plan(
    trace: &Trace,
    candidates: &[Candidate],
    points: u32,
    rule: replay_curve::QuotaRule,
    step: u32,
) -> CurvePlan {
    let full = total_gpus(trace);
    let mut plan = CurvePlan::default();
    let gpus_at =
        (1..=points).map_while(|i| full.checked_sub(i.saturating_mul(step)).filter(|g| *g > 0));
    for gpus in gpus_at {
        let cluster = replay_curve::fewer_gpus(&trace.cluster, full - gpus);
        for (ci, c) in candidates.iter().enumerate() {
            let Some(cfg) = &c.config else { continue };
            match replay_curve::config_at(cfg, &cluster, rule) {
                Ok((config, quotas)) => plan.points.push(CurvePlanPoint {
                    candidate: ci,
                    gpus,
                    config,
                    quotas,
                }),
                Err(reason) => plan.skipped.push(replay_curve::SkippedPoint {
                    candidate: c.name.clone(),
                    gpus,
                    reason,
                }),
            }
        }
    }
    plan
}

/// The trace's GPUs in all.
pub fn total_gpus(trace: &Trace) -> u32 {
    trace
        .cluster
        .nodes
        .iter()
        .fold(0u32, |s, n| s.saturating_add(n.gpus))
}

/// `trace` with `remove` GPUs fewer ([`replay_curve::fewer_gpus`]).
pub fn without_gpus(trace: &Trace, remove: u32) -> Trace {
    Trace {
        jobs: trace.jobs.clone(),
        cluster: replay_curve::fewer_gpus(&trace.cluster, remove),
        since: trace.since,
        until: trace.until,
        source: trace.source.clone(),
        activity: trace.activity.clone(),
    }
}
