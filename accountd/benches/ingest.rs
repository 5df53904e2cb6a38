//! Where `accountd ingest` spends its time and memory, phase by phase, on synthetic sacct output
//! (contrib/bench/gen-sacct.py; the end-to-end command-line run is contrib/bench/ingest.sh).
//!
//!     cargo bench -p accountd --bench ingest [-- --sacct FILE] [--db FILE] [--cache-mib N]
//!                                              [--stream LINES]
//!
//! FILE defaults to /tmp/teamshare-bench-ingest/sacct-1000000.txt, generated (1,000,000 records) when
//! missing. Phases: read the file, parse (`sacct::parse`), store into an empty database
//! (`Store::record_runs`, one transaction), store the same runs again (all unchanged).
//!
//! Two what-ifs that change nothing in accountd, to show where its time and memory go:
//! `--cache-mib N` sets SQLite's page cache (`PRAGMA cache_size`, default 2 MiB) on the store's
//! connection before storing; `--stream LINES` reads the file line by line and parses and stores
//! it in batches of LINES lines (one `record_runs` transaction each) instead of holding the whole
//! output and every parsed run in memory at once.

use std::path::{Path, PathBuf};
use std::time::Instant;

use accountd::sacct;
use accountd::store::{Store, WatermarkAdvance};

/// (VmRSS, VmHWM) of this process in MiB.
fn rss() -> (f64, f64) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse::<f64>().ok())
            .map(|kb| kb / 1024.0)
            .unwrap_or(0.0)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

fn row(phase: &str, secs: f64, records: usize) {
    let (now, peak) = rss();
    println!(
        "{phase:<34} {secs:>8.2} s {:>12.0} rec/s   RSS {now:>7.0} MiB  peak {peak:>7.0} MiB",
        records as f64 / secs
    );
}

fn main() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut sacct_file = PathBuf::from("/tmp/teamshare-bench-ingest/sacct-1000000.txt");
    let mut db = PathBuf::from("/tmp/teamshare-bench-ingest/bench-lib.db");
    let mut cache_mib: Option<i64> = None;
    let mut stream: Option<usize> = None;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--sacct" => sacct_file = args.next().expect("--sacct FILE").into(),
            "--db" => db = args.next().expect("--db FILE").into(),
            "--cache-mib" => {
                cache_mib = Some(
                    args.next()
                        .and_then(|v| v.parse().ok())
                        .expect("--cache-mib N"),
                )
            }
            "--stream" => {
                stream = Some(
                    args.next()
                        .and_then(|v| v.parse().ok())
                        .expect("--stream LINES"),
                )
            }
            _ => {} // cargo bench's --bench
        }
    }
    if !sacct_file.exists() {
        std::fs::create_dir_all(sacct_file.parent().unwrap()).unwrap();
        eprintln!(
            "generating {} (1,000,000 records) ...",
            sacct_file.display()
        );
        let out = std::fs::File::create(&sacct_file).unwrap();
        let st = std::process::Command::new("python3")
            .arg(root.join("contrib/bench/gen-sacct.py"))
            .args(["--records", "1000000", "--end", "1764547200"])
            .stdout(out)
            .status()
            .expect("python3");
        assert!(st.success(), "gen-sacct.py failed");
    }
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", db.display()));
    }

    if let Some(batch_lines) = stream {
        streamed(&sacct_file, &db, batch_lines, cache_mib);
        return;
    }

    let t = Instant::now();
    let text = std::fs::read_to_string(&sacct_file).expect("read the sacct file");
    let lines = text.lines().count();
    println!(
        "{} lines, {:.0} MiB of sacct output",
        lines,
        text.len() as f64 / 1048576.0
    );
    row("read file", t.elapsed().as_secs_f64(), lines);

    let t = Instant::now();
    let batch = sacct::parse(&text, &chrono::Utc);
    row("parse", t.elapsed().as_secs_f64(), lines);
    println!(
        "  {} runs, {} never started, {} malformed",
        batch.runs.len(),
        batch.not_started,
        batch.malformed.len()
    );
    assert!(batch.malformed.is_empty(), "{:?}", &batch.malformed[..1]);

    let mut store = Store::open(&db).expect("open");
    if let Some(mib) = cache_mib {
        set_cache(&store, mib);
    }
    let wm = WatermarkAdvance {
        cluster: "teamshare-live".into(),
        to: 2_000_000_000,
    };
    let t = Instant::now();
    let o = store
        .record_runs(&batch.runs, 1_800_000_000, Some(&wm))
        .expect("store");
    row(
        "store into an empty database",
        t.elapsed().as_secs_f64(),
        lines,
    );
    println!("  {o:?}");

    let t = Instant::now();
    let o = store
        .record_runs(&batch.runs, 1_800_000_060, Some(&wm))
        .expect("store");
    row("store again (all known)", t.elapsed().as_secs_f64(), lines);
    println!("  {o:?}");

    let size: u64 = ["", "-wal"]
        .iter()
        .filter_map(|s| std::fs::metadata(format!("{}{s}", db.display())).ok())
        .map(|m| m.len())
        .sum();
    println!("database + WAL: {:.0} MiB", size as f64 / 1048576.0);
    drop(store);
    drop(batch);
    drop(text);
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", db.display()));
    }
}

fn set_cache(store: &Store, mib: i64) {
    store
        .connection()
        .execute_batch(&format!("PRAGMA cache_size = -{}", mib * 1024))
        .expect("cache_size");
    println!("(what-if) SQLite page cache: {mib} MiB");
}

/// Parse and store in batches of `batch_lines` lines, reading the file as a stream.
fn streamed(file: &Path, db: &Path, batch_lines: usize, cache_mib: Option<i64>) {
    use std::io::BufRead;
    println!("(what-if) streaming in batches of {batch_lines} lines");
    for pass in ["store into an empty database", "store again (all known)"] {
        let mut store = Store::open(db).expect("open");
        if let Some(mib) = cache_mib {
            set_cache(&store, mib);
        }
        let t = Instant::now();
        let reader = std::io::BufReader::with_capacity(1 << 20, std::fs::File::open(file).unwrap());
        let mut chunk = String::new();
        let mut n = 0usize;
        let mut in_chunk = 0usize;
        let mut total = accountd::store::BatchOutcome::default();
        let mut flush = |chunk: &mut String, store: &mut Store| {
            let batch = sacct::parse(chunk, &chrono::Utc);
            let o = store
                .record_runs(&batch.runs, 1_800_000_000, None)
                .expect("store");
            total.inserted += o.inserted;
            total.unchanged += o.unchanged;
            total.updated += o.updated;
            chunk.clear();
        };
        for line in reader.lines() {
            let line = line.unwrap();
            chunk.push_str(&line);
            chunk.push('\n');
            n += 1;
            in_chunk += 1;
            if in_chunk == batch_lines {
                flush(&mut chunk, &mut store);
                in_chunk = 0;
            }
        }
        flush(&mut chunk, &mut store);
        row(
            &format!("{pass} (parse+store)"),
            t.elapsed().as_secs_f64(),
            n,
        );
        println!("  {total:?}");
    }
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", db.display()));
    }
}
