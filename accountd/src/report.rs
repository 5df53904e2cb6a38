//! Reports: GPU-hours, jobs, quota and cost per team over a period, and their renderings.
//!
//! For a run of g GPUs over [start, end) (end = now while it runs), its allocated GPU-seconds in a
//! period are g x overlap([start, end), [since, until)) (DESIGN 5). A team is a Slurm account.
//! `jobs` counts the runs that held GPUs during the period (a requeued job's runs count apart).
//! Cost: typed GPUs at their type's rate, untyped ones (and types without a rate) at the
//! `default` rate; with no rates configured there is no cost.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::Serialize;
use teamshare_config::Config;

use crate::period::{format_local, format_rfc3339, Period, UnixSeconds};
use crate::slurm_cli::slurm_name;
use crate::store::{RunUsage, Store, StoreError};

/// The rate name used for GPUs without a type, and for types without their own rate.
pub const DEFAULT_RATE: &str = "default";

/// Hourly rates per GPU type.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Rates {
    per_hour: BTreeMap<String, f64>,
}

impl Rates {
    pub fn new(per_hour: BTreeMap<String, f64>) -> Self {
        Rates { per_hour }
    }

    pub fn from_config(config: &Config) -> Self {
        Rates::new(
            config
                .gpu_types
                .iter()
                .map(|(name, t)| (name.clone(), t.rate_per_hour))
                .collect(),
        )
    }

    pub fn is_empty(&self) -> bool {
        self.per_hour.is_empty()
    }

    /// The hourly rate of a GPU of `gpu_type` (None: untyped).
    pub fn rate(&self, gpu_type: Option<&str>) -> f64 {
        gpu_type
            .and_then(|t| self.per_hour.get(t))
            .or_else(|| self.per_hour.get(DEFAULT_RATE))
            .copied()
            .unwrap_or(0.0)
    }
}

/// A team known to the configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfiguredTeam {
    pub name: String,
    pub quota: u32,
}

/// What a usage report needs besides the runs.
#[derive(Debug, Clone, PartialEq)]
pub struct UsageParams {
    pub cluster: String,
    pub period: Period,
    /// The instant running jobs are counted up to.
    pub now: UnixSeconds,
    pub teams: Vec<ConfiguredTeam>,
    pub rates: Rates,
    pub currency: Option<String>,
    /// Only these teams (accounts); empty: every configured team and every account with usage.
    pub only: Vec<String>,
}

impl UsageParams {
    pub fn from_config(
        config: &Config,
        period: Period,
        now: UnixSeconds,
        only: Vec<String>,
    ) -> Self {
        // Compared as Slurm keeps names, in lower case (team names are lower case already).
        UsageParams {
            cluster: slurm_name(&config.cluster.name),
            period,
            now,
            teams: config
                .teams
                .iter()
                .map(|t| ConfiguredTeam {
                    name: t.name.clone(),
                    quota: t.quota.total,
                })
                .collect(),
            rates: Rates::from_config(config),
            currency: Some(config.cluster.currency.clone()).filter(|c| !c.is_empty()),
            only: only.iter().map(|t| slurm_name(t)).collect(),
        }
    }
}

/// One team's line.
#[derive(Debug, Clone, PartialEq)]
pub struct TeamUsage {
    pub team: String,
    pub jobs: u64,
    pub gpu_seconds: u128,
    /// None: the account is not a team of the configuration.
    pub quota: Option<u32>,
    /// None: no rates are configured.
    pub cost: Option<f64>,
}

