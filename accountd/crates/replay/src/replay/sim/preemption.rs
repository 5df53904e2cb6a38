//! Preemption: Slurm's preempt/qos (`PreemptMode=WITHIN`) for a pending job, and a preempted
//! job's grace time and requeue with the work it loses.

use std::cmp::Reverse;
use std::collections::BTreeMap;

use teamshare_policy::priority::{encode, BORROW_BASE};

use super::events::Kind;
use super::{row_id, type_matches, Sim, State};
use crate::replay::Secs;

impl Sim<'_> {
    /// preempt/qos with WITHIN: running jobs of lower priority past their exempt time, on the
    /// node where the fewest of the lowest make room (multi-node jobs: the lowest until enough
    /// nodes have room). True when it preempted.
    pub(super) fn preempt_for(&mut self, j: usize) -> bool {
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
        let chosen = if job_nodes == 1 {
            self.victims_on_one_node(j, &candidates)
        } else {
            self.victims_over_nodes(j, &candidates, job_nodes)
        };
        let Some(mut chosen) = chosen else {
            return false;
        };
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

    /// Whether node `i` with `free` GPUs free has room for job `j`.
    fn room(&self, j: usize, free: u32, i: usize) -> bool {
        let n = &self.nodes[i];
        !n.drained
            && type_matches(&self.jobs[j].gpu_type, &n.gpu_type)
            && if self.jobs[j].exclusive {
                free == n.gpus
            } else {
                free >= self.per_node(j, n)
            }
    }

    /// A one-node job's victims: on the node needing the fewest, taken lowest first; `None`
    /// when no node makes room.
    fn victims_on_one_node(
        &self,
        j: usize,
        candidates: &[(u32, Reverse<Secs>, usize)],
    ) -> Option<Vec<usize>> {
        let room = |free: u32, i: usize| self.room(j, free, i);
        // The node needing the fewest victims, taken lowest first. Each node's candidates
        // in that order (one walk over them, however many nodes).
        let mut on_node: BTreeMap<usize, Vec<(usize, u32)>> = BTreeMap::new();
        for (_, _, r) in candidates {
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
        best.map(|(_, _, picked)| picked)
    }

    /// A multi-node job's victims: the lowest first until enough nodes have room; `None` when
    /// they never do.
    fn victims_over_nodes(
        &self,
        j: usize,
        candidates: &[(u32, Reverse<Secs>, usize)],
        job_nodes: usize,
    ) -> Option<Vec<usize>> {
        let room = |free: u32, i: usize| self.room(j, free, i);
        let mut chosen: Vec<usize> = Vec::new();
        let mut free: Vec<u32> = self.nodes.iter().map(|n| n.free).collect();
        for (_, _, r) in candidates {
            if (0..self.nodes.len()).filter(|&i| room(free[i], i)).count() >= job_nodes {
                break;
            }
            for (n, g) in &self.jobs[*r].alloc {
                free[*n] += g;
            }
            chosen.push(*r);
        }
        if (0..self.nodes.len()).filter(|&i| room(free[i], i)).count() < job_nodes {
            return None;
        }
        Some(chosen)
    }

    /// A running job preempted (by Slurm for a pending job, or requeued by the governor):
    /// it holds its GPUs for `grace`, then is requeued.
    pub(super) fn preempt(&mut self, j: usize, grace: Secs) {
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

    /// The end of a preempted run: the work since its last checkpoint is lost (of it, what the
    /// job's samples show idle was no work), and the job waits again after the requeue delay.
    pub(super) fn requeue(&mut self, j: usize) {
        self.changes += 1;
        let now = self.now;
        let ran = now - self.jobs[j].run_start;
        let lost = match self.jobs[j].checkpoint {
            Some(interval) if interval > 0 => ran % interval,
            _ => ran,
        };
        let done = ran - lost;
        let idle = self.idle_gpu_ms(j, done, ran);
        self.end_run(j, true);
        self.out[j].lost_gpu_secs += lost * i64::from(self.jobs[j].gpus);
        self.out[j].lost_idle_gpu_ms += idle;
        let job = &mut self.jobs[j];
        job.remaining = (job.remaining - done).max(1);
        job.done += done;
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
}
