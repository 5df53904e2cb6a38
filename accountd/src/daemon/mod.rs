//! `accountd run`: the daemon (DESIGN 6). Three threads, until a stop is asked for:
//!
//! - governance: a governor pass every `govern_interval`, one [`Governor`] per configuration in
//!   force (made again when teamshare.toml is reloaded);
//! - ingest: every `ingest_interval`, sacct into the database and the runaway check, the nodes'
//!   GPU samples collected from the spool, the governed capacity measured and recorded
//!   (`capacity_samples`);
//! - `/metrics`, served from a thread of its own ([`crate::metrics`]).
//!
//! Governance never waits on the others: sacct may take minutes (or hang until its timeout), the
//! database may be locked by a backfill, a scrape may compute a month of figures, and the state
//! the plugin reads is still published every pass.
//!
//! What a pass knows flows forward from it, never back through a file or the database: the
//! state it published, the capacity it measured (the ingest thread records that rather than run
//! sinfo again) and the team of each job it requeued come in its [`PassReport`](crate::governor::PassReport).
//!
//! Three SQLite connections remain, one per thread that needs the database, because none of
//! them may wait on another: the ingest thread's, the only writer (held between rounds); the
//! governor's read-only one for fair-share factors (opened every 30 s; WAL never blocks it,
//! so no long ingest transaction delays a pass); and the metrics thread's, for the month's
//! figures of a scrape (opened when they are computed again, so that a slow computation holds
//! up neither governance nor ingest).
//!
//! The main thread follows teamshare.toml ([`crate::config_watch`]): every 2 s and on SIGHUP; a
//! valid new file replaces the configuration of every step, an invalid one is said once and the
//! last good configuration stays.
//!
//! Each step fails alone: its error is logged (once per distinct message, with a timestamp) and
//! the other steps go on; the step is tried again at its next turn. A stop (SIGTERM, SIGINT) is
//! seen between steps: the governor's pass under way finishes; the ingest thread's step is waited
//! for [`STOP_GRACE`] at most (a hung sacct would hold the stop for its whole timeout): past it,
//! accountd exits without it, its uncommitted transaction discarded as after a crash.

use std::net::SocketAddr;
use std::ops::ControlFlow;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use teamshare_config::Config;

use crate::capacity;
use crate::config_watch::{self, ConfigWatch, Reload};
use crate::governor::{self, Cadence, Governor, SlurmReader};
use crate::ingest;
use crate::metrics::{Body, Exporter, MetricsServer};
mod fairshare;
mod idleness;
mod pass_log;
mod pass_report;
use crate::logging::{ms, RUN};
use crate::period;
use crate::sample::collect;
use crate::slurm_cli::slurm_name;
use crate::store::{self, CapacitySample, Store};
pub use fairshare::fairshare_from_store;
pub use idleness::idleness_from_store;
use pass_report::{govern, ForStore};
use teamshare_config::format_duration;

/// The steps, as they are named in the log.
pub const STEP_GOVERN: &str = "govern";
pub const STEP_INGEST: &str = "ingest";
pub const STEP_RUNAWAY: &str = "runaway-check";
pub const STEP_COLLECT: &str = "collect-samples";
pub const STEP_CAPACITY: &str = "capacity";
pub const STEP_METRICS: &str = "metrics";

/// How long a thread sleeps at most before it looks at the stop flag again.
const STOP_POLL: Duration = Duration::from_millis(100);
/// How long a stop waits for the ingest thread's step under way.
pub const STOP_GRACE: Duration = Duration::from_secs(5);

#[derive(Debug, Clone, PartialEq)]
pub struct DaemonOptions {
    pub database: PathBuf,
    /// The spool root given on the command line; None: `[accountd] sample_spool` of the
    /// configuration in force.
    pub spool: Option<PathBuf>,
    pub govern_interval: Duration,
    pub govern: bool,
    pub ingest: bool,
    /// One of each step, then return.
    pub once: bool,
    pub metrics_listen: SocketAddr,
    /// The teamshare.toml to follow (reloaded when it changes and on `reload`); None: the
    /// configuration given is kept.
    pub config_path: Option<PathBuf>,
    /// How long a stop waits for the ingest thread's step under way ([`STOP_GRACE`]).
    pub stop_grace: Duration,
}

