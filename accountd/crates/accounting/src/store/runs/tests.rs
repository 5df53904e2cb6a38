//! The tests of `runs`.

use super::*;
use crate::store::tests::{count, run};

#[test]
fn the_same_batch_twice_changes_nothing() {
    let mut store = Store::open_in_memory().unwrap();
    let mut typed = run(2, "b", 100, Some(200), 2);
    typed.gpus_by_type.insert("h100".into(), 2);
    let batch = vec![run(1, "a", 100, Some(200), 1), typed];
    let first = store.record_runs(&batch, 1000, None).unwrap();
    assert_eq!(first.inserted, 2);
    let dump = |s: &Store| -> Vec<(i64, String, Option<i64>, i64)> {
        let mut st = s
            .connection()
            .prepare("SELECT id, state, end_time, first_seen FROM job_runs ORDER BY id")
            .unwrap();
        let v = st
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        v
    };
    let before = dump(&store);
    let second = store.record_runs(&batch, 2000, None).unwrap();
    assert_eq!(
        second,
        BatchOutcome {
            inserted: 0,
            updated: 0,
            unchanged: 2
        }
    );
    assert_eq!(dump(&store), before);
    assert_eq!(count(&store, "job_runs"), 2);
    let typed: Vec<Option<String>> = store
        .connection()
        .prepare("SELECT gpu_types FROM job_runs ORDER BY id")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(typed, [None, Some("h100=2".to_string())]);
}

#[test]
fn a_running_job_is_updated_when_it_completes() {
    let mut store = Store::open_in_memory().unwrap();
    store
        .record_runs(&[run(1, "a", 100, None, 4)], 1000, None)
        .unwrap();
    let done = run(1, "a", 100, Some(500), 4);
    let o = store.record_runs(&[done], 2000, None).unwrap();
    assert_eq!(o.updated, 1);
    let (state, end, first, last): (String, Option<i64>, i64, i64) = store
        .connection()
        .query_row(
            "SELECT state, end_time, first_seen, updated_at FROM job_runs",
            [],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
        )
        .unwrap();
    assert_eq!(
        (state.as_str(), end, first, last),
        ("COMPLETED", Some(500), 1000, 2000)
    );
    assert_eq!(count(&store, "job_runs"), 1);
}

#[test]
fn requeued_runs_are_distinct_rows() {
    let mut store = Store::open_in_memory().unwrap();
    let o = store
        .record_runs(
            &[run(7, "a", 100, Some(200), 1), run(7, "a", 321, None, 1)],
            1000,
            None,
        )
        .unwrap();
    assert_eq!(o.inserted, 2);
    assert_eq!(store.runs_overlapping("c", 0, 10_000).unwrap().len(), 2);
}

#[test]
fn the_watermark_only_moves_forward() {
    let mut store = Store::open_in_memory().unwrap();
    assert_eq!(store.watermark("c").unwrap(), None);
    let adv = |to| WatermarkAdvance {
        cluster: "c".into(),
        to,
    };
    store.record_runs(&[], 1, Some(&adv(500))).unwrap();
    assert_eq!(store.watermark("c").unwrap(), Some(500));
    store.record_runs(&[], 2, Some(&adv(400))).unwrap();
    assert_eq!(store.watermark("c").unwrap(), Some(500));
    store.record_runs(&[], 3, Some(&adv(900))).unwrap();
    assert_eq!(store.watermark("c").unwrap(), Some(900));
    assert_eq!(store.watermark("other").unwrap(), None);
}

