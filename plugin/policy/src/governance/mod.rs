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
//! Pure: the caller reads Slurm and applies the plan.

use std::cell::OnceCell;
use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use teamshare_config::{Config, IdleSharing, Team, WithinTeam};

use crate::priority::{self, encode};

mod planner;
mod reclaim;
pub use planner::{PassInput, PassPlan, Planner};

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
    /// The nodes a running job holds (empty when unknown or pending).
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
}

/// What the plugin reads (published atomically by the governor as JSON).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
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
    reclaim_level_by(victims.iter().map(|v| (v.gpus, v.exempt_until)), k, now)
}

/// [`reclaim_level_in`] over the victims' GPUs and exempt times, in reclaim order.
fn reclaim_level_by(victims: impl Iterator<Item = (u32, i64)>, k: u32, now: i64) -> u32 {
    if k == 0 {
        return priority::reclaim_level(0);
    }
    let mut needed = k;
    let mut last = None;
    for (rank, (gpus, exempt_until)) in victims.enumerate() {
        last = Some(rank);
        if exempt_until > now {
            continue;
        }
        needed = needed.saturating_sub(gpus.max(1));
        if needed == 0 {
            return priority::reclaim_level(rank + 1);
        }
    }
    match last {
        Some(rank) => priority::reclaim_level(rank + 1),
        None => priority::reclaim_level(0),
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    /// The priority every governed, non-held job should have.
    pub priorities: BTreeMap<u64, u32>,
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
    pub state: PublishedState,
}

/// What the phases of [`plan`] share: the configuration read once.
struct Rules<'a> {
    config: &'a Config,
    table: Vec<Class>,
    /// Per class index: how many distinct class values are below its value.
    ranks: Vec<u32>,
    within: bool,
    exempt_secs: i64,
    /// The teams' places in the configuration, in the order of their names.
    by_name: Vec<usize>,
}

impl<'a> Rules<'a> {
    fn new(config: &'a Config) -> Rules<'a> {
        let table = classes(config);
        let ranks = table
            .iter()
            .map(|c| {
                let below: BTreeSet<u32> = table
                    .iter()
                    .map(|o| o.value)
                    .filter(|x| *x < c.value)
                    .collect();
                u32::try_from(below.len()).unwrap_or(u32::MAX)
            })
            .collect();
        let mut by_name: Vec<usize> = (0..config.teams.len()).collect();
        by_name.sort_by(|a, b| config.teams[*a].name.cmp(&config.teams[*b].name));
        Rules {
            config,
            table,
            ranks,
            within: config.governance.preempt_within_team == WithinTeam::LowerPriority,
            exempt_secs: i64::try_from(config.governance.min_runtime_before_reclaim.as_secs())
                .unwrap_or(i64::MAX),
            by_name,
        }
    }

    fn class_idx(&self, j: &ClusterJob) -> u8 {
        let i = priority::class_index(j.priority);
        if usize::from(i) < self.table.len() {
            i
        } else {
            0
        }
    }

    fn class(&self, j: &ClusterJob) -> &Class {
        &self.table[usize::from(self.class_idx(j))]
    }

    fn value(&self, j: &ClusterJob) -> u32 {
        self.class(j).value
    }

    fn preemptible(&self, j: &ClusterJob) -> bool {
        self.class(j).preemptible
    }

    /// How many distinct class values are below this job's: its class's place in a band.
    fn class_rank(&self, j: &ClusterJob) -> u32 {
        self.ranks[usize::from(self.class_idx(j))]
    }

    /// A running job's place in its team's walk over the quota (phase 1): non-preemptible
    /// classes first (they may only run inside it), then higher classes, the oldest, the lowest
    /// id.
    fn running_key(&self, j: &ClusterJob) -> RunningKey {
        (
            self.preemptible(j),
            std::cmp::Reverse(self.value(j)),
            j.start,
            j.id,
        )
    }

    /// A pending job's place in its team's queue (phase 3): higher classes first, then the
    /// oldest, the lowest id.
    fn pending_key(&self, j: &ClusterJob) -> PendingKey {
        (std::cmp::Reverse(self.value(j)), j.submit, j.id)
    }

    /// Whether the plan ranks a pending job: not held by its owner or an administrator (a
    /// job teamshare parked with a hold is ranked: the governor releases it when it fits).
    fn ranked(j: &ClusterJob) -> bool {
        j.phase == Phase::Pending && (j.priority != 0 || j.park_held)
    }
}

type RunningKey = (bool, std::cmp::Reverse<u32>, Option<i64>, u64);
type PendingKey = (std::cmp::Reverse<u32>, i64, u64);

/// A job as the phases of the plan hold it: the job, and its place in the table the pass is
/// made from (the input of [`plan`], or a [`Planner`]'s table), which is where its priority is
/// written.
#[derive(Clone, Copy)]
struct Entry<'j> {
    job: &'j ClusterJob,
    slot: usize,
}

impl std::ops::Deref for Entry<'_> {
    type Target = ClusterJob;
    fn deref(&self) -> &ClusterJob {
        self.job
    }
}

/// Where a [`Planner`] keeps its jobs: lists of places in it make their entries on need.
trait Table {
    fn job(&self, slot: usize) -> &ClusterJob;
}

/// A team's running or pending jobs in the order the phases walk them, as entries made on
/// need: a long queue costs a pass only the part of it the pass reads.
#[derive(Clone, Copy)]
enum List<'j> {
    Entries(&'j [Entry<'j>]),
    Running(&'j [(RunningKey, usize)], &'j dyn Table),
    Pending(&'j [(PendingKey, usize)], &'j dyn Table),
}

impl<'j> List<'j> {
    fn len(self) -> usize {
        match self {
            List::Entries(e) => e.len(),
            List::Running(s, _) => s.len(),
            List::Pending(s, _) => s.len(),
        }
    }

    fn get(self, i: usize) -> Entry<'j> {
        match self {
            List::Entries(e) => e[i],
            List::Running(s, table) => {
                let slot = s[i].1;
                Entry {
                    job: table.job(slot),
                    slot,
                }
            }
            List::Pending(s, table) => {
                let slot = s[i].1;
                Entry {
                    job: table.job(slot),
                    slot,
                }
            }
        }
    }

    fn iter(self) -> impl Iterator<Item = Entry<'j>> + Clone {
        (0..self.len()).map(move |i| self.get(i))
    }

    /// The list from its `from`-th job on.
    fn tail(self, from: usize) -> Tail<'j> {
        Tail { list: self, from }
    }
}

/// The end of a [`List`].
#[derive(Clone, Copy)]
struct Tail<'j> {
    list: List<'j>,
    from: usize,
}

impl<'j> Tail<'j> {
    fn len(self) -> usize {
        self.list.len().saturating_sub(self.from)
    }

    fn is_empty(self) -> bool {
        self.len() == 0
    }

    fn first(self) -> Option<Entry<'j>> {
        (!self.is_empty()).then(|| self.list.get(self.from))
    }

    fn iter(self) -> impl Iterator<Item = Entry<'j>> + Clone {
        (self.from..self.list.len()).map(move |i| self.list.get(i))
    }
}

/// Where the phases write the priorities they decide.
trait Sink {
    /// The job's priority is `p` (a later call for the same job replaces it).
    fn set(&mut self, e: Entry<'_>, p: u32);
    /// A pending record's priority is the highest any of its tasks earned: one task in quota
    /// ranks the record in quota (the team's limit keeps the others to what it may borrow).
    fn raise(&mut self, e: Entry<'_>, p: u32);

    /// Every job of team `team`'s tail ([`Pending::tails`]) gets `priority(job)`, which
    /// depends on the job's own class and state and on `band` alone (its team's band slot):
    /// a sink that knows which of them cannot have changed since it last saw them with the
    /// same band may skip those.
    fn tail(
        &mut self,
        team: usize,
        tail: Tail<'_>,
        band: u32,
        priority: &dyn Fn(&ClusterJob) -> u32,
    ) {
        let _ = (team, band);
        for e in tail.iter() {
            self.raise(e, priority(&e));
        }
    }
}

/// The jobs of one pass grouped by team (by its place in the configuration), each team's in
/// the order the phases walk them: built from the jobs squeue shows ([`Queues::from_jobs`]) or
/// kept in that order between passes ([`Planner`]).
struct Queues<'j> {
    /// Running jobs in [`Rules::running_key`] order, and pending jobs the plan ranks
    /// ([`Rules::ranked`]) in [`Rules::pending_key`] order, per team.
    lists: Lists<'j>,
    /// Running jobs of no team: they hold their nodes' GPUs all the same.
    others_running: Vec<Entry<'j>>,
    /// Jobs outside every team that hold or ask for GPUs ([`is_outside`]), in the order given.
    outside: Vec<u64>,
    /// Per team, where the caller keeps them ([`Planner`]): the ranked pending jobs of a
    /// non-preemptible class that are not parked, which are all a tail's jobs to park;
    /// otherwise found by a walk over the tail.
    unparked: Option<Vec<Vec<Entry<'j>>>>,
    /// Per team: how many ranked pending jobs that can start there are of each (class
    /// value, GPUs, nodes), in that order: what a displacement attempt's answer depends on
    /// besides the state of the pass ([`Ahead`]).
    alike: std::borrow::Cow<'j, [Vec<(Alike, u32)>]>,
    /// Per team, where the caller keeps them ([`Planner`]): the same jobs by the GPUs they
    /// ask for, each set in the team's order, so that sharing idle capacity reads of a long
    /// tail only the jobs that could still get some; otherwise the tail is walked.
    sized: Option<&'j [Sized]>,
    /// Per team, where the caller keeps them: those of the same jobs that may borrow
    /// (preemptible, eligible), in the team's order.
    askable: Option<&'j [BTreeSet<(PendingKey, usize)>]>,
}

/// A team's ranked pending jobs that can start by the GPUs they ask for, each set in the
/// team's order ([`Rules::pending_key`], then place in the table).
type Sized = BTreeMap<u32, BTreeSet<(PendingKey, usize)>>;

/// A pending job as a displacement attempt sees it: class value, GPUs, nodes.
type Alike = (u32, u32, u32);

impl Rules<'_> {
    fn alike(&self, j: &ClusterJob) -> Alike {
        (self.value(j), j.gpus, j.node_count)
    }
}

