//! A [`Planner`] kept up to date over a random history of jobs arriving, starting, ending,
//! being held, parked and released, and running jobs turning idle for the idle window (issue
//! 29), decides at every pass what [`plan`] decides from scratch for the same jobs: every
//! priority, limit and action.
//!
//! `PROPTEST_CASES=20000 cargo test --release -p teamshare-policy --test planner` for a soak.

// Test code: a scenario reads top to bottom, so the workspace's 80-line limit is not for it.
#![allow(clippy::too_many_lines)]

use std::collections::{BTreeMap, BTreeSet};

use proptest::prelude::*;
use teamshare_config::Config;
use teamshare_policy::governance::{
    plan, ClusterJob, GovernInput, PassInput, Phase, Plan, Planner,
};
use teamshare_policy::priority::{self, encode};

fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(256)
}

/// Team names whose order is not the configuration's (the plan serves some things by name).
const NAMES: [&str; 4] = ["zeta", "alpha", "mid", "beta"];

#[derive(Debug, Clone)]
struct TeamSpec {
    quota: u32,
    borrow: Option<u32>,
    lend: Option<u32>,
    weight: u32,
}

fn team_spec() -> impl Strategy<Value = TeamSpec> {
    (
        0u32..9,
        prop::option::of(0u32..9),
        prop::option::of(0u32..9),
        1u32..100,
    )
        .prop_map(|(quota, borrow, lend, weight)| TeamSpec {
            quota,
            borrow,
            lend: lend.map(|l| l.min(quota)),
            weight,
        })
}

/// How a configuration orders idle jobs first among rule 3's victims.
#[derive(Debug, Clone, Copy)]
enum IdleFirst {
    No,
    /// `idle_first_reclaim = true`.
    Flag,
    /// An idle policy whose action is `"reclaim-first"`.
    Policy,
}

fn config(
    teams: &[TeamSpec],
    fifo: bool,
    within: bool,
    exempt: u32,
    idle_first: IdleFirst,
) -> Config {
    let mut text = format!(
        "[cluster]\nname = \"p\"\nidle_sharing = \"{}\"\n",
        if fifo { "fifo" } else { "fair-share" }
    );
    for (i, t) in teams.iter().enumerate() {
        text.push_str(&format!(
            "[[team]]\nname = \"{}\"\nquota = {}\nweight = {}\n",
            NAMES[i], t.quota, t.weight
        ));
        if let Some(b) = t.borrow {
            text.push_str(&format!("borrow_limit = {b}\n"));
        }
        if let Some(l) = t.lend {
            text.push_str(&format!("lend_limit = {l}\n"));
        }
    }
    text.push_str(
        "[[priority_class]]\nname = \"inference\"\nvalue = 100\npreemptible = false\n\
         [[priority_class]]\nname = \"standard\"\nvalue = 50\n\
         [[priority_class]]\nname = \"experiment\"\nvalue = 10\n",
    );
    text.push_str(&format!(
        "[governance]\nmin_runtime_before_reclaim = \"{exempt}s\"\npreempt_within_team = \"{}\"\n",
        if within { "lower-priority" } else { "never" }
    ));
    match idle_first {
        IdleFirst::No => {}
        IdleFirst::Flag => text.push_str("idle_first_reclaim = true\n"),
        IdleFirst::Policy => text.push_str(
            "[governance.idle_policy]\nnotice_after = \"1h\"\naction = \"reclaim-first\"\nact_after = \"30m\"\n",
        ),
    }
    teamshare_config::parse(&text, "p.toml").expect("generated configuration is valid")
}

