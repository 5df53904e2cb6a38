//! Issue 8's adversarial test: an unprivileged member of every team (`tsuser`) submits and
//! modifies at random, for a bounded time, while root's ordinary team jobs come and go and
//! `accountd run` governs every 500 ms. Meanwhile and afterwards it checks what must never
//! happen (DESIGN §4 rule 1, §7):
//!
//! - sampled every 0.5 s (squeue, one RPC, so one consistent view): no team's running GPUs
//!   above quota + borrow limit for longer than [`MAX_OVERSHOOT`] (shorter runs above it are
//!   counted and shown); no running GPU job of a non-team account in the governed
//!   partition; slurmctld alive, answering, and never restarted (its pid file);
//! - with them, a careless administrator edits teamshare.toml at random and a local user
//!   floods /metrics ([`admin`]): what it changes is allowed for [`admin::GRACE`], invalid
//!   edits change nothing, no job is left held for a reason that is gone, and no run is
//!   missing from the daemon's database;
//! - the governor never misses more than one pass: it rewrites DIR/etc/state.json on every
//!   pass, and the file's modification time (nanoseconds; `generated_at` inside has whole
//!   seconds only) is watched every 100 ms;
//! - at the end: no job completed two runs (each job script appends its id to a marks file
//!   only when its sleep finished: `sleep S && echo $SLURM_JOB_ID >> marks`) unless its owner
//!   asked for it (requeued it, or released the hold the governor put on a job whose run had
//!   ended by itself just before a requeue; a failure names what sacct, the governor's log and
//!   the user's actions say of the job), no job that
//!   completed a run is queued again, and every run beyond a job's first in sacct is explained
//!   by Slurm's own preemption (a PREEMPTED record), the governor's log naming the job (or,
//!   for a heterogeneous job's component, its leader, through which the governor acts), or
//!   the user's own `scontrol requeue` of it.
//!
//! One implementation, two sizes. In the CI suite the actions last ADVERSARY_SECS (default 75 s)
//! with ADVERSARY_SEED random (printed; set it to replay a run's choices). The soak
//! (contrib/bench/soak.sh) runs the same scenario with ADVERSARY_SUBMISSIONS=10000 (no time
//! bound unless ADVERSARY_SECS is also set) and reads the figures from ADVERSARY_REPORT (a file
//! of `key=value` lines this scenario writes). ADVERSARY_PACE_MS (default 40) is the pause
//! between two actions, ADVERSARY_MAX_QUEUE (default 60) the user's queue beyond which it
//! cancels its oldest jobs.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::process::Child;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime};

use teamshare_live_tests::{Cluster, Scenario, TestResult, PLAIN_USER};

use crate::governance::isolated;

mod admin;

pub const SCENARIOS: &[Scenario] = &[(
    "adversarial::a01_hostile_member_cannot_break_governance",
    hostile_member,
)];

const MINUTE: Duration = Duration::from_secs(60);

/// A Slurm account that is not a team but of which tsuser is a member, so that GPU requests
/// outside every team get past Slurm's own association check and reach teamshare. Removed at
/// the end.
const OUTSIDE: &str = "advoutside";

/// The longest gap allowed between two publications of the governor's state: 2 s. The governor
/// starts a pass every 500 ms, or right after the previous pass when that one took longer (a
/// pass that requeues jobs or moves a limit runs scontrol and sacctmgr after publishing), and
/// publishes once it has read sinfo and squeue. So a publication comes up to one interval late
/// with no pass missed (a long acting pass, slow reads on a loaded 2-core machine), and one
/// missed pass adds two intervals: 500 ms + 500 ms of lateness + 1,000 ms = 2 s. A longer gap
/// means more than one pass went missing. Gaps over 1 s are counted too (pass_gaps_over_1s).
const MAX_PASS_GAP: Duration = Duration::from_millis(2000);

/// How long a team may stay above its ceiling. Slurm's GrpTRES keeps a team within the limit
/// the governor last set, and the governor requeues what runs beyond the ceiling on its next
/// pass (500 ms); under churn of limits (the administrator's edits, lending that moves every
/// second) Slurm was seen to start a job one GPU beyond the limit, which the governor requeued
/// within a second. A run above the ceiling that outlasts this is a violation; shorter ones are
/// counted and shown (overshoot_samples).
const MAX_OVERSHOOT: Duration = Duration::from_secs(3);

/// How often the sampler looks at the running jobs.
const SAMPLE_EVERY: Duration = Duration::from_millis(500);

/// The squeue the sampler runs: the running jobs of the governed partition, with what Slurm
/// allocated them (gres/gpu=N in tres-alloc). Wide fields: -O pads to at least this width and
/// never cuts, so a trimmed field is whole.
const SAMPLE_FORMAT: &str = "JobID:30|,Account:30|,tres-alloc:200|";

// ---------------------------------------------------------------------------------------------
// Parameters and randomness

struct Params {
    secs: Option<u64>,
    submissions: Option<u64>,
    seed: u64,
    pace: Duration,
    max_queue: usize,
    report: Option<PathBuf>,
}

/// A whole number from the environment (`None` when unset or empty).
pub(crate) fn env_u64(name: &str) -> Result<Option<u64>, String> {
    match std::env::var(name) {
        Ok(v) if !v.trim().is_empty() => v
            .trim()
            .parse()
            .map(Some)
            .map_err(|_| format!("{name}={v:?} is not a whole number")),
        _ => Ok(None),
    }
}

impl Params {
    fn from_env() -> Result<Params, String> {
        let submissions = env_u64("ADVERSARY_SUBMISSIONS")?;
        let secs = match (env_u64("ADVERSARY_SECS")?, submissions) {
            (Some(s), _) => Some(s),
            // The soak: bounded by its submissions only.
            (None, Some(_)) => None,
            // The CI size.
            (None, None) => Some(75),
        };
        let seed = match env_u64("ADVERSARY_SEED")? {
            Some(s) => s,
            None => SystemTime::now()
                .duration_since(SystemTime::UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64 ^ u64::from(std::process::id()))
                .unwrap_or(1),
        };
        Ok(Params {
            secs,
            submissions,
            seed,
            pace: Duration::from_millis(env_u64("ADVERSARY_PACE_MS")?.unwrap_or(40)),
            max_queue: env_u64("ADVERSARY_MAX_QUEUE")?.unwrap_or(60) as usize,
            report: std::env::var_os("ADVERSARY_REPORT")
                .filter(|v| !v.is_empty())
                .map(PathBuf::from),
        })
    }
}

/// xorshift64* (Vigna): tiny, seeded, good enough to pick actions.
pub(crate) struct Rng(u64);

impl Rng {
    pub(crate) fn new(seed: u64) -> Rng {
        // Never the all-zero state, which xorshift cannot leave.
        let s = seed ^ 0x9E37_79B9_7F4A_7C15;
        Rng(if s == 0 { 1 } else { s })
    }
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    pub(crate) fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.below(hi - lo + 1)
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
    fn pick<'a, T>(&mut self, xs: &'a [T]) -> &'a T {
        &xs[self.below(xs.len() as u64) as usize]
    }
}

// ---------------------------------------------------------------------------------------------
// The teams' ceilings, from the configuration the cluster runs (tests/live/teamshare.toml:
// agents 2 + 2, training 4 + 4, research 2 + 6).

struct Team {
    name: String,
    quota: u64,
    ceiling: u64,
}

