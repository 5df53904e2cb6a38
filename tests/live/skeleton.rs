//! The walking skeleton on the live cluster: the plugin loads, refuses what it must with its
//! own message, survives a panic, and accountd's report matches what sacct says jobs held.

use std::collections::BTreeMap;
use std::time::Duration;

use teamshare_live_tests::{ensure, Cluster, Scenario, TestResult};

pub const SCENARIOS: &[Scenario] = &[
    (
        "skeleton::plugin_exports_its_symbols_and_loads",
        plugin_loads,
    ),
    (
        "skeleton::unknown_account_is_refused_with_its_message",
        unknown_account,
    ),
    (
        "skeleton::over_limit_request_is_refused_with_its_message",
        over_limit,
    ),
    (
        "skeleton::modify_refusal_reaches_the_user_where_the_release_allows",
        modify_refusal,
    ),
    ("skeleton::valid_jobs_run", valid_jobs_run),
    (
        "skeleton::planted_panic_rejects_the_job_and_slurmctld_lives",
        planted_panic,
    ),
    (
        "skeleton::check_config_lists_every_error",
        check_config_errors,
    ),
    (
        "skeleton::ingest_twice_then_report_matches_sacct",
        ingest_and_report,
    ),
    (
        "skeleton::issue25_14_the_governors_first_pass_finds_its_database_ready",
        database_ready,
    ),
];

/// Issue 25, finding 14: on a fresh start the governor's first pass read fair-share from a
/// database the daemon's ingest thread was still making, and logged that it needed an
/// upgrade ("schema version 0 ... `accountd run` or `accountd ingest` upgrades it"). The
/// daemon now makes it before its threads start. This cluster's daemon started on no database.
fn database_ready(c: &Cluster) -> TestResult {
    c.wait_governor_pass()?;
    let log = c.governor_log();
    ensure(!log.contains("older than this accountd"), || {
        format!(
            "the governor's log advises an upgrade:\n{}",
            c.governor_log_tail(20)
        )
    })
}

const MINUTE: Duration = Duration::from_secs(60);

fn plugin_loads(c: &Cluster) -> TestResult {
    let out = std::process::Command::new("nm")
        .args(["-D", "--defined-only"])
        .arg(&c.production_plugin)
        .output()
        .map_err(|e| format!("nm: {e}"))?;
    let symbols = String::from_utf8_lossy(&out.stdout);
    for s in [
        "plugin_name",
        "plugin_type",
        "plugin_version",
        "init",
        "fini",
        "job_submit",
        "job_modify",
    ] {
        ensure(
            symbols
                .lines()
                .any(|l| l.split_whitespace().last() == Some(s)),
            || {
                format!(
                    "{} does not export {s}:\n{symbols}",
                    c.production_plugin.display()
                )
            },
        )?;
    }
    // The test-only panic path must not be in the production build. Its panic message is
    // looked for: the trigger word is compared in pieces and is in no build as one string.
    const PLANTED: &[u8] = b"planted test panic";
    let strings = std::fs::read(&c.production_plugin).map_err(|e| e.to_string())?;
    ensure(
        !strings.windows(PLANTED.len()).any(|w| w == PLANTED),
        || "the release plugin contains the test-only panic trigger".into(),
    )?;
    let log = c.slurmctld_log();
    ensure(log.contains("job_submit/teamshare: loaded"), || {
        format!("slurmctld did not log the plugin loading:\n{log}")
    })
}

fn unknown_account(c: &Cluster) -> TestResult {
    let err = match c.sbatch(&[
        "-A",
        "nosuchteam",
        "-p",
        "gpu",
        "--gres=gpu:1",
        "--wrap",
        "true",
    ]) {
        Ok(id) => return Err(format!("job {id} of an unknown account was accepted")),
        Err(e) => e,
    };
    ensure(
        err.contains("teamshare: account nosuchteam is not a team on this cluster; use -A with one of: agents, training, research"),
        || format!("sbatch did not show the plugin's message: {err}"),
    )
}

/// `scontrol update` of a job's QOS by its user is refused. From 23.02 job_modify can hand
/// slurmctld a message, and the user reads teamshare's own; 22.05 has no such argument, so the
/// user reads the error code's text and the message is in slurmctld's log.
fn modify_refusal(c: &Cluster) -> TestResult {
    const MESSAGE: &str = "teamshare: a job's QOS is set by teamshare, so you cannot";
    let id = c.held_gpu_job_as_user("agents")?;
    let out = c.run_as_user(
        "scontrol",
        &["update", &format!("jobid={id}"), "qos=normal"],
    )?;
    let _ = c.run("scancel", &[&id]);
    let said = c.modify_refusal(&out)?;
    let release = c.slurm_release()?;
    ensure(said.contains(MESSAGE), || {
        format!("on Slurm {release:?} the refusal did not carry teamshare's message: {said:?}")
    })?;
    // What the user's own terminal shows.
    let stderr = String::from_utf8_lossy(&out.stderr);
    if release >= (23, 2) {
        ensure(stderr.contains(MESSAGE), || {
            format!("scontrol did not show teamshare's message: {stderr:?}")
        })
    } else {
        ensure(stderr.contains("Access/permission denied"), || {
            format!("scontrol said {stderr:?}")
        })
    }
}

