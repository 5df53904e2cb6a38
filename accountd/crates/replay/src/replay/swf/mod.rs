//! A trace from a Standard Workload Format file (the Parallel Workloads Archive's format,
//! version 2.2) and a team mapping.
//!
//! # The SWF file
//!
//! Lines starting with `;` are comments; those of the form `; Key: value` before, between or
//! after the jobs are the header. Read from it: `UnixStartTime` (the epoch second of time 0;
//! 0 when absent), `MaxProcs` (the machine's processors) and `MaxNodes` (its nodes; taken as
//! its processors when `MaxProcs` is absent, as the format says of non-SMP machines),
//! `Version`, and the other numeric keys (`MaxJobs`, `MaxRecords`, `MaxRuntime`, `MaxMemory`,
//! `MaxQueues`, `MaxPartitions`), which are only checked. Any other comment is free text. A
//! numeric key whose value is not a number, or that is given twice with different values, is
//! an error ([`SwfError::Header`]): the whole trace depends on it.
//!
//! Every other non-blank line is a job of 18 whitespace-separated numbers (times may have
//! decimals; they are rounded), `-1` meaning unknown: 1 job number, 2 submit time, 3 wait
//! time, 4 run time, 5 allocated processors, 6 average CPU time, 7 used memory, 8 requested
//! processors, 9 requested time, 10 requested memory, 11 status (0 failed, 1 completed,
//! 5 cancelled; 2, 3 and 4 are partial executions of a checkpointed or swapped job), 12 user,
//! 13 group, 14 executable, 15 queue, 16 partition, 17 preceding job, 18 think time. A job line
//! that cannot be read (another field count, a field that is not a number, a value below -1,
//! a time above [`MAX_SECS`] or a processor count above [`MAX_PROCS`], values no real machine
//! logs, an unknown submit time, a job number seen before) is skipped and counted, and the first
//! [`MALFORMED_LISTED`] are kept for the report ([`SwfSummary::malformed`]). A file of which
//! no job line can be read is an error ([`SwfError::NoJobs`]): it is not SWF.
//!
//! # From an SWF job to a [`TraceJob`](super::TraceJob)
//!
//! - team: its user's mapping, else its group's, else the map's default; a job with none is
//!   skipped and counted ([`SwfSummary::unmapped`]), as is every job when nothing maps
//!   ([`SwfError::NothingMapped`]);
//! - class: its queue's mapping, else the map's `default_class`, else none;
//! - GPUs: allocated processors (requested ones when unknown) converted by the map
//!   (`gpus_per_proc`, or `procs_per_gpu` rounding up); a job of neither is skipped and
//!   counted; nodes: `ceil(gpus / gpus_per_node)`, not exclusive, untyped;
//! - times: `UnixStartTime` + the relative times. `eligible` is the submit time, or, when
//!   the preceding job (field 17) and the think time (field 18) are both given and the
//!   preceding job is in the trace with a known end, the later of the submit time and that
//!   end plus the think time. (The dependency is applied once, with the observed end: a
//!   simulation in which the preceding job ends later does not delay this one.)
//! - work: the run time; when unknown, the time limit (as for a job that never started);
//! - time limit: the requested time, else the run time; at least the run time (a job that
//!   overran its limit, which `AllowOveruse` logs hold, keeps its observed run; counted) and
//!   at least 1 s. A job with neither is skipped and counted;
//! - observed run: `[submit + wait, submit + wait + run)` when both are known. A wait of -1
//!   is unknown, never a wait: the job's run (when its run time is known) is placed at its
//!   submission so that its GPU-hours count, and the job is marked
//!   ([`Observed::wait_unknown`](super::Observed::wait_unknown), counted in
//!   [`SwfSummary::wait_unknown`]) so that its wait is in neither the history's figures nor
//!   the calibration's;
//! - cancelled: status 5 with a run time of 0 or unknown is a job cancelled before it
//!   started: `cancelled_pending_at = submit + wait` (no observed run); when its wait is
//!   unknown, nothing is known of it beyond its submission and it is skipped and counted.
//!   Status 5 with a run time is a job cancelled while it ran: it needs that run time;
//! - partial executions (status 2, 3, 4): the job's summary line (status 0, 1 or 5 with the
//!   same number) holds its totals and is the job; the partial records are counted and not
//!   otherwise read.
//!
//! # The cluster
//!
//! `capacity` GPUs when given (`--capacity`), else `MaxProcs` (or `MaxNodes`) converted as a
//! job's processors are; neither is [`SwfError::NoCapacity`]. Nodes of `gpus_per_node` GPUs
//! named `swf-0001`, ... (the last one takes the remainder), untyped, never drained. Jobs
//! larger than the cluster are kept (a candidate rejects them) and counted.
//!
//! The trace runs from `UnixStartTime` (else the first submission) to the latest instant a
//! job is known at: its observed end, its cancellation, or `eligible + work` for a job that
//! has no observed run (a model's).
//!
//! # The team map
//!
//! See [`parse_team_map`].

