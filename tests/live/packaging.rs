//! The Debian packages (contrib/deb/build.sh, issue 12) on the live host: installed with dpkg,
//! their files, owners and modes checked, the packaged accountd started as its systemd unit
//! says, a cluster whose slurmctld loads the installed plugin running GPU jobs through both,
//! then removed and purged, leaving only what Debian keeps (the teamshare user and group).
//!
//! The packages go into the host's real PluginDir. Other live clusters are not affected:
//! contrib/cluster/start.sh puts a cluster's own plugin directory before the system one. The
//! scenario refuses a host that already has teamshare installed, and purges what it installed
//! even when a check fails.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use teamshare_live_tests::{
    ensure, package_file, repo_root, Cluster, Spec, Standalone, TestResult, ACCOUNTD_PACKAGE,
    PLUGIN_PACKAGE,
};

/// Scenarios that start what they need themselves (no shared cluster).
pub const SCENARIOS: &[Standalone] = &[(
    "packaging::p1_debs_install_run_a_gpu_job_through_both_and_purge_clean",
    install_run_purge,
)];

/// The packages' state directory (accountd's default database and state file).
const STATE_DIR: &str = "/var/lib/teamshare";
/// The sampler's default spool, which purge removes too.
const SPOOL_DIR: &str = "/var/spool/teamshare";
/// The system user and group the accountd package creates.
const USER: &str = "teamshare";
const MINUTE: Duration = Duration::from_secs(60);

fn install_run_purge() -> TestResult {
    let debs = built_debs()?;
    host_is_clean()?;
    let t0 = Instant::now();
    let phase = |what: &str| eprintln!("packaging: {what} at {:.1} s", t0.elapsed().as_secs_f64());

    // A cluster of another checkout whose start.sh still lists the system plugin directory
    // first would load the installed plugin if it started slurmctld now: let starts finish.
    wait_for_other_cluster_starts()?;
    let mut installed = Installed { purged: false };
    let mut args = vec!["-i".to_string()];
    args.extend(debs.iter().map(|p| p.display().to_string()));
    let out = dpkg(&args.iter().map(String::as_str).collect::<Vec<_>>())?;
    // The plugin's postinst says what the administrator still has to do; slurm.conf is theirs.
    ensure(out.contains("JobSubmitPlugins=teamshare"), || {
        format!("dpkg -i did not show the plugin's note about slurm.conf:\n{out}")
    })?;
    phase("installed");
    let files = check_installed()?;
    phase("files, owners and modes checked");

    let cluster = Cluster::start_with(&Spec::PACKAGED)?;
    let ran = run_jobs(&cluster, &files);
    if ran.is_err() {
        cluster.keep_logs();
    }
    drop(cluster);
    ran?;
    phase("jobs run through the installed plugin and accountd");

    installed.remove_and_purge(&files)?;
    phase("removed and purged");
    Ok(())
}

/// The files of the installed packages the scenario uses.
struct Files {
    plugin: PathBuf,
    accountd: PathBuf,
    unit: PathBuf,
    every_file: Vec<PathBuf>,
}

/// The two packages contrib/deb/build.sh left in target/debian.
fn built_debs() -> Result<Vec<PathBuf>, String> {
    let dir = repo_root().join("target/debian");
    let entries: Vec<PathBuf> = std::fs::read_dir(&dir)
        .map(|d| d.filter_map(|e| e.ok().map(|e| e.path())).collect())
        .unwrap_or_default();
    [PLUGIN_PACKAGE, ACCOUNTD_PACKAGE]
        .iter()
        .map(|package| {
            let prefix = format!("{package}_");
            let found: Vec<&PathBuf> = entries
                .iter()
                .filter(|p| {
                    let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
                    name.starts_with(&prefix) && name.ends_with(".deb")
                })
                .collect();
            match found.as_slice() {
                [one] => Ok((*one).clone()),
                [] => Err(format!(
                    "no {package} package in {}: build them with contrib/deb/build.sh \
                     (contrib/test.sh does, before the live suites)",
                    dir.display()
                )),
                many => Err(format!(
                    "{} {package} packages in {}: {many:?}; contrib/deb/build.sh leaves one",
                    many.len(),
                    dir.display()
                )),
            }
        })
        .collect()
}

