//! Job runs as sacct reports them: the idempotent upserts of the ingest, its watermark, the
//! reads of the reports, and the runaway runs slurmctld lost.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::Arc;

use rusqlite::{params, Connection, OptionalExtension, Statement};

use super::{Store, StoreError, MEMORY};
use crate::period::UnixSeconds;
use crate::sacct::{JobRun, UnstartedJob};

mod users;

pub use users::UserRun;

/// What one batch did to the database.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BatchOutcome {
    /// Runs not seen before.
    pub inserted: usize,
    /// Runs seen before whose recorded facts changed (a running job that ended, a new state).
    pub updated: usize,
    /// Runs seen before, identical.
    pub unchanged: usize,
}

/// What one batch did to the runs and to the jobs that never started.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WriteOutcome {
    pub runs: BatchOutcome,
    /// Jobs that never started; `unchanged` also counts those not stored because the job has
    /// runs (a requeued job waiting to run again).
    pub unstarted: BatchOutcome,
}

/// Moving the ingest watermark of a cluster forward (never back) in the batch's transaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WatermarkAdvance {
    pub cluster: String,
    pub to: UnixSeconds,
}

/// A run sacct says is running whose job slurmctld no longer knows, clipped at `end`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunawayRun {
    pub job_id_raw: u64,
    /// As users see it (`123_4`).
    pub job_id: String,
    pub account: String,
    pub start: UnixSeconds,
    /// The last instant it was known running: where its usage now ends.
    pub end: UnixSeconds,
}

/// A run that started in a period, for admission waits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunStart {
    pub account: String,
    pub submit: UnixSeconds,
    pub start: UnixSeconds,
}

/// A stored run, as reports need it. A report reads hundreds of thousands of them: the account,
/// the partition and the typed GPUs are shared between the runs that have the same, not copied
/// per run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunUsage {
    pub id: i64,
    pub account: Arc<str>,
    /// The partition it ran in, as sacct gives it: runs outside the governed partitions are no
    /// team's quota usage.
    pub partition: Arc<str>,
    pub start: UnixSeconds,
    pub end: Option<UnixSeconds>,
    pub gpus: u64,
    pub gpus_by_type: GpuTypes,
}

/// Start times of runs to read: finished runs that started in `[finished_from, until)`, running
/// ones that started in `[running_from, until)`.
#[derive(Debug, Clone, Copy)]
struct StartRange {
    finished_from: UnixSeconds,
    running_from: UnixSeconds,
    until: UnixSeconds,
}

/// From how long a stretch of start times on [`Store::runs_overlapping`] reads with two
/// connections: below it, a second connection costs more than it saves.
const PARALLEL_READ_SPAN: i64 = 86_400;

/// The typed part of a run's GPUs, in type order; empty for untyped GPUs.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct GpuTypes(Option<Arc<[(String, u64)]>>);

impl GpuTypes {
    pub fn new(by_type: &BTreeMap<String, u64>) -> Self {
        if by_type.is_empty() {
            GpuTypes(None)
        } else {
            GpuTypes(Some(by_type.iter().map(|(t, n)| (t.clone(), *n)).collect()))
        }
    }

