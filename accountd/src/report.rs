//! Reports over a period: the per-team accounting of DESIGN 5 (`report teams`), the fair-share
//! figures (`report fairshare`), and their renderings (table, CSV, JSON).
//!
//! The arithmetic is the model's (`crate::model`): the in-quota / borrowed / lent split
//! (`usage::split_usage`), the costs (`cost::team_costs`), the fair-share factor
//! (`fairshare`). This module reads the database, turns it into the model's inputs, and renders.
//!
//! - A team is a Slurm account. Rows: every configured team and every account with GPU usage
//!   (such an account has no quota: all its usage is borrowed), then `(pool)` (what the
//!   unallocated capacity lent) and `(idle)` (the idle cost no team is charged); or only the
//!   teams named.
//! - A run of g GPUs over [start, end) (end = now while it runs) is allocated g x its overlap with
//!   the period. The period is counted up to now: the future has neither usage nor capacity.
//! - `jobs` counts the runs that held GPUs during the period (a requeued job's runs count apart).
//! - The capacity is the step function `accountd run` records (`capacity_samples`); before the
//!   first sample, or without any, it is the sum of the quotas (the report says so).
//! - Cost: typed GPUs at their type's rate, untyped ones and types without a rate at `default`;
//!   no rates configured, no cost. `cost` is the list price of the GPU-hours used (as before the
//!   split existed); `allocated_cost` prices borrowed hours with `borrowed_cost_factor`;
//!   `idle_cost` is the team's share of the idle capacity cost (`idle_cost_split`);
//!   `total_cost` = allocated + idle, and the rows' `total_cost` add up to the capacity cost.
//! - The split is computed on whole GPUs against total quotas, as the governor governs them.
//!   Where GPU types have different rates, a team's in-quota and borrowed hours are priced in the
//!   proportions of the types it used in the period, and the capacity of each type at its rate.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Duration;

use serde::Serialize;
use teamshare_config::Config;

use crate::model::cost::{team_costs, CostRule, TeamHours, TypedUsage, IDLE};
use crate::model::fairshare::{decayed_usage, team_fair_shares};
use crate::model::find_or_push;
use crate::model::usage::{split_usage, CapacityStep, Run, TeamQuota, POOL};
use crate::period::{format_local, format_rfc3339, Period, UnixSeconds};
use crate::slurm_cli::slurm_name;
use crate::store::{CapacitySample, RunUsage, Store, StoreError};

/// The rate name used for GPUs without a type, and for types without their own rate.
pub const DEFAULT_RATE: &str = "default";

const SECONDS_PER_HOUR: f64 = 3600.0;

/// Hourly rates per GPU type.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Rates {
    per_hour: BTreeMap<String, f64>,
}

impl Rates {
    pub fn new(per_hour: BTreeMap<String, f64>) -> Self {
        Rates { per_hour }
    }

    pub fn from_config(config: &Config) -> Self {
        Rates::new(
            config
                .gpu_types
                .iter()
                .map(|(name, t)| (name.clone(), t.rate_per_hour))
                .collect(),
        )
    }

    pub fn is_empty(&self) -> bool {
        self.per_hour.is_empty()
    }

    /// The hourly rate of a GPU of `gpu_type` (None: untyped).
    pub fn rate(&self, gpu_type: Option<&str>) -> f64 {
        self.per_hour
            .get(self.key(gpu_type))
            .copied()
            .unwrap_or(0.0)
    }

    /// The rate a GPU of `gpu_type` is priced at: its type's, or [`DEFAULT_RATE`].
    pub fn key<'a>(&self, gpu_type: Option<&'a str>) -> &'a str {
        match gpu_type {
            Some(t) if self.per_hour.contains_key(t) => t,
            _ => DEFAULT_RATE,
        }
    }
}

// ---------------------------------------------------------------------------------------------
// report teams

/// What the teams report needs besides the database.
#[derive(Debug, Clone, PartialEq)]
pub struct UsageParams {
    pub cluster: String,
    pub period: Period,
    /// Running jobs count up to now, and the period is counted up to now.
    pub now: UnixSeconds,
    /// Every configured team, in file order.
    pub teams: Vec<TeamQuota>,
    /// The sum of the teams' typed quotas per GPU type: the typed part of the capacity when it is
    /// taken as the sum of quotas.
    pub quota_by_type: BTreeMap<String, u32>,
    pub rates: Rates,
    pub currency: Option<String>,
    pub cost_rule: CostRule,
    /// Only these rows; empty: every row.
    pub only: Vec<String>,
}

impl UsageParams {
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
            quota_by_type,
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

/// One row of the teams report. Usage in GPU-seconds; costs None without rates.
#[derive(Debug, Clone, PartialEq)]
pub struct TeamRow {
    pub team: String,
    pub kind: RowKind,
    pub jobs: u64,
    /// Allocated GPU-seconds (exact).
    pub gpu_seconds: u128,
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
}

impl TeamRow {
    pub fn gpu_hours(&self) -> f64 {
        self.gpu_seconds as f64 / SECONDS_PER_HOUR
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

    fn empty(team: &str, kind: RowKind, quota: Option<u32>, with_cost: bool) -> TeamRow {
        let zero = with_cost.then_some(0.0);
        TeamRow {
            team: team.to_string(),
            kind,
            jobs: 0,
            gpu_seconds: 0,
            in_quota_seconds: 0.0,
            borrowed_seconds: 0.0,
            lent_seconds: 0.0,
            quota,
            cost: zero,
            allocated_cost: zero,
            idle_cost: zero,
            total_cost: zero,
        }
    }
}

/// Where the capacity of the period came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CapacitySource {
    /// Recorded samples cover the whole period.
    Samples,
    /// No sample before this instant: until then, the sum of the quotas.
    QuotasUntil(UnixSeconds),
    /// No sample at all: the sum of the quotas.
    Quotas,
}

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
    /// The governed capacity integrated over the counted period.
    pub capacity_gpu_seconds: f64,
    /// Every account's allocated GPU-seconds (also of rows left out by a filter).
    pub allocated_gpu_seconds: f64,
    /// The price of that capacity; the sum of every row's `total_cost`.
    pub capacity_cost: Option<f64>,
    pub capacity_source: CapacitySource,
    /// The capacity taken where there are no samples.
    pub quota_sum: u32,
    /// Borrowed GPU-seconds beyond what was lendable at the time (charged to `(pool)`).
    pub over_lendable_seconds: f64,
}

