//! `report teams`: usage, borrowing, lending and cost per team over a period, whole or day by
//! day, and its table, CSV and JSON.
//!
//! - A team is a Slurm account. Rows: every configured team and every account with GPU usage
//!   (such an account has no quota: all its usage is borrowed), then `(pool)` (what the
//!   unallocated capacity lent) and `(idle)` (the idle cost no team is charged); or only the
//!   teams named. Each row carries its figures per GPU type (`by_type`), which add up to it.
//! - A run of g GPUs over [start, end) (end = now while it runs) is allocated g x its overlap with
//!   the period. The period is counted up to now: the future has neither usage nor capacity.
//!   Its typed GPUs are of their gres type; the rest (GPUs allocated without a type) are under
//!   `default`.
//! - Only runs in the governed partitions (`[cluster] partitions`) are a team's usage. Runs
//!   elsewhere are reported apart (`outside`: jobs, GPU-hours, list price), in no other figure.
//! - `jobs` counts the runs that held GPUs during the period (a requeued job's runs count apart).
//! - The capacity is the step function `accountd run` records (`capacity_samples`); before the
//!   first sample, or without any, it is estimated ([`CapacityEstimate`]: per type, the larger
//!   of the quotas and the most GPUs in use at once), and the report says so.
//! - The split: in a typed configuration (quotas per GPU type), per type k with that type's runs,
//!   each team's Q_{T,k} and L_{T,k} and the capacity of type k; a row's figures are the sums
//!   over its types. In an untyped one, on whole GPUs against total quotas, as the governor
//!   governs them; then a team's in-quota and borrowed hours of each type are in the proportions
//!   of its GPU-seconds of that type, and what each row lent in the proportions of the types of
//!   all borrowed hours (so that per type, too, lent equals borrowed).
//! - Cost: typed GPUs at their type's rate, untyped ones and types without a rate at `default`;
//!   no rates configured, no cost. `cost` is the list price of the GPU-hours used (as before the
//!   split existed); `allocated_cost` prices borrowed hours with `borrowed_cost_factor`;
//!   `idle_cost` is the team's share of the idle capacity cost (`idle_cost_split`), each type's
//!   split apart; `total_cost` = allocated + idle, and the rows' `total_cost` add up to the
//!   capacity cost. In an untyped configuration the quota-share weights (quota hours, and the
//!   unallocated hours) are spread over the types in the proportions of their capacity.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Arc;

use serde::Serialize;
use teamshare_config::{Config, IdleCostSplit};

use crate::model::cost::{team_costs, CostReport, CostRule, TeamHours, TypedUsage, IDLE};
use crate::model::usage::{
    peak_gpus, split_usage, CapacityStep, Run, SplitTotals, TeamQuota, UsageSplit, POOL,
};
use crate::model::{find_or_push, same_str};
use crate::period::{format_local, format_rfc3339, Period, UnixSeconds};
use crate::slurm_cli::slurm_name;
use crate::store::{CapacitySample, RunUsage, Store, StoreError};

use super::render::{csv_text, json_text, CsvNumber, CsvNumbers, JsonNumbers, Numbers};
use super::table;
use super::{run_keys, Format, Rates, DEFAULT_RATE, SECONDS_PER_HOUR};

/// What the teams report needs besides the database.
#[derive(Debug, Clone, PartialEq)]
pub struct UsageParams {
    pub cluster: String,
    pub period: Period,
    /// Running jobs count up to now, and the period is counted up to now.
    pub now: UnixSeconds,
    /// Every configured team with its total quota, in file order.
    pub teams: Vec<TeamQuota>,
    /// A typed configuration ([`Config::is_typed`]): for each governed GPU type, every team with
    /// its quota Q_{T,k} and lend limit L_{T,k} of that type. Empty: an untyped configuration,
    /// whose split is on total quotas.
    pub typed_teams: BTreeMap<String, Vec<TeamQuota>>,
    /// The sum of the teams' typed quotas per GPU type (part of the capacity estimate where no
    /// capacity was recorded).
    pub quota_by_type: BTreeMap<String, u32>,
    /// The governed partitions (`[cluster] partitions`): runs in others are reported apart, as
    /// no team's quota usage. Empty: every partition is governed.
    pub partitions: Vec<String>,
    pub rates: Rates,
    pub currency: Option<String>,
    pub cost_rule: CostRule,
    /// Only these rows; empty: every row.
    pub only: Vec<String>,
}

impl UsageParams {
    /// The parameters of a report of `period` under `config`, for the rows `only` (empty: all).
    pub fn from_config(
        config: &Config,
        period: Period,
        now: UnixSeconds,
        only: Vec<String>,
    ) -> Self {
        let mut quota_by_type: BTreeMap<String, u32> = BTreeMap::new();
        for team in &config.teams {
            for (t, n) in &team.quota.by_type {
                let e = quota_by_type.entry(t.clone()).or_insert(0);
                *e = e.saturating_add(*n);
            }
        }
        // Compared as Slurm keeps names, in lower case (team names are lower case already).
        UsageParams {
            cluster: slurm_name(&config.cluster.name),
            period,
            now,
            teams: TeamQuota::all_from_config(config),
            typed_teams: TeamQuota::typed_from_config(config),
            quota_by_type,
            partitions: config.cluster.partitions.clone(),
            rates: Rates::from_config(config),
            currency: Some(config.cluster.currency.clone()).filter(|c| !c.is_empty()),
            cost_rule: CostRule::from_settings(&config.accountd),
            only: only.iter().map(|t| slurm_name(t)).collect(),
        }
    }

    fn quota_sum(&self) -> u32 {
        self.teams
            .iter()
            .fold(0u32, |sum, t| sum.saturating_add(t.quota))
    }

    /// Whether a run in `partition` is governed. sacct names one partition for a run that
    /// started; a list (`a,b`) counts as governed when one of them is.
    pub fn governs(&self, partition: &str) -> bool {
        self.partitions.is_empty()
            || partition
                .split(',')
                .any(|p| self.partitions.iter().any(|g| g == p))
    }
}

/// What a row of the teams report stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RowKind {
    /// A team of the configuration.
    Team,
    /// An account with usage that is not a team of the configuration.
    Account,
    /// `(pool)`: the unallocated capacity as a lender.
    Pool,
    /// `(idle)`: the idle capacity cost no team is charged.
    Idle,
}

/// One GPU type's part of a row of the teams report. Usage in GPU-seconds; costs None without
/// rates.
#[derive(Debug, Clone, PartialEq)]
pub struct TypeRow {
    /// The gres type; [`DEFAULT_RATE`] for GPUs allocated without a type.
    pub gpu_type: String,
    /// Q_{T,k}, the team's quota of this type, in a typed configuration; None otherwise (an
    /// untyped quota is of no type) and for rows that are not teams.
    pub quota: Option<u32>,
    /// The runs that held GPUs of this type (a run of several types counts under each).
    pub jobs: u64,
    /// Allocated GPU-seconds of this type (exact).
    pub gpu_seconds: u128,
    /// In a typed configuration, Q_{T,k} over the counted period (for `(pool)`: the capacity of
    /// this type no team has a quota on); None in an untyped one.
    pub quota_seconds: Option<f64>,
    pub in_quota_seconds: f64,
    pub borrowed_seconds: f64,
    pub lent_seconds: f64,
    /// The list price of these GPU-hours, at this type's rate.
    pub cost: Option<f64>,
    pub allocated_cost: Option<f64>,
    pub idle_cost: Option<f64>,
    pub total_cost: Option<f64>,
}

impl TypeRow {
    fn empty(gpu_type: &str, with_cost: bool) -> TypeRow {
        let zero = with_cost.then_some(0.0);
        TypeRow {
            gpu_type: gpu_type.to_string(),
            quota: None,
            jobs: 0,
            gpu_seconds: 0,
            quota_seconds: None,
            in_quota_seconds: 0.0,
            borrowed_seconds: 0.0,
            lent_seconds: 0.0,
            cost: zero,
            allocated_cost: zero,
            idle_cost: zero,
            total_cost: zero,
        }
    }

    pub fn gpu_hours(&self) -> f64 {
        self.gpu_seconds as f64 / SECONDS_PER_HOUR
    }
    pub fn quota_hours(&self) -> Option<f64> {
        self.quota_seconds.map(|s| s / SECONDS_PER_HOUR)
    }
    pub fn in_quota_hours(&self) -> f64 {
        self.in_quota_seconds / SECONDS_PER_HOUR
    }
    pub fn borrowed_hours(&self) -> f64 {
        self.borrowed_seconds / SECONDS_PER_HOUR
    }
    pub fn lent_hours(&self) -> f64 {
        self.lent_seconds / SECONDS_PER_HOUR
    }

    /// In-quota GPU-hours over quota GPU-hours, in percent: where the type has a quota.
    pub fn quota_used_percent(&self) -> Option<f64> {
        self.quota
            .and(self.quota_seconds)
            .filter(|&q| q > 0.0)
            .map(|q| 100.0 * self.in_quota_seconds / q)
    }

    /// Nothing to show: no usage, quota, lending or cost of this type.
    fn is_empty(&self) -> bool {
        let zero = |c: Option<f64>| c.is_none_or(|c| c == 0.0);
        self.gpu_seconds == 0
            && self.quota_seconds.is_none_or(|q| q == 0.0)
            && self.lent_seconds == 0.0
            && zero(self.allocated_cost)
            && zero(self.idle_cost)
    }
}

/// One row of the teams report. Usage in GPU-seconds; costs None without rates.
#[derive(Debug, Clone, PartialEq)]
pub struct TeamRow {
    pub team: String,
    pub kind: RowKind,
    pub jobs: u64,
    /// Allocated GPU-seconds (exact).
    pub gpu_seconds: u128,
    /// The quota over the counted period: Q_T x its length (for `(pool)`: the unallocated
    /// capacity, C - sum of Q where positive, integrated).
    pub quota_seconds: f64,
    pub in_quota_seconds: f64,
    pub borrowed_seconds: f64,
    pub lent_seconds: f64,
    /// None: not a team of the configuration.
    pub quota: Option<u32>,
    /// The list price of the GPU-hours used (borrowed hours at the full rate).
    pub cost: Option<f64>,
    pub allocated_cost: Option<f64>,
    pub idle_cost: Option<f64>,
    pub total_cost: Option<f64>,
    /// The same per GPU type, in the report's type order (`default` last); they add up to the
    /// row's figures (`jobs` excepted: a run of several types counts under each). Types with
    /// nothing to show are left out.
    pub by_type: Vec<TypeRow>,
}

impl TeamRow {
    pub fn gpu_hours(&self) -> f64 {
        self.gpu_seconds as f64 / SECONDS_PER_HOUR
    }
    pub fn quota_hours(&self) -> f64 {
        self.quota_seconds / SECONDS_PER_HOUR
    }
    pub fn in_quota_hours(&self) -> f64 {
        self.in_quota_seconds / SECONDS_PER_HOUR
    }
    pub fn borrowed_hours(&self) -> f64 {
        self.borrowed_seconds / SECONDS_PER_HOUR
    }
    pub fn lent_hours(&self) -> f64 {
        self.lent_seconds / SECONDS_PER_HOUR
    }

    /// A team's in-quota GPU-hours over its quota GPU-hours in the counted period, in percent;
    /// None for rows that are not teams with a quota.
    pub fn quota_used_percent(&self) -> Option<f64> {
        (self.kind == RowKind::Team && self.quota_seconds > 0.0)
            .then(|| 100.0 * self.in_quota_seconds / self.quota_seconds)
    }

    /// The row of `gpu_type`, if it has one.
    pub fn of_type(&self, gpu_type: &str) -> Option<&TypeRow> {
        self.by_type.iter().find(|t| t.gpu_type == gpu_type)
    }

    fn empty(team: &str, kind: RowKind, quota: Option<u32>, with_cost: bool) -> TeamRow {
        let zero = with_cost.then_some(0.0);
        TeamRow {
            team: team.to_string(),
            kind,
            jobs: 0,
            gpu_seconds: 0,
            quota_seconds: 0.0,
            in_quota_seconds: 0.0,
            borrowed_seconds: 0.0,
            lent_seconds: 0.0,
            quota,
            cost: zero,
            allocated_cost: zero,
            idle_cost: zero,
            total_cost: zero,
            by_type: Vec::new(),
        }
    }