/// Waits (2 min at most) until no contrib/cluster/start.sh runs on this host.
fn wait_for_other_cluster_starts() -> TestResult {
    let deadline = Instant::now() + 2 * MINUTE;
    loop {
        let starting = std::fs::read_dir("/proc")
            .map_err(|e| format!("/proc: {e}"))?
            .filter_map(|e| e.ok())
            .filter_map(|e| std::fs::read(e.path().join("cmdline")).ok())
            .any(|cmdline| {
                cmdline
                    .split(|&b| b == 0)
                    .any(|arg| arg.ends_with(b"contrib/cluster/start.sh"))
            });
        if !starting {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err("another contrib/cluster/start.sh ran for 2 minutes; try again".into());
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// dpkg's status of `package` ("" when dpkg never heard of it).
fn status(package: &str) -> String {
    Command::new("dpkg-query")
        .args(["-W", "-f=${Status}", package])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default()
}

fn not_installed(package: &str) -> bool {
    let s = status(package);
    s.is_empty() || s.ends_with("not-installed")
}

/// The scenario installs and purges the packages and deletes /var/lib/teamshare: never on a
/// host where they, or a database, are someone's.
fn host_is_clean() -> TestResult {
    for package in [PLUGIN_PACKAGE, ACCOUNTD_PACKAGE] {
        ensure(not_installed(package), || {
            format!(
                "{package} is on this host ({}); this scenario installs and purges it. If it is \
                 a previous run's: dpkg --purge {ACCOUNTD_PACKAGE} {PLUGIN_PACKAGE}",
                status(package)
            )
        })?;
    }
    ensure(!Path::new(STATE_DIR).exists(), || {
        format!("{STATE_DIR} exists on this host; the scenario's purge would delete it")
    })
}

/// dpkg with `args`, retried while another dpkg or apt holds its lock; its output.
fn dpkg(args: &[&str]) -> Result<String, String> {
    let deadline = Instant::now() + 2 * MINUTE;
    loop {
        let out = Command::new("dpkg")
            .args(args)
            .env("DEBIAN_FRONTEND", "noninteractive")
            .output()
            .map_err(|e| format!("dpkg: {e}"))?;
        let text = String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr);
        if out.status.success() {
            return Ok(text);
        }
        if !text.contains("lock") || Instant::now() > deadline {
            return Err(format!(
                "dpkg {} failed ({}):\n{text}",
                args.join(" "),
                out.status
            ));
        }
        std::thread::sleep(Duration::from_secs(1));
    }
}

/// Purges both packages when dropped before [`Installed::remove_and_purge`] finished, so that a
/// failed check leaves the host as it was (but for the teamshare user).
struct Installed {
    purged: bool,
}

impl Drop for Installed {
    fn drop(&mut self) {
        if !self.purged {
            let _ = dpkg(&["--purge", ACCOUNTD_PACKAGE, PLUGIN_PACKAGE]);
        }
    }
}

/// A file's permission bits, owner and group.
fn mode(path: &Path) -> Result<(u32, u32, u32), String> {
    let m = std::fs::metadata(path).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok((m.mode() & 0o7777, m.uid(), m.gid()))
}

/// Checks that `path` has `want` (mode, uid, gid).
fn has_mode(path: &Path, want: (u32, u32, u32)) -> TestResult {
    let got = mode(path)?;
    ensure(got == want, || {
        format!(
            "{}: mode {:04o} owner {}:{}, expected {:04o} {}:{}",
            path.display(),
            got.0,
            got.1,
            got.2,
            want.0,
            want.1,
            want.2
        )
    })
}

/// `getent passwd|group NAME`'s fields.
fn getent(db: &str, name: &str) -> Option<Vec<String>> {
    let out = Command::new("getent").args([db, name]).output().ok()?;
    out.status.success().then(|| {
        String::from_utf8_lossy(&out.stdout)
            .trim()
            .split(':')
            .map(String::from)
            .collect()
    })
}

fn id_of(db: &str, name: &str) -> Result<u32, String> {
    getent(db, name)
        .and_then(|f| f.get(2).and_then(|id| id.parse().ok()))
        .ok_or_else(|| format!("no {db} entry {name}"))
}

fn output_text(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr)
}

fn check_installed() -> Result<Files, String> {
    // The plugin, where Slurm's own plugins are, as Slurm's are: 0644 root.
    let plugin = package_file(PLUGIN_PACKAGE, "/job_submit_teamshare.so")?;
    let plugin_dir = plugin.parent().unwrap_or(Path::new("/"));
    ensure(plugin_dir.join("auth_munge.so").is_file(), || {
        format!(
            "{} is not Slurm's plugin directory (no auth_munge.so)",
            plugin.display()
        )
    })?;
    has_mode(&plugin, (0o644, 0, 0))?;
    // Bound to the slurmctld release here, major.minor.micro: slurmctld loads no other.
    let version = Command::new("slurmctld")
        .arg("-V")
        .output()
        .map_err(|e| format!("slurmctld -V: {e}"))?;
    let version = String::from_utf8_lossy(&version.stdout).trim().to_string();
    // "slurm-wlm 22.05.8" (Debian's) or "slurm 22.05.8".
    let release = version.split_whitespace().last().unwrap_or("").to_string();
    let parts: Vec<u32> = release.split('.').filter_map(|p| p.parse().ok()).collect();
    let [major, minor, micro] = parts[..] else {
        return Err(format!("slurmctld -V said {version:?}"));
    };
    let depends = Command::new("dpkg-query")
        .args(["-W", "-f=${Depends}", PLUGIN_PACKAGE])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .map_err(|e| e.to_string())?;
    for want in [
        format!("slurmctld (>= {major}.{minor:02}.{micro})"),
        format!("slurmctld (<< {major}.{minor:02}.{})", micro + 1),
    ] {
        ensure(depends.contains(&want), || {
            format!("{PLUGIN_PACKAGE} Depends: {depends}; expected {want} (slurmctld is {release})")
        })?;
    }

    let accountd = package_file(ACCOUNTD_PACKAGE, "/bin/accountd")?;
    has_mode(&accountd, (0o755, 0, 0))?;
    let unit = package_file(ACCOUNTD_PACKAGE, "/accountd.service")?;
    let sample_unit = package_file(ACCOUNTD_PACKAGE, "/accountd-sample.service")?;
    for u in [&unit, &sample_unit] {
        has_mode(u, (0o644, 0, 0))?;
        // Installed disabled: the package cannot tell the head node from a GPU node.
        let name = u.file_name().and_then(|n| n.to_str()).unwrap_or("");
        let wants = Path::new("/etc/systemd/system/multi-user.target.wants").join(name);
        ensure(!wants.exists(), || {
            format!("{name} was enabled on install ({})", wants.display())
        })?;
    }

    // Man pages: accountd.1 and one per command, gzipped, rendered by man where it exists.
    let man_out = Command::new("dpkg-query")
        .args(["-L", ACCOUNTD_PACKAGE])
        .output()
        .map_err(|e| e.to_string())?;
    let listed = String::from_utf8_lossy(&man_out.stdout).into_owned();
    let pages: Vec<&str> = listed
        .lines()
        .filter(|l| l.contains("/man/man1/accountd") && l.ends_with(".1.gz"))
        .collect();
    ensure(pages.len() >= 5, || {
        format!("few man pages installed: {pages:?}")
    })?;
    for (page, heading) in [
        ("/man1/accountd.1.gz", "SUBCOMMANDS"),
        ("/man1/accountd-run.1.gz", "EXIT STATUS"),
    ] {
        let path = package_file(ACCOUNTD_PACKAGE, page)?;
        let rendered = match Command::new("man")
            .arg("-P")
            .arg("cat")
            .arg("-l")
            .arg(&path)
            .env("MANWIDTH", "100")
            .output()
        {
            Ok(out) => {
                ensure(out.status.success(), || {
                    format!("man -l {}: {}", path.display(), output_text(&out))
                })?;
                String::from_utf8_lossy(&out.stdout).into_owned()
            }
            // No man on this host: the roff itself.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let out = Command::new("zcat")
                    .arg(&path)
                    .output()
                    .map_err(|e| format!("zcat: {e}"))?;
                String::from_utf8_lossy(&out.stdout).into_owned()
            }
            Err(e) => return Err(format!("man: {e}")),
        };
        ensure(
            rendered.contains("SYNOPSIS") && rendered.contains(heading),
            || {
                format!(
                    "{} does not render with SYNOPSIS and {heading}:\n{rendered}",
                    path.display()
                )
            },
        )?;
    }
    let completion = package_file(ACCOUNTD_PACKAGE, "/bash-completion/completions/accountd")?;
    let text = std::fs::read_to_string(&completion).map_err(|e| e.to_string())?;
    ensure(
        text.contains("complete") && text.contains("accountd") && text.contains("setup-slurm"),
        || format!("{} is not accountd's bash completion", completion.display()),
    )?;
    let example = package_file(ACCOUNTD_PACKAGE, "/examples/teamshare.toml")?;
    let check = Command::new(&accountd)
        .arg("--config")
        .arg(&example)
        .arg("check-config")
        .output()
        .map_err(|e| e.to_string())?;
    ensure(check.status.success(), || {
        format!(
            "the packaged example {} is invalid: {}",
            example.display(),
            output_text(&check)
        )
    })?;

    // The system user and group, and the state directory: theirs, 0751.
    let user = getent("passwd", USER).ok_or("postinst made no teamshare user")?;
    let uid = id_of("passwd", USER)?;
    let gid = id_of("group", USER)?;
    ensure(
        uid < 1000 && user.get(5).map(String::as_str) == Some(STATE_DIR),
        || format!("teamshare is not a system user with home {STATE_DIR}: {user:?}"),
    )?;
    ensure(user.get(6).is_some_and(|s| s.ends_with("nologin")), || {
        format!("teamshare may log in: {user:?}")
    })?;
    has_mode(Path::new(STATE_DIR), (0o751, uid, gid))?;

    let every_file = listed
        .lines()
        .chain(
            String::from_utf8_lossy(
                &Command::new("dpkg-query")
                    .args(["-L", PLUGIN_PACKAGE])
                    .output()
                    .map_err(|e| e.to_string())?
                    .stdout,
            )
            .lines(),
        )
        .map(PathBuf::from)
        .filter(|p| p.is_file())
        .collect();
    Ok(Files {
        plugin,
        accountd,
        unit,
        every_file,
    })
}