impl TeamUsage {
    pub fn gpu_hours(&self) -> f64 {
        self.gpu_seconds as f64 / 3600.0
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct UsageReport {
    pub cluster: String,
    pub period: Period,
    pub currency: Option<String>,
    /// Ordered by team name.
    pub rows: Vec<TeamUsage>,
}

/// Read the runs of the period and compute the report.
pub fn usage_report(store: &Store, params: &UsageParams) -> Result<UsageReport, StoreError> {
    let runs = store.runs_overlapping(&params.cluster, params.period.since, params.period.until)?;
    Ok(compute_usage(&runs, params))
}

/// The arithmetic of the usage report, over runs already read.
pub fn compute_usage(runs: &[RunUsage], params: &UsageParams) -> UsageReport {
    let with_cost = !params.rates.is_empty();
    let mut rows: BTreeMap<String, TeamUsage> = BTreeMap::new();
    let row = |rows: &mut BTreeMap<String, TeamUsage>, name: &str| {
        if !rows.contains_key(name) {
            let quota = params
                .teams
                .iter()
                .find(|t| t.name == name)
                .map(|t| t.quota);
            rows.insert(
                name.to_string(),
                TeamUsage {
                    team: name.to_string(),
                    jobs: 0,
                    gpu_seconds: 0,
                    quota,
                    cost: with_cost.then_some(0.0),
                },
            );
        }
    };
    let wanted = |name: &str| params.only.is_empty() || params.only.iter().any(|o| o == name);
    if params.only.is_empty() {
        for t in &params.teams {
            row(&mut rows, &t.name);
        }
    } else {
        for name in &params.only {
            row(&mut rows, name);
        }
    }
    for run in runs {
        if run.gpus == 0 || !wanted(&run.account) {
            continue;
        }
        // A run without an end is still running: count it up to now.
        let end = run.end.unwrap_or(params.now);
        let seconds = params.period.overlap(run.start, end);
        if seconds <= 0 {
            continue;
        }
        let seconds = seconds as u128;
        row(&mut rows, &run.account);
        let r = rows.get_mut(&run.account).expect("row just ensured");
        r.jobs += 1;
        r.gpu_seconds += u128::from(run.gpus) * seconds;
        if let Some(cost) = r.cost.as_mut() {
            let typed: u64 = run.gpus_by_type.values().sum();
            let mut run_cost = 0.0;
            for (gpu_type, n) in &run.gpus_by_type {
                run_cost += *n as f64 * params.rates.rate(Some(gpu_type));
            }
            run_cost += run.gpus.saturating_sub(typed) as f64 * params.rates.rate(None);
            *cost += run_cost * seconds as f64 / 3600.0;
        }
    }
    UsageReport {
        cluster: params.cluster.clone(),
        period: params.period,
        currency: params.currency.clone(),
        rows: rows.into_values().collect(),
    }
}

/// Output formats of every report.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Table,
    Csv,
    Json,
}

pub fn render<Tz: chrono::TimeZone>(report: &UsageReport, format: Format, tz: &Tz) -> String
where
    Tz::Offset: std::fmt::Display,
{
    match format {
        Format::Table => render_table(report, tz),
        Format::Csv => render_csv(report),
        Format::Json => render_json(report),
    }
}

fn render_table<Tz: chrono::TimeZone>(report: &UsageReport, tz: &Tz) -> String
where
    Tz::Offset: std::fmt::Display,
{
    let cost_header = match &report.currency {
        Some(c) => format!("COST ({c})"),
        None => "COST".to_string(),
    };
    let header = ["TEAM", "JOBS", "GPU-HOURS", "QUOTA", cost_header.as_str()];
    let cost_cell = |c: Option<f64>| c.map(|c| format!("{c:.2}")).unwrap_or_default();
    let mut lines: Vec<[String; 5]> = report
        .rows
        .iter()
        .map(|r| {
            [
                r.team.clone(),
                r.jobs.to_string(),
                format!("{:.4}", r.gpu_hours()),
                r.quota.map(|q| q.to_string()).unwrap_or_default(),
                cost_cell(r.cost),
            ]
        })
        .collect();
    let total_seconds: u128 = report.rows.iter().map(|r| r.gpu_seconds).sum();
    let total_quota: Option<u64> = report
        .rows
        .iter()
        .filter_map(|r| r.quota.map(u64::from))
        .reduce(|a, b| a + b);
    let total_cost: Option<f64> = report
        .rows
        .iter()
        .filter_map(|r| r.cost)
        .reduce(|a, b| a + b);
    lines.push([
        "total".to_string(),
        report.rows.iter().map(|r| r.jobs).sum::<u64>().to_string(),
        format!("{:.4}", total_seconds as f64 / 3600.0),
        total_quota.map(|q| q.to_string()).unwrap_or_default(),
        cost_cell(total_cost),
    ]);
    let mut widths: [usize; 5] = header.map(str::len);
    for l in &lines {
        for (w, cell) in widths.iter_mut().zip(l) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let _ = writeln!(
        out,
        "GPU usage on {} from {} to {} (local time)",
        report.cluster,
        format_local(report.period.since, tz).replace('T', " "),
        format_local(report.period.until, tz).replace('T', " "),
    );
    let push_row = |out: &mut String, cells: [&str; 5]| {
        let mut line = format!("{:<w$}", cells[0], w = widths[0]);
        for (cell, w) in cells[1..].iter().zip(&widths[1..]) {
            let _ = write!(line, "  {cell:>w$}");
        }
        let _ = writeln!(out, "{}", line.trim_end());
    };
    push_row(&mut out, header);
    let rule: Vec<String> = widths.iter().map(|w| "-".repeat(*w)).collect();
    let n = lines.len();
    for (i, l) in lines.iter().enumerate() {
        if i + 1 == n {
            push_row(&mut out, [&rule[0], &rule[1], &rule[2], &rule[3], &rule[4]]);
        }
        push_row(&mut out, [&l[0], &l[1], &l[2], &l[3], &l[4]]);
    }
    out
}

/// Quote a CSV field when it needs it (RFC 4180).
fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

fn render_csv(report: &UsageReport) -> String {
    let mut out = String::from("team,jobs,gpu_hours,quota,cost,currency,since,until\n");
    let since = format_rfc3339(report.period.since);
    let until = format_rfc3339(report.period.until);
    for r in &report.rows {
        let _ = writeln!(
            out,
            "{},{},{:.4},{},{},{},{},{}",
            csv_field(&r.team),
            r.jobs,
            r.gpu_hours(),
            r.quota.map(|q| q.to_string()).unwrap_or_default(),
            r.cost.map(|c| format!("{c:.2}")).unwrap_or_default(),
            csv_field(report.currency.as_deref().unwrap_or("")),
            since,
            until
        );
    }
    out
}

/// One element of the JSON array. Keys are an interface: keep them.
#[derive(Serialize)]
struct JsonRow<'a> {
    team: &'a str,
    jobs: u64,
    gpu_hours: f64,
    quota: Option<u32>,
    cost: Option<f64>,
    currency: Option<&'a str>,
    since: String,
    until: String,
}

fn render_json(report: &UsageReport) -> String {
    let since = format_rfc3339(report.period.since);
    let until = format_rfc3339(report.period.until);
    let rows: Vec<JsonRow<'_>> = report
        .rows
        .iter()
        .map(|r| JsonRow {
            team: &r.team,
            jobs: r.jobs,
            gpu_hours: r.gpu_hours(),
            quota: r.quota,
            cost: r.cost,
            currency: report.currency.as_deref(),
            since: since.clone(),
            until: until.clone(),
        })
        .collect();
    let mut s = serde_json::to_string_pretty(&rows).expect("plain data serialises");
    s.push('\n');
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::Utc;

    const H: i64 = 3600;

    fn run(id: i64, account: &str, start: i64, end: Option<i64>, gpus: u64) -> RunUsage {
        RunUsage {
            id,
            account: account.into(),
            start,
            end,
            gpus,
            gpus_by_type: BTreeMap::new(),
        }
    }

    fn params(period: Period, now: i64) -> UsageParams {
        UsageParams {
            cluster: "c".into(),
            period,
            now,
            teams: vec![
                ConfiguredTeam {
                    name: "training".into(),
                    quota: 4,
                },
                ConfiguredTeam {
                    name: "agents".into(),
                    quota: 2,
                },
            ],
            rates: Rates::new(BTreeMap::from([
                ("default".to_string(), 10.0),
                ("h100".to_string(), 70.0),
            ])),
            currency: Some("BRL".into()),
            only: vec![],
        }
    }

    fn by_team(r: &UsageReport, team: &str) -> TeamUsage {
        r.rows.iter().find(|t| t.team == team).unwrap().clone()
    }

    #[test]
    fn runs_are_clipped_at_the_period_bounds() {
        let period = Period {
            since: 10 * H,
            until: 20 * H,
        };
        let runs = [
            run(1, "agents", 8 * H, Some(12 * H), 2), // 2 h inside x 2 GPUs
            run(2, "agents", 19 * H, Some(25 * H), 1), // 1 h inside
            run(3, "agents", 0, Some(10 * H), 8),     // ends at since: nothing
            run(4, "agents", 20 * H, Some(21 * H), 8), // starts at until: nothing
            run(5, "agents", 12 * H, Some(13 * H), 0), // no GPUs: not counted
        ];
        let r = compute_usage(&runs, &params(period, 30 * H));
        let a = by_team(&r, "agents");
        assert_eq!(a.gpu_seconds, (4 + 1) as u128 * 3600);
        assert_eq!(a.jobs, 2);
        assert!((a.gpu_hours() - 5.0).abs() < 1e-12);
        assert!((a.cost.unwrap() - 50.0).abs() < 1e-9);
        assert_eq!(a.quota, Some(2));
    }

    #[test]
    fn running_jobs_count_up_to_now() {
        let period = Period {
            since: 0,
            until: 100 * H,
        };
        let runs = [run(1, "training", 10 * H, None, 4)];
        let r = compute_usage(&runs, &params(period, 13 * H + 1800));
        assert_eq!(by_team(&r, "training").gpu_seconds, 4 * (3 * 3600 + 1800));
        // Now past the period's end: clipped at until.
        let r = compute_usage(
            &runs,
            &params(
                Period {
                    since: 0,
                    until: 11 * H,
                },
                50 * H,
            ),
        );
        assert_eq!(by_team(&r, "training").gpu_seconds, 4 * 3600);
    }

    #[test]
    fn typed_gpus_cost_their_type_rate() {
        let period = Period { since: 0, until: H };
        let mut typed = run(1, "training", 0, Some(H), 3);
        typed.gpus_by_type.insert("h100".into(), 2);
        typed.gpus_by_type.insert("l4".into(), 1); // no rate of its own: default
        let r = compute_usage(&[typed], &params(period, H));
        assert!((by_team(&r, "training").cost.unwrap() - (140.0 + 10.0)).abs() < 1e-9);
    }

    #[test]
    fn without_rates_there_is_no_cost() {
        let period = Period { since: 0, until: H };
        let mut p = params(period, H);
        p.rates = Rates::default();
        let r = compute_usage(&[run(1, "agents", 0, Some(H), 1)], &p);
        assert_eq!(by_team(&r, "agents").cost, None);
    }

    #[test]
    fn rows_are_configured_teams_and_accounts_with_usage_by_name() {
        let period = Period { since: 0, until: H };
        let runs = [
            run(1, "zeta", 0, Some(H), 1),
            run(2, "alpha", 0, Some(H), 1),
        ];
        let r = compute_usage(&runs, &params(period, H));
        let names: Vec<_> = r.rows.iter().map(|t| t.team.as_str()).collect();
        assert_eq!(names, ["agents", "alpha", "training", "zeta"]);
        assert_eq!(by_team(&r, "zeta").quota, None);
        assert_eq!(by_team(&r, "training").jobs, 0);
        let mut only = params(period, H);
        only.only = vec!["zeta".into(), "agents".into()];
        let r = compute_usage(&runs, &only);
        let names: Vec<_> = r.rows.iter().map(|t| t.team.as_str()).collect();
        assert_eq!(names, ["agents", "zeta"]);
    }

    fn sample() -> UsageReport {
        let period = Period {
            since: 1_714_521_600,
            until: 1_714_521_600 + 10 * H,
        };
        let runs = [
            run(1, "agents", period.since, Some(period.since + 1000), 1),
            run(2, "training", period.since, Some(period.since + 2 * H), 4),
            run(3, "other", period.since, Some(period.since + H), 1),
        ];
        compute_usage(&runs, &params(period, period.until))
    }

    #[test]
    fn table_is_aligned_with_a_total_row() {
        let t = render(&sample(), Format::Table, &Utc);
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(
            lines[0],
            "GPU usage on c from 2024-05-01 00:00:00 to 2024-05-01 10:00:00 (local time)"
        );
        assert!(lines[1].starts_with("TEAM"));
        assert!(lines[1].ends_with("COST (BRL)"));
        assert!(lines[2].contains("0.2778"), "{t}");
        assert!(lines
            .iter()
            .any(|l| l.starts_with("other") && l.contains("1.0000")));
        let total = lines.last().unwrap();
        assert!(total.starts_with("total"));
        assert!(total.contains("9.2778"), "{t}");
        assert!(total.contains(" 6 ") || total.contains(" 6  "), "{t}");
        // Every line but the title has the same width (numbers right-aligned).
        let w = lines[1].len();
        assert!(lines[2..].iter().all(|l| l.len() <= w), "{t}");
        assert_eq!(lines[2].len(), w, "{t}");
    }

    #[test]
    fn csv_has_a_header_and_one_row_per_team() {
        let c = render(&sample(), Format::Csv, &Utc);
        let lines: Vec<&str> = c.lines().collect();
        assert_eq!(
            lines[0],
            "team,jobs,gpu_hours,quota,cost,currency,since,until"
        );
        assert_eq!(
            lines[1],
            "agents,1,0.2778,2,2.78,BRL,2024-05-01T00:00:00Z,2024-05-01T10:00:00Z"
        );
        assert_eq!(
            lines[2],
            "other,1,1.0000,,10.00,BRL,2024-05-01T00:00:00Z,2024-05-01T10:00:00Z"
        );
        assert_eq!(lines.len(), 4);
        assert_eq!(csv_field("a,b"), "\"a,b\"");
    }

    #[test]
    fn json_has_stable_keys_and_full_precision() {
        let j = render(&sample(), Format::Json, &Utc);
        let v: serde_json::Value = serde_json::from_str(&j).unwrap();
        let rows = v.as_array().unwrap();
        assert_eq!(rows.len(), 3);
        let agents = &rows[0];
        let mut keys: Vec<&str> = agents
            .as_object()
            .unwrap()
            .keys()
            .map(|k| k.as_str())
            .collect();
        keys.sort();
        assert_eq!(
            keys,
            [
                "cost",
                "currency",
                "gpu_hours",
                "jobs",
                "quota",
                "since",
                "team",
                "until"
            ]
        );
        assert_eq!(agents["team"], "agents");
        assert_eq!(agents["gpu_hours"].as_f64().unwrap(), 1000.0 / 3600.0);
        assert_eq!(agents["since"], "2024-05-01T00:00:00Z");
        assert!(rows[1]["quota"].is_null());
    }
}

#[cfg(test)]
mod config_tests {
    use super::*;

