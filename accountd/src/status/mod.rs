//! `accountd status`: what every team holds and may hold now, what waits and why, and what is
//! lent, live from Slurm and the governor's published state.
//!
//! Pure: [`status`] builds a [`Status`] from the configuration, the state file as read, Slurm's
//! jobs and capacity and the instant; [`render_table`] prints it, and `--format json` is its
//! serde form. The command line does the reading ([`read_state`], and the governor's
//! [`crate::governor::SlurmReader`]).
//!
//! The figures, per team T (and per GPU type k where quotas are typed), at this instant:
//! - `quota`: Q_T;
//! - `in_use`: U_T, the GPUs of T's running jobs as Slurm shows them now; `in_quota` is
//!   min(U_T, Q_T) and `borrowed` max(0, U_T - Q_T) (DESIGN §4);
//! - `may_hold`: the GPU limit the governor gave T in its last pass (its `GrpTRES` in Slurm):
//!   the quota, or what T holds beyond it, plus the share of lendable idle capacity T was given;
//! - `lent`: the part of other teams' borrowed GPUs that sits on T's idle quota, attributed as
//!   the accounting model does (DESIGN §5, [`crate::model::split_usage`] over this one second),
//!   so that `accountd report teams` integrates the same figure over time; the `(pool)` row
//!   lends the unallocated capacity (C - ΣQ). Lent is pro rata, hence possibly fractional;
//! - `waiting_jobs` / `waiting_gpus`: T's pending jobs (an array's pending record counts each
//!   task that may start), grouped by why they wait ([`WaitReason`]).
//!
//! The state's age is shown, and a state the plugin would not act on (older than
//! `state_max_age`, from the future, or from another teamshare.toml: the plugin's own
//! judgement, [`teamshare_policy::inputs::judge_state`]) is flagged; a missing or unreadable
//! state file is said so, and the figures that need it are left out.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::Serialize;
use teamshare_config::{Config, Team};
use teamshare_policy::governance::{self, ClusterJob, Phase, PublishedState, TeamState};
use teamshare_policy::inputs::{self, ReadError, Staleness};

use crate::capacity::Capacity;
use crate::model::{split_usage, Run, TeamQuota, POOL};
use crate::period::{format_local, Period, UnixSeconds};

mod family;
pub mod job;
pub mod user;

/// Everything `accountd status` shows.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Status {
    /// Slurm's ClusterName (`[cluster] name`).
    pub cluster: String,
    /// When Slurm was read (unix seconds).
    pub at: UnixSeconds,
    /// The governed capacity C: GPUs of usable nodes in the governed partitions.
    pub capacity: u32,
    /// GPUs held by running jobs in the governed partitions, every account's.
    pub in_use: u32,
    /// Capacity not in use (never below 0: jobs may still hold GPUs of a drained node).
    pub free: u32,
    /// The same per GPU type (a typed configuration).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub by_type: BTreeMap<String, Gpus>,
    pub state: StateStatus,
    /// In name order; one team with `--team`.
    pub teams: Vec<TeamStatus>,
    /// The unallocated capacity (C - ΣQ) as a lender: the `(pool)` row.
    pub pool: PoolLender,
    /// Accounts that are not teams and hold or ask for GPUs in the governed partitions (the
    /// governor holds them).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub other_accounts: Vec<OtherAccount>,
    /// GPUs in use among the jobs this reader could see, where the governor's current state
    /// shows more (Slurm's `PrivateData=jobs` hides other users' jobs): the figures in use
    /// above are then the state's, cluster-wide (issue 25, finding 12).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub partial_view: Option<u32>,
}

/// Capacity, GPUs in use and free GPUs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Gpus {
    pub capacity: u32,
    pub in_use: u32,
    pub free: u32,
}

/// The governor's published state, as `status` found it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StateStatus {
    pub file: PathBuf,
    /// `generated_at` of the state; `None` when it could not be read.
    pub published_at: Option<UnixSeconds>,
    pub age_secs: Option<i64>,
    /// `[governance] state_max_age`: older counts as stale.
    pub max_age_secs: u64,
    /// Whether the plugin would act on it now.
    pub current: bool,
    /// Why it is not current (`None` when it is).
    pub problem: Option<String>,
}