/// Counts `(key, n)` as a sorted vector of counts.
fn count_alike(mut keys: Vec<Alike>) -> Vec<(Alike, u32)> {
    keys.sort_unstable();
    let mut out: Vec<(Alike, u32)> = Vec::new();
    for k in keys {
        match out.last_mut() {
            Some(last) if last.0 == k => last.1 += 1,
            _ => out.push((k, 1)),
        }
    }
    out
}

/// Phase 3's walk over one team's queue: what the jobs still ahead that can start might do.
/// While none of them fits what is left of the quota, and none might displace a lower class
/// (of a class above the team's lowest displaceable one) asking what no attempt this pass
/// has already answered no to, every job ahead borrows or waits: the rest of the queue is a
/// tail.
struct Ahead<'q> {
    alike: &'q [(Alike, u32)],
    walked: Vec<u32>,
    /// Worked out on need, and again after what they depend on changed.
    undecided: Option<u32>,
    smallest: Option<Option<u32>>,
}

impl<'q> Ahead<'q> {
    fn new(alike: &'q [(Alike, u32)]) -> Ahead<'q> {
        Ahead {
            alike,
            walked: vec![0; alike.len()],
            undecided: None,
            smallest: None,
        }
    }

    /// The fewest GPUs a job ahead that can start asks for.
    fn smallest(&mut self) -> Option<u32> {
        if let Some(s) = self.smallest {
            return s;
        }
        let s = (0..self.alike.len())
            .filter(|&i| self.left(i) > 0)
            .map(|i| self.alike[i].0 .1)
            .min();
        self.smallest = Some(s);
        s
    }

    fn place(&self, a: Alike) -> Option<usize> {
        self.alike.binary_search_by(|(k, _)| k.cmp(&a)).ok()
    }

    fn left(&self, i: usize) -> u32 {
        self.alike[i].1.saturating_sub(self.walked[i])
    }

    /// The jobs ahead that might displace above class value `lowest` and whose attempt
    /// `answered` does not cover.
    fn undecided(&mut self, lowest: u32, answered: impl Fn(Alike) -> bool) -> u32 {
        if let Some(n) = self.undecided {
            return n;
        }
        let n = (0..self.alike.len())
            .filter(|&i| self.alike[i].0 .0 > lowest && !answered(self.alike[i].0))
            .map(|i| self.left(i))
            .sum();
        self.undecided = Some(n);
        n
    }

    /// A job that can start is walked past; `open` when it counted as undecided.
    fn walk(&mut self, a: Alike, open: bool) {
        if let Some(i) = self.place(a) {
            self.walked[i] += 1;
            if self.left(i) == 0 {
                self.smallest = None;
            }
            if open {
                if let Some(n) = self.undecided.as_mut() {
                    *n = n.saturating_sub(1);
                }
            }
        }
    }

    /// An attempt for `a` was answered no: the jobs alike ahead are decided.
    fn answered(&mut self, a: Alike) {
        if let (Some(i), Some(n)) = (self.place(a), self.undecided) {
            self.undecided = Some(n.saturating_sub(self.left(i)));
        }
    }

    /// What the count depends on changed (room, or the attempts' answers).
    fn forget(&mut self) {
        self.undecided = None;
    }
}

/// Where a pass's team lists come from.
enum Lists<'j> {
    /// Grouped and sorted from the jobs of the pass ([`Queues::from_jobs`]).
    Owned {
        running: Vec<Vec<Entry<'j>>>,
        pending: Vec<Vec<Entry<'j>>>,
    },
    /// A [`Planner`]'s lists of places in its table.
    Table {
        running: &'j [Vec<(RunningKey, usize)>],
        pending: &'j [Vec<(PendingKey, usize)>],
        table: &'j dyn Table,
    },
}

impl<'j> Queues<'j> {
    fn teams(&self) -> usize {
        match &self.lists {
            Lists::Owned { running, .. } => running.len(),
            Lists::Table { running, .. } => running.len(),
        }
    }

    /// Team `t`'s running jobs.
    fn running(&self, t: usize) -> List<'_> {
        match &self.lists {
            Lists::Owned { running, .. } => List::Entries(&running[t]),
            Lists::Table { running, table, .. } => List::Running(&running[t], *table),
        }
    }

    /// Team `t`'s ranked pending jobs.
    fn pending(&self, t: usize) -> List<'_> {
        match &self.lists {
            Lists::Owned { pending, .. } => List::Entries(&pending[t]),
            Lists::Table { pending, table, .. } => List::Pending(&pending[t], *table),
        }
    }

    /// One walk over the jobs with one lookup of the account per job, then each team's lists
    /// sorted once (stable: jobs of equal keys keep the order given).
    fn from_jobs(rules: &Rules<'_>, jobs: &'j [ClusterJob]) -> Queues<'j> {
        let teams = &rules.config.teams;
        let index: BTreeMap<&str, usize> = teams
            .iter()
            .enumerate()
            .map(|(i, t)| (t.name.as_str(), i))
            .collect();
        let mut running: Vec<Vec<(RunningKey, Entry<'j>)>> = vec![Vec::new(); teams.len()];
        let mut pending: Vec<Vec<(PendingKey, Entry<'j>)>> = vec![Vec::new(); teams.len()];
        let mut others_running = Vec::new();
        let mut outside = Vec::new();
        let mut alike: Vec<Vec<Alike>> = vec![Vec::new(); teams.len()];
        for (slot, j) in jobs.iter().enumerate() {
            let e = Entry { job: j, slot };
            let Some(&t) = index.get(j.team.as_str()) else {
                if is_outside(j) {
                    outside.push(j.id);
                }
                if j.phase == Phase::Running {
                    others_running.push(e);
                }
                continue;
            };
            match j.phase {
                Phase::Running => running[t].push((rules.running_key(j), e)),
                Phase::Pending if Rules::ranked(j) => {
                    if j.startable() {
                        alike[t].push(rules.alike(j));
                    }
                    pending[t].push((rules.pending_key(j), e));
                }
                Phase::Pending => {}
            }
        }
        // Keys worked out once per job, not per comparison.
        let running = running
            .into_iter()
            .map(|mut list| {
                list.sort_by_key(|a| a.0);
                list.into_iter().map(|(_, e)| e).collect()
            })
            .collect();
        let pending = pending
            .into_iter()
            .map(|mut list| {
                list.sort_by_key(|a| a.0);
                list.into_iter().map(|(_, e)| e).collect()
            })
            .collect();
        Queues {
            lists: Lists::Owned { running, pending },
            others_running,
            outside,
            unparked: None,
            alike: std::borrow::Cow::Owned(alike.into_iter().map(count_alike).collect()),
            sized: None,
            askable: None,
        }
    }

    /// Every running job, of teams and others.
    fn all_running(&self) -> impl Iterator<Item = Entry<'_>> + '_ {
        (0..self.teams())
            .flat_map(|t| self.running(t).iter())
            .chain(self.others_running.iter().copied())
    }
}

/// Running jobs sorted into the protected (inside the quota), victims and violations.
struct Running<'a> {
    /// GPUs held by each team's running jobs.
    usage: Vec<u32>,
    /// Victims with how far their team is over its quota for its weight.
    victims: Vec<(Entry<'a>, f64)>,
    /// Each team's running jobs, and the places among them of those inside its quota, in
    /// phase-1 order.
    lists: Vec<List<'a>>,
    protected_by_team: Vec<Vec<usize>>,
    /// Each team's lowest preemptible class value among them.
    lowest_displaceable: Vec<Option<u32>>,
    violations: Vec<u64>,
    over_ceiling: Vec<u64>,
}

/// Phase 1: each team's running jobs fill its quota, non-preemptible classes first (they may
/// only run inside it), then higher classes, then the oldest; the rest is borrowed.
fn sort_running<'a>(
    rules: &Rules<'_>,
    queues: &'a Queues<'a>,
    priorities: &mut dyn Sink,
    mut kept: Option<&mut [Option<TeamRunning>]>,
) -> Running<'a> {
    let teams = rules.config.teams.len();
    let lists: Vec<List<'a>> = (0..teams).map(|t| queues.running(t)).collect();
    let mut out = Running {
        usage: vec![0; teams],
        victims: Vec::with_capacity(lists.iter().map(|l| l.len()).sum()),
        protected_by_team: Vec::with_capacity(teams),
        lists,
        lowest_displaceable: vec![None; teams],
        violations: Vec::new(),
        over_ceiling: Vec::new(),
    };
    for (t, team) in rules.config.teams.iter().enumerate() {
        let running = out.lists[t];
        let mut fresh = None;
        // A planner keeps the split while the team's running jobs stay as they are: the same
        // protected and victims, the protected jobs' levels (their class's) already given.
        let sorted: &TeamRunning = match kept.as_deref_mut() {
            Some(k) => k[t].get_or_insert_with(|| split_running(rules, team, running, priorities)),
            None => fresh.insert(split_running(rules, team, running, priorities)),
        };
        out.usage[t] = sorted.used;
        out.lowest_displaceable[t] = sorted.lowest_displaceable;
        out.protected_by_team.push(sorted.protected.clone());
        out.victims.extend(
            sorted
                .victims
                .iter()
                .map(|i| (running.get(*i), sorted.over)),
        );
        out.violations.extend(sorted.violations.iter().copied());
        out.over_ceiling.extend(sorted.over_ceiling.iter().copied());
    }
    out
}

/// Phase 1 for one team: what a [`Planner`] keeps while the team's running jobs do not change
/// (places in the team's running list).
#[derive(Clone, Default)]
struct TeamRunning {
    used: u32,
    /// How far the team is over its quota for its weight.
    over: f64,
    protected: Vec<usize>,
    victims: Vec<usize>,
    violations: Vec<u64>,
    /// Borrowed jobs beyond the team's ceiling ([`Plan::over_ceiling`]).
    over_ceiling: Vec<u64>,
    /// The lowest preemptible class value among the protected jobs.
    lowest_displaceable: Option<u32>,
}

