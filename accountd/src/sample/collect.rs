//! The head collecting every node's spool into the database (`accountd collect-samples`, and
//! the daemon's loop through [`collect`]).
//!
//! Per node, batches are stored in transactions of at most [`FILES_PER_TRANSACTION`] files with
//! `INSERT OR IGNORE` on the samples' key; the rollup is added to only for rows really inserted;
//! the files are deleted only after the commit. A crash anywhere re-reads some files next time,
//! which inserts nothing twice. An unreadable file or a malformed line is reported with its place
//! and the rest is stored.

use std::path::{Path, PathBuf};

use rusqlite::{params, Connection, Transaction, TransactionBehavior};

use super::spool::{self, Batch, SpoolError};
use super::Sample;
use crate::period::UnixSeconds;
use crate::store::Store;

pub const FILES_PER_TRANSACTION: usize = 500;

const HOUR_MS: i64 = 3_600_000;

#[derive(Debug, thiserror::Error)]
pub enum CollectError {
    #[error("the sample spool {path} cannot be read: {error} (is it the directory `accountd sample --spool` writes to?)")]
    Root { path: PathBuf, error: SpoolError },
    #[error("cannot store the GPU samples in the database")]
    Sql(#[from] rusqlite::Error),
}

/// What one collection did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CollectSummary {
    pub nodes: usize,
    pub files: usize,
    /// Samples stored for the first time.
    pub inserted: usize,
    /// Samples already stored (delivered again): nothing changed.
    pub duplicates: usize,
    /// `path:line: why` of each line skipped.
    pub malformed: Vec<String>,
    /// Files or node spools that could not be read, with why; they are left where they are.
    pub unreadable: Vec<String>,
    /// Files stored but not removed from the spool (they will be read again, harmlessly).
    pub unsettled: Vec<String>,
}

impl std::fmt::Display for CollectSummary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "collected {} batch file{} from {} node{}: {} new sample{}, {} already stored, {} malformed, {} unreadable",
            self.files,
            if self.files == 1 { "" } else { "s" },
            self.nodes,
            if self.nodes == 1 { "" } else { "s" },
            self.inserted,
            if self.inserted == 1 { "" } else { "s" },
            self.duplicates,
            self.malformed.len(),
            self.unreadable.len()
        )
    }
}

