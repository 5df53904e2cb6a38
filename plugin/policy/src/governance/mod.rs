//! The governor's plan: from what runs and waits now, the priority of every governed job, the
//! GPU ceiling of every team, the jobs the governor must act on itself, and the state the
//! plugin reads.
//!
//! DESIGN §4, rule by rule:
//! 1. ceiling: each team's Slurm account carries `GrpTRES=gres/gpu=<limit>`, never above
//!    quota + borrow limit;
//! 2. guarantee: running jobs inside their team's quota get the protected band, above any
//!    pending job, so nothing preempts them;
//! 3. reclaim: running borrowed jobs get victim levels in reclaim order, and a pending job that
//!    fits its team's unused quota gets the level just above the victims it needs, so those
//!    are the only candidates Slurm may preempt; when they cannot make room where the job
//!    fits, the governor requeues victims itself where it does (the fallback);
//! 4. borrowing only on lendable capacity: a team's limit exceeds its quota only by the share
//!    of lendable idle capacity it is given;
//! 5. idle sharing: that share goes to waiting teams by fair-share factor or by age (fifo);
//! 6. classes: higher classes rank first inside a team; a pending higher-class job at quota
//!    displaces the team's lowest-class job (the governor requeues it); non-preemptible classes
//!    run only inside the quota: parked while they do not fit, requeued if found beyond it.
//!
//! Only a job that can start now (not waiting for a begin time, a dependency or a hold)
//! reclaims, displaces or reserves quota. Jobs in a governed partition that hold or ask for
//! GPUs outside any team are listed for the governor to hold.
//!
//! The phases, one module each, in the order a pass runs them (`pool::decide`):
//! - `running`: phase 1, each team's running jobs inside its quota (protected) or beyond it;
//! - `victims`: phase 2, the borrowed jobs in reclaim order and their levels;
//! - `pending`: phase 3, each team's pending jobs in quota, displacing a lower class
//!   (`displace`) or waiting to borrow;
//! - `reclaim_phase`: phase 4, the victims the in-quota jobs need (`reclaim`: by placement);
//! - `parking` and `priorities`: rule 6's parking, and the priorities of the pending jobs;
//! - `sharing`: phase 5, idle capacity shared out among the borrowers' teams (`allowance`:
//!   one team's borrowers);
//! - `limits`: rule 1, each team's GPU limit and the jobs beyond its ceiling.
//!
//! Beside them, [`idleness`] decides which running jobs were idle for the whole idle window
//! (rule 3's idle-first order reads the set; the governor and the replay compute it).
//!
//! What they share: `rules` (the configuration read once), `queues` (the jobs of a pass as
//! the phases walk them) and `nodes` (where the GPUs are). `pool` plans one pool of GPUs,
//! `typed` a typed configuration's pools; [`Planner`] keeps the queues between passes.
//!
//! Pure: the caller reads Slurm and applies the plan.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use teamshare_config::Config;

use crate::priority;

mod allowance;
mod displace;
pub mod families;
pub mod idleness;
mod limits;
mod nodes;
mod parking;
mod pending;
mod planner;
mod pool;
mod priorities;
mod queues;
mod reclaim;
mod reclaim_phase;
mod rules;
mod running;
mod shared_gpus;
mod sharing;
mod typed;
mod victim_slots;
mod victims;

use pool::plan_pool;
use typed::plan_typed;

pub use planner::{PassInput, Planner};

/// A priority class as the policy uses it; index 0 is "no class".
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Class {
    pub name: String,
    pub value: u32,
    pub preemptible: bool,
}

/// The class table: index 0 is "no class" (value 0, preemptible), then the configuration's
/// classes in file order.
pub fn classes(config: &Config) -> Vec<Class> {
    let mut v = vec![Class {
        name: String::new(),
        value: 0,
        preemptible: true,
    }];
    v.extend(
        config
            .priority_classes
            .iter()
            .take(priority::MAX_CLASSES)
            .map(|c| Class {
                name: c.name.clone(),
                value: c.value,
                preemptible: c.preemptible,
            }),
    );
    v
}

/// A class's place in a borrow band ([`priority::borrow_band`]): how many distinct class
/// values of [`classes`] are below its value; an index beyond the table counts as "no class".
/// Allocates nothing (the plugin's submit path reads it).
pub fn class_rank(config: &Config, class_index: u8) -> u32 {
    let values = || {
        std::iter::once(0).chain(
            config
                .priority_classes
                .iter()
                .take(priority::MAX_CLASSES)
                .map(|c| c.value),
        )
    };
    let own = values().nth(usize::from(class_index)).unwrap_or(0);
    let below = values()
        .enumerate()
        .filter(|&(i, v)| v < own && !values().take(i).any(|w| w == v))
        .count();
    u32::try_from(below).unwrap_or(u32::MAX)
}

