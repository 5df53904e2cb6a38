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
//! # From an SWF job to a [`TraceJob`]
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
//!   ([`Observed::wait_unknown`], counted in [`SwfSummary::wait_unknown`]) so that its wait is
//!   in neither the history's figures nor the calibration's;
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

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::path::Path;

use crate::parsable::MalformedLine;

use super::{Cluster, NodeSpec, Observed, Secs, Trace, TraceJob};

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
                let k: &'static str = if *k == "gpus_per_proc" {
                    "gpus_per_proc"
                } else {
                    "procs_per_gpu"
                };
                if let Some((other, at)) = procs_set {
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
                procs_set = Some((k, line_no));
            }
            ["gpus_per_node"] => map.gpus_per_node = number("gpus_per_node")?,
            [kind @ ("user" | "group" | "queue"), id] => {
                let Ok(id) = id.parse::<u64>() else {
                    return Err(err(
                        format!("{kind} id `{id}` is not a whole number"),
                        &format!(
                            "SWF ids are natural numbers, e.g. `{kind} 12 = ...`; \
                             jobs of unknown id (-1) take the default"
                        ),
                    ));
                };
                if *kind == "queue" {
                    let Some(class) = value.strip_prefix("class:") else {
                        return Err(err(
                            format!("queue {id} maps to `{value}`, not to a class"),
                            &format!(
                                "a queue maps to a priority class: `queue {id} = class:{value}`"
                            ),
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
                    let m = if *kind == "user" {
                        &mut map.users
                    } else {
                        &mut map.groups
                    };
                    m.insert(id, value.to_string());
                }
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
    /// Jobs kept whose wait is unknown (-1; [`Observed::wait_unknown`]), and of them those
    /// whose run time is unknown too (no observed run: their GPU-hours are not in "as today").
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

/// The fields of a job line, `None` for -1.
#[derive(Debug, Clone, Copy)]
struct Record {
    line: usize,
    number: u64,
    submit: Secs,
    wait: Option<Secs>,
    run: Option<Secs>,
    alloc: Option<u64>,
    req_procs: Option<u64>,
    req_time: Option<Secs>,
    status: Option<u64>,
    user: Option<u64>,
    group: Option<u64>,
    queue: Option<u64>,
    preceding: Option<u64>,
    think: Option<Secs>,
}

/// One field: a number (decimals rounded), -1 → `None`, below -1 → an error.
fn field(text: &str, name: &str) -> Result<Option<i64>, String> {
    let v = match text.parse::<i64>() {
        Ok(v) => v,
        Err(_) => match text.parse::<f64>() {
            Ok(f) if f.is_finite() && f.abs() < 9.0e15 => f.round() as i64,
            _ => return Err(format!("{name} `{text}` is not a number")),
        },
    };
    match v {
        -1 => Ok(None),
        v if v < -1 => Err(format!("{name} `{text}` is negative (-1 is unknown)")),
        v => Ok(Some(v)),
    }
}

const FIELD_NAMES: [&str; 18] = [
    "job number",
    "submit time",
    "wait time",
    "run time",
    "allocated processors",
    "average CPU time",
    "used memory",
    "requested processors",
    "requested time",
    "requested memory",
    "status",
    "user id",
    "group id",
    "executable",
    "queue",
    "partition",
    "preceding job",
    "think time",
];

fn record(line_no: usize, line: &str) -> Result<Record, String> {
    let parts: Vec<&str> = line.split_whitespace().collect();
    if parts.len() != 18 {
        return Err(format!(
            "expected 18 whitespace-separated fields, found {}",
            parts.len()
        ));
    }
    let mut v = [None; 18];
    for (i, p) in parts.iter().enumerate() {
        v[i] = field(p, FIELD_NAMES[i])?;
    }
    check_bounds(&v)?;
    // Non-negative by `field`.
    let id = |x: Option<i64>| x.map(|n| n.unsigned_abs());
    let number = id(v[0]).filter(|n| *n > 0).ok_or("job number unknown")?;
    let submit = v[1].ok_or("submit time unknown")?;
    Ok(Record {
        line: line_no,
        number,
        submit,
        wait: v[2],
        run: v[3],
        alloc: id(v[4]).filter(|n| *n > 0),
        req_procs: id(v[7]).filter(|n| *n > 0),
        req_time: v[8],
        status: id(v[10]),
        user: id(v[11]),
        group: id(v[12]),
        queue: id(v[14]),
        preceding: id(v[16]),
        think: v[17],
    })
}

/// The longest time a job line may give (submit, wait, run, requested and think times):
/// 50 years, longer than any machine of the archive has run. A larger value is a corrupt line,
/// and one such submit time would stretch the trace over millions of days.
pub const MAX_SECS: i64 = 50 * 366 * 86_400;
/// The most processors a job line may give: 100 million, ten times the largest machine
/// ever built.
pub const MAX_PROCS: i64 = 100_000_000;

/// The latest `UnixStartTime` read: 2200-01-01 UTC.
const LAST_START: i64 = 7_258_118_400;

/// Values no real cluster has are refused, with the field's name and the bound.
fn check_bounds(v: &[Option<i64>; 18]) -> Result<(), String> {
    const TIMES: [usize; 5] = [1, 2, 3, 8, 17];
    const PROCS: [usize; 2] = [4, 7];
    for i in TIMES {
        if let Some(x) = v[i].filter(|x| *x > MAX_SECS) {
            return Err(format!(
                "{} {x} s is more than 50 years: not a real job's",
                FIELD_NAMES[i]
            ));
        }
    }
    for i in PROCS {
        if let Some(x) = v[i].filter(|x| *x > MAX_PROCS) {
            return Err(format!(
                "{} {x} is more than {MAX_PROCS}: no cluster has that many",
                FIELD_NAMES[i]
            ));
        }
    }
    Ok(())
}

/// The header keys read as numbers.
const NUMERIC_KEYS: [&str; 9] = [
    "UnixStartTime",
    "MaxNodes",
    "MaxProcs",
    "MaxJobs",
    "MaxRecords",
    "MaxRuntime",
    "MaxMemory",
    "MaxQueues",
    "MaxPartitions",
];

/// Read an SWF file's text as a trace of `map`'s teams on a cluster of `capacity` GPUs (else
/// the header's). The trace's `source` is `SWF file`; [`load_file`] names the file.
pub fn load(
    text: &str,
    map: &TeamMap,
    capacity: Option<u32>,
) -> Result<(Trace, SwfSummary), SwfError> {
    let mut header = SwfHeader::default();
    let mut numeric: BTreeMap<&'static str, (i64, usize)> = BTreeMap::new();
    let mut records: Vec<Record> = Vec::new();
    let mut malformed = 0;
    let mut malformed_first = Vec::new();
    let mut lines = 0;
    for (i, raw) in text.lines().enumerate() {
        let line_no = i + 1;
        let line = raw.trim();
        if line.is_empty() {
            continue;
        }
        if let Some(comment) = line.strip_prefix(';') {
            read_header(comment.trim(), line_no, &mut header, &mut numeric)?;
            continue;
        }
        lines += 1;
        match record(line_no, line) {
            Ok(r) => records.push(r),
            Err(reason) => {
                malformed += 1;
                if malformed_first.len() < MALFORMED_LISTED {
                    malformed_first.push(MalformedLine::new("SWF", line_no, reason, line));
                }
            }
        }
    }
    if records.is_empty() {
        return Err(SwfError::NoJobs {
            malformed,
            first: malformed_first.into_iter().next(),
        });
    }
    let get = |k: &str| numeric.get(k).map(|(v, _)| *v);
    header.unix_start_time = get("UnixStartTime");
    if let Some(t) = header.unix_start_time.filter(|t| *t > LAST_START) {
        return Err(SwfError::Header {
            line: numeric.get("UnixStartTime").map_or(0, |(_, l)| *l),
            reason: format!("UnixStartTime {t} is after the year 2200"),
            hint: "it is the epoch second of the log's time 0; fix or remove it".to_string(),
        });
    }
    header.max_procs = get("MaxProcs").and_then(|v| u64::try_from(v).ok());
    header.max_nodes = get("MaxNodes").and_then(|v| u64::try_from(v).ok());
    let base = header.unix_start_time.unwrap_or(0);

    let (capacity, capacity_source) = match (capacity, header.max_procs, header.max_nodes) {
        (Some(c), _, _) => (c, CapacitySource::Given),
        (None, Some(p), _) => (
            header_gpus(map, p, "MaxProcs", &numeric)?,
            CapacitySource::MaxProcs,
        ),
        (None, None, Some(n)) => (
            header_gpus(map, n, "MaxNodes", &numeric)?,
            CapacitySource::MaxNodes,
        ),
        (None, None, None) => return Err(SwfError::NoCapacity),
    };

    let mut summary = SwfSummary {
        header,
        records: lines,
        jobs: 0,
        teams: BTreeMap::new(),
        malformed,
        malformed_first,
        unmapped: 0,
        unmapped_users: BTreeMap::new(),
        no_size: 0,
        no_duration: 0,
        cancelled_unknown: 0,
        partial_records: 0,
        cancelled_pending: 0,
        wait_unknown: 0,
        run_unknown: 0,
        overran_limit: 0,
        limit_from_run: 0,
        dependencies: 0,
        dependencies_unresolved: 0,
        larger_than_cluster: 0,
        capacity,
        capacity_source,
    };

    // Partial executions out; a repeated job number is a malformed line.
    let mut seen: HashMap<u64, usize> = HashMap::new();
    let mut jobs_in: Vec<Record> = Vec::with_capacity(records.len());
    for r in records {
        if matches!(r.status, Some(2..=4)) {
            summary.partial_records += 1;
            continue;
        }
        if let Some(first) = seen.get(&r.number) {
            summary.malformed += 1;
            if summary.malformed_first.len() < MALFORMED_LISTED {
                let reason = format!("job number {} is also on line {first}", r.number);
                let text = text.lines().nth(r.line - 1).unwrap_or("").trim();
                summary
                    .malformed_first
                    .push(MalformedLine::new("SWF", r.line, reason, text));
            }
            continue;
        }
        seen.insert(r.number, r.line);
        jobs_in.push(r);
    }

    // Observed ends by job number, for dependencies.
    let ends: HashMap<u64, Secs> = jobs_in
        .iter()
        .filter_map(|r| Some((r.number, base + r.submit + r.wait? + r.run?)))
        .collect();

    let mut mapped_any = false;
    let considered = jobs_in.len();
    let mut jobs = Vec::with_capacity(jobs_in.len());
    for r in &jobs_in {
        let Some(team) = map.team(r.user, r.group) else {
            summary.unmapped += 1;
            *summary.unmapped_users.entry(r.user).or_default() += 1;
            continue;
        };
        mapped_any = true;
        let Some(gpus) = r
            .alloc
            .or(r.req_procs)
            .and_then(|p| map.procs.gpus(p))
            .filter(|g| *g > 0)
        else {
            summary.no_size += 1;
            continue;
        };
        let cancelled_before_start = r.status == Some(5) && matches!(r.run, None | Some(0));
        if cancelled_before_start && r.wait.is_none() {
            summary.cancelled_unknown += 1;
            continue;
        }
        let req_time = r.req_time.filter(|t| *t > 0);
        let run = if cancelled_before_start { None } else { r.run };
        let Some(mut time_limit) = req_time.or(run) else {
            summary.no_duration += 1;
            continue;
        };
        if req_time.is_none() {
            summary.limit_from_run += 1;
        }
        if let Some(run) = run {
            if run > time_limit {
                summary.overran_limit += 1;
                time_limit = run;
            }
        }
        let time_limit = time_limit.max(1);
        let submit = base + r.submit;
        let mut eligible = submit;
        if let (Some(p), Some(think)) = (r.preceding.filter(|p| *p > 0), r.think) {
            match ends.get(&p) {
                Some(end) => {
                    summary.dependencies += 1;
                    eligible = eligible.max(end + think);
                }
                None => summary.dependencies_unresolved += 1,
            }
        }
        let mut observed = Observed::default();
        let mut cancelled_pending_at = None;
        if cancelled_before_start {
            cancelled_pending_at = r.wait.map(|w| submit + w);
            summary.cancelled_pending += 1;
        } else if let Some(run) = run {
            // A wait of -1 is unknown, not "never started": the run is placed at the
            // submission so that its GPU-hours count, and its wait is in no figure.
            let start = submit + r.wait.unwrap_or(0);
            observed.runs.push((start, Some(start + run)));
        }
        if !cancelled_before_start && r.wait.is_none() {
            observed.wait_unknown = true;
            summary.wait_unknown += 1;
            summary.run_unknown += usize::from(run.is_none());
        }
        if gpus > capacity {
            summary.larger_than_cluster += 1;
        }
        *summary.teams.entry(team.to_string()).or_default() += 1;
        jobs.push(TraceJob {
            id: r.number,
            team: team.to_string(),
            class: map.class(r.queue).map(str::to_string),
            submit,
            eligible,
            gpus,
            gpu_type: None,
            nodes: gpus.div_ceil(map.gpus_per_node).max(1),
            exclusive: false,
            time_limit,
            work: run.unwrap_or(time_limit),
            cancelled_pending_at,
            observed,
        });
    }
    if !mapped_any {
        return Err(SwfError::NothingMapped { jobs: considered });
    }
    jobs.sort_by_key(|j| (j.submit, j.id));
    summary.jobs = jobs.len();

    let since = summary
        .header
        .unix_start_time
        .or_else(|| jobs.first().map(|j| j.submit))
        .unwrap_or(base);
    let until = jobs
        .iter()
        .map(|j| {
            let ran = j.observed.runs.iter().filter_map(|(_, e)| *e).max();
            ran.or(j.cancelled_pending_at)
                .unwrap_or(j.eligible + j.work)
        })
        .max()
        .unwrap_or(since)
        .max(since);

    let trace = Trace {
        jobs,
        cluster: cluster(capacity, map.gpus_per_node),
        since,
        until,
        source: "SWF file".to_string(),
    };
    Ok((trace, summary))
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

fn header_gpus(
    map: &TeamMap,
    procs: u64,
    key: &str,
    numeric: &BTreeMap<&'static str, (i64, usize)>,
) -> Result<u32, SwfError> {
    let line = numeric.get(key).map_or(0, |(_, l)| *l);
    match map.procs.gpus(procs) {
        Some(g) if g > 0 => Ok(g),
        _ => Err(SwfError::Header {
            line,
            reason: format!("{key} {procs} is not a cluster size in GPUs"),
            hint: "give the cluster's GPUs with --capacity".to_string(),
        }),
    }
}

fn read_header(
    comment: &str,
    line: usize,
    header: &mut SwfHeader,
    numeric: &mut BTreeMap<&'static str, (i64, usize)>,
) -> Result<(), SwfError> {
    let Some((key, value)) = comment.split_once(':') else {
        return Ok(()); // free text
    };
    let key = key.trim();
    let value = value.trim();
    if key.is_empty() || key.contains(char::is_whitespace) {
        return Ok(()); // a sentence with a colon, not a `Key: value`
    }
    if let Some(&k) = NUMERIC_KEYS.iter().find(|k| k.eq_ignore_ascii_case(key)) {
        let v = value
            .split_whitespace()
            .next()
            .and_then(|w| w.parse::<i64>().ok())
            .filter(|v| *v >= 0);
        let Some(v) = v else {
            return Err(SwfError::Header {
                line,
                reason: format!("{k} `{value}` is not a number"),
                hint: format!("the header's `; {k}: N` must be a whole number; fix or remove it"),
            });
        };
        if let Some((prev, at)) = numeric.get(k) {
            if *prev != v {
                return Err(SwfError::Header {
                    line,
                    reason: format!("{k} {v} differs from line {at}'s {prev}"),
                    hint: "keep one of the two".to_string(),
                });
            }
        }
        numeric.insert(k, (v, line));
        return Ok(());
    }
    if key.eq_ignore_ascii_case("Version") {
        header.version = Some(value.to_string());
        return Ok(());
    }
    header
        .text
        .entry(key.to_string())
        .and_modify(|s| {
            s.push_str("; ");
            s.push_str(value);
        })
        .or_insert_with(|| value.to_string());
    Ok(())
}

/// `capacity` GPUs as nodes of `per_node` (the last one takes the remainder).
fn cluster(capacity: u32, per_node: u32) -> Cluster {
    let per_node = per_node.max(1);
    let count = capacity.div_ceil(per_node);
    let nodes = (0..count)
        .map(|i| NodeSpec {
            name: format!("swf-{:04}", i + 1),
            gpus: if i + 1 == count && !capacity.is_multiple_of(per_node) {
                capacity % per_node
            } else {
                per_node
            },
            gpu_type: None,
        })
        .collect();
    Cluster {
        nodes,
        drains: Vec::new(),
    }
}

#[cfg(test)]
mod tests;
