//! `accountd run`: the daemon (governor passes, sacct ingest, sample collection, capacity
//! samples, /metrics) until SIGTERM or SIGINT; SIGHUP reads teamshare.toml again.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use anyhow::Context as _;
use clap::Args;
use teamshare_config::Config;

use accountd::daemon::{self, DaemonLog, DaemonOptions};
use accountd::logging;

use super::{plural, ExitStatus, UsageError};

#[derive(Debug, Args)]
pub(super) struct RunArgs {
    /// Time between governor passes
    #[arg(long, value_name = "DURATION", default_value = "1s", value_parser = teamshare_config::parse_duration_ms)]
    govern_interval: std::time::Duration,
    /// Serve /metrics on this address instead of [accountd] metrics_listen
    #[arg(long, value_name = "ADDR:PORT")]
    metrics_listen: Option<std::net::SocketAddr>,
    /// Spool root of the nodes' GPU samples [default: [accountd] sample_spool]
    #[arg(long, value_name = "DIR")]
    spool: Option<PathBuf>,
    /// Run each step once, then exit (unsuccessfully if one failed)
    #[arg(long)]
    once: bool,
    /// Do not govern (no governor passes: Slurm's priorities and limits are left alone)
    #[arg(long)]
    no_govern: bool,
    /// Do not read sacct (samples are still collected and the capacity recorded)
    #[arg(long)]
    no_ingest: bool,
}

pub(super) fn run(
    config: Config,
    config_path: &Path,
    database: PathBuf,
    args: &RunArgs,
) -> anyhow::Result<ExitCode> {
    if !args.no_govern {
        accountd::governor::SlurmReader::from_env().map_err(UsageError)?;
    }
    let stop = Arc::new(AtomicBool::new(false));
    for signal in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT] {
        // The first signal asks for a stop after the step under way; a second one, while
        // stopping, exits at once.
        signal_hook::flag::register_conditional_shutdown(
            signal,
            ExitStatus::Runtime.code().into(),
            Arc::clone(&stop),
        )
        .context("cannot install the signal handlers")?;
        signal_hook::flag::register(signal, Arc::clone(&stop))
            .context("cannot install the signal handlers")?;
    }
    // SIGHUP: read teamshare.toml again now (it is also looked at every 2 s).
    let reload = Arc::new(AtomicBool::new(false));
    signal_hook::flag::register(signal_hook::consts::SIGHUP, Arc::clone(&reload))
        .context("cannot install the signal handlers")?;
    let opts = DaemonOptions {
        database,
        spool: args.spool.clone(),
        govern_interval: args.govern_interval,
        govern: !args.no_govern,
        ingest: !args.no_ingest,
        once: args.once,
        metrics_listen: args
            .metrics_listen
            .unwrap_or(config.accountd.metrics_listen),
        config_path: Some(config_path.to_path_buf()),
        stop_grace: daemon::STOP_GRACE,
    };
    logging::init().map_err(UsageError)?;
    let log = Arc::new(DaemonLog::new(logging::RUN));
    let outcome = daemon::run(config, opts, stop, reload, log);
    let _ = std::io::stderr().flush();
    if let Some(thread) = outcome.thread_ended {
        anyhow::bail!("accountd run stopped: its {thread} thread ended unexpectedly");
    }
    if args.once && outcome.failed_steps > 0 {
        say_err!(
            "accountd run: {} {} failed",
            outcome.failed_steps,
            plural(outcome.failed_steps, "step", "steps")
        );
        return Ok(ExitStatus::Runtime.into());
    }
    Ok(ExitStatus::Success.into())
}
