//! Requeues that may have met a run's own end, told apart from accounting.
//!
//! A batch script that ends on its node in the milliseconds before slurmctld hears of it is
//! still RUNNING to slurmctld, so a requeue is accepted and the job would run again (seen in
//! the adversarial test: "done with job" on slurmd at .284, "Requeuing" at .285). `requeue
//! Incomplete` cannot close that race, and Slurm's own preemption (preempt/qos, mode REQUEUE)
//! has it too. Accounting tells afterwards: the requeued run's batch step is CANCELLED when
//! the requeue killed it, COMPLETED (or FAILED...) when it had ended by itself. Such a job is
//! held before it could start again (its owner may release it), with the reason in its
//! AdminComment.
//!
//! Every requeue is checked, whoever made it: the governor's own, and a running job the
//! governor sees pending at its next snapshot (Slurm's preemption, an owner's requeue). While a
//! job's check is unsettled, the governor does not lift its requeue delay
//! ([`crate::requeue_delay`]); a check that accounting cannot settle in time leaves the job to
//! Slurm's own delay. One sacct call every few seconds, only while checks are unsettled, on a
//! thread of its own; the holds go through the governor's writer ([`SlurmWrite`]: libslurm in
//! process, no `scontrol`).

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use crate::parsable::{self, Shape};
use crate::slurm_cli::SlurmCommand;
use crate::slurm_write::{JobUpdate, SlurmWrite};
use crate::squeue::parse_utc;

/// A requeue to check: did the run end by itself just before the requeue reached slurmctld?
#[derive(Debug, Clone, PartialEq, Eq)]
struct RequeueCheck {
    id: u64,
    /// How to name it to scontrol (an array task: `ARRAY_TASK`).
    name: String,
    /// The start of the run that was requeued.
    start: i64,
    at: Instant,
}

/// How long after a requeue its batch step is looked for in accounting (slurmdbd writes
/// asynchronously), and for how long: well inside Slurm's requeue delay (the job may not start
/// again for 121 s), so a held job never ran twice.
const REQUEUE_CHECK_AFTER: Duration = Duration::from_secs(2);
const REQUEUE_CHECK_FOR: Duration = Duration::from_secs(90);
const REQUEUE_CHECK_EVERY: Duration = Duration::from_secs(3);
const SACCT_CHECK_TIMEOUT: Duration = Duration::from_secs(5);
/// A job held because its run had ended by itself is looked at again in accounting this
/// often, for this long: where a later record says the requeue killed the run after all (a
/// record written during a slurmdbd outage, issue 25, finding 16), the hold was wrong and is
/// released ([`Checks::wrong_holds`]).
const HELD_RECHECK_EVERY: Duration = Duration::from_secs(30);
const HELD_RECHECK_FOR: Duration = Duration::from_secs(600);

/// The requeues not yet settled, and the check under way.
#[derive(Debug, Default)]
pub struct Checks {
    requeues: Vec<RequeueCheck>,
    checked_at: Option<Instant>,
    /// The check under way, if any.
    running: Option<std::thread::JoinHandle<RequeueOutcome>>,
    /// Requeues accounting did not settle within [`REQUEUE_CHECK_FOR`], or whose run's start
    /// was unknown: their delay is Slurm's to end (kept as long as a delay can last).
    unverified: BTreeMap<u64, Instant>,
    /// Jobs that became unverified since the last poll (to be told once).
    newly_unverified: Vec<u64>,
    /// Jobs held because their run had ended by itself, looked at again for a while.
    held: Vec<RequeueCheck>,
    held_checked_at: Option<Instant>,
    /// Holds accounting has since shown wrong: the governor releases them
    /// ([`Checks::wrong_holds`]).
    wrong: BTreeMap<u64, Instant>,
}

/// What a poll of the checks found.
#[derive(Debug, Default)]
pub struct Polled {
    /// Jobs held because their run had ended by itself.
    pub held: Vec<u64>,
    /// Jobs whose requeue cannot be checked (its run's start unknown, or not in accounting
    /// within [`REQUEUE_CHECK_FOR`]): Slurm's own requeue delay stays.
    pub unverified: Vec<u64>,
    pub failures: Vec<String>,
}