/// The daemon's log ([`crate::logging`]): a step's error is said when it differs from that
/// step's previous one, and its recovery once; a warning once per distinct text.
pub use crate::logging::Once as DaemonLog;

/// How a run ended.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Outcome {
    /// Step runs that failed (with `once`: whether the one run of each step failed).
    pub failed_steps: usize,
    /// The address metrics were served on, if the listener could be bound.
    pub metrics_addr: Option<SocketAddr>,
    /// A thread that ended while no stop was asked for (a panic, a bug): the daemon stopped so
    /// that its service manager starts it again, rather than run on without governance.
    pub thread_ended: Option<&'static str>,
}

/// Sets its flag when dropped: when its thread ends, panicking or not.
struct SetOnDrop(Arc<AtomicBool>);

impl Drop for SetOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// What the threads share.
struct Shared {
    opts: DaemonOptions,
    /// The configuration in force and its generation (bumped at each reload).
    config: Mutex<(u64, Arc<Config>)>,
    exporter: Arc<Exporter>,
    log: Arc<DaemonLog>,
    stop: Arc<AtomicBool>,
    failed_steps: AtomicUsize,
    /// The capacity the governor's last pass measured: the ingest thread's capacity step
    /// records it rather than run sinfo again.
    governed_capacity: Mutex<Option<CapacitySample>>,
    /// Sample collections done: the governor reads the idle windows again only after one.
    collections: Arc<AtomicU64>,
}

impl Shared {
    fn config(&self) -> (u64, Arc<Config>) {
        let c = self.config.lock().unwrap_or_else(|e| e.into_inner());
        (c.0, Arc::clone(&c.1))
    }

    fn set_config(&self, config: Config) {
        let mut c = self.config.lock().unwrap_or_else(|e| e.into_inner());
        *c = (c.0 + 1, Arc::new(config));
    }

    fn stopping(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }

    /// Sleep until `deadline`; false when a stop was asked for meanwhile.
    fn sleep_until(&self, deadline: Instant) -> bool {
        while !self.stopping() {
            let now = Instant::now();
            if now >= deadline {
                return true;
            }
            std::thread::sleep((deadline - now).min(STOP_POLL));
        }
        false
    }

    fn step_result(&self, step: &'static str, result: Result<(), String>) {
        match result {
            Ok(()) => self.log.succeeded(step),
            Err(e) => {
                self.failed_steps.fetch_add(1, Ordering::Relaxed);
                self.log.failed(step, &e);
            }
        }
    }
}

/// Run the daemon until `stop` is set (or once, with `opts.once`). `reload` set (SIGHUP) reads
/// the configuration file again.
pub fn run(
    config: Config,
    opts: DaemonOptions,
    stop: Arc<AtomicBool>,
    reload: Arc<AtomicBool>,
    log: Arc<DaemonLog>,
) -> Outcome {
    // Every thread of the daemon writes its events and spans where `log` does.
    let _log = log.set_default();
    let exporter = Arc::new(Exporter::new(config.clone(), opts.database.clone()));
    let mut watch = opts
        .config_path
        .as_deref()
        .filter(|_| !opts.once)
        .map(|p| ConfigWatch::new(p, &config));
    let shared = Arc::new(Shared {
        config: Mutex::new((0, Arc::new(config))),
        opts,
        exporter,
        log,
        stop,
        failed_steps: AtomicUsize::new(0),
        governed_capacity: Mutex::new(None),
        collections: Arc::new(AtomicU64::new(0)),
    });
    let opts = &shared.opts;
    let mut server = start_metrics(&shared);
    let metrics_addr = server.as_ref().map(MetricsServer::local_addr);
    let (_, config) = shared.config();
    announce_start(&shared, metrics_addr, &config);
    if let Some(warning) = store::exposure_warning(&opts.database) {
        shared.log.warn_once(&warning);
    }
    // The database exists at the current schema before the governor's first pass reads its
    // fair-share from it: otherwise that pass races the ingest thread making it, and says the
    // database needs an upgrade (issue 25, finding 14). A failure here is the ingest
    // thread's to report, as it opens the database again.
    if !shared.stop.load(Ordering::Relaxed) {
        drop(Store::open(&opts.database));
    }
    let threads = start_threads(&shared);
    if opts.once {
        return run_once(&shared, threads, server, metrics_addr);
    }
    let thread_ended = supervise(&shared, &threads, &mut watch, &reload, &mut server, &config);
    stop_threads(&shared, threads, server, thread_ended);
    Outcome {
        failed_steps: shared.failed_steps.load(Ordering::Relaxed),
        metrics_addr,
        thread_ended,
    }
}

