use super::*;
use crate::model::cost::IDLE;
use crate::model::usage::POOL;
use crate::report::tests::*;
use crate::store::GpuTypes;
use chrono::Utc;

#[test]
fn days_add_up_to_the_period() {
    // Three days from T0 (midnight UTC), the period ending at 60 h, now at 70 h: runs within
    // a day, across midnights, and one still running.
    let mut p = params(60, 70);
    p.period.since = T0 + 2 * H;
    let runs = vec![
        run(1, "a", 3, Some(5), 2),
        run(2, "b", 20, Some(30), 3),
        run(3, "c", 10, Some(50), 1),
        run(4, "a", 40, None, 4),
        run(5, "stray", 47, Some(49), 1),
    ];
    let capacity = vec![cap(0, 8, &[]), cap(30, 10, &[])];
    let whole = compute_usage(&runs, &capacity, &p);
    let days = compute_usage_by_day(&runs, &capacity, &p, &chrono::Utc);
    assert_eq!(days.len(), 3);
    assert_eq!(days[0].period.since, T0 + 2 * H);
    assert_eq!(days[1].period.since, T0 + 24 * H);
    assert_eq!(days[2].period.until, T0 + 60 * H);
    for day in &days {
        assert_adds_up(day);
    }
    for row in &whole.rows {
        let of_days = |f: fn(&TeamRow) -> f64| {
            days.iter()
                .filter_map(|d| d.row(&row.team))
                .map(f)
                .sum::<f64>()
        };
        let seconds: u128 = days
            .iter()
            .filter_map(|d| d.row(&row.team))
            .map(|r| r.gpu_seconds)
            .sum();
        assert_eq!(seconds, row.gpu_seconds, "{}", row.team);
        assert!(close(of_days(|r| r.in_quota_seconds), row.in_quota_seconds));
        assert!(close(of_days(|r| r.borrowed_seconds), row.borrowed_seconds));
        assert!(close(of_days(|r| r.lent_seconds), row.lent_seconds));
        if row.kind != RowKind::Idle {
            assert!(close(
                of_days(|r| r.allocated_cost.unwrap()),
                row.allocated_cost.unwrap()
            ));
        }
    }
    // Each day's idle cost is split with that day's weights (here the unallocated capacity
    // changes at 30 h), so a team's idle shares need not add up to its share of the
    // period; the days' costs still add up to the period's capacity cost.
    let capacity_of_days: f64 = days.iter().map(|d| d.capacity_gpu_seconds).sum();
    assert!(close(capacity_of_days, whole.capacity_gpu_seconds));
    let cost_of_days: f64 = days.iter().map(|d| d.capacity_cost.unwrap()).sum();
    assert!(close(cost_of_days, whole.capacity_cost.unwrap()));
    // Day 2 ([24 h, 48 h)) has capacity 8 until 30 h, then 10: 6 x 8 + 18 x 10.
    assert!(close(
        days[1].capacity_gpu_seconds,
        ((6 * 8 + 18 * 10) * H) as f64
    ));
    // A run counts among the jobs of each day it held GPUs: c's run 3 on all three days.
    let jobs = |d: &UsageReport, t: &str| d.row(t).map_or(0, |r| r.jobs);
    assert_eq!(
        days.iter().map(|d| jobs(d, "c")).collect::<Vec<_>>(),
        [1, 1, 1]
    );
    assert_eq!(
        days.iter().map(|d| jobs(d, "a")).collect::<Vec<_>>(),
        [1, 1, 1]
    );
    assert_eq!(jobs(&days[2], "stray"), 1);
    assert!(days[0].row("stray").is_none());
}