    /// The type row of `gpu_type`, made empty if there is none yet.
    fn type_row(&mut self, gpu_type: &str, with_cost: bool) -> &mut TypeRow {
        let index = match self.by_type.iter().position(|t| t.gpu_type == gpu_type) {
            Some(i) => i,
            None => {
                self.by_type.push(TypeRow::empty(gpu_type, with_cost));
                self.by_type.len() - 1
            }
        };
        &mut self.by_type[index]
    }
}

/// Where the capacity of the period came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CapacitySource {
    /// Recorded samples cover the whole period.
    Samples,
    /// No sample before this instant: until then, the [`CapacityEstimate`].
    EstimateUntil(UnixSeconds),
    /// No sample at all: the [`CapacityEstimate`].
    Estimate,
}

/// The capacity taken where none was recorded (before `accountd run` sampled it). GPUs that ran
/// jobs were there, and the quotas fit in the capacity (`check-config`), so per GPU type the
/// estimate is the larger of the two: the sum of the quotas of that type, and the most GPUs of
/// that type held at once in the governed partitions over the part of the period it covers.
/// Untyped quotas (an untyped configuration) stand for GPUs of any type: typed GPUs found in use
/// beyond their typed quotas count towards them first, and the GPUs left (at least the most
/// untyped GPUs held at once) are of no type, under [`DEFAULT_RATE`].
#[derive(Debug, Clone, PartialEq)]
pub struct CapacityEstimate {
    /// The sum over types.
    pub gpus: u32,
    /// In type order, [`DEFAULT_RATE`] last.
    pub by_type: Vec<EstimatedType>,
}

/// One GPU type of a [`CapacityEstimate`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EstimatedType {
    pub gpu_type: String,
    /// The estimate.
    pub gpus: u32,
    /// The sum of the quotas of this type (for [`DEFAULT_RATE`]: of the untyped quotas).
    pub quotas: u32,
    /// The most GPUs of this type held at once.
    pub peak: u32,
}

impl CapacityEstimate {
    /// The estimate as a capacity step from `ts`.
    fn sample(&self, ts: UnixSeconds) -> CapacitySample {
        CapacitySample {
            ts,
            gpus: self.gpus,
            by_type: self
                .by_type
                .iter()
                .filter(|t| t.gpu_type != DEFAULT_RATE)
                .map(|t| (t.gpu_type.clone(), t.gpus))
                .collect(),
        }
    }

    /// The GPUs of the estimate without a type where no rate prices them (they cost nothing).
    pub fn unpriced_gpus(&self, rates: &Rates) -> u32 {
        self.by_type
            .iter()
            .filter(|t| t.gpu_type == DEFAULT_RATE && rates.get(None).is_none())
            .map(|t| t.gpus)
            .sum()
    }
}

/// The capacity of one GPU type over the counted period.
#[derive(Debug, Clone, PartialEq)]
pub struct TypeCapacity {
    pub gpu_type: String,
    /// None without rates.
    pub rate_per_hour: Option<f64>,
    /// The capacity of this type integrated over the counted period.
    pub capacity_seconds: f64,
    /// The GPU-seconds of this type allocated in the governed partitions.
    pub allocated_seconds: f64,
    pub capacity_cost: Option<f64>,
    /// `capacity_cost` - the allocated cost of this type (negative when its usage exceeds its
    /// capacity).
    pub idle_cost: Option<f64>,
}

/// The teams report of one period.
#[derive(Debug, Clone, PartialEq)]
pub struct UsageReport {
    pub cluster: String,
    /// The period asked for.
    pub period: Period,
    /// The part of it counted: up to now.
    pub counted: Period,
    pub currency: Option<String>,
    /// Teams and accounts by name, then `(pool)`, then `(idle)` (with costs only).
    pub rows: Vec<TeamRow>,
    /// GPU usage outside the governed partitions, one row per account by name (kind `Team` or
    /// `Account`, no quota): jobs, GPU-hours and their list price only. It is in no other figure
    /// of the report: not in quota, not borrowed, not in the capacity or its cost.
    pub outside: Vec<TeamRow>,
    /// The governed partitions; empty: every partition.
    pub partitions: Vec<String>,
    /// Whether the split is per GPU type (a typed configuration) or on total quotas.
    pub typed: bool,
    /// The rules the costs follow.
    pub cost_rule: CostRule,
    /// The governed capacity integrated over the counted period.
    pub capacity_gpu_seconds: f64,
    /// Every account's allocated GPU-seconds in the governed partitions (also of rows left out
    /// by a filter).
    pub allocated_gpu_seconds: f64,
    /// The price of that capacity; the sum of every row's `total_cost`.
    pub capacity_cost: Option<f64>,
    pub capacity_source: CapacitySource,
    /// The capacity taken where there are no samples; None when samples cover the period.
    pub estimate: Option<CapacityEstimate>,
    /// Per GPU type, in the report's type order (`default` last).
    pub capacity_by_type: Vec<TypeCapacity>,
    /// Borrowed GPU-seconds beyond what was lendable at the time (charged to `(pool)`).
    pub over_lendable_seconds: f64,
    /// The governed GPU-seconds allocated without a GPU type (under [`DEFAULT_RATE`]).
    pub untyped_gpu_seconds: f64,
}

impl UsageReport {
    /// The row of `team` (or of `(pool)`, `(idle)`) in the governed partitions.
    pub fn row(&self, team: &str) -> Option<&TeamRow> {
        self.rows.iter().find(|r| r.team == team)
    }

    /// The usage of `account` outside the governed partitions.
    pub fn outside_row(&self, account: &str) -> Option<&TeamRow> {
        self.outside.iter().find(|r| r.team == account)
    }

    /// The capacity of `gpu_type`.
    pub fn capacity_of(&self, gpu_type: &str) -> Option<&TypeCapacity> {
        self.capacity_by_type
            .iter()
            .find(|c| c.gpu_type == gpu_type)
    }
}

/// `[since, until)` clipped to end by `now`.
pub fn counted_period(period: Period, now: UnixSeconds) -> Period {
    Period {
        since: period.since,
        until: period.until.min(now).max(period.since),
    }
}

/// Read the runs and the capacity of the period and compute the report.
pub fn usage_report(store: &Store, params: &UsageParams) -> Result<UsageReport, StoreError> {
    let counted = counted_period(params.period, params.now);
    let runs = store.runs_overlapping(&params.cluster, counted.since, counted.until)?;
    let capacity = store.capacity_history(&params.cluster, counted.since, counted.until)?;
    Ok(compute_usage(&runs, &capacity, params))
}

/// [`usage_report`] day by day: one report per local day (in `tz`) of the counted period, each
/// with that day as its period. The runs and the capacity are read once for the whole period.
/// A run counts among the jobs of every day it held GPUs. The days' GPU-hours, splits, allocated
/// costs and capacity cost add up to the period's; each day's idle cost is split with that day's
/// weights, so a team's idle shares add up to the period's only while the weights are constant.
pub fn usage_report_by_day<Tz: chrono::TimeZone>(
    store: &Store,
    params: &UsageParams,
    tz: &Tz,
) -> Result<Vec<UsageReport>, StoreError> {
    let counted = counted_period(params.period, params.now);
    let runs = store.runs_overlapping(&params.cluster, counted.since, counted.until)?;
    let capacity = store.capacity_history(&params.cluster, counted.since, counted.until)?;
    Ok(compute_usage_by_day(&runs, &capacity, params, tz))
}

/// The arithmetic of [`usage_report_by_day`], over runs and capacity samples already read. The
/// capacity estimate, where there are no samples, is the whole period's, so that the days add
/// up to it.
pub fn compute_usage_by_day<Tz: chrono::TimeZone>(
    runs: &[RunUsage],
    capacity: &[CapacitySample],
    params: &UsageParams,
    tz: &Tz,
) -> Vec<UsageReport> {
    let counted = counted_period(params.period, params.now);
    if counted.since >= counted.until {
        return Vec::new();
    }
    let estimate = estimate_for(runs, capacity, counted, params);
    let bounds = crate::period::local_day_bounds(counted, tz);
    bounds
        .windows(2)
        .map(|day| {
            let day = Period {
                since: day[0],
                until: day[1],
            };
            let day_runs: Vec<RunUsage> = runs
                .iter()
                .filter(|r| r.start < day.until && r.end.is_none_or(|e| e > day.since))
                .cloned()
                .collect();
            // The sample in force at the day's start, then those inside it.
            let in_force = capacity.iter().rposition(|c| c.ts <= day.since);
            let day_capacity: Vec<CapacitySample> = capacity
                .iter()
                .enumerate()
                .filter(|&(i, c)| Some(i) == in_force || (c.ts > day.since && c.ts < day.until))
                .map(|(_, c)| c.clone())
                .collect();
            let day_params = UsageParams {
                period: day,
                ..params.clone()
            };
            compute_usage_with(&day_runs, &day_capacity, &day_params, estimate.as_ref())
        })
        .collect()
}

/// The estimate of the capacity where `history` has no sample in `period` (None where it
/// covers the period): over the part before the first sample.
fn estimate_for(
    runs: &[RunUsage],
    history: &[CapacitySample],
    period: Period,
    params: &UsageParams,
) -> Option<CapacityEstimate> {
    let until = match history.first() {
        None => period.until,
        Some(first) if first.ts > period.since => first.ts.min(period.until),
        Some(_) => return None,
    };
    Some(estimate_capacity(
        runs,
        params,
        Period {
            since: period.since,
            until,
        },
    ))
}

/// The [`CapacityEstimate`] over `window`.
fn estimate_capacity(runs: &[RunUsage], params: &UsageParams, window: Period) -> CapacityEstimate {
    // The runs of each GPU type in the governed partitions, for their peaks.
    let mut by_key: BTreeMap<&str, Vec<Run>> = BTreeMap::new();
    for run in runs {
        if run.gpus == 0 || !params.governs(&run.partition) {
            continue;
        }
        let end = run.end.unwrap_or(params.now);
        for (key, gpus) in run_keys(run) {
            by_key.entry(key).or_default().push(Run {
                team: run.account.clone(),
                gpus: u32::try_from(gpus).unwrap_or(u32::MAX),
                start: run.start,
                end,
            });
        }
    }
    let peak_of = |key: &str| {
        by_key.get(key).map_or(0, |runs| {
            u32::try_from(peak_gpus(runs, window)).unwrap_or(u32::MAX)
        })
    };
    let mut types: Vec<&str> = params
        .quota_by_type
        .keys()
        .map(String::as_str)
        .chain(by_key.keys().copied())
        .filter(|&k| k != DEFAULT_RATE)
        .collect();
    types.sort_unstable();
    types.dedup();
    let (mut by_type, mut beyond_quotas) = (Vec::new(), 0u32);
    for gpu_type in types {
        let quotas = params.quota_by_type.get(gpu_type).copied().unwrap_or(0);
        let peak = peak_of(gpu_type);
        let gpus = quotas.max(peak);
        beyond_quotas = beyond_quotas.saturating_add(gpus - quotas);
        by_type.push(EstimatedType {
            gpu_type: gpu_type.to_string(),
            gpus,
            quotas,
            peak,
        });
    }
    let typed_quotas = params
        .quota_by_type
        .values()
        .fold(0u32, |s, &n| s.saturating_add(n));
    let untyped_quotas = params.quota_sum().saturating_sub(typed_quotas);
    let peak = peak_of(DEFAULT_RATE);
    let gpus = peak.max(untyped_quotas.saturating_sub(beyond_quotas));
    if gpus > 0 || untyped_quotas > 0 {
        by_type.push(EstimatedType {
            gpu_type: DEFAULT_RATE.to_string(),
            gpus,
            quotas: untyped_quotas,
            peak,
        });
    }
    CapacityEstimate {
        gpus: by_type.iter().fold(0u32, |s, t| s.saturating_add(t.gpus)),
        by_type,
    }
}

/// The capacity steps of `period`: the samples, with the estimate before the first one.
fn capacity_steps(
    history: &[CapacitySample],
    period: Period,
    estimate: Option<&CapacityEstimate>,
) -> (Vec<CapacitySample>, CapacitySource) {
    let estimated = || {
        estimate.map_or(
            CapacitySample {
                ts: period.since,
                gpus: 0,
                by_type: BTreeMap::new(),
            },
            |e| e.sample(period.since),
        )
    };
    match history.first() {
        None => (vec![estimated()], CapacitySource::Estimate),
        Some(first) if first.ts > period.since => {
            let mut steps = vec![estimated()];
            steps.extend_from_slice(history);
            (steps, CapacitySource::EstimateUntil(first.ts))
        }
        Some(_) => (history.to_vec(), CapacitySource::Samples),
    }
}

