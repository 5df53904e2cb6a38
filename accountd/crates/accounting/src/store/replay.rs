//! What `accountd replay` reads (issue 13): every job submitted in a period, with its runs, and
//! the jobs that never started.

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
