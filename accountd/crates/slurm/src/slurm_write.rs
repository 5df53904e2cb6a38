//! What the governor writes to Slurm, behind one trait (issue 26): job updates (priority,
//! begin time, AdminComment), holds and releases, requeues and cancellations of runs, team
//! limits, and the one read the conditional actions make just before they act (which of the
//! jobs run now, and which run).
//!
//! [`CommandWriter`] runs Slurm's client commands (`scontrol`, `scancel`, `sacctmgr`,
//! `squeue`), as the governor always has; [`crate::slurm_api::LibslurmWriter`] sends the same
//! RPCs in process. [`FakeSlurm`] is a table of jobs in memory that
//! records every write, for tests of the actions without a cluster.
//!
//! Jobs are named as Slurm names them to its clients ([`crate::squeue::Addresses`]: a plain
//! id, `ARRAY_TASK`, or `ARRAY_[tasks]` for an array's pending record).

use std::collections::BTreeMap;
use std::time::Duration;

use crate::parsable::{self, Shape};
use crate::period::UnixSeconds;
use crate::slurm_cli::{SlurmCommand, SlurmCommandError};
use crate::squeue::{parse_utc, SQUEUE_TIMEOUT};

/// How long one update, hold, requeue or limit move may take.
pub const UPDATE_TIMEOUT: Duration = Duration::from_secs(20);

/// A write Slurm could not be asked, or refused where refusing is an error.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    #[error(transparent)]
    Command(#[from] SlurmCommandError),
    #[error("libslurm {call} {target}: {message}")]
    Call {
        call: &'static str,
        target: String,
        message: String,
    },
}

/// A job's begin time as the governor sets it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Begin {
    Now,
    /// This many seconds from now (parking).
    In(i64),
}

/// What one update sets on every job it names; `None` leaves a field as it is.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JobUpdate {
    pub priority: Option<u32>,
    pub begin: Option<Begin>,
    /// `Some("")` clears it.
    pub admin_comment: Option<String>,
}

/// A job that runs now, as the conditional actions check it just before they act.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RunningJob {
    /// Its run's start: a different one is a different run.
    pub start: Option<UnixSeconds>,
    /// A batch job (it can be requeued; an interactive allocation only cancelled).
    pub batch: bool,
    pub user: String,
    pub admin_comment: String,
}

/// The governor's writes (see the module's documentation). `Ok(false)` where Slurm refused
/// some of the jobs for a reason that is not an error (a job that ended or started since the
/// snapshot); `Err` where Slurm could not be asked, or where the refusal is the news
/// (a requeue, a cancellation or a limit).
pub trait SlurmWrite: Send {
    /// Update every job of `names` as `update` says.
    fn update(&mut self, names: &[String], update: &JobUpdate) -> Result<bool, WriteError>;
    /// An administrator's hold (its owner cannot release it).
    fn hold(&mut self, names: &[String]) -> Result<bool, WriteError>;
    /// A user's hold (its owner may release it).
    fn user_hold(&mut self, names: &[String]) -> Result<bool, WriteError>;
    fn release(&mut self, names: &[String]) -> Result<bool, WriteError>;
    /// Requeue a running job's run (`Incomplete`: slurmctld refuses it for a job that has
    /// finished), held when `hold`.
    fn requeue(&mut self, name: &str, hold: bool) -> Result<(), WriteError>;
    /// Cancel a job if it is running.
    fn cancel_running(&mut self, name: &str) -> Result<(), WriteError>;
    /// Set an account's GrpTRES on `cluster` (through slurmdbd).
    fn set_grp_tres(&mut self, cluster: &str, account: &str, tres: &str) -> Result<(), WriteError>;
    /// The jobs of `jobs` (id, name) that run now, by id; a job Slurm no longer knows is
    /// absent.
    fn running(&mut self, jobs: &[(u64, String)]) -> Result<BTreeMap<u64, RunningJob>, WriteError>;
    /// Calls made in this process (RPCs); client commands are counted where they are spawned
    /// ([`crate::slurm_cli::calls_on_this_thread`]).
    fn rpcs(&self) -> u64 {
        0
    }
}

/// The writes through Slurm's client commands.
#[derive(Debug, Default)]
pub struct CommandWriter;

impl CommandWriter {
    /// One scontrol call whose failure (a job that started or ended since) is not an error.
    fn scontrol_ok(args: Vec<String>) -> Result<bool, WriteError> {
        SlurmCommand::new("scontrol", args, UPDATE_TIMEOUT)
            .run_unchecked()
            .map(|(status, _)| status.success())
            .map_err(WriteError::from)
    }
}

