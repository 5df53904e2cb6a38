//! The schema: migrations applied in order, the version in `PRAGMA user_version`.

use rusqlite::Connection;

use super::{Store, StoreError};

/// One schema change. Append only: a released migration is never edited.
pub(super) struct Migration {
    pub(super) version: i64,
    pub(super) sql: &'static str,
}

pub(super) const MIGRATIONS: &[Migration] = &[
    // 1: the first schema. Job runs keyed by what identifies a run in Slurm's accounting
    // (cluster, JobIDRaw, start), with an integer id so that later tables (NVML samples, usage
    // splits) can refer to a run; GPU types in a child table so that costs per type are plain SQL;
    // the ingest watermark per cluster so that a restarted daemon resumes where it stopped.
    Migration {
        version: 1,
        sql: r#"
CREATE TABLE job_runs (
    id           INTEGER PRIMARY KEY,
    cluster      TEXT    NOT NULL,
    job_id_raw   INTEGER NOT NULL,      -- sacct JobIDRaw: unique per job and per array task
    job_id       TEXT    NOT NULL,      -- sacct JobID as users see it: 123, 123_4, 123+0
    account      TEXT    NOT NULL,      -- the Slurm account, i.e. the team
    user         TEXT    NOT NULL,
    partition    TEXT    NOT NULL,
    qos          TEXT    NOT NULL,
    state        TEXT    NOT NULL,      -- verbatim, e.g. 'CANCELLED by 0'
    submit_time  INTEGER,               -- UTC unix seconds
    start_time   INTEGER NOT NULL,      -- UTC unix seconds; runs that never started are not stored
    end_time     INTEGER,               -- NULL while running
    elapsed      INTEGER,               -- seconds, as sacct computes them
    gpus         INTEGER NOT NULL,      -- GPUs in the allocation
    alloc_tres   TEXT    NOT NULL,      -- sacct AllocTRES verbatim
    first_seen   INTEGER NOT NULL,      -- when an ingest first stored this run
    last_seen    INTEGER NOT NULL,      -- when an ingest last read it from sacct
    UNIQUE (cluster, job_id_raw, start_time)
);
CREATE INDEX job_runs_by_start ON job_runs (cluster, start_time);
CREATE INDEX job_runs_running ON job_runs (cluster) WHERE end_time IS NULL;

-- The typed part of a run's GPUs (gres/gpu:<type>=<n> in AllocTRES).
CREATE TABLE job_run_gpu_types (
    run_id   INTEGER NOT NULL REFERENCES job_runs (id) ON DELETE CASCADE,
    gpu_type TEXT    NOT NULL,
    gpus     INTEGER NOT NULL,
    PRIMARY KEY (run_id, gpu_type)
) WITHOUT ROWID;

-- Up to where sacct has been read, per cluster.
CREATE TABLE ingest_state (
    cluster    TEXT    PRIMARY KEY,
    watermark  INTEGER NOT NULL,       -- UTC unix seconds: the end of the last contiguous window
    updated_at INTEGER NOT NULL
);
"#,
    },
    // 2: NVML samples (DESIGN 5, utilisation and waste). One row per GPU per sampling tick, keyed
    // by what identifies a sample whoever delivers it and however often (node, GPU UUID, tick):
    // collecting from the node spools is at-least-once and inserts are `INSERT OR IGNORE`. The
    // job is Slurm's (JobIDRaw, start) as the node saw it, which is the job run's natural key.
    // The hourly rollup is written in the import's transaction from the rows that were really
    // inserted, so that reports over months read hours, not samples; it is rebuilt from the
    // samples when the idle threshold it was built with changes.
    Migration {
        version: 2,
        sql: r#"
CREATE TABLE gpu_samples (
    id          INTEGER PRIMARY KEY,
    cluster     TEXT    NOT NULL,      -- the collecting head's cluster
    node        TEXT    NOT NULL,      -- Slurm node name
    gpu_uuid    TEXT    NOT NULL,      -- NVML UUID, GPU-...; never the NVML index
    ts_ms       INTEGER NOT NULL,      -- the sampling tick, UTC unix milliseconds
    interval_ms INTEGER NOT NULL,      -- the GPU-time this sample stands for
    minor       INTEGER,               -- /dev/nvidia<minor>
    job_id_raw  INTEGER,               -- the job holding the GPU; NULL: none
    job_start   INTEGER,               -- that job's StartTime, UTC unix seconds
    util_gpu    INTEGER NOT NULL,      -- percent of time a kernel ran
    util_mem    INTEGER NOT NULL,      -- percent of time memory was read or written
    mem_used    INTEGER NOT NULL,      -- bytes
    mem_total   INTEGER,               -- bytes
    processes   INTEGER,               -- compute processes; NULL where NVML cannot tell
    imported_at INTEGER NOT NULL,      -- UTC unix seconds
    UNIQUE (node, gpu_uuid, ts_ms)
);
CREATE INDEX gpu_samples_by_time ON gpu_samples (cluster, ts_ms);
CREATE INDEX gpu_samples_by_job ON gpu_samples (cluster, job_id_raw, job_start)
    WHERE job_id_raw IS NOT NULL;

-- Per hour, GPU and job: sums over the samples of gpu_samples whose tick falls in the hour.
-- job_id_raw = 0 and job_start = 0 stand for "held by no job" (a key column cannot be NULL).
CREATE TABLE gpu_sample_hours (
    cluster        TEXT    NOT NULL,
    hour_ms        INTEGER NOT NULL,   -- start of the hour, UTC unix milliseconds
    node           TEXT    NOT NULL,
    gpu_uuid       TEXT    NOT NULL,
    job_id_raw     INTEGER NOT NULL,
    job_start      INTEGER NOT NULL,
    samples        INTEGER NOT NULL,
    sampled_ms     INTEGER NOT NULL,   -- sum of interval_ms
    util_gpu_ms    INTEGER NOT NULL,   -- sum of util_gpu x interval_ms
    util_mem_ms    INTEGER NOT NULL,   -- sum of util_mem x interval_ms
    idle_ms        INTEGER NOT NULL,   -- sum of interval_ms where util_gpu < idle_threshold
    idle_threshold REAL    NOT NULL,   -- the threshold idle_ms was counted with
    PRIMARY KEY (cluster, hour_ms, node, gpu_uuid, job_id_raw, job_start)
) WITHOUT ROWID;
"#,
    },
    // 3: the governed capacity C over time (DESIGN 5: the capacity cost, the idle cost, what the
    // `(pool)` lends). `accountd run` measures C with sinfo and stores a row when it differs from
    // the last one, and at least hourly; each row holds from its instant until the next one.
    // Reports read this step function; a period before the first row counts the sum of quotas.
    // The typed part of C in a child table, as for job runs, so that capacity costs per GPU type
    // are plain SQL.
    Migration {
        version: 3,
        sql: r#"
CREATE TABLE capacity_samples (
    cluster TEXT    NOT NULL,
    ts      INTEGER NOT NULL,      -- UTC unix seconds: C holds from here until the next row
    gpus    INTEGER NOT NULL,      -- GPUs on usable nodes of the governed partitions
    PRIMARY KEY (cluster, ts)
) WITHOUT ROWID;

CREATE TABLE capacity_sample_types (
    cluster  TEXT    NOT NULL,
    ts       INTEGER NOT NULL,
    gpu_type TEXT    NOT NULL,
    gpus     INTEGER NOT NULL,
    PRIMARY KEY (cluster, ts, gpu_type),
    FOREIGN KEY (cluster, ts) REFERENCES capacity_samples (cluster, ts) ON DELETE CASCADE
) WITHOUT ROWID;
"#,
    },
    // 4: ingest at a million records in seconds, reports over millions of runs in a fraction
    // of one (docs/benchmarks.md).
    // - A run that an ingest reads again unchanged is no longer written at all (one upsert that
    //   changes nothing, instead of a rewrite of every row of every window), so `last_seen`
    //   becomes `updated_at`: when an ingest last changed the run.
    // - The typed GPUs move into the run's row (`gpu_types`, `h100=4` or `a100=2,h100=4` in type
    //   order, NULL when untyped): a child row cost an extra statement per typed run at ingest
    //   and a lookup per run in every report.
    // - `run_bounds` keeps the longest finished run per cluster, so that a report reads only the
    //   runs that started at most that long before its period (through `job_runs_by_start`),
    //   plus the running ones (through `job_runs_running`).
    Migration {
        version: 4,
        sql: r#"
ALTER TABLE job_runs RENAME COLUMN last_seen TO updated_at;

ALTER TABLE job_runs ADD COLUMN gpu_types TEXT;
UPDATE job_runs SET gpu_types = (
    SELECT group_concat(t.gpu_type || '=' || t.gpus, ',' ORDER BY t.gpu_type)
    FROM job_run_gpu_types t WHERE t.run_id = job_runs.id
) WHERE id IN (SELECT run_id FROM job_run_gpu_types);
DROP TABLE job_run_gpu_types;

CREATE TABLE run_bounds (
    cluster     TEXT    PRIMARY KEY,
    longest_run INTEGER NOT NULL      -- seconds: max(end_time - start_time) over finished runs
) WITHOUT ROWID;
INSERT INTO run_bounds (cluster, longest_run)
    SELECT cluster, max(end_time - start_time) FROM job_runs
    WHERE end_time IS NOT NULL GROUP BY cluster;
"#,
    },
    // 5 (2026-11-30): runaway runs. A job slurmctld lost stays RUNNING in sacct for ever, and
    // reports and fair-share counted its GPUs without end. The ingest now asks squeue which jobs
    // slurmctld knows; a run sacct says is running whose job squeue no longer lists is clipped:
    // `end_time` becomes the last instant it was known running and `runaway` is set, until sacct
    // itself gives an end (an administrator's `sacctmgr show runaway` fix), which then wins.
    // `squeue_checked_at` is when that list was last read, the "last known running" instant of
    // the jobs it listed.
    Migration {
        version: 5,
        sql: r#"
ALTER TABLE job_runs ADD COLUMN runaway INTEGER NOT NULL DEFAULT 0;
CREATE INDEX job_runs_runaway ON job_runs (cluster, start_time) WHERE runaway;
ALTER TABLE ingest_state ADD COLUMN squeue_checked_at INTEGER;
"#,
    },
    // 6 (issue 13): what `accountd replay` needs to rebuild the demand of a period.
    // - Runs get their eligible time, time limit and node count (sacct Eligible, TimelimitRaw,
    //   NNodes); NULL for runs stored before, until an ingest reads them again.
    // - Jobs that never started (pending when read, or cancelled while pending) were counted and
    //   dropped; they are demand the replay must see. One row per job (JobIDRaw): a pending job
    //   is read again every ingest until it starts or ends, and each read is an upsert that
    //   writes only what changed. A job with runs is never one of them: the ingest does not
    //   store it and deletes the row of a pending job once a run of it is stored, so that the
    //   run's ingest does no extra statement per run (only one per batch, over the pending rows,
    //   through `unstarted_jobs_pending`).
    Migration {
        version: 6,
        sql: r#"
ALTER TABLE job_runs ADD COLUMN eligible_time INTEGER;   -- UTC unix seconds
ALTER TABLE job_runs ADD COLUMN time_limit INTEGER;      -- seconds; NULL: none (UNLIMITED)
ALTER TABLE job_runs ADD COLUMN nnodes INTEGER;

CREATE TABLE unstarted_jobs (
    id            INTEGER PRIMARY KEY,
    cluster       TEXT    NOT NULL,
    job_id_raw    INTEGER NOT NULL,
    job_id        TEXT    NOT NULL,    -- a pending array is one record: 123_[1-100%4]
    account       TEXT    NOT NULL,
    user          TEXT    NOT NULL,
    partition     TEXT    NOT NULL,
    qos           TEXT    NOT NULL,
    state         TEXT    NOT NULL,    -- verbatim: PENDING, 'CANCELLED by 1000', ...
    submit_time   INTEGER,             -- UTC unix seconds
    eligible_time INTEGER,
    end_time      INTEGER,             -- when it ended without starting; NULL while pending
    gpus          INTEGER NOT NULL,    -- GPUs asked for (ReqTRES)
    gpu_types     TEXT,                -- as job_runs.gpu_types: h100=4, NULL when untyped
    time_limit    INTEGER,             -- seconds; NULL: none
    nnodes        INTEGER,
    req_tres      TEXT    NOT NULL,    -- sacct ReqTRES verbatim
    first_seen    INTEGER NOT NULL,    -- when an ingest first stored it
    updated_at    INTEGER NOT NULL,    -- when an ingest last changed it
    UNIQUE (cluster, job_id_raw)
);
CREATE INDEX unstarted_jobs_by_submit ON unstarted_jobs (cluster, submit_time);
CREATE INDEX unstarted_jobs_pending ON unstarted_jobs (cluster) WHERE end_time IS NULL;
"#,
    },
    // Version 7 (issue 29): the governor's idle policy steps (a notice, reclaim-first, a
    // requeue or cancellation, a notice taken back), one row per step acted on, so that
    // `report users` says what the policy did to each user's jobs.
    Migration {
        version: 7,
        sql: r#"
CREATE TABLE idle_policy_steps (
    id          INTEGER PRIMARY KEY,
    cluster     TEXT    NOT NULL,
    ts          INTEGER NOT NULL,    -- when the governor decided it, UTC unix seconds
    job_id_raw  INTEGER NOT NULL,
    run_start   INTEGER NOT NULL,    -- the run it was about (StartTime)
    team        TEXT    NOT NULL,
    user        TEXT    NOT NULL,
    step        TEXT    NOT NULL,    -- notice, reclaim-first, requeue, cancel, cleared
    UNIQUE (cluster, job_id_raw, run_start, step, ts)
);
CREATE INDEX idle_policy_steps_by_ts ON idle_policy_steps (cluster, ts);
"#,
    },
];

