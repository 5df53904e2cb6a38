//! Property tests of the accounting model on generated timelines: the invariants of DESIGN §5,
//! and the sweep checked against a second-by-second recomputation. proptest generates the
//! inputs and shrinks a failing one to a minimal case; failures are saved in
//! `model_properties.proptest-regressions` (next to this file, to commit) and rerun first.
//!
//! A soak sets `PROPTEST_CASES`, e.g. `PROPTEST_CASES=20000 cargo test --release -p accountd
//! --test model_properties`.

// Test code: a scenario reads top to bottom, so the workspace's 80-line limit is not for it.
#![allow(clippy::too_many_lines)]

use std::collections::BTreeMap;
use std::time::Duration;

use accountd::model::cost::{team_costs, CostRule, TypedUsage, IDLE};
use accountd::model::fairshare::{decayed_usage, factors};
use accountd::model::usage::{
    split_usage, split_usage_by_day, CapacityStep, Run, TeamQuota, UsageSplit, POOL,
};
use accountd::period::Period;
use chrono::FixedOffset;
use proptest::collection::vec;
use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::TestRunner;
use teamshare_config::IdleCostSplit;

/// `cases` cases per property, or `PROPTEST_CASES` for a soak.
fn config(cases: u32) -> ProptestConfig {
    ProptestConfig::with_cases(
        std::env::var("PROPTEST_CASES")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(cases),
    )
}

/// `count` values of `strategy` drawn with proptest's fixed seed: the same ones on every run,
/// for the checks that the generated cases do reach the interesting regions.
fn samples<S: Strategy>(strategy: S, count: usize) -> Vec<S::Value> {
    let mut runner = TestRunner::deterministic();
    (0..count)
        .map(|_| strategy.new_tree(&mut runner).unwrap().current())
        .collect()
}

#[derive(Debug, Clone)]
struct Scenario {
    runs: Vec<Run>,
    teams: Vec<TeamQuota>,
    capacity: Vec<CapacityStep>,
    period: Period,
}

/// A quota of `0..=max` GPUs and a lend limit of `0..=quota`.
fn quota_and_lend_limit(max: u32) -> impl Strategy<Value = (u32, u32)> {
    (0..=max).prop_flat_map(|quota| (Just(quota), 0..=quota))
}

/// The account of a run: `team{pick}`, or for `pick == team_count` one without quota.
fn account(pick: usize, team_count: usize) -> String {
    if pick == team_count {
        "stray".to_string()
    } else {
        format!("team{pick}")
    }
}

/// Up to 5 teams, capacity steps that sometimes fall below the sum of quotas (so that borrowing
/// can exceed what is lendable), runs that overlap the period's ends, and an account without
/// quota. Times are multiplied by `scale` seconds.
fn scenario(scale: i64) -> impl Strategy<Value = Scenario> {
    vec(quota_and_lend_limit(5), 1..=5)
        .prop_flat_map(|quotas| {
            let team_count = quotas.len();
            let total_quota: u32 = quotas.iter().map(|&(quota, _)| quota).sum();
            (
                Just(quotas),
                // Steps: (from, GPUs).
                vec((-20i64..=200, 0..=total_quota + 4), 1..=4),
                // Runs: (account pick, GPUs, start, length).
                vec((0..=team_count, 1u32..=6, -20i64..=220, 1i64..=80), 0..=30),
                0i64..=20,
                100i64..=200,
            )
        })
        .prop_map(move |(quotas, steps, runs, since, until)| Scenario {
            runs: runs
                .into_iter()
                .map(|(pick, gpus, start, length)| Run {
                    team: account(pick, quotas.len()).into(),
                    gpus,
                    start: start * scale,
                    end: (start + length) * scale,
                })
                .collect(),
            teams: quotas
                .iter()
                .enumerate()
                .map(|(i, &(quota, lend_limit))| TeamQuota {
                    name: format!("team{i}"),
                    quota,
                    lend_limit,
                })
                .collect(),
            capacity: steps
                .into_iter()
                .map(|(from, gpus)| (from * scale, gpus))
                .collect(),
            period: Period {
                since: since * scale,
                until: until * scale,
            },
        })
}

fn close(actual: f64, expected: f64, scale: f64) -> bool {
    (actual - expected).abs() <= 1e-9 * scale.max(1.0)
}