impl SlurmWrite for CommandWriter {
    fn update(&mut self, names: &[String], update: &JobUpdate) -> Result<bool, WriteError> {
        let mut args = vec!["update".to_string(), format!("jobid={}", names.join(","))];
        if let Some(p) = update.priority {
            args.push(format!("priority={p}"));
        }
        match update.begin {
            Some(Begin::Now) => args.push("StartTime=now".into()),
            Some(Begin::In(secs)) => args.push(format!("StartTime=now+{secs}")),
            None => {}
        }
        if let Some(c) = &update.admin_comment {
            args.push(format!("AdminComment={c}"));
        }
        Self::scontrol_ok(args)
    }

    fn hold(&mut self, names: &[String]) -> Result<bool, WriteError> {
        Self::scontrol_ok(vec!["hold".into(), names.join(",")])
    }

    fn user_hold(&mut self, names: &[String]) -> Result<bool, WriteError> {
        Self::scontrol_ok(vec!["uhold".into(), names.join(",")])
    }

    fn release(&mut self, names: &[String]) -> Result<bool, WriteError> {
        Self::scontrol_ok(vec!["release".into(), names.join(",")])
    }

    fn requeue(&mut self, name: &str, hold: bool) -> Result<(), WriteError> {
        let verb = if hold { "requeuehold" } else { "requeue" };
        let args = vec![verb.into(), "Incomplete".into(), name.to_string()];
        SlurmCommand::new("scontrol", args, UPDATE_TIMEOUT).run()?;
        Ok(())
    }

    fn cancel_running(&mut self, name: &str) -> Result<(), WriteError> {
        let args = vec!["--state=RUNNING".into(), name.to_string()];
        SlurmCommand::new("scancel", args, UPDATE_TIMEOUT).run()?;
        Ok(())
    }

    fn set_grp_tres(&mut self, cluster: &str, account: &str, tres: &str) -> Result<(), WriteError> {
        let args = [
            "-i",
            "modify",
            "account",
            "where",
            &format!("name={account}"),
            &format!("cluster={cluster}"),
            "set",
            &format!("GrpTRES={tres}"),
        ];
        let args = args.iter().map(|a| a.to_string()).collect();
        SlurmCommand::new("sacctmgr", args, UPDATE_TIMEOUT).run()?;
        Ok(())
    }

    fn running(&mut self, jobs: &[(u64, String)]) -> Result<BTreeMap<u64, RunningJob>, WriteError> {
        if jobs.is_empty() {
            return Ok(BTreeMap::new());
        }
        let names: Vec<&str> = jobs.iter().map(|(_, n)| n.as_str()).collect();
        let args = ["-h", "-a", "-t", "R", "-j", &names.join(","), "-O"];
        let mut args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        args.push("JobID:|,StartTime:|,BatchFlag:|,UserName:|,admin_comment:|".into());
        // squeue exits 1 when none of the ids is known any more: that is an answer too.
        let (_, out) = SlurmCommand::new("squeue", args, SQUEUE_TIMEOUT).run_unchecked()?;
        Ok(running_jobs(&out.stdout))
    }
}

/// squeue's lines of `JobID:|,StartTime:|,BatchFlag:|,UserName:|,admin_comment:|`.
fn running_jobs(text: &str) -> BTreeMap<u64, RunningJob> {
    parsable::lines(text)
        .filter_map(|(_, l)| {
            let [id, start, batch, user, comment] = parsable::fields(l, Shape::Rest).ok()?;
            // squeue prints an empty AdminComment as `(null)`.
            let comment = comment.trim().trim_end_matches('|').trim();
            let comment = if comment == "(null)" { "" } else { comment };
            let job = RunningJob {
                start: parse_utc(start),
                batch: batch.trim() != "0",
                user: user.trim().to_string(),
                admin_comment: comment.to_string(),
            };
            Some((id.trim().parse().ok()?, job))
        })
        .collect()
}

/// One write [`FakeSlurm`] was asked for, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Write {
    Update(Vec<String>, JobUpdate),
    Hold(Vec<String>),
    UserHold(Vec<String>),
    Release(Vec<String>),
    Requeue(String, bool),
    Cancel(String),
    GrpTres(String, String),
    Running(Vec<String>),
}

