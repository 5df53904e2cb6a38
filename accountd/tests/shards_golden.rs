//! Golden test (issue 30): a month of whole GPUs and shards (`gres/shard`, 4 to an A100) under
//! quotas in GPU-equivalents, with an H100 team at another rate, and one A100 re-partitioned
//! from whole use to shards half-way. Every figure is worked out by hand in the comments, in
//! units of a quarter of an A100 where the family is split.

mod golden_support;

use std::collections::BTreeMap;

use accountd::period::Period;
use accountd::report::{compute_usage, count_shards, UsageParams, UsageReport};
use accountd::store::{CapacitySample, RunUsage};
use golden_support::{of, row, run, shard_run, H, MONTH, T0};

/// A100 2.80/h, a shard 2.80 / 4 = 0.70/h (a shard has no rate of its own); H100 5.00/h.
/// Borrowed hours at list price; the idle cost of each type split by the teams' quotas.
const CONFIG: &str = r#"
[cluster]
name = "golden"
partitions = ["gpu"]
currency = "USD"

[gpu_types.a100]
rate_per_hour = 2.8

[gpu_types.h100]
rate_per_hour = 5.0

[gpu_types.shard]
slices_of = "a100"
gpus = "1/4"

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

/// n1's A100 is shared as 4 shards all month; n2's A100 is used whole until hour 360, then
/// shared as 4 shards (the re-partition: gres.conf gains `shard`, the node is resumed).
///
/// | run | team      | GPUs       | hours      | where  | units (1/4 A100) |
/// |-----|-----------|------------|------------|--------|------------------|
/// | 1   | inference | 4 shards   | [0, 720)   | n1     | 4                |
/// | 2   | dev       | 1 x a100   | [0, 360)   | n2     | 4                |
/// | 3   | inference | 2 shards   | [360, 720) | n2     | 2                |
/// | 4   | dev       | 2 shards   | [540, 720) | n2     | 2                |
/// | 5   | training  | 2 x h100   | [0, 720)   | n3     | (its own type)   |
fn runs() -> Vec<RunUsage> {
    vec![
        shard_run(1, "inference", 4, 0, MONTH),
        run(2, "dev", "a100", 1, 0, 360),
        shard_run(3, "inference", 2, 360, MONTH),
        shard_run(4, "dev", 2, 540, MONTH),
        run(5, "training", "h100", 2, 0, MONTH),
    ]
}

/// The capacity the governor records: 2 A100 and 2 H100 all month. Shards are shares of the
/// A100s, not capacity of their own, so the re-partition changes nothing here: the family
/// stays 8 units (2 GPU-equivalents).
fn capacity() -> Vec<CapacitySample> {
    let by_type = BTreeMap::from([("a100".to_string(), 2), ("h100".to_string(), 2)]);
    vec![CapacitySample {
        ts: T0,
        gpus: 4,
        by_type,
    }]
}

fn report() -> UsageReport {
    let config = teamshare_config::parse(CONFIG, "teamshare.toml").unwrap();
    let period = Period {
        since: T0,
        until: T0 + MONTH * H,
    };
    let params = UsageParams::from_config(&config, period, T0 + 800 * H, Vec::new());
    let mut runs = runs();
    count_shards(&mut runs, &params.rates);
    compute_usage(&runs, &capacity(), &params)
}

/// The family split in units, capacity 8 throughout, quotas 4 + 4:
/// - [0, 360): inference holds 4 (in quota), dev 4 (in quota);
/// - [360, 540): inference 4 + 2 = 6: 4 in quota, 2 borrowed, lent by dev (whose 4 are idle);
///   2 units idle;
/// - [540, 720): inference the same; dev holds 2 of its quota and lends 2.
///
/// In unit-hours: inference in quota 4 x 720 = 2,880, borrowed 2 x 360 = 720; dev in quota
/// 4 x 360 + 2 x 180 = 1,800, lent 2 x 360 = 720; unallocated 2 x 180 = 360.
///
/// Back to types by the units each team's runs held: inference's are all shards (2,880 in
/// quota and 720 borrowed shard-hours); dev's a100 1 x 360 x 4 = 1,440 units and shards 2 x
/// 180 = 360: 80 % and 20 %, so 1,800 x 0.8 / 4 = 360 A100-hours and 1,800 x 0.2 = 360
/// shard-hours in quota. Lent and quota hours by each type's capacity in units: the shards
/// have none, so all of dev's 720 lent units are A100 hours: 180.
#[test]
fn shards_are_split_in_gpu_equivalents_and_brought_back_to_their_type() {
    let r = report();
    let (inf, dev) = (of(&r, "inference", "shard"), of(&r, "dev", "shard"));
    assert_close!(inf.in_quota_hours(), 2880.0, "inference shards in quota");
    assert_close!(inf.borrowed_hours(), 720.0, "inference shards borrowed");
    assert_close!(dev.in_quota_hours(), 360.0, "dev shards in quota");
    assert_close!(
        of(&r, "dev", "a100").in_quota_hours(),
        360.0,
        "dev a100 in quota"
    );
    assert_close!(of(&r, "dev", "a100").lent_hours(), 180.0, "dev lent a100");
    assert_close!(dev.lent_hours(), 0.0, "dev lent shards");
    // In GPU-equivalents: inference 3,600 / 4 = 900; dev 360 + 360 / 4 = 450.
    assert_close!(
        r.equivalent_hours(row(&r, "inference")),
        900.0,
        "inference equivalents"
    );
    assert_close!(r.equivalent_hours(row(&r, "dev")), 450.0, "dev equivalents");
    assert_eq!(of(&r, "inference", "a100").quota, Some(1));
}

