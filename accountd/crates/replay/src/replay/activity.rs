//! Each job's GPU activity from the NVML samples accountd collected (issue 29): what lets the
//! simulation know which jobs were idle for the whole `[governance] idle_window`, and how much
//! of the work a preemption threw away was no work at all.
//!
//! - **Whose samples.** A job of the trace does the work of its last run (its `work` is that
//!   run's elapsed time), so its samples are that run's: keyed by (JobIDRaw, StartTime), a
//!   sample whose node could not tell the start counted where its tick falls in that run.
//!   Earlier runs of a requeued job, and samples of no job, are left out.
//! - **Replayed from the job's start.** The samples are kept as offsets into the job's work,
//!   all its GPUs together, summed per stretch of [`STRETCH_SECS`]: a simulated run that starts
//!   at `s` with `d` seconds of work already saved (a checkpoint) is at offset `d + t - s` at
//!   instant `t`. Where the run goes on beyond what was sampled, nothing is known.
//! - **Idle** is below `[accountd] idle_threshold_percent`, the threshold the reports and the
//!   live governor use, read once with the configuration the replay is given.
//! - **No samples, no idleness.** A trace without any (an SWF file, a database whose sampler
//!   never ran) has none ([`super::Trace::activity`] is `None`); a job without samples is never
//!   idle, and all its lost work counts.
//!
//! Stretches cost precision at a window's ends, at most one stretch of each (a 15-minute
//! window read as 15 or 16 minutes): the price of holding a month of a large site's samples
//! in memory (one row per job and minute rather than per GPU and tick).

use std::collections::BTreeMap;

use teamshare_policy::governance::idleness::SampledWindow;

use super::{Secs, Trace};
use crate::store::{RunActivity, Store, StoreError};

/// The stretch of time samples are summed over.
pub const STRETCH_SECS: Secs = 60;

/// The GPU samples of a trace's jobs.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Activity {
    /// Per trace job id, its samples.
    pub jobs: BTreeMap<u64, Series>,
    /// The idle threshold the samples were read with, percent.
    pub idle_threshold_pct: f64,
}

/// One job's samples as offsets into its work, all its GPUs together.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Series {
    /// Where each stretch starts, ms into the job's work, ascending.
    at_ms: Vec<i64>,
    /// The sums over the stretches before each place (one more than `at_ms`).
    before: Vec<SampledWindow>,
}

impl Series {
    /// A series of stretches `(offset ms, their samples)`, in any order (the same offset
    /// twice: summed).
    pub fn new(stretches: impl IntoIterator<Item = (i64, SampledWindow)>) -> Series {
        let mut by_offset: BTreeMap<i64, SampledWindow> = BTreeMap::new();
        for (at, w) in stretches {
            let s = by_offset.entry(at).or_default();
            s.samples = s.samples.saturating_add(w.samples);
            s.sampled_ms = s.sampled_ms.saturating_add(w.sampled_ms);
            s.idle_ms = s.idle_ms.saturating_add(w.idle_ms);
        }
        let mut series = Series {
            at_ms: Vec::with_capacity(by_offset.len()),
            before: Vec::with_capacity(by_offset.len() + 1),
        };
        let mut sum = SampledWindow::default();
        series.before.push(sum);
        for (at, w) in by_offset {
            sum.samples = sum.samples.saturating_add(w.samples);
            sum.sampled_ms = sum.sampled_ms.saturating_add(w.sampled_ms);
            sum.idle_ms = sum.idle_ms.saturating_add(w.idle_ms);
            series.at_ms.push(at);
            series.before.push(sum);
        }
        series
    }

