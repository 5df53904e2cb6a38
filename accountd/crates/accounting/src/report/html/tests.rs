//! The tests of `html`.

use super::*;
use crate::gpu_sample::Sample;
use crate::model::cost::CostRule;
use crate::model::usage::TeamQuota;
use crate::period::Period;
use crate::report::users::{users_report, users_report_by_day, UsersReport};
use crate::report::utilisation::UtilisationParams;
use crate::report::{compute_usage, compute_usage_by_day, Format, Rates, UsageParams};
use crate::store::{CapacitySample, GpuTypes, RunUsage, Store};
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
        families: Vec::new(),
        quota_by_type: BTreeMap::new(),
        partitions: vec!["gpu".into()],
        rates: Rates::new(BTreeMap::from([("default".to_string(), 10.0)])),
        gpu_equivalents: BTreeMap::new(),
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
    let (report, days, _, page) = page_with(p, by_type, true);
    (report, days, page)
}

/// The page, and the users' reports it shows (with or without the samples of [`sampled`]).
fn page_with(
    p: &UsageParams,
    by_type: bool,
    with_samples: bool,
) -> (UsageReport, Vec<UsageReport>, UsersReport, String) {
    let report = compute_usage(&runs(), &capacity(), p);
    let days = compute_usage_by_day(&runs(), &capacity(), p, &Utc);
    let (users, user_days) = sampled(p, with_samples);
    let sampled = SampledUse {
        users: &users,
        days: &user_days,
    };
    let page = render_teams_html(&report, &days, sampled, by_type, &Utc);
    (report, days, users, page)
}