    pub fn iter(&self) -> impl Iterator<Item = (&str, u64)> + '_ {
        self.0
            .iter()
            .flat_map(|v| v.iter().map(|(t, n)| (t.as_str(), *n)))
    }

    pub fn get(&self, gpu_type: &str) -> Option<u64> {
        self.iter().find(|&(t, _)| t == gpu_type).map(|(_, n)| n)
    }

    pub fn len(&self) -> usize {
        self.0.as_ref().map_or(0, |v| v.len())
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Store {
    /// Store a batch of runs (insert new ones, update changed ones) and optionally advance the
    /// watermark, all in one transaction.
    pub fn record_runs(
        &mut self,
        runs: &[JobRun],
        seen_at: UnixSeconds,
        watermark: Option<&WatermarkAdvance>,
    ) -> Result<BatchOutcome, StoreError> {
        let mut writer = self.run_writer(seen_at)?;
        writer.write(runs)?;
        Ok(writer.finish(watermark)?.runs)
    }

    /// Store a batch of jobs that never started (see [`RunWriter::write_unstarted`]), in one
    /// transaction.
    pub fn record_unstarted(
        &mut self,
        jobs: &[UnstartedJob],
        seen_at: UnixSeconds,
    ) -> Result<BatchOutcome, StoreError> {
        let mut writer = self.run_writer(seen_at)?;
        writer.write_unstarted(jobs)?;
        Ok(writer.finish(None)?.unstarted)
    }

    /// Begin writing runs: one IMMEDIATE transaction that [`RunWriter::finish`] commits; dropped
    /// unfinished, it is rolled back and nothing it wrote stays.
    pub fn run_writer(&mut self, seen_at: UnixSeconds) -> Result<RunWriter<'_>, StoreError> {
        RunWriter::begin(&self.conn, &self.path, seen_at)
    }

    /// The end of the last contiguous window read from sacct for `cluster`.
    pub fn watermark(&self, cluster: &str) -> Result<Option<UnixSeconds>, StoreError> {
        self.conn
            .query_row(
                "SELECT watermark FROM ingest_state WHERE cluster = ?1",
                [cluster],
                |r| r.get(0),
            )
            .optional()
            .map_err(|e| self.sql_err(e))
    }

    /// The longest finished run stored for `cluster`, in seconds (0 without any).
    pub fn longest_run(&self, cluster: &str) -> Result<i64, StoreError> {
        self.conn
            .query_row(
                "SELECT longest_run FROM run_bounds WHERE cluster = ?1",
                [cluster],
                |r| r.get(0),
            )
            .optional()
            .map(|v| v.unwrap_or(0))
            .map_err(|e| self.sql_err(e))
    }

    /// Runs of `cluster` that overlap `[since, until)`: started before `until` and not ended
    /// by `since` (a run without an end is still running), in no particular order.
    ///
    /// A finished run that overlaps started at most the longest run before `since`, so only
    /// that stretch of `job_runs_by_start` is read; the running ones come from the partial
    /// index `job_runs_running`.
    ///
    /// A database file is read by two connections at once, one on another thread, each for the
    /// runs that started in its half of the stretch (with the running ones that started there):
    /// each run is read by one of them, whatever the daemon writes meanwhile. Where a second
    /// connection cannot be opened (a database in memory), one connection reads it all.
    pub fn runs_overlapping(
        &self,
        cluster: &str,
        since: UnixSeconds,
        until: UnixSeconds,
    ) -> Result<Vec<RunUsage>, StoreError> {
        let longest = self.longest_run(cluster)?;
        let lower = since.saturating_sub(longest);
        let everything = StartRange {
            finished_from: lower,
            running_from: UnixSeconds::MIN,
            until,
        };
        if until.saturating_sub(lower) < PARALLEL_READ_SPAN {
            return self.runs_started_in(cluster, since, everything);
        }
        let Some(other) = self.second_reader() else {
            return self.runs_started_in(cluster, since, everything);
        };
        let middle = lower + (until - lower) / 2;
        let (first, second) = std::thread::scope(|scope| {
            let second = scope.spawn(move || {
                other.runs_started_in(
                    cluster,
                    since,
                    StartRange {
                        finished_from: middle,
                        running_from: middle,
                        until,
                    },
                )
            });
            let first = self.runs_started_in(
                cluster,
                since,
                StartRange {
                    until: middle,
                    ..everything
                },
            );
            (first, second.join())
        });
        let mut runs = first?;
        match second {
            Ok(second) => runs.extend(second?),
            Err(panic) => std::panic::resume_unwind(panic),
        }
        Ok(runs)
    }

    /// Another read-only connection to this database file, if it is one and can be opened.
    fn second_reader(&self) -> Option<Store> {
        if self.path == MEMORY {
            return None;
        }
        Store::open_read_only(Path::new(&self.path)).ok()
    }

    /// The runs of [`Store::runs_overlapping`] that started in `range`.
    fn runs_started_in(
        &self,
        cluster: &str,
        since: UnixSeconds,
        range: StartRange,
    ) -> Result<Vec<RunUsage>, StoreError> {
        let mut stmt = self
            .conn
            .prepare_cached(
                "SELECT id, account, start_time, end_time, gpus, gpu_types, partition FROM job_runs
                 WHERE cluster = ?1 AND start_time < ?3 AND start_time >= ?4 AND end_time > ?2
                 UNION ALL
                 SELECT id, account, start_time, end_time, gpus, gpu_types, partition
                 FROM job_runs INDEXED BY job_runs_running
                 WHERE cluster = ?1 AND end_time IS NULL AND start_time < ?3 AND start_time >= ?5",
            )
            .map_err(|e| self.sql_err(e))?;
        let mut rows = stmt
            .query(params![
                cluster,
                since,
                range.until,
                range.finished_from,
                range.running_from
            ])
            .map_err(|e| self.sql_err(e))?;
        // The few accounts, partitions and GPU type mixes, each read once: a row's text is
        // compared as bytes with the one of the row before (most often the same), then with
        // the others, and only a new one is checked for UTF-8 and kept.
        let (mut accounts, mut last_account) = (Vec::new(), usize::MAX);
        let (mut partitions, mut last_partition) = (Vec::new(), usize::MAX);
        let (mut mixes, mut last_mix): (Vec<(Arc<str>, GpuTypes)>, usize) =
            (Vec::new(), usize::MAX);
        let mut runs = Vec::new();
        let mut next = || -> rusqlite::Result<bool> {
            let Some(row) = rows.next()? else {
                return Ok(false);
            };
            let account = intern(
                &mut accounts,
                &mut last_account,
                row.get_ref(1)?.as_bytes()?,
            )?;
            let partition = intern(
                &mut partitions,
                &mut last_partition,
                row.get_ref(6)?.as_bytes()?,
            )?;
            let gpus_by_type = match row.get_ref(5)?.as_bytes_or_null()? {
                None => GpuTypes::default(),
                Some(text) => {
                    let known = match mixes.get(last_mix) {
                        Some((t, _)) if t.as_bytes() == text => Some(last_mix),
                        _ => mixes.iter().position(|(t, _)| t.as_bytes() == text),
                    };
                    last_mix = match known {
                        Some(i) => i,
                        None => {
                            let text =
                                std::str::from_utf8(text).map_err(rusqlite::Error::Utf8Error)?;
                            mixes.push((Arc::from(text), GpuTypes::new(&parse_gpu_types(text))));
                            mixes.len() - 1
                        }
                    };
                    mixes[last_mix].1.clone()
                }
            };
            runs.push(RunUsage {
                id: row.get(0)?,
                account,
                partition,
                start: row.get(2)?,
                end: row.get(3)?,
                gpus: u64::try_from(row.get::<_, i64>(4)?).unwrap_or(0),
                gpus_by_type,
            });
            Ok(true)
        };
        while next().map_err(|e| self.sql_err(e))? {}
        Ok(runs)
    }

    /// Per account, the runs that Slurm preempted (state `PREEMPTED`) whose end falls in
    /// `[since, until)`.
    pub fn preempted_runs(
        &self,
        cluster: &str,
        since: UnixSeconds,
        until: UnixSeconds,
    ) -> Result<BTreeMap<String, u64>, StoreError> {
        let read = || -> rusqlite::Result<BTreeMap<String, u64>> {
            let mut stmt = self.conn.prepare_cached(
                "SELECT account, count(*) FROM job_runs
                 WHERE cluster = ?1 AND end_time >= ?2 AND end_time < ?3
                   AND state LIKE 'PREEMPTED%'
                 GROUP BY account",
            )?;
            let rows = stmt.query_map(params![cluster, since, until], |r| {
                Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?))
            })?;
            rows.map(|r| r.map(|(a, n)| (a, u64::try_from(n).unwrap_or(0))))
                .collect()
        };
        read().map_err(|e| self.sql_err(e))
    }

    /// Runs with GPUs that started in `[since, until)` and whose submit time is known.
    pub fn runs_started(
        &self,
        cluster: &str,
        since: UnixSeconds,
        until: UnixSeconds,
    ) -> Result<Vec<RunStart>, StoreError> {
        let read = || -> rusqlite::Result<Vec<RunStart>> {
            let mut stmt = self.conn.prepare_cached(
                "SELECT account, submit_time, start_time FROM job_runs
                 WHERE cluster = ?1 AND start_time >= ?2 AND start_time < ?3
                   AND submit_time IS NOT NULL AND gpus > 0
                 ORDER BY start_time",
            )?;
            let rows = stmt.query_map(params![cluster, since, until], |r| {
                Ok(RunStart {
                    account: r.get(0)?,
                    submit: r.get(1)?,
                    start: r.get(2)?,
                })
            })?;
            rows.collect()
        };
        read().map_err(|e| self.sql_err(e))
    }

    /// The account of the latest stored run of job `job_id_raw`, if any.
    pub fn account_of_job(
        &self,
        cluster: &str,
        job_id_raw: u64,
    ) -> Result<Option<String>, StoreError> {
        self.conn
            .query_row(
                "SELECT account FROM job_runs WHERE cluster = ?1 AND job_id_raw = ?2
                 ORDER BY start_time DESC LIMIT 1",
                params![cluster, i64::try_from(job_id_raw).unwrap_or(i64::MAX)],
                |r| r.get(0),
            )
            .optional()
            .map_err(|e| self.sql_err(e))
    }

    /// Clip the runaway runs of `cluster`: runs stored as running (sacct has no end for them)
    /// whose job is not in `known`, the jobs slurmctld listed at `checked_at`, and that started
    /// before then. Each ends at the last instant it was known running: the previous list's
    /// time, which listed it (or its start, if it started after that list); without a previous
    /// list, `checked_at`. Records `checked_at` for the next call. One transaction.
    pub fn clip_runaways(
        &mut self,
        cluster: &str,
        known: &BTreeSet<u64>,
        checked_at: UnixSeconds,
    ) -> Result<Vec<RunawayRun>, StoreError> {
        let (tx, err) = self.immediate()?;
        let previous: Option<UnixSeconds> = tx
            .query_row(
                "SELECT squeue_checked_at FROM ingest_state WHERE cluster = ?1",
                [cluster],
                |r| r.get(0),
            )
            .optional()
            .map_err(&err)?
            .flatten();
        let mut clipped = Vec::new();
        {
            let mut running = tx
                .prepare(
                    "SELECT id, job_id_raw, job_id, account, start_time
                     FROM job_runs INDEXED BY job_runs_running
                     WHERE cluster = ?1 AND end_time IS NULL AND start_time < ?2",
                )
                .map_err(&err)?;
            let rows = running
                .query_map(params![cluster, checked_at], |r| {
                    Ok((
                        r.get::<_, i64>(0)?,
                        r.get::<_, i64>(1)?,
                        r.get::<_, String>(2)?,
                        r.get::<_, String>(3)?,
                        r.get::<_, i64>(4)?,
                    ))
                })
                .map_err(&err)?;
            let mut clip = tx
                .prepare(
                    "UPDATE job_runs SET end_time = ?2, elapsed = ?2 - start_time, runaway = 1,
                         updated_at = ?3
                     WHERE id = ?1",
                )
                .map_err(&err)?;
            let mut longest = 0;
            for row in rows {
                let (id, job, job_id, account, start) = row.map_err(&err)?;
                let job = u64::try_from(job).unwrap_or(0);
                if known.contains(&job) {
                    continue;
                }
                let end = previous.unwrap_or(checked_at).clamp(start, checked_at);
                clip.execute(params![id, end, checked_at]).map_err(&err)?;
                longest = longest.max(end - start);
                clipped.push(RunawayRun {
                    job_id_raw: job,
                    job_id,
                    account,
                    start,
                    end,
                });
            }
            // A clipped run is a finished run: reports find it through the longest one.
            if !clipped.is_empty() {
                tx.execute(
                    "INSERT INTO run_bounds (cluster, longest_run) VALUES (?1, ?2)
                     ON CONFLICT (cluster) DO UPDATE SET
                         longest_run = max(longest_run, excluded.longest_run)",
                    params![cluster, longest],
                )
                .map_err(&err)?;
            }
        }
        tx.execute(
            "UPDATE ingest_state SET squeue_checked_at = ?2 WHERE cluster = ?1",
            params![cluster, checked_at],
        )
        .map_err(&err)?;
        tx.commit().map_err(&err)?;
        Ok(clipped)
    }

    /// The runaway runs of `cluster` (clipped, see [`Store::clip_runaways`]) that overlap
    /// `[since, until)`, by start.
    pub fn runaway_runs(
        &self,
        cluster: &str,
        since: UnixSeconds,
        until: UnixSeconds,
    ) -> Result<Vec<RunawayRun>, StoreError> {
        let read = || -> rusqlite::Result<Vec<RunawayRun>> {
            let mut stmt = self.conn.prepare_cached(
                "SELECT job_id_raw, job_id, account, start_time, end_time
                 FROM job_runs INDEXED BY job_runs_runaway
                 WHERE cluster = ?1 AND runaway AND start_time < ?3 AND end_time > ?2
                 ORDER BY start_time, job_id_raw",
            )?;
            let rows = stmt.query_map(params![cluster, since, until], |r| {
                Ok(RunawayRun {
                    job_id_raw: u64::try_from(r.get::<_, i64>(0)?).unwrap_or(0),
                    job_id: r.get(1)?,
                    account: r.get(2)?,
                    start: r.get(3)?,
                    end: r.get(4)?,
                })
            })?;
            rows.collect()
        };
        read().map_err(|e| self.sql_err(e))
    }
}

