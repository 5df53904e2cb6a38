//! `accountd report users` as a table, CSV or JSON. The table's cells and the notes under it
//! are also the HTML page's (`report::html`).

use std::fmt::Write as _;

use serde::Serialize;

use super::{RunIdle, UserIdle, UsersReport, WORST_RUNS};
use crate::period::{format_local, format_rfc3339};
use crate::report::{csv_text, json_text, table, CsvNumber, CsvNumbers, Format, Numbers};

/// The users table: its header and a line per user and team.
pub(crate) struct UsersTable {
    pub header: Vec<&'static str>,
    pub lines: Vec<Vec<String>>,
}

/// The cells of the users table, the first `limit` users (all with None).
pub(crate) fn users_table_cells(r: &UsersReport, limit: Option<usize>) -> UsersTable {
    let lines = shown(r, limit)
        .iter()
        .map(|u| {
            let s = &u.sums;
            vec![
                u.user.clone(),
                u.team.clone(),
                s.jobs.to_string(),
                format!("{:.4}", s.gpu_hours()),
                format!("{:.4}", s.sampled_gpu_hours()),
                format!("{:.4}", s.idle_gpu_hours()),
                s.idle_percent()
                    .map(|p| format!("{p:.1}"))
                    .unwrap_or_default(),
                format!("{:.4}", s.unsampled_gpu_hours()),
                worst_cell(&u.worst),
                policy_cell(u),
            ]
        })
        .collect();
    UsersTable {
        header: vec![
            "USER",
            "TEAM",
            "JOBS",
            "GPU-HOURS",
            "SAMPLED",
            "IDLE-GPU-HOURS",
            "IDLE%",
            "UNSAMPLED",
            "WORST-JOBS",
            "IDLE-POLICY",
        ],
        lines,
    }
}

/// A user's most idle runs: `job (idle GPU-hours)`, comma-separated.
fn worst_cell(worst: &[RunIdle]) -> String {
    worst
        .iter()
        .map(|w| format!("{} ({:.4})", w.job_id, w.time.idle_gpu_hours()))
        .collect::<Vec<_>>()
        .join(", ")
}

/// What the idle policy did: `notice 2, requeue 1`; `-` for nothing.
fn policy_cell(u: &UserIdle) -> String {
    let steps: Vec<String> = POLICY_STEPS
        .iter()
        .filter_map(|s| u.policy.get(*s).map(|n| format!("{s} {n}")))
        .collect();
    if steps.is_empty() {
        "-".into()
    } else {
        steps.join(", ")
    }
}

/// The idle policy's steps, in the order a job meets them.
const POLICY_STEPS: [&str; 5] = ["notice", "reclaim-first", "requeue", "cancel", "cleared"];

fn shown(r: &UsersReport, limit: Option<usize>) -> &[UserIdle] {
    &r.users[..limit.unwrap_or(usize::MAX).min(r.users.len())]
}

/// What the table's figures mean, and the samples no user has.
pub(crate) fn users_notes(r: &UsersReport) -> String {
    let mut out = String::new();
    if r.users.is_empty() {
        out.push_str("(no job runs with GPUs in the period)\n");
    }
    out.push_str(
        "IDLE%: idle GPU-hours over allocated GPU-hours. UNSAMPLED: allocated GPU-hours without samples, never counted as idle.\n\
         WORST-JOBS: each user's job runs with the most idle GPU-hours (their idle GPU-hours).\n\
         IDLE-POLICY: what [governance.idle_policy] did to the user's jobs in the period (notices, requeues...).\n",
    );
    if r.unattributed.samples > 0 {
        let _ = writeln!(
            out,
            "Job runs sacct has not brought in yet (no user): {:.4} GPU-hours sampled, {:.4} idle.",
            r.unattributed.sampled_gpu_hours(),
            r.unattributed.idle_gpu_hours()
        );
    }
    out
}

/// `accountd report users`: the users with the most idle GPU-hours first, at most `limit`
/// (all with None).
pub fn render_users<Tz: chrono::TimeZone>(
    r: &UsersReport,
    format: Format,
    limit: Option<usize>,
    tz: &Tz,
) -> String
where
    Tz::Offset: std::fmt::Display,
{
    let (since, until) = (
        format_rfc3339(r.period.since),
        format_rfc3339(r.period.until),
    );
    let users = shown(r, limit);
    match format {
        Format::Table => {
            let mut out = format!(
                "Idle GPU-hours per user (idle: under {} %) on {} from {} to {} (local time)\n",
                r.idle_threshold,
                r.cluster,
                format_local(r.period.since, tz).replace('T', " "),
                format_local(r.period.until, tz).replace('T', " "),
            );
            let cells = users_table_cells(r, limit);
            // The user and the team, and the list of jobs and the policy's steps last.
            let text = |i: usize| i < 2 || i + 2 >= cells.header.len();
            out.push_str(&table::render_aligned(
                &cells.header,
                &cells.lines,
                text,
                None,
            ));
            out.push_str(&users_notes(r));
            out
        }
        Format::Csv => csv_text(users.iter().map(|u| csv_line(u, &since, &until))),
        Format::Json => json_text(
            &users
                .iter()
                .map(|u| json_line(u, &since, &until))
                .collect::<Vec<_>>(),
        ),
    }
}