/// One team's running jobs, in phase-1 order, split into the protected, the victims and the
/// violations; the protected get their level.
fn split_running(
    rules: &Rules<'_>,
    team: &Team,
    running: List<'_>,
    priorities: &mut dyn Sink,
) -> TeamRunning {
    let used = running.iter().fold(0u32, |s, j| s.saturating_add(j.gpus));
    let mut out = TeamRunning {
        used,
        over: (f64::from(used) - f64::from(team.quota.total)) / f64::from(team.weight.max(1)),
        ..TeamRunning::default()
    };
    let mut inside = 0u32;
    for (i, j) in running.iter().enumerate() {
        let fits = inside.saturating_add(j.gpus) <= team.quota.total;
        if fits || !rules.preemptible(&j) {
            if fits {
                inside += j.gpus;
            } else {
                // Rule 6: a non-preemptible job never borrows. It keeps the protected
                // level (Slurm must not pick it) until the governor requeues it.
                out.violations.push(j.id);
            }
            priorities.set(
                j,
                encode(
                    priority::protected_level(rules.value(&j)),
                    rules.class_idx(&j),
                ),
            );
            if fits {
                out.protected.push(i);
                if rules.preemptible(&j) {
                    let v = rules.value(&j);
                    out.lowest_displaceable =
                        Some(out.lowest_displaceable.map_or(v, |l: u32| l.min(v)));
                }
            }
        } else {
            out.victims.push(i);
        }
    }
    out.over_ceiling = beyond_ceiling(rules, team, &running, &out.victims, used);
    out
}

/// Rule 1 at all times: the borrowed jobs a team runs beyond its ceiling (quota + borrow
/// limit; an administrator lowered it under what the team runs), its lowest class and most
/// recently started first, only as many as bring it back to the ceiling.
fn beyond_ceiling(
    rules: &Rules<'_>,
    team: &Team,
    running: &List<'_>,
    victims: &[usize],
    used: u32,
) -> Vec<u64> {
    let Some(ceiling) = team
        .borrow_limit
        .map(|b| team.quota.total.saturating_add(b))
    else {
        return Vec::new();
    };
    if used <= ceiling {
        return Vec::new();
    }
    let mut borrowed: Vec<Entry<'_>> = victims.iter().map(|i| running.get(*i)).collect();
    borrowed.sort_by(|a, b| victim_order(rules, (a, 0.0), (b, 0.0)));
    let mut over = used - ceiling;
    let mut out = Vec::new();
    for j in borrowed {
        if over == 0 {
            break;
        }
        over = over.saturating_sub(j.gpus);
        out.push(j.id);
    }
    out
}

/// A running borrowed job in reclaim order, with its level.
#[derive(Clone, Copy)]
struct Ranked<'a> {
    job: Entry<'a>,
    level: u32,
    /// Slurm's PreemptExemptTime protects it until then.
    exempt_until: i64,
}

impl Ranked<'_> {
    /// The victim as the published state shows it.
    fn victim(&self) -> Victim {
        Victim {
            job_id: self.job.id,
            team: self.job.team.clone(),
            gpus: self.job.gpus,
            level: self.level,
            exempt_until: self.exempt_until,
            gpu_type: self.job.gpu_type.clone(),
        }
    }
}

/// Phase 2: reclaim order (most over quota for its weight, lowest class, most recently
/// started) and each victim's level.
fn order_victims<'a>(
    rules: &Rules<'_>,
    mut victims: Vec<(Entry<'a>, f64)>,
    now: i64,
    priorities: &mut dyn Sink,
) -> Vec<Ranked<'a>> {
    victims.sort_by(|a, b| victim_order(rules, (&a.0, a.1), (&b.0, b.1)));
    rank_victims(rules, victims.into_iter().map(|(j, _)| j), now, priorities)
}

/// Rule 3's victim order between two running jobs, each with how far its team is over its
/// quota for its weight: the team most over first, then the lowest class, then the most
/// recently started (then the highest id).
fn victim_order(
    rules: &Rules<'_>,
    (a, oa): (&ClusterJob, f64),
    (b, ob): (&ClusterJob, f64),
) -> std::cmp::Ordering {
    ob.partial_cmp(&oa)
        .unwrap_or(std::cmp::Ordering::Equal)
        .then(rules.value(a).cmp(&rules.value(b)))
        .then(b.start.cmp(&a.start))
        .then(b.id.cmp(&a.id))
}

/// Victims in reclaim order given their levels, the first the lowest.
fn rank_victims<'a>(
    rules: &Rules<'_>,
    victims: impl Iterator<Item = Entry<'a>>,
    now: i64,
    priorities: &mut dyn Sink,
) -> Vec<Ranked<'a>> {
    victims
        .enumerate()
        .map(|(rank, j)| {
            let level = priority::victim_level(rank);
            priorities.set(j, encode(level, rules.class_idx(&j)));
            Ranked {
                job: j,
                level,
                exempt_until: j.start.unwrap_or(now).saturating_add(rules.exempt_secs),
            }
        })
        .collect()
}

/// Pending jobs sorted by what they may do now.
struct Pending<'a> {
    /// Fit their team's unused quota.
    in_quota: Vec<Entry<'a>>,
    /// At quota, but a higher class than some of the team's running jobs.
    displacing: Vec<Entry<'a>>,
    /// Beyond the quota, per team, in the team's own order: those walked one by one; the
    /// tail's startable jobs follow them.
    borrowers: Vec<Vec<Entry<'a>>>,
    /// Cannot start now (begin time, dependency): they reserve nothing. The tails' jobs that
    /// cannot start are also waiting.
    waiting: Vec<Entry<'a>>,
    /// Per team, the end of its queue once its quota is full and no job there may displace
    /// a lower class: every job there borrows (if it can start) or waits, and how depends
    /// only on its class, its state and its team's band, so a long queue is not walked job
    /// by job.
    tails: Vec<Tail<'a>>,
    /// Per team, the fewest GPUs a job of its tail that can start asks for.
    tail_smallest: Vec<Option<u32>>,
    /// Running jobs to requeue for the displacing ones.
    displace: Vec<u64>,
    /// Unused quota per team left after its in-quota jobs.
    room: Vec<u32>,
    team_states: Vec<TeamState>,
}

/// Phase 3: each team's pending jobs, higher classes then oldest first, take its unused quota;
/// a job that does not fit displaces lower classes of its team or waits to borrow.
fn sort_pending<'a>(
    rules: &Rules<'_>,
    queues: &'a Queues<'a>,
    running: &Running<'a>,
    nodes: &LazyNodes<'_, '_>,
    borrow_first: &BTreeSet<u64>,
) -> Pending<'a> {
    let teams = rules.config.teams.len();
    let mut out = Pending {
        in_quota: Vec::new(),
        displacing: Vec::new(),
        borrowers: vec![Vec::new(); teams],
        waiting: Vec::new(),
        tails: Vec::with_capacity(teams),
        tail_smallest: Vec::with_capacity(teams),
        displace: Vec::new(),
        room: vec![0; teams],
        team_states: Vec::with_capacity(teams),
    };
    let mut targeted: BTreeSet<u64> = BTreeSet::new();
    // Free GPUs per node as the displacing jobs are placed, one after the other (read on
    // the first displacement).
    let mut placed: Option<NodeRoom<'_>> = None;
    for (t, team) in rules.config.teams.iter().enumerate() {
        // Attempts that displaced nobody (they change nothing), by what their answer depends
        // on (team, class value, GPUs, nodes, room left): a long queue of alike jobs asks
        // once until a displacement changes the answer. Only the team's own are asked about
        // during its walk.
        let mut cannot_displace: Vec<(usize, u32, u32, u32, u32)> = Vec::new();
        // The team's displaceable jobs, per class value, until a displacement changes them.
        let mut lower_known = Vec::new();
        let pending = queues.pending(t);
        // The lowest preemptible class among the team's protected jobs: a job of no higher
        // class has nothing to displace (answered without a walk over them).
        let lowest_displaceable = running.lowest_displaceable[t];
        let used = running.usage[t];
        let mut room = team.quota.total.saturating_sub(used);
        let mut pending_in_quota = 0u32;
        let borrowers = &mut out.borrowers[t];
        let mut tail_from = pending.len();
        let mut ahead = Ahead::new(&queues.alike[t]);
        let answered = |memo: &[(usize, u32, u32, u32, u32)], a: Alike, room: u32| {
            memo.contains(&(t, a.0, a.1, a.2, room))
        };
        for (i, j) in pending.iter().enumerate() {
            // No job from here on fits the quota left, and none may displace: its class is
            // no higher than the lowest displaceable, or an attempt alike was answered no
            // this pass. The rest is the tail.
            if ahead.smallest().is_none_or(|g| g > room) {
                let tail = match lowest_displaceable.filter(|_| rules.within) {
                    Some(v) => ahead.undecided(v, |a| answered(&cannot_displace, a, room)) == 0,
                    None => true,
                };
                if tail {
                    tail_from = i;
                    break;
                }
            }
            if !j.startable() {
                out.waiting.push(j);
                continue;
            }
            let alike = rules.alike(&j);
            ahead.walk(
                alike,
                lowest_displaceable.is_some_and(|v| v < alike.0)
                    && !answered(&cannot_displace, alike, room),
            );
            if j.gpus <= room {
                room -= j.gpus;
                pending_in_quota += j.gpus;
                out.in_quota.push(j);
                ahead.forget();
                continue;
            }
            if rules.within
                && lowest_displaceable.is_some_and(|v| v < rules.value(&j))
                && !borrow_first.contains(&j.id)
            {
                let attempt = (t, rules.value(&j), j.gpus, j.node_count, room);
                if !cannot_displace.contains(&attempt) {
                    let found = lower_classes_to_displace(
                        rules,
                        running,
                        t,
                        &j,
                        room,
                        &targeted,
                        placed.get_or_insert_with(|| nodes.get().clone()),
                        &mut lower_known,
                    );
                    if let Some((chosen, freed)) = found {
                        room = freed - j.gpus;
                        targeted.extend(chosen.iter().copied());
                        out.displace.extend(chosen);
                        out.displacing.push(j);
                        cannot_displace.clear();
                        lower_known.clear();
                        ahead.forget();
                        continue;
                    }
                    // A failed attempt changed nothing: alike jobs would fail alike.
                    cannot_displace.push(attempt);
                    ahead.answered(alike);
                }
            }
            borrowers.push(j);
        }
        out.tails.push(pending.tail(tail_from));
        out.tail_smallest.push(if tail_from < pending.len() {
            ahead.smallest()
        } else {
            None
        });
        out.room[t] = room;
        out.team_states.push(TeamState {
            running_gpus: used,
            pending_in_quota_gpus: pending_in_quota,
            gpu_limit: 0,
        });
    }
    out
}