mod mapper;
mod reader;

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::path::Path;

use crate::parsable::MalformedLine;

use super::{Secs, Trace};
pub use reader::{MAX_CLUSTER_GPUS, MAX_PROCS, MAX_SECS};

/// How many malformed job lines [`SwfSummary::malformed`] lists.
pub const MALFORMED_LISTED: usize = 5;

/// What an SWF file's jobs are run as: the teams of its users and groups, the classes of its
/// queues, and what a processor is. See [`parse_team_map`] for its file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TeamMap {
    pub users: BTreeMap<u64, String>,
    pub groups: BTreeMap<u64, String>,
    /// Queue → priority class.
    pub queues: BTreeMap<u64, String>,
    /// The team of a job whose user and group map to nothing.
    pub default_team: Option<String>,
    /// The class of a job whose queue maps to nothing.
    pub default_class: Option<String>,
    pub procs: ProcUnit,
    /// GPUs per node of the simulated cluster (and of a job's nodes).
    pub gpus_per_node: u32,
}

/// What an SWF processor is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProcUnit {
    /// Each processor is this many GPUs (the default: 1, a processor is a GPU).
    GpusPerProc(u32),
    /// This many processors make a GPU (a CPU-core trace): `ceil(procs / n)` GPUs.
    ProcsPerGpu(u32),
}

impl ProcUnit {
    /// The GPUs of `procs` processors (`None` on overflow).
    pub fn gpus(self, procs: u64) -> Option<u32> {
        let g = match self {
            ProcUnit::GpusPerProc(n) => procs.checked_mul(u64::from(n))?,
            ProcUnit::ProcsPerGpu(n) => procs.div_ceil(u64::from(n)),
        };
        u32::try_from(g).ok()
    }
}

impl Default for TeamMap {
    fn default() -> Self {
        TeamMap {
            users: BTreeMap::new(),
            groups: BTreeMap::new(),
            queues: BTreeMap::new(),
            default_team: None,
            default_class: None,
            procs: ProcUnit::GpusPerProc(1),
            gpus_per_node: 8,
        }
    }
}

impl TeamMap {
    /// The team of a job of `user` and `group` (SWF ids, `None` unknown): the user's, else
    /// the group's, else the default.
    pub fn team(&self, user: Option<u64>, group: Option<u64>) -> Option<&str> {
        user.and_then(|u| self.users.get(&u))
            .or_else(|| group.and_then(|g| self.groups.get(&g)))
            .or(self.default_team.as_ref())
            .map(String::as_str)
    }

    pub fn class(&self, queue: Option<u64>) -> Option<&str> {
        queue
            .and_then(|q| self.queues.get(&q))
            .or(self.default_class.as_ref())
            .map(String::as_str)
    }
}

/// A line of a team map that cannot be read: `{file}:{line}: {reason}` and a hint.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{file}:{line}: {reason} (hint: {hint})")]
pub struct TeamMapError {
    pub file: String,
    pub line: usize,
    pub reason: String,
    pub hint: String,
}

const MAP_FORMAT: &str = "lines are `user N = TEAM`, `group N = TEAM`, `queue N = class:CLASS`, \
     `default = TEAM`, `default_class = CLASS`, `gpus_per_proc = N`, `procs_per_gpu = N` or \
     `gpus_per_node = N`; `#` starts a comment";

