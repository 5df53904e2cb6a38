//! A trace from accountd's database: the jobs submitted in a period (their runs, requeues
//! folded into their job, and the jobs that never started) and the cluster, from the capacity
//! samples `accountd run` recorded.
//!
//! What a job of the trace is made of, and the assumptions (the CLI prints [`LoadSummary`]):
//! - one job per JobIDRaw, its runs in start order; its submit time is its earliest run's
//!   (Slurm resets a requeued job's submit time when it requeues it), else its first start;
//!   eligible is its first run's eligible time (else its submit), between submit and first start;
//! - `work` is its last run's elapsed time; a last run still running needs at least until the
//!   trace's end (its true length is not known yet);
//! - `time_limit` is its last run's (`scontrol update` may have changed it), else the default
//!   the caller gives, and never below `work`;
//! - a job that never started needs its whole time limit, and is cancelled when it was
//!   (its end time); a pending job array is one record, so one job (counted in the summary);
//! - its class is its QOS unless that is teamshare's internal QOS (which carries the class in
//!   the job's priority, not in accounting); the simulator maps a QOS to a class of the same
//!   name, if the candidate has one;
//! - its GPU type is the single type of its typed GPUs (AllocTRES, or ReqTRES for a job that
//!   never started); none with no type or several;
//! - `exclusive` is false (sacct does not say) and `held` is true only for a run Slurm ended
//!   REQUEUE_HOLD: an eligible time later than submit is a begin time or a dependency, not a hold;
//! - jobs without GPUs are not governed: dropped, and counted.

use std::collections::BTreeSet;
use std::fmt;

use super::{Cluster, Drain, NodeSpec, Observed, Secs, Trace, TraceJob};
use crate::period::format_rfc3339;
use crate::sacct::UnstartedJob;
use crate::store::{CapacitySample, StartedJob, Store, StoreError};

/// The QOS every governed job runs in: not a priority class.
pub const GOVERNED_QOS: &str = teamshare_policy::priority::INTERNAL_QOS;

/// Run states of a run that ended by preemption or requeue, as sacct writes them (a state may
/// carry more words, as `CANCELLED by 0` does).
const PREEMPTED_STATES: [&str; 4] = ["PREEMPTED", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED"];

#[derive(Debug, thiserror::Error)]
pub enum HistoryError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("the period is empty: since ({since}) must be before until ({until})")]
    EmptyPeriod { since: String, until: String },
    #[error("GPUs per node must be at least 1")]
    GpusPerNode,
    #[error("the default time limit must be at least 1 second")]
    DefaultTimeLimit,
    #[error("no capacity of cluster {cluster} is recorded up to {until} (`accountd run` records it): pass --capacity N to replay on a constant N GPUs")]
    NoCapacity { cluster: String, until: String },
}

/// What [`load`] made of the database, for the CLI to print.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LoadSummary {
    /// Jobs in the trace.
    pub jobs: usize,
    /// Their runs.
    pub runs: usize,
    /// Jobs of the trace with more than one run.
    pub requeued: usize,
    /// Jobs of the trace that never started, and of them those cancelled while they waited.
    pub never_started: usize,
    pub cancelled_pending: usize,
    /// Jobs of the trace whose time limit is the default (none recorded, or UNLIMITED).
    pub default_time_limit: usize,
    /// Jobs of the trace that are a pending job array's one record (their tasks count as one).
    pub pending_arrays: usize,
    /// Jobs submitted in the period left out: without GPUs (not governed), without a submit
    /// time.
    pub dropped_no_gpus: usize,
    pub dropped_no_submit: usize,
}

impl fmt::Display for LoadSummary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} jobs ({} runs, {} requeued, {} never started of which {} cancelled while pending; {} with the default time limit; {} pending arrays counted as one job each); dropped: {} without GPUs, {} without a submit time",
            self.jobs,
            self.runs,
            self.requeued,
            self.never_started,
            self.cancelled_pending,
            self.default_time_limit,
            self.pending_arrays,
            self.dropped_no_gpus,
            self.dropped_no_submit
        )
    }
}

