//! What the plugin reads from disk, teamshare.toml and the governor's state.json, and when that
//! state counts as current.
//!
//! The plugin's watcher thread calls these (never the submit path, which only reads the
//! snapshots they produce). Whatever sits at those paths cannot harm slurmctld:
//! - only regular files are read (a FIFO would block the thread, `/dev/zero` would never end),
//!   checked before opening and again on the opened handle, which is opened non-blocking;
//! - at most [`CONFIG_LIMIT`] / [`STATE_LIMIT`] bytes (plus one, to tell "too large") are read,
//!   so a huge file costs slurmctld no memory;
//! - a file is read again only when its stamp (device, inode, size, modification time, kind)
//!   changes, so each problem is reported once per change of the file, not every poll.
//!
//! A state is current only when it was computed from the same teamshare.toml (digest) and is
//! neither older than `state_max_age` nor from the future (a clock step, or a hand-made file,
//! must not make it count as fresh forever).

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use teamshare_config::Config;

use crate::governance::PublishedState;

use teamshare_config::read::{io_error, kind_of};
pub use teamshare_config::read::{read_bounded, ReadError, CONFIG_LIMIT};
/// The most bytes of the governor's state read: a few hundred bytes per running borrowed job,
/// so tens of thousands of victims fit.
pub const STATE_LIMIT: u64 = 16 << 20;
/// A state stamped at most this far ahead of the plugin's clock is still believed (clocks of
/// the governor's host and slurmctld's may differ slightly).
pub const FUTURE_TOLERANCE_SECS: i64 = 5;

/// What identifies one version of a file without reading it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stamp {
    dev: u64,
    ino: u64,
    len: u64,
    mtime: i64,
    mtime_nsec: i64,
    kind: &'static str,
}

fn stamp(path: &Path) -> Result<Stamp, ReadError> {
    let m = std::fs::metadata(path).map_err(io_error)?;
    Ok(Stamp {
        dev: m.dev(),
        ino: m.ino(),
        len: m.len(),
        mtime: m.mtime(),
        mtime_nsec: m.mtime_nsec(),
        kind: kind_of(&m),
    })
}

/// One file, read again only when it changes.
#[derive(Debug)]
pub struct WatchedFile {
    path: PathBuf,
    limit: u64,
    seen: Option<Result<Stamp, ReadError>>,
}

