//! NVML GPU samples (`gpu_samples`) and their hourly rollup (`gpu_sample_hours`): stored once per
//! key, summed per job run and GPU over a period, and the stored run the samples of a job belong
//! to.
//!
//! - A sample's key is (cluster, node, GPU UUID, tick): `INSERT OR IGNORE` stores a sample
//!   delivered twice once, and only a sample really inserted is added to the rollup.
//! - The rollup's idle time depends on the idle threshold it was built with: a rollup of another
//!   threshold is rebuilt from the samples ([`Store::ensure_rollup_threshold`]), and meanwhile
//!   not read ([`Store::gpu_time_in`] then reads the samples).
//!
//! These return SQLite's errors as they are: the collection (`accountd::sample::collect`) and the
//! utilisation report ([`crate::report::utilisation`]) say what they were doing.

use std::collections::BTreeMap;

use rusqlite::{params, Connection, OptionalExtension, Transaction, TransactionBehavior};

use super::{Store, StoreError};
use crate::gpu_sample::Sample;
use crate::period::{Period, UnixSeconds};

const HOUR_MS: i64 = 3_600_000;

/// What storing samples did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SamplesOutcome {
    /// Samples stored for the first time.
    pub inserted: usize,
    /// Samples already stored (delivered again): nothing changed.
    pub duplicates: usize,
}

/// Sums over samples.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GpuTime {
    pub samples: u64,
    pub sampled_ms: i64,
    pub util_gpu_ms: i64,
    pub util_mem_ms: i64,
    pub idle_ms: i64,
}

impl GpuTime {
    pub(crate) fn add(&mut self, o: &GpuTime) {
        self.samples += o.samples;
        self.sampled_ms += o.sampled_ms;
        self.util_gpu_ms += o.util_gpu_ms;
        self.util_mem_ms += o.util_mem_ms;
        self.idle_ms += o.idle_ms;
    }
    pub fn sampled_gpu_hours(&self) -> f64 {
        self.sampled_ms as f64 / HOUR_MS as f64
    }
    pub fn idle_gpu_hours(&self) -> f64 {
        self.idle_ms as f64 / HOUR_MS as f64
    }
    /// Percent, weighted by GPU-time; `None` without samples.
    pub fn mean_util(&self) -> Option<f64> {
        (self.sampled_ms > 0).then(|| self.util_gpu_ms as f64 / self.sampled_ms as f64)
    }
    pub fn mean_mem_util(&self) -> Option<f64> {
        (self.sampled_ms > 0).then(|| self.util_mem_ms as f64 / self.sampled_ms as f64)
    }
}

/// What samples are summed by: the job run the node saw holding the GPU, and the GPU.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct RunGpu {
    /// JobIDRaw; 0 for samples of no job.
    pub job_id_raw: u32,
    /// The run's StartTime as the node saw it; 0 when it could not tell.
    pub job_start: i64,
    pub gpu_uuid: String,
}

/// The samples of a period summed per job run and GPU ([`Store::gpu_time_in`]).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PeriodGpuTime {
    pub by_run_gpu: BTreeMap<RunGpu, GpuTime>,
    /// The rollup was not usable (built with another threshold): read from the samples.
    pub from_samples: bool,
}

/// The stored run (`job_runs`) a job's samples belong to ([`Store::run_of_samples`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SampledRun {
    pub job_id: String,
    pub user: String,
    pub account: String,
    pub gpus: i64,
    pub start: UnixSeconds,
    pub end: Option<UnixSeconds>,
}