/// The index of a class name in [`classes`].
pub fn class_index(config: &Config, name: &str) -> Option<u8> {
    config
        .priority_classes
        .iter()
        .take(priority::MAX_CLASSES)
        .position(|c| c.name == name)
        .map(|i| (i + 1) as u8)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    Pending,
    Running,
}

/// GPUs of a job whose request could not be read: it is treated as never fitting anywhere
/// (never in quota, never given an allowance), so no value a user writes can widen a limit.
pub const UNREADABLE_GPUS: u32 = u32::MAX;

/// A job in a governed partition as squeue shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterJob {
    pub id: u64,
    /// The job's account (a team when it is one of the configuration's).
    pub team: String,
    pub phase: Phase,
    /// GPUs held (running) or asked for (pending); [`UNREADABLE_GPUS`] when unreadable.
    pub gpus: u32,
    /// The GPU type the job holds or asks for, where it names one (or Slurm's allocation
    /// shows one); `None` for untyped GPUs. A typed configuration governs each type apart
    /// ([`plan`]).
    pub gpu_type: Option<String>,
    /// Slurm's current priority: carries the class; 0 means held.
    pub priority: u32,
    pub submit: i64,
    pub start: Option<i64>,
    /// Pending for resources or limits only (not a begin time, dependency or hold): GPUs
    /// given to its team would start it.
    pub eligible: bool,
    /// A pending job's begin time when teamshare parked it (see [`PARK_SECS`]).
    pub parked: bool,
    /// A pending job teamshare parked with an administrator's hold (priority 0, marked with
    /// [`PARK_HOLD_MARK`] in its AdminComment): its owner cannot release it; the governor does
    /// when it fits. `eligible` then says whether its begin time and dependencies allow it to
    /// start once released.
    pub park_held: bool,
    /// A batch job (requeue works); interactive allocations (salloc, srun) can only be
    /// cancelled.
    pub batch: bool,
    /// The nodes a running job holds (empty when unknown); for a pending job, the nodes
    /// Slurm's backfill reserved for it (its SchedNodes; empty when it reserved none).
    pub nodes: Vec<String>,
    /// Nodes the job runs on or asks for at least (squeue's NumNodes).
    pub node_count: u32,
    /// A running job that is ending (squeue CG): its GPUs are about to be free.
    pub completing: bool,
    /// Pending tasks this record stands for: 1 for a job or a single array task; for the
    /// record of a job array's pending tasks, as many as may start (its throttle minus its
    /// running tasks). Each task asks for `gpus`: [`plan`] counts every task as demand, and
    /// acts on the record as a whole (one priority, one hold).
    pub tasks: u32,
}

impl ClusterJob {
    /// Whether GPUs given to its team would start it now: eligible, or parked by teamshare
    /// (the governor releases it when it fits).
    fn startable(&self) -> bool {
        self.phase == Phase::Pending
            && (self.priority != 0 || self.park_held)
            && (self.eligible || self.parked)
    }
}

/// A non-preemptible job that does not fit its team's quota is parked: its begin time is set
/// this far ahead, so it cannot start on borrowed GPUs (the team's GPU limit cannot tell classes
/// apart), and the governor holds it (see [`PARK_HOLD_MARK`]). The governor releases it and
/// sets its begin time back to now once the job fits.
pub const PARK_SECS: i64 = 365 * 24 * 3600;

/// A begin time at least this far ahead is teamshare's parking, not the user's `--begin`.
pub const PARKED_AFTER_SECS: i64 = 300 * 24 * 3600;

/// How a parked job's AdminComment starts when the governor holds it. The plugin can only park
/// by begin time at submit, which the owner may move (`scontrol update StartTime=now`); the
/// governor then adds an administrator's hold, which only an administrator can release.
pub const PARK_HOLD_MARK: &str = "teamshare: parked";

