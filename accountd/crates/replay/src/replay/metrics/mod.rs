//! An outcome as per-team figures, and the comparison of a candidate's against today's.
//!
//! Every figure is per team (every team of the configuration and every account with jobs in
//! the trace, by name) and for the whole cluster (the [`CLUSTER`] row, last). The definitions:
//!
//! - **Queue wait** of a job: its first start minus the instant it became eligible. A job that
//!   never started waits until its cancellation (its owner gave up) or the trace's end: such a
//!   wait is *censored* (the job would have waited at least that long) and is counted as it is,
//!   so a candidate that starves jobs shows it in the percentiles; [`Waits::censored`] says how
//!   many there were. Rejected jobs (refused at submit by the candidate) never queued: they are
//!   in no wait, only in [`TeamFigures::rejected`] with the GPU-hours they asked for, and a
//!   candidate that refuses more of a team's jobs than the baseline makes it worse off. Per priority class too: the class is the
//!   job's [`TraceJob::class`] where the configuration has that priority class, else
//!   [`NO_CLASS`].
//! - **Time to start of in-quota jobs**: for jobs whose GPUs fitted their team's unused quota
//!   while they waited ([`JobOutcome::in_quota_since`]), first start minus that instant
//!   (censored like the waits).
//! - **Owner reclaim latency**: the same measure, over the in-quota jobs whose start needed a
//!   preemption. From the outcome alone: an in-quota job of team T that waited from `q` (in quota
//!   since) to its start `s` needed a preemption when some run of another team, started as
//!   borrowed ([`SimRun::borrowed`]), ended by preemption within `[q, s]`. (Reclaim frees GPUs
//!   at the preemption; the owner's job starts at or after it.) The observed history marks no run
//!   as borrowed and no job as in quota, so "as today" has none of either.
//! - **GPU-hours**: the accounting model of DESIGN §5, exactly as `report teams` computes it
//!   ([`crate::report::compute_usage`], which feeds [`crate::model::usage::split_usage`] and
//!   [`crate::model::cost::team_costs`]): the outcome's runs are the runs, per GPU type where the
//!   configuration's quotas are typed; the outcome's capacity steps are the capacity (per type
//!   from the trace's nodes and drains). *Idle quota* is the part of a team's quota it neither
//!   used nor lent: quota - in quota - lent (at least 0). The *allocated share* is allocated
//!   GPU-hours over the capacity's GPU-hours, in percent.
//!   Where the configuration declares GPU slices (issue 30), every GPU-hours figure is in
//!   GPU-equivalents: each type's hours at its size ([`Config::gpu_equivalents`]).
//! - **Preemptions**: runs ended by preemption, the GPU-hours of work they lost
//!   ([`JobOutcome::lost_gpu_secs`]), jobs preempted more than once.
//! - **Percentiles** are nearest-rank ([`nearest_rank`]): the smallest value with at least p %
//!   of the values at or below it; always one of the values, so deterministic and exact.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use serde::Serialize;
use teamshare_config::Config;

use crate::report::{compute_usage, RowKind, TeamRow, TypeRow, UsageParams, UsageReport};
use crate::store::{CapacitySample, GpuTypes, RunUsage};

use super::{sim, Cluster, JobOutcome, Outcome, Secs, SimRun, Trace, TraceJob};

/// The row of the whole cluster.
pub const CLUSTER: &str = "(cluster)";
/// The class of a job without one the configuration knows.
pub const NO_CLASS: &str = "(none)";

/// A team is worse off when its p95 wait grows by more than the larger of this...
pub const WORSE_WAIT_SECS: Secs = 60;
/// ...and this percentage of today's p95 wait;
pub const WORSE_WAIT_PCT: f64 = 10.0;
/// or when the GPU-hours it was allocated drop by more than this percentage of today's (less
/// of its work ran in the period; in-quota hours alone would flag a team that borrowed its
/// backlog away early);
pub const WORSE_ALLOCATED_PCT: f64 = 5.0;
/// or when the GPU-hours it lost to preemptions grow by more than the larger of this...
pub const WORSE_LOST_GPU_HOURS: f64 = 1.0;
/// ...and this percentage of today's.
pub const WORSE_LOST_PCT: f64 = 10.0;

