//! `accountd replay`'s output: table, CSV, JSON and HTML.
//!
//! - Table: per team (then the cluster), one line per measure and one column per candidate, the
//!   candidates side by side in the order given (the first is the baseline the others are
//!   compared with, "as today" by default); a value where the team is worse off than under the
//!   baseline carries `!`, with the reasons under the table. Then what idle-first reclaim would
//!   have saved under the baseline (its sentence and per-team table, or "no samples"), the
//!   calibration, the capacity curve with its "could lose N GPUs" sentences, and the notes
//!   (what the figures rest on).
//! - CSV: one line per candidate and row ([`CsvRow`]), the curve left out (JSON has it); the
//!   idle-first figures in the baseline's lines.
//! - JSON: the whole [`Replay`], its field names as in the Rust types (stable).
//! - HTML: one self-contained page (no script, no load, every name escaped): the table, the
//!   reasons, the calibration, a chart of each team's p95 wait per candidate (grouped bars) and,
//!   with a capacity curve, the cluster's p95 wait and preemptions against the capacity (lines).
//!
//! Times are UTC (RFC 3339), so that the same input gives the same output anywhere.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::Serialize;

use crate::period::format_rfc3339;
use crate::report::{csv_text, table, Format};

use super::calibrate::{Calibration, Tolerance};
use super::curve::{QuotaRule, SkippedPoint};
use super::idle_first::IdleFirst;
use super::metrics::{duration, Figures, TeamFigures, WorseMeasure, WorseOff, CLUSTER};
use super::Secs;

/// The name of the "as today" candidate (the observed history).
pub const AS_TODAY: &str = "as-today";
/// The name of the "siloed" candidate.
pub const SILOED: &str = "siloed";
/// The name of the "plain Slurm" candidate ([`super::plain_slurm`]).
pub const PLAIN_SLURM: &str = "plain-slurm";

/// Everything a replay prints.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Replay {
    /// Where the trace came from.
    pub source: String,
    pub since: Secs,
    pub until: Secs,
    /// The candidates, the baseline first: a simulated one (the settings the history ran
    /// under where they are known), never the observed history, which is shown beside it as
    /// the calibration.
    pub columns: Vec<Column>,
    /// None: skipped (`--skip-calibration`).
    pub calibration: Option<Calibration>,
    pub curve: Option<Curve>,
    /// The work idle-first reclaim would have saved under the baseline (issue 29), or why it
    /// cannot be said (no samples); None without a simulated candidate.
    pub idle_first: Option<IdleFirst>,
    /// What the figures rest on (assumptions, the simulation's parameters), one line each.
    pub notes: Vec<String>,
}

/// One candidate's figures, and the teams worse off under it than under the baseline.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Column {
    pub candidate: String,
    pub figures: Figures,
    pub worse_off: Vec<WorseOff>,
}

/// The replays at lower capacities.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Curve {
    /// The GPUs of the trace's cluster (the first point's).
    pub capacity: u32,
    /// GPUs taken away per point.
    pub step: u32,
    /// The cluster's p95 wait under the baseline, which "equal p95 wait" means.
    pub reference_p95_secs: Option<Secs>,
    pub tolerance: Tolerance,
    /// Per capacity from the full one down, per candidate in the columns' order.
    pub points: Vec<CurvePoint>,
    /// Per candidate, the GPUs the cluster could lose at equal p95 wait.
    pub could_lose: Vec<CouldLose>,
    /// What the smaller clusters do with quotas that no longer fit.
    pub quota_rule: QuotaRule,
    /// The points not replayed: no valid configuration there.
    pub skipped: Vec<SkippedPoint>,
}

/// One candidate replayed at one capacity.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CurvePoint {
    pub candidate: String,
    pub gpus: u32,
    pub cluster_p95_secs: Option<Secs>,
    pub team_p95_secs: BTreeMap<String, Option<Secs>>,
    pub preemptions: u32,
    pub lost_gpu_hours: f64,
    /// What the candidate's quotas are there: "as configured", or "scaled to N of M GPUs".
    pub quotas: String,
}

