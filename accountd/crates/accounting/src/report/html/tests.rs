//! The tests of `html`.

use super::*;
use crate::model::cost::CostRule;
use crate::model::usage::TeamQuota;
use crate::period::Period;
use crate::report::{compute_usage, compute_usage_by_day, Format, Rates, UsageParams};
use crate::store::{CapacitySample, GpuTypes, RunUsage};
use chrono::Utc;
use std::collections::BTreeMap;
use teamshare_config::IdleCostSplit;

const H: i64 = 3600;
/// 2024-03-01T00:00:00Z.
const T0: i64 = 1_709_251_200;
/// An account name an attacker could choose (sacct gives accounts verbatim).
const NASTY: &str = "<script>alert(\"x\")</script>&co'";

fn run(id: i64, account: &str, start_h: i64, end_h: i64, gpus: u64) -> RunUsage {
    RunUsage {
        id,
        account: account.into(),
        partition: "gpu".into(),
        start: T0 + start_h * H,
        end: Some(T0 + end_h * H),
        gpus,
        gpus_by_type: GpuTypes::default(),
    }
}

fn quota(name: &str, quota: u32) -> TeamQuota {
    TeamQuota {
        name: name.into(),
        quota,
        lend_limit: quota,
    }
}

/// Three days from T0 (UTC midnight), capacity 8 GPUs at 10 per GPU-hour; quotas a 2,
/// b 4 (2 unallocated).
fn params() -> UsageParams {
    UsageParams {
        cluster: "c".into(),
        period: Period {
            since: T0,
            until: T0 + 72 * H,
        },
        now: T0 + 100 * H,
        teams: vec![quota("a", 2), quota("b", 4)],
        typed_teams: BTreeMap::new(),
        quota_by_type: BTreeMap::new(),
        partitions: vec!["gpu".into()],
        rates: Rates::new(BTreeMap::from([("default".to_string(), 10.0)])),
        currency: Some("BRL".into()),
        cost_rule: CostRule {
            borrowed_cost_factor: 1.0,
            idle_split: IdleCostSplit::QuotaShare,
        },
        only: vec![],
    }
}

/// Day 1: a 3 GPUs for 4 h (1 borrowed from b's idle quota and the pool), b 1 GPU 2 h.
/// Day 2: the nasty account 1 GPU for 5 h (all borrowed), b 6 GPUs 1 h (2 borrowed), a 2
/// GPUs from 20:00 across the night to 06:00 on day 3.
fn runs() -> Vec<RunUsage> {
    vec![
        run(1, "a", 2, 6, 3),
        run(2, "b", 8, 10, 1),
        run(3, NASTY, 30, 35, 1),
        run(4, "b", 40, 41, 6),
        run(5, "a", 44, 54, 2),
    ]
}

fn capacity() -> Vec<CapacitySample> {
    vec![CapacitySample {
        ts: T0 - 24 * H,
        gpus: 8,
        by_type: BTreeMap::new(),
    }]
}

fn page_of(p: &UsageParams, by_type: bool) -> (UsageReport, Vec<UsageReport>, String) {
    let report = compute_usage(&runs(), &capacity(), p);
    let days = compute_usage_by_day(&runs(), &capacity(), p, &Utc);
    let page = render_teams_html(&report, &days, by_type, &Utc);
    (report, days, page)
}

/// `&lt;` and the like back to their characters.
fn unescape(s: &str) -> String {
    s.replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&#39;", "'")
        .replace("&amp;", "&")
}

/// The attributes of a start tag's text (after its name, up to `>`).
fn attributes(tag: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut rest = tag;
    while let Some(eq) = rest.find("=\"") {
        let name = rest[..eq].rsplit(' ').next().unwrap().to_string();
        let value_end = rest[eq + 2..].find('"').unwrap();
        out.insert(name, unescape(&rest[eq + 2..eq + 2 + value_end]));
        rest = &rest[eq + 2 + value_end + 1..];
    }
    out
}

