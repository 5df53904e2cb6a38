//! The real `accountd` binary in temporary directories: exit codes, outputs, and the Slurm
//! commands it runs (stood in for by scripts on PATH that record their arguments).

// Test code: a scenario reads top to bottom, so the workspace's 80-line limit is not for it.
#![allow(clippy::too_many_lines)]

use std::fs;
use std::io::{BufRead as _, Read as _, Write as _};
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

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

    /// squeue answering the governor (`squeue.out`) and the runaway check (`-o %A`:
    /// `squeue.ids`, the jobs slurmctld knows).
    fn fake_squeue(&self, governor_out: &str, job_ids: &str) {
        let dir = self.dir.path().display();
        self.script(
            "squeue",
            &format!(
                "printf '%s\\n' \"$@\" >> '{dir}/squeue.args'\necho '--' >> '{dir}/squeue.args'\ncase \"$*\" in *%A*) cat '{dir}/squeue.ids' ;; *) cat '{dir}/squeue.out' ;; esac\n"
            ),
        );
        fs::write(self.path("squeue.out"), governor_out).unwrap();
        fs::write(self.path("squeue.ids"), job_ids).unwrap();
    }

    /// A stand-in for a command: `body` as a shell script.
    fn script(&self, name: &str, body: &str) {
        let bin = self.path("bin").join(name);
        fs::write(&bin, format!("#!/bin/sh\n{body}")).unwrap();
        fs::set_permissions(&bin, fs::Permissions::from_mode(0o755)).unwrap();
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
        self.command(with_slurm_conf, args).output().unwrap()
    }

    fn command(&self, with_slurm_conf: bool, args: &[&str]) -> Command {
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
            // The stand-ins above are commands: the governor reads through them, not libslurm.
            .env("TEAMSHARE_SLURM_READER", "commands")
            .current_dir(self.dir.path());
        if with_slurm_conf {
            cmd.env("SLURM_CONF", self.path("slurm.conf"));
        }
        cmd
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
1|1|testcluster|agents|alice|gpu|normal|COMPLETED|2024-05-01T00:59:00|2024-05-01T01:00:00|2024-05-01T03:00:00|02:00:00|billing=2,cpu=2,gres/gpu=2,node=1|2024-05-01T00:59:00|2880|1|billing=2,cpu=2,gres/gpu=2,node=1
2|2|testcluster|agents|alice|gpu|normal|RUNNING|2024-04-30T22:00:00|2024-04-30T23:00:00|Unknown|1-01:00:00|cpu=1,gres/gpu=1,node=1|2024-04-30T22:00:00|2880|1|cpu=1,gres/gpu=1,node=1
3|3|testcluster|training|bob|gpu|normal|COMPLETED|2024-05-01T10:00:00|2024-05-01T10:00:00|2024-05-01T10:30:00|00:30:00|cpu=8,gres/gpu=4,gres/gpu:h100=4,node=1|2024-05-01T10:00:00|2880|1|cpu=8,gres/gpu=4,gres/gpu:h100=4,node=1
4|4|testcluster|ghost|carol|gpu|normal|CANCELLED by 0|2024-05-01T12:00:00|2024-05-01T12:00:00|2024-05-01T13:00:00|01:00:00|gres/gpu=1|2024-05-01T12:00:00|2880|1|gres/gpu=1
5|5|testcluster|agents|alice|cpu|normal|COMPLETED|2024-05-01T12:00:00|2024-05-01T12:00:00|2024-05-01T13:00:00|01:00:00|cpu=4,node=1|2024-05-01T12:00:00|2880|1|cpu=4,node=1
6|6|othercluster|agents|alice|gpu|normal|COMPLETED|2024-05-01T12:00:00|2024-05-01T12:00:00|2024-05-01T13:00:00|01:00:00|gres/gpu=8|2024-05-01T12:00:00|2880|1|gres/gpu=8
";

/// The fixture's runs, and the capacity accountd run would have recorded since April: 8 GPUs,
/// 4 of them h100 (the other 4 untyped, at the default rate).
fn prepared_site() -> Site {
    let site = prepared_site_without_capacity();
    let mut store = Store::open(&site.path("accountd.db")).unwrap();
    let april = 1_711_929_600; // 2024-04-01T00:00:00Z
    let capacity = accountd::store::CapacitySample {
        ts: april,
        gpus: 8,
        by_type: [("h100".to_string(), 4)].into(),
    };
    assert!(store.record_capacity("testcluster", &capacity).unwrap());
    site
}

fn prepared_site_without_capacity() -> Site {
    let site = Site::new(CONFIG);
    let mut store = Store::open(&site.path("accountd.db")).unwrap();
    let batch = accountd::sacct::parse(SACCT_FIXTURE, &chrono::Utc);
    assert!(batch.malformed.is_empty());
    store.record_runs(&batch.runs, 1, None).unwrap();
    site
}

const PERIOD: [&str; 4] = ["--since", "2024-05-01", "--until", "2024-05-02"];

fn cells(l: &str) -> Vec<String> {
    l.split_whitespace().map(str::to_string).collect()
}

/// 2024-05-01, 24 h, capacity 8 (quotas 2 + 4: 2 GPUs unallocated), lend limits = quotas:
/// - agents holds 1 GPU all day (job 2) and 2 more in [01:00, 03:00) (job 1): 28 GPU-hours,
///   over its quota of 2 by 1 GPU for 2 h: 26 in quota, 2 borrowed; 26 of its 2 x 24 = 48
///   quota GPU-hours used: 54.2 %;
/// - training 4 h100 in [10:00, 10:30): 2 GPU-hours in quota (2 of 96: 2.1 %); ghost (no quota)
///   1 GPU for 1 h: borrowed;
/// - lent: in [01:00, 03:00) agents' 1 GPU from training's 4 idle and the pool's 2 (4:2); in
///   [12:00, 13:00) ghost's 1 from agents' 1 idle, training's 4, pool's 2 (1:4:2). training
///   4/3 + 4/7 = 40/21, agents 1/7, (pool) 2/3 + 2/7 = 20/21; the sum is 3 = borrowed.
/// - cost: capacity 4 untyped x 24 h x 10 + 4 h100 x 24 h x 70 = 960 + 6720 = 7680. Allocated:
///   agents 28 x 10, ghost 10, training 2 x 70. Idle per type, split by quota share (agents 2,
///   training 4, unallocated 2 -> (idle), each in the proportions of the capacity of the type:
///   half each): untyped 960 - 290 = 670 -> 167.5 / 335 / 167.5; h100 6720 - 140 = 6580 ->
///   1645 / 3290 / 1645.
#[test]
fn report_table() {
    let site = prepared_site();
    let o = site.run(false, &[&["report"][..], &PERIOD].concat());
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert!(stderr(&o).is_empty(), "{}", stderr(&o));
    let out = stdout(&o);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        lines[0],
        "GPU usage on testcluster from 2024-05-01 00:00:00 to 2024-05-02 00:00:00 (local time), GPU-hours and cost"
    );
    // The rules in force, with the configuration's names.
    assert_eq!(
        lines[1],
        "rules: in quota, borrowed and lent on total quotas; idle capacity cost: idle_cost_split = \"quota-share\" (by quota GPU-hours); borrowed GPU-hours: borrowed_cost_factor = 1 (1 x rate)"
    );
    assert_eq!(
        cells(lines[2]),
        [
            "TEAM",
            "JOBS",
            "QUOTA",
            "GPU-HOURS",
            "IN-QUOTA",
            "BORROWED",
            "LENT",
            "QUOTA-USED",
            "ALLOC-COST",
            "IDLE-COST",
            "TOTAL-COST",
            "(BRL)"
        ]
    );
    // agents: 2 GPUs x 2 h + 1 GPU x 24 h (running: clipped at the period's end).
    assert_eq!(
        cells(lines[3]),
        [
            "agents", "2", "2", "28.0000", "26.0000", "2.0000", "0.1429", "54.2%", "280.00",
            "1812.50", "2092.50"
        ]
    );
    assert_eq!(
        cells(lines[4]),
        ["ghost", "1", "1.0000", "0.0000", "1.0000", "0.0000", "10.00", "0.00", "10.00"]
    );
    assert_eq!(
        cells(lines[5]),
        [
            "training", "1", "4", "2.0000", "2.0000", "0.0000", "1.9048", "2.1%", "140.00",
            "3625.00", "3765.00"
        ]
    );
    assert_eq!(
        cells(lines[6]),
        ["(pool)", "0", "0.0000", "0.0000", "0.0000", "0.9524", "0.00", "0.00", "0.00"]
    );
    assert_eq!(
        cells(lines[7]),
        ["(idle)", "0", "0.0000", "0.0000", "0.0000", "0.0000", "0.00", "1812.50", "1812.50"]
    );
    assert!(lines[8].starts_with("---"));
    // The teams' 28 in-quota GPU-hours of their 48 + 96: 19.4 %.
    assert_eq!(
        cells(lines[9]),
        [
            "total", "4", "6", "31.0000", "28.0000", "3.0000", "3.0000", "19.4%", "430.00",
            "7250.00", "7680.00"
        ]
    );
    assert_eq!(
        lines[10],
        "capacity: 192.0000 GPU-hours costing 7680.00 (BRL) (recorded by accountd run)"
    );
    assert_eq!(
        lines[11],
        "capacity by GPU type: h100 96.0000 costing 6720.00, default 96.0000 costing 960.00"
    );
    assert_eq!(lines.len(), 12);
}

