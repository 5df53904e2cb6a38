//! The accounting model (DESIGN §5): pure arithmetic over plain values, no I/O.
//!
//! - `usage`: the in-quota / borrowed / lent split of GPU-seconds per team over a period, and per
//!   day (per GPU type where quotas are typed: the caller splits each type apart);
//! - `cost`: allocated and idle cost per team, with the idle cost split by the configured rule;
//! - `fairshare`: decayed usage (plain, or weighted by each GPU's rate) and Slurm's classic
//!   fair-share factor.

pub mod cost;
pub mod fairshare;
pub mod family;
pub mod usage;

pub use cost::{
    team_costs, CostReport, CostRule, TeamCost, TeamHours, TypeCost, TypeCostTotals, TypedUsage,
    IDLE,
};
pub use fairshare::{
    decayed_seconds, decayed_usage, decayed_weighted_usage, factor, factors, hierarchy_factors,
    team_fair_shares, weights_from_config, Association, AssociationFairShare,
};
pub use family::FamilyQuotas;
pub use usage::{
    peak_gpus, split_usage, split_usage_by_day, CapacityStep, DaySplit, Run, SplitTotals,
    TeamQuota, TeamSplit, UsageSplit, POOL,
};

/// The index of the item of `items` that `matches` accepts, `*last` tried first (runs come with
/// few distinct accounts, often the same one many times in a row); `make` appends one when none
/// does. `*last` becomes the index returned.
pub(crate) fn find_or_push<T>(
    items: &mut Vec<T>,
    last: &mut usize,
    matches: impl Fn(&T) -> bool,
    make: impl FnOnce() -> T,
) -> usize {
    if !items.get(*last).is_some_and(&matches) {
        *last = match items.iter().position(&matches) {
            Some(i) => i,
            None => {
                items.push(make());
                items.len() - 1
            }
        };
    }
    *last
}

/// Whether two strings are equal, the same string first: runs share their account's and GPU
/// type's strings, so most comparisons are of a string with itself.
pub(crate) fn same_str(a: &str, b: &str) -> bool {
    std::ptr::eq(a, b) || a == b
}
