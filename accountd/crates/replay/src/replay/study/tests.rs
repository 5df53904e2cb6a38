//! The study: candidates, baseline, calibration and curve.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use super::super::{Cluster, NodeSpec, Observed, TraceJob};
use super::*;

/// Two teams of quota 4, on two nodes of 4 GPUs.
fn config() -> Config {
    let text = r#"
[cluster]
name = "t"
partitions = ["gpu"]
currency = "USD"

[gpu_types.default]
rate_per_hour = 1.0

[[team]]
name = "a"
quota = 4

[[team]]
name = "b"
quota = 4
"#;
    teamshare_config::parse(text, "t.toml").expect("test config")
}

/// A job of `team` submitted at `submit` on `gpus` GPUs for `work` seconds, observed to start
/// `waited` seconds after its submission.
fn job(id: u64, team: &str, submit: Secs, gpus: u32, work: Secs, waited: Secs) -> TraceJob {
    let start = submit + waited;
    TraceJob {
        id,
        team: team.into(),
        class: None,
        submit,
        eligible: submit,
        gpus,
        gpu_type: None,
        nodes: 1,
        exclusive: false,
        time_limit: work * 2,
        work,
        cancelled_pending_at: None,
        observed: Observed {
            runs: vec![(start, Some(start + work))],
            ..Observed::default()
        },
    }
}

/// Three jobs on an idle cluster, each observed to wait `waited` seconds.
fn trace(waited: Secs) -> Trace {
    Trace {
        jobs: vec![
            job(1, "a", 100, 4, 3600, waited),
            job(2, "b", 200, 2, 7200, waited),
            job(3, "a", 300, 2, 1800, waited),
        ],
        cluster: Cluster {
            nodes: ["n0", "n1"]
                .into_iter()
                .map(|name| NodeSpec {
                    name: name.into(),
                    gpus: 4,
                    gpu_type: None,
                })
                .collect(),
            drains: Vec::new(),
        },
        since: 0,
        until: 86_400,
        source: "test".into(),
        activity: None,
    }
}

/// The candidates of `kinds`, as `accountd replay` makes them of `t.toml`.
fn candidates(kinds: Vec<CandidateKind>) -> Vec<Candidate> {
    let config = config();
    baseline_first(kinds)
        .into_iter()
        .map(|k| match k {
            CandidateKind::AsToday => Candidate {
                name: AS_TODAY.into(),
                config: None,
                path: None,
            },
            CandidateKind::Siloed => Candidate {
                name: SILOED.into(),
                config: Some(super::super::siloed(&config)),
                path: None,
            },
            CandidateKind::PlainSlurm => Candidate {
                name: PLAIN_SLURM.into(),
                config: Some(super::super::plain_slurm(&config)),
                path: Some(PathBuf::from(PLAIN_SLURM)),
            },
            CandidateKind::File(path) => Candidate {
                name: path.display().to_string(),
                config: Some(config.clone()),
                path: Some(path),
            },
        })
        .collect()
}

fn study(waited: Secs, kinds: Vec<CandidateKind>, skip_calibration: bool) -> Study {
    Study {
        trace: trace(waited),
        read: vec!["test: 3 jobs".into()],
        current: Some(Settings {
            path: PathBuf::from("t.toml"),
            config: config(),
        }),
        config: config(),
        candidates: candidates(kinds),
        params: Params {
            requeue_delay: None,
            checkpoints: Vec::new(),
            tolerance: Tolerance::default(),
            skip_calibration,
            capacity: None,
            curve: None,
            threads: 2,
        },
    }
}

/// The batches a study began, each its labels and threads, and whether every one ended.
#[derive(Default)]
struct Recorder {
    batches: Mutex<Vec<(Vec<String>, usize)>>,
    open: Mutex<usize>,
}

impl Progress for Recorder {
    fn begin(&self, labels: Vec<String>, threads: usize) {
        self.batches.lock().unwrap().push((labels, threads));
        *self.open.lock().unwrap() += 1;
    }
    fn at(&self, _: usize, _: Secs) {}
    fn done(&self, _: usize) {}
    fn end(&self) {
        *self.open.lock().unwrap() -= 1;
    }
}

fn names(replay: &Replay) -> Vec<&str> {
    replay
        .columns
        .iter()
        .map(|c| c.candidate.as_str())
        .collect()
}