impl UsageReport {
    pub fn row(&self, team: &str) -> Option<&TeamRow> {
        self.rows.iter().find(|r| r.team == team)
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

/// The arithmetic of [`usage_report_by_day`], over runs and capacity samples already read.
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
                .filter(|r| r.start < day.until && r.end.map_or(true, |e| e > day.since))
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
            compute_usage(&day_runs, &day_capacity, &day_params)
        })
        .collect()
}

/// The capacity steps of `period`: the samples, with the sum of quotas before the first one.
fn capacity_steps(
    history: &[CapacitySample],
    period: Period,
    params: &UsageParams,
) -> (Vec<CapacitySample>, CapacitySource) {
    let quotas = CapacitySample {
        ts: period.since,
        gpus: params.quota_sum(),
        by_type: params.quota_by_type.clone(),
    };
    match history.first() {
        None => (vec![quotas], CapacitySource::Quotas),
        Some(first) if first.ts > period.since => {
            let mut steps = vec![quotas];
            steps.extend_from_slice(history);
            (steps, CapacitySource::QuotasUntil(first.ts))
        }
        Some(_) => (history.to_vec(), CapacitySource::Samples),
    }
}

/// The GPU-seconds of a step function over a period, as the model integrates it.
fn integrate(steps: &[CapacityStep], period: Period) -> f64 {
    split_usage(&[], &[], steps, period).totals.capacity
}

