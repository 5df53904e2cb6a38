//! Submit-time checks (DESIGN §4 rule 7), as a pure function of the configuration and an owned
//! copy of the job request.

use std::collections::BTreeMap;

use crate::governance::{self, PublishedState, TeamState, Victim};
use crate::gres::{gpu_count, GpuCount, GresError, MAX_GPUS_PER_JOB};
use crate::priority::{self, INTERNAL_QOS};
use teamshare_config::{Config, OnStaleState, Team};

mod ceiling;
mod reject;
pub(crate) use ceiling::{family_room, over_ceiling, over_family_ceiling};
pub use reject::{RejectKind, Rejection};

/// The parts of a job request that decide how many GPUs it will hold, copied out of Slurm's
/// `job_desc_msg_t`. `None` stands for Slurm's NO_VAL ("not given").
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GpuAsk {
    pub tres_per_job: Option<String>,
    pub tres_per_node: Option<String>,
    pub tres_per_task: Option<String>,
    pub tres_per_socket: Option<String>,
    pub min_nodes: Option<u32>,
    pub num_tasks: Option<u32>,
    pub ntasks_per_node: Option<u32>,
    pub sockets_per_node: Option<u32>,
}

/// An owned copy of the job request fields the policy reads.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SubmitRequest {
    pub account: Option<String>,
    pub partition: Option<String>,
    pub qos: Option<String>,
    pub user_id: u32,
    /// Who submits: uid 0 may use the internal QOS directly.
    pub submit_uid: u32,
    pub gpus: GpuAsk,
    /// A job array's index as given (`--array`, e.g. `1-100%10`); each task asks for `gpus`.
    pub array: Option<String>,
    /// It cannot start as soon as it is queued: it names a begin time ahead, a dependency or
    /// a reservation (the governor ranks such a borrower once it can start).
    pub waits: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Accept(Admission),
    Reject(Rejection),
}

/// What the plugin writes back into an accepted request.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Admission {
    pub gpus: u64,
    /// The team, when the job is governed.
    pub team: Option<String>,
    /// The GPU type the job is governed against (typed configurations).
    pub gpu_type: Option<String>,
    /// Replace the request's QOS with this one (the internal QOS for governed jobs).
    pub qos: Option<&'static str>,
    /// Set the job's priority (governed jobs).
    pub priority: Option<u32>,
    /// The job (an array: at least one of its tasks) fits its team's unused quota.
    pub in_quota: bool,
    /// GPUs of the job (an array: of the tasks) that fit that quota, counted until the next
    /// state arrives so that the next submissions do not count the same unused quota.
    pub in_quota_gpus: u32,
    /// Park the job (a non-preemptible class beyond its quota): begin time this many seconds
    /// ahead; the governor releases it when it fits.
    pub park_secs: Option<i64>,
}

impl Admission {
    /// The begin time to give the job (Unix seconds), if any: the parking's, unless the user
    /// asked for a later start than now (`--begin`), which is never overwritten (issue 25,
    /// finding 10): such a job cannot start before it anyway, and once it may, the governor
    /// parks it if it still does not fit its team's quota. `user_begin` is the request's
    /// begin time (0 when none).
    pub fn begin_time(&self, user_begin: i64, now: i64) -> Option<i64> {
        let secs = self.park_secs?;
        (user_begin <= now).then(|| now.saturating_add(secs))
    }
}

impl Verdict {
    /// The admission of an accepted job (tests).
    pub fn admission(&self) -> Option<&Admission> {
        match self {
            Verdict::Accept(a) => Some(a),
            Verdict::Reject(_) => None,
        }
    }
}

/// The governor's view as the plugin holds it at submit time.
#[derive(Debug, Clone, Copy)]
pub enum StateView<'a> {
    Fresh {
        state: &'a PublishedState,
        admitted: &'a Admitted,
        now: i64,
    },
    /// Older than `state_max_age`, or missing.
    Stale,
}