/// `[[team]]` tables: name, quota, borrow_limit (a number or "N%" of the quota; absent: no
/// limit but the capacity, here 8 GPUs).
fn teams_from_config(text: &str) -> Result<Vec<Team>, String> {
    let mut teams = Vec::new();
    let mut cur: Option<(String, u64, Option<String>)> = None;
    let finish = |t: Option<(String, u64, Option<String>)>, teams: &mut Vec<Team>| {
        if let Some((name, quota, borrow)) = t {
            let borrow = match borrow.as_deref() {
                None => 8,
                Some(b) if b.ends_with('%') => {
                    quota * b.trim_end_matches('%').parse::<u64>().unwrap_or(0) / 100
                }
                Some(b) => b.parse().unwrap_or(0),
            };
            teams.push(Team {
                name,
                quota,
                ceiling: quota + borrow,
            });
        }
    };
    for line in text.lines() {
        let line = line.split('#').next().unwrap_or("").trim();
        if line.starts_with('[') {
            finish(cur.take(), &mut teams);
            if line == "[[team]]" {
                cur = Some((String::new(), 0, None));
            }
            continue;
        }
        let Some((key, value)) = line.split_once('=') else {
            continue;
        };
        let value = value.trim().trim_matches('"').to_string();
        if let Some(t) = cur.as_mut() {
            match key.trim() {
                "name" => t.0 = value,
                "quota" => t.1 = value.parse().map_err(|_| format!("quota {value:?}"))?,
                "borrow_limit" => t.2 = Some(value),
                _ => {}
            }
        }
    }
    finish(cur.take(), &mut teams);
    if teams.is_empty() || teams.iter().any(|t| t.name.is_empty()) {
        return Err("no [[team]] with a name in the cluster's teamshare.toml".into());
    }
    Ok(teams)
}

// ---------------------------------------------------------------------------------------------
// The figures

#[derive(Default)]
struct Actions {
    submissions: u64,
    accepted: u64,
    refusals: BTreeMap<String, u64>,
    arrays: u64,
    hetjobs: u64,
    sallocs: u64,
    updates: u64,
    updates_accepted: u64,
    update_refusals: BTreeMap<String, u64>,
    /// One command per refusal reason, to show what was refused.
    examples: BTreeMap<String, String>,
    holds: u64,
    requeues_accepted: u64,
    cancels: u64,
    queue_trims: u64,
    cross_user_tries: u64,
    /// Actions on root's jobs that Slurm accepted from tsuser: must be 0.
    cross_user_accepted: Vec<String>,
    root_jobs: u64,
    root_refused: BTreeMap<String, u64>,
    /// Jobs (ids as the user named them: a job, an array or a heterogeneous job) that the user
    /// requeued: their extra runs are the user's doing.
    user_requeued: BTreeSet<u64>,
    /// Jobs (as the user named them) that the user released: a job the governor held because
    /// its run had ended by itself runs again when its owner releases it.
    user_released: BTreeSet<u64>,
    /// What the user did to each job (as named), for a failure's explanation.
    touched: BTreeMap<u64, Vec<String>>,
    /// Every job id sbatch printed (the user's and root's).
    ids: Vec<u64>,
}

impl Actions {
    /// Note what the user did to job `id` (the last few actions per job are kept).
    fn touch(&mut self, id: u64, what: String) {
        let list = self.touched.entry(id).or_default();
        if list.len() < 12 {
            list.push(what);
        }
    }
}

#[derive(Default)]
struct Sampled {
    samples: u64,
    late: u64,
    squeue_failures: u64,
    squeue_max: Duration,
    /// Runs above a team's ceiling that lasted over [`MAX_OVERSHOOT`] (one per run).
    ceiling_violations: u64,
    /// Samples above a ceiling at all, the longest run, and a few of them.
    overshoot_samples: u64,
    overshoot_longest: Duration,
    overshoot_examples: Vec<String>,
    /// Teams whose current run above the ceiling was counted as a violation.
    violating: BTreeSet<String>,
    outside_gpu: u64,
    examples: Vec<String>,
    slurmctld_down: u64,
    slurmctld_restarts: u64,
    peak: BTreeMap<String, u64>,
    /// Samples in which some team ran beyond its quota (borrowing happened).
    borrowing_samples: u64,
}

#[derive(Default)]
struct Passes {
    publications: u64,
    max_gap: Duration,
    over: Vec<String>,
    gaps_over_1s: u64,
}

#[derive(Default)]
struct Ending {
    completed_runs: u64,
    ran_twice: Vec<String>,
    ran_twice_user: u64,
    queued_again: Vec<String>,
    jobs_in_sacct: u64,
    runs: u64,
    extra_preempted: u64,
    extra_governor: u64,
    extra_user: u64,
    unexplained: Vec<String>,
    govern_failures: Vec<String>,
    /// Runs Slurm preempted (sacct PREEMPTED), and the governor's requeues in its log.
    preempted_records: u64,
    governor_requeues: u64,
    /// sacct records still open a minute after the queue emptied (runaway jobs).
    sacct_open: Vec<String>,
    /// Jobs the governor still held, once the original configuration was back, for a reason
    /// that was gone.
    stranded: Vec<String>,
    /// Runs a one-shot ingest finds that the daemon's database lacks.
    runs_lost: Vec<String>,
}

// ---------------------------------------------------------------------------------------------
// The scenario

fn hostile_member(c: &Cluster) -> TestResult {
    let params = Params::from_env()?;
    let teams = teams_from_config(c.original_config())?;
    eprintln!(
        "a01: ADVERSARY_SEED={} ({}; submissions {}), pace {} ms, queue cap {}",
        params.seed,
        params
            .secs
            .map_or("no time bound".to_string(), |s| format!("{s} s of actions")),
        params
            .submissions
            .map_or("unbounded".to_string(), |n| n.to_string()),
        params.pace.as_millis(),
        params.max_queue
    );
    isolated(c, |c| {
        setup_outside_account(c)?;
        let r = run(c, &params, &teams);
        let removed = remove_outside_account(c);
        r.and(removed)
    })
}

fn setup_outside_account(c: &Cluster) -> TestResult {
    c.ok("sacctmgr", &["-i", "add", "account", OUTSIDE])?;
    c.ok(
        "sacctmgr",
        &[
            "-i",
            "add",
            "user",
            PLAIN_USER,
            &format!("account={OUTSIDE}"),
        ],
    )?;
    Ok(())
}

fn remove_outside_account(c: &Cluster) -> TestResult {
    let _ = c.run(
        "sacctmgr",
        &[
            "-i",
            "delete",
            "user",
            PLAIN_USER,
            &format!("account={OUTSIDE}"),
        ],
    );
    let out = c.run("sacctmgr", &["-i", "delete", "account", OUTSIDE])?;
    let left = c.ok("sacctmgr", &["-n", "-P", "show", "account", OUTSIDE])?;
    if !left.trim().is_empty() {
        return Err(format!(
            "could not remove account {OUTSIDE}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(())
}

/// The marks directory, job script and marks file, usable by tsuser's jobs.
fn prepare_files(c: &Cluster) -> Result<(PathBuf, PathBuf), String> {
    use std::os::unix::fs::PermissionsExt;
    let dir = c.dir.join("adversary");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let perm = |p: &PathBuf, mode: u32| {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode))
            .map_err(|e| format!("chmod {}: {e}", p.display()))
    };
    perm(&dir, 0o777)?;
    let marks = dir.join("marks");
    std::fs::write(&marks, "").map_err(|e| e.to_string())?;
    perm(&marks, 0o666)?;
    let script = dir.join("job.sh");
    // `&&`: a run killed by preemption, requeue or cancel does not mark itself.
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\nsleep \"${{1:-1}}\" && echo \"$SLURM_JOB_ID\" >> {}\n",
            marks.display()
        ),
    )
    .map_err(|e| e.to_string())?;
    perm(&script, 0o755)?;
    Ok((script, marks))
}

