//! The governor: keeps Slurm's inputs (job priorities, team GPU limits) matching DESIGN §4 and
//! publishes the state the plugin reads. Slurm's own scheduler and preempt/qos then make every
//! start and preemption decision inside its scheduling cycle; see docs/design/governance.md.
//!
//! One pass: Slurm's jobs and nodes as typed records (libslurm, or squeue + sinfo) ->
//! the policy's `Planner`, kept between passes ([`planning`]) -> state file (written to a temporary file and
//! renamed, so the plugin never reads a half-written one) -> the writes for what changed
//! ([`crate::slurm_write::SlurmWrite`]: libslurm's RPCs, or scontrol; limits through sacctmgr),
//! on a thread of their own, so that slow actions never delay the next snapshot or age the
//! published state (docs/design/slurm-boundary.md). If the governor stops, Slurm keeps the last priorities and limits (safe:
//! nothing can exceed the ceilings) and the plugin applies `on_stale_state` once the state ages.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::{Duration, Instant};

use teamshare_config::Config;
use teamshare_policy::governance::{self, ClusterJob, Plan, PublishedState, ShardPlaces};
use teamshare_policy::priority;

use crate::capacity;
use crate::period::{self, UnixSeconds};
use crate::slurm_cli::{slurm_name, SlurmCommand, SlurmCommandError};
use crate::slurm_write::{Begin, JobUpdate, RunningJob, SlurmWrite, WriteError};

// The squeue reader lives in its own module; its public names stay reachable from here.
use crate::gres_detail::shard_places;
pub use crate::squeue::{
    address, expand_hostlist, grp_tres, parse_squeue, pending_reasons, read_records,
    read_records_with, read_squeue, squeue_command, squeue_records, whole_address, Addresses,
    GovernorHold, Leaders, Records, SqueueRead, Unreadable,
};
use crate::squeue::{governor_holds, OUTSIDE_HOLD, UNHOLD_LIFTS_WITHIN_SECS, UNTYPED_HOLD};

mod actuator;
mod idle_policy;
mod idleness;
mod planning;
mod quiet;
mod trace;

pub use actuator::{hook_args, IDLE_MARK};
use actuator::{Actuator, Snapshot, Unhold};
pub use idle_policy::{IdleEvent, IdleStep};
pub use idleness::{IdlenessSource, SampledWindow, Windows};
use planning::Planning;
pub(crate) use planning::{plan_once, PassRead};
pub use trace::{act_span, pass_span};

/// How long a pass may spend re-ranking waiting borrowers (one scontrol call per rank); the
/// rest waits for the next pass. Issue 9 replaces per-rank values with bands.
const PRIORITY_BUDGET: Duration = Duration::from_millis(250);
/// Jobs per scontrol call where a list may be long (borrowers' bands, parking).
const UPDATE_CHUNK: usize = 64;
/// Fair-share factors move slowly: ask the source for them this often.
const FAIRSHARE_REFRESH: Duration = Duration::from_secs(30);

/// Where a pass's fair-share factors come from: the usage accountd has ingested, computed by
/// the side of the daemon that owns the database ([`crate::daemon::fairshare_from_store`]),
/// asked at most every [`FAIRSHARE_REFRESH`]. `Ok(None)`: nothing to compute from yet (the
/// factors in use stay); `Err`: why they could not be computed (the factors in use stay too).
pub type FairshareSource =
    Box<dyn FnMut(&Config, UnixSeconds) -> Result<Option<BTreeMap<String, f64>>, String> + Send>;

