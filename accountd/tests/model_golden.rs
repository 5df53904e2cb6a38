//! Golden tests of the accounting model (DESIGN §5): small cases computed by hand, the hand
//! computation written beside each expectation.

// Test code: a scenario reads top to bottom, so the workspace's 80-line limit is not for it.
#![allow(clippy::too_many_lines)]

use std::collections::BTreeMap;
use std::time::Duration;

use accountd::model::cost::{team_costs, CostRule, TypedUsage, IDLE};
use accountd::model::fairshare::{
    decayed_usage, factors, hierarchy_factors, Association, AssociationFairShare,
};
use accountd::model::usage::{
    split_usage, split_usage_by_day, CapacityStep, Run, TeamQuota, UsageSplit, POOL,
};
use accountd::period::Period;
use chrono::FixedOffset;
use teamshare_config::IdleCostSplit;

const H: i64 = 3600;
/// 2024-03-01T00:00:00Z.
const T0: i64 = 1_709_251_200;

fn close(actual: f64, expected: f64) -> bool {
    (actual - expected).abs() <= 1e-9 * expected.abs().max(1.0)
}

macro_rules! assert_close {
    ($actual:expr, $expected:expr, $what:expr) => {{
        let (a, e) = ($actual, $expected);
        assert!(close(a, e), "{}: got {a}, expected {e}", $what);
    }};
}

fn run(team: &str, gpus: u32, start_h: i64, end_h: i64) -> Run {
    Run {
        team: team.into(),
        gpus,
        start: T0 + start_h * H,
        end: T0 + end_h * H,
    }
}

/// Three teams, 6 hours from T0:
///
/// - capacity 8 GPUs for [0h, 4h), then 10 (a node added): the unallocated pool is
///   8 - (2 + 4 + 2) = 0, then 10 - 8 = 2;
/// - a: quota 2, lends all of it; b: quota 4, lends at most 1; c: quota 2, lends all of it.
///
/// Runs (GPUs over hours): a 4 [0,2), b 1 [0,6), c 1 [1,3), b 4 [3,4), c 3 [4,5), a 1 [4,6).
///
/// Interval by interval (U = GPUs held, idle = min(L, Q - in-quota), B = total borrowed):
///
/// | hours | U a,b,c | borrowed     | idle a,b,c + pool | lent (GPUs)                          |
/// |-------|---------|--------------|-------------------|--------------------------------------|
/// | [0,1) | 4,1,0   | a 2          | 0,1,2 + 0 = 3     | b 2x1/3 = 2/3, c 2x2/3 = 4/3         |
/// | [1,2) | 4,1,1   | a 2          | 0,1,1 + 0 = 2     | b 1, c 1                             |
/// | [2,3) | 0,1,1   | -            |                   |                                      |
/// | [3,4) | 0,5,0   | b 1          | 2,0,2 + 0 = 4     | a 1/2, c 1/2                         |
/// | [4,5) | 1,1,3   | c 1          | 1,1,0 + 2 = 4     | a 1/4, b 1/4, pool 2/4               |
/// | [5,6) | 1,1,0   | -            |                   |                                      |
///
/// In [0,1) b has 3 GPUs of unused quota but lends by its limit of 1: its weight is 1, not 3.
fn example() -> (Vec<Run>, Vec<TeamQuota>, Vec<CapacityStep>, Period) {
    let runs = vec![
        run("a", 4, 0, 2),
        run("b", 1, 0, 6),
        run("c", 1, 1, 3),
        run("b", 4, 3, 4),
        run("c", 3, 4, 5),
        run("a", 1, 4, 6),
    ];
    let quota = |name: &str, quota, lend_limit| TeamQuota {
        name: name.to_string(),
        quota,
        lend_limit,
    };
    let teams = vec![quota("a", 2, 2), quota("b", 4, 1), quota("c", 2, 2)];
    let capacity = vec![(T0, 8), (T0 + 4 * H, 10)];
    let period = Period {
        since: T0,
        until: T0 + 6 * H,
    };
    (runs, teams, capacity, period)
}

