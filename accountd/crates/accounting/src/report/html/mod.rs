//! `accountd report teams --format html`: the teams report as one self-contained HTML page
//! (DESIGN 5): the period's table as the table format shows it (the same cells, the same notes
//! under it), then three charts of the period's local days, inline SVG, and the users' idle
//! GPU-hours:
//!
//! - GPU-hours: one bar per day, each team's (and account's) hours in quota (solid) and borrowed
//!   (striped) stacked above the axis, what each row lent (pale) below it;
//! - cost (with rates only): one bar per day, each row's total cost (allocated + idle share)
//!   stacked, so that a day's bar is that day's capacity cost (a negative idle cost, usage beyond
//!   the recorded capacity, goes below the axis);
//! - allocated and busy GPU-hours (issue 29): one bar per day, each team's allocated GPU-hours
//!   stacked, each split into what its NVML samples saw busy (solid), idle (pale) and what no
//!   sample saw (striped); a line saying there are no samples instead where there are none;
//! - then the table of `report users`: each user's allocated, idle and unsampled GPU-hours and
//!   most idle job runs.
//!
//! The days are [`report::usage_report_by_day`]'s, the reports `--by-day` prints. This module
//! writes the page and says what each chart shows; `chart` draws a stacked bar chart of days;
//! `idle` writes the part from the samples.
//!
//! The page loads nothing: no script, font, image or link, and its Content-Security-Policy
//! (`default-src 'none'`) forbids any load but its own inline style, so it reads the same offline,
//! from a mail attachment or a file share. Every text in it is escaped ([`escape`]): team and
//! account names come from sacct (an account need not be a team of the configuration), GPU types
//! from gres, the cluster's name from the configuration.

use std::fmt::Write as _;

use crate::period::UnixSeconds;
use crate::report::{self, RowKind, UsageReport};

mod chart;
mod idle;

#[cfg(test)]
use chart::{tick_label, Axis, PLOT_HEIGHT, TOP};
use chart::{Chart, Part, Segment, Series};
pub use idle::SampledUse;

/// The colours of teams and accounts, in the order of the report's rows (they repeat beyond
/// seven): distinguishable with the common colour-vision deficiencies, and apart from
/// [`POOL_COLOR`] and [`IDLE_COLOR`].
pub const PALETTE: [&str; 7] = [
    "#0072b2", "#e69f00", "#009e73", "#cc79a7", "#56b4e9", "#d55e00", "#f0e442",
];
/// `(pool)`'s colour.
const POOL_COLOR: &str = "#7f7f7f";
/// `(idle)`'s colour.
const IDLE_COLOR: &str = "#bdbdbd";

/// `text` escaped for HTML text and quoted attribute values (also inside inline SVG): `&`, `<`,
/// `>`, `"` and `'` as character references.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// The page. `report`: the period's; `days`: one report per local day of its counted part
/// ([`report::usage_report_by_day`], with the same parameters); `sampled`: the users' idle
/// GPU-hours over the same period and days; `by_type`: the table shows each row's GPU types
/// under it, as `--by-type` does.
pub fn render_teams_html<Tz: chrono::TimeZone>(
    report: &UsageReport,
    days: &[UsageReport],
    sampled: SampledUse<'_>,
    by_type: bool,
    tz: &Tz,
) -> String
where
    Tz::Offset: std::fmt::Display,
{
    let heading = report::title(report, "", report.period, tz);
    let heading = heading.trim_end();
    let series = series_of(report);
    let dates: Vec<String> = days
        .iter()
        .map(|d| local_date(d.period.since, tz))
        .collect();
    let mut out = String::with_capacity(32 * 1024 + days.len() * 4 * 1024);
    page_head(&mut out, heading);
    out.push_str("<body>\n<header>\n");
    let _ = writeln!(out, "<h1>{}</h1>", escape(heading));
    let _ = writeln!(
        out,
        "<p class=\"rules\">{}</p>",
        escape(report::rules(report).trim_end())
    );
    out.push_str("</header>\n");
    table_section(&mut out, report, &series, by_type, tz);

    usage_section(&mut out, &series, days, &dates);
    cost_section(&mut out, report, &series, days, &dates);
    idle::busy_section(&mut out, &series, sampled, tz);
    idle::users_section(&mut out, sampled.users);
    let _ = writeln!(
        out,
        "<footer><p>accountd {}: report teams; the charts' days are those of report teams --by-day; the users' table is report users'</p></footer>\n</body>\n</html>",
        env!("CARGO_PKG_VERSION")
    );
    out
}

