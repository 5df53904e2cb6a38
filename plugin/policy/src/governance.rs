//! The governor's plan: from what runs and waits now, the priority of every governed job, the
//! GPU ceiling of every team, the within-team displacements, and the state the plugin reads.
//!
//! DESIGN §4, rule by rule:
//! 1. ceiling: each team's Slurm account carries `GrpTRES=gres/gpu=<limit>`, never above
//!    quota + borrow limit;
//! 2. guarantee: running jobs inside their team's quota get the protected band, above any
//!    pending job, so nothing preempts them;
//! 3. reclaim: running borrowed jobs get victim levels in reclaim order, and a pending job that
//!    fits its team's unused quota gets the level just above the victims it needs;
//! 4. borrowing only on lendable capacity: a team's limit exceeds its quota only by the share
//!    of lendable idle capacity it is given;
//! 5. idle sharing: that share goes to waiting teams by fair-share factor or by age (fifo);
//! 6. classes: higher classes rank first inside a team; a pending higher-class job at quota
//!    displaces the team's lowest-class job (the governor requeues it); non-preemptible classes
//!    are always protected.
//!
//! Pure: the caller reads Slurm and applies the plan.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};
use teamshare_config::{Config, IdleSharing, WithinTeam};

use crate::priority::{self, encode};

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

/// A governed job as squeue shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterJob {
    pub id: u64,
    pub team: String,
    pub phase: Phase,
    pub gpus: u32,
    /// Slurm's current priority: carries the class; 0 means held.
    pub priority: u32,
    pub submit: i64,
    pub start: Option<i64>,
    /// Pending for resources or limits only (not a begin time, dependency or hold): GPUs
    /// given to its team would start it.
    pub eligible: bool,
    /// A pending job's begin time when teamshare parked it (see [`PARK_SECS`]).
    pub parked: bool,
}

/// A non-preemptible job that does not fit its team's quota is parked: its begin time is set
/// this far ahead, so it cannot start on borrowed GPUs (the team's GPU limit cannot tell classes
/// apart). The governor sets it back to now once the job fits.
pub const PARK_SECS: i64 = 365 * 24 * 3600;

/// A begin time at least this far ahead is teamshare's parking, not the user's `--begin`.
pub const PARKED_AFTER_SECS: i64 = 300 * 24 * 3600;

pub struct GovernInput<'a> {
    pub config: &'a Config,
    /// C: GPUs of usable nodes in the governed partitions.
    pub capacity: u32,
    pub jobs: &'a [ClusterJob],
    /// Fair-share factor per team (missing: 1.0).
    pub fairshare: &'a BTreeMap<String, f64>,
    pub now: i64,
}

/// What the plugin reads (published atomically by the governor as JSON).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PublishedState {
    pub version: u32,
    pub generated_at: i64,
    pub capacity: u32,
    pub free_gpus: u32,
    /// Σ GPUs of pending jobs that fit their team's unused quota.
    pub pending_in_quota_gpus: u32,
    pub teams: BTreeMap<String, TeamState>,
    /// Running borrowed jobs in reclaim order (first victim first).
    pub victims: Vec<Victim>,
}

pub const STATE_VERSION: u32 = 1;

/// How long an in-quota job may wait before every victim is opened to it.
pub const ESCALATE_AFTER_SECS: i64 = 5;