#[test]
fn the_split_and_costs_are_the_models() {
    // Hand-computed in tests/model_golden.rs: a 10/6/4 lent 3/4, b 10/9/1 lent 23/12,
    // c 5/4/1 lent 17/6, (pool) lent 1/2; capacity 52 GPU-hours.
    let r = compute_usage(&example_runs(), &example_capacity(), &params(6, 6));
    let names: Vec<&str> = r.rows.iter().map(|r| r.team.as_str()).collect();
    assert_eq!(names, ["a", "b", "c", POOL, IDLE]);
    for (team, jobs, allocated, in_quota, borrowed, lent) in [
        ("a", 2, 10.0, 6.0, 4.0, 0.75),
        ("b", 2, 10.0, 9.0, 1.0, 23.0 / 12.0),
        ("c", 2, 5.0, 4.0, 1.0, 17.0 / 6.0),
        (POOL, 0, 0.0, 0.0, 0.0, 0.5),
    ] {
        let row = r.row(team).unwrap();
        assert_eq!(row.jobs, jobs, "{team}");
        assert!(close(row.gpu_hours(), allocated), "{team}: {row:?}");
        assert!(close(row.in_quota_hours(), in_quota), "{team}: {row:?}");
        assert!(close(row.borrowed_hours(), borrowed), "{team}: {row:?}");
        assert!(close(row.lent_hours(), lent), "{team}: {row:?}");
    }
    assert!(close(r.capacity_gpu_seconds / 3600.0, 52.0));
    assert_eq!(r.capacity_source, CapacitySource::Samples);
    // Costs (model_golden): allocated a 80, b 95, c 45; capacity 520; idle 300 split by
    // quota hours a 12, b 24, c 12, unallocated 4 (to (idle)) out of 52.
    let a = r.row("a").unwrap();
    assert!(close(a.allocated_cost.unwrap(), 80.0));
    assert!(close(a.idle_cost.unwrap(), 300.0 * 12.0 / 52.0));
    assert!(close(a.cost.unwrap(), 100.0)); // list price: 10 GPU-hours at 10
    assert!(close(
        r.row(IDLE).unwrap().idle_cost.unwrap(),
        300.0 * 4.0 / 52.0
    ));
    assert!(close(r.capacity_cost.unwrap(), 520.0));
    assert_eq!(r.row(POOL).unwrap().total_cost, Some(0.0));
    assert_eq!(r.row("a").unwrap().quota, Some(2));
    assert_eq!(r.row(POOL).unwrap().quota, None);
    assert_adds_up(&r);
}

#[test]
fn the_period_is_counted_up_to_now() {
    // Until 10 h but now is 6 h: the same as a period ending at 6 h.
    let later = compute_usage(&example_runs(), &example_capacity(), &params(10, 6));
    let now = compute_usage(&example_runs(), &example_capacity(), &params(6, 6));
    assert_eq!(later.rows, now.rows);
    assert_eq!(later.counted.until, T0 + 6 * H);
    assert_eq!(later.period.until, T0 + 10 * H);
    // A period wholly in the future counts nothing.
    let mut p = params(10, 6);
    p.period.since = T0 + 8 * H;
    let r = compute_usage(&example_runs(), &example_capacity(), &p);
    assert_eq!(r.capacity_gpu_seconds, 0.0);
    assert!(r.rows.iter().all(|row| row.gpu_seconds == 0));
}

#[test]
fn without_samples_the_capacity_is_the_sum_of_quotas() {
    let r = compute_usage(&example_runs(), &[], &params(6, 6));
    assert_eq!(r.capacity_source, CapacitySource::Estimate);
    assert!(close(r.capacity_gpu_seconds / 3600.0, 8.0 * 6.0));
    assert_adds_up(&r);
    // Samples from 4 h on: quotas (8) before, 10 after.
    let r = compute_usage(&example_runs(), &[cap(4, 10, &[])], &params(6, 6));
    assert_eq!(r.capacity_source, CapacitySource::EstimateUntil(T0 + 4 * H));
    assert!(close(r.capacity_gpu_seconds / 3600.0, 52.0));
    assert_adds_up(&r);
}

