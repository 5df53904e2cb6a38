//! `scontrol update` of a job (job_modify), as a pure function of the configuration and an owned
//! copy of the update.
//!
//! The update holds only the fields the user changes; the job as it is (`job_record_t`) is
//! slurmctld's internal struct, whose layout changes every release, so it is never read. Fields
//! the update leaves out keep the job's values, which teamshare cannot see: an update that moves
//! what decides the job's GPUs, team or partition is judged only when it restates everything
//! that decides them, and then by the same checks as a submission ([`crate::submit`]).
//!
//! For users (any uid but 0):
//! - the QOS is teamshare's: changing or clearing it (`qos=`) is refused;
//! - the priority is teamshare's: only hold (0) and release (Slurm's INFINITE) pass;
//! - GPU counts that cannot be read, or that exceed [`MAX_GPUS_PER_JOB`], are refused;
//! - an update naming any of TresPerJob/Node/Task/Socket (`Gres=`), NumNodes, NumTasks,
//!   NTasksPerNode, ReqSockets, NTasksPerTRES, Partition or Account must either move the job to
//!   partitions teamshare does not govern, or restate the whole GPU request: all four
//!   TresPer* fields (an empty value clears one, as Slurm reads it), NumNodes with a per-node or
//!   per-socket count, ReqSockets with a per-socket count, NumTasks with a per-task count or
//!   NTasksPerTRES; it is then judged like a submission (team, ceiling, cluster size, internal
//!   QOS), and a job that becomes governed is moved into the internal QOS.
//!
//! Operators (uid 0) may change anything; only unreadable or absurd GPU counts are refused.
//! Hold/release, TimeLimit, Name, Comment, StartTime, Dependency and every other field pass.

use crate::governance::PublishedState;
use crate::gres::MAX_GPUS_PER_JOB;
use crate::priority::INTERNAL_QOS;
use crate::submit::{
    apply_ntasks_per_gpu, gpus_requested, screen_request, Admission, GpuAsk, RejectKind, Rejection,
    Screened, SubmitRequest, Verdict,
};
use teamshare_config::Config;

/// Slurm's INFINITE: the priority `scontrol release` writes.
pub const RELEASE_PRIORITY: u32 = u32::MAX;
/// The priority `scontrol hold` writes.
pub const HOLD_PRIORITY: u32 = 0;

/// An owned copy of an update. `None` is a field the update does not set (NULL, NO_VAL);
/// `Some("")` is a field it sets to empty (no QOS, default account, cleared GRES), which is a
/// change like any other.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ModifyRequest {
    /// Who asks: uid 0 is an operator.
    pub submit_uid: u32,
    pub account: Option<String>,
    pub partition: Option<String>,
    pub qos: Option<String>,
    pub priority: Option<u32>,
    pub gpus: GpuAsk,
    /// `ntasks_per_tres` (`--ntasks-per-gpu`).
    pub ntasks_per_gpu: Option<u32>,
}

fn reject(kind: RejectKind, message: String) -> Verdict {
    Verdict::Reject(Rejection { kind, message })
}

/// Decide whether an update may be applied. `state` is the governor's state when it is
/// current (a job larger than the governed capacity, of its type, is refused), `None`
/// otherwise.
pub fn check_modify(
    config: &Config,
    req: &ModifyRequest,
    state: Option<&PublishedState>,
) -> Verdict {
    let operator = req.submit_uid == 0;
    if !operator {
        if let Some(refused) = teamshares_own(req) {
            return refused;
        }
    }

    // Whatever it says otherwise, a GPU count must be readable and sane.
    let mut ask = req.gpus.clone();
    apply_ntasks_per_gpu(&mut ask, req.ntasks_per_gpu);
    let gpus = match gpus_requested(&ask) {
        Ok(g) => g,
        Err(e) => return reject(RejectKind::InvalidGres, format!("teamshare: {e}")),
    };
    if gpus.total > MAX_GPUS_PER_JOB {
        return reject(
            RejectKind::InvalidGres,
            format!(
                "teamshare: this update asks for {} GPUs, more than any job may ({MAX_GPUS_PER_JOB}); a count suffix multiplies (k = 1024, m = 1024^2, g, t, p), so write the count as a plain number",
                gpus.total
            ),
        );
    }
    if operator {
        return Verdict::Accept(Admission::default());
    }

    let changed = changed_fields(req);
    if changed.is_empty() {
        return Verdict::Accept(Admission::default());
    }

    // Moving the job out of governance entirely needs no more.
    if let Some(p) = req.partition.as_deref().filter(|p| !p.is_empty()) {
        let governed = p
            .split(',')
            .any(|p| config.cluster.partitions.iter().any(|g| g == p.trim()));
        if !governed {
            return Verdict::Accept(Admission::default());
        }
    }

    let missing = missing_for_judgement(req);
    if !missing.is_empty() {
        return reject(
            RejectKind::IncompleteUpdate,
            format!(
                "teamshare: changing {} needs the whole GPU request, since the job's other fields are not visible here; add {} (an empty TresPer* clears it), e.g. Account=<team> TresPerJob=gres:gpu:<N> TresPerNode= TresPerTask= TresPerSocket=; or name only ungoverned partitions (governed: {})",
                changed.join(","),
                missing.join(" "),
                config.cluster.partitions.join(",")
            ),
        );
    }

    judge_as_submitted(config, req, ask, state)
}

