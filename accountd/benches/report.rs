//! `accountd report teams` over a year of a 1,000-GPU cluster: generates the database (once) and
//! times the report's query and arithmetic at library level (`report::usage_report`), with
//! untyped quotas and with quotas per GPU type, and prints SQLite's query plan.
//!
//!     cargo bench -p accountd --bench report [-- --db FILE] [--runs N]
//!
//! The end-to-end command-line timing is contrib/bench/report.sh, which uses this database.
//!
//! The year: 2025-01-01 .. 2026-01-01 UTC, cluster `teamshare-live` with the teams of
//! contrib/bench/teamshare-1000.toml (1,000 GPUs, quotas 250/450/150) or, typed,
//! contrib/bench/teamshare-1000-typed.toml (the same totals split between h100 and a100), N job
//! runs (default 5,000,000: ~13,700 a day) with start times spread over the year, durations
//! exponential (mean 37 min, at most 3 days), 1/1/1/1/2/2/4/8 GPUs (mean 2.5: ~870 GPUs busy on
//! average), 60 % h100, 38 % a100, 2 % without a GPU type, 2 % CPU-only, 2 % in partition
//! `debug` (not governed), 1,000 still running at the end of the year; stored through
//! `Store::record_runs` (the ingest's own write path) in batches of 100,000. The capacity history
//! as `accountd run` records it (`Store::record_capacity`, hourly): 1,000 GPUs (600 h100, 400
//! a100), with a 2-day drain of one 8-GPU h100 node every month.

// Test code: a scenario reads top to bottom, so the workspace's 80-line limit is not for it.
#![allow(clippy::too_many_lines)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use accountd::period::Period;
use accountd::report::{self, UsageParams};
use accountd::sacct::JobRun;
use accountd::store::Store;

const YEAR_START: i64 = 1_735_689_600; // 2025-01-01T00:00:00Z
const YEAR_END: i64 = 1_767_225_600; // 2026-01-01T00:00:00Z
const JUN_START: i64 = 1_748_736_000; // 2025-06-01
const JUL_START: i64 = 1_751_328_000; // 2025-07-01
const DEC_START: i64 = 1_764_547_200; // 2025-12-01
const CLUSTER: &str = "teamshare-live";

/// The query of `Store::runs_overlapping` (accountd/crates/accounting/src/store/runs.rs), for EXPLAIN QUERY PLAN;
/// ?4 is `since` minus the longest run, ?5 where the running ones read start (each of the two
/// connections reads its half of the start times).
const RUNS_OVERLAPPING: &str =
    "SELECT id, account, start_time, end_time, gpus, gpu_types, partition FROM job_runs
     WHERE cluster = ?1 AND start_time < ?3 AND start_time >= ?4 AND end_time > ?2
     UNION ALL
     SELECT id, account, start_time, end_time, gpus, gpu_types, partition
     FROM job_runs INDEXED BY job_runs_running
     WHERE cluster = ?1 AND end_time IS NULL AND start_time < ?3 AND start_time >= ?5";

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

