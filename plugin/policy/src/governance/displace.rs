//! Rule 6's displacement (phase 3): the protected jobs of a lower class a pending job of its
//! team requeues to fit its quota, where it then fits.

use std::collections::BTreeSet;

use super::nodes::{NodeFree, NodeRoom};
use super::rules::Rules;
use super::running::Running;
use super::ClusterJob;

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
pub(super) fn lower_classes_to_displace<'a>(
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
pub(super) struct Lower<'a> {
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