/// `--by-type`: each row's types on lines under it. Untyped quotas: a team's in-quota and
/// borrowed hours follow its GPU-hours of each type (agents only used untyped GPUs, training
/// only h100), what was lent follows the types of every borrowed hour (all untyped here), and
/// the quota-share weights are in the proportions of the capacity (half h100, half untyped).
#[test]
fn report_table_by_type() {
    let site = prepared_site();
    let o = site.run(false, &[&["report", "--by-type"][..], &PERIOD].concat());
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let out = stdout(&o);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(cells(lines[2])[..3], ["TEAM", "TYPE", "JOBS"]);
    let line = |team: &str, gpu_type: &str| {
        lines
            .iter()
            .map(|l| cells(l))
            .find(|c| c.len() > 2 && c[0] == team && c[1] == gpu_type)
            .unwrap_or_else(|| panic!("no {team} {gpu_type} line in\n{out}"))
    };
    assert_eq!(line("agents", "all")[..4], ["agents", "all", "2", "2"]);
    // agents' untyped GPUs: the row's figures; its idle share of the h100 capacity (1645) is
    // a line of its own.
    assert_eq!(
        line("agents", "default")[2..],
        ["2", "28.0000", "26.0000", "2.0000", "0.1429", "280.00", "167.50", "447.50"]
    );
    assert_eq!(
        line("agents", "h100")[2..],
        ["0", "0.0000", "0.0000", "0.0000", "0.0000", "0.00", "1645.00", "1645.00"]
    );
    assert_eq!(
        line("training", "h100")[2..],
        ["1", "2.0000", "2.0000", "0.0000", "0.0000", "140.00", "3290.00", "3430.00"]
    );
    assert_eq!(
        line("training", "default")[2..],
        ["0", "0.0000", "0.0000", "0.0000", "1.9048", "0.00", "335.00", "335.00"]
    );
    // The totals per type: h100 140 allocated + 6580 idle = its capacity cost 6720.
    assert_eq!(
        line("total", "h100")[2..],
        ["1", "2.0000", "2.0000", "0.0000", "0.0000", "140.00", "6580.00", "6720.00"]
    );
    assert_eq!(
        line("total", "default")[2..],
        ["3", "29.0000", "26.0000", "3.0000", "3.0000", "290.00", "670.00", "960.00"]
    );
    let o = site.run(false, &["report", "fairshare", "--by-type"]);
    assert_eq!(code(&o), 2);
    assert!(
        stderr(&o).contains("--by-type applies to `report teams` only"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn report_without_capacity_samples_estimates_it_and_says_so() {
    let site = prepared_site_without_capacity();
    let o = site.run(false, &[&["report", "teams"][..], &PERIOD].concat());
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    // Quotas 2 + 4, untyped. Most in use at once: 4 h100 (training), 3 untyped (agents in
    // [01:00, 03:00)). h100: max(0 typed quotas, 4) = 4, all beyond typed quotas, so they count
    // towards the 6 untyped quota GPUs; untyped: max(3, 6 - 4) = 3. 7 GPUs.
    assert!(
        stderr(&o).contains("no capacity samples for the period (`accountd run` records them): the capacity is estimated as 7 GPUs, per GPU type the larger of the sum of quotas and the most GPUs in use at once: h100 4, default 3"),
        "{}",
        stderr(&o)
    );
    assert!(!stderr(&o).contains("warning"), "{}", stderr(&o));
    let out = stdout(&o);
    // 7 x 24 = 168 GPU-hours; 4 x 24 x 70 + 3 x 24 x 10 = 6720 + 720 = 7440.
    assert!(
        out.contains(
            "capacity: 168.0000 GPU-hours costing 7440.00 (BRL) (estimated: no capacity recorded)"
        ),
        "{out}"
    );
    assert!(
        out.contains("estimated capacity, per GPU type the larger of the quotas and the most GPUs in use at once: h100 4 (quotas 0, most in use at once 4), default 3 (quotas 6, most in use at once 3)"),
        "{out}"
    );
    // The usage does not depend on the capacity; what was lent does: the pool is 7 - 6 = 1,
    // so in [12:00, 13:00) ghost's GPU comes from agents' 1, training's 4, the pool's 1: 1/6.
    let agents = out.lines().find(|l| l.starts_with("agents")).unwrap();
    assert_eq!(
        &cells(agents)[..7],
        ["agents", "2", "2", "28.0000", "26.0000", "2.0000", "0.1667"]
    );
}

/// Before any capacity sample, a configuration priced by GPU type only (no `default` rate) gets
/// a capacity estimate whose idle cost is not negative, and a warning for the GPUs of the
/// estimate that no rate prices.
#[test]
fn an_estimate_without_a_default_rate_is_never_a_silent_negative_idle_row() {
    let site = prepared_site_without_capacity();
    let typed_rates_only = CONFIG.replace("[gpu_types.default]\nrate_per_hour = 10.0\n", "");
    fs::write(site.path("teamshare.toml"), typed_rates_only).unwrap();
    let o = site.run(
        false,
        &[&["report", "teams", "--format", "json"][..], &PERIOD].concat(),
    );
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    // h100: 4 GPUs x 24 h x 70 = 6720, of which training used 140: idle 6580. The 3 untyped
    // GPUs of the estimate have no rate: a warning, and no cost.
    assert!(
        stderr(&o).contains("warning: 3 GPUs of the estimated capacity have no GPU type and there is no [gpu_types.default] rate"),
        "{}",
        stderr(&o)
    );
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    let rows = v.as_array().unwrap();
    let idle = rows.iter().find(|r| r["team"] == "(idle)").unwrap();
    assert!(idle["idle_cost"].as_f64().unwrap() >= 0.0, "{idle}");
    let total: f64 = rows.iter().filter_map(|r| r["total_cost"].as_f64()).sum();
    assert!((total - 6720.0).abs() < 1e-6, "{total}");
    let idle_total: f64 = rows.iter().filter_map(|r| r["idle_cost"].as_f64()).sum();
    assert!((idle_total - 6580.0).abs() < 1e-6, "{idle_total}");
}

#[test]
fn usage_beyond_the_capacity_is_warned_about() {
    // Quotas 1 + 1 and a recorded capacity of 2 GPUs, while agents holds 3 in
    // [01:00, 03:00) (6 GPU-hours against 4).
    let site = prepared_site_without_capacity();
    let small = CONFIG
        .replace("quota = 2", "quota = 1")
        .replace("quota = 4", "quota = 1");
    fs::write(site.path("teamshare.toml"), small).unwrap();
    let window = [
        "--since",
        "2024-05-01T01:00:00",
        "--until",
        "2024-05-01T03:00:00",
    ];
    // Without samples the estimate holds what was in use (3 GPUs): no warning.
    let o = site.run(false, &[&["report", "teams"][..], &window].concat());
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert!(!stderr(&o).contains("warning"), "{}", stderr(&o));
    assert!(stderr(&o).contains("estimated as 3 GPUs"), "{}", stderr(&o));
    let mut store = Store::open(&site.path("accountd.db")).unwrap();
    let capacity = accountd::store::CapacitySample {
        ts: 1_711_929_600, // 2024-04-01
        gpus: 2,
        by_type: Default::default(),
    };
    assert!(store.record_capacity("testcluster", &capacity).unwrap());
    let o = site.run(false, &[&["report", "teams"][..], &window].concat());
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert!(
        stderr(&o).contains("warning: more GPU-hours were used (6.0000) than the capacity holds (4.0000), so the idle cost is negative: the recorded capacity misses GPUs"),
        "{}",
        stderr(&o)
    );
    // Within the capacity (agents' 1 GPU alone): no warning.
    let o = site.run(
        false,
        &[
            "report",
            "teams",
            "--since",
            "2024-05-01T13:00:00",
            "--until",
            "2024-05-01T14:00:00",
        ],
    );
    assert!(!stderr(&o).contains("warning"), "{}", stderr(&o));
}

#[test]
fn report_by_day() {
    let site = prepared_site();
    let two_days = ["--since", "2024-04-30T12:00:00", "--until", "2024-05-02"];
    let o = site.run(
        false,
        &[&["report", "teams", "--by-day"][..], &two_days].concat(),
    );
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let out = stdout(&o);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        lines[0],
        "GPU usage on testcluster by day from 2024-04-30 12:00:00 to 2024-05-02 00:00:00 (local time), GPU-hours and cost"
    );
    assert!(lines[1].starts_with("rules: "), "{out}");
    assert_eq!(
        cells(lines[2])[..8],
        [
            "DATE",
            "TEAM",
            "JOBS",
            "GPU-HOURS",
            "IN-QUOTA",
            "BORROWED",
            "LENT",
            "CAPACITY"
        ]
    );
    assert_eq!(cells(lines[2])[8..], ["TOTAL-COST", "(BRL)"]);
    // 2024-04-30: only agents' running job, 1 GPU from 23:00; capacity 8 GPUs x 12 h.
    assert_eq!(
        cells(lines[3])[..8],
        [
            "2024-04-30",
            "agents",
            "1",
            "1.0000",
            "1.0000",
            "0.0000",
            "0.0000",
            "96.0000"
        ]
    );
    // 2024-05-01: the figures of the one-day report (report_table).
    let may = lines
        .iter()
        .position(|l| l.starts_with("2024-05-01"))
        .unwrap();
    assert_eq!(
        cells(lines[may])[..8],
        [
            "2024-05-01",
            "agents",
            "2",
            "28.0000",
            "26.0000",
            "2.0000",
            "0.1429",
            "192.0000"
        ]
    );

    // CSV: one header, every day's rows; the second day's rows are the one-day report's.
    let csv = stdout(
        &site.run(
            false,
            &[
                &["report", "teams", "--by-day", "--format", "csv"][..],
                &two_days,
            ]
            .concat(),
        ),
    );
    let one_day = stdout(&site.run(
        false,
        &[&["report", "teams", "--format", "csv"][..], &PERIOD].concat(),
    ));
    assert_eq!(csv.matches("team,jobs,").count(), 1, "{csv}");
    let day2: Vec<&str> = csv
        .lines()
        .filter(|l| l.contains(",2024-05-01T00:00:00Z,2024-05-02T00:00:00Z,"))
        .collect();
    assert_eq!(day2, one_day.lines().skip(1).collect::<Vec<_>>());
    assert!(
        csv.contains(",2024-04-30T12:00:00Z,2024-05-01T00:00:00Z,"),
        "{csv}"
    );

    // JSON: one array of every day's rows, each with its types inside (CSV gives each type a
    // line of its own, with `gpu_type` set).
    let json = stdout(
        &site.run(
            false,
            &[
                &["report", "teams", "--by-day", "--format", "json"][..],
                &two_days,
            ]
            .concat(),
        ),
    );
    let rows: serde_json::Value = serde_json::from_str(&json).unwrap();
    let row_lines = csv
        .lines()
        .skip(1)
        .filter(|l| l.split(',').nth(15) == Some(""))
        .count();
    assert!(row_lines < csv.lines().count() - 1, "{csv}");
    assert_eq!(rows.as_array().unwrap().len(), row_lines, "{json}");

    // By day and by type: each day's rows with their types under them.
    let o = site.run(
        false,
        &[&["report", "teams", "--by-day", "--by-type"][..], &two_days].concat(),
    );
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let out = stdout(&o);
    assert_eq!(
        cells(out.lines().nth(2).unwrap())[..3],
        ["DATE", "TEAM", "TYPE"]
    );
    let has = |want: [&str; 3]| {
        out.lines()
            .any(|l| cells(l).iter().map(String::as_str).take(3).eq(want))
    };
    assert!(has(["2024-04-30", "agents", "all"]), "{out}");
    assert!(has(["training", "h100", "1"]), "{out}");

    let o = site.run(false, &["report", "jobs", "--by-day"]);
    assert_eq!(code(&o), 2);
    assert!(
        stderr(&o).contains("--by-day applies to `report teams` only"),
        "{}",
        stderr(&o)
    );
}

const TYPED_CONFIG: &str = r#"[cluster]
name = "testcluster"
partitions = ["gpu"]
currency = "BRL"

[gpu_types.h100]
rate_per_hour = 4.0

[gpu_types.a100]
rate_per_hour = 2.0

[[team]]
name = "agents"
quota = { h100 = 2 }
weight = 1

[[team]]
name = "training"
quota = { a100 = 4 }
weight = 1

[accountd]
database = "accountd.db"
"#;

const TYPED_SACCT: &str = "\
11|11|testcluster|agents|alice|gpu|normal|COMPLETED|2024-05-01T00:00:00|2024-05-01T00:00:00|2024-05-02T00:00:00|1-00:00:00|cpu=1,gres/gpu=1,gres/gpu:h100=1|2024-05-01T00:00:00|2880|1|cpu=1,gres/gpu=1,gres/gpu:h100=1
12|12|testcluster|agents|alice|gpu|normal|COMPLETED|2024-05-01T00:00:00|2024-05-01T00:00:00|2024-05-01T12:00:00|12:00:00|cpu=1,gres/gpu=1,gres/gpu:a100=1|2024-05-01T00:00:00|2880|1|cpu=1,gres/gpu=1,gres/gpu:a100=1
13|13|testcluster|training|bob|gpu|normal|COMPLETED|2024-05-01T06:00:00|2024-05-01T06:00:00|2024-05-01T08:00:00|02:00:00|cpu=2,gres/gpu=2,gres/gpu:a100=2|2024-05-01T06:00:00|2880|1|cpu=2,gres/gpu=2,gres/gpu:a100=2
14|14|testcluster|agents|alice|debug|normal|COMPLETED|2024-05-01T00:00:00|2024-05-01T00:00:00|2024-05-01T01:00:00|01:00:00|cpu=2,gres/gpu=2,gres/gpu:h100=2|2024-05-01T00:00:00|2880|1|cpu=2,gres/gpu=2,gres/gpu:h100=2
15|15|testcluster|training|bob|gpu|normal|COMPLETED|2024-05-01T10:00:00|2024-05-01T10:00:00|2024-05-01T11:00:00|01:00:00|cpu=1,gres/gpu=1|2024-05-01T10:00:00|2880|1|cpu=1,gres/gpu=1
";

/// A typed configuration (agents holds h100 quota, training a100), 4 h100 and 6 a100, on
/// 2024-05-01: agents runs 1 h100 all day and 1 a100 for 12 h; training 2 a100 in
/// [06:00, 08:00) and 1 untyped GPU in [10:00, 11:00); agents 2 h100 for 1 h in `debug`.
///
/// - agents: h100 24 GPU-hours in quota (24 of 48: 50 %); a100 12 borrowed, lent by training
///   (idle 4, 2 in [06:00, 08:00), 4) and the a100 pool (6 - 4 = 2): training 4/6 x 6 + 2/4 x 2
///   + 4/6 x 4 = 23/3, pool 2 + 1 + 4/3 = 13/3.
/// - training's untyped GPU: under `default`, no quota and no capacity: borrowed beyond what was
///   lendable (charged to the pool), and a warning.
/// - costs at 4 and 2 per hour, by quota share: h100 capacity 384, agents 96, idle 288 to agents
///   (quota 48 GPU-hours) and the unallocated 48: 144 each; a100 capacity 288, allocated
///   agents 24 + training 8, idle 256: training 96/144 of it (512/3), (idle) 48/144 (256/3).
/// - the debug run: apart, 2 GPU-hours at 4 = 8, in no other figure.
#[test]
fn report_typed_configuration() {
    let site = Site::new(TYPED_CONFIG);
    let mut store = Store::open(&site.path("accountd.db")).unwrap();
    let batch = accountd::sacct::parse(TYPED_SACCT, &chrono::Utc);
    assert!(batch.malformed.is_empty());
    store.record_runs(&batch.runs, 1, None).unwrap();
    let capacity = accountd::store::CapacitySample {
        ts: 1_711_929_600,
        gpus: 10,
        by_type: [("h100".to_string(), 4), ("a100".to_string(), 6)].into(),
    };
    assert!(store.record_capacity("testcluster", &capacity).unwrap());
    let o = site.run(
        false,
        &[&["report", "teams", "--format", "json"][..], &PERIOD].concat(),
    );
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let err = stderr(&o);
    assert!(
        err.contains("warning: 1.0000 GPU-hours in the governed partitions were allocated without a GPU type (sacct recorded none): they are counted under `default`, where no team has a quota, so all of them are borrowed, at no cost (no default rate)"),
        "{err}"
    );
    assert!(
        err.contains("note: 2.0000 GPU-hours ran outside the governed partitions (gpu), by agents: they are reported apart, in no team's quota"),
        "{err}"
    );
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    let rows = v.as_array().unwrap();
    let row = |team: &str, kind: &str| {
        rows.iter()
            .find(|r| r["team"] == team && r["kind"] == kind)
            .unwrap_or_else(|| panic!("no {kind} row {team}: {v}"))
    };
    let f = |r: &serde_json::Value, k: &str| r[k].as_f64().unwrap();
    let of_type = |r: &serde_json::Value, t: &str| {
        r["by_type"]
            .as_array()
            .unwrap()
            .iter()
            .find(|x| x["gpu_type"] == t)
            .unwrap_or_else(|| panic!("no {t} in {r}"))
            .clone()
    };
    let close = |a: f64, b: f64| (a - b).abs() < 1e-9;
    let agents = row("agents", "team");
    assert_eq!(
        [
            f(agents, "gpu_hours"),
            f(agents, "in_quota_hours"),
            f(agents, "borrowed_hours")
        ],
        [36.0, 24.0, 12.0]
    );
    assert_eq!(f(agents, "quota_used_percent"), 50.0);
    let h100 = of_type(agents, "h100");
    assert_eq!(
        (h100["quota"].as_u64(), f(&h100, "in_quota_hours")),
        (Some(2), 24.0)
    );
    assert_eq!(f(&h100, "quota_gpu_hours"), 48.0);
    let a100 = of_type(agents, "a100");
    assert_eq!(
        (a100["quota"].as_u64(), f(&a100, "borrowed_hours")),
        (Some(0), 12.0)
    );
    assert!(close(f(agents, "total_cost"), 96.0 + 24.0 + 144.0));
    let training = row("training", "team");
    assert!(close(
        f(&of_type(training, "a100"), "lent_hours"),
        23.0 / 3.0
    ));
    let untyped = of_type(training, "default");
    assert_eq!(f(&untyped, "borrowed_hours"), 1.0);
    assert!(close(f(training, "idle_cost"), 512.0 / 3.0));
    let pool = row("(pool)", "pool");
    assert!(close(f(&of_type(pool, "a100"), "lent_hours"), 13.0 / 3.0));
    assert_eq!(f(&of_type(pool, "default"), "lent_hours"), 1.0);
    let idle = row("(idle)", "idle");
    assert!(close(f(idle, "idle_cost"), 144.0 + 256.0 / 3.0));
    let outside = row("agents", "outside");
    assert_eq!((f(outside, "gpu_hours"), f(outside, "cost")), (2.0, 8.0));
    assert!(outside["total_cost"].is_null());
    let total: f64 = rows.iter().filter_map(|r| r["total_cost"].as_f64()).sum();
    assert!(close(total, 384.0 + 288.0), "{total}");

    // The table: the rules say the split is per type; the debug run in a section of its own.
    let o = site.run(
        false,
        &[&["report", "teams", "--by-type"][..], &PERIOD].concat(),
    );
    let out = stdout(&o);
    assert!(
        out.lines()
            .nth(1)
            .unwrap()
            .starts_with("rules: in quota, borrowed and lent per GPU type;"),
        "{out}"
    );
    let line = |team: &str, t: &str| {
        out.lines()
            .map(cells)
            .find(|c| c.len() > 2 && c[0] == team && c[1] == t)
            .unwrap_or_else(|| panic!("no {team} {t} in\n{out}"))
    };
    assert_eq!(
        line("agents", "h100")[2..9],
        ["1", "2", "24.0000", "24.0000", "0.0000", "0.0000", "50.0%"]
    );
    assert!(out.contains("\nGPU usage outside the governed partitions (gpu): no team's quota, in none of the figures above\n"), "{out}");
    assert_eq!(line("agents", "all").len(), 12);
    assert!(
        out.contains("1.0000 GPU-hours were allocated without a GPU type"),
        "{out}"
    );
    assert!(
        out.contains("1.0000 GPU-hours were borrowed beyond what was lendable"),
        "{out}"
    );
    // With a default rate, the untyped GPU-hour is priced against no capacity of its own: the
    // warning says the idle cost of `default` is negative (1 GPU-hour at 1.00).
    let priced = TYPED_CONFIG.replace(
        "[gpu_types.a100]",
        "[gpu_types.default]\nrate_per_hour = 1.0\n\n[gpu_types.a100]",
    );
    fs::write(site.path("teamshare.toml"), priced).unwrap();
    let o = site.run(false, &[&["report", "teams"][..], &PERIOD].concat());
    assert!(
        stderr(&o).contains("so all of them are borrowed, priced at the default rate; as little capacity without a type was recorded, the idle cost of `default` is negative (-1.00)"),
        "{}",
        stderr(&o)
    );
    fs::write(site.path("teamshare.toml"), TYPED_CONFIG).unwrap();
    // Day by day, the same notes on stderr.
    let o = site.run(
        false,
        &[&["report", "teams", "--by-day"][..], &PERIOD].concat(),
    );
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let err = stderr(&o);
    assert!(
        err.contains("warning: 1.0000 GPU-hours in the governed partitions were allocated without a GPU type"),
        "{err}"
    );
    assert!(
        err.contains("note: 2.0000 GPU-hours ran outside the governed partitions"),
        "{err}"
    );
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
        "team,jobs,gpu_hours,quota,cost,currency,since,until,in_quota_hours,borrowed_hours,lent_hours,allocated_cost,idle_cost,total_cost,kind,gpu_type,rate_per_hour,quota_gpu_hours,quota_used_percent\n\
         training,1,2.0000,4,140.00,BRL,2024-05-01T00:00:00Z,2024-05-02T00:00:00Z,2.0000,0.0000,1.9048,140.00,3625.00,3765.00,team,,,96.0000,2.08\n\
         training,1,2.0000,,140.00,BRL,2024-05-01T00:00:00Z,2024-05-02T00:00:00Z,2.0000,0.0000,0.0000,140.00,3290.00,3430.00,team,h100,70,,\n\
         training,0,0.0000,,0.00,BRL,2024-05-01T00:00:00Z,2024-05-02T00:00:00Z,0.0000,0.0000,1.9048,0.00,335.00,335.00,team,default,10,,\n"
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
    assert_eq!(names, ["agents", "training", "(pool)", "(idle)"]);
    // agents: job 1 from 02:00 to 03:00 (2 GPU-h) + job 2 over 8.25 h (8.25 GPU-h); over its
    // quota by 1 GPU in [02:00, 03:00).
    assert_eq!(rows[0]["gpu_hours"].as_f64().unwrap(), 10.25);
    assert_eq!(rows[0]["in_quota_hours"].as_f64().unwrap(), 9.25);
    assert_eq!(rows[0]["borrowed_hours"].as_f64().unwrap(), 1.0);
    assert_eq!(rows[0]["jobs"], 2);
    assert_eq!(rows[0]["quota"], 2);
    assert_eq!(rows[0]["currency"], "BRL");
    assert_eq!(rows[0]["since"], "2024-05-01T02:00:00Z");
    assert_eq!(rows[0]["until"], "2024-05-01T10:15:00Z");
    // training: 4 h100 for 15 minutes; it lent 4 of the 6 lendable GPUs for that hour.
    assert_eq!(rows[1]["gpu_hours"].as_f64().unwrap(), 1.0);
    assert!((rows[1]["cost"].as_f64().unwrap() - 70.0).abs() < 1e-9);
    assert!((rows[1]["lent_hours"].as_f64().unwrap() - 4.0 / 6.0).abs() < 1e-12);
    assert!((rows[2]["lent_hours"].as_f64().unwrap() - 2.0 / 6.0).abs() < 1e-12);
    assert!(rows[2]["quota"].is_null());
    // The rows' total cost is the capacity's: 8.25 h x (4 x 10 + 4 x 70).
    let total: f64 = rows.iter().map(|r| r["total_cost"].as_f64().unwrap()).sum();
    assert!((total - 8.25 * 320.0).abs() < 1e-6, "{total}");
    for r in rows {
        let (a, i, t) = (
            r["allocated_cost"].as_f64().unwrap(),
            r["idle_cost"].as_f64().unwrap(),
            r["total_cost"].as_f64().unwrap(),
        );
        assert!((a + i - t).abs() < 1e-9, "{r}");
    }
}

#[test]
fn report_fairshare() {
    let site = prepared_site();
    // Half-life 7 days by default; as of 2024-05-02 00:00, usage since 2024-04-01.
    let o = site.run(
        false,
        &[
            "report",
            "fairshare",
            "--format",
            "json",
            "--since",
            "2024-04-01",
            "--until",
            "2024-05-02",
        ],
    );
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    let rows = v.as_array().unwrap();
    let names: Vec<&str> = rows.iter().map(|r| r["team"].as_str().unwrap()).collect();
    assert_eq!(names, ["agents", "ghost", "training"]);
    // Weights 40 and 30: shares 4/7 and 3/7; ghost has none, and used GPUs: factor 0.
    assert!((rows[0]["normalized_shares"].as_f64().unwrap() - 4.0 / 7.0).abs() < 1e-12);
    assert!(rows[1]["weight"].is_null());
    assert_eq!(rows[1]["fairshare_factor"].as_f64().unwrap(), 0.0);
    let usage: f64 = rows
        .iter()
        .map(|r| r["normalized_usage"].as_f64().unwrap())
        .sum();
    assert!((usage - 1.0).abs() < 1e-12);
    // agents used most (29 GPU-hours, barely decayed) against the biggest share: below 0.5.
    let agents = rows[0]["fairshare_factor"].as_f64().unwrap();
    let training = rows[2]["fairshare_factor"].as_f64().unwrap();
    assert!(agents < 0.5 && training > 0.5 && training < 1.0, "{rows:?}");
    assert_eq!(rows[0]["half_life_seconds"], 7 * 86_400);
    // Usage is cost-weighted: each GPU-hour at its type's rate (agents' untyped GPUs at the
    // default 10, training's h100 at 70), and U is each team's share of the decayed cost.
    let f = |r: &serde_json::Value, k: &str| r[k].as_f64().unwrap();
    let ratio = |r: &serde_json::Value| f(r, "decayed_cost") / f(r, "decayed_gpu_hours");
    assert!((ratio(&rows[0]) - 10.0).abs() < 1e-9, "{rows:?}");
    assert!((ratio(&rows[2]) - 70.0).abs() < 1e-9, "{rows:?}");
    let cost: f64 = rows.iter().map(|r| f(r, "decayed_cost")).sum();
    assert!((f(&rows[2], "normalized_usage") - f(&rows[2], "decayed_cost") / cost).abs() < 1e-12);
    let o = site.run(false, &["report", "fairshare", "--until", "2024-05-02"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert!(stdout(&o).contains("half-life 7d"), "{}", stdout(&o));
    assert!(
        stdout(&o)
            .lines()
            .nth(1)
            .unwrap()
            .contains("each at its GPU type's rate"),
        "{}",
        stdout(&o)
    );
    assert!(stdout(&o).lines().nth(2).unwrap().starts_with("TEAM"));
    assert!(stdout(&o).contains("DECAYED COST (BRL)"), "{}", stdout(&o));
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

// ---- run ------------------------------------------------------------------------------------

/// Two nodes: 4 untyped GPUs and 4 h100.
const SINFO_OUT: &str = "n1|gpu:4|idle\nn2|gpu:h100:4(S:0-1)|mix\n";
/// training runs 5 GPUs (its quota is 4: one borrowed).
const SQUEUE_OUT: &str = "6|training|RUNNING|64000|2024-05-01T10:00:00|2024-05-01T10:00:00|cpu=1,node=1,billing=1,gres/gpu=5|N/A|gres:gpu:5|N/A|1|1|None|1|n1|2024-05-01T10:00:00|6|N/A|N/A|*|OK|N/A|N/A|\n";

/// A site for the daemon: state and spool beside the configuration, every Slurm command faked.
fn daemon_site() -> Site {
    let config = format!(
        "{CONFIG}state_file = \"state.json\"\nsample_spool = \"spool\"\nmetrics_listen = \"127.0.0.1:0\"\n"
    );
    let site = Site::new(&config);
    site.fake("sinfo", SINFO_OUT);
    // Job 2 runs in the sacct fixture, 6 in the governor's queue: slurmctld knows both.
    site.fake_squeue(SQUEUE_OUT, "2\n6\n");
    site.fake("sacct", SACCT_FIXTURE);
    site.fake("sacctmgr", "");
    site.fake("scontrol", "");
    site.fake("scancel", "");
    // One node's spool with one sample of job 1's GPU.
    let ready = site.path("spool/n1/ready");
    fs::create_dir_all(&ready).unwrap();
    fs::write(
        ready.join("1714525200000-1-0.jsonl"),
        "{\"node\":\"n1\",\"gpu_uuid\":\"GPU-a\",\"ts_ms\":1714525200000,\"interval_ms\":10000,\"minor\":0,\"job_id_raw\":1,\"job_start\":1714525200,\"util_gpu\":50,\"util_mem\":5,\"mem_used\":1,\"mem_total\":2,\"processes\":1}\n",
    )
    .unwrap();
    site
}

fn count_rows(site: &Site, sql: &str) -> i64 {
    let conn = rusqlite::Connection::open(site.path("accountd.db")).unwrap();
    conn.query_row(sql, [], |r| r.get(0)).unwrap()
}

#[test]
fn run_once_does_every_step_once() {
    let site = daemon_site();
    let o = site.run(true, &["run", "--once"]);
    let err = stderr(&o);
    assert_eq!(code(&o), 0, "{err}");
    assert!(
        err.contains("accountd run: started: governing every 1s"),
        "{err}"
    );
    assert!(err.contains("metrics on http://127.0.0.1:"), "{err}");
    // Governor: the state is published and the limits set.
    let state = fs::read_to_string(site.path("state.json")).unwrap();
    let state: serde_json::Value = serde_json::from_str(&state).unwrap();
    assert_eq!(state["teams"]["training"]["running_gpus"], 5);
    assert!(
        site.args_of("sacctmgr")
            .iter()
            .any(|a| a.starts_with("GrpTRES=gres/gpu=")),
        "{:?}",
        site.args_of("sacctmgr")
    );
    // Ingest: the fixture's runs of this cluster.
    assert_eq!(
        count_rows(
            &site,
            "SELECT count(*) FROM job_runs WHERE cluster = 'testcluster'"
        ),
        5
    );
    // Samples collected, and removed from the spool.
    assert_eq!(count_rows(&site, "SELECT count(*) FROM gpu_samples"), 1);
    assert!(fs::read_dir(site.path("spool/n1/ready"))
        .unwrap()
        .next()
        .is_none());
    // Capacity: one row (measured twice, unchanged), with its typed part.
    assert_eq!(
        count_rows(
            &site,
            "SELECT count(*) FROM capacity_samples WHERE gpus = 8"
        ),
        1
    );
    assert_eq!(
        count_rows(
            &site,
            "SELECT gpus FROM capacity_sample_types WHERE gpu_type = 'h100'"
        ),
        4
    );
    // No governor: no squeue.
    let site = daemon_site();
    let o = site.run(true, &["run", "--once", "--no-govern", "--no-ingest"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert!(stderr(&o).contains("not governing"), "{}", stderr(&o));
    assert!(site.args_of("squeue").is_empty());
    assert!(site.args_of("sacct").is_empty());
    assert_eq!(
        count_rows(&site, "SELECT count(*) FROM capacity_samples"),
        1
    );
}

/// The daemon's log (accountd::logging): at info, what a pass did, each line with its fields
/// and the spans of its pass and of the actions on its plan; at debug, the plan's decisions
/// and the pass's durations besides.
#[test]
fn the_log_says_the_plan_at_debug_only() {
    for (level, debug) in [("info", false), ("debug", true)] {
        let site = daemon_site();
        let o = site
            .command(true, &["run", "--once"])
            .env("ACCOUNTD_LOG", level)
            .output()
            .unwrap();
        let err = stderr(&o);
        assert_eq!(code(&o), 0, "{err}");
        // The line as before, then its field, then pass 1 and the actions on its plan (with
        // --once, the pass waits for them).
        assert!(
            err.lines().any(|l| l.ends_with(
                " INFO accountd run: team training GPU limit -> gres/gpu=5 team=training pass{pass=1}:act{pass=1}"
            )),
            "{err}"
        );
        let said = |text: &str| err.lines().any(|l| l.contains(text));
        assert_eq!(said(" DEBUG accountd run: "), debug, "{err}");
        assert_eq!(
            said(" DEBUG accountd run: plan: team training GPU limit (none) -> 5: "),
            debug,
            "{err}"
        );
        assert_eq!(
            said(" DEBUG accountd run: pass: Slurm read, plan made, state published jobs=1 capacity=8 "),
            debug,
            "{err}"
        );
        assert_eq!(
            said(" DEBUG accountd run: act: the actions on the plan are done "),
            debug,
            "{err}"
        );
        assert_eq!(
            said(" DEBUG accountd run: ingest round: done ingest_ms="),
            debug,
            "{err}"
        );
    }
}

#[test]
fn run_once_reports_a_failing_step_and_does_the_others() {
    let site = daemon_site();
    let sacct = site.path("bin").join("sacct");
    fs::write(
        &sacct,
        "#!/bin/sh\necho 'sacct: error: slurmdbd is down' >&2\nexit 1\n",
    )
    .unwrap();
    let o = site.run(true, &["run", "--once"]);
    let err = stderr(&o);
    assert_eq!(code(&o), 1, "{err}");
    let failures: Vec<&str> = err.lines().filter(|l| l.contains(" failed: ")).collect();
    assert_eq!(failures.len(), 1, "{err}");
    assert!(
        failures[0].contains("accountd run: ingest failed: "),
        "{err}"
    );
    assert!(failures[0].contains("slurmdbd is down"), "{err}");
    // A timestamp first: 2024-05-01T00:00:00Z.
    assert!(failures[0].as_bytes()[19] == b'Z', "{err}");
    assert!(err.contains("1 step failed"), "{err}");
    assert!(site.path("state.json").exists());
    assert_eq!(
        count_rows(&site, "SELECT count(*) FROM capacity_samples"),
        1
    );
    assert_eq!(count_rows(&site, "SELECT count(*) FROM gpu_samples"), 1);
}

fn http_get(addr: &str, path: &str) -> String {
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out
}

#[test]
fn run_serves_metrics_until_sigterm_and_exits_0() {
    let site = daemon_site();
    let mut child = site
        .command(true, &["run", "--govern-interval", "200ms", "--no-ingest"])
        .stderr(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    let stderr_pipe = child.stderr.take().unwrap();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stderr_pipe)
            .lines()
            .map_while(Result::ok)
        {
            let _ = tx.send(line);
        }
    });
    let mut log = Vec::new();
    let addr = loop {
        let line = rx
            .recv_timeout(Duration::from_secs(30))
            .unwrap_or_else(|_| panic!("no start line: {log:?}"));
        log.push(line.clone());
        if let Some(rest) = line.split("metrics on http://").nth(1) {
            break rest.split("/metrics").next().unwrap().to_string();
        }
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    let body = loop {
        let response = http_get(&addr, "/metrics");
        assert!(response.starts_with("HTTP/1.1 200 OK"), "{response}");
        // The encoder writes labels in name order.
        if response.contains("teamshare_gpus_in_use{kind=\"borrowed\",team=\"training\"} 1") {
            break response;
        }
        assert!(
            Instant::now() < deadline,
            "no governor pass seen: {response}"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    // Header names are case-insensitive (hyper writes them in lower case).
    assert!(
        body.to_ascii_lowercase()
            .contains("content-type: text/plain; version=0.0.4"),
        "{body}"
    );
    assert!(body.contains("teamshare_capacity_gpus 8\n"), "{body}");
    assert!(
        body.contains("teamshare_quota_gpus{team=\"agents\"} 2\n"),
        "{body}"
    );
    assert!(http_get(&addr, "/").starts_with("HTTP/1.1 404 "));

    let kill = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(kill.success());
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        assert!(Instant::now() < deadline, "still running after SIGTERM");
        std::thread::sleep(Duration::from_millis(50));
    };
    while let Ok(line) = rx.recv_timeout(Duration::from_secs(5)) {
        log.push(line);
    }
    assert_eq!(status.code(), Some(0), "{log:#?}");
    assert!(log.last().unwrap().contains("stopping"), "{log:#?}");
    assert!(std::net::TcpStream::connect(&addr).is_err());
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

#[test]
fn a_sacct_that_fails_after_printing_records_leaves_nothing_stored() {
    let site = Site::new(CONFIG);
    fs::write(site.path("sacct.out"), SACCT_FIXTURE).unwrap();
    let bin = site.path("bin").join("sacct");
    fs::write(
        &bin,
        format!(
            "#!/bin/sh\ncat '{}'\necho 'sacct: error: slurmdbd went away' >&2\nexit 1\n",
            site.path("sacct.out").display()
        ),
    )
    .unwrap();
    fs::set_permissions(&bin, fs::Permissions::from_mode(0o755)).unwrap();
    let o = site.run(
        true,
        &["ingest", "--since", "2024-04-30", "--until", "2024-05-02"],
    );
    assert_eq!(code(&o), 1, "{}", stderr(&o));
    assert!(stderr(&o).contains("slurmdbd went away"), "{}", stderr(&o));
    // The records it printed before failing were not kept, and the watermark did not move.
    let store = Store::open(&site.path("accountd.db")).unwrap();
    let n: i64 = store
        .connection()
        .query_row("SELECT count(*) FROM job_runs", [], |r| r.get(0))
        .unwrap();
    assert_eq!(n, 0);
    assert_eq!(store.watermark("testcluster").unwrap(), None);
}

#[test]
fn a_line_that_is_not_utf8_is_skipped_and_the_rest_stored() {
    let site = Site::new(CONFIG);
    site.fake("sacct", "");
    let mut out = SACCT_FIXTURE.as_bytes().to_vec();
    out.extend_from_slice(b"8|8|testcluster|agents|al\xffce|gpu|normal|COMPLETED|x\n");
    fs::write(site.path("sacct.out"), out).unwrap();
    let o = site.run(
        true,
        &["ingest", "--since", "2024-04-30", "--until", "2024-05-02"],
    );
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let err = stderr(&o);
    assert!(err.contains("7 records read, 6 new"), "{err}");
    assert!(err.contains("sacct line 7: the line is not UTF-8"), "{err}");
    assert!(err.contains("al\u{fffd}ce"), "{err}");
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
         sacctmgr -i add account training Cluster=testcluster Parent=root Fairshare=30 GrpTRES=gres/gpu=4\n\
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
         add account training (parent root, Fairshare 30, GPU limit gres/gpu=4)\n\
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
        // The governor's limits: agents between its quota and ceiling, training's at its quota.
        "agents||root|40|gres/gpu=3\ntraining||root|30|gres/gpu=7\n",
    );
    let o = site.run(true, &["setup-slurm"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert!(stdout(&o).contains("already match"));
}

// ---- the daemon's threads and its configuration ---------------------------------------------

/// A running `accountd run` whose stderr lines are collected.
struct Daemon {
    child: std::process::Child,
    lines: std::sync::mpsc::Receiver<String>,
    log: Vec<String>,
}

impl Daemon {
    fn start(site: &Site, args: &[&str]) -> Daemon {
        let mut child = site
            .command(true, &[&["run"][..], args].concat())
            .stderr(Stdio::piped())
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        let (tx, lines) = std::sync::mpsc::channel::<String>();
        let pipe = child.stderr.take().unwrap();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(pipe).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        Daemon {
            child,
            lines,
            log: Vec::new(),
        }
    }

    fn drain(&mut self) {
        while let Ok(line) = self.lines.try_recv() {
            self.log.push(line);
        }
    }

    /// Wait until `cond` holds (checked every 20 ms), at most `secs`.
    fn wait_for(&mut self, secs: u64, what: &str, mut cond: impl FnMut(&[String]) -> bool) {
        let deadline = Instant::now() + Duration::from_secs(secs);
        loop {
            self.drain();
            if cond(&self.log) {
                return;
            }
            assert!(Instant::now() < deadline, "{what}: {:#?}", self.log);
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn signal(&self, name: &str) {
        let ok = Command::new("kill")
            .args([&format!("-{name}"), &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(ok.success());
    }

    /// SIGTERM, and the exit status within `secs`.
    fn stop(&mut self, secs: u64) -> std::process::ExitStatus {
        self.signal("TERM");
        let deadline = Instant::now() + Duration::from_secs(secs);
        let status = loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                break status;
            }
            assert!(
                Instant::now() < deadline,
                "still running {secs} s after SIGTERM: {:#?}",
                self.log
            );
            std::thread::sleep(Duration::from_millis(50));
        };
        while let Ok(line) = self.lines.recv_timeout(Duration::from_secs(2)) {
            self.log.push(line);
        }
        status
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        // Our own child, by its handle, when a test failed before stopping it.
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// The state file as published: (its identity, which each atomic rewrite changes; the digest).
fn published(site: &Site) -> Option<((u64, i64, i64), String)> {
    use std::os::unix::fs::MetadataExt as _;
    let path = site.path("state.json");
    let m = fs::metadata(&path).ok()?;
    let text = fs::read_to_string(&path).ok()?;
    let state: serde_json::Value = serde_json::from_str(&text).ok()?;
    Some((
        (m.ino(), m.mtime(), m.mtime_nsec()),
        state["config_digest"].as_str()?.to_string(),
    ))
}

/// How many times the state file is rewritten within `window`.
fn rewrites_within(site: &Site, window: Duration) -> usize {
    let mut seen = published(site).map(|p| p.0);
    let mut n = 0;
    let until = Instant::now() + window;
    while Instant::now() < until {
        let now = published(site).map(|p| p.0);
        if now.is_some() && now != seen {
            n += 1;
            seen = now;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    n
}

#[test]
fn governance_keeps_its_cadence_while_sacct_hangs() {
    let site = daemon_site();
    let dir = site.dir.path().display().to_string();
    site.script(
        "sacct",
        &format!("touch '{dir}/sacct.started'\nsleep 30\ntouch '{dir}/sacct.finished'\n"),
    );
    let mut daemon = Daemon::start(&site, &["--govern-interval", "200ms"]);
    daemon.wait_for(30, "sacct never started", |_| {
        site.path("sacct.started").exists()
    });
    // The ingest thread is stuck in sacct; the governor publishes every 200 ms all the same.
    let rewrites = rewrites_within(&site, Duration::from_secs(3));
    assert!(
        !site.path("sacct.finished").exists(),
        "sacct finished: the test proves nothing"
    );
    assert!(
        rewrites >= 5,
        "the state was rewritten {rewrites} times in 3 s while sacct hung: {:#?}",
        daemon.log
    );
    // A stop does not wait for sacct's timeout: the ingest step is left after the grace.
    let status = daemon.stop(20);
    assert_eq!(status.code(), Some(0), "{:#?}", daemon.log);
    let last = daemon.log.last().unwrap();
    assert!(last.contains("stopping"), "{:#?}", daemon.log);
    assert!(
        last.contains("did not finish within 5s"),
        "{:#?}",
        daemon.log
    );
    assert!(!site.path("sacct.finished").exists());
}

#[test]
fn run_follows_teamshare_toml_edits_and_sighup() {
    let site = daemon_site();
    let toml = site.path("teamshare.toml");
    let original = fs::read_to_string(&toml).unwrap();
    let digest = teamshare_config::digest;
    // Same length, so that one edit can be hidden from the poll (below).
    let valid = original.replace("weight = 40", "weight = 41");
    let invalid = original.replace("weight = 40", "weight = -1");
    let hidden = original.replace("weight = 40", "weight = 42");
    assert!(valid.len() == invalid.len() && invalid.len() == hidden.len());

    let mut daemon = Daemon::start(&site, &["--govern-interval", "200ms", "--no-ingest"]);
    daemon.wait_for(30, "no state with the first digest", |_| {
        published(&site).is_some_and(|p| p.1 == digest(&original))
    });
    assert!(
        daemon.log[0].contains(&format!("(digest {})", digest(&original))),
        "{:#?}",
        daemon.log
    );

    // Edits land whole (as an editor's rename does), so that no poll sees half a file.
    let replace = |text: &str| {
        let tmp = site.path("teamshare.toml.new");
        fs::write(&tmp, text).unwrap();
        fs::rename(&tmp, &toml).unwrap();
    };
    // A valid edit: in force within a poll, for the governor too.
    replace(&valid);
    daemon.wait_for(10, "the valid edit was not followed", |log| {
        log.iter().any(|l| l.contains("reloaded"))
            && published(&site).is_some_and(|p| p.1 == digest(&valid))
    });
    let reloaded: Vec<&String> = daemon
        .log
        .iter()
        .filter(|l| l.contains("reloaded"))
        .collect();
    assert!(
        reloaded[0].contains(&format!(
            "digest {} -> {}",
            digest(&original),
            digest(&valid)
        )),
        "{reloaded:?}"
    );

    // An invalid edit: said once, on one line, and the last good configuration stays.
    replace(&invalid);
    daemon.wait_for(10, "the invalid edit was not said", |log| {
        log.iter().any(|l| l.contains("not reloaded"))
    });
    assert!(rewrites_within(&site, Duration::from_millis(4500)) >= 5);
    assert_eq!(published(&site).unwrap().1, digest(&valid));
    daemon.drain();
    let rejected: Vec<&String> = daemon
        .log
        .iter()
        .filter(|l| l.contains("not reloaded"))
        .collect();
    assert_eq!(rejected.len(), 1, "said once per change: {:#?}", daemon.log);
    assert!(rejected[0].contains("teamshare.toml:"), "{}", rejected[0]);
    assert!(rejected[0].contains(": error: "), "{}", rejected[0]);
    assert!(
        rejected[0].contains(&format!("(digest {})", digest(&valid))),
        "{}",
        rejected[0]
    );
    assert!(
        !daemon
            .log
            .iter()
            .any(|l| l.trim_start().starts_with("hint:")),
        "{:#?}",
        daemon.log
    );

    // An edit the poll cannot see (same size, same inode, the time put back): SIGHUP reads it.
    let before = fs::metadata(&toml).unwrap().modified().unwrap();
    {
        let mut f = fs::OpenOptions::new().write(true).open(&toml).unwrap();
        f.write_all(hidden.as_bytes()).unwrap();
        f.set_modified(before).unwrap();
    }
    std::thread::sleep(Duration::from_millis(2500));
    assert_eq!(published(&site).unwrap().1, digest(&valid));
    daemon.signal("HUP");
    daemon.wait_for(10, "SIGHUP did not reload", |log| {
        log.iter().any(|l| l.contains("reloaded on SIGHUP"))
            && published(&site).is_some_and(|p| p.1 == digest(&hidden))
    });

    let status = daemon.stop(20);
    assert_eq!(status.code(), Some(0), "{:#?}", daemon.log);
}

// ---- runaway runs ---------------------------------------------------------------------------

#[test]
fn ingest_clips_a_run_slurmctld_lost_and_the_report_says_so() {
    let site = Site::new(CONFIG);
    site.fake("sacct", SACCT_FIXTURE);
    // Job 2 is RUNNING in the fixture; slurmctld knows only others.
    site.fake_squeue("", "1\n3\n99\n");
    let o = site.run(
        true,
        &["ingest", "--since", "2024-04-30", "--until", "2024-05-02"],
    );
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let err = stderr(&o);
    assert!(
        err.contains(
            "warning: job 2 of agents is RUNNING in sacct but slurmctld no longer knows it"
        ),
        "{err}"
    );
    assert!(err.contains("sacctmgr show runaway"), "{err}");
    let runaway: Vec<String> = site
        .args_of("squeue")
        .into_iter()
        .take_while(|a| a != "--")
        .collect();
    assert_eq!(runaway, ["-h", "-a", "-t", "all", "-o", "%A"]);
    assert_eq!(
        count_rows(
            &site,
            "SELECT count(*) FROM job_runs WHERE runaway AND job_id_raw = 2 AND end_time IS NOT NULL"
        ),
        1
    );
    // The report says so, on stderr, whatever the format.
    let o = site.run(
        false,
        &[&["report", "--format", "csv", "--since", "2024-04-30"][..]].concat(),
    );
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert!(
        stderr(&o).contains("note: 1 runaway run was clipped (job 2)"),
        "{}",
        stderr(&o)
    );
    assert!(stderr(&o).contains("`sacctmgr show runaway`"));
    assert!(!stdout(&o).contains("runaway"));
    // A squeue that fails leaves the ingest done, and says why.
    site.script(
        "squeue",
        "echo 'squeue: error: slurmctld down' >&2\nexit 1\n",
    );
    let o = site.run(
        true,
        &["ingest", "--since", "2024-04-30", "--until", "2024-05-02"],
    );
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert!(
        stderr(&o).contains("cannot tell runaway runs"),
        "{}",
        stderr(&o)
    );
}

// ---- stdout closed early ----------------------------------------------------------------------

#[test]
fn a_reader_that_goes_away_ends_the_command_quietly() {
    let site = prepared_site();
    // A year day by day: far more than a pipe holds (64 KiB), so the report meets the closed
    // pipe mid-way.
    let mut child = site
        .command(
            false,
            &[
                "report",
                "teams",
                "--by-day",
                "--since",
                "2024-01-01",
                "--until",
                "2025-01-01",
            ],
        )
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = String::new();
    {
        let mut reader = std::io::BufReader::new(child.stdout.take().unwrap());
        reader.read_line(&mut first).unwrap();
    } // the pipe is closed here, as `| head -1` does
    assert!(first.starts_with("GPU usage on testcluster"), "{first}");
    let o = child.wait_with_output().unwrap();
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert!(!stderr(&o).contains("panicked"), "{}", stderr(&o));
    assert!(!stderr(&o).contains("Broken pipe"), "{}", stderr(&o));

    // Commands that print little: the pipe is closed before they write at all.
    site.fake("sacctmgr", ASSOCIATIONS);
    for args in [
        &["check-config", "--capacity", "8"][..],
        &["setup-slurm", "--dry-run"][..],
        &["report", "fairshare"][..],
    ] {
        let mut child = site
            .command(true, args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        drop(child.stdout.take());
        let o = child.wait_with_output().unwrap();
        assert_eq!(code(&o), 0, "{args:?}: {}", stderr(&o));
        assert!(!stderr(&o).contains("panicked"), "{args:?}: {}", stderr(&o));
    }
}

#[test]
fn squeue_lines_the_governor_cannot_read_are_counted_and_said_once() {
    let site = daemon_site();
    site.fake_squeue(
        &format!("{SQUEUE_OUT}77|agents|RUNNING|not-a-priority|x\n"),
        "2\n6\n77\n",
    );
    let mut daemon = Daemon::start(&site, &["--govern-interval", "200ms", "--no-ingest"]);
    daemon.wait_for(30, "no metrics address", |log| {
        log.iter().any(|l| l.contains("metrics on http://"))
    });
    let addr = daemon
        .log
        .iter()
        .find_map(|l| l.split("metrics on http://").nth(1))
        .and_then(|rest| rest.split("/metrics").next())
        .unwrap()
        .to_string();
    // Several passes, each meeting the line: counted at each, said once.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let body = http_get(&addr, "/metrics");
        let n: f64 = body
            .lines()
            .find_map(|l| l.strip_prefix("teamshare_governor_unreadable_jobs_total "))
            .unwrap_or_else(|| panic!("{body}"))
            .parse()
            .unwrap();
        if n >= 3.0 {
            assert!(body.contains("# TYPE teamshare_governor_unreadable_jobs_total counter"));
            break;
        }
        assert!(Instant::now() < deadline, "{body}");
        std::thread::sleep(Duration::from_millis(100));
    }
    daemon.drain();
    let said: Vec<&String> = daemon
        .log
        .iter()
        .filter(|l| l.contains("cannot read squeue line"))
        .collect();
    assert_eq!(said.len(), 1, "{:#?}", daemon.log);
    assert!(said[0].contains("not-a-priority"), "{}", said[0]);
    // The readable job is still governed.
    let state = fs::read_to_string(site.path("state.json")).unwrap();
    let state: serde_json::Value = serde_json::from_str(&state).unwrap();
    assert_eq!(state["teams"]["training"]["running_gpus"], 5);
    assert_eq!(daemon.stop(20).code(), Some(0));
}

// ---- status ---------------------------------------------------------------------------------

#[test]
fn status_reads_slurm_as_the_governor_does_and_says_what_it_lacks() {
    let site = daemon_site();
    // Beside training's 5 GPUs (1 borrowed), an agents job waits for a dependency.
    let pending = "7|agents|PENDING|64000|2024-05-01T10:00:00|N/A|N/A|N/A|gres:gpu:1|N/A|1|1|Dependency|1||N/A|7|N/A|N/A|*|OK|N/A|N/A|\n";
    fs::write(site.path("squeue.out"), format!("{SQUEUE_OUT}{pending}")).unwrap();

    // No governor pass yet: no state, said, and everything Slurm tells still shown.
    let o = site.run(true, &["status", "--format", "json"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(
        (v["capacity"].as_u64(), v["in_use"].as_u64()),
        (Some(8), Some(5))
    );
    assert_eq!(v["state"]["current"], false);
    let problem = v["state"]["problem"].as_str().unwrap();
    assert!(
        problem.starts_with("not published: no such file"),
        "{problem}"
    );
    let training = &v["teams"][1];
    assert_eq!(training["team"], "training");
    assert_eq!(
        (training["in_quota"].as_u64(), training["borrowed"].as_u64()),
        (Some(4), Some(1))
    );
    assert!(training["may_hold"].is_null());
    assert_eq!(
        v["teams"][0]["waiting_reasons"][0]["reason"],
        "Slurm: Dependency"
    );

    // After a pass: the limits it set. training borrows 1 GPU of the idle 4 (agents' 2 and
    // the 2 no quota holds): each lends half of it.
    let o = site.run(true, &["govern", "--once"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let o = site.run(true, &["status"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let text = stdout(&o);
    assert!(text.contains(", current (stale after 30 s)\n"), "{text}");
    let line = |first: &str| {
        text.lines()
            .map(cells)
            .find(|c| c[0] == first)
            .unwrap_or_else(|| panic!("no {first} line in {text}"))
    };
    assert_eq!(
        line("training"),
        ["training", "4", "5", "4", "1", "5", "0", "0", "0"]
    );
    assert_eq!(
        line("agents"),
        ["agents", "2", "0", "0", "0", "2", "0.5", "1", "1"]
    );
    assert_eq!(
        line("(pool)"),
        ["(pool)", "2", "-", "-", "-", "-", "0.5", "-", "-"]
    );

    // One team; an unknown team is a usage error, before Slurm is asked anything.
    let o = site.run(true, &["status", "--team", "agents", "--format", "json"]);
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v["teams"].as_array().unwrap().len(), 1);
    let calls = site.args_of("squeue").len();
    let o = site.run(true, &["status", "--team", "nosuch"]);
    assert_eq!(code(&o), 2);
    assert!(
        stderr(&o).contains(
            "--team nosuch: no such team in the configuration (its teams: agents, training)"
        ),
        "{}",
        stderr(&o)
    );
    assert_eq!(site.args_of("squeue").len(), calls);

    // Slurm that cannot be read is a runtime error.
    site.script(
        "squeue",
        "echo 'squeue: error: slurmctld down' >&2\nexit 1\n",
    );
    let o = site.run(true, &["status"]);
    assert_eq!(code(&o), 1);
    assert!(
        stderr(&o).contains("cannot read Slurm's jobs and nodes"),
        "{}",
        stderr(&o)
    );
}
