//! The jobs of one pass as the phases walk them: each team's running and pending jobs in
//! order ([`Queues`]), as entries of the table the pass is made from ([`Entry`], [`List`],
//! [`Tail`]), and where the phases write the priorities they decide ([`Sink`]).

use std::collections::{BTreeMap, BTreeSet};

use super::rules::{Alike, PendingKey, Rules, RunningKey};
use super::{ClusterJob, Phase};

/// A job as the phases of the plan hold it: the job, and its place in the table the pass is made
/// from (the input of [`plan`](super::plan), or a [`Planner`](super::Planner)'s table), which is
/// where its priority is written.
#[derive(Clone, Copy)]
pub(super) struct Entry<'j> {
    pub job: &'j ClusterJob,
    pub slot: usize,
}

impl std::ops::Deref for Entry<'_> {
    type Target = ClusterJob;
    fn deref(&self) -> &ClusterJob {
        self.job
    }
}

/// Where a [`Planner`](super::Planner) keeps its jobs: lists of places in it make their entries on
/// need.
pub(super) trait Table {
    fn job(&self, slot: usize) -> &ClusterJob;
}

/// A team's running or pending jobs in the order the phases walk them, as entries made on
/// need: a long queue costs a pass only the part of it the pass reads.
#[derive(Clone, Copy)]
pub(super) enum List<'j> {
    Entries(&'j [Entry<'j>]),
    Running(&'j [(RunningKey, usize)], &'j dyn Table),
    Pending(&'j [(PendingKey, usize)], &'j dyn Table),
}

impl<'j> List<'j> {
    pub(super) fn len(self) -> usize {
        match self {
            List::Entries(e) => e.len(),
            List::Running(s, _) => s.len(),
            List::Pending(s, _) => s.len(),
        }
    }

    pub(super) fn get(self, i: usize) -> Entry<'j> {
        match self {
            List::Entries(e) => e[i],
            List::Running(s, table) => {
                let slot = s[i].1;
                Entry {
                    job: table.job(slot),
                    slot,
                }
            }
            List::Pending(s, table) => {
                let slot = s[i].1;
                Entry {
                    job: table.job(slot),
                    slot,
                }
            }
        }
    }

    pub(super) fn iter(self) -> impl Iterator<Item = Entry<'j>> + Clone {
        (0..self.len()).map(move |i| self.get(i))
    }

    /// The list from its `from`-th job on.
    pub(super) fn tail(self, from: usize) -> Tail<'j> {
        Tail { list: self, from }
    }
}

/// The end of a [`List`].
#[derive(Clone, Copy)]
pub(super) struct Tail<'j> {
    pub list: List<'j>,
    pub from: usize,
}

impl<'j> Tail<'j> {
    pub(super) fn len(self) -> usize {
        self.list.len().saturating_sub(self.from)
    }

    pub(super) fn is_empty(self) -> bool {
        self.len() == 0
    }

    pub(super) fn first(self) -> Option<Entry<'j>> {
        (!self.is_empty()).then(|| self.list.get(self.from))
    }

    pub(super) fn iter(self) -> impl Iterator<Item = Entry<'j>> + Clone {
        (self.from..self.list.len()).map(move |i| self.list.get(i))
    }
}

/// Where the phases write the priorities they decide.
pub(super) trait Sink {
    /// The job's priority is `p` (a later call for the same job replaces it).
    fn set(&mut self, e: Entry<'_>, p: u32);
    /// A pending record's priority is the highest any of its tasks earned: one task in quota
    /// ranks the record in quota (the team's limit keeps the others to what it may borrow).
    fn raise(&mut self, e: Entry<'_>, p: u32);
    /// The priority the job holds now, as far as this sink knows: Slurm's, unless the sink
    /// keeps what it last gave (a caller that applies what it is given).
    fn held(&self, e: Entry<'_>) -> u32 {
        e.priority
    }

    /// Every job of team `team`'s tail ([`Pending::tails`](super::pending::Pending::tails)) gets
    /// `priority(job)`, which depends on the job's own class and state and on `band` alone (its
    /// team's band slot): a sink that knows which of them cannot have changed since it last saw
    /// them with the same band may skip those.
    fn tail(
        &mut self,
        team: usize,
        tail: Tail<'_>,
        band: u32,
        priority: &dyn Fn(&ClusterJob) -> u32,
    ) {
        let _ = (team, band);
        for e in tail.iter() {
            self.raise(e, priority(&e));
        }
    }
}

/// The jobs of one pass grouped by team (by its place in the configuration), each team's in
/// the order the phases walk them: built from the jobs squeue shows ([`Queues::from_jobs`]) or
/// kept in that order between passes ([`Planner`](super::Planner)).
pub(super) struct Queues<'j> {
    /// Running jobs in [`Rules::running_key`] order, and pending jobs the plan ranks
    /// ([`Rules::ranked`]) in [`Rules::pending_key`] order, per team.
    pub lists: Lists<'j>,
    /// Running jobs of no team: they hold their nodes' GPUs all the same.
    pub others_running: Vec<Entry<'j>>,
    /// Jobs outside every team that hold or ask for GPUs ([`is_outside`]), in the order given
    /// (the plan sorts them by id).
    pub outside: Vec<u64>,
    /// Per team, where the caller keeps them ([`Planner`](super::Planner)): the ranked pending jobs
    /// of a non-preemptible class that are not parked, which are all a tail's jobs to park;
    /// otherwise found by a walk over the tail.
    pub unparked: Option<Vec<Vec<Entry<'j>>>>,
    /// Per team: how many ranked pending jobs that can start there are of each (class
    /// value, GPUs, nodes), in that order: what a displacement attempt's answer depends on
    /// besides the state of the pass (phase 3's `Ahead`, [`pending`](super::pending)).
    pub alike: std::borrow::Cow<'j, [Vec<(Alike, u32)>]>,
    /// Per team, where the caller keeps them ([`Planner`](super::Planner)): the same jobs by the
    /// GPUs they ask for, each set in the team's order, so that sharing idle capacity reads of a
    /// long tail only the jobs that could still get some; otherwise the tail is walked.
    pub sized: Option<&'j [Sized]>,
    /// Per team, where the caller keeps them: those of the same jobs that may borrow
    /// (preemptible, eligible), in the team's order.
    pub askable: Option<&'j [BTreeSet<(PendingKey, usize)>]>,
}

/// A team's ranked pending jobs that can start by the GPUs they ask for and then the nodes
/// ([`size_key`]), each set in the team's order ([`Rules::pending_key`], then place in the
/// table).
pub(super) type Sized = BTreeMap<(u32, u32), BTreeSet<(PendingKey, usize)>>;

/// A job's key in [`Sized`]: its GPUs, then its nodes (at least 1). By the nodes too so that
/// a walk can pass over every one-node job of a size no node has room for at once.
pub(super) fn size_key(j: &ClusterJob) -> (u32, u32) {
    (j.gpus, j.node_count.max(1))
}

/// Counts `(key, n)` as a sorted vector of counts.
fn count_alike(mut keys: Vec<Alike>) -> Vec<(Alike, u32)> {
    keys.sort_unstable();
    let mut out: Vec<(Alike, u32)> = Vec::new();
    for k in keys {
        match out.last_mut() {
            Some(last) if last.0 == k => last.1 += 1,
            _ => out.push((k, 1)),
        }
    }
    out
}

/// Where a pass's team lists come from.
pub(super) enum Lists<'j> {
    /// Grouped and sorted from the jobs of the pass ([`Queues::from_jobs`]).
    Owned {
        running: Vec<Vec<Entry<'j>>>,
        pending: Vec<Vec<Entry<'j>>>,
    },
    /// A [`Planner`](super::Planner)'s lists of places in its table.
    Table {
        running: &'j [Vec<(RunningKey, usize)>],
        pending: &'j [Vec<(PendingKey, usize)>],
        table: &'j dyn Table,
    },
}

