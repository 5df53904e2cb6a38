//! `accountd report`: per-team usage and cost (`teams`), jobs with idle GPUs (`jobs`),
//! utilisation (`utilisation`), idle GPU-hours per user (`users`) and fair-share (`fairshare`),
//! with what their figures rest on said on stderr.

use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use teamshare_config::Config;

use accountd::period::{self, format_local, Period, UnixSeconds};
use accountd::report::html as report_html;
use accountd::report::users::{self, UsersReport};
use accountd::report::utilisation;
use accountd::report::{self, CapacitySource, FairshareParams, Format, RowKind, UsageParams};
use accountd::slurm_cli;
use accountd::store::{RunawayRun, Store};

use super::args::{nonempty_period, time_arg, FormatArg, ReportKind, Time};
use super::{plural, print, with_report_store, UsageError};

#[derive(Debug, Args)]
pub(super) struct ReportArgs {
    /// What to report
    #[arg(value_enum, default_value_t = ReportKind::Teams)]
    kind: ReportKind,
    /// Only these teams (Slurm accounts); repeatable [default: every configured team and every
    /// account with usage]
    #[arg(long = "team", value_name = "TEAM")]
    teams: Vec<String>,
    /// Start of the period [default: the first of this month, 00:00 local time; fairshare: ten
    /// half-lives before --until]
    #[arg(long, value_name = "TIME")]
    since: Option<Time>,
    /// End of the period [default: now]; fairshare: the instant usage is decayed to
    #[arg(long, value_name = "TIME")]
    until: Option<Time>,
    /// Output format
    #[arg(long, value_enum, default_value_t = FormatArg::Table)]
    format: FormatArg,
    /// `jobs`, `users`: show at most N rows, the most idle first
    #[arg(long, value_name = "N")]
    limit: Option<usize>,
    /// `teams`: one report per local day of the period (a job counts on every day it held GPUs)
    #[arg(long)]
    by_day: bool,
    /// `teams`, table format: each row's GPU types on lines under it (CSV and JSON always carry
    /// them)
    #[arg(long)]
    by_type: bool,
}

pub(super) fn run(
    config: &Config,
    database: PathBuf,
    args: &ReportArgs,
) -> anyhow::Result<ExitCode> {
    if args.by_day && args.kind != ReportKind::Teams {
        return Err(UsageError("--by-day applies to `report teams` only".into()).into());
    }
    if args.by_type && args.kind != ReportKind::Teams {
        return Err(UsageError("--by-type applies to `report teams` only".into()).into());
    }
    if args.format == FormatArg::Html && args.kind == ReportKind::Users {
        return Err(UsageError(
            "--format html applies to `report teams` only: its page has the users' table too"
                .into(),
        )
        .into());
    }
    if args.format == FormatArg::Html && args.kind != ReportKind::Teams {
        return Err(UsageError("--format html applies to `report teams` only".into()).into());
    }
    if args.format == FormatArg::Html && args.by_day {
        return Err(UsageError(
            "--format html already charts each day of the period: leave out --by-day".into(),
        )
        .into());
    }
    match args.kind {
        ReportKind::Teams => teams_report(config, database, args),
        ReportKind::Fairshare => fairshare_report(config, database, args),
        ReportKind::Jobs | ReportKind::Utilisation | ReportKind::Users => {
            samples_report(config, database, args)
        }
    }
}

/// The period of a report: `--since` (default the first of this month) to `--until` (now).
fn report_period(args: &ReportArgs, now: UnixSeconds) -> anyhow::Result<Period> {
    let since = time_arg(args.since.as_ref(), now, "--since")?
        .unwrap_or_else(|| period::month_start(now, &chrono::Local));
    let until = time_arg(args.until.as_ref(), now, "--until")?.unwrap_or(now);
    nonempty_period(since, until)
}

/// Runaway runs in the period, said on stderr (every format: CSV and JSON stay data only).
fn note_runaways(runs: &[RunawayRun]) {
    if runs.is_empty() {
        return;
    }
    const SHOWN: usize = 10;
    let mut jobs: Vec<String> = runs.iter().take(SHOWN).map(|r| r.job_id.clone()).collect();
    if runs.len() > SHOWN {
        jobs.push(format!("and {} more", runs.len() - SHOWN));
    }
    say_err!(
        "accountd: note: {} runaway {} clipped (job {}): sacct says {} still running but slurmctld no longer knows {}, so {} GPUs count only until last known running; `sacctmgr show runaway` lists such jobs and fixes Slurm's accounting",
        runs.len(),
        plural(runs.len(), "run was", "runs were"),
        jobs.join(", "),
        plural(runs.len(), "it is", "they are"),
        plural(runs.len(), "it", "them"),
        plural(runs.len(), "its", "their"),
    );
}

