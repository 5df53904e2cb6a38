//! Quiet passes: a pass reads every job only when something the plan depends on may have
//! changed (issue 26: governor CPU at 10,000 waiting jobs; docs/design/governance-at-scale.md,
//! decision 11).
//!
//! Reading 10,000 jobs is a message of megabytes that slurmctld packs and hashes and the
//! governor receives, hashes again, unpacks and reads: at a pass every 500 ms that was most of
//! the governor's CPU and a share of slurmctld's. Most passes at a steady queue find nothing a
//! plan would act on. So each pass first takes a [`ChangeMark`] (the partitions and nodes,
//! which slurmctld sends only when they changed, and its counters of job events), and reads the
//! jobs, plans and publishes only when one of these holds:
//! - no full read yet (a new governor: start or reload), or the client commands read Slurm;
//! - the mark moved: a job was submitted, started, ended, cancelled or failed, or a node or
//!   partition changed (a job's start or end changes its nodes' allocation);
//! - the last full read is older than [`FULL_READ_EVERY`] (at most half of `state_max_age`):
//!   what no mark shows (a user's `scontrol update` of a pending job, a hold, a begin time
//!   reached, the time-driven rules such as the reclaim fallback) is seen within it;
//! - new inputs of the plan: fair-share factors or GPU idle windows read since;
//! - a plan was published that no action took (the actions were busy), and they are done: the
//!   first pass after them reads afresh and is acted on, as before.
//!
//! And full reads are spaced by their own cost: none begins sooner after the last than that
//! read's CPU time (read, plan, publish, on the governor's thread) divided by [`READ_SHARE`],
//! so that reading a large queue takes at most that share of a core however often things move
//! (at 10,000 waiting jobs under churn something moves every pass). A small queue's read costs
//! a few milliseconds and is never held back; the bound above wins over the spacing.
//!
//! A quiet pass that found nothing moved publishes the last state again as of now (its read
//! time kept): what it says still holds, and the plugin, `accountd status` and the metrics see a
//! governor that is current. One held back by the spacing publishes nothing: its state is as
//! old as its read, and stays under `state_max_age` by the bound above.

use std::time::{Duration, Instant};

use super::{write_state, PassReport};
use crate::period;
use crate::slurm_api::ChangeMark;

/// The longest the governor goes without reading every job, whatever the marks say.
pub(super) const FULL_READ_EVERY: Duration = Duration::from_secs(2);

/// The share of a core the governor's full reads may take between them (see the module).
pub(super) const READ_SHARE: f64 = 0.04;

/// What a pass does with what it knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Verdict {
    /// Read every job, plan and publish.
    Read,
    /// Nothing moved: no read; the last state is published again as of now.
    Unchanged,
    /// Something moved, but the last full read was too recent for its cost: no read, nothing
    /// published.
    Deferred,
}

/// What decides whether a pass may be quiet.
#[derive(Debug, Default)]
pub(super) struct QuietPasses {
    /// The mark taken just before the last full read, and when.
    last: Option<(ChangeMark, Instant)>,
    /// A published plan that no action took: the next pass with the actuator idle reads.
    pub(super) unacted: bool,
    /// The CPU time of the last full read (read, plan, publish).
    cost: Duration,
}

/// What a pass knows besides the mark when it asks whether it may be quiet.
#[derive(Debug, Clone, Copy)]
pub(super) struct PassInputs {
    /// Fair-share factors or GPU idle windows changed since the last full read.
    pub(super) changed: bool,
    /// No actions are under way (a plan made now would be acted on).
    pub(super) actuator_idle: bool,
    /// The bound on the time between full reads ([`full_read_every`]).
    pub(super) every: Duration,
}

