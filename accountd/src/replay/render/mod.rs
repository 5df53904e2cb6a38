//! `accountd replay`'s output: table, CSV, JSON and HTML.
//!
//! - Table: per team (then the cluster), one line per measure and one column per candidate, the
//!   candidates side by side in the order given (the first is the baseline the others are
//!   compared with, "as today" by default); a value where the team is worse off than under the
//!   baseline carries `!`, with the reasons under the table. Then the calibration, the capacity
//!   curve with its "could lose N GPUs" sentences, and the notes (what the figures rest on).
//! - CSV: one line per candidate and row ([`CsvRow`]), the curve left out (JSON has it).
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
use crate::report::html::{escape, page_head, PALETTE};
use crate::report::{csv_text, table, Format};

use super::calibrate::{Calibration, Tolerance};
use super::curve::{QuotaRule, SkippedPoint};
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
        }
    }

    /// The measure of [`worse_off`](super::metrics::worse_off) this line shows, if any.
    fn worse(&self) -> Option<WorseMeasure> {
        match self {
            Line::Wait(95) => Some(WorseMeasure::P95Wait),
            Line::Share => Some(WorseMeasure::AllocatedGpuHours),
            Line::Lost => Some(WorseMeasure::LostGpuHours),
            Line::RejectedCancelled => Some(WorseMeasure::Rejected),
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
        }
    }
}

