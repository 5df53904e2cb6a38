//! `accountd report teams` over a year of a 1,000-GPU cluster: generates the database (once) and
//! times the report's query and arithmetic at library level (`report::usage_report`), prints
//! SQLite's query plan, and optionally the same with candidate indexes (created on the bench's
//! own database and dropped again: accountd's schema is not changed).
//!
//!     cargo bench -p accountd --bench report [-- --db FILE] [--runs N] [--try-indexes]
//!
//! The end-to-end command-line timing is contrib/bench/report.sh, which uses this database.
//!
//! The year: 2025-01-01 .. 2026-01-01 UTC, cluster `teamshare-live` (tests/live/teamshare.toml),
//! N job runs (default 5,000,000: ~13,700 a day) with start times spread over the year, durations
//! exponential (mean 42 min, at most 3 days), 1/2/4/8 GPUs (mean ~2.1, which keeps ~1,000 GPUs
//! busy), 60 % typed (h100), 2 % CPU-only, ~1,000 still running at the end of the year. Stored
//! through `Store::record_runs` (the ingest's own write path) in batches of 100,000.

use std::collections::BTreeMap;
use std::path::PathBuf;
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

/// The query of `Store::runs_overlapping` (accountd/src/store.rs), for EXPLAIN QUERY PLAN.
const RUNS_OVERLAPPING: &str =
    "SELECT r.id, r.account, r.start_time, r.end_time, r.gpus, t.gpu_type, t.gpus
     FROM job_runs r LEFT JOIN job_run_gpu_types t ON t.run_id = r.id
     WHERE r.cluster = ?1 AND r.start_time < ?3
       AND (r.end_time IS NULL OR r.end_time > ?2)
     ORDER BY r.id, t.gpu_type";

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

fn generate(db: &PathBuf, runs: usize) {
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
        let dur = ((-(1.0 - rng.unit()).ln() * 2520.0) as i64 + 10).min(3 * 86_400);
        let end = if i >= running_from {
            None
        } else {
            Some(start + dur)
        };
        let typed = gpus > 0 && rng.unit() < 0.6;
        let mut gpus_by_type = BTreeMap::new();
        let alloc_tres = if typed {
            gpus_by_type.insert("h100".to_string(), gpus);
            format!(
                "billing={0},cpu={0},gres/gpu:h100={1},gres/gpu={1},mem={2}G,node=1",
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
            partition: "gpu".into(),
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

fn explain(store: &Store, since: i64, until: i64) {
    let mut stmt = store
        .connection()
        .prepare(&format!("EXPLAIN QUERY PLAN {RUNS_OVERLAPPING}"))
        .unwrap();
    let rows = stmt
        .query_map(rusqlite::params![CLUSTER, since, until], |r| {
            Ok((
                r.get::<_, i64>(0)?,
                r.get::<_, i64>(1)?,
                r.get::<_, String>(3)?,
            ))
        })
        .unwrap();
    println!("  EXPLAIN QUERY PLAN:");
    for row in rows {
        let (_, parent, detail) = row.unwrap();
        println!("    {}{detail}", if parent == 0 { "" } else { "  " });
    }
}

fn time_month(db: &PathBuf, config: &teamshare_config::Config, name: &str, since: i64, until: i64) {
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
    let t = Instant::now();
    let store = Store::open(db).unwrap();
    let n = store.runs_overlapping(CLUSTER, since, until).unwrap().len();
    let query_ms = t.elapsed().as_secs_f64() * 1000.0;
    times.sort_by(|a, b| a.partial_cmp(b).unwrap());
    println!(
        "  {name:<22} runs overlapping {n:>8} (GPU runs {rows_seen:>8})  usage_report: min {:>7.0} ms  median {:>7.0} ms  max {:>7.0} ms   (runs_overlapping alone: {query_ms:.0} ms)",
        times[0], times[2], times[4]
    );
}

fn main() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut db = PathBuf::from("/tmp/teamshare-bench-report/year.db");
    let mut runs = 5_000_000usize;
    let mut try_indexes = false;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--db" => db = args.next().expect("--db FILE").into(),
            "--runs" => runs = args.next().and_then(|v| v.parse().ok()).expect("--runs N"),
            "--try-indexes" => try_indexes = true,
            _ => {} // cargo bench's --bench
        }
    }
    let config = teamshare_config::load(&root.join("tests/live/teamshare.toml")).expect("config");
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
    let (n, types): (i64, i64) = store
        .connection()
        .query_row(
            "SELECT (SELECT count(*) FROM job_runs), (SELECT count(*) FROM job_run_gpu_types)",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    let size = std::fs::metadata(&db).map(|m| m.len()).unwrap_or(0);
    println!(
        "{}: {n} job runs, {types} typed-GPU rows, {:.0} MiB",
        db.display(),
        size as f64 / 1048576.0
    );
    drop(store);

    let months = [
        ("2025-12 (last month)", DEC_START, YEAR_END),
        ("2025-06 (mid-year)", JUN_START, JUL_START),
    ];
    println!("as accountd's schema is (indexes of store.rs):");
    explain(&Store::open(&db).unwrap(), DEC_START, YEAR_END);
    for (name, s, u) in months {
        time_month(&db, &config, name, s, u);
    }
    if try_indexes {
        let candidates = [
            (
                "job_runs (cluster, end_time)",
                "CREATE INDEX bench_by_end ON job_runs (cluster, end_time)",
            ),
            (
                "job_runs (cluster, end_time, start_time, account, gpus) [covering]",
                "CREATE INDEX bench_by_end ON job_runs (cluster, end_time, start_time, account, gpus)",
            ),
            (
                "job_runs (cluster, start_time, end_time, account, gpus) [covering]",
                "CREATE INDEX bench_by_end ON job_runs (cluster, start_time, end_time, account, gpus)",
            ),
        ];
        for (name, sql) in candidates {
            let store = Store::open(&db).unwrap();
            let t = Instant::now();
            store.connection().execute_batch(sql).unwrap();
            println!(
                "with index {name} (built in {:.1} s):",
                t.elapsed().as_secs_f64()
            );
            explain(&store, DEC_START, YEAR_END);
            drop(store);
            for (m, s, u) in months {
                time_month(&db, &config, m, s, u);
            }
            let store = Store::open(&db).unwrap();
            store
                .connection()
                .execute_batch("DROP INDEX bench_by_end; PRAGMA wal_checkpoint(TRUNCATE);")
                .unwrap();
        }
    }
}
