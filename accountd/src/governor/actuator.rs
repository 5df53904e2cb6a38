//! The governor's actions on Slurm for one plan (limits, priorities, parking, holds, requeues
//! and requeue delays), on a thread of their own beside the passes (see [`super`]).

use super::*;

#[path = "idle_actions.rs"]
mod idle_actions;
pub use idle_actions::{hook_args, IDLE_MARK};

/// Acts on Slurm for one plan at a time (limits, requeues, priorities, parking, holds).
///
/// A plan is handed to it only by a pass that found it idle before that pass began reading
/// Slurm, so every plan it acts on was read after the previous actions had landed (slurmctld
/// answers an update once it is applied): no plan repeats or undoes the previous one's work
/// from a view older than it.
pub(super) struct Actuator {
    config: Config,
    /// Limits as last set, so sacctmgr runs only on change (None: not yet known).
    /// The GrpTRES each team's account was last given (`gres/gpu=4,gres/gpu:h100=2`).
    limits: BTreeMap<String, String>,
    /// Requeues (the governor's and Slurm's) whose run's end is not yet known from accounting.
    checks: crate::requeue_check::Checks,
    /// Requeued jobs whose requeue delay may be lifted.
    delays: crate::requeue_delay::Tracker,
    /// What writes to Slurm.
    writer: Box<dyn SlurmWrite>,
}

/// A hold to release: the job, and whether the requeue delay left by the requeue that came
/// with the hold is lifted.
pub(super) type Unhold = (u64, bool);

/// What a pass read and planned, handed to the actuator.
pub(super) struct Snapshot {
    pub(super) plan: Plan,
    pub(super) jobs: Vec<ClusterJob>,
    pub(super) addresses: Addresses,
    pub(super) leaders: Leaders,
    /// Jobs the governor held whose reason is gone: released (and whether the requeue delay
    /// left by the requeue that came with the hold is lifted).
    pub(super) unhold: Vec<(u64, bool)>,
    /// The governor's holds against a second run, likewise: released where the requeue check
    /// has since found them wrong ([`crate::requeue_check::Checks::wrong_holds`]).
    pub(super) run_ended_holds: Vec<(u64, bool)>,
    /// The number of the pass that made the plan ([`super::pass_span`]).
    pub(super) pass: u64,
    /// The idle policy's decisions since the last hand-over.
    pub(super) idle_events: Vec<super::idle_policy::IdleEvent>,
}

impl Actuator {
    pub(super) fn new(config: Config, writer: Box<dyn SlurmWrite>) -> Actuator {
        Actuator {
            config,
            limits: BTreeMap::new(),
            checks: crate::requeue_check::Checks::default(),
            delays: crate::requeue_delay::Tracker::default(),
            writer,
        }
    }

    /// Act on one plan: limits first (a tighter ceiling must hold before priorities let
    /// anything start), then running jobs, priorities, parking and holds.
    pub(super) fn act(mut self, work: Snapshot) -> (Actuator, PassReport) {
        let started = Instant::now();
        let processes_before = crate::slurm_cli::calls_on_this_thread();
        let calls_before = processes_before + self.writer.rpcs();
        let mut report = PassReport::default();
        if let Err(e) = self.act_on(&work, &mut report) {
            report.failures.push(e.to_string());
        }
        let polled = self.checks.poll(self.writer.as_mut());
        report.requeue_held.extend(polled.held);
        report.requeue_unverified.extend(polled.unverified);
        report.failures.extend(polled.failures);
        report.teams = teams_of(&report, &work.jobs);
        let acted = Acted {
            duration: started.elapsed(),
            slurm_calls: crate::slurm_cli::calls_on_this_thread() + self.writer.rpcs()
                - calls_before,
            processes: crate::slurm_cli::calls_on_this_thread() - processes_before,
            plan_generated_at: work.plan.state.generated_at,
            pass: work.pass,
        };
        tracing::debug!(
            target: crate::logging::RUN,
            duration_ms = trace::ms(acted.duration),
            slurm_calls = acted.slurm_calls,
            priorities = report.priority_updates,
            limits = report.limit_updates.len(),
            skipped = report.skipped.len(),
            failures = report.failures.len(),
            "act: the actions on the plan are done"
        );
        report.acted = Some(acted);
        (self, report)
    }

