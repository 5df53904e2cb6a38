//! Where the GPUs are: the usable nodes of a pass and their free GPUs, worked out from the jobs
//! of the pass or kept by a [`Planner`](super::Planner).

use std::cell::OnceCell;
use std::collections::BTreeMap;

use super::queues::{Entry, Queues};
use super::{ClusterJob, Phase};

/// Free GPUs per usable node ([`node_free`]; empty when placement is unknown) and the size
/// of the largest.
#[derive(Clone)]
pub(super) struct NodeRoom<'n> {
    pub free: NodeFree<'n>,
    pub largest: u32,
}

/// Free GPUs per node in the order of the nodes' names: a map by name without a tree node
/// per entry (the plan builds one per pass that displaces or reclaims).
#[derive(Clone, Default)]
pub(super) struct NodeFree<'n>(Vec<(&'n str, u32)>);

impl<'n> NodeFree<'n> {
    pub(super) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// A node's place.
    pub(super) fn place(&self, node: &str) -> Option<usize> {
        self.0.binary_search_by(|(n, _)| (*n).cmp(node)).ok()
    }

    pub(super) fn get_mut(&mut self, node: &str) -> Option<&mut u32> {
        let i = self.place(node)?;
        Some(&mut self.0[i].1)
    }

    pub(super) fn iter(&self) -> impl Iterator<Item = (&'n str, u32)> + '_ {
        self.0.iter().copied()
    }
}

/// [`NodeRoom`] worked out on first need: most passes need it for nothing (no job displaces,
/// none waits for the reclaim fallback), and it costs a walk over every running job's nodes.
pub(super) struct LazyNodes<'n, 'q> {
    pub nodes: PassNodes<'n>,
    pub queues: &'q Queues<'q>,
    pub room: OnceCell<NodeRoom<'n>>,
}

impl<'n> LazyNodes<'n, '_> {
    pub(super) fn get(&self) -> &NodeRoom<'n> {
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
pub(super) enum PassNodes<'a> {
    /// GPUs per usable node of the governed partitions (empty: placement unknown); what the
    /// running jobs hold there is counted from them.
    Given(&'a BTreeMap<String, u32>),
    /// A [`Planner`](super::Planner)'s, with what its running jobs hold there.
    Kept(&'a NodeSet),
}

/// The usable nodes a [`Planner`](super::Planner) was given, and the GPUs its running jobs that are
/// not ending hold on every node they list, kept as they start and end: a pass reads the nodes'
/// free GPUs off in one walk.
#[derive(Default)]
pub(super) struct NodeSet {
    /// Usable nodes in name order: name, GPUs, place in `held`.
    pub usable: Vec<(String, u32, usize)>,
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

    pub(super) fn set_usable(&mut self, node_gpus: &BTreeMap<String, u32>) {
        let usable: Vec<(String, u32, usize)> = node_gpus
            .iter()
            .map(|(n, g)| (n.clone(), *g, self.place(n)))
            .collect();
        self.usable = usable;
    }

    /// A running job starts holding (`add`) or stops holding its GPUs.
    pub(super) fn hold(&mut self, j: &ClusterJob, add: bool) {
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
pub(super) fn node_shares(j: &ClusterJob) -> impl Iterator<Item = (&str, u32)> {
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
