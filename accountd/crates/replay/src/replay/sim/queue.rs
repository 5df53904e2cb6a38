//! Slurm's queue in the simulation: the order of pending jobs (priority, submission, id), kept
//! also by team and by priority level, and what the governor is shown of them.

use std::cmp::Reverse;
use std::collections::BTreeMap;

use teamshare_policy::governance::{ClusterJob, Phase};

use super::{row_id, Sim, State};
use crate::replay::Secs;

/// A queued job's place in Slurm's order: priority, then the oldest submission, then id.
pub(super) type QueueKey = (Reverse<u32>, Secs, u64, usize);

/// What a scheduling pass reads of a queued job before anything else: its team (the place in
/// the configuration) and GPUs, for the association limit most jobs stop at.
#[derive(Clone, Copy)]
pub(super) struct Ticket {
    pub(super) team: usize,
    pub(super) gpus: u32,
    /// Its time limit: where it fits free GPUs, whether it fits between the reservations.
    pub(super) time_limit: Secs,
    /// A one-node job of any GPU type, not whole-node: whether it fits is a question of the
    /// largest free slot alone, answered without reading the job.
    pub(super) plain: bool,
}

/// Slurm's queue of a simulation: the shown pending jobs that are not parked, in Slurm's order,
/// also by team (with the GPUs they ask for) and by priority, so that a scheduling pass can
/// pass over the jobs of teams at their limit without reading them one by one.
#[derive(Default)]
pub(super) struct SchedQueue {
    pub(super) all: BTreeMap<QueueKey, Ticket>,
    pub(super) by_team: Vec<BTreeMap<QueueKey, Ticket>>,
    /// Per team: how many queued jobs ask for each number of GPUs.
    pub(super) sizes: Vec<BTreeMap<u32, u32>>,
    /// Per priority, highest first, the queued jobs in order (trace order is submit order).
    pub(super) levels: BTreeMap<Reverse<u32>, Level>,
    /// How many times a job joined or left it.
    pub(super) changes: u64,
}

impl SchedQueue {
    pub(super) fn new(teams: usize) -> SchedQueue {
        SchedQueue {
            all: BTreeMap::new(),
            by_team: vec![BTreeMap::new(); teams],
            sizes: vec![BTreeMap::new(); teams],
            levels: BTreeMap::new(),
            changes: 0,
        }
    }

    pub(super) fn len(&self) -> usize {
        self.all.len()
    }

    pub(super) fn insert(&mut self, key: QueueKey, ticket: Ticket) {
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

    pub(super) fn remove(&mut self, key: &QueueKey) -> Option<Ticket> {
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
    pub(super) fn rank(&self, key: &QueueKey) -> usize {
        let above: usize = self.levels.range(..key.0).map(|(_, l)| l.len).sum();
        above + self.levels.get(&key.0).map_or(0, |l| l.below(key.3))
    }

    /// The first queued job after `after` (the first of all without it).
    pub(super) fn next_after(
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
pub(super) struct Level {
    pub(super) chunks: Vec<Vec<usize>>,
    pub(super) len: usize,
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

    pub(super) fn insert(&mut self, j: usize) {
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

    pub(super) fn remove(&mut self, j: usize) {
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
    pub(super) fn below(&self, j: usize) -> usize {
        let c = self.chunk_of(j);
        self.chunks[..c].iter().map(Vec::len).sum::<usize>()
            + self
                .chunks
                .get(c)
                .map_or(0, |chunk| chunk.partition_point(|x| *x < j))
    }
}

impl Sim<'_> {
    /// Shows a pending job to the governor (squeue lists it as startable).
    pub(super) fn show(&mut self, j: usize) {
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

    pub(super) fn hide(&mut self, j: usize) {
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
    pub(super) fn enqueue(&mut self, j: usize) {
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

    pub(super) fn dequeue(&mut self, j: usize) {
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
    pub(super) fn set_priority(&mut self, j: usize, p: u32) {
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
}
