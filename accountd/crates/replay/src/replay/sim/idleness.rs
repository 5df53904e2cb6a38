//! GPU idleness in the simulation (issue 29), from each job's samples replayed from its
//! simulated start ([`crate::replay::activity`]): the running jobs idle for the whole idle
//! window, which the governor's plan puts first among rule 3's victims where the candidate
//! says `idle_first_reclaim = true`, and the idle part of the work a preemption throws away.
//!
//! As the live governor: the windows are read again at most every
//! [`IDLENESS_REFRESH`] (there from the database, here from the series), and every pass
//! decides from them with the policy's own [`idle_jobs`].

use std::collections::{BTreeMap, BTreeSet};

use teamshare_policy::governance::idleness::{idle_jobs, SampledWindow, IDLENESS_REFRESH};

use super::{row_id, secs, Sim};
use crate::replay::Secs;

/// What the simulated governor knows of the jobs' idleness.
#[derive(Default)]
pub(super) struct Idleness {
    /// Per running job (its id, its run's start), its samples of the window last read.
    windows: BTreeMap<(u64, Secs), SampledWindow>,
    read_at: Option<Secs>,
    /// The running jobs idle for the whole window at the last pass.
    pub(super) jobs: BTreeSet<u64>,
}

impl Sim<'_> {
    /// Before a pass: the running jobs idle for the whole window now, given to the plan.
    /// Nothing where the candidate does not order by idleness or no job has samples.
    pub(super) fn refresh_idleness(&mut self) {
        if !self.config.governance.idle_first_reclaim || !self.sampled {
            return;
        }
        let window = self.config.governance.idle_window;
        let refresh = secs(IDLENESS_REFRESH);
        if self
            .idleness
            .read_at
            .is_none_or(|t| self.now.saturating_sub(t) >= refresh)
        {
            self.idleness.read_at = Some(self.now);
            self.idleness.windows = self.windows(secs(window));
        }
        let running = self
            .running_prio
            .iter()
            .filter_map(|&(_, j)| self.planner.get(row_id(j)));
        let idle = idle_jobs(running, &self.idleness.windows, window, self.now);
        if idle != self.idleness.jobs {
            self.planner.set_idle(idle.clone());
            self.idleness.jobs = idle;
        }
    }

    /// Each running job's samples of the `window` seconds up to now, from its series (only
    /// its current run's: no earlier than the run's start).
    fn windows(&self, window: Secs) -> BTreeMap<(u64, Secs), SampledWindow> {
        let mut out = BTreeMap::new();
        for &(_, j) in &self.running_prio {
            let into = self.now - self.jobs[j].run_start;
            let from = into.saturating_sub(window).max(0);
            if let Some(w) = self.sampled_between(j, from, into) {
                out.insert((row_id(j), self.jobs[j].run_start), w);
            }
        }
        out
    }

    /// The samples of job `j` from `from` to `to` seconds into its current run (none without a
    /// series).
    fn sampled_between(&self, j: usize, from: Secs, to: Secs) -> Option<SampledWindow> {
        let series = self.activity[j]?;
        let done = self.jobs[j].done;
        let ms = |s: Secs| done.saturating_add(s).saturating_mul(1000);
        Some(series.between(ms(from), ms(to)))
    }

    /// The GPU-time job `j`'s samples show idle from `from` to `to` seconds into its current
    /// run, in GPU-ms, at most the span's GPU-time.
    pub(super) fn idle_gpu_ms(&self, j: usize, from: Secs, to: Secs) -> i64 {
        let span = (to - from)
            .max(0)
            .saturating_mul(i64::from(self.jobs[j].gpus))
            .saturating_mul(1000);
        self.sampled_between(j, from, to)
            .map_or(0, |w| w.idle_ms.clamp(0, span))
    }
}