fn teams_report(config: &Config, database: PathBuf, args: &ReportArgs) -> anyhow::Result<ExitCode> {
    let now = period::now();
    let period = report_period(args, now)?;
    let params = UsageParams::from_config(config, period, now, args.teams.clone());
    let cluster = slurm_cli::slurm_name(&config.cluster.name);
    let runaways = |store: &Store| store.runaway_runs(&cluster, period.since, period.until);
    if args.by_day {
        let (days, runaway) = with_report_store(&database, "ingest", |store| {
            Ok((
                report::usage_report_by_day(store, &params, &chrono::Local)?,
                runaways(store)?,
            ))
        })?;
        return teams_by_day(&days, &runaway, &params, args);
    }
    // The page charts the period's days: the reports `--by-day` prints, from the same reading,
    // and the users' idle GPU-hours (`report users`) over the same period and days.
    let html = args.format == FormatArg::Html;
    let sampled_params = utilisation_params(config, period, now);
    let (usage, days, sampled, runaway) = with_report_store(&database, "ingest", |store| {
        let (days, sampled) = if html {
            (
                report::usage_report_by_day(store, &params, &chrono::Local)?,
                Some(read_sampled(store, &sampled_params, args)?),
            )
        } else {
            (Vec::new(), None)
        };
        Ok((
            report::usage_report(store, &params)?,
            days,
            sampled,
            runaways(store)?,
        ))
    })?;
    note_runaways(&runaway);
    for row in &usage.rows {
        if row.kind == RowKind::Account && row.quota.is_none() && row.jobs == 0 {
            say_err!(
                "accountd: note: `{}` is not a team of the configuration and has no GPU usage in the period",
                row.team
            );
        }
    }
    note_capacity(&usage, &params);
    note_outside(&usage.outside.iter().collect::<Vec<_>>(), &usage);
    if let Some((users, user_days)) = &sampled {
        if users.from_samples {
            note_rollup_threshold();
        }
        let sampled = report_html::SampledUse {
            users,
            days: user_days,
        };
        return print(&report_html::render_teams_html(
            &usage,
            &days,
            sampled,
            args.by_type,
            &chrono::Local,
        ));
    }
    print(&report::render_teams(
        &usage,
        args.format.text()?,
        args.by_type,
        &chrono::Local,
    ))
}

/// `report teams --by-day`, with the notes of its days.
fn teams_by_day(
    days: &[report::UsageReport],
    runaway: &[RunawayRun],
    params: &UsageParams,
    args: &ReportArgs,
) -> anyhow::Result<ExitCode> {
    note_runaways(runaway);
    if let Some(first) = days.first() {
        let untyped: f64 = days.iter().map(|d| d.untyped_gpu_seconds).sum();
        if first.typed && untyped > 0.0 {
            note_untyped(untyped, first, params);
        }
        note_outside(
            &days.iter().flat_map(|d| &d.outside).collect::<Vec<_>>(),
            first,
        );
    }
    print(&report::render_teams_by_day(
        days,
        args.format.text()?,
        args.by_type,
        &chrono::Local,
    ))
}

/// The users' idle GPU-hours of the teams page: the period's and each day's, only `--team`'s.
fn read_sampled(
    store: &Store,
    params: &utilisation::UtilisationParams,
    args: &ReportArgs,
) -> anyhow::Result<(UsersReport, Vec<UsersReport>)> {
    let mut users = users::users_report(store, params)?;
    let mut days = users::users_report_by_day(store, params, &chrono::Local)?;
    keep_teams(&mut users, args);
    for day in &mut days {
        keep_teams(day, args);
    }
    Ok((users, days))
}

/// Only `--team`'s users; without `--team`, all.
fn keep_teams(r: &mut UsersReport, args: &ReportArgs) {
    if let Some(keep) = team_filter(args) {
        r.users.retain(|u| keep(Some(&u.team)));
        // Their team is unknown, so not one of these.
        r.unattributed = Default::default();
    }
}