impl CurvePoint {
    pub fn of(candidate: &str, gpus: u32, quotas: &str, figures: &Figures) -> Self {
        CurvePoint {
            candidate: candidate.to_string(),
            gpus,
            quotas: quotas.to_string(),
            cluster_p95_secs: figures.cluster().wait.p95_secs,
            team_p95_secs: figures
                .teams()
                .iter()
                .map(|t| (t.team.clone(), t.wait.p95_secs))
                .collect(),
            preemptions: figures.cluster().preemptions,
            lost_gpu_hours: figures.cluster().lost_gpu_hours,
        }
    }
}

/// How many GPUs the cluster could lose under a candidate with its p95 wait still within the
/// tolerance of the reference.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CouldLose {
    pub candidate: String,
    pub gpus: u32,
    /// The candidate's cluster p95 wait there.
    pub p95_secs: Option<Secs>,
}

impl Curve {
    /// The curve of `points`; `could_lose`, per candidate, is the most GPUs taken away with
    /// every point of that candidate up to there (from the full capacity down) at a p95 wait
    /// within `tolerance` of `reference_p95_secs`. A candidate whose full-capacity point is
    /// already beyond could lose none; without a reference, nothing is said.
    pub fn new(
        capacity: u32,
        step: u32,
        reference_p95_secs: Option<Secs>,
        tolerance: Tolerance,
        mut points: Vec<CurvePoint>,
        quota_rule: QuotaRule,
        skipped: Vec<SkippedPoint>,
    ) -> Self {
        let mut order: Vec<String> = Vec::new();
        for p in &points {
            if !order.contains(&p.candidate) {
                order.push(p.candidate.clone());
            }
        }
        points.sort_by_key(|p| {
            (
                std::cmp::Reverse(p.gpus),
                order.iter().position(|c| *c == p.candidate),
            )
        });
        let could_lose = match reference_p95_secs {
            None => Vec::new(),
            Some(reference) => {
                let limit = reference as f64 + tolerance.allowed(reference as f64);
                order
                    .iter()
                    .map(|c| {
                        let mut best = CouldLose {
                            candidate: c.clone(),
                            gpus: 0,
                            p95_secs: None,
                        };
                        for p in points.iter().filter(|p| p.candidate == *c) {
                            if p.cluster_p95_secs.is_some_and(|v| v as f64 <= limit) {
                                best.gpus = capacity.saturating_sub(p.gpus);
                                best.p95_secs = p.cluster_p95_secs;
                            } else {
                                break;
                            }
                        }
                        best
                    })
                    .collect()
            }
        };
        Curve {
            capacity,
            step,
            reference_p95_secs,
            tolerance,
            points,
            could_lose,
            quota_rule,
            skipped,
        }
    }

    /// The curve's conclusion, a sentence per candidate.
    pub fn sentences(&self) -> Vec<String> {
        let reference = self.reference_p95_secs.map_or("-".into(), duration);
        self.could_lose
            .iter()
            .map(|c| {
                format!(
                    "at equal p95 wait (within tolerance of {reference}) the cluster could lose {} GPUs under candidate {}{}",
                    c.gpus,
                    c.candidate,
                    c.p95_secs
                        .map(|p| format!(" (p95 {} at {} GPUs)", duration(p), self.capacity - c.gpus))
                        .unwrap_or_default()
                )
            })
            .chain(std::iter::once(format!("curve quotas: {}", self.quota_rule.describe())))
            .chain(self.skipped.iter().map(|p| {
                format!(
                    "not replayed: candidate {} at {} GPUs, not a valid configuration there ({})",
                    p.candidate, p.gpus, p.reason
                )
            }))
            .collect()
    }
}

/// The replay as text: a table, CSV or JSON.
pub fn render(replay: &Replay, format: Format) -> String {
    match format {
        Format::Table => render_table(replay),
        Format::Csv => render_csv(replay),
        Format::Json => render_json(replay),
    }
}

/// The JSON of the replay, pretty-printed, with a final newline.
pub fn render_json(replay: &Replay) -> String {
    let mut s = serde_json::to_string_pretty(replay).expect("plain data serialises");
    s.push('\n');
    s
}