impl Checks {
    /// A requeue of job `id` (named `name` to scontrol) whose run started at `start`, made
    /// now; one already checked is not added twice.
    pub fn add(&mut self, id: u64, name: String, start: Option<i64>, now: Instant) {
        if self.requeues.iter().any(|r| r.id == id) {
            return;
        }
        match start {
            Some(start) => self.requeues.push(RequeueCheck {
                id,
                name,
                start,
                at: now,
            }),
            None => {
                if self.unverified.insert(id, now).is_none() {
                    self.newly_unverified.push(id);
                }
            }
        }
    }

    /// The jobs whose requeue delay must stay: checks not settled, or never settled.
    pub fn unsettled(&self) -> BTreeSet<u64> {
        self.requeues
            .iter()
            .map(|r| r.id)
            .chain(self.unverified.keys().copied())
            .collect()
    }

    /// Jobs held because their run had ended by itself that accounting has since shown were
    /// killed by the requeue: their hold protects nothing and is released.
    pub fn wrong_holds(&self) -> BTreeSet<u64> {
        self.wrong.keys().copied().collect()
    }

    /// These wrong holds were released.
    pub fn released(&mut self, ids: &[u64]) {
        for id in ids {
            self.wrong.remove(id);
        }
    }

    /// Take in what a check found.
    fn absorb(
        &mut self,
        outcome: RequeueOutcome,
        w: &mut dyn SlurmWrite,
        polled: &mut Polled,
        now: Instant,
    ) {
        self.requeues.retain(|r| !outcome.settled.contains(&r.id));
        self.held.retain(|r| !outcome.wrong.contains(&r.id));
        self.wrong.extend(outcome.wrong.iter().map(|id| (*id, now)));
        polled.failures = outcome.failures;
        self.hold(outcome.ended, w, polled, now);
    }

    /// Hold the jobs whose requeued run had ended by itself, in process (a user's hold, so
    /// that their owner may release it, with the reason in the AdminComment), and look at
    /// them again for a while.
    fn hold(
        &mut self,
        ended: Vec<(u64, i64, String)>,
        w: &mut dyn SlurmWrite,
        polled: &mut Polled,
        now: Instant,
    ) {
        if ended.is_empty() {
            return;
        }
        // By name: an array task's plain id may be its array's, which names every task.
        let names: Vec<String> = ended.iter().map(|(_, _, n)| n.clone()).collect();
        match w.user_hold(&names) {
            Ok(all) => {
                if !all {
                    polled.failures.push(format!(
                        "holding {}: slurmctld refused some (ended or cancelled since)",
                        names.join(",")
                    ));
                }
                let comment = JobUpdate {
                    admin_comment: Some(crate::squeue::run_ended_hold_comment()),
                    ..JobUpdate::default()
                };
                if let Err(e) = w.update(&names, &comment) {
                    polled.failures.push(e.to_string());
                }
                for (id, start, name) in ended {
                    polled.held.push(id);
                    self.held.push(RequeueCheck {
                        id,
                        name,
                        start,
                        at: now,
                    });
                }
            }
            Err(e) => polled.failures.push(format!(
                "holding {} (its run had ended before the requeue): {e}",
                names.join(",")
            )),
        }
    }

