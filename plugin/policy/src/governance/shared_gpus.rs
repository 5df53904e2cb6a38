//! GPUs that a whole type's pool and its shards' pool share (issue 30). Slurm gives a GPU
//! either to whole-GPU jobs or to shard jobs: a GPU with any shard in use is not there for a
//! whole-GPU job, and shards are not there on a GPU a whole-GPU job holds. The typed plan
//! governs the two as pools of their own (their quotas split by the family), so here:
//!
//! - each pool's room is lowered by what the other holds: a node's whole GPUs by the GPUs its
//!   shard jobs sit on, its shards by the whole GPUs taken, each pool's capacity by as much;
//! - an in-quota whole-GPU job that can start and that its pool can place nowhere, free or
//!   by its victims, gets GPUs whose shards all belong to victims of the shard pool (their teams stay at or above their quota, rule 2): on the node where the
//!   earliest-ranked such GPUs, then the fewest shard jobs, make room; the governor requeues
//!   those shard jobs;
//! - the other way round, an in-quota shard job placed nowhere (every GPU with room held
//!   whole) gets the GPUs of the whole pool's victims, in reclaim order, each freed GPU
//!   serving as many shard jobs as it has room for.
//!
//! Slurm's own preemption is not given these victims (their levels are the other pool's,
//! priced apart), so the governor requeues them at once, without the reclaim fallback's wait
//! ([`RECLAIM_FALLBACK_MS`](super::RECLAIM_FALLBACK_MS)), which only gives Slurm its turn
//! first. A whole-GPU job of several nodes is not served this way (it waits for the shards to end, or for victims of
//! its own pool).

use std::collections::BTreeMap;

use teamshare_config::SHARE_TYPE;

use super::nodes::node_shares;
use super::{ClusterJob, GovernInput, Phase, Victim};

/// Where the two kinds of job sit on the GPUs that shards are shares of.
pub(super) struct SharedGpus {
    /// The type the shards are shares of.
    whole: String,
    /// Shards per GPU.
    per_gpu: u32,
    /// Per node, per GPU index: the running shard jobs there.
    placed: BTreeMap<String, BTreeMap<u32, Vec<u64>>>,
    /// Per node: the GPUs shard jobs hold (those placed, and the fewest the shards of jobs
    /// without a known place can hold).
    shard_held: BTreeMap<String, u32>,
    /// Per node: the GPUs the whole type's running jobs hold.
    whole_held: BTreeMap<String, u32>,
}

/// A running job that holds its GPUs (one ending frees them).
fn holding(j: &ClusterJob) -> bool {
    j.phase == Phase::Running && !j.completing
}

/// The jobs among `jobs` that hold their GPUs, by id.
fn holding_by_id(jobs: &[ClusterJob]) -> BTreeMap<u64, &ClusterJob> {
    jobs.iter()
        .filter(|j| holding(j))
        .map(|j| (j.id, j))
        .collect()
}

/// The one-node in-quota jobs of `stuck` asking for 1 to `most` GPUs, oldest first, each once
/// (an array's tasks share an id).
fn oldest_first<'j>(stuck: &[&'j ClusterJob], most: u32) -> Vec<&'j ClusterJob> {
    let mut jobs: Vec<&ClusterJob> = stuck
        .iter()
        .copied()
        .filter(|j| j.node_count <= 1 && j.gpus > 0 && j.gpus <= most)
        .collect();
    jobs.sort_by_key(|j| (j.submit, j.id));
    jobs.dedup_by_key(|j| j.id);
    jobs
}

