//! Golden test (issue 30): one month of whole A100s, MIG slices (`1g.10gb`, 1/7 of an A100)
//! and shards (`gres/shard`, 4 to an A100) in one family, under quotas in GPU-equivalents,
//! beside an H100 team at another rate, with one A100 re-partitioned from whole use to 7 slices
//! half-way. Every figure is worked out by hand in the comments, in units of 1/28 of an A100
//! (28 is the least common multiple of 7 and 4: an A100 is 28 units, a slice 4, a shard 7).

mod golden_support;

use accountd::period::Period;
use accountd::report::{compute_usage, count_shards, UsageParams, UsageReport};
use accountd::store::{CapacitySample, RunUsage};
use golden_support::{of, row, run, shard_run, H, MONTH, T0};

/// A100 2.80/h; a slice 2.80 / 7 = 0.40/h and a shard 2.80 / 4 = 0.70/h (neither has a rate of
/// its own); H100 5.00/h. Borrowed hours at list price; each type's idle cost split by the
/// teams' quotas.
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
quota = { h100 = 1 }

[accountd]
borrowed_cost_factor = 1.0
idle_cost_split = "quota-share"
"#;

/// n1's A100 is shared as 4 shards all month; n2's A100 is used whole until hour 360, then cut
/// into 7 slices (drained, gres.conf changed, resumed); n3 has an H100.
///
/// | run | team      | GPUs         | hours      | where | units |
/// |-----|-----------|--------------|------------|-------|-------|
/// | 1   | inference | 4 shards     | [0, 720)   | n1    | 28    |
/// | 2   | dev       | 1 x a100     | [0, 360)   | n2    | 28    |
/// | 3   | dev       | 3 x 1g.10gb  | [360, 720) | n2    | 12    |
/// | 4   | inference | 4 x 1g.10gb  | [540, 720) | n2    | 16    |
/// | 5   | training  | 1 x h100     | [0, 720)   | n3    | -     |
fn runs() -> Vec<RunUsage> {
    vec![
        shard_run(1, "inference", 4, 0, MONTH),
        run(2, "dev", "a100", 1, 0, 360),
        run(3, "dev", "1g.10gb", 3, 360, MONTH),
        run(4, "inference", "1g.10gb", 4, 540, MONTH),
        run(5, "training", "h100", 1, 0, MONTH),
    ]
}

