//! A `/metrics` scrape: the exposition of a site with 40 teams (render, from figures already
//! computed), and one whole scrape over HTTP on loopback (connect, request, read to the end).
//!
//!     cargo bench -p accountd --bench metrics
//!
//! The month's figures come from a database of 20,000 runs of the current month, computed once
//! (`metrics::month_figures`, which the exporter caches for 10 s): the benchmark is what a
//! scrape costs between two refreshes. Only APIs that the hand-written exposition also had are
//! used, so the same file measures both (docs/benchmarks.md).

// Test code: a scenario reads top to bottom, so the workspace's 80-line limit is not for it.
#![allow(clippy::too_many_lines)]

use std::collections::BTreeMap;
use std::io::{Read as _, Write as _};
use std::net::TcpStream;
use std::sync::Arc;

use accountd::metrics::{self, Body, Live, LiveTeam, MetricsServer};
use accountd::sacct::JobRun;
use accountd::store::{CapacitySample, Store};
use chrono::Utc;
use criterion::{black_box, criterion_group, criterion_main, Criterion};

const TEAMS: usize = 40;
const NOW: i64 = 1_716_163_200; // 2024-05-20T00:00:00Z
const MAY: i64 = 1_714_521_600; // 2024-05-01T00:00:00Z

fn config() -> teamshare_config::Config {
    let mut text = String::from(
        "[cluster]\nname = \"bench\"\npartitions = [\"gpu\"]\ncurrency = \"EUR\"\n\n\
         [gpu_types.default]\nrate_per_hour = 2.5\n\n",
    );
    for t in 0..TEAMS {
        text.push_str(&format!(
            "[[team]]\nname = \"team{t:02}\"\nquota = 20\nweight = 1\n\n"
        ));
    }
    text.push_str("[accountd]\nborrowed_cost_factor = 0.5\n");
    teamshare_config::parse(&text, "teamshare.toml").expect("bench configuration")
}

fn live() -> Live {
    let teams = (0..TEAMS)
        .map(|t| {
            let team = LiveTeam {
                gpu_limit: 24,
                running_gpus: (t as u32 * 7) % 30,
                ..LiveTeam::default()
            };
            (format!("team{t:02}"), team)
        })
        .collect();
    let per_team = |n: u64| (0..TEAMS).map(|t| (format!("team{t:02}"), n)).collect();
    Live {
        capacity: Some(1000),
        governor_last_pass: Some(NOW - 1),
        governor_passes: 1000,
        governor_last_pass_seconds: Some(0.02),
        governor_last_pass_slurm_calls: Some(2),
        governor_quiet_passes: 30,
        governor_slurm_calls: 2000,
        governor_pass_seconds: 20.0,
        governor_acts: 300,
        governor_act_seconds: 3.0,
        governor_act_slurm_calls: 900,
        governor_act_processes: 40,
        governor_last_act_seconds: Some(0.01),
        governor_last_act_slurm_calls: Some(3),
        ingest_last_success: Some(NOW - 30),
        teams,
        displaced: per_team(3),
        reclaimed: per_team(5),
        over_ceiling: BTreeMap::new(),
        limits: metrics::LiveLimits {
            in_force: (0..TEAMS).map(|t| (format!("team{t:02}"), 8)).collect(),
            failures: BTreeMap::new(),
            updates: (0..TEAMS).map(|t| (format!("team{t:02}"), 4)).collect(),
        },
    }
}

fn month(config: &teamshare_config::Config) -> metrics::MonthFigures {
    let mut store = Store::open_in_memory().expect("store");
    let mut runs = Vec::new();
    for i in 0..20_000u32 {
        let start = MAY + i64::from(i) * 80;
        let gpus = u64::from(1 + i % 4);
        runs.push(JobRun {
            cluster: "bench".into(),
            job_id_raw: i,
            job_id: i.to_string(),
            account: format!("team{:02}", i as usize % TEAMS),
            user: "u".into(),
            partition: "gpu".into(),
            qos: "teamshare".into(),
            state: if i % 50 == 0 {
                "PREEMPTED"
            } else {
                "COMPLETED"
            }
            .into(),
            submit: Some(start - 60),
            start,
            end: Some(start + 3600),
            elapsed: Some(3600),
            gpus,
            gpus_by_type: BTreeMap::new(),
            alloc_tres: format!("cpu=8,gres/gpu={gpus},node=1"),
            eligible: Some(start - 60),
            time_limit: Some(7200),
            nnodes: Some(1),
        });
    }
    store.record_runs(&runs, NOW, None).expect("runs");
    let capacity = CapacitySample {
        ts: MAY - 3600,
        gpus: 1000,
        by_type: BTreeMap::new(),
    };
    store.record_capacity("bench", &capacity).expect("capacity");
    metrics::month_figures(&store, config, NOW, &Utc).expect("month figures")
}

fn bench(c: &mut Criterion) {
    let config = config();
    let live = live();
    let month = month(&config);
    let text = metrics::render(&config, &live, Some(&month));
    eprintln!(
        "exposition: {} bytes, {} series",
        text.len(),
        text.lines().filter(|l| !l.starts_with('#')).count()
    );
    c.bench_function("render 40 teams", |b| {
        b.iter(|| metrics::render(black_box(&config), black_box(&live), Some(&month)))
    });

    let body: Body = Arc::new(move || text.clone());
    let server = MetricsServer::start("127.0.0.1:0".parse().expect("addr"), body).expect("bind");
    let addr = server.local_addr();
    c.bench_function("scrape over HTTP", |b| {
        b.iter(|| {
            let mut s = TcpStream::connect(addr).expect("connect");
            s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                .expect("request");
            let mut out = Vec::new();
            s.read_to_end(&mut out).expect("response");
            assert!(out.starts_with(b"HTTP/1.1 200"));
            out.len()
        })
    });
    server.stop();
}

criterion_group!(benches, bench);
criterion_main!(benches);
