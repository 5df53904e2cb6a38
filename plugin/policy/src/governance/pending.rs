//! Phase 3 (DESIGN §4 rules 3 and 6): each team's pending jobs take its unused quota, displace
//! a lower class of the team ([`displace`](super::displace)), or wait to borrow.

use std::collections::BTreeSet;

use super::displace::{lower_classes_to_displace, Lower};
use super::nodes::{LazyNodes, NodeRoom};
use super::pool::Pass;
use super::queues::{Entry, Queues, Tail};
use super::rules::{Alike, Rules};
use super::running::Running;
use super::sharing::{share_idle_capacity, Holds};
use super::{ClusterJob, TeamState};

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
    let mut out = Pending::new(rules.config.teams.len());
    let mut done = Displaced {
        targeted: BTreeSet::new(),
        placed: None,
    };
    for (t, team) in rules.config.teams.iter().enumerate() {
        let pending = queues.pending(t);
        let used = running.usage[t];
        let mut walk = TeamWalk {
            team: t,
            lowest_displaceable: running.lowest_displaceable[t],
            room: team.quota.total.saturating_sub(used),
            pending_in_quota: 0,
            cannot_displace: Vec::new(),
            lower_known: Vec::new(),
            ahead: Ahead::new(&queues.alike[t]),
        };
        let mut tail_from = pending.len();
        for (i, j) in pending.iter().enumerate() {
            if walk.at_tail(rules) {
                tail_from = i;
                break;
            }
            if !j.startable() {
                out.waiting.push(j);
                continue;
            }
            let alike = rules.alike(&j);
            walk.walk_past(alike);
            if j.gpus <= walk.room {
                walk.room -= j.gpus;
                walk.pending_in_quota += j.gpus;
                out.in_quota.push(j);
                walk.ahead.forget();
                continue;
            }
            if rules.within
                && walk
                    .lowest_displaceable
                    .is_some_and(|v| v < rules.value(&j))
                && !borrow_first.contains(&j.id)
            {
                if let Some(chosen) = walk.displace(rules, running, &j, alike, nodes, &mut done) {
                    out.displace.extend(chosen);
                    out.displacing.push(j);
                    continue;
                }
            }
            out.borrowers[t].push(j);
        }
        out.tails.push(pending.tail(tail_from));
        out.tail_smallest.push(if tail_from < pending.len() {
            walk.ahead.smallest()
        } else {
            None
        });
        out.room[t] = walk.room;
        out.team_states.push(TeamState {
            running_gpus: used,
            pending_in_quota_gpus: walk.pending_in_quota,
            gpu_limit: 0,
        });
    }
    out
}

/// What phase 3's displacements have done so far, over the teams walked.
struct Displaced<'n> {
    /// The running jobs chosen to be displaced.
    targeted: BTreeSet<u64>,
    /// Free GPUs per node as the displacing jobs are placed, one after the other (read on
    /// the first displacement).
    placed: Option<NodeRoom<'n>>,
}

/// Phase 3's walk over one team's queue, as it goes.
struct TeamWalk<'a, 'q> {
    /// The team's place in the configuration.
    team: usize,
    /// The lowest preemptible class among the team's protected jobs: a job of no higher
    /// class has nothing to displace (answered without a walk over them).
    lowest_displaceable: Option<u32>,
    /// What is left of the team's quota.
    room: u32,
    pending_in_quota: u32,
    /// Attempts that displaced nobody (they change nothing), by what their answer depends
    /// on (team, class value, GPUs, nodes, room left): a long queue of alike jobs asks
    /// once until a displacement changes the answer. Only the team's own are asked about
    /// during its walk.
    cannot_displace: Vec<(usize, u32, u32, u32, u32)>,
    /// The team's displaceable jobs, per class value, until a displacement changes them.
    lower_known: Vec<((usize, u32), Lower<'a>)>,
    ahead: Ahead<'q>,
}

impl<'a> TeamWalk<'a, '_> {
    /// Whether an attempt for a job alike `a` was answered no with the room left now.
    fn answered(&self, a: Alike) -> bool {
        answered(&self.cannot_displace, self.team, a, self.room)
    }

    /// No job from here on fits the quota left, and none may displace: its class is no
    /// higher than the lowest displaceable, or an attempt alike was answered no this pass.
    /// The rest is the tail.
    fn at_tail(&mut self, rules: &Rules<'_>) -> bool {
        if self.ahead.smallest().is_some_and(|g| g <= self.room) {
            return false;
        }
        match self.lowest_displaceable.filter(|_| rules.within) {
            Some(v) => {
                let (memo, team, room) = (&self.cannot_displace, self.team, self.room);
                self.ahead.undecided(v, |a| answered(memo, team, a, room)) == 0
            }
            None => true,
        }
    }

    /// A job alike `a` that can start is walked past.
    fn walk_past(&mut self, a: Alike) {
        let open = self.lowest_displaceable.is_some_and(|v| v < a.0) && !self.answered(a);
        self.ahead.walk(a, open);
    }

    /// `j` (alike `a`), which does not fit the room left, displaces lower classes of the team
    /// if it can: the jobs to requeue for it, `None` when it cannot (or an attempt alike was
    /// answered no).
    fn displace<'n>(
        &mut self,
        rules: &Rules<'_>,
        running: &Running<'a>,
        j: &ClusterJob,
        a: Alike,
        nodes: &LazyNodes<'n, '_>,
        done: &mut Displaced<'n>,
    ) -> Option<Vec<u64>> {
        let attempt = (self.team, rules.value(j), j.gpus, j.node_count, self.room);
        if self.cannot_displace.contains(&attempt) {
            return None;
        }
        let found = lower_classes_to_displace(
            rules,
            running,
            self.team,
            j,
            self.room,
            &done.targeted,
            done.placed.get_or_insert_with(|| nodes.get().clone()),
            &mut self.lower_known,
        );
        let Some((chosen, freed)) = found else {
            // A failed attempt changed nothing: alike jobs would fail alike.
            self.cannot_displace.push(attempt);
            self.ahead.answered(a);
            return None;
        };
        self.room = freed - j.gpus;
        done.targeted.extend(chosen.iter().copied());
        self.cannot_displace.clear();
        self.lower_known.clear();
        self.ahead.forget();
        Some(chosen)
    }
}

/// Whether `memo` holds team `t`'s attempt for a job alike `a` with `room` left.
fn answered(memo: &[(usize, u32, u32, u32, u32)], t: usize, a: Alike, room: u32) -> bool {
    memo.contains(&(t, a.0, a.1, a.2, room))
}

impl<'a> Pending<'a> {
    fn new(teams: usize) -> Pending<'a> {
        Pending {
            in_quota: Vec::new(),
            displacing: Vec::new(),
            borrowers: vec![Vec::new(); teams],
            waiting: Vec::new(),
            tails: Vec::with_capacity(teams),
            tail_smallest: Vec::with_capacity(teams),
            displace: Vec::new(),
            room: vec![0; teams],
            team_states: Vec::with_capacity(teams),
        }
    }

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
