//! What the governor says of its passes beyond what they did ([`crate::logging`]): the spans of
//! a pass and of the actions on its plan, and at debug level (`ACCOUNTD_LOG=debug`) each plan's
//! decisions with their reasons and how long a pass took. Nothing here is computed when debug
//! is off.

use std::collections::BTreeMap;
use std::time::Duration;

use teamshare_config::Config;
use teamshare_policy::governance::{ClusterJob, Plan, TeamState};
use tracing::Level;

pub(super) use crate::logging::ms;
use crate::logging::RUN;

/// The team named where a job is not in the pass's snapshot (never expected: a plan names only
/// the jobs it read).
const UNKNOWN: &str = "(unknown)";

/// The span of the governor's pass number `pass` (counted from 1 where the governor loop
/// starts, across reloads): its reading, plan and publication, and what the daemon logs of it.
pub fn pass_span(pass: u64) -> tracing::Span {
    tracing::info_span!(target: RUN, "pass", pass)
}

/// The span of the actions on the plan of pass `pass`: around them on the actuator's thread,
/// and around what the daemon logs of them when a later pass collects them.
pub fn act_span(pass: u64) -> tracing::Span {
    tracing::info_span!(target: RUN, "act", pass)
}

/// How long the parts of a pass took (debug).
#[derive(Debug, Clone, Copy)]
pub(super) struct PassTimes {
    /// Reading Slurm (squeue and sinfo, or libslurm).
    pub(super) read: Duration,
    /// Planning (`teamshare_policy::governance::plan`).
    pub(super) plan: Duration,
    /// Writing the state file.
    pub(super) publish: Duration,
}

/// Say how long a pass took to read, plan and publish, and what it read (debug).
pub(super) fn pass_times(times: PassTimes, jobs: usize, capacity: u32, slurm_calls: u64) {
    tracing::debug!(
        target: RUN,
        jobs,
        capacity,
        slurm_calls,
        read_ms = ms(times.read),
        plan_ms = ms(times.plan),
        publish_ms = ms(times.publish),
        "pass: Slurm read, plan made, state published"
    );
}

/// Why a plan names a job, by the list it is in: the list's kind (a field) and the reason.
fn decisions(plan: &Plan) -> [(&[u64], &'static str, &'static str); 8] {
    [
        (&plan.displace, "displace", "to requeue: a higher class of its team waits for its GPUs"),
        (&plan.reclaim, "reclaim", "to requeue: it runs on borrowed GPUs and an in-quota job waited past the reclaim fallback without Slurm preempting for it"),
        (&plan.violations, "violation", "to requeue and park: its class may not borrow and it runs beyond its team's quota"),
        (&plan.over_ceiling, "over_ceiling", "to requeue: its team runs beyond its ceiling (quota + borrow limit), and it is among the team's lowest class and latest started"),
        (&plan.outside, "outside", "to hold: it holds or asks for GPUs in a governed partition outside every team"),
        (&plan.untyped, "untyped", "to hold: it asks for untyped GPUs or several types where GPUs are governed per type"),
        (&plan.park, "park", "to park: its class may not borrow and it does not fit its team's quota"),
        (&plan.release, "release", "to release from parking: it now fits its team's quota"),
    ]
}

/// Each decision of a plan with its reason, the borrowed jobs Slurm may preempt first and why,
/// and each team GPU limit the plan moves from `before` (the previous plan's), with a summary
/// (debug: without it, nothing is looked at).
pub(super) fn debug_plan(
    plan: &Plan,
    jobs: &[ClusterJob],
    config: &Config,
    before: &BTreeMap<String, u32>,
) {
    if !tracing::enabled!(target: RUN, Level::DEBUG) {
        return;
    }
    let by_id: BTreeMap<u64, &ClusterJob> = jobs.iter().map(|j| (j.id, j)).collect();
    for (ids, kind, why) in decisions(plan) {
        for id in ids {
            let (team, gpus) = by_id
                .get(id)
                .map_or((UNKNOWN, 0), |j| (j.team.as_str(), j.gpus));
            tracing::debug!(target: RUN, job = id, team = %team, gpus, kind = %kind, "plan: job {id} {why}");
        }
    }
    let said = debug_victims(plan);
    for (team, &to) in &plan.gpu_limits {
        if before.get(team) != Some(&to) {
            debug_limit(plan, config, team, before.get(team).copied(), to);
        }
    }
    tracing::debug!(
        target: RUN,
        priorities = plan.priorities.len(),
        victims = plan.state.victims.len(),
        victims_said = said,
        pending_in_quota_gpus = plan.state.pending_in_quota_gpus,
        free_gpus = plan.state.free_gpus,
        displace = plan.displace.len(),
        reclaim = plan.reclaim.len(),
        violations = plan.violations.len(),
        over_ceiling = plan.over_ceiling.len(),
        hold = plan.outside.len() + plan.untyped.len(),
        park = plan.park.len(),
        release = plan.release.len(),
        "plan: made"
    );
}

