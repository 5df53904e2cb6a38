//! The accounting database: SQLite, its schema and migrations, and idempotent writes.
//!
//! - The schema version lives in `PRAGMA user_version`; migrations run in order, all in one
//!   transaction, and a database newer than this code is refused before anything is written to it.
//! - WAL with `synchronous=NORMAL`: readers (reports) never block the ingest, and a crash loses at
//!   most the last transactions, never consistency.
//! - Every write is an upsert on a natural key, one transaction per batch, so that reading the
//!   same sacct output twice, or overlapping windows, changes nothing.
//! - Who may read it (DESIGN 7): the file holds every team's jobs and costs. A new database (and
//!   so its `-wal` and `-shm`, which SQLite creates with the database's mode and owner) is made
//!   0600, or 0640 with its directory's group where that directory is open to its group and not
//!   listable by others (`install -d -m 0750 -g teamshare-admins`, or 0751); directories made for
//!   it are 0700. Reports open it read-only ([`Store::open_read_only`]).

use std::collections::{BTreeMap, BTreeSet};
use std::os::unix::fs::{DirBuilderExt as _, MetadataExt as _, OpenOptionsExt as _};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use rusqlite::{
    params, Connection, OpenFlags, OptionalExtension, Statement, Transaction, TransactionBehavior,
};

use crate::period::UnixSeconds;
use crate::sacct::JobRun;

/// One schema change. Append only: a released migration is never edited.
struct Migration {
    version: i64,
    sql: &'static str,
}

const MIGRATIONS: &[Migration] = &[
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
];

/// How often an unchanged capacity is written again, so that a report can see that it was
/// measured (and when the daemon stopped measuring).
pub const CAPACITY_HEARTBEAT_SECONDS: i64 = 3600;

/// The schema version this code writes and understands.
pub const SCHEMA_VERSION: i64 = MIGRATIONS[MIGRATIONS.len() - 1].version;

/// The page size of a new database: SQLite's largest, not its 4 KiB, so that the indexes of
/// millions of runs are shallower and an ingest splits fewer pages (docs/design/accounting-store.md).
const PAGE_SIZE: u32 = 65_536;

/// How long a writer waits for another one (the daemon and a manual ingest) before failing.
const BUSY_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("cannot create the directory {path} for the database: {source}")]
    CreateDir {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot open the database {path}: {source}")]
    Open {
        path: String,
        source: rusqlite::Error,
    },
    #[error("the database {path} has schema version {found}, newer than this accountd understands ({known}); it was left untouched: use the accountd that wrote it, or a newer one")]
    TooNew {
        path: String,
        found: i64,
        known: i64,
    },
    #[error("cannot migrate the database {path} from schema version {from} to {to}: {source}")]
    Migrate {
        path: String,
        from: i64,
        to: i64,
        source: rusqlite::Error,
    },
    #[error("database {path}: {source}")]
    Sql {
        path: String,
        source: rusqlite::Error,
    },
    #[error("cannot create the database {path}: {source}")]
    CreateFile {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("no database at {path}")]
    Missing { path: PathBuf },
    // One line that says who may read it and what to do, never SQLite's "unable to open".
    #[error("cannot read the database {path}: permission denied; it holds every team's jobs and costs and is readable only by {readers} ({hint})")]
    NotReadable {
        path: PathBuf,
        readers: String,
        hint: String,
    },
    #[error("the database {path} has schema version {found}, older than this accountd ({known}); `accountd run` or `accountd ingest`, as the user that owns it, upgrades it")]
    Outdated {
        path: String,
        found: i64,
        known: i64,
    },
}

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

/// Moving the ingest watermark of a cluster forward (never back) in the batch's transaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WatermarkAdvance {
    pub cluster: String,
    pub to: UnixSeconds,
}

/// The governed capacity from an instant on (a row of `capacity_samples`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CapacitySample {
    pub ts: UnixSeconds,
    pub gpus: u32,
    /// The typed part; GPUs without a type are `gpus` minus their sum.
    pub by_type: BTreeMap<String, u32>,
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

/// The `path` of a database in memory.
const MEMORY: &str = ":memory:";

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

pub struct Store {
    conn: Connection,
    /// For messages: the file, or `:memory:`.
    path: String,
    /// Set when the database is read as immutable ([`Store::open_read_only`]): the file as it was
    /// when opened, to tell whether it changed under the reader.
    immutable_since: Option<FileStamp>,
}

/// What tells that a file's content may have changed.
#[derive(Debug, Clone, PartialEq, Eq)]
struct FileStamp {
    len: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
    ino: u64,
}

impl FileStamp {
    fn of(path: &Path) -> std::io::Result<FileStamp> {
        let m = std::fs::metadata(path)?;
        Ok(FileStamp {
            len: m.len(),
            mtime: (m.mtime(), m.mtime_nsec()),
            ctime: (m.ctime(), m.ctime_nsec()),
            ino: m.ino(),
        })
    }
}

/// The mode of a new database file, and the group to give it: 0600, or 0640 with the directory's
/// group where the directory lets its group list and enter it (g+rx) and does not let others list
/// it (o-r; o+x stays possible, so that slurmctld can reach a state.json beside it): that is how
/// an administrator says "this group may read the accounting" (README, "Who can read what"). A
/// world-listable directory (0755, a current directory) says nothing about its group.
fn new_database_mode(dir: &std::fs::Metadata) -> (u32, Option<u32>) {
    let mode = dir.mode() & 0o777;
    if mode & 0o050 == 0o050 && mode & 0o004 == 0 {
        (0o640, Some(dir.gid()))
    } else {
        (0o600, None)
    }
}