/// The section of the chart of GPU-hours per day.
fn usage_section(out: &mut String, series: &[Series<'_>], days: &[UsageReport], dates: &[String]) {
    out.push_str("<section id=\"usage\">\n<h2>GPU-hours per day</h2>\n");
    if days.is_empty() {
        out.push_str("<p>No day of the period is counted yet.</p>\n");
    } else {
        let segments = usage_segments(series, days);
        let chart = Chart {
            id: "usage",
            title: "GPU-hours per day and team: in quota and borrowed above the axis, lent below it"
                .to_string(),
            desc: format!(
                "One bar per day from {} to {}. Above the axis each team's GPU-hours in quota (solid) and borrowed (striped), stacked in the order of the table; below it the GPU-hours each row lent (pale). The table has the period's figures.",
                dates[0],
                dates[dates.len() - 1]
            ),
            axis: "GPU-hours (lent below the axis)".to_string(),
            below_as_positive: true,
            dates,
            series,
            segments: &segments,
            key: &[Part::InQuota, Part::Borrowed, Part::Lent],
        };
        chart.render(out);
    }
    out.push_str("</section>\n");
}

/// The section of the chart of the cost per day; without rates, a line that says there is none.
fn cost_section(
    out: &mut String,
    report: &UsageReport,
    series: &[Series<'_>],
    days: &[UsageReport],
    dates: &[String],
) {
    if report.capacity_cost.is_some() {
        let currency = report
            .currency
            .as_deref()
            .map(|c| format!(" ({c})"))
            .unwrap_or_default();
        let _ = writeln!(
            out,
            "<section id=\"cost\">\n<h2>Cost per day{}</h2>",
            escape(&currency)
        );
        if days.is_empty() {
            out.push_str("<p>No day of the period is counted yet.</p>\n");
        } else {
            let segments = cost_segments(series, days);
            let chart = Chart {
                id: "cost",
                title: format!("Total cost per day and row{currency}"),
                desc: format!(
                    "One bar per day from {} to {}: each row's total cost (allocated cost and share of the idle capacity's cost), stacked in the order of the table; a day's bar is that day's capacity cost. Each day's idle cost is shared with that day's weights.",
                    dates[0],
                    dates[dates.len() - 1]
                ),
                axis: format!("cost{currency}"),
                below_as_positive: false,
                dates,
                series,
                segments: &segments,
                key: &[],
            };
            chart.render(out);
        }
        out.push_str("</section>\n");
    } else {
        out.push_str(
            "<section id=\"cost\">\n<h2>Cost per day</h2>\n<p>No rates are configured ([gpu_types]): no cost.</p>\n</section>\n",
        );
    }
}

/// Everything up to `<body>`: the title, a policy that forbids every load, the style.
pub fn page_head(out: &mut String, title: &str) {
    let _ = write!(
        out,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <title>{}</title>\n<style>\n{STYLE}</style>\n</head>\n",
        escape(title)
    );
}

/// The page's style: system fonts only (nothing to load), colours kept in print, the charts and
/// the table kept whole on a printed page where they fit.
const STYLE: &str = "\
:root { color-scheme: light; }
body { font: 14px/1.45 system-ui, -apple-system, \"Segoe UI\", sans-serif; color: #111; background: #fff; margin: 24px; }
* { -webkit-print-color-adjust: exact; print-color-adjust: exact; }
h1 { font-size: 20px; margin: 0 0 4px; }
h2 { font-size: 16px; margin: 24px 0 8px; }
p.rules { color: #444; margin: 0; }
table { border-collapse: collapse; font-variant-numeric: tabular-nums; }
th, td { padding: 3px 8px; border-bottom: 1px solid #ddd; white-space: nowrap; }
td { text-align: right; }
th[scope=row], td.text, thead th.text { text-align: left; }
thead th { text-align: right; border-bottom: 2px solid #333; font-size: 12px; }
tfoot th, tfoot td { font-weight: 600; border-top: 2px solid #333; }
tr.type th, tr.type td { color: #555; font-size: 12px; }
tr.type th { padding-left: 28px; font-weight: normal; }
svg.swatch { vertical-align: -1px; margin-right: 6px; }
pre.notes { font-size: 12px; white-space: pre-wrap; margin: 8px 0 0; }
figure { margin: 0; }
svg.chart { display: block; width: 100%; max-width: 1200px; height: auto; }
svg.chart text { font-size: 11px; fill: #333; }
svg.chart .grid line { stroke: #e3e3e3; }
svg.chart .zero { stroke: #333; }
ul.legend { list-style: none; padding: 0; margin: 6px 0 0; display: flex; flex-wrap: wrap; gap: 4px 18px; font-size: 12px; }
ul.legend.key { color: #555; }
footer { margin-top: 28px; color: #777; font-size: 11px; }
@media print {
  @page { size: A4 landscape; margin: 10mm; }
  body { margin: 0; font-size: 10pt; }
  th, td { padding: 1px 6px; }
  thead { display: table-header-group; }
  section, figure, tr { break-inside: avoid; }
  h2 { break-after: avoid; }
}
";

/// The report's rows with their colours, in its order.
fn series_of(report: &UsageReport) -> Vec<Series<'_>> {
    let mut next = 0;
    report
        .rows
        .iter()
        .map(|r| Series {
            name: &r.team,
            kind: r.kind,
            color: match r.kind {
                RowKind::Pool => POOL_COLOR,
                RowKind::Idle => IDLE_COLOR,
                RowKind::Team | RowKind::Account => {
                    next += 1;
                    PALETTE[(next - 1) % PALETTE.len()]
                }
            },
        })
        .collect()
}

/// The local date of the instant a day starts, `YYYY-MM-DD`.
fn local_date<Tz: chrono::TimeZone>(since: UnixSeconds, tz: &Tz) -> String {
    tz.timestamp_opt(since, 0)
        .earliest()
        .map(|t| t.naive_local().date().to_string())
        .unwrap_or_default()
}

/// The teams table: the table format's cells, each row's colour by its name, the totals in the
/// table's foot, then the table format's notes (capacity, estimate, usage outside the governed
/// partitions) as they are.
fn table_section<Tz: chrono::TimeZone>(
    out: &mut String,
    report: &UsageReport,
    series: &[Series<'_>],
    by_type: bool,
    tz: &Tz,
) where
    Tz::Offset: std::fmt::Display,
{
    let cells = report::teams_table_cells(report, by_type);
    // Left-aligned text columns: the team, and with types the type.
    let text_columns = if by_type { 2 } else { 1 };
    out.push_str("<section id=\"teams\">\n<h2>Teams</h2>\n<table>\n<thead>\n<tr>");
    for (i, h) in cells.header.iter().enumerate() {
        let class = if i < text_columns {
            " class=\"text\""
        } else {
            ""
        };
        let _ = write!(out, "<th scope=\"col\"{class}>{}</th>", escape(h));
    }
    out.push_str("</tr>\n</thead>\n<tbody>\n");
    for (i, line) in cells.lines.iter().enumerate() {
        if i == cells.total_from {
            out.push_str("</tbody>\n<tfoot>\n");
        }
        let is_type_line = by_type && line.get(1).is_some_and(|t| t != report::ALL_TYPES);
        let row = if i < cells.total_from && !is_type_line {
            series.iter().find(|s| s.name == line[0])
        } else {
            None
        };
        let class = match (row.map(|s| s.kind), is_type_line, i >= cells.total_from) {
            (_, true, false) => "type",
            (_, _, true) => "total",
            (Some(RowKind::Team), ..) => "team",
            (Some(RowKind::Account), ..) => "account",
            (Some(RowKind::Pool), ..) => "pool",
            (Some(RowKind::Idle), ..) => "idle",
            (None, ..) => "row",
        };
        let _ = write!(out, "<tr class=\"{class}\"><th scope=\"row\">");
        if let Some(s) = row {
            let _ = write!(
                out,
                "<svg class=\"swatch\" width=\"10\" height=\"10\" aria-hidden=\"true\"><rect width=\"10\" height=\"10\" fill=\"{}\"/></svg>",
                s.color
            );
        }
        let _ = write!(out, "{}</th>", escape(&line[0]));
        for (j, cell) in line.iter().enumerate().skip(1) {
            let class = if j < text_columns {
                " class=\"text\""
            } else {
                ""
            };
            let _ = write!(out, "<td{class}>{}</td>", escape(cell));
        }
        out.push_str("</tr>\n");
    }
    out.push_str(if cells.total_from < cells.lines.len() {
        "</tfoot>\n"
    } else {
        "</tbody>\n"
    });
    out.push_str("</table>\n");
    let notes = report::teams_notes(report, by_type, tz);
    let _ = writeln!(
        out,
        "<pre class=\"notes\">{}</pre>\n</section>",
        escape(notes.trim_end())
    );
}

/// Each day's in-quota, borrowed and lent GPU-hours of every row but `(idle)`, in the rows'
/// order; nothing for a figure that is 0.
fn usage_segments(series: &[Series<'_>], days: &[UsageReport]) -> Vec<Segment> {
    let mut segments = Vec::new();
    for (d, day) in days.iter().enumerate() {
        for (s, ser) in series.iter().enumerate() {
            if ser.kind == RowKind::Idle {
                continue;
            }
            let Some(row) = day.row(ser.name) else {
                continue;
            };
            for (part, value) in [
                (Part::InQuota, row.in_quota_hours()),
                (Part::Borrowed, row.borrowed_hours()),
                (Part::Lent, row.lent_hours()),
            ] {
                if value != 0.0 {
                    segments.push(Segment {
                        day: d,
                        series: s,
                        part,
                        value,
                    });
                }
            }
        }
    }
    segments
}

/// Each day's total cost of every row, in the rows' order; nothing for a cost that is 0.
fn cost_segments(series: &[Series<'_>], days: &[UsageReport]) -> Vec<Segment> {
    let mut segments = Vec::new();
    for (d, day) in days.iter().enumerate() {
        for (s, ser) in series.iter().enumerate() {
            let Some(value) = day.row(ser.name).and_then(|r| r.total_cost) else {
                continue;
            };
            if value != 0.0 {
                segments.push(Segment {
                    day: d,
                    series: s,
                    part: Part::Cost,
                    value,
                });
            }
        }
    }
    segments
}

#[cfg(test)]
mod tests;