/// The schema version this code writes and understands.
pub const SCHEMA_VERSION: i64 = MIGRATIONS[MIGRATIONS.len() - 1].version;

impl Store {
    /// Apply every migration of `migrations` newer than the database, in order, in one
    /// transaction: a failure leaves the database as it was.
    pub(super) fn migrate(&mut self, migrations: &[Migration]) -> Result<(), StoreError> {
        let Some(target) = migrations.last().map(|m| m.version) else {
            return Ok(());
        };
        let path = self.path.clone();
        // IMMEDIATE: two processes opening a fresh database do not both migrate it.
        let (tx, sql_err) = self.immediate()?;
        // Again inside the transaction: another process may have migrated meanwhile.
        let from = user_version(&tx).map_err(&sql_err)?;
        if from > target {
            return Err(StoreError::TooNew {
                path: path.clone(),
                found: from,
                known: target,
            });
        }
        if from == target {
            return Ok(());
        }
        let migrate_err = |source| StoreError::Migrate {
            path: path.clone(),
            from,
            to: target,
            source,
        };
        for m in migrations.iter().filter(|m| m.version > from) {
            tx.execute_batch(m.sql).map_err(migrate_err)?;
        }
        tx.pragma_update(None, "user_version", target)
            .map_err(migrate_err)?;
        tx.commit().map_err(migrate_err)
    }

