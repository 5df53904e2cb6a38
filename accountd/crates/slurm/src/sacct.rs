//! Reading Slurm's accounting: the sacct invocation and the parser of its output.
//!
//! Running sacct (`SacctQuery::command`) and reading its output (`parse`) are separate so that
//! the parser can be driven from a string.
//!
//! What one line is: with `-X` sacct prints one line per job allocation (never its steps, so
//! nothing is counted twice) and with `-D` one line per run of a requeued job. A run is identified
//! by (cluster, JobIDRaw, Start): JobIDRaw is unique per job, also per array task (whose JobID
//! reads `123_4`), and a requeued job's runs differ by their start.

use std::collections::BTreeMap;
use std::time::Duration;

use chrono::TimeZone;
use teamshare_config::SHARE_TYPE;
use teamshare_policy::gres::{gpu_count, shard_count, GresError};

use crate::parsable::{self, FieldCount, Shape};
use crate::period::{format_local, parse_local_datetime, UnixSeconds};
use crate::slurm_cli::SlurmCommand;

/// The fields asked of sacct, in order. Parsing depends on this order.
/// The last four were added for `accountd replay` (issue 13): when a job could first start, the
/// limit backfill planned with, its node count, and what a job that never started asked for.
pub const FIELDS: [&str; 17] = [
    "JobIDRaw",
    "JobID",
    "Cluster",
    "Account",
    "User",
    "Partition",
    "QOS",
    "State",
    "Submit",
    "Start",
    "End",
    "Elapsed",
    "AllocTRES",
    "Eligible",
    "TimelimitRaw",
    "NNodes",
    "ReqTRES",
];

/// How long one sacct call may take before it is stopped.
pub const SACCT_TIMEOUT: Duration = Duration::from_secs(600);

/// One run of a job that held (or holds) an allocation, as sacct reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobRun {
    pub cluster: String,
    /// The unique job id (JobIDRaw); for array tasks, the task's own id.
    pub job_id_raw: u32,
    /// The id as users see it (`123`, `123_4` for an array task, `123+0` for a het component).
    pub job_id: String,
    pub account: String,
    pub user: String,
    pub partition: String,
    pub qos: String,
    /// The state verbatim (`COMPLETED`, `CANCELLED by 0`, `PREEMPTED`, states unknown to us...).
    pub state: String,
    pub submit: Option<UnixSeconds>,
    pub start: UnixSeconds,
    /// None while the job runs (sacct prints `Unknown`).
    pub end: Option<UnixSeconds>,
    /// Elapsed seconds as sacct computes them (suspended time excluded).
    pub elapsed: Option<i64>,
    /// GPUs in the allocation, and the typed part of them.
    pub gpus: u64,
    pub gpus_by_type: BTreeMap<String, u64>,
    /// The allocation verbatim (`billing=1,cpu=1,gres/gpu=2,node=1`).
    pub alloc_tres: String,
    /// When it could first start (after its begin time and dependencies); None where sacct
    /// has none (`Unknown`: a job never eligible, such as one held until cancelled).
    pub eligible: Option<UnixSeconds>,
    /// Its time limit in seconds; None without one (`UNLIMITED`, `Partition_Limit`).
    pub time_limit: Option<i64>,
    /// Nodes allocated (requested, for a job that never started).
    pub nnodes: Option<u32>,
}

/// A job that never started (Start `Unknown`): pending when sacct was read, or ended while it
/// waited (cancelled, or a deadline passed). It held no GPUs; `accountd replay` needs it as
/// demand. A requeued job waiting to run again reads the same way (it has runs: the store
/// keeps it out of the jobs that never started).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnstartedJob {
    pub cluster: String,
    pub job_id_raw: u32,
    /// As users see it; a pending job array is one record, `123_[1-100%4]`.
    pub job_id: String,
    pub account: String,
    pub user: String,
    pub partition: String,
    pub qos: String,
    pub state: String,
    pub submit: Option<UnixSeconds>,
    pub eligible: Option<UnixSeconds>,
    /// When it ended without starting (cancelled while pending); None while pending.
    pub end: Option<UnixSeconds>,
    /// GPUs it asked for (ReqTRES), and the typed part of them.
    pub gpus: u64,
    pub gpus_by_type: BTreeMap<String, u64>,
    pub time_limit: Option<i64>,
    pub nnodes: Option<u32>,
    /// The request verbatim.
    pub req_tres: String,
}