/// The segments of the chart `id`: their attributes.
fn segments_of(page: &str, id: &str) -> Vec<BTreeMap<String, String>> {
    let start = page.find(&format!("id=\"{id}-chart\"")).unwrap();
    let end = start + page[start..].find("</svg>").unwrap();
    page[start..end]
        .split("<rect class=\"seg ")
        .skip(1)
        .map(|s| {
            let mut a = attributes(&s[..s.find('>').unwrap()]);
            a.insert("part".into(), s[..s.find('"').unwrap()].to_string());
            a
        })
        .collect()
}

/// The chart's `data-` figures of its axis.
fn axis_of(page: &str, id: &str) -> (f64, f64, f64, f64) {
    let start = page.find(&format!("id=\"{id}-chart\"")).unwrap();
    let a = attributes(&page[start..start + page[start..].find('>').unwrap()]);
    let f = |k: &str| a[k].parse::<f64>().unwrap();
    (
        f("data-above"),
        f("data-below"),
        f("data-plot-height"),
        f("data-zero"),
    )
}

fn num(a: &BTreeMap<String, String>, k: &str) -> f64 {
    a[k].parse().unwrap()
}

/// The text of each `<th>`/`<td>` of each `<tr>` of the page's table.
fn table_rows(page: &str) -> Vec<Vec<String>> {
    let start = page.find("<table>").unwrap();
    let end = page.find("</table>").unwrap();
    page[start..end]
        .split("<tr")
        .skip(1)
        .map(|tr| {
            let mut cells = Vec::new();
            let mut rest = tr;
            while let Some(open) = rest.find('<') {
                let tag = &rest[open..];
                if tag.starts_with("<td") || tag.starts_with("<th") {
                    let content_start = open + tag.find('>').unwrap() + 1;
                    let close = rest[content_start..]
                        .find("</t")
                        .map(|c| content_start + c)
                        .unwrap();
                    let mut content = &rest[content_start..close];
                    // The swatch before a row's name.
                    if let Some(svg_end) = content.find("</svg>") {
                        content = &content[svg_end + "</svg>".len()..];
                    }
                    cells.push(unescape(content));
                    rest = &rest[close + 3..];
                } else {
                    rest = &rest[open + 1..];
                }
            }
            cells
        })
        .collect()
}

fn close(a: f64, b: f64, tolerance: f64) -> bool {
    (a - b).abs() <= tolerance
}

#[test]
fn escape_replaces_the_five_characters() {
    assert_eq!(escape("a<b>&\"c'"), "a&lt;b&gt;&amp;&quot;c&#39;");
    assert_eq!(escape("plain-name_1.x"), "plain-name_1.x");
}

/// Every text is escaped: the nasty account's name never opens a tag or breaks an attribute,
/// every `<` opens a tag of the page's own, every `&` is a character reference.
#[test]
fn every_text_is_escaped_and_the_page_loads_nothing() {
    let (report, _, page) = page_of(&params(), true);
    assert!(report.row(NASTY).is_some());
    let escaped = escape(NASTY);
    assert_eq!(
        escaped,
        "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;&amp;co&#39;"
    );
    assert!(!page.contains(NASTY));
    assert!(!page.to_lowercase().contains("<script"), "a script tag");
    // In the table, the legend of both charts, the segments' attributes and titles.
    assert!(page.matches(&escaped).count() >= 6, "{page}");
    let allowed = [
        "!DOCTYPE",
        "html",
        "head",
        "meta",
        "title",
        "style",
        "body",
        "header",
        "h1",
        "h2",
        "p",
        "section",
        "table",
        "thead",
        "tbody",
        "tfoot",
        "tr",
        "th",
        "td",
        "pre",
        "figure",
        "figcaption",
        "svg",
        "desc",
        "defs",
        "pattern",
        "rect",
        "g",
        "line",
        "text",
        "ul",
        "li",
        "footer",
    ];
    for tag in page.split('<').skip(1) {
        let name = tag
            .trim_start_matches('/')
            .split([' ', '>', '/', '\n'])
            .next()
            .unwrap();
        assert!(allowed.contains(&name), "tag <{name}");
    }
    for (i, _) in page.match_indices('&') {
        let rest = &page[i..];
        assert!(
            ["&amp;", "&lt;", "&gt;", "&quot;", "&#39;"]
                .iter()
                .any(|e| rest.starts_with(e)),
            "a bare & at {}",
            &page[i..(i + 20).min(page.len())]
        );
    }
    // Nothing to fetch: no address, no source, no link, no script; a policy that forbids it.
    for s in [
        "http:", "https:", "//", "src=", "href=", "@import", "url(\"",
    ] {
        assert!(!page.contains(s), "{s}");
    }
    assert!(page
        .match_indices("url(")
        .all(|(i, _)| page[i..].starts_with("url(#")));
    assert!(page.contains(
        "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'\">"
    ));
    assert!(page.starts_with("<!DOCTYPE html>\n") && page.ends_with("</html>\n"));
}

