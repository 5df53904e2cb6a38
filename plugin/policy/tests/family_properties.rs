//! Properties of quotas in GPU-equivalents (issue 30) over random families, teams and jobs:
//! the pass's split never gives a team more of a family than its quota (or quota + borrow
//! limit, or lend limit) in units, never more of a type than the type's capacity, and the
//! limits the plan asks Slurm to enforce add up, in units, to at most the family's ceiling.
//!
//! `PROPTEST_CASES=100000 cargo test --release -p teamshare-policy --test family_properties`
//! for a soak.

// Test code: a scenario reads top to bottom, so the workspace's 80-line limit is not for it.
#![allow(clippy::too_many_lines)]

use std::collections::BTreeMap;

use proptest::prelude::*;
use teamshare_config::Config;
use teamshare_policy::governance::families::split_for;
use teamshare_policy::governance::{plan, ClusterJob, GovernInput, Phase};
use teamshare_policy::priority::{self, encode};

const NOW: i64 = 1_000_000;
/// The family: a whole A100 (7 units), `1g.10gb` (1) and `3g.40gb` (3).
const TYPES: [(&str, u32); 3] = [("a100", 7), ("1g.10gb", 1), ("3g.40gb", 3)];

fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(256)
}

#[derive(Debug, Clone)]
struct TeamSpec {
    quota: u32,
    borrow: Option<u32>,
    lend: bool,
}

fn config(teams: &[TeamSpec]) -> Config {
    let mut text = String::from(
        "[cluster]\nname = \"p\"\n\n[gpu_types.a100]\nrate_per_hour = 2.8\n\n\
         [gpu_types.\"1g.10gb\"]\nslices_of = \"a100\"\ngpus = \"1/7\"\n\n\
         [gpu_types.\"3g.40gb\"]\nslices_of = \"a100\"\ngpus = \"3/7\"\n\n",
    );
    for (i, t) in teams.iter().enumerate() {
        text.push_str(&format!(
            "[[team]]\nname = \"t{i}\"\nquota = {{ a100 = {} }}\nlend = {}\n",
            t.quota, t.lend
        ));
        if let Some(b) = t.borrow {
            text.push_str(&format!("borrow_limit = {{ a100 = {b} }}\n"));
        }
    }
    text.push_str("[governance]\nmin_runtime_before_reclaim = \"0s\"\n");
    teamshare_config::parse(&text, "p.toml").expect("generated configuration is valid")
}

#[derive(Debug, Clone)]
struct JobSpec {
    team: usize,
    kind: usize,
    running: bool,
    gpus: u32,
    age: i64,
}

/// Jobs with running ones kept within each type's capacity (Slurm would not start more).
fn jobs(specs: &[JobSpec], capacity: &[u32; 3]) -> Vec<ClusterJob> {
    let mut held = [0u32; 3];
    let mut out = Vec::new();
    for (i, s) in specs.iter().enumerate() {
        let running = s.running && held[s.kind] + s.gpus <= capacity[s.kind];
        if running {
            held[s.kind] += s.gpus;
        }
        out.push(ClusterJob {
            id: i as u64 + 1,
            gpu_type: Some(TYPES[s.kind].0.to_string()),
            team: format!("t{}", s.team),
            phase: if running {
                Phase::Running
            } else {
                Phase::Pending
            },
            gpus: s.gpus,
            priority: if running {
                encode(priority::protected_level(0), 0)
            } else {
                encode(priority::BORROW_BASE, 0)
            },
            submit: NOW - s.age - 1,
            start: running.then_some(NOW - s.age),
            eligible: true,
            parked: false,
            park_held: false,
            batch: true,
            nodes: Vec::new(),
            node_count: 1,
            completing: false,
            tasks: 1,
        });
    }
    out
}