const SECONDS_PER_HOUR: f64 = 3600.0;

/// The smallest value of `sorted` (ascending) with at least `percent` % of the values at or
/// below it: the value of rank ceil(percent / 100 x n), ranks from 1. None for no values;
/// `percent` 0 gives the smallest, 100 (or more) the largest.
pub fn nearest_rank(sorted: &[Secs], percent: u32) -> Option<Secs> {
    let n = sorted.len();
    if n == 0 {
        return None;
    }
    let rank = (usize::try_from(percent).unwrap_or(usize::MAX).min(100) * n).div_ceil(100);
    Some(sorted[rank.clamp(1, n) - 1])
}

/// Waits (or times to start) of a set of jobs, in seconds.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Waits {
    /// The jobs measured.
    pub jobs: u32,
    /// Of them, those that never started (their wait runs to their cancellation or the end).
    pub censored: u32,
    pub mean_secs: Option<f64>,
    pub p50_secs: Option<Secs>,
    pub p95_secs: Option<Secs>,
    pub p99_secs: Option<Secs>,
}

impl Waits {
    /// The figures of `values` (in any order), `censored` of them censored.
    pub fn of(mut values: Vec<Secs>, censored: u32) -> Self {
        values.sort_unstable();
        let n = values.len();
        Waits {
            jobs: u32::try_from(n).unwrap_or(u32::MAX),
            censored,
            mean_secs: (n > 0).then(|| values.iter().map(|&v| v as f64).sum::<f64>() / n as f64),
            p50_secs: nearest_rank(&values, 50),
            p95_secs: nearest_rank(&values, 95),
            p99_secs: nearest_rank(&values, 99),
        }
    }
}

/// A row's cost, in the configuration's currency (DESIGN §5, as `report teams` prices it).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Cost {
    /// In-quota hours at the rate plus borrowed hours at the rate x `borrowed_cost_factor`.
    pub allocated: f64,
    /// The row's share of the idle capacity cost (`idle_cost_split`).
    pub idle: f64,
    pub total: f64,
}

/// The figures of one team, or of the cluster ([`CLUSTER`]).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct TeamFigures {
    pub team: String,
    /// Jobs of the trace.
    pub jobs: u32,
    /// Queue wait of every job that queued.
    pub wait: Waits,
    /// The same per priority class ([`NO_CLASS`] for none the configuration knows).
    pub wait_by_class: BTreeMap<String, Waits>,
    /// Time to start of in-quota jobs (from [`JobOutcome::in_quota_since`]).
    pub in_quota_start: Waits,
    /// Owner reclaim latency: [`TeamFigures::in_quota_start`] of the in-quota jobs whose start
    /// needed a preemption of another team's borrowed run.
    pub reclaim: Waits,
    /// Q_T x the period (the cluster: the sum of the quotas).
    pub quota_gpu_hours: f64,
    pub allocated_gpu_hours: f64,
    pub in_quota_gpu_hours: f64,
    pub borrowed_gpu_hours: f64,
    /// Other teams' borrowed hours on this team's idle quota (the cluster: every borrowed hour,
    /// the unallocated capacity's included).
    pub lent_gpu_hours: f64,
    /// The cluster's row only: the borrowed hours that ran on the capacity no quota owns
    /// (C - sum of Q): every borrowed hour less what the teams lent.
    pub unowned_lent_gpu_hours: f64,
    /// GPU-hours of waiting: each job's GPUs times its wait (censored waits as counted).
    pub queued_gpu_hours: f64,
    /// Quota neither used nor lent: quota - in quota - lent, at least 0.
    pub idle_quota_gpu_hours: f64,
    /// Allocated GPU-hours over the capacity's, in percent (None without capacity).
    pub allocated_share_pct: Option<f64>,
    /// None without `[gpu_types]` rates.
    pub cost: Option<Cost>,
    /// Runs ended by preemption.
    pub preemptions: u32,
    /// Work they lost, in GPU-hours.
    pub lost_gpu_hours: f64,
    /// Jobs preempted more than once.
    pub preempted_repeatedly: u32,
    /// Refused at submit by the candidate, and the GPU-hours they asked for (GPUs x the run
    /// time they needed): work the candidate never runs, in no wait.
    pub rejected: u32,
    pub rejected_gpu_hours: f64,
    /// Cancelled by their owner while they waited.
    pub cancelled: u32,
    /// Jobs whose wait the history does not record (an SWF wait of -1): in no wait figure.
    pub wait_unknown: u32,
    /// Admitted jobs that never started and were not cancelled (they waited to the end), and
    /// the GPU-hours of work they needed: work that a percentile of censored waits hides.
    pub never_started: u32,
    pub never_started_gpu_hours: f64,
    /// Where the configuration declares GPU slices (issue 30): the allocated GPU-hours of each
    /// type, each in GPU-equivalents (they add up to `allocated_gpu_hours`); empty elsewhere.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub allocated_by_type: BTreeMap<String, f64>,
}

