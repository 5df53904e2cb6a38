//! Slurm's classic fair-share factor (DESIGN §5; Slurm's `classic_fair_share.shtml`,
//! `PriorityFlags=NO_FAIR_TREE`).
//!
//! F = 2^(-U/S/d): U is the usage normalised by the total usage, both decayed with a half-life;
//! S the normalised shares; d the dampening factor (`FairShareDampeningFactor`, >= 1). F = 0.5
//! when a team used exactly its share, above when it used less, below when it used more.
//!
//! Teams are one tier of accounts under the root, where Slurm's effective usage is the actual
//! usage: [`factors`] is all teamshare needs. [`hierarchy_factors`] computes Slurm's effective
//! usage through a tree of accounts and users, the form in which Slurm's documentation gives
//! its worked example, so that the formula is checked against the published numbers.

use std::collections::BTreeMap;
use std::time::Duration;

use teamshare_config::Config;

use super::usage::Run;
use crate::period::UnixSeconds;

/// Every team's fair-share weight, the shares [`factors`] takes.
pub fn weights_from_config(config: &Config) -> BTreeMap<String, u32> {
    config
        .teams
        .iter()
        .map(|team| (team.name.clone(), team.weight))
        .collect()
}

/// Each team's usage decayed to `now`, in GPU-seconds: a GPU-second used at t counts
/// 2^(-(now - t)/h) (Slurm's `PriorityDecayHalfLife` h), integrated exactly over each run
/// ([`decayed_seconds`]). Usage after `now` does not count (a run's end is clipped to `now`). A
/// zero half-life means no decay, as in Slurm: plain GPU-seconds. Every account with a run
/// appears, possibly with 0.
pub fn decayed_usage(runs: &[Run], now: UnixSeconds, half_life: Duration) -> BTreeMap<String, f64> {
    decayed_weighted_usage(runs.iter().map(|run| (run, 1.0)), now, half_life)
}

/// [`decayed_usage`] with each run's GPU-seconds multiplied by its weight: with each run's mean
/// hourly rate per GPU as its weight, the decayed cost of each team's usage (what the fair-share
/// factor is computed from, so that an hour of an expensive GPU counts for more than an hour of
/// a cheap one). A weight that is not finite and positive counts as 0.
pub fn decayed_weighted_usage<'r>(
    runs: impl IntoIterator<Item = (&'r Run, f64)>,
    now: UnixSeconds,
    half_life: Duration,
) -> BTreeMap<String, f64> {
    let mut usage: BTreeMap<String, f64> = BTreeMap::new();
    for (run, weight) in runs {
        let weight = if weight.is_finite() && weight > 0.0 {
            weight
        } else {
            0.0
        };
        let used =
            f64::from(run.gpus) * weight * decayed_seconds(run.start, run.end, now, half_life);
        match usage.get_mut(&*run.team) {
            Some(u) => *u += used,
            None => {
                usage.insert(run.team.to_string(), used);
            }
        }
    }
    usage
}

/// The seconds of `[start, end)` (clipped to `now`) decayed to `now` with half-life h:
///
/// ∫ from s to e of 2^(-(now - t)/h) dt = h/ln 2 x 2^(-(now - e)/h) x (1 - 2^(-(e - s)/h)).
///
/// A zero half-life means no decay: plain seconds.
pub fn decayed_seconds(
    start: UnixSeconds,
    end: UnixSeconds,
    now: UnixSeconds,
    half_life: Duration,
) -> f64 {
    let h = half_life.as_secs_f64();
    let end = end.min(now);
    if start >= end {
        return 0.0;
    }
    let seconds = (end - start) as f64;
    if h == 0.0 {
        return seconds;
    }
    // k = ln 2 / h; expm1 keeps short runs exact where 1 - 2^(-x) would cancel.
    let k = std::f64::consts::LN_2 / h;
    (-k * (now - end) as f64).exp() * -(-k * seconds).exp_m1() / k
}

