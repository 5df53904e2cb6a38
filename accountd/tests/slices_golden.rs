//! Golden test (issue 30): a month of whole GPUs and MIG slices, with a node re-partitioned
//! half-way, two slice types (one priced by its size, one by its own rate), every figure
//! worked out by hand in the comments.

mod golden_support;

use std::collections::BTreeMap;

use accountd::period::Period;
use accountd::report::{compute_usage, render_teams, Format, UsageParams, UsageReport};
use accountd::store::{CapacitySample, RunUsage};
use golden_support::{close, of, row, run, H, MONTH, T0};

/// A100 at 2.80/h; its `1g.10gb` slice (1/7 of one) has no rate, so it costs 2.80 / 7 =
/// 0.40/h; its `3g.40gb` slice (3/7) is priced by the site at 1.50/h (less than 3 x 0.40 =
/// 1.20? no: more, 1.50 > 1.20, as sites price the larger profile's memory). H100 at 5.00/h.
/// Borrowed hours at list price and the idle cost in its own row, so that every team's cost
/// is its GPU-hours times their rates.
const CONFIG: &str = r#"
[cluster]
name = "golden"
partitions = ["gpu"]
currency = "USD"

[gpu_types.a100]
rate_per_hour = 2.8

[gpu_types.h100]
rate_per_hour = 5.0

[gpu_types."1g.10gb"]
slices_of = "a100"
gpus = "1/7"

[gpu_types."3g.40gb"]
slices_of = "a100"
gpus = 0.428571
rate_per_hour = 1.5

[[team]]
name = "inference"
quota = { "1g.10gb" = 7 }

[[team]]
name = "research"
quota = { "3g.40gb" = 1 }

[[team]]
name = "training"
quota = { h100 = 2 }

[accountd]
borrowed_cost_factor = 1.0
idle_cost_split = "idle-row"
"#;

/// | run | team      | GPUs          | hours      |                                          |
/// |-----|-----------|---------------|------------|------------------------------------------|
/// | 1   | inference | 7 x 1g.10gb   | [0, 720)   | its quota: 7 slices, one A100's worth    |
/// | 2   | inference | 2 x 1g.10gb   | [360, 720) | beyond it: borrowed from the new slices  |
/// | 3   | research  | 1 x 3g.40gb   | [360, 720) | its quota, once the slice exists         |
/// | 4   | training  | 2 x h100      | [0, 720)   | its quota                                |
/// | 5   | training  | 1 x a100      | [0, 720)   | no a100 quota anywhere: borrowed         |
fn runs() -> Vec<RunUsage> {
    vec![
        run(1, "inference", "1g.10gb", 7, 0, MONTH),
        run(2, "inference", "1g.10gb", 2, 360, MONTH),
        run(3, "research", "3g.40gb", 1, 360, MONTH),
        run(4, "training", "h100", 2, 0, MONTH),
        run(5, "training", "a100", 1, 0, MONTH),
    ]
}

/// Node n1: 2 whole A100. Node n2: one A100 cut into 7 x 1g.10gb. Node n3: 2 H100. At hour
/// 360 the administrator re-partitions one of n1's A100 into 1 x 3g.40gb and 4 x 1g.10gb
/// (3/7 + 4/7 = one GPU): a100 2 -> 1, 1g.10gb 7 -> 11, 3g.40gb 0 -> 1. Slurm counts every
/// slice as one `gres/gpu`, so `gpus` is the device count.
fn capacity() -> Vec<CapacitySample> {
    let sample = |h: i64, a100: u32, one_g: u32, three_g: u32| {
        let mut by_type = BTreeMap::from([
            ("a100".to_string(), a100),
            ("h100".to_string(), 2),
            ("1g.10gb".to_string(), one_g),
        ]);
        if three_g > 0 {
            by_type.insert("3g.40gb".to_string(), three_g);
        }
        CapacitySample {
            ts: T0 + h * H,
            gpus: by_type.values().sum(),
            by_type,
        }
    };
    vec![sample(0, 2, 7, 0), sample(360, 1, 11, 1)]
}

fn report() -> UsageReport {
    let config = teamshare_config::parse(CONFIG, "teamshare.toml").unwrap();
    let period = Period {
        since: T0,
        until: T0 + MONTH * H,
    };
    let params = UsageParams::from_config(&config, period, T0 + 800 * H, Vec::new());
    compute_usage(&runs(), &capacity(), &params)
}