fn over_limit(c: &Cluster) -> TestResult {
    let err = match c.sbatch(&["-A", "agents", "-p", "gpu", "--gpus=6", "--wrap", "true"]) {
        Ok(id) => return Err(format!("job {id} asking for 6 GPUs in agents was accepted")),
        Err(e) => e,
    };
    ensure(
        err.contains("teamshare: team agents may hold at most 4 GPUs (quota 2 + borrow limit 2); this job asks for 6"),
        || format!("sbatch did not show the plugin's message: {err}"),
    )?;
    // Per-node requests are multiplied by the node count: 2 nodes x 3 GPUs = 6.
    let err = match c.sbatch(&[
        "-A",
        "agents",
        "-p",
        "gpu",
        "-N",
        "2",
        "--gres=gpu:3",
        "--wrap",
        "true",
    ]) {
        Ok(id) => {
            return Err(format!(
                "job {id} asking for 2x3 GPUs in agents was accepted"
            ))
        }
        Err(e) => e,
    };
    ensure(err.contains("this job asks for 6"), || {
        format!("per-node request not counted per node: {err}")
    })
}

fn valid_jobs_run(c: &Cluster) -> TestResult {
    let mut ids = Vec::new();
    for (team, gres) in [
        ("agents", "gpu:1"),
        ("training", "gpu:2"),
        ("research", "gpu:1"),
    ] {
        let id = c
            .sbatch(&[
                "-A",
                team,
                "-p",
                "gpu",
                &format!("--gres={gres}"),
                "--wrap",
                "sleep 1",
            ])
            .map_err(|e| format!("a valid {team} job was refused: {e}"))?;
        ids.push(id);
    }
    c.wait_completed_in_sacct(&ids, 2 * MINUTE)
}

fn planted_panic(c: &Cluster) -> TestResult {
    let err = match c.sbatch(&[
        "-A",
        "agents",
        "-p",
        "gpu",
        "--gres=gpu:1",
        "--comment=teamshare-test-panic",
        "--wrap",
        "true",
    ]) {
        Ok(id) => return Err(format!("job {id} that made the plugin panic was accepted")),
        Err(e) => e,
    };
    ensure(
        err.contains("teamshare: internal error, job refused"),
        || format!("the panic did not reject the job with the generic message: {err}"),
    )?;
    ensure(c.slurmctld_alive(), || {
        "slurmctld died after the plugin panicked".into()
    })?;
    c.ok("scontrol", &["ping"])?;
    let log = c.slurmctld_log();
    ensure(
        log.contains("internal error in job_submit: planted test panic"),
        || "the panic was not logged through slurmctld's logger".into(),
    )?;
    // Issue 8, finding 16: with where it happened, in the log, not Rust's default message on
    // slurmctld's stderr (which no administrator reads).
    ensure(
        log.contains("panic at plugin/job_submit/src/ffi.rs:"),
        || "the panic's location is not in slurmctld's log".into(),
    )?;
    let stderr = std::fs::read_to_string(c.dir.join("log/slurmctld.out")).unwrap_or_default();
    ensure(!stderr.contains("panicked at"), || {
        format!("Rust's default panic message reached slurmctld's stderr: {stderr}")
    })?;
    // And it still accepts and runs jobs.
    let id = c
        .sbatch(&[
            "-A",
            "agents",
            "-p",
            "gpu",
            "--gres=gpu:1",
            "--wrap",
            "true",
        ])
        .map_err(|e| format!("after the panic a valid job was refused: {e}"))?;
    c.wait_completed_in_sacct(&[id], 2 * MINUTE)
}

