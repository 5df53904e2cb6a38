//! Issue 25's crash test of the store: `accountd run` killed with SIGKILL at random moments,
//! 200 times, while jobs start and end, GPU samples arrive in the spool and CLI commands
//! (`ingest`, `report`, `status`) use the same database beside it, and /metrics is scraped. After every kill the
//! database passes `PRAGMA integrity_check`; at the end, once the daemon ran again, its job runs
//! equal a one-shot ingest of the same sacct window into a fresh database, and every spooled
//! sample is stored exactly once with nothing left in the spool.
//!
//! CRASH_KILLS (default 200) sets the number of kills; CRASH_SEED replays a run's delays.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use teamshare_live_tests::{ensure, Cluster, Scenario, TestResult};

use crate::adversarial::{env_u64, Rng};
use crate::governance::isolated;

pub const SCENARIOS: &[Scenario] = &[(
    "issue25::k01_200_kill_9_of_the_daemon_lose_no_run_and_no_sample",
    crash_loop,
)];

const MINUTE: Duration = Duration::from_secs(60);
/// The node name of the test's own spool (no such Slurm node: the daemon stores any node's
/// samples).
const NODE: &str = "crashnode";
const SAMPLES_PER_BATCH: u64 = 4;

fn crash_loop(c: &Cluster) -> TestResult {
    isolated(c, |c| {
        // The test's daemon is the governor while it runs (same configuration, its own
        // database): the shared one stops, and comes back whatever happened.
        c.stop_governor();
        let r = kills(c);
        let back = c.start_governor();
        r.and(back)
    })
}

/// What the helpers beside the kills did.
#[derive(Default)]
struct Beside {
    submitted: Vec<String>,
    cli_runs: u64,
    cli_failures: Vec<String>,
}

fn kills(c: &Cluster) -> TestResult {
    let kills = env_u64("CRASH_KILLS")?.unwrap_or(200);
    let seed = env_u64("CRASH_SEED")?.unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64)
            | 1
    });
    eprintln!("CRASH_SEED={seed}, {kills} kills");
    let dir = c.dir.join("crash");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let db = dir.join("accountd.db");
    let spool = c.dir.join("etc/samples").join(NODE);
    let _ = std::fs::remove_dir_all(&spool);
    let since = c.ok("date", &["+%Y-%m-%dT%H:%M:%S"])?.trim().to_string();
    let stop = AtomicBool::new(false);
    let mut rng = Rng::new(seed);
    let (looped, beside) = std::thread::scope(|s| {
        let submitter = s.spawn(|| submit_while(c, &stop));
        let cli = s.spawn(|| cli_while(c, &db, &stop));
        let looped = kill_loop(c, &db, &spool, kills, &mut rng);
        stop.store(true, Ordering::Relaxed);
        let mut beside = Beside::default();
        match submitter.join() {
            Ok(Ok(ids)) => beside.submitted = ids,
            Ok(Err(e)) => beside.cli_failures.push(format!("submitting: {e}")),
            Err(_) => beside.cli_failures.push("the submitter panicked".into()),
        }
        if let Ok((runs, failures)) = cli.join() {
            beside.cli_runs = runs;
            beside.cli_failures.extend(failures);
        }
        (looped, beside)
    });
    let batches = looped?;
    eprintln!(
        "{kills} kills done; {} jobs submitted beside, {} CLI commands ({} failed)",
        beside.submitted.len(),
        beside.cli_runs,
        beside.cli_failures.len()
    );
    for f in beside.cli_failures.iter().take(5) {
        eprintln!("  CLI: {f}");
    }
    ensure(!beside.submitted.is_empty(), || {
        "no job was submitted beside the kills".into()
    })?;
    c.wait_completed_in_sacct(&beside.submitted, 3 * MINUTE)?;
    converge(c, &db, &dir, &since, &beside.submitted, batches, &spool)
}

/// Kill the daemon `kills` times; before each start, one more batch of samples in the spool.
/// Returns the batches written.
fn kill_loop(
    c: &Cluster,
    db: &Path,
    spool: &Path,
    kills: u64,
    rng: &mut Rng,
) -> Result<u64, String> {
    let mut checked_with_data = 0;
    for i in 0..kills {
        write_batch(spool, i)?;
        let mut daemon = start_daemon(c, db)?;
        std::thread::sleep(Duration::from_millis(20 + rng.below(900)));
        daemon
            .kill()
            .map_err(|e| format!("kill -9 of the daemon: {e}"))?;
        let _ = daemon.wait();
        if db.exists() {
            let verdict = integrity(db)?;
            ensure(verdict == "ok", || {
                format!(
                    "after kill {}: PRAGMA integrity_check says {verdict}",
                    i + 1
                )
            })?;
            checked_with_data += 1;
        }
    }
    ensure(checked_with_data > kills / 2, || {
        format!("the daemon created its database before only {checked_with_data} of {kills} kills")
    })?;
    Ok(kills)
}