/// The arithmetic of the teams report, over runs and capacity samples already read.
pub fn compute_usage(
    runs: &[RunUsage],
    capacity: &[CapacitySample],
    params: &UsageParams,
) -> UsageReport {
    let period = counted_period(params.period, params.now);
    let with_cost = !params.rates.is_empty();
    let (steps, capacity_source) = capacity_steps(capacity, period, params);
    let total_steps: Vec<CapacityStep> = steps.iter().map(|s| (s.ts, s.gpus)).collect();

    // Per account: runs, exact GPU-seconds, and GPU-seconds per rate. Few accounts, many runs
    // (often several of one account in a row): a short list, the last one tried first.
    struct Account<'r> {
        name: &'r str,
        jobs: u64,
        gpu_seconds: u128,
        by_rate: Vec<(&'r str, f64)>,
    }
    fn add<'k>(by_rate: &mut Vec<(&'k str, f64)>, key: &'k str, seconds: f64) {
        match by_rate.iter_mut().find(|(k, _)| *k == key) {
            Some((_, s)) => *s += seconds,
            None => by_rate.push((key, seconds)),
        }
    }
    let mut accounts: Vec<Account> = Vec::new();
    let mut last = usize::MAX;
    let mut model_runs: Vec<Run> = Vec::with_capacity(runs.len());
    for run in runs {
        let end = run.end.unwrap_or(params.now);
        let seconds = period.overlap(run.start, end);
        if run.gpus == 0 || seconds <= 0 {
            continue;
        }
        let name: &str = &run.account;
        let slot = find_or_push(
            &mut accounts,
            &mut last,
            |a| a.name == name,
            || Account {
                name,
                jobs: 0,
                gpu_seconds: 0,
                by_rate: Vec::new(),
            },
        );
        model_runs.push(Run {
            team: run.account.clone(),
            gpus: u32::try_from(run.gpus).unwrap_or(u32::MAX),
            start: run.start,
            end,
        });
        let account = &mut accounts[slot];
        account.jobs += 1;
        account.gpu_seconds += u128::from(run.gpus) * seconds as u128;
        let mut typed = 0u64;
        for (gpu_type, n) in run.gpus_by_type.iter() {
            typed = typed.saturating_add(n);
            add(
                &mut account.by_rate,
                params.rates.key(Some(gpu_type)),
                n as f64 * seconds as f64,
            );
        }
        let untyped = run.gpus.saturating_sub(typed);
        if untyped > 0 {
            add(
                &mut account.by_rate,
                DEFAULT_RATE,
                untyped as f64 * seconds as f64,
            );
        }
    }
    let jobs: BTreeMap<&str, u64> = accounts.iter().map(|a| (a.name, a.jobs)).collect();
    let gpu_seconds: BTreeMap<&str, u128> =
        accounts.iter().map(|a| (a.name, a.gpu_seconds)).collect();
    let by_rate: BTreeMap<&str, BTreeMap<&str, f64>> = accounts
        .iter()
        .map(|a| (a.name, a.by_rate.iter().copied().collect()))
        .collect();

    let split = split_usage(&model_runs, &params.teams, &total_steps, period);

    // Costs: one priced usage per rate, each team's hours in the proportions of its types.
    let costs = with_cost.then(|| {
        let typed = priced_usage(&steps, period, &split, &by_rate, &params.rates);
        team_costs(&typed, params.cost_rule)
    });

    let quota_of = |team: &str| {
        params
            .teams
            .iter()
            .find(|t| t.name == team)
            .map(|t| t.quota)
    };
    let mut rows: Vec<TeamRow> = split
        .rows
        .iter()
        .map(|r| {
            let name = r.team.as_str();
            let kind = if name == POOL {
                RowKind::Pool
            } else if quota_of(name).is_some() {
                RowKind::Team
            } else {
                RowKind::Account
            };
            let team_cost = costs
                .as_ref()
                .map(|c| c.row(name).cloned().unwrap_or_default());
            let list_cost = by_rate.get(name).map_or(0.0, |rates| {
                rates
                    .iter()
                    .map(|(key, s)| s * params.rates.rate(Some(key)))
                    .sum::<f64>()
                    / SECONDS_PER_HOUR
            });
            TeamRow {
                team: r.team.clone(),
                kind,
                jobs: jobs.get(name).copied().unwrap_or(0),
                gpu_seconds: gpu_seconds.get(name).copied().unwrap_or(0),
                in_quota_seconds: r.in_quota,
                borrowed_seconds: r.borrowed,
                lent_seconds: r.lent,
                quota: quota_of(name),
                cost: with_cost.then_some(list_cost),
                allocated_cost: team_cost.as_ref().map(|c| c.allocated_cost),
                idle_cost: team_cost.as_ref().map(|c| c.idle_cost),
                total_cost: team_cost.as_ref().map(|c| c.total_cost),
            }
        })
        .collect();
    if let Some(idle) = costs.as_ref().and_then(|c| c.row(IDLE)) {
        let mut row = TeamRow::empty(IDLE, RowKind::Idle, None, true);
        row.idle_cost = Some(idle.idle_cost);
        row.total_cost = Some(idle.total_cost);
        rows.push(row);
    }
    if !params.only.is_empty() {
        rows.retain(|r| params.only.contains(&r.team));
        for name in &params.only {
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

    UsageReport {
        cluster: params.cluster.clone(),
        period: params.period,
        counted: period,
        currency: params.currency.clone(),
        rows,
        capacity_gpu_seconds: split.totals.capacity,
        allocated_gpu_seconds: split.totals.allocated,
        capacity_cost: costs.as_ref().map(|c| c.capacity_cost),
        capacity_source,
        quota_sum: params.quota_sum(),
        over_lendable_seconds: split.totals.over_lendable,
    }
}

/// The model's priced usage: one [`TypedUsage`] per rate in use (by the capacity or by a run).
/// A team's in-quota and borrowed hours are spread over the rates in the proportions of its
/// GPU-seconds at each; its quota hours, and the unallocated hours, in the proportions of the
/// capacity of each.
fn priced_usage(
    steps: &[CapacitySample],
    period: Period,
    split: &crate::model::usage::UsageSplit,
    by_rate: &BTreeMap<&str, BTreeMap<&str, f64>>,
    rates: &Rates,
) -> Vec<TypedUsage> {
    // The capacity per rate at each step: typed GPUs at their type's rate, the rest at default.
    fn per_rate<'s>(s: &'s CapacitySample, rates: &Rates) -> BTreeMap<&'s str, u32> {
        let mut out: BTreeMap<&str, u32> = BTreeMap::new();
        let mut typed = 0u32;
        for (t, n) in &s.by_type {
            typed = typed.saturating_add(*n);
            let e = out.entry(rates.key(Some(t.as_str()))).or_insert(0);
            *e = e.saturating_add(*n);
        }
        let untyped = s.gpus.saturating_sub(typed);
        if untyped > 0 {
            *out.entry(DEFAULT_RATE).or_insert(0) += untyped;
        }
        out
    }
    let step_rates: Vec<(UnixSeconds, BTreeMap<&str, u32>)> =
        steps.iter().map(|s| (s.ts, per_rate(s, rates))).collect();
    let mut keys: Vec<&str> = step_rates
        .iter()
        .flat_map(|(_, m)| m.keys().copied())
        .chain(by_rate.values().flat_map(|m| m.keys().copied()))
        .collect();
    keys.sort_unstable();
    keys.dedup();
    let capacity: BTreeMap<&str, f64> = keys
        .iter()
        .map(|&key| {
            let steps: Vec<CapacityStep> = step_rates
                .iter()
                .map(|(ts, m)| (*ts, m.get(key).copied().unwrap_or(0)))
                .collect();
            (key, integrate(&steps, period))
        })
        .collect();
    let capacity_total: f64 = capacity.values().sum();
    let capacity_share = |key: &str| {
        if capacity_total > 0.0 {
            capacity[key] / capacity_total
        } else {
            1.0 / keys.len() as f64
        }
    };
    keys.iter()
        .map(|&key| {
            let weight = capacity_share(key);
            TypedUsage {
                gpu_type: key.to_string(),
                rate_per_hour: rates.rate(Some(key)),
                capacity_hours: capacity[key] / SECONDS_PER_HOUR,
                unallocated_hours: split.totals.unallocated / SECONDS_PER_HOUR * weight,
                teams: split
                    .rows
                    .iter()
                    .filter(|row| row.team != POOL)
                    .map(|row| {
                        let used = by_rate.get(row.team.as_str());
                        let all: f64 = used.map_or(0.0, |m| m.values().sum());
                        let share = match used.and_then(|m| m.get(key)) {
                            Some(s) if all > 0.0 => s / all,
                            _ => 0.0,
                        };
                        TeamHours {
                            team: row.team.clone(),
                            quota_hours: row.quota / SECONDS_PER_HOUR * weight,
                            in_quota_hours: row.in_quota / SECONDS_PER_HOUR * share,
                            borrowed_hours: row.borrowed / SECONDS_PER_HOUR * share,
                        }
                    })
                    .collect(),
            }
        })
        .collect()
}

/// Output formats of every report.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Table,
    Csv,
    Json,
}

pub fn render_teams<Tz: chrono::TimeZone>(report: &UsageReport, format: Format, tz: &Tz) -> String
where
    Tz::Offset: std::fmt::Display,
{
    match format {
        Format::Table => teams_table(report, tz),
        Format::Csv => teams_csv(report),
        Format::Json => teams_json(report),
    }
}

