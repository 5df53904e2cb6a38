//! Slurm's scheduling pass: the main scheduler and backfill as one walk down the queue, with
//! the reservations of the first blocked jobs.

use std::cmp::Reverse;

use super::queue::{QueueKey, SchedQueue, Ticket};
use super::{type_matches, Sim};
use crate::replay::Secs;

/// How many blocked jobs may hold a backfill reservation at once.
const MAX_RESERVATIONS: usize = 4;

/// How many pending jobs one scheduling pass looks at (Slurm's `bf_max_job_test` default).
const MAX_JOBS_TESTED: usize = 500;

/// After how many jobs in a row passed over for their team's limit a scheduling pass looks
/// for the next job of a team with room in the queue's indexes instead of job by job.
const SKIP_AFTER: usize = 16;

struct Reservation {
    start: Secs,
    nodes: Vec<usize>,
}

/// What one walk of a scheduling pass keeps as it goes down the queue.
struct Walk {
    /// How many blocked jobs have their reservation, and per node the earliest start of a
    /// reservation that holds it.
    reserved: usize,
    reserved_from: Vec<Secs>,
    blocked: Vec<usize>,
    started: bool,
    timeless: bool,
    /// The largest free slot on one usable node, worked out on need and again after a
    /// start or a preemption.
    largest: Option<u32>,
    /// Once reservations are made, the latest end each level of free GPUs allows, until a
    /// start or a preemption moves nodes between levels.
    level_ends: Option<Vec<Vec<Secs>>>,
}

impl Sim<'_> {
    /// Slurm's scheduling pass (the main scheduler and backfill as one walk down the queue);
    /// true when it started a job.
    pub(super) fn schedule(&mut self) -> bool {
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
        let mut w = Walk {
            reserved: 0,
            reserved_from: Vec::new(),
            blocked: Vec::new(),
            started: false,
            timeless: true,
            largest: None,
            level_ends: None,
        };
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
                w.timeless &= !above_lowest;
                break;
            }
            if self.over_limit(j, ticket) {
                self.limit_blocked = true;
                over_in_a_row += 1;
                continue;
            }
            over_in_a_row = 0;
            w.timeless &= !above_lowest;
            if self.fits_free(j, ticket, &mut w.largest) && self.start_in_walk(j, ticket, &mut w) {
                continue;
            }
            if may_preempt && self.preempt_for(j) {
                self.start_after_preempting(j, &mut w);
                continue;
            }
            // Only the first few blocked jobs get a reservation.
            if w.blocked.len() < MAX_RESERVATIONS {
                w.blocked.push(j);
            }
        }
        (w.started, w.timeless)
    }

    /// Whether the job's team's association limit passes it over (the job's team has none:
    /// always).
    fn over_limit(&self, j: usize, ticket: Ticket) -> bool {
        let over = match self.used.get(ticket.team) {
            Some(used) => used.saturating_add(ticket.gpus) > self.limits[ticket.team],
            None => true,
        };
        over || (self.typed && !self.within_limits(j))
    }

    /// Whether the job might fit the free GPUs now, before placement looks at reservations.
    fn fits_free(&self, j: usize, ticket: Ticket, largest: &mut Option<u32>) -> bool {
        if ticket.plain {
            // may_fit_one_node for an untyped one-node job: the largest free slot of any
            // type (which the total free covers).
            *largest.get_or_insert_with(|| self.free.largest_any()) >= ticket.gpus
        } else {
            self.free.free_for(&self.jobs[j].gpu_type) >= self.jobs[j].gpus
                && self.may_fit_one_node(j)
        }
    }

    /// Starts a job that might fit the free GPUs where it fits clear of the reservations of
    /// the jobs blocked above it (made when first needed); true when it started.
    fn start_in_walk(&mut self, j: usize, ticket: Ticket, w: &mut Walk) -> bool {
        // Reservations of the jobs blocked above this one, made when first needed.
        if w.reserved_from.is_empty() {
            w.reserved_from = vec![Secs::MAX; self.nodes.len()];
        }
        while w.reserved < w.blocked.len().min(MAX_RESERVATIONS) {
            let r = self.reservation(w.blocked[w.reserved]);
            for &n in &r.nodes {
                w.reserved_from[n] = w.reserved_from[n].min(r.start);
            }
            w.reserved += 1;
            w.level_ends = None;
        }
        if w.reserved > 0 && w.level_ends.is_none() {
            w.level_ends = Some(self.free.level_ends(&self.nodes, &w.reserved_from));
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
                        |i| end_by <= w.reserved_from[i],
                        w.level_ends.as_deref().map(|e| (e, end_by)),
                    )
                })
                .flatten()
                .map(|(_, i)| vec![(i, ticket.gpus)])
        } else {
            self.place(j, &w.reserved_from, end_by, w.level_ends.as_deref())
        };
        let Some(alloc) = placed else {
            return false;
        };
        let moved = alloc.clone();
        self.start(j, alloc);
        w.largest = None;
        if let Some(ends) = w.level_ends.as_mut() {
            for (n, g) in moved {
                self.free
                    .level_moved(ends, &self.nodes, &w.reserved_from, n, g);
            }
        }
        w.started = true;
        true
    }

    /// After the job preempted others: it starts in this pass if they are gone already (no
    /// grace time).
    fn start_after_preempting(&mut self, j: usize, w: &mut Walk) {
        w.largest = None;
        w.level_ends = None;
        if self.grace == 0 {
            // The victims are gone already: the job starts in this pass.
            if w.reserved_from.is_empty() {
                w.reserved_from = vec![Secs::MAX; self.nodes.len()];
            }
            let end_by = self.now.saturating_add(self.jobs[j].time_limit);
            if let Some(alloc) = self.place(j, &w.reserved_from, end_by, None) {
                self.start(j, alloc);
                w.started = true;
            }
        }
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
}