/// `accountd run` as the installed unit starts it: systemd where it is PID 1 (the unit with a
/// runtime drop-in pointing SLURM_CONF at the test cluster); elsewhere the unit's ExecStart,
/// with its Environment= and User=, in systemd's clean environment.
enum Daemon {
    Systemd { dropin: PathBuf },
    Process(Child),
}

/// What the scenario reads of the unit's [Service] section.
#[derive(Debug, Default)]
struct Service {
    exec_start: Vec<String>,
    environment: Vec<(String, String)>,
    user: Option<String>,
}

fn parse_service(text: &str) -> Result<Service, String> {
    let mut service = Service::default();
    let mut section = "";
    for line in text.lines().map(str::trim) {
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        if line.starts_with('[') {
            section = line;
            continue;
        }
        if section != "[Service]" {
            continue;
        }
        let Some((key, value)) = line.split_once('=') else {
            return Err(format!("unit line without '=': {line}"));
        };
        // Only the plain forms: systemd's quoting, specifiers and prefixes would need its
        // parser, and the packaged unit has none of them.
        let plain = |v: &str| !v.contains(['"', '\'', '%', '$', '\\']);
        match key.trim() {
            "ExecStart" => {
                ensure(
                    plain(value) && !value.starts_with(['-', '@', '+', '!', ':']),
                    || {
                        format!(
                            "ExecStart={value} uses systemd syntax this scenario does not parse"
                        )
                    },
                )?;
                service.exec_start = value.split_whitespace().map(String::from).collect();
            }
            "Environment" => {
                ensure(plain(value), || format!("Environment={value} is quoted"))?;
                for assignment in value.split_whitespace() {
                    let (k, v) = assignment
                        .split_once('=')
                        .ok_or_else(|| format!("Environment={value}: not NAME=VALUE"))?;
                    service.environment.push((k.to_string(), v.to_string()));
                }
            }
            "User" => service.user = Some(value.trim().to_string()),
            _ => {}
        }
    }
    Ok(service)
}

