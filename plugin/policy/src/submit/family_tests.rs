//! Submit checks where a team counts a GPU family in GPU-equivalents (issue 30): the ceiling
//! (rule 7) and the room left in the quota are counted in units of the family.

use super::tests::{idle_state, refusal};
use super::*;

const FAMILY: &str = r#"
[cluster]
name = "test"
partitions = ["gpu"]
[gpu_types.a100]
rate_per_hour = 2.8
[gpu_types."1g.10gb"]
slices_of = "a100"
gpus = "1/7"
[gpu_types."3g.40gb"]
slices_of = "a100"
gpus = "3/7"

[[team]]
name = "inference"
quota = { a100 = 1 }
borrow_limit = { a100 = 1 }

[[team]]
name = "dev"
quota = { a100 = 2 }
"#;

/// 14 `1g.10gb`, 2 `3g.40gb`... per pool; inference runs `slices` of `1g.10gb`.
fn state(slices: u32) -> PublishedState {
    let mut s = idle_state();
    s.capacity_by_type = BTreeMap::from([
        ("1g.10gb".into(), 14),
        ("3g.40gb".into(), 4),
        ("a100".into(), 2),
        ("shard".into(), 8),
    ]);
    for (k, n) in &s.capacity_by_type.clone() {
        let teams = if k == "1g.10gb" {
            BTreeMap::from([(
                "inference".to_string(),
                governance::TeamState {
                    running_gpus: slices,
                    pending_in_quota_gpus: 0,
                    gpu_limit: 0,
                },
            )])
        } else {
            BTreeMap::new()
        };
        s.pools.insert(
            k.clone(),
            governance::PoolState {
                capacity: *n,
                free_gpus: *n,
                pending_in_quota_gpus: 0,
                reclaim_gpus: 0,
                spare_gpus: None,
                teams,
                victims: Vec::new(),
            },
        );
    }
    s
}

fn verdict(c: &Config, slices: u32, spec: &str) -> Verdict {
    let s = state(slices);
    let admitted = Admitted::default();
    check_submit(
        c,
        &super::tests::req(
            Some("inference"),
            GpuAsk {
                tres_per_node: Some(spec.into()),
                ..GpuAsk::default()
            },
        ),
        StateView::Fresh {
            state: &s,
            admitted: &admitted,
            now: 100,
        },
    )
}

#[test]
fn a_family_ceiling_counts_each_type_at_its_size() {
    let c = teamshare_config::parse(FAMILY, "t.toml").unwrap();
    // 1 + 1 A100s' worth: 14 slices, 4 of 3/7 (12/7), 2 whole.
    assert!(verdict(&c, 0, "gres:gpu:1g.10gb:14").admission().is_some());
    let (kind, msg) = refusal(verdict(&c, 0, "gres:gpu:1g.10gb:15"));
    assert_eq!(kind, RejectKind::OverTeamLimit);
    assert!(
        msg.contains("at most 14 1g.10gb GPUs")
            && msg.contains("a100 family quota 1 + borrow limit 1 GPU-equivalents")
            && msg.contains("a 1g.10gb is 1/7 of a GPU"),
        "{msg}"
    );
    let (_, msg) = refusal(verdict(&c, 0, "gres:gpu:3g.40gb:5"));
    assert!(msg.contains("at most 4 3g.40gb GPUs"), "{msg}");
    assert!(verdict(&c, 0, "gres:gpu:a100:2").admission().is_some());
    assert!(matches!(
        refusal(verdict(&c, 0, "gres:gpu:a100:3")).0,
        RejectKind::OverTeamLimit
    ));
}

#[test]
fn the_room_in_a_family_quota_is_what_every_member_type_leaves() {
    let c = teamshare_config::parse(FAMILY, "t.toml").unwrap();
    // Running 4 slices of its 7: 3 more slices are in quota, a 3g.40gb (3/7) too, not a
    // whole A100.
    let a = verdict(&c, 4, "gres:gpu:1g.10gb:3");
    assert!(a.admission().is_some_and(|a| a.in_quota), "{a:?}");
    let a = verdict(&c, 4, "gres:gpu:1g.10gb:4");
    assert!(a.admission().is_some_and(|a| !a.in_quota), "{a:?}");
    let a = verdict(&c, 4, "gres:gpu:3g.40gb:1");
    assert!(a.admission().is_some_and(|a| a.in_quota), "{a:?}");
    let a = verdict(&c, 4, "gres:gpu:a100:1");
    assert!(a.admission().is_some_and(|a| !a.in_quota), "{a:?}");
    let a = verdict(&c, 0, "gres:gpu:a100:1");
    assert!(a.admission().is_some_and(|a| a.in_quota), "{a:?}");
}

#[test]
fn a_heterogeneous_job_is_held_to_its_family_ceiling_together() {
    let c = teamshare_config::parse(FAMILY, "t.toml").unwrap();
    let ask = |gpus: u64, kind: &str| Admission {
        gpus,
        team: Some("inference".into()),
        gpu_type: Some(kind.into()),
        ..Admission::default()
    };
    // 14 units: 1 whole A100 (7) and 7 slices fit; an 8th slice does not.
    let mut tally = HetJobTally::default();
    assert_eq!(tally.add(&c, Some(0), &ask(1, "a100")), None);
    assert_eq!(tally.add(&c, Some(1), &ask(7, "1g.10gb")), None);
    let r = tally.add(&c, Some(2), &ask(1, "1g.10gb")).expect("refused");
    assert!(
        r.message
            .contains("at most 2 GPU-equivalents of the a100 family")
            && r.message.contains("ask for 2 1/7 together"),
        "{}",
        r.message
    );
}

/// Issue 30: with `[gpu_types.shard]` a shard request is a job of type `shard`, judged in
/// quarters of an A100 (the ceiling: 8 shards for 1 + 1 A100s' worth); more shards on a node
/// than one GPU has is refused, since Slurm takes them from one GPU; without the section a
/// shard is refused as before.
#[test]
fn governed_shards_are_judged_in_quarters_of_their_gpu() {
    let text = FAMILY.replace(
        "[gpu_types.\"3g.40gb\"]\nslices_of = \"a100\"\ngpus = \"3/7\"",
        "[gpu_types.shard]\nslices_of = \"a100\"\ngpus = \"1/4\"",
    );
    let c = teamshare_config::parse(&text, "t.toml").unwrap();
    let ok = verdict(&c, 0, "gres:shard:4");
    let a = ok.admission().expect("admitted");
    assert_eq!((a.gpus, a.gpu_type.as_deref()), (4, Some("shard")));
    assert!(verdict(&c, 0, "gres/shard:a100:2").admission().is_some());
    let (kind, msg) = refusal(verdict(&c, 0, "gres:shard:5"));
    assert_eq!(kind, RejectKind::InvalidGres);
    assert!(
        msg.contains("5 shards on one node") && msg.contains("--gres=shard:4"),
        "{msg}"
    );
    for spec in ["gres:mps:50", "gres:shard:1,gres:mps:50"] {
        let (kind, msg) = refusal(verdict(&c, 0, spec));
        assert_eq!(kind, RejectKind::GpuShare, "{spec}");
        assert!(msg.contains("gres/mps"), "{spec}: {msg}");
    }
    let plain = teamshare_config::parse(FAMILY, "t.toml").unwrap();
    assert_eq!(
        refusal(verdict(&plain, 0, "gres:shard:1")).0,
        RejectKind::GpuShare
    );
}