/// The table's cells are the table format's (so its numbers are formatted the same), and
/// those are the report's figures.
#[test]
fn the_table_is_the_table_formats_with_the_reports_figures() {
    let p = params();
    let (report, _, page) = page_of(&p, false);
    let rows = table_rows(&page);
    let text = report::render_teams(&report, Format::Table, false, &Utc);
    let text_lines: Vec<Vec<String>> = text
        .lines()
        .skip(2)
        .filter(|l| !l.starts_with("---"))
        .take(rows.len())
        .map(|l| l.split_whitespace().map(str::to_string).collect())
        .collect();
    assert_eq!(rows.len(), report.rows.len() + 2, "header, rows, total");
    for (html, text) in rows.iter().zip(&text_lines) {
        let html: Vec<&str> = html
            .iter()
            .map(String::as_str)
            .filter(|c| !c.is_empty())
            .collect();
        // The text table's header splits `TOTAL-COST (BRL)` in two.
        let text: Vec<String> = text.to_vec();
        assert_eq!(html.join(" "), text.join(" "));
    }
    let header = &rows[0];
    let col = |name: &str| header.iter().position(|h| h == name).unwrap();
    for (row, cells) in report.rows.iter().zip(&rows[1..]) {
        assert_eq!(cells[0], row.team);
        assert_eq!(cells[col("JOBS")], row.jobs.to_string());
        let hours = |name: &str| cells[col(name)].parse::<f64>().unwrap();
        assert!(close(hours("GPU-HOURS"), row.gpu_hours(), 5e-5));
        assert!(close(hours("IN-QUOTA"), row.in_quota_hours(), 5e-5));
        assert!(close(hours("BORROWED"), row.borrowed_hours(), 5e-5));
        assert!(close(hours("LENT"), row.lent_hours(), 5e-5));
        let cost = cells[col("TOTAL-COST (BRL)")].parse::<f64>().unwrap();
        assert!(close(cost, row.total_cost.unwrap(), 5e-3));
    }
    // a: 3 GPUs x 4 h + 2 GPUs x 10 h. The nasty name sorts first ('<' before 'a').
    assert_eq!(rows[1][0], NASTY);
    let a = rows.iter().find(|r| r[0] == "a").unwrap();
    assert_eq!(a[col("GPU-HOURS")], "32.0000");
    let total = rows.last().unwrap();
    assert_eq!(total[0], "total");
    assert!(page.contains("<tfoot>\n<tr class=\"total\"><th scope=\"row\">total</th>"));
    // The notes under it are the table format's.
    assert!(
        page.contains("<pre class=\"notes\">capacity: 576.0000 GPU-hours costing 5760.00 (BRL) (recorded by accountd run)</pre>"),
        "{page}"
    );
    assert!(page.contains(&format!("<h1>{}</h1>", text.lines().next().unwrap())));
}

#[test]
fn by_type_lines_are_under_their_rows() {
    let (report, _, page) = page_of(&params(), true);
    let rows = table_rows(&page);
    assert_eq!(rows[0][..3], ["TEAM", "TYPE", "JOBS"]);
    let a = rows.iter().position(|r| r[0] == "a").unwrap();
    assert_eq!(rows[a][..2], ["a", "all"]);
    assert_eq!(rows[a + 1][..2], ["a", "default"]);
    assert!(
        page.contains("<tr class=\"type\"><th scope=\"row\">a</th><td class=\"text\">default</td>")
    );
    let text = report::render_teams(&report, Format::Table, true, &Utc);
    assert!(page.contains(&escape(
        text.lines().find(|l| l.starts_with("capacity")).unwrap()
    )));
}