/// A user's change to what teamshare sets is refused: the QOS, and the priority (but hold and
/// release).
fn teamshares_own(req: &ModifyRequest) -> Option<Verdict> {
    if let Some(q) = &req.qos {
        let what = if q.is_empty() {
            "clear".to_string()
        } else {
            format!("change it to {q}")
        };
        return Some(reject(
            RejectKind::QosChange,
            format!(
                "teamshare: a job's QOS is set by teamshare, so you cannot {what}; the priority class is chosen at submit with --qos=<class> (resubmit to change it)"
            ),
        ));
    }
    match req.priority {
        Some(p) if p != HOLD_PRIORITY && p != RELEASE_PRIORITY => Some(reject(
            RejectKind::PriorityChange,
            format!(
                "teamshare: a job's priority is set by teamshare, so you cannot set it to {p}; hold and release still work"
            ),
        )),
        _ => None,
    }
}

/// An update that restates the whole GPU request (`ask`, with `--ntasks-per-gpu` applied),
/// judged like a submission.
fn judge_as_submitted(
    config: &Config,
    req: &ModifyRequest,
    ask: GpuAsk,
    state: Option<&PublishedState>,
) -> Verdict {
    let as_submitted = SubmitRequest {
        account: req.account.clone(),
        partition: req.partition.clone(),
        qos: None,
        user_id: req.submit_uid,
        submit_uid: req.submit_uid,
        gpus: ask,
        array: None,
        // Only screened: no priority comes of it.
        waits: false,
    };
    match screen_request(config, &as_submitted) {
        Err(r) => Verdict::Reject(r),
        Ok(Screened::Ungoverned { gpus }) => Verdict::Accept(Admission {
            gpus,
            ..Admission::default()
        }),
        Ok(Screened::Governed {
            gpus,
            team,
            gpu_type,
            ..
        }) => {
            if let Some(r) = state.and_then(|s| {
                crate::submit::larger_than_cluster(config, s, &gpus, gpu_type.as_deref())
            }) {
                return Verdict::Reject(r);
            }
            // The job is governed from now on: it joins the internal QOS (the governor sets
            // its priority on its next pass).
            Verdict::Accept(Admission {
                gpus: gpus.total,
                team: Some(team.name.clone()),
                gpu_type,
                qos: Some(INTERNAL_QOS),
                ..Admission::default()
            })
        }
    }
}

/// The fields of the update that decide the job's GPUs, team or partition, named as
/// `scontrol update` spells them.
fn changed_fields(req: &ModifyRequest) -> Vec<&'static str> {
    let g = &req.gpus;
    [
        ("Account", req.account.is_some()),
        ("Partition", req.partition.is_some()),
        ("TresPerJob", g.tres_per_job.is_some()),
        ("TresPerNode", g.tres_per_node.is_some()),
        ("TresPerTask", g.tres_per_task.is_some()),
        ("TresPerSocket", g.tres_per_socket.is_some()),
        ("NumNodes", g.min_nodes.is_some()),
        ("NumTasks", g.num_tasks.is_some()),
        ("NTasksPerNode", g.ntasks_per_node.is_some()),
        ("ReqSockets", g.sockets_per_node.is_some()),
        ("NTasksPerTRES", req.ntasks_per_gpu.is_some()),
    ]
    .into_iter()
    .filter_map(|(name, set)| set.then_some(name))
    .collect()
}

