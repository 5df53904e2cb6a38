//! Submit-time checks (DESIGN §4 rule 7), as a pure function of the configuration and an owned
//! copy of the job request.

use crate::gres::{gpu_count, GpuCount, GresError};
use teamshare_config::Config;

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
    pub gpus: GpuAsk,
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
    Accept { gpus: u64 },
    Reject(Rejection),
}

/// The fewest GPUs the request can end up holding.
///
/// Counts that depend on placement (per node, per task, per socket) use the smallest placement
/// the request allows, so a job is refused only when it can never fit.
pub fn gpus_requested(ask: &GpuAsk) -> Result<GpuCount, GresError> {
    let nodes = u64::from(ask.min_nodes.unwrap_or(1).max(1));
    let tasks = match (ask.num_tasks, ask.ntasks_per_node) {
        (Some(n), _) => u64::from(n.max(1)),
        (None, Some(per_node)) => u64::from(per_node.max(1)) * nodes,
        (None, None) => nodes,
    };
    let sockets = u64::from(ask.sockets_per_node.unwrap_or(1).max(1)) * nodes;

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

/// Decide whether a new job may be submitted.
pub fn check_submit(config: &Config, req: &SubmitRequest) -> Verdict {
    let gpus = match gpus_requested(&req.gpus) {
        Ok(g) => g,
        Err(e) => {
            return Verdict::Reject(Rejection {
                kind: RejectKind::InvalidGres,
                message: format!("teamshare: {e}"),
            })
        }
    };

    let governed = match &req.partition {
        // No partition: the default one, which teamshare governs when it asks for GPUs.
        None => true,
        Some(p) => p
            .split(',')
            .any(|p| config.cluster.partitions.iter().any(|g| g == p.trim())),
    };
    if !governed || gpus.is_zero() && req.account.is_none() {
        return Verdict::Accept { gpus: gpus.total };
    }

    let team_names = || {
        config
            .teams
            .iter()
            .map(|t| t.name.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    };
    let Some(account) = req.account.as_deref() else {
        return Verdict::Reject(Rejection {
            kind: RejectKind::NoTeam,
            message: format!(
                "teamshare: GPU jobs must name their team with -A/--account (teams: {})",
                team_names()
            ),
        });
    };
    let Some(team) = config.team(account) else {
        return Verdict::Reject(Rejection {
            kind: RejectKind::UnknownTeam,
            message: format!(
                "teamshare: account {account} is not a team on this cluster; use -A with one of: {}",
                team_names()
            ),
        });
    };

    if let Some(borrow) = team.borrow_limit {
        let ceiling = u64::from(team.quota.total) + u64::from(borrow);
        if gpus.total > ceiling {
            return Verdict::Reject(Rejection {
                kind: RejectKind::OverTeamLimit,
                message: format!(
                    "teamshare: team {} may hold at most {} GPUs (quota {} + borrow limit {}); this job asks for {}",
                    team.name, ceiling, team.quota.total, borrow, gpus.total
                ),
            });
        }
    }
    Verdict::Accept { gpus: gpus.total }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CONFIG: &str = r#"
[cluster]
name = "test"
partitions = ["gpu"]

[[team]]
name = "agents"
quota = 2
borrow_limit = 2

[[team]]
name = "research"
quota = 2
"#;

    fn config() -> Config {
        teamshare_config::parse(CONFIG, "teamshare.toml").expect("test config is valid")
    }

    fn req(account: Option<&str>, ask: GpuAsk) -> SubmitRequest {
        SubmitRequest {
            account: account.map(str::to_string),
            partition: Some("gpu".into()),
            qos: None,
            user_id: 1000,
            gpus: ask,
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
        assert_eq!(gpus_requested(&per_node("gres:gpu:2", Some(3))).unwrap().total, 6);
        assert_eq!(gpus_requested(&per_node("gres/gpu:2", None)).unwrap().total, 2);
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
    fn unknown_team_is_refused_with_the_teams_that_exist() {
        let v = check_submit(&config(), &req(Some("nosuch"), per_node("gres:gpu:1", None)));
        let Verdict::Reject(r) = v else { panic!("accepted") };
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
        assert_eq!(
            check_submit(&config(), &req(Some("agents"), four)),
            Verdict::Accept { gpus: 4 }
        );
        let many = per_node("gres:gpu:8", Some(4));
        assert_eq!(
            check_submit(&config(), &req(Some("research"), many)),
            Verdict::Accept { gpus: 32 }
        );
    }

    #[test]
    fn jobs_outside_governed_partitions_pass() {
        let mut r = req(Some("nosuch"), per_node("gres:gpu:8", None));
        r.partition = Some("cpu".into());
        assert!(matches!(check_submit(&config(), &r), Verdict::Accept { .. }));
    }

    #[test]
    fn gpu_job_without_account_must_name_its_team() {
        let v = check_submit(&config(), &req(None, per_node("gres:gpu:1", None)));
        assert!(matches!(v, Verdict::Reject(Rejection { kind: RejectKind::NoTeam, .. })));
        // A CPU-only job without an account is not teamshare's business.
        let v = check_submit(&config(), &req(None, GpuAsk::default()));
        assert!(matches!(v, Verdict::Accept { gpus: 0 }));
    }

    #[test]
    fn unreadable_gres_is_refused() {
        let v = check_submit(&config(), &req(Some("agents"), per_node("gres:gpu:lots:x:y", None)));
        assert!(matches!(v, Verdict::Reject(Rejection { kind: RejectKind::InvalidGres, .. })));
    }
}
