//! Properties of the governor's plan over random clusters, teams and job sets (issue 8):
//! the plan never lets a team hold more than quota + borrow limit, never picks a victim of a
//! team at or under its quota, never displaces, reclaims or reserves for a job that cannot
//! start, and never requeues more victims than the waiting in-quota jobs need.
//!
//! Fast by default; `PROPTEST_CASES=100000 cargo test --release -p teamshare-policy --test
//! plan_properties` for a soak.

// Test code: a scenario reads top to bottom, so the workspace's 80-line limit is not for it.
#![allow(clippy::too_many_lines)]

use std::collections::BTreeMap;

use proptest::prelude::*;
use teamshare_config::Config;
use teamshare_policy::governance::{
    class_rank, plan, reclaim_fallback_due_ms, ClusterJob, GovernInput, Phase, Plan,
};
use teamshare_policy::priority::{self, encode};

const NOW: i64 = 1_000_000;

fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(256)
}

#[derive(Debug, Clone)]
struct TeamSpec {
    quota: u32,
    borrow_limit: Option<u32>,
    lend_limit: Option<u32>,
    weight: u32,
}

fn team_spec() -> impl Strategy<Value = TeamSpec> {
    (
        0u32..6,
        prop::option::of(0u32..6),
        prop::option::of(0u32..6),
        1u32..100,
    )
        .prop_map(|(quota, borrow_limit, lend, weight)| TeamSpec {
            quota,
            borrow_limit,
            lend_limit: lend.map(|l| l.min(quota)),
            weight,
        })
}

/// A configuration with `teams` and three classes (index 1 non-preemptible).
fn config(teams: &[TeamSpec], fifo: bool, within: bool) -> Config {
    let mut text = format!(
        "[cluster]\nname = \"p\"\nidle_sharing = \"{}\"\n",
        if fifo { "fifo" } else { "fair-share" }
    );
    for (i, t) in teams.iter().enumerate() {
        text.push_str(&format!(
            "[[team]]\nname = \"t{i}\"\nquota = {}\nweight = {}\n",
            t.quota, t.weight
        ));
        if let Some(b) = t.borrow_limit {
            text.push_str(&format!("borrow_limit = {b}\n"));
        }
        if let Some(l) = t.lend_limit {
            text.push_str(&format!("lend_limit = {l}\n"));
        }
    }
    text.push_str(
        "[[priority_class]]\nname = \"inference\"\nvalue = 100\npreemptible = false\n\
         [[priority_class]]\nname = \"standard\"\nvalue = 50\n\
         [[priority_class]]\nname = \"experiment\"\nvalue = 10\n",
    );
    text.push_str(&format!(
        "[governance]\nmin_runtime_before_reclaim = \"0s\"\npreempt_within_team = \"{}\"\n",
        if within { "lower-priority" } else { "never" }
    ));
    teamshare_config::parse(&text, "p.toml").expect("generated configuration is valid")
}

#[derive(Debug, Clone)]
struct JobSpec {
    team: usize,
    running: bool,
    gpus: u32,
    class: u8,
    age: i64,
    eligible: bool,
    held: bool,
}

fn job_spec(teams: usize) -> impl Strategy<Value = JobSpec> {
    (
        0..teams + 1, // teams: a job of an account outside every team
        any::<bool>(),
        1u32..5,
        0u8..4,
        0i64..100,
        prop::bool::weighted(0.8),
        prop::bool::weighted(0.05),
    )
        .prop_map(
            |(team, running, gpus, class, age, eligible, held)| JobSpec {
                team,
                running,
                gpus,
                class,
                age,
                eligible,
                held,
            },
        )
}

fn jobs(specs: &[JobSpec]) -> Vec<ClusterJob> {
    specs
        .iter()
        .enumerate()
        .map(|(i, s)| ClusterJob {
            id: i as u64 + 1,
            gpu_type: None,
            team: format!("t{}", s.team),
            phase: if s.running {
                Phase::Running
            } else {
                Phase::Pending
            },
            gpus: s.gpus,
            priority: if s.held && !s.running {
                0
            } else if s.running {
                encode(priority::protected_level(0), s.class)
            } else {
                encode(priority::BORROW_BASE, s.class)
            },
            submit: NOW - s.age - 1,
            start: s.running.then_some(NOW - s.age),
            eligible: s.running || s.eligible,
            parked: false,
            park_held: false,
            batch: true,
            nodes: Vec::new(),
            node_count: 1,
            completing: false,
            tasks: 1,
        })
        .collect()
}