/// One team's figures; `by_type` carries them per GPU type in a typed configuration.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TeamStatus {
    pub team: String,
    /// B_T in all; `None`: no limit.
    pub borrow_limit: Option<u32>,
    #[serde(flatten)]
    pub figures: Figures,
    /// Why its jobs wait, the most jobs first.
    pub waiting_reasons: Vec<WaitReason>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub by_type: Vec<TypeStatus>,
}

/// A team's figures of one GPU type.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TypeStatus {
    pub gpu_type: String,
    #[serde(flatten)]
    pub figures: Figures,
}

/// The figures of a team (or of one of its GPU types); see the module's documentation.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Figures {
    pub quota: u32,
    pub in_use: u32,
    pub in_quota: u32,
    pub borrowed: u32,
    /// `None` when no state could be read (or the state does not know the team yet).
    pub may_hold: Option<u32>,
    pub lent: f64,
    pub waiting_jobs: u32,
    pub waiting_gpus: u32,
}

/// Pending jobs that wait for one reason.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct WaitReason {
    /// `teamshare: ...` where teamshare's rules hold the job, `in quota (Slurm: R)` where it
    /// fits its quota and Slurm has yet to start it, else `Slurm: R` (R: Slurm's reason).
    pub reason: String,
    pub jobs: u32,
    pub gpus: u32,
}

/// The `(pool)` row.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PoolLender {
    /// C - ΣQ (0 when the quotas fill or exceed the capacity).
    pub unallocated: u32,
    pub lent: f64,
}

/// An account outside every team with GPUs in the governed partitions.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct OtherAccount {
    pub account: String,
    pub in_use: u32,
    pub waiting_jobs: u32,
    pub waiting_gpus: u32,
}

/// What [`status`] is built from.
pub struct StatusInput<'a> {
    pub config: &'a Config,
    /// Where the state was read from ([`read_state`]), for the output.
    pub state_file: &'a Path,
    /// The state, or why there is none.
    pub state: Result<&'a PublishedState, String>,
    pub capacity: &'a Capacity,
    /// Slurm's jobs of the governed partitions ([`crate::governor::read_records`]).
    pub jobs: &'a [ClusterJob],
    /// Slurm's reason for each pending job ([`crate::governor::pending_reasons`]).
    pub reasons: &'a BTreeMap<u64, String>,
    pub now: UnixSeconds,
    /// Slurm may hide other users' jobs from this reader (`PrivateData=jobs`; not for root):
    /// the governor's current state then fills in the cluster-wide figures.
    pub view_may_be_partial: bool,
}

/// Read the governor's state file as the plugin does (a regular file, bounded, the version
/// the plugin reads); the error says why there is none, in a user's words.
pub fn read_state(path: &Path) -> Result<PublishedState, String> {
    let text =
        match inputs::read_bounded(path, inputs::STATE_LIMIT) {
            Ok(text) => text,
            Err(ReadError::Missing) => return Err(
                "not published: no such file (the governor, `accountd run`, writes it every pass)"
                    .into(),
            ),
            Err(e) => return Err(format!("cannot be read: {e}")),
        };
    PublishedState::from_json(&text)
}

/// The status at `input.now`, for every team, or for `team` alone (`None` when the
/// configuration has no such team).
pub fn status(input: &StatusInput<'_>, team: Option<&str>) -> Option<Status> {
    // A team counting a GPU family in GPU-equivalents is shown per type as the governor's
    // pass splits it.
    let split = family::split_config(input);
    let split_input = split
        .as_ref()
        .map(|config| family::with_config(input, config));
    let input = split_input.as_ref().unwrap_or(input);
    let config = input.config;
    if let Some(name) = team {
        config.team(name)?;
    }
    let typed = config.is_typed();
    let state = input.state.as_ref().ok().copied();
    let jobs = JobsByPool::new(input, typed);

    let mut teams: Vec<&Team> = config
        .teams
        .iter()
        .filter(|t| team.is_none_or(|name| t.name == name))
        .collect();
    teams.sort_by(|a, b| a.name.cmp(&b.name));

    // Lent, per pool: the model's split of this one second.
    let lent = lent_now(input, &jobs, typed);
    let rows = teams
        .iter()
        .map(|t| team_status(input, t, &jobs, state, &lent, typed))
        .collect();

    let in_use = jobs.running_total();
    let by_type = if typed {
        gpus_by_type(input, &jobs)
    } else {
        BTreeMap::new()
    };

    let other_accounts = other_accounts(input);

    let state_status = state_status(input);
    let mut status = Status {
        cluster: config.cluster.name.clone(),
        at: input.now,
        capacity: input.capacity.total,
        in_use,
        free: input.capacity.total.saturating_sub(in_use),
        by_type,
        state: state_status.clone(),
        teams: rows,
        pool: PoolLender {
            unallocated: input.capacity.total.saturating_sub(config.total_quota()),
            lent: lent
                .values()
                .map(|m| m.get(POOL).copied().unwrap_or(0.0))
                .sum(),
        },
        other_accounts,
        partial_view: None,
    };
    if let Some(state) = state.filter(|_| state_status.current && input.view_may_be_partial) {
        fill_in_from_state(&mut status, state);
    }
    Some(status)
}

