//! One pool of GPUs planned: the phases of DESIGN §4 in order over one pass ([`decide`], which
//! a [`Planner`](super::Planner) runs too), and the plan and state they make.

use std::cell::OnceCell;
use std::collections::BTreeMap;

use super::limits::team_gpu_limits;
use super::nodes::{LazyNodes, PassNodes};
use super::parking::jobs_to_park;
use super::pending::{sort_pending_borrow_first, Pending};
use super::priorities::{
    prioritise_borrowers, prioritise_fitting, prioritise_granted, prioritise_tails,
    prioritise_waiting, Priorities,
};
use super::queues::{Entry, Queues, Sink, Tail};
use super::reclaim;
use super::reclaim_phase::{placement_known, reclaim_phase, Reclaim};
use super::rules::Rules;
use super::running::{sort_running, Running, TeamRunning};
use super::sharing::share_idle_capacity;
use super::victims::{order_victims, Ranked};
use super::{ClusterJob, GovernInput, Plan, PublishedState, TeamState, Victim, STATE_VERSION};

/// What a pass reads besides the jobs.
pub(super) struct Pass<'a> {
    /// C: GPUs of usable nodes in the governed partitions.
    pub capacity: u32,
    /// Fair-share factor per team (missing: 1.0).
    pub fairshare: &'a BTreeMap<String, f64>,
    pub now: i64,
    pub now_ms: i64,
    pub nodes: PassNodes<'a>,
}

/// Each pending array record as the tasks it stands for, so that every phase counts them as
/// the demand they are. No more tasks than could ever hold the cluster's GPUs at once: a task
/// beyond that changes no decision, so a 100,000-task array costs the plan no more than the
/// cluster's size.
fn expand_arrays(jobs: &[ClusterJob], capacity: u32) -> Option<Vec<ClusterJob>> {
    if jobs.iter().all(|j| j.tasks <= 1) {
        return None;
    }
    let mut out = Vec::with_capacity(jobs.len());
    for j in jobs {
        let fit = if j.gpus == 0 {
            1
        } else {
            capacity.div_ceil(j.gpus).saturating_add(1)
        };
        let n = j.tasks.min(fit).max(1);
        for _ in 0..n {
            out.push(ClusterJob {
                tasks: 1,
                ..j.clone()
            });
        }
    }
    Some(out)
}

/// What [`plan_pool`] decided for one pool of GPUs.
pub(super) struct PoolPlan {
    pub plan: Plan,
    /// Each team's allowance beyond its quota, by its place in the configuration (for the
    /// borrow limits shared between types).
    pub allowance: Vec<u32>,
    /// What each team's idle quota offered to borrowers, by its place in the configuration
    /// (for the lend limits shared between types).
    pub lends: Vec<u32>,
    /// In-quota jobs that can start and that this pool's GPUs cannot take
    /// ([`reclaim::Reclaimed::stuck`]).
    pub stuck: Vec<u64>,
}

/// One pool of GPUs, governed by the rules of DESIGN §4 with the configuration's quotas and
/// limits as totals, phase by phase.
pub(super) fn plan_pool(input: &GovernInput<'_>) -> PoolPlan {
    let expanded = expand_arrays(input.jobs, input.capacity);
    let jobs = expanded.as_deref().unwrap_or(input.jobs);
    let config = input.config;
    let rules = Rules::new(config).with_idle(input.idle);
    let mut queues = Queues::from_jobs(&rules, jobs);
    let mut outside = std::mem::take(&mut queues.outside);
    outside.sort_unstable();
    outside.dedup(); // an array's tasks
    let pass = Pass {
        capacity: input.capacity,
        fairshare: input.fairshare,
        now: input.now,
        now_ms: input.now_ms,
        nodes: PassNodes::Given(input.node_gpus),
    };
    let mut priorities = Priorities::default();
    let d = decide(&rules, &pass, &queues, &mut priorities, None);
    assemble(
        d,
        priorities.into_map(),
        outside,
        &StateInput::of(input),
        true,
    )
}

/// What a pass's state is made from besides what the phases decided.
pub(super) struct StateInput<'a> {
    pub config: &'a teamshare_config::Config,
    pub capacity: u32,
    pub capacity_by_type: &'a BTreeMap<String, u32>,
    pub fairshare: &'a BTreeMap<String, f64>,
    pub now: i64,
}