impl WatchedFile {
    pub fn new(path: PathBuf, limit: u64) -> WatchedFile {
        WatchedFile {
            path,
            limit,
            seen: None,
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// `None` when the file is as it was at the last poll; otherwise its new text, or why it
    /// could not be read (a missing or unreadable file is a change too, reported once).
    pub fn poll(&mut self) -> Option<Result<String, ReadError>> {
        let now = stamp(&self.path);
        if self.seen.as_ref() == Some(&now) {
            return None;
        }
        self.seen = Some(now.clone());
        Some(now.and_then(|_| read_bounded(&self.path, self.limit)))
    }
}

/// Parse teamshare.toml's text as `teamshare_config::load` does for a path (relative paths in
/// `[accountd]` resolved against the file's directory), after a bounded read.
pub fn parse_config(path: &Path, text: &str) -> Result<Config, String> {
    teamshare_config::parse_file(text, path).map_err(|e| e.to_string())
}

/// What a poll of a watched input found.
#[derive(Debug)]
pub enum Change<T> {
    /// A new valid version, now the current one.
    Loaded(Arc<T>),
    /// The file changed but is not usable; the previous version is kept. The text is one log
    /// line's worth: why.
    Kept(String),
}

/// teamshare.toml: the last good configuration, and the file it came from.
#[derive(Debug)]
pub struct ConfigSource {
    file: WatchedFile,
    current: Option<Arc<Config>>,
}

impl ConfigSource {
    pub fn new(path: PathBuf) -> ConfigSource {
        ConfigSource {
            file: WatchedFile::new(path, CONFIG_LIMIT),
            current: None,
        }
    }

    pub fn path(&self) -> &Path {
        self.file.path()
    }

    pub fn current(&self) -> Option<Arc<Config>> {
        self.current.clone()
    }

    /// Put `config` back in force (a new file that was read but not taken).
    fn restore(&mut self, config: Option<Arc<Config>>) {
        self.current = config;
    }

    /// `None` when nothing changed since the last poll.
    pub fn poll(&mut self) -> Option<Change<Config>> {
        let text = self.file.poll()?;
        match text
            .map_err(|e| e.to_string())
            .and_then(|t| parse_config(self.file.path(), &t))
        {
            Ok(c) => {
                let c = Arc::new(c);
                self.current = Some(c.clone());
                Some(Change::Loaded(c))
            }
            Err(e) => Some(Change::Kept(one_line(&e))),
        }
    }
}

/// The governor's state.json: the last good state read.
#[derive(Debug)]
pub struct StateSource {
    file: WatchedFile,
    current: Option<Arc<PublishedState>>,
}

impl StateSource {
    pub fn new(path: PathBuf) -> StateSource {
        StateSource {
            file: WatchedFile::new(path, STATE_LIMIT),
            current: None,
        }
    }

    pub fn path(&self) -> &Path {
        self.file.path()
    }

    pub fn current(&self) -> Option<Arc<PublishedState>> {
        self.current.clone()
    }

    /// `None` when nothing changed since the last poll. A bad file keeps the previous state,
    /// which then ages into staleness.
    pub fn poll(&mut self) -> Option<Change<PublishedState>> {
        let text = self.file.poll()?;
        match text
            .map_err(|e| e.to_string())
            .and_then(|t| PublishedState::from_json(&t))
        {
            Ok(s) => {
                let s = Arc::new(s);
                self.current = Some(s.clone());
                Some(Change::Loaded(s))
            }
            Err(e) => Some(Change::Kept(one_line(&e))),
        }
    }
}

/// What the plugin's watcher thread does, as code that can be tested without slurmctld: when to
/// look at which file, what a new configuration means for the state the plugin follows, and
/// the log lines. The thread only sleeps, calls [`Reloader::tick`] and applies the events.
#[derive(Debug)]
pub struct Reloader {
    config: ConfigSource,
    state: Option<StateSource>,
    last_config_check: Option<Instant>,
    /// The plugin's version, for the first "loaded" line.
    version: &'static str,
    /// A valid new file that cannot govern the cluster as the governor's state shows Slurm (a
    /// partition Slurm does not have...): not in force; taken once a state says it can, or
    /// once the governor publishes under it.
    held_back: Option<Arc<Config>>,
}

/// What the plugin is to do after a [`Reloader`] step, in order.
#[derive(Debug, Clone)]
pub enum Event {
    /// Judge requests with this configuration from now on; the line is for slurmctld's log at
    /// info level.
    Config(Arc<Config>, String),
    /// Use this governor's state from now on (`None`: forget the one held, the configuration
    /// names another file).
    State(Option<Arc<PublishedState>>),
    /// A line for slurmctld's log at error level.
    Error(String),
}

impl Reloader {
    /// How often teamshare.toml's stamp is looked at.
    pub const CONFIG_INTERVAL: Duration = Duration::from_secs(2);
    /// How often the governor's state file is looked at (rewritten every governor pass); the
    /// watcher thread wakes this often.
    pub const STATE_INTERVAL: Duration = Duration::from_millis(250);

    pub fn new(config_path: PathBuf, version: &'static str) -> Reloader {
        Reloader {
            config: ConfigSource::new(config_path),
            state: None,
            last_config_check: None,
            version,
            held_back: None,
        }
    }

    /// The first load, when slurmctld loads the plugin. An invalid or missing file does not
    /// stop slurmctld: GPU jobs are refused until a valid one appears.
    pub fn start(&mut self, now: Instant) -> Vec<Event> {
        let mut events = Vec::new();
        self.last_config_check = Some(now);
        match self.config.poll() {
            Some(Change::Loaded(c)) => {
                let line = format!(
                    "loaded {} cluster={} teams={} digest={} version={}",
                    self.config.path().display(),
                    c.cluster.name,
                    c.teams.len(),
                    c.digest,
                    self.version
                );
                self.state = Some(StateSource::new(c.accountd.state_file.clone()));
                events.push(Event::Config(c, line));
            }
            Some(Change::Kept(why)) => events.push(Event::Error(format!(
                "no valid configuration at {}; GPU jobs are refused until it is fixed: {why}",
                self.config.path().display()
            ))),
            None => {}
        }
        self.poll_state(&mut events);
        events
    }

    /// One wake-up of the watcher at `now`: the state file every time, teamshare.toml when
    /// [`Reloader::CONFIG_INTERVAL`] has passed since it was last looked at. An invalid edit
    /// keeps the last good configuration, said once per change of the file.
    pub fn tick(&mut self, now: Instant) -> Vec<Event> {
        let mut events = Vec::new();
        self.poll_state(&mut events);
        let due = self
            .last_config_check
            .is_none_or(|t| now.saturating_duration_since(t) >= Self::CONFIG_INTERVAL);
        if !due {
            return events;
        }
        self.last_config_check = Some(now);
        let before = self.config.current();
        match self.config.poll() {
            Some(Change::Loaded(c)) => match self.slurm_refusal(&c) {
                Some(why) => {
                    self.config.restore(before.clone());
                    events.push(Event::Error(format!(
                        "{} changed but cannot govern this cluster as Slurm has it; keeping the last good configuration{} until it can: {why}",
                        self.config.path().display(),
                        before.map(|b| format!(" (digest {})", b.digest)).unwrap_or_default()
                    )));
                    self.held_back = Some(c);
                }
                None => self.take(c, "", &mut events),
            },
            Some(Change::Kept(why)) => {
                self.held_back = None;
                events.push(Event::Error(format!(
                    "{} changed but is not usable; keeping the last good configuration: {why}",
                    self.config.path().display()
                )));
            }
            None => {}
        }
        events
    }

    /// Put a new valid configuration in force.
    fn take(&mut self, c: Arc<Config>, why: &str, events: &mut Vec<Event>) {
        self.held_back = None;
        self.config.restore(Some(c.clone()));
        let line = format!(
            "reloaded {} teams={} digest={}{why}",
            self.config.path().display(),
            c.teams.len(),
            c.digest
        );
        // A new state file path starts a new watch, read at the next wake-up.
        if self.state.as_ref().map(|s| s.path()) != Some(c.accountd.state_file.as_path()) {
            self.state = Some(StateSource::new(c.accountd.state_file.clone()));
            events.push(Event::State(None));
        }
        events.push(Event::Config(c, line));
    }

    /// Why `c` cannot govern the cluster as the governor's last state shows Slurm's
    /// partitions ([`crate::offered`]); `None` when it can, or when no state says.
    fn slurm_refusal(&self, c: &Config) -> Option<String> {
        let state = self.state.as_ref()?.current()?;
        crate::offered::refusal(c, state.slurm_partitions.as_ref()?)
    }

    /// A held-back file, taken once a new state says Slurm now has what it names, or shows
    /// that the governor runs under it (it checked it against Slurm itself).
    fn retry_held_back(&mut self, state: &PublishedState, events: &mut Vec<Event>) {
        let Some(held) = self.held_back.clone() else {
            return;
        };
        if state.config_digest == held.digest {
            self.take(held, " (the governor governs under it)", events);
        } else if self.slurm_refusal(&held).is_none() {
            self.take(held, " (Slurm now has what it names)", events);
        }
    }

    /// The configuration requests are judged with (the last good one).
    pub fn config(&self) -> Option<Arc<Config>> {
        self.config.current()
    }

    /// Read the governor's state when its file changed; a bad file keeps the previous state
    /// (which then ages into staleness) and is said once per change.
    fn poll_state(&mut self, events: &mut Vec<Event>) {
        let Some(source) = self.state.as_mut() else {
            return;
        };
        match source.poll() {
            Some(Change::Loaded(s)) => {
                events.push(Event::State(Some(s.clone())));
                self.retry_held_back(&s, events);
            }
            Some(Change::Kept(why)) => events.push(Event::Error(format!(
                "ignoring governance state {}: {why}",
                source.path().display()
            ))),
            None => {}
        }
    }
}

/// slurmctld's log is line-oriented.
pub fn one_line(s: &str) -> String {
    s.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join(" | ")
}

/// Whether the governor's state may be acted on now, and if not, why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Staleness {
    Current,
    /// Nothing published (or nothing readable) yet.
    Missing,
    /// Published longer ago than `state_max_age`.
    Old {
        age_secs: i64,
    },
    /// Stamped further ahead of this clock than [`FUTURE_TOLERANCE_SECS`].
    Future {
        ahead_secs: i64,
    },
    /// Computed from another teamshare.toml than the one loaded here.
    OtherConfig {
        state_digest: String,
        config_digest: String,
    },
}

impl Staleness {
    pub fn is_current(&self) -> bool {
        *self == Staleness::Current
    }

