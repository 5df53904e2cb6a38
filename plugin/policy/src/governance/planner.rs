//! The governor's plan kept between passes, for a caller that sees jobs arrive, start and end
//! one at a time: the governor, which reads Slurm's jobs anew and hands over those that
//! changed, and accountd replay's simulated cluster, which passes a million times over a year
//! of a large site. Both plan through a [`Planner`]; [`plan`](super::plan) is the same phases
//! from scratch, for one-off callers and as the reference the tests hold a [`Planner`] to.
//!
//! [`plan`](super::plan) groups and sorts every job on every pass, and hands back every
//! priority. A [`Planner`] keeps each team's jobs in the order the phases walk them as they
//! change, runs the same phases ([`decide`]) over them, and hands back only
//! the priorities that changed since its previous pass (or all of them, when asked). What it
//! decides is what `plan` decides for the same jobs (tested in `tests/planner.rs` against
//! `plan` over random histories).
//!
//! A pending record standing for several array tasks (`tasks > 1`) is held as the tasks
//! `plan` expands it into (no more than could ever hold the cluster's GPUs at once), filed
//! one by one, all under the record's id. A typed configuration (each GPU type planned with
//! what the others left of the shared limits, and shards on the GPUs they share) is planned
//! from scratch at every pass, over the records the planner holds: what changes between
//! passes there is the limits themselves.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use teamshare_config::Config;

use super::nodes::{NodeSet, PassNodes};
use super::pool::{assemble, decide, Pass, StateInput};
use super::queues::{size_key, Entry, Lists, Queues, Sink, Table, Tail};
use super::rules::{PendingKey, Rules, RunningKey};
use super::running::TeamRunning;
use super::{ClusterJob, GovernInput, Phase, Plan, ShardPlaces};

/// Where a job is filed among the lists the phases walk.
#[derive(Clone, Copy)]
enum Filed {
    /// Running, in its team's list (team's place in the configuration).
    Running(usize, RunningKey),
    /// Pending and ranked, in its team's queue.
    Pending(usize, PendingKey),
    /// Running, of no team (it holds its nodes' GPUs all the same).
    Other,
    /// Pending and not ranked (held by its owner), or pending outside every team.
    Nowhere,
}

struct Held {
    job: ClusterJob,
    filed: Filed,
    /// The slot of the record this is a task of (its own slot for a record).
    record: usize,
}

/// What a pass needs besides the jobs and the usable nodes ([`Planner::set_nodes`],
/// [`Planner::set_types`]; see [`GovernInput`]).
pub struct PassInput<'a> {
    /// C: GPUs of usable nodes in the governed partitions.
    pub capacity: u32,
    /// Fair-share factor per team (missing: 1.0).
    pub fairshare: &'a BTreeMap<String, f64>,
    pub now: i64,
    /// The same instant in milliseconds (see [`GovernInput`]).
    pub now_ms: i64,
    /// Make the state the plugin reads ([`Plan::state`]; the replay publishes none).
    pub publish: bool,
    /// Hand back every ranked job's priority, not only those that changed (the governor,
    /// whose actions may not apply every plan, compares them with what Slurm holds).
    pub all_priorities: bool,
}

