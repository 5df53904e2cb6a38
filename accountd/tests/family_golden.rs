//! Golden test (issue 30): a month under quotas in GPU-equivalents. Two teams each hold one
//! A100's worth of the A100 family (whole A100s and their `1g.10gb` slices, 1/7 each); an
//! H100 team beside them at another rate; one whole A100 re-partitioned into slices half-way.
//! Every figure is worked out by hand in the comments, in units of 1/7 of an A100 where the
//! family is split.

mod golden_support;

use std::collections::BTreeMap;

use accountd::period::Period;
use accountd::report::{compute_usage, TypeRow, UsageParams, UsageReport};
use accountd::store::{CapacitySample, RunUsage};
use golden_support::{of, row, run, H, MONTH, T0};

/// A100 2.80/h, its slice 2.80 / 7 = 0.40/h; H100 5.00/h. Borrowed hours at list price; the
/// idle cost of each type split by the teams' quotas.
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

[[team]]
name = "inference"
quota = { a100 = 1 }

[[team]]
name = "dev"
quota = { a100 = 1 }

[[team]]
name = "training"
quota = { h100 = 2 }

[accountd]
borrowed_cost_factor = 1.0
idle_cost_split = "quota-share"
"#;

/// | run | team      | GPUs        | hours      | units (1/7 A100) |
/// |-----|-----------|-------------|------------|------------------|
/// | 1   | inference | 7 x 1g.10gb | [0, 720)   | 7                |
/// | 2   | inference | 1 x a100    | [0, 360)   | 7                |
/// | 3   | inference | 4 x 1g.10gb | [360, 720) | 4                |
/// | 4   | dev       | 3 x 1g.10gb | [540, 720) | 3                |
/// | 5   | training  | 2 x h100    | [0, 720)   | (its own type)   |
fn runs() -> Vec<RunUsage> {
    vec![
        run(1, "inference", "1g.10gb", 7, 0, MONTH),
        run(2, "inference", "a100", 1, 0, 360),
        run(3, "inference", "1g.10gb", 4, 360, MONTH),
        run(4, "dev", "1g.10gb", 3, 540, MONTH),
        run(5, "training", "h100", 2, 0, MONTH),
    ]
}

