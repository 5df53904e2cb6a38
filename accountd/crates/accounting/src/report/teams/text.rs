//! The teams report as a text table: its title and rules lines, the lines of the rows and
//! totals (also the HTML page's cells), and the table by day.

use std::fmt::Write as _;

use teamshare_config::IdleCostSplit;

use crate::period::{format_local, Period};

use super::notes::teams_notes;
use super::{RowKind, TeamRow, TypeRow, UsageReport};
use crate::report::{table, SECONDS_PER_HOUR};

/// The TYPE cell of a row's own line in a table with types: the row stands for all of them.
pub(crate) const ALL_TYPES: &str = "all";

pub(super) fn teams_by_day_table<Tz: chrono::TimeZone>(
    days: &[UsageReport],
    by_type: bool,
    tz: &Tz,
) -> String
where
    Tz::Offset: std::fmt::Display,
{
    let Some(first) = days.first() else {
        return "no days in the period\n".to_string();
    };
    let with_cost = first.capacity_cost.is_some();
    let mut header: Vec<String> = vec!["DATE".into(), "TEAM".into()];
    if by_type {
        header.push("TYPE".into());
    }
    header.extend(
        [
            "JOBS",
            "GPU-HOURS",
            "IN-QUOTA",
            "BORROWED",
            "LENT",
            "CAPACITY",
        ]
        .map(String::from),
    );
    if with_cost {
        header.push(format!("TOTAL-COST{}", currency_suffix(first)));
    }
    let mut lines: Vec<Vec<String>> = Vec::new();
    for day in days {
        push_day_lines(&mut lines, day, by_type, with_cost, tz);
    }
    let last = &days[days.len() - 1];
    let mut out = title(
        first,
        " by day",
        Period {
            since: first.period.since,
            until: last.period.until,
        },
        tz,
    );
    out.push_str(&rules(first));
    out.push_str(&table::render(&header, &lines, 1, None));
    out
}

/// One day's lines of the table by day: its rows (with `by_type`, each row's types under it);
/// the date and the day's capacity on the first line only.
fn push_day_lines<Tz: chrono::TimeZone>(
    lines: &mut Vec<Vec<String>>,
    day: &UsageReport,
    by_type: bool,
    with_cost: bool,
    tz: &Tz,
) {
    let date = tz
        .timestamp_opt(day.period.since, 0)
        .earliest()
        .map(|t| t.naive_local().date().to_string())
        .unwrap_or_default();
    let mut first_line = true;
    let mut push = |team: &str, gpu_type: Option<&str>, cells: [String; 5], cost: Option<f64>| {
        let mut v = vec![
            if first_line {
                date.clone()
            } else {
                String::new()
            },
            team.to_string(),
        ];
        if let Some(t) = gpu_type {
            v.push(t.to_string());
        }
        v.extend(cells);
        v.insert(
            v.len(),
            if first_line {
                hours(day.capacity_gpu_seconds / SECONDS_PER_HOUR)
            } else {
                String::new()
            },
        );
        if with_cost {
            v.push(money(cost));
        }
        first_line = false;
        lines.push(v);
    };
    for r in &day.rows {
        let row_cells = [
            r.jobs.to_string(),
            hours(r.gpu_hours()),
            hours(r.in_quota_hours()),
            hours(r.borrowed_hours()),
            hours(r.lent_hours()),
        ];
        push(
            &r.team,
            by_type.then_some(ALL_TYPES),
            row_cells,
            r.total_cost,
        );
        if !by_type {
            continue;
        }
        for t in &r.by_type {
            let type_cells = [
                t.jobs.to_string(),
                hours(t.gpu_hours()),
                hours(t.in_quota_hours()),
                hours(t.borrowed_hours()),
                hours(t.lent_hours()),
            ];
            push(&r.team, Some(&t.gpu_type), type_cells, t.total_cost);
        }
    }
}

/// The first line of a teams table, e.g. `GPU usage on c by day from ... (local time), GPU-hours
/// and cost`.
pub(crate) fn title<Tz: chrono::TimeZone>(
    report: &UsageReport,
    how: &str,
    period: Period,
    tz: &Tz,
) -> String
where
    Tz::Offset: std::fmt::Display,
{
    format!(
        "GPU usage on {}{how} from {} to {} (local time), GPU-hours{}\n",
        report.cluster,
        format_local(period.since, tz).replace('T', " "),
        format_local(period.until, tz).replace('T', " "),
        if report.capacity_cost.is_some() {
            " and cost"
        } else {
            ""
        }
    )
}