/// Collect the spools of every node under `root` (`root/<node>/ready/*.jsonl`) into `store`,
/// as samples of `cluster`, with the rollup's idle threshold `idle_threshold` (percent).
pub fn collect(
    store: &Store,
    root: &Path,
    cluster: &str,
    idle_threshold: f64,
    now: UnixSeconds,
) -> Result<CollectSummary, CollectError> {
    let conn = store.connection();
    ensure_rollup_threshold(conn, idle_threshold)?;
    let nodes = spool::node_dirs(root).map_err(|error| CollectError::Root {
        path: root.to_path_buf(),
        error,
    })?;
    let mut summary = CollectSummary {
        nodes: nodes.len(),
        ..CollectSummary::default()
    };
    for (node, dir) in nodes {
        let files = match spool::ready_files(&dir) {
            Ok(f) => f,
            Err(e) => {
                summary.unreadable.push(e.to_string());
                continue;
            }
        };
        for chunk in files.chunks(FILES_PER_TRANSACTION) {
            let mut batches: Vec<Batch> = Vec::new();
            for path in chunk {
                match spool::read_batch(path, &node) {
                    Ok(b) => batches.push(b),
                    Err(e) => summary.unreadable.push(e.to_string()),
                }
            }
            let tx = Transaction::new_unchecked(conn, TransactionBehavior::Immediate)?;
            for b in &batches {
                for s in &b.samples {
                    if insert_sample(&tx, cluster, s, idle_threshold, now)? {
                        summary.inserted += 1;
                    } else {
                        summary.duplicates += 1;
                    }
                }
            }
            tx.commit()?;
            summary.files += batches.len();
            for b in &batches {
                summary.malformed.extend(b.malformed.iter().cloned());
            }
            if let Err(e) = spool::settle(&dir, &batches) {
                summary.unsettled.push(e.to_string());
            }
        }
    }
    Ok(summary)
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

/// The rollup's idle time depends on the threshold: when the configured one changed, rebuild
/// the rollup from the samples (one transaction; the samples are the truth).
pub fn ensure_rollup_threshold(conn: &Connection, idle_threshold: f64) -> rusqlite::Result<bool> {
    let stale: bool = conn.query_row(
        "SELECT EXISTS (SELECT 1 FROM gpu_sample_hours WHERE idle_threshold <> ?1)",
        [idle_threshold],
        |r| r.get(0),
    )?;
    if !stale {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sample::spool::NodeSpool;
    use crate::sample::tests::sample;

    fn count(store: &Store, sql: &str) -> i64 {
        store.connection().query_row(sql, [], |r| r.get(0)).unwrap()
    }

    #[test]
    fn collecting_twice_stores_each_sample_once() {
        let root = tempfile::tempdir().unwrap();
        let store = Store::open_in_memory().unwrap();
        let mut n1 = NodeSpool::open(root.path(), "n1").unwrap();
        let batch = vec![
            sample("GPU-a", 3_600_000, 50, Some(7)),
            sample("GPU-b", 3_600_000, 2, None),
        ];
        n1.write_batch(&batch).unwrap();
        // The same batch delivered again (a head that died before deleting it).
        n1.write_batch(&batch).unwrap();
        let s = collect(&store, root.path(), "c", 5.0, 1).unwrap();
        assert_eq!((s.files, s.inserted, s.duplicates), (2, 2, 2));
        let s = collect(&store, root.path(), "c", 5.0, 2).unwrap();
        assert_eq!((s.files, s.inserted), (0, 0));
        assert_eq!(count(&store, "SELECT count(*) FROM gpu_samples"), 2);
        assert_eq!(
            count(&store, "SELECT sum(samples) FROM gpu_sample_hours"),
            2,
            "the rollup counts a re-delivered sample once"
        );
        assert_eq!(
            count(&store, "SELECT sum(idle_ms) FROM gpu_sample_hours"),
            10_000
        );
    }

    #[test]
    fn a_bad_file_or_line_is_reported_and_the_rest_stored() {
        let root = tempfile::tempdir().unwrap();
        let store = Store::open_in_memory().unwrap();
        let mut n1 = NodeSpool::open(root.path(), "n1").unwrap();
        let good = n1
            .write_batch(&[sample("GPU-a", 10_000, 50, None)])
            .unwrap()
            .unwrap();
        let mut text = std::fs::read_to_string(&good).unwrap();
        text.push_str("garbage\n");
        std::fs::write(&good, text).unwrap();
        // An unreadable file: a directory where a batch should be.
        let unreadable = root.path().join("n1/ready/0000000020000-1-1.jsonl");
        std::fs::create_dir(&unreadable).unwrap();
        let mut n2 = NodeSpool::open(root.path(), "n2").unwrap();
        let mut other = sample("GPU-z", 10_000, 1, None);
        other.node = "n2".into();
        n2.write_batch(&[other]).unwrap();
        let s = collect(&store, root.path(), "c", 5.0, 1).unwrap();
        assert_eq!(s.inserted, 2);
        assert_eq!(s.malformed.len(), 1);
        assert!(
            s.malformed[0].contains(":2: not a sample"),
            "{:?}",
            s.malformed
        );
        assert_eq!(s.unreadable.len(), 1);
        assert!(
            s.unreadable[0].contains("0000000020000-1-1.jsonl"),
            "{:?}",
            s.unreadable
        );
        assert!(unreadable.exists(), "an unreadable file is left in place");
        assert!(root.path().join("n1/rejected").read_dir().unwrap().count() == 1);
    }

    #[test]
    fn a_new_threshold_rebuilds_the_rollup() {
        let root = tempfile::tempdir().unwrap();
        let store = Store::open_in_memory().unwrap();
        let mut n1 = NodeSpool::open(root.path(), "n1").unwrap();
        n1.write_batch(&[sample("GPU-a", 10_000, 7, None)]).unwrap();
        collect(&store, root.path(), "c", 5.0, 1).unwrap();
        assert_eq!(
            count(&store, "SELECT sum(idle_ms) FROM gpu_sample_hours"),
            0
        );
        assert!(ensure_rollup_threshold(store.connection(), 10.0).unwrap());
        assert_eq!(
            count(&store, "SELECT sum(idle_ms) FROM gpu_sample_hours"),
            10_000
        );
        assert!(!ensure_rollup_threshold(store.connection(), 10.0).unwrap());
    }

    #[test]
    fn a_missing_root_is_a_clear_error() {
        let store = Store::open_in_memory().unwrap();
        let err = collect(&store, Path::new("/nonexistent/spool"), "c", 5.0, 1).unwrap_err();
        assert!(err.to_string().contains("/nonexistent/spool"), "{err}");
    }
}
