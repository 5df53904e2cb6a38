//! The priorities the phases decide (DESIGN §4 rules 3, 5 and 6): in-quota and displacing
//! jobs, borrowers in their bands, the tails, and jobs that cannot start.

use std::collections::BTreeMap;

use super::pending::Pending;
use super::queues::{Entry, Sink, Tail};
use super::rules::Rules;
use super::ClusterJob;
use crate::priority::{self, encode};

/// The priorities the phases set, gathered as they go and made into the plan's map once
/// (a map insert per job per pass was a tenth of a replay).
#[derive(Default)]
pub(super) struct Priorities {
    /// (job id, priority, whether it only raises an earlier one), in the order set.
    ops: Vec<(u64, u32, bool)>,
}

impl Sink for Priorities {
    fn set(&mut self, e: Entry<'_>, p: u32) {
        self.ops.push((e.id, p, false));
    }

    fn raise(&mut self, e: Entry<'_>, p: u32) {
        self.ops.push((e.id, p, true));
    }
}

impl Priorities {
    pub(super) fn into_map(mut self) -> BTreeMap<u64, u32> {
        // Stable: each job's operations stay in the order they were made.
        self.ops.sort_by_key(|o| o.0);
        let mut out: Vec<(u64, u32)> = Vec::with_capacity(self.ops.len());
        for (id, p, raise) in self.ops {
            match out.last_mut() {
                Some(last) if last.0 == id => last.1 = if raise { last.1.max(p) } else { p },
                _ => out.push((id, p)),
            }
        }
        out.into_iter().collect()
    }
}

/// Rule 3 and 6 for the pending jobs that fit: in-quota jobs share one level, above exactly
/// the victims they need together; displacing jobs wait for the governor's requeue, so they
/// preempt nobody themselves. Returns the parked ones among them, to release.
pub(super) fn prioritise_fitting(
    rules: &Rules<'_>,
    in_quota_level: u32,
    pending: &Pending<'_>,
    priorities: &mut dyn Sink,
) -> Vec<u64> {
    let mut release = Vec::new();
    for &j in &pending.in_quota {
        priorities.raise(j, encode(in_quota_level, rules.class_idx(&j)));
        if j.parked || j.park_held {
            release.push(j.id);
        }
    }
    for &j in &pending.displacing {
        let level = priority::reclaim_level(0);
        priorities.raise(j, encode(level, rules.class_idx(&j)));
        if j.parked || j.park_held {
            release.push(j.id);
        }
    }
    release.sort_unstable();
    release.dedup();
    release
}

/// Borrowers wait in bands (their team's slot in the service order, then their class),
/// inside which Slurm itself serves the oldest submission first (equal priorities: submit
/// time, then job id). A job's priority moves only when its band does, so a long queue costs
/// no updates while the front of it changes (issue 9).
pub(super) fn prioritise_borrowers(
    rules: &Rules<'_>,
    served: &[(Entry<'_>, u32)],
    priorities: &mut dyn Sink,
) {
    for (j, slot) in served {
        let level = if rules.preemptible(j) {
            priority::borrow_band(*slot, rules.class_rank(j))
        } else {
            priority::BORROW_BASE
        };
        priorities.raise(*j, encode(level, rules.class_idx(j)));
    }
}

/// The tails' jobs: borrowers in their team's band, and jobs that cannot start at the bottom,
/// as [`prioritise_borrowers`] and [`prioritise_waiting`] rank them.
pub(super) fn prioritise_tails(
    rules: &Rules<'_>,
    tails: &[Tail<'_>],
    bands: &[u32],
    priorities: &mut dyn Sink,
) {
    for (t, &tail) in tails.iter().enumerate() {
        if tail.is_empty() {
            continue;
        }
        let band = bands[t];
        let priority = |j: &ClusterJob| {
            let level = if j.startable() && rules.preemptible(j) {
                priority::borrow_band(band, rules.class_rank(j))
            } else {
                priority::BORROW_BASE
            };
            encode(level, rules.class_idx(j))
        };
        priorities.tail(t, tail, band, &priority);
    }
}

/// The borrowers the pass lent to rank above every other borrower: Slurm serves equal
/// priorities oldest first, and an older job of their band that fits nowhere (passing the
/// team's limit on the allowance they were given) would fail for resources first, which stops
/// Slurm's main scheduler from starting anything after it in the partition until backfill.
pub(super) fn prioritise_granted(
    rules: &Rules<'_>,
    granted: &[Entry<'_>],
    priorities: &mut dyn Sink,
) {
    for &j in granted {
        priorities.raise(j, encode(priority::GRANTED_LEVEL, rules.class_idx(&j)));
    }
}

/// Jobs that cannot start now sit at the bottom; the pass after they become eligible ranks
/// them.
pub(super) fn prioritise_waiting(
    rules: &Rules<'_>,
    waiting: &[Entry<'_>],
    priorities: &mut dyn Sink,
) {
    for &j in waiting {
        let level = priority::BORROW_BASE;
        priorities.raise(j, encode(level, rules.class_idx(&j)));
    }
}