fn generate(db: &Path, runs: usize) {
    let t = Instant::now();
    let mut store = Store::open(db).expect("open");
    let mut rng = Rng(0x2545_F491_4F6C_DD1D);
    // Start times in order (ids follow time, as an ingest makes them).
    let span = (YEAR_END - YEAR_START) as f64;
    let mut batch: Vec<JobRun> = Vec::with_capacity(100_000);
    let running_from = runs.saturating_sub(1000);
    for i in 0..runs {
        let start = YEAR_START + (span * i as f64 / runs as f64) as i64 + (rng.next() % 7) as i64;
        let r = rng.unit();
        let account = if r < 0.30 {
            "agents"
        } else if r < 0.80 {
            "training"
        } else if r < 0.98 {
            "research"
        } else {
            "cpuonly"
        };
        let gpus: u64 = if account == "cpuonly" {
            0
        } else {
            [1, 1, 1, 1, 2, 2, 4, 8][(rng.next() % 8) as usize]
        };
        let dur = ((-(1.0 - rng.unit()).ln() * 2200.0) as i64 + 10).min(3 * 86_400);
        let end = if i >= running_from {
            None
        } else {
            Some(start + dur)
        };
        let kind = rng.unit();
        let gpu_type = if gpus == 0 || kind >= 0.98 {
            None
        } else if kind < 0.6 {
            Some("h100")
        } else {
            Some("a100")
        };
        let partition = if rng.unit() < 0.02 { "debug" } else { "gpu" };
        let mut gpus_by_type = BTreeMap::new();
        let alloc_tres = if let Some(t) = gpu_type {
            gpus_by_type.insert(t.to_string(), gpus);
            format!(
                "billing={0},cpu={0},gres/gpu:{t}={1},gres/gpu={1},mem={2}G,node=1",
                8 * gpus,
                gpus,
                64 * gpus
            )
        } else if gpus > 0 {
            format!(
                "billing={0},cpu={0},gres/gpu={1},mem={2}G,node=1",
                8 * gpus,
                gpus,
                64 * gpus
            )
        } else {
            "billing=4,cpu=4,mem=16G,node=1".to_string()
        };
        let id = 1_000_000 + i as u32;
        batch.push(JobRun {
            cluster: CLUSTER.into(),
            job_id_raw: id,
            job_id: id.to_string(),
            account: account.into(),
            user: format!("user{:03}", rng.next() % 300),
            partition: partition.into(),
            qos: "teamshare".into(),
            state: if end.is_some() {
                "COMPLETED"
            } else {
                "RUNNING"
            }
            .into(),
            submit: Some(start - (rng.next() % 600) as i64),
            start,
            end,
            elapsed: end.map(|e| e - start),
            gpus,
            gpus_by_type,
            alloc_tres,
            eligible: None,
            time_limit: Some(86_400),
            nnodes: Some(1),
        });
        if batch.len() == batch.capacity() || i + 1 == runs {
            store
                .record_runs(&batch, start + 60, None)
                .expect("record_runs");
            batch.clear();
            eprint!("\r  {} / {runs} runs stored", i + 1);
        }
    }
    eprintln!();
    record_capacity(&mut store);
    store
        .connection()
        // No ANALYZE: accountd never runs it, so its databases have no sqlite_stat1 and the
        // planner works without statistics; so does this one.
        .execute_batch("PRAGMA wal_checkpoint(TRUNCATE);")
        .ok();
    println!(
        "generated {} in {:.1} s",
        db.display(),
        t.elapsed().as_secs_f64()
    );
}

/// Hourly capacity samples for the year: 1,000 GPUs (600 h100, 400 a100), one 8-GPU h100 node
/// drained for two days each month (the 10th and 11th).
fn record_capacity(store: &mut Store) {
    let mut ts = YEAR_START;
    let mut n = 0;
    while ts < YEAR_END {
        let day_of_month = ((ts - YEAR_START) / 86_400) % 30;
        let drained = day_of_month == 9 || day_of_month == 10;
        let gpus = if drained { 992 } else { 1000 };
        let h100 = if drained { 592 } else { 600 };
        let sample = accountd::store::CapacitySample {
            ts,
            gpus,
            by_type: BTreeMap::from([("h100".to_string(), h100), ("a100".to_string(), 400)]),
        };
        if store
            .record_capacity(CLUSTER, &sample)
            .expect("record_capacity")
        {
            n += 1;
        }
        ts += 3600;
    }
    println!("  {n} capacity samples stored");
}

fn explain(store: &Store, since: i64, until: i64) {
    let mut stmt = store
        .connection()
        .prepare(&format!("EXPLAIN QUERY PLAN {RUNS_OVERLAPPING}"))
        .unwrap();
    let rows = stmt
        .query_map(
            rusqlite::params![CLUSTER, since, until, since - 3 * 86_400, i64::MIN],
            |r| {
                Ok((
                    r.get::<_, i64>(0)?,
                    r.get::<_, i64>(1)?,
                    r.get::<_, String>(3)?,
                ))
            },
        )
        .unwrap();
    println!("  EXPLAIN QUERY PLAN:");
    for row in rows {
        let (_, parent, detail) = row.unwrap();
        println!("    {}{detail}", if parent == 0 { "" } else { "  " });
    }
}