#[test]
fn a_file_is_read_by_two_connections_and_each_run_once() {
    // Three days; the stretch read is split in the middle of [since - longest, until).
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.db");
    let mut store = Store::open(&path).unwrap();
    let day = 86_400;
    let mut runs = Vec::new();
    for i in 0..300u32 {
        let start = i64::from(i) * 1000;
        // Every fifth still running, the others 2 h long.
        let end = (i % 5 != 0).then_some(start + 7200);
        runs.push(run(i + 1, "a", start, end, 1));
    }
    runs.push(run(1000, "b", -10 * day, None, 2)); // running since long before
    store.record_runs(&runs, 1, None).unwrap();
    let (since, until) = (day / 2, 3 * day);
    let mut got: Vec<i64> = store
        .runs_overlapping("c", since, until)
        .unwrap()
        .iter()
        .map(|r| r.start)
        .collect();
    got.sort_unstable();
    let mut want: Vec<i64> = runs
        .iter()
        .filter(|r| r.start < until && r.end.is_none_or(|e| e > since))
        .map(|r| r.start)
        .collect();
    want.sort_unstable();
    assert_eq!(got, want);
    assert!(want.len() > 200);
    // The same as one connection reads it.
    let mut memory = Store::open_in_memory().unwrap();
    memory.record_runs(&runs, 1, None).unwrap();
    assert_eq!(
        memory.runs_overlapping("c", since, until).unwrap().len(),
        want.len()
    );
}

#[test]
fn overlapping_runs_are_selected_with_their_types() {
    let mut store = Store::open_in_memory().unwrap();
    let mut typed = run(3, "b", 150, None, 3);
    typed.gpus_by_type.insert("a100".into(), 1);
    typed.gpus_by_type.insert("h100".into(), 2);
    typed.partition = "debug".into();
    let mut other_cluster = run(4, "a", 150, None, 1);
    other_cluster.cluster = "elsewhere".into();
    store
        .record_runs(
            &[
                run(1, "a", 0, Some(100), 1),   // ends at the period's start: out
                run(2, "a", 50, Some(150), 1),  // in
                typed,                          // running: in
                run(5, "a", 300, Some(400), 1), // starts at the period's end: out
                other_cluster,
            ],
            1,
            None,
        )
        .unwrap();
    let runs = store.runs_overlapping("c", 100, 300).unwrap();
    let ids: Vec<i64> = runs.iter().map(|r| r.start).collect();
    assert_eq!(ids, [50, 150]);
    assert_eq!(runs[1].gpus_by_type.len(), 2);
    assert_eq!(runs[1].gpus_by_type.get("h100"), Some(2));
    assert_eq!(runs[1].end, None);
    assert_eq!([&*runs[0].partition, &*runs[1].partition], ["gpu", "debug"]);
}

#[test]
fn preemptions_and_admission_waits_are_read_per_run() {
    let mut store = Store::open_in_memory().unwrap();
    let mut preempted = run(1, "a", 100, Some(200), 2);
    preempted.state = "PREEMPTED".into();
    preempted.submit = Some(40);
    let mut late = run(2, "a", 300, Some(400), 1);
    late.state = "PREEMPTED".into();
    let mut no_gpu = run(3, "b", 150, Some(160), 0);
    no_gpu.submit = Some(0);
    store
        .record_runs(
            &[preempted, late, no_gpu, run(4, "b", 120, None, 1)],
            1,
            None,
        )
        .unwrap();
    let p = store.preempted_runs("c", 0, 300).unwrap();
    assert_eq!(p, BTreeMap::from([("a".to_string(), 1)]));
    let starts = store.runs_started("c", 100, 300).unwrap();
    let waits: Vec<(&str, i64)> = starts
        .iter()
        .map(|s| (s.account.as_str(), s.start - s.submit))
        .collect();
    assert_eq!(waits, [("a", 60), ("b", 0)]);
    assert_eq!(store.account_of_job("c", 4).unwrap().as_deref(), Some("b"));
    assert_eq!(store.account_of_job("c", 99).unwrap(), None);
}

fn pending(job: u32, submit: i64, end: Option<i64>) -> UnstartedJob {
    UnstartedJob {
        cluster: "c".into(),
        job_id_raw: job,
        job_id: job.to_string(),
        account: "a".into(),
        user: "u".into(),
        partition: "gpu".into(),
        qos: "normal".into(),
        state: if end.is_some() {
            "CANCELLED by 1000"
        } else {
            "PENDING"
        }
        .into(),
        submit: Some(submit),
        eligible: Some(submit),
        end,
        gpus: 2,
        gpus_by_type: BTreeMap::from([("h100".to_string(), 2)]),
        time_limit: Some(3600),
        nnodes: Some(1),
        req_tres: "cpu=1,gres/gpu=2,gres/gpu:h100=2,node=1".into(),
    }
}