/// Create the database file, empty, with its mode and group, unless it exists. SQLite creates
/// the `-wal` and `-shm` files with the database's mode and owner, so they follow.
fn create_database_file(path: &Path) -> Result<(), StoreError> {
    let err = |source| StoreError::CreateFile {
        path: path.to_path_buf(),
        source,
    };
    let dir = match path.parent().filter(|p| !p.as_os_str().is_empty()) {
        Some(d) => d.to_path_buf(),
        None => PathBuf::from("."),
    };
    let (mode, group) = new_database_mode(&std::fs::metadata(&dir).map_err(err)?);
    let file = match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(path)
    {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => return Ok(()),
        Err(e) => return Err(err(e)),
    };
    // Without a setgid directory a new file takes the process's group, not the directory's.
    if let Some(gid) = group {
        let current = file.metadata().map_err(err)?.gid();
        if current != gid {
            if let Err(e) = std::os::unix::fs::fchown(&file, None, Some(gid)) {
                drop(file);
                let _ = std::fs::remove_file(path);
                return Err(err(std::io::Error::new(
                    e.kind(),
                    format!("cannot give it the group of its directory (gid {gid}): {e}; make the directory setgid (chmod g+s) or run accountd as a member of that group"),
                )));
            }
        }
    }
    Ok(())
}

/// A warning when the database (or its `-wal`/`-shm`) is readable by every local user: files made
/// by an older accountd were 0644.
pub fn exposure_warning(path: &Path) -> Option<String> {
    let exposed: Vec<String> = ["", "-wal", "-shm"]
        .iter()
        .filter_map(|suffix| {
            let mut p = path.as_os_str().to_owned();
            p.push(suffix);
            let m = std::fs::metadata(&p).ok()?;
            (m.mode() & 0o004 != 0).then(|| {
                format!(
                    "{} (mode {:04o})",
                    PathBuf::from(p).display(),
                    m.mode() & 0o7777
                )
            })
        })
        .collect();
    if exposed.is_empty() {
        return None;
    }
    Some(format!(
        "{} readable by every local user, yet the database holds every team's jobs and costs: `chmod o-rwx {}*` keeps it to its owner and group",
        exposed.join(", "),
        path.display()
    ))
}

/// `name` of `id` in an `/etc/passwd`-style file (`name:x:id:...`), else the number.
fn name_of(file: &str, id: u32) -> String {
    std::fs::read_to_string(file)
        .ok()
        .and_then(|text| {
            text.lines().find_map(|l| {
                let mut f = l.split(':');
                let name = f.next()?;
                (f.nth(1)?.parse::<u32>().ok()? == id).then(|| name.to_string())
            })
        })
        .unwrap_or_else(|| id.to_string())
}

/// Who may read `path`, and what to do about it, for [`StoreError::NotReadable`].
fn readers_of(path: &Path) -> (String, String) {
    // The file itself may be out of sight (a closed directory): say what is known.
    let Ok(m) = std::fs::metadata(path)
        .or_else(|_| std::fs::metadata(path.parent().unwrap_or_else(|| Path::new("."))))
    else {
        return (
            "its owner".into(),
            "run the report as the user accountd runs as".into(),
        );
    };
    let user = name_of("/etc/passwd", m.uid());
    if m.mode() & 0o040 != 0 {
        let group = name_of("/etc/group", m.gid());
        (
            format!("user {user} and group {group}"),
            format!("run it as {user} or ask an administrator to add you to group {group}"),
        )
    } else {
        (
            format!("user {user}"),
            format!("run it as {user}; to let a group read reports, see \"Who can read what\" in the README"),
        )
    }
}

/// `path` as an SQLite URI filename (`file:` + percent-encoded path).
fn uri_of(path: &Path) -> String {
    let mut uri = String::from("file:");
    for b in path.as_os_str().as_encoded_bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'/' | b'-' | b'_' | b'.' | b'~' => {
                uri.push(char::from(*b))
            }
            _ => uri.push_str(&format!("%{b:02X}")),
        }
    }
    uri
}

fn wal_of(path: &Path) -> PathBuf {
    let mut p = path.as_os_str().to_owned();
    p.push("-wal");
    PathBuf::from(p)
}