impl<'a> Pending<'a> {
    /// Team `t`'s borrowers in its own order: those walked, then the tail's startable jobs.
    fn borrowers_of(&self, t: usize) -> impl Iterator<Item = Entry<'a>> + '_ {
        self.borrowers[t]
            .iter()
            .copied()
            .chain(self.tails[t].iter().filter(|j| j.startable()))
    }

    fn has_borrowers(&self, t: usize) -> bool {
        self.borrowers_of(t).next().is_some()
    }

    fn has_any_borrowers(&self) -> bool {
        (0..self.borrowers.len()).any(|t| self.has_borrowers(t))
    }
}

/// Phase 3 as the plan uses it: a job that may displace its team's lower classes does so only
/// if it could not start now on borrowed GPUs instead. Borrowing costs nobody work, and once it
/// runs, its class puts it inside the quota before the lower-class job (phase 1), which
/// becomes the borrowed one. The phase is tried once with those jobs as borrowers; those the
/// idle capacity then covers stay borrowers.
fn sort_pending_borrow_first<'a>(
    rules: &Rules<'_>,
    pass: &Pass<'_>,
    queues: &'a Queues<'a>,
    running: &Running<'a>,
    nodes: &LazyNodes<'_, '_>,
) -> Pending<'a> {
    let none = BTreeSet::new();
    let pending = sort_pending(rules, queues, running, nodes, &none);
    if pending.displacing.is_empty() {
        return pending;
    }
    let displacing: BTreeSet<u64> = pending.displacing.iter().map(|j| j.id).collect();
    let trial = sort_pending(rules, queues, running, nodes, &displacing);
    let shares = share_idle_capacity(
        rules,
        pass,
        queues,
        running,
        &trial,
        None,
        &Holds::default(),
    );
    let granted: BTreeSet<u64> = shares.granted.iter().map(|e| e.id).collect();
    let borrow: BTreeSet<u64> = displacing.intersection(&granted).copied().collect();
    if borrow.is_empty() {
        return pending;
    }
    sort_pending(rules, queues, running, nodes, &borrow)
}

/// The team's own protected jobs of a lower, preemptible class to requeue so that `j` fits
/// its team's quota, lowest class and youngest first; `None` when they cannot free enough.
///
/// Where the nodes' free GPUs are known, the GPUs freed must also let it in: on each of the
/// nodes it needs (its node count, or more when its GPUs exceed the largest node), the jobs
/// to requeue are those there in that order until its share fits; the nodes it takes are those
/// with room already, then those where the earliest in that order, then the fewest, make room.
/// More jobs from elsewhere go only if its quota needs them, and a job that no such set would
/// let in displaces nobody. Requeuing jobs for one that then cannot start loses their work for
/// nothing, and at quota they start again and are requeued again, pass after pass.
///
/// The quota is asked first: a job that all of them together could not make room for in its
/// quota is not placed, so it takes none of the node room later jobs of the pass may use. The
/// nodes' room changes only when the answer is yes.
#[allow(clippy::too_many_arguments)]
fn lower_classes_to_displace<'a>(
    rules: &Rules<'_>,
    running: &Running<'a>,
    team: usize,
    j: &ClusterJob,
    room: u32,
    targeted: &BTreeSet<u64>,
    nodes: &mut NodeRoom<'_>,
    known: &mut Vec<((usize, u32), Lower<'a>)>,
) -> Option<(Vec<u64>, u32)> {
    let value = rules.value(j);
    let at = match known.iter().position(|(k, _)| *k == (team, value)) {
        Some(at) => at,
        None => {
            known.push((
                (team, value),
                lower_than(rules, running, team, value, targeted),
            ));
            known.len() - 1
        }
    };
    let Lower {
        jobs: lower,
        gpus,
        on_node,
    } = &mut known[at].1;
    // Most waiting jobs have none (a job that could not make room for this one in its
    // quota is not placed: it takes no node room).
    if lower.is_empty() || gpus.saturating_add(room) < j.gpus {
        return None;
    }
    let lower: &[&ClusterJob] = lower;
    let mut picked: Vec<usize> = Vec::new();
    if !nodes.free.is_empty() {
        let on_node = on_node.get_or_insert_with(|| jobs_on_nodes(&nodes.free, lower));
        for (node, here, freed, share) in nodes_to_displace(j, nodes, lower, on_node)? {
            if let Some(f) = nodes.free.get_mut(node) {
                *f = f.saturating_add(freed).saturating_sub(share);
            }
            picked.extend(here);
        }
        picked.sort_unstable();
        picked.dedup();
    }
    // The quota: the jobs picked where it will run, then the rest in order until it fits.
    let mut freed = room;
    let mut chosen = Vec::new();
    for &i in &picked {
        freed = freed.saturating_add(lower[i].gpus);
        chosen.push(lower[i].id);
    }
    for (i, r) in lower.iter().enumerate() {
        if freed >= j.gpus {
            break;
        }
        if picked.binary_search(&i).is_ok() {
            continue;
        }
        freed = freed.saturating_add(r.gpus);
        chosen.push(r.id);
    }
    (freed >= j.gpus && !chosen.is_empty()).then_some((chosen, freed))
}

/// A team's protected jobs of a preemptible class below a value, not displaced yet this pass,
/// in displacement order (lowest class, youngest first), what they hold in all, and (worked
/// out on need) where they run: phase 3 asks about them once per class value until a
/// displacement changes them.
struct Lower<'a> {
    jobs: Vec<&'a ClusterJob>,
    gpus: u32,
    on_node: Option<Vec<(usize, usize)>>,
}

fn lower_than<'a>(
    rules: &Rules<'_>,
    running: &Running<'a>,
    team: usize,
    value: u32,
    targeted: &BTreeSet<u64>,
) -> Lower<'a> {
    let list = running.lists[team];
    let mut jobs: Vec<&'a ClusterJob> = running.protected_by_team[team]
        .iter()
        .map(|i| list.get(*i).job)
        .filter(|r| rules.preemptible(r) && rules.value(r) < value && !targeted.contains(&r.id))
        .collect();
    jobs.sort_by(|a, b| {
        rules
            .value(a)
            .cmp(&rules.value(b))
            .then(b.start.cmp(&a.start))
    });
    Lower {
        gpus: jobs.iter().fold(0u32, |s, r| s.saturating_add(r.gpus)),
        jobs,
        on_node: None,
    }
}

/// Each node's displaceable jobs, in `lower`'s order (one walk over their nodes, however many
/// nodes the cluster has): (node's place, job's place), sorted, each once.
fn jobs_on_nodes(free: &NodeFree<'_>, lower: &[&ClusterJob]) -> Vec<(usize, usize)> {
    let mut on_node: Vec<(usize, usize)> = Vec::new();
    for (i, r) in lower.iter().enumerate() {
        for n in &r.nodes {
            if let Some(at) = free.place(n) {
                on_node.push((at, i));
            }
        }
    }
    on_node.sort_unstable();
    // Once per node, however often a job lists it.
    on_node.dedup();
    on_node
}

/// The nodes a displacing job would run on and, for each, the displaceable jobs there (places
/// in `lower`, found on their nodes by `on_node`) that make room for its share, the GPUs they
/// free there and the share; `None` when not enough nodes could take it.
#[allow(clippy::type_complexity)]
fn nodes_to_displace<'n>(
    j: &ClusterJob,
    room: &NodeRoom<'n>,
    lower: &[&ClusterJob],
    on_node: &[(usize, usize)],
) -> Option<Vec<(&'n str, Vec<usize>, u32, u32)>> {
    let nodes = j
        .node_count
        .max(j.gpus.div_ceil(room.largest.max(1)))
        .max(1);
    let share = j.gpus.div_ceil(nodes);
    let mut options: Vec<((usize, usize), &str, Vec<usize>, u32)> = Vec::new();
    let mut next = 0;
    for (at, (node, free)) in room.free.iter().enumerate() {
        let from = next;
        while next < on_node.len() && on_node[next].0 == at {
            next += 1;
        }
        if free < share && from == next {
            continue;
        }
        let mut has = free;
        let mut here = Vec::new();
        for &(_, i) in &on_node[from..next] {
            if has >= share {
                break;
            }
            // A multi-node job frees its even share here.
            let r = lower[i];
            let n = u32::try_from(r.nodes.len()).unwrap_or(u32::MAX);
            has = has.saturating_add(r.gpus.div_ceil(n));
            here.push(i);
        }
        if has < share {
            continue;
        }
        // Nodes with room already first (no job to requeue), then the earliest last job,
        // then the fewest jobs.
        let key = (here.last().map_or(0, |i| i + 1), here.len());
        options.push((key, node, here, has - free));
    }
    let nodes = usize::try_from(nodes).unwrap_or(usize::MAX);
    if options.len() < nodes {
        return None;
    }
    options.sort_by_key(|o| o.0);
    options.truncate(nodes);
    Some(
        options
            .into_iter()
            .map(|(_, node, here, freed)| (node, here, freed, share))
            .collect(),
    )
}

/// Phase 4: the victims pending in-quota jobs need, their levels and theirs.
struct Reclaim<'a> {
    /// Every running borrowed job in reclaim order, the victims found first.
    victims: Vec<Ranked<'a>>,
    /// The level of the pending in-quota jobs: above exactly the victims they need.
    level: u32,
    /// Victims the governor requeues itself for in-quota jobs Slurm has not started within
    /// [`RECLAIM_FALLBACK_MS`].
    requeue: Vec<u64>,
    /// The GPUs of the victims found, and the free GPUs the in-quota jobs leave (`None`
    /// where placement is unknown).
    gpus: u32,
    spare: Option<u32>,
    /// The nodes' free GPUs once the in-quota jobs are placed, for lending by placement
    /// (`None` where placement is unknown).
    room: Option<reclaim::Room>,
    /// Wide in-quota jobs that fit nowhere now.
    holds: Holds,
}