/// n1: one whole A100; n2: an A100 cut into 7 slices; n3: 2 H100. At hour 360 n1's A100 is
/// re-partitioned into 7 slices: a100 1 -> 0, 1g.10gb 7 -> 14. The family's capacity stays
/// 14 units (2 GPU-equivalents): the quotas keep their worth (DESIGN rule 8).
fn capacity() -> Vec<CapacitySample> {
    let sample = |h: i64, a100: u32, one_g: u32| {
        let by_type = BTreeMap::from([
            ("a100".to_string(), a100),
            ("h100".to_string(), 2),
            ("1g.10gb".to_string(), one_g),
        ]);
        CapacitySample {
            ts: T0 + h * H,
            gpus: by_type.values().sum(),
            by_type,
        }
    };
    vec![sample(0, 1, 7), sample(360, 0, 14)]
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

/// The family split in units, capacity 14 throughout, quotas 7 + 7 (nothing unallocated):
/// - [0, 360): inference holds 7 + 7 = 14: 7 in quota, 7 borrowed, all on dev's idle 7 (lent);
/// - [360, 540): inference 7 + 4 = 11: 7 in quota, 4 borrowed, lent by dev;
/// - [540, 720): the same, and dev holds 3 of its quota (in quota), lending 4 of its idle 4.
///
/// In unit-hours: inference in quota 7 x 720 = 5,040, borrowed 7 x 360 + 4 x 360 = 3,960;
/// dev in quota 3 x 180 = 540, lent 3,960.
///
/// Back to types, a team's in-quota and borrowed hours in the proportions of the units its runs
/// held: inference's 1g.10gb 7 x 720 + 4 x 360 = 6,480 unit-hours, its a100 360 hours x 7 =
/// 2,520: 72 % and 28 %. So 1g.10gb in quota 5,040 x 0.72 = 3,628.8 slice-hours, borrowed
/// 3,960 x 0.72 = 2,851.2 (adding up to its 6,480 slice-hours); a100 in quota 5,040 x 0.28 / 7
/// = 201.6 A100-hours, borrowed 3,960 x 0.28 / 7 = 158.4 (adding up to its 360).
///
/// Lent and quota hours in the proportions of each type's capacity in units: 1g.10gb
/// (7 + 14) x 360 = 7,560, a100 1 x 360 x 7 = 2,520, of 10,080 = 14 x 720: 75 % and 25 %. dev
/// lent 3,960 x 0.75 = 2,970 slice-hours and 3,960 x 0.25 / 7 = 141.428571 A100-hours.
#[test]
fn the_family_is_split_in_gpu_equivalents_and_brought_back_to_its_types() {
    let r = report();
    assert_close!(
        of(&r, "inference", "1g.10gb").in_quota_hours(),
        3628.8,
        "inference 1g in quota"
    );
    assert_close!(
        of(&r, "inference", "1g.10gb").borrowed_hours(),
        2851.2,
        "inference 1g borrowed"
    );
    assert_close!(
        of(&r, "inference", "a100").in_quota_hours(),
        201.6,
        "inference a100 in quota"
    );
    assert_close!(
        of(&r, "inference", "a100").borrowed_hours(),
        158.4,
        "inference a100 borrowed"
    );
    assert_close!(
        of(&r, "dev", "1g.10gb").in_quota_hours(),
        540.0,
        "dev in quota"
    );
    assert_close!(of(&r, "dev", "1g.10gb").lent_hours(), 2970.0, "dev lent 1g");
    assert_close!(
        of(&r, "dev", "a100").lent_hours(),
        3960.0 * 0.25 / 7.0,
        "dev lent a100"
    );
    // Every borrowed unit-hour was lent: 2,851.2 + 158.4 x 7 = 3,960 = 2,970 + 141.43 x 7.
    let units =
        |t: &TypeRow, f: fn(&TypeRow) -> f64| f(t) * if t.gpu_type == "a100" { 7.0 } else { 1.0 };
    let borrowed: f64 = row(&r, "inference")
        .by_type
        .iter()
        .map(|t| units(t, TypeRow::borrowed_hours))
        .sum();
    let lent: f64 = row(&r, "dev")
        .by_type
        .iter()
        .map(|t| units(t, TypeRow::lent_hours))
        .sum();
    assert_close!(borrowed, 3960.0, "borrowed units");
    assert_close!(lent, 3960.0, "lent units");
    // In GPU-equivalents: inference 6,480 / 7 + 360 = 1,285.714286; dev 540 / 7.
    assert_close!(
        r.equivalent_hours(row(&r, "inference")),
        6480.0 / 7.0 + 360.0,
        "inference equivalents"
    );
    assert_close!(
        r.equivalent_hours(row(&r, "dev")),
        540.0 / 7.0,
        "dev equivalents"
    );
    // The family's quota is shown as 1 (A100's worth) on the whole type's line.
    assert_eq!(of(&r, "inference", "a100").quota, Some(1));
    // training's H100s are split on their own: all in quota.
    assert_close!(
        of(&r, "training", "h100").in_quota_hours(),
        1440.0,
        "training"
    );
}

/// Costs, each type's hours at its own rate (1g.10gb 0.40, a100 2.80, h100 5.00):
/// - allocated: inference 6,480 x 0.40 + 360 x 2.80 = 2,592 + 1,008 = 3,600; dev 540 x 0.40 =
///   216; training 1,440 x 5.00 = 7,200;
/// - capacity: 1g.10gb 7,560 x 0.40 = 3,024; a100 360 x 2.80 = 1,008; h100 7,200: 11,232;
/// - idle: 1g.10gb 3,024 - 2,592 - 216 = 216 (3 slices idle over [360, 540): 540 hours x 0.40);
///   a100 and h100 none. Split by quota: inference and dev each hold 7 of the family's 14 units
///   (nothing unallocated): 108 each;
/// - totals: inference 3,708, dev 324, training 7,200: 11,232, the capacity cost.
#[test]
fn each_type_is_priced_at_its_rate_and_the_idle_cost_split_by_family_quotas() {
    let r = report();
    let total = |team: &str| row(&r, team).total_cost.unwrap();
    assert_close!(total("inference"), 3708.0, "inference");
    assert_close!(total("dev"), 324.0, "dev");
    assert_close!(total("training"), 7200.0, "training");
    assert_close!(r.capacity_cost.unwrap(), 11232.0, "capacity cost");
    assert_close!(
        r.capacity_of("1g.10gb").unwrap().idle_cost.unwrap(),
        216.0,
        "1g idle"
    );
    assert_close!(row(&r, "dev").idle_cost.unwrap(), 108.0, "dev's idle share");
}
