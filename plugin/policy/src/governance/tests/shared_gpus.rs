//! A whole GPU taken back from shards (issue 30): Slurm gives a GPU to whole-GPU jobs or to
//! shard jobs, never both, so each pool's room leaves out what the other holds, and an
//! in-quota whole-GPU job that fits nowhere gets a GPU whose shards are all victims.

use super::*;

const SHARDS: &str = r#"
[cluster]
name = "t"
[gpu_types.a100]
rate_per_hour = 2.8
[gpu_types.shard]
slices_of = "a100"
gpus = "1/4"

[[team]]
name = "serve"
quota = { a100 = 1 }
borrow_limit = { a100 = 0 }

[[team]]
name = "inference"
quota = { a100 = 1 }
borrow_limit = { a100 = 1 }

[[team]]
name = "dev"
quota = { a100 = 1 }

[governance]
min_runtime_before_reclaim = "0s"
"#;

/// The live test's cluster: n1 with 2 A100, n2 with 1, each offered as 4 shards.
fn shared_plan(jobs: &[ClusterJob], places: &ShardPlaces) -> Plan {
    let config = teamshare_config::parse(SHARDS, "t.toml").expect("valid");
    let node =
        |gpus: u32| BTreeMap::from([("a100".to_string(), gpus), ("shard".to_string(), 4 * gpus)]);
    let node_types = BTreeMap::from([("n1".to_string(), node(2)), ("n2".to_string(), node(1))]);
    let by_type = BTreeMap::from([("a100".to_string(), 3), ("shard".to_string(), 12)]);
    let node_gpus = BTreeMap::from([("n1".to_string(), 2), ("n2".to_string(), 1)]);
    plan(&GovernInput {
        config: &config,
        capacity: 3,
        jobs,
        fairshare: &BTreeMap::new(),
        now: 1_000,
        now_ms: 1_000 * 1_000,
        node_gpus: &node_gpus,
        capacity_by_type: &by_type,
        node_types: &node_types,
        idle: &BTreeSet::new(),
        shard_gpus: places,
    })
}

/// A running job of `shards` shards on `node`.
fn shards(id: u64, team: &str, shards: u32, node: &str) -> ClusterJob {
    let mut j = running(id, team, 100 + id as i64);
    j.gpu_type = Some("shard".into());
    j.gpus = shards;
    j.nodes = vec![node.into()];
    j
}

/// dev's whole A100, submitted this second: Slurm's preemption cannot serve it, so the
/// governor does not wait for it to try.
fn dev_whole() -> ClusterJob {
    let mut j = pending(50, "dev", 1_000);
    j.gpu_type = Some("a100".into());
    j
}

fn places(list: &[(u64, &str, u32)]) -> ShardPlaces {
    list.iter()
        .map(|(id, node, gpu)| (*id, vec![(node.to_string(), *gpu)]))
        .collect()
}

/// The measured failure: every A100 holds one job of 4 shards (serve's and inference's in
/// their quotas, inference's second borrowed). dev's whole A100 finds no free GPU in its pool
/// (the shards hold all three) and the GPU of inference's borrowed shards is freed for it:
/// that job is requeued, no other.
#[test]
fn a_whole_gpu_is_taken_back_from_borrowed_shards() {
    let mut jobs = vec![
        shards(1, "serve", 4, "n1"),
        shards(2, "inference", 4, "n1"),
        shards(3, "inference", 4, "n2"),
    ];
    let at = places(&[(1, "n1", 0), (2, "n1", 1), (3, "n2", 0)]);
    let p = shared_plan(&jobs, &at);
    assert_eq!(p.state.pools["a100"].free_gpus, 0, "shards hold every A100");
    assert_eq!(
        p.state.pools["a100"].capacity, 3,
        "a job may still ask for 3"
    );
    assert!(p.reclaim.is_empty());
    let mut waiting = dev_whole();
    waiting.eligible = false; // a dependency or a begin time: nothing to free yet
    jobs.push(waiting);
    assert!(shared_plan(&jobs, &at).reclaim.is_empty());
    jobs.pop();
    jobs.push(dev_whole());
    let p = shared_plan(&jobs, &at);
    assert_eq!(p.reclaim, [3]);
    // Without knowing which GPU the shards sit on, no GPU is known to be freed by victims
    // alone: nothing is requeued (the job waits for shards to end).
    let p = shared_plan(&jobs, &NO_SHARD_PLACES);
    assert!(p.reclaim.is_empty(), "{:?}", p.reclaim);
    assert_eq!(p.state.pools["a100"].free_gpus, 0);
}

