//! Submit-time checks (DESIGN §4 rule 7), as a pure function of the configuration and an owned
//! copy of the job request.

use std::collections::BTreeMap;

use crate::governance::{self, PublishedState};
use crate::gres::{gpu_count, GpuCount, GresError, MAX_GPUS_PER_JOB};
use crate::priority::{self, INTERNAL_QOS};
use teamshare_config::{Config, OnStaleState, Team};

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
}

/// Why a request is refused; the FFI layer maps each kind to a Slurm error code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RejectKind {
    /// The job names no account and asks for GPUs in a governed partition.
    NoTeam,
    /// The account is not a team of teamshare.toml.
    UnknownTeam,
    /// The GPU request cannot be read.
    InvalidGres,
    /// More GPUs than the team may ever hold (quota + borrow limit).
    OverTeamLimit,
    /// No configuration could be loaded, so nothing can be checked.
    NoConfiguration,
    /// `--qos` names neither a priority class nor nothing.
    UnknownClass,
    /// A user named teamshare's internal QOS.
    InternalQos,
    /// More GPUs than the governed partitions have.
    LargerThanCluster,
    /// The governor's state is stale and `on_stale_state = "fail-closed"`.
    StaleState,
    /// `scontrol update` of a job's QOS (or clearing it) by a user: the QOS is teamshare's.
    QosChange,
    /// `scontrol update` of a job's priority by a user, other than hold and release.
    PriorityChange,
    /// `scontrol update` of what decides a job's GPUs, team or partition, without the whole
    /// GPU request teamshare needs to judge the job as it will be.
    IncompleteUpdate,
}

impl RejectKind {
    /// A short key for log lines.
    pub fn key(self) -> &'static str {
        match self {
            RejectKind::NoTeam => "no_team",
            RejectKind::UnknownTeam => "unknown_team",
            RejectKind::InvalidGres => "invalid_gres",
            RejectKind::OverTeamLimit => "over_team_limit",
            RejectKind::NoConfiguration => "no_configuration",
            RejectKind::UnknownClass => "unknown_class",
            RejectKind::InternalQos => "internal_qos",
            RejectKind::LargerThanCluster => "larger_than_cluster",
            RejectKind::StaleState => "stale_state",
            RejectKind::QosChange => "qos_change",
            RejectKind::PriorityChange => "priority_change",
            RejectKind::IncompleteUpdate => "incomplete_update",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejection {
    pub kind: RejectKind,
    /// One line for the user's terminal: why, and what would be accepted.
    pub message: String,
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

/// In-quota admissions since the state was published, so several jobs submitted between two
/// states do not all count the same unused quota.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Admitted {
    pub generated_at: i64,
    pub by_team: BTreeMap<String, u32>,
    pub total: u32,
}

impl Admitted {
    /// Start counting afresh for the state generated at `generated_at`.
    pub fn reset_for(&mut self, generated_at: i64) {
        if self.generated_at != generated_at {
            *self = Admitted {
                generated_at,
                ..Admitted::default()
            };
        }
    }

    pub fn record(&mut self, admission: &Admission) {
        if !admission.in_quota {
            return;
        }
        if let Some(team) = &admission.team {
            let gpus = admission.in_quota_gpus;
            let e = self.by_team.entry(team.clone()).or_insert(0);
            *e = e.saturating_add(gpus);
            self.total = self.total.saturating_add(gpus);
        }
    }
}

/// The components of one heterogeneous job seen so far. slurmctld calls job_submit once per
/// component, in order (`het_job_offset` 0, 1, ...), within the one submission RPC; each
/// component alone may fit its team while their sum never could.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HetJobTally {
    by_team: BTreeMap<String, u64>,
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
        let sum = self.by_team.entry(team.name.clone()).or_insert(0);
        *sum = sum.saturating_add(admission.gpus);
        let borrow = team.borrow_limit?;
        let ceiling = u64::from(team.quota.total) + u64::from(borrow);
        (*sum > ceiling).then(|| Rejection {
            kind: RejectKind::OverTeamLimit,
            message: format!(
                "teamshare: team {} may hold at most {} GPUs (quota {} + borrow limit {}); the components of this heterogeneous job ask for {} together",
                team.name, ceiling, team.quota.total, borrow, sum
            ),
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
            total.add(&gpu_count(spec)?.times(factor));
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
    },
}

fn reject(kind: RejectKind, message: String) -> Rejection {
    Rejection { kind, message }
}

/// The checks that need only the configuration and the request: a readable, sane GPU count,
/// never the internal QOS for a user, a team for GPU jobs in governed partitions, the team's
/// ceiling (quota + borrow limit), a known priority class.
pub(crate) fn screen_request<'c>(
    config: &'c Config,
    req: &SubmitRequest,
) -> Result<Screened<'c>, Rejection> {
    let gpus = gpus_requested(&req.gpus)
        .map_err(|e| reject(RejectKind::InvalidGres, format!("teamshare: {e}")))?;
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