/// The GPUs of `key` in a capacity sample: its typed GPUs of that type, or for [`DEFAULT_RATE`]
/// those without a type.
fn sample_gpus(sample: &CapacitySample, key: &str) -> u32 {
    if key == DEFAULT_RATE {
        let typed = sample
            .by_type
            .iter()
            .filter(|(t, _)| t.as_str() != DEFAULT_RATE)
            .fold(0u32, |s, (_, &n)| s.saturating_add(n));
        sample.gpus.saturating_sub(typed) + sample.by_type.get(DEFAULT_RATE).copied().unwrap_or(0)
    } else {
        sample.by_type.get(key).copied().unwrap_or(0)
    }
}

fn key_steps(steps: &[CapacitySample], key: &str) -> Vec<CapacityStep> {
    steps.iter().map(|s| (s.ts, sample_gpus(s, key))).collect()
}

/// The GPU-seconds of a step function over a period, as the model integrates it.
fn integrate(steps: &[CapacityStep], period: Period) -> f64 {
    split_usage(&[], &[], steps, period).totals.capacity
}

/// One account's runs: how many, their exact GPU-seconds, and the same per GPU type.
struct AccountUse<'r> {
    name: &'r str,
    jobs: u64,
    gpu_seconds: u128,
    by_key: Vec<KeyUse<'r>>,
}

struct KeyUse<'r> {
    key: &'r str,
    jobs: u64,
    gpu_seconds: u128,
}

impl<'r> AccountUse<'r> {
    fn new(name: &'r str) -> Self {
        AccountUse {
            name,
            jobs: 0,
            gpu_seconds: 0,
            by_key: Vec::new(),
        }
    }

    fn add(&mut self, key: &'r str, gpus: u64, seconds: i64) {
        let s = u128::from(gpus) * seconds as u128;
        self.gpu_seconds += s;
        match self.by_key.iter_mut().find(|k| same_str(k.key, key)) {
            Some(k) => {
                k.jobs += 1;
                k.gpu_seconds += s;
            }
            None => self.by_key.push(KeyUse {
                key,
                jobs: 1,
                gpu_seconds: s,
            }),
        }
    }

    fn of_key(&self, key: &str) -> Option<&KeyUse<'r>> {
        self.by_key.iter().find(|k| k.key == key)
    }
}

/// The arithmetic of the teams report, over runs and capacity samples already read.
pub fn compute_usage(
    runs: &[RunUsage],
    capacity: &[CapacitySample],
    params: &UsageParams,
) -> UsageReport {
    let period = counted_period(params.period, params.now);
    let estimate = estimate_for(runs, capacity, period, params);
    compute_usage_with(runs, capacity, params, estimate.as_ref())
}

fn compute_usage_with(
    runs: &[RunUsage],
    capacity: &[CapacitySample],
    params: &UsageParams,
    estimate: Option<&CapacityEstimate>,
) -> UsageReport {
    let period = counted_period(params.period, params.now);
    let with_cost = !params.rates.is_empty();
    let typed = !params.typed_teams.is_empty();
    let (steps, capacity_source) = capacity_steps(capacity, period, estimate);
    let mut tally = tally_runs(runs, params, period, typed);
    let governed = &tally.governed;
    let keys = report_keys(params, &steps, governed);
    let capacity_seconds = keys
        .iter()
        .map(|&k| integrate(&key_steps(&steps, k), period))
        .collect();
    let basis = ReportBasis {
        params,
        period,
        with_cost,
        steps: &steps,
        keys,
        capacity_seconds,
        governed,
    };

    // The split, into rows (teams and accounts by name, then the pool) with their type rows.
    let mut split_rows = SplitRows::default();
    let (priced, totals) = if typed {
        split_typed(&basis, &tally.key_runs, &mut split_rows)
    } else {
        split_untyped(&basis, &tally.total_runs, &mut split_rows)
    };
    let mut rows = split_rows.rows;
    // The pool after the teams and accounts, whichever split listed them first.
    rows.sort_by(|a, b| {
        (a.kind == RowKind::Pool, &a.team).cmp(&(b.kind == RowKind::Pool, &b.team))
    });
    add_usage_and_list_prices(&basis, &mut rows);
    let costs = with_cost.then(|| team_costs(&priced, params.cost_rule));
    if let Some(costs) = &costs {
        add_costs(&mut rows, costs);
    }
    for row in &mut rows {
        row.by_type.retain(|t| !t.is_empty());
        row.by_type.sort_by_key(|t| basis.rank(&t.gpu_type));
    }
    let capacity_by_type = capacity_by_type(&basis, costs.as_ref());
    let mut outside_rows = outside_rows(&basis, &mut tally.outside);
    if !params.only.is_empty() {
        keep_only(&mut rows, &mut outside_rows, &params.only, with_cost);
    }

    UsageReport {
        cluster: params.cluster.clone(),
        period: params.period,
        counted: period,
        currency: params.currency.clone(),
        rows,
        outside: outside_rows,
        partitions: params.partitions.clone(),
        typed,
        cost_rule: params.cost_rule,
        capacity_gpu_seconds: totals.capacity,
        allocated_gpu_seconds: totals.allocated,
        capacity_cost: costs.as_ref().map(|c| c.capacity_cost),
        capacity_source,
        estimate: estimate
            .filter(|_| capacity_source != CapacitySource::Samples)
            .cloned(),
        capacity_by_type,
        over_lendable_seconds: totals.over_lendable,
        untyped_gpu_seconds: governed
            .iter()
            .filter_map(|a| a.of_key(DEFAULT_RATE))
            .map(|k| k.gpu_seconds as f64)
            .sum(),
    }
}

/// The runs of the counted period, tallied in one pass over them.
struct PeriodRuns<'r> {
    /// Per account, in the governed partitions.
    governed: Vec<AccountUse<'r>>,
    /// Per account, outside them.
    outside: Vec<AccountUse<'r>>,
    /// An untyped configuration's split takes the governed runs on their total GPUs...
    total_runs: Vec<Run>,
    /// ...a typed one's, per GPU type.
    key_runs: Vec<(&'r str, Vec<Run>)>,
}

fn tally_runs<'r>(
    runs: &'r [RunUsage],
    params: &UsageParams,
    period: Period,
    typed: bool,
) -> PeriodRuns<'r> {
    // Few accounts, many runs (often several of one account in a row): short lists, the last
    // one tried first.
    let mut tally = PeriodRuns {
        governed: Vec::new(),
        outside: Vec::new(),
        total_runs: Vec::new(),
        key_runs: Vec::new(),
    };
    let (mut last_governed, mut last_outside, mut last_key) = (usize::MAX, usize::MAX, usize::MAX);
    // Runs share their partition's string: the last one's answer is tried first.
    let mut last_partition: Option<(&Arc<str>, bool)> = None;
    for run in runs {
        let end = run.end.unwrap_or(params.now);
        let seconds = period.overlap(run.start, end);
        if run.gpus == 0 || seconds <= 0 {
            continue;
        }
        let inside = match last_partition {
            Some((p, inside)) if Arc::ptr_eq(p, &run.partition) => inside,
            _ => {
                let inside = params.governs(&run.partition);
                last_partition = Some((&run.partition, inside));
                inside
            }
        };
        let (accounts, last) = if inside {
            (&mut tally.governed, &mut last_governed)
        } else {
            (&mut tally.outside, &mut last_outside)
        };
        let name: &str = &run.account;
        let slot = find_or_push(
            accounts,
            last,
            |a| same_str(a.name, name),
            || AccountUse::new(name),
        );
        let account = &mut accounts[slot];
        account.jobs += 1;
        let mut run_gpus = 0;
        for (key, gpus) in run_keys(run) {
            run_gpus += gpus;
            account.add(key, gpus, seconds);
            if inside && typed {
                let k = find_or_push(
                    &mut tally.key_runs,
                    &mut last_key,
                    |(k, _)| same_str(k, key),
                    || (key, Vec::new()),
                );
                tally.key_runs[k].1.push(split_run(run, gpus, end));
            }
        }
        if inside && !typed {
            tally.total_runs.push(split_run(run, run_gpus, end));
        }
    }
    tally
}

/// A run as the split takes it: `gpus` of its GPUs until `end` (now, while it runs).
fn split_run(run: &RunUsage, gpus: u64, end: UnixSeconds) -> Run {
    Run {
        team: run.account.clone(),
        gpus: u32::try_from(gpus).unwrap_or(u32::MAX),
        start: run.start,
        end,
    }
}

/// The GPU types of the report: governed ones, those with capacity, those used; `default`
/// (no type) last.
fn report_keys<'a>(
    params: &'a UsageParams,
    steps: &'a [CapacitySample],
    governed: &[AccountUse<'a>],
) -> Vec<&'a str> {
    let mut keys: Vec<&str> = params.typed_teams.keys().map(String::as_str).collect();
    for s in steps {
        keys.extend(s.by_type.keys().map(String::as_str));
        if sample_gpus(s, DEFAULT_RATE) > 0 {
            keys.push(DEFAULT_RATE);
        }
    }
    keys.extend(governed.iter().flat_map(|a| a.by_key.iter().map(|k| k.key)));
    keys.sort_unstable_by_key(|&k| (k == DEFAULT_RATE, k));
    keys.dedup();
    keys
}

/// What the phases of the report after the tally read: the parameters, the report's GPU types
/// in order with their capacity over the period, and the governed usage per account.
struct ReportBasis<'a> {
    params: &'a UsageParams,
    period: Period,
    with_cost: bool,
    steps: &'a [CapacitySample],
    keys: Vec<&'a str>,
    /// Per key, in the same order.
    capacity_seconds: Vec<f64>,
    governed: &'a [AccountUse<'a>],
}

impl<'a> ReportBasis<'a> {
    /// A type's place in the report's order (unknown ones last).
    fn rank(&self, key: &str) -> usize {
        self.keys
            .iter()
            .position(|&k| k == key)
            .unwrap_or(self.keys.len())
    }

    fn account_of(&self, name: &str) -> Option<&AccountUse<'a>> {
        self.governed.iter().find(|a| a.name == name)
    }

    fn quota_of(&self, team: &str) -> Option<u32> {
        self.params
            .teams
            .iter()
            .find(|t| t.name == team)
            .map(|t| t.quota)
    }

    fn kind_of(&self, name: &str) -> RowKind {
        if name == POOL {
            RowKind::Pool
        } else if self.quota_of(name).is_some() {
            RowKind::Team
        } else {
            RowKind::Account
        }
    }

    fn rate_of(&self, key: &str) -> f64 {
        self.params.rates.rate(Some(key))
    }
}

/// The rows the split makes, in the order it first names them, each found by its name.
#[derive(Default)]
struct SplitRows {
    rows: Vec<TeamRow>,
    index: BTreeMap<String, usize>,
}

impl SplitRows {
    /// The index of `name`'s row, made empty if there is none yet.
    fn of(&mut self, basis: &ReportBasis, name: &str) -> usize {
        let rows = &mut self.rows;
        *self.index.entry(name.to_string()).or_insert_with(|| {
            rows.push(TeamRow::empty(
                name,
                basis.kind_of(name),
                basis.quota_of(name),
                basis.with_cost,
            ));
            rows.len() - 1
        })
    }
}