/// GPU-hours per row, and in GPU-equivalents:
/// - inference: 7 x 720 + 2 x 360 = 5,760 slice-hours of 1/7: 5,760 / 7 = 822.857142...;
///   in quota 5,040 (its 7 slices all month), borrowed 720 (the 2 beyond, [360, 720)).
/// - research: 360 hours of 3/7: 154.285714...; all in quota.
/// - training: 2 x 720 h100 + 720 a100 = 2,160 hours of whole GPUs, 2,160 equivalents; 1,440
///   in quota, 720 borrowed.
/// - (pool): the 1g.10gb it did not give as quota lent inference's 720 borrowed hours
///   ([360, 720): capacity 11 - quota 7 = 4 unallocated, 2 borrowed), and the a100 ones
///   (no quota: all 2, then 1, unallocated) lent training's 720.
#[test]
fn gpu_hours_are_counted_per_type_and_in_gpu_equivalents() {
    let r = report();
    assert!(r.typed);
    let inference = row(&r, "inference");
    assert_close!(inference.gpu_hours(), 5760.0, "inference GPU-hours");
    assert_close!(
        r.equivalent_hours(inference),
        5760.0 / 7.0,
        "inference equivalents"
    );
    assert_close!(inference.in_quota_hours(), 5040.0, "inference in quota");
    assert_close!(inference.borrowed_hours(), 720.0, "inference borrowed");
    let research = row(&r, "research");
    assert_close!(research.gpu_hours(), 360.0, "research GPU-hours");
    assert_close!(
        r.equivalent_hours(research),
        360.0 * 3.0 / 7.0,
        "research equivalents"
    );
    assert_close!(research.in_quota_hours(), 360.0, "research in quota");
    let training = row(&r, "training");
    assert_close!(r.equivalent_hours(training), 2160.0, "training equivalents");
    assert_close!(
        of(&r, "training", "a100").borrowed_hours(),
        720.0,
        "a100 borrowed"
    );
    assert_close!(
        of(&r, "training", "h100").in_quota_hours(),
        1440.0,
        "h100 in quota"
    );
    assert_close!(
        of(&r, "(pool)", "1g.10gb").lent_hours(),
        720.0,
        "pool lent 1g"
    );
    assert_close!(
        of(&r, "(pool)", "a100").lent_hours(),
        720.0,
        "pool lent a100"
    );
    // inference's quota: 7 slices x 720 hours (a quota of one A100's worth).
    assert_close!(inference.quota_hours(), 5040.0, "inference quota hours");
}

/// Rates: 1g.10gb 2.80 / 7 = 0.40 (its GPU's rate times its size), 3g.40gb its own 1.50.
/// - inference 5,760 x 0.40 = 2,304.00; research 360 x 1.50 = 540.00; training 1,440 x 5.00
///   + 720 x 2.80 = 7,200 + 2,016 = 9,216.00 (borrowed at list price).
/// - Capacity, per type: a100 (2 x 360 + 1 x 360) = 1,080 hours x 2.80 = 3,024.00; 1g.10gb
///   (7 x 360 + 11 x 360) = 6,480 x 0.40 = 2,592.00; 3g.40gb 360 x 1.50 = 540.00; h100 1,440 x
///   5.00 = 7,200.00: 13,356.00 in all.
/// - Idle, in the (idle) row: a100 360 idle hours ([0, 360): 2 - 1) x 2.80 = 1,008.00;
///   1g.10gb 720 ([360, 720): 11 - 9 = 2) x 0.40 = 288.00; 3g.40gb and h100 none: 1,296.00,
///   which is 13,356 - (2,304 + 540 + 9,216).
#[test]
fn a_slice_costs_its_part_of_its_gpu_unless_priced() {
    let r = report();
    let rate = |t: &str| r.capacity_of(t).and_then(|c| c.rate_per_hour).unwrap();
    assert_close!(rate("1g.10gb"), 0.4, "1g.10gb rate");
    assert_close!(rate("3g.40gb"), 1.5, "3g.40gb rate");
    let total = |team: &str| row(&r, team).total_cost.unwrap();
    assert_close!(total("inference"), 2304.0, "inference");
    assert_close!(total("research"), 540.0, "research");
    assert_close!(total("training"), 9216.0, "training");
    assert_close!(r.capacity_cost.unwrap(), 13356.0, "capacity cost");
    assert_close!(total("(idle)"), 1296.0, "idle row");
    assert_close!(
        r.capacity_of("a100").unwrap().idle_cost.unwrap(),
        1008.0,
        "a100 idle"
    );
    assert_close!(
        r.capacity_of("1g.10gb").unwrap().idle_cost.unwrap(),
        288.0,
        "1g.10gb idle"
    );
    // The capacity the re-partition changed: 1g.10gb 6,480 GPU-hours, 3g.40gb 360.
    assert_close!(
        r.capacity_of("1g.10gb").unwrap().capacity_seconds / 3600.0,
        6480.0,
        "1g capacity"
    );
    assert_close!(
        r.capacity_of("3g.40gb").unwrap().capacity_seconds / 3600.0,
        360.0,
        "3g capacity"
    );
}

