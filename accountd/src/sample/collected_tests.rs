//! The store's and the utilisation report's handling of GPU samples, the samples written through
//! a node's spool and collected (`sample::spool`, `sample::collect`): these were the unit tests
//! of `store::samples` and `report::utilisation`, which are teamshare-accounting's now, a crate
//! that cannot see the sampler (issue 28). What they assert is unchanged.

/// `store::samples`'s tests.
mod store_samples {
    use crate::sample::collect::collect;
    use crate::sample::spool::NodeSpool;
    use crate::sample::tests::sample;
    use crate::store::Store;

    fn count(store: &Store, sql: &str) -> i64 {
        store.connection().query_row(sql, [], |r| r.get(0)).unwrap()
    }

    #[test]
    fn a_new_threshold_rebuilds_the_rollup() {
        let root = tempfile::tempdir().unwrap();
        let store = Store::open_in_memory().unwrap();
        let mut n1 = NodeSpool::open(root.path(), "n1").unwrap();
        n1.write_batch(&[sample("GPU-a", 10_000, 7, None)]).unwrap();
        collect(&store, root.path(), "c", 5.0, 1).unwrap();
        assert_eq!(
            count(&store, "SELECT sum(idle_ms) FROM gpu_sample_hours"),
            0
        );
        assert!(store.ensure_rollup_threshold(10.0).unwrap());
        assert_eq!(
            count(&store, "SELECT sum(idle_ms) FROM gpu_sample_hours"),
            10_000
        );
        assert!(!store.ensure_rollup_threshold(10.0).unwrap());
    }
}

/// `report::utilisation`'s tests.
mod report_utilisation {

    use crate::period::Period;
    use crate::report::utilisation::{
        render_jobs, render_teams, utilisation_report, UtilisationParams,
    };
    use crate::report::Format;
    use crate::sample::collect::collect;
    use crate::sample::spool::NodeSpool;
    use crate::sample::tests::sample;
    use crate::store::test_support::run;
    use crate::store::Store;

    /// Two jobs and a free GPU over 2 hours + 30 min, sampled every 10 s (so the rollup and the
    /// raw samples are both read): job 1 holds GPU-a at 80 %, job 2 holds GPU-b idle (2 %) for
    /// the first hour then at 50 %; GPU-c is held by no job and idle.
    fn fixture() -> (tempfile::TempDir, Store, UtilisationParams) {
        let root = tempfile::tempdir().unwrap();
        let mut store = Store::open_in_memory().unwrap();
        let mut a = run(1, "agents", 1_000, None, 1);
        a.cluster = "c".into();
        let mut b = run(2, "training", 1_000, Some(100_000), 1);
        b.cluster = "c".into();
        store.record_runs(&[a, b], 1, None).unwrap();
        let mut spool = NodeSpool::open(root.path(), "n1").unwrap();
        let t0 = 3_600_000 * 10; // 10:00 UTC on day 0
        for i in 0..(9_000 / 10) {
            let ts = t0 + i * 10_000;
            let b_util = if ts < t0 + 3_600_000 { 2 } else { 50 };
            spool
                .write_batch(&[
                    sample("GPU-a", ts, 80, Some(1)),
                    sample("GPU-b", ts, b_util, Some(2)),
                    sample("GPU-c", ts, 0, None),
                ])
                .unwrap();
        }
        collect(&store, root.path(), "c", 5.0, 1).unwrap();
        let params = UtilisationParams {
            cluster: "c".into(),
            period: Period {
                since: 36_000 - 600, // starts mid-hour: partial hours at both ends
                until: 36_000 + 9_000,
            },
            idle_threshold: 5.0,
            now: 50_000,
        };
        (root, store, params)
    }

    #[test]
    fn idle_hours_and_mean_utilisation_per_job_and_team() {
        let (_root, store, p) = fixture();
        let r = utilisation_report(&store, &p).unwrap();
        assert!(!r.from_samples);
        assert_eq!(r.jobs.len(), 2);
        let worst = &r.jobs[0];
        assert_eq!(
            worst.job_id_raw, 2,
            "the job with idle GPU-hours comes first"
        );
        assert!((worst.time.idle_gpu_hours() - 1.0).abs() < 1e-9);
        assert!((worst.time.sampled_gpu_hours() - 2.5).abs() < 1e-9);
        // 1 h at 2 % and 1.5 h at 50 %, weighted by time.
        let mean = (2.0 * 1.0 + 50.0 * 1.5) / 2.5;
        assert!((worst.time.mean_util().unwrap() - mean).abs() < 1e-9);
        assert_eq!(worst.team.as_deref(), Some("training"));
        // Job 2 ran [1000, 100000): within the period [35400, 45000) that is 9600 s of 1 GPU.
        assert!((worst.gpu_hours.unwrap() - 9_600.0 / 3600.0).abs() < 1e-9);
        let best = &r.jobs[1];
        assert_eq!(best.time.idle_ms, 0);
        assert_eq!(best.time.mean_util(), Some(80.0));
        assert!((r.unallocated.idle_gpu_hours() - 2.5).abs() < 1e-9);
        let teams: Vec<&str> = r.teams.iter().map(|t| t.team.as_str()).collect();
        assert_eq!(teams, ["agents", "training"]);
    }

    #[test]
    fn the_rollup_and_the_samples_agree() {
        let (_root, store, p) = fixture();
        let with_rollup = utilisation_report(&store, &p).unwrap();
        // Force the samples-only path by a rollup of another threshold.
        store
            .connection()
            .execute("UPDATE gpu_sample_hours SET idle_threshold = 99", [])
            .unwrap();
        let from_samples = utilisation_report(&store, &p).unwrap();
        assert!(from_samples.from_samples);
        assert_eq!(with_rollup.jobs, from_samples.jobs);
        assert_eq!(with_rollup.unallocated, from_samples.unallocated);
    }

    #[test]
    fn a_shorter_period_counts_only_its_ticks() {
        let (_root, store, mut p) = fixture();
        p.period = Period {
            since: 36_000,
            until: 36_000 + 60,
        };
        let r = utilisation_report(&store, &p).unwrap();
        assert!(r.jobs.iter().all(|j| j.time.samples == 6), "{:?}", r.jobs);
    }

    #[test]
    fn renders_name_the_worst_job_first() {
        let (_root, store, p) = fixture();
        let r = utilisation_report(&store, &p).unwrap();
        let table = render_jobs(&r, Format::Table, None, &chrono::Utc);
        let first_row = table.lines().nth(2).unwrap();
        assert!(first_row.starts_with("2 "), "{table}");
        assert!(table.contains("GPUs held by no job"), "{table}");
        let csv = render_jobs(&r, Format::Csv, Some(1), &chrono::Utc);
        assert_eq!(csv.lines().count(), 2, "{csv}");
        assert!(
            csv.lines().nth(1).unwrap().starts_with("2,2,u,training,1,"),
            "{csv}"
        );
        let json: serde_json::Value =
            serde_json::from_str(&render_jobs(&r, Format::Json, None, &chrono::Utc)).unwrap();
        assert_eq!(json[0]["idle_gpu_hours"], 1.0);
        assert_eq!(json[1]["mean_util_percent"], 80.0);
        let teams = render_teams(&r, Format::Csv, &chrono::Utc);
        assert!(teams.contains("\ntraining,1,"), "{teams}");
    }
}