/// What the update must add before the job after it can be judged.
fn missing_for_judgement(req: &ModifyRequest) -> Vec<&'static str> {
    let g = &req.gpus;
    let names_gpu = |s: &Option<String>| {
        s.as_deref()
            .is_some_and(|s| gpus_requested(&per_job(s)).is_ok_and(|c| !c.is_zero()))
    };
    let mut missing = Vec::new();
    for (name, field) in [
        ("TresPerJob=", &g.tres_per_job),
        ("TresPerNode=", &g.tres_per_node),
        ("TresPerTask=", &g.tres_per_task),
        ("TresPerSocket=", &g.tres_per_socket),
    ] {
        if field.is_none() {
            missing.push(name);
        }
    }
    let nodes_needed = names_gpu(&g.tres_per_node) || names_gpu(&g.tres_per_socket);
    if nodes_needed && g.min_nodes.is_none() {
        missing.push("NumNodes=<n>");
    }
    if names_gpu(&g.tres_per_socket) && g.sockets_per_node.is_none() {
        missing.push("ReqSockets=<n>");
    }
    let tasks_needed = names_gpu(&g.tres_per_task) || req.ntasks_per_gpu.is_some_and(|n| n != 0);
    if tasks_needed && g.num_tasks.is_none() {
        missing.push("NumTasks=<n>");
    }
    missing
}

