//! Rule 3 by placement (DESIGN §4): the victims each pending in-quota job needs, chosen where
//! it then fits, among every running job of the teams above their quota.
//!
//! Phase 1 counts each team's oldest jobs inside its quota and the rest as borrowed. That is
//! bookkeeping, not a promise to particular jobs: rule 2 protects a team's quota. A job of a
//! team above its quota may be a victim while the team stays at or above its quota once it
//! has gone; a job phase 1 counts as borrowed may also go while its team is above its quota
//! even where that leaves the team below it (the job straddles the quota: without it, the
//! team's borrowing could never be taken back).
//!
//! For each pending in-quota job that can start, oldest first, the nodes it needs (its node
//! count, or more when its GPUs exceed the largest node) are those with room already, then
//! those where the earliest-ranked victim, then the fewest victims, make room; on each, the
//! candidates there are taken in victim order (the team most over its quota for its weight,
//! the lowest class, the most recently started) until its share fits. A job that no such set
//! lets in takes nothing, and nobody is preempted for it.
//!
//! The plan ranks the victims found first (the lowest levels), in the order found, and the
//! in-quota jobs just above them ([`ranked`]): Slurm's preemption, whose candidates for a job
//! are exactly the running jobs of the QOS with a lower priority and which preempts only on
//! the nodes the job then uses, can take no other job. What stays of each team they belong to
//! is split again (its oldest fill its quota), and the governor requeues the victims itself
//! for the jobs still waiting after [`RECLAIM_FALLBACK_MS`](super::RECLAIM_FALLBACK_MS) (docs/design/reclaim-by-placement.md).

use std::collections::{BTreeMap, BTreeSet};

use super::nodes::NodeRoom;
use super::queues::{Entry, List, Sink};
use super::rules::Rules;
use super::running::{split_running, Running, TeamRunning};
use super::victims::{rank_victims, victim_order, Ranked};
use super::{priority, ClusterJob};

/// The most shapes of several-node jobs [`Room`] remembers as fitting nowhere.
const NO_FIT_WIDE_MAX: usize = 16;

/// The most candidates on one node [`Search::exact`] tries every set of (2^12 sets).
const EXACT_MAX: usize = 12;

/// What [`by_placement`] found.
#[derive(Default)]
pub(super) struct Reclaimed<'a> {
    /// The victims with their team's place, each in-quota job's after those of the jobs
    /// served before it.
    pub victims: Vec<(Entry<'a>, usize)>,
    /// Of them, those of the in-quota jobs that waited past [`RECLAIM_FALLBACK_MS`](super::RECLAIM_FALLBACK_MS): the
    /// governor requeues them itself.
    pub requeue: Vec<u64>,
    /// The GPUs the victims hold.
    pub gpus: u32,
    /// Free GPUs the in-quota jobs' placements leave.
    pub spare: u32,
    /// And where: what borrowers may be placed on.
    pub room: Option<Room>,
    /// Per team (by its place in the configuration): the GPUs of its wide in-quota jobs that
    /// no set of victims lets in now, and of them the free GPUs they hold on the nodes they
    /// wait for ([`Room::hold`]); what they do not hold of their team's idle quota may be lent.
    pub unplaced: Vec<u32>,
    pub holding: Vec<u32>,
    /// The in-quota jobs that can start and that no free GPUs or victims of this pool let in:
    /// a typed plan may free GPUs another pool's jobs share with this one for them
    /// (`shared_gpus`).
    pub stuck: Vec<u64>,
}

/// A running job a reclaim may take.
struct Candidate<'a> {
    job: Entry<'a>,
    team: usize,
    /// Phase 1 counts it beyond its team's quota.
    borrowed: bool,
    /// Its GPUs on each node it lists (a multi-node job's evenly).
    share: u32,
    /// Its nodes' places among the usable nodes.
    nodes: Vec<usize>,
    taken: bool,
}

/// The free GPUs of each usable node (in name order) as jobs are placed on them: the
/// pending in-quota jobs first ([`by_placement`]), then the borrowers the pass lends to
/// (lending by placement: a borrower that fits no node's idle GPUs is given nothing).
#[derive(Clone, Debug)]
pub(super) struct Room {
    free: Vec<u32>,
    largest: u32,
    /// The fewest GPUs a one-node job asked for that found no node: no node has that many
    /// (the room only shrinks), so a job asking for as many fails at once.
    no_fit: u32,
    /// The same for jobs of several nodes: (nodes, share per node) that found too few nodes
    /// with that share free. A job of at least as many nodes and as large a share fails too.
    no_fit_wide: Vec<(usize, u32)>,
}

impl Room {
    pub(super) fn new(room: &NodeRoom<'_>) -> Room {
        Room {
            free: room.free.iter().map(|(_, f)| f).collect(),
            largest: room.largest,
            no_fit: u32::MAX,
            no_fit_wide: Vec::new(),
        }
    }

