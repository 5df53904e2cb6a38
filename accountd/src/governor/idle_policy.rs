//! The idle policy (`[governance.idle_policy]`, issue 29): which running jobs to tell that
//! their GPUs stand idle, and which to act on, decided each pass from the GPU samples; the
//! actions themselves (AdminComment, hook, requeue or cancel) are the actuator's
//! (`governor/idle_actions.rs`). Missing samples never make a job idle: its idleness is unknown.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use teamshare_config::{Config, IdleAction, IdlePolicy};
use teamshare_policy::governance::{self, ClusterJob, Phase};
use teamshare_policy::priority;

use super::idleness::{Idleness, SampledWindow};
use crate::period::UnixSeconds;

/// What the policy decided for one job run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IdleStep {
    /// Idle for `notice_after`: its owner is told.
    Notice,
    /// Still idle `act_after` after the notice: the policy's action.
    Act(IdleAction),
    /// Noticed, but its GPUs computed since, or its samples stopped (unknown): the notice
    /// is taken back and nothing follows.
    Cleared,
}

impl IdleStep {
    /// As the hook's `event=` and the metrics' `step` label say it.
    pub fn name(self) -> &'static str {
        match self {
            IdleStep::Notice => "notice",
            IdleStep::Act(a) => a.name(),
            IdleStep::Cleared => "cleared",
        }
    }
}

/// One decision, with the facts the AdminComment, the hook and the log give.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdleEvent {
    pub step: IdleStep,
    pub job: u64,
    /// The run's start: the actuator acts only on the same run.
    pub start: i64,
    pub team: String,
    /// Its owner, as Slurm named it when the step was acted on (empty until then).
    pub user: String,
    /// Its priority class (empty: none).
    pub class: String,
    pub gpus: u32,
    pub nodes: Vec<String>,
    /// The window the samples cover (`notice_after`, or with the action `+ act_after`),
    /// and what they say: the evidence for the step.
    pub window: Duration,
    pub samples: SampledWindow,
    pub decided_at: UnixSeconds,
    /// When the action follows if the job stays idle (a notice with an action).
    pub act_at: Option<UnixSeconds>,
}

/// The job runs the policy noticed (when) and acted on, and the decisions not yet handed to
/// the actuator.
#[derive(Debug, Default)]
pub(super) struct IdlePolicyState {
    noticed: BTreeMap<(u64, i64), UnixSeconds>,
    acted: BTreeSet<(u64, i64)>,
    pending: Vec<IdleEvent>,
}

impl IdlePolicyState {
    /// Decide for each running job the policy covers, from the windows last read. Job runs
    /// that ended are forgotten; with no policy, everything is.
    pub(super) fn decide(
        &mut self,
        config: &Config,
        jobs: &[ClusterJob],
        idleness: &Idleness,
        now: UnixSeconds,
    ) {
        let Some(policy) = &config.idle_policy else {
            self.noticed.clear();
            self.acted.clear();
            return;
        };
        let covered = covered_jobs(config, policy, jobs);
        let runs: BTreeSet<(u64, i64)> = covered.iter().map(|(j, _)| run_of(j)).collect();
        self.noticed.retain(|r, _| runs.contains(r));
        self.acted.retain(|r| runs.contains(r));
        let notice_window = policy.notice_after;
        let act_window = policy.notice_after.saturating_add(policy.act_after);
        let idle_now = idleness.idle(covered.iter().map(|(j, _)| *j), notice_window, now);
        let idle_long = idleness.idle(covered.iter().map(|(j, _)| *j), act_window, now);
        let act_after = i64::try_from(policy.act_after.as_secs()).unwrap_or(i64::MAX);
        for (job, class) in covered {
            let run = run_of(job);
            let fact = |step, window| {
                event(
                    step,
                    job,
                    &class,
                    window,
                    idleness.sampled(run, window),
                    now,
                )
            };
            match self.noticed.get(&run).copied() {
                None if idle_now.contains(&job.id) => {
                    self.noticed.insert(run, now);
                    let mut e = fact(IdleStep::Notice, notice_window);
                    e.act_at = (policy.action != IdleAction::Notice)
                        .then(|| now.saturating_add(act_after));
                    self.pending.push(e);
                }
                None => {}
                Some(_) if !idle_now.contains(&job.id) => {
                    self.noticed.remove(&run);
                    self.acted.remove(&run);
                    self.pending.push(fact(IdleStep::Cleared, notice_window));
                }
                Some(at) => {
                    let due = now >= at.saturating_add(act_after);
                    if policy.action != IdleAction::Notice
                        && due
                        && idle_long.contains(&job.id)
                        && self.acted.insert(run)
                    {
                        self.pending
                            .push(fact(IdleStep::Act(policy.action), act_window));
                    }
                }
            }
        }
    }

    /// The running jobs the policy acted on with `"reclaim-first"`: first among rule 3's
    /// victims while they stay idle.
    pub(super) fn reclaim_first(&self, config: &Config) -> BTreeSet<u64> {
        match &config.idle_policy {
            Some(p) if p.action == IdleAction::ReclaimFirst => {
                self.acted.iter().map(|(id, _)| *id).collect()
            }
            _ => BTreeSet::new(),
        }
    }

    /// The decisions made since the last hand-over, oldest first.
    pub(super) fn take_events(&mut self) -> Vec<IdleEvent> {
        std::mem::take(&mut self.pending)
    }

    /// Decisions that could not be handed over (the actuator was busy): kept for the next.
    pub(super) fn put_back(&mut self, mut events: Vec<IdleEvent>) {
        events.append(&mut self.pending);
        self.pending = events;
    }
}

fn run_of(j: &ClusterJob) -> (u64, i64) {
    (j.id, j.start.unwrap_or(0))
}

/// The running GPU jobs the policy covers (their team listed or all, their class not
/// exempt), each with its class name.
fn covered_jobs<'j>(
    config: &Config,
    policy: &IdlePolicy,
    jobs: &'j [ClusterJob],
) -> Vec<(&'j ClusterJob, String)> {
    let classes = governance::classes(config);
    jobs.iter()
        .filter(|j| j.phase == Phase::Running && !j.completing && j.gpus > 0 && j.start.is_some())
        .filter_map(|j| {
            let class = classes
                .get(usize::from(priority::class_index(j.priority)))
                .map(|c| c.name.clone())
                .unwrap_or_default();
            policy.covers(&j.team, &class).then_some((j, class))
        })
        .collect()
}

fn event(
    step: IdleStep,
    job: &ClusterJob,
    class: &str,
    window: Duration,
    samples: SampledWindow,
    now: UnixSeconds,
) -> IdleEvent {
    IdleEvent {
        step,
        job: job.id,
        start: job.start.unwrap_or(0),
        team: job.team.clone(),
        user: String::new(),
        class: class.to_string(),
        gpus: job.gpus,
        nodes: job.nodes.clone(),
        window,
        samples,
        decided_at: now,
        act_at: None,
    }
}

#[cfg(test)]
#[path = "idle_policy_tests.rs"]
mod tests;