impl Store {
    /// Store `samples` of `cluster` in one IMMEDIATE transaction: each one unless its key is
    /// there, and added to the rollup (idle below `idle_threshold` percent) when it was new.
    pub fn record_samples<'a>(
        &self,
        cluster: &str,
        samples: impl IntoIterator<Item = &'a Sample>,
        idle_threshold: f64,
        now: UnixSeconds,
    ) -> Result<SamplesOutcome, StoreError> {
        self.record_samples_sql(cluster, samples, idle_threshold, now)
            .map_err(|e| self.sql_err(e))
    }

    // The SQL of the method above; its errors are the store's to name.
    fn record_samples_sql<'a>(
        &self,
        cluster: &str,
        samples: impl IntoIterator<Item = &'a Sample>,
        idle_threshold: f64,
        now: UnixSeconds,
    ) -> rusqlite::Result<SamplesOutcome> {
        let tx = Transaction::new_unchecked(&self.conn, TransactionBehavior::Immediate)?;
        let mut outcome = SamplesOutcome::default();
        for s in samples {
            if insert_sample(&tx, cluster, s, idle_threshold, now)? {
                outcome.inserted += 1;
            } else {
                outcome.duplicates += 1;
            }
        }
        tx.commit()?;
        Ok(outcome)
    }

    /// The rollup's idle time depends on the threshold: when the configured one changed, rebuild
    /// the rollup from the samples (one transaction; the samples are the truth). Returns whether
    /// it was rebuilt.
    pub fn ensure_rollup_threshold(&self, idle_threshold: f64) -> Result<bool, StoreError> {
        self.ensure_rollup_threshold_sql(idle_threshold)
            .map_err(|e| self.sql_err(e))
    }

    // The SQL of the method above; its errors are the store's to name.
    fn ensure_rollup_threshold_sql(&self, idle_threshold: f64) -> rusqlite::Result<bool> {
        let conn = &self.conn;
        if !rollup_is_stale(conn, idle_threshold)? {
            return Ok(false);
        }
        let tx = Transaction::new_unchecked(conn, TransactionBehavior::Immediate)?;
        tx.execute("DELETE FROM gpu_sample_hours", [])?;
        tx.execute(
            "INSERT INTO gpu_sample_hours (cluster, hour_ms, node, gpu_uuid, job_id_raw, job_start,
                 samples, sampled_ms, util_gpu_ms, util_mem_ms, idle_ms, idle_threshold)
             SELECT cluster, (ts_ms / ?2) * ?2, node, gpu_uuid, coalesce(job_id_raw, 0),
                    coalesce(job_start, 0), count(*), sum(interval_ms), sum(util_gpu * interval_ms),
                    sum(util_mem * interval_ms),
                    sum(CASE WHEN util_gpu < ?1 THEN interval_ms ELSE 0 END), ?1
             FROM gpu_samples
             GROUP BY 1, 2, 3, 4, 5, 6",
            params![idle_threshold, HOUR_MS],
        )?;
        tx.commit()?;
        Ok(true)
    }

    /// The samples of `cluster` whose tick is in `period`, summed per job run and GPU, idle
    /// below `idle_threshold` percent. Whole hours are read from the rollup, the partial hours at
    /// the ends from the samples; everything from the samples when the rollup was built with
    /// another threshold.
    pub fn gpu_time_in(
        &self,
        cluster: &str,
        period: Period,
        idle_threshold: f64,
    ) -> Result<PeriodGpuTime, StoreError> {
        self.gpu_time_in_sql(cluster, period, idle_threshold)
            .map_err(|e| self.sql_err(e))
    }

    // The SQL of the method above; its errors are the store's to name.
    fn gpu_time_in_sql(
        &self,
        cluster: &str,
        period: Period,
        idle_threshold: f64,
    ) -> rusqlite::Result<PeriodGpuTime> {
        let (since, until) = (period.since * 1000, period.until * 1000);
        let mixed = rollup_is_stale(&self.conn, idle_threshold)?;
        let first_hour = (since + HOUR_MS - 1).div_euclid(HOUR_MS) * HOUR_MS;
        let last_hour = until.div_euclid(HOUR_MS) * HOUR_MS;
        let mut out = BTreeMap::new();
        let c = cluster;
        let t = idle_threshold;
        if mixed || first_hour >= last_hour {
            self.sums(RAW_SQL, params![c, since, until, t], &mut out)?;
        } else {
            self.sums(RAW_SQL, params![c, since, first_hour, t], &mut out)?;
            self.sums(ROLLUP_SQL, params![c, first_hour, last_hour, t], &mut out)?;
            self.sums(RAW_SQL, params![c, last_hour, until, t], &mut out)?;
        }
        Ok(PeriodGpuTime {
            by_run_gpu: out,
            from_samples: mixed,
        })
    }

    /// Add the rows of `sql` (a [`RunGpu`], then the [`GpuTime`] columns) to `into`.
    fn sums(
        &self,
        sql: &str,
        args: impl rusqlite::Params,
        into: &mut BTreeMap<RunGpu, GpuTime>,
    ) -> rusqlite::Result<()> {
        let mut stmt = self.conn.prepare_cached(sql)?;
        let mut rows = stmt.query(args)?;
        while let Some(r) = rows.next()? {
            let read = || -> rusqlite::Result<(RunGpu, GpuTime)> {
                Ok((
                    RunGpu {
                        job_id_raw: r.get(0)?,
                        job_start: r.get(1)?,
                        gpu_uuid: r.get(2)?,
                    },
                    GpuTime {
                        samples: u64::try_from(r.get::<_, i64>(3)?).unwrap_or(0),
                        sampled_ms: r.get(4)?,
                        util_gpu_ms: r.get(5)?,
                        util_mem_ms: r.get(6)?,
                        idle_ms: r.get(7)?,
                    },
                ))
            };
            let (key, t) = read()?;
            into.entry(key).or_default().add(&t);
        }
        Ok(())
    }

    /// The stored run a job's samples belong to: (JobIDRaw, StartTime) exactly, or, when the
    /// node could not tell the start (`start` 0), the latest run of that job that started before
    /// `until`.
    pub fn run_of_samples(
        &self,
        cluster: &str,
        job_id_raw: u32,
        start: i64,
        until: UnixSeconds,
    ) -> Result<Option<SampledRun>, StoreError> {
        self.run_of_samples_sql(cluster, job_id_raw, start, until)
            .map_err(|e| self.sql_err(e))
    }

    // The SQL of the method above; its errors are the store's to name.
    fn run_of_samples_sql(
        &self,
        cluster: &str,
        job_id_raw: u32,
        start: i64,
        until: UnixSeconds,
    ) -> rusqlite::Result<Option<SampledRun>> {
        let (sql, args) = if start != 0 {
            (
                "SELECT job_id, user, account, gpus, start_time, end_time FROM job_runs
                 WHERE cluster = ?1 AND job_id_raw = ?2 AND start_time = ?3",
                params![cluster, job_id_raw, start],
            )
        } else {
            (
                "SELECT job_id, user, account, gpus, start_time, end_time FROM job_runs
                 WHERE cluster = ?1 AND job_id_raw = ?2 AND start_time < ?3
                 ORDER BY start_time DESC LIMIT 1",
                params![cluster, job_id_raw, until],
            )
        };
        self.conn
            .query_row(sql, args, |r| {
                Ok(SampledRun {
                    job_id: r.get(0)?,
                    user: r.get(1)?,
                    account: r.get(2)?,
                    gpus: r.get(3)?,
                    start: r.get(4)?,
                    end: r.get(5)?,
                })
            })
            .optional()
    }
}

