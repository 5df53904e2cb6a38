//! The governor's plan kept between passes, for a caller that sees jobs arrive, start and end
//! one at a time: accountd replay's simulated cluster, which passes a million times over a
//! year of a large site.
//!
//! [`plan`](super::plan) groups and sorts every job on every pass, and hands back every
//! priority. A [`Planner`] keeps each team's jobs in the order the phases walk them as they
//! change, runs the same phases ([`decide`]) over them, and hands back only
//! the priorities that changed since its previous pass. What it decides is what `plan` decides
//! for the same jobs (tested in `tests/planner.rs` against `plan` over random histories).
//!
//! Not covered: typed configurations (each GPU type is planned with limits left over by the
//! others, so per pass), and a pending record standing for several array tasks (`tasks > 1`),
//! which `plan` expands into its tasks; a `Planner` plans such a record as one task.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use teamshare_config::Config;

use super::nodes::{NodeSet, PassNodes};
use super::pool::{decide, Decided, Pass};
use super::queues::{size_key, Entry, Lists, Queues, Sink, Table, Tail};
use super::rules::{PendingKey, Rules, RunningKey};
use super::running::TeamRunning;
use super::{ClusterJob, Phase};

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
}

/// What a pass needs besides the jobs and the usable nodes ([`Planner::set_nodes`]; see
/// [`GovernInput`](super::GovernInput)).
pub struct PassInput<'a> {
    /// C: GPUs of usable nodes in the governed partitions.
    pub capacity: u32,
    /// Fair-share factor per team (missing: 1.0).
    pub fairshare: &'a BTreeMap<String, f64>,
    pub now: i64,
    /// The same instant in milliseconds (see [`GovernInput`](super::GovernInput)).
    pub now_ms: i64,
}