fn time_month(db: &Path, config: &teamshare_config::Config, name: &str, since: i64, until: i64) {
    let mut times = Vec::new();
    let mut rows_seen = 0;
    for _ in 0..5 {
        let t = Instant::now();
        // Opening is part of every report.
        let store = Store::open(db).expect("open");
        let params =
            UsageParams::from_config(config, Period { since, until }, YEAR_END + 86_400, vec![]);
        let r = report::usage_report(&store, &params).expect("report");
        times.push(t.elapsed().as_secs_f64() * 1000.0);
        rows_seen = r.rows.iter().map(|r| r.jobs).sum::<u64>();
    }
    // The same work phase by phase: the runs' query (rows into RunUsage), the capacity history,
    // the model's arithmetic (splits, costs).
    let store = Store::open(db).unwrap();
    let params =
        UsageParams::from_config(config, Period { since, until }, YEAR_END + 86_400, vec![]);
    // Each phase the least of 5 (the machine is shared: the least is the least disturbed).
    let mut query_ms = f64::MAX;
    let mut runs = Vec::new();
    for _ in 0..5 {
        drop(runs);
        let t = Instant::now();
        runs = store.runs_overlapping(CLUSTER, since, until).unwrap();
        query_ms = query_ms.min(t.elapsed().as_secs_f64() * 1000.0);
    }
    let n = runs.len();
    let t = Instant::now();
    let capacity = store.capacity_history(CLUSTER, since, until).unwrap();
    let capacity_ms = t.elapsed().as_secs_f64() * 1000.0;
    let mut compute_ms = f64::MAX;
    let mut report = None;
    for _ in 0..5 {
        let t = Instant::now();
        report = Some(report::compute_usage(&runs, &capacity, &params));
        compute_ms = compute_ms.min(t.elapsed().as_secs_f64() * 1000.0);
    }
    let report = report.expect("computed");
    let t = Instant::now();
    let text = report::render_teams(&report, report::Format::Table, true, &chrono::Utc);
    let by_type: usize = report.rows.iter().map(|r| r.by_type.len()).sum();
    let render_ms = t.elapsed().as_secs_f64() * 1000.0;
    drop((runs, text));
    times.sort_by(|a, b| a.partial_cmp(b).unwrap());
    println!(
        "  {name:<22} runs overlapping {n:>8} (GPU runs {rows_seen:>8})  usage_report: min {:>7.0} ms  median {:>7.0} ms  max {:>7.0} ms",
        times[0], times[2], times[4]
    );
    println!(
        "  {:<22} phases (least of 5): runs_overlapping {query_ms:.0} ms, capacity_history {capacity_ms:.1} ms, compute_usage {compute_ms:.0} ms, render {render_ms:.1} ms ({by_type} type rows)",
        ""
    );
}

fn main() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    // year-types: the data has had a100 and ungoverned runs since issue 10 (an older year.db has
    // neither).
    let mut db = PathBuf::from("/tmp/teamshare-bench-report/year-types.db");
    let mut runs = 5_000_000usize;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--db" => db = args.next().expect("--db FILE").into(),
            "--runs" => runs = args.next().and_then(|v| v.parse().ok()).expect("--runs N"),
            _ => {} // cargo bench's --bench
        }
    }
    let configs = [
        ("untyped quotas", "contrib/bench/teamshare-1000.toml"),
        (
            "quotas per GPU type",
            "contrib/bench/teamshare-1000-typed.toml",
        ),
    ]
    .map(|(name, file)| {
        let config = teamshare_config::load(&root.join(file)).expect("config");
        (name, config)
    });
    if !db.exists() {
        std::fs::create_dir_all(db.parent().unwrap()).unwrap();
        println!("generating {runs} job runs into {} ...", db.display());
        generate(&db, runs);
    }
    let store = Store::open(&db).expect("open");
    // Statistics left by an earlier version of this bench would steer the planner away from
    // what accountd's own databases (never analysed) get.
    store
        .connection()
        .execute_batch("DROP TABLE IF EXISTS sqlite_stat1; DROP TABLE IF EXISTS sqlite_stat4;")
        .expect("drop statistics");
    let (n, types, capacity): (i64, i64, i64) = store
        .connection()
        .query_row(
            "SELECT (SELECT count(*) FROM job_runs),
                    (SELECT count(*) FROM job_runs WHERE gpu_types IS NOT NULL),
                    (SELECT count(*) FROM capacity_samples)",
            [],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
        .unwrap();
    let size = std::fs::metadata(&db).map(|m| m.len()).unwrap_or(0);
    println!(
        "{}: {n} job runs, {types} of them typed, {capacity} capacity samples, {:.0} MiB",
        db.display(),
        size as f64 / 1048576.0
    );
    if capacity == 0 {
        // A database made before capacity history existed (schema 2): add it.
        let mut store = store;
        record_capacity(&mut store);
    } else {
        drop(store);
    }

    let months = [
        ("2025-12 (last month)", DEC_START, YEAR_END),
        ("2025-06 (mid-year)", JUN_START, JUL_START),
    ];
    println!("as accountd's schema is (indexes of store.rs):");
    explain(&Store::open(&db).unwrap(), DEC_START, YEAR_END);
    for (what, config) in &configs {
        println!("{what}:");
        for (name, s, u) in months {
            time_month(&db, config, name, s, u);
        }
    }
}
