//! `accountd run`: the daemon (DESIGN 6). One process, one loop, until a stop is asked for:
//!
//! - a governor pass every `govern_interval` (one [`Governor`] for the life of the process);
//! - every `ingest_interval`: sacct into the database, the nodes' GPU samples collected from the
//!   spool, the governed capacity measured and recorded (`capacity_samples`);
//! - `/metrics` served from a thread of its own ([`crate::metrics`]).
//!
//! Each step fails alone: its error is logged (once per distinct message, with a timestamp) and
//! the other steps go on; the step is tried again at its next turn. A stop (SIGTERM, SIGINT) is
//! seen between steps: the step under way finishes, and the loop ends.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use teamshare_config::Config;
use teamshare_policy::governance::PublishedState;

use crate::capacity;
use crate::governor::Governor;
use crate::ingest;
use crate::metrics::{Body, Exporter, LiveTeam, MetricsServer};
use crate::period;
use crate::report::format_duration;
use crate::sample::collect;
use crate::slurm_cli::slurm_name;
use crate::store::{CapacitySample, Store};

/// The steps, as they are named in the log.
pub const STEP_GOVERN: &str = "govern";
pub const STEP_INGEST: &str = "ingest";
pub const STEP_COLLECT: &str = "collect-samples";
pub const STEP_CAPACITY: &str = "capacity";
pub const STEP_METRICS: &str = "metrics";

/// The team of a displaced job that has not been ingested yet.
const UNKNOWN_TEAM: &str = "(unknown)";
/// How long the loop sleeps at most before it looks at the stop flag again.
const STOP_POLL: Duration = Duration::from_millis(100);
/// Distinct warnings remembered (so that each is said once); beyond, the oldest are forgotten.
const WARNINGS_REMEMBERED: usize = 10_000;

#[derive(Debug, Clone, PartialEq)]
pub struct DaemonOptions {
    pub database: PathBuf,
    pub spool: PathBuf,
    pub govern_interval: Duration,
    pub ingest_interval: Duration,
    pub govern: bool,
    pub ingest: bool,
    /// One of each step, then return.
    pub once: bool,
    pub metrics_listen: SocketAddr,
}

/// The daemon's log: stderr lines with a UTC timestamp. A step's error is said when it differs
/// from that step's previous one, and its recovery once; a warning once per distinct text.
pub struct DaemonLog {
    sink: Box<dyn Fn(&str) + Send + Sync>,
    state: Mutex<LogState>,
}

#[derive(Default)]
struct LogState {
    failing: BTreeMap<&'static str, String>,
    warned: BTreeSet<String>,
    warned_order: std::collections::VecDeque<String>,
}

impl DaemonLog {
    pub fn new(sink: Box<dyn Fn(&str) + Send + Sync>) -> DaemonLog {
        DaemonLog {
            sink,
            state: Mutex::new(LogState::default()),
        }
    }

    /// Lines to stderr.
    pub fn stderr() -> DaemonLog {
        DaemonLog::new(Box::new(|line| eprintln!("{line}")))
    }

    fn say(&self, text: &str) {
        let ts = period::format_rfc3339(period::now());
        for line in text.lines() {
            (self.sink)(&format!("{ts} accountd run: {line}"));
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, LogState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn info(&self, text: &str) {
        self.say(text);
    }

    /// A step failed with `error`.
    pub fn failed(&self, step: &'static str, error: &str) {
        let new = self.state().failing.insert(step, error.to_string()) != Some(error.to_string());
        if new {
            self.say(&format!("{step} failed: {error}"));
        }
    }

    /// A step succeeded.
    pub fn succeeded(&self, step: &'static str) {
        if self.state().failing.remove(step).is_some() {
            self.say(&format!("{step} succeeds again"));
        }
    }

    /// Said once per distinct text.
    pub fn warn_once(&self, text: &str) {
        {
            let mut s = self.state();
            if !s.warned.insert(text.to_string()) {
                return;
            }
            s.warned_order.push_back(text.to_string());
            if s.warned_order.len() > WARNINGS_REMEMBERED {
                if let Some(old) = s.warned_order.pop_front() {
                    s.warned.remove(&old);
                }
            }
        }
        self.say(&format!("warning: {text}"));
    }
}

/// How a run ended.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Outcome {
    /// Step runs that failed (with `once`: whether the one run of each step failed).
    pub failed_steps: usize,
    /// The address metrics were served on, if the listener could be bound.
    pub metrics_addr: Option<SocketAddr>,
}

struct Daemon {
    config: Config,
    opts: DaemonOptions,
    cluster: String,
    governor: Option<Governor>,
    store: Option<Store>,
    exporter: Arc<Exporter>,
    log: Arc<DaemonLog>,
    /// Jobs the governor displaced or reclaimed whose team is not known yet (not ingested).
    unresolved: Vec<(u64, Requeue)>,
    failed_steps: usize,
}

/// Why the governor requeued a job (its reason in `teamshare_preemptions_total`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Requeue {
    /// For a higher class of its team.
    Displaced,
    /// To reclaim quota Slurm had not preempted for.
    Reclaimed,
}