    fn act_on(&mut self, work: &Snapshot, report: &mut PassReport) -> Result<(), GovernError> {
        let Snapshot {
            plan,
            jobs,
            addresses,
            leaders,
            unhold,
            run_ended_holds,
            pass: _,
            idle_events,
        } = work;
        self.apply_limits(plan, report);
        // Priorities and releases before requeues: when a requeue frees GPUs, the job it
        // makes room for already outranks every job that could take them, a borrower's
        // included (issue 24). A job about to be requeued gets the priority planned for its
        // run, as it would have kept its old one.
        let w = self.writer.as_mut();
        report.priority_updates = apply_priorities(w, plan, jobs, addresses)?;
        report.released = release(w, plan, jobs, addresses)?;
        report.unheld = release_holds(w, unhold, addresses)?;
        let wrong = self.checks.wrong_holds();
        let wrong: Vec<(u64, bool)> = run_ended_holds
            .iter()
            .filter(|(id, _)| wrong.contains(id))
            .copied()
            .collect();
        report.wrong_holds_released = release_holds(self.writer.as_mut(), &wrong, addresses)?;
        self.checks.released(&report.wrong_holds_released);
        self.act_on_running(plan, jobs, addresses, leaders, report)?;
        self.act_on_idle(idle_events, addresses, report)?;
        // A job just requeued is pending now: what the plan says of it pending is not for it.
        let acted: std::collections::BTreeSet<u64> = report
            .displaced
            .iter()
            .chain(&report.reclaimed)
            .chain(&report.violations)
            .chain(&report.over_ceiling)
            .chain(&report.held)
            .copied()
            .collect();
        let jobs: Vec<ClusterJob> = jobs
            .iter()
            .filter(|j| !acted.contains(&j.id))
            .cloned()
            .collect();
        let w = self.writer.as_mut();
        report.parked = park(w, plan, &jobs, addresses, &report.violations)?;
        let requeued_held: Vec<u64> = report.held.clone();
        let held = hold_outside(w, plan, &jobs, addresses, leaders, &requeued_held)?;
        report.held.extend(held);
        // Every job of the snapshot: one requeued just now was running in it.
        self.lift_requeue_delays(plan, &work.jobs, addresses, report)
    }

    /// Requeued jobs may start again as soon as their requeue delay protects nothing
    /// ([`crate::requeue_delay`]): their begin time set back to now.
    fn lift_requeue_delays(
        &mut self,
        plan: &Plan,
        jobs: &[ClusterJob],
        addresses: &Addresses,
        report: &mut PassReport,
    ) -> Result<(), GovernError> {
        let now = Instant::now();
        // Requeued since the last snapshot by someone else (Slurm's preemption, an owner):
        // checked like the governor's own before their delay is lifted.
        for (id, start) in self.delays.observe(jobs, now) {
            if let Some(name) = address(addresses, id) {
                self.checks.add(id, name, start, now);
            }
        }
        for id in report
            .displaced
            .iter()
            .chain(&report.reclaimed)
            .chain(&report.violations)
            .chain(&report.over_ceiling)
            .chain(&report.held)
        {
            // `held` also names pending jobs held in place: only requeues are noted.
            if jobs
                .iter()
                .any(|j| j.id == *id && j.phase == governance::Phase::Running)
            {
                self.delays.note_requeued(*id, now);
            }
        }
        let unsettled = self.checks.unsettled();
        let due = self.delays.due(jobs, plan, &unsettled, now);
        let due: Vec<u64> = due
            .into_iter()
            .filter(|id| address(addresses, *id).is_some())
            .collect();
        if due.is_empty() {
            return Ok(());
        }
        let now = JobUpdate {
            begin: Some(Begin::Now),
            ..JobUpdate::default()
        };
        self.writer.update(&job_list(addresses, &due), &now)?;
        report.lifted = due;
        Ok(())
    }

