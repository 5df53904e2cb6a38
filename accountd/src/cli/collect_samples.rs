//! `accountd collect-samples`: on the head, store every node's spooled GPU samples in the
//! database.

use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use teamshare_config::Config;

use accountd::period;
use accountd::sample::collect;
use accountd::slurm_cli;
use accountd::store::Store;

use super::ExitStatus;

#[derive(Debug, Args)]
pub(super) struct CollectSamplesArgs {
    /// Spool root holding one directory per node [default: [accountd] sample_spool]
    #[arg(long, value_name = "DIR")]
    spool: Option<PathBuf>,
}

pub(super) fn run(
    config: &Config,
    database: PathBuf,
    args: &CollectSamplesArgs,
) -> anyhow::Result<ExitCode> {
    let root = args
        .spool
        .clone()
        .unwrap_or_else(|| config.accountd.sample_spool.clone());
    let store = Store::open(&database)?;
    let summary = collect::collect(
        &store,
        &root,
        &slurm_cli::slurm_name(&config.cluster.name),
        config.accountd.idle_threshold_percent,
        period::now(),
    )?;
    for line in &summary.malformed {
        say_err!(
            "accountd: warning: skipped malformed sample {line} (the file is kept in rejected/)"
        );
    }
    for line in summary.unreadable.iter().chain(&summary.unsettled) {
        say_err!("accountd: warning: {line} (left in the spool; read again next time)");
    }
    say_err!("{summary}");
    Ok(ExitStatus::Success.into())
}