/// Log what the daemon runs, where and with which configuration.
fn announce_start(shared: &Shared, metrics_addr: Option<SocketAddr>, config: &Config) {
    let opts = &shared.opts;
    let text = format!(
        "started: {}, ingest and sample collection every {}, metrics on {}, database {}, configuration {} (digest {})",
        if opts.govern {
            format!("governing every {}", format_duration(opts.govern_interval))
        } else {
            "not governing".to_string()
        },
        format_duration(config.accountd.ingest_interval),
        match metrics_addr {
            Some(a) => format!("http://{a}/metrics"),
            None => "(not bound yet)".to_string(),
        },
        opts.database.display(),
        opts.config_path
            .as_ref()
            .map_or_else(|| "(given)".to_string(), |p| p.display().to_string()),
        config.digest
    );
    tracing::info!(target: RUN, digest = %config.digest, governing = opts.govern, "{text}");
}

/// The daemon's threads: the governor's (when governing) and the ingest one's.
struct Threads {
    governor: Option<std::thread::JoinHandle<()>>,
    worker: std::thread::JoinHandle<()>,
    /// Says when the ingest thread is done, for the grace period at stop.
    worker_ended: Receiver<()>,
}

fn start_threads(shared: &Arc<Shared>) -> Threads {
    let opts = &shared.opts;
    // The governor's capacity samples go to the ingest thread, which writes to the database.
    let (store_tx, store_rx) = mpsc::channel::<ForStore>();
    let governor_done = Arc::new(AtomicBool::new(!opts.govern));
    let governor = opts.govern.then(|| {
        let shared = Arc::clone(shared);
        let done = Arc::clone(&governor_done);
        spawn("governor", move || {
            let _done = SetOnDrop(done);
            let _log = shared.log.set_default();
            govern_loop(&shared, &store_tx);
        })
    });
    let (worker_done, worker_ended) = mpsc::channel::<()>();
    let worker = {
        let shared = Arc::clone(shared);
        let governor_done = Arc::clone(&governor_done);
        spawn("ingest", move || {
            let _log = shared.log.set_default();
            ingest_loop(&shared, &store_rx, &governor_done);
            let _ = worker_done.send(());
        })
    };
    Threads {
        governor,
        worker,
        worker_ended,
    }
}

/// With `once`: the threads ran their steps once; then one scrape.
fn run_once(
    shared: &Shared,
    threads: Threads,
    server: Option<MetricsServer>,
    metrics_addr: Option<SocketAddr>,
) -> Outcome {
    join(threads.governor);
    join(Some(threads.worker));
    // One scrape: the database's figures are computed once, their errors logged.
    let (_, error) = shared.exporter.scrape();
    shared.step_result(STEP_METRICS, error.map_or(Ok(()), Err));
    if let Some(s) = server {
        s.stop();
    }
    Outcome {
        failed_steps: shared.failed_steps.load(Ordering::Relaxed),
        metrics_addr,
        thread_ended: None,
    }
}

