//! The governor: keeps Slurm's inputs (job priorities, team GPU limits) matching DESIGN §4 and
//! publishes the state the plugin reads. Slurm's own scheduler and preempt/qos then make every
//! start and preemption decision inside its scheduling cycle; see docs/design/governance.md.
//!
//! One pass: squeue + sinfo -> `teamshare_policy::governance::plan` -> scontrol/sacctmgr for what
//! changed -> state file (written to a temporary file and renamed, so the plugin never reads a
//! half-written one). If the governor stops, Slurm keeps the last priorities and limits (safe:
//! nothing can exceed the ceilings) and the plugin applies `on_stale_state` once the state ages.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use teamshare_config::Config;
use teamshare_policy::governance::{self, ClusterJob, GovernInput, Phase, Plan, PublishedState};
use teamshare_policy::gres::gpu_count;
use teamshare_policy::submit::{gpus_requested, GpuAsk};

use crate::capacity;
use crate::model::fairshare;
use crate::model::usage::Run;
use crate::period::{self, UnixSeconds};
use crate::slurm_cli::{slurm_name, SlurmCommand, SlurmCommandError};
use crate::store::Store;

const SQUEUE_TIMEOUT: Duration = Duration::from_secs(20);
const UPDATE_TIMEOUT: Duration = Duration::from_secs(20);
/// Fair-share factors move slowly: recompute them from the database this often.
const FAIRSHARE_REFRESH: Duration = Duration::from_secs(30);

