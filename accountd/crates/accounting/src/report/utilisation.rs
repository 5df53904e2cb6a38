//! Utilisation and waste (DESIGN 5): from the samples of the GPUs a job held, its mean
//! utilisation and its idle GPU-hours, per job run and per team over a period; the worst jobs.
//!
//! - Each sample stands for its interval of GPU-time (`interval_ms`); a sample is in the period
//!   when its tick is (`since <= ts < until`).
//! - Mean utilisation: the mean of `util_gpu` weighted by that GPU-time.
//! - Idle GPU-hours: the GPU-time of samples with `util_gpu` below the idle threshold
//!   (`[accountd] idle_threshold_percent`, default 5).
//! - A sample counts for the job run the node saw holding the GPU: (JobIDRaw, StartTime), the
//!   key of `job_runs`; samples of no job are counted apart (`unallocated`).
//! - Whole hours are read from the rollup (`gpu_sample_hours`, [`Store::gpu_time_in`]), the partial hours at the ends of
//!   the period from the samples; when the rollup was built with another threshold, everything
//!   is read from the samples (`from_samples`).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use serde::Serialize;

use super::table;
use crate::period::{format_local, format_rfc3339, Period, UnixSeconds};
use crate::report::{csv_text, json_text, CsvNumbers, Format, JsonNumbers, Numbers};
pub use crate::store::GpuTime;
use crate::store::{PeriodGpuTime, RunGpu, Store, StoreError};

