//! The governor's plan over small hand-made clusters, rule by rule (DESIGN §4).

use std::collections::{BTreeMap, BTreeSet};

use super::*;
use crate::priority::{class_index as class_of_priority, encode, level, VICTIM_BASE};

const CONFIG: &str = r#"
[cluster]
name = "t"
idle_sharing = "fair-share"

[[team]]
name = "agents"
quota = 2
borrow_limit = 2
weight = 40

[[team]]
name = "training"
quota = 4
borrow_limit = 4
weight = 40

[[team]]
name = "research"
quota = 2
borrow_limit = 6
weight = 20

[[priority_class]]
name = "inference"
value = 100
preemptible = false

[[priority_class]]
name = "experiment"
value = 10

[governance]
min_runtime_before_reclaim = "0s"
"#;

fn config(extra: &str) -> Config {
    let text = CONFIG.replace("idle_sharing = \"fair-share\"", extra);
    teamshare_config::parse(&text, "t.toml").expect("valid")
}

/// [`config`] with a team `reserve` (quota 1) that lends nothing, and one GPU more for it
/// ([`plan_for`]: the capacity is the quotas' sum): an idle GPU nobody may borrow.
fn counted(extra: &str) -> Config {
    let text = CONFIG
        .replace("idle_sharing = \"fair-share\"", extra)
        .replacen(
            "[[priority_class]]",
            "[[team]]\nname = \"reserve\"\nquota = 1\nlend = false\n\n[[priority_class]]",
            1,
        );
    teamshare_config::parse(&text, "t.toml").expect("valid")
}

