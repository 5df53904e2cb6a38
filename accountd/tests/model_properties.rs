//! Property tests of the accounting model on pseudo-random timelines: the invariants of DESIGN §5,
//! and the sweep checked against a second-by-second recomputation.

use std::collections::BTreeMap;
use std::time::Duration;

use accountd::model::cost::{team_costs, CostRule, TypedUsage, IDLE};
use accountd::model::fairshare::{decayed_usage, factors};
use accountd::model::usage::{
    split_usage, split_usage_by_day, CapacityStep, Run, TeamQuota, UsageSplit, POOL,
};
use accountd::period::Period;
use chrono::FixedOffset;
use teamshare_config::IdleCostSplit;

/// Knuth's MMIX linear congruential generator: deterministic, no crates.
struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        self.0 >> 33
    }

    /// Uniform in `lo..=hi`.
    fn range(&mut self, lo: i64, hi: i64) -> i64 {
        lo + (self.next() % (hi - lo + 1) as u64) as i64
    }

    fn unit(&mut self) -> f64 {
        self.next() as f64 / (1u64 << 31) as f64
    }
}

struct Scenario {
    runs: Vec<Run>,
    teams: Vec<TeamQuota>,
    capacity: Vec<CapacityStep>,
    period: Period,
}

/// Up to 5 teams, capacity steps that sometimes fall below the sum of quotas (so that borrowing
/// can exceed what is lendable), runs that overlap the period's ends, and an account without
/// quota. Times are multiplied by `scale` seconds.
fn scenario(rng: &mut Lcg, scale: i64) -> Scenario {
    let team_count = rng.range(1, 5);
    let teams: Vec<TeamQuota> = (0..team_count)
        .map(|i| {
            let quota = rng.range(0, 5) as u32;
            TeamQuota {
                name: format!("team{i}"),
                quota,
                lend_limit: rng.range(0, i64::from(quota)) as u32,
            }
        })
        .collect();
    let total_quota: i64 = teams.iter().map(|t| i64::from(t.quota)).sum();
    let capacity = (0..rng.range(1, 4))
        .map(|_| {
            (
                rng.range(-20, 200) * scale,
                rng.range(0, total_quota + 4) as u32,
            )
        })
        .collect();
    let runs = (0..rng.range(0, 30))
        .map(|_| {
            let pick = rng.range(0, team_count);
            let team = if pick == team_count {
                "stray".to_string()
            } else {
                format!("team{pick}")
            };
            let start = rng.range(-20, 220);
            Run {
                team: team.into(),
                gpus: rng.range(1, 6) as u32,
                start: start * scale,
                end: (start + rng.range(1, 80)) * scale,
            }
        })
        .collect();
    let period = Period {
        since: rng.range(0, 20) * scale,
        until: rng.range(100, 200) * scale,
    };
    Scenario {
        runs,
        teams,
        capacity,
        period,
    }
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

#[test]
fn the_sweep_equals_a_second_by_second_recomputation() {
    let mut rng = Lcg(0x7ea3_5ba2e);
    let (mut borrowing, mut over_lendable) = (0, 0);
    for case in 0..300 {
        let s = scenario(&mut rng, 1);
        let split = split_usage(&s.runs, &s.teams, &s.capacity, s.period);
        borrowing += usize::from(split.totals.borrowed > 0.0);
        over_lendable += usize::from(split.totals.over_lendable > 0.0);
        let what = format!("case {case}");
        check_invariants(&s, &split, &what);
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
    // The scenarios do exercise borrowing, and borrowing beyond what is lendable.
    assert!(
        borrowing > 150 && over_lendable > 30,
        "{borrowing} {over_lendable}"
    );
}

#[test]
fn days_add_up_to_the_period_and_each_is_the_period_clipped_to_it() {
    let mut rng = Lcg(42);
    let mut days_seen = 0;
    for case in 0..100 {
        // Times in units of 30 minutes: periods of 2 to 4 days.
        let s = scenario(&mut rng, 1800);
        let offset = FixedOffset::east_opt(rng.range(-12, 14) as i32 * 3600).unwrap();
        let whole = split_usage(&s.runs, &s.teams, &s.capacity, s.period);
        let days = split_usage_by_day(&s.runs, &s.teams, &s.capacity, s.period, offset);
        days_seen += days.len();
        let what = format!("case {case}");
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
            check_invariants(&s, &day.split, &what);
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
    assert!(
        days_seen > 250,
        "the scenarios cross midnights ({days_seen} days)"
    );
}

#[test]
fn costs_add_up_to_the_capacity_cost_under_every_rule() {
    let mut rng = Lcg(7);
    for case in 0..200 {
        let typed: Vec<TypedUsage> = ["h100", "a100"]
            .iter()
            .map(|gpu_type| {
                let s = scenario(&mut rng, 60);
                let split = split_usage(&s.runs, &s.teams, &s.capacity, s.period);
                TypedUsage::from_split(gpu_type, rng.unit() * 100.0, &split)
            })
            .collect();
        let factor = rng.unit() * 2.0;
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
            let what = format!("case {case} {idle_split:?}");
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

#[test]
fn decayed_usage_matches_numeric_integration_and_halves_each_half_life() {
    let mut rng = Lcg(99);
    let h = Duration::from_secs(3600);
    for case in 0..50 {
        let s = scenario(&mut rng, 60);
        let now = rng.range(50, 250) * 60;
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
                "case {case} {team}: {value} vs {numeric}"
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
            assert!(close(after, before / 4.0, before), "case {case} {team}");
        }
    }
}

#[test]
fn fair_share_factors_order_teams_by_usage_against_shares() {
    let mut rng = Lcg(2024);
    for case in 0..200 {
        let n = rng.range(1, 6);
        let shares: BTreeMap<String, u32> = (0..n)
            .map(|i| (format!("t{i}"), rng.range(1, 100) as u32))
            .collect();
        let dampening = 1.0 + rng.unit() * 3.0;
        // Usage exactly proportional to the shares: every team at its share, F = 2^(-1/d).
        let scale = 1.0 + rng.unit() * 1e6;
        let proportional: BTreeMap<String, f64> = shares
            .iter()
            .map(|(t, &w)| (t.clone(), f64::from(w) * scale))
            .collect();
        for (team, f) in factors(&shares, &proportional, dampening) {
            let expected = (-1.0 / dampening).exp2();
            assert!(close(f, expected, 1.0), "case {case} {team}: {f}");
        }
        // Random usage: F in [0, 1]; a larger usage/share ratio never has a larger factor.
        let usage: BTreeMap<String, f64> = shares
            .keys()
            .map(|t| {
                (
                    t.clone(),
                    if rng.range(0, 3) == 0 {
                        0.0
                    } else {
                        rng.unit() * 1e5
                    },
                )
            })
            .collect();
        let f = factors(&shares, &usage, dampening);
        for (a, fa) in &f {
            assert!((0.0..=1.0).contains(fa), "case {case}");
            if usage[a] == 0.0 {
                assert_eq!(*fa, 1.0, "case {case}: no usage");
            }
            for (b, fb) in &f {
                let ra = usage[a] / f64::from(shares[a]);
                let rb = usage[b] / f64::from(shares[b]);
                if ra > rb {
                    assert!(fa <= fb, "case {case}: {a} {fa} vs {b} {fb}");
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
    use teamshare_config::IdleCostSplit;

    use super::{close, scenario, Lcg};

    const TYPES: [&str; 2] = ["a100", "h100"];

    fn params(rng: &mut Lcg, teams: Vec<TeamQuota>, period: Period) -> UsageParams {
        UsageParams {
            cluster: "c".into(),
            period,
            now: period.until + 1_000_000,
            teams,
            typed_teams: BTreeMap::new(),
            quota_by_type: BTreeMap::new(),
            partitions: vec!["gpu".into()],
            rates: Rates::new(BTreeMap::from([
                ("h100".to_string(), rng.unit() * 10.0),
                ("a100".to_string(), rng.unit() * 5.0),
                (DEFAULT_RATE.to_string(), rng.unit() * 3.0),
            ])),
            currency: None,
            cost_rule: CostRule {
                borrowed_cost_factor: rng.unit(),
                idle_split: [
                    IdleCostSplit::QuotaShare,
                    IdleCostSplit::UsageShare,
                    IdleCostSplit::IdleRow,
                ][rng.range(0, 2) as usize],
            },
            only: Vec::new(),
        }
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

    /// Typed quotas: each type's figures are the split of that type's runs, quotas and
    /// capacity; per type, lent equals borrowed; rows are the sums of their types.
    #[test]
    fn a_typed_configuration_is_split_per_type() {
        let mut rng = Lcg(0x1_0000);
        let mut borrowed_cases = 0;
        for case in 0..200 {
            let what = format!("case {case}");
            let team_count = rng.range(1, 4);
            let names: Vec<String> = (0..team_count).map(|i| format!("team{i}")).collect();
            let mut typed_teams: BTreeMap<String, Vec<TeamQuota>> = BTreeMap::new();
            for t in TYPES {
                typed_teams.insert(
                    t.to_string(),
                    names
                        .iter()
                        .map(|n| {
                            let quota = rng.range(0, 3) as u32;
                            TeamQuota {
                                name: n.clone(),
                                quota,
                                lend_limit: rng.range(0, i64::from(quota)) as u32,
                            }
                        })
                        .collect(),
                );
            }
            let teams: Vec<TeamQuota> = names
                .iter()
                .enumerate()
                .map(|(i, n)| TeamQuota {
                    name: n.clone(),
                    quota: TYPES.iter().map(|t| typed_teams[*t][i].quota).sum(),
                    lend_limit: TYPES.iter().map(|t| typed_teams[*t][i].lend_limit).sum(),
                })
                .collect();
            let period = Period {
                since: rng.range(0, 20) * 60,
                until: rng.range(100, 200) * 60,
            };
            let mut p = params(&mut rng, teams, period);
            for (t, quotas) in &typed_teams {
                p.quota_by_type
                    .insert(t.clone(), quotas.iter().map(|q| q.quota).sum());
            }
            p.typed_teams = typed_teams.clone();
            // Capacity samples, the first at or before the period (so that no estimate is used).
            let mut capacity: Vec<CapacitySample> = (0..rng.range(1, 4))
                .map(|i| {
                    let h100 = rng.range(0, 6) as u32;
                    let a100 = rng.range(0, 6) as u32;
                    CapacitySample {
                        ts: if i == 0 {
                            period.since - 60
                        } else {
                            rng.range(0, 200) * 60
                        },
                        gpus: h100 + a100 + rng.range(0, 1) as u32,
                        by_type: BTreeMap::from([("h100".into(), h100), ("a100".into(), a100)]),
                    }
                })
                .collect();
            capacity.sort_by_key(|s| s.ts);
            capacity.dedup_by_key(|s| s.ts);
            let runs: Vec<RunUsage> = (0..rng.range(0, 30))
                .map(|id| {
                    let pick = rng.range(0, team_count);
                    let team = if pick == team_count {
                        "stray".to_string()
                    } else {
                        names[pick as usize].clone()
                    };
                    let start = rng.range(-20, 220) * 60;
                    let end = start + rng.range(1, 80) * 60;
                    let (h100, a100, untyped) = match rng.range(0, 5) {
                        0 | 1 => (rng.range(1, 4) as u64, 0, 0),
                        2 | 3 => (0, rng.range(1, 4) as u64, 0),
                        4 => (1, 1, 0),
                        _ => (0, 0, rng.range(1, 2) as u64),
                    };
                    let partition = if rng.range(0, 9) == 0 { "debug" } else { "gpu" };
                    usage_run(
                        id,
                        &team,
                        partition,
                        start,
                        end,
                        &[("h100", h100), ("a100", a100)],
                        untyped,
                    )
                })
                .collect();
            let r = compute_usage(&runs, &capacity, &p);
            assert!(r.typed);
            borrowed_cases += usize::from(r.rows.iter().any(|row| row.borrowed_seconds > 0.0));
            assert_adds_up(&r, &what);
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
                assert_matches(&r, &split, Some(key), &what);
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
        assert!(borrowed_cases > 100, "{borrowed_cases}");
    }

    /// An untyped configuration: the same team totals as the split on totals (the report before
    /// GPU types), whatever types the runs had; per type, lent equals borrowed.
    #[test]
    fn an_untyped_configuration_gives_the_team_totals_of_the_split_on_totals() {
        let mut rng = Lcg(0x2_0000);
        for case in 0..200 {
            let what = format!("case {case}");
            let mut s = scenario(&mut rng, 60);
            s.capacity.sort_by_key(|&(ts, _)| ts);
            // The first sample in force at the period's start, as the model takes it.
            s.capacity[0].0 = s.capacity[0].0.min(s.period.since);
            let capacity: Vec<CapacitySample> = s
                .capacity
                .iter()
                .map(|&(ts, gpus)| {
                    let h100 = rng.range(0, i64::from(gpus)) as u32;
                    CapacitySample {
                        ts,
                        gpus,
                        by_type: BTreeMap::from([("h100".into(), h100)]),
                    }
                })
                .collect();
            let runs: Vec<RunUsage> = s
                .runs
                .iter()
                .enumerate()
                .map(|(id, run)| {
                    let g = u64::from(run.gpus);
                    let h100 = rng.range(0, g as i64) as u64;
                    let a100 = rng.range(0, (g - h100) as i64) as u64;
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
            let p = params(&mut rng, s.teams.clone(), s.period);
            let r = compute_usage(&runs, &capacity, &p);
            assert!(!r.typed);
            let split = split_usage(&s.runs, &s.teams, &s.capacity, s.period);
            assert_matches(&r, &split, None, &what);
            assert!(close(
                r.capacity_gpu_seconds,
                split.totals.capacity,
                split.totals.capacity
            ));
            assert_adds_up(&r, &what);
        }
    }
}
