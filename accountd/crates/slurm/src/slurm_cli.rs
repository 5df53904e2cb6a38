//! Running Slurm's client commands (sacct, sinfo, sacctmgr): one place that knows what they need
//! from the environment and how they fail.

use std::ffi::OsString;
use std::io::{BufRead, BufReader, Read};
use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

/// What every Slurm client needs: without `SLURM_CONF` they try a configless DNS lookup and die.
pub const SLURM_CONF_VAR: &str = "SLURM_CONF";

#[derive(Debug, thiserror::Error)]
pub enum SlurmCommandError {
    #[error("SLURM_CONF is not set: export SLURM_CONF=/path/to/slurm.conf so that `{program}` can find the cluster")]
    SlurmConfUnset { program: String },
    #[error("`{program}` was not found in PATH (is slurm-client installed?)")]
    NotFound { program: String },
    #[error("cannot run `{program}`: {source}")]
    Spawn {
        program: String,
        source: std::io::Error,
    },
    #[error("`{command}` did not finish within {seconds} s and was stopped")]
    TimedOut { command: String, seconds: u64 },
    #[error("`{command}` failed ({status}): {stderr}")]
    Failed {
        command: String,
        status: String,
        stderr: String,
    },
    #[error("`{command}` printed output that is not UTF-8")]
    NotUtf8 { command: String },
}

/// The output of a command that exited successfully.
#[derive(Debug, Clone)]
pub struct CommandOutput {
    pub stdout: String,
    pub stderr: String,
}

thread_local! {
    /// Slurm client commands started on this thread (the governor counts its calls per pass).
    static CALLS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// How many Slurm client commands this thread has started so far.
pub fn calls_on_this_thread() -> u64 {
    CALLS.with(std::cell::Cell::get)
}

/// Count a process this thread started to talk to Slurm that is not a [`SlurmCommand`] (the
/// limits helper, [`crate::slurm_api::LimitsHelper`]).
pub(crate) fn count_process() {
    CALLS.with(|c| c.set(c.get() + 1));
}

/// A Slurm client invocation.
#[derive(Debug, Clone)]
pub struct SlurmCommand {
    pub program: String,
    pub args: Vec<String>,
    pub timeout: Duration,
}

impl SlurmCommand {
    pub fn new(program: &str, args: Vec<String>, timeout: Duration) -> Self {
        SlurmCommand {
            program: program.to_string(),
            args,
            timeout,
        }
    }

    /// The command line as an administrator would type it (for messages and `--dry-run`).
    pub fn display(&self) -> String {
        let mut s = self.program.clone();
        for a in &self.args {
            s.push(' ');
            s.push_str(&shell_quote(a));
        }
        s
    }

    /// Run it and return its output; a non-zero exit is an error carrying stderr.
    pub fn run(&self) -> Result<CommandOutput, SlurmCommandError> {
        let (status, out) = self.run_unchecked()?;
        if status.success() {
            Ok(out)
        } else {
            let stderr = first_lines(&out.stderr, &out.stdout);
            Err(SlurmCommandError::Failed {
                command: self.display(),
                status: status.to_string(),
                stderr,
            })
        }
    }

    /// Run it and return its exit status and output whatever the status.
    pub fn run_unchecked(
        &self,
    ) -> Result<(std::process::ExitStatus, CommandOutput), SlurmCommandError> {
        let mut child = self.spawn()?;
        // Drain both pipes on their own threads so that a chatty command never blocks on a full
        // pipe while we wait for it.
        let stdout = child.stdout.take().map(drain);
        let stderr = child.stderr.take().map(drain);
        let status = self.wait(child)?;
        let collect =
            |h: Option<thread::JoinHandle<Vec<u8>>>| -> Result<String, SlurmCommandError> {
                let bytes = h.map(|h| h.join().unwrap_or_default()).unwrap_or_default();
                String::from_utf8(bytes).map_err(|_| SlurmCommandError::NotUtf8 {
                    command: self.display(),
                })
            };
        let out = CommandOutput {
            stdout: collect(stdout)?,
            stderr: collect(stderr)?,
        };
        Ok((status, out))
    }

    /// Run it and hand its standard output to `read` as it comes, without holding all of it
    /// (sacct prints hundreds of megabytes for a long window). Returns what `read` returned and,
    /// apart, how the command ended: an error when it failed or ran out of time, so that the
    /// caller keeps nothing it read from a command that did not finish (and still sees its own
    /// error first when `read` stopped early).
    pub fn stream<T>(
        &self,
        read: impl FnOnce(&mut (dyn BufRead + Send)) -> T,
    ) -> Result<(T, Result<(), SlurmCommandError>), SlurmCommandError> {
        let mut child = self.spawn()?;
        let stdout = child.stdout.take();
        let stderr = child.stderr.take().map(drain);
        // The deadline is kept by a watchdog that owns the child: a command that stops writing
        // without exiting would otherwise block `read` for ever.
        let watchdog = {
            let this = self.clone();
            thread::spawn(move || this.wait(child))
        };
        let value = match stdout {
            Some(out) => {
                let mut reader = BufReader::with_capacity(1 << 16, out);
                read(&mut reader)
                // Dropped here: a command still writing gets EPIPE and ends.
            }
            None => read(&mut std::io::empty()),
        };
        let ended = match watchdog.join() {
            Ok(Ok(status)) if status.success() => Ok(()),
            Ok(Ok(status)) => {
                let bytes = stderr
                    .map(|h| h.join().unwrap_or_default())
                    .unwrap_or_default();
                Err(SlurmCommandError::Failed {
                    command: self.display(),
                    status: status.to_string(),
                    stderr: first_lines(&String::from_utf8_lossy(&bytes), ""),
                })
            }
            Ok(Err(e)) => Err(e),
            Err(_) => Err(SlurmCommandError::Spawn {
                program: self.program.clone(),
                source: std::io::Error::other("the thread waiting for it failed"),
            }),
        };
        Ok((value, ended))
    }

    fn spawn(&self) -> Result<std::process::Child, SlurmCommandError> {
        CALLS.with(|c| c.set(c.get() + 1));
        if slurm_conf().is_none() {
            return Err(SlurmCommandError::SlurmConfUnset {
                program: self.program.clone(),
            });
        }
        Command::new(&self.program)
            .args(&self.args)
            // Times in and out of Slurm's clients are local time of the process: pin the zone to
            // UTC and the layout to `standard` so that they are read without any ambiguity (no
            // repeated hour when daylight saving ends), whatever the administrator's environment.
            .env("TZ", "UTC")
            .env("SLURM_TIME_FORMAT", "standard")
            // A job array's pending tasks in full (`1-1000,1003`), not cut to 64 characters
            // with "...": the governor counts them and addresses them.
            .env("SLURM_BITSTR_LEN", "0")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|source| {
                if source.kind() == std::io::ErrorKind::NotFound {
                    SlurmCommandError::NotFound {
                        program: self.program.clone(),
                    }
                } else {
                    SlurmCommandError::Spawn {
                        program: self.program.clone(),
                        source,
                    }
                }
            })
    }

    /// Wait for the child until the timeout, then kill it.
    fn wait(
        &self,
        mut child: std::process::Child,
    ) -> Result<std::process::ExitStatus, SlurmCommandError> {
        let deadline = Instant::now() + self.timeout;
        loop {
            match child.try_wait() {
                Ok(Some(status)) => return Ok(status),
                Ok(None) if Instant::now() >= deadline => {
                    // Our own child, by its handle.
                    let _ = child.kill();
                    let _ = child.wait();
                    return Err(SlurmCommandError::TimedOut {
                        command: self.display(),
                        seconds: self.timeout.as_secs(),
                    });
                }
                Ok(None) => thread::sleep(Duration::from_millis(20)),
                Err(source) => {
                    return Err(SlurmCommandError::Spawn {
                        program: self.program.clone(),
                        source,
                    })
                }
            }
        }
    }
}

