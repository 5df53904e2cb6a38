//! `accountd replay`: a period of job history simulated under candidate configurations
//! (issue 13).
//!
//! The parts:
//! - this module: the trace (what was asked for and what happened), the candidates and the
//!   simulation's outcome, shared by all the others;
//! - `history`: a trace from accountd's database (job runs with requeues folded into their
//!   job, jobs that never started, capacity samples); `activity`: its jobs' GPU samples;
//! - `swf`: a trace from a Standard Workload Format file and a team mapping;
//! - `sim`: the discrete-event simulation of Slurm's scheduler (priority order, association
//!   limits, node placement, backfill by time limits, preemption with grace, requeue delay and
//!   checkpoints) driven by the governor's own `plan()` (plugin/policy) at every pass;
//! - `metrics`: an outcome as per-team figures (waits, GPU-hours with the accounting model of
//!   DESIGN §5, preemptions, cost), the comparison against "today" and the calibration;
//!   `idle_first`: the work idle-first reclaim would have saved (issue 29);
//! - `render`: table, CSV, JSON and HTML;
//! - `study`: the calibration, the candidates and the capacity curve simulated side by side,
//!   with the baseline chosen and the figures compared: what `accountd replay` prints.

use std::collections::BTreeMap;
use std::sync::Arc;

pub mod activity;
pub mod calibrate;
pub mod curve;
pub mod history;
pub mod idle;
pub mod idle_first;
pub mod metrics;
pub mod render;
pub mod sim;
pub mod study;
pub mod swf;

/// Seconds since the Unix epoch, UTC.
pub type Secs = i64;

/// One job as the trace knows it: what it asked for, and what happened to it.
#[derive(Debug, Clone, PartialEq)]
pub struct TraceJob {
    /// The job's id in the source (JobIDRaw of its first run; SWF job number).
    pub id: u64,
    /// The team (Slurm account; for SWF, the mapped group or user).
    pub team: String,
    /// The priority class it asked for (its QOS in sacct, the SWF queue mapped), if any.
    pub class: Option<String>,
    pub submit: Secs,
    /// When it could first start (begin time, dependency): at or after `submit`.
    pub eligible: Secs,
    /// GPUs in all (over all its nodes).
    pub gpus: u32,
    pub gpu_type: Option<String>,
    /// Nodes it asked for (at least 1); its GPUs are spread evenly over them.
    pub nodes: u32,
    /// Whole nodes (`--exclusive`): it holds every GPU of its nodes.
    pub exclusive: bool,
    /// The time limit backfill plans with (seconds, > 0).
    pub time_limit: Secs,
    /// The run time it needs to finish (seconds): its last run's elapsed time. A job that
    /// never started needs its time limit (an assumption: it is stated in the report).
    pub work: Secs,
    /// When its owner gave up on it while it waited (cancelled before it ever started);
    /// the simulation cancels it then if it has not started by then.
    pub cancelled_pending_at: Option<Secs>,
    pub observed: Observed,
}

/// What really happened to a job (empty for SWF traces beyond its one run).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Observed {
    /// Its runs in order, each `[start, end)` (end `None`: still running at the trace's end).
    pub runs: Vec<(Secs, Option<Secs>)>,
    /// Runs that ended by preemption or requeue.
    pub preemptions: u32,
    /// Held by a user or an administrator at some point (calibration says so when waits do
    /// not fit).
    pub held: bool,
    /// The history does not say how long it waited (an SWF wait of -1): its run, where the
    /// run time is known, is placed at its submission so that its GPU-hours count, and its
    /// wait is in no figure of the history's nor of the calibration's.
    pub wait_unknown: bool,
}

/// A node of the simulated cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeSpec {
    pub name: String,
    pub gpus: u32,
    /// Its GPU type (`None`: untyped).
    pub gpu_type: Option<String>,
}

/// The cluster the trace ran on: its nodes, and when some of them were not usable (drain,
/// down, maintenance): from `since` to `until` the node takes no new job (running jobs finish:
/// Slurm's drain).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Cluster {
    pub nodes: Vec<NodeSpec>,
    pub drains: Vec<Drain>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Drain {
    pub node: String,
    pub since: Secs,
    pub until: Secs,
}

