//! The stacked bar charts of the page: one bar per local day, each row's figures stacked in its
//! colour (solid, striped or pale by what a figure stands for), as inline SVG with a tooltip per
//! segment, the y axis' grid and labels, the dates that fit and a legend.

use std::fmt::Write as _;

use super::escape;
use crate::report::{self, RowKind};

/// The charts' drawing, in SVG user units (the page scales it to its width).
const WIDTH: f64 = 960.0;
const HEIGHT: f64 = 330.0;
/// Room for the y axis' labels and title.
const LEFT: f64 = 64.0;
const RIGHT: f64 = 8.0;
pub(super) const TOP: f64 = 12.0;
/// Room for the dates.
const BOTTOM: f64 = 36.0;
const PLOT_WIDTH: f64 = WIDTH - LEFT - RIGHT;
/// The height of the bars' area: the axis' range spans it.
pub(super) const PLOT_HEIGHT: f64 = HEIGHT - TOP - BOTTOM;
/// The share of a day's width its bar takes.
const BAR_SHARE: f64 = 0.7;
/// The least room for a date under the axis; dates closer than that are shown every other (or
/// third...) day.
const DATE_ROOM: f64 = 40.0;

/// A row of the report as the charts show it.
#[derive(Debug, Clone, Copy)]
pub(super) struct Series<'r> {
    pub(super) name: &'r str,
    pub(super) kind: RowKind,
    pub(super) color: &'static str,
}

/// What a bar segment stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Part {
    InQuota,
    Borrowed,
    /// Drawn below the axis.
    Lent,
    Cost,
    /// Allocated GPU-hours sampled at or above the idle threshold.
    Busy,
    /// Allocated GPU-hours sampled under the idle threshold.
    Idle,
    /// Allocated GPU-hours without samples.
    Unsampled,
}

/// How a segment is filled with its row's colour.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fill {
    Solid,
    Striped,
    Pale,
}

impl Part {
    /// Its class in the SVG.
    fn class(self) -> &'static str {
        match self {
            Part::InQuota => "in-quota",
            Part::Borrowed => "borrowed",
            Part::Lent => "lent",
            Part::Cost => "cost",
            Part::Busy => "busy",
            Part::Idle => "idle",
            Part::Unsampled => "unsampled",
        }
    }

    fn fill(self) -> Fill {
        match self {
            Part::InQuota | Part::Cost | Part::Busy => Fill::Solid,
            Part::Borrowed | Part::Unsampled => Fill::Striped,
            Part::Lent | Part::Idle => Fill::Pale,
        }
    }

    /// What the legend's key says of its fill.
    fn key(self) -> &'static str {
        match self {
            Part::InQuota => "in quota: solid",
            Part::Borrowed => "borrowed: striped",
            Part::Lent => "lent: pale, below the axis",
            Part::Cost => "cost: solid",
            Part::Busy => "busy (sampled at or above the idle threshold): solid",
            Part::Idle => "idle (sampled under it): pale",
            Part::Unsampled => "no samples: striped",
        }
    }
}

/// One segment of a day's bar: a row's figure.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Segment {
    pub(super) day: usize,
    pub(super) series: usize,
    pub(super) part: Part,
    /// The report's figure (lent hours are positive, drawn below the axis).
    pub(super) value: f64,
}

impl Segment {
    /// What a segment's tooltip says of its figure.
    fn figure(&self) -> String {
        match self.part {
            Part::InQuota => format!("{} GPU-hours in quota", report::hours(self.value)),
            Part::Borrowed => format!("{} GPU-hours borrowed", report::hours(self.value)),
            Part::Lent => format!("{} GPU-hours lent", report::hours(self.value)),
            Part::Cost => format!("total cost {}", report::money(Some(self.value))),
            Part::Busy => format!("{} GPU-hours busy", report::hours(self.value)),
            Part::Idle => format!("{} GPU-hours idle", report::hours(self.value)),
            Part::Unsampled => format!("{} GPU-hours without samples", report::hours(self.value)),
        }
    }

