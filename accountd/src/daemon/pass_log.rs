//! What a governor pass did, as the daemon says it: one log line per action and team limit,
//! and the requeues and limit moves counted for the metrics.

use std::collections::BTreeMap;

use super::DaemonLog;
use crate::governor::PassReport;

/// The team of a requeued job the plan did not read (never expected: the plan names only jobs
/// it read, each with its account).
const UNKNOWN_TEAM: &str = "(unknown)";

/// Why the governor requeued a job (its reason in `teamshare_governor_requeues_total`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Requeue {
    /// For a higher class of its team.
    Displaced,
    /// To reclaim quota Slurm had not preempted for.
    Reclaimed,
    /// Its team ran beyond its ceiling (quota + borrow limit).
    OverCeiling,
}

/// The limits the actions left in force, and the moves that failed.
pub(crate) fn count_limits(live: &mut crate::metrics::Live, report: &PassReport) {
    if let Some(in_force) = &report.limits_in_force {
        live.limits.in_force = in_force.clone();
    }
    for team in &report.limit_failures {
        *live.limits.failures.entry(team.clone()).or_default() += 1;
    }
}

pub(crate) fn count_requeued(
    live: &mut crate::metrics::Live,
    requeued: BTreeMap<(String, Requeue), u64>,
) {
    for ((team, why), n) in requeued {
        let counts = match why {
            Requeue::Displaced => &mut live.displaced,
            Requeue::Reclaimed => &mut live.reclaimed,
            Requeue::OverCeiling => &mut live.over_ceiling,
        };
        *counts.entry(team).or_default() += n;
    }
}

/// Log what a pass changed and did to jobs; the requeues per team and reason, for the
/// metrics.
pub(crate) fn log_pass(log: &DaemonLog, report: &PassReport) -> BTreeMap<(String, Requeue), u64> {
    for (team, limit) in &report.limit_updates {
        log.info(&format!("team {team} GPU limit -> {limit}"));
    }
    for line in &report.unreadable {
        log.warn_once(&format!(
            "governor: cannot read {line}: its job is treated as never in quota"
        ));
    }
    let mut requeued: BTreeMap<(String, Requeue), u64> = BTreeMap::new();
    // Each job's team as the plan read it (squeue's account): the database is not asked.
    let team = |id: &u64| {
        report
            .teams
            .get(id)
            .cloned()
            .unwrap_or_else(|| UNKNOWN_TEAM.to_string())
    };
    for id in &report.reclaimed {
        log.info(&format!(
            "job {id} requeued by the governor: an in-quota job waited over {} ms without Slurm preempting for it",
            teamshare_policy::governance::RECLAIM_FALLBACK_MS
        ));
        *requeued.entry((team(id), Requeue::Reclaimed)).or_default() += 1;
    }
    for id in &report.displaced {
        log.info(&format!("job {id} displaced by a higher class of its team"));
        *requeued.entry((team(id), Requeue::Displaced)).or_default() += 1;
    }
    for id in &report.over_ceiling {
        log.info(&format!(
            "job {id} requeued by the governor: its team ran beyond its ceiling (quota + borrow limit; a lowered limit is enforced on what runs)"
        ));
        *requeued
            .entry((team(id), Requeue::OverCeiling))
            .or_default() += 1;
    }
    for (ids, what) in [
        (&report.violations, "requeued by the governor: a non-preemptible job ran beyond its team's quota (it waits, parked, until it fits)"),
        (&report.held, "held by the governor: it holds or asks for GPUs in a governed partition outside every team, or no single GPU type where GPUs are governed per type"),
        (&report.skipped, "left alone: it ended, was requeued or restarted between the governor's snapshot and its action"),
        (&report.parked, "parked by the governor: its priority class may not borrow and it does not fit its team's quota (held until it fits)"),
        (&report.released, "released by the governor: it now fits its team's quota"),
        (&report.unheld, "released by the governor: the reason it was held is gone (its account is a team again, or GPU types are no longer governed)"),
        (&report.lifted, "may start again: the governor lifted its requeue delay (its run was ended by a preemption or requeue)"),
        (&report.requeue_held, "held by the governor: its run had ended by itself just before a requeue (the governor's, or Slurm's preemption) reached slurmctld, so it must not run twice (its owner may release it)"),
        (&report.wrong_holds_released, "released by the governor: accounting now records its run as killed by the requeue, so the hold placed against a second run was wrong"),
        (&report.requeue_unverified, "keeps Slurm's requeue delay: the governor could not tell from accounting whether its requeued run had ended by itself (the run's start unknown, or not recorded within 90 s)"),
    ] {
        for id in ids {
            log.info(&format!("job {id} {what}"));
        }
    }
    for failure in &report.failures {
        log.warn_once(&format!("governor: {failure}"));
    }
    requeued
}