impl QuietPasses {
    /// What a pass that took `mark` at `now` does.
    pub(super) fn verdict(&self, mark: &ChangeMark, inputs: PassInputs, now: Instant) -> Verdict {
        let Some((last, at)) = &self.last else {
            return Verdict::Read;
        };
        let since = now.saturating_duration_since(*at);
        let moved = last != mark || inputs.changed || (self.unacted && inputs.actuator_idle);
        if since >= inputs.every {
            Verdict::Read
        } else if since < self.spacing(inputs.every) {
            if moved {
                Verdict::Deferred
            } else {
                Verdict::Unchanged
            }
        } else if moved {
            Verdict::Read
        } else {
            Verdict::Unchanged
        }
    }

    /// The least time between the starts of two full reads: the last one's cost over
    /// [`READ_SHARE`], never more than `every`.
    pub(super) fn spacing(&self, every: Duration) -> Duration {
        self.cost.div_f64(READ_SHARE).min(every)
    }

    /// The CPU time the full read just made took.
    pub(super) fn cost(&mut self, cpu: Duration) {
        self.cost = cpu;
    }

    /// A full read began at `at`, after `mark` was taken (none: the reader has no marks, or
    /// taking one failed, and the next pass reads again).
    pub(super) fn read(&mut self, mark: Option<ChangeMark>, at: Instant) {
        self.last = mark.map(|m| (m, at));
    }
}

/// [`FULL_READ_EVERY`], or half of `state_max_age` where that is shorter: the state the plugin
/// judges by never ages past its limit for want of a read.
pub(super) fn full_read_every(state_max_age: Duration) -> Duration {
    FULL_READ_EVERY.min(state_max_age / 2)
}

/// The CPU time this thread has used (none where the clock cannot be read: no spacing).
pub(super) fn thread_cpu() -> Duration {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    Duration::new(
        u64::try_from(t.tv_sec).unwrap_or(0),
        u32::try_from(t.tv_nsec).unwrap_or(0),
    )
}

impl super::Governor {
    /// Take the mark of Slurm's state and say in `report` whether this pass is quiet
    /// (this module); the mark, for the full read to keep (none: no marks with this reader, or
    /// the mark failed and the full read reports why).
    pub(super) fn take_mark(
        &mut self,
        inputs_changed: bool,
        started: Instant,
        report: &mut PassReport,
    ) -> Option<crate::slurm_api::ChangeMark> {
        let (mark, calls) = self.reader.change_mark()?;
        report.slurm_calls = calls;
        let mark = mark.ok()?;
        let inputs = PassInputs {
            changed: inputs_changed,
            actuator_idle: self.acting.is_none(),
            every: full_read_every(self.config.governance.state_max_age),
        };
        let verdict = self.quiet.verdict(&mark, inputs, started);
        report.quiet = verdict != Verdict::Read;
        if verdict == Verdict::Unchanged {
            self.republish(report);
        }
        Some(mark)
    }