/// In-quota admissions the governor's state does not count yet, so several jobs submitted
/// between two states do not all count the same unused quota.
///
/// A new state counts the jobs its pass read, and the pass read Slurm's jobs after
/// `read_at_ms`: an admission made before that is in the state, one made after may not be
/// (the state the plugin picks up a moment after an admission is often one whose pass read
/// the queue before it: counting that admission as seen would price the next in-quota job as
/// if the first did not exist; live test f11). So a new state drops only the admissions made
/// before its read, less [`CLOCK_MARGIN_MS`]; an admission kept after the state saw it is
/// counted twice until the next state (half a second), which errs on the safe side.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Admitted {
    pub generated_at: i64,
    /// GPUs admitted in quota per (GPU type, team); the type is `""` where GPUs are not
    /// governed per type.
    pub by_team: BTreeMap<(String, String), u32>,
    /// The same per GPU type, over all teams.
    pub total: BTreeMap<String, u32>,
    /// The admissions behind the counts: (when, in ms since the epoch; type; team; GPUs),
    /// oldest first.
    recent: Vec<(i64, String, String, u32)>,
}

/// Admissions up to this long before a state's read are still counted (the governor's and
/// slurmctld's clocks, read on different hosts, may differ a little).
pub const CLOCK_MARGIN_MS: i64 = 100;

/// The most admissions kept between two states (a burst of submissions while the governor is
/// away); the oldest are dropped first.
pub const MAX_RECENT_ADMISSIONS: usize = 10_000;

impl Admitted {
    pub const fn new() -> Admitted {
        Admitted {
            generated_at: 0,
            by_team: BTreeMap::new(),
            total: BTreeMap::new(),
            recent: Vec::new(),
        }
    }

    /// Start counting afresh for the state generated at `generated_at`: everything goes.
    pub fn reset_for(&mut self, generated_at: i64) {
        if self.generated_at != generated_at {
            *self = Admitted {
                generated_at,
                ..Admitted::new()
            };
        }
    }

    /// Count against `state`: when it is a new one, keep only the admissions its pass may not
    /// have read (a state without `read_at_ms`, from an older governor, drops them all).
    pub fn refresh_for(&mut self, state: &PublishedState) {
        if self.generated_at == state.generated_at {
            return;
        }
        self.generated_at = state.generated_at;
        if state.read_at_ms <= 0 {
            self.recent.clear();
        } else {
            let since = state.read_at_ms.saturating_sub(CLOCK_MARGIN_MS);
            self.recent.retain(|(at, ..)| *at >= since);
        }
        self.by_team.clear();
        self.total.clear();
        for (_, pool, team, gpus) in &self.recent {
            let e = self
                .by_team
                .entry((pool.clone(), team.clone()))
                .or_insert(0);
            *e = e.saturating_add(*gpus);
            let e = self.total.entry(pool.clone()).or_insert(0);
            *e = e.saturating_add(*gpus);
        }
    }

    /// Count an admission made at `at_ms` (ms since the epoch).
    pub fn record(&mut self, admission: &Admission, at_ms: i64) {
        if !admission.in_quota {
            return;
        }
        if let Some(team) = &admission.team {
            let gpus = admission.in_quota_gpus;
            let pool = admission.gpu_type.clone().unwrap_or_default();
            let e = self
                .by_team
                .entry((pool.clone(), team.clone()))
                .or_insert(0);
            *e = e.saturating_add(gpus);
            let e = self.total.entry(pool.clone()).or_insert(0);
            *e = e.saturating_add(gpus);
            if self.recent.len() >= MAX_RECENT_ADMISSIONS {
                self.recent.remove(0);
            }
            self.recent.push((at_ms, pool, team.clone(), gpus));
        }
    }

    /// GPUs admitted in quota for `team` in `pool` (`""`: untyped) since the state.
    pub fn team(&self, pool: &str, team: &str) -> u32 {
        // No allocation on the submit path: look the pair up by range.
        self.by_team
            .iter()
            .find(|((p, t), _)| p == pool && t == team)
            .map_or(0, |(_, n)| *n)
    }

    /// GPUs admitted in quota in `pool` since the state.
    pub fn pool(&self, pool: &str) -> u32 {
        self.total.get(pool).copied().unwrap_or(0)
    }
}

/// The components of one heterogeneous job seen so far. slurmctld calls job_submit once per
/// component, in order (`het_job_offset` 0, 1, ...), within the one submission RPC; each
/// component alone may fit its team while their sum never could.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HetJobTally {
    /// GPUs per (team, GPU type; `""` untyped).
    by_team: BTreeMap<(String, String), u64>,
}