/// One line of the CSV: one candidate's figures of one row (a team or the cluster). Waits in
/// seconds, GPU-hours and costs to 4 decimals; empty where there is no value.
#[derive(Debug, Default, Serialize)]
pub struct CsvRow {
    pub candidate: String,
    pub team: String,
    pub jobs: u32,
    pub censored_waits: u32,
    pub wait_mean_secs: Option<String>,
    pub wait_p50_secs: Option<Secs>,
    pub wait_p95_secs: Option<Secs>,
    pub wait_p99_secs: Option<Secs>,
    pub in_quota_start_p50_secs: Option<Secs>,
    pub in_quota_start_p95_secs: Option<Secs>,
    pub reclaim_p95_secs: Option<Secs>,
    pub quota_gpu_hours: String,
    pub allocated_gpu_hours: String,
    pub in_quota_gpu_hours: String,
    pub borrowed_gpu_hours: String,
    pub lent_gpu_hours: String,
    pub idle_quota_gpu_hours: String,
    pub allocated_share_pct: Option<String>,
    pub allocated_cost: Option<String>,
    pub idle_cost: Option<String>,
    pub total_cost: Option<String>,
    pub preemptions: u32,
    pub lost_gpu_hours: String,
    pub preempted_repeatedly: u32,
    pub rejected: u32,
    pub rejected_gpu_hours: String,
    pub cancelled: u32,
    pub never_started: u32,
    pub never_started_gpu_hours: String,
    pub queued_gpu_hours: String,
    pub unowned_lent_gpu_hours: String,
    /// The reasons the team is worse off than under the baseline, `; `-separated.
    pub worse_off: String,
    /// The baseline's work lost to preemptions with today's order and with idle-first
    /// reclaim, and what idle-first saves (issue 29; [`IdleFirst::csv_cells`]): empty in the
    /// other candidates' lines, "no samples" where the history has none.
    pub idle_first_today_lost_gpu_hours: Option<String>,
    pub idle_first_lost_gpu_hours: Option<String>,
    pub idle_first_saved_gpu_hours: Option<String>,
}

fn h4(v: f64) -> String {
    format!("{v:.4}")
}

/// The CSV: a header, then per candidate (in order) a line per row.
pub fn render_csv(replay: &Replay) -> String {
    let rows = replay.columns.iter().flat_map(|col| {
        col.figures.rows.iter().map(move |r| {
            let reasons: Vec<&str> = col
                .worse_off
                .iter()
                .filter(|w| w.team == r.team)
                .map(|w| w.reason.as_str())
                .collect();
            let [today, first, saved] = replay
                .idle_first
                .as_ref()
                .map_or([None, None, None], |f| f.csv_cells(&col.candidate, &r.team));
            CsvRow {
                candidate: col.candidate.clone(),
                team: r.team.clone(),
                jobs: r.jobs,
                censored_waits: r.wait.censored,
                wait_mean_secs: r.wait.mean_secs.map(|m| format!("{m:.1}")),
                wait_p50_secs: r.wait.p50_secs,
                wait_p95_secs: r.wait.p95_secs,
                wait_p99_secs: r.wait.p99_secs,
                in_quota_start_p50_secs: r.in_quota_start.p50_secs,
                in_quota_start_p95_secs: r.in_quota_start.p95_secs,
                reclaim_p95_secs: r.reclaim.p95_secs,
                quota_gpu_hours: h4(r.quota_gpu_hours),
                allocated_gpu_hours: h4(r.allocated_gpu_hours),
                in_quota_gpu_hours: h4(r.in_quota_gpu_hours),
                borrowed_gpu_hours: h4(r.borrowed_gpu_hours),
                lent_gpu_hours: h4(r.lent_gpu_hours),
                idle_quota_gpu_hours: h4(r.idle_quota_gpu_hours),
                allocated_share_pct: r.allocated_share_pct.map(|p| format!("{p:.2}")),
                allocated_cost: r.cost.as_ref().map(|c| h4(c.allocated)),
                idle_cost: r.cost.as_ref().map(|c| h4(c.idle)),
                total_cost: r.cost.as_ref().map(|c| h4(c.total)),
                preemptions: r.preemptions,
                lost_gpu_hours: h4(r.lost_gpu_hours),
                preempted_repeatedly: r.preempted_repeatedly,
                rejected: r.rejected,
                rejected_gpu_hours: h4(r.rejected_gpu_hours),
                cancelled: r.cancelled,
                never_started: r.never_started,
                never_started_gpu_hours: h4(r.never_started_gpu_hours),
                queued_gpu_hours: h4(r.queued_gpu_hours),
                unowned_lent_gpu_hours: h4(r.unowned_lent_gpu_hours),
                worse_off: reasons.join("; "),
                idle_first_today_lost_gpu_hours: today,
                idle_first_lost_gpu_hours: first,
                idle_first_saved_gpu_hours: saved,
            }
        })
    });
    csv_text(rows)
}