/// A trace and how it was made.
#[derive(Debug, Clone, PartialEq)]
pub struct History {
    pub trace: Trace,
    pub summary: LoadSummary,
}

/// The trace of `cluster` over `[since, until)` from `store`: every job submitted in the
/// period, and the cluster from its recorded capacity ([`cluster_from_capacity`]) as nodes of
/// `gpus_per_node` GPUs. `default_time_limit` (seconds) stands for a time limit sacct did not
/// give. Without any capacity recorded the error says to pass a constant one (then build the
/// trace with [`constant_cluster`] and [`load_jobs`]).
pub fn load(
    store: &Store,
    cluster: &str,
    since: Secs,
    until: Secs,
    gpus_per_node: u32,
    default_time_limit: Secs,
) -> Result<History, HistoryError> {
    check(since, until, gpus_per_node, default_time_limit)?;
    let samples = store.capacity_history(cluster, since, until)?;
    if samples.is_empty() {
        return Err(HistoryError::NoCapacity {
            cluster: cluster.to_string(),
            until: format_rfc3339(until),
        });
    }
    let nodes = cluster_from_capacity(&samples, since, until, gpus_per_node);
    load_jobs(store, cluster, since, until, default_time_limit, nodes)
}

/// [`load`] on a given cluster (a constant capacity, [`constant_cluster`]).
pub fn load_jobs(
    store: &Store,
    cluster: &str,
    since: Secs,
    until: Secs,
    default_time_limit: Secs,
    nodes: Cluster,
) -> Result<History, HistoryError> {
    check(since, until, 1, default_time_limit)?;
    let submitted = store.jobs_submitted(cluster, since, until)?;
    let mut summary = LoadSummary::default();
    let mut jobs = Vec::with_capacity(submitted.started.len() + submitted.unstarted.len());
    for job in &submitted.started {
        if let Some(j) = started_job(job, until, default_time_limit, &mut summary) {
            jobs.push(j);
        }
    }
    for job in &submitted.unstarted {
        if let Some(j) = unstarted_job(job, default_time_limit, &mut summary) {
            jobs.push(j);
        }
    }
    jobs.sort_by_key(|j| (j.submit, j.id));
    summary.jobs = jobs.len();
    Ok(History {
        trace: Trace {
            jobs,
            cluster: nodes,
            since,
            until,
            source: format!("accountd database {} (cluster {cluster})", store.path()),
            // Read apart, with the idle threshold ([`super::activity::load`]).
            activity: None,
        },
        summary,
    })
}

fn check(
    since: Secs,
    until: Secs,
    gpus_per_node: u32,
    default_time_limit: Secs,
) -> Result<(), HistoryError> {
    if since >= until {
        return Err(HistoryError::EmptyPeriod {
            since: format_rfc3339(since),
            until: format_rfc3339(until),
        });
    }
    if gpus_per_node == 0 {
        return Err(HistoryError::GpusPerNode);
    }
    if default_time_limit < 1 {
        return Err(HistoryError::DefaultTimeLimit);
    }
    Ok(())
}