/// The split recomputed one second at a time, straight from the definitions: what the sweep
/// must equal. (row, quota, allocated, in_quota, borrowed, lent), capacity, over_lendable.
fn brute_force(s: &Scenario) -> (BTreeMap<String, [f64; 5]>, f64, f64) {
    let mut rows: BTreeMap<String, [f64; 5]> = BTreeMap::new();
    let mut quotas: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    for team in &s.teams {
        quotas.insert(
            team.name.clone(),
            (u64::from(team.quota), u64::from(team.lend_limit)),
        );
    }
    for run in &s.runs {
        if s.period.overlap(run.start, run.end) > 0 {
            quotas.entry(run.team.to_string()).or_insert((0, 0));
        }
    }
    for name in quotas.keys().chain([&POOL.to_string()]) {
        rows.insert(name.clone(), [0.0; 5]);
    }
    let total_quota: u64 = quotas.values().map(|q| q.0).sum();
    let mut steps = s.capacity.clone();
    steps.sort_by_key(|&(from, _)| from);
    let (mut capacity_seconds, mut over) = (0.0, 0.0);
    for t in s.period.since..s.period.until {
        let c = steps
            .iter()
            .rev()
            .find(|&&(from, _)| from <= t)
            .or(steps.first())
            .map_or(0, |&(_, gpus)| u64::from(gpus));
        capacity_seconds += c as f64;
        let pool = c.saturating_sub(total_quota);
        let mut borrowed = 0;
        let mut idle = BTreeMap::new();
        for (name, &(quota, lend)) in &quotas {
            let used: u64 = s
                .runs
                .iter()
                .filter(|r| *r.team == **name && r.start <= t && t < r.end)
                .map(|r| u64::from(r.gpus))
                .sum();
            let row = rows.get_mut(name).unwrap();
            row[0] += quota as f64;
            row[1] += used as f64;
            row[2] += used.min(quota) as f64;
            row[3] += used.saturating_sub(quota) as f64;
            borrowed += used.saturating_sub(quota);
            idle.insert(name.clone(), lend.min(quota.saturating_sub(used)));
        }
        idle.insert(POOL.to_string(), pool);
        rows.get_mut(POOL).unwrap()[0] += pool as f64;
        let lendable: u64 = idle.values().sum();
        for (name, weight) in idle {
            let lent = if borrowed <= lendable {
                if lendable == 0 {
                    0.0
                } else {
                    borrowed as f64 * weight as f64 / lendable as f64
                }
            } else if name == POOL {
                (weight + borrowed - lendable) as f64
            } else {
                weight as f64
            };
            rows.get_mut(&name).unwrap()[4] += lent;
        }
        over += borrowed.saturating_sub(lendable) as f64;
    }
    (rows, capacity_seconds, over)
}

fn check_invariants(s: &Scenario, split: &UsageSplit, what: &str) {
    let length = (split.period.until - split.period.since).max(0) as f64;
    let t = &split.totals;
    let teams: Vec<_> = split.rows.iter().filter(|r| r.team != POOL).collect();
    let sum = |f: fn(&&accountd::model::usage::TeamSplit) -> f64| teams.iter().map(f).sum::<f64>();
    // Σ allocated = Σ in-quota + Σ borrowed, exactly (whole GPU-seconds).
    assert_eq!(
        sum(|r| r.allocated),
        sum(|r| r.in_quota) + sum(|r| r.borrowed),
        "{what}"
    );
    assert_eq!(t.allocated, t.in_quota + t.borrowed, "{what}");
    // Σ lent (with the pool) = Σ borrowed.
    let lent: f64 = split.rows.iter().map(|r| r.lent).sum();
    assert!(
        close(lent, t.borrowed, t.borrowed),
        "{what}: lent {lent} vs {}",
        t.borrowed
    );
    assert!(close(t.lent, lent, lent), "{what}");
    for row in &teams {
        let team = s.teams.iter().find(|team| team.name == row.team);
        let (quota, lend_limit) = team.map_or((0.0, 0.0), |t| {
            (f64::from(t.quota), f64::from(t.lend_limit))
        });
        let eps = 1e-9 * row.quota.max(1.0);
        // Never more than L_T x time, nor than the unused quota x time.
        assert!(row.lent <= lend_limit * length + eps, "{what}: {row:?}");
        assert!(
            row.lent <= row.quota - row.in_quota + eps,
            "{what}: {row:?}"
        );
        assert!(row.in_quota <= row.quota, "{what}: {row:?}");
        assert_eq!(row.quota, quota * length, "{what}: {row:?}");
        assert!(row.borrowed <= row.allocated, "{what}: {row:?}");
    }
    let pool = split.row(POOL).unwrap();
    assert!(
        t.over_lendable <= pool.lent + 1e-9 * pool.lent.max(1.0),
        "{what}"
    );
    assert!(
        pool.lent <= pool.quota + t.over_lendable + 1e-6,
        "{what}: {pool:?}"
    );
}