/// The figures of one outcome: per team by name, then [`CLUSTER`].
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Figures {
    pub since: Secs,
    pub until: Secs,
    pub capacity_gpu_hours: f64,
    /// GPU-hours idle while an admitted job that fits them by count waited
    /// ([`super::idle`]).
    pub idle_while_waiting_gpu_hours: f64,
    pub currency: Option<String>,
    pub rows: Vec<TeamFigures>,
}

impl Figures {
    /// The row of `team` (or of [`CLUSTER`]).
    pub fn row(&self, team: &str) -> Option<&TeamFigures> {
        self.rows.iter().find(|r| r.team == team)
    }

    /// The cluster's row.
    pub fn cluster(&self) -> &TeamFigures {
        self.rows
            .last()
            .expect("figures always have the cluster row")
    }

    /// The teams' rows (every row but the cluster's).
    pub fn teams(&self) -> &[TeamFigures] {
        &self.rows[..self.rows.len().saturating_sub(1)]
    }
}

/// The figures of `outcome`, a replay of `trace` under `config` (see the module's doc).
pub fn figures(trace: &Trace, outcome: &Outcome, config: &Config) -> Figures {
    let mut names: BTreeSet<&str> = config.teams.iter().map(|t| t.name.as_str()).collect();
    names.extend(trace.jobs.iter().map(|j| j.team.as_str()));
    let mut rows: BTreeMap<&str, Tally> = names.iter().map(|&n| (n, Tally::default())).collect();
    let mut cluster = Tally::default();

    let reclaims = ReclaimIndex::new(trace, outcome);
    for o in &outcome.jobs {
        let Some(job) = trace.jobs.get(o.job) else {
            continue;
        };
        let class = match &job.class {
            Some(c) if config.priority_class(c).is_some() => c.as_str(),
            _ => NO_CLASS,
        };
        let worth = job
            .gpu_type
            .as_deref()
            .filter(|_| config.has_slices())
            .map_or(1.0, |k| config.gpu_equivalents(k));
        let tally = rows.entry(job.team.as_str()).or_default();
        for t in [tally, &mut cluster] {
            t.add(trace, job, o, class, &reclaims, worth);
        }
    }

    let usage = usage_of(trace, outcome, config);
    let mut out: Vec<TeamFigures> = rows
        .into_iter()
        .map(|(name, tally)| team_row(name, tally, &usage))
        .collect();

    let c = cluster_row(cluster, &out, &usage);
    out.push(c);

    Figures {
        since: trace.since,
        until: trace.until,
        capacity_gpu_hours: capacity_hours(&usage),
        idle_while_waiting_gpu_hours: super::idle::idle_while_waiting_gpu_secs(trace, outcome)
            as f64
            / SECONDS_PER_HOUR,
        currency: usage
            .currency
            .clone()
            .filter(|_| usage.capacity_cost.is_some()),
        rows: out,
    }
}

