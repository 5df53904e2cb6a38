//! Placement: the nodes, the index of their free GPUs by type and level, and where a job fits
//! now (best fit, clear of backfill's reservations) under its team's limits.

use std::collections::BTreeSet;

use super::{type_matches, Sim};
use crate::replay::Secs;

pub(super) struct Node {
    pub(super) name: String,
    pub(super) gpus: u32,
    pub(super) gpu_type: Option<String>,
    /// Its place in [`FreeIndex::kinds`].
    pub(super) kind: usize,
    pub(super) free: u32,
    pub(super) drained: bool,
}

/// The free GPUs of usable nodes per GPU type, kept as nodes fill, empty, drain and return,
/// so that a scheduling pass asks "could it fit anywhere" without a walk over the nodes.
pub(super) struct FreeIndex {
    /// The nodes' GPU types (`None`: untyped), in order.
    pub(super) kinds: Vec<Option<String>>,
    /// Per kind: free GPUs on usable nodes.
    pub(super) free: Vec<u32>,
    /// Per kind: how many usable nodes have exactly `i` GPUs free, and which.
    pub(super) by_free: Vec<Vec<u32>>,
    pub(super) at_free: Vec<Vec<BTreeSet<usize>>>,
    /// Per kind: usable nodes with every GPU free.
    pub(super) whole: Vec<u32>,
    /// Free GPUs on usable nodes of every kind.
    pub(super) total: u32,
}

impl FreeIndex {
    pub(super) fn new(nodes: &[Node]) -> FreeIndex {
        let kinds: Vec<Option<String>> = nodes
            .iter()
            .map(|n| n.gpu_type.clone())
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .collect();
        let mut by_free = vec![Vec::new(); kinds.len()];
        for n in nodes {
            if let Some(k) = kinds.iter().position(|k| *k == n.gpu_type) {
                let len = usize::try_from(n.gpus)
                    .unwrap_or(usize::MAX)
                    .saturating_add(1);
                if by_free[k].len() < len {
                    by_free[k].resize(len, 0);
                }
            }
        }
        FreeIndex {
            free: vec![0; kinds.len()],
            whole: vec![0; kinds.len()],
            kinds,
            at_free: by_free
                .iter()
                .map(|c| vec![BTreeSet::new(); c.len()])
                .collect(),
            by_free,
            total: 0,
        }
    }

    pub(super) fn kind_of(&self, gpu_type: &Option<String>) -> usize {
        self.kinds.iter().position(|k| k == gpu_type).unwrap_or(0)
    }

    /// Node `i` counts again (it is usable).
    pub(super) fn enter(&mut self, i: usize, n: &Node) {
        if n.drained {
            return;
        }
        self.free[n.kind] += n.free;
        self.total += n.free;
        self.by_free[n.kind][n.free as usize] += 1;
        self.at_free[n.kind][n.free as usize].insert(i);
        self.whole[n.kind] += u32::from(n.free == n.gpus);
    }

    /// Node `i` stops counting (before its free GPUs change, or it drains).
    pub(super) fn leave(&mut self, i: usize, n: &Node) {
        if n.drained {
            return;
        }
        self.free[n.kind] -= n.free;
        self.total -= n.free;
        self.by_free[n.kind][n.free as usize] -= 1;
        self.at_free[n.kind][n.free as usize].remove(&i);
        self.whole[n.kind] -= u32::from(n.free == n.gpus);
    }

    /// Best fit for `gpus` on one node of the kinds `want` may use: the node with the fewest
    /// GPUs left over, then the lowest index, among those `usable` allows.
    /// `level_ends`, when given, is per kind and number of free GPUs the latest instant a
    /// node there may be used until ([`FreeIndex::level_ends`]); `end_by` is the job's.
    pub(super) fn best_fit(
        &self,
        want: &Option<String>,
        gpus: u32,
        usable: impl Fn(usize) -> bool,
        level_ends: Option<(&[Vec<Secs>], Secs)>,
    ) -> Option<(u32, usize)> {
        let from = usize::try_from(gpus).ok()?;
        let most = self.by_free.iter().map(Vec::len).max().unwrap_or(0);
        for f in from..most {
            let mut best: Option<usize> = None;
            for k in self.matching(want) {
                if self.by_free[k].get(f).is_none_or(|c| *c == 0) {
                    continue;
                }
                // No node of this level outlasts the reservations as long as the job.
                if level_ends.is_some_and(|(ends, end_by)| ends[k][f] < end_by) {
                    continue;
                }
                if let Some(&i) = self.at_free[k][f].iter().find(|&&i| usable(i)) {
                    best = Some(best.map_or(i, |b| b.min(i)));
                }
            }
            if let Some(i) = best {
                return Some((u32::try_from(f).ok()? - gpus, i));
            }
        }
        None
    }