#[test]
fn a_typed_estimate_holds_the_quotas_and_what_was_in_use() {
    // Typed quotas a {h100 = 2}, b {a100 = 6}; rates h100 4, a100 2, no default. a holds 3
    // h100 in [0, 2) h (one beyond its quota, from the pool the estimate must have), b 2 a100
    // in [0, 1) h. Estimate: h100 max(2, 3) = 3, a100 max(6, 2) = 6; no untyped quota.
    let mut p = params(2, 2);
    p.teams = vec![quota("a", 2, 2), quota("b", 6, 6)];
    let zero = |name: &str| quota(name, 0, 0);
    p.typed_teams = BTreeMap::from([
        ("h100".to_string(), vec![quota("a", 2, 2), zero("b")]),
        ("a100".to_string(), vec![zero("a"), quota("b", 6, 6)]),
    ]);
    p.quota_by_type = BTreeMap::from([("h100".to_string(), 2), ("a100".to_string(), 6)]);
    p.rates = Rates::new(BTreeMap::from([
        ("h100".to_string(), 4.0),
        ("a100".to_string(), 2.0),
    ]));
    let typed = |id, team: &str, gpu_type: &str, gpus: u64, hours: i64| {
        let mut r = run(id, team, 0, Some(hours), gpus);
        r.gpus_by_type = GpuTypes::new(&BTreeMap::from([(gpu_type.to_string(), gpus)]));
        r
    };
    let runs = [typed(1, "a", "h100", 3, 2), typed(2, "b", "a100", 2, 1)];
    let r = compute_usage(&runs, &[], &p);
    assert_eq!(r.capacity_source, CapacitySource::Estimate);
    let estimate = r.estimate.as_ref().unwrap();
    let parts: Vec<(&str, u32, u32, u32)> = estimate
        .by_type
        .iter()
        .map(|t| (t.gpu_type.as_str(), t.gpus, t.quotas, t.peak))
        .collect();
    assert_eq!(parts, [("a100", 6, 6, 2), ("h100", 3, 2, 3)]);
    assert_eq!(estimate.unpriced_gpus(&p.rates), 0);
    // h100: capacity 3 x 2 h x 4 = 24; a: 2 in quota + 1 borrowed (half price) x 2 h:
    // 4 x (4 + 0.5 x 2) = 20; idle 4, never negative. The borrowed GPU came from the pool.
    let h100 = r.capacity_of("h100").unwrap();
    assert!(close(h100.capacity_cost.unwrap(), 24.0));
    assert!(close(h100.idle_cost.unwrap(), 4.0));
    assert!(close(r.row(POOL).unwrap().lent_hours(), 2.0));
    assert_eq!(r.over_lendable_seconds, 0.0);
    assert!(r.rows.iter().all(|row| row.idle_cost.unwrap() >= 0.0));
    assert_adds_up(&r);
    // A sample from 1 h on: the estimate only before it.
    let sample = cap(1, 10, &[("h100", 4), ("a100", 6)]);
    let r = compute_usage(&runs, &[sample], &p);
    assert_eq!(r.capacity_source, CapacitySource::EstimateUntil(T0 + H));
    // h100: 3 for the first hour, 4 for the second.
    assert!(close(
        r.capacity_of("h100").unwrap().capacity_seconds,
        7.0 * 3600.0
    ));
    assert_adds_up(&r);
}

#[test]
fn gpu_types_are_priced_at_their_rates() {
    // One team, quota 2, on 2 h100 (70/h) and 2 untyped GPUs (10/h), for 1 h: it holds
    // 2 h100 + 1 untyped, so 2 GPU-hours in quota and 1 borrowed.
    let mut p = params(1, 1);
    p.teams = vec![quota("a", 2, 0)];
    p.rates = Rates::new(BTreeMap::from([
        (DEFAULT_RATE.to_string(), 10.0),
        ("h100".to_string(), 70.0),
    ]));
    p.cost_rule.borrowed_cost_factor = 1.0;
    let mut typed = run(1, "a", 0, Some(1), 3);
    typed.gpus_by_type = GpuTypes::new(&BTreeMap::from([("h100".to_string(), 2)]));
    let r = compute_usage(&[typed], &[cap(0, 4, &[("h100", 2)])], &p);
    let a = r.row("a").unwrap();
    assert!(close(a.cost.unwrap(), 150.0));
    // At factor 1 the allocated cost is the list price whatever the proportions.
    assert!(close(a.allocated_cost.unwrap(), 150.0));
    // Capacity: 2 x 70 + 2 x 10 = 160; idle 10, all of it untyped capacity, split by quota
    // share: a's quota 2 against the 2 unallocated GPUs of the (idle) row.
    assert!(close(r.capacity_cost.unwrap(), 160.0));
    assert!(close(a.total_cost.unwrap(), 155.0));
    assert!(close(r.row(IDLE).unwrap().total_cost.unwrap(), 5.0));
    assert_adds_up(&r);
    // Borrowed hours at half price: 1 borrowed GPU-hour at the team's mix (2/3 h100,
    // 1/3 default): 150 - 0.5 x (2/3 x 70 + 1/3 x 10) = 125.
    p.cost_rule.borrowed_cost_factor = 0.5;
    let mut typed = run(1, "a", 0, Some(1), 3);
    typed.gpus_by_type = GpuTypes::new(&BTreeMap::from([("h100".to_string(), 2)]));
    let r = compute_usage(&[typed], &[cap(0, 4, &[("h100", 2)])], &p);
    assert!(close(r.row("a").unwrap().allocated_cost.unwrap(), 125.0));
    assert_adds_up(&r);
}

