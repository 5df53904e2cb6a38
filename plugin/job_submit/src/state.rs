//! What the plugin knows, held in memory so the submit path never touches a file.
//!
//! `init` loads teamshare.toml once; a background thread then watches it and the governor's
//! state, and swaps in each new valid version. Reading is `teamshare_policy::inputs` (bounded,
//! regular files only, never blocking); an invalid new file keeps the last good one, with one
//! log line per change of the file saying why (job_submit/lua does the same with its script).

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use teamshare_config::Config;
use teamshare_policy::governance::PublishedState;
use teamshare_policy::inputs::{
    Change, ConfigSource, LogLine, Staleness, StalenessLog, StateSource,
};
use teamshare_policy::submit::Admitted;

use crate::log;

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

/// How often the reloader looks at the configuration's stamp.
const WATCH_INTERVAL: Duration = Duration::from_secs(2);
/// How often it looks at the governor's state file (rewritten every governor pass).
const STATE_INTERVAL: Duration = Duration::from_millis(250);

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
        Some(LogLine::Error(l)) => log::error(&l),
        Some(LogLine::Info(l)) => log::info(&l),
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

pub fn init() -> i32 {
    let mut config = ConfigSource::new(config_path());
    match config.poll() {
        Some(Change::Loaded(c)) => {
            log::info(&format!(
                "loaded {} cluster={} teams={} digest={} version={}",
                config.path().display(),
                c.cluster.name,
                c.teams.len(),
                c.digest,
                env!("CARGO_PKG_VERSION")
            ));
            write(&CURRENT, Some(c));
        }
        // Refusing to start would take slurmctld down with it; refuse GPU jobs instead,
        // loudly, until a valid file appears.
        Some(Change::Kept(why)) => log::error(&format!(
            "no valid configuration at {}; GPU jobs are refused until it is fixed: {why}",
            config.path().display()
        )),
        None => {}
    }
    let mut state = config
        .current()
        .map(|c| StateSource::new(c.accountd.state_file.clone()));
    if let Some(s) = state.as_mut() {
        poll_state(s);
    }
    start_reloader(config, state);
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

fn start_reloader(config: ConfigSource, state: Option<StateSource>) {
    STOP.store(false, Ordering::SeqCst);
    let spawned = std::thread::Builder::new()
        .name("teamshare-watch".into())
        .spawn(move || {
            // Never let a panic end the watcher silently.
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| watch(config, state)));
            if r.is_err() {
                log::error("configuration watcher stopped after an internal error; restart slurmctld to resume reloads");
            }
        });
    match spawned {
        Ok(h) => {
            if let Ok(mut g) = RELOADER.lock() {
                *g = Some(h);
            }
        }
        Err(e) => log::error(&format!("cannot start the configuration watcher: {e}")),
    }
}

fn watch(mut config: ConfigSource, mut state: Option<StateSource>) {
    let mut last_config_check = Instant::now();
    while !STOP.load(Ordering::SeqCst) {
        std::thread::park_timeout(STATE_INTERVAL);
        if STOP.load(Ordering::SeqCst) {
            break;
        }
        if let Some(s) = state.as_mut() {
            poll_state(s);
        }
        if last_config_check.elapsed() < WATCH_INTERVAL {
            continue;
        }
        last_config_check = Instant::now();
        match config.poll() {
            Some(Change::Loaded(c)) => {
                log::info(&format!(
                    "reloaded {} teams={} digest={}",
                    config.path().display(),
                    c.teams.len(),
                    c.digest
                ));
                // A new state file path starts a new watch (and a read at the next poll).
                if state.as_ref().map(|s| s.path()) != Some(c.accountd.state_file.as_path()) {
                    state = Some(StateSource::new(c.accountd.state_file.clone()));
                    write(&GOVERNOR, None);
                }
                write(&CURRENT, Some(c));
            }
            Some(Change::Kept(why)) => log::error(&format!(
                "{} changed but is not usable; keeping the last good configuration: {why}",
                config.path().display()
            )),
            None => {}
        }
    }
}

/// Read the governor's state when the file changed; a bad file keeps the previous state (which
/// then ages into staleness) and is logged once per change.
fn poll_state(source: &mut StateSource) {
    match source.poll() {
        Some(Change::Loaded(s)) => write(&GOVERNOR, Some(s)),
        Some(Change::Kept(why)) => log::error(&format!(
            "ignoring governance state {}: {why}",
            source.path().display()
        )),
        None => {}
    }
}
