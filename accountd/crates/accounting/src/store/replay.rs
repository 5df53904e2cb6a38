//! What `accountd replay` reads (issue 13): every job submitted in a period, with its runs, and
//! the jobs that never started; and (issue 29) the GPU samples of job runs, summed per run and
//! minute, from which the replay knows when each job's GPUs were idle.

use std::collections::BTreeMap;

use rusqlite::params;

use super::runs::parse_gpu_types;
use super::{Store, StoreError};
use crate::period::UnixSeconds;
use crate::sacct::{JobRun, UnstartedJob};

/// A job that ran, with every run of it in start order (more than one: requeued).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StartedJob {
    pub job_id_raw: u32,
    pub runs: Vec<JobRun>,
}

impl StartedJob {
    /// When it was submitted: its earliest run's submit time (Slurm resets a requeued job's
    /// submit time to the requeue), else its first start.
    pub fn submit(&self) -> UnixSeconds {
        self.runs
            .iter()
            .map(|r| r.submit.unwrap_or(r.start))
            .min()
            .unwrap_or(UnixSeconds::MAX)
    }
}

/// A job run's GPU samples of one stretch of time ([`Store::run_activity`]), all its GPUs
/// together.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunActivity {
    /// JobIDRaw.
    pub job_id_raw: u32,
    /// The run's StartTime as the node saw it; 0 when it could not tell.
    pub job_start: UnixSeconds,
    /// Where the stretch starts (ms since the epoch; a multiple of its length): the samples
    /// whose tick is in it.
    pub from_ms: i64,
    pub samples: u64,
    /// The GPU-time the samples stand for, ms.
    pub sampled_ms: i64,
    /// Of it, the samples below the idle threshold.
    pub idle_ms: i64,
}

/// The jobs of a cluster submitted in a period.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SubmittedJobs {
    /// By job id.
    pub started: Vec<StartedJob>,
    /// By submit time, then job id.
    pub unstarted: Vec<UnstartedJob>,
}

impl Store {
    /// Every job of `cluster` submitted in `[since, until)`: the jobs that ran, each with all
    /// its runs (also those that started after `until`), and the jobs that never started.
    ///
    /// A job that ran was submitted at or before its first run started, so its runs are found
    /// through `job_runs_by_start` from `since` on; a job with a run that started before `since`
    /// was submitted before it. The cost: the runs that started from `since` until the latest,
    /// read once (a period far in the past reads every run after it). A job id Slurm reused
    /// (after MaxJobId wrapped) reads as one job.
    pub fn jobs_submitted(
        &self,
        cluster: &str,
        since: UnixSeconds,
        until: UnixSeconds,
    ) -> Result<SubmittedJobs, StoreError> {
        let read = || -> rusqlite::Result<SubmittedJobs> {
            let started = self.started_jobs(cluster, since, until)?;
            let unstarted = self.unstarted_jobs(cluster, since, until)?;
            Ok(SubmittedJobs { started, unstarted })
        };
        read().map_err(|e| self.sql_err(e))
    }

    /// The samples of `cluster`'s job runs whose tick is in `[since, until)`, summed per run
    /// and stretch of `stretch_ms` (idle below `idle_threshold` percent), by run, then time.
    /// Samples of no job are left out. The cost: every sample of the period is read once
    /// (`gpu_samples_by_time`); what comes back is a row per run and stretch.
    pub fn run_activity(
        &self,
        cluster: &str,
        since: UnixSeconds,
        until: UnixSeconds,
        idle_threshold: f64,
        stretch_ms: i64,
    ) -> Result<Vec<RunActivity>, StoreError> {
        let read = || -> rusqlite::Result<Vec<RunActivity>> {
            let mut stmt = self.conn.prepare_cached(
                "SELECT job_id_raw, coalesce(job_start, 0), (ts_ms / ?4) * ?4, count(*),
                        sum(interval_ms), sum(CASE WHEN util_gpu < ?5 THEN interval_ms ELSE 0 END)
                 FROM gpu_samples INDEXED BY gpu_samples_by_time
                 WHERE cluster = ?1 AND ts_ms >= ?2 AND ts_ms < ?3 AND job_id_raw IS NOT NULL
                 GROUP BY 1, 2, 3
                 ORDER BY 1, 2, 3",
            )?;
            let since_ms = since.saturating_mul(1000);
            let until_ms = until.saturating_mul(1000);
            let stretch = stretch_ms.max(1);
            let rows = stmt.query_map(
                params![cluster, since_ms, until_ms, stretch, idle_threshold],
                |r| {
                    Ok(RunActivity {
                        job_id_raw: r.get(0)?,
                        job_start: r.get(1)?,
                        from_ms: r.get(2)?,
                        samples: u64::try_from(r.get::<_, i64>(3)?).unwrap_or(0),
                        sampled_ms: r.get(4)?,
                        idle_ms: r.get(5)?,
                    })
                },
            )?;
            rows.collect()
        };
        read().map_err(|e| self.sql_err(e))
    }

