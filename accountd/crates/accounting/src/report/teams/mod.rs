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

mod capacity;
mod compute;
#[cfg(test)]
mod config_tests;
mod cost;
mod export;
mod family_split;
mod notes;
mod split;
#[cfg(test)]
mod tests;
mod text;

use std::collections::BTreeMap;

use teamshare_config::Config;

use crate::model::cost::CostRule;
use crate::model::family::FamilyQuotas;
use crate::model::usage::TeamQuota;
use crate::period::{Period, UnixSeconds};
use crate::slurm_cli::slurm_name;
use crate::store::{CapacitySample, Store, StoreError};

use super::render::{json_text, CsvNumbers, JsonNumbers};
use super::{Format, Rates, DEFAULT_RATE, SECONDS_PER_HOUR};
use export::{team_rows, teams_csv, TeamsRow};
use text::{teams_by_day_table, teams_table};

pub use compute::{compute_usage, compute_usage_by_day};
pub(crate) use notes::teams_notes;
pub(crate) use text::{hours, money, rules, teams_table_cells, title, ALL_TYPES};

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
    /// The GPU families some team counts in GPU-equivalents: each is split as one pool, in
    /// units ([`FamilyQuotas`]); its member types' entries of `typed_teams` are not used.
    pub families: Vec<FamilyQuotas>,
    /// The sum of the teams' typed quotas per GPU type (part of the capacity estimate where no
    /// capacity was recorded).
    pub quota_by_type: BTreeMap<String, u32>,
    /// The governed partitions (`[cluster] partitions`): runs in others are reported apart, as
    /// no team's quota usage. Empty: every partition is governed.
    pub partitions: Vec<String>,
    pub rates: Rates,
    /// What one GPU of each slice type is worth in whole GPUs ([`Config::gpu_equivalents`]);
    /// a type not here is a whole GPU. Empty: no slices.
    pub gpu_equivalents: BTreeMap<String, f64>,
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
            families: FamilyQuotas::all_from_config(config),
            quota_by_type,
            partitions: config.cluster.partitions.clone(),
            rates: Rates::from_config(config),
            gpu_equivalents: config
                .gpu_types
                .iter()
                .filter(|(_, t)| t.slice.is_some())
                .map(|(name, _)| (name.clone(), config.gpu_equivalents(name)))
                .collect(),
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
    /// The slice types' worth in whole GPUs ([`UsageParams::gpu_equivalents`]).
    pub gpu_equivalents: BTreeMap<String, f64>,
}

impl UsageReport {
    /// What one GPU of `gpu_type` is worth in whole GPUs: a slice's size, else 1.
    pub fn equivalents_of(&self, gpu_type: &str) -> f64 {
        self.gpu_equivalents.get(gpu_type).copied().unwrap_or(1.0)
    }

    /// A row's GPU-hours in GPU-equivalents: each type's hours times its worth.
    pub fn equivalent_hours(&self, r: &TeamRow) -> f64 {
        r.by_type
            .iter()
            .map(|t| t.gpu_hours() * self.equivalents_of(&t.gpu_type))
            .sum()
    }

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
    let mut runs = store.runs_overlapping(&params.cluster, counted.since, counted.until)?;
    super::count_shards(&mut runs, &params.rates);
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
    let mut runs = store.runs_overlapping(&params.cluster, counted.since, counted.until)?;
    super::count_shards(&mut runs, &params.rates);
    let capacity = store.capacity_history(&params.cluster, counted.since, counted.until)?;
    Ok(compute_usage_by_day(&runs, &capacity, params, tz))
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
