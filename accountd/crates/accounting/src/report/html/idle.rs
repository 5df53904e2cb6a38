//! The page's part drawn from the NVML samples (issue 29): a chart of each team's allocated
//! GPU-hours per day, split into what the samples saw busy, what they saw idle and what they did
//! not see, and the users' idle GPU-hours as `report users` prints them.

use std::fmt::Write as _;

use super::chart::{Chart, Part, Segment, Series};
use super::{escape, local_date, PALETTE};
use crate::report::users::{users_notes, users_table_cells, UsersReport};
use crate::report::RowKind;

/// What the page shows from the samples: the period's users
/// ([`users_report`](crate::report::users::users_report)) and its days
/// ([`users_report_by_day`](crate::report::users::users_report_by_day), the days of the other
/// charts), with the same parameters.
#[derive(Debug, Clone, Copy)]
pub struct SampledUse<'a> {
    pub users: &'a UsersReport,
    pub days: &'a [UsersReport],
}

/// The section of the chart of allocated and busy GPU-hours per day. `series`: the teams
/// report's rows, whose colours the teams keep here.
pub(super) fn busy_section<Tz: chrono::TimeZone>(
    out: &mut String,
    series: &[Series<'_>],
    sampled: SampledUse<'_>,
    tz: &Tz,
) {
    out.push_str("<section id=\"busy\">\n<h2>Allocated and busy GPU-hours per day</h2>\n");
    let days = sampled.days;
    if days.is_empty() {
        out.push_str("<p>No day of the period is counted yet.</p>\n");
    } else if !days.iter().any(UsersReport::has_samples) {
        out.push_str("<p>No GPU samples in the period: accountd sample on the GPU nodes and accountd collect-samples record them.</p>\n");
    } else {
        let dates: Vec<String> = days
            .iter()
            .map(|d| local_date(d.period.since, tz))
            .collect();
        let series = busy_series(series, days);
        let segments = busy_segments(&series, days);
        let chart = Chart {
            id: "busy",
            title: "Allocated GPU-hours per day and team: busy, idle and without samples".into(),
            desc: format!(
                "One bar per day from {} to {}: each team's allocated GPU-hours (job runs of every partition), stacked in the order of the table; of them, the hours its samples saw busy (solid, at or above {} % GPU utilisation), idle (pale) and the hours no sample saw (striped).",
                dates[0],
                dates[dates.len() - 1],
                sampled.users.idle_threshold
            ),
            axis: "allocated GPU-hours".into(),
            below_as_positive: false,
            dates: &dates,
            series: &series,
            segments: &segments,
            key: &[Part::Busy, Part::Idle, Part::Unsampled],
        };
        chart.render(out);
    }
    out.push_str("</section>\n");
}

/// The teams and accounts of the teams report in its order and colours, then the teams only
/// the samples' runs have (runs outside the governed partitions) in the next colours.
fn busy_series<'r>(teams: &[Series<'r>], days: &'r [UsersReport]) -> Vec<Series<'r>> {
    let mut series: Vec<Series<'r>> = teams
        .iter()
        .filter(|s| matches!(s.kind, RowKind::Team | RowKind::Account))
        .copied()
        .collect();
    let mut next = series.len();
    for day in days {
        for u in &day.users {
            if !series.iter().any(|s| s.name == u.team) {
                series.push(Series {
                    name: &u.team,
                    kind: RowKind::Account,
                    color: PALETTE[next % PALETTE.len()],
                });
                next += 1;
            }
        }
    }
    series
}

/// Each day's busy, idle and unsampled GPU-hours of every team, in the series' order, adding up
/// to its allocated GPU-hours (samples beyond a team's allocation are not drawn); nothing for a
/// figure that is 0.
fn busy_segments(series: &[Series<'_>], days: &[UsersReport]) -> Vec<Segment> {
    let mut segments = Vec::new();
    for (d, day) in days.iter().enumerate() {
        let teams = day.team_sums();
        for (s, ser) in series.iter().enumerate() {
            let Some(t) = teams.get(ser.name) else {
                continue;
            };
            // In ms, so the three parts add up to the allocation exactly.
            let allocated = t.allocated_gpu_seconds * 1000;
            let busy = (t.time.sampled_ms - t.time.idle_ms).clamp(0, allocated);
            let idle = t.time.idle_ms.clamp(0, allocated - busy);
            for (part, ms) in [
                (Part::Busy, busy),
                (Part::Idle, idle),
                (Part::Unsampled, allocated - busy - idle),
            ] {
                if ms != 0 {
                    segments.push(Segment {
                        day: d,
                        series: s,
                        part,
                        value: ms as f64 / 3_600_000.0,
                    });
                }
            }
        }
    }
    segments
}

/// The users' table: `report users`' cells and the notes under them.
pub(super) fn users_section(out: &mut String, users: &UsersReport) {
    let cells = users_table_cells(users, None);
    // Left-aligned text columns: the user, the team and the list of jobs.
    let last = cells.header.len() - 1;
    let text = |i: usize| {
        if i == 1 || i == last {
            " class=\"text\""
        } else {
            ""
        }
    };
    let _ = write!(
        out,
        "<section id=\"users\">\n<h2>Idle GPU-hours per user</h2>\n<p>Idle: sampled under {} % GPU utilisation; job runs of every partition.</p>\n<table class=\"users\">\n<thead>\n<tr>",
        users.idle_threshold
    );
    for (i, h) in cells.header.iter().enumerate() {
        let class = if i == 0 { " class=\"text\"" } else { text(i) };
        let _ = write!(out, "<th scope=\"col\"{class}>{}</th>", escape(h));
    }
    out.push_str("</tr>\n</thead>\n<tbody>\n");
    for line in &cells.lines {
        let _ = write!(
            out,
            "<tr class=\"user\"><th scope=\"row\">{}</th>",
            escape(&line[0])
        );
        for (j, cell) in line.iter().enumerate().skip(1) {
            let _ = write!(out, "<td{}>{}</td>", text(j), escape(cell));
        }
        out.push_str("</tr>\n");
    }
    out.push_str("</tbody>\n</table>\n");
    let _ = writeln!(
        out,
        "<pre class=\"notes\">{}</pre>\n</section>",
        escape(users_notes(users).trim_end())
    );
}
