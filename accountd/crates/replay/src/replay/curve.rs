//! The capacity curve's smaller clusters: which GPUs go, and what a candidate's quotas become
//! there.
//!
//! A configuration whose quotas add up to more than the cluster has is not one teamshare runs
//! (`accountd check-config --capacity N` refuses it, and the guarantees no longer hold), so a
//! curve point is replayed only with a valid configuration, made by the [`QuotaRule`] the
//! administrator chose:
//!
//! - [`QuotaRule::Scale`] (the default): where the quotas no longer fit, they shrink in
//!   proportion until they do, per GPU type and then in all (largest remainder: the sum is
//!   exactly what fits, and a quota moves by less than one GPU from its exact share); the
//!   lend limits shrink with them. Borrow limits stay as written.
//! - [`QuotaRule::Keep`]: the quotas as written; a point where they do not fit is not replayed.
//!
//! A point that is not replayed is listed with the reason ([`SkippedPoint`]).

use std::collections::BTreeMap;

use serde::Serialize;
use teamshare_config::Config;

use super::{Cluster, Trace};

/// What a curve point does with quotas that no longer fit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum QuotaRule {
    Scale,
    Keep,
}

impl QuotaRule {
    pub fn describe(self) -> &'static str {
        match self {
            QuotaRule::Scale => {
                "quotas that no longer fit are scaled down in proportion (per GPU type, then in all), lend limits with them"
            }
            QuotaRule::Keep => {
                "quotas as written: a capacity below their sum is not replayed"
            }
        }
    }
}

/// A curve point that was not replayed, and why.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SkippedPoint {
    pub candidate: String,
    pub gpus: u32,
    pub reason: String,
}

/// The GPUs of `cluster`, in all and per GPU type.
pub fn capacity_of(cluster: &Cluster) -> (u32, BTreeMap<String, u32>) {
    let mut by_type: BTreeMap<String, u32> = BTreeMap::new();
    let mut total = 0u32;
    for n in &cluster.nodes {
        total = total.saturating_add(n.gpus);
        if let Some(t) = &n.gpu_type {
            let e = by_type.entry(t.clone()).or_default();
            *e = e.saturating_add(n.gpus);
        }
    }
    (total, by_type)
}

/// The GPUs one step of the curve takes away where `--curve-step` is not given: a node's, the
/// most common node size of the trace (the larger on a tie).
pub fn default_step(trace: &Trace) -> u32 {
    let mut sizes: BTreeMap<u32, usize> = BTreeMap::new();
    for n in &trace.cluster.nodes {
        *sizes.entry(n.gpus).or_default() += 1;
    }
    sizes
        .into_iter()
        .max_by_key(|&(gpus, count)| (count, gpus))
        .map_or(1, |(gpus, _)| gpus.max(1))
}

/// `cluster` with `remove` GPUs fewer: taken from the nodes last by name first, whole nodes
/// while they fit, then from one node's GPUs (its drains kept); a removed node's drains go.
pub fn fewer_gpus(cluster: &Cluster, remove: u32) -> Cluster {
    let mut c = cluster.clone();
    let mut order: Vec<usize> = (0..c.nodes.len()).collect();
    order.sort_by(|a, b| c.nodes[*b].name.cmp(&c.nodes[*a].name));
    let mut left = remove;
    let mut gone = Vec::new();
    for i in order {
        if left == 0 {
            break;
        }
        let node = &mut c.nodes[i];
        if node.gpus <= left {
            left -= node.gpus;
            gone.push(node.name.clone());
            node.gpus = 0;
        } else {
            node.gpus -= left;
            left = 0;
        }
    }
    c.nodes.retain(|n| n.gpus > 0);
    c.drains.retain(|d| !gone.contains(&d.node));
    c
}

/// `config` as it would be on `cluster` under `rule`, with a phrase saying what became of its
/// quotas; an error (the reason, one line) where no valid configuration results.
pub fn config_at(
    config: &Config,
    cluster: &Cluster,
    rule: QuotaRule,
) -> Result<(Config, String), String> {
    let (total, by_type) = capacity_of(cluster);
    let first_problem = |c: &Config| {
        c.check_capacity(total, &by_type)
            .into_iter()
            .next()
            .map(|d| d.message)
    };
    let Some(problem) = first_problem(config) else {
        return Ok((config.clone(), "as configured".to_string()));
    };
    if rule == QuotaRule::Keep {
        return Err(problem);
    }
    let scaled = scale_quotas(config, total, &by_type);
    if let Some(problem) = first_problem(&scaled) {
        return Err(format!("scaled quotas still do not fit: {problem}"));
    }
    Ok((
        scaled.clone(),
        format!(
            "scaled to {} of {} GPUs",
            scaled.total_quota(),
            config.total_quota()
        ),
    ))
}

