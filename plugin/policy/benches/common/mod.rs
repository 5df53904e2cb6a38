//! Shared fixture of the policy benchmarks: a realistic configuration (3 teams, 3 priority
//! classes, 1,024 GPUs), a governor state as the plugin holds it (50 victims), and a queue of
//! 1,000 running + 1,000 pending jobs for the governor's plan.
#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet};

use teamshare_config::Config;
use teamshare_policy::governance::{
    self, ClusterJob, Phase, PublishedState, TeamState, Victim, STATE_VERSION,
};
use teamshare_policy::priority::{self, encode};
use teamshare_policy::submit::{Admitted, GpuAsk, SubmitRequest};

pub const NOW: i64 = 1_750_000_000;
pub const CAPACITY: u32 = 1024;

/// The cluster of the benchmarks: 128 nodes x 8 GPUs, quotas 256 + 512 + 128 (128 GPUs of
/// unallocated capacity), three classes.
pub const CONFIG: &str = r#"
[cluster]
name = "bench"
partitions = ["gpu"]
idle_sharing = "fair-share"
currency = "USD"

[gpu_types.default]
rate_per_hour = 2.5

[[team]]
name = "agents"
quota = 256
borrow_limit = 128
weight = 40

[[team]]
name = "training"
quota = 512
borrow_limit = "100%"
weight = 40

[[team]]
name = "research"
quota = 128
borrow_limit = 384
weight = 20

[[priority_class]]
name = "inference"
value = 100
preemptible = false

[[priority_class]]
name = "standard"
value = 50

[[priority_class]]
name = "experiment"
value = 10

[governance]
preempt_within_team = "lower-priority"
reclaim_mode = "requeue"
reclaim_grace = "30s"
min_runtime_before_reclaim = "5m"
state_max_age = "30s"
on_stale_state = "fail-open"
"#;

pub fn config() -> Config {
    teamshare_config::parse(CONFIG, "bench.toml").expect("the benchmark configuration is valid")
}