/// job_id_raw, state, end_time, gpu_types, first_seen, updated_at
type UnstartedRow = (i64, String, Option<i64>, Option<String>, i64, i64);

fn unstarted_rows(store: &Store) -> Vec<UnstartedRow> {
    store
        .connection()
        .prepare(
            "SELECT job_id_raw, state, end_time, gpu_types, first_seen, updated_at
             FROM unstarted_jobs ORDER BY job_id_raw",
        )
        .unwrap()
        .query_map([], |r| {
            Ok((
                r.get(0)?,
                r.get(1)?,
                r.get(2)?,
                r.get(3)?,
                r.get(4)?,
                r.get(5)?,
            ))
        })
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap()
}

#[test]
fn jobs_that_never_started_are_stored_once_and_updated_when_they_end() {
    let mut store = Store::open_in_memory().unwrap();
    let batch = [pending(10, 100, None), pending(11, 100, Some(160))];
    let first = store.record_unstarted(&batch, 1000).unwrap();
    assert_eq!((first.inserted, first.updated, first.unchanged), (2, 0, 0));
    let before = unstarted_rows(&store);
    assert_eq!(
        before[0],
        (
            10,
            "PENDING".into(),
            None,
            Some("h100=2".into()),
            1000,
            1000
        )
    );
    // The same window again: nothing is written, not even a time.
    let second = store.record_unstarted(&batch, 2000).unwrap();
    assert_eq!(
        (second.inserted, second.updated, second.unchanged),
        (0, 0, 2)
    );
    assert_eq!(unstarted_rows(&store), before);
    // Job 10 is cancelled while it waits: updated, first seen kept.
    let third = store
        .record_unstarted(&[pending(10, 100, Some(2500))], 3000)
        .unwrap();
    assert_eq!(third.updated, 1);
    let rows = unstarted_rows(&store);
    assert_eq!(rows[0].1, "CANCELLED by 1000");
    assert_eq!((rows[0].2, rows[0].4, rows[0].5), (Some(2500), 1000, 3000));
    assert_eq!(count(&store, "unstarted_jobs"), 2);
}

#[test]
fn a_pending_job_that_starts_is_no_longer_one_that_never_started() {
    let mut store = Store::open_in_memory().unwrap();
    store
        .record_unstarted(&[pending(10, 100, None), pending(11, 100, None)], 1000)
        .unwrap();
    // A later ingest: job 10 runs now (its run is inserted), job 11 still waits.
    let mut writer = store.run_writer(2000).unwrap();
    writer.write(&[run(10, "a", 500, None, 2)]).unwrap();
    writer.write_unstarted(&[pending(11, 100, None)]).unwrap();
    let o = writer.finish(None).unwrap();
    assert_eq!((o.runs.inserted, o.unstarted.unchanged), (1, 1));
    let ids: Vec<i64> = unstarted_rows(&store).iter().map(|r| r.0).collect();
    assert_eq!(ids, [11]);
    // Read again, an older window that still had job 10 pending does not bring it back.
    let o = store
        .record_unstarted(&[pending(10, 100, None)], 3000)
        .unwrap();
    assert_eq!((o.inserted, o.unchanged), (0, 1));
    assert_eq!(count(&store, "unstarted_jobs"), 1);
}

