//! Properties of reclaim by placement (issue 24, DESIGN §4 rule 3) over random clusters of a
//! few nodes, teams whose running jobs sit anywhere on them, and one pending job that fits
//! its team's unused quota:
//!
//! - an in-quota job that some choice of victims lets start gets one (or fits free GPUs);
//! - no victim beyond need: without any one of the victims the job fits nowhere;
//! - no team is pushed below its quota, but by a job phase 1 counts beyond its quota, taken
//!   while the team was above it; no job of a team at or below its quota is touched.
//!
//! Half of the cases order the victims idle first (`idle_first_reclaim`, issue 29), with a
//! random set of the running jobs idle: the properties hold in either order.
//!
//! Fast by default; `PROPTEST_CASES=100000 cargo test --release -p teamshare-policy --test
//! reclaim_properties` for a soak.

// Test code: a scenario reads top to bottom, so the workspace's 80-line limit is not for it.
#![allow(clippy::too_many_lines)]

use std::collections::BTreeMap;

use proptest::prelude::*;
use teamshare_config::Config;
use teamshare_policy::governance::{plan, ClusterJob, GovernInput, Phase, Plan};
use teamshare_policy::priority::{self, encode};

const NOW: i64 = 1_000_000;

fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(512)
}

/// Teams t0.. with these quotas (borrowing unlimited) and a non-preemptible class (index 1).
fn config(quotas: &[u32], weights: &[u32], idle_first: bool) -> Config {
    let mut text = String::from("[cluster]\nname = \"p\"\n");
    for (i, (q, w)) in quotas.iter().zip(weights).enumerate() {
        text.push_str(&format!(
            "[[team]]\nname = \"t{i}\"\nquota = {q}\nweight = {w}\n"
        ));
    }
    text.push_str(
        "[[priority_class]]\nname = \"inference\"\nvalue = 100\npreemptible = false\n\
         [[priority_class]]\nname = \"experiment\"\nvalue = 10\n\
         [governance]\nmin_runtime_before_reclaim = \"0s\"\n",
    );
    if idle_first {
        text.push_str("idle_first_reclaim = true\n");
    }
    teamshare_config::parse(&text, "p.toml").expect("generated configuration is valid")
}

#[derive(Debug)]
struct Case {
    config: Config,
    nodes: BTreeMap<String, u32>,
    jobs: Vec<ClusterJob>,
    /// The pending job (the last of `jobs`).
    waiting: ClusterJob,
    plan: Plan,
    /// The running jobs idle for the window, and whether the victims are ordered idle first.
    idle: std::collections::BTreeSet<u64>,
    idle_first: bool,
}

/// (team, GPUs, class, age, node) of a running job; placed where it fits, dropped otherwise.
type RunSpec = (usize, u32, u8, i64, usize);
/// GPUs per node, (quota, weight) per team, the running jobs, and (team, GPUs) of the waiting
/// job.
/// job, and bits: the lowest orders victims idle first, the others say which jobs are idle.
type Drawn = (Vec<u32>, Vec<(u32, u32)>, Vec<RunSpec>, (usize, u32), u32);

fn case() -> impl Strategy<Value = Case> {
    (
        prop::collection::vec(1u32..9, 1..5), // GPUs per node
        prop::collection::vec((0u32..5, 1u32..50), 2..5), // (quota, weight) per team
    )
        .prop_flat_map(|(node_gpus, teams)| {
            let n = teams.len();
            let nodes = node_gpus.len();
            (
                Just(node_gpus),
                Just(teams),
                prop::collection::vec((0..n, 1u32..5, 0u8..3, 0i64..100, 0..nodes), 0..30),
                (0..n, 1u32..9),
                any::<u32>(),
            )
        })
        .prop_filter_map("quotas fit the nodes, the job fits its quota", build)
}