    /// Why the state is not current, for the log.
    pub fn describe(&self) -> String {
        match self {
            Staleness::Current => "current".to_string(),
            Staleness::Missing => "nothing published yet".to_string(),
            Staleness::Old { age_secs } => format!("last published {age_secs} s ago"),
            Staleness::Future { ahead_secs } => format!(
                "stamped {ahead_secs} s in the future (clock step, or not written by the governor)"
            ),
            Staleness::OtherConfig {
                state_digest,
                config_digest,
            } => format!(
                "state was computed from another teamshare.toml (digest {state_digest}, plugin has {config_digest})"
            ),
        }
    }

    /// The condition, without the values that change every second.
    fn condition(&self) -> Option<String> {
        match self {
            Staleness::Current => None,
            Staleness::Missing => Some("missing".into()),
            Staleness::Old { .. } => Some("old".into()),
            Staleness::Future { .. } => Some("future".into()),
            Staleness::OtherConfig {
                state_digest,
                config_digest,
            } => Some(format!("digest {state_digest} {config_digest}")),
        }
    }
}

/// Judge the state the plugin holds against its configuration at `now` (unix seconds).
pub fn judge_state(state: Option<&PublishedState>, config: &Config, now: i64) -> Staleness {
    let Some(state) = state else {
        return Staleness::Missing;
    };
    if state.config_digest != config.digest {
        return Staleness::OtherConfig {
            state_digest: state.config_digest.clone(),
            config_digest: config.digest.clone(),
        };
    }
    let ahead = state.generated_at.saturating_sub(now);
    if ahead > FUTURE_TOLERANCE_SECS {
        return Staleness::Future { ahead_secs: ahead };
    }
    let max_age = i64::try_from(config.governance.state_max_age.as_secs()).unwrap_or(i64::MAX);
    let age = now.saturating_sub(state.generated_at);
    if age > max_age {
        return Staleness::Old { age_secs: age };
    }
    Staleness::Current
}

/// Turns a stream of judgements into log lines: one when the condition changes, none while it
/// holds (submissions and polls come many times a second).
#[derive(Debug, Default)]
pub struct StalenessLog {
    /// `None`: current (or nothing judged yet).
    last: Option<String>,
}

/// A line for slurmctld's log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LogLine {
    Info(String),
    Error(String),
}

