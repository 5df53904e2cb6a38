//! Which running jobs have held idle GPUs for a whole window (issue 29), from their GPU
//! samples: what rule 3's idle-first order (`[governance] idle_first_reclaim`), the idle
//! policy (`[governance.idle_policy]`) and the metrics of idle jobs read. The
//! samples come from the side of the daemon that owns the database
//! ([`crate::daemon::idleness_from_store`]); the governor knows no SQL.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use teamshare_config::Config;
use teamshare_policy::governance::{ClusterJob, Phase};

use crate::period::UnixSeconds;

/// The samples are collected every `ingest_interval` (seconds); asking for the windows more
/// often than this finds nothing new.
pub(super) const IDLENESS_REFRESH: Duration = Duration::from_secs(10);

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

/// Per job run (JobIDRaw, StartTime as the nodes saw it), its samples of the window of the
/// given length that ends at the given instant. `Ok(None)`: nothing to read yet (no database).
pub type IdlenessSource =
    Box<dyn FnMut(&Config, Duration, UnixSeconds) -> Result<Option<Windows>, String> + Send>;

/// Per job run (JobIDRaw, StartTime), its samples of one window.
pub type Windows = BTreeMap<(u64, i64), SampledWindow>;

/// The windows last read, per length, and when.
#[derive(Default)]
pub(super) struct Idleness {
    pub source: Option<IdlenessSource>,
    pub windows: BTreeMap<Duration, Windows>,
    pub read_at: Option<Instant>,
}

/// The window lengths the configuration reads: `idle_window` (rule 3's idle-first order and
/// the metrics of jobs idle now), and the idle policy's `notice_after` and, where an action
/// follows the notice, `notice_after + act_after` (idle since before the notice).
pub(super) fn window_lengths(config: &Config) -> BTreeSet<Duration> {
    let mut lengths = BTreeSet::from([config.governance.idle_window]);
    if let Some(p) = &config.idle_policy {
        lengths.insert(p.notice_after);
        if p.action != teamshare_config::IdleAction::Notice {
            lengths.insert(p.notice_after.saturating_add(p.act_after));
        }
    }
    lengths
}

impl Idleness {
    /// Read the windows again when the last read is older than [`IDLENESS_REFRESH`]. An
    /// error leaves the windows read before (they age out with the jobs that end: a job is
    /// idle only for samples of its own run).
    pub(super) fn refresh(&mut self, config: &Config, now: UnixSeconds) -> Result<(), String> {
        if self.read_at.is_some_and(|t| t.elapsed() < IDLENESS_REFRESH) {
            return Ok(());
        }
        self.read_at = Some(Instant::now());
        let Some(source) = &mut self.source else {
            return Ok(());
        };
        let mut read = BTreeMap::new();
        for length in window_lengths(config) {
            match source(config, length, now) {
                Ok(Some(windows)) => {
                    read.insert(length, windows);
                }
                Ok(None) => return Ok(()),
                Err(e) => return Err(format!("GPU idleness not refreshed: {e}")),
            }
        }
        self.windows = read;
        Ok(())
    }

    /// A job run's samples of the window of `length` last read (none: nothing sampled).
    pub(super) fn sampled(&self, run: (u64, i64), length: Duration) -> SampledWindow {
        self.windows
            .get(&length)
            .and_then(|w| w.get(&run))
            .copied()
            .unwrap_or_default()
    }

    /// The running jobs idle for the whole window of `length` that ends at `now`
    /// ([`idle_jobs`]); none where that window was not read.
    pub(super) fn idle<'j>(
        &self,
        jobs: impl IntoIterator<Item = &'j ClusterJob>,
        length: Duration,
        now: UnixSeconds,
    ) -> BTreeSet<u64> {
        match self.windows.get(&length) {
            Some(w) => idle_jobs(jobs, w, length, now),
            None => BTreeSet::new(),
        }
    }
}

/// The running jobs idle for the whole window that ends at `now`: started at least `window`
/// before it, their samples of the window cover at least half of its GPU-time (a node whose
/// sampler stopped leaves its jobs unknown, never idle), and every sample was below the idle
/// threshold.
pub(super) fn idle_jobs<'j>(
    jobs: impl IntoIterator<Item = &'j ClusterJob>,
    windows: &Windows,
    window: Duration,
    now: UnixSeconds,
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
    }
}