impl HetJobTally {
    /// Count an accepted component (`offset`: its `het_job_offset`, `None` for a job that is
    /// not heterogeneous). Returns the refusal when its team's components together ask for
    /// more than the team may ever hold (quota + borrow limit).
    pub fn add(
        &mut self,
        config: &Config,
        offset: Option<u32>,
        admission: &Admission,
    ) -> Option<Rejection> {
        match offset {
            None => {
                self.by_team.clear();
                return None;
            }
            Some(0) => self.by_team.clear(),
            Some(_) => {}
        }
        let team = config.team(admission.team.as_deref()?)?;
        let gpu_type = admission.gpu_type.as_deref();
        let sum = self
            .by_team
            .entry((team.name.clone(), gpu_type.unwrap_or_default().to_string()))
            .or_insert(0);
        *sum = sum.saturating_add(admission.gpus);
        let asked = *sum;
        if let Some(r) = over_ceiling(config, team, gpu_type, asked, || {
            format!("the components of this heterogeneous job ask for {asked} together")
        }) {
            return Some(r);
        }
        // Each type within its own ceiling, and all of them within the team's (issue 25,
        // finding 9: 4 H100 and 3 A100 of a team that may hold 6 in all waited for ever).
        gpu_type?;
        let all: u64 = self
            .by_team
            .iter()
            .filter(|((t, _), _)| *t == team.name)
            .map(|(_, n)| *n)
            .sum();
        if let Some(r) = over_family_ceiling(config, team, gpu_type, &self.by_team) {
            return Some(r);
        }
        over_ceiling(config, team, None, all, || {
            format!("the components of this heterogeneous job ask for {all} of all types together")
        })
    }
}

/// The fewest GPUs the request can end up holding.
///
/// Counts that depend on placement (per node, per task, per socket) use the smallest placement
/// the request allows, so a job is refused only when it can never fit.
///
/// `None` and an empty string are the same here (nothing asked for); a count of 0 is the same
/// as no count.
pub fn gpus_requested(ask: &GpuAsk) -> Result<GpuCount, GresError> {
    requested(ask, gpu_count)
}

/// [`gpus_requested`] where `[gpu_types.shard]` governs shards: a request for shards and no
/// GPU (Slurm takes no job asking both) counts its shards as GPUs of type
/// [`SHARE_TYPE`](teamshare_config::SHARE_TYPE).
pub fn shares_requested(ask: &GpuAsk) -> Result<GpuCount, GresError> {
    let gpus = gpus_requested(ask)?;
    if !gpus.is_zero() {
        return Ok(gpus);
    }
    let shards = requested(ask, |s| {
        let n = crate::gres::shard_count(s)?;
        Ok(GpuCount {
            total: n,
            by_type: BTreeMap::new(),
        })
    })?
    .total;
    Ok(GpuCount {
        total: shards,
        by_type: [(teamshare_config::SHARE_TYPE.to_string(), shards)]
            .into_iter()
            .filter(|(_, n)| *n > 0)
            .collect(),
    })
}

/// The fewest of what `count` counts (GPUs, shards) the request can end up holding.
fn requested(
    ask: &GpuAsk,
    count: impl Fn(&str) -> Result<GpuCount, GresError>,
) -> Result<GpuCount, GresError> {
    let given = |v: Option<u32>| v.filter(|&n| n != 0);
    let nodes = u64::from(given(ask.min_nodes).unwrap_or(1));
    let tasks = match (given(ask.num_tasks), given(ask.ntasks_per_node)) {
        (Some(n), _) => u64::from(n.max(1)),
        (None, Some(per_node)) => u64::from(per_node.max(1)) * nodes,
        (None, None) => nodes,
    };
    let sockets = u64::from(given(ask.sockets_per_node).unwrap_or(1)) * nodes;

    let mut total = GpuCount::default();
    let parts: [(&Option<String>, u64); 4] = [
        (&ask.tres_per_job, 1),
        (&ask.tres_per_node, nodes),
        (&ask.tres_per_task, tasks),
        (&ask.tres_per_socket, sockets),
    ];
    for (spec, factor) in parts {
        if let Some(spec) = spec {
            total.add(&count(spec)?.times(factor));
        }
    }
    Ok(total)
}

