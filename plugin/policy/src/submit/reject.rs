//! Why a request is refused: the kinds the FFI layer maps to Slurm's error codes, and the
//! refusals that need no more than the request.

use teamshare_config::Config;

use super::GpuAsk;

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
    /// More GPUs than the governed partitions have (of the type asked for).
    LargerThanCluster,
    /// Untyped GPUs where GPUs are governed per type.
    UntypedGpus,
    /// GPUs of several types in one job where GPUs are governed per type.
    SeveralGpuTypes,
    /// A GPU type the configuration does not govern.
    GpuTypeNotOffered,
    /// A share of a GPU (`gres/shard`, `gres/mps`) in a governed partition: not counted by
    /// teamshare's quotas, so not allowed there ([`crate::gres::gpu_share`]).
    GpuShare,
    /// The governor's state is stale and `on_stale_state = "fail-closed"`.
    StaleState,
    /// `scontrol update` of a job's QOS (or clearing it) by a user: the QOS is teamshare's.
    QosChange,
    /// `scontrol update` of a job's priority by a user, other than hold and release.
    PriorityChange,
    /// `scontrol update` of what decides a job's GPUs, team or partition, without the whole
    /// GPU request teamshare needs to judge the job as it will be.
    IncompleteUpdate,
    /// A component of a heterogeneous job names a partition Slurm does not have
    /// ([`super::het_component_partition`]).
    UnknownPartition,
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
            RejectKind::UntypedGpus => "untyped_gpus",
            RejectKind::SeveralGpuTypes => "several_gpu_types",
            RejectKind::GpuTypeNotOffered => "gpu_type_not_offered",
            RejectKind::GpuShare => "gpu_share",
            RejectKind::StaleState => "stale_state",
            RejectKind::QosChange => "qos_change",
            RejectKind::PriorityChange => "priority_change",
            RejectKind::IncompleteUpdate => "incomplete_update",
            RejectKind::UnknownPartition => "unknown_partition",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejection {
    pub kind: RejectKind,
    /// One line for the user's terminal: why, and what would be accepted.
    pub message: String,
}

impl Rejection {
    pub(super) fn new(kind: RejectKind, message: String) -> Rejection {
        Rejection { kind, message }
    }
}

/// A share of a GPU asked for in a governed partition is refused, whoever asks: quotas,
/// limits and reclaim count whole GPUs, and Slurm counts shares apart from them.
///
/// Where `[gpu_types.shard]` governs shards (issue 30), a shard request is counted instead
/// ([`super::shares_requested`]), and refused only where it asks for more shards on a node
/// than one GPU has: Slurm takes a job's shards on a node from one GPU.
pub(super) fn shares_refused(config: &Config, ask: &GpuAsk) -> Result<(), Rejection> {
    let fields = [
        &ask.tres_per_job,
        &ask.tres_per_node,
        &ask.tres_per_task,
        &ask.tres_per_socket,
    ];
    let shares_in = |skip: Option<&str>| {
        fields
            .into_iter()
            .flatten()
            .find_map(|spec| crate::gres::gpu_share_but(spec, skip))
    };
    // Nearly every request asks for no share: decided before the configuration is asked.
    let Some(first) = shares_in(None) else {
        return Ok(());
    };
    let share = match config.shares() {
        // Governed shards are counted; any other share is still refused.
        Some(size) => match shares_in(Some("shard")) {
            None => return shards_per_node(config, ask, size.denominator, &size.of),
            other => other,
        },
        None => Some(first),
    };
    match share {
        None => Ok(()),
        Some(name) => Err(Rejection::new(
            RejectKind::GpuShare,
            format!(
                "teamshare: GPU shares (gres/{name}) are not counted in team quotas, so partitions {} take whole GPUs only: --gres=gpu:N or --gpus=N (a MIG slice is a GPU type: --gres=gpu:<type>:N)",
                config.cluster.partitions.join(",")
            ),
        )),
    }
}

/// A request for more shards on one node than one GPU of `of` has (`per_gpu`), refused.
fn shards_per_node(config: &Config, ask: &GpuAsk, per_gpu: u32, of: &str) -> Result<(), Rejection> {
    let per_node = ask
        .tres_per_node
        .as_deref()
        .map_or(Ok(0), crate::gres::shard_count)
        .unwrap_or(0);
    if per_node <= u64::from(per_gpu) {
        return Ok(());
    }
    Err(Rejection::new(
        RejectKind::InvalidGres,
        format!(
            "teamshare: this job asks for {per_node} shards on one node, more than one {of} GPU has ({per_gpu}), and Slurm takes a job's shards on a node from one GPU; in partitions {} ask for at most --gres=shard:{per_gpu} per node, or for whole GPUs: --gres=gpu:{of}:N",
            config.cluster.partitions.join(",")
        ),
    ))
}