/// (team, quota, allocated, in_quota, borrowed, lent) in GPU-hours.
type Expected = (&'static str, f64, f64, f64, f64, f64);

fn assert_split(split: &UsageSplit, expected: &[Expected]) {
    let names: Vec<&str> = split.rows.iter().map(|r| r.team.as_str()).collect();
    let expected_names: Vec<&str> = expected.iter().map(|e| e.0).collect();
    assert_eq!(names, expected_names);
    for &(team, quota, allocated, in_quota, borrowed, lent) in expected {
        let row = split.row(team).unwrap();
        let h = H as f64;
        assert_close!(row.quota / h, quota, format!("{team} quota"));
        assert_close!(row.allocated / h, allocated, format!("{team} allocated"));
        assert_close!(row.in_quota / h, in_quota, format!("{team} in_quota"));
        assert_close!(row.borrowed / h, borrowed, format!("{team} borrowed"));
        assert_close!(row.lent / h, lent, format!("{team} lent"));
    }
}

#[test]
fn usage_split_of_the_three_team_example() {
    let (runs, teams, capacity, period) = example();
    let split = split_usage(&runs, &teams, &capacity, period);
    // Per team, summing the table's rows (GPU-hours):
    // a: allocated 4x2 + 1x2 = 10; in-quota 2+2+0+0+1+1 = 6; borrowed 2+2 = 4;
    //    lent 1/2 + 1/4 = 3/4; quota 2 x 6 = 12.
    // b: allocated 1x6 + 4x1 = 10; in-quota 1+1+1+4+1+1 = 9; borrowed 1;
    //    lent 2/3 + 1 + 1/4 = 23/12; quota 4 x 6 = 24.
    // c: allocated 1x2 + 3x1 = 5; in-quota 0+1+1+0+2+0 = 4; borrowed 1;
    //    lent 4/3 + 1 + 1/2 = 17/6; quota 2 x 6 = 12.
    // (pool): lent 2/4 x 1 = 1/2; its quota is the unallocated capacity 0x4 + 2x2 = 4.
    assert_split(
        &split,
        &[
            ("a", 12.0, 10.0, 6.0, 4.0, 0.75),
            ("b", 24.0, 10.0, 9.0, 1.0, 23.0 / 12.0),
            ("c", 12.0, 5.0, 4.0, 1.0, 17.0 / 6.0),
            (POOL, 4.0, 0.0, 0.0, 0.0, 0.5),
        ],
    );
    // Totals: capacity 8x4 + 10x2 = 52; allocated 25 = in-quota 19 + borrowed 6;
    // lent 3/4 + 23/12 + 17/6 + 1/2 = (9 + 23 + 34 + 6)/12 = 6 = borrowed.
    let t = &split.totals;
    let h = H as f64;
    assert_close!(t.capacity / h, 52.0, "capacity");
    assert_close!(t.unallocated / h, 4.0, "unallocated");
    assert_close!(t.allocated / h, 25.0, "allocated");
    assert_close!(t.in_quota / h, 19.0, "in_quota");
    assert_close!(t.borrowed / h, 6.0, "borrowed");
    assert_close!(t.lent / h, 6.0, "lent");
    assert_eq!(t.over_lendable, 0.0);
}

#[test]
fn usage_split_of_the_example_per_day_in_utc_minus_3() {
    let (runs, teams, capacity, period) = example();
    // In UTC-3 the day changes at 03:00Z = T0 + 3h: 2024-02-29 is [0h,3h), 2024-03-01 [3h,6h).
    let brt = FixedOffset::west_opt(3 * 3600).unwrap();
    let days = split_usage_by_day(&runs, &teams, &capacity, period, brt);
    assert_eq!(days.len(), 2);
    assert_eq!(days[0].date.to_string(), "2024-02-29");
    assert_eq!(days[1].date.to_string(), "2024-03-01");
    // [0,3): a allocated 4+4+0 = 8, in-quota 2+2 = 4, borrowed 4; b 3 in quota, lent
    // 2/3 + 1 = 5/3; c 0+1+1 = 2 in quota, lent 4/3 + 1 = 7/3; pool nothing.
    assert_split(
        &days[0].split,
        &[
            ("a", 6.0, 8.0, 4.0, 4.0, 0.0),
            ("b", 12.0, 3.0, 3.0, 0.0, 5.0 / 3.0),
            ("c", 6.0, 2.0, 2.0, 0.0, 7.0 / 3.0),
            (POOL, 0.0, 0.0, 0.0, 0.0, 0.0),
        ],
    );
    // [3,6): a 0+1+1 = 2 in quota, lent 1/2 + 1/4; b 5+1+1 = 7, in-quota 4+1+1 = 6, borrowed 1,
    // lent 1/4; c 3, in-quota 2, borrowed 1, lent 1/2; pool quota 2x2 = 4, lent 1/2.
    assert_split(
        &days[1].split,
        &[
            ("a", 6.0, 2.0, 2.0, 0.0, 0.75),
            ("b", 12.0, 7.0, 6.0, 1.0, 0.25),
            ("c", 6.0, 3.0, 2.0, 1.0, 0.5),
            (POOL, 4.0, 0.0, 0.0, 0.0, 0.5),
        ],
    );
}

fn example_costs(split: IdleCostSplit) -> accountd::model::cost::CostReport {
    let (runs, teams, capacity, period) = example();
    let usage = TypedUsage::from_split(
        "default",
        10.0,
        &split_usage(&runs, &teams, &capacity, period),
    );
    team_costs(
        &[usage],
        CostRule {
            borrowed_cost_factor: 0.5,
            idle_split: split,
        },
    )
}

/// Costs of the example at 10 per GPU-hour, borrowed hours at factor 0.5:
///
/// - allocated: a 10 x (6 + 0.5 x 4) = 80; b 10 x (9 + 0.5 x 1) = 95; c 10 x (4 + 0.5 x 1) = 45;
///   sum 220 (250 at factor 1: the discount is 30);
/// - capacity: 10 x 52 = 520; idle: 520 - 220 = 300 (270 unused capacity + 30 discount).
const ALLOCATED: [(&str, f64); 3] = [("a", 80.0), ("b", 95.0), ("c", 45.0)];

fn assert_costs(report: &accountd::model::cost::CostReport, idle: [(&str, f64); 4]) {
    let names: Vec<&str> = report.rows.iter().map(|r| r.team.as_str()).collect();
    assert_eq!(names, ["a", "b", "c", IDLE]);
    for (team, allocated) in ALLOCATED {
        assert_close!(
            report.row(team).unwrap().allocated_cost,
            allocated,
            format!("{team} allocated cost")
        );
    }
    for (team, idle) in idle {
        let row = report.row(team).unwrap();
        assert_close!(row.idle_cost, idle, format!("{team} idle cost"));
        assert_close!(
            row.total_cost,
            row.allocated_cost + idle,
            format!("{team} total cost")
        );
    }
    assert_close!(report.capacity_cost, 520.0, "capacity cost");
    assert_close!(report.idle_cost, 300.0, "idle cost");
    assert_close!(report.borrowed_discount, 30.0, "borrowed discount");
    let total: f64 = report.rows.iter().map(|r| r.total_cost).sum();
    assert!(
        ((total - 520.0) / 520.0).abs() <= 1e-9,
        "rows add to {total}"
    );
}

#[test]
fn costs_of_the_example_by_quota_share() {
    // Weights: quota hours a 12, b 24, c 12, unallocated 4 -> (idle); sum 52.
    // a 300 x 12/52 = 900/13 ≈ 69.23; b 1800/13 ≈ 138.46; c 900/13; (idle) 300 x 4/52 = 300/13.
    assert_costs(
        &example_costs(IdleCostSplit::QuotaShare),
        [
            ("a", 900.0 / 13.0),
            ("b", 1800.0 / 13.0),
            ("c", 900.0 / 13.0),
            (IDLE, 300.0 / 13.0),
        ],
    );
}

#[test]
fn costs_of_the_example_by_usage_share() {
    // Weights: allocated hours a 10, b 10, c 5; sum 25.
    // a 300 x 10/25 = 120 (total 200); b 120 (total 215); c 60 (total 105); (idle) 0.
    assert_costs(
        &example_costs(IdleCostSplit::UsageShare),
        [("a", 120.0), ("b", 120.0), ("c", 60.0), (IDLE, 0.0)],
    );
}

#[test]
fn costs_of_the_example_in_an_idle_row() {
    // Everything idle in (idle): 300; teams pay their allocated cost only.
    assert_costs(
        &example_costs(IdleCostSplit::IdleRow),
        [("a", 0.0), ("b", 0.0), ("c", 0.0), (IDLE, 300.0)],
    );
}

#[test]
fn decay_integrates_the_half_life_exactly() {
    // h = 1 hour, now = T0 + 4h.
    // a: 1 GPU over the last hour: ∫0^h 2^(-x/h) dx = h/ln 2 x (1 - 1/2) = 3600/(2 ln 2)
    //    = 2596.8510736001344.
    // b: 2 GPUs over the hour before: 2 x h/ln 2 x (1/2 - 1/4) = 3600/(2 ln 2), the same.
    // c: 1 GPU from 1h to 10h, clipped at now (4h): h/ln 2 x (1 - 1/8) = 3600 x 7/(8 ln 2).
    let now = T0 + 4 * H;
    let usage = decayed_usage(
        &[run("a", 1, 3, 4), run("b", 2, 2, 3), run("c", 1, 1, 10)],
        now,
        Duration::from_secs(3600),
    );
    let ln2 = std::f64::consts::LN_2;
    assert_close!(usage["a"], 2_596.851_073_600_134_4, "a");
    assert_close!(usage["b"], 3600.0 / (2.0 * ln2), "b");
    assert_close!(usage["c"], 3600.0 * 7.0 / (8.0 * ln2), "c");
    // One half-life later, with no new usage, everything is halved.
    let later = decayed_usage(&[run("a", 1, 3, 4)], now + H, Duration::from_secs(3600));
    assert_close!(later["a"], usage["a"] / 2.0, "a an hour later");
}

#[test]
fn factors_of_three_teams() {
    // Weights 40, 40, 20 -> S = 0.4, 0.4, 0.2. Decayed usage 300, 500, 0 of 800 (plus an account
    // without shares with 200: the total is 1000) -> U = 0.3, 0.5, 0.
    // d = 1: agents 2^(-0.3/0.4) = 2^(-0.75) = 0.5946035575013605;
    //        training 2^(-0.5/0.4) = 2^(-1.25) = 0.42044820762685725; research 2^0 = 1.
    // d = 2: agents 2^(-0.375) = 0.7711054127039704; training 2^(-0.625) = 0.6484197773255048.
    let shares = BTreeMap::from([
        ("agents".to_string(), 40),
        ("training".to_string(), 40),
        ("research".to_string(), 20),
    ]);
    let usage = BTreeMap::from([
        ("agents".to_string(), 300.0),
        ("training".to_string(), 500.0),
        ("research".to_string(), 0.0),
        ("stray".to_string(), 200.0),
    ]);
    let f = factors(&shares, &usage, 1.0);
    assert_eq!(f.len(), 3, "only teams with shares get a factor");
    assert_close!(f["agents"], 0.594_603_557_501_360_5, "agents, d=1");
    assert_close!(f["training"], 0.420_448_207_626_857_25, "training, d=1");
    assert_eq!(f["research"], 1.0);
    let f = factors(&shares, &usage, 2.0);
    assert_close!(f["agents"], 0.771_105_412_703_970_4, "agents, d=2");
    assert_close!(f["training"], 0.648_419_777_325_504_8, "training, d=2");
    assert_eq!(f["research"], 1.0);
}

/// The worked example of Slurm's classic fair-share documentation
/// (`doc/html/classic_fair_share.shtml`, section "Example", checked against the 22.05.8 source).
///
/// Accounts A (40 shares) and D (60) under the root; B (30) and C (10) under A; E (25) and F (35)
/// under D. User 1 is the sole member of B, users 2 and 3 hold one share each in C, user 4 is the
/// sole member of E, user 5 of F. Usage, as fractions of the machine: user 1 0.2, user 2 0.25,
/// user 4 0.25; the others none. The document gives its usages already normalised, so they are the
/// associations' `usage` as they are (they do not add up to 1: normalising them again would not
/// reproduce the document).
///
/// The published factors are the users', two tiers below the root, through the effective usage
/// of their accounts: this is why the tree, not only one tier of teams, is modelled.
fn slurm_example() -> Vec<AssociationFairShare> {
    let user = |name: &str, usage: f64| Association {
        name: name.to_string(),
        shares: 1,
        usage,
        children: Vec::new(),
    };
    let account = |name: &str, shares: u32, children: Vec<Association>| Association {
        name: name.to_string(),
        shares,
        usage: 0.0,
        children,
    };
    let tree = vec![
        account(
            "A",
            40,
            vec![
                account("B", 30, vec![user("user1", 0.2)]),
                account("C", 10, vec![user("user2", 0.25), user("user3", 0.0)]),
            ],
        ),
        account(
            "D",
            60,
            vec![
                account("E", 25, vec![user("user4", 0.25)]),
                account("F", 35, vec![user("user5", 0.0)]),
            ],
        ),
    ];
    hierarchy_factors(&tree, 1.0)
}

fn association<'a>(all: &'a [AssociationFairShare], path: &str) -> &'a AssociationFairShare {
    all.iter().find(|a| a.path == path).unwrap()
}