/// One segment per row, day and figure that is not 0, none for a 0; its value the day's
/// report's; its height that value at the axis' one scale; the day's segments stacked from
/// the axis without gap or overlap, inside the plot.
#[test]
fn usage_bars_have_a_segment_per_team_and_day_proportional_to_its_hours() {
    let (report, days, page) = page_of(&params(), false);
    assert_eq!(days.len(), 3);
    let dates = ["2024-03-01", "2024-03-02", "2024-03-03"];
    let segments = segments_of(&page, "usage");
    let (above, below, plot_height, zero) = axis_of(&page, "usage");
    let scale = plot_height / (above + below);
    assert_eq!(plot_height, PLOT_HEIGHT);
    let mut expected = 0;
    for (d, day) in days.iter().enumerate() {
        let (mut up, mut down) = (0.0, 0.0);
        for row in report.rows.iter().filter(|r| r.kind != RowKind::Idle) {
            let Some(day_row) = day.row(&row.team) else {
                let day_segments = segments
                    .iter()
                    .filter(|s| s["data-series"] == row.team && s["data-day"] == dates[d]);
                assert_eq!(day_segments.count(), 0, "{} {}", row.team, dates[d]);
                continue;
            };
            for (part, hours) in [
                ("in-quota", day_row.in_quota_hours()),
                ("borrowed", day_row.borrowed_hours()),
                ("lent", day_row.lent_hours()),
            ] {
                let found: Vec<_> = segments
                    .iter()
                    .filter(|s| {
                        s["data-series"] == row.team
                            && s["data-day"] == dates[d]
                            && s["part"] == part
                    })
                    .collect();
                if hours == 0.0 {
                    assert!(found.is_empty(), "{} {} {part}", row.team, dates[d]);
                    continue;
                }
                expected += 1;
                assert_eq!(found.len(), 1, "{} {} {part}", row.team, dates[d]);
                let s = found[0];
                assert_eq!(num(s, "data-value"), hours);
                assert!(
                    close(num(s, "height"), hours * scale, 0.006),
                    "{s:?} at {scale}"
                );
                if part == "lent" {
                    assert!(close(num(s, "y"), zero + down * scale, 0.011), "{s:?}");
                    down += hours;
                } else {
                    up += hours;
                    assert!(close(num(s, "y"), zero - up * scale, 0.011), "{s:?}");
                }
                assert!(num(s, "y") >= TOP - 0.01);
                assert!(num(s, "y") + num(s, "height") <= TOP + PLOT_HEIGHT + 0.01);
            }
        }
        assert!(up <= above && down <= below, "the axis holds day {d}");
    }
    assert_eq!(segments.len(), expected);
    // Day 1: a's 3 GPUs for 4 h, 1 of them beyond its quota: 8 in quota, 4 borrowed.
    let a1 = |part: &str| {
        segments
            .iter()
            .find(|s| s["data-series"] == "a" && s["data-day"] == dates[0] && s["part"] == part)
            .map(|s| num(s, "data-value"))
    };
    assert_eq!((a1("in-quota"), a1("borrowed")), (Some(8.0), Some(4.0)));
    // The tallest day, 2024-03-02: the nasty account 5 GPU-hours, b 6, a 8 above the axis,
    // 5 + 2 lent below it: 26 in all, in steps of 10.
    assert_eq!((above, below), (20.0, 10.0));
    // The nasty account borrowed on day 2 only, striped in its colour.
    let nasty: Vec<_> = segments
        .iter()
        .filter(|s| s["data-series"] == NASTY)
        .collect();
    assert_eq!(nasty.len(), 1);
    assert_eq!(nasty[0]["part"], "borrowed");
    assert_eq!(nasty[0]["data-value"], "5");
    assert!(page.contains(&format!(
        "<title>{}, 2024-03-02: 5.0000 GPU-hours borrowed</title>",
        escape(NASTY)
    )));
}