/// A typed configuration's split: per GPU type, that type's runs against the teams' quotas of
/// that type and that type's capacity; each row sums its types. With the types' priced usage.
fn split_typed(
    basis: &ReportBasis,
    key_runs: &[(&str, Vec<Run>)],
    rows: &mut SplitRows,
) -> (Vec<TypedUsage>, SplitTotals) {
    let with_cost = basis.with_cost;
    let no_quota: Vec<TeamQuota> = basis
        .params
        .teams
        .iter()
        .map(|t| TeamQuota {
            name: t.name.clone(),
            quota: 0,
            lend_limit: 0,
        })
        .collect();
    let mut priced = Vec::with_capacity(basis.keys.len());
    let mut totals = SplitTotals::default();
    for (&key, &capacity) in basis.keys.iter().zip(&basis.capacity_seconds) {
        let runs = key_runs
            .iter()
            .find(|(k, _)| *k == key)
            .map_or(&[][..], |(_, r)| r);
        let teams = basis.params.typed_teams.get(key).unwrap_or(&no_quota);
        let split = split_usage(runs, teams, &key_steps(basis.steps, key), basis.period);
        debug_assert_eq!(split.totals.capacity, capacity);
        for r in &split.rows {
            let i = rows.of(basis, &r.team);
            let row = &mut rows.rows[i];
            row.quota_seconds += r.quota;
            row.in_quota_seconds += r.in_quota;
            row.borrowed_seconds += r.borrowed;
            row.lent_seconds += r.lent;
            let used = basis.account_of(&r.team).and_then(|a| a.of_key(key));
            let team_quota = teams.iter().find(|t| t.name == r.team).map(|t| t.quota);
            let kind = row.kind;
            let t = row.type_row(key, with_cost);
            t.quota = team_quota.filter(|_| kind == RowKind::Team);
            t.jobs = used.map_or(0, |u| u.jobs);
            t.gpu_seconds = used.map_or(0, |u| u.gpu_seconds);
            t.quota_seconds = Some(r.quota);
            t.in_quota_seconds = r.in_quota;
            t.borrowed_seconds = r.borrowed;
            t.lent_seconds = r.lent;
        }
        totals.capacity += split.totals.capacity;
        totals.unallocated += split.totals.unallocated;
        totals.allocated += split.totals.allocated;
        totals.over_lendable += split.totals.over_lendable;
        priced.push(TypedUsage::from_split(key, basis.rate_of(key), &split));
    }
    (priced, totals)
}

/// An untyped configuration's split: on whole GPUs against total quotas, as the governor
/// governs them, then spread over the types. With the types' priced usage.
fn split_untyped(
    basis: &ReportBasis,
    total_runs: &[Run],
    rows: &mut SplitRows,
) -> (Vec<TypedUsage>, SplitTotals) {
    let total_steps: Vec<CapacityStep> = basis.steps.iter().map(|s| (s.ts, s.gpus)).collect();
    let split = split_usage(total_runs, &basis.params.teams, &total_steps, basis.period);
    let borrowed_by_key = spread_over_types(basis, &split, rows);
    lend_by_type(basis, &borrowed_by_key, &mut rows.rows);
    let priced = untyped_prices(basis, &split, rows);
    (priced, split.totals)
}

/// Each row's split; per type, each team's in-quota and borrowed hours in the proportions of
/// its GPU-seconds of each type. The borrowed seconds per key, in the report's key order.
fn spread_over_types(basis: &ReportBasis, split: &UsageSplit, rows: &mut SplitRows) -> Vec<f64> {
    let mut borrowed_by_key = vec![0.0; basis.keys.len()];
    for r in &split.rows {
        let i = rows.of(basis, &r.team);
        let row = &mut rows.rows[i];
        row.quota_seconds = r.quota;
        row.in_quota_seconds = r.in_quota;
        row.borrowed_seconds = r.borrowed;
        row.lent_seconds = r.lent;
        let Some(used) = basis.account_of(&r.team) else {
            continue;
        };
        for k in &used.by_key {
            let share = k.gpu_seconds as f64 / used.gpu_seconds as f64;
            let t = row.type_row(k.key, basis.with_cost);
            t.jobs = k.jobs;
            t.gpu_seconds = k.gpu_seconds;
            t.in_quota_seconds = r.in_quota * share;
            t.borrowed_seconds = r.borrowed * share;
            borrowed_by_key[basis.rank(k.key)] += t.borrowed_seconds;
        }
    }
    borrowed_by_key
}

/// What each row lent, per type in the proportions of every borrowed hour's type (so that per
/// type, too, lent equals borrowed).
fn lend_by_type(basis: &ReportBasis, borrowed_by_key: &[f64], rows: &mut [TeamRow]) {
    let borrowed: f64 = borrowed_by_key.iter().sum();
    if borrowed <= 0.0 {
        return;
    }
    for row in rows.iter_mut().filter(|r| r.lent_seconds > 0.0) {
        for (&key, b) in basis.keys.iter().zip(borrowed_by_key) {
            if *b > 0.0 {
                row.type_row(key, basis.with_cost).lent_seconds = row.lent_seconds * b / borrowed;
            }
        }
    }
}

/// The untyped split priced per type: each type's capacity at its rate; the quota hours (the
/// quota-share weights) and the unallocated hours in the proportions of the capacity of each
/// type.
fn untyped_prices(basis: &ReportBasis, split: &UsageSplit, rows: &SplitRows) -> Vec<TypedUsage> {
    let keys = &basis.keys;
    let capacity_total: f64 = basis.capacity_seconds.iter().sum();
    keys.iter()
        .zip(&basis.capacity_seconds)
        .map(|(&key, &capacity)| {
            let weight = if capacity_total > 0.0 {
                capacity / capacity_total
            } else {
                1.0 / keys.len() as f64
            };
            TypedUsage {
                gpu_type: key.to_string(),
                rate_per_hour: basis.rate_of(key),
                capacity_hours: capacity / SECONDS_PER_HOUR,
                unallocated_hours: split.totals.unallocated / SECONDS_PER_HOUR * weight,
                teams: split
                    .rows
                    .iter()
                    .filter(|r| r.team != POOL)
                    .map(|r| {
                        let t = rows.rows[rows.index[&r.team]].of_type(key);
                        TeamHours {
                            team: r.team.clone(),
                            quota_hours: r.quota / SECONDS_PER_HOUR * weight,
                            in_quota_hours: t.map_or(0.0, |t| t.in_quota_hours()),
                            borrowed_hours: t.map_or(0.0, |t| t.borrowed_hours()),
                        }
                    })
                    .collect(),
            }
        })
        .collect()
}

/// The list price of `gpu_seconds` at `rate_per_hour`.
fn list_price(gpu_seconds: u128, rate_per_hour: f64) -> f64 {
    gpu_seconds as f64 * rate_per_hour / SECONDS_PER_HOUR
}

/// Jobs, exact GPU-seconds and list prices.
fn add_usage_and_list_prices(basis: &ReportBasis, rows: &mut [TeamRow]) {
    for row in rows {
        if let Some(used) = basis.account_of(&row.team) {
            row.jobs = used.jobs;
            row.gpu_seconds = used.gpu_seconds;
        }
        if basis.with_cost {
            for t in &mut row.by_type {
                t.cost = Some(list_price(t.gpu_seconds, basis.rate_of(&t.gpu_type)));
            }
            row.cost = Some(row.by_type.iter().filter_map(|t| t.cost).sum());
        }
    }
}

/// The allocated, idle and total costs of each row and its types; then the `(idle)` row.
fn add_costs(rows: &mut Vec<TeamRow>, costs: &CostReport) {
    for row in rows.iter_mut() {
        let Some(c) = costs.row(&row.team) else {
            continue;
        };
        row.allocated_cost = Some(c.allocated_cost);
        row.idle_cost = Some(c.idle_cost);
        row.total_cost = Some(c.total_cost);
        for tc in &c.by_type {
            let t = row.type_row(&tc.gpu_type, true);
            t.allocated_cost = Some(tc.allocated_cost);
            t.idle_cost = Some(tc.idle_cost);
            t.total_cost = Some(tc.total_cost);
        }
    }
    if let Some(idle) = costs.row(IDLE) {
        let mut row = TeamRow::empty(IDLE, RowKind::Idle, None, true);
        row.idle_cost = Some(idle.idle_cost);
        row.total_cost = Some(idle.total_cost);
        for tc in &idle.by_type {
            let t = row.type_row(&tc.gpu_type, true);
            t.idle_cost = Some(tc.idle_cost);
            t.total_cost = Some(tc.total_cost);
        }
        rows.push(row);
    }
}

/// Every type with capacity, usage or a quota (a rate alone makes no line).
fn capacity_by_type(basis: &ReportBasis, costs: Option<&CostReport>) -> Vec<TypeCapacity> {
    basis
        .keys
        .iter()
        .zip(&basis.capacity_seconds)
        .map(|(&key, &capacity)| {
            let totals = costs.and_then(|c| c.types.iter().find(|t| t.gpu_type == key));
            TypeCapacity {
                gpu_type: key.to_string(),
                rate_per_hour: basis.with_cost.then(|| basis.rate_of(key)),
                capacity_seconds: capacity,
                allocated_seconds: basis
                    .governed
                    .iter()
                    .filter_map(|a| a.of_key(key))
                    .map(|k| k.gpu_seconds as f64)
                    .sum(),
                capacity_cost: totals.map(|t| t.capacity_cost),
                idle_cost: totals.map(|t| t.idle_cost),
            }
        })
        .filter(|c| {
            c.capacity_seconds > 0.0
                || c.allocated_seconds > 0.0
                || basis
                    .params
                    .quota_by_type
                    .get(&c.gpu_type)
                    .is_some_and(|&q| q > 0)
        })
        .collect()
}

/// Outside the governed partitions: usage and its list price only, by account name.
fn outside_rows(basis: &ReportBasis, outside: &mut [AccountUse]) -> Vec<TeamRow> {
    let with_cost = basis.with_cost;
    outside.sort_by(|a, b| a.name.cmp(b.name));
    outside
        .iter()
        .map(|a| {
            let kind = if basis.quota_of(a.name).is_some() {
                RowKind::Team
            } else {
                RowKind::Account
            };
            let mut row = TeamRow::empty(a.name, kind, None, false);
            row.jobs = a.jobs;
            row.gpu_seconds = a.gpu_seconds;
            let mut by_type: Vec<&KeyUse> = a.by_key.iter().collect();
            by_type.sort_by_key(|k| (k.key == DEFAULT_RATE, k.key));
            for k in by_type {
                let t = row.type_row(k.key, false);
                t.jobs = k.jobs;
                t.gpu_seconds = k.gpu_seconds;
                t.cost = with_cost.then(|| list_price(k.gpu_seconds, basis.rate_of(k.key)));
            }
            row.cost = with_cost.then(|| row.by_type.iter().filter_map(|t| t.cost).sum());
            row
        })
        .collect()
}

/// Only the rows named (`--only`): an empty row for a name without one; teams and accounts
/// first, then the pool, then idle.
fn keep_only(
    rows: &mut Vec<TeamRow>,
    outside_rows: &mut Vec<TeamRow>,
    only: &[String],
    with_cost: bool,
) {
    rows.retain(|r| only.contains(&r.team));
    outside_rows.retain(|r| only.contains(&r.team));
    for name in only {
        if !rows.iter().any(|r| &r.team == name) {
            rows.push(TeamRow::empty(name, RowKind::Account, None, with_cost));
        }
    }
    let rank = |k: RowKind| match k {
        RowKind::Team | RowKind::Account => 0,
        RowKind::Pool => 1,
        RowKind::Idle => 2,
    };
    rows.sort_by(|a, b| (rank(a.kind), &a.team).cmp(&(rank(b.kind), &b.team)));
}

/// The teams report as a table, CSV or JSON. `by_type`: the table shows each row's GPU types
/// under it (CSV and JSON always carry them).
pub fn render_teams<Tz: chrono::TimeZone>(
    report: &UsageReport,
    format: Format,
    by_type: bool,
    tz: &Tz,
) -> String
where
    Tz::Offset: std::fmt::Display,
{
    match format {
        Format::Table => teams_table(report, by_type, tz),
        Format::Csv => teams_csv(&team_rows(report)),
        Format::Json => json_text(&team_rows::<JsonNumbers>(report)),
    }
}

/// The day-by-day report: a table with the date first (a run counts on every day it held GPUs,
/// so there is no total of jobs), or the rows of every day in one CSV or one JSON array (each
/// row carries its day as `since`/`until`). `by_type`: as [`render_teams`].
pub fn render_teams_by_day<Tz: chrono::TimeZone>(
    days: &[UsageReport],
    format: Format,
    by_type: bool,
    tz: &Tz,
) -> String
where
    Tz::Offset: std::fmt::Display,
{
    match format {
        Format::Table => teams_by_day_table(days, by_type, tz),
        Format::Csv => {
            let rows: Vec<TeamsRow<'_, CsvNumbers>> = days.iter().flat_map(team_rows).collect();
            teams_csv(&rows)
        }
        Format::Json => {
            let rows: Vec<TeamsRow<'_, JsonNumbers>> = days.iter().flat_map(team_rows).collect();
            json_text(&rows)
        }
    }
}

