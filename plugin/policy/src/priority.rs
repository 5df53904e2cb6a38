//! How teamshare speaks to Slurm's scheduler: one number per job.
//!
//! Every governed job runs in one QOS ([`INTERNAL_QOS`]) whose PreemptMode includes WITHIN, so
//! preempt/qos lets a pending job preempt a running job of the same QOS exactly when its
//! priority is higher. teamshare sets every governed job's priority directly (the plugin at
//! submit, the governor afterwards), so the ordering of priorities *is* the governance:
//!
//! | band | level | who |
//! |---|---|---|
//! | borrow | `BORROW_BASE..GRANTED_LEVEL` | pending jobs beyond their team's quota: below every running job, so they never preempt; in bands of (team slot, class) inside which Slurm serves the oldest first |
//! | granted | `GRANTED_LEVEL` | borrowers the governor's last pass lent to (they fit the idle GPUs now): above every other borrower, so that an older one of their band that fits nowhere cannot stop Slurm's scheduler before them |
//! | no-preempt | `VICTIM_BASE - 1` | pending in-quota jobs that can start on free GPUs |
//! | victims | `VICTIM_BASE + 2s` | running borrowed jobs in reclaim order (first victim lowest); slots `s` with gaps, kept while the order holds |
//! | reclaim | a victim's level + 1 | pending in-quota jobs: above exactly the first `k` victims |
//! | protected | `PROTECTED_BASE + class value` | running jobs inside their team's quota, and non-preemptible classes |
//!
//! The job's priority class travels in the low [`CLASS_BITS`] bits of the same number (the
//! plugin replaces the user's `--qos=<class>` with the internal QOS, and Slurm keeps no other
//! field a plugin may set at submit that users cannot edit).

/// The QOS every governed job runs in.
pub const INTERNAL_QOS: &str = "teamshare";

pub const CLASS_BITS: u32 = 6;
const CLASS_MASK: u32 = (1 << CLASS_BITS) - 1;
/// The most priority classes a configuration may define (index 0 is "no class").
pub const MAX_CLASSES: usize = CLASS_MASK as usize;

pub const BORROW_BASE: u32 = 1_000;
pub const VICTIM_BASE: u32 = 10_000_000;
pub const PROTECTED_BASE: u32 = 60_000_000;
/// Borrowers the governor lent to: above every borrow band, below the no-preempt level.
pub const GRANTED_LEVEL: u32 = VICTIM_BASE - 2;
/// The highest level that still fits in Slurm's 32-bit priority.
pub const MAX_LEVEL: u32 = u32::MAX >> CLASS_BITS;

/// Priorities below this were not set by teamshare (multifactor, or a released hold).
pub const MIN_TEAMSHARE_PRIORITY: u32 = BORROW_BASE << CLASS_BITS;

/// The priority Slurm gets for a level and a class index.
pub fn encode(level: u32, class_index: u8) -> u32 {
    (level.min(MAX_LEVEL) << CLASS_BITS) | (u32::from(class_index) & CLASS_MASK)
}

/// The class index carried by a priority teamshare set; 0 (no class) for any other.
pub fn class_index(priority: u32) -> u8 {
    if priority < MIN_TEAMSHARE_PRIORITY {
        0
    } else {
        (priority & CLASS_MASK) as u8
    }
}

pub fn level(priority: u32) -> u32 {
    priority >> CLASS_BITS
}

/// The highest victim slot: its level and the reclaim level above it stay below
/// [`PROTECTED_BASE`].
pub const MAX_VICTIM_SLOT: u32 = (PROTECTED_BASE - 2 - VICTIM_BASE) / 2;

/// The level of victim slot `slot` (a victim's rank, where victims are packed without gaps).
/// The governor keeps a victim's slot while the reclaim order around it holds, so slots have
/// gaps ([`crate::governance`] publishes each victim's level).
pub fn victim_level(slot: usize) -> u32 {
    let slot = u32::try_from(slot).unwrap_or(u32::MAX).min(MAX_VICTIM_SLOT);
    VICTIM_BASE + 2 * slot
}

