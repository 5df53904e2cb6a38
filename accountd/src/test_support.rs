//! What the unit tests of the governor and of `status` share: a one-GPU job, and the plan
//! for jobs through the governor's own [`crate::governor::plan_once`].

use std::collections::{BTreeMap, BTreeSet};

use teamshare_config::Config;
use teamshare_policy::governance::{ClusterJob, Phase, Plan};

use crate::capacity::Capacity;

/// A one-GPU batch job of `team`, submitted a second before `at` and, when running, started
/// at `at`; eligible, not parked, on no node yet, priority 1. Tests change what they need
/// with struct update syntax.
pub(crate) fn job(id: u64, team: &str, phase: Phase, at: i64) -> ClusterJob {
    ClusterJob {
        id,
        team: team.into(),
        phase,
        gpus: 1,
        gpu_type: None,
        priority: 1,
        submit: at - 1,
        start: (phase == Phase::Running).then_some(at),
        eligible: true,
        parked: false,
        park_held: false,
        batch: true,
        nodes: Vec::new(),
        node_count: 1,
        completing: false,
        tasks: 1,
    }
}

/// `capacity` GPUs with no node known (the plan then places nothing by node).
pub(crate) fn gpus(capacity: u32) -> Capacity {
    Capacity {
        total: capacity,
        ..Capacity::default()
    }
}

/// The plan for `jobs` at `now` on `cap`, with no fair-share factors and no idle job.
pub(crate) fn plan(config: &Config, cap: &Capacity, jobs: &[ClusterJob], now: i64) -> Plan {
    crate::governor::plan_once(
        config,
        &crate::governor::PassRead {
            jobs,
            shard_gpus: &teamshare_policy::governance::NO_SHARD_PLACES,
            cap,
            fairshare: &BTreeMap::new(),
            idle: &BTreeSet::new(),
            now,
            now_ms: now.saturating_mul(1_000),
        },
    )
}