/// The measures of the main table, in its order.
#[derive(Clone)]
enum Line {
    Jobs,
    Wait(u32),
    ClassP95(String),
    InQuotaStartP95,
    ReclaimP95,
    InQuota,
    Borrowed,
    Lent,
    IdleQuota,
    Share,
    TotalCost,
    Preemptions,
    Lost,
    RejectedCancelled,
    NeverStarted,
    Queued,
    UnownedLent,
    /// Allocated GPU-hours of one GPU type, in GPU-equivalents (configurations with slices).
    TypeHours(String),
}

impl Line {
    fn label(&self, currency: Option<&str>) -> String {
        match self {
            Line::Jobs => "jobs".into(),
            Line::Wait(p) => format!("p{p} wait"),
            Line::ClassP95(c) => format!("p95 wait {c}"),
            Line::InQuotaStartP95 => "in-quota start p95".into(),
            Line::ReclaimP95 => "reclaim p95".into(),
            Line::InQuota => "in-quota GPU-h".into(),
            Line::Borrowed => "borrowed GPU-h".into(),
            Line::Lent => "lent GPU-h".into(),
            Line::IdleQuota => "idle quota GPU-h".into(),
            Line::Share => "allocated % of capacity".into(),
            Line::TotalCost => match currency {
                Some(c) => format!("total cost {c}"),
                None => "total cost".into(),
            },
            Line::Preemptions => "preemptions".into(),
            Line::Lost => "lost GPU-h".into(),
            Line::RejectedCancelled => "rejected (GPU-h) / cancelled".into(),
            Line::NeverStarted => "never started (GPU-h)".into(),
            Line::Queued => "queued GPU-h".into(),
            Line::UnownedLent => "lent by unowned GPU-h".into(),
            Line::TypeHours(k) => format!("  {k} GPU-eq-h"),
        }
    }

    /// The measure of [`worse_off`](super::metrics::worse_off) this line shows, if any.
    fn worse(&self) -> Option<WorseMeasure> {
        match self {
            Line::Wait(95) => Some(WorseMeasure::P95Wait),
            Line::Share => Some(WorseMeasure::AllocatedGpuHours),
            Line::Lost => Some(WorseMeasure::LostGpuHours),
            Line::RejectedCancelled => Some(WorseMeasure::Rejected),
            Line::NeverStarted => Some(WorseMeasure::NeverStarted),
            _ => None,
        }
    }