/// The governor's plan over jobs kept between passes (see the module's documentation).
pub struct Planner<'c> {
    rules: Rules<'c>,
    /// Team name to its place in the configuration.
    index: BTreeMap<String, usize>,
    jobs: Vec<Option<Held>>,
    vacant: Vec<usize>,
    slot_of: HashMap<u64, usize>,
    /// Per team, its running jobs in phase-1 order.
    running: Vec<Vec<(RunningKey, usize)>>,
    /// Per team, its ranked pending jobs in phase-3 order.
    pending: Vec<Vec<(PendingKey, usize)>>,
    /// Running jobs of no team.
    others: Vec<usize>,
    /// Records of no team, for [`Plan::outside`].
    no_team: Vec<usize>,
    /// The further task slots of each array record held as several tasks.
    tasks_of: HashMap<u64, Vec<usize>>,
    /// The ids of the records with `tasks > 1`, and the capacity their tasks were counted
    /// for (they are counted again when it changes).
    arrays: BTreeSet<u64>,
    capacity: u32,
    /// What a typed configuration's pass reads besides the jobs (see [`GovernInput`]).
    node_gpus: BTreeMap<String, u32>,
    capacity_by_type: BTreeMap<String, u32>,
    node_types: BTreeMap<String, BTreeMap<String, u32>>,
    shards: ShardPlaces,
    /// The usable nodes, and the GPUs held on them by the running jobs that are not ending,
    /// kept as they start and end instead of summed over them at every pass that needs them.
    nodes: NodeSet,
    /// Per team: ranked pending jobs of a non-preemptible class not parked (see [`Queues`]).
    unparked: Vec<BTreeSet<usize>>,
    /// Per team: ranked pending jobs that can start, by (class value, GPUs, nodes).
    alike: Vec<Vec<(super::rules::Alike, u32)>>,
    /// Per team: the same jobs by the GPUs they ask for, in the team's order (see
    /// [`Queues`]).
    sized: Vec<super::queues::Sized>,
    /// Per team: those of them that may borrow (preemptible and eligible), in order.
    askable: Vec<BTreeSet<(PendingKey, usize)>>,
    /// What the tails' priorities depend on, to hand back only those that may have changed:
    /// the jobs inserted or changed since the last pass, those each team's last pass walked
    /// (before its tail), and the band each team's tail had.
    touched: Vec<usize>,
    walked: Vec<Vec<usize>>,
    tail_band: Vec<Option<u32>>,
    /// Per team, phase 1's split of its running jobs, until one of them changes.
    kept: Vec<Option<TeamRunning>>,
    /// The priority each job was last given.
    given: Vec<Option<u32>>,
    /// The read each record was last seen in ([`Planner::hold_read`]), and the last read's.
    seen: Vec<u64>,
    reads: u64,
    /// This pass's priorities, and the jobs that got one.
    next: Vec<Option<u32>>,
    written: Vec<usize>,
}

