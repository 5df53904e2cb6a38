//! DESIGN §5 on the live cluster: GPU samples from the fake NVML library, mapped to the jobs
//! that held the GPUs; requeued jobs counted per run.

use std::path::PathBuf;
use std::process::{Child, Stdio};
use std::time::Duration;

use teamshare_live_tests::{ensure, repo_root, Cluster, Scenario, TestResult};

pub const SCENARIOS: &[Scenario] = &[
    (
        "accounting::a1_nvml_samples_give_per_job_and_per_team_utilisation",
        utilisation,
    ),
    (
        "accounting::a2_a_preempted_and_requeued_job_is_two_runs",
        requeued_runs,
    ),
    (
        "accounting::a3_metrics_parse_and_agree_with_the_report",
        metrics_agree,
    ),
];

const MINUTE: Duration = Duration::from_secs(60);

/// One `accountd sample` per node, each seeing its node's GPUs through the fake library.
pub(crate) struct Samplers(Vec<Child>);

impl Drop for Samplers {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

pub(crate) fn start_samplers(
    c: &Cluster,
    spool: &std::path::Path,
    util: &[(&str, u32)],
) -> Result<Samplers, String> {
    let nodes: Vec<(&str, Vec<(String, u32)>)> = util
        .iter()
        .map(|&(node, percent)| {
            let gpus = (0..4)
                .map(|m| (format!("GPU-{node}-{m}"), percent))
                .collect();
            (node, gpus)
        })
        .collect();
    start_samplers_on(c, spool, &nodes)
}

/// A sampler per node, whose fake NVML offers the devices given: (UUID, utilisation) at
/// minors 0, 1, ... in order.
pub(crate) fn start_samplers_on(
    c: &Cluster,
    spool: &std::path::Path,
    nodes: &[(&str, Vec<(String, u32)>)],
) -> Result<Samplers, String> {
    let lib = repo_root().join("target/release/libnvidia_ml.so");
    if !lib.is_file() {
        return Err(format!(
            "{} is missing: cargo build --release -p fake-nvml",
            lib.display()
        ));
    }
    let mut children = Vec::new();
    for (node, gpus) in nodes {
        let script = c.dir.join(format!("fake-nvml-{node}.txt"));
        let mut text = String::new();
        for (minor, (uuid, _)) in gpus.iter().enumerate() {
            text.push_str(&format!("gpu {minor} uuid={uuid}\n"));
        }
        for (minor, (_, percent)) in gpus.iter().enumerate() {
            text.push_str(&format!("util {minor} +0 {percent} 1000\n"));
        }
        std::fs::write(&script, text).map_err(|e| e.to_string())?;
        // Backdate the script so `+0` is in the past whatever the clock granularity.
        let _ = std::process::Command::new("touch")
            .args(["-d", "-1 minute"])
            .arg(&script)
            .status();
        let log = std::fs::File::create(c.dir.join(format!("log/sampler-{node}.log")))
            .map_err(|e| e.to_string())?;
        let err = log.try_clone().map_err(|e| e.to_string())?;
        let child = c
            .cmd(&c.accountd)
            .env("FAKE_NVML_SCRIPT", &script)
            .arg("--config")
            .arg(c.dir.join("etc/teamshare.toml"))
            .args([
                "sample",
                "--interval",
                "1s",
                "--job-refresh",
                "1s",
                "--node",
                node,
            ])
            .arg("--spool")
            .arg(spool)
            .arg("--nvml-lib")
            .arg(&lib)
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(err)
            .spawn()
            .map_err(|e| format!("cannot start the sampler: {e}"))?;
        children.push(child);
    }
    Ok(Samplers(children))
}

pub(crate) fn json_rows(
    out: &std::process::Output,
    what: &str,
) -> Result<Vec<serde_json::Value>, String> {
    let stdout = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        return Err(format!(
            "{what} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    let v: serde_json::Value =
        serde_json::from_str(&stdout).map_err(|e| format!("{what}: not JSON ({e}): {stdout}"))?;
    v.as_array()
        .cloned()
        .ok_or_else(|| format!("{what}: not an array: {stdout}"))
}

fn scratch_db(c: &Cluster, name: &str) -> PathBuf {
    let db = c.dir.join(format!("{name}.db"));
    let _ = std::fs::remove_file(&db);
    db
}

/// Ingest sacct and collect the spooled samples into a database of the scenario's own;
/// returns its path.
pub(crate) fn ingest_and_collect(
    c: &Cluster,
    name: &str,
    spool: &std::path::Path,
) -> Result<String, String> {
    let dbs = scratch_db(c, name).to_string_lossy().to_string();
    let spool = spool.to_string_lossy().to_string();
    for args in [
        vec![
            "--database",
            &dbs,
            "ingest",
            "--since",
            "now-1h",
            "--until",
            "now+1h",
        ],
        vec!["--database", &dbs, "collect-samples", "--spool", &spool],
    ] {
        let out = c.accountd_cmd(&args)?;
        ensure(out.status.success(), || {
            format!(
                "accountd {} failed: {}",
                args[2],
                String::from_utf8_lossy(&out.stderr)
            )
        })?;
    }
    Ok(dbs)
}

fn utilisation(c: &Cluster) -> TestResult {
    c.reset()?;
    let spool = c.dir.join("samples-a1");
    let _ = std::fs::remove_dir_all(&spool);
    let samplers = start_samplers(c, &spool, &[("n1", 80), ("n2", 2)])?;
    let busy = c.sbatch(&[
        "-A",
        "agents",
        "-p",
        "gpu",
        "-w",
        "n1",
        "--gres=gpu:2",
        "--wrap",
        "sleep 20",
    ])?;
    let idle = c.sbatch(&[
        "-A",
        "research",
        "-p",
        "gpu",
        "-w",
        "n2",
        "--gres=gpu:1",
        "--wrap",
        "sleep 20",
    ])?;
    c.wait_completed_in_sacct(&[busy.clone(), idle.clone()], 2 * MINUTE)?;
    // Let the last ticks reach the spool, then stop sampling.
    std::thread::sleep(Duration::from_secs(3));
    drop(samplers);

    let dbs = ingest_and_collect(c, "a1", &spool)?;
    let period = ["--since", "now-1h", "--until", "now+1h", "--format", "json"];
    let jobs = json_rows(
        &c.accountd_cmd(&[&["--database", &dbs, "report", "jobs"][..], &period[..]].concat())?,
        "report jobs",
    )?;
    let row = |id: &str| {
        jobs.iter()
            .find(|r| r["job"].as_str() == Some(id))
            .cloned()
            .ok_or_else(|| format!("job {id} missing from report jobs: {jobs:?}"))
    };
    let interval_h = 1.0 / 3600.0;
    let b = row(&busy)?;
    let i = row(&idle)?;
    let f = |r: &serde_json::Value, k: &str| r[k].as_f64().unwrap_or(f64::NAN);
    ensure((f(&b, "mean_util_percent") - 80.0).abs() < 0.5, || {
        format!("busy job: {b}")
    })?;
    ensure(f(&b, "idle_gpu_hours") < 1e-9, || {
        format!("busy job has idle hours: {b}")
    })?;
    // Sampled time matches the time the job held its GPUs, within one interval per GPU.
    ensure(
        (f(&b, "sampled_gpu_hours") - f(&b, "gpu_hours")).abs() <= 2.0 * 2.0 * interval_h,
        || {
            format!(
                "busy job sampled {} of {} GPU-hours",
                f(&b, "sampled_gpu_hours"),
                f(&b, "gpu_hours")
            )
        },
    )?;
    ensure((f(&i, "mean_util_percent") - 2.0).abs() < 0.5, || {
        format!("idle job: {i}")
    })?;
    ensure(
        (f(&i, "idle_gpu_hours") - f(&i, "gpu_hours")).abs() <= 2.0 * interval_h,
        || {
            format!(
                "idle job: {} idle of {} GPU-hours",
                f(&i, "idle_gpu_hours"),
                f(&i, "gpu_hours")
            )
        },
    )?;
    let teams = json_rows(
        &c.accountd_cmd(
            &[
                &["--database", &dbs, "report", "utilisation"][..],
                &period[..],
            ]
            .concat(),
        )?,
        "report utilisation",
    )?;
    let team = |t: &str| {
        teams
            .iter()
            .find(|r| r["team"].as_str() == Some(t))
            .cloned()
    };
    let agents = team("agents").ok_or("no agents row")?;
    let research = team("research").ok_or("no research row")?;
    ensure((f(&agents, "mean_util_percent") - 80.0).abs() < 0.5, || {
        format!("agents: {agents}")
    })?;
    ensure(
        (f(&research, "mean_util_percent") - 2.0).abs() < 0.5,
        || format!("research: {research}"),
    )
}

fn requeued_runs(c: &Cluster) -> TestResult {
    c.reset()?;
    let spool = c.dir.join("samples-a2");
    let _ = std::fs::remove_dir_all(&spool);
    let samplers = start_samplers(c, &spool, &[("n1", 50), ("n2", 50)])?;
    let training = c.submit_sleeps("training", 8, 3600, &[])?;
    c.wait_running("training", 8, 2 * MINUTE)?;
    c.wait_for("4 victims", MINUTE, || {
        Ok((c.state()?["victims"].as_array().map(|v| v.len()) == Some(4)).then_some(()))
    })?;
    c.wait_governor_pass()?;
    let agents = c.submit_sleeps("agents", 1, 3600, &[])?.remove(0);
    c.wait_for("the agents job to run", MINUTE, || {
        Ok((c.job_state(&agents)? == "RUNNING").then_some(()))
    })?;
    let victim = c.wait_for("a requeued training job", MINUTE, || {
        Ok(training
            .iter()
            .find(|id| c.job_state(id).ok().as_deref() == Some("PENDING"))
            .cloned())
    })?;
    // Slurm holds a requeued job back for about two minutes (its previous run's credential is
    // revoked meanwhile; starting it earlier kills it at once). Free a GPU and wait.
    c.ok("scancel", &[&agents])?;
    c.wait_for("the requeued job to run again", 5 * MINUTE, || {
        Ok((c.job_state(&victim)? == "RUNNING").then_some(()))
    })?;
    std::thread::sleep(Duration::from_secs(5));
    c.ok("scancel", &[&victim])?;
    c.wait_for("sacct to show both runs ended", 2 * MINUTE, || {
        let out = c.ok(
            "sacct",
            &["-n", "-X", "-D", "-P", "-j", &victim, "-o", "State,End"],
        )?;
        let ended = out.lines().filter(|l| !l.ends_with("Unknown")).count();
        Ok((ended >= 2).then_some(()))
    })?;
    std::thread::sleep(Duration::from_secs(3));
    drop(samplers);
    let dbs = ingest_and_collect(c, "a2", &spool)?;
    let jobs = json_rows(
        &c.accountd_cmd(&[
            "--database",
            &dbs,
            "report",
            "jobs",
            "--since",
            "now-1h",
            "--until",
            "now+1h",
            "--format",
            "json",
            "--limit",
            "1000",
        ])?,
        "report jobs",
    )?;
    let runs = jobs
        .iter()
        .filter(|r| r["job"].as_str() == Some(victim.as_str()))
        .count();
    c.reset()?;
    ensure(runs == 2, || {
        format!("job {victim} appears {runs} times in report jobs, expected 2 runs")
    })
}

/// One sample of the Prometheus text format: name, labels, value.
type Sample = (String, Vec<(String, String)>, f64);

/// A strict reader of the Prometheus text exposition format (0.0.4): every line is a comment,
/// a HELP/TYPE line or a sample; every sample's metric family was TYPE'd before it.
fn parse_exposition(text: &str) -> Result<Vec<Sample>, String> {
    let mut typed = std::collections::BTreeSet::new();
    let mut samples = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let bad = |why: &str| format!("line {}: {why}: {line:?}", n + 1);
        if line.is_empty() {
            continue;
        }
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let mut it = rest.split_whitespace();
            let name = it.next().ok_or_else(|| bad("TYPE without name"))?;
            let kind = it.next().ok_or_else(|| bad("TYPE without kind"))?;
            if !["counter", "gauge", "histogram", "summary", "untyped"].contains(&kind) {
                return Err(bad("unknown type"));
            }
            typed.insert(name.to_string());
            continue;
        }
        if line.starts_with('#') {
            continue;
        }
        let (name_labels, value) = line.rsplit_once(' ').ok_or_else(|| bad("no value"))?;
        let value: f64 = match value {
            "+Inf" => f64::INFINITY,
            "-Inf" => f64::NEG_INFINITY,
            "NaN" => f64::NAN,
            v => v.parse().map_err(|_| bad("value is not a number"))?,
        };
        let (name, labels) = match name_labels.split_once('{') {
            None => (name_labels.to_string(), Vec::new()),
            Some((name, rest)) => {
                let body = rest
                    .strip_suffix('}')
                    .ok_or_else(|| bad("unclosed labels"))?;
                let mut labels = Vec::new();
                let mut chars = body.chars().peekable();
                while chars.peek().is_some() {
                    let key: String = chars.by_ref().take_while(|c| *c != '=').collect();
                    if chars.next() != Some('"') {
                        return Err(bad("label value not quoted"));
                    }
                    let mut val = String::new();
                    loop {
                        match chars.next() {
                            Some('\\') => match chars.next() {
                                Some('n') => val.push('\n'),
                                Some(c) => val.push(c),
                                None => return Err(bad("dangling escape")),
                            },
                            Some('"') => break,
                            Some(c) => val.push(c),
                            None => return Err(bad("unterminated label value")),
                        }
                    }
                    labels.push((key, val));
                    match chars.next() {
                        Some(',') | None => {}
                        Some(_) => return Err(bad("junk after a label")),
                    }
                }
                (name.to_string(), labels)
            }
        };
        if !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
        {
            return Err(bad("bad metric name"));
        }
        if !typed.contains(&name) {
            return Err(bad("sample before its TYPE line"));
        }
        samples.push((name, labels, value));
    }
    Ok(samples)
}

fn metric(samples: &[Sample], name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    samples
        .iter()
        .find(|(n, l, _)| {
            n == name
                && labels
                    .iter()
                    .all(|(k, v)| l.iter().any(|(lk, lv)| lk == k && lv == v))
        })
        .map(|(_, _, v)| *v)
}

fn metrics_agree(c: &Cluster) -> TestResult {
    c.reset()?;
    let a = c.sbatch(&[
        "-A",
        "agents",
        "-p",
        "gpu",
        "--gres=gpu:2",
        "--wrap",
        "sleep 3",
    ])?;
    let r = c.sbatch(&[
        "-A",
        "research",
        "-p",
        "gpu",
        "--gres=gpu:1",
        "--wrap",
        "sleep 2",
    ])?;
    c.wait_completed_in_sacct(&[a.clone(), r.clone()], 2 * MINUTE)?;
    let ended = teamshare_live_tests::unix_now();
    // The daemon ingests every 5 s and caches database figures for 10 s.
    let samples = c.wait_for("metrics that include the finished jobs", 2 * MINUTE, || {
        let s = parse_exposition(&c.metrics()?)?;
        let ingested =
            metric(&s, "teamshare_ingest_last_success_timestamp_seconds", &[]).unwrap_or(0.0);
        Ok((ingested > ended as f64 + 11.0).then_some(s))
    })?;
    // The same database, the same period (this month), through the report.
    let rows = json_rows(
        &c.accountd_cmd(&["report", "teams", "--format", "json"])?,
        "report teams",
    )?;
    let f = |r: &serde_json::Value, k: &str| r[k].as_f64().unwrap_or(0.0);
    for team in ["agents", "training", "research"] {
        let row = rows
            .iter()
            .find(|r| r["team"].as_str() == Some(team))
            .ok_or_else(|| format!("no {team} row"))?;
        for (kind, key) in [
            ("allocated", "gpu_hours"),
            ("in_quota", "in_quota_hours"),
            ("borrowed", "borrowed_hours"),
            ("lent", "lent_hours"),
        ] {
            // GPU-seconds in the exposition, hours in the report.
            let m = metric(
                &samples,
                "teamshare_month_gpu_seconds",
                &[("team", team), ("kind", kind)],
            )
            .map(|s| s / 3600.0)
            .ok_or_else(|| format!("no teamshare_month_gpu_seconds{{team={team},kind={kind}}}"))?;
            ensure((m - f(row, key)).abs() < 1e-6, || {
                format!("{team} {kind}: metrics {m}, report {}", f(row, key))
            })?;
        }
        let quota = metric(&samples, "teamshare_quota_gpus", &[("team", team)]);
        ensure(quota == row["quota"].as_f64(), || {
            format!("{team} quota: {quota:?} vs {row}")
        })?;
        let fs = metric(&samples, "teamshare_fairshare_factor", &[("team", team)]).unwrap_or(-1.0);
        ensure(fs > 0.0 && fs <= 1.0, || {
            format!("{team} fair-share factor {fs}")
        })?;
    }
    let agents_hours = rows
        .iter()
        .find(|r| r["team"].as_str() == Some("agents"))
        .map(|r| f(r, "gpu_hours"))
        .unwrap_or(0.0);
    ensure(agents_hours > 0.0, || {
        "the agents job is not in the report".into()
    })?;
    ensure(
        metric(&samples, "teamshare_capacity_gpus", &[]) == Some(8.0),
        || "capacity is not 8".into(),
    )
}