/// The day-by-day report: a table with the date first (a run counts on every day it held GPUs,
/// so there is no total of jobs), or the rows of every day in one CSV or one JSON array (each
/// row carries its day as `since`/`until`).
pub fn render_teams_by_day<Tz: chrono::TimeZone>(
    days: &[UsageReport],
    format: Format,
    tz: &Tz,
) -> String
where
    Tz::Offset: std::fmt::Display,
{
    match format {
        Format::Table => teams_by_day_table(days, tz),
        Format::Csv => {
            let mut out = String::new();
            for (i, day) in days.iter().enumerate() {
                let csv = teams_csv(day);
                // The header once.
                out.push_str(if i == 0 {
                    &csv
                } else {
                    csv.split_once('\n').map_or("", |(_, rows)| rows)
                });
            }
            if out.is_empty() {
                out = teams_csv_header().to_string();
            }
            out
        }
        Format::Json => {
            let rows: Vec<TeamJson<'_>> = days.iter().flat_map(team_json_rows).collect();
            let mut s = serde_json::to_string_pretty(&rows).expect("plain data serialises");
            s.push('\n');
            s
        }
    }
}

fn teams_by_day_table<Tz: chrono::TimeZone>(days: &[UsageReport], tz: &Tz) -> String
where
    Tz::Offset: std::fmt::Display,
{
    let Some(first) = days.first() else {
        return "no days in the period\n".to_string();
    };
    let with_cost = first.capacity_cost.is_some();
    let currency = currency_suffix(first);
    let mut header: Vec<String> = [
        "DATE",
        "TEAM",
        "JOBS",
        "GPU-HOURS",
        "IN-QUOTA",
        "BORROWED",
        "LENT",
        "CAPACITY",
    ]
    .map(String::from)
    .to_vec();
    if with_cost {
        header.push(format!("COST{currency}"));
    }
    let mut lines: Vec<Vec<String>> = Vec::new();
    for day in days {
        let date = tz
            .timestamp_opt(day.period.since, 0)
            .earliest()
            .map(|t| t.naive_local().date().to_string())
            .unwrap_or_default();
        for (i, r) in day.rows.iter().enumerate() {
            let mut v = vec![
                if i == 0 { date.clone() } else { String::new() },
                r.team.clone(),
                r.jobs.to_string(),
                hours(r.gpu_hours()),
                hours(r.in_quota_hours()),
                hours(r.borrowed_hours()),
                hours(r.lent_hours()),
                if i == 0 {
                    hours(day.capacity_gpu_seconds / SECONDS_PER_HOUR)
                } else {
                    String::new()
                },
            ];
            if with_cost {
                v.push(money(r.total_cost));
            }
            lines.push(v);
        }
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
    out.push_str(&table(&header, &lines, false));
    out
}

/// The first line of a teams table, e.g. `GPU usage on c by day from ... (local time), GPU-hours
/// and cost`.
fn title<Tz: chrono::TimeZone>(report: &UsageReport, how: &str, period: Period, tz: &Tz) -> String
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

/// ` (BRL)` after a cost header; empty without a currency.
fn currency_suffix(report: &UsageReport) -> String {
    report
        .currency
        .as_deref()
        .map(|c| format!(" ({c})"))
        .unwrap_or_default()
}

fn hours(h: f64) -> String {
    format!("{h:.4}")
}

fn money(c: Option<f64>) -> String {
    c.map(|c| format!("{c:.2}")).unwrap_or_default()
}

/// Cells right-aligned under their headers, the first column left-aligned.
fn table(header: &[String], lines: &[Vec<String>], rule_before_last: bool) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for l in lines {
        for (w, cell) in widths.iter_mut().zip(l) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let row = |cells: &[String]| {
        let mut line = format!("{:<w$}", cells[0], w = widths[0]);
        for (cell, w) in cells[1..].iter().zip(&widths[1..]) {
            let _ = write!(line, "  {cell:>w$}");
        }
        line.trim_end().to_string() + "\n"
    };
    let mut out = row(header);
    for (i, l) in lines.iter().enumerate() {
        if rule_before_last && i + 1 == lines.len() {
            let rule: Vec<String> = widths.iter().map(|w| "-".repeat(*w)).collect();
            out.push_str(&row(&rule));
        }
        out.push_str(&row(l));
    }
    out
}

fn teams_table<Tz: chrono::TimeZone>(report: &UsageReport, tz: &Tz) -> String
where
    Tz::Offset: std::fmt::Display,
{
    let with_cost = report.capacity_cost.is_some();
    let currency = currency_suffix(report);
    let mut header: Vec<String> = [
        "TEAM",
        "JOBS",
        "QUOTA",
        "GPU-HOURS",
        "IN-QUOTA",
        "BORROWED",
        "LENT",
    ]
    .map(String::from)
    .to_vec();
    if with_cost {
        header.push("ALLOCATED".into());
        header.push("IDLE".into());
        header.push(format!("COST{currency}"));
    }
    let cells = |team: &str,
                 jobs: u64,
                 quota: Option<u64>,
                 r: [f64; 4],
                 c: [Option<f64>; 3]|
     -> Vec<String> {
        let mut v = vec![
            team.to_string(),
            jobs.to_string(),
            quota.map(|q| q.to_string()).unwrap_or_default(),
            hours(r[0]),
            hours(r[1]),
            hours(r[2]),
            hours(r[3]),
        ];
        if with_cost {
            v.extend(c.map(money));
        }
        v
    };
    let mut lines: Vec<Vec<String>> = report
        .rows
        .iter()
        .map(|r| {
            cells(
                &r.team,
                r.jobs,
                r.quota.map(u64::from),
                [
                    r.gpu_hours(),
                    r.in_quota_hours(),
                    r.borrowed_hours(),
                    r.lent_hours(),
                ],
                [r.allocated_cost, r.idle_cost, r.total_cost],
            )
        })
        .collect();
    let sum = |f: fn(&TeamRow) -> f64| report.rows.iter().map(f).sum::<f64>();
    let sum_cost =
        |f: fn(&TeamRow) -> Option<f64>| report.rows.iter().filter_map(f).reduce(|a, b| a + b);
    let total_seconds: u128 = report.rows.iter().map(|r| r.gpu_seconds).sum();
    lines.push(cells(
        "total",
        report.rows.iter().map(|r| r.jobs).sum(),
        report
            .rows
            .iter()
            .filter_map(|r| r.quota.map(u64::from))
            .reduce(|a, b| a + b),
        [
            total_seconds as f64 / SECONDS_PER_HOUR,
            sum(TeamRow::in_quota_hours),
            sum(TeamRow::borrowed_hours),
            sum(TeamRow::lent_hours),
        ],
        [
            sum_cost(|r| r.allocated_cost),
            sum_cost(|r| r.idle_cost),
            sum_cost(|r| r.total_cost),
        ],
    ));
    let mut out = title(report, "", report.period, tz);
    out.push_str(&table(&header, &lines, true));
    let source = match report.capacity_source {
        CapacitySource::Samples => "recorded by accountd run".to_string(),
        CapacitySource::QuotasUntil(t) => format!(
            "the sum of quotas, {} GPUs, until the first sample at {}",
            report.quota_sum,
            format_local(t, tz).replace('T', " ")
        ),
        CapacitySource::Quotas => format!(
            "the sum of quotas, {} GPUs: no capacity recorded",
            report.quota_sum
        ),
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
    out
}

/// Quote a CSV field when it needs it (RFC 4180).
fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

fn teams_csv_header() -> &'static str {
    // The first eight columns are those of the report before the split: keep their order.
    "team,jobs,gpu_hours,quota,cost,currency,since,until,\
     in_quota_hours,borrowed_hours,lent_hours,allocated_cost,idle_cost,total_cost\n"
}

fn teams_csv(report: &UsageReport) -> String {
    let mut out = String::from(teams_csv_header());
    let since = format_rfc3339(report.period.since);
    let until = format_rfc3339(report.period.until);
    for r in &report.rows {
        let _ = writeln!(
            out,
            "{},{},{},{},{},{},{},{},{},{},{},{},{},{}",
            csv_field(&r.team),
            r.jobs,
            hours(r.gpu_hours()),
            r.quota.map(|q| q.to_string()).unwrap_or_default(),
            money(r.cost),
            csv_field(report.currency.as_deref().unwrap_or("")),
            since,
            until,
            hours(r.in_quota_hours()),
            hours(r.borrowed_hours()),
            hours(r.lent_hours()),
            money(r.allocated_cost),
            money(r.idle_cost),
            money(r.total_cost),
        );
    }
    out
}

/// One element of the JSON array. Keys are an interface: keep them.
#[derive(Serialize)]
struct TeamJson<'a> {
    team: &'a str,
    jobs: u64,
    gpu_hours: f64,
    quota: Option<u32>,
    cost: Option<f64>,
    currency: Option<&'a str>,
    since: String,
    until: String,
    in_quota_hours: f64,
    borrowed_hours: f64,
    lent_hours: f64,
    allocated_cost: Option<f64>,
    idle_cost: Option<f64>,
    total_cost: Option<f64>,
}

