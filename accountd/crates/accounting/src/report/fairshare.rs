//! `report fairshare`: each team's decayed usage and fair-share factor, as the governor sets
//! them, and its table, CSV and JSON.
//!
//! - Fair-share: decayed usage in the governed partitions, each GPU-second at its type's rate.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Serialize;
use teamshare_config::{format_duration, Config};

use crate::model::fairshare::{decayed_seconds, team_fair_shares};
use crate::model::find_or_push;
use crate::period::{format_local, format_rfc3339, UnixSeconds};
use crate::slurm_cli::slurm_name;
use crate::store::{RunUsage, Store, StoreError};

use super::render::{csv_text, json_text, CsvNumbers, JsonNumbers, Numbers};
use super::table;
use super::teams::{hours, money};
use super::{run_keys, Format, Rates, DEFAULT_RATE, SECONDS_PER_HOUR};

/// What the fair-share report needs besides the database.
#[derive(Debug, Clone, PartialEq)]
pub struct FairshareParams {
    pub cluster: String,
    /// The instant usage is decayed to (running jobs count up to it).
    pub as_of: UnixSeconds,
    /// Usage before this instant is not read.
    pub since: UnixSeconds,
    pub half_life: Duration,
    pub dampening: f64,
    /// Every configured team's weight.
    pub weights: BTreeMap<String, u32>,
    /// What a GPU-second of each type weighs in the usage ([`Rates::usage_weight`]).
    pub rates: Rates,
    /// The governed partitions: usage elsewhere does not count. Empty: every partition.
    pub partitions: Vec<String>,
    pub currency: Option<String>,
    /// Only these teams; empty: every team and every account with usage.
    pub only: Vec<String>,
}

/// How many half-lives of usage the fair-share reads by default: older usage weighs under 0.1 %.
pub const FAIRSHARE_HORIZON_HALF_LIVES: u64 = 10;

impl FairshareParams {
    /// `since` None: [`FAIRSHARE_HORIZON_HALF_LIVES`] half-lives before `as_of`, or all the
    /// history when the half-life is 0 (no decay).
    pub fn from_config(
        config: &Config,
        as_of: UnixSeconds,
        since: Option<UnixSeconds>,
        only: Vec<String>,
    ) -> Self {
        let half_life = config.accountd.fairshare_half_life;
        let since = since.unwrap_or_else(|| default_fairshare_since(as_of, half_life));
        FairshareParams {
            cluster: slurm_name(&config.cluster.name),
            as_of,
            since,
            half_life,
            dampening: config.accountd.fairshare_dampening,
            weights: crate::model::fairshare::weights_from_config(config),
            rates: Rates::from_config(config),
            partitions: config.cluster.partitions.clone(),
            currency: Some(config.cluster.currency.clone()).filter(|c| !c.is_empty()),
            only: only.iter().map(|t| slurm_name(t)).collect(),
        }
    }

    fn governs(&self, partition: &str) -> bool {
        self.partitions.is_empty()
            || partition
                .split(',')
                .any(|p| self.partitions.iter().any(|g| g == p))
    }
}

/// The start of the usage the fair-share reads by default.
pub fn default_fairshare_since(as_of: UnixSeconds, half_life: Duration) -> UnixSeconds {
    if half_life.is_zero() {
        return 0;
    }
    let horizon = half_life
        .as_secs()
        .saturating_mul(FAIRSHARE_HORIZON_HALF_LIVES);
    as_of.saturating_sub(i64::try_from(horizon).unwrap_or(i64::MAX))
}

/// One team's (or account's) fair-share figures.
#[derive(Debug, Clone, PartialEq)]
pub struct FairshareRow {
    pub team: String,
    /// None: an account with usage that is not a team (it has no shares).
    pub weight: Option<u32>,
    /// S: the weight over the sum of weights.
    pub normalized_shares: f64,
    /// GPU-seconds, each decayed by its age.
    pub decayed_gpu_seconds: f64,
    /// The same with each GPU-second at its type's hourly rate, divided by 3600: the decayed
    /// cost of the usage, in the cluster's currency. None where usage is not weighted (no rate
    /// above 0).
    pub decayed_cost: Option<f64>,
    /// U: the decayed usage (the cost where weighted) over every account's.
    pub normalized_usage: f64,
    /// F = 2^(-U/S/d).
    pub factor: f64,
}

