//! Victims keep their levels while their order holds (issue 26): a running job that ends or
//! starts moves no other victim whose place in the reclaim order, among the victims of both
//! passes, stayed the same. With packed ranks, every victim behind the change moved, and each
//! move is a priority update in slurmctld.

use std::collections::{BTreeMap, BTreeSet};

use proptest::prelude::*;
use teamshare_config::Config;
use teamshare_policy::governance::{plan, ClusterJob, GovernInput, Phase, Plan};
use teamshare_policy::priority::{self, encode};

const NAMES: [&str; 3] = ["red", "green", "blue"];

fn config(quotas: &[u32]) -> Config {
    let mut text = String::from("[cluster]\nname = \"v\"\n");
    for (name, quota) in NAMES.iter().zip(quotas) {
        text.push_str(&format!("[[team]]\nname = \"{name}\"\nquota = {quota}\n"));
    }
    text.push_str("[governance]\nmin_runtime_before_reclaim = \"0s\"\n");
    teamshare_config::parse(&text, "test").expect("valid configuration")
}

fn running(id: u64, team: usize, start: i64) -> ClusterJob {
    ClusterJob {
        id,
        team: NAMES[team].to_string(),
        phase: Phase::Running,
        gpus: 1,
        gpu_type: None,
        priority: encode(priority::BORROW_BASE, 0),
        submit: start - 1,
        start: Some(start),
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

fn pass(config: &Config, jobs: &[ClusterJob], now: i64) -> Plan {
    plan(&GovernInput {
        config,
        capacity: 64,
        jobs,
        fairshare: &BTreeMap::new(),
        now,
        now_ms: now * 1_000,
        node_gpus: &BTreeMap::new(),
        capacity_by_type: &BTreeMap::new(),
        node_types: &BTreeMap::new(),
        idle: &BTreeSet::new(),
        shard_gpus: &teamshare_policy::governance::NO_SHARD_PLACES,
    })
}

/// Slurm now holds what the plan said.
fn apply(jobs: &mut [ClusterJob], p: &Plan) {
    for j in jobs {
        if let Some(&want) = p.priorities.get(&j.id) {
            j.priority = want;
        }
    }
}

fn levels(p: &Plan) -> Vec<(u64, u32)> {
    p.state
        .victims
        .iter()
        .map(|v| (v.job_id, v.level))
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn a_victim_whose_place_held_keeps_its_level(
        quotas in prop::collection::vec(0u32..4, 3),
        teams in prop::collection::vec(0usize..3, 2..30),
        ends in any::<prop::sample::Index>(),
        starts in prop::option::of(0usize..3),
    ) {
        let config = config(&quotas);
        let mut jobs: Vec<ClusterJob> = teams
            .iter()
            .enumerate()
            .map(|(i, t)| running(i as u64 + 1, *t, 1_000 + i as i64))
            .collect();
        let first = pass(&config, &jobs, 5_000);
        apply(&mut jobs, &first);
        // One job ends, and maybe one starts.
        jobs.remove(ends.index(jobs.len()));
        if let Some(t) = starts {
            jobs.push(running(1_000, t, 4_000));
        }
        let second = pass(&config, &jobs, 5_001);
        let (before, after) = (levels(&first), levels(&second));
        // Strictly increasing levels in reclaim order, each a victim level.
        prop_assert!(after.windows(2).all(|w| w[0].1 < w[1].1));
        prop_assert!(after.iter().all(|(_, l)| priority::victim_slot(*l).is_some()));
        let was: BTreeMap<u64, u32> = before.into_iter().collect();
        let stayed: Vec<(u64, u32, u32)> = after
            .iter()
            .filter_map(|(id, l)| was.get(id).map(|w| (*id, *w, *l)))
            .collect();
        // Their order among themselves held: none of them moved.
        if stayed.windows(2).all(|w| w[0].1 < w[1].1) {
            for (id, was, now) in &stayed {
                prop_assert_eq!(was, now, "victim {} moved", id);
            }
        }
        // Slurm's priorities are the published levels.
        for (id, l) in &after {
            prop_assert_eq!(priority::level(second.priorities[id]), *l);
        }
    }
}