/// The page cache while runs are written: the indexes of a year of runs are read and written all
/// over, and SQLite's default (2 MiB) makes every row fetch its pages back through the kernel.
const INGEST_CACHE_KIB: i64 = 64 * 1024;

/// Writes job runs in one transaction: each run with an upsert on its natural key that inserts
/// it, updates it if a recorded fact changed, or leaves it untouched (no write at all), with its
/// typed GPUs. See [`Store::run_writer`].
pub struct RunWriter<'s> {
    conn: &'s Connection,
    path: &'s str,
    upsert: Statement<'s>,
    upsert_unstarted: Statement<'s>,
    seen_at: UnixSeconds,
    /// The longest finished run written, per cluster.
    longest: Vec<(String, i64)>,
    /// The clusters of the runs inserted: a pending job of theirs may have started.
    started_in: Vec<String>,
    /// Jobs that never started written in this batch: a run of theirs later in the same batch
    /// (a requeued job's) makes them jobs that did start.
    unstarted_written: Vec<(String, u32)>,
    outcome: WriteOutcome,
    cache_before: i64,
    open: bool,
}

impl<'s> RunWriter<'s> {
    fn begin(
        conn: &'s Connection,
        path: &'s str,
        seen_at: UnixSeconds,
    ) -> Result<Self, StoreError> {
        let err = |source| StoreError::Sql {
            path: path.to_string(),
            source,
        };
        // Everything that can fail before the transaction opens, so that a failure never
        // leaves it open.
        let upsert = conn.prepare(UPSERT_RUN).map_err(err)?;
        let upsert_unstarted = conn.prepare(UPSERT_UNSTARTED).map_err(err)?;
        let cache_before: i64 = conn
            .query_row("PRAGMA cache_size", [], |r| r.get(0))
            .map_err(err)?;
        conn.execute_batch(&format!("PRAGMA cache_size = -{INGEST_CACHE_KIB}"))
            .map_err(err)?;
        if let Err(e) = conn.execute_batch("BEGIN IMMEDIATE") {
            let _ = conn.execute_batch(&format!("PRAGMA cache_size = {cache_before}"));
            return Err(err(e));
        }
        // From here on, dropping the writer rolls back and restores the cache.
        let writer = RunWriter {
            conn,
            path,
            upsert,
            upsert_unstarted,
            seen_at,
            longest: Vec::new(),
            started_in: Vec::new(),
            unstarted_written: Vec::new(),
            outcome: WriteOutcome::default(),
            cache_before,
            open: true,
        };
        Ok(writer)
    }