    /// Take the previous check's answer if it has come (holding through `w` the jobs whose
    /// run had ended by itself), and start the next one when due.
    pub fn poll(&mut self, w: &mut dyn SlurmWrite) -> Polled {
        let mut polled = Polled::default();
        if self
            .running
            .as_ref()
            .is_some_and(std::thread::JoinHandle::is_finished)
        {
            if let Some(h) = self.running.take() {
                match h.join() {
                    Ok(outcome) => self.absorb(outcome, w, &mut polled, Instant::now()),
                    Err(_) => polled
                        .failures
                        .push("the requeue check stopped with an internal error".into()),
                }
            }
        }
        let (unverified, newly) = (&mut self.unverified, &mut self.newly_unverified);
        self.requeues.retain(|r| {
            let keep = r.at.elapsed() < REQUEUE_CHECK_FOR;
            if !keep && unverified.insert(r.id, r.at).is_none() {
                newly.push(r.id);
            }
            keep
        });
        polled.unverified = std::mem::take(&mut self.newly_unverified);
        self.held.retain(|r| r.at.elapsed() < HELD_RECHECK_FOR);
        self.wrong.retain(|_, at| at.elapsed() < HELD_RECHECK_FOR);
        self.unverified
            .retain(|_, at| at.elapsed() < crate::requeue_delay::FORGET_AFTER);
        let due: Vec<(u64, i64, String)> = self
            .requeues
            .iter()
            .filter(|r| r.at.elapsed() >= REQUEUE_CHECK_AFTER)
            .map(|r| (r.id, r.start, r.name.clone()))
            .collect();
        let recheck_due = !self.held.is_empty()
            && self
                .held_checked_at
                .is_none_or(|t| t.elapsed() >= HELD_RECHECK_EVERY);
        let recheck: Vec<(u64, i64, String)> = if recheck_due {
            self.held
                .iter()
                .map(|r| (r.id, r.start, r.name.clone()))
                .collect()
        } else {
            Vec::new()
        };
        if (due.is_empty() && recheck.is_empty())
            || self.running.is_some()
            || (recheck.is_empty()
                && self
                    .checked_at
                    .is_some_and(|t| t.elapsed() < REQUEUE_CHECK_EVERY))
        {
            return polled;
        }
        self.checked_at = Some(Instant::now());
        if !recheck.is_empty() {
            self.held_checked_at = self.checked_at;
        }
        // sacct can take seconds on a busy slurmdbd: on a thread of its own, so that passes
        // keep their cadence; its answer is taken at a later pass.
        let spawned = std::thread::Builder::new()
            .name("requeue-check".into())
            .spawn(move || settle_requeues(&due, &recheck));
        match spawned {
            Ok(h) => self.running = Some(h),
            Err(e) => polled
                .failures
                .push(format!("cannot start the requeue check: {e}")),
        }
        polled
    }
}

/// What one requeue check found.
#[derive(Debug, Default)]
struct RequeueOutcome {
    /// Requeues whose run's end is known (no further check).
    settled: Vec<u64>,
    /// Requeued jobs whose run had ended by itself, with the run's start and the job's name:
    /// to be held by the governor's writer ([`Checks::poll`]), then looked at again.
    ended: Vec<(u64, i64, String)>,
    /// Held jobs whose run accounting now says the requeue killed: the hold was wrong.
    wrong: Vec<u64>,
    failures: Vec<String>,
}

/// Read the requeued runs' batch steps with one sacct call: which runs the requeue killed,
/// and which had ended by itself (see the module's documentation).
fn settle_requeues(due: &[(u64, i64, String)], recheck: &[(u64, i64, String)]) -> RequeueOutcome {
    let mut outcome = RequeueOutcome::default();
    let ids: Vec<String> = due
        .iter()
        .chain(recheck)
        .map(|(id, _, _)| id.to_string())
        .collect();
    let text = match SlurmCommand::new(
        "sacct",
        vec![
            "-n".into(),
            "-P".into(),
            "-D".into(),
            "-j".into(),
            ids.join(","),
            "-o".into(),
            "JobIDRaw,State,Start,ExitCode".into(),
        ],
        SACCT_CHECK_TIMEOUT,
    )
    .run()
    {
        Ok(o) => o.stdout,
        Err(e) => {
            outcome.failures.push(format!("checking requeues: {e}"));
            return outcome;
        }
    };
    outcome.wrong = wrong_holds_in(&text, recheck);
    for (id, start, name) in due {
        match requeued_run_end(&text, *id, *start) {
            Some(RunEnd::Killed) => outcome.settled.push(*id),
            Some(RunEnd::ByItself) => {
                outcome.settled.push(*id);
                outcome.ended.push((*id, *start, name.clone()));
            }
            None => {}
        }
    }
    outcome
}

/// Of the held jobs `recheck` (id, run's start, name), those whose run `sacct` (as
/// [`requeued_run_end`] reads it) now says the requeue killed.
fn wrong_holds_in(sacct: &str, recheck: &[(u64, i64, String)]) -> Vec<u64> {
    recheck
        .iter()
        .filter(|(id, start, _)| requeued_run_end(sacct, *id, *start) == Some(RunEnd::Killed))
        .map(|(id, _, _)| *id)
        .collect()
}