/// Phase 4. Where the nodes are known, victims by placement ([`reclaim::by_placement`]):
/// any job of a team above its quota where the in-quota job then fits, the victims found
/// ranked first and the in-quota jobs just above them. Without placement, the borrowed jobs
/// in reclaim order until the GPUs needed beyond the free ones are covered.
#[allow(clippy::too_many_arguments)]
fn reclaim_phase<'a>(
    rules: &Rules<'_>,
    (now, now_ms): (i64, i64),
    running: &Running<'a>,
    victims: Vec<Ranked<'a>>,
    pending: &Pending<'a>,
    nodes: &LazyNodes<'_, '_>,
    free: u32,
    priorities: &mut dyn Sink,
    kept: Option<&mut [Option<TeamRunning>]>,
) -> Reclaim<'a> {
    if pending.in_quota.is_empty() {
        return Reclaim {
            victims,
            level: priority::reclaim_level(0),
            requeue: Vec::new(),
            gpus: 0,
            spare: None,
            room: None,
            holds: Holds::default(),
        };
    }
    if !placement_known(nodes) {
        let gpus = pending
            .in_quota
            .iter()
            .fold(0u32, |s, j| s.saturating_add(j.gpus));
        let level = reclaim_level_by(
            victims.iter().map(|v| (v.job.gpus, v.exempt_until)),
            gpus.saturating_sub(free),
            now,
        );
        let requeue = reclaim_by_count(
            (now, now_ms),
            &pending.in_quota,
            &victims,
            &pending.displace,
            free,
        );
        return Reclaim {
            victims,
            level,
            requeue,
            gpus: 0,
            spare: None,
            room: None,
            holds: Holds::default(),
        };
    }
    let found = reclaim::by_placement(
        rules,
        (now, now_ms),
        running,
        &victims,
        &pending.in_quota,
        &pending.displace,
        nodes.get(),
    );
    let victims = if found.victims.is_empty() {
        victims
    } else {
        reclaim::ranked(
            rules,
            now,
            running,
            victims,
            &found.victims,
            priorities,
            kept,
        )
    };
    Reclaim {
        victims,
        level: reclaim::level(found.victims.len()),
        requeue: found.requeue,
        gpus: found.gpus,
        spare: Some(found.spare),
        room: found.room,
        holds: Holds {
            unplaced: found.unplaced,
            holding: found.holding,
        },
    }
}

/// Whether the pass knows where the GPUs are: the usable nodes, and (given as a snapshot)
/// every running job's nodes. A [`Planner`]'s jobs always say where they run.
fn placement_known(nodes: &LazyNodes<'_, '_>) -> bool {
    match nodes.nodes {
        PassNodes::Given(node_gpus) => {
            !node_gpus.is_empty()
                && nodes
                    .queues
                    .all_running()
                    .all(|j| j.gpus == 0 || !j.nodes.is_empty())
        }
        PassNodes::Kept(set) => !set.usable.is_empty(),
    }
}

/// Phase 4 without placement: borrowed jobs the governor requeues itself for in-quota jobs
/// that still wait after [`RECLAIM_FALLBACK_MS`] (Slurm normally preempts for them within
/// a second), in reclaim order until the GPUs they need beyond the free ones are covered.
/// Exempt victims, jobs already displaced and victims already ending (they free their GPUs
/// without help, and count as free) are skipped.
fn reclaim_by_count(
    (now, now_ms): (i64, i64),
    in_quota: &[Entry<'_>],
    victims: &[Ranked<'_>],
    displace: &[u64],
    free: u32,
) -> Vec<u64> {
    let mut waiting: Vec<&ClusterJob> = in_quota
        .iter()
        .map(|e| e.job)
        .filter(|j| j.eligible && waited_for_fallback(now_ms, j.submit))
        .collect();
    if waiting.is_empty() {
        return Vec::new();
    }
    waiting.sort_by_key(|j| (j.submit, j.id));
    let ending: u32 = victims
        .iter()
        .filter(|v| v.job.completing)
        .fold(0u32, |s, v| s.saturating_add(v.job.gpus));
    let mut candidates = victims
        .iter()
        .filter(|v| v.exempt_until <= now && !displace.contains(&v.job.id) && !v.job.completing);
    let mut pool = free.saturating_add(ending);
    let mut chosen = Vec::new();
    for j in waiting {
        while pool < j.gpus {
            let Some(v) = candidates.next() else {
                break;
            };
            chosen.push(v.job.id);
            // A victim requeued always counts as freeing something.
            pool = pool.saturating_add(v.job.gpus.max(1));
        }
        pool = pool.saturating_sub(j.gpus);
    }
    chosen
}

/// Free GPUs per usable node ([`node_free`]; empty when placement is unknown) and the size
/// of the largest.
#[derive(Clone)]
struct NodeRoom<'n> {
    free: NodeFree<'n>,
    largest: u32,
}

/// Free GPUs per node in the order of the nodes' names: a map by name without a tree node
/// per entry (the plan builds one per pass that displaces or reclaims).
#[derive(Clone, Default)]
struct NodeFree<'n>(Vec<(&'n str, u32)>);

impl<'n> NodeFree<'n> {
    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// A node's place.
    fn place(&self, node: &str) -> Option<usize> {
        self.0.binary_search_by(|(n, _)| (*n).cmp(node)).ok()
    }

    fn get_mut(&mut self, node: &str) -> Option<&mut u32> {
        let i = self.place(node)?;
        Some(&mut self.0[i].1)
    }

    fn iter(&self) -> impl Iterator<Item = (&'n str, u32)> + '_ {
        self.0.iter().copied()
    }
}

/// [`NodeRoom`] worked out on first need: most passes need it for nothing (no job displaces,
/// none waits for the reclaim fallback), and it costs a walk over every running job's nodes.
struct LazyNodes<'n, 'q> {
    nodes: PassNodes<'n>,
    queues: &'q Queues<'q>,
    room: OnceCell<NodeRoom<'n>>,
}

impl<'n> LazyNodes<'n, '_> {
    fn get(&self) -> &NodeRoom<'n> {
        self.room.get_or_init(|| match self.nodes {
            PassNodes::Given(node_gpus) => NodeRoom {
                free: node_free(node_gpus, self.queues.all_running()),
                largest: node_gpus.values().copied().max().unwrap_or(0),
            },
            PassNodes::Kept(set) => NodeRoom {
                free: set.free(),
                largest: set.largest(),
            },
        })
    }
}

/// The usable nodes of a pass.
#[derive(Clone, Copy)]
enum PassNodes<'a> {
    /// GPUs per usable node of the governed partitions (empty: placement unknown); what the
    /// running jobs hold there is counted from them.
    Given(&'a BTreeMap<String, u32>),
    /// A [`Planner`]'s, with what its running jobs hold there.
    Kept(&'a NodeSet),
}

/// The usable nodes a [`Planner`] was given, and the GPUs its running jobs that are not ending
/// hold on every node they list, kept as they start and end: a pass reads the nodes' free
/// GPUs off in one walk.
#[derive(Default)]
struct NodeSet {
    /// Usable nodes in name order: name, GPUs, place in `held`.
    usable: Vec<(String, u32, usize)>,
    /// Every node a job or the caller named, and its place in `held`.
    index: BTreeMap<String, usize>,
    held: Vec<u64>,
}

impl NodeSet {
    fn place(&mut self, node: &str) -> usize {
        if let Some(&i) = self.index.get(node) {
            return i;
        }
        self.held.push(0);
        self.index.insert(node.to_string(), self.held.len() - 1);
        self.held.len() - 1
    }

    fn set_usable(&mut self, node_gpus: &BTreeMap<String, u32>) {
        let usable: Vec<(String, u32, usize)> = node_gpus
            .iter()
            .map(|(n, g)| (n.clone(), *g, self.place(n)))
            .collect();
        self.usable = usable;
    }

    /// A running job starts holding (`add`) or stops holding its GPUs.
    fn hold(&mut self, j: &ClusterJob, add: bool) {
        for (node, share) in node_shares(j) {
            let i = self.place(node);
            let h = &mut self.held[i];
            *h = if add {
                h.saturating_add(u64::from(share))
            } else {
                h.saturating_sub(u64::from(share))
            };
        }
    }

    fn free(&self) -> NodeFree<'_> {
        NodeFree(
            self.usable
                .iter()
                .map(|(name, gpus, i)| {
                    let on = u32::try_from(self.held[*i]).unwrap_or(u32::MAX);
                    (name.as_str(), gpus.saturating_sub(on))
                })
                .collect(),
        )
    }

    fn largest(&self) -> u32 {
        self.usable.iter().map(|u| u.1).max().unwrap_or(0)
    }
}

/// The GPUs a running job that is not ending holds on each node it lists (a multi-node job's
/// evenly), as [`node_free`] counts them.
fn node_shares(j: &ClusterJob) -> impl Iterator<Item = (&str, u32)> {
    let n = u32::try_from(j.nodes.len()).unwrap_or(u32::MAX).max(1);
    let share = j.gpus.div_ceil(n);
    let holds = j.phase == Phase::Running && !j.completing;
    j.nodes
        .iter()
        .filter(move |_| holds)
        .map(move |node| (node.as_str(), share))
}

/// Free GPUs per usable node: its GPUs less those of the running jobs on it (a multi-node
/// job counted evenly over its nodes); jobs already ending hold nothing.
fn node_free<'n, 'j>(
    node_gpus: &'n BTreeMap<String, u32>,
    running: impl Iterator<Item = Entry<'j>>,
) -> NodeFree<'n> {
    let mut free = NodeFree(node_gpus.iter().map(|(n, g)| (n.as_str(), *g)).collect());
    for j in running.filter(|j| !j.completing) {
        if j.nodes.is_empty() {
            continue;
        }
        let n = u32::try_from(j.nodes.len()).unwrap_or(u32::MAX);
        let share = j.gpus.div_ceil(n);
        for node in &j.nodes {
            if let Some(f) = free.get_mut(node.as_str()) {
                *f = f.saturating_sub(share);
            }
        }
    }
    free
}