proptest! {
    #![proptest_config(config(300))]

    #[test]
    fn the_sweep_equals_a_second_by_second_recomputation(s in scenario(1)) {
        let split = split_usage(&s.runs, &s.teams, &s.capacity, s.period);
        let what = "sweep";
        check_invariants(&s, &split, what);
        let (expected, capacity, over) = brute_force(&s);
        let names: Vec<&String> = expected.keys().filter(|n| *n != POOL).collect();
        let got: Vec<&String> = split.rows.iter().map(|r| &r.team).collect();
        assert_eq!(got[..got.len() - 1], names[..], "{what}: rows");
        for row in &split.rows {
            let e = expected[&row.team];
            let fields = [row.quota, row.allocated, row.in_quota, row.borrowed];
            assert_eq!(fields, e[..4], "{what}: {}", row.team);
            assert!(
                close(row.lent, e[4], e[4]),
                "{what}: {} lent {} vs {}",
                row.team,
                row.lent,
                e[4]
            );
        }
        assert_eq!(split.totals.capacity, capacity, "{what}: capacity");
        assert!(
            close(split.totals.over_lendable, over, over),
            "{what}: over_lendable"
        );
    }
}

proptest! {
    #![proptest_config(config(100))]

    #[test]
    fn days_add_up_to_the_period_and_each_is_the_period_clipped_to_it(
        // Times in units of 30 minutes: periods of 2 to 4 days.
        s in scenario(1800),
        offset_hours in -12i32..=14,
    ) {
        let offset = FixedOffset::east_opt(offset_hours * 3600).unwrap();
        let whole = split_usage(&s.runs, &s.teams, &s.capacity, s.period);
        let days = split_usage_by_day(&s.runs, &s.teams, &s.capacity, s.period, offset);
        let what = "by day";
        assert_eq!(days.first().unwrap().split.period.since, s.period.since);
        assert_eq!(days.last().unwrap().split.period.until, s.period.until);
        for pair in days.windows(2) {
            assert_eq!(pair[0].split.period.until, pair[1].split.period.since);
            assert_eq!(pair[0].date.succ_opt().unwrap(), pair[1].date, "{what}");
            // Each day but the last ends at a local midnight.
            assert_eq!(
                (pair[0].split.period.until + i64::from(offset.local_minus_utc())) % 86_400,
                0
            );
        }
        for day in &days {
            check_invariants(&s, &day.split, what);
            let alone = split_usage(&s.runs, &s.teams, &s.capacity, day.split.period);
            // The day's rows also list the accounts with usage on other days of the period.
            for a in &alone.rows {
                let b = day.split.row(&a.team).unwrap();
                assert_eq!(a.allocated, b.allocated, "{what}");
                assert_eq!(a.in_quota, b.in_quota, "{what}");
                assert_eq!(a.borrowed, b.borrowed, "{what}");
                assert!(close(a.lent, b.lent, a.lent), "{what}");
            }
            assert_eq!(alone.totals, day.split.totals, "{what}");
        }
        for (index, row) in whole.rows.iter().enumerate() {
            let sum = |f: fn(&accountd::model::usage::TeamSplit) -> f64| -> f64 {
                days.iter().map(|d| f(&d.split.rows[index])).sum()
            };
            assert_eq!(sum(|r| r.allocated), row.allocated, "{what}");
            assert_eq!(sum(|r| r.in_quota), row.in_quota, "{what}");
            assert_eq!(sum(|r| r.borrowed), row.borrowed, "{what}");
            assert_eq!(sum(|r| r.quota), row.quota, "{what}");
            assert!(close(sum(|r| r.lent), row.lent, row.lent), "{what}");
        }
    }
}

/// The scenarios do exercise borrowing, borrowing beyond what is lendable, and periods across
/// midnights (checked on fixed samples of the strategies, the properties' counts of cases).
#[test]
fn the_scenarios_borrow_beyond_what_is_lendable_and_cross_midnights() {
    let (mut borrowing, mut over_lendable) = (0, 0);
    for s in samples(scenario(1), 300) {
        let split = split_usage(&s.runs, &s.teams, &s.capacity, s.period);
        borrowing += usize::from(split.totals.borrowed > 0.0);
        over_lendable += usize::from(split.totals.over_lendable > 0.0);
    }
    assert!(
        borrowing > 150 && over_lendable > 30,
        "{borrowing} {over_lendable}"
    );
    let days_seen: usize = samples((scenario(1800), -12i32..=14), 100)
        .into_iter()
        .map(|(s, offset_hours)| {
            let offset = FixedOffset::east_opt(offset_hours * 3600).unwrap();
            split_usage_by_day(&s.runs, &s.teams, &s.capacity, s.period, offset).len()
        })
        .sum();
    assert!(
        days_seen > 250,
        "the scenarios cross midnights ({days_seen} days)"
    );
}

