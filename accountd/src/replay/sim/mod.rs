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
//! - **Submission.** The plugin's own checks ([`submit::screen`]) and the cluster's size: a job
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
//! - **Determinism.** Events at one instant are applied in a fixed order (ends, then grace
//!   ends, drains, submissions, eligibility, cancellations), and nothing depends on a hash.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap, HashMap};

use teamshare_config::{Config, IdleSharing};
use teamshare_policy::governance::{self, ClusterJob, GovernInput, PassInput, Phase, Planner};
use teamshare_policy::priority::{self, encode, BORROW_BASE, VICTIM_BASE};
use teamshare_policy::submit::{self, GpuAsk, SubmitRequest};

use super::{Cluster, JobOutcome, Outcome, Secs, SimParams, SimRun, Trace, TraceJob};
use crate::model::fairshare;

/// How often the fair-share factors are recomputed (Slurm's `PriorityCalcPeriod` default).
const FAIRSHARE_PERIOD: Secs = 300;
/// How many blocked jobs may hold a backfill reservation at once.
const MAX_RESERVATIONS: usize = 4;
/// How many pending jobs one scheduling pass looks at (Slurm's `bf_max_job_test` default).
const MAX_JOBS_TESTED: usize = 500;
/// After how many jobs in a row passed over for their team's limit a scheduling pass looks
/// for the next job of a team with room in the queue's indexes instead of job by job.
const SKIP_AFTER: usize = 16;
/// How often progress is reported, in simulated seconds.
const PROGRESS_EVERY: Secs = 86_400;

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

/// What happens at an instant; the order of the variants is the order events of one instant
/// are applied in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Kind {
    End,
    GraceEnd,
    Drain,
    Undrain,
    Eligible,
    Cancel,
    Wake,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Event {
    at: Secs,
    kind: Kind,
    seq: u64,
    /// A job's index, or a node's for drains.
    target: usize,
    /// The job's run the event belongs to (a stale end is ignored).
    serial: u32,
}

struct Node {
    name: String,
    gpus: u32,
    gpu_type: Option<String>,
    /// Its place in [`FreeIndex::kinds`].
    kind: usize,
    free: u32,
    drained: bool,
}

/// The free GPUs of usable nodes per GPU type, kept as nodes fill, empty, drain and return,
/// so that a scheduling pass asks "could it fit anywhere" without a walk over the nodes.
struct FreeIndex {
    /// The nodes' GPU types (`None`: untyped), in order.
    kinds: Vec<Option<String>>,
    /// Per kind: free GPUs on usable nodes.
    free: Vec<u32>,
    /// Per kind: how many usable nodes have exactly `i` GPUs free, and which.
    by_free: Vec<Vec<u32>>,
    at_free: Vec<Vec<BTreeSet<usize>>>,
    /// Per kind: usable nodes with every GPU free.
    whole: Vec<u32>,
    /// Free GPUs on usable nodes of every kind.
    total: u32,
}

impl FreeIndex {
    fn new(nodes: &[Node]) -> FreeIndex {
        let kinds: Vec<Option<String>> = nodes
            .iter()
            .map(|n| n.gpu_type.clone())
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .collect();
        let mut by_free = vec![Vec::new(); kinds.len()];
        for n in nodes {
            if let Some(k) = kinds.iter().position(|k| *k == n.gpu_type) {
                let len = usize::try_from(n.gpus)
                    .unwrap_or(usize::MAX)
                    .saturating_add(1);
                if by_free[k].len() < len {
                    by_free[k].resize(len, 0);
                }
            }
        }
        FreeIndex {
            free: vec![0; kinds.len()],
            whole: vec![0; kinds.len()],
            kinds,
            at_free: by_free
                .iter()
                .map(|c| vec![BTreeSet::new(); c.len()])
                .collect(),
            by_free,
            total: 0,
        }
    }

    fn kind_of(&self, gpu_type: &Option<String>) -> usize {
        self.kinds.iter().position(|k| k == gpu_type).unwrap_or(0)
    }

    /// Node `i` counts again (it is usable).
    fn enter(&mut self, i: usize, n: &Node) {
        if n.drained {
            return;
        }
        self.free[n.kind] += n.free;
        self.total += n.free;
        self.by_free[n.kind][n.free as usize] += 1;
        self.at_free[n.kind][n.free as usize].insert(i);
        self.whole[n.kind] += u32::from(n.free == n.gpus);
    }

    /// Node `i` stops counting (before its free GPUs change, or it drains).
    fn leave(&mut self, i: usize, n: &Node) {
        if n.drained {
            return;
        }
        self.free[n.kind] -= n.free;
        self.total -= n.free;
        self.by_free[n.kind][n.free as usize] -= 1;
        self.at_free[n.kind][n.free as usize].remove(&i);
        self.whole[n.kind] -= u32::from(n.free == n.gpus);
    }

    /// Best fit for `gpus` on one node of the kinds `want` may use: the node with the fewest
    /// GPUs left over, then the lowest index, among those `usable` allows.
    /// `level_ends`, when given, is per kind and number of free GPUs the latest instant a
    /// node there may be used until ([`FreeIndex::level_ends`]); `end_by` is the job's.
    fn best_fit(
        &self,
        want: &Option<String>,
        gpus: u32,
        usable: impl Fn(usize) -> bool,
        level_ends: Option<(&[Vec<Secs>], Secs)>,
    ) -> Option<(u32, usize)> {
        let from = usize::try_from(gpus).ok()?;
        let most = self.by_free.iter().map(Vec::len).max().unwrap_or(0);
        for f in from..most {
            let mut best: Option<usize> = None;
            for k in self.matching(want) {
                if self.by_free[k].get(f).is_none_or(|c| *c == 0) {
                    continue;
                }
                // No node of this level outlasts the reservations as long as the job.
                if level_ends.is_some_and(|(ends, end_by)| ends[k][f] < end_by) {
                    continue;
                }
                if let Some(&i) = self.at_free[k][f].iter().find(|&&i| usable(i)) {
                    best = Some(best.map_or(i, |b| b.min(i)));
                }
            }
            if let Some(i) = best {
                return Some((u32::try_from(f).ok()? - gpus, i));
            }
        }
        None
    }

    /// Per kind and number of free GPUs, the latest instant a usable node there may be used
    /// until (its earliest reservation's start): a job that would run longer fits none.
    fn level_ends(&self, nodes: &[Node], reserved_from: &[Secs]) -> Vec<Vec<Secs>> {
        let mut ends: Vec<Vec<Secs>> = self
            .by_free
            .iter()
            .map(|c| vec![Secs::MIN; c.len()])
            .collect();
        for (i, n) in nodes.iter().enumerate().filter(|(_, n)| !n.drained) {
            let e = &mut ends[n.kind][n.free as usize];
            *e = (*e).max(reserved_from[i]);
        }
        ends
    }

    /// [`FreeIndex::level_ends`] brought up to date after node `n` (already re-entered in the
    /// index) had `taken` GPUs taken: it joins its new level, and its old level's latest end
    /// is worked out again only if it was the node that set it.
    fn level_moved(
        &self,
        ends: &mut [Vec<Secs>],
        nodes: &[Node],
        reserved_from: &[Secs],
        n: usize,
        taken: u32,
    ) {
        let node = &nodes[n];
        if node.drained {
            return;
        }
        let k = node.kind;
        let new = node.free as usize;
        let old = (node.free + taken) as usize;
        ends[k][new] = ends[k][new].max(reserved_from[n]);
        if reserved_from[n] >= ends[k][old] {
            ends[k][old] = self.at_free[k][old]
                .iter()
                .map(|&i| reserved_from[i])
                .max()
                .unwrap_or(Secs::MIN);
        }
    }

    /// The most free GPUs on one usable node of kind `k`.
    fn largest(&self, k: usize) -> u32 {
        self.by_free[k]
            .iter()
            .rposition(|c| *c > 0)
            .map_or(0, |i| u32::try_from(i).unwrap_or(u32::MAX))
    }

    /// The most free GPUs on one usable node of any kind.
    fn largest_any(&self) -> u32 {
        (0..self.kinds.len())
            .map(|k| self.largest(k))
            .max()
            .unwrap_or(0)
    }

    /// How many usable nodes of kind `k` have at least `gpus` GPUs free.
    fn nodes_with(&self, k: usize, gpus: u32) -> u32 {
        let from = usize::try_from(gpus).unwrap_or(usize::MAX);
        self.by_free[k].iter().skip(from).sum()
    }

    /// The kinds a job asking for `want` may run on.
    fn matching<'s>(&'s self, want: &'s Option<String>) -> impl Iterator<Item = usize> + 's {
        (0..self.kinds.len()).filter(move |k| type_matches(want, &self.kinds[*k]))
    }

    /// Free GPUs a job asking for `want` could use.
    fn free_for(&self, want: &Option<String>) -> u32 {
        match want {
            None => self.total,
            Some(_) => self.matching(want).map(|k| self.free[k]).sum(),
        }
    }
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

struct Reservation {
    start: Secs,
    nodes: Vec<usize>,
}

/// A queued job's place in Slurm's order: priority, then the oldest submission, then id.
type QueueKey = (Reverse<u32>, Secs, u64, usize);

/// What a scheduling pass reads of a queued job before anything else: its team (the place in
/// the configuration) and GPUs, for the association limit most jobs stop at.
#[derive(Clone, Copy)]
struct Ticket {
    team: usize,
    gpus: u32,
    /// Its time limit: where it fits free GPUs, whether it fits between the reservations.
    time_limit: Secs,
    /// A one-node job of any GPU type, not whole-node: whether it fits is a question of the
    /// largest free slot alone, answered without reading the job.
    plain: bool,
}

/// Slurm's queue of a simulation: the shown pending jobs that are not parked, in Slurm's order,
/// also by team (with the GPUs they ask for) and by priority, so that a scheduling pass can
/// pass over the jobs of teams at their limit without reading them one by one.
#[derive(Default)]
struct SchedQueue {
    all: BTreeMap<QueueKey, Ticket>,
    by_team: Vec<BTreeMap<QueueKey, Ticket>>,
    /// Per team: how many queued jobs ask for each number of GPUs.
    sizes: Vec<BTreeMap<u32, u32>>,
    /// Per priority, highest first, the queued jobs in order (trace order is submit order).
    levels: BTreeMap<Reverse<u32>, Level>,
    /// How many times a job joined or left it.
    changes: u64,
}

impl SchedQueue {
    fn new(teams: usize) -> SchedQueue {
        SchedQueue {
            all: BTreeMap::new(),
            by_team: vec![BTreeMap::new(); teams],
            sizes: vec![BTreeMap::new(); teams],
            levels: BTreeMap::new(),
            changes: 0,
        }
    }

