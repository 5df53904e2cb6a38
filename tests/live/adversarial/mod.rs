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
mod adversary;
mod ending;
use adversary::adversary;
use ending::{cleanup, compare_runs, queued_again_candidates, report};

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