/// Watch the threads, the configuration file and the metrics listener until a stop is asked
/// for or a thread ends: that thread's name.
fn supervise(
    shared: &Arc<Shared>,
    threads: &Threads,
    watch: &mut Option<ConfigWatch>,
    reload: &AtomicBool,
    server: &mut Option<MetricsServer>,
    config: &Config,
) -> Option<&'static str> {
    let mut next_look = Instant::now() + config_watch::POLL;
    let mut next_bind = Instant::now() + config.accountd.ingest_interval;
    while !shared.stopping() {
        let ended = if threads.governor.as_ref().is_some_and(|h| h.is_finished()) {
            Some("governor")
        } else if threads.worker.is_finished() {
            Some("ingest")
        } else {
            None
        };
        if let Some(name) = ended {
            tracing::info!(
                target: RUN,
                thread = name,
                "the {name} thread ended unexpectedly (see above): stopping, so that the service manager starts accountd again"
            );
            shared.stop.store(true, Ordering::Relaxed);
            return Some(name);
        }
        let asked = reload.swap(false, Ordering::Relaxed);
        if let Some(w) = watch.as_mut() {
            if asked || Instant::now() >= next_look {
                next_look = Instant::now() + config_watch::POLL;
                let found = w.check_with(asked, &mut config_watch::verify_with_slurm);
                apply_reload(shared, w.path(), found, asked);
            }
        }
        if server.is_none() && Instant::now() >= next_bind {
            next_bind = Instant::now() + shared.config().1.accountd.ingest_interval;
            *server = start_metrics(shared);
            if let Some(s) = server.as_ref() {
                let addr = s.local_addr();
                tracing::info!(target: RUN, addr = %addr, "metrics on http://{addr}/metrics");
            }
        }
        std::thread::sleep(STOP_POLL);
    }
    None
}

/// Wait for the threads (the ingest one within the grace period), stop the listener, say why.
fn stop_threads(
    shared: &Shared,
    threads: Threads,
    server: Option<MetricsServer>,
    thread_ended: Option<&'static str>,
) {
    let opts = &shared.opts;
    // The governor's pass under way is short (Slurm's commands have timeouts): waited for.
    join(threads.governor);
    let abandoned = match threads.worker_ended.recv_timeout(opts.stop_grace) {
        Ok(()) | Err(RecvTimeoutError::Disconnected) => {
            join(Some(threads.worker));
            false
        }
        Err(RecvTimeoutError::Timeout) => true,
    };
    if let Some(s) = server {
        s.stop();
    }
    let why = if thread_ended.is_some() {
        "a thread ended"
    } else {
        "signal received"
    };
    if abandoned {
        shared.log.info(&format!(
            "stopping: {why}; governance finished its pass; the ingest thread's step (sacct, or the database) did not finish within {}: left behind, its uncommitted transaction is discarded and the next start reads the window again",
            format_duration(opts.stop_grace)
        ));
    } else {
        shared
            .log
            .info(&format!("stopping: {why}, the steps under way finished"));
    }
}

fn spawn(name: &str, f: impl FnOnce() + Send + 'static) -> std::thread::JoinHandle<()> {
    std::thread::Builder::new()
        .name(name.to_string())
        .spawn(f)
        .expect("a thread can be started")
}

fn join(handle: Option<std::thread::JoinHandle<()>>) {
    if let Some(h) = handle {
        // A panic in a step is a bug; it ends that thread, not the daemon's exit.
        let _ = h.join();
    }
}

/// Say what a look at the configuration file found, and put a valid new file in force.
fn apply_reload(shared: &Shared, path: &std::path::Path, found: Reload, asked: bool) {
    match found {
        Reload::Unchanged => {}
        Reload::Same { digest } => {
            if asked {
                tracing::info!(
                    target: RUN,
                    digest = %digest,
                    "SIGHUP: configuration {} unchanged (digest {digest})",
                    path.display()
                );
            }
        }
        Reload::Reloaded {
            config,
            from,
            unchecked,
        } => {
            let (_, old) = shared.config();
            // Read once at start: the listener and the open database stay until a restart.
            let mut at_restart = Vec::new();
            if old.accountd.database != config.accountd.database {
                at_restart.push("[accountd] database");
            }
            if old.accountd.metrics_listen != config.accountd.metrics_listen {
                at_restart.push("[accountd] metrics_listen");
            }
            let digest = config.digest.clone();
            shared.exporter.set_config((*config).clone());
            shared.set_config(*config);
            tracing::info!(
                target: RUN,
                from = %from,
                digest = %digest,
                "configuration {} reloaded{}: digest {from} -> {digest}{}{}",
                path.display(),
                if asked { " on SIGHUP" } else { "" },
                if at_restart.is_empty() {
                    String::new()
                } else {
                    format!(
                        " ({} changed: in force when accountd run restarts)",
                        at_restart.join(", ")
                    )
                },
                unchecked
                    .map(|why| format!(" (not checked against Slurm's partitions: {why})"))
                    .unwrap_or_default()
            );
        }
        Reload::Rejected { why, kept } => tracing::info!(
            target: RUN,
            digest = %kept,
            "warning: configuration {} not reloaded, the last good one stays in force (digest {kept}): {why}",
            path.display()
        ),
    }
}

