//! What the governor's idleness read costs every 10 s (issue 29): the samples of a 15-minute
//! window of 64 nodes x 8 GPUs read from the store (`daemon::idleness_from_store`, which calls
//! `Store::gpu_time_in`, the read the governor makes), then which running jobs were idle
//! (`idle_jobs`).
//!
//!     cargo bench -p accountd --bench idleness [-- --history-min N] [--reads N]
//!
//! For each sampling interval (10 s, the example configuration's `sample_interval`, and 1 s),
//! a database in a temporary directory is filled with `--history-min` minutes (default 60) of
//! samples before the window and the window itself, as the collection stores them
//! (`Store::record_samples`, one transaction per node and minute). Each node runs 4 jobs of
//! 2 GPUs; one job in ten is idle (every sample at 0 %), the others busy. Then `--reads`
//! (default 30) reads of the window, each opening the database read-only as the governor does;
//! the table gives p50, p95 and max of the wall time, and the median CPU time of a read.

// Test code: a scenario reads top to bottom, so the workspace's 80-line limit is not for it.
#![allow(clippy::too_many_lines)]

use std::time::{Duration, Instant};

use accountd::daemon::idleness_from_store;
use accountd::gpu_sample::Sample;
use accountd::store::Store;
use teamshare_policy::governance::idleness::idle_jobs;
use teamshare_policy::governance::{ClusterJob, Phase};

const NODES: u32 = 64;
const GPUS: u32 = 8;
const GPUS_PER_JOB: u32 = 2;
/// The end of the window: 5 minutes past an hour (1,800,000,000 is one), so the window
/// straddles the hour.
const NOW: i64 = 1_800_000_300;
const WINDOW: Duration = Duration::from_secs(15 * 60);
const CLUSTER: &str = "bench";

fn arg(name: &str, default: u64) -> u64 {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .map_or(default, |v| v.parse().expect("a number"))
}

/// The job on a node's GPU: 4 jobs of 2 GPUs per node, started 2 hours before `NOW`.
fn job_of(node: u32, gpu: u32) -> u32 {
    1000 + node * (GPUS / GPUS_PER_JOB) + gpu / GPUS_PER_JOB
}
const JOB_START: i64 = NOW - 7200;

fn idle(job: u32) -> bool {
    job.is_multiple_of(10)
}

fn samples(node: u32, from_ms: i64, to_ms: i64, interval_ms: i64) -> Vec<Sample> {
    let mut out = Vec::new();
    let mut ts = from_ms;
    while ts < to_ms {
        for gpu in 0..GPUS {
            let job = job_of(node, gpu);
            out.push(Sample {
                node: format!("n{node:02}"),
                gpu_uuid: format!("GPU-{node:04}-{gpu:04}"),
                ts_ms: ts,
                interval_ms,
                minor: Some(gpu),
                job_id_raw: Some(job),
                job_start: Some(JOB_START),
                util_gpu: if idle(job) {
                    0
                } else {
                    40 + u32::try_from((ts / interval_ms) % 50).unwrap_or(0)
                },
                util_mem: 20,
                mem_used: 1 << 30,
                mem_total: Some(80 << 30),
                processes: Some(1),
            });
        }
        ts += interval_ms;
    }
    out
}

fn running_jobs() -> Vec<ClusterJob> {
    (0..NODES)
        .flat_map(|node| (0..GPUS / GPUS_PER_JOB).map(move |j| (node, j * GPUS_PER_JOB)))
        .map(|(node, gpu)| ClusterJob {
            id: u64::from(job_of(node, gpu)),
            team: "t".into(),
            phase: Phase::Running,
            gpus: GPUS_PER_JOB,
            gpu_type: None,
            priority: 1,
            submit: JOB_START,
            start: Some(JOB_START),
            eligible: true,
            parked: false,
            park_held: false,
            batch: true,
            nodes: vec![format!("n{node:02}")],
            node_count: 1,
            completing: false,
            tasks: 1,
        })
        .collect()
}