    fn apply_limits(&mut self, plan: &Plan, report: &mut PassReport) {
        let cluster = slurm_name(&self.config.cluster.name);
        for (team, limit) in &plan.gpu_limits {
            let tres = grp_tres(*limit, plan.type_limits.get(team));
            if self.limits.get(team) == Some(&tres) {
                continue;
            }
            match self.writer.set_grp_tres(&cluster, team, &tres) {
                Ok(_) => {
                    self.limits.insert(team.clone(), tres.clone());
                    report.limit_updates.push((team.clone(), tres));
                }
                // Not remembered as set: tried again next pass.
                Err(e) => {
                    report.failures.push(e.to_string());
                    report.limit_failures.push(team.clone());
                }
            }
        }
        report.limits_in_force = Some(
            self.limits
                .iter()
                .filter_map(|(team, tres)| Some((team.clone(), gpus_of_grp_tres(tres)?)))
                .collect(),
        );
    }

    /// Requeue or cancel the running jobs the plan names, only if each is still the run the
    /// plan saw: one squeue call re-reads them just before acting, and a job that ended, was
    /// requeued or restarted since is left alone. Requeues use `scontrol requeue Incomplete`,
    /// which slurmctld itself refuses for a job that has finished (a plain requeue of a
    /// finished batch job runs it again). Interactive allocations cannot be requeued: they
    /// are cancelled (`scancel --state=RUNNING`).
    fn act_on_running(
        &mut self,
        plan: &Plan,
        jobs: &[ClusterJob],
        addresses: &Addresses,
        leaders: &Leaders,
        report: &mut PassReport,
    ) -> Result<(), GovernError> {
        let targets = running_targets(plan, jobs);
        if targets.is_empty() {
            return Ok(());
        }
        let seen: BTreeMap<u64, Option<i64>> = jobs
            .iter()
            .filter(|j| j.phase == governance::Phase::Running)
            .map(|j| (j.id, j.start))
            .collect();
        let ids: Vec<(u64, String)> = targets
            .iter()
            .filter_map(|(id, _)| Some((*id, address(addresses, *id)?)))
            .collect();
        let now_running = self.writer.running(&ids)?;
        // A heterogeneous job goes whole, through its leader: once, whichever of its
        // components the plan named.
        let mut whole_done = std::collections::BTreeSet::new();
        for (id, act) in targets {
            let Some(name) = whole_address(addresses, leaders, id) else {
                skip(report, id, act, "Slurm no longer names it");
                continue;
            };
            let current = now_running.get(&id);
            let same_run = matches!(current, Some(run) if seen.get(&id) == Some(&run.start));
            if !same_run {
                skip(
                    report,
                    id,
                    act,
                    "it ended, was requeued or restarted since the snapshot",
                );
                continue;
            }
            if !whole_done.insert(name.clone()) {
                skip(
                    report,
                    id,
                    act,
                    "its heterogeneous job was acted on whole already",
                );
                continue;
            }
            let batch = current.is_some_and(|run| run.batch);
            let (result, cancel) = self.end_run(act, &name, batch);
            match result {
                Ok(()) => {
                    // A requeued run may have ended by itself a moment before: checked later.
                    if !cancel {
                        let start = current.and_then(|run| run.start);
                        self.checks.add(id, name, start, Instant::now());
                    }
                    match act {
                        Act::Displace => report.displaced.push(id),
                        Act::Reclaim => report.reclaimed.push(id),
                        Act::Violation => report.violations.push(id),
                        Act::OverCeiling => report.over_ceiling.push(id),
                        Act::Outside => report.held.push(id),
                    }
                }
                Err(e) => report.failures.push(e.to_string()),
            }
        }
        Ok(())
    }
}

impl Actuator {
    /// End a running job's run for `act`, and say whether it was a cancellation: a requeue
    /// (held, for a job outside every team), or a cancellation where the job cannot be
    /// requeued (interactive) or the configuration says so.
    fn end_run(&mut self, act: Act, name: &str, batch: bool) -> (Result<(), WriteError>, bool) {
        let cancel = !batch
            || (act != Act::Outside
                && self.config.governance.reclaim_mode == teamshare_config::ReclaimMode::Cancel);
        let result = if cancel {
            self.writer.cancel_running(name)
        } else {
            self.writer.requeue(name, act == Act::Outside)
        };
        (result, cancel)
    }
}