/// The fair-share factor of an association with normalised (effective) usage `usage` and
/// normalised shares `shares`: 2^(-usage/shares/d). No usage gives 1; usage without shares 0
/// (as Slurm). A dampening below 1 (or NaN), which the configuration never gives, counts as 1.
pub fn factor(usage: f64, shares: f64, dampening: f64) -> f64 {
    let d = if dampening >= 1.0 { dampening } else { 1.0 };
    if usage.is_nan() || usage <= 0.0 {
        1.0
    } else if shares.is_nan() || shares <= 0.0 {
        0.0
    } else {
        (-usage / shares / d).exp2()
    }
}

/// The fair-share factor of each team in `shares` (team -> weight; its normalised share is its
/// weight over the sum of weights), from its usage in `usage` (e.g. [`decayed_usage`]) normalised
/// by the total usage of every account in `usage`, including accounts without shares. A team with
/// no usage gets 1, and so does every team when there is no usage at all.
pub fn factors(
    shares: &BTreeMap<String, u32>,
    usage: &BTreeMap<String, f64>,
    dampening: f64,
) -> BTreeMap<String, f64> {
    team_fair_shares(shares, usage, dampening)
        .into_iter()
        .map(|a| (a.path, a.factor))
        .collect()
}

/// [`factors`] with every figure of each team (normalised shares, normalised usage, factor), in
/// the order of `shares`. A team with weight 0 has no shares: any usage gives it factor 0.
pub fn team_fair_shares(
    shares: &BTreeMap<String, u32>,
    usage: &BTreeMap<String, f64>,
    dampening: f64,
) -> Vec<AssociationFairShare> {
    // f64::max drops NaN: a NaN usage counts as none.
    let total: f64 = usage.values().map(|u| u.max(0.0)).sum();
    let normalised = |team: &str| match usage.get(team) {
        Some(&u) if total > 0.0 => u.max(0.0) / total,
        _ => 0.0,
    };
    let teams: Vec<Association> = shares
        .iter()
        .map(|(team, &weight)| Association {
            name: team.clone(),
            shares: weight,
            usage: normalised(team),
            children: Vec::new(),
        })
        .collect();
    hierarchy_factors(&teams, dampening)
}

/// An account or user in Slurm's association tree.
#[derive(Debug, Clone, PartialEq)]
pub struct Association {
    pub name: String,
    /// Raw shares (`sacctmgr ... fairshare=`), relative to the association's siblings.
    pub shares: u32,
    /// Normalised usage charged to this association itself (a user's; an account's own jobs),
    /// as a fraction of the total usage. An account's actual usage is this plus its children's.
    pub usage: f64,
    pub children: Vec<Association>,
}

/// One association's figures, as Slurm's documentation names them.
#[derive(Debug, Clone, PartialEq)]
pub struct AssociationFairShare {
    /// The names from the top tier down, joined by `/`: `A/B/user1`.
    pub path: String,
    /// S: the product of shares / sibling shares from the top tier down.
    pub normalized_shares: f64,
    /// UA: the association's usage plus its descendants'.
    pub actual_usage: f64,
    /// UE: UA at the top tier; below it UA + (UE_parent - UA) x shares / sibling shares.
    pub effective_usage: f64,
    /// 2^(-UE/S/d), see [`factor`].
    pub factor: f64,
}

/// Slurm's classic fair-share for every association of a tree whose top tier (the children of
/// the root) is `top`; in pre-order (each association before its children, siblings in the
/// order given).
pub fn hierarchy_factors(top: &[Association], dampening: f64) -> Vec<AssociationFairShare> {
    let mut out = Vec::new();
    visit_siblings(top, None, dampening, &mut out);
    out
}

/// The figures of the parent that the children's figures derive from.
struct Parent<'p> {
    path: &'p str,
    normalized_shares: f64,
    effective_usage: f64,
}