fn teams_json(report: &UsageReport) -> String {
    let rows = team_json_rows(report);
    let mut s = serde_json::to_string_pretty(&rows).expect("plain data serialises");
    s.push('\n');
    s
}

fn team_json_rows(report: &UsageReport) -> Vec<TeamJson<'_>> {
    let since = format_rfc3339(report.period.since);
    let until = format_rfc3339(report.period.until);
    report
        .rows
        .iter()
        .map(|r| TeamJson {
            team: &r.team,
            jobs: r.jobs,
            gpu_hours: r.gpu_hours(),
            quota: r.quota,
            cost: r.cost,
            currency: report.currency.as_deref(),
            since: since.clone(),
            until: until.clone(),
            in_quota_hours: r.in_quota_hours(),
            borrowed_hours: r.borrowed_hours(),
            lent_hours: r.lent_hours(),
            allocated_cost: r.allocated_cost,
            idle_cost: r.idle_cost,
            total_cost: r.total_cost,
        })
        .collect()
}

// ---------------------------------------------------------------------------------------------
// report fairshare

/// What the fair-share report needs besides the database.
#[derive(Debug, Clone, PartialEq)]
pub struct FairshareParams {
    pub cluster: String,
    /// The instant usage is decayed to (running jobs count up to it).
    pub as_of: UnixSeconds,
    /// Usage before this instant is not read.
    pub since: UnixSeconds,
    pub half_life: Duration,
    pub dampening: f64,
    /// Every configured team's weight.
    pub weights: BTreeMap<String, u32>,
    /// Only these teams; empty: every team and every account with usage.
    pub only: Vec<String>,
}

/// How many half-lives of usage the fair-share reads by default: older usage weighs under 0.1 %.
pub const FAIRSHARE_HORIZON_HALF_LIVES: u64 = 10;

impl FairshareParams {
    /// `since` None: [`FAIRSHARE_HORIZON_HALF_LIVES`] half-lives before `as_of`, or all the
    /// history when the half-life is 0 (no decay).
    pub fn from_config(
        config: &Config,
        as_of: UnixSeconds,
        since: Option<UnixSeconds>,
        only: Vec<String>,
    ) -> Self {
        let half_life = config.accountd.fairshare_half_life;
        let since = since.unwrap_or_else(|| default_fairshare_since(as_of, half_life));
        FairshareParams {
            cluster: slurm_name(&config.cluster.name),
            as_of,
            since,
            half_life,
            dampening: config.accountd.fairshare_dampening,
            weights: crate::model::fairshare::weights_from_config(config),
            only: only.iter().map(|t| slurm_name(t)).collect(),
        }
    }
}

/// The start of the usage the fair-share reads by default.
pub fn default_fairshare_since(as_of: UnixSeconds, half_life: Duration) -> UnixSeconds {
    if half_life.is_zero() {
        return 0;
    }
    let horizon = half_life
        .as_secs()
        .saturating_mul(FAIRSHARE_HORIZON_HALF_LIVES);
    as_of.saturating_sub(i64::try_from(horizon).unwrap_or(i64::MAX))
}