/// The team of each job the actions name, as the plan read it (no one asks the database): for
/// the requeues' metrics and the log's fields.
fn teams_of(report: &PassReport, jobs: &[ClusterJob]) -> BTreeMap<u64, String> {
    let named: std::collections::BTreeSet<u64> = [
        &report.displaced,
        &report.reclaimed,
        &report.over_ceiling,
        &report.violations,
        &report.held,
        &report.skipped,
        &report.parked,
        &report.released,
        &report.unheld,
        &report.lifted,
        &report.requeue_held,
        &report.wrong_holds_released,
        &report.requeue_unverified,
    ]
    .into_iter()
    .flatten()
    .copied()
    .collect();
    jobs.iter()
        .filter(|j| named.contains(&j.id))
        .map(|j| (j.id, j.team.clone()))
        .collect()
}

/// A running job the plan named left alone, and why (debug: the info line says it was left
/// alone).
fn skip(report: &mut PassReport, id: u64, act: Act, why: &str) {
    tracing::debug!(target: crate::logging::RUN, job = id, act = ?act, "act: job {id} left alone: {why}");
    report.skipped.push(id);
}

/// Why the governor acts on a running job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Act {
    Displace,
    Reclaim,
    Violation,
    OverCeiling,
    Outside,
}

/// The running jobs the plan names, with why, in the order they are acted on: displaced,
/// reclaimed, violations, over the ceiling, then those outside the governed partitions (these
/// only while running).
fn running_targets(plan: &Plan, jobs: &[ClusterJob]) -> Vec<(u64, Act)> {
    plan.displace
        .iter()
        .map(|id| (*id, Act::Displace))
        .chain(plan.reclaim.iter().map(|id| (*id, Act::Reclaim)))
        .chain(plan.violations.iter().map(|id| (*id, Act::Violation)))
        .chain(plan.over_ceiling.iter().map(|id| (*id, Act::OverCeiling)))
        .chain(
            plan.outside
                .iter()
                .filter(|id| {
                    jobs.iter()
                        .any(|j| j.id == **id && j.phase == governance::Phase::Running)
                })
                .map(|id| (*id, Act::Outside)),
        )
        .collect()
}

/// Hold pending jobs the plan cannot govern (an administrator's hold, which their owner
/// cannot release), with the reason in their AdminComment: jobs asking for GPUs in a governed
/// partition outside every team, and (in a typed configuration) team jobs asking for untyped
/// GPUs or several types. `requeued` are running ones this pass requeued held: `requeuehold`
/// is a user's hold (their owner could release it), made an administrator's hold here.
/// Returns the pending ids held.
fn hold_outside(
    w: &mut dyn SlurmWrite,
    plan: &Plan,
    jobs: &[ClusterJob],
    addresses: &Addresses,
    leaders: &Leaders,
    requeued: &[u64],
) -> Result<Vec<u64>, GovernError> {
    let pending = |list: &[u64]| -> Vec<u64> {
        list.iter()
            .copied()
            .filter(|id| {
                jobs.iter()
                    .any(|j| j.id == *id && j.phase == governance::Phase::Pending)
            })
            .filter(|id| address(addresses, *id).is_some())
            .collect()
    };
    let mut hold = |ids: &[u64], why: &str| -> Result<bool, GovernError> {
        // A heterogeneous job is held whole, through its leader.
        let names: std::collections::BTreeSet<String> = ids
            .iter()
            .filter_map(|id| whole_address(addresses, leaders, *id))
            .collect();
        let names: Vec<String> = names.into_iter().collect();
        if names.is_empty() {
            return Ok(false);
        }
        let comment = JobUpdate {
            admin_comment: Some(format!("teamshare: held: {why}")),
            ..JobUpdate::default()
        };
        w.update(&names, &comment)?;
        Ok(w.hold(&names)?)
    };
    const OUTSIDE: &str = OUTSIDE_HOLD;
    const UNTYPED: &str = UNTYPED_HOLD;
    // An interactive one was cancelled instead: its hold fails, harmlessly.
    hold(requeued, OUTSIDE)?;
    let mut held = Vec::new();
    for (list, why) in [(&plan.outside, OUTSIDE), (&plan.untyped, UNTYPED)] {
        let ids = pending(list);
        if hold(&ids, why)? {
            held.extend(ids);
        }
    }
    Ok(held)
}

