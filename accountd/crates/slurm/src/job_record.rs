//! One job as Slurm holds it: the fields the governor reads, typed. They are built from
//! libslurm's job records in process ([`crate::slurm_api::Session::jobs`]), or from the text
//! of squeue with the governor's fields (`TEAMSHARE_SLURM_READER=commands`, the fallback:
//! [`crate::squeue::squeue_records`]). Either way the one reader of [`crate::squeue`] turns them
//! into the plan's jobs, with the hardening against what users write.
//!
//! What stays text is what Slurm itself keeps as text in its record: TRES requests and
//! allocations (`gres/gpu:a100=2`), host lists, reasons and comments.

use crate::parsable::MalformedLine;
use crate::period::UnixSeconds;

/// A job's state as the governor tells them apart (Slurm's own name of the state, with its
/// flags: a job being requeued or configured is none of the four and is not read).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JobState {
    Pending,
    Running,
    Completing,
    Suspended,
    Other,
}

impl JobState {
    /// The state of Slurm's name for it (`job_state_string`, which squeue prints).
    pub fn from_name(name: &str) -> JobState {
        match name.trim() {
            "PENDING" => JobState::Pending,
            "RUNNING" => JobState::Running,
            "COMPLETING" => JobState::Completing,
            "SUSPENDED" => JobState::Suspended,
            _ => JobState::Other,
        }
    }
}

/// A job's GPU request in the forms Slurm keeps it (`None`: not given).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TresAsk {
    pub per_job: Option<String>,
    pub per_node: Option<String>,
    pub per_task: Option<String>,
    pub per_socket: Option<String>,
    /// `--sockets-per-node`.
    pub sockets_per_node: Option<u32>,
}

/// Where a record came from, to name it when it cannot be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    /// A line of squeue's output: its number and its text.
    Line(usize, String),
    /// The nth record of libslurm's answer (1-based).
    Record(usize),
}

/// One job of Slurm's answer, typed (see the module's documentation).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobRecord {
    pub id: u64,
    pub account: String,
    pub state: JobState,
    /// `None` where squeue's text does not read as a number.
    pub priority: Option<u32>,
    /// `None` where unset or unreadable.
    pub submit: Option<UnixSeconds>,
    pub start: Option<UnixSeconds>,
    /// The allocation (the request while there is none), as Slurm writes TRES.
    pub tres_alloc: String,
    pub ask: TresAsk,
    pub num_nodes: Option<u32>,
    pub num_tasks: Option<u32>,
    /// Slurm's reason for a pending job, in its words (the description where it gave one).
    pub reason: String,
    pub batch: bool,
    /// The nodes a running job holds, as a host list.
    pub node_list: String,
    /// When it may start (its begin time); `None` while a dependency is unmet.
    pub eligible_time: Option<UnixSeconds>,
    /// Of a job array: the array's id, and the task (`7`) or the pending tasks (`4-9%2`).
    pub array_job_id: Option<u64>,
    pub array_task: Option<String>,
    /// Asked for whole nodes (`--exclusive`).
    pub whole_node: bool,
    /// A component of a heterogeneous job: its leader's id and its offset.
    pub het: Option<(u64, u32)>,
    /// The nodes Slurm's backfill reserved for a pending job, as a host list.
    pub sched_nodes: String,
    pub admin_comment: String,
    /// Per node of `node_list`, in its order, Slurm's description of the generic resources
    /// a running job holds there (`scontrol show job -d`'s `GRES=`); empty where not read
    /// (libslurm answers it only when asked for details, squeue's text never).
    pub gres_detail: Vec<String>,
    pub origin: Origin,
}

impl JobRecord {
    /// How a record is named when it cannot be read: its line, or its fields in squeue's
    /// order (as much as tells an administrator which job and which request).
    pub fn unreadable(&self, reason: &str) -> MalformedLine {
        match &self.origin {
            Origin::Line(number, line) => MalformedLine::new("squeue", *number, reason, line),
            Origin::Record(number) => {
                let or_na = |s: &Option<String>| s.clone().unwrap_or_else(|| "N/A".into());
                let text = format!(
                    "{}|{}|{:?}|{}|{}|{}|{}|{}|{}|{}",
                    self.id,
                    self.account,
                    self.state,
                    self.tres_alloc,
                    or_na(&self.ask.per_job),
                    or_na(&self.ask.per_node),
                    or_na(&self.ask.per_task),
                    or_na(&self.ask.per_socket),
                    self.array_task.as_deref().unwrap_or("N/A"),
                    self.admin_comment,
                );
                MalformedLine::new("libslurm", *number, reason, &text)
            }
        }
    }
}

/// Slurm's jobs as read, in its order: a record, or what could not be read of a line.
#[derive(Debug, Default)]
pub struct Records {
    pub items: Vec<Result<JobRecord, MalformedLine>>,
}

impl Records {
    /// The records read.
    pub fn jobs(&self) -> impl Iterator<Item = &JobRecord> {
        self.items.iter().filter_map(|r| r.as_ref().ok())
    }
}
