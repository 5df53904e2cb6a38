//! The event loop: the simulated clock, the events of each instant in their fixed order, and
//! submissions with the plugin's checks.

use std::cmp::Reverse;

use teamshare_config::IdleSharing;
use teamshare_policy::submit::{self, GpuAsk, SubmitRequest};

use super::{type_matches, Sim, State};
use crate::replay::{Secs, TraceJob};

/// How often progress is reported, in simulated seconds.
const PROGRESS_EVERY: Secs = 86_400;

/// What happens at an instant; the order of the variants is the order events of one instant
/// are applied in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Kind {
    End,
    GraceEnd,
    Drain,
    Undrain,
    Eligible,
    Cancel,
    Wake,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct Event {
    pub(super) at: Secs,
    pub(super) kind: Kind,
    pub(super) seq: u64,
    /// A job's index, or a node's for drains.
    pub(super) target: usize,
    /// The job's run the event belongs to (a stale end is ignored).
    pub(super) serial: u32,
}

/// What the submit-time checks look at: team, class, GPUs, GPU type, nodes.
pub(super) type RequestKind = (String, Option<String>, u32, Option<String>, u32);

impl Sim<'_> {
    pub(super) fn push(&mut self, at: Secs, kind: Kind, target: usize, serial: u32) {
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

    pub(super) fn run(&mut self, progress: &mut dyn FnMut(Secs)) {
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
    pub(super) fn submit(&mut self, j: usize) {
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
        let (used, quota, _) = self.held_against_quota(t, job.gpu_type.as_deref());
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
            // Only screened: no priority comes of it.
            waits: false,
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
}