impl Daemon {
    fn start(cluster: &Cluster, files: &Files) -> Result<Daemon, String> {
        let text = std::fs::read_to_string(&files.unit)
            .map_err(|e| format!("{}: {e}", files.unit.display()))?;
        let service = parse_service(&text)?;
        ensure(
            service.exec_start.first().map(PathBuf::from) == Some(files.accountd.clone())
                && service.exec_start[1..] == ["run"],
            || {
                format!(
                    "{} does not start `{} run`: ExecStart={:?}",
                    files.unit.display(),
                    files.accountd.display(),
                    service.exec_start
                )
            },
        )?;
        ensure(
            service.environment.iter().any(|(k, _)| k == "SLURM_CONF"),
            || {
                format!(
                    "{} sets no SLURM_CONF: accountd finds slurm.conf and teamshare.toml by it",
                    files.unit.display()
                )
            },
        )?;
        let slurm_conf = cluster.slurm_conf.to_string_lossy().into_owned();

        if Path::new("/run/systemd/system").is_dir() {
            let name = files
                .unit
                .file_name()
                .and_then(|n| n.to_str())
                .unwrap_or("accountd.service");
            let dir = PathBuf::from(format!("/run/systemd/system/{name}.d"));
            let dropin = dir.join("teamshare-live-test.conf");
            std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
            std::fs::write(
                &dropin,
                format!("[Service]\nEnvironment=SLURM_CONF={slurm_conf}\n"),
            )
            .map_err(|e| format!("{}: {e}", dropin.display()))?;
            let daemon = Daemon::Systemd { dropin };
            for args in [
                &["daemon-reload"][..],
                &["start", "--job-mode=ignore-requirements", name][..],
            ] {
                let out = Command::new("systemctl")
                    .args(args)
                    .output()
                    .map_err(|e| format!("systemctl: {e}"))?;
                ensure(out.status.success(), || {
                    format!("systemctl {}: {}", args.join(" "), output_text(&out))
                })?;
            }
            return Ok(daemon);
        }

        let log = std::fs::File::create(cluster.dir.join("log/accountd-unit.log"))
            .map_err(|e| e.to_string())?;
        let err = log.try_clone().map_err(|e| e.to_string())?;
        let mut cmd = match &service.user {
            Some(user) if user != "root" => {
                let mut c = Command::new("runuser");
                c.args(["-u", user, "--"]).args(&service.exec_start);
                c
            }
            _ => {
                let mut c = Command::new(&service.exec_start[0]);
                c.args(&service.exec_start[1..]);
                c
            }
        };
        cmd.env_clear()
            // systemd's PATH for system services.
            .env(
                "PATH",
                "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            )
            .envs(
                service
                    .environment
                    .iter()
                    .map(|(k, v)| (k.as_str(), v.as_str())),
            )
            .env("SLURM_CONF", &slurm_conf)
            .current_dir("/")
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(err);
        cmd.spawn()
            .map(Daemon::Process)
            .map_err(|e| format!("cannot start {:?}: {e}", service.exec_start))
    }

    /// Stop as systemd does (SIGTERM); Ok when it exited cleanly.
    fn stop(&mut self) -> TestResult {
        match self {
            Daemon::Systemd { dropin } => {
                let name = dropin
                    .parent()
                    .and_then(|d| d.file_name())
                    .and_then(|n| n.to_str())
                    .and_then(|n| n.strip_suffix(".d"))
                    .unwrap_or("accountd.service")
                    .to_string();
                let out = Command::new("systemctl")
                    .args(["stop", &name])
                    .output()
                    .map_err(|e| e.to_string())?;
                let _ = std::fs::remove_dir_all(dropin.parent().unwrap_or(dropin));
                let _ = Command::new("systemctl").arg("daemon-reload").status();
                ensure(out.status.success(), || {
                    format!("systemctl stop {name}: {}", output_text(&out))
                })
            }
            Daemon::Process(child) => {
                if let Ok(Some(status)) = child.try_wait() {
                    return Err(format!("accountd run had already exited ({status})"));
                }
                let _ = Command::new("kill").arg(child.id().to_string()).status();
                let deadline = Instant::now() + Duration::from_secs(30);
                while Instant::now() < deadline {
                    if let Ok(Some(status)) = child.try_wait() {
                        return ensure(status.success(), || {
                            format!("accountd run exited {status} on SIGTERM")
                        });
                    }
                    std::thread::sleep(Duration::from_millis(50));
                }
                let _ = child.kill();
                let _ = child.wait();
                Err("accountd run did not stop within 30 s of SIGTERM".into())
            }
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let running = match self {
            Daemon::Systemd { dropin } => dropin.exists(),
            Daemon::Process(child) => matches!(child.try_wait(), Ok(None)),
        };
        if running {
            let _ = self.stop();
        }
    }
}

/// The governor's state as the installed accountd publishes it (its default state file).
fn state() -> Result<serde_json::Value, String> {
    let path = Path::new(STATE_DIR).join("state.json");
    let text = std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))
}

