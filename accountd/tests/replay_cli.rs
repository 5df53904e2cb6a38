//! `accountd replay` end to end on a small SWF trace: calibration that fits and one that does
//! not (exit 3), the capacity curve, the same bytes for the same input, and "no samples" for
//! idle-first's saving; on a small database with GPU samples, that saving (issue 29).

// Test code: a scenario reads top to bottom, so the workspace's 80-line limit is not for it.
#![allow(clippy::too_many_lines)]

use std::fs;
use std::path::Path;
use std::process::{Command, Output};

const BIN: &str = env!("CARGO_BIN_EXE_accountd");

const CONFIG: &str = r#"[cluster]
name = "replaytest"
partitions = ["gpu"]
idle_sharing = "fifo"
currency = "USD"

[gpu_types.default]
rate_per_hour = 2.0

[[team]]
name = "agents"
quota = 4

[[team]]
name = "training"
quota = 4

[governance]
reclaim_grace = "0s"
min_runtime_before_reclaim = "0s"
"#;

const TEAM_MAP: &str = "user 1 = agents\nuser 2 = training\ngpus_per_node = 4\n";

/// An SWF line: job, submit, wait, run, GPUs, user (requested time = 2 x run).
fn job(n: u32, submit: i64, wait: i64, run: i64, gpus: u32, user: u32) -> String {
    format!(
        "{n} {submit} {wait} {run} {gpus} -1 -1 {gpus} {} -1 1 {user} 1 -1 1 -1 -1 -1\n",
        2 * run
    )
}

/// 8 GPUs (2 nodes of 4). agents runs 4 + 4 GPUs at 0 (borrowing training's idle quota);
/// training's 4-GPU job at 100 reclaims, and what was observed is what the shared settings do:
/// every job starts as it is submitted (wait 0). `late` makes the history disagree: training's
/// job is recorded as having waited an hour.
fn swf(late: bool) -> String {
    let mut s = String::from("; UnixStartTime: 1735689600\n; MaxProcs: 8\n");
    s += &job(1, 0, 0, 600, 4, 1);
    s += &job(2, 0, 0, 600, 4, 1);
    s += &job(3, 100, if late { 3600 } else { 0 }, 300, 4, 2);
    s += &job(4, 5000, 0, 60, 1, 2);
    s
}

fn run(dir: &Path, args: &[&str]) -> Output {
    Command::new(BIN)
        .arg("--config")
        .arg(dir.join("teamshare.toml"))
        .arg("replay")
        .arg("--swf")
        .arg(dir.join("trace.swf"))
        .arg("--team-map")
        .arg(dir.join("team-map.txt"))
        .args(args)
        .output()
        .expect("accountd runs")
}

fn setup(late: bool) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    fs::write(dir.path().join("teamshare.toml"), CONFIG).unwrap();
    fs::write(dir.path().join("team-map.txt"), TEAM_MAP).unwrap();
    fs::write(dir.path().join("trace.swf"), swf(late)).unwrap();
    dir
}

