//! The idle policy's decisions acted on (`governor/idle_policy.rs`): the job's AdminComment
//! (what its owner sees in `scontrol show job`, `squeue -O admin_comment` and `accountd status
//! --user`), the site's hook, and the requeue or cancellation. Each only for the run the
//! samples were of, and each logged with the samples that justified it.

use teamshare_config::IdleAction;

use super::super::idle_policy::{IdleEvent, IdleStep};
use super::*;

/// How the governor's idle notes start in a job's AdminComment; a comment that starts
/// otherwise (an administrator's) is never overwritten.
pub const IDLE_MARK: &str = "teamshare: idle: ";

/// The hook gets this long before it is killed.
const HOOK_TIMEOUT: Duration = Duration::from_secs(10);

/// What Slurm says of a running job the policy decided on.
type Current = RunningJob;

impl Actuator {
    /// Act on the idle policy's decisions; what was done goes in the report.
    pub(super) fn act_on_idle(
        &mut self,
        events: &[IdleEvent],
        addresses: &Addresses,
        report: &mut PassReport,
    ) -> Result<(), GovernError> {
        if events.is_empty() {
            return Ok(());
        }
        let names: Vec<(u64, String)> = events
            .iter()
            .filter_map(|e| Some((e.job, address(addresses, e.job)?)))
            .collect();
        let current = self.writer.running(&names)?;
        for e in events {
            let Some(now) = current.get(&e.job).filter(|c| c.start == Some(e.start)) else {
                tracing::info!(job = e.job, step = ?e.step, "idle policy: job {} left alone: it ended, was requeued or restarted since the samples were read", e.job);
                continue;
            };
            let Some(name) = address(addresses, e.job) else {
                continue;
            };
            match self.idle_step(e, &name, now) {
                Ok(()) => report.idle_steps.push(IdleEvent {
                    user: now.user.clone(),
                    ..e.clone()
                }),
                Err(failure) => report.failures.push(failure),
            }
        }
        Ok(())
    }

    fn idle_step(&mut self, e: &IdleEvent, name: &str, now: &Current) -> Result<(), String> {
        let threshold = self.config.accountd.idle_threshold_percent;
        let action = self
            .config
            .idle_policy
            .as_ref()
            .map_or(IdleAction::Notice, |p| p.action);
        let ours = now.admin_comment.is_empty() || now.admin_comment.starts_with(IDLE_MARK);
        let comment = match e.step {
            IdleStep::Cleared => (ours && !now.admin_comment.is_empty()).then(String::new),
            _ => ours.then(|| format!("{IDLE_MARK}{}", note(e, threshold, action))),
        };
        if let Some(text) = comment {
            let update = JobUpdate {
                admin_comment: Some(text),
                ..JobUpdate::default()
            };
            let names = [name.to_string()];
            match self.writer.update(&names, &update) {
                Ok(true) => {}
                Ok(false) => return Err(format!("job {name}: Slurm refused its AdminComment")),
                Err(e) => return Err(e.to_string()),
            }
        }
        log(e, now, threshold, ours);
        if let IdleStep::Act(action @ (IdleAction::Requeue | IdleAction::Cancel)) = e.step {
            self.end_idle_run(e, name, now, action)?;
        }
        if e.step != IdleStep::Cleared {
            self.run_hook(e, now);
        }
        Ok(())
    }

    /// Requeue (a batch job) or cancel it; a requeue is checked like the governor's others
    /// (its run may have ended by itself a moment before).
    fn end_idle_run(
        &mut self,
        e: &IdleEvent,
        name: &str,
        now: &Current,
        action: IdleAction,
    ) -> Result<(), String> {
        let requeue = action == IdleAction::Requeue && now.batch;
        let result = if requeue {
            self.writer.requeue(name, false)
        } else {
            self.writer.cancel_running(name)
        };
        result.map_err(|err| err.to_string())?;
        if requeue {
            self.checks
                .add(e.job, name.to_string(), Some(e.start), Instant::now());
        }
        Ok(())
    }

    /// The site's hook, with the job's facts as `key=value` arguments; its failure is logged,
    /// never retried (the AdminComment already says it).
    fn run_hook(&self, e: &IdleEvent, now: &Current) {
        let Some(hook) = &self
            .config
            .idle_policy
            .as_ref()
            .and_then(|p| p.hook.clone())
        else {
            return;
        };
        let cmd = SlurmCommand::new(
            &hook.to_string_lossy(),
            hook_args(e, &now.user),
            HOOK_TIMEOUT,
        );
        if let Err(err) = cmd.run() {
            tracing::warn!(job = e.job, "idle policy: the hook failed: {err}");
        }
    }
}

