//! What a governor pass did, as the daemon says it: one log line per action and team limit,
//! and the requeues and limit moves counted for the metrics.

use std::collections::BTreeMap;

use super::DaemonLog;
use crate::governor::{act_span, PassReport};
use crate::logging::RUN;

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
    for (team, _) in &report.limit_updates {
        *live.limits.updates.entry(team.clone()).or_default() += 1;
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

/// What each list of jobs in a report means: its kind (a field of its lines) and the text
/// after `job ID`, as administrators and the live tests grep for it.
const JOB_LINES: [(&str, &str); 10] = [
    ("violation", "requeued by the governor: a non-preemptible job ran beyond its team's quota (it waits, parked, until it fits)"),
    ("held", "held by the governor: it holds or asks for GPUs in a governed partition outside every team, or no single GPU type where GPUs are governed per type"),
    ("skipped", "left alone: it ended, was requeued or restarted between the governor's snapshot and its action"),
    ("parked", "parked by the governor: its priority class may not borrow and it does not fit its team's quota (held until it fits)"),
    ("released", "released by the governor: it now fits its team's quota"),
    ("unheld", "released by the governor: the reason it was held is gone (its account is a team again, or GPU types are no longer governed)"),
    ("lifted", "may start again: the governor lifted its requeue delay (its run was ended by a preemption or requeue)"),
    ("run_ended", "held by the governor: its run had ended by itself just before a requeue (the governor's, or Slurm's preemption) reached slurmctld, so it must not run twice (its owner may release it)"),
    ("wrong_hold", "released by the governor: accounting now records its run as killed by the requeue, so the hold placed against a second run was wrong"),
    ("unverified", "keeps Slurm's requeue delay: the governor could not tell from accounting whether its requeued run had ended by itself (the run's start unknown, or not recorded within 90 s)"),
];

/// Log what a pass changed and did to jobs; the requeues per team and reason, for the
/// metrics. What the actions on a plan did is said inside their span ([`act_span`]), within
/// the span of the pass that collected them.
pub(crate) fn log_pass(log: &DaemonLog, report: &PassReport) -> BTreeMap<(String, Requeue), u64> {
    let act = report.acted.map(|a| act_span(a.pass));
    let in_act = |f: &mut dyn FnMut()| match &act {
        Some(span) => span.in_scope(f),
        None => f(),
    };
    in_act(&mut || {
        for (team, limit) in &report.limit_updates {
            tracing::info!(target: RUN, team = %team, "team {team} GPU limit -> {limit}");
        }
    });
    for line in &report.unreadable {
        log.warn_once(&format!(
            "governor: cannot read {line}: its job is treated as never in quota"
        ));
    }
    let mut requeued = BTreeMap::new();
    in_act(&mut || requeued = log_jobs(report));
    for failure in &report.failures {
        log.warn_once(&format!("governor: {failure}"));
    }
    requeued
}

/// One line for a job the governor acted on, with its id, team (where the plan read it) and
/// the kind of action as fields.
fn job_line(report: &PassReport, id: u64, kind: &str, what: std::fmt::Arguments<'_>) {
    match report.teams.get(&id) {
        Some(team) => {
            tracing::info!(target: RUN, job = id, team = %team, kind = %kind, "job {id} {what}")
        }
        None => tracing::info!(target: RUN, job = id, kind = %kind, "job {id} {what}"),
    }
}

/// The lines of the jobs the actions requeued, held, parked or released; the requeues per
/// team and reason.
fn log_jobs(report: &PassReport) -> BTreeMap<(String, Requeue), u64> {
    let mut requeued: BTreeMap<(String, Requeue), u64> = BTreeMap::new();
    // Each job's team as the plan read it (squeue's account): the database is not asked.
    let team = |id: &u64| {
        report
            .teams
            .get(id)
            .cloned()
            .unwrap_or_else(|| UNKNOWN_TEAM.to_string())
    };
    for &id in &report.reclaimed {
        job_line(report, id, "reclaimed", format_args!(
            "requeued by the governor: an in-quota job waited over {} ms without Slurm preempting for it",
            teamshare_policy::governance::RECLAIM_FALLBACK_MS
        ));
        *requeued.entry((team(&id), Requeue::Reclaimed)).or_default() += 1;
    }
    for &id in &report.displaced {
        job_line(
            report,
            id,
            "displaced",
            format_args!("displaced by a higher class of its team"),
        );
        *requeued.entry((team(&id), Requeue::Displaced)).or_default() += 1;
    }
    for &id in &report.over_ceiling {
        job_line(report, id, "over_ceiling", format_args!(
            "requeued by the governor: its team ran beyond its ceiling (quota + borrow limit; a lowered limit is enforced on what runs)"
        ));
        *requeued
            .entry((team(&id), Requeue::OverCeiling))
            .or_default() += 1;
    }
    let lists = [
        &report.violations,
        &report.held,
        &report.skipped,
        &report.parked,
        &report.released,
        &report.unheld,
        &report.lifted,
        &report.requeue_held,
        &report.wrong_holds_released,
        &report.requeue_unverified,
    ];
    for (ids, (kind, what)) in lists.into_iter().zip(JOB_LINES) {
        for &id in ids {
            job_line(report, id, kind, format_args!("{what}"));
        }
    }
    requeued
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::governor::{pass_span, Acted};
    use crate::logging::capture;

    /// Pass 8 collected the actions on pass 7's plan: a limit set, a job displaced (its team
    /// read by the plan), a job held against a second run (not in the plan's snapshot).
    fn report() -> PassReport {
        PassReport {
            limit_updates: vec![("vision".into(), "gres/gpu=4".into())],
            displaced: vec![12],
            requeue_held: vec![13],
            teams: [(12, "vision".to_string())].into_iter().collect(),
            acted: Some(Acted {
                pass: 7,
                ..Acted::default()
            }),
            ..PassReport::default()
        }
    }

    fn logged(level: tracing::Level, report: &PassReport) -> capture::Lines {
        let (dispatch, lines) = capture::dispatch_at(level);
        tracing::dispatcher::with_default(&dispatch, || {
            let log = DaemonLog::new(RUN);
            pass_span(8).in_scope(|| log_pass(&log, report));
        });
        lines
    }

    /// Each line: the text as before, its fields, then the pass and the actions it is from,
    /// on one line each.
    #[test]
    fn an_action_line_has_its_fields_and_spans_on_its_line() {
        let lines = logged(tracing::Level::INFO, &report());
        let all = lines.lines();
        assert_eq!(all.len(), 3, "{all:#?}");
        for l in &all {
            let (ts, rest) = l.split_once(' ').unwrap();
            assert!(ts.ends_with('Z') && ts.len() == 20, "{l}");
            assert!(rest.starts_with(" INFO accountd run: "), "{l}");
        }
        let said = capture::said(&lines, RUN);
        assert_eq!(
            said[..2],
            [
                "team vision GPU limit -> gres/gpu=4 team=vision pass{pass=8}:act{pass=7}",
                "job 12 displaced by a higher class of its team job=12 team=vision kind=displaced pass{pass=8}:act{pass=7}",
            ]
        );
    }

    /// The text administrators and the live tests grep for is unchanged; the fields follow
    /// it.
    #[test]
    fn the_text_of_a_line_is_as_before() {
        let said = capture::said(&logged(tracing::Level::INFO, &report()), RUN);
        assert_eq!(
            said[2],
            "job 13 held by the governor: its run had ended by itself just before a requeue \
             (the governor's, or Slurm's preemption) reached slurmctld, so it must not run twice \
             (its owner may release it) job=13 kind=run_ended pass{pass=8}:act{pass=7}"
        );
    }

    /// A pass without actions collected says its own lines in the pass alone; at info a
    /// pass that did nothing says nothing.
    #[test]
    fn a_pass_without_actions_is_not_in_an_act_span() {
        let quiet = logged(tracing::Level::INFO, &PassReport::default());
        assert!(quiet.lines().is_empty(), "{:?}", quiet.lines());
        let report = PassReport {
            failures: vec!["squeue: exit 1".into()],
            ..PassReport::default()
        };
        let said = capture::said(&logged(tracing::Level::INFO, &report), RUN);
        assert_eq!(said, ["warning: governor: squeue: exit 1 pass{pass=8}"]);
    }

    /// The requeues are counted per team and reason whatever the level written.
    #[test]
    fn requeues_are_counted_at_any_level() {
        let (dispatch, _) = capture::dispatch_at(tracing::Level::ERROR);
        let counted = tracing::dispatcher::with_default(&dispatch, || {
            log_pass(&DaemonLog::new(RUN), &report())
        });
        assert_eq!(
            counted,
            [(("vision".to_string(), Requeue::Displaced), 1)]
                .into_iter()
                .collect()
        );
    }
}
