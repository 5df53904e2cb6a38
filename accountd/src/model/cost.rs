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
    let mut idle_row = 0.0;
    let (mut capacity_cost, mut idle_cost, mut borrowed_discount) = (0.0, 0.0, 0.0);

    for typed in usage {
        let rate = typed.rate_per_hour;
        let mut allocated_total = 0.0;
        for hours in &typed.teams {
            let allocated = rate * (hours.in_quota_hours + factor * hours.borrowed_hours);
            allocated_total += allocated;
            borrowed_discount += rate * (1.0 - factor) * hours.borrowed_hours;
            row(&mut rows, &hours.team).allocated_cost += allocated;
        }
        let capacity = rate * typed.capacity_hours;
        let idle = capacity - allocated_total;
        capacity_cost += capacity;
        idle_cost += idle;

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
        if total_weight > 0.0 {
            for (hours, weight) in typed.teams.iter().zip(&weights) {
                row(&mut rows, &hours.team).idle_cost += idle * weight / total_weight;
            }
            idle_row += idle * unclaimed / total_weight;
        } else {
            idle_row += idle;
        }
    }

    let mut rows: Vec<TeamCost> = rows.into_values().collect();
    rows.push(TeamCost {
        team: IDLE.to_string(),
        allocated_cost: 0.0,
        idle_cost: idle_row,
        total_cost: 0.0,
    });
    for row in &mut rows {
        row.total_cost = row.allocated_cost + row.idle_cost;
    }
    CostReport {
        rows,
        capacity_cost,
        idle_cost,
        borrowed_discount,
    }
}

fn row<'a, 'n>(rows: &'a mut BTreeMap<&'n str, TeamCost>, team: &'n str) -> &'a mut TeamCost {
    rows.entry(team).or_insert_with(|| TeamCost {
        team: team.to_string(),
        ..TeamCost::default()
    })
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