/// What happens between two passes.
#[derive(Debug, Clone)]
enum Op {
    /// A job is submitted: team (the last one: no team), GPUs, class, eligible, nodes asked,
    /// array tasks (1: not an array).
    Submit(usize, u32, u8, bool, u32, u32),
    /// The capacity changes (nodes drained or back): an array's tasks are counted again.
    Capacity(u32),
    /// The n-th pending job starts on these nodes.
    Start(usize, Vec<usize>),
    /// The n-th running job is ending (CG).
    Complete(usize),
    /// The n-th job ends or is cancelled.
    End(usize),
    /// The n-th pending job is held by its owner, or released.
    Hold(usize),
    /// The n-th pending job is parked by teamshare (held, begin time ahead), or released.
    Park(usize),
    /// Time passes.
    Tick(i64),
    /// The fair-share factors change (the teams' band slots may move).
    Fairshare(u8),
    /// Other running jobs are idle for the whole idle window ([`idle_of`]).
    Idle(u8),
}

fn op(teams: usize) -> impl Strategy<Value = Op> {
    prop_oneof![
        5 => (0..teams + 1, prop_oneof![9 => 1u32..6, 1 => Just(0u32)], 0u8..4, prop::bool::weighted(0.85), 1u32..3, prop_oneof![6 => Just(1u32), 1 => 2u32..40])
            .prop_map(|(t, g, c, e, n, k)| Op::Submit(t, g, c, e, n, k)),
        1 => (0u32..8).prop_map(Op::Capacity),
        3 => (any::<usize>(), prop::collection::vec(0usize..4, 1..3)).prop_map(|(i, n)| Op::Start(i, n)),
        1 => any::<usize>().prop_map(Op::Complete),
        2 => any::<usize>().prop_map(Op::End),
        1 => any::<usize>().prop_map(Op::Hold),
        1 => any::<usize>().prop_map(Op::Park),
        2 => (0i64..400).prop_map(Op::Tick),
        1 => any::<u8>().prop_map(Op::Fairshare),
        1 => any::<u8>().prop_map(Op::Idle),
    ]
}

#[derive(Debug, Clone)]
struct History {
    teams: Vec<TeamSpec>,
    fifo: bool,
    within: bool,
    exempt: u32,
    extra: u32,
    nodes: Vec<u32>,
    idle_first: IdleFirst,
    ops: Vec<Op>,
}

fn history() -> impl Strategy<Value = History> {
    (
        prop::collection::vec(team_spec(), 1..5),
        any::<bool>(),
        any::<bool>(),
        prop_oneof![Just(0u32), Just(120u32)],
        0u32..6,
        prop::collection::vec(1u32..9, 0..5),
        prop_oneof![
            Just(IdleFirst::No),
            Just(IdleFirst::Flag),
            Just(IdleFirst::Policy)
        ],
    )
        .prop_flat_map(|(teams, fifo, within, exempt, extra, nodes, idle_first)| {
            let n = teams.len();
            (
                Just((teams, fifo, within, exempt, extra, nodes, idle_first)),
                prop::collection::vec(op(n), 1..80),
            )
        })
        .prop_map(
            |((teams, fifo, within, exempt, extra, nodes, idle_first), ops)| History {
                teams,
                fifo,
                within,
                exempt,
                extra,
                nodes,
                idle_first,
                ops,
            },
        )
}

fn nth(jobs: &[ClusterJob], phase: Phase, n: usize) -> Option<u64> {
    let of: Vec<u64> = jobs
        .iter()
        .filter(|j| j.phase == phase)
        .map(|j| j.id)
        .collect();
    (!of.is_empty()).then(|| of[n % of.len()])
}

