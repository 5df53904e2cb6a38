//! Idle GPU-hours per user (`accountd report users`, issue 29): for each user in each team,
//! the GPU-hours their job runs were allocated in the period, how many of them the NVML samples
//! saw idle, and their job runs with the most idle GPU-hours.
//!
//! - Built on [`utilisation`](super::utilisation): a job run's samples and idle time are
//!   exactly `report jobs`' (each sample stands for its interval; idle: `util_gpu` under
//!   `[accountd] idle_threshold_percent`).
//! - Allocated GPU-hours come from every stored run with GPUs that overlaps the period
//!   ([`Store::user_runs_overlapping`], every partition, as the samples are), sampled or not:
//!   GPUs x the run's seconds within the period, a running run up to now.
//! - Allocated GPU-time that no sample stands for is *unsampled*: unknown, never counted as idle.
//!   The idle share is idle GPU-hours over allocated ones, so with unsampled hours it is a lower
//!   bound.
//! - A user is a row per team (Slurm account) they ran in. Samples of job runs sacct has not
//!   brought in yet have no user: they are summed apart (`unattributed`).
//!
//! `render` writes the table, CSV and JSON; the HTML page of `report teams` shows the table and
//! charts each team's allocated and busy GPU-hours per day from [`users_report_by_day`].

use std::collections::BTreeMap;

use super::utilisation::{
    utilisation_report, UtilisationError, UtilisationParams, UtilisationReport,
};
use crate::period::{local_day_bounds, Period, UnixSeconds};
use crate::report::counted_period;
use crate::store::{GpuTime, IdleStepRow, Store, UserRun};

mod render;

pub use render::render_users;
pub(crate) use render::{users_notes, users_table_cells};

/// How many of a user's job runs the report names: those with the most idle GPU-hours.
pub const WORST_RUNS: usize = 3;

const MS_PER_HOUR: f64 = 3_600_000.0;

/// One job run over the period.
#[derive(Debug, Clone, PartialEq)]
pub struct RunIdle {
    /// JobID as users see it (`123`, `123_4`).
    pub job_id: String,
    pub job_id_raw: u32,
    pub start: UnixSeconds,
    /// GPUs x the run's seconds within the period.
    pub allocated_gpu_seconds: i64,
    /// Its samples within the period.
    pub time: GpuTime,
}

impl RunIdle {
    /// Allocated GPU-time no sample stands for, in ms.
    fn unsampled_ms(&self) -> i64 {
        (self.allocated_gpu_seconds * 1000 - self.time.sampled_ms).max(0)
    }

    pub fn gpu_hours(&self) -> f64 {
        self.allocated_gpu_seconds as f64 / 3600.0
    }
}

/// Sums over job runs: allocated GPU-time, its samples, and the part no sample saw.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct IdleSums {
    pub jobs: usize,
    pub allocated_gpu_seconds: i64,
    pub time: GpuTime,
    /// Allocated GPU-time without samples, summed run by run (a run sampled beyond its
    /// allocation does not make up for another one's missing samples).
    pub unsampled_ms: i64,
}

impl IdleSums {
    fn add(&mut self, run: &RunIdle) {
        self.jobs += 1;
        self.allocated_gpu_seconds += run.allocated_gpu_seconds;
        self.time.add(&run.time);
        self.unsampled_ms += run.unsampled_ms();
    }

    pub fn gpu_hours(&self) -> f64 {
        self.allocated_gpu_seconds as f64 / 3600.0
    }

    pub fn sampled_gpu_hours(&self) -> f64 {
        self.time.sampled_gpu_hours()
    }

    pub fn idle_gpu_hours(&self) -> f64 {
        self.time.idle_gpu_hours()
    }

    /// Sampled at or above the idle threshold.
    pub fn busy_gpu_hours(&self) -> f64 {
        (self.time.sampled_ms - self.time.idle_ms) as f64 / MS_PER_HOUR
    }