#[derive(Debug, Clone, PartialEq)]
pub struct FairshareRow {
    pub team: String,
    /// None: an account with usage that is not a team (it has no shares).
    pub weight: Option<u32>,
    /// S: the weight over the sum of weights.
    pub normalized_shares: f64,
    /// GPU-seconds, each decayed by its age.
    pub decayed_gpu_seconds: f64,
    /// U: the decayed usage over every account's decayed usage.
    pub normalized_usage: f64,
    /// F = 2^(-U/S/d).
    pub factor: f64,
}

#[derive(Debug, Clone, PartialEq)]
pub struct FairshareReport {
    pub cluster: String,
    pub as_of: UnixSeconds,
    pub since: UnixSeconds,
    pub half_life: Duration,
    pub dampening: f64,
    /// By team name.
    pub rows: Vec<FairshareRow>,
}

pub fn fairshare_report(
    store: &Store,
    params: &FairshareParams,
) -> Result<FairshareReport, StoreError> {
    let runs = store.runs_overlapping(&params.cluster, params.since, params.as_of)?;
    Ok(compute_fairshare(&runs, params))
}

pub fn compute_fairshare(runs: &[RunUsage], params: &FairshareParams) -> FairshareReport {
    let model_runs: Vec<Run> = runs
        .iter()
        .filter(|r| r.gpus > 0)
        .map(|r| Run {
            team: r.account.clone(),
            gpus: u32::try_from(r.gpus).unwrap_or(u32::MAX),
            start: r.start.max(params.since),
            end: r.end.unwrap_or(params.as_of),
        })
        .collect();
    let usage = decayed_usage(&model_runs, params.as_of, params.half_life);
    // Accounts with usage but no team have no shares (Slurm: factor 0 once they use anything).
    let mut shares = params.weights.clone();
    for account in usage.keys() {
        shares.entry(account.clone()).or_insert(0);
    }
    let mut rows: Vec<FairshareRow> = team_fair_shares(&shares, &usage, params.dampening)
        .into_iter()
        .map(|f| FairshareRow {
            weight: params.weights.get(&f.path).copied(),
            decayed_gpu_seconds: usage.get(&f.path).copied().unwrap_or(0.0),
            normalized_shares: f.normalized_shares,
            normalized_usage: f.actual_usage,
            factor: f.factor,
            team: f.path,
        })
        .collect();
    if !params.only.is_empty() {
        rows.retain(|r| params.only.contains(&r.team));
    }
    FairshareReport {
        cluster: params.cluster.clone(),
        as_of: params.as_of,
        since: params.since,
        half_life: params.half_life,
        dampening: params.dampening,
        rows,
    }
}

pub fn render_fairshare<Tz: chrono::TimeZone>(
    report: &FairshareReport,
    format: Format,
    tz: &Tz,
) -> String
where
    Tz::Offset: std::fmt::Display,
{
    match format {
        Format::Table => {
            let header: Vec<String> = [
                "TEAM",
                "WEIGHT",
                "SHARE",
                "DECAYED GPU-HOURS",
                "USAGE",
                "FACTOR",
            ]
            .map(String::from)
            .to_vec();
            let lines: Vec<Vec<String>> = report
                .rows
                .iter()
                .map(|r| {
                    vec![
                        r.team.clone(),
                        r.weight.map(|w| w.to_string()).unwrap_or_default(),
                        format!("{:.4}", r.normalized_shares),
                        hours(r.decayed_gpu_seconds / SECONDS_PER_HOUR),
                        format!("{:.4}", r.normalized_usage),
                        format!("{:.4}", r.factor),
                    ]
                })
                .collect();
            let mut out = format!(
                "Fair-share on {} as of {} (local time): usage since {}, half-life {}, dampening {}\n",
                report.cluster,
                format_local(report.as_of, tz).replace('T', " "),
                format_local(report.since, tz).replace('T', " "),
                if report.half_life.is_zero() {
                    "0 (no decay)".to_string()
                } else {
                    format_duration(report.half_life)
                },
                report.dampening
            );
            out.push_str(&table(&header, &lines, false));
            out
        }
        Format::Csv => {
            let mut out = String::from(
                "team,weight,normalized_shares,decayed_gpu_hours,normalized_usage,fairshare_factor,since,as_of,half_life_seconds\n",
            );
            for r in &report.rows {
                let _ = writeln!(
                    out,
                    "{},{},{},{},{},{},{},{},{}",
                    csv_field(&r.team),
                    r.weight.map(|w| w.to_string()).unwrap_or_default(),
                    r.normalized_shares,
                    r.decayed_gpu_seconds / SECONDS_PER_HOUR,
                    r.normalized_usage,
                    r.factor,
                    format_rfc3339(report.since),
                    format_rfc3339(report.as_of),
                    report.half_life.as_secs()
                );
            }
            out
        }
        Format::Json => {
            #[derive(Serialize)]
            struct Row<'a> {
                team: &'a str,
                weight: Option<u32>,
                normalized_shares: f64,
                decayed_gpu_hours: f64,
                normalized_usage: f64,
                fairshare_factor: f64,
                since: String,
                as_of: String,
                half_life_seconds: u64,
            }
            let rows: Vec<Row<'_>> = report
                .rows
                .iter()
                .map(|r| Row {
                    team: &r.team,
                    weight: r.weight,
                    normalized_shares: r.normalized_shares,
                    decayed_gpu_hours: r.decayed_gpu_seconds / SECONDS_PER_HOUR,
                    normalized_usage: r.normalized_usage,
                    fairshare_factor: r.factor,
                    since: format_rfc3339(report.since),
                    as_of: format_rfc3339(report.as_of),
                    half_life_seconds: report.half_life.as_secs(),
                })
                .collect();
            let mut s = serde_json::to_string_pretty(&rows).expect("plain data serialises");
            s.push('\n');
            s
        }
    }
}