/// A team's row: its tally's figures with its usage report row's GPU-hours and cost.
fn team_row(name: &str, tally: Tally, usage: &UsageReport) -> TeamFigures {
    let mut f = tally.figures(name);
    if let Some(row) = usage
        .rows
        .iter()
        .find(|r| r.team == name && matches!(r.kind, RowKind::Team | RowKind::Account))
    {
        let eq =
            |whole: f64, of_type: fn(&TypeRow) -> f64| in_equivalents(usage, row, whole, of_type);
        f.quota_gpu_hours = eq(row.quota_hours(), |t| t.quota_hours().unwrap_or(0.0));
        f.allocated_gpu_hours = eq(row.gpu_hours(), TypeRow::gpu_hours);
        f.in_quota_gpu_hours = eq(row.in_quota_hours(), TypeRow::in_quota_hours);
        f.borrowed_gpu_hours = eq(row.borrowed_hours(), TypeRow::borrowed_hours);
        f.lent_gpu_hours = eq(row.lent_hours(), TypeRow::lent_hours);
        if !usage.gpu_equivalents.is_empty() {
            f.allocated_by_type = row
                .by_type
                .iter()
                .filter(|t| t.gpu_seconds > 0)
                .map(|t| {
                    (
                        t.gpu_type.clone(),
                        t.gpu_hours() * usage.equivalents_of(&t.gpu_type),
                    )
                })
                .collect();
        }
        f.cost = match (row.allocated_cost, row.idle_cost, row.total_cost) {
            (Some(allocated), Some(idle), Some(total)) => Some(Cost {
                allocated,
                idle,
                total,
            }),
            _ => None,
        };
    } else if usage.capacity_cost.is_some() {
        f.cost = Some(Cost::default());
    }
    f.idle_quota_gpu_hours = (f.quota_gpu_hours - f.in_quota_gpu_hours - f.lent_gpu_hours).max(0.0);
    f.allocated_share_pct = share(f.allocated_gpu_hours, usage);
    f
}

/// The cluster's row: its tally's figures with the teams' GPU-hours summed and the report's
/// capacity and cost.
fn cluster_row(cluster: Tally, teams: &[TeamFigures], usage: &UsageReport) -> TeamFigures {
    let mut c = cluster.figures(CLUSTER);
    c.quota_gpu_hours = teams.iter().map(|t| t.quota_gpu_hours).sum();
    c.allocated_gpu_hours = allocated_hours(usage);
    for t in teams {
        for (k, h) in &t.allocated_by_type {
            *c.allocated_by_type.entry(k.clone()).or_default() += h;
        }
    }
    c.in_quota_gpu_hours = teams.iter().map(|t| t.in_quota_gpu_hours).sum();
    c.borrowed_gpu_hours = teams.iter().map(|t| t.borrowed_gpu_hours).sum();
    c.lent_gpu_hours = c.borrowed_gpu_hours;
    let teams_lent: f64 = teams.iter().map(|t| t.lent_gpu_hours).sum();
    c.unowned_lent_gpu_hours = (c.borrowed_gpu_hours - teams_lent).max(0.0);
    c.idle_quota_gpu_hours = teams.iter().map(|t| t.idle_quota_gpu_hours).sum();
    c.allocated_share_pct = share(c.allocated_gpu_hours, usage);
    c.cost = usage.capacity_cost.map(|capacity| {
        let allocated: f64 = usage.rows.iter().filter_map(|r| r.allocated_cost).sum();
        Cost {
            allocated,
            idle: capacity - allocated,
            total: capacity,
        }
    });
    c
}

