//! Slurm's requeue delay, lifted once it protects nothing (issue 24).
//!
//! A requeued batch job (preempted by Slurm's preempt/qos, or requeued by the governor for a
//! reclaim or a displacement) gets a begin time of now + `cred_expire` + 1 s (121 s by
//! default; `batch_requeue_fini` in slurmctld's job_mgr.c): its GPUs are back at once, but
//! the job itself may not run again for two minutes even where idle lendable GPUs wait for
//! it. In a shared cluster that is idle capacity with work waiting, and longer turnarounds for
//! the teams whose borrowed jobs were reclaimed.
//!
//! The delay covers two things. Slurm's: a new launch credential must be created after the
//! old one was revoked (slurmd compares whole seconds), which any wait of more than a second
//! after the requeue ensures. teamshare's: a run the governor requeued in the very
//! milliseconds it ended by itself must be held before it could run twice, which the requeue
//! check ([`crate::requeue_check`]) decides from accounting. So the governor sets such a
//! job's begin time back to now ([`Tracker::due`]) when:
//! - it saw the job run in an earlier snapshot and pending now, not held, not parked by
//!   teamshare (a parked job's begin time is a year ahead), waiting on its begin time;
//! - at least [`LIFT_AFTER`] has passed since it saw it pending;
//! - its requeue's check ([`crate::requeue_check`]), whoever requeued it, is settled: the run
//!   was killed, not ended by itself;
//! - its priority is the one the plan gave it, below every running job's (it can preempt
//!   nobody the moment it may start).
//!
//! A job whose own owner asked for a begin time was never running when it was asked, and a
//! job requeued more than [`FORGET_AFTER`] ago has its delay behind it: neither is touched.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use teamshare_policy::governance::{ClusterJob, Phase, Plan};
use teamshare_policy::priority;

/// How long after a job was seen requeued its delay may be lifted: past the second its old
/// credential was revoked in.
pub const LIFT_AFTER: Duration = Duration::from_secs(2);

/// How long a requeued job waits under the governor before it may start again: [`LIFT_AFTER`]
/// and up to a pass (what `accountd replay` simulates; Slurm alone: 121 s).
pub const GOVERNED_DELAY_SECS: i64 = 3;

/// Past Slurm's default requeue delay (121 s) and some: nothing left to lift.
pub const FORGET_AFTER: Duration = Duration::from_secs(150);

/// The jobs seen running, and those seen pending since.
#[derive(Debug, Default)]
pub struct Tracker {
    /// The jobs running in the last snapshot seen, with their run's start.
    running: BTreeMap<u64, Option<i64>>,
    requeued: BTreeMap<u64, Instant>,
}

impl Tracker {
    /// Take in a snapshot: the jobs seen running before and pending now are requeued. Returns
    /// those not known as requeued yet (not the governor's own, see [`Tracker::note_requeued`]),
    /// with the start of the run that was ended, for the requeue check
    /// ([`crate::requeue_check`]).
    pub fn observe(&mut self, jobs: &[ClusterJob], now: Instant) -> Vec<(u64, Option<i64>)> {
        let pending: BTreeSet<u64> = jobs
            .iter()
            .filter(|j| j.phase == Phase::Pending)
            .map(|j| j.id)
            .collect();
        let mut new = Vec::new();
        for (id, start) in &self.running {
            if pending.contains(id) && !self.requeued.contains_key(id) {
                self.requeued.insert(*id, now);
                new.push((*id, *start));
            }
        }
        self.requeued.retain(|id, at| {
            pending.contains(id) && now.saturating_duration_since(*at) < FORGET_AFTER
        });
        // A completing job's start is not its run's: Slurm 24.11 and later show a preempted
        // job's start moved to the preemption while it completes (seen live in p04). The start
        // seen while it ran is kept; a job first seen completing has none known.
        let previous = std::mem::take(&mut self.running);
        self.running = jobs
            .iter()
            .filter(|j| j.phase == Phase::Running)
            .map(|j| {
                let start = if j.completing {
                    previous.get(&j.id).copied().flatten()
                } else {
                    j.start
                };
                (j.id, start)
            })
            .collect();
        new
    }