/// CPU time of this thread so far, in ms (`/proc/thread-self/schedstat`, nanoseconds): the
/// read's CPU apart from the time it waited for the disk or for a core.
fn thread_cpu_ms() -> f64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse::<f64>().ok())
        .map_or(f64::NAN, |ns| ns / 1e6)
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    let rank = ((p / 100.0) * (sorted.len() - 1) as f64).round() as usize;
    sorted[rank.min(sorted.len() - 1)]
}

fn main() {
    let history_min = i64::try_from(arg("--history-min", 60)).expect("minutes");
    let reads = usize::try_from(arg("--reads", 30)).expect("reads");
    let config = teamshare_config::parse(
        &format!(
            "[cluster]\nname = \"{CLUSTER}\"\npartitions = [\"gpu\"]\ncurrency = \"EUR\"\n\n\
             [gpu_types.default]\nrate_per_hour = 2.5\n\n\
             [[team]]\nname = \"t\"\nquota = 512\nweight = 1\n"
        ),
        "teamshare.toml",
    )
    .expect("bench configuration");
    let jobs = running_jobs();
    println!(
        "{NODES} nodes x {GPUS} GPUs, {} jobs of {GPUS_PER_JOB} GPUs ({} idle), {history_min} min of history + a {} min window, {reads} reads",
        jobs.len(),
        jobs.iter().filter(|j| idle(u32::try_from(j.id).unwrap_or(0))).count(),
        WINDOW.as_secs() / 60
    );
    println!(
        "{:>8} {:>10} {:>8} {:>9} {:>10} {:>10} {:>10} {:>10} {:>10} {:>8}",
        "interval",
        "rows",
        "DB MiB",
        "fill s",
        "read p50",
        "read p95",
        "read max",
        "CPU p50",
        "idle_jobs",
        "idle"
    );
    for interval_s in [10i64, 1] {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let db = dir.path().join("accountd.db");
        let store = Store::open(&db).expect("a new database");
        let interval_ms = interval_s * 1000;
        let since_ms =
            (NOW - i64::try_from(WINDOW.as_secs()).unwrap_or(0) - history_min * 60) * 1000;
        let t0 = Instant::now();
        let mut rows = 0usize;
        let mut minute = since_ms;
        while minute < NOW * 1000 {
            for node in 0..NODES {
                let batch = samples(node, minute, minute + 60_000, interval_ms);
                rows += store
                    .record_samples(CLUSTER, &batch, 5.0, NOW)
                    .expect("samples stored")
                    .inserted;
            }
            minute += 60_000;
        }
        let fill = t0.elapsed().as_secs_f64();
        drop(store);
        let size = std::fs::metadata(&db).map_or(0, |m| m.len()) as f64 / 1_048_576.0;
        let mut source = idleness_from_store(db.clone());
        let mut times = Vec::with_capacity(reads);
        let mut cpu = Vec::with_capacity(reads);
        let mut idle_times = Vec::with_capacity(reads);
        let mut idle_found = 0;
        for _ in 0..reads {
            let (t, c) = (Instant::now(), thread_cpu_ms());
            let windows = source(&config, WINDOW, NOW)
                .expect("the window read")
                .expect("a database");
            times.push(t.elapsed().as_secs_f64() * 1000.0);
            cpu.push(thread_cpu_ms() - c);
            let t = Instant::now();
            let found = idle_jobs(&jobs, &windows, WINDOW, NOW);
            idle_times.push(t.elapsed().as_secs_f64() * 1000.0);
            idle_found = found.len();
        }
        times.sort_by(f64::total_cmp);
        idle_times.sort_by(f64::total_cmp);
        cpu.sort_by(f64::total_cmp);
        println!(
            "{:>7}s {rows:>10} {size:>8.1} {fill:>9.1} {:>8.1}ms {:>8.1}ms {:>8.1}ms {:>8.1}ms {:>8.3}ms {idle_found:>8}",
            interval_s,
            percentile(&times, 50.0),
            percentile(&times, 95.0),
            percentile(&times, 100.0),
            percentile(&cpu, 50.0),
            percentile(&idle_times, 50.0),
        );
    }
}
