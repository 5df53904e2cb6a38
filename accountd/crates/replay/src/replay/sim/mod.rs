//! The simulation: Slurm's scheduler as teamshare configures it, driven by the governor's own
//! [`governance::plan`] at every pass.
//!
//! What it models, each an assumption stated in docs/design/replay.md and tested:
//! - **The governor.** A pass runs whenever something changed (a submission, an end, a
//!   preemption, a job becoming eligible, a drain) while jobs wait, one more a pass interval
//!   after a pass that let jobs start, and at the instants a rule depends on time (a victim's
//!   `min_runtime_before_reclaim` ending, the reclaim fallback's second). Each pass is
//!   [`governance::plan`] on the jobs as squeue would show them: the priorities it sets, the
//!   team limits (`GrpTRES`), parking and release of non-preemptible jobs, and the requeues it
//!   makes itself (reclaim fallback, displacement by a higher class, violations).
//! - **Submission.** The plugin's own checks ([`submit::screen`](teamshare_policy::submit::screen)) and the cluster's size: a job
//!   the candidate would refuse is counted as rejected and never queued.
//! - **Slurm's scheduler.** Pending jobs in priority order (equal priorities: oldest submission,
//!   then id), each started where it fits if its team's limit allows; a job that does not fit
//!   may preempt running jobs of lower priority that have run `min_runtime_before_reclaim`
//!   (preempt/qos with `PreemptMode=WITHIN` and `PreemptExemptTime`), on the node where the
//!   fewest lowest-priority ones make room; else it gets a reservation from the running jobs'
//!   time limits (backfill plans with limits, not run times) and a lower job starts only if it
//!   fits now and either ends by its limit before the reservation or uses none of its nodes.
//! - **Placement.** Nodes with GPUs of one type; a job's GPUs spread evenly over the nodes it
//!   asks for; whole-node jobs take every GPU of their nodes; typed jobs only on their type.
//! - **Preemption's cost.** A preempted job keeps its GPUs for `reclaim_grace`, then is
//!   requeued and may start again after the requeue delay; it restarts from zero unless its
//!   class or account checkpoints (then it loses at most the interval). The lost work is run
//!   again (it is demand).
//! - **Drains.** A drained node takes no new job; its running jobs finish.
//! - **GPU idleness** (issue 29, `idleness`): where the trace has samples, each job's are
//!   replayed from its simulated start; the governor orders victims by them where the candidate
//!   says `idle_first_reclaim`, and a preempted job's idle time is not counted as lost work.
//! - **Determinism.** Events at one instant are applied in a fixed order (ends, then grace
//!   ends, drains, submissions, eligibility, cancellations), and nothing depends on a hash.

mod backfill;
mod events;
mod governor;
mod idleness;
mod placement;
mod preemption;
mod queue;
mod runs;
#[cfg(test)]
mod tests;

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap, HashMap};

use teamshare_config::Config;
use teamshare_policy::governance::{self, Planner};
use teamshare_policy::priority::{encode, BORROW_BASE};

use super::activity::Series;
use super::{Cluster, JobOutcome, Outcome, Secs, SimParams, Trace, TraceJob};
use events::{Event, Kind, RequestKind};
use governor::NodeView;
use placement::{FreeIndex, Node};
use queue::{QueueKey, SchedQueue, Ticket};

/// Replay `trace` under `config`. `progress` is told the simulated time now and then.
pub fn simulate(
    trace: &Trace,
    config: &Config,
    params: &SimParams,
    progress: &mut dyn FnMut(Secs),
) -> Outcome {
    let mut sim = Sim::new(trace, config, params);
    sim.run(progress);
    sim.finish()
}

/// The usable GPUs over time as steps `(from, gpus)`, starting at `since` with every node of
/// `total` GPUs and each drain taking its node's GPUs away while it lasts.
pub fn capacity_steps(cluster: &Cluster, since: Secs, total: u32) -> Vec<(Secs, u32)> {
    let mut changes: Vec<(Secs, i64)> = Vec::new();
    for d in &cluster.drains {
        let gpus = cluster
            .nodes
            .iter()
            .find(|n| n.name == d.node)
            .map_or(0, |n| i64::from(n.gpus));
        changes.push((d.since.max(since), -gpus));
        changes.push((d.until.max(since), gpus));
    }
    changes.sort_unstable();
    let mut steps = vec![(since, total)];
    let mut now = i64::from(total);
    for (t, delta) in changes {
        now += delta;
        let gpus = u32::try_from(now.max(0)).unwrap_or(0);
        match steps.last_mut() {
            Some(last) if last.0 == t => last.1 = gpus,
            _ => steps.push((t, gpus)),
        }
    }
    steps
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Not submitted yet, or refused.
    Future,
    Pending,
    Running,
    /// Preempted: holds its GPUs until the grace time ends.
    Grace,
    Done,
}