impl<'a> StateInput<'a> {
    pub(super) fn of(input: &GovernInput<'a>) -> StateInput<'a> {
        StateInput {
            config: input.config,
            capacity: input.capacity,
            capacity_by_type: input.capacity_by_type,
            fairshare: input.fairshare,
            now: input.now,
        }
    }
}

/// The plan of one pool from what its phases decided (`d`), the priorities it sets and the
/// jobs outside every team; its state only where `publish` (else the default): [`plan_pool`]
/// and a [`Planner`](super::Planner) alike.
pub(super) fn assemble(
    d: Decided<'_>,
    priorities: BTreeMap<u64, u32>,
    outside: Vec<u64>,
    input: &StateInput<'_>,
    publish: bool,
) -> PoolPlan {
    let config = input.config;
    let next_exempt_end = d
        .victims
        .iter()
        .map(|v| v.exempt_until)
        .filter(|t| *t > input.now)
        .min();
    let mut in_quota: Vec<u64> = d.in_quota.iter().map(|e| e.id).collect();
    in_quota.sort_unstable();
    in_quota.dedup(); // an array's tasks
    let state = if publish {
        let mut state = new_state(
            input,
            d.free,
            d.pending_in_quota_gpus,
            d.victims.iter().map(Ranked::victim).collect(),
        );
        state.reclaim_gpus = d.reclaim_gpus;
        state.spare_gpus = d.spare;
        state.teams = config
            .teams
            .iter()
            .zip(d.team_states)
            .map(|(t, s)| (t.name.clone(), s))
            .collect();
        state
    } else {
        PublishedState::default()
    };
    let plan = Plan {
        priorities,
        changed: Vec::new(),
        gpu_limits: config
            .teams
            .iter()
            .zip(&d.gpu_limits)
            .map(|(t, l)| (t.name.clone(), *l))
            .collect(),
        type_limits: BTreeMap::new(),
        displace: d.displace,
        reclaim: d.reclaim,
        violations: d.violations,
        over_ceiling: d.over_ceiling,
        outside,
        untyped: Vec::new(),
        park: d.park,
        release: d.release,
        displacing: d.displacing,
        in_quota,
        next_exempt_end,
        state,
    };
    PoolPlan {
        plan,
        allowance: d.allowance,
        lends: d.lends,
        stuck: d.stuck,
    }
}

/// What the phases decided in one pass (the plan less its priorities, which went to the
/// sink).
pub(super) struct Decided<'a> {
    /// The running borrowed jobs in reclaim order.
    pub victims: Vec<Ranked<'a>>,
    /// C less the GPUs the teams' running jobs hold.
    free: u32,
    /// Σ GPUs of pending jobs that fit their team's unused quota.
    pending_in_quota_gpus: u32,
    /// The GPUs of the victims those jobs need, placed, and the free GPUs they leave.
    reclaim_gpus: u32,
    spare: Option<u32>,
    /// Pending jobs that fit their team's quota or displace a lower class.
    pub in_quota: Vec<Entry<'a>>,
    /// Of them, those that displace a lower class.
    pub displacing: Vec<u64>,
    pub displace: Vec<u64>,
    pub reclaim: Vec<u64>,
    pub violations: Vec<u64>,
    pub over_ceiling: Vec<u64>,
    pub park: Vec<u64>,
    pub release: Vec<u64>,
    /// By team, by its place in the configuration.
    team_states: Vec<TeamState>,
    pub gpu_limits: Vec<u32>,
    allowance: Vec<u32>,
    lends: Vec<u32>,
    /// Per team, how many of its queued jobs were walked one by one (the rest is its tail).
    pub walked: Vec<usize>,
    /// The places of the borrowers lent to ([`prioritise_granted`]): a [`Planner`](super::Planner)
    /// writes their priorities again at its next pass (their tail's level no longer says theirs).
    pub granted: Vec<usize>,
    /// In-quota jobs that can start and fit nowhere ([`reclaim::Reclaimed::stuck`]).
    pub stuck: Vec<u64>,
}