/// Slurm's `ntasks_per_tres` (`--ntasks-per-gpu`): when the request names no GPU, Slurm
/// derives `num_tasks / ntasks_per_tres` untyped GPUs from it, as if given per job
/// (`gres_job_state_validate`), and with no task count it implies one GPU per node. Written
/// into `ask` in exactly that form, so the count is judged like any other.
pub fn apply_ntasks_per_gpu(ask: &mut GpuAsk, ntasks_per_gpu: Option<u32>) {
    let Some(per_gpu) = ntasks_per_gpu.filter(|&n| n != 0) else {
        return;
    };
    if !matches!(gpus_requested(ask), Ok(c) if c.is_zero()) {
        // GPUs named already (the task count follows from them), or unreadable (refused).
        return;
    }
    let gpus = match (ask.num_tasks.filter(|&n| n != 0), ask.min_nodes) {
        (Some(tasks), _) => tasks / per_gpu,
        (None, nodes) => nodes.unwrap_or(1).max(1),
    };
    let derived = format!("gres:gpu:{gpus}");
    ask.tres_per_job = Some(match ask.tres_per_job.take().filter(|s| !s.is_empty()) {
        Some(other) => format!("{other},{derived}"),
        None => derived,
    });
}

/// `--exclusive` (whole nodes): Slurm gives the job every GPU of each node it gets, whatever
/// it asks for (issue 25, finding 7: `sbatch --exclusive` with no GPUs held all 4 of a node).
/// Written into `ask` as that many GPUs per node, so that it is judged like any other
/// request: the most GPUs a usable node has (`node_gpus`, of the job's one GPU type where it
/// names one: `by_type`), as the governor published them; at least one per node when no
/// state says, so that a whole-node job in a governed partition always needs a team. A request
/// that cannot be read is left as it is (and refused).
pub fn apply_whole_nodes(ask: &mut GpuAsk, node_gpus: u32, by_type: &BTreeMap<String, u32>) {
    let Ok(asked) = gpus_requested(ask) else {
        return;
    };
    let mut types = asked.by_type.iter().filter(|(_, n)| **n > 0);
    let gpu_type = match (types.next(), types.next()) {
        (Some((k, n)), None) if *n == asked.total => Some(k.clone()),
        _ => None,
    };
    let per_node = gpu_type
        .as_ref()
        .and_then(|k| by_type.get(k).copied())
        .unwrap_or(node_gpus)
        .max(1);
    let nodes = ask.min_nodes.filter(|&n| n != 0).unwrap_or(1);
    if asked.total >= u64::from(nodes) * u64::from(per_node) {
        return;
    }
    ask.tres_per_job = None;
    ask.tres_per_task = None;
    ask.tres_per_socket = None;
    ask.tres_per_node = Some(match gpu_type {
        Some(k) => format!("gres:gpu:{k}:{per_node}"),
        None => format!("gres:gpu:{per_node}"),
    });
}

/// A component of a heterogeneous job that names a partition Slurm does not have (`offered`:
/// every partition, from the governor's state), refused.
///
/// Found by issue 25's soak: slurmctld 22.05.8 deadlocked when it cancelled the components it
/// had already created of a heterogeneous job whose later component named no such partition.
/// Its cancel runs over the job's component list and takes the association lock for each
/// component, while an squeue packing that same job holds the association lock and asks for
/// the component list: every RPC thread then waited for ever. slurmctld calls job_submit for
/// every component before it creates any, so a refusal here refuses the whole job before that
/// path. Other reasons a later component can fail after the first is created stay Slurm's.
pub fn het_component_partition(
    partition: Option<&str>,
    offered: &crate::offered::Offered,
) -> Option<Rejection> {
    let unknown: Vec<&str> = partition?
        .split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty() && !offered.contains_key(*p))
        .collect();
    if unknown.is_empty() {
        return None;
    }
    let known: Vec<&str> = offered.keys().map(String::as_str).collect();
    Some(Rejection {
        kind: RejectKind::UnknownPartition,
        message: format!(
            "teamshare: partition {} does not exist (partitions: {}); a heterogeneous job naming it is refused whole",
            unknown.join(","),
            known.join(",")
        ),
    })
}

/// Whether `qos` names teamshare's internal QOS. Slurm matches QOS names case-insensitively
/// (`assoc_mgr_fill_in_qos`), so `--qos=TeamShare` selects it too.
pub fn is_internal_qos(qos: &str) -> bool {
    qos.eq_ignore_ascii_case(INTERNAL_QOS)
}

