//! The live cluster fixture and the Slurm client helpers the scenarios share.
//!
//! The cluster is the one `contrib/cluster/start.sh` makes; these helpers only run the real
//! Slurm clients (sbatch, squeue, sacct, scontrol) and accountd against it and poll for
//! outcomes with generous deadlines, never fixed sleeps.

// Test code: a scenario reads top to bottom, so the workspace's 80-line limit is not for it.
#![allow(clippy::too_many_lines)]

/// The clusters of one run: `Spec::SHARED`, `Spec::TYPED`, ...
mod specs;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

pub type TestResult = Result<(), String>;
/// A live scenario: its name and its body.
pub type Scenario = (&'static str, fn(&Cluster) -> TestResult);
/// A live scenario that starts what it needs itself (no shared cluster): its name and body.
pub type Standalone = (&'static str, fn() -> TestResult);

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
    governor: Mutex<Option<Child>>,
    /// The configuration the cluster started with (scenarios that change it restore it).
    original_config: String,
    /// Where `accountd run` serves /metrics (the configuration's metrics_listen).
    metrics_addr: String,
    /// Where its logs are kept when a test failed.
    logs_dest: PathBuf,
}

/// What differs between the live clusters of one run.
pub struct Spec {
    /// Slurm's ClusterName, as the configuration's `[cluster]` name.
    pub name: &'static str,
    /// The configuration, under tests/live/.
    pub config: &'static str,
    pub nodes: u32,
    /// contrib/cluster/start.sh's GPU_TYPES.
    pub gpu_types: &'static str,
    /// contrib/cluster/start.sh's SHARDS (gres/shard per GPU of each node).
    pub shards: &'static str,
    /// Added to every port of the shared cluster's.
    pub port_offset: u16,
    /// The configuration's metrics_listen.
    pub metrics_addr: &'static str,
    /// Appended to the cluster's directory name.
    pub dir_suffix: &'static str,
    /// Appended to where logs are kept when a test failed (`LIVE_LOGS`, by default
    /// target/live-logs under the repository root).
    pub logs_suffix: &'static str,
    /// Where the plugin and accountd come from.
    pub install: Install,
}

/// Where a cluster's plugin and accountd come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Install {
    /// The test run's builds: the plugin (`TEAMSHARE_PLUGIN`) copied into the cluster's own
    /// plugin directory, accountd from the build directory, and `accountd run` started as the
    /// cluster's governor.
    Build,
    /// The Debian packages installed on the host (tests/live/packaging.rs): slurmctld loads
    /// the plugin from Slurm's PluginDir, setup-slurm is the installed accountd's, and no
    /// governor is started: the scenario starts the packaged one.
    Packages,
}

/// The packages' names (contrib/deb/build.sh).
pub const PLUGIN_PACKAGE: &str = "teamshare-plugin";
pub const ACCOUNTD_PACKAGE: &str = "teamshare-accountd";

