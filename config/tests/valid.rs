//! Valid files: what they parse to, defaults, relative paths, and the capacity check.

// Test code: a scenario reads top to bottom, so the workspace's 80-line limit is not for it.
#![allow(clippy::too_many_lines)]

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use teamshare_config::{
    load, parse, AccountdSettings, ClusterSettings, Config, ConfigError, Governance, GpuType,
    IdleCostSplit, IdleSharing, Location, OnStaleState, PriorityClass, Quota, ReclaimMode, Team,
    WithinTeam,
};

fn valid(source: &str) -> Config {
    match parse(source, "teamshare.toml") {
        Ok(config) => config,
        Err(error) => panic!("expected a valid file, got:\n{error}"),
    }
}

fn at(line: usize) -> Location {
    Location {
        file: "teamshare.toml".into(),
        line,
        column: 1,
    }
}

fn untyped(total: u32) -> Quota {
    Quota {
        total,
        by_type: BTreeMap::new(),
    }
}

const DESIGN_EXAMPLE: &str = r#"[cluster]
name = "gpu-cluster"              # Slurm ClusterName
partitions = ["gpu"]              # governed partitions; capacity = their GPUs on usable nodes
idle_sharing = "fair-share"       # or "fifo": how idle capacity goes to borrowers
currency = "BRL"

[gpu_types.h100]                  # hourly rate per GPU type (gres type); "default" for untyped
rate_per_hour = 69.44

[[team]]
name = "agents"                   # the Slurm account
quota = 2                         # guaranteed GPUs (or a table per GPU type)
borrow_limit = 2                  # extra GPUs beyond quota it may borrow; "100%" = of quota; absent = no limit
lend = true                       # or lend_limit = 1 (GPUs of its idle quota others may use)
weight = 40                       # share of idle capacity under fair-share

[[priority_class]]
name = "inference"                # chosen at submit (e.g. --qos=inference or a documented flag)
value = 100
preemptible = false               # never preempted; therefore may only run inside its team's quota

[governance]
preempt_within_team = "lower-priority"   # or "never"
reclaim_mode = "requeue"                 # or "cancel"
reclaim_grace = "30s"                    # SIGTERM first, kill after this (jobs can checkpoint)
min_runtime_before_reclaim = "5m"        # a borrowed job is protected this long
state_max_age = "30s"                    # older state than this counts as stale
on_stale_state = "fail-open"             # or "fail-closed"

[accountd]
database = "/var/lib/teamshare/accountd.db"
ingest_interval = "60s"
metrics_listen = "127.0.0.1:9477"
"#;

#[test]
fn design_example_parses_to_the_expected_values() {
    let expected = Config {
        cluster: ClusterSettings {
            name: "gpu-cluster".into(),
            partitions: vec!["gpu".into()],
            idle_sharing: IdleSharing::FairShare,
            currency: "BRL".into(),
        },
        gpu_types: BTreeMap::from([(
            "h100".to_owned(),
            GpuType {
                rate_per_hour: 69.44,
                slice: None,
            },
        )]),
        teams: vec![Team {
            name: "agents".into(),
            quota: untyped(2),
            borrow_limit: Some(2),
            borrow_by_type: None,
            lend_limit: 2,
            lend_by_type: None,
            weight: 40,
            location: at(10),
        }],
        priority_classes: vec![PriorityClass {
            name: "inference".into(),
            value: 100,
            preemptible: false,
        }],
        governance: Governance {
            preempt_within_team: WithinTeam::LowerPriority,
            reclaim_mode: ReclaimMode::Requeue,
            reclaim_grace: Duration::from_secs(30),
            min_runtime_before_reclaim: Duration::from_secs(300),
            state_max_age: Duration::from_secs(30),
            on_stale_state: OnStaleState::FailOpen,
            // Not in DESIGN's example: off, over 15 minutes.
            idle_window: Duration::from_secs(900),
            idle_first_reclaim: false,
        },
        // Not in DESIGN's example: no idle policy.
        idle_policy: None,
        accountd: AccountdSettings::default(),
        digest: teamshare_config::digest(DESIGN_EXAMPLE),
    };
    assert_eq!(valid(DESIGN_EXAMPLE), expected);
}

