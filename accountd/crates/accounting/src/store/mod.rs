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
//!
//! The parts: this module opens the database (pragmas, who may read the file) and holds
//! [`Store`]; `migrations`: the schema and its versions; `runs`: the job runs sacct reports, the
//! ingest watermark, the runaway runs and the jobs that never started; `replay`: the jobs of a
//! period as `accountd replay` reads them; `capacity`: the governed capacity over time;
//! `samples`: the NVML GPU samples and their hourly rollup. Every SQL statement of accountd is in
//! one of them.

use std::os::unix::fs::{DirBuilderExt as _, MetadataExt as _, OpenOptionsExt as _};
use std::path::{Path, PathBuf};
use std::time::Duration;

use rusqlite::{Connection, OpenFlags, Transaction, TransactionBehavior};

mod capacity;
mod idle_steps;
mod migrations;
mod replay;
mod runs;
mod samples;

pub use capacity::{CapacitySample, CAPACITY_HEARTBEAT_SECONDS};
pub use idle_steps::IdleStepRow;
pub use migrations::SCHEMA_VERSION;
pub use replay::{RunActivity, StartedJob, SubmittedJobs};
pub use runs::{
    BatchOutcome, GpuTypes, RunStart, RunUsage, RunWriter, RunawayRun, UserRun, WatermarkAdvance,
    WriteOutcome,
};
pub use samples::{GpuTime, PeriodGpuTime, RunGpu, SampledRun, SamplesOutcome};

use migrations::{user_version, MIGRATIONS};

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

/// The `path` of a database in memory.
const MEMORY: &str = ":memory:";

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

/// Held while a database file is created and while SQLite opens one, so that no connection of
/// this process can hold a lock on a file [`create_database_file`] still has a descriptor of:
/// closing any descriptor of a file drops every POSIX lock the process holds on it, which would
/// let another process write the database under this one's feet (DESIGN §7). That is the only
/// descriptor of a database accountd opens outside SQLite, and only of a file it just made.
static OPENING: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Whether this process may read `path`, judged without opening it (see [`OPENING`]): from
/// its mode, owner and group and this process's effective user and groups
/// (`/proc/self/status`). Access control lists are not read: where they grant or deny more,
/// SQLite's own open answers.
fn may_read(path: &Path) -> std::io::Result<()> {
    let m = std::fs::metadata(path)?;
    let Some((uid, gids)) = effective_ids() else {
        return Ok(());
    };
    let mode = m.mode();
    let allowed = uid == 0
        || if m.uid() == uid {
            mode & 0o400 != 0
        } else if gids.contains(&m.gid()) {
            mode & 0o040 != 0
        } else {
            mode & 0o004 != 0
        };
    if allowed {
        Ok(())
    } else {
        Err(std::io::Error::from(std::io::ErrorKind::PermissionDenied))
    }
}

/// This process's effective user and its groups (effective and supplementary), from
/// `/proc/self/status`; `None` where it cannot be read.
fn effective_ids() -> Option<(u32, Vec<u32>)> {
    let text = std::fs::read_to_string("/proc/self/status").ok()?;
    let field = |name: &str| {
        text.lines().find_map(|l| l.strip_prefix(name)).map(|rest| {
            rest.split_whitespace()
                .filter_map(|x| x.parse::<u32>().ok())
                .collect::<Vec<u32>>()
        })
    };
    // Uid: real effective saved filesystem; Gid: the same; Groups: the supplementary ones.
    let uid = *field("Uid:")?.get(1)?;
    let mut gids = field("Groups:").unwrap_or_default();
    gids.push(*field("Gid:")?.get(1)?);
    Some((uid, gids))
}

/// Create the database file, empty, with its mode and group, unless it exists. SQLite creates
/// the `-wal` and `-shm` files with the database's mode and owner, so they follow. The caller
/// holds [`OPENING`]; an existing file is never opened here (`create_new` fails first).
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
        let display = path.display().to_string();
        let conn = {
            let _opening = OPENING
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            create_database_file(path)?;
            Connection::open(path).map_err(|source| StoreError::Open {
                path: display.clone(),
                source,
            })?
        };
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
        // Asked first, so that a user who may not read it gets a plain answer, not SQLite's;
        // asked without opening it: the daemon runs this beside its own connections, and
        // closing a descriptor of the file would drop their locks. The mode bits may say no
        // where an access control list says yes: then SQLite's own open decides.
        let not_readable = || {
            let (readers, hint) = readers_of(path);
            StoreError::NotReadable {
                path: path.to_path_buf(),
                readers,
                hint,
            }
        };
        let denied = match may_read(path) {
            Ok(()) => false,
            Err(e) => match e.kind() {
                std::io::ErrorKind::NotFound => {
                    return Err(StoreError::Missing {
                        path: path.to_path_buf(),
                    })
                }
                std::io::ErrorKind::PermissionDenied => true,
                _ => {
                    return Err(StoreError::CreateFile {
                        path: path.to_path_buf(),
                        source: e,
                    })
                }
            },
        };
        let open_err = |source| StoreError::Open {
            path: display.clone(),
            source,
        };
        let flags = OpenFlags::SQLITE_OPEN_READ_ONLY
            | OpenFlags::SQLITE_OPEN_URI
            | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        // While a database file is being made, its maker has a descriptor of it: not before.
        let opening = OPENING
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let conn = match Connection::open_with_flags(uri_of(path), flags) {
            Ok(conn) => conn,
            Err(_) if denied => return Err(not_readable()),
            Err(e) => return Err(open_err(e)),
        };
        conn.busy_timeout(BUSY_TIMEOUT).map_err(open_err)?;
        let (conn, immutable_since) = match user_version(&conn) {
            Err(_) if denied => return Err(not_readable()),
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
        drop(opening);
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

    /// The database file (`:memory:` for one in memory), for messages.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// The connection, for tests and benchmarks that look at the tables themselves (feature
    /// `test-support`); accountd reads and writes only through the methods of this module.
    #[cfg(any(test, feature = "test-support"))]
    pub fn connection(&self) -> &Connection {
        &self.conn
    }
}

