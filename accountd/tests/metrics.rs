//! The metrics exposition: well-formed by a strict reading of Prometheus' text format 0.0.4, and
//! its database figures equal to `accountd report teams|fairshare --format json` over the same
//! database and month.

// Test code: a scenario reads top to bottom, so the workspace's 80-line limit is not for it.
#![allow(clippy::too_many_lines)]

use std::collections::BTreeMap;
use std::fs;
use std::process::Command;

use accountd::metrics::{self, Live, LiveTeam};
use accountd::store::{CapacitySample, Store};

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
weight = 40

[[team]]
name = "training"
quota = 4
weight = 30

[[team]]
name = "research"
quota = 1
weight = 30

[accountd]
database = "accountd.db"
borrowed_cost_factor = 0.5
idle_cost_split = "usage-share"
fairshare_half_life = "2d"
"#;

/// May 2024 up to 2024-05-20T00:00:00Z.
const SACCT: &str = "\
1|1|testcluster|agents|alice|gpu|normal|COMPLETED|2024-05-02T09:50:00|2024-05-02T10:00:00|2024-05-02T14:00:00|04:00:00|cpu=2,gres/gpu=3,node=1|2024-05-02T09:50:00|2880|1|cpu=2,gres/gpu=3,node=1
2|2|testcluster|training|bob|gpu|normal|PREEMPTED|2024-05-02T11:00:00|2024-05-02T11:00:00|2024-05-02T12:00:00|01:00:00|cpu=8,gres/gpu=4,gres/gpu:h100=4,node=1|2024-05-02T11:00:00|2880|1|cpu=8,gres/gpu=4,gres/gpu:h100=4,node=1
3|3|testcluster|agents|alice|gpu|normal|RUNNING|2024-05-19T20:00:00|2024-05-19T22:00:00|Unknown|02:00:00|gres/gpu=1|2024-05-19T20:00:00|2880|1|gres/gpu=1
4|4|testcluster|research|carol|gpu|normal|COMPLETED|2024-04-30T10:00:00|2024-04-30T12:00:00|2024-05-01T02:00:00|14:00:00|gres/gpu=2|2024-04-30T10:00:00|2880|1|gres/gpu=2
5|5|testcluster|stray|dave|gpu|normal|COMPLETED|2024-05-03T00:00:00|2024-05-03T00:00:00|2024-05-03T03:00:00|03:00:00|gres/gpu=2|2024-05-03T00:00:00|2880|1|gres/gpu=2
";

const NOW: i64 = 1_716_163_200; // 2024-05-20T00:00:00Z
const JOB1_START: i64 = 1_714_644_000; // 2024-05-02T10:00:00Z

