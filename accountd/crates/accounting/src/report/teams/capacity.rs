//! The capacity of the teams report: the estimate where none was recorded, the steps of the
//! period, and their GPUs per type integrated.

use std::collections::BTreeMap;

use crate::model::usage::{peak_gpus, split_usage, CapacityStep, Run};
use crate::period::Period;
use crate::store::{CapacitySample, RunUsage};

use super::{CapacityEstimate, CapacitySource, EstimatedType, UsageParams};
use crate::report::{run_keys, DEFAULT_RATE};

/// The estimate of the capacity where `history` has no sample in `period` (None where it
/// covers the period): over the part before the first sample.
pub(super) fn estimate_for(
    runs: &[RunUsage],
    history: &[CapacitySample],
    period: Period,
    params: &UsageParams,
) -> Option<CapacityEstimate> {
    let until = match history.first() {
        None => period.until,
        Some(first) if first.ts > period.since => first.ts.min(period.until),
        Some(_) => return None,
    };
    Some(estimate_capacity(
        runs,
        params,
        Period {
            since: period.since,
            until,
        },
    ))
}

/// The [`CapacityEstimate`] over `window`.
pub(super) fn estimate_capacity(
    runs: &[RunUsage],
    params: &UsageParams,
    window: Period,
) -> CapacityEstimate {
    // The runs of each GPU type in the governed partitions, for their peaks.
    let mut by_key: BTreeMap<&str, Vec<Run>> = BTreeMap::new();
    for run in runs {
        if run.gpus == 0 || !params.governs(&run.partition) {
            continue;
        }
        let end = run.end.unwrap_or(params.now);
        for (key, gpus) in run_keys(run) {
            by_key.entry(key).or_default().push(Run {
                team: run.account.clone(),
                gpus: u32::try_from(gpus).unwrap_or(u32::MAX),
                start: run.start,
                end,
            });
        }
    }
    let peak_of = |key: &str| {
        by_key.get(key).map_or(0, |runs| {
            u32::try_from(peak_gpus(runs, window)).unwrap_or(u32::MAX)
        })
    };
    let mut types: Vec<&str> = params
        .quota_by_type
        .keys()
        .map(String::as_str)
        .chain(by_key.keys().copied())
        // Shards are shares of GPUs estimated already (issue 30): no capacity of their own.
        .filter(|&k| k != DEFAULT_RATE && k != teamshare_config::SHARE_TYPE)
        .collect();
    types.sort_unstable();
    types.dedup();
    let (mut by_type, mut beyond_quotas) = (Vec::new(), 0u32);
    for gpu_type in types {
        let quotas = params.quota_by_type.get(gpu_type).copied().unwrap_or(0);
        let peak = peak_of(gpu_type);
        let gpus = quotas.max(peak);
        beyond_quotas = beyond_quotas.saturating_add(gpus - quotas);
        by_type.push(EstimatedType {
            gpu_type: gpu_type.to_string(),
            gpus,
            quotas,
            peak,
        });
    }
    let typed_quotas = params
        .quota_by_type
        .values()
        .fold(0u32, |s, &n| s.saturating_add(n));
    let untyped_quotas = params.quota_sum().saturating_sub(typed_quotas);
    let peak = peak_of(DEFAULT_RATE);
    let gpus = peak.max(untyped_quotas.saturating_sub(beyond_quotas));
    if gpus > 0 || untyped_quotas > 0 {
        by_type.push(EstimatedType {
            gpu_type: DEFAULT_RATE.to_string(),
            gpus,
            quotas: untyped_quotas,
            peak,
        });
    }
    CapacityEstimate {
        gpus: by_type.iter().fold(0u32, |s, t| s.saturating_add(t.gpus)),
        by_type,
    }
}

/// The capacity steps of `period`: the samples, with the estimate before the first one.
pub(super) fn capacity_steps(
    history: &[CapacitySample],
    period: Period,
    estimate: Option<&CapacityEstimate>,
) -> (Vec<CapacitySample>, CapacitySource) {
    let estimated = || {
        estimate.map_or(
            CapacitySample {
                ts: period.since,
                gpus: 0,
                by_type: BTreeMap::new(),
            },
            |e| e.sample(period.since),
        )
    };
    match history.first() {
        None => (vec![estimated()], CapacitySource::Estimate),
        Some(first) if first.ts > period.since => {
            let mut steps = vec![estimated()];
            steps.extend_from_slice(history);
            (steps, CapacitySource::EstimateUntil(first.ts))
        }
        Some(_) => (history.to_vec(), CapacitySource::Samples),
    }
}

/// The GPUs of `key` in a capacity sample: its typed GPUs of that type, or for [`DEFAULT_RATE`]
/// those without a type.
pub(super) fn sample_gpus(sample: &CapacitySample, key: &str) -> u32 {
    if key == DEFAULT_RATE {
        let typed = sample
            .by_type
            .iter()
            .filter(|(t, _)| t.as_str() != DEFAULT_RATE)
            .fold(0u32, |s, (_, &n)| s.saturating_add(n));
        sample.gpus.saturating_sub(typed) + sample.by_type.get(DEFAULT_RATE).copied().unwrap_or(0)
    } else {
        sample.by_type.get(key).copied().unwrap_or(0)
    }
}

pub(super) fn key_steps(steps: &[CapacitySample], key: &str) -> Vec<CapacityStep> {
    steps.iter().map(|s| (s.ts, sample_gpus(s, key))).collect()
}

/// The GPU-seconds of a step function over a period, as the model integrates it.
pub(super) fn integrate(steps: &[CapacityStep], period: Period) -> f64 {
    split_usage(&[], &[], steps, period).totals.capacity
}