/// The table shows GPU-EQ-HOURS beside GPU-HOURS where some type is a slice; CSV and JSON
/// give each row and type its equivalents: 822.8571 (5,760 / 7), 154.2857 (360 x 3/7).
#[test]
fn the_report_shows_gpu_equivalents() {
    let r = report();
    let table = render_teams(&r, Format::Table, true, &chrono::Utc);
    let header = table.lines().nth(2).unwrap();
    let words = |l: &str| l.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(
        words(header).contains("GPU-HOURS GPU-EQ-HOURS IN-QUOTA"),
        "{table}"
    );
    let line = |team: &str, t: &str| {
        table
            .lines()
            .find(|l| {
                let w: Vec<&str> = l.split_whitespace().collect();
                w.first() == Some(&team) && w.get(1) == Some(&t)
            })
            .map(words)
            .unwrap_or_else(|| panic!("no line {team} {t} in\n{table}"))
    };
    assert!(
        line("inference", "all").contains("5760.0000 822.8571 5040.0000"),
        "{table}"
    );
    assert!(
        line("research", "3g.40gb").contains("360.0000 154.2857 360.0000"),
        "{table}"
    );
    // The capacity in GPU-equivalents is the five physical GPUs (n1's 2 A100, n2's one cut in
    // seven, n3's 2 H100) all month: 1,080 + 6,480 / 7 + 360 x 3/7 + 1,440 = 3,600 = 5 x 720.
    assert!(
        words(&table).contains(
            "capacity: 9360.0000 GPU-hours (3600.0000 in GPU-equivalents) costing 13356.00"
        ),
        "{table}"
    );
    let csv = render_teams(&r, Format::Csv, false, &chrono::Utc);
    assert!(
        csv.lines()
            .next()
            .unwrap()
            .ends_with(",gpu_equivalents,gpu_equivalent_hours"),
        "{csv}"
    );
    let slice_line = csv
        .lines()
        .find(|l| l.starts_with("inference,") && l.contains(",1g.10gb,"))
        .unwrap();
    assert!(
        slice_line.ends_with(",0.14285714285714285,822.8571"),
        "{slice_line}"
    );
    let json: serde_json::Value =
        serde_json::from_str(&render_teams(&r, Format::Json, false, &chrono::Utc)).unwrap();
    let research = json
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["team"] == "research")
        .unwrap();
    assert!(close(
        research["gpu_equivalent_hours"].as_f64().unwrap(),
        360.0 * 3.0 / 7.0
    ));
    assert!(close(
        research["by_type"][0]["gpu_equivalents"].as_f64().unwrap(),
        3.0 / 7.0
    ));
}

/// Without slices the table is as before: no GPU-EQ-HOURS column.
#[test]
fn without_slices_the_table_has_no_equivalents_column() {
    let config = CONFIG
        .replace(
            "slices_of = \"a100\"\ngpus = \"1/7\"",
            "rate_per_hour = 0.4",
        )
        .replace("slices_of = \"a100\"\ngpus = 0.428571\n", "");
    let config = teamshare_config::parse(&config, "teamshare.toml").unwrap();
    assert!(!config.has_slices());
    let period = Period {
        since: T0,
        until: T0 + MONTH * H,
    };
    let params = UsageParams::from_config(&config, period, T0 + 800 * H, Vec::new());
    let r = compute_usage(&runs(), &capacity(), &params);
    let table = render_teams(&r, Format::Table, false, &chrono::Utc);
    assert!(!table.contains("GPU-EQ-HOURS"), "{table}");
    // Every type is then a whole GPU: equivalents are GPU-hours.
    assert_close!(
        r.equivalent_hours(row(&r, "inference")),
        5760.0,
        "inference"
    );
}