    pub fn unsampled_gpu_hours(&self) -> f64 {
        self.unsampled_ms as f64 / MS_PER_HOUR
    }

    /// Idle GPU-hours over allocated ones, percent; None without allocated GPU-hours.
    pub fn idle_percent(&self) -> Option<f64> {
        (self.allocated_gpu_seconds > 0)
            .then(|| self.time.idle_ms as f64 / 10.0 / self.allocated_gpu_seconds as f64)
    }
}

/// One user in one team over the period.
#[derive(Debug, Clone, PartialEq)]
pub struct UserIdle {
    pub user: String,
    /// The Slurm account the runs ran in.
    pub team: String,
    pub sums: IdleSums,
    /// At most [`WORST_RUNS`] runs with idle GPU-time, the most idle first.
    pub worst: Vec<RunIdle>,
    /// What the governor's idle policy did to the user's jobs in the team within the period:
    /// its steps (`notice`, `reclaim-first`, `requeue`, `cancel`, `cleared`) and how many.
    pub policy: BTreeMap<String, u64>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct UsersReport {
    pub cluster: String,
    pub period: Period,
    pub idle_threshold: f64,
    /// The most idle GPU-hours first, then by user and team.
    pub users: Vec<UserIdle>,
    /// Samples of job runs sacct has not brought in yet: no user, no team.
    pub unattributed: GpuTime,
    /// The rollup was not usable (built with another threshold): read from the samples.
    pub from_samples: bool,
}

impl UsersReport {
    /// Each team's users summed, by team name.
    pub fn team_sums(&self) -> BTreeMap<&str, IdleSums> {
        let mut teams: BTreeMap<&str, IdleSums> = BTreeMap::new();
        for u in &self.users {
            let t = teams.entry(u.team.as_str()).or_default();
            t.jobs += u.sums.jobs;
            t.allocated_gpu_seconds += u.sums.allocated_gpu_seconds;
            t.time.add(&u.sums.time);
            t.unsampled_ms += u.sums.unsampled_ms;
        }
        teams
    }