/// What one team's waiting borrowers ask of the lendable capacity.
struct Ask<'a> {
    job: Entry<'a>,
    /// The part beyond what is left of the team's own quota (the job straddles it).
    beyond: u32,
    /// The team's own idle quota the job would use.
    own: u32,
}

/// What a pass reads besides the jobs.
struct Pass<'a> {
    /// C: GPUs of usable nodes in the governed partitions.
    capacity: u32,
    /// Fair-share factor per team (missing: 1.0).
    fairshare: &'a BTreeMap<String, f64>,
    now: i64,
    now_ms: i64,
    nodes: PassNodes<'a>,
}

/// Phase 5: lendable idle capacity shared out by `idle_sharing`; returns each team's
/// allowance beyond its quota and the borrowers in the order they are served, each with its
/// team's band slot.
fn share_idle_capacity<'a>(
    rules: &Rules<'_>,
    pass: &Pass<'_>,
    queues: &Queues<'_>,
    running: &Running<'_>,
    pending: &Pending<'a>,
    room: Option<reclaim::Room>,
    holds: &Holds,
) -> Shares<'a> {
    let mut asks = straddling_asks(rules, queues, pending);
    let claims = Claims { asks: &asks, holds };
    let shares = share_with(rules, pass, queues, running, pending, &claims, room.clone());
    // A straddling job that was not granted (its part beyond the quota was not there, or it
    // fits no node) holds its team's idle quota back for nothing: shared again without it.
    let mut dropped = false;
    for ask in &mut asks {
        if ask
            .as_ref()
            .is_some_and(|a| a.own > 0 && !shares.granted.iter().any(|e| e.id == a.job.id))
        {
            *ask = None;
            dropped = true;
        }
    }
    if !dropped {
        return shares;
    }
    let claims = Claims { asks: &asks, holds };
    share_with(rules, pass, queues, running, pending, &claims, room)
}

/// What holds a team's idle quota back from borrowers besides its in-quota jobs.
struct Claims<'c, 'a> {
    /// Each team's straddling job, if any.
    asks: &'c [Option<Ask<'a>>],
    holds: &'c Holds,
}

/// Per team (by its place in the configuration; empty where placement is unknown): its wide
/// in-quota jobs that fit nowhere now ([`reclaim::Reclaimed::unplaced`]).
#[derive(Default)]
struct Holds {
    /// Their GPUs.
    unplaced: Vec<u32>,
    /// The free GPUs they hold on the nodes they wait for.
    holding: Vec<u32>,
}

impl Holds {
    /// What team `t`'s waiting wide jobs leave of their claim on its idle quota: the GPUs
    /// they do not hold yet, lendable until they can start (they will start where the GPUs
    /// they hold are, not on these).
    fn released(&self, t: usize) -> u32 {
        let u = self.unplaced.get(t).copied().unwrap_or(0);
        u.saturating_sub(self.holding.get(t).copied().unwrap_or(0))
    }
}

/// [`share_idle_capacity`] with these straddling jobs.
fn share_with<'a>(
    rules: &Rules<'_>,
    pass: &Pass<'_>,
    queues: &Queues<'_>,
    running: &Running<'_>,
    pending: &Pending<'a>,
    claims: &Claims<'_, 'a>,
    mut room: Option<reclaim::Room>,
) -> Shares<'a> {
    let config = rules.config;
    let asks = claims.asks;
    let Lendable {
        lends,
        mut remaining,
    } = lendable_capacity(config, pass.capacity, running, pending, claims);
    // Each team's band slot (the team served last has the lowest); under fifo every team
    // shares slot 0 and Slurm serves the oldest first.
    let ranked = by_fairshare_order(rules, pass.fairshare);
    let bands = match config.cluster.idle_sharing {
        IdleSharing::FairShare => band_slots(&ranked),
        IdleSharing::Fifo => vec![0; config.teams.len()],
    };
    let order = service_order(rules, &ranked, pending);
    let mut allowance = vec![0u32; config.teams.len()];
    // Each borrower walked with its team's band slot (the tails' follow theirs).
    let mut served: Vec<(Entry<'a>, u32)> =
        Vec::with_capacity(pending.borrowers.iter().map(Vec::len).sum());
    let mut granted = Vec::new();
    for t in order {
        let team = &config.teams[t];
        // A team never borrows its own idle quota.
        let own = lends[t];
        let available = u32::try_from((remaining - own).max(0)).unwrap_or(u32::MAX);
        let given = team_allowance(
            rules,
            running.usage[t],
            team,
            &pending.borrowers[t],
            pending.tails[t],
            pending.tail_smallest[t],
            queues.sized.and_then(|s| s.get(t)),
            asks[t].as_ref(),
            available,
            &mut granted,
            &mut room,
        );
        remaining -= i64::from(given);
        allowance[t] = given;
        served.extend(pending.borrowers[t].iter().map(|j| (*j, bands[t])));
    }
    if config.cluster.idle_sharing == IdleSharing::Fifo {
        served.sort_by_key(|(j, _)| (j.submit, j.id));
    }
    Shares {
        allowance,
        served,
        bands,
        granted,
        lends: lends
            .into_iter()
            .map(|n| u32::try_from(n.max(0)).unwrap_or(u32::MAX))
            .collect(),
    }
}

/// Each team's first borrower that can start and may borrow straddles its unused quota: it
/// uses that quota and borrows only the rest (a 3-GPU job of a team with 2 idle GPUs of quota
/// borrows 1). That quota is then not lent to others.
fn straddling_asks<'a>(
    rules: &Rules<'_>,
    queues: &Queues<'_>,
    pending: &Pending<'a>,
) -> Vec<Option<Ask<'a>>> {
    let may_borrow = |j: &Entry<'_>| rules.preemptible(j) && j.eligible;
    pending
        .room
        .iter()
        .enumerate()
        .map(|(t, &room)| {
            let tail = pending.tails[t];
            let j = match (tail.list, queues.askable.and_then(|a| a.get(t))) {
                // The walked borrowers, then the tail's first that may borrow, from the
                // caller's set of them.
                (List::Pending(list, table), Some(askable)) if !tail.is_empty() => pending
                    .borrowers[t]
                    .iter()
                    .copied()
                    .find(may_borrow)
                    .or_else(|| {
                        askable
                            .range(list[tail.from]..)
                            .next()
                            .map(|&(_, slot)| Entry {
                                job: table.job(slot),
                                slot,
                            })
                    }),
                _ => pending.borrowers_of(t).find(may_borrow),
            }?;
            let own = room.min(j.gpus);
            Some(Ask {
                job: j,
                beyond: j.gpus - own,
                own,
            })
        })
        .collect()
}

/// What [`lendable_capacity`] found.
struct Lendable {
    /// What each team lends: its idle quota not claimed by its own in-quota or straddling
    /// jobs, up to its lend limit.
    lends: Vec<i64>,
    /// What all borrowers may still take: the lendable capacity less what is borrowed now.
    remaining: i64,
}

/// Rule 4: the capacity borrowers may take. Unallocated capacity counts negative when quotas
/// exceed what is usable (a drained node): the missing GPUs come out of what others may
/// borrow.
fn lendable_capacity(
    config: &Config,
    capacity: u32,
    running: &Running<'_>,
    pending: &Pending<'_>,
    claims: &Claims<'_, '_>,
) -> Lendable {
    let total_quota: i64 = config.teams.iter().map(|t| i64::from(t.quota.total)).sum();
    let mut lendable = i64::from(capacity) - total_quota;
    let mut borrowed_now = 0i64;
    let mut lends = Vec::with_capacity(config.teams.len());
    for (i, t) in config.teams.iter().enumerate() {
        let used = running.usage[i];
        let claimed = pending.team_states[i]
            .pending_in_quota_gpus
            .saturating_sub(claims.holds.released(i))
            .saturating_add(claims.asks[i].as_ref().map_or(0, |a| a.own));
        let idle = t.quota.total.saturating_sub(used).saturating_sub(claimed);
        let lend = i64::from(t.lend_limit.min(t.quota.total).min(idle));
        lends.push(lend);
        lendable += lend;
        borrowed_now += i64::from(used.saturating_sub(t.quota.total));
    }
    Lendable {
        lends,
        remaining: lendable - borrowed_now,
    }
}

/// Band slots follow every team's place by fair-share factor, borrowing or not, so that a
/// team starting or stopping to borrow moves no other team's jobs; the last team has slot 0.
/// Indexed by the team's place in the configuration.
fn band_slots(ranked: &[usize]) -> Vec<u32> {
    let mut slots = vec![0u32; ranked.len()];
    for (i, t) in ranked.iter().rev().enumerate() {
        slots[*t] = u32::try_from(i).unwrap_or(u32::MAX);
    }
    slots
}

/// Every team by fair-share factor, highest first (missing: 1.0), then by name, each factor
/// looked up once.
fn by_fairshare_order(rules: &Rules<'_>, fairshare: &BTreeMap<String, f64>) -> Vec<usize> {
    let teams = &rules.config.teams;
    let factor: Vec<f64> = teams
        .iter()
        .map(|t| fairshare.get(&t.name).copied().unwrap_or(1.0))
        .collect();
    let mut all: Vec<usize> = rules.by_name.clone();
    all.sort_by(|a, b| {
        factor[*b]
            .partial_cmp(&factor[*a])
            .unwrap_or(std::cmp::Ordering::Equal)
            .then(teams[*a].name.cmp(&teams[*b].name))
    });
    all
}

/// Rule 5: the order borrowing teams are served in: by fair-share factor, or (fifo) by their
/// oldest borrower that may borrow. Teams by their place in the configuration.
fn service_order(rules: &Rules<'_>, ranked: &[usize], pending: &Pending<'_>) -> Vec<usize> {
    match rules.config.cluster.idle_sharing {
        IdleSharing::FairShare => ranked
            .iter()
            .copied()
            .filter(|t| pending.has_borrowers(*t))
            .collect(),
        IdleSharing::Fifo => {
            let mut order: Vec<usize> = rules
                .by_name
                .iter()
                .copied()
                .filter(|t| pending.has_borrowers(*t))
                .collect();
            order.sort_by_key(|t| {
                pending
                    .borrowers_of(*t)
                    .filter(|j| rules.preemptible(j) && j.eligible)
                    .map(|j| (j.submit, j.id))
                    .min()
                    .unwrap_or((i64::MAX, u64::MAX))
            });
            order
        }
    }
}