/// A line that could not be read; it is reported and skipped (`command` is `sacct`).
pub use crate::parsable::MalformedLine;

/// What [`MalformedLine::command`] says for sacct's lines.
pub const COMMAND: &str = "sacct";

/// Everything read from one sacct output.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SacctBatch {
    /// Non-empty lines read.
    pub lines: usize,
    pub runs: Vec<JobRun>,
    /// Records of jobs that never started (Start `Unknown`): pending or cancelled while pending.
    /// They held no GPUs, and a pending job is seen again with its start once it runs.
    pub not_started: usize,
    /// Those records (`not_started` of them).
    pub unstarted: Vec<UnstartedJob>,
    pub malformed: Vec<MalformedLine>,
}

/// Why a line could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LineError {
    #[error(transparent)]
    FieldCount(#[from] FieldCount),
    #[error("JobIDRaw `{0}` is not a job id")]
    JobId(String),
    #[error("{field} `{text}` is not a time (expected YYYY-MM-DDTHH:MM:SS or Unknown)")]
    Time { field: &'static str, text: String },
    #[error("Elapsed `{0}` is not a duration (expected [D-]HH:MM:SS)")]
    Elapsed(String),
    #[error("End is before Start")]
    EndBeforeStart,
    #[error("AllocTRES: {0}")]
    AllocTres(GresError),
    #[error("ReqTRES: {0}")]
    ReqTres(GresError),
    #[error(
        "TimelimitRaw `{0}` is not a time limit (expected minutes, UNLIMITED or Partition_Limit)"
    )]
    Timelimit(String),
    #[error("NNodes `{0}` is not a node count")]
    NNodes(String),
    #[error("the line is not UTF-8")]
    NotUtf8,
}

/// A run as read from one line, borrowing the line's text (the parser's checks cost no copies).
/// The fields are [`JobRun`]'s.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunRecord<'a> {
    pub cluster: &'a str,
    pub job_id_raw: u32,
    pub job_id: &'a str,
    pub account: &'a str,
    pub user: &'a str,
    pub partition: &'a str,
    pub qos: &'a str,
    pub state: &'a str,
    pub submit: Option<UnixSeconds>,
    pub start: UnixSeconds,
    pub end: Option<UnixSeconds>,
    pub elapsed: Option<i64>,
    pub gpus: u64,
    pub gpus_by_type: BTreeMap<String, u64>,
    pub alloc_tres: &'a str,
    pub eligible: Option<UnixSeconds>,
    pub time_limit: Option<i64>,
    pub nnodes: Option<u32>,
}

/// A job that never started as read from one line, borrowing its text; the fields are
/// [`UnstartedJob`]'s.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnstartedRecord<'a> {
    pub cluster: &'a str,
    pub job_id_raw: u32,
    pub job_id: &'a str,
    pub account: &'a str,
    pub user: &'a str,
    pub partition: &'a str,
    pub qos: &'a str,
    pub state: &'a str,
    pub submit: Option<UnixSeconds>,
    pub eligible: Option<UnixSeconds>,
    pub end: Option<UnixSeconds>,
    pub gpus: u64,
    pub gpus_by_type: BTreeMap<String, u64>,
    pub time_limit: Option<i64>,
    pub nnodes: Option<u32>,
    pub req_tres: &'a str,
}

impl UnstartedRecord<'_> {
    pub fn into_unstarted_job(self) -> UnstartedJob {
        UnstartedJob {
            cluster: self.cluster.to_string(),
            job_id_raw: self.job_id_raw,
            job_id: self.job_id.to_string(),
            account: self.account.to_string(),
            user: self.user.to_string(),
            partition: self.partition.to_string(),
            qos: self.qos.to_string(),
            state: self.state.to_string(),
            submit: self.submit,
            eligible: self.eligible,
            end: self.end,
            gpus: self.gpus,
            gpus_by_type: self.gpus_by_type,
            time_limit: self.time_limit,
            nnodes: self.nnodes,
            req_tres: self.req_tres.to_string(),
        }
    }
}