/// A typed configuration's GPUs per type: every governed type and every type with capacity, by
/// name.
fn gpus_by_type(input: &StatusInput<'_>, jobs: &JobsByPool<'_>) -> BTreeMap<String, Gpus> {
    let mut types: Vec<&str> = input.config.governed_types().into_iter().collect();
    types.extend(input.capacity.by_type.keys().map(String::as_str));
    types.sort_unstable();
    types.dedup();
    types
        .into_iter()
        .map(|k| {
            let capacity = input.capacity.by_type.get(k).copied().unwrap_or(0);
            let used = jobs.running_of_type(k);
            (
                k.to_string(),
                Gpus {
                    capacity,
                    in_use: used,
                    free: capacity.saturating_sub(used),
                },
            )
        })
        .collect()
}

/// The accounts that are not teams of the configuration, by name, those with GPUs in use or
/// waiting only.
fn other_accounts(input: &StatusInput<'_>) -> Vec<OtherAccount> {
    let config = input.config;
    let mut other_accounts: BTreeMap<&str, OtherAccount> = BTreeMap::new();
    for j in input.jobs.iter().filter(|j| config.team(&j.team).is_none()) {
        let row = other_accounts
            .entry(j.team.as_str())
            .or_insert_with(|| OtherAccount {
                account: j.team.clone(),
                in_use: 0,
                waiting_jobs: 0,
                waiting_gpus: 0,
            });
        match j.phase {
            Phase::Running => row.in_use = row.in_use.saturating_add(j.gpus),
            Phase::Pending => {
                row.waiting_jobs = row.waiting_jobs.saturating_add(j.tasks.max(1));
                row.waiting_gpus = row.waiting_gpus.saturating_add(pending_gpus(j));
            }
        }
    }
    other_accounts
        .into_values()
        .filter(|a| a.in_use > 0 || a.waiting_gpus > 0)
        .collect()
}

/// Where the governor's current state shows more GPUs in use than the jobs this reader could
/// see (`PrivateData=jobs`: a user sees only their own), take its cluster-wide figures: the
/// GPUs in use and free, and each team's in use, in quota and borrowed (per type in a typed
/// configuration). Said in [`Status::partial_view`].
fn fill_in_from_state(s: &mut Status, state: &PublishedState) {
    let cluster_in_use = state.capacity.saturating_sub(state.free_gpus);
    let teams_in_use = |teams: &BTreeMap<String, TeamState>| -> u32 {
        teams.values().map(|t| t.running_gpus).sum()
    };
    let seen = s.in_use;
    let hidden = cluster_in_use > seen
        || s.teams.iter().any(|t| {
            state
                .teams
                .get(&t.team)
                .is_some_and(|ts| ts.running_gpus > t.figures.in_use)
        });
    if !hidden {
        return;
    }
    s.partial_view = Some(seen);
    s.in_use = cluster_in_use.max(seen).max(teams_in_use(&state.teams));
    s.free = s.capacity.saturating_sub(s.in_use);
    for (k, g) in s.by_type.iter_mut() {
        if let Some(p) = state.pools.get(k) {
            g.in_use = g.in_use.max(p.capacity.saturating_sub(p.free_gpus));
            g.free = g.capacity.saturating_sub(g.in_use);
        }
    }
    let raise = |f: &mut Figures, running: Option<u32>| {
        if let Some(r) = running.filter(|r| *r > f.in_use) {
            f.in_use = r;
            f.in_quota = r.min(f.quota);
            f.borrowed = r.saturating_sub(f.quota);
        }
    };
    for t in &mut s.teams {
        raise(
            &mut t.figures,
            state.teams.get(&t.team).map(|ts| ts.running_gpus),
        );
        for ty in &mut t.by_type {
            let running = state
                .pools
                .get(&ty.gpu_type)
                .and_then(|p| p.teams.get(&t.team))
                .map(|ts| ts.running_gpus);
            raise(&mut ty.figures, running);
        }
    }
}