/// The second line of a teams table: the rules the figures follow.
pub(crate) fn rules(report: &UsageReport) -> String {
    let mut out = String::from(if report.typed {
        "rules: in quota, borrowed and lent per GPU type"
    } else {
        "rules: in quota, borrowed and lent on total quotas"
    });
    if report.capacity_cost.is_some() {
        let rule = &report.cost_rule;
        let split = match rule.idle_split {
            IdleCostSplit::QuotaShare => "quota-share\" (by quota GPU-hours)",
            IdleCostSplit::UsageShare => "usage-share\" (by GPU-hours used)",
            IdleCostSplit::IdleRow => "idle-row\" (all in the (idle) row)",
        };
        let _ = write!(
            out,
            "; idle capacity cost: idle_cost_split = \"{split}; borrowed GPU-hours: borrowed_cost_factor = {0} ({0} x rate)",
            rule.borrowed_cost_factor
        );
    }
    out.push('\n');
    out
}

/// ` (BRL)` after a cost header; empty without a currency.
pub(super) fn currency_suffix(report: &UsageReport) -> String {
    report
        .currency
        .as_deref()
        .map(|c| format!(" ({c})"))
        .unwrap_or_default()
}

pub(crate) fn hours(h: f64) -> String {
    format!("{h:.4}")
}

pub(crate) fn money(c: Option<f64>) -> String {
    c.map(|c| format!("{c:.2}")).unwrap_or_default()
}

fn percent(p: Option<f64>) -> String {
    p.map(|p| format!("{p:.1}%")).unwrap_or_default()
}

/// The figures of one line of the teams table.
struct Line<'a> {
    team: &'a str,
    gpu_type: &'a str,
    jobs: u64,
    quota: Option<u64>,
    hours: [f64; 4],
    /// GPU-hours in GPU-equivalents (shown where some type is a slice).
    equivalent_hours: f64,
    quota_used: Option<f64>,
    costs: [Option<f64>; 3],
}

pub(super) fn teams_table<Tz: chrono::TimeZone>(
    report: &UsageReport,
    by_type: bool,
    tz: &Tz,
) -> String
where
    Tz::Offset: std::fmt::Display,
{
    let cells = teams_table_cells(report, by_type);
    let mut out = title(report, "", report.period, tz);
    out.push_str(&rules(report));
    out.push_str(&table::render(
        &cells.header,
        &cells.lines,
        1,
        Some(cells.total_from),
    ));
    out.push_str(&teams_notes(report, by_type, tz));
    out
}

/// The cells of the teams table, as the table and the HTML page show them.
pub(crate) struct TableCells {
    pub header: Vec<String>,
    /// The rows (with `by_type`, each row's types under it), then the totals.
    pub lines: Vec<Vec<String>>,
    /// The index in `lines` of the first total line.
    pub total_from: usize,
}

/// The header and the lines of the teams table: the rows, then the total (with `by_type`, then
/// the total of each type).
pub(crate) fn teams_table_cells(report: &UsageReport, by_type: bool) -> TableCells {
    let with_cost = report.capacity_cost.is_some();
    let with_equivalents = !report.gpu_equivalents.is_empty();
    let mut header: Vec<String> = vec!["TEAM".into()];
    if by_type {
        header.push("TYPE".into());
    }
    header.extend(["JOBS", "QUOTA", "GPU-HOURS"].map(String::from));
    if with_equivalents {
        header.push("GPU-EQ-HOURS".into());
    }
    header.extend(["IN-QUOTA", "BORROWED", "LENT", "QUOTA-USED"].map(String::from));
    if with_cost {
        header.push("ALLOC-COST".into());
        header.push("IDLE-COST".into());
        header.push(format!("TOTAL-COST{}", currency_suffix(report)));
    }
    let cells = |l: Line<'_>| l.cells(by_type, with_cost, with_equivalents);
    let mut lines: Vec<Vec<String>> = Vec::new();
    for r in &report.rows {
        lines.push(cells(Line::of_row(report, r)));
        if by_type {
            for t in &r.by_type {
                lines.push(cells(Line::of_type(report, r, t)));
            }
        }
    }
    let rule_before = lines.len();
    // The total of the rows, then with types the total of each type's lines.
    lines.push(cells(Line::total(report)));
    if by_type {
        for c in &report.capacity_by_type {
            lines.push(cells(Line::total_of_type(report, &c.gpu_type)));
        }
    }
    TableCells {
        header,
        lines,
        total_from: rule_before,
    }
}

/// The sum of the costs there are; None where there is none.
fn sum_cost(costs: impl Iterator<Item = Option<f64>>) -> Option<f64> {
    costs.flatten().reduce(|a, b| a + b)
}

impl<'a> Line<'a> {
    /// The line's cells: `by_type`, with its type; `with_cost`, with its costs;
    /// `with_equivalents`, with its GPU-equivalent hours.
    fn cells(self, by_type: bool, with_cost: bool, with_equivalents: bool) -> Vec<String> {
        let mut v = vec![self.team.to_string()];
        if by_type {
            v.push(self.gpu_type.to_string());
        }
        v.extend([
            self.jobs.to_string(),
            self.quota.map(|q| q.to_string()).unwrap_or_default(),
            hours(self.hours[0]),
        ]);
        if with_equivalents {
            v.push(hours(self.equivalent_hours));
        }
        v.extend([
            hours(self.hours[1]),
            hours(self.hours[2]),
            hours(self.hours[3]),
            percent(self.quota_used),
        ]);
        if with_cost {
            v.extend(self.costs.map(money));
        }
        v
    }