    fn err(&self, source: rusqlite::Error) -> StoreError {
        StoreError::Sql {
            path: self.path.to_string(),
            source,
        }
    }

    /// Insert, update or leave alone each run.
    pub fn write(&mut self, runs: &[JobRun]) -> Result<(), StoreError> {
        for run in runs {
            self.write_one(run).map_err(|e| self.err(e))?;
        }
        Ok(())
    }

    fn write_one(&mut self, run: &JobRun) -> rusqlite::Result<()> {
        // An upsert that inserts sets the connection's last rowid; one that updates, or does
        // nothing, leaves it alone. One statement per run: a statement of many rows journals
        // every page it changes, which costs more than it saves.
        let rowid_before = self.conn.last_insert_rowid();
        let gpu_types = gpu_types_text(&run.gpus_by_type);
        let changed = self.upsert.execute(params![
            run.cluster,
            run.job_id_raw,
            run.start,
            run.job_id,
            run.account,
            run.user,
            run.partition,
            run.qos,
            run.state,
            run.submit,
            run.end,
            run.elapsed,
            to_i64(run.gpus),
            run.alloc_tres,
            gpu_types,
            self.seen_at,
            run.eligible,
            run.time_limit,
            run.nnodes
        ])?;
        if changed == 0 {
            self.outcome.runs.unchanged += 1;
            return Ok(());
        }
        if self.conn.last_insert_rowid() != rowid_before {
            self.outcome.runs.inserted += 1;
            if !self.started_in.contains(&run.cluster) {
                self.started_in.push(run.cluster.clone());
            }
        } else {
            self.outcome.runs.updated += 1;
        }
        if let Some(end) = run.end {
            let length = end - run.start;
            match self.longest.iter_mut().find(|(c, _)| *c == run.cluster) {
                Some((_, longest)) => *longest = (*longest).max(length),
                None => self.longest.push((run.cluster.clone(), length)),
            }
        }
        Ok(())
    }