/// A full cluster: every GPU allocated, research and training borrowing through 50 running
/// jobs (the victims, in reclaim order; the 5 youngest still protected by
/// min_runtime_before_reclaim), agents below its quota with 24 in-quota GPUs pending.
pub fn state() -> PublishedState {
    let mut teams = BTreeMap::new();
    teams.insert(
        "agents".to_string(),
        TeamState {
            running_gpus: 200,
            pending_in_quota_gpus: 24,
            gpu_limit: 256,
        },
    );
    teams.insert(
        "training".to_string(),
        TeamState {
            running_gpus: 560,
            pending_in_quota_gpus: 0,
            gpu_limit: 560,
        },
    );
    teams.insert(
        "research".to_string(),
        TeamState {
            running_gpus: 264,
            pending_in_quota_gpus: 0,
            gpu_limit: 264,
        },
    );
    let victims = (0..50usize)
        .map(|rank| {
            let (team, gpus) = if rank < 34 {
                ("research", 4)
            } else {
                ("training", 3)
            };
            Victim {
                job_id: 100_000 + rank as u64,
                team: team.to_string(),
                gpus,
                level: priority::victim_level(rank),
                // The first victims are the most recently started: the 5 youngest are exempt.
                exempt_until: if rank < 5 { NOW + 120 } else { NOW - 600 },
                gpu_type: None,
            }
        })
        .collect();
    PublishedState {
        bands: Default::default(),
        version: STATE_VERSION,
        config_digest: String::new(),
        generated_at: NOW - 1,
        capacity: CAPACITY,
        capacity_by_type: BTreeMap::new(),
        free_gpus: 0,
        pending_in_quota_gpus: 24,
        reclaim_gpus: 0,
        spare_gpus: None,
        teams,
        victims,
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

/// In-quota admissions since the state was published (as the plugin counts them).
pub fn admitted() -> Admitted {
    let mut a = Admitted::default();
    a.reset_for(NOW - 1);
    a.by_team.insert((String::new(), "agents".into()), 4);
    a.total.insert(String::new(), 4);
    a
}

/// A request as the FFI layer copies it out of `job_desc_msg_t`.
pub fn request(account: Option<&str>, ask: GpuAsk, qos: Option<&str>) -> SubmitRequest {
    SubmitRequest {
        waits: false,
        account: account.map(str::to_string),
        partition: Some("gpu".into()),
        qos: qos.map(str::to_string),
        user_id: 1000,
        submit_uid: 1000,
        gpus: ask,
        array: None,
    }
}

pub fn per_node(spec: &str) -> GpuAsk {
    GpuAsk {
        tres_per_node: Some(spec.into()),
        ..GpuAsk::default()
    }
}

/// The requests the latency harness cycles through, with a name each.
pub fn requests() -> Vec<(&'static str, SubmitRequest)> {
    vec![
        // The common case and the most work: fits agents' quota, needs a reclaim (walks the
        // victims for the level).
        (
            "in_quota_reclaim",
            request(Some("agents"), per_node("gres:gpu:8"), Some("standard")),
        ),
        // Beyond the quota: queued as a borrower.
        (
            "borrow",
            request(Some("training"), per_node("gres:gpu:4"), Some("experiment")),
        ),
        // --gpus=16 (tres_per_job, 23.02 spelling).
        (
            "per_job_gpus",
            request(
                Some("agents"),
                GpuAsk {
                    tres_per_job: Some("gres/gpu:16".into()),
                    ..GpuAsk::default()
                },
                None,
            ),
        ),
        // Refusals build a message.
        (
            "reject_unknown_team",
            request(Some("nosuch"), per_node("gres:gpu:1"), None),
        ),
        (
            "reject_over_ceiling",
            request(Some("agents"), per_node("gres:gpu:400"), None),
        ),
    ]
}

/// 1,000 running and 1,000 pending governed jobs on the 1,024-GPU cluster: agents 300 running
/// (in quota 256), training 450, research 250 (borrowing 122); pending spread over the teams
/// and classes, a few with a begin time or held.
pub fn cluster_jobs() -> Vec<ClusterJob> {
    cluster_jobs_waiting(1000)
}

/// The same 1,000 running jobs with `pending` jobs waiting (section 17 plans at 10,000).
pub fn cluster_jobs_waiting(pending: u64) -> Vec<ClusterJob> {
    let mut jobs = Vec::with_capacity(1000 + pending as usize);
    let mut id = 1u64;
    // A tiny deterministic generator, so every run plans the same queue.
    let mut seed = 0x9E37_79B9_7F4A_7C15u64;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let class_priority = |class: u8, level: u32| encode(level, class);
    for (team, n) in [("agents", 300), ("training", 450), ("research", 250)] {
        for _ in 0..n {
            let r = next();
            let class = (r % 4) as u8; // 0 = none, 1 inference, 2 standard, 3 experiment
            let start = NOW - 60 - (r % 86_400) as i64;
            jobs.push(ClusterJob {
                id,
                gpu_type: None,
                team: team.to_string(),
                phase: Phase::Running,
                gpus: 1,
                priority: class_priority(class, priority::protected_level(50)),
                submit: start - 30,
                start: Some(start),
                eligible: true,
                parked: false,
                park_held: false,
                batch: true,
                nodes: Vec::new(),
                node_count: 1,
                completing: false,
                tasks: 1,
            });
            id += 1;
        }
    }
    for i in 0..pending {
        let r = next();
        let team = ["agents", "training", "research"][(r % 3) as usize];
        let class = ((r >> 8) % 4) as u8;
        let held = i % 97 == 0;
        jobs.push(ClusterJob {
            id,
            gpu_type: None,
            team: team.to_string(),
            phase: Phase::Pending,
            gpus: 1 + ((r >> 16) % 4) as u32,
            priority: if held {
                0
            } else {
                class_priority(class, priority::BORROW_BASE)
            },
            submit: NOW - (r % 3600) as i64,
            start: None,
            eligible: i % 13 != 0,
            parked: false,
            park_held: false,
            batch: true,
            nodes: Vec::new(),
            node_count: 1,
            completing: false,
            tasks: 1,
        });
        id += 1;
    }
    jobs
}

pub fn fairshare() -> BTreeMap<String, f64> {
    BTreeMap::from([
        ("agents".to_string(), 0.62),
        ("training".to_string(), 0.31),
        ("research".to_string(), 0.48),
    ])
}

pub fn govern_input<'a>(
    config: &'a Config,
    jobs: &'a [ClusterJob],
    fairshare: &'a BTreeMap<String, f64>,
) -> governance::GovernInput<'a> {
    governance::GovernInput {
        config,
        capacity: CAPACITY,
        jobs,
        fairshare,
        now: NOW,
        now_ms: NOW.saturating_mul(1_000),
        node_gpus: &NO_PLACEMENT,
        capacity_by_type: &NO_TYPES,
        node_types: &NO_NODE_TYPES,
        idle: &NO_IDLE,
        shard_gpus: &teamshare_policy::governance::NO_SHARD_PLACES,
    }
}

/// The benchmark configuration with `[governance] idle_first_reclaim = true` (issue 29).
pub fn idle_first_config() -> Config {
    let text = CONFIG.replace(
        "[governance]\n",
        "[governance]\nidle_first_reclaim = true\nidle_window = \"15m\"\n",
    );
    teamshare_config::parse(&text, "bench.toml").expect("the benchmark configuration is valid")
}

/// What the governor read from the store for the running jobs of `jobs`: every run sampled
/// over the whole 15-minute window, one in ten (`idle_every`) idle in every sample, the others
/// half idle.
pub fn idle_windows(
    jobs: &[ClusterJob],
    idle_every: usize,
) -> BTreeMap<(u64, i64), governance::idleness::SampledWindow> {
    jobs.iter()
        .filter(|j| j.phase == Phase::Running)
        .enumerate()
        .filter_map(|(k, j)| {
            let sampled_ms = 900_000 * i64::from(j.gpus);
            let w = governance::idleness::SampledWindow {
                samples: 90 * u64::from(j.gpus),
                sampled_ms,
                idle_ms: if k % idle_every == 0 {
                    sampled_ms
                } else {
                    sampled_ms / 2
                },
            };
            Some(((j.id, j.start?), w))
        })
        .collect()
}