fn count_requeued(live: &mut crate::metrics::Live, requeued: BTreeMap<(String, Requeue), u64>) {
    for ((team, why), n) in requeued {
        let counts = match why {
            Requeue::Displaced => &mut live.displaced,
            Requeue::Reclaimed => &mut live.reclaimed,
        };
        *counts.entry(team).or_default() += n;
    }
}

/// Run the daemon until `stop` is set (or once, with `opts.once`).
pub fn run(
    config: Config,
    opts: DaemonOptions,
    stop: Arc<AtomicBool>,
    log: Arc<DaemonLog>,
) -> Outcome {
    let exporter = Arc::new(Exporter::new(config.clone(), opts.database.clone()));
    let governor = opts
        .govern
        .then(|| Governor::new(config.clone(), Some(opts.database.clone())));
    let mut d = Daemon {
        cluster: slurm_name(&config.cluster.name),
        config,
        opts,
        governor,
        store: None,
        exporter,
        log,
        unresolved: Vec::new(),
        failed_steps: 0,
    };
    let mut server = d.start_metrics();
    let metrics_addr = server.as_ref().map(MetricsServer::local_addr);
    d.log.info(&format!(
        "started: {}, ingest and sample collection every {}, metrics on {}, database {}",
        if d.governor.is_some() {
            format!(
                "governing every {}",
                format_duration(d.opts.govern_interval)
            )
        } else {
            "not governing".to_string()
        },
        format_duration(d.opts.ingest_interval),
        match metrics_addr {
            Some(a) => format!("http://{a}/metrics"),
            None => "(not bound yet)".to_string(),
        },
        d.opts.database.display()
    ));

    let mut next_govern = Instant::now();
    let mut next_ingest = Instant::now();
    while !stop.load(Ordering::Relaxed) {
        if d.governor.is_some() && Instant::now() >= next_govern {
            let started = Instant::now();
            d.govern();
            next_govern = started + d.opts.govern_interval;
        }
        if !stop.load(Ordering::Relaxed) && Instant::now() >= next_ingest {
            let started = Instant::now();
            d.ingest_round(&stop);
            next_ingest = started + d.opts.ingest_interval;
            if server.is_none() && !d.opts.once {
                server = d.start_metrics();
                if let Some(s) = &server {
                    d.log
                        .info(&format!("metrics on http://{}/metrics", s.local_addr()));
                }
            }
        }
        if d.opts.once {
            // One scrape: the database's figures are computed once, their errors logged.
            let (_, error) = d.exporter.scrape();
            d.step_result(STEP_METRICS, error.map_or(Ok(()), Err));
            break;
        }
        let next = if d.governor.is_some() {
            next_govern.min(next_ingest)
        } else {
            next_ingest
        };
        while !stop.load(Ordering::Relaxed) {
            let now = Instant::now();
            if now >= next {
                break;
            }
            std::thread::sleep((next - now).min(STOP_POLL));
        }
    }
    if let Some(s) = server {
        s.stop();
    }
    if stop.load(Ordering::Relaxed) {
        d.log
            .info("stopping: signal received, the step under way finished");
    }
    Outcome {
        failed_steps: d.failed_steps,
        metrics_addr,
    }
}

impl Daemon {
    fn start_metrics(&mut self) -> Option<MetricsServer> {
        let exporter = Arc::clone(&self.exporter);
        let log = Arc::clone(&self.log);
        let body: Body = Arc::new(move || {
            let (text, error) = exporter.scrape();
            match error {
                Some(e) => log.failed(STEP_METRICS, &format!("database figures: {e}")),
                None => log.succeeded(STEP_METRICS),
            }
            text
        });
        match MetricsServer::start(self.opts.metrics_listen, body) {
            Ok(s) => Some(s),
            Err(e) => {
                self.step_result(
                    STEP_METRICS,
                    Err(format!(
                        "cannot listen on {}: {e} (tried again every ingest interval)",
                        self.opts.metrics_listen
                    )),
                );
                None
            }
        }
    }

    fn step_result(&mut self, step: &'static str, result: Result<(), String>) {
        match result {
            Ok(()) => self.log.succeeded(step),
            Err(e) => {
                self.failed_steps += 1;
                self.log.failed(step, &e);
            }
        }
    }

