//! contrib/grafana and contrib/prometheus on the live cluster: Debian's Prometheus scrapes
//! `accountd run` with the recording and alerting rules loaded, and every query of the Grafana
//! dashboard returns series from it while teams run, borrow, reclaim and are displaced.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use teamshare_live_tests::{ensure, repo_root, Cluster, Scenario, TestResult};

use crate::accounting::start_samplers;
use crate::governance::{fill, isolated, wait_victims};

pub const SCENARIOS: &[Scenario] = &[(
    "monitoring::m1_prometheus_scrapes_accountd_and_every_dashboard_query_returns_series",
    dashboard_queries,
)];

const MINUTE: Duration = Duration::from_secs(60);
const LONG: u32 = 3600;
const PROMETHEUS: &str = "/usr/bin/prometheus";
const PROMTOOL: &str = "/usr/bin/promtool";
/// One series of an instant query: its labels and value.
type Series = (BTreeMap<String, String>, f64);

/// Prometheus' port with LIVE_PORT_OFFSET 0 (moved by it like every port of the run).
const PROMETHEUS_PORT: u16 = 19090;
/// The live configuration's quotas (tests/live/teamshare.toml).
const QUOTAS: [(&str, u32); 3] = [("agents", 2), ("research", 2), ("training", 4)];

fn rules_file() -> PathBuf {
    repo_root().join("contrib/prometheus/teamshare-rules.yml")
}

