//! `teamshare.toml`, the configuration shared by the job_submit plugin and accountd (DESIGN §3).
//!
//! The file is parsed once and validated into [`Config`], a separate type whose values are all
//! checked and defaulted. An invalid file yields every problem at once, each a [`Diagnostic`]
//! with file, line, column, message and hint:
//!
//! ```text
//! teamshare.toml:12:1: error: unknown field `quotaa` in [[team]]
//!   hint: did you mean `quota`?
//! ```
#![forbid(unsafe_code)]
// Unit tests are exempt from the workspace's 80-line limit: a scenario reads top to bottom.
#![cfg_attr(test, allow(clippy::too_many_lines))]

mod config;
mod diagnostic;
mod duration;
mod family;
pub mod read;
mod suggest;
mod validate;

use std::ffi::OsString;
use std::path::{Path, PathBuf};

pub use crate::config::{
    AccountdSettings, ClusterSettings, Config, Governance, GpuType, IdleAction, IdleCostSplit,
    IdlePolicy, IdleSharing, OnStaleState, PriorityClass, Quota, ReclaimMode, Slice, Team,
    WithinTeam, DEFAULT_GPU_TYPE, SHARE_TYPE,
};
pub use crate::diagnostic::{ConfigError, Diagnostic, Diagnostics, Location};
pub use crate::duration::{format_duration, parse_duration, parse_duration_ms};
pub use crate::family::{format_equivalents, names_type, Member};

/// The configuration's file name; it lives beside `slurm.conf`.
pub const FILE_NAME: &str = "teamshare.toml";

/// `teamshare.toml` in the directory of `$SLURM_CONF` (`/etc/slurm/slurm.conf` when unset).
pub fn default_path() -> PathBuf {
    beside_slurm_conf(std::env::var_os("SLURM_CONF"))
}

fn beside_slurm_conf(slurm_conf: Option<OsString>) -> PathBuf {
    let slurm_conf = slurm_conf
        .filter(|path| !path.is_empty())
        .map_or_else(|| PathBuf::from("/etc/slurm/slurm.conf"), PathBuf::from);
    slurm_conf
        .parent()
        .unwrap_or_else(|| Path::new(""))
        .join(FILE_NAME)
}

/// Reads, parses and validates the file at `path`. Relative paths in `[accountd]` are resolved
/// against the directory of `path`; diagnostics name the file as `path` is written.
///
/// # Errors
/// [`ConfigError::Io`] when the file cannot be read; [`ConfigError::Invalid`] with every problem
/// when it is not a valid configuration.
pub fn load(path: &Path) -> Result<Config, ConfigError> {
    // Whatever sits at the path: a FIFO or a device must not hang or bloat the reader.
    let source = read::read_bounded(path, read::CONFIG_LIMIT).map_err(|e| ConfigError::Io {
        path: path.to_owned(),
        source: e.into(),
    })?;
    parse_file(&source, path)
}

/// Parses and validates the text of the file at `path` (read by the caller, e.g. with a bound
/// on its size): diagnostics name the file as `path` is written, and relative paths in
/// `[accountd]` are resolved against its directory, as [`load`] does.
///
/// # Errors
/// [`ConfigError::Invalid`] with every problem when `source` is not a valid configuration.
pub fn parse_file(source: &str, path: &Path) -> Result<Config, ConfigError> {
    let mut config = parse(source, &path.display().to_string())?;
    let directory = path.parent().unwrap_or_else(|| Path::new(""));
    let accountd = &mut config.accountd;
    for file in [
        &mut accountd.database,
        &mut accountd.state_file,
        &mut accountd.sample_spool,
    ] {
        if file.is_relative() {
            *file = directory.join(&*file);
        }
    }
    Ok(config)
}

/// Parses and validates `source`; `origin` names the file in diagnostics. Paths are kept as
/// written.
///
/// # Errors
/// [`ConfigError::Invalid`] with every problem, sorted by position, when `source` is not a valid
/// configuration.
pub fn parse(source: &str, origin: &str) -> Result<Config, ConfigError> {
    validate::validate(source, origin).map_err(ConfigError::Invalid)
}

/// The digest of a configuration's text: 64-bit FNV-1a, in hex. Not a security measure (the file
/// is the administrator's); it only tells two readers whether they loaded the same text.
pub fn digest(source: &str) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in source.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{h:016x}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digest_tells_texts_apart() {
        assert_eq!(digest(""), "cbf29ce484222325");
        assert_eq!(digest("a"), "af63dc4c8601ec8c");
        assert_ne!(digest("quota = 2\n"), digest("quota = 3\n"));
        let text = "[cluster]\nname = \"x\"\n[[team]]\nname = \"a\"\nquota = 1\n";
        assert_eq!(parse(text, "t.toml").unwrap().digest, digest(text));
    }

    #[test]
    fn default_path_is_beside_slurm_conf() {
        assert_eq!(
            beside_slurm_conf(None),
            PathBuf::from("/etc/slurm/teamshare.toml")
        );
        assert_eq!(
            beside_slurm_conf(Some(OsString::new())),
            PathBuf::from("/etc/slurm/teamshare.toml")
        );
        assert_eq!(
            beside_slurm_conf(Some("/opt/slurm/etc/slurm.conf".into())),
            PathBuf::from("/opt/slurm/etc/teamshare.toml")
        );
        assert_eq!(
            beside_slurm_conf(Some("slurm.conf".into())),
            PathBuf::from("teamshare.toml")
        );
    }
}