/// Set the priority of every job whose priority differs from the plan: one update per
/// distinct priority, for all its jobs (in chunks).
///
/// The writes that decide preemption come first and are never put off: a job raised to or
/// kept at a level that preempts or is preempted, and a job lowered from such a level (a
/// requeued victim or a parked job still carries its old priority: left there, it would
/// preempt the jobs below it once its begin time passes). The borrowers' bands (one value per
/// team slot and class) follow, and may wait for the next pass once this pass has spent its
/// budget, so that a long queue never stretches a pass. Each update is one request per job
/// queued behind slurmctld's scheduler (137 ms each measured with 5,000 waiting jobs through
/// scontrol), so lists are cut into chunks and the budget is checked between them.
fn apply_priorities(
    w: &mut dyn SlurmWrite,
    plan: &Plan,
    jobs: &[ClusterJob],
    addresses: &Addresses,
) -> Result<usize, GovernError> {
    let decides = |p: u32| priority::level(p) >= priority::reclaim_level(0);
    // (decides preemption, priority) -> jobs, highest first.
    let mut by_priority: BTreeMap<(bool, u32), Vec<u64>> = BTreeMap::new();
    for j in jobs {
        if j.priority == 0 {
            continue; // held: releasing is the user's or the administrator's call
        }
        if let Some(&want) = plan.priorities.get(&j.id) {
            if want != j.priority {
                let urgent = decides(want) || decides(j.priority);
                by_priority.entry((urgent, want)).or_default().push(j.id);
            }
        }
    }
    let started = Instant::now();
    let mut n = 0;
    for ((urgent, priority), ids) in by_priority.into_iter().rev() {
        for chunk in ids.chunks(UPDATE_CHUNK) {
            if !urgent && started.elapsed() >= PRIORITY_BUDGET {
                return Ok(n);
            }
            let list: Vec<String> = chunk
                .iter()
                .filter_map(|id| address(addresses, *id))
                .collect();
            if list.is_empty() {
                continue;
            }
            n += list.len();
            // Jobs that ended since the snapshot are refused; the others are updated.
            let update = JobUpdate {
                priority: Some(priority),
                ..JobUpdate::default()
            };
            w.update(&list, &update)?;
        }
    }
    Ok(n)
}

/// Park non-preemptible jobs that may not borrow: their begin time far ahead and an
/// administrator's hold, marked in the AdminComment (the owner may move a begin time but
/// cannot release that hold). `requeued` are non-preemptible jobs this pass requeued for
/// running beyond their quota: parked at once, so that they cannot start beyond it again
/// before the next pass. Returns the jobs parked; a job that started or ended since the
/// snapshot makes scontrol complain and is left as it is.
fn park(
    w: &mut dyn SlurmWrite,
    plan: &Plan,
    jobs: &[ClusterJob],
    addresses: &Addresses,
    requeued: &[u64],
) -> Result<Vec<u64>, GovernError> {
    let pending = |id: &u64| {
        jobs.iter()
            .any(|j| j.id == *id && j.phase == governance::Phase::Pending)
    };
    // Jobs requeued this pass first; a long list (a burst of non-preemptible submissions) is
    // parked in chunks within a budget, the rest next pass: until then the plugin's begin time
    // keeps them waiting, and one that starts beyond its quota is requeued.
    let park_list: Vec<u64> = requeued
        .iter()
        .copied()
        .chain(plan.park.iter().copied().filter(pending))
        .filter(|id| address(addresses, *id).is_some())
        .collect();
    let started = Instant::now();
    let mut parked = Vec::new();
    for chunk in park_list.chunks(UPDATE_CHUNK) {
        if started.elapsed() >= PRIORITY_BUDGET {
            break;
        }
        let names = job_list(addresses, chunk);
        let parked_update = JobUpdate {
            begin: Some(Begin::In(governance::PARK_SECS)),
            admin_comment: Some(format!(
                "{}: its priority class may not borrow; the governor releases it when it fits its team's quota",
                governance::PARK_HOLD_MARK
            )),
            ..JobUpdate::default()
        };
        w.update(&names, &parked_update)?;
        w.hold(&names)?;
        parked.extend_from_slice(chunk);
    }
    Ok(parked)
}

