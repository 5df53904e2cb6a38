//! What the plugin knows, held in memory so the submit path never touches a file.
//!
//! `init` loads teamshare.toml once; a background thread then watches it and the governor's
//! state, and swaps in each new valid version. What to read when, and what it means, is
//! `teamshare_policy::inputs::Reloader` (pure, tested there; reads bounded, regular files only,
//! never blocking); an invalid new file keeps the last good one, with one log line per change of
//! the file saying why (job_submit/lua does the same with its script). This module only holds
//! the snapshots the submit path reads and runs the thread.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::thread::JoinHandle;
use std::time::Instant;

use teamshare_config::Config;
use teamshare_policy::governance::PublishedState;
use teamshare_policy::inputs::{Event, LogLine, Reloader, Staleness, StalenessLog};
use teamshare_policy::submit::Admitted;

static CURRENT: RwLock<Option<Arc<Config>>> = RwLock::new(None);
/// The governor's last published state, as read by the watcher.
static GOVERNOR: RwLock<Option<Arc<PublishedState>>> = RwLock::new(None);
/// In-quota admissions since that state (job_submit calls are serialised by slurmctld, the
/// mutex only makes that explicit).
static ADMITTED: Mutex<Admitted> = Mutex::new(Admitted::new());
/// The staleness condition last logged, so each change is logged once, not per job.
static STALE_LOG: Mutex<StalenessLog> = Mutex::new(StalenessLog::new());
static STOP: AtomicBool = AtomicBool::new(false);
static RELOADER: Mutex<Option<JoinHandle<()>>> = Mutex::new(None);

fn read<T: Clone>(lock: &RwLock<T>) -> T {
    // A poisoned lock only means a writer panicked mid-swap; the value inside is still whole.
    match lock.read() {
        Ok(g) => g.clone(),
        Err(p) => p.into_inner().clone(),
    }
}

fn write<T>(lock: &RwLock<T>, value: T) {
    match lock.write() {
        Ok(mut g) => *g = value,
        Err(p) => *p.into_inner() = value,
    }
}

/// The configuration to judge a request with; `None` when no valid one was ever loaded.
pub fn current() -> Option<Arc<Config>> {
    read(&CURRENT)
}

/// The governor's state, if any was read.
pub fn governor() -> Option<Arc<PublishedState>> {
    read(&GOVERNOR)
}

/// Run `f` with the admissions `state` does not count yet.
pub fn with_admitted<T>(state: &PublishedState, f: impl FnOnce(&mut Admitted) -> T) -> T {
    let mut g = match ADMITTED.lock() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    };
    g.refresh_for(state);
    f(&mut g)
}

/// Log the first decision that finds the state stale (for each reason), and the first that
/// finds it current again.
pub fn note_staleness(s: &Staleness) {
    let line = match STALE_LOG.lock() {
        Ok(mut g) => g.note(s),
        Err(p) => p.into_inner().note(s),
    };
    match line {
        Some(LogLine::Error(l)) => tracing::error!("{l}"),
        Some(LogLine::Info(l)) => tracing::info!("{l}"),
        None => {}
    }
}

/// teamshare.toml beside slurm.conf, or `TEAMSHARE_CONFIG` when set (tests, odd layouts).
fn config_path() -> PathBuf {
    match std::env::var_os("TEAMSHARE_CONFIG") {
        Some(p) => PathBuf::from(p),
        None => teamshare_config::default_path(),
    }
}

/// Do what a [`Reloader`] step says: swap the snapshots the submit path reads, log the lines.
fn apply(events: Vec<Event>) {
    for e in events {
        match e {
            Event::Config(c, line) => {
                tracing::info!("{line}");
                write(&CURRENT, Some(c));
            }
            Event::State(s) => write(&GOVERNOR, s),
            Event::Error(line) => tracing::error!("{line}"),
        }
    }
}

pub fn init() -> i32 {
    crate::log::install();
    let mut reloader = Reloader::new(config_path(), env!("CARGO_PKG_VERSION"));
    apply(reloader.start(Instant::now()));
    start_reloader(reloader);
    slurm_sys::SLURM_SUCCESS as i32
}

pub fn fini() -> i32 {
    STOP.store(true, Ordering::SeqCst);
    let handle = match RELOADER.lock() {
        Ok(mut g) => g.take(),
        Err(p) => p.into_inner().take(),
    };
    if let Some(h) = handle {
        // The thread's code lives in this library, which slurmctld may unload after fini:
        // it must be gone before we return.
        h.thread().unpark();
        let _ = h.join();
    }
    slurm_sys::SLURM_SUCCESS as i32
}

fn start_reloader(reloader: Reloader) {
    STOP.store(false, Ordering::SeqCst);
    let spawned = std::thread::Builder::new()
        .name("teamshare-watch".into())
        .spawn(move || {
            // Never let a panic end the watcher silently.
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| watch(reloader)));
            if r.is_err() {
                tracing::error!("configuration watcher stopped after an internal error; restart slurmctld to resume reloads");
            }
        });
    match spawned {
        Ok(h) => {
            if let Ok(mut g) = RELOADER.lock() {
                *g = Some(h);
            }
        }
        Err(e) => tracing::error!("cannot start the configuration watcher: {e}"),
    }
}

/// The watcher thread: wake every [`Reloader::STATE_INTERVAL`] until `fini`.
fn watch(mut reloader: Reloader) {
    while !STOP.load(Ordering::SeqCst) {
        std::thread::park_timeout(Reloader::STATE_INTERVAL);
        if STOP.load(Ordering::SeqCst) {
            break;
        }
        apply(reloader.tick(Instant::now()));
    }
}
