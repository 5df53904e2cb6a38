//! Issue 25's fault test: Slurm's own services and the state's filesystem fail while teams
//! borrow and reclaim (2 nodes x 4 GPUs; agents quota 2 + 2, training 4 + 4, research 2 + 6).
//!
//! training borrows the whole cluster; then, in turn:
//! 1. slurmdbd and MariaDB stop: agents' in-quota jobs still get their GPUs back (Slurm's
//!    preemption and the governor's fallback need only slurmctld), the limit moves that need
//!    slurmdbd fail and are counted; once both are back, Slurm's limits equal the governor's
//!    within 10 s;
//! 2. the filesystem of the state file (a small tmpfs, with the state beside nothing else) is
//!    filled: research's in-quota jobs still get their GPUs back; freed, a current state is
//!    published within 10 s;
//! 3. slurmctld stops and starts again: the governor publishes a state made after its return
//!    within 10 s, and a later reclaim works.
//!
//! At the end no job of the test is held, and the daemon's database holds exactly the runs a
//! one-shot ingest of the same window finds (nothing lost while slurmdbd was away).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use teamshare_live_tests::{ensure, Cluster, Scenario, TestResult};

use crate::crash::runs_of;
use crate::governance::{fill, isolated};
use crate::issue25::{process_alive, restart_slurmctld};

pub const SCENARIOS: &[Scenario] = &[(
    "issue25::x01_slurmdbd_mariadb_slurmctld_down_and_a_full_state_disk",
    faults,
)];

const MINUTE: Duration = Duration::from_secs(60);
/// How soon everything must agree again once a fault is gone (issue 25's acceptance).
const CONVERGE: Duration = Duration::from_secs(10);
const LONG: u32 = 3600;

fn faults(c: &Cluster) -> TestResult {
    isolated(c, |c| {
        let since = c.ok("date", &["+%Y-%m-%dT%H:%M:%S"])?;
        let mut ids = fill(c, "training", 8, &[])?;
        let agents = accounting_down(c, &mut ids)?;
        state_disk_full(c, &mut ids)?;
        controller_restarted(c, &agents, &mut ids)?;
        nothing_held_nothing_lost(c, since.trim(), &ids)
    })
}

/// Phase 1: slurmdbd and MariaDB down while agents reclaims its quota from training; returns
/// agents' jobs.
fn accounting_down(c: &Cluster, ids: &mut Vec<String>) -> Result<Vec<String>, String> {
    let failures_before = limit_failures(c)?;
    let slurmdbd = Daemon::stop(c, "slurmdbd")?;
    let mariadb = Daemon::stop(c, "mariadbd")?;
    let mut agents = Vec::new();
    let r = (|| {
        agents = c.submit_sleeps("agents", 2, LONG, &[])?;
        ids.extend(agents.iter().cloned());
        c.wait_running("agents", 2, MINUTE).map_err(|e| {
            format!(
                "agents' quota was not given back while slurmdbd was down: {e}\n{}",
                c.diagnosis()
            )
        })?;
        // training's limit must come down to 6: a move through slurmdbd, which fails.
        c.wait_for("a failed limit move", MINUTE, || {
            Ok((limit_failures(c)? > failures_before).then_some(()))
        })
    })();
    let mariadb_back = mariadb.start(c);
    let back = mariadb_back.and_then(|()| {
        c.wait_for("MariaDB to answer", MINUTE, || {
            Ok(tcp_listening(c, "mariadbd").then_some(()))
        })?;
        slurmdbd.start(c)
    });
    r.and(back)?;
    c.wait_for("sacctmgr to reach slurmdbd", MINUTE, || {
        Ok(c.run("sacctmgr", &["-n", "show", "cluster"])
            .is_ok_and(|o| o.status.success())
            .then_some(()))
    })?;
    let answered = Instant::now();
    c.wait_for("Slurm's limits to equal the governor's", MINUTE, || {
        Ok(limits_agree(c)?.then_some(()))
    })?;
    let took = answered.elapsed();
    eprintln!("slurmdbd back: Slurm's limits equal the governor's {took:.1?} after it answered");
    ensure(took <= CONVERGE, || {
        format!("the limits converged {took:?} after slurmdbd answered (more than {CONVERGE:?})")
    })?;
    Ok(agents)
}