#[test]
fn shipped_example_is_the_dev_cluster() {
    let config = valid(include_str!("../examples/teamshare.toml"));
    assert_eq!(config.cluster.name, "teamshare-dev");
    assert_eq!(config.cluster.partitions, ["gpu"]);
    assert_eq!(config.cluster.currency, "USD");
    assert_eq!(
        config.gpu_types,
        BTreeMap::from([(
            "default".to_owned(),
            GpuType {
                rate_per_hour: 2.5,
                slice: None
            }
        )])
    );
    let teams: Vec<(&str, u32, Option<u32>, u32, u32)> = config
        .teams
        .iter()
        .map(|t| {
            (
                t.name.as_str(),
                t.quota.total,
                t.borrow_limit,
                t.lend_limit,
                t.weight,
            )
        })
        .collect();
    assert_eq!(
        teams,
        [
            ("agents", 2, Some(2), 2, 40),
            ("training", 4, Some(4), 4, 40),
            ("research", 2, Some(6), 2, 20),
        ]
    );
    assert!(config.teams.iter().all(|t| !t.quota.is_typed()));
    let classes: Vec<(&str, u32, bool)> = config
        .priority_classes
        .iter()
        .map(|c| (c.name.as_str(), c.value, c.preemptible))
        .collect();
    assert_eq!(
        classes,
        [
            ("inference", 100, false),
            ("standard", 50, true),
            ("experiment", 10, true)
        ]
    );
    assert_eq!(config.governance, Governance::default());
    assert_eq!(config.accountd, AccountdSettings::default());
    assert_eq!(config.total_quota(), 8);
    assert_eq!(config.team("training").map(|t| t.quota.total), Some(4));
    assert_eq!(config.team("nobody"), None);
    assert_eq!(config.priority_class("standard").map(|c| c.value), Some(50));
    assert_eq!(config.priority_class("urgent"), None);
}

#[test]
fn a_minimal_file_gets_every_default() {
    let config = valid("[cluster]\nname = \"c\"\n\n[[team]]\nname = \"a\"\nquota = 3\n");
    assert_eq!(
        config.cluster,
        ClusterSettings {
            name: "c".into(),
            partitions: vec!["gpu".into()],
            idle_sharing: IdleSharing::FairShare,
            currency: "USD".into(),
        }
    );
    assert!(config.gpu_types.is_empty());
    assert!(config.priority_classes.is_empty());
    assert_eq!(
        config.teams,
        [Team {
            name: "a".into(),
            quota: untyped(3),
            borrow_limit: None,
            borrow_by_type: None,
            lend_limit: 3,
            lend_by_type: None,
            weight: 1,
            location: at(4),
        }]
    );
    assert_eq!(config.governance, Governance::default());
    let accountd = &config.accountd;
    assert_eq!(
        accountd.database,
        PathBuf::from("/var/lib/teamshare/accountd.db")
    );
    assert_eq!(accountd.ingest_interval, Duration::from_secs(60));
    assert_eq!(
        accountd.metrics_listen,
        "127.0.0.1:9477".parse::<SocketAddr>().unwrap()
    );
    assert_eq!(
        accountd.state_file,
        PathBuf::from("/var/lib/teamshare/state.json")
    );
    assert_eq!(accountd.sample_interval, Duration::from_secs(10));
    assert_eq!(
        accountd.sample_spool,
        PathBuf::from("/var/spool/teamshare/samples")
    );
    assert_eq!(accountd.borrowed_cost_factor, 1.0);
    assert_eq!(accountd.idle_cost_split, IdleCostSplit::QuotaShare);
    assert_eq!(accountd.idle_threshold_percent, 5.0);
    assert_eq!(
        accountd.fairshare_half_life,
        Duration::from_secs(7 * 86_400)
    );
    assert_eq!(accountd.fairshare_dampening, 1.0);
}