/// What holds for a request whatever the governor's state says.
pub(crate) enum Screened<'c> {
    /// Not teamshare's business (outside the governed partitions, or no GPU and no team).
    Ungoverned { gpus: u64 },
    Governed {
        gpus: GpuCount,
        team: &'c Team,
        class: u8,
        /// The type the job is governed against (typed configurations).
        gpu_type: Option<String>,
    },
}

/// In a typed configuration, the one GPU type a governed request names; a refusal when it
/// names none (or GPUs without a type beside typed ones), several, or one not governed.
fn governed_type(config: &Config, gpus: &GpuCount) -> Result<Option<String>, Rejection> {
    if !config.is_typed() || gpus.is_zero() {
        return Ok(None);
    }
    let offered = || {
        config
            .gpu_types
            .keys()
            .filter(|k| config.governs_type(k))
            .map(String::as_str)
            .collect::<Vec<_>>()
            .join(", ")
    };
    let typed = gpus
        .by_type
        .values()
        .fold(0u64, |s, n| s.saturating_add(*n));
    if typed < gpus.total {
        return Err(reject(
            RejectKind::UntypedGpus,
            format!(
                "teamshare: GPUs are governed per type on this cluster, so a job must name one: --gres=gpu:<type>:N or --gpus=<type>:N (types: {})",
                offered()
            ),
        ));
    }
    let mut types = gpus.by_type.keys();
    let (Some(k), None) = (types.next(), types.next()) else {
        return Err(reject(
            RejectKind::SeveralGpuTypes,
            format!(
                "teamshare: a job may ask for one GPU type here; this one asks for {}: submit one job per type (or a heterogeneous job, one type per component)",
                gpus.by_type.keys().map(String::as_str).collect::<Vec<_>>().join(" and ")
            ),
        ));
    };
    if !config.governs_type(k) {
        return Err(reject(
            RejectKind::GpuTypeNotOffered,
            format!(
                "teamshare: GPU type {k} is not offered in the governed partitions ({}); types: {}",
                config.cluster.partitions.join(","),
                offered()
            ),
        ));
    }
    Ok(Some(k.clone()))
}

pub(crate) fn reject(kind: RejectKind, message: String) -> Rejection {
    Rejection { kind, message }
}

/// The checks that need only the configuration and the request: a readable, sane GPU count,
/// never the internal QOS for a user, a team for GPU jobs in governed partitions, the team's
/// ceiling (quota + borrow limit), a known priority class.
pub(crate) fn screen_request<'c>(
    config: &'c Config,
    req: &SubmitRequest,
) -> Result<Screened<'c>, Rejection> {
    let invalid = |e: GresError| reject(RejectKind::InvalidGres, format!("teamshare: {e}"));
    let mut gpus = gpus_requested(&req.gpus).map_err(invalid)?;
    // Only a request for no GPU can be one for shards (Slurm takes no job asking both).
    if gpus.is_zero() && config.shares().is_some() {
        gpus = shares_requested(&req.gpus).map_err(invalid)?;
    }
    if gpus.total > MAX_GPUS_PER_JOB {
        return Err(reject(
            RejectKind::InvalidGres,
            format!(
                "teamshare: this job asks for {} GPUs, more than any job may ({MAX_GPUS_PER_JOB}); a count suffix multiplies (k = 1024, m = 1024^2, g, t, p), so write the count as a plain number",
                gpus.total
            ),
        ));
    }

    // The internal QOS is never the user's, whatever the job asks for and wherever it runs.
    if let Some(q) = req.qos.as_deref().filter(|q| is_internal_qos(q)) {
        if req.submit_uid != 0 {
            return Err(reject(
                RejectKind::InternalQos,
                format!(
                    "teamshare: QOS {q} is set by teamshare itself; choose a priority class with --qos={}",
                    class_names(config)
                ),
            ));
        }
    }

    let governed = match req.partition.as_deref().filter(|p| !p.is_empty()) {
        // No partition: the default one, which teamshare governs when it asks for GPUs.
        None => true,
        Some(p) => p
            .split(',')
            .any(|p| config.cluster.partitions.iter().any(|g| g == p.trim())),
    };
    if governed {
        reject::shares_refused(config, &req.gpus)?;
    }
    // An empty account is Slurm's "the default account", as unknown here as no account.
    let account = req.account.as_deref().filter(|a| !a.is_empty());
    if !governed || gpus.is_zero() && account.is_none() {
        return Ok(Screened::Ungoverned { gpus: gpus.total });
    }

    let team_names = || {
        config
            .teams
            .iter()
            .map(|t| t.name.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    };
    let Some(account) = account else {
        return Err(reject(
            RejectKind::NoTeam,
            format!(
                "teamshare: GPU jobs must name their team with -A/--account (teams: {})",
                team_names()
            ),
        ));
    };
    let Some(team) = config.team(account) else {
        return Err(reject(
            RejectKind::UnknownTeam,
            format!(
                "teamshare: account {account} is not a team on this cluster; use -A with one of: {}",
                team_names()
            ),
        ));
    };

    let gpu_type = governed_type(config, &gpus)?;
    if let Some(r) = over_ceiling(config, team, gpu_type.as_deref(), gpus.total, || {
        format!("this job asks for {}", gpus.total)
    }) {
        return Err(r);
    }

    let class = class_of(config, req.qos.as_deref())?;
    Ok(Screened::Governed {
        gpus,
        team,
        class,
        gpu_type,
    })
}