/// The TYPE cell of a row's own line in a table with types: the row stands for all of them.
pub(crate) const ALL_TYPES: &str = "all";

fn teams_by_day_table<Tz: chrono::TimeZone>(days: &[UsageReport], by_type: bool, tz: &Tz) -> String
where
    Tz::Offset: std::fmt::Display,
{
    let Some(first) = days.first() else {
        return "no days in the period\n".to_string();
    };
    let with_cost = first.capacity_cost.is_some();
    let mut header: Vec<String> = vec!["DATE".into(), "TEAM".into()];
    if by_type {
        header.push("TYPE".into());
    }
    header.extend(
        [
            "JOBS",
            "GPU-HOURS",
            "IN-QUOTA",
            "BORROWED",
            "LENT",
            "CAPACITY",
        ]
        .map(String::from),
    );
    if with_cost {
        header.push(format!("TOTAL-COST{}", currency_suffix(first)));
    }
    let mut lines: Vec<Vec<String>> = Vec::new();
    for day in days {
        push_day_lines(&mut lines, day, by_type, with_cost, tz);
    }
    let last = &days[days.len() - 1];
    let mut out = title(
        first,
        " by day",
        Period {
            since: first.period.since,
            until: last.period.until,
        },
        tz,
    );
    out.push_str(&rules(first));
    out.push_str(&table::render(&header, &lines, 1, None));
    out
}

/// One day's lines of the table by day: its rows (with `by_type`, each row's types under it);
/// the date and the day's capacity on the first line only.
fn push_day_lines<Tz: chrono::TimeZone>(
    lines: &mut Vec<Vec<String>>,
    day: &UsageReport,
    by_type: bool,
    with_cost: bool,
    tz: &Tz,
) {
    let date = tz
        .timestamp_opt(day.period.since, 0)
        .earliest()
        .map(|t| t.naive_local().date().to_string())
        .unwrap_or_default();
    let mut first_line = true;
    let mut push = |team: &str, gpu_type: Option<&str>, cells: [String; 5], cost: Option<f64>| {
        let mut v = vec![
            if first_line {
                date.clone()
            } else {
                String::new()
            },
            team.to_string(),
        ];
        if let Some(t) = gpu_type {
            v.push(t.to_string());
        }
        v.extend(cells);
        v.insert(
            v.len(),
            if first_line {
                hours(day.capacity_gpu_seconds / SECONDS_PER_HOUR)
            } else {
                String::new()
            },
        );
        if with_cost {
            v.push(money(cost));
        }
        first_line = false;
        lines.push(v);
    };
    for r in &day.rows {
        let row_cells = [
            r.jobs.to_string(),
            hours(r.gpu_hours()),
            hours(r.in_quota_hours()),
            hours(r.borrowed_hours()),
            hours(r.lent_hours()),
        ];
        push(
            &r.team,
            by_type.then_some(ALL_TYPES),
            row_cells,
            r.total_cost,
        );
        if !by_type {
            continue;
        }
        for t in &r.by_type {
            let type_cells = [
                t.jobs.to_string(),
                hours(t.gpu_hours()),
                hours(t.in_quota_hours()),
                hours(t.borrowed_hours()),
                hours(t.lent_hours()),
            ];
            push(&r.team, Some(&t.gpu_type), type_cells, t.total_cost);
        }
    }
}

/// The first line of a teams table, e.g. `GPU usage on c by day from ... (local time), GPU-hours
/// and cost`.
pub(crate) fn title<Tz: chrono::TimeZone>(
    report: &UsageReport,
    how: &str,
    period: Period,
    tz: &Tz,
) -> String
where
    Tz::Offset: std::fmt::Display,
{
    format!(
        "GPU usage on {}{how} from {} to {} (local time), GPU-hours{}\n",
        report.cluster,
        format_local(period.since, tz).replace('T', " "),
        format_local(period.until, tz).replace('T', " "),
        if report.capacity_cost.is_some() {
            " and cost"
        } else {
            ""
        }
    )
}

/// The second line of a teams table: the rules the figures follow.
pub(crate) fn rules(report: &UsageReport) -> String {
    let mut out = String::from(if report.typed {
        "rules: in quota, borrowed and lent per GPU type"
    } else {
        "rules: in quota, borrowed and lent on total quotas"
    });
    if report.capacity_cost.is_some() {
        let rule = &report.cost_rule;
        let split = match rule.idle_split {
            IdleCostSplit::QuotaShare => "quota-share\" (by quota GPU-hours)",
            IdleCostSplit::UsageShare => "usage-share\" (by GPU-hours used)",
            IdleCostSplit::IdleRow => "idle-row\" (all in the (idle) row)",
        };
        let _ = write!(
            out,
            "; idle capacity cost: idle_cost_split = \"{split}; borrowed GPU-hours: borrowed_cost_factor = {0} ({0} x rate)",
            rule.borrowed_cost_factor
        );
    }
    out.push('\n');
    out
}

/// ` (BRL)` after a cost header; empty without a currency.
fn currency_suffix(report: &UsageReport) -> String {
    report
        .currency
        .as_deref()
        .map(|c| format!(" ({c})"))
        .unwrap_or_default()
}

pub(crate) fn hours(h: f64) -> String {
    format!("{h:.4}")
}

pub(crate) fn money(c: Option<f64>) -> String {
    c.map(|c| format!("{c:.2}")).unwrap_or_default()
}

fn percent(p: Option<f64>) -> String {
    p.map(|p| format!("{p:.1}%")).unwrap_or_default()
}

/// The figures of one line of the teams table.
struct Line<'a> {
    team: &'a str,
    gpu_type: &'a str,
    jobs: u64,
    quota: Option<u64>,
    hours: [f64; 4],
    quota_used: Option<f64>,
    costs: [Option<f64>; 3],
}

fn teams_table<Tz: chrono::TimeZone>(report: &UsageReport, by_type: bool, tz: &Tz) -> String
where
    Tz::Offset: std::fmt::Display,
{
    let cells = teams_table_cells(report, by_type);
    let mut out = title(report, "", report.period, tz);
    out.push_str(&rules(report));
    out.push_str(&table::render(
        &cells.header,
        &cells.lines,
        1,
        Some(cells.total_from),
    ));
    out.push_str(&teams_notes(report, by_type, tz));
    out
}

/// The cells of the teams table, as the table and the HTML page show them.
pub(crate) struct TableCells {
    pub header: Vec<String>,
    /// The rows (with `by_type`, each row's types under it), then the totals.
    pub lines: Vec<Vec<String>>,
    /// The index in `lines` of the first total line.
    pub total_from: usize,
}

/// The header and the lines of the teams table: the rows, then the total (with `by_type`, then
/// the total of each type).
pub(crate) fn teams_table_cells(report: &UsageReport, by_type: bool) -> TableCells {
    let with_cost = report.capacity_cost.is_some();
    let mut header: Vec<String> = vec!["TEAM".into()];
    if by_type {
        header.push("TYPE".into());
    }
    header.extend(
        [
            "JOBS",
            "QUOTA",
            "GPU-HOURS",
            "IN-QUOTA",
            "BORROWED",
            "LENT",
            "QUOTA-USED",
        ]
        .map(String::from),
    );
    if with_cost {
        header.push("ALLOC-COST".into());
        header.push("IDLE-COST".into());
        header.push(format!("TOTAL-COST{}", currency_suffix(report)));
    }
    let cells = |l: Line<'_>| l.cells(by_type, with_cost);
    let mut lines: Vec<Vec<String>> = Vec::new();
    for r in &report.rows {
        lines.push(cells(Line::of_row(r)));
        if by_type {
            for t in &r.by_type {
                lines.push(cells(Line::of_type(r, t)));
            }
        }
    }
    let rule_before = lines.len();
    // The total of the rows, then with types the total of each type's lines.
    lines.push(cells(Line::total(report)));
    if by_type {
        for c in &report.capacity_by_type {
            lines.push(cells(Line::total_of_type(report, &c.gpu_type)));
        }
    }
    TableCells {
        header,
        lines,
        total_from: rule_before,
    }
}

/// The sum of the costs there are; None where there is none.
fn sum_cost(costs: impl Iterator<Item = Option<f64>>) -> Option<f64> {
    costs.flatten().reduce(|a, b| a + b)
}

impl<'a> Line<'a> {
    /// The line's cells: `by_type`, with its type; `with_cost`, with its costs.
    fn cells(self, by_type: bool, with_cost: bool) -> Vec<String> {
        let mut v = vec![self.team.to_string()];
        if by_type {
            v.push(self.gpu_type.to_string());
        }
        v.extend([
            self.jobs.to_string(),
            self.quota.map(|q| q.to_string()).unwrap_or_default(),
            hours(self.hours[0]),
            hours(self.hours[1]),
            hours(self.hours[2]),
            hours(self.hours[3]),
            percent(self.quota_used),
        ]);
        if with_cost {
            v.extend(self.costs.map(money));
        }
        v
    }

    fn of_row(r: &'a TeamRow) -> Line<'a> {
        Line {
            team: &r.team,
            gpu_type: ALL_TYPES,
            jobs: r.jobs,
            quota: r.quota.map(u64::from),
            hours: [
                r.gpu_hours(),
                r.in_quota_hours(),
                r.borrowed_hours(),
                r.lent_hours(),
            ],
            quota_used: r.quota_used_percent(),
            costs: [r.allocated_cost, r.idle_cost, r.total_cost],
        }
    }

    fn of_type(r: &'a TeamRow, t: &'a TypeRow) -> Line<'a> {
        Line {
            team: &r.team,
            gpu_type: &t.gpu_type,
            jobs: t.jobs,
            quota: t.quota.map(u64::from),
            hours: [
                t.gpu_hours(),
                t.in_quota_hours(),
                t.borrowed_hours(),
                t.lent_hours(),
            ],
            quota_used: t.quota_used_percent(),
            costs: [t.allocated_cost, t.idle_cost, t.total_cost],
        }
    }

    /// The total of the rows; QUOTA-USED over the teams' quotas only.
    fn total(report: &'a UsageReport) -> Line<'a> {
        let rows = &report.rows;
        let teams = || rows.iter().filter(|r| r.kind == RowKind::Team);
        let team_quota: f64 = teams().map(|r| r.quota_seconds).sum();
        let team_in_quota: f64 = teams().map(|r| r.in_quota_seconds).sum();
        let total_seconds: u128 = rows.iter().map(|r| r.gpu_seconds).sum();
        Line {
            team: "total",
            gpu_type: ALL_TYPES,
            jobs: rows.iter().map(|r| r.jobs).sum(),
            quota: rows
                .iter()
                .filter_map(|r| r.quota.map(u64::from))
                .reduce(|a, b| a + b),
            hours: [
                total_seconds as f64 / SECONDS_PER_HOUR,
                rows.iter().map(TeamRow::in_quota_hours).sum(),
                rows.iter().map(TeamRow::borrowed_hours).sum(),
                rows.iter().map(TeamRow::lent_hours).sum(),
            ],
            quota_used: (team_quota > 0.0).then(|| 100.0 * team_in_quota / team_quota),
            costs: [
                sum_cost(rows.iter().map(|r| r.allocated_cost)),
                sum_cost(rows.iter().map(|r| r.idle_cost)),
                sum_cost(rows.iter().map(|r| r.total_cost)),
            ],
        }
    }

    /// The total of the lines of `gpu_type`; its QUOTA and QUOTA-USED over the teams' only.
    fn total_of_type(report: &'a UsageReport, gpu_type: &'a str) -> Line<'a> {
        let of_type: Vec<(&TeamRow, &TypeRow)> = report
            .rows
            .iter()
            .filter_map(|r| r.of_type(gpu_type).map(|t| (r, t)))
            .collect();
        let team_types = || of_type.iter().filter(|(r, _)| r.kind == RowKind::Team);
        let quota: f64 = team_types().filter_map(|(_, t)| t.quota_seconds).sum();
        let in_quota: f64 = team_types().map(|(_, t)| t.in_quota_seconds).sum();
        let h = |f: fn(&TypeRow) -> f64| of_type.iter().map(|(_, t)| f(t)).sum::<f64>();
        Line {
            team: "total",
            gpu_type,
            jobs: of_type.iter().map(|(_, t)| t.jobs).sum(),
            quota: team_types()
                .filter_map(|(_, t)| t.quota.map(u64::from))
                .reduce(|a, b| a + b),
            hours: [
                h(TypeRow::gpu_hours),
                h(TypeRow::in_quota_hours),
                h(TypeRow::borrowed_hours),
                h(TypeRow::lent_hours),
            ],
            quota_used: (quota > 0.0).then(|| 100.0 * in_quota / quota),
            costs: [
                sum_cost(of_type.iter().map(|(_, t)| t.allocated_cost)),
                sum_cost(of_type.iter().map(|(_, t)| t.idle_cost)),
                sum_cost(of_type.iter().map(|(_, t)| t.total_cost)),
            ],
        }
    }
}

