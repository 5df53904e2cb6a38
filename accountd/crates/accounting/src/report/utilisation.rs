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
use crate::store::{PeriodGpuTime, RunGpu, Store};

#[derive(Debug, thiserror::Error)]
pub enum UtilisationError {
    #[error("cannot read the GPU samples and job runs of the database")]
    Sql(#[from] rusqlite::Error),
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sample::collect::collect;
    use crate::sample::spool::NodeSpool;
    use crate::sample::tests::sample;
    use crate::store::tests::run;

    /// Two jobs and a free GPU over 2 hours + 30 min, sampled every 10 s (so the rollup and the
    /// raw samples are both read): job 1 holds GPU-a at 80 %, job 2 holds GPU-b idle (2 %) for
    /// the first hour then at 50 %; GPU-c is held by no job and idle.
    fn fixture() -> (tempfile::TempDir, Store, UtilisationParams) {
        let root = tempfile::tempdir().unwrap();
        let mut store = Store::open_in_memory().unwrap();
        let mut a = run(1, "agents", 1_000, None, 1);
        a.cluster = "c".into();
        let mut b = run(2, "training", 1_000, Some(100_000), 1);
        b.cluster = "c".into();
        store.record_runs(&[a, b], 1, None).unwrap();
        let mut spool = NodeSpool::open(root.path(), "n1").unwrap();
        let t0 = 3_600_000 * 10; // 10:00 UTC on day 0
        for i in 0..(9_000 / 10) {
            let ts = t0 + i * 10_000;
            let b_util = if ts < t0 + 3_600_000 { 2 } else { 50 };
            spool
                .write_batch(&[
                    sample("GPU-a", ts, 80, Some(1)),
                    sample("GPU-b", ts, b_util, Some(2)),
                    sample("GPU-c", ts, 0, None),
                ])
                .unwrap();
        }
        collect(&store, root.path(), "c", 5.0, 1).unwrap();
        let params = UtilisationParams {
            cluster: "c".into(),
            period: Period {
                since: 36_000 - 600, // starts mid-hour: partial hours at both ends
                until: 36_000 + 9_000,
            },
            idle_threshold: 5.0,
            now: 50_000,
        };
        (root, store, params)
    }

    #[test]
    fn idle_hours_and_mean_utilisation_per_job_and_team() {
        let (_root, store, p) = fixture();
        let r = utilisation_report(&store, &p).unwrap();
        assert!(!r.from_samples);
        assert_eq!(r.jobs.len(), 2);
        let worst = &r.jobs[0];
        assert_eq!(
            worst.job_id_raw, 2,
            "the job with idle GPU-hours comes first"
        );
        assert!((worst.time.idle_gpu_hours() - 1.0).abs() < 1e-9);
        assert!((worst.time.sampled_gpu_hours() - 2.5).abs() < 1e-9);
        // 1 h at 2 % and 1.5 h at 50 %, weighted by time.
        let mean = (2.0 * 1.0 + 50.0 * 1.5) / 2.5;
        assert!((worst.time.mean_util().unwrap() - mean).abs() < 1e-9);
        assert_eq!(worst.team.as_deref(), Some("training"));
        // Job 2 ran [1000, 100000): within the period [35400, 45000) that is 9600 s of 1 GPU.
        assert!((worst.gpu_hours.unwrap() - 9_600.0 / 3600.0).abs() < 1e-9);
        let best = &r.jobs[1];
        assert_eq!(best.time.idle_ms, 0);
        assert_eq!(best.time.mean_util(), Some(80.0));
        assert!((r.unallocated.idle_gpu_hours() - 2.5).abs() < 1e-9);
        let teams: Vec<&str> = r.teams.iter().map(|t| t.team.as_str()).collect();
        assert_eq!(teams, ["agents", "training"]);
    }

    #[test]
    fn the_rollup_and_the_samples_agree() {
        let (_root, store, p) = fixture();
        let with_rollup = utilisation_report(&store, &p).unwrap();
        // Force the samples-only path by a rollup of another threshold.
        store
            .connection()
            .execute("UPDATE gpu_sample_hours SET idle_threshold = 99", [])
            .unwrap();
        let from_samples = utilisation_report(&store, &p).unwrap();
        assert!(from_samples.from_samples);
        assert_eq!(with_rollup.jobs, from_samples.jobs);
        assert_eq!(with_rollup.unallocated, from_samples.unallocated);
    }

    #[test]
    fn a_shorter_period_counts_only_its_ticks() {
        let (_root, store, mut p) = fixture();
        p.period = Period {
            since: 36_000,
            until: 36_000 + 60,
        };
        let r = utilisation_report(&store, &p).unwrap();
        assert!(r.jobs.iter().all(|j| j.time.samples == 6), "{:?}", r.jobs);
    }

    #[test]
    fn renders_name_the_worst_job_first() {
        let (_root, store, p) = fixture();
        let r = utilisation_report(&store, &p).unwrap();
        let table = render_jobs(&r, Format::Table, None, &chrono::Utc);
        let first_row = table.lines().nth(2).unwrap();
        assert!(first_row.starts_with("2 "), "{table}");
        assert!(table.contains("GPUs held by no job"), "{table}");
        let csv = render_jobs(&r, Format::Csv, Some(1), &chrono::Utc);
        assert_eq!(csv.lines().count(), 2, "{csv}");
        assert!(
            csv.lines().nth(1).unwrap().starts_with("2,2,u,training,1,"),
            "{csv}"
        );
        let json: serde_json::Value =
            serde_json::from_str(&render_jobs(&r, Format::Json, None, &chrono::Utc)).unwrap();
        assert_eq!(json[0]["idle_gpu_hours"], 1.0);
        assert_eq!(json[1]["mean_util_percent"], 80.0);
        let teams = render_teams(&r, Format::Csv, &chrono::Utc);
        assert!(teams.contains("\ntraining,1,"), "{teams}");
    }
}