impl<'c> Planner<'c> {
    pub fn new(config: &'c Config) -> Planner<'c> {
        let teams = config.teams.len();
        Planner {
            rules: Rules::new(config),
            index: config
                .teams
                .iter()
                .enumerate()
                .map(|(i, t)| (t.name.clone(), i))
                .collect(),
            jobs: Vec::new(),
            vacant: Vec::new(),
            slot_of: HashMap::new(),
            running: vec![Vec::new(); teams],
            pending: vec![Vec::new(); teams],
            others: Vec::new(),
            no_team: Vec::new(),
            tasks_of: HashMap::new(),
            arrays: BTreeSet::new(),
            capacity: 0,
            node_gpus: BTreeMap::new(),
            capacity_by_type: BTreeMap::new(),
            node_types: BTreeMap::new(),
            shards: ShardPlaces::new(),
            nodes: NodeSet::default(),
            unparked: vec![BTreeSet::new(); teams],
            alike: vec![Vec::new(); teams],
            sized: vec![BTreeMap::new(); teams],
            askable: vec![BTreeSet::new(); teams],
            touched: Vec::new(),
            walked: vec![Vec::new(); teams],
            tail_band: vec![None; teams],
            kept: vec![None; teams],
            given: Vec::new(),
            seen: Vec::new(),
            reads: 0,
            next: Vec::new(),
            written: Vec::new(),
        }
    }

    /// The jobs the planner holds.
    pub fn len(&self) -> usize {
        self.slot_of.len()
    }

    pub fn is_empty(&self) -> bool {
        self.slot_of.is_empty()
    }

    pub fn get(&self, id: u64) -> Option<&ClusterJob> {
        let slot = *self.slot_of.get(&id)?;
        self.jobs[slot].as_ref().map(|h| &h.job)
    }

    /// Every job the planner holds (each array record once), in no particular order.
    pub fn jobs(&self) -> impl Iterator<Item = &ClusterJob> {
        self.jobs
            .iter()
            .enumerate()
            .filter_map(|(slot, h)| h.as_ref().filter(|h| h.record == slot))
            .map(|h| &h.job)
    }

    /// The priority the last pass gave the job (none before its first pass, or while it is
    /// not ranked).
    pub fn priority(&self, id: u64) -> Option<u32> {
        let slot = *self.slot_of.get(&id)?;
        self.given[slot]
    }

    /// The running jobs idle for the whole idle window ([`GovernInput::idle`](super::GovernInput::idle)),
    /// until they are set again: where the configuration orders idle jobs first, the first
    /// of rule 3's victims from the next pass on (none until set).
    pub fn set_idle(&mut self, idle: BTreeSet<u64>) {
        if self.rules.set_idle(idle) {
            // Each team's split of its running jobs orders those beyond its ceiling as rule 3
            // does: split again.
            self.kept.iter_mut().for_each(|k| *k = None);
        }
    }

    /// The usable nodes of the governed partitions and their GPUs (none: placement unknown),
    /// until they are set again (a node drained or back).
    pub fn set_nodes(&mut self, node_gpus: &BTreeMap<String, u32>) {
        if self.node_gpus != *node_gpus {
            self.nodes.set_usable(node_gpus);
            self.node_gpus.clone_from(node_gpus);
        }
    }

    /// The GPUs of each type on the usable nodes, in all and per node (see [`GovernInput`]),
    /// until they are set again.
    pub fn set_types(
        &mut self,
        capacity_by_type: &BTreeMap<String, u32>,
        node_types: &BTreeMap<String, BTreeMap<String, u32>>,
    ) {
        self.capacity_by_type.clone_from(capacity_by_type);
        if self.node_types != *node_types {
            self.node_types.clone_from(node_types);
        }
    }

    /// Where the running shard jobs' shards are ([`GovernInput::shard_gpus`]), until set again.
    pub fn set_shard_places(&mut self, places: ShardPlaces) {
        self.shards = places;
    }

    /// A job appears (as squeue would list it); one already held under its id is replaced.
    pub fn insert(&mut self, job: ClusterJob) {
        self.insert_at(job);
    }

    /// [`Planner::insert`], and the record's slot.
    fn insert_at(&mut self, job: ClusterJob) -> usize {
        self.remove(job.id);
        let id = job.id;
        let tasks = task_count(&job, self.capacity);
        let task = (tasks > 1).then(|| ClusterJob {
            tasks: 1,
            ..job.clone()
        });
        if job.tasks > 1 {
            self.arrays.insert(id);
        }
        let team = self.index.get(job.team.as_str()).copied();
        let slot = self.put(job, None);
        self.slot_of.insert(id, slot);
        if team.is_none() {
            self.no_team.push(slot);
        }
        if let Some(task) = task {
            let more = (1..tasks)
                .map(|_| self.put(task.clone(), Some(slot)))
                .collect();
            self.tasks_of.insert(id, more);
        }
        slot
    }

    /// A slot for `job` (a task of the record in `record`'s slot, or a record), filed.
    fn put(&mut self, job: ClusterJob, record: Option<usize>) -> usize {
        let slot = match self.vacant.pop() {
            Some(s) => s,
            None => {
                self.jobs.push(None);
                self.given.push(None);
                self.next.push(None);
                self.seen.push(0);
                self.jobs.len() - 1
            }
        };
        self.given[slot] = None;
        self.jobs[slot] = Some(Held {
            job,
            filed: Filed::Nowhere,
            record: record.unwrap_or(slot),
        });
        self.file(slot);
        self.touched.push(slot);
        slot
    }

    /// A job is gone (ended, cancelled, or no longer in the governed partitions).
    pub fn remove(&mut self, id: u64) -> Option<ClusterJob> {
        let slot = self.slot_of.remove(&id)?;
        if self.is_array(slot) {
            for task in self.tasks_of.remove(&id).unwrap_or_default() {
                self.unfile(task);
                self.jobs[task] = None;
                self.vacant.push(task);
            }
            self.arrays.remove(&id);
        }
        self.unfile(slot);
        if let Some(i) = self.no_team.iter().position(|s| *s == slot) {
            self.no_team.swap_remove(i);
        }
        self.given[slot] = None;
        self.vacant.push(slot);
        self.jobs[slot].take().map(|h| h.job)
    }

    /// Whether the record in `slot` stands for several array tasks.
    fn is_array(&self, slot: usize) -> bool {
        self.jobs[slot].as_ref().is_some_and(|h| h.job.tasks > 1)
    }

    /// A job changed (started, is ending, was held or released, ...): `change` edits it, and
    /// it is filed again where it now belongs. Its id must stay the same.
    pub fn update(&mut self, id: u64, change: impl FnOnce(&mut ClusterJob)) {
        let Some(&slot) = self.slot_of.get(&id) else {
            return;
        };
        if self.is_array(slot) {
            // Its tasks are counted again.
            if let Some(mut job) = self.remove(id) {
                change(&mut job);
                debug_assert_eq!(job.id, id, "Planner::update must keep the job's id");
                self.insert(job);
            }
            return;
        }
        self.unfile(slot);
        let mut array = false;
        if let Some(h) = self.jobs[slot].as_mut() {
            change(&mut h.job);
            debug_assert_eq!(h.job.id, id, "Planner::update must keep the job's id");
            array = h.job.tasks > 1;
        }
        if array {
            // Now an array record of several tasks.
            if let Some(job) = self.remove(id) {
                self.insert(job);
            }
            return;
        }
        self.file(slot);
        self.touched.push(slot);
    }

    /// Every job as the governor read them: each observed ([`Planner::observe`]), and the
    /// jobs held that the read does not list removed (ended, or no longer governed).
    pub fn hold_read(&mut self, jobs: &[ClusterJob]) {
        self.reads += 1;
        let read = self.reads;
        for j in jobs {
            let slot = self.observe_at(j);
            self.seen[slot] = read;
        }
        let gone: Vec<u64> = self
            .slot_of
            .iter()
            .filter(|&(_, &slot)| self.seen[slot] != read)
            .map(|(id, _)| *id)
            .collect();
        for id in gone {
            self.remove(id);
        }
    }

    /// A job as the governor read it again: inserted, or filed anew where its record changed
    /// where the phases order it. Where the priority Slurm holds differs from the one last
    /// given (a pass whose actions were put off, or refused), the next pass plans from
    /// Slurm's, as [`plan`](super::plan) would, and writes the job's priority whatever it
    /// was given.
    pub fn observe(&mut self, job: &ClusterJob) {
        self.observe_at(job);
    }

    /// [`Planner::observe`], and the job's slot.
    fn observe_at(&mut self, job: &ClusterJob) -> usize {
        let Some(&slot) = self.slot_of.get(&job.id) else {
            return self.insert_at(job.clone());
        };
        let rules = &self.rules;
        let Some(h) = self.jobs[slot].as_mut() else {
            return slot;
        };
        if h.job != *job {
            // Only the level moved (the class, in the low bits, orders; the level does not):
            // the job keeps its place.
            let same_place = Rules::ranked(&h.job) == Rules::ranked(job)
                && rules.class_idx(&h.job) == rules.class_idx(job)
                && {
                    let was = std::mem::replace(&mut h.job.priority, job.priority);
                    let same = h.job == *job;
                    if !same {
                        h.job.priority = was;
                    }
                    same
                };
            if !same_place {
                return self.insert_at(job.clone());
            }
        }
        if self.given[slot].is_none_or(|p| p == job.priority) {
            return slot;
        }
        self.given[slot] = None;
        self.touched.push(slot);
        if let Filed::Running(t, _) = h.filed {
            // Phase 1 writes the team's running jobs again.
            self.kept[t] = None;
        }
        for &task in self.tasks_of.get(&job.id).into_iter().flatten() {
            if let Some(t) = self.jobs[task].as_mut() {
                t.job.priority = job.priority;
            }
            self.touched.push(task);
        }
        slot
    }

    fn file(&mut self, slot: usize) {
        let Some(h) = self.jobs[slot].as_ref() else {
            return;
        };
        let j = &h.job;
        let team = self.index.get(j.team.as_str()).copied();
        let filed = match (team, j.phase) {
            (Some(t), Phase::Running) => {
                let key = self.rules.running_key(j);
                let list = &mut self.running[t];
                let at = list.partition_point(|e| (e.0, e.1) < (key, slot));
                list.insert(at, (key, slot));
                self.kept[t] = None;
                Filed::Running(t, key)
            }
            (Some(t), Phase::Pending) if Rules::ranked(j) => {
                let key = self.rules.pending_key(j);
                let list = &mut self.pending[t];
                let at = list.partition_point(|e| (e.0, e.1) < (key, slot));
                list.insert(at, (key, slot));
                if !self.rules.preemptible(j) && !j.park_held {
                    self.unparked[t].insert(slot);
                }
                if j.startable() {
                    let a = self.rules.alike(j);
                    let counts = &mut self.alike[t];
                    match counts.binary_search_by(|(k, _)| k.cmp(&a)) {
                        Ok(i) => counts[i].1 += 1,
                        Err(i) => counts.insert(i, (a, 1)),
                    }
                    self.sized[t]
                        .entry(size_key(j))
                        .or_default()
                        .insert((key, slot));
                    if self.rules.preemptible(j) && j.eligible {
                        self.askable[t].insert((key, slot));
                    }
                }
                Filed::Pending(t, key)
            }
            (None, Phase::Running) => {
                self.others.push(slot);
                Filed::Other
            }
            _ => Filed::Nowhere,
        };
        if matches!(filed, Filed::Nowhere) {
            // Not ranked: the plan gives it no priority.
            self.given[slot] = None;
        }
        self.nodes.hold(j, true);
        if let Some(h) = self.jobs[slot].as_mut() {
            h.filed = filed;
        }
    }

    fn unfile(&mut self, slot: usize) {
        let Some(h) = self.jobs[slot].as_mut() else {
            return;
        };
        let filed = std::mem::replace(&mut h.filed, Filed::Nowhere);
        self.nodes.hold(&h.job, false);
        match filed {
            Filed::Running(t, key) => {
                let list = &mut self.running[t];
                if let Ok(at) = list.binary_search(&(key, slot)) {
                    list.remove(at);
                }
                self.kept[t] = None;
            }
            Filed::Pending(t, key) => {
                let list = &mut self.pending[t];
                if let Ok(at) = list.binary_search(&(key, slot)) {
                    list.remove(at);
                }
                self.unparked[t].remove(&slot);
                if h.job.startable() {
                    let a = self.rules.alike(&h.job);
                    let counts = &mut self.alike[t];
                    if let Ok(i) = counts.binary_search_by(|(k, _)| k.cmp(&a)) {
                        counts[i].1 -= 1;
                        if counts[i].1 == 0 {
                            counts.remove(i);
                        }
                    }
                    let size = size_key(&h.job);
                    if let Some(set) = self.sized[t].get_mut(&size) {
                        set.remove(&(key, slot));
                        if set.is_empty() {
                            self.sized[t].remove(&size);
                        }
                    }
                    self.askable[t].remove(&(key, slot));
                }
            }
            Filed::Other => {
                if let Some(i) = self.others.iter().position(|s| *s == slot) {
                    self.others.swap_remove(i);
                }
            }
            Filed::Nowhere => {}
        }
    }

    /// One pass over the jobs as they are now.
    pub fn plan(&mut self, input: &PassInput<'_>) -> Plan {
        if self.capacity != input.capacity {
            self.capacity = input.capacity;
            self.count_tasks_again();
        }
        if self.rules.config.is_typed() {
            return self.plan_anew(input);
        }
        let Planner {
            rules,
            jobs,
            running,
            pending,
            others,
            no_team,
            given,
            next,
            written,
            nodes,
            unparked,
            alike,
            sized,
            askable,
            touched,
            walked,
            tail_band,
            kept,
            capacity_by_type,
            tasks_of,
            ..
        } = self;
        let queues = table_queues(
            jobs,
            (running, pending),
            others,
            unparked,
            alike,
            sized,
            askable,
        );
        let pass = Pass {
            capacity: input.capacity,
            fairshare: input.fairshare,
            now: input.now,
            now_ms: input.now_ms,
            nodes: PassNodes::Kept(nodes),
        };
        written.clear();
        let mut sink = SlotSink {
            next,
            written,
            rules,
            jobs,
            touched,
            walked,
            tail_band,
            given: given.as_slice(),
            tasks: !tasks_of.is_empty(),
        };
        let d = decide(rules, &pass, &queues, &mut sink, Some(kept));
        for (t, walked) in walked.iter_mut().enumerate() {
            walked.clear();
            walked.extend(pending[t][..d.walked[t]].iter().map(|e| e.1));
        }
        touched.clear();
        // A borrower lent to this pass has a priority its tail's band does not say.
        touched.extend(d.granted.iter().copied());
        let changed = changed_priorities(written, next, given, jobs);
        let priorities = all_priorities(given, jobs, input.all_priorities);
        let state = StateInput {
            config: rules.config,
            capacity: input.capacity,
            capacity_by_type,
            fairshare: input.fairshare,
            now: input.now,
        };
        let outside = outside_records(no_team, jobs);
        let mut plan = assemble(d, priorities, outside, &state, input.publish).plan;
        plan.changed = changed;
        plan
    }

    /// A typed configuration's pass: [`plan`](super::plan) over the records held.
    fn plan_anew(&mut self, input: &PassInput<'_>) -> Plan {
        let rows: Vec<ClusterJob> = self.jobs().cloned().collect();
        let mut plan = super::plan(&GovernInput {
            config: self.rules.config,
            capacity: input.capacity,
            jobs: &rows,
            fairshare: input.fairshare,
            now: input.now,
            now_ms: input.now_ms,
            node_gpus: &self.node_gpus,
            capacity_by_type: &self.capacity_by_type,
            node_types: &self.node_types,
            idle: self.rules.idle_set(),
            shard_gpus: &self.shards,
        });
        self.touched.clear();
        let mut changed = Vec::new();
        for (&id, &slot) in &self.slot_of {
            let p = plan.priorities.get(&id).copied();
            if p != self.given[slot] {
                self.given[slot] = p;
                if let Some(p) = p {
                    changed.push((id, p));
                }
            }
        }
        changed.sort_unstable();
        plan.changed = changed;
        if !input.all_priorities {
            plan.priorities = BTreeMap::new();
        }
        if !input.publish {
            plan.state = super::PublishedState::default();
        }
        plan
    }

    /// Each array record held as as many tasks as the capacity now says.
    fn count_tasks_again(&mut self) {
        let ids: Vec<u64> = self.arrays.iter().copied().collect();
        for id in ids {
            if let Some(job) = self.remove(id) {
                self.insert(job);
            }
        }
    }
}

/// Per team, its running and its ranked pending jobs' places, in the phases' order.
type TeamLists<'p> = (
    &'p [Vec<(RunningKey, usize)>],
    &'p [Vec<(PendingKey, usize)>],
);