/// A stand-in for Slurm in tests: the jobs that run (by name), and every write asked for.
/// A requeue or cancellation of a job that does not run fails as slurmctld's does; a limit
/// move fails for the accounts in `refuse_limits`. Clones share one state, so a test keeps a
/// clone to look at what the writer it handed over was asked.
#[derive(Debug, Default, Clone)]
pub struct FakeSlurm {
    state: std::sync::Arc<std::sync::Mutex<FakeState>>,
}

/// What a [`FakeSlurm`] holds.
#[derive(Debug, Default)]
pub struct FakeState {
    /// Running jobs by their name.
    pub running: BTreeMap<String, (u64, RunningJob)>,
    pub refuse_limits: Vec<String>,
    pub writes: Vec<Write>,
    /// How long each job update takes (slurmctld queues them behind its scheduler).
    pub update_delay: std::time::Duration,
}

impl FakeSlurm {
    /// Its state (a poisoned lock is a failed test already).
    pub fn state(&self) -> std::sync::MutexGuard<'_, FakeState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn record(&self, w: Write) {
        self.state().writes.push(w);
    }

    fn end(&self, name: &str, what: &'static str) -> Result<(), WriteError> {
        match self.state().running.remove(name) {
            Some(_) => Ok(()),
            None => Err(WriteError::Call {
                call: what,
                target: name.to_string(),
                message: "Job has already finished".into(),
            }),
        }
    }
}

impl SlurmWrite for FakeSlurm {
    fn update(&mut self, names: &[String], update: &JobUpdate) -> Result<bool, WriteError> {
        self.record(Write::Update(names.to_vec(), update.clone()));
        let delay = self.state().update_delay;
        std::thread::sleep(delay);
        Ok(true)
    }

    fn hold(&mut self, names: &[String]) -> Result<bool, WriteError> {
        self.record(Write::Hold(names.to_vec()));
        Ok(true)
    }

    fn user_hold(&mut self, names: &[String]) -> Result<bool, WriteError> {
        self.record(Write::UserHold(names.to_vec()));
        Ok(true)
    }

    fn release(&mut self, names: &[String]) -> Result<bool, WriteError> {
        self.record(Write::Release(names.to_vec()));
        Ok(true)
    }

    fn requeue(&mut self, name: &str, hold: bool) -> Result<(), WriteError> {
        self.record(Write::Requeue(name.to_string(), hold));
        self.end(name, "requeue")
    }

    fn cancel_running(&mut self, name: &str) -> Result<(), WriteError> {
        self.record(Write::Cancel(name.to_string()));
        self.end(name, "cancel")
    }

    fn set_grp_tres(&mut self, _: &str, account: &str, tres: &str) -> Result<(), WriteError> {
        self.record(Write::GrpTres(account.to_string(), tres.to_string()));
        if self.state().refuse_limits.iter().any(|a| a == account) {
            return Err(WriteError::Call {
                call: "slurmdb_associations_modify",
                target: account.to_string(),
                message: "slurmdbd is down".into(),
            });
        }
        Ok(())
    }

    fn running(&mut self, jobs: &[(u64, String)]) -> Result<BTreeMap<u64, RunningJob>, WriteError> {
        let names: Vec<String> = jobs.iter().map(|(_, n)| n.clone()).collect();
        self.record(Write::Running(names.clone()));
        let state = self.state();
        Ok(names
            .iter()
            .filter_map(|n| state.running.get(n).cloned())
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn squeues_running_jobs_read_with_their_runs_owner_and_comment() {
        let text = "7|2026-11-30T03:15:04|1|alice|(null)|\n8|2026-11-30T03:15:05|0|bob|a|b|\n";
        let jobs = running_jobs(text);
        assert_eq!(jobs[&7].start, Some(1_796_008_504));
        assert!(jobs[&7].batch && !jobs[&8].batch);
        assert_eq!(jobs[&7].admin_comment, "");
        assert_eq!(
            (jobs[&8].user.as_str(), jobs[&8].admin_comment.as_str()),
            ("bob", "a|b")
        );
    }

    #[test]
    fn the_fake_refuses_to_end_a_run_that_is_not_running() {
        let mut fake = FakeSlurm::default();
        let seen = fake.clone();
        fake.state()
            .running
            .insert("5_2".into(), (5, RunningJob::default()));
        assert!(fake.requeue("5_2", false).is_ok());
        assert!(fake.requeue("5_2", false).is_err());
        assert!(fake.cancel_running("6").is_err());
        assert_eq!(seen.state().writes.len(), 3);
    }
}
