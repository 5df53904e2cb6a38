//! A typed configuration (DESIGN §4, "per GPU type where quotas are typed"): each GPU type
//! planned as a pool of its own ([`plan_pool`]), the limits given as numbers shared between
//! the types, and the pools' plans merged.

use std::collections::{BTreeMap, BTreeSet};

use teamshare_config::{Config, Team, SHARE_TYPE};

use super::families::split_families;
use super::pool::{new_state, plan_pool, PoolPlan, StateInput};
use super::queues::is_outside;
use super::shared_gpus::SharedGpus;
use super::{ClusterJob, GovernInput, Phase, Plan, PoolState, PublishedState, TeamState};

/// GPUs in a governed partition outside every team: nothing governs them, so the governor
/// holds them (an administrator may release them into a team's account).
fn outside_jobs(input: &GovernInput<'_>) -> Vec<u64> {
    input
        .jobs
        .iter()
        .filter(|j| input.config.team(&j.team).is_none() && is_outside(j))
        .map(|j| j.id)
        .collect()
}

/// A typed configuration: each GPU type k is a pool of its own, governed by the same rules
/// with C_k, Q_{T,k}, B_{T,k} and L_{T,k} (DESIGN §4, "per GPU type where quotas are typed").
/// A job belongs to the pool of the type it names (a running job whose request named none, to
/// the type of its node); a team's limit of type k becomes `GrpTRES=gres/gpu:k=<limit>` and
/// its `gres/gpu` limit the sum over types.
///
/// A borrow or lend limit given as a number holds over all types together: the types are
/// planned in name order, each taking from what the earlier ones left of it (a team borrows
/// at most B_T in all; a pool with borrowers draws on at most L_T of the team's idle quota in
/// all, a pool without any draws on nothing). A table gives each type its own limit.
///
/// Levels (priorities) are per pool: a pending H100 job is priced above the first H100
/// victims only, and Slurm preempts only where the job can run, so victims of another type
/// sharing a level are never candidates where each node carries one GPU type.
pub(super) fn plan_typed(input: &GovernInput<'_>) -> Plan {
    let types = pool_types(input);
    let (pool_jobs, untyped) = jobs_by_pool(input, &types);
    // Family figures split into per-type ones for this pass.
    let split = split_families(input.config, &pool_jobs, input.capacity_by_type);
    let config = split.as_ref().unwrap_or(input.config);
    let used = running_by_team_and_type(&pool_jobs);
    let mut merged = Plan {
        priorities: BTreeMap::new(),
        changed: Vec::new(),
        gpu_limits: BTreeMap::new(),
        type_limits: BTreeMap::new(),
        displace: Vec::new(),
        reclaim: Vec::new(),
        violations: Vec::new(),
        over_ceiling: Vec::new(),
        outside: Vec::new(),
        untyped,
        park: Vec::new(),
        release: Vec::new(),
        displacing: Vec::new(),
        in_quota: Vec::new(),
        next_exempt_end: None,
        state: new_state(&StateInput::of(input), 0, 0, Vec::new()),
    };
    let mut spent = SpentAcrossTypes::default();
    let no_types = BTreeMap::new();
    let no_node_types = BTreeMap::new();
    let shared = SharedGpus::new(input, &pool_jobs);
    let mut stuck = Vec::new();
    for k in &types {
        let pool_config = pool_config(config, k, &types, &used, &spent);
        let mut node_gpus = node_gpus_of_type(input.node_types, k);
        let full = input.capacity_by_type.get(k).copied().unwrap_or(0);
        let mut capacity = full;
        if let Some(s) = &shared {
            s.lower_room(k, &mut node_gpus, &mut capacity);
        }
        let pool_input = GovernInput {
            config: &pool_config,
            capacity,
            jobs: &pool_jobs[k.as_str()],
            fairshare: input.fairshare,
            now: input.now,
            now_ms: input.now_ms,
            node_gpus: &node_gpus,
            capacity_by_type: &no_types,
            node_types: &no_node_types,
            idle: input.idle,
            shard_gpus: input.shard_gpus,
        };
        let mut pool = plan_pool(&pool_input);
        spent.add(config, &pool);
        stuck.extend(pool.stuck.iter().map(|id| (k.as_str(), *id)));
        // What a job may ever get is the type's GPUs, whatever the other pool holds now.
        pool.plan.state.capacity = full;
        merge_pool(&mut merged, k, pool.plan);
    }
    if let Some(s) = &shared {
        let freed = take_back_shared(input, s, &pool_jobs, &merged, &stuck);
        for id in freed {
            if !merged.reclaim.contains(&id) {
                merged.reclaim.push(id);
            }
        }
    }
    // Jobs outside every team, whatever their type (or none).
    merged.outside.extend(outside_jobs(input));
    for list in [
        &mut merged.outside,
        &mut merged.untyped,
        &mut merged.park,
        &mut merged.release,
    ] {
        list.sort_unstable();
        list.dedup();
    }
    finish(merged, input)
}