fn running(id: u64, team: &str, start: i64) -> ClusterJob {
    ClusterJob {
        id,
        gpu_type: None,
        team: team.into(),
        phase: Phase::Running,
        gpus: 1,
        priority: 1,
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

fn pending(id: u64, team: &str, submit: i64) -> ClusterJob {
    ClusterJob {
        id,
        gpu_type: None,
        team: team.into(),
        phase: Phase::Pending,
        gpus: 1,
        priority: encode(priority::BORROW_BASE, 0),
        submit,
        start: None,
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

fn plan_for(config: &Config, jobs: &[ClusterJob], fs: &[(&str, f64)]) -> Plan {
    let fairshare = fs.iter().map(|(t, f)| (t.to_string(), *f)).collect();
    plan(&GovernInput {
        config,
        capacity: config.teams.iter().map(|t| t.quota.total).sum(),
        jobs,
        fairshare: &fairshare,
        now: 1_000,
        now_ms: 1_000 * 1_000,
        node_gpus: &BTreeMap::new(),
        capacity_by_type: &BTreeMap::new(),
        node_types: &BTreeMap::new(),
        idle: &std::collections::BTreeSet::new(),
        shard_gpus: &crate::governance::NO_SHARD_PLACES,
    })
}

#[test]
fn borrowed_jobs_are_victims_and_in_quota_jobs_are_protected() {
    let c = config("");
    let jobs: Vec<_> = (1..=8)
        .map(|i| running(i, "training", 100 + i as i64))
        .collect();
    let p = plan_for(&c, &jobs, &[]);
    // The 4 oldest are inside the quota; the 4 newest are borrowed, newest first to go.
    for id in 1..=4 {
        assert!(
            level(p.priorities[&id]) >= priority::PROTECTED_BASE,
            "job {id}"
        );
    }
    let order: Vec<u64> = p.state.victims.iter().map(|v| v.job_id).collect();
    assert_eq!(order, [8, 7, 6, 5]);
    assert!(p.priorities[&8] < p.priorities[&7]);
    // Everyone else lends: training may hold 8 (its quota 4 + 2 + 2 lent).
    assert_eq!(p.gpu_limits["training"], 8);
}

#[test]
fn pending_in_quota_jobs_sit_just_above_the_victims_they_need() {
    let c = config("");
    let mut jobs: Vec<_> = (1..=8)
        .map(|i| running(i, "training", 100 + i as i64))
        .collect();
    jobs.push(pending(20, "agents", 999));
    jobs.push(pending(21, "agents", 999));
    let p = plan_for(&c, &jobs, &[]);
    let l = level(p.priorities[&20]);
    assert_eq!(l, level(p.priorities[&21]));
    // Above victims 8 and 7, below 6 and 5: Slurm may preempt those two only.
    assert!(l > level(p.priorities[&7]) && l < level(p.priorities[&6]));
    assert_eq!(p.state.pending_in_quota_gpus, 2);
}

#[test]
fn an_array_record_is_the_demand_of_its_tasks() {
    let c = config("");
    // training holds the cluster (4 borrowed); agents' pending array of 6 one-GPU tasks
    // is one record: two tasks fit its quota, so the record ranks in quota, above the two
    // victims those tasks need, not one.
    let mut jobs: Vec<_> = (1..=8)
        .map(|i| running(i, "training", 100 + i as i64))
        .collect();
    jobs.push(ClusterJob {
        tasks: 6,
        ..pending(20, "agents", 999)
    });
    let p = plan_for(&c, &jobs, &[]);
    assert_eq!(p.state.pending_in_quota_gpus, 2);
    let l = level(p.priorities[&20]);
    assert!(l > level(p.priorities[&7]) && l < level(p.priorities[&6]));
    assert_eq!(p.priorities.len(), 9, "one priority per record");
    // The same tasks as separate jobs give the same answer.
    let mut singles: Vec<_> = jobs[..8].to_vec();
    singles.extend((20..26).map(|i| pending(i, "agents", 999)));
    let q = plan_for(&c, &singles, &[]);
    assert_eq!(q.state.pending_in_quota_gpus, 2);
    assert_eq!(level(q.priorities[&20]), l);
    assert_eq!(p.gpu_limits, q.gpu_limits);
}

#[test]
fn an_array_borrows_for_every_task_and_a_huge_one_costs_no_more_than_the_cluster() {
    let c = config("");
    // research (quota 2, borrow limit 6) alone: a 5-task array borrows 3 beyond quota,
    // like 5 jobs would; a 10^9-task array is capped at the cluster's size.
    let five = vec![ClusterJob {
        tasks: 5,
        ..pending(30, "research", 900)
    }];
    assert_eq!(plan_for(&c, &five, &[]).gpu_limits["research"], 5);
    let huge = vec![ClusterJob {
        tasks: 1_000_000_000,
        ..pending(31, "research", 900)
    }];
    assert_eq!(plan_for(&c, &huge, &[]).gpu_limits["research"], 8);
}

/// An array whose first task straddles its team's quota: only that task asks for no more
/// than its GPUs beyond the quota; the others ask for all of theirs, as separate jobs would
/// (before, every task of the record was taken for the straddling one, and the team's limit
/// let fewer of them start than the idle GPUs allowed).
#[test]
fn only_the_straddling_task_of_an_array_asks_for_less_than_its_gpus() {
    let c = config("");
    // agents (quota 2, borrow limit 2) alone on 8 GPUs: three 3-GPU tasks. The first uses
    // the quota and borrows 1, the second borrows 3 > what is left of the borrow limit (1).
    let array = vec![ClusterJob {
        tasks: 3,
        gpus: 3,
        ..pending(50, "agents", 900)
    }];
    let singles: Vec<_> = (50..53)
        .map(|i| ClusterJob {
            gpus: 3,
            ..pending(i, "agents", 900)
        })
        .collect();
    let p = plan_for(&c, &array, &[]);
    assert_eq!(
        p.gpu_limits["agents"], 3,
        "the first task only: {:?}",
        p.gpu_limits
    );
    assert_eq!(p.gpu_limits, plan_for(&c, &singles, &[]).gpu_limits);
    // research (quota 2, borrow limit 6): 2-GPU tasks; each after the first borrows 2.
    let array = vec![ClusterJob {
        tasks: 4,
        gpus: 2,
        ..pending(60, "research", 900)
    }];
    assert_eq!(plan_for(&c, &array, &[]).gpu_limits["research"], 8);
}

#[test]
fn a_non_preemptible_array_is_parked_only_when_none_of_its_tasks_fits() {
    let c = config("");
    let inference = |id, tasks, submit| ClusterJob {
        tasks,
        priority: encode(priority::BORROW_BASE, 1),
        ..pending(id, "agents", submit)
    };
    // Quota 2: a 3-task array has tasks that fit; its record is not parked.
    let p = plan_for(&c, &[inference(40, 3, 900)], &[]);
    assert!(p.park.is_empty(), "{:?}", p.park);
    // With agents' quota held by two running jobs of the same class (nothing to displace),
    // none fits: parked, once.
    let held = |id, start| ClusterJob {
        priority: encode(priority::protected_level(0), 1),
        ..running(id, "agents", start)
    };
    let jobs = vec![held(1, 100), held(2, 101), inference(41, 3, 900)];
    assert_eq!(plan_for(&c, &jobs, &[]).park, [41]);
}

#[test]
fn in_quota_jobs_still_waiting_get_their_victims_requeued_directly() {
    let c = config("");
    let mut jobs: Vec<_> = (1..=8)
        .map(|i| running(i, "training", 100 + i as i64))
        .collect();
    jobs.push(pending(20, "agents", WAITED_AT_1000));
    // Submitted in second 999: 0 to 1 s ago at now = 1,000, not past the delay for
    // certain (a whole-second difference of 1 is not).
    jobs.push(pending(21, "agents", 999));
    let p = plan_for(&c, &jobs, &[]);
    // Only the job waiting past the fallback delay, only one victim, the first in order.
    assert_eq!(p.reclaim, [8]);
    assert!(p.displace.is_empty());
}

/// The latest submit second whose wait is past [`RECLAIM_FALLBACK_MS`] for certain at
/// now = 1,000 s.
const WAITED_AT_1000: i64 = 998;

#[test]
fn the_fallback_wait_is_counted_in_milliseconds_from_the_end_of_the_submit_second() {
    // Submitted in second 999 (at 999.0 to 999.999): the wait is certainly 1 s at
    // 1,001.000, not before, whatever the whole-second difference says.
    assert_eq!(reclaim_fallback_due_ms(999), 1_001_000);
    assert!(!waited_for_fallback(1_000_000, 999));
    assert!(!waited_for_fallback(1_000_999, 999));
    assert!(waited_for_fallback(1_001_000, 999));
    assert!(waited_for_fallback(1_000_000, WAITED_AT_1000));
    assert!(!waited_for_fallback(i64::MIN, i64::MAX));
}

#[test]
fn jobs_that_started_borrowed_are_protected_once_inside_the_quota() {
    let c = config("");
    // training's 4 long jobs started while borrowing; its short ones are gone.
    let mut jobs: Vec<_> = (5..=8)
        .map(|i| running(i, "training", 100 + i as i64))
        .collect();
    jobs.extend((10..=13).map(|i| running(i, "agents", 200 + i as i64)));
    let p = plan_for(&c, &jobs, &[]);
    for id in 5..=8 {
        assert!(level(p.priorities[&id]) >= priority::PROTECTED_BASE);
    }
    let victims: Vec<u64> = p.state.victims.iter().map(|v| v.job_id).collect();
    assert_eq!(victims, [13, 12]);
}

/// Issue 25, finding 6: agents' borrow limit went from 2 to 0 while it ran 3 (quota 2):
/// nothing brought it back under its new ceiling. Rule 1 holds at all times: its borrowed
/// job beyond the ceiling is requeued (the most recently started of them), no more.
#[test]
fn issue25_6_a_lowered_borrow_limit_is_enforced_on_what_runs() {
    let jobs: Vec<_> = (1..=3)
        .map(|i| running(i, "agents", 100 + i as i64))
        .collect();
    let p = plan_for(&config(""), &jobs, &[]);
    assert!(p.over_ceiling.is_empty(), "{:?}", p.over_ceiling);
    let lowered = teamshare_config::parse(
        &CONFIG.replacen(
            "quota = 2\nborrow_limit = 2",
            "quota = 2\nborrow_limit = 0",
            1,
        ),
        "t.toml",
    )
    .unwrap();
    let p = plan_for(&lowered, &jobs, &[]);
    assert_eq!(p.over_ceiling, [3]);
    assert_eq!(p.gpu_limits["agents"], 2);
    // Two GPUs beyond, in one job and two: as many as needed.
    let mut jobs: Vec<_> = (1..=4)
        .map(|i| running(i, "agents", 100 + i as i64))
        .collect();
    let p = plan_for(&lowered, &jobs, &[]);
    assert_eq!(p.over_ceiling, [4, 3]);
    jobs.truncate(2);
    let mut wide = running(5, "agents", 110);
    wide.gpus = 2;
    jobs.push(wide);
    let p = plan_for(&lowered, &jobs, &[]);
    assert_eq!(p.over_ceiling, [5]);
}

#[test]
fn lend_limit_bounds_what_others_may_borrow() {
    let text = CONFIG.replace(
        "quota = 2\nborrow_limit = 6",
        "quota = 2\nborrow_limit = 6\nlend = false",
    );
    let c = teamshare_config::parse(&text, "t.toml").unwrap();
    let mut jobs: Vec<_> = (1..=4)
        .map(|i| running(i, "training", 100 + i as i64))
        .collect();
    jobs.extend((5..=8).map(|i| pending(i, "training", 200 + i as i64)));
    let p = plan_for(&c, &jobs, &[]);
    // 4 own + agents' idle 2; research lends nothing.
    assert_eq!(p.gpu_limits["training"], 6);
}

#[test]
fn idle_capacity_goes_to_the_better_fair_share_factor_or_the_older_job() {
    let mut jobs: Vec<_> = (1..=4).map(|i| running(i, "training", 100)).collect();
    jobs.extend((5..=6).map(|i| running(i, "agents", 100)));
    jobs.extend((7..=8).map(|i| running(i, "research", 100)));
    // Both agents and research wait to borrow; one GPU frees up (job 1 ends).
    jobs.retain(|j| j.id != 1);
    jobs.push(pending(30, "agents", 300));
    jobs.push(pending(31, "research", 200));
    let c = config("");
    let p = plan_for(&c, &jobs, &[("agents", 0.9), ("research", 0.2)]);
    assert_eq!((p.gpu_limits["agents"], p.gpu_limits["research"]), (3, 2));
    assert!(p.priorities[&30] > p.priorities[&31]);
    // The one lent to ranks above every other borrower.
    assert_eq!(level(p.priorities[&30]), priority::GRANTED_LEVEL);
    let c = config("idle_sharing = \"fifo\"");
    let p = plan_for(&c, &jobs, &[("agents", 0.9), ("research", 0.2)]);
    assert_eq!((p.gpu_limits["agents"], p.gpu_limits["research"]), (2, 3));
    // The older submission (31) gets the GPU, and ranks first.
    assert_eq!(level(p.priorities[&31]), priority::GRANTED_LEVEL);
    assert!(level(p.priorities[&30]) < priority::GRANTED_LEVEL);
}

#[test]
fn a_long_queue_keeps_its_priorities_while_its_front_moves() {
    // training and agents at quota, 500 waiting borrowers of both.
    let c = config("");
    let mut jobs: Vec<_> = (1..=4).map(|i| running(i, "training", 100)).collect();
    jobs.extend((5..=6).map(|i| running(i, "agents", 100)));
    jobs.extend((100..600).map(|i| {
        let team = if i % 2 == 0 { "training" } else { "agents" };
        pending(i, team, 200 + i as i64)
    }));
    let fs = [("agents", 0.5), ("training", 0.4)];
    let before = plan_for(&c, &jobs, &fs).priorities;
    // The front of each team's queue starts; new jobs arrive at the back.
    for j in jobs.iter_mut().filter(|j| j.id == 100 || j.id == 101) {
        j.phase = Phase::Running;
        j.start = Some(1_000);
    }
    jobs.push(pending(600, "training", 900));
    let after = plan_for(&c, &jobs, &fs).priorities;
    // Only a borrower lent to (ranked above the bands) changes.
    let granted = |p: &u32| level(*p) == priority::GRANTED_LEVEL;
    let moved = (102..600)
        .filter(|id| before[id] != after[id] && !granted(&before[id]) && !granted(&after[id]))
        .count();
    assert_eq!(moved, 0, "waiting jobs re-ranked when the front moved");
    // Two bands (one per team), agents first (the better factor).
    let distinct: BTreeSet<u32> = (102..600)
        .map(|id| after[&id])
        .filter(|p| !granted(p))
        .collect();
    assert_eq!(distinct.len(), 2);
    assert!(after[&103] > after[&102]);
    assert_eq!(after[&600], after[&102]);
}

#[test]
fn a_higher_class_at_quota_displaces_its_own_team_only() {
    let c = config("");
    let experiment = |mut j: ClusterJob| {
        j.priority = encode(priority::protected_level(10), 2);
        j
    };
    let mut jobs = vec![
        experiment(running(1, "agents", 100)),
        experiment(running(2, "agents", 101)),
    ];
    jobs.extend((3..=6).map(|i| running(i, "training", 100)));
    let mut inference = pending(9, "agents", 300);
    inference.priority = encode(priority::BORROW_BASE, 1);
    jobs.push(inference);
    let p = plan_for(&c, &jobs, &[]);
    assert_eq!(p.displace, [2]);
    // The displacing job preempts nobody by itself, and keeps its class.
    assert!(level(p.priorities[&9]) < VICTIM_BASE);
    assert_eq!(class_of_priority(p.priorities[&9]), 1);
}

#[test]
fn a_higher_class_borrows_rather_than_displace_when_it_can() {
    let c = config("");
    // agents holds its quota (2) with jobs of no class; training its 4; research's 2 GPUs
    // are idle and lendable. An experiment job of agents could displace one of its own
    // jobs, but it can start on research's idle quota instead: nobody loses work.
    let mut jobs = vec![running(1, "agents", 100), running(2, "agents", 101)];
    jobs.extend((3..=6).map(|i| running(i, "training", 100)));
    let mut experiment = pending(9, "agents", 300);
    experiment.priority = encode(priority::BORROW_BASE, 2);
    jobs.push(experiment);
    let p = plan_for(&c, &jobs, &[]);
    assert!(p.displace.is_empty());
    assert_eq!(p.gpu_limits["agents"], 3);
    assert_eq!(class_of_priority(p.priorities[&9]), 2);
    // With research running its quota nothing is idle: it displaces agents' youngest.
    jobs.extend((7..=8).map(|i| running(i, "research", 100)));
    let p = plan_for(&c, &jobs, &[]);
    assert_eq!(p.displace, [2]);
}

#[test]
fn a_higher_class_displaces_only_where_it_then_fits() {
    let c = config("");
    // Two 4-GPU nodes, full. training (quota 4) holds its quota: 1 and 3 of no class
    // (value 0), 2 and 4 of class experiment (10); agents and research one GPU each per
    // node.
    let on = |mut j: ClusterJob, node: &str, class: u8| {
        j.nodes = vec![node.to_string()];
        j.priority = encode(priority::protected_level(0), class);
        j
    };
    let mut jobs = vec![
        on(running(1, "training", 100), "n1", 0),
        on(running(2, "training", 103), "n1", 2),
        on(running(3, "training", 101), "n2", 0),
        on(running(4, "training", 104), "n2", 2),
        on(running(5, "agents", 100), "n1", 0),
        on(running(6, "agents", 100), "n2", 0),
        on(running(7, "research", 100), "n1", 0),
        on(running(8, "research", 100), "n2", 0),
    ];
    let mut inference = pending(9, "training", 300);
    inference.priority = encode(priority::BORROW_BASE, 1);
    inference.gpus = 2;
    jobs.push(inference);
    let nodes: BTreeMap<String, u32> = [("n1".to_string(), 4), ("n2".to_string(), 4)].into();
    let fairshare = BTreeMap::new();
    let plan_on = |jobs: &[ClusterJob], nodes: &BTreeMap<String, u32>| {
        plan(&GovernInput {
            config: &c,
            capacity: 8,
            jobs,
            fairshare: &fairshare,
            now: 1_000,
            now_ms: 1_000 * 1_000,
            node_gpus: nodes,
            capacity_by_type: &BTreeMap::new(),
            node_types: &BTreeMap::new(),
            idle: &std::collections::BTreeSet::new(),
            shard_gpus: &crate::governance::NO_SHARD_PLACES,
        })
    };
    // Displacement order: 3 (class 0, youngest), 1, 4, 2. The first two sit on two nodes
    // and would free one GPU on each; on n2, 3 and 4 free two together (on n1 it would
    // take 1 and 2, the fourth in order).
    let mut p = plan_on(&jobs, &nodes);
    p.displace.sort_unstable();
    assert_eq!(p.displace, [3, 4]);
    assert!(level(p.priorities[&9]) < VICTIM_BASE);
    // Without the nodes' figures, the order alone (the GPUs may land anywhere).
    let mut p = plan_on(&jobs, &BTreeMap::new());
    p.displace.sort_unstable();
    assert_eq!(p.displace, [1, 3]);
    // Four GPUs: no node can give them (each keeps two other teams' jobs). Nobody is
    // requeued for a job that would still not start.
    jobs.last_mut().unwrap().gpus = 4;
    assert!(plan_on(&jobs, &nodes).displace.is_empty());
    // Over two nodes, two GPUs on each: training's four jobs make that room.
    jobs.last_mut().unwrap().node_count = 2;
    let mut p = plan_on(&jobs, &nodes);
    p.displace.sort_unstable();
    assert_eq!(p.displace, [1, 2, 3, 4]);
    // Eight GPUs, more than a node has, on one node as squeue shows a pending job: it
    // needs two whole nodes, which training cannot free.
    jobs.last_mut().unwrap().node_count = 1;
    jobs.last_mut().unwrap().gpus = 8;
    assert!(plan_on(&jobs, &nodes).displace.is_empty());
    jobs.last_mut().unwrap().gpus = 4;
    // Two free GPUs on n1 (agents' and research's jobs there ended): only the quota
    // holds it, so the first in order go, wherever they run.
    jobs.retain(|j| j.id != 5 && j.id != 7);
    jobs.last_mut().unwrap().gpus = 2;
    let mut p = plan_on(&jobs, &nodes);
    p.displace.sort_unstable();
    assert_eq!(p.displace, [1, 3]);
}

#[test]
fn a_job_that_cannot_displace_takes_no_node_room_from_one_that_can() {
    // Team a (quota 3, no borrowing) holds its quota: experiment jobs 1 on n1 and 3 on n3,
    // a standard job 2 on n1. Team b runs one GPU on n3 and one on n2, which has 3 free.
    let c = teamshare_config::parse(
        r#"
[cluster]
name = "t"
[[team]]
name = "a"
quota = 3
borrow_limit = 0
[[team]]
name = "b"
quota = 5
[[priority_class]]
name = "standard"
value = 50
[[priority_class]]
name = "experiment"
value = 10
[governance]
min_runtime_before_reclaim = "0s"
"#,
        "t.toml",
    )
    .expect("valid");
    let on = |mut j: ClusterJob, node: &str, class: u8| {
        j.nodes = vec![node.to_string()];
        j.priority = encode(priority::protected_level(0), class);
        j
    };
    let mut jobs = vec![
        on(running(1, "a", 100), "n1", 2),
        on(running(2, "a", 101), "n1", 1),
        on(running(3, "a", 102), "n3", 2),
        on(running(4, "b", 100), "n3", 0),
        on(running(5, "b", 100), "n2", 0),
    ];
    // Two standard jobs of a: 6 asks for 3 GPUs, which its two experiment jobs (2 GPUs)
    // cannot make room for in its quota; 7 asks for 2, which they can, and n2 has them.
    for (id, gpus, submit) in [(6, 3, 300), (7, 2, 301)] {
        let mut j = pending(id, "a", submit);
        j.priority = encode(priority::BORROW_BASE, 1);
        j.gpus = gpus;
        jobs.push(j);
    }
    let nodes: BTreeMap<String, u32> = [("n1", 2), ("n2", 4), ("n3", 2)]
        .into_iter()
        .map(|(n, g)| (n.to_string(), g))
        .collect();
    let p = plan(&GovernInput {
        config: &c,
        capacity: 8,
        jobs: &jobs,
        fairshare: &BTreeMap::new(),
        now: 1_000,
        now_ms: 1_000 * 1_000,
        node_gpus: &nodes,
        capacity_by_type: &BTreeMap::new(),
        node_types: &BTreeMap::new(),
        idle: &std::collections::BTreeSet::new(),
        shard_gpus: &crate::governance::NO_SHARD_PLACES,
    });
    // 6 is not placed on n2 for nothing: 7 displaces the experiment jobs and runs there.
    let mut displaced = p.displace.clone();
    displaced.sort_unstable();
    assert_eq!(displaced, [1, 3]);
    assert_eq!(level(p.priorities[&7]), priority::reclaim_level(0));
    assert!(level(p.priorities[&6]) < VICTIM_BASE - 1);
}

#[test]
fn non_preemptible_jobs_are_never_victims_and_never_borrow() {
    let c = config("");
    let mut jobs: Vec<_> = (1..=3)
        .map(|i| {
            let mut j = running(i, "agents", 100 + i as i64);
            j.priority = encode(priority::protected_level(100), 1);
            j
        })
        .collect();
    let mut waiting = pending(9, "agents", 300);
    waiting.priority = encode(priority::BORROW_BASE, 1);
    jobs.push(waiting);
    let p = plan_for(&c, &jobs, &[]);
    assert!(p.state.victims.is_empty());
    // No allowance for the waiting inference job: agents stays at what it holds, and the
    // job is parked so no allowance given for other jobs can start it.
    assert_eq!(p.gpu_limits["agents"], 3);
    assert_eq!(p.park, [9]);
    // Once it fits (two inference jobs end), it is released.
    let mut jobs: Vec<_> = jobs.into_iter().filter(|j| j.id > 2).collect();
    jobs.iter_mut().find(|j| j.id == 9).unwrap().parked = true;
    let p = plan_for(&c, &jobs, &[]);
    assert_eq!((p.park.len(), p.release.clone()), (0, vec![9]));
}

#[test]
fn parking_holds_until_the_job_fits_whatever_its_owner_did() {
    let c = config("");
    let mut jobs: Vec<_> = (1..=3)
        .map(|i| {
            let mut j = running(i, "agents", 100 + i as i64);
            j.priority = encode(priority::protected_level(100), 1);
            j
        })
        .collect();
    // Parked by the plugin at submit, then moved to now by its owner: held all the same.
    let mut waiting = pending(9, "agents", 300);
    waiting.priority = encode(priority::BORROW_BASE, 1);
    jobs.push(waiting.clone());
    assert_eq!(plan_for(&c, &jobs, &[]).park, [9]);
    // Held (priority 0 with teamshare's mark): not parked again, counted as waiting for
    // agents' quota, never given an allowance.
    let held = ClusterJob {
        priority: 0,
        park_held: true,
        parked: true,
        eligible: false,
        ..waiting.clone()
    };
    jobs.pop();
    jobs.push(held.clone());
    let p = plan_for(&c, &jobs, &[]);
    assert!(p.park.is_empty() && p.release.is_empty());
    assert_eq!(p.gpu_limits["agents"], 3);
    // A job someone else holds (its owner, or an administrator without the mark) is left
    // alone: neither parked nor released.
    let other_hold = ClusterJob {
        park_held: false,
        ..held.clone()
    };
    let fits: Vec<_> = jobs
        .iter()
        .filter(|j| j.id > 2 && j.id != 9)
        .cloned()
        .chain([other_hold])
        .collect();
    let p = plan_for(&c, &fits, &[]);
    assert!(p.park.is_empty() && p.release.is_empty());
    // Once it fits, the governor releases its own hold.
    let fits: Vec<_> = jobs.into_iter().filter(|j| j.id > 2).collect();
    let p = plan_for(&c, &fits, &[]);
    assert_eq!(p.release, [9]);
    assert_eq!(p.state.teams["agents"].pending_in_quota_gpus, 1);
}

#[test]
fn quotas_beyond_a_shrunken_capacity_leave_nothing_to_lend() {
    let c = config("");
    let jobs: Vec<_> = (1..=4)
        .map(|i| running(i, "training", 100))
        .chain((5..=6).map(|i| pending(i, "training", 200)))
        .collect();
    let fairshare = BTreeMap::new();
    let p = plan(&GovernInput {
        config: &c,
        capacity: 4,
        jobs: &jobs,
        fairshare: &fairshare,
        now: 1_000,
        now_ms: 1_000 * 1_000,
        node_gpus: &BTreeMap::new(),
        capacity_by_type: &BTreeMap::new(),
        node_types: &BTreeMap::new(),
        idle: &std::collections::BTreeSet::new(),
        shard_gpus: &crate::governance::NO_SHARD_PLACES,
    });
    assert_eq!(p.gpu_limits["training"], 4);
}

#[test]
fn a_team_never_borrows_its_own_idle_quota() {
    // research lends nothing; training's 8 jobs all wait (none started yet): 4 fit its
    // quota, and only agents' idle 2 may be borrowed.
    let text = CONFIG.replace(
        "quota = 2\nborrow_limit = 6",
        "quota = 2\nborrow_limit = 6\nlend = false",
    );
    let c = teamshare_config::parse(&text, "t.toml").unwrap();
    let jobs: Vec<_> = (1..=8)
        .map(|i| pending(i, "training", 200 + i as i64))
        .collect();
    let p = plan_for(&c, &jobs, &[]);
    assert_eq!(p.gpu_limits["training"], 6);
}

#[test]
fn finding5_a_job_that_cannot_start_neither_displaces_nor_reserves_quota() {
    let c = config("");
    let experiment = |mut j: ClusterJob| {
        j.priority = encode(priority::protected_level(10), 3);
        j
    };
    let mut jobs = vec![
        experiment(running(1, "agents", 100)),
        experiment(running(2, "agents", 101)),
    ];
    // A higher class waiting for its begin time (or a dependency): not startable.
    let mut later = pending(9, "agents", 300);
    later.priority = encode(priority::BORROW_BASE, 2);
    later.eligible = false;
    jobs.push(later);
    // research's in-quota job that waits for a dependency keeps nothing back.
    let mut dep = pending(10, "research", 300);
    dep.eligible = false;
    jobs.push(dep);
    jobs.extend((11..=14).map(|i| pending(i, "training", 400 + i as i64)));
    jobs.extend((15..=20).map(|i| pending(i, "training", 400 + i as i64)));
    let p = plan_for(&c, &jobs, &[]);
    assert!(p.displace.is_empty(), "displaced {:?}", p.displace);
    assert_eq!(p.state.teams["research"].pending_in_quota_gpus, 0);
    assert_eq!(p.state.pending_in_quota_gpus, 4);
    // research's idle 2 are lent: training may hold 4 + 2.
    assert_eq!(p.gpu_limits["training"], 6);
    assert!(level(p.priorities[&9]) < VICTIM_BASE);
}

#[test]
fn finding9_a_job_larger_than_the_borrow_headroom_borrows_only_its_part_beyond_quota() {
    let c = config("");
    // Idle cluster; agents (quota 2, borrow limit 2) asks for 3 at once.
    let mut three = pending(1, "agents", 100);
    three.gpus = 3;
    let p = plan_for(&c, &[three.clone()], &[]);
    assert_eq!(p.gpu_limits["agents"], 3);
    // 5 can never fit (4 at most), and gets nothing beyond the ceiling.
    three.gpus = 5;
    let p = plan_for(&c, &[three], &[]);
    assert!(p.gpu_limits["agents"] <= 4);
}

#[test]
fn finding4_a_non_preemptible_job_running_beyond_quota_is_a_violation() {
    let c = config("");
    let jobs: Vec<_> = (1..=3)
        .map(|i| {
            let mut j = running(i, "agents", 100 + i as i64);
            j.priority = encode(priority::protected_level(100), 1);
            j
        })
        .collect();
    let p = plan_for(&c, &jobs, &[]);
    // agents' quota is 2: the youngest inference job runs beyond it.
    assert_eq!(p.violations, [3]);
    assert!(p.state.victims.is_empty());
    // A preemptible job of the team is the one beyond quota when it is younger.
    let mut jobs = jobs[..2].to_vec();
    jobs.insert(0, running(4, "agents", 50));
    let p = plan_for(&c, &jobs, &[]);
    assert!(p.violations.is_empty());
    let victims: Vec<u64> = p.state.victims.iter().map(|v| v.job_id).collect();
    assert_eq!(victims, [4]);
}

#[test]
fn finding3_gpus_outside_every_team_are_listed_to_hold() {
    let c = config("");
    let mut outsider = running(1, "physics", 100);
    outsider.gpus = 8;
    let mut cpu_only = pending(2, "physics", 100);
    cpu_only.gpus = 0;
    let mut held = pending(3, "physics", 100);
    held.priority = 0;
    let p = plan_for(
        &c,
        &[outsider, cpu_only, held, pending(4, "physics", 100)],
        &[],
    );
    assert_eq!(p.outside, [1, 4]);
    assert!(!p.priorities.contains_key(&1));
}

#[test]
fn where_limits_are_counted_a_borrower_that_fits_no_node_gets_nothing() {
    // Counted limits (reserve keeps its GPU on n3). n1: agents 2, training 1; n2:
    // training 3; research's quota (2) is idle and lent, one GPU free on each of n1 and
    // n2. training's 2-GPU borrower (training first by fair-share) fits neither node: it
    // gets nothing, and agents' one-GPU borrower gets one.
    let c = counted("");
    let on = |id, team: &str, node: &str| ClusterJob {
        nodes: vec![node.to_string()],
        ..running(id, team, 100 + id as i64)
    };
    let mut jobs = vec![
        on(1, "agents", "n1"),
        on(2, "agents", "n1"),
        on(3, "training", "n1"),
        on(4, "training", "n2"),
        on(5, "training", "n2"),
        on(6, "training", "n2"),
    ];
    let mut wide = pending(10, "training", 500);
    wide.gpus = 2;
    jobs.push(wide);
    jobs.push(pending(11, "agents", 600));
    let nodes: BTreeMap<String, u32> = [("n1", 4), ("n2", 4), ("n3", 1)]
        .iter()
        .map(|(n, g)| (n.to_string(), *g))
        .collect();
    let fairshare: BTreeMap<String, f64> =
        [("training".to_string(), 0.9), ("agents".to_string(), 0.5)].into();
    let input = |nodes: &BTreeMap<String, u32>| {
        plan(&GovernInput {
            config: &c,
            capacity: 9,
            jobs: &jobs,
            fairshare: &fairshare,
            now: 1_000,
            now_ms: 1_000 * 1_000,
            node_gpus: nodes,
            capacity_by_type: &BTreeMap::new(),
            node_types: &BTreeMap::new(),
            idle: &std::collections::BTreeSet::new(),
            shard_gpus: &crate::governance::NO_SHARD_PLACES,
        })
    };
    let p = input(&nodes);
    assert_eq!((p.gpu_limits["training"], p.gpu_limits["agents"]), (4, 3));
    // Counted without placement, the wide job takes both lendable GPUs.
    let p = input(&BTreeMap::new());
    assert_eq!((p.gpu_limits["training"], p.gpu_limits["agents"]), (6, 2));
}

#[test]
fn a_straddling_job_that_cannot_borrow_holds_back_no_idle_quota() {
    // Counted limits. training runs 2 of its quota 4; its 3-GPU job would use its 2 idle
    // GPUs and borrow 1, but nothing else is idle to lend: it gets nothing, and its idle
    // quota is lent to agents' borrower instead of held back for it.
    let c = counted("");
    let mut jobs: Vec<ClusterJob> = [(1, "agents"), (2, "agents"), (3, "training")]
        .iter()
        .chain(&[(4, "training"), (5, "research"), (6, "research")])
        .map(|(id, t)| running(*id, t, 100 + *id as i64))
        .collect();
    let mut three = pending(10, "training", 500);
    three.gpus = 3;
    jobs.push(three);
    jobs.push(pending(11, "agents", 600));
    let p = plan_for(&c, &jobs, &[("training", 0.9), ("agents", 0.5)]);
    assert_eq!(p.gpu_limits["agents"], 3);
    assert_eq!(p.gpu_limits["training"], 4);
}

#[test]
fn unreadable_requests_never_widen_a_limit() {
    let c = config("");
    let mut odd = pending(1, "research", 100);
    odd.gpus = UNREADABLE_GPUS;
    let p = plan_for(&c, &[odd], &[]);
    assert_eq!(p.state.pending_in_quota_gpus, 0);
    assert_eq!(p.gpu_limits["research"], 2);
}

#[test]
fn finding10_the_fallback_reclaims_where_the_waiting_job_then_fits() {
    let c = config("");
    // research holds all 8 GPUs with one-GPU jobs: odd ids on n2, even on n1; 1 and 2
    // (the oldest) are inside its quota. Reclaim order: 8 7 6 5 4 3.
    let mut jobs: Vec<_> = (1..=8)
        .map(|i| {
            let mut j = running(i, "research", 100 + i as i64);
            j.nodes = vec![if i % 2 == 0 { "n1" } else { "n2" }.to_string()];
            j
        })
        .collect();
    let mut three = pending(20, "training", WAITED_AT_1000);
    three.gpus = 3;
    jobs.push(three.clone());
    let nodes: BTreeMap<String, u32> = [("n1".to_string(), 4), ("n2".to_string(), 4)].into();
    let fairshare = BTreeMap::new();
    let input = |jobs: &[ClusterJob]| {
        plan(&GovernInput {
            config: &c,
            capacity: 8,
            jobs,
            fairshare: &fairshare,
            now: 1_000,
            now_ms: 1_000 * 1_000,
            node_gpus: &nodes,
            capacity_by_type: &BTreeMap::new(),
            node_types: &BTreeMap::new(),
            idle: &std::collections::BTreeSet::new(),
            shard_gpus: &crate::governance::NO_SHARD_PLACES,
        })
    };
    let mut p = input(&jobs);
    p.reclaim.sort_unstable();
    // The first three in order (8, 7, 6) sit on two nodes and would not let it in; on n1
    // the victims 8, 6, 4 do.
    assert_eq!(p.reclaim, [4, 6, 8]);
    // A whole-node job: research's jobs on n1 (2, 4, 6, 8) all go, since research (8
    // running, quota 2) stays above its quota without them; job 2 is one phase 1 counted
    // inside the quota (issue 24).
    jobs.last_mut().unwrap().gpus = 4;
    let mut p = input(&jobs);
    p.reclaim.sort_unstable();
    assert_eq!(p.reclaim, [2, 4, 6, 8]);
    // research at 5 (3, 5 and 7 ended, training runs 3 on n2 in their place): 3 of its
    // jobs may go, not the 4 on n1, and n2 keeps training's (below its quota): nobody
    // is requeued.
    let mut fewer: Vec<ClusterJob> = jobs
        .iter()
        .filter(|j| ![3, 5, 7].contains(&j.id))
        .cloned()
        .collect();
    for id in 30..33 {
        let mut t = running(id, "training", 50);
        t.nodes = vec!["n2".to_string()];
        fewer.push(t);
    }
    assert!(input(&fewer).reclaim.is_empty());
    // Without training's: n2 has 3 free GPUs and job 1, the one research job there.
    fewer.retain(|j| !(30..33).contains(&j.id));
    assert_eq!(input(&fewer).reclaim, [1]);
    // Free GPUs on one node are used before any victim.
    jobs.retain(|j| j.id != 4 && j.id != 6 && j.id != 8);
    jobs.last_mut().unwrap().gpus = 3;
    assert!(input(&jobs).reclaim.is_empty());
}

#[test]
fn young_victims_are_skipped_when_counting_what_a_reclaim_needs() {
    let mut s = PublishedState {
        bands: Default::default(),
        version: STATE_VERSION,
        generated_at: 0,
        config_digest: "abc".into(),
        capacity: 8,
        capacity_by_type: BTreeMap::new(),
        free_gpus: 0,
        pending_in_quota_gpus: 0,
        reclaim_gpus: 0,
        spare_gpus: None,
        teams: BTreeMap::new(),
        victims: vec![],
        acted_at: 0,
        read_at_ms: 0,
        pools: BTreeMap::new(),
        slurm_partitions: None,
        node_gpus: 0,
        node_gpus_by_type: BTreeMap::new(),
        unsettled_gpus: 0,
        unsettled_gpus_by_type: BTreeMap::new(),
    };
    for (rank, exempt_until) in [(0usize, 50i64), (1, 0), (2, 0)] {
        s.victims.push(Victim {
            job_id: rank as u64,
            team: "t".into(),
            gpus: 1,
            level: priority::victim_level(rank),
            exempt_until,
            gpu_type: None,
        });
    }
    // At t=10 the first victim is exempt: one GPU needs the level above the second.
    assert_eq!(s.reclaim_level(1, 10), priority::reclaim_level(2));
    assert_eq!(s.reclaim_level(1, 60), priority::reclaim_level(1));
    assert_eq!(s.reclaim_level(0, 60), priority::reclaim_level(0));
    let json = s.to_json();
    assert_eq!(PublishedState::from_json(&json).unwrap(), s);
    assert!(PublishedState::from_json("{\"version\": 99}").is_err());
}

/// Quotas per GPU type.
mod families;
mod shared_gpus;
mod typed;
