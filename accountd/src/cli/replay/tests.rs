//! `accountd replay`'s arguments, candidates and capacities.

use super::super::{Cli, Command};
use super::*;
use clap::Parser;

fn parse(args: &[&str]) -> Result<ReplayArgs, clap::Error> {
    let mut argv = vec!["accountd", "replay"];
    argv.extend_from_slice(args);
    Cli::try_parse_from(argv).map(|cli| match cli.command {
        Command::Replay(a) => a,
        other => panic!("{other:?}"),
    })
}

#[test]
fn the_defaults() {
    let a = parse(&[]).unwrap();
    assert!(a.candidates.is_empty());
    assert_eq!(a.gpus_per_node, 8);
    assert_eq!(a.tolerance_pct, 25.0);
    assert_eq!(a.tolerance_secs, 120);
    assert_eq!(a.requeue_delay, None);
    assert_eq!(a.format, FormatArg::Table);
    assert!(!a.skip_calibration);
    assert!(a.swf.is_none() && a.capacity_curve.is_none());
}

#[test]
fn every_option_parses() {
    let a = parse(&[
        "--swf",
        "x.swf",
        "--team-map",
        "map.toml",
        "--since",
        "2024-01-01",
        "--until",
        "now",
        "--candidate",
        "as-today",
        "--candidate",
        "siloed",
        "--candidate",
        "new/teamshare.toml",
        "--current",
        "old.toml",
        "--capacity",
        "64",
        "--gpus-per-node",
        "4",
        "--checkpoint",
        "training=30m",
        "--checkpoint",
        "research=2h",
        "--requeue-delay",
        "0s",
        "--capacity-curve",
        "3",
        "--curve-step",
        "8",
        "--tolerance-pct",
        "10",
        "--tolerance-secs",
        "300",
        "--skip-calibration",
        "--format",
        "html",
    ])
    .unwrap();
    assert_eq!(a.swf.as_deref(), Some(Path::new("x.swf")));
    assert_eq!(
        a.candidates
            .iter()
            .map(|c| CandidateKind::parse(c))
            .collect::<Vec<_>>(),
        [
            CandidateKind::AsToday,
            CandidateKind::Siloed,
            CandidateKind::File("new/teamshare.toml".into())
        ]
    );
    assert_eq!(a.current.as_deref(), Some("old.toml"));
    assert_eq!((a.capacity, a.gpus_per_node), (Some(64), 4));
    assert_eq!(
        a.checkpoints,
        [
            ("training".to_string(), 1800),
            ("research".to_string(), 7200)
        ]
    );
    assert_eq!(a.requeue_delay, Some(0));
    assert_eq!((a.capacity_curve, a.curve_step), (Some(3), Some(8)));
    assert_eq!((a.tolerance_pct, a.tolerance_secs), (10.0, 300));
    assert!(a.skip_calibration);
    assert_eq!(a.format, FormatArg::Html);
}

#[test]
fn mistakes_are_usage_errors() {
    for bad in [
        &["--swf", "x.swf"][..],
        &["--team-map", "m"],
        &["--curve-step", "8"],
        &["--checkpoint", "training"],
        &["--checkpoint", "=30m"],
        &["--checkpoint", "training=0s"],
        &["--checkpoint", "training=soon"],
        &["--capacity", "0"],
        &["--gpus-per-node", "0"],
        &["--tolerance-pct", "-1"],
        &["--tolerance-secs", "-5"],
        &["--requeue-delay", "later"],
        &["--format", "xml"],
    ] {
        let err = parse(bad).map(|_| ()).unwrap_err();
        assert_eq!(err.exit_code(), 2, "{bad:?}: {err}");
    }
}

#[test]
fn current_none_is_plain_slurm_and_the_baseline_comes_first() {
    let config = teamshare_config::parse(
        "[cluster]\nname = \"c\"\n[[team]]\nname = \"a\"\nquota = 1\n",
        "t.toml",
    )
    .unwrap();
    let a = parse(&["--current", "none"]).unwrap();
    let (path, plain) = current_settings(&config, Path::new("t.toml"), &a)
        .unwrap()
        .unwrap();
    assert_eq!(path, Path::new(PLAIN_SLURM));
    assert_eq!(
        (plain.teams[0].quota.total, plain.teams[0].borrow_limit),
        (0, None)
    );
    let names: Vec<String> = candidates(&config, Path::new("t.toml"), &a)
        .unwrap()
        .into_iter()
        .map(|c| c.name)
        .collect();
    assert_eq!(names, [PLAIN_SLURM, "as-today", "siloed", "t.toml"]);
    // Given candidates keep their order, but the history is never the baseline.
    let given = parse(&["--candidate", "as-today", "--candidate", "siloed"]).unwrap();
    let names: Vec<String> = candidates(&config, Path::new("t.toml"), &given)
        .unwrap()
        .into_iter()
        .map(|c| c.name)
        .collect();
    assert_eq!(names, ["siloed", "as-today"]);
    // The defaults: the configuration (the settings the history ran under) by its file
    // name, as-today, siloed.
    let a = parse(&[]).unwrap();
    let names: Vec<String> = candidates(&config, Path::new("/etc/slurm/t.toml"), &a)
        .unwrap()
        .into_iter()
        .map(|c| c.name)
        .collect();
    assert_eq!(names, ["t.toml", "as-today", "siloed"]);
    let twice = parse(&["--candidate", "siloed", "--candidate", "siloed"]).unwrap();
    assert!(candidates(&config, Path::new("t.toml"), &twice).is_err());
}

#[test]
fn capacities_are_taken_whole_nodes_first() {
    let node = |name: &str, gpus| replay_model::NodeSpec {
        name: name.into(),
        gpus,
        gpu_type: Some("h100".into()),
    };
    let trace = Trace {
        cluster: replay_model::Cluster {
            nodes: vec![node("a", 8), node("b", 8), node("c", 8)],
            drains: vec![replay_model::Drain {
                node: "c".into(),
                since: 0,
                until: 10,
            }],
        },
        ..Trace::default()
    };
    let smaller = without_gpus(&trace, 12);
    let left: Vec<(&str, u32)> = smaller
        .cluster
        .nodes
        .iter()
        .map(|n| (n.name.as_str(), n.gpus))
        .collect();
    assert_eq!(left, [("a", 8), ("b", 4)]);
    assert!(smaller.cluster.drains.is_empty());
}

#[test]
fn a_missing_database_is_a_runtime_error() {
    let config = teamshare_config::parse(
        "[cluster]\nname = \"c\"\n[[team]]\nname = \"a\"\nquota = 1\n",
        "t.toml",
    )
    .unwrap();
    let request = TraceRequest {
        source: TraceSource::Database("/nonexistent.db".into()),
        period: Period { since: 0, until: 1 },
        cluster: "c".into(),
        gpus_per_node: 8,
        capacity: None,
        explicit_period: false,
    };
    let err = load_trace(&request, &config).unwrap_err();
    assert_eq!(super::super::exit_code_for(&err), ExitStatus::Runtime);
}
