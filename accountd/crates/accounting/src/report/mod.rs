//! Reports over a period: the per-team accounting of DESIGN 5 (`report teams`), the fair-share
//! figures (`report fairshare`), the utilisation and idle GPUs of the NVML samples (`report
//! jobs`, `report utilisation`, `report users`), and their renderings (table, CSV, JSON; HTML
//! for the teams, with the users).
//!
//! The arithmetic is the model's (`crate::model`): the in-quota / borrowed / lent split
//! (`usage::split_usage`), the costs (`cost::team_costs`), the fair-share factor
//! (`fairshare`). These modules read the database through [`crate::store`], turn it into the
//! model's inputs, and render.
//!
//! The parts: this module holds what every report shares (the [`Format`], the rates); `teams`:
//! `report teams`, whole or day by day (the accounting of DESIGN 5); `fairshare`: `report
//! fairshare`; `utilisation`: `report jobs` and `report utilisation`, from the NVML samples;
//! `users`: `report users`, idle GPU-hours per user from the same samples and every run's
//! allocated GPU-hours; `html`: the teams report as a self-contained HTML page (with the users);
//! `render`: the CSV and JSON writers of every report's rows; `table`: the text table of every
//! report.

use std::collections::BTreeMap;

use teamshare_config::{Config, DEFAULT_GPU_TYPE};

use crate::store::RunUsage;

pub mod fairshare;
pub mod html;
mod render;
pub mod table;
pub mod teams;
pub mod users;
pub mod utilisation;

pub use fairshare::*;
pub use render::csv_text;
pub(crate) use render::{json_text, CsvNumber, CsvNumbers, JsonNumbers, Numbers};
pub use teams::*;

/// The key of GPUs allocated without a type: the `[gpu_types]` rate they are priced at, and
/// their entry in per-type breakdowns. Types without a rate of their own are priced at it too.
pub const DEFAULT_RATE: &str = DEFAULT_GPU_TYPE;

const SECONDS_PER_HOUR: f64 = 3600.0;

/// Hourly rates per GPU type.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Rates {
    per_hour: BTreeMap<String, f64>,
}

impl Rates {
    /// Rates by `[gpu_types]` key (`default` for untyped GPUs).
    pub fn new(per_hour: BTreeMap<String, f64>) -> Self {
        Rates { per_hour }
    }

    /// The rates of the configuration's `[gpu_types]`.
    pub fn from_config(config: &Config) -> Self {
        Rates::new(
            config
                .gpu_types
                .iter()
                .map(|(name, t)| (name.clone(), t.rate_per_hour))
                .collect(),
        )
    }

    /// No rate at all: reports show no cost.
    pub fn is_empty(&self) -> bool {
        self.per_hour.is_empty()
    }

    /// The hourly rate of a GPU of `gpu_type` (None: untyped): its type's, else `default`'s,
    /// else 0.
    pub fn rate(&self, gpu_type: Option<&str>) -> f64 {
        self.get(gpu_type).unwrap_or(0.0)
    }

    /// The configured rate that prices a GPU of `gpu_type` (its type's, else `default`'s); None
    /// where neither is configured.
    pub fn get(&self, gpu_type: Option<&str>) -> Option<f64> {
        self.per_hour.get(self.key(gpu_type)).copied()
    }

    /// The rate a GPU of `gpu_type` is priced at: its type's, or [`DEFAULT_RATE`].
    pub fn key<'a>(&self, gpu_type: Option<&'a str>) -> &'a str {
        match gpu_type {
            Some(t) if self.per_hour.contains_key(t) => t,
            _ => DEFAULT_RATE,
        }
    }

    /// Whether the configuration governs shards (`[gpu_types.shard]`, issue 30): their runs
    /// then count ([`count_shards`]).
    pub fn governs_shares(&self) -> bool {
        self.per_hour.contains_key(teamshare_config::SHARE_TYPE)
    }

    /// Whether fair-share usage is weighted by rates: some rate is above 0. Without rates, or
    /// with every rate at 0, usage is plain GPU-seconds.
    pub fn weigh_usage(&self) -> bool {
        self.per_hour.values().any(|&r| r > 0.0)
    }

    /// What one GPU-second of `gpu_type` (None: untyped) weighs in fair-share usage: its rate
    /// ([`Rates::get`]); a GPU no rate prices weighs as the most expensive type, so that no GPU
    /// is free in fair-share only because it has no rate. 1 when [`Rates::weigh_usage`] is false.
    pub fn usage_weight(&self, gpu_type: Option<&str>) -> f64 {
        if !self.weigh_usage() {
            return 1.0;
        }
        self.get(gpu_type)
            .unwrap_or_else(|| self.per_hour.values().copied().fold(0.0, f64::max))
    }
}

/// Where `rates` govern shards, a run holding shards and no GPU (stored as 0 GPUs and its
/// shards under type `shard`) counts its shards as GPUs of that type; elsewhere it holds no
/// GPU, as before shards were governed.
pub fn count_shards(runs: &mut [RunUsage], rates: &Rates) {
    if !rates.governs_shares() {
        return;
    }
    for r in runs.iter_mut().filter(|r| r.gpus == 0) {
        if let Some(n) = r.gpus_by_type.get(teamshare_config::SHARE_TYPE) {
            r.gpus = n;
        }
    }
}