impl<'j> Queues<'j> {
    fn teams(&self) -> usize {
        match &self.lists {
            Lists::Owned { running, .. } => running.len(),
            Lists::Table { running, .. } => running.len(),
        }
    }

    /// Team `t`'s running jobs.
    pub(super) fn running(&self, t: usize) -> List<'_> {
        match &self.lists {
            Lists::Owned { running, .. } => List::Entries(&running[t]),
            Lists::Table { running, table, .. } => List::Running(&running[t], *table),
        }
    }

    /// Team `t`'s ranked pending jobs.
    pub(super) fn pending(&self, t: usize) -> List<'_> {
        match &self.lists {
            Lists::Owned { pending, .. } => List::Entries(&pending[t]),
            Lists::Table { pending, table, .. } => List::Pending(&pending[t], *table),
        }
    }

    /// One walk over the jobs with one lookup of the account per job, then each team's lists
    /// sorted once (stable: jobs of equal keys keep the order given).
    pub(super) fn from_jobs(rules: &Rules<'_>, jobs: &'j [ClusterJob]) -> Queues<'j> {
        let teams = &rules.config.teams;
        let index: BTreeMap<&str, usize> = teams
            .iter()
            .enumerate()
            .map(|(i, t)| (t.name.as_str(), i))
            .collect();
        let mut running: Vec<Vec<(RunningKey, Entry<'j>)>> = vec![Vec::new(); teams.len()];
        let mut pending: Vec<Vec<(PendingKey, Entry<'j>)>> = vec![Vec::new(); teams.len()];
        let mut others_running = Vec::new();
        let mut outside = Vec::new();
        let mut alike: Vec<Vec<Alike>> = vec![Vec::new(); teams.len()];
        for (slot, j) in jobs.iter().enumerate() {
            let e = Entry { job: j, slot };
            let Some(&t) = index.get(j.team.as_str()) else {
                if is_outside(j) {
                    outside.push(j.id);
                }
                if j.phase == Phase::Running {
                    others_running.push(e);
                }
                continue;
            };
            match j.phase {
                Phase::Running => running[t].push((rules.running_key(j), e)),
                Phase::Pending if Rules::ranked(j) => {
                    if j.startable() {
                        alike[t].push(rules.alike(j));
                    }
                    pending[t].push((rules.pending_key(j), e));
                }
                Phase::Pending => {}
            }
        }
        // Keys worked out once per job, not per comparison.
        let running = running
            .into_iter()
            .map(|mut list| {
                list.sort_by_key(|a| a.0);
                list.into_iter().map(|(_, e)| e).collect()
            })
            .collect();
        let pending = pending
            .into_iter()
            .map(|mut list| {
                list.sort_by_key(|a| a.0);
                list.into_iter().map(|(_, e)| e).collect()
            })
            .collect();
        Queues {
            lists: Lists::Owned { running, pending },
            others_running,
            outside,
            unparked: None,
            alike: std::borrow::Cow::Owned(alike.into_iter().map(count_alike).collect()),
            sized: None,
            askable: None,
        }
    }

    /// Every running job, of teams and others.
    pub(super) fn all_running(&self) -> impl Iterator<Item = Entry<'_>> + '_ {
        (0..self.teams())
            .flat_map(|t| self.running(t).iter())
            .chain(self.others_running.iter().copied())
    }
}

/// Whether a job of no team holds or asks for GPUs (held ones are the governor's doing).
pub(super) fn is_outside(j: &ClusterJob) -> bool {
    j.gpus > 0 && (j.phase == Phase::Running || j.priority != 0)
}
