//! Idle-first's saving end to end from a database with samples (history, activity, study,
//! renderers), and "no samples" where there are none.

use std::path::PathBuf;
use std::sync::Arc;

use super::*;
use crate::replay::render::{render_csv, render_html, render_json, render_table};
use crate::replay::study::{Candidate, Findings, Params, Quiet, Study};
use crate::replay::{activity, calibrate::Tolerance, history, Secs};
use crate::store::test_support::{capacity, run, sample};
use crate::store::Store;

const T: Secs = 1_714_521_600; // 2024-05-01T00:00:00Z, a whole hour
const H: Secs = 3600;

/// One node of 4 GPUs. ops has no quota (everything it runs is borrowed), vision 4; a
/// reclaim takes its victims at once (no grace, no minimum run time); the idle window is
/// 15 minutes, the idle threshold 5 % (the default).
const CONFIG: &str = r#"
[cluster]
name = "c"
partitions = ["gpu"]
idle_sharing = "fifo"

[[team]]
name = "ops"
quota = 0

[[team]]
name = "vision"
quota = 4

[governance]
reclaim_mode = "requeue"
reclaim_grace = "0s"
min_runtime_before_reclaim = "0s"
idle_window = "15m"
"#;

/// A sample of job `job` started at `start` on `gpu` at `ts`, standing for a minute.
fn minute(
    gpu: &str,
    ts: Secs,
    job: u32,
    start: Secs,
    util: u32,
) -> teamshare_accounting::gpu_sample::Sample {
    let mut s = sample(gpu, ts, Some((job, start)), util);
    s.interval_ms = 60_000;
    s
}

/// The history as accountd recorded it: ops' job 1 on 2 GPUs from T for 4 h, idle all along
/// (0 %); ops' job 2 on 2 GPUs from T + 30 min for 2 h, busy (90 %); vision's job 3 on 2 GPUs
/// submitted at T + 1 h 30 for 1 h. Samples every minute on each GPU of jobs 1 and 2 (job 3
/// has none: it is never idle). Capacity 4 GPUs.
fn database(with_samples: bool) -> Store {
    let mut store = Store::open_in_memory().unwrap();
    let runs = [
        run(1, "ops", T, Some(T + 4 * H), 2),
        run(2, "ops", T + H / 2, Some(T + H / 2 + 2 * H), 2),
        run(3, "vision", T + 3 * H / 2, Some(T + 5 * H / 2), 2),
    ];
    store.record_runs(&runs, T + 10 * H, None).unwrap();
    store
        .record_capacity("c", &capacity(T - 100, 4, &[]))
        .unwrap();
    if with_samples {
        let mut samples = Vec::new();
        for (job, start, hours, util) in [(1, T, 4, 0), (2, T + H / 2, 2, 90)] {
            for ts in (start..start + hours * H).step_by(60) {
                for gpu in ["a", "b"] {
                    samples.push(minute(&format!("GPU-{job}{gpu}"), ts, job, start, util));
                }
            }
        }
        store
            .record_samples("c", &samples, 5.0, T + 10 * H)
            .unwrap();
    }
    store
}

/// `accountd replay` of that history with the configuration as its one candidate.
fn replay(with_samples: bool, threads: usize) -> crate::replay::render::Replay {
    let store = database(with_samples);
    let config = teamshare_config::parse(CONFIG, "t.toml").expect("test config");
    let mut h = history::load(&store, "c", T, T + 24 * H, 4, 8 * H).unwrap();
    let threshold = config.accountd.idle_threshold_percent;
    h.trace.activity = activity::load(&store, "c", &h.trace, threshold)
        .unwrap()
        .map(Arc::new);
    assert_eq!(h.trace.activity.is_some(), with_samples);
    let study = Study {
        trace: h.trace,
        read: Vec::new(),
        current: None,
        config: config.clone(),
        candidates: vec![Candidate {
            name: "t.toml".into(),
            config: Some(config),
            path: Some(PathBuf::from("t.toml")),
        }],
        params: Params {
            requeue_delay: None,
            checkpoints: Vec::new(),
            tolerance: Tolerance::default(),
            skip_calibration: true,
            capacity: None,
            curve: None,
            threads,
        },
    };
    match study.run(&Quiet) {
        Findings::Complete(r) => r,
        other => panic!("{other:?}"),
    }
}