#[derive(Debug, thiserror::Error)]
pub enum GovernError {
    #[error(transparent)]
    Slurm(#[from] SlurmCommandError),
    #[error("capacity: {0}")]
    Capacity(#[from] capacity::CapacityError),
    #[error("squeue line {line}: {reason}: {text:?}")]
    Squeue {
        line: usize,
        reason: String,
        text: String,
    },
    #[error("cannot write the state file {path}: {source}")]
    StateFile {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// squeue for the governed partitions: every field the plan needs, `|`-separated.
pub fn squeue_command(partitions: &[String]) -> SlurmCommand {
    SlurmCommand::new(
        "squeue",
        vec![
            "-h".into(),
            "-a".into(),
            "-p".into(),
            partitions.join(","),
            "-t".into(),
            "PD,R,CG,S".into(),
            "-O".into(),
            "JobID:|,Account:|,State:|,PriorityLong:|,SubmitTime:|,StartTime:|,tres-alloc:|,tres-per-job:|,tres-per-node:|,tres-per-task:|,NumNodes:|,NumTasks:|,Reason:|".into(),
        ],
        SQUEUE_TIMEOUT,
    )
}

fn na(s: &str) -> Option<String> {
    let s = s.trim();
    (!s.is_empty() && s != "N/A" && s != "(null)").then(|| s.to_string())
}

/// Read squeue's output (times are UTC: Slurm clients run with TZ=UTC).
pub fn parse_squeue(text: &str) -> Result<Vec<ClusterJob>, GovernError> {
    let mut jobs = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let bad = |reason: &str| GovernError::Squeue {
            line: i + 1,
            reason: reason.to_string(),
            text: line.to_string(),
        };
        let f: Vec<&str> = line.split('|').collect();
        if f.len() < 13 {
            return Err(bad("expected 13 fields"));
        }
        // Array jobs print 12_3 for a task and 12_[4-9] for pending tasks; both are one job
        // record in Slurm, and updates address it by its id.
        let id_text = f[0].trim();
        let id: u64 = id_text
            .split(['_', '+'])
            .next()
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| bad("bad job id"))?;
        let phase = match f[2].trim() {
            "PENDING" => Phase::Pending,
            // Completing and suspended jobs still hold their GPUs.
            "RUNNING" | "COMPLETING" | "SUSPENDED" => Phase::Running,
            _ => continue,
        };
        let priority: u32 = f[3].trim().parse().map_err(|_| bad("bad priority"))?;
        let submit = parse_utc(f[4]).ok_or_else(|| bad("bad submit time"))?;
        let start = parse_utc(f[5]);
        let gpus = if phase == Phase::Running {
            gpu_count(f[6]).map_err(|e| bad(&e.to_string()))?.total
        } else {
            let ask = GpuAsk {
                tres_per_job: na(f[7]),
                tres_per_node: na(f[8]),
                tres_per_task: na(f[9]),
                tres_per_socket: None,
                min_nodes: f[10].trim().parse().ok(),
                num_tasks: f[11].trim().parse().ok(),
                ntasks_per_node: None,
                sockets_per_node: None,
            };
            gpus_requested(&ask).map_err(|e| bad(&e.to_string()))?.total
        };
        // Pending array tasks share one record: counted once (the scheduler starts one at a
        // time), which is what the reclaim arithmetic needs.
        if jobs
            .iter()
            .any(|j: &ClusterJob| j.id == id && phase == Phase::Pending)
        {
            continue;
        }
        jobs.push(ClusterJob {
            id,
            team: f[1].trim().to_string(),
            phase,
            gpus: u32::try_from(gpus).unwrap_or(u32::MAX),
            priority,
            submit,
            start: if phase == Phase::Running { start } else { None },
            eligible: phase == Phase::Running || eligible_reason(f[12]),
            // squeue's StartTime of a job waiting for its begin time is that begin time.
            parked: phase == Phase::Pending
                && f[12].trim() == "BeginTime"
                && start.is_some_and(|b| b - period::now() >= governance::PARKED_AFTER_SECS),
        });
    }
    Ok(jobs)
}

/// Whether a pending job waits only for resources or limits (so GPUs given to its team would
/// start it), not for a time, a dependency or a hold.
fn eligible_reason(reason: &str) -> bool {
    let r = reason.trim();
    !(r == "BeginTime"
        || r.starts_with("Dependency")
        || r.starts_with("JobHeld")
        || r == "DependencyNeverSatisfied"
        || r == "Reservation")
}

fn parse_utc(text: &str) -> Option<UnixSeconds> {
    let t = text.trim();
    if t.is_empty() || t == "N/A" || t == "Unknown" || t == "None" {
        return None;
    }
    period::parse_local_datetime(t, &chrono::Utc).ok()
}

/// What one pass changed, for the log.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct PassReport {
    pub jobs: usize,
    pub priority_updates: usize,
    pub limit_updates: Vec<(String, u32)>,
    pub displaced: Vec<u64>,
    /// Borrowed jobs the governor requeued itself for in-quota jobs Slurm left waiting.
    pub reclaimed: Vec<u64>,
    pub capacity: u32,
}

pub struct Governor {
    config: Config,
    database: Option<PathBuf>,
    /// Limits as last set, so sacctmgr runs only on change (None: not yet known).
    limits: BTreeMap<String, u32>,
    fairshare: BTreeMap<String, f64>,
    fairshare_at: Option<Instant>,
}

impl Governor {
    pub fn new(config: Config, database: Option<PathBuf>) -> Governor {
        Governor {
            config,
            database,
            limits: BTreeMap::new(),
            fairshare: BTreeMap::new(),
            fairshare_at: None,
        }
    }

    pub fn state_file(&self) -> &Path {
        &self.config.accountd.state_file
    }

    /// Fair-share factors from the usage accountd has ingested (decayed by the half-life).
    fn refresh_fairshare(&mut self, now: UnixSeconds) {
        if self
            .fairshare_at
            .is_some_and(|t| t.elapsed() < FAIRSHARE_REFRESH)
        {
            return;
        }
        self.fairshare_at = Some(Instant::now());
        let Some(db) = &self.database else { return };
        if !db.exists() {
            return;
        }
        let half_life = self.config.accountd.fairshare_half_life;
        // Usage older than ten half-lives weighs under 0.1 %.
        let horizon = i64::try_from(half_life.as_secs().saturating_mul(10)).unwrap_or(i64::MAX);
        let runs = match Store::open(db).and_then(|s| {
            s.runs_overlapping(
                &slurm_name(&self.config.cluster.name),
                now.saturating_sub(horizon),
                now,
            )
        }) {
            Ok(r) => r,
            Err(e) => {
                eprintln!("accountd govern: fair-share not refreshed: {e}");
                return;
            }
        };
        let runs: Vec<Run> = runs
            .into_iter()
            .map(|r| Run {
                team: r.account,
                gpus: u32::try_from(r.gpus).unwrap_or(u32::MAX),
                start: r.start,
                end: r.end.unwrap_or(now).min(now),
            })
            .collect();
        let usage = fairshare::decayed_usage(&runs, now, half_life);
        let weights = fairshare::weights_from_config(&self.config);
        self.fairshare =
            fairshare::factors(&weights, &usage, self.config.accountd.fairshare_dampening);
    }