/// Read a team map (`--team-map FILE`; `file` names it in errors). The format, one entry a
/// line, `#` starting a comment, blank lines ignored:
///
/// ```text
/// # SWF user and group ids (fields 12 and 13) to teams: a user's mapping wins over its group's
/// group 12 = training
/// user 7 = agents
/// # the team of the jobs whose user and group map to nothing (without it they are skipped)
/// default = research
/// # SWF queues (field 15) to priority classes, and the class of the other queues
/// queue 3 = class:inference
/// default_class = standard
/// # what an SWF processor is: GPUs per processor (default 1), or, for a CPU-core trace,
/// # processors per GPU (rounded up); one of the two
/// gpus_per_proc = 1
/// # GPUs per node of the simulated cluster and of a job's nodes (default 8)
/// gpus_per_node = 8
/// ```
///
/// Ids are SWF's (natural numbers; unknown ids, `-1`, take the default). Names are those of
/// teamshare.toml (no spaces, no `#`). Mapping an id twice, or a setting twice, is an error.
pub fn parse_team_map(text: &str, file: &str) -> Result<TeamMap, TeamMapError> {
    let mut map = TeamMap::default();
    // Where each entry was set, for "given twice" errors.
    let mut seen: HashMap<String, usize> = HashMap::new();
    let mut procs_set: Option<(&'static str, usize)> = None;
    for (i, raw) in text.lines().enumerate() {
        let line_no = i + 1;
        let err = |reason: String, hint: &str| TeamMapError {
            file: file.to_string(),
            line: line_no,
            reason,
            hint: hint.to_string(),
        };
        let line = raw.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let Some((lhs, rhs)) = line.split_once('=') else {
            return Err(err(format!("no `=` in `{line}`"), MAP_FORMAT));
        };
        let lhs: Vec<&str> = lhs.split_whitespace().collect();
        let value = rhs.trim();
        if value.is_empty() {
            return Err(err(format!("nothing after `=` in `{line}`"), MAP_FORMAT));
        }
        if value.split_whitespace().count() > 1 {
            return Err(err(
                format!("`{value}`: a name or number has no spaces"),
                "one name a line, e.g. `group 12 = training`",
            ));
        }
        let key = lhs.join(" ");
        if let Some(first) = seen.get(&key) {
            return Err(err(
                format!("`{key}` is given twice (first on line {first})"),
                "keep one of the two",
            ));
        }
        seen.insert(key.clone(), line_no);
        let number = |what: &str| -> Result<u32, TeamMapError> {
            match value.parse::<u32>() {
                Ok(n) if n > 0 => Ok(n),
                _ => Err(err(
                    format!("{what} `{value}` is not a whole number above 0"),
                    &format!("e.g. `{what} = 8`"),
                )),
            }
        };
        match lhs.as_slice() {
            ["default"] => {
                check_name(value).map_err(|r| err(r, "e.g. `default = research`"))?;
                map.default_team = Some(value.to_string());
            }
            ["default_class"] => {
                let class = strip_class(value);
                check_name(class).map_err(|r| err(r, "e.g. `default_class = standard`"))?;
                map.default_class = Some(class.to_string());
            }
            [k @ ("gpus_per_proc" | "procs_per_gpu")] => {
                set_procs(&mut map, k, &mut procs_set, line_no, &number, &err)?;
            }
            ["gpus_per_node"] => map.gpus_per_node = number("gpus_per_node")?,
            [kind @ ("user" | "group" | "queue"), id] => {
                map_id(&mut map, kind, id, value, &err)?;
            }
            [kind @ ("user" | "group" | "queue")] => {
                return Err(err(
                    format!("`{kind}` without an id"),
                    &format!("e.g. `{kind} 12 = ...`"),
                ));
            }
            _ => return Err(err(format!("unknown entry `{key}`"), MAP_FORMAT)),
        }
    }
    Ok(map)
}

/// A team map's `gpus_per_proc` or `procs_per_gpu` (`k`) on line `line_no`: what a processor
/// is, given once.
fn set_procs(
    map: &mut TeamMap,
    k: &str,
    procs_set: &mut Option<(&'static str, usize)>,
    line_no: usize,
    number: &dyn Fn(&str) -> Result<u32, TeamMapError>,
    err: &dyn Fn(String, &str) -> TeamMapError,
) -> Result<(), TeamMapError> {
    let k: &'static str = if k == "gpus_per_proc" {
        "gpus_per_proc"
    } else {
        "procs_per_gpu"
    };
    if let Some((other, at)) = *procs_set {
        return Err(err(
            format!("`{k}` and `{other}` (line {at}) both say what a processor is"),
            "keep one: gpus_per_proc for GPU traces, procs_per_gpu for CPU-core ones",
        ));
    }
    let n = number(k)?;
    map.procs = if k == "gpus_per_proc" {
        ProcUnit::GpusPerProc(n)
    } else {
        ProcUnit::ProcsPerGpu(n)
    };
    *procs_set = Some((k, line_no));
    Ok(())
}

/// A team map's `user N = TEAM`, `group N = TEAM` or `queue N = class:CLASS` (`kind`, `id`,
/// `value`).
fn map_id(
    map: &mut TeamMap,
    kind: &str,
    id: &str,
    value: &str,
    err: &dyn Fn(String, &str) -> TeamMapError,
) -> Result<(), TeamMapError> {
    let Ok(id) = id.parse::<u64>() else {
        return Err(err(
            format!("{kind} id `{id}` is not a whole number"),
            &format!(
                "SWF ids are natural numbers, e.g. `{kind} 12 = ...`; \
                 jobs of unknown id (-1) take the default"
            ),
        ));
    };
    if kind == "queue" {
        let Some(class) = value.strip_prefix("class:") else {
            return Err(err(
                format!("queue {id} maps to `{value}`, not to a class"),
                &format!("a queue maps to a priority class: `queue {id} = class:{value}`"),
            ));
        };
        check_name(class).map_err(|r| err(r, "e.g. `queue 3 = class:inference`"))?;
        map.queues.insert(id, class.to_string());
    } else {
        if value.starts_with("class:") {
            return Err(err(
                format!("{kind} {id} maps to a class"),
                "users and groups map to teams; queues map to classes",
            ));
        }
        check_name(value).map_err(|r| err(r, "e.g. `group 12 = training`"))?;
        let m = if kind == "user" {
            &mut map.users
        } else {
            &mut map.groups
        };
        m.insert(id, value.to_string());
    }
    Ok(())
}

fn strip_class(v: &str) -> &str {
    v.strip_prefix("class:").unwrap_or(v)
}

fn check_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("an empty name".to_string());
    }
    if let Some(c) = name
        .chars()
        .find(|c| !(c.is_alphanumeric() || matches!(c, '_' | '-' | '.')))
    {
        return Err(format!("`{name}`: `{c}` cannot be in a team or class name"));
    }
    Ok(())
}