    /// The nodes and each node's share a job needs.
    fn shape(&self, j: &ClusterJob) -> (usize, u32) {
        let nodes = j
            .node_count
            .max(j.gpus.div_ceil(self.largest.max(1)))
            .max(1);
        (
            usize::try_from(nodes).unwrap_or(usize::MAX),
            j.gpus.div_ceil(nodes),
        )
    }

    /// Places `j` on free GPUs (the nodes with the least room that fits first) and takes
    /// them; false, taking nothing, when it fits nowhere now.
    pub(super) fn take(&mut self, j: &ClusterJob) -> bool {
        let (nodes, share) = self.shape(j);
        if nodes == 1 && share >= self.no_fit {
            return false;
        }
        if nodes == 1 {
            // The best fit without a list (this runs for every borrower a pass lends to).
            let best = (0..self.free.len())
                .filter(|&i| self.free[i] >= share)
                .min_by_key(|&i| (self.free[i], i));
            return match best {
                Some(i) => {
                    self.free[i] -= share;
                    true
                }
                None => {
                    self.no_fit = self.no_fit.min(share);
                    false
                }
            };
        }
        if self
            .no_fit_wide
            .iter()
            .any(|&(n, s)| nodes >= n && share >= s)
        {
            return false;
        }
        let mut fits: Vec<(u32, usize)> = (0..self.free.len())
            .filter(|&i| self.free[i] >= share)
            .map(|i| (self.free[i], i))
            .collect();
        if fits.len() < nodes {
            if self.no_fit_wide.len() < NO_FIT_WIDE_MAX {
                self.no_fit_wide.push((nodes, share));
            }
            return false;
        }
        fits.sort_unstable();
        for &(_, i) in &fits[..nodes] {
            self.free[i] -= share;
        }
        true
    }

    /// Holds for a job that fits nowhere now the free GPUs of the nodes it waits for, as
    /// Slurm's backfill does for the pending job of highest priority (its reservation keeps
    /// later jobs off those nodes unless they end before it starts), up to its share on each:
    /// the nodes backfill reserved for it (`planned`, its SchedNodes, places among the usable
    /// nodes) where Slurm says, else the nodes with the most free GPUs (then the first).
    /// Returns the GPUs held.
    pub(super) fn hold(&mut self, j: &ClusterJob, planned: &[usize]) -> u32 {
        let (nodes, share) = self.shape(j);
        let mut order: Vec<usize> = (0..self.free.len()).filter(|&i| self.free[i] > 0).collect();
        if !planned.is_empty() {
            order = planned.to_vec();
            order.sort_unstable();
            order.dedup();
        } else if nodes == 1 {
            order = order
                .iter()
                .copied()
                .min_by_key(|&i| (std::cmp::Reverse(self.free[i]), i))
                .into_iter()
                .collect();
        } else {
            order.sort_unstable_by_key(|&i| (std::cmp::Reverse(self.free[i]), i));
            order.truncate(nodes);
        }
        let mut held = 0u32;
        for i in order {
            let h = self.free[i].min(share);
            self.free[i] -= h;
            held = held.saturating_add(h);
        }
        held
    }

    /// Whether [`Room::take`] fails now, and for the rest of the pass, for any one-node job
    /// of `gpus` GPUs: it fits one node's size (a larger one is spread over several), and a
    /// job as large or smaller already found no node with that many free.
    pub(super) fn fails_alone(&self, gpus: u32) -> bool {
        gpus <= self.largest && gpus >= self.no_fit
    }

    /// Free GPUs in all.
    fn total(&self) -> u32 {
        self.free.iter().fold(0u32, |s, f| s.saturating_add(*f))
    }
}

/// The search over one pass: the nodes' free GPUs and the candidates, as victims are taken.
struct Search<'a> {
    room: Room,
    /// In victim order; built on first need (most passes place every job on free GPUs).
    cands: Option<Vec<Candidate<'a>>>,
    /// Per node: its candidates' places in `cands`, in victim order.
    on_node: Vec<Vec<usize>>,
    /// Per team: the GPUs it holds beyond its quota, less those taken so far.
    above: Vec<i64>,
}