/// A pass's queues over a [`Planner`]'s lists of places in its table.
fn table_queues<'p>(
    jobs: &'p Vec<Option<Held>>,
    (running, pending): TeamLists<'p>,
    others: &[usize],
    unparked: &[BTreeSet<usize>],
    alike: &'p [Vec<(super::rules::Alike, u32)>],
    sized: &'p [super::queues::Sized],
    askable: &'p [BTreeSet<(PendingKey, usize)>],
) -> Queues<'p> {
    let entry = |slot: usize| -> Option<Entry<'p>> {
        jobs[slot].as_ref().map(|h| Entry { job: &h.job, slot })
    };
    Queues {
        lists: Lists::Table {
            running,
            pending,
            table: jobs,
        },
        others_running: others.iter().filter_map(|s| entry(*s)).collect(),
        outside: Vec::new(),
        sized: Some(sized),
        askable: Some(askable),
        alike: std::borrow::Cow::Borrowed(alike),
        unparked: Some(
            unparked
                .iter()
                .map(|set| set.iter().filter_map(|s| entry(*s)).collect())
                .collect(),
        ),
    }
}

/// The records of no team that hold or ask for GPUs ([`Plan::outside`]), by id.
fn outside_records(no_team: &[usize], jobs: &[Option<Held>]) -> Vec<u64> {
    let mut outside: Vec<u64> = no_team
        .iter()
        .filter_map(|s| jobs[*s].as_ref())
        .filter(|h| super::queues::is_outside(&h.job))
        .map(|h| h.job.id)
        .collect();
    outside.sort_unstable();
    outside
}