fn units(m: &BTreeMap<String, u32>) -> u64 {
    TYPES
        .iter()
        .map(|(k, u)| u64::from(m.get(*k).copied().unwrap_or(0)) * u64::from(*u))
        .sum()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), ..ProptestConfig::default() })]

    #[test]
    fn the_split_and_the_limits_hold_the_family_figures(
        teams in prop::collection::vec(
            (0u32..3, prop::option::of(0u32..3), any::<bool>())
                .prop_map(|(quota, borrow, lend)| TeamSpec { quota, borrow, lend }),
            1..4,
        ),
        capacity in (0u32..3, 0u32..15, 0u32..4),
        specs in prop::collection::vec(
            (0usize..3, 0usize..3, any::<bool>(), 1u32..4, 0i64..100),
            0..24,
        ),
    ) {
        let capacity = [capacity.0, capacity.1, capacity.2];
        let n = teams.len();
        let specs: Vec<JobSpec> = specs
            .into_iter()
            .map(|(team, kind, running, gpus, age)| JobSpec { team: team % n, kind, running, gpus, age })
            .collect();
        let c = config(&teams);
        let jobs = jobs(&specs, &capacity);
        let by_type: BTreeMap<String, u32> = TYPES
            .iter()
            .zip(capacity)
            .map(|((k, _), n)| (k.to_string(), n))
            .collect();
        let split = split_for(&c, &jobs, &by_type).expect("every team counts the family");
        let mut per_type = [0u32; 3];
        for (t, spec) in split.teams.iter().zip(&teams) {
            let q = units(&t.quota.by_type);
            prop_assert!(q <= u64::from(spec.quota) * 7, "{}: quota {q} units of {}", t.name, spec.quota * 7);
            if let (Some(b), Some(borrow)) = (&t.borrow_by_type, spec.borrow) {
                prop_assert!(q + units(b) <= u64::from(spec.quota + borrow) * 7, "{}: ceiling", t.name);
            }
            let lend = t.lend_by_type.as_ref().expect("a family team lends per type");
            for (k, n) in lend {
                prop_assert!(*n <= t.quota_of(k), "{}: lends {n} {k} of {}", t.name, t.quota_of(k));
            }
            if !spec.lend {
                prop_assert_eq!(units(lend), 0);
            }
            for (i, (k, _)) in TYPES.iter().enumerate() {
                per_type[i] += t.quota_of(k);
            }
        }
        for (i, (k, _)) in TYPES.iter().enumerate() {
            prop_assert!(per_type[i] <= capacity[i], "{k}: quotas {} above capacity {}", per_type[i], capacity[i]);
        }

        // The plan's Slurm limits, in units, within each team's ceiling where it runs within it.
        let node_types: BTreeMap<String, BTreeMap<String, u32>> = TYPES
            .iter()
            .zip(capacity)
            .filter(|(_, n)| *n > 0)
            .map(|((k, _), n)| (format!("n-{k}"), BTreeMap::from([(k.to_string(), n)])))
            .collect();
        let node_gpus = node_types.iter().map(|(n, k)| (n.clone(), k.values().sum())).collect();
        let p = plan(&GovernInput {
            config: &c,
            capacity: capacity.iter().sum(),
            jobs: &jobs,
            fairshare: &BTreeMap::new(),
            now: NOW,
            now_ms: NOW * 1000,
            node_gpus: &node_gpus,
            capacity_by_type: &by_type,
            node_types: &node_types,
            idle: &std::collections::BTreeSet::new(),
            shard_gpus: &teamshare_policy::governance::NO_SHARD_PLACES,
        });
        for (i, spec) in teams.iter().enumerate() {
            let name = format!("t{i}");
            let Some(borrow) = spec.borrow else { continue };
            let ceiling = u64::from(spec.quota + borrow) * 7;
            let running: u64 = jobs
                .iter()
                .filter(|j| j.team == name && j.phase == Phase::Running)
                .map(|j| {
                    let u = TYPES.iter().find(|(k, _)| Some(*k) == j.gpu_type.as_deref()).map_or(0, |(_, u)| *u);
                    u64::from(j.gpus) * u64::from(u)
                })
                .sum();
            if running > ceiling {
                continue;
            }
            let limits = p.type_limits.get(&name).cloned().unwrap_or_default();
            prop_assert!(
                units(&limits) <= ceiling,
                "{name}: Slurm limits {limits:?} = {} units above the ceiling {ceiling}",
                units(&limits)
            );
        }
    }
}