/// [`runs`] in a store, each with its user (a: alice, b: bob, the nasty account: a user of the
/// same name), and dave's 1 GPU in account `other` (not a row of the teams report: another
/// partition) in [48h, 50h). With samples (each one GPU-hour; idle under 5 %):
/// - run 1 (a, 3 GPUs, [2h, 6h)): GPU 1 4 h at 50 %, GPU 2 3 h at 0 %, GPU 3 2 h at 80 %: busy
///   6, idle 3, 3 GPU-hours unsampled;
/// - run 2 (b, 1 GPU, [8h, 10h)): 2 h at 100 %; dave's: 2 h at 1 % (idle);
/// - the others none.
fn sampled(p: &UsageParams, with_samples: bool) -> (UsersReport, Vec<UsersReport>) {
    let mut store = Store::open_in_memory().unwrap();
    let mut job_runs: Vec<_> = runs()
        .iter()
        .map(|r| {
            let job = u32::try_from(r.id).unwrap();
            let mut j = crate::store::tests::run(job, &r.account, r.start, r.end, r.gpus);
            j.user = match &*r.account {
                "a" => "alice".into(),
                "b" => "bob".into(),
                other => other.into(),
            };
            j
        })
        .collect();
    let mut dave = crate::store::tests::run(6, "other", T0 + 48 * H, Some(T0 + 50 * H), 1);
    dave.user = "dave".into();
    dave.partition = "debug".into();
    job_runs.push(dave);
    store.record_runs(&job_runs, 1, None).unwrap();
    let hourly = |gpu: &str, job: u32, from_h: i64, hours: i64, util: u32| -> Vec<Sample> {
        let start = job_runs.iter().find(|r| r.job_id_raw == job).unwrap().start;
        (0..hours)
            .map(|i| Sample {
                node: "n1".into(),
                gpu_uuid: gpu.into(),
                ts_ms: (T0 + (from_h + i) * H) * 1000,
                interval_ms: H * 1000,
                minor: None,
                job_id_raw: Some(job),
                job_start: Some(start),
                util_gpu: util,
                util_mem: 0,
                mem_used: 0,
                mem_total: None,
                processes: None,
            })
            .collect()
    };
    if with_samples {
        let samples = [
            hourly("GPU-1", 1, 2, 4, 50),
            hourly("GPU-2", 1, 2, 3, 0),
            hourly("GPU-3", 1, 2, 2, 80),
            hourly("GPU-4", 2, 8, 2, 100),
            hourly("GPU-5", 6, 48, 2, 1),
        ]
        .concat();
        store.record_samples("c", &samples, 5.0, p.now).unwrap();
    }
    let up = UtilisationParams {
        cluster: "c".into(),
        period: p.period,
        idle_threshold: 5.0,
        now: p.now,
    };
    (
        users_report(&store, &up).unwrap(),
        users_report_by_day(&store, &up, &Utc).unwrap(),
    )
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

/// The text of each `<th>`/`<td>` of each `<tr>` of the page's (teams) table.
fn table_rows(page: &str) -> Vec<Vec<String>> {
    rows_of_table(page, "<table>")
}

/// The text of each `<th>`/`<td>` of each `<tr>` of the table that `opening` opens.
fn rows_of_table(page: &str, opening: &str) -> Vec<Vec<String>> {
    let start = page.find(opening).unwrap();
    let end = start + page[start..].find("</table>").unwrap();
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
        let date = local_date(day.period.since, &Utc);
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
        3
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

/// The busy chart: each team's allocated GPU-hours of each day, split into busy (solid), idle
/// (pale) and unsampled (striped), in proportion; the teams keep the teams report's colours.
/// From [`sampled`]:
/// - 03-01: a: run 1, 12 GPU-hours: busy 6, idle 3, unsampled 3; b: run 2 busy 2;
/// - 03-02: the nasty account 5 and b's run 4 6 unsampled; a's run 5 from 20:00: 2 x 4 = 8;
/// - 03-03: a's run 5 until 06:00: 2 x 6 = 12 unsampled; dave's `other` 2 idle.
#[test]
fn the_busy_chart_splits_each_teams_allocation_into_busy_idle_and_unsampled() {
    let (_, _, page) = page_of(&params(), false);
    let segments = segments_of(&page, "busy");
    let mut got: Vec<(String, String, String, f64)> = segments
        .iter()
        .map(|s| {
            let date = s["data-day"].clone();
            (
                date,
                s["data-series"].clone(),
                s["part"].clone(),
                num(s, "data-value"),
            )
        })
        .collect();
    got.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let row = |d: &str, team: &str, part: &str, v: f64| {
        (d.to_string(), team.to_string(), part.to_string(), v)
    };
    assert_eq!(
        got,
        [
            row("2024-03-01", "a", "busy", 6.0),
            row("2024-03-01", "a", "idle", 3.0),
            row("2024-03-01", "a", "unsampled", 3.0),
            row("2024-03-01", "b", "busy", 2.0),
            row("2024-03-02", NASTY, "unsampled", 5.0),
            row("2024-03-02", "a", "unsampled", 8.0),
            row("2024-03-02", "b", "unsampled", 6.0),
            row("2024-03-03", "a", "unsampled", 12.0),
            row("2024-03-03", "other", "idle", 2.0),
        ]
    );
    // The tallest day, 03-02: 19 GPU-hours, in steps of 5.
    let (above, below, plot_height, zero) = axis_of(&page, "busy");
    assert_eq!((above, below), (20.0, 0.0));
    let scale = plot_height / above;
    // 03-01's bar: a's three parts, then b's, stacked from the axis.
    let mut up = 0.0;
    for s in segments.iter().filter(|s| s["data-day"] == "2024-03-01") {
        up += num(s, "data-value");
        assert!(
            close(num(s, "height"), num(s, "data-value") * scale, 0.006),
            "{s:?}"
        );
        assert!(close(num(s, "y"), zero - up * scale, 0.011), "{s:?}");
    }
    assert_eq!(up, 14.0);
    // a's colour is its colour in the usage chart; `other`, no row of the teams table, the next.
    let fill_of = |chart: &str, series: &str, part: &str| {
        segments_of(&page, chart)
            .into_iter()
            .find(|s| s["data-series"] == series && s["part"] == part)
            .map(|s| s["fill"].clone())
            .unwrap()
    };
    assert_eq!(
        fill_of("busy", "a", "busy"),
        fill_of("usage", "a", "in-quota")
    );
    let teams = 3; // the nasty account, a, b
    assert_eq!(fill_of("busy", "other", "idle"), PALETTE[teams]);
    assert!(page.contains("<title>a, 2024-03-01: 3.0000 GPU-hours without samples</title>"));
    assert!(page.contains("no samples: striped</li>"));
}

/// The users' table is `report users`' table, cell for cell, with its notes.
#[test]
fn the_users_table_is_report_users_table() {
    let (_, _, users, page) = page_with(&params(), false, true);
    let rows = rows_of_table(&page, "<table class=\"users\">");
    let text = crate::report::users::render_users(&users, Format::Table, None, &Utc);
    let text_rows: Vec<&str> = text.lines().skip(1).take(rows.len()).collect();
    for (html, text) in rows.iter().zip(&text_rows) {
        let html: Vec<&str> = html
            .iter()
            .map(String::as_str)
            .filter(|c| !c.is_empty())
            .collect();
        assert_eq!(
            html.join(" "),
            text.split_whitespace().collect::<Vec<_>>().join(" ")
        );
    }
    // alice: runs 1 and 5, 12 + 20 allocated; 9 sampled, 3 of them idle; 3 + 20 unsampled. Then
    // dave (2 idle), then the others by name ('<' before 'b').
    assert_eq!(rows.len(), 5, "{rows:?}");
    assert_eq!(
        rows[1][..8],
        ["alice", "a", "2", "32.0000", "9.0000", "3.0000", "9.4", "23.0000"]
    );
    assert_eq!(rows[1][8], "1 (3.0000)");
    let users: Vec<&str> = rows[1..].iter().map(|r| r[0].as_str()).collect();
    assert_eq!(users, ["alice", "dave", NASTY, "bob"]);
    assert!(page.contains("<pre class=\"notes\">IDLE%: idle GPU-hours over allocated GPU-hours."));
}

/// Without samples, no busy chart (the table of users still has their allocated GPU-hours).
#[test]
fn without_samples_a_line_says_so_in_place_of_the_busy_chart() {
    let (_, _, users, page) = page_with(&params(), false, false);
    assert!(!page.contains("id=\"busy-chart\""));
    assert_eq!(page.matches("<svg class=\"chart\"").count(), 2);
    assert!(page.contains("<p>No GPU samples in the period: accountd sample on the GPU nodes"));
    assert_eq!(users.users.len(), 4);
    assert!(users.users.iter().all(|u| u.sums.time.samples == 0));
}