/// One line of sacct's output: a run, or a job that never started.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Record<'a> {
    Run(RunRecord<'a>),
    Unstarted(UnstartedRecord<'a>),
}

impl RunRecord<'_> {
    pub fn into_job_run(self) -> JobRun {
        JobRun {
            cluster: self.cluster.to_string(),
            job_id_raw: self.job_id_raw,
            job_id: self.job_id.to_string(),
            account: self.account.to_string(),
            user: self.user.to_string(),
            partition: self.partition.to_string(),
            qos: self.qos.to_string(),
            state: self.state.to_string(),
            submit: self.submit,
            start: self.start,
            end: self.end,
            elapsed: self.elapsed,
            gpus: self.gpus,
            gpus_by_type: self.gpus_by_type,
            alloc_tres: self.alloc_tres.to_string(),
            eligible: self.eligible,
            time_limit: self.time_limit,
            nnodes: self.nnodes,
        }
    }
}

/// Read sacct's parsable output (`-P -n`, fields in `FIELDS` order), times in zone `tz`.
///
/// A line that cannot be read is recorded in `malformed` and the rest are still read.
pub fn parse<Tz: TimeZone>(text: &str, tz: &Tz) -> SacctBatch {
    let mut batch = SacctBatch::default();
    for (number, line) in parsable::lines(text) {
        batch.lines += 1;
        match read_line(line, tz) {
            Ok(Record::Run(run)) => batch.runs.push(run.into_job_run()),
            Ok(Record::Unstarted(job)) => {
                batch.not_started += 1;
                batch.unstarted.push(job.into_unstarted_job());
            }
            Err(e) => {
                batch
                    .malformed
                    .push(MalformedLine::new(COMMAND, number, e.to_string(), line))
            }
        }
    }
    batch
}

/// Read one non-empty line of sacct's parsable output: a run, or a job that never started
/// (Start `Unknown`: pending, or cancelled while pending).
pub fn read_line<'a, Tz: TimeZone>(line: &'a str, tz: &Tz) -> Result<Record<'a>, LineError> {
    let [job_id_raw, job_id, cluster, account, user, partition, qos, state, submit, start, end, elapsed, alloc_tres, eligible, time_limit, nnodes, req_tres] =
        parsable::fields::<{ FIELDS.len() }>(line, Shape::Exactly)?;
    let job_id_raw: u32 = job_id_raw
        .trim()
        .parse()
        .map_err(|_| LineError::JobId(job_id_raw.to_string()))?;
    let submit = optional_time("Submit", submit, tz)?;
    let start = optional_time("Start", start, tz)?;
    let end = optional_time("End", end, tz)?;
    let elapsed = parse_elapsed(elapsed).ok_or_else(|| LineError::Elapsed(elapsed.to_string()))?;
    let mut gpus = gpu_count(alloc_tres).map_err(LineError::AllocTres)?;
    if gpus.is_zero() {
        // Shards (issue 30) hold no gres/gpu: kept as their own type beside a total of 0 GPUs,
        // which only a configuration governing them counts (`count_shards` in the reports).
        let shards = shard_count(alloc_tres).map_err(LineError::AllocTres)?;
        if shards > 0 {
            gpus.by_type.insert(SHARE_TYPE.to_string(), shards);
        }
    }
    let eligible = optional_time("Eligible", eligible, tz)?;
    let time_limit =
        parse_time_limit(time_limit).ok_or_else(|| LineError::Timelimit(time_limit.to_string()))?;
    let nnodes = parse_nnodes(nnodes).ok_or_else(|| LineError::NNodes(nnodes.to_string()))?;
    let requested = gpu_count(req_tres).map_err(LineError::ReqTres)?;
    let Some(start) = start else {
        return Ok(Record::Unstarted(UnstartedRecord {
            cluster,
            job_id_raw,
            job_id,
            account,
            user,
            partition,
            qos,
            state,
            submit,
            eligible,
            end,
            gpus: requested.total,
            gpus_by_type: requested.by_type,
            time_limit,
            nnodes,
            req_tres,
        }));
    };
    if end.is_some_and(|end| end < start) {
        return Err(LineError::EndBeforeStart);
    }
    Ok(Record::Run(RunRecord {
        cluster,
        job_id_raw,
        job_id,
        account,
        user,
        partition,
        qos,
        state,
        submit,
        start,
        end,
        elapsed,
        gpus: gpus.total,
        gpus_by_type: gpus.by_type,
        alloc_tres,
        eligible,
        time_limit,
        nnodes,
    }))
}