/// What the teams report's figures rest on, said on stderr (every format: CSV and JSON stay
/// data only): an estimated capacity, GPUs without a type, usage beyond the capacity.
fn note_capacity(usage: &report::UsageReport, params: &UsageParams) {
    let h = |s: f64| format!("{:.4}", s / 3600.0);
    if let Some(estimate) = &usage.estimate {
        let parts: Vec<String> = estimate
            .by_type
            .iter()
            .map(|t| format!("{} {}", t.gpu_type, t.gpus))
            .collect();
        let when = match usage.capacity_source {
            CapacitySource::EstimateUntil(first) => format!(
                "no capacity samples before {} (`accountd run` records them): until then",
                format_local(first, &chrono::Local)
            ),
            _ => "no capacity samples for the period (`accountd run` records them):".to_string(),
        };
        say_err!(
            "accountd: note: {when} the capacity is estimated as {} GPUs, per GPU type the larger of the sum of quotas and the most GPUs in use at once: {}",
            estimate.gpus,
            parts.join(", ")
        );
        let unpriced = estimate.unpriced_gpus(&params.rates);
        if unpriced > 0 && usage.capacity_cost.is_some() {
            say_err!(
                "accountd: warning: {unpriced} GPUs of the estimated capacity have no GPU type and there is no [gpu_types.default] rate: they cost nothing, so the capacity and idle costs are too low by their price (give a default rate, or let `accountd run` record the capacity with its GPU types)"
            );
        }
    }
    let untyped_warned = usage.typed && usage.untyped_gpu_seconds > 0.0;
    if untyped_warned {
        note_untyped(usage.untyped_gpu_seconds, usage, params);
    }
    let reason = |source: CapacitySource| match source {
        CapacitySource::Samples => {
            "the recorded capacity misses GPUs (check the governed partitions)"
        }
        _ => "the recorded capacity after the estimate misses GPUs (check the governed partitions)",
    };
    if usage.allocated_gpu_seconds > usage.capacity_gpu_seconds {
        say_err!(
            "accountd: warning: more GPU-hours were used ({}) than the capacity holds ({}), so the idle cost is negative: {}",
            h(usage.allocated_gpu_seconds),
            h(usage.capacity_gpu_seconds),
            reason(usage.capacity_source)
        );
        return;
    }
    for c in &usage.capacity_by_type {
        if c.allocated_seconds > c.capacity_seconds
            && !(untyped_warned && c.gpu_type == report::DEFAULT_RATE)
        {
            say_err!(
                "accountd: warning: more {0} GPU-hours were used ({1}) than the {0} capacity holds ({2}), so the idle cost of {0} is negative: {3}",
                c.gpu_type,
                h(c.allocated_seconds),
                h(c.capacity_seconds),
                if c.gpu_type == report::DEFAULT_RATE {
                    "GPUs allocated without a type ran on capacity recorded with types"
                } else {
                    reason(usage.capacity_source)
                }
            );
        }
    }
}

/// GPUs allocated without a type under typed quotas, said on stderr: they are all borrowed, and
/// where a default rate prices them against no capacity of their own, the idle cost of
/// `default` is negative.
fn note_untyped(seconds: f64, usage: &report::UsageReport, params: &UsageParams) {
    let idle = usage
        .capacity_of(report::DEFAULT_RATE)
        .and_then(|c| c.idle_cost)
        .filter(|&c| c < 0.0);
    let priced = match (params.rates.get(None), idle) {
        _ if usage.capacity_cost.is_none() => String::new(),
        (None, _) => ", at no cost (no default rate)".to_string(),
        (Some(_), None) => ", priced at the default rate".to_string(),
        (Some(_), Some(idle)) => format!(
            ", priced at the default rate; as little capacity without a type was recorded, the idle cost of `{}` is negative ({idle:.2}) and the idle cost of the types they ran on is too high",
            report::DEFAULT_RATE
        ),
    };
    say_err!(
        "accountd: warning: {:.4} GPU-hours in the governed partitions were allocated without a GPU type (sacct recorded none): they are counted under `{}`, where no team has a quota, so all of them are borrowed{priced}; Slurm records the type when AccountingStorageTRES lists gres/gpu:<type>",
        seconds / 3600.0,
        report::DEFAULT_RATE,
    );
}

/// GPU usage outside the governed partitions, said on stderr: it is reported apart.
fn note_outside(outside: &[&report::TeamRow], usage: &report::UsageReport) {
    if outside.is_empty() {
        return;
    }
    let seconds: u128 = outside.iter().map(|r| r.gpu_seconds).sum();
    let mut accounts: Vec<&str> = outside.iter().map(|r| r.team.as_str()).collect();
    accounts.sort_unstable();
    accounts.dedup();
    say_err!(
        "accountd: note: {:.4} GPU-hours ran outside the governed partitions ({}), by {}: they are reported apart, in no team's quota",
        seconds as f64 / 3600.0,
        usage.partitions.join(", "),
        accounts.join(", ")
    );
}