    /// The governor requeued job `id` just now (after [`Tracker::observe`] took the snapshot
    /// it acted on): its check is the governor's already.
    pub fn note_requeued(&mut self, id: u64, now: Instant) {
        self.requeued.entry(id).or_insert(now);
    }

    /// The jobs of this snapshot (taken in by [`Tracker::observe`]) whose requeue delay may
    /// be lifted now (see the module's documentation); `unsettled` are the requeues whose
    /// check has not told yet whether their run was killed.
    pub fn due(
        &mut self,
        jobs: &[ClusterJob],
        plan: &Plan,
        unsettled: &BTreeSet<u64>,
        now: Instant,
    ) -> Vec<u64> {
        let pending: BTreeMap<u64, &ClusterJob> = jobs
            .iter()
            .filter(|j| j.phase == Phase::Pending)
            .map(|j| (j.id, j))
            .collect();
        let due: Vec<u64> = self
            .requeued
            .iter()
            .filter(|(id, at)| {
                now.saturating_duration_since(**at) >= LIFT_AFTER
                    && !unsettled.contains(id)
                    && pending
                        .get(id)
                        .is_some_and(|j| waits_for_its_delay(j, plan))
            })
            .map(|(id, _)| *id)
            .collect();
        for id in &due {
            self.requeued.remove(id);
        }
        due
    }
}

