//! The teams report as CSV and JSON: the serialised rows with their GPU types, and the CSV lines.

use serde::Serialize;

use crate::period::format_rfc3339;

use super::{RowKind, TeamRow, UsageReport};
use crate::report::render::{csv_text, CsvNumber, CsvNumbers, Numbers};

/// The `kind` of a row in CSV and JSON.
fn kind_name(kind: RowKind, outside: bool) -> &'static str {
    match kind {
        _ if outside => "outside",
        RowKind::Team => "team",
        RowKind::Account => "account",
        RowKind::Pool => "pool",
        RowKind::Idle => "idle",
    }
}

/// A row's quota GPU-hours as CSV and JSON give them: for teams and `(pool)` (its unallocated
/// capacity).
fn row_quota_hours(r: &TeamRow, outside: bool) -> Option<f64> {
    (!outside && matches!(r.kind, RowKind::Team | RowKind::Pool)).then(|| r.quota_hours())
}

/// The digits of GPU-hours, of costs and of percentages in CSV (those of the table, percentages
/// with one more).
const HOURS: Option<usize> = Some(4);
const MONEY: Option<usize> = Some(2);
const PERCENT: Option<usize> = Some(2);
/// A slice's size in GPUs, in full (1/7 is 0.14285714285714285), as rates are.
const EQUIVALENTS: Option<usize> = None;

/// One row of the teams report, with its GPU types: an element of the JSON array, and the CSV
/// lines of the row and of each type ([`TeamsCsvLine`]). Keys are an interface: keep them.
///
/// The JSON nests the types under `by_type`, with keys of their own order, where CSV gives each
/// type a line of the row's columns: the two shapes cannot be one serde type, so CSV serialises
/// these rows flattened.
#[derive(Serialize)]
// Not the `N: Serialize` serde would ask for `by_type`: N::Number is what is serialised.
#[serde(bound = "")]
pub(super) struct TeamsRow<'a, N: Numbers> {
    team: &'a str,
    jobs: u64,
    gpu_hours: N::Number,
    quota: Option<u32>,
    cost: Option<N::Number>,
    currency: Option<&'a str>,
    since: String,
    until: String,
    in_quota_hours: N::Number,
    borrowed_hours: N::Number,
    lent_hours: N::Number,
    allocated_cost: Option<N::Number>,
    idle_cost: Option<N::Number>,
    total_cost: Option<N::Number>,
    kind: &'static str,
    quota_gpu_hours: Option<N::Number>,
    quota_used_percent: Option<N::Number>,
    /// GPU-hours in GPU-equivalents: a slice's hours times its size.
    gpu_equivalent_hours: N::Number,
    by_type: Vec<TeamsTypeRow<'a, N>>,
}

/// One GPU type of a row, in its `by_type` array. Keys are an interface: keep them.
#[derive(Serialize)]
struct TeamsTypeRow<'a, N: Numbers> {
    gpu_type: &'a str,
    rate_per_hour: Option<N::Number>,
    jobs: u64,
    quota: Option<u32>,
    quota_gpu_hours: Option<N::Number>,
    quota_used_percent: Option<N::Number>,
    gpu_hours: N::Number,
    in_quota_hours: N::Number,
    borrowed_hours: N::Number,
    lent_hours: N::Number,
    cost: Option<N::Number>,
    allocated_cost: Option<N::Number>,
    idle_cost: Option<N::Number>,
    total_cost: Option<N::Number>,
    /// What one GPU of the type is worth in whole GPUs (a slice's size; 1 for whole GPUs).
    gpu_equivalents: N::Number,
    gpu_equivalent_hours: N::Number,
}

/// A line of the teams CSV: a row ([`TeamsRow`], `gpu_type` and `rate_per_hour` empty) or one
/// of its GPU types. The first eight columns are those of the report before the split, the next
/// six those of the split: keep their order; new columns go at the end.
#[derive(Serialize, Default, Clone, Copy)]
struct TeamsCsvLine<'r> {
    team: &'r str,
    jobs: u64,
    gpu_hours: CsvNumber,
    quota: Option<u32>,
    cost: Option<CsvNumber>,
    currency: Option<&'r str>,
    since: &'r str,
    until: &'r str,
    in_quota_hours: CsvNumber,
    borrowed_hours: CsvNumber,
    lent_hours: CsvNumber,
    allocated_cost: Option<CsvNumber>,
    idle_cost: Option<CsvNumber>,
    total_cost: Option<CsvNumber>,
    kind: &'static str,
    gpu_type: Option<&'r str>,
    rate_per_hour: Option<CsvNumber>,
    quota_gpu_hours: Option<CsvNumber>,
    quota_used_percent: Option<CsvNumber>,
    gpu_equivalents: Option<CsvNumber>,
    gpu_equivalent_hours: CsvNumber,
}