fn run(c: &Cluster, params: &Params, teams: &[Team]) -> TestResult {
    let (script, marks) = prepare_files(c)?;
    let since = c.ok("date", &["+%Y-%m-%dT%H:%M:%S"])?.trim().to_string();
    let log_start = c.governor_log().len();
    let stop = AtomicBool::new(false);
    let stop_admin = AtomicBool::new(false);
    let history = admin::History::new(teams_from_config(c.original_config())?);
    let neighbour = std::sync::Mutex::new(admin::Admin::default());
    let started = Instant::now();
    let mut children: Vec<Child> = Vec::new();

    let (actions, sampled, passes, quiet, edits) = std::thread::scope(|s| {
        let sampler = s.spawn(|| sample(c, &history, &stop));
        let watcher = s.spawn(|| watch_passes(c, &stop));
        let editor = s.spawn(|| admin::administrator(c, params.seed, &history, &stop_admin));
        let noisy = s.spawn(|| admin::neighbour(c, &stop_admin, &neighbour));
        let actions = adversary(c, params, teams, &script, &mut children);
        let actions_secs = started.elapsed().as_secs_f64();
        // The administrator puts the original file back (in force when it returns).
        stop_admin.store(true, Ordering::SeqCst);
        let edits = editor
            .join()
            .unwrap_or_else(|_| Err("the administrator panicked".into()));
        let _ = noisy.join();
        // A quiet moment with the samplers still on: two governor passes that saw the end.
        let quiet = c.wait_governor_pass().and_then(|_| {
            let again = queued_again_candidates(c, &marks)?;
            Ok((again, admin::stranded_holds(c)?))
        });
        stop.store(true, Ordering::SeqCst);
        let sampled = sampler.join().unwrap_or_else(|_| Sampled {
            examples: vec!["the sampler panicked".into()],
            ceiling_violations: 1,
            ..Sampled::default()
        });
        let passes = watcher.join().unwrap_or_else(|_| Passes {
            over: vec!["the pass watcher panicked".into()],
            ..Passes::default()
        });
        eprintln!(
            "a01: actions for {actions_secs:.1} s, the quiet check until {:.1} s",
            started.elapsed().as_secs_f64()
        );
        (actions, sampled, passes, quiet, edits)
    });

    // Everything the test made ends, whatever happened above.
    let cleaned = cleanup(c, &mut children);
    eprintln!(
        "a01: queue empty at {:.1} s",
        started.elapsed().as_secs_f64()
    );
    let actions = actions?;
    let (quiet, stranded) = quiet?;
    let mut edits = edits?;
    let flood = neighbour.into_inner().unwrap_or_else(|p| p.into_inner());
    (edits.floods, edits.flood_failures) = (flood.floods, flood.flood_failures);
    cleaned?;
    let mut ending = compare_runs(c, &since, &actions, &marks, &quiet)?;
    ending.stranded = stranded;
    ending.runs_lost = admin::runs_lost(c, &since, &actions.ids)?;
    eprintln!(
        "a01: sacct compared at {:.1} s",
        started.elapsed().as_secs_f64()
    );
    let log = c.governor_log();
    let run_log = &log[log_start.min(log.len())..];
    ending.governor_requeues = run_log
        .lines()
        .filter(|l| l.contains(" displaced ") || l.contains(" requeued by the governor"))
        .count() as u64;
    ending.govern_failures = run_log
        .lines()
        .filter(|l| l.contains("govern failed"))
        .map(str::to_string)
        .collect();
    let total = started.elapsed();
    report(params, &actions, &sampled, &passes, &ending, &edits, total)
}

// ---------------------------------------------------------------------------------------------
// The adversary

fn adversary(
    c: &Cluster,
    params: &Params,
    teams: &[Team],
    script: &std::path::Path,
    children: &mut Vec<Child>,
) -> Result<Actions, String> {
    let mut rng = Rng::new(params.seed);
    let mut a = Actions::default();
    let script = script.to_string_lossy().into_owned();
    let team_names: Vec<&str> = teams.iter().map(|t| t.name.as_str()).collect();
    // The user's jobs as sbatch named them, oldest first, and root's.
    let mut mine: Vec<u64> = Vec::new();
    let mut roots: Vec<u64> = Vec::new();
    let started = Instant::now();
    let mut last_progress = Instant::now();
    let mut iteration: u64 = 0;
    let (mut last_root_check, mut last_queue_check) = (0u64, 0u64);
    let mut root_queue = 0usize;
    loop {
        if params
            .secs
            .is_some_and(|s| started.elapsed() >= Duration::from_secs(s))
        {
            break;
        }
        if params.submissions.is_some_and(|n| a.submissions >= n) {
            break;
        }
        iteration += 1;
        children.retain_mut(|ch| matches!(ch.try_wait(), Ok(None)));

        // Root's churn of ordinary team jobs: borrowing, reclaim and displacement happen.
        if iteration - last_root_check >= 4 {
            last_root_check = iteration;
            root_queue = c
                .ok("squeue", &["-h", "-u", "root", "-o", "%A"])
                .map(|o| o.lines().count())
                .unwrap_or(root_queue);
        }
        if root_queue < 12 && rng.chance(45) {
            root_job(c, &mut rng, &team_names, &script, &mut a, &mut roots);
            root_queue += 1;
        }
        // Keep the user's queue bounded (the soak submits 10,000 jobs).
        if iteration - last_queue_check >= 10 {
            last_queue_check = iteration;
            let queued = c
                .ok("squeue", &["-h", "-u", PLAIN_USER, "-o", "%A"])
                .map(|o| o.lines().count())
                .unwrap_or(0);
            if queued > params.max_queue {
                let oldest: Vec<String> = mine
                    .drain(..mine.len().min(20))
                    .map(|i| i.to_string())
                    .collect();
                let mut args: Vec<&str> = vec!["--quiet"];
                args.extend(oldest.iter().map(String::as_str));
                let _ = c.run_as_user("scancel", &args);
                a.queue_trims += 1;
            }
        }

        let roll = rng.below(100);
        match roll {
            0..=39 => submit(c, &mut rng, &team_names, &script, &mine, &mut a)
                .map(|id| mine.extend(id))?,
            40..=43 => salloc(c, &mut rng, &team_names, children, &mut a)?,
            44..=73 => {
                if let Some(id) = target(&mut rng, &mine) {
                    update(c, &mut rng, &team_names, id, &mine, &mut a)?;
                }
            }
            74..=79 => {
                if let Some(id) = target(&mut rng, &mine) {
                    let verb = *rng.pick(&["hold", "uhold", "release", "release", "release"]);
                    let out = c.run_as_user("scontrol", &[verb, &id.to_string()])?;
                    a.holds += 1;
                    if verb == "release" {
                        a.user_released.insert(id);
                    }
                    a.touch(id, format!("{verb}: exit {}", out.status));
                }
            }
            80..=83 => {
                if let Some(id) = target(&mut rng, &mine) {
                    let verb = *rng.pick(&["requeue", "requeue", "requeuehold"]);
                    let out = c.run_as_user("scontrol", &[verb, &id.to_string()])?;
                    if out.status.success() {
                        a.requeues_accepted += 1;
                    }
                    // Counted whatever scontrol's exit status: on an array it requeues the
                    // tasks it can (finished ones too) and fails for the others (seen in the
                    // soak: tasks 1100 and 1101 of array 1098 requeued after they completed,
                    // scontrol exiting 1 for the array's pending tasks).
                    a.user_requeued.insert(id);
                    a.touch(id, format!("{verb}: exit {}", out.status));
                }
            }
            84..=91 => {
                if let Some(id) = target(&mut rng, &mine) {
                    let _ = c.run_as_user("scancel", &[&id.to_string()])?;
                    a.cancels += 1;
                }
            }
            92..=94 => {
                if let Some(id) = target(&mut rng, &roots) {
                    cross_user(c, &mut rng, &team_names, id, &mut a)?;
                }
            }
            _ => std::thread::sleep(Duration::from_millis(rng.range(100, 600))),
        }
        if last_progress.elapsed() >= MINUTE {
            last_progress = Instant::now();
            eprintln!(
                "a01: {:.0} s: {} submissions, {} accepted, {} updates, {} root jobs",
                started.elapsed().as_secs_f64(),
                a.submissions,
                a.accepted,
                a.updates,
                a.root_jobs
            );
        }
        std::thread::sleep(params.pace);
    }
    a.ids.extend(mine.iter().chain(roots.iter()));
    Ok(a)
}