    /// Insert, update or leave alone each job that never started; one whose job has a stored
    /// run is not stored (a requeued job waiting to run again is not a job that never started).
    pub fn write_unstarted(&mut self, jobs: &[UnstartedJob]) -> Result<(), StoreError> {
        for job in jobs {
            self.write_one_unstarted(job).map_err(|e| self.err(e))?;
        }
        Ok(())
    }

    fn write_one_unstarted(&mut self, job: &UnstartedJob) -> rusqlite::Result<()> {
        let rowid_before = self.conn.last_insert_rowid();
        let changed = self.upsert_unstarted.execute(params![
            job.cluster,
            job.job_id_raw,
            job.job_id,
            job.account,
            job.user,
            job.partition,
            job.qos,
            job.state,
            job.submit,
            job.eligible,
            job.end,
            to_i64(job.gpus),
            gpu_types_text(&job.gpus_by_type),
            job.time_limit,
            job.nnodes,
            job.req_tres,
            self.seen_at
        ])?;
        let outcome = &mut self.outcome.unstarted;
        if changed == 0 {
            outcome.unchanged += 1;
            return Ok(());
        }
        if self.conn.last_insert_rowid() != rowid_before {
            outcome.inserted += 1;
        } else {
            outcome.updated += 1;
        }
        self.unstarted_written
            .push((job.cluster.clone(), job.job_id_raw));
        Ok(())
    }

