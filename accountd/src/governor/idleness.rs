//! Which running jobs have held idle GPUs for a whole window (issue 29), from their GPU
//! samples: what rule 3's idle-first order (`[governance] idle_first_reclaim`), the idle
//! policy (`[governance.idle_policy]`) and the metrics of idle jobs read. The
//! samples come from the side of the daemon that owns the database
//! ([`crate::daemon::idleness_from_store`]); the governor knows no SQL. Which jobs are idle is
//! the policy's decision ([`teamshare_policy::governance::idleness::idle_jobs`], which
//! `accountd replay` calls too).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
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
    /// Counts the daemon's sample collections: new samples exist only after one, so the
    /// windows are read again only then (none: every [`IDLENESS_REFRESH`]).
    pub collections: Option<Arc<AtomicU64>>,
    /// The collection count and the window lengths of the last complete read.
    read_of: Option<(u64, BTreeSet<Duration>)>,
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
    /// Read the windows again when the last read is older than [`IDLENESS_REFRESH`] and a
    /// collection brought samples since (or the configuration reads other windows). An error
    /// leaves the windows read before (they age out with the jobs that end: a job is idle only
    /// for samples of its own run).
    pub(super) fn refresh(&mut self, config: &Config, now: UnixSeconds) -> Result<(), String> {
        if self.read_at.is_some_and(|t| t.elapsed() < IDLENESS_REFRESH) {
            return Ok(());
        }
        let lengths = window_lengths(config);
        let collected = self.collections.as_ref().map(|c| c.load(Ordering::Relaxed));
        let read_of = collected.map(|n| (n, lengths.clone()));
        if read_of.is_some() && read_of == self.read_of {
            return Ok(());
        }
        self.read_at = Some(Instant::now());
        let Some(source) = &mut self.source else {
            return Ok(());
        };
        let mut read = BTreeMap::new();
        for length in lengths {
            match source(config, length, now) {
                Ok(Some(windows)) => {
                    read.insert(length, windows);
                }
                Ok(None) => return Ok(()),
                Err(e) => return Err(format!("GPU idleness not refreshed: {e}")),
            }
        }
        self.windows = read;
        self.read_of = read_of;
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The windows are read again only after a collection brought samples, or when the
    /// configuration reads other windows.
    #[test]
    fn windows_are_read_again_only_after_a_collection() {
        let reads = Arc::new(AtomicU64::new(0));
        let counted = reads.clone();
        let source: IdlenessSource = Box::new(move |_, _, _| {
            counted.fetch_add(1, Ordering::Relaxed);
            Ok(Some(Windows::new()))
        });
        let collections = Arc::new(AtomicU64::new(0));
        let mut idleness = Idleness {
            source: Some(source),
            collections: Some(collections.clone()),
            ..Idleness::default()
        };
        let config = |extra: &str| {
            let text =
                format!("[cluster]\nname = \"c\"\n[[team]]\nname = \"a\"\nquota = 1\n{extra}");
            teamshare_config::parse(&text, "t.toml").expect("valid")
        };
        let plain = config("");
        let mut refresh = |c: &Config| {
            idleness.read_at = None;
            idleness.refresh(c, 1_000).expect("read");
        };
        refresh(&plain);
        assert_eq!(reads.load(Ordering::Relaxed), 1, "one window: idle_window");
        refresh(&plain);
        assert_eq!(
            reads.load(Ordering::Relaxed),
            1,
            "no collection since: not read"
        );
        collections.fetch_add(1, Ordering::Relaxed);
        refresh(&plain);
        assert_eq!(reads.load(Ordering::Relaxed), 2, "a collection: read");
        let policy = config("[governance.idle_policy]\nnotice_after = \"1h\"\n");
        refresh(&policy);
        assert_eq!(reads.load(Ordering::Relaxed), 4, "other windows: both read");
    }
}
