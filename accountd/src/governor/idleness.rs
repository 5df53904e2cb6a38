//! Which running jobs have held idle GPUs for a whole window (issue 29), from their GPU
//! samples: what rule 3's idle-first order (`[governance] idle_first_reclaim`), the idle
//! policy (`[governance.idle_policy]`) and the metrics of idle jobs read. The
//! samples come from the side of the daemon that owns the database
//! ([`crate::daemon::idleness_from_store`]); the governor knows no SQL. Which jobs are idle is
//! the policy's decision ([`teamshare_policy::governance::idleness::idle_jobs`], which
//! `accountd replay` calls too).

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use teamshare_config::Config;
pub use teamshare_policy::governance::idleness::SampledWindow;
use teamshare_policy::governance::idleness::{idle_jobs, IDLENESS_REFRESH};
use teamshare_policy::governance::ClusterJob;

use crate::period::UnixSeconds;

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
