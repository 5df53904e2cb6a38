//! Rule 6 (DESIGN §4): the non-preemptible pending jobs that do not fit their team's quota,
//! parked until they do.

use std::collections::BTreeSet;

use super::pending::Pending;
use super::queues::{Entry, Queues};
use super::rules::Rules;

/// Rule 6: non-preemptible jobs that do not fit. Parked by begin time (the plugin's, at
/// submit) is not enough, as the owner may move it; the governor holds them too. An array's
/// record is parked only when none of its tasks fits: while one does, its tasks may start up
/// to the team's limit, and a non-preemptible task that starts beyond the quota is a
/// violation (requeued, then parked).
pub(super) fn jobs_to_park(
    rules: &Rules<'_>,
    queues: &Queues<'_>,
    pending: &Pending<'_>,
) -> Vec<u64> {
    let to_park = |j: &Entry<'_>| !rules.preemptible(j) && !j.park_held;
    let mut park: Vec<u64> = pending
        .borrowers
        .iter()
        .flatten()
        .filter(|j| to_park(j))
        .map(|j| j.id)
        .collect();
    for (t, tail) in pending.tails.iter().enumerate() {
        let Some(first) = tail.first() else {
            continue;
        };
        match &queues.unparked {
            // The few such jobs of the team, those in the tail.
            Some(unparked) => {
                let from = (rules.pending_key(&first), first.slot);
                park.extend(
                    unparked[t]
                        .iter()
                        .filter(|j| (rules.pending_key(j), j.slot) >= from)
                        .filter(|j| j.startable() && to_park(j))
                        .map(|j| j.id),
                );
            }
            None => park.extend(
                tail.iter()
                    .filter(|j| j.startable() && to_park(j))
                    .map(|j| j.id),
            ),
        }
    }
    if park.is_empty() {
        return park;
    }
    park.sort_unstable();
    park.dedup();
    let fitting: BTreeSet<u64> = pending
        .in_quota
        .iter()
        .chain(&pending.displacing)
        .map(|j| j.id)
        .collect();
    park.retain(|id| !fitting.contains(id));
    park
}
