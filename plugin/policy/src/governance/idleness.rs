//! Which running jobs have held idle GPUs for the whole idle window (issue 29), from their GPU
//! samples: the set rule 3's idle-first order (`[governance] idle_first_reclaim`) reads
//! ([`GovernInput::idle`](super::GovernInput::idle), [`Planner::set_idle`](super::Planner::set_idle)).
//!
//! One decision for both of its callers: accountd's governor, with the samples of the last
//! window read from the database, and `accountd replay`, with each job's samples replayed from
//! its simulated start. Neither reads samples here: they hand over sums per job run.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use super::{ClusterJob, Phase};

/// How often the governor reads the samples of the window again: they are collected every
/// `ingest_interval`, so asking more often finds nothing new. The replay refreshes its
/// simulated windows as often.
pub const IDLENESS_REFRESH: Duration = Duration::from_secs(10);

/// One job run's GPU samples of the window, all its GPUs together.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SampledWindow {
    /// How many samples.
    pub samples: u64,
    /// The GPU-time they stand for, in milliseconds.
    pub sampled_ms: i64,
    /// Of it, the samples below the idle threshold.
    pub idle_ms: i64,
}

/// The running jobs idle for the whole window that ends at `now`: started at least `window`
/// before it, their samples of the window (`windows`, by job id and the run's start) cover at
/// least half of its GPU-time (a node whose sampler stopped leaves its jobs unknown, never
/// idle), and every sample was below the idle threshold.
pub fn idle_jobs<'a>(
    jobs: impl IntoIterator<Item = &'a ClusterJob>,
    windows: &BTreeMap<(u64, i64), SampledWindow>,
    window: Duration,
    now: i64,
) -> BTreeSet<u64> {
    let window_s = i64::try_from(window.as_secs()).unwrap_or(i64::MAX);
    let window_ms = window_s.saturating_mul(1000);
    jobs.into_iter()
        .filter(|j| j.phase == Phase::Running && !j.completing && j.gpus > 0)
        .filter(|j| {
            let Some(start) = j.start.filter(|s| now.saturating_sub(*s) >= window_s) else {
                return false;
            };
            let Some(w) = windows.get(&(j.id, start)) else {
                return false;
            };
            let needed = window_ms.saturating_mul(i64::from(j.gpus));
            w.samples > 0 && w.sampled_ms.saturating_mul(2) >= needed && w.idle_ms >= w.sampled_ms
        })
        .map(|j| j.id)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn running(id: u64, gpus: u32, start: i64) -> ClusterJob {
        ClusterJob {
            id,
            team: "t".into(),
            phase: Phase::Running,
            gpus,
            gpu_type: None,
            priority: 1,
            submit: start,
            start: Some(start),
            eligible: true,
            parked: false,
            park_held: false,
            batch: true,
            nodes: vec!["n1".into()],
            node_count: 1,
            completing: false,
            tasks: 1,
        }
    }

    #[test]
    fn idle_means_the_whole_window_sampled_idle() {
        // Window 60 s at 1,000: jobs started at 900 (ran 100 s), 2 GPUs each, so the window
        // holds 120,000 GPU-ms; half of it (60,000) must be sampled.
        let window = Duration::from_secs(60);
        let jobs = vec![
            running(1, 2, 900), // all idle, fully sampled
            running(2, 2, 900), // one busy sample
            running(3, 2, 900), // idle, but only 50,000 GPU-ms sampled: unknown
            running(4, 2, 900), // no samples at all: unknown
            running(5, 2, 960), // idle, but started 40 s ago: not idle for the window
            running(6, 2, 900), // idle, exactly half sampled
        ];
        let w = |sampled_ms, idle_ms| SampledWindow {
            samples: 10,
            sampled_ms,
            idle_ms,
        };
        let windows = BTreeMap::from([
            ((1, 900), w(120_000, 120_000)),
            ((2, 900), w(120_000, 118_000)),
            ((3, 900), w(50_000, 50_000)),
            ((5, 960), w(80_000, 80_000)),
            ((6, 900), w(60_000, 60_000)),
        ]);
        let idle = idle_jobs(&jobs, &windows, window, 1_000);
        assert_eq!(idle, BTreeSet::from([1, 6]));
        // Another run of job 1 (requeued: a new start) is not the run sampled.
        let again = vec![running(1, 2, 930)];
        assert!(idle_jobs(&again, &windows, Duration::from_secs(60), 1_000).is_empty());
        // A job in its grace time (completing) is leaving anyway: never idle-first.
        let mut ending = running(1, 2, 900);
        ending.completing = true;
        assert!(idle_jobs([&ending], &windows, window, 1_000).is_empty());
    }
}