pub struct GovernInput<'a> {
    pub config: &'a Config,
    /// C: GPUs of usable nodes in the governed partitions.
    pub capacity: u32,
    /// Every job in the governed partitions (teams' and others').
    pub jobs: &'a [ClusterJob],
    /// Fair-share factor per team (missing: 1.0).
    pub fairshare: &'a BTreeMap<String, f64>,
    pub now: i64,
    /// The same instant in milliseconds (the reclaim fallback's wait,
    /// [`RECLAIM_FALLBACK_MS`]); `now * 1000` where only seconds are known.
    pub now_ms: i64,
    /// GPUs per usable node of the governed partitions (empty: placement unknown).
    pub node_gpus: &'a BTreeMap<String, u32>,
    /// C_k: GPUs of each type on usable nodes of the governed partitions (typed
    /// configurations).
    pub capacity_by_type: &'a BTreeMap<String, u32>,
    /// GPUs of each type per usable node (typed configurations; a node with untyped GPUs is
    /// absent or empty).
    pub node_types: &'a BTreeMap<String, BTreeMap<String, u32>>,
    /// The running jobs whose GPUs were idle for the whole `[governance] idle_window`, by
    /// their GPU samples (issue 29): with `idle_first_reclaim` they are the first victims of
    /// rule 3; with an idle policy whose action is `"reclaim-first"`, the jobs it acted on.
    /// A job without samples is not idle (its idleness is unknown).
    pub idle: &'a BTreeSet<u64>,
    /// Where each running shard job's shards are (a configuration governing `gres/shard`):
    /// per node, the index of the GPU they share. A job missing here holds the fewest GPUs
    /// its shards can.
    pub shard_gpus: &'a ShardPlaces,
}

/// Per running shard job, each node it holds shards on and the index of the GPU there (Slurm
/// takes a job's shards on a node from one GPU).
pub type ShardPlaces = BTreeMap<u64, Vec<(String, u32)>>;

/// No shard placed: for callers without shards, or that cannot tell where they are.
pub static NO_SHARD_PLACES: ShardPlaces = ShardPlaces::new();

/// What the plugin reads (published atomically by the governor as JSON).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PublishedState {
    pub version: u32,
    pub generated_at: i64,
    /// The digest of the teamshare.toml the plan was made from (`Config::digest`): a plugin
    /// holding another version treats the state as stale rather than mixing two sets of rules.
    pub config_digest: String,
    pub capacity: u32,
    /// The capacity per GPU type (typed GPUs only; untyped ones count in `capacity` alone).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub capacity_by_type: BTreeMap<String, u32>,
    pub free_gpus: u32,
    /// Σ GPUs of pending jobs that fit their team's unused quota.
    pub pending_in_quota_gpus: u32,
    /// The GPUs of the victims those jobs need where each then fits (the first victims).
    #[serde(default)]
    pub reclaim_gpus: u32,
    /// Free GPUs their placements leave; absent where placement is unknown (a submission is
    /// then priced by GPUs across the cluster: [`PublishedState::reclaim_level`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spare_gpus: Option<u32>,
    pub teams: BTreeMap<String, TeamState>,
    /// Running borrowed jobs in reclaim order (first victim first): the victims the pending
    /// in-quota jobs need first, then the other borrowed jobs.
    pub victims: Vec<Victim>,
    /// `generated_at` of the newest plan whose actions (limits, priorities, requeues) have all
    /// been applied in Slurm; 0 while none has. The governor acts on plans beside its passes,
    /// so this lags `generated_at` by the actions' duration.
    #[serde(default)]
    pub acted_at: i64,
    /// When the pass began to read Slurm's jobs (ms since the epoch, the governor's clock):
    /// the state counts every job submitted before (see `submit::Admitted`). 0: not known.
    #[serde(default)]
    pub read_at_ms: i64,
    /// A typed configuration's state per GPU type (DESIGN §4 "per GPU type where quotas are
    /// typed"); the figures above are then the sums over types. Empty when untyped.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub pools: BTreeMap<String, PoolState>,
    /// Every partition Slurm has and the GPUs on its nodes, whatever their state, as the pass
    /// read them; `None` where the reader could not tell. The plugin refuses a reloaded
    /// teamshare.toml that these say cannot govern the cluster ([`crate::offered`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slurm_partitions: Option<crate::offered::Offered>,
    /// The most GPUs on one usable node of the governed partitions, and of each type: what a
    /// whole-node (`--exclusive`) job is counted as per node ([`crate::submit::apply_whole_nodes`]).
    #[serde(default)]
    pub node_gpus: u32,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub node_gpus_by_type: BTreeMap<String, u32>,
    /// GPUs of governed nodes out of `capacity` only because slurmctld has not heard from them
    /// (not responding, state unknown: just after slurmctld restarted), in all and per type:
    /// neither down nor drained, they count for what a job could ever get (DESIGN §4 rule 7),
    /// not for what may be lent.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub unsettled_gpus: u32,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub unsettled_gpus_by_type: BTreeMap<String, u32>,
    /// Each team's borrow band slot ([`priority::borrow_band`]) by this pass's fair-share
    /// order (all 0 under fifo): the plugin queues a borrower in its band when it is
    /// submitted, so that the governor has no priority to write for it. Empty where a
    /// governor of an older release wrote the state (the plugin then queues borrowers at
    /// [`priority::BORROW_BASE`], to be ranked by the next pass).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub bands: BTreeMap<String, u32>,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// One GPU type's share of the state: what the plugin needs to judge a job asking for that