/// The victims (running borrowed jobs, in the order Slurm may preempt them) that the pending
/// in-quota jobs may take, each with why: the first ones, as many GPUs as those jobs ask for
/// (those Slurm's PreemptExemptTime protects are said and not counted). How many were said.
fn debug_victims(plan: &Plan) -> usize {
    let state = &plan.state;
    let wanted = state.pending_in_quota_gpus.max(state.reclaim_gpus);
    let mut gpus_left = wanted;
    let mut said = 0;
    for (rank, v) in state.victims.iter().enumerate() {
        if gpus_left == 0 {
            break;
        }
        said += 1;
        let (id, rank) = (v.job_id, rank + 1);
        let exempt = if v.exempt_until > state.generated_at {
            format!(
                "; Slurm's PreemptExemptTime protects it until {}",
                crate::period::format_rfc3339(v.exempt_until)
            )
        } else {
            gpus_left = gpus_left.saturating_sub(v.gpus.max(1));
            String::new()
        };
        tracing::debug!(
            target: RUN,
            job = id,
            team = %v.team,
            gpus = v.gpus,
            rank,
            level = v.level,
            "plan: job {id} is victim {rank}: it runs on GPUs its team borrowed, among the first that pending in-quota jobs ({wanted} GPUs) may take, so Slurm may preempt it for them{exempt}"
        );
    }
    said
}