#[test]
fn every_setting_can_be_changed() {
    let config = valid(
        r#"
[cluster]
name = "c"
partitions = ["gpu", "gpu-long"]
idle_sharing = "fifo"
currency = "EUR"

[[team]]
name = "a"
quota = 1

[[priority_class]]
name = "batch"

[governance]
preempt_within_team = "never"
reclaim_mode = "cancel"
reclaim_grace = 120
min_runtime_before_reclaim = "1h30m"
state_max_age = "2m"
on_stale_state = "fail-closed"
idle_window = "30m"
idle_first_reclaim = true

[accountd]
database = "db/accountd.db"
ingest_interval = "5m"
metrics_listen = "[::]:9100"
state_file = "/run/teamshare/state.json"
sample_interval = 30
sample_spool = "/tmp/spool"
borrowed_cost_factor = 0.5
idle_cost_split = "idle-row"
idle_threshold_percent = 10
fairshare_half_life = "1d"
fairshare_dampening = 2
"#,
    );
    assert_eq!(config.cluster.partitions, ["gpu", "gpu-long"]);
    assert_eq!(config.cluster.idle_sharing, IdleSharing::Fifo);
    assert_eq!(config.cluster.currency, "EUR");
    assert_eq!(
        config.priority_classes,
        [PriorityClass {
            name: "batch".into(),
            value: 0,
            preemptible: true
        }]
    );
    assert_eq!(
        config.governance,
        Governance {
            preempt_within_team: WithinTeam::Never,
            reclaim_mode: ReclaimMode::Cancel,
            reclaim_grace: Duration::from_secs(120),
            min_runtime_before_reclaim: Duration::from_secs(5_400),
            state_max_age: Duration::from_secs(120),
            on_stale_state: OnStaleState::FailClosed,
            idle_window: Duration::from_secs(1_800),
            idle_first_reclaim: true,
        }
    );
    assert_eq!(
        config.accountd,
        AccountdSettings {
            // parse() keeps relative paths as written; load() resolves them.
            database: PathBuf::from("db/accountd.db"),
            ingest_interval: Duration::from_secs(300),
            metrics_listen: "[::]:9100".parse().unwrap(),
            state_file: PathBuf::from("/run/teamshare/state.json"),
            sample_interval: Duration::from_secs(30),
            sample_spool: PathBuf::from("/tmp/spool"),
            borrowed_cost_factor: 0.5,
            idle_cost_split: IdleCostSplit::IdleRow,
            idle_threshold_percent: 10.0,
            fairshare_half_life: Duration::from_secs(86_400),
            fairshare_dampening: 2.0,
        }
    );
}

#[test]
fn percent_borrow_limits_are_of_the_quota_rounded_down() {
    let config = valid(
        r#"
[cluster]
name = "c"
[[team]]
name = "full"
quota = 2
borrow_limit = "100%"
[[team]]
name = "half"
quota = 3
borrow_limit = "50%"
[[team]]
name = "more"
quota = 2
borrow_limit = "250%"
[[team]]
name = "none"
quota = 4
borrow_limit = "0%"
[[team]]
name = "gpus"
quota = 1
borrow_limit = 3
[[team]]
name = "unlimited"
quota = 1
"#,
    );
    let limits: Vec<(&str, Option<u32>)> = config
        .teams
        .iter()
        .map(|t| (t.name.as_str(), t.borrow_limit))
        .collect();
    assert_eq!(
        limits,
        [
            ("full", Some(2)),
            ("half", Some(1)),
            ("more", Some(5)),
            ("none", Some(0)),
            ("gpus", Some(3)),
            ("unlimited", None),
        ]
    );
}

#[test]
fn typed_quotas_count_per_gpu_type() {
    let config = valid(
        r#"
[cluster]
name = "c"
[gpu_types.h100]
rate_per_hour = 4
[gpu_types.a100]
rate_per_hour = 2.5

[[team]]
name = "inline"
quota = { h100 = 2, a100 = 1 }
borrow_limit = "100%"

[[team]]
name = "subtable"
lend_limit = 1
[team.quota]
a100 = 4
"#,
    );
    let inline = config.team("inline").unwrap();
    assert_eq!(inline.quota.total, 3);
    assert_eq!(
        inline.quota.by_type,
        BTreeMap::from([("a100".to_owned(), 1), ("h100".to_owned(), 2)])
    );
    assert!(inline.quota.is_typed());
    assert_eq!(inline.borrow_limit, Some(3));
    assert_eq!(inline.lend_limit, 3);
    let subtable = config.team("subtable").unwrap();
    assert_eq!(subtable.quota.total, 4);
    assert_eq!(
        subtable.quota.by_type,
        BTreeMap::from([("a100".to_owned(), 4)])
    );
    assert_eq!(subtable.lend_limit, 1);
    assert_eq!(config.gpu_types["h100"].rate_per_hour, 4.0);
    assert_eq!(config.total_quota(), 7);
}