impl StalenessLog {
    /// Nothing logged yet (usable in a `static`).
    pub const fn new() -> StalenessLog {
        StalenessLog { last: None }
    }

    pub fn note(&mut self, s: &Staleness) -> Option<LogLine> {
        let condition = s.condition();
        if condition == self.last {
            return None;
        }
        let was_stale = self.last.is_some();
        self.last = condition;
        match s {
            Staleness::Current => {
                was_stale.then(|| LogLine::Info("governance state is current again".into()))
            }
            stale => Some(LogLine::Error(format!(
                "governance state is stale: {}; applying on_stale_state until accountd publishes again",
                stale.describe()
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;
    use std::fs::File;
    use std::io::Write;
    use std::time::Duration;

    const CONFIG: &str = "[cluster]\nname = \"t\"\npartitions = [\"gpu\"]\n\n[[team]]\nname = \"agents\"\nquota = 2\n\n[governance]\nstate_max_age = \"30s\"\n";

    fn config() -> Config {
        teamshare_config::parse(CONFIG, "t.toml").unwrap()
    }

    fn state(generated_at: i64, digest: &str) -> PublishedState {
        PublishedState {
            bands: Default::default(),
            version: crate::governance::STATE_VERSION,
            generated_at,
            config_digest: digest.to_string(),
            capacity: 8,
            capacity_by_type: BTreeMap::new(),
            free_gpus: 8,
            pending_in_quota_gpus: 0,
            reclaim_gpus: 0,
            spare_gpus: None,
            teams: BTreeMap::new(),
            victims: vec![],
            acted_at: 0,
            read_at_ms: 0,
            pools: BTreeMap::new(),
            slurm_partitions: None,
            node_gpus: 0,
            node_gpus_by_type: BTreeMap::new(),
            unsettled_gpus: 0,
            unsettled_gpus_by_type: BTreeMap::new(),
        }
    }

    /// Run `f` on another thread; fail if it blocks.
    fn within_a_second<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(f());
        });
        rx.recv_timeout(Duration::from_secs(1))
            .expect("reading blocked")
    }

    #[test]
    fn a_fifo_is_refused_without_blocking() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("state.json");
        let status = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap();
        assert!(status.success());
        let r = within_a_second(move || read_bounded(&fifo, STATE_LIMIT));
        assert_eq!(r, Err(ReadError::NotRegular { kind: "a FIFO" }));
    }

    #[test]
    fn a_symlink_to_dev_zero_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let link = dir.path().join("state.json");
        std::os::unix::fs::symlink("/dev/zero", &link).unwrap();
        let r = within_a_second(move || read_bounded(&link, STATE_LIMIT));
        assert_eq!(
            r,
            Err(ReadError::NotRegular {
                kind: "a character device"
            })
        );
        // A symlink to a regular file is read (configuration management does this).
        let real = dir.path().join("real.toml");
        std::fs::write(&real, CONFIG).unwrap();
        let link = dir.path().join("teamshare.toml");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        assert_eq!(read_bounded(&link, CONFIG_LIMIT).as_deref(), Ok(CONFIG));
    }