fn started_job(
    job: &StartedJob,
    until: Secs,
    default_time_limit: Secs,
    summary: &mut LoadSummary,
) -> Option<TraceJob> {
    let (first, last) = (job.runs.first()?, job.runs.last()?);
    let gpus = job.runs.iter().map(|r| r.gpus).max().unwrap_or(0);
    if gpus == 0 {
        summary.dropped_no_gpus += 1;
        return None;
    }
    let submit = job.submit();
    let eligible = first
        .eligible
        .unwrap_or(submit)
        .max(submit)
        .min(first.start.max(submit));
    let work = match last.end {
        Some(end) => last.elapsed.unwrap_or(end - last.start),
        // Still running: at least until the trace's end.
        None => last.elapsed.unwrap_or(0).max(until - last.start),
    }
    .max(0);
    let time_limit = last.time_limit.unwrap_or_else(|| {
        summary.default_time_limit += 1;
        default_time_limit
    });
    summary.runs += job.runs.len();
    summary.requeued += usize::from(job.runs.len() > 1);
    let types = job
        .runs
        .iter()
        .flat_map(|r| r.gpus_by_type.iter().filter(|(_, n)| **n > 0))
        .map(|(t, _)| t.as_str());
    Some(TraceJob {
        id: u64::from(job.job_id_raw),
        team: first.account.clone(),
        class: class_of(&first.qos),
        submit,
        eligible,
        gpus: u32::try_from(gpus).unwrap_or(u32::MAX),
        gpu_type: single_type(types),
        nodes: last.nnodes.unwrap_or(1).max(1),
        exclusive: false,
        time_limit: time_limit.max(work).max(1),
        work,
        cancelled_pending_at: None,
        observed: Observed {
            runs: job.runs.iter().map(|r| (r.start, r.end)).collect(),
            preemptions: u32::try_from(job.runs.iter().filter(|r| preempted(&r.state)).count())
                .unwrap_or(u32::MAX),
            held: job
                .runs
                .iter()
                .any(|r| first_word(&r.state) == "REQUEUE_HOLD"),
            // Accounting records every start.
            wait_unknown: false,
        },
    })
}

fn unstarted_job(
    job: &UnstartedJob,
    default_time_limit: Secs,
    summary: &mut LoadSummary,
) -> Option<TraceJob> {
    if job.gpus == 0 {
        summary.dropped_no_gpus += 1;
        return None;
    }
    let Some(submit) = job.submit else {
        summary.dropped_no_submit += 1;
        return None;
    };
    let time_limit = job
        .time_limit
        .unwrap_or_else(|| {
            summary.default_time_limit += 1;
            default_time_limit
        })
        .max(1);
    let cancelled = job.end.map(|end| end.max(submit));
    summary.never_started += 1;
    summary.cancelled_pending += usize::from(cancelled.is_some());
    summary.pending_arrays += usize::from(job.job_id.contains('['));
    let types = job
        .gpus_by_type
        .iter()
        .filter(|(_, n)| **n > 0)
        .map(|(t, _)| t.as_str());
    Some(TraceJob {
        id: u64::from(job.job_id_raw),
        team: job.account.clone(),
        class: class_of(&job.qos),
        submit,
        eligible: job.eligible.unwrap_or(submit).max(submit),
        gpus: u32::try_from(job.gpus).unwrap_or(u32::MAX),
        gpu_type: single_type(types),
        nodes: job.nnodes.unwrap_or(1).max(1),
        exclusive: false,
        time_limit,
        work: time_limit,
        cancelled_pending_at: cancelled,
        observed: Observed::default(),
    })
}

fn class_of(qos: &str) -> Option<String> {
    let qos = qos.trim();
    (!qos.is_empty() && qos != GOVERNED_QOS).then(|| qos.to_string())
}

fn first_word(state: &str) -> &str {
    state.split_whitespace().next().unwrap_or("")
}

fn preempted(state: &str) -> bool {
    PREEMPTED_STATES.contains(&first_word(state))
}

/// The one type among `types`, if there is exactly one.
fn single_type<'a>(types: impl Iterator<Item = &'a str>) -> Option<String> {
    let types: BTreeSet<&str> = types.collect();
    match types.len() {
        1 => types.into_iter().next().map(str::to_string),
        _ => None,
    }
}

/// A cluster of `gpus` GPUs of `gpu_type` that are always usable: nodes of `gpus_per_node`
/// GPUs (the last one holds what is left over), named `node001`... (`h100-node001`... when
/// typed).
pub fn constant_cluster(gpus: u32, gpus_per_node: u32, gpu_type: Option<&str>) -> Cluster {
    Cluster {
        nodes: nodes_of(gpus, gpus_per_node.max(1), gpu_type),
        drains: Vec::new(),
    }
}

