//! Phase 4 (DESIGN §4 rule 3): the victims the pending in-quota jobs need, by placement where
//! the nodes are known ([`reclaim`]), otherwise by count; and the victims the
//! governor requeues itself when Slurm has not preempted them (the fallback).

use super::nodes::{LazyNodes, PassNodes};
use super::pending::Pending;
use super::queues::{Entry, Sink};
use super::rules::Rules;
use super::running::{Running, TeamRunning};
use super::sharing::Holds;
use super::victims::Ranked;
use super::{reclaim, reclaim_level_by, waited_for_fallback, ClusterJob};
use crate::priority;

/// Phase 4: the victims pending in-quota jobs need, their levels and theirs.
pub(super) struct Reclaim<'a> {
    /// Every running borrowed job in reclaim order, the victims found first.
    pub victims: Vec<Ranked<'a>>,
    /// The level of the pending in-quota jobs: above exactly the victims they need.
    pub level: u32,
    /// Victims the governor requeues itself for in-quota jobs Slurm has not started within
    /// [`RECLAIM_FALLBACK_MS`](super::RECLAIM_FALLBACK_MS).
    pub requeue: Vec<u64>,
    /// The GPUs of the victims found, and the free GPUs the in-quota jobs leave (`None`
    /// where placement is unknown).
    pub gpus: u32,
    pub spare: Option<u32>,
    /// The nodes' free GPUs once the in-quota jobs are placed, for lending by placement
    /// (`None` where placement is unknown).
    pub room: Option<reclaim::Room>,
    /// Wide in-quota jobs that fit nowhere now.
    pub holds: Holds,
    /// In-quota jobs that can start and fit nowhere ([`reclaim::Reclaimed::stuck`]).
    pub stuck: Vec<u64>,
}

/// Phase 4. Where the nodes are known, victims by placement ([`reclaim::by_placement`]):
/// any job of a team above its quota where the in-quota job then fits, the victims found
/// ranked first and the in-quota jobs just above them. Without placement, the borrowed jobs
/// in reclaim order until the GPUs needed beyond the free ones are covered.
#[allow(clippy::too_many_arguments)]
pub(super) fn reclaim_phase<'a>(
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
            stuck: Vec::new(),
        };
    }
    if !placement_known(nodes) {
        let gpus = pending
            .in_quota
            .iter()
            .fold(0u32, |s, j| s.saturating_add(j.gpus));
        let level = reclaim_level_by(
            victims
                .iter()
                .map(|v| (v.job.gpus, v.exempt_until, v.level)),
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
            stuck: Vec::new(),
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
    let level = reclaim::level(&victims, found.victims.len());
    Reclaim {
        victims,
        level,
        requeue: found.requeue,
        gpus: found.gpus,
        spare: Some(found.spare),
        room: found.room,
        holds: Holds {
            unplaced: found.unplaced,
            holding: found.holding,
        },
        stuck: found.stuck,
    }
}

/// Whether the pass knows where the GPUs are: the usable nodes, and (given as a snapshot)
/// every running job's nodes. A [`Planner`](super::Planner)'s jobs always say where they run.
pub(super) fn placement_known(nodes: &LazyNodes<'_, '_>) -> bool {
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

/// Phase 4 without placement: borrowed jobs the governor requeues itself for in-quota jobs that
/// still wait after [`RECLAIM_FALLBACK_MS`](super::RECLAIM_FALLBACK_MS) (Slurm normally preempts
/// for them within a second), in reclaim order until the GPUs they need beyond the free ones are
/// covered. Exempt victims, jobs already displaced and victims already ending (they free their GPUs
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
