//! What the month-long golden tests of GPU slices share (`slices_golden`, `family_golden`, `shards_golden`, `mixed_golden`):
//! the month, a run of one GPU type, the comparison of hand-worked figures, and the report's
//! rows looked up by name.
#![allow(dead_code)]

use std::collections::BTreeMap;

use accountd::report::{TeamRow, TypeRow, UsageReport};
use accountd::store::{GpuTypes, RunUsage};

pub const H: i64 = 3600;
/// 2024-06-01T00:00:00Z: June has 30 days, 720 hours.
pub const T0: i64 = 1_717_200_000;
pub const MONTH: i64 = 720;

/// Run `id` of `team` holding `gpus` GPUs of `gpu_type` over hours `[from_h, to_h)`.
pub fn run(id: i64, team: &str, gpu_type: &str, gpus: u64, from_h: i64, to_h: i64) -> RunUsage {
    RunUsage {
        id,
        account: team.into(),
        partition: "gpu".into(),
        start: T0 + from_h * H,
        end: Some(T0 + to_h * H),
        gpus,
        gpus_by_type: GpuTypes::new(&BTreeMap::from([(gpu_type.to_string(), gpus)])),
    }
}

/// A run of `shards` shards as the store keeps it: 0 GPUs, the shards under type `shard`.
pub fn shard_run(id: i64, team: &str, shards: u64, from_h: i64, to_h: i64) -> RunUsage {
    RunUsage {
        gpus: 0,
        gpus_by_type: GpuTypes::new(&BTreeMap::from([("shard".to_string(), shards)])),
        ..run(id, team, "shard", shards, from_h, to_h)
    }
}

/// Equal up to the floating point of the model's sums.
pub fn close(actual: f64, expected: f64) -> bool {
    (actual - expected).abs() <= 1e-6 * expected.abs().max(1.0)
}

#[macro_export]
macro_rules! assert_close {
    ($actual:expr, $expected:expr, $what:expr) => {{
        let (a, e): (f64, f64) = ($actual, $expected);
        assert!(
            golden_support::close(a, e),
            "{}: got {a}, expected {e}",
            $what
        );
    }};
}

pub fn row<'r>(r: &'r UsageReport, team: &str) -> &'r TeamRow {
    r.row(team).unwrap_or_else(|| panic!("no row {team}"))
}

pub fn of<'r>(r: &'r UsageReport, team: &str, gpu_type: &str) -> &'r TypeRow {
    row(r, team)
        .of_type(gpu_type)
        .unwrap_or_else(|| panic!("no {gpu_type} in {team}"))
}