/// The cluster that the governed capacity `samples` (a step function, [`Store::capacity_history`])
/// describe over `[since, until)`, per GPU type (the untyped part is the total less the typed
/// ones): as many nodes of `gpus_per_node` GPUs as the largest capacity needs (the last one
/// holds what is left over), and while the capacity is below that, as many of them drained,
/// from the last node back, as hold at least the GPUs missing (rounded up to whole nodes: 3
/// GPUs missing of nodes of 4 drain one node, 4 GPUs). Before the first sample, the first
/// sample's capacity holds.
pub fn cluster_from_capacity(
    samples: &[CapacitySample],
    since: Secs,
    until: Secs,
    gpus_per_node: u32,
) -> Cluster {
    let gpus_per_node = gpus_per_node.max(1);
    let mut pools: BTreeSet<Option<&str>> = samples
        .iter()
        .flat_map(|s| s.by_type.keys().map(|t| Some(t.as_str())))
        .collect();
    pools.insert(None);
    // Each step from its instant (clipped to the period) to the next one's.
    let froms: Vec<Secs> = samples
        .iter()
        .enumerate()
        .map(|(i, s)| if i == 0 { since } else { s.ts.max(since) })
        .collect();
    let mut cluster = Cluster::default();
    for pool in pools {
        let capacity = |s: &CapacitySample| match pool {
            Some(t) => s.by_type.get(t).copied().unwrap_or(0),
            None => s.gpus.saturating_sub(s.by_type.values().sum()),
        };
        let most = samples.iter().map(capacity).max().unwrap_or(0);
        if most == 0 {
            continue;
        }
        let nodes = nodes_of(most, gpus_per_node, pool);
        let mut open: Vec<Option<Secs>> = vec![None; nodes.len()];
        for (s, &from) in samples.iter().zip(&froms) {
            let missing = most - capacity(s).min(most);
            // The fewest nodes from the last back that hold `missing` GPUs.
            let mut drained = 0;
            let mut held = 0;
            while held < missing && drained < nodes.len() {
                held += nodes[nodes.len() - 1 - drained].gpus;
                drained += 1;
            }
            for (back, slot) in open.iter_mut().rev().enumerate() {
                let node = &nodes[nodes.len() - 1 - back];
                match (back < drained, *slot) {
                    (true, None) => *slot = Some(from),
                    (false, Some(start)) => {
                        *slot = None;
                        push_drain(&mut cluster.drains, &node.name, start, from);
                    }
                    _ => {}
                }
            }
        }
        for (node, slot) in nodes.iter().zip(&open) {
            if let Some(start) = slot {
                push_drain(&mut cluster.drains, &node.name, *start, until);
            }
        }
        cluster.nodes.extend(nodes);
    }
    cluster
        .drains
        .sort_by(|a, b| (a.since, &a.node).cmp(&(b.since, &b.node)));
    cluster
}

fn push_drain(drains: &mut Vec<Drain>, node: &str, since: Secs, until: Secs) {
    if since < until {
        drains.push(Drain {
            node: node.to_string(),
            since,
            until,
        });
    }
}