#[test]
fn lending_is_all_none_or_a_limit() {
    let config = valid(
        r#"
[cluster]
name = "c"
[[team]]
name = "default"
quota = 3
[[team]]
name = "lends"
quota = 3
lend = true
[[team]]
name = "keeps"
quota = 3
lend = false
[[team]]
name = "some"
quota = 3
lend_limit = 1
"#,
    );
    let lend: Vec<u32> = config.teams.iter().map(|t| t.lend_limit).collect();
    assert_eq!(lend, [3, 3, 0, 1]);
}

#[test]
fn teams_may_be_an_inline_array_and_locations_follow_the_file() {
    let config = valid(
        "team = [\n  { name = \"a\", quota = 1 },\n  { name = \"b\", quota = 2 },\n]\n[cluster]\nname = \"c\"\n",
    );
    let places: Vec<(&str, usize, usize)> = config
        .teams
        .iter()
        .map(|t| (t.name.as_str(), t.location.line, t.location.column))
        .collect();
    assert_eq!(places, [("a", 2, 3), ("b", 3, 3)]);
}

#[test]
fn load_reads_the_file_and_resolves_relative_paths_beside_it() {
    let directory = tempfile::tempdir().unwrap();
    let path = directory.path().join("teamshare.toml");
    std::fs::write(
        &path,
        "[cluster]\nname = \"c\"\n[[team]]\nname = \"a\"\nquota = 1\n[accountd]\ndatabase = \"accountd.db\"\nsample_spool = \"spool/samples\"\nstate_file = \"/run/state.json\"\n",
    )
    .unwrap();
    let config = load(&path).unwrap();
    assert_eq!(
        config.accountd.database,
        directory.path().join("accountd.db")
    );
    assert_eq!(
        config.accountd.sample_spool,
        directory.path().join("spool/samples")
    );
    assert_eq!(config.accountd.state_file, PathBuf::from("/run/state.json"));
    assert_eq!(config.teams[0].location.file, path.display().to_string());
}

#[test]
fn load_names_the_path_in_errors() {
    let directory = tempfile::tempdir().unwrap();
    let missing = directory.path().join("teamshare.toml");
    let error = load(&missing).unwrap_err();
    assert!(matches!(&error, ConfigError::Io { path, .. } if *path == missing));
    assert!(error
        .to_string()
        .starts_with(&format!("cannot read {}: ", missing.display())));
    assert!(error.diagnostics().is_none());

    std::fs::write(
        &missing,
        "[cluster]\nname = \"c\"\n[[team]]\nname = \"a\"\nquota = -1\n",
    )
    .unwrap();
    let error = load(&missing).unwrap_err();
    let diagnostics = error.diagnostics().expect("invalid, not unreadable");
    assert_eq!(diagnostics.len(), 1);
    assert_eq!(diagnostics.0[0].file, missing.display().to_string());
    assert!(error
        .to_string()
        .starts_with(&format!("{}:5:9: error: ", missing.display())));
}

const CAPACITY: &str = r#"[cluster]
name = "c"
partitions = ["gpu"]
[gpu_types.h100]
rate_per_hour = 4
[gpu_types.a100]
rate_per_hour = 2

[[team]]
name = "agents"
quota = { a100 = 2 }

[[team]]
name = "training"
quota = { h100 = 2, a100 = 2 }

[[team]]
name = "research"
quota = { h100 = 1 }
"#;