    /// Its signed extent: above the axis when positive.
    fn extent(&self) -> f64 {
        match self.part {
            Part::Lent => -self.value,
            _ => self.value,
        }
    }
}

/// A stacked bar chart of days.
pub(super) struct Chart<'a> {
    /// The prefix of its ids in the page.
    pub(super) id: &'static str,
    pub(super) title: String,
    pub(super) desc: String,
    /// The y axis' title.
    pub(super) axis: String,
    /// Label the axis below 0 with positive figures (lent hours), not negative ones.
    pub(super) below_as_positive: bool,
    pub(super) dates: &'a [String],
    pub(super) series: &'a [Series<'a>],
    /// In stacking order within each day.
    pub(super) segments: &'a [Segment],
    /// The parts whose fills the legend explains, in its order.
    pub(super) key: &'a [Part],
}

/// The y axis of a chart: from `-below` to `above`, ticks every `step`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct Axis {
    pub(super) above: f64,
    pub(super) below: f64,
    pub(super) step: f64,
}

impl Axis {
    /// An axis holding stacks up to `above` over 0 and down to `-below`, in about five steps of
    /// 1, 2, 2.5 or 5 times a power of ten.
    pub(super) fn holding(above: f64, below: f64) -> Axis {
        let range = above + below;
        if range.is_nan() || range <= 0.0 {
            return Axis {
                above: 1.0,
                below: 0.0,
                step: 0.25,
            };
        }
        let raw = range / 5.0;
        let magnitude = 10f64.powf(raw.log10().floor());
        let step = magnitude
            * [1.0, 2.0, 2.5, 5.0, 10.0]
                .into_iter()
                .find(|&m| raw <= m * magnitude)
                .unwrap_or(10.0);
        Axis {
            above: (above / step).ceil() * step,
            below: (below / step).ceil() * step,
            step,
        }
    }

    /// SVG units per unit of the figures.
    fn scale(&self) -> f64 {
        PLOT_HEIGHT / (self.above + self.below)
    }

    /// The y of the axis' 0.
    fn zero_y(&self) -> f64 {
        TOP + self.above * self.scale()
    }
}

/// A coordinate or length in the SVG: two decimals.
fn coord(v: f64) -> String {
    format!("{v:.2}")
}

/// A tick's label: at most six decimals, none that are 0.
pub(super) fn tick_label(v: f64) -> String {
    let rounded = (v * 1e6).round() / 1e6;
    if rounded == 0.0 {
        "0".to_string()
    } else {
        format!("{rounded}")
    }
}