/// Read a team map file.
pub fn read_team_map(path: &Path) -> Result<TeamMap, TeamMapError> {
    let file = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|e| TeamMapError {
        file: file.clone(),
        line: 0,
        reason: format!("cannot read it: {e}"),
        hint: "give the team map's path with --team-map".to_string(),
    })?;
    parse_team_map(&text, &file)
}

/// An SWF file that cannot be read as a trace.
#[derive(Debug, thiserror::Error)]
pub enum SwfError {
    /// A header comment the trace depends on is wrong.
    #[error("SWF line {line}: {reason} (hint: {hint})")]
    Header {
        line: usize,
        reason: String,
        hint: String,
    },
    #[error(
        "the SWF header gives neither MaxProcs nor MaxNodes, so the cluster's size is unknown \
         (hint: give it in GPUs with --capacity)"
    )]
    NoCapacity,
    #[error("no job line could be read ({malformed} malformed{}): is it an SWF file?",
        .first.as_ref().map(|m| format!("; the first: {m}")).unwrap_or_default())]
    NoJobs {
        malformed: usize,
        first: Option<MalformedLine>,
    },
    #[error(
        "none of the {jobs} jobs maps to a team (hint: map their users or groups in the team \
         map, or give it a `default = TEAM`)"
    )]
    NothingMapped { jobs: usize },
    #[error("{path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
}

/// The header comments read.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SwfHeader {
    pub version: Option<String>,
    pub unix_start_time: Option<Secs>,
    pub max_procs: Option<u64>,
    pub max_nodes: Option<u64>,
    /// `Computer`, `Installation` and the other free-text keys, as given (a repeated key's
    /// values joined by `; `).
    pub text: BTreeMap<String, String>,
}

/// Where the cluster's size came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CapacitySource {
    /// The caller's (`--capacity`).
    Given,
    MaxProcs,
    MaxNodes,
}

impl fmt::Display for CapacitySource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            CapacitySource::Given => "--capacity",
            CapacitySource::MaxProcs => "the header's MaxProcs",
            CapacitySource::MaxNodes => "the header's MaxNodes",
        })
    }
}