    fn cell(&self, r: &TeamFigures) -> String {
        let secs = |v: Option<Secs>| v.map_or("-".to_string(), duration);
        match self {
            Line::Jobs => r.jobs.to_string(),
            Line::Wait(50) => secs(r.wait.p50_secs),
            Line::Wait(95) => secs(r.wait.p95_secs),
            Line::Wait(_) => secs(r.wait.p99_secs),
            Line::ClassP95(c) => secs(r.wait_by_class.get(c).and_then(|w| w.p95_secs)),
            Line::InQuotaStartP95 => secs(r.in_quota_start.p95_secs),
            Line::ReclaimP95 => secs(r.reclaim.p95_secs),
            Line::InQuota => format!("{:.1}", r.in_quota_gpu_hours),
            Line::Borrowed => format!("{:.1}", r.borrowed_gpu_hours),
            Line::Lent => format!("{:.1}", r.lent_gpu_hours),
            Line::IdleQuota => format!("{:.1}", r.idle_quota_gpu_hours),
            Line::Share => r
                .allocated_share_pct
                .map_or("-".into(), |p| format!("{p:.1}")),
            Line::TotalCost => r
                .cost
                .as_ref()
                .map_or("-".into(), |c| format!("{:.2}", c.total)),
            Line::Preemptions => r.preemptions.to_string(),
            Line::Lost => format!("{:.1}", r.lost_gpu_hours),
            Line::RejectedCancelled => format!(
                "{} ({:.1}) / {}",
                r.rejected, r.rejected_gpu_hours, r.cancelled
            ),
            Line::NeverStarted => {
                format!("{} ({:.1})", r.never_started, r.never_started_gpu_hours)
            }
            Line::Queued => format!("{:.1}", r.queued_gpu_hours),
            Line::UnownedLent => format!("{:.1}", r.unowned_lent_gpu_hours),
            Line::TypeHours(k) => r
                .allocated_by_type
                .get(k)
                .map_or("-".into(), |h| format!("{h:.1}")),
        }
    }
}

/// The main table's header and lines, and the line before which the cluster's block starts:
/// every team in the baseline's order, then the cluster.
fn main_table(replay: &Replay) -> (Vec<String>, Vec<Vec<String>>, Option<usize>) {
    let header = main_header(replay);
    let Some(first) = replay.columns.first() else {
        return (header, Vec::new(), None);
    };
    let mut lines = Vec::new();
    let mut rule = None;
    for row in &first.figures.rows {
        if row.team == CLUSTER {
            rule = Some(lines.len());
        }
        lines.extend(team_lines(replay, &row.team));
    }
    (header, lines, rule)
}

fn main_header(replay: &Replay) -> Vec<String> {
    let mut header = vec!["TEAM".to_string(), "MEASURE".to_string()];
    header.extend(replay.columns.iter().map(|c| c.candidate.clone()));
    header
}

/// The main table's lines of one row (a team, or [`CLUSTER`]), every candidate side by side.
fn team_lines(replay: &Replay, team: &str) -> Vec<Vec<String>> {
    let currency = replay
        .columns
        .iter()
        .find_map(|c| c.figures.currency.as_deref());
    let with_cost = replay
        .columns
        .iter()
        .any(|c| c.figures.cluster().cost.is_some());
    let mut classes: Vec<&String> = replay
        .columns
        .iter()
        .filter_map(|c| c.figures.row(team))
        .flat_map(|r| r.wait_by_class.keys())
        .collect();
    classes.sort_unstable();
    classes.dedup();
    let mut measures = vec![Line::Jobs, Line::Wait(50), Line::Wait(95), Line::Wait(99)];
    if classes.len() > 1 {
        measures.extend(classes.into_iter().map(|c| Line::ClassP95(c.clone())));
    }
    measures.extend([
        Line::Queued,
        Line::InQuotaStartP95,
        Line::ReclaimP95,
        Line::InQuota,
        Line::Borrowed,
        Line::Lent,
    ]);
    if team == CLUSTER {
        measures.push(Line::UnownedLent);
    }
    measures.extend([Line::IdleQuota, Line::Share]);
    let mut types: Vec<&String> = replay
        .columns
        .iter()
        .filter_map(|c| c.figures.row(team))
        .flat_map(|r| r.allocated_by_type.keys())
        .collect();
    types.sort_unstable();
    types.dedup();
    measures.extend(types.into_iter().map(|k| Line::TypeHours(k.clone())));
    if with_cost {
        measures.push(Line::TotalCost);
    }
    measures.extend([
        Line::Preemptions,
        Line::Lost,
        Line::RejectedCancelled,
        Line::NeverStarted,
    ]);
    measures
        .iter()
        .enumerate()
        .map(|(i, m)| {
            let mut line = vec![
                if i == 0 {
                    team.to_string()
                } else {
                    String::new()
                },
                m.label(currency),
            ];
            for col in &replay.columns {
                let mut cell = col.figures.row(team).map_or("-".into(), |r| m.cell(r));
                if m.worse().is_some_and(|w| {
                    col.worse_off
                        .iter()
                        .any(|o| o.team == team && o.measure == w)
                }) {
                    cell.push('!');
                }
                line.push(cell);
            }
            line
        })
        .collect()
}