/// What the teams table says under it: the capacity, how it was taken, and the usage outside the
/// governed partitions.
pub(crate) fn teams_notes<Tz: chrono::TimeZone>(
    report: &UsageReport,
    by_type: bool,
    tz: &Tz,
) -> String
where
    Tz::Offset: std::fmt::Display,
{
    let currency = currency_suffix(report);
    let mut out = String::new();
    let source = match report.capacity_source {
        CapacitySource::Samples => "recorded by accountd run".to_string(),
        CapacitySource::EstimateUntil(t) => format!(
            "estimated until the first sample at {}",
            format_local(t, tz).replace('T', " ")
        ),
        CapacitySource::Estimate => "estimated: no capacity recorded".to_string(),
    };
    let _ = write!(
        out,
        "capacity: {} GPU-hours",
        hours(report.capacity_gpu_seconds / SECONDS_PER_HOUR)
    );
    if let Some(c) = report.capacity_cost {
        let _ = write!(out, " costing {}{currency}", money(Some(c)));
    }
    let _ = writeln!(out, " ({source})");
    if report.capacity_by_type.len() > 1 {
        let parts: Vec<String> = report
            .capacity_by_type
            .iter()
            .map(|c| {
                let mut s = format!(
                    "{} {}",
                    c.gpu_type,
                    hours(c.capacity_seconds / SECONDS_PER_HOUR)
                );
                if let Some(cost) = c.capacity_cost {
                    let _ = write!(s, " costing {}", money(Some(cost)));
                }
                s
            })
            .collect();
        let _ = writeln!(out, "capacity by GPU type: {}", parts.join(", "));
    }
    if let Some(estimate) = &report.estimate {
        let parts: Vec<String> = estimate
            .by_type
            .iter()
            .map(|t| {
                format!(
                    "{} {} (quotas {}, most in use at once {})",
                    t.gpu_type, t.gpus, t.quotas, t.peak
                )
            })
            .collect();
        let _ = writeln!(
            out,
            "estimated capacity, per GPU type the larger of the quotas and the most GPUs in use at once: {}",
            parts.join(", ")
        );
    }
    if report.counted.until < report.period.until {
        let _ = writeln!(
            out,
            "counted up to now, {}",
            format_local(report.counted.until, tz).replace('T', " ")
        );
    }
    if report.over_lendable_seconds > 0.0 {
        let _ = writeln!(
            out,
            "{} GPU-hours were borrowed beyond what was lendable at the time (lent by (pool))",
            hours(report.over_lendable_seconds / SECONDS_PER_HOUR)
        );
    }
    if report.typed && report.untyped_gpu_seconds > 0.0 {
        let _ = writeln!(
            out,
            "{} GPU-hours were allocated without a GPU type: they are under `{DEFAULT_RATE}`, where no team has a quota",
            hours(report.untyped_gpu_seconds / SECONDS_PER_HOUR)
        );
    }
    if !report.outside.is_empty() {
        out.push_str(&outside_table(report, by_type));
    }
    out
}

/// The usage outside the governed partitions, after the teams table.
fn outside_table(report: &UsageReport, by_type: bool) -> String {
    let with_cost = report.capacity_cost.is_some();
    let mut header: Vec<String> = vec!["TEAM".into()];
    if by_type {
        header.push("TYPE".into());
    }
    header.extend(["JOBS", "GPU-HOURS"].map(String::from));
    if with_cost {
        header.push(format!("LIST-COST{}", currency_suffix(report)));
    }
    let mut lines: Vec<Vec<String>> = Vec::new();
    let mut push = |team: &str, gpu_type: &str, jobs: u64, gpu_hours: f64, cost: Option<f64>| {
        let mut v = vec![team.to_string()];
        if by_type {
            v.push(gpu_type.to_string());
        }
        v.extend([jobs.to_string(), hours(gpu_hours)]);
        if with_cost {
            v.push(money(cost));
        }
        lines.push(v);
    };
    for r in &report.outside {
        push(&r.team, ALL_TYPES, r.jobs, r.gpu_hours(), r.cost);
        if by_type {
            for t in &r.by_type {
                push(&r.team, &t.gpu_type, t.jobs, t.gpu_hours(), t.cost);
            }
        }
    }
    let partitions = if report.partitions.is_empty() {
        "every partition".to_string()
    } else {
        report.partitions.join(", ")
    };
    format!(
        "\nGPU usage outside the governed partitions ({partitions}): no team's quota, in none of the figures above\n{}",
        table::render(&header, &lines, 1, None)
    )
}

/// The `kind` of a row in CSV and JSON.
fn kind_name(kind: RowKind, outside: bool) -> &'static str {
    match kind {
        _ if outside => "outside",
        RowKind::Team => "team",
        RowKind::Account => "account",
        RowKind::Pool => "pool",
        RowKind::Idle => "idle",
    }
}

/// A row's quota GPU-hours as CSV and JSON give them: for teams and `(pool)` (its unallocated
/// capacity).
fn row_quota_hours(r: &TeamRow, outside: bool) -> Option<f64> {
    (!outside && matches!(r.kind, RowKind::Team | RowKind::Pool)).then(|| r.quota_hours())
}

/// The digits of GPU-hours, of costs and of percentages in CSV (those of the table, percentages
/// with one more).
const HOURS: Option<usize> = Some(4);
const MONEY: Option<usize> = Some(2);
const PERCENT: Option<usize> = Some(2);

/// One row of the teams report, with its GPU types: an element of the JSON array, and the CSV
/// lines of the row and of each type ([`TeamsCsvLine`]). Keys are an interface: keep them.
///
/// The JSON nests the types under `by_type`, with keys of their own order, where CSV gives each
/// type a line of the row's columns: the two shapes cannot be one serde type, so CSV serialises
/// these rows flattened.
#[derive(Serialize)]
// Not the `N: Serialize` serde would ask for `by_type`: N::Number is what is serialised.
#[serde(bound = "")]
struct TeamsRow<'a, N: Numbers> {
    team: &'a str,
    jobs: u64,
    gpu_hours: N::Number,
    quota: Option<u32>,
    cost: Option<N::Number>,
    currency: Option<&'a str>,
    since: String,
    until: String,
    in_quota_hours: N::Number,
    borrowed_hours: N::Number,
    lent_hours: N::Number,
    allocated_cost: Option<N::Number>,
    idle_cost: Option<N::Number>,
    total_cost: Option<N::Number>,
    kind: &'static str,
    quota_gpu_hours: Option<N::Number>,
    quota_used_percent: Option<N::Number>,
    by_type: Vec<TeamsTypeRow<'a, N>>,
}

/// One GPU type of a row, in its `by_type` array. Keys are an interface: keep them.
#[derive(Serialize)]
struct TeamsTypeRow<'a, N: Numbers> {
    gpu_type: &'a str,
    rate_per_hour: Option<N::Number>,
    jobs: u64,
    quota: Option<u32>,
    quota_gpu_hours: Option<N::Number>,
    quota_used_percent: Option<N::Number>,
    gpu_hours: N::Number,
    in_quota_hours: N::Number,
    borrowed_hours: N::Number,
    lent_hours: N::Number,
    cost: Option<N::Number>,
    allocated_cost: Option<N::Number>,
    idle_cost: Option<N::Number>,
    total_cost: Option<N::Number>,
}

/// A line of the teams CSV: a row ([`TeamsRow`], `gpu_type` and `rate_per_hour` empty) or one
/// of its GPU types. The first eight columns are those of the report before the split, the next
/// six those of the split: keep their order; new columns go at the end.
#[derive(Serialize, Default, Clone, Copy)]
struct TeamsCsvLine<'r> {
    team: &'r str,
    jobs: u64,
    gpu_hours: CsvNumber,
    quota: Option<u32>,
    cost: Option<CsvNumber>,
    currency: Option<&'r str>,
    since: &'r str,
    until: &'r str,
    in_quota_hours: CsvNumber,
    borrowed_hours: CsvNumber,
    lent_hours: CsvNumber,
    allocated_cost: Option<CsvNumber>,
    idle_cost: Option<CsvNumber>,
    total_cost: Option<CsvNumber>,
    kind: &'static str,
    gpu_type: Option<&'r str>,
    rate_per_hour: Option<CsvNumber>,
    quota_gpu_hours: Option<CsvNumber>,
    quota_used_percent: Option<CsvNumber>,
}