/// `config` with quotas that fit `total` GPUs and `by_type`: each type's typed quotas scaled
/// to the type's capacity where they exceed it, then the untyped quotas to what the typed
/// ones leave of `total` where all of them exceed it; lend limits at most the new quotas.
fn scale_quotas(config: &Config, total: u32, by_type: &BTreeMap<String, u32>) -> Config {
    let mut c = config.clone();
    let types: Vec<String> = c
        .teams
        .iter()
        .flat_map(|t| t.quota.by_type.keys().cloned())
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    for k in &types {
        let cap = family_capacity(config, k, by_type)
            .unwrap_or_else(|| by_type.get(k).copied().unwrap_or(0));
        let holders: Vec<usize> = (0..c.teams.len())
            .filter(|&i| c.teams[i].quota.by_type.contains_key(k))
            .collect();
        let values: Vec<u32> = holders.iter().map(|&i| c.teams[i].quota_of(k)).collect();
        for (&i, v) in holders.iter().zip(shrink(&values, cap)) {
            c.teams[i].quota.by_type.insert(k.clone(), v);
        }
    }
    for t in c.teams.iter_mut().filter(|t| t.quota.is_typed()) {
        t.quota.total = t.quota.by_type.values().sum();
    }
    let typed: u32 = c
        .teams
        .iter()
        .filter(|t| t.quota.is_typed())
        .map(|t| t.quota.total)
        .sum();
    let untyped: Vec<usize> = (0..c.teams.len())
        .filter(|&i| !c.teams[i].quota.is_typed())
        .collect();
    let values: Vec<u32> = untyped.iter().map(|&i| c.teams[i].quota.total).collect();
    for (&i, v) in untyped
        .iter()
        .zip(shrink(&values, total.saturating_sub(typed)))
    {
        c.teams[i].quota.total = v;
    }
    for t in &mut c.teams {
        t.lend_limit = t.lend_limit.min(t.quota.total);
        let quotas = t.quota.by_type.clone();
        if let Some(m) = &mut t.lend_by_type {
            for (k, v) in m.iter_mut() {
                *v = (*v).min(quotas.get(k).copied().unwrap_or(0));
            }
        }
    }
    c
}

/// A GPU family's capacity in whole GPUs, where `whole` is the whole type of one (issue 30:
/// a quota naming it counts the whole GPUs and slices together, at their size).
fn family_capacity(config: &Config, whole: &str, by_type: &BTreeMap<String, u32>) -> Option<u32> {
    let per_gpu = config.family_units(whole)?;
    let units: u64 = config
        .family_members(whole)
        .into_iter()
        .map(|(k, worth)| u64::from(by_type.get(k).copied().unwrap_or(0)) * u64::from(worth))
        .sum();
    u32::try_from(units / u64::from(per_gpu.max(1))).ok()
}

/// `values` scaled down to sum to `target` where they sum to more (largest remainder: each
/// gets the floor of its exact share, and the GPUs left go one each to the largest
/// fractions, the earlier on a tie); unchanged where they fit.
pub fn shrink(values: &[u32], target: u32) -> Vec<u32> {
    let sum: u64 = values.iter().map(|&v| u64::from(v)).sum();
    if sum <= u64::from(target) {
        return values.to_vec();
    }
    let exact: Vec<(u64, u64)> = values
        .iter()
        .map(|&v| {
            let num = u64::from(v) * u64::from(target);
            (num / sum, num % sum)
        })
        .collect();
    let mut out: Vec<u32> = exact
        .iter()
        .map(|&(q, _)| u32::try_from(q).unwrap_or(u32::MAX))
        .collect();
    let given: u64 = exact.iter().map(|&(q, _)| q).sum();
    let mut order: Vec<usize> = (0..values.len()).collect();
    order.sort_by_key(|&i| (std::cmp::Reverse(exact[i].1), i));
    for &i in order
        .iter()
        .take(usize::try_from(u64::from(target) - given).unwrap_or(0))
    {
        out[i] += 1;
    }
    out
}

#[cfg(test)]
mod tests;
