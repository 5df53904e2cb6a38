//! A GPU family's split (issue 30): the family's runs, quotas and capacity in units of 1/D of
//! a GPU, split as one pool ([`split_usage`]), then each row's figures brought back to its
//! member types in GPUs of each type:
//! - a team's in-quota and borrowed units, in the proportions of the units its runs of each
//!   type held (an hour of a `1g.10gb` slice is 1 unit, of a whole A100 7);
//! - its quota and lent units, and the family's unallocated units, in the proportions of each
//!   type's capacity in units (the type's share of the family).
//!
//! Each type's GPU-seconds are then priced at its own rate, as before; the idle cost of each
//! type is split by the teams' family quotas.

use teamshare_config::SHARE_TYPE;

use crate::model::cost::{TeamHours, TypedUsage};
use crate::model::family::FamilyQuotas;
use crate::model::usage::{split_usage, CapacityStep, Run, SplitTotals, UsageSplit, POOL};

use super::capacity::sample_gpus;
use super::compute::ReportBasis;
use super::split::SplitRows;
use super::RowKind;
use crate::report::SECONDS_PER_HOUR;

/// The family's split added to `rows`; its types' priced usage and the totals, in GPU-seconds
/// of each type (so that they add up with the other types' as before).
pub(super) fn split_family(
    basis: &ReportBasis,
    family: &FamilyQuotas,
    key_runs: &[(&str, Vec<Run>)],
    rows: &mut SplitRows,
) -> (Vec<TypedUsage>, SplitTotals) {
    let runs: Vec<Run> = family
        .members
        .iter()
        .flat_map(|(k, u)| {
            let runs = key_runs
                .iter()
                .find(|(key, _)| key == k)
                .map_or(&[][..], |(_, r)| r);
            runs.iter().map(move |r| Run {
                gpus: r.gpus.saturating_mul(*u),
                ..r.clone()
            })
        })
        .collect();
    let steps: Vec<CapacityStep> = basis
        .steps
        .iter()
        .map(|s| {
            let units = family.members.iter().fold(0u32, |a, (k, u)| {
                a.saturating_add(sample_gpus(s, k).saturating_mul(*u))
            });
            (s.ts, units)
        })
        .collect();
    let split = split_usage(&runs, &family.teams, &steps, basis.period);
    let shares = capacity_shares(basis, family);
    for r in &split.rows {
        add_row(basis, family, &shares, r, rows);
    }
    let mut totals = SplitTotals::default();
    let mut priced = Vec::with_capacity(family.members.len());
    let shard_seconds = shard_capacity(family, rows);
    for ((k, u), share) in family.members.iter().zip(&shares) {
        let mut capacity = basis
            .keys
            .iter()
            .zip(&basis.capacity_seconds)
            .find(|(key, _)| *key == k)
            .map_or(0.0, |(_, c)| *c);
        if let Some((shards, worth)) = shard_seconds {
            capacity = if k == SHARE_TYPE {
                shards
            } else if *k == family.whole {
                (capacity - shards * f64::from(worth) / f64::from(*u)).max(0.0)
            } else {
                capacity
            };
        }
        let to_type = share / f64::from(*u);
        totals.capacity += capacity;
        totals.unallocated += split.totals.unallocated * to_type;
        totals.over_lendable += split.totals.over_lendable * to_type;
        priced.push(type_usage(basis, k, capacity, to_type, &split, rows));
    }
    totals.allocated = priced_allocated(rows, family);
    (priced, totals)
}

/// Shards (issue 30) have no capacity of their own: they are shares of the whole type's
/// GPUs. The shard-seconds the family's teams held, with a shard's worth in units, so that the
/// shards are priced as capacity they used and the whole type's capacity is lowered by as
/// much (its idle cost is then what no GPU, whole or shared, held); `None` without shards.
fn shard_capacity(family: &FamilyQuotas, rows: &SplitRows) -> Option<(f64, u32)> {
    let worth = family.units_of(SHARE_TYPE)?;
    let held = rows
        .rows
        .iter()
        .flat_map(|r| r.by_type.iter())
        .filter(|t| t.gpu_type == SHARE_TYPE)
        .map(|t| t.in_quota_seconds + t.borrowed_seconds)
        .sum();
    Some((held, worth))
}

