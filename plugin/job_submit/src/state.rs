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
use teamshare_policy::governance::PublishedState;
use teamshare_policy::submit::Admitted;

use crate::log;

/// An immutable view the submit path works on.
pub struct Snapshot {
    pub config: Config,
}

static CURRENT: RwLock<Option<Arc<Snapshot>>> = RwLock::new(None);
/// The governor's last published state, as read by the watcher.
static GOVERNOR: RwLock<Option<Arc<PublishedState>>> = RwLock::new(None);
/// In-quota admissions since that state (job_submit calls are serialised by slurmctld, the
/// mutex only makes that explicit).
static ADMITTED: Mutex<Admitted> = Mutex::new(Admitted {
    generated_at: 0,
    by_team: std::collections::BTreeMap::new(),
    total: 0,
});
/// Whether the last submit saw stale state, so the change is logged once, not per job.
static STALE_LOGGED: AtomicBool = AtomicBool::new(false);
static STOP: AtomicBool = AtomicBool::new(false);
static RELOADER: Mutex<Option<JoinHandle<()>>> = Mutex::new(None);

/// How often the reloader looks at the configuration's modification time.
const WATCH_INTERVAL: Duration = Duration::from_secs(2);
/// How often it looks at the governor's state file (rewritten every governor pass).
const STATE_INTERVAL: Duration = Duration::from_millis(250);

/// The snapshot to judge a request with; `None` when no valid configuration was ever loaded.
pub fn current() -> Option<Arc<Snapshot>> {
    // A poisoned lock only means a writer panicked mid-swap; the Option inside is still whole.
    match CURRENT.read() {
        Ok(g) => g.clone(),
        Err(p) => p.into_inner().clone(),
    }
}

/// The governor's state, if any was read.
pub fn governor() -> Option<Arc<PublishedState>> {
    match GOVERNOR.read() {
        Ok(g) => g.clone(),
        Err(p) => p.into_inner().clone(),
    }
}

/// Run `f` with the admissions counted since `state` was generated.
pub fn with_admitted<T>(generated_at: i64, f: impl FnOnce(&mut Admitted) -> T) -> T {
    let mut g = match ADMITTED.lock() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    };
    g.reset_for(generated_at);
    f(&mut g)
}

/// Log the first submit that finds the state stale, and the first that finds it fresh again.
pub fn note_staleness(stale: bool, why: &str) {
    let was = STALE_LOGGED.swap(stale, Ordering::SeqCst);
    if stale && !was {
        log::error(&format!("governance state is stale: {why}; applying on_stale_state until accountd publishes again"));
    } else if !stale && was {
        log::info("governance state is current again");
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
            let state_file = config.accountd.state_file.clone();
            publish(Snapshot { config });
            read_state(&state_file, &mut None);
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
    let mut state_seen = None;
    let mut last_config_check = std::time::Instant::now();
    while !STOP.load(Ordering::SeqCst) {
        std::thread::park_timeout(STATE_INTERVAL);
        if STOP.load(Ordering::SeqCst) {
            break;
        }
        if let Some(snapshot) = current() {
            read_state(&snapshot.config.accountd.state_file, &mut state_seen);
        }
        if last_config_check.elapsed() < WATCH_INTERVAL {
            continue;
        }
        last_config_check = std::time::Instant::now();
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

/// Read the governor's state when the file changed; a bad file keeps the previous state (which
/// then ages into staleness) and is logged once per change.
fn read_state(path: &Path, seen: &mut Option<(SystemTime, u64)>) {
    let now = stamp(path);
    if now.is_none() || now == *seen {
        return;
    }
    *seen = now;
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) => {
            log::error(&format!(
                "cannot read governance state {}: {e}",
                path.display()
            ));
            return;
        }
    };
    match PublishedState::from_json(&text) {
        Ok(state) => {
            let mut g = match GOVERNOR.write() {
                Ok(g) => g,
                Err(p) => p.into_inner(),
            };
            *g = Some(Arc::new(state));
        }
        Err(e) => log::error(&format!(
            "ignoring governance state {}: {e}",
            path.display()
        )),
    }
}

/// slurmctld's log is line-oriented.
fn one_line(s: &str) -> String {
    s.lines().map(str::trim).collect::<Vec<_>>().join(" | ")
}