/// A job to act on: mostly a recent one (likely still queued), sometimes any.
fn target(rng: &mut Rng, ids: &[u64]) -> Option<u64> {
    if ids.is_empty() {
        return None;
    }
    let n = ids.len() as u64;
    let i = if rng.chance(75) {
        n - 1 - rng.below(n.min(15))
    } else {
        rng.below(n)
    };
    Some(ids[i as usize])
}

/// A GPU count as a user might write it, absurd ones included.
fn gpu_count(rng: &mut Rng) -> String {
    match rng.below(20) {
        0 => rng
            .pick(&[
                "1t",
                "2p",
                "1k",
                "3g",
                "99999999",
                "4294967295",
                "18446744073709551615",
                "-1",
                "0",
                "abc",
                "1.5",
                "",
                "0x10",
                "1m",
            ])
            .to_string(),
        1 | 2 => rng.range(5, 9).to_string(),
        3 => rng.range(10, 16).to_string(),
        _ if rng.chance(55) => "1".into(),
        _ => rng.range(2, 4).to_string(),
    }
}

/// The GPU part of a request, in every form sbatch and salloc take.
fn gpu_form(rng: &mut Rng) -> Vec<String> {
    let n = gpu_count(rng);
    let types = ["h100", "a100", "default", "tesla", "gpu"];
    match rng.below(18) {
        0 | 1 => vec![],
        2..=5 => vec![format!("--gres=gpu:{n}")],
        6 | 7 => vec![format!("--gpus={n}")],
        8 => vec![
            format!("--gpus-per-node={n}"),
            format!("--nodes={}", rng.range(1, 2)),
        ],
        9 => vec![
            format!("--gpus-per-task={n}"),
            format!("--ntasks={}", rng.range(1, 4)),
        ],
        10 => vec![format!("--gres=gpu:{}:{n}", rng.pick(&types))],
        11 => vec![format!("--gpus={}:{n}", rng.pick(&types))],
        12 => vec![rng
            .pick(&[
                "--gres=gpu",
                "--gres=gpu:1,gpu:2",
                "--gres=mps:1",
                "--gres=gpu:1:2",
                "--gres=nvidia:1",
                "--gres=gpu:1(S:0)",
                "--gres=,",
                "--gpus=,",
                "--gres=gpu:",
                "--tres-per-task=gres:gpu:1",
            ])
            .to_string()],
        13 => vec![format!("--gres=gpu:{n}"), "--exclusive".into()],
        14 => vec![
            format!("--gres=gpu:{n}"),
            format!("--cpus-per-gpu={}", rng.range(1, 4)),
        ],
        // Issue 25, finding 8: GPUs per socket, with or without a socket count.
        15 => {
            let mut v = vec![format!("--gpus-per-socket={n}")];
            if rng.chance(70) {
                v.push(format!("--sockets-per-node={}", rng.range(1, 2)));
            }
            v
        }
        // Issue 25, finding 7: a whole node without naming GPUs.
        16 => vec!["--exclusive".into()],
        _ => vec![
            format!("--gres=gpu:{n}"),
            format!("--nodes={}", rng.range(1, 3)),
        ],
    }
}

fn account(rng: &mut Rng, teams: &[&str]) -> Option<String> {
    match rng.below(100) {
        0..=69 => Some(rng.pick(teams).to_string()),
        70..=77 => Some(OUTSIDE.into()),
        78..=81 => Some("nosuchteam".into()),
        82..=84 => Some("root".into()),
        _ => None,
    }
}

fn qos(rng: &mut Rng) -> Option<String> {
    match rng.below(100) {
        0..=39 => None,
        40..=84 => Some(
            rng.pick(&["inference", "standard", "experiment"])
                .to_string(),
        ),
        85..=89 => Some("teamshare".into()),
        90..=94 => Some("normal".into()),
        _ => Some(
            rng.pick(&["junk-qos", "INFERENCE", "standard,experiment", ""])
                .to_string(),
        ),
    }
}

/// One component: account, partition, GPUs, class.
fn component(rng: &mut Rng, teams: &[&str]) -> Vec<String> {
    let mut args = Vec::new();
    if let Some(acct) = account(rng, teams) {
        args.push(format!("--account={acct}"));
    }
    match rng.below(100) {
        0..=89 => args.push("--partition=gpu".into()),
        90..=92 => args.push("--partition=nosuch".into()),
        _ => {}
    }
    args.extend(gpu_form(rng));
    if let Some(q) = qos(rng) {
        args.push(format!("--qos={q}"));
    }
    args
}

/// The sleep of a job: mostly short, now and then long enough to be reclaimed.
fn sleep_secs(rng: &mut Rng) -> u64 {
    if rng.chance(20) {
        rng.range(15, 40)
    } else {
        rng.range(1, 8)
    }
}

/// The options besides the request, in the first component.
fn extras(rng: &mut Rng, known: &[u64]) -> Vec<String> {
    let mut args = Vec::new();
    if rng.chance(10) {
        args.push(format!("--begin=now+{}", rng.range(1, 30)));
    }
    if rng.chance(8) {
        args.push("--hold".into());
    }
    if rng.chance(20) {
        args.push(format!("--time={}", rng.range(1, 5)));
    }
    if rng.chance(10) {
        args.push(rng.pick(&["--requeue", "--no-requeue"]).to_string());
    }
    if rng.chance(5) {
        args.push(
            rng.pick(&["--nice=100", "--nice=-100", "--nice=2147483647"])
                .to_string(),
        );
    }
    if rng.chance(3) {
        args.push(
            rng.pick(&["--priority=1", "--priority=4294967294", "--priority=TOP"])
                .to_string(),
        );
    }
    if rng.chance(5) {
        if let Some(id) = known.last() {
            args.push(format!(
                "--dependency={}:{id}",
                rng.pick(&["afterok", "afterany", "afternotok", "singleton"])
            ));
        }
    }
    if rng.chance(3) {
        args.push(
            rng.pick(&["--site-factor=1000", "--deadline=now+60", "--overcommit"])
                .to_string(),
        );
    }
    args
}

/// Why a submission or an update was refused: teamshare's one-line reason up to its first ';',
/// or Slurm's own error; numbers as N, so that reasons group.
fn refusal_reason(stderr: &str) -> String {
    let text = match stderr
        .lines()
        .find_map(|l| l.find("teamshare: ").map(|i| &l[i..]))
    {
        Some(t) => t.split(';').next().unwrap_or(t),
        None => {
            let line = stderr
                .lines()
                .map(str::trim)
                .rfind(|l| l.contains("error:") || l.contains("rror"))
                .or_else(|| stderr.lines().map(str::trim).find(|l| !l.is_empty()))
                .unwrap_or("(no message)");
            line.rsplit("error: ").next().unwrap_or(line)
        }
    };
    let mut out = String::new();
    let mut in_number = false;
    for ch in text.trim().chars() {
        if ch.is_ascii_digit() {
            if !in_number {
                out.push('N');
            }
            in_number = true;
        } else {
            in_number = false;
            out.push(ch);
        }
    }
    if out.chars().count() > 100 {
        out = out.chars().take(100).collect::<String>() + "...";
    }
    out.replace('|', "/")
}