#[test]
fn check_capacity_accepts_quotas_that_fit() {
    let config = valid(CAPACITY);
    let by_type = BTreeMap::from([("h100".to_owned(), 4), ("a100".to_owned(), 4)]);
    assert_eq!(config.check_capacity(7, &by_type), []);
    assert_eq!(config.check_capacity(8, &by_type), []);
}

#[test]
fn check_capacity_points_at_the_team_that_brings_the_sum_over() {
    let config = valid(CAPACITY);
    let by_type = BTreeMap::from([("h100".to_owned(), 4), ("a100".to_owned(), 4)]);
    let problems = config.check_capacity(6, &by_type);
    assert_eq!(problems.len(), 1, "{problems:?}");
    // 2 + 4 = 6 fits; research's 1 brings it to 7.
    assert_eq!((problems[0].line, problems[0].column), (17, 1));
    assert!(problems[0].message.contains("(7 GPUs)"), "{}", problems[0]);
    assert!(problems[0].message.contains("(6 GPUs)"), "{}", problems[0]);
    assert!(
        problems[0].message.contains("`research`"),
        "{}",
        problems[0]
    );
    let hint = problems[0].hint.as_deref().unwrap();
    assert!(hint.contains("agents 2, training 4, research 1"), "{hint}");
}

#[test]
fn check_capacity_checks_each_typed_quota_against_its_type() {
    let config = valid(CAPACITY);
    // Enough GPUs in all, but only 2 H100s and no A100s.
    let by_type = BTreeMap::from([("h100".to_owned(), 2)]);
    let problems = config.check_capacity(10, &by_type);
    let found: Vec<(usize, bool, bool)> = problems
        .iter()
        .map(|p| {
            (
                p.line,
                p.message.contains("a100 quotas (4 GPUs)"),
                p.message.contains("h100 quotas (3 GPUs)"),
            )
        })
        .collect();
    // a100: agents' 2 (of 2 + 2) exceed 0; h100: research's 1 brings 2 to 3.
    assert_eq!(found, [(9, true, false), (17, false, true)], "{problems:?}");
}

#[test]
fn per_type_limits_and_what_each_type_may_borrow_and_lend() {
    let config = valid(
        r#"
[cluster]
name = "c"
[gpu_types.h100]
rate_per_hour = 4
[gpu_types.a100]
rate_per_hour = 2
[gpu_types.default]
rate_per_hour = 1

[[team]]
name = "tables"
quota = { h100 = 2, a100 = 2 }
borrow_limit = { a100 = 3 }
lend_limit = { h100 = 1 }

[[team]]
name = "numbers"
quota = { h100 = 3 }
borrow_limit = 2
lend_limit = 2

[[team]]
name = "borrower"
quota = 0
"#,
    );
    assert!(config.is_typed());
    assert_eq!(
        config.governed_types().into_iter().collect::<Vec<_>>(),
        ["a100", "h100"]
    );
    let tables = config.team("tables").unwrap();
    // A table names what each type may do; a type it leaves out may do nothing.
    assert_eq!(
        (
            tables.borrow_limit_of("a100"),
            tables.borrow_limit_of("h100")
        ),
        (Some(3), Some(0))
    );
    assert_eq!(tables.borrow_limit, Some(3));
    assert_eq!(
        (tables.lend_limit_of("h100"), tables.lend_limit_of("a100")),
        (1, 0)
    );
    assert_eq!(tables.lend_limit, 1);
    // A number is over all types: no per-type borrow limit, lending capped by each type's quota.
    let numbers = config.team("numbers").unwrap();
    assert_eq!(
        (numbers.borrow_limit_of("a100"), numbers.borrow_limit),
        (None, Some(2))
    );
    assert_eq!(
        (numbers.lend_limit_of("h100"), numbers.lend_limit_of("a100")),
        (2, 0)
    );
    let borrower = config.team("borrower").unwrap();
    assert!(!borrower.is_typed());
    assert_eq!(
        (borrower.quota_of("h100"), borrower.borrow_limit_of("h100")),
        (0, None)
    );
    // An untyped configuration stays untyped.
    assert!(!valid("[cluster]\nname = \"c\"\n[[team]]\nname = \"a\"\nquota = 2\n").is_typed());
}
