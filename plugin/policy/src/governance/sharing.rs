//! Phase 5 (DESIGN §4 rules 4 and 5): the lendable idle capacity shared out among the waiting
//! borrowers' teams by `idle_sharing`, each team's part given to its borrowers in its own
//! order ([`allowance`](super::allowance)).

use std::collections::BTreeMap;

use teamshare_config::{Config, IdleSharing};

use super::allowance::team_allowance;
use super::pending::Pending;
use super::pool::Pass;
use super::queues::{Entry, List, Queues};
use super::reclaim;
use super::rules::Rules;
use super::running::Running;

/// What one team's waiting borrowers ask of the lendable capacity.
pub(super) struct Ask<'a> {
    pub job: Entry<'a>,
    /// The part beyond what is left of the team's own quota (the job straddles it).
    pub beyond: u32,
    /// The team's own idle quota the job would use.
    own: u32,
}

/// Phase 5: lendable idle capacity shared out by `idle_sharing`; returns each team's
/// allowance beyond its quota and the borrowers in the order they are served, each with its
/// team's band slot.
pub(super) fn share_idle_capacity<'a>(
    rules: &Rules<'_>,
    pass: &Pass<'_>,
    queues: &Queues<'_>,
    running: &Running<'_>,
    pending: &Pending<'a>,
    room: Option<reclaim::Room>,
    holds: &Holds,
) -> Shares<'a> {
    let mut asks = straddling_asks(rules, queues, pending);
    let claims = Claims { asks: &asks, holds };
    let shares = share_with(rules, pass, queues, running, pending, &claims, room.clone());
    // A straddling job that was not granted (its part beyond the quota was not there, or it
    // fits no node) holds its team's idle quota back for nothing: shared again without it.
    let mut dropped = false;
    for ask in &mut asks {
        if ask
            .as_ref()
            .is_some_and(|a| a.own > 0 && !shares.granted.iter().any(|e| e.id == a.job.id))
        {
            *ask = None;
            dropped = true;
        }
    }
    if !dropped {
        return shares;
    }
    let claims = Claims { asks: &asks, holds };
    share_with(rules, pass, queues, running, pending, &claims, room)
}

/// What holds a team's idle quota back from borrowers besides its in-quota jobs.
struct Claims<'c, 'a> {
    /// Each team's straddling job, if any.
    asks: &'c [Option<Ask<'a>>],
    holds: &'c Holds,
}

/// Per team (by its place in the configuration; empty where placement is unknown): its wide
/// in-quota jobs that fit nowhere now ([`reclaim::Reclaimed::unplaced`]).
#[derive(Default)]
pub(super) struct Holds {
    /// Their GPUs.
    pub unplaced: Vec<u32>,
    /// The free GPUs they hold on the nodes they wait for.
    pub holding: Vec<u32>,
}

impl Holds {
    /// What team `t`'s waiting wide jobs leave of their claim on its idle quota: the GPUs
    /// they do not hold yet, lendable until they can start (they will start where the GPUs
    /// they hold are, not on these).
    fn released(&self, t: usize) -> u32 {
        let u = self.unplaced.get(t).copied().unwrap_or(0);
        u.saturating_sub(self.holding.get(t).copied().unwrap_or(0))
    }
}

