//! Reading a file someone else controls, as everything teamshare reads from disk should: only a
//! regular file (a FIFO would block the reader for ever, `/dev/zero` would never end), checked
//! before opening and again on the handle, which is opened non-blocking, and never more than a
//! bound (plus one byte, to tell "too large"), whatever the file claims. One reader for the
//! plugin's watcher thread and accountd's daemon and commands.

use std::fmt;
use std::fs::{File, Metadata, OpenOptions};
use std::io::{ErrorKind, Read};
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::Path;

/// The most bytes of teamshare.toml read: a real one is a few KiB.
pub const CONFIG_LIMIT: u64 = 1 << 20;

/// Why a file was not read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReadError {
    Missing,
    /// A FIFO, device, directory or socket (after following symlinks).
    NotRegular {
        kind: &'static str,
    },
    TooLarge {
        limit: u64,
    },
    NotUtf8,
    Io(String),
}

impl fmt::Display for ReadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReadError::Missing => write!(f, "no such file"),
            ReadError::NotRegular { kind } => {
                write!(f, "it is {kind}, not a regular file; not read")
            }
            ReadError::TooLarge { limit } => {
                write!(f, "larger than {limit} bytes; not read")
            }
            ReadError::NotUtf8 => write!(f, "not UTF-8 text"),
            ReadError::Io(e) => write!(f, "{e}"),
        }
    }
}

/// What a path's metadata says it is, in words for a message.
pub fn kind_of(m: &Metadata) -> &'static str {
    let t = m.file_type();
    if t.is_file() {
        "a regular file"
    } else if t.is_dir() {
        "a directory"
    } else if t.is_fifo() {
        "a FIFO"
    } else if t.is_char_device() {
        "a character device"
    } else if t.is_block_device() {
        "a block device"
    } else if t.is_socket() {
        "a socket"
    } else {
        "not a regular file"
    }
}

/// An I/O error as a [`ReadError`] (a missing file is [`ReadError::Missing`]).
pub fn io_error(e: std::io::Error) -> ReadError {
    if e.kind() == ErrorKind::NotFound {
        ReadError::Missing
    } else {
        ReadError::Io(e.to_string())
    }
}

fn regular(m: &Metadata) -> Result<(), ReadError> {
    if m.is_file() {
        Ok(())
    } else {
        Err(ReadError::NotRegular { kind: kind_of(m) })
    }
}

/// Read a regular file of at most `limit` bytes as text, without ever blocking on it.
pub fn read_bounded(path: &Path, limit: u64) -> Result<String, ReadError> {
    String::from_utf8(read_bounded_bytes(path, limit)?).map_err(|_| ReadError::NotUtf8)
}

/// Read a regular file of at most `limit` bytes, without ever blocking on it.
pub fn read_bounded_bytes(path: &Path, limit: u64) -> Result<Vec<u8>, ReadError> {
    // Look before opening: opening some devices has effects of its own.
    let meta = std::fs::metadata(path).map_err(io_error)?;
    regular(&meta)?;
    if meta.len() > limit {
        return Err(ReadError::TooLarge { limit });
    }
    // Non-blocking, so a file swapped for a FIFO between the look and the open cannot hang the
    // thread; the handle is checked again, and what is read is bounded whatever it claims.
    let file: File = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .map_err(io_error)?;
    regular(&file.metadata().map_err(io_error)?)?;
    let mut bytes = Vec::with_capacity(usize::try_from(meta.len()).unwrap_or(0));
    file.take(limit.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(io_error)?;
    if bytes.len() as u64 > limit {
        return Err(ReadError::TooLarge { limit });
    }
    Ok(bytes)
}

impl From<ReadError> for std::io::Error {
    fn from(e: ReadError) -> std::io::Error {
        let kind = match e {
            ReadError::Missing => ErrorKind::NotFound,
            ReadError::Io(_) => ErrorKind::Other,
            _ => ErrorKind::InvalidData,
        };
        std::io::Error::new(kind, e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    /// Issue 25, finding 2: `accountd run` read teamshare.toml with `read_to_string`; a FIFO
    /// at the path blocked its main thread for ever and a symlink to /dev/zero grew it to
    /// gigabytes. Both are refused at once, and so by [`crate::load`].
    #[test]
    fn issue25_2_a_fifo_or_a_device_at_the_config_path_is_refused_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("teamshare.toml");
        let made = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap();
        assert!(made.success());
        let zero = dir.path().join("zero.toml");
        std::os::unix::fs::symlink("/dev/zero", &zero).unwrap();
        for (path, kind) in [(&fifo, "a FIFO"), (&zero, "a character device")] {
            let t0 = Instant::now();
            let e = crate::load(path).unwrap_err().to_string();
            assert!(t0.elapsed() < Duration::from_secs(5));
            assert!(e.contains(kind), "{e}");
            assert_eq!(
                read_bounded(path, CONFIG_LIMIT),
                Err(ReadError::NotRegular { kind })
            );
        }
        // Too large, and a missing file, say so.
        let big = dir.path().join("big.toml");
        std::fs::write(&big, vec![b'#'; 2048]).unwrap();
        assert_eq!(
            read_bounded(&big, 1024),
            Err(ReadError::TooLarge { limit: 1024 })
        );
        let missing = crate::load(&dir.path().join("none.toml")).unwrap_err();
        assert!(missing.to_string().contains("no such file"), "{missing}");
    }
}