/// What one team is given beyond its quota: its borrowers in its own order, each served
/// while the GPUs it needs beyond the quota fit what is `available` and the team's borrow
/// headroom (a later, smaller job may still fit where an earlier one did not).
#[allow(clippy::too_many_arguments)]
fn team_allowance<'a>(
    rules: &Rules<'_>,
    used: u32,
    team: &Team,
    walked: &[Entry<'a>],
    tail: Tail<'a>,
    tail_smallest: Option<u32>,
    sized: Option<&Sized>,
    ask: Option<&Ask<'a>>,
    mut available: u32,
    granted: &mut Vec<Entry<'a>>,
    room: &mut Option<reclaim::Room>,
) -> u32 {
    let borrowed = used.saturating_sub(team.quota.total);
    let headroom = team
        .borrow_limit
        .map(|b| b.saturating_sub(borrowed))
        .unwrap_or(u32::MAX);
    let mut given = 0u32;
    let ask_id = ask.map(|a| a.job.id);
    let mut seen_ask = false;
    // With the tail's jobs by size at hand, the walk stops before the tail, which is read
    // after it through them.
    let by_size = match (tail.list, sized) {
        (List::Pending(list, table), Some(sized)) if !tail.is_empty() => {
            Some((list[tail.from], table, sized))
        }
        _ => None,
    };
    let borrowers = walked.iter().map(|j| (false, *j)).chain(
        tail.iter()
            .take(if by_size.is_some() { 0 } else { usize::MAX })
            .filter(|j| j.startable())
            .map(|j| (true, j)),
    );
    let mut into_tail = false;
    let mut stopped = false;
    for (in_tail, j) in borrowers {
        if in_tail && !into_tail {
            into_tail = true;
            // The tail's jobs ask for their GPUs beyond the quota (but the straddling one,
            // whose tasks follow each other), and none asks for fewer than its smallest: when
            // that is more than is left, the tail gets nothing.
            let left = available.min(headroom.saturating_sub(given));
            let ask_behind = ask_id.is_none() || (seen_ask && ask_id != Some(j.id));
            if ask_behind && tail_smallest.is_none_or(|g| g > left) {
                break;
            }
        }
        let is_ask = ask_id == Some(j.id);
        seen_ask |= is_ask;
        let left = available.min(headroom.saturating_sub(given));
        // Every borrower but the straddling one asks for at least one GPU beyond the quota
        // (it did not fit what was left of it): once nothing is left and that one is behind,
        // nothing more is given, and a long queue costs no walk.
        if left == 0 && (ask_id.is_none() || (seen_ask && !is_ask)) {
            stopped = true;
            break;
        }
        // A non-preemptible class may never borrow; a job that could not start anyway
        // (begin time, dependency) must not open the door for one that may not borrow.
        if !rules.preemptible(&j) || !j.eligible {
            continue;
        }
        let beyond = match ask {
            Some(a) if is_ask => a.beyond,
            _ => j.gpus,
        };
        // Lending by placement: a borrower that fits no node's idle GPUs gets nothing.
        if beyond <= left && room.as_mut().is_none_or(|r| r.take(&j)) {
            available -= beyond;
            given += beyond;
            granted.push(j);
        }
    }
    if let Some((from, table, sized)) = by_size.filter(|_| !stopped) {
        let walk = TailWalk {
            rules,
            headroom,
            ask,
            seen_ask,
            tail_smallest,
            room,
        };
        given = walk.run(from, table, sized, given, available, granted);
    }
    given
}

/// [`team_allowance`]'s walk over a tail, reading only the jobs that could still get some of
/// what is left (their GPUs, or the straddling job's beyond, no more than it) through the
/// tail's jobs by size: each job it passes over would have been passed over one by one for
/// asking more than is left, which only shrinks. The same grants in the same order.
struct TailWalk<'r, 'a> {
    rules: &'r Rules<'r>,
    headroom: u32,
    ask: Option<&'r Ask<'a>>,
    seen_ask: bool,
    tail_smallest: Option<u32>,
    /// Lending by placement ([`team_allowance`]).
    room: &'r mut Option<reclaim::Room>,
}

impl<'a> TailWalk<'_, 'a> {
    fn run(
        mut self,
        from: (PendingKey, usize),
        table: &'a dyn Table,
        sized: &Sized,
        mut given: u32,
        mut available: u32,
        granted: &mut Vec<Entry<'a>>,
    ) -> u32 {
        let rules = self.rules;
        let ask_id = self.ask.map(|a| a.job.id);
        // The straddling job, when it is in the tail and not yet walked: it is read in its
        // place whatever it asks for.
        let ask_at = self
            .ask
            .filter(|_| !self.seen_ask)
            .map(|a| (rules.pending_key(&a.job), a.job.slot))
            .filter(|at| *at >= from);
        let mut ask_next = ask_at;
        {
            // As on entering the tail one by one: when the straddling job is behind and no
            // job of the tail asks for what is left or less, the tail gets nothing.
            let left = available.min(self.headroom.saturating_sub(given));
            if ask_next.is_none() && self.tail_smallest.is_none_or(|g| g > left) {
                return given;
            }
        }
        let mut cursors: Vec<(u32, std::iter::Peekable<_>)> = sized
            .iter()
            .map(|(g, set)| (*g, set.range(from..).peekable()))
            .collect();
        loop {
            let left = available.min(self.headroom.saturating_sub(given));
            let mut best: Option<((PendingKey, usize), Option<usize>)> =
                ask_next.map(|a| (a, None));
            for (c, (g, cursor)) in cursors.iter_mut().enumerate() {
                if *g > left {
                    break;
                }
                // The straddling job is read from its own place.
                if cursor.peek().is_some_and(|e| Some(**e) == ask_at) {
                    cursor.next();
                }
                if let Some(&&e) = cursor.peek() {
                    if best.is_none_or(|(b, _)| e < b) {
                        best = Some((e, Some(c)));
                    }
                }
            }
            let Some((at, from_cursor)) = best else {
                break;
            };
            match from_cursor {
                Some(c) => {
                    cursors[c].1.next();
                }
                None => ask_next = None,
            }
            let j = Entry {
                job: table.job(at.1),
                slot: at.1,
            };
            let is_ask = ask_id == Some(j.id);
            self.seen_ask |= is_ask;
            if left == 0 && (ask_id.is_none() || (self.seen_ask && !is_ask)) {
                break;
            }
            if !rules.preemptible(&j) || !j.eligible {
                continue;
            }
            let beyond = match self.ask {
                Some(a) if is_ask => a.beyond,
                _ => j.gpus,
            };
            if beyond <= left && self.room.as_mut().is_none_or(|r| r.take(&j)) {
                available -= beyond;
                given += beyond;
                granted.push(j);
            }
        }
        given
    }
}

/// What [`share_idle_capacity`] decided.
struct Shares<'a> {
    /// Each team's allowance beyond its quota (0 for teams not borrowing).
    allowance: Vec<u32>,
    /// The borrowers walked (not in a tail) in the order they are served, each with its
    /// team's band slot.
    served: Vec<(Entry<'a>, u32)>,
    /// Each team's band slot, by its place in the configuration.
    bands: Vec<u32>,
    /// The borrowers the allowances cover (they may start on borrowed GPUs now).
    granted: Vec<Entry<'a>>,
    /// What each team's idle quota offered to borrowers.
    lends: Vec<u32>,
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

/// The priorities the phases set, gathered as they go and made into the plan's map once
/// (a map insert per job per pass was a tenth of a replay).
#[derive(Default)]
struct Priorities {
    /// (job id, priority, whether it only raises an earlier one), in the order set.
    ops: Vec<(u64, u32, bool)>,
}

impl Sink for Priorities {
    fn set(&mut self, e: Entry<'_>, p: u32) {
        self.ops.push((e.id, p, false));
    }

    fn raise(&mut self, e: Entry<'_>, p: u32) {
        self.ops.push((e.id, p, true));
    }
}

impl Priorities {
    fn into_map(mut self) -> BTreeMap<u64, u32> {
        // Stable: each job's operations stay in the order they were made.
        self.ops.sort_by_key(|o| o.0);
        let mut out: Vec<(u64, u32)> = Vec::with_capacity(self.ops.len());
        for (id, p, raise) in self.ops {
            match out.last_mut() {
                Some(last) if last.0 == id => last.1 = if raise { last.1.max(p) } else { p },
                _ => out.push((id, p)),
            }
        }
        out.into_iter().collect()
    }
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

/// What [`plan_pool`] decided for one pool of GPUs.
struct PoolPlan {
    plan: Plan,
    /// Each team's allowance beyond its quota, by its place in the configuration (for the
    /// borrow limits shared between types).
    allowance: Vec<u32>,
    /// What each team's idle quota offered to borrowers, by its place in the configuration
    /// (for the lend limits shared between types).
    lends: Vec<u32>,
}

/// One pool of GPUs, governed by the rules of DESIGN §4 with the configuration's quotas and
/// limits as totals, phase by phase.
fn plan_pool(input: &GovernInput<'_>) -> PoolPlan {
    let expanded = expand_arrays(input.jobs, input.capacity);
    let jobs = expanded.as_deref().unwrap_or(input.jobs);
    let config = input.config;
    let rules = Rules::new(config);
    let mut queues = Queues::from_jobs(&rules, jobs);
    let mut outside = std::mem::take(&mut queues.outside);
    outside.dedup(); // an array's tasks follow each other
    let pass = Pass {
        capacity: input.capacity,
        fairshare: input.fairshare,
        now: input.now,
        now_ms: input.now_ms,
        nodes: PassNodes::Given(input.node_gpus),
    };
    let mut priorities = Priorities::default();
    let d = decide(&rules, &pass, &queues, &mut priorities, None);

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
    let plan = Plan {
        priorities: priorities.into_map(),
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
        state,
    };
    PoolPlan {
        plan,
        allowance: d.allowance,
        lends: d.lends,
    }
}

/// What the phases decided in one pass (the plan less its priorities, which went to the
/// sink).
struct Decided<'a> {
    /// The running borrowed jobs in reclaim order.
    victims: Vec<Ranked<'a>>,
    /// C less the GPUs the teams' running jobs hold.
    free: u32,
    /// Σ GPUs of pending jobs that fit their team's unused quota.
    pending_in_quota_gpus: u32,
    /// The GPUs of the victims those jobs need, placed, and the free GPUs they leave.
    reclaim_gpus: u32,
    spare: Option<u32>,
    /// Pending jobs that fit their team's quota or displace a lower class.
    in_quota: Vec<Entry<'a>>,
    displace: Vec<u64>,
    reclaim: Vec<u64>,
    violations: Vec<u64>,
    over_ceiling: Vec<u64>,
    park: Vec<u64>,
    release: Vec<u64>,
    /// By team, by its place in the configuration.
    team_states: Vec<TeamState>,
    gpu_limits: Vec<u32>,
    allowance: Vec<u32>,
    lends: Vec<u32>,
    /// Per team, how many of its queued jobs were walked one by one (the rest is its tail).
    walked: Vec<usize>,
    /// The places of the borrowers lent to ([`prioritise_granted`]): a [`Planner`] writes
    /// their priorities again at its next pass (their tail's level no longer says theirs).
    granted: Vec<usize>,
}

/// The phases of DESIGN §4 over one pass's queues: per-team usage, what runs inside each
/// quota (protected) and what is borrowed (victims), then what waits and fits the unused
/// quota, displaces a lower class or borrows; reclaim, parking, idle sharing and ceilings.
fn decide<'a>(
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
    // Lending by placement: the idle GPUs the in-quota jobs leave, where the nodes are known.
    let room = match room {
        Some(room) => Some(room),
        None if pending.has_any_borrowers() => {
            placement_known(&nodes).then(|| reclaim::Room::new(nodes.get()))
        }
        None => None,
    };
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
    let walked = pending
        .tails
        .iter()
        .enumerate()
        .map(|(t, tail)| queues.pending(t).len() - tail.len())
        .collect();
    let mut in_quota = pending.in_quota;
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
    }
}

