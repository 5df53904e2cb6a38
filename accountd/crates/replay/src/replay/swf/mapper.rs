//! The mapper: an SWF file's records to the replay's jobs of the team map's teams, on a
//! cluster of the given or the header's size, with the summary of what was read.

use std::collections::{BTreeMap, HashMap};

use super::reader::{Read, Record, MAX_CLUSTER_GPUS};
use super::{CapacitySource, SwfError, SwfSummary, TeamMap, MALFORMED_LISTED};
use crate::parsable::MalformedLine;
use crate::replay::{Cluster, NodeSpec, Observed, Secs, Trace, TraceJob};

/// The trace of what [`super::reader::read`] read of `text`, and its summary.
pub(super) fn to_trace(
    text: &str,
    read: Read,
    map: &TeamMap,
    capacity: Option<u32>,
) -> Result<(Trace, SwfSummary), SwfError> {
    let base = read.header.unix_start_time.unwrap_or(0);
    let (capacity, capacity_source) = match (capacity, read.header.max_procs, read.header.max_nodes)
    {
        (Some(c), _, _) => (c, CapacitySource::Given),
        (None, Some(p), _) => (
            header_gpus(map, p, "MaxProcs", &read.numeric)?,
            CapacitySource::MaxProcs,
        ),
        (None, None, Some(n)) => (
            header_gpus(map, n, "MaxNodes", &read.numeric)?,
            CapacitySource::MaxNodes,
        ),
        (None, None, None) => return Err(SwfError::NoCapacity),
    };
    let Read {
        header,
        records,
        lines,
        malformed,
        malformed_first,
        ..
    } = read;
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
    let jobs_in = distinct(text, records, &mut summary);

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
        if let Some(job) = job_of(r, team, map, base, capacity, &ends, &mut summary) {
            jobs.push(job);
        }
    }
    if !mapped_any {
        return Err(SwfError::NothingMapped { jobs: considered });
    }
    jobs.sort_by_key(|j| (j.submit, j.id));
    summary.jobs = jobs.len();

    let (since, until) = period(&summary, &jobs, base);
    let trace = Trace {
        jobs,
        cluster: cluster(capacity, map.gpus_per_node),
        since,
        until,
        source: "SWF file".to_string(),
        // SWF has no GPU samples: no job's idleness is known.
        activity: None,
    };
    Ok((trace, summary))
}

/// The records without partial executions (counted), and without the repeats of a job number
/// (malformed lines).
fn distinct(text: &str, records: Vec<Record>, summary: &mut SwfSummary) -> Vec<Record> {
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
    jobs_in
}

/// Record `r` of `team` as a trace job; `None` (counted in the summary) when it has no size,
/// was cancelled at an unknown time, or has no duration.
fn job_of(
    r: &Record,
    team: &str,
    map: &TeamMap,
    base: Secs,
    capacity: u32,
    ends: &HashMap<u64, Secs>,
    summary: &mut SwfSummary,
) -> Option<TraceJob> {
    let Some(gpus) = r
        .alloc
        .or(r.req_procs)
        .and_then(|p| map.procs.gpus(p))
        .filter(|g| *g > 0)
    else {
        summary.no_size += 1;
        return None;
    };
    let cancelled_before_start = r.status == Some(5) && matches!(r.run, None | Some(0));
    if cancelled_before_start && r.wait.is_none() {
        summary.cancelled_unknown += 1;
        return None;
    }
    let run = if cancelled_before_start { None } else { r.run };
    let time_limit = time_limit(r, run, summary)?;
    let submit = base + r.submit;
    let eligible = eligible(r, submit, ends, summary);
    let (observed, cancelled_pending_at) =
        observed(r, submit, run, cancelled_before_start, summary);
    if gpus > capacity {
        summary.larger_than_cluster += 1;
    }
    *summary.teams.entry(team.to_string()).or_default() += 1;
    Some(TraceJob {
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
    })
}

/// The job's time limit: the requested time, else its run time (counted), raised to a run
/// that overran it (counted); `None` (counted) when it has neither.
fn time_limit(r: &Record, run: Option<Secs>, summary: &mut SwfSummary) -> Option<Secs> {
    let req_time = r.req_time.filter(|t| *t > 0);
    let Some(mut time_limit) = req_time.or(run) else {
        summary.no_duration += 1;
        return None;
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
    Some(time_limit.max(1))
}

/// When the job became eligible: its submission, or later the end of the job it follows plus
/// the think time.
fn eligible(r: &Record, submit: Secs, ends: &HashMap<u64, Secs>, summary: &mut SwfSummary) -> Secs {
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
    eligible
}

/// What the history shows of the job, and when it was cancelled while pending.
fn observed(
    r: &Record,
    submit: Secs,
    run: Option<Secs>,
    cancelled_before_start: bool,
    summary: &mut SwfSummary,
) -> (Observed, Option<Secs>) {
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
    (observed, cancelled_pending_at)
}

/// The trace's period: from the header's start (else the first submission) to the last
/// observed end, cancellation or expected end.
fn period(summary: &SwfSummary, jobs: &[TraceJob], base: Secs) -> (Secs, Secs) {
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
    (since, until)
}

fn header_gpus(
    map: &TeamMap,
    procs: u64,
    key: &str,
    numeric: &BTreeMap<&'static str, (i64, usize)>,
) -> Result<u32, SwfError> {
    let line = numeric.get(key).map_or(0, |(_, l)| *l);
    match map.procs.gpus(procs) {
        Some(g) if g > 0 && g <= MAX_CLUSTER_GPUS => Ok(g),
        Some(g) if g > 0 => Err(SwfError::Header {
            line,
            reason: format!(
                "{key} {procs} is {g} GPUs, more than a replay takes ({MAX_CLUSTER_GPUS})"
            ),
            hint: "give the cluster's GPUs with --capacity".to_string(),
        }),
        _ => Err(SwfError::Header {
            line,
            reason: format!("{key} {procs} is not a cluster size in GPUs"),
            hint: "give the cluster's GPUs with --capacity".to_string(),
        }),
    }
}

/// `capacity` GPUs as nodes of `per_node` (the last one takes the remainder).
pub(super) fn cluster(capacity: u32, per_node: u32) -> Cluster {
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