    pub fn schema_version(&self) -> Result<i64, StoreError> {
        user_version(&self.conn).map_err(|e| self.sql_err(e))
    }
}

pub(super) fn user_version(conn: &Connection) -> rusqlite::Result<i64> {
    conn.query_row("PRAGMA user_version", [], |r| r.get(0))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::tests::{capacity, run};

    #[test]
    fn migrations_are_numbered_in_order() {
        for (i, m) in MIGRATIONS.iter().enumerate() {
            assert_eq!(m.version, i as i64 + 1);
        }
    }

    #[test]
    fn a_failing_migration_leaves_the_database_as_it_was() {
        let conn = Connection::open_in_memory().unwrap();
        let mut store = Store {
            conn,
            path: ":memory:".into(),
            immutable_since: None,
        };
        store.migrate(&MIGRATIONS[..1]).unwrap();
        assert_eq!(store.schema_version().unwrap(), 1);
        let broken = [
            Migration {
                version: 1,
                sql: MIGRATIONS[0].sql,
            },
            Migration {
                version: 2,
                sql: "CREATE TABLE samples (x); THIS IS NOT SQL;",
            },
        ];
        let err = store.migrate(&broken).unwrap_err();
        assert!(
            matches!(err, StoreError::Migrate { from: 1, to: 2, .. }),
            "{err}"
        );
        assert_eq!(store.schema_version().unwrap(), 1);
        let samples: i64 = store
            .connection()
            .query_row(
                "SELECT count(*) FROM sqlite_master WHERE name = 'samples'",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(samples, 0);
    }

    #[test]
    fn a_version_2_database_keeps_its_runs_when_migrated() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("v2.db");
        {
            let conn = Connection::open(&path).unwrap();
            let mut old = Store {
                conn,
                path: "v2".into(),
                immutable_since: None,
            };
            old.migrate(&MIGRATIONS[..2]).unwrap();
            // As version 2's ingest wrote them.
            old.conn
                .execute_batch(
                    "INSERT INTO job_runs (cluster, job_id_raw, start_time, job_id, account, user,
                         partition, qos, state, end_time, gpus, alloc_tres, first_seen, last_seen)
                     VALUES ('c', 1, 100, '1', 'a', 'u', 'gpu', 'normal', 'COMPLETED', 200, 2,
                             'cpu=1,gres/gpu=2,node=1', 1, 1),
                            ('c', 2, 150, '2', 'a', 'u', 'gpu', 'normal', 'RUNNING', NULL, 1,
                             'cpu=1,gres/gpu=1,node=1', 1, 1);
                     UPDATE job_runs SET submit_time = start_time,
                         elapsed = end_time - start_time;
                     INSERT INTO job_run_gpu_types (run_id, gpu_type, gpus)
                     VALUES (2, 'h100', 1), (2, 'a100', 0);",
                )
                .unwrap();
            assert_eq!(old.schema_version().unwrap(), 2);
        }
        let mut store = Store::open(&path).unwrap();
        assert_eq!(store.schema_version().unwrap(), SCHEMA_VERSION);
        let runs = store.runs_overlapping("c", 0, 1000).unwrap();
        assert_eq!(runs.len(), 2);
        let typed = runs.iter().find(|r| r.id == 2).unwrap();
        assert_eq!(
            typed.gpus_by_type.iter().collect::<Vec<_>>(),
            [("a100", 0), ("h100", 1)]
        );
        let text: String = store
            .connection()
            .query_row("SELECT gpu_types FROM job_runs WHERE id = 2", [], |r| {
                r.get(0)
            })
            .unwrap();
        assert_eq!(text, "a100=0,h100=1");
        assert_eq!(store.longest_run("c").unwrap(), 100);
        // The ingest writes to the migrated table. Run 1 as read before version 6 (no eligible
        // time, no node count) is unchanged.
        let mut same = run(1, "a", 100, Some(200), 2);
        (same.eligible, same.nnodes) = (None, None);
        let o = store
            .record_runs(&[same, run(2, "a", 150, Some(900), 1)], 5, None)
            .unwrap();
        assert_eq!((o.unchanged, o.updated), (1, 1));
        assert_eq!(store.longest_run("c").unwrap(), 750);
        assert!(store.record_capacity("c", &capacity(5, 4, &[])).unwrap());
    }

    #[test]
    fn a_version_5_database_gets_the_replay_columns_and_the_jobs_that_never_started() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("v5.db");
        {
            let mut old = Store {
                conn: Connection::open(&path).unwrap(),
                path: "v5".into(),
                immutable_since: None,
            };
            old.migrate(&MIGRATIONS[..5]).unwrap();
            // As version 5's ingest wrote it.
            old.conn
                .execute_batch(
                    "INSERT INTO job_runs (cluster, job_id_raw, start_time, job_id, account, user,
                         partition, qos, state, submit_time, end_time, elapsed, gpus, alloc_tres,
                         first_seen, updated_at)
                     VALUES ('c', 1, 100, '1', 'a', 'u', 'gpu', 'normal', 'COMPLETED', 90, 200,
                             100, 2, 'cpu=1,gres/gpu=2,node=1', 1, 1);",
                )
                .unwrap();
        }
        let mut store = Store::open(&path).unwrap();
        assert_eq!(store.schema_version().unwrap(), SCHEMA_VERSION);
        // The old run is kept, its new columns NULL.
        let cols: (Option<i64>, Option<i64>, Option<i64>, i64) = store
            .connection()
            .query_row(
                "SELECT eligible_time, time_limit, nnodes, gpus FROM job_runs",
                [],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
            )
            .unwrap();
        assert_eq!(cols, (None, None, None, 2));
        let jobs = store.jobs_submitted("c", 0, 1000).unwrap();
        assert_eq!(jobs.started.len(), 1);
        assert_eq!(jobs.started[0].runs[0].time_limit, None);
        assert!(jobs.unstarted.is_empty());
        // Read again by a new ingest, it gets them.
        let mut again = run(1, "a", 100, Some(200), 2);
        again.submit = Some(90);
        (again.eligible, again.time_limit) = (Some(95), Some(3600));
        let o = store.record_runs(&[again], 5, None).unwrap();
        assert_eq!(o.updated, 1);
        let cols: (Option<i64>, Option<i64>, Option<i64>) = store
            .connection()
            .query_row(
                "SELECT eligible_time, time_limit, nnodes FROM job_runs",
                [],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
            )
            .unwrap();
        assert_eq!(cols, (Some(95), Some(3600), Some(1)));
        assert_eq!(crate::store::tests::count(&store, "unstarted_jobs"), 0);
    }
}