/// The key of the figures of a whole untyped configuration.
const ALL: &str = "";

/// GPUs of a pending record: each task that may start asks for its `gpus` (an unreadable
/// request counts none: its figure is not known).
fn pending_gpus(j: &ClusterJob) -> u32 {
    if j.gpus == governance::UNREADABLE_GPUS {
        0
    } else {
        j.gpus.saturating_mul(j.tasks.max(1))
    }
}

/// The jobs sorted into pools: one pool ([`ALL`]) in an untyped configuration, one per GPU
/// type in a typed one, where a job belongs to the type it names, or (running) to its node's
/// one type, as the governor counts it. Running jobs of no known type count in the team's
/// totals only (as borrowed: they hold no type's quota).
struct JobsByPool<'a> {
    /// Pool -> running jobs.
    running: BTreeMap<String, Vec<&'a ClusterJob>>,
    /// Running jobs of no known type (typed configurations).
    untyped_running: Vec<&'a ClusterJob>,
    /// Pending jobs of teams, with their pool (`None`: no type in a typed configuration).
    pending: Vec<(&'a ClusterJob, Option<String>)>,
}

impl<'a> JobsByPool<'a> {
    fn new(input: &StatusInput<'a>, typed: bool) -> JobsByPool<'a> {
        let node_type = |node: &str| -> Option<String> {
            let mut kinds = input
                .capacity
                .per_node_types
                .get(node)?
                .iter()
                .filter(|(_, n)| **n > 0);
            let (k, _) = kinds.next()?;
            kinds.next().is_none().then(|| k.clone())
        };
        let mut by = JobsByPool {
            running: BTreeMap::new(),
            untyped_running: Vec::new(),
            pending: Vec::new(),
        };
        for j in input.jobs {
            let pool = if typed {
                j.gpu_type.clone().or_else(|| {
                    (j.phase == Phase::Running)
                        .then(|| j.nodes.first().and_then(|n| node_type(n)))
                        .flatten()
                })
            } else {
                Some(ALL.to_string())
            };
            match (j.phase, pool) {
                (Phase::Running, Some(p)) => by.running.entry(p).or_default().push(j),
                (Phase::Running, None) => by.untyped_running.push(j),
                (Phase::Pending, p) => by.pending.push((j, p)),
            }
        }
        by
    }

    fn running_total(&self) -> u32 {
        self.running
            .values()
            .flatten()
            .chain(&self.untyped_running)
            .fold(0u32, |s, j| s.saturating_add(j.gpus))
    }

    fn running_of_type(&self, k: &str) -> u32 {
        self.running
            .get(k)
            .into_iter()
            .flatten()
            .fold(0u32, |s, j| s.saturating_add(j.gpus))
    }

    /// U_{T,k} (k = [`ALL`]: U_T).
    fn used(&self, team: &str, pool: &str) -> u32 {
        self.running
            .get(pool)
            .into_iter()
            .flatten()
            .filter(|j| j.team == team)
            .fold(0u32, |s, j| s.saturating_add(j.gpus))
    }

    fn untyped_used(&self, team: &str) -> u32 {
        self.untyped_running
            .iter()
            .filter(|j| j.team == team)
            .fold(0u32, |s, j| s.saturating_add(j.gpus))
    }
}

/// Pool -> row (team, other account or [`POOL`]) -> GPUs lent now.
type Lent = BTreeMap<String, BTreeMap<String, f64>>;

fn lent_now(input: &StatusInput<'_>, jobs: &JobsByPool<'_>, typed: bool) -> Lent {
    let second = Period {
        since: input.now,
        until: input.now.saturating_add(1),
    };
    let pools: Vec<(String, Vec<TeamQuota>, u32)> = if typed {
        let mut types: Vec<String> = input
            .config
            .governed_types()
            .into_iter()
            .map(str::to_string)
            .collect();
        types.extend(jobs.running.keys().cloned());
        types.sort_unstable();
        types.dedup();
        types
            .into_iter()
            .map(|k| {
                let quotas = TeamQuota::of_type_from_config(input.config, &k);
                let capacity = input.capacity.by_type.get(&k).copied().unwrap_or(0);
                (k, quotas, capacity)
            })
            .collect()
    } else {
        vec![(
            ALL.to_string(),
            TeamQuota::all_from_config(input.config),
            input.capacity.total,
        )]
    };
    pools
        .into_iter()
        .map(|(k, quotas, capacity)| {
            let runs: Vec<Run> = jobs
                .running
                .get(&k)
                .into_iter()
                .flatten()
                .map(|j| Run {
                    team: Arc::from(j.team.as_str()),
                    gpus: j.gpus,
                    start: second.since,
                    end: second.until,
                })
                .collect();
            let split = split_usage(&runs, &quotas, &[(second.since, capacity)], second);
            let lent = split
                .rows
                .into_iter()
                .map(|row| (row.team, row.lent))
                .collect();
            (k, lent)
        })
        .collect()
}

/// What the classification of a waiting job needs of its team in its pool.
struct PoolFigures {
    quota: u32,
    used: u32,
    /// Q + B where a borrow limit bounds this pool (for a limit over all types, what the team
    /// borrows of the other types is taken off).
    ceiling: Option<u32>,
    /// The governor's limit (`may_hold`).
    limit: Option<u32>,
}

fn team_status(
    input: &StatusInput<'_>,
    team: &Team,
    jobs: &JobsByPool<'_>,
    state: Option<&PublishedState>,
    lent: &Lent,
    typed: bool,
) -> TeamStatus {
    let name = team.name.as_str();
    let pools = pool_figures(input, team, jobs, state, typed);
    let (waiting, waiting_reasons) = waiting_jobs(input, name, jobs, &pools, typed);
    let lent_in = |pool: &str| {
        lent.get(pool)
            .and_then(|rows| rows.get(name))
            .copied()
            .unwrap_or(0.0)
    };
    let figures_of = |k: &str, p: &PoolFigures| {
        let (in_quota, borrowed) = (p.used.min(p.quota), p.used.saturating_sub(p.quota));
        let (waiting_jobs, waiting_gpus) = waiting.get(k).copied().unwrap_or((0, 0));
        Figures {
            quota: p.quota,
            in_use: p.used,
            in_quota,
            borrowed,
            may_hold: p.limit,
            lent: lent_in(k),
            waiting_jobs,
            waiting_gpus,
        }
    };
    let (figures, by_type) = if typed {
        let by_type: Vec<TypeStatus> = pools
            .iter()
            .map(|(k, p)| TypeStatus {
                gpu_type: k.clone(),
                figures: figures_of(k, p),
            })
            // Types the team has nothing of: no lines.
            .filter(|t| {
                let f = &t.figures;
                f.quota > 0
                    || f.in_use > 0
                    || f.waiting_jobs > 0
                    || f.may_hold.unwrap_or(0) > 0
                    || f.lent > 0.0
            })
            .collect();
        let waiting_all = waiting.get(ALL).copied().unwrap_or((0, 0));
        let limit = state.and_then(|s| team_limit(&s.teams, name));
        let totals = typed_totals(team, jobs.untyped_used(name), &by_type, limit, waiting_all);
        (totals, by_type)
    } else {
        (figures_of(ALL, &pools[ALL]), Vec::new())
    };
    TeamStatus {
        team: team.name.clone(),
        borrow_limit: team.borrow_limit,
        figures,
        waiting_reasons,
        by_type,
    }
}

/// The governor's limit of `team` among a pool's published teams.
fn team_limit(teams: &BTreeMap<String, TeamState>, team: &str) -> Option<u32> {
    teams.get(team).map(|ts| ts.gpu_limit)
}

/// The pools `team` has figures in (its GPU types, or [`ALL`] untyped), with what classifying
/// its waiting jobs needs.
fn pool_figures(
    input: &StatusInput<'_>,
    team: &Team,
    jobs: &JobsByPool<'_>,
    state: Option<&PublishedState>,
    typed: bool,
) -> BTreeMap<String, PoolFigures> {
    let name = team.name.as_str();
    let mut pools: BTreeMap<String, PoolFigures> = BTreeMap::new();
    if !typed {
        pools.insert(
            ALL.to_string(),
            PoolFigures {
                quota: team.quota.total,
                used: jobs.used(name, ALL),
                ceiling: team
                    .borrow_limit
                    .map(|b| team.quota.total.saturating_add(b)),
                limit: state.and_then(|s| team_limit(&s.teams, name)),
            },
        );
        return pools;
    }
    let mut types: Vec<&str> = input.config.governed_types().into_iter().collect();
    types.extend(jobs.running.keys().map(String::as_str));
    types.sort_unstable();
    types.dedup();
    let borrowed_of = |k: &str| jobs.used(name, k).saturating_sub(team.quota_of(k));
    let borrowed_all: u32 = types.iter().fold(jobs.untyped_used(name), |s, k| {
        s.saturating_add(borrowed_of(k))
    });
    for k in types {
        let quota = team.quota_of(k);
        let ceiling = match team.borrow_limit_of(k) {
            Some(b) => Some(quota.saturating_add(b)),
            None => team.borrow_limit.map(|b| {
                let elsewhere = borrowed_all.saturating_sub(borrowed_of(k));
                quota.saturating_add(b.saturating_sub(elsewhere))
            }),
        };
        pools.insert(
            k.to_string(),
            PoolFigures {
                quota,
                used: jobs.used(name, k),
                ceiling,
                limit: state
                    .and_then(|s| s.pools.get(k))
                    .and_then(|p| team_limit(&p.teams, name)),
            },
        );
    }
    pools
}

/// The team's waiting jobs and GPUs per pool (typed: also over all of them, under [`ALL`]),
/// and per reason, most jobs first.
fn waiting_jobs(
    input: &StatusInput<'_>,
    name: &str,
    jobs: &JobsByPool<'_>,
    pools: &BTreeMap<String, PoolFigures>,
    typed: bool,
) -> (BTreeMap<String, (u32, u32)>, Vec<WaitReason>) {
    let add = |e: &mut (u32, u32), n: u32, g: u32| {
        *e = (e.0.saturating_add(n), e.1.saturating_add(g));
    };
    let mut waiting: BTreeMap<String, (u32, u32)> = BTreeMap::new();
    let mut reasons: BTreeMap<String, (u32, u32)> = BTreeMap::new();
    for (j, pool) in jobs.pending.iter().filter(|(j, _)| j.team == name) {
        let figures = pool.as_deref().and_then(|p| pools.get(p));
        let slurm = input
            .reasons
            .get(&j.id)
            .map(String::as_str)
            .unwrap_or("None");
        let why = why_waiting(j, slurm, figures, typed);
        let (n, g) = (j.tasks.max(1), pending_gpus(j));
        add(reasons.entry(why).or_insert((0, 0)), n, g);
        if let Some(p) = pool {
            add(waiting.entry(p.clone()).or_insert((0, 0)), n, g);
        }
        if typed {
            add(waiting.entry(ALL.to_string()).or_insert((0, 0)), n, g);
        }
    }
    let mut waiting_reasons: Vec<WaitReason> = reasons
        .into_iter()
        .map(|(reason, (jobs, gpus))| WaitReason { reason, jobs, gpus })
        .collect();
    waiting_reasons.sort_by(|a, b| {
        b.jobs
            .cmp(&a.jobs)
            .then(b.gpus.cmp(&a.gpus))
            .then(a.reason.cmp(&b.reason))
    });
    (waiting, waiting_reasons)
}

/// A typed team's figures over all types: its types' sums, GPUs without a type in use (and
/// borrowed: they are in no quota), the governor's limit over all types and what waits.
fn typed_totals(
    team: &Team,
    untyped: u32,
    by_type: &[TypeStatus],
    may_hold: Option<u32>,
    (waiting_jobs, waiting_gpus): (u32, u32),
) -> Figures {
    let sum = |f: fn(&Figures) -> u32| {
        by_type
            .iter()
            .fold(0u32, |s, t| s.saturating_add(f(&t.figures)))
    };
    Figures {
        quota: team.quota.total,
        in_use: sum(|f| f.in_use).saturating_add(untyped),
        in_quota: sum(|f| f.in_quota),
        borrowed: sum(|f| f.borrowed).saturating_add(untyped),
        may_hold,
        lent: by_type.iter().map(|t| t.figures.lent).sum(),
        waiting_jobs,
        waiting_gpus,
    }
}

/// Why a pending job waits. teamshare's own reasons come first where its rules hold the job
/// (parked, beyond the borrow limit, no idle GPUs to borrow now); a job that cannot start
/// whatever its team holds (a dependency, a begin time, a user's hold) shows Slurm's reason;
/// so does one its team's figures let start (Slurm's scheduler has yet to: `Resources`,
/// `Priority`).
fn why_waiting(j: &ClusterJob, slurm: &str, pool: Option<&PoolFigures>, typed: bool) -> String {
    if j.gpus == governance::UNREADABLE_GPUS {
        return "teamshare: GPU request unreadable (never fits)".into();
    }
    if j.parked || j.park_held {
        return "teamshare: parked (non-preemptible, waits for room in its quota)".into();
    }
    let Some(p) = pool else {
        return if typed && j.gpus > 0 && j.gpu_type.is_none() {
            "teamshare: held (names no GPU type; quotas are per type)".into()
        } else {
            format!("Slurm: {slurm}")
        };
    };
    if !j.eligible {
        return format!("Slurm: {slurm}");
    }
    let after = p.used.saturating_add(j.gpus);
    if after <= p.quota {
        return format!("in quota (Slurm: {slurm})");
    }
    if let Some(ceiling) = p.ceiling.filter(|c| after > *c) {
        return format!("teamshare: beyond quota + borrow limit ({ceiling} GPUs)");
    }
    if let Some(limit) = p.limit.filter(|l| after > *l) {
        return format!("teamshare: waiting for idle GPUs to borrow (may hold {limit} now)");
    }
    format!("Slurm: {slurm}")
}

fn state_status(input: &StatusInput<'_>) -> StateStatus {
    let max_age_secs = input.config.governance.state_max_age.as_secs();
    let (published_at, problem) = match &input.state {
        Err(why) => (None, Some(why.clone())),
        Ok(state) => {
            let problem = match inputs::judge_state(Some(state), input.config, input.now) {
                Staleness::Current => None,
                Staleness::Missing => Some("not published".to_string()),
                Staleness::Old { age_secs } => Some(format!(
                    "stale: published {age_secs} s ago, more than state_max_age ({max_age_secs} s): is the governor (`accountd run`) running?"
                )),
                Staleness::Future { ahead_secs } => Some(format!(
                    "stamped {ahead_secs} s in the future (a clock step, or not written by the governor)"
                )),
                Staleness::OtherConfig { .. } => Some(
                    "computed from another teamshare.toml than this one (the governor has not yet run with it)"
                        .to_string(),
                ),
            };
            (Some(state.generated_at), problem)
        }
    };
    StateStatus {
        file: input.state_file.to_path_buf(),
        published_at,
        age_secs: published_at.map(|t| input.now.saturating_sub(t)),
        max_age_secs,
        current: problem.is_none(),
        problem,
    }
}

/// GPUs as a table cell, to two decimals without trailing zeros (lent is pro rata, so may
/// not be whole).
fn gpus(g: f64) -> String {
    let text = format!("{g:.2}");
    text.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// `1 job`, `2 jobs`.
fn count(n: u32, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

fn opt(v: Option<u32>) -> String {
    v.map_or_else(|| "-".to_string(), |v| v.to_string())
}

/// How many reasons a team's line under the table shows; the rest are counted.
const TOP_REASONS: usize = 3;

/// The status as text: the cluster's GPUs, the state's age, one line per team (and per GPU
/// type under it where quotas are typed), `(pool)`, then why jobs wait.
pub fn render_table<Tz: chrono::TimeZone>(s: &Status, tz: &Tz) -> String
where
    Tz::Offset: std::fmt::Display,
{
    let mut out = format!(
        "teamshare status of {} at {} (local time)\n",
        s.cluster,
        format_local(s.at, tz).replace('T', " ")
    );
    write_gpus(&mut out, s);
    write_state(&mut out, &s.state, tz);
    out.push_str(&teams_table(s));
    write_waiting(&mut out, s);
    out
}

/// The cluster's GPUs, in all and per type.
fn write_gpus(out: &mut String, s: &Status) {
    let _ = write!(
        out,
        "GPUs: capacity {}, in use {}, free {}",
        s.capacity, s.in_use, s.free
    );
    for (k, g) in &s.by_type {
        let _ = write!(
            out,
            "; {k}: capacity {}, in use {}, free {}",
            g.capacity, g.in_use, g.free
        );
    }
    out.push('\n');
    if let Some(seen) = s.partial_view {
        let _ = writeln!(
            out,
            "  (your view of Slurm's jobs is partial, PrivateData: the jobs you can see hold {seen} GPUs; the GPUs in use are the governor's cluster-wide figures, and the jobs waiting are those you can see)"
        );
    }
}

/// The governor's state: its age, or why it is not current and what that means for MAY-HOLD.
fn write_state<Tz: chrono::TimeZone>(out: &mut String, st: &StateStatus, tz: &Tz)
where
    Tz::Offset: std::fmt::Display,
{
    let age = match (st.age_secs, st.published_at) {
        (Some(age), Some(at)) => format!(
            "published {age} s ago ({})",
            format_local(at, tz).replace('T', " ")
        ),
        _ => "none".to_string(),
    };
    match &st.problem {
        None => {
            let _ = writeln!(
                out,
                "governor state: {age}, current (stale after {} s)",
                st.max_age_secs
            );
        }
        Some(problem) => {
            let _ = writeln!(
                out,
                "governor state: {age}: NOT CURRENT: {} {problem}",
                st.file.display()
            );
            let _ = writeln!(
                out,
                "  {}",
                if st.published_at.is_some() {
                    "MAY-HOLD shows the limits the governor last set, which Slurm keeps until it publishes again"
                } else {
                    "MAY-HOLD is unknown without the governor's state"
                }
            );
        }
    }
}

/// One line per team (and per GPU type under it where quotas are typed), then `(pool)`.
fn teams_table(s: &Status) -> String {
    let typed = !s.by_type.is_empty();
    let mut header: Vec<String> = vec!["TEAM".into()];
    if typed {
        header.push("TYPE".into());
    }
    header.extend(
        [
            "QUOTA",
            "IN-USE",
            "IN-QUOTA",
            "BORROWED",
            "MAY-HOLD",
            "LENT",
            "WAITING-JOBS",
            "WAITING-GPUS",
        ]
        .map(String::from),
    );
    let mut lines: Vec<Vec<String>> = Vec::new();
    let mut push = |team: &str, gpu_type: Option<&str>, f: &Figures| {
        let mut v = vec![team.to_string()];
        if let Some(k) = gpu_type {
            v.push(k.to_string());
        }
        v.extend([
            f.quota.to_string(),
            f.in_use.to_string(),
            f.in_quota.to_string(),
            f.borrowed.to_string(),
            opt(f.may_hold),
            gpus(f.lent),
            f.waiting_jobs.to_string(),
            f.waiting_gpus.to_string(),
        ]);
        lines.push(v);
    };
    for t in &s.teams {
        push(&t.team, typed.then_some("all"), &t.figures);
        for k in &t.by_type {
            push(&t.team, Some(&k.gpu_type), &k.figures);
        }
    }
    let rule = lines.len();
    let mut pool = vec![POOL.to_string()];
    if typed {
        pool.push("all".into());
    }
    pool.push(s.pool.unallocated.to_string());
    pool.extend(["-", "-", "-", "-"].map(String::from));
    pool.push(gpus(s.pool.lent));
    pool.extend(["-", "-"].map(String::from));
    lines.push(pool);
    crate::report::table::render(&header, &lines, 1, Some(rule))
}

/// Accounts that are not teams, then why each team's jobs wait (its top reasons).
fn write_waiting(out: &mut String, s: &Status) {
    for a in &s.other_accounts {
        let _ = writeln!(
            out,
            "account {} is not a team: {} in use, {} ({}) waiting (the governor holds them)",
            a.account,
            count(a.in_use, "GPU", "GPUs"),
            count(a.waiting_jobs, "job", "jobs"),
            count(a.waiting_gpus, "GPU", "GPUs")
        );
    }
    let waiting: Vec<&TeamStatus> = s
        .teams
        .iter()
        .filter(|t| !t.waiting_reasons.is_empty())
        .collect();
    if !waiting.is_empty() {
        out.push_str("why jobs wait:\n");
    }
    for t in waiting {
        for r in t.waiting_reasons.iter().take(TOP_REASONS) {
            let _ = writeln!(
                out,
                "  {}: {} ({}): {}",
                t.team,
                count(r.jobs, "job", "jobs"),
                count(r.gpus, "GPU", "GPUs"),
                r.reason
            );
        }
        let more = t.waiting_reasons.len().saturating_sub(TOP_REASONS);
        if more > 0 {
            let _ = writeln!(
                out,
                "  {}: {more} other reasons (--format json lists them all)",
                t.team
            );
        }
    }
}

#[cfg(test)]
mod tests;