#[derive(Debug, thiserror::Error)]
pub enum GovernError {
    #[error(transparent)]
    Slurm(#[from] SlurmCommandError),
    #[error("capacity: {0}")]
    Capacity(#[from] capacity::CapacityError),
    #[error(transparent)]
    Libslurm(#[from] crate::slurm_api::ApiError),
    #[error(transparent)]
    Write(#[from] crate::slurm_write::WriteError),
    #[error("cannot write the state file {path}: {source}")]
    StateFile {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// What one pass changed, for the log.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct PassReport {
    pub jobs: usize,
    /// The state file could not be written this pass (the failure is in `failures`).
    pub state_write_failed: bool,
    pub priority_updates: usize,
    /// Each team whose GPU limit was set, with its GrpTRES (`gres/gpu=4`, plus each type's in
    /// a typed configuration).
    pub limit_updates: Vec<(String, String)>,
    /// Each team whose limit move Slurm refused or did not answer (slurmdbd or its database
    /// down): tried again next pass, counted in the metrics.
    pub limit_failures: Vec<String>,
    /// The GPU limit (gres/gpu) each team's account holds in Slurm as far as the actions know:
    /// the last one set without error; set by the actions (`None` in a pass's own report).
    pub limits_in_force: Option<BTreeMap<String, u32>>,
    pub displaced: Vec<u64>,
    /// The team of each job in the lists of actions (`displaced`, `reclaimed`, `held`, ...), as
    /// the plan read it (a job it did not read has none).
    pub teams: BTreeMap<u64, String>,
    /// Borrowed jobs the governor requeued itself for in-quota jobs Slurm left waiting.
    pub reclaimed: Vec<u64>,
    /// Non-preemptible jobs found running beyond their team's quota, requeued (or cancelled).
    pub violations: Vec<u64>,
    /// Borrowed jobs beyond their team's ceiling (a lowered borrow limit), requeued (or
    /// cancelled).
    pub over_ceiling: Vec<u64>,
    /// Jobs holding or asking for GPUs outside every team: held (pending) or requeued and
    /// held (running batch) or cancelled (running interactive).
    pub held: Vec<u64>,
    /// Jobs the plan named that had changed before the act (ended, requeued, restarted): left
    /// alone.
    pub skipped: Vec<u64>,
    /// Slurm commands that failed (tried again next pass when still needed).
    pub failures: Vec<String>,
    /// Jobs the governor requeued whose run had in fact ended by itself: held so that they do
    /// not run twice.
    pub requeue_held: Vec<u64>,
    /// Requeued jobs whose requeue could not be checked in accounting: their delay is left to
    /// Slurm ([`crate::requeue_check`]).
    pub requeue_unverified: Vec<u64>,
    /// Jobs held against a second run whose run accounting later showed killed by the
    /// requeue: their hold was wrong and is released.
    pub wrong_holds_released: Vec<u64>,
    /// The idle policy's decisions acted on: notices, actions, notices taken back.
    pub idle_steps: Vec<IdleEvent>,
    /// Per team, the running jobs idle for the whole `idle_window` as the pass read them, and
    /// their GPUs (teams with none are absent).
    pub idle_now: BTreeMap<String, (u32, u32)>,
    /// Non-preemptible jobs parked (held) because they do not fit their team's quota.
    pub parked: Vec<u64>,
    /// Parked jobs released because they now fit.
    pub released: Vec<u64>,
    /// Jobs the governor had held (outside every team, or untyped) released because that
    /// reason is gone (the account is a team again).
    pub unheld: Vec<u64>,
    /// Requeued jobs whose requeue delay was lifted ([`crate::requeue_delay`]).
    pub lifted: Vec<u64>,
    /// How long the pass took to read, plan and publish, and how many Slurm client commands
    /// it ran for that (issue 9: this must not grow with the queue).
    pub duration: Duration,
    pub slurm_calls: u64,
    /// The actions on an earlier plan that ended since the previous pass (their jobs and
    /// limits are in the lists above).
    pub acted: Option<Acted>,
    pub capacity: u32,
    /// The capacity's GPUs per type, as the pass read them (for the capacity samples).
    pub capacity_by_type: BTreeMap<String, u32>,
    /// The state the pass published (so its readers need not read the file back).
    pub state: Option<PublishedState>,
    /// squeue lines the pass could not read (logged once each, counted in metrics); their jobs
    /// were treated as never in quota.
    pub unreadable: Vec<String>,
    /// No pass of its own: what the actions of a governor being replaced (new rules) or
    /// stopped did after its last pass ([`Governor::settle`]). Only its action lists, `acted`
    /// and `failures` mean anything.
    pub settled: bool,
    /// A quiet pass ([`quiet`]): it read no jobs and made no plan (nothing it plans from moved:
    /// it published the last state again as of now; or the last full read was too recent for
    /// its cost: it published nothing). Its action lists, `acted`, `failures`, `duration` and
    /// `slurm_calls` (the mark's) mean anything.
    pub quiet: bool,
}

/// How long the actions on one plan took, and how many Slurm client commands they ran.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Acted {
    pub duration: Duration,
    /// Calls to Slurm: RPCs in process and client commands.
    pub slurm_calls: u64,
    /// Processes started among them: the client commands, or the limits helper when it
    /// starts (again) with the libslurm writer.
    pub processes: u64,
    /// The plan's `generated_at`.
    pub plan_generated_at: i64,
    /// The number of the pass that made the plan ([`pass_span`]).
    pub pass: u64,
}

impl PassReport {
    /// Add what the actions on a plan did to this pass's report.
    fn absorb(&mut self, acted: PassReport) {
        self.priority_updates += acted.priority_updates;
        self.limit_updates.extend(acted.limit_updates);
        self.limit_failures.extend(acted.limit_failures);
        if acted.limits_in_force.is_some() {
            self.limits_in_force = acted.limits_in_force;
        }
        self.displaced.extend(acted.displaced);
        self.teams.extend(acted.teams);
        self.reclaimed.extend(acted.reclaimed);
        self.violations.extend(acted.violations);
        self.over_ceiling.extend(acted.over_ceiling);
        self.held.extend(acted.held);
        self.skipped.extend(acted.skipped);
        self.failures.extend(acted.failures);
        self.requeue_held.extend(acted.requeue_held);
        self.requeue_unverified.extend(acted.requeue_unverified);
        self.wrong_holds_released.extend(acted.wrong_holds_released);
        self.idle_steps.extend(acted.idle_steps);
        self.parked.extend(acted.parked);
        self.released.extend(acted.released);
        self.unheld.extend(acted.unheld);
        self.lifted.extend(acted.lifted);
        self.acted = acted.acted;
    }
}

/// What a pass read from Slurm.
#[derive(Debug, Clone)]
pub struct Reading {
    pub capacity: capacity::Capacity,
    pub jobs: Vec<ClusterJob>,
    /// Records that could not be read (their jobs are kept as never in quota).
    pub unreadable: Vec<Unreadable>,
    pub addresses: Addresses,
    /// Components of heterogeneous jobs acted on through their leader.
    pub leaders: Leaders,
    /// Slurm calls it took (RPCs through libslurm, or client commands).
    pub slurm_calls: u64,
    /// Every partition Slurm has and its GPUs, whatever the nodes' state (libslurm's reader
    /// only; `None` with the client commands).
    pub partitions: Option<teamshare_policy::offered::Offered>,
    /// Pending jobs the governor itself held because they were outside every team (or named no
    /// GPU type in a typed configuration), with their account: released once that reason is
    /// gone (issue 25, finding 5).
    pub holds: Vec<GovernorHold>,
    /// Where running shard jobs hold their shards (a configuration governing shards, read
    /// through libslurm).
    pub shard_gpus: ShardPlaces,
}

/// How the governor reads Slurm, and writes to it: in process through libslurm (the default),
/// or by running squeue and sinfo, scontrol, scancel and sacctmgr
/// (`TEAMSHARE_SLURM_READER=commands`: a host whose libslurm cannot talk to its slurmctld, or
/// a test with stand-in commands). Team limits go through sacctmgr either way. Both give the same typed records
/// ([`Records`]: libslurm's directly, squeue's text read into them) to the same reader; the
/// live test `scale::c03` checks that they agree.
pub enum SlurmReader {
    Libslurm(crate::slurm_api::Session),
    Commands,
}

/// The environment variable that chooses [`SlurmReader`].
pub const READER_VAR: &str = "TEAMSHARE_SLURM_READER";

impl SlurmReader {
    /// The reader `TEAMSHARE_SLURM_READER` names (`libslurm`, the default, or `commands`).
    pub fn from_env() -> Result<SlurmReader, String> {
        match std::env::var(READER_VAR).as_deref() {
            Err(_) | Ok("") | Ok("libslurm") => {
                Ok(SlurmReader::Libslurm(crate::slurm_api::Session::new()))
            }
            Ok("commands") => Ok(SlurmReader::Commands),
            Ok(other) => Err(format!(
                "{READER_VAR}={other:?}: expected `libslurm` (the default) or `commands`"
            )),
        }
    }

    /// Read what a pass plans from: the governed capacity and the jobs of the governed
    /// partitions, through libslurm or with sinfo and squeue.
    pub fn read(&mut self, config: &Config, now: UnixSeconds) -> Result<Reading, GovernError> {
        self.read_fresh(config, now, false)
    }

    /// [`SlurmReader::read`]; with `nodes_held`, the nodes and partitions of the mark just
    /// taken ([`SlurmReader::change_mark`]) instead of asking for them again.
    fn read_fresh(
        &mut self,
        config: &Config,
        now: UnixSeconds,
        nodes_held: bool,
    ) -> Result<Reading, GovernError> {
        let partitions = &config.cluster.partitions;
        self.ask_detail(config);
        let (capacity, records, slurm_calls) = self.read_records(partitions, nodes_held)?;
        let mut r = reading(config, capacity, &records, slurm_calls, now);
        if let SlurmReader::Libslurm(session) = self {
            r.partitions = Some(session.offered());
        }
        Ok(r)
    }

    /// [`SlurmReader::read`], with Slurm's reason for each pending job ([`pending_reasons`]:
    /// `accountd status` says why jobs wait; the governor's passes do without).
    pub fn read_with_reasons(
        &mut self,
        config: &Config,
        now: UnixSeconds,
    ) -> Result<(Reading, BTreeMap<u64, String>), GovernError> {
        self.ask_detail(config);
        let (capacity, records, slurm_calls) =
            self.read_records(&config.cluster.partitions, false)?;
        let reasons = pending_reasons(&records);
        Ok((
            reading(config, capacity, &records, slurm_calls, now),
            reasons,
        ))
    }

    /// Where `config` governs shards, libslurm is asked where running jobs' shards sit
    /// ([`teamshare_slurm::gres_detail`]); squeue's text cannot say (such jobs hold the fewest
    /// GPUs their shards can, in the plan).
    fn ask_detail(&mut self, config: &Config) {
        if let SlurmReader::Libslurm(session) = self {
            session.set_detail(config.shares().is_some());
        }
    }

    /// The capacity, the jobs' records, and the Slurm calls that took: typed records from
    /// libslurm, or squeue's text read into records.
    fn read_records(
        &mut self,
        partitions: &[String],
        nodes_held: bool,
    ) -> Result<(capacity::Capacity, Records, u64), GovernError> {
        Ok(match self {
            SlurmReader::Libslurm(session) => {
                let before = session.calls;
                let nodes = if nodes_held {
                    session.held_nodes_text(partitions)
                } else {
                    session.nodes_text(partitions)?
                };
                let cap = capacity::parse_sinfo(&nodes)?;
                let jobs = session.jobs(partitions)?;
                (cap, jobs, session.calls - before)
            }
            // Capacity and jobs are read at once: a snapshot takes the longer of the two, not
            // their sum (each waits for slurmctld's locks behind its scheduler).
            SlurmReader::Commands => {
                let (cap, sinfo_calls, out) = std::thread::scope(|s| {
                    let sinfo = s.spawn(|| {
                        let cap = capacity::measure(partitions);
                        (cap, crate::slurm_cli::calls_on_this_thread())
                    });
                    let out = squeue_command(partitions).run();
                    let (cap, calls) = sinfo.join().unwrap_or_else(|_| {
                        (
                            Err(capacity::CapacityError::Internal(
                                "the capacity reader stopped".into(),
                            )),
                            1,
                        )
                    });
                    (cap, calls, out)
                });
                let records = squeue_records(&out?.stdout);
                (cap?, records, sinfo_calls + 1)
            }
        })
    }
}

impl SlurmReader {
    /// Where Slurm stands by what changes when its jobs or nodes do, with the RPCs that took
    /// ([`crate::slurm_api::Session::change_mark`]); `None` with the client commands, which
    /// have no cheap way to tell (every pass reads everything).
    pub fn change_mark(
        &mut self,
    ) -> Option<(
        Result<crate::slurm_api::ChangeMark, crate::slurm_api::ApiError>,
        u64,
    )> {
        let SlurmReader::Libslurm(session) = self else {
            return None;
        };
        let before = session.calls;
        let mark = session.change_mark();
        Some((mark, session.calls - before))
    }
}

/// The untyped GPU count of a GrpTRES the governor set (`gres/gpu=4,gres/gpu:h100=2` -> 4).
fn gpus_of_grp_tres(tres: &str) -> Option<u32> {
    tres.split(',')
        .find_map(|part| part.strip_prefix("gres/gpu="))
        .and_then(|n| n.parse().ok())
}

/// The most GPUs on one usable node, in all and of each type: what a whole-node job holds
/// per node.
fn largest_nodes(cap: &capacity::Capacity) -> (u32, BTreeMap<String, u32>) {
    let mut by_type: BTreeMap<String, u32> = BTreeMap::new();
    for types in cap.per_node_types.values() {
        for (k, n) in types {
            let e = by_type.entry(k.clone()).or_insert(0);
            *e = (*e).max(*n);
        }
    }
    (cap.per_node.values().copied().max().unwrap_or(0), by_type)
}

/// A [`Reading`] of the capacity and the jobs' records; where `config` governs shards
/// (`[gpu_types.shard]`), they are GPUs of that type, in the capacity and in the jobs.
fn reading(
    config: &Config,
    capacity: capacity::Capacity,
    records: &Records,
    slurm_calls: u64,
    now: UnixSeconds,
) -> Reading {
    let shares = config.shares().is_some();
    let capacity = if shares {
        capacity.with_shares()
    } else {
        capacity
    };
    let node_gpus = capacity.per_node.values().copied().max().unwrap_or(0);
    let SqueueRead {
        jobs,
        unreadable,
        addresses,
        leaders,
    } = read_records_with(records, now, node_gpus, shares);
    let shard_gpus = if shares {
        shard_places(records, &jobs)
    } else {
        ShardPlaces::new()
    };
    Reading {
        shard_gpus,
        capacity,
        jobs,
        unreadable,
        addresses,
        leaders,
        slurm_calls,
        partitions: None,
        holds: governor_holds(records),
    }
}

pub struct Governor {
    config: Config,
    reader: SlurmReader,
    fairshare_source: Option<FairshareSource>,
    fairshare: BTreeMap<String, f64>,
    fairshare_at: Option<Instant>,
    /// The plan kept between passes ([`Planning`]).
    planning: Planning,
    /// What acts on Slurm for a plan, while it is idle.
    actuator: Option<Actuator>,
    /// The actions under way, on a thread of their own: a pass reads, plans and publishes on
    /// its own clock however long the actions of an earlier plan take (issue 9).
    acting: Option<std::thread::JoinHandle<(Actuator, PassReport)>>,
    /// Return from each pass only once its plan has been acted on (`accountd govern --once`,
    /// `accountd run --once`).
    pub wait_for_actions: bool,
    /// `generated_at` of the newest plan acted on in full (published as `acted_at`).
    acted_at: i64,
    /// The passes made since the loop started, this governor's and those of the governors it
    /// replaced: the number of the last ([`pass_span`]).
    passes: u64,
    /// The GPU limit of each team in the last plan, to say at debug level which ones a plan
    /// moves.
    planned_limits: BTreeMap<String, u32>,
    /// The running jobs' GPU samples of the idle window (issue 29), where the configuration
    /// orders idle victims first, and the jobs the last pass found idle.
    idleness: idleness::Idleness,
    idle_jobs: std::collections::BTreeSet<u64>,
    /// The idle policy's notices and actions (`[governance.idle_policy]`).
    idle_policy: idle_policy::IdlePolicyState,
    /// Per team, the running jobs idle for the whole idle window now, and their GPUs.
    idle_now: BTreeMap<String, (u32, u32)>,
    /// Makes what writes to Slurm: for the actuator, and again for a new one when an actuator
    /// is lost with a thread that stopped.
    writer: WriterFactory,
    /// Whether a pass may skip reading the jobs ([`quiet`]).
    quiet: quiet::QuietPasses,
    /// The state last published (a quiet pass that found nothing moved publishes it again).
    published: Option<PublishedState>,
}

/// Makes the actuator's writer ([`SlurmWrite`]).
pub type WriterFactory = Box<dyn Fn() -> Box<dyn SlurmWrite> + Send>;

impl Governor {
    /// A governor reading Slurm through libslurm (see [`Governor::with_reader`]).
    pub fn new(config: Config, fairshare_source: Option<FairshareSource>) -> Governor {
        Governor::with_reader(
            config,
            fairshare_source,
            SlurmReader::Libslurm(crate::slurm_api::Session::new()),
        )
    }

    /// A governor reading Slurm through `reader`, its fair-share factors from
    /// `fairshare_source` (none: every team's factor is unknown, as with an empty database).
    pub fn with_reader(
        config: Config,
        fairshare_source: Option<FairshareSource>,
        reader: SlurmReader,
    ) -> Governor {
        // Writes go the way reads do: in process, or through the client commands.
        let writer: WriterFactory = match reader {
            // Limits through slurmdbd's API in a helper process run from this binary.
            SlurmReader::Libslurm(_) => Box::new(|| match std::env::current_exe() {
                Ok(exe) => Box::new(crate::slurm_api::LibslurmWriter::with_limits_helper(exe)),
                Err(_) => Box::new(crate::slurm_api::LibslurmWriter::new()),
            }),
            SlurmReader::Commands => Box::new(|| Box::new(crate::slurm_write::CommandWriter)),
        };
        Governor {
            reader,
            planning: Planning::new(config.clone()),
            actuator: Some(Actuator::new(config.clone(), writer())),
            config,
            fairshare_source,
            fairshare: BTreeMap::new(),
            fairshare_at: None,
            acting: None,
            wait_for_actions: false,
            acted_at: 0,
            passes: 0,
            planned_limits: BTreeMap::new(),
            idleness: idleness::Idleness::default(),
            idle_jobs: std::collections::BTreeSet::new(),
            idle_policy: idle_policy::IdlePolicyState::default(),
            idle_now: BTreeMap::new(),
            writer,
            quiet: quiet::QuietPasses::default(),
            published: None,
        }
    }

    /// Write to Slurm through what `writer` makes (a test's [`crate::slurm_write::FakeSlurm`]).
    pub fn with_writer(mut self, writer: WriterFactory) -> Governor {
        self.actuator = Some(Actuator::new(self.config.clone(), writer()));
        self.writer = writer;
        self
    }

    /// Where the running jobs' GPU samples come from, for `idle_first_reclaim` (none: no job
    /// is known to be idle).
    pub fn with_idleness(mut self, source: IdlenessSource) -> Governor {
        self.idleness.source = Some(Arc::new(std::sync::Mutex::new(source)));
        self
    }

    /// The daemon's count of sample collections: the windows are read again only after one
    /// (the samples change only then).
    pub fn with_collections(mut self, collections: Arc<AtomicU64>) -> Governor {
        self.idleness.collections = Some(collections);
        self
    }

    pub fn state_file(&self) -> &Path {
        &self.config.accountd.state_file
    }

    /// Fair-share factors from the source (the usage accountd has ingested, decayed by the
    /// half-life). An error is returned for the pass's report; the previous factors stay in
    /// use. Says whether the factors changed.
    fn refresh_fairshare(&mut self, now: UnixSeconds) -> Result<bool, String> {
        if self
            .fairshare_at
            .is_some_and(|t| t.elapsed() < FAIRSHARE_REFRESH)
        {
            return Ok(false);
        }
        self.fairshare_at = Some(Instant::now());
        let Some(source) = &mut self.fairshare_source else {
            return Ok(false);
        };
        match source(&self.config, now) {
            Ok(Some(factors)) => {
                let changed = factors != self.fairshare;
                self.fairshare = factors;
                Ok(changed)
            }
            Ok(None) => Ok(false),
            Err(e) => Err(format!("fair-share not refreshed: {e}")),
        }
    }

    /// Refresh the plan's inputs besides Slurm (fair-share factors, GPU idle windows); errors
    /// go to the report. Says whether any changed.
    fn refresh_inputs(&mut self, now: UnixSeconds, report: &mut PassReport) -> bool {
        let windows_before = self.idleness.windows_taken();
        let fairshare = self.refresh_fairshare(now).unwrap_or_else(|e| {
            report.failures.push(e);
            false
        });
        if let Err(e) = self.idleness.refresh(&self.config, now) {
            report.failures.push(e);
        }
        fairshare || self.idleness.windows_taken() != windows_before
    }

    /// One pass: read Slurm, plan, publish, then hand the plan to the actuator.
    ///
    /// The state is published as soon as the plan exists, so the plugin always judges
    /// submissions by the newest view, and each pass reads and publishes on its own clock: the
    /// actions run on a thread of their own and never delay the next snapshot. A plan made
    /// while they are under way is published only; the first pass that begins after they end
    /// reads afresh and is acted on (each plan states all that Slurm should hold, so nothing
    /// is lost by acting on the newest only). Actions on running jobs are conditional (see [`Actuator::act_on_running`]);
    /// priorities, park/release and holds are harmless on a job that changed meanwhile (Slurm
    /// refuses them or the next plan corrects them). What the actions did is reported by the
    /// first pass after they end ([`PassReport::acted`]).
    pub fn pass(&mut self) -> Result<PassReport, GovernError> {
        let started = Instant::now();
        let mut report = PassReport::default();
        self.collect_actions(&mut report, false);
        let now = period::now();
        let inputs_changed = self.refresh_inputs(now, &mut report);
        let mark = self.take_mark(inputs_changed, started, &mut report);
        if report.quiet {
            report.duration = started.elapsed();
            return Ok(report);
        }
        self.passes += 1;
        let mark_calls = report.slurm_calls;
        let cpu = quiet::thread_cpu();
        // Every job submitted before this instant is in what the pass reads (the plugin keeps
        // counting its admissions made after it).
        let read_at_ms = period::now_ms();
        self.quiet.read(mark, started);
        let reading = self.reader.read_fresh(&self.config, now, mark.is_some())?;
        let read = started.elapsed();
        let work = self.plan_pass(reading, now, read_at_ms, &mut report);
        report.slurm_calls += mark_calls;
        let planned = started.elapsed();
        // The plan's actions never wait on the state file: a full disk or a read-only
        // directory leaves the plugin on its last state (stale after state_max_age), while
        // limits, priorities and reclaims go on (issue 25, finding 15).
        if let Err(e) = write_state(self.state_file(), &work.plan.state) {
            report.failures.push(e.to_string());
            report.state_write_failed = true;
        }
        report.state = Some(work.plan.state.clone());
        self.published = Some(work.plan.state.clone());
        report.duration = started.elapsed();
        self.quiet.cost(quiet::thread_cpu().saturating_sub(cpu));
        let times = trace::PassTimes {
            read,
            plan: planned - read,
            publish: report.duration - planned,
        };
        trace::pass_times(times, report.jobs, report.capacity, report.slurm_calls);
        self.hand_over(work, &mut report);
        if self.wait_for_actions {
            self.collect_actions(&mut report, true);
        }
        Ok(report)
    }

    /// Plan from what a pass read, and note in its report what it read: the plan, with what
    /// the pass adds to its state, and what the actions need with it.
    fn plan_pass(
        &mut self,
        reading: Reading,
        now: UnixSeconds,
        read_at_ms: i64,
        report: &mut PassReport,
    ) -> Snapshot {
        let Reading {
            capacity: cap,
            jobs,
            unreadable,
            addresses,
            leaders,
            slurm_calls,
            partitions: slurm_partitions,
            holds,
            shard_gpus,
        } = reading;
        let (unhold, run_ended_holds) = self.releasable_holds(&holds, now);
        self.note_idle_jobs(&jobs, now);
        let mut plan = self.planning.plan(&PassRead {
            jobs: &jobs,
            shard_gpus: &shard_gpus,
            cap: &cap,
            fairshare: &self.fairshare,
            idle: &self.idle_jobs,
            now,
            now_ms: read_at_ms,
        });
        plan.state.acted_at = self.acted_at;
        plan.state.read_at_ms = read_at_ms;
        plan.state.slurm_partitions = slurm_partitions;
        (plan.state.node_gpus, plan.state.node_gpus_by_type) = largest_nodes(&cap);
        plan.state.unsettled_gpus = cap.unsettled_total;
        plan.state.unsettled_gpus_by_type = cap.unsettled_by_type.clone();
        trace::debug_plan(&plan, &jobs, &self.config, &self.planned_limits);
        self.planned_limits.clone_from(&plan.gpu_limits);
        report.jobs = jobs.len();
        report.idle_now.clone_from(&self.idle_now);
        report.capacity = cap.total;
        report.capacity_by_type = cap.by_type;
        report.unreadable = unreadable.iter().map(ToString::to_string).collect();
        report.slurm_calls = slurm_calls;
        Snapshot {
            plan,
            jobs,
            addresses,
            leaders,
            unhold,
            run_ended_holds,
            pass: self.passes,
            idle_events: self.idle_policy.take_events(),
        }
    }

    /// Hand a pass's plan to the actuator, if it is idle, on a thread of its own that writes
    /// where the pass does, inside the span of the actions on that plan ([`act_span`]).
    fn hand_over(&mut self, work: Snapshot, report: &mut PassReport) {
        let Some(actuator) = self.actuator.take() else {
            // Busy: the idle policy's decisions wait for the next hand-over, and the pass
            // after the actions reads afresh to be acted on.
            self.idle_policy.put_back(work.idle_events);
            self.quiet.unacted = true;
            return;
        };
        self.quiet.unacted = false;
        let dispatch = tracing::dispatcher::get_default(Clone::clone);
        let spawned = std::thread::Builder::new()
            .name("governor-act".into())
            .spawn(move || {
                tracing::dispatcher::with_default(&dispatch, || {
                    act_span(work.pass).in_scope(|| actuator.act(work))
                })
            });
        match spawned {
            Ok(h) => self.acting = Some(h),
            // The actuator went with the closure that could not run: a new one takes over (it
            // sets every limit again).
            Err(e) => {
                report
                    .failures
                    .push(format!("cannot start the governor's actions: {e}"));
                self.actuator = Some(Actuator::new(self.config.clone(), (self.writer)()));
            }
        }
    }

    /// Read what a pass plans from ([`SlurmReader::read`]).
    pub fn read(&mut self, now: UnixSeconds) -> Result<Reading, GovernError> {
        self.reader.read(&self.config, now)
    }

    /// The governor's holds that may go, each with whether the requeue delay left by the
    /// requeue that came with it is lifted: those whose reason is gone (the account is a team
    /// again, or types are not governed), and apart, its holds against a second run (released
    /// only where the requeue check found them wrong).
    fn releasable_holds(&self, holds: &[GovernorHold], now: i64) -> (Vec<Unhold>, Vec<Unhold>) {
        let lift = |h: &GovernorHold| {
            h.begin
                .is_some_and(|b| b > now && b <= now + UNHOLD_LIFTS_WITHIN_SECS)
        };
        let (run_ended, others): (Vec<&GovernorHold>, Vec<&GovernorHold>) =
            holds.iter().partition(|h| h.run_ended);
        let unhold = others
            .into_iter()
            .filter(|h| {
                if h.untyped {
                    !self.config.is_typed()
                } else {
                    self.config.team(&h.account).is_some()
                }
            })
            .map(|h| (h.id, lift(h)))
            .collect();
        (
            unhold,
            run_ended.into_iter().map(|h| (h.id, lift(h))).collect(),
        )
    }

    /// What a pass would read and plan, without publishing or acting (`accountd govern
    /// --dry-run`).
    /// The third value says why fair-share factors (or GPU idleness) could not be read, if so
    /// (the plan then uses none).
    pub fn dry_run(&mut self) -> Result<(Reading, Plan, Option<String>), GovernError> {
        let now = period::now();
        let fairshare_error = self
            .refresh_fairshare(now)
            .err()
            .or_else(|| self.idleness.refresh_now(&self.config, now).err());
        let reading = self.read(now)?;
        self.note_idle_jobs(&reading.jobs, now);
        let plan = plan_once(
            &self.config,
            &PassRead {
                jobs: &reading.jobs,
                shard_gpus: &reading.shard_gpus,
                cap: &reading.capacity,
                fairshare: &self.fairshare,
                idle: &self.idle_jobs,
                now,
                now_ms: period::now_ms(),
            },
        );
        Ok((reading, plan, fairshare_error))
    }

    /// The running jobs idle for the whole idle window (for the metrics), the idle policy's
    /// decisions, and the jobs rule 3 takes first: those idle for the window where the
    /// configuration orders them first, and those the policy acted on with "reclaim-first".
    /// Said when the set changes, with the window.
    fn note_idle_jobs(&mut self, jobs: &[ClusterJob], now: UnixSeconds) {
        let window = self.config.governance.idle_window;
        let idle_now = self.idleness.idle(jobs, window, now);
        self.idle_policy
            .decide(&self.config, jobs, &self.idleness, now);
        let mut idle = if self.config.governance.idle_first_reclaim {
            idle_now.clone()
        } else {
            std::collections::BTreeSet::new()
        };
        idle.extend(self.idle_policy.reclaim_first(&self.config));
        if idle != self.idle_jobs && !idle.is_empty() {
            tracing::info!(
                jobs = ?idle,
                window = %teamshare_config::format_duration(window),
                "idle for the whole idle window (or acted on by the idle policy), below the idle threshold in every sample: reclaimed first"
            );
        }
        self.idle_jobs = idle;
        let mut by_team: BTreeMap<String, (u32, u32)> = BTreeMap::new();
        for j in jobs.iter().filter(|j| idle_now.contains(&j.id)) {
            let t = by_team.entry(j.team.clone()).or_default();
            t.0 += 1;
            t.1 = t.1.saturating_add(j.gpus);
        }
        self.idle_now = by_team;
    }

    /// Take what the actions under way did, if they have ended (or wait for them).
    fn collect_actions(&mut self, report: &mut PassReport, wait: bool) {
        let done = self
            .acting
            .as_ref()
            .is_some_and(|h| wait || h.is_finished());
        if !done {
            return;
        }
        let Some(handle) = self.acting.take() else {
            return;
        };
        match handle.join() {
            Ok((actuator, acted)) => {
                self.actuator = Some(actuator);
                if let Some(a) = acted.acted {
                    self.acted_at = self.acted_at.max(a.plan_generated_at);
                }
                report.absorb(acted);
            }
            Err(_) => {
                report
                    .failures
                    .push("the governor's actions stopped with an internal error".into());
                self.actuator = Some(Actuator::new(self.config.clone(), (self.writer)()));
            }
        }
    }
}

impl Governor {
    /// Wait for the actions under way and say what they did, so that a governor replaced (new
    /// rules) or stopped reports every requeue it made: none is done and left unlogged.
    pub fn settle(&mut self) -> Option<PassReport> {
        self.acting.as_ref()?;
        let mut report = PassReport {
            settled: true,
            ..PassReport::default()
        };
        self.collect_actions(&mut report, true);
        Some(report)
    }
}

impl Drop for Governor {
    /// A governor replaced (new rules) lets its actions end first, so that an old limit never
    /// lands after the new governor's.
    fn drop(&mut self) {
        if let Some(h) = self.acting.take() {
            let _ = h.join();
        }
    }
}

/// How often a governor loop passes, and whether it stops after one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cadence {
    /// From the start of one pass to the start of the next.
    pub interval: Duration,
    /// One pass, returned from once its plan has been acted on (`--once`).
    pub once: bool,
}

/// The one governor loop, of `accountd govern` and of `accountd run`'s governor thread: a pass
/// every `cadence.interval` (one, with `cadence.once`), what each pass did handed to `passed`,
/// which may end the loop with a value (returned). What differs between the two is in the
/// arguments: `replace`, asked before each pass, may hand over a new governor (the daemon's
/// reloaded configuration); `passed` logs the pass, and the daemon's feeds its metrics and the
/// capacity samples; `sleep_until` waits for an instant (the next pass; the first is due at
/// once) and says false when the loop is to stop (the daemon's stop flag). `passed` also gets,
/// marked [`PassReport::settled`], what a replaced or stopped governor's last actions did.
pub fn run_loop<B>(
    mut governor: Governor,
    cadence: Cadence,
    mut replace: impl FnMut() -> Option<Governor>,
    mut passed: impl FnMut(Result<PassReport, GovernError>) -> std::ops::ControlFlow<B>,
    mut sleep_until: impl FnMut(Instant) -> bool,
) -> Option<B> {
    governor.wait_for_actions = cadence.once;
    let mut next = Instant::now();
    while sleep_until(next) {
        let started = Instant::now();
        if let Some(new) = replace() {
            // The old rules' actions end first, and what they did is reported.
            if let Some(settled) = governor.settle() {
                if let std::ops::ControlFlow::Break(b) = passed(Ok(settled)) {
                    return Some(b);
                }
            }
            let (passes, limits) = (
                governor.passes,
                std::mem::take(&mut governor.planned_limits),
            );
            governor = new;
            governor.wait_for_actions = cadence.once;
            // The passes go on being numbered, and the limits said moved from the last plan's.
            governor.passes = passes;
            governor.planned_limits = limits;
        }
        // The pass's span covers what `passed` logs of it too. `pass` counts it.
        let span = pass_span(governor.passes + 1);
        if let std::ops::ControlFlow::Break(b) = span.in_scope(|| passed(governor.pass())) {
            return Some(b);
        }
        if cadence.once {
            break;
        }
        next = started + cadence.interval;
    }
    // Stopped: the last plan's actions end and are reported before the loop returns.
    match governor.settle().map(|r| passed(Ok(r))) {
        Some(std::ops::ControlFlow::Break(b)) => Some(b),
        _ => None,
    }
}

/// Publish atomically: write a temporary file beside it, then rename over it.
pub fn write_state(path: &Path, state: &PublishedState) -> Result<(), GovernError> {
    let err = |source| GovernError::StateFile {
        path: path.to_path_buf(),
        source,
    };
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(err)?;
    }
    let tmp = path.with_extension("json.tmp");
    // A write cut short (a full disk) leaves no half file behind.
    let written = std::fs::write(&tmp, state.to_json()).and_then(|()| std::fs::rename(&tmp, path));
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written.map_err(err)
}

#[cfg(test)]
mod tests;