    /// Advance the watermark if asked, and commit.
    pub fn finish(
        mut self,
        watermark: Option<&WatermarkAdvance>,
    ) -> Result<WriteOutcome, StoreError> {
        let conn = self.conn;
        let close = || -> rusqlite::Result<()> {
            // A job that started is not one that never started: the pending ones of a cluster
            // where runs were inserted (the queue, not the history), and those written now.
            for cluster in &self.started_in {
                conn.prepare_cached(
                    "DELETE FROM unstarted_jobs INDEXED BY unstarted_jobs_pending
                     WHERE cluster = ?1 AND end_time IS NULL
                       AND EXISTS (SELECT 1 FROM job_runs r WHERE r.cluster = ?1
                                   AND r.job_id_raw = unstarted_jobs.job_id_raw)",
                )?
                .execute([cluster])?;
            }
            for (cluster, job) in &self.unstarted_written {
                conn.prepare_cached(
                    "DELETE FROM unstarted_jobs WHERE cluster = ?1 AND job_id_raw = ?2
                       AND EXISTS (SELECT 1 FROM job_runs r WHERE r.cluster = ?1
                                   AND r.job_id_raw = ?2)",
                )?
                .execute(params![cluster, job])?;
            }
            for (cluster, longest) in &self.longest {
                conn.execute(
                    "INSERT INTO run_bounds (cluster, longest_run) VALUES (?1, ?2)
                     ON CONFLICT (cluster) DO UPDATE SET
                         longest_run = max(longest_run, excluded.longest_run)",
                    params![cluster, longest],
                )?;
            }
            if let Some(w) = watermark {
                conn.execute(
                    "INSERT INTO ingest_state (cluster, watermark, updated_at) VALUES (?1, ?2, ?3)
                     ON CONFLICT (cluster) DO UPDATE SET
                         watermark = max(watermark, excluded.watermark),
                         updated_at = excluded.updated_at",
                    params![w.cluster, w.to, self.seen_at],
                )?;
            }
            conn.execute_batch("COMMIT")
        };
        close().map_err(|e| self.err(e))?;
        self.open = false;
        Ok(self.outcome)
    }
}

