//! Cost per team over a period (DESIGN §5).
//!
//! Per GPU type k with hourly rate r_k, and a borrowed-cost factor f:
//! - a team's allocated cost is r_k x (in-quota hours + f x borrowed hours);
//! - the capacity cost is r_k x capacity hours (the governed GPUs, used or not);
//! - the idle cost is what is left: capacity cost - the sum of allocated costs;
//! - the idle cost is split among the rows by the configured [`IdleCostSplit`].
//!
//! So every row is allocated + idle cost, and the rows add up to the capacity cost.

use std::collections::BTreeMap;

use teamshare_config::{AccountdSettings, IdleCostSplit};

use super::usage::{UsageSplit, POOL};

/// The row that holds the idle cost no team is charged.
pub const IDLE: &str = "(idle)";

const SECONDS_PER_HOUR: f64 = 3600.0;

/// How usage is priced: the `[accountd]` settings that matter to cost.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CostRule {
    /// Multiplies the cost of borrowed GPU-hours (preemptible work may be cheaper); >= 0.
    pub borrowed_cost_factor: f64,
    pub idle_split: IdleCostSplit,
}

impl CostRule {
    pub fn from_settings(settings: &AccountdSettings) -> Self {
        CostRule {
            borrowed_cost_factor: settings.borrowed_cost_factor,
            idle_split: settings.idle_cost_split,
        }
    }
}

/// One team's GPU-hours of one GPU type.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct TeamHours {
    pub team: String,
    /// The team's quota over the period (Q_T x length): its weight under
    /// [`IdleCostSplit::QuotaShare`].
    pub quota_hours: f64,
    pub in_quota_hours: f64,
    pub borrowed_hours: f64,
}

/// The usage of one GPU type over the period, and its price.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct TypedUsage {
    /// The gres type, `"default"` for untyped GPUs.
    pub gpu_type: String,
    pub rate_per_hour: f64,
    /// The governed capacity of this type integrated over the period.
    pub capacity_hours: f64,
    /// The capacity no team has a quota on, max(0, C - sum of Q), integrated over the period:
    /// the `(idle)` row's weight under [`IdleCostSplit::QuotaShare`].
    pub unallocated_hours: f64,
    pub teams: Vec<TeamHours>,
}

impl TypedUsage {
    /// The hours of a usage split (of GPUs of `gpu_type`); its `(pool)` row becomes
    /// `unallocated_hours`.
    pub fn from_split(gpu_type: &str, rate_per_hour: f64, split: &UsageSplit) -> Self {
        TypedUsage {
            gpu_type: gpu_type.to_string(),
            rate_per_hour,
            capacity_hours: split.totals.capacity / SECONDS_PER_HOUR,
            unallocated_hours: split.totals.unallocated / SECONDS_PER_HOUR,
            teams: split
                .rows
                .iter()
                .filter(|row| row.team != POOL)
                .map(|row| TeamHours {
                    team: row.team.clone(),
                    quota_hours: row.quota / SECONDS_PER_HOUR,
                    in_quota_hours: row.in_quota / SECONDS_PER_HOUR,
                    borrowed_hours: row.borrowed / SECONDS_PER_HOUR,
                })
                .collect(),
        }
    }
}

/// One row of the cost report, in the cluster's currency.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct TeamCost {
    pub team: String,
    pub allocated_cost: f64,
    pub idle_cost: f64,
    /// `allocated_cost + idle_cost`.
    pub total_cost: f64,
    /// The same per GPU type, one entry per [`TypedUsage`] that gave the row a cost or a weight,
    /// in the order of the usage given; they add up to the row's figures.
    pub by_type: Vec<TypeCost>,
}

/// A row's cost of one GPU type.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct TypeCost {
    pub gpu_type: String,
    pub allocated_cost: f64,
    pub idle_cost: f64,
    /// `allocated_cost + idle_cost`.
    pub total_cost: f64,
}

/// The costs of one GPU type over every row.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct TypeCostTotals {
    pub gpu_type: String,
    pub rate_per_hour: f64,
    /// rate x capacity hours.
    pub capacity_cost: f64,
    /// The sum of the teams' allocated cost of this type.
    pub allocated_cost: f64,
    /// `capacity_cost - allocated_cost`: negative when the type's usage exceeds its recorded
    /// capacity (or, with a borrowed factor above 1, by the surcharge).
    pub idle_cost: f64,
}

#[derive(Debug, Clone, PartialEq)]
pub struct CostReport {
    /// Teams by name, then the `(idle)` row (always present). The rows' `total_cost` add up to
    /// `capacity_cost`.
    pub rows: Vec<TeamCost>,
    pub capacity_cost: f64,
    /// The sum of the rows' `idle_cost`.
    pub idle_cost: f64,
    /// The part of `idle_cost` that is the price cut given to borrowed work:
    /// sum of r x (1 - f) x borrowed hours (negative when f > 1).
    pub borrowed_discount: f64,
    /// Per GPU type, in the order of the usage given.
    pub types: Vec<TypeCostTotals>,
}