/// Two borrowed shard jobs on one GPU go together; a GPU that also holds shards of a team
/// within its quota is never taken.
#[test]
fn only_a_gpu_whose_shards_are_all_victims_is_freed() {
    let mut jobs = vec![
        shards(1, "serve", 4, "n1"),
        shards(2, "inference", 2, "n1"),
        shards(3, "inference", 2, "n1"),
        shards(4, "inference", 2, "n2"),
        shards(5, "inference", 2, "n2"),
        dev_whole(),
    ];
    let at = places(&[
        (1, "n1", 0),
        (2, "n1", 1),
        (3, "n1", 1),
        (4, "n2", 0),
        (5, "n2", 0),
    ]);
    let p = shared_plan(&jobs, &at);
    assert_eq!(p.reclaim, [4, 5]);
    // Inference's borrowed job 4 shares n1's second GPU with its in-quota job 2 instead.
    let at = places(&[
        (1, "n1", 0),
        (2, "n1", 1),
        (3, "n2", 0),
        (4, "n1", 1),
        (5, "n2", 0),
    ]);
    let p = shared_plan(&jobs, &at);
    assert!(p.reclaim.is_empty(), "{:?}", p.reclaim);
    // The whole pool still sees one free A100 nowhere; with job 5 gone, n2 holds only job 3
    // (in quota): still nothing.
    jobs.retain(|j| j.id != 5);
    let p = shared_plan(&jobs, &at);
    assert!(p.reclaim.is_empty(), "{:?}", p.reclaim);
}

/// The other way round: the shard pool's room leaves out the GPUs whole jobs hold.
#[test]
fn shards_have_no_room_on_gpus_whole_jobs_hold() {
    let mut whole = running(7, "inference", 100);
    whole.gpu_type = Some("a100".into());
    whole.nodes = vec!["n2".into()];
    let jobs = vec![whole, shards(1, "serve", 4, "n1")];
    let p = shared_plan(&jobs, &places(&[(1, "n1", 0)]));
    assert_eq!(p.state.pools["shard"].free_gpus, 12 - 4 - 4);
    assert_eq!(p.state.pools["a100"].free_gpus, 3 - 1 - 1);
}

/// A whole A100 of `team` on `node`.
fn whole_on(id: u64, team: &str, node: &str) -> ClusterJob {
    let mut j = running(id, team, 100 + id as i64);
    j.gpu_type = Some("a100".into());
    j.nodes = vec![node.into()];
    j
}

/// The other way round: serve holds a whole A100 of its quota, inference two (the second
/// borrowed of dev's idle quota). dev's 2 shards and then 2 more find no GPU with room: the
/// first frees inference's borrowed A100, and the second takes the room left on that GPU.
#[test]
fn shards_take_back_a_gpu_held_whole_by_a_borrower() {
    let mut jobs = vec![
        whole_on(1, "serve", "n1"),
        whole_on(2, "inference", "n1"),
        whole_on(3, "inference", "n2"),
    ];
    let p = shared_plan(&jobs, &NO_SHARD_PLACES);
    assert_eq!(
        p.state.pools["shard"].free_gpus, 0,
        "every A100 is held whole"
    );
    assert!(p.reclaim.is_empty());
    for id in [50, 51] {
        let mut j = pending(id, "dev", 1_000);
        j.gpu_type = Some("shard".into());
        j.gpus = 2;
        jobs.push(j);
    }
    let p = shared_plan(&jobs, &NO_SHARD_PLACES);
    assert_eq!(p.reclaim, [3]);
}