impl SharedGpus {
    /// Where a configuration governing shards has them and its whole GPUs taken; `None`
    /// where it governs none.
    pub(super) fn new(
        input: &GovernInput<'_>,
        pool_jobs: &BTreeMap<&str, Vec<ClusterJob>>,
    ) -> Option<SharedGpus> {
        let share = input.config.shares()?;
        let mut s = SharedGpus {
            whole: share.of.clone(),
            per_gpu: share.denominator.max(1),
            placed: BTreeMap::new(),
            shard_held: BTreeMap::new(),
            whole_held: BTreeMap::new(),
        };
        let mut unplaced: BTreeMap<String, u32> = BTreeMap::new();
        let jobs = |k: &str| {
            pool_jobs
                .get(k)
                .into_iter()
                .flatten()
                .filter(|j| holding(j))
        };
        for j in jobs(SHARE_TYPE) {
            match input.shard_gpus.get(&j.id).filter(|p| !p.is_empty()) {
                Some(places) => {
                    for (node, gpu) in places {
                        let on = s.placed.entry(node.clone()).or_default();
                        on.entry(*gpu).or_default().push(j.id);
                    }
                }
                None => {
                    for (node, shards) in node_shares(j) {
                        let e = unplaced.entry(node.to_string()).or_insert(0);
                        *e = e.saturating_add(shards.div_ceil(s.per_gpu));
                    }
                }
            }
        }
        for (node, gpus) in &s.placed {
            let n = u32::try_from(gpus.len()).unwrap_or(u32::MAX);
            s.shard_held.insert(node.clone(), n);
        }
        for (node, n) in unplaced {
            let e = s.shard_held.entry(node).or_insert(0);
            *e = e.saturating_add(n);
        }
        for j in jobs(&s.whole) {
            for (node, gpus) in node_shares(j) {
                let e = s.whole_held.entry(node.to_string()).or_insert(0);
                *e = e.saturating_add(gpus);
            }
        }
        Some(s)
    }

    /// The type the shards are shares of.
    pub(super) fn whole(&self) -> &str {
        &self.whole
    }

    /// Pool `k`'s room without what the other pool holds: its GPUs per node and its
    /// capacity, lowered alike.
    pub(super) fn lower_room(
        &self,
        k: &str,
        node_gpus: &mut BTreeMap<String, u32>,
        capacity: &mut u32,
    ) {
        let (held, unit) = if k == self.whole {
            (&self.shard_held, 1)
        } else if k == SHARE_TYPE {
            (&self.whole_held, self.per_gpu)
        } else {
            return;
        };
        for (node, gpus) in node_gpus.iter_mut() {
            let taken = held
                .get(node)
                .map_or(0, |n| n.saturating_mul(unit))
                .min(*gpus);
            *gpus -= taken;
            *capacity = capacity.saturating_sub(taken);
        }
    }

    /// The shard jobs to requeue for the whole pool's `stuck` jobs (in-quota, able to start,
    /// placed nowhere by their pool): see the module's documentation.
    /// `node_gpus` are the whole type's GPUs per usable node, `victims` the shard pool's in
    /// reclaim order.
    pub(super) fn take_back(
        &self,
        node_gpus: &BTreeMap<String, u32>,
        stuck: &[&ClusterJob],
        shard_jobs: &[ClusterJob],
        victims: &[Victim],
        now: i64,
    ) -> Vec<u64> {
        let mut nodes = self.freeable(node_gpus, shard_jobs, victims, now);
        let mut out = Vec::new();
        for j in oldest_first(stuck, u32::MAX) {
            let best = nodes
                .iter()
                .enumerate()
                .filter_map(|(i, n)| n.cost(j.gpus).map(|c| (c, i)))
                .min();
            let Some((_, i)) = best else { continue };
            out.extend(nodes[i].take(j.gpus));
        }
        out.sort_unstable();
        out.dedup();
        out
    }

