//! The governor's plan where quotas count a GPU family in GPU-equivalents (issue 30,
//! docs/design/fractional-gpus.md): one A100's worth is 7 `1g.10gb` slices, a whole A100, or
//! a mix, and Slurm's per-type ceilings add up to at most the family's figures.

use super::*;

const FAMILY: &str = r#"
[cluster]
name = "t"
[gpu_types.a100]
rate_per_hour = 2.8
[gpu_types."1g.10gb"]
slices_of = "a100"
gpus = "1/7"

[[team]]
name = "inference"
quota = { a100 = 1 }
borrow_limit = { a100 = BORROW }

[[team]]
name = "dev"
quota = { a100 = 2 }

[governance]
min_runtime_before_reclaim = "0s"
"#;

fn family_config(borrow: &str) -> Config {
    teamshare_config::parse(&FAMILY.replace("BORROW", borrow), "t.toml").expect("valid")
}

fn slice(mut j: ClusterJob) -> ClusterJob {
    j.gpu_type = Some("1g.10gb".into());
    j
}

fn whole(mut j: ClusterJob) -> ClusterJob {
    j.gpu_type = Some("a100".into());
    j
}

/// n1, n2: 7 slices each; n3: 2 whole A100. 4 GPU-equivalents in all.
fn family_plan(config: &Config, jobs: &[ClusterJob]) -> Plan {
    let node_types = BTreeMap::from([
        (
            "n1".to_string(),
            BTreeMap::from([("1g.10gb".to_string(), 7)]),
        ),
        (
            "n2".to_string(),
            BTreeMap::from([("1g.10gb".to_string(), 7)]),
        ),
        ("n3".to_string(), BTreeMap::from([("a100".to_string(), 2)])),
    ]);
    let by_type = BTreeMap::from([("1g.10gb".to_string(), 14), ("a100".to_string(), 2)]);
    let node_gpus = node_types
        .iter()
        .map(|(n, k)| (n.clone(), k.values().sum()))
        .collect();
    plan(&GovernInput {
        config,
        capacity: 16,
        jobs,
        fairshare: &BTreeMap::new(),
        now: 1_000,
        now_ms: 1_000 * 1_000,
        node_gpus: &node_gpus,
        capacity_by_type: &by_type,
        node_types: &node_types,
        idle: &std::collections::BTreeSet::new(),
        shard_gpus: &crate::governance::NO_SHARD_PLACES,
    })
}

/// What a team's per-type ceilings add up to, in sevenths of an A100.
fn ceiling_units(p: &Plan, team: &str) -> u32 {
    let l = &p.type_limits[team];
    l.get("1g.10gb").copied().unwrap_or(0) + 7 * l.get("a100").copied().unwrap_or(0)
}

#[test]
fn a_quota_of_one_gpu_equivalent_runs_seven_slices_and_no_more() {
    let c = family_config("0");
    let mut jobs: Vec<ClusterJob> = (1..=7)
        .map(|i| slice(running(i, "inference", 100 + i as i64)))
        .collect();
    jobs.push(slice(pending(8, "inference", 900)));
    jobs.push(whole(pending(9, "inference", 901)));
    let p = family_plan(&c, &jobs);
    assert_eq!(p.type_limits["inference"]["1g.10gb"], 7);
    assert_eq!(p.type_limits["inference"]["a100"], 0);
    assert_eq!(ceiling_units(&p, "inference"), 7);
    // All seven are its quota: protected, none a victim.
    for id in 1..=7 {
        assert!(
            level(p.priorities[&id]) >= priority::PROTECTED_BASE,
            "job {id}"
        );
    }
    assert!(p.state.victims.is_empty());
}