    /// Per kind and number of free GPUs, the latest instant a usable node there may be used
    /// until (its earliest reservation's start): a job that would run longer fits none.
    pub(super) fn level_ends(&self, nodes: &[Node], reserved_from: &[Secs]) -> Vec<Vec<Secs>> {
        let mut ends: Vec<Vec<Secs>> = self
            .by_free
            .iter()
            .map(|c| vec![Secs::MIN; c.len()])
            .collect();
        for (i, n) in nodes.iter().enumerate().filter(|(_, n)| !n.drained) {
            let e = &mut ends[n.kind][n.free as usize];
            *e = (*e).max(reserved_from[i]);
        }
        ends
    }

    /// [`FreeIndex::level_ends`] brought up to date after node `n` (already re-entered in the
    /// index) had `taken` GPUs taken: it joins its new level, and its old level's latest end
    /// is worked out again only if it was the node that set it.
    pub(super) fn level_moved(
        &self,
        ends: &mut [Vec<Secs>],
        nodes: &[Node],
        reserved_from: &[Secs],
        n: usize,
        taken: u32,
    ) {
        let node = &nodes[n];
        if node.drained {
            return;
        }
        let k = node.kind;
        let new = node.free as usize;
        let old = (node.free + taken) as usize;
        ends[k][new] = ends[k][new].max(reserved_from[n]);
        if reserved_from[n] >= ends[k][old] {
            ends[k][old] = self.at_free[k][old]
                .iter()
                .map(|&i| reserved_from[i])
                .max()
                .unwrap_or(Secs::MIN);
        }
    }

    /// The most free GPUs on one usable node of kind `k`.
    pub(super) fn largest(&self, k: usize) -> u32 {
        self.by_free[k]
            .iter()
            .rposition(|c| *c > 0)
            .map_or(0, |i| u32::try_from(i).unwrap_or(u32::MAX))
    }

    /// The most free GPUs on one usable node of any kind.
    pub(super) fn largest_any(&self) -> u32 {
        (0..self.kinds.len())
            .map(|k| self.largest(k))
            .max()
            .unwrap_or(0)
    }

    /// How many usable nodes of kind `k` have at least `gpus` GPUs free.
    pub(super) fn nodes_with(&self, k: usize, gpus: u32) -> u32 {
        let from = usize::try_from(gpus).unwrap_or(usize::MAX);
        self.by_free[k].iter().skip(from).sum()
    }

    /// The kinds a job asking for `want` may run on.
    pub(super) fn matching<'s>(
        &'s self,
        want: &'s Option<String>,
    ) -> impl Iterator<Item = usize> + 's {
        (0..self.kinds.len()).filter(move |k| type_matches(want, &self.kinds[*k]))
    }

    /// Free GPUs a job asking for `want` could use.
    pub(super) fn free_for(&self, want: &Option<String>) -> u32 {
        match want {
            None => self.total,
            Some(_) => self.matching(want).map(|k| self.free[k]).sum(),
        }
    }
}

