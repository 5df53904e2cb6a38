//! Property tests of everything the plugin reads from a job: no input panics, and the verdict
//! matches a reference written independently here with plain arithmetic over the structured
//! inputs the request strings are generated from.
//!
//! Fast by default (CI); a soak sets `PROPTEST_CASES`, e.g. `PROPTEST_CASES=1000000 cargo test
//! --release -p teamshare-policy --test fuzz`.

// Test code: a scenario reads top to bottom, so the workspace's 80-line limit is not for it.
#![allow(clippy::too_many_lines)]

use std::collections::BTreeMap;

use proptest::prelude::*;
use teamshare_config::Config;
use teamshare_policy::governance::{PublishedState, STATE_VERSION};
use teamshare_policy::gres::{gpu_count, MAX_GPUS_PER_JOB};
use teamshare_policy::submit::{Admitted, StateView};
use teamshare_policy::{
    check_modify, check_submit, GpuAsk, ModifyRequest, RejectKind, SubmitRequest, Verdict,
};

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

[[priority_class]]
name = "inference"
value = 100
"#;

const CAPACITY: u64 = 8;

fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(512)
}

fn config() -> Config {
    teamshare_config::parse(CONFIG, "teamshare.toml").unwrap()
}

/// One GPU entry of a request, as structured input.
#[derive(Debug, Clone)]
struct Entry {
    slash: bool,
    gpu_type: Option<&'static str>,
    /// None: no count (one GPU).
    count: Option<(u64, &'static str)>,
}

const SUFFIXES: [(&str, u128); 12] = [
    ("", 1),
    ("k", 1 << 10),
    ("K", 1 << 10),
    ("kb", 1_000),
    ("m", 1 << 20),
    ("MiB", 1 << 20),
    ("g", 1 << 30),
    ("gb", 1_000_000_000),
    ("t", 1 << 40),
    ("T", 1 << 40),
    ("p", 1 << 50),
    ("pb", 1_000_000_000_000_000),
];

fn entry() -> impl Strategy<Value = Entry> {
    (
        any::<bool>(),
        prop::option::of(prop::sample::select(vec!["h100", "a100", "1g.5gb"])),
        prop::option::of((
            prop_oneof![0u64..10, 0u64..5_000, any::<u64>()],
            prop::sample::select(SUFFIXES.iter().map(|s| s.0).collect::<Vec<_>>()),
        )),
    )
        .prop_map(|(slash, gpu_type, count)| Entry {
            slash,
            gpu_type,
            count,
        })
}

fn render(e: &Entry) -> String {
    let mut s = if e.slash { "gres/gpu" } else { "gres:gpu" }.to_string();
    if let Some(t) = e.gpu_type {
        s.push(':');
        s.push_str(t);
    }
    if let Some((n, suffix)) = e.count {
        s.push_str(&format!(":{n}{suffix}"));
    }
    s
}

/// The reference count of one entry, in 128 bits.
fn reference_count(e: &Entry) -> u128 {
    match e.count {
        None => 1,
        Some((n, suffix)) => {
            let mult = SUFFIXES.iter().find(|s| s.0 == suffix).unwrap().1;
            u128::from(n) * mult
        }
    }
}

/// A request string: GPU entries mixed with other TRES, joined by `,`.
fn spec() -> impl Strategy<Value = (String, u128)> {
    (
        prop::collection::vec(entry(), 0..4),
        prop::collection::vec(
            prop::sample::select(vec!["gres:shard:2", "license/matlab:1", "gres:gpumem:40G"]),
            0..2,
        ),
    )
        .prop_map(|(entries, others)| {
            let mut parts: Vec<String> = entries.iter().map(render).collect();
            parts.extend(others.iter().map(|s| s.to_string()));
            let total = entries.iter().map(reference_count).sum();
            (parts.join(","), total)
        })
}

fn clamp(n: u128) -> u64 {
    u64::try_from(n).unwrap_or(u64::MAX)
}

#[derive(Debug, Clone)]
struct Job {
    spec: String,
    per_spec: u128,
    /// 0 per job, 1 per node, 2 per task, 3 per socket.
    place: u8,
    nodes: Option<u32>,
    tasks: Option<u32>,
    sockets: Option<u32>,
    account: Option<&'static str>,
    qos: Option<&'static str>,
    partition: Option<&'static str>,
    uid: u32,
}

fn job() -> impl Strategy<Value = Job> {
    let count = || prop::option::of(prop_oneof![0u32..4, any::<u32>()]);
    (
        spec(),
        0u8..4,
        (count(), count(), count()),
        prop::option::of(prop::sample::select(vec![
            "", "agents", "research", "nosuch",
        ])),
        prop::option::of(prop::sample::select(vec![
            "",
            "teamshare",
            "TeamShare",
            "inference",
            "gold",
        ])),
        prop::option::of(prop::sample::select(vec!["", "gpu", "cpu", "cpu,gpu"])),
        prop::sample::select(vec![0u32, 1000]),
    )
        .prop_map(
            |((spec, per_spec), place, (nodes, tasks, sockets), account, qos, partition, uid)| {
                Job {
                    spec,
                    per_spec,
                    place,
                    nodes,
                    tasks,
                    sockets,
                    account,
                    qos,
                    partition,
                    uid,
                }
            },
        )
}

fn ask(j: &Job) -> GpuAsk {
    let mut a = GpuAsk {
        min_nodes: j.nodes,
        num_tasks: j.tasks,
        sockets_per_node: j.sockets,
        ..GpuAsk::default()
    };
    let s = Some(j.spec.clone());
    match j.place {
        0 => a.tres_per_job = s,
        1 => a.tres_per_node = s,
        2 => a.tres_per_task = s,
        _ => a.tres_per_socket = s,
    }
    a
}

/// The fewest GPUs the job can hold, straight from the structured input.
fn reference_gpus(j: &Job) -> u128 {
    let nonzero = |v: Option<u32>| u128::from(v.filter(|&n| n != 0).unwrap_or(1));
    let factor = match j.place {
        0 => 1,
        1 => nonzero(j.nodes),
        2 => match j.tasks.filter(|&n| n != 0) {
            Some(t) => u128::from(t),
            None => nonzero(j.nodes),
        },
        _ => nonzero(j.sockets).saturating_mul(nonzero(j.nodes)),
    };
    j.per_spec.saturating_mul(factor)
}

/// What the submit check must decide, written from DESIGN §4 rule 7 and issue 8.
fn reference_kind(j: &Job) -> Option<RejectKind> {
    let gpus = reference_gpus(j);
    if gpus > u128::from(MAX_GPUS_PER_JOB) {
        return Some(RejectKind::InvalidGres);
    }
    let internal = j.qos.is_some_and(|q| q.to_lowercase() == "teamshare");
    if internal && j.uid != 0 {
        return Some(RejectKind::InternalQos);
    }
    let governed = match j.partition {
        None | Some("") => true,
        Some(p) => p.split(',').any(|p| p == "gpu"),
    };
    // Issue 30: a share of a GPU in a governed partition, whoever asks (the only share the
    // generator writes is two shards).
    if governed && j.spec.split(',').any(|e| e == "gres:shard:2") {
        return Some(RejectKind::GpuShare);
    }
    let account = j.account.filter(|a| !a.is_empty());
    if !governed || gpus == 0 && account.is_none() {
        return None;
    }
    let ceiling = match account {
        None => return Some(RejectKind::NoTeam),
        Some("agents") => Some(4),
        Some("research") => None,
        Some(_) => return Some(RejectKind::UnknownTeam),
    };
    if ceiling.is_some_and(|c| gpus > c) {
        return Some(RejectKind::OverTeamLimit);
    }
    if j.qos == Some("gold") {
        return Some(RejectKind::UnknownClass);
    }
    if gpus > u128::from(CAPACITY) {
        return Some(RejectKind::LargerThanCluster);
    }
    None
}

fn kind(v: &Verdict) -> Option<RejectKind> {
    match v {
        Verdict::Accept(_) => None,
        Verdict::Reject(r) => Some(r.kind),
    }
}

fn state() -> PublishedState {
    PublishedState {
        bands: Default::default(),
        version: STATE_VERSION,
        generated_at: 100,
        config_digest: String::new(),
        capacity: CAPACITY as u32,
        capacity_by_type: BTreeMap::new(),
        free_gpus: CAPACITY as u32,
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

fn submit(c: &Config, j: &Job) -> Verdict {
    let s = state();
    let admitted = Admitted::default();
    let req = SubmitRequest {
        waits: false,
        account: j.account.map(str::to_string),
        partition: j.partition.map(str::to_string),
        qos: j.qos.map(str::to_string),
        user_id: j.uid,
        submit_uid: j.uid,
        gpus: ask(j),
        array: None,
    };
    check_submit(
        c,
        &req,
        StateView::Fresh {
            state: &s,
            admitted: &admitted,
            now: 100,
        },
    )
}

/// Text a user might type, biased towards the shapes the parser looks for.
fn junk() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<String>(),
        "[ gres:/gpu=,;:0-9a-zA-Z+\\-\\.\t]{0,40}",
        "(x?gres[:/]gpu(:[a-z0-9.]{0,6})?(:[+\\- ]?[0-9]{0,25}[kKmMgGtTpPbBi]{0,3})?[,;]?){1,4}",
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases()))]

    #[test]
    fn gpu_counts_match_the_reference((spec, total) in spec()) {
        let c = gpu_count(&spec).unwrap();
        prop_assert_eq!(c.total, clamp(total), "{}", spec);
    }

    #[test]
    fn submit_verdicts_match_the_reference(j in job()) {
        let v = submit(&config(), &j);
        prop_assert_eq!(kind(&v), reference_kind(&j), "{:?} -> {:?}", j, v);
        if let Verdict::Accept(a) = &v {
            prop_assert_eq!(u128::from(a.gpus), reference_gpus(&j));
        }
    }

    #[test]
    fn a_restated_update_is_judged_like_the_submission(j in job()) {
        let c = config();
        // The job's spec in its place, every other TresPer* cleared.
        let mut gpus = ask(&j);
        for field in [
            &mut gpus.tres_per_job,
            &mut gpus.tres_per_node,
            &mut gpus.tres_per_task,
            &mut gpus.tres_per_socket,
        ] {
            field.get_or_insert_with(String::new);
        }
        // Every count the per-place spec depends on is given.
        gpus.min_nodes = Some(j.nodes.unwrap_or(1));
        gpus.num_tasks = Some(j.tasks.unwrap_or(1));
        gpus.sockets_per_node = Some(j.sockets.unwrap_or(1));
        let update = ModifyRequest {
            submit_uid: j.uid,
            account: j.account.map(str::to_string),
            partition: j.partition.map(str::to_string),
            qos: None,
            priority: None,
            gpus: gpus.clone(),
            ntasks_per_gpu: None,
        };
        let as_job = Job {
            nodes: gpus.min_nodes,
            tasks: gpus.num_tasks,
            sockets: gpus.sockets_per_node,
            qos: None,
            ..j.clone()
        };
        let expected = reference_kind(&as_job);
        let got = kind(&check_modify(&c, &update, Some(&state())));
        if j.uid == 0 {
            // Operators: only unreadable or absurd counts.
            let absurd = reference_gpus(&as_job) > u128::from(MAX_GPUS_PER_JOB);
            prop_assert_eq!(got, absurd.then_some(RejectKind::InvalidGres));
        } else {
            prop_assert_eq!(got, expected, "{:?}", update);
        }
    }

    #[test]
    fn no_text_panics_anywhere(
        a in junk(), b in junk(), account in junk(), qos in junk(), partition in junk(),
        nodes in any::<Option<u32>>(), tasks in any::<Option<u32>>(),
        per_node in any::<Option<u32>>(), sockets in any::<Option<u32>>(),
        per_gpu in any::<Option<u32>>(), priority in any::<Option<u32>>(), uid in 0u32..2,
    ) {
        let c = config();
        let _ = gpu_count(&a);
        let gpus = GpuAsk {
            tres_per_job: Some(a.clone()),
            tres_per_node: Some(b.clone()),
            tres_per_task: Some(a),
            tres_per_socket: Some(b),
            min_nodes: nodes,
            num_tasks: tasks,
            ntasks_per_node: per_node,
            sockets_per_node: sockets,
        };
        let req = SubmitRequest {
                        waits: false,
account: Some(account.clone()),
            partition: Some(partition.clone()),
            qos: Some(qos.clone()),
            user_id: uid,
            submit_uid: uid,
            gpus: gpus.clone(),
            // Junk as an array index too: read or counted as one task, never a panic.
            array: Some(qos.clone()),
        };
        let v = check_submit(&c, &req, StateView::Stale);
        if let Verdict::Accept(a) = &v {
            prop_assert!(a.gpus <= MAX_GPUS_PER_JOB);
        }
        if let Verdict::Reject(r) = &v {
            prop_assert!(!r.message.contains('\n'));
        }
        let update = ModifyRequest {
            submit_uid: uid,
            account: Some(account),
            partition: Some(partition),
            qos: Some(qos),
            priority,
            gpus,
            ntasks_per_gpu: per_gpu,
        };
        let _ = check_modify(&c, &update, Some(&state()));
        let _ = check_modify(&c, &ModifyRequest { qos: None, ..update }, None);
    }
}
