//! Following `teamshare.toml` while `accountd run` runs, as the plugin does: the plugin reloads
//! an edited file within 2 s, so a daemon that kept the old rules would govern by other rules
//! than the plugin enforces. The file is looked at every [`POLL`] (its modification time, size
//! and inode: a rename over it or an edit in place both change them) and again on SIGHUP. A valid
//! new file replaces the configuration; an invalid one keeps the last good configuration and is
//! said once per change (every error on one line).

use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use teamshare_config::{Config, ConfigError};

/// How often the file is looked at (the plugin's own interval).
pub const POLL: Duration = Duration::from_secs(2);

/// What tells that the file changed.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Stamp {
    modified: Option<SystemTime>,
    len: u64,
    ino: u64,
}

fn stamp(path: &Path) -> Option<Stamp> {
    let m = std::fs::metadata(path).ok()?;
    Some(Stamp {
        modified: m.modified().ok(),
        len: m.len(),
        ino: m.ino(),
    })
}

/// What a look at the file found.
#[derive(Debug)]
pub enum Reload {
    /// Not changed since the last look (and not asked for).
    Unchanged,
    /// Read again (changed, or asked for with SIGHUP) and the same text as the configuration in
    /// force.
    Same { digest: String },
    /// A valid new configuration: it replaces the one in force. `unchecked` says why it
    /// could not be checked against Slurm, if so.
    Reloaded {
        config: Box<Config>,
        from: String,
        unchecked: Option<String>,
    },
    /// Not a valid configuration, or unreadable: the one in force stays. One line.
    Rejected { why: String, kept: String },
}

/// What Slurm says of a valid new configuration before it is put in force (issue 25,
/// finding 4: a partition typo must not ungovern the real partition).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verified {
    /// Slurm has what it names.
    Fits,
    /// Slurm could not be asked (why): put in force all the same, said in the log.
    Unchecked(String),
    /// It cannot govern the cluster as Slurm has it (why): the last good one stays.
    Refused(String),
}

/// The followed file and the digest of the configuration in force.
#[derive(Debug)]
pub struct ConfigWatch {
    path: PathBuf,
    stamp: Option<Stamp>,
    digest: String,
    /// Why Slurm refused the file as it is now: it is looked at again every poll (Slurm may
    /// gain the partition), and said again only when the reason changes.
    held_back: Option<String>,
}

