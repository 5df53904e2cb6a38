//! The teams report's prices: list prices of the GPU-hours used, the model's allocated, idle and
//! total costs per row and type, and the capacity per type with its cost.

use crate::model::cost::{CostReport, IDLE};

use super::compute::ReportBasis;
use super::{RowKind, TeamRow, TypeCapacity};
use crate::report::SECONDS_PER_HOUR;

/// The list price of `gpu_seconds` at `rate_per_hour`.
pub(super) fn list_price(gpu_seconds: u128, rate_per_hour: f64) -> f64 {
    gpu_seconds as f64 * rate_per_hour / SECONDS_PER_HOUR
}

/// Jobs, exact GPU-seconds and list prices.
pub(super) fn add_usage_and_list_prices(basis: &ReportBasis, rows: &mut [TeamRow]) {
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
pub(super) fn add_costs(rows: &mut Vec<TeamRow>, costs: &CostReport) {
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
pub(super) fn capacity_by_type(
    basis: &ReportBasis,
    costs: Option<&CostReport>,
) -> Vec<TypeCapacity> {
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
