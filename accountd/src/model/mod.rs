//! The accounting model (DESIGN §5): pure arithmetic over plain values, no I/O.
//!
//! - `usage`: the in-quota / borrowed / lent split of GPU-seconds per team over a period, and per
//!   day;
//! - `cost`: allocated and idle cost per team, with the idle cost split by the configured rule;
//! - `fairshare`: decayed usage and Slurm's classic fair-share factor.

pub mod cost;
pub mod fairshare;
pub mod usage;

pub use cost::{team_costs, CostReport, CostRule, TeamCost, TeamHours, TypedUsage, IDLE};
pub use fairshare::{
    decayed_usage, factor, factors, hierarchy_factors, team_fair_shares, weights_from_config,
    Association, AssociationFairShare,
};
pub use usage::{
    split_usage, split_usage_by_day, CapacityStep, DaySplit, Run, SplitTotals, TeamQuota,
    TeamSplit, UsageSplit, POOL,
};