fn visit_siblings(
    siblings: &[Association],
    parent: Option<&Parent<'_>>,
    dampening: f64,
    out: &mut Vec<AssociationFairShare>,
) {
    let sibling_shares: u64 = siblings.iter().map(|a| u64::from(a.shares)).sum();
    for association in siblings {
        let share_of_siblings = if sibling_shares == 0 {
            0.0
        } else {
            f64::from(association.shares) / sibling_shares as f64
        };
        let actual_usage = actual_usage(association);
        let (path, normalized_shares, effective_usage) = match parent {
            None => (association.name.clone(), share_of_siblings, actual_usage),
            Some(parent) => (
                format!("{}/{}", parent.path, association.name),
                parent.normalized_shares * share_of_siblings,
                actual_usage + (parent.effective_usage - actual_usage) * share_of_siblings,
            ),
        };
        let index = out.len();
        out.push(AssociationFairShare {
            path,
            normalized_shares,
            actual_usage,
            effective_usage,
            factor: factor(effective_usage, normalized_shares, dampening),
        });
        if !association.children.is_empty() {
            let path = out[index].path.clone();
            let this = Parent {
                path: &path,
                normalized_shares,
                effective_usage,
            };
            visit_siblings(&association.children, Some(&this), dampening, out);
        }
    }
}

fn actual_usage(association: &Association) -> f64 {
    association.usage.max(0.0) + association.children.iter().map(actual_usage).sum::<f64>()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(team: &str, gpus: u32, start: i64, end: i64) -> Run {
        Run {
            team: team.into(),
            gpus,
            start,
            end,
        }
    }

    #[test]
    fn no_half_life_means_no_decay_and_the_future_does_not_count() {
        let usage = decayed_usage(
            &[
                run("a", 2, 0, 100),
                run("a", 1, 50, 500),
                run("b", 1, 200, 300),
            ],
            100,
            Duration::ZERO,
        );
        assert_eq!(usage["a"], 250.0);
        assert_eq!(usage["b"], 0.0);
    }

    #[test]
    fn weights_multiply_gpu_seconds_and_a_common_weight_changes_no_factor() {
        let runs = [run("a", 2, 0, 100), run("b", 1, 0, 100)];
        let weighted = decayed_weighted_usage(
            [(&runs[0], 4.0), (&runs[1], 2.0)],
            100,
            Duration::from_secs(3600),
        );
        let plain = decayed_usage(&runs, 100, Duration::from_secs(3600));
        assert!((weighted["a"] - 4.0 * plain["a"]).abs() < 1e-9);
        assert!((weighted["b"] - 2.0 * plain["b"]).abs() < 1e-9);
        // A weight that is not a positive number counts for nothing.
        let odd = decayed_weighted_usage(
            [(&runs[0], f64::NAN), (&runs[1], -1.0)],
            100,
            Duration::ZERO,
        );
        assert_eq!((odd["a"], odd["b"]), (0.0, 0.0));
        // The same weight everywhere: the same factors (usage is normalised).
        let shares = BTreeMap::from([("a".to_string(), 1), ("b".to_string(), 1)]);
        let same = decayed_weighted_usage(runs.iter().map(|r| (r, 3.5)), 100, Duration::ZERO);
        let f_same = factors(&shares, &same, 1.0);
        let f_plain = factors(&shares, &decayed_usage(&runs, 100, Duration::ZERO), 1.0);
        for team in ["a", "b"] {
            assert!((f_same[team] - f_plain[team]).abs() < 1e-12, "{team}");
        }
        assert_eq!(decayed_seconds(50, 40, 100, Duration::ZERO), 0.0);
        assert_eq!(decayed_seconds(50, 400, 100, Duration::ZERO), 50.0);
    }

    #[test]
    fn factor_edges() {
        assert_eq!(factor(0.0, 0.0, 1.0), 1.0);
        assert_eq!(factor(0.1, 0.0, 1.0), 0.0);
        assert_eq!(factor(0.5, 0.5, 1.0), 0.5);
        assert_eq!(factor(0.5, 0.5, 0.0), 0.5);
        assert!((factor(0.5, 0.5, 2.0) - 0.5f64.sqrt()).abs() < 1e-15);
    }

    #[test]
    fn no_usage_at_all_gives_one_to_every_team() {
        let shares = BTreeMap::from([("a".to_string(), 1), ("b".to_string(), 3)]);
        let usage = BTreeMap::from([("a".to_string(), 0.0)]);
        let f = factors(&shares, &usage, 1.0);
        assert_eq!(f, BTreeMap::from([("a".into(), 1.0), ("b".into(), 1.0)]));
        assert_eq!(factors(&shares, &BTreeMap::new(), 1.0).len(), 2);
    }
}