    #[test]
    fn oversize_files_are_refused_and_each_problem_reported_once() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.json");
        let mut f = File::create(&path).unwrap();
        f.write_all(&vec![b' '; 1025]).unwrap();
        assert_eq!(
            read_bounded(&path, 1024),
            Err(ReadError::TooLarge { limit: 1024 })
        );
        // A sparse file claiming 400 MB costs nothing either.
        f.set_len(400 << 20).unwrap();
        let mut source = StateSource::new(path.clone());
        match source.poll() {
            Some(Change::Kept(why)) => assert!(why.contains("larger than 16777216 bytes"), "{why}"),
            other => panic!("{other:?}"),
        }
        // Unchanged: nothing to report on the next polls.
        assert!(source.poll().is_none());
        assert!(source.poll().is_none());
        // Missing is reported once as well.
        std::fs::remove_file(&path).unwrap();
        assert!(matches!(source.poll(), Some(Change::Kept(_))));
        assert!(source.poll().is_none());
    }

    #[test]
    fn an_invalid_edit_keeps_the_last_good_configuration() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("teamshare.toml");
        std::fs::write(&path, CONFIG).unwrap();
        let mut source = ConfigSource::new(path.clone());
        let Some(Change::Loaded(first)) = source.poll() else {
            panic!("not loaded")
        };
        assert_eq!(first.teams.len(), 1);
        // Relative paths resolve beside the file.
        assert!(first.accountd.state_file.is_absolute());
        std::fs::write(&path, format!("{CONFIG}\n[[team]]\nnmae = \"x\"\n")).unwrap();
        match source.poll() {
            Some(Change::Kept(why)) => {
                assert!(
                    why.contains("teamshare.toml") && !why.contains('\n'),
                    "{why}"
                )
            }
            other => panic!("{other:?}"),
        }
        assert!(source.poll().is_none());
        assert_eq!(source.current().unwrap().digest, first.digest);
        // Oversize: kept too.
        std::fs::write(&path, vec![b'#'; CONFIG_LIMIT as usize + 1]).unwrap();
        assert!(matches!(source.poll(), Some(Change::Kept(_))));
        assert_eq!(source.current().unwrap().digest, first.digest);
    }

    fn lines(events: &[Event]) -> Vec<String> {
        events
            .iter()
            .map(|e| match e {
                Event::Config(c, line) => format!("config {} {line}", c.teams.len()),
                Event::State(Some(s)) => format!("state {}", s.generated_at),
                Event::State(None) => "state none".to_string(),
                Event::Error(line) => format!("error {line}"),
            })
            .collect()
    }

    /// Issue 25, finding 4: a reloaded file naming a partition Slurm does not have (as the
    /// governor's state shows Slurm) is held back, the last good one stays in force, said once;
    /// it is taken once a state shows the partition, or shows the governor governing under it.
    #[test]
    fn issue25_4_a_partition_typo_is_held_back_until_slurm_has_it() {
        use crate::offered::PartitionGpus;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("teamshare.toml");
        let good = format!("{CONFIG}\n[accountd]\nstate_file = \"state.json\"\n");
        std::fs::write(&path, &good).unwrap();
        let c = config();
        let slurm = |names: &[&str]| {
            let mut s = state(100, &c.digest);
            s.slurm_partitions = Some(
                names
                    .iter()
                    .map(|n| {
                        (
                            (*n).to_string(),
                            PartitionGpus {
                                gpus: 8,
                                by_type: BTreeMap::new(),
                            },
                        )
                    })
                    .collect(),
            );
            s
        };
        std::fs::write(dir.path().join("state.json"), slurm(&["gpu"]).to_json()).unwrap();
        let mut r = Reloader::new(path.clone(), "9.9.9");
        let t0 = Instant::now();
        r.start(t0);
        let first = r.config().unwrap().digest.clone();

        std::fs::write(&path, good.replace("[\"gpu\"]", "[\"nosuch\"]")).unwrap();
        let got = lines(&r.tick(t0 + Reloader::CONFIG_INTERVAL));
        assert_eq!(got.len(), 1, "{got:?}");
        assert!(
            got[0].starts_with("error ")
                && got[0].contains("cannot govern this cluster as Slurm has it")
                && got[0].contains(&format!("digest {first}"))
                && got[0].contains("\"nosuch\" that Slurm does not have (its partitions: gpu)"),
            "{got:?}"
        );
        assert_eq!(r.config().unwrap().digest, first);
        assert!(r.tick(t0 + 2 * Reloader::CONFIG_INTERVAL).is_empty());

        // Slurm gains the partition: the next state lets the held-back file in.
        let mut later = slurm(&["gpu", "nosuch"]);
        later.generated_at = 200;
        std::fs::write(dir.path().join("state.json"), later.to_json()).unwrap();
        let got = lines(&r.tick(t0 + 2 * Reloader::CONFIG_INTERVAL + Duration::from_millis(250)));
        assert_eq!(got.len(), 2, "{got:?}");
        assert!(
            got[1].starts_with("config 1 reloaded ")
                && got[1].ends_with("(Slurm now has what it names)"),
            "{got:?}"
        );
        assert_ne!(r.config().unwrap().digest, first);

        // Back to a typo, then the governor publishes under it (it checked Slurm itself).
        let second = r.config().unwrap().digest.clone();
        std::fs::write(&path, good.replace("[\"gpu\"]", "[\"other\"]")).unwrap();
        let got = lines(&r.tick(t0 + 4 * Reloader::CONFIG_INTERVAL));
        assert!(got.len() == 1 && got[0].starts_with("error "), "{got:?}");
        assert_eq!(r.config().unwrap().digest, second);
        let held = teamshare_config::load(&path).unwrap().digest;
        let mut under = slurm(&["gpu"]);
        under.generated_at = 300;
        under.config_digest = held.clone();
        std::fs::write(dir.path().join("state.json"), under.to_json()).unwrap();
        let got = lines(&r.tick(t0 + 4 * Reloader::CONFIG_INTERVAL + Duration::from_millis(250)));
        assert!(
            got.last()
                .unwrap()
                .ends_with("(the governor governs under it)"),
            "{got:?}"
        );
        assert_eq!(r.config().unwrap().digest, held);

        // Without a list from Slurm (an older governor), a file is taken as before.
        let mut plain = state(400, &held);
        plain.slurm_partitions = None;
        std::fs::write(dir.path().join("state.json"), plain.to_json()).unwrap();
        r.tick(t0 + 5 * Reloader::CONFIG_INTERVAL);
        std::fs::write(&path, good.replace("[\"gpu\"]", "[\"third\"]")).unwrap();
        let got = lines(&r.tick(t0 + 6 * Reloader::CONFIG_INTERVAL));
        assert!(
            got.iter().any(|l| l.starts_with("config 1 reloaded ")),
            "{got:?}"
        );
    }

    /// The plugin's watcher, step by step: the first load, the intervals, an invalid edit that
    /// keeps the last good configuration (said once), a valid edit, a state file that moves.
    #[test]
    fn the_reloader_keeps_the_last_good_configuration_and_follows_the_state() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("teamshare.toml");
        std::fs::write(
            &path,
            format!("{CONFIG}\n[accountd]\nstate_file = \"state.json\"\n"),
        )
        .unwrap();
        let c = config();
        std::fs::write(
            dir.path().join("state.json"),
            state(100, &c.digest).to_json(),
        )
        .unwrap();
        let mut r = Reloader::new(path.clone(), "9.9.9");
        let t0 = Instant::now();
        let got = lines(&r.start(t0));
        assert_eq!(got.len(), 2, "{got:?}");
        assert!(
            got[0].starts_with("config 1 loaded ")
                && got[0].contains(" cluster=t teams=1 digest=")
                && got[0].ends_with(" version=9.9.9"),
            "{got:?}"
        );
        assert_eq!(got[1], "state 100");
        let first = r.config().unwrap().digest.clone();

        // An invalid edit: not looked at before the interval, then kept, said once.
        std::fs::write(&path, format!("{CONFIG}\n[[team]]\nnmae = \"x\"\n")).unwrap();
        assert!(r.tick(t0 + Duration::from_millis(250)).is_empty());
        let got = lines(&r.tick(t0 + Reloader::CONFIG_INTERVAL));
        assert_eq!(got.len(), 1, "{got:?}");
        assert!(
            got[0].starts_with("error ")
                && got[0]
                    .contains("changed but is not usable; keeping the last good configuration"),
            "{got:?}"
        );
        assert!(r.tick(t0 + 2 * Reloader::CONFIG_INTERVAL).is_empty());
        assert_eq!(r.config().unwrap().digest, first);

        // A new state is picked up at every wake-up, whatever the configuration does.
        std::fs::write(
            dir.path().join("state.json"),
            state(200, &c.digest).to_json(),
        )
        .unwrap();
        let got = lines(&r.tick(t0 + 2 * Reloader::CONFIG_INTERVAL + Duration::from_millis(250)));
        assert_eq!(got, ["state 200"]);

        // A valid edit naming another state file: the old state is forgotten, the new file
        // read at the next wake-up.
        std::fs::write(
            &path,
            "[cluster]\nname = \"t\"\npartitions = [\"gpu\"]\n\n[[team]]\nname = \"agents\"\nquota = 2\n\n\
             [[team]]\nname = \"research\"\nquota = 1\n\n[governance]\nstate_max_age = \"30s\"\n\n\
             [accountd]\nstate_file = \"other.json\"\n",
        )
        .unwrap();
        let t1 = t0 + 4 * Reloader::CONFIG_INTERVAL;
        let got = lines(&r.tick(t1));
        assert_eq!(got.len(), 2, "{got:?}");
        assert_eq!(got[0], "state none");
        assert!(
            got[1].starts_with("config 2 reloaded ") && got[1].contains("teams=2"),
            "{got:?}"
        );
        assert_ne!(r.config().unwrap().digest, first);
        std::fs::write(dir.path().join("other.json"), state(300, "x").to_json()).unwrap();
        assert_eq!(
            lines(&r.tick(t1 + Duration::from_millis(250))),
            ["state 300"]
        );
    }

    #[test]
    fn the_reloader_starts_without_a_valid_configuration_and_takes_one_later() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("teamshare.toml");
        let mut r = Reloader::new(path.clone(), "1");
        let t0 = Instant::now();
        let got = lines(&r.start(t0));
        assert_eq!(got.len(), 1, "{got:?}");
        assert!(
            got[0].contains("no valid configuration at") && got[0].contains("GPU jobs are refused"),
            "{got:?}"
        );
        assert!(r.config().is_none());
        std::fs::write(&path, CONFIG).unwrap();
        // The first valid file also starts the watch of its state file.
        let got = lines(&r.tick(t0 + Reloader::CONFIG_INTERVAL));
        assert_eq!(got.len(), 2, "{got:?}");
        assert_eq!(got[0], "state none");
        assert!(got[1].starts_with("config 1 reloaded "), "{got:?}");
        assert!(r.config().is_some());
    }

    #[test]
    fn a_state_from_the_future_is_stale() {
        let c = config();
        let d = c.digest.clone();
        assert_eq!(
            judge_state(Some(&state(1_000, &d)), &c, 1_000),
            Staleness::Current
        );
        assert_eq!(
            judge_state(Some(&state(1_000 + FUTURE_TOLERANCE_SECS, &d)), &c, 1_000),
            Staleness::Current
        );
        assert_eq!(
            judge_state(Some(&state(1_000_000, &d)), &c, 1_000),
            Staleness::Future {
                ahead_secs: 999_000
            }
        );
        assert_eq!(
            judge_state(Some(&state(1_000, &d)), &c, 1_031),
            Staleness::Old { age_secs: 31 }
        );
        assert_eq!(
            judge_state(Some(&state(1_000, &d)), &c, 1_030),
            Staleness::Current
        );
        assert_eq!(judge_state(None, &c, 1_000), Staleness::Missing);
    }

    #[test]
    fn a_state_from_another_configuration_is_stale_and_logged_once() {
        let c = config();
        let s = state(1_000, "0123456789abcdef");
        let judged = judge_state(Some(&s), &c, 1_000);
        assert_eq!(
            judged,
            Staleness::OtherConfig {
                state_digest: "0123456789abcdef".into(),
                config_digest: c.digest.clone()
            }
        );
        let mut log = StalenessLog::default();
        let Some(LogLine::Error(line)) = log.note(&judged) else {
            panic!("not logged")
        };
        assert_eq!(
            line,
            format!("governance state is stale: state was computed from another teamshare.toml (digest 0123456789abcdef, plugin has {}); applying on_stale_state until accountd publishes again", c.digest)
        );
        assert_eq!(log.note(&judged), None);
        // Ageing does not log again; a new condition does, and so does recovery.
        assert!(log.note(&Staleness::Old { age_secs: 40 }).is_some());
        assert_eq!(log.note(&Staleness::Old { age_secs: 41 }), None);
        assert_eq!(
            log.note(&Staleness::Current),
            Some(LogLine::Info("governance state is current again".into()))
        );
        assert_eq!(log.note(&Staleness::Current), None);
    }
}
