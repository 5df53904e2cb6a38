//! What the daemon does with a governor pass's report: the log, the metrics, and what goes to
//! the database through the ingest thread (its only writer): the capacity the pass measured
//! and the idle policy's steps.

use std::collections::BTreeMap;
use std::sync::mpsc::Sender;

use super::pass_log::{count_limits, count_requeued, log_pass, Requeue};
use super::{Shared, STEP_GOVERN};
use crate::governor::{GovernError, PassReport};
use crate::metrics::LiveTeam;
use crate::period;
use crate::store::{CapacitySample, IdleStepRow};

/// What the governor's thread hands the ingest thread to write.
pub(super) enum ForStore {
    Capacity(CapacitySample),
    IdleSteps(Vec<IdleStepRow>),
}

/// What the daemon does with a pass: log it, feed the metrics and the capacity samples.
pub(super) fn govern(
    shared: &Shared,
    result: Result<PassReport, GovernError>,
    store_tx: &Sender<ForStore>,
) {
    let report = match result {
        Ok(r) => r,
        Err(e) => return shared.step_result(STEP_GOVERN, Err(e.to_string())),
    };
    let requeued = log_pass(&shared.log, &report);
    if report.quiet {
        // No read, no plan: what the actions it collected did, and that the governor lives.
        let now = period::now();
        shared.exporter.update_live(|live| {
            live.governor_last_pass = Some(now);
            live.governor_quiet_passes += 1;
            count_acted(live, &report);
            count_requeued(live, requeued);
            count_limits(live, &report);
        });
        shared.exporter.update_counters(|c| count_holds(c, &report));
        shared
            .exporter
            .update_idle(|f| count_idle_steps(f, &report));
        shared.step_result(STEP_GOVERN, Ok(()));
        send_idle_steps(store_tx, &report);
        return;
    }
    if report.settled {
        // A replaced or stopped governor's last actions: counted, but no pass of its own.
        shared.exporter.update_live(|live| {
            count_requeued(live, requeued);
            count_limits(live, &report);
        });
        shared.exporter.update_counters(|c| {
            count_holds(c, &report);
        });
        shared
            .exporter
            .update_idle(|f| count_idle_steps(f, &report));
        send_idle_steps(store_tx, &report);
        return;
    }
    let now = period::now();
    let capacity_changed = shared.exporter.live().capacity != Some(report.capacity);
    publish_pass(shared, &report, requeued, now);
    shared.exporter.update_counters(|c| {
        c.governor_unreadable_jobs += u64::try_from(report.unreadable.len()).unwrap_or(u64::MAX);
        c.governor_state_write_failures += u64::from(report.state_write_failed);
        count_holds(c, &report);
    });
    shared.exporter.update_idle(|f| {
        f.now.clone_from(&report.idle_now);
        count_idle_steps(f, &report);
    });
    shared.step_result(STEP_GOVERN, Ok(()));
    send_idle_steps(store_tx, &report);
    // What the pass read: the ingest thread records it, and runs no second sinfo. Governed
    // shards are shares of GPUs recorded already, not capacity of their own.
    let sample = CapacitySample {
        ts: now,
        gpus: report.capacity,
        by_type: report
            .capacity_by_type
            .into_iter()
            .filter(|(k, _)| k != teamshare_config::SHARE_TYPE)
            .collect(),
    };
    *shared
        .governed_capacity
        .lock()
        .unwrap_or_else(|e| e.into_inner()) = Some(sample.clone());
    // A capacity change is recorded within one pass, not one ingest interval.
    if capacity_changed {
        let _ = store_tx.send(ForStore::Capacity(sample));
    }
}

/// The idle policy's steps the actions took, for the database (`report users`).
fn send_idle_steps(store_tx: &Sender<ForStore>, report: &PassReport) {
    if report.idle_steps.is_empty() {
        return;
    }
    let rows = report
        .idle_steps
        .iter()
        .map(|e| IdleStepRow {
            ts: e.decided_at,
            job_id_raw: e.job,
            run_start: e.start,
            team: e.team.clone(),
            user: e.user.clone(),
            step: e.step.name().to_string(),
        })
        .collect();
    let _ = store_tx.send(ForStore::IdleSteps(rows));
}

/// The idle policy's steps the actions took, per team and step.
fn count_idle_steps(f: &mut crate::metrics::IdleFigures, report: &PassReport) {
    for e in &report.idle_steps {
        let key = (e.team.clone(), e.step.name().to_string());
        *f.policy_steps.entry(key).or_default() += 1;
    }
}

/// The holds against a second run a pass placed, and those it released as wrong.
fn count_holds(c: &mut crate::metrics::Counters, report: &PassReport) {
    let n = |v: &Vec<u64>| u64::try_from(v.len()).unwrap_or(u64::MAX);
    c.governor_run_ended_holds += n(&report.requeue_held);
    c.governor_wrong_holds_released += n(&report.wrong_holds_released);
}

/// The pass in the live metrics: its timing and Slurm calls, its actions', the capacity, the
/// requeues and the teams' limits and GPUs in use.
fn publish_pass(
    shared: &Shared,
    report: &PassReport,
    requeued: BTreeMap<(String, Requeue), u64>,
    now: period::UnixSeconds,
) {
    // The plan's limits and the GPUs in use, as the pass published them for the plugin.
    shared.exporter.update_live(|live| {
        live.governor_last_pass = Some(now);
        live.governor_passes += 1;
        live.governor_pass_seconds += report.duration.as_secs_f64();
        live.governor_slurm_calls += report.slurm_calls;
        live.governor_last_pass_seconds = Some(report.duration.as_secs_f64());
        live.governor_last_pass_slurm_calls = Some(report.slurm_calls);
        count_acted(live, report);
        // With the pass's own figures, so that a scrape never sees them without it.
        live.capacity = Some(report.capacity);
        count_limits(live, report);
        count_requeued(live, requeued);
        if let Some(state) = &report.state {
            live.teams = state
                .teams
                .iter()
                .map(|(team, t)| {
                    (
                        team.clone(),
                        LiveTeam {
                            gpu_limit: t.gpu_limit,
                            running_gpus: t.running_gpus,
                            running_by_type: state
                                .pools
                                .iter()
                                .filter_map(|(k, p)| {
                                    let n = p.teams.get(team)?.running_gpus;
                                    (n > 0).then(|| (k.clone(), n))
                                })
                                .collect(),
                        },
                    )
                })
                .collect();
        }
    });
}

/// The figures of the actions a pass collected, if it did.
fn count_acted(live: &mut crate::metrics::Live, report: &PassReport) {
    if let Some(acted) = report.acted {
        live.governor_acts += 1;
        live.governor_act_seconds += acted.duration.as_secs_f64();
        live.governor_act_slurm_calls += acted.slurm_calls;
        live.governor_act_processes += acted.processes;
        live.governor_last_act_seconds = Some(acted.duration.as_secs_f64());
        live.governor_last_act_slurm_calls = Some(acted.slurm_calls);
    }
}