impl ConfigWatch {
    /// Follow `path`, whose configuration in force is `current` (as loaded at start).
    pub fn new(path: &Path, current: &Config) -> ConfigWatch {
        ConfigWatch {
            path: path.to_path_buf(),
            stamp: stamp(path),
            digest: current.digest.clone(),
            held_back: None,
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Look at the file: read it again when it changed, or always with `asked` (SIGHUP).
    pub fn check(&mut self, asked: bool) -> Reload {
        self.check_with(asked, &mut |_| Verified::Fits)
    }

    /// [`ConfigWatch::check`], with a valid new file put in force only when `verify` does
    /// not refuse it. A refused file is looked at again every poll and said again only when
    /// the file or the reason changes.
    pub fn check_with(
        &mut self,
        asked: bool,
        verify: &mut dyn FnMut(&Config) -> Verified,
    ) -> Reload {
        let now = stamp(&self.path);
        let changed = now != self.stamp;
        if !asked && !changed && self.held_back.is_none() {
            return Reload::Unchanged;
        }
        // Remembered before reading, so that the same broken file is said once, not every poll.
        self.stamp = now;
        let config = match teamshare_config::load(&self.path) {
            Ok(c) => c,
            Err(e) => {
                self.held_back = None;
                return Reload::Rejected {
                    why: one_line(&e),
                    kept: self.digest.clone(),
                };
            }
        };
        if config.digest == self.digest {
            self.held_back = None;
            return Reload::Same {
                digest: config.digest,
            };
        }
        let unchecked = match verify(&config) {
            Verified::Refused(why) => {
                let repeat = !asked && !changed && self.held_back.as_deref() == Some(why.as_str());
                self.held_back = Some(why.clone());
                if repeat {
                    return Reload::Unchanged;
                }
                return Reload::Rejected {
                    why,
                    kept: self.digest.clone(),
                };
            }
            Verified::Unchecked(why) => Some(why),
            Verified::Fits => None,
        };
        self.held_back = None;
        let from = std::mem::replace(&mut self.digest, config.digest.clone());
        Reload::Reloaded {
            config: Box::new(config),
            from,
            unchecked,
        }
    }
}

/// Whether Slurm has what a reloaded configuration names (its partitions, with GPUs, and
/// its quotas' GPU types), read through libslurm (issue 25, finding 4). The plugin refuses
/// the same file from the partitions the governor publishes.
pub fn verify_with_slurm(config: &Config) -> Verified {
    // libslurm only where the governor reads Slurm through it (it initialises libslurm from
    // slurm.conf, which the client commands' fallback does not require to be complete).
    if !matches!(
        crate::governor::SlurmReader::from_env(),
        Ok(crate::governor::SlurmReader::Libslurm(_))
    ) {
        return Verified::Unchecked("the governor reads Slurm with its client commands".into());
    }
    let mut session = crate::slurm_api::Session::new();
    match session.nodes_text(&[]) {
        Ok(_) => match teamshare_policy::offered::refusal(config, &session.offered()) {
            Some(why) => Verified::Refused(why),
            None => Verified::Fits,
        },
        Err(e) => Verified::Unchecked(e.to_string()),
    }
}

/// Every problem of an invalid file on one line: `file:line:col: error: message (hint: ...); ...`.
pub fn one_line(e: &ConfigError) -> String {
    match e.diagnostics() {
        Some(diagnostics) => {
            let each: Vec<String> = diagnostics
                .iter()
                .map(|d| {
                    let mut s = format!("{}:{}:{}: error: {}", d.file, d.line, d.column, d.message);
                    if let Some(hint) = &d.hint {
                        s.push_str(&format!(" (hint: {hint})"));
                    }
                    s
                })
                .collect();
            format!(
                "{} {}: {}",
                each.len(),
                if each.len() == 1 { "error" } else { "errors" },
                each.join("; ")
            )
        }
        None => e.to_string().replace('\n', " "),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const VALID: &str =
        "[cluster]\nname = \"c\"\npartitions = [\"gpu\"]\n\n[[team]]\nname = \"a\"\nquota = 1\n";

    #[test]
    fn a_valid_edit_reloads_an_invalid_one_is_said_once_and_kept() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("teamshare.toml");
        std::fs::write(&path, VALID).unwrap();
        let start = teamshare_config::load(&path).unwrap();
        let mut watch = ConfigWatch::new(&path, &start);
        assert!(matches!(watch.check(false), Reload::Unchanged));
        // Asked for (SIGHUP), unchanged text: the same digest.
        assert!(matches!(watch.check(true), Reload::Same { digest } if digest == start.digest));

        let edited = VALID.replace("quota = 1", "quota = 2");
        std::fs::write(&path, &edited).unwrap();
        match watch.check(false) {
            Reload::Reloaded { config, from, .. } => {
                assert_eq!(from, start.digest);
                assert_eq!(config.digest, teamshare_config::digest(&edited));
                assert_eq!(config.teams[0].quota.total, 2);
            }
            other => panic!("{other:?}"),
        }

        let broken = format!("{edited}quotaa = 3\nweight = 0\n");
        std::fs::write(&path, broken).unwrap();
        match watch.check(false) {
            Reload::Rejected { why, kept } => {
                assert_eq!(kept, teamshare_config::digest(&edited));
                assert!(!why.contains('\n'), "{why}");
                assert!(why.starts_with("2 errors: "), "{why}");
                assert!(why.contains("teamshare.toml:8:1: error: "), "{why}");
                assert!(why.contains("(hint: "), "{why}");
            }
            other => panic!("{other:?}"),
        }
        // Said once: the same broken file is not read again until it changes or is asked for.
        assert!(matches!(watch.check(false), Reload::Unchanged));
        assert!(matches!(watch.check(true), Reload::Rejected { .. }));

        std::fs::remove_file(&path).unwrap();
        match watch.check(false) {
            Reload::Rejected { why, .. } => assert!(why.contains("cannot read"), "{why}"),
            other => panic!("{other:?}"),
        }
        // Back to the text in force: nothing to reload.
        std::fs::write(&path, &edited).unwrap();
        assert!(matches!(watch.check(false), Reload::Same { .. }));
    }
}

#[cfg(test)]
mod slurm_refusals {
    use super::*;

    const VALID: &str =
        "[cluster]\nname = \"c\"\npartitions = [\"gpu\"]\n\n[[team]]\nname = \"a\"\nquota = 1\n";

    /// Issue 25, finding 4: a valid file Slurm refuses (a partition typo) is not put in force,
    /// said once while the reason holds, looked at again each poll, and taken once Slurm has
    /// what it names.
    #[test]
    fn issue25_4_a_file_slurm_refuses_is_held_back_and_taken_later() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("teamshare.toml");
        std::fs::write(&path, VALID).unwrap();
        let start = teamshare_config::load(&path).unwrap();
        let mut watch = ConfigWatch::new(&path, &start);
        std::fs::write(&path, VALID.replace("\"gpu\"]", "\"nosuch\"]")).unwrap();
        let mut slurm_has_it = false;
        let mut asked = 0;
        let mut verify = |c: &Config| {
            asked += 1;
            if slurm_has_it || c.cluster.partitions == ["gpu"] {
                Verified::Fits
            } else {
                Verified::Refused("no such partition".into())
            }
        };
        match watch.check_with(false, &mut verify) {
            Reload::Rejected { why, kept } => {
                assert_eq!(why, "no such partition");
                assert_eq!(kept, start.digest);
            }
            other => panic!("{other:?}"),
        }
        // Looked at again, not said again.
        assert!(matches!(
            watch.check_with(false, &mut verify),
            Reload::Unchanged
        ));
        assert!(matches!(
            watch.check_with(false, &mut verify),
            Reload::Unchanged
        ));
        // A SIGHUP says it again.
        assert!(matches!(
            watch.check_with(true, &mut verify),
            Reload::Rejected { .. }
        ));
        slurm_has_it = true;
        let mut verify = |_: &Config| {
            if slurm_has_it {
                Verified::Fits
            } else {
                Verified::Refused(String::new())
            }
        };
        match watch.check_with(false, &mut verify) {
            Reload::Reloaded {
                from, unchecked, ..
            } => {
                assert_eq!(from, start.digest);
                assert_eq!(unchecked, None);
            }
            other => panic!("{other:?}"),
        }
        // In force now: nothing more to look at until the file changes.
        assert!(matches!(
            watch.check_with(false, &mut verify),
            Reload::Unchanged
        ));
        // Slurm that cannot be asked: put in force, with why it was not checked.
        std::fs::write(&path, VALID.replace("quota = 1", "quota = 2")).unwrap();
        match watch.check_with(false, &mut |_| Verified::Unchecked("slurmctld down".into())) {
            Reload::Reloaded { unchecked, .. } => {
                assert_eq!(unchecked.as_deref(), Some("slurmctld down"))
            }
            other => panic!("{other:?}"),
        }
    }
}

#[cfg(test)]
mod hostile_files {
    use super::*;
    use std::time::Instant;