impl Store {
    /// Open (creating the file and its parent directories) and bring the schema up to date.
    pub fn open(path: &Path) -> Result<Store, StoreError> {
        if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            // Only the directories made here are 0700; an existing one keeps its mode.
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(parent)
                .map_err(|source| StoreError::CreateDir {
                    path: parent.to_path_buf(),
                    source,
                })?;
        }
        create_database_file(path)?;
        let display = path.display().to_string();
        let conn = Connection::open(path).map_err(|source| StoreError::Open {
            path: display.clone(),
            source,
        })?;
        Store::init(conn, display)
    }

    /// A private database in memory (tests).
    pub fn open_in_memory() -> Result<Store, StoreError> {
        let conn = Connection::open_in_memory().map_err(|source| StoreError::Open {
            path: MEMORY.into(),
            source,
        })?;
        Store::init(conn, MEMORY.into())
    }

    /// Open an existing database for reading only (reports): never created, migrated or written,
    /// so that a user who may read the file but not write its directory can read it.
    ///
    /// A WAL database is read through its `-shm` and `-wal`, which exist while `accountd run`
    /// has it open. When it is closed they are gone and a reader that cannot create them cannot
    /// open it read-only; the database file then holds every committed transaction (the last
    /// connection checkpointed into it), so it is read as `immutable`. A writer that opens it
    /// meanwhile writes to a new `-wal`, not to the file, until a checkpoint: the file's stamp is
    /// kept and [`Store::changed_while_read`] tells the caller to read again if it moved.
    pub fn open_read_only(path: &Path) -> Result<Store, StoreError> {
        let display = path.display().to_string();
        // Asked first, so that a user who may not read it gets a plain answer, not SQLite's.
        if let Err(e) = std::fs::File::open(path) {
            return Err(match e.kind() {
                std::io::ErrorKind::NotFound => StoreError::Missing {
                    path: path.to_path_buf(),
                },
                std::io::ErrorKind::PermissionDenied => {
                    let (readers, hint) = readers_of(path);
                    StoreError::NotReadable {
                        path: path.to_path_buf(),
                        readers,
                        hint,
                    }
                }
                _ => StoreError::CreateFile {
                    path: path.to_path_buf(),
                    source: e,
                },
            });
        }
        let open_err = |source| StoreError::Open {
            path: display.clone(),
            source,
        };
        let flags = OpenFlags::SQLITE_OPEN_READ_ONLY
            | OpenFlags::SQLITE_OPEN_URI
            | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let conn = Connection::open_with_flags(uri_of(path), flags).map_err(open_err)?;
        conn.busy_timeout(BUSY_TIMEOUT).map_err(open_err)?;
        let (conn, immutable_since) = match user_version(&conn) {
            Ok(_) => (conn, None),
            Err(e) if cannot_open_wal(&e) && !wal_of(path).exists() => {
                drop(conn);
                let stamp = FileStamp::of(path).map_err(|source| StoreError::CreateFile {
                    path: path.to_path_buf(),
                    source,
                })?;
                let conn =
                    Connection::open_with_flags(format!("{}?immutable=1", uri_of(path)), flags)
                        .map_err(open_err)?;
                (conn, Some(stamp))
            }
            Err(e) => return Err(open_err(e)),
        };
        let found = user_version(&conn).map_err(open_err)?;
        check_not_newer(&display, found)?;
        if found < SCHEMA_VERSION {
            return Err(StoreError::Outdated {
                path: display,
                found,
                known: SCHEMA_VERSION,
            });
        }
        conn.execute_batch("PRAGMA foreign_keys = ON;")
            .map_err(open_err)?;
        Ok(Store {
            conn,
            path: display,
            immutable_since,
        })
    }

    /// Whether a database read as immutable changed since it was opened (what was read may then
    /// mix two states: read again). Always false for an ordinary connection.
    pub fn changed_while_read(&self) -> bool {
        match &self.immutable_since {
            None => false,
            Some(stamp) => FileStamp::of(Path::new(&self.path)).ok().as_ref() != Some(stamp),
        }
    }

    /// Whether the database is read as immutable (closed, and its directory not writable).
    pub fn is_immutable(&self) -> bool {
        self.immutable_since.is_some()
    }

    fn init(conn: Connection, path: String) -> Result<Store, StoreError> {
        let open_err = |source| StoreError::Open {
            path: path.clone(),
            source,
        };
        conn.busy_timeout(BUSY_TIMEOUT).map_err(open_err)?;
        // Refuse a newer database before anything writes to it (setting WAL writes the header).
        // Reading the version is also what fails on a file that is not a database.
        let found = user_version(&conn).map_err(open_err)?;
        check_not_newer(&path, found)?;
        // Only a new, empty file takes a page size (a WAL database keeps the one it has).
        conn.execute_batch(&format!("PRAGMA page_size = {PAGE_SIZE}"))
            .map_err(open_err)?;
        conn.query_row("PRAGMA journal_mode = WAL", [], |_| Ok(()))
            .map_err(open_err)?;
        conn.execute_batch("PRAGMA synchronous = NORMAL; PRAGMA foreign_keys = ON;")
            .map_err(open_err)?;
        let mut store = Store {
            conn,
            path,
            immutable_since: None,
        };
        // Only a database that needs it is written to: an up-to-date one can be read by a
        // report without taking the write lock.
        if found < SCHEMA_VERSION {
            store.migrate(MIGRATIONS)?;
        }
        Ok(store)
    }

    /// Apply every migration of `migrations` newer than the database, in order, in one
    /// transaction: a failure leaves the database as it was.
    fn migrate(&mut self, migrations: &[Migration]) -> Result<(), StoreError> {
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

    /// Begin an IMMEDIATE transaction (writers queue up instead of failing on upgrade), with
    /// the error maker to use while it borrows the connection.
    fn immediate(
        &mut self,
    ) -> Result<(Transaction<'_>, impl Fn(rusqlite::Error) -> StoreError), StoreError> {
        let path = self.path.clone();
        let err = move |source| StoreError::Sql {
            path: path.clone(),
            source,
        };
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(&err)?;
        Ok((tx, err))
    }

    fn sql_err(&self, source: rusqlite::Error) -> StoreError {
        StoreError::Sql {
            path: self.path.clone(),
            source,
        }
    }

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
        writer.finish(watermark)
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

    /// Store the capacity measured at `ts` unless it equals the last stored one and that one is
    /// younger than [`CAPACITY_HEARTBEAT_SECONDS`]. Returns whether a row was written. A sample
    /// at or before the last stored instant (a clock set back) is not written.
    pub fn record_capacity(
        &mut self,
        cluster: &str,
        sample: &CapacitySample,
    ) -> Result<bool, StoreError> {
        let (tx, err) = self.immediate()?;
        let last = last_capacity_before(&tx, cluster, UnixSeconds::MAX).map_err(&err)?;
        let write = match &last {
            None => true,
            Some(last) if sample.ts <= last.ts => false,
            Some(last) => {
                (last.gpus, &last.by_type) != (sample.gpus, &sample.by_type)
                    || sample.ts - last.ts >= CAPACITY_HEARTBEAT_SECONDS
            }
        };
        if write {
            tx.execute(
                "INSERT OR IGNORE INTO capacity_samples (cluster, ts, gpus) VALUES (?1, ?2, ?3)",
                params![cluster, sample.ts, sample.gpus],
            )
            .map_err(&err)?;
            let mut stmt = tx
                .prepare_cached(
                    "INSERT OR IGNORE INTO capacity_sample_types (cluster, ts, gpu_type, gpus)
                     VALUES (?1, ?2, ?3, ?4)",
                )
                .map_err(&err)?;
            for (gpu_type, n) in &sample.by_type {
                stmt.execute(params![cluster, sample.ts, gpu_type, n])
                    .map_err(&err)?;
            }
        }
        tx.commit().map_err(&err)?;
        Ok(write)
    }

    /// The capacity step function over `[since, until)`: the sample in force at `since` (the
    /// last one at or before it), then every sample inside the period, in time order.
    pub fn capacity_history(
        &self,
        cluster: &str,
        since: UnixSeconds,
        until: UnixSeconds,
    ) -> Result<Vec<CapacitySample>, StoreError> {
        let read = || -> rusqlite::Result<Vec<CapacitySample>> {
            let mut out: Vec<CapacitySample> = last_capacity_before(&self.conn, cluster, since)?
                .into_iter()
                .collect();
            let mut stmt = self.conn.prepare_cached(
                "SELECT s.ts, s.gpus, t.gpu_type, t.gpus
                 FROM capacity_samples s LEFT JOIN capacity_sample_types t
                   ON t.cluster = s.cluster AND t.ts = s.ts
                 WHERE s.cluster = ?1 AND s.ts > ?2 AND s.ts < ?3
                 ORDER BY s.ts, t.gpu_type",
            )?;
            let mut rows = stmt.query(params![cluster, since, until])?;
            while let Some(r) = rows.next()? {
                let ts: i64 = r.get(0)?;
                if out.last().map(|s| s.ts) != Some(ts) {
                    out.push(CapacitySample {
                        ts,
                        gpus: r.get(1)?,
                        by_type: BTreeMap::new(),
                    });
                }
                if let (Some(t), Some(last)) = (r.get::<_, Option<String>>(2)?, out.last_mut()) {
                    last.by_type.insert(t, r.get(3)?);
                }
            }
            Ok(out)
        };
        read().map_err(|e| self.sql_err(e))
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

    /// The connection, for reads that have no method yet (and tests).
    pub fn connection(&self) -> &Connection {
        &self.conn
    }
}

/// The last capacity sample of `cluster` at or before `at`.
fn last_capacity_before(
    conn: &Connection,
    cluster: &str,
    at: UnixSeconds,
) -> rusqlite::Result<Option<CapacitySample>> {
    let head: Option<(i64, u32)> = conn
        .prepare_cached(
            "SELECT ts, gpus FROM capacity_samples WHERE cluster = ?1 AND ts <= ?2
             ORDER BY ts DESC LIMIT 1",
        )?
        .query_row(params![cluster, at], |r| Ok((r.get(0)?, r.get(1)?)))
        .optional()?;
    let Some((ts, gpus)) = head else {
        return Ok(None);
    };
    let mut stmt = conn.prepare_cached(
        "SELECT gpu_type, gpus FROM capacity_sample_types WHERE cluster = ?1 AND ts = ?2",
    )?;
    let by_type = stmt
        .query_map(params![cluster, ts], |r| Ok((r.get(0)?, r.get(1)?)))?
        .collect::<rusqlite::Result<BTreeMap<String, u32>>>()?;
    Ok(Some(CapacitySample { ts, gpus, by_type }))
}

/// The errors of a read-only connection that needed to create the `-wal` or `-shm` of a WAL
/// database in a directory it cannot write.
fn cannot_open_wal(e: &rusqlite::Error) -> bool {
    matches!(
        e.sqlite_error_code(),
        Some(rusqlite::ErrorCode::ReadOnly | rusqlite::ErrorCode::CannotOpen)
    )
}

fn user_version(conn: &Connection) -> rusqlite::Result<i64> {
    conn.query_row("PRAGMA user_version", [], |r| r.get(0))
}

fn check_not_newer(path: &str, found: i64) -> Result<(), StoreError> {
    if found > SCHEMA_VERSION {
        Err(StoreError::TooNew {
            path: path.to_string(),
            found,
            known: SCHEMA_VERSION,
        })
    } else {
        Ok(())
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
    seen_at: UnixSeconds,
    /// The longest finished run written, per cluster.
    longest: Vec<(String, i64)>,
    outcome: BatchOutcome,
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
            seen_at,
            longest: Vec::new(),
            outcome: BatchOutcome::default(),
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
            self.seen_at
        ])?;
        if changed == 0 {
            self.outcome.unchanged += 1;
            return Ok(());
        }
        if self.conn.last_insert_rowid() != rowid_before {
            self.outcome.inserted += 1;
        } else {
            self.outcome.updated += 1;
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

    /// Advance the watermark if asked, and commit.
    pub fn finish(
        mut self,
        watermark: Option<&WatermarkAdvance>,
    ) -> Result<BatchOutcome, StoreError> {
        let conn = self.conn;
        let close = || -> rusqlite::Result<()> {
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
                      first_seen, updated_at)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?16)
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
    gpu_types = excluded.gpu_types, updated_at = max(updated_at, excluded.updated_at)
WHERE job_id IS NOT excluded.job_id OR account IS NOT excluded.account
   OR user IS NOT excluded.user OR partition IS NOT excluded.partition
   OR qos IS NOT excluded.qos OR state IS NOT excluded.state
   OR submit_time IS NOT excluded.submit_time
   OR ((end_time IS NOT excluded.end_time OR elapsed IS NOT excluded.elapsed)
       AND NOT (runaway AND excluded.end_time IS NULL))
   OR gpus IS NOT excluded.gpus
   OR alloc_tres IS NOT excluded.alloc_tres OR gpu_types IS NOT excluded.gpu_types";

/// The typed GPUs as stored in `job_runs.gpu_types`: `a100=2,h100=4` in type order; None when
/// there are none.
fn gpu_types_text(by_type: &BTreeMap<String, u64>) -> Option<String> {
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
fn parse_gpu_types(text: &str) -> BTreeMap<String, u64> {
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
pub(crate) mod tests {
    use super::*;

    pub(crate) fn run(job: u32, account: &str, start: i64, end: Option<i64>, gpus: u64) -> JobRun {
        JobRun {
            cluster: "c".into(),
            job_id_raw: job,
            job_id: job.to_string(),
            account: account.into(),
            user: "u".into(),
            partition: "gpu".into(),
            qos: "normal".into(),
            state: if end.is_some() {
                "COMPLETED"
            } else {
                "RUNNING"
            }
            .into(),
            submit: Some(start),
            start,
            end,
            elapsed: end.map(|e| e - start),
            gpus,
            gpus_by_type: BTreeMap::new(),
            alloc_tres: format!("cpu=1,gres/gpu={gpus},node=1"),
        }
    }

    fn count(store: &Store, table: &str) -> i64 {
        store
            .connection()
            .query_row(&format!("SELECT count(*) FROM {table}"), [], |r| r.get(0))
            .unwrap()
    }

    #[test]
    fn a_fresh_database_gets_the_current_schema() {
        let store = Store::open_in_memory().unwrap();
        assert_eq!(store.schema_version().unwrap(), SCHEMA_VERSION);
        assert_eq!(count(&store, "job_runs"), 0);
        assert_eq!(count(&store, "ingest_state"), 0);
    }

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
    fn a_file_database_is_created_with_its_directories_in_wal_mode() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a/b/accountd.db");
        let store = Store::open(&path).unwrap();
        assert!(path.exists());
        let mode: String = store
            .connection()
            .query_row("PRAGMA journal_mode", [], |r| r.get(0))
            .unwrap();
        assert_eq!(mode, "wal");
        drop(store);
        // Reopening an up-to-date database is a no-op.
        let store = Store::open(&path).unwrap();
        assert_eq!(store.schema_version().unwrap(), SCHEMA_VERSION);
    }

    #[test]
    fn a_newer_database_is_refused_and_left_untouched() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("future.db");
        {
            let conn = Connection::open(&path).unwrap();
            conn.execute_batch("CREATE TABLE from_the_future (x); PRAGMA user_version = 99;")
                .unwrap();
        }
        let before = std::fs::read(&path).unwrap();
        let err = Store::open(&path).err().expect("refused");
        assert!(matches!(err, StoreError::TooNew { found: 99, .. }), "{err}");
        assert!(err.to_string().contains("left untouched"));
        assert_eq!(std::fs::read(&path).unwrap(), before);
        assert!(!dir.path().join("future.db-wal").exists());
    }

    #[test]
    fn a_file_that_is_not_a_database_is_a_clear_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.db");
        std::fs::write(
            &path,
            "this is not sqlite, and long enough to have a header",
        )
        .unwrap();
        let err = Store::open(&path).err().expect("refused");
        assert!(
            err.to_string().contains(&path.display().to_string()),
            "{err}"
        );
    }

    #[test]
    fn the_same_batch_twice_changes_nothing() {
        let mut store = Store::open_in_memory().unwrap();
        let mut typed = run(2, "b", 100, Some(200), 2);
        typed.gpus_by_type.insert("h100".into(), 2);
        let batch = vec![run(1, "a", 100, Some(200), 1), typed];
        let first = store.record_runs(&batch, 1000, None).unwrap();
        assert_eq!(first.inserted, 2);
        let dump = |s: &Store| -> Vec<(i64, String, Option<i64>, i64)> {
            let mut st = s
                .connection()
                .prepare("SELECT id, state, end_time, first_seen FROM job_runs ORDER BY id")
                .unwrap();
            let v = st
                .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))
                .unwrap()
                .collect::<Result<_, _>>()
                .unwrap();
            v
        };
        let before = dump(&store);
        let second = store.record_runs(&batch, 2000, None).unwrap();
        assert_eq!(
            second,
            BatchOutcome {
                inserted: 0,
                updated: 0,
                unchanged: 2
            }
        );
        assert_eq!(dump(&store), before);
        assert_eq!(count(&store, "job_runs"), 2);
        let typed: Vec<Option<String>> = store
            .connection()
            .prepare("SELECT gpu_types FROM job_runs ORDER BY id")
            .unwrap()
            .query_map([], |r| r.get(0))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(typed, [None, Some("h100=2".to_string())]);
    }

    #[test]
    fn a_running_job_is_updated_when_it_completes() {
        let mut store = Store::open_in_memory().unwrap();
        store
            .record_runs(&[run(1, "a", 100, None, 4)], 1000, None)
            .unwrap();
        let done = run(1, "a", 100, Some(500), 4);
        let o = store.record_runs(&[done], 2000, None).unwrap();
        assert_eq!(o.updated, 1);
        let (state, end, first, last): (String, Option<i64>, i64, i64) = store
            .connection()
            .query_row(
                "SELECT state, end_time, first_seen, updated_at FROM job_runs",
                [],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
            )
            .unwrap();
        assert_eq!(
            (state.as_str(), end, first, last),
            ("COMPLETED", Some(500), 1000, 2000)
        );
        assert_eq!(count(&store, "job_runs"), 1);
    }

    #[test]
    fn requeued_runs_are_distinct_rows() {
        let mut store = Store::open_in_memory().unwrap();
        let o = store
            .record_runs(
                &[run(7, "a", 100, Some(200), 1), run(7, "a", 321, None, 1)],
                1000,
                None,
            )
            .unwrap();
        assert_eq!(o.inserted, 2);
        assert_eq!(store.runs_overlapping("c", 0, 10_000).unwrap().len(), 2);
    }

    #[test]
    fn the_watermark_only_moves_forward() {
        let mut store = Store::open_in_memory().unwrap();
        assert_eq!(store.watermark("c").unwrap(), None);
        let adv = |to| WatermarkAdvance {
            cluster: "c".into(),
            to,
        };
        store.record_runs(&[], 1, Some(&adv(500))).unwrap();
        assert_eq!(store.watermark("c").unwrap(), Some(500));
        store.record_runs(&[], 2, Some(&adv(400))).unwrap();
        assert_eq!(store.watermark("c").unwrap(), Some(500));
        store.record_runs(&[], 3, Some(&adv(900))).unwrap();
        assert_eq!(store.watermark("c").unwrap(), Some(900));
        assert_eq!(store.watermark("other").unwrap(), None);
    }

    #[test]
    fn a_file_is_read_by_two_connections_and_each_run_once() {
        // Three days; the stretch read is split in the middle of [since - longest, until).
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.db");
        let mut store = Store::open(&path).unwrap();
        let day = 86_400;
        let mut runs = Vec::new();
        for i in 0..300u32 {
            let start = i64::from(i) * 1000;
            // Every fifth still running, the others 2 h long.
            let end = (i % 5 != 0).then_some(start + 7200);
            runs.push(run(i + 1, "a", start, end, 1));
        }
        runs.push(run(1000, "b", -10 * day, None, 2)); // running since long before
        store.record_runs(&runs, 1, None).unwrap();
        let (since, until) = (day / 2, 3 * day);
        let mut got: Vec<i64> = store
            .runs_overlapping("c", since, until)
            .unwrap()
            .iter()
            .map(|r| r.start)
            .collect();
        got.sort_unstable();
        let mut want: Vec<i64> = runs
            .iter()
            .filter(|r| r.start < until && r.end.is_none_or(|e| e > since))
            .map(|r| r.start)
            .collect();
        want.sort_unstable();
        assert_eq!(got, want);
        assert!(want.len() > 200);
        // The same as one connection reads it.
        let mut memory = Store::open_in_memory().unwrap();
        memory.record_runs(&runs, 1, None).unwrap();
        assert_eq!(
            memory.runs_overlapping("c", since, until).unwrap().len(),
            want.len()
        );
    }

    #[test]
    fn overlapping_runs_are_selected_with_their_types() {
        let mut store = Store::open_in_memory().unwrap();
        let mut typed = run(3, "b", 150, None, 3);
        typed.gpus_by_type.insert("a100".into(), 1);
        typed.gpus_by_type.insert("h100".into(), 2);
        typed.partition = "debug".into();
        let mut other_cluster = run(4, "a", 150, None, 1);
        other_cluster.cluster = "elsewhere".into();
        store
            .record_runs(
                &[
                    run(1, "a", 0, Some(100), 1),   // ends at the period's start: out
                    run(2, "a", 50, Some(150), 1),  // in
                    typed,                          // running: in
                    run(5, "a", 300, Some(400), 1), // starts at the period's end: out
                    other_cluster,
                ],
                1,
                None,
            )
            .unwrap();
        let runs = store.runs_overlapping("c", 100, 300).unwrap();
        let ids: Vec<i64> = runs.iter().map(|r| r.start).collect();
        assert_eq!(ids, [50, 150]);
        assert_eq!(runs[1].gpus_by_type.len(), 2);
        assert_eq!(runs[1].gpus_by_type.get("h100"), Some(2));
        assert_eq!(runs[1].end, None);
        assert_eq!([&*runs[0].partition, &*runs[1].partition], ["gpu", "debug"]);
    }

    fn capacity(ts: i64, gpus: u32, types: &[(&str, u32)]) -> CapacitySample {
        CapacitySample {
            ts,
            gpus,
            by_type: types.iter().map(|&(t, n)| (t.to_string(), n)).collect(),
        }
    }

    #[test]
    fn capacity_is_written_on_change_and_hourly() {
        let mut store = Store::open_in_memory().unwrap();
        assert!(store.record_capacity("c", &capacity(100, 8, &[])).unwrap());
        // Unchanged within the hour: nothing; a clock set back: nothing.
        assert!(!store.record_capacity("c", &capacity(160, 8, &[])).unwrap());
        assert!(!store.record_capacity("c", &capacity(50, 4, &[])).unwrap());
        assert!(store
            .record_capacity("c", &capacity(200, 8, &[("h100", 4)]))
            .unwrap());
        assert!(store.record_capacity("c", &capacity(300, 6, &[])).unwrap());
        assert!(store
            .record_capacity("c", &capacity(300 + CAPACITY_HEARTBEAT_SECONDS, 6, &[]))
            .unwrap());
        assert!(store
            .record_capacity("other", &capacity(160, 2, &[]))
            .unwrap());
        assert_eq!(count(&store, "capacity_samples"), 5);
        assert_eq!(count(&store, "capacity_sample_types"), 1);
    }

    #[test]
    fn capacity_history_starts_with_the_sample_in_force() {
        let mut store = Store::open_in_memory().unwrap();
        for s in [
            capacity(100, 8, &[("h100", 4)]),
            capacity(200, 6, &[]),
            capacity(300, 10, &[("a100", 2), ("h100", 4)]),
            capacity(400, 8, &[]),
        ] {
            store.record_capacity("c", &s).unwrap();
        }
        let h = store.capacity_history("c", 250, 400).unwrap();
        assert_eq!(
            h,
            [
                capacity(200, 6, &[]),
                capacity(300, 10, &[("a100", 2), ("h100", 4)])
            ]
        );
        let h = store.capacity_history("c", 100, 150).unwrap();
        assert_eq!(h, [capacity(100, 8, &[("h100", 4)])]);
        // Before the first sample: only the samples inside the period.
        let h = store.capacity_history("c", 0, 250).unwrap();
        assert_eq!(h.iter().map(|s| s.ts).collect::<Vec<_>>(), [100, 200]);
        assert!(store.capacity_history("c", 0, 100).unwrap().is_empty());
        assert!(store.capacity_history("x", 0, 1000).unwrap().is_empty());
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
        // The ingest writes to the migrated table.
        let o = store
            .record_runs(
                &[
                    run(1, "a", 100, Some(200), 2),
                    run(2, "a", 150, Some(900), 1),
                ],
                5,
                None,
            )
            .unwrap();
        assert_eq!((o.unchanged, o.updated), (1, 1));
        assert_eq!(store.longest_run("c").unwrap(), 750);
        assert!(store.record_capacity("c", &capacity(5, 4, &[])).unwrap());
    }

    #[test]
    fn preemptions_and_admission_waits_are_read_per_run() {
        let mut store = Store::open_in_memory().unwrap();
        let mut preempted = run(1, "a", 100, Some(200), 2);
        preempted.state = "PREEMPTED".into();
        preempted.submit = Some(40);
        let mut late = run(2, "a", 300, Some(400), 1);
        late.state = "PREEMPTED".into();
        let mut no_gpu = run(3, "b", 150, Some(160), 0);
        no_gpu.submit = Some(0);
        store
            .record_runs(
                &[preempted, late, no_gpu, run(4, "b", 120, None, 1)],
                1,
                None,
            )
            .unwrap();
        let p = store.preempted_runs("c", 0, 300).unwrap();
        assert_eq!(p, BTreeMap::from([("a".to_string(), 1)]));
        let starts = store.runs_started("c", 100, 300).unwrap();
        let waits: Vec<(&str, i64)> = starts
            .iter()
            .map(|s| (s.account.as_str(), s.start - s.submit))
            .collect();
        assert_eq!(waits, [("a", 60), ("b", 0)]);
        assert_eq!(store.account_of_job("c", 4).unwrap().as_deref(), Some("b"));
        assert_eq!(store.account_of_job("c", 99).unwrap(), None);
    }

    #[test]
    fn a_new_database_and_its_wal_are_for_its_owner_only() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("new/sub/accountd.db");
        let mut store = Store::open(&path).unwrap();
        store
            .record_runs(&[run(1, "a", 100, Some(200), 1)], 1, None)
            .unwrap();
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o7777;
        assert_eq!(mode(&path), 0o600);
        for suffix in ["-wal", "-shm"] {
            let mut p = path.as_os_str().to_owned();
            p.push(suffix);
            assert_eq!(mode(Path::new(&p)), 0o600, "{suffix}");
        }
        assert_eq!(mode(&dir.path().join("new")), 0o700);
        assert_eq!(mode(&dir.path().join("new/sub")), 0o700);
        assert!(exposure_warning(&path).is_none());
    }

    #[test]
    fn a_database_in_a_directory_shared_with_a_group_is_group_readable() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().unwrap();
        let shared = dir.path().join("shared");
        std::fs::create_dir(&shared).unwrap();
        std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o750)).unwrap();
        let path = shared.join("accountd.db");
        drop(Store::open(&path).unwrap());
        let m = std::fs::metadata(&path).unwrap();
        assert_eq!(m.permissions().mode() & 0o777, 0o640);
        assert_eq!(m.gid(), std::fs::metadata(&shared).unwrap().gid());
        // Others may pass through (to a state.json beside it) but not list: still the group's.
        let passable = dir.path().join("passable");
        std::fs::create_dir(&passable).unwrap();
        std::fs::set_permissions(&passable, std::fs::Permissions::from_mode(0o751)).unwrap();
        drop(Store::open(&passable.join("accountd.db")).unwrap());
        let m = std::fs::metadata(passable.join("accountd.db")).unwrap();
        assert_eq!(m.permissions().mode() & 0o777, 0o640);
        // Open to everyone: not a statement about a group, so the owner's only.
        let open = dir.path().join("open");
        std::fs::create_dir(&open).unwrap();
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o755)).unwrap();
        drop(Store::open(&open.join("accountd.db")).unwrap());
        let m = std::fs::metadata(open.join("accountd.db")).unwrap();
        assert_eq!(m.permissions().mode() & 0o777, 0o600);
    }

    #[test]
    fn an_old_world_readable_database_is_warned_about_and_kept() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("old.db");
        drop(Connection::open(&path).unwrap());
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        drop(Store::open(&path).unwrap());
        let warning = exposure_warning(&path).expect("warned");
        assert!(warning.contains("(mode 0644)"), "{warning}");
        assert!(warning.contains("chmod o-rwx"), "{warning}");
    }

    #[test]
    fn a_read_only_store_reads_and_never_writes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("accountd.db");
        assert!(matches!(
            Store::open_read_only(&path),
            Err(StoreError::Missing { .. })
        ));
        assert!(!path.exists());
        let mut store = Store::open(&path).unwrap();
        store
            .record_runs(&[run(1, "a", 100, Some(200), 1)], 1, None)
            .unwrap();
        drop(store);
        let reader = Store::open_read_only(&path).unwrap();
        assert_eq!(reader.runs_overlapping("c", 0, 1000).unwrap().len(), 1);
        assert!(!reader.changed_while_read());
        let err = reader
            .connection()
            .execute("DELETE FROM job_runs", [])
            .unwrap_err();
        assert_eq!(err.sqlite_error_code(), Some(rusqlite::ErrorCode::ReadOnly));
        // An old schema is not upgraded by a reader.
        let old = dir.path().join("v1.db");
        {
            let mut s = Store {
                conn: Connection::open(&old).unwrap(),
                path: "v1".into(),
                immutable_since: None,
            };
            s.migrate(&MIGRATIONS[..1]).unwrap();
        }
        let err = Store::open_read_only(&old).err().expect("refused");
        assert!(
            matches!(err, StoreError::Outdated { found: 1, .. }),
            "{err}"
        );
    }

    #[test]
    fn sqlite_uris_escape_what_is_not_a_plain_path() {
        assert_eq!(uri_of(Path::new("/var/lib/a.db")), "file:/var/lib/a.db");
        assert_eq!(
            uri_of(Path::new("/x y/a?b#c%.db")),
            "file:/x%20y/a%3Fb%23c%25.db"
        );
    }

    fn runaway_flags(store: &Store) -> Vec<(i64, Option<i64>, bool)> {
        store
            .connection()
            .prepare("SELECT job_id_raw, end_time, runaway FROM job_runs ORDER BY job_id_raw")
            .unwrap()
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap()
    }

    #[test]
    fn runs_slurm_lost_are_clipped_at_the_last_check_that_saw_them() {
        let mut store = Store::open_in_memory().unwrap();
        let adv = WatermarkAdvance {
            cluster: "c".into(),
            to: 1000,
        };
        let sacct = [
            run(1, "a", 100, None, 2),      // running, slurmctld knows it
            run(2, "a", 100, None, 4),      // running in sacct, lost by slurmctld
            run(3, "b", 100, Some(200), 1), // finished
            run(4, "b", 1500, None, 1),     // started after the first list was read
        ];
        store.record_runs(&sacct[..3], 1000, Some(&adv)).unwrap();
        // The first list: nothing known before it, so a lost job ends at the list's time.
        let first = store
            .clip_runaways("c", &BTreeSet::from([1, 7]), 1000)
            .unwrap();
        assert_eq!(
            first,
            [RunawayRun {
                job_id_raw: 2,
                job_id: "2".into(),
                account: "a".into(),
                start: 100,
                end: 1000
            }]
        );
        assert_eq!(
            runaway_flags(&store),
            [
                (1, None, false),
                (2, Some(1000), true),
                (3, Some(200), false)
            ]
        );
        // Clipped runs count as finished runs for the reports' range.
        assert_eq!(store.longest_run("c").unwrap(), 900);
        // sacct still says job 2 runs: the clip stays, and nothing is rewritten.
        let o = store.record_runs(&sacct[1..2], 1100, None).unwrap();
        assert_eq!(o.unchanged, 1);
        assert_eq!(runaway_flags(&store)[1], (2, Some(1000), true));
        // Job 1 is lost after the list at 1000 that had it: it ends there. Job 4 started after
        // that list and is lost too: it ends at its start (no time known running).
        store.record_runs(&sacct[3..], 1600, None).unwrap();
        let second = store.clip_runaways("c", &BTreeSet::new(), 2000).unwrap();
        let ends: Vec<(u64, i64)> = second.iter().map(|r| (r.job_id_raw, r.end)).collect();
        assert_eq!(ends, [(1, 1000), (4, 1500)]);
        // The administrator's `sacctmgr show runaway` fix gives sacct an end: sacct wins.
        let fixed = run(2, "a", 100, Some(150), 4);
        let o = store.record_runs(&[fixed], 3000, None).unwrap();
        assert_eq!(o.updated, 1);
        assert_eq!(runaway_flags(&store)[1], (2, Some(150), false));
        let listed: Vec<u64> = store
            .runaway_runs("c", 0, 5000)
            .unwrap()
            .iter()
            .map(|r| r.job_id_raw)
            .collect();
        assert_eq!(listed, [1, 4]);
        assert!(store.runaway_runs("c", 1600, 5000).unwrap().is_empty());
        assert!(store.runaway_runs("other", 0, 5000).unwrap().is_empty());
        // A report ends job 1 at its clip.
        let runs = store.runs_overlapping("c", 0, 5000).unwrap();
        let one = runs.iter().find(|r| r.start == 100 && r.gpus == 2).unwrap();
        assert_eq!(one.end, Some(1000));
    }
}