/// A pending job that waits on its begin time alone, with the plan's priority already set,
/// and that priority below every running job's.
fn waits_for_its_delay(j: &ClusterJob, plan: &Plan) -> bool {
    !j.eligible
        && !j.parked
        && !j.park_held
        && j.priority != 0
        && plan.priorities.get(&j.id) == Some(&j.priority)
        && priority::level(j.priority) < priority::VICTIM_BASE
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(id: u64, phase: Phase, eligible: bool, prio: u32) -> ClusterJob {
        ClusterJob {
            id,
            team: "t".into(),
            phase,
            gpus: 1,
            gpu_type: None,
            priority: prio,
            submit: 0,
            start: None,
            eligible,
            parked: false,
            park_held: false,
            batch: true,
            nodes: Vec::new(),
            node_count: 1,
            completing: false,
            tasks: 1,
        }
    }

    fn plan(priorities: &[(u64, u32)]) -> Plan {
        Plan {
            priorities: priorities.iter().copied().collect(),
            ..Plan::default()
        }
    }

    /// One snapshot taken in, and what is due in it.
    fn step(
        t: &mut Tracker,
        jobs: &[ClusterJob],
        p: &Plan,
        unsettled: &BTreeSet<u64>,
        now: Instant,
    ) -> Vec<u64> {
        t.observe(jobs, now);
        t.due(jobs, p, unsettled, now)
    }

    #[test]
    fn requeues_made_by_others_are_told_with_their_runs_start() {
        let mut t = Tracker::default();
        let t0 = Instant::now();
        let mut running: Vec<ClusterJob> = [1, 2, 3]
            .iter()
            .map(|id| job(*id, Phase::Running, true, 1))
            .collect();
        running[0].start = Some(100);
        running[1].start = Some(200);
        assert!(t.observe(&running, t0).is_empty());
        // 1 preempted by Slurm, 2 requeued by the governor (noted), 3 still running.
        t.note_requeued(2, t0);
        let jobs = vec![
            job(1, Phase::Pending, false, 1),
            job(2, Phase::Pending, false, 1),
            running[2].clone(),
        ];
        assert_eq!(t.observe(&jobs, t0), [(1, Some(100))]);
        // Told once.
        assert!(t.observe(&jobs, t0 + LIFT_AFTER).is_empty());
    }

    #[test]
    fn a_completing_jobs_start_is_the_one_seen_while_it_ran() {
        let t0 = Instant::now();
        let pending = [
            job(1, Phase::Pending, false, 1),
            job(2, Phase::Pending, false, 1),
        ];
        // 1 runs, then completes its preemption with its start shown as the preemption's
        // (Slurm 24.11+); 2 is first seen completing.
        let mut t = Tracker::default();
        let mut a = job(1, Phase::Running, true, 1);
        a.start = Some(100);
        let mut b = job(2, Phase::Running, true, 1);
        b.start = Some(100);
        b.completing = true;
        t.observe(&[a.clone(), b.clone()], t0);
        a.completing = true;
        a.start = Some(104);
        t.observe(&[a, b], t0);
        // 1 keeps the start it ran with; 2's run's start is unknown.
        assert_eq!(t.observe(&pending, t0), [(1, Some(100)), (2, None)]);
    }

    #[test]
    fn a_requeued_job_is_let_go_once_its_credential_second_passed_and_its_requeue_settled() {
        let borrow = priority::encode(priority::BORROW_BASE, 0);
        let victim = priority::encode(priority::victim_level(0), 0);
        let p = plan(&[(1, borrow), (2, borrow), (3, borrow)]);
        let mut t = Tracker::default();
        let t0 = Instant::now();
        // 1, 2, 3 run; 4 waits on the begin time its owner gave it.
        let running = [1, 2, 3].map(|id| job(id, Phase::Running, true, victim));
        let mut jobs = running.to_vec();
        jobs.push(job(4, Phase::Pending, false, borrow));
        assert!(step(&mut t, &jobs, &p, &BTreeSet::new(), t0).is_empty());
        // All three requeued: 1 with its victim priority still, 2 ready, 3 the governor's
        // own requeue, not settled yet.
        let requeued = vec![
            job(1, Phase::Pending, false, victim),
            job(2, Phase::Pending, false, borrow),
            job(3, Phase::Pending, false, borrow),
            job(4, Phase::Pending, false, borrow),
        ];
        let unsettled = BTreeSet::from([3]);
        assert!(step(&mut t, &requeued, &p, &unsettled, t0).is_empty());
        let soon = t0 + Duration::from_millis(1500);
        assert!(step(&mut t, &requeued, &p, &unsettled, soon).is_empty());
        let later = t0 + LIFT_AFTER;
        assert_eq!(step(&mut t, &requeued, &p, &unsettled, later), [2]);
        // Once settled, and once the plan's priority is in place, the others follow; never
        // the owner's own begin time (4), and 2 only once.
        let mut lowered = requeued.clone();
        lowered[0].priority = borrow;
        let settled = BTreeSet::new();
        let due = step(
            &mut t,
            &lowered,
            &p,
            &settled,
            later + Duration::from_secs(1),
        );
        assert_eq!(due, [1, 3]);
        assert!(step(
            &mut t,
            &lowered,
            &p,
            &settled,
            later + Duration::from_secs(2)
        )
        .is_empty());
    }

    #[test]
    fn parked_held_and_long_requeued_jobs_are_left_alone() {
        let borrow = priority::encode(priority::BORROW_BASE, 0);
        let p = plan(&[(1, borrow), (2, borrow), (3, borrow)]);
        let mut t = Tracker::default();
        let t0 = Instant::now();
        let running: Vec<ClusterJob> = [1, 2, 3]
            .iter()
            .map(|id| job(*id, Phase::Running, true, borrow))
            .collect();
        step(&mut t, &running, &p, &BTreeSet::new(), t0);
        let mut parked = job(1, Phase::Pending, false, borrow);
        parked.parked = true;
        let held = job(2, Phase::Pending, false, 0);
        let plain = job(3, Phase::Pending, false, borrow);
        let jobs = vec![parked, held, plain];
        assert!(step(&mut t, &jobs, &p, &BTreeSet::new(), t0).is_empty());
        // Only the plain one, however long the others wait.
        let later = t0 + LIFT_AFTER;
        assert_eq!(step(&mut t, &jobs, &p, &BTreeSet::new(), later), [3]);
        assert!(step(&mut t, &jobs, &p, &BTreeSet::new(), later + LIFT_AFTER).is_empty());
        // A requeue seen long ago is forgotten: its delay is behind it.
        let mut t = Tracker::default();
        step(&mut t, &running, &p, &BTreeSet::new(), t0);
        let waiting = vec![job(3, Phase::Pending, false, borrow)];
        step(&mut t, &waiting, &p, &BTreeSet::new(), t0);
        assert!(step(&mut t, &waiting, &p, &BTreeSet::new(), t0 + FORGET_AFTER).is_empty());
    }
}