/// The GPUs teams' running jobs hold in all.
fn gpus_in_use(running: &Running<'_>) -> u32 {
    running.usage.iter().fold(0u32, |s, u| s.saturating_add(*u))
}

/// The state a pass publishes, before its teams are filled in.
fn new_state(
    input: &GovernInput<'_>,
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
    }
}

/// Rule 3 and 6 for the pending jobs that fit: in-quota jobs share one level, above exactly
/// the victims they need together; displacing jobs wait for the governor's requeue, so they
/// preempt nobody themselves. Returns the parked ones among them, to release.
fn prioritise_fitting(
    rules: &Rules<'_>,
    in_quota_level: u32,
    pending: &Pending<'_>,
    priorities: &mut dyn Sink,
) -> Vec<u64> {
    let mut release = Vec::new();
    for &j in &pending.in_quota {
        priorities.raise(j, encode(in_quota_level, rules.class_idx(&j)));
        if j.parked || j.park_held {
            release.push(j.id);
        }
    }
    for &j in &pending.displacing {
        let level = priority::reclaim_level(0);
        priorities.raise(j, encode(level, rules.class_idx(&j)));
        if j.parked || j.park_held {
            release.push(j.id);
        }
    }
    release.sort_unstable();
    release.dedup();
    release
}

/// Rule 6: non-preemptible jobs that do not fit. Parked by begin time (the plugin's, at
/// submit) is not enough, as the owner may move it; the governor holds them too. An array's
/// record is parked only when none of its tasks fits: while one does, its tasks may start up
/// to the team's limit, and a non-preemptible task that starts beyond the quota is a
/// violation (requeued, then parked).
fn jobs_to_park(rules: &Rules<'_>, queues: &Queues<'_>, pending: &Pending<'_>) -> Vec<u64> {
    let to_park = |j: &Entry<'_>| !rules.preemptible(j) && !j.park_held;
    let mut park: Vec<u64> = pending
        .borrowers
        .iter()
        .flatten()
        .filter(|j| to_park(j))
        .map(|j| j.id)
        .collect();
    for (t, tail) in pending.tails.iter().enumerate() {
        let Some(first) = tail.first() else {
            continue;
        };
        match &queues.unparked {
            // The few such jobs of the team, those in the tail.
            Some(unparked) => {
                let from = (rules.pending_key(&first), first.slot);
                park.extend(
                    unparked[t]
                        .iter()
                        .filter(|j| (rules.pending_key(j), j.slot) >= from)
                        .filter(|j| j.startable() && to_park(j))
                        .map(|j| j.id),
                );
            }
            None => park.extend(
                tail.iter()
                    .filter(|j| j.startable() && to_park(j))
                    .map(|j| j.id),
            ),
        }
    }
    if park.is_empty() {
        return park;
    }
    park.sort_unstable();
    park.dedup();
    let fitting: BTreeSet<u64> = pending
        .in_quota
        .iter()
        .chain(&pending.displacing)
        .map(|j| j.id)
        .collect();
    park.retain(|id| !fitting.contains(id));
    park
}

/// Borrowers wait in bands (their team's slot in the service order, then their class),
/// inside which Slurm itself serves the oldest submission first (equal priorities: submit
/// time, then job id). A job's priority moves only when its band does, so a long queue costs
/// no updates while the front of it changes (issue 9).
fn prioritise_borrowers(rules: &Rules<'_>, served: &[(Entry<'_>, u32)], priorities: &mut dyn Sink) {
    for (j, slot) in served {
        let level = if rules.preemptible(j) {
            priority::borrow_band(*slot, rules.class_rank(j))
        } else {
            priority::BORROW_BASE
        };
        priorities.raise(*j, encode(level, rules.class_idx(j)));
    }
}

/// The tails' jobs: borrowers in their team's band, and jobs that cannot start at the bottom,
/// as [`prioritise_borrowers`] and [`prioritise_waiting`] rank them.
fn prioritise_tails(
    rules: &Rules<'_>,
    tails: &[Tail<'_>],
    bands: &[u32],
    priorities: &mut dyn Sink,
) {
    for (t, &tail) in tails.iter().enumerate() {
        if tail.is_empty() {
            continue;
        }
        let band = bands[t];
        let priority = |j: &ClusterJob| {
            let level = if j.startable() && rules.preemptible(j) {
                priority::borrow_band(band, rules.class_rank(j))
            } else {
                priority::BORROW_BASE
            };
            encode(level, rules.class_idx(j))
        };
        priorities.tail(t, tail, band, &priority);
    }
}

/// The borrowers the pass lent to rank above every other borrower: Slurm serves equal
/// priorities oldest first, and an older job of their band that fits nowhere (passing the
/// team's limit on the allowance they were given) would fail for resources first, which stops
/// Slurm's main scheduler from starting anything after it in the partition until backfill.
fn prioritise_granted(rules: &Rules<'_>, granted: &[Entry<'_>], priorities: &mut dyn Sink) {
    for &j in granted {
        priorities.raise(j, encode(priority::GRANTED_LEVEL, rules.class_idx(&j)));
    }
}

/// Jobs that cannot start now sit at the bottom; the pass after they become eligible ranks
/// them.
fn prioritise_waiting(rules: &Rules<'_>, waiting: &[Entry<'_>], priorities: &mut dyn Sink) {
    for &j in waiting {
        let level = priority::BORROW_BASE;
        priorities.raise(j, encode(level, rules.class_idx(&j)));
    }
}

/// Rules 1 and 4: each team's GPU limit is its quota (or what it runs, when more) plus its
/// allowance, never above quota + borrow limit; also written into its published state.
fn team_gpu_limits(
    config: &Config,
    running: &Running<'_>,
    allowance: &[u32],
    team_states: &mut [TeamState],
) -> Vec<u32> {
    let mut gpu_limits = Vec::with_capacity(config.teams.len());
    for (i, t) in config.teams.iter().enumerate() {
        let used = running.usage[i];
        let mut limit = t.quota.total.max(used).saturating_add(allowance[i]);
        if let Some(b) = t.borrow_limit {
            limit = limit.min(t.quota.total.saturating_add(b));
        }
        gpu_limits.push(limit);
        if let Some(ts) = team_states.get_mut(i) {
            ts.gpu_limit = limit;
        }
    }
    gpu_limits
}

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

/// Whether a job of no team holds or asks for GPUs (held ones are the governor's doing).
fn is_outside(j: &ClusterJob) -> bool {
    j.gpus > 0 && (j.phase == Phase::Running || j.priority != 0)
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
fn plan_typed(input: &GovernInput<'_>) -> Plan {
    let config = input.config;
    let types = pool_types(input);
    let (pool_jobs, untyped) = jobs_by_pool(input, &types);
    let used = running_by_team_and_type(&pool_jobs);
    let mut merged = Plan {
        priorities: BTreeMap::new(),
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
        state: new_state(input, 0, 0, Vec::new()),
    };
    let mut spent = SpentAcrossTypes::default();
    let no_types = BTreeMap::new();
    let no_node_types = BTreeMap::new();
    for k in &types {
        let pool_config = pool_config(config, k, &types, &used, &spent);
        let node_gpus = node_gpus_of_type(input.node_types, k);
        let pool_input = GovernInput {
            config: &pool_config,
            capacity: input.capacity_by_type.get(k).copied().unwrap_or(0),
            jobs: &pool_jobs[k.as_str()],
            fairshare: input.fairshare,
            now: input.now,
            now_ms: input.now_ms,
            node_gpus: &node_gpus,
            capacity_by_type: &no_types,
            node_types: &no_node_types,
        };
        let pool = plan_pool(&pool_input);
        spent.add(config, &pool);
        merge_pool(&mut merged, k, pool.plan);
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
    merged
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
    let mut kinds = node_types.get(node)?.iter().filter(|(_, n)| **n > 0);
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
    for (team, limit) in p.gpu_limits {
        let e = merged.gpu_limits.entry(team.clone()).or_insert(0);
        *e = e.saturating_add(limit);
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
    merge_pool_state(&mut merged.state, k, p.state);
}

/// Pool `k`'s state kept as the pool's, and added into the totals the plugin reads.
fn merge_pool_state(st: &mut PublishedState, k: &str, pool: PublishedState) {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::priority::{class_index as class_of_priority, level, VICTIM_BASE};

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
}