/// The priority class, which comes in as `--qos=<class>`; an empty QOS is no class (index 0).
fn class_of(config: &Config, qos: Option<&str>) -> Result<u8, Rejection> {
    match qos.filter(|q| !q.is_empty()) {
        None => Ok(0),
        // Only an operator gets this far with it.
        Some(q) if is_internal_qos(q) => Ok(0),
        Some(q) => governance::class_index(config, q).ok_or_else(|| {
            reject(
                RejectKind::UnknownClass,
                format!(
                    "teamshare: {q} is not a priority class; use --qos={} or no --qos",
                    class_names(config)
                ),
            )
        }),
    }
}

/// The refusal of a request for more GPUs than the governed partitions have: of its type in a
/// typed configuration, else in all and of each type it names. What a job could ever get is
/// the usable capacity plus the GPUs of nodes slurmctld has yet to hear from
/// ([`PublishedState::unsettled_gpus`]: just after a restart of slurmctld every node is such a
/// node, and no job may be refused for it); down and drained nodes do not count.
pub(crate) fn larger_than_cluster(
    config: &Config,
    state: &PublishedState,
    gpus: &GpuCount,
    gpu_type: Option<&str>,
) -> Option<Rejection> {
    let refuse = |capacity: u32, kind: &str, asked: u64| {
        reject(
            RejectKind::LargerThanCluster,
            format!(
                "teamshare: the governed partitions ({}) have {capacity} usable {kind}GPUs; this job asks for {asked}",
                config.cluster.partitions.join(","),
            ),
        )
    };
    let unsettled = |k: &str| state.unsettled_gpus_by_type.get(k).copied().unwrap_or(0);
    if let Some(k) = gpu_type {
        let capacity = state
            .pools
            .get(k)
            .map_or(0, |p| p.capacity)
            .saturating_add(unsettled(k));
        return (gpus.total > u64::from(capacity))
            .then(|| refuse(capacity, &format!("{k} "), gpus.total));
    }
    let total = state.capacity.saturating_add(state.unsettled_gpus);
    if gpus.total > u64::from(total) {
        return Some(refuse(total, "", gpus.total));
    }
    // A type the partitions do not have (their GPUs untyped, or of other types) can never be
    // given; judged only where the state knows the types.
    if state.capacity_by_type.is_empty() && state.unsettled_gpus_by_type.is_empty() && total > 0 {
        return None;
    }
    gpus.by_type.iter().find_map(|(k, &n)| {
        let capacity = state
            .capacity_by_type
            .get(k)
            .copied()
            .unwrap_or(0)
            .saturating_add(unsettled(k));
        (n > u64::from(capacity)).then(|| refuse(capacity, &format!("{k} "), n))
    })
}

/// With no valid configuration loaded nothing can be judged: refuse what asks for GPUs (or
/// whose GPU request cannot be read), let everything else through.
pub fn check_without_config(req: &SubmitRequest) -> Verdict {
    match gpus_requested(&req.gpus) {
        Ok(g) if g.is_zero() => Verdict::Accept(Admission::default()),
        _ => Verdict::Reject(reject(
            RejectKind::NoConfiguration,
            "teamshare: no valid teamshare.toml is loaded, so GPU jobs cannot be checked; ask the administrator (slurmctld log)".to_string(),
        )),
    }
}