impl Drop for RunWriter<'_> {
    fn drop(&mut self) {
        if self.open {
            let _ = self.conn.execute_batch("ROLLBACK");
        }
        let _ = self
            .conn
            .execute_batch(&format!("PRAGMA cache_size = {}", self.cache_before));
    }
}

/// Insert a run, or update the stored one where any recorded fact differs; a stored run that is
/// identical is not written (no row changes). A runaway run (clipped, see [`Store::clip_runaways`])
/// keeps its clipped end while sacct still has none; once sacct gives an end, sacct wins and the
/// flag goes.
const UPSERT_RUN: &str = "
INSERT INTO job_runs (cluster, job_id_raw, start_time, job_id, account, user, partition, qos,
                      state, submit_time, end_time, elapsed, gpus, alloc_tres, gpu_types,
                      first_seen, updated_at, eligible_time, time_limit, nnodes)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?16, ?17, ?18,
        ?19)
ON CONFLICT (cluster, job_id_raw, start_time) DO UPDATE SET
    job_id = excluded.job_id, account = excluded.account, user = excluded.user,
    partition = excluded.partition, qos = excluded.qos, state = excluded.state,
    submit_time = excluded.submit_time,
    end_time = CASE WHEN runaway AND excluded.end_time IS NULL THEN end_time
                    ELSE excluded.end_time END,
    elapsed = CASE WHEN runaway AND excluded.end_time IS NULL THEN elapsed
                   ELSE excluded.elapsed END,
    runaway = runaway AND excluded.end_time IS NULL,
    gpus = excluded.gpus, alloc_tres = excluded.alloc_tres,
    gpu_types = excluded.gpu_types, updated_at = max(updated_at, excluded.updated_at),
    eligible_time = excluded.eligible_time, time_limit = excluded.time_limit,
    nnodes = excluded.nnodes