/// type.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PoolState {
    /// C_k.
    pub capacity: u32,
    pub free_gpus: u32,
    pub pending_in_quota_gpus: u32,
    #[serde(default)]
    pub reclaim_gpus: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spare_gpus: Option<u32>,
    /// Each team's running GPUs, pending in-quota GPUs and GPU limit of this type.
    pub teams: BTreeMap<String, TeamState>,
    /// Running borrowed jobs of this type in reclaim order.
    pub victims: Vec<Victim>,
}

impl PoolState {
    /// [`PublishedState::reclaim_level`] among this type's victims.
    pub fn reclaim_level(&self, k: u32, now: i64) -> u32 {
        reclaim_level_in(&self.victims, k, now)
    }
}

/// Version 3 adds the per-type `pools`: a plugin reading version 2 in a typed configuration
/// would judge typed jobs on totals.
pub const STATE_VERSION: u32 = 3;

/// How long an in-quota job may wait with victims available before the governor requeues
/// them itself. Slurm's scheduler normally preempts within a second of submission (0.2-0.9 s
/// measured) when the job's candidate victims let it in; when they do not (a multi-GPU job
/// whose first victims sit on different nodes), or when several reclaiming jobs arrive
/// together and one takes the GPUs another's preemption freed (Slurm was seen waiting 15 s
/// before preempting again), the governor acts. Victims already completing count as freeing.
///
/// The wait is measured in milliseconds and counted for certain: Slurm's submit time is whole
/// seconds, so from the end of the job's submit second ([`reclaim_fallback_due_ms`]); before,
/// the whole-second difference let the governor requeue 0.17-0.54 s after a submission,
/// possibly before Slurm's own preemption had its turn (issue 25, finding 18).
pub const RECLAIM_FALLBACK_MS: i64 = 1_000;

/// When (ms since the epoch) the reclaim fallback may act for a job submitted in second
/// `submit`: [`RECLAIM_FALLBACK_MS`] after the latest instant it can have been submitted.
pub fn reclaim_fallback_due_ms(submit: i64) -> i64 {
    submit
        .saturating_add(1)
        .saturating_mul(1_000)
        .saturating_add(RECLAIM_FALLBACK_MS)
}