/// A team GPU limit the plan moves, with why (rule 1 and 4: its quota, or what it runs when
/// more, plus what it may borrow, never above its ceiling).
fn debug_limit(plan: &Plan, config: &Config, team: &str, from: Option<u32>, to: u32) {
    let running = plan
        .state
        .teams
        .get(team)
        .map_or(0, |t: &TeamState| t.running_gpus);
    let quota = config.team(team).map_or(0, |t| t.quota.total);
    let ceiling = config
        .team(team)
        .and_then(|t| t.borrow_limit)
        .map(|b| quota.saturating_add(b));
    let base = quota.max(running);
    let why = if to < base {
        format!("its ceiling (quota + borrow limit) is below what it runs ({running})")
    } else if to == base {
        format!("its quota ({quota}), or what it runs when more ({running}): nothing to borrow")
    } else if ceiling == Some(to) {
        format!("its quota, or what it runs when more ({base}), plus what it may borrow, up to its ceiling")
    } else {
        format!(
            "its quota, or what it runs when more ({base}), plus {} GPUs it may borrow",
            to - base
        )
    };
    let from_text = from.map_or_else(|| "(none)".to_string(), |f| f.to_string());
    tracing::debug!(
        target: RUN,
        team = %team,
        from = %from_text,
        to,
        quota,
        running_gpus = running,
        "plan: team {team} GPU limit {from_text} -> {to}: {why}"
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::logging::capture;
    use crate::test_support::{gpus, job, plan};
    use teamshare_policy::governance::Phase;

    const CONFIG: &str = "[cluster]\nname = \"t\"\npartitions = [\"gpu\"]\n\n\
        [[team]]\nname = \"agents\"\nquota = 2\nborrow_limit = 2\n\n\
        [[team]]\nname = \"training\"\nquota = 4\nborrow_limit = 4\n\n\
        [governance]\nmin_runtime_before_reclaim = \"0s\"\n";

    /// training runs 6 on its quota of 4 (2 borrowed); agents waits for 2 of its quota; a job
    /// of an account outside every team waits too.
    fn planned() -> (Config, Vec<ClusterJob>, Plan) {
        let config = teamshare_config::parse(CONFIG, "t.toml").unwrap();
        let mut jobs: Vec<ClusterJob> = (1..=6)
            .map(|i| job(i, "training", Phase::Running, 100 + i as i64))
            .collect();
        jobs.push(job(20, "agents", Phase::Pending, 1_000));
        jobs.push(job(21, "agents", Phase::Pending, 1_000));
        jobs.push(job(30, "nobody", Phase::Pending, 1_000));
        let plan = plan(&config, &gpus(6), &jobs, 1_000);
        (config, jobs, plan)
    }

    /// What `debug_plan` says of `plan` under a subscriber at `level`, inside pass 3.
    fn said_at(level: Level, before: &BTreeMap<String, u32>) -> Vec<String> {
        let (config, jobs, plan) = planned();
        let (dispatch, lines) = capture::dispatch_at(level);
        tracing::dispatcher::with_default(&dispatch, || {
            pass_span(3).in_scope(|| debug_plan(&plan, &jobs, &config, before));
        });
        capture::said(&lines, RUN)
    }

    /// At debug, each decision with its reason and its fields, inside the pass; at info (the
    /// default), nothing.
    #[test]
    fn a_plan_says_its_decisions_at_debug_only() {
        assert_eq!(said_at(Level::INFO, &BTreeMap::new()), Vec::<String>::new());
        let said = said_at(Level::DEBUG, &BTreeMap::new());
        let has = |text: &str| said.iter().any(|l| l == text);
        assert!(
            has("plan: job 30 to hold: it holds or asks for GPUs in a governed partition outside every team job=30 team=nobody gpus=1 kind=outside pass{pass=3}"),
            "{said:#?}"
        );
        // training's two borrowed jobs, newest first: the two GPUs agents waits for.
        for (rank, id) in [(1, 6), (2, 5)] {
            let start = format!("plan: job {id} is victim {rank}: it runs on GPUs its team borrowed, among the first that pending in-quota jobs (2 GPUs) may take");
            assert!(
                said.iter().any(|l| l.starts_with(&start)
                    && l.contains(&format!(" job={id} team=training gpus=1 rank={rank} "))
                    && l.ends_with(" pass{pass=3}")),
                "{said:#?}"
            );
        }
        assert!(
            has("plan: team training GPU limit (none) -> 6: its quota (4), or what it runs when more (6): nothing to borrow team=training from=(none) to=6 quota=4 running_gpus=6 pass{pass=3}"),
            "{said:#?}"
        );
        assert!(
            said.last()
                .unwrap()
                .starts_with("plan: made priorities=8 victims=2 "),
            "{said:#?}"
        );
    }

    /// A limit is said when the plan moves it from the previous plan's, not at every pass.
    #[test]
    fn only_the_limits_a_plan_moves_are_said() {
        let before: BTreeMap<String, u32> =
            [("agents".to_string(), 2), ("training".to_string(), 5)]
                .into_iter()
                .collect();
        let limits: Vec<String> = said_at(Level::DEBUG, &before)
            .into_iter()
            .filter(|l| l.contains("GPU limit"))
            .collect();
        assert_eq!(limits.len(), 1, "{limits:#?}");
        assert!(
            limits[0].starts_with("plan: team training GPU limit 5 -> 6: "),
            "{limits:#?}"
        );
    }

    #[test]
    fn a_pass_says_how_long_it_took_at_debug_only() {
        let times = PassTimes {
            read: Duration::from_micros(12_345),
            plan: Duration::from_micros(400),
            publish: Duration::from_micros(200),
        };
        for (level, expected) in [(Level::INFO, 0), (Level::DEBUG, 1)] {
            let (dispatch, lines) = capture::dispatch_at(level);
            tracing::dispatcher::with_default(&dispatch, || pass_times(times, 9, 8, 2));
            let said = capture::said(&lines, RUN);
            assert_eq!(said.len(), expected, "{said:?}");
            if expected == 1 {
                assert_eq!(
                    said[0],
                    "pass: Slurm read, plan made, state published jobs=9 capacity=8 slurm_calls=2 read_ms=12.3 plan_ms=0.4 publish_ms=0.2"
                );
            }
        }
    }
}