fn text(out: &Output) -> String {
    format!(
        "exit {:?}\nstdout:\n{}\nstderr:\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// The row of `team` in column `col` of a replay's JSON.
fn row_of(json: &serde_json::Value, col: usize, team: &str) -> serde_json::Value {
    json["columns"][col]["figures"]["rows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["team"] == team)
        .cloned()
        .unwrap()
}

#[test]
fn the_settings_that_made_the_history_fit_it_and_the_what_ifs_follow() {
    let dir = setup(false);
    let out = run(dir.path(), &["--format", "json"]);
    assert!(out.status.success(), "{}", text(&out));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["calibration"]["fits"], true, "{}", text(&out));
    let names: Vec<&str> = json["columns"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["candidate"].as_str().unwrap())
        .collect();
    // The baseline is the model of the settings the history ran under (the configuration),
    // the observed history beside it as the calibration, never the yardstick.
    assert_eq!(names, ["teamshare.toml", "as-today", "siloed"]);
    assert_eq!(json["columns"][1]["worse_off"].as_array().unwrap().len(), 0);
    // Siloed, agents' second job waits for its first (600 s); shared, it borrowed and was
    // reclaimed at 100 by training: one preemption, 100 s x 4 GPUs lost.
    let row = |col: usize, team: &str| row_of(&json, col, team);
    assert_eq!(row(2, "agents")["wait"]["p95_secs"], 600);
    assert_eq!(row(0, "agents")["preemptions"], 1);
    let lost = row(0, "agents")["lost_gpu_hours"].as_f64().unwrap();
    assert!((lost - 400.0 / 3600.0).abs() < 1e-9, "{lost}");
}

#[test]
fn a_history_the_model_cannot_reproduce_exits_3_and_says_where() {
    let dir = setup(true);
    let out = run(dir.path(), &[]);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("training"), "{}", text(&out));
    assert!(
        !stdout.contains("siloed"),
        "no what-if is printed when the model does not fit\n{}",
        text(&out)
    );
    // --skip-calibration prints them anyway.
    let out = run(dir.path(), &["--skip-calibration"]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(String::from_utf8_lossy(&out.stdout).contains("siloed"));
}

#[test]
fn the_capacity_curve_replays_each_step_and_the_output_is_the_same_every_time() {
    let dir = setup(false);
    let args = [
        "--capacity-curve",
        "1",
        "--curve-step",
        "4",
        "--format",
        "json",
    ];
    let first = run(dir.path(), &args);
    assert!(first.status.success(), "{}", text(&first));
    let json: serde_json::Value = serde_json::from_slice(&first.stdout).unwrap();
    let points = json["curve"]["points"].as_array().expect("curve points");
    let gpus: Vec<u64> = points.iter().map(|p| p["gpus"].as_u64().unwrap()).collect();
    // siloed and teamshare.toml, at 8 GPUs and at 4.
    assert_eq!(gpus, [8, 8, 4, 4], "{}", text(&first));
    // At 4 GPUs the quotas (4 + 4) do not fit: each is scaled to 2, and the point says so.
    let quotas: Vec<&str> = points
        .iter()
        .map(|p| p["quotas"].as_str().unwrap())
        .collect();
    assert_eq!(
        quotas,
        [
            "as configured",
            "as configured",
            "scaled to 4 of 8 GPUs",
            "scaled to 4 of 8 GPUs"
        ]
    );
    // Kept as written, those points are no valid configuration: not replayed, and listed.
    let mut keep = args.to_vec();
    keep.extend(["--curve-quotas", "keep"]);
    let out = run(dir.path(), &keep);
    assert!(out.status.success(), "{}", text(&out));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let gpus: Vec<u64> = json["curve"]["points"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["gpus"].as_u64().unwrap())
        .collect();
    assert_eq!(gpus, [8, 8], "{}", text(&out));
    let skipped = json["curve"]["skipped"].as_array().unwrap();
    assert_eq!(skipped.len(), 2, "{}", text(&out));
    assert!(
        skipped[0]["reason"]
            .as_str()
            .unwrap()
            .starts_with("the sum of quotas (8 GPUs) is above the governed capacity (4 GPUs)"),
        "{}",
        text(&out)
    );
    let again = run(dir.path(), &args);
    assert_eq!(
        first.stdout, again.stdout,
        "the same input gives the same output"
    );
    // The runs side by side or one after the other: the same figures in the same places.
    for threads in ["1", "3"] {
        let mut with = args.to_vec();
        with.extend(["--threads", threads]);
        let out = run(dir.path(), &with);
        assert!(out.status.success(), "{}", text(&out));
        assert_eq!(
            first.stdout, out.stdout,
            "--threads {threads} changes the output"
        );
    }
    for format in ["table", "csv", "html"] {
        let a = run(dir.path(), &["--format", format]);
        let b = run(dir.path(), &["--format", format]);
        assert!(a.status.success(), "{}", text(&a));
        assert_eq!(a.stdout, b.stdout, "{format} differs between two runs");
    }
}

#[test]
fn a_team_map_naming_teams_the_configuration_lacks_is_refused_with_their_names() {
    let dir = setup(false);
    // User 2's jobs go to "trainng" (a typo) and user 3's to "ops": neither is a team.
    fs::write(
        dir.path().join("team-map.txt"),
        "user 1 = agents\nuser 2 = trainng\ndefault = ops\ngpus_per_node = 4\n",
    )
    .unwrap();
    let mut trace = swf(false);
    trace += &job(5, 6000, 0, 60, 1, 3);
    fs::write(dir.path().join("trace.swf"), trace).unwrap();
    let out = run(dir.path(), &[]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("2 teams") && stderr.contains("ops, trainng"),
        "{}",
        text(&out)
    );
    assert!(out.stdout.is_empty(), "{}", text(&out));
    // A candidate file without one of the map's teams is refused the same way, by name.
    fs::write(
        dir.path().join("team-map.txt"),
        "user 1 = agents\nuser 2 = training\ngpus_per_node = 4\n",
    )
    .unwrap();
    let narrow = CONFIG.replace("name = \"training\"", "name = \"research\"");
    fs::write(dir.path().join("narrow.toml"), narrow).unwrap();
    let narrow_path = dir.path().join("narrow.toml");
    let out = run(
        dir.path(),
        &[
            "--candidate",
            narrow_path.to_str().unwrap(),
            "--skip-calibration",
        ],
    );
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("narrow.toml") && stderr.contains(": training"),
        "{}",
        text(&out)
    );
}

const FAMILY: &str = "[cluster]\nname = \"c\"\npartitions = [\"gpu\"]\nidle_sharing = \"fifo\"\n\
    [gpu_types.a100]\nrate_per_hour = 2.8\n\
    [gpu_types.\"1g.10gb\"]\nslices_of = \"a100\"\ngpus = \"1/7\"\n\
    [[team]]\nname = \"dev\"\nquota = { a100 = 1 }\nborrow_limit = { a100 = 1 }\n\
    [[team]]\nname = \"serve\"\nquota = { a100 = 1 }\n\
    [governance]\nreclaim_grace = \"0s\"\nmin_runtime_before_reclaim = \"0s\"\n";

/// Two A100 cut into 14 `1g.10gb` slices on 2024-05-01: dev runs 8 slices for 2 hours from
/// midnight, serve 7 for an hour from 01:00.
fn database_with_slices(path: &Path) {
    use accountd::store::test_support::{capacity, run};
    const T: i64 = 1_714_521_600;
    const H: i64 = 3600;
    let mut store = accountd::store::Store::open(path).unwrap();
    let slice = |job: u32, team: &str, start: i64, hours: i64| {
        let mut r = run(job, team, start, Some(start + hours * H), 1);
        r.gpus_by_type.insert("1g.10gb".into(), 1);
        r.alloc_tres = "cpu=1,gres/gpu=1,gres/gpu:1g.10gb=1,node=1".into();
        r
    };
    let mut runs: Vec<_> = (1..=8).map(|j| slice(j, "dev", T, 2)).collect();
    runs.extend((9..=15).map(|j| slice(j, "serve", T + H, 1)));
    store.record_runs(&runs, T + 10 * H, None).unwrap();
    store
        .record_capacity("c", &capacity(T - 100, 14, &[("1g.10gb", 14)]))
        .unwrap();
}

/// Issue 30: a configuration counting the A100 family in GPU-equivalents is replayed, its
/// GPU-hours in equivalents (a `1g.10gb` hour is 1/7 of an A100's). One that governs shards
/// is refused (exit 2): a shard shares its GPU with whole-GPU jobs, which replay cannot model.
#[test]
fn a_gpu_family_is_replayed_in_gpu_equivalents_and_shards_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let toml = dir.path().join("teamshare.toml");
    fs::write(&toml, FAMILY).unwrap();
    database_with_slices(&dir.path().join("accountd.db"));
    let args = ["--candidate", "siloed", "--format", "json"];
    let out = replay_db(dir.path(), &args);
    assert!(out.status.success(), "{}", text(&out));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    // Siloed, dev's 8th slice waits for one of its seven to end (at 02:00): nothing is
    // preempted, and each team ran what it asked: 8 x 2 h / 7 and 7 x 1 h / 7.
    let dev = row_of(&json, 0, "dev");
    let serve = row_of(&json, 0, "serve");
    let close = |v: &serde_json::Value, want: f64| (v.as_f64().unwrap() - want).abs() < 1e-6;
    assert!(close(&dev["allocated_gpu_hours"], 16.0 / 7.0), "{dev}");
    assert!(close(&serve["allocated_gpu_hours"], 1.0), "{serve}");
    // Per type too, each in GPU-equivalents: here all slices.
    assert!(
        close(&dev["allocated_by_type"]["1g.10gb"], 16.0 / 7.0),
        "{dev}"
    );
    // Each holds an A100's worth for the 24 hours, the cluster two.
    assert!(close(&dev["quota_gpu_hours"], 24.0), "{dev}");
    assert!(
        close(&json["columns"][0]["figures"]["capacity_gpu_hours"], 48.0),
        "{json}"
    );
    assert_eq!(dev["wait"]["p95_secs"], 7200, "{dev}");
    // Its 8th slice waited 2 hours: 2/7 of a GPU-hour queued.
    assert!(close(&dev["queued_gpu_hours"], 2.0 / 7.0), "{dev}");
    // Under the configuration dev's 8th slice borrows at once.
    let toml_arg = toml.to_str().unwrap();
    let out = replay_db(dir.path(), &["--candidate", toml_arg, "--format", "json"]);
    assert!(out.status.success(), "{}", text(&out));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let dev = row_of(&json, 0, "dev");
    assert_eq!(dev["wait"]["p95_secs"], 0, "{dev}");
    assert!(dev["borrowed_gpu_hours"].as_f64().unwrap() > 0.0, "{dev}");
    // The text says what its GPU-hours are. The capacity curve takes 7 slices away: an A100's
    // worth is left, so the two quotas of an A100's worth are scaled to one between them.
    let curve = ["--capacity-curve", "2", "--curve-step", "7"];
    let out = replay_db(
        dir.path(),
        &[&["--candidate", toml_arg], &curve[..]].concat(),
    );
    assert!(
        String::from_utf8_lossy(&out.stdout).contains(
            "note: GPU-hours are GPU-equivalents: a slice's hour counts its size (1g.10gb 1/7 of a100)"
        ),
        "{}",
        text(&out)
    );
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("  1g.10gb GPU-eq-h"),
        "{}",
        text(&out)
    );
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("scaled to 1 of 2 GPUs"),
        "{}",
        text(&out)
    );
    // Shards are refused with the reason.
    let shards = format!("{FAMILY}[gpu_types.shard]\nslices_of = \"a100\"\ngpus = \"1/4\"\n");
    fs::write(&toml, shards).unwrap();
    let out = replay_db(dir.path(), &[]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("governs shards of a100") && stderr.contains("replay does not model"),
        "{}",
        text(&out)
    );
}