/// Whether the rollup holds rows built with another idle threshold than `idle_threshold`.
fn rollup_is_stale(conn: &Connection, idle_threshold: f64) -> rusqlite::Result<bool> {
    conn.query_row(
        "SELECT EXISTS (SELECT 1 FROM gpu_sample_hours WHERE idle_threshold <> ?1)",
        [idle_threshold],
        |r| r.get(0),
    )
}

/// Store one sample unless its key is there; add it to the rollup when it was new.
fn insert_sample(
    tx: &Transaction<'_>,
    cluster: &str,
    s: &Sample,
    idle_threshold: f64,
    now: UnixSeconds,
) -> rusqlite::Result<bool> {
    let inserted =
        tx.prepare_cached(
            "INSERT OR IGNORE INTO gpu_samples (cluster, node, gpu_uuid, ts_ms, interval_ms, minor,
                 job_id_raw, job_start, util_gpu, util_mem, mem_used, mem_total, processes,
                 imported_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14)",
        )?
        .execute(params![
            cluster,
            s.node,
            s.gpu_uuid,
            s.ts_ms,
            s.interval_ms,
            s.minor,
            s.job_id_raw,
            s.job_start,
            s.util_gpu,
            s.util_mem,
            i64::try_from(s.mem_used).unwrap_or(i64::MAX),
            s.mem_total.map(|t| i64::try_from(t).unwrap_or(i64::MAX)),
            s.processes,
            now
        ])? == 1;
    if inserted {
        let idle = if f64::from(s.util_gpu) < idle_threshold {
            s.interval_ms
        } else {
            0
        };
        tx.prepare_cached(
            "INSERT INTO gpu_sample_hours (cluster, hour_ms, node, gpu_uuid, job_id_raw, job_start,
                 samples, sampled_ms, util_gpu_ms, util_mem_ms, idle_ms, idle_threshold)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, 1, ?7, ?8, ?9, ?10, ?11)
             ON CONFLICT (cluster, hour_ms, node, gpu_uuid, job_id_raw, job_start) DO UPDATE SET
                 samples = samples + 1,
                 sampled_ms = sampled_ms + excluded.sampled_ms,
                 util_gpu_ms = util_gpu_ms + excluded.util_gpu_ms,
                 util_mem_ms = util_mem_ms + excluded.util_mem_ms,
                 idle_ms = idle_ms + excluded.idle_ms",
        )?
        .execute(params![
            cluster,
            s.ts_ms.div_euclid(HOUR_MS) * HOUR_MS,
            s.node,
            s.gpu_uuid,
            s.job_id_raw.unwrap_or(0),
            s.job_start.unwrap_or(0),
            s.interval_ms,
            i64::from(s.util_gpu) * s.interval_ms,
            i64::from(s.util_mem) * s.interval_ms,
            idle,
            idle_threshold
        ])?;
    }
    Ok(inserted)
}

const RAW_SQL: &str = "SELECT coalesce(job_id_raw, 0), coalesce(job_start, 0), gpu_uuid, count(*),
        sum(interval_ms), sum(util_gpu * interval_ms), sum(util_mem * interval_ms),
        sum(CASE WHEN util_gpu < ?4 THEN interval_ms ELSE 0 END)
    FROM gpu_samples WHERE cluster = ?1 AND ts_ms >= ?2 AND ts_ms < ?3
    GROUP BY 1, 2, 3";

const ROLLUP_SQL: &str = "SELECT job_id_raw, job_start, gpu_uuid, sum(samples), sum(sampled_ms),
        sum(util_gpu_ms), sum(util_mem_ms), sum(idle_ms)
    FROM gpu_sample_hours WHERE cluster = ?1 AND hour_ms >= ?2 AND hour_ms < ?3
        AND idle_threshold = ?4
    GROUP BY 1, 2, 3";