impl Sim<'_> {
    /// A quick test before placement: whether some node could hold a one-node job's GPUs,
    /// enough nodes hold a multi-node job's share of them, or enough nodes are wholly free for
    /// a whole-node job (placement then looks at reservations).
    pub(super) fn may_fit_one_node(&self, j: usize) -> bool {
        let job = &self.jobs[j];
        if job.exclusive {
            return self
                .free
                .matching(&job.gpu_type)
                .map(|k| self.free.whole[k])
                .sum::<u32>()
                >= job.nodes;
        }
        if job.nodes > 1 {
            // Enough nodes with its share free.
            let share = job.gpus.div_ceil(job.nodes);
            return self
                .free
                .matching(&job.gpu_type)
                .map(|k| self.free.nodes_with(k, share))
                .sum::<u32>()
                >= job.nodes;
        }
        self.free
            .matching(&job.gpu_type)
            .map(|k| self.free.largest(k))
            .max()
            .unwrap_or(0)
            >= job.gpus
    }

    /// The team's association limit (GrpTRES gres/gpu, and per type when typed).
    pub(super) fn within_limits(&self, j: usize) -> bool {
        let job = &self.jobs[j];
        let Some(t) = job.team else {
            return false;
        };
        if self.used[t].saturating_add(job.gpus) > self.limits[t] {
            return false;
        }
        if let (true, Some(k)) = (self.typed, &job.gpu_type) {
            let used = self.used_typed.get(&(t, k.clone())).copied().unwrap_or(0);
            let limit = self.type_limits.get(&(t, k.clone())).copied().unwrap_or(0);
            if used.saturating_add(job.gpus) > limit {
                return false;
            }
        }
        true
    }

    /// The GPUs a job takes on each of its nodes.
    pub(super) fn per_node(&self, j: usize, node: &Node) -> u32 {
        let job = &self.jobs[j];
        if job.exclusive {
            node.gpus
        } else {
            job.gpus.div_ceil(job.nodes)
        }
    }

    /// Where the job fits now (best fit: the fullest nodes first), keeping clear of the
    /// reservations it would delay.
    pub(super) fn place(
        &self,
        j: usize,
        reserved_from: &[Secs],
        end_by: Secs,
        level_ends: Option<&[Vec<Secs>]>,
    ) -> Option<Vec<(usize, u32)>> {
        let job = &self.jobs[j];
        if job.nodes == 1 && !job.exclusive {
            // The node with the fewest GPUs left over, then the lowest index, found from the
            // free-GPU index instead of a walk over every node.
            if job.gpus == 0 {
                return None;
            }
            return self
                .free
                .best_fit(
                    &job.gpu_type,
                    job.gpus,
                    |i| end_by <= reserved_from[i],
                    level_ends.map(|e| (e, end_by)),
                )
                .map(|(_, i)| vec![(i, job.gpus)]);
        }
        let k = job.nodes as usize;
        if !job.exclusive {
            // The same share on each node: the nodes by free GPUs from the share up, by
            // index within a level (the free-GPU index), until there are enough.
            let need = job.gpus.div_ceil(job.nodes);
            let from = usize::try_from(need).ok().filter(|f| *f > 0)?;
            let mut fits: Vec<(usize, u32)> = Vec::with_capacity(k);
            let most = self.free.by_free.iter().map(Vec::len).max().unwrap_or(0);
            for f in from..most {
                let level = fits.len();
                for kind in self.free.matching(&job.gpu_type) {
                    if let Some(at) = self.free.at_free[kind].get(f) {
                        fits.extend(
                            at.iter()
                                .filter(|&&i| end_by <= reserved_from[i])
                                .map(|&i| (i, need)),
                        );
                    }
                }
                fits[level..].sort_unstable();
                if fits.len() >= k {
                    fits.truncate(k);
                    return Some(fits);
                }
            }
            return None;
        }
        let mut fits: Vec<(u32, usize, u32)> = self
            .nodes
            .iter()
            .enumerate()
            .filter(|(_, n)| !n.drained && type_matches(&job.gpu_type, &n.gpu_type))
            .filter(|(i, _)| end_by <= reserved_from[*i])
            .filter_map(|(i, n)| {
                let need = self.per_node(j, n);
                let ok = need > 0
                    && if job.exclusive {
                        n.free == n.gpus
                    } else {
                        n.free >= need
                    };
                ok.then(|| (n.free - need, i, need))
            })
            .collect();
        if fits.len() < k {
            return None;
        }
        // The k best (the keys are distinct: each holds its node's index).
        if k < fits.len() {
            fits.select_nth_unstable(k);
            fits.truncate(k);
        }
        fits.sort_unstable();
        Some(
            fits.into_iter()
                .take(job.nodes as usize)
                .map(|(_, i, need)| (i, need))
                .collect(),
        )
    }
}
