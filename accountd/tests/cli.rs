//! The real `accountd` binary in temporary directories: exit codes, outputs, and the Slurm
//! commands it runs (stood in for by scripts on PATH that record their arguments).

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::process::{Command, Output};

use accountd::store::Store;

const BIN: &str = env!("CARGO_BIN_EXE_accountd");

const CONFIG: &str = r#"[cluster]
name = "testcluster"
partitions = ["gpu"]
currency = "BRL"

[gpu_types.default]
rate_per_hour = 10.0

[gpu_types.h100]
rate_per_hour = 70.0

[[team]]
name = "agents"
quota = 2
borrow_limit = 2
weight = 40

[[team]]
name = "training"
quota = 4
weight = 30

[[priority_class]]
name = "inference"
value = 100
preemptible = false

[accountd]
database = "accountd.db"
"#;

/// A temporary directory with teamshare.toml, a slurm.conf placeholder and a bin/ for fakes.
struct Site {
    dir: tempfile::TempDir,
}

impl Site {
    fn new(config: &str) -> Site {
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join("teamshare.toml"), config).unwrap();
        fs::write(dir.path().join("slurm.conf"), "ClusterName=testcluster\n").unwrap();
        fs::create_dir(dir.path().join("bin")).unwrap();
        Site { dir }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// A stand-in for a Slurm command: records its arguments (one per line) in `<name>.args`
    /// (appending, one call after another) and prints `<name>.out`.
    fn fake(&self, name: &str, stdout: &str) {
        let script = format!(
            "#!/bin/sh\nprintf '%s\\n' \"$@\" >> '{dir}/{name}.args'\necho '--' >> '{dir}/{name}.args'\ncat '{dir}/{name}.out'\n",
            dir = self.dir.path().display()
        );
        let bin = self.path("bin").join(name);
        fs::write(&bin, script).unwrap();
        fs::set_permissions(&bin, fs::Permissions::from_mode(0o755)).unwrap();
        fs::write(self.path(&format!("{name}.out")), stdout).unwrap();
    }

    fn args_of(&self, name: &str) -> Vec<String> {
        fs::read_to_string(self.path(&format!("{name}.args")))
            .unwrap_or_default()
            .lines()
            .map(str::to_string)
            .collect()
    }

    /// accountd with this site's config, UTC local time, fakes first on PATH, no SLURM_CONF
    /// unless `with_slurm_conf`.
    fn run(&self, with_slurm_conf: bool, args: &[&str]) -> Output {
        let path = format!(
            "{}:{}",
            self.path("bin").display(),
            std::env::var("PATH").unwrap_or_default()
        );
        let mut cmd = Command::new(BIN);
        cmd.arg("--config")
            .arg(self.path("teamshare.toml"))
            .args(args)
            .env("TZ", "UTC")
            .env("PATH", path)
            .env_remove("SLURM_CONF")
            .current_dir(self.dir.path());
        if with_slurm_conf {
            cmd.env("SLURM_CONF", self.path("slurm.conf"));
        }
        cmd.output().unwrap()
    }
}