proptest! {
    #![proptest_config(config(200))]

    #[test]
    fn costs_add_up_to_the_capacity_cost_under_every_rule(
        // Per GPU type: a scenario and its rate per hour.
        usage in prop::array::uniform2((scenario(60), 0.0..100.0f64)),
        factor in 0.0..2.0f64,
    ) {
        let typed: Vec<TypedUsage> = ["h100", "a100"]
            .iter()
            .zip(&usage)
            .map(|(gpu_type, (s, rate))| {
                let split = split_usage(&s.runs, &s.teams, &s.capacity, s.period);
                TypedUsage::from_split(gpu_type, *rate, &split)
            })
            .collect();
        for idle_split in [
            IdleCostSplit::QuotaShare,
            IdleCostSplit::UsageShare,
            IdleCostSplit::IdleRow,
        ] {
            let report = team_costs(
                &typed,
                CostRule {
                    borrowed_cost_factor: factor,
                    idle_split,
                },
            );
            let what = format!("{idle_split:?}");
            let capacity: f64 = typed
                .iter()
                .map(|t| t.rate_per_hour * t.capacity_hours)
                .sum();
            let total: f64 = report.rows.iter().map(|r| r.total_cost).sum();
            assert!(
                close(total, capacity, capacity),
                "{what}: {total} vs {capacity}"
            );
            assert!(close(report.capacity_cost, capacity, capacity), "{what}");
            let idle: f64 = report.rows.iter().map(|r| r.idle_cost).sum();
            assert!(close(idle, report.idle_cost, capacity), "{what}");
            assert_eq!(report.rows.last().unwrap().team, IDLE);
            for row in &report.rows {
                let expected: f64 = typed
                    .iter()
                    .flat_map(|t| t.teams.iter().map(move |h| (t.rate_per_hour, h)))
                    .filter(|(_, h)| h.team == row.team)
                    .map(|(rate, h)| rate * (h.in_quota_hours + factor * h.borrowed_hours))
                    .sum();
                assert!(
                    close(row.allocated_cost, expected, expected),
                    "{what}: {row:?}"
                );
                if idle_split == IdleCostSplit::IdleRow && row.team != IDLE {
                    assert_eq!(row.idle_cost, 0.0, "{what}");
                }
            }
        }
    }
}

proptest! {
    #![proptest_config(config(50))]

    #[test]
    fn decayed_usage_matches_numeric_integration_and_halves_each_half_life(
        s in scenario(60),
        now in (50i64..=250).prop_map(|minutes| minutes * 60),
    ) {
        let h = Duration::from_secs(3600);
        let usage = decayed_usage(&s.runs, now, h);
        for (team, &value) in &usage {
            // Midpoint rule, one-second steps: error far below 1e-6 relative for h = 1 hour.
            let numeric: f64 = s
                .runs
                .iter()
                .filter(|r| *r.team == **team)
                .flat_map(|r| (r.start..r.end.min(now)).map(move |t| (r.gpus, t)))
                .map(|(g, t)| f64::from(g) * (-((now - t) as f64 - 0.5) / 3600.0).exp2())
                .sum();
            assert!(
                (value - numeric).abs() <= 1e-6 * numeric.max(1.0),
                "{team}: {value} vs {numeric}"
            );
            // With no usage after `now`, two hours later it is a quarter (only runs that ended).
            let ended: Vec<Run> = s
                .runs
                .iter()
                .filter(|r| *r.team == **team && r.end <= now)
                .cloned()
                .collect();
            let before = decayed_usage(&ended, now, h)
                .get(team)
                .copied()
                .unwrap_or(0.0);
            let after = decayed_usage(&ended, now + 7200, h)
                .get(team)
                .copied()
                .unwrap_or(0.0);
            assert!(close(after, before / 4.0, before), "{team}");
        }
    }
}