/// Each GPU type's GPUs of a run, in type order, then its GPUs without a type under
/// [`DEFAULT_RATE`]. A run whose typed GPUs add up to more than its total counts them all.
fn run_keys(run: &RunUsage) -> impl Iterator<Item = (&str, u64)> + '_ {
    let typed: u64 = run.gpus_by_type.iter().map(|(_, n)| n).sum();
    let untyped = run.gpus.saturating_sub(typed);
    run.gpus_by_type
        .iter()
        .filter(|&(_, n)| n > 0)
        .chain((untyped > 0).then_some((DEFAULT_RATE, untyped)))
}

/// Output formats of every report.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Table,
    Csv,
    Json,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::cost::CostRule;
    use crate::model::usage::TeamQuota;
    use crate::period::Period;
    use crate::store::{CapacitySample, GpuTypes};
    use serde::Serialize;
    use teamshare_config::IdleCostSplit;

    pub(super) const H: i64 = 3600;
    /// 2024-03-01T00:00:00Z.
    pub(super) const T0: i64 = 1_709_251_200;

    pub(super) fn close(a: f64, b: f64) -> bool {
        (a - b).abs() <= 1e-9 * b.abs().max(1.0)
    }

    /// One field as the reports' CSV writer ([`csv_text`]) writes it.
    pub(super) fn csv_field(s: &str) -> String {
        #[derive(Serialize, Default)]
        struct One<'a> {
            field: &'a str,
        }
        let csv = csv_text([One { field: s }]);
        let line = csv.strip_prefix("field\n").expect("the header first");
        line.strip_suffix('\n').expect("a line").to_string()
    }

    pub(super) fn run(
        id: i64,
        account: &str,
        start_h: i64,
        end_h: Option<i64>,
        gpus: u64,
    ) -> RunUsage {
        RunUsage {
            id,
            account: account.into(),
            partition: "gpu".into(),
            start: T0 + start_h * H,
            end: end_h.map(|e| T0 + e * H),
            gpus,
            gpus_by_type: GpuTypes::default(),
        }
    }

    pub(super) fn cap(ts_h: i64, gpus: u32, types: &[(&str, u32)]) -> CapacitySample {
        CapacitySample {
            ts: T0 + ts_h * H,
            gpus,
            by_type: types.iter().map(|&(t, n)| (t.to_string(), n)).collect(),
        }
    }

    pub(super) fn quota(name: &str, quota: u32, lend_limit: u32) -> TeamQuota {
        TeamQuota {
            name: name.into(),
            quota,
            lend_limit,
        }
    }

    /// The three-team example of tests/model_golden.rs, at 10 per GPU-hour, borrowed hours at
    /// 0.5, idle cost by quota share.
    pub(super) fn params(until_h: i64, now_h: i64) -> UsageParams {
        UsageParams {
            cluster: "c".into(),
            period: Period {
                since: T0,
                until: T0 + until_h * H,
            },
            now: T0 + now_h * H,
            teams: vec![quota("a", 2, 2), quota("b", 4, 1), quota("c", 2, 2)],
            typed_teams: BTreeMap::new(),
            families: Vec::new(),
            quota_by_type: BTreeMap::new(),
            partitions: vec!["gpu".into()],
            rates: Rates::new(BTreeMap::from([(DEFAULT_RATE.to_string(), 10.0)])),
            gpu_equivalents: BTreeMap::new(),
            currency: Some("BRL".into()),
            cost_rule: CostRule {
                borrowed_cost_factor: 0.5,
                idle_split: IdleCostSplit::QuotaShare,
            },
            only: vec![],
        }
    }

    pub(super) fn example_runs() -> Vec<RunUsage> {
        vec![
            run(1, "a", 0, Some(2), 4),
            run(2, "b", 0, Some(6), 1),
            run(3, "c", 1, Some(3), 1),
            run(4, "b", 3, Some(4), 4),
            run(5, "c", 4, Some(5), 3),
            run(6, "a", 4, None, 1), // running: counted up to now (6 h)
            run(7, "a", 5, Some(5), 0),
        ]
    }

    pub(super) fn example_capacity() -> Vec<CapacitySample> {
        vec![cap(0, 8, &[]), cap(4, 10, &[])]
    }

    pub(super) fn assert_adds_up(r: &UsageReport) {
        let (mut borrowed, mut lent, mut total) = (0.0, 0.0, 0.0);
        for row in &r.rows {
            assert!(
                close(
                    row.gpu_seconds as f64,
                    row.in_quota_seconds + row.borrowed_seconds
                ),
                "{row:?}"
            );
            borrowed += row.borrowed_seconds;
            lent += row.lent_seconds;
            total += row.total_cost.unwrap_or(0.0);
            if let (Some(a), Some(i), Some(t)) = (row.allocated_cost, row.idle_cost, row.total_cost)
            {
                assert!(close(a + i, t), "{row:?}");
            }
        }
        assert!(close(borrowed, lent), "borrowed {borrowed}, lent {lent}");
        if let Some(c) = r.capacity_cost {
            assert!(close(total, c), "total {total}, capacity {c}");
        }
    }
}