/// The submit-time checks that hold whatever the governor's state says (unknown team or class,
/// GPU type not offered, more GPUs than quota + borrow limit): the plugin's own rules, for
/// `accountd replay`, which judges a job of the past under a candidate configuration.
pub fn screen(config: &Config, req: &SubmitRequest) -> Result<(), Rejection> {
    screen_request(config, req).map(|_| ())
}

/// Decide whether a new job may be submitted, and how it enters the queue.
pub fn check_submit(config: &Config, req: &SubmitRequest, view: StateView<'_>) -> Verdict {
    let (gpus, team, class, gpu_type) = match screen_request(config, req) {
        Err(r) => return Verdict::Reject(r),
        Ok(Screened::Ungoverned { gpus }) => {
            return Verdict::Accept(Admission {
                gpus,
                ..Admission::default()
            })
        }
        Ok(Screened::Governed {
            gpus,
            team,
            class,
            gpu_type,
        }) => (gpus, team, class, gpu_type),
    };

    // Index 0 is "no class"; configured classes start at 1 (no allocation on the submit path).
    let preemptible = usize::from(class)
        .checked_sub(1)
        .and_then(|i| config.priority_classes.get(i))
        .map(|c| c.preemptible)
        .unwrap_or(true);
    let gpus32 = u32::try_from(gpus.total).unwrap_or(u32::MAX);
    let (state, admitted, now) = match view {
        StateView::Fresh {
            state,
            admitted,
            now,
        } => (state, admitted, now),
        StateView::Stale => {
            return on_stale_state(config, gpus.total, team, class, gpu_type, preemptible);
        }
    };

    if let Some(r) = larger_than_cluster(config, state, &gpus, gpu_type.as_deref()) {
        return Verdict::Reject(r);
    }

    // The pool the job is judged in: its type's, or all GPUs.
    let pool = gpu_type.as_deref().unwrap_or("");
    let (teams, victims, reclaim) = pool_state(state, gpu_type.as_deref());
    let room = match gpu_type.as_deref() {
        Some(k) if config.counts_family(team, k) => family_room(config, state, admitted, team, k),
        _ => {
            let quota = match gpu_type.as_deref() {
                Some(k) => team.quota_of(k),
                None => team.quota.total,
            };
            let (running, pending) = teams
                .get(&team.name)
                .map(|t| (t.running_gpus, t.pending_in_quota_gpus))
                .unwrap_or((0, 0));
            quota.saturating_sub(
                running
                    .saturating_add(pending)
                    .saturating_add(admitted.team(pool, &team.name)),
            )
        }
    };
    // An array's tasks each ask for `gpus`: as many as may run at once and fit the room are
    // in quota (the record is ranked in quota when one is; the team's limit keeps the others
    // to what it may borrow).
    let tasks = array_tasks(req);
    let fitting = room.checked_div(gpus32).map_or(tasks, |n| tasks.min(n));
    let in_quota = fitting > 0;
    let in_quota_gpus = fitting.saturating_mul(gpus32);
    let level = if in_quota {
        let k = reclaim.needed(admitted.pool(pool).saturating_add(in_quota_gpus));
        governance::reclaim_level_in(victims, k, now)
    } else {
        borrower_level(config, state, &team.name, class, preemptible && !req.waits)
    };
    Verdict::Accept(Admission {
        gpus: gpus.total,
        team: Some(team.name.clone()),
        gpu_type,
        qos: Some(INTERNAL_QOS),
        priority: Some(priority::encode(level, class)),
        in_quota,
        in_quota_gpus,
        park_secs: (!preemptible && !in_quota).then_some(governance::PARK_SECS),
    })
}

/// A borrower's level at submit: its team's band of the last pass (Slurm serves it after its
/// team's older borrowers of its rank), so that the governor has no priority to write for it,
/// which at 10,000 waiting jobs was a write per submission, put off behind the pass's budget
/// in a burst. The bottom ([`priority::BORROW_BASE`]) where it may not borrow or cannot start
/// yet, as the governor ranks it, or where the state names no band (an older governor's).
fn borrower_level(
    config: &Config,
    state: &PublishedState,
    team: &str,
    class: u8,
    may_start_borrowing: bool,
) -> u32 {
    match state.bands.get(team) {
        Some(&slot) if may_start_borrowing => {
            priority::borrow_band(slot, governance::class_rank(config, class))
        }
        _ => priority::BORROW_BASE,
    }
}