#[derive(Debug)]
struct Case {
    config: Config,
    jobs: Vec<ClusterJob>,
    capacity: u32,
    plan: Plan,
}

fn case() -> impl Strategy<Value = Case> {
    (
        prop::collection::vec(team_spec(), 1..5),
        any::<bool>(),
        any::<bool>(),
        0u32..8,
    )
        .prop_flat_map(|(teams, fifo, within, extra)| {
            let n = teams.len();
            (
                Just(teams),
                Just(fifo),
                Just(within),
                Just(extra),
                prop::collection::vec(job_spec(n), 0..30),
            )
        })
        .prop_map(|(teams, fifo, within, extra, specs)| {
            let config = config(&teams, fifo, within);
            let capacity = teams.iter().map(|t| t.quota).sum::<u32>() + extra;
            let jobs = jobs(&specs);
            let fairshare: BTreeMap<String, f64> = (0..teams.len())
                .map(|i| (format!("t{i}"), 1.0 / (i as f64 + 1.0)))
                .collect();
            let plan = plan(&GovernInput {
                config: &config,
                capacity,
                jobs: &jobs,
                fairshare: &fairshare,
                now: NOW,
                now_ms: NOW.saturating_mul(1_000),
                node_gpus: &BTreeMap::new(),
                capacity_by_type: &BTreeMap::new(),
                node_types: &BTreeMap::new(),
                idle: &std::collections::BTreeSet::new(),
                shard_gpus: &teamshare_policy::governance::NO_SHARD_PLACES,
            });
            Case {
                config,
                jobs,
                capacity,
                plan,
            }
        })
}

fn used(c: &Case, team: &str) -> u32 {
    c.jobs
        .iter()
        .filter(|j| j.team == team && j.phase == Phase::Running)
        .map(|j| j.gpus)
        .sum()
}

