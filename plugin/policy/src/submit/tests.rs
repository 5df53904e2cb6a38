//! The tests of `submit`.

use super::*;

/// Issue 25, finding 10: `--qos=inference --begin=now+1hour` beyond the quota lost the
/// user's begin time to the parking's (a year ahead); released when it fitted, the job then
/// started at once. The user's later begin time is never overwritten.
#[test]
fn issue25_10_a_users_begin_time_is_never_overwritten_by_parking() {
    let now = 1_000_000;
    let parked = Admission {
        park_secs: Some(governance::PARK_SECS),
        ..Admission::default()
    };
    assert_eq!(parked.begin_time(0, now), Some(now + governance::PARK_SECS));
    assert_eq!(
        parked.begin_time(now - 5, now),
        Some(now + governance::PARK_SECS)
    );
    assert_eq!(parked.begin_time(now + 3600, now), None);
    assert_eq!(Admission::default().begin_time(0, now), None);
}

use crate::test_config::config;

pub(super) fn idle_state() -> PublishedState {
    PublishedState {
        bands: Default::default(),
        version: governance::STATE_VERSION,
        config_digest: String::new(),
        generated_at: 100,
        capacity: 8,
        capacity_by_type: BTreeMap::new(),
        free_gpus: 8,
        pending_in_quota_gpus: 0,
        reclaim_gpus: 0,
        spare_gpus: None,
        teams: BTreeMap::new(),
        victims: vec![],
        acted_at: 0,
        read_at_ms: 0,
        pools: BTreeMap::new(),
        slurm_partitions: None,
        node_gpus: 0,
        node_gpus_by_type: BTreeMap::new(),
        unsettled_gpus: 0,
        unsettled_gpus_by_type: BTreeMap::new(),
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

pub(super) fn req(account: Option<&str>, ask: GpuAsk) -> SubmitRequest {
    SubmitRequest {
        waits: false,
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
    admitted.record(&a, 0);
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

/// Issue 25, finding 7: `--exclusive` holds every GPU of each node. With no GPUs named
/// and no team it was let through (and ran on 4 GPUs); a team's was counted as what it
/// named.
#[test]
fn issue25_7_a_whole_node_job_counts_every_gpu_of_its_nodes() {
    let types = BTreeMap::from([("h100".to_string(), 8)]);
    let whole = |mut ask: GpuAsk| {
        apply_whole_nodes(&mut ask, 4, &types);
        ask
    };
    // No GPUs named, no team: now a GPU job, refused for want of a team.
    let bare = whole(GpuAsk::default());
    assert_eq!(gpus_requested(&bare).unwrap().total, 4);
    assert_eq!(
        kind(&check_submit(&config(), &req(None, bare.clone()))),
        Some(RejectKind::NoTeam)
    );
    // A team's: counted as 4 (agents may hold 2 + 2: accepted, beyond its quota).
    match check_submit(&config(), &req(Some("agents"), bare)) {
        Verdict::Accept(a) => assert!(a.gpus == 4 && !a.in_quota, "{a:?}"),
        other => panic!("{other:?}"),
    }
    // Two nodes: 8, beyond agents' ceiling: refused at once.
    let two = whole(per_node("gres:gpu:1", Some(2)));
    assert_eq!(gpus_requested(&two).unwrap().total, 8);
    assert_eq!(
        kind(&check_submit(&config(), &req(Some("agents"), two))),
        Some(RejectKind::OverTeamLimit)
    );
    // A typed request counts its type's largest node.
    let typed = whole(per_node("gres:gpu:h100:1", None));
    let c = gpus_requested(&typed).unwrap();
    assert_eq!((c.total, c.by_type.get("h100").copied()), (8, Some(8)));
    // More than a node's worth named already: left as it is.
    let more = whole(per_node("gres:gpu:6", None));
    assert_eq!(more, per_node("gres:gpu:6", None));
    // No state yet: at least one GPU per node, so it still needs a team.
    let mut unknown = GpuAsk::default();
    apply_whole_nodes(&mut unknown, 0, &BTreeMap::new());
    assert_eq!(gpus_requested(&unknown).unwrap().total, 1);
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

const TYPED: &str = r#"
[cluster]
name = "test"
partitions = ["gpu"]
[gpu_types.h100]
rate_per_hour = 4
[gpu_types.a100]
rate_per_hour = 2

[[team]]
name = "agents"
quota = { h100 = 2 }
borrow_limit = 1

[[team]]
name = "training"
quota = { a100 = 2 }
borrow_limit = { h100 = 1 }
"#;

/// Issue 25, finding 9: `--gres=gpu:h100:4 : --gres=gpu:a100:3` of a team that may hold 6
/// in all passed each type's ceiling and waited for ever. Here agents may hold 3 in all
/// (quota 2 H100 + borrow limit 1), 3 H100 and 1 A100 each within their type's ceiling.
#[test]
fn issue25_9_a_typed_heterogeneous_job_is_held_to_the_teams_total_too() {
    let c = teamshare_config::parse(TYPED, "t.toml").unwrap();
    let ask = |gpus: u64, kind: &str| Admission {
        gpus,
        team: Some("agents".into()),
        gpu_type: Some(kind.into()),
        ..Admission::default()
    };
    let mut tally = HetJobTally::default();
    assert_eq!(tally.add(&c, Some(0), &ask(3, "h100")), None);
    let r = tally.add(&c, Some(1), &ask(1, "a100")).expect("refused");
    assert_eq!(r.kind, RejectKind::OverTeamLimit);
    assert!(
        r.message.contains("may hold at most 3 GPUs") && r.message.contains("4 of all types"),
        "{}",
        r.message
    );
    // 2 + 1 fits.
    assert_eq!(tally.add(&c, Some(0), &ask(2, "h100")), None);
    assert_eq!(tally.add(&c, Some(1), &ask(1, "a100")), None);
}

/// H100: 4, none free (agents holds 1, training borrows 3: the victims); A100: 4, free.
fn typed_state() -> PublishedState {
    let mut s = idle_state();
    s.capacity = 8;
    s.capacity_by_type = BTreeMap::from([("h100".into(), 4), ("a100".into(), 4)]);
    let team = |running| governance::TeamState {
        running_gpus: running,
        pending_in_quota_gpus: 0,
        gpu_limit: 0,
    };
    s.pools.insert(
        "h100".into(),
        governance::PoolState {
            capacity: 4,
            free_gpus: 0,
            pending_in_quota_gpus: 0,
            reclaim_gpus: 0,
            spare_gpus: None,
            // agents holds 1 H100; training borrows 3 H100 (victims).
            teams: BTreeMap::from([("agents".into(), team(1)), ("training".into(), team(3))]),
            victims: (0..3)
                .map(|rank| governance::Victim {
                    job_id: 10 + rank as u64,
                    team: "training".into(),
                    gpus: 1,
                    level: priority::victim_level(rank),
                    exempt_until: 0,
                    gpu_type: Some("h100".into()),
                })
                .collect(),
        },
    );
    s.pools.insert(
        "a100".into(),
        governance::PoolState {
            capacity: 4,
            free_gpus: 4,
            pending_in_quota_gpus: 0,
            reclaim_gpus: 0,
            spare_gpus: None,
            teams: BTreeMap::new(),
            victims: Vec::new(),
        },
    );
    s
}

/// Issue 25's soak: a heterogeneous job whose component names a partition Slurm does not
/// have is refused (whole) before slurmctld creates any component.
#[test]
fn a_heterogeneous_component_naming_no_such_partition_is_refused() {
    let offered: crate::offered::Offered = [("gpu", 8), ("cpu", 0)]
        .into_iter()
        .map(|(p, g)| {
            (
                p.to_string(),
                crate::offered::PartitionGpus {
                    gpus: g,
                    ..Default::default()
                },
            )
        })
        .collect();
    assert_eq!(het_component_partition(None, &offered), None);
    assert_eq!(het_component_partition(Some("gpu"), &offered), None);
    assert_eq!(het_component_partition(Some("cpu, gpu"), &offered), None);
    let r = het_component_partition(Some("gpu,nosuch"), &offered).unwrap();
    assert_eq!(r.kind, RejectKind::UnknownPartition);
    assert_eq!(
        r.message,
        "teamshare: partition nosuch does not exist (partitions: cpu,gpu); a heterogeneous job naming it is refused whole"
    );
}

/// Issue 25's fault test: just after slurmctld restarted, no node had registered yet and
/// the governor published a capacity of 0; every GPU job was refused as larger than the
/// cluster. Nodes slurmctld has yet to hear from count for what a job could ever get;
/// down and drained ones (not in the figure) still do not.
#[test]
fn nodes_not_heard_from_yet_count_for_what_a_job_could_get() {
    let c = config();
    let mut state = idle_state();
    (state.capacity, state.free_gpus, state.unsettled_gpus) = (0, 0, 8);
    let admitted = Admitted::default();
    let verdict_in = |state: &PublishedState, gpus: &str| {
        super::check_submit(
            &c,
            &req(Some("research"), per_node(gpus, None)),
            StateView::Fresh {
                state,
                admitted: &admitted,
                now: 100,
            },
        )
    };
    let verdict = |gpus: &str| verdict_in(&state, gpus);
    assert!(verdict("gres:gpu:1").admission().is_some());
    assert!(verdict("gres:gpu:8").admission().is_some());
    let (kind, msg) = refusal(verdict("gres:gpu:9"));
    assert_eq!(kind, RejectKind::LargerThanCluster);
    assert!(msg.contains("have 8 usable GPUs"), "{msg}");
    // Without them (what the governor published before): refused.
    let before = PublishedState {
        unsettled_gpus: 0,
        ..state.clone()
    };
    assert_eq!(
        refusal(verdict_in(&before, "gres:gpu:1")).0,
        RejectKind::LargerThanCluster
    );
    // Typed: per type.
    let t = teamshare_config::parse(TYPED, "t.toml").unwrap();
    let mut typed = typed_state();
    for p in typed.pools.values_mut() {
        p.capacity = 0;
    }
    typed.unsettled_gpus_by_type = BTreeMap::from([("a100".to_string(), 4)]);
    let v = super::check_submit(
        &t,
        &req(Some("agents"), per_node("gres:gpu:a100:1", None)),
        StateView::Fresh {
            state: &typed,
            admitted: &admitted,
            now: 100,
        },
    );
    assert!(v.admission().is_some(), "{v:?}");
}

fn typed_verdict(config: &Config, account: &str, spec: &str, admitted: &Admitted) -> Verdict {
    let state = typed_state();
    super::check_submit(
        config,
        &req(Some(account), per_node(spec, None)),
        StateView::Fresh {
            state: &state,
            admitted,
            now: 100,
        },
    )
}

pub(super) fn refusal(v: Verdict) -> (RejectKind, String) {
    match v {
        Verdict::Reject(r) => (r.kind, r.message),
        Verdict::Accept(a) => panic!("accepted: {a:?}"),
    }
}

#[test]
fn a_typed_configuration_refuses_what_it_cannot_govern_with_the_accepted_form() {
    let c = teamshare_config::parse(TYPED, "t.toml").unwrap();
    let none = Admitted::default();
    let (kind, msg) = refusal(typed_verdict(&c, "agents", "gres:gpu:1", &none));
    assert_eq!(kind, RejectKind::UntypedGpus);
    assert_eq!(msg, "teamshare: GPUs are governed per type on this cluster, so a job must name one: --gres=gpu:<type>:N or --gpus=<type>:N (types: a100, h100)");
    let (kind, msg) = refusal(typed_verdict(
        &c,
        "agents",
        "gres:gpu:h100:1,gres:gpu:a100:1",
        &none,
    ));
    assert_eq!(kind, RejectKind::SeveralGpuTypes);
    assert!(msg.contains("asks for a100 and h100"), "{msg}");
    // Typed and untyped GPUs together are untyped GPUs.
    let (kind, _) = refusal(typed_verdict(
        &c,
        "agents",
        "gres:gpu:h100:1,gres:gpu:1",
        &none,
    ));
    assert_eq!(kind, RejectKind::UntypedGpus);
    let (kind, msg) = refusal(typed_verdict(&c, "agents", "gres:gpu:l40s:1", &none));
    assert_eq!(kind, RejectKind::GpuTypeNotOffered);
    assert_eq!(msg, "teamshare: GPU type l40s is not offered in the governed partitions (gpu); types: a100, h100");
}

#[test]
fn ceilings_and_capacity_are_per_type() {
    let c = teamshare_config::parse(TYPED, "t.toml").unwrap();
    let none = Admitted::default();
    // agents: 2 H100 + 1 borrowed (a number: of any type) = 3 H100 at most.
    let (kind, msg) = refusal(typed_verdict(&c, "agents", "gres:gpu:h100:4", &none));
    assert_eq!(kind, RejectKind::OverTeamLimit);
    assert_eq!(msg, "teamshare: team agents may hold at most 3 h100 GPUs (h100 quota 2 + borrow limit 1); this job asks for 4");
    assert!(typed_verdict(&c, "agents", "gres:gpu:a100:1", &none)
        .admission()
        .is_some());
    // training: A100 quota 2, and only H100 may it borrow.
    let (kind, msg) = refusal(typed_verdict(&c, "training", "gres:gpu:a100:3", &none));
    assert_eq!(kind, RejectKind::OverTeamLimit);
    assert!(
        msg.contains("at most 2 a100 GPUs (a100 quota 2 + borrow limit 0)"),
        "{msg}"
    );
    // Without a borrow limit only the type's capacity bounds agents' A100 jobs: 5 of 4
    // can never fit.
    let open = TYPED.replace("borrow_limit = 1\n", "");
    let c2 = teamshare_config::parse(&open, "t.toml").unwrap();
    let (kind, msg) = refusal(typed_verdict(&c2, "agents", "gres:gpu:a100:5", &none));
    assert_eq!(kind, RejectKind::LargerThanCluster);
    assert_eq!(
        msg,
        "teamshare: the governed partitions (gpu) have 4 usable a100 GPUs; this job asks for 5"
    );
}

#[test]
fn an_in_quota_job_is_priced_after_the_victims_placed_for_those_waiting() {
    // The governor placed the waiting in-quota jobs: victims 4, 3 and 2 (3 GPUs) are
    // theirs, then 7 is borrowed; no free GPU is left. A new one-GPU in-quota job needs
    // one more victim: it sits above the first four.
    let c = config();
    let mut state = idle_state();
    state.free_gpus = 0;
    state.pending_in_quota_gpus = 3;
    state.reclaim_gpus = 3;
    state.spare_gpus = Some(0);
    state.victims = [4u64, 3, 2, 7]
        .iter()
        .enumerate()
        .map(|(rank, id)| governance::Victim {
            job_id: *id,
            team: "training".into(),
            gpus: 1,
            level: priority::victim_level(rank),
            exempt_until: 0,
            gpu_type: None,
        })
        .collect();
    let verdict = |state: &PublishedState| {
        super::check_submit(
            &c,
            &req(Some("agents"), per_node("gres:gpu:1", None)),
            StateView::Fresh {
                state,
                admitted: &Admitted::default(),
                now: 100,
            },
        )
    };
    let level = |v: Verdict| priority::level(v.admission().unwrap().priority.unwrap());
    assert_eq!(level(verdict(&state)), priority::reclaim_level(4));
    // A free GPU the placements left serves it first: above theirs only.
    state.spare_gpus = Some(1);
    assert_eq!(level(verdict(&state)), priority::reclaim_level(3));
    // Where placement is unknown, GPUs are counted across the cluster as before.
    state.spare_gpus = None;
    state.reclaim_gpus = 0;
    assert_eq!(level(verdict(&state)), priority::reclaim_level(4));
}

#[test]
fn in_quota_is_judged_in_the_jobs_type() {
    let c = teamshare_config::parse(TYPED, "t.toml").unwrap();
    let mut admitted = Admitted::default();
    // agents holds 1 of its 2 H100: one more is in quota, priced above the one H100
    // victim it needs (no H100 free).
    let v = typed_verdict(&c, "agents", "gres:gpu:h100:1", &admitted);
    let a = v.admission().unwrap().clone();
    assert!(a.in_quota);
    assert_eq!(a.gpu_type.as_deref(), Some("h100"));
    assert_eq!(
        priority::level(a.priority.unwrap()),
        priority::reclaim_level(1)
    );
    admitted.record(&a, 0);
    assert_eq!(
        (admitted.team("h100", "agents"), admitted.pool("h100")),
        (1, 1)
    );
    // Its H100 quota is now spoken for: the next H100 job borrows.
    let v = typed_verdict(&c, "agents", "gres:gpu:h100:1", &admitted);
    assert!(!v.admission().unwrap().in_quota);
    // An A100 job of agents (no A100 quota) borrows, whatever its H100 room.
    let v = typed_verdict(&c, "agents", "gres:gpu:a100:1", &Admitted::default());
    assert!(!v.admission().unwrap().in_quota);
    // training's A100 job is in quota, with no victim needed (4 A100 free).
    let v = typed_verdict(&c, "training", "gres:gpu:a100:2", &Admitted::default());
    let a = v.admission().unwrap();
    assert!(a.in_quota);
    assert_eq!(
        priority::level(a.priority.unwrap()),
        priority::reclaim_level(0)
    );
}

#[test]
fn a_new_state_forgets_only_the_admissions_its_pass_read() {
    // f11's race: job 1 is admitted at t = 10.300 s under state S0; the plugin then picks
    // up S1, whose pass read the queue at 10.200 s, before job 1 existed. Job 2 must
    // still see job 1's GPU as taken.
    let mut admitted = Admitted::default();
    let mut s0 = idle_state();
    s0.generated_at = 9;
    s0.read_at_ms = 9_200;
    admitted.refresh_for(&s0);
    let one = Admission {
        team: Some("agents".into()),
        in_quota: true,
        in_quota_gpus: 1,
        ..Admission::default()
    };
    admitted.record(&one, 10_300);
    let mut s1 = s0.clone();
    s1.generated_at = 10;
    s1.read_at_ms = 10_200;
    admitted.refresh_for(&s1);
    assert_eq!((admitted.team("", "agents"), admitted.pool("")), (1, 1));
    // The next state read the queue after job 1 was submitted: it counts job 1 itself.
    let mut s2 = s1.clone();
    s2.generated_at = 11;
    s2.read_at_ms = 10_900;
    admitted.refresh_for(&s2);
    assert_eq!((admitted.team("", "agents"), admitted.pool("")), (0, 0));
    // A state without a read time (an older governor) forgets everything, as before.
    admitted.record(&one, 11_500);
    let mut old = s2.clone();
    old.generated_at = 12;
    old.read_at_ms = 0;
    admitted.refresh_for(&old);
    assert_eq!(admitted.pool(""), 0);
    // The same state again changes nothing.
    admitted.record(&one, 12_500);
    admitted.refresh_for(&old);
    assert_eq!(admitted.pool(""), 1);
}

/// Issue 26: a borrower is queued in its team's band of the last pass, which the governor
/// then has no reason to write again; one that cannot start yet, may not borrow, or meets a
/// state without bands (an older governor's) waits at the bottom as before.
#[test]
fn a_borrower_is_queued_in_its_teams_band() {
    let config = config();
    let mut state = idle_state();
    state.teams.insert(
        "agents".into(),
        governance::TeamState {
            running_gpus: 2,
            pending_in_quota_gpus: 0,
            gpu_limit: 4,
        },
    );
    state.bands = BTreeMap::from([("agents".into(), 1), ("research".into(), 0)]);
    let priority_of = |state: &PublishedState, req: &SubmitRequest| {
        let admitted = Admitted::default();
        let view = StateView::Fresh {
            state,
            admitted: &admitted,
            now: 100,
        };
        match super::check_submit(&config, req, view) {
            Verdict::Accept(a) => {
                assert!(!a.in_quota, "{a:?}");
                a.priority.unwrap()
            }
            other => panic!("{other:?}"),
        }
    };
    let one = per_node("gres:gpu:1", None);
    let borrower = req(Some("agents"), one.clone());
    assert_eq!(
        priority_of(&state, &borrower),
        priority::encode(priority::borrow_band(1, 0), 0)
    );
    // The class's rank in the band: "inference" (value 100) is above "no class" (0).
    let inference = SubmitRequest {
        qos: Some("inference".into()),
        ..borrower.clone()
    };
    assert_eq!(
        priority_of(&state, &inference),
        priority::encode(priority::borrow_band(1, 1), 1)
    );
    let bottom = priority::encode(priority::BORROW_BASE, 0);
    let waits = SubmitRequest {
        waits: true,
        ..borrower.clone()
    };
    assert_eq!(priority_of(&state, &waits), bottom);
    let mut older = state.clone();
    older.bands.clear();
    assert_eq!(priority_of(&older, &borrower), bottom);
}

/// Issue 30: a share of a GPU (`--gres=shard:N`, `mps`) holds `gres/shard`, not `gres/gpu`, so
/// it was counted as no GPU at all and ran beside every quota. In a governed partition it is
/// refused, for every team and for root; elsewhere it is not teamshare's.
#[test]
fn gpu_shares_are_refused_in_governed_partitions() {
    let c = config();
    for (spec, name) in [
        ("gres:shard:2", "gres/shard"),
        ("gres/shard:a100:1", "gres/shard"),
        ("gres:gpu:1,gres:shard:1", "gres/shard"),
        ("gres/mps:50", "gres/mps"),
    ] {
        for (account, uid) in [(Some("agents"), 1000), (None, 1000), (Some("agents"), 0)] {
            let mut r = req(account, per_node(spec, None));
            r.submit_uid = uid;
            let Verdict::Reject(rej) = check_submit(&c, &r) else {
                panic!("{spec} by {account:?} (uid {uid}) was accepted");
            };
            assert_eq!(rej.kind, RejectKind::GpuShare, "{spec}: {}", rej.message);
            assert!(rej.message.contains(name), "{}", rej.message);
            assert!(rej.message.contains("--gres=gpu:N"), "{}", rej.message);
        }
    }
    let per_job = GpuAsk {
        tres_per_job: Some("gres/shard:4".into()),
        ..GpuAsk::default()
    };
    let v = check_submit(&c, &req(Some("agents"), per_job));
    assert!(matches!(v, Verdict::Reject(r) if r.kind == RejectKind::GpuShare));
    // Outside the governed partitions a share is not teamshare's to judge.
    let mut elsewhere = req(Some("agents"), per_node("gres:shard:2", None));
    elsewhere.partition = Some("cpu".into());
    assert!(matches!(check_submit(&c, &elsewhere), Verdict::Accept(_)));
    // A count of 0 asks for no share.
    let none = check_submit(
        &c,
        &req(Some("agents"), per_node("gres:gpu:1,gres:shard:0", None)),
    );
    assert!(matches!(none, Verdict::Accept(_)), "{none:?}");
}
