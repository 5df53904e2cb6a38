//! What the plugin knows, held in memory so the submit path never touches a file.
//!
//! `init` loads teamshare.toml once; a background thread then watches it and swaps in each new
//! valid version. An invalid new file keeps the last good one, with one log line per change of
//! the file saying why (job_submit/lua does the same with its script).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime};

use teamshare_config::Config;

use crate::log;

/// An immutable view the submit path works on.
pub struct Snapshot {
    pub config: Config,
}

static CURRENT: RwLock<Option<Arc<Snapshot>>> = RwLock::new(None);
static STOP: AtomicBool = AtomicBool::new(false);
static RELOADER: Mutex<Option<JoinHandle<()>>> = Mutex::new(None);

/// How often the reloader looks at the file's modification time.
const WATCH_INTERVAL: Duration = Duration::from_secs(2);

/// The snapshot to judge a request with; `None` when no valid configuration was ever loaded.
pub fn current() -> Option<Arc<Snapshot>> {
    // A poisoned lock only means a writer panicked mid-swap; the Option inside is still whole.
    match CURRENT.read() {
        Ok(g) => g.clone(),
        Err(p) => p.into_inner().clone(),
    }
}

fn publish(snapshot: Snapshot) {
    let mut g = match CURRENT.write() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    };
    *g = Some(Arc::new(snapshot));
}

/// teamshare.toml beside slurm.conf, or `TEAMSHARE_CONFIG` when set (tests, odd layouts).
fn config_path() -> PathBuf {
    match std::env::var_os("TEAMSHARE_CONFIG") {
        Some(p) => PathBuf::from(p),
        None => teamshare_config::default_path(),
    }
}

/// File identity used to notice a change without reading the file.
fn stamp(path: &Path) -> Option<(SystemTime, u64)> {
    let m = std::fs::metadata(path).ok()?;
    Some((m.modified().ok()?, m.len()))
}

fn load(path: &Path) -> Result<Config, String> {
    teamshare_config::load(path).map_err(|e| e.to_string())
}

pub fn init() -> i32 {
    let path = config_path();
    match load(&path) {
        Ok(config) => {
            log::info(&format!(
                "loaded {} cluster={} teams={} version={}",
                path.display(),
                config.cluster.name,
                config.teams.len(),
                env!("CARGO_PKG_VERSION")
            ));
            publish(Snapshot { config });
        }
        Err(e) => {
            // Refusing to start would take slurmctld down with it; refuse GPU jobs instead,
            // loudly, until a valid file appears.
            log::error(&format!(
                "no valid configuration at {}; GPU jobs are refused until it is fixed: {}",
                path.display(),
                one_line(&e)
            ));
        }
    }
    start_reloader(path);
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

fn start_reloader(path: PathBuf) {
    STOP.store(false, Ordering::SeqCst);
    let spawned = std::thread::Builder::new()
        .name("teamshare-watch".into())
        .spawn(move || {
            // Never let a panic end the watcher silently.
            let r = std::panic::catch_unwind(|| watch(path));
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

fn watch(path: PathBuf) {
    let mut seen = stamp(&path);
    while !STOP.load(Ordering::SeqCst) {
        std::thread::park_timeout(WATCH_INTERVAL);
        if STOP.load(Ordering::SeqCst) {
            break;
        }
        let now = stamp(&path);
        if now == seen {
            continue;
        }
        seen = now;
        match load(&path) {
            Ok(config) => {
                log::info(&format!(
                    "reloaded {} teams={}",
                    path.display(),
                    config.teams.len()
                ));
                publish(Snapshot { config });
            }
            Err(e) => log::error(&format!(
                "{} changed but is invalid; keeping the last good configuration: {}",
                path.display(),
                one_line(&e)
            )),
        }
    }
}

/// slurmctld's log is line-oriented.
fn one_line(s: &str) -> String {
    s.lines().map(str::trim).collect::<Vec<_>>().join(" | ")
}