/// The main table's header and lines, and the line before which the cluster's block starts.
fn main_table(replay: &Replay) -> (Vec<String>, Vec<Vec<String>>, Option<usize>) {
    let mut header = vec!["TEAM".to_string(), "MEASURE".to_string()];
    header.extend(replay.columns.iter().map(|c| c.candidate.clone()));
    let Some(first) = replay.columns.first() else {
        return (header, Vec::new(), None);
    };
    let currency = replay
        .columns
        .iter()
        .find_map(|c| c.figures.currency.as_deref());
    let with_cost = replay
        .columns
        .iter()
        .any(|c| c.figures.cluster().cost.is_some());
    let mut lines = Vec::new();
    let mut rule = None;
    for row in &first.figures.rows {
        let team = row.team.as_str();
        if team == CLUSTER {
            rule = Some(lines.len());
        }
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
        if with_cost {
            measures.push(Line::TotalCost);
        }
        measures.extend([
            Line::Preemptions,
            Line::Lost,
            Line::RejectedCancelled,
            Line::NeverStarted,
        ]);
        for (i, m) in measures.iter().enumerate() {
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
            lines.push(line);
        }
    }
    (header, lines, rule)
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
            format!(
                "! {}: {:.1} GPU-hours ({pct:.1} % of the capacity; {baseline} {base_pct:.1} %) stood idle while admitted jobs that fit them waited; {} jobs ({:.1} GPU-hours of work) never started",
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

/// An HTML table of `header` and `lines` (the first `left` columns are text), a rule (a `tbody`
/// break) before line `rule`.
fn html_table<H: AsRef<str>>(
    out: &mut String,
    header: &[H],
    lines: &[Vec<String>],
    left: usize,
    rule: Option<usize>,
) {
    out.push_str("<table>\n<thead><tr>");
    for (i, h) in header.iter().enumerate() {
        let class = if i < left { " class=\"text\"" } else { "" };
        let _ = write!(out, "<th scope=\"col\"{class}>{}</th>", escape(h.as_ref()));
    }
    out.push_str("</tr></thead>\n<tbody>\n");
    for (k, line) in lines.iter().enumerate() {
        if rule == Some(k) {
            out.push_str("</tbody>\n<tfoot>\n");
        }
        out.push_str("<tr>");
        for (i, cell) in line.iter().enumerate() {
            let class = if i < left { " class=\"text\"" } else { "" };
            let _ = write!(out, "<td{class}>{}</td>", escape(cell));
        }
        out.push_str("</tr>\n");
    }
    out.push_str(if rule.is_some() {
        "</tfoot>\n</table>\n"
    } else {
        "</tbody>\n</table>\n"
    });
}

/// The HTML page.
pub fn render_html(replay: &Replay) -> String {
    let mut out = String::new();
    let title = heading(replay);
    page_head(&mut out, &title);
    let _ = writeln!(out, "<body>\n<h1>{}</h1>", escape(&title));
    if let Some(first) = replay.columns.first() {
        let _ = writeln!(
            out,
            "<p class=\"rules\">baseline: {}; <strong>!</strong>: worse off than under it</p>",
            escape(&first.candidate)
        );
    }
    out.push_str("<section>\n");
    if !replay.columns.is_empty() {
        let (header, lines, rule) = main_table(replay);
        html_table(&mut out, &header, &lines, 2, rule);
    }
    let reasons = reasons(replay);
    if !reasons.is_empty() {
        out.push_str("<ul>\n");
        for r in reasons {
            let _ = writeln!(out, "<li>{}</li>", escape(&r));
        }
        out.push_str("</ul>\n");
    }
    out.push_str("</section>\n");

    // Each team's p95 wait per candidate.
    let names: Vec<String> = replay.columns.iter().map(|c| c.candidate.clone()).collect();
    let groups: Vec<(String, Vec<Option<f64>>)> = replay
        .columns
        .first()
        .map(|f| {
            f.figures
                .rows
                .iter()
                .map(|r| {
                    let values = replay
                        .columns
                        .iter()
                        .map(|c| {
                            c.figures
                                .row(&r.team)
                                .and_then(|x| x.wait.p95_secs)
                                .map(|s| s as f64 / 3600.0)
                        })
                        .collect();
                    (r.team.clone(), values)
                })
                .collect()
        })
        .unwrap_or_default();
    out.push_str("<section>\n<h2>p95 queue wait per team and candidate (hours)</h2>\n");
    bars_svg(
        &mut out,
        "p95 queue wait per team and candidate",
        &groups,
        &names,
    );
    out.push_str("</section>\n");

    out.push_str("<section>\n");
    match &replay.calibration {
        Some(cal) => {
            let _ = writeln!(out, "<h2>Calibration</h2>\n<p>{}</p>", escape(&calibration_verdict(cal)));
            let (h, l) = calibration_table(cal);
            html_table(&mut out, &h, &l, 2, None);
            if !cal.hints.is_empty() {
                out.push_str("<ul>\n");
                for hint in &cal.hints {
                    let _ = writeln!(out, "<li>{}</li>", escape(hint));
                }
                out.push_str("</ul>\n");
            }
        }
        None => out.push_str("<h2>Calibration</h2>\n<p>skipped (--skip-calibration): the simulation was not checked against the history</p>\n"),
    }
    out.push_str("</section>\n");

    if let Some(curve) = &replay.curve {
        let mut order: Vec<String> = Vec::new();
        for p in &curve.points {
            if !order.contains(&p.candidate) {
                order.push(p.candidate.clone());
            }
        }
        let mut xs: Vec<u32> = curve.points.iter().map(|p| p.gpus).collect();
        xs.sort_unstable();
        xs.dedup();
        let series =
            |pick: &dyn Fn(&CurvePoint) -> Option<f64>| -> Vec<(String, Vec<Option<f64>>)> {
                order
                    .iter()
                    .map(|c| {
                        let ys = xs
                            .iter()
                            .map(|x| {
                                curve
                                    .points
                                    .iter()
                                    .find(|p| p.candidate == *c && p.gpus == *x)
                                    .and_then(pick)
                            })
                            .collect();
                        (c.clone(), ys)
                    })
                    .collect()
            };
        let xf: Vec<f64> = xs.iter().map(|&x| f64::from(x)).collect();
        out.push_str("<section>\n<h2>Capacity curve</h2>\n");
        let (h, l) = curve_table(curve);
        html_table(&mut out, &h, &l, 2, None);
        out.push_str("<ul>\n");
        for s in curve.sentences() {
            let _ = writeln!(out, "<li>{}</li>", escape(&s));
        }
        out.push_str("</ul>\n<h3>cluster p95 wait (hours) against capacity (GPUs)</h3>\n");
        lines_svg(
            &mut out,
            "cluster p95 wait against capacity",
            &xf,
            &series(&|p| p.cluster_p95_secs.map(|s| s as f64 / 3600.0)),
        );
        out.push_str("<h3>preemptions against capacity (GPUs)</h3>\n");
        lines_svg(
            &mut out,
            "preemptions against capacity",
            &xf,
            &series(&|p| Some(f64::from(p.preemptions))),
        );
        out.push_str("</section>\n");
    }
    if !replay.notes.is_empty() {
        out.push_str("<section>\n<pre class=\"notes\">");
        for n in &replay.notes {
            let _ = writeln!(out, "{}", escape(n));
        }
        out.push_str("</pre>\n</section>\n");
    }
    let _ = write!(
        out,
        "<footer><p>accountd {}: replay</p></footer>\n</body>\n</html>\n",
        env!("CARGO_PKG_VERSION")
    );
    out
}

const W: f64 = 960.0;
const HGT: f64 = 300.0;
const LEFT: f64 = 56.0;
const BOTTOM: f64 = 40.0;
const TOP: f64 = 12.0;

/// A round upper bound of the axis for `max`.
fn axis_max(max: f64) -> f64 {
    if max <= 0.0 || !max.is_finite() {
        return 1.0;
    }
    let mag = 10f64.powf(max.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .iter()
        .map(|m| m * mag)
        .find(|&v| v >= max)
        .unwrap_or(10.0 * mag)
}

fn svg_open(out: &mut String, title: &str, top: f64) {
    let _ = writeln!(
        out,
        "<figure><svg class=\"chart\" viewBox=\"0 0 {W} {HGT}\" role=\"img\" xmlns=\"http://www.w3.org/2000/svg\"><title>{}</title>",
        escape(title)
    );
    // The y axis: 0, half, top.
    for k in 0..=2 {
        let v = top * f64::from(k) / 2.0;
        let y = HGT - BOTTOM - (HGT - BOTTOM - TOP) * f64::from(k) / 2.0;
        let _ = writeln!(
            out,
            "<line x1=\"{LEFT}\" y1=\"{y:.2}\" x2=\"{W}\" y2=\"{y:.2}\" stroke=\"#e3e3e3\"/><text x=\"{:.2}\" y=\"{:.2}\" text-anchor=\"end\">{}</text>",
            LEFT - 4.0,
            y + 4.0,
            (v * 1000.0).round() / 1000.0
        );
    }
}

fn legend(out: &mut String, names: &[String]) {
    out.push_str("</svg><ul class=\"legend\">");
    for (i, n) in names.iter().enumerate() {
        let _ = write!(
            out,
            "<li><svg class=\"swatch\" width=\"10\" height=\"10\"><rect width=\"10\" height=\"10\" fill=\"{}\"/></svg>{}</li>",
            PALETTE[i % PALETTE.len()],
            escape(n)
        );
    }
    out.push_str("</ul></figure>\n");
}

/// Grouped bars: per group (x), one bar per series; a missing value draws no bar.
fn bars_svg(
    out: &mut String,
    title: &str,
    groups: &[(String, Vec<Option<f64>>)],
    names: &[String],
) {
    let max = groups
        .iter()
        .flat_map(|g| g.1.iter().flatten())
        .fold(0.0f64, |a, &b| a.max(b));
    let top = axis_max(max);
    svg_open(out, title, top);
    let band = (W - LEFT) / groups.len().max(1) as f64;
    let bar = band * 0.8 / names.len().max(1) as f64;
    let plot = HGT - BOTTOM - TOP;
    for (g, (label, values)) in groups.iter().enumerate() {
        let x0 = LEFT + band * g as f64 + band * 0.1;
        for (i, v) in values.iter().enumerate() {
            let Some(v) = v else { continue };
            let h = plot * v / top;
            let _ = writeln!(
                out,
                "<rect x=\"{:.2}\" y=\"{:.2}\" width=\"{:.2}\" height=\"{:.2}\" fill=\"{}\"><title>{}: {}: {:.2} h</title></rect>",
                x0 + bar * i as f64,
                HGT - BOTTOM - h,
                bar,
                h,
                PALETTE[i % PALETTE.len()],
                escape(label),
                escape(names.get(i).map_or("", String::as_str)),
                v
            );
        }
        let _ = writeln!(
            out,
            "<text x=\"{:.2}\" y=\"{:.2}\" text-anchor=\"middle\">{}</text>",
            LEFT + band * (g as f64 + 0.5),
            HGT - BOTTOM + 16.0,
            escape(label)
        );
    }
    legend(out, names);
}

/// Lines: per series, its values at `xs` joined (a missing value breaks nothing: it is left
/// out); x grows to the right.
fn lines_svg(out: &mut String, title: &str, xs: &[f64], series: &[(String, Vec<Option<f64>>)]) {
    let max = series
        .iter()
        .flat_map(|s| s.1.iter().flatten())
        .fold(0.0f64, |a, &b| a.max(b));
    let top = axis_max(max);
    svg_open(out, title, top);
    let (lo, hi) = (
        xs.first().copied().unwrap_or(0.0),
        xs.last().copied().unwrap_or(1.0),
    );
    let span = (hi - lo).max(1.0);
    let plot = HGT - BOTTOM - TOP;
    let xpos = |x: f64| LEFT + 12.0 + (W - LEFT - 24.0) * (x - lo) / span;
    for &x in xs {
        let _ = writeln!(
            out,
            "<text x=\"{:.2}\" y=\"{:.2}\" text-anchor=\"middle\">{x}</text>",
            xpos(x),
            HGT - BOTTOM + 16.0
        );
    }
    let names: Vec<String> = series.iter().map(|s| s.0.clone()).collect();
    for (i, (name, ys)) in series.iter().enumerate() {
        let color = PALETTE[i % PALETTE.len()];
        let points: Vec<String> = xs
            .iter()
            .zip(ys)
            .filter_map(|(x, y)| {
                y.map(|y| format!("{:.2},{:.2}", xpos(*x), HGT - BOTTOM - plot * y / top))
            })
            .collect();
        let _ = writeln!(
            out,
            "<polyline fill=\"none\" stroke=\"{color}\" stroke-width=\"2\" points=\"{}\"><title>{}</title></polyline>",
            points.join(" "),
            escape(name)
        );
        for p in &points {
            let (x, y) = p.split_once(',').unwrap_or(("0", "0"));
            let _ = writeln!(
                out,
                "<circle cx=\"{x}\" cy=\"{y}\" r=\"3\" fill=\"{color}\"/>"
            );
        }
    }
    legend(out, &names);
}

#[cfg(test)]
mod tests;