/// A row's figure in GPU-equivalents where some GPU type is a slice (issue 30: a slice-hour
/// is worth its size, so a family's hours add up as whole GPUs'), else as the row gives it.
fn in_equivalents(
    usage: &UsageReport,
    row: &TeamRow,
    whole: f64,
    of_type: fn(&TypeRow) -> f64,
) -> f64 {
    if usage.gpu_equivalents.is_empty() || row.by_type.is_empty() {
        return whole;
    }
    row.by_type
        .iter()
        .map(|t| of_type(t) * usage.equivalents_of(&t.gpu_type))
        .sum()
}

/// The capacity's GPU-hours, in GPU-equivalents where some type is a slice.
fn capacity_hours(usage: &UsageReport) -> f64 {
    if usage.gpu_equivalents.is_empty() {
        return usage.capacity_gpu_seconds / SECONDS_PER_HOUR;
    }
    usage
        .capacity_by_type
        .iter()
        .map(|c| c.capacity_seconds * usage.equivalents_of(&c.gpu_type))
        .sum::<f64>()
        / SECONDS_PER_HOUR
}

/// Every account's allocated GPU-hours, in GPU-equivalents where some type is a slice.
fn allocated_hours(usage: &UsageReport) -> f64 {
    if usage.gpu_equivalents.is_empty() {
        return usage.allocated_gpu_seconds / SECONDS_PER_HOUR;
    }
    usage
        .capacity_by_type
        .iter()
        .map(|c| c.allocated_seconds * usage.equivalents_of(&c.gpu_type))
        .sum::<f64>()
        / SECONDS_PER_HOUR
}

fn share(hours: f64, usage: &UsageReport) -> Option<f64> {
    let capacity = capacity_hours(usage);
    (capacity > 0.0).then(|| 100.0 * hours / capacity)
}

/// The teams report of the outcome: its runs as the runs (in the governed partitions), its
/// capacity steps as the capacity samples.
fn usage_of(trace: &Trace, outcome: &Outcome, config: &Config) -> UsageReport {
    let partition: Arc<str> = config
        .cluster
        .partitions
        .first()
        .map_or_else(|| Arc::from(""), |p| Arc::from(p.as_str()));
    let mut accounts: BTreeMap<&str, Arc<str>> = BTreeMap::new();
    let mut runs = Vec::new();
    for o in &outcome.jobs {
        let Some(job) = trace.jobs.get(o.job) else {
            continue;
        };
        if job.gpus == 0 {
            continue;
        }
        let account = accounts
            .entry(job.team.as_str())
            .or_insert_with(|| Arc::from(job.team.as_str()))
            .clone();
        let by_type = job
            .gpu_type
            .as_ref()
            .map(|t| BTreeMap::from([(t.clone(), u64::from(job.gpus))]))
            .unwrap_or_default();
        let gpus_by_type = GpuTypes::new(&by_type);
        for r in &o.runs {
            runs.push(RunUsage {
                id: i64::try_from(o.job).unwrap_or(i64::MAX),
                account: account.clone(),
                partition: partition.clone(),
                start: r.start,
                end: Some(r.end.max(r.start)),
                gpus: u64::from(job.gpus),
                gpus_by_type: gpus_by_type.clone(),
            });
        }
    }
    let period = crate::period::Period {
        since: trace.since,
        until: trace.until,
    };
    let params = UsageParams::from_config(config, period, trace.until, Vec::new());
    compute_usage(&runs, &capacity_samples(trace, outcome), &params)
}

