//! Which running jobs have held idle GPUs for the whole idle window (issue 29), from their GPU
//! samples: what rule 3's idle-first order (`[governance] idle_first_reclaim`) reads. The
//! samples come from the side of the daemon that owns the database
//! ([`crate::daemon::idleness_from_store`]); the governor knows no SQL. Which jobs are idle is
//! the policy's decision ([`teamshare_policy::governance::idleness::idle_jobs`], which
//! `accountd replay` calls too).

use std::collections::BTreeMap;
use std::time::Instant;

use teamshare_config::Config;
pub use teamshare_policy::governance::idleness::SampledWindow;
use teamshare_policy::governance::idleness::IDLENESS_REFRESH;

use crate::period::UnixSeconds;

/// Per job run (JobIDRaw, StartTime as the nodes saw it), its samples of the last
/// `idle_window` before the given instant. `Ok(None)`: nothing to read yet (no database).
pub type IdlenessSource = Box<
    dyn FnMut(&Config, UnixSeconds) -> Result<Option<BTreeMap<(u64, i64), SampledWindow>>, String>
        + Send,
>;

/// The windows last read, and when.
#[derive(Default)]
pub(super) struct Idleness {
    pub source: Option<IdlenessSource>,
    pub windows: BTreeMap<(u64, i64), SampledWindow>,
    pub read_at: Option<Instant>,
}

impl Idleness {
    /// Read the windows again when the configuration uses them and the last read is older
    /// than [`IDLENESS_REFRESH`]. An error leaves the windows read before (they age out with
    /// the jobs that end: a job is idle only for samples of its own run).
    pub(super) fn refresh(&mut self, config: &Config, now: UnixSeconds) -> Result<(), String> {
        if !config.governance.idle_first_reclaim
            || self.read_at.is_some_and(|t| t.elapsed() < IDLENESS_REFRESH)
        {
            return Ok(());
        }
        self.read_at = Some(Instant::now());
        let Some(source) = &mut self.source else {
            return Ok(());
        };
        match source(config, now) {
            Ok(Some(windows)) => self.windows = windows,
            Ok(None) => {}
            Err(e) => return Err(format!("GPU idleness not refreshed: {e}")),
        }
        Ok(())
    }
}