fn per_job(spec: &str) -> GpuAsk {
    GpuAsk {
        tres_per_job: Some(spec.to_string()),
        ..GpuAsk::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::test_config::config;

    fn user() -> ModifyRequest {
        ModifyRequest {
            submit_uid: 1000,
            ..ModifyRequest::default()
        }
    }

    /// The whole GPU request, restated.
    fn restated(account: &str, per_job: &str) -> ModifyRequest {
        ModifyRequest {
            account: Some(account.into()),
            gpus: GpuAsk {
                tres_per_job: Some(per_job.into()),
                tres_per_node: Some(String::new()),
                tres_per_task: Some(String::new()),
                tres_per_socket: Some(String::new()),
                ..GpuAsk::default()
            },
            ..user()
        }
    }

    fn kind(v: &Verdict) -> Option<RejectKind> {
        match v {
            Verdict::Accept(_) => None,
            Verdict::Reject(r) => Some(r.kind),
        }
    }

    #[test]
    fn clearing_or_changing_the_qos_is_refused_for_users_only() {
        for qos in ["", "normal", "teamshare", "inference"] {
            let r = ModifyRequest {
                qos: Some(qos.into()),
                ..user()
            };
            assert_eq!(
                kind(&check_modify(&config(), &r, None)),
                Some(RejectKind::QosChange),
                "{qos:?}"
            );
        }
        let root = ModifyRequest {
            qos: Some(String::new()),
            ..ModifyRequest::default()
        };
        assert_eq!(kind(&check_modify(&config(), &root, None)), None);
    }

    #[test]
    fn hold_release_and_harmless_fields_pass() {
        for p in [None, Some(HOLD_PRIORITY), Some(RELEASE_PRIORITY)] {
            let r = ModifyRequest {
                priority: p,
                ..user()
            };
            assert_eq!(kind(&check_modify(&config(), &r, None)), None);
        }
        let raise = ModifyRequest {
            priority: Some(5_000_000),
            ..user()
        };
        assert_eq!(
            kind(&check_modify(&config(), &raise, None)),
            Some(RejectKind::PriorityChange)
        );
    }

    #[test]
    fn gpu_fields_without_the_whole_request_are_refused_with_what_to_add() {
        let r = ModifyRequest {
            gpus: GpuAsk {
                tres_per_node: Some("gres:gpu:8".into()),
                ..GpuAsk::default()
            },
            ..user()
        };
        let Verdict::Reject(rej) = check_modify(&config(), &r, None) else {
            panic!("accepted")
        };
        assert_eq!(rej.kind, RejectKind::IncompleteUpdate);
        assert!(
            rej.message.contains("changing TresPerNode"),
            "{}",
            rej.message
        );
        assert!(rej
            .message
            .contains("TresPerJob= TresPerTask= TresPerSocket= NumNodes=<n>"));
        assert!(!rej.message.contains('\n'));
        // Account alone, nodes alone, a governed partition alone: the same.
        for r in [
            ModifyRequest {
                account: Some("agents".into()),
                ..user()
            },
            ModifyRequest {
                gpus: GpuAsk {
                    min_nodes: Some(64),
                    ..GpuAsk::default()
                },
                ..user()
            },
            ModifyRequest {
                partition: Some("gpu".into()),
                ..user()
            },
            ModifyRequest {
                account: Some(String::new()),
                ..user()
            },
        ] {
            assert_eq!(
                kind(&check_modify(&config(), &r, None)),
                Some(RejectKind::IncompleteUpdate),
                "{r:?}"
            );
        }
    }

    fn state_of(capacity: u32) -> PublishedState {
        PublishedState {
            bands: Default::default(),
            version: crate::governance::STATE_VERSION,
            generated_at: 0,
            config_digest: String::new(),
            capacity,
            capacity_by_type: std::collections::BTreeMap::new(),
            free_gpus: capacity,
            pending_in_quota_gpus: 0,
            reclaim_gpus: 0,
            spare_gpus: None,
            teams: std::collections::BTreeMap::new(),
            victims: Vec::new(),
            acted_at: 0,
            read_at_ms: 0,
            pools: std::collections::BTreeMap::new(),
            slurm_partitions: None,
            node_gpus: 0,
            node_gpus_by_type: std::collections::BTreeMap::new(),
            unsettled_gpus: 0,
            unsettled_gpus_by_type: std::collections::BTreeMap::new(),
        }
    }

    #[test]
    fn a_restated_request_is_judged_like_a_submission() {
        let c = config();
        let eight = state_of(8);
        let ok = check_modify(&c, &restated("agents", "gres:gpu:4"), Some(&eight));
        assert_eq!(
            ok.admission().map(|a| (a.gpus, a.qos)),
            Some((4, Some(INTERNAL_QOS)))
        );
        assert_eq!(
            kind(&check_modify(
                &c,
                &restated("agents", "gres:gpu:5"),
                Some(&eight)
            )),
            Some(RejectKind::OverTeamLimit)
        );
        assert_eq!(
            kind(&check_modify(
                &c,
                &restated("research", "gres:gpu:9"),
                Some(&eight)
            )),
            Some(RejectKind::LargerThanCluster)
        );
        // Stale state: the cluster's size is unknown, the team's ceiling still holds.
        assert_eq!(
            kind(&check_modify(&c, &restated("research", "gres:gpu:9"), None)),
            None
        );
        assert_eq!(
            kind(&check_modify(&c, &restated("nosuch", "gres:gpu:1"), None)),
            Some(RejectKind::UnknownTeam)
        );
        // Issue 30: a share of a GPU is refused as at submit.
        assert_eq!(
            kind(&check_modify(
                &c,
                &restated("agents", "gres/shard:2"),
                Some(&eight)
            )),
            Some(RejectKind::GpuShare)
        );
        // The default account ("") cannot be judged: a GPU job must name its team.
        assert_eq!(
            kind(&check_modify(&c, &restated("", "gres:gpu:1"), None)),
            Some(RejectKind::NoTeam)
        );
    }

    #[test]
    fn per_node_counts_need_the_node_count() {
        let c = config();
        let mut r = restated("agents", "");
        r.gpus.tres_per_node = Some("gres:gpu:2".into());
        assert_eq!(
            kind(&check_modify(&c, &r, None)),
            Some(RejectKind::IncompleteUpdate)
        );
        r.gpus.min_nodes = Some(3);
        assert_eq!(
            kind(&check_modify(&c, &r, None)),
            Some(RejectKind::OverTeamLimit)
        );
        r.gpus.min_nodes = Some(2);
        assert_eq!(kind(&check_modify(&c, &r, None)), None);
    }

    #[test]
    fn absurd_counts_are_refused_even_for_operators_and_without_a_team() {
        let c = config();
        for uid in [0, 1000] {
            let r = ModifyRequest {
                submit_uid: uid,
                gpus: GpuAsk {
                    tres_per_node: Some("gres:gpu:1t".into()),
                    ..GpuAsk::default()
                },
                ..ModifyRequest::default()
            };
            assert_eq!(
                kind(&check_modify(&c, &r, None)),
                Some(RejectKind::InvalidGres)
            );
        }
    }

    #[test]
    fn leaving_governance_or_dropping_every_gpu_passes() {
        let c = config();
        let r = ModifyRequest {
            partition: Some("cpu".into()),
            gpus: GpuAsk {
                min_nodes: Some(4),
                ..GpuAsk::default()
            },
            ..user()
        };
        assert_eq!(
            check_modify(&c, &r, None).admission().map(|a| a.qos),
            Some(None)
        );
        // A CPU job growing: every GPU field cleared, no team needed.
        let mut r = restated("", "");
        r.account = None;
        r.gpus.min_nodes = Some(4);
        assert_eq!(
            check_modify(&c, &r, None).admission().map(|a| a.gpus),
            Some(0)
        );
    }

    #[test]
    fn ntasks_per_gpu_derives_gpus_as_slurm_does() {
        let c = config();
        let mut r = restated("agents", "");
        r.ntasks_per_gpu = Some(1);
        assert_eq!(
            kind(&check_modify(&c, &r, None)),
            Some(RejectKind::IncompleteUpdate)
        );
        r.gpus.num_tasks = Some(64);
        assert_eq!(
            kind(&check_modify(&c, &r, None)),
            Some(RejectKind::OverTeamLimit)
        );
        r.gpus.num_tasks = Some(8);
        r.ntasks_per_gpu = Some(2);
        assert_eq!(
            check_modify(&c, &r, None).admission().map(|a| a.gpus),
            Some(4)
        );
    }
}