fn nodes_of(gpus: u32, gpus_per_node: u32, gpu_type: Option<&str>) -> Vec<NodeSpec> {
    let count = gpus.div_ceil(gpus_per_node);
    (0..count)
        .map(|i| NodeSpec {
            name: match gpu_type {
                Some(t) => format!("{t}-node{:03}", i + 1),
                None => format!("node{:03}", i + 1),
            },
            gpus: gpus_per_node.min(gpus - i * gpus_per_node),
            gpu_type: gpu_type.map(str::to_string),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    use crate::store::test_support::{capacity, run};

    const T: Secs = 1_714_521_600; // 2024-05-01T00:00:00Z: the period is [T, T + 4000)
    const UNTIL: Secs = T + 4000;
    const DEFAULT_LIMIT: Secs = 7200;

    fn pending(job: u32, submit: Secs, end: Option<Secs>, gpus: u64) -> UnstartedJob {
        UnstartedJob {
            cluster: "c".into(),
            job_id_raw: job,
            job_id: job.to_string(),
            account: "research".into(),
            user: "u".into(),
            partition: "gpu".into(),
            qos: GOVERNED_QOS.into(),
            state: if end.is_some() {
                "CANCELLED by 1000"
            } else {
                "PENDING"
            }
            .into(),
            submit: Some(submit),
            eligible: Some(submit),
            end,
            gpus,
            gpus_by_type: BTreeMap::new(),
            time_limit: None,
            nnodes: Some(1),
            req_tres: format!("cpu=1,gres/gpu={gpus},node=1"),
        }
    }

    /// The hand-built database: the jobs of the tests below, and the capacity: 16 GPUs, 12 over
    /// [T + 1000, T + 2000), 16 again, 10 from T + 3000 on.
    fn database() -> Store {
        let mut store = Store::open_in_memory().unwrap();
        // Job 7, requeued: preempted after 600 s, started again after the requeue (Slurm reset
        // its submit and eligible times then) and completed after 1800 s.
        let mut first = run(7, "training", T + 100, Some(T + 700), 2);
        first.state = "PREEMPTED".into();
        first.qos = GOVERNED_QOS.into();
        (first.submit, first.eligible) = (Some(T + 40), Some(T + 50));
        first.time_limit = Some(3600);
        first.gpus_by_type.insert("h100".into(), 2);
        let mut second = first.clone();
        second.state = "COMPLETED".into();
        (second.start, second.end, second.elapsed) = (T + 1000, Some(T + 2800), Some(1800));
        (second.submit, second.eligible) = (Some(T + 821), Some(T + 821));
        // Job 20: its limit (60 s) below what it ran (100 s), QOS "inference" (a class), 2 nodes.
        let mut short = run(20, "agents", T + 300, Some(T + 400), 4);
        short.qos = "inference".into();
        short.time_limit = Some(60);
        short.nnodes = Some(2);
        // Job 21: no GPUs; job 22: submitted before the period; job 23: submitted after it;
        // job 24 still running, started at T + 3500 with no limit recorded.
        let no_gpus = run(21, "agents", T + 10, Some(T + 20), 0);
        let mut before = run(22, "agents", T + 10, Some(T + 20), 1);
        before.submit = Some(T - 50);
        let after = run(23, "agents", UNTIL, Some(UNTIL + 10), 1);
        let mut running = run(24, "agents", T + 3500, None, 1);
        running.elapsed = Some(120);
        // Job 25: submitted and first run before the period, requeued into it (its second
        // run's submit, reset by the requeue, falls inside): still a job of before.
        let mut old_first = run(25, "agents", T - 500, Some(T - 100), 1);
        (old_first.state, old_first.submit) = ("REQUEUED".into(), Some(T - 600));
        let mut old_again = run(25, "agents", T + 50, Some(T + 60), 1);
        old_again.submit = Some(T + 30);
        store
            .record_runs(
                &[
                    first, second, short, no_gpus, before, after, running, old_first, old_again,
                ],
                T + 5000,
                None,
            )
            .unwrap();
        // Job 8 cancelled while it waited; job 9 still pending with 4 a100 asked for.
        let mut typed = pending(9, T + 600, None, 4);
        typed.gpus_by_type.insert("a100".into(), 4);
        typed.time_limit = Some(1800);
        store
            .record_unstarted(&[pending(8, T + 200, Some(T + 500), 4), typed], T + 5000)
            .unwrap();
        for s in [
            capacity(T - 100, 16, &[]),
            capacity(T + 1000, 12, &[]),
            capacity(T + 2000, 16, &[]),
            capacity(T + 3000, 10, &[]),
        ] {
            store.record_capacity("c", &s).unwrap();
        }
        store
    }

    fn job(trace: &Trace, id: u64) -> &TraceJob {
        trace
            .jobs
            .iter()
            .find(|j| j.id == id)
            .expect("in the trace")
    }

    #[test]
    fn a_requeued_job_is_one_job_with_its_runs() {
        let h = load(&database(), "c", T, UNTIL, 4, DEFAULT_LIMIT).unwrap();
        let j = job(&h.trace, 7);
        // Submitted at the first run's submit (T + 40), eligible at its eligible (T + 50).
        assert_eq!((j.submit, j.eligible), (T + 40, T + 50));
        assert_eq!(
            j.observed.runs,
            [(T + 100, Some(T + 700)), (T + 1000, Some(T + 2800))]
        );
        assert_eq!(j.observed.preemptions, 1);
        assert!(!j.observed.held);
        // work = the last run's elapsed, 1800 s; limit 3600 s as recorded.
        assert_eq!((j.work, j.time_limit), (1800, 3600));
        assert_eq!(
            (j.gpus, j.gpu_type.as_deref(), j.nodes),
            (2, Some("h100"), 1)
        );
        assert_eq!((j.team.as_str(), j.class.as_deref()), ("training", None));
        assert_eq!(j.cancelled_pending_at, None);
    }

    #[test]
    fn limits_classes_and_running_jobs() {
        let h = load(&database(), "c", T, UNTIL, 4, DEFAULT_LIMIT).unwrap();
        let short = job(&h.trace, 20);
        // It ran 100 s on a limit of 60 s: the limit is raised to the work.
        assert_eq!((short.work, short.time_limit), (100, 100));
        assert_eq!(
            (short.class.as_deref(), short.nodes),
            (Some("inference"), 2)
        );
        let running = job(&h.trace, 24);
        // Elapsed 120 s when last read, but it runs to the end at least: 4000 - 3500 = 500 s;
        // no limit recorded: the default, 7200 s.
        assert_eq!((running.work, running.time_limit), (500, DEFAULT_LIMIT));
        assert_eq!(running.observed.runs, [(T + 3500, None)]);
    }

    #[test]
    fn jobs_that_never_started_are_demand_for_their_time_limit() {
        let h = load(&database(), "c", T, UNTIL, 4, DEFAULT_LIMIT).unwrap();
        let cancelled = job(&h.trace, 8);
        assert_eq!(cancelled.cancelled_pending_at, Some(T + 500));
        // No limit recorded: work = time limit = the default.
        assert_eq!((cancelled.work, cancelled.time_limit), (7200, 7200));
        assert!(cancelled.observed.runs.is_empty());
        assert_eq!((cancelled.gpus, cancelled.gpu_type.as_deref()), (4, None));
        let waiting = job(&h.trace, 9);
        assert_eq!(waiting.cancelled_pending_at, None);
        assert_eq!((waiting.work, waiting.time_limit), (1800, 1800));
        assert_eq!(waiting.gpu_type.as_deref(), Some("a100"));
    }

    #[test]
    fn the_trace_holds_the_jobs_submitted_in_the_period_by_submit() {
        let h = load(&database(), "c", T, UNTIL, 4, DEFAULT_LIMIT).unwrap();
        let order: Vec<u64> = h.trace.jobs.iter().map(|j| j.id).collect();
        // Submits: 7 at +40, 8 at +200, 20 at +300, 9 at +600, 24 at +3500; 21 has no GPUs,
        // 22 and 25 were submitted before T, 23 at the period's end.
        assert_eq!(order, [7, 8, 20, 9, 24]);
        assert_eq!(
            h.summary,
            LoadSummary {
                jobs: 5,
                runs: 4, // 7 twice, 20, 24
                requeued: 1,
                never_started: 2,
                cancelled_pending: 1,
                default_time_limit: 2, // 24 and 8
                pending_arrays: 0,
                dropped_no_gpus: 1,
                dropped_no_submit: 0,
            }
        );
        assert!(h.summary.to_string().contains("1 without GPUs"));
        assert_eq!((h.trace.since, h.trace.until), (T, UNTIL));
        assert!(h.trace.source.contains(":memory:"), "{}", h.trace.source);
    }

    #[test]
    fn a_capacity_drop_drains_whole_nodes_from_the_last() {
        let h = load(&database(), "c", T, UNTIL, 4, DEFAULT_LIMIT).unwrap();
        let c = &h.trace.cluster;
        // The most, 16 GPUs: 4 nodes of 4.
        let names: Vec<&str> = c.nodes.iter().map(|n| n.name.as_str()).collect();
        assert_eq!(names, ["node001", "node002", "node003", "node004"]);
        assert!(c.nodes.iter().all(|n| n.gpus == 4 && n.gpu_type.is_none()));
        // 12 over [T + 1000, T + 2000): 4 missing, node004. 10 from T + 3000: 6 missing,
        // rounded up to 2 nodes (8 GPUs), node003 and node004 until the end.
        let drains: Vec<(&str, Secs, Secs)> = c
            .drains
            .iter()
            .map(|d| (d.node.as_str(), d.since - T, d.until - T))
            .collect();
        assert_eq!(
            drains,
            [
                ("node004", 1000, 2000),
                ("node003", 3000, 4000),
                ("node004", 3000, 4000)
            ]
        );
    }

    #[test]
    fn without_capacity_samples_the_error_says_to_give_one() {
        let mut store = Store::open_in_memory().unwrap();
        store
            .record_runs(&[run(1, "a", T + 10, Some(T + 20), 1)], T, None)
            .unwrap();
        let e = load(&store, "c", T, UNTIL, 4, DEFAULT_LIMIT).unwrap_err();
        assert!(matches!(e, HistoryError::NoCapacity { .. }), "{e}");
        assert!(e.to_string().contains("--capacity N"), "{e}");
        // With a constant capacity instead.
        let h = load_jobs(
            &store,
            "c",
            T,
            UNTIL,
            DEFAULT_LIMIT,
            constant_cluster(8, 4, None),
        )
        .unwrap();
        assert_eq!(h.trace.jobs.len(), 1);
        assert_eq!(h.trace.cluster.nodes.len(), 2);
        assert!(matches!(
            load(&store, "c", T, T, 4, DEFAULT_LIMIT),
            Err(HistoryError::EmptyPeriod { .. })
        ));
        assert!(matches!(
            load(&store, "c", T, UNTIL, 0, DEFAULT_LIMIT),
            Err(HistoryError::GpusPerNode)
        ));
    }

    #[test]
    fn a_constant_cluster_puts_the_rest_on_its_last_node() {
        // 10 GPUs by 4: 4 + 4 + 2.
        let c = constant_cluster(10, 4, Some("h100"));
        let nodes: Vec<(&str, u32)> = c.nodes.iter().map(|n| (n.name.as_str(), n.gpus)).collect();
        assert_eq!(
            nodes,
            [
                ("h100-node001", 4),
                ("h100-node002", 4),
                ("h100-node003", 2)
            ]
        );
        assert!(c
            .nodes
            .iter()
            .all(|n| n.gpu_type.as_deref() == Some("h100")));
        assert!(c.drains.is_empty());
        assert!(constant_cluster(0, 4, None).nodes.is_empty());
    }

    #[test]
    fn typed_capacity_gives_nodes_per_type() {
        // 12 GPUs of which 8 h100 (so 4 untyped), then the h100 down to 6 from 100 to 200.
        let samples = [
            capacity(0, 12, &[("h100", 8)]),
            capacity(100, 10, &[("h100", 6)]),
            capacity(200, 12, &[("h100", 8)]),
        ];
        let c = cluster_from_capacity(&samples, 50, 300, 4);
        let nodes: Vec<(&str, u32)> = c.nodes.iter().map(|n| (n.name.as_str(), n.gpus)).collect();
        assert_eq!(
            nodes,
            [("node001", 4), ("h100-node001", 4), ("h100-node002", 4)]
        );
        // 2 h100 missing: one node of 4 drained.
        assert_eq!(
            c.drains,
            [Drain {
                node: "h100-node002".into(),
                since: 100,
                until: 200
            }]
        );
    }
}