/// The capacity the governor records: 2 A100 until hour 360, then 1 A100 and 7 slices; the
/// H100 all month. Shards are shares of n1's A100, no capacity of their own. In units the
/// family is 56 throughout (2 x 28, then 28 + 7 x 4): the re-partition changes no quota's worth.
fn capacity() -> Vec<CapacitySample> {
    let sample = |at_h: i64, types: &[(&str, u32)]| CapacitySample {
        ts: T0 + at_h * H,
        gpus: types.iter().map(|(_, n)| n).sum(),
        by_type: types.iter().map(|(k, n)| (k.to_string(), *n)).collect(),
    };
    vec![
        sample(0, &[("a100", 2), ("h100", 1)]),
        sample(360, &[("a100", 1), ("1g.10gb", 7), ("h100", 1)]),
    ]
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

/// The family split in units, capacity 56 throughout, quotas 28 + 28:
/// - [0, 360): inference's shards 28 in quota, dev's A100 28 in quota;
/// - [360, 540): inference 28 in quota; dev's 3 slices 12 in quota, 16 of its quota idle;
/// - [540, 720): inference 28 + 16 (its 4 slices): 28 in quota, 16 borrowed, lent by dev.
///
/// In unit-hours: inference in quota 28 x 720 = 20,160, borrowed 16 x 180 = 2,880; dev in
/// quota 28 x 360 + 12 x 360 = 14,400, lent 16 x 180 = 2,880.
///
/// Back to types, in-quota and borrowed units by the units each team's runs held:
/// - inference: shards 28 x 720 = 20,160, slices 16 x 180 = 2,880 (7/8 and 1/8). Shards:
///   20,160 x 7/8 / 7 = 2,520 shard-hours in quota, 2,880 x 7/8 / 7 = 360 borrowed; slices:
///   20,160 / 8 / 4 = 630 in quota, 2,880 / 8 / 4 = 90 borrowed (the shards' 2,880 and the
///   slices' 720 hours in all, as they ran);
/// - dev: A100 28 x 360 = 10,080, slices 12 x 360 = 4,320 (70 % and 30 %): 360 A100-hours and
///   14,400 x 0.3 / 4 = 1,080 slice-hours in quota.
///
/// Quota and lent units by each type's share of the family's capacity in units: A100
/// 1,080 hours x 28 = 30,240 (2 until hour 360, then 1), slices 7 x 360 x 4 = 10,080, shards
/// none: 3/4 and 1/4. dev lent 2,880 x 3/4 / 28 = 540/7 A100-hours and 2,880 / 4 / 4 = 180
/// slice-hours; each team's quota is 20,160 x 3/4 / 28 = 540 A100-hours and 20,160 / 4 / 4 =
/// 1,260 slice-hours.
#[test]
fn whole_gpus_slices_and_shards_are_split_as_one_family_and_brought_back_to_their_types() {
    let r = report();
    assert_close!(
        of(&r, "inference", "shard").in_quota_hours(),
        2520.0,
        "inf shard iq"
    );
    assert_close!(
        of(&r, "inference", "shard").borrowed_hours(),
        360.0,
        "inf shard b"
    );
    assert_close!(
        of(&r, "inference", "1g.10gb").in_quota_hours(),
        630.0,
        "inf slice iq"
    );
    assert_close!(
        of(&r, "inference", "1g.10gb").borrowed_hours(),
        90.0,
        "inf slice b"
    );
    assert_close!(of(&r, "dev", "a100").in_quota_hours(), 360.0, "dev a100 iq");
    assert_close!(
        of(&r, "dev", "1g.10gb").in_quota_hours(),
        1080.0,
        "dev slice iq"
    );
    assert_close!(
        of(&r, "dev", "a100").lent_hours(),
        540.0 / 7.0,
        "dev a100 lent"
    );
    assert_close!(
        of(&r, "dev", "1g.10gb").lent_hours(),
        180.0,
        "dev slice lent"
    );
    assert_close!(
        of(&r, "inference", "a100").quota_hours().unwrap(),
        540.0,
        "inf a100 q"
    );
    assert_close!(
        of(&r, "inference", "1g.10gb").quota_hours().unwrap(),
        1260.0,
        "inf slice q"
    );
    // In GPU-equivalents: inference 2,880 / 4 + 720 / 7 = 23,040 / 28; dev 360 + 1,080 / 7 =
    // 14,400 / 28.
    let eq = |team: &str| r.equivalent_hours(row(&r, team));
    assert_close!(eq("inference"), 23040.0 / 28.0, "inference equivalents");
    assert_close!(eq("dev"), 14400.0 / 28.0, "dev equivalents");
    assert_eq!(of(&r, "dev", "a100").quota, Some(1));
}

/// Costs, each type's hours at its own rate (a100 2.80, slice 0.40, shard 0.70, h100 5.00):
/// - allocated: inference 2,880 x 0.70 + 720 x 0.40 = 2,016 + 288 = 2,304; dev 360 x 2.80 +
///   1,080 x 0.40 = 1,008 + 432 = 1,440; training 720 x 5.00 = 3,600;
/// - capacity: the shards held 2,880 shard-hours, priced as shard capacity (2,016) and taken
///   off the A100s' 1,080 hours (2,880 / 4 = 720): A100 360 x 2.80 = 1,008; slices 2,520 x 0.40
///   = 1,008; h100 3,600. In all 7,632 (the family is 2 A100 x 720 h x 2.80 = 4,032 either way);
/// - idle: the slices' 1,008 - 288 - 432 = 288 (4 of n2's slices over [360, 540): 720
///   slice-hours x 0.40); every other type none. Split by the family quotas, equal: 144 each;
/// - totals: inference 2,448, dev 1,584, training 3,600: 7,632, the capacity cost.
#[test]
fn every_type_is_priced_at_its_rate_and_the_idle_slices_are_split_by_the_family_quotas() {
    let r = report();
    let total = |team: &str| row(&r, team).total_cost.unwrap();
    assert_close!(total("inference"), 2304.0 + 144.0, "inference");
    assert_close!(total("dev"), 1440.0 + 144.0, "dev");
    assert_close!(total("training"), 3600.0, "training");
    assert_close!(r.capacity_cost.unwrap(), 7632.0, "capacity cost");
    let idle = |k: &str| r.capacity_of(k).unwrap().idle_cost.unwrap();
    assert_close!(idle("1g.10gb"), 288.0, "slices idle");
    assert_close!(idle("a100"), 0.0, "a100 idle");
    assert_close!(idle("shard"), 0.0, "shard idle");
    assert_close!(idle("h100"), 0.0, "h100 idle");
    // The capacity in GPU-equivalents: the two A100s all month, whatever they were cut into.
    let family: f64 = ["a100", "1g.10gb", "shard"]
        .iter()
        .map(|k| r.capacity_of(k).unwrap().capacity_seconds / 3600.0 * r.equivalents_of(k))
        .sum();
    assert_close!(family, 1440.0, "family capacity in A100-hours");
}