WHERE job_id IS NOT excluded.job_id OR account IS NOT excluded.account
   OR user IS NOT excluded.user OR partition IS NOT excluded.partition
   OR qos IS NOT excluded.qos OR state IS NOT excluded.state
   OR submit_time IS NOT excluded.submit_time
   OR ((end_time IS NOT excluded.end_time OR elapsed IS NOT excluded.elapsed)
       AND NOT (runaway AND excluded.end_time IS NULL))
   OR gpus IS NOT excluded.gpus
   OR alloc_tres IS NOT excluded.alloc_tres OR gpu_types IS NOT excluded.gpu_types
   OR eligible_time IS NOT excluded.eligible_time OR time_limit IS NOT excluded.time_limit
   OR nnodes IS NOT excluded.nnodes";

/// Insert a job that never started, or update the stored one where a recorded fact differs
/// (a pending job that was cancelled); identical, or a job with a stored run: nothing written.
const UPSERT_UNSTARTED: &str = "
INSERT INTO unstarted_jobs (cluster, job_id_raw, job_id, account, user, partition, qos, state,
                            submit_time, eligible_time, end_time, gpus, gpu_types, time_limit,
                            nnodes, req_tres, first_seen, updated_at)
SELECT ?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?17
WHERE NOT EXISTS (SELECT 1 FROM job_runs WHERE cluster = ?1 AND job_id_raw = ?2)
ON CONFLICT (cluster, job_id_raw) DO UPDATE SET
    job_id = excluded.job_id, account = excluded.account, user = excluded.user,
    partition = excluded.partition, qos = excluded.qos, state = excluded.state,
    submit_time = excluded.submit_time, eligible_time = excluded.eligible_time,
    end_time = excluded.end_time, gpus = excluded.gpus, gpu_types = excluded.gpu_types,
    time_limit = excluded.time_limit, nnodes = excluded.nnodes, req_tres = excluded.req_tres,
    updated_at = max(updated_at, excluded.updated_at)
WHERE job_id IS NOT excluded.job_id OR account IS NOT excluded.account
   OR user IS NOT excluded.user OR partition IS NOT excluded.partition
   OR qos IS NOT excluded.qos OR state IS NOT excluded.state
   OR submit_time IS NOT excluded.submit_time OR eligible_time IS NOT excluded.eligible_time
   OR end_time IS NOT excluded.end_time OR gpus IS NOT excluded.gpus
   OR gpu_types IS NOT excluded.gpu_types OR time_limit IS NOT excluded.time_limit
   OR nnodes IS NOT excluded.nnodes OR req_tres IS NOT excluded.req_tres";

/// The typed GPUs as stored in `job_runs.gpu_types`: `a100=2,h100=4` in type order; None when
/// there are none.
pub(super) fn gpu_types_text(by_type: &BTreeMap<String, u64>) -> Option<String> {
    let mut text = String::new();
    for (gpu_type, n) in by_type {
        if !text.is_empty() {
            text.push(',');
        }
        text.push_str(gpu_type);
        text.push('=');
        text.push_str(&n.to_string());
    }
    (!text.is_empty()).then_some(text)
}

/// The string of `seen` whose bytes are `bytes`, `seen[*last]` tried first; a new one is checked
/// for UTF-8 and added. `*last` becomes its index.
fn intern(seen: &mut Vec<Arc<str>>, last: &mut usize, bytes: &[u8]) -> rusqlite::Result<Arc<str>> {
    let found = match seen.get(*last) {
        Some(s) if s.as_bytes() == bytes => Some(*last),
        _ => seen.iter().position(|s| s.as_bytes() == bytes),
    };
    *last = match found {
        Some(i) => i,
        None => {
            let text = std::str::from_utf8(bytes).map_err(rusqlite::Error::Utf8Error)?;
            seen.push(Arc::from(text));
            seen.len() - 1
        }
    };
    Ok(seen[*last].clone())
}

/// Read `job_runs.gpu_types` back; an entry that does not read is skipped (the column is only
/// written by [`gpu_types_text`]).
pub(super) fn parse_gpu_types(text: &str) -> BTreeMap<String, u64> {
    text.split(',')
        .filter_map(|entry| {
            let (gpu_type, n) = entry.split_once('=')?;
            Some((gpu_type.to_string(), n.parse().ok()?))
        })
        .collect()
}

fn to_i64(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests;