    /// Whether any job run of the period was sampled.
    pub fn has_samples(&self) -> bool {
        self.unattributed.samples > 0 || self.users.iter().any(|u| u.sums.time.samples > 0)
    }
}

/// Read the samples and the runs of the period and compute the report.
pub fn users_report(store: &Store, p: &UtilisationParams) -> Result<UsersReport, UtilisationError> {
    let sampled = utilisation_report(store, p)?;
    let runs = store.user_runs_overlapping(&p.cluster, p.period.since, p.period.until)?;
    let mut report = compute_users(&sampled, &runs, p);
    add_policy_steps(&mut report, &store.idle_steps_in(&p.cluster, p.period)?);
    Ok(report)
}

/// The idle policy's steps of the period, counted on the user's row in the team; a step of a
/// user with no run in the period has no row to go on and is left out.
pub fn add_policy_steps(report: &mut UsersReport, steps: &[IdleStepRow]) {
    for s in steps {
        if let Some(u) = report
            .users
            .iter_mut()
            .find(|u| u.user == s.user && u.team == s.team)
        {
            *u.policy.entry(s.step.clone()).or_default() += 1;
        }
    }
}

/// [`users_report`] day by day: one report per local day (in `tz`) of the period counted up to
/// now, the days of `report teams --by-day`. The runs are read once.
pub fn users_report_by_day<Tz: chrono::TimeZone>(
    store: &Store,
    p: &UtilisationParams,
    tz: &Tz,
) -> Result<Vec<UsersReport>, UtilisationError> {
    let counted = counted_period(p.period, p.now);
    if counted.since >= counted.until {
        return Ok(Vec::new());
    }
    let runs = store.user_runs_overlapping(&p.cluster, counted.since, counted.until)?;
    local_day_bounds(counted, tz)
        .windows(2)
        .map(|day| {
            let day = UtilisationParams {
                period: Period {
                    since: day[0],
                    until: day[1],
                },
                ..p.clone()
            };
            Ok(compute_users(
                &utilisation_report(store, &day)?,
                &runs,
                &day,
            ))
        })
        .collect()
}

/// A run as a user's: who, in which team, and its figures.
struct Attributed {
    user: String,
    team: String,
    run: RunIdle,
}

/// The arithmetic of [`users_report`]: the sampled job runs of `sampled` (the utilisation
/// report of the same period) matched to the stored runs `runs` by (JobIDRaw, StartTime), summed
/// per user and team. Runs that do not overlap the period and have no samples in it are left out.
pub fn compute_users(
    sampled: &UtilisationReport,
    runs: &[UserRun],
    p: &UtilisationParams,
) -> UsersReport {
    let mut by_run: BTreeMap<(u32, i64), Attributed> = BTreeMap::new();
    for r in runs {
        let seconds = p.period.overlap(r.start, r.end.unwrap_or(p.now));
        by_run.insert(
            (r.job_id_raw, r.start),
            Attributed {
                user: r.user.clone(),
                team: r.account.clone(),
                run: RunIdle {
                    job_id: r.job_id.clone(),
                    job_id_raw: r.job_id_raw,
                    start: r.start,
                    allocated_gpu_seconds: i64::try_from(r.gpus).unwrap_or(i64::MAX) * seconds,
                    time: GpuTime::default(),
                },
            },
        );
    }
    let mut unattributed = GpuTime::default();
    for j in &sampled.jobs {
        let (Some(start), Some(user), Some(team)) = (j.run_start, &j.user, &j.team) else {
            unattributed.add(&j.time);
            continue;
        };
        // A stored run the period's list lacks (sacct gave it no GPUs): its samples still count.
        let a = by_run
            .entry((j.job_id_raw, start))
            .or_insert_with(|| Attributed {
                user: user.clone(),
                team: team.clone(),
                run: RunIdle {
                    job_id: j.job_label(),
                    job_id_raw: j.job_id_raw,
                    start,
                    allocated_gpu_seconds: (j.gpu_hours.unwrap_or(0.0) * 3600.0).round() as i64,
                    time: GpuTime::default(),
                },
            });
        a.run.time.add(&j.time);
    }
    UsersReport {
        cluster: p.cluster.clone(),
        period: p.period,
        idle_threshold: p.idle_threshold,
        users: per_user(by_run.into_values()),
        unattributed,
        from_samples: sampled.from_samples,
    }
}

/// The runs summed per user and team, each with its most idle runs; the most idle first.
fn per_user(runs: impl Iterator<Item = Attributed>) -> Vec<UserIdle> {
    let mut users: BTreeMap<(String, String), (IdleSums, Vec<RunIdle>)> = BTreeMap::new();
    for a in runs {
        if a.run.allocated_gpu_seconds == 0 && a.run.time.samples == 0 {
            continue;
        }
        let (sums, idle_runs) = users.entry((a.user, a.team)).or_default();
        sums.add(&a.run);
        if a.run.time.idle_ms > 0 {
            idle_runs.push(a.run);
        }
    }
    let mut out: Vec<UserIdle> = users
        .into_iter()
        .map(|((user, team), (sums, mut worst))| {
            worst.sort_by(|a, b| {
                b.time
                    .idle_ms
                    .cmp(&a.time.idle_ms)
                    .then(a.job_id_raw.cmp(&b.job_id_raw))
                    .then(a.start.cmp(&b.start))
            });
            worst.truncate(WORST_RUNS);
            UserIdle {
                user,
                team,
                sums,
                worst,
                policy: BTreeMap::new(),
            }
        })
        .collect();
    // Stable: users with equal idle time stay by user, then team.
    out.sort_by_key(|u| std::cmp::Reverse(u.sums.time.idle_ms));
    out
}

#[cfg(test)]
mod golden_tests;
