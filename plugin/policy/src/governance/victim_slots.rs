//! Victim slots that stay put (issue 26): the victims' levels in reclaim order, changed only
//! where the order changed.
//!
//! Slurm needs only the order of the victims' priorities, and a pending in-quota job's level
//! just above the last victim it may preempt. Packed ranks (`0, 1, 2, ...`) moved every victim
//! behind a change by one: at 1,000 waiting jobs under churn, each job that ended shifted the
//! victims behind its team's, about six priority updates in slurmctld per churn event
//! (docs/benchmarks.md §9). Here the victims whose current slots are already in order (the
//! longest such run) keep them, and the others get slots spread evenly in the gaps between.
//! A gap too narrow for what must go in it is widened over its neighbours until they fit with
//! room to spare, and only that stretch is spread anew.

use crate::priority::MAX_VICTIM_SLOT;

/// The slot of each victim in reclaim order, given the slot each holds now (`None`: it holds
/// none, or one out of the victims' range). Strictly increasing; a victim whose slot is in
/// the longest run already in order keeps it, unless the gap beside it had to be widened.
pub(super) fn stable_slots(held: &[Option<u32>]) -> Vec<u32> {
    let n = held.len();
    // Positions 0 and n + 1 are sentinels just outside the range; victim i is at i + 1.
    let mut at: Vec<i64> = vec![-1; n + 2];
    at[n + 1] = i64::from(MAX_VICTIM_SLOT) + 1;
    let mut anchors = vec![0usize];
    for i in in_order(held) {
        at[i + 1] = held[i].map_or(0, i64::from);
        anchors.push(i + 1);
    }
    anchors.push(n + 1);
    let mut a = 0;
    while a + 1 < anchors.len() {
        let (mut lo, mut hi) = (a, a + 1);
        if !fits(anchors[lo], anchors[hi], &at, 1) {
            while !fits(anchors[lo], anchors[hi], &at, 2) && (lo > 0 || hi + 1 < anchors.len()) {
                lo = lo.saturating_sub(1);
                hi = (hi + 1).min(anchors.len() - 1);
            }
        }
        spread(&mut at, anchors[lo], anchors[hi]);
        a = hi;
    }
    at[1..=n]
        .iter()
        .map(|s| u32::try_from((*s).clamp(0, i64::from(MAX_VICTIM_SLOT))).unwrap_or(0))
        .collect()
}

/// Whether the positions strictly between `from` and `to` fit between their slots with
/// `room` times as many free slots as they need.
fn fits(from: usize, to: usize, at: &[i64], room: i64) -> bool {
    let m = i64::try_from(to - from).unwrap_or(i64::MAX);
    at[to] - at[from] >= room.saturating_mul(m)
}

/// Spreads the positions strictly between `from` and `to` evenly between their slots.
fn spread(at: &mut [i64], from: usize, to: usize) {
    let (lo, hi) = (at[from], at[to]);
    let parts = i64::try_from(to - from).unwrap_or(i64::MAX);
    for (k, p) in (from + 1..to).enumerate() {
        let k = i64::try_from(k).unwrap_or(i64::MAX) + 1;
        at[p] = lo + k * (hi - lo) / parts;
    }
}

/// The victims (indices, ascending) of the longest run of held slots that is strictly
/// increasing: they keep their slots.
fn in_order(held: &[Option<u32>]) -> Vec<usize> {
    // tails[k]: the index ending the best run of length k + 1 found so far.
    let mut tails: Vec<(u32, usize)> = Vec::new();
    let mut before = vec![usize::MAX; held.len()];
    for (i, s) in held.iter().enumerate() {
        let Some(s) = s.filter(|s| *s <= MAX_VICTIM_SLOT) else {
            continue;
        };
        let k = tails.partition_point(|&(t, _)| t < s);
        if k > 0 {
            before[i] = tails[k - 1].1;
        }
        if k == tails.len() {
            tails.push((s, i));
        } else {
            tails[k] = (s, i);
        }
    }
    let mut run = Vec::with_capacity(tails.len());
    let mut at = tails.last().map(|&(_, i)| i);
    while let Some(i) = at {
        run.push(i);
        at = Some(before[i]).filter(|b| *b != usize::MAX);
    }
    run.reverse();
    run
}

#[cfg(test)]
mod tests {
    use super::*;

    fn increasing(s: &[u32]) -> bool {
        s.windows(2).all(|w| w[0] < w[1]) && s.iter().all(|x| *x <= MAX_VICTIM_SLOT)
    }

    fn moved(before: &[Option<u32>], after: &[u32]) -> usize {
        before
            .iter()
            .zip(after)
            .filter(|(b, a)| **b != Some(**a))
            .count()
    }

    #[test]
    fn new_victims_are_spread_over_the_range() {
        let s = stable_slots(&[None; 4]);
        assert!(increasing(&s));
        assert_eq!(s[0], (MAX_VICTIM_SLOT + 2) / 5 - 1);
        assert!(s[3] < MAX_VICTIM_SLOT);
        assert!(stable_slots(&[]).is_empty());
    }

    #[test]
    fn victims_in_order_keep_their_slots() {
        let held = [Some(3), Some(10), Some(11), Some(400)];
        assert_eq!(stable_slots(&held), [3, 10, 11, 400]);
    }

    #[test]
    fn a_victim_gone_or_come_moves_nobody_else() {
        let s = stable_slots(&[None; 6]);
        // The third ends: the others keep theirs.
        let mut gone: Vec<Option<u32>> = s.iter().copied().map(Some).collect();
        gone.remove(2);
        assert_eq!(moved(&gone, &stable_slots(&gone)), 0);
        // A new one between the first and the second: only it gets a slot.
        let mut come: Vec<Option<u32>> = s.iter().copied().map(Some).collect();
        come.insert(1, None);
        let after = stable_slots(&come);
        assert!(increasing(&after));
        assert_eq!(moved(&come, &after), 1);
    }

    #[test]
    fn a_victim_out_of_order_is_the_one_moved() {
        // The team of the victim at 50 is now the most over quota: it goes first.
        let held = [Some(50), Some(10), Some(20), Some(30), Some(40)];
        let after = stable_slots(&held);
        assert!(increasing(&after));
        assert_eq!(&after[1..], [10, 20, 30, 40]);
        assert!(after[0] < 10);
    }

    #[test]
    fn a_full_gap_is_widened_over_its_neighbours() {
        // Three new victims between slots 10 and 12: no room; the stretch around is spread.
        let held = [Some(0), Some(10), None, None, None, Some(12), Some(1_000)];
        let after = stable_slots(&held);
        assert!(increasing(&after));
        assert_eq!(after[6], 1_000, "far enough away to stay");
        // Held slots out of the victims' range, or one victim per slot up to the top.
        let top: Vec<Option<u32>> = (0..3).map(|k| Some(MAX_VICTIM_SLOT - 2 + k)).collect();
        let mut crowded = top.clone();
        crowded.push(None);
        assert!(increasing(&stable_slots(&crowded)));
        assert!(increasing(&stable_slots(&[Some(u32::MAX), None, Some(0)])));
    }
}