/// One user of `report users` in CSV: a line, each of the most idle runs in two columns. Names
/// and order are an interface: keep them.
#[derive(Serialize, Default)]
struct UserCsvLine<'a> {
    user: &'a str,
    team: &'a str,
    jobs: usize,
    gpu_hours: CsvNumber,
    sampled_gpu_hours: CsvNumber,
    idle_gpu_hours: CsvNumber,
    idle_percent: Option<CsvNumber>,
    unsampled_gpu_hours: CsvNumber,
    worst_job_1: Option<&'a str>,
    worst_job_1_idle_gpu_hours: Option<CsvNumber>,
    worst_job_2: Option<&'a str>,
    worst_job_2_idle_gpu_hours: Option<CsvNumber>,
    worst_job_3: Option<&'a str>,
    worst_job_3_idle_gpu_hours: Option<CsvNumber>,
    idle_policy_notices: u64,
    idle_policy_reclaim_first: u64,
    idle_policy_requeues: u64,
    idle_policy_cancels: u64,
    since: &'a str,
    until: &'a str,
}

// The CSV has a pair of columns per named run.
const _: () = assert!(WORST_RUNS == 3);

fn csv_line<'a>(u: &'a UserIdle, since: &'a str, until: &'a str) -> UserCsvLine<'a> {
    let h = |v: f64| CsvNumbers::number(v, Some(4));
    let job = |i: usize| u.worst.get(i).map(|w| w.job_id.as_str());
    let idle = |i: usize| u.worst.get(i).map(|w| h(w.time.idle_gpu_hours()));
    let s = &u.sums;
    UserCsvLine {
        user: &u.user,
        team: &u.team,
        jobs: s.jobs,
        gpu_hours: h(s.gpu_hours()),
        sampled_gpu_hours: h(s.sampled_gpu_hours()),
        idle_gpu_hours: h(s.idle_gpu_hours()),
        idle_percent: s.idle_percent().map(|p| CsvNumbers::number(p, Some(2))),
        unsampled_gpu_hours: h(s.unsampled_gpu_hours()),
        worst_job_1: job(0),
        worst_job_1_idle_gpu_hours: idle(0),
        worst_job_2: job(1),
        worst_job_2_idle_gpu_hours: idle(1),
        worst_job_3: job(2),
        worst_job_3_idle_gpu_hours: idle(2),
        idle_policy_notices: steps(u, "notice"),
        idle_policy_reclaim_first: steps(u, "reclaim-first"),
        idle_policy_requeues: steps(u, "requeue"),
        idle_policy_cancels: steps(u, "cancel"),
        since,
        until,
    }
}

/// One user of `report users` in JSON: the CSV's figures, the most idle runs as an array.
/// Names and order are an interface: keep them.
#[derive(Serialize)]
struct UserJsonLine<'a> {
    user: &'a str,
    team: &'a str,
    jobs: usize,
    gpu_hours: f64,
    sampled_gpu_hours: f64,
    idle_gpu_hours: f64,
    idle_percent: Option<f64>,
    unsampled_gpu_hours: f64,
    worst_jobs: Vec<WorstJobJson<'a>>,
    /// The idle policy's steps and how many, by step.
    idle_policy: &'a std::collections::BTreeMap<String, u64>,
    since: &'a str,
    until: &'a str,
}

#[derive(Serialize)]
struct WorstJobJson<'a> {
    job: &'a str,
    job_id_raw: u32,
    gpu_hours: f64,
    sampled_gpu_hours: f64,
    idle_gpu_hours: f64,
}

fn json_line<'a>(u: &'a UserIdle, since: &'a str, until: &'a str) -> UserJsonLine<'a> {
    let s = &u.sums;
    UserJsonLine {
        user: &u.user,
        team: &u.team,
        jobs: s.jobs,
        gpu_hours: s.gpu_hours(),
        sampled_gpu_hours: s.sampled_gpu_hours(),
        idle_gpu_hours: s.idle_gpu_hours(),
        idle_percent: s.idle_percent(),
        unsampled_gpu_hours: s.unsampled_gpu_hours(),
        worst_jobs: u
            .worst
            .iter()
            .map(|w| WorstJobJson {
                job: &w.job_id,
                job_id_raw: w.job_id_raw,
                gpu_hours: w.gpu_hours(),
                sampled_gpu_hours: w.time.sampled_gpu_hours(),
                idle_gpu_hours: w.time.idle_gpu_hours(),
            })
            .collect(),
        idle_policy: &u.policy,
        since,
        until,
    }
}

fn steps(u: &UserIdle, step: &str) -> u64 {
    u.policy.get(step).copied().unwrap_or(0)
}