/// The teams CSV: each row's line, then its types' lines.
pub(super) fn teams_csv(rows: &[TeamsRow<'_, CsvNumbers>]) -> String {
    csv_text(rows.iter().flat_map(|r| {
        let row = TeamsCsvLine {
            team: r.team,
            jobs: r.jobs,
            gpu_hours: r.gpu_hours,
            quota: r.quota,
            cost: r.cost,
            currency: r.currency,
            since: &r.since,
            until: &r.until,
            in_quota_hours: r.in_quota_hours,
            borrowed_hours: r.borrowed_hours,
            lent_hours: r.lent_hours,
            allocated_cost: r.allocated_cost,
            idle_cost: r.idle_cost,
            total_cost: r.total_cost,
            kind: r.kind,
            gpu_type: None,
            rate_per_hour: None,
            quota_gpu_hours: r.quota_gpu_hours,
            quota_used_percent: r.quota_used_percent,
            gpu_equivalents: None,
            gpu_equivalent_hours: r.gpu_equivalent_hours,
        };
        let types = r.by_type.iter().map(move |t| TeamsCsvLine {
            jobs: t.jobs,
            gpu_hours: t.gpu_hours,
            quota: t.quota,
            cost: t.cost,
            in_quota_hours: t.in_quota_hours,
            borrowed_hours: t.borrowed_hours,
            lent_hours: t.lent_hours,
            allocated_cost: t.allocated_cost,
            idle_cost: t.idle_cost,
            total_cost: t.total_cost,
            gpu_type: Some(t.gpu_type),
            rate_per_hour: t.rate_per_hour,
            quota_gpu_hours: t.quota_gpu_hours,
            quota_used_percent: t.quota_used_percent,
            gpu_equivalents: Some(t.gpu_equivalents),
            gpu_equivalent_hours: t.gpu_equivalent_hours,
            ..row
        });
        std::iter::once(row).chain(types)
    }))
}

/// The rows of the teams report, then those outside the governed partitions.
pub(super) fn team_rows<N: Numbers>(report: &UsageReport) -> Vec<TeamsRow<'_, N>> {
    let since = format_rfc3339(report.period.since);
    let until = format_rfc3339(report.period.until);
    let rate_of = |gpu_type: &str| report.capacity_of(gpu_type).and_then(|c| c.rate_per_hour);
    let num = |v: f64, digits| N::number(v, digits);
    let opt = |v: Option<f64>, digits| v.map(|v| N::number(v, digits));
    report
        .rows
        .iter()
        .map(|r| (r, false))
        .chain(report.outside.iter().map(|r| (r, true)))
        .map(|(r, outside)| TeamsRow {
            team: &r.team,
            jobs: r.jobs,
            gpu_hours: num(r.gpu_hours(), HOURS),
            quota: r.quota,
            cost: opt(r.cost, MONEY),
            currency: report.currency.as_deref(),
            since: since.clone(),
            until: until.clone(),
            in_quota_hours: num(r.in_quota_hours(), HOURS),
            borrowed_hours: num(r.borrowed_hours(), HOURS),
            lent_hours: num(r.lent_hours(), HOURS),
            allocated_cost: opt(r.allocated_cost, MONEY),
            idle_cost: opt(r.idle_cost, MONEY),
            total_cost: opt(r.total_cost, MONEY),
            kind: kind_name(r.kind, outside),
            quota_gpu_hours: opt(row_quota_hours(r, outside), HOURS),
            quota_used_percent: opt(r.quota_used_percent(), PERCENT),
            gpu_equivalent_hours: num(report.equivalent_hours(r), HOURS),
            by_type: r
                .by_type
                .iter()
                .map(|t| TeamsTypeRow {
                    gpu_type: &t.gpu_type,
                    rate_per_hour: opt(rate_of(&t.gpu_type), None),
                    jobs: t.jobs,
                    quota: t.quota,
                    quota_gpu_hours: opt(t.quota_hours(), HOURS),
                    quota_used_percent: opt(t.quota_used_percent(), PERCENT),
                    gpu_hours: num(t.gpu_hours(), HOURS),
                    in_quota_hours: num(t.in_quota_hours(), HOURS),
                    borrowed_hours: num(t.borrowed_hours(), HOURS),
                    lent_hours: num(t.lent_hours(), HOURS),
                    cost: opt(t.cost, MONEY),
                    allocated_cost: opt(t.allocated_cost, MONEY),
                    idle_cost: opt(t.idle_cost, MONEY),
                    total_cost: opt(t.total_cost, MONEY),
                    gpu_equivalents: num(report.equivalents_of(&t.gpu_type), EQUIVALENTS),
                    gpu_equivalent_hours: num(
                        t.gpu_hours() * report.equivalents_of(&t.gpu_type),
                        HOURS,
                    ),
                })
                .collect(),
        })
        .collect()
}