#[test]
fn an_idle_family_quota_follows_the_jobs_that_wait() {
    let c = family_config("0");
    // inference runs 3 slices and waits for a whole A100 (7 units: it does not fit the 4
    // left). The 4 units left go where dev waits: slices.
    let mut jobs: Vec<ClusterJob> = (1..=3)
        .map(|i| slice(running(i, "inference", 100 + i as i64)))
        .collect();
    jobs.push(whole(pending(9, "inference", 901)));
    jobs.push(slice(pending(20, "dev", 902)));
    let p = family_plan(&c, &jobs);
    assert!(ceiling_units(&p, "inference") <= 7, "{:?}", p.type_limits);
    assert_eq!(p.type_limits["inference"]["a100"], 0);
    // The same team with its slices ended: the whole A100 is its quota now.
    let p = family_plan(&c, &[whole(pending(9, "inference", 901))]);
    assert_eq!(p.type_limits["inference"]["a100"], 1);
    assert_eq!(p.state.pools["a100"].pending_in_quota_gpus, 1);
    assert_eq!(ceiling_units(&p, "inference"), 7);
}

#[test]
fn borrowed_slices_are_reclaimed_slice_by_slice() {
    // inference (1 A100's worth, may borrow 1 more) runs 10 slices: 7 in quota, 3 borrowed.
    // Its ceilings never add up to more than 2 A100s' worth.
    let c = family_config("1");
    let mut jobs: Vec<ClusterJob> = (1..=10)
        .map(|i| slice(running(i, "inference", 100 + i as i64)))
        .collect();
    let p = family_plan(&c, &jobs);
    assert!(ceiling_units(&p, "inference") <= 14, "{:?}", p.type_limits);
    let victims: Vec<u64> = p.state.pools["1g.10gb"]
        .victims
        .iter()
        .map(|v| v.job_id)
        .collect();
    assert_eq!(victims, [10, 9, 8]);
    // dev wants 7 slices of its 2 A100s' worth back while 4 are free: it gets them in
    // quota, priced above exactly the 3 borrowed slices (newest first), never the 7 inside
    // inference's quota.
    jobs.extend((20..27).map(|i| slice(pending(i, "dev", 900 + i as i64))));
    let p = family_plan(&c, &jobs);
    assert_eq!(p.state.pools["1g.10gb"].pending_in_quota_gpus, 7);
    let first = level(p.priorities[&20]);
    for id in 8..=10 {
        assert!(level(p.priorities[&id]) < first, "victim {id}");
    }
    for id in 1..=7 {
        assert!(
            level(p.priorities[&id]) >= priority::PROTECTED_BASE,
            "job {id}"
        );
    }
    // The rest of dev's quota (7 units) goes to the whole A100s, where no one waits.
    assert_eq!(p.type_limits["dev"]["a100"], 1);
    assert!(ceiling_units(&p, "dev") <= 14);
}

#[test]
fn a_family_lend_limit_bounds_what_others_borrow_of_its_idle_quota() {
    // dev lends nothing: inference, at its quota, may borrow only the capacity no quota
    // holds. 4 GPU-equivalents, 3 in quotas: 1 A100's worth unheld.
    let c = teamshare_config::parse(
        &FAMILY
            .replace("BORROW", "3")
            .replace("quota = { a100 = 2 }", "quota = { a100 = 2 }\nlend = false"),
        "t.toml",
    )
    .expect("valid");
    let mut jobs: Vec<ClusterJob> = (1..=7)
        .map(|i| slice(running(i, "inference", 100 + i as i64)))
        .collect();
    jobs.extend((20..34).map(|i| slice(pending(i, "inference", 900 + i as i64))));
    let p = family_plan(&c, &jobs);
    // dev lends nothing, so its 14 units go where no one waits (the whole A100s) and
    // leave the 7 slices no quota holds to inference: 7 of its own and 7 borrowed.
    assert_eq!(p.type_limits["dev"]["a100"], 2);
    let l = &p.type_limits["inference"];
    assert_eq!((l["1g.10gb"], l["a100"]), (14, 0), "{l:?}");
}