/// The fair-share report: every team's factor as of an instant.
#[derive(Debug, Clone, PartialEq)]
pub struct FairshareReport {
    pub cluster: String,
    pub as_of: UnixSeconds,
    pub since: UnixSeconds,
    pub half_life: Duration,
    pub dampening: f64,
    /// Whether usage is weighted by each GPU type's rate ([`Rates::weigh_usage`]).
    pub cost_weighted: bool,
    pub currency: Option<String>,
    /// By team name.
    pub rows: Vec<FairshareRow>,
}

impl FairshareReport {
    /// The factor of every configured team (accounts without a weight left out): what the
    /// governor ranks borrowers by, from the same computation as the report.
    pub fn factors(&self) -> BTreeMap<String, f64> {
        self.rows
            .iter()
            .filter(|r| r.weight.is_some())
            .map(|r| (r.team.clone(), r.factor))
            .collect()
    }
}

/// Read the usage since `params.since` and compute the fair-share report.
pub fn fairshare_report(
    store: &Store,
    params: &FairshareParams,
) -> Result<FairshareReport, StoreError> {
    let mut runs = store.runs_overlapping(&params.cluster, params.since, params.as_of)?;
    super::count_shards(&mut runs, &params.rates);
    Ok(compute_fairshare(&runs, params))
}

/// The arithmetic of [`fairshare_report`], over runs already read: each run in the governed
/// partitions, clipped to `[since, as_of)`, decayed to `as_of`; each of its GPU-seconds weighs
/// its type's rate ([`Rates::usage_weight`]), so that the factor ranks teams by what their
/// usage cost, not only by GPU-seconds. Usage is normalised over every account's, so a weight
/// common to every GPU (one rate, or none) changes no factor.
pub fn compute_fairshare(runs: &[RunUsage], params: &FairshareParams) -> FairshareReport {
    let weighted = params.rates.weigh_usage();
    // Per account: decayed GPU-seconds, and the same with each GPU at its weight. Few accounts:
    // a short list, the last one tried first.
    let (mut accounts, mut last): (Vec<(&str, f64, f64)>, usize) = (Vec::new(), usize::MAX);
    for run in runs {
        if run.gpus == 0 || !params.governs(&run.partition) {
            continue;
        }
        let end = run.end.unwrap_or(params.as_of);
        let decayed = decayed_seconds(
            run.start.max(params.since),
            end,
            params.as_of,
            params.half_life,
        );
        let (mut gpus, mut weight) = (0u64, 0.0);
        for (key, n) in run_keys(run) {
            gpus += n;
            let gpu_type = (key != DEFAULT_RATE).then_some(key);
            weight += n as f64 * params.rates.usage_weight(gpu_type);
        }
        let name: &str = &run.account;
        let i = find_or_push(
            &mut accounts,
            &mut last,
            |a| a.0 == name,
            || (name, 0.0, 0.0),
        );
        accounts[i].1 += gpus as f64 * decayed;
        accounts[i].2 += weight * decayed;
    }
    let usage: BTreeMap<String, (f64, f64)> = accounts
        .into_iter()
        .map(|(name, plain, cost)| (name.to_string(), (plain, cost)))
        .collect();
    let basis: BTreeMap<String, f64> = usage
        .iter()
        .map(|(a, &(plain, cost))| (a.clone(), if weighted { cost } else { plain }))
        .collect();
    // Accounts with usage but no team have no shares (Slurm: factor 0 once they use anything).
    let mut shares = params.weights.clone();
    for account in usage.keys() {
        shares.entry(account.clone()).or_insert(0);
    }
    let mut rows: Vec<FairshareRow> = team_fair_shares(&shares, &basis, params.dampening)
        .into_iter()
        .map(|f| {
            let (plain, cost) = usage.get(&f.path).copied().unwrap_or((0.0, 0.0));
            FairshareRow {
                weight: params.weights.get(&f.path).copied(),
                decayed_gpu_seconds: plain,
                decayed_cost: weighted.then_some(cost / SECONDS_PER_HOUR),
                normalized_shares: f.normalized_shares,
                normalized_usage: f.actual_usage,
                factor: f.factor,
                team: f.path,
            }
        })
        .collect();
    if !params.only.is_empty() {
        rows.retain(|r| params.only.contains(&r.team));
    }
    FairshareReport {
        cluster: params.cluster.clone(),
        as_of: params.as_of,
        since: params.since,
        half_life: params.half_life,
        dampening: params.dampening,
        cost_weighted: weighted,
        currency: params.currency.clone(),
        rows,
    }
}