/// `x` printed with `digits` decimals, as the document prints it.
fn printed(x: f64, digits: usize) -> String {
    format!("{x:.digits$}")
}

#[test]
fn slurm_classic_example_normalized_shares() {
    // "User 1 normalized share: 0.3" ... "User 5 normalized share: 0.35": the product of
    // shares / sibling shares down the tree, e.g. user 2: 40/100 x 10/40 x 1/2 = 0.05.
    let all = slurm_example();
    for (path, shares) in [
        ("A/B/user1", 0.3),
        ("A/C/user2", 0.05),
        ("A/C/user3", 0.05),
        ("D/E/user4", 0.25),
        ("D/F/user5", 0.35),
        // "Account A has .4 normalized shares, B has .3 normalized shares".
        ("A", 0.4),
        ("A/B", 0.3),
    ] {
        assert_close!(association(&all, path).normalized_shares, shares, path);
    }
}

#[test]
fn slurm_classic_example_effective_usage() {
    let all = slurm_example();
    // "Account A's effective usage is therefore equal to .45. Account D's effective usage is
    // equal to .25." (top tier: UE = UA = the sum of its users' usage).
    assert_close!(association(&all, "A").effective_usage, 0.45, "A");
    assert_close!(association(&all, "D").effective_usage, 0.25, "D");
    // "Account B effective usage: 0.2 + ((0.45 - 0.2) * 30 / 40) = 0.3875"
    // "Account C effective usage: 0.25 + ((0.45 - 0.25) * 10 / 40) = 0.3"
    // "Account E effective usage: 0.25 + ((0.25 - 0.25) * 25 / 60) = 0.25"
    // "Account F effective usage: 0.0 + ((0.25 - 0.0) * 35 / 60) = 0.1458" (printed to 4 places)
    assert_close!(association(&all, "A/B").effective_usage, 0.3875, "B");
    assert_close!(association(&all, "A/C").effective_usage, 0.3, "C");
    assert_close!(association(&all, "D/E").effective_usage, 0.25, "E");
    assert_eq!(
        printed(association(&all, "D/F").effective_usage, 4),
        "0.1458"
    );
    // "User 1 effective usage: 0.2 + ((0.3875 - 0.2) * 1 / 1) = 0.3875"
    // "User 2 effective usage: 0.25 + ((0.3 - 0.25) * 1 / 2) =  0.275"
    // "User 3 effective usage: 0.0 + ((0.3 - 0.0) * 1 / 2) =  0.15"
    // "User 4 effective usage: 0.25 + ((0.25 - 0.25) * 1 / 1) = 0.25"
    // "User 5 effective usage: 0.0 + ((.1458 - 0.0) * 1 / 1) =  0.1458"
    assert_close!(association(&all, "A/B/user1").effective_usage, 0.3875, "1");
    assert_close!(association(&all, "A/C/user2").effective_usage, 0.275, "2");
    assert_close!(association(&all, "A/C/user3").effective_usage, 0.15, "3");
    assert_close!(association(&all, "D/E/user4").effective_usage, 0.25, "4");
    assert_eq!(
        printed(association(&all, "D/F/user5").effective_usage, 4),
        "0.1458"
    );
}