/// The installed file of `package` whose path ends with `suffix` (`dpkg-query -L`).
pub fn package_file(package: &str, suffix: &str) -> Result<PathBuf, String> {
    let out = Command::new("dpkg-query")
        .args(["-L", package])
        .output()
        .map_err(|e| format!("dpkg-query: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "{package} is not installed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find(|l| l.ends_with(suffix) && Path::new(l).is_file())
        .map(PathBuf::from)
        .ok_or_else(|| format!("{package} installs no file ending with {suffix}"))
}

/// `addr` (`host:port`) with its port moved by `offset`.
fn shift_port(addr: &str, offset: u16) -> Result<String, String> {
    let (host, port) = addr
        .rsplit_once(':')
        .ok_or_else(|| format!("{addr}: not host:port"))?;
    let port: u16 = port.parse().map_err(|_| format!("{addr}: not host:port"))?;
    let port = port
        .checked_add(offset)
        .ok_or_else(|| format!("{addr} moved by {offset} is past port 65535"))?;
    Ok(format!("{host}:{port}"))
}

/// A GRES request as squeue and scontrol print it, in one spelling: `gres:gpu:1` (22.05)
/// and `gres/gpu:1` (24.11 on) both read `gres:gpu:1`.
pub fn gres_text(s: &str) -> String {
    s.trim().replace("gres/", "gres:")
}

/// A Linux user that is not an operator, for the refusals users must get.
pub const PLAIN_USER: &str = "tsuser";

fn env_or(name: &str, default: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| default.to_string())
}

impl Cluster {
    /// Start the shared cluster with the plugin and configuration of the test run.
    pub fn start() -> Result<Cluster, String> {
        Self::start_with(&Spec::SHARED)
    }

    /// Start a cluster as `spec` says, with the plugin of the test run.
    pub fn start_with(spec: &Spec) -> Result<Cluster, String> {
        let root = repo_root();
        let target = root.join("target/release");
        // The plugin start.sh copies into the cluster (none: slurmctld finds the installed
        // one in Slurm's PluginDir), accountd, and the release plugin of the Slurm under test.
        let (plugin, accountd, production_plugin) = match spec.install {
            Install::Build => {
                let plugin = PathBuf::from(env_or(
                    "TEAMSHARE_PLUGIN",
                    &root
                        .join("target/live-plugin/libjob_submit_teamshare.so")
                        .to_string_lossy(),
                ));
                // target/release for the host's Slurm, contrib/slurm-release.sh's build
                // directory for another release.
                let build = PathBuf::from(env_or("TEAMSHARE_BUILD_DIR", &target.to_string_lossy()));
                let accountd = build.join("accountd");
                let production_plugin = build.join("libjob_submit_teamshare.so");
                for (what, p) in [
                    ("the plugin built with --features test-panic", &plugin),
                    ("accountd (cargo build --release)", &accountd),
                    (
                        "the release plugin (cargo build --release)",
                        &production_plugin,
                    ),
                ] {
                    if !p.is_file() {
                        return Err(format!(
                            "{what} is missing at {}; run the tests with contrib/test.sh",
                            p.display()
                        ));
                    }
                }
                (Some(plugin), accountd, production_plugin)
            }
            Install::Packages => (
                None,
                package_file(ACCOUNTD_PACKAGE, "/bin/accountd")?,
                package_file(PLUGIN_PACKAGE, "/job_submit_teamshare.so")?,
            ),
        };
        let dir = PathBuf::from(
            env_or(
                "TEAMSHARE_LIVE_DIR",
                &format!("/tmp/teamshare-live-{}", std::process::id()),
            ) + spec.dir_suffix,
        );
        let config = root.join("tests/live").join(spec.config);
        // LIVE_PORT_OFFSET moves every port of the run (Slurm's, MariaDB's, /metrics), so
        // that suites of several Slurm releases can run side by side on one host.
        let offset: u16 = env_or("LIVE_PORT_OFFSET", "0")
            .parse()
            .map_err(|_| "LIVE_PORT_OFFSET must be a number of ports (0-30000)".to_string())?;
        if offset > 30_000 {
            return Err("LIVE_PORT_OFFSET must be a number of ports (0-30000)".into());
        }
        let port = |var: &str, default: u16| {
            let base: u16 = env_or(var, &default.to_string()).parse().unwrap_or(default);
            (base + spec.port_offset + offset).to_string()
        };
        let metrics_addr = shift_port(spec.metrics_addr, offset)?;
        // The configuration as the cluster gets it: metrics_listen moved with the other ports.
        let original_config =
            std::fs::read_to_string(&config).map_err(|e| format!("{}: {e}", config.display()))?;
        let listen = format!("metrics_listen = \"{}\"", spec.metrics_addr);
        if !original_config.contains(&listen) {
            return Err(format!("{} must say {listen}", config.display()));
        }
        let original_config =
            original_config.replacen(&listen, &format!("metrics_listen = \"{metrics_addr}\""), 1);
        let config = PathBuf::from(format!("{}.teamshare.toml", dir.display()));
        std::fs::write(&config, &original_config)
            .map_err(|e| format!("{}: {e}", config.display()))?;
        ensure_plain_user()?;
        let start = Instant::now();
        let mut start_sh = Command::new(root.join("contrib/cluster/start.sh"));
        match &plugin {
            Some(plugin) => start_sh.env("TEAMSHARE_PLUGIN", plugin),
            None => start_sh
                .env_remove("TEAMSHARE_PLUGIN")
                .env("JOB_SUBMIT_PLUGINS", "teamshare"),
        };
        let out = start_sh
            .arg(&dir)
            .env("TEAMSHARE_CONFIG", &config)
            .env("ACCOUNTD", &accountd)
            .env("CLUSTER_USERS", format!("root {PLAIN_USER}"))
            .env("CLUSTER_NAME", spec.name)
            .env("NODES", spec.nodes.to_string())
            .env("GPU_TYPES", spec.gpu_types)
            .env("SHARDS", spec.shards)
            // Ports apart from the demo's defaults, so both can run on one machine.
            .env("SLURMCTLD_PORT", port("LIVE_SLURMCTLD_PORT", 26817))
            .env("SLURMDBD_PORT", port("LIVE_SLURMDBD_PORT", 26819))
            .env("MARIADB_PORT", port("LIVE_MARIADB_PORT", 23306))
            .env("SLURMD_PORT_BASE", port("LIVE_SLURMD_PORT_BASE", 27001))
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
        let cluster = Cluster {
            slurm_conf: dir.join("etc/slurm.conf"),
            dir,
            accountd,
            production_plugin,
            submitted: Mutex::new(Vec::new()),
            keep_logs: Mutex::new(false),
            governor: Mutex::new(None),
            original_config,
            metrics_addr,
            logs_dest: PathBuf::from(
                env_or(
                    "LIVE_LOGS",
                    &root.join("target/live-logs").to_string_lossy(),
                ) + spec.logs_suffix,
            ),
        };
        if spec.install == Install::Build {
            cluster.start_governor()?;
        }
        Ok(cluster)
    }

    /// Start `accountd run` against this cluster (its log: DIR/log/governor.log).
    pub fn start_governor(&self) -> TestResult {
        let mut g = self.governor.lock().unwrap_or_else(|p| p.into_inner());
        if g.is_some() {
            return Ok(());
        }
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join("log/governor.log"))
            .map_err(|e| format!("governor log: {e}"))?;
        let err = log.try_clone().map_err(|e| e.to_string())?;
        let before = self.state_generated_at();
        let child = self
            .cmd(&self.accountd)
            .arg("--config")
            .arg(self.dir.join("etc/teamshare.toml"))
            // The daemon: governor every 500 ms, ingest and /metrics as configured.
            .args(["run", "--govern-interval", "500ms"])
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(err)
            .spawn()
            .map_err(|e| format!("cannot start accountd run: {e}"))?;
        *g = Some(child);
        drop(g);
        // Running when it has published at least once.
        self.wait_for(
            "the governor's first state",
            Duration::from_secs(30),
            || Ok((self.state_generated_at() > before).then_some(())),
        )
    }

    /// The pid of the governor (`accountd run`) the cluster started, if it runs.
    pub fn governor_pid(&self) -> Option<u32> {
        let g = self.governor.lock().unwrap_or_else(|p| p.into_inner());
        g.as_ref().map(Child::id)
    }

    pub fn stop_governor(&self) {
        let child = self
            .governor
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        if let Some(mut child) = child {
            // SIGTERM: the daemon finishes its step and exits; SIGKILL if it does not.
            let _ = Command::new("kill").arg(child.id().to_string()).status();
            let deadline = Instant::now() + Duration::from_secs(15);
            while Instant::now() < deadline {
                if let Ok(Some(_)) = child.try_wait() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Where `accountd run` serves /metrics (`host:port`, moved by LIVE_PORT_OFFSET).
    pub fn metrics_addr(&self) -> &str {
        &self.metrics_addr
    }

    /// GET /metrics from the daemon.
    pub fn metrics(&self) -> Result<String, String> {
        use std::io::{Read, Write};
        let addr = self.metrics_addr.as_str();
        let mut s =
            std::net::TcpStream::connect(addr).map_err(|e| format!("metrics at {addr}: {e}"))?;
        s.set_read_timeout(Some(Duration::from_secs(10)))
            .map_err(|e| e.to_string())?;
        s.write_all(b"GET /metrics HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
            .map_err(|e| e.to_string())?;
        let mut text = String::new();
        s.read_to_string(&mut text).map_err(|e| e.to_string())?;
        let (head, body) = text.split_once("\r\n\r\n").ok_or("no HTTP body")?;
        if !head.starts_with("HTTP/1.1 200") && !head.starts_with("HTTP/1.0 200") {
            return Err(format!("metrics answered {head}"));
        }
        Ok(body.to_string())
    }

    /// Where the governor publishes its state: the `state_file` of the teamshare.toml in force
    /// (a scenario may move it), beside that file when relative.
    pub fn state_path(&self) -> PathBuf {
        let etc = self.dir.join("etc");
        let text = std::fs::read_to_string(etc.join("teamshare.toml")).unwrap_or_default();
        let named = text.lines().find_map(|l| {
            let value = l
                .trim()
                .strip_prefix("state_file = \"")?
                .strip_suffix('"')?;
            Some(value.to_string())
        });
        etc.join(named.unwrap_or_else(|| "state.json".into()))
    }

    /// The governor's published state.
    pub fn state(&self) -> Result<serde_json::Value, String> {
        let text = std::fs::read_to_string(self.state_path())
            .map_err(|e| format!("no governance state: {e}"))?;
        serde_json::from_str(&text).map_err(|e| format!("state is not JSON: {e}"))
    }

    fn state_generated_at(&self) -> i64 {
        self.state()
            .ok()
            .and_then(|s| s["generated_at"].as_i64())
            .unwrap_or(0)
    }

    /// Wait until the governor has acted in full on a plan made after this call (so it saw
    /// everything that happened before, and its limits and priorities are in force in Slurm),
    /// and then published a state made after that.
    pub fn wait_governor_pass(&self) -> TestResult {
        let now = unix_now();
        self.wait_for(
            "the governor to act on a fresh plan",
            Duration::from_secs(30),
            || {
                let acted = self
                    .state()
                    .ok()
                    .and_then(|s| s["acted_at"].as_i64())
                    .unwrap_or(0);
                Ok((acted > now).then_some(()))
            },
        )?;
        let now = unix_now();
        self.wait_for("a fresh governor pass", Duration::from_secs(30), || {
            Ok((self.state_generated_at() > now).then_some(()))
        })
    }

    /// Cancel every job in the cluster and wait until none is left, then for the governor.
    pub fn reset(&self) -> TestResult {
        self.cancel_submitted();
        for user in ["root", PLAIN_USER] {
            let _ = self.run("scancel", &["-u", user]);
        }
        self.wait_for("an empty queue", Duration::from_secs(90), || {
            let out = self.ok("squeue", &["-h", "-o", "%i"])?;
            Ok(out.trim().is_empty().then_some(()))
        })?;
        self.wait_governor_pass()
    }

    /// Replace teamshare.toml, wait until the plugin reloaded it, re-run setup-slurm (QOS
    /// settings follow the configuration) and restart the governor.
    pub fn reconfigure(&self, text: &str) -> TestResult {
        let reloads = self
            .slurmctld_log()
            .matches("job_submit/teamshare: reloaded")
            .count();
        // Written beside it and renamed over it, as an editor saves: a process starting now (a
        // sampler the scenario just spawned) reads the old file or the new one, never a
        // truncated one (idle::i02 once lost its n3 sampler to "no [[team]] defined").
        let path = self.dir.join("etc/teamshare.toml");
        let next = self.dir.join("etc/.teamshare.toml.next");
        std::fs::write(&next, text).map_err(|e| e.to_string())?;
        std::fs::rename(&next, &path).map_err(|e| e.to_string())?;
        self.wait_for(
            "the plugin to reload teamshare.toml",
            Duration::from_secs(30),
            || {
                let n = self
                    .slurmctld_log()
                    .matches("job_submit/teamshare: reloaded")
                    .count();
                Ok((n > reloads).then_some(()))
            },
        )?;
        let out = self.accountd_cmd(&["setup-slurm", "--user", "root", "--user", PLAIN_USER])?;
        if !out.status.success() {
            return Err(format!(
                "setup-slurm failed: {}",
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        self.stop_governor();
        self.start_governor()?;
        // The first pass publishes its state before it sets the limits: wait for the next,
        // so that the new rules' limits are in force when the caller goes on.
        self.wait_governor_pass()
    }

    /// Back to the configuration the run started with.
    pub fn restore_config(&self) -> TestResult {
        let current =
            std::fs::read_to_string(self.dir.join("etc/teamshare.toml")).unwrap_or_default();
        if current == self.original_config {
            return Ok(());
        }
        let text = self.original_config.clone();
        self.reconfigure(&text)
    }

    pub fn original_config(&self) -> &str {
        &self.original_config
    }

    /// accountd with the cluster's own configuration (and its database).
    pub fn accountd_cmd(&self, args: &[&str]) -> Result<Output, String> {
        self.cmd(&self.accountd)
            .arg("--config")
            .arg(self.dir.join("etc/teamshare.toml"))
            .args(args)
            .output()
            .map_err(|e| format!("cannot run accountd: {e}"))
    }

    /// `accountd --config <the cluster's> args` as the unprivileged test user.
    pub fn accountd_as_user(&self, args: &[&str]) -> Result<Output, String> {
        let accountd = self.accountd.to_string_lossy().into_owned();
        let config = self.dir.join("etc/teamshare.toml");
        let config = config.to_string_lossy();
        let mut full: Vec<&str> = vec![&accountd, "--config", &config];
        full.extend_from_slice(args);
        self.run_as_user(full[0], &full[1..])
    }

    /// Jobs of `team` in squeue state `state` (RUNNING, PENDING), with their start times.
    pub fn jobs(&self, team: &str, state: &str) -> Result<Vec<(String, String)>, String> {
        let out = self.ok("squeue", &["-h", "-A", team, "-t", state, "-o", "%i|%S"])?;
        Ok(out
            .lines()
            .filter_map(|l| l.split_once('|'))
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect())
    }

    pub fn count(&self, team: &str, state: &str) -> Result<usize, String> {
        Ok(self.jobs(team, state)?.len())
    }

    /// Submit `n` one-GPU sleeps for `team` (extra sbatch arguments first).
    pub fn submit_sleeps(
        &self,
        team: &str,
        n: usize,
        secs: u32,
        extra: &[&str],
    ) -> Result<Vec<String>, String> {
        let mut ids = Vec::new();
        let wrap = format!("sleep {secs}");
        for _ in 0..n {
            let mut args: Vec<&str> = vec!["-A", team, "-p", "gpu", "--gres=gpu:1"];
            args.extend_from_slice(extra);
            args.extend_from_slice(&["--wrap", &wrap]);
            ids.push(
                self.sbatch(&args)
                    .map_err(|e| format!("{team} job refused: {e}"))?,
            );
        }
        Ok(ids)
    }

    /// Wait until `team` has exactly `n` running jobs.
    pub fn wait_running(&self, team: &str, n: usize, deadline: Duration) -> TestResult {
        self.wait_for(&format!("{n} running {team} jobs"), deadline, || {
            Ok((self.count(team, "RUNNING")? == n).then_some(()))
        })
        .map_err(|e| format!("{e}\n{}", self.diagnosis()))
    }

    /// What a failed wait needs to be understood from CI's output alone: the nodes, the
    /// queue with reasons, and the governor's published state.
    pub fn diagnosis(&self) -> String {
        let text = |program: &str, args: &[&str]| {
            self.run(program, args)
                .map(|o| {
                    String::from_utf8_lossy(&o.stdout).to_string()
                        + &String::from_utf8_lossy(&o.stderr)
                })
                .unwrap_or_else(|e| e)
        };
        let state = std::fs::read_to_string(self.dir.join("etc/state.json"))
            .unwrap_or_else(|e| format!("no state file: {e}"));
        format!(
            "sinfo:\n{}squeue:\n{}limits:\n{}state.json: {}",
            text("sinfo", &["-N", "-h", "-o", "%N %T %G %E"]),
            text("squeue", &["-h", "-a", "-o", "%i %a %T %Q %r %b %S"]),
            text(
                "sacctmgr",
                &[
                    "-nP",
                    "show",
                    "assoc",
                    "where",
                    "user=",
                    "format=account,grptres"
                ]
            ),
            state.chars().take(4000).collect::<String>()
        )
    }

    /// A job's squeue reason.
    pub fn reason(&self, id: &str) -> Result<String, String> {
        Ok(self
            .ok("squeue", &["-h", "-j", id, "-o", "%r"])?
            .trim()
            .to_string())
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

    /// sbatch as the unprivileged test user.
    pub fn sbatch_as_user(&self, args: &[&str]) -> Result<String, String> {
        let mut full: Vec<&str> = vec![
            "-u",
            PLAIN_USER,
            "--",
            "sbatch",
            "--parsable",
            "--chdir=/tmp",
            "-o",
            "/dev/null",
            "-e",
            "/dev/null",
        ];
        full.extend_from_slice(args);
        let out = self.run("runuser", &full)?;
        if !out.status.success() {
            return Err(String::from_utf8_lossy(&out.stderr).into_owned());
        }
        let id = String::from_utf8_lossy(&out.stdout)
            .trim()
            .split(';')
            .next()
            .unwrap_or("")
            .to_string();
        self.submitted
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(id.clone());
        Ok(id)
    }

    /// A held one-GPU job of `team`, submitted by the unprivileged test user: something of
    /// theirs to update that never runs.
    pub fn held_gpu_job_as_user(&self, team: &str) -> Result<String, String> {
        self.sbatch_as_user(&[
            "-A",
            team,
            "-p",
            "gpu",
            "--gres=gpu:1",
            "--hold",
            "--wrap",
            "true",
        ])
    }

    /// The Slurm release of the cluster's clients (`scontrol --version`: `slurm 24.11.5`), as
    /// (major, minor). The one place the scenarios learn which release they run against.
    pub fn slurm_release(&self) -> Result<(u32, u32), String> {
        let out = self.ok("scontrol", &["--version"])?;
        let version = out
            .split_whitespace()
            .nth(1)
            .ok_or_else(|| format!("scontrol --version said {out:?}"))?;
        let mut parts = version.split('.').map(|p| p.parse::<u32>());
        match (parts.next(), parts.next()) {
            (Some(Ok(major)), Some(Ok(minor))) => Ok((major, minor)),
            _ => Err(format!("scontrol --version said {out:?}")),
        }
    }

    /// What the user reads of a refused `scontrol update`: its own stderr from 23.02 on, where
    /// the plugin's message reaches the user; on 22.05 the user sees only the error code's text,
    /// so the plugin's message is taken from its last `reject modify` line in slurmctld.log.
    pub fn modify_refusal(&self, out: &Output) -> Result<String, String> {
        let said = String::from_utf8_lossy(&out.stderr).trim().to_string();
        if out.status.success() {
            return Err(format!("the update was accepted ({said:?})"));
        }
        if self.slurm_release()? >= (23, 2) {
            return Ok(said);
        }
        let log = self.slurmctld_log();
        let line = log
            .lines()
            .rev()
            .find(|l| l.contains("job_submit/teamshare: reject modify"))
            .ok_or_else(|| format!("scontrol said {said:?} and slurmctld.log has no refusal"))?;
        Ok(format!("{said} [slurmctld.log: {line}]"))
    }

    /// Any Slurm client as the unprivileged test user (`runuser -u tsuser -- program args`).
    pub fn run_as_user(&self, program: &str, args: &[&str]) -> Result<Output, String> {
        let mut full: Vec<&str> = vec!["-u", PLAIN_USER, "--", program];
        full.extend_from_slice(args);
        self.run("runuser", &full)
    }

    /// The last lines of the governor's log (for failure messages).
    pub fn governor_log_tail(&self, lines: usize) -> String {
        let text = std::fs::read_to_string(self.dir.join("log/governor.log")).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

    /// The governor's whole log.
    pub fn governor_log(&self) -> String {
        std::fs::read_to_string(self.dir.join("log/governor.log")).unwrap_or_default()
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

    /// The pid in slurmctld's pid file (a different pid later means slurmctld restarted).
    pub fn slurmctld_pid(&self) -> Option<u32> {
        std::fs::read_to_string(self.dir.join("pids/slurmctld.pid"))
            .ok()
            .and_then(|p| p.trim().parse().ok())
    }

    /// When the governor last published its state: the governor rewrites (renames over)
    /// its state file ([`Cluster::state_path`]) on every pass, so its modification time is the
    /// time of the last pass, to the nanosecond (`generated_at` inside has whole seconds only).
    pub fn state_modified(&self) -> Option<std::time::SystemTime> {
        std::fs::metadata(self.state_path())
            .and_then(|m| m.modified())
            .ok()
    }

    /// Start a Slurm client as the unprivileged test user without waiting for it (salloc):
    /// no terminal, output discarded; the caller reaps the child.
    pub fn spawn_as_user(&self, program: &str, args: &[&str]) -> Result<Child, String> {
        self.cmd("runuser")
            .args(["-u", PLAIN_USER, "--", program])
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("cannot start {program} as {PLAIN_USER}: {e}"))
    }
}

pub fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

fn ensure_plain_user() -> TestResult {
    let exists = Command::new("id")
        .arg(PLAIN_USER)
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    if !exists {
        let st = Command::new("useradd")
            .args(["-M", "-s", "/bin/sh", PLAIN_USER])
            .status()
            .map_err(|e| format!("useradd: {e}"))?;
        if !st.success() {
            return Err(format!("cannot create the test user {PLAIN_USER}"));
        }
    }
    Ok(())
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.stop_governor();
        self.cancel_submitted();
        let keep = *self.keep_logs.lock().unwrap_or_else(|p| p.into_inner());
        let _ = Command::new(repo_root().join("contrib/cluster/stop.sh"))
            .arg(&self.dir)
            .status();
        if keep {
            let dest = &self.logs_dest;
            let _ = std::fs::remove_dir_all(dest);
            let _ = std::fs::create_dir_all(dest);
            let _ = Command::new("cp")
                .arg("-r")
                .arg(self.dir.join("log"))
                .arg(dest)
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