/// Costs, each type's hours at its own rate (shard 0.70, a100 2.80, h100 5.00):
/// - allocated: inference 3,600 x 0.70 = 2,520; dev 360 x 2.80 + 360 x 0.70 = 1,008 + 252 =
///   1,260; training 1,440 x 5.00 = 7,200;
/// - capacity: the A100s 2 x 720 x 2.80 = 4,032 (of which the shards held 3,960 shard-hours x
///   0.70 = 2,772, priced as shard capacity), h100 7,200: 11,232;
/// - idle: a100 4,032 - 2,772 - 1,008 = 252 (2 units, half an A100, idle over [360, 540):
///   90 A100-hours x 2.80); shards and h100 none. Split by quota hours: inference and dev 720
///   A100-hours each (the two quotas hold the whole family, nothing is unallocated: the idle
///   half A100 was dev's idle quota), so 126 each;
/// - totals: inference 2,646, dev 1,386, training 7,200: 11,232, the capacity cost.
#[test]
fn shards_are_priced_as_part_of_their_gpus_and_the_idle_cost_is_what_no_share_held() {
    let r = report();
    let total = |team: &str| row(&r, team).total_cost.unwrap();
    let share = 126.0;
    assert_close!(total("inference"), 2520.0 + share, "inference");
    assert_close!(total("dev"), 1260.0 + share, "dev");
    assert_close!(total("training"), 7200.0, "training");
    assert_close!(r.capacity_cost.unwrap(), 11232.0, "capacity cost");
    assert_close!(
        r.capacity_of("a100").unwrap().idle_cost.unwrap(),
        252.0,
        "a100 idle"
    );
    assert_close!(
        r.capacity_of("shard").unwrap().idle_cost.unwrap(),
        0.0,
        "shard idle"
    );
}

/// With no capacity recorded, the estimate counts the A100s (the family quotas, 2) and the
/// H100s, never the shards as GPUs of their own; the bill still adds up to its capacity.
#[test]
fn an_estimated_capacity_has_no_shards_of_its_own() {
    let config = teamshare_config::parse(CONFIG, "teamshare.toml").unwrap();
    let period = Period {
        since: T0,
        until: T0 + MONTH * H,
    };
    let params = UsageParams::from_config(&config, period, T0 + 800 * H, Vec::new());
    let mut runs = runs();
    count_shards(&mut runs, &params.rates);
    let r = compute_usage(&runs, &[], &params);
    let estimate = r.estimate.as_ref().expect("estimated");
    assert_eq!(estimate.gpus, 4, "{estimate:?}");
    assert!(estimate.by_type.iter().all(|t| t.gpu_type != "shard"));
    assert_close!(r.capacity_cost.unwrap(), 11232.0, "capacity cost");
}

/// Without `[gpu_types.shard]` a shard run holds no GPU, as before shards were governed.
#[test]
fn shards_count_only_where_the_configuration_governs_them() {
    let config = teamshare_config::parse(
        &CONFIG.replace(
            "[gpu_types.shard]\nslices_of = \"a100\"\ngpus = \"1/4\"\n",
            "",
        ),
        "teamshare.toml",
    )
    .unwrap();
    let params = UsageParams::from_config(
        &config,
        Period {
            since: T0,
            until: T0 + MONTH * H,
        },
        T0 + 800 * H,
        Vec::new(),
    );
    let mut runs = runs();
    count_shards(&mut runs, &params.rates);
    assert_eq!(runs[0].gpus, 0);
    let r = compute_usage(&runs, &capacity(), &params);
    assert!(row(&r, "inference").of_type("shard").is_none());
}