/// Each day's cost bar adds up to its capacity cost; segments in proportion.
#[test]
fn cost_bars_add_up_to_each_days_capacity_cost() {
    let (_, days, page) = page_of(&params(), false);
    let segments = segments_of(&page, "cost");
    let (above, below, plot_height, _) = axis_of(&page, "cost");
    let scale = plot_height / (above + below);
    assert!(segments.iter().all(|s| s["part"] == "cost"));
    for (d, day) in days.iter().enumerate() {
        let date = local_date(day, &Utc);
        let of_day: Vec<_> = segments.iter().filter(|s| s["data-day"] == date).collect();
        let sum: f64 = of_day.iter().map(|s| num(s, "data-value")).sum();
        // 8 GPUs x 24 h x 10.
        assert!(close(sum, 1920.0, 1e-6), "day {d}: {sum}");
        assert!(close(day.capacity_cost.unwrap(), 1920.0, 1e-6));
        for s in &of_day {
            let row = day.row(&s["data-series"]).unwrap();
            assert_eq!(num(s, "data-value"), row.total_cost.unwrap());
            assert!(close(num(s, "height"), num(s, "data-value") * scale, 0.006));
        }
    }
    assert_eq!((above, below), (2000.0, 0.0));
    assert!(page.contains("<h2>Cost per day (BRL)</h2>"));
}

#[test]
fn without_rates_there_is_no_cost_chart() {
    let mut p = params();
    p.rates = Rates::default();
    let (_, _, page) = page_of(&p, false);
    assert!(page.contains("No rates are configured"));
    assert!(!page.contains("id=\"cost-chart\""));
    assert!(page.contains("id=\"usage-chart\""));
    assert!(!page.contains("COST"));
}

#[test]
fn a_period_not_counted_yet_has_no_charts() {
    let mut p = params();
    p.now = T0 - H;
    let (report, days, page) = page_of(&p, false);
    assert!(days.is_empty());
    assert!(report.rows.iter().all(|r| r.gpu_seconds == 0));
    assert!(!page.contains("<svg class=\"chart\""));
    assert_eq!(
        page.matches("No day of the period is counted yet.").count(),
        2
    );
}

#[test]
fn axes_are_round_and_hold_the_stacks() {
    let a = Axis::holding(28.0, 0.0);
    assert_eq!((a.above, a.below, a.step), (30.0, 0.0, 10.0));
    let a = Axis::holding(14.0, 4.0);
    assert_eq!((a.above, a.below, a.step), (15.0, 5.0, 5.0));
    let a = Axis::holding(0.9, 0.0);
    assert_eq!((a.above, a.step), (1.0, 0.2));
    let a = Axis::holding(1920.0, 0.0);
    assert_eq!((a.above, a.step), (2000.0, 500.0));
    let a = Axis::holding(0.0, 0.0);
    assert_eq!((a.above, a.below), (1.0, 0.0));
    for (up, down) in [(3.7, 0.2), (123.4, 56.7), (0.013, 0.0), (7.0, 7.0)] {
        let a = Axis::holding(up, down);
        assert!(a.above >= up && a.below >= down, "{up} {down}: {a:?}");
        assert!((a.above + a.below) / a.step <= 12.0, "{up} {down}: {a:?}");
    }
    assert_eq!(tick_label(0.30000000000000004), "0.3");
    assert_eq!(tick_label(-0.0), "0");
    assert_eq!(tick_label(2500.0), "2500");
}

/// Dates under the axis: every day while they fit, every other day and so on beyond.
#[test]
fn dates_thin_out_to_fit() {
    let mut p = params();
    p.period.until = T0 + 31 * 24 * H;
    p.now = p.period.until;
    let (_, days, page) = page_of(&p, false);
    assert_eq!(days.len(), 31);
    let start = page.find("id=\"usage-chart\"").unwrap();
    let chart = &page[start..start + page[start..].find("</svg>").unwrap()];
    let dates = &chart[chart.find("<g class=\"dates\">").unwrap()..];
    assert_eq!(dates.matches("<text").count(), 16, "{dates}");
    assert!(dates.contains(">03-01<") && dates.contains(">03-03<"));
    assert!(!dates.contains(">03-02<"));
}