/// How many tasks a record is held as: what [`plan`](super::plan) expands it into.
fn task_count(j: &ClusterJob, capacity: u32) -> u32 {
    if j.tasks <= 1 {
        return 1;
    }
    let fit = if j.gpus == 0 {
        1
    } else {
        capacity.div_ceil(j.gpus).saturating_add(1)
    };
    j.tasks.min(fit).max(1)
}

/// The priorities a pass wrote (`written`, `next`) that differ from those last given, in the
/// order written: they become the ones given. A task's are its record's (the sink writes them there).
fn changed_priorities(
    written: &[usize],
    next: &mut [Option<u32>],
    given: &mut [Option<u32>],
    jobs: &[Option<Held>],
) -> Vec<(u64, u32)> {
    let mut changed = Vec::new();
    for &slot in written {
        let Some(p) = next[slot].take() else {
            continue; // written twice
        };
        if given[slot] != Some(p) {
            given[slot] = Some(p);
            if let Some(h) = jobs[slot].as_ref() {
                changed.push((h.job.id, p));
            }
        }
    }
    changed
}

/// Every ranked record's priority, as last given, where `asked` (else none).
fn all_priorities(given: &[Option<u32>], jobs: &[Option<Held>], asked: bool) -> BTreeMap<u64, u32> {
    if !asked {
        return BTreeMap::new();
    }
    jobs.iter()
        .zip(given)
        .enumerate()
        .filter_map(|(slot, (h, p))| {
            let h = h.as_ref().filter(|h| h.record == slot)?;
            let ranked = !matches!(h.filed, Filed::Nowhere | Filed::Other);
            ranked.then_some((h.job.id, (*p)?))
        })
        .collect()
}