/// The pending in-quota jobs that can start, oldest first, each placed on free GPUs or where
/// victims make room for it (see the module's documentation).
pub(super) fn by_placement<'a>(
    rules: &Rules<'_>,
    (now, now_ms): (i64, i64),
    running: &Running<'a>,
    borrowed: &[Ranked<'a>],
    in_quota: &[Entry<'a>],
    displace: &[u64],
    room: &NodeRoom<'_>,
) -> Reclaimed<'a> {
    let mut jobs: Vec<&Entry<'a>> = in_quota.iter().filter(|j| j.gpus > 0).collect();
    jobs.sort_by_key(|j| (j.submit, j.id));
    let mut search = Search {
        room: Room::new(room),
        cands: None,
        on_node: Vec::new(),
        above: rules
            .config
            .teams
            .iter()
            .zip(&running.usage)
            .map(|(t, u)| i64::from(*u) - i64::from(t.quota.total))
            .collect(),
    };
    let teams = rules.config.teams.len();
    let mut out = Reclaimed {
        unplaced: vec![0; teams],
        holding: vec![0; teams],
        ..Reclaimed::default()
    };
    for j in jobs {
        let victims = match search.room.take(j) {
            true => continue,
            false => {
                search.build(rules, now, running, borrowed, displace, room);
                match search.place(j) {
                    Some(v) => v,
                    None => {
                        if j.eligible {
                            out.stuck.push(j.id);
                        }
                        hold_for(rules, (&mut search.room, room), j, &mut out);
                        continue;
                    }
                }
            }
        };
        let waited = j.eligible && super::waited_for_fallback(now_ms, j.submit);
        let cands = search.cands.as_ref().map_or(&[][..], Vec::as_slice);
        for c in victims {
            let c = &cands[c];
            out.victims.push((c.job, c.team));
            out.gpus = out.gpus.saturating_add(c.job.gpus);
            if waited {
                out.requeue.push(c.job.id);
            }
        }
    }
    out.spare = search.room.total();
    out.room = Some(search.room);
    out
}