/// The outcome's capacity steps as samples, each with the GPUs per type of the trace's nodes
/// not drained at that instant (none where the nodes are untyped).
fn capacity_samples(trace: &Trace, outcome: &Outcome) -> Vec<CapacitySample> {
    let mut typed: BTreeMap<&str, Vec<(Secs, u32)>> = BTreeMap::new();
    let types: BTreeSet<&str> = trace
        .cluster
        .nodes
        .iter()
        .filter_map(|n| n.gpu_type.as_deref())
        .collect();
    for t in types {
        let nodes: Vec<_> = trace
            .cluster
            .nodes
            .iter()
            .filter(|n| n.gpu_type.as_deref() == Some(t))
            .cloned()
            .collect();
        let drains = trace
            .cluster
            .drains
            .iter()
            .filter(|d| nodes.iter().any(|n| n.name == d.node))
            .cloned()
            .collect();
        let total = nodes.iter().map(|n| n.gpus).sum();
        let sub = Cluster { nodes, drains };
        typed.insert(t, sim::capacity_steps(&sub, trace.since, total));
    }
    let mut instants: BTreeSet<Secs> = outcome.capacity.iter().map(|s| s.0).collect();
    if !outcome.capacity.is_empty() {
        instants.extend(typed.values().flatten().map(|s| s.0));
    }
    instants
        .into_iter()
        .map(|ts| CapacitySample {
            ts,
            gpus: step_at(&outcome.capacity, ts),
            by_type: typed
                .iter()
                .map(|(t, steps)| (t.to_string(), step_at(steps, ts)))
                .collect(),
        })
        .collect()
}

/// The value of the step function `steps` at `t` (the first step's before it).
fn step_at(steps: &[(Secs, u32)], t: Secs) -> u32 {
    steps
        .iter()
        .filter(|s| s.0 <= t)
        .max_by_key(|s| s.0)
        .or_else(|| steps.iter().min_by_key(|s| s.0))
        .map_or(0, |s| s.1)
}

/// The ends of runs started as borrowed and ended by preemption, per team, sorted.
struct ReclaimIndex<'t> {
    by_team: BTreeMap<&'t str, Vec<Secs>>,
}

impl<'t> ReclaimIndex<'t> {
    fn new(trace: &'t Trace, outcome: &Outcome) -> Self {
        let mut by_team: BTreeMap<&str, Vec<Secs>> = BTreeMap::new();
        for o in &outcome.jobs {
            let Some(job) = trace.jobs.get(o.job) else {
                continue;
            };
            for r in o.runs.iter().filter(|r| r.borrowed && r.preempted) {
                by_team.entry(job.team.as_str()).or_default().push(r.end);
            }
        }
        for ends in by_team.values_mut() {
            ends.sort_unstable();
        }
        ReclaimIndex { by_team }
    }

    /// Whether a team other than `team` had a borrowed run preempted within `[from, to]`.
    fn preempted_for(&self, team: &str, from: Secs, to: Secs) -> bool {
        self.by_team.iter().any(|(t, ends)| {
            *t != team && {
                let i = ends.partition_point(|&e| e < from);
                ends.get(i).is_some_and(|&e| e <= to)
            }
        })
    }
}

/// A row's job figures as they are summed up.
#[derive(Default)]
struct Tally {
    jobs: u32,
    waits: Vec<Secs>,
    censored: u32,
    by_class: BTreeMap<String, (Vec<Secs>, u32)>,
    in_quota: Vec<Secs>,
    in_quota_censored: u32,
    reclaim: Vec<Secs>,
    preemptions: u32,
    lost_gpu_secs: f64,
    repeatedly: u32,
    rejected: u32,
    rejected_gpu_secs: f64,
    cancelled: u32,
    wait_unknown: u32,
    never_started: u32,
    never_started_gpu_secs: f64,
    queued_gpu_secs: f64,
}