/// The phases of DESIGN §4 over one pass's queues: per-team usage, what runs inside each
/// quota (protected) and what is borrowed (victims), then what waits and fits the unused
/// quota, displaces a lower class or borrows; reclaim, parking, idle sharing and ceilings.
pub(super) fn decide<'a>(
    rules: &Rules<'_>,
    pass: &Pass<'_>,
    queues: &'a Queues<'a>,
    priorities: &mut dyn Sink,
    kept: Option<&mut [Option<TeamRunning>]>,
) -> Decided<'a> {
    let config = rules.config;
    let mut kept = kept;
    let mut running = sort_running(rules, queues, priorities, kept.as_deref_mut());
    let victims = order_victims(
        rules,
        std::mem::take(&mut running.victims),
        pass.now,
        priorities,
    );
    let free = pass.capacity.saturating_sub(gpus_in_use(&running));
    let nodes = LazyNodes {
        nodes: pass.nodes,
        queues,
        room: OnceCell::new(),
    };
    let pending = sort_pending_borrow_first(rules, pass, queues, &running, &nodes);
    let pending_in_quota_gpus = pending
        .in_quota
        .iter()
        .fold(0u32, |s, j| s.saturating_add(j.gpus));

    // Reclaim for in-quota jobs, then parking, idle sharing and the borrowers' bands.
    let Reclaim {
        victims,
        level: in_quota_level,
        requeue: reclaim,
        gpus: reclaim_gpus,
        spare,
        room,
        holds,
        stuck,
    } = reclaim_phase(
        rules,
        (pass.now, pass.now_ms),
        &running,
        victims,
        &pending,
        &nodes,
        free,
        priorities,
        kept,
    );
    let room = lending_room(room, &pending, &nodes);
    let release = prioritise_fitting(rules, in_quota_level, &pending, priorities);
    let park = jobs_to_park(rules, queues, &pending);
    let shares = share_idle_capacity(rules, pass, queues, &running, &pending, room, &holds);
    prioritise_borrowers(rules, &shares.served, priorities);
    prioritise_waiting(rules, &pending.waiting, priorities);
    prioritise_tails(rules, &pending.tails, &shares.bands, priorities);
    prioritise_granted(rules, &shares.granted, priorities);

    // Ceilings.
    let mut team_states = pending.team_states;
    let gpu_limits = team_gpu_limits(config, &running, &shares.allowance, &mut team_states);
    let walked = walked(queues, &pending.tails);
    let mut in_quota = pending.in_quota;
    let displacing = pending.displacing.iter().map(|e| e.id).collect();
    in_quota.extend(pending.displacing);
    Decided {
        granted: shares.granted.iter().map(|e| e.slot).collect(),
        walked,
        victims,
        free,
        pending_in_quota_gpus,
        reclaim_gpus,
        spare,
        in_quota,
        displacing,
        displace: pending.displace,
        reclaim,
        violations: running.violations,
        over_ceiling: running.over_ceiling,
        park,
        release,
        team_states,
        gpu_limits,
        allowance: shares.allowance,
        lends: shares.lends,
        stuck,
    }
}

/// Lending by placement: the idle GPUs the in-quota jobs leave (`room`, where reclaim placed
/// them), or the nodes' free GPUs where it did not and the nodes are known.
fn lending_room(
    room: Option<reclaim::Room>,
    pending: &Pending<'_>,
    nodes: &LazyNodes<'_, '_>,
) -> Option<reclaim::Room> {
    match room {
        Some(room) => Some(room),
        None if pending.has_any_borrowers() => {
            placement_known(nodes).then(|| reclaim::Room::new(nodes.get()))
        }
        None => None,
    }
}

/// Per team, how many of its queued jobs the pass walked one by one (the rest is its tail).
fn walked(queues: &Queues<'_>, tails: &[Tail<'_>]) -> Vec<usize> {
    tails
        .iter()
        .enumerate()
        .map(|(t, tail)| queues.pending(t).len() - tail.len())
        .collect()
}

/// The GPUs teams' running jobs hold in all.
fn gpus_in_use(running: &Running<'_>) -> u32 {
    running.usage.iter().fold(0u32, |s, u| s.saturating_add(*u))
}

/// The state a pass publishes, before its teams are filled in.
pub(super) fn new_state(
    input: &StateInput<'_>,
    free_gpus: u32,
    pending_in_quota_gpus: u32,
    victims: Vec<Victim>,
) -> PublishedState {
    PublishedState {
        version: STATE_VERSION,
        generated_at: input.now,
        config_digest: input.config.digest.clone(),
        capacity: input.capacity,
        capacity_by_type: input.capacity_by_type.clone(),
        free_gpus,
        pending_in_quota_gpus,
        reclaim_gpus: 0,
        spare_gpus: None,
        teams: BTreeMap::new(),
        victims,
        acted_at: 0,
        read_at_ms: 0,
        pools: BTreeMap::new(),
        slurm_partitions: None,
        node_gpus: 0,
        node_gpus_by_type: BTreeMap::new(),
        unsettled_gpus: 0,
        unsettled_gpus_by_type: BTreeMap::new(),
        bands: super::sharing::published_bands(&Rules::new(input.config), input.fairshare),
    }
}
