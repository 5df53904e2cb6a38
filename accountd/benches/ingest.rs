//! Where `accountd ingest` spends its time and memory, part by part, on synthetic sacct output
//! (contrib/bench/gen-sacct.py; the end-to-end command-line run is contrib/bench/ingest.sh).
//!
//!     cargo bench -p accountd --bench ingest [-- --sacct FILE] [--db FILE]
//!
//! FILE defaults to /tmp/teamshare-bench-ingest/sacct-1000000.txt, generated (1,000,000 records)
//! when missing. Parts:
//! - parsing alone: every line through `sacct::read_line` (what the ingest's parser thread does,
//!   without the copies into `JobRun`);
//! - writing alone: the parsed runs written with `Store::record_runs` into an empty database, then
//!   again (all unchanged) (what the ingest's writing thread does);
//! - the ingest as accountd runs it: `ingest::store_reader` over the file (both threads), into an
//!   empty database, then again.

// Test code: a scenario reads top to bottom, so the workspace's 80-line limit is not for it.
#![allow(clippy::too_many_lines)]

use std::io::BufReader;
use std::path::{Path, PathBuf};
use std::time::Instant;

use accountd::ingest::{self, IngestPlan};
use accountd::period::Period;
use accountd::sacct;
use accountd::store::Store;

const NOW: i64 = 1_800_000_000;

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

fn row(part: &str, secs: f64, records: usize) {
    let (now, peak) = rss();
    println!(
        "{part:<44} {secs:>8.2} s {:>12.0} rec/s   RSS {now:>7.0} MiB  peak {peak:>7.0} MiB",
        records as f64 / secs
    );
}

fn fresh(db: &Path) -> Store {
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", db.display()));
    }
    Store::open(db).expect("open")
}

fn main() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut sacct_file = PathBuf::from("/tmp/teamshare-bench-ingest/sacct-1000000.txt");
    let mut db = PathBuf::from("/tmp/teamshare-bench-ingest/bench-lib.db");
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--sacct" => sacct_file = args.next().expect("--sacct FILE").into(),
            "--db" => db = args.next().expect("--db FILE").into(),
            _ => {} // cargo bench's --bench
        }
    }
    // A file written for another field list (FIELDS grew: issue 13) is written again.
    let current = std::fs::File::open(&sacct_file).is_ok_and(|f| {
        let mut first = String::new();
        std::io::BufRead::read_line(&mut BufReader::new(f), &mut first).is_ok()
            && first.trim_end().split('|').count() == sacct::FIELDS.len()
    });
    if !current {
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
    let text = std::fs::read_to_string(&sacct_file).expect("read the sacct output");
    let records = text.lines().count();
    println!(
        "{}: {records} records, {:.0} MiB",
        sacct_file.display(),
        text.len() as f64 / 1048576.0
    );

    // Parsing alone.
    let t = Instant::now();
    let mut runs = 0usize;
    for line in text.lines() {
        if let Ok(sacct::Record::Run(_)) = sacct::read_line(line, &chrono::Utc) {
            runs += 1;
        }
    }
    row(
        "parse (sacct::read_line)",
        t.elapsed().as_secs_f64(),
        records,
    );

    // Writing alone, from runs parsed beforehand (held in memory: this part's RSS is not the
    // ingest's).
    let parsed = sacct::parse(&text, &chrono::Utc);
    assert_eq!(parsed.runs.len(), runs);
    let mut store = fresh(&db);
    let t = Instant::now();
    store.record_runs(&parsed.runs, NOW, None).expect("store");
    row(
        "write (Store::record_runs), empty database",
        t.elapsed().as_secs_f64(),
        records,
    );
    let t = Instant::now();
    let again = store
        .record_runs(&parsed.runs, NOW + 60, None)
        .expect("store");
    assert_eq!(again.unchanged, runs);
    row(
        "write again (all unchanged)",
        t.elapsed().as_secs_f64(),
        records,
    );
    drop((store, parsed, text));

    // The ingest as accountd runs it, from the file.
    let plan = IngestPlan {
        cluster: "bench".into(),
        window: Period {
            since: 0,
            until: NOW,
        },
        advance_watermark_to: Some(NOW),
    };
    let mut store = fresh(&db);
    for (label, now) in [
        ("ingest::store_reader, empty database", NOW),
        ("ingest::store_reader again", NOW + 60),
    ] {
        let file = std::fs::File::open(&sacct_file).unwrap();
        let t = Instant::now();
        let summary = ingest::store_reader(
            &mut store,
            &plan,
            &mut BufReader::with_capacity(1 << 16, file),
            &chrono::Utc,
            now,
            &mut |_| {},
        )
        .expect("ingest");
        row(label, t.elapsed().as_secs_f64(), records);
        println!("    {summary}");
    }
}