    const VALID: &str =
        "[cluster]\nname = \"c\"\npartitions = [\"gpu\"]\n\n[[team]]\nname = \"a\"\nquota = 1\n";

    /// Issue 25, finding 2: a FIFO put at the config path blocked `accountd run`'s watcher for
    /// ever (and a SIGHUP then said "unchanged"); a symlink to /dev/zero grew the daemon by
    /// gigabytes. Each is now a rejected reload, said at once, and the configuration in force
    /// stays; putting the file back reloads nothing new.
    #[test]
    fn issue25_2_a_fifo_or_a_device_swapped_in_is_rejected_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("teamshare.toml");
        std::fs::write(&path, VALID).unwrap();
        let start = teamshare_config::load(&path).unwrap();
        let mut watch = ConfigWatch::new(&path, &start);
        for swap in ["fifo", "zero"] {
            std::fs::remove_file(&path).unwrap();
            if swap == "fifo" {
                let made = std::process::Command::new("mkfifo")
                    .arg(&path)
                    .status()
                    .unwrap();
                assert!(made.success());
            } else {
                std::os::unix::fs::symlink("/dev/zero", &path).unwrap();
            }
            for asked in [false, true] {
                let t0 = Instant::now();
                let r = watch.check(asked);
                assert!(t0.elapsed() < Duration::from_secs(5), "{swap}: {r:?}");
                // A look after the swap, then a SIGHUP: each says why, neither "unchanged".
                match r {
                    Reload::Rejected { why, kept } => {
                        assert!(why.contains("not a regular file"), "{swap}: {why}");
                        assert_eq!(kept, start.digest);
                    }
                    other => panic!("{swap}: {other:?}"),
                }
            }
        }
        std::fs::remove_file(&path).unwrap();
        std::fs::write(&path, VALID).unwrap();
        assert!(matches!(watch.check(false), Reload::Same { .. }));
    }
}