/// What a [`Planner`] pass decided: [`Plan`](super::Plan)'s actions, with the priorities
/// that changed since the previous pass instead of all of them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PassPlan {
    /// (job id, priority) for every job whose priority differs from the one the previous
    /// pass gave it (every job's, the first pass it is in).
    pub priorities: Vec<(u64, u32)>,
    /// Each team's GrpTRES gres/gpu, by the team's place in the configuration.
    pub gpu_limits: Vec<u32>,
    pub displace: Vec<u64>,
    pub reclaim: Vec<u64>,
    pub violations: Vec<u64>,
    /// Borrowed jobs beyond their team's ceiling ([`super::Plan::over_ceiling`]).
    pub over_ceiling: Vec<u64>,
    pub park: Vec<u64>,
    pub release: Vec<u64>,
    /// Jobs in a governed partition that hold or ask for GPUs outside any team.
    pub outside: Vec<u64>,
    /// Pending jobs that fit their team's unused quota or displace a lower class: ranked at
    /// the no-preempt level or above, ahead of every borrower.
    pub in_quota: Vec<u64>,
    /// Of them, those that displace a lower class ([`super::Plan::displacing`]).
    pub displacing: Vec<u64>,
    /// The earliest instant after the pass a victim's `min_runtime_before_reclaim` ends (a
    /// pending in-quota job may then reclaim it).
    pub next_exempt_end: Option<i64>,
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
    /// Jobs of no team in the order they came, for [`PassPlan::outside`].
    no_team: Vec<usize>,
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

    /// Every job the planner holds, in no particular order.
    pub fn jobs(&self) -> impl Iterator<Item = &ClusterJob> {
        self.jobs.iter().flatten().map(|h| &h.job)
    }

    /// The priority the last pass gave the job (none before its first pass, or while it is
    /// not ranked).
    pub fn priority(&self, id: u64) -> Option<u32> {
        let slot = *self.slot_of.get(&id)?;
        self.given[slot]
    }

    /// The running jobs idle for the whole idle window ([`GovernInput::idle`](super::GovernInput::idle)),
    /// until they are set again: with `idle_first_reclaim` the first of rule 3's victims from
    /// the next pass on (none until set).
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
        self.nodes.set_usable(node_gpus);
    }

    /// A job appears (as squeue would list it); one already held under its id is replaced.
    pub fn insert(&mut self, job: ClusterJob) {
        self.remove(job.id);
        let slot = match self.vacant.pop() {
            Some(s) => s,
            None => {
                self.jobs.push(None);
                self.given.push(None);
                self.next.push(None);
                self.jobs.len() - 1
            }
        };
        self.slot_of.insert(job.id, slot);
        let team = self.index.get(job.team.as_str()).copied();
        if team.is_none() {
            self.no_team.push(slot);
        }
        self.given[slot] = None;
        self.jobs[slot] = Some(Held {
            job,
            filed: Filed::Nowhere,
        });
        self.file(slot);
        self.touched.push(slot);
    }

    /// A job is gone (ended, cancelled, or no longer in the governed partitions).
    pub fn remove(&mut self, id: u64) -> Option<ClusterJob> {
        let slot = self.slot_of.remove(&id)?;
        self.unfile(slot);
        if let Some(i) = self.no_team.iter().position(|s| *s == slot) {
            self.no_team.remove(i);
        }
        self.given[slot] = None;
        self.vacant.push(slot);
        self.jobs[slot].take().map(|h| h.job)
    }

    /// A job changed (started, is ending, was held or released, ...): `change` edits it, and
    /// it is filed again where it now belongs. Its id must stay the same.
    pub fn update(&mut self, id: u64, change: impl FnOnce(&mut ClusterJob)) {
        let Some(&slot) = self.slot_of.get(&id) else {
            return;
        };
        self.unfile(slot);
        if let Some(h) = self.jobs[slot].as_mut() {
            change(&mut h.job);
            debug_assert_eq!(h.job.id, id, "Planner::update must keep the job's id");
        }
        self.file(slot);
        self.touched.push(slot);
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
    pub fn plan(&mut self, input: &PassInput<'_>) -> PassPlan {
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
            ..
        } = self;
        let entry = |slot: usize| -> Option<Entry<'_>> {
            jobs[slot].as_ref().map(|h| Entry { job: &h.job, slot })
        };
        // Filed slots always hold their job.
        let entries = |slots: &mut dyn ExactSizeIterator<Item = usize>| -> Vec<Entry<'_>> {
            let mut v = Vec::with_capacity(slots.len());
            v.extend(slots.filter_map(entry));
            v
        };
        let queues = Queues {
            lists: Lists::Table {
                running,
                pending,
                table: &*jobs,
            },
            others_running: entries(&mut others.iter().copied()),
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
        };
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
        let outside = no_team
            .iter()
            .filter_map(|s| entry(*s))
            .filter(|e| super::queues::is_outside(e))
            .map(|e| e.id)
            .collect();
        PassPlan::new(d, changed, outside, input.now)
    }
}

/// The priorities a pass wrote (`written`, `next`) that differ from those last given, by job
/// id: they become the ones given.
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

impl PassPlan {
    /// What the phases decided in a pass at `now`, with the priorities that changed and the
    /// jobs outside every team.
    fn new(d: Decided<'_>, priorities: Vec<(u64, u32)>, outside: Vec<u64>, now: i64) -> PassPlan {
        PassPlan {
            priorities,
            gpu_limits: d.gpu_limits,
            displace: d.displace,
            reclaim: d.reclaim,
            violations: d.violations,
            over_ceiling: d.over_ceiling,
            park: d.park,
            release: d.release,
            outside,
            in_quota: d.in_quota.iter().map(|e| e.id).collect(),
            displacing: d.displacing,
            next_exempt_end: d
                .victims
                .iter()
                .map(|v| v.exempt_until)
                .filter(|t| *t > now)
                .min(),
        }
    }
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
}

impl Sink for SlotSink<'_, '_> {
    /// What the previous pass gave it, which the caller applies.
    fn held(&self, e: Entry<'_>) -> u32 {
        self.given
            .get(e.slot)
            .copied()
            .flatten()
            .unwrap_or(e.priority)
    }

    fn set(&mut self, e: Entry<'_>, p: u32) {
        if self.next[e.slot].is_none() {
            self.written.push(e.slot);
        }
        self.next[e.slot] = Some(p);
    }

    fn raise(&mut self, e: Entry<'_>, p: u32) {
        let v = &mut self.next[e.slot];
        match v {
            Some(old) => *old = (*old).max(p),
            None => {
                self.written.push(e.slot);
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