impl CostReport {
    /// The row of `team` (or of [`IDLE`]).
    pub fn row(&self, team: &str) -> Option<&TeamCost> {
        self.rows.iter().find(|row| row.team == team)
    }
}

/// The cost per team of the usage of every GPU type.
///
/// The idle cost is the capacity cost minus the allocated costs *as charged*, that is with
/// borrowed hours at the factor f: it is the capacity cost minus the allocated cost at f = 1, plus
/// the discount r x (1 - f) x borrowed hours. The discount is capacity that was paid for and
/// not charged to the team that used it; counting it as idle cost, split like the rest, keeps the
/// rows adding up to the capacity cost. With f > 1 the surcharge lowers the idle cost instead.
/// When usage exceeds the recorded capacity (a capacity history that misses GPUs) the idle cost
/// is negative and is split the same way, so the rows still add up.
///
/// Each type's idle cost is split by that type's weights:
/// - `QuotaShare`: each team's quota hours; the unallocated hours go to `(idle)`;
/// - `UsageShare`: each team's allocated hours (in-quota + borrowed, the OpenCost rule);
/// - `IdleRow`: all to `(idle)`.
///
/// When the weights are all zero (no quotas, or no usage) the type's idle cost goes to `(idle)`.
pub fn team_costs(usage: &[TypedUsage], rule: CostRule) -> CostReport {
    let factor = rule.borrowed_cost_factor;
    let mut rows: BTreeMap<&str, TeamCost> = BTreeMap::new();
    let mut idle_row = TeamCost {
        team: IDLE.to_string(),
        ..TeamCost::default()
    };
    let (mut capacity_cost, mut idle_cost, mut borrowed_discount) = (0.0, 0.0, 0.0);
    let mut types = Vec::with_capacity(usage.len());

    for typed in usage {
        let rate = typed.rate_per_hour;
        let gpu_type = typed.gpu_type.as_str();
        let mut allocated_total = 0.0;
        for hours in &typed.teams {
            let allocated = rate * (hours.in_quota_hours + factor * hours.borrowed_hours);
            allocated_total += allocated;
            borrowed_discount += rate * (1.0 - factor) * hours.borrowed_hours;
            let row = row(&mut rows, &hours.team);
            row.allocated_cost += allocated;
            type_cost(row, gpu_type).allocated_cost += allocated;
        }
        let capacity = rate * typed.capacity_hours;
        let idle = capacity - allocated_total;
        capacity_cost += capacity;
        idle_cost += idle;
        types.push(TypeCostTotals {
            gpu_type: gpu_type.to_string(),
            rate_per_hour: rate,
            capacity_cost: capacity,
            allocated_cost: allocated_total,
            idle_cost: idle,
        });

        let (weights, unclaimed): (Vec<f64>, f64) = match rule.idle_split {
            IdleCostSplit::QuotaShare => (
                typed.teams.iter().map(|h| h.quota_hours).collect(),
                typed.unallocated_hours,
            ),
            IdleCostSplit::UsageShare => (
                typed
                    .teams
                    .iter()
                    .map(|h| h.in_quota_hours + h.borrowed_hours)
                    .collect(),
                0.0,
            ),
            IdleCostSplit::IdleRow => (Vec::new(), 0.0),
        };
        let total_weight: f64 = weights.iter().sum::<f64>() + unclaimed;
        let unclaimed_idle = if total_weight > 0.0 {
            for (hours, weight) in typed.teams.iter().zip(&weights) {
                let share = idle * weight / total_weight;
                let row = row(&mut rows, &hours.team);
                row.idle_cost += share;
                type_cost(row, gpu_type).idle_cost += share;
            }
            idle * unclaimed / total_weight
        } else {
            idle
        };
        idle_row.idle_cost += unclaimed_idle;
        type_cost(&mut idle_row, gpu_type).idle_cost += unclaimed_idle;
    }

    let mut rows: Vec<TeamCost> = rows.into_values().collect();
    rows.push(idle_row);
    for row in &mut rows {
        row.total_cost = row.allocated_cost + row.idle_cost;
        for t in &mut row.by_type {
            t.total_cost = t.allocated_cost + t.idle_cost;
        }
    }
    CostReport {
        rows,
        capacity_cost,
        idle_cost,
        borrowed_discount,
        types,
    }
}