    #[test]
    fn names_from_the_configuration_are_compared_as_slurm_keeps_them() {
        let config = teamshare_config::parse(
            r#"
[cluster]
name = "GPU-Cluster"
partitions = ["gpu"]
currency = "BRL"

[[team]]
name = "agents"
quota = 2
weight = 1
"#,
            "teamshare.toml",
        )
        .unwrap();
        let period = Period {
            since: 0,
            until: 3600,
        };
        let p = UsageParams::from_config(&config, period, 3600, vec!["AGENTS".into()]);
        assert_eq!(p.cluster, "gpu-cluster");
        assert_eq!(p.teams[0].name, "agents");
        assert_eq!(p.only, ["agents"]);
        assert_eq!(p.currency.as_deref(), Some("BRL"));
        assert!(p.rates.is_empty());
        let runs = [RunUsage {
            id: 1,
            account: "agents".into(),
            start: 0,
            end: Some(1800),
            gpus: 2,
            gpus_by_type: BTreeMap::new(),
        }];
        let r = compute_usage(&runs, &p);
        assert_eq!(r.rows.len(), 1);
        assert_eq!(r.rows[0].quota, Some(2));
        assert_eq!(r.rows[0].gpu_seconds, 3600);
        assert_eq!(r.rows[0].cost, None);
    }
}