    /// Publish the last state again as of now (a quiet pass found nothing moved since its
    /// read, so what it says holds): its read time stays, and where its plan has been acted
    /// on in full, the state says so of the new time too (the plan is the same).
    fn republish(&mut self, report: &mut PassReport) {
        let Some(state) = &mut self.published else {
            return;
        };
        let now = period::now();
        if now <= state.generated_at {
            return;
        }
        if self.acted_at >= state.generated_at {
            state.acted_at = now;
            self.acted_at = now;
        }
        state.generated_at = now;
        if let Err(e) = write_state(&self.config.accountd.state_file, state) {
            report.failures.push(e.to_string());
            report.state_write_failed = true;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inputs() -> PassInputs {
        PassInputs {
            changed: false,
            actuator_idle: true,
            every: FULL_READ_EVERY,
        }
    }

    #[test]
    fn a_pass_is_quiet_only_when_nothing_it_plans_from_moved() {
        let t0 = Instant::now();
        let mark = ChangeMark::of([10, 5, 3, 1, 0], (100, 200));
        let mut q = QuietPasses::default();
        // No full read yet: read.
        assert_eq!(Verdict::Read, q.verdict(&mark, inputs(), t0));
        q.read(Some(mark), t0);
        assert_eq!(
            Verdict::Unchanged,
            q.verdict(&mark, inputs(), t0 + Duration::from_millis(500))
        );
        // A job submitted, started, ended, cancelled, failed; a node or a partition changed.
        for i in 0..5 {
            let mut events = [10, 5, 3, 1, 0];
            events[i] += 1;
            let moved = ChangeMark::of(events, (100, 200));
            assert_eq!(
                Verdict::Read,
                q.verdict(&moved, inputs(), t0),
                "counter {i}"
            );
        }
        assert_eq!(
            Verdict::Read,
            q.verdict(&ChangeMark::of([10, 5, 3, 1, 0], (101, 200)), inputs(), t0)
        );
        assert_eq!(
            Verdict::Read,
            q.verdict(&ChangeMark::of([10, 5, 3, 1, 0], (100, 201)), inputs(), t0)
        );
        // The bound on the time between full reads.
        assert_eq!(
            Verdict::Read,
            q.verdict(&mark, inputs(), t0 + FULL_READ_EVERY)
        );
        // New fair-share factors or idle windows.
        let changed = PassInputs {
            changed: true,
            ..inputs()
        };
        assert_eq!(Verdict::Read, q.verdict(&mark, changed, t0));
        // A plan no action took: read again once the actions are done, not while they run.
        q.unacted = true;
        assert_eq!(Verdict::Read, q.verdict(&mark, inputs(), t0));
        let busy = PassInputs {
            actuator_idle: false,
            ..inputs()
        };
        assert_eq!(Verdict::Unchanged, q.verdict(&mark, busy, t0));
        // A read without a mark (the mark failed): the next pass reads.
        q.read(None, t0);
        assert_eq!(Verdict::Read, q.verdict(&mark, inputs(), t0));
    }

    #[test]
    fn full_reads_are_spaced_by_their_cost_within_the_bound() {
        let t0 = Instant::now();
        let mark = ChangeMark::of([1, 1, 1, 1, 1], (1, 1));
        let moved = ChangeMark::of([2, 1, 1, 1, 1], (1, 1));
        let mut q = QuietPasses::default();
        q.read(Some(mark), t0);
        // A cheap read (a small queue): the next pass that sees a move reads.
        q.cost(Duration::from_millis(2));
        assert_eq!(q.spacing(FULL_READ_EVERY), Duration::from_millis(50));
        assert_eq!(
            Verdict::Read,
            q.verdict(&moved, inputs(), t0 + Duration::from_millis(500))
        );
        // A read of 40 ms (a queue of several thousand jobs): one a second at most.
        q.cost(Duration::from_millis(40));
        assert_eq!(
            Verdict::Deferred,
            q.verdict(&moved, inputs(), t0 + Duration::from_millis(500))
        );
        assert_eq!(
            Verdict::Read,
            q.verdict(&moved, inputs(), t0 + Duration::from_millis(1000))
        );
        // Nothing moved after the spacing: still quiet.
        assert_eq!(
            Verdict::Unchanged,
            q.verdict(&mark, inputs(), t0 + Duration::from_millis(1500))
        );
        // A read dearer than the bound allows: the bound wins.
        q.cost(Duration::from_millis(400));
        assert_eq!(q.spacing(FULL_READ_EVERY), FULL_READ_EVERY);
        assert_eq!(
            Verdict::Read,
            q.verdict(&moved, inputs(), t0 + FULL_READ_EVERY)
        );
        assert!(thread_cpu() > Duration::ZERO);
    }

    #[test]
    fn full_reads_come_at_least_twice_per_state_max_age() {
        assert_eq!(full_read_every(Duration::from_secs(30)), FULL_READ_EVERY);
        assert_eq!(
            full_read_every(Duration::from_secs(3)),
            Duration::from_millis(1500)
        );
    }
}