/// The figures a typed plan has over its pools: the jobs in quota, the next exemption's end.
fn finish(mut merged: Plan, input: &GovernInput<'_>) -> Plan {
    merged.in_quota = in_quota_by_level(input.jobs, &merged.priorities);
    merged.next_exempt_end = merged
        .state
        .victims
        .iter()
        .map(|v| v.exempt_until)
        .filter(|t| *t > input.now)
        .min();
    merged
}

/// The pending jobs a typed plan ranks at the no-preempt level or above (in quota, or
/// displacing a lower class), by id: what each pool's plan says of its own, over the pools.
fn in_quota_by_level(jobs: &[ClusterJob], priorities: &BTreeMap<u64, u32>) -> Vec<u64> {
    let mut ids: Vec<u64> = jobs
        .iter()
        .filter(|j| j.phase == Phase::Pending)
        .filter(|j| {
            priorities
                .get(&j.id)
                .is_some_and(|p| crate::priority::level(*p) >= crate::priority::VICTIM_BASE - 1)
        })
        .map(|j| j.id)
        .collect();
    ids.sort_unstable();
    ids.dedup();
    ids
}

/// The jobs to requeue for in-quota jobs that their own pool could place nowhere because the
/// other kind holds the GPUs: shard jobs for whole-GPU jobs of `s`'s type
/// ([`SharedGpus::take_back`]), whole-GPU jobs for shard jobs ([`SharedGpus::take_back_whole`]).
fn take_back_shared(
    input: &GovernInput<'_>,
    s: &SharedGpus,
    pool_jobs: &BTreeMap<&str, Vec<ClusterJob>>,
    merged: &Plan,
    stuck: &[(&str, u64)],
) -> Vec<u64> {
    let whole = s.whole();
    let jobs = |k: &str| pool_jobs.get(k).map_or(&[][..], Vec::as_slice);
    let waiting = |kind: &str| -> Vec<&ClusterJob> {
        stuck
            .iter()
            .filter(|(k, _)| *k == kind)
            .filter_map(|(_, id)| jobs(kind).iter().find(|j| j.id == *id))
            .collect()
    };
    let victims = |k: &str| {
        merged
            .state
            .pools
            .get(k)
            .map_or(&[][..], |p| p.victims.as_slice())
    };
    let mut out = Vec::new();
    let wholes = waiting(whole);
    if !wholes.is_empty() {
        let node_gpus = node_gpus_of_type(input.node_types, whole);
        let shards = jobs(SHARE_TYPE);
        out = s.take_back(&node_gpus, &wholes, shards, victims(SHARE_TYPE), input.now);
    }
    let shards = waiting(SHARE_TYPE);
    if !shards.is_empty() {
        out.extend(s.take_back_whole(&shards, jobs(whole), victims(whole), input.now));
    }
    out
}

/// The GPU types a typed configuration governs: those its quotas name and those the usable
/// nodes carry.
fn pool_types(input: &GovernInput<'_>) -> BTreeSet<String> {
    let mut types: BTreeSet<String> = input
        .config
        .governed_types()
        .into_iter()
        .map(str::to_string)
        .collect();
    types.extend(input.capacity_by_type.keys().cloned());
    types
}

/// The one GPU type of a node (none for untyped or mixed nodes).
fn node_type<'n>(
    node_types: &'n BTreeMap<String, BTreeMap<String, u32>>,
    node: &str,
) -> Option<&'n str> {
    let mut kinds = node_types
        .get(node)?
        .iter()
        .filter(|(k, n)| **n > 0 && k.as_str() != SHARE_TYPE);
    let (t, _) = kinds.next()?;
    kinds.next().is_none().then_some(t.as_str())
}

