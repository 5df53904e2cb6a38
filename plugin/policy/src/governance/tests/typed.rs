//! The governor's plan with quotas per GPU type (docs/design/gpu-types.md).

use super::*;

const TYPED: &str = r#"
[cluster]
name = "t"
[gpu_types.h100]
rate_per_hour = 4
[gpu_types.a100]
rate_per_hour = 2

[[team]]
name = "agents"
quota = { h100 = 2 }
borrow_limit = BORROW

[[team]]
name = "training"
quota = { a100 = 2 }

[[team]]
name = "research"
quota = { h100 = 1, a100 = 1 }
lend = false

[governance]
min_runtime_before_reclaim = "0s"
"#;

fn typed_config(borrow: &str) -> Config {
    teamshare_config::parse(&TYPED.replace("BORROW", borrow), "t.toml").expect("valid")
}

fn typed(mut j: ClusterJob, gpu_type: &str) -> ClusterJob {
    j.gpu_type = Some(gpu_type.into());
    j
}

/// n1, n2: 2 H100 each; n3: 4 A100 (the issue's 3 nodes, 2 of one type, 1 of another).
fn typed_plan(config: &Config, jobs: &[ClusterJob], n2_drained: bool) -> Plan {
    let mut node_types = BTreeMap::from([
        ("n1".to_string(), BTreeMap::from([("h100".to_string(), 2)])),
        ("n2".to_string(), BTreeMap::from([("h100".to_string(), 2)])),
        ("n3".to_string(), BTreeMap::from([("a100".to_string(), 4)])),
    ]);
    if n2_drained {
        node_types.remove("n2");
    }
    let mut by_type: BTreeMap<String, u32> = BTreeMap::new();
    for kinds in node_types.values() {
        for (k, n) in kinds {
            *by_type.entry(k.clone()).or_insert(0) += n;
        }
    }
    let node_gpus = node_types
        .iter()
        .map(|(n, k)| (n.clone(), k.values().sum()))
        .collect();
    plan(&GovernInput {
        config,
        capacity: by_type.values().sum(),
        jobs,
        fairshare: &BTreeMap::new(),
        now: 1_000,
        now_ms: 1_000 * 1_000,
        node_gpus: &node_gpus,
        capacity_by_type: &by_type,
        node_types: &node_types,
        idle: &std::collections::BTreeSet::new(),
        shard_gpus: &crate::governance::NO_SHARD_PLACES,
    })
}

#[test]
fn typed_quotas_govern_each_type_apart() {
    let c = typed_config("4");
    // agents (quota 2 H100) runs 1 H100 and 2 A100: the H100 is in its quota, the A100s
    // are borrowed from training's idle A100 quota and the unallocated A100s.
    let jobs = vec![
        typed(running(1, "agents", 100), "h100"),
        typed(running(2, "agents", 101), "a100"),
        typed(running(3, "agents", 102), "a100"),
    ];
    let p = typed_plan(&c, &jobs, false);
    assert!(level(p.priorities[&1]) >= priority::PROTECTED_BASE);
    let victims: Vec<(u64, Option<&str>)> = p
        .state
        .victims
        .iter()
        .map(|v| (v.job_id, v.gpu_type.as_deref()))
        .collect();
    assert_eq!(victims, [(3, Some("a100")), (2, Some("a100"))]);
    let a100 = &p.state.pools["a100"];
    assert_eq!((a100.capacity, a100.free_gpus), (4, 2));
    assert_eq!(a100.teams["agents"].running_gpus, 2);
    assert_eq!(p.state.pools["h100"].teams["agents"].running_gpus, 1);
    // Per-type limits: agents keeps its 2 A100 (in use, no one waits) and its H100 quota;
    // research lends nothing, so nothing more opens to anyone.
    assert_eq!(p.type_limits["agents"]["h100"], 2);
    assert_eq!(p.type_limits["agents"]["a100"], 2);
    assert_eq!(p.gpu_limits["agents"], 4);
    assert_eq!(p.type_limits["training"]["h100"], 0);
    // Totals are the sums over types.
    assert_eq!(p.state.teams["agents"].running_gpus, 3);
    assert_eq!(p.state.capacity, 8);
}