/// TimelimitRaw: whole minutes, as seconds; Slurm's words for no limit (`UNLIMITED`, and
/// `Partition_Limit`: the partition's, which sacct does not know) and empty read as None.
/// Returns None for an unreadable value, Some(None) for "no limit".
fn parse_time_limit(text: &str) -> Option<Option<i64>> {
    match text.trim() {
        "" | "UNLIMITED" | "Partition_Limit" | "INVALID" | "Unknown" => Some(None),
        t if t.bytes().all(|b| b.is_ascii_digit()) => {
            let minutes: i64 = t.parse().ok()?;
            Some(Some(minutes.checked_mul(60)?))
        }
        _ => None,
    }
}

/// NNodes: a count (`--noconvert`: never `1K`); empty reads as None.
fn parse_nnodes(text: &str) -> Option<Option<u32>> {
    match text.trim() {
        "" | "Unknown" => Some(None),
        t if t.bytes().all(|b| b.is_ascii_digit()) => t.parse().ok().map(Some),
        _ => None,
    }
}

/// sacct prints `Unknown` for a time that has not happened (start of a pending job, end of a
/// running one); `None` and empty are read the same way.
fn optional_time<Tz: TimeZone>(
    field: &'static str,
    text: &str,
    tz: &Tz,
) -> Result<Option<UnixSeconds>, LineError> {
    match text.trim() {
        "" | "Unknown" | "None" => Ok(None),
        t => parse_local_datetime(t, tz)
            .map(Some)
            .map_err(|_| LineError::Time {
                field,
                text: text.to_string(),
            }),
    }
}

/// `[D-]HH:MM:SS` or `MM:SS` (Slurm's `secs2time_str`); Slurm's words for no value read as None.
/// Returns None for an unreadable value, Some(None) for "no value".
fn parse_elapsed(text: &str) -> Option<Option<i64>> {
    let t = text.trim();
    if matches!(
        t,
        "" | "INVALID" | "UNLIMITED" | "Unknown" | "Partition_Limit"
    ) {
        return Some(None);
    }
    let (days, clock) = match t.split_once('-') {
        Some((d, rest)) => (d.parse::<i64>().ok()?, rest),
        None => (0, t),
    };
    let mut parts = [0i64; 3];
    let mut count = 0;
    for part in clock.split(':') {
        if count == parts.len() || part.is_empty() || !part.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        parts[count] = part.parse().ok()?;
        count += 1;
    }
    // Checked: a value no run can have (a corrupt or hostile record) is malformed, never a
    // wrapped number or a panic.
    let secs = match parts[..count] {
        [h, m, s] => h
            .checked_mul(3600)?
            .checked_add(m.checked_mul(60)?)?
            .checked_add(s)?,
        [m, s] => m.checked_mul(60)?.checked_add(s)?,
        _ => return None,
    };
    Some(Some(days.checked_mul(86_400)?.checked_add(secs)?))
}

/// What to ask sacct for: the allocations of every account that were eligible or running in
/// `[since, until)`, on `cluster`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SacctQuery {
    pub cluster: Option<String>,
    pub since: UnixSeconds,
    pub until: UnixSeconds,
}

