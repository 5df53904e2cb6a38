//! A job's runs: starting and ending them (GPUs, usage, backfill's expected ends), and the
//! outcome at the trace's end.

use teamshare_policy::governance::Phase;

use super::events::Kind;
use super::{capacity_steps, row_id, Sim, State};
use crate::replay::{Outcome, Secs, SimRun};

impl Sim<'_> {
    /// What team `t` holds against the quota a job of `gpu_type` counts in, that quota, and
    /// what one GPU of the job is worth there: its family in units where the team counts one
    /// (issue 30: an A100's worth is whole A100s and slices, a `1g.10gb` 1 unit of 7), its
    /// type where the configuration is typed, else every GPU.
    pub(super) fn held_against_quota(&self, t: usize, gpu_type: Option<&str>) -> (u64, u64, u64) {
        let team = &self.config.teams[t];
        let held = |k: &str| {
            u64::from(
                self.used_typed
                    .get(&(t, k.to_string()))
                    .copied()
                    .unwrap_or(0),
            )
        };
        match (gpu_type, self.typed) {
            (Some(k), true) => match self
                .config
                .family_of(k)
                .filter(|_| self.config.counts_family(team, k))
            {
                Some(m) => {
                    let units: u64 = self
                        .config
                        .family_members(m.whole)
                        .into_iter()
                        .map(|(member, worth)| held(member) * u64::from(worth))
                        .sum();
                    (units, team.family_quota_units(&m), u64::from(m.units))
                }
                None => (held(k), u64::from(team.quota_of(k)), 1),
            },
            _ => (u64::from(self.used[t]), u64::from(team.quota.total), 1),
        }
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
    pub(super) fn set_end(&mut self, j: usize, end: Option<Secs>) {
        self.changes += 1;
        if let Some(old) = self.jobs[j].end_key.take() {
            self.ends.remove(&(old, j));
        }
        if let Some(e) = end {
            self.ends.insert((e, j));
            self.jobs[j].end_key = Some(e);
        }
    }

    pub(super) fn start(&mut self, j: usize, alloc: Vec<(usize, u32)>) {
        self.changes += 1;
        let now = self.now;
        let gpus = self.jobs[j].gpus;
        let team = self.jobs[j].team.expect("only team jobs are accepted");
        let job_type = self.jobs[j].gpu_type.clone();
        let (used_before, quota, worth) = self.held_against_quota(team, job_type.as_deref());
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
        job.run_borrowed = used_before.saturating_add(u64::from(gpus) * worth) > quota;
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
    pub(super) fn end_run(&mut self, j: usize, preempted: bool) {
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

    pub(super) fn finish(mut self) -> Outcome {
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