#[derive(Debug, thiserror::Error)]
pub enum UtilisationError {
    #[error("cannot read the GPU samples and job runs of the database")]
    Store(#[from] StoreError),
}

#[derive(Debug, Clone, PartialEq)]
pub struct UtilisationParams {
    pub cluster: String,
    pub period: Period,
    pub idle_threshold: f64,
    /// Running runs count up to now.
    pub now: UnixSeconds,
}

/// One job run's GPUs over the period.
#[derive(Debug, Clone, PartialEq)]
pub struct JobUtilisation {
    pub job_id_raw: u32,
    /// StartTime as the node saw it.
    pub start: Option<UnixSeconds>,
    /// From `job_runs` (sacct) when that run has been ingested.
    pub job_id: Option<String>,
    /// The StartTime of that stored run: `start`, or where the node could not tell, the run's
    /// that [`Store::run_of_samples`] found.
    pub run_start: Option<UnixSeconds>,
    pub user: Option<String>,
    pub team: Option<String>,
    pub gpus: Option<u64>,
    /// Allocated GPU-hours of the run within the period.
    pub gpu_hours: Option<f64>,
    /// Distinct GPUs sampled.
    pub gpus_sampled: usize,
    pub time: GpuTime,
}

impl JobUtilisation {
    pub fn job_label(&self) -> String {
        self.job_id
            .clone()
            .unwrap_or_else(|| self.job_id_raw.to_string())
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct TeamUtilisation {
    pub team: String,
    pub jobs: usize,
    pub gpu_hours: f64,
    pub time: GpuTime,
}

/// The team of runs that sacct has not brought in yet.
pub const UNKNOWN_TEAM: &str = "(unknown)";

#[derive(Debug, Clone, PartialEq)]
pub struct UtilisationReport {
    pub cluster: String,
    pub period: Period,
    pub idle_threshold: f64,
    /// Worst first: most idle GPU-hours, then lowest mean utilisation, then job id.
    pub jobs: Vec<JobUtilisation>,
    /// By team name.
    pub teams: Vec<TeamUtilisation>,
    /// Samples of GPUs no job held.
    pub unallocated: GpuTime,
    /// The rollup was not usable (built with another threshold): read from the samples.
    pub from_samples: bool,
}

pub fn utilisation_report(
    store: &Store,
    p: &UtilisationParams,
) -> Result<UtilisationReport, UtilisationError> {
    let PeriodGpuTime {
        by_run_gpu,
        from_samples,
    } = store.gpu_time_in(&p.cluster, p.period, p.idle_threshold)?;
    let mut unallocated = GpuTime::default();
    let mut per_job: BTreeMap<(u32, i64), (BTreeSet<String>, GpuTime)> = BTreeMap::new();
    for (
        RunGpu {
            job_id_raw: job,
            job_start: start,
            gpu_uuid: uuid,
        },
        t,
    ) in by_run_gpu
    {
        if job == 0 {
            unallocated.add(&t);
            continue;
        }
        let entry = per_job.entry((job, start)).or_default();
        entry.0.insert(uuid);
        entry.1.add(&t);
    }
    let mut jobs = Vec::new();
    for ((job_id_raw, start), (uuids, time)) in per_job {
        let run = store.run_of_samples(&p.cluster, job_id_raw, start, p.period.until)?;
        let gpu_hours = run.as_ref().map(|r| {
            let end = r.end.unwrap_or(p.now);
            r.gpus.max(0) as f64 * p.period.overlap(r.start, end) as f64 / 3600.0
        });
        jobs.push(JobUtilisation {
            job_id_raw,
            start: (start != 0).then_some(start),
            job_id: run.as_ref().map(|r| r.job_id.clone()),
            run_start: run.as_ref().map(|r| r.start),
            user: run.as_ref().map(|r| r.user.clone()),
            team: run.as_ref().map(|r| r.account.clone()),
            gpus: run.as_ref().map(|r| u64::try_from(r.gpus).unwrap_or(0)),
            gpu_hours,
            gpus_sampled: uuids.len(),
            time,
        });
    }
    jobs.sort_by(|a, b| {
        b.time
            .idle_ms
            .cmp(&a.time.idle_ms)
            .then(a.time.util_gpu_ms.cmp(&b.time.util_gpu_ms))
            .then(a.job_id_raw.cmp(&b.job_id_raw))
            .then(a.start.cmp(&b.start))
    });
    let mut teams: BTreeMap<String, TeamUtilisation> = BTreeMap::new();
    for j in &jobs {
        let name = j.team.clone().unwrap_or_else(|| UNKNOWN_TEAM.to_string());
        let t = teams
            .entry(name.clone())
            .or_insert_with(|| TeamUtilisation {
                team: name,
                jobs: 0,
                gpu_hours: 0.0,
                time: GpuTime::default(),
            });
        t.jobs += 1;
        t.gpu_hours += j.gpu_hours.unwrap_or(0.0);
        t.time.add(&j.time);
    }
    Ok(UtilisationReport {
        cluster: p.cluster.clone(),
        period: p.period,
        idle_threshold: p.idle_threshold,
        jobs,
        teams: teams.into_values().collect(),
        unallocated,
        from_samples,
    })
}

fn opt(v: Option<f64>, digits: usize) -> String {
    v.map(|v| format!("{v:.digits$}")).unwrap_or_default()
}

/// One job run of `report jobs`: a CSV line, an element of the JSON array. Names and order are
/// an interface: keep them.
#[derive(Serialize, Default)]
struct JobLine<'a, N: Numbers> {
    job: String,
    job_id_raw: u32,
    user: Option<&'a str>,
    team: Option<&'a str>,
    gpus: Option<u64>,
    gpu_hours: Option<N::Number>,
    sampled_gpu_hours: N::Number,
    mean_util_percent: Option<N::Number>,
    idle_gpu_hours: N::Number,
    since: &'a str,
    until: &'a str,
}

fn job_lines<'a, N: Numbers>(
    jobs: &'a [JobUtilisation],
    since: &'a str,
    until: &'a str,
) -> Vec<JobLine<'a, N>> {
    jobs.iter()
        .map(|j| JobLine {
            job: j.job_label(),
            job_id_raw: j.job_id_raw,
            user: j.user.as_deref(),
            team: j.team.as_deref(),
            gpus: j.gpus,
            gpu_hours: j.gpu_hours.map(|h| N::number(h, Some(4))),
            sampled_gpu_hours: N::number(j.time.sampled_gpu_hours(), Some(4)),
            mean_util_percent: j.time.mean_util().map(|u| N::number(u, Some(2))),
            idle_gpu_hours: N::number(j.time.idle_gpu_hours(), Some(4)),
            since,
            until,
        })
        .collect()
}