    /// One pass: read Slurm, plan, apply, publish.
    pub fn pass(&mut self) -> Result<PassReport, GovernError> {
        let now = period::now();
        self.refresh_fairshare(now);
        let cap = capacity::measure(&self.config.cluster.partitions)?;
        let out = squeue_command(&self.config.cluster.partitions).run()?;
        let jobs: Vec<ClusterJob> = parse_squeue(&out.stdout)?
            .into_iter()
            .filter(|j| self.config.team(&j.team).is_some())
            .collect();
        let plan = governance::plan(&GovernInput {
            config: &self.config,
            capacity: cap.total,
            jobs: &jobs,
            fairshare: &self.fairshare,
            now,
        });
        let mut report = PassReport {
            jobs: jobs.len(),
            capacity: cap.total,
            ..PassReport::default()
        };
        // Limits first: a tighter ceiling must hold before priorities let anything start.
        self.apply_limits(&plan, &mut report)?;
        report.priority_updates = apply_priorities(&plan, &jobs)?;
        self.displace(&plan, &mut report)?;
        park_and_release(&plan)?;
        write_state(self.state_file(), &plan.state)?;
        Ok(report)
    }

    fn apply_limits(&mut self, plan: &Plan, report: &mut PassReport) -> Result<(), GovernError> {
        let cluster = slurm_name(&self.config.cluster.name);
        for (team, limit) in &plan.gpu_limits {
            if self.limits.get(team) == Some(limit) {
                continue;
            }
            SlurmCommand::new(
                "sacctmgr",
                vec![
                    "-i".into(),
                    "modify".into(),
                    "account".into(),
                    "where".into(),
                    format!("name={team}"),
                    format!("cluster={cluster}"),
                    "set".into(),
                    format!("GrpTRES=gres/gpu={limit}"),
                ],
                UPDATE_TIMEOUT,
            )
            .run_unchecked()?;
            self.limits.insert(team.clone(), *limit);
            report.limit_updates.push((team.clone(), *limit));
        }
        Ok(())
    }