#[test]
fn accounts_without_quota_borrow_and_the_filter_keeps_named_rows() {
    let mut runs = example_runs();
    runs.push(run(8, "stray", 0, Some(1), 1));
    let r = compute_usage(&runs, &example_capacity(), &params(6, 6));
    let stray = r.row("stray").unwrap();
    assert_eq!(stray.kind, RowKind::Account);
    assert_eq!(stray.quota, None);
    assert!(close(stray.borrowed_hours(), 1.0));
    assert_adds_up(&r);

    let mut p = params(6, 6);
    p.only = vec!["c".into(), "nobody".into(), "a".into()];
    let r = compute_usage(&runs, &example_capacity(), &p);
    let names: Vec<&str> = r.rows.iter().map(|r| r.team.as_str()).collect();
    assert_eq!(names, ["a", "c", "nobody"]);
    assert_eq!(r.row("nobody").unwrap().gpu_seconds, 0);
    assert!(close(r.row("a").unwrap().gpu_hours(), 10.0));
}

#[test]
fn without_rates_there_is_no_cost() {
    let mut p = params(6, 6);
    p.rates = Rates::default();
    let r = compute_usage(&example_runs(), &example_capacity(), &p);
    assert!(r
        .rows
        .iter()
        .all(|row| row.cost.is_none() && row.total_cost.is_none()));
    assert!(r.row(IDLE).is_none());
    assert_eq!(r.capacity_cost, None);
    let t = render_teams(&r, Format::Table, false, &Utc);
    assert!(!t.contains("COST"), "{t}");
}

#[test]
fn table_has_the_rules_a_total_row_and_the_capacity() {
    let r = compute_usage(&example_runs(), &example_capacity(), &params(6, 6));
    let t = render_teams(&r, Format::Table, false, &Utc);
    let lines: Vec<&str> = t.lines().collect();
    assert_eq!(
        lines[0],
        "GPU usage on c from 2024-03-01 00:00:00 to 2024-03-01 06:00:00 (local time), GPU-hours and cost"
    );
    assert_eq!(
        lines[1],
        "rules: in quota, borrowed and lent on total quotas; idle capacity cost: idle_cost_split = \"quota-share\" (by quota GPU-hours); borrowed GPU-hours: borrowed_cost_factor = 0.5 (0.5 x rate)"
    );
    let cells = |l: &str| l.split_whitespace().map(str::to_string).collect::<Vec<_>>();
    assert_eq!(
        cells(lines[2]),
        [
            "TEAM",
            "JOBS",
            "QUOTA",
            "GPU-HOURS",
            "IN-QUOTA",
            "BORROWED",
            "LENT",
            "QUOTA-USED",
            "ALLOC-COST",
            "IDLE-COST",
            "TOTAL-COST",
            "(BRL)"
        ]
    );
    // a: 6 of its 2 x 6 = 12 quota GPU-hours used: 50 %.
    assert_eq!(
        cells(lines[3]),
        [
            "a", "2", "2", "10.0000", "6.0000", "4.0000", "0.7500", "50.0%", "80.00", "69.23",
            "149.23"
        ]
    );
    // c: 4 of 12: 33.3 %.
    assert_eq!(cells(lines[5])[7], "33.3%");
    assert_eq!(
        cells(lines[6]),
        ["(pool)", "0", "0.0000", "0.0000", "0.0000", "0.5000", "0.00", "0.00", "0.00"]
    );
    assert!(lines[8].starts_with("---"));
    // In quota 19 of the teams' 48 quota GPU-hours: 39.6 %.
    assert_eq!(
        cells(lines[9]),
        [
            "total", "6", "8", "25.0000", "19.0000", "6.0000", "6.0000", "39.6%", "220.00",
            "300.00", "520.00"
        ]
    );
    assert_eq!(
        lines[10],
        "capacity: 52.0000 GPU-hours costing 520.00 (BRL) (recorded by accountd run)"
    );
    assert_eq!(lines.len(), 11, "{t}");
    // Every table line has the header's width at most, the first row exactly.
    assert!(
        lines[3..10].iter().all(|l| l.len() <= lines[2].len()),
        "{t}"
    );
}