/// The teams (not the cluster) in the order a page leads with them: the most worse-off
/// reasons under any candidate first, then the largest change of p95 wait against the
/// baseline, then by name.
fn teams_by_change(replay: &Replay) -> Vec<&str> {
    let Some(first) = replay.columns.first() else {
        return Vec::new();
    };
    let mut teams: Vec<(usize, i64, &str)> = first
        .figures
        .teams()
        .iter()
        .map(|r| {
            let flags = replay
                .columns
                .iter()
                .flat_map(|c| &c.worse_off)
                .filter(|w| w.team == r.team)
                .count();
            let base = r.wait.p95_secs.unwrap_or(0);
            let change = replay
                .columns
                .iter()
                .filter_map(|c| c.figures.row(&r.team)?.wait.p95_secs)
                .map(|p| (p - base).abs())
                .max()
                .unwrap_or(0);
            (flags, change, r.team.as_str())
        })
        .collect();
    teams.sort_by(|a, b| b.0.cmp(&a.0).then(b.1.cmp(&a.1)).then(a.2.cmp(b.2)));
    teams.into_iter().map(|(_, _, t)| t).collect()
}

/// The heading line of every format that has one.
fn heading(replay: &Replay) -> String {
    format!(
        "accountd replay of {}, {} to {}",
        replay.source,
        format_rfc3339(replay.since),
        format_rfc3339(replay.until)
    )
}

/// A candidate is flagged for GPUs idle beside admitted work when the GPU-hours idle while a
/// job that fits them (by count) waited are above the baseline's by more than this many
/// points of the capacity's GPU-hours (a plain pool shows a few per cent by this measure:
/// fragmentation and backfill drains)...
pub const IDLE_WHILE_WAITING_POINTS: f64 = 1.0;
/// ...or above this share of the capacity under any candidate, the baseline included.
pub const IDLE_WHILE_WAITING_PCT: f64 = 10.0;

/// The share of the capacity idle while admitted jobs that fit waited, in percent.
fn idle_pct(f: &Figures) -> f64 {
    100.0 * f.idle_while_waiting_gpu_hours / f.capacity_gpu_hours.max(1e-9)
}

/// The worse-off reasons, one line each: `! team under candidate: reason`; then the
/// candidates that leave GPUs idle while admitted jobs that fit them wait (see
/// [`IDLE_WHILE_WAITING_POINTS`]).
fn reasons(replay: &Replay) -> Vec<String> {
    let baseline = replay.columns.first().map_or("", |c| c.candidate.as_str());
    let worse = replay.columns.iter().flat_map(|c| {
        c.worse_off.iter().map(move |w| {
            format!(
                "! {} under {} (against {baseline}): {}",
                w.team, c.candidate, w.reason
            )
        })
    });
    let base_pct = replay.columns.first().map_or(0.0, |c| idle_pct(&c.figures));
    let idle = replay.columns.iter().filter_map(move |c| {
        let f = &c.figures;
        let pct = idle_pct(f);
        let flagged = pct > IDLE_WHILE_WAITING_PCT
            || (c.candidate != baseline && pct - base_pct > IDLE_WHILE_WAITING_POINTS);
        flagged.then(|| {
            let never = f.cluster();
            let against = if c.candidate == baseline {
                String::new()
            } else {
                format!("; {baseline} {base_pct:.1} %")
            };
            format!(
                "! {}: {:.1} GPU-hours ({pct:.1} % of the capacity{against}) stood idle while admitted jobs that fit them waited; {} jobs ({:.1} GPU-hours of work) never started",
                c.candidate, f.idle_while_waiting_gpu_hours, never.never_started, never.never_started_gpu_hours
            )
        })
    });
    worse.chain(idle).collect()
}