/// Release the parked jobs that now fit their team's quota, in the order that keeps each
/// unable to start until it has its planned priority: hold released (begin time still
/// ahead), priority set, begin time now. Returns the jobs released.
fn release(
    w: &mut dyn SlurmWrite,
    plan: &Plan,
    jobs: &[ClusterJob],
    addresses: &Addresses,
) -> Result<Vec<u64>, GovernError> {
    let pending = |id: &u64| {
        jobs.iter()
            .find(|j| j.id == *id && j.phase == governance::Phase::Pending)
    };
    let (held, begin_only): (Vec<u64>, Vec<u64>) = plan
        .release
        .iter()
        .copied()
        .filter(|id| pending(id).is_some() && address(addresses, *id).is_some())
        .partition(|id| pending(id).is_some_and(|j| j.park_held));
    let list = |ids: &[u64]| job_list(addresses, ids);
    let now = |admin_comment: Option<String>| JobUpdate {
        begin: Some(Begin::Now),
        admin_comment,
        ..JobUpdate::default()
    };
    if !held.is_empty() {
        w.release(&list(&held))?;
        let mut by_priority: BTreeMap<u32, Vec<u64>> = BTreeMap::new();
        for id in &held {
            if let Some(&p) = plan.priorities.get(id) {
                by_priority.entry(p).or_default().push(*id);
            }
        }
        for (priority, ids) in by_priority.into_iter().rev() {
            let update = JobUpdate {
                priority: Some(priority),
                ..JobUpdate::default()
            };
            w.update(&list(&ids), &update)?;
        }
        w.update(&list(&held), &now(Some(String::new())))?;
    }
    if !begin_only.is_empty() {
        w.update(&list(&begin_only), &now(None))?;
    }
    let mut released = held;
    released.extend(begin_only);
    Ok(released)
}

/// Release the jobs the governor held whose reason is gone, and clear its mark; where the
/// hold came with a requeue, its delay is lifted ([`UNHOLD_LIFTS_WITHIN_SECS`]).
fn release_holds(
    w: &mut dyn SlurmWrite,
    unhold: &[(u64, bool)],
    addresses: &Addresses,
) -> Result<Vec<u64>, GovernError> {
    let named = |lift: Option<bool>| -> Vec<u64> {
        unhold
            .iter()
            .filter(|(id, l)| address(addresses, *id).is_some() && lift.is_none_or(|w| w == *l))
            .map(|(id, _)| *id)
            .collect()
    };
    let ids = named(None);
    if ids.is_empty() {
        return Ok(ids);
    }
    let list = job_list(addresses, &ids);
    let clear = JobUpdate {
        admin_comment: Some(String::new()),
        ..JobUpdate::default()
    };
    w.update(&list, &clear)?;
    let lifted = named(Some(true));
    if !lifted.is_empty() {
        let now = JobUpdate {
            begin: Some(Begin::Now),
            ..JobUpdate::default()
        };
        w.update(&job_list(addresses, &lifted), &now)?;
    }
    Ok(if w.release(&list)? { ids } else { Vec::new() })
}

/// The Slurm names of jobs (jobs without one are left out).
fn job_list(addresses: &Addresses, ids: &[u64]) -> Vec<String> {
    ids.iter()
        .filter_map(|id| address(addresses, *id))
        .collect()
}

#[cfg(test)]
#[path = "actuator_tests.rs"]
mod tests;