#[test]
fn the_first_simulated_candidate_is_the_baseline_and_each_has_its_column() {
    let kinds = vec![
        CandidateKind::AsToday,
        CandidateKind::Siloed,
        CandidateKind::File("t.toml".into()),
    ];
    let progress = Recorder::default();
    let found = study(0, kinds, true).run(&progress);
    let Findings::Complete(replay) = found else {
        panic!("{found:?}")
    };
    assert_eq!(names(&replay), [SILOED, AS_TODAY, "t.toml"]);
    assert!(replay.calibration.is_none() && replay.curve.is_none());
    // The baseline is compared with nothing, the history with nothing.
    assert!(replay.columns[0].worse_off.is_empty());
    assert!(replay.columns[1].worse_off.is_empty());
    let expected = worse_off(&replay.columns[0].figures, &replay.columns[2].figures);
    assert_eq!(replay.columns[2].worse_off, expected);
    // No calibration: one batch of the two simulated candidates.
    let batches = progress.batches.lock().unwrap().clone();
    assert_eq!(batches, [(vec![SILOED.into(), "t.toml".into()], 2)]);
    assert_eq!(*progress.open.lock().unwrap(), 0);
    // What was read comes first, the trace's size last.
    assert_eq!(replay.notes.first().unwrap(), "test: 3 jobs");
    assert_eq!(replay.notes.last().unwrap(), "3 jobs, 8 GPUs on 2 nodes");
    assert_eq!(replay.columns[1].figures.cluster().jobs, 3);
}

#[test]
fn a_calibration_miss_is_reported_with_the_calibration_alone() {
    // Observed: every job waited 10 hours on an idle cluster; simulated, none waits.
    let kinds = vec![CandidateKind::Siloed, CandidateKind::File("t.toml".into())];
    let progress = Recorder::default();
    let found = study(36_000, kinds.clone(), false).run(&progress);
    let Findings::Misfit(replay) = &found else {
        panic!("{found:?}")
    };
    let calibration = replay.calibration.as_ref().expect("a calibration");
    assert!(!calibration.fits);
    assert!(calibration.misfits().count() > 0);
    assert!(replay.columns.is_empty() && replay.curve.is_none());
    assert_eq!(found.replay(), replay);
    // Only the calibration was simulated.
    let batches = progress.batches.lock().unwrap().clone();
    assert_eq!(batches, [(vec!["the current settings".into()], 1)]);
    // Skipped, the same history gives its what-ifs.
    let found = study(36_000, kinds, true).run(&Quiet);
    let Findings::Complete(replay) = found else {
        panic!("{found:?}")
    };
    assert_eq!(names(&replay), [SILOED, "t.toml"]);
}

#[test]
fn a_fitting_calibration_lends_its_simulation_and_the_curve_has_its_points() {
    let kinds = vec![CandidateKind::Siloed, CandidateKind::File("t.toml".into())];
    let mut s = study(0, kinds, false);
    s.params.curve = Some(CurveParams {
        points: 1,
        step: None,
        quotas: replay_curve::QuotaRule::Scale,
    });
    let progress = Recorder::default();
    let found = s.run(&progress);
    let Findings::Complete(replay) = found else {
        panic!("{found:?}")
    };
    assert!(replay.calibration.as_ref().is_some_and(|c| c.fits));
    assert_eq!(names(&replay), [SILOED, "t.toml"]);
    // t.toml is the current settings' file: its column is the calibration's simulation.
    let batches = progress.batches.lock().unwrap().clone();
    assert_eq!(
        batches,
        [
            (vec!["the current settings".into()], 1),
            (
                vec![
                    SILOED.into(),
                    "siloed at 4 GPUs".into(),
                    "t.toml at 4 GPUs".into()
                ],
                2
            ),
        ]
    );
    let curve = replay.curve.expect("a curve");
    assert_eq!((curve.capacity, curve.step), (8, 4));
    let points: Vec<(&str, u32)> = curve
        .points
        .iter()
        .map(|p| (p.candidate.as_str(), p.gpus))
        .collect();
    assert_eq!(
        points,
        [(SILOED, 8), ("t.toml", 8), (SILOED, 4), ("t.toml", 4)]
    );
}

#[test]
fn the_default_candidates_put_the_current_settings_first() {
    let config = Path::new("/etc/slurm/teamshare.toml");
    assert_eq!(
        default_candidates(config, Some(config.to_path_buf())),
        [
            CandidateKind::File(config.to_path_buf()),
            CandidateKind::AsToday,
            CandidateKind::Siloed
        ]
    );
    assert_eq!(
        default_candidates(config, None),
        [
            CandidateKind::PlainSlurm,
            CandidateKind::AsToday,
            CandidateKind::Siloed,
            CandidateKind::File(config.to_path_buf())
        ]
    );
    assert_eq!(
        CandidateKind::parse("x/y.toml"),
        CandidateKind::File("x/y.toml".into())
    );
    assert_eq!(
        baseline_first(vec![CandidateKind::AsToday]),
        [CandidateKind::AsToday]
    );
}
