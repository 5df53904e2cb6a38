//! `accountd status`: each team now, live from Slurm and the governor's state.

use std::process::ExitCode;

use anyhow::Context as _;
use clap::Args;
use teamshare_config::Config;

use accountd::period;
use accountd::status::{self, StatusInput};

use super::args::StatusFormat;
use super::{print, UsageError};

#[derive(Debug, Args)]
pub(super) struct StatusArgs {
    /// Only this team [default: every team]
    #[arg(long, value_name = "TEAM")]
    team: Option<String>,
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
        .read_with_reasons(&config.cluster.partitions, now)
        .context("cannot read Slurm's jobs and nodes")?;
    let state_file = &config.accountd.state_file;
    let state = status::read_state(state_file);
    let input = StatusInput {
        config,
        state_file,
        state: state.as_ref().map_err(Clone::clone),
        capacity: &reading.capacity,
        jobs: &reading.jobs,
        reasons: &reasons,
        now,
        // Slurm's PrivateData hides nothing from root.
        view_may_be_partial: std::fs::metadata("/proc/self")
            .map_or(true, |m| std::os::unix::fs::MetadataExt::uid(&m) != 0),
    };
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