    /// The jobs of [`Store::jobs_submitted`] that ran, each with all its runs.
    fn started_jobs(
        &self,
        cluster: &str,
        since: UnixSeconds,
        until: UnixSeconds,
    ) -> rusqlite::Result<Vec<StartedJob>> {
        // CROSS JOIN keeps the jobs found as the outer loop, each job's runs looked up by
        // (cluster, job_id_raw): as a plain join SQLite scans every run of the cluster.
        let mut stmt = self.conn.prepare_cached(
            "WITH jobs AS (
                     SELECT job_id_raw FROM job_runs INDEXED BY job_runs_by_start
                     WHERE cluster = ?1 AND start_time >= ?2
                     GROUP BY job_id_raw
                     HAVING min(coalesce(submit_time, start_time)) >= ?2
                        AND min(coalesce(submit_time, start_time)) < ?3
                 )
                 SELECT r.job_id_raw, r.job_id, r.account, r.user, r.partition, r.qos, r.state,
                        r.submit_time, r.start_time, r.end_time, r.elapsed, r.gpus, r.alloc_tres,
                        r.gpu_types, r.eligible_time, r.time_limit, r.nnodes
                 FROM jobs CROSS JOIN job_runs r ON r.cluster = ?1 AND r.job_id_raw = jobs.job_id_raw
                 WHERE NOT EXISTS (SELECT 1 FROM job_runs e WHERE e.cluster = ?1
                                   AND e.job_id_raw = r.job_id_raw AND e.start_time < ?2)
                 ORDER BY r.job_id_raw, r.start_time",
        )?;
        let mut rows = stmt.query(params![cluster, since, until])?;
        let mut started: Vec<StartedJob> = Vec::new();
        while let Some(r) = rows.next()? {
            let run = JobRun {
                cluster: cluster.to_string(),
                job_id_raw: r.get(0)?,
                job_id: r.get(1)?,
                account: r.get(2)?,
                user: r.get(3)?,
                partition: r.get(4)?,
                qos: r.get(5)?,
                state: r.get(6)?,
                submit: r.get(7)?,
                start: r.get(8)?,
                end: r.get(9)?,
                elapsed: r.get(10)?,
                gpus: u64::try_from(r.get::<_, i64>(11)?).unwrap_or(0),
                alloc_tres: r.get(12)?,
                gpus_by_type: types(r.get(13)?),
                eligible: r.get(14)?,
                time_limit: r.get(15)?,
                nnodes: r.get(16)?,
            };
            match started.last_mut() {
                Some(job) if job.job_id_raw == run.job_id_raw => job.runs.push(run),
                _ => started.push(StartedJob {
                    job_id_raw: run.job_id_raw,
                    runs: vec![run],
                }),
            }
        }
        Ok(started)
    }

    /// The jobs of [`Store::jobs_submitted`] that never started.
    fn unstarted_jobs(
        &self,
        cluster: &str,
        since: UnixSeconds,
        until: UnixSeconds,
    ) -> rusqlite::Result<Vec<UnstartedJob>> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT job_id_raw, job_id, account, user, partition, qos, state, submit_time,
                        eligible_time, end_time, gpus, gpu_types, time_limit, nnodes, req_tres
                 FROM unstarted_jobs u
                 WHERE cluster = ?1 AND submit_time >= ?2 AND submit_time < ?3
                   AND NOT EXISTS (SELECT 1 FROM job_runs r WHERE r.cluster = ?1
                                   AND r.job_id_raw = u.job_id_raw)
                 ORDER BY submit_time, job_id_raw",
        )?;
        let unstarted = stmt
            .query_map(params![cluster, since, until], |r| {
                Ok(UnstartedJob {
                    cluster: cluster.to_string(),
                    job_id_raw: r.get(0)?,
                    job_id: r.get(1)?,
                    account: r.get(2)?,
                    user: r.get(3)?,
                    partition: r.get(4)?,
                    qos: r.get(5)?,
                    state: r.get(6)?,
                    submit: r.get(7)?,
                    eligible: r.get(8)?,
                    end: r.get(9)?,
                    gpus: u64::try_from(r.get::<_, i64>(10)?).unwrap_or(0),
                    gpus_by_type: types(r.get(11)?),
                    time_limit: r.get(12)?,
                    nnodes: r.get(13)?,
                    req_tres: r.get(14)?,
                })
            })?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        Ok(unstarted)
    }
}

fn types(text: Option<String>) -> BTreeMap<String, u64> {
    text.as_deref().map(parse_gpu_types).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::test_support::sample;

    #[test]
    fn run_activity_sums_each_runs_samples_per_stretch() {
        let store = Store::open_in_memory().unwrap();
        // Job 7 (start 500) on two GPUs, a sample every 30 s from 600 to 690 on each, GPU b
        // busy at 630; a sample of no job; job 8's start unknown (0). Threshold 5 %:
        // 4 % is idle.
        let mut samples = Vec::new();
        for ts in (600..700).step_by(30) {
            samples.push(sample("GPU-a", ts, Some((7, 500)), 4));
            samples.push(sample(
                "GPU-b",
                ts,
                Some((7, 500)),
                if ts == 630 { 50 } else { 0 },
            ));
            samples.push(sample("GPU-c", ts, None, 0));
        }
        let mut unknown_start = sample("GPU-d", 610, Some((8, 0)), 0);
        unknown_start.job_start = None;
        samples.push(unknown_start);
        store.record_samples("c", &samples, 5.0, 1_000).unwrap();
        let rows = store.run_activity("c", 600, 700, 5.0, 60_000).unwrap();
        let row = |job_id_raw, job_start, from_ms, samples: u64, idle: i64| RunActivity {
            job_id_raw,
            job_start,
            from_ms,
            samples,
            sampled_ms: i64::try_from(samples).unwrap() * 10_000,
            idle_ms: idle * 10_000,
        };
        // Minutes [540, 600): none; [600, 660): 600 and 630 on both GPUs, one busy;
        // [660, 720): 660 and 690 on both.
        assert_eq!(
            rows,
            [
                row(7, 500, 600_000, 4, 3),
                row(7, 500, 660_000, 4, 4),
                row(8, 0, 600_000, 1, 1),
            ]
        );
        // The period's end is excluded (690); threshold 3 %: the 4 % samples are busy.
        let rows = store.run_activity("c", 600, 690, 3.0, 60_000).unwrap();
        assert_eq!(
            rows[..2],
            [row(7, 500, 600_000, 4, 1), row(7, 500, 660_000, 2, 1)]
        );
    }
}