/// A filed slot always holds its job; an empty one reads as a job of no team that asks for
/// nothing (never reached).
impl Table for Vec<Option<Held>> {
    fn job(&self, slot: usize) -> &ClusterJob {
        self.get(slot)
            .and_then(Option::as_ref)
            .map_or(&NO_JOB, |h| &h.job)
    }
}

static NO_JOB: ClusterJob = ClusterJob {
    id: 0,
    team: String::new(),
    phase: Phase::Pending,
    gpus: 0,
    gpu_type: None,
    priority: 0,
    submit: 0,
    start: None,
    eligible: false,
    parked: false,
    park_held: false,
    batch: false,
    nodes: Vec::new(),
    node_count: 0,
    completing: false,
    tasks: 0,
};

/// Priorities written per slot, as [`Priorities`](super::priorities::Priorities) does per job id; a
/// tail's only for the jobs whose priority there may differ from the one last given.
struct SlotSink<'a, 'c> {
    next: &'a mut [Option<u32>],
    written: &'a mut Vec<usize>,
    rules: &'a Rules<'c>,
    jobs: &'a [Option<Held>],
    touched: &'a [usize],
    walked: &'a [Vec<usize>],
    tail_band: &'a mut [Option<u32>],
    given: &'a [Option<u32>],
    /// Whether any array record is held as several tasks (else every slot is a record's).
    tasks: bool,
}

