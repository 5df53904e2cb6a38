//! The spool: where a node keeps its samples until the head has stored them.
//!
//! ```text
//! <root>/<node>/tmp/       batches being written (one writer: that node's sampler)
//! <root>/<node>/ready/     complete batches, one file per tick: <ts_ms>-<pid>-<seq>.jsonl
//! <root>/<node>/rejected/  batches with malformed lines, moved aside by the head once the
//!                          rest of them was stored
//! ```
//!
//! A batch is written to `tmp/`, flushed to disk, renamed into `ready/` and the directory
//! flushed: a file in `ready/` is complete, whenever the sampler or the machine dies. The head
//! reads only `ready/` and deletes a file only after the transaction storing it has committed,
//! so every sample is stored at least once; the database's key makes it exactly once.

use std::fs::{self, File};
use std::io::Write as _;
use std::path::{Path, PathBuf};

use super::Sample;

pub const TMP: &str = "tmp";
pub const READY: &str = "ready";
pub const REJECTED: &str = "rejected";
const EXTENSION: &str = "jsonl";
/// The most bytes of one batch read: a tick of a node's GPUs is a few KiB.
pub const MAX_BATCH_BYTES: u64 = 16 << 20;

#[derive(Debug, thiserror::Error)]
pub enum SpoolError {
    #[error("`{0}` cannot name a spool directory (use the Slurm node name: letters, digits, `-`, `_`, `.`)")]
    BadNodeName(String),
    #[error("spool {path}: {error}")]
    Io {
        path: PathBuf,
        error: std::io::Error,
    },
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> SpoolError + '_ {
    move |error| SpoolError::Io {
        path: path.to_path_buf(),
        error,
    }
}

/// A node name as a directory name: nothing that could leave the spool root.
pub fn check_node_name(node: &str) -> Result<(), SpoolError> {
    let ok = !node.is_empty()
        && node != "."
        && node != ".."
        && node
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c));
    if ok {
        Ok(())
    } else {
        Err(SpoolError::BadNodeName(node.to_string()))
    }
}

/// Flush a directory's entries (a rename or unlink in it) to disk.
fn sync_dir(dir: &Path) -> Result<(), SpoolError> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io_err(dir))
}

/// The writing side, on the node.
#[derive(Debug)]
pub struct NodeSpool {
    dir: PathBuf,
    pid: u32,
    seq: u64,
}