#[test]
fn an_unknown_wait_is_left_out_of_the_waits_and_its_run_still_counts() {
    let dir = setup(false);
    // Job 3 (training, 4 GPUs, 300 s) with a wait of -1: the history does not say when it
    // started. It is not "never started": its run counts, its wait is in no figure.
    let trace = swf(false).replace(&job(3, 100, 0, 300, 4, 2), &job(3, 100, -1, 300, 4, 2));
    assert!(trace.contains("3 100 -1 300"), "{trace}");
    fs::write(dir.path().join("trace.swf"), trace).unwrap();
    let out = run(dir.path(), &["--format", "json"]);
    assert!(out.status.success(), "{}", text(&out));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    // Calibration compares like with like: job 3 is out of both sides, so it fits.
    assert_eq!(json["calibration"]["fits"], true, "{}", text(&out));
    let training = row_of(&json, 1, "training");
    // As today: job 4's wait (0 s) alone; job 3 counted as unknown.
    assert_eq!(training["wait"]["jobs"], 1, "{training}");
    assert_eq!(training["wait"]["censored"], 0, "{training}");
    assert_eq!(training["wait"]["p95_secs"], 0, "{training}");
    assert_eq!(training["wait_unknown"], 1, "{training}");
    // GPU-hours: job 3's 4 GPUs x 300 s + job 4's 1 GPU x 60 s = 1,260 GPU-s = 0.35 GPU-h.
    let hours = training["allocated_gpu_hours"].as_f64().unwrap();
    assert!((hours - 0.35).abs() < 1e-9, "{hours}");
    let notes = json["notes"].to_string();
    assert!(notes.contains("1 jobs have no recorded wait"), "{notes}");
}