/// Applies `op` to the jobs squeue would show and to the planner alike.
fn apply(
    op: &Op,
    jobs: &mut Vec<ClusterJob>,
    planner: &mut Planner<'_>,
    now: &mut i64,
    next_id: &mut u64,
    teams: usize,
    nodes: usize,
) {
    let edit = |jobs: &mut Vec<ClusterJob>,
                planner: &mut Planner<'_>,
                id: u64,
                f: &dyn Fn(&mut ClusterJob)| {
        if let Some(j) = jobs.iter_mut().find(|j| j.id == id) {
            f(j);
        }
        planner.update(id, |j| f(j));
    };
    match op {
        Op::Submit(t, gpus, class, eligible, node_count, tasks) => {
            *next_id += 1;
            let job = ClusterJob {
                id: *next_id,
                team: if *t < teams {
                    NAMES[*t].to_string()
                } else {
                    "other".to_string()
                },
                phase: Phase::Pending,
                gpus: *gpus,
                gpu_type: None,
                priority: encode(priority::BORROW_BASE, *class),
                submit: *now,
                start: None,
                eligible: *eligible,
                parked: false,
                park_held: false,
                batch: true,
                nodes: Vec::new(),
                node_count: *node_count,
                completing: false,
                tasks: *tasks,
            };
            jobs.push(job.clone());
            planner.insert(job);
        }
        Op::Start(n, on) => {
            if let Some(mut id) = nth(jobs, Phase::Pending, *n) {
                // A task of an array starts as a job of its own; the record keeps the rest.
                let record = jobs.iter().find(|j| j.id == id).cloned();
                if let Some(record) = record.filter(|j| j.tasks > 1) {
                    edit(jobs, planner, id, &|j| j.tasks -= 1);
                    *next_id += 1;
                    id = *next_id;
                    let task = ClusterJob {
                        id,
                        tasks: 1,
                        ..record
                    };
                    jobs.push(task.clone());
                    planner.insert(task);
                }
                let start = *now;
                let names: Vec<String> = if nodes == 0 {
                    Vec::new()
                } else {
                    on.iter().map(|i| format!("n{}", i % nodes)).collect()
                };
                edit(jobs, planner, id, &|j| {
                    j.phase = Phase::Running;
                    j.start = Some(start);
                    j.nodes = names.clone();
                    j.parked = false;
                    j.park_held = false;
                    j.eligible = true;
                    if j.priority == 0 {
                        j.priority = encode(priority::BORROW_BASE, 0);
                    }
                });
            }
        }
        Op::Complete(n) => {
            if let Some(id) = nth(jobs, Phase::Running, *n) {
                edit(jobs, planner, id, &|j| j.completing = true);
            }
        }
        Op::End(n) => {
            if !jobs.is_empty() {
                let id = jobs[n % jobs.len()].id;
                jobs.retain(|j| j.id != id);
                planner.remove(id);
            }
        }
        Op::Hold(n) => {
            if let Some(id) = nth(jobs, Phase::Pending, *n) {
                edit(jobs, planner, id, &|j| {
                    if j.priority == 0 && !j.park_held {
                        j.priority = encode(priority::BORROW_BASE, 0);
                    } else if !j.park_held {
                        j.priority = 0;
                    }
                });
            }
        }
        Op::Park(n) => {
            if let Some(id) = nth(jobs, Phase::Pending, *n) {
                edit(jobs, planner, id, &|j| {
                    if j.park_held {
                        j.park_held = false;
                        j.parked = false;
                        j.priority = encode(priority::BORROW_BASE, 1);
                    } else {
                        j.park_held = true;
                        j.parked = true;
                        j.priority = 0;
                    }
                });
            }
        }
        Op::Tick(dt) => *now += dt,
        Op::Fairshare(_) | Op::Idle(_) | Op::Capacity(_) => {}
    }
}

/// The running jobs idle for the window from a seed: about a third of them, others with each
/// seed.
fn idle_of(jobs: &[ClusterJob], seed: u8) -> BTreeSet<u64> {
    jobs.iter()
        .filter(|j| j.phase == Phase::Running)
        .filter(|j| (j.id + u64::from(seed)).is_multiple_of(3))
        .map(|j| j.id)
        .collect()
}

/// Fair-share factors from a seed: each team's moves with it.
fn fairshare_of(seed: u8, teams: usize) -> BTreeMap<String, f64> {
    NAMES
        .iter()
        .take(teams)
        .enumerate()
        .map(|(i, n)| {
            let x = (u32::from(seed) * 37 + i as u32 * 101) % 97;
            (n.to_string(), f64::from(x) / 97.0)
        })
        .collect()
}

/// The history's nodes, `n0`, `n1`, ... with their GPUs.
fn node_gpus_of(h: &History) -> BTreeMap<String, u32> {
    h.nodes
        .iter()
        .enumerate()
        .map(|(i, g)| (format!("n{i}"), *g))
        .collect()
}