/// What reading an SWF file found besides the trace, for the report: every job line is in
/// exactly one of `jobs` and the skipped counts.
#[derive(Debug, Clone, PartialEq)]
pub struct SwfSummary {
    pub header: SwfHeader,
    /// Job lines (records) in the file, partial executions included.
    pub records: usize,
    /// Jobs in the trace.
    pub jobs: usize,
    /// Jobs of each team.
    pub teams: BTreeMap<String, usize>,
    /// Malformed job lines skipped, and the first [`MALFORMED_LISTED`] of them.
    pub malformed: usize,
    pub malformed_first: Vec<MalformedLine>,
    /// Jobs skipped because their user and group map to no team (and there is no default),
    /// and how many of them each user id had (`None`: unknown user).
    pub unmapped: usize,
    pub unmapped_users: BTreeMap<Option<u64>, usize>,
    /// Jobs skipped without a processor count (allocated and requested unknown or 0).
    pub no_size: usize,
    /// Jobs skipped without a run time or a requested time.
    pub no_duration: usize,
    /// Jobs skipped: cancelled before they started, at an unknown time (their wait unknown).
    pub cancelled_unknown: usize,
    /// Partial-execution records (status 2, 3, 4) not read (their job's summary line is).
    pub partial_records: usize,
    /// Jobs cancelled while they waited (`cancelled_pending_at` set).
    pub cancelled_pending: usize,
    /// Jobs kept whose wait is unknown (-1;
    /// [`Observed::wait_unknown`](super::Observed::wait_unknown)), and of them those whose run
    /// time is unknown too (no observed run: their GPU-hours are not in "as today").
    pub wait_unknown: usize,
    pub run_unknown: usize,
    /// Jobs that ran longer than they asked for (their time limit is their run time).
    pub overran_limit: usize,
    /// Jobs whose time limit is their run time (requested time unknown).
    pub limit_from_run: usize,
    /// Jobs made eligible after their preceding job's end plus their think time, and jobs
    /// that named a preceding job not in the trace (or without a known end).
    pub dependencies: usize,
    pub dependencies_unresolved: usize,
    /// Jobs of more GPUs than the cluster has.
    pub larger_than_cluster: usize,
    /// The cluster's GPUs, and where the number came from.
    pub capacity: u32,
    pub capacity_source: CapacitySource,
}

impl SwfSummary {
    /// What reading found, for the report's notes: the jobs read and every job line skipped,
    /// counted under its reason, then the first malformed lines with their line numbers.
    pub fn notes(&self, source: &str) -> Vec<String> {
        let reasons = [
            (self.malformed, "malformed"),
            (self.unmapped, "of no team in the team map"),
            (self.no_size, "without a processor count"),
            (self.no_duration, "without a run time or a requested time"),
            (self.cancelled_unknown, "cancelled at an unknown time"),
            (
                self.partial_records,
                "partial-execution records (their job's summary line is read)",
            ),
        ];
        let skipped: Vec<String> = reasons
            .iter()
            .filter(|(n, _)| *n > 0)
            .map(|(n, why)| format!("{n} {why}"))
            .collect();
        let mut out = vec![format!(
            "{source}: {} jobs of {} job lines{}",
            self.jobs,
            self.records,
            if skipped.is_empty() {
                String::new()
            } else {
                format!("; skipped: {}", skipped.join(", "))
            }
        )];
        out.extend(self.malformed_first.iter().map(ToString::to_string));
        out
    }
}

/// Read an SWF file's text as a trace of `map`'s teams on a cluster of `capacity` GPUs (else
/// the header's). The trace's `source` is `SWF file`; [`load_file`] names the file.
pub fn load(
    text: &str,
    map: &TeamMap,
    capacity: Option<u32>,
) -> Result<(Trace, SwfSummary), SwfError> {
    let read = reader::read(text)?;
    mapper::to_trace(text, read, map, capacity)
}

/// [`load`] of a file; the trace's source names it.
pub fn load_file(
    path: &Path,
    map: &TeamMap,
    capacity: Option<u32>,
) -> Result<(Trace, SwfSummary), SwfError> {
    let text = std::fs::read_to_string(path).map_err(|source| SwfError::Io {
        path: path.display().to_string(),
        source,
    })?;
    let (mut trace, summary) = load(&text, map, capacity)?;
    trace.source = format!("SWF file {}", path.display());
    Ok((trace, summary))
}

#[cfg(test)]
mod tests;