struct Job {
    state: State,
    team: Option<usize>,
    gpus: u32,
    nodes: u32,
    exclusive: bool,
    gpu_type: Option<String>,
    time_limit: Secs,
    class_idx: u8,
    /// Work still to do, seconds.
    remaining: Secs,
    /// Work done and saved before the current run (checkpoints), seconds: where the run starts
    /// in the job's samples.
    done: Secs,
    eligible_at: Secs,
    priority: u32,
    parked: bool,
    /// Preempted others for itself: waits for their grace to end before preempting again.
    awaiting_until: Secs,
    run_start: Secs,
    run_borrowed: bool,
    serial: u32,
    /// (node, GPUs) held.
    alloc: Vec<(usize, u32)>,
    /// Shown to the governor (squeue lists it): pending and eligible, or running.
    shown: bool,
    /// In the scheduler's queue (shown, pending, not parked).
    queued: bool,
    /// Its key in [`Sim::ends`] while it runs or is in its grace time.
    end_key: Option<Secs>,
    checkpoint: Option<Secs>,
}

struct Sim<'a> {
    trace: &'a Trace,
    config: &'a Config,
    params: &'a SimParams,
    typed: bool,
    grace: Secs,
    exempt: Secs,
    requeue_delay: Secs,
    nodes: Vec<Node>,
    free: FreeIndex,
    jobs: Vec<Job>,
    out: Vec<JobOutcome>,
    /// What squeue would show the governor (pending eligible and running jobs), and the
    /// governor's plan over them, kept between passes.
    planner: Planner<'a>,
    /// The teams' places in the configuration, in the order of their names (a plan's limits).
    by_name: Vec<usize>,
    /// Shown pending jobs that are not parked, in Slurm's order.
    queue: SchedQueue,
    /// While a scheduling pass walks the queue (taken out of `queue`), the changes to it,
    /// made when it is back: jobs started leave it, jobs requeued without delay join it
    /// (the pass's order was taken when it began).
    walking: bool,
    deferred: Vec<(QueueKey, Option<Ticket>)>,
    /// Running jobs (not in their grace time) by priority: preemption candidates.
    running_prio: BTreeSet<(u32, usize)>,
    /// Running jobs by the end of their time limit, and preempted ones by the end of their
    /// grace: when backfill expects their GPUs back.
    ends: BTreeSet<(Secs, usize)>,
    events: BinaryHeap<Reverse<Event>>,
    seq: u64,
    next_submit: usize,
    now: Secs,
    /// GPUs held per team (running and in grace), and per (team, type) when typed.
    used: Vec<u32>,
    used_typed: BTreeMap<(usize, String), u32>,
    limits: Vec<u32>,
    type_limits: BTreeMap<(usize, String), u32>,
    fairshare: BTreeMap<String, f64>,
    /// Each team's decayed GPU usage (fair-share), by its place in the configuration.
    decayed: Vec<f64>,
    last_decay: Secs,
    last_fairshare: Secs,
    dirty: bool,
    pending: usize,
    passes: u64,
    last_pass: Secs,
    /// The usable nodes as the governor reads them; rebuilt after a drain.
    node_view: Option<NodeView>,
    /// Pending jobs the last pass ranked in quota.
    in_quota_waiting: bool,
    /// The last scheduling pass passed over jobs for their team's limit.
    limit_blocked: bool,
    /// Counts the changes to what a scheduling pass reads besides its queue (free GPUs, the
    /// teams' usage and limits, running jobs' priorities and ends, preemptors' waits).
    changes: u64,
    /// The changes counted (here and in the queue) when a scheduling pass last ended having
    /// started nothing and with no job that might preempt: until they move, a pass again would
    /// do nothing again.
    quiet_at: Option<(u64, u64)>,
    /// The submit-time checks' answers, per kind of request (the same for every job alike).
    accepted: HashMap<RequestKind, bool>,
    /// Per job, its GPU samples ([`Trace::activity`]); whether any job has some.
    activity: Vec<Option<&'a Series>>,
    sampled: bool,
    idleness: idleness::Idleness,
}

