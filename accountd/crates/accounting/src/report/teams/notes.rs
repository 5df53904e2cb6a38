//! What the teams table says under it: the capacity and how it was taken, and the table of the
//! usage outside the governed partitions.

use std::fmt::Write as _;

use crate::period::format_local;

use super::text::{currency_suffix, hours, money, ALL_TYPES};
use super::{CapacitySource, UsageReport};
use crate::report::{table, DEFAULT_RATE, SECONDS_PER_HOUR};

/// What the teams table says under it: the capacity, how it was taken, and the usage outside the
/// governed partitions.
pub(crate) fn teams_notes<Tz: chrono::TimeZone>(
    report: &UsageReport,
    by_type: bool,
    tz: &Tz,
) -> String
where
    Tz::Offset: std::fmt::Display,
{
    let mut out = String::new();
    let source = match report.capacity_source {
        CapacitySource::Samples => "recorded by accountd run".to_string(),
        CapacitySource::EstimateUntil(t) => format!(
            "estimated until the first sample at {}",
            format_local(t, tz).replace('T', " ")
        ),
        CapacitySource::Estimate => "estimated: no capacity recorded".to_string(),
    };
    capacity_line(&mut out, report);
    let _ = writeln!(out, " ({source})");
    if report.capacity_by_type.len() > 1 {
        let parts: Vec<String> = report
            .capacity_by_type
            .iter()
            .map(|c| {
                let mut s = format!(
                    "{} {}",
                    c.gpu_type,
                    hours(c.capacity_seconds / SECONDS_PER_HOUR)
                );
                if let Some(cost) = c.capacity_cost {
                    let _ = write!(s, " costing {}", money(Some(cost)));
                }
                s
            })
            .collect();
        let _ = writeln!(out, "capacity by GPU type: {}", parts.join(", "));
    }
    if let Some(estimate) = &report.estimate {
        let parts: Vec<String> = estimate
            .by_type
            .iter()
            .map(|t| {
                format!(
                    "{} {} (quotas {}, most in use at once {})",
                    t.gpu_type, t.gpus, t.quotas, t.peak
                )
            })
            .collect();
        let _ = writeln!(
            out,
            "estimated capacity, per GPU type the larger of the quotas and the most GPUs in use at once{}: {}",
            if report.gpu_equivalents.is_empty() {
                ""
            } else {
                " (a GPU family's quotas less what its slices beyond their own quotas hold)"
            },
            parts.join(", ")
        );
    }
    if report.counted.until < report.period.until {
        let _ = writeln!(
            out,
            "counted up to now, {}",
            format_local(report.counted.until, tz).replace('T', " ")
        );
    }
    if report.over_lendable_seconds > 0.0 {
        let _ = writeln!(
            out,
            "{} GPU-hours were borrowed beyond what was lendable at the time (lent by (pool))",
            hours(report.over_lendable_seconds / SECONDS_PER_HOUR)
        );
    }
    if report.typed && report.untyped_gpu_seconds > 0.0 {
        let _ = writeln!(
            out,
            "{} GPU-hours were allocated without a GPU type: they are under `{DEFAULT_RATE}`, where no team has a quota",
            hours(report.untyped_gpu_seconds / SECONDS_PER_HOUR)
        );
    }
    if !report.outside.is_empty() {
        out.push_str(&outside_table(report, by_type));
    }
    out
}

/// The usage outside the governed partitions, after the teams table.
fn outside_table(report: &UsageReport, by_type: bool) -> String {
    let with_cost = report.capacity_cost.is_some();
    let mut header: Vec<String> = vec!["TEAM".into()];
    if by_type {
        header.push("TYPE".into());
    }
    header.extend(["JOBS", "GPU-HOURS"].map(String::from));
    if with_cost {
        header.push(format!("LIST-COST{}", currency_suffix(report)));
    }
    let mut lines: Vec<Vec<String>> = Vec::new();
    let mut push = |team: &str, gpu_type: &str, jobs: u64, gpu_hours: f64, cost: Option<f64>| {
        let mut v = vec![team.to_string()];
        if by_type {
            v.push(gpu_type.to_string());
        }
        v.extend([jobs.to_string(), hours(gpu_hours)]);
        if with_cost {
            v.push(money(cost));
        }
        lines.push(v);
    };
    for r in &report.outside {
        push(&r.team, ALL_TYPES, r.jobs, r.gpu_hours(), r.cost);
        if by_type {
            for t in &r.by_type {
                push(&r.team, &t.gpu_type, t.jobs, t.gpu_hours(), t.cost);
            }
        }
    }
    let partitions = if report.partitions.is_empty() {
        "every partition".to_string()
    } else {
        report.partitions.join(", ")
    };
    format!(
        "\nGPU usage outside the governed partitions ({partitions}): no team's quota, in none of the figures above\n{}",
        table::render(&header, &lines, 1, None)
    )
}

/// `capacity: H GPU-hours` (with slices, also in GPU-equivalents) and its cost, without the
/// line's end.
fn capacity_line(out: &mut String, report: &UsageReport) {
    let currency = currency_suffix(report);
    let _ = write!(
        out,
        "capacity: {} GPU-hours",
        hours(report.capacity_gpu_seconds / SECONDS_PER_HOUR)
    );
    if !report.gpu_equivalents.is_empty() {
        let equivalents: f64 = report
            .capacity_by_type
            .iter()
            .map(|c| c.capacity_seconds * report.equivalents_of(&c.gpu_type))
            .sum();
        let _ = write!(
            out,
            " ({} in GPU-equivalents)",
            hours(equivalents / SECONDS_PER_HOUR)
        );
    }
    if let Some(c) = report.capacity_cost {
        let _ = write!(out, " costing {}{currency}", money(Some(c)));
    }
}