/// [`share_idle_capacity`] with these straddling jobs.
fn share_with<'a>(
    rules: &Rules<'_>,
    pass: &Pass<'_>,
    queues: &Queues<'_>,
    running: &Running<'_>,
    pending: &Pending<'a>,
    claims: &Claims<'_, 'a>,
    mut room: Option<reclaim::Room>,
) -> Shares<'a> {
    let config = rules.config;
    let asks = claims.asks;
    let Lendable {
        lends,
        mut remaining,
    } = lendable_capacity(config, pass.capacity, running, pending, claims);
    // Each team's band slot (the team served last has the lowest); under fifo every team
    // shares slot 0 and Slurm serves the oldest first.
    let ranked = by_fairshare_order(rules, pass.fairshare);
    let bands = match config.cluster.idle_sharing {
        IdleSharing::FairShare => band_slots(&ranked),
        IdleSharing::Fifo => vec![0; config.teams.len()],
    };
    let order = service_order(rules, &ranked, pending);
    let mut allowance = vec![0u32; config.teams.len()];
    // Each borrower walked with its team's band slot (the tails' follow theirs).
    let mut served: Vec<(Entry<'a>, u32)> =
        Vec::with_capacity(pending.borrowers.iter().map(Vec::len).sum());
    let mut granted = Vec::new();
    for t in order {
        let team = &config.teams[t];
        // A team never borrows its own idle quota.
        let own = lends[t];
        let available = u32::try_from((remaining - own).max(0)).unwrap_or(u32::MAX);
        let given = team_allowance(
            rules,
            running.usage[t],
            team,
            &pending.borrowers[t],
            pending.tails[t],
            pending.tail_smallest[t],
            queues.sized.and_then(|s| s.get(t)),
            asks[t].as_ref(),
            available,
            &mut granted,
            &mut room,
        );
        remaining -= i64::from(given);
        allowance[t] = given;
        served.extend(pending.borrowers[t].iter().map(|j| (*j, bands[t])));
    }
    if config.cluster.idle_sharing == IdleSharing::Fifo {
        served.sort_by_key(|(j, _)| (j.submit, j.id));
    }
    Shares {
        allowance,
        served,
        bands,
        granted,
        lends: lends
            .into_iter()
            .map(|n| u32::try_from(n.max(0)).unwrap_or(u32::MAX))
            .collect(),
    }
}

/// Each team's first borrower that can start and may borrow straddles its unused quota: it
/// uses that quota and borrows only the rest (a 3-GPU job of a team with 2 idle GPUs of quota
/// borrows 1). That quota is then not lent to others.
fn straddling_asks<'a>(
    rules: &Rules<'_>,
    queues: &Queues<'_>,
    pending: &Pending<'a>,
) -> Vec<Option<Ask<'a>>> {
    let may_borrow = |j: &Entry<'_>| rules.preemptible(j) && j.eligible;
    pending
        .room
        .iter()
        .enumerate()
        .map(|(t, &room)| {
            let tail = pending.tails[t];
            let j = match (tail.list, queues.askable.and_then(|a| a.get(t))) {
                // The walked borrowers, then the tail's first that may borrow, from the
                // caller's set of them.
                (List::Pending(list, table), Some(askable)) if !tail.is_empty() => pending
                    .borrowers[t]
                    .iter()
                    .copied()
                    .find(may_borrow)
                    .or_else(|| {
                        askable
                            .range(list[tail.from]..)
                            .next()
                            .map(|&(_, slot)| Entry {
                                job: table.job(slot),
                                slot,
                            })
                    }),
                _ => pending.borrowers_of(t).find(may_borrow),
            }?;
            let own = room.min(j.gpus);
            Some(Ask {
                job: j,
                beyond: j.gpus - own,
                own,
            })
        })
        .collect()
}

/// What [`lendable_capacity`] found.
struct Lendable {
    /// What each team lends: its idle quota not claimed by its own in-quota or straddling
    /// jobs, up to its lend limit.
    lends: Vec<i64>,
    /// What all borrowers may still take: the lendable capacity less what is borrowed now.
    remaining: i64,
}

/// Rule 4: the capacity borrowers may take. Unallocated capacity counts negative when quotas
/// exceed what is usable (a drained node): the missing GPUs come out of what others may
/// borrow.
fn lendable_capacity(
    config: &Config,
    capacity: u32,
    running: &Running<'_>,
    pending: &Pending<'_>,
    claims: &Claims<'_, '_>,
) -> Lendable {
    let total_quota: i64 = config.teams.iter().map(|t| i64::from(t.quota.total)).sum();
    let mut lendable = i64::from(capacity) - total_quota;
    let mut borrowed_now = 0i64;
    let mut lends = Vec::with_capacity(config.teams.len());
    for (i, t) in config.teams.iter().enumerate() {
        let used = running.usage[i];
        let claimed = pending.team_states[i]
            .pending_in_quota_gpus
            .saturating_sub(claims.holds.released(i))
            .saturating_add(claims.asks[i].as_ref().map_or(0, |a| a.own));
        let idle = t.quota.total.saturating_sub(used).saturating_sub(claimed);
        let lend = i64::from(t.lend_limit.min(t.quota.total).min(idle));
        lends.push(lend);
        lendable += lend;
        borrowed_now += i64::from(used.saturating_sub(t.quota.total));
    }
    Lendable {
        lends,
        remaining: lendable - borrowed_now,
    }
}