impl<'a> Sim<'a> {
    fn new(trace: &'a Trace, config: &'a Config, params: &'a SimParams) -> Sim<'a> {
        let (nodes, free) = Self::nodes_of(trace);
        let reclaim_cancels =
            config.governance.reclaim_mode == teamshare_config::ReclaimMode::Cancel;
        let mut sim = Sim {
            trace,
            config,
            params,
            typed: config.is_typed(),
            grace: secs(config.governance.reclaim_grace),
            exempt: secs(config.governance.min_runtime_before_reclaim),
            // A cancelled job is resubmitted by its owner at once (an assumption).
            requeue_delay: if reclaim_cancels {
                0
            } else {
                params.requeue_delay
            },
            nodes,
            free,
            jobs: Vec::with_capacity(trace.jobs.len()),
            out: Vec::with_capacity(trace.jobs.len()),
            planner: Planner::new(config),
            by_name: {
                let mut places: Vec<usize> = (0..config.teams.len()).collect();
                places.sort_by(|a, b| config.teams[*a].name.cmp(&config.teams[*b].name));
                places
            },
            queue: SchedQueue::new(config.teams.len()),
            walking: false,
            deferred: Vec::new(),
            running_prio: BTreeSet::new(),
            ends: BTreeSet::new(),
            events: BinaryHeap::new(),
            seq: 0,
            next_submit: 0,
            now: trace.since,
            used: vec![0; config.teams.len()],
            used_typed: BTreeMap::new(),
            limits: config.teams.iter().map(|t| t.quota.total).collect(),
            type_limits: BTreeMap::new(),
            fairshare: BTreeMap::new(),
            decayed: Vec::new(),
            last_decay: trace.since,
            last_fairshare: Secs::MIN,
            dirty: false,
            pending: 0,
            passes: 0,
            last_pass: Secs::MIN,
            node_view: None,
            in_quota_waiting: false,
            limit_blocked: false,
            changes: 0,
            quiet_at: None,
            accepted: HashMap::new(),
            activity: Vec::with_capacity(trace.jobs.len()),
            sampled: false,
            idleness: idleness::Idleness::default(),
        };
        sim.load();
        sim
    }

    /// The trace's nodes, all free, and the index of their free GPUs.
    fn nodes_of(trace: &Trace) -> (Vec<Node>, FreeIndex) {
        let mut nodes: Vec<Node> = trace
            .cluster
            .nodes
            .iter()
            .map(|n| Node {
                name: n.name.clone(),
                gpus: n.gpus,
                gpu_type: n.gpu_type.clone(),
                kind: 0,
                free: n.gpus,
                drained: false,
            })
            .collect();
        let mut free = FreeIndex::new(&nodes);
        for (i, n) in nodes.iter_mut().enumerate() {
            n.kind = free.kind_of(&n.gpu_type);
            free.enter(i, n);
        }
        (nodes, free)
    }

    /// The teams' type limits, the trace's jobs and the drains' events, into a new simulation.
    fn load(&mut self) {
        let (config, trace) = (self.config, self.trace);
        for (i, t) in config.teams.iter().enumerate() {
            for (k, q) in &t.quota.by_type {
                self.type_limits.insert((i, k.clone()), *q);
            }
        }
        for (i, j) in trace.jobs.iter().enumerate() {
            let job = self.job_of(j);
            self.jobs.push(job);
            let series = trace.activity.as_ref().and_then(|a| a.jobs.get(&j.id));
            self.sampled |= series.is_some();
            self.activity.push(series);
            self.out.push(JobOutcome {
                job: i,
                ..JobOutcome::default()
            });
        }
        for d in &trace.cluster.drains {
            if let Some(n) = self.nodes.iter().position(|n| n.name == d.node) {
                if d.until > d.since {
                    self.push(d.since, Kind::Drain, n, 0);
                    self.push(d.until, Kind::Undrain, n, 0);
                }
            }
        }
    }

    fn job_of(&self, j: &TraceJob) -> Job {
        let team = self.config.teams.iter().position(|t| t.name == j.team);
        let class = j
            .class
            .as_deref()
            .and_then(|c| governance::class_index(self.config, c));
        let checkpoint = [j.class.as_deref(), Some(j.team.as_str())]
            .into_iter()
            .flatten()
            .find_map(|name| self.params.checkpoint.get(name).copied());
        Job {
            state: State::Future,
            team,
            gpus: j.gpus,
            nodes: j.nodes.max(1),
            exclusive: j.exclusive,
            gpu_type: j.gpu_type.clone(),
            time_limit: j.time_limit.max(1),
            class_idx: class.unwrap_or(0),
            remaining: j.work.max(0),
            done: 0,
            eligible_at: j.eligible.max(j.submit),
            priority: encode(BORROW_BASE, class.unwrap_or(0)),
            parked: false,
            awaiting_until: Secs::MIN,
            run_start: 0,
            run_borrowed: false,
            serial: 0,
            alloc: Vec::new(),
            shown: false,
            queued: false,
            end_key: None,
            checkpoint,
        }
    }
}

fn secs(d: std::time::Duration) -> Secs {
    Secs::try_from(d.as_secs()).unwrap_or(Secs::MAX)
}

/// The id the governor knows trace job `j` by.
fn row_id(j: usize) -> u64 {
    j as u64 + 1
}

/// Whether a job asking for `want` may run on a node of `has`.
fn type_matches(want: &Option<String>, has: &Option<String>) -> bool {
    match want {
        None => true,
        Some(k) => has.as_deref() == Some(k.as_str()),
    }
}