fn drain<R: Read + Send + 'static>(mut r: R) -> thread::JoinHandle<Vec<u8>> {
    thread::spawn(move || {
        let mut buf = Vec::new();
        let _ = r.read_to_end(&mut buf);
        buf
    })
}

/// The first few lines of what a failed command said, for an error message.
fn first_lines(stderr: &str, stdout: &str) -> String {
    let text = if stderr.trim().is_empty() {
        stdout
    } else {
        stderr
    };
    let lines: Vec<&str> = text
        .lines()
        .filter(|l| !l.trim().is_empty())
        .take(5)
        .collect();
    if lines.is_empty() {
        "no message".to_string()
    } else {
        lines.join(" / ")
    }
}

/// Quote an argument for display the way a POSIX shell would read it back.
pub fn shell_quote(arg: &str) -> String {
    let plain = !arg.is_empty()
        && arg
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_=/.,:@%+".contains(c));
    if plain {
        arg.to_string()
    } else {
        format!("'{}'", arg.replace('\'', r"'\''"))
    }
}

/// A cluster, account or user name as Slurm's database keeps it: in lower case (slurm.conf(5)
/// ClusterName, sacctmgr(1)), whatever case teamshare.toml or the command line used.
pub fn slurm_name(name: &str) -> String {
    name.to_lowercase()
}

/// Whether Slurm's clients can be tried at all (used to skip optional checks with one line).
pub fn slurm_conf() -> Option<OsString> {
    std::env::var_os(SLURM_CONF_VAR).filter(|v| !v.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoting_for_display() {
        assert_eq!(shell_quote("gres/gpu=4"), "gres/gpu=4");
        assert_eq!(shell_quote("%N|%G|%t"), "'%N|%G|%t'");
        assert_eq!(shell_quote("it's"), r"'it'\''s'");
        assert_eq!(shell_quote(""), "''");
    }
}