/// The verdict on a governed job while the governor's state is not current
/// (`on_stale_state`).
fn on_stale_state(
    config: &Config,
    gpus: u64,
    team: &Team,
    class: u8,
    gpu_type: Option<String>,
    preemptible: bool,
) -> Verdict {
    match config.governance.on_stale_state {
        OnStaleState::FailOpen => Verdict::Accept(Admission {
            gpus,
            team: Some(team.name.clone()),
            gpu_type,
            qos: Some(INTERNAL_QOS),
            // Queued as a borrower: without current state it may not preempt anyone.
            priority: Some(priority::encode(priority::BORROW_BASE, class)),
            in_quota: false,
            in_quota_gpus: 0,
            // Nor may a non-preemptible job start where it might be borrowing.
            park_secs: (!preemptible).then_some(governance::PARK_SECS),
        }),
        OnStaleState::FailClosed => Verdict::Reject(Rejection {
            kind: RejectKind::StaleState,
            message: "teamshare: team usage is not current (the accountd governor is not running), so GPU jobs are refused for now; try again shortly or ask the administrator".to_string(),
        }),
    }
}

/// The pool a job of `gpu_type` is judged in (its type's, or all GPUs): its teams' state, its
/// victims in reclaim order, and what its pending in-quota jobs take.
fn pool_state<'s>(
    state: &'s PublishedState,
    gpu_type: Option<&str>,
) -> (&'s BTreeMap<String, TeamState>, &'s [Victim], Reclaiming) {
    match gpu_type {
        Some(k) => match state.pools.get(k) {
            Some(p) => (
                &p.teams,
                p.victims.as_slice(),
                Reclaiming::of(
                    p.free_gpus,
                    p.pending_in_quota_gpus,
                    p.reclaim_gpus,
                    p.spare_gpus,
                ),
            ),
            None => (&state.teams, &[][..], Reclaiming::of(0, 0, 0, None)),
        },
        None => (
            &state.teams,
            state.victims.as_slice(),
            Reclaiming::of(
                state.free_gpus,
                state.pending_in_quota_gpus,
                state.reclaim_gpus,
                state.spare_gpus,
            ),
        ),
    }
}

/// The tasks of a job array that may run at once (1 for a job); an index the parser cannot
/// read is Slurm's to refuse: one task.
fn array_tasks(req: &SubmitRequest) -> u32 {
    req.array
        .as_deref()
        .and_then(crate::array::parse_tasks)
        .map_or(1, |t| {
            u32::try_from(t.concurrent()).unwrap_or(u32::MAX).max(1)
        })
}

/// What the published state says of the GPUs pending in-quota jobs take: how a new in-quota
/// job is priced among the victims.
enum Reclaiming {
    /// Placement known: the victims the pending jobs need come first in the victims' order,
    /// and the free GPUs they leave serve new jobs before any victim.
    Placed { victims_gpus: u32, spare: u32 },
    /// Placement unknown: GPUs counted across the cluster.
    Counted { free: u32, pending: u32 },
}

impl Reclaiming {
    fn of(free: u32, pending: u32, victims_gpus: u32, spare: Option<u32>) -> Reclaiming {
        match spare {
            Some(spare) => Reclaiming::Placed {
                victims_gpus,
                spare,
            },
            None => Reclaiming::Counted { free, pending },
        }
    }

    /// The victims' GPUs a job needs (with the in-quota jobs admitted since the state) when
    /// `new` more GPUs are asked for in quota.
    fn needed(&self, new: u32) -> u32 {
        match *self {
            Reclaiming::Placed {
                victims_gpus,
                spare,
            } => victims_gpus.saturating_add(new.saturating_sub(spare)),
            Reclaiming::Counted { free, pending } => {
                pending.saturating_add(new).saturating_sub(free)
            }
        }
    }
}

fn class_names(config: &Config) -> String {
    let names: Vec<&str> = config
        .priority_classes
        .iter()
        .map(|c| c.name.as_str())
        .collect();
    if names.is_empty() {
        "(no classes are configured)".to_string()
    } else {
        names.join("|")
    }
}

#[cfg(test)]
mod family_tests;
#[cfg(test)]
mod tests;
