//! The live cluster fixture and the Slurm client helpers the scenarios share.
//!
//! The cluster is the one `contrib/cluster/start.sh` makes; these helpers only run the real
//! Slurm clients (sbatch, squeue, sacct, scontrol) and accountd against it and poll for
//! outcomes with generous deadlines, never fixed sleeps.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Mutex;
use std::time::{Duration, Instant};

pub type TestResult = Result<(), String>;

/// The repository root (this crate lives in `tests/`).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ has a parent")
        .to_path_buf()
}

/// A running throwaway cluster; stopped on drop, logs kept when a test failed.
pub struct Cluster {
    pub dir: PathBuf,
    pub slurm_conf: PathBuf,
    pub accountd: PathBuf,
    pub production_plugin: PathBuf,
    /// Job ids each test submitted, cancelled at the end of the test.
    submitted: Mutex<Vec<String>>,
    keep_logs: Mutex<bool>,
}

fn env_or(name: &str, default: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| default.to_string())
}

impl Cluster {
    /// Start the cluster with the plugin and configuration of the test run.
    pub fn start() -> Result<Cluster, String> {
        let root = repo_root();
        let target = root.join("target/release");
        let plugin = PathBuf::from(env_or(
            "TEAMSHARE_PLUGIN",
            &root
                .join("target/live-plugin/libjob_submit_teamshare.so")
                .to_string_lossy(),
        ));
        let accountd = target.join("accountd");
        let production_plugin = target.join("libjob_submit_teamshare.so");
        for (what, p) in [
            ("the plugin built with --features test-panic", &plugin),
            ("accountd (cargo build --release)", &accountd),
            ("the release plugin (cargo build --release)", &production_plugin),
        ] {
            if !p.is_file() {
                return Err(format!(
                    "{what} is missing at {}; run the tests with contrib/test.sh",
                    p.display()
                ));
            }
        }
        let dir = PathBuf::from(env_or(
            "TEAMSHARE_LIVE_DIR",
            &format!("/tmp/teamshare-live-{}", std::process::id()),
        ));
        let config = root.join("tests/live/teamshare.toml");
        let start = Instant::now();
        let out = Command::new(root.join("contrib/cluster/start.sh"))
            .arg(&dir)
            .env("TEAMSHARE_PLUGIN", &plugin)
            .env("TEAMSHARE_CONFIG", &config)
            .env("ACCOUNTD", &accountd)
            .env("CLUSTER_NAME", "teamshare-live")
            // Ports apart from the demo's defaults, so both can run on one machine.
            .env("SLURMCTLD_PORT", env_or("LIVE_SLURMCTLD_PORT", "26817"))
            .env("SLURMDBD_PORT", env_or("LIVE_SLURMDBD_PORT", "26819"))
            .env("MARIADB_PORT", env_or("LIVE_MARIADB_PORT", "23306"))
            .env("SLURMD_PORT_BASE", env_or("LIVE_SLURMD_PORT_BASE", "27001"))
            .output()
            .map_err(|e| format!("cannot run contrib/cluster/start.sh: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "the live cluster did not start ({}); logs are in {}/log\n--- stdout\n{}\n--- stderr\n{}",
                out.status,
                dir.display(),
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        eprintln!(
            "live cluster up in {:.1} s at {}",
            start.elapsed().as_secs_f64(),
            dir.display()
        );
        Ok(Cluster {
            slurm_conf: dir.join("etc/slurm.conf"),
            dir,
            accountd,
            production_plugin,
            submitted: Mutex::new(Vec::new()),
            keep_logs: Mutex::new(false),
        })
    }

    /// Keep the cluster's logs after the run (called when a test failed).
    pub fn keep_logs(&self) {
        *self.keep_logs.lock().unwrap_or_else(|p| p.into_inner()) = true;
    }

    /// A Slurm client command (or any command that needs SLURM_CONF) against this cluster.
    pub fn cmd(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut c = Command::new(program);
        c.env("SLURM_CONF", &self.slurm_conf);
        c
    }

    pub fn run(&self, program: &str, args: &[&str]) -> Result<Output, String> {
        self.cmd(program)
            .args(args)
            .output()
            .map_err(|e| format!("cannot run {program}: {e}"))
    }

    /// Run and require success; returns stdout.
    pub fn ok(&self, program: &str, args: &[&str]) -> Result<String, String> {
        let out = self.run(program, args)?;
        if !out.status.success() {
            return Err(format!(
                "{program} {} failed ({}): {}",
                args.join(" "),
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// Submit with sbatch; Ok(job id) or Err(stderr) when sbatch refuses it.
    pub fn sbatch(&self, args: &[&str]) -> Result<String, String> {
        let mut full = vec!["--parsable", "-o", "/dev/null", "-e", "/dev/null"];
        full.extend_from_slice(args);
        let out = self.run("sbatch", &full)?;
        if !out.status.success() {
            return Err(String::from_utf8_lossy(&out.stderr).into_owned());
        }
        let stdout = String::from_utf8_lossy(&out.stdout);
        let id = stdout.trim().split(';').next().unwrap_or("").to_string();
        if id.is_empty() || !id.chars().all(|c| c.is_ascii_digit()) {
            return Err(format!("sbatch printed no job id: {stdout:?}"));
        }
        self.submitted
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(id.clone());
        Ok(id)
    }

    /// Cancel every job the tests submitted that may still be queued or running.
    pub fn cancel_submitted(&self) {
        let ids: Vec<String> =
            std::mem::take(&mut *self.submitted.lock().unwrap_or_else(|p| p.into_inner()));
        if ids.is_empty() {
            return;
        }
        let mut args = vec!["--quiet".to_string()];
        args.extend(ids);
        let _ = self.cmd("scancel").args(&args).output();
    }

    /// A job's state as squeue shows it, or as sacct does once it left the queue.
    pub fn job_state(&self, id: &str) -> Result<String, String> {
        let q = self.run("squeue", &["-h", "-j", id, "-o", "%T"])?;
        let s = String::from_utf8_lossy(&q.stdout).trim().to_string();
        if q.status.success() && !s.is_empty() {
            return Ok(s);
        }
        let out = self.ok("sacct", &["-n", "-X", "-P", "-j", id, "-o", "State"])?;
        Ok(out
            .lines()
            .last()
            .unwrap_or("")
            .split_whitespace()
            .next()
            .unwrap_or("")
            .to_string())
    }

    /// Poll until `check` returns Some, or fail after `deadline` with `what`.
    pub fn wait_for<T>(
        &self,
        what: &str,
        deadline: Duration,
        mut check: impl FnMut() -> Result<Option<T>, String>,
    ) -> Result<T, String> {
        let start = Instant::now();
        loop {
            if let Some(v) = check()? {
                return Ok(v);
            }
            if start.elapsed() > deadline {
                return Err(format!("timed out after {deadline:?} waiting for {what}"));
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Wait until sacct (the database, written asynchronously by slurmdbd) shows every job in a
    /// final state.
    pub fn wait_completed_in_sacct(&self, ids: &[String], deadline: Duration) -> TestResult {
        let list = ids.join(",");
        self.wait_for("jobs to be complete in sacct", deadline, || {
            let out = self.ok(
                "sacct",
                &["-n", "-X", "-P", "-j", &list, "-o", "JobIDRaw,State,End"],
            )?;
            let done = out
                .lines()
                .filter(|l| {
                    let f: Vec<&str> = l.split('|').collect();
                    f.len() == 3 && f[1] == "COMPLETED" && f[2] != "Unknown"
                })
                .count();
            Ok((done >= ids.len()).then_some(()))
        })
    }

    pub fn slurmctld_log(&self) -> String {
        std::fs::read_to_string(self.dir.join("log/slurmctld.log")).unwrap_or_default()
    }

    /// The pid slurmctld was started with, and whether it is alive.
    pub fn slurmctld_alive(&self) -> bool {
        let pid = std::fs::read_to_string(self.dir.join("pids/slurmctld.pid")).unwrap_or_default();
        let pid = pid.trim();
        !pid.is_empty() && Path::new(&format!("/proc/{pid}")).exists()
    }

    /// Run accountd with this cluster's configuration and a database of the test's own.
    pub fn accountd(&self, db: &Path, args: &[&str]) -> Result<Output, String> {
        self.cmd(&self.accountd)
            .arg("--config")
            .arg(self.dir.join("etc/teamshare.toml"))
            .arg("--database")
            .arg(db)
            .args(args)
            .output()
            .map_err(|e| format!("cannot run accountd: {e}"))
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.cancel_submitted();
        let keep = *self.keep_logs.lock().unwrap_or_else(|p| p.into_inner());
        let _ = Command::new(repo_root().join("contrib/cluster/stop.sh"))
            .arg(&self.dir)
            .status();
        if keep {
            let dest = repo_root().join("target/live-logs");
            let _ = std::fs::remove_dir_all(&dest);
            let _ = std::fs::create_dir_all(&dest);
            let _ = Command::new("cp")
                .arg("-r")
                .arg(self.dir.join("log"))
                .arg(&dest)
                .status();
            eprintln!(
                "a live test failed: the cluster's logs are kept in {} (and {})",
                dest.join("log").display(),
                self.dir.join("log").display()
            );
        } else {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// `check(cond, msg)`: a failed assertion as an Err, so the harness reports it and goes on.
pub fn ensure(cond: bool, msg: impl FnOnce() -> String) -> TestResult {
    if cond {
        Ok(())
    } else {
        Err(msg())
    }
}
