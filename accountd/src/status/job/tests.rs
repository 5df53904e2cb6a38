use std::collections::BTreeMap;
use std::path::Path;

use teamshare_policy::governance::{ClusterJob, Phase};

use super::super::tests::{borrowing_cluster, job, planned, NOW};
use super::*;
use crate::status::StatusInput;

fn words(text: &str) -> Vec<String> {
    text.split_whitespace().map(String::from).collect()
}

fn parsed(text: &str) -> ParsedUpdate {
    parse_update(&words(text), 1000).expect("parses")
}

#[test]
fn fields_are_matched_as_scontrol_matches_them() {
    let u = parsed("JobId=42 A=research Pa=gpu TimeLimit=10 Q=x Comment=hi");
    assert_eq!(u.job.as_deref(), Some("42"));
    assert_eq!(u.request.account.as_deref(), Some("research"));
    assert_eq!(u.request.partition.as_deref(), Some("gpu"));
    // `Q` is too short for QOS (scontrol needs `QO`): Slurm's to judge, not a QOS change.
    assert_eq!(u.request.qos, None);
    assert_eq!(u.other_fields, ["TimeLimit", "Q", "Comment"]);
    assert_eq!(parsed("qos=").request.qos.as_deref(), Some(""));
    assert_eq!(parsed("Accounts=x").request.account, None);
    let u = parsed("Gres=gpu:2,shard:1 TresPerNode=gres:gpu:h100:1 NumNodes=2-4 ReqS=2 Ta=4");
    assert_eq!(
        u.request.gpus.tres_per_node.as_deref(),
        Some("gres:gpu:2,gres:shard:1,gres:gpu:h100:1")
    );
    assert_eq!(u.request.gpus.min_nodes, Some(2));
    assert_eq!(u.request.gpus.sockets_per_node, Some(2));
    assert_eq!(u.request.gpus.ntasks_per_node, Some(4));
    assert_eq!(
        parsed("NumNodes=ALL").request.gpus.min_nodes,
        Some(u32::MAX)
    );
    assert_eq!(parsed("Priority=0").request.priority, Some(0));
    for bad in ["Priority=high", "NumNodes=two", "ReqSockets=70000", "hold"] {
        assert!(parse_update(&words(bad), 1000).is_err(), "{bad}");
    }
}

/// Finding 13: on 22.05 a refused `scontrol update` shows only the error code's text; the
/// same words given to `accountd status --job J --update` get the plugin's own reason.
#[test]
fn issue25_13_an_update_gets_the_plugins_own_reason() {
    let (config, cap, jobs) = borrowing_cluster();
    let state = planned(&config, &cap, &jobs);
    let judge = |text: &str, uid: u32| {
        let w = words(text);
        let u = parse_update(&w, uid).expect("parses");
        judge_update(&config, &w, &u, Some(&state), NOW)
    };
    let moved = judge("Account=research", 1000);
    assert!(!moved.accepted);
    let reason = moved.reason.as_deref().unwrap();
    assert!(reason.contains("needs the whole GPU request"), "{reason}");
    assert!(moved.judged_with_state);
    // The same check as the plugin's: the identical message.
    let plugin = check_modify(&config, &parsed("Account=research").request, Some(&state));
    assert_eq!(
        plugin,
        Verdict::Reject(teamshare_policy::submit::Rejection {
            kind: teamshare_policy::submit::RejectKind::IncompleteUpdate,
            message: reason.to_string(),
        })
    );
    let qos = judge("QOS=normal", 1000);
    assert!(qos.reason.unwrap().contains("QOS is set by teamshare"));
    assert!(judge("Priority=5", 1000)
        .reason
        .unwrap()
        .contains("priority is set by teamshare"));
    // An operator may; hold and release pass; fields teamshare does not read pass.
    assert!(judge("Account=research", 0).accepted);
    assert!(judge("Priority=0", 1000).accepted);
    let time = judge("TimeLimit=10", 1000);
    assert!(time.accepted);
    assert_eq!(time.other_fields, ["TimeLimit"]);
    // A whole request beyond the team's ceiling: refused as at submit.
    let big = judge(
        "Account=agents TresPerJob=gres:gpu:9 TresPerNode= TresPerTask= TresPerSocket=",
        1000,
    );
    assert!(!big.accepted, "{big:?}");
    // Without a current state the cluster's size is not checked, and that is said.
    let w = words("TimeLimit=10");
    let stale = judge_update(
        &config,
        &w,
        &parse_update(&w, 1000).unwrap(),
        Some(&state),
        NOW + 600,
    );
    assert!(!stale.judged_with_state);
    let text = render(None, 7, Some(&stale));
    assert!(text.contains("no current governor state"), "{text}");
    let text = render(None, 7, Some(&moved));
    assert!(
        text.contains("update `scontrol update JobId=7 Account=research`:\n  teamshare refuses it: teamshare: changing"),
        "{text}"
    );
}

fn input<'a>(
    config: &'a Config,
    state: &'a PublishedState,
    cap: &'a crate::capacity::Capacity,
    jobs: &'a [ClusterJob],
    reasons: &'a BTreeMap<u64, String>,
) -> StatusInput<'a> {
    StatusInput {
        config,
        state_file: Path::new("/etc/slurm/state.json"),
        state: Ok(state),
        capacity: cap,
        jobs,
        reasons,
        now: NOW,
        view_may_be_partial: false,
    }
}

#[test]
fn a_job_says_why_it_waits_or_who_holds_it() {
    let (config, cap, mut jobs) = borrowing_cluster();
    let state = planned(&config, &cap, &jobs);
    let mut outside = job(30, "nosuch", Phase::Pending);
    outside.priority = 0;
    jobs.push(outside);
    let reasons: BTreeMap<u64, String> = [
        (20, "AssocGrpGRES"),
        (21, "Dependency"),
        (30, "JobHeldAdmin"),
    ]
    .into_iter()
    .map(|(id, r)| (id, r.to_string()))
    .collect();
    let holds = [GovernorHold {
        id: 30,
        account: "nosuch".into(),
        untyped: false,
        run_ended: false,
        begin: None,
    }];
    let input = input(&config, &state, &cap, &jobs, &reasons);
    // training's 8th job: beyond what it may hold now.
    let j = job_status(&input, &holds, 20).unwrap();
    assert_eq!((j.state, j.team, j.gpus), ("pending", true, Some(1)));
    assert!(
        j.waits.as_deref().unwrap().starts_with("teamshare: "),
        "{j:?}"
    );
    assert_eq!(j.held_by_teamshare, None);
    // agents' job waits for its dependency: Slurm's reason.
    let j = job_status(&input, &holds, 21).unwrap();
    assert_eq!(j.waits.as_deref(), Some("Slurm: Dependency"));
    // The governor's hold of a job outside every team, with why.
    let j = job_status(&input, &holds, 30).unwrap();
    assert!(!j.team);
    assert_eq!(j.held_by_teamshare.as_deref(), Some(OUTSIDE_HOLD));
    let text = render(Some(&j), 30, None);
    assert!(
        text.starts_with("job 30: account (no team) nosuch, pending, 1 GPU(s)\n"),
        "{text}"
    );
    assert!(
        text.contains(&format!("  held by teamshare: {OUTSIDE_HOLD}\n")),
        "{text}"
    );
    // A running job: no wait.
    let j = job_status(&input, &holds, 1).unwrap();
    assert_eq!((j.state, j.waits.clone()), ("running", None));
    // Not seen.
    assert_eq!(job_status(&input, &holds, 999), None);
    assert!(render(None, 999, None).contains("job 999: not seen"));
}