    fn of_row(report: &UsageReport, r: &'a TeamRow) -> Line<'a> {
        Line {
            equivalent_hours: report.equivalent_hours(r),
            team: &r.team,
            gpu_type: ALL_TYPES,
            jobs: r.jobs,
            quota: r.quota.map(u64::from),
            hours: [
                r.gpu_hours(),
                r.in_quota_hours(),
                r.borrowed_hours(),
                r.lent_hours(),
            ],
            quota_used: r.quota_used_percent(),
            costs: [r.allocated_cost, r.idle_cost, r.total_cost],
        }
    }

    fn of_type(report: &UsageReport, r: &'a TeamRow, t: &'a TypeRow) -> Line<'a> {
        Line {
            equivalent_hours: t.gpu_hours() * report.equivalents_of(&t.gpu_type),
            team: &r.team,
            gpu_type: &t.gpu_type,
            jobs: t.jobs,
            quota: t.quota.map(u64::from),
            hours: [
                t.gpu_hours(),
                t.in_quota_hours(),
                t.borrowed_hours(),
                t.lent_hours(),
            ],
            quota_used: t.quota_used_percent(),
            costs: [t.allocated_cost, t.idle_cost, t.total_cost],
        }
    }

    /// The total of the rows; QUOTA-USED over the teams' quotas only.
    fn total(report: &'a UsageReport) -> Line<'a> {
        let rows = &report.rows;
        let teams = || rows.iter().filter(|r| r.kind == RowKind::Team);
        let team_quota: f64 = teams().map(|r| r.quota_seconds).sum();
        let team_in_quota: f64 = teams().map(|r| r.in_quota_seconds).sum();
        let total_seconds: u128 = rows.iter().map(|r| r.gpu_seconds).sum();
        Line {
            equivalent_hours: rows.iter().map(|r| report.equivalent_hours(r)).sum(),
            team: "total",
            gpu_type: ALL_TYPES,
            jobs: rows.iter().map(|r| r.jobs).sum(),
            quota: rows
                .iter()
                .filter_map(|r| r.quota.map(u64::from))
                .reduce(|a, b| a + b),
            hours: [
                total_seconds as f64 / SECONDS_PER_HOUR,
                rows.iter().map(TeamRow::in_quota_hours).sum(),
                rows.iter().map(TeamRow::borrowed_hours).sum(),
                rows.iter().map(TeamRow::lent_hours).sum(),
            ],
            quota_used: (team_quota > 0.0).then(|| 100.0 * team_in_quota / team_quota),
            costs: [
                sum_cost(rows.iter().map(|r| r.allocated_cost)),
                sum_cost(rows.iter().map(|r| r.idle_cost)),
                sum_cost(rows.iter().map(|r| r.total_cost)),
            ],
        }
    }

    /// The total of the lines of `gpu_type`; its QUOTA and QUOTA-USED over the teams' only.
    fn total_of_type(report: &'a UsageReport, gpu_type: &'a str) -> Line<'a> {
        let of_type: Vec<(&TeamRow, &TypeRow)> = report
            .rows
            .iter()
            .filter_map(|r| r.of_type(gpu_type).map(|t| (r, t)))
            .collect();
        let team_types = || of_type.iter().filter(|(r, _)| r.kind == RowKind::Team);
        let quota: f64 = team_types().filter_map(|(_, t)| t.quota_seconds).sum();
        let in_quota: f64 = team_types().map(|(_, t)| t.in_quota_seconds).sum();
        let h = |f: fn(&TypeRow) -> f64| of_type.iter().map(|(_, t)| f(t)).sum::<f64>();
        Line {
            equivalent_hours: h(TypeRow::gpu_hours) * report.equivalents_of(gpu_type),
            team: "total",
            gpu_type,
            jobs: of_type.iter().map(|(_, t)| t.jobs).sum(),
            quota: team_types()
                .filter_map(|(_, t)| t.quota.map(u64::from))
                .reduce(|a, b| a + b),
            hours: [
                h(TypeRow::gpu_hours),
                h(TypeRow::in_quota_hours),
                h(TypeRow::borrowed_hours),
                h(TypeRow::lent_hours),
            ],
            quota_used: (quota > 0.0).then(|| 100.0 * in_quota / quota),
            costs: [
                sum_cost(of_type.iter().map(|(_, t)| t.allocated_cost)),
                sum_cost(of_type.iter().map(|(_, t)| t.idle_cost)),
                sum_cost(of_type.iter().map(|(_, t)| t.total_cost)),
            ],
        }
    }
}
