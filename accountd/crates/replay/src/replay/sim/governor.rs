//! The governor's passes in the simulation: the governor's [`Planner`](teamshare_policy::governance::Planner)
//! over the jobs squeue would show, and its decision (priorities, limits, parking, requeues)
//! applied.

use std::collections::BTreeMap;

use teamshare_config::IdleSharing;
use teamshare_policy::governance::{self, PassInput, Plan};

use super::events::Kind;
use super::{row_id, Sim, State};
use crate::model::fairshare;
use crate::replay::Secs;

/// How often the fair-share factors are recomputed (Slurm's `PriorityCalcPeriod` default).
const FAIRSHARE_PERIOD: Secs = 300;

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
    /// Of them, those that displace a lower class of their team (rule 6) rather than fit
    /// its unused quota: not in quota for the time-to-start measure.
    displacing: Vec<u64>,
    next_exempt_end: Option<Secs>,
}

/// GPUs per usable node, per type, and per node and type.
pub(super) type NodeView = (
    BTreeMap<String, u32>,
    BTreeMap<String, u32>,
    BTreeMap<String, BTreeMap<String, u32>>,
);

impl Sim<'_> {
    /// One governor pass: the plan for the jobs as they are now, applied.
    pub(super) fn pass(&mut self) {
        self.dirty = false;
        self.passes += 1;
        self.last_pass = self.now;
        self.refresh_fairshare();
        self.refresh_idleness();
        let (view, fresh) = match self.node_view.take() {
            Some(view) => (view, false),
            None => (self.usable_nodes(), true),
        };
        if fresh {
            self.planner.set_nodes(&view.0);
            self.planner.set_types(&view.1, &view.2);
        }
        let plan = self.planner.plan(&PassInput {
            capacity: view.0.values().sum(),
            fairshare: &self.fairshare,
            now: self.now,
            now_ms: self.now.saturating_mul(1_000),
            publish: false,
            all_priorities: false,
        });
        self.node_view = Some(view);
        let decision = self.decision(plan);
        self.apply(decision);
    }

    /// Each team's limit by its place in the configuration, from the plan's by name (the
    /// teams' places in name order, [`Sim::by_name`]); a team the plan leaves out keeps its
    /// limit.
    fn limits_by_place(&self, by_name: &BTreeMap<String, u32>) -> Vec<u32> {
        let mut limits = self.limits.clone();
        if by_name.len() == self.by_name.len() {
            for (&i, l) in self.by_name.iter().zip(by_name.values()) {
                limits[i] = *l;
            }
        } else {
            for (i, t) in self.config.teams.iter().enumerate() {
                if let Some(l) = by_name.get(&t.name) {
                    limits[i] = *l;
                }
            }
        }
        limits
    }

    /// What the simulation applies of a plan: its limits by team place.
    fn decision(&self, plan: Plan) -> Decision {
        let mut type_limits = BTreeMap::new();
        for (i, t) in self.config.teams.iter().enumerate() {
            if let Some(by_type) = plan.type_limits.get(&t.name) {
                for (k, l) in by_type {
                    type_limits.insert((i, k.clone()), *l);
                }
            }
        }
        Decision {
            priorities: plan.changed,
            gpu_limits: self.limits_by_place(&plan.gpu_limits),
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
            in_quota: plan.in_quota,
            displacing: plan.displacing,
            next_exempt_end: plan.next_exempt_end,
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
        // Pending jobs the plan ranks as in quota: the first instant each did. Those that
        // displace a lower class of their own team rank so too, but they did not fit its
        // unused quota: their wait is rule 6's, not the guarantee's.
        let displacing: std::collections::BTreeSet<&u64> = d.displacing.iter().collect();
        for id in d.in_quota.iter().filter(|id| !displacing.contains(id)) {
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
}