    fn len(&self) -> usize {
        self.all.len()
    }

    fn insert(&mut self, key: QueueKey, ticket: Ticket) {
        if self.all.insert(key, ticket).is_some() {
            return;
        }
        self.changes += 1;
        if let Some(q) = self.by_team.get_mut(ticket.team) {
            q.insert(key, ticket);
            *self.sizes[ticket.team].entry(ticket.gpus).or_insert(0) += 1;
        }
        self.levels.entry(key.0).or_default().insert(key.3);
    }

    fn remove(&mut self, key: &QueueKey) -> Option<Ticket> {
        let ticket = self.all.remove(key)?;
        self.changes += 1;
        if let Some(q) = self.by_team.get_mut(ticket.team) {
            q.remove(key);
            let sizes = &mut self.sizes[ticket.team];
            if let Some(n) = sizes.get_mut(&ticket.gpus) {
                *n -= 1;
                if *n == 0 {
                    sizes.remove(&ticket.gpus);
                }
            }
        }
        if let Some(level) = self.levels.get_mut(&key.0) {
            level.remove(key.3);
            if level.len == 0 {
                self.levels.remove(&key.0);
            }
        }
        Some(ticket)
    }

    /// How many queued jobs come before `key` (its place, from 0).
    fn rank(&self, key: &QueueKey) -> usize {
        let above: usize = self.levels.range(..key.0).map(|(_, l)| l.len).sum();
        above + self.levels.get(&key.0).map_or(0, |l| l.below(key.3))
    }

    /// The first queued job after `after` (the first of all without it).
    fn next_after(
        map: &BTreeMap<QueueKey, Ticket>,
        after: Option<QueueKey>,
    ) -> Option<(QueueKey, Ticket)> {
        match after {
            None => map.iter().next(),
            Some(c) => map
                .range((std::ops::Bound::Excluded(c), std::ops::Bound::Unbounded))
                .next(),
        }
        .map(|(k, t)| (*k, *t))
    }
}

/// The queued jobs of one priority, in order (trace order is submit order), in sorted chunks
/// of at most [`Level::CHUNK`]: a job joins or leaves, or finds its place, in a few hundred
/// steps however long the level (one sorted vector moved thousands per change).
#[derive(Default)]
struct Level {
    chunks: Vec<Vec<usize>>,
    len: usize,
}

impl Level {
    const CHUNK: usize = 256;

    /// The chunk `j` belongs in: the first whose last is not below it (the last chunk
    /// otherwise).
    fn chunk_of(&self, j: usize) -> usize {
        self.chunks
            .partition_point(|c| c.last().is_some_and(|l| *l < j))
            .min(self.chunks.len().saturating_sub(1))
    }

    fn insert(&mut self, j: usize) {
        if self.chunks.is_empty() {
            self.chunks.push(Vec::with_capacity(Self::CHUNK));
        }
        let c = self.chunk_of(j);
        let chunk = &mut self.chunks[c];
        let at = chunk.partition_point(|x| *x < j);
        if chunk.get(at) == Some(&j) {
            return;
        }
        chunk.insert(at, j);
        self.len += 1;
        if chunk.len() > Self::CHUNK {
            let upper = chunk.split_off(Self::CHUNK / 2);
            self.chunks.insert(c + 1, upper);
        }
    }

    fn remove(&mut self, j: usize) {
        if self.chunks.is_empty() {
            return;
        }
        let c = self.chunk_of(j);
        let chunk = &mut self.chunks[c];
        if let Ok(at) = chunk.binary_search(&j) {
            chunk.remove(at);
            self.len -= 1;
            if chunk.is_empty() && self.chunks.len() > 1 {
                self.chunks.remove(c);
            }
        }
    }