/// A batch submission as tsuser; returns the job id when sbatch accepted it.
fn submit(
    c: &Cluster,
    rng: &mut Rng,
    teams: &[&str],
    script: &str,
    known: &[u64],
    a: &mut Actions,
) -> Result<Option<u64>, String> {
    let mut args = component(rng, teams);
    args.extend(extras(rng, known));
    let kind = rng.below(100);
    if kind < 8 {
        let n = rng.range(2, 20);
        args.push(format!("--array=1-{n}%{}", rng.range(1, 4)));
        a.arrays += 1;
    } else if kind < 16 {
        args.push(":".into());
        args.extend(component(rng, teams));
        a.hetjobs += 1;
    }
    args.push(script.to_string());
    args.push(sleep_secs(rng).to_string());
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    a.submissions += 1;
    match c.sbatch_as_user(&refs) {
        Ok(id) => match id.parse::<u64>() {
            Ok(id) => {
                a.accepted += 1;
                Ok(Some(id))
            }
            Err(_) => {
                *a.refusals
                    .entry(format!("sbatch printed no job id ({id:?})"))
                    .or_default() += 1;
                Ok(None)
            }
        },
        Err(stderr) => {
            let reason = refusal_reason(&stderr);
            a.examples
                .entry(format!("sbatch: {reason}"))
                .or_insert_with(|| refs.join(" "));
            *a.refusals.entry(reason).or_default() += 1;
            Ok(None)
        }
    }
}

/// An interactive allocation (`salloc --no-shell`), started and not waited for.
fn salloc(
    c: &Cluster,
    rng: &mut Rng,
    teams: &[&str],
    children: &mut Vec<Child>,
    a: &mut Actions,
) -> TestResult {
    if children.len() >= 6 {
        return Ok(());
    }
    let mut args = component(rng, teams);
    args.extend([
        "--no-shell".into(),
        "-Q".into(),
        format!("--time={}", rng.range(1, 2)),
    ]);
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    children.push(c.spawn_as_user("salloc", &refs)?);
    a.sallocs += 1;
    Ok(())
}

/// One `scontrol update` of fields a user may touch (and some a user may not).
fn update_field(rng: &mut Rng, teams: &[&str], known: &[u64]) -> String {
    match rng.below(24) {
        0 | 1 => format!("TresPerNode=gres:gpu:{}", gpu_count(rng)),
        2 | 3 => format!("TresPerJob=gres:gpu:{}", gpu_count(rng)),
        4 => format!("TresPerTask=gres:gpu:{}", gpu_count(rng)),
        5 => format!("NumNodes={}", rng.range(0, 3)),
        6 => format!("NumTasks={}", rng.range(1, 8)),
        7 | 8 => format!(
            "Account={}",
            account(rng, teams).unwrap_or_else(|| "".into())
        ),
        9 => format!("Partition={}", rng.pick(&["gpu", "gpu", "nosuch", ""])),
        10 => format!("QOS={}", qos(rng).unwrap_or_default()),
        11 => "qos=".into(),
        12 => format!("Priority={}", rng.pick(&["1", "1000", "4294967294", "0"])),
        13 => format!(
            "StartTime={}",
            rng.pick(&["now", "now+5", "now+30", "now+1hour", "2000-01-01T00:00:00"])
        ),
        14 => format!(
            "TimeLimit={}",
            rng.pick(&["1", "2", "5", "UNLIMITED", "+1", "-1", "0:30"])
        ),
        15 => format!("Name=adv{}", rng.below(1000)),
        16 => format!("Comment=adversary-{}", rng.below(1000)),
        17 => match known.get(rng.below(known.len() as u64) as usize) {
            Some(id) if rng.chance(70) => format!("Dependency=afterany:{id}"),
            _ => "Dependency=".into(),
        },
        18 => format!("Nice={}", rng.pick(&["100", "-100", "0"])),
        19 => format!("Gres=gpu:{}", gpu_count(rng)),
        20 => format!(
            "{}=n{}",
            rng.pick(&["ReqNodeList", "ExcNodeList"]),
            rng.range(1, 2)
        ),
        21 => format!("Requeue={}", rng.range(0, 1)),
        22 => format!("ArrayTaskThrottle={}", rng.range(0, 8)),
        // The whole request, as teamshare's refusal of a partial one suggests.
        _ => format!(
            "Account={} TresPerJob=gres:gpu:{} TresPerNode= TresPerTask= TresPerSocket=",
            rng.pick(teams),
            gpu_count(rng)
        ),
    }
}

fn update(
    c: &Cluster,
    rng: &mut Rng,
    teams: &[&str],
    id: u64,
    known: &[u64],
    a: &mut Actions,
) -> TestResult {
    let mut args = vec!["update".to_string(), format!("jobid={id}")];
    for _ in 0..rng.range(1, 3) {
        args.extend(
            update_field(rng, teams, known)
                .split(' ')
                .map(str::to_string),
        );
    }
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = c.run_as_user("scontrol", &refs)?;
    a.updates += 1;
    a.touch(id, format!("{}: exit {}", refs[2..].join(" "), out.status));
    if out.status.success() {
        a.updates_accepted += 1;
    } else {
        let reason = refusal_reason(&String::from_utf8_lossy(&out.stderr));
        a.examples
            .entry(format!("scontrol: {reason}"))
            .or_insert_with(|| refs.join(" "));
        *a.update_refusals.entry(reason).or_default() += 1;
    }
    Ok(())
}

/// tsuser acting on root's job: Slurm must refuse every one.
fn cross_user(c: &Cluster, rng: &mut Rng, teams: &[&str], id: u64, a: &mut Actions) -> TestResult {
    let id_s = id.to_string();
    let jobid = format!("jobid={id}");
    let account = format!("Account={}", rng.pick(teams));
    let args: Vec<&str> = match rng.below(5) {
        0 => vec!["hold", &id_s],
        1 => vec!["requeue", &id_s],
        2 => vec!["update", &jobid, "TimeLimit=1"],
        3 => vec!["update", &jobid, &account],
        _ => vec!["update", &jobid, "Priority=1"],
    };
    a.cross_user_tries += 1;
    let out = c.run_as_user("scontrol", &args)?;
    if out.status.success() {
        a.cross_user_accepted
            .push(format!("scontrol {} (root's job)", args.join(" ")));
    }
    Ok(())
}

/// An ordinary team job of root's: 1 or 2 GPUs, any class, a few seconds.
fn root_job(
    c: &Cluster,
    rng: &mut Rng,
    teams: &[&str],
    script: &str,
    a: &mut Actions,
    roots: &mut Vec<u64>,
) {
    let team = rng.pick(teams).to_string();
    let gpus = match rng.below(20) {
        0..=13 => 1,
        14..=18 => 2,
        _ => 3,
    };
    let class = rng.pick(&[
        "inference",
        "standard",
        "standard",
        "experiment",
        "experiment",
    ]);
    let secs = rng.range(4, 20).to_string();
    let args = [
        "-A".to_string(),
        team,
        "-p".into(),
        "gpu".into(),
        format!("--gres=gpu:{gpus}"),
        format!("--qos={class}"),
        script.to_string(),
        secs,
    ];
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    match c.sbatch(&refs) {
        Ok(id) => {
            a.root_jobs += 1;
            if let Ok(id) = id.parse() {
                roots.push(id);
            }
        }
        Err(e) => *a.root_refused.entry(refusal_reason(&e)).or_default() += 1,
    }
}