    /// Run `f` on the database, opened on first use and again after an error.
    fn with_store<T>(
        &mut self,
        f: impl FnOnce(&mut Store) -> Result<T, String>,
    ) -> Result<T, String> {
        let mut store = match self.store.take() {
            Some(s) => s,
            None => Store::open(&self.opts.database).map_err(|e| e.to_string())?,
        };
        let result = f(&mut store);
        // After an error the connection is opened again next time (a replaced file, a lock).
        if result.is_ok() {
            self.store = Some(store);
        }
        result
    }

    fn govern(&mut self) {
        let Some(governor) = self.governor.as_mut() else {
            return;
        };
        let result = governor.pass();
        let state_file = governor.state_file().to_path_buf();
        let report = match result {
            Ok(r) => r,
            Err(e) => return self.step_result(STEP_GOVERN, Err(e.to_string())),
        };
        for (team, limit) in &report.limit_updates {
            self.log.info(&format!("team {team} GPU limit -> {limit}"));
        }
        let mut requeued: BTreeMap<(String, Requeue), u64> = BTreeMap::new();
        for id in &report.reclaimed {
            self.log.info(&format!(
                "job {id} requeued by the governor: an in-quota job waited {} s without Slurm preempting for it",
                teamshare_policy::governance::RECLAIM_FALLBACK_SECS
            ));
            match self.team_of_job(*id) {
                Some(team) => *requeued.entry((team, Requeue::Reclaimed)).or_default() += 1,
                None => self.unresolved.push((*id, Requeue::Reclaimed)),
            }
        }
        for id in &report.displaced {
            self.log
                .info(&format!("job {id} displaced by a higher class of its team"));
            match self.team_of_job(*id) {
                Some(team) => *requeued.entry((team, Requeue::Displaced)).or_default() += 1,
                None => self.unresolved.push((*id, Requeue::Displaced)),
            }
        }
        // The plan's limits and the GPUs in use, as published for the plugin.
        let state = std::fs::read_to_string(&state_file)
            .map_err(|e| e.to_string())
            .and_then(|text| PublishedState::from_json(&text));
        let now = period::now();
        let capacity_changed = self.exporter.live().capacity != Some(report.capacity);
        self.exporter.update_live(|live| {
            live.governor_last_pass = Some(now);
            // With the pass's own figures, so that a scrape never sees them without it (the
            // capacity step below measures it again for the database).
            live.capacity = Some(report.capacity);
            count_requeued(live, requeued);
            if let Ok(state) = &state {
                live.teams = state
                    .teams
                    .iter()
                    .map(|(team, t)| {
                        (
                            team.clone(),
                            LiveTeam {
                                gpu_limit: t.gpu_limit,
                                running_gpus: t.running_gpus,
                            },
                        )
                    })
                    .collect();
            }
        });
        self.step_result(
            STEP_GOVERN,
            state.map(|_| ()).map_err(|e| {
                format!(
                    "the pass succeeded but its state {} cannot be read back: {e}",
                    state_file.display()
                )
            }),
        );
        // A capacity change is recorded within one pass, not one ingest interval.
        if capacity_changed {
            self.capacity();
        }
    }

    fn team_of_job(&mut self, id: u64) -> Option<String> {
        let cluster = self.cluster.clone();
        self.with_store(|s| s.account_of_job(&cluster, id).map_err(|e| e.to_string()))
            .ok()
            .flatten()
    }

    /// Ingest, sample collection and capacity, in that order.
    fn ingest_round(&mut self, stop: &AtomicBool) {
        if self.opts.ingest {
            self.ingest();
        }
        if !stop.load(Ordering::Relaxed) {
            self.collect();
        }
        if !stop.load(Ordering::Relaxed) {
            self.capacity();
        }
    }

    fn ingest(&mut self) {
        let now = period::now();
        let cluster = self.cluster.clone();
        let result = self.with_store(|store| {
            let plan = ingest::plan(store, &cluster, None, None, now).map_err(|e| e.to_string())?;
            ingest::ingest(store, &plan, now).map_err(|e| e.to_string())
        });
        match result {
            Ok(summary) => {
                for line in &summary.malformed {
                    self.log.warn_once(&format!("ingest skipped {line}"));
                }
                self.exporter
                    .update_live(|live| live.ingest_last_success = Some(period::now()));
                self.resolve_displaced();
                self.step_result(STEP_INGEST, Ok(()));
            }
            Err(e) => self.step_result(STEP_INGEST, Err(e)),
        }
    }

    /// Displaced and reclaimed jobs ingested since: counted under their team now.
    fn resolve_displaced(&mut self) {
        let pending = std::mem::take(&mut self.unresolved);
        let mut resolved: BTreeMap<(String, Requeue), u64> = BTreeMap::new();
        for (id, why) in pending {
            // Never ingested (e.g. another cluster's job): counted apart after one ingest.
            let team = self
                .team_of_job(id)
                .unwrap_or_else(|| UNKNOWN_TEAM.to_string());
            *resolved.entry((team, why)).or_default() += 1;
        }
        if !resolved.is_empty() {
            self.exporter
                .update_live(|live| count_requeued(live, resolved));
        }
    }