fn run_jobs(cluster: &Cluster, files: &Files) -> TestResult {
    // slurmctld loaded the installed plugin, not a build of the test run.
    let pid = cluster.slurmctld_pid().ok_or("no slurmctld pid")?;
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).map_err(|e| e.to_string())?;
    ensure(maps.contains(&*files.plugin.to_string_lossy()), || {
        format!(
            "slurmctld (pid {pid}) has not mapped {}",
            files.plugin.display()
        )
    })?;
    ensure(
        cluster
            .slurmctld_log()
            .contains("job_submit/teamshare: loaded"),
        || "slurmctld did not log the plugin loading".into(),
    )?;

    let mut daemon = Daemon::start(cluster, files)?;
    let governed = govern(cluster);
    let stopped = daemon.stop();
    let log =
        std::fs::read_to_string(cluster.dir.join("log/accountd-unit.log")).unwrap_or_default();
    governed.map_err(|e| format!("{e}\naccountd's log:\n{log}"))?;
    stopped?;
    // Outside systemd its log is ours to read (under systemd it is in the journal): the daemon
    // started with the package's defaults for what the configuration leaves out.
    if matches!(daemon, Daemon::Process(_)) {
        let db = Path::new(STATE_DIR).join("accountd.db");
        ensure(
            log.contains("started: ") && log.contains(&*db.to_string_lossy()),
            || format!("accountd run did not start on {}:\n{log}", db.display()),
        )?;
    }
    Ok(())
}

