//! `accountd setup-slurm`: make Slurm's accounts, limits and QOS match teamshare.toml with
//! sacctmgr (or print the commands).

use std::io::Write as _;
use std::path::Path;
use std::process::ExitCode;

use anyhow::Context as _;
use clap::Args;
use teamshare_config::Config;

use accountd::slurm_cli;
use accountd::slurm_setup::{self, Applied, Associations};

use super::{ExitStatus, Stdout, UsageError};

#[derive(Debug, Args)]
pub(super) struct SetupSlurmArgs {
    /// Add this user to every team account (repeat for several users)
    #[arg(long = "user", value_name = "NAME")]
    users: Vec<String>,
    /// Print the sacctmgr commands instead of running them
    #[arg(long)]
    dry_run: bool,
}

pub(super) fn run(config: &Config, path: &Path, args: &SetupSlurmArgs) -> anyhow::Result<ExitCode> {
    if let Some(bad) = args
        .users
        .iter()
        .find(|u| u.trim().is_empty() || u.contains([' ', ',', '=']))
    {
        return Err(UsageError(format!("--user `{bad}` is not a user name")).into());
    }
    let cluster = &slurm_cli::slurm_name(&config.cluster.name);
    let mut want = slurm_setup::desired(config);
    // Shares of a GPU are held at 0 where slurmdbd accounts them.
    match slurm_setup::show_tres().run() {
        Ok(out) => slurm_setup::keep_known_shares(&mut want, &out.stdout),
        Err(e) => {
            say_err!("accountd: warning: cannot list Slurm's TRES ({e}); GPU shares get no limit");
            slurm_setup::keep_known_shares(&mut want, "");
        }
    }
    let current = match slurm_setup::show_associations(cluster)
        .run()
        .map_err(slurm_setup::SetupError::from)
        .and_then(|out| slurm_setup::parse_associations(&out.stdout))
    {
        Ok(current) => current,
        Err(e) if args.dry_run => {
            say_err!(
                "accountd: warning: cannot read the current associations ({e}); showing the commands for a cluster that has none of them"
            );
            Associations::default()
        }
        Err(e) => return Err(e).context("cannot read Slurm's associations"),
    };
    check_typed_tres(config, args.dry_run)?;
    let changes = slurm_setup::plan(&want, &args.users, &current);
    // A reader that goes away stops the printing, never the changes.
    let mut out = Stdout::new();
    if changes.is_empty() {
        out.line(&format!(
            "Slurm's associations on cluster {cluster} already match {}",
            path.display()
        ))?;
    }
    for change in &changes {
        if args.dry_run {
            out.line(&change.command(cluster).display())?;
            continue;
        }
        match slurm_setup::apply(change, cluster)? {
            Applied::Done => out.line(&change.to_string())?,
            Applied::AlreadyThere => out.line(&format!("{change}: already there"))?,
        }
    }
    setup_qos(config, cluster, args.dry_run, &mut out)?;
    Ok(ExitStatus::Success.into())
}

/// Per-type limits need slurmdbd to know each type's TRES, which only slurm.conf's
/// AccountingStorageTRES can make it do: in a typed configuration, an error where Slurm does not
/// account a governed type (a warning with `dry_run`).
fn check_typed_tres(config: &Config, dry_run: bool) -> anyhow::Result<()> {
    if !config.is_typed() {
        return Ok(());
    }
    let known = slurm_setup::show_tres().run().map(|o| o.stdout);
    let missing = match &known {
        Ok(text) => slurm_setup::missing_tres(config, text),
        Err(_) => Vec::new(),
    };
    if !missing.is_empty() || known.is_err() {
        let all: Vec<String> = config
            .governed_types()
            .into_iter()
            .map(|k| format!("gres/gpu:{k}"))
            .collect();
        let why = match known {
            Err(e) => format!("cannot list Slurm's TRES ({e})"),
            Ok(_) => format!("Slurm does not account {}", missing.join(", ")),
        };
        let text = format!(
            "{why}: GPUs are governed per type, so slurm.conf must contain AccountingStorageTRES=gres/gpu,{} (and gres.conf a Type= for each node's GPUs); restart slurmctld, then run setup-slurm again",
            all.join(",")
        );
        if !dry_run {
            anyhow::bail!(text);
        }
        say_err!("accountd: warning: {text}");
    }
    Ok(())
}

/// The governed jobs' QOS, and the teams' access to it (idempotent); with `dry_run`, the
/// commands printed.
fn setup_qos(
    config: &Config,
    cluster: &str,
    dry_run: bool,
    out: &mut Stdout,
) -> anyhow::Result<()> {
    for cmd in slurm_setup::qos_commands(config, cluster) {
        if dry_run {
            out.line(&cmd.display())?;
            continue;
        }
        let (status, out) = cmd.run_unchecked()?;
        let said = format!("{}{}", out.stdout, out.stderr);
        if !status.success()
            && !said.contains("Nothing new added")
            && !said.contains("already exists")
            && !said.contains("Nothing modified")
        {
            anyhow::bail!("{} failed: {}", cmd.display(), said.trim());
        }
    }
    if !dry_run {
        out.line(&format!(
            "QOS {} ready (PreemptMode within,{}, GraceTime {} s, PreemptExemptTime {} s) for every team",
            teamshare_policy::priority::INTERNAL_QOS,
            match config.governance.reclaim_mode {
                teamshare_config::ReclaimMode::Requeue => "requeue",
                teamshare_config::ReclaimMode::Cancel => "cancel",
            },
            config.governance.reclaim_grace.as_secs(),
            config.governance.min_runtime_before_reclaim.as_secs()
        ))?;
    }
    Ok(())
}