#[test]
fn reclaim_of_one_type_prices_only_that_types_victims() {
    let c = typed_config("4");
    // agents borrows 2 A100 (its 2 H100 are its quota); research holds its A100 and
    // borrows 1 H100 beyond its 1 (n1 and n2 full). training wants its 2 A100 back; one
    // A100 is free.
    let mut jobs = vec![
        typed(running(1, "agents", 100), "a100"),
        typed(running(2, "agents", 101), "a100"),
        typed(running(3, "research", 90), "a100"),
        typed(running(4, "agents", 50), "h100"),
        typed(running(5, "agents", 51), "h100"),
        typed(running(6, "research", 52), "h100"),
        typed(running(7, "research", 103), "h100"),
    ];
    jobs.push(typed(pending(20, "training", 999), "a100"));
    jobs.push(typed(pending(21, "training", 999), "a100"));
    let p = typed_plan(&c, &jobs, false);
    // A100 victims: agents' two (research's one A100 is its quota), newest first.
    let a100: Vec<u64> = p.state.pools["a100"]
        .victims
        .iter()
        .map(|v| v.job_id)
        .collect();
    assert_eq!(a100, [2, 1]);
    // H100: research's second H100 is borrowed (on the unallocated H100: 4 - 3 quota). It
    // is a victim of the H100 pool only.
    let h100: Vec<u64> = p.state.pools["h100"]
        .victims
        .iter()
        .map(|v| v.job_id)
        .collect();
    assert_eq!(h100, [7]);
    // training's pending A100 jobs need 2 GPUs and 1 is free: they sit above the first
    // A100 victim only, and agents' H100 jobs stay protected, never candidates.
    let l = level(p.priorities[&20]);
    assert!(l > level(p.priorities[&2]) && l < level(p.priorities[&1]));
    for id in [4, 5, 6] {
        assert!(
            level(p.priorities[&id]) >= priority::PROTECTED_BASE,
            "job {id}"
        );
    }
    assert_eq!(p.state.pools["a100"].pending_in_quota_gpus, 2);
    assert_eq!(p.state.pools["h100"].pending_in_quota_gpus, 0);
}

#[test]
fn a_borrow_limit_given_as_a_number_holds_over_all_types() {
    // agents may borrow 1 GPU in all. It borrows 1 A100 already, so its pending H100 job
    // beyond its H100 quota gets nothing, though H100s are idle.
    let c = typed_config("1");
    let jobs = vec![
        typed(running(1, "agents", 100), "h100"),
        typed(running(2, "agents", 101), "h100"),
        typed(running(3, "agents", 102), "a100"),
        typed(pending(20, "agents", 999), "h100"),
    ];
    let p = typed_plan(&c, &jobs, false);
    assert_eq!(p.type_limits["agents"]["h100"], 2);
    // The same without the A100 borrowed: the H100 job may borrow 1 (its limit 2 + 1).
    let p = typed_plan(
        &c,
        &[jobs[0].clone(), jobs[1].clone(), jobs[3].clone()],
        false,
    );
    assert_eq!(p.type_limits["agents"]["h100"], 3);
    assert_eq!(p.type_limits["agents"]["a100"], 0);
    // A table: 1 A100 only, never an H100.
    let c = typed_config("{ a100 = 1 }");
    let p = typed_plan(
        &c,
        &[jobs[0].clone(), jobs[1].clone(), jobs[3].clone()],
        false,
    );
    assert_eq!(p.type_limits["agents"]["h100"], 2);
}

#[test]
fn a_drained_node_shrinks_only_its_types_capacity_and_lending() {
    let c = typed_config("4");
    // n2 drained: 2 H100 left, all agents' quota; research's H100 quota (1) is unbacked,
    // so nothing is lendable in H100 and agents' second H100 job... agents at quota 2
    // holds 2 on n1. research waits for an H100 beyond what is usable: no allowance.
    let jobs = vec![
        typed(running(1, "agents", 100), "h100"),
        typed(running(2, "agents", 101), "h100"),
        typed(pending(20, "training", 999), "h100"),
    ];
    let p = typed_plan(&c, &jobs, true);
    assert_eq!(p.state.pools["h100"].capacity, 2);
    assert_eq!(p.state.pools["a100"].capacity, 4);
    assert_eq!(p.type_limits["training"]["h100"], 0);
    // A100 untouched: training's pending A100 work would still borrow there.
    let mut more = jobs.clone();
    more.push(typed(pending(21, "agents", 999), "a100"));
    let p = typed_plan(&c, &more, true);
    assert_eq!(p.type_limits["agents"]["a100"], 1);
}