#[test]
fn slurm_classic_example_factors() {
    // "User 1 fair-share factor: 2**(-.3875 / .3) =  0.408479"
    // "User 2 fair-share factor: 2**(-.275 / .05) =  0.022097"
    // "User 3 fair-share factor: 2**(-.15 / .05) =   0.125000"
    // "User 4 fair-share factor: 2**(-.25 / .25) =   0.500000"
    // "User 5 fair-share factor: 2**(-.1458 / .35) = 0.749154"
    // (User 5's printed factor is that of the unrounded UE = 0.25 x 35/60 = 0.1458333...:
    // 2^(-0.1458/0.35) would print 0.749203.)
    let all = slurm_example();
    for (path, factor) in [
        ("A/B/user1", "0.408479"),
        ("A/C/user2", "0.022097"),
        ("A/C/user3", "0.125000"),
        ("D/E/user4", "0.500000"),
        ("D/F/user5", "0.749154"),
    ] {
        assert_eq!(printed(association(&all, path).factor, 6), factor, "{path}");
    }
    // "user 5's job would be granted the highest scheduling priority".
    let best = all
        .iter()
        .filter(|a| a.path.contains("user"))
        .max_by(|x, y| x.factor.total_cmp(&y.factor))
        .unwrap();
    assert_eq!(best.path, "D/F/user5");
}