/// Every job in the pool of its GPU type, and the teams' pending jobs that have no type to
/// be governed against: those are held (their owner may resubmit naming a type); other
/// accounts' jobs without one are held as outside.
fn jobs_by_pool<'t>(
    input: &GovernInput<'_>,
    types: &'t BTreeSet<String>,
) -> (BTreeMap<&'t str, Vec<ClusterJob>>, Vec<u64>) {
    let mut pool_jobs: BTreeMap<&str, Vec<ClusterJob>> =
        types.iter().map(|t| (t.as_str(), Vec::new())).collect();
    let first_pool = types.iter().next().map(String::as_str);
    let mut untyped = Vec::new();
    for j in input.jobs {
        let kind = j.gpu_type.as_deref().or_else(|| {
            (j.phase == Phase::Running)
                .then(|| j.nodes.first().and_then(|n| node_type(input.node_types, n)))
                .flatten()
        });
        let pool = match kind {
            Some(k) => types.get(k).map(String::as_str),
            // A job without GPUs is governed with the first pool: it needs none of its GPUs.
            None if j.gpus == 0 => first_pool,
            None => None,
        };
        match pool.and_then(|p| pool_jobs.get_mut(p)) {
            Some(jobs) => jobs.push(j.clone()),
            None => {
                if j.phase == Phase::Pending
                    && input.config.team(&j.team).is_some()
                    && (j.priority != 0 || j.park_held)
                {
                    untyped.push(j.id);
                }
            }
        }
    }
    (pool_jobs, untyped)
}

/// U_{T,k}: the GPUs of type k team T runs, for the borrow limits shared between types.
fn running_by_team_and_type<'p>(
    pool_jobs: &'p BTreeMap<&'p str, Vec<ClusterJob>>,
) -> BTreeMap<(&'p str, &'p str), u32> {
    let mut used: BTreeMap<(&str, &str), u32> = BTreeMap::new();
    for (k, jobs) in pool_jobs {
        for j in jobs.iter().filter(|j| j.phase == Phase::Running) {
            let e = used.entry((j.team.as_str(), *k)).or_insert(0);
            *e = e.saturating_add(j.gpus);
        }
    }
    used
}

/// What a team borrows of type `k` now: what it runs of that type beyond its quota of it.
fn borrowed_in(used: &BTreeMap<(&str, &str), u32>, team: &Team, k: &str) -> u32 {
    used.get(&(team.name.as_str(), k))
        .copied()
        .unwrap_or(0)
        .saturating_sub(team.quota_of(k))
}

/// What the borrow and lend limits given as numbers have spent in the pools planned so far.
#[derive(Default)]
struct SpentAcrossTypes {
    borrowed: BTreeMap<String, u32>,
    lent: BTreeMap<String, u32>,
}

impl SpentAcrossTypes {
    /// A pool's allowances count against its teams' borrow limits; its lent idle quota counts
    /// against their lend limits only where the pool had borrowers (a pool without any draws
    /// on nothing).
    fn add(&mut self, config: &Config, pool: &PoolPlan) {
        let borrowing = pool.allowance.iter().any(|n| *n > 0);
        for (i, t) in config.teams.iter().enumerate() {
            if t.borrow_by_type.is_none() {
                let e = self.borrowed.entry(t.name.clone()).or_insert(0);
                *e = e.saturating_add(pool.allowance.get(i).copied().unwrap_or(0));
            }
            if t.lend_by_type.is_none() && borrowing {
                let e = self.lent.entry(t.name.clone()).or_insert(0);
                *e = e.saturating_add(pool.lends.get(i).copied().unwrap_or(0));
            }
        }
    }
}