fn govern(cluster: &Cluster) -> TestResult {
    // accountd run publishes where the package made room for it, and its database is the
    // teamshare group's to read (the directory is g+rx and not listable by others).
    cluster.wait_for(
        "the packaged accountd's first acted-on state",
        MINUTE,
        || {
            Ok(state()
                .ok()
                .filter(|s| s["acted_at"].as_i64().unwrap_or(0) > 0))
        },
    )?;
    let db = Path::new(STATE_DIR).join("accountd.db");
    let gid = id_of("group", USER)?;
    has_mode(&db, (0o640, 0, gid))?;
    let s = state()?;
    ensure(s["capacity"] == 4, || {
        format!("state.json's capacity is not the node's 4 GPUs: {s}")
    })?;
    let metrics = cluster.metrics()?;
    ensure(metrics.contains("teamshare_"), || {
        format!("/metrics has no teamshare_ series:\n{metrics}")
    })?;

    // A request agents may never hold is refused by the plugin with its own reason.
    match cluster.sbatch(&["-A", "agents", "-p", "gpu", "--gres=gpu:3", "--wrap", "true"]) {
        Ok(id) => return Err(format!("job {id} asking agents for 3 GPUs was accepted")),
        Err(e) => ensure(
            e.contains("teamshare: team agents may hold at most 2 GPUs (quota 1 + borrow limit 1); this job asks for 3"),
            || format!("sbatch did not show the plugin's reason: {e}"),
        )?,
    }
    // A job within quota is admitted into teamshare's QOS, runs, and the governor counts it
    // and keeps the team's limit in Slurm.
    let id = cluster.sbatch(&[
        "-A",
        "agents",
        "-p",
        "gpu",
        "--gres=gpu:1",
        "--wrap",
        "sleep 300",
    ])?;
    let qos = cluster.ok("squeue", &["-h", "-j", &id, "-o", "%q"])?;
    ensure(qos.trim() == "teamshare", || {
        format!("job {id} has QOS {qos:?}, not teamshare")
    })?;
    cluster.wait_running("agents", 1, MINUTE)?;
    let s = cluster.wait_for("the governor to count agents' running GPU", MINUTE, || {
        Ok(state()
            .ok()
            .filter(|s| s["teams"]["agents"]["running_gpus"] == 1))
    })?;
    let limit = s["teams"]["agents"]["gpu_limit"]
        .as_u64()
        .ok_or_else(|| format!("no agents limit in {s}"))?;
    let want = format!("gres/gpu={limit}");
    cluster.wait_for(&format!("agents' GrpTRES to be {want}"), MINUTE, || {
        let tres = cluster.ok(
            "sacctmgr",
            &[
                "-nP",
                "show",
                "assoc",
                "where",
                "account=agents",
                "user=",
                "format=grptres",
            ],
        )?;
        Ok(tres.lines().any(|l| l.trim() == want).then_some(()))
    })?;
    cluster.ok("scancel", &[&id])?;
    cluster.wait_for("the job to leave the queue", MINUTE, || {
        Ok(cluster
            .ok("squeue", &["-h", "-j", &id, "-o", "%i"])
            .map(|o| o.trim().is_empty())
            .unwrap_or(true)
            .then_some(()))
    })
}