/// Run promtool; Err with its output unless it exits 0.
fn promtool(args: &[&str], stdin: Option<&str>) -> TestResult {
    use std::io::Write as _;
    let mut child = Command::new(PROMTOOL)
        .args(args)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run {PROMTOOL} (contrib/install-deps.sh installs it): {e}"))?;
    if let (Some(text), Some(mut pipe)) = (stdin, child.stdin.take()) {
        pipe.write_all(text.as_bytes())
            .map_err(|e| format!("promtool stdin: {e}"))?;
    }
    let out = child
        .wait_with_output()
        .map_err(|e| format!("promtool: {e}"))?;
    ensure(out.status.success(), || {
        format!(
            "promtool {} failed ({}):\n{}{}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

/// A plain HTTP/1.0 GET (no chunked bodies): the status code and the body.
fn http_get(addr: &str, path: &str) -> Result<(u16, String), String> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).map_err(|e| format!("{addr}: {e}"))?;
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .map_err(|e| e.to_string())?;
    s.write_all(format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").as_bytes())
        .map_err(|e| format!("{addr}: {e}"))?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw)
        .map_err(|e| format!("{addr}{path}: {e}"))?;
    let text = String::from_utf8_lossy(&raw);
    let (head, body) = text
        .split_once("\r\n\r\n")
        .ok_or_else(|| format!("{addr}{path}: no HTTP body in {text:?}"))?;
    let code = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| format!("{addr}{path}: no status in {head:?}"))?;
    Ok((code, body.to_string()))
}

/// Percent-encoding of a query parameter.
fn url_encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Debian's Prometheus as a child of the test: stopped (SIGTERM, then SIGKILL) and waited for
/// when dropped, whatever the scenario's outcome. Its log is DIR/log/prometheus.log, kept with
/// the cluster's logs when a test failed.
struct Prometheus {
    child: Child,
    addr: String,
    log: PathBuf,
}

impl Prometheus {
    /// Scrape `target` every second with the rules loaded; wait until it is ready.
    fn start(c: &Cluster, target: &str) -> Result<Prometheus, String> {
        let offset: u16 = std::env::var("LIVE_PORT_OFFSET")
            .unwrap_or_else(|_| "0".into())
            .parse()
            .map_err(|_| "LIVE_PORT_OFFSET must be a number of ports".to_string())?;
        let addr = format!("127.0.0.1:{}", PROMETHEUS_PORT + offset);
        let dir = c.dir.join("prometheus");
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let config = dir.join("prometheus.yml");
        std::fs::write(
            &config,
            format!(
                "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n\
                 rule_files:\n  - {rules}\n\
                 scrape_configs:\n  - job_name: teamshare\n    static_configs:\n      - targets: [\"{target}\"]\n",
                rules = rules_file().display()
            ),
        )
        .map_err(|e| format!("{}: {e}", config.display()))?;
        promtool(&["check", "config", &config.to_string_lossy()], None)?;
        let log = c.dir.join("log/prometheus.log");
        let out = std::fs::File::create(&log).map_err(|e| format!("{}: {e}", log.display()))?;
        let err = out.try_clone().map_err(|e| e.to_string())?;
        let child = Command::new(PROMETHEUS)
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("data").display()
            ))
            .arg(format!("--web.listen-address={addr}"))
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .map_err(|e| {
                format!("cannot start {PROMETHEUS} (contrib/install-deps.sh installs it): {e}")
            })?;
        let mut p = Prometheus { child, addr, log };
        let started = Instant::now();
        c.wait_for("Prometheus to be ready", MINUTE, || {
            if let Ok(Some(status)) = p.child.try_wait() {
                return Err(format!("Prometheus exited ({status}):\n{}", p.log_tail()));
            }
            Ok(matches!(http_get(&p.addr, "/-/ready"), Ok((200, _))).then_some(()))
        })
        .map_err(|e| format!("{e}\n{}", p.log_tail()))?;
        eprintln!(
            "prometheus ready at {} in {:.1} s",
            p.addr,
            started.elapsed().as_secs_f64()
        );
        Ok(p)
    }

    fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        format!(
            "--- {} (last lines)\n{}",
            self.log.display(),
            lines[lines.len().saturating_sub(20)..].join("\n")
        )
    }

    /// GET an API path; the `data` of a successful answer.
    fn api(&self, path: &str) -> Result<Value, String> {
        let (code, body) = http_get(&self.addr, path)?;
        let v: Value =
            serde_json::from_str(&body).map_err(|e| format!("{path}: not JSON ({e}): {body}"))?;
        if code != 200 || v["status"] != "success" {
            return Err(format!("{path} answered {code}: {body}"));
        }
        Ok(v["data"].clone())
    }

    /// An instant query's vector: each series' labels and value.
    fn query(&self, expr: &str) -> Result<Vec<Series>, String> {
        let data = self.api(&format!("/api/v1/query?query={}", url_encode(expr)))?;
        if data["resultType"] != "vector" {
            return Err(format!(
                "{expr}: a {} result, not a vector",
                data["resultType"]
            ));
        }
        let mut out = Vec::new();
        for s in data["result"].as_array().cloned().unwrap_or_default() {
            let labels = s["metric"]
                .as_object()
                .map(|m| {
                    m.iter()
                        .map(|(k, v)| (k.clone(), v.as_str().unwrap_or("").to_string()))
                        .collect()
                })
                .unwrap_or_default();
            // [time, "value"]; NaN and +Inf are spelt out.
            let value = s["value"][1]
                .as_str()
                .and_then(|v| v.parse::<f64>().ok())
                .ok_or_else(|| format!("{expr}: a sample without a value: {s}"))?;
            out.push((labels, value));
        }
        Ok(out)
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .arg(self.child.id().to_string())
            .status();
        let deadline = Instant::now() + Duration::from_secs(15);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Every PromQL expression of the dashboard (its panels' targets, rows included), as
/// Prometheus gets them from Grafana: `$team` (All) -> `.*`, `$__rate_interval` -> `1m`.
fn dashboard_exprs(dash: &Value) -> Result<Vec<(String, String)>, String> {
    fn walk(
        panels: &Value,
        out: &mut Vec<(String, String)>,
        ids: &mut BTreeSet<i64>,
    ) -> TestResult {
        for p in panels.as_array().cloned().unwrap_or_default() {
            let title = p["title"].as_str().unwrap_or("").to_string();
            let id = p["id"]
                .as_i64()
                .ok_or_else(|| format!("panel {title:?} has no id"))?;
            ensure(ids.insert(id), || format!("panel id {id} used twice"))?;
            walk(&p["panels"], out, ids)?;
            if p["type"] == "row" {
                continue;
            }
            let targets = p["targets"].as_array().cloned().unwrap_or_default();
            ensure(!targets.is_empty(), || {
                format!("panel {title:?} has no query")
            })?;
            for t in std::iter::once(&p).chain(targets.iter()) {
                ensure(t["datasource"]["uid"] == "${datasource}", || {
                    format!("panel {title:?}: a datasource other than ${{datasource}}: {t}")
                })?;
            }
            for t in &targets {
                let expr = t["expr"]
                    .as_str()
                    .ok_or_else(|| format!("panel {title:?}: a target without expr"))?;
                let expr = expr
                    .replace("${team}", ".*")
                    .replace("$team", ".*")
                    .replace("$__rate_interval", "1m");
                ensure(!expr.contains('$'), || {
                    format!("panel {title:?}: a variable the test does not know in {expr}")
                })?;
                out.push((title.clone(), expr));
            }
        }
        Ok(())
    }
    ensure(dash["schemaVersion"].as_u64().unwrap_or(0) >= 36, || {
        format!("schemaVersion {}", dash["schemaVersion"])
    })?;
    let mut out = Vec::new();
    walk(&dash["panels"], &mut out, &mut BTreeSet::new())?;
    Ok(out)
}

/// The dashboard's `team` variable: its `label_values(METRIC, LABEL)` query, and that it is
/// multi-valued with an All of `.*`; the Prometheus datasource variable.
fn team_variable(dash: &Value) -> Result<(String, String), String> {
    let vars = dash["templating"]["list"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let var = |name: &str| {
        vars.iter()
            .find(|v| v["name"] == name)
            .cloned()
            .ok_or_else(|| format!("the dashboard has no {name} variable"))
    };
    let ds = var("datasource")?;
    ensure(
        ds["type"] == "datasource" && ds["query"] == "prometheus",
        || format!("datasource variable: {ds}"),
    )?;
    let team = var("team")?;
    ensure(
        team["multi"] == true && team["includeAll"] == true && team["allValue"] == ".*",
        || format!("team variable is not multi-valued with All = .*: {team}"),
    )?;
    let q = team["definition"].as_str().unwrap_or("");
    ensure(team["query"]["query"] == q, || {
        format!("team variable: definition and query differ: {team}")
    })?;
    let inner = q
        .strip_prefix("label_values(")
        .and_then(|r| r.strip_suffix(')'))
        .ok_or_else(|| format!("team variable query {q:?} is not label_values(...)"))?;
    let (metric, label) = inner
        .split_once(',')
        .ok_or_else(|| format!("team variable query {q:?}"))?;
    Ok((metric.trim().to_string(), label.trim().to_string()))
}

/// The names the rules file records and alerts on.
fn rule_names(text: &str, key: &str) -> Vec<String> {
    text.lines()
        .filter_map(|l| l.trim().strip_prefix(&format!("- {key}:")))
        .map(|n| n.trim().to_string())
        .collect()
}

/// Each team's value of a query summed by team (absent teams: none).
fn by_team(series: &[Series]) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    for (labels, v) in series {
        if let Some(t) = labels.get("team") {
            *out.entry(t.clone()).or_insert(0.0) += v;
        }
    }
    out
}

fn dashboard_queries(c: &Cluster) -> TestResult {
    // What needs no cluster first: the rules, their unit tests, the example configuration and
    // the dashboard's shape.
    let rules_path = rules_file();
    let rules_text = std::fs::read_to_string(&rules_path)
        .map_err(|e| format!("{}: {e}", rules_path.display()))?;
    promtool(&["check", "rules", &rules_path.to_string_lossy()], None)?;
    let contrib = repo_root().join("contrib/prometheus");
    promtool(
        &[
            "test",
            "rules",
            &contrib.join("teamshare-rules.test.yml").to_string_lossy(),
        ],
        None,
    )?;
    promtool(
        &[
            "check",
            "config",
            &contrib.join("prometheus.yml").to_string_lossy(),
        ],
        None,
    )?;
    let dash_path = repo_root().join("contrib/grafana/teamshare.json");
    let dash: Value = serde_json::from_str(
        &std::fs::read_to_string(&dash_path)
            .map_err(|e| format!("{}: {e}", dash_path.display()))?,
    )
    .map_err(|e| format!("{}: not JSON: {e}", dash_path.display()))?;
    let exprs = dashboard_exprs(&dash)?;
    let (var_metric, var_label) = team_variable(&dash)?;
    let records = rule_names(&rules_text, "record");
    let alerts = rule_names(&rules_text, "alert");
    ensure(!records.is_empty() && !alerts.is_empty(), || {
        "no recording or alerting rule found in the rules file".into()
    })?;

    isolated(c, |c| {
        let started = Instant::now();
        let prom = Prometheus::start(c, c.metrics_addr())?;
        let result = with_prometheus(
            c,
            &prom,
            &exprs,
            (&var_metric, &var_label),
            &records,
            &alerts,
        );
        eprintln!(
            "monitoring: {} dashboard queries, {} recording rules, {} alerts, {:.1} s with Prometheus",
            exprs.len(),
            records.len(),
            alerts.len(),
            started.elapsed().as_secs_f64()
        );
        result.map_err(|e| format!("{e}\n{}", prom.log_tail()))
    })
}

fn with_prometheus(
    c: &Cluster,
    prom: &Prometheus,
    exprs: &[(String, String)],
    (var_metric, var_label): (&str, &str),
    records: &[String],
    alerts: &[String],
) -> TestResult {
    // The target is scraped.
    c.wait_for("Prometheus to scrape accountd (target up)", MINUTE, || {
        let data = prom.api("/api/v1/targets")?;
        let up = data["activeTargets"]
            .as_array()
            .cloned()
            .unwrap_or_default()
            .iter()
            .any(|t| {
                t["health"] == "up"
                    && t["scrapeUrl"]
                        .as_str()
                        .is_some_and(|u| u.contains(c.metrics_addr()))
            });
        Ok(up.then_some(()))
    })?;

    // NVML samples into the daemon's own spool ([accountd] sample_spool = "samples", beside
    // teamshare.toml): utilisation per team.
    let _samplers = start_samplers(c, &c.dir.join("etc/samples"), &[("n1", 80), ("n2", 30)])?;

    // agents at its quota with two experiment jobs; an inference job displaces one of them
    // (the governor's own requeue, reason=priority_class).
    let experiments = fill(c, "agents", 2, &["--qos=experiment"])?;
    let inference = c
        .submit_sleeps("agents", 1, LONG, &["--qos=inference"])?
        .remove(0);
    c.wait_for("the inference job to run", MINUTE, || {
        Ok((c.job_state(&inference)? == "RUNNING").then_some(()))
    })?;
    let displaced = c.wait_for("an experiment job displaced", MINUTE, || {
        Ok(experiments
            .iter()
            .find(|id| c.job_state(id).ok().as_deref() != Some("RUNNING"))
            .cloned())
    })?;
    // Out of the way: it would wait for agents' quota anyway.
    c.ok("scancel", &[&displaced])?;
    c.wait_running("agents", 2, MINUTE)?;

    // training takes its quota and borrows research's idle 2 GPUs: the cluster is full.
    fill(c, "training", 6, &[])?;
    wait_victims(c, 2)?;
    // research reclaims one: Slurm preempts a borrowed training job (a PREEMPTED run).
    fill(c, "research", 1, &[])?;
    c.wait_running("training", 5, MINUTE)?;
    c.wait_governor_pass()?;
    let running: BTreeMap<String, f64> = QUOTAS
        .iter()
        .map(|(t, _)| Ok((t.to_string(), c.count(t, "RUNNING")? as f64)))
        .collect::<Result<_, String>>()?;
    let expected: BTreeMap<String, f64> = [("agents", 2.0), ("research", 1.0), ("training", 5.0)]
        .iter()
        .map(|(t, n)| (t.to_string(), *n))
        .collect();
    ensure(running == expected, || {
        format!(
            "the cluster runs {running:?}, the scenario set up {expected:?}\n{}",
            c.diagnosis()
        )
    })?;

    // Every dashboard query returns series (rate() needs two scrapes; the month figures an
    // ingest of the runs, and the metrics' 10 s cache).
    let t0 = Instant::now();
    let mut counts = Vec::new();
    let waited = c.wait_for("every dashboard query to return series", 3 * MINUTE, || {
        counts.clear();
        for (title, expr) in exprs {
            counts.push((title.clone(), expr.clone(), prom.query(expr)?.len()));
        }
        Ok(counts.iter().all(|(_, _, n)| *n > 0).then_some(()))
    });
    if let Err(e) = waited {
        let empty: Vec<String> = counts
            .iter()
            .filter(|(_, _, n)| *n == 0)
            .map(|(t, e, _)| format!("  {t}: {e}"))
            .collect();
        let families: BTreeSet<String> = c
            .metrics()
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.strip_prefix("# TYPE "))
            .filter_map(|l| l.split_whitespace().next().map(String::from))
            .collect();
        return Err(format!(
            "{e}; without series:\n{}\nfamilies on /metrics: {families:?}",
            empty.join("\n")
        ));
    }
    eprintln!(
        "all {} dashboard queries return series after {:.1} s:",
        counts.len(),
        t0.elapsed().as_secs_f64()
    );
    for (title, expr, n) in &counts {
        eprintln!("  {n:>2} series  {title}: {expr}");
    }

    // The exposition as Prometheus scraped it passes promtool's lint.
    promtool(&["check", "metrics"], Some(&c.metrics()?))?;

    // The recording rules all evaluate to series.
    let mut empty = Vec::new();
    let recorded = c.wait_for("every recording rule to have series", MINUTE, || {
        empty.clear();
        let mut counts = Vec::new();
        for r in records {
            let n = prom.query(r)?.len();
            if n == 0 {
                empty.push(r.clone());
            }
            counts.push((r.clone(), n));
        }
        Ok(empty.is_empty().then_some(counts))
    });
    let recorded = recorded.map_err(|e| format!("{e}: {empty:?} have none"))?;
    for (r, n) in &recorded {
        eprintln!("  {n:>2} series  {r}");
    }

    // Prometheus loaded every rule of the file, none fails to evaluate, and the alerts on a
    // healthy daemon are quiet.
    let groups = prom.api("/api/v1/rules")?["groups"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let loaded: Vec<Value> = groups
        .iter()
        .flat_map(|g| g["rules"].as_array().cloned().unwrap_or_default())
        .collect();
    let names = |kind: &str| -> BTreeSet<String> {
        loaded
            .iter()
            .filter(|r| r["type"] == kind)
            .filter_map(|r| r["name"].as_str().map(String::from))
            .collect()
    };
    let want_records: BTreeSet<String> = records.iter().cloned().collect();
    let want_alerts: BTreeSet<String> = alerts.iter().cloned().collect();
    ensure(names("recording") == want_records, || {
        format!(
            "recording rules loaded {:?}, in the file {want_records:?}",
            names("recording")
        )
    })?;
    ensure(names("alerting") == want_alerts, || {
        format!(
            "alerts loaded {:?}, in the file {want_alerts:?}",
            names("alerting")
        )
    })?;
    for r in &loaded {
        ensure(r["health"] == "ok", || {
            format!("rule {} does not evaluate: {r}", r["name"])
        })?;
    }
    for quiet in [
        "TeamshareMetricsDown",
        "TeamshareGovernorNeverPassed",
        "TeamshareGovernorStale",
        "TeamshareIngestStale",
        "TeamshareCapacityDropped",
        "TeamshareQuotasExceedCapacity",
    ] {
        let rule = loaded
            .iter()
            .find(|r| r["name"] == quiet)
            .ok_or_else(|| format!("no alert {quiet} loaded"))?;
        ensure(rule["state"] == "inactive", || {
            format!("{quiet} is {} on a healthy cluster: {rule}", rule["state"])
        })?;
    }

    // The team variable lists the configured teams.
    let values = prom.api(&format!(
        "/api/v1/label/{var_label}/values?match[]={}",
        url_encode(var_metric)
    ))?;
    let teams: BTreeSet<&str> = values
        .as_array()
        .map(|v| v.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let configured: BTreeSet<&str> = QUOTAS.iter().map(|(t, _)| *t).collect();
    ensure(teams == configured, || {
        format!("the team variable would list {teams:?}, configured {configured:?}")
    })?;

    // Concrete figures: Prometheus' GPUs in use per team are what the cluster runs (one GPU a
    // job), split at the quota; the quotas are the configuration's; no GPU is idle.
    let quotas: BTreeMap<String, f64> = QUOTAS
        .iter()
        .map(|(t, q)| (t.to_string(), f64::from(*q)))
        .collect();
    let mut seen = String::new();
    let agreed = c.wait_for(
        "Prometheus' GPUs in use to match the cluster",
        MINUTE,
        || {
            let running: BTreeMap<String, f64> = QUOTAS
                .iter()
                .map(|(t, _)| Ok((t.to_string(), c.count(t, "RUNNING")? as f64)))
                .collect::<Result<_, String>>()?;
            let borrowed_expected: BTreeMap<String, f64> = running
                .iter()
                .map(|(t, n)| (t.clone(), (n - quotas[t]).max(0.0)))
                .collect();
            let in_use = by_team(&prom.query("team:teamshare_gpus_in_use:sum")?);
            let borrowed = by_team(&prom.query("team:teamshare_gpus_borrowed:sum")?);
            let quota = by_team(&prom.query("teamshare_quota_gpus")?);
            let idle = prom.query("cluster:teamshare_gpus_idle:sum")?;
            seen = format!(
                "squeue {running:?}; Prometheus in use {in_use:?}, borrowed {borrowed:?} \
             (expected {borrowed_expected:?}), quotas {quota:?}, idle {idle:?}"
            );
            Ok((in_use == running
                && borrowed == borrowed_expected
                && quota == quotas
                && idle.len() == 1
                && idle[0].1 == 0.0)
                .then_some(()))
        },
    );
    eprintln!("monitoring: {seen}");
    agreed.map_err(|e| format!("{e}: {seen}"))
}