#[test]
fn untyped_jobs_in_a_typed_configuration() {
    let c = typed_config("4");
    // A running job whose request named no type is counted where it runs (n3: A100);
    // a pending one has no type to be governed against and is held.
    let mut on_n3 = running(1, "agents", 100);
    on_n3.nodes = vec!["n3".into()];
    let jobs = vec![
        on_n3,
        pending(20, "agents", 999),
        pending(21, "outsider", 999),
    ];
    let p = typed_plan(&c, &jobs, false);
    assert_eq!(p.state.pools["a100"].teams["agents"].running_gpus, 1);
    assert_eq!(p.state.pools["a100"].victims.len(), 1);
    assert_eq!(p.untyped, [20]);
    assert_eq!(p.outside, [21]);
    assert!(!p.priorities.contains_key(&20));
}

/// A typed configuration through a [`Planner`]: the same plan as [`plan`] every pass (each
/// type planned with what the others left), every priority when asked, and afterwards only
/// those that changed.
#[test]
fn a_planner_plans_a_typed_configuration_as_plan_does() {
    let c = typed_config("4");
    let mut jobs = vec![
        typed(running(1, "agents", 100), "a100"),
        typed(running(2, "agents", 101), "a100"),
        typed(running(3, "research", 90), "a100"),
        typed(running(4, "agents", 50), "h100"),
        typed(pending(20, "training", 999), "a100"),
        typed(pending(21, "training", 999), "a100"),
        typed(pending(22, "agents", 900), "h100"),
    ];
    let node_types = BTreeMap::from([
        ("n1".to_string(), BTreeMap::from([("h100".to_string(), 2)])),
        ("n2".to_string(), BTreeMap::from([("h100".to_string(), 2)])),
        ("n3".to_string(), BTreeMap::from([("a100".to_string(), 4)])),
    ]);
    let by_type = BTreeMap::from([("h100".to_string(), 4), ("a100".to_string(), 4)]);
    let node_gpus = BTreeMap::from([
        ("n1".to_string(), 2),
        ("n2".to_string(), 2),
        ("n3".to_string(), 4),
    ]);
    let mut planner = Planner::new(&c);
    planner.set_nodes(&node_gpus);
    planner.set_types(&by_type, &node_types);
    for j in &jobs {
        planner.insert(j.clone());
    }
    let fairshare = BTreeMap::new();
    let pass = |planner: &mut Planner<'_>, all: bool| {
        planner.plan(&PassInput {
            capacity: 8,
            fairshare: &fairshare,
            now: 1_000,
            now_ms: 1_000 * 1_000,
            publish: true,
            all_priorities: all,
        })
    };
    let first = pass(&mut planner, true);
    let full = typed_plan(&c, &jobs, false);
    assert_eq!(
        first.changed,
        full.priorities.clone().into_iter().collect::<Vec<_>>(),
        "the first pass changes every priority"
    );
    assert_eq!(
        Plan {
            changed: Vec::new(),
            ..first
        },
        full
    );
    assert!(!full.type_limits.is_empty() && !full.in_quota.is_empty());
    assert_eq!(full.in_quota, [20, 21, 22]);
    // Nothing changed: no priority to write, the same limits and state.
    let again = pass(&mut planner, false);
    assert!(again.priorities.is_empty() && again.changed.is_empty());
    assert_eq!(again.type_limits, full.type_limits);
    assert_eq!(again.state, full.state);
    assert_eq!(pass(&mut planner, true).priorities, full.priorities);
    // Training's A100s start: only the priorities that moved come back.
    for id in [20, 21] {
        planner.update(id, |j| {
            j.phase = Phase::Running;
            j.start = Some(1_000);
            j.nodes = vec!["n3".into()];
        });
        let j = jobs.iter_mut().find(|j| j.id == id).expect("listed");
        j.phase = Phase::Running;
        j.start = Some(1_000);
        j.nodes = vec!["n3".into()];
    }
    let moved = pass(&mut planner, false);
    let full = typed_plan(&c, &jobs, false);
    assert!(!moved.changed.is_empty());
    for (id, p) in &moved.changed {
        assert_eq!(full.priorities.get(id), Some(p), "job {id}");
    }
    for (id, p) in &full.priorities {
        assert_eq!(planner.priority(*id), Some(*p), "job {id}");
    }
    assert_eq!(moved.type_limits, full.type_limits);
}