/// How a requeued run ended, from accounting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum RunEnd {
    /// Its batch step was cancelled: the requeue killed it.
    Killed,
    /// Its batch step completed or failed on its own before the requeue.
    ByItself,
}

/// The end of job `id`'s run that started at `start`, read from `sacct -n -P -D -o
/// JobIDRaw,State,Start,ExitCode` (its batch step `id.batch` with that start); `None` while
/// accounting does not have it yet.
///
/// A step killed by a signal (ExitCode `rc:sig` with a signal, or a shell's 128 + signal) was
/// killed, whatever its state says: a requeue landing while the batch script is still starting
/// has been seen to leave a step that is not CANCELLED (live f04: a violator requeued 1.4 s
/// after it started was taken for a run that had ended by itself, and its owner's hold replaced
/// teamshare's). Only a run that ended with its own exit status ended by itself.
fn requeued_run_end(sacct: &str, id: u64, start: i64) -> Option<RunEnd> {
    const SIGKILL: u32 = 9;
    const SIGTERM: u32 = 15;
    let step = format!("{id}.batch");
    parsable::lines(sacct).find_map(|(_, l)| {
        // ExitCode may be missing: the first three fields are enough to know the run.
        let f: [&str; 3] = parsable::fields(l, Shape::Leading).ok()?;
        if f[0].trim() != step || parse_utc(f[2]) != Some(start) {
            return None;
        }
        let exit_code = parsable::fields::<4>(l, Shape::Leading).ok().map(|f| f[3]);
        let (rc, signal) = exit_code
            .and_then(|e| e.trim().split_once(':'))
            .map(|(rc, sig)| (rc.parse::<u32>().ok(), sig.parse::<u32>().ok()))
            .unwrap_or((None, None));
        // Slurm also records a batch step its requeue killed with SIGTERM or SIGKILL as
        // FAILED with the signal's number as its exit code (15:0, seen in the utilisation
        // harness and issue 25, finding 16): a script that exits with 9 or 15 by itself in
        // the very second of the requeue is far less likely than that.
        let killed_by_signal = signal.is_some_and(|s| s != 0)
            || rc.is_some_and(|r| r > 128 || r == SIGTERM || r == SIGKILL);
        match f[1].split_whitespace().next().unwrap_or("") {
            "CANCELLED" | "PREEMPTED" | "REQUEUED" => Some(RunEnd::Killed),
            "COMPLETED" | "FAILED" | "OUT_OF_MEMORY" | "TIMEOUT" | "NODE_FAIL"
                if killed_by_signal =>
            {
                Some(RunEnd::Killed)
            }
            "COMPLETED" | "FAILED" | "OUT_OF_MEMORY" | "TIMEOUT" | "NODE_FAIL" => {
                Some(RunEnd::ByItself)
            }
            // RUNNING, PENDING...: not settled yet.
            _ => None,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::slurm_write::{FakeSlurm, Write};

    #[test]
    fn a_requeue_is_unsettled_until_checked_and_one_without_a_start_stays_so() {
        let mut c = Checks::default();
        let now = Instant::now();
        c.add(7, "7".into(), Some(100), now);
        // Seen again (the governor's own, then at the next snapshot): one check.
        c.add(7, "7".into(), Some(100), now);
        c.add(8, "8_1".into(), None, now);
        assert_eq!(c.requeues.len(), 1);
        assert_eq!(c.unsettled(), BTreeSet::from([7, 8]));
        // Too young to ask accounting: nothing started, nothing settled.
        let polled = c.poll(&mut FakeSlurm::default());
        assert!(polled.held.is_empty() && polled.failures.is_empty());
        assert!(c.running.is_none());
        assert_eq!(c.unsettled(), BTreeSet::from([7, 8]));
        // The one that cannot be checked is told once.
        assert_eq!(polled.unverified, [8]);
        c.add(8, "8_1".into(), None, now);
        assert!(c.poll(&mut FakeSlurm::default()).unverified.is_empty());
    }

    #[test]
    fn a_requeued_run_that_had_ended_by_itself_is_told_apart() {
        // 03:15:04 UTC, the runs' start.
        let start = 1_796_008_504;
        let sacct = "\
174|REQUEUED|2026-11-30T03:15:04|0:0
174.batch|COMPLETED|2026-11-30T03:15:04|0:0
174|PENDING|Unknown|0:0
175|REQUEUED|2026-11-30T03:15:04|0:0
175.batch|CANCELLED by 0|2026-11-30T03:15:04|0:15
175|PENDING|Unknown|0:0
176|REQUEUED|2026-11-30T03:15:04|0:0
177.batch|FAILED|2026-11-30T03:15:04|2:0
178.batch|FAILED|2026-11-30T03:15:04|0:9
179.batch|FAILED|2026-11-30T03:15:04|143:0
180.batch|FAILED|2026-11-30T03:15:04|15:0
";
        assert_eq!(requeued_run_end(sacct, 174, start), Some(RunEnd::ByItself));
        assert_eq!(requeued_run_end(sacct, 175, start), Some(RunEnd::Killed));
        // Failed with its own status; killed by a signal (directly, or through its shell).
        assert_eq!(requeued_run_end(sacct, 177, start), Some(RunEnd::ByItself));
        assert_eq!(requeued_run_end(sacct, 178, start), Some(RunEnd::Killed));
        assert_eq!(requeued_run_end(sacct, 179, start), Some(RunEnd::Killed));
        // The requeue's SIGTERM recorded as the step's exit code.
        assert_eq!(requeued_run_end(sacct, 180, start), Some(RunEnd::Killed));
        // Not in accounting yet; or another run of the job.
        assert_eq!(requeued_run_end(sacct, 176, start), None);
        assert_eq!(requeued_run_end(sacct, 174, start + 60), None);
    }

    /// Issue 25, finding 16: a job held against a second run is looked at again; where
    /// accounting later records its run as killed by the requeue, the hold is wrong and is
    /// handed to the governor to release, once.
    #[test]
    fn issue25_16_a_hold_accounting_later_shows_wrong_is_released() {
        let start = 1_796_008_504;
        let held = vec![
            (174, start, "174".to_string()),
            (175, start, "175".to_string()),
        ];
        // 174's run completed by itself (the hold is right); 175's was recorded FAILED at
        // first and is now CANCELLED by the requeue (the hold was wrong).
        let later = "\
174.batch|COMPLETED|2026-11-30T03:15:04|0:0
175.batch|CANCELLED by 0|2026-11-30T03:15:04|0:15
";
        assert_eq!(wrong_holds_in(later, &held), [175]);
        // Not in accounting (or another run): nothing is called wrong.
        assert!(wrong_holds_in("", &held).is_empty());
        assert!(wrong_holds_in(later, &[(175, start + 60, "175".into())]).is_empty());

        let mut c = Checks::default();
        let now = Instant::now();
        let mut polled = Polled::default();
        let first = RequeueOutcome {
            settled: vec![174, 175],
            ended: held.clone(),
            ..RequeueOutcome::default()
        };
        let fake = FakeSlurm::default();
        c.absorb(first, &mut fake.clone(), &mut polled, now);
        assert_eq!(polled.held, [174, 175]);
        // Held in process, by their names, with the reason where their owner sees it.
        let names = vec!["174".to_string(), "175".to_string()];
        let comment = JobUpdate {
            admin_comment: Some(crate::squeue::run_ended_hold_comment()),
            ..JobUpdate::default()
        };
        assert_eq!(
            fake.state().writes,
            [
                Write::UserHold(names.clone()),
                Write::Update(names, comment)
            ]
        );
        assert_eq!(c.held.len(), 2);
        assert!(c.wrong_holds().is_empty());
        let recheck = RequeueOutcome {
            wrong: vec![175],
            ..RequeueOutcome::default()
        };
        c.absorb(recheck, &mut fake.clone(), &mut Polled::default(), now);
        assert_eq!(fake.state().writes.len(), 2, "a recheck holds nobody");
        assert_eq!(c.wrong_holds(), BTreeSet::from([175]));
        assert_eq!(c.held.iter().map(|r| r.id).collect::<Vec<_>>(), [174]);
        c.released(&[175]);
        assert!(c.wrong_holds().is_empty());
    }
}