proptest! {
    #![proptest_config(config(200))]

    #[test]
    fn fair_share_factors_order_teams_by_usage_against_shares(
        // Per team: its shares, and a random usage (none for a quarter of the teams).
        teams in vec((1u32..=100, prop_oneof![1 => Just(0.0), 3 => 0.0..1e5f64]), 1..=6),
        dampening in 1.0..4.0f64,
        scale in 1.0..1e6 + 1.0,
    ) {
        let shares: BTreeMap<String, u32> = teams
            .iter()
            .enumerate()
            .map(|(i, &(w, _))| (format!("t{i}"), w))
            .collect();
        // Usage exactly proportional to the shares: every team at its share, F = 2^(-1/d).
        let proportional: BTreeMap<String, f64> = shares
            .iter()
            .map(|(t, &w)| (t.clone(), f64::from(w) * scale))
            .collect();
        for (team, f) in factors(&shares, &proportional, dampening) {
            let expected = (-1.0 / dampening).exp2();
            assert!(close(f, expected, 1.0), "{team}: {f}");
        }
        // Random usage: F in [0, 1]; a larger usage/share ratio never has a larger factor.
        let usage: BTreeMap<String, f64> = teams
            .iter()
            .enumerate()
            .map(|(i, &(_, u))| (format!("t{i}"), u))
            .collect();
        let f = factors(&shares, &usage, dampening);
        for (a, fa) in &f {
            assert!((0.0..=1.0).contains(fa), "{a}: {fa}");
            if usage[a] == 0.0 {
                assert_eq!(*fa, 1.0, "{a}: no usage");
            }
            for (b, fb) in &f {
                let ra = usage[a] / f64::from(shares[a]);
                let rb = usage[b] / f64::from(shares[b]);
                if ra > rb {
                    assert!(fa <= fb, "{a} {fa} vs {b} {fb}");
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The teams report per GPU type (issue 10).

mod per_type {
    use std::collections::BTreeMap;
    use std::sync::Arc;

    use accountd::model::usage::{split_usage, CapacityStep, Run, TeamQuota, UsageSplit, POOL};
    use accountd::model::CostRule;
    use accountd::period::Period;
    use accountd::report::{compute_usage, Rates, TeamRow, UsageParams, UsageReport, DEFAULT_RATE};
    use accountd::store::{CapacitySample, GpuTypes, RunUsage};
    use proptest::collection::vec;
    use proptest::prelude::*;
    use teamshare_config::IdleCostSplit;

    use super::{account, close, config, quota_and_lend_limit, samples, scenario, Scenario};

    const TYPES: [&str; 2] = ["a100", "h100"];

    /// The report's parameters for `teams` over `period`, with random rates, borrowed cost
    /// factor and idle cost rule.
    fn params(teams: Vec<TeamQuota>, period: Period) -> impl Strategy<Value = UsageParams> {
        let idle_split = prop_oneof![
            Just(IdleCostSplit::QuotaShare),
            Just(IdleCostSplit::UsageShare),
            Just(IdleCostSplit::IdleRow),
        ];
        (
            0.0..10.0f64,
            0.0..5.0f64,
            0.0..3.0f64,
            0.0..1.0f64,
            idle_split,
        )
            .prop_map(
                move |(h100, a100, default, borrowed_cost_factor, idle_split)| UsageParams {
                    cluster: "c".into(),
                    period,
                    now: period.until + 1_000_000,
                    teams: teams.clone(),
                    typed_teams: BTreeMap::new(),
                    families: Vec::new(),
                    quota_by_type: BTreeMap::new(),
                    partitions: vec!["gpu".into()],
                    rates: Rates::new(BTreeMap::from([
                        ("h100".to_string(), h100),
                        ("a100".to_string(), a100),
                        (DEFAULT_RATE.to_string(), default),
                    ])),
                    gpu_equivalents: BTreeMap::new(),
                    currency: None,
                    cost_rule: CostRule {
                        borrowed_cost_factor,
                        idle_split,
                    },
                    only: Vec::new(),
                },
            )
    }

    fn usage_run(
        id: i64,
        team: &str,
        partition: &str,
        start: i64,
        end: i64,
        by_type: &[(&str, u64)],
        untyped: u64,
    ) -> RunUsage {
        let typed: BTreeMap<String, u64> = by_type
            .iter()
            .filter(|(_, n)| *n > 0)
            .map(|&(t, n)| (t.to_string(), n))
            .collect();
        RunUsage {
            id,
            account: Arc::from(team),
            partition: Arc::from(partition),
            start,
            end: Some(end),
            gpus: typed.values().sum::<u64>() + untyped,
            gpus_by_type: GpuTypes::new(&typed),
        }
    }

    /// The GPUs of `key` in a sample: its typed ones, or for `default` the rest.
    fn sample_gpus(s: &CapacitySample, key: &str) -> u32 {
        if key == DEFAULT_RATE {
            s.gpus - s.by_type.values().sum::<u32>()
        } else {
            s.by_type.get(key).copied().unwrap_or(0)
        }
    }

    /// Figures of a row (or a row's type) that must match: quota, allocated, in quota, borrowed,
    /// lent, in GPU-seconds.
    fn figures(row: Option<&TeamRow>, gpu_type: Option<&str>) -> [f64; 5] {
        let Some(row) = row else { return [0.0; 5] };
        match gpu_type {
            None => [
                row.quota_seconds,
                row.gpu_seconds as f64,
                row.in_quota_seconds,
                row.borrowed_seconds,
                row.lent_seconds,
            ],
            Some(t) => row.of_type(t).map_or([0.0; 5], |t| {
                [
                    t.quota_seconds.unwrap_or(0.0),
                    t.gpu_seconds as f64,
                    t.in_quota_seconds,
                    t.borrowed_seconds,
                    t.lent_seconds,
                ]
            }),
        }
    }

    fn assert_matches(
        report: &UsageReport,
        split: &UsageSplit,
        gpu_type: Option<&str>,
        what: &str,
    ) {
        for s in &split.rows {
            let got = figures(report.row(&s.team), gpu_type);
            let want = [s.quota, s.allocated, s.in_quota, s.borrowed, s.lent];
            for (i, (g, w)) in got.iter().zip(want).enumerate() {
                assert!(
                    close(*g, w, w),
                    "{what} {} {gpu_type:?} field {i}: {g} vs {w}",
                    s.team
                );
            }
        }
    }

    /// Per type: the lent GPU-seconds (the pool's included) equal the borrowed ones; each row's
    /// types add up to the row; the costs add up to the capacity cost, per type too.
    fn assert_adds_up(r: &UsageReport, what: &str) {
        let mut types: Vec<&str> = r
            .capacity_by_type
            .iter()
            .map(|c| c.gpu_type.as_str())
            .collect();
        types.extend(
            r.rows
                .iter()
                .flat_map(|row| row.by_type.iter().map(|t| t.gpu_type.as_str())),
        );
        types.sort_unstable();
        types.dedup();
        for t in &types {
            let of = |f: fn(&accountd::report::TypeRow) -> f64| -> f64 {
                r.rows.iter().filter_map(|row| row.of_type(t)).map(f).sum()
            };
            let (lent, borrowed) = (of(|x| x.lent_seconds), of(|x| x.borrowed_seconds));
            assert!(
                close(lent, borrowed, borrowed),
                "{what} {t}: lent {lent}, borrowed {borrowed}"
            );
            if let Some(c) = r.capacity_of(t).and_then(|c| c.capacity_cost) {
                let total = of(|x| x.total_cost.unwrap_or(0.0));
                assert!(close(total, c, c.abs()), "{what} {t}: costs {total} vs {c}");
            }
        }
        for row in &r.rows {
            let sum =
                |f: fn(&accountd::report::TypeRow) -> f64| row.by_type.iter().map(f).sum::<f64>();
            let seconds: u128 = row.by_type.iter().map(|t| t.gpu_seconds).sum();
            assert_eq!(seconds, row.gpu_seconds, "{what} {}", row.team);
            for (a, b) in [
                (sum(|t| t.in_quota_seconds), row.in_quota_seconds),
                (sum(|t| t.borrowed_seconds), row.borrowed_seconds),
                (sum(|t| t.lent_seconds), row.lent_seconds),
                (
                    sum(|t| t.idle_cost.unwrap_or(0.0)),
                    row.idle_cost.unwrap_or(0.0),
                ),
                (
                    sum(|t| t.allocated_cost.unwrap_or(0.0)),
                    row.allocated_cost.unwrap_or(0.0),
                ),
            ] {
                assert!(close(a, b, b.abs()), "{what} {}: {a} vs {b}", row.team);
            }
            assert!(
                close(
                    row.gpu_seconds as f64,
                    row.in_quota_seconds + row.borrowed_seconds,
                    row.gpu_seconds as f64
                ),
                "{what} {row:?}"
            );
        }
        let total: f64 = r.rows.iter().filter_map(|row| row.total_cost).sum();
        let capacity = r.capacity_cost.unwrap();
        assert!(
            close(total, capacity, capacity.abs()),
            "{what}: {total} vs {capacity}"
        );
    }

    /// A typed configuration: per type, each team's quota and lend limit, and the report's
    /// inputs.
    #[derive(Debug)]
    struct TypedCase {
        names: Vec<String>,
        typed_teams: BTreeMap<String, Vec<TeamQuota>>,
        period: Period,
        p: UsageParams,
        capacity: Vec<CapacitySample>,
        runs: Vec<RunUsage>,
    }

    /// GPUs of a capacity sample: H100s, A100s, untyped.
    fn sample_parts() -> impl Strategy<Value = (u32, u32, u32)> {
        (0u32..=6, 0u32..=6, 0u32..=1)
    }

    /// GPUs of a run: H100s, A100s, untyped.
    fn run_parts() -> impl Strategy<Value = (u64, u64, u64)> {
        prop_oneof![
            2 => (1u64..=4).prop_map(|n| (n, 0, 0)),
            2 => (1u64..=4).prop_map(|n| (0, n, 0)),
            1 => Just((1, 1, 0)),
            1 => (1u64..=2).prop_map(|n| (0, 0, n)),
        ]
    }

    /// Up to 4 teams with quotas of up to 3 GPUs of each type; 1 to 4 capacity samples, the
    /// first at or before the period (so that no estimate is used); runs of one type, of both
    /// or untyped, a tenth of them outside the governed partition, some of an account without
    /// quota.
    fn typed_case() -> impl Strategy<Value = TypedCase> {
        let quotas = (1usize..=4).prop_flat_map(|team_count| {
            prop::array::uniform2(vec(quota_and_lend_limit(3), team_count))
        });
        (quotas, 0i64..=20, 100i64..=200)
            .prop_flat_map(|(quotas, since, until)| {
                let period = Period {
                    since: since * 60,
                    until: until * 60,
                };
                let team_count = quotas[0].len();
                let names: Vec<String> = (0..team_count).map(|i| format!("team{i}")).collect();
                let typed_teams: BTreeMap<String, Vec<TeamQuota>> = TYPES
                    .iter()
                    .zip(&quotas)
                    .map(|(t, quotas)| {
                        let teams = names
                            .iter()
                            .zip(quotas)
                            .map(|(n, &(quota, lend_limit))| TeamQuota {
                                name: n.clone(),
                                quota,
                                lend_limit,
                            })
                            .collect();
                        (t.to_string(), teams)
                    })
                    .collect();
                let teams: Vec<TeamQuota> = names
                    .iter()
                    .enumerate()
                    .map(|(i, n)| TeamQuota {
                        name: n.clone(),
                        quota: TYPES.iter().map(|t| typed_teams[*t][i].quota).sum(),
                        lend_limit: TYPES.iter().map(|t| typed_teams[*t][i].lend_limit).sum(),
                    })
                    .collect();
                (
                    Just((names, typed_teams)),
                    params(teams, period),
                    // The first sample, then the others with their times.
                    (sample_parts(), vec((0i64..=200, sample_parts()), 0..=3)),
                    // Runs: (account pick, start, length, GPUs, outside the partition).
                    vec(
                        (
                            0..=team_count,
                            -20i64..=220,
                            1i64..=80,
                            run_parts(),
                            prop::bool::weighted(0.1),
                        ),
                        0..=30,
                    ),
                )
            })
            .prop_map(|((names, typed_teams), mut p, (first, others), runs)| {
                let period = p.period;
                for (t, quotas) in &typed_teams {
                    p.quota_by_type
                        .insert(t.clone(), quotas.iter().map(|q| q.quota).sum());
                }
                p.typed_teams = typed_teams.clone();
                let mut capacity: Vec<CapacitySample> = std::iter::once((period.since - 60, first))
                    .chain(others.into_iter().map(|(ts, parts)| (ts * 60, parts)))
                    .map(|(ts, (h100, a100, untyped))| CapacitySample {
                        ts,
                        gpus: h100 + a100 + untyped,
                        by_type: BTreeMap::from([("h100".into(), h100), ("a100".into(), a100)]),
                    })
                    .collect();
                capacity.sort_by_key(|s| s.ts);
                capacity.dedup_by_key(|s| s.ts);
                let runs = runs
                    .into_iter()
                    .enumerate()
                    .map(
                        |(id, (pick, start, length, (h100, a100, untyped), debug))| {
                            usage_run(
                                id as i64,
                                &account(pick, names.len()),
                                if debug { "debug" } else { "gpu" },
                                start * 60,
                                (start + length) * 60,
                                &[("h100", h100), ("a100", a100)],
                                untyped,
                            )
                        },
                    )
                    .collect();
                TypedCase {
                    names,
                    typed_teams,
                    period,
                    p,
                    capacity,
                    runs,
                }
            })
    }

    proptest! {
        #![proptest_config(config(200))]

        /// Typed quotas: each type's figures are the split of that type's runs, quotas and
        /// capacity; per type, lent equals borrowed; rows are the sums of their types.
        #[test]
        fn a_typed_configuration_is_split_per_type(c in typed_case()) {
            let TypedCase { names, typed_teams, period, p, capacity, runs } = c;
            let what = "typed";
            let r = compute_usage(&runs, &capacity, &p);
            assert!(r.typed);
            assert_adds_up(&r, what);
            // Each type on its own, straight from the model.
            for key in ["h100", "a100", DEFAULT_RATE] {
                let model_runs: Vec<Run> = runs
                    .iter()
                    .filter(|run| &*run.partition == "gpu")
                    .filter_map(|run| {
                        let n = if key == DEFAULT_RATE {
                            run.gpus - run.gpus_by_type.iter().map(|(_, n)| n).sum::<u64>()
                        } else {
                            run.gpus_by_type.get(key).unwrap_or(0)
                        };
                        (n > 0).then(|| Run {
                            team: run.account.clone(),
                            gpus: n as u32,
                            start: run.start,
                            end: run.end.unwrap(),
                        })
                    })
                    .collect();
                let no_quota: Vec<TeamQuota> = names
                    .iter()
                    .map(|n| TeamQuota {
                        name: n.clone(),
                        quota: 0,
                        lend_limit: 0,
                    })
                    .collect();
                let quotas = typed_teams.get(key).unwrap_or(&no_quota);
                let steps: Vec<CapacityStep> = capacity
                    .iter()
                    .map(|s| (s.ts, sample_gpus(s, key)))
                    .collect();
                let split = split_usage(&model_runs, quotas, &steps, period);
                assert_matches(&r, &split, Some(key), what);
            }
            // Outside the governed partitions: apart, with all of their GPU-seconds.
            let debug: i64 = runs
                .iter()
                .filter(|run| &*run.partition == "debug")
                .map(|run| run.gpus as i64 * period.overlap(run.start, run.end.unwrap()))
                .sum();
            let outside: u128 = r.outside.iter().map(|row| row.gpu_seconds).sum();
            assert_eq!(outside, debug as u128, "{what}");
            assert!(r
                .rows
                .iter()
                .all(|row| row.team != POOL || row.gpu_seconds == 0));
        }
    }

    /// The typed cases do borrow (checked on a fixed sample of the strategy, the property's
    /// count of cases).
    #[test]
    fn the_typed_cases_borrow() {
        let borrowed_cases = samples(typed_case(), 200)
            .iter()
            .map(|c| compute_usage(&c.runs, &c.capacity, &c.p))
            .filter(|r| r.rows.iter().any(|row| row.borrowed_seconds > 0.0))
            .count();
        assert!(borrowed_cases > 100, "{borrowed_cases}");
    }

    /// A scenario (its capacity steps sorted, the first in force at the period's start, as the
    /// model takes it), its steps and runs given random GPU types, and the report's parameters.
    fn untyped_case(
    ) -> impl Strategy<Value = (Scenario, Vec<CapacitySample>, Vec<RunUsage>, UsageParams)> {
        scenario(60)
            .prop_map(|mut s| {
                s.capacity.sort_by_key(|&(ts, _)| ts);
                s.capacity[0].0 = s.capacity[0].0.min(s.period.since);
                s
            })
            .prop_flat_map(|s| {
                // Per step, its H100s; per run, its H100s and A100s (the rest untyped).
                let h100: Vec<_> = s.capacity.iter().map(|&(_, gpus)| 0..=gpus).collect();
                let typed: Vec<_> = s
                    .runs
                    .iter()
                    .map(|run| {
                        let g = u64::from(run.gpus);
                        (0..=g).prop_flat_map(move |h100| (Just(h100), 0..=g - h100))
                    })
                    .collect();
                let p = params(s.teams.clone(), s.period);
                (Just(s), h100, typed, p)
            })
            .prop_map(|(s, h100, typed, p)| {
                let capacity = s
                    .capacity
                    .iter()
                    .zip(h100)
                    .map(|(&(ts, gpus), h100)| CapacitySample {
                        ts,
                        gpus,
                        by_type: BTreeMap::from([("h100".into(), h100)]),
                    })
                    .collect();
                let runs = s
                    .runs
                    .iter()
                    .zip(typed)
                    .enumerate()
                    .map(|(id, (run, (h100, a100)))| {
                        let g = u64::from(run.gpus);
                        usage_run(
                            id as i64,
                            &run.team,
                            "gpu",
                            run.start,
                            run.end,
                            &[("h100", h100), ("a100", a100)],
                            g - h100 - a100,
                        )
                    })
                    .collect();
                (s, capacity, runs, p)
            })
    }

    proptest! {
        #![proptest_config(config(200))]

        /// An untyped configuration: the same team totals as the split on totals (the report
        /// before GPU types), whatever types the runs had; per type, lent equals borrowed.
        #[test]
        fn an_untyped_configuration_gives_the_team_totals_of_the_split_on_totals(
            (s, capacity, runs, p) in untyped_case(),
        ) {
            let what = "untyped";
            let r = compute_usage(&runs, &capacity, &p);
            assert!(!r.typed);
            let split = split_usage(&s.runs, &s.teams, &s.capacity, s.period);
            assert_matches(&r, &split, None, what);
            assert!(close(
                r.capacity_gpu_seconds,
                split.totals.capacity,
                split.totals.capacity
            ));
            assert_adds_up(&r, what);
        }
    }
}