impl Tally {
    fn add(
        &mut self,
        trace: &Trace,
        job: &TraceJob,
        o: &JobOutcome,
        class: &str,
        reclaims: &ReclaimIndex,
        worth: f64,
    ) {
        self.jobs += 1;
        // GPU-seconds in GPU-equivalents: a slice's at its size (1 for whole GPUs).
        let gpus = f64::from(job.gpus) * worth;
        let preemptions = o.preemptions();
        self.preemptions += preemptions;
        self.repeatedly += u32::from(preemptions > 1);
        self.lost_gpu_secs += o.lost_gpu_secs as f64 * worth;
        self.cancelled += u32::from(o.cancelled);
        if o.rejected {
            self.rejected += 1;
            self.rejected_gpu_secs += gpus * job.work as f64;
            return;
        }
        if o.wait_unknown {
            self.wait_unknown += 1;
            return;
        }
        let start = o.first_start();
        // Until its start, else its cancellation, else the trace's end.
        let waited_until = start.unwrap_or_else(|| {
            job.cancelled_pending_at
                .filter(|_| o.cancelled)
                .unwrap_or(trace.until)
                .min(trace.until)
        });
        let censored = u32::from(start.is_none());
        if start.is_none() && !o.cancelled {
            self.never_started += 1;
            self.never_started_gpu_secs += gpus * job.work as f64;
        }
        let wait = (waited_until - job.eligible).max(0);
        self.queued_gpu_secs += wait as f64 * gpus;
        self.waits.push(wait);
        self.censored += censored;
        let c = self.by_class.entry(class.to_string()).or_default();
        c.0.push(wait);
        c.1 += censored;
        if let Some(q) = o.in_quota_since {
            let t = (waited_until - q).max(0);
            self.in_quota.push(t);
            self.in_quota_censored += censored;
            if let Some(s) = start {
                if reclaims.preempted_for(&job.team, q, s) {
                    self.reclaim.push(t);
                }
            }
        }
    }

    fn figures(self, team: &str) -> TeamFigures {
        TeamFigures {
            team: team.to_string(),
            jobs: self.jobs,
            wait: Waits::of(self.waits, self.censored),
            wait_by_class: self
                .by_class
                .into_iter()
                .map(|(c, (w, n))| (c, Waits::of(w, n)))
                .collect(),
            in_quota_start: Waits::of(self.in_quota, self.in_quota_censored),
            reclaim: Waits::of(self.reclaim, 0),
            preemptions: self.preemptions,
            lost_gpu_hours: self.lost_gpu_secs / SECONDS_PER_HOUR,
            preempted_repeatedly: self.repeatedly,
            rejected: self.rejected,
            rejected_gpu_hours: self.rejected_gpu_secs / SECONDS_PER_HOUR,
            cancelled: self.cancelled,
            wait_unknown: self.wait_unknown,
            never_started: self.never_started,
            never_started_gpu_hours: self.never_started_gpu_secs / SECONDS_PER_HOUR,
            queued_gpu_hours: self.queued_gpu_secs / SECONDS_PER_HOUR,
            ..TeamFigures::default()
        }
    }
}

/// What makes a team worse off under a candidate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum WorseMeasure {
    /// Its p95 wait grew by more than max([`WORSE_WAIT_SECS`], [`WORSE_WAIT_PCT`] %).
    P95Wait,
    /// Its allocated GPU-hours dropped by more than [`WORSE_ALLOCATED_PCT`] %.
    AllocatedGpuHours,
    /// Its GPU-hours lost to preemptions grew by more than max([`WORSE_LOST_GPU_HOURS`],
    /// [`WORSE_LOST_PCT`] %).
    LostGpuHours,
    /// The candidate refuses more of its jobs at submit (their work never runs, and they are
    /// in no wait: without this a silo that refuses most of a team's jobs would read as
    /// short waits).
    Rejected,
    /// More of its admitted jobs never start (they wait to the end: their censored waits can
    /// hide in a percentile).
    NeverStarted,
}

/// A team worse off under a candidate than today, and why.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WorseOff {
    pub team: String,
    pub measure: WorseMeasure,
    pub today: f64,
    pub candidate: f64,
    /// One line: the measure, today's value and the candidate's.
    pub reason: String,
}