fn start_metrics(shared: &Arc<Shared>) -> Option<MetricsServer> {
    let exporter = Arc::clone(&shared.exporter);
    let log = Arc::clone(&shared.log);
    let body: Body = Arc::new(move || {
        let (text, error) = exporter.scrape();
        match error {
            Some(e) => log.failed(STEP_METRICS, &format!("database figures: {e}")),
            None => log.succeeded(STEP_METRICS),
        }
        text
    });
    match MetricsServer::start(shared.opts.metrics_listen, body) {
        Ok(s) => Some(s),
        Err(e) => {
            shared.step_result(
                STEP_METRICS,
                Err(format!(
                    "cannot listen on {}: {e} (tried again every ingest interval)",
                    shared.opts.metrics_listen
                )),
            );
            None
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Governance

fn govern_loop(shared: &Shared, store_tx: &Sender<ForStore>) {
    let (mut generation, config) = shared.config();
    let database = shared.opts.database.clone();
    let new_governor = |config: &Config| {
        // Checked when the daemon starts (a bad value is a usage error); libslurm otherwise.
        let reader = SlurmReader::from_env()
            .unwrap_or_else(|_| SlurmReader::Libslurm(crate::slurm_api::Session::new()));
        let fairshare = fairshare_from_store(database.clone());
        Governor::with_reader(config.clone(), Some(fairshare), reader)
            .with_idleness(idleness_from_store(database.clone()))
            .with_collections(shared.collections.clone())
    };
    let cadence = Cadence {
        interval: shared.opts.govern_interval,
        once: shared.opts.once,
    };
    governor::run_loop(
        new_governor(&config),
        cadence,
        || {
            // The limits it remembers were set under the old rules: a new governor sets them
            // again under the new ones.
            let (now_generation, config) = shared.config();
            (now_generation != generation).then(|| {
                generation = now_generation;
                new_governor(&config)
            })
        },
        |result| {
            govern(shared, result, store_tx);
            ControlFlow::<()>::Continue(())
        },
        |deadline| shared.sleep_until(deadline),
    );
}

// ---------------------------------------------------------------------------------------------
// Ingest, sample collection, capacity

/// The ingest thread's database: opened on first use and again after an error.
struct Worker<'a> {
    shared: &'a Shared,
    store: Option<Store>,
}

impl Worker<'_> {
    fn with_store<T>(
        &mut self,
        f: impl FnOnce(&mut Store) -> Result<T, String>,
    ) -> Result<T, String> {
        let mut store = match self.store.take() {
            Some(s) => s,
            None => Store::open(&self.shared.opts.database).map_err(|e| e.to_string())?,
        };
        let result = f(&mut store);
        // After an error the connection is opened again next time (a replaced file, a lock).
        if result.is_ok() {
            self.store = Some(store);
        }
        result
    }

    /// Ingest, sample collection and capacity, in that order; how long each took, at debug.
    fn round(&mut self, config: &Config, store_rx: &Receiver<ForStore>) {
        let shared = self.shared;
        let started = Instant::now();
        if shared.opts.ingest {
            self.ingest(config);
        }
        let ingested = started.elapsed();
        if !shared.stopping() {
            self.collect(config);
        }
        let collected = started.elapsed();
        if !shared.stopping() {
            // The governor's samples first: they were measured earlier.
            self.record_pending(store_rx);
            self.capacity(config);
        }
        tracing::debug!(
            target: RUN,
            ingest_ms = ms(ingested),
            collect_ms = ms(collected - ingested),
            capacity_ms = ms(started.elapsed() - collected),
            "ingest round: done"
        );
    }

    fn ingest(&mut self, config: &Config) {
        let now = period::now();
        let cluster = slurm_name(&config.cluster.name);
        let result = self.with_store(|store| {
            let plan = ingest::plan(store, &cluster, None, None, now).map_err(|e| e.to_string())?;
            ingest::ingest(store, &plan, now).map_err(|e| e.to_string())
        });
        let shared = self.shared;
        match result {
            Ok(summary) => {
                for line in &summary.malformed {
                    shared.log.warn_once(&format!("ingest skipped {line}"));
                }
                shared
                    .exporter
                    .update_live(|live| live.ingest_last_success = Some(period::now()));
                shared.step_result(STEP_INGEST, Ok(()));
                self.runaways(&cluster);
            }
            Err(e) => shared.step_result(STEP_INGEST, Err(e)),
        }
    }

    /// After a successful ingest: runs sacct says are running whose job slurmctld lost.
    fn runaways(&mut self, cluster: &str) {
        let result = self
            .with_store(|store| ingest::check_runaways(store, cluster).map_err(|e| e.to_string()));
        let shared = self.shared;
        match result {
            Ok(clipped) => {
                for run in &clipped {
                    shared.log.warn_once(&ingest::describe_runaway(run));
                }
                shared.step_result(STEP_RUNAWAY, Ok(()));
            }
            Err(e) => shared.step_result(STEP_RUNAWAY, Err(e)),
        }
    }

    fn collect(&mut self, config: &Config) {
        let shared = self.shared;
        let root = shared
            .opts
            .spool
            .clone()
            .unwrap_or_else(|| config.accountd.sample_spool.clone());
        if !root.exists() {
            shared.log.warn_once(&format!(
                "no sample spool at {}: no GPU samples to collect (run `accountd sample` on the GPU nodes, writing there)",
                root.display()
            ));
            return;
        }
        let cluster = slurm_name(&config.cluster.name);
        let threshold = config.accountd.idle_threshold_percent;
        let result = self.with_store(|store| {
            collect::collect(store, &root, &cluster, threshold, period::now())
                .map_err(|e| e.to_string())
        });
        match result {
            Ok(summary) => {
                for line in &summary.malformed {
                    shared.log.warn_once(&format!(
                        "skipped malformed sample {line} (the file is kept in rejected/)"
                    ));
                }
                for line in summary.unreadable.iter().chain(&summary.unsettled) {
                    shared
                        .log
                        .warn_once(&format!("{line} (left in the spool; read again next time)"));
                }
                shared.collections.fetch_add(1, Ordering::Relaxed);
                shared.step_result(STEP_COLLECT, Ok(()));
            }
            Err(e) => shared.step_result(STEP_COLLECT, Err(e)),
        }
    }

    fn capacity(&mut self, config: &Config) {
        let shared = self.shared;
        // The governor's last pass measured it (and published it to the metrics) within this
        // interval: recorded as it was read, without running sinfo a second time.
        let governed = shared
            .governed_capacity
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
            .filter(|s| {
                period::now() - s.ts
                    < i64::try_from(config.accountd.ingest_interval.as_secs()).unwrap_or(i64::MAX)
            });
        if let Some(sample) = governed {
            return self.record(config, ForStore::Capacity(sample));
        }
        let measured = match capacity::measure(&config.cluster.partitions) {
            Ok(c) => c,
            Err(e) => return shared.step_result(STEP_CAPACITY, Err(e.to_string())),
        };
        shared
            .exporter
            .update_live(|live| live.capacity = Some(measured.total));
        self.record(
            config,
            ForStore::Capacity(CapacitySample {
                ts: period::now(),
                gpus: measured.total,
                by_type: measured.by_type,
            }),
        );
    }

    fn record(&mut self, config: &Config, what: ForStore) {
        let cluster = slurm_name(&config.cluster.name);
        let result = self.with_store(|store| {
            match &what {
                ForStore::Capacity(sample) => store.record_capacity(&cluster, sample).map(|_| ()),
                ForStore::IdleSteps(steps) => store.record_idle_steps(&cluster, steps),
            }
            .map_err(|e| e.to_string())
        });
        self.shared.step_result(STEP_CAPACITY, result);
    }

    /// The capacity samples the governor measured, written now.
    fn record_pending(&mut self, store_rx: &Receiver<ForStore>) {
        while let Ok(sample) = store_rx.try_recv() {
            let (_, config) = self.shared.config();
            self.record(&config, sample);
        }
    }
}

fn ingest_loop(shared: &Shared, store_rx: &Receiver<ForStore>, governor_done: &AtomicBool) {
    let mut worker = Worker {
        shared,
        store: None,
    };
    while !shared.stopping() {
        let started = Instant::now();
        let (_, config) = shared.config();
        worker.round(&config, store_rx);
        if shared.opts.once {
            // What the governor's one pass left for the database: its capacity sample.
            while !governor_done.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(10));
            }
            worker.record_pending(store_rx);
            return;
        }
        // Until the next round, the governor's capacity samples are written as they come.
        let next = started + config.accountd.ingest_interval;
        loop {
            if shared.stopping() {
                return;
            }
            let now = Instant::now();
            if now >= next {
                break;
            }
            match store_rx.recv_timeout((next - now).min(STOP_POLL)) {
                Ok(sample) => worker.record(&config, sample),
                Err(RecvTimeoutError::Timeout) => {}
                // No governor: nothing will come.
                Err(RecvTimeoutError::Disconnected) => {
                    std::thread::sleep((next - now).min(STOP_POLL))
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A log whose lines (from every thread of the daemon) are kept in memory.
    fn captured() -> (Arc<DaemonLog>, crate::logging::capture::Lines) {
        let (dispatch, lines) = crate::logging::capture::dispatch();
        let log =
            tracing::dispatcher::with_default(&dispatch, || DaemonLog::new(crate::logging::RUN));
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
        let lines = lines.lines();
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

    /// Issue 25, finding 14: the governor's first pass read fair-share from a database the
    /// ingest thread was still making (and said it needed an upgrade). The daemon makes it,
    /// at the current schema, before any thread starts: here neither ingests.
    #[test]
    fn issue25_14_the_database_is_ready_before_the_threads_start() {
        let dir = tempfile::tempdir().unwrap();
        let config = teamshare_config::parse(
            "[cluster]\nname = \"c\"\npartitions = [\"gpu\"]\n\n[[team]]\nname = \"a\"\nquota = 1\n",
            "teamshare.toml",
        )
        .unwrap();
        let (log, _) = captured();
        let opts = DaemonOptions {
            database: dir.path().join("db.sqlite"),
            spool: None,
            govern_interval: Duration::from_secs(1),
            govern: false,
            ingest: false,
            once: false,
            metrics_listen: "127.0.0.1:0".parse().unwrap(),
            config_path: None,
            stop_grace: STOP_GRACE,
        };
        // Stopped a moment after it starts, before anything would have made the database.
        let stop = Arc::new(AtomicBool::new(false));
        let stopper = {
            let stop = Arc::clone(&stop);
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(300));
                stop.store(true, Ordering::Relaxed);
            })
        };
        run(config, opts, stop, Arc::new(AtomicBool::new(false)), log);
        stopper.join().unwrap();
        Store::open_read_only(&dir.path().join("db.sqlite")).expect("made at the current schema");
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
            spool: Some(dir.path().join("no-spool")),
            govern_interval: Duration::from_secs(1),
            govern: true,
            ingest: true,
            once: false,
            metrics_listen: "127.0.0.1:0".parse().unwrap(),
            config_path: None,
            stop_grace: STOP_GRACE,
        };
        let outcome = run(
            config,
            opts,
            Arc::new(AtomicBool::new(true)),
            Arc::new(AtomicBool::new(false)),
            log,
        );
        assert_eq!(outcome.failed_steps, 0);
        assert!(outcome.metrics_addr.is_some());
        let lines = lines.lines();
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