#[test]
fn one_tier_of_the_slurm_example_is_what_factors_computes() {
    // The top tier of the example as teams: A (40) used 0.45, D (60) 0.25 of the machine.
    // `factors` normalises by the total usage (0.7), so feed it usage 0.45 and 0.25 plus 0.3 of
    // an account without shares to keep the document's fractions: F_A = 2^(-0.45/0.4) =
    // 2^(-1.125) = 0.4585020216023356, F_D = 2^(-0.25/0.6) = 0.7491535384383408 (the same as
    // user 5's: D's usage over D's share equals F's effective usage over F's share).
    let shares = BTreeMap::from([("A".to_string(), 40), ("D".to_string(), 60)]);
    let usage = BTreeMap::from([
        ("A".to_string(), 0.45),
        ("D".to_string(), 0.25),
        ("rest".to_string(), 0.3),
    ]);
    let f = factors(&shares, &usage, 1.0);
    assert_close!(f["A"], 0.458_502_021_602_335_6, "A");
    assert_close!(f["D"], 0.749_153_538_438_340_8, "D");
    let tree = slurm_example();
    assert_close!(association(&tree, "A").factor, f["A"], "A in the tree");
    assert_close!(association(&tree, "D").factor, f["D"], "D in the tree");
}

// ---------------------------------------------------------------------------------------------
// Quotas per GPU type (issue 10): a month of two GPU types, through the teams report.

mod typed_month {
    use std::collections::BTreeMap;

    use accountd::period::Period;
    use accountd::report::{
        compute_fairshare, compute_usage, CapacitySource, FairshareParams, TeamRow, TypeRow,
        UsageParams, UsageReport,
    };
    use accountd::store::{CapacitySample, GpuTypes, RunUsage};

    use super::close;

    const H: i64 = 3600;
    /// 2024-06-01T00:00:00Z: June has 30 days, 720 hours.
    const T0: i64 = 1_717_200_000;
    const MONTH: i64 = 720;

    /// 4 h100 at 4.00/h (two nodes of 2) and 6 a100 at 2.00/h. Borrowed GPU-hours at half price,
    /// idle capacity cost by quota share (changed per test).
    const CONFIG: &str = r#"
[cluster]
name = "golden"
partitions = ["gpu"]
currency = "USD"

[gpu_types.h100]
rate_per_hour = 4.0

[gpu_types.a100]
rate_per_hour = 2.0

[[team]]
name = "agents"
quota = { h100 = 2 }
weight = 40

[[team]]
name = "training"
quota = { a100 = 4 }
weight = 40

[[team]]
name = "research"
quota = { h100 = 1, a100 = 1 }
lend_limit = { a100 = 1 }
weight = 20

[accountd]
borrowed_cost_factor = 0.5
idle_cost_split = "quota-share"
"#;

    fn run(
        id: i64,
        team: &str,
        partition: &str,
        gpu_type: &str,
        gpus: u64,
        from_h: i64,
        to_h: i64,
    ) -> RunUsage {
        RunUsage {
            id,
            account: team.into(),
            partition: partition.into(),
            start: T0 + from_h * H,
            end: Some(T0 + to_h * H),
            gpus,
            gpus_by_type: GpuTypes::new(&BTreeMap::from([(gpu_type.to_string(), gpus)])),
        }
    }

    /// The month's runs (hours from June 1st, 00:00 UTC):
    ///
    /// | run | team     | GPUs   | hours      |                                                  |
    /// |-----|----------|--------|------------|--------------------------------------------------|
    /// | 1   | agents   | 1 h100 | [0, 720)   | in its h100 quota                                |
    /// | 2   | agents   | 1 a100 | [0, 720)   | no a100 quota: borrowed, across types            |
    /// | 3   | training | 4 a100 | [0, 360)   | its whole a100 quota, then none                  |
    /// | 4   | training | 2 h100 | [100, 300) | no h100 quota: borrowed, across types            |
    /// | 5   | research | 1 a100 | [0, 720)   | its a100 quota                                   |
    /// | 6   | research | 1 h100 | [500, 600) | its h100 quota                                   |
    /// | 7   | agents   | 2 h100 | [0, 10)    | in partition `debug`: not governed, apart        |
    fn runs() -> Vec<RunUsage> {
        vec![
            run(1, "agents", "gpu", "h100", 1, 0, MONTH),
            run(2, "agents", "gpu", "a100", 1, 0, MONTH),
            run(3, "training", "gpu", "a100", 4, 0, 360),
            run(4, "training", "gpu", "h100", 2, 100, 300),
            run(5, "research", "gpu", "a100", 1, 0, MONTH),
            run(6, "research", "gpu", "h100", 1, 500, 600),
            run(7, "agents", "debug", "h100", 2, 0, 10),
        ]
    }

    /// One h100 node (2 GPUs) drained from hour 240 to hour 360 (days 11 to 15).
    fn capacity() -> Vec<CapacitySample> {
        let sample = |h: i64, h100: u32| CapacitySample {
            ts: T0 + h * H,
            gpus: h100 + 6,
            by_type: BTreeMap::from([("h100".to_string(), h100), ("a100".to_string(), 6)]),
        };
        vec![sample(0, 4), sample(240, 2), sample(360, 4)]
    }