/// The plan's input with an idle set (`GovernInput::idle`).
pub fn govern_input_idle<'a>(
    config: &'a Config,
    jobs: &'a [ClusterJob],
    fairshare: &'a BTreeMap<String, f64>,
    idle: &'a BTreeSet<u64>,
) -> governance::GovernInput<'a> {
    governance::GovernInput {
        idle,
        ..govern_input(config, jobs, fairshare)
    }
}

static NO_IDLE: BTreeSet<u64> = BTreeSet::new();
static NO_TYPES: BTreeMap<String, u32> = BTreeMap::new();
static NO_NODE_TYPES: BTreeMap<String, BTreeMap<String, u32>> = BTreeMap::new();

/// The benchmark's plan without per-node figures (as before they existed).
static NO_PLACEMENT: BTreeMap<String, u32> = BTreeMap::new();

/// The same cluster with quotas per GPU type (issue 10): 64 nodes of 8 H100 and 64 of 8 A100;
/// agents 128 + 128, training 256 + 256, research 128 A100; borrow limits as numbers (any
/// types together) except research's, a table.
pub fn typed_config() -> Config {
    let text = CONFIG
        .replace(
            "[gpu_types.default]\nrate_per_hour = 2.5",
            "[gpu_types.h100]\nrate_per_hour = 4.0\n[gpu_types.a100]\nrate_per_hour = 2.0",
        )
        .replace("quota = 256\n", "quota = { h100 = 128, a100 = 128 }\n")
        .replace("quota = 512\n", "quota = { h100 = 256, a100 = 256 }\n")
        .replace(
            "quota = 128\nborrow_limit = 384",
            "quota = { a100 = 128 }\nborrow_limit = { h100 = 128, a100 = 256 }",
        );
    let config = teamshare_config::parse(&text, "bench.toml")
        .expect("the typed benchmark configuration is valid");
    assert!(config.is_typed());
    config
}

/// [`state`] split over the two types: the 50 victims alternate between them.
pub fn typed_state() -> PublishedState {
    let mut s = state();
    s.capacity_by_type = BTreeMap::from([("h100".into(), 512), ("a100".into(), 512)]);
    for (i, k) in ["h100", "a100"].into_iter().enumerate() {
        let teams = s
            .teams
            .iter()
            .map(|(t, ts)| {
                (
                    t.clone(),
                    TeamState {
                        running_gpus: ts.running_gpus / 2,
                        pending_in_quota_gpus: ts.pending_in_quota_gpus / 2,
                        gpu_limit: ts.gpu_limit / 2,
                    },
                )
            })
            .collect();
        let victims = s
            .victims
            .iter()
            .skip(i)
            .step_by(2)
            .enumerate()
            .map(|(rank, v)| Victim {
                level: priority::victim_level(rank),
                gpu_type: Some(k.into()),
                ..v.clone()
            })
            .collect();
        s.pools.insert(
            k.into(),
            governance::PoolState {
                capacity: 512,
                free_gpus: 0,
                pending_in_quota_gpus: 12,
                reclaim_gpus: 0,
                spare_gpus: None,
                teams,
                victims,
            },
        );
    }
    s
}

/// [`requests`]' in-quota and borrowing cases, naming a type.
pub fn typed_requests() -> Vec<(&'static str, SubmitRequest)> {
    vec![
        (
            "typed_in_quota_reclaim",
            request(
                Some("agents"),
                per_node("gres:gpu:h100:8"),
                Some("standard"),
            ),
        ),
        (
            "typed_borrow",
            request(
                Some("training"),
                per_node("gres:gpu:a100:4"),
                Some("experiment"),
            ),
        ),
        (
            "typed_reject_untyped",
            request(Some("agents"), per_node("gres:gpu:8"), None),
        ),
    ]
}

/// [`cluster_jobs`] with every other job of each team on H100, the rest on A100.
pub fn typed_cluster_jobs() -> Vec<ClusterJob> {
    cluster_jobs()
        .into_iter()
        .enumerate()
        .map(|(i, mut j)| {
            j.gpu_type = Some(if i % 2 == 0 { "h100" } else { "a100" }.into());
            j
        })
        .collect()
}

pub fn typed_govern_input<'a>(
    config: &'a Config,
    jobs: &'a [ClusterJob],
    fairshare: &'a BTreeMap<String, f64>,
    capacity_by_type: &'a BTreeMap<String, u32>,
) -> governance::GovernInput<'a> {
    governance::GovernInput {
        capacity_by_type,
        ..govern_input(config, jobs, fairshare)
    }
}