#[test]
fn a_site_coming_from_plain_slurm_is_compared_with_plain_slurm_simulated() {
    let dir = setup(false);
    let out = run(
        dir.path(),
        &[
            "--current",
            "none",
            "--skip-calibration",
            "--format",
            "json",
        ],
    );
    assert!(out.status.success(), "{}", text(&out));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let names: Vec<&str> = json["columns"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["candidate"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        ["plain-slurm", "as-today", "siloed", "teamshare.toml"]
    );
    let row = |col: usize, team: &str| row_of(&json, col, team);
    // One pool, first come first served: agents' two 4-GPU jobs take all 8 GPUs at 0 and
    // run their 600 s; training's job, submitted at 100, waits for them (500 s). Nothing is
    // preempted and nothing refused.
    assert_eq!(row(0, "agents")["wait"]["p95_secs"], 0);
    assert_eq!(row(0, "training")["wait"]["p95_secs"], 500);
    assert_eq!(row(0, "agents")["preemptions"], 0);
    assert_eq!(row(0, "agents")["rejected"], 0);
    // Under teamshare training's job reclaims its quota: agents is preempted once.
    assert_eq!(row(3, "agents")["preemptions"], 1);
    assert_eq!(row(3, "training")["wait"]["p95_secs"], 0);
}

#[test]
fn an_swf_history_has_no_samples_and_says_so_instead_of_a_saving() {
    let dir = setup(false);
    let out = run(dir.path(), &[]);
    assert!(out.status.success(), "{}", text(&out));
    let table = String::from_utf8_lossy(&out.stdout);
    let line = table
        .lines()
        .find(|l| l.starts_with("idle-first reclaim under teamshare.toml: no samples (SWF file"))
        .unwrap_or_else(|| panic!("{}", text(&out)));
    assert!(
        line.ends_with("the GPU-hours it would have saved cannot be computed"),
        "{line}"
    );
    assert!(!table.contains("lost work saved"), "{table}");
    let json = run(dir.path(), &["--format", "json"]);
    let json: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(json["idle_first"]["status"], "no_samples");
    let csv = run(dir.path(), &["--format", "csv"]);
    let csv = String::from_utf8_lossy(&csv.stdout);
    assert!(
        csv.lines().any(|l| l.starts_with("teamshare.toml,agents,")
            && l.ends_with(",no samples,no samples,no samples")),
        "{csv}"
    );
}

/// ops (no quota) borrows two jobs of 2 GPUs on a 4-GPU node: job 1 from T, idle (0 %) for
/// its 4 hours; job 2 from T + 30 min, busy (90 %) for 2 hours. vision's job 3 (quota 4) at
/// T + 1 h 30 reclaims 2 GPUs.
fn database_with_samples(path: &Path) {
    use accountd::store::test_support::{capacity, run, sample};
    const T: i64 = 1_714_521_600;
    const H: i64 = 3600;
    let mut store = accountd::store::Store::open(path).unwrap();
    let runs = [
        run(1, "ops", T, Some(T + 4 * H), 2),
        run(2, "ops", T + H / 2, Some(T + H / 2 + 2 * H), 2),
        run(3, "vision", T + 3 * H / 2, Some(T + 5 * H / 2), 2),
    ];
    store.record_runs(&runs, T + 10 * H, None).unwrap();
    store
        .record_capacity("c", &capacity(T - 100, 4, &[]))
        .unwrap();
    let mut samples = Vec::new();
    for (job, start, hours, util) in [(1u32, T, 4, 0), (2, T + H / 2, 2, 90)] {
        for ts in (start..start + hours * H).step_by(60) {
            for gpu in ["a", "b"] {
                let mut s = sample(&format!("GPU-{job}{gpu}"), ts, Some((job, start)), util);
                s.interval_ms = 60_000;
                samples.push(s);
            }
        }
    }
    store
        .record_samples("c", &samples, 5.0, T + 10 * H)
        .unwrap();
}

/// `accountd replay` of the day of [`database_with_samples`] in `dir`, calibration skipped.
fn replay_db(dir: &Path, args: &[&str]) -> Output {
    Command::new(BIN)
        .arg("--config")
        .arg(dir.join("teamshare.toml"))
        .arg("--database")
        .arg(dir.join("accountd.db"))
        .args(["replay", "--since", "2024-05-01"])
        .args(["--until", "2024-05-02", "--skip-calibration"])
        .args(args)
        .output()
        .expect("accountd runs")
}

#[test]
fn a_database_with_samples_says_what_idle_first_would_have_saved() {
    let dir = tempfile::tempdir().unwrap();
    let config = "[cluster]\nname = \"c\"\npartitions = [\"gpu\"]\nidle_sharing = \"fifo\"\n\
        [[team]]\nname = \"ops\"\nquota = 0\n[[team]]\nname = \"vision\"\nquota = 4\n\
        [governance]\nreclaim_grace = \"0s\"\nmin_runtime_before_reclaim = \"0s\"\n";
    let toml = dir.path().join("teamshare.toml");
    fs::write(&toml, config).unwrap();
    database_with_samples(&dir.path().join("accountd.db"));
    let toml = toml.to_str().unwrap();
    // The configuration: 2 GPU-hours saved, job 2's hour on 2 busy GPUs, which today's order
    // takes; idle-first takes job 1, idle all along.
    let out = replay_db(dir.path(), &["--candidate", toml, "--threads", "1"]);
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(
        table.contains("idle-first reclaim under teamshare.toml: 2.0 GPU-hours of lost work saved (2.0 lost with today's order, 0.0 with idle_first_reclaim;"),
        "{}",
        text(&out)
    );
    assert!(
        table.contains("note: GPU samples: 2 of 3 started jobs have samples"),
        "{table}"
    );
    // The same bytes on other numbers of threads.
    let again = replay_db(dir.path(), &["--candidate", toml, "--threads", "3"]);
    assert_eq!(out.stdout, again.stdout);
    // Siloed first: the figure is said for the baseline (nothing borrowed, nothing saved).
    let out = replay_db(
        dir.path(),
        &[
            "--candidate",
            "siloed",
            "--candidate",
            toml,
            "--format",
            "json",
        ],
    );
    assert!(out.status.success(), "{}", text(&out));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["idle_first"]["status"], "computed", "{}", text(&out));
    assert_eq!(json["idle_first"]["candidate"], "siloed");
    let rows = json["idle_first"]["rows"].as_array().unwrap();
    assert_eq!(rows.last().unwrap()["saved_gpu_hours"], 0.0);
}