/// The configuration pool `k` is planned with: each team's quota, borrow limit and lend limit
/// of that type. A limit given as a number is what is left of it: borrowing that runs in other
/// types now and what earlier pools gave or lent count against it.
fn pool_config(
    config: &Config,
    k: &str,
    types: &BTreeSet<String>,
    used: &BTreeMap<(&str, &str), u32>,
    spent: &SpentAcrossTypes,
) -> Config {
    let mut pool_config = config.clone();
    for t in &mut pool_config.teams {
        let quota = t.quota_of(k);
        let borrow = match t.borrow_limit_of(k) {
            Some(b) => Some(b),
            None => t.borrow_limit.map(|b| {
                let elsewhere = types
                    .iter()
                    .filter(|other| other.as_str() != k)
                    .fold(0u32, |s, other| {
                        s.saturating_add(borrowed_in(used, t, other))
                    });
                b.saturating_sub(elsewhere)
                    .saturating_sub(spent.borrowed.get(&t.name).copied().unwrap_or(0))
            }),
        };
        let lend = match t.lend_by_type {
            Some(_) => t.lend_limit_of(k),
            None => quota.min(
                t.lend_limit
                    .saturating_sub(spent.lent.get(&t.name).copied().unwrap_or(0)),
            ),
        };
        t.quota = teamshare_config::Quota {
            total: quota,
            by_type: BTreeMap::new(),
        };
        t.borrow_limit = borrow;
        t.borrow_by_type = None;
        t.lend_limit = lend;
        t.lend_by_type = None;
    }
    pool_config
}

/// GPUs of type `k` per usable node.
fn node_gpus_of_type(
    node_types: &BTreeMap<String, BTreeMap<String, u32>>,
    k: &str,
) -> BTreeMap<String, u32> {
    node_types
        .iter()
        .filter_map(|(node, kinds)| kinds.get(k).map(|n| (node.clone(), *n)))
        .collect()
}

/// Pool `k`'s plan added to the typed plan: its limits become the teams' type limits and add
/// up to their gres/gpu limits; its lists and state join the others.
fn merge_pool(merged: &mut Plan, k: &str, p: Plan) {
    merged.priorities.extend(p.priorities);
    // Shards hold no `gres/gpu` (Slurm counts them apart): their limit is `gres/shard`'s
    // alone, never part of the team's GPUs.
    let gpus = k != SHARE_TYPE;
    for (team, limit) in p.gpu_limits {
        let e = merged.gpu_limits.entry(team.clone()).or_insert(0);
        if gpus {
            *e = e.saturating_add(limit);
        }
        merged
            .type_limits
            .entry(team)
            .or_default()
            .insert(k.to_string(), limit);
    }
    merged.displace.extend(p.displace);
    merged.reclaim.extend(p.reclaim);
    merged.violations.extend(p.violations);
    merged.over_ceiling.extend(p.over_ceiling);
    merged.outside.extend(p.outside);
    merged.park.extend(p.park);
    merged.release.extend(p.release);
    merged.displacing.extend(p.displacing);
    merge_pool_state(&mut merged.state, k, p.state);
}

/// Pool `k`'s state kept as the pool's, and added into the totals the plugin reads.
fn merge_pool_state(st: &mut PublishedState, k: &str, pool: PublishedState) {
    if k != SHARE_TYPE {
        add_pool_totals(st, &pool);
    }
    st.victims.extend(pool.victims.iter().cloned());
    st.pools.insert(
        k.to_string(),
        PoolState {
            capacity: pool.capacity,
            free_gpus: pool.free_gpus,
            pending_in_quota_gpus: pool.pending_in_quota_gpus,
            reclaim_gpus: pool.reclaim_gpus,
            spare_gpus: pool.spare_gpus,
            teams: pool.teams,
            victims: pool.victims,
        },
    );
}

/// A pool's GPUs added into the totals the plugin reads (shards are not GPUs: their pool
/// stays apart).
fn add_pool_totals(st: &mut PublishedState, pool: &PublishedState) {
    st.free_gpus = st.free_gpus.saturating_add(pool.free_gpus);
    st.pending_in_quota_gpus = st
        .pending_in_quota_gpus
        .saturating_add(pool.pending_in_quota_gpus);
    st.reclaim_gpus = st.reclaim_gpus.saturating_add(pool.reclaim_gpus);
    st.spare_gpus = match (st.spare_gpus, pool.spare_gpus) {
        (Some(a), Some(b)) => Some(a.saturating_add(b)),
        (a, b) => a.or(b),
    };
    for (team, ts) in &pool.teams {
        let e = st.teams.entry(team.clone()).or_insert(TeamState {
            running_gpus: 0,
            pending_in_quota_gpus: 0,
            gpu_limit: 0,
        });
        e.running_gpus = e.running_gpus.saturating_add(ts.running_gpus);
        e.pending_in_quota_gpus = e
            .pending_in_quota_gpus
            .saturating_add(ts.pending_in_quota_gpus);
        e.gpu_limit = e.gpu_limit.saturating_add(ts.gpu_limit);
    }
}