/// The teams worse off under `candidate` than under `today` (the cluster row is no team), one
/// entry per team and measure, by team then measure. A team `today` does not have is compared
/// with nothing and is not listed.
pub fn worse_off(today: &Figures, candidate: &Figures) -> Vec<WorseOff> {
    let mut out = Vec::new();
    for c in candidate.teams() {
        let Some(t) = today.row(&c.team).filter(|t| t.team != CLUSTER) else {
            continue;
        };
        if let (Some(before), Some(after)) = (t.wait.p95_secs, c.wait.p95_secs) {
            let allowed = (WORSE_WAIT_SECS as f64).max(before as f64 * WORSE_WAIT_PCT / 100.0);
            if (after - before) as f64 > allowed {
                out.push(WorseOff {
                    team: c.team.clone(),
                    measure: WorseMeasure::P95Wait,
                    today: before as f64,
                    candidate: after as f64,
                    reason: format!(
                        "p95 wait {} instead of {} (more than {} longer)",
                        duration(after),
                        duration(before),
                        duration(allowed.round() as Secs)
                    ),
                });
            }
        }
        let (before, after) = (t.allocated_gpu_hours, c.allocated_gpu_hours);
        if before > 0.0 && before - after > before * WORSE_ALLOCATED_PCT / 100.0 {
            out.push(WorseOff {
                team: c.team.clone(),
                measure: WorseMeasure::AllocatedGpuHours,
                today: before,
                candidate: after,
                reason: format!(
                    "{after:.1} GPU-hours allocated instead of {before:.1} ({:.1} % fewer)",
                    100.0 * (before - after) / before
                ),
            });
        }
        let (before, after) = (t.lost_gpu_hours, c.lost_gpu_hours);
        if after - before > WORSE_LOST_GPU_HOURS.max(before * WORSE_LOST_PCT / 100.0) {
            out.push(WorseOff {
                team: c.team.clone(),
                measure: WorseMeasure::LostGpuHours,
                today: before,
                candidate: after,
                reason: format!(
                    "{after:.1} GPU-hours lost to preemptions instead of {before:.1} ({} preemptions instead of {})",
                    c.preemptions, t.preemptions
                ),
            });
        }
        if c.rejected > t.rejected {
            out.push(WorseOff {
                team: c.team.clone(),
                measure: WorseMeasure::Rejected,
                today: f64::from(t.rejected),
                candidate: f64::from(c.rejected),
                reason: format!(
                    "{} jobs ({:.1} GPU-hours) refused at submit instead of {}",
                    c.rejected, c.rejected_gpu_hours, t.rejected
                ),
            });
        }
        if c.never_started > t.never_started {
            out.push(WorseOff {
                team: c.team.clone(),
                measure: WorseMeasure::NeverStarted,
                today: f64::from(t.never_started),
                candidate: f64::from(c.never_started),
                reason: format!(
                    "{} admitted jobs ({:.1} GPU-hours of work) never started instead of {}",
                    c.never_started, c.never_started_gpu_hours, t.never_started
                ),
            });
        }
    }
    out
}

/// A duration as the reports show it: `45s`, `14m 03s`, `2h 05m`, `3d 04h`.
pub fn duration(secs: Secs) -> String {
    let (sign, s) = if secs < 0 { ("-", -secs) } else { ("", secs) };
    let text = match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m {:02}s", s / 60, s % 60),
        3600..86_400 => format!("{}h {:02}m", s / 3600, s % 3600 / 60),
        _ => format!("{}d {:02}h", s / 86_400, s % 86_400 / 3600),
    };
    format!("{sign}{text}")
}

/// A job's run `[start, end)` (test helper and for callers building outcomes by hand).
pub fn run(start: Secs, end: Secs, preempted: bool, borrowed: bool) -> SimRun {
    SimRun {
        start,
        end,
        preempted,
        borrowed,
    }
}

#[cfg(test)]
pub(crate) mod tests;
