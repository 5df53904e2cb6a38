//! The replay as one HTML page: the main table led by the cluster and the teams that change
//! most (the rest folded away), the worse-off reasons, a bar chart of p95 waits, the
//! calibration and the capacity curve. No script, nothing loaded: the page is its own file.

use std::fmt::Write as _;

use crate::report::html::{escape, page_head, PALETTE};

use super::*;

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
    let teams = teams_by_change(replay);
    let (lead, rest) = teams.split_at(teams.len().min(LEAD_TEAMS));
    if !replay.columns.is_empty() {
        main_tables(&mut out, replay, lead, rest);
    }
    let reasons = reasons(replay);
    if !reasons.is_empty() {
        list_folded(&mut out, &reasons, "more reasons");
    }
    out.push_str("</section>\n");

    wait_section(&mut out, replay, lead, rest);

    if let Some(f) = &replay.idle_first {
        let _ = writeln!(
            out,
            "<section>\n<h2>Idle-first reclaim</h2>\n<p>{}</p>",
            escape(&f.sentence())
        );
        if let Some((h, l)) = f.table() {
            html_table(&mut out, &h, &l, 1, None);
        }
        out.push_str("</section>\n");
    }

    calibration_section(&mut out, replay);

    if let Some(curve) = &replay.curve {
        curve_section(&mut out, curve);
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

/// The cluster's and the leading teams' p95 wait per candidate, as bars.
fn wait_section(out: &mut String, replay: &Replay, lead: &[&str], rest: &[&str]) {
    // The cluster's and the leading teams' p95 wait per candidate.
    let names: Vec<String> = replay.columns.iter().map(|c| c.candidate.clone()).collect();
    let groups: Vec<(String, Vec<Option<f64>>)> = std::iter::once(CLUSTER)
        .chain(lead.iter().copied())
        .map(|team| (bar_label(replay, team), p95_hours(replay, team)))
        .collect();
    out.push_str("<section>\n<h2>p95 queue wait per team and candidate (hours)</h2>\n");
    if !rest.is_empty() {
        let _ = writeln!(
            out,
            "<p>The cluster and the {} teams that change most; the other {} are in the table.</p>",
            lead.len(),
            rest.len()
        );
    }
    bars_svg(
        out,
        "p95 queue wait per team and candidate",
        &groups,
        &names,
    );
    out.push_str("</section>\n");
}

/// The calibration: its verdict, table and hints, or that it was skipped.
fn calibration_section(out: &mut String, replay: &Replay) {
    out.push_str("<section>\n");
    match &replay.calibration {
        Some(cal) => {
            let _ = writeln!(out, "<h2>Calibration</h2>\n<p>{}</p>", escape(&calibration_verdict(cal)));
            let (h, l) = calibration_table(cal);
            html_table(out, &h, &l, 2, None);
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
}

/// The capacity curve: its table, sentences, and p95 wait and preemptions against capacity.
fn curve_section(out: &mut String, curve: &Curve) {
    let mut order: Vec<String> = Vec::new();
    for p in &curve.points {
        if !order.contains(&p.candidate) {
            order.push(p.candidate.clone());
        }
    }
    let mut xs: Vec<u32> = curve.points.iter().map(|p| p.gpus).collect();
    xs.sort_unstable();
    xs.dedup();
    let series = |pick: &dyn Fn(&CurvePoint) -> Option<f64>| -> Vec<(String, Vec<Option<f64>>)> {
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
    html_table(out, &h, &l, 2, None);
    out.push_str("<ul>\n");
    for s in curve.sentences() {
        let _ = writeln!(out, "<li>{}</li>", escape(&s));
    }
    out.push_str("</ul>\n<h3>cluster p95 wait (hours) against capacity (GPUs)</h3>\n");
    lines_svg(
        out,
        "cluster p95 wait against capacity",
        &xf,
        &series(&|p| p.cluster_p95_secs.map(|s| s as f64 / 3600.0)),
    );
    out.push_str("<h3>preemptions against capacity (GPUs)</h3>\n");
    lines_svg(
        out,
        "preemptions against capacity",
        &xf,
        &series(&|p| Some(f64::from(p.preemptions))),
    );
    out.push_str("</section>\n");
}

const W: f64 = 960.0;
const HGT: f64 = 300.0;
const LEFT: f64 = 56.0;
const BOTTOM: f64 = 40.0;
const TOP: f64 = 12.0;

/// A round upper bound of the axis for `max`.
pub(super) fn axis_max(max: f64) -> f64 {
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

/// Teams a page shows before folding the rest away (the main table's and the chart's).
pub const LEAD_TEAMS: usize = 12;
/// Reasons listed before the rest are folded away.
pub const LEAD_REASONS: usize = 20;

/// The main table: the cluster first, then `lead`; `rest` in a folded section of its own.
fn main_tables(out: &mut String, replay: &Replay, lead: &[&str], rest: &[&str]) {
    let header = main_header(replay);
    // The cluster's block in the cluster's style (a table of its own, all of it the rule's
    // side), then the teams.
    html_table(out, &header, &team_lines(replay, CLUSTER), 2, Some(0));
    let lines: Vec<Vec<String>> = lead.iter().flat_map(|t| team_lines(replay, t)).collect();
    if !lines.is_empty() {
        html_table(out, &header, &lines, 2, None);
    }
    if !rest.is_empty() {
        let _ = writeln!(
            out,
            "<details><summary>{} more teams, changing least</summary>",
            rest.len()
        );
        let lines: Vec<Vec<String>> = rest.iter().flat_map(|t| team_lines(replay, t)).collect();
        html_table(out, &header, &lines, 2, None);
        out.push_str("</details>\n");
    }
}

/// A list of `items`, the first [`LEAD_REASONS`] shown, the rest folded under `more`.
fn list_folded(out: &mut String, items: &[String], more: &str) {
    let (lead, rest) = items.split_at(items.len().min(LEAD_REASONS));
    out.push_str("<ul>\n");
    for r in lead {
        let _ = writeln!(out, "<li>{}</li>", escape(r));
    }
    out.push_str("</ul>\n");
    if !rest.is_empty() {
        let _ = writeln!(
            out,
            "<details><summary>{} {more}</summary>\n<ul>",
            rest.len()
        );
        for r in rest {
            let _ = writeln!(out, "<li>{}</li>", escape(r));
        }
        out.push_str("</ul>\n</details>\n");
    }
}

/// A team's p95 wait under each candidate, in hours.
fn p95_hours(replay: &Replay, team: &str) -> Vec<Option<f64>> {
    replay
        .columns
        .iter()
        .map(|c| {
            c.figures
                .row(team)
                .and_then(|x| x.wait.p95_secs)
                .map(|s| s as f64 / 3600.0)
        })
        .collect()
}

/// A team's label under its bars, saying where a candidate refused all its jobs (it has no
/// wait there, which must not read as a wait of zero).
fn bar_label(replay: &Replay, team: &str) -> String {
    let refused: Vec<&str> = replay
        .columns
        .iter()
        .filter(|c| {
            c.figures
                .row(team)
                .is_some_and(|r| r.jobs > 0 && r.rejected == r.jobs)
        })
        .map(|c| c.candidate.as_str())
        .collect();
    if refused.is_empty() {
        team.to_string()
    } else {
        format!("{team} (all refused: {})", refused.join(", "))
    }
}