/// The errors of a read-only connection that needed to create the `-wal` or `-shm` of a WAL
/// database in a directory it cannot write.
fn cannot_open_wal(e: &rusqlite::Error) -> bool {
    matches!(
        e.sqlite_error_code(),
        Some(rusqlite::ErrorCode::ReadOnly | rusqlite::ErrorCode::CannotOpen)
    )
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

/// Records for the tests of this crate and of the crates above (feature `test-support`).
#[cfg(any(test, feature = "test-support"))]
pub mod test_support {
    use std::collections::BTreeMap;

    use super::{CapacitySample, Store};
    use crate::gpu_sample::Sample;
    use crate::sacct::JobRun;

    /// A run of `job` on cluster `c`: COMPLETED when it has an `end`, RUNNING otherwise.
    pub fn run(job: u32, account: &str, start: i64, end: Option<i64>, gpus: u64) -> JobRun {
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
            eligible: Some(start),
            time_limit: None,
            nnodes: Some(1),
        }
    }

    /// A sample of GPU `gpu` on node n1 at `ts` (seconds), standing for 10 s, held by `job`
    /// (JobIDRaw, StartTime), `util` percent busy.
    pub fn sample(gpu: &str, ts: i64, job: Option<(u32, i64)>, util: u32) -> Sample {
        Sample {
            node: "n1".into(),
            gpu_uuid: gpu.into(),
            ts_ms: ts * 1000,
            interval_ms: 10_000,
            minor: None,
            job_id_raw: job.map(|j| j.0),
            job_start: job.map(|j| j.1),
            util_gpu: util,
            util_mem: 0,
            mem_used: 0,
            mem_total: None,
            processes: None,
        }
    }

    /// The rows of `table`.
    pub fn count(store: &Store, table: &str) -> i64 {
        store
            .connection()
            .query_row(&format!("SELECT count(*) FROM {table}"), [], |r| r.get(0))
            .unwrap()
    }

    /// A capacity sample at `ts`: `gpus` in all, `types` by GPU type.
    pub fn capacity(ts: i64, gpus: u32, types: &[(&str, u32)]) -> CapacitySample {
        CapacitySample {
            ts,
            gpus,
            by_type: types.iter().map(|&(t, n)| (t.to_string(), n)).collect(),
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) use super::test_support::{capacity, count, run};

    #[test]
    fn a_fresh_database_gets_the_current_schema() {
        let store = Store::open_in_memory().unwrap();
        assert_eq!(store.schema_version().unwrap(), SCHEMA_VERSION);
        assert_eq!(count(&store, "job_runs"), 0);
        assert_eq!(count(&store, "ingest_state"), 0);
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

    /// Issue 25, finding 1: a read-only open beside an open connection of the same process
    /// (the daemon's fair-share and metrics reads) opened and closed the file itself, which
    /// dropped every lock the process held on it: another process closing its connection
    /// then took the database for unused and deleted the `-wal` the daemon still wrote to.
    #[test]
    fn issue25_1_a_read_only_open_beside_a_connection_keeps_its_locks() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("accountd.db");
        let writer = Store::open(&path).unwrap();
        writer
            .connection()
            .execute_batch("CREATE TABLE t (x); INSERT INTO t VALUES (1);")
            .unwrap();
        let wal = wal_of(&path);
        assert!(wal.exists());
        for _ in 0..3 {
            drop(Store::open_read_only(&path).unwrap());
        }
        // Another process (as `accountd ingest` beside the daemon) opens, reads and closes:
        // with the daemon's lock kept, it leaves the write-ahead log alone.
        let out = std::process::Command::new("python3")
            .args([
                "-c",
                "import sqlite3, sys; c = sqlite3.connect(sys.argv[1]); c.execute('SELECT count(*) FROM t').fetchall(); c.close()",
            ])
            .arg(&path)
            .output()
            .expect("python3 runs");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(wal.exists(), "the other process deleted {}", wal.display());
        let n: i64 = writer
            .connection()
            .query_row("SELECT count(*) FROM t", [], |r| r.get(0))
            .unwrap();
        assert_eq!(n, 1);
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
}