fn build((node_gpus, teams, runs, (team, gpus), bits): Drawn) -> Option<Case> {
    let capacity: u32 = node_gpus.iter().sum();
    // Quotas scaled down to fit the nodes.
    let asked: u32 = teams.iter().map(|t| t.0).sum();
    let quotas: Vec<u32> = teams
        .iter()
        .map(|t| {
            if asked > capacity {
                t.0 * capacity / asked
            } else {
                t.0
            }
        })
        .collect();
    let weights: Vec<u32> = teams.iter().map(|t| t.1).collect();
    let config = config(&quotas, &weights, bits & 1 == 1);
    let nodes: BTreeMap<String, u32> = node_gpus
        .iter()
        .enumerate()
        .map(|(i, g)| (format!("n{i}"), *g))
        .collect();
    let mut free = node_gpus.clone();
    let mut jobs = Vec::new();
    for (i, &(t, g, class, age, node)) in runs.iter().enumerate() {
        if free[node] < g {
            continue;
        }
        free[node] -= g;
        jobs.push(ClusterJob {
            id: i as u64 + 1,
            gpu_type: None,
            team: format!("t{t}"),
            phase: Phase::Running,
            gpus: g,
            priority: encode(priority::protected_level(0), class),
            submit: NOW - age - 10,
            start: Some(NOW - age - 5),
            eligible: true,
            parked: false,
            park_held: false,
            batch: true,
            nodes: vec![format!("n{node}")],
            node_count: 1,
            completing: false,
            tasks: 1,
        });
    }
    // The waiting job: of the first team from `team` on with room in its quota, asking for
    // no more than that room and the largest node.
    let used = |t: usize| -> u32 {
        jobs.iter()
            .filter(|j| j.team == format!("t{t}"))
            .map(|j| j.gpus)
            .sum()
    };
    let n = quotas.len();
    let team = (0..n)
        .map(|k| (team + k) % n)
        .find(|&t| used(t) < quotas[t])?;
    let room = quotas[team] - used(team);
    let gpus = gpus.min(room).min(*node_gpus.iter().max()?);
    let waiting = ClusterJob {
        id: 1_000,
        team: format!("t{team}"),
        phase: Phase::Pending,
        gpus,
        priority: encode(priority::BORROW_BASE, 0),
        submit: NOW - 5,
        start: None,
        nodes: Vec::new(),
        ..blank(team)
    };
    jobs.push(waiting.clone());
    let idle = jobs
        .iter()
        .filter(|j| j.phase == Phase::Running && bits >> (1 + j.id % 31) & 1 == 1)
        .map(|j| j.id)
        .collect();
    let plan = plan(&GovernInput {
        config: &config,
        capacity,
        jobs: &jobs,
        fairshare: &BTreeMap::new(),
        now: NOW,
        now_ms: NOW.saturating_mul(1_000),
        node_gpus: &nodes,
        capacity_by_type: &BTreeMap::new(),
        node_types: &BTreeMap::new(),
        idle: &idle,
        shard_gpus: &teamshare_policy::governance::NO_SHARD_PLACES,
    });
    Some(Case {
        idle_first: config.governance.idle_first_reclaim,
        config,
        nodes,
        jobs,
        waiting,
        plan,
        idle,
    })
}