    if let Some(borrow) = team.borrow_limit {
        let ceiling = u64::from(team.quota.total) + u64::from(borrow);
        if gpus.total > ceiling {
            return Err(reject(
                RejectKind::OverTeamLimit,
                format!(
                    "teamshare: team {} may hold at most {} GPUs (quota {} + borrow limit {}); this job asks for {}",
                    team.name, ceiling, team.quota.total, borrow, gpus.total
                ),
            ));
        }
    }

    // The priority class comes in as --qos=<class>; an empty QOS is no class.
    let class = match req.qos.as_deref().filter(|q| !q.is_empty()) {
        None => 0,
        // Only an operator gets this far with it.
        Some(q) if is_internal_qos(q) => 0,
        Some(q) => governance::class_index(config, q).ok_or_else(|| {
            reject(
                RejectKind::UnknownClass,
                format!(
                    "teamshare: {q} is not a priority class; use --qos={} or no --qos",
                    class_names(config)
                ),
            )
        })?,
    };
    Ok(Screened::Governed { gpus, team, class })
}

pub(crate) fn larger_than_cluster(config: &Config, capacity: u32, gpus: u64) -> Option<Rejection> {
    (gpus > u64::from(capacity)).then(|| {
        reject(
            RejectKind::LargerThanCluster,
            format!(
                "teamshare: the governed partitions ({}) have {} usable GPUs; this job asks for {}",
                config.cluster.partitions.join(","),
                capacity,
                gpus
            ),
        )
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

/// Decide whether a new job may be submitted, and how it enters the queue.
pub fn check_submit(config: &Config, req: &SubmitRequest, view: StateView<'_>) -> Verdict {
    let (gpus, team, class) = match screen_request(config, req) {
        Err(r) => return Verdict::Reject(r),
        Ok(Screened::Ungoverned { gpus }) => {
            return Verdict::Accept(Admission {
                gpus,
                ..Admission::default()
            })
        }
        Ok(Screened::Governed { gpus, team, class }) => (gpus, team, class),
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
            return match config.governance.on_stale_state {
                OnStaleState::FailOpen => Verdict::Accept(Admission {
                    gpus: gpus.total,
                    team: Some(team.name.clone()),
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
            };
        }
    };

    if let Some(r) = larger_than_cluster(config, state.capacity, gpus.total) {
        return Verdict::Reject(r);
    }

    let (running, pending) = state
        .teams
        .get(&team.name)
        .map(|t| (t.running_gpus, t.pending_in_quota_gpus))
        .unwrap_or((0, 0));
    let admitted_team = admitted.by_team.get(&team.name).copied().unwrap_or(0);
    let room = team.quota.total.saturating_sub(
        running
            .saturating_add(pending)
            .saturating_add(admitted_team),
    );
    // An array's tasks each ask for `gpus`: as many as may run at once and fit the room are
    // in quota (the record is ranked in quota when one is; the team's limit keeps the others
    // to what it may borrow). An index the parser cannot read is Slurm's to refuse: one task.
    let tasks = req
        .array
        .as_deref()
        .and_then(crate::array::parse_tasks)
        .map_or(1, |t| {
            u32::try_from(t.concurrent()).unwrap_or(u32::MAX).max(1)
        });
    let fitting = room.checked_div(gpus32).map_or(tasks, |n| tasks.min(n));
    let in_quota = fitting > 0;
    let in_quota_gpus = fitting.saturating_mul(gpus32);
    let level = if in_quota {
        let k = state
            .pending_in_quota_gpus
            .saturating_add(admitted.total)
            .saturating_add(in_quota_gpus)
            .saturating_sub(state.free_gpus);
        state.reclaim_level(k, now)
    } else {
        // The governor ranks borrowers on its next pass.
        priority::BORROW_BASE
    };
    Verdict::Accept(Admission {
        gpus: gpus.total,
        team: Some(team.name.clone()),
        qos: Some(INTERNAL_QOS),
        priority: Some(priority::encode(level, class)),
        in_quota,
        in_quota_gpus,
        park_secs: (!preemptible && !in_quota).then_some(governance::PARK_SECS),
    })
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
mod tests {
    use super::*;

    use crate::test_config::config;

    fn idle_state() -> PublishedState {
        PublishedState {
            version: governance::STATE_VERSION,
            config_digest: String::new(),
            generated_at: 100,
            capacity: 8,
            free_gpus: 8,
            pending_in_quota_gpus: 0,
            teams: BTreeMap::new(),
            victims: vec![],
            acted_at: 0,
        }
    }

    fn check_submit(config: &Config, req: &SubmitRequest) -> Verdict {
        let state = idle_state();
        let admitted = Admitted::default();
        super::check_submit(
            config,
            req,
            StateView::Fresh {
                state: &state,
                admitted: &admitted,
                now: 100,
            },
        )
    }

    fn req(account: Option<&str>, ask: GpuAsk) -> SubmitRequest {
        SubmitRequest {
            account: account.map(str::to_string),
            partition: Some("gpu".into()),
            qos: None,
            user_id: 1000,
            submit_uid: 1000,
            gpus: ask,
            array: None,
        }
    }

    fn per_node(spec: &str, nodes: Option<u32>) -> GpuAsk {
        GpuAsk {
            tres_per_node: Some(spec.into()),
            min_nodes: nodes,
            ..GpuAsk::default()
        }
    }

    #[test]
    fn counts_every_place_a_request_can_name_gpus() {
        assert_eq!(
            gpus_requested(&per_node("gres:gpu:2", Some(3)))
                .unwrap()
                .total,
            6
        );
        assert_eq!(
            gpus_requested(&per_node("gres/gpu:2", None)).unwrap().total,
            2
        );
        let per_task = GpuAsk {
            tres_per_task: Some("gres:gpu:1".into()),
            num_tasks: Some(5),
            ..GpuAsk::default()
        };
        assert_eq!(gpus_requested(&per_task).unwrap().total, 5);
        let per_task_by_node = GpuAsk {
            tres_per_task: Some("gres/gpu:1".into()),
            ntasks_per_node: Some(2),
            min_nodes: Some(2),
            ..GpuAsk::default()
        };
        assert_eq!(gpus_requested(&per_task_by_node).unwrap().total, 4);
        let per_socket = GpuAsk {
            tres_per_socket: Some("gres:gpu:1".into()),
            sockets_per_node: Some(2),
            min_nodes: Some(2),
            ..GpuAsk::default()
        };
        assert_eq!(gpus_requested(&per_socket).unwrap().total, 4);
        let per_job = GpuAsk {
            tres_per_job: Some("gres:gpu:h100:6".into()),
            ..GpuAsk::default()
        };
        let c = gpus_requested(&per_job).unwrap();
        assert_eq!((c.total, c.by_type["h100"]), (6, 6));
    }

    #[test]
    fn heterogeneous_components_are_summed_per_team() {
        let c = config();
        let three = |team: &str| Admission {
            gpus: 3,
            team: Some(team.to_string()),
            ..Admission::default()
        };
        let mut tally = HetJobTally::default();
        // agents may hold 4: 3 + 3 in one heterogeneous job never fits.
        assert_eq!(tally.add(&c, Some(0), &three("agents")), None);
        let r = tally.add(&c, Some(1), &three("agents")).expect("refused");
        assert_eq!(r.kind, RejectKind::OverTeamLimit);
        assert!(r.message.contains("ask for 6 together"), "{}", r.message);
        // A new heterogeneous job (offset 0) or an ordinary one starts afresh.
        assert_eq!(tally.add(&c, Some(0), &three("agents")), None);
        assert_eq!(tally.add(&c, None, &three("agents")), None);
        assert_eq!(tally.add(&c, Some(1), &three("agents")), None);
        // research has no borrow limit; other teams' components count apart.
        assert_eq!(tally.add(&c, Some(0), &three("research")), None);
        assert_eq!(tally.add(&c, Some(1), &three("research")), None);
    }

    #[test]
    fn unknown_team_is_refused_with_the_teams_that_exist() {
        let v = check_submit(
            &config(),
            &req(Some("nosuch"), per_node("gres:gpu:1", None)),
        );
        let Verdict::Reject(r) = v else {
            panic!("accepted")
        };
        assert_eq!(r.kind, RejectKind::UnknownTeam);
        assert!(r.message.contains("nosuch") && r.message.contains("agents, research"));
    }

    #[test]
    fn over_quota_plus_borrow_is_refused_with_the_arithmetic() {
        let job = GpuAsk {
            tres_per_job: Some("gres:gpu:6".into()),
            ..GpuAsk::default()
        };
        let Verdict::Reject(r) = check_submit(&config(), &req(Some("agents"), job)) else {
            panic!("accepted")
        };
        assert_eq!(r.kind, RejectKind::OverTeamLimit);
        assert_eq!(
            r.message,
            "teamshare: team agents may hold at most 4 GPUs (quota 2 + borrow limit 2); this job asks for 6"
        );
    }

    #[test]
    fn at_the_ceiling_is_accepted_and_no_borrow_limit_means_no_ceiling() {
        let four = per_node("gres:gpu:4", None);
        let v = check_submit(&config(), &req(Some("agents"), four));
        assert_eq!(v.admission().map(|a| a.gpus), Some(4));
        // research has no borrow limit: only the cluster's size bounds it.
        let eight = per_node("gres:gpu:4", Some(2));
        let v = check_submit(&config(), &req(Some("research"), eight));
        assert_eq!(v.admission().map(|a| a.gpus), Some(8));
    }

    #[test]
    fn an_array_is_judged_task_by_task() {
        let one = per_node("gres:gpu:1", None);
        let array = |spec: &str, gpus: GpuAsk| SubmitRequest {
            array: Some(spec.into()),
            ..req(Some("agents"), gpus)
        };
        // agents (quota 2 + 2): 1,000 one-GPU tasks are accepted (each could run), two of
        // them in quota, and those two are what the next submissions see as taken.
        let state = idle_state();
        let mut admitted = Admitted::default();
        fn view<'a>(state: &'a PublishedState, admitted: &'a Admitted) -> StateView<'a> {
            StateView::Fresh {
                state,
                admitted,
                now: 100,
            }
        }
        let v = super::check_submit(
            &config(),
            &array("1-1000", one.clone()),
            view(&state, &admitted),
        );
        let a = v.admission().expect("accepted").clone();
        assert_eq!((a.in_quota, a.in_quota_gpus), (true, 2));
        admitted.record(&a);
        let v = super::check_submit(
            &config(),
            &req(Some("agents"), one.clone()),
            view(&state, &admitted),
        );
        assert_eq!(v.admission().map(|a| a.in_quota), Some(false));
        // Throttled to one task at a time: only that one counts.
        let v = check_submit(&config(), &array("1-1000%1", one.clone()));
        assert_eq!(v.admission().map(|a| a.in_quota_gpus), Some(1));
        // Refused only when one task could never fit: 5 GPUs each, agents may hold 4.
        let five = per_node("gres:gpu:5", None);
        assert!(matches!(
            check_submit(&config(), &array("1-2", five)),
            Verdict::Reject(r) if r.kind == RejectKind::OverTeamLimit
        ));
        // An index Slurm will refuse anyway counts as one task.
        let v = check_submit(&config(), &array("1-x", one));
        assert_eq!(v.admission().map(|a| a.in_quota_gpus), Some(1));
    }

    #[test]
    fn jobs_outside_governed_partitions_pass() {
        let mut r = req(Some("nosuch"), per_node("gres:gpu:8", None));
        r.partition = Some("cpu".into());
        assert!(matches!(
            check_submit(&config(), &r),
            Verdict::Accept { .. }
        ));
    }

    #[test]
    fn gpu_job_without_account_must_name_its_team() {
        let v = check_submit(&config(), &req(None, per_node("gres:gpu:1", None)));
        assert!(matches!(
            v,
            Verdict::Reject(Rejection {
                kind: RejectKind::NoTeam,
                ..
            })
        ));
        // A CPU-only job without an account is not teamshare's business.
        let v = check_submit(&config(), &req(None, GpuAsk::default()));
        assert_eq!(v.admission().map(|a| (a.gpus, a.qos)), Some((0, None)));
    }

    fn kind(v: &Verdict) -> Option<RejectKind> {
        match v {
            Verdict::Accept(_) => None,
            Verdict::Reject(r) => Some(r.kind),
        }
    }

    #[test]
    fn absurd_counts_are_refused_whatever_the_state_or_the_team() {
        let c = config();
        // research has no borrow limit; with stale state nothing else bounds it.
        for spec in [
            "gres:gpu:1t",
            "gres:gpu:2m",
            "gres/gpu:h100:1p",
            "gres:gpu:16777216t",
        ] {
            let r = req(Some("research"), per_node(spec, None));
            for v in [
                check_submit(&c, &r),
                super::check_submit(&c, &r, StateView::Stale),
            ] {
                let Verdict::Reject(rej) = v else {
                    panic!("{spec} accepted")
                };
                assert_eq!(rej.kind, RejectKind::InvalidGres);
                assert!(
                    rej.message.contains("more than any job may (1048576)"),
                    "{}",
                    rej.message
                );
            }
        }
        // Even outside the governed partitions, and without a team.
        let mut r = req(None, per_node("gres:gpu:1t", None));
        r.partition = Some("cpu".into());
        assert_eq!(kind(&check_submit(&c, &r)), Some(RejectKind::InvalidGres));
        // Per node times nodes, beyond the bound.
        let r = req(Some("research"), per_node("gres:gpu:1k", Some(1025)));
        assert_eq!(kind(&check_submit(&c, &r)), Some(RejectKind::InvalidGres));
    }

    #[test]
    fn the_internal_qos_is_refused_to_users_in_every_case() {
        let c = config();
        let mut cpu_only = req(None, GpuAsk::default());
        for qos in ["teamshare", "TeamShare"] {
            cpu_only.qos = Some(qos.into());
            assert_eq!(
                kind(&check_submit(&c, &cpu_only)),
                Some(RejectKind::InternalQos)
            );
        }
        let mut elsewhere = req(Some("nosuch"), per_node("gres:gpu:1", None));
        elsewhere.partition = Some("cpu".into());
        elsewhere.qos = Some("teamshare".into());
        assert_eq!(
            kind(&check_submit(&c, &elsewhere)),
            Some(RejectKind::InternalQos)
        );
        // An operator may.
        cpu_only.submit_uid = 0;
        assert_eq!(kind(&check_submit(&c, &cpu_only)), None);
        // An empty QOS is no class.
        let mut none = req(Some("agents"), per_node("gres:gpu:1", None));
        none.qos = Some(String::new());
        assert_eq!(kind(&check_submit(&c, &none)), None);
    }

    #[test]
    fn without_configuration_only_gpu_jobs_are_refused() {
        let cpu = req(
            Some("agents"),
            GpuAsk {
                min_nodes: Some(4),
                num_tasks: Some(64),
                ..GpuAsk::default()
            },
        );
        assert!(check_without_config(&cpu).admission().is_some());
        for ask in [
            per_node("gres:gpu:1", None),
            per_node("gres:gpu:x:y:z", None),
        ] {
            assert_eq!(
                kind(&check_without_config(&req(None, ask))),
                Some(RejectKind::NoConfiguration)
            );
        }
    }

    #[test]
    fn ntasks_per_gpu_counts_like_slurm() {
        let mut ask = GpuAsk {
            num_tasks: Some(8),
            ..GpuAsk::default()
        };
        apply_ntasks_per_gpu(&mut ask, Some(2));
        assert_eq!(gpus_requested(&ask).unwrap().total, 4);
        // GPUs named: the task count follows from them, nothing is added.
        let mut ask = per_node("gres:gpu:2", Some(2));
        apply_ntasks_per_gpu(&mut ask, Some(4));
        assert_eq!(gpus_requested(&ask).unwrap().total, 4);
        // No task count: one GPU per node.
        let mut ask = GpuAsk {
            min_nodes: Some(3),
            ..GpuAsk::default()
        };
        apply_ntasks_per_gpu(&mut ask, Some(4));
        assert_eq!(gpus_requested(&ask).unwrap().total, 3);
    }

    #[test]
    fn unreadable_gres_is_refused() {
        let v = check_submit(
            &config(),
            &req(Some("agents"), per_node("gres:gpu:lots:x:y", None)),
        );
        assert!(matches!(
            v,
            Verdict::Reject(Rejection {
                kind: RejectKind::InvalidGres,
                ..
            })
        ));
    }
}