/// The teams CSV: each row's line, then its types' lines.
fn teams_csv(rows: &[TeamsRow<'_, CsvNumbers>]) -> String {
    csv_text(rows.iter().flat_map(|r| {
        let row = TeamsCsvLine {
            team: r.team,
            jobs: r.jobs,
            gpu_hours: r.gpu_hours,
            quota: r.quota,
            cost: r.cost,
            currency: r.currency,
            since: &r.since,
            until: &r.until,
            in_quota_hours: r.in_quota_hours,
            borrowed_hours: r.borrowed_hours,
            lent_hours: r.lent_hours,
            allocated_cost: r.allocated_cost,
            idle_cost: r.idle_cost,
            total_cost: r.total_cost,
            kind: r.kind,
            gpu_type: None,
            rate_per_hour: None,
            quota_gpu_hours: r.quota_gpu_hours,
            quota_used_percent: r.quota_used_percent,
        };
        let types = r.by_type.iter().map(move |t| TeamsCsvLine {
            jobs: t.jobs,
            gpu_hours: t.gpu_hours,
            quota: t.quota,
            cost: t.cost,
            in_quota_hours: t.in_quota_hours,
            borrowed_hours: t.borrowed_hours,
            lent_hours: t.lent_hours,
            allocated_cost: t.allocated_cost,
            idle_cost: t.idle_cost,
            total_cost: t.total_cost,
            gpu_type: Some(t.gpu_type),
            rate_per_hour: t.rate_per_hour,
            quota_gpu_hours: t.quota_gpu_hours,
            quota_used_percent: t.quota_used_percent,
            ..row
        });
        std::iter::once(row).chain(types)
    }))
}

/// The rows of the teams report, then those outside the governed partitions.
fn team_rows<N: Numbers>(report: &UsageReport) -> Vec<TeamsRow<'_, N>> {
    let since = format_rfc3339(report.period.since);
    let until = format_rfc3339(report.period.until);
    let rate_of = |gpu_type: &str| report.capacity_of(gpu_type).and_then(|c| c.rate_per_hour);
    let num = |v: f64, digits| N::number(v, digits);
    let opt = |v: Option<f64>, digits| v.map(|v| N::number(v, digits));
    report
        .rows
        .iter()
        .map(|r| (r, false))
        .chain(report.outside.iter().map(|r| (r, true)))
        .map(|(r, outside)| TeamsRow {
            team: &r.team,
            jobs: r.jobs,
            gpu_hours: num(r.gpu_hours(), HOURS),
            quota: r.quota,
            cost: opt(r.cost, MONEY),
            currency: report.currency.as_deref(),
            since: since.clone(),
            until: until.clone(),
            in_quota_hours: num(r.in_quota_hours(), HOURS),
            borrowed_hours: num(r.borrowed_hours(), HOURS),
            lent_hours: num(r.lent_hours(), HOURS),
            allocated_cost: opt(r.allocated_cost, MONEY),
            idle_cost: opt(r.idle_cost, MONEY),
            total_cost: opt(r.total_cost, MONEY),
            kind: kind_name(r.kind, outside),
            quota_gpu_hours: opt(row_quota_hours(r, outside), HOURS),
            quota_used_percent: opt(r.quota_used_percent(), PERCENT),
            by_type: r
                .by_type
                .iter()
                .map(|t| TeamsTypeRow {
                    gpu_type: &t.gpu_type,
                    rate_per_hour: opt(rate_of(&t.gpu_type), None),
                    jobs: t.jobs,
                    quota: t.quota,
                    quota_gpu_hours: opt(t.quota_hours(), HOURS),
                    quota_used_percent: opt(t.quota_used_percent(), PERCENT),
                    gpu_hours: num(t.gpu_hours(), HOURS),
                    in_quota_hours: num(t.in_quota_hours(), HOURS),
                    borrowed_hours: num(t.borrowed_hours(), HOURS),
                    lent_hours: num(t.lent_hours(), HOURS),
                    cost: opt(t.cost, MONEY),
                    allocated_cost: opt(t.allocated_cost, MONEY),
                    idle_cost: opt(t.idle_cost, MONEY),
                    total_cost: opt(t.total_cost, MONEY),
                })
                .collect(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::tests::*;
    use crate::store::GpuTypes;
    use chrono::Utc;

    #[test]
    fn days_add_up_to_the_period() {
        // Three days from T0 (midnight UTC), the period ending at 60 h, now at 70 h: runs within
        // a day, across midnights, and one still running.
        let mut p = params(60, 70);
        p.period.since = T0 + 2 * H;
        let runs = vec![
            run(1, "a", 3, Some(5), 2),
            run(2, "b", 20, Some(30), 3),
            run(3, "c", 10, Some(50), 1),
            run(4, "a", 40, None, 4),
            run(5, "stray", 47, Some(49), 1),
        ];
        let capacity = vec![cap(0, 8, &[]), cap(30, 10, &[])];
        let whole = compute_usage(&runs, &capacity, &p);
        let days = compute_usage_by_day(&runs, &capacity, &p, &chrono::Utc);
        assert_eq!(days.len(), 3);
        assert_eq!(days[0].period.since, T0 + 2 * H);
        assert_eq!(days[1].period.since, T0 + 24 * H);
        assert_eq!(days[2].period.until, T0 + 60 * H);
        for day in &days {
            assert_adds_up(day);
        }
        for row in &whole.rows {
            let of_days = |f: fn(&TeamRow) -> f64| {
                days.iter()
                    .filter_map(|d| d.row(&row.team))
                    .map(f)
                    .sum::<f64>()
            };
            let seconds: u128 = days
                .iter()
                .filter_map(|d| d.row(&row.team))
                .map(|r| r.gpu_seconds)
                .sum();
            assert_eq!(seconds, row.gpu_seconds, "{}", row.team);
            assert!(close(of_days(|r| r.in_quota_seconds), row.in_quota_seconds));
            assert!(close(of_days(|r| r.borrowed_seconds), row.borrowed_seconds));
            assert!(close(of_days(|r| r.lent_seconds), row.lent_seconds));
            if row.kind != RowKind::Idle {
                assert!(close(
                    of_days(|r| r.allocated_cost.unwrap()),
                    row.allocated_cost.unwrap()
                ));
            }
        }
        // Each day's idle cost is split with that day's weights (here the unallocated capacity
        // changes at 30 h), so a team's idle shares need not add up to its share of the
        // period; the days' costs still add up to the period's capacity cost.
        let capacity_of_days: f64 = days.iter().map(|d| d.capacity_gpu_seconds).sum();
        assert!(close(capacity_of_days, whole.capacity_gpu_seconds));
        let cost_of_days: f64 = days.iter().map(|d| d.capacity_cost.unwrap()).sum();
        assert!(close(cost_of_days, whole.capacity_cost.unwrap()));
        // Day 2 ([24 h, 48 h)) has capacity 8 until 30 h, then 10: 6 x 8 + 18 x 10.
        assert!(close(
            days[1].capacity_gpu_seconds,
            ((6 * 8 + 18 * 10) * H) as f64
        ));
        // A run counts among the jobs of each day it held GPUs: c's run 3 on all three days.
        let jobs = |d: &UsageReport, t: &str| d.row(t).map_or(0, |r| r.jobs);
        assert_eq!(
            days.iter().map(|d| jobs(d, "c")).collect::<Vec<_>>(),
            [1, 1, 1]
        );
        assert_eq!(
            days.iter().map(|d| jobs(d, "a")).collect::<Vec<_>>(),
            [1, 1, 1]
        );
        assert_eq!(jobs(&days[2], "stray"), 1);
        assert!(days[0].row("stray").is_none());
    }

    #[test]
    fn the_split_and_costs_are_the_models() {
        // Hand-computed in tests/model_golden.rs: a 10/6/4 lent 3/4, b 10/9/1 lent 23/12,
        // c 5/4/1 lent 17/6, (pool) lent 1/2; capacity 52 GPU-hours.
        let r = compute_usage(&example_runs(), &example_capacity(), &params(6, 6));
        let names: Vec<&str> = r.rows.iter().map(|r| r.team.as_str()).collect();
        assert_eq!(names, ["a", "b", "c", POOL, IDLE]);
        for (team, jobs, allocated, in_quota, borrowed, lent) in [
            ("a", 2, 10.0, 6.0, 4.0, 0.75),
            ("b", 2, 10.0, 9.0, 1.0, 23.0 / 12.0),
            ("c", 2, 5.0, 4.0, 1.0, 17.0 / 6.0),
            (POOL, 0, 0.0, 0.0, 0.0, 0.5),
        ] {
            let row = r.row(team).unwrap();
            assert_eq!(row.jobs, jobs, "{team}");
            assert!(close(row.gpu_hours(), allocated), "{team}: {row:?}");
            assert!(close(row.in_quota_hours(), in_quota), "{team}: {row:?}");
            assert!(close(row.borrowed_hours(), borrowed), "{team}: {row:?}");
            assert!(close(row.lent_hours(), lent), "{team}: {row:?}");
        }
        assert!(close(r.capacity_gpu_seconds / 3600.0, 52.0));
        assert_eq!(r.capacity_source, CapacitySource::Samples);
        // Costs (model_golden): allocated a 80, b 95, c 45; capacity 520; idle 300 split by
        // quota hours a 12, b 24, c 12, unallocated 4 (to (idle)) out of 52.
        let a = r.row("a").unwrap();
        assert!(close(a.allocated_cost.unwrap(), 80.0));
        assert!(close(a.idle_cost.unwrap(), 300.0 * 12.0 / 52.0));
        assert!(close(a.cost.unwrap(), 100.0)); // list price: 10 GPU-hours at 10
        assert!(close(
            r.row(IDLE).unwrap().idle_cost.unwrap(),
            300.0 * 4.0 / 52.0
        ));
        assert!(close(r.capacity_cost.unwrap(), 520.0));
        assert_eq!(r.row(POOL).unwrap().total_cost, Some(0.0));
        assert_eq!(r.row("a").unwrap().quota, Some(2));
        assert_eq!(r.row(POOL).unwrap().quota, None);
        assert_adds_up(&r);
    }

    #[test]
    fn the_period_is_counted_up_to_now() {
        // Until 10 h but now is 6 h: the same as a period ending at 6 h.
        let later = compute_usage(&example_runs(), &example_capacity(), &params(10, 6));
        let now = compute_usage(&example_runs(), &example_capacity(), &params(6, 6));
        assert_eq!(later.rows, now.rows);
        assert_eq!(later.counted.until, T0 + 6 * H);
        assert_eq!(later.period.until, T0 + 10 * H);
        // A period wholly in the future counts nothing.
        let mut p = params(10, 6);
        p.period.since = T0 + 8 * H;
        let r = compute_usage(&example_runs(), &example_capacity(), &p);
        assert_eq!(r.capacity_gpu_seconds, 0.0);
        assert!(r.rows.iter().all(|row| row.gpu_seconds == 0));
    }

    #[test]
    fn without_samples_the_capacity_is_the_sum_of_quotas() {
        let r = compute_usage(&example_runs(), &[], &params(6, 6));
        assert_eq!(r.capacity_source, CapacitySource::Estimate);
        assert!(close(r.capacity_gpu_seconds / 3600.0, 8.0 * 6.0));
        assert_adds_up(&r);
        // Samples from 4 h on: quotas (8) before, 10 after.
        let r = compute_usage(&example_runs(), &[cap(4, 10, &[])], &params(6, 6));
        assert_eq!(r.capacity_source, CapacitySource::EstimateUntil(T0 + 4 * H));
        assert!(close(r.capacity_gpu_seconds / 3600.0, 52.0));
        assert_adds_up(&r);
    }

    #[test]
    fn a_typed_estimate_holds_the_quotas_and_what_was_in_use() {
        // Typed quotas a {h100 = 2}, b {a100 = 6}; rates h100 4, a100 2, no default. a holds 3
        // h100 in [0, 2) h (one beyond its quota, from the pool the estimate must have), b 2 a100
        // in [0, 1) h. Estimate: h100 max(2, 3) = 3, a100 max(6, 2) = 6; no untyped quota.
        let mut p = params(2, 2);
        p.teams = vec![quota("a", 2, 2), quota("b", 6, 6)];
        let zero = |name: &str| quota(name, 0, 0);
        p.typed_teams = BTreeMap::from([
            ("h100".to_string(), vec![quota("a", 2, 2), zero("b")]),
            ("a100".to_string(), vec![zero("a"), quota("b", 6, 6)]),
        ]);
        p.quota_by_type = BTreeMap::from([("h100".to_string(), 2), ("a100".to_string(), 6)]);
        p.rates = Rates::new(BTreeMap::from([
            ("h100".to_string(), 4.0),
            ("a100".to_string(), 2.0),
        ]));
        let typed = |id, team: &str, gpu_type: &str, gpus: u64, hours: i64| {
            let mut r = run(id, team, 0, Some(hours), gpus);
            r.gpus_by_type = GpuTypes::new(&BTreeMap::from([(gpu_type.to_string(), gpus)]));
            r
        };
        let runs = [typed(1, "a", "h100", 3, 2), typed(2, "b", "a100", 2, 1)];
        let r = compute_usage(&runs, &[], &p);
        assert_eq!(r.capacity_source, CapacitySource::Estimate);
        let estimate = r.estimate.as_ref().unwrap();
        let parts: Vec<(&str, u32, u32, u32)> = estimate
            .by_type
            .iter()
            .map(|t| (t.gpu_type.as_str(), t.gpus, t.quotas, t.peak))
            .collect();
        assert_eq!(parts, [("a100", 6, 6, 2), ("h100", 3, 2, 3)]);
        assert_eq!(estimate.unpriced_gpus(&p.rates), 0);
        // h100: capacity 3 x 2 h x 4 = 24; a: 2 in quota + 1 borrowed (half price) x 2 h:
        // 4 x (4 + 0.5 x 2) = 20; idle 4, never negative. The borrowed GPU came from the pool.
        let h100 = r.capacity_of("h100").unwrap();
        assert!(close(h100.capacity_cost.unwrap(), 24.0));
        assert!(close(h100.idle_cost.unwrap(), 4.0));
        assert!(close(r.row(POOL).unwrap().lent_hours(), 2.0));
        assert_eq!(r.over_lendable_seconds, 0.0);
        assert!(r.rows.iter().all(|row| row.idle_cost.unwrap() >= 0.0));
        assert_adds_up(&r);
        // A sample from 1 h on: the estimate only before it.
        let sample = cap(1, 10, &[("h100", 4), ("a100", 6)]);
        let r = compute_usage(&runs, &[sample], &p);
        assert_eq!(r.capacity_source, CapacitySource::EstimateUntil(T0 + H));
        // h100: 3 for the first hour, 4 for the second.
        assert!(close(
            r.capacity_of("h100").unwrap().capacity_seconds,
            7.0 * 3600.0
        ));
        assert_adds_up(&r);
    }

    #[test]
    fn gpu_types_are_priced_at_their_rates() {
        // One team, quota 2, on 2 h100 (70/h) and 2 untyped GPUs (10/h), for 1 h: it holds
        // 2 h100 + 1 untyped, so 2 GPU-hours in quota and 1 borrowed.
        let mut p = params(1, 1);
        p.teams = vec![quota("a", 2, 0)];
        p.rates = Rates::new(BTreeMap::from([
            (DEFAULT_RATE.to_string(), 10.0),
            ("h100".to_string(), 70.0),
        ]));
        p.cost_rule.borrowed_cost_factor = 1.0;
        let mut typed = run(1, "a", 0, Some(1), 3);
        typed.gpus_by_type = GpuTypes::new(&BTreeMap::from([("h100".to_string(), 2)]));
        let r = compute_usage(&[typed], &[cap(0, 4, &[("h100", 2)])], &p);
        let a = r.row("a").unwrap();
        assert!(close(a.cost.unwrap(), 150.0));
        // At factor 1 the allocated cost is the list price whatever the proportions.
        assert!(close(a.allocated_cost.unwrap(), 150.0));
        // Capacity: 2 x 70 + 2 x 10 = 160; idle 10, all of it untyped capacity, split by quota
        // share: a's quota 2 against the 2 unallocated GPUs of the (idle) row.
        assert!(close(r.capacity_cost.unwrap(), 160.0));
        assert!(close(a.total_cost.unwrap(), 155.0));
        assert!(close(r.row(IDLE).unwrap().total_cost.unwrap(), 5.0));
        assert_adds_up(&r);
        // Borrowed hours at half price: 1 borrowed GPU-hour at the team's mix (2/3 h100,
        // 1/3 default): 150 - 0.5 x (2/3 x 70 + 1/3 x 10) = 125.
        p.cost_rule.borrowed_cost_factor = 0.5;
        let mut typed = run(1, "a", 0, Some(1), 3);
        typed.gpus_by_type = GpuTypes::new(&BTreeMap::from([("h100".to_string(), 2)]));
        let r = compute_usage(&[typed], &[cap(0, 4, &[("h100", 2)])], &p);
        assert!(close(r.row("a").unwrap().allocated_cost.unwrap(), 125.0));
        assert_adds_up(&r);
    }

    #[test]
    fn accounts_without_quota_borrow_and_the_filter_keeps_named_rows() {
        let mut runs = example_runs();
        runs.push(run(8, "stray", 0, Some(1), 1));
        let r = compute_usage(&runs, &example_capacity(), &params(6, 6));
        let stray = r.row("stray").unwrap();
        assert_eq!(stray.kind, RowKind::Account);
        assert_eq!(stray.quota, None);
        assert!(close(stray.borrowed_hours(), 1.0));
        assert_adds_up(&r);

        let mut p = params(6, 6);
        p.only = vec!["c".into(), "nobody".into(), "a".into()];
        let r = compute_usage(&runs, &example_capacity(), &p);
        let names: Vec<&str> = r.rows.iter().map(|r| r.team.as_str()).collect();
        assert_eq!(names, ["a", "c", "nobody"]);
        assert_eq!(r.row("nobody").unwrap().gpu_seconds, 0);
        assert!(close(r.row("a").unwrap().gpu_hours(), 10.0));
    }

    #[test]
    fn without_rates_there_is_no_cost() {
        let mut p = params(6, 6);
        p.rates = Rates::default();
        let r = compute_usage(&example_runs(), &example_capacity(), &p);
        assert!(r
            .rows
            .iter()
            .all(|row| row.cost.is_none() && row.total_cost.is_none()));
        assert!(r.row(IDLE).is_none());
        assert_eq!(r.capacity_cost, None);
        let t = render_teams(&r, Format::Table, false, &Utc);
        assert!(!t.contains("COST"), "{t}");
    }

    #[test]
    fn table_has_the_rules_a_total_row_and_the_capacity() {
        let r = compute_usage(&example_runs(), &example_capacity(), &params(6, 6));
        let t = render_teams(&r, Format::Table, false, &Utc);
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(
            lines[0],
            "GPU usage on c from 2024-03-01 00:00:00 to 2024-03-01 06:00:00 (local time), GPU-hours and cost"
        );
        assert_eq!(
            lines[1],
            "rules: in quota, borrowed and lent on total quotas; idle capacity cost: idle_cost_split = \"quota-share\" (by quota GPU-hours); borrowed GPU-hours: borrowed_cost_factor = 0.5 (0.5 x rate)"
        );
        let cells = |l: &str| l.split_whitespace().map(str::to_string).collect::<Vec<_>>();
        assert_eq!(
            cells(lines[2]),
            [
                "TEAM",
                "JOBS",
                "QUOTA",
                "GPU-HOURS",
                "IN-QUOTA",
                "BORROWED",
                "LENT",
                "QUOTA-USED",
                "ALLOC-COST",
                "IDLE-COST",
                "TOTAL-COST",
                "(BRL)"
            ]
        );
        // a: 6 of its 2 x 6 = 12 quota GPU-hours used: 50 %.
        assert_eq!(
            cells(lines[3]),
            [
                "a", "2", "2", "10.0000", "6.0000", "4.0000", "0.7500", "50.0%", "80.00", "69.23",
                "149.23"
            ]
        );
        // c: 4 of 12: 33.3 %.
        assert_eq!(cells(lines[5])[7], "33.3%");
        assert_eq!(
            cells(lines[6]),
            ["(pool)", "0", "0.0000", "0.0000", "0.0000", "0.5000", "0.00", "0.00", "0.00"]
        );
        assert!(lines[8].starts_with("---"));
        // In quota 19 of the teams' 48 quota GPU-hours: 39.6 %.
        assert_eq!(
            cells(lines[9]),
            [
                "total", "6", "8", "25.0000", "19.0000", "6.0000", "6.0000", "39.6%", "220.00",
                "300.00", "520.00"
            ]
        );
        assert_eq!(
            lines[10],
            "capacity: 52.0000 GPU-hours costing 520.00 (BRL) (recorded by accountd run)"
        );
        assert_eq!(lines.len(), 11, "{t}");
        // Every table line has the header's width at most, the first row exactly.
        assert!(
            lines[3..10].iter().all(|l| l.len() <= lines[2].len()),
            "{t}"
        );
    }

    #[test]
    fn csv_keeps_the_old_columns_first_and_gives_each_type_a_line() {
        let r = compute_usage(&example_runs(), &example_capacity(), &params(6, 6));
        let c = render_teams(&r, Format::Csv, false, &Utc);
        let lines: Vec<&str> = c.lines().collect();
        assert_eq!(
            lines[0],
            "team,jobs,gpu_hours,quota,cost,currency,since,until,in_quota_hours,borrowed_hours,lent_hours,allocated_cost,idle_cost,total_cost,kind,gpu_type,rate_per_hour,quota_gpu_hours,quota_used_percent"
        );
        assert_eq!(
            lines[1],
            "a,2,10.0000,2,100.00,BRL,2024-03-01T00:00:00Z,2024-03-01T06:00:00Z,6.0000,4.0000,0.7500,80.00,69.23,149.23,team,,,12.0000,50.00"
        );
        // Untyped quotas: the type line has no quota of its own.
        assert_eq!(
            lines[2],
            "a,2,10.0000,,100.00,BRL,2024-03-01T00:00:00Z,2024-03-01T06:00:00Z,6.0000,4.0000,0.7500,80.00,69.23,149.23,team,default,10,,"
        );
        // Each of a, b, c, (pool), (idle) and its one type.
        assert_eq!(lines.len(), 11, "{c}");
        assert!(lines[7].starts_with("(pool),0,0.0000,,0.00,"), "{c}");
        assert!(lines[7].ends_with(",pool,,,4.0000,"), "{c}");
        assert!(lines[9].starts_with("(idle),"), "{c}");
        assert!(lines[10].contains(",idle,default,10,,"), "{c}");
        assert_eq!(csv_field("a,b"), "\"a,b\"");
    }

    #[test]
    fn json_has_stable_keys_and_full_precision() {
        let r = compute_usage(&example_runs(), &example_capacity(), &params(6, 6));
        let j = render_teams(&r, Format::Json, false, &Utc);
        let v: serde_json::Value = serde_json::from_str(&j).unwrap();
        let rows = v.as_array().unwrap();
        assert_eq!(rows.len(), 5);
        let keys = |o: &serde_json::Value| {
            let mut k: Vec<String> = o.as_object().unwrap().keys().cloned().collect();
            k.sort();
            k
        };
        assert_eq!(
            keys(&rows[0]),
            [
                "allocated_cost",
                "borrowed_hours",
                "by_type",
                "cost",
                "currency",
                "gpu_hours",
                "idle_cost",
                "in_quota_hours",
                "jobs",
                "kind",
                "lent_hours",
                "quota",
                "quota_gpu_hours",
                "quota_used_percent",
                "since",
                "team",
                "total_cost",
                "until"
            ]
        );
        assert_eq!(
            keys(&rows[0]["by_type"][0]),
            [
                "allocated_cost",
                "borrowed_hours",
                "cost",
                "gpu_hours",
                "gpu_type",
                "idle_cost",
                "in_quota_hours",
                "jobs",
                "lent_hours",
                "quota",
                "quota_gpu_hours",
                "quota_used_percent",
                "rate_per_hour",
                "total_cost"
            ]
        );
        assert_eq!(rows[1]["team"], "b");
        assert_eq!(rows[1]["kind"], "team");
        assert_eq!(rows[1]["lent_hours"].as_f64().unwrap(), 23.0 / 12.0);
        assert_eq!(rows[1]["quota_used_percent"].as_f64().unwrap(), 37.5);
        assert_eq!(rows[1]["by_type"][0]["gpu_type"], "default");
        assert_eq!(rows[1]["by_type"][0]["rate_per_hour"], 10.0);
        assert_eq!(rows[0]["since"], "2024-03-01T00:00:00Z");
        assert!(rows[3]["quota"].is_null());
        assert_eq!(rows[3]["kind"], "pool");
        assert_eq!(rows[4]["kind"], "idle");
        let total: f64 = rows.iter().map(|r| r["total_cost"].as_f64().unwrap()).sum();
        assert!(close(total, 520.0));
    }
}

#[cfg(test)]
mod config_tests {
    use super::*;
    use crate::report::FairshareParams;

    #[test]
    fn parameters_come_from_the_configuration_as_slurm_names() {
        let config = teamshare_config::parse(
            r#"
[cluster]
name = "GPU-Cluster"
partitions = ["gpu"]
currency = "BRL"

[gpu_types.h100]
rate_per_hour = 70.0

[gpu_types.a100]
rate_per_hour = 30.0

[[team]]
name = "agents"
quota = { h100 = 2, a100 = 1 }
weight = 1

[[team]]
name = "training"
quota = { a100 = 4 }
weight = 3

[accountd]
borrowed_cost_factor = 0.5
idle_cost_split = "idle-row"
"#,
            "teamshare.toml",
        )
        .unwrap();
        let period = Period {
            since: 0,
            until: 3600,
        };
        let p = UsageParams::from_config(&config, period, 3600, vec!["AGENTS".into()]);
        assert_eq!(p.cluster, "gpu-cluster");
        assert_eq!(p.teams[0].name, "agents");
        assert_eq!(p.teams[0].quota, 3);
        assert_eq!(p.quota_sum(), 7);
        assert_eq!(p.teams[1].quota, 4);
        assert_eq!(
            p.quota_by_type,
            BTreeMap::from([("a100".to_string(), 5), ("h100".to_string(), 2)])
        );
        // Typed: per type, every team with its quota and lend limit of that type.
        let a100: Vec<(&str, u32, u32)> = p.typed_teams["a100"]
            .iter()
            .map(|t| (t.name.as_str(), t.quota, t.lend_limit))
            .collect();
        assert_eq!(a100, [("agents", 1, 1), ("training", 4, 4)]);
        assert_eq!(p.typed_teams["h100"][1].quota, 0);
        assert_eq!(p.typed_teams.len(), 2);
        assert_eq!(p.partitions, ["gpu"]);
        assert!(p.governs("gpu") && !p.governs("debug") && p.governs("debug,gpu"));
        assert_eq!(p.only, ["agents"]);
        assert_eq!(p.cost_rule.borrowed_cost_factor, 0.5);
        assert_eq!(
            p.cost_rule.idle_split,
            teamshare_config::IdleCostSplit::IdleRow
        );
        assert_eq!(p.rates.rate(Some("a100")), 30.0);
        assert_eq!(p.rates.key(Some("l4")), DEFAULT_RATE);
        let f = FairshareParams::from_config(&config, 10 * 86_400 * 7, None, vec![]);
        assert_eq!(f.since, 0); // default half-life 7 days, ten of them
        assert_eq!(f.weights["training"], 3);
        assert_eq!(f.partitions, ["gpu"]);
        assert_eq!(f.currency.as_deref(), Some("BRL"));
        // The GPU-seconds weigh their rates; a type without one (and no default) the highest.
        assert_eq!(f.rates.usage_weight(Some("h100")), 70.0);
        assert_eq!(f.rates.usage_weight(Some("l4")), 70.0);
        assert_eq!(f.rates.usage_weight(None), 70.0);
    }
}