fn calibration_table(cal: &Calibration) -> (Vec<&'static str>, Vec<Vec<String>>) {
    let header = vec!["TEAM", "MEASURE", "OBSERVED", "SIMULATED", "ALLOWED", "FIT"];
    let lines = cal
        .rows
        .iter()
        .map(|r| {
            vec![
                r.team.clone(),
                r.measure.label().to_string(),
                r.measure.show(r.observed),
                r.measure.show(r.simulated),
                format!("±{}", r.measure.show(Some(r.allowed))),
                if r.fits { "ok" } else { "NO" }.to_string(),
            ]
        })
        .collect();
    (header, lines)
}

fn calibration_verdict(cal: &Calibration) -> String {
    if cal.fits {
        "calibration: the simulation of the current settings reproduces the history (every team within tolerance)".into()
    } else {
        let n = cal.misfits().count();
        format!(
            "calibration: the simulation of the current settings does NOT reproduce the history ({n} {} out of tolerance): the what-ifs are not to be trusted",
            if n == 1 { "figure" } else { "figures" }
        )
    }
}

fn curve_table(curve: &Curve) -> (Vec<String>, Vec<Vec<String>>) {
    let teams: Vec<&String> = curve
        .points
        .first()
        .map(|p| p.team_p95_secs.keys().collect())
        .unwrap_or_default();
    let mut header: Vec<String> = vec!["GPUS".into(), "CANDIDATE".into(), "CLUSTER-P95".into()];
    header.extend(teams.iter().map(|t| format!("{t}-P95")));
    header.extend(["PREEMPTIONS".into(), "LOST-GPU-H".into(), "QUOTAS".into()]);
    let secs = |v: Option<Secs>| v.map_or("-".to_string(), duration);
    let lines = curve
        .points
        .iter()
        .map(|p| {
            let mut l = vec![
                p.gpus.to_string(),
                p.candidate.clone(),
                secs(p.cluster_p95_secs),
            ];
            l.extend(
                teams
                    .iter()
                    .map(|t| secs(p.team_p95_secs.get(*t).copied().flatten())),
            );
            l.push(p.preemptions.to_string());
            l.push(format!("{:.1}", p.lost_gpu_hours));
            l.push(p.quotas.clone());
            l
        })
        .collect();
    (header, lines)
}

/// The text table.
pub fn render_table(replay: &Replay) -> String {
    let mut out = heading(replay);
    out.push('\n');
    if let Some(first) = replay.columns.first() {
        let _ = writeln!(
            out,
            "baseline: {}; `!`: worse off than under it (the reasons are under the table)",
            first.candidate
        );
    }
    // No candidate (the calibration failed): no table, not an empty header.
    if !replay.columns.is_empty() {
        out.push('\n');
        let (header, lines, rule) = main_table(replay);
        out.push_str(&table::render(&header, &lines, 2, rule));
    }
    let reasons = reasons(replay);
    if !reasons.is_empty() {
        out.push('\n');
        for r in reasons {
            let _ = writeln!(out, "{r}");
        }
    }
    if let Some(f) = &replay.idle_first {
        let _ = writeln!(out, "\n{}", f.sentence());
        if let Some((h, l)) = f.table() {
            out.push_str(&table::render(&h, &l, 1, None));
        }
    }
    match &replay.calibration {
        Some(cal) => {
            let _ = writeln!(out, "\n{}", calibration_verdict(cal));
            if !cal.fits {
                let (h, l) = calibration_table(cal);
                out.push_str(&table::render(&h, &l, 2, None));
                for hint in &cal.hints {
                    let _ = writeln!(out, "hint: {hint}");
                }
            }
        }
        None => out.push_str(
            "\ncalibration skipped (--skip-calibration): the simulation was not checked against the history\n",
        ),
    }
    if let Some(curve) = &replay.curve {
        let _ = writeln!(
            out,
            "\ncapacity curve: {} GPUs, then {} fewer at each step",
            curve.capacity, curve.step
        );
        let (h, l) = curve_table(curve);
        out.push_str(&table::render(&h, &l, 2, None));
        for s in curve.sentences() {
            let _ = writeln!(out, "{s}");
        }
    }
    if !replay.notes.is_empty() {
        out.push('\n');
        for n in &replay.notes {
            let _ = writeln!(out, "note: {n}");
        }
    }
    out
}

mod html;
pub use html::render_html;

#[cfg(test)]
mod tests;