    fn params(config: &str) -> UsageParams {
        let config = teamshare_config::parse(config, "teamshare.toml").unwrap();
        let period = Period {
            since: T0,
            until: T0 + MONTH * H,
        };
        UsageParams::from_config(&config, period, T0 + 800 * H, Vec::new())
    }

    fn report(config: &str) -> UsageReport {
        compute_usage(&runs(), &capacity(), &params(config))
    }

    fn row<'r>(r: &'r UsageReport, team: &str) -> &'r TeamRow {
        r.row(team).unwrap_or_else(|| panic!("no row {team}"))
    }

    fn of<'r>(r: &'r UsageReport, team: &str, gpu_type: &str) -> &'r TypeRow {
        row(r, team)
            .of_type(gpu_type)
            .unwrap_or_else(|| panic!("no {gpu_type} in {team}"))
    }

    macro_rules! assert_close {
        ($actual:expr, $expected:expr, $what:expr) => {{
            let (a, e) = ($actual, $expected);
            assert!(close(a, e), "{}: got {a}, expected {e}", $what);
        }};
    }

    /// (team, type, quota GPU-hours, allocated, in quota, borrowed, lent), GPU-hours.
    type Expected = (&'static str, &'static str, f64, f64, f64, f64, f64);

    /// h100, interval by interval (capacity C; pool = max(0, C - sum of quotas 2 + 0 + 1);
    /// idle = min(L, Q - in-quota): agents L 2, research L 0 (it lends only a100)):
    ///
    /// | hours      | C | U agents, training, research | borrowed   | lendable             | lent                           |
    /// |------------|---|------------------------------|------------|----------------------|--------------------------------|
    /// | [0, 100)   | 4 | 1, 0, 0                      | -          |                      |                                |
    /// | [100, 240) | 4 | 1, 2, 0                      | training 2 | agents 1 + pool 1    | agents 1 x 140, pool 1 x 140   |
    /// | [240, 300) | 2 | 1, 2, 0                      | training 2 | agents 1 + pool 0    | agents 1 x 60; 1 x 60 beyond   |
    /// |            |   |                              |            |                      | what was lendable, to (pool)   |
    /// | [300, 500) | 2, then 4 at 360 | 1, 0, 0       | -          |                      |                                |
    /// | [500, 600) | 4 | 1, 0, 1                      | -          |                      |                                |
    /// | [600, 720) | 4 | 1, 0, 0                      | -          |                      |                                |
    ///
    /// agents: allocated = in quota 720; lent 140 + 60 = 200; quota 2 x 720 = 1440.
    /// training: allocated = borrowed 2 x 200 = 400. research: 100 in quota; quota 720.
    /// (pool): lent 140 + 60 = 200; its quota (the unallocated h100) 1 x 240 + 0 + 1 x 360 = 600.
    /// Capacity 4 x 240 + 2 x 120 + 4 x 360 = 2640. Borrowed 400 = lent 200 + 200.
    ///
    /// a100 (C = 6, quotas training 4 + research 1, pool 1; training L 4, research L 1):
    ///
    /// | hours      | U agents, training, research | borrowed | lendable                      | lent                          |
    /// |------------|------------------------------|----------|-------------------------------|-------------------------------|
    /// | [0, 360)   | 1, 4, 1                      | agents 1 | pool 1                        | pool 1 x 360                  |
    /// | [360, 720) | 1, 0, 1                      | agents 1 | training 4 + research 0 + pool 1 | training 4/5 x 360 = 288, pool 1/5 x 360 = 72 |
    ///
    /// agents: borrowed 720. training: in quota 4 x 360 = 1440, lent 288, quota 2880.
    /// research: 720 in quota, quota 720. (pool): lent 360 + 72 = 432, quota 720.
    /// Capacity 6 x 720 = 4320. Borrowed 720 = lent 288 + 432.
    const EXPECTED: [Expected; 8] = [
        ("agents", "h100", 1440.0, 720.0, 720.0, 0.0, 200.0),
        ("agents", "a100", 0.0, 720.0, 0.0, 720.0, 0.0),
        ("training", "h100", 0.0, 400.0, 0.0, 400.0, 0.0),
        ("training", "a100", 2880.0, 1440.0, 1440.0, 0.0, 288.0),
        ("research", "h100", 720.0, 100.0, 100.0, 0.0, 0.0),
        ("research", "a100", 720.0, 720.0, 720.0, 0.0, 0.0),
        ("(pool)", "h100", 600.0, 0.0, 0.0, 0.0, 200.0),
        ("(pool)", "a100", 720.0, 0.0, 0.0, 0.0, 432.0),
    ];

    #[test]
    fn the_split_is_per_gpu_type() {
        let r = report(CONFIG);
        assert!(r.typed);
        assert_eq!(r.capacity_source, CapacitySource::Samples);
        for (team, gpu_type, quota, allocated, in_quota, borrowed, lent) in EXPECTED {
            let t = of(&r, team, gpu_type);
            let what = format!("{team} {gpu_type}");
            assert_close!(t.quota_hours().unwrap(), quota, format!("{what} quota"));
            assert_close!(t.gpu_hours(), allocated, format!("{what} allocated"));
            assert_close!(t.in_quota_hours(), in_quota, format!("{what} in quota"));
            assert_close!(t.borrowed_hours(), borrowed, format!("{what} borrowed"));
            assert_close!(t.lent_hours(), lent, format!("{what} lent"));
        }
        // The administrator's case: agents (quota h100 = 2) runs 1 h100 and 1 a100 all month:
        // 720 GPU-hours in quota (h100) and 720 borrowed (a100, from training and the pool),
        // not 1440 in quota.
        let agents = row(&r, "agents");
        assert_close!(agents.gpu_hours(), 1440.0, "agents allocated");
        assert_close!(agents.in_quota_hours(), 720.0, "agents in quota");
        assert_close!(agents.borrowed_hours(), 720.0, "agents borrowed");
        assert_close!(agents.lent_hours(), 200.0, "agents lent");
        // Rows are the sums of their types: training 400 + 1440 = 1840, 1440 in quota,
        // 400 borrowed, 288 lent; research 820 in quota; (pool) 200 + 432 = 632.
        let training = row(&r, "training");
        assert_close!(training.gpu_hours(), 1840.0, "training allocated");
        assert_close!(training.borrowed_hours(), 400.0, "training borrowed");
        assert_close!(training.lent_hours(), 288.0, "training lent");
        assert_close!(row(&r, "research").in_quota_hours(), 820.0, "research");
        assert_close!(row(&r, "(pool)").lent_hours(), 632.0, "pool lent");
        // % of quota used: agents 720 of 1440 = 50 %; research (100 + 720) of (720 + 720),
        // 56.94 %; its h100 100 of 720 = 13.89 %, its a100 720 of 720 = 100 %.
        assert_close!(agents.quota_used_percent().unwrap(), 50.0, "agents %");
        assert_close!(
            row(&r, "research").quota_used_percent().unwrap(),
            100.0 * 820.0 / 1440.0,
            "research %"
        );
        assert_close!(
            of(&r, "research", "h100").quota_used_percent().unwrap(),
            100.0 * 100.0 / 720.0,
            "research h100 %"
        );
        assert_close!(
            of(&r, "research", "a100").quota_used_percent().unwrap(),
            100.0,
            "research a100 %"
        );
        // Capacity 2640 + 4320 = 6960 GPU-hours; 60 h100 GPU-hours were borrowed beyond what was
        // lendable (the drain under training's running jobs).
        assert_close!(r.capacity_gpu_seconds / 3600.0, 6960.0, "capacity");
        assert_close!(
            r.capacity_of("h100").unwrap().capacity_seconds / 3600.0,
            2640.0,
            "h100"
        );
        assert_close!(r.over_lendable_seconds / 3600.0, 60.0, "over lendable");
        // Allocated in the governed partitions: 1440 + 1840 + 820 = 4100 (run 7 is not in it).
        assert_close!(r.allocated_gpu_seconds / 3600.0, 4100.0, "allocated");
        // Jobs: agents 2 (run 7 is outside), one per type.
        assert_eq!((agents.jobs, of(&r, "agents", "h100").jobs), (2, 1));
    }

    #[test]
    fn runs_outside_the_governed_partitions_are_apart() {
        let r = report(CONFIG);
        // Run 7: 2 h100 for 10 h in `debug`: 20 GPU-hours at 4.00 = 80, in no other figure.
        let debug = r.outside_row("agents").unwrap();
        assert_eq!((debug.jobs, debug.gpu_seconds), (1, 20 * 3600));
        assert_close!(debug.cost.unwrap(), 80.0, "list price");
        assert_eq!((debug.in_quota_seconds, debug.total_cost), (0.0, None));
        assert_eq!(r.outside.len(), 1);
    }

    /// Costs at 4.00 (h100) and 2.00 (a100), borrowed hours at 0.5:
    ///
    /// - allocated: agents 4 x 720 + 2 x 0.5 x 720 = 2880 + 720 = 3600;
    ///   training 4 x 0.5 x 400 + 2 x 1440 = 800 + 2880 = 3680; research 4 x 100 + 2 x 720 =
    ///   400 + 1440 = 1840.
    /// - capacity: h100 4 x 2640 = 10560, a100 2 x 4320 = 8640; 19200 in all.
    /// - idle: h100 10560 - (2880 + 800 + 400) = 6480; a100 8640 - (720 + 2880 + 1440) = 3600.
    /// - list price (`cost`): agents 4 x 720 + 2 x 720 = 4320; training 4 x 400 + 2 x 1440 = 4480;
    ///   research 4 x 100 + 2 x 720 = 1840.
    fn assert_allocated_and_capacity(r: &UsageReport) {
        for (team, h100, a100, list) in [
            ("agents", 2880.0, 720.0, 4320.0),
            ("training", 800.0, 2880.0, 4480.0),
            ("research", 400.0, 1440.0, 1840.0),
        ] {
            assert_close!(
                of(r, team, "h100").allocated_cost.unwrap(),
                h100,
                format!("{team} h100 allocated")
            );
            assert_close!(
                of(r, team, "a100").allocated_cost.unwrap(),
                a100,
                format!("{team} a100 allocated")
            );
            assert_close!(
                row(r, team).allocated_cost.unwrap(),
                h100 + a100,
                format!("{team} allocated")
            );
            assert_close!(row(r, team).cost.unwrap(), list, format!("{team} list"));
        }
        assert_close!(r.capacity_cost.unwrap(), 19200.0, "capacity cost");
        let h100 = r.capacity_of("h100").unwrap();
        let a100 = r.capacity_of("a100").unwrap();
        assert_close!(h100.capacity_cost.unwrap(), 10560.0, "h100 capacity cost");
        assert_close!(h100.idle_cost.unwrap(), 6480.0, "h100 idle cost");
        assert_close!(a100.capacity_cost.unwrap(), 8640.0, "a100 capacity cost");
        assert_close!(a100.idle_cost.unwrap(), 3600.0, "a100 idle cost");
        let total: f64 = r.rows.iter().filter_map(|row| row.total_cost).sum();
        assert_close!(total, 19200.0, "rows add up to the capacity cost");
    }

    /// (team, h100 idle cost, a100 idle cost).
    fn assert_idle(r: &UsageReport, expected: [(&str, f64, f64); 4]) {
        for (team, h100, a100) in expected {
            let t = row(r, team);
            let idle =
                |gpu_type: &str| t.of_type(gpu_type).and_then(|x| x.idle_cost).unwrap_or(0.0);
            assert_close!(idle("h100"), h100, format!("{team} h100 idle"));
            assert_close!(idle("a100"), a100, format!("{team} a100 idle"));
            assert_close!(t.idle_cost.unwrap(), h100 + a100, format!("{team} idle"));
            assert_close!(
                t.total_cost.unwrap(),
                t.allocated_cost.unwrap() + h100 + a100,
                format!("{team} total")
            );
        }
    }

    #[test]
    fn costs_per_type_with_the_idle_cost_by_quota_share() {
        let r = report(CONFIG);
        assert_allocated_and_capacity(&r);
        // h100 weights: quota hours agents 1440, research 720, and the unallocated 600 to (idle);
        // 2760 in all: agents 6480 x 1440/2760 = 77760/23, research 38880/23, (idle) 32400/23.
        // a100: training 2880, research 720, unallocated 720; 4320 in all: training 3600 x
        // 2880/4320 = 2400, research 600, (idle) 600.
        assert_idle(
            &r,
            [
                ("agents", 77760.0 / 23.0, 0.0),
                ("training", 0.0, 2400.0),
                ("research", 38880.0 / 23.0, 600.0),
                ("(idle)", 32400.0 / 23.0, 600.0),
            ],
        );
        // agents: 3600 + 77760/23 = 6980.87...; training 3680 + 2400 = 6080.
        assert_close!(
            row(&r, "agents").total_cost.unwrap(),
            3600.0 + 77760.0 / 23.0,
            "agents total"
        );
        assert_close!(row(&r, "training").total_cost.unwrap(), 6080.0, "training");
    }

    #[test]
    fn costs_per_type_with_the_idle_cost_by_usage_share() {
        let r = report(&CONFIG.replace("quota-share", "usage-share"));
        assert_allocated_and_capacity(&r);
        // h100 weights: allocated hours agents 720, training 400, research 100; 1220 in all:
        // 6480 x 720/1220 = 233280/61, x 400/1220 = 129600/61, x 100/1220 = 32400/61.
        // a100: agents 720, training 1440, research 720 of 2880: 900, 1800, 900.
        assert_idle(
            &r,
            [
                ("agents", 233280.0 / 61.0, 900.0),
                ("training", 129600.0 / 61.0, 1800.0),
                ("research", 32400.0 / 61.0, 900.0),
                ("(idle)", 0.0, 0.0),
            ],
        );
    }

    #[test]
    fn costs_per_type_with_the_idle_cost_in_an_idle_row() {
        let r = report(&CONFIG.replace("quota-share", "idle-row"));
        assert_allocated_and_capacity(&r);
        assert_idle(
            &r,
            [
                ("agents", 0.0, 0.0),
                ("training", 0.0, 0.0),
                ("research", 0.0, 0.0),
                ("(idle)", 6480.0, 3600.0),
            ],
        );
    }

    /// Fair-share over the month (no decay), each GPU-hour at its rate, runs in `gpu` only:
    /// agents 4 x 720 + 2 x 720 = 4320, training 4 x 400 + 2 x 1440 = 4480, research
    /// 4 x 100 + 2 x 720 = 1840; 10640 in all. Shares 40/100, 40/100, 20/100.
    /// F = 2^(-U/S): agents 2^(-(4320/10640)/0.4), training 2^(-(4480/10640)/0.4), research
    /// 2^(-(1840/10640)/0.2). In plain GPU-hours (1440, 1840, 820 of 4100) research, whose hours
    /// are mostly the cheaper a100, would be exactly at its share (F = 0.5): by cost it is
    /// under it.
    #[test]
    fn fair_share_is_over_cost_weighted_usage() {
        let config = teamshare_config::parse(CONFIG, "teamshare.toml").unwrap();
        let mut params =
            FairshareParams::from_config(&config, T0 + MONTH * H, Some(T0), Vec::new());
        params.half_life = std::time::Duration::ZERO;
        let r = compute_fairshare(&runs(), &params);
        let f = r.factors();
        assert_close!(f["agents"], (-(4320.0 / 10640.0) / 0.4f64).exp2(), "agents");
        assert_close!(
            f["training"],
            (-(4480.0 / 10640.0) / 0.4f64).exp2(),
            "training"
        );
        assert_close!(
            f["research"],
            (-(1840.0 / 10640.0) / 0.2f64).exp2(),
            "research"
        );
        assert!(f["research"] > 0.5);
        let research = r.rows.iter().find(|x| x.team == "research").unwrap();
        assert_close!(research.decayed_cost.unwrap(), 1840.0, "research cost");
        assert_close!(
            research.decayed_gpu_seconds / 3600.0,
            820.0,
            "research GPU-hours"
        );
    }
}