/// The fair-share report as a table, CSV or JSON.
pub fn render_fairshare<Tz: chrono::TimeZone>(
    report: &FairshareReport,
    format: Format,
    tz: &Tz,
) -> String
where
    Tz::Offset: std::fmt::Display,
{
    let currency = report
        .currency
        .as_deref()
        .map(|c| format!(" ({c})"))
        .unwrap_or_default();
    match format {
        Format::Table => {
            let mut header: Vec<String> = ["TEAM", "WEIGHT", "SHARE", "DECAYED GPU-HOURS"]
                .map(String::from)
                .to_vec();
            if report.cost_weighted {
                header.push(format!("DECAYED COST{currency}"));
            }
            header.extend(["USAGE", "FACTOR"].map(String::from));
            let lines: Vec<Vec<String>> = report
                .rows
                .iter()
                .map(|r| {
                    let mut v = vec![
                        r.team.clone(),
                        r.weight.map(|w| w.to_string()).unwrap_or_default(),
                        format!("{:.4}", r.normalized_shares),
                        hours(r.decayed_gpu_seconds / SECONDS_PER_HOUR),
                    ];
                    if report.cost_weighted {
                        v.push(money(r.decayed_cost));
                    }
                    v.push(format!("{:.4}", r.normalized_usage));
                    v.push(format!("{:.4}", r.factor));
                    v
                })
                .collect();
            let mut out = format!(
                "Fair-share on {} as of {} (local time): usage since {}, half-life {}, dampening {}\n",
                report.cluster,
                format_local(report.as_of, tz).replace('T', " "),
                format_local(report.since, tz).replace('T', " "),
                if report.half_life.is_zero() {
                    "0 (no decay)".to_string()
                } else {
                    format_duration(report.half_life)
                },
                report.dampening
            );
            out.push_str(if report.cost_weighted {
                "usage: GPU-hours in the governed partitions, each at its GPU type's rate (USAGE is the share of the decayed cost)\n"
            } else {
                "usage: GPU-hours in the governed partitions (no rates: every GPU-hour alike)\n"
            });
            out.push_str(&table::render(&header, &lines, 1, None));
            out
        }
        Format::Csv => csv_text(fairshare_rows::<CsvNumbers>(report)),
        Format::Json => json_text(&fairshare_rows::<JsonNumbers>(report)),
    }
}

/// One row of the fair-share report: a CSV line, an element of the JSON array. Names and order
/// are an interface: keep them. CSV writes the numbers as Rust prints them, to full precision.
#[derive(Serialize, Default)]
struct FairshareLine<'a, N: Numbers> {
    team: &'a str,
    weight: Option<u32>,
    normalized_shares: N::Number,
    decayed_gpu_hours: N::Number,
    normalized_usage: N::Number,
    fairshare_factor: N::Number,
    since: String,
    as_of: String,
    half_life_seconds: u64,
    decayed_cost: Option<N::Number>,
}