impl NodeSpool {
    /// Create `<root>/<node>/{tmp,ready}` as needed and remove what a killed sampler left in
    /// `tmp/` (batches it had not finished: never in `ready/`, so never counted).
    pub fn open(root: &Path, node: &str) -> Result<NodeSpool, SpoolError> {
        check_node_name(node)?;
        let dir = root.join(node);
        for sub in [TMP, READY] {
            let d = dir.join(sub);
            fs::create_dir_all(&d).map_err(io_err(&d))?;
        }
        let pid = std::process::id();
        let tmp = dir.join(TMP);
        for entry in fs::read_dir(&tmp).map_err(io_err(&tmp))? {
            let entry = entry.map_err(io_err(&tmp))?;
            let name = entry.file_name();
            let name = name.to_string_lossy();
            // <ts>-<pid>-<seq>.jsonl.tmp: only a live sampler's own files are kept.
            let owner: Option<u32> = name.split('-').nth(1).and_then(|p| p.parse().ok());
            let alive =
                owner.is_some_and(|p| p != pid && Path::new("/proc").join(p.to_string()).exists());
            if !alive {
                let path = entry.path();
                fs::remove_file(&path).map_err(io_err(&path))?;
            }
        }
        Ok(NodeSpool { dir, pid, seq: 0 })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Write one batch durably; returns its path in `ready/`. An empty batch writes nothing.
    pub fn write_batch(&mut self, samples: &[Sample]) -> Result<Option<PathBuf>, SpoolError> {
        let Some(first) = samples.first() else {
            return Ok(None);
        };
        self.seq += 1;
        let name = format!("{:013}-{}-{}.{EXTENSION}", first.ts_ms, self.pid, self.seq);
        let tmp = self.dir.join(TMP).join(format!("{name}.tmp"));
        let ready = self.dir.join(READY).join(&name);
        let mut text = String::new();
        for s in samples {
            // Serialising plain fields cannot fail.
            text.push_str(&serde_json::to_string(s).unwrap_or_default());
            text.push('\n');
        }
        let write = || -> std::io::Result<()> {
            let mut f = File::create(&tmp)?;
            f.write_all(text.as_bytes())?;
            f.sync_all()
        };
        if let Err(e) = write() {
            let _ = fs::remove_file(&tmp);
            return Err(io_err(&tmp)(e));
        }
        fs::rename(&tmp, &ready).map_err(io_err(&ready))?;
        sync_dir(&self.dir.join(READY))?;
        Ok(Some(ready))
    }
}

/// The node spools under `root`: its subdirectories that have a `ready/`, by node name.
pub fn node_dirs(root: &Path) -> Result<Vec<(String, PathBuf)>, SpoolError> {
    let mut out = Vec::new();
    for entry in fs::read_dir(root).map_err(io_err(root))? {
        let entry = entry.map_err(io_err(root))?;
        let path = entry.path();
        let name = entry.file_name().to_string_lossy().into_owned();
        if path.join(READY).is_dir() && check_node_name(&name).is_ok() {
            out.push((name, path));
        }
    }
    out.sort();
    Ok(out)
}

/// The complete batches of a node spool, oldest first.
pub fn ready_files(node_dir: &Path) -> Result<Vec<PathBuf>, SpoolError> {
    let ready = node_dir.join(READY);
    let mut out = Vec::new();
    for entry in fs::read_dir(&ready).map_err(io_err(&ready))? {
        let entry = entry.map_err(io_err(&ready))?;
        let path = entry.path();
        if path.extension().is_some_and(|e| e == EXTENSION) {
            out.push(path);
        }
    }
    out.sort();
    Ok(out)
}

/// A batch as read by the head: its good samples, and its bad lines as `path:line: why`.
#[derive(Debug, Clone, Default)]
pub struct Batch {
    pub path: PathBuf,
    pub samples: Vec<Sample>,
    pub malformed: Vec<String>,
}

/// Read a batch. An unreadable file is an error (the caller reports it and goes on); a line
/// that is not a valid sample is reported in `malformed` and the others are kept. `node` is the
/// spool's node: a sample claiming another node is malformed (a spool speaks for its node).
pub fn read_batch(path: &Path, node: &str) -> Result<Batch, SpoolError> {
    // Whatever sits in `ready/` (a FIFO, a link to a device, a huge file) is read without
    // blocking and bounded: the daemon's collection must go on.
    let bytes = teamshare_config::read::read_bounded_bytes(path, MAX_BATCH_BYTES).map_err(|e| {
        SpoolError::Io {
            path: path.to_path_buf(),
            error: e.into(),
        }
    })?;
    let mut batch = Batch {
        path: path.to_path_buf(),
        ..Batch::default()
    };
    let text = String::from_utf8_lossy(&bytes);
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let at = |why: String| format!("{}:{}: {why}", path.display(), i + 1);
        match serde_json::from_str::<Sample>(line) {
            Err(e) => batch.malformed.push(at(format!("not a sample: {e}"))),
            Ok(s) => match s.check() {
                Err(why) => batch.malformed.push(at(why)),
                Ok(()) if s.node != node => batch.malformed.push(at(format!(
                    "sample of node `{}` in the spool of node `{node}`",
                    s.node
                ))),
                Ok(()) => batch.samples.push(s),
            },
        }
    }
    Ok(batch)
}