/// `teamshare_governor_limit_failures_total`, summed over teams.
fn limit_failures(c: &Cluster) -> Result<f64, String> {
    Ok(
        samples(&c.metrics()?, "teamshare_governor_limit_failures_total")
            .into_iter()
            .map(|(_, v)| v)
            .sum(),
    )
}

/// Every team's limit in force equals the one the plan wants.
fn limits_agree(c: &Cluster) -> Result<bool, String> {
    let text = c.metrics()?;
    let wanted = samples(&text, "teamshare_gpu_limit");
    let in_force = samples(&text, "teamshare_gpu_limit_in_force");
    Ok(!wanted.is_empty() && wanted == in_force)
}

/// The samples of one metric family: (labels, value), sorted.
pub(crate) fn samples(text: &str, name: &str) -> Vec<(String, f64)> {
    let mut out: Vec<(String, f64)> = text
        .lines()
        .filter_map(|l| {
            let rest = l.strip_prefix(name)?;
            let (labels, value) = match rest.strip_prefix('{') {
                Some(r) => r.split_once("} ")?,
                None => ("", rest.strip_prefix(' ')?),
            };
            Some((labels.to_string(), value.trim().parse().ok()?))
        })
        .collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

/// Phase 2: the state's filesystem full while research reclaims its quota.
fn state_disk_full(c: &Cluster, ids: &mut Vec<String>) -> TestResult {
    let fs = c.dir.join("statefs");
    std::fs::create_dir_all(&fs).map_err(|e| e.to_string())?;
    mount_small_tmpfs(&fs)?;
    let r = on_a_full_disk(c, &fs, ids);
    // The shared layout again before the filesystem goes: the governor writes etc/state.json.
    let restored = c.restore_config().and_then(|()| c.wait_governor_pass());
    let unmounted = unmount(&fs);
    r.and(restored).and(unmounted)
}

fn c_path(path: &Path) -> Result<std::ffi::CString, String> {
    use std::os::unix::ffi::OsStrExt;
    std::ffi::CString::new(path.as_os_str().as_bytes()).map_err(|e| e.to_string())
}

/// A 256 KiB tmpfs at `dir` (mount(2): the test runs as root, in the chroot's own mount
/// namespace for the other releases, some of whose roots have no mount(8)).
fn mount_small_tmpfs(dir: &Path) -> TestResult {
    let target = c_path(dir)?;
    let (source, fstype, data) = (c"tmpfs", c"tmpfs", c"size=256k");
    // SAFETY: every pointer is a NUL-terminated string that outlives the call.
    let rc = unsafe {
        libc::mount(
            source.as_ptr(),
            target.as_ptr(),
            fstype.as_ptr(),
            0,
            data.as_ptr().cast(),
        )
    };
    ensure(rc == 0, || {
        format!(
            "mount tmpfs on {}: {}",
            dir.display(),
            std::io::Error::last_os_error()
        )
    })
}

/// Detach the filesystem at `dir` (lazily: a file the daemon still holds does not stop it).
fn unmount(dir: &Path) -> TestResult {
    let target = c_path(dir)?;
    // SAFETY: a NUL-terminated string that outlives the call.
    let rc = unsafe { libc::umount2(target.as_ptr(), libc::MNT_DETACH) };
    ensure(rc == 0, || {
        format!(
            "umount {}: {}",
            dir.display(),
            std::io::Error::last_os_error()
        )
    })
}

fn on_a_full_disk(c: &Cluster, fs: &Path, ids: &mut Vec<String>) -> TestResult {
    let state = fs.join("state.json");
    let text = c.original_config().replacen(
        "state_file = \"state.json\"",
        "state_file = \"../statefs/state.json\"",
        1,
    );
    ensure(text != c.original_config(), || {
        "the live configuration no longer has state_file = \"state.json\"".into()
    })?;
    c.reconfigure(&text)?;
    c.wait_for(
        "the state published on the small filesystem",
        MINUTE,
        || Ok(state.exists().then_some(())),
    )?;
    let filler = fs.join("filler");
    fill_up(&filler)?;
    let full_since = Instant::now();
    c.wait_for("a pass that cannot write the state", MINUTE, || {
        Ok(c.governor_log()
            .contains("No space left on device")
            .then_some(()))
    })?;
    ids.extend(c.submit_sleeps("research", 2, LONG, &[])?);
    c.wait_running("research", 2, MINUTE).map_err(|e| {
        format!(
            "research's quota was not given back on a full disk: {e}\n{}",
            c.diagnosis()
        )
    })?;
    eprintln!(
        "state disk full: research ran its quota {:.1?} after the disk filled",
        full_since.elapsed()
    );
    std::fs::remove_file(&filler).map_err(|e| e.to_string())?;
    let freed = Instant::now();
    let freed_at = unix_now();
    c.wait_for("a current state on the freed filesystem", MINUTE, || {
        Ok((generated_at(&state) > freed_at).then_some(()))
    })?;
    let took = freed.elapsed();
    eprintln!("state disk freed: a state published {took:.1?} later");
    ensure(took <= CONVERGE, || {
        format!("the state was published {took:?} after the disk was freed")
    })?;
    ensure(!fs.join("state.json.tmp").exists(), || {
        "a temporary state file was left behind".into()
    })
}

/// Write zeros to `path` until the filesystem is full.
fn fill_up(path: &Path) -> TestResult {
    use std::io::Write;
    let mut f = std::fs::File::create(path).map_err(|e| e.to_string())?;
    let block = [0u8; 4096];
    loop {
        match f.write_all(&block).and_then(|()| f.sync_all()) {
            Ok(()) => {}
            Err(e) if e.raw_os_error() == Some(28) => return Ok(()), // ENOSPC
            Err(e) => return Err(format!("filling {}: {e}", path.display())),
        }
    }
}

fn generated_at(state: &Path) -> i64 {
    std::fs::read_to_string(state)
        .ok()
        .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
        .and_then(|v| v["generated_at"].as_i64())
        .unwrap_or(0)
}

fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

/// Phase 3: slurmctld away for 5 s; the governor publishes again within 10 s of its return,
/// and agents' next in-quota job still reclaims from training.
fn controller_restarted(c: &Cluster, agents: &[String], ids: &mut Vec<String>) -> TestResult {
    // agents gives one GPU back; a new training job borrows it. (training's requeued jobs wait
    // out Slurm's requeue delay: the governor restarted since it requeued them, and a restarted
    // governor does not know what their runs were, so it leaves the delay to Slurm.)
    c.ok("scancel", &[agents.first().ok_or("no agents job")?])?;
    ids.extend(c.submit_sleeps("training", 1, LONG, &[])?);
    c.wait_running("training", 5, MINUTE)?;
    restart_slurmctld(c, || std::thread::sleep(Duration::from_secs(5)))?;
    let back = Instant::now();
    let back_at = unix_now();
    c.wait_for("a state made after slurmctld's return", MINUTE, || {
        Ok((generated_at(&c.dir.join("etc/state.json")) > back_at).then_some(()))
    })?;
    let took = back.elapsed();
    eprintln!("slurmctld back: a state published {took:.1?} later");
    ensure(took <= CONVERGE, || {
        format!("the governor published {took:?} after slurmctld's return")
    })?;
    ids.extend(c.submit_sleeps("agents", 1, LONG, &[])?);
    c.wait_running("agents", 2, MINUTE).map_err(|e| {
        format!(
            "no reclaim after slurmctld's restart: {e}\n{}",
            c.diagnosis()
        )
    })
}

/// No job of the test held (by anyone); once they end, the daemon's runs equal a one-shot
/// ingest of the window.
fn nothing_held_nothing_lost(c: &Cluster, since: &str, ids: &[String]) -> TestResult {
    let queue = c.ok("squeue", &["-h", "-o", "%i|%T|%Q|%r"])?;
    let held: Vec<&str> = queue
        .lines()
        .filter(|l| {
            let f: Vec<&str> = l.split('|').collect();
            f.get(2) == Some(&"0") || f.get(3).is_some_and(|r| r.starts_with("JobHeld"))
        })
        .collect();
    ensure(held.is_empty(), || format!("jobs held: {held:?}"))?;
    c.ok(
        "scancel",
        &ids.iter().map(String::as_str).collect::<Vec<_>>(),
    )?;
    c.wait_for("an empty queue", MINUTE, || {
        Ok(c.ok("squeue", &["-h", "-o", "%i"])?
            .trim()
            .is_empty()
            .then_some(()))
    })?;
    let fresh: PathBuf = c.dir.join("faults-fresh.db");
    let wanted: BTreeSet<i64> = ids.iter().filter_map(|i| i.parse().ok()).collect();
    let reference = c.wait_for("sacct to hold every job's runs, ended", 2 * MINUTE, || {
        let _ = std::fs::remove_file(&fresh);
        let out = c.accountd(&fresh, &["ingest", "--since", since])?;
        ensure(out.status.success(), || {
            format!("one-shot ingest: {}", String::from_utf8_lossy(&out.stderr))
        })?;
        let runs = runs_of(&fresh, ids)?;
        let ended = runs.iter().all(|r| r.2.is_some());
        let seen: BTreeSet<i64> = runs.iter().map(|r| r.0).collect();
        Ok((seen == wanted && ended).then_some(runs))
    })?;
    let db = c.dir.join("etc/accountd.db");
    let r = c.wait_for(
        "the daemon's runs to equal a one-shot ingest",
        MINUTE,
        || Ok((runs_of(&db, ids)? == reference).then_some(())),
    );
    let have = runs_of(&db, ids)?;
    r.map_err(|e| {
        let missing: Vec<_> = reference.difference(&have).take(5).collect();
        let extra: Vec<_> = have.difference(&reference).take(5).collect();
        format!("{e}: missing {missing:?}, not in a one-shot ingest {extra:?}")
    })?;
    eprintln!(
        "{} runs of {} jobs: the daemon's database equals a one-shot ingest",
        reference.len(),
        ids.len()
    );
    Ok(())
}

/// A daemon of the cluster, stopped as systemd would (SIGTERM), to be started again exactly as
/// contrib/cluster/start.sh started it: same command line, environment (with the cluster's
/// marker, so that stop.sh still stops it) and directory.
struct Daemon {
    name: &'static str,
    argv: Vec<String>,
    env: Vec<(String, String)>,
}

impl Daemon {
    fn stop(c: &Cluster, name: &'static str) -> Result<Daemon, String> {
        let pid = pid_of(c, name)?;
        let proc_dir = PathBuf::from(format!("/proc/{pid}"));
        let split = |file: &str| -> Result<Vec<String>, String> {
            let raw = std::fs::read(proc_dir.join(file)).map_err(|e| format!("{name}: {e}"))?;
            Ok(raw
                .split(|b| *b == 0)
                .filter(|s| !s.is_empty())
                .map(|s| String::from_utf8_lossy(s).into_owned())
                .collect())
        };
        let argv = split("cmdline")?;
        let env = split("environ")?
            .into_iter()
            .filter_map(|kv| {
                kv.split_once('=')
                    .map(|(k, v)| (k.to_string(), v.to_string()))
            })
            .collect();
        c.ok("kill", &["-TERM", &pid.to_string()])?;
        c.wait_for(&format!("{name} to stop"), MINUTE, || {
            Ok((!process_alive(pid)).then_some(()))
        })?;
        Ok(Daemon { name, argv, env })
    }

    fn start(&self, c: &Cluster) -> TestResult {
        let log = c.dir.join(format!("log/{}.out", self.name));
        let out = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .map_err(|e| e.to_string())?;
        let err = out.try_clone().map_err(|e| e.to_string())?;
        let (program, args) = self.argv.split_first().ok_or("no command line")?;
        let child = Command::new("setsid")
            .arg(program)
            .args(args)
            .env_clear()
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .current_dir(c.dir.join("run"))
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", self.name))?;
        std::fs::write(
            c.dir.join(format!("pids/{}.pid", self.name)),
            child.id().to_string(),
        )
        .map_err(|e| e.to_string())
    }
}

fn pid_of(c: &Cluster, name: &str) -> Result<u32, String> {
    std::fs::read_to_string(c.dir.join(format!("pids/{name}.pid")))
        .ok()
        .and_then(|p| p.trim().parse().ok())
        .ok_or_else(|| format!("no pid file for {name}"))
}

/// Whether the daemon's `--port=` (MariaDB) accepts connections on loopback.
fn tcp_listening(c: &Cluster, name: &str) -> bool {
    let Ok(pid) = pid_of(c, name) else {
        return false;
    };
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    let port = cmdline
        .split(|b| *b == 0)
        .filter_map(|a| std::str::from_utf8(a).ok()?.strip_prefix("--port="))
        .find_map(|p| p.parse::<u16>().ok());
    port.is_some_and(|p| std::net::TcpStream::connect(("127.0.0.1", p)).is_ok())
}
