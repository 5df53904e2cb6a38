//! The governor's side of the limits helper: one long-lived child process (`accountd
//! slurm-limits-helper`, [`super::serve_limits`]) that moves team limits through slurmdbd's
//! API, started at the first limit move and kept, so that a limit moved costs a line on a
//! pipe and the helper's RPCs, not a sacctmgr process. The helper is started again after it
//! ends (slurmdbd's plugin can end it, see [`super::limits`]) or stops answering; where it
//! cannot be started at all, the change goes through sacctmgr.

use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};

use crate::slurm_write::{CommandWriter, SlurmWrite, WriteError, UPDATE_TIMEOUT};

/// The subcommand of the helper's program that serves limit changes.
pub const HELPER_SUBCOMMAND: &str = "slurm-limits-helper";

/// Limit changes through the helper (see the module's documentation).
#[derive(Debug)]
pub struct LimitsHelper {
    program: PathBuf,
    running: Option<Running>,
    /// Requests answered by the helper.
    pub(super) requests: u64,
}

#[derive(Debug)]
struct Running {
    child: Child,
    stdin: ChildStdin,
    answers: Receiver<String>,
}

impl LimitsHelper {
    /// A helper run as `program slurm-limits-helper` (accountd's own binary), started when
    /// first needed.
    pub fn new(program: PathBuf) -> LimitsHelper {
        LimitsHelper {
            program,
            running: None,
            requests: 0,
        }
    }

    /// Set the account's GrpTRES on the cluster (names as sacctmgr reads them).
    pub fn set_grp_tres(
        &mut self,
        cluster: &str,
        account: &str,
        tres: &str,
    ) -> Result<(), WriteError> {
        let fields = [cluster, account, tres];
        if fields.iter().any(|f| f.contains(['\t', '\n', '\r'])) {
            return Err(helper_error(
                account,
                "a name holds a tab or a line break".into(),
            ));
        }
        if self.running.is_none() {
            match self.start() {
                Ok(r) => self.running = Some(r),
                // Not startable (the binary replaced or gone): this change through sacctmgr.
                Err(_) => return CommandWriter.set_grp_tres(cluster, account, tres),
            }
        }
        let Some(r) = self.running.as_mut() else {
            return Err(helper_error(account, "not running".into()));
        };
        self.requests += 1;
        let sent = writeln!(r.stdin, "{cluster}\t{account}\t{tres}").and_then(|()| r.stdin.flush());
        let answer = match sent {
            Ok(()) => r.answers.recv_timeout(UPDATE_TIMEOUT),
            Err(_) => Err(RecvTimeoutError::Disconnected),
        };
        match answer {
            Ok(line) if line == "ok" => Ok(()),
            Ok(line) => match line.strip_prefix("err ") {
                Some(why) => Err(helper_error(account, why.to_string())),
                None => {
                    let why = format!("unexpected answer {line:?}");
                    Err(helper_error(account, self.stop_with(why)))
                }
            },
            Err(RecvTimeoutError::Timeout) => {
                let why = format!("no answer within {UPDATE_TIMEOUT:?}");
                Err(helper_error(account, self.stop_with(why)))
            }
            Err(RecvTimeoutError::Disconnected) => {
                Err(helper_error(account, self.stop_with("it ended".into())))
            }
        }
    }

    fn start(&mut self) -> std::io::Result<Running> {
        let mut child = Command::new(&self.program)
            .arg(HELPER_SUBCOMMAND)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()?;
        crate::slurm_cli::count_process();
        let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            let _ = child.kill();
            let _ = child.wait();
            return Err(std::io::Error::other("no pipes to the helper"));
        };
        let (send, answers) = mpsc::channel();
        // Ends at the helper's end of output, or when the governor's side is dropped.
        std::thread::Builder::new()
            .name("limits-helper".into())
            .spawn(move || {
                for line in BufReader::new(stdout).lines() {
                    let Ok(line) = line else { break };
                    if send.send(line).is_err() {
                        break;
                    }
                }
            })?;
        Ok(Running {
            child,
            stdin,
            answers,
        })
    }

    /// End the helper (the next change starts another); `why` with how it ended.
    fn stop_with(&mut self, why: String) -> String {
        let Some(mut r) = self.running.take() else {
            return why;
        };
        drop(r.stdin);
        let _ = r.child.kill();
        match r.child.wait() {
            Ok(status) => format!("{why} (the limits helper {status})"),
            Err(_) => why,
        }
    }
}

impl Drop for LimitsHelper {
    fn drop(&mut self) {
        self.stop_with(String::new());
    }
}

fn helper_error(account: &str, message: String) -> WriteError {
    WriteError::Call {
        call: "slurmdb_associations_modify",
        target: format!("account {account}"),
        message,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stand-in helper: a shell that answers each request as the script says.
    fn helper(script: &str) -> (tempfile::TempDir, LimitsHelper) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("helper");
        std::fs::write(&path, format!("#!/bin/sh\n{script}\n")).unwrap();
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        (dir, LimitsHelper::new(path))
    }

    #[test]
    fn answers_are_read_in_order_and_one_helper_serves_every_change() {
        let script = r#"[ "$1" = slurm-limits-helper ] || exit 9
while read -r c a t; do
  case $a in bad) echo "err no association of account $a" ;; *) echo ok ;; esac
done"#;
        let (_dir, mut h) = helper(script);
        let before = crate::slurm_cli::calls_on_this_thread();
        h.set_grp_tres("c", "alpha", "gres/gpu=3").unwrap();
        let e = h.set_grp_tres("c", "bad", "gres/gpu=1").unwrap_err();
        assert!(
            e.to_string().contains("no association of account bad"),
            "{e}"
        );
        h.set_grp_tres("c", "beta", "gres/gpu=2").unwrap();
        assert_eq!(h.requests, 3);
        assert_eq!(crate::slurm_cli::calls_on_this_thread() - before, 1);
    }

    #[test]
    fn a_helper_that_dies_is_an_error_and_is_started_again() {
        // Answers one request, then ends as a failed symbol lookup would end it.
        let (_dir, mut h) = helper("read -r line; echo ok; read -r line; exit 127");
        let before = crate::slurm_cli::calls_on_this_thread();
        h.set_grp_tres("c", "alpha", "gres/gpu=3").unwrap();
        let e = h.set_grp_tres("c", "alpha", "gres/gpu=4").unwrap_err();
        assert!(e.to_string().contains("it ended"), "{e}");
        h.set_grp_tres("c", "alpha", "gres/gpu=4").unwrap();
        assert_eq!(crate::slurm_cli::calls_on_this_thread() - before, 2);
    }

    #[test]
    fn a_field_that_would_break_the_protocol_is_refused_before_sending() {
        let (_dir, mut h) = helper("exit 1");
        assert!(h.set_grp_tres("c", "a\tb", "gres/gpu=1").is_err());
        assert!(h.set_grp_tres("c", "a", "gres/gpu=1\nx").is_err());
        assert_eq!(h.requests, 0);
    }
}