    fn collect(&mut self) {
        let root = self.opts.spool.clone();
        if !root.exists() {
            self.log.warn_once(&format!(
                "no sample spool at {}: no GPU samples to collect (run `accountd sample` on the GPU nodes, writing there)",
                root.display()
            ));
            return;
        }
        let cluster = self.cluster.clone();
        let threshold = self.config.accountd.idle_threshold_percent;
        let result = self.with_store(|store| {
            collect::collect(store, &root, &cluster, threshold, period::now())
                .map_err(|e| e.to_string())
        });
        match result {
            Ok(summary) => {
                for line in &summary.malformed {
                    self.log.warn_once(&format!(
                        "skipped malformed sample {line} (the file is kept in rejected/)"
                    ));
                }
                for line in summary.unreadable.iter().chain(&summary.unsettled) {
                    self.log
                        .warn_once(&format!("{line} (left in the spool; read again next time)"));
                }
                self.step_result(STEP_COLLECT, Ok(()));
            }
            Err(e) => self.step_result(STEP_COLLECT, Err(e)),
        }
    }

    fn capacity(&mut self) {
        let measured = match capacity::measure(&self.config.cluster.partitions) {
            Ok(c) => c,
            Err(e) => return self.step_result(STEP_CAPACITY, Err(e.to_string())),
        };
        let sample = CapacitySample {
            ts: period::now(),
            gpus: measured.total,
            by_type: measured.by_type.clone(),
        };
        self.exporter
            .update_live(|live| live.capacity = Some(measured.total));
        let cluster = self.cluster.clone();
        let result = self.with_store(|store| {
            store
                .record_capacity(&cluster, &sample)
                .map(|_| ())
                .map_err(|e| e.to_string())
        });
        self.step_result(STEP_CAPACITY, result);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn captured() -> (Arc<DaemonLog>, Arc<Mutex<Vec<String>>>) {
        let lines = Arc::new(Mutex::new(Vec::new()));
        let sink = Arc::clone(&lines);
        let log = DaemonLog::new(Box::new(move |l| sink.lock().unwrap().push(l.to_string())));
        (Arc::new(log), lines)
    }

    #[test]
    fn errors_are_said_once_per_distinct_message_with_a_timestamp() {
        let (log, lines) = captured();
        log.failed(STEP_INGEST, "sacct timed out");
        log.failed(STEP_INGEST, "sacct timed out");
        log.failed(STEP_GOVERN, "sacct timed out");
        log.failed(STEP_INGEST, "sacct: exit 1");
        log.succeeded(STEP_INGEST);
        log.succeeded(STEP_INGEST);
        log.failed(STEP_INGEST, "sacct timed out");
        log.warn_once("bad line 3");
        log.warn_once("bad line 3");
        let lines = lines.lock().unwrap();
        let said: Vec<&str> = lines
            .iter()
            .map(|l| l.split_once(" accountd run: ").unwrap().1)
            .collect();
        assert_eq!(
            said,
            [
                "ingest failed: sacct timed out",
                "govern failed: sacct timed out",
                "ingest failed: sacct: exit 1",
                "ingest succeeds again",
                "ingest failed: sacct timed out",
                "warning: bad line 3",
            ]
        );
        // RFC 3339 UTC timestamp first.
        let ts = lines[0].split(' ').next().unwrap();
        assert!(ts.ends_with('Z') && ts.len() == 20, "{ts}");
    }

    #[test]
    fn a_daemon_stopped_before_it_starts_runs_no_step() {
        let dir = tempfile::tempdir().unwrap();
        let config = teamshare_config::parse(
            "[cluster]\nname = \"c\"\npartitions = [\"gpu\"]\n\n[[team]]\nname = \"a\"\nquota = 1\n",
            "teamshare.toml",
        )
        .unwrap();
        let (log, lines) = captured();
        let opts = DaemonOptions {
            database: dir.path().join("db.sqlite"),
            spool: dir.path().join("no-spool"),
            govern_interval: Duration::from_secs(1),
            ingest_interval: Duration::from_secs(60),
            govern: true,
            ingest: true,
            once: false,
            metrics_listen: "127.0.0.1:0".parse().unwrap(),
        };
        let outcome = run(config, opts, Arc::new(AtomicBool::new(true)), log);
        assert_eq!(outcome.failed_steps, 0);
        assert!(outcome.metrics_addr.is_some());
        let lines = lines.lock().unwrap();
        assert!(
            lines
                .iter()
                .any(|l| l.contains("started: governing every 1s")),
            "{lines:?}"
        );
        assert!(lines.last().unwrap().contains("stopping"), "{lines:?}");
        assert!(!dir.path().join("db.sqlite").exists());
    }
}