/// After the head's commit: delete stored batches; move those with malformed lines to
/// `rejected/` so they are reported once and kept for a person to read.
pub fn settle(node_dir: &Path, stored: &[Batch]) -> Result<(), SpoolError> {
    let rejected = node_dir.join(REJECTED);
    for batch in stored {
        if batch.malformed.is_empty() {
            match fs::remove_file(&batch.path) {
                Ok(()) => {}
                // Another collector got there first: it is stored either way.
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(io_err(&batch.path)(e)),
            }
        } else {
            fs::create_dir_all(&rejected).map_err(io_err(&rejected))?;
            let to = rejected.join(batch.path.file_name().unwrap_or_default());
            fs::rename(&batch.path, &to).map_err(io_err(&to))?;
        }
    }
    sync_dir(&node_dir.join(READY))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sample::tests::sample;

    #[test]
    fn a_batch_is_written_whole_and_read_back() {
        let root = tempfile::tempdir().unwrap();
        let mut spool = NodeSpool::open(root.path(), "n1").unwrap();
        let batch = [
            sample("GPU-a", 10_000, 50, Some(7)),
            sample("GPU-b", 10_000, 0, None),
        ];
        let path = spool.write_batch(&batch).unwrap().unwrap();
        assert!(path.starts_with(root.path().join("n1/ready")));
        assert_eq!(fs::read_dir(root.path().join("n1/tmp")).unwrap().count(), 0);
        assert_eq!(spool.write_batch(&[]).unwrap(), None);
        let nodes = node_dirs(root.path()).unwrap();
        assert_eq!(nodes, [("n1".to_string(), root.path().join("n1"))]);
        let files = ready_files(&nodes[0].1).unwrap();
        assert_eq!(files, std::slice::from_ref(&path));
        let read = read_batch(&path, "n1").unwrap();
        assert_eq!(read.samples, batch);
        assert!(read.malformed.is_empty());
        settle(&nodes[0].1, &[read]).unwrap();
        assert!(ready_files(&nodes[0].1).unwrap().is_empty());
    }

    #[test]
    fn leftovers_of_a_killed_sampler_are_removed() {
        let root = tempfile::tempdir().unwrap();
        fs::create_dir_all(root.path().join("n1/tmp")).unwrap();
        // pid 0 is never a sampler.
        let stale = root.path().join("n1/tmp/0000000010000-0-1.jsonl.tmp");
        fs::write(&stale, "{\"node\":").unwrap();
        NodeSpool::open(root.path(), "n1").unwrap();
        assert!(!stale.exists());
    }

    #[test]
    fn bad_lines_are_reported_with_their_place_and_the_rest_kept() {
        let root = tempfile::tempdir().unwrap();
        let mut spool = NodeSpool::open(root.path(), "n1").unwrap();
        let path = spool
            .write_batch(&[sample("GPU-a", 10_000, 50, None)])
            .unwrap()
            .unwrap();
        let mut text = fs::read_to_string(&path).unwrap();
        text.push_str("{\"node\": \"n1\", truncated\n");
        let mut other = sample("GPU-b", 10_000, 5, None);
        other.node = "n2".into();
        text.push_str(&serde_json::to_string(&other).unwrap());
        text.push('\n');
        text.push_str(&serde_json::to_string(&sample("GPU-c", 10_000, 500, None)).unwrap());
        text.push('\n');
        fs::write(&path, text).unwrap();
        let read = read_batch(&path, "n1").unwrap();
        assert_eq!(read.samples.len(), 1);
        assert_eq!(read.malformed.len(), 3, "{:?}", read.malformed);
        assert!(
            read.malformed[0].contains(":2: not a sample"),
            "{:?}",
            read.malformed
        );
        assert!(read.malformed[1].contains(":3: sample of node `n2`"));
        assert!(read.malformed[2].contains(":4: utilisation 500"));
        settle(&root.path().join("n1"), &[read]).unwrap();
        assert!(root
            .path()
            .join("n1/rejected")
            .join(path.file_name().unwrap())
            .exists());
    }

    #[test]
    fn node_names_cannot_leave_the_root() {
        for bad in ["", "..", "a/b", "n 1"] {
            assert!(check_node_name(bad).is_err(), "{bad:?}");
        }
        assert!(check_node_name("gpu-01.cluster_a").is_ok());
    }
}
