//! `accountd report`.

use super::*;

pub(crate) const SACCT_FIXTURE: &str = "\
1|1|testcluster|agents|alice|gpu|normal|COMPLETED|2024-05-01T00:59:00|2024-05-01T01:00:00|2024-05-01T03:00:00|02:00:00|billing=2,cpu=2,gres/gpu=2,node=1|2024-05-01T00:59:00|2880|1|billing=2,cpu=2,gres/gpu=2,node=1
2|2|testcluster|agents|alice|gpu|normal|RUNNING|2024-04-30T22:00:00|2024-04-30T23:00:00|Unknown|1-01:00:00|cpu=1,gres/gpu=1,node=1|2024-04-30T22:00:00|2880|1|cpu=1,gres/gpu=1,node=1
3|3|testcluster|training|bob|gpu|normal|COMPLETED|2024-05-01T10:00:00|2024-05-01T10:00:00|2024-05-01T10:30:00|00:30:00|cpu=8,gres/gpu=4,gres/gpu:h100=4,node=1|2024-05-01T10:00:00|2880|1|cpu=8,gres/gpu=4,gres/gpu:h100=4,node=1
4|4|testcluster|ghost|carol|gpu|normal|CANCELLED by 0|2024-05-01T12:00:00|2024-05-01T12:00:00|2024-05-01T13:00:00|01:00:00|gres/gpu=1|2024-05-01T12:00:00|2880|1|gres/gpu=1
5|5|testcluster|agents|alice|cpu|normal|COMPLETED|2024-05-01T12:00:00|2024-05-01T12:00:00|2024-05-01T13:00:00|01:00:00|cpu=4,node=1|2024-05-01T12:00:00|2880|1|cpu=4,node=1
6|6|othercluster|agents|alice|gpu|normal|COMPLETED|2024-05-01T12:00:00|2024-05-01T12:00:00|2024-05-01T13:00:00|01:00:00|gres/gpu=8|2024-05-01T12:00:00|2880|1|gres/gpu=8
";

/// The fixture's runs, and the capacity accountd run would have recorded since April: 8 GPUs,
/// 4 of them h100 (the other 4 untyped, at the default rate).
pub(crate) fn prepared_site() -> Site {
    let site = prepared_site_without_capacity();
    let mut store = Store::open(&site.path("accountd.db")).unwrap();
    let april = 1_711_929_600; // 2024-04-01T00:00:00Z
    let capacity = accountd::store::CapacitySample {
        ts: april,
        gpus: 8,
        by_type: [("h100".to_string(), 4)].into(),
    };
    assert!(store.record_capacity("testcluster", &capacity).unwrap());
    site
}

pub(crate) fn prepared_site_without_capacity() -> Site {
    let site = Site::new(CONFIG);
    let mut store = Store::open(&site.path("accountd.db")).unwrap();
    let batch = accountd::sacct::parse(SACCT_FIXTURE, &chrono::Utc);
    assert!(batch.malformed.is_empty());
    store.record_runs(&batch.runs, 1, None).unwrap();
    site
}

pub(crate) const PERIOD: [&str; 4] = ["--since", "2024-05-01", "--until", "2024-05-02"];

pub(crate) fn cells(l: &str) -> Vec<String> {
    l.split_whitespace().map(str::to_string).collect()
}