/// How long an in-quota job may wait with victims available before the governor requeues
/// them itself. Slurm's scheduler normally preempts within a second of submission; when
/// several reclaiming jobs arrive together, one can take the GPUs another's preemption freed,
/// and Slurm was seen waiting 15 s before preempting again for the other.
pub const RECLAIM_FALLBACK_SECS: i64 = 2;

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

    /// The reclaim level for a pending in-quota job when `k` victims' GPUs are needed in all:
    /// just above the k-th victim Slurm may still preempt (younger ones are exempt and
    /// skipped).
    pub fn reclaim_level(&self, k: u32, now: i64) -> u32 {
        if k == 0 {
            return priority::reclaim_level(0);
        }
        let mut needed = k;
        let mut last = None;
        for (rank, v) in self.victims.iter().enumerate() {
            last = Some(rank);
            if v.exempt_until > now {
                continue;
            }
            needed = needed.saturating_sub(v.gpus.max(1));
            if needed == 0 {
                return priority::reclaim_level(rank + 1);
            }
        }
        match last {
            Some(rank) => priority::reclaim_level(rank + 1),
            None => priority::reclaim_level(0),
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    /// The priority every governed, non-held job should have.
    pub priorities: BTreeMap<u64, u32>,
    /// GrpTRES gres/gpu per team.
    pub gpu_limits: BTreeMap<String, u32>,
    /// Running jobs to requeue so a higher class of the same team can run.
    pub displace: Vec<u64>,
    /// Borrowed jobs to requeue for in-quota jobs Slurm has not started within
    /// [`RECLAIM_FALLBACK_SECS`].
    pub reclaim: Vec<u64>,
    /// Pending non-preemptible jobs to park (begin time far ahead) or release (begin now).
    pub park: Vec<u64>,
    pub release: Vec<u64>,
    pub state: PublishedState,
}

pub fn plan(input: &GovernInput<'_>) -> Plan {
    let config = input.config;
    let table = classes(config);
    let class_of = |j: &ClusterJob| -> &Class {
        let i = usize::from(priority::class_index(j.priority));
        table.get(i).unwrap_or(&table[0])
    };
    let class_idx = |j: &ClusterJob| -> u8 {
        let i = priority::class_index(j.priority);
        if usize::from(i) < table.len() {
            i
        } else {
            0
        }
    };
    let within = config.governance.preempt_within_team == WithinTeam::LowerPriority;
    let exempt =
        i64::try_from(config.governance.min_runtime_before_reclaim.as_secs()).unwrap_or(i64::MAX);

    let mut priorities = BTreeMap::new();
    let mut victims: Vec<(&ClusterJob, f64)> = Vec::new();
    let mut usage: BTreeMap<&str, u32> = BTreeMap::new();
    let mut protected_by_team: BTreeMap<&str, Vec<&ClusterJob>> = BTreeMap::new();

    // Running jobs: inside the quota (higher classes first, then oldest) or borrowed.
    for team in &config.teams {
        let mut running: Vec<&ClusterJob> = input
            .jobs
            .iter()
            .filter(|j| j.team == team.name && j.phase == Phase::Running)
            .collect();
        running.sort_by(|a, b| {
            class_of(b)
                .value
                .cmp(&class_of(a).value)
                .then(a.start.cmp(&b.start))
                .then(a.id.cmp(&b.id))
        });
        let used: u32 = running.iter().map(|j| j.gpus).sum();
        usage.insert(team.name.as_str(), used);
        let over = (f64::from(used) - f64::from(team.quota.total)) / f64::from(team.weight.max(1));
        let mut inside = 0u32;
        for j in running {
            let c = class_of(j);
            if inside + j.gpus <= team.quota.total || !c.preemptible {
                inside += j.gpus;
                priorities.insert(
                    j.id,
                    encode(priority::protected_level(c.value), class_idx(j)),
                );
                protected_by_team
                    .entry(team.name.as_str())
                    .or_default()
                    .push(j);
            } else {
                victims.push((j, over));
            }
        }
    }
    // Reclaim order: most over quota for its weight, lowest class, most recently started.
    victims.sort_by(|(a, oa), (b, ob)| {
        ob.partial_cmp(oa)
            .unwrap_or(std::cmp::Ordering::Equal)
            .then(class_of(a).value.cmp(&class_of(b).value))
            .then(b.start.cmp(&a.start))
            .then(b.id.cmp(&a.id))
    });
    let victim_states: Vec<Victim> = victims
        .iter()
        .enumerate()
        .map(|(rank, (j, _))| {
            let level = priority::victim_level(rank);
            priorities.insert(j.id, encode(level, class_idx(j)));
            Victim {
                job_id: j.id,
                team: j.team.clone(),
                gpus: j.gpus,
                level,
                exempt_until: j.start.unwrap_or(input.now).saturating_add(exempt),
            }
        })
        .collect();

    let total_used: u32 = usage.values().sum();
    let free = input.capacity.saturating_sub(total_used);

    // Pending jobs: in quota, displacing a lower class of the same team, or borrowing.
    let mut in_quota: Vec<&ClusterJob> = Vec::new();
    let mut displacing: Vec<&ClusterJob> = Vec::new();
    let mut borrowers: BTreeMap<&str, Vec<&ClusterJob>> = BTreeMap::new();
    let mut displace: Vec<u64> = Vec::new();
    let mut team_states = BTreeMap::new();
    let mut targeted: BTreeSet<u64> = BTreeSet::new();
    for team in &config.teams {
        let mut pending: Vec<&ClusterJob> = input
            .jobs
            .iter()
            .filter(|j| j.team == team.name && j.phase == Phase::Pending && j.priority != 0)
            .collect();
        pending.sort_by(|a, b| {
            class_of(b)
                .value
                .cmp(&class_of(a).value)
                .then(a.submit.cmp(&b.submit))
                .then(a.id.cmp(&b.id))
        });
        let used = usage.get(team.name.as_str()).copied().unwrap_or(0);
        let mut room = team.quota.total.saturating_sub(used);
        let mut pending_in_quota = 0;
        for j in pending {
            if j.gpus <= room {
                room -= j.gpus;
                pending_in_quota += j.gpus;
                in_quota.push(j);
                continue;
            }
            if within {
                // The team's own protected jobs of a lower class, lowest class and youngest
                // first, until enough GPUs would be freed.
                let mut lower: Vec<&&ClusterJob> = protected_by_team
                    .get(team.name.as_str())
                    .map(|v| v.iter().collect())
                    .unwrap_or_default();
                lower.retain(|r| {
                    class_of(r).preemptible
                        && class_of(r).value < class_of(j).value
                        && !targeted.contains(&r.id)
                });
                lower.sort_by(|a, b| {
                    class_of(a)
                        .value
                        .cmp(&class_of(b).value)
                        .then(b.start.cmp(&a.start))
                });
                let mut freed = room;
                let mut chosen = Vec::new();
                for r in lower {
                    if freed >= j.gpus {
                        break;
                    }
                    freed += r.gpus;
                    chosen.push(r.id);
                }
                if freed >= j.gpus && !chosen.is_empty() {
                    room = freed - j.gpus;
                    targeted.extend(chosen.iter().copied());
                    displace.extend(chosen);
                    displacing.push(j);
                    continue;
                }
            }
            borrowers.entry(team.name.as_str()).or_default().push(j);
        }
        team_states.insert(
            team.name.clone(),
            TeamState {
                running_gpus: used,
                pending_in_quota_gpus: pending_in_quota,
                gpu_limit: 0,
            },
        );
    }

    // In-quota pending jobs share one level: above exactly the victims they need together.
    let pending_in_quota_gpus: u32 = in_quota.iter().map(|j| j.gpus).sum();
    let mut state = PublishedState {
        version: STATE_VERSION,
        generated_at: input.now,
        capacity: input.capacity,
        free_gpus: free,
        pending_in_quota_gpus,
        teams: BTreeMap::new(),
        victims: victim_states,
    };
    let mut k = pending_in_quota_gpus.saturating_sub(free);
    // A job that still waits after a few passes could not be placed on the victims (or free
    // GPUs) counted for it, e.g. a multi-GPU job whose victims sit on different nodes: open
    // every victim to it and let Slurm choose where it fits.
    if in_quota
        .iter()
        .any(|j| input.now.saturating_sub(j.submit) >= ESCALATE_AFTER_SECS)
    {
        k = state
            .victims
            .iter()
            .map(|v| v.gpus.max(1))
            .sum::<u32>()
            .max(k);
    }
    let reclaim = state.reclaim_level(k, input.now);

    // Fallback reclaim: in-quota jobs still waiting are given the victims they need directly.
    let waiting: u32 = in_quota
        .iter()
        .filter(|j| j.eligible && input.now.saturating_sub(j.submit) >= RECLAIM_FALLBACK_SECS)
        .map(|j| j.gpus)
        .sum();
    let mut needed = waiting.saturating_sub(free);
    let mut reclaim_now = Vec::new();
    for v in &state.victims {
        if needed == 0 {
            break;
        }
        if v.exempt_until > input.now || displace.contains(&v.job_id) {
            continue;
        }
        reclaim_now.push(v.job_id);
        needed = needed.saturating_sub(v.gpus.max(1));
    }
    let mut park = Vec::new();
    let mut release = Vec::new();
    for j in &in_quota {
        priorities.insert(j.id, encode(reclaim, class_idx(j)));
        if j.parked {
            release.push(j.id);
        }
    }
    for j in &displacing {
        if j.parked {
            release.push(j.id);
        }
    }
    for jobs in borrowers.values() {
        for j in jobs {
            if !class_of(j).preemptible && !j.parked && j.eligible {
                park.push(j.id);
            }
        }
    }
    // Displacing jobs wait for the governor's requeue: they preempt nobody themselves.
    for j in &displacing {
        priorities.insert(j.id, encode(priority::reclaim_level(0), class_idx(j)));
    }

    // Borrowing: lendable idle capacity, shared by idle_sharing.
    // Unallocated capacity counts negative when quotas exceed what is usable (a drained
    // node): the missing GPUs come out of what others may borrow.
    let total_quota: i64 = config.teams.iter().map(|t| i64::from(t.quota.total)).sum();
    let mut lendable = i64::from(input.capacity) - total_quota;
    let mut borrowed_now = 0i64;
    // What each team lends: its idle quota not claimed by its own waiting in-quota jobs, up to
    // its lend limit.
    let mut lends: BTreeMap<&str, i64> = BTreeMap::new();
    for t in &config.teams {
        let used = usage.get(t.name.as_str()).copied().unwrap_or(0);
        let claimed = team_states
            .get(&t.name)
            .map(|s| s.pending_in_quota_gpus)
            .unwrap_or(0);
        let idle = t.quota.total.saturating_sub(used).saturating_sub(claimed);
        let lend = i64::from(t.lend_limit.min(t.quota.total).min(idle));
        lends.insert(t.name.as_str(), lend);
        lendable += lend;
        borrowed_now += i64::from(used.saturating_sub(t.quota.total));
    }
    // Shared by all borrowers; a team never borrows its own idle quota.
    let mut remaining = lendable - borrowed_now;

    let mut order: Vec<&str> = borrowers.keys().copied().collect();
    match config.cluster.idle_sharing {
        IdleSharing::FairShare => order.sort_by(|a, b| {
            let fa = input.fairshare.get(*a).copied().unwrap_or(1.0);
            let fb = input.fairshare.get(*b).copied().unwrap_or(1.0);
            fb.partial_cmp(&fa)
                .unwrap_or(std::cmp::Ordering::Equal)
                .then(a.cmp(b))
        }),
        IdleSharing::Fifo => order.sort_by_key(|t| {
            borrowers[*t]
                .iter()
                .filter(|j| class_of(j).preemptible)
                .map(|j| (j.submit, j.id))
                .min()
                .unwrap_or((i64::MAX, u64::MAX))
        }),
    }
    let mut allowance: BTreeMap<&str, u32> = BTreeMap::new();
    let mut rank = 0usize;
    let mut borrow_jobs: Vec<&ClusterJob> = Vec::new();
    for name in &order {
        let team = config.team(name).expect("borrowers are configured teams");
        let used = usage.get(*name).copied().unwrap_or(0);
        let borrowed = used.saturating_sub(team.quota.total);
        let headroom = team
            .borrow_limit
            .map(|b| b.saturating_sub(borrowed))
            .unwrap_or(u32::MAX);
        let own = lends.get(*name).copied().unwrap_or(0);
        let mut available = u32::try_from((remaining - own).max(0)).unwrap_or(u32::MAX);
        let mut given = 0u32;
        for j in &borrowers[*name] {
            // A non-preemptible class may never borrow; a job that could not start anyway
            // (begin time, dependency) must not open the door for one that may not borrow.
            if !class_of(j).preemptible || !j.eligible {
                continue;
            }
            if j.gpus <= available.min(headroom.saturating_sub(given)) {
                available -= j.gpus;
                given += j.gpus;
            }
        }
        remaining -= i64::from(given);
        allowance.insert(name, given);
        // Everyone waiting to borrow, in the order they are served.
        for j in &borrowers[*name] {
            borrow_jobs.push(j);
        }
    }
    if config.cluster.idle_sharing == IdleSharing::Fifo {
        borrow_jobs.sort_by_key(|j| (j.submit, j.id));
    }
    for j in borrow_jobs {
        let level = if class_of(j).preemptible {
            priority::borrow_level(rank)
        } else {
            priority::BORROW_BASE
        };
        rank += 1;
        priorities.insert(j.id, encode(level, class_idx(j)));
    }

    let mut gpu_limits = BTreeMap::new();
    for t in &config.teams {
        let used = usage.get(t.name.as_str()).copied().unwrap_or(0);
        let mut limit =
            t.quota.total.max(used) + allowance.get(t.name.as_str()).copied().unwrap_or(0);
        if let Some(b) = t.borrow_limit {
            limit = limit.min(t.quota.total + b);
        }
        gpu_limits.insert(t.name.clone(), limit);
        if let Some(ts) = team_states.get_mut(&t.name) {
            ts.gpu_limit = limit;
        }
    }
    state.teams = team_states;

    Plan {
        priorities,
        gpu_limits,
        displace,
        reclaim: reclaim_now,
        park,
        release,
        state,
    }
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

    fn running(id: u64, team: &str, start: i64) -> ClusterJob {
        ClusterJob {
            id,
            team: team.into(),
            phase: Phase::Running,
            gpus: 1,
            priority: 1,
            submit: start - 1,
            start: Some(start),
            eligible: true,
            parked: false,
        }
    }

    fn pending(id: u64, team: &str, submit: i64) -> ClusterJob {
        ClusterJob {
            id,
            team: team.into(),
            phase: Phase::Pending,
            gpus: 1,
            priority: encode(priority::BORROW_BASE, 0),
            submit,
            start: None,
            eligible: true,
            parked: false,
        }
    }

    fn plan_for(config: &Config, jobs: &[ClusterJob], fs: &[(&str, f64)]) -> Plan {
        let fairshare = fs.iter().map(|(t, f)| (t.to_string(), *f)).collect();
        plan(&GovernInput {
            config,
            capacity: 8,
            jobs,
            fairshare: &fairshare,
            now: 1_000,
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
        // Above victims 8 and 7, below 6 and 5.
        assert!(l > level(p.priorities[&7]) && l < level(p.priorities[&6]));
        assert_eq!(p.state.pending_in_quota_gpus, 2);
    }

    #[test]
    fn in_quota_jobs_still_waiting_get_their_victims_requeued_directly() {
        let c = config("");
        let mut jobs: Vec<_> = (1..=8)
            .map(|i| running(i, "training", 100 + i as i64))
            .collect();
        jobs.push(pending(20, "agents", 1_000 - RECLAIM_FALLBACK_SECS));
        jobs.push(pending(21, "agents", 999));
        let p = plan_for(&c, &jobs, &[]);
        // Only the job waiting past the fallback delay, only one victim, the first in order.
        assert_eq!(p.reclaim, [8]);
        assert!(p.displace.is_empty());
    }

    #[test]
    fn an_in_quota_job_that_keeps_waiting_is_opened_to_every_victim() {
        let c = config("");
        let mut jobs: Vec<_> = (1..=8)
            .map(|i| running(i, "training", 100 + i as i64))
            .collect();
        let mut two = pending(20, "agents", 1_000 - ESCALATE_AFTER_SECS);
        two.gpus = 2;
        jobs.push(two);
        let p = plan_for(&c, &jobs, &[]);
        // Above all four victims, still below every protected job.
        assert!(level(p.priorities[&20]) > level(p.priorities[&5]));
        assert!(level(p.priorities[&20]) < priority::PROTECTED_BASE);
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
        let c = config("idle_sharing = \"fifo\"");
        let p = plan_for(&c, &jobs, &[("agents", 0.9), ("research", 0.2)]);
        assert_eq!((p.gpu_limits["agents"], p.gpu_limits["research"]), (2, 3));
        assert!(p.priorities[&31] > p.priorities[&30]);
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
    fn young_victims_are_skipped_when_counting_what_a_reclaim_needs() {
        let mut s = PublishedState {
            version: STATE_VERSION,
            generated_at: 0,
            capacity: 8,
            free_gpus: 0,
            pending_in_quota_gpus: 0,
            teams: BTreeMap::new(),
            victims: vec![],
        };
        for (rank, exempt_until) in [(0usize, 50i64), (1, 0), (2, 0)] {
            s.victims.push(Victim {
                job_id: rank as u64,
                team: "t".into(),
                gpus: 1,
                level: priority::victim_level(rank),
                exempt_until,
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
}