    fn displace(&self, plan: &Plan, report: &mut PassReport) -> Result<(), GovernError> {
        for (ids, done) in [
            (&plan.displace, &mut report.displaced),
            (&plan.reclaim, &mut report.reclaimed),
        ] {
            for id in ids {
                let cmd = match self.config.governance.reclaim_mode {
                    teamshare_config::ReclaimMode::Requeue => SlurmCommand::new(
                        "scontrol",
                        vec!["requeue".into(), id.to_string()],
                        UPDATE_TIMEOUT,
                    ),
                    teamshare_config::ReclaimMode::Cancel => {
                        SlurmCommand::new("scancel", vec![id.to_string()], UPDATE_TIMEOUT)
                    }
                };
                // A job that ended meanwhile is not an error.
                let _ = cmd.run_unchecked()?;
                done.push(*id);
            }
        }
        Ok(())
    }
}

/// Set the priority of every job whose priority differs from the plan: one scontrol call per
/// distinct priority, for all its jobs.
fn apply_priorities(plan: &Plan, jobs: &[ClusterJob]) -> Result<usize, GovernError> {
    let mut by_priority: BTreeMap<u32, Vec<u64>> = BTreeMap::new();
    for j in jobs {
        if j.priority == 0 {
            continue; // held: releasing is the user's or the administrator's call
        }
        if let Some(&want) = plan.priorities.get(&j.id) {
            if want != j.priority {
                by_priority.entry(want).or_default().push(j.id);
            }
        }
    }
    let mut n = 0;
    for (priority, ids) in by_priority {
        let list: Vec<String> = ids.iter().map(u64::to_string).collect();
        n += ids.len();
        // Jobs that ended since squeue make scontrol complain; the others are still updated.
        let _ = SlurmCommand::new(
            "scontrol",
            vec![
                "update".into(),
                format!("jobid={}", list.join(",")),
                format!("priority={priority}"),
            ],
            UPDATE_TIMEOUT,
        )
        .run_unchecked()?;
    }
    Ok(n)
}

/// Park non-preemptible jobs that may not borrow (begin time far ahead) and release those that
/// now fit their team's quota.
fn park_and_release(plan: &Plan) -> Result<(), GovernError> {
    let batches = [
        (
            &plan.park,
            format!("StartTime=now+{}", governance::PARK_SECS),
        ),
        (&plan.release, "StartTime=now".to_string()),
    ];
    for (ids, start) in batches {
        if ids.is_empty() {
            continue;
        }
        let list: Vec<String> = ids.iter().map(u64::to_string).collect();
        let _ = SlurmCommand::new(
            "scontrol",
            vec!["update".into(), format!("jobid={}", list.join(",")), start],
            UPDATE_TIMEOUT,
        )
        .run_unchecked()?;
    }
    Ok(())
}

/// Publish atomically: write a temporary file beside it, then rename over it.
pub fn write_state(path: &Path, state: &PublishedState) -> Result<(), GovernError> {
    let err = |source| GovernError::StateFile {
        path: path.to_path_buf(),
        source,
    };
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(err)?;
    }
    let tmp = path.with_extension("json.tmp");
    std::fs::write(&tmp, state.to_json()).map_err(err)?;
    std::fs::rename(&tmp, path).map_err(err)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const SQUEUE: &str = "\
6|training|RUNNING|640000640|2026-11-30T03:13:02|2026-11-30T03:15:04|cpu=1,node=1,billing=1,gres/gpu=1|N/A|gres:gpu:1|N/A|1|1|None|
9|agents|PENDING|64000|2026-11-30T03:16:00|N/A|N/A|gres:gpu:2|N/A|N/A|1|1|Priority|
10|research|PENDING|64000|2026-11-30T03:16:01|2026-11-30T03:20:00|N/A|N/A|gres/gpu:1|N/A|2|2|BeginTime|
11_[1-3]|research|PENDING|64000|2026-11-30T03:16:02|N/A|N/A|N/A|gres:gpu:1|N/A|1|1|Resources|
11_[4-5]|research|PENDING|64000|2026-11-30T03:16:02|N/A|N/A|N/A|gres:gpu:1|N/A|1|1|Resources|
12|agents|COMPLETED|64000|2026-11-30T03:16:02|N/A|N/A|N/A|gres:gpu:1|N/A|1|1|None|
";

    #[test]
    fn squeue_lines_become_jobs_with_their_gpus() {
        let jobs = parse_squeue(SQUEUE).unwrap();
        let ids: Vec<u64> = jobs.iter().map(|j| j.id).collect();
        assert_eq!(ids, [6, 9, 10, 11]);
        assert_eq!(jobs[0].phase, Phase::Running);
        assert_eq!(jobs[0].start, Some(1_796_008_504));
        assert_eq!(jobs[1].gpus, 2);
        // Per-node request on 2 nodes; a pending job's expected start is not a start.
        assert_eq!((jobs[2].gpus, jobs[2].start), (2, None));
        // Waiting for its begin time: GPUs given to research would not start it.
        assert!(!jobs[2].eligible && jobs[1].eligible && jobs[0].eligible);
    }

    #[test]
    fn malformed_squeue_is_an_error_naming_the_line() {
        let e =
            parse_squeue("6|training|RUNNING|x|2026-11-30T03:13:02|N/A|N/A|N/A|N/A|N/A|1|1|None|")
                .unwrap_err();
        assert!(e.to_string().contains("line 1: bad priority"), "{e}");
        assert!(parse_squeue("1|2|3").is_err());
    }

    #[test]
    fn state_is_written_whole() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub/state.json");
        let state = PublishedState {
            version: governance::STATE_VERSION,
            generated_at: 5,
            capacity: 8,
            free_gpus: 8,
            pending_in_quota_gpus: 0,
            teams: BTreeMap::new(),
            victims: vec![],
        };
        write_state(&path, &state).unwrap();
        let back = PublishedState::from_json(&std::fs::read_to_string(&path).unwrap()).unwrap();
        assert_eq!(back, state);
        assert!(!path.with_extension("json.tmp").exists());
    }
}