fn fairshare_rows<N: Numbers>(report: &FairshareReport) -> Vec<FairshareLine<'_, N>> {
    let num = |v: f64| N::number(v, None);
    report
        .rows
        .iter()
        .map(|r| FairshareLine {
            team: &r.team,
            weight: r.weight,
            normalized_shares: num(r.normalized_shares),
            decayed_gpu_hours: num(r.decayed_gpu_seconds / SECONDS_PER_HOUR),
            normalized_usage: num(r.normalized_usage),
            fairshare_factor: num(r.factor),
            since: format_rfc3339(report.since),
            as_of: format_rfc3339(report.as_of),
            half_life_seconds: report.half_life.as_secs(),
            decayed_cost: r.decayed_cost.map(num),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::teams::render_teams_by_day;
    use crate::report::tests::*;
    use crate::store::GpuTypes;
    use chrono::Utc;

    fn fairshare_params() -> FairshareParams {
        FairshareParams {
            cluster: "c".into(),
            as_of: T0 + 10 * H,
            since: T0,
            half_life: Duration::ZERO,
            dampening: 1.0,
            weights: BTreeMap::from([
                ("a".to_string(), 1),
                ("b".to_string(), 1),
                ("z".to_string(), 2),
            ]),
            rates: Rates::default(),
            partitions: vec![],
            currency: None,
            only: vec![],
        }
    }

    #[test]
    fn fair_share_rows_are_the_models_figures() {
        // No decay: a used 3 GPU-hours, b 1, stray 0.5 (no shares). Total 4.5.
        let runs = [
            run(1, "a", 0, Some(3), 1),
            run(2, "b", 1, Some(2), 1),
            run(3, "stray", 2, Some(2), 0),
            run(4, "stray", 9, None, 1),  // running: up to as_of (10 h)
            run(5, "a", -5, Some(-4), 8), // before since: not read (the store clips too)
        ];
        let mut runs = runs.to_vec();
        runs[3].start = T0 + 9 * H + 1800;
        let r = compute_fairshare(&runs, &fairshare_params());
        let names: Vec<&str> = r.rows.iter().map(|r| r.team.as_str()).collect();
        assert_eq!(names, ["a", "b", "stray", "z"]);
        let a = &r.rows[0];
        assert_eq!(a.weight, Some(1));
        assert!(close(a.normalized_shares, 0.25));
        assert!(close(a.decayed_gpu_seconds, 3.0 * 3600.0));
        assert!(close(a.normalized_usage, 3.0 / 4.5));
        assert!(close(a.factor, (-(3.0 / 4.5) / 0.25f64).exp2()));
        let stray = &r.rows[2];
        assert_eq!((stray.weight, stray.factor), (None, 0.0));
        let z = &r.rows[3];
        assert_eq!((z.factor, z.normalized_shares), (1.0, 0.5));
        let mut p = fairshare_params();
        p.only = vec!["b".into()];
        assert_eq!(compute_fairshare(&runs, &p).rows.len(), 1);
        let j = render_fairshare(&r, Format::Json, &Utc);
        let v: serde_json::Value = serde_json::from_str(&j).unwrap();
        assert_eq!(v[0]["fairshare_factor"].as_f64().unwrap(), a.factor);
        assert_eq!(v[0]["half_life_seconds"], 0);
        let t = render_fairshare(&r, Format::Table, &Utc);
        assert!(t.contains("half-life 0 (no decay)"), "{t}");
        assert!(t.lines().nth(1).unwrap().contains("no rates"), "{t}");
        assert!(t.lines().nth(2).unwrap().starts_with("TEAM"), "{t}");
        let c = render_fairshare(&r, Format::Csv, &Utc);
        assert!(c.starts_with("team,weight,normalized_shares"), "{c}");
        assert_eq!(c.lines().count(), 5);
    }

    #[test]
    fn fair_share_weighs_each_gpu_second_at_its_rate_in_the_governed_partitions() {
        // No decay. a: 1 h100 for 2 h at 4/h = 8; b: 2 a100 for 2 h at 2/h = 8; c: 1 h100 for 5 h
        // in `debug`, not governed: not counted. Plain GPU-hours would be 2 against 4; the cost
        // is 8 against 8, so with equal shares both are at their share: F = 2^-1 = 0.5.
        let typed = |id, team: &str, gpu_type: &str, gpus: u64, hours: i64| {
            let mut r = run(id, team, 0, Some(hours), gpus);
            r.gpus_by_type = GpuTypes::new(&BTreeMap::from([(gpu_type.to_string(), gpus)]));
            r
        };
        let mut debug = typed(3, "c", "h100", 1, 5);
        debug.partition = "debug".into();
        let runs = [
            typed(1, "a", "h100", 1, 2),
            typed(2, "b", "a100", 2, 2),
            debug,
        ];
        let mut p = fairshare_params();
        p.weights = BTreeMap::from([("a".to_string(), 1), ("b".to_string(), 1)]);
        p.partitions = vec!["gpu".into()];
        p.rates = Rates::new(BTreeMap::from([
            ("h100".to_string(), 4.0),
            ("a100".to_string(), 2.0),
        ]));
        let r = compute_fairshare(&runs, &p);
        assert!(r.cost_weighted);
        let names: Vec<&str> = r.rows.iter().map(|r| r.team.as_str()).collect();
        assert_eq!(names, ["a", "b"]);
        assert_eq!(r.rows[0].decayed_cost, Some(8.0));
        assert_eq!(r.rows[1].decayed_cost, Some(8.0));
        assert_eq!(r.rows[1].decayed_gpu_seconds, 4.0 * 3600.0);
        assert_eq!(
            r.factors(),
            BTreeMap::from([("a".into(), 0.5), ("b".into(), 0.5)])
        );
        // One rate for both: the factors of plain GPU-seconds (usage is normalised): a used 1/3,
        // F = 2^(-(1/3)/(1/2)) = 2^(-2/3); b 2^(-4/3).
        p.rates = Rates::new(BTreeMap::from([
            ("h100".to_string(), 3.0),
            ("a100".to_string(), 3.0),
        ]));
        let one_rate = compute_fairshare(&runs, &p).factors();
        p.rates = Rates::default();
        let unweighted = compute_fairshare(&runs, &p);
        assert!(!unweighted.cost_weighted && unweighted.rows[0].decayed_cost.is_none());
        for (team, expected) in [("a", (-2.0f64 / 3.0).exp2()), ("b", (-4.0f64 / 3.0).exp2())] {
            assert!(close(one_rate[team], expected), "{team}");
            assert!(close(unweighted.factors()[team], expected), "{team}");
        }
        // An account without a weight has a row (factor 0) but no factor for the governor.
        p.weights.remove("b");
        let r = compute_fairshare(&runs, &p);
        assert_eq!(r.rows.len(), 2);
        assert_eq!(r.factors().len(), 1);
    }

    #[test]
    fn csv_without_rows_is_the_header_alone() {
        let mut p = fairshare_params();
        p.only = vec!["nobody".into()];
        assert_eq!(
            render_fairshare(&compute_fairshare(&[], &p), Format::Csv, &Utc),
            "team,weight,normalized_shares,decayed_gpu_hours,normalized_usage,fairshare_factor,since,as_of,half_life_seconds,decayed_cost\n"
        );
        assert_eq!(
            render_teams_by_day(&[], Format::Csv, false, &Utc),
            "team,jobs,gpu_hours,quota,cost,currency,since,until,in_quota_hours,borrowed_hours,lent_hours,allocated_cost,idle_cost,total_cost,kind,gpu_type,rate_per_hour,quota_gpu_hours,quota_used_percent,gpu_equivalents,gpu_equivalent_hours\n"
        );
    }

    #[test]
    fn the_default_fair_share_horizon_is_ten_half_lives() {
        assert_eq!(
            default_fairshare_since(1_000_000, Duration::from_secs(3600)),
            1_000_000 - 36_000
        );
        assert_eq!(default_fairshare_since(1_000_000, Duration::ZERO), 0);
    }
}