/// Prometheus' own linter (Debian's `prometheus` package, which contrib/install-deps.sh
/// installs) accepts every name, type and unit: no gauge named `_total`, base units only. Where
/// promtool is missing the check is required in CI (`CI` set) and said to be left out elsewhere.
fn promtool_accepts(text: &str) {
    use std::io::Write as _;
    let child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn();
    let mut child = match child {
        Ok(c) => c,
        Err(e) if std::env::var_os("CI").is_none() => {
            eprintln!("promtool not run ({e}): install Debian's prometheus to check the names");
            return;
        }
        Err(e) => panic!("promtool check metrics: {e} (contrib/install-deps.sh installs it)"),
    };
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(text.as_bytes())
        .expect("promtool stdin");
    let out = child.wait_with_output().expect("promtool");
    assert!(
        out.status.success(),
        "promtool check metrics: {}{}\n{text}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

// ---- a strict reader of the text exposition format ----------------------------------------

/// A series: name and labels (sorted by name).
type Series = (String, Vec<(String, String)>);

#[derive(Debug, Default)]
struct Exposition {
    types: BTreeMap<String, String>,
    helps: BTreeMap<String, String>,
    samples: BTreeMap<Series, f64>,
}

impl Exposition {
    fn get(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        let mut l: Vec<(String, String)> = labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        l.sort();
        self.samples.get(&(name.to_string(), l)).copied()
    }

    fn family(&self, name: &str) -> Vec<(&Vec<(String, String)>, f64)> {
        self.samples
            .iter()
            .filter(|((n, _), _)| n == name)
            .map(|((_, l), v)| (l, *v))
            .collect()
    }
}

fn is_name(s: &str, colon: bool) -> bool {
    let mut chars = s.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_' || (colon && c == ':'))
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || (colon && c == ':'))
}

fn parse_value(s: &str) -> Result<f64, String> {
    match s {
        "NaN" => Ok(f64::NAN),
        "+Inf" => Ok(f64::INFINITY),
        "-Inf" => Ok(f64::NEG_INFINITY),
        _ if s.chars().all(|c| c.is_ascii_digit() || "+-.eE".contains(c)) && !s.is_empty() => {
            s.parse().map_err(|e| format!("value `{s}`: {e}"))
        }
        _ => Err(format!("value `{s}` is not a number")),
    }
}

/// `{a="x",b="y"}` from the start of `s`; returns the labels and the rest.
type Labels = Vec<(String, String)>;

fn parse_labels(s: &str) -> Result<(Labels, &str), String> {
    let mut labels = Vec::new();
    let mut rest = s.strip_prefix('{').ok_or("expected {")?;
    loop {
        if let Some(r) = rest.strip_prefix('}') {
            return Ok((labels, r));
        }
        let eq = rest.find('=').ok_or("label without =")?;
        let name = &rest[..eq];
        if !is_name(name, false) || name.starts_with("__") {
            return Err(format!("bad label name `{name}`"));
        }
        rest = rest[eq + 1..]
            .strip_prefix('"')
            .ok_or("label value not quoted")?;
        let mut value = String::new();
        let mut chars = rest.char_indices();
        let end = loop {
            match chars.next() {
                None => return Err("unterminated label value".into()),
                Some((i, '"')) => break i,
                Some((_, '\\')) => match chars.next() {
                    Some((_, '\\')) => value.push('\\'),
                    Some((_, '"')) => value.push('"'),
                    Some((_, 'n')) => value.push('\n'),
                    other => return Err(format!("bad escape {other:?}")),
                },
                Some((_, '\n')) => return Err("raw line feed in a label value".into()),
                Some((_, c)) => value.push(c),
            }
        };
        if labels.iter().any(|(n, _)| n == name) {
            return Err(format!("label `{name}` twice"));
        }
        labels.push((name.to_string(), value));
        rest = &rest[end + 1..];
        if let Some(r) = rest.strip_prefix(',') {
            rest = r;
            if rest.starts_with('}') {
                return Err("trailing comma".into());
            }
        } else if !rest.starts_with('}') {
            return Err("expected , or }".into());
        }
    }
}

fn parse_exposition(text: &str) -> Result<Exposition, String> {
    if !text.ends_with('\n') {
        return Err("the exposition must end with a line feed".into());
    }
    let mut e = Exposition::default();
    let mut done: Vec<String> = Vec::new(); // families finished (another one started since)
    let mut current: Option<String> = None;
    let mut enter = |name: &str, done: &mut Vec<String>| -> Result<(), String> {
        if current.as_deref() != Some(name) {
            if done.iter().any(|d| d == name) {
                return Err(format!("family {name} is not contiguous"));
            }
            if let Some(c) = current.replace(name.to_string()) {
                done.push(c);
            }
        }
        Ok(())
    };
    for (n, line) in text.lines().enumerate() {
        let err = |m: String| format!("line {}: {m}: {line:?}", n + 1);
        if line.is_empty() {
            return Err(err("empty line".into()));
        }
        if let Some(rest) = line.strip_prefix("# ") {
            let (keyword, rest) = rest
                .split_once(' ')
                .ok_or_else(|| err("bad comment".into()))?;
            let (name, arg) = rest.split_once(' ').ok_or_else(|| err("no text".into()))?;
            if !is_name(name, true) {
                return Err(err(format!("bad metric name `{name}`")));
            }
            enter(name, &mut done).map_err(err)?;
            if e.samples.keys().any(|(s, _)| s == name) {
                return Err(err(format!("{keyword} after samples of {name}")));
            }
            match keyword {
                "HELP" => {
                    if arg.contains('\\')
                        && arg.replace("\\\\", "").replace("\\n", "").contains('\\')
                    {
                        return Err(err("bad escape in HELP".into()));
                    }
                    if e.helps.insert(name.into(), arg.into()).is_some() {
                        return Err(err("second HELP".into()));
                    }
                }
                "TYPE" => {
                    if !["counter", "gauge", "histogram", "summary", "untyped"].contains(&arg) {
                        return Err(err(format!("unknown type `{arg}`")));
                    }
                    if e.types.insert(name.into(), arg.into()).is_some() {
                        return Err(err("second TYPE".into()));
                    }
                }
                _ => return Err(err(format!("unknown comment `{keyword}`"))),
            }
            continue;
        }
        if line.starts_with('#') {
            return Err(err("comment without a space".into()));
        }
        let name_end = line
            .find(['{', ' '])
            .ok_or_else(|| err("no value".into()))?;
        let name = &line[..name_end];
        if !is_name(name, true) {
            return Err(err(format!("bad metric name `{name}`")));
        }
        enter(name, &mut done).map_err(err)?;
        let (mut labels, rest) = if line[name_end..].starts_with('{') {
            parse_labels(&line[name_end..]).map_err(err)?
        } else {
            (Vec::new(), &line[name_end..])
        };
        let value = rest
            .strip_prefix(' ')
            .ok_or_else(|| err("expected one space before the value".into()))?;
        if value.contains(' ') {
            return Err(err("a timestamp or trailing text".into()));
        }
        let value = parse_value(value).map_err(err)?;
        labels.sort();
        if e.samples.insert((name.into(), labels), value).is_some() {
            return Err(err("the same series twice".into()));
        }
    }
    for (name, _) in e.samples.keys() {
        if !e.types.contains_key(name) || !e.helps.contains_key(name) {
            return Err(format!("{name} has samples but no TYPE or HELP"));
        }
    }
    Ok(e)
}

#[test]
fn the_strict_reader_refuses_what_prometheus_would() {
    let ok = "# HELP a_b x\n# TYPE a_b gauge\na_b{x=\"1\\\"\\n\\\\\"} 1.5\n";
    let e = parse_exposition(ok).unwrap();
    assert_eq!(e.get("a_b", &[("x", "1\"\n\\")]), Some(1.5));
    for bad in [
        "# TYPE a gauge\na 1\n",                                    // no HELP
        "# HELP a x\n# TYPE a gauge\na 1",                          // no final line feed
        "# HELP a x\n# TYPE a gauge\na{x=\"1\"} 1\na{x=\"1\"} 2\n", // series twice
        "# HELP a x\n# TYPE a gauge\na{x=\"\\t\"} 1\n",             // bad escape
        "# HELP a x\n# TYPE a gauge\na{x=1} 1\n",                   // unquoted
        "# HELP a x\n# TYPE a gauge\na one\n",                      // not a number
        "# HELP a x\n# TYPE a gauge\na 1\n# HELP b y\n# TYPE b gauge\nb 1\na 2\n", // split
        "# HELP a x\n# TYPE a gaug\na 1\n",                         // unknown type
        "# HELP a x\n# TYPE a gauge\na 1 1700000000\n",             // timestamps are not ours
        "# HELP 1a x\n# TYPE 1a gauge\n1a 1\n",                     // bad name
    ] {
        assert!(parse_exposition(bad).is_err(), "accepted {bad:?}");
    }
}

// ---- the exposition against the reports ---------------------------------------------------

struct Site {
    dir: tempfile::TempDir,
}

impl Site {
    fn new() -> Site {
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join("teamshare.toml"), CONFIG).unwrap();
        let site = Site { dir };
        let mut store = Store::open(&site.dir.path().join("accountd.db")).unwrap();
        let batch = accountd::sacct::parse(SACCT, &chrono::Utc);
        assert!(batch.malformed.is_empty(), "{:?}", batch.malformed);
        store.record_runs(&batch.runs, 1, None).unwrap();
        // 8 GPUs (4 h100) from April; a node of 2 untyped GPUs added on 2024-05-10.
        for (ts, gpus) in [(1_711_929_600, 8), (1_715_299_200, 10)] {
            let sample = CapacitySample {
                ts,
                gpus,
                by_type: [("h100".to_string(), 4)].into(),
            };
            store.record_capacity("testcluster", &sample).unwrap();
        }
        // Two GPUs of job 1 sampled at 40 % and 60 %.
        let ready = site.dir.path().join("spool/n1/ready");
        fs::create_dir_all(&ready).unwrap();
        let line = |uuid: &str, util: u32| {
            format!(
                "{{\"node\":\"n1\",\"gpu_uuid\":\"{uuid}\",\"ts_ms\":{},\"interval_ms\":60000,\"minor\":0,\"job_id_raw\":1,\"job_start\":{JOB1_START},\"util_gpu\":{util},\"util_mem\":10,\"mem_used\":1,\"mem_total\":2,\"processes\":1}}\n",
                (JOB1_START + 600) * 1000
            )
        };
        fs::write(
            ready.join("1714644600000-1-0.jsonl"),
            line("GPU-a", 40) + &line("GPU-b", 60),
        )
        .unwrap();
        let summary = accountd::sample::collect::collect(
            &store,
            &site.dir.path().join("spool"),
            "testcluster",
            5.0,
            NOW,
        )
        .unwrap();
        assert_eq!(summary.inserted, 2, "{summary}");
        site
    }

    fn config(&self) -> teamshare_config::Config {
        teamshare_config::load(&self.dir.path().join("teamshare.toml")).unwrap()
    }

    fn report_json(&self, args: &[&str]) -> Vec<serde_json::Value> {
        let o = Command::new(BIN)
            .arg("--config")
            .arg(self.dir.path().join("teamshare.toml"))
            .arg("report")
            .args(args)
            .args(["--format", "json"])
            .env("TZ", "UTC")
            .env_remove("SLURM_CONF")
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        v.as_array().unwrap().clone()
    }
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * b.abs().max(1.0)
}