fn row<'a, 'n>(rows: &'a mut BTreeMap<&'n str, TeamCost>, team: &'n str) -> &'a mut TeamCost {
    rows.entry(team).or_insert_with(|| TeamCost {
        team: team.to_string(),
        ..TeamCost::default()
    })
}

/// The row's entry for `gpu_type` (the last one is the usual one: types are summed in turn).
fn type_cost<'a>(row: &'a mut TeamCost, gpu_type: &str) -> &'a mut TypeCost {
    let index = match row.by_type.iter().rposition(|t| t.gpu_type == gpu_type) {
        Some(i) => i,
        None => {
            row.by_type.push(TypeCost {
                gpu_type: gpu_type.to_string(),
                ..TypeCost::default()
            });
            row.by_type.len() - 1
        }
    };
    &mut row.by_type[index]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hours(team: &str, quota: f64, in_quota: f64, borrowed: f64) -> TeamHours {
        TeamHours {
            team: team.to_string(),
            quota_hours: quota,
            in_quota_hours: in_quota,
            borrowed_hours: borrowed,
        }
    }

    fn rule(factor: f64, idle_split: IdleCostSplit) -> CostRule {
        CostRule {
            borrowed_cost_factor: factor,
            idle_split,
        }
    }

    #[test]
    fn types_are_priced_apart_and_merged_per_team() {
        // h100 at 10/h: capacity 4 GPUs x 10 h; a 5 h in quota + 10 h borrowed (factor 0.5).
        // a100 at 2/h: capacity 2 GPUs x 10 h; a 10 h in quota, b 5 h in quota.
        let usage = [
            TypedUsage {
                gpu_type: "h100".into(),
                rate_per_hour: 10.0,
                capacity_hours: 40.0,
                unallocated_hours: 0.0,
                teams: vec![hours("a", 20.0, 5.0, 10.0), hours("b", 20.0, 0.0, 0.0)],
            },
            TypedUsage {
                gpu_type: "a100".into(),
                rate_per_hour: 2.0,
                capacity_hours: 20.0,
                unallocated_hours: 0.0,
                teams: vec![hours("a", 10.0, 10.0, 0.0), hours("b", 10.0, 5.0, 0.0)],
            },
        ];
        let report = team_costs(&usage, rule(0.5, IdleCostSplit::UsageShare));
        // h100: a allocated 10 x (5 + 0.5 x 10) = 100, capacity 400, idle 300, all to a (only
        // user). a100: a 20, b 10, capacity 40, idle 10 split 10:5 -> a 20/3, b 10/3.
        let a = report.row("a").unwrap();
        assert!((a.allocated_cost - 120.0).abs() < 1e-9);
        assert!((a.idle_cost - (300.0 + 20.0 / 3.0)).abs() < 1e-9);
        let b = report.row("b").unwrap();
        assert!((b.allocated_cost - 10.0).abs() < 1e-9);
        assert!((b.idle_cost - 10.0 / 3.0).abs() < 1e-9);
        assert_eq!(report.row(IDLE).unwrap().total_cost, 0.0);
        assert!((report.capacity_cost - 440.0).abs() < 1e-9);
        assert!((report.borrowed_discount - 50.0).abs() < 1e-9);
        // The same per type: a's h100 100 + 300, a100 20 + 20/3.
        let types: Vec<(&str, f64, f64)> = a
            .by_type
            .iter()
            .map(|t| (t.gpu_type.as_str(), t.allocated_cost, t.idle_cost))
            .collect();
        assert_eq!(types[0], ("h100", 100.0, 300.0));
        assert_eq!((types[1].0, types[1].1), ("a100", 20.0));
        assert!((types[1].2 - 20.0 / 3.0).abs() < 1e-9);
        assert_eq!(types.len(), 2);
        let totals: Vec<(&str, f64, f64, f64)> = report
            .types
            .iter()
            .map(|t| {
                (
                    t.gpu_type.as_str(),
                    t.capacity_cost,
                    t.allocated_cost,
                    t.idle_cost,
                )
            })
            .collect();
        assert_eq!(
            totals,
            [("h100", 400.0, 100.0, 300.0), ("a100", 40.0, 30.0, 10.0)]
        );
        // Every row's types add up to the row.
        for row in &report.rows {
            let idle: f64 = row.by_type.iter().map(|t| t.idle_cost).sum();
            let total: f64 = row.by_type.iter().map(|t| t.total_cost).sum();
            assert!((idle - row.idle_cost).abs() < 1e-9, "{row:?}");
            assert!((total - row.total_cost).abs() < 1e-9, "{row:?}");
        }
    }

    #[test]
    fn without_weights_the_idle_cost_stays_in_the_idle_row() {
        let usage = [TypedUsage {
            gpu_type: "default".into(),
            rate_per_hour: 3.0,
            capacity_hours: 10.0,
            unallocated_hours: 0.0,
            teams: vec![hours("a", 0.0, 0.0, 0.0)],
        }];
        for split in [
            IdleCostSplit::QuotaShare,
            IdleCostSplit::UsageShare,
            IdleCostSplit::IdleRow,
        ] {
            let report = team_costs(&usage, rule(1.0, split));
            assert_eq!(report.row(IDLE).unwrap().idle_cost, 30.0);
            assert_eq!(report.row("a").unwrap().total_cost, 0.0);
        }
        let empty = team_costs(&[], rule(1.0, IdleCostSplit::QuotaShare));
        assert_eq!(empty.rows.len(), 1);
        assert_eq!(empty.capacity_cost, 0.0);
    }
}
