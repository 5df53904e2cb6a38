//! The capacity of the teams report: the estimate where none was recorded, the steps of the
//! period, and their GPUs per type integrated.

use std::collections::BTreeMap;

use crate::model::family::FamilyQuotas;
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
    let mut by_type: Vec<EstimatedType> = types
        .into_iter()
        .map(|gpu_type| {
            let quotas = params.quota_by_type.get(gpu_type).copied().unwrap_or(0);
            let peak = peak_of(gpu_type);
            EstimatedType {
                gpu_type: gpu_type.to_string(),
                gpus: quotas.max(peak),
                quotas,
                peak,
            }
        })
        .collect();
    for family in &params.families {
        slices_serve_family_quotas(&mut by_type, family);
    }
    let beyond_quotas = by_type.iter().fold(0u32, |s, t| {
        s.saturating_add(t.gpus.saturating_sub(t.quotas))
    });
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

/// A GPU family's quotas (issue 30) are whole GPUs' worth in any mix of whole GPUs and
/// slices: the slices estimated beyond their own types' quotas serve them first, and the
/// whole type is estimated at what they leave (its `quotas` then say that part), so that an
/// A100's worth run as seven slices is not also counted as a whole A100.
fn slices_serve_family_quotas(by_type: &mut [EstimatedType], family: &FamilyQuotas) {
    let per_gpu = u64::from(family.per_gpu.max(1));
    let spare_units: u64 = family
        .members
        .iter()
        .filter(|(k, _)| *k != family.whole)
        .filter_map(|(k, worth)| {
            let t = by_type.iter().find(|t| &t.gpu_type == k)?;
            Some(u64::from(t.gpus.saturating_sub(t.quotas)) * u64::from(*worth))
        })
        .sum();
    let Some(whole) = by_type.iter_mut().find(|t| t.gpu_type == family.whole) else {
        return;
    };
    let need = (u64::from(whole.quotas) * per_gpu).saturating_sub(spare_units);
    whole.quotas = u32::try_from(need.div_ceil(per_gpu)).unwrap_or(u32::MAX);
    whole.gpus = whole.quotas.max(whole.peak);
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
