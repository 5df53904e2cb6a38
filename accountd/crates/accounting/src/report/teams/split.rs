//! The split of the teams report into in-quota, borrowed and lent GPU-seconds: per GPU type in a
//! typed configuration, on total quotas then spread over the types in an untyped one.

use std::collections::BTreeMap;

use crate::model::cost::{TeamHours, TypedUsage};
use crate::model::usage::{
    split_usage, CapacityStep, Run, SplitTotals, TeamQuota, UsageSplit, POOL,
};

use super::capacity::key_steps;
use super::compute::ReportBasis;
use super::family_split::split_family;
use super::{RowKind, TeamRow};
use crate::report::SECONDS_PER_HOUR;

/// The rows the split makes, in the order it first names them, each found by its name.
#[derive(Default)]
pub(super) struct SplitRows {
    pub(super) rows: Vec<TeamRow>,
    index: BTreeMap<String, usize>,
}

impl SplitRows {
    /// `name`'s row, if it has one.
    pub(super) fn row(&self, name: &str) -> Option<&TeamRow> {
        self.index.get(name).map(|&i| &self.rows[i])
    }

    /// The index of `name`'s row, made empty if there is none yet.
    pub(super) fn of(&mut self, basis: &ReportBasis, name: &str) -> usize {
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
pub(super) fn split_typed(
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
    let in_family = |key: &str| {
        basis
            .params
            .families
            .iter()
            .any(|f| f.units_of(key).is_some())
    };
    for (&key, &capacity) in basis.keys.iter().zip(&basis.capacity_seconds) {
        if in_family(key) {
            continue;
        }
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
    for family in &basis.params.families {
        let (p, t) = split_family(basis, family, key_runs, rows);
        priced.extend(p);
        totals.capacity += t.capacity;
        totals.unallocated += t.unallocated;
        totals.allocated += t.allocated;
        totals.over_lendable += t.over_lendable;
    }
    (priced, totals)
}

/// An untyped configuration's split: on whole GPUs against total quotas, as the governor
/// governs them, then spread over the types. With the types' priced usage.
pub(super) fn split_untyped(
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