impl Chart<'_> {
    pub(super) fn render(&self, out: &mut String) {
        let days = self.dates.len().max(1);
        let axis = self.axis(days);
        self.write_head(out, axis);
        self.write_patterns(out);
        self.write_grid(out, axis);
        // Each day's band, its bar in the middle.
        let band = PLOT_WIDTH / days as f64;
        self.write_bars(out, axis, days, band);
        self.write_dates(out, band);
        self.write_legend(out);
    }

    /// The axis that holds the highest stack above 0 and the deepest below.
    fn axis(&self, days: usize) -> Axis {
        let mut above = vec![0.0f64; days];
        let mut below = vec![0.0f64; days];
        for s in self.segments {
            let e = s.extent();
            if e >= 0.0 {
                above[s.day] += e;
            } else {
                below[s.day] -= e;
            }
        }
        let max = |v: &[f64]| v.iter().copied().fold(0.0, f64::max);
        Axis::holding(max(&above), max(&below))
    }

    /// The figure and the svg's opening, title and description.
    fn write_head(&self, out: &mut String, axis: Axis) {
        let zero = axis.zero_y();
        let id = self.id;
        let _ = writeln!(
            out,
            "<figure>\n<svg class=\"chart\" id=\"{id}-chart\" viewBox=\"0 0 {WIDTH} {HEIGHT}\" role=\"img\" aria-labelledby=\"{id}-title {id}-desc\" data-above=\"{}\" data-below=\"{}\" data-plot-height=\"{PLOT_HEIGHT}\" data-zero=\"{}\">",
            axis.above,
            axis.below,
            coord(zero)
        );
        let _ = writeln!(
            out,
            "<title id=\"{id}-title\">{}</title>\n<desc id=\"{id}-desc\">{}</desc>",
            escape(&self.title),
            escape(&self.desc)
        );
    }

    fn write_patterns(&self, out: &mut String) {
        let id = self.id;
        // Stripes in each row's colour for borrowed (or unsampled) hours, and a grey one for the
        // legend.
        let striped: Vec<usize> = {
            let mut s: Vec<usize> = self
                .segments
                .iter()
                .filter(|s| s.part.fill() == Fill::Striped)
                .map(|s| s.series)
                .collect();
            s.sort_unstable();
            s.dedup();
            s
        };
        if self.segments.iter().any(|s| s.part != Part::Cost) {
            out.push_str("<defs>\n");
            let mut pattern = |name: String, color: &str| {
                let _ = writeln!(
                    out,
                    "<pattern id=\"{name}\" width=\"6\" height=\"6\" patternUnits=\"userSpaceOnUse\" patternTransform=\"rotate(45)\"><rect width=\"6\" height=\"6\" fill=\"#fff\"/><rect width=\"3.5\" height=\"6\" fill=\"{color}\"/></pattern>"
                );
            };
            for &s in &striped {
                pattern(format!("{id}-b{s}"), self.series[s].color);
            }
            pattern(format!("{id}-bkey"), "#444");
            out.push_str("</defs>\n");
        }
    }

    fn write_grid(&self, out: &mut String, axis: Axis) {
        let scale = axis.scale();
        let zero = axis.zero_y();
        // Grid and the y axis' labels.
        out.push_str("<g class=\"grid\">\n");
        let steps_above = (axis.above / axis.step).round() as i64;
        let steps_below = (axis.below / axis.step).round() as i64;
        for k in -steps_below..=steps_above {
            let v = k as f64 * axis.step;
            let y = zero - v * scale;
            let label = if v < 0.0 && self.below_as_positive {
                -v
            } else {
                v
            };
            let _ = writeln!(
                out,
                "<line x1=\"{LEFT}\" x2=\"{}\" y1=\"{y}\" y2=\"{y}\"/><text x=\"{}\" y=\"{}\" text-anchor=\"end\">{}</text>",
                WIDTH - RIGHT,
                LEFT - 6.0,
                coord(y + 4.0),
                tick_label(label),
                y = coord(y)
            );
        }
        out.push_str("</g>\n");
        let _ = writeln!(
            out,
            "<text x=\"14\" y=\"{}\" text-anchor=\"middle\" transform=\"rotate(-90 14 {})\">{}</text>",
            coord(TOP + PLOT_HEIGHT / 2.0),
            coord(TOP + PLOT_HEIGHT / 2.0),
            escape(&self.axis)
        );
    }

    /// The bars: each day's segments stacked from the axis, up and down; then the axis' 0.
    fn write_bars(&self, out: &mut String, axis: Axis, days: usize, band: f64) {
        let scale = axis.scale();
        let zero = axis.zero_y();
        let bar = band * BAR_SHARE;
        let mut up = vec![0.0f64; days];
        let mut down = vec![0.0f64; days];
        out.push_str("<g class=\"bars\">\n");
        for s in self.segments {
            let series = &self.series[s.series];
            let x = LEFT + s.day as f64 * band + (band - bar) / 2.0;
            let e = s.extent();
            let height = e.abs() * scale;
            let y = if e >= 0.0 {
                up[s.day] += e;
                zero - up[s.day] * scale
            } else {
                let y = zero + down[s.day] * scale;
                down[s.day] -= e;
                y
            };
            let fill = self.fill(s);
            let figure = s.figure();
            let date = &self.dates[s.day];
            let _ = writeln!(
                out,
                "<rect class=\"seg {}\" data-series=\"{}\" data-day=\"{}\" data-value=\"{}\" x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" {fill}><title>{}, {}: {}</title></rect>",
                s.part.class(),
                escape(series.name),
                escape(date),
                s.value,
                coord(x),
                coord(y),
                coord(bar),
                coord(height),
                escape(series.name),
                escape(date),
                escape(&figure)
            );
        }
        out.push_str("</g>\n");
        let _ = writeln!(
            out,
            "<line class=\"zero\" x1=\"{LEFT}\" x2=\"{}\" y1=\"{z}\" y2=\"{z}\"/>",
            WIDTH - RIGHT,
            z = coord(zero)
        );
    }

    /// A segment's fill: its row's colour, striped where borrowed or unsampled, pale where lent
    /// or idle.
    fn fill(&self, s: &Segment) -> String {
        let id = self.id;
        let series = &self.series[s.series];
        match s.part.fill() {
            Fill::Solid => format!("fill=\"{}\"", series.color),
            Fill::Striped => format!("fill=\"url(#{id}-b{})\"", s.series),
            Fill::Pale => format!(
                "fill=\"{0}\" fill-opacity=\"0.35\" stroke=\"{0}\" stroke-width=\"0.6\"",
                series.color
            ),
        }
    }

    /// The dates, as many as fit.
    fn write_dates(&self, out: &mut String, band: f64) {
        let every = ((DATE_ROOM / band).ceil() as usize).max(1);
        out.push_str("<g class=\"dates\">\n");
        for (d, date) in self.dates.iter().enumerate().step_by(every) {
            let short = date.get(5..).unwrap_or(date);
            let _ = writeln!(
                out,
                "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>",
                coord(LEFT + (d as f64 + 0.5) * band),
                coord(HEIGHT - BOTTOM + 16.0),
                escape(short)
            );
        }
        out.push_str("</g>\n</svg>\n");
    }

    fn write_legend(&self, out: &mut String) {
        let id = self.id;
        // The legend: the rows drawn, then what the fills mean.
        out.push_str("<figcaption><ul class=\"legend\">\n");
        let mut shown: Vec<usize> = self.segments.iter().map(|s| s.series).collect();
        shown.sort_unstable();
        shown.dedup();
        for s in shown {
            let series = &self.series[s];
            let _ = writeln!(
                out,
                "<li>{}{}</li>",
                swatch(&format!("fill=\"{}\"", series.color)),
                escape(series.name)
            );
        }
        out.push_str("</ul>\n");
        // What the fills mean, apart from the rows (whose colours a grey could be taken for).
        if !self.key.is_empty() && self.segments.iter().any(|s| s.part != Part::Cost) {
            out.push_str("<ul class=\"legend key\">\n");
            for part in self.key {
                let fill = match part.fill() {
                    Fill::Solid => "fill=\"#444\"".to_string(),
                    Fill::Striped => format!("fill=\"url(#{id}-bkey)\""),
                    Fill::Pale => "fill=\"#444\" fill-opacity=\"0.35\" stroke=\"#444\"".to_string(),
                };
                let _ = writeln!(out, "<li>{}{}</li>", swatch(&fill), part.key());
            }
            out.push_str("</ul>\n");
        }
        out.push_str("</figcaption>\n</figure>\n");
    }
}

/// A legend's swatch of `fill`.
fn swatch(fill: &str) -> String {
    format!(
        "<svg class=\"swatch\" width=\"12\" height=\"12\" aria-hidden=\"true\"><rect width=\"12\" height=\"12\" {fill}/></svg>"
    )
}