// ---------------------------------------------------------------------------------------------
// The samplers

fn gpus_of(tres: &str) -> u64 {
    tres.split(',')
        .filter_map(|kv| kv.split_once('='))
        .filter(|(k, _)| k.trim() == "gres/gpu")
        .filter_map(|(_, v)| v.trim().parse::<u64>().ok())
        .sum()
}

fn sample(c: &Cluster, history: &admin::History, stop: &AtomicBool) -> Sampled {
    let mut s = Sampled::default();
    // Team -> the first sample of its current run above its ceiling.
    let mut over_since: BTreeMap<String, Instant> = BTreeMap::new();
    let mut pid = c.slurmctld_pid();
    let mut next = Instant::now();
    let example = |s: &mut Sampled, what: String| {
        if s.examples.len() < 20 {
            s.examples.push(what);
        }
    };
    while !stop.load(Ordering::SeqCst) {
        s.samples += 1;
        if !c.slurmctld_alive() {
            s.slurmctld_down += 1;
        }
        let now_pid = c.slurmctld_pid();
        if now_pid.is_some() && now_pid != pid {
            s.slurmctld_restarts += 1;
            example(&mut s, format!("slurmctld pid {pid:?} -> {now_pid:?}"));
            pid = now_pid;
        }
        let t0 = Instant::now();
        let out = c.run(
            "squeue",
            &["-h", "-t", "R", "-p", "gpu", "-O", SAMPLE_FORMAT],
        );
        s.squeue_max = s.squeue_max.max(t0.elapsed());
        match out {
            Ok(out) if out.status.success() => {
                // The ceilings in force, or lowered within the governor's stated time.
                let teams = &history.window(Instant::now());
                let text = String::from_utf8_lossy(&out.stdout);
                let mut per_team: BTreeMap<&str, u64> = BTreeMap::new();
                let mut outside = Vec::new();
                for line in text.lines() {
                    let f: Vec<&str> = line.split('|').map(str::trim).collect();
                    if f.len() < 3 {
                        continue;
                    }
                    let gpus = gpus_of(f[2]);
                    if gpus == 0 {
                        continue;
                    }
                    match teams.iter().find(|t| t.name == f[1]) {
                        Some(t) => *per_team.entry(t.name.as_str()).or_default() += gpus,
                        None => outside.push(format!("job {} of {} holds {gpus} GPUs", f[0], f[1])),
                    }
                }
                let mut borrowing = false;
                for t in teams {
                    let used = per_team.get(t.name.as_str()).copied().unwrap_or(0);
                    let peak = s.peak.entry(t.name.clone()).or_default();
                    *peak = (*peak).max(used);
                    borrowing |= used > t.quota;
                    if used <= t.ceiling {
                        over_since.remove(&t.name);
                        continue;
                    }
                    s.overshoot_samples += 1;
                    let since = *over_since.entry(t.name.clone()).or_insert(t0);
                    s.overshoot_longest = s.overshoot_longest.max(t0 - since);
                    let what = format!(
                        "team {} ran {used} GPUs, ceiling {} (above it for {:.1?}); squeue:\n{}",
                        t.name,
                        t.ceiling,
                        t0 - since,
                        text.trim_end()
                    );
                    if t0 - since > MAX_OVERSHOOT {
                        // Once per episode.
                        if !s.violating.contains(&t.name) {
                            s.violating.insert(t.name.clone());
                            s.ceiling_violations += 1;
                            example(&mut s, what);
                        }
                    } else if s.overshoot_examples.len() < 3 {
                        s.overshoot_examples.push(what);
                    }
                }
                s.violating.retain(|team| over_since.contains_key(team));
                if borrowing {
                    s.borrowing_samples += 1;
                }
                if !outside.is_empty() {
                    s.outside_gpu += 1;
                    example(&mut s, outside.join("; "));
                }
            }
            _ => s.squeue_failures += 1,
        }
        next += SAMPLE_EVERY;
        let now = Instant::now();
        if now > next {
            s.late += 1;
            next = now;
        } else {
            std::thread::sleep(next - now);
        }
    }
    s
}

/// Every publication of the governor's state (its file's modification time), watched every
/// 100 ms: the passes come at most every 500 ms, so none is missed.
fn watch_passes(c: &Cluster, stop: &AtomicBool) -> Passes {
    let mut p = Passes::default();
    let mut last = c.state_modified();
    while !stop.load(Ordering::SeqCst) {
        std::thread::sleep(Duration::from_millis(100));
        let now = c.state_modified();
        if now == last || now.is_none() {
            continue;
        }
        p.publications += 1;
        if let (Some(a), Some(b)) = (last, now) {
            let gap = b.duration_since(a).unwrap_or_default();
            p.max_gap = p.max_gap.max(gap);
            if gap > Duration::from_secs(1) {
                p.gaps_over_1s += 1;
            }
            if gap > MAX_PASS_GAP && p.over.len() < 20 {
                let at = b
                    .duration_since(SystemTime::UNIX_EPOCH)
                    .map(|d| d.as_secs_f64())
                    .unwrap_or(0.0);
                p.over.push(format!(
                    "{:.0} ms before the pass at {at:.3}",
                    gap.as_secs_f64() * 1000.0
                ));
            } else if gap > MAX_PASS_GAP {
                p.over.push(String::new());
            }
        }
        last = now;
    }
    p
}

// ---------------------------------------------------------------------------------------------
// The end

