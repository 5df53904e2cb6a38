//! Which running jobs have held idle GPUs for a whole window (issue 29), from their GPU
//! samples: what rule 3's idle-first order (`[governance] idle_first_reclaim`), the idle
//! policy (`[governance.idle_policy]`) and the metrics of idle jobs read. The
//! samples come from the side of the daemon that owns the database
//! ([`crate::daemon::idleness_from_store`]); the governor knows no SQL. Which jobs are idle is
//! the policy's decision ([`teamshare_policy::governance::idleness::idle_jobs`], which
//! `accountd replay` calls too).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
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

/// What a read of every window gives: the windows per length, or `None` (no database yet).
type WindowsRead = Result<Option<BTreeMap<Duration, Windows>>, String>;

/// The windows last read, per length, and when; the read itself runs on a thread of its own,
/// so that a pass never waits for it (at 1 s sampling on 512 GPUs a 15-minute window is 0.4 s
/// of reading: docs/benchmarks.md §17).
#[derive(Default)]
pub(super) struct Idleness {
    pub source: Option<Arc<Mutex<IdlenessSource>>>,
    pub windows: BTreeMap<Duration, Windows>,
    pub read_at: Option<Instant>,
    /// Counts the daemon's sample collections: new samples exist only after one, so the
    /// windows are read again only then (none: every [`IDLENESS_REFRESH`]).
    pub collections: Option<Arc<AtomicU64>>,
    /// The collection count and the window lengths of the last complete read.
    read_of: Option<ReadOf>,
    /// A read under way, and what it reads for.
    reading: Option<(std::thread::JoinHandle<WindowsRead>, Option<ReadOf>)>,
    /// How many reads replaced the windows (a pass that sees this move plans again).
    windows_taken: u64,
}

impl Idleness {
    /// How many reads replaced the windows so far.
    pub(super) fn windows_taken(&self) -> u64 {
        self.windows_taken
    }
}

/// A read's collection count and window lengths.
type ReadOf = (u64, BTreeSet<Duration>);

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
    /// Take the windows of a read that has ended, and start another when the last one is
    /// older than [`IDLENESS_REFRESH`] and a collection brought samples since (or the
    /// configuration reads other windows). Never waits: the pass goes on with the windows
    /// read before. An error leaves them too (they age out with the jobs that end: a job is
    /// idle only for samples of its own run).
    pub(super) fn refresh(&mut self, config: &Config, now: UnixSeconds) -> Result<(), String> {
        let taken = self.take_read(false);
        if self.reading.is_none() {
            if let Some(read_of) = self.due(config) {
                self.start_read(config, now, read_of)?;
            }
        }
        taken
    }

    /// The same, waiting for the read (`accountd govern --dry-run`, which plans once).
    pub(super) fn refresh_now(&mut self, config: &Config, now: UnixSeconds) -> Result<(), String> {
        let mut taken = self.take_read(true);
        if let Some(read_of) = self.due(config) {
            self.start_read(config, now, read_of)?;
            taken = taken.and(self.take_read(true));
        }
        taken
    }

    /// Whether a read is due, and what it would read for.
    fn due(&self, config: &Config) -> Option<Option<ReadOf>> {
        if self.source.is_none() || self.read_at.is_some_and(|t| t.elapsed() < IDLENESS_REFRESH) {
            return None;
        }
        let lengths = window_lengths(config);
        let collected = self.collections.as_ref().map(|c| c.load(Ordering::Relaxed));
        let read_of = collected.map(|n| (n, lengths));
        (read_of.is_none() || read_of != self.read_of).then_some(read_of)
    }

    fn start_read(
        &mut self,
        config: &Config,
        now: UnixSeconds,
        read_of: Option<ReadOf>,
    ) -> Result<(), String> {
        let Some(source) = self.source.clone() else {
            return Ok(());
        };
        self.read_at = Some(Instant::now());
        let config = config.clone();
        let spawned = std::thread::Builder::new()
            .name("governor-idleness".into())
            .spawn(move || {
                let mut source = source.lock().unwrap_or_else(|e| e.into_inner());
                read_windows(&mut source, &config, now)
            });
        match spawned {
            Ok(h) => {
                self.reading = Some((h, read_of));
                Ok(())
            }
            Err(e) => Err(format!(
                "GPU idleness not refreshed: cannot start its read: {e}"
            )),
        }
    }

    /// The windows of the read under way, if it has ended (or, with `wait`, once it has).
    fn take_read(&mut self, wait: bool) -> Result<(), String> {
        let Some((handle, read_of)) = self.reading.take() else {
            return Ok(());
        };
        if !wait && !handle.is_finished() {
            self.reading = Some((handle, read_of));
            return Ok(());
        }
        match handle.join() {
            Ok(Ok(Some(windows))) => {
                self.windows = windows;
                self.read_of = read_of;
                self.windows_taken += 1;
                Ok(())
            }
            Ok(Ok(None)) => Ok(()),
            Ok(Err(e)) => Err(format!("GPU idleness not refreshed: {e}")),
            Err(_) => {
                Err("GPU idleness not refreshed: its read stopped with an internal error".into())
            }
        }
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

/// Every window the configuration reads, from `source`.
fn read_windows(source: &mut IdlenessSource, config: &Config, now: UnixSeconds) -> WindowsRead {
    let mut read = BTreeMap::new();
    for length in window_lengths(config) {
        match source(config, length, now)? {
            Some(windows) => {
                read.insert(length, windows);
            }
            None => return Ok(None),
        }
    }
    Ok(Some(read))
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
            source: Some(Arc::new(Mutex::new(source))),
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
            idleness.refresh_now(c, 1_000).expect("read");
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

    /// A pass never waits for the read: refresh starts it and returns; a later refresh takes
    /// what it read.
    #[test]
    fn the_pass_does_not_wait_for_the_read() {
        let (release, released) = std::sync::mpsc::channel::<()>();
        let released = Mutex::new(released);
        let source: IdlenessSource = Box::new(move |_, _, _| {
            let got = released
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .recv_timeout(Duration::from_secs(30));
            got.map_err(|_| "the test never released the read".to_string())?;
            Ok(Some(Windows::from([((7, 500), SampledWindow::default())])))
        });
        let mut idleness = Idleness {
            source: Some(Arc::new(Mutex::new(source))),
            ..Idleness::default()
        };
        let text = "[cluster]\nname = \"c\"\n[[team]]\nname = \"a\"\nquota = 1\n";
        let config = teamshare_config::parse(text, "t.toml").expect("valid");
        // The read blocks until released: refresh returns meanwhile, with no windows yet.
        idleness.refresh(&config, 1_000).expect("started");
        assert!(idleness.windows.is_empty() && idleness.reading.is_some());
        release.send(()).expect("released");
        while idleness
            .reading
            .as_ref()
            .is_some_and(|(h, _)| !h.is_finished())
        {
            std::thread::sleep(Duration::from_millis(5));
        }
        idleness.refresh(&config, 1_010).expect("taken");
        assert_eq!(idleness.windows.len(), 1, "the idle_window's read is taken");
    }
}