/// A history to replay: the jobs (ordered by submit, then id) and the cluster, over
/// `[since, until)`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Trace {
    pub jobs: Vec<TraceJob>,
    pub cluster: Cluster,
    pub since: Secs,
    pub until: Secs,
    /// Where it came from (`accountd database /var/lib/...`, `SWF file x.swf`).
    pub source: String,
    /// Its jobs' GPU samples ([`activity`]); `None`: the history has none (SWF, or no sampler
    /// ran), and no job's idleness is known. Shared, not copied, by the traces made of it.
    pub activity: Option<Arc<activity::Activity>>,
}

/// A configuration to replay the trace under.
#[derive(Debug, Clone)]
pub enum Candidate {
    /// What happened (no simulation).
    AsToday,
    /// Each team capped at its quota, nothing lent (the current configuration's quotas with
    /// every borrow limit 0).
    Siloed,
    /// A teamshare.toml.
    Config {
        name: String,
        config: Box<teamshare_config::Config>,
    },
}

/// The simulation's assumptions that are not in teamshare.toml.
#[derive(Debug, Clone, PartialEq)]
pub struct SimParams {
    /// How long a requeued job waits before it may start again (Slurm: BeginTime = now + 121 s
    /// after a requeue, which the governor lifts after about 3 s:
    /// [`crate::requeue_delay::GOVERNED_DELAY_SECS`]; 0 with `reclaim_mode = "cancel"`, where
    /// the owner resubmits at once).
    pub requeue_delay: Secs,
    /// Checkpointing classes or accounts and their interval: a preempted job of one loses at
    /// most the interval of work (else all of it).
    pub checkpoint: BTreeMap<String, Secs>,
    /// How often the governor passes (it runs every 0.5-1 s; a pass is simulated only when
    /// something changed since the last one).
    pub pass_interval: Secs,
}

impl Default for SimParams {
    fn default() -> Self {
        SimParams {
            requeue_delay: crate::requeue_delay::GOVERNED_DELAY_SECS,
            checkpoint: BTreeMap::new(),
            pass_interval: 1,
        }
    }
}

/// One run of a simulated job: `[start, end)` on `gpus` GPUs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SimRun {
    pub start: Secs,
    pub end: Secs,
    /// Ended by preemption (reclaim, displacement or a violation requeued).
    pub preempted: bool,
    /// Started beyond its team's quota (borrowed when it started).
    pub borrowed: bool,
}

/// What happened to one job in a simulation (or, for "as today", in reality).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct JobOutcome {
    /// Index into [`Trace::jobs`].
    pub job: usize,
    pub runs: Vec<SimRun>,
    /// Never queued: the candidate's submit-time checks refuse it (more GPUs than quota +
    /// borrow limit, or than the cluster; a team the candidate does not know).
    pub rejected: bool,
    /// Cancelled while it waited (its owner gave up, as observed).
    pub cancelled: bool,
    /// Work lost to preemptions, in GPU-seconds.
    pub lost_gpu_secs: i64,
    /// Of it, the GPU-time the job's samples show idle, in GPU-milliseconds: work that was not
    /// done, so not lost (0 where no sample says so, and for the observed history).
    pub lost_idle_gpu_ms: i64,
    /// When its GPUs fitted its team's unused quota while it waited, the first instant they
    /// did (for time-to-start of in-quota jobs and owner reclaim latency).
    pub in_quota_since: Option<Secs>,
    /// Its wait is not known ([`Observed::wait_unknown`]): counted in
    /// [`metrics::TeamFigures::wait_unknown`], in no wait. Only "as today" and the
    /// calibration's view of a simulation ([`without_unknown_waits`]) set it.
    pub wait_unknown: bool,
}

impl JobOutcome {
    pub fn first_start(&self) -> Option<Secs> {
        self.runs.first().map(|r| r.start)
    }
    pub fn preemptions(&self) -> u32 {
        u32::try_from(self.runs.iter().filter(|r| r.preempted).count()).unwrap_or(u32::MAX)
    }
}