fn check_config_errors(c: &Cluster) -> TestResult {
    let dir = std::env::temp_dir().join(format!("teamshare-badcfg-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let bad = dir.join("teamshare.toml");
    // Four distinct problems, each on its own line.
    let text = "[cluster]\nname = \"x\"\n\n[gpu_types.h100]\nrate_per_hour = -1.0\n\n[[team]]\nname = \"a\"\nquota = 2\nquotaa = 3\n\n[[team]]\nname = \"a\"\nquota = 1\nweight = \"heavy\"\n";
    std::fs::write(&bad, text).map_err(|e| e.to_string())?;
    let out = c
        .cmd(&c.accountd)
        .arg("--config")
        .arg(&bad)
        .arg("check-config")
        .output()
        .map_err(|e| e.to_string())?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    let _ = std::fs::remove_dir_all(&dir);
    ensure(out.status.code() == Some(2), || {
        format!(
            "check-config exited {:?}, expected 2: {stderr}",
            out.status.code()
        )
    })?;
    for (line, what) in [
        (5, "rate"),
        (10, "quotaa"),
        (13, "duplicate"),
        (15, "weight"),
    ] {
        let prefix = format!("teamshare.toml:{line}:");
        ensure(
            stderr
                .lines()
                .any(|l| l.contains(&prefix) && l.to_lowercase().contains(what)),
            || format!("no error at line {line} about {what}:\n{stderr}"),
        )?;
    }
    Ok(())
}

/// GPU-hours per account, computed here from sacct's own Start, End and AllocTRES.
fn gpu_hours_from_sacct(c: &Cluster, ids: &[String]) -> Result<BTreeMap<String, f64>, String> {
    let out = c.ok(
        "sacct",
        &[
            "-n",
            "-X",
            "-P",
            "-j",
            &ids.join(","),
            "-o",
            "Account,Start,End,AllocTRES",
            "--noconvert",
        ],
    )?;
    let mut hours = BTreeMap::new();
    for line in out.lines() {
        let f: Vec<&str> = line.split('|').collect();
        if f.len() != 4 {
            return Err(format!("unexpected sacct line {line:?}"));
        }
        let gpus: f64 = f[3]
            .split(',')
            .find_map(|kv| kv.strip_prefix("gres/gpu="))
            .ok_or_else(|| format!("no gres/gpu in {line:?}"))?
            .parse()
            .map_err(|e| format!("{line:?}: {e}"))?;
        let secs = epoch(c, f[2])? - epoch(c, f[1])?;
        *hours.entry(f[0].to_string()).or_insert(0.0) += gpus * secs as f64 / 3600.0;
    }
    Ok(hours)
}

/// sacct prints local time; `date` turns it into seconds, independently of accountd's parser.
fn epoch(c: &Cluster, t: &str) -> Result<i64, String> {
    let out = c.ok("date", &["-d", t, "+%s"])?;
    out.trim().parse().map_err(|e| format!("date -d {t}: {e}"))
}

fn ingest_and_report(c: &Cluster) -> TestResult {
    let mut ids = Vec::new();
    for (team, gres, secs) in [
        ("agents", "gpu:2", 3),
        ("training", "gpu:4", 2),
        ("research", "gpu:1", 4),
        ("research", "gpu:3", 1),
    ] {
        ids.push(
            c.sbatch(&[
                "-A",
                team,
                "-p",
                "gpu",
                &format!("--gres={gres}"),
                "--wrap",
                &format!("sleep {secs}"),
            ])
            .map_err(|e| format!("a valid {team} job was refused: {e}"))?,
        );
    }
    c.wait_completed_in_sacct(&ids, 3 * MINUTE)?;
    let expected = gpu_hours_from_sacct(c, &ids)?;

    let dir = std::env::temp_dir().join(format!("teamshare-ingest-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let db = dir.join("accountd.db");
    let window = ["--since", "now-2h", "--until", "now+1h"];
    for round in 1..=2 {
        let mut args = vec!["ingest"];
        args.extend_from_slice(&window);
        let out = c.accountd(&db, &args)?;
        ensure(out.status.success(), || {
            format!(
                "accountd ingest (round {round}) failed: {}",
                String::from_utf8_lossy(&out.stderr)
            )
        })?;
    }
    let out = c.accountd(
        &db,
        &[
            "report", "teams", "--since", "now-2h", "--until", "now+1h", "--format", "json",
        ],
    )?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    ensure(out.status.success(), || {
        format!(
            "accountd report failed: {}",
            String::from_utf8_lossy(&out.stderr)
        )
    })?;
    let json: serde_json::Value =
        serde_json::from_str(&stdout).map_err(|e| format!("report is not JSON ({e}): {stdout}"))?;
    let rows = json
        .get("teams")
        .and_then(|t| t.as_array())
        .or_else(|| json.as_array())
        .ok_or_else(|| format!("no team rows in {stdout}"))?;
    let mut got = BTreeMap::new();
    for r in rows {
        let team = r["team"].as_str().unwrap_or_default().to_string();
        let h = r["gpu_hours"]
            .as_f64()
            .ok_or_else(|| format!("no gpu_hours in {r}"))?;
        got.insert(team, h);
    }
    let _ = std::fs::remove_dir_all(&dir);
    // Other tests ran jobs in this cluster too; these jobs' accounts must hold at least their
    // share, and the report must equal sacct over every job in the window.
    let all = all_job_ids(c)?;
    let expected_all = gpu_hours_from_sacct(c, &all)?;
    for (team, h) in &expected_all {
        let g = got.get(team).copied().unwrap_or(0.0);
        ensure((g - h).abs() < 1e-6, || {
            format!("team {team}: report {g} GPU-hours, sacct says {h}\nreport: {stdout}")
        })?;
    }
    for (team, h) in &expected {
        ensure(got.get(team).copied().unwrap_or(0.0) >= *h - 1e-6, || {
            format!("team {team}: report lacks this test's {h} GPU-hours")
        })?;
    }
    Ok(())
}

/// Every allocation that ran in this cluster (the tests are its only users).
fn all_job_ids(c: &Cluster) -> Result<Vec<String>, String> {
    let out = c.ok(
        "sacct",
        &[
            "-a",
            "-n",
            "-X",
            "-P",
            "-S",
            "now-2hours",
            "-E",
            "now",
            "-s",
            "CD",
            "-o",
            "JobIDRaw",
        ],
    )?;
    Ok(out
        .lines()
        .map(|l| l.trim().to_string())
        .filter(|l| !l.is_empty())
        .collect())
}