    /// The whole-GPU jobs to requeue for the shard pool's `stuck` jobs (in-quota, able to
    /// start, placed nowhere: every GPU with room for their shards is held whole).
    /// Each takes room on a GPU an earlier one freed, else the whole pool's next victim in
    /// reclaim order frees its GPUs (a job's shards on a node come from one GPU). `victims`
    /// are the whole pool's, in reclaim order.
    pub(super) fn take_back_whole(
        &self,
        stuck: &[&ClusterJob],
        whole_jobs: &[ClusterJob],
        victims: &[Victim],
        now: i64,
    ) -> Vec<u64> {
        let alive = holding_by_id(whole_jobs);
        let mut next = victims
            .iter()
            .filter(|v| v.exempt_until <= now)
            .filter_map(|v| alive.get(&v.job_id).copied())
            .filter(|j| !j.nodes.is_empty());
        // The shards left on each GPU freed so far.
        let mut freed: Vec<u32> = Vec::new();
        let mut out = Vec::new();
        for j in oldest_first(stuck, self.per_gpu) {
            loop {
                if let Some(gpu) = freed.iter_mut().find(|left| **left >= j.gpus) {
                    *gpu -= j.gpus;
                    break;
                }
                let Some(v) = next.next() else { return out };
                out.push(v.id);
                let gpus: u32 = node_shares(v).map(|(_, g)| g).sum();
                freed.extend(std::iter::repeat_n(self.per_gpu, gpus as usize));
            }
        }
        out
    }

    /// Per usable node: its free whole GPUs and its GPUs whose shard jobs are all victims
    /// Slurm allows to go now (not exempt, not ending), each with the rank of its
    /// latest-ranked victim.
    fn freeable(
        &self,
        node_gpus: &BTreeMap<String, u32>,
        shard_jobs: &[ClusterJob],
        victims: &[Victim],
        now: i64,
    ) -> Vec<Freeable> {
        let alive = holding_by_id(shard_jobs);
        let rank: BTreeMap<u64, usize> = victims
            .iter()
            .enumerate()
            .filter(|(_, v)| v.exempt_until <= now && alive.contains_key(&v.job_id))
            .map(|(r, v)| (v.job_id, r))
            .collect();
        let held = |m: &BTreeMap<String, u32>, n: &str| m.get(n).copied().unwrap_or(0);
        node_gpus
            .iter()
            .map(|(node, gpus)| {
                let free = gpus
                    .saturating_sub(held(&self.whole_held, node))
                    .saturating_sub(held(&self.shard_held, node));
                let mut gpus: Vec<(usize, Vec<u64>)> = self
                    .placed
                    .get(node)
                    .into_iter()
                    .flatten()
                    .filter_map(|(_, jobs)| {
                        let ranks: Option<Vec<usize>> =
                            jobs.iter().map(|id| rank.get(id).copied()).collect();
                        Some((ranks?.into_iter().max()?, jobs.clone()))
                    })
                    .collect();
                gpus.sort_by_key(|(r, jobs)| (*r, jobs.len()));
                Freeable { free, gpus }
            })
            .collect()
    }
}

/// One node's room for a whole-GPU job: its free GPUs, and the GPUs that requeueing their
/// shard jobs frees, earliest-ranked first.
struct Freeable {
    free: u32,
    gpus: Vec<(usize, Vec<u64>)>,
}

impl Freeable {
    /// What making room for `need` GPUs here costs: the rank of the latest victim taken,
    /// then the shard jobs requeued; `None` where it cannot, or needs no victim.
    fn cost(&self, need: u32) -> Option<(usize, usize)> {
        let more = usize::try_from(need.checked_sub(self.free)?).ok()?;
        if more == 0 || more > self.gpus.len() {
            return None;
        }
        let taken = &self.gpus[..more];
        let last = taken.iter().map(|g| g.0).max()?;
        Some((last, taken.iter().map(|g| g.1.len()).sum()))
    }

    /// Make room for `need` GPUs: the shard jobs requeued ([`Freeable::cost`] said it can).
    fn take(&mut self, need: u32) -> Vec<u64> {
        let more = need.saturating_sub(self.free) as usize;
        self.free = self.free.saturating_sub(need);
        self.gpus.drain(..more).flat_map(|g| g.1).collect()
    }
}