/// A candidate's simulation (or the observed history).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Outcome {
    /// One per trace job, in trace order.
    pub jobs: Vec<JobOutcome>,
    /// Governor passes simulated (for the benchmark's notes).
    pub passes: u64,
    /// The usable capacity over time, as steps `(from, gpus)` (drains applied).
    pub capacity: Vec<(Secs, u32)>,
}

/// "As today": the observed history as an outcome (no simulation). A job whose run was
/// preempted has several runs; the work lost is what its preempted runs held.
pub fn observed(trace: &Trace) -> Outcome {
    let jobs = trace
        .jobs
        .iter()
        .enumerate()
        .map(|(i, j)| {
            let n = j.observed.runs.len();
            let runs: Vec<SimRun> = j
                .observed
                .runs
                .iter()
                .enumerate()
                .map(|(k, (start, end))| SimRun {
                    start: *start,
                    end: end.unwrap_or(trace.until).max(*start),
                    preempted: k + 1 < n,
                    borrowed: false,
                })
                .collect();
            let lost = runs
                .iter()
                .filter(|r| r.preempted)
                .map(|r| (r.end - r.start) * i64::from(j.gpus))
                .sum();
            JobOutcome {
                job: i,
                cancelled: runs.is_empty() && j.cancelled_pending_at.is_some(),
                runs,
                rejected: false,
                lost_gpu_secs: lost,
                lost_idle_gpu_ms: 0,
                in_quota_since: None,
                wait_unknown: j.observed.wait_unknown,
            }
        })
        .collect();
    let total: u32 = trace.cluster.nodes.iter().map(|n| n.gpus).sum();
    Outcome {
        jobs,
        passes: 0,
        capacity: sim::capacity_steps(&trace.cluster, trace.since, total),
    }
}

/// The "plain Slurm" candidate of a configuration: what the same cluster does without
/// teamshare, one pool first come first served. Every team's quota is 0 with no borrow or
/// lend limit (every GPU is the unowned pool's, lent to whoever waits longest:
/// `idle_sharing = "fifo"`), and no priority class (no class outranks or displaces another):
/// nothing is reserved, reclaimed or refused but what the cluster cannot hold.
pub fn plain_slurm(config: &teamshare_config::Config) -> teamshare_config::Config {
    let mut c = config.clone();
    c.cluster.idle_sharing = teamshare_config::IdleSharing::Fifo;
    c.priority_classes.clear();
    c.governance.preempt_within_team = teamshare_config::WithinTeam::Never;
    for t in &mut c.teams {
        t.quota = teamshare_config::Quota::default();
        t.borrow_limit = None;
        t.borrow_by_type = None;
        t.lend_limit = 0;
        t.lend_by_type = None;
    }
    c
}

/// The "siloed" candidate of a configuration: every team capped at its quota (borrow limit
/// 0, per type too), so nothing is lent.
pub fn siloed(config: &teamshare_config::Config) -> teamshare_config::Config {
    let mut c = config.clone();
    for t in &mut c.teams {
        t.borrow_limit = Some(0);
        if let Some(by_type) = &mut t.borrow_by_type {
            for v in by_type.values_mut() {
                *v = 0;
            }
        }
    }
    c
}

/// The teams `trace`'s jobs belong to that `config` does not have, sorted, each once. The
/// plugin refuses every job of such a team, so a team map that names one would replay a
/// candidate that rejects all of that team's work: the caller refuses the input instead.
pub fn teams_not_configured(trace: &Trace, config: &teamshare_config::Config) -> Vec<String> {
    let mut missing: Vec<String> = trace
        .jobs
        .iter()
        .filter(|j| config.team(&j.team).is_none())
        .map(|j| j.team.clone())
        .collect();
    missing.sort_unstable();
    missing.dedup();
    missing
}

/// `outcome` with the waits the history does not know left out, as they are left out of
/// "as today": what the calibration compares, like with like.
pub fn without_unknown_waits(trace: &Trace, outcome: &Outcome) -> Outcome {
    let mut o = outcome.clone();
    for j in &mut o.jobs {
        j.wait_unknown = trace
            .jobs
            .get(j.job)
            .is_some_and(|t| t.observed.wait_unknown);
    }
    o
}