/// 2024-05-01, 24 h, capacity 8 (quotas 2 + 4: 2 GPUs unallocated), lend limits = quotas:
/// - agents holds 1 GPU all day (job 2) and 2 more in [01:00, 03:00) (job 1): 28 GPU-hours,
///   over its quota of 2 by 1 GPU for 2 h: 26 in quota, 2 borrowed; 26 of its 2 x 24 = 48
///   quota GPU-hours used: 54.2 %;
/// - training 4 h100 in [10:00, 10:30): 2 GPU-hours in quota (2 of 96: 2.1 %); ghost (no quota)
///   1 GPU for 1 h: borrowed;
/// - lent: in [01:00, 03:00) agents' 1 GPU from training's 4 idle and the pool's 2 (4:2); in
///   [12:00, 13:00) ghost's 1 from agents' 1 idle, training's 4, pool's 2 (1:4:2). training
///   4/3 + 4/7 = 40/21, agents 1/7, (pool) 2/3 + 2/7 = 20/21; the sum is 3 = borrowed.
/// - cost: capacity 4 untyped x 24 h x 10 + 4 h100 x 24 h x 70 = 960 + 6720 = 7680. Allocated:
///   agents 28 x 10, ghost 10, training 2 x 70. Idle per type, split by quota share (agents 2,
///   training 4, unallocated 2 -> (idle), each in the proportions of the capacity of the type:
///   half each): untyped 960 - 290 = 670 -> 167.5 / 335 / 167.5; h100 6720 - 140 = 6580 ->
///   1645 / 3290 / 1645.
#[test]
fn report_table() {
    let site = prepared_site();
    let o = site.run(false, &[&["report"][..], &PERIOD].concat());
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert!(stderr(&o).is_empty(), "{}", stderr(&o));
    let out = stdout(&o);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        lines[0],
        "GPU usage on testcluster from 2024-05-01 00:00:00 to 2024-05-02 00:00:00 (local time), GPU-hours and cost"
    );
    // The rules in force, with the configuration's names.
    assert_eq!(
        lines[1],
        "rules: in quota, borrowed and lent on total quotas; idle capacity cost: idle_cost_split = \"quota-share\" (by quota GPU-hours); borrowed GPU-hours: borrowed_cost_factor = 1 (1 x rate)"
    );
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
    // agents: 2 GPUs x 2 h + 1 GPU x 24 h (running: clipped at the period's end).
    assert_eq!(
        cells(lines[3]),
        [
            "agents", "2", "2", "28.0000", "26.0000", "2.0000", "0.1429", "54.2%", "280.00",
            "1812.50", "2092.50"
        ]
    );
    assert_eq!(
        cells(lines[4]),
        ["ghost", "1", "1.0000", "0.0000", "1.0000", "0.0000", "10.00", "0.00", "10.00"]
    );
    assert_eq!(
        cells(lines[5]),
        [
            "training", "1", "4", "2.0000", "2.0000", "0.0000", "1.9048", "2.1%", "140.00",
            "3625.00", "3765.00"
        ]
    );
    assert_eq!(
        cells(lines[6]),
        ["(pool)", "0", "0.0000", "0.0000", "0.0000", "0.9524", "0.00", "0.00", "0.00"]
    );
    assert_eq!(
        cells(lines[7]),
        ["(idle)", "0", "0.0000", "0.0000", "0.0000", "0.0000", "0.00", "1812.50", "1812.50"]
    );
    assert!(lines[8].starts_with("---"));
    // The teams' 28 in-quota GPU-hours of their 48 + 96: 19.4 %.
    assert_eq!(
        cells(lines[9]),
        [
            "total", "4", "6", "31.0000", "28.0000", "3.0000", "3.0000", "19.4%", "430.00",
            "7250.00", "7680.00"
        ]
    );
    assert_eq!(
        lines[10],
        "capacity: 192.0000 GPU-hours costing 7680.00 (BRL) (recorded by accountd run)"
    );
    assert_eq!(
        lines[11],
        "capacity by GPU type: h100 96.0000 costing 6720.00, default 96.0000 costing 960.00"
    );
    assert_eq!(lines.len(), 12);
}