/// Each member type's share of the family's capacity in units over the period (equal shares
/// where the family had none).
fn capacity_shares(basis: &ReportBasis, family: &FamilyQuotas) -> Vec<f64> {
    let units: Vec<f64> = family
        .members
        .iter()
        .map(|(k, u)| {
            let c = basis
                .keys
                .iter()
                .zip(&basis.capacity_seconds)
                .find(|(key, _)| *key == k)
                .map_or(0.0, |(_, c)| *c);
            c * f64::from(*u)
        })
        .collect();
    let total: f64 = units.iter().sum();
    let n = units.len().max(1) as f64;
    units
        .iter()
        .map(|c| if total > 0.0 { c / total } else { 1.0 / n })
        .collect()
}

/// One row of the family's split, brought back to its member types.
fn add_row(
    basis: &ReportBasis,
    family: &FamilyQuotas,
    shares: &[f64],
    r: &crate::model::usage::TeamSplit,
    rows: &mut SplitRows,
) {
    let i = rows.of(basis, &r.team);
    let row = &mut rows.rows[i];
    let used = basis.account_of(&r.team);
    let used_units = |k: &str, u: u32| {
        used.and_then(|a| a.of_key(k))
            .map_or(0.0, |k| k.gpu_seconds as f64 * f64::from(u))
    };
    let all_units: f64 = family.members.iter().map(|(k, u)| used_units(k, *u)).sum();
    let team_quota = family
        .teams
        .iter()
        .find(|t| t.name == r.team)
        .map(|t| t.quota);
    let kind = row.kind;
    for ((k, u), share) in family.members.iter().zip(shares) {
        let by_use = if all_units > 0.0 {
            used_units(k, *u) / all_units
        } else {
            0.0
        };
        let to_type = |units: f64, part: f64| units * part / f64::from(*u);
        let (in_quota, borrowed) = (to_type(r.in_quota, by_use), to_type(r.borrowed, by_use));
        let (quota, lent) = (to_type(r.quota, *share), to_type(r.lent, *share));
        row.quota_seconds += quota;
        row.in_quota_seconds += in_quota;
        row.borrowed_seconds += borrowed;
        row.lent_seconds += lent;
        let jobs_seconds = used
            .and_then(|a| a.of_key(k))
            .map(|x| (x.jobs, x.gpu_seconds));
        let t = row.type_row(k, basis.with_cost);
        // The family's quota in GPU-equivalents, on the whole type's line.
        t.quota = team_quota
            .filter(|_| kind == RowKind::Team && *k == family.whole)
            .map(|q| q / family.per_gpu.max(1));
        t.jobs = jobs_seconds.map_or(0, |x| x.0);
        t.gpu_seconds = jobs_seconds.map_or(0, |x| x.1);
        t.quota_seconds = Some(quota);
        t.in_quota_seconds = in_quota;
        t.borrowed_seconds = borrowed;
        t.lent_seconds = lent;
    }
}

/// A member type's priced usage: its capacity, and the family's hours at this type's share.
fn type_usage(
    basis: &ReportBasis,
    k: &str,
    capacity: f64,
    to_type: f64,
    split: &UsageSplit,
    rows: &SplitRows,
) -> TypedUsage {
    TypedUsage {
        gpu_type: k.to_string(),
        rate_per_hour: basis.rate_of(k),
        capacity_hours: capacity / SECONDS_PER_HOUR,
        unallocated_hours: split.totals.unallocated * to_type / SECONDS_PER_HOUR,
        teams: split
            .rows
            .iter()
            .filter(|r| r.team != POOL)
            .map(|r| {
                let t = rows.row(&r.team).and_then(|row| row.of_type(k));
                TeamHours {
                    team: r.team.clone(),
                    quota_hours: r.quota * to_type / SECONDS_PER_HOUR,
                    in_quota_hours: t.map_or(0.0, |t| t.in_quota_hours()),
                    borrowed_hours: t.map_or(0.0, |t| t.borrowed_hours()),
                }
            })
            .collect(),
    }
}

/// The family's allocated GPU-seconds, each type's in its own GPUs.
fn priced_allocated(rows: &SplitRows, family: &FamilyQuotas) -> f64 {
    rows.rows
        .iter()
        .flat_map(|r| r.by_type.iter())
        .filter(|t| family.units_of(&t.gpu_type).is_some())
        .map(|t| t.in_quota_seconds + t.borrowed_seconds)
        .sum()
}
