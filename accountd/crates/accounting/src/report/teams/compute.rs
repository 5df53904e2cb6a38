//! The arithmetic of the teams report: the runs of the period tallied per account and GPU type,
//! the basis the later phases read, the report put together (whole or day by day), the rows
//! outside the governed partitions and the `--only` filter.

use std::sync::Arc;

use crate::model::cost::team_costs;
use crate::model::usage::{Run, POOL};
use crate::model::{find_or_push, same_str};
use crate::period::{Period, UnixSeconds};
use crate::store::{CapacitySample, RunUsage};

use super::capacity::{capacity_steps, estimate_for, integrate, key_steps, sample_gpus};
use super::cost::{add_costs, add_usage_and_list_prices, capacity_by_type, list_price};
use super::split::{split_typed, split_untyped, SplitRows};
use super::{
    counted_period, CapacityEstimate, CapacitySource, RowKind, TeamRow, UsageParams, UsageReport,
};
use crate::report::{run_keys, DEFAULT_RATE};

/// The arithmetic of [`usage_report_by_day`](super::usage_report_by_day), over runs and capacity
/// samples already read. The capacity estimate, where there are no samples, is the whole period's,
/// so that the days add up to it.
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

/// One account's runs: how many, their exact GPU-seconds, and the same per GPU type.
pub(super) struct AccountUse<'r> {
    pub(super) name: &'r str,
    pub(super) jobs: u64,
    pub(super) gpu_seconds: u128,
    pub(super) by_key: Vec<KeyUse<'r>>,
}

pub(super) struct KeyUse<'r> {
    pub(super) key: &'r str,
    pub(super) jobs: u64,
    pub(super) gpu_seconds: u128,
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

    pub(super) fn of_key(&self, key: &str) -> Option<&KeyUse<'r>> {
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
        gpu_equivalents: params.gpu_equivalents.clone(),
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
pub(super) struct ReportBasis<'a> {
    pub(super) params: &'a UsageParams,
    pub(super) period: Period,
    pub(super) with_cost: bool,
    pub(super) steps: &'a [CapacitySample],
    pub(super) keys: Vec<&'a str>,
    /// Per key, in the same order.
    pub(super) capacity_seconds: Vec<f64>,
    pub(super) governed: &'a [AccountUse<'a>],
}

impl<'a> ReportBasis<'a> {
    /// A type's place in the report's order (unknown ones last).
    pub(super) fn rank(&self, key: &str) -> usize {
        self.keys
            .iter()
            .position(|&k| k == key)
            .unwrap_or(self.keys.len())
    }

    pub(super) fn account_of(&self, name: &str) -> Option<&AccountUse<'a>> {
        self.governed.iter().find(|a| a.name == name)
    }

    pub(super) fn quota_of(&self, team: &str) -> Option<u32> {
        self.params
            .teams
            .iter()
            .find(|t| t.name == team)
            .map(|t| t.quota)
    }

    pub(super) fn kind_of(&self, name: &str) -> RowKind {
        if name == POOL {
            RowKind::Pool
        } else if self.quota_of(name).is_some() {
            RowKind::Team
        } else {
            RowKind::Account
        }
    }

    pub(super) fn rate_of(&self, key: &str) -> f64 {
        self.params.rates.rate(Some(key))
    }
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