/// A duration as the configuration writes it: `7d`, `12h`, `90s`, `200ms`.
pub fn format_duration(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        _ if d.subsec_nanos() != 0 => format!("{}ms", d.as_millis()),
        _ if s != 0 && s % 86_400 == 0 => format!("{}d", s / 86_400),
        _ if s != 0 && s % 3600 == 0 => format!("{}h", s / 3600),
        _ if s != 0 && s % 60 == 0 => format!("{}m", s / 60),
        _ => format!("{s}s"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::GpuTypes;
    use chrono::Utc;
    use teamshare_config::IdleCostSplit;

    const H: i64 = 3600;
    /// 2024-03-01T00:00:00Z.
    const T0: i64 = 1_709_251_200;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() <= 1e-9 * b.abs().max(1.0)
    }

    fn run(id: i64, account: &str, start_h: i64, end_h: Option<i64>, gpus: u64) -> RunUsage {
        RunUsage {
            id,
            account: account.into(),
            start: T0 + start_h * H,
            end: end_h.map(|e| T0 + e * H),
            gpus,
            gpus_by_type: GpuTypes::default(),
        }
    }

    fn cap(ts_h: i64, gpus: u32, types: &[(&str, u32)]) -> CapacitySample {
        CapacitySample {
            ts: T0 + ts_h * H,
            gpus,
            by_type: types.iter().map(|&(t, n)| (t.to_string(), n)).collect(),
        }
    }

    fn quota(name: &str, quota: u32, lend_limit: u32) -> TeamQuota {
        TeamQuota {
            name: name.into(),
            quota,
            lend_limit,
        }
    }

    /// The three-team example of tests/model_golden.rs, at 10 per GPU-hour, borrowed hours at
    /// 0.5, idle cost by quota share.
    fn params(until_h: i64, now_h: i64) -> UsageParams {
        UsageParams {
            cluster: "c".into(),
            period: Period {
                since: T0,
                until: T0 + until_h * H,
            },
            now: T0 + now_h * H,
            teams: vec![quota("a", 2, 2), quota("b", 4, 1), quota("c", 2, 2)],
            quota_by_type: BTreeMap::new(),
            rates: Rates::new(BTreeMap::from([(DEFAULT_RATE.to_string(), 10.0)])),
            currency: Some("BRL".into()),
            cost_rule: CostRule {
                borrowed_cost_factor: 0.5,
                idle_split: IdleCostSplit::QuotaShare,
            },
            only: vec![],
        }
    }

    fn example_runs() -> Vec<RunUsage> {
        vec![
            run(1, "a", 0, Some(2), 4),
            run(2, "b", 0, Some(6), 1),
            run(3, "c", 1, Some(3), 1),
            run(4, "b", 3, Some(4), 4),
            run(5, "c", 4, Some(5), 3),
            run(6, "a", 4, None, 1), // running: counted up to now (6 h)
            run(7, "a", 5, Some(5), 0),
        ]
    }

    fn example_capacity() -> Vec<CapacitySample> {
        vec![cap(0, 8, &[]), cap(4, 10, &[])]
    }

    fn assert_adds_up(r: &UsageReport) {
        let (mut borrowed, mut lent, mut total) = (0.0, 0.0, 0.0);
        for row in &r.rows {
            assert!(
                close(
                    row.gpu_seconds as f64,
                    row.in_quota_seconds + row.borrowed_seconds
                ),
                "{row:?}"
            );
            borrowed += row.borrowed_seconds;
            lent += row.lent_seconds;
            total += row.total_cost.unwrap_or(0.0);
            if let (Some(a), Some(i), Some(t)) = (row.allocated_cost, row.idle_cost, row.total_cost)
            {
                assert!(close(a + i, t), "{row:?}");
            }
        }
        assert!(close(borrowed, lent), "borrowed {borrowed}, lent {lent}");
        if let Some(c) = r.capacity_cost {
            assert!(close(total, c), "total {total}, capacity {c}");
        }
    }

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
        assert_eq!(r.capacity_source, CapacitySource::Quotas);
        assert!(close(r.capacity_gpu_seconds / 3600.0, 8.0 * 6.0));
        assert_adds_up(&r);
        // Samples from 4 h on: quotas (8) before, 10 after.
        let r = compute_usage(&example_runs(), &[cap(4, 10, &[])], &params(6, 6));
        assert_eq!(r.capacity_source, CapacitySource::QuotasUntil(T0 + 4 * H));
        assert!(close(r.capacity_gpu_seconds / 3600.0, 52.0));
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
        let t = render_teams(&r, Format::Table, &Utc);
        assert!(!t.contains("COST"), "{t}");
    }

    #[test]
    fn table_has_a_total_row_and_the_capacity() {
        let r = compute_usage(&example_runs(), &example_capacity(), &params(6, 6));
        let t = render_teams(&r, Format::Table, &Utc);
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(
            lines[0],
            "GPU usage on c from 2024-03-01 00:00:00 to 2024-03-01 06:00:00 (local time), GPU-hours and cost"
        );
        let cells = |l: &str| l.split_whitespace().map(str::to_string).collect::<Vec<_>>();
        assert_eq!(
            cells(lines[1]),
            [
                "TEAM",
                "JOBS",
                "QUOTA",
                "GPU-HOURS",
                "IN-QUOTA",
                "BORROWED",
                "LENT",
                "ALLOCATED",
                "IDLE",
                "COST",
                "(BRL)"
            ]
        );
        assert_eq!(
            cells(lines[2]),
            ["a", "2", "2", "10.0000", "6.0000", "4.0000", "0.7500", "80.00", "69.23", "149.23"]
        );
        assert_eq!(
            cells(lines[5]),
            ["(pool)", "0", "0.0000", "0.0000", "0.0000", "0.5000", "0.00", "0.00", "0.00"]
        );
        assert!(lines[7].starts_with("---"));
        assert_eq!(
            cells(lines[8]),
            [
                "total", "6", "8", "25.0000", "19.0000", "6.0000", "6.0000", "220.00", "300.00",
                "520.00"
            ]
        );
        assert_eq!(
            lines[9],
            "capacity: 52.0000 GPU-hours costing 520.00 (BRL) (recorded by accountd run)"
        );
        // Every table line has the header's width at most, the first row exactly.
        assert!(lines[2..9].iter().all(|l| l.len() <= lines[1].len()), "{t}");
    }

    #[test]
    fn csv_keeps_the_old_columns_first() {
        let r = compute_usage(&example_runs(), &example_capacity(), &params(6, 6));
        let c = render_teams(&r, Format::Csv, &Utc);
        let lines: Vec<&str> = c.lines().collect();
        assert_eq!(
            lines[0],
            "team,jobs,gpu_hours,quota,cost,currency,since,until,in_quota_hours,borrowed_hours,lent_hours,allocated_cost,idle_cost,total_cost"
        );
        assert_eq!(
            lines[1],
            "a,2,10.0000,2,100.00,BRL,2024-03-01T00:00:00Z,2024-03-01T06:00:00Z,6.0000,4.0000,0.7500,80.00,69.23,149.23"
        );
        assert_eq!(lines.len(), 6);
        assert_eq!(csv_field("a,b"), "\"a,b\"");
    }

    #[test]
    fn json_has_stable_keys_and_full_precision() {
        let r = compute_usage(&example_runs(), &example_capacity(), &params(6, 6));
        let j = render_teams(&r, Format::Json, &Utc);
        let v: serde_json::Value = serde_json::from_str(&j).unwrap();
        let rows = v.as_array().unwrap();
        assert_eq!(rows.len(), 5);
        let mut keys: Vec<&str> = rows[0]
            .as_object()
            .unwrap()
            .keys()
            .map(|k| k.as_str())
            .collect();
        keys.sort();
        assert_eq!(
            keys,
            [
                "allocated_cost",
                "borrowed_hours",
                "cost",
                "currency",
                "gpu_hours",
                "idle_cost",
                "in_quota_hours",
                "jobs",
                "lent_hours",
                "quota",
                "since",
                "team",
                "total_cost",
                "until"
            ]
        );
        assert_eq!(rows[1]["team"], "b");
        assert_eq!(rows[1]["lent_hours"].as_f64().unwrap(), 23.0 / 12.0);
        assert_eq!(rows[0]["since"], "2024-03-01T00:00:00Z");
        assert!(rows[3]["quota"].is_null());
        let total: f64 = rows.iter().map(|r| r["total_cost"].as_f64().unwrap()).sum();
        assert!(close(total, 520.0));
    }

    fn fairshare_params() -> FairshareParams {
        FairshareParams {
            cluster: "c".into(),
            as_of: T0 + 10 * H,
            since: T0,
            half_life: Duration::ZERO,
            dampening: 1.0,
            weights: BTreeMap::from([
                ("a".to_string(), 1),
                ("b".to_string(), 1),
                ("z".to_string(), 2),
            ]),
            only: vec![],
        }
    }

    #[test]
    fn fair_share_rows_are_the_models_figures() {
        // No decay: a used 3 GPU-hours, b 1, stray 0.5 (no shares). Total 4.5.
        let runs = [
            run(1, "a", 0, Some(3), 1),
            run(2, "b", 1, Some(2), 1),
            run(3, "stray", 2, Some(2), 0),
            run(4, "stray", 9, None, 1),  // running: up to as_of (10 h)
            run(5, "a", -5, Some(-4), 8), // before since: not read (the store clips too)
        ];
        let mut runs = runs.to_vec();
        runs[3].start = T0 + 9 * H + 1800;
        let r = compute_fairshare(&runs, &fairshare_params());
        let names: Vec<&str> = r.rows.iter().map(|r| r.team.as_str()).collect();
        assert_eq!(names, ["a", "b", "stray", "z"]);
        let a = &r.rows[0];
        assert_eq!(a.weight, Some(1));
        assert!(close(a.normalized_shares, 0.25));
        assert!(close(a.decayed_gpu_seconds, 3.0 * 3600.0));
        assert!(close(a.normalized_usage, 3.0 / 4.5));
        assert!(close(a.factor, (-(3.0 / 4.5) / 0.25f64).exp2()));
        let stray = &r.rows[2];
        assert_eq!((stray.weight, stray.factor), (None, 0.0));
        let z = &r.rows[3];
        assert_eq!((z.factor, z.normalized_shares), (1.0, 0.5));
        let mut p = fairshare_params();
        p.only = vec!["b".into()];
        assert_eq!(compute_fairshare(&runs, &p).rows.len(), 1);
        let j = render_fairshare(&r, Format::Json, &Utc);
        let v: serde_json::Value = serde_json::from_str(&j).unwrap();
        assert_eq!(v[0]["fairshare_factor"].as_f64().unwrap(), a.factor);
        assert_eq!(v[0]["half_life_seconds"], 0);
        let t = render_fairshare(&r, Format::Table, &Utc);
        assert!(t.contains("half-life 0 (no decay)"), "{t}");
        assert!(t.lines().nth(1).unwrap().starts_with("TEAM"), "{t}");
        let c = render_fairshare(&r, Format::Csv, &Utc);
        assert!(c.starts_with("team,weight,normalized_shares"), "{c}");
        assert_eq!(c.lines().count(), 5);
    }

    #[test]
    fn durations_are_written_as_the_configuration_writes_them() {
        let f = |s: u64| format_duration(Duration::from_secs(s));
        assert_eq!(
            [f(0), f(45), f(120), f(7200), f(7 * 86_400), f(90 * 60 + 1)],
            ["0s", "45s", "2m", "2h", "7d", "5401s"]
        );
        assert_eq!(format_duration(Duration::from_millis(200)), "200ms");
    }

    #[test]
    fn the_default_fair_share_horizon_is_ten_half_lives() {
        assert_eq!(
            default_fairshare_since(1_000_000, Duration::from_secs(3600)),
            1_000_000 - 36_000
        );
        assert_eq!(default_fairshare_since(1_000_000, Duration::ZERO), 0);
    }
}

#[cfg(test)]
mod config_tests {
    use super::*;

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
        assert_eq!(
            p.quota_by_type,
            BTreeMap::from([("a100".to_string(), 5), ("h100".to_string(), 2)])
        );
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
    }
}
