//! The simulations of `accountd replay`: the calibration's, and the batch of candidates and
//! capacity curve points run side by side with their progress on a terminal.

use std::io::{IsTerminal as _, Write as _};
use std::time::{Duration, Instant};

use teamshare_config::Config;

use accountd::replay::metrics::{self, figures};
use accountd::replay::{curve as replay_curve, sim, Outcome, Secs, SimParams, Trace};

use super::{Candidate, ReplayArgs, DAY};

/// Replay `trace` under `config` alone (the calibration), the progress on a terminal.
pub(super) fn simulate(trace: &Trace, config: &Config, params: &SimParams, label: &str) -> Outcome {
    let board = Progress::new(trace, vec![label.to_string()], 1);
    let outcome = sim::simulate(trace, config, params, &mut |t| board.report(0, t));
    board.clear();
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

/// Every run's figures, in the order of `runs`, computed on up to `threads` threads (each
/// run is one simulation, deterministic on its own: the figures are the same however many
/// threads there are). A curve point's smaller trace is made by the thread that replays it,
/// so that no more of them exist at once than there are threads.
pub(super) fn simulate_all(
    trace: &Trace,
    runs: &[Run<'_>],
    threads: usize,
) -> Vec<metrics::Figures> {
    let full = total_gpus(trace);
    let board = Progress::new(
        trace,
        runs.iter().map(|r| r.label.clone()).collect(),
        threads.clamp(1, runs.len().max(1)),
    );
    let one = |i: usize| {
        let run = &runs[i];
        let smaller = run
            .gpus
            .map(|g| without_gpus(trace, full.saturating_sub(g)));
        let t = smaller.as_ref().unwrap_or(trace);
        let outcome = sim::simulate(t, run.config, &run.params, &mut |at| board.report(i, at));
        board.done(i);
        figures(t, &outcome, run.config)
    };
    let workers = threads.clamp(1, runs.len().max(1));
    let out: Vec<metrics::Figures> = if workers == 1 {
        (0..runs.len()).map(one).collect()
    } else {
        // The runs most likely to take longest first (the fewest GPUs: the longest queues),
        // so that no thread is left with a long one at the end.
        let mut order: Vec<usize> = (0..runs.len()).collect();
        order.sort_by_key(|&i| runs[i].gpus.unwrap_or(u32::MAX));
        let next = std::sync::atomic::AtomicUsize::new(0);
        let slots: Vec<std::sync::Mutex<Option<metrics::Figures>>> =
            runs.iter().map(|_| std::sync::Mutex::new(None)).collect();
        std::thread::scope(|scope| {
            for _ in 0..workers {
                scope.spawn(|| loop {
                    let n = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    let Some(&i) = order.get(n) else {
                        break;
                    };
                    let figures = one(i);
                    *slots[i].lock().unwrap_or_else(|e| e.into_inner()) = Some(figures);
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
    board.clear();
    out
}

/// The progress of one or more replays on a terminal's stderr, redrawn in place at most every
/// 200 ms: `replaying siloed: 43 % (day 157 of 365)`, or for a batch `replaying 11 runs on 2
/// threads: 3 done, 41 % in all`. Nothing when stderr is not a terminal.
struct Progress {
    tty: bool,
    since: Secs,
    span: Secs,
    labels: Vec<String>,
    threads: usize,
    state: std::sync::Mutex<ProgressState>,
}

struct ProgressState {
    /// Per run: how far it is (seconds of the trace), `span` when done.
    at: Vec<Secs>,
    drawn: Option<Instant>,
    width: usize,
}

impl Progress {
    fn new(trace: &Trace, labels: Vec<String>, threads: usize) -> Progress {
        let n = labels.len();
        Progress {
            tty: std::io::stderr().is_terminal(),
            since: trace.since,
            span: (trace.until - trace.since).max(1),
            labels,
            threads,
            state: std::sync::Mutex::new(ProgressState {
                at: vec![0; n],
                drawn: None,
                width: 0,
            }),
        }
    }

    fn report(&self, run: usize, t: Secs) {
        if !self.tty {
            return;
        }
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(a) = st.at.get_mut(run) {
            *a = (t - self.since).clamp(0, self.span);
        }
        if st
            .drawn
            .is_some_and(|d| d.elapsed() < Duration::from_millis(200))
        {
            return;
        }
        st.drawn = Some(Instant::now());
        let line = if self.labels.len() == 1 {
            let days = (self.span + DAY - 1) / DAY;
            let done = st.at[0];
            format!(
                "replaying {}: {:.0} % (day {} of {days})",
                self.labels[0],
                100.0 * done as f64 / self.span as f64,
                (done / DAY + 1).min(days)
            )
        } else {
            let total: f64 = st.at.iter().map(|a| *a as f64 / self.span as f64).sum();
            let finished = st.at.iter().filter(|a| **a >= self.span).count();
            format!(
                "replaying {} runs on {} threads: {finished} done, {:.0} % in all",
                self.labels.len(),
                self.threads,
                100.0 * total / self.labels.len() as f64
            )
        };
        st.width = st.width.max(line.len());
        say_err_inline!("\r{line:<w$}", w = st.width);
    }

    fn done(&self, run: usize) {
        self.report(run, self.since + self.span);
    }

    fn clear(&self) {
        let st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if st.drawn.is_some() {
            say_err_inline!("\r{}\r", " ".repeat(st.width));
        }
    }
}

/// A capacity curve's points: each simulated candidate at each smaller capacity, with the
/// configuration it is replayed under there, and the points that have none.
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

pub(super) fn curve_plan(
    trace: &Trace,
    candidates: &[Candidate],
    args: &ReplayArgs,
    step: u32,
) -> CurvePlan {
    let full = total_gpus(trace);
    let rule = args.curve_quotas.rule();
    let mut plan = CurvePlan {
        points: Vec::new(),
        skipped: Vec::new(),
    };
    let gpus_at = (1..=args.capacity_curve.unwrap_or(0))
        .map_while(|i| full.checked_sub(i.saturating_mul(step)).filter(|g| *g > 0));
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

pub(super) fn total_gpus(trace: &Trace) -> u32 {
    trace
        .cluster
        .nodes
        .iter()
        .fold(0u32, |s, n| s.saturating_add(n.gpus))
}

/// `trace` with `remove` GPUs fewer ([`replay_curve::fewer_gpus`]).
pub(super) fn without_gpus(trace: &Trace, remove: u32) -> Trace {
    Trace {
        jobs: trace.jobs.clone(),
        cluster: replay_curve::fewer_gpus(&trace.cluster, remove),
        since: trace.since,
        until: trace.until,
        source: trace.source.clone(),
    }
}