#[test]
fn a_requeued_job_waiting_to_run_again_is_not_one_that_never_started() {
    let mut store = Store::open_in_memory().unwrap();
    let mut preempted = run(20, "a", 100, Some(200), 2);
    preempted.state = "PREEMPTED".into();
    // Its pending remainder, in the same batch as its run and before it, then after it.
    let mut writer = store.run_writer(1000).unwrap();
    writer.write_unstarted(&[pending(20, 321, None)]).unwrap();
    writer.write(std::slice::from_ref(&preempted)).unwrap();
    writer.finish(None).unwrap();
    assert_eq!(count(&store, "unstarted_jobs"), 0);
    let o = store
        .record_unstarted(&[pending(20, 321, None)], 2000)
        .unwrap();
    assert_eq!((o.inserted, o.unchanged), (0, 1));
    assert_eq!(count(&store, "unstarted_jobs"), 0);
    assert_eq!(count(&store, "job_runs"), 1);
}

fn runaway_flags(store: &Store) -> Vec<(i64, Option<i64>, bool)> {
    store
        .connection()
        .prepare("SELECT job_id_raw, end_time, runaway FROM job_runs ORDER BY job_id_raw")
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap()
}

#[test]
fn runs_slurm_lost_are_clipped_at_the_last_check_that_saw_them() {
    let mut store = Store::open_in_memory().unwrap();
    let adv = WatermarkAdvance {
        cluster: "c".into(),
        to: 1000,
    };
    let sacct = [
        run(1, "a", 100, None, 2),      // running, slurmctld knows it
        run(2, "a", 100, None, 4),      // running in sacct, lost by slurmctld
        run(3, "b", 100, Some(200), 1), // finished
        run(4, "b", 1500, None, 1),     // started after the first list was read
    ];
    store.record_runs(&sacct[..3], 1000, Some(&adv)).unwrap();
    // The first list: nothing known before it, so a lost job ends at the list's time.
    let first = store
        .clip_runaways("c", &BTreeSet::from([1, 7]), 1000)
        .unwrap();
    assert_eq!(
        first,
        [RunawayRun {
            job_id_raw: 2,
            job_id: "2".into(),
            account: "a".into(),
            start: 100,
            end: 1000
        }]
    );
    assert_eq!(
        runaway_flags(&store),
        [
            (1, None, false),
            (2, Some(1000), true),
            (3, Some(200), false)
        ]
    );
    // Clipped runs count as finished runs for the reports' range.
    assert_eq!(store.longest_run("c").unwrap(), 900);
    // sacct still says job 2 runs: the clip stays, and nothing is rewritten.
    let o = store.record_runs(&sacct[1..2], 1100, None).unwrap();
    assert_eq!(o.unchanged, 1);
    assert_eq!(runaway_flags(&store)[1], (2, Some(1000), true));
    // Job 1 is lost after the list at 1000 that had it: it ends there. Job 4 started after
    // that list and is lost too: it ends at its start (no time known running).
    store.record_runs(&sacct[3..], 1600, None).unwrap();
    let second = store.clip_runaways("c", &BTreeSet::new(), 2000).unwrap();
    let ends: Vec<(u64, i64)> = second.iter().map(|r| (r.job_id_raw, r.end)).collect();
    assert_eq!(ends, [(1, 1000), (4, 1500)]);
    // The administrator's `sacctmgr show runaway` fix gives sacct an end: sacct wins.
    let fixed = run(2, "a", 100, Some(150), 4);
    let o = store.record_runs(&[fixed], 3000, None).unwrap();
    assert_eq!(o.updated, 1);
    assert_eq!(runaway_flags(&store)[1], (2, Some(150), false));
    let listed: Vec<u64> = store
        .runaway_runs("c", 0, 5000)
        .unwrap()
        .iter()
        .map(|r| r.job_id_raw)
        .collect();
    assert_eq!(listed, [1, 4]);
    assert!(store.runaway_runs("c", 1600, 5000).unwrap().is_empty());
    assert!(store.runaway_runs("other", 0, 5000).unwrap().is_empty());
    // A report ends job 1 at its clip.
    let runs = store.runs_overlapping("c", 0, 5000).unwrap();
    let one = runs.iter().find(|r| r.start == 100 && r.gpus == 2).unwrap();
    assert_eq!(one.end, Some(1000));
}