/// `accountd report jobs`: the worst jobs, at most `limit` (all with `None`).
pub fn render_jobs<Tz: chrono::TimeZone>(
    r: &UtilisationReport,
    format: Format,
    limit: Option<usize>,
    tz: &Tz,
) -> String
where
    Tz::Offset: std::fmt::Display,
{
    let jobs = &r.jobs[..limit.unwrap_or(usize::MAX).min(r.jobs.len())];
    let (since, until) = (
        format_rfc3339(r.period.since),
        format_rfc3339(r.period.until),
    );
    match format {
        Format::Table => {
            let mut out = format!(
                "Jobs by idle GPU-hours (GPU utilisation under {} %) on {} from {} to {} (local time)\n",
                r.idle_threshold,
                r.cluster,
                format_local(r.period.since, tz).replace('T', " "),
                format_local(r.period.until, tz).replace('T', " "),
            );
            let rows: Vec<Vec<String>> = jobs
                .iter()
                .map(|j| {
                    vec![
                        j.job_label(),
                        j.user.clone().unwrap_or_default(),
                        j.team.clone().unwrap_or_else(|| UNKNOWN_TEAM.into()),
                        j.gpus
                            .map_or_else(|| j.gpus_sampled.to_string(), |g| g.to_string()),
                        opt(j.gpu_hours, 4),
                        format!("{:.4}", j.time.sampled_gpu_hours()),
                        opt(j.time.mean_util(), 1),
                        format!("{:.4}", j.time.idle_gpu_hours()),
                    ]
                })
                .collect();
            out.push_str(&table::render(
                &[
                    "JOB",
                    "USER",
                    "TEAM",
                    "GPUS",
                    "GPU-HOURS",
                    "SAMPLED",
                    "MEAN-UTIL%",
                    "IDLE-GPU-HOURS",
                ],
                &rows,
                3,
                None,
            ));
            if jobs.is_empty() {
                out.push_str("(no samples of jobs in the period)\n");
            }
            if r.unallocated.samples > 0 {
                let _ = writeln!(
                    out,
                    "GPUs held by no job: {:.4} GPU-hours sampled, {:.4} idle",
                    r.unallocated.sampled_gpu_hours(),
                    r.unallocated.idle_gpu_hours()
                );
            }
            out
        }
        Format::Csv => csv_text(job_lines::<CsvNumbers>(jobs, &since, &until)),
        Format::Json => json_text(&job_lines::<JsonNumbers>(jobs, &since, &until)),
    }
}

/// One team of `report utilisation`: a CSV line, an element of the JSON array. Names and order
/// are an interface: keep them.
#[derive(Serialize, Default)]
struct TeamLine<'a, N: Numbers> {
    team: &'a str,
    jobs: usize,
    gpu_hours: N::Number,
    sampled_gpu_hours: N::Number,
    mean_util_percent: Option<N::Number>,
    idle_gpu_hours: N::Number,
    since: &'a str,
    until: &'a str,
}

fn team_lines<'a, N: Numbers>(
    r: &'a UtilisationReport,
    since: &'a str,
    until: &'a str,
) -> Vec<TeamLine<'a, N>> {
    r.teams
        .iter()
        .map(|t| TeamLine {
            team: &t.team,
            jobs: t.jobs,
            gpu_hours: N::number(t.gpu_hours, Some(4)),
            sampled_gpu_hours: N::number(t.time.sampled_gpu_hours(), Some(4)),
            mean_util_percent: t.time.mean_util().map(|u| N::number(u, Some(2))),
            idle_gpu_hours: N::number(t.time.idle_gpu_hours(), Some(4)),
            since,
            until,
        })
        .collect()
}

/// `accountd report utilisation`: per team, then the GPUs no job held.
pub fn render_teams<Tz: chrono::TimeZone>(r: &UtilisationReport, format: Format, tz: &Tz) -> String
where
    Tz::Offset: std::fmt::Display,
{
    let (since, until) = (
        format_rfc3339(r.period.since),
        format_rfc3339(r.period.until),
    );
    match format {
        Format::Table => {
            let mut out = format!(
                "GPU utilisation per team (idle: under {} %) on {} from {} to {} (local time)\n",
                r.idle_threshold,
                r.cluster,
                format_local(r.period.since, tz).replace('T', " "),
                format_local(r.period.until, tz).replace('T', " "),
            );
            let mut rows: Vec<Vec<String>> = r
                .teams
                .iter()
                .map(|t| {
                    vec![
                        t.team.clone(),
                        t.jobs.to_string(),
                        format!("{:.4}", t.gpu_hours),
                        format!("{:.4}", t.time.sampled_gpu_hours()),
                        opt(t.time.mean_util(), 1),
                        format!("{:.4}", t.time.idle_gpu_hours()),
                    ]
                })
                .collect();
            rows.push(vec![
                "(no job)".into(),
                String::new(),
                String::new(),
                format!("{:.4}", r.unallocated.sampled_gpu_hours()),
                opt(r.unallocated.mean_util(), 1),
                format!("{:.4}", r.unallocated.idle_gpu_hours()),
            ]);
            out.push_str(&table::render(
                &[
                    "TEAM",
                    "JOBS",
                    "GPU-HOURS",
                    "SAMPLED",
                    "MEAN-UTIL%",
                    "IDLE-GPU-HOURS",
                ],
                &rows,
                1,
                None,
            ));
            out
        }
        Format::Csv => csv_text(team_lines::<CsvNumbers>(r, &since, &until)),
        Format::Json => json_text(&team_lines::<JsonNumbers>(r, &since, &until)),
    }
}
