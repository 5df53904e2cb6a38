//! GPUs held but idle (issue 29): the jobs idle now and the idle policy's steps, from the
//! governor's passes (kept apart from [`super::Live`], whose fields tests build whole).

use std::collections::BTreeMap;

use teamshare_config::Config;

use super::{finish, Exposition, Kind};

/// What the governor's passes said of idle GPUs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct IdleFigures {
    /// Per team, from the last pass: the running jobs whose GPUs were below the idle
    /// threshold in every sample of the whole `idle_window`, and their GPUs.
    pub now: BTreeMap<String, (u32, u32)>,
    /// Per team and step (`notice`, `requeue`, `cancel`, `reclaim-first`, `cleared`): the
    /// idle policy's steps acted on since the daemon started.
    pub policy_steps: BTreeMap<(String, String), u64>,
}

/// The steps a team's series is always exposed for (at 0: "none yet").
const STEPS: &[&str] = &["notice", "reclaim-first", "requeue", "cancel", "cleared"];

/// The exposition of `figures`: every configured team has its series, at 0 where nothing is
/// idle; a team no longer configured keeps its counters until the daemon restarts.
pub fn render_idle(config: &Config, figures: &IdleFigures) -> String {
    let e = Exposition::new();
    let teams: Vec<&str> = config.teams.iter().map(|t| t.name.as_str()).collect();
    let built = e
        .family(
            "teamshare_idle_jobs",
            Kind::Gauge,
            "Running jobs whose GPUs were below [accountd] idle_threshold_percent in every NVML sample of the whole [governance] idle_window, per team (jobs without samples are unknown, never counted).",
            &["team"],
        )
        .and_then(|jobs| {
            let gpus = e.family(
                "teamshare_idle_gpus",
                Kind::Gauge,
                "GPUs held by the jobs of teamshare_idle_jobs, per team.",
                &["team"],
            )?;
            for team in &teams {
                let (j, g) = figures.now.get(*team).copied().unwrap_or_default();
                jobs.sample(&[team], f64::from(j));
                gpus.sample(&[team], f64::from(g));
            }
            e.family(
                "teamshare_idle_policy_steps_total",
                Kind::Counter,
                "The idle policy's steps acted on since the daemon started, per team: notice (AdminComment and hook), reclaim-first, requeue, cancel, cleared (the job computed again or its samples stopped).",
                &["team", "step"],
            )
        })
        .and_then(|steps| {
            for team in &teams {
                for step in STEPS {
                    steps.sample(&[team, step], 0.0);
                }
            }
            for ((team, step), n) in &figures.policy_steps {
                steps.sample(&[team, step], *n as f64);
            }
            e.text()
        });
    finish(built)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn idle_jobs_and_policy_steps_are_exposed_per_team() {
        let config = teamshare_config::parse(
            "[cluster]\nname = \"c\"\n[[team]]\nname = \"a\"\nquota = 4\n[[team]]\nname = \"b\"\nquota = 4\n",
            "t.toml",
        )
        .expect("valid");
        let figures = IdleFigures {
            now: BTreeMap::from([("a".to_string(), (2, 5))]),
            policy_steps: BTreeMap::from([(("a".to_string(), "requeue".to_string()), 3)]),
        };
        let text = render_idle(&config, &figures);
        for line in [
            "teamshare_idle_jobs{team=\"a\"} 2\n",
            "teamshare_idle_gpus{team=\"a\"} 5\n",
            "teamshare_idle_jobs{team=\"b\"} 0\n",
            "teamshare_idle_policy_steps_total{step=\"requeue\",team=\"a\"} 3\n",
            "teamshare_idle_policy_steps_total{step=\"notice\",team=\"b\"} 0\n",
            "# TYPE teamshare_idle_policy_steps_total counter\n",
        ] {
            assert!(text.contains(line), "{line} in\n{text}");
        }
    }
}