fn start_daemon(c: &Cluster, db: &Path) -> Result<Child, String> {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(c.dir.join("log/crash-daemon.log"))
        .map_err(|e| e.to_string())?;
    let err = log.try_clone().map_err(|e| e.to_string())?;
    c.cmd(&c.accountd)
        .arg("--config")
        .arg(c.dir.join("etc/teamshare.toml"))
        .arg("--database")
        .arg(db)
        .args(["run", "--govern-interval", "500ms"])
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(err)
        .spawn()
        .map_err(|e| format!("cannot start accountd run: {e}"))
}

/// One complete batch in the spool's `ready/`, as a sampler writes it (tmp, then rename).
fn write_batch(spool: &Path, i: u64) -> TestResult {
    let (tmp, ready) = (spool.join("tmp"), spool.join("ready"));
    for d in [&tmp, &ready] {
        std::fs::create_dir_all(d).map_err(|e| e.to_string())?;
    }
    let base_ms = 1_700_000_000_000 + i * 10_000;
    let mut text = String::new();
    for k in 0..SAMPLES_PER_BATCH {
        text.push_str(
            &serde_json::json!({
                "node": NODE,
                "gpu_uuid": format!("GPU-crash-{k}"),
                "ts_ms": base_ms,
                "interval_ms": 1000,
                "minor": k,
                "job_id_raw": null,
                "job_start": null,
                "util_gpu": (i + k) % 100,
                "util_mem": 0,
                "mem_used": 0,
                "mem_total": null,
                "processes": null,
            })
            .to_string(),
        );
        text.push('\n');
    }
    let name = format!("{base_ms:013}-1-{i}.jsonl");
    let at = tmp.join(format!("{name}.tmp"));
    std::fs::write(&at, text).map_err(|e| e.to_string())?;
    std::fs::rename(&at, ready.join(&name)).map_err(|e| e.to_string())
}

/// `PRAGMA integrity_check`'s answer, through SQLite (rows joined).
fn integrity(db: &Path) -> Result<String, String> {
    let conn = rusqlite::Connection::open(db).map_err(|e| format!("open {}: {e}", db.display()))?;
    conn.busy_timeout(Duration::from_secs(30))
        .map_err(|e| e.to_string())?;
    let mut stmt = conn
        .prepare("PRAGMA integrity_check")
        .map_err(|e| e.to_string())?;
    let rows: Vec<String> = stmt
        .query_map([], |r| r.get::<_, String>(0))
        .map_err(|e| e.to_string())?
        .collect::<Result<_, _>>()
        .map_err(|e| e.to_string())?;
    Ok(rows.join("; "))
}

/// Short jobs of every team, two every second and a half, until `stop`. A refusal (the plugin
/// may find the governor's state stale while the daemon is being killed) is counted, not fatal.
fn submit_while(c: &Cluster, stop: &AtomicBool) -> Result<Vec<String>, String> {
    let mut ids = Vec::new();
    let mut refused = 0;
    let teams = ["training", "research", "agents"];
    let mut n = 0usize;
    while !stop.load(Ordering::Relaxed) {
        for _ in 0..2 {
            let team = teams[n % teams.len()];
            n += 1;
            let wrap = format!("sleep {}", 1 + n % 3);
            match c.sbatch(&["-A", team, "-p", "gpu", "--gres=gpu:1", "--wrap", &wrap]) {
                Ok(id) => ids.push(id),
                Err(_) => refused += 1,
            }
        }
        std::thread::sleep(Duration::from_millis(1500));
    }
    eprintln!(
        "submitted {} jobs beside the kills ({refused} refused)",
        ids.len()
    );
    Ok(ids)
}

/// CLI commands on the daemon's database, one after the other, until `stop`. Returns how many
/// ran and the failures (a command may wait for the daemon's lock; it must never corrupt).
fn cli_while(c: &Cluster, db: &Path, stop: &AtomicBool) -> (u64, Vec<String>) {
    let commands: [&[&str]; 3] = [&["ingest"], &["report", "teams"], &["status"]];
    let (mut runs, mut failures) = (0, Vec::new());
    while !stop.load(Ordering::Relaxed) {
        for args in commands {
            runs += 1;
            match c.accountd(db, args) {
                Ok(o) if o.status.success() => {}
                Ok(o) => failures.push(format!(
                    "accountd {}: {}",
                    args.join(" "),
                    String::from_utf8_lossy(&o.stderr).trim()
                )),
                Err(e) => failures.push(e),
            }
        }
        // /metrics reads the database in the daemon, beside its own connections (refused
        // while the daemon is down: not counted).
        let _ = c.metrics();
    }
    (runs, failures)
}

/// The runs of the jobs `ids` in a database: (JobIDRaw, start, end, state, GPUs, account).
pub(crate) type Runs = BTreeSet<(i64, i64, Option<i64>, String, i64, String)>;