impl SlotSink<'_, '_> {
    /// The slot of the record a slot's job is a task of (its own for a record).
    fn record(&self, slot: usize) -> usize {
        if !self.tasks {
            return slot;
        }
        self.jobs
            .get(slot)
            .and_then(Option::as_ref)
            .map_or(slot, |h| h.record)
    }
}

impl Sink for SlotSink<'_, '_> {
    /// What the previous pass gave it, which the caller applies.
    fn held(&self, e: Entry<'_>) -> u32 {
        self.given
            .get(self.record(e.slot))
            .copied()
            .flatten()
            .unwrap_or(e.priority)
    }

    /// A task's priority is its record's: written in order, as [`plan`](super::plan)'s
    /// are per job id.
    fn set(&mut self, e: Entry<'_>, p: u32) {
        let slot = self.record(e.slot);
        if self.next[slot].is_none() {
            self.written.push(slot);
        }
        self.next[slot] = Some(p);
    }

    fn raise(&mut self, e: Entry<'_>, p: u32) {
        let slot = self.record(e.slot);
        let v = &mut self.next[slot];
        match v {
            Some(old) => *old = (*old).max(p),
            None => {
                self.written.push(slot);
                *v = Some(p);
            }
        }
    }

    /// A job in the tail now was there at the last pass with the same band (its priority is
    /// the one it was given then), or walked by the last pass, or inserted or changed since:
    /// only the last two are written, unless the band moved.
    fn tail(
        &mut self,
        team: usize,
        tail: Tail<'_>,
        band: u32,
        priority: &dyn Fn(&ClusterJob) -> u32,
    ) {
        let Some(first) = tail.first() else {
            return;
        };
        if self.tail_band[team] != Some(band) {
            self.tail_band[team] = Some(band);
            for e in tail.iter() {
                self.raise(e, priority(&e));
            }
            return;
        }
        let from = (self.rules.pending_key(&first), first.slot);
        let jobs = self.jobs;
        for &slot in self.touched.iter().chain(&self.walked[team]) {
            let Some(h) = jobs[slot].as_ref() else {
                continue;
            };
            if let Filed::Pending(t, key) = h.filed {
                if t == team && (key, slot) >= from {
                    self.raise(Entry { job: &h.job, slot }, priority(&h.job));
                }
            }
        }
    }
}