/// The hook's arguments: `event=notice|requeue|cancel|reclaim-first`, then the job's facts.
pub fn hook_args(e: &IdleEvent, user: &str) -> Vec<String> {
    let mut args = vec![
        format!("event={}", e.step.name()),
        format!("job={}", e.job),
        format!("user={user}"),
        format!("team={}", e.team),
        format!("class={}", e.class),
        format!("gpus={}", e.gpus),
        format!("nodes={}", e.nodes.join(",")),
        format!("idle_seconds={}", e.window.as_secs()),
        format!("samples={}", e.samples.samples),
    ];
    if let Some(at) = e.act_at {
        args.push(format!("act_at={}", utc(at)));
    }
    args
}

/// The AdminComment after the mark: what was seen, and what follows (`action`, the policy's).
fn note(e: &IdleEvent, threshold: f64, action: IdleAction) -> String {
    let seen = format!(
        "its GPUs were below {threshold}% in every sample of the last {}",
        teamshare_config::format_duration(e.window)
    );
    match (e.step, e.act_at) {
        (IdleStep::Act(IdleAction::ReclaimFirst), _) => {
            format!("{seen}: its GPUs go first when a team reclaims its quota")
        }
        (IdleStep::Act(a), _) => format!("{} at {}: {seen}", past(a), utc(e.decided_at)),
        (_, Some(at)) => format!("{seen}; {} at {} if they stay idle", past(action), utc(at)),
        _ => seen,
    }
}

fn past(a: IdleAction) -> &'static str {
    match a {
        IdleAction::Notice => "noticed",
        IdleAction::ReclaimFirst => "first to be reclaimed",
        IdleAction::Requeue => "requeued",
        IdleAction::Cancel => "cancelled",
    }
}

fn utc(t: i64) -> String {
    chrono::DateTime::from_timestamp(t, 0)
        .map(|d| d.format("%Y-%m-%dT%H:%M:%SZ").to_string())
        .unwrap_or_else(|| t.to_string())
}

fn log(e: &IdleEvent, now: &Current, threshold: f64, ours: bool) {
    tracing::info!(
        job = e.job,
        user = %now.user,
        team = %e.team,
        gpus = e.gpus,
        step = ?e.step,
        window = %teamshare_config::format_duration(e.window),
        samples = e.samples.samples,
        sampled_gpu_s = e.samples.sampled_ms / 1000,
        idle_gpu_s = e.samples.idle_ms / 1000,
        threshold,
        admin_comment_kept = !ours,
        "idle policy: job {} {}",
        e.job,
        match e.step {
            IdleStep::Notice => "noticed: its GPUs are idle",
            IdleStep::Act(a) => past(a),
            IdleStep::Cleared => "computes again (or its samples stopped): the notice is taken back",
        }
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::governor::SampledWindow;

    fn event(step: IdleStep, act_at: Option<i64>) -> IdleEvent {
        IdleEvent {
            step,
            job: 42,
            start: 1_796_000_000,
            team: "vision".into(),
            user: String::new(),
            class: String::new(),
            gpus: 2,
            nodes: vec!["n1".into(), "n2".into()],
            window: Duration::from_secs(3600),
            samples: SampledWindow {
                samples: 720,
                sampled_ms: 7_200_000,
                idle_ms: 7_200_000,
            },
            decided_at: 1_796_003_600,
            act_at,
        }
    }

    #[test]
    fn the_owner_reads_what_was_seen_and_what_follows() {
        let notice = event(IdleStep::Notice, Some(1_796_005_400));
        assert_eq!(
            note(&notice, 5.0, IdleAction::Requeue),
            "its GPUs were below 5% in every sample of the last 1h; requeued at 2026-11-30T02:23:20Z if they stay idle"
        );
        let notice_only = event(IdleStep::Notice, None);
        assert_eq!(
            note(&notice_only, 5.0, IdleAction::Notice),
            "its GPUs were below 5% in every sample of the last 1h"
        );
        let act = event(IdleStep::Act(IdleAction::Cancel), None);
        assert_eq!(
            note(&act, 2.5, IdleAction::Cancel),
            "cancelled at 2026-11-30T01:53:20Z: its GPUs were below 2.5% in every sample of the last 1h"
        );
        assert_eq!(
            hook_args(&notice, "alice"),
            [
                "event=notice",
                "job=42",
                "user=alice",
                "team=vision",
                "class=",
                "gpus=2",
                "nodes=n1,n2",
                "idle_seconds=3600",
                "samples=720",
                "act_at=2026-11-30T02:23:20Z"
            ]
        );
        assert_eq!(hook_args(&act, "alice")[0], "event=cancel");
    }
}