#[test]
fn a_lent_family_quota_stays_where_it_is_lent() {
    // inference runs 10 slices, 3 on dev's idle quota, and waits for nothing more. dev's
    // lendable quota stays with the slices that run on it (not the whole A100s, where as
    // much is free): when dev asks for a slice, Slurm's limit already lets it start and
    // preempt, with no pass to wait for.
    let c = family_config("1");
    let jobs: Vec<ClusterJob> = (1..=10)
        .map(|i| slice(running(i, "inference", 100 + i as i64)))
        .collect();
    let p = family_plan(&c, &jobs);
    assert!(
        p.type_limits["dev"]["1g.10gb"] >= 4,
        "{:?}",
        p.type_limits["dev"]
    );
}

/// Shards governed (`[gpu_types.shard]`, 4 to an A100): n1 with 2 A100, offered as 8 shards.
fn shard_plan(config: &Config, jobs: &[ClusterJob]) -> Plan {
    let node = BTreeMap::from([("a100".to_string(), 2), ("shard".to_string(), 8)]);
    let node_types = BTreeMap::from([("n1".to_string(), node)]);
    let by_type = BTreeMap::from([("a100".to_string(), 2), ("shard".to_string(), 8)]);
    let node_gpus = BTreeMap::from([("n1".to_string(), 2)]);
    plan(&GovernInput {
        config,
        capacity: 2,
        jobs,
        fairshare: &BTreeMap::new(),
        now: 1_000,
        now_ms: 1_000 * 1_000,
        node_gpus: &node_gpus,
        capacity_by_type: &by_type,
        node_types: &node_types,
        idle: &std::collections::BTreeSet::new(),
        shard_gpus: &crate::governance::NO_SHARD_PLACES,
    })
}

fn shard(mut j: ClusterJob) -> ClusterJob {
    j.gpu_type = Some("shard".into());
    j.nodes = vec!["n1".into()];
    j
}

/// A shard is a quarter of an A100 in the family: inference (1 A100's worth, borrow 1) runs
/// 6 shards, 4 in quota and 2 borrowed; its shard ceiling is a number of shards, never part
/// of its `gres/gpu` total (a shard holds no `gres/gpu`); dev's claim of 4 shards, with 2
/// free, prices exactly the borrowed shards below it.
#[test]
fn shards_are_counted_capped_and_reclaimed_in_quarters_of_a_gpu() {
    let text = FAMILY.replace("BORROW", "1").replace(
        "[gpu_types.\"1g.10gb\"]\nslices_of = \"a100\"\ngpus = \"1/7\"",
        "[gpu_types.shard]\nslices_of = \"a100\"\ngpus = \"1/4\"",
    );
    let c = teamshare_config::parse(&text, "t.toml").expect("valid");
    let mut jobs: Vec<ClusterJob> = (1..=6)
        .map(|i| shard(running(i, "inference", 100 + i as i64)))
        .collect();
    let p = shard_plan(&c, &jobs);
    let l = &p.type_limits["inference"];
    let units = l.get("shard").copied().unwrap_or(0) + 4 * l.get("a100").copied().unwrap_or(0);
    assert!((6..=8).contains(&units), "{l:?}");
    assert_eq!(
        p.gpu_limits["inference"],
        l.get("a100").copied().unwrap_or(0)
    );
    assert_eq!(
        p.state.teams["inference"].running_gpus, 0,
        "shards are no GPUs"
    );
    assert_eq!(p.state.pools["shard"].teams["inference"].running_gpus, 6);
    let victims: Vec<u64> = p.state.pools["shard"]
        .victims
        .iter()
        .map(|v| v.job_id)
        .collect();
    assert_eq!(victims, [6, 5]);
    jobs.extend((20..24).map(|i| shard(pending(i, "dev", 900 + i as i64))));
    let p = shard_plan(&c, &jobs);
    let first = level(p.priorities[&20]);
    for id in 5..=6 {
        assert!(level(p.priorities[&id]) < first, "victim {id}");
    }
    for id in 1..=4 {
        assert!(
            level(p.priorities[&id]) >= priority::PROTECTED_BASE,
            "job {id}"
        );
    }
}