#[test]
fn the_exposition_is_well_formed_and_matches_the_reports() {
    let site = Site::new();
    let config = site.config();
    let store = Store::open(&site.dir.path().join("accountd.db")).unwrap();
    let figures = metrics::month_figures(&store, &config, NOW, &chrono::Utc).unwrap();
    let live = Live {
        capacity: Some(10),
        governor_last_pass: Some(NOW - 1),
        ingest_last_success: Some(NOW - 30),
        teams: BTreeMap::from([
            (
                "agents".to_string(),
                LiveTeam {
                    gpu_limit: 4,
                    running_gpus: 3,
                    ..LiveTeam::default()
                },
            ),
            (
                "training".to_string(),
                LiveTeam {
                    gpu_limit: 4,
                    running_gpus: 0,
                    ..LiveTeam::default()
                },
            ),
        ]),
        displaced: BTreeMap::from([("agents".to_string(), 2)]),
        reclaimed: BTreeMap::from([("training".to_string(), 2)]),
        ..Live::default()
    };
    let text = metrics::render(&config, &live, Some(&figures));
    if std::env::var_os("SHOW_EXPOSITION").is_some() {
        eprintln!("{text}");
    }
    promtool_accepts(&text);
    let e = parse_exposition(&text).unwrap_or_else(|err| panic!("{err}\n{text}"));
    assert!(
        e.types.keys().all(|n| n.starts_with("teamshare_")),
        "{text}"
    );

    // The teams report of the same month, from the command line.
    let rows = site.report_json(&["teams", "--since", "2024-05-01", "--until", "2024-05-20"]);
    let names: Vec<&str> = rows.iter().map(|r| r["team"].as_str().unwrap()).collect();
    assert_eq!(
        names,
        ["agents", "research", "stray", "training", "(pool)", "(idle)"]
    );
    let mut cost_sum = 0.0;
    for r in &rows {
        let team = r["team"].as_str().unwrap();
        // GPU-seconds in the exposition (Prometheus' base unit), hours in the report.
        let hours = |kind: &str| {
            e.get(
                "teamshare_month_gpu_seconds",
                &[("team", team), ("kind", kind)],
            )
            .map(|s| s / 3600.0)
        };
        match team {
            "(idle)" => assert_eq!(hours("lent"), None),
            "(pool)" => {
                assert!(close(
                    hours("lent").unwrap(),
                    r["lent_hours"].as_f64().unwrap()
                ));
                assert_eq!(hours("allocated"), None);
            }
            _ => {
                for (kind, key) in [
                    ("allocated", "gpu_hours"),
                    ("in_quota", "in_quota_hours"),
                    ("borrowed", "borrowed_hours"),
                    ("lent", "lent_hours"),
                ] {
                    let (m, j) = (hours(kind).unwrap(), r[key].as_f64().unwrap());
                    assert!(close(m, j), "{team} {kind}: metrics {m}, report {j}");
                }
            }
        }
        if team != "(pool)" {
            let m = e
                .get(
                    "teamshare_month_cost",
                    &[("team", team), ("currency", "BRL")],
                )
                .unwrap_or_else(|| panic!("no cost for {team}\n{text}"));
            let j = r["total_cost"].as_f64().unwrap();
            assert!(close(m, j), "{team} cost: metrics {m}, report {j}");
            cost_sum += m;
        }
    }
    // Usage-share idle split: nothing is left in (idle) when someone used GPUs, and the costs
    // add up to the capacity's: May 1-10 (9 days) 8 GPUs, then (10 days) 10 GPUs; 4 h100.
    let capacity_cost =
        9.0 * 24.0 * (4.0 * 10.0 + 4.0 * 70.0) + 10.0 * 24.0 * (6.0 * 10.0 + 4.0 * 70.0);
    assert!(
        close(cost_sum, capacity_cost),
        "{cost_sum} vs {capacity_cost}"
    );
    assert_eq!(
        e.get(
            "teamshare_month_cost",
            &[("team", "(idle)"), ("currency", "BRL")]
        ),
        Some(0.0)
    );
    // Hand-checked: agents 3 GPUs x 4 h (1 borrowed) + 1 GPU x 2 h (running up to now).
    assert_eq!(
        e.get(
            "teamshare_month_gpu_seconds",
            &[("team", "agents"), ("kind", "allocated")]
        ),
        Some(14.0 * 3600.0)
    );
    assert_eq!(
        e.get(
            "teamshare_month_gpu_seconds",
            &[("team", "agents"), ("kind", "borrowed")]
        ),
        Some(4.0 * 3600.0)
    );

    // Fair-share against `report fairshare` as of the same instant.
    let fs = site.report_json(&["fairshare", "--until", "2024-05-20T00:00:00"]);
    assert_eq!(fs.len(), 4);
    for r in &fs {
        let team = r["team"].as_str().unwrap();
        let m = e
            .get("teamshare_fairshare_factor", &[("team", team)])
            .unwrap();
        assert!(close(m, r["fairshare_factor"].as_f64().unwrap()), "{team}");
    }

    // The rest, by hand.
    for (team, quota) in [("agents", 2.0), ("training", 4.0), ("research", 1.0)] {
        assert_eq!(
            e.get("teamshare_quota_gpus", &[("team", team)]),
            Some(quota)
        );
    }
    assert_eq!(
        e.get("teamshare_gpu_limit", &[("team", "agents")]),
        Some(4.0)
    );
    assert_eq!(
        e.get(
            "teamshare_gpus_in_use",
            &[("team", "agents"), ("kind", "in_quota")]
        ),
        Some(2.0)
    );
    assert_eq!(
        e.get(
            "teamshare_gpus_in_use",
            &[("team", "agents"), ("kind", "borrowed")]
        ),
        Some(1.0)
    );
    // Utilisation only where there are samples: job 1's two GPUs at 40 and 60 %.
    assert_eq!(
        e.family("teamshare_gpu_utilisation_ratio").len(),
        1,
        "{text}"
    );
    assert_eq!(
        e.get("teamshare_gpu_utilisation_ratio", &[("team", "agents")]),
        Some(0.5)
    );
    // One run PREEMPTED by Slurm this month (a gauge: the month's count), two requeued by the
    // governor itself since the daemon started (a counter: never goes down while it runs).
    assert_eq!(
        e.get("teamshare_month_preempted_runs", &[("team", "training")]),
        Some(1.0)
    );
    assert_eq!(e.types["teamshare_month_preempted_runs"], "gauge");
    assert_eq!(
        e.get(
            "teamshare_governor_requeues_total",
            &[("team", "training"), ("reason", "reclaim")]
        ),
        Some(2.0)
    );
    assert_eq!(
        e.get(
            "teamshare_governor_requeues_total",
            &[("team", "agents"), ("reason", "priority_class")]
        ),
        Some(2.0)
    );
    assert_eq!(e.types["teamshare_governor_requeues_total"], "counter");
    // Waits of runs started in May: agents 10 min and 2 h; training 0; research started in
    // April (not counted).
    assert_eq!(
        e.get("teamshare_admission_wait_seconds", &[("team", "agents")]),
        Some(3900.0)
    );
    assert_eq!(
        e.get("teamshare_admission_wait_seconds", &[("team", "training")]),
        Some(0.0)
    );
    assert_eq!(
        e.get("teamshare_admission_wait_seconds", &[("team", "research")]),
        None
    );
    assert_eq!(e.get("teamshare_capacity_gpus", &[]), Some(10.0));
    assert_eq!(
        e.get("teamshare_governor_last_pass_timestamp_seconds", &[]),
        Some((NOW - 1) as f64)
    );
    assert_eq!(
        e.get("teamshare_ingest_last_success_timestamp_seconds", &[]),
        Some((NOW - 30) as f64)
    );
}

#[test]
fn without_the_database_the_live_values_are_still_well_formed() {
    let site = Site::new();
    let text = metrics::render(&site.config(), &Live::default(), None);
    let e = parse_exposition(&text).unwrap_or_else(|err| panic!("{err}\n{text}"));
    assert_eq!(e.family("teamshare_quota_gpus").len(), 3);
    assert!(e.family("teamshare_month_gpu_seconds").is_empty());
    assert!(e.get("teamshare_capacity_gpus", &[]).is_none());
}