/// What [`plan`] decides from scratch for the jobs as they are.
fn reference(
    config: &Config,
    capacity: u32,
    jobs: &[ClusterJob],
    (fairshare, idle): (&BTreeMap<String, f64>, &BTreeSet<u64>),
    now: i64,
    node_gpus: &BTreeMap<String, u32>,
) -> Plan {
    plan(&GovernInput {
        config,
        capacity,
        jobs,
        fairshare,
        now,
        now_ms: now.saturating_mul(1_000),
        node_gpus,
        capacity_by_type: &BTreeMap::new(),
        node_types: &BTreeMap::new(),
        idle,
        shard_gpus: &teamshare_policy::governance::NO_SHARD_PLACES,
    })
}

fn same_as_plan(
    planner: &Planner<'_>,
    jobs: &[ClusterJob],
    full: &Plan,
    pass: &Plan,
) -> Result<(), TestCaseError> {
    for j in jobs {
        prop_assert_eq!(
            planner.priority(j.id),
            full.priorities.get(&j.id).copied(),
            "priority of job {}",
            j.id
        );
    }
    prop_assert_eq!(&pass.gpu_limits, &full.gpu_limits);
    prop_assert_eq!(&pass.displace, &full.displace);
    prop_assert_eq!(&pass.reclaim, &full.reclaim);
    prop_assert_eq!(&pass.violations, &full.violations);
    prop_assert_eq!(&pass.over_ceiling, &full.over_ceiling);
    prop_assert_eq!(&pass.park, &full.park);
    prop_assert_eq!(&pass.release, &full.release);
    prop_assert_eq!(&pass.outside, &full.outside);
    prop_assert_eq!(&pass.displacing, &full.displacing);
    prop_assert_eq!(&pass.in_quota, &full.in_quota);
    // In quota: the pending jobs ranked at the no-preempt level or above.
    let mut in_quota: Vec<u64> = jobs
        .iter()
        .filter(|j| j.phase == Phase::Pending)
        .filter(|j| {
            full.priorities
                .get(&j.id)
                .is_some_and(|p| priority::level(*p) >= priority::VICTIM_BASE - 1)
        })
        .map(|j| j.id)
        .collect();
    in_quota.sort_unstable();
    prop_assert_eq!(&pass.in_quota, &in_quota);
    let next_exempt = full
        .state
        .victims
        .iter()
        .map(|v| v.exempt_until)
        .filter(|t| *t > full.state.generated_at)
        .min();
    prop_assert_eq!(full.next_exempt_end, next_exempt);
    prop_assert_eq!(pass.next_exempt_end, next_exempt);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases()))]

    #[test]
    fn a_planner_kept_up_to_date_plans_what_plan_does(h in history()) {
        let config = config(&h.teams, h.fifo, h.within, h.exempt, h.idle_first);
        let mut capacity = h.teams.iter().map(|t| t.quota).sum::<u32>() + h.extra;
        let node_gpus = node_gpus_of(&h);
        let mut fairshare = fairshare_of(0, h.teams.len());
        let mut idle_seed = 0u8;
        let mut planner = Planner::new(&config);
        planner.set_nodes(&node_gpus);
        let mut jobs: Vec<ClusterJob> = Vec::new();
        let mut now = 1_000_000i64;
        let mut next_id = 0u64;
        for (n, op) in h.ops.iter().enumerate() {
            apply(op, &mut jobs, &mut planner, &mut now, &mut next_id, h.teams.len(), h.nodes.len());
            if let Op::Fairshare(seed) = op {
                fairshare = fairshare_of(*seed, h.teams.len());
            }
            if let Op::Idle(seed) = op {
                idle_seed = *seed;
            }
            if let Op::Capacity(extra) = op {
                capacity = h.teams.iter().map(|t| t.quota).sum::<u32>() + extra;
            }
            // Jobs that start or end change the set too, as they would live.
            let idle = idle_of(&jobs, idle_seed);
            planner.set_idle(idle.clone());
            let full = reference(&config, capacity, &jobs, (&fairshare, &idle), now, &node_gpus);
            // Every third pass as the governor asks: every priority, and the state.
            let governor = n % 3 == 2;
            let pass = planner.plan(&PassInput {
                capacity,
                fairshare: &fairshare,
                now,
                now_ms: now.saturating_mul(1_000),
                publish: governor,
                all_priorities: governor,
            });
            if governor {
                prop_assert_eq!(&pass.priorities, &full.priorities);
                prop_assert_eq!(&pass.state, &full.state);
            }
            same_as_plan(&planner, &jobs, &full, &pass)?;
            // Only what changed is handed back, and every priority only when asked.
            for (id, p) in &pass.changed {
                prop_assert_eq!(full.priorities.get(id), Some(p));
            }
            if !governor {
                prop_assert!(pass.priorities.is_empty());
            }
            prop_assert_eq!(planner.len(), jobs.len());
            // The governor applies the priorities (the class stays in the low bits, which is
            // all the plan reads of them): plan() sees them all, the planner some (as accountd
            // replay shows it none), which refiles those jobs.
            for j in jobs.iter_mut() {
                if let Some(p) = full.priorities.get(&j.id) {
                    if j.priority != 0 {
                        j.priority = *p;
                        if (j.id + now as u64).is_multiple_of(4) {
                            let p = *p;
                            planner.update(j.id, |k| k.priority = p);
                        }
                    }
                }
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases()))]

    /// As the governor feeds one: every pass it is handed every job as Slurm holds it
    /// ([`Planner::hold_read`]: the jobs no longer read removed), and Slurm applies a pass's
    /// priorities only when its actions run (not after every pass: the actuator may be
    /// busy). Every pass still plans what [`plan`] does over the jobs as read.
    #[test]
    fn a_planner_fed_the_governors_reads_plans_what_plan_does(h in history(), skips in any::<u64>()) {
        let config = config(&h.teams, h.fifo, h.within, h.exempt, h.idle_first);
        let mut capacity = h.teams.iter().map(|t| t.quota).sum::<u32>() + h.extra;
        let node_gpus = node_gpus_of(&h);
        let mut fairshare = fairshare_of(0, h.teams.len());
        let mut idle_seed = 0u8;
        let mut planner = Planner::new(&config);
        planner.set_nodes(&node_gpus);
        let mut jobs: Vec<ClusterJob> = Vec::new();
        let mut now = 1_000_000i64;
        let mut next_id = 0u64;
        for (n, op) in h.ops.iter().enumerate() {
            // The history's own edits go to a planner nobody reads.
            let mut scratch = Planner::new(&config);
            apply(op, &mut jobs, &mut scratch, &mut now, &mut next_id, h.teams.len(), h.nodes.len());
            match op {
                Op::Fairshare(seed) => fairshare = fairshare_of(*seed, h.teams.len()),
                Op::Idle(seed) => idle_seed = *seed,
                Op::Capacity(extra) => capacity = h.teams.iter().map(|t| t.quota).sum::<u32>() + extra,
                _ => {}
            }
            let idle = idle_of(&jobs, idle_seed);
            planner.set_idle(idle.clone());
            planner.hold_read(&jobs);
            let full = reference(&config, capacity, &jobs, (&fairshare, &idle), now, &node_gpus);
            let pass = planner.plan(&PassInput {
                capacity,
                fairshare: &fairshare,
                now,
                now_ms: now.saturating_mul(1_000),
                publish: true,
                all_priorities: true,
            });
            prop_assert_eq!(&pass.priorities, &full.priorities);
            prop_assert_eq!(&pass.state, &full.state);
            same_as_plan(&planner, &jobs, &full, &pass)?;
            prop_assert_eq!(planner.len(), jobs.len());
            // Slurm applies this pass's priorities, or not (its actions put off).
            if (skips >> (n % 64)) & 1 == 0 {
                for j in jobs.iter_mut() {
                    if let Some(p) = full.priorities.get(&j.id) {
                        if j.priority != 0 {
                            j.priority = *p;
                        }
                    }
                }
            }
        }
    }
}
