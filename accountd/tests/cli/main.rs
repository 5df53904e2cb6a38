//! The real `accountd` binary in temporary directories: exit codes, outputs, and the Slurm
//! commands it runs (stood in for by scripts on PATH that record their arguments).

// Test code: a scenario reads top to bottom, so the workspace's 80-line limit is not for it.
#![allow(clippy::too_many_lines)]

use std::fs;
use std::io::{BufRead as _, Read as _, Write as _};
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use accountd::store::Store;

const BIN: &str = env!("CARGO_BIN_EXE_accountd");

const CONFIG: &str = r#"[cluster]
name = "testcluster"
partitions = ["gpu"]
currency = "BRL"

[gpu_types.default]
rate_per_hour = 10.0

[gpu_types.h100]
rate_per_hour = 70.0

[[team]]
name = "agents"
quota = 2
borrow_limit = 2
weight = 40

[[team]]
name = "training"
quota = 4
weight = 30

[[priority_class]]
name = "inference"
value = 100
preemptible = false

[accountd]
database = "accountd.db"
"#;

/// A temporary directory with teamshare.toml, a slurm.conf placeholder and a bin/ for fakes.
struct Site {
    dir: tempfile::TempDir,
}

impl Site {
    fn new(config: &str) -> Site {
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join("teamshare.toml"), config).unwrap();
        fs::write(dir.path().join("slurm.conf"), "ClusterName=testcluster\n").unwrap();
        fs::create_dir(dir.path().join("bin")).unwrap();
        Site { dir }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// A stand-in for a Slurm command: records its arguments (one per line) in `<name>.args`
    /// (appending, one call after another) and prints `<name>.out`.
    fn fake(&self, name: &str, stdout: &str) {
        let script = format!(
            "#!/bin/sh\nprintf '%s\\n' \"$@\" >> '{dir}/{name}.args'\necho '--' >> '{dir}/{name}.args'\ncat '{dir}/{name}.out'\n",
            dir = self.dir.path().display()
        );
        let bin = self.path("bin").join(name);
        fs::write(&bin, script).unwrap();
        fs::set_permissions(&bin, fs::Permissions::from_mode(0o755)).unwrap();
        fs::write(self.path(&format!("{name}.out")), stdout).unwrap();
    }

    /// squeue answering the governor (`squeue.out`) and the runaway check (`-o %A`:
    /// `squeue.ids`, the jobs slurmctld knows).
    fn fake_squeue(&self, governor_out: &str, job_ids: &str) {
        let dir = self.dir.path().display();
        self.script(
            "squeue",
            &format!(
                "printf '%s\\n' \"$@\" >> '{dir}/squeue.args'\necho '--' >> '{dir}/squeue.args'\ncase \"$*\" in *%A*) cat '{dir}/squeue.ids' ;; *) cat '{dir}/squeue.out' ;; esac\n"
            ),
        );
        fs::write(self.path("squeue.out"), governor_out).unwrap();
        fs::write(self.path("squeue.ids"), job_ids).unwrap();
    }

    /// A stand-in for a command: `body` as a shell script.
    fn script(&self, name: &str, body: &str) {
        let bin = self.path("bin").join(name);
        fs::write(&bin, format!("#!/bin/sh\n{body}")).unwrap();
        fs::set_permissions(&bin, fs::Permissions::from_mode(0o755)).unwrap();
    }

    fn args_of(&self, name: &str) -> Vec<String> {
        fs::read_to_string(self.path(&format!("{name}.args")))
            .unwrap_or_default()
            .lines()
            .map(str::to_string)
            .collect()
    }

    /// accountd with this site's config, UTC local time, fakes first on PATH, no SLURM_CONF
    /// unless `with_slurm_conf`.
    fn run(&self, with_slurm_conf: bool, args: &[&str]) -> Output {
        self.command(with_slurm_conf, args).output().unwrap()
    }

    fn command(&self, with_slurm_conf: bool, args: &[&str]) -> Command {
        let path = format!(
            "{}:{}",
            self.path("bin").display(),
            std::env::var("PATH").unwrap_or_default()
        );
        let mut cmd = Command::new(BIN);
        cmd.arg("--config")
            .arg(self.path("teamshare.toml"))
            .args(args)
            .env("TZ", "UTC")
            .env("PATH", path)
            .env_remove("SLURM_CONF")
            // The stand-ins above are commands: the governor reads through them, not libslurm.
            .env("TEAMSHARE_SLURM_READER", "commands")
            .current_dir(self.dir.path());
        if with_slurm_conf {
            cmd.env("SLURM_CONF", self.path("slurm.conf"));
        }
        cmd
    }
}

fn code(o: &Output) -> i32 {
    o.status.code().expect("exited")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// A running `accountd run` whose stderr lines are collected.
struct Daemon {
    child: std::process::Child,
    lines: std::sync::mpsc::Receiver<String>,
    log: Vec<String>,
}

impl Daemon {
    fn start(site: &Site, args: &[&str]) -> Daemon {
        let mut child = site
            .command(true, &[&["run"][..], args].concat())
            .stderr(Stdio::piped())
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        let (tx, lines) = std::sync::mpsc::channel::<String>();
        let pipe = child.stderr.take().unwrap();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(pipe).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        Daemon {
            child,
            lines,
            log: Vec::new(),
        }
    }

    fn drain(&mut self) {
        while let Ok(line) = self.lines.try_recv() {
            self.log.push(line);
        }
    }

    /// Wait until `cond` holds (checked every 20 ms), at most `secs`.
    fn wait_for(&mut self, secs: u64, what: &str, mut cond: impl FnMut(&[String]) -> bool) {
        let deadline = Instant::now() + Duration::from_secs(secs);
        loop {
            self.drain();
            if cond(&self.log) {
                return;
            }
            assert!(Instant::now() < deadline, "{what}: {:#?}", self.log);
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn signal(&self, name: &str) {
        let ok = Command::new("kill")
            .args([&format!("-{name}"), &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(ok.success());
    }

    /// SIGTERM, and the exit status within `secs`.
    fn stop(&mut self, secs: u64) -> std::process::ExitStatus {
        self.signal("TERM");
        let deadline = Instant::now() + Duration::from_secs(secs);
        let status = loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                break status;
            }
            assert!(
                Instant::now() < deadline,
                "still running {secs} s after SIGTERM: {:#?}",
                self.log
            );
            std::thread::sleep(Duration::from_millis(50));
        };
        while let Ok(line) = self.lines.recv_timeout(Duration::from_secs(2)) {
            self.log.push(line);
        }
        status
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        // Our own child, by its handle, when a test failed before stopping it.
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

mod check_config;
mod daemon;
mod ingest;
mod limits_helper;
mod report;
use report::*;
mod run;
use run::*;
mod runaway;
mod setup_slurm;
use setup_slurm::*;
mod status;
mod stdout_closed;