    /// The samples of the stretches that start in `[from_ms, to_ms)` of the job's work.
    pub fn between(&self, from_ms: i64, to_ms: i64) -> SampledWindow {
        if to_ms <= from_ms {
            return SampledWindow::default();
        }
        let i = self.at_ms.partition_point(|a| *a < from_ms);
        let k = self.at_ms.partition_point(|a| *a < to_ms);
        let (a, b) = (self.before[i], self.before[k]);
        SampledWindow {
            samples: b.samples - a.samples,
            sampled_ms: b.sampled_ms - a.sampled_ms,
            idle_ms: b.idle_ms - a.idle_ms,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.at_ms.is_empty()
    }
}

/// The samples of `trace`'s jobs in `store` (cluster `cluster`), idle below `idle_threshold`
/// percent; `None` when none of its jobs has any.
pub fn load(
    store: &Store,
    cluster: &str,
    trace: &Trace,
    idle_threshold: f64,
) -> Result<Option<Activity>, StoreError> {
    // Each started job's last run: the run whose work the job replays.
    let mut last_runs: BTreeMap<u64, (Secs, Secs)> = BTreeMap::new();
    for j in &trace.jobs {
        if let Some(&(start, end)) = j.observed.runs.last() {
            last_runs.insert(j.id, (start, end.unwrap_or(trace.until).max(start)));
        }
    }
    let Some(until) = last_runs.values().map(|r| r.1).max() else {
        return Ok(None);
    };
    let rows = store.run_activity(
        cluster,
        trace.since,
        until.saturating_add(STRETCH_SECS),
        idle_threshold,
        STRETCH_SECS * 1000,
    )?;
    let mut stretches: BTreeMap<u64, Vec<(i64, SampledWindow)>> = BTreeMap::new();
    for row in &rows {
        let id = u64::from(row.job_id_raw);
        let Some(&(start, end)) = last_runs.get(&id) else {
            continue;
        };
        if of_run(row, start, end) {
            let at = (row.from_ms - start.saturating_mul(1000)).max(0);
            stretches.entry(id).or_default().push((at, window_of(row)));
        }
    }
    if stretches.is_empty() {
        return Ok(None);
    }
    Ok(Some(Activity {
        jobs: stretches
            .into_iter()
            .map(|(id, s)| (id, Series::new(s)))
            .collect(),
        idle_threshold_pct: idle_threshold,
    }))
}

/// Whether a row of samples is the run `[start, end)`'s: its start, or none known and its
/// stretch within the run.
fn of_run(row: &RunActivity, start: Secs, end: Secs) -> bool {
    if row.job_start != 0 {
        return row.job_start == start;
    }
    let stretch_end = row.from_ms.saturating_add(STRETCH_SECS * 1000);
    stretch_end > start.saturating_mul(1000) && row.from_ms < end.saturating_mul(1000)
}

fn window_of(row: &RunActivity) -> SampledWindow {
    SampledWindow {
        samples: row.samples,
        sampled_ms: row.sampled_ms,
        idle_ms: row.idle_ms,
    }
}

impl Activity {
    /// What the notes say of the samples: how many of the trace's started jobs have them, and
    /// the threshold.
    pub fn describe(&self, trace: &Trace) -> String {
        let started = trace
            .jobs
            .iter()
            .filter(|j| !j.observed.runs.is_empty())
            .count();
        format!(
            "GPU samples: {} of {started} started jobs have samples of their last run, replayed from each simulated start in stretches of {STRETCH_SECS} s; idle below {} % (idle_threshold_percent); a job without samples is never idle",
            self.jobs.len(),
            self.idle_threshold_pct
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w(samples: u64, sampled_ms: i64, idle_ms: i64) -> SampledWindow {
        SampledWindow {
            samples,
            sampled_ms,
            idle_ms,
        }
    }

    #[test]
    fn a_series_sums_the_stretches_that_start_in_a_span() {
        // Stretches at 0, 60 and 120 s (given out of order, 60 twice).
        let s = Series::new([
            (120_000, w(2, 20_000, 0)),
            (0, w(2, 20_000, 20_000)),
            (60_000, w(1, 10_000, 10_000)),
            (60_000, w(1, 10_000, 0)),
        ]);
        assert_eq!(s.between(0, 180_000), w(6, 60_000, 30_000));
        // [60 s, 120 s): the stretch at 60 only; [1 ms, 60 s): nothing starts there.
        assert_eq!(s.between(60_000, 120_000), w(2, 20_000, 10_000));
        assert_eq!(s.between(1, 60_000), w(0, 0, 0));
        assert_eq!(s.between(120_000, 60_000), w(0, 0, 0));
        assert!(!s.is_empty() && Series::new([]).is_empty());
    }

    #[test]
    fn a_job_replays_the_samples_of_its_last_run() {
        use crate::store::test_support::{run, sample};
        const T: Secs = 1_714_521_600; // a whole minute
        let mut store = Store::open_in_memory().unwrap();
        // Job 7 ran [T, T + 600) and, requeued, [T + 1000, T + 2800): the trace replays the
        // second run's work. Job 8 ran but was never sampled.
        let mut first = run(7, "a", T, Some(T + 600), 1);
        first.state = "REQUEUED".into();
        let second = run(7, "a", T + 1000, Some(T + 2800), 1);
        let other = run(8, "a", T + 10, Some(T + 20), 1);
        store
            .record_runs(&[first, second, other], T + 3000, None)
            .unwrap();
        let trace = crate::replay::history::load_jobs(
            &store,
            "c",
            T,
            T + 3600,
            3600,
            crate::replay::history::constant_cluster(4, 4, None),
        )
        .unwrap()
        .trace;
        assert!(load(&store, "c", &trace, 5.0).unwrap().is_none());
        let mut unknown = sample("GPU-a", T + 1090, Some((7, 0)), 50);
        unknown.job_start = None;
        let samples = [
            sample("GPU-a", T + 60, Some((7, T)), 0), // the first run's: left out
            sample("GPU-a", T + 1010, Some((7, T + 1000)), 0), // 10 s in
            sample("GPU-a", T + 1080, Some((7, T + 1000)), 90), // 80 s in
            unknown,                                  // start unknown, in the run
            sample("GPU-a", T + 1100, None, 0),       // no job: left out
        ];
        store.record_samples("c", &samples, 5.0, T + 3000).unwrap();
        let a = load(&store, "c", &trace, 5.0).unwrap().expect("samples");
        assert_eq!(a.jobs.keys().copied().collect::<Vec<_>>(), [7]);
        let s = &a.jobs[&7];
        // The minute [T + 960, T + 1020) starts 40 s before the run: at 0. The minute
        // [T + 1080, T + 1140) is 80 s in, with both busy samples.
        assert_eq!(s.at_ms, [0, 80_000]);
        assert_eq!(s.between(0, 1), w(1, 10_000, 10_000));
        assert_eq!(s.between(1, 3_600_000), w(2, 20_000, 0));
        assert!(a
            .describe(&trace)
            .starts_with("GPU samples: 1 of 2 started jobs"));
    }
}