impl Installed {
    fn remove_and_purge(&mut self, files: &Files) -> TestResult {
        // Remove: the programs go, the accounting data stays.
        dpkg(&["-r", ACCOUNTD_PACKAGE, PLUGIN_PACKAGE])?;
        let left: Vec<&PathBuf> = files.every_file.iter().filter(|p| p.exists()).collect();
        ensure(left.is_empty(), || format!("dpkg -r left {left:?}"))?;
        ensure(Path::new(STATE_DIR).join("accountd.db").is_file(), || {
            format!("dpkg -r deleted the accounting database in {STATE_DIR}")
        })?;
        // Purge: nothing left but the system user and group, which Debian keeps.
        dpkg(&["--purge", ACCOUNTD_PACKAGE, PLUGIN_PACKAGE])?;
        self.purged = true;
        for package in [PLUGIN_PACKAGE, ACCOUNTD_PACKAGE] {
            ensure(not_installed(package), || {
                format!("{package} after purge: {}", status(package))
            })?;
        }
        for gone in [STATE_DIR, SPOOL_DIR] {
            ensure(!Path::new(gone).exists(), || {
                format!("{gone} survived the purge")
            })?;
        }
        for dir in [
            "/var/lib/systemd/deb-systemd-helper-enabled",
            "/var/lib/systemd/deb-systemd-helper-masked",
        ] {
            let stale: Vec<String> = std::fs::read_dir(dir)
                .map(|d| {
                    d.filter_map(|e| e.ok())
                        .map(|e| e.file_name().to_string_lossy().into_owned())
                        .filter(|n| n.starts_with("accountd"))
                        .collect()
                })
                .unwrap_or_default();
            ensure(stale.is_empty(), || {
                format!("{dir} still has {stale:?} after purge")
            })?;
        }
        ensure(
            getent("passwd", USER).is_some() && getent("group", USER).is_some(),
            || "purge removed the teamshare user or group, which Debian keeps".into(),
        )
    }
}
