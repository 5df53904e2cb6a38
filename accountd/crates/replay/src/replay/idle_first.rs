//! What idle-first reclaim would have saved (issue 29): the baseline simulated twice, with
//! rule 3's order as it is today and with `idle_first_reclaim = true`, everything else the
//! same, and the work each run of the two throws away by preemption.
//!
//! - **Lost work** of a preempted run: its GPU-time since its last checkpoint (all of it
//!   without `--checkpoint`: what "lost GPU-h" counts), less the GPU-time its job's samples
//!   show idle in that span, since an idle GPU did no work to lose. Per team (the preempted
//!   job's), then the cluster.
//! - **Saved**: today's order's lost work minus idle-first's; negative for a team that would
//!   lose more.
//! - **Simulated against simulated.** The observed history is never one side: its preemptions
//!   are Slurm's under the settings of the time, not the model's.
//! - **No samples, no figure.** Without GPU samples ([`super::Trace::activity`]) no job's
//!   idleness is known: the figure is not computed, and the output says so, never 0.

use std::collections::BTreeMap;

use serde::Serialize;
use teamshare_config::Config;

use super::metrics::CLUSTER;
use super::{Outcome, Trace};

/// The figure, or why there is none.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum IdleFirst {
    /// The history has no GPU samples: the saving cannot be computed.
    NoSamples {
        /// The candidate it would have been computed for.
        candidate: String,
        /// Why, in words.
        reason: String,
    },
    Computed(Saving),
}

/// The baseline's lost work with today's order and with idle-first, per team.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Saving {
    /// The candidate simulated twice.
    pub candidate: String,
    /// Every team, then the cluster ([`CLUSTER`]).
    pub rows: Vec<SavingRow>,
}

/// One team's lost work under each order, GPU-hours.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SavingRow {
    pub team: String,
    pub today_lost_gpu_hours: f64,
    pub idle_first_lost_gpu_hours: f64,
    /// Today's minus idle-first's.
    pub saved_gpu_hours: f64,
}

/// Work lost to preemptions per team, GPU-milliseconds.
pub type LostWork = BTreeMap<String, i64>;

const MS_PER_HOUR: f64 = 3_600_000.0;

/// The work `outcome`'s preemptions threw away, per team of `trace`'s jobs (see the module).
pub fn lost_work(trace: &Trace, outcome: &Outcome) -> LostWork {
    let mut out = LostWork::new();
    for o in &outcome.jobs {
        let Some(job) = trace.jobs.get(o.job) else {
            continue;
        };
        let lost = o
            .lost_gpu_secs
            .saturating_mul(1000)
            .saturating_sub(o.lost_idle_gpu_ms)
            .max(0);
        if lost > 0 {
            *out.entry(job.team.clone()).or_default() += lost;
        }
    }
    out
}

/// `config` with rule 3's idle-first order on or off, nothing else changed.
pub fn with_idle_first(config: &Config, on: bool) -> Config {
    let mut c = config.clone();
    c.governance.idle_first_reclaim = on;
    c
}

/// The figure of a history without samples, for `candidate`.
pub fn no_samples(candidate: &str, trace: &Trace) -> IdleFirst {
    IdleFirst::NoSamples {
        candidate: candidate.to_string(),
        reason: format!(
            "{} holds no GPU sample of the period's jobs, so no job's idleness is known",
            trace.source
        ),
    }
}

/// `candidate`'s saving: per team of `teams` (in that order), then the cluster.
pub fn saving<'t>(
    candidate: &str,
    teams: impl Iterator<Item = &'t str>,
    today: &LostWork,
    idle_first: &LostWork,
) -> Saving {
    let row = |team: &str, today_ms: i64, idle_first_ms: i64| SavingRow {
        team: team.to_string(),
        today_lost_gpu_hours: today_ms as f64 / MS_PER_HOUR,
        idle_first_lost_gpu_hours: idle_first_ms as f64 / MS_PER_HOUR,
        saved_gpu_hours: (today_ms - idle_first_ms) as f64 / MS_PER_HOUR,
    };
    let of = |w: &LostWork, team: &str| w.get(team).copied().unwrap_or(0);
    let mut rows: Vec<SavingRow> = teams
        .filter(|t| *t != CLUSTER)
        .map(|t| row(t, of(today, t), of(idle_first, t)))
        .collect();
    rows.push(row(
        CLUSTER,
        today.values().sum(),
        idle_first.values().sum(),
    ));
    Saving {
        candidate: candidate.to_string(),
        rows,
    }
}

impl IdleFirst {
    /// The sentence that sums it up.
    pub fn sentence(&self) -> String {
        match self {
            IdleFirst::NoSamples { candidate, reason } => format!(
                "idle-first reclaim under {candidate}: no samples ({reason}): the GPU-hours it would have saved cannot be computed"
            ),
            IdleFirst::Computed(s) => {
                let c = s.rows.last();
                let (today, first, saved) = c.map_or((0.0, 0.0, 0.0), |c| {
                    (
                        c.today_lost_gpu_hours,
                        c.idle_first_lost_gpu_hours,
                        c.saved_gpu_hours,
                    )
                });
                format!(
                    "idle-first reclaim under {}: {saved:.1} GPU-hours of lost work saved ({today:.1} lost with today's order, {first:.1} with idle_first_reclaim; preempted GPU-time less what the samples show idle, both simulated)",
                    s.candidate
                )
            }
        }
    }

    /// The per-team table (none without samples): header and lines.
    pub fn table(&self) -> Option<(Vec<&'static str>, Vec<Vec<String>>)> {
        let IdleFirst::Computed(s) = self else {
            return None;
        };
        let header = vec![
            "TEAM",
            "LOST TODAY GPU-H",
            "LOST IDLE-FIRST GPU-H",
            "SAVED GPU-H",
        ];
        let lines = s
            .rows
            .iter()
            .map(|r| {
                vec![
                    r.team.clone(),
                    format!("{:.1}", r.today_lost_gpu_hours),
                    format!("{:.1}", r.idle_first_lost_gpu_hours),
                    format!("{:.1}", r.saved_gpu_hours),
                ]
            })
            .collect();
        Some((header, lines))
    }

    /// The CSV's three cells for `candidate`'s row of `team`: today's, idle-first's and the
    /// saving, to 4 decimals; "no samples" in each without samples; none for another candidate.
    pub fn csv_cells(&self, candidate: &str, team: &str) -> [Option<String>; 3] {
        match self {
            IdleFirst::NoSamples { candidate: c, .. } if c == candidate => {
                let no = || Some("no samples".to_string());
                [no(), no(), no()]
            }
            IdleFirst::Computed(s) if s.candidate == candidate => {
                match s.rows.iter().find(|r| r.team == team) {
                    Some(r) => [
                        r.today_lost_gpu_hours,
                        r.idle_first_lost_gpu_hours,
                        r.saved_gpu_hours,
                    ]
                    .map(|v| Some(format!("{v:.4}"))),
                    None => [None, None, None],
                }
            }
            IdleFirst::NoSamples { .. } | IdleFirst::Computed(_) => [None, None, None],
        }
    }
}

#[cfg(test)]
mod tests;