#[test]
fn idle_first_saves_exactly_the_busy_jobs_lost_work() {
    // Today's order: at T + 1 h 30 vision's job fits its unused quota and the node is full
    // (ops' jobs 1 and 2, 2 GPUs each, both borrowed). Rule 3 takes the most recently started
    // borrower: job 2, which ran from T + 30 min, 1 h x 2 GPUs = 2 GPU-h of work, every
    // sample busy: 2.0 GPU-h lost. (It runs again when vision's job ends; nothing else is
    // preempted.)
    // Idle first: job 1 started 1 h 30 before, its last 15 minutes are sampled (15 minutes x
    // 2 GPUs, all of the window) and every sample is at 0 %: idle for the whole window, so it
    // is the first victim. It ran 1 h 30 x 2 GPUs = 3 GPU-h, all of it sampled idle: 0.0 lost.
    // Saved: 2.0 - 0.0 = 2.0 GPU-h, the busy job's lost work; vision lost nothing either way.
    let r = replay(true, 2);
    let Some(IdleFirst::Computed(s)) = &r.idle_first else {
        panic!("{:?}", r.idle_first)
    };
    assert_eq!(s.candidate, "t.toml");
    let rows: Vec<(&str, f64, f64, f64)> = s
        .rows
        .iter()
        .map(|r| {
            (
                r.team.as_str(),
                r.today_lost_gpu_hours,
                r.idle_first_lost_gpu_hours,
                r.saved_gpu_hours,
            )
        })
        .collect();
    assert_eq!(
        rows,
        [
            ("ops", 2.0, 0.0, 2.0),
            ("vision", 0.0, 0.0, 0.0),
            (CLUSTER, 2.0, 0.0, 2.0)
        ]
    );
    // The candidate's own column is today's order: one preemption, job 2's 2 GPU-h.
    let ops = r.columns[0].figures.row("ops").unwrap();
    assert_eq!((ops.preemptions, ops.lost_gpu_hours), (1, 2.0));

    let table = render_table(&r);
    assert!(table.contains("idle-first reclaim under t.toml: 2.0 GPU-hours of lost work saved (2.0 lost with today's order, 0.0 with idle_first_reclaim;"), "{table}");
    assert!(table.contains("TEAM       LOST TODAY GPU-H  LOST IDLE-FIRST GPU-H  SAVED GPU-H\nops                     2.0                    0.0          2.0\n"), "{table}");
    assert!(
        table.contains("note: GPU samples: 2 of 3 started jobs have samples"),
        "{table}"
    );
    let csv = render_csv(&r);
    assert!(
        csv.lines()
            .any(|l| l.starts_with("t.toml,ops,") && l.ends_with(",2.0000,0.0000,2.0000")),
        "{csv}"
    );
    let json: serde_json::Value = serde_json::from_str(&render_json(&r)).unwrap();
    assert_eq!(json["idle_first"]["status"], "computed");
    assert_eq!(json["idle_first"]["rows"][0]["saved_gpu_hours"], 2.0);
    assert!(render_html(&r).contains("<h2>Idle-first reclaim</h2>"));

    // The same bytes on any number of threads.
    assert_eq!(render_table(&replay(true, 1)), table);
    assert_eq!(render_json(&replay(true, 3)), render_json(&r));
}

#[test]
fn a_history_without_samples_says_no_samples_not_a_number() {
    let r = replay(false, 2);
    assert!(
        matches!(&r.idle_first, Some(IdleFirst::NoSamples { candidate, .. }) if candidate == "t.toml"),
        "{:?}",
        r.idle_first
    );
    let table = render_table(&r);
    let line = table
        .lines()
        .find(|l| l.starts_with("idle-first reclaim"))
        .expect("the idle-first line");
    assert!(
        line.contains("no samples") && line.contains("cannot be computed"),
        "{line}"
    );
    assert!(!line.contains("GPU-hours of lost work saved"), "{line}");
    assert!(!table.contains("SAVED GPU-H"), "{table}");
    let csv = render_csv(&r);
    assert!(
        csv.lines().any(|l| l.starts_with("t.toml,(cluster),")
            && l.ends_with(",no samples,no samples,no samples")),
        "{csv}"
    );
    let json: serde_json::Value = serde_json::from_str(&render_json(&r)).unwrap();
    assert_eq!(json["idle_first"]["status"], "no_samples");
    assert!(json["idle_first"].get("rows").is_none());
}

#[test]
fn lost_work_leaves_out_what_the_samples_show_idle() {
    use crate::replay::{JobOutcome, Observed, Outcome, TraceJob};
    let job = |id: u64, team: &str| TraceJob {
        id,
        team: team.into(),
        class: None,
        submit: 0,
        eligible: 0,
        gpus: 2,
        gpu_type: None,
        nodes: 1,
        exclusive: false,
        time_limit: 2 * H,
        work: H,
        cancelled_pending_at: None,
        observed: Observed::default(),
    };
    let trace = Trace {
        jobs: vec![job(1, "a"), job(2, "a"), job(3, "b")],
        ..Trace::default()
    };
    // Job 1 lost 1 h x 2 GPUs, 1.5 GPU-h of it idle; job 2 1 GPU-h, none idle; job 3 lost
    // nothing. More idle than lost (never: clamped by the simulation) counts 0.
    let outcome = Outcome {
        jobs: vec![
            JobOutcome {
                job: 0,
                lost_gpu_secs: 2 * H,
                lost_idle_gpu_ms: 3 * H * 1000 / 2,
                ..JobOutcome::default()
            },
            JobOutcome {
                job: 1,
                lost_gpu_secs: H,
                ..JobOutcome::default()
            },
            JobOutcome {
                job: 2,
                lost_gpu_secs: 0,
                lost_idle_gpu_ms: 5,
                ..JobOutcome::default()
            },
        ],
        ..Outcome::default()
    };
    let lost = lost_work(&trace, &outcome);
    // a: (2 - 1.5) + 1 = 1.5 GPU-h; b: none.
    assert_eq!(lost, LostWork::from([("a".to_string(), 3 * H * 1000 / 2)]));
    let s = saving("x", ["a", "b"].into_iter(), &lost, &LostWork::new());
    assert_eq!(s.rows[1].team, "b");
    assert_eq!(s.rows[2].saved_gpu_hours, 1.5);
}