/// The victim slot a level is, if it is one.
pub fn victim_slot(level: u32) -> Option<u32> {
    let offset = level.checked_sub(VICTIM_BASE)?;
    (offset % 2 == 0 && offset / 2 <= MAX_VICTIM_SLOT).then_some(offset / 2)
}

/// Above exactly the victims packed in slots `0..k` (k >= 1); `k == 0` gives the no-preempt
/// level. With victims at any slots, the level above the last one needed is its level + 1.
pub fn reclaim_level(k: usize) -> u32 {
    if k == 0 {
        VICTIM_BASE - 1
    } else {
        victim_level(k - 1) + 1
    }
}

pub fn protected_level(class_value: u32) -> u32 {
    PROTECTED_BASE.saturating_add(class_value).min(MAX_LEVEL)
}

/// Class ranks a borrow band holds (a configuration has at most [`MAX_CLASSES`] classes).
const CLASS_RANKS: u32 = MAX_CLASSES as u32 + 1;
/// The most team slots the borrow band has room for; more teams share the lowest slot.
pub const MAX_TEAM_SLOTS: u32 = (VICTIM_BASE - 2 - BORROW_BASE) / CLASS_RANKS - 1;

/// Pending borrowers that may be served: one level per (team slot, class rank). Slot 0 is the
/// team served last (under fifo every team has slot 0); a higher class rank goes first within
/// a team. Every job of one band has the same priority, and Slurm orders equal priorities by
/// submit time, then job id: the oldest is served first without an update per job.
pub fn borrow_band(team_slot: u32, class_rank: u32) -> u32 {
    BORROW_BASE + 1 + team_slot.min(MAX_TEAM_SLOTS) * CLASS_RANKS + class_rank.min(CLASS_RANKS - 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bands_are_ordered() {
        assert!(borrow_band(MAX_TEAM_SLOTS, CLASS_RANKS - 1) < reclaim_level(0));
        assert!(borrow_band(u32::MAX, u32::MAX) < reclaim_level(0));
        assert!(borrow_band(u32::MAX, u32::MAX) < GRANTED_LEVEL);
        assert!(GRANTED_LEVEL < reclaim_level(0));
        assert!(borrow_band(0, 0) > BORROW_BASE);
        assert!(borrow_band(1, 0) > borrow_band(0, 63));
        assert!(reclaim_level(0) < victim_level(0));
        assert!(victim_level(0) < reclaim_level(1));
        assert!(reclaim_level(1) < victim_level(1));
        assert!(reclaim_level(3) > victim_level(2) && reclaim_level(3) < victim_level(3));
        assert!(victim_level(1_000_000) < protected_level(0));
        assert!(victim_level(usize::MAX) + 1 < protected_level(0));
        assert_eq!(
            victim_slot(victim_level(MAX_VICTIM_SLOT as usize)),
            Some(MAX_VICTIM_SLOT)
        );
        assert_eq!(victim_slot(victim_level(7)), Some(7));
        assert_eq!(victim_slot(reclaim_level(3)), None);
        assert_eq!(victim_slot(reclaim_level(0)), None);
        assert_eq!(victim_slot(protected_level(0)), None);
        assert!(protected_level(u32::MAX) <= MAX_LEVEL);
    }

    #[test]
    fn class_survives_the_round_trip() {
        for (level, class) in [
            (BORROW_BASE, 3u8),
            (victim_level(7), 1),
            (protected_level(100), 63),
        ] {
            let p = encode(level, class);
            assert_eq!(class_index(p), class);
            assert_eq!(super::level(p), level);
        }
        // Priorities teamshare did not set carry no class.
        assert_eq!(class_index(11_100), 0);
        assert_eq!(class_index(0), 0);
    }
}