/// `--by-type`: each row's types on lines under it. Untyped quotas: a team's in-quota and
/// borrowed hours follow its GPU-hours of each type (agents only used untyped GPUs, training
/// only h100), what was lent follows the types of every borrowed hour (all untyped here), and
/// the quota-share weights are in the proportions of the capacity (half h100, half untyped).
#[test]
fn report_table_by_type() {
    let site = prepared_site();
    let o = site.run(false, &[&["report", "--by-type"][..], &PERIOD].concat());
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let out = stdout(&o);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(cells(lines[2])[..3], ["TEAM", "TYPE", "JOBS"]);
    let line = |team: &str, gpu_type: &str| {
        lines
            .iter()
            .map(|l| cells(l))
            .find(|c| c.len() > 2 && c[0] == team && c[1] == gpu_type)
            .unwrap_or_else(|| panic!("no {team} {gpu_type} line in\n{out}"))
    };
    assert_eq!(line("agents", "all")[..4], ["agents", "all", "2", "2"]);
    // agents' untyped GPUs: the row's figures; its idle share of the h100 capacity (1645) is
    // a line of its own.
    assert_eq!(
        line("agents", "default")[2..],
        ["2", "28.0000", "26.0000", "2.0000", "0.1429", "280.00", "167.50", "447.50"]
    );
    assert_eq!(
        line("agents", "h100")[2..],
        ["0", "0.0000", "0.0000", "0.0000", "0.0000", "0.00", "1645.00", "1645.00"]
    );
    assert_eq!(
        line("training", "h100")[2..],
        ["1", "2.0000", "2.0000", "0.0000", "0.0000", "140.00", "3290.00", "3430.00"]
    );
    assert_eq!(
        line("training", "default")[2..],
        ["0", "0.0000", "0.0000", "0.0000", "1.9048", "0.00", "335.00", "335.00"]
    );
    // The totals per type: h100 140 allocated + 6580 idle = its capacity cost 6720.
    assert_eq!(
        line("total", "h100")[2..],
        ["1", "2.0000", "2.0000", "0.0000", "0.0000", "140.00", "6580.00", "6720.00"]
    );
    assert_eq!(
        line("total", "default")[2..],
        ["3", "29.0000", "26.0000", "3.0000", "3.0000", "290.00", "670.00", "960.00"]
    );
    let o = site.run(false, &["report", "fairshare", "--by-type"]);
    assert_eq!(code(&o), 2);
    assert!(
        stderr(&o).contains("--by-type applies to `report teams` only"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn report_without_capacity_samples_estimates_it_and_says_so() {
    let site = prepared_site_without_capacity();
    let o = site.run(false, &[&["report", "teams"][..], &PERIOD].concat());
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    // Quotas 2 + 4, untyped. Most in use at once: 4 h100 (training), 3 untyped (agents in
    // [01:00, 03:00)). h100: max(0 typed quotas, 4) = 4, all beyond typed quotas, so they count
    // towards the 6 untyped quota GPUs; untyped: max(3, 6 - 4) = 3. 7 GPUs.
    assert!(
        stderr(&o).contains("no capacity samples for the period (`accountd run` records them): the capacity is estimated as 7 GPUs, per GPU type the larger of the sum of quotas and the most GPUs in use at once: h100 4, default 3"),
        "{}",
        stderr(&o)
    );
    assert!(!stderr(&o).contains("warning"), "{}", stderr(&o));
    let out = stdout(&o);
    // 7 x 24 = 168 GPU-hours; 4 x 24 x 70 + 3 x 24 x 10 = 6720 + 720 = 7440.
    assert!(
        out.contains(
            "capacity: 168.0000 GPU-hours costing 7440.00 (BRL) (estimated: no capacity recorded)"
        ),
        "{out}"
    );
    assert!(
        out.contains("estimated capacity, per GPU type the larger of the quotas and the most GPUs in use at once: h100 4 (quotas 0, most in use at once 4), default 3 (quotas 6, most in use at once 3)"),
        "{out}"
    );
    // The usage does not depend on the capacity; what was lent does: the pool is 7 - 6 = 1,
    // so in [12:00, 13:00) ghost's GPU comes from agents' 1, training's 4, the pool's 1: 1/6.
    let agents = out.lines().find(|l| l.starts_with("agents")).unwrap();
    assert_eq!(
        &cells(agents)[..7],
        ["agents", "2", "2", "28.0000", "26.0000", "2.0000", "0.1667"]
    );
}

/// Before any capacity sample, a configuration priced by GPU type only (no `default` rate) gets
/// a capacity estimate whose idle cost is not negative, and a warning for the GPUs of the
/// estimate that no rate prices.
#[test]
fn an_estimate_without_a_default_rate_is_never_a_silent_negative_idle_row() {
    let site = prepared_site_without_capacity();
    let typed_rates_only = CONFIG.replace("[gpu_types.default]\nrate_per_hour = 10.0\n", "");
    fs::write(site.path("teamshare.toml"), typed_rates_only).unwrap();
    let o = site.run(
        false,
        &[&["report", "teams", "--format", "json"][..], &PERIOD].concat(),
    );
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    // h100: 4 GPUs x 24 h x 70 = 6720, of which training used 140: idle 6580. The 3 untyped
    // GPUs of the estimate have no rate: a warning, and no cost.
    assert!(
        stderr(&o).contains("warning: 3 GPUs of the estimated capacity have no GPU type and there is no [gpu_types.default] rate"),
        "{}",
        stderr(&o)
    );
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    let rows = v.as_array().unwrap();
    let idle = rows.iter().find(|r| r["team"] == "(idle)").unwrap();
    assert!(idle["idle_cost"].as_f64().unwrap() >= 0.0, "{idle}");
    let total: f64 = rows.iter().filter_map(|r| r["total_cost"].as_f64()).sum();
    assert!((total - 6720.0).abs() < 1e-6, "{total}");
    let idle_total: f64 = rows.iter().filter_map(|r| r["idle_cost"].as_f64()).sum();
    assert!((idle_total - 6580.0).abs() < 1e-6, "{idle_total}");
}

#[test]
fn usage_beyond_the_capacity_is_warned_about() {
    // Quotas 1 + 1 and a recorded capacity of 2 GPUs, while agents holds 3 in
    // [01:00, 03:00) (6 GPU-hours against 4).
    let site = prepared_site_without_capacity();
    let small = CONFIG
        .replace("quota = 2", "quota = 1")
        .replace("quota = 4", "quota = 1");
    fs::write(site.path("teamshare.toml"), small).unwrap();
    let window = [
        "--since",
        "2024-05-01T01:00:00",
        "--until",
        "2024-05-01T03:00:00",
    ];
    // Without samples the estimate holds what was in use (3 GPUs): no warning.
    let o = site.run(false, &[&["report", "teams"][..], &window].concat());
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert!(!stderr(&o).contains("warning"), "{}", stderr(&o));
    assert!(stderr(&o).contains("estimated as 3 GPUs"), "{}", stderr(&o));
    let mut store = Store::open(&site.path("accountd.db")).unwrap();
    let capacity = accountd::store::CapacitySample {
        ts: 1_711_929_600, // 2024-04-01
        gpus: 2,
        by_type: Default::default(),
    };
    assert!(store.record_capacity("testcluster", &capacity).unwrap());
    let o = site.run(false, &[&["report", "teams"][..], &window].concat());
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert!(
        stderr(&o).contains("warning: more GPU-hours were used (6.0000) than the capacity holds (4.0000), so the idle cost is negative: the recorded capacity misses GPUs"),
        "{}",
        stderr(&o)
    );
    // Within the capacity (agents' 1 GPU alone): no warning.
    let o = site.run(
        false,
        &[
            "report",
            "teams",
            "--since",
            "2024-05-01T13:00:00",
            "--until",
            "2024-05-01T14:00:00",
        ],
    );
    assert!(!stderr(&o).contains("warning"), "{}", stderr(&o));
}

#[test]
fn report_by_day() {
    let site = prepared_site();
    let two_days = ["--since", "2024-04-30T12:00:00", "--until", "2024-05-02"];
    let o = site.run(
        false,
        &[&["report", "teams", "--by-day"][..], &two_days].concat(),
    );
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let out = stdout(&o);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        lines[0],
        "GPU usage on testcluster by day from 2024-04-30 12:00:00 to 2024-05-02 00:00:00 (local time), GPU-hours and cost"
    );
    assert!(lines[1].starts_with("rules: "), "{out}");
    assert_eq!(
        cells(lines[2])[..8],
        [
            "DATE",
            "TEAM",
            "JOBS",
            "GPU-HOURS",
            "IN-QUOTA",
            "BORROWED",
            "LENT",
            "CAPACITY"
        ]
    );
    assert_eq!(cells(lines[2])[8..], ["TOTAL-COST", "(BRL)"]);
    // 2024-04-30: only agents' running job, 1 GPU from 23:00; capacity 8 GPUs x 12 h.
    assert_eq!(
        cells(lines[3])[..8],
        [
            "2024-04-30",
            "agents",
            "1",
            "1.0000",
            "1.0000",
            "0.0000",
            "0.0000",
            "96.0000"
        ]
    );
    // 2024-05-01: the figures of the one-day report (report_table).
    let may = lines
        .iter()
        .position(|l| l.starts_with("2024-05-01"))
        .unwrap();
    assert_eq!(
        cells(lines[may])[..8],
        [
            "2024-05-01",
            "agents",
            "2",
            "28.0000",
            "26.0000",
            "2.0000",
            "0.1429",
            "192.0000"
        ]
    );

    // CSV: one header, every day's rows; the second day's rows are the one-day report's.
    let csv = stdout(
        &site.run(
            false,
            &[
                &["report", "teams", "--by-day", "--format", "csv"][..],
                &two_days,
            ]
            .concat(),
        ),
    );
    let one_day = stdout(&site.run(
        false,
        &[&["report", "teams", "--format", "csv"][..], &PERIOD].concat(),
    ));
    assert_eq!(csv.matches("team,jobs,").count(), 1, "{csv}");
    let day2: Vec<&str> = csv
        .lines()
        .filter(|l| l.contains(",2024-05-01T00:00:00Z,2024-05-02T00:00:00Z,"))
        .collect();
    assert_eq!(day2, one_day.lines().skip(1).collect::<Vec<_>>());
    assert!(
        csv.contains(",2024-04-30T12:00:00Z,2024-05-01T00:00:00Z,"),
        "{csv}"
    );

    // JSON: one array of every day's rows, each with its types inside (CSV gives each type a
    // line of its own, with `gpu_type` set).
    let json = stdout(
        &site.run(
            false,
            &[
                &["report", "teams", "--by-day", "--format", "json"][..],
                &two_days,
            ]
            .concat(),
        ),
    );
    let rows: serde_json::Value = serde_json::from_str(&json).unwrap();
    let row_lines = csv
        .lines()
        .skip(1)
        .filter(|l| l.split(',').nth(15) == Some(""))
        .count();
    assert!(row_lines < csv.lines().count() - 1, "{csv}");
    assert_eq!(rows.as_array().unwrap().len(), row_lines, "{json}");

    // By day and by type: each day's rows with their types under them.
    let o = site.run(
        false,
        &[&["report", "teams", "--by-day", "--by-type"][..], &two_days].concat(),
    );
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let out = stdout(&o);
    assert_eq!(
        cells(out.lines().nth(2).unwrap())[..3],
        ["DATE", "TEAM", "TYPE"]
    );
    let has = |want: [&str; 3]| {
        out.lines()
            .any(|l| cells(l).iter().map(String::as_str).take(3).eq(want))
    };
    assert!(has(["2024-04-30", "agents", "all"]), "{out}");
    assert!(has(["training", "h100", "1"]), "{out}");

    let o = site.run(false, &["report", "jobs", "--by-day"]);
    assert_eq!(code(&o), 2);
    assert!(
        stderr(&o).contains("--by-day applies to `report teams` only"),
        "{}",
        stderr(&o)
    );
}

pub(crate) const TYPED_CONFIG: &str = r#"[cluster]
name = "testcluster"
partitions = ["gpu"]
currency = "BRL"

[gpu_types.h100]
rate_per_hour = 4.0

[gpu_types.a100]
rate_per_hour = 2.0

[[team]]
name = "agents"
quota = { h100 = 2 }
weight = 1

[[team]]
name = "training"
quota = { a100 = 4 }
weight = 1

[accountd]
database = "accountd.db"
"#;

pub(crate) const TYPED_SACCT: &str = "\
11|11|testcluster|agents|alice|gpu|normal|COMPLETED|2024-05-01T00:00:00|2024-05-01T00:00:00|2024-05-02T00:00:00|1-00:00:00|cpu=1,gres/gpu=1,gres/gpu:h100=1|2024-05-01T00:00:00|2880|1|cpu=1,gres/gpu=1,gres/gpu:h100=1
12|12|testcluster|agents|alice|gpu|normal|COMPLETED|2024-05-01T00:00:00|2024-05-01T00:00:00|2024-05-01T12:00:00|12:00:00|cpu=1,gres/gpu=1,gres/gpu:a100=1|2024-05-01T00:00:00|2880|1|cpu=1,gres/gpu=1,gres/gpu:a100=1
13|13|testcluster|training|bob|gpu|normal|COMPLETED|2024-05-01T06:00:00|2024-05-01T06:00:00|2024-05-01T08:00:00|02:00:00|cpu=2,gres/gpu=2,gres/gpu:a100=2|2024-05-01T06:00:00|2880|1|cpu=2,gres/gpu=2,gres/gpu:a100=2
14|14|testcluster|agents|alice|debug|normal|COMPLETED|2024-05-01T00:00:00|2024-05-01T00:00:00|2024-05-01T01:00:00|01:00:00|cpu=2,gres/gpu=2,gres/gpu:h100=2|2024-05-01T00:00:00|2880|1|cpu=2,gres/gpu=2,gres/gpu:h100=2
15|15|testcluster|training|bob|gpu|normal|COMPLETED|2024-05-01T10:00:00|2024-05-01T10:00:00|2024-05-01T11:00:00|01:00:00|cpu=1,gres/gpu=1|2024-05-01T10:00:00|2880|1|cpu=1,gres/gpu=1
";

/// A typed configuration (agents holds h100 quota, training a100), 4 h100 and 6 a100, on
/// 2024-05-01: agents runs 1 h100 all day and 1 a100 for 12 h; training 2 a100 in
/// [06:00, 08:00) and 1 untyped GPU in [10:00, 11:00); agents 2 h100 for 1 h in `debug`.
///
/// - agents: h100 24 GPU-hours in quota (24 of 48: 50 %); a100 12 borrowed, lent by training
///   (idle 4, 2 in [06:00, 08:00), 4) and the a100 pool (6 - 4 = 2): training 4/6 x 6 + 2/4 x 2
///   + 4/6 x 4 = 23/3, pool 2 + 1 + 4/3 = 13/3.
/// - training's untyped GPU: under `default`, no quota and no capacity: borrowed beyond what was
///   lendable (charged to the pool), and a warning.
/// - costs at 4 and 2 per hour, by quota share: h100 capacity 384, agents 96, idle 288 to agents
///   (quota 48 GPU-hours) and the unallocated 48: 144 each; a100 capacity 288, allocated
///   agents 24 + training 8, idle 256: training 96/144 of it (512/3), (idle) 48/144 (256/3).
/// - the debug run: apart, 2 GPU-hours at 4 = 8, in no other figure.
#[test]
fn report_typed_configuration() {
    let site = Site::new(TYPED_CONFIG);
    let mut store = Store::open(&site.path("accountd.db")).unwrap();
    let batch = accountd::sacct::parse(TYPED_SACCT, &chrono::Utc);
    assert!(batch.malformed.is_empty());
    store.record_runs(&batch.runs, 1, None).unwrap();
    let capacity = accountd::store::CapacitySample {
        ts: 1_711_929_600,
        gpus: 10,
        by_type: [("h100".to_string(), 4), ("a100".to_string(), 6)].into(),
    };
    assert!(store.record_capacity("testcluster", &capacity).unwrap());
    let o = site.run(
        false,
        &[&["report", "teams", "--format", "json"][..], &PERIOD].concat(),
    );
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let err = stderr(&o);
    assert!(
        err.contains("warning: 1.0000 GPU-hours in the governed partitions were allocated without a GPU type (sacct recorded none): they are counted under `default`, where no team has a quota, so all of them are borrowed, at no cost (no default rate)"),
        "{err}"
    );
    assert!(
        err.contains("note: 2.0000 GPU-hours ran outside the governed partitions (gpu), by agents: they are reported apart, in no team's quota"),
        "{err}"
    );
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    let rows = v.as_array().unwrap();
    let row = |team: &str, kind: &str| {
        rows.iter()
            .find(|r| r["team"] == team && r["kind"] == kind)
            .unwrap_or_else(|| panic!("no {kind} row {team}: {v}"))
    };
    let f = |r: &serde_json::Value, k: &str| r[k].as_f64().unwrap();
    let of_type = |r: &serde_json::Value, t: &str| {
        r["by_type"]
            .as_array()
            .unwrap()
            .iter()
            .find(|x| x["gpu_type"] == t)
            .unwrap_or_else(|| panic!("no {t} in {r}"))
            .clone()
    };
    let close = |a: f64, b: f64| (a - b).abs() < 1e-9;
    let agents = row("agents", "team");
    assert_eq!(
        [
            f(agents, "gpu_hours"),
            f(agents, "in_quota_hours"),
            f(agents, "borrowed_hours")
        ],
        [36.0, 24.0, 12.0]
    );
    assert_eq!(f(agents, "quota_used_percent"), 50.0);
    let h100 = of_type(agents, "h100");
    assert_eq!(
        (h100["quota"].as_u64(), f(&h100, "in_quota_hours")),
        (Some(2), 24.0)
    );
    assert_eq!(f(&h100, "quota_gpu_hours"), 48.0);
    let a100 = of_type(agents, "a100");
    assert_eq!(
        (a100["quota"].as_u64(), f(&a100, "borrowed_hours")),
        (Some(0), 12.0)
    );
    assert!(close(f(agents, "total_cost"), 96.0 + 24.0 + 144.0));
    let training = row("training", "team");
    assert!(close(
        f(&of_type(training, "a100"), "lent_hours"),
        23.0 / 3.0
    ));
    let untyped = of_type(training, "default");
    assert_eq!(f(&untyped, "borrowed_hours"), 1.0);
    assert!(close(f(training, "idle_cost"), 512.0 / 3.0));
    let pool = row("(pool)", "pool");
    assert!(close(f(&of_type(pool, "a100"), "lent_hours"), 13.0 / 3.0));
    assert_eq!(f(&of_type(pool, "default"), "lent_hours"), 1.0);
    let idle = row("(idle)", "idle");
    assert!(close(f(idle, "idle_cost"), 144.0 + 256.0 / 3.0));
    let outside = row("agents", "outside");
    assert_eq!((f(outside, "gpu_hours"), f(outside, "cost")), (2.0, 8.0));
    assert!(outside["total_cost"].is_null());
    let total: f64 = rows.iter().filter_map(|r| r["total_cost"].as_f64()).sum();
    assert!(close(total, 384.0 + 288.0), "{total}");

    // The table: the rules say the split is per type; the debug run in a section of its own.
    let o = site.run(
        false,
        &[&["report", "teams", "--by-type"][..], &PERIOD].concat(),
    );
    let out = stdout(&o);
    assert!(
        out.lines()
            .nth(1)
            .unwrap()
            .starts_with("rules: in quota, borrowed and lent per GPU type;"),
        "{out}"
    );
    let line = |team: &str, t: &str| {
        out.lines()
            .map(cells)
            .find(|c| c.len() > 2 && c[0] == team && c[1] == t)
            .unwrap_or_else(|| panic!("no {team} {t} in\n{out}"))
    };
    assert_eq!(
        line("agents", "h100")[2..9],
        ["1", "2", "24.0000", "24.0000", "0.0000", "0.0000", "50.0%"]
    );
    assert!(out.contains("\nGPU usage outside the governed partitions (gpu): no team's quota, in none of the figures above\n"), "{out}");
    assert_eq!(line("agents", "all").len(), 12);
    assert!(
        out.contains("1.0000 GPU-hours were allocated without a GPU type"),
        "{out}"
    );
    assert!(
        out.contains("1.0000 GPU-hours were borrowed beyond what was lendable"),
        "{out}"
    );
    // With a default rate, the untyped GPU-hour is priced against no capacity of its own: the
    // warning says the idle cost of `default` is negative (1 GPU-hour at 1.00).
    let priced = TYPED_CONFIG.replace(
        "[gpu_types.a100]",
        "[gpu_types.default]\nrate_per_hour = 1.0\n\n[gpu_types.a100]",
    );
    fs::write(site.path("teamshare.toml"), priced).unwrap();
    let o = site.run(false, &[&["report", "teams"][..], &PERIOD].concat());
    assert!(
        stderr(&o).contains("so all of them are borrowed, priced at the default rate; as little capacity without a type was recorded, the idle cost of `default` is negative (-1.00)"),
        "{}",
        stderr(&o)
    );
    fs::write(site.path("teamshare.toml"), TYPED_CONFIG).unwrap();
    // Day by day, the same notes on stderr.
    let o = site.run(
        false,
        &[&["report", "teams", "--by-day"][..], &PERIOD].concat(),
    );
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let err = stderr(&o);
    assert!(
        err.contains("warning: 1.0000 GPU-hours in the governed partitions were allocated without a GPU type"),
        "{err}"
    );
    assert!(
        err.contains("note: 2.0000 GPU-hours ran outside the governed partitions"),
        "{err}"
    );
}

#[test]
fn report_csv_and_team_filter() {
    let site = prepared_site();
    let o = site.run(
        false,
        &[
            &["report", "teams", "--team", "training", "--format", "csv"][..],
            &PERIOD,
        ]
        .concat(),
    );
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert_eq!(
        stdout(&o),
        "team,jobs,gpu_hours,quota,cost,currency,since,until,in_quota_hours,borrowed_hours,lent_hours,allocated_cost,idle_cost,total_cost,kind,gpu_type,rate_per_hour,quota_gpu_hours,quota_used_percent,gpu_equivalents,gpu_equivalent_hours\n\
         training,1,2.0000,4,140.00,BRL,2024-05-01T00:00:00Z,2024-05-02T00:00:00Z,2.0000,0.0000,1.9048,140.00,3625.00,3765.00,team,,,96.0000,2.08,,2.0000\n\
         training,1,2.0000,,140.00,BRL,2024-05-01T00:00:00Z,2024-05-02T00:00:00Z,2.0000,0.0000,0.0000,140.00,3290.00,3430.00,team,h100,70,,,1,2.0000\n\
         training,0,0.0000,,0.00,BRL,2024-05-01T00:00:00Z,2024-05-02T00:00:00Z,0.0000,0.0000,1.9048,0.00,335.00,335.00,team,default,10,,,1,0.0000\n"
    );
}

/// `report users` over the fixture's 2024-05-01, no GPU samples: every allocated GPU-hour is
/// unsampled, none idle. alice (agents): job 1, 2 GPUs x 2 h, and job 2, running, 1 GPU x 24 h:
/// 28 (job 5 has no GPUs); bob (training): 4 x 0.5 h = 2; carol (ghost): 1 x 1 h = 1; job 6 is
/// another cluster's. No idle hours: by user.
#[test]
fn report_users() {
    let site = prepared_site();
    let o = site.run(false, &[&["report", "users"][..], &PERIOD].concat());
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let out = stdout(&o);
    let lines: Vec<Vec<String>> = out.lines().skip(2).take(3).map(cells).collect();
    assert_eq!(
        lines,
        [
            ["alice", "agents", "2", "28.0000", "0.0000", "0.0000", "0.0", "28.0000", "-"],
            ["bob", "training", "1", "2.0000", "0.0000", "0.0000", "0.0", "2.0000", "-"],
            ["carol", "ghost", "1", "1.0000", "0.0000", "0.0000", "0.0", "1.0000", "-"],
        ],
        "{out}"
    );
    assert!(out.contains("never counted as idle"), "{out}");

    let o = site.run(
        false,
        &[
            &["report", "users", "--team", "Training", "--format", "csv"][..],
            &PERIOD,
        ]
        .concat(),
    );
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert_eq!(
        stdout(&o),
        "user,team,jobs,gpu_hours,sampled_gpu_hours,idle_gpu_hours,idle_percent,unsampled_gpu_hours,worst_job_1,worst_job_1_idle_gpu_hours,worst_job_2,worst_job_2_idle_gpu_hours,worst_job_3,worst_job_3_idle_gpu_hours,idle_policy_notices,idle_policy_reclaim_first,idle_policy_requeues,idle_policy_cancels,since,until\n\
         bob,training,1,2.0000,0.0000,0.0000,0.00,2.0000,,,,,,,0,0,0,0,2024-05-01T00:00:00Z,2024-05-02T00:00:00Z\n"
    );

    let o = site.run(false, &["report", "users", "--format", "html"]);
    assert_eq!(code(&o), 2);
    assert!(
        stderr(&o).contains(
            "--format html applies to `report teams` only: its page has the users' table too"
        ),
        "{}",
        stderr(&o)
    );
}

#[test]
fn report_json() {
    let site = prepared_site();
    let o = site.run(
        false,
        &[
            "report",
            "--format",
            "json",
            "--since",
            "2024-05-01T02:00:00",
            "--until",
            "2024-05-01T10:15:00",
        ],
    );
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    let rows = v.as_array().unwrap();
    let names: Vec<&str> = rows.iter().map(|r| r["team"].as_str().unwrap()).collect();
    assert_eq!(names, ["agents", "training", "(pool)", "(idle)"]);
    // agents: job 1 from 02:00 to 03:00 (2 GPU-h) + job 2 over 8.25 h (8.25 GPU-h); over its
    // quota by 1 GPU in [02:00, 03:00).
    assert_eq!(rows[0]["gpu_hours"].as_f64().unwrap(), 10.25);
    assert_eq!(rows[0]["in_quota_hours"].as_f64().unwrap(), 9.25);
    assert_eq!(rows[0]["borrowed_hours"].as_f64().unwrap(), 1.0);
    assert_eq!(rows[0]["jobs"], 2);
    assert_eq!(rows[0]["quota"], 2);
    assert_eq!(rows[0]["currency"], "BRL");
    assert_eq!(rows[0]["since"], "2024-05-01T02:00:00Z");
    assert_eq!(rows[0]["until"], "2024-05-01T10:15:00Z");
    // training: 4 h100 for 15 minutes; it lent 4 of the 6 lendable GPUs for that hour.
    assert_eq!(rows[1]["gpu_hours"].as_f64().unwrap(), 1.0);
    assert!((rows[1]["cost"].as_f64().unwrap() - 70.0).abs() < 1e-9);
    assert!((rows[1]["lent_hours"].as_f64().unwrap() - 4.0 / 6.0).abs() < 1e-12);
    assert!((rows[2]["lent_hours"].as_f64().unwrap() - 2.0 / 6.0).abs() < 1e-12);
    assert!(rows[2]["quota"].is_null());
    // The rows' total cost is the capacity's: 8.25 h x (4 x 10 + 4 x 70).
    let total: f64 = rows.iter().map(|r| r["total_cost"].as_f64().unwrap()).sum();
    assert!((total - 8.25 * 320.0).abs() < 1e-6, "{total}");
    for r in rows {
        let (a, i, t) = (
            r["allocated_cost"].as_f64().unwrap(),
            r["idle_cost"].as_f64().unwrap(),
            r["total_cost"].as_f64().unwrap(),
        );
        assert!((a + i - t).abs() < 1e-9, "{r}");
    }
}

#[test]
fn report_fairshare() {
    let site = prepared_site();
    // Half-life 7 days by default; as of 2024-05-02 00:00, usage since 2024-04-01.
    let o = site.run(
        false,
        &[
            "report",
            "fairshare",
            "--format",
            "json",
            "--since",
            "2024-04-01",
            "--until",
            "2024-05-02",
        ],
    );
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    let rows = v.as_array().unwrap();
    let names: Vec<&str> = rows.iter().map(|r| r["team"].as_str().unwrap()).collect();
    assert_eq!(names, ["agents", "ghost", "training"]);
    // Weights 40 and 30: shares 4/7 and 3/7; ghost has none, and used GPUs: factor 0.
    assert!((rows[0]["normalized_shares"].as_f64().unwrap() - 4.0 / 7.0).abs() < 1e-12);
    assert!(rows[1]["weight"].is_null());
    assert_eq!(rows[1]["fairshare_factor"].as_f64().unwrap(), 0.0);
    let usage: f64 = rows
        .iter()
        .map(|r| r["normalized_usage"].as_f64().unwrap())
        .sum();
    assert!((usage - 1.0).abs() < 1e-12);
    // agents used most (29 GPU-hours, barely decayed) against the biggest share: below 0.5.
    let agents = rows[0]["fairshare_factor"].as_f64().unwrap();
    let training = rows[2]["fairshare_factor"].as_f64().unwrap();
    assert!(agents < 0.5 && training > 0.5 && training < 1.0, "{rows:?}");
    assert_eq!(rows[0]["half_life_seconds"], 7 * 86_400);
    // Usage is cost-weighted: each GPU-hour at its type's rate (agents' untyped GPUs at the
    // default 10, training's h100 at 70), and U is each team's share of the decayed cost.
    let f = |r: &serde_json::Value, k: &str| r[k].as_f64().unwrap();
    let ratio = |r: &serde_json::Value| f(r, "decayed_cost") / f(r, "decayed_gpu_hours");
    assert!((ratio(&rows[0]) - 10.0).abs() < 1e-9, "{rows:?}");
    assert!((ratio(&rows[2]) - 70.0).abs() < 1e-9, "{rows:?}");
    let cost: f64 = rows.iter().map(|r| f(r, "decayed_cost")).sum();
    assert!((f(&rows[2], "normalized_usage") - f(&rows[2], "decayed_cost") / cost).abs() < 1e-12);
    let o = site.run(false, &["report", "fairshare", "--until", "2024-05-02"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert!(stdout(&o).contains("half-life 7d"), "{}", stdout(&o));
    assert!(
        stdout(&o)
            .lines()
            .nth(1)
            .unwrap()
            .contains("each at its GPU type's rate"),
        "{}",
        stdout(&o)
    );
    assert!(stdout(&o).lines().nth(2).unwrap().starts_with("TEAM"));
    assert!(stdout(&o).contains("DECAYED COST (BRL)"), "{}", stdout(&o));
}

#[test]
fn report_errors() {
    let site = Site::new(CONFIG);
    let o = site.run(false, &["report"]);
    assert_eq!(code(&o), 1);
    assert!(stderr(&o).contains("no database at"), "{}", stderr(&o));
    assert!(!site.path("accountd.db").exists());
    let site = prepared_site();
    let o = site.run(false, &["report", "--since", "last tuesday"]);
    assert_eq!(code(&o), 2);
    assert!(stderr(&o).contains("last tuesday"));
    let o = site.run(false, &["report", "--since", "now", "--until", "now-1h"]);
    assert_eq!(code(&o), 2);
    assert!(stderr(&o).contains("period is empty"));
}

#[test]
fn a_database_from_a_newer_accountd_is_refused() {
    let site = Site::new(CONFIG);
    let db = site.path("accountd.db");
    {
        let conn = rusqlite::Connection::open(&db).unwrap();
        conn.execute_batch("PRAGMA user_version = 1000;").unwrap();
    }
    let before = fs::read(&db).unwrap();
    let o = site.run(false, &["report"]);
    assert_eq!(code(&o), 1);
    assert!(
        stderr(&o).contains("newer than this accountd"),
        "{}",
        stderr(&o)
    );
    assert_eq!(fs::read(&db).unwrap(), before);
}