/// Whether an in-quota job submitted in second `submit` has waited the fallback's delay for
/// certain at `now_ms`.
fn waited_for_fallback(now_ms: i64, submit: i64) -> bool {
    now_ms >= reclaim_fallback_due_ms(submit)
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TeamState {
    pub running_gpus: u32,
    pub pending_in_quota_gpus: u32,
    pub gpu_limit: u32,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Victim {
    pub job_id: u64,
    pub team: String,
    pub gpus: u32,
    pub level: u32,
    /// Slurm's PreemptExemptTime protects it until then.
    pub exempt_until: i64,
    /// The type of its GPUs (typed configurations).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_type: Option<String>,
}

impl PublishedState {
    pub fn from_json(text: &str) -> Result<PublishedState, String> {
        let s: PublishedState =
            serde_json::from_str(text).map_err(|e| format!("unreadable state: {e}"))?;
        if s.version != STATE_VERSION {
            return Err(format!(
                "state version {} is not the {} this plugin reads",
                s.version, STATE_VERSION
            ));
        }
        Ok(s)
    }

    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("state serialises")
    }

    /// The reclaim level for pending in-quota jobs when `k` victims' GPUs are needed in all:
    /// just above the k-th victim Slurm may still preempt (younger ones are exempt and
    /// skipped). Only those victims have a lower priority than the job, so only they are
    /// preemption candidates: preempt/qos orders its candidates by QOS priority and node count
    /// only (read in Slurm 22.05.8's preempt_qos.c), so a level above every victim would let
    /// Slurm pick the oldest-submitted borrowed job instead of rule 3's first victim (seen
    /// live: victim 8 planned, 5 preempted). Placement the prefix cannot satisfy is the
    /// governor's fallback's job ([`RECLAIM_FALLBACK_MS`]).
    pub fn reclaim_level(&self, k: u32, now: i64) -> u32 {
        reclaim_level_in(&self.victims, k, now)
    }
}

/// The reclaim level for `k` GPUs among `victims` (see [`PublishedState::reclaim_level`]).
pub fn reclaim_level_in(victims: &[Victim], k: u32, now: i64) -> u32 {
    reclaim_level_by(
        victims.iter().map(|v| (v.gpus, v.exempt_until, v.level)),
        k,
        now,
    )
}

/// [`reclaim_level_in`] over the victims' GPUs, exempt times and levels, in reclaim order:
/// just above the level of the last victim needed (or of the last one).
fn reclaim_level_by(victims: impl Iterator<Item = (u32, i64, u32)>, k: u32, now: i64) -> u32 {
    if k == 0 {
        return priority::reclaim_level(0);
    }
    let above = |level: u32| {
        level
            .saturating_add(1)
            .clamp(priority::reclaim_level(1), priority::PROTECTED_BASE - 1)
    };
    let mut needed = k;
    let mut last = None;
    for (gpus, exempt_until, level) in victims {
        last = Some(level);
        if exempt_until > now {
            continue;
        }
        needed = needed.saturating_sub(gpus.max(1));
        if needed == 0 {
            return above(level);
        }
    }
    last.map_or(priority::reclaim_level(0), above)
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct Plan {
    /// The priority every governed, non-held job should have: from [`plan`], and from a
    /// [`Planner`] asked for all ([`PassInput::all_priorities`]; empty otherwise).
    pub priorities: BTreeMap<u64, u32>,
    /// From a [`Planner`]: the priorities that differ from what its previous pass gave, by job
    /// id (all of them at its first pass); empty from [`plan`].
    pub changed: Vec<(u64, u32)>,
    /// GrpTRES gres/gpu per team (in a typed configuration, the sum of its type limits).
    pub gpu_limits: BTreeMap<String, u32>,
    /// GrpTRES gres/gpu:TYPE per team and type (typed configurations; empty otherwise).
    pub type_limits: BTreeMap<String, BTreeMap<String, u32>>,
    /// Running jobs to requeue so a higher class of the same team can run.
    pub displace: Vec<u64>,
    /// Borrowed jobs to requeue for in-quota jobs Slurm has not started within
    /// [`RECLAIM_FALLBACK_MS`].
    pub reclaim: Vec<u64>,
    /// Running non-preemptible jobs found beyond their team's quota (released from parking
    /// by their owner, or a quota lowered under them): requeued, then parked until they fit.
    pub violations: Vec<u64>,
    /// Running borrowed jobs beyond their team's ceiling (quota + borrow limit), as after an
    /// administrator lowered the limit under what the team runs: requeued (rule 1 holds at
    /// all times), the team's lowest class and most recently started first, only as many as
    /// bring it back to its ceiling.
    pub over_ceiling: Vec<u64>,
    /// Jobs in a governed partition that hold or ask for GPUs outside any team (their
    /// account is not a team): held (pending) or requeued and held (running).
    pub outside: Vec<u64>,
    /// Pending jobs of a team that ask for untyped (or several types of) GPUs in a typed
    /// configuration: no type to govern them against, so they are held (the plugin refuses
    /// such jobs at submit; these were queued before the configuration became typed).
    pub untyped: Vec<u64>,
    /// Pending non-preemptible jobs to park (begin time far ahead and an administrator's hold
    /// marked [`PARK_HOLD_MARK`]) or release (hold released, begin now) once they fit.
    pub park: Vec<u64>,
    pub release: Vec<u64>,
    /// Pending jobs ranked ahead of every borrower because they displace a lower class of
    /// their own team (rule 6), not because they fit its unused quota (rule 3): the replay's
    /// time to start of in-quota jobs leaves them out.
    pub displacing: Vec<u64>,
    /// Pending jobs that fit their team's unused quota or displace a lower class: ranked at
    /// the no-preempt level or above, ahead of every borrower (by id).
    pub in_quota: Vec<u64>,
    /// The earliest instant after the pass a victim's `min_runtime_before_reclaim` ends (a
    /// pending in-quota job may then reclaim it).
    pub next_exempt_end: Option<i64>,
    /// What the plugin reads; the default where the pass was asked not to publish
    /// ([`PassInput::publish`]).
    pub state: PublishedState,
}

/// The plan for the jobs that run and wait now (DESIGN §4). An untyped configuration governs
/// all GPUs as one pool; a typed one governs each GPU type apart ([`plan_typed`]).
pub fn plan(input: &GovernInput<'_>) -> Plan {
    if input.config.is_typed() {
        plan_typed(input)
    } else {
        plan_pool(input).plan
    }
}

#[cfg(test)]
mod tests;