#[test]
fn csv_keeps_the_old_columns_first_and_gives_each_type_a_line() {
    let r = compute_usage(&example_runs(), &example_capacity(), &params(6, 6));
    let c = render_teams(&r, Format::Csv, false, &Utc);
    let lines: Vec<&str> = c.lines().collect();
    assert_eq!(
        lines[0],
        "team,jobs,gpu_hours,quota,cost,currency,since,until,in_quota_hours,borrowed_hours,lent_hours,allocated_cost,idle_cost,total_cost,kind,gpu_type,rate_per_hour,quota_gpu_hours,quota_used_percent,gpu_equivalents,gpu_equivalent_hours"
    );
    assert_eq!(
        lines[1],
        "a,2,10.0000,2,100.00,BRL,2024-03-01T00:00:00Z,2024-03-01T06:00:00Z,6.0000,4.0000,0.7500,80.00,69.23,149.23,team,,,12.0000,50.00,,10.0000"
    );
    // Untyped quotas: the type line has no quota of its own.
    assert_eq!(
        lines[2],
        "a,2,10.0000,,100.00,BRL,2024-03-01T00:00:00Z,2024-03-01T06:00:00Z,6.0000,4.0000,0.7500,80.00,69.23,149.23,team,default,10,,,1,10.0000"
    );
    // Each of a, b, c, (pool), (idle) and its one type.
    assert_eq!(lines.len(), 11, "{c}");
    assert!(lines[7].starts_with("(pool),0,0.0000,,0.00,"), "{c}");
    assert!(lines[7].ends_with(",pool,,,4.0000,,,0.0000"), "{c}");
    assert!(lines[9].starts_with("(idle),"), "{c}");
    assert!(lines[10].contains(",idle,default,10,,"), "{c}");
    assert_eq!(csv_field("a,b"), "\"a,b\"");
}

#[test]
fn json_has_stable_keys_and_full_precision() {
    let r = compute_usage(&example_runs(), &example_capacity(), &params(6, 6));
    let j = render_teams(&r, Format::Json, false, &Utc);
    let v: serde_json::Value = serde_json::from_str(&j).unwrap();
    let rows = v.as_array().unwrap();
    assert_eq!(rows.len(), 5);
    let keys = |o: &serde_json::Value| {
        let mut k: Vec<String> = o.as_object().unwrap().keys().cloned().collect();
        k.sort();
        k
    };
    assert_eq!(
        keys(&rows[0]),
        [
            "allocated_cost",
            "borrowed_hours",
            "by_type",
            "cost",
            "currency",
            "gpu_equivalent_hours",
            "gpu_hours",
            "idle_cost",
            "in_quota_hours",
            "jobs",
            "kind",
            "lent_hours",
            "quota",
            "quota_gpu_hours",
            "quota_used_percent",
            "since",
            "team",
            "total_cost",
            "until"
        ]
    );
    assert_eq!(
        keys(&rows[0]["by_type"][0]),
        [
            "allocated_cost",
            "borrowed_hours",
            "cost",
            "gpu_equivalent_hours",
            "gpu_equivalents",
            "gpu_hours",
            "gpu_type",
            "idle_cost",
            "in_quota_hours",
            "jobs",
            "lent_hours",
            "quota",
            "quota_gpu_hours",
            "quota_used_percent",
            "rate_per_hour",
            "total_cost"
        ]
    );
    assert_eq!(rows[1]["team"], "b");
    assert_eq!(rows[1]["kind"], "team");
    assert_eq!(rows[1]["lent_hours"].as_f64().unwrap(), 23.0 / 12.0);
    assert_eq!(rows[1]["quota_used_percent"].as_f64().unwrap(), 37.5);
    assert_eq!(rows[1]["by_type"][0]["gpu_type"], "default");
    assert_eq!(rows[1]["by_type"][0]["rate_per_hour"], 10.0);
    assert_eq!(rows[0]["since"], "2024-03-01T00:00:00Z");
    assert!(rows[3]["quota"].is_null());
    assert_eq!(rows[3]["kind"], "pool");
    assert_eq!(rows[4]["kind"], "idle");
    let total: f64 = rows.iter().map(|r| r["total_cost"].as_f64().unwrap()).sum();
    assert!(close(total, 520.0));
}