fn job(c: &Case, id: u64) -> &ClusterJob {
    c.jobs
        .iter()
        .find(|j| j.id == id)
        .expect("planned jobs exist")
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases()))]

    /// Rule 1: no team's limit exceeds quota + borrow limit.
    #[test]
    fn a_team_never_may_hold_more_than_quota_plus_borrow_limit(c in case()) {
        for t in &c.config.teams {
            let limit = c.plan.gpu_limits[&t.name];
            if let Some(b) = t.borrow_limit {
                prop_assert!(limit <= t.quota.total + b, "{}: {limit}", t.name);
            }
            // And never below what its in-quota share is: the guarantee stays reachable.
            prop_assert!(limit >= t.quota.total.min(t.quota.total + t.borrow_limit.unwrap_or(0)));
        }
    }

    /// Rule 2: victims and requeued jobs belong to teams over their quota, and are never of
    /// a non-preemptible class or outside every team.
    #[test]
    fn no_victim_is_of_a_team_at_or_under_its_quota(c in case()) {
        for v in &c.plan.state.victims {
            let team = c.config.team(&v.team).expect("victims are team jobs");
            prop_assert!(used(&c, &v.team) > team.quota.total, "victim {} of {}", v.job_id, v.team);
            prop_assert_ne!(priority::class_index(job(&c, v.job_id).priority), 1);
        }
        for id in &c.plan.reclaim {
            prop_assert!(c.plan.state.victims.iter().any(|v| v.job_id == *id));
        }
        for id in &c.plan.violations {
            let j = job(&c, *id);
            prop_assert_eq!(priority::class_index(j.priority), 1);
            let team = c.config.team(&j.team).expect("violations are team jobs");
            prop_assert!(used(&c, &j.team) > team.quota.total);
        }
    }

    /// Rule 6 with issue 8's finding 5: displacement happens only for a startable pending job
    /// of a higher class of the same team, and only to that team's own lower classes.
    #[test]
    fn displacement_is_only_for_a_job_that_can_start(c in case()) {
        for id in &c.plan.displace {
            let victim = job(&c, *id);
            prop_assert_eq!(victim.phase, Phase::Running);
            let value = |j: &ClusterJob| match priority::class_index(j.priority) {
                1 => 100, 2 => 50, 3 => 10, _ => 0,
            };
            let cause = c.jobs.iter().any(|p| {
                p.phase == Phase::Pending && p.priority != 0 && p.eligible
                    && p.team == victim.team && value(p) > value(victim)
            });
            prop_assert!(cause, "job {id} displaced with no startable higher-class teammate");
        }
    }

    /// Nothing that cannot start reserves quota, displaces or reclaims.
    #[test]
    fn jobs_that_cannot_start_do_nothing(mut c in case()) {
        for j in &mut c.jobs {
            if j.phase == Phase::Pending {
                j.eligible = false;
            }
        }
        let fairshare = BTreeMap::new();
        let p = plan(&GovernInput {
            config: &c.config, capacity: c.capacity, jobs: &c.jobs, fairshare: &fairshare, now: NOW, now_ms: NOW * 1_000,
            node_gpus: &BTreeMap::new(),
            capacity_by_type: &BTreeMap::new(),
            node_types: &BTreeMap::new(),
            idle: &std::collections::BTreeSet::new(),
            shard_gpus: &teamshare_policy::governance::NO_SHARD_PLACES,
        });
        prop_assert!(p.displace.is_empty());
        prop_assert!(p.reclaim.is_empty());
        prop_assert_eq!(p.state.pending_in_quota_gpus, 0);
        // Their teams' limits are what they hold (or the quota): no allowance for them.
        for t in &c.config.teams {
            prop_assert!(p.gpu_limits[&t.name] <= t.quota.total.max(used(&c, &t.name)));
        }
    }

    /// Rule 3: the fallback requeues no more than needed: without its last victim the chosen
    /// ones would not cover what the waiting in-quota jobs need beyond the free GPUs.
    #[test]
    fn no_more_victims_than_needed(c in case()) {
        if c.plan.reclaim.is_empty() {
            return Ok(());
        }
        let total_used: u32 = c.config.teams.iter().map(|t| used(&c, &t.name)).sum();
        let free = c.capacity.saturating_sub(total_used);
        // Waiting in-quota jobs: every pending job the plan ranked in the reclaim band (above
        // the borrowers, not displacing) that has waited past the fallback delay.
        let in_quota = |p: u32| {
            let l = priority::level(p);
            l > priority::reclaim_level(0) && l < priority::PROTECTED_BASE
        };
        let waiting: u32 = c.jobs.iter()
            .filter(|j| j.phase == Phase::Pending && j.eligible)
            .filter(|j| c.plan.priorities.get(&j.id).is_some_and(|p| in_quota(*p)))
            .filter(|j| reclaim_fallback_due_ms(j.submit) <= NOW * 1_000)
            .map(|j| j.gpus)
            .sum();
        let needed = waiting.saturating_sub(free);
        let gpus: Vec<u32> = c.plan.reclaim.iter().map(|id| job(&c, *id).gpus).collect();
        let all: u32 = gpus.iter().sum();
        let without_last = all - gpus.last().copied().unwrap_or(0);
        prop_assert!(needed > 0, "reclaimed {:?} with nothing needed", c.plan.reclaim);
        prop_assert!(without_last < needed, "{:?} covers {} without its last, needed {}", gpus, without_last, needed);
    }

    /// The band the state publishes for a team is the one the plan gives its borrowers
    /// (issue 26): the plugin queues a new borrower there at submit, and the governor then
    /// has no priority to write for it.
    #[test]
    fn the_published_band_is_the_planned_one(c in case()) {
        for (id, &p) in &c.plan.priorities {
            let l = priority::level(p);
            if l <= priority::BORROW_BASE || l >= priority::GRANTED_LEVEL {
                continue;
            }
            let j = job(&c, *id);
            prop_assert_eq!(j.phase, Phase::Pending);
            let class = priority::class_index(j.priority);
            let slot = c.plan.state.bands.get(&j.team).copied();
            prop_assert_eq!(
                slot.map(|s| encode(priority::borrow_band(s, class_rank(&c.config, class)), class)),
                Some(p),
                "job {} of {}", id, j.team
            );
        }
    }
}