pub(crate) fn runs_of(db: &Path, ids: &[String]) -> Result<Runs, String> {
    let wanted: BTreeSet<i64> = ids.iter().filter_map(|i| i.parse().ok()).collect();
    let conn = rusqlite::Connection::open(db).map_err(|e| e.to_string())?;
    conn.busy_timeout(Duration::from_secs(30))
        .map_err(|e| e.to_string())?;
    let mut stmt = conn
        .prepare("SELECT job_id_raw, start_time, end_time, state, gpus, account FROM job_runs")
        .map_err(|e| e.to_string())?;
    let rows = stmt
        .query_map([], |r| {
            Ok((
                r.get(0)?,
                r.get(1)?,
                r.get(2)?,
                r.get(3)?,
                r.get(4)?,
                r.get(5)?,
            ))
        })
        .map_err(|e| e.to_string())?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| e.to_string())?;
    Ok(rows
        .into_iter()
        .filter(|(id, ..)| wanted.contains(id))
        .collect())
}

fn samples_stored(db: &Path) -> Result<u64, String> {
    let conn = rusqlite::Connection::open(db).map_err(|e| e.to_string())?;
    conn.busy_timeout(Duration::from_secs(30))
        .map_err(|e| e.to_string())?;
    conn.query_row(
        "SELECT COUNT(*) FROM gpu_samples WHERE node = ?1",
        [NODE],
        |r| r.get::<_, i64>(0),
    )
    .map(|n| n.max(0) as u64)
    .map_err(|e| e.to_string())
}

/// The daemon, started once more and left to run, converges: its runs equal a one-shot ingest
/// of the same window, and every spooled sample is stored with the spool empty.
fn converge(
    c: &Cluster,
    db: &Path,
    dir: &Path,
    since: &str,
    ids: &[String],
    batches: u64,
    spool: &Path,
) -> TestResult {
    let fresh: PathBuf = dir.join("fresh.db");
    // The reference: one ingest of the window into a fresh database, once sacct has every
    // job's run (slurmdbd writes asynchronously; an ingest is idempotent, so it is repeated
    // until then).
    let wanted: BTreeSet<i64> = ids.iter().filter_map(|i| i.parse().ok()).collect();
    let reference = c.wait_for("a one-shot ingest with every job's run", MINUTE, || {
        let _ = std::fs::remove_file(&fresh);
        let out = c.accountd(&fresh, &["ingest", "--since", since])?;
        if !out.status.success() {
            return Err(format!(
                "the one-shot ingest failed: {}",
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        let runs = runs_of(&fresh, ids)?;
        let seen: BTreeSet<i64> = runs.iter().map(|r| r.0).collect();
        Ok((seen == wanted).then_some(runs))
    });
    let expected = match reference {
        Ok(runs) => runs,
        Err(e) => {
            let seen: BTreeSet<i64> = runs_of(&fresh, ids)?.iter().map(|r| r.0).collect();
            let missing: Vec<String> = wanted.difference(&seen).map(i64::to_string).collect();
            let sacct = c
                .run(
                    "sacct",
                    &[
                        "-X",
                        "-D",
                        "-P",
                        "-n",
                        "-j",
                        &missing.join(","),
                        "-o",
                        "JobIDRaw,State,Submit,Start,End",
                    ],
                )
                .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
                .unwrap_or_default();
            return Err(format!(
                "{e}: jobs {missing:?} missing; sacct says:\n{sacct}"
            ));
        }
    };
    let want_samples = batches * SAMPLES_PER_BATCH;
    let mut daemon = start_daemon(c, db)?;
    let started = Instant::now();
    let result = c.wait_for("the restarted daemon to converge", 2 * MINUTE, || {
        let have = runs_of(db, ids)?;
        let samples = samples_stored(db)?;
        let left = std::fs::read_dir(spool.join("ready")).map_or(0, |d| d.count());
        Ok((have == expected && samples == want_samples && left == 0).then_some(()))
    });
    let _ = daemon.kill();
    let _ = daemon.wait();
    if let Err(e) = result {
        let have = runs_of(db, ids)?;
        let missing: Vec<_> = expected.difference(&have).take(5).collect();
        let extra: Vec<_> = have.difference(&expected).take(5).collect();
        return Err(format!(
            "{e}\nruns: {} in the daemon's database, {} in a one-shot ingest; missing {missing:?}; \
             not in the one-shot ingest {extra:?}; samples stored {} of {want_samples}",
            have.len(),
            expected.len(),
            samples_stored(db)?
        ));
    }
    eprintln!(
        "converged {:.1?} after the last restart: {} runs equal a one-shot ingest, {want_samples} samples stored once",
        started.elapsed(),
        expected.len()
    );
    let verdict = integrity(db)?;
    ensure(verdict == "ok", || {
        format!("at the end: PRAGMA integrity_check says {verdict}")
    })
}
