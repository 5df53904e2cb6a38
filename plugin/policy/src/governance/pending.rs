//! Phase 3 (DESIGN §4 rules 3 and 6): each team's pending jobs take its unused quota, displace
//! a lower class of the team ([`displace`](super::displace)), or wait to borrow.

use std::collections::BTreeSet;

use super::displace::lower_classes_to_displace;
use super::nodes::{LazyNodes, NodeRoom};
use super::pool::Pass;
use super::queues::{Entry, Queues, Tail};
use super::rules::{Alike, Rules};
use super::running::Running;
use super::sharing::{share_idle_capacity, Holds};
use super::TeamState;

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

/// Pending jobs sorted by what they may do now.
pub(super) struct Pending<'a> {
    /// Fit their team's unused quota.
    pub in_quota: Vec<Entry<'a>>,
    /// At quota, but a higher class than some of the team's running jobs.
    pub displacing: Vec<Entry<'a>>,
    /// Beyond the quota, per team, in the team's own order: those walked one by one; the
    /// tail's startable jobs follow them.
    pub borrowers: Vec<Vec<Entry<'a>>>,
    /// Cannot start now (begin time, dependency): they reserve nothing. The tails' jobs that
    /// cannot start are also waiting.
    pub waiting: Vec<Entry<'a>>,
    /// Per team, the end of its queue once its quota is full and no job there may displace
    /// a lower class: every job there borrows (if it can start) or waits, and how depends
    /// only on its class, its state and its team's band, so a long queue is not walked job
    /// by job.
    pub tails: Vec<Tail<'a>>,
    /// Per team, the fewest GPUs a job of its tail that can start asks for.
    pub tail_smallest: Vec<Option<u32>>,
    /// Running jobs to requeue for the displacing ones.
    pub displace: Vec<u64>,
    /// Unused quota per team left after its in-quota jobs.
    pub room: Vec<u32>,
    pub team_states: Vec<TeamState>,
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
    pub(super) fn borrowers_of(&self, t: usize) -> impl Iterator<Item = Entry<'a>> + '_ {
        self.borrowers[t]
            .iter()
            .copied()
            .chain(self.tails[t].iter().filter(|j| j.startable()))
    }

    pub(super) fn has_borrowers(&self, t: usize) -> bool {
        self.borrowers_of(t).next().is_some()
    }

    pub(super) fn has_any_borrowers(&self) -> bool {
        (0..self.borrowers.len()).any(|t| self.has_borrowers(t))
    }
}

/// Phase 3 as the plan uses it: a job that may displace its team's lower classes does so only
/// if it could not start now on borrowed GPUs instead. Borrowing costs nobody work, and once it
/// runs, its class puts it inside the quota before the lower-class job (phase 1), which
/// becomes the borrowed one. The phase is tried once with those jobs as borrowers; those the
/// idle capacity then covers stay borrowers.
pub(super) fn sort_pending_borrow_first<'a>(
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
