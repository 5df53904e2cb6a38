//! The head collecting every node's spool into the database (`accountd collect-samples`, and
//! the daemon's loop through [`collect`]).
//!
//! Per node, batches are stored ([`Store::record_samples`]) in transactions of at most [`FILES_PER_TRANSACTION`] files with
//! `INSERT OR IGNORE` on the samples' key; the rollup is added to only for rows really inserted;
//! the files are deleted only after the commit. A crash anywhere re-reads some files next time,
//! which inserts nothing twice. An unreadable file or a malformed line is reported with its place
//! and the rest is stored.

use std::path::{Path, PathBuf};

use super::spool::{self, Batch, SpoolError};
use crate::period::UnixSeconds;
use crate::store::{Store, StoreError};

pub const FILES_PER_TRANSACTION: usize = 500;

#[derive(Debug, thiserror::Error)]
pub enum CollectError {
    #[error("the sample spool {path} cannot be read: {error} (is it the directory `accountd sample --spool` writes to?)")]
    Root { path: PathBuf, error: SpoolError },
    #[error("cannot store the GPU samples in the database")]
    Store(#[from] StoreError),
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
    store.ensure_rollup_threshold(idle_threshold)?;
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
            let stored = store.record_samples(
                cluster,
                batches.iter().flat_map(|b| &b.samples),
                idle_threshold,
                now,
            )?;
            summary.inserted += stored.inserted;
            summary.duplicates += stored.duplicates;
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
    fn a_missing_root_is_a_clear_error() {
        let store = Store::open_in_memory().unwrap();
        let err = collect(&store, Path::new("/nonexistent/spool"), "c", 5.0, 1).unwrap_err();
        assert!(err.to_string().contains("/nonexistent/spool"), "{err}");
    }
}
