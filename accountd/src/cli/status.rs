//! `accountd status`: each team now, live from Slurm and the governor's state.

use std::process::ExitCode;

use anyhow::Context as _;
use clap::Args;
use teamshare_config::Config;

use accountd::period;
use accountd::status::{self, job, StatusInput};

use super::args::StatusFormat;
use super::{print, UsageError};

#[derive(Debug, Args)]
pub(super) struct StatusArgs {
    /// Only this team [default: every team]
    #[arg(long, value_name = "TEAM")]
    team: Option<String>,
    /// One job: why it waits, whether teamshare holds it [default: every team]
    #[arg(long, value_name = "JOBID", conflicts_with = "team")]
    job: Option<u64>,
    /// One user's GPU jobs, with what teamshare noted in their AdminComment (the idle
    /// policy's notices, the governor's holds)
    #[arg(long, value_name = "USER", conflicts_with_all = ["team", "job"])]
    user: Option<String>,
    /// With --job: how teamshare judges `scontrol update JobId=<JOBID> FIELD=VALUE ...`, the
    /// words as given to scontrol (on Slurm 22.05 a refused update shows only Slurm's error
    /// text; this gives teamshare's reason)
    #[arg(long, value_name = "FIELD=VALUE", num_args = 1.., requires = "job")]
    update: Vec<String>,
    /// Output format
    #[arg(long, value_enum, default_value_t = StatusFormat::Table)]
    format: StatusFormat,
}

pub(super) fn run(config: &Config, args: &StatusArgs) -> anyhow::Result<ExitCode> {
    if let Some(team) = &args.team {
        if config.team(team).is_none() {
            let teams: Vec<&str> = config.teams.iter().map(|t| t.name.as_str()).collect();
            return Err(UsageError(format!(
                "--team {team}: no such team in the configuration (its teams: {})",
                teams.join(", ")
            ))
            .into());
        }
    }
    let mut reader = accountd::governor::SlurmReader::from_env().map_err(UsageError)?;
    let now = period::now();
    let (reading, reasons) = reader
        .read_with_reasons(config, now)
        .context("cannot read Slurm's jobs and nodes")?;
    let state_file = &config.accountd.state_file;
    let state = status::read_state(state_file);
    let uid = caller_uid();
    let input = StatusInput {
        config,
        state_file,
        state: state.as_ref().map_err(Clone::clone),
        capacity: &reading.capacity,
        jobs: &reading.jobs,
        reasons: &reasons,
        now,
        // Slurm's PrivateData hides nothing from root.
        view_may_be_partial: uid != Some(0),
    };
    if let Some(id) = args.job {
        return one_job(config, args, &input, &reading.holds, id, uid);
    }
    if let Some(user) = &args.user {
        return one_user(user, &reading.jobs, args.format);
    }
    let Some(status) = status::status(&input, args.team.as_deref()) else {
        return Err(UsageError("--team names no team of the configuration".into()).into());
    };
    match args.format {
        StatusFormat::Table => print(&status::render_table(&status, &chrono::Local)),
        StatusFormat::Json => {
            let mut text = serde_json::to_string_pretty(&status).context("status as JSON")?;
            text.push('\n');
            print(&text)
        }
    }
}

/// `--user U`: the user's governed GPU jobs and teamshare's notes on them (one squeue for
/// the notes; the jobs as the governor reads them).
fn one_user(
    user: &str,
    jobs: &[teamshare_policy::governance::ClusterJob],
    format: StatusFormat,
) -> anyhow::Result<ExitCode> {
    let out = accountd::slurm_cli::SlurmCommand::new(
        "squeue",
        vec![
            "-h".into(),
            "-a".into(),
            "-u".into(),
            user.to_string(),
            "-O".into(),
            status::user::USER_SQUEUE_FIELDS.into(),
        ],
        std::time::Duration::from_secs(30),
    )
    .run()
    .map_err(|e| UsageError(format!("--user {user}: {e}")))?;
    let shown = status::user::user_jobs(jobs, &status::user::parse_user_jobs(&out.stdout));
    match format {
        StatusFormat::Table => print(&status::user::render_user(user, &shown)),
        StatusFormat::Json => {
            let value = serde_json::json!({ "user": user, "jobs": shown });
            let mut text = serde_json::to_string_pretty(&value).context("status as JSON")?;
            text.push('\n');
            print(&text)
        }
    }
}

/// The uid this runs as (the owner of /proc/self), `None` when unknown.
fn caller_uid() -> Option<u32> {
    std::fs::metadata("/proc/self")
        .ok()
        .map(|m| std::os::unix::fs::MetadataExt::uid(&m))
}

/// `--job J [--update ...]`: the job, and the plugin's judgement of the update.
fn one_job(
    config: &Config,
    args: &StatusArgs,
    input: &StatusInput<'_>,
    holds: &[accountd::squeue::GovernorHold],
    id: u64,
    uid: Option<u32>,
) -> anyhow::Result<ExitCode> {
    let shown = job::job_status(input, holds, id);
    let judged = if args.update.is_empty() {
        None
    } else {
        // Unknown: judged as a user would be (an operator's update passes nearly always).
        let update = job::parse_update(&args.update, uid.unwrap_or(u32::MAX))
            .map_err(|e| UsageError(format!("--update: {e}")))?;
        if let Some(named) = update.job.as_deref().filter(|j| *j != id.to_string()) {
            return Err(UsageError(format!("--update names JobId={named}, --job {id}")).into());
        }
        let state = input.state.as_ref().ok().copied();
        Some(job::judge_update(
            config,
            &args.update,
            &update,
            state,
            input.now,
        ))
    };
    match args.format {
        StatusFormat::Table => print(&job::render(shown.as_ref(), id, judged.as_ref())),
        StatusFormat::Json => {
            let value = serde_json::json!({ "job": id, "status": shown, "update": judged });
            let mut text = serde_json::to_string_pretty(&value).context("status as JSON")?;
            text.push('\n');
            print(&text)
        }
    }
}