fn fairshare_report(
    config: &Config,
    database: PathBuf,
    args: &ReportArgs,
) -> anyhow::Result<ExitCode> {
    let now = period::now();
    let as_of = time_arg(args.until.as_ref(), now, "--until")?.unwrap_or(now);
    let since = time_arg(args.since.as_ref(), now, "--since")?;
    let params = FairshareParams::from_config(config, as_of, since, args.teams.clone());
    if params.since >= as_of {
        return Err(UsageError(format!(
            "the period is empty: --since ({}) must be before --until ({})",
            format_local(params.since, &chrono::Local),
            format_local(as_of, &chrono::Local)
        ))
        .into());
    }
    let cluster = slurm_cli::slurm_name(&config.cluster.name);
    let (fairshare, runaway) = with_report_store(&database, "ingest", |store| {
        Ok((
            report::fairshare_report(store, &params)?,
            store.runaway_runs(&cluster, params.since, as_of)?,
        ))
    })?;
    note_runaways(&runaway);
    print(&report::render_fairshare(
        &fairshare,
        args.format.text()?,
        &chrono::Local,
    ))
}

/// `report jobs`, `report utilisation` and `report users`: from the NVML samples.
fn samples_report(
    config: &Config,
    database: PathBuf,
    args: &ReportArgs,
) -> anyhow::Result<ExitCode> {
    let now = period::now();
    let params = utilisation_params(config, report_period(args, now)?, now);
    if args.kind == ReportKind::Users {
        return users_report(database, args, &params);
    }
    let mut r = with_report_store(&database, "collect-samples", |store| {
        Ok(utilisation::utilisation_report(store, &params)?)
    })?;
    if let Some(keep) = team_filter(args) {
        r.jobs.retain(|j| keep(j.team.as_deref()));
        r.teams.retain(|t| keep(Some(&t.team)));
    }
    if r.from_samples {
        note_rollup_threshold();
    }
    let format: Format = args.format.text()?;
    let text = match args.kind {
        ReportKind::Jobs => utilisation::render_jobs(&r, format, args.limit, &chrono::Local),
        _ => utilisation::render_teams(&r, format, &chrono::Local),
    };
    print(&text)
}

/// What the reports of the samples read: the configured cluster and idle threshold.
fn utilisation_params(
    config: &Config,
    period: Period,
    now: UnixSeconds,
) -> utilisation::UtilisationParams {
    utilisation::UtilisationParams {
        cluster: slurm_cli::slurm_name(&config.cluster.name),
        period,
        idle_threshold: config.accountd.idle_threshold_percent,
        now,
    }
}

/// `--team`'s teams as a test of a row's team (None: a run sacct has not brought in), compared
/// as Slurm names them; None without `--team`.
fn team_filter(args: &ReportArgs) -> Option<impl Fn(Option<&str>) -> bool> {
    if args.teams.is_empty() {
        return None;
    }
    let wanted: Vec<String> = args
        .teams
        .iter()
        .map(|t| slurm_cli::slurm_name(t))
        .collect();
    Some(move |team: Option<&str>| team.is_some_and(|t| wanted.contains(&slurm_cli::slurm_name(t))))
}

fn note_rollup_threshold() {
    say_err!("accountd: note: the hourly rollup was built with another idle threshold; read from the samples (`accountd collect-samples` rebuilds it)");
}

/// `report users`: idle GPU-hours per user; in CSV and JSON, the samples no user has said on
/// stderr (the table says it under it).
fn users_report(
    database: PathBuf,
    args: &ReportArgs,
    params: &utilisation::UtilisationParams,
) -> anyhow::Result<ExitCode> {
    let mut r = with_report_store(&database, "collect-samples", |store| {
        Ok(users::users_report(store, params)?)
    })?;
    keep_teams(&mut r, args);
    if r.from_samples {
        note_rollup_threshold();
    }
    let format: Format = args.format.text()?;
    if format != Format::Table && r.unattributed.samples > 0 {
        say_err!(
            "accountd: note: {:.4} GPU-hours were sampled on job runs sacct has not brought in yet ({:.4} idle): they have no user (`accountd ingest` brings them in)",
            r.unattributed.sampled_gpu_hours(),
            r.unattributed.idle_gpu_hours()
        );
    }
    print(&users::render_users(&r, format, args.limit, &chrono::Local))
}