fn code(o: &Output) -> i32 {
    o.status.code().expect("exited")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

// ---- check-config ----------------------------------------------------------------------------

#[test]
fn check_config_valid_prints_a_summary_and_exits_0() {
    let site = Site::new(CONFIG);
    let o = site.run(false, &["check-config"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let out = stdout(&o);
    assert!(out.contains("is valid"), "{out}");
    assert!(out.contains("testcluster"), "{out}");
    assert!(out.contains("2 teams with 6 GPUs of quota"), "{out}");
    assert!(out.contains("agents (quota 2, borrow 2"), "{out}");
    assert!(out.contains("training (quota 4, borrow unlimited"), "{out}");
    assert!(out.contains("inference (100, not preemptible)"), "{out}");
    assert!(stderr(&o).contains("capacity: not checked (SLURM_CONF is not set"));
}

#[test]
fn check_config_invalid_prints_every_error_and_exits_2() {
    let bad = CONFIG
        .replace("weight = 40", "weight = 40\nquotaa = 3")
        .replace("rate_per_hour = 10.0", "rate_per_hour = -1.0");
    let site = Site::new(&bad);
    let o = site.run(false, &["check-config"]);
    assert_eq!(code(&o), 2);
    let err = stderr(&o);
    let errors: Vec<&str> = err.lines().filter(|l| l.contains(": error: ")).collect();
    assert!(errors.len() >= 2, "{err}");
    assert!(
        errors.iter().all(|l| l.contains("teamshare.toml:")),
        "{err}"
    );
    assert!(stdout(&o).is_empty());
}

#[test]
fn check_config_missing_file_is_a_runtime_error() {
    let site = Site::new(CONFIG);
    let o = Command::new(BIN)
        .args(["--config"])
        .arg(site.path("nope.toml"))
        .arg("check-config")
        .output()
        .unwrap();
    assert_eq!(code(&o), 1);
    assert!(stderr(&o).contains("nope.toml"));
}

#[test]
fn check_config_against_a_given_capacity() {
    let site = Site::new(CONFIG);
    let o = site.run(false, &["check-config", "--capacity", "8"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert!(stdout(&o).contains("capacity: 8 GPUs"));
    let o = site.run(false, &["check-config", "--capacity", "5"]);
    assert_eq!(code(&o), 2);
    assert!(stderr(&o).contains("capacity (5 GPUs)"), "{}", stderr(&o));
}

#[test]
fn check_config_measures_the_capacity_with_sinfo() {
    let site = Site::new(CONFIG);
    site.fake(
        "sinfo",
        "n1|gpu:4|idle\nn2|gpu:4|drain\nn3|gpu:4(S:0-1)|mix\n",
    );
    let o = site.run(true, &["check-config"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert!(
        stdout(&o).contains("capacity: 8 GPUs on 2 usable nodes"),
        "{}",
        stdout(&o)
    );
    assert!(stdout(&o).contains("n2 (drain)"));
    assert_eq!(
        site.args_of("sinfo"),
        ["-h", "-N", "-p", "gpu", "-o", "%N|%G|%t", "--"]
    );
    // Drained capacity below the quotas: exit 2 with the diagnostic.
    site.fake("sinfo", "n1|gpu:4|idle\nn2|gpu:4|down*\n");
    let o = site.run(true, &["check-config"]);
    assert_eq!(code(&o), 2, "{}", stdout(&o));
    assert!(stderr(&o).contains("error:"));
}

#[test]
fn check_config_without_sinfo_says_so_and_passes() {
    let site = Site::new(CONFIG);
    // SLURM_CONF is set but sinfo fails (no controller).
    let script =
        "#!/bin/sh\necho 'slurm_load_partitions: Unable to contact slurm controller' >&2\nexit 1\n";
    let bin = site.path("bin").join("sinfo");
    fs::write(&bin, script).unwrap();
    fs::set_permissions(&bin, fs::Permissions::from_mode(0o755)).unwrap();
    let o = site.run(true, &["check-config"]);
    assert_eq!(code(&o), 0);
    let err = stderr(&o);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("capacity: not checked (sinfo unavailable"),
        "{err}"
    );
}

#[test]
fn usage_errors_exit_2_and_help_documents_exit_codes() {
    let site = Site::new(CONFIG);
    let o = site.run(false, &["report", "--format", "xml"]);
    assert_eq!(code(&o), 2);
    let o = site.run(false, &["no-such-command"]);
    assert_eq!(code(&o), 2);
    let o = site.run(false, &["--help"]);
    assert_eq!(code(&o), 0);
    assert!(stdout(&o).contains("Exit codes:"));
    assert!(stdout(&o).contains("2  invalid configuration or usage"));
}

// ---- report ----------------------------------------------------------------------------------

const SACCT_FIXTURE: &str = "\
1|1|testcluster|agents|alice|gpu|normal|COMPLETED|2024-05-01T00:59:00|2024-05-01T01:00:00|2024-05-01T03:00:00|02:00:00|billing=2,cpu=2,gres/gpu=2,node=1
2|2|testcluster|agents|alice|gpu|normal|RUNNING|2024-04-30T22:00:00|2024-04-30T23:00:00|Unknown|1-01:00:00|cpu=1,gres/gpu=1,node=1
3|3|testcluster|training|bob|gpu|normal|COMPLETED|2024-05-01T10:00:00|2024-05-01T10:00:00|2024-05-01T10:30:00|00:30:00|cpu=8,gres/gpu=4,gres/gpu:h100=4,node=1
4|4|testcluster|ghost|carol|gpu|normal|CANCELLED by 0|2024-05-01T12:00:00|2024-05-01T12:00:00|2024-05-01T13:00:00|01:00:00|gres/gpu=1
5|5|testcluster|agents|alice|cpu|normal|COMPLETED|2024-05-01T12:00:00|2024-05-01T12:00:00|2024-05-01T13:00:00|01:00:00|cpu=4,node=1
6|6|othercluster|agents|alice|gpu|normal|COMPLETED|2024-05-01T12:00:00|2024-05-01T12:00:00|2024-05-01T13:00:00|01:00:00|gres/gpu=8
";

fn prepared_site() -> Site {
    let site = Site::new(CONFIG);
    let mut store = Store::open(&site.path("accountd.db")).unwrap();
    let batch = accountd::sacct::parse(SACCT_FIXTURE, &chrono::Utc);
    assert!(batch.malformed.is_empty());
    store.record_runs(&batch.runs, 1, None).unwrap();
    site
}

const PERIOD: [&str; 4] = ["--since", "2024-05-01", "--until", "2024-05-02"];

#[test]
fn report_table() {
    let site = prepared_site();
    let o = site.run(false, &[&["report"][..], &PERIOD].concat());
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let out = stdout(&o);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        lines[0],
        "GPU usage on testcluster from 2024-05-01 00:00:00 to 2024-05-02 00:00:00 (local time)"
    );
    let cells = |l: &str| l.split_whitespace().map(str::to_string).collect::<Vec<_>>();
    assert_eq!(
        cells(lines[1]),
        ["TEAM", "JOBS", "GPU-HOURS", "QUOTA", "COST", "(BRL)"]
    );
    // agents: 2 GPUs x 2 h + 1 GPU x 24 h (running: clipped at the period's end).
    assert_eq!(cells(lines[2]), ["agents", "2", "28.0000", "2", "280.00"]);
    assert_eq!(cells(lines[3]), ["ghost", "1", "1.0000", "10.00"]);
    assert_eq!(cells(lines[4]), ["training", "1", "2.0000", "4", "140.00"]);
    assert!(lines[5].starts_with("---"));
    assert_eq!(cells(lines[6]), ["total", "4", "31.0000", "6", "430.00"]);
    assert_eq!(lines.len(), 7);
}

#[test]
fn report_csv_and_team_filter() {
    let site = prepared_site();
    let o = site.run(
        false,
        &[
            &["report", "teams", "--team", "training", "--format", "csv"][..],
            &PERIOD,
        ]
        .concat(),
    );
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert_eq!(
        stdout(&o),
        "team,jobs,gpu_hours,quota,cost,currency,since,until\n\
         training,1,2.0000,4,140.00,BRL,2024-05-01T00:00:00Z,2024-05-02T00:00:00Z\n"
    );
}

#[test]
fn report_json() {
    let site = prepared_site();
    let o = site.run(
        false,
        &[
            "report",
            "--format",
            "json",
            "--since",
            "2024-05-01T02:00:00",
            "--until",
            "2024-05-01T10:15:00",
        ],
    );
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    let rows = v.as_array().unwrap();
    let names: Vec<&str> = rows.iter().map(|r| r["team"].as_str().unwrap()).collect();
    assert_eq!(names, ["agents", "training"]);
    // agents: job 1 from 02:00 to 03:00 (2 GPU-h) + job 2 over 8.25 h (8.25 GPU-h).
    assert_eq!(rows[0]["gpu_hours"].as_f64().unwrap(), 10.25);
    assert_eq!(rows[0]["jobs"], 2);
    assert_eq!(rows[0]["quota"], 2);
    assert_eq!(rows[0]["currency"], "BRL");
    assert_eq!(rows[0]["since"], "2024-05-01T02:00:00Z");
    assert_eq!(rows[0]["until"], "2024-05-01T10:15:00Z");
    // training: 4 h100 for 15 minutes.
    assert_eq!(rows[1]["gpu_hours"].as_f64().unwrap(), 1.0);
    assert!((rows[1]["cost"].as_f64().unwrap() - 70.0).abs() < 1e-9);
}

#[test]
fn report_errors() {
    let site = Site::new(CONFIG);
    let o = site.run(false, &["report"]);
    assert_eq!(code(&o), 1);
    assert!(stderr(&o).contains("no database at"), "{}", stderr(&o));
    assert!(!site.path("accountd.db").exists());
    let site = prepared_site();
    let o = site.run(false, &["report", "--since", "last tuesday"]);
    assert_eq!(code(&o), 2);
    assert!(stderr(&o).contains("last tuesday"));
    let o = site.run(false, &["report", "--since", "now", "--until", "now-1h"]);
    assert_eq!(code(&o), 2);
    assert!(stderr(&o).contains("period is empty"));
}

#[test]
fn a_database_from_a_newer_accountd_is_refused() {
    let site = Site::new(CONFIG);
    let db = site.path("accountd.db");
    {
        let conn = rusqlite::Connection::open(&db).unwrap();
        conn.execute_batch("PRAGMA user_version = 1000;").unwrap();
    }
    let before = fs::read(&db).unwrap();
    let o = site.run(false, &["report"]);
    assert_eq!(code(&o), 1);
    assert!(
        stderr(&o).contains("newer than this accountd"),
        "{}",
        stderr(&o)
    );
    assert_eq!(fs::read(&db).unwrap(), before);
}

// ---- ingest ----------------------------------------------------------------------------------

#[test]
fn ingest_runs_sacct_and_is_idempotent() {
    let site = Site::new(CONFIG);
    let malformed = "7|7|testcluster|agents|alice|gpu|normal|COMPLETED|x\n";
    site.fake("sacct", &format!("{SACCT_FIXTURE}{malformed}"));
    let o = site.run(
        true,
        &[
            "ingest",
            "--since",
            "2024-04-30",
            "--until",
            "2024-05-02T00:00:00",
        ],
    );
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let err = stderr(&o);
    assert!(
        err.contains(
            "7 records read, 6 new, 0 updated, 0 unchanged, 0 never started, 1 malformed skipped"
        ),
        "{err}"
    );
    assert!(err.contains("sacct line 7:"), "{err}");
    assert!(err.contains(malformed.trim()), "{err}");
    let args = site.args_of("sacct");
    for flag in ["-a", "-X", "-D", "-P", "-n", "--noconvert"] {
        assert!(args.iter().any(|a| a == flag), "{flag}: {args:?}");
    }
    let after = |flag: &str| args[args.iter().position(|a| a == flag).unwrap() + 1].clone();
    assert_eq!(after("-M"), "testcluster");
    assert_eq!(after("-S"), "2024-04-30T00:00:00");
    assert_eq!(after("-E"), "2024-05-02T00:00:00");

    let again = site.run(
        true,
        &["ingest", "--since", "2024-04-30", "--until", "2024-05-02"],
    );
    assert_eq!(code(&again), 0);
    assert!(stderr(&again).contains("6 unchanged"), "{}", stderr(&again));
    let store = Store::open(&site.path("accountd.db")).unwrap();
    let n: i64 = store
        .connection()
        .query_row("SELECT count(*) FROM job_runs", [], |r| r.get(0))
        .unwrap();
    assert_eq!(n, 6);
}

#[test]
fn ingest_without_slurm_conf_says_so() {
    let site = Site::new(CONFIG);
    let o = site.run(false, &["ingest"]);
    assert_eq!(code(&o), 1);
    assert!(
        stderr(&o).contains("SLURM_CONF is not set"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn ingest_reports_a_failing_sacct() {
    let site = Site::new(CONFIG);
    let bin = site.path("bin").join("sacct");
    fs::write(&bin, "#!/bin/sh\necho 'sacct: error: Problem talking to the database: Connection refused' >&2\nexit 1\n").unwrap();
    fs::set_permissions(&bin, fs::Permissions::from_mode(0o755)).unwrap();
    let o = site.run(true, &["ingest"]);
    assert_eq!(code(&o), 1);
    assert!(stderr(&o).contains("Connection refused"), "{}", stderr(&o));
}

// ---- setup-slurm -----------------------------------------------------------------------------

const ASSOCIATIONS: &str = "\
root||||
root|root||1|
agents||root|1|gres/gpu=4
";

#[test]
fn setup_slurm_dry_run_prints_only_the_needed_commands() {
    let site = Site::new(CONFIG);
    site.fake("sacctmgr", ASSOCIATIONS);
    let o = site.run(true, &["setup-slurm", "--user", "alice", "--dry-run"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert_eq!(
        stdout(&o),
        "sacctmgr -i modify account where Name=agents Cluster=testcluster set Fairshare=40\n\
         sacctmgr -i add user alice Account=agents Cluster=testcluster\n\
         sacctmgr -i add account training Cluster=testcluster Parent=root Fairshare=30\n\
         sacctmgr -i add user alice Account=training Cluster=testcluster\n\
         sacctmgr -i add qos teamshare\n\
         sacctmgr -i modify qos where name=teamshare set PreemptMode=requeue,within GraceTime=30 PreemptExemptTime=0:05:00\n\
         sacctmgr -i modify account where name=agents,training cluster=testcluster set qos+=teamshare\n"
    );
    // Only the read-only query ran.
    let calls = site.args_of("sacctmgr");
    assert_eq!(calls.iter().filter(|a| *a == "--").count(), 1);
    assert!(calls.contains(&"show".to_string()));
}

#[test]
fn setup_slurm_applies_and_prints_each_change() {
    let site = Site::new(CONFIG);
    site.fake("sacctmgr", ASSOCIATIONS);
    let o = site.run(true, &["setup-slurm"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert_eq!(
        stdout(&o),
        "modify account agents: Fairshare 1 -> 40\n\
         add account training (parent root, Fairshare 30, GPU limit none)\n\
         QOS teamshare ready (PreemptMode within,requeue, GraceTime 30 s, PreemptExemptTime 300 s) for every team\n"
    );
    assert_eq!(
        site.args_of("sacctmgr")
            .iter()
            .filter(|a| *a == "--")
            .count(),
        // the query, 2 association changes, 3 for the QOS
        6
    );
}

#[test]
fn setup_slurm_when_everything_matches() {
    let site = Site::new(CONFIG);
    site.fake(
        "sacctmgr",
        "agents||root|40|gres/gpu=4\ntraining||root|30|\n",
    );
    let o = site.run(true, &["setup-slurm"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert!(stdout(&o).contains("already match"));
}