fn blank(team: usize) -> ClusterJob {
    ClusterJob {
        id: 0,
        gpu_type: None,
        team: format!("t{team}"),
        phase: Phase::Pending,
        gpus: 0,
        priority: 0,
        submit: 0,
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

impl Case {
    fn running(&self) -> impl Iterator<Item = &ClusterJob> {
        self.jobs.iter().filter(|j| j.phase == Phase::Running)
    }

    fn used(&self, team: &str) -> u32 {
        self.running()
            .filter(|j| j.team == team)
            .map(|j| j.gpus)
            .sum()
    }

    fn quota(&self, team: &str) -> u32 {
        self.config.team(team).map_or(0, |t| t.quota.total)
    }

    /// Whether the waiting job fits some node once the running jobs in `gone` have left.
    fn fits_without(&self, gone: &[u64]) -> bool {
        self.nodes.iter().any(|(n, g)| {
            let held: u32 = self
                .running()
                .filter(|j| j.nodes[0] == *n && !gone.contains(&j.id))
                .map(|j| j.gpus)
                .sum();
            g - held >= self.waiting.gpus
        })
    }

    /// Phase 1's bookkeeping: the team's jobs beyond its quota (oldest fill it first, the
    /// non-preemptible class before the others).
    fn borrowed(&self, team: &str) -> Vec<u64> {
        let mut mine: Vec<&ClusterJob> = self.running().filter(|j| j.team == team).collect();
        mine.sort_by_key(|j| {
            (
                priority::class_index(j.priority) != 1,
                std::cmp::Reverse(class_value(j)),
                j.start,
                j.id,
            )
        });
        let mut inside = 0;
        let mut out = Vec::new();
        for j in mine {
            if inside + j.gpus <= self.quota(team) {
                inside += j.gpus;
            } else {
                out.push(j.id);
            }
        }
        out
    }

    /// Some set of running jobs of teams above their quota (preemptible, each team kept at or
    /// above its quota) lets the waiting job in on one node.
    fn some_victims_fit(&self) -> bool {
        self.nodes.iter().any(|(n, g)| {
            let here: Vec<&ClusterJob> = self.running().filter(|j| j.nodes[0] == *n).collect();
            let held: u32 = here.iter().map(|j| j.gpus).sum();
            let free = g - held;
            let open: Vec<&&ClusterJob> = here
                .iter()
                .filter(|j| priority::class_index(j.priority) != 1)
                .filter(|j| self.used(&j.team) > self.quota(&j.team))
                .collect();
            (0u32..(1 << open.len())).any(|mask| {
                let set: Vec<&&ClusterJob> = (0..open.len())
                    .filter(|b| mask & (1 << b) != 0)
                    .map(|b| open[b])
                    .collect();
                let freed: u32 = set.iter().map(|j| j.gpus).sum();
                let keeps_quota = self.config.teams.iter().all(|t| {
                    let taken: u32 = set
                        .iter()
                        .filter(|j| j.team == t.name)
                        .map(|j| j.gpus)
                        .sum();
                    taken == 0 || self.used(&t.name) - taken >= t.quota.total
                });
                keeps_quota && free + freed >= self.waiting.gpus
            })
        })
    }
}

fn class_value(j: &ClusterJob) -> u32 {
    match priority::class_index(j.priority) {
        1 => 100,
        2 => 10,
        _ => 0,
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases()))]

    /// An in-quota job that some choice of victims lets start gets one.
    #[test]
    fn an_in_quota_job_that_victims_can_let_in_gets_them(c in case()) {
        if c.fits_without(&[]) {
            prop_assert!(c.plan.reclaim.is_empty(), "reclaimed {:?} for a job that fits", c.plan.reclaim);
        } else if c.some_victims_fit() {
            prop_assert!(!c.plan.reclaim.is_empty(), "no victims for job {:?}", c.waiting);
            prop_assert!(c.fits_without(&c.plan.reclaim), "victims {:?} do not let it in", c.plan.reclaim);
        }
    }

    /// Never more victims than needed: without any one of them, the job fits nowhere.
    #[test]
    fn no_victim_beyond_need(c in case()) {
        for r in &c.plan.reclaim {
            let others: Vec<u64> = c.plan.reclaim.iter().copied().filter(|x| x != r).collect();
            prop_assert!(!c.fits_without(&others), "victim {r} of {:?} is not needed", c.plan.reclaim);
        }
    }

    /// No team is pushed below its quota, but by a job that phase 1 counts beyond it and that
    /// was taken while the team was above it; no job of a team at or below its quota, nor of
    /// the non-preemptible class, is a victim.
    #[test]
    fn no_team_is_pushed_below_its_quota(c in case()) {
        for t in &c.config.teams {
            let mine: Vec<&ClusterJob> = c.running()
                .filter(|j| j.team == t.name && c.plan.reclaim.contains(&j.id))
                .collect();
            if mine.is_empty() {
                continue;
            }
            let used = c.used(&t.name);
            prop_assert!(used > t.quota.total, "{} at {used} of quota {} lost {:?}", t.name, t.quota.total, mine);
            prop_assert!(mine.iter().all(|j| priority::class_index(j.priority) != 1));
            let taken: u32 = mine.iter().map(|j| j.gpus).sum();
            if used - taken < t.quota.total {
                let borrowed = c.borrowed(&t.name);
                let straddles = mine.iter().any(|j| {
                    borrowed.contains(&j.id) && used - taken + j.gpus > t.quota.total
                });
                prop_assert!(straddles, "{} pushed to {} below quota {} by {:?}", t.name, used - taken, t.quota.total, mine);
            }
        }
    }

    /// The state lists the victims found first, and the in-quota job's priority sits just
    /// above them: Slurm may preempt those and no other job for it.
    #[test]
    fn only_the_victims_found_rank_below_the_job(c in case()) {
        let Some(&p) = c.plan.priorities.get(&c.waiting.id) else {
            return Ok(());
        };
        let below: Vec<u64> = c.running()
            .filter(|j| c.plan.priorities.get(&j.id).is_some_and(|q| *q < p))
            .map(|j| j.id)
            .collect();
        let mut found = c.plan.reclaim.clone();
        found.sort_unstable();
        let mut below_sorted = below.clone();
        below_sorted.sort_unstable();
        prop_assert_eq!(below_sorted, found, "jobs below the in-quota job");
        let first: Vec<u64> = c.plan.state.victims.iter().take(c.plan.reclaim.len()).map(|v| v.job_id).collect();
        let mut first_sorted = first;
        first_sorted.sort_unstable();
        let mut reclaim = c.plan.reclaim.clone();
        reclaim.sort_unstable();
        prop_assert_eq!(first_sorted, reclaim);
    }

    /// Issue 29: ordered idle first, the published victims beyond those found for the job
    /// (phase 2's order) list every idle job before every other.
    #[test]
    fn idle_victims_come_first_where_configured(c in case()) {
        prop_assume!(c.idle_first);
        let rest: Vec<bool> = c.plan.state.victims
            .iter()
            .skip(c.plan.reclaim.len())
            .map(|v| c.idle.contains(&v.job_id))
            .collect();
        let first_busy = rest.iter().position(|idle| !idle).unwrap_or(rest.len());
        prop_assert!(rest[first_busy..].iter().all(|idle| !idle), "victims' idleness in order: {rest:?}");
    }
}