impl SacctQuery {
    /// The arguments. Times are written in UTC because sacct is run with `TZ=UTC`
    /// (`slurm_cli`), which also makes every time it prints UTC.
    pub fn args(&self) -> Vec<String> {
        let mut args: Vec<String> = [
            "-a", // all users
            "-X", // allocations only: steps would count the same GPUs again
            "-D", // every run of a requeued job
            "-P", // `|`-separated, no padding, no trailing separator
            "-n", // no header
            "--noconvert",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        if let Some(cluster) = &self.cluster {
            args.push("-M".into());
            args.push(cluster.clone());
        }
        args.extend([
            "-S".to_string(),
            format_local(self.since, &chrono::Utc),
            "-E".to_string(),
            format_local(self.until, &chrono::Utc),
            "-o".to_string(),
            FIELDS.join(","),
        ]);
        args
    }

    pub fn command(&self) -> SlurmCommand {
        SlurmCommand::new("sacct", self.args(), SACCT_TIMEOUT)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::{FixedOffset, Utc};

    const T0: i64 = 1_714_521_600; // 2024-05-01T00:00:00Z

    fn one(line: &str) -> JobRun {
        let b = parse(line, &Utc);
        assert!(b.malformed.is_empty(), "{:?}", b.malformed);
        assert_eq!(b.runs.len(), 1);
        b.runs.into_iter().next().unwrap()
    }

    fn malformed(line: &str) -> MalformedLine {
        let b = parse(line, &Utc);
        assert!(b.runs.is_empty());
        assert_eq!(b.malformed.len(), 1, "{b:?}");
        b.malformed.into_iter().next().unwrap()
    }

    #[test]
    fn a_completed_job() {
        let r = one("101|101|gpu-cluster|agents|alice|gpu|normal|COMPLETED|2024-05-01T00:00:00|2024-05-01T00:00:10|2024-05-01T01:00:10|01:00:00|billing=1,cpu=1,gres/gpu=2,node=1|2024-05-01T00:00:00|2880|1|billing=1,cpu=1,gres/gpu=2,node=1");
        assert_eq!(r.job_id_raw, 101);
        assert_eq!(r.job_id, "101");
        assert_eq!(r.cluster, "gpu-cluster");
        assert_eq!(r.account, "agents");
        assert_eq!(r.user, "alice");
        assert_eq!(r.partition, "gpu");
        assert_eq!(r.qos, "normal");
        assert_eq!(r.state, "COMPLETED");
        assert_eq!(r.submit, Some(T0));
        assert_eq!(r.start, T0 + 10);
        assert_eq!(r.end, Some(T0 + 3610));
        assert_eq!(r.elapsed, Some(3600));
        assert_eq!(r.gpus, 2);
        assert!(r.gpus_by_type.is_empty());
        assert_eq!(r.alloc_tres, "billing=1,cpu=1,gres/gpu=2,node=1");
    }

    #[test]
    fn times_are_read_in_the_given_zone() {
        let line = "7|7|c|a|u|gpu|normal|COMPLETED|2024-05-01T00:00:00|2024-05-01T00:00:00|2024-05-01T00:00:01|00:00:01|gres/gpu=1|2024-05-01T00:00:00|2880|1|gres/gpu=1";
        let b = parse(line, &FixedOffset::west_opt(3 * 3600).unwrap());
        assert_eq!(b.runs[0].start, T0 + 3 * 3600);
    }

    #[test]
    fn a_running_job_has_no_end() {
        let r = one("102|102|c|training|bob|gpu|normal|RUNNING|2024-05-01T00:00:00|2024-05-01T00:00:00|Unknown|1-02:03:04|cpu=4,gres/gpu=4,gres/gpu:h100=4,node=1|2024-05-01T00:00:00|2880|1|cpu=4,gres/gpu=4,gres/gpu:h100=4,node=1");
        assert_eq!(r.end, None);
        assert_eq!(r.state, "RUNNING");
        assert_eq!(r.elapsed, Some(86_400 + 2 * 3600 + 3 * 60 + 4));
        assert_eq!(r.gpus, 4);
        assert_eq!(r.gpus_by_type.get("h100"), Some(&4));
    }

    /// Issue 30: a shard job holds `gres/shard` and no GPU; its shards are kept as type
    /// `shard` beside a total of 0 GPUs (only a configuration governing shards counts them).
    #[test]
    fn a_shard_job_keeps_its_shards_as_their_own_type() {
        let r = one("104|104|c|serve|bob|gpu|normal|COMPLETED|2024-05-01T00:00:00|2024-05-01T00:00:00|2024-05-01T01:00:00|01:00:00|billing=1,cpu=1,gres/shard=3,node=1|2024-05-01T00:00:00|2880|1|gres/shard=3");
        assert_eq!(r.gpus, 0);
        assert_eq!(r.gpus_by_type.get("shard"), Some(&3));
        let r = one("105|105|c|serve|bob|gpu|normal|COMPLETED|2024-05-01T00:00:00|2024-05-01T00:00:00|2024-05-01T01:00:00|01:00:00|cpu=1,gres/gpu=1,gres/gpu:a100=1|2024-05-01T00:00:00|2880|1|gres/gpu=1");
        assert!(!r.gpus_by_type.contains_key("shard"));
    }

    #[test]
    fn a_requeued_job_gives_one_run_per_start() {
        let text = "\
103|103|c|research|carol|gpu|normal|PREEMPTED|2024-05-01T00:00:00|2024-05-01T00:00:00|2024-05-01T00:10:00|00:10:00|gres/gpu=1|2024-05-01T00:00:00|2880|1|gres/gpu=1
103|103|c|research|carol|gpu|normal|REQUEUED|2024-05-01T00:00:00|2024-05-01T00:12:01|2024-05-01T00:20:00|00:07:59|gres/gpu=1|2024-05-01T00:00:00|2880|1|gres/gpu=1
103|103|c|research|carol|gpu|normal|COMPLETED|2024-05-01T00:00:00|2024-05-01T00:30:00|2024-05-01T01:00:00|00:30:00|gres/gpu=1|2024-05-01T00:00:00|2880|1|gres/gpu=1
";
        let b = parse(text, &Utc);
        assert_eq!(b.lines, 3);
        assert!(b.malformed.is_empty());
        let starts: Vec<_> = b.runs.iter().map(|r| (r.job_id_raw, r.start)).collect();
        assert_eq!(starts, vec![(103, T0), (103, T0 + 721), (103, T0 + 1800)]);
        let states: Vec<_> = b.runs.iter().map(|r| r.state.as_str()).collect();
        assert_eq!(states, ["PREEMPTED", "REQUEUED", "COMPLETED"]);
    }

    #[test]
    fn array_tasks_keep_both_ids() {
        let r = one("205|200_5|c|agents|alice|gpu|normal|COMPLETED|2024-05-01T00:00:00|2024-05-01T00:00:00|2024-05-01T00:01:00|00:01:00|gres/gpu=1|2024-05-01T00:00:00|2880|1|gres/gpu=1");
        assert_eq!(r.job_id_raw, 205);
        assert_eq!(r.job_id, "200_5");
    }

    #[test]
    fn states_are_kept_verbatim() {
        for state in [
            "CANCELLED by 0",
            "PREEMPTED",
            "REQUEUED",
            "NODE_FAIL",
            "OUT_OF_MEMORY",
            "TIMEOUT",
            "BOOT_FAIL",
            "SOME_FUTURE_STATE",
        ] {
            let line = format!("1|1|c|a|u|gpu|normal|{state}|2024-05-01T00:00:00|2024-05-01T00:00:00|2024-05-01T00:05:00|00:05:00|gres/gpu=1|2024-05-01T00:00:00|2880|1|gres/gpu=1");
            assert_eq!(one(&line).state, state);
        }
    }

    #[test]
    fn jobs_that_never_started_are_counted_and_kept_apart() {
        let text = "\
300|300|c|a|u|gpu|normal|PENDING|2024-05-01T00:00:00|Unknown|Unknown|00:00:00||2024-05-01T00:10:00|90|2|billing=2,cpu=2,gres/gpu=4,gres/gpu:h100=4,node=2
301|301|c|a|u|gpu|normal|CANCELLED by 1000|2024-05-01T00:00:00|None|2024-05-01T00:01:00|00:00:00||Unknown|UNLIMITED||cpu=1,gres/gpu=1,node=1
";
        let b = parse(text, &Utc);
        assert_eq!(b.lines, 2);
        assert!(b.runs.is_empty());
        assert_eq!(b.not_started, 2);
        assert!(b.malformed.is_empty(), "{:?}", b.malformed);
        let [pending, cancelled] = &b.unstarted[..] else {
            panic!("{b:?}")
        };
        // Asked for 4 h100 on 2 nodes for 90 min = 5400 s; eligible 10 min after submit.
        assert_eq!(pending.job_id_raw, 300);
        assert_eq!(pending.state, "PENDING");
        assert_eq!(
            (pending.submit, pending.eligible),
            (Some(T0), Some(T0 + 600))
        );
        assert_eq!(pending.end, None);
        assert_eq!(
            (pending.gpus, pending.gpus_by_type.get("h100")),
            (4, Some(&4))
        );
        assert_eq!((pending.time_limit, pending.nnodes), (Some(5400), Some(2)));
        // Cancelled a minute after submit, never eligible, no limit, no node count.
        assert_eq!(cancelled.end, Some(T0 + 60));
        assert_eq!(cancelled.eligible, None);
        assert_eq!((cancelled.time_limit, cancelled.nnodes), (None, None));
        assert_eq!(cancelled.gpus, 1);
        assert!(cancelled.gpus_by_type.is_empty());
        assert_eq!(cancelled.req_tres, "cpu=1,gres/gpu=1,node=1");
    }

    #[test]
    fn eligible_time_limit_and_nodes_of_a_run() {
        // TimelimitRaw is in minutes: 1440 min = 86 400 s.
        let r = one("500|500|c|a|u|gpu|normal|COMPLETED|2024-05-01T00:00:00|2024-05-01T02:00:00|2024-05-01T03:00:00|01:00:00|gres/gpu=8,node=2|2024-05-01T01:00:00|1440|2|gres/gpu=8,node=2");
        assert_eq!(r.eligible, Some(T0 + 3600));
        assert_eq!(r.time_limit, Some(86_400));
        assert_eq!(r.nnodes, Some(2));
        for (limit, want) in [
            ("UNLIMITED", None),
            ("Partition_Limit", None),
            ("", None),
            ("0", Some(0)),
            (" 30 ", Some(1800)),
        ] {
            let line = format!("1|1|c|a|u|gpu|normal|COMPLETED|2024-05-01T00:00:00|2024-05-01T00:00:00|2024-05-01T00:05:00|00:05:00|gres/gpu=1|2024-05-01T00:00:00|{limit}|1|gres/gpu=1");
            assert_eq!(one(&line).time_limit, want, "{limit:?}");
        }
    }

    #[test]
    fn jobs_without_gpus_are_runs_with_zero_gpus() {
        let r = one("400|400|c|a|u|cpu|normal|COMPLETED|2024-05-01T00:00:00|2024-05-01T00:00:00|2024-05-01T00:00:01|00:00:01|billing=1,cpu=1,mem=1024M,node=1|2024-05-01T00:00:00|2880|1|billing=1,cpu=1,mem=1024M,node=1");
        assert_eq!(r.gpus, 0);
        let r = one("401|401|c|a|u|cpu|normal|CANCELLED by 0|2024-05-01T00:00:00|2024-05-01T00:00:00|2024-05-01T00:00:00|00:00:00||2024-05-01T00:00:00|2880|1|");
        assert_eq!(r.gpus, 0);
        assert_eq!(r.alloc_tres, "");
    }

    #[test]
    fn malformed_lines_are_reported_with_number_and_content() {
        let text = "\
1|1|c|a|u|gpu|normal|COMPLETED|2024-05-01T00:00:00|2024-05-01T00:00:00|2024-05-01T00:05:00|00:05:00|gres/gpu=1|2024-05-01T00:00:00|2880|1|gres/gpu=1
2|2|c|a|u|gpu|normal|COMPLETED|2024-05-01T00:00:00|2024-05-01T00:00:00|2024-05-01T00:05:00|00:05:00
3|3|c|a|u|gpu|normal|COMPLETED|2024-05-01T00:00:00|2024-05-01T00:00:00|2024-05-01T00:05:00|00:05:00|gres/gpu=two|2024-05-01T00:00:00|2880|1|gres/gpu=two
4|4|c|a|u|gpu|normal|COMPLETED|2024-05-01T00:00:00|2024-05-01T00:00:00|2024-05-01T00:05:00|00:05:00|gres/gpu=1|2024-05-01T00:00:00|2880|1|gres/gpu=1
";
        let b = parse(text, &Utc);
        assert_eq!(b.lines, 4);
        assert_eq!(
            b.runs.iter().map(|r| r.job_id_raw).collect::<Vec<_>>(),
            [1, 4]
        );
        assert_eq!(b.malformed.len(), 2);
        assert_eq!(b.malformed[0].line_number, 2);
        assert!(
            b.malformed[0].reason.contains("expected 17"),
            "{}",
            b.malformed[0].reason
        );
        assert!(b.malformed[0].content.starts_with("2|2|"));
        assert_eq!(b.malformed[1].line_number, 3);
        assert!(b.malformed[1].reason.contains("AllocTRES"));
        assert!(b.malformed[1].to_string().contains("gres/gpu=two"));
    }

    #[test]
    fn each_kind_of_bad_field_is_malformed() {
        let ok = "1|1|c|a|u|gpu|normal|COMPLETED|2024-05-01T00:00:00|2024-05-01T00:00:00|2024-05-01T00:05:00|00:05:00|gres/gpu=1|2024-05-01T00:00:00|2880|1|gres/gpu=1";
        let fields: Vec<&str> = ok.split('|').collect();
        let with = |i: usize, v: &str| {
            let mut f = fields.clone();
            f[i] = v;
            f.join("|")
        };
        assert!(malformed(&with(0, "1.batch")).reason.contains("JobIDRaw"));
        assert!(malformed(&with(0, "")).reason.contains("JobIDRaw"));
        assert!(malformed(&with(8, "yesterday")).reason.contains("Submit"));
        assert!(malformed(&with(9, "2024-05-01 00:00:00"))
            .reason
            .contains("Start"));
        assert!(malformed(&with(10, "2024-13-01T00:00:00"))
            .reason
            .contains("End"));
        assert!(malformed(&with(10, "2024-04-30T00:00:00"))
            .reason
            .contains("before"));
        assert!(malformed(&with(11, "five minutes"))
            .reason
            .contains("Elapsed"));
        assert!(malformed(&with(12, "gres/gpu:h100:x=1"))
            .reason
            .contains("AllocTRES"));
        assert!(malformed(&with(13, "soon")).reason.contains("Eligible"));
        for bad in ["1:00:00", "-5", "ninety", "9999999999999999999"] {
            let m = malformed(&with(14, bad));
            assert!(m.reason.contains("TimelimitRaw"), "{bad}: {}", m.reason);
            assert!(m.reason.contains("UNLIMITED"), "{}", m.reason);
        }
        for bad in ["two", "1K", "-1", "2-4"] {
            assert!(malformed(&with(15, bad)).reason.contains("NNodes"), "{bad}");
        }
        assert!(malformed(&with(16, "gres/gpu=lots"))
            .reason
            .contains("ReqTRES"));
        assert!(malformed(&format!("{ok}|extra"))
            .reason
            .contains("found 18"));
        assert!(malformed("garbage").reason.contains("found 1"));
    }

    #[test]
    fn blank_lines_are_ignored_and_line_numbers_stay_true() {
        let text = "\n1|1|c|a|u|gpu|normal|COMPLETED|2024-05-01T00:00:00|2024-05-01T00:00:00|2024-05-01T00:05:00|00:05:00|gres/gpu=1|2024-05-01T00:00:00|2880|1|gres/gpu=1\n\nbad\n";
        let b = parse(text, &Utc);
        assert_eq!(b.lines, 2);
        assert_eq!(b.malformed[0].line_number, 4);
    }

    #[test]
    fn elapsed_forms() {
        assert_eq!(parse_elapsed("00:00:00"), Some(Some(0)));
        assert_eq!(parse_elapsed("12:34"), Some(Some(754)));
        assert_eq!(parse_elapsed("2-00:00:01"), Some(Some(172_801)));
        assert_eq!(parse_elapsed("INVALID"), Some(None));
        assert_eq!(parse_elapsed("1:2:3:4"), None);
        assert_eq!(parse_elapsed("-1:00"), None);
        // Beyond i64 seconds: malformed, not wrapped and not a panic (found by the parsers'
        // property tests).
        assert_eq!(parse_elapsed("200000000000000000:0"), None);
        assert_eq!(parse_elapsed("5000000000000000:00:00"), None);
        assert_eq!(parse_elapsed("200000000000000-00:00:00"), None);
    }

    #[test]
    fn the_query_asks_for_allocations_and_requeued_runs_in_utc() {
        let q = SacctQuery {
            cluster: Some("gpu-cluster".into()),
            since: T0,
            until: T0 + 3600,
        };
        let args = q.args();
        for flag in ["-a", "-X", "-D", "-P", "-n", "--noconvert"] {
            assert!(args.iter().any(|a| a == flag), "{flag} missing");
        }
        let pos = |f: &str| args.iter().position(|a| a == f).unwrap();
        assert_eq!(args[pos("-M") + 1], "gpu-cluster");
        assert_eq!(args[pos("-S") + 1], "2024-05-01T00:00:00");
        assert_eq!(args[pos("-E") + 1], "2024-05-01T01:00:00");
        assert_eq!(
            args[pos("-o") + 1],
            "JobIDRaw,JobID,Cluster,Account,User,Partition,QOS,State,Submit,Start,End,Elapsed,AllocTRES,Eligible,TimelimitRaw,NNodes,ReqTRES"
        );
    }
}