/// Each team's band slot by name, as [`share_idle_capacity`] gives them this pass: what the
/// published state tells the plugin ([`super::PublishedState::bands`]).
pub(super) fn published_bands(
    rules: &Rules<'_>,
    fairshare: &BTreeMap<String, f64>,
) -> BTreeMap<String, u32> {
    let teams = &rules.config.teams;
    let slots = match rules.config.cluster.idle_sharing {
        IdleSharing::FairShare => band_slots(&by_fairshare_order(rules, fairshare)),
        IdleSharing::Fifo => vec![0; teams.len()],
    };
    teams.iter().map(|t| t.name.clone()).zip(slots).collect()
}

/// Band slots follow every team's place by fair-share factor, borrowing or not, so that a
/// team starting or stopping to borrow moves no other team's jobs; the last team has slot 0.
/// Indexed by the team's place in the configuration.
fn band_slots(ranked: &[usize]) -> Vec<u32> {
    let mut slots = vec![0u32; ranked.len()];
    for (i, t) in ranked.iter().rev().enumerate() {
        slots[*t] = u32::try_from(i).unwrap_or(u32::MAX);
    }
    slots
}

/// Every team by fair-share factor, highest first (missing: 1.0), then by name, each factor
/// looked up once.
fn by_fairshare_order(rules: &Rules<'_>, fairshare: &BTreeMap<String, f64>) -> Vec<usize> {
    let teams = &rules.config.teams;
    let factor: Vec<f64> = teams
        .iter()
        .map(|t| fairshare.get(&t.name).copied().unwrap_or(1.0))
        .collect();
    let mut all: Vec<usize> = rules.by_name.clone();
    all.sort_by(|a, b| {
        factor[*b]
            .partial_cmp(&factor[*a])
            .unwrap_or(std::cmp::Ordering::Equal)
            .then(teams[*a].name.cmp(&teams[*b].name))
    });
    all
}

/// Rule 5: the order borrowing teams are served in: by fair-share factor, or (fifo) by their
/// oldest borrower that may borrow. Teams by their place in the configuration.
fn service_order(rules: &Rules<'_>, ranked: &[usize], pending: &Pending<'_>) -> Vec<usize> {
    match rules.config.cluster.idle_sharing {
        IdleSharing::FairShare => ranked
            .iter()
            .copied()
            .filter(|t| pending.has_borrowers(*t))
            .collect(),
        IdleSharing::Fifo => {
            let mut order: Vec<usize> = rules
                .by_name
                .iter()
                .copied()
                .filter(|t| pending.has_borrowers(*t))
                .collect();
            order.sort_by_key(|t| {
                pending
                    .borrowers_of(*t)
                    .filter(|j| rules.preemptible(j) && j.eligible)
                    .map(|j| (j.submit, j.id))
                    .min()
                    .unwrap_or((i64::MAX, u64::MAX))
            });
            order
        }
    }
}

/// What [`share_idle_capacity`] decided.
pub(super) struct Shares<'a> {
    /// Each team's allowance beyond its quota (0 for teams not borrowing).
    pub allowance: Vec<u32>,
    /// The borrowers walked (not in a tail) in the order they are served, each with its
    /// team's band slot.
    pub served: Vec<(Entry<'a>, u32)>,
    /// Each team's band slot, by its place in the configuration.
    pub bands: Vec<u32>,
    /// The borrowers the allowances cover (they may start on borrowed GPUs now).
    pub granted: Vec<Entry<'a>>,
    /// What each team's idle quota offered to borrowers.
    pub lends: Vec<u32>,
}