/// Jobs that completed a run (marked) and are in the queue again, with their state.
fn queued_again_candidates(
    c: &Cluster,
    marks: &std::path::Path,
) -> Result<Vec<(u64, String)>, String> {
    let marked: BTreeSet<u64> = std::fs::read_to_string(marks)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect();
    let candidates = |c: &Cluster| -> Result<Vec<(u64, String, String)>, String> {
        let out = c.ok("squeue", &["-h", "-o", "%A|%T|%r"])?;
        Ok(out
            .lines()
            .filter_map(|l| {
                let f: Vec<&str> = l.split('|').collect();
                Some((
                    f.first()?.trim().parse::<u64>().ok()?,
                    f.get(1)?.trim().to_string(),
                    f.get(2)?.trim().to_string(),
                ))
            })
            .filter(|(id, st, _)| marked.contains(id) && st != "COMPLETING" && st != "COMPLETED")
            .collect())
    };
    // A run that ended by itself in the milliseconds before a governor requeue reached
    // slurmctld is requeued all the same (Slurm still had it RUNNING); the governor finds that
    // in accounting and holds the job before Slurm's requeue delay would start it again. Such
    // a job is not "queued again" once it is held that way (and the governor said so). The
    // governor looks for the run in accounting for up to 90 s after the requeue (slurmdbd
    // writes asynchronously, and lags when three suites share two cores), while Slurm's 121 s
    // requeue delay keeps the job from starting: give it that long and a pass more.
    let held_by_governor = |c: &Cluster, id: u64, reason: &str| {
        reason == "JobHeldUser"
            && c.governor_log().contains(&format!(
                "job {id} held by the governor: its run had ended by itself"
            ))
    };
    let deadline = Instant::now() + Duration::from_secs(95);
    loop {
        let left: Vec<(u64, String, String)> = candidates(c)?
            .into_iter()
            .filter(|(id, _, reason)| !held_by_governor(c, *id, reason))
            .collect();
        if left.is_empty() || Instant::now() > deadline {
            return Ok(left.into_iter().map(|(id, st, _)| (id, st)).collect());
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// Cancel what the test made and wait until nothing is left; reap the sallocs.
fn cleanup(c: &Cluster, children: &mut Vec<Child>) -> TestResult {
    let _ = c.run("scancel", &["-u", PLAIN_USER]);
    c.cancel_submitted();
    let _ = c.run("scancel", &["-u", "root"]);
    let mut rescans = Instant::now();
    let emptied = c.wait_for("an empty queue after the adversary", 3 * MINUTE, || {
        let out = c.ok("squeue", &["-h", "-o", "%i"])?;
        if !out.trim().is_empty() && rescans.elapsed() > Duration::from_secs(3) {
            // Arrays split and sallocs granted meanwhile are cancelled too.
            let _ = c.run("scancel", &["-u", PLAIN_USER]);
            rescans = Instant::now();
        }
        Ok(out.trim().is_empty().then_some(()))
    });
    let deadline = Instant::now() + Duration::from_secs(30);
    while !children.is_empty() && Instant::now() < deadline {
        children.retain_mut(|ch| matches!(ch.try_wait(), Ok(None)));
        std::thread::sleep(Duration::from_millis(200));
    }
    for ch in children.iter_mut() {
        let _ = ch.kill();
        let _ = ch.wait();
    }
    children.clear();
    emptied
}

struct Record {
    state: String,
    start: String,
    ran: bool,
}

/// What the governor logs of a job it held because its run had ended by itself just before a
/// requeue.
const RUN_ENDED_HOLD: &str = "held by the governor: its run had ended by itself";

/// A job that completed more than one run, with what sacct, the governor and the user say of
/// it.
fn ran_twice_facts(
    id: u64,
    base: u64,
    n: u64,
    jobs: &BTreeMap<u64, (u64, Vec<Record>)>,
    log: &str,
    a: &Actions,
) -> String {
    let runs = jobs.get(&id).map_or_else(String::new, |(_, records)| {
        records
            .iter()
            .map(|r| format!("{} from {}", r.state, r.start))
            .collect::<Vec<_>>()
            .join(", ")
    });
    let governor: Vec<&str> = log
        .lines()
        .filter(|l| l.contains(&format!("job {id} ")))
        .collect();
    let user: Vec<&String> = [id, base]
        .iter()
        .filter_map(|j| a.touched.get(j))
        .flatten()
        .collect();
    format!("job {id} completed {n} runs; sacct: {runs}; governor: {governor:?}; user: {user:?}")
}

/// Compare each job's runs in sacct with what explains them, and the marks.
fn compare_runs(
    c: &Cluster,
    since: &str,
    a: &Actions,
    marks: &std::path::Path,
    queued: &[(u64, String)],
) -> Result<Ending, String> {
    let mut e = Ending::default();
    let Some(first) = a.ids.iter().min().copied() else {
        return Ok(e);
    };
    let fetch = || {
        c.ok(
            "sacct",
            &[
                "-a",
                "-D",
                "-X",
                "-P",
                "-n",
                "-S",
                since,
                "-E",
                "now",
                "-o",
                "JobIDRaw,JobID,State,Start,End,NodeList",
            ],
        )
    };
    // slurmdbd writes asynchronously: wait until no job of ours is still open there.
    // The queue is empty by now; a record still open after a minute is a runaway (slurmctld
    // no longer knows the job): reported, and compared as it stands.
    let waited = Instant::now();
    let text = loop {
        let text = fetch()?;
        let open: Vec<String> = text
            .lines()
            .filter(|l| {
                let f: Vec<&str> = l.split('|').collect();
                f.len() >= 3
                    && f[0].parse::<u64>().is_ok_and(|id| id >= first)
                    && matches!(f[2], "PENDING" | "RUNNING" | "SUSPENDED" | "COMPLETING")
            })
            .map(str::to_string)
            .collect();
        if open.is_empty() {
            break text;
        }
        if waited.elapsed() > MINUTE {
            e.sacct_open = open;
            break text;
        }
        std::thread::sleep(Duration::from_millis(500));
    };
    // Job id -> (the id the user named: array or heterogeneous leader, records).
    let mut jobs: BTreeMap<u64, (u64, Vec<Record>)> = BTreeMap::new();
    // Components of heterogeneous jobs (JobID `LEADER+OFFSET`): the governor acts on such a
    // job whole, through its leader, and names the leader (docs/design/heterogeneous-jobs.md).
    let mut het_components: BTreeSet<u64> = BTreeSet::new();
    for line in text.lines() {
        let f: Vec<&str> = line.split('|').collect();
        if f.len() < 6 {
            continue;
        }
        let Ok(id) = f[0].parse::<u64>() else {
            continue;
        };
        if id < first {
            continue;
        }
        let base = f[1]
            .split(['_', '+'])
            .next()
            .and_then(|b| b.parse::<u64>().ok())
            .unwrap_or(id);
        if f[1].contains('+') {
            het_components.insert(id);
        }
        // A RESIZING record closes the part of a run before its size changed (a user may
        // shrink a running job's node count); the run goes on in the next record: not a run of
        // its own.
        let ran = !matches!(f[3], "Unknown" | "None" | "")
            && f[5] != "None assigned"
            && !f[2].starts_with("RESIZING");
        let entry = jobs.entry(id).or_insert((base, Vec::new()));
        entry.1.push(Record {
            state: f[2].split(' ').next().unwrap_or("").to_string(),
            start: f[3].to_string(),
            ran,
        });
    }
    let log = c.governor_log();
    let names = |id: u64| log.contains(&format!("job {id} "));
    let governor_names =
        |id: u64, base: u64| names(id) || (het_components.contains(&id) && names(base));
    let user_requeued =
        |id: u64, base: u64| a.user_requeued.contains(&id) || a.user_requeued.contains(&base);
    e.jobs_in_sacct = jobs.len() as u64;
    for (id, (base, records)) in &mut jobs {
        records.sort_by(|x, y| x.start.cmp(&y.start));
        let runs: Vec<&Record> = records.iter().filter(|r| r.ran).collect();
        e.preempted_records += runs.iter().filter(|r| r.state == "PREEMPTED").count() as u64;
        e.runs += runs.len() as u64;
        if runs.len() < 2 {
            continue;
        }
        for r in &runs[..runs.len() - 1] {
            if r.state == "PREEMPTED" {
                e.extra_preempted += 1;
            } else if governor_names(*id, *base) {
                e.extra_governor += 1;
            } else if user_requeued(*id, *base) {
                e.extra_user += 1;
            } else {
                e.unexplained.push(format!(
                    "job {id} (submitted as {base}): runs {}",
                    runs.iter()
                        .map(|r| format!("{} from {}", r.state, r.start))
                        .collect::<Vec<_>>()
                        .join(", ")
                ));
            }
        }
    }
    let base_of = |id: u64| jobs.get(&id).map_or(id, |(b, _)| *b);
    let mut marked: BTreeMap<u64, u64> = BTreeMap::new();
    for l in std::fs::read_to_string(marks).unwrap_or_default().lines() {
        if let Ok(id) = l.trim().parse::<u64>() {
            *marked.entry(id).or_default() += 1;
        }
    }
    e.completed_runs = marked.values().sum();
    for (id, n) in &marked {
        if *n > 1 {
            let base = base_of(*id);
            let released_after_hold = log.contains(&format!("job {id} {RUN_ENDED_HOLD}"))
                && (a.user_released.contains(id) || a.user_released.contains(&base));
            if user_requeued(*id, base) || released_after_hold {
                e.ran_twice_user += 1;
            } else {
                e.ran_twice
                    .push(ran_twice_facts(*id, base, *n, &jobs, &log, a));
            }
        }
    }
    for (id, st) in queued {
        let base = base_of(*id);
        if !user_requeued(*id, base) {
            // The whole story, so that a rare failure can be understood from CI's output
            // alone: the runs in sacct, what the governor and the user did to it, and
            // slurmctld's lines about it.
            let n = marked.get(id).copied().unwrap_or(0);
            let (named, last) = (format!("JobId={id} "), format!("JobId={id}"));
            let ctld_log = c.slurmctld_log();
            let lines: Vec<&str> = ctld_log
                .lines()
                .filter(|l| l.contains(&named) || l.ends_with(&last))
                .collect();
            let ctld = &lines[lines.len().saturating_sub(20)..];
            e.queued_again.push(format!(
                "job {id} completed a run and is {st} again: {}; slurmctld: {ctld:?}",
                ran_twice_facts(*id, base, n, &jobs, &log, a)
            ));
        }
    }
    Ok(e)
}

fn report(
    params: &Params,
    a: &Actions,
    s: &Sampled,
    p: &Passes,
    e: &Ending,
    admin: &admin::Admin,
    total: Duration,
) -> TestResult {
    let refused: u64 = a.refusals.values().sum();
    let mut lines: Vec<(String, String)> = Vec::new();
    let mut put = |k: &str, v: String| lines.push((k.to_string(), v));
    put("seed", params.seed.to_string());
    put("duration_s", format!("{:.0}", total.as_secs_f64()));
    put("submissions", a.submissions.to_string());
    put("accepted", a.accepted.to_string());
    put("refused", refused.to_string());
    put("arrays", a.arrays.to_string());
    put("hetjobs", a.hetjobs.to_string());
    put("sallocs", a.sallocs.to_string());
    put("updates", a.updates.to_string());
    put("updates_accepted", a.updates_accepted.to_string());
    put("holds_releases", a.holds.to_string());
    put("user_requeues", a.requeues_accepted.to_string());
    put("cancels", a.cancels.to_string());
    put("queue_trims", a.queue_trims.to_string());
    put("root_jobs", a.root_jobs.to_string());
    put("cross_user_tries", a.cross_user_tries.to_string());
    put("samples", s.samples.to_string());
    put("late_samples", s.late.to_string());
    put("squeue_max_ms", s.squeue_max.as_millis().to_string());
    put("samples_with_borrowing", s.borrowing_samples.to_string());
    put("overshoot_samples", s.overshoot_samples.to_string());
    put(
        "overshoot_longest_ms",
        s.overshoot_longest.as_millis().to_string(),
    );
    for (i, what) in s.overshoot_examples.iter().enumerate() {
        eprintln!("a01: above a ceiling, briefly ({i}): {what}");
    }
    for (team, peak) in &s.peak {
        put(&format!("peak_gpus_{team}"), peak.to_string());
    }
    put("governor_publications", p.publications.to_string());
    put("max_pass_gap_ms", p.max_gap.as_millis().to_string());
    put("pass_gaps_over_1s", p.gaps_over_1s.to_string());
    // A failed pass publishes nothing: it shows as a gap above; one in a row is allowed.
    put("govern_failures", e.govern_failures.len().to_string());
    for (i, line) in e.govern_failures.iter().take(5).enumerate() {
        put(&format!("govern_failure_{i}"), line.replace('=', ":"));
    }
    put("jobs_in_sacct", e.jobs_in_sacct.to_string());
    put("sacct_open_after_end", e.sacct_open.len().to_string());
    for (i, line) in e.sacct_open.iter().take(5).enumerate() {
        put(&format!("sacct_open_{i}"), line.replace('=', ":"));
    }
    put("runs", e.runs.to_string());
    put("completed_runs", e.completed_runs.to_string());
    put("preempted_runs", e.preempted_records.to_string());
    put("governor_requeues", e.governor_requeues.to_string());
    put("extra_runs_preempted", e.extra_preempted.to_string());
    put("extra_runs_governor", e.extra_governor.to_string());
    put("extra_runs_user_requeue", e.extra_user.to_string());
    put("ran_twice_by_owner", e.ran_twice_user.to_string());
    put("admin_edits_valid", admin.valid.to_string());
    put("admin_edits_invalid", admin.invalid.to_string());
    for (kind, n) in &admin.edits {
        put(&format!("admin_edit_{kind}"), n.to_string());
    }
    put("admin_refusals_plugin", admin.refused_by_plugin.to_string());
    put("admin_refusals_daemon", admin.refused_by_daemon.to_string());
    put("metrics_floods", admin.floods.to_string());
    put("metrics_flood_failures", admin.flood_failures.to_string());
    // What must be zero.
    let must: Vec<(&str, u64, Vec<String>)> = vec![
        (
            "ceiling_violations",
            s.ceiling_violations,
            s.examples.clone(),
        ),
        (
            "outside_team_gpu_samples",
            s.outside_gpu,
            s.examples.clone(),
        ),
        (
            "jobs_ran_twice",
            e.ran_twice.len() as u64,
            e.ran_twice.clone(),
        ),
        (
            "queued_again",
            e.queued_again.len() as u64,
            e.queued_again.clone(),
        ),
        (
            "unexplained_extra_runs",
            e.unexplained.len() as u64,
            e.unexplained.clone(),
        ),
        ("slurmctld_restarts", s.slurmctld_restarts, vec![]),
        ("slurmctld_down_samples", s.slurmctld_down, vec![]),
        ("slurmctld_unanswered_samples", s.squeue_failures, vec![]),
        (
            "missed_passes",
            p.over.len() as u64,
            p.over.iter().filter(|x| !x.is_empty()).cloned().collect(),
        ),
        (
            "cross_user_accepted",
            a.cross_user_accepted.len() as u64,
            a.cross_user_accepted.clone(),
        ),
        (
            "invalid_edits_not_refused",
            admin
                .invalid
                .saturating_sub(admin.refused_by_plugin.min(admin.refused_by_daemon)),
            vec![format!(
                "{} invalid edits; refused (last good kept) by the plugin {}, by the daemon {}",
                admin.invalid, admin.refused_by_plugin, admin.refused_by_daemon
            )],
        ),
        (
            "jobs_stranded_by_a_hold",
            e.stranded.len() as u64,
            e.stranded.clone(),
        ),
        (
            "runs_lost_from_the_database",
            e.runs_lost.len() as u64,
            e.runs_lost.clone(),
        ),
    ];
    for (k, v, _) in &must {
        put(k, v.to_string());
    }
    for (reason, n) in &a.refusals {
        put(&format!("refusal: {reason}"), n.to_string());
    }
    for (reason, n) in &a.update_refusals {
        put(&format!("update refusal: {reason}"), n.to_string());
    }
    for (reason, n) in &a.root_refused {
        put(&format!("root refusal: {reason}"), n.to_string());
    }
    let text: String = lines.iter().map(|(k, v)| format!("{k}={v}\n")).collect();
    for (reason, example) in &a.examples {
        eprintln!("a01: refused ({reason}): {example}");
    }
    eprintln!("a01 figures:\n{text}");
    if let Some(path) = &params.report {
        std::fs::write(path, &text)
            .map_err(|e| format!("ADVERSARY_REPORT {}: {e}", path.display()))?;
    }
    let failed: Vec<String> = must
        .iter()
        .filter(|(_, v, _)| *v > 0)
        .map(|(k, v, ex)| {
            let shown: Vec<&String> = ex.iter().take(10).collect();
            format!(
                "{k} = {v}{}",
                shown
                    .iter()
                    .map(|x| format!("\n    {x}"))
                    .collect::<String>()
            )
        })
        .collect();
    if a.accepted == 0 || e.completed_runs == 0 {
        return Err(format!(
            "the adversary got nothing to run (accepted {}, completed runs {}): the test tested nothing (seed {})",
            a.accepted, e.completed_runs, params.seed
        ));
    }
    if failed.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "ADVERSARY_SEED={}: what must be zero is not:\n{}",
            params.seed,
            failed.join("\n")
        ))
    }
}