    /// How many of its jobs come before `j`.
    fn below(&self, j: usize) -> usize {
        let c = self.chunk_of(j);
        self.chunks[..c].iter().map(Vec::len).sum::<usize>()
            + self
                .chunks
                .get(c)
                .map_or(0, |chunk| chunk.partition_point(|x| *x < j))
    }
}

/// What the submit-time checks look at: team, class, GPUs, GPU type, nodes.
type RequestKind = (String, Option<String>, u32, Option<String>, u32);

/// What the governor decided in one pass, as the simulation applies it.
struct Decision {
    /// (job id, priority): every priority that changed.
    priorities: Vec<(u64, u32)>,
    /// Per team (place in the configuration).
    gpu_limits: Vec<u32>,
    type_limits: BTreeMap<(usize, String), u32>,
    park: Vec<u64>,
    release: Vec<u64>,
    requeue: Vec<u64>,
    in_quota: Vec<u64>,
    next_exempt_end: Option<Secs>,
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
}

/// GPUs per usable node, per type, and per node and type.
type NodeView = (
    BTreeMap<String, u32>,
    BTreeMap<String, u32>,
    BTreeMap<String, BTreeMap<String, u32>>,
);

impl<'a> Sim<'a> {
    fn new(trace: &'a Trace, config: &'a Config, params: &'a SimParams) -> Sim<'a> {
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
        };
        for (i, t) in config.teams.iter().enumerate() {
            for (k, q) in &t.quota.by_type {
                sim.type_limits.insert((i, k.clone()), *q);
            }
        }
        for (i, j) in trace.jobs.iter().enumerate() {
            let job = sim.job_of(j);
            sim.jobs.push(job);
            sim.out.push(JobOutcome {
                job: i,
                ..JobOutcome::default()
            });
        }
        for d in &trace.cluster.drains {
            if let Some(n) = sim.nodes.iter().position(|n| n.name == d.node) {
                if d.until > d.since {
                    sim.push(d.since, Kind::Drain, n, 0);
                    sim.push(d.until, Kind::Undrain, n, 0);
                }
            }
        }
        sim
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

    fn push(&mut self, at: Secs, kind: Kind, target: usize, serial: u32) {
        self.seq += 1;
        self.events.push(Reverse(Event {
            at,
            kind,
            seq: self.seq,
            target,
            serial,
        }));
    }

    /// The next instant something happens, if any before the trace's end.
    fn next_instant(&self) -> Option<Secs> {
        let submit = self.trace.jobs.get(self.next_submit).map(|j| j.submit);
        let event = self.events.peek().map(|Reverse(e)| e.at);
        let t = match (submit, event) {
            (Some(a), Some(b)) => a.min(b),
            (a, b) => a.or(b)?,
        };
        (t < self.trace.until).then_some(t.max(self.now))
    }

    fn run(&mut self, progress: &mut dyn FnMut(Secs)) {
        let mut last_progress = self.trace.since;
        while let Some(t) = self.next_instant() {
            self.advance(t);
            if t - last_progress >= PROGRESS_EVERY {
                progress(t);
                last_progress = t;
            }
            self.apply_events(t);
            if self.dirty && self.pending > 0 {
                self.pass();
            }
            let started = self.schedule();
            // One more pass a moment later when it may let more in: jobs held back by their
            // team's limit while GPUs are free (the new usage changes the allowances), or
            // in-quota jobs still waiting.
            let free_somewhere = self.free.total > 0;
            if started
                && self.pending > 0
                && ((free_somewhere && self.limit_blocked) || self.in_quota_waiting)
            {
                self.push(t + self.params.pass_interval.max(1), Kind::Wake, 0, 0);
            }
        }
        self.advance(self.trace.until);
        progress(self.trace.until);
    }

    /// Moves the clock, decaying the fair-share usage over the time that passed.
    fn advance(&mut self, t: Secs) {
        if t <= self.now {
            return;
        }
        let dt = t - self.now;
        if self.config.cluster.idle_sharing == IdleSharing::FairShare {
            let half = self.config.accountd.fairshare_half_life.as_secs_f64();
            let decay = if half > 0.0 {
                (-(dt as f64) / half).exp2()
            } else {
                1.0
            };
            self.decayed.resize(self.config.teams.len(), 0.0);
            for (u, used) in self.decayed.iter_mut().zip(&self.used) {
                *u = *u * decay + f64::from(*used) * dt as f64;
            }
            self.last_decay = t;
        }
        self.now = t;
    }

    fn apply_events(&mut self, t: Secs) {
        while let Some(Reverse(e)) = self.events.peek().copied() {
            if e.at > t {
                break;
            }
            self.events.pop();
            match e.kind {
                Kind::End => {
                    let j = e.target;
                    if self.jobs[j].state == State::Running && self.jobs[j].serial == e.serial {
                        self.end_run(j, false);
                        self.jobs[j].state = State::Done;
                        self.jobs[j].remaining = 0;
                    }
                }
                Kind::GraceEnd => {
                    let j = e.target;
                    if self.jobs[j].state == State::Grace && self.jobs[j].serial == e.serial {
                        self.requeue(j);
                    }
                }
                Kind::Drain | Kind::Undrain => {
                    let n = e.target;
                    self.changes += 1;
                    self.free.leave(n, &self.nodes[n]);
                    self.nodes[n].drained = e.kind == Kind::Drain;
                    self.free.enter(n, &self.nodes[n]);
                    self.node_view = None;
                    self.dirty = true;
                }
                Kind::Eligible => {
                    let j = e.target;
                    if self.jobs[j].state == State::Pending
                        && !self.jobs[j].shown
                        && self.jobs[j].eligible_at <= t
                    {
                        self.show(j);
                        self.dirty |= self.may_matter(j);
                    }
                }
                Kind::Cancel => {
                    let j = e.target;
                    if self.jobs[j].state == State::Pending && self.out[j].runs.is_empty() {
                        self.hide(j);
                        self.jobs[j].state = State::Done;
                        self.out[j].cancelled = true;
                        self.pending -= 1;
                        self.dirty = true;
                    }
                }
                Kind::Wake => self.dirty = true,
            }
        }
        while self
            .trace
            .jobs
            .get(self.next_submit)
            .is_some_and(|j| j.submit <= t)
        {
            let j = self.next_submit;
            self.next_submit += 1;
            self.submit(j);
        }
    }

    /// The plugin's checks at submit; an accepted job waits (shown to the governor once
    /// eligible).
    fn submit(&mut self, j: usize) {
        if !self.accepts(j) {
            self.out[j].rejected = true;
            return;
        }
        let tj = &self.trace.jobs[j];
        self.jobs[j].state = State::Pending;
        self.pending += 1;
        if let Some(c) = tj.cancelled_pending_at {
            self.push(c, Kind::Cancel, j, 0);
        }
        if self.jobs[j].eligible_at <= self.now {
            self.show(j);
            self.dirty |= self.may_matter(j);
        } else {
            let at = self.jobs[j].eligible_at;
            self.push(at, Kind::Eligible, j, 0);
        }
    }

    /// Whether a job that starts waiting may change what the next scheduling pass does, so
    /// that a governor pass is due now. It may not when no GPU is free anywhere, its team holds
    /// its quota already (it cannot be in quota) and its class is the lowest (it cannot displace
    /// its team's jobs): it can neither start nor preempt until GPUs come free, and an end
    /// brings a pass before that. Its place among the borrowers is given by that pass.
    fn may_matter(&self, j: usize) -> bool {
        if self.free.total > 0 {
            return true;
        }
        let job = &self.jobs[j];
        let Some(t) = job.team else {
            return false;
        };
        let team = &self.config.teams[t];
        let (used, quota) = match (&job.gpu_type, self.typed) {
            (Some(k), true) => (
                self.used_typed.get(&(t, k.clone())).copied().unwrap_or(0),
                team.quota_of(k),
            ),
            _ => (self.used[t], team.quota.total),
        };
        let lowest_class = job.class_idx == 0
            || self
                .config
                .priority_classes
                .iter()
                .all(|c| c.value >= self.class_value(job.class_idx));
        used < quota || !lowest_class
    }

    fn class_value(&self, idx: u8) -> u32 {
        match usize::from(idx) {
            0 => 0,
            i => self
                .config
                .priority_classes
                .get(i - 1)
                .map_or(0, |c| c.value),
        }
    }

    /// [`Sim::check_submit`], once per kind of request: jobs of one team, class, size, type
    /// and node count get the same answer.
    fn accepts(&mut self, j: usize) -> bool {
        let tj = &self.trace.jobs[j];
        let key = (
            tj.team.clone(),
            tj.class.clone(),
            tj.gpus,
            tj.gpu_type.clone(),
            tj.nodes,
        );
        if let Some(&ok) = self.accepted.get(&key) {
            return ok;
        }
        let ok = self.check_submit(tj);
        self.accepted.insert(key, ok);
        ok
    }

    fn check_submit(&self, tj: &TraceJob) -> bool {
        if tj.gpus == 0 {
            return false;
        }
        let spec = match &tj.gpu_type {
            Some(k) => format!("gres/gpu:{k}:{}", tj.gpus),
            None => format!("gres/gpu:{}", tj.gpus),
        };
        let class = tj
            .class
            .as_deref()
            .filter(|c| self.config.priority_class(c).is_some());
        let req = SubmitRequest {
            account: Some(tj.team.clone()),
            partition: self.config.cluster.partitions.first().cloned(),
            qos: class.map(str::to_string),
            user_id: 1000,
            submit_uid: 1000,
            gpus: GpuAsk {
                tres_per_job: Some(spec),
                ..GpuAsk::default()
            },
            array: None,
        };
        if submit::screen(self.config, &req).is_err() {
            return false;
        }
        // Larger than every node of its type together, or than what one node offers for a
        // node's share: it could never run.
        let fits_nodes = self
            .nodes
            .iter()
            .filter(|n| type_matches(&tj.gpu_type, &n.gpu_type))
            .filter(|n| n.gpus >= tj.gpus.div_ceil(tj.nodes.max(1)))
            .count();
        fits_nodes >= tj.nodes.max(1) as usize
    }

    /// Shows a pending job to the governor (squeue lists it as startable).
    fn show(&mut self, j: usize) {
        if self.jobs[j].shown {
            return;
        }
        let tj = &self.trace.jobs[j];
        let job = &self.jobs[j];
        let row = ClusterJob {
            // The trace's ids may repeat (SWF job numbers, a wrapped JobIDRaw): the governor
            // sees each job by its place in the trace (submit order, then id).
            id: row_id(j),
            team: tj.team.clone(),
            phase: Phase::Pending,
            gpus: job.gpus,
            gpu_type: job.gpu_type.clone(),
            priority: if job.parked { 0 } else { job.priority },
            submit: tj.submit,
            start: None,
            eligible: true,
            parked: job.parked,
            park_held: job.parked,
            batch: true,
            nodes: Vec::new(),
            node_count: job.nodes,
            completing: false,
            tasks: 1,
        };
        self.planner.insert(row);
        self.jobs[j].shown = true;
        if !self.jobs[j].parked {
            self.enqueue(j);
        }
    }

    fn hide(&mut self, j: usize) {
        if !self.jobs[j].shown {
            return;
        }
        self.jobs[j].shown = false;
        self.planner.remove(row_id(j));
        self.dequeue(j);
    }

    fn queue_key(&self, j: usize) -> QueueKey {
        (
            Reverse(self.jobs[j].priority),
            self.trace.jobs[j].submit,
            row_id(j),
            j,
        )
    }

    /// Into the scheduler's queue (a pass under way does not see it: its order was taken
    /// when it began).
    fn enqueue(&mut self, j: usize) {
        if self.jobs[j].queued {
            return;
        }
        let key = self.queue_key(j);
        let job = &self.jobs[j];
        let ticket = Ticket {
            team: job.team.unwrap_or(usize::MAX),
            gpus: job.gpus,
            time_limit: job.time_limit,
            plain: job.nodes == 1 && !job.exclusive && job.gpu_type.is_none(),
        };
        if self.walking {
            self.deferred.push((key, Some(ticket)));
        } else {
            self.queue.insert(key, ticket);
        }
        self.jobs[j].queued = true;
    }

    fn dequeue(&mut self, j: usize) {
        if !self.jobs[j].queued {
            return;
        }
        let key = self.queue_key(j);
        if self.walking {
            self.deferred.push((key, None));
        } else {
            self.queue.remove(&key);
        }
        self.jobs[j].queued = false;
    }

    /// A job's priority, wherever it is filed by it.
    fn set_priority(&mut self, j: usize, p: u32) {
        let old = self.jobs[j].priority;
        if old == p {
            return;
        }
        let queued = self.jobs[j].queued;
        let ticket = if queued {
            let key = self.queue_key(j);
            self.queue.remove(&key)
        } else {
            None
        };
        let running = self.jobs[j].state == State::Running;
        if running {
            self.changes += 1;
            self.running_prio.remove(&(old, j));
        }
        self.jobs[j].priority = p;
        if let Some(ticket) = ticket {
            let key = self.queue_key(j);
            self.queue.insert(key, ticket);
        }
        if running {
            self.running_prio.insert((p, j));
        }
    }

    /// One governor pass: the plan for the jobs as they are now, applied.
    fn pass(&mut self) {
        self.dirty = false;
        self.passes += 1;
        self.last_pass = self.now;
        self.refresh_fairshare();
        let view = match self.node_view.take() {
            Some(view) => view,
            None => {
                let view = self.usable_nodes();
                self.planner.set_nodes(&view.0);
                view
            }
        };
        let decision = if self.typed {
            self.plan_typed(&view)
        } else {
            let pass = self.planner.plan(&PassInput {
                capacity: view.0.values().sum(),
                fairshare: &self.fairshare,
                now: self.now,
                now_ms: self.now.saturating_mul(1_000),
            });
            Decision {
                priorities: pass.priorities,
                gpu_limits: pass.gpu_limits,
                type_limits: BTreeMap::new(),
                park: pass.park,
                release: pass.release,
                requeue: pass
                    .reclaim
                    .into_iter()
                    .chain(pass.displace)
                    .chain(pass.violations)
                    .chain(pass.over_ceiling)
                    .collect(),
                in_quota: pass.in_quota,
                next_exempt_end: pass.next_exempt_end,
            }
        };
        self.node_view = Some(view);
        self.apply(decision);
    }

    /// A typed configuration plans each GPU type with what the others left of the shared
    /// limits, pass by pass: [`governance::plan`] over the jobs shown.
    fn plan_typed(&self, view: &NodeView) -> Decision {
        let (node_gpus, capacity_by_type, node_types) = view;
        let rows: Vec<ClusterJob> = self.planner.jobs().cloned().collect();
        let plan = governance::plan(&GovernInput {
            config: self.config,
            capacity: node_gpus.values().sum(),
            jobs: &rows,
            fairshare: &self.fairshare,
            now: self.now,
            now_ms: self.now.saturating_mul(1_000),
            node_gpus,
            capacity_by_type,
            node_types,
        });
        let mut in_quota: Vec<u64> = rows
            .iter()
            .filter(|r| r.phase == Phase::Pending)
            .filter(|r| {
                plan.priorities
                    .get(&r.id)
                    .is_some_and(|p| priority::level(*p) >= VICTIM_BASE - 1)
            })
            .map(|r| r.id)
            .collect();
        in_quota.sort_unstable();
        let mut type_limits = BTreeMap::new();
        for (i, t) in self.config.teams.iter().enumerate() {
            if let Some(by_type) = plan.type_limits.get(&t.name) {
                for (k, l) in by_type {
                    type_limits.insert((i, k.clone()), *l);
                }
            }
        }
        Decision {
            priorities: plan.priorities.iter().map(|(id, p)| (*id, *p)).collect(),
            gpu_limits: self
                .config
                .teams
                .iter()
                .enumerate()
                .map(|(i, t)| {
                    plan.gpu_limits
                        .get(&t.name)
                        .copied()
                        .unwrap_or(self.limits[i])
                })
                .collect(),
            type_limits,
            park: plan.park,
            release: plan.release,
            requeue: plan
                .reclaim
                .into_iter()
                .chain(plan.displace)
                .chain(plan.violations)
                .chain(plan.over_ceiling)
                .collect(),
            in_quota,
            next_exempt_end: plan
                .state
                .victims
                .iter()
                .map(|v| v.exempt_until)
                .filter(|t| *t > self.now)
                .min(),
        }
    }

    fn apply(&mut self, mut d: Decision) {
        if self.limits != d.gpu_limits {
            self.changes += 1;
            self.limits.clone_from(&d.gpu_limits);
        }
        for (k, l) in std::mem::take(&mut d.type_limits) {
            if self.type_limits.insert(k, l) != Some(l) {
                self.changes += 1;
            }
        }
        let n = self.jobs.len();
        let by_id = |id: &u64| -> Option<usize> {
            usize::try_from(*id)
                .ok()
                .and_then(|i| i.checked_sub(1))
                .filter(|i| *i < n)
        };
        for (id, p) in &d.priorities {
            if let Some(j) = by_id(id) {
                self.set_priority(j, *p);
            }
        }
        for id in &d.park {
            if let Some(j) = by_id(id) {
                self.set_parked(j, true);
            }
        }
        for id in &d.release {
            if let Some(j) = by_id(id) {
                self.set_parked(j, false);
            }
        }
        // The governor's own requeues, each valid for the job as it is now (running).
        for id in &d.requeue {
            if let Some(j) = by_id(id) {
                if self.jobs[j].state == State::Running {
                    self.preempt(j, 0);
                }
            }
        }
        // Pending jobs the plan ranks as in quota: the first instant each did.
        for id in &d.in_quota {
            if let Some(j) = by_id(id) {
                if !self.jobs[j].parked && self.out[j].in_quota_since.is_none() {
                    self.out[j].in_quota_since = Some(self.now);
                }
            }
        }
        self.wake_for_time_rules(&d, by_id);
    }

    fn set_parked(&mut self, j: usize, parked: bool) {
        let job = &mut self.jobs[j];
        if job.state != State::Pending || job.parked == parked {
            return;
        }
        job.parked = parked;
        let priority = job.priority;
        if job.shown {
            self.planner.update(row_id(j), |row| {
                row.parked = parked;
                row.park_held = parked;
                row.priority = if parked { 0 } else { priority };
            });
            if parked {
                self.dequeue(j);
            } else {
                self.enqueue(j);
            }
        }
    }

    /// Passes at the instants a rule depends on time while in-quota jobs wait: a victim's
    /// exemption ending, the reclaim fallback's delay after a submission.
    fn wake_for_time_rules(&mut self, d: &Decision, by_id: impl Fn(&u64) -> Option<usize>) {
        let now = self.now;
        self.in_quota_waiting = !d.in_quota.is_empty();
        if !self.in_quota_waiting {
            return;
        }
        let mut next = d.next_exempt_end;
        for id in &d.in_quota {
            let Some(j) = by_id(id) else {
                continue;
            };
            // The first whole second at which the fallback acts (the simulation's clock).
            let due_ms = governance::reclaim_fallback_due_ms(self.trace.jobs[j].submit);
            let due = due_ms.saturating_add(999) / 1_000;
            if due > now {
                next = Some(next.map_or(due, |n| n.min(due)));
            }
        }
        if let Some(t) = next {
            self.push(t, Kind::Wake, 0, 0);
        }
    }

    fn refresh_fairshare(&mut self) {
        if self.config.cluster.idle_sharing != IdleSharing::FairShare
            || self.now.saturating_sub(self.last_fairshare) < FAIRSHARE_PERIOD
        {
            return;
        }
        self.last_fairshare = self.now;
        let shares = fairshare::weights_from_config(self.config);
        let decayed: BTreeMap<String, f64> = self
            .config
            .teams
            .iter()
            .zip(&self.decayed)
            .map(|(t, u)| (t.name.clone(), *u))
            .collect();
        self.fairshare =
            fairshare::factors(&shares, &decayed, self.config.accountd.fairshare_dampening);
    }

    /// GPUs per usable node, per type, and per node and type, as the governor reads them.
    fn usable_nodes(&self) -> NodeView {
        let mut gpus = BTreeMap::new();
        let mut by_type: BTreeMap<String, u32> = BTreeMap::new();
        let mut node_types = BTreeMap::new();
        for n in self.nodes.iter().filter(|n| !n.drained) {
            gpus.insert(n.name.clone(), n.gpus);
            if let Some(k) = &n.gpu_type {
                *by_type.entry(k.clone()).or_default() += n.gpus;
                if self.typed {
                    node_types.insert(n.name.clone(), BTreeMap::from([(k.clone(), n.gpus)]));
                }
            }
        }
        (gpus, by_type, node_types)
    }

    /// Slurm's scheduling pass (the main scheduler and backfill as one walk down the queue);
    /// true when it started a job.
    fn schedule(&mut self) -> bool {
        if self.quiet_at == Some((self.changes, self.queue.changes)) {
            // Nothing it reads has changed since a pass that did nothing and whose outcome
            // does not depend on the time (no job might preempt; a later instant only
            // makes backfill's windows shorter): this one would do nothing either, and note
            // the same limits.
            return false;
        }
        self.quiet_at = None;
        self.limit_blocked = false;
        if self.pending == 0 {
            return false;
        }
        // The queue's order now is the pass's: it is walked out of place, and what the walk
        // changes in it (jobs started, jobs requeued without delay) is applied after.
        let queue = std::mem::take(&mut self.queue);
        self.walking = true;
        let (started, timeless) = self.walk(&queue);
        self.walking = false;
        self.queue = queue;
        for (key, ticket) in std::mem::take(&mut self.deferred) {
            match ticket {
                Some(t) => {
                    self.queue.insert(key, t);
                }
                None => {
                    self.queue.remove(&key);
                }
            }
        }
        if !started && timeless {
            self.quiet_at = Some((self.changes, self.queue.changes));
        }
        started
    }

    /// The next queued job after `after` of a team that might pass its limit: its limit leaves
    /// room for its smallest queued job. Jobs of the other teams before it would each be
    /// passed over for their team's limit.
    fn next_open(&self, queue: &SchedQueue, after: Option<QueueKey>) -> Option<(QueueKey, Ticket)> {
        let mut best: Option<(QueueKey, Ticket)> = None;
        for (t, q) in queue.by_team.iter().enumerate() {
            if !self.open(queue, t) {
                continue;
            }
            if let Some(next) = SchedQueue::next_after(q, after) {
                if best.is_none_or(|b| next.0 < b.0) {
                    best = Some(next);
                }
            }
        }
        best
    }

    /// Whether team `t`'s limit leaves room for its smallest queued job.
    fn open(&self, queue: &SchedQueue, t: usize) -> bool {
        let Some((&smallest, _)) = queue.sizes.get(t).and_then(|s| s.first_key_value()) else {
            return false;
        };
        self.used[t] <= self.limits[t] && smallest <= self.limits[t] - self.used[t]
    }

    /// The walk of [`Sim::schedule`] over the queue as it was when the pass began: its first
    /// MAX_JOBS_TESTED jobs, in order. While GPUs are free, the jobs of teams at their limit
    /// are passed over in bulk (the queue counts them) instead of one by one: each would only
    /// have been passed over for its limit.
    ///
    /// Returns whether it started a job, and whether its outcome was the time's alone: no
    /// job it looked at might preempt (their grace and the victims' exemptions run out).
    fn walk(&mut self, queue: &SchedQueue) -> (bool, bool) {
        let lowest_preemptible = self.running_prio.first().map(|(p, _)| *p);
        // How many blocked jobs have their reservation, and per node the earliest start of a
        // reservation that holds it.
        let mut reserved = 0usize;
        let mut reserved_from: Vec<Secs> = Vec::new();
        let mut blocked: Vec<usize> = Vec::new();
        let mut started = false;
        let mut timeless = true;
        // The largest free slot on one usable node, worked out on need and again after a
        // start or a preemption.
        let mut largest: Option<u32> = None;
        // Once reservations are made, the latest end each level of free GPUs allows, until a
        // start or a preemption moves nodes between levels.
        let mut level_ends: Option<Vec<Vec<Secs>>> = None;
        let window = queue.len().min(MAX_JOBS_TESTED);
        let mut iter = queue.all.range::<QueueKey, _>(..);
        // The place in the queue of the next job the walk looks at, and how many jobs in a
        // row it passed over for their team's limit.
        let mut next_place = 0usize;
        let mut over_in_a_row = 0usize;
        while next_place < window {
            let Some((&key, &ticket)) = iter.next() else {
                break;
            };
            let (key, ticket) = if over_in_a_row >= SKIP_AFTER
                && !self.typed
                && self.free.total > 0
                && !self.open(queue, ticket.team)
            {
                // A run of jobs of teams at their limit: this one, and all up to the next job
                // of a team with room, are passed over (GPUs are free: none would stop the
                // walk), found in the queue's indexes.
                self.limit_blocked = true;
                let Some((next, next_ticket)) = self.next_open(queue, Some(key)) else {
                    break;
                };
                let place = queue.rank(&next);
                if place >= window {
                    break;
                }
                next_place = place;
                over_in_a_row = 0;
                iter = queue
                    .all
                    .range((std::ops::Bound::Excluded(next), std::ops::Bound::Unbounded));
                (next, next_ticket)
            } else {
                (key, ticket)
            };
            next_place += 1;
            let (Reverse(p), _, _, j) = key;
            // A job whose victims are still in their grace time waits for them (it stays first
            // in line for any GPUs that come free meanwhile).
            let above_lowest = lowest_preemptible.is_some_and(|v| p > v);
            let may_preempt = above_lowest && self.jobs[j].awaiting_until <= self.now;
            if self.free.total == 0 && !may_preempt {
                // Nothing can start or preempt from here down.
                timeless &= !above_lowest;
                break;
            }
            let over = match self.used.get(ticket.team) {
                Some(used) => used.saturating_add(ticket.gpus) > self.limits[ticket.team],
                None => true,
            };
            if over || (self.typed && !self.within_limits(j)) {
                self.limit_blocked = true;
                over_in_a_row += 1;
                continue;
            }
            over_in_a_row = 0;
            timeless &= !above_lowest;
            let fits_free = if ticket.plain {
                // may_fit_one_node for an untyped one-node job: the largest free slot of any
                // type (which the total free covers).
                *largest.get_or_insert_with(|| self.free.largest_any()) >= ticket.gpus
            } else {
                self.free.free_for(&self.jobs[j].gpu_type) >= self.jobs[j].gpus
                    && self.may_fit_one_node(j)
            };
            if fits_free {
                // Reservations of the jobs blocked above this one, made when first needed.
                if reserved_from.is_empty() {
                    reserved_from = vec![Secs::MAX; self.nodes.len()];
                }
                while reserved < blocked.len().min(MAX_RESERVATIONS) {
                    let r = self.reservation(blocked[reserved]);
                    for &n in &r.nodes {
                        reserved_from[n] = reserved_from[n].min(r.start);
                    }
                    reserved += 1;
                    level_ends = None;
                }
                if reserved > 0 && level_ends.is_none() {
                    level_ends = Some(self.free.level_ends(&self.nodes, &reserved_from));
                }
                let end_by = self.now.saturating_add(ticket.time_limit);
                let placed = if ticket.plain {
                    // place() for a one-node job of any type, from the queue's entry. Written
                    // out here: one helper shared with place() made the year's curve 2-3 % slower.
                    (ticket.gpus > 0)
                        .then(|| {
                            self.free.best_fit(
                                &None,
                                ticket.gpus,
                                |i| end_by <= reserved_from[i],
                                level_ends.as_deref().map(|e| (e, end_by)),
                            )
                        })
                        .flatten()
                        .map(|(_, i)| vec![(i, ticket.gpus)])
                } else {
                    self.place(j, &reserved_from, end_by, level_ends.as_deref())
                };
                if let Some(alloc) = placed {
                    let moved = alloc.clone();
                    self.start(j, alloc);
                    largest = None;
                    if let Some(ends) = level_ends.as_mut() {
                        for (n, g) in moved {
                            self.free
                                .level_moved(ends, &self.nodes, &reserved_from, n, g);
                        }
                    }
                    started = true;
                    continue;
                }
            }
            if may_preempt && self.preempt_for(j) {
                largest = None;
                level_ends = None;
                if self.grace == 0 {
                    // The victims are gone already: the job starts in this pass.
                    if reserved_from.is_empty() {
                        reserved_from = vec![Secs::MAX; self.nodes.len()];
                    }
                    let end_by = self.now.saturating_add(self.jobs[j].time_limit);
                    if let Some(alloc) = self.place(j, &reserved_from, end_by, None) {
                        self.start(j, alloc);
                        started = true;
                    }
                }
                continue;
            }
            // Only the first few blocked jobs get a reservation.
            if blocked.len() < MAX_RESERVATIONS {
                blocked.push(j);
            }
        }
        (started, timeless)
    }

    /// A quick test before placement: whether some node could hold a one-node job's GPUs,
    /// enough nodes hold a multi-node job's share of them, or enough nodes are wholly free for
    /// a whole-node job (placement then looks at reservations).
    fn may_fit_one_node(&self, j: usize) -> bool {
        let job = &self.jobs[j];
        if job.exclusive {
            return self
                .free
                .matching(&job.gpu_type)
                .map(|k| self.free.whole[k])
                .sum::<u32>()
                >= job.nodes;
        }
        if job.nodes > 1 {
            // Enough nodes with its share free.
            let share = job.gpus.div_ceil(job.nodes);
            return self
                .free
                .matching(&job.gpu_type)
                .map(|k| self.free.nodes_with(k, share))
                .sum::<u32>()
                >= job.nodes;
        }
        self.free
            .matching(&job.gpu_type)
            .map(|k| self.free.largest(k))
            .max()
            .unwrap_or(0)
            >= job.gpus
    }

    /// The team's association limit (GrpTRES gres/gpu, and per type when typed).
    fn within_limits(&self, j: usize) -> bool {
        let job = &self.jobs[j];
        let Some(t) = job.team else {
            return false;
        };
        if self.used[t].saturating_add(job.gpus) > self.limits[t] {
            return false;
        }
        if let (true, Some(k)) = (self.typed, &job.gpu_type) {
            let used = self.used_typed.get(&(t, k.clone())).copied().unwrap_or(0);
            let limit = self.type_limits.get(&(t, k.clone())).copied().unwrap_or(0);
            if used.saturating_add(job.gpus) > limit {
                return false;
            }
        }
        true
    }

    /// The GPUs a job takes on each of its nodes.
    fn per_node(&self, j: usize, node: &Node) -> u32 {
        let job = &self.jobs[j];
        if job.exclusive {
            node.gpus
        } else {
            job.gpus.div_ceil(job.nodes)
        }
    }

    /// Where the job fits now (best fit: the fullest nodes first), keeping clear of the
    /// reservations it would delay.
    fn place(
        &self,
        j: usize,
        reserved_from: &[Secs],
        end_by: Secs,
        level_ends: Option<&[Vec<Secs>]>,
    ) -> Option<Vec<(usize, u32)>> {
        let job = &self.jobs[j];
        if job.nodes == 1 && !job.exclusive {
            // The node with the fewest GPUs left over, then the lowest index, found from the
            // free-GPU index instead of a walk over every node.
            if job.gpus == 0 {
                return None;
            }
            return self
                .free
                .best_fit(
                    &job.gpu_type,
                    job.gpus,
                    |i| end_by <= reserved_from[i],
                    level_ends.map(|e| (e, end_by)),
                )
                .map(|(_, i)| vec![(i, job.gpus)]);
        }
        let k = job.nodes as usize;
        if !job.exclusive {
            // The same share on each node: the nodes by free GPUs from the share up, by
            // index within a level (the free-GPU index), until there are enough.
            let need = job.gpus.div_ceil(job.nodes);
            let from = usize::try_from(need).ok().filter(|f| *f > 0)?;
            let mut fits: Vec<(usize, u32)> = Vec::with_capacity(k);
            let most = self.free.by_free.iter().map(Vec::len).max().unwrap_or(0);
            for f in from..most {
                let level = fits.len();
                for kind in self.free.matching(&job.gpu_type) {
                    if let Some(at) = self.free.at_free[kind].get(f) {
                        fits.extend(
                            at.iter()
                                .filter(|&&i| end_by <= reserved_from[i])
                                .map(|&i| (i, need)),
                        );
                    }
                }
                fits[level..].sort_unstable();
                if fits.len() >= k {
                    fits.truncate(k);
                    return Some(fits);
                }
            }
            return None;
        }
        let mut fits: Vec<(u32, usize, u32)> = self
            .nodes
            .iter()
            .enumerate()
            .filter(|(_, n)| !n.drained && type_matches(&job.gpu_type, &n.gpu_type))
            .filter(|(i, _)| end_by <= reserved_from[*i])
            .filter_map(|(i, n)| {
                let need = self.per_node(j, n);
                let ok = need > 0
                    && if job.exclusive {
                        n.free == n.gpus
                    } else {
                        n.free >= need
                    };
                ok.then(|| (n.free - need, i, need))
            })
            .collect();
        if fits.len() < k {
            return None;
        }
        // The k best (the keys are distinct: each holds its node's index).
        if k < fits.len() {
            fits.select_nth_unstable(k);
            fits.truncate(k);
        }
        fits.sort_unstable();
        Some(
            fits.into_iter()
                .take(job.nodes as usize)
                .map(|(_, i, need)| (i, need))
                .collect(),
        )
    }

    /// Backfill's reservation for a blocked job: the earliest instant its GPUs come free by
    /// the running jobs' time limits, and the nodes it would take then.
    fn reservation(&self, j: usize) -> Reservation {
        let job = &self.jobs[j];
        let mut free: Vec<u32> = self.nodes.iter().map(|n| n.free).collect();
        // The share a job not whole-node takes on each node.
        let share = (!job.exclusive).then(|| job.gpus.div_ceil(job.nodes));
        let usable = |i: usize, free: &[u32]| {
            let n = &self.nodes[i];
            !n.drained
                && type_matches(&job.gpu_type, &n.gpu_type)
                && match share {
                    None => free[i] == n.gpus,
                    Some(need) => free[i] >= need,
                }
        };
        let mut at = self.now;
        let mut iter = self.ends.iter();
        // Free GPUs only grow as jobs end, so a node once usable stays usable: counted as they
        // turn, listed once at the end.
        let mut count = match share {
            Some(need) => self
                .free
                .matching(&job.gpu_type)
                .map(|k| self.free.nodes_with(k, need) as usize)
                .sum(),
            None => (0..self.nodes.len()).filter(|&i| usable(i, &free)).count(),
        };
        loop {
            if count >= job.nodes as usize {
                return Reservation {
                    start: at,
                    nodes: (0..self.nodes.len())
                        .filter(|&i| usable(i, &free))
                        .take(job.nodes as usize)
                        .collect(),
                };
            }
            let Some(&(end, r)) = iter.next() else {
                // It never fits (drained nodes): it reserves nothing.
                return Reservation {
                    start: Secs::MAX,
                    nodes: Vec::new(),
                };
            };
            at = end.max(self.now);
            for (n, g) in &self.jobs[r].alloc {
                let was = usable(*n, &free);
                free[*n] += g;
                count += usize::from(!was && usable(*n, &free));
            }
        }
    }

    /// preempt/qos with WITHIN: running jobs of lower priority past their exempt time, on the
    /// node where the fewest of the lowest make room (multi-node jobs: the lowest until enough
    /// nodes have room). True when it preempted.
    fn preempt_for(&mut self, j: usize) -> bool {
        self.changes += 1;
        let p = self.jobs[j].priority;
        // Lowest priority first, then the most recently started.
        let mut candidates: Vec<(u32, Reverse<Secs>, usize)> = self
            .running_prio
            .range(..(p, 0))
            .map(|&(_, r)| r)
            .filter(|&r| self.now - self.jobs[r].run_start >= self.exempt)
            .map(|r| (self.jobs[r].priority, Reverse(self.jobs[r].run_start), r))
            .collect();
        if candidates.is_empty() {
            return false;
        }
        candidates.sort_unstable();
        let job_nodes = self.jobs[j].nodes as usize;
        let room = |free: u32, i: usize| {
            let n = &self.nodes[i];
            !n.drained
                && type_matches(&self.jobs[j].gpu_type, &n.gpu_type)
                && if self.jobs[j].exclusive {
                    free == n.gpus
                } else {
                    free >= self.per_node(j, n)
                }
        };
        let mut chosen: Vec<usize> = Vec::new();
        if job_nodes == 1 {
            // The node needing the fewest victims, taken lowest first. Each node's candidates
            // in that order (one walk over them, however many nodes).
            let mut on_node: BTreeMap<usize, Vec<(usize, u32)>> = BTreeMap::new();
            for (_, _, r) in &candidates {
                for (n, g) in &self.jobs[*r].alloc {
                    on_node.entry(*n).or_default().push((*r, *g));
                }
            }
            let mut best: Option<(usize, usize, Vec<usize>)> = None;
            for (&i, here) in &on_node {
                let mut f = self.nodes[i].free;
                if room(f, i) {
                    // Room without preempting: not a node to preempt on.
                    continue;
                }
                let mut picked = Vec::new();
                for (r, g) in here {
                    if room(f, i) {
                        break;
                    }
                    f += g;
                    picked.push(*r);
                }
                if room(f, i) && !picked.is_empty() {
                    let key = (picked.len(), i);
                    if best.as_ref().is_none_or(|b| (b.0, b.1) > key) {
                        best = Some((key.0, key.1, picked));
                    }
                }
            }
            match best {
                Some((_, _, picked)) => chosen = picked,
                None => return false,
            }
        } else {
            let mut free: Vec<u32> = self.nodes.iter().map(|n| n.free).collect();
            for (_, _, r) in &candidates {
                if (0..self.nodes.len()).filter(|&i| room(free[i], i)).count() >= job_nodes {
                    break;
                }
                for (n, g) in &self.jobs[*r].alloc {
                    free[*n] += g;
                }
                chosen.push(*r);
            }
            if (0..self.nodes.len()).filter(|&i| room(free[i], i)).count() < job_nodes {
                return false;
            }
        }
        chosen.sort_unstable();
        chosen.dedup();
        for r in chosen {
            self.preempt(r, self.grace);
        }
        self.jobs[j].awaiting_until = self.now.saturating_add(self.grace).max(self.now + 1);
        if self.grace == 0 {
            // The victims' GPUs are free now: the same pass starts the job.
            self.jobs[j].awaiting_until = self.now;
        }
        true
    }

    /// A node's free GPUs change by `delta`.
    fn take_gpus(&mut self, n: usize, gpus: u32, give_back: bool) {
        self.changes += 1;
        self.free.leave(n, &self.nodes[n]);
        if give_back {
            self.nodes[n].free += gpus;
        } else {
            self.nodes[n].free -= gpus;
        }
        self.free.enter(n, &self.nodes[n]);
    }

    /// Where backfill expects the job's GPUs back: the end of its time limit while it runs,
    /// of its grace once preempted.
    fn set_end(&mut self, j: usize, end: Option<Secs>) {
        self.changes += 1;
        if let Some(old) = self.jobs[j].end_key.take() {
            self.ends.remove(&(old, j));
        }
        if let Some(e) = end {
            self.ends.insert((e, j));
            self.jobs[j].end_key = Some(e);
        }
    }

    fn start(&mut self, j: usize, alloc: Vec<(usize, u32)>) {
        self.changes += 1;
        let now = self.now;
        let gpus = self.jobs[j].gpus;
        let team = self.jobs[j].team.expect("only team jobs are accepted");
        let quota = match (&self.jobs[j].gpu_type, self.typed) {
            (Some(k), true) => self.config.teams[team].quota_of(k),
            _ => self.config.teams[team].quota.total,
        };
        let used_before = match (&self.jobs[j].gpu_type, self.typed) {
            (Some(k), true) => self
                .used_typed
                .get(&(team, k.clone()))
                .copied()
                .unwrap_or(0),
            _ => self.used[team],
        };
        self.dequeue(j);
        let held: u32 = alloc.iter().map(|(_, g)| g).sum();
        for &(n, g) in &alloc {
            self.take_gpus(n, g, false);
        }
        self.used[team] += held;
        if let (Some(k), true) = (&self.jobs[j].gpu_type, self.typed) {
            *self.used_typed.entry((team, k.clone())).or_default() += held;
        }
        let node_names: Vec<String> = alloc
            .iter()
            .map(|(n, _)| self.nodes[*n].name.clone())
            .collect();
        let run_type = self.jobs[j].gpu_type.clone().or_else(|| {
            alloc
                .first()
                .and_then(|(n, _)| self.nodes[*n].gpu_type.clone())
        });
        let job = &mut self.jobs[j];
        job.state = State::Running;
        job.run_start = now;
        job.run_borrowed = used_before.saturating_add(gpus) > quota;
        job.serial += 1;
        job.alloc = alloc;
        let end = now.saturating_add(job.remaining.max(1).min(job.time_limit));
        let limit_end = now.saturating_add(job.time_limit);
        let serial = job.serial;
        let priority = job.priority;
        if job.shown {
            let typed = self.typed;
            self.planner.update(row_id(j), |row| {
                row.phase = Phase::Running;
                row.start = Some(now);
                row.nodes = node_names;
                row.gpus = held;
                if typed {
                    row.gpu_type = run_type;
                }
                row.completing = false;
            });
        }
        self.running_prio.insert((priority, j));
        self.set_end(j, Some(limit_end));
        self.pending -= 1;
        self.push(end, Kind::End, j, serial);
    }

    /// Ends the current run, freeing its GPUs.
    fn end_run(&mut self, j: usize, preempted: bool) {
        self.changes += 1;
        let now = self.now;
        let team = self.jobs[j].team.expect("only team jobs run");
        if self.jobs[j].state == State::Running {
            let p = self.jobs[j].priority;
            self.running_prio.remove(&(p, j));
        }
        self.set_end(j, None);
        let alloc = std::mem::take(&mut self.jobs[j].alloc);
        let held: u32 = alloc.iter().map(|(_, g)| g).sum();
        for &(n, g) in &alloc {
            self.take_gpus(n, g, true);
        }
        self.used[team] -= held;
        if let (Some(k), true) = (&self.jobs[j].gpu_type, self.typed) {
            if let Some(u) = self.used_typed.get_mut(&(team, k.clone())) {
                *u -= held;
            }
        }
        let job = &self.jobs[j];
        self.out[j].runs.push(SimRun {
            start: job.run_start,
            end: now,
            preempted,
            borrowed: job.run_borrowed,
        });
        self.hide(j);
        self.dirty = true;
    }

    /// A running job preempted (by Slurm for a pending job, or requeued by the governor):
    /// it holds its GPUs for `grace`, then is requeued.
    fn preempt(&mut self, j: usize, grace: Secs) {
        self.changes += 1;
        if self.jobs[j].state != State::Running {
            return;
        }
        let until = self.now.saturating_add(grace);
        let p = self.jobs[j].priority;
        self.running_prio.remove(&(p, j));
        self.set_end(j, Some(until));
        let job = &mut self.jobs[j];
        job.state = State::Grace;
        job.awaiting_until = until;
        let serial = job.serial;
        if job.shown {
            self.planner.update(row_id(j), |row| row.completing = true);
        }
        if grace == 0 {
            self.requeue(j);
        } else {
            self.push(until, Kind::GraceEnd, j, serial);
        }
    }

    /// The end of a preempted run: the work since its last checkpoint is lost, and the job
    /// waits again after the requeue delay.
    fn requeue(&mut self, j: usize) {
        self.changes += 1;
        let now = self.now;
        let ran = now - self.jobs[j].run_start;
        let lost = match self.jobs[j].checkpoint {
            Some(interval) if interval > 0 => ran % interval,
            _ => ran,
        };
        let done = ran - lost;
        self.end_run(j, true);
        self.out[j].lost_gpu_secs += lost * i64::from(self.jobs[j].gpus);
        let job = &mut self.jobs[j];
        job.remaining = (job.remaining - done).max(1);
        job.state = State::Pending;
        job.awaiting_until = Secs::MIN;
        job.eligible_at = now.saturating_add(self.requeue_delay);
        job.priority = encode(BORROW_BASE, job.class_idx);
        self.pending += 1;
        if self.requeue_delay == 0 {
            self.show(j);
        } else {
            let at = self.jobs[j].eligible_at;
            self.push(at, Kind::Eligible, j, 0);
        }
    }

    fn finish(mut self) -> Outcome {
        // Runs still open at the trace's end end there (not preempted).
        let until = self.trace.until;
        for j in 0..self.jobs.len() {
            if matches!(self.jobs[j].state, State::Running | State::Grace) {
                let job = &self.jobs[j];
                self.out[j].runs.push(SimRun {
                    start: job.run_start,
                    end: until.max(job.run_start),
                    preempted: false,
                    borrowed: job.run_borrowed,
                });
            }
        }
        let total: u32 = self.trace.cluster.nodes.iter().map(|n| n.gpus).sum();
        Outcome {
            jobs: self.out,
            passes: self.passes,
            capacity: capacity_steps(&self.trace.cluster, self.trace.since, total),
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::replay::{NodeSpec, Observed};

    proptest::proptest! {
        /// A chunked level holds what a sorted vector holds, and counts the same before any
        /// job, through any sequence of jobs joining and leaving (small chunks split often).
        #[test]
        fn a_level_counts_as_a_sorted_vector_does(
            ops in proptest::collection::vec((proptest::bool::ANY, 0usize..2000), 0..3000),
            probes in proptest::collection::vec(0usize..2100, 1..50),
        ) {
            let mut level = Level::default();
            let mut model: Vec<usize> = Vec::new();
            for (join, j) in ops {
                let at = model.partition_point(|x| *x < j);
                if join {
                    level.insert(j);
                    if model.get(at) != Some(&j) {
                        model.insert(at, j);
                    }
                } else {
                    level.remove(j);
                    if model.get(at) == Some(&j) {
                        model.remove(at);
                    }
                }
                proptest::prop_assert_eq!(level.len, model.len());
            }
            let flat: Vec<usize> = level.chunks.concat();
            proptest::prop_assert_eq!(&flat, &model);
            for p in probes {
                proptest::prop_assert_eq!(level.below(p), model.partition_point(|x| *x < p));
            }
        }
    }

    /// Two teams of quota 4 on `nodes` nodes of `per_node` GPUs; `extra` goes into the
    /// first team's table, `governance` replaces the governance table's timing.
    fn config(a_extra: &str, b_extra: &str, governance: &str) -> Config {
        config_q(4, 4, a_extra, b_extra, governance)
    }

    fn config_q(qa: u32, qb: u32, a_extra: &str, b_extra: &str, governance: &str) -> Config {
        let text = format!(
            r#"
[cluster]
name = "t"
partitions = ["gpu"]
idle_sharing = "fifo"
currency = "USD"

[gpu_types.default]
rate_per_hour = 1.0

[[team]]
name = "a"
quota = {qa}
{a_extra}

[[team]]
name = "b"
quota = {qb}
{b_extra}

[[priority_class]]
name = "inference"
value = 100
preemptible = false

[governance]
reclaim_mode = "requeue"
{governance}
"#
        );
        teamshare_config::parse(&text, "t.toml").expect("test config")
    }

    fn no_wait() -> &'static str {
        "reclaim_grace = \"0s\"\nmin_runtime_before_reclaim = \"0s\""
    }

    pub(super) fn job(id: u64, team: &str, submit: Secs, gpus: u32, work: Secs) -> TraceJob {
        TraceJob {
            id,
            team: team.into(),
            class: None,
            submit,
            eligible: submit,
            gpus,
            gpu_type: None,
            nodes: 1,
            exclusive: false,
            time_limit: work * 2,
            work,
            cancelled_pending_at: None,
            observed: Observed::default(),
        }
    }

    pub(super) fn trace(jobs: Vec<TraceJob>, nodes: u32, per_node: u32) -> Trace {
        Trace {
            jobs,
            cluster: Cluster {
                nodes: (0..nodes)
                    .map(|i| NodeSpec {
                        name: format!("n{i}"),
                        gpus: per_node,
                        gpu_type: None,
                    })
                    .collect(),
                drains: Vec::new(),
            },
            since: 0,
            until: 100_000,
            source: "test".into(),
        }
    }

    fn sim(t: &Trace, c: &Config, params: &SimParams) -> Outcome {
        simulate(t, c, params, &mut |_| {})
    }

    fn starts(o: &Outcome) -> Vec<Vec<(Secs, Secs)>> {
        o.jobs
            .iter()
            .map(|j| j.runs.iter().map(|r| (r.start, r.end)).collect())
            .collect()
    }

    #[test]
    fn siloed_a_team_waits_for_its_own_quota() {
        // a has quota 4 on one 8-GPU node, b is idle. Siloed: a's second 4-GPU job may not
        // borrow b's idle quota, so it starts when the first ends: at 0 + 100 = 100.
        let t = trace(vec![job(1, "a", 0, 4, 100), job(2, "a", 0, 4, 100)], 1, 8);
        let shared = config("", "", no_wait());
        let o = sim(&t, &crate::replay::siloed(&shared), &SimParams::default());
        assert_eq!(starts(&o), vec![vec![(0, 100)], vec![(100, 200)]]);
        // Shared: the second borrows b's idle 4 GPUs and starts at once.
        let o = sim(&t, &shared, &SimParams::default());
        assert_eq!(starts(&o), vec![vec![(0, 100)], vec![(0, 100)]]);
        assert!(o.jobs[1].runs[0].borrowed && !o.jobs[0].runs[0].borrowed);
    }

    #[test]
    fn reclaim_restarts_the_borrower_from_zero_without_a_checkpoint() {
        // a runs 4 in quota and 4 borrowed from 0; b submits 4 GPUs at 50. b's job is in
        // quota: it preempts a's borrowed job (grace 0) and starts at 50, waiting 0 s.
        // a's job lost 50 s x 4 GPUs = 200 GPU-s, is requeued and may start again at
        // 50 + 121 = 171 (a's first job ended at 100, so a's quota is free), needs its full
        // 100 s again: [171, 271).
        let t = trace(
            vec![
                job(1, "a", 0, 4, 100),
                job(2, "a", 0, 4, 100),
                job(3, "b", 50, 4, 100),
            ],
            1,
            8,
        );
        let c = config("", "", no_wait());
        let o = sim(&t, &c, &slurm_requeue_delay());
        assert_eq!(
            starts(&o),
            vec![vec![(0, 100)], vec![(0, 50), (171, 271)], vec![(50, 150)]]
        );
        assert_eq!(o.jobs[1].lost_gpu_secs, 200);
        assert_eq!(o.jobs[1].preemptions(), 1);
        assert!(o.jobs[1].runs[0].preempted && !o.jobs[1].runs[1].borrowed);
        // b's job fitted its quota from its submission.
        assert_eq!(o.jobs[2].in_quota_since, Some(50));
        // The governor lifts the delay after 3 s (53): the job starts again as soon as a's
        // quota is free, when a's first job ends at 100.
        let o = sim(&t, &c, &SimParams::default());
        assert_eq!(starts(&o)[1], vec![(0, 50), (100, 200)]);
    }

    /// Slurm's own requeue delay (121 s), as the hand-worked tests count it.
    fn slurm_requeue_delay() -> SimParams {
        SimParams {
            requeue_delay: 121,
            ..SimParams::default()
        }
    }

    #[test]
    fn a_checkpointing_job_loses_at_most_its_interval() {
        // As above, but a checkpoints every 30 s: at 50 it has 30 s saved and loses 20 s x 4
        // = 80 GPU-s; it needs 100 - 30 = 70 s more: [171, 241).
        let t = trace(
            vec![
                job(1, "a", 0, 4, 100),
                job(2, "a", 0, 4, 100),
                job(3, "b", 50, 4, 100),
            ],
            1,
            8,
        );
        let c = config("", "", no_wait());
        let params = SimParams {
            checkpoint: BTreeMap::from([("a".to_string(), 30)]),
            ..slurm_requeue_delay()
        };
        let o = sim(&t, &c, &params);
        assert_eq!(starts(&o)[1], vec![(0, 50), (171, 241)]);
        assert_eq!(o.jobs[1].lost_gpu_secs, 80);
    }

    #[test]
    fn min_runtime_protects_a_young_borrower() {
        // min runtime 60 s: a's borrowed job (started at 0) is no victim before 60. b's job
        // submitted at 50 waits 10 s and preempts it at 60; a loses 60 x 4 = 240 GPU-s.
        let t = trace(
            vec![
                job(1, "a", 0, 4, 100),
                job(2, "a", 0, 4, 100),
                job(3, "b", 50, 4, 100),
            ],
            1,
            8,
        );
        let c = config(
            "",
            "",
            "reclaim_grace = \"0s\"\nmin_runtime_before_reclaim = \"60s\"",
        );
        let o = sim(&t, &c, &SimParams::default());
        assert_eq!(starts(&o)[2], vec![(60, 160)]);
        assert_eq!(starts(&o)[1][0], (0, 60));
        assert_eq!(o.jobs[1].lost_gpu_secs, 240);
    }

    #[test]
    fn grace_keeps_the_victims_gpus_until_it_ends() {
        // grace 30 s: the victim is signalled at 50 and leaves at 80; b starts at 80 and a's
        // job, having run 80 s, lost 80 x 4 = 320 GPU-s.
        let t = trace(
            vec![
                job(1, "a", 0, 4, 100),
                job(2, "a", 0, 4, 100),
                job(3, "b", 50, 4, 100),
            ],
            1,
            8,
        );
        let c = config(
            "",
            "",
            "reclaim_grace = \"30s\"\nmin_runtime_before_reclaim = \"0s\"",
        );
        let o = sim(&t, &c, &SimParams::default());
        assert_eq!(starts(&o)[2], vec![(80, 180)]);
        assert_eq!(o.jobs[1].lost_gpu_secs, 320);
    }

    #[test]
    fn lend_limit_zero_keeps_the_idle_quota_unlent() {
        // b lends nothing and the cluster has no unallocated GPU (8 = 4 + 4): a's second job
        // waits for a's first to end at 100, as siloed.
        let t = trace(vec![job(1, "a", 0, 4, 100), job(2, "a", 0, 4, 100)], 1, 8);
        let c = config("", "lend_limit = 0", no_wait());
        let o = sim(&t, &c, &SimParams::default());
        assert_eq!(starts(&o), vec![vec![(0, 100)], vec![(100, 200)]]);
    }

    #[test]
    fn a_non_preemptible_class_never_borrows() {
        // a's second inference job (not preemptible) does not fit a's quota while its first
        // runs, and cannot displace a job of its own class: it is parked until the first ends
        // at 100, though b's 4 GPUs are idle.
        let mut first = job(1, "a", 0, 4, 100);
        first.class = Some("inference".into());
        let mut second = job(2, "a", 10, 4, 100);
        second.class = Some("inference".into());
        let t = trace(vec![first, second], 1, 8);
        let c = config("", "", no_wait());
        let o = sim(&t, &c, &SimParams::default());
        assert_eq!(starts(&o)[1], vec![(100, 200)]);
        assert!(!o.jobs[1].runs[0].borrowed);
    }

    #[test]
    fn a_higher_class_displaces_its_own_teams_lower_class() {
        // a's inference job at 10 does not fit a's quota (a's unclassed job holds it): the
        // governor requeues a's own lower-class job (preempt_within_team = lower-priority), so
        // the inference job starts at 10. The displaced job lost 10 x 4 = 40 GPU-s and runs
        // again from 10 + 121 = 131: [131, 231).
        let mut inference = job(2, "a", 10, 4, 100);
        inference.class = Some("inference".into());
        let t = trace(vec![job(1, "a", 0, 4, 100), inference], 1, 8);
        let c = config("", "", no_wait());
        let o = sim(&t, &c, &slurm_requeue_delay());
        assert_eq!(starts(&o), vec![vec![(0, 10), (131, 231)], vec![(10, 110)]]);
        assert_eq!(o.jobs[0].lost_gpu_secs, 40);
        // With the governor lifting the delay: b's idle quota is lent to it at 13.
        let o = sim(&t, &c, &SimParams::default());
        assert_eq!(starts(&o)[0], vec![(0, 10), (13, 113)]);
    }

    #[test]
    fn a_drained_node_takes_no_new_job() {
        // Two 4-GPU nodes; n1 is drained over [0, 500). a's job holds n0 over [0, 100); b's
        // job (in quota, submitted at 10) has nowhere to go and nothing to preempt (a is in
        // quota): it starts on n0 at 100, waiting 90 s.
        let mut t = trace(vec![job(1, "a", 0, 4, 100), job(2, "b", 10, 4, 100)], 2, 4);
        t.cluster.drains.push(crate::replay::Drain {
            node: "n1".into(),
            since: 0,
            until: 500,
        });
        let c = config("", "", no_wait());
        let o = sim(&t, &c, &SimParams::default());
        assert_eq!(starts(&o), vec![vec![(0, 100)], vec![(100, 200)]]);
        assert_eq!(o.capacity, vec![(0, 4), (500, 8)]);
    }

    #[test]
    fn backfill_fills_a_hole_only_with_what_ends_in_time() {
        // Two 8-GPU nodes; a's quota is 8, b's 12. a's job 1 (6 GPUs, limit 200) takes n0 and
        // a's job 2 (8 GPUs, limit 600) n1, borrowing b's idle quota; min runtime 1000 s keeps
        // job 2 from being reclaimed. b's 8-GPU job 3 (in quota, submitted at 1) fits no node:
        // backfill reserves n0 for it from 0 + 200 (job 1's time limit). b's 1-GPU job 4
        // (limit 100, at 2) ends by 102 <= 200 and backfills on n0's 2 free GPUs at 2; b's
        // 1-GPU job 5 (limit 600, at 3) would end after 200 on the reserved node: it waits.
        // Job 1 really ends at 100: job 3 starts then, on n0, and ends at 200, when job 5
        // takes n0: [200, 500).
        let t = trace(
            vec![
                job(1, "a", 0, 6, 100),
                job(2, "a", 0, 8, 300),
                job(3, "b", 1, 8, 100),
                job(4, "b", 2, 1, 50),
                job(5, "b", 3, 1, 300),
            ],
            2,
            8,
        );
        let c = config_q(
            8,
            12,
            "",
            "",
            "reclaim_grace = \"0s\"\nmin_runtime_before_reclaim = \"1000s\"",
        );
        let o = sim(&t, &c, &SimParams::default());
        let s = starts(&o);
        assert_eq!(s[0], vec![(0, 100)]);
        assert_eq!(s[1], vec![(0, 300)]);
        assert_eq!(s[3], vec![(2, 52)], "job 4 backfills");
        assert_eq!(s[2], vec![(100, 200)]);
        assert_eq!(
            s[4],
            vec![(200, 500)],
            "job 5 does not jump the reservation"
        );
    }

    #[test]
    fn the_same_input_gives_the_same_outcome() {
        let t = trace(
            vec![
                job(1, "a", 0, 4, 100),
                job(2, "a", 0, 4, 100),
                job(3, "b", 50, 4, 100),
            ],
            1,
            8,
        );
        let c = config("", "", no_wait());
        assert_eq!(
            sim(&t, &c, &SimParams::default()),
            sim(&t, &c, &SimParams::default())
        );
    }

    mod property {
        use super::*;
        use proptest::prelude::*;

        /// A history of one-GPU jobs (no fragmentation) on one 8-GPU node: team, submit, work.
        fn history() -> impl Strategy<Value = Vec<(u8, Secs, Secs)>> {
            prop::collection::vec((0u8..3, 0i64..2_000, 1i64..600), 1..40)
        }

        proptest! {
            #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

            /// Sharing with borrowing never starts a job later than siloed would, beyond the
            /// reclaim delay: min runtime (a victim's protection) + grace + one pass.
            #[test]
            fn sharing_never_delays_a_job_beyond_the_reclaim_delay(
                jobs in history(),
                fair in any::<bool>(),
                min_runtime in 0i64..120,
                grace in 0i64..60,
            ) {
                let text = format!(
                    r#"
[cluster]
name = "p"
partitions = ["gpu"]
idle_sharing = "{}"
currency = "USD"
[gpu_types.default]
rate_per_hour = 1.0
[[team]]
name = "t0"
quota = 3
[[team]]
name = "t1"
quota = 3
[[team]]
name = "t2"
quota = 2
[governance]
reclaim_grace = "{grace}s"
min_runtime_before_reclaim = "{min_runtime}s"
"#,
                    if fair { "fair-share" } else { "fifo" }
                );
                let shared = teamshare_config::parse(&text, "p.toml").expect("config");
                let mut list: Vec<TraceJob> = jobs
                    .iter()
                    .enumerate()
                    .map(|(i, (team, submit, work))| {
                        job(i as u64 + 1, &format!("t{team}"), *submit, 1, *work)
                    })
                    .collect();
                list.sort_by_key(|j| (j.submit, j.id));
                let t = trace(list, 1, 8);
                let params = SimParams::default();
                let silo = sim(&t, &crate::replay::siloed(&shared), &params);
                let share = sim(&t, &shared, &params);
                let delay = min_runtime + grace + params.pass_interval + 1;
                let self_preempted: std::collections::BTreeSet<&str> = share
                    .jobs
                    .iter()
                    .filter(|o| o.preemptions() > 0)
                    .map(|o| t.jobs[o.job].team.as_str())
                    .collect();
                for (i, (s, b)) in silo.jobs.iter().zip(&share.jobs).enumerate() {
                    // In quota: it fitted its team's unused quota when it was submitted. A
                    // team whose own borrowed jobs were preempted is left out: requeued, they
                    // keep their older submit time and go ahead of its later jobs in its own
                    // quota (the price of its own borrowing, not a lender's loss).
                    let submit = t.jobs[i].submit;
                    if b.in_quota_since != Some(submit) || self_preempted.contains(t.jobs[i].team.as_str()) {
                        continue;
                    }
                    let shared = b.first_start();
                    prop_assert!(
                        shared.is_some_and(|x| x <= submit + delay),
                        "in-quota job {} ({}) submitted at {} starts at {:?}",
                        t.jobs[i].id, t.jobs[i].team, submit, shared
                    );
                    if let (Some(siloed), Some(shared)) = (s.first_start(), shared) {
                        prop_assert!(
                            shared <= siloed + delay,
                            "job {} ({}) starts at {} shared, {} siloed",
                            t.jobs[i].id, t.jobs[i].team, shared, siloed
                        );
                    }
                }
            }
        }
    }
}
