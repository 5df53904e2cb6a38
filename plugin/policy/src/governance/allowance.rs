//! Phase 5 for one team: what it is given beyond its quota, borrower by borrower, and the same
//! walk over a long tail through its jobs by size.

use teamshare_config::Team;

use super::queues::{Entry, List, Sized, Table, Tail};
use super::reclaim;
use super::rules::{PendingKey, Rules};
use super::sharing::Ask;

/// What one team is given beyond its quota: its borrowers in its own order, each served
/// while the GPUs it needs beyond the quota fit what is `available` and the team's borrow
/// headroom (a later, smaller job may still fit where an earlier one did not).
#[allow(clippy::too_many_arguments)]
pub(super) fn team_allowance<'a>(
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
    // The straddling job by its place: an array's other tasks ask for all their GPUs.
    let ask_slot = ask.map(|a| a.job.slot);
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
            let ask_behind = ask_slot.is_none() || (seen_ask && ask_slot != Some(j.slot));
            if ask_behind && tail_smallest.is_none_or(|g| g > left) {
                break;
            }
        }
        let is_ask = ask_slot == Some(j.slot);
        seen_ask |= is_ask;
        let left = available.min(headroom.saturating_sub(given));
        // Every borrower but the straddling one asks for at least one GPU beyond the quota
        // (it did not fit what was left of it): once nothing is left and that one is behind,
        // nothing more is given, and a long queue costs no walk.
        if left == 0 && (ask_slot.is_none() || (seen_ask && !is_ask)) {
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
        let ask_slot = self.ask.map(|a| a.job.slot);
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
        let mut cursors: Vec<((u32, u32), std::iter::Peekable<_>)> = sized
            .iter()
            .map(|(size, set)| (*size, set.range(from..).peekable()))
            .collect();
        loop {
            let left = available.min(self.headroom.saturating_sub(given));
            let mut best: Option<((PendingKey, usize), Option<usize>)> =
                ask_next.map(|a| (a, None));
            for (c, ((g, n), cursor)) in cursors.iter_mut().enumerate() {
                if *g > left {
                    break;
                }
                // Lending by placement: a one-node job of a size no node has room for is
                // given nothing, nor is any job of that size after it this pass (the room
                // only shrinks): they are passed over together, not one by one.
                if *n == 1 && self.room.as_ref().is_some_and(|r| r.fails_alone(*g)) {
                    continue;
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
            let is_ask = ask_slot == Some(j.slot);
            self.seen_ask |= is_ask;
            if left == 0 && (ask_slot.is_none() || (self.seen_ask && !is_ask)) {
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