/// An in-quota job that fits nowhere now, free or by victims (a wide job on a fragmented
/// cluster), waits above every borrower: Slurm's backfill reserves nodes for it, so the plan
/// counts the free GPUs there as taken ([`Room::hold`]: on the nodes a pending job's record
/// says backfill reserved, else a guess) and lends the rest of its team's idle quota, which
/// its claim held back for nothing.
fn hold_for(
    rules: &Rules<'_>,
    (room, names): (&mut Room, &NodeRoom<'_>),
    j: &ClusterJob,
    out: &mut Reclaimed<'_>,
) {
    if !j.eligible {
        return;
    }
    let Some(t) = rules.config.teams.iter().position(|t| t.name == j.team) else {
        return;
    };
    let planned: Vec<usize> = j.nodes.iter().filter_map(|n| names.free.place(n)).collect();
    let held = room.hold(j, &planned);
    out.unplaced[t] = out.unplaced[t].saturating_add(j.gpus);
    out.holding[t] = out.holding[t].saturating_add(held);
}

impl<'a> Search<'a> {
    /// The candidates, worked out once per pass.
    fn build(
        &mut self,
        rules: &Rules<'_>,
        now: i64,
        running: &Running<'a>,
        borrowed: &[Ranked<'a>],
        displace: &[u64],
        room: &NodeRoom<'_>,
    ) {
        if self.cands.is_some() {
            return;
        }
        let cands = candidates(rules, now, running, borrowed, displace, room);
        self.on_node = vec![Vec::new(); self.room.free.len()];
        for (c, cand) in cands.iter().enumerate() {
            for &n in &cand.nodes {
                self.on_node[n].push(c);
            }
        }
        self.cands = Some(cands);
    }

    /// The candidates on node `i` that make room there for `share`, within what each team
    /// may lose: taken in victim order until it fits, then those the later ones made
    /// unnecessary left out; where that order runs into a team's limit, the set whose
    /// latest-ranked victim is earliest, then the smallest ([`Search::exact`]). `None` when
    /// no set does.
    fn walk(&self, i: usize, share: u32) -> Option<Vec<usize>> {
        let cands = self.cands.as_deref().unwrap_or(&[]);
        let mut have = self.room.free[i];
        if have >= share {
            return Some(Vec::new());
        }
        let mut picked = Vec::new();
        let mut spent: Vec<(usize, i64)> = Vec::new();
        for &c in &self.on_node[i] {
            if have >= share {
                break;
            }
            if !cands[c].taken && self.may_take(&cands[c], &spent) {
                spent.push((cands[c].team, i64::from(cands[c].job.gpus)));
                have = have.saturating_add(cands[c].share);
                picked.push(c);
            }
        }
        if have < share {
            return self.exact(i, share);
        }
        // Never more than needed: an earlier victim a later, larger one made unnecessary.
        let mut k = 0;
        while k < picked.len() {
            let s = cands[picked[k]].share;
            if have - s >= share {
                have -= s;
                picked.remove(k);
            } else {
                k += 1;
            }
        }
        Some(picked)
    }

    /// Whether a team may lose `cand` after the GPUs `spent` of this walk (rule 2; see the
    /// module's documentation).
    fn may_take(&self, cand: &Candidate<'_>, spent: &[(usize, i64)]) -> bool {
        let gone: i64 = spent
            .iter()
            .filter(|(t, _)| *t == cand.team)
            .map(|(_, g)| g)
            .sum();
        let above = self.above[cand.team] - gone;
        if cand.borrowed {
            above > 0
        } else {
            above >= i64::from(cand.job.gpus)
        }
    }

    /// Every set of node `i`'s candidates (at most [`EXACT_MAX`] of them): the feasible one
    /// whose latest-ranked victim is earliest, then the smallest.
    fn exact(&self, i: usize, share: u32) -> Option<Vec<usize>> {
        let cands = self.cands.as_deref().unwrap_or(&[]);
        let open: Vec<usize> = self.on_node[i]
            .iter()
            .copied()
            .filter(|c| !cands[*c].taken)
            .collect();
        if open.is_empty() || open.len() > EXACT_MAX {
            return None;
        }
        let mut best: Option<((usize, u32), Vec<usize>)> = None;
        for mask in 1u32..(1 << open.len()) {
            let set: Vec<usize> = (0..open.len())
                .filter(|b| mask & (1 << b) != 0)
                .map(|b| open[b])
                .collect();
            let key = (*set.last()?, mask.count_ones());
            if best.as_ref().is_some_and(|(k, _)| *k <= key) {
                continue;
            }
            let mut spent: Vec<(usize, i64)> = Vec::new();
            let mut have = self.room.free[i];
            let mut feasible = true;
            for &c in &set {
                if !self.may_take(&cands[c], &spent) {
                    feasible = false;
                    break;
                }
                spent.push((cands[c].team, i64::from(cands[c].job.gpus)));
                have = have.saturating_add(cands[c].share);
            }
            if feasible && have >= share {
                best = Some((key, set));
            }
        }
        best.map(|(_, set)| set)
    }

    /// The victims that let `j` in, taken; `None` (and nothing taken) when no set does.
    fn place(&mut self, j: &ClusterJob) -> Option<Vec<usize>> {
        let (nodes, share) = self.room.shape(j);
        let mut options: Vec<((usize, usize, u32), usize)> = (0..self.room.free.len())
            .filter_map(|i| {
                let picked = self.walk(i, share)?;
                let key = match picked.last() {
                    Some(last) => (last + 1, picked.len(), 0),
                    None => (0, 0, self.room.free[i]),
                };
                Some((key, i))
            })
            .collect();
        if options.len() < nodes {
            return None;
        }
        options.sort_unstable();
        let (free, above) = (self.room.free.clone(), self.above.clone());
        let mut chosen = Vec::new();
        let mut placed = 0;
        for (_, i) in options {
            if placed == nodes {
                break;
            }
            // Taken for an earlier node of the job, a victim may change what this one needs.
            let Some(picked) = self.walk(i, share) else {
                continue;
            };
            self.take(&picked);
            self.room.free[i] -= share;
            chosen.extend(picked);
            placed += 1;
        }
        if placed < nodes {
            self.room.free = free;
            self.above = above;
            let cands = self.cands.as_mut()?;
            for c in chosen {
                cands[c].taken = false;
            }
            return None;
        }
        Some(chosen)
    }

    /// Victims taken: their GPUs count as free on their nodes, their teams hold less.
    fn take(&mut self, picked: &[usize]) {
        let Some(cands) = self.cands.as_mut() else {
            return;
        };
        // The room grows: what fitted nowhere may fit now.
        self.room.no_fit = u32::MAX;
        self.room.no_fit_wide.clear();
        for &c in picked {
            let cand = &mut cands[c];
            cand.taken = true;
            self.above[cand.team] -= i64::from(cand.job.gpus);
            for &n in &cand.nodes {
                self.room.free[n] = self.room.free[n].saturating_add(cand.share);
            }
        }
    }
}

/// Every running job a reclaim may take, in victim order: of a team above its quota, of a
/// preemptible class, not ending, past its `min_runtime_before_reclaim`, not displaced by a
/// higher class of its own team this pass, on a usable node.
fn candidates<'a>(
    rules: &Rules<'_>,
    now: i64,
    running: &Running<'a>,
    borrowed: &[Ranked<'a>],
    displace: &[u64],
    room: &NodeRoom<'_>,
) -> Vec<Candidate<'a>> {
    let borrowed: BTreeSet<u64> = borrowed.iter().map(|v| v.job.id).collect();
    let mut keyed: Vec<(f64, Candidate<'a>)> = Vec::new();
    for (t, team) in rules.config.teams.iter().enumerate() {
        let used = running.usage[t];
        if used <= team.quota.total {
            continue;
        }
        let over = f64::from(used - team.quota.total) / f64::from(team.weight.max(1));
        for job in running.lists[t].iter() {
            let exempt_until = job.start.unwrap_or(now).saturating_add(rules.exempt_secs);
            if !rules.preemptible(&job)
                || job.completing
                || exempt_until > now
                || displace.contains(&job.id)
            {
                continue;
            }
            let nodes: Vec<usize> = job
                .nodes
                .iter()
                .filter_map(|n| room.free.place(n))
                .collect();
            if nodes.is_empty() {
                continue;
            }
            let n = u32::try_from(job.nodes.len()).unwrap_or(u32::MAX).max(1);
            keyed.push((
                over,
                Candidate {
                    job,
                    team: t,
                    borrowed: borrowed.contains(&job.id),
                    share: job.gpus.div_ceil(n),
                    nodes,
                    taken: false,
                },
            ));
        }
    }
    keyed.sort_by(|(oa, a), (ob, b)| victim_order(rules, (&a.job, *oa), (&b.job, *ob)));
    keyed.into_iter().map(|(_, c)| c).collect()
}

/// The victims as the plan ranks them once a reclaim found some: those found first, in that
/// order, then the other borrowed jobs in victim order. Each team a victim belongs to is split
/// again without them: what stays of it fills its quota first (phase 1), so that no job it
/// keeps at or below its quota is offered to Slurm, and the jobs it keeps beyond rank by how
/// far the team is still over. A [`Planner`](super::Planner) splits those teams again at its
/// next pass (their protected jobs' levels are written again).
pub(super) fn ranked<'a>(
    rules: &Rules<'_>,
    now: i64,
    running: &Running<'a>,
    borrowed: Vec<Ranked<'a>>,
    found: &[(Entry<'a>, usize)],
    priorities: &mut dyn Sink,
    kept: Option<&mut [Option<TeamRunning>]>,
) -> Vec<Ranked<'a>> {
    let teams = &rules.config.teams;
    let gone: BTreeSet<u64> = found.iter().map(|(e, _)| e.id).collect();
    let mut taken = vec![0u32; teams.len()];
    for (e, t) in found {
        taken[*t] = taken[*t].saturating_add(e.gpus);
    }
    let index: BTreeMap<&str, usize> = teams
        .iter()
        .enumerate()
        .map(|(i, t)| (t.name.as_str(), i))
        .collect();
    let over = |t: usize| {
        let held = running.usage[t].saturating_sub(taken[t]);
        (f64::from(held) - f64::from(teams[t].quota.total)) / f64::from(teams[t].weight.max(1))
    };
    // The other teams keep phase 1's victims; the teams a victim was found in are split again.
    let mut rest: Vec<(Entry<'a>, f64)> = borrowed
        .iter()
        .filter_map(|v| {
            let t = *index.get(v.job.team.as_str())?;
            (taken[t] == 0).then(|| (v.job, over(t)))
        })
        .collect();
    let mut kept = kept;
    for t in (0..teams.len()).filter(|t| taken[*t] > 0) {
        let stays: Vec<Entry<'a>> = running.lists[t]
            .iter()
            .filter(|e| !gone.contains(&e.id))
            .collect();
        let split: TeamRunning = split_running(rules, &teams[t], List::Entries(&stays), priorities);
        rest.extend(split.victims.iter().map(|i| (stays[*i], over(t))));
        if let Some(k) = kept.as_deref_mut() {
            k[t] = None;
        }
    }
    rest.sort_by(|a, b| victim_order(rules, (&a.0, a.1), (&b.0, b.1)));
    let order = found
        .iter()
        .map(|(e, _)| *e)
        .chain(rest.into_iter().map(|(e, _)| e));
    rank_victims(rules, order, now, priorities)
}

/// The level of the pending in-quota jobs once victims were found for them (the first
/// `found` of `ranked`): just above them.
pub(super) fn level(ranked: &[Ranked<'_>], found: usize) -> u32 {
    match found.checked_sub(1).and_then(|i| ranked.get(i)) {
        Some(v) => v.level + 1,
        None => priority::reclaim_level(0),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::super::{plan, ClusterJob, GovernInput, Phase, Plan};
    use crate::priority::{self, encode, level};

    /// The cluster of issue 24's finding 1: 3 nodes x 4 GPUs; ops (quota 3) runs 7 one-GPU
    /// jobs, apps (quota 4) runs 4, vision (quota 5) runs 1.
    const CONFIG: &str = r#"
[cluster]
name = "t"
[[team]]
name = "ops"
quota = 3
[[team]]
name = "apps"
quota = 4
[[team]]
name = "vision"
quota = 5
[[priority_class]]
name = "inference"
value = 100
preemptible = false
[governance]
min_runtime_before_reclaim = "0s"
"#;

    fn on(id: u64, team: &str, node: &str, start: i64) -> ClusterJob {
        ClusterJob {
            id,
            gpu_type: None,
            team: team.into(),
            phase: Phase::Running,
            gpus: 1,
            priority: encode(priority::protected_level(0), 0),
            submit: start - 1,
            start: Some(start),
            eligible: true,
            parked: false,
            park_held: false,
            batch: true,
            nodes: vec![node.into()],
            node_count: 1,
            completing: false,
            tasks: 1,
        }
    }

    /// n1: ops 1 2 3 4 (its oldest); n2: ops 5 6, apps 8 9; n3: ops 7, apps 10 11, vision 12.
    fn full() -> Vec<ClusterJob> {
        let mut jobs = Vec::new();
        for (id, node) in [
            (1, "n1"),
            (2, "n1"),
            (3, "n1"),
            (4, "n1"),
            (5, "n2"),
            (6, "n2"),
            (7, "n3"),
        ] {
            jobs.push(on(id, "ops", node, 100 + id as i64));
        }
        for (id, node) in [(8, "n2"), (9, "n2"), (10, "n3"), (11, "n3")] {
            jobs.push(on(id, "apps", node, 200 + id as i64));
        }
        jobs.push(on(12, "vision", "n3", 300));
        jobs
    }

    fn waiting(gpus: u32, node_count: u32) -> ClusterJob {
        ClusterJob {
            id: 20,
            phase: Phase::Pending,
            gpus,
            node_count,
            priority: encode(priority::BORROW_BASE, 0),
            submit: 995,
            start: None,
            nodes: Vec::new(),
            ..on(20, "vision", "", 0)
        }
    }

    fn plan_with(jobs: &[ClusterJob]) -> Plan {
        plan_idle(CONFIG, jobs, &std::collections::BTreeSet::new())
    }

    /// With another configuration and the jobs idle for the whole idle window.
    fn plan_idle(text: &str, jobs: &[ClusterJob], idle: &std::collections::BTreeSet<u64>) -> Plan {
        let config = teamshare_config::parse(text, "t.toml").expect("valid");
        let nodes: BTreeMap<String, u32> = ["n1", "n2", "n3"]
            .iter()
            .map(|n| (n.to_string(), 4))
            .collect();
        plan(&GovernInput {
            config: &config,
            capacity: 12,
            jobs,
            fairshare: &BTreeMap::new(),
            now: 1_000,
            now_ms: 1_000 * 1_000,
            node_gpus: &nodes,
            capacity_by_type: &BTreeMap::new(),
            node_types: &BTreeMap::new(),
            idle,
            shard_gpus: &crate::governance::NO_SHARD_PLACES,
        })
    }

    fn victims(p: &Plan) -> Vec<u64> {
        p.state.victims.iter().map(|v| v.job_id).collect()
    }

    #[test]
    fn an_in_quota_job_takes_the_over_quota_teams_jobs_where_it_then_fits() {
        // vision's 3-GPU job fits only on n1, where ops' jobs 2, 3 and 4 go (the youngest
        // first); ops keeps 1, 5, 6 and 7 (4 >= its quota 3).
        let mut jobs = full();
        jobs.push(waiting(3, 1));
        let p = plan_with(&jobs);
        let mut reclaim = p.reclaim.clone();
        reclaim.sort_unstable();
        assert_eq!(reclaim, [2, 3, 4]);
        // The state: those three first, then what ops still borrows (7), for the plugin.
        assert_eq!(victims(&p), [4, 3, 2, 7]);
        assert_eq!(p.state.reclaim_gpus, 3);
        assert_eq!(p.state.spare_gpus, Some(0));
        // Slurm may preempt exactly those for it: nothing else ranks below it.
        let l = level(p.priorities[&20]);
        assert_eq!(l, p.state.victims[2].level + 1);
        for id in [2, 3, 4] {
            assert!(level(p.priorities[&id]) < l, "job {id}");
        }
        for id in [1, 5, 6, 7, 8, 9, 10, 11, 12] {
            assert!(level(p.priorities[&id]) > l, "job {id}");
        }
        // What ops keeps fills its quota first: 1, 5, 6 are protected, 7 still borrowed.
        for id in [1, 5, 6] {
            assert!(
                level(p.priorities[&id]) >= priority::PROTECTED_BASE,
                "job {id}"
            );
        }
        assert!(level(p.priorities[&7]) < priority::PROTECTED_BASE);
    }

    #[test]
    fn a_whole_node_job_takes_a_whole_node_of_the_team_above_its_quota() {
        let mut jobs = full();
        jobs.push(waiting(4, 1));
        let p = plan_with(&jobs);
        let mut reclaim = p.reclaim.clone();
        reclaim.sort_unstable();
        assert_eq!(reclaim, [1, 2, 3, 4]);
        // ops is left at its quota: nothing else of it is a victim.
        assert_eq!(victims(&p), [4, 3, 2, 1]);
    }

    /// Issue 29: with `idle_first_reclaim`, the jobs idle for the whole window go first in
    /// rule 3's order, whatever else the order says; without it, the idle set changes nothing.
    #[test]
    fn idle_jobs_are_the_first_victims_where_the_configuration_says_so() {
        let on_config = format!("{CONFIG}idle_first_reclaim = true\nidle_window = \"20s\"\n");
        let idle = std::collections::BTreeSet::from([5, 1]);
        // Phase 2 over ops' borrowed jobs (4, 5, 6, 7): the most recently started first, then
        // with 5 idle, 5 before them (1 is not borrowed: not in phase 2's list).
        let p = plan_idle(CONFIG, &full(), &idle);
        assert_eq!(victims(&p), [7, 6, 5, 4]);
        let p = plan_idle(&on_config, &full(), &idle);
        assert_eq!(victims(&p), [5, 7, 6, 4]);
        // A 1-GPU in-quota job in the full cluster: rule 3 by placement takes ops' most
        // recently started job (7, on n3); with idle-first, an idle one (5 on n2, before 1
        // on n1 by the order after idleness), and ops keeps 6 >= 3.
        let mut jobs = full();
        jobs.push(waiting(1, 1));
        assert_eq!(plan_idle(CONFIG, &jobs, &idle).reclaim, [7]);
        let p = plan_idle(&on_config, &jobs, &idle);
        assert_eq!(p.reclaim, [5]);
        assert!(level(p.priorities[&5]) < level(p.priorities[&20]));
        assert!(level(p.priorities[&7]) > level(p.priorities[&20]));
    }

    #[test]
    fn a_two_node_job_takes_what_each_of_its_nodes_needs() {
        // Two nodes with 2 GPUs each: n2 (ops 6 and 5, the earlier in victim order) and n1
        // (ops 4 and 3); n3 keeps apps' and vision's jobs.
        let mut jobs = full();
        jobs.push(waiting(4, 2));
        let p = plan_with(&jobs);
        let mut reclaim = p.reclaim.clone();
        reclaim.sort_unstable();
        assert_eq!(reclaim, [3, 4, 5, 6]);
    }

    #[test]
    fn teams_at_their_quota_are_never_touched() {
        // ops at 2 (1 and 4 on n1; quota 3) and vision at 1: untouchable. apps runs 6
        // (quota 4): it may lose 2. n1: ops 1, 4, apps 30, 31; n2: apps 8, 9 and 2 free; n3:
        // apps 10, 11, vision 12 and 1 free.
        let mut jobs: Vec<ClusterJob> = full()
            .into_iter()
            .filter(|j| ![2, 3, 5, 6, 7].contains(&j.id))
            .collect();
        jobs.push(on(30, "apps", "n1", 400));
        jobs.push(on(31, "apps", "n1", 401));
        jobs.push(waiting(3, 1));
        let p = plan_with(&jobs);
        // Victim order: 31 30 11 10 9 8. n1 would need ops' jobs; n2 needs one victim (9),
        // n3 two (11, 10): the placement whose victims come first in that order is n3's.
        let mut reclaim = p.reclaim.clone();
        reclaim.sort_unstable();
        assert_eq!(reclaim, [10, 11]);
        // With apps at its quota too, nobody: the job waits at the level that preempts none.
        jobs.retain(|j| j.id != 30 && j.id != 31);
        let p = plan_with(&jobs);
        assert!(p.reclaim.is_empty(), "{:?}", p.reclaim);
        assert_eq!(level(p.priorities[&20]), priority::reclaim_level(0));
    }

    /// n1: ops 1, apps 8, 2 free; n2: ops 2, apps 9, 2 free; n3: ops 3, apps 10, 11, vision
    /// 12. ops (3) and apps (4) are at their quotas, vision (quota 5) runs 1: its 3-GPU job
    /// fits its quota but no node, free or by victims. ops has three one-GPU borrowers.
    fn fragmented() -> Vec<ClusterJob> {
        let mut jobs = vec![
            on(1, "ops", "n1", 101),
            on(8, "apps", "n1", 208),
            on(2, "ops", "n2", 102),
            on(9, "apps", "n2", 209),
            on(3, "ops", "n3", 103),
            on(10, "apps", "n3", 210),
            on(11, "apps", "n3", 211),
            on(12, "vision", "n3", 300),
        ];
        for id in 40..43 {
            jobs.push(ClusterJob {
                id,
                team: "ops".into(),
                submit: 990 + id as i64,
                ..waiting(1, 1)
            });
        }
        jobs
    }

    #[test]
    fn a_wide_in_quota_job_that_fits_nowhere_holds_a_node_and_lends_the_rest() {
        let mut jobs = fragmented();
        jobs.push(waiting(3, 1));
        let p = plan_with(&jobs);
        assert!(p.reclaim.is_empty(), "{:?}", p.reclaim);
        // It waits above the borrowers (it preempts nobody), Slurm's backfill reserving a node
        // for it: the plan counts n1's 2 free GPUs (the most free, then the first node) as
        // held. vision's idle quota beyond those (4 - 2) is lent: both of ops' borrowers that
        // fit the GPUs left (n2's 2) get it, and ops may hold 5. Before, the job's claim of 3
        // left 1 of vision's idle GPUs to lend.
        assert_eq!(level(p.priorities[&20]), priority::reclaim_level(0));
        assert_eq!(p.gpu_limits["ops"], 5);
        assert_eq!(p.gpu_limits["vision"], 5);
        // The free GPUs a new in-quota job may still use (it outranks the borrowers): n2's,
        // not n1's, which are held.
        assert_eq!(p.state.spare_gpus, Some(2));
    }

    #[test]
    fn a_wide_in_quota_job_holds_the_node_slurms_backfill_reserved_for_it() {
        // As above, but Slurm's backfill reserved n3 for it (its SchedNodes; n3's jobs end
        // first): n3 has no free GPU to hold, and n1's and n2's 4 free GPUs are not kept for
        // it. vision's idle quota is 4: all 3 of ops' borrowers are lent a GPU (ops may hold
        // 3 + 3). With the guess (n1's 2 held) only 2 were.
        let mut jobs = fragmented();
        jobs.push(ClusterJob {
            nodes: vec!["n3".into()],
            ..waiting(3, 1)
        });
        let p = plan_with(&jobs);
        assert!(p.reclaim.is_empty(), "{:?}", p.reclaim);
        assert_eq!(level(p.priorities[&20]), priority::reclaim_level(0));
        assert_eq!(p.gpu_limits["ops"], 6);
        // A new in-quota job may use all 4 free GPUs (none is held).
        assert_eq!(p.state.spare_gpus, Some(4));
        // Reserved on n1, it holds n1's 2: as the guess, 2 lent.
        jobs.last_mut().expect("the wide job").nodes = vec!["n1".into()];
        assert_eq!(plan_with(&jobs).gpu_limits["ops"], 5);
        // A node the plan does not know (drained since) is no reservation: the guess.
        jobs.last_mut().expect("the wide job").nodes = vec!["n9".into()];
        assert_eq!(plan_with(&jobs).gpu_limits["ops"], 5);
    }

    /// Lending by placement, with what Slurm's scheduler does with it: the borrowers lent to
    /// rank above an older one of their band that fits nowhere. ops holds its quota, one job
    /// per node; vision holds its quota of 5 (n1: 2, n2: 1, n3: 2); apps runs nothing and lends
    /// its 4, which sit free on n1 (1), n2 (2) and n3 (1). vision waits with a 4-GPU job that
    /// no node can take, then four 1-GPU jobs that each fit: they get the 4 GPUs. vision's
    /// limit is then 5 + 4, which the 4-GPU job passes too: in one band Slurm would try it
    /// first (the oldest), fail for resources and start nothing after it in the partition
    /// until backfill.
    #[test]
    fn the_borrowers_lent_to_rank_above_an_older_one_that_fits_nowhere() {
        let mut jobs = vec![
            on(1, "ops", "n1", 101),
            on(2, "ops", "n2", 102),
            on(3, "ops", "n3", 103),
        ];
        for (id, node) in [(11, "n1"), (12, "n1"), (13, "n2"), (14, "n3"), (15, "n3")] {
            jobs.push(on(id, "vision", node, 300 + id as i64));
        }
        jobs.push(waiting(4, 1));
        jobs.extend((21..25).map(|id| ClusterJob {
            id,
            submit: 975 + id as i64,
            ..waiting(1, 1)
        }));
        let p = plan_with(&jobs);
        assert!(p.reclaim.is_empty(), "{:?}", p.reclaim);
        assert_eq!(p.gpu_limits["vision"], 9);
        for id in 21..25 {
            assert_eq!(
                level(p.priorities[&id]),
                priority::GRANTED_LEVEL,
                "job {id}"
            );
        }
        assert!(level(p.priorities[&20]) < priority::GRANTED_LEVEL);
    }

    #[test]
    fn when_victim_order_runs_into_a_teams_limit_the_set_that_fits_is_found() {
        // ops runs 5 (quota 3: it may lose 2): job 1 (2 GPUs, its oldest) and 2 on n1 with
        // apps 8; 3 on n2 among apps' 9 10 11; 4 on n3 among vision's 12 13 14. vision's
        // 2-GPU job fits only on n1. In victim order 2 comes first, and after it ops may lose
        // 1 GPU, not job 1's 2: job 1 alone is the set.
        let mut one = on(1, "ops", "n1", 101);
        one.gpus = 2;
        let mut jobs = vec![one, on(2, "ops", "n1", 102), on(8, "apps", "n1", 208)];
        jobs.push(on(3, "ops", "n2", 103));
        jobs.extend((9..12).map(|id| on(id, "apps", "n2", 200 + id as i64)));
        jobs.push(on(4, "ops", "n3", 104));
        jobs.extend((12..15).map(|id| on(id, "vision", "n3", 300 + id as i64)));
        jobs.push(waiting(2, 1));
        let p = plan_with(&jobs);
        assert_eq!(p.reclaim, [1]);
    }

    /// A one-node job of a size no node has room for fails, and so does any as large after
    /// it (a tail's walk passes them over together); a job larger than a node is spread over
    /// several and is not judged so.
    #[test]
    fn a_one_node_size_that_found_no_room_fails_for_the_rest_of_the_pass() {
        let mut room = super::Room {
            free: vec![1, 3],
            largest: 4,
            no_fit: u32::MAX,
            no_fit_wide: Vec::new(),
        };
        assert!(!room.fails_alone(4), "nothing was tried yet");
        assert!(!room.take(&waiting(4, 1)), "no node has 4 free");
        assert!(room.fails_alone(4));
        assert!(!room.fails_alone(3), "a smaller job may still fit");
        assert!(
            !room.fails_alone(6),
            "6 GPUs take two 4-GPU nodes: not a one-node job"
        );
        assert!(room.take(&waiting(3, 1)));
        assert_eq!(room.free, vec![1, 0]);
        assert!(room.fails_alone(4));
    }
}
