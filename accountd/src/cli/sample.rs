//! `accountd sample`: on a GPU node, sample every GPU through NVML into the local spool.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Args;

use accountd::logging;
use accountd::sample::{self, gpu, jobs, sampler};
use accountd::slurm_cli;

use super::args::Interval;
use super::{load_config, ExitStatus, UsageError};

#[derive(Debug, Args)]
pub(super) struct SampleArgs {
    /// Sampling interval, e.g. 10s or 200ms [default: [accountd] sample_interval, else 10s]
    #[arg(long, value_name = "DURATION")]
    interval: Option<Interval>,
    /// Spool root; this node's samples go to DIR/<node> [default: [accountd] sample_spool]
    #[arg(long, value_name = "DIR")]
    spool: Option<PathBuf>,
    /// The NVML library to load
    #[arg(long, value_name = "PATH", default_value = gpu::DEFAULT_NVML_LIB)]
    nvml_lib: PathBuf,
    /// This node's Slurm name [default: $SLURMD_NODENAME, else the short host name]
    #[arg(long, value_name = "NAME")]
    node: Option<String>,
    /// Take one sample (the current tick) and exit
    #[arg(long)]
    once: bool,
    /// How often to look up which jobs hold the GPUs [default: the interval, at least 10s]
    #[arg(long, value_name = "DURATION")]
    job_refresh: Option<Interval>,
    /// Do not look up jobs: every sample carries no job
    #[arg(long)]
    no_jobs: bool,
}

pub(super) fn run(
    given: Option<&Path>,
    config_path: &Path,
    args: &SampleArgs,
) -> anyhow::Result<ExitCode> {
    // A GPU node may have no teamshare.toml: its settings then come from the flags and defaults.
    let config = if given.is_some() || config_path.exists() {
        Some(load_config(config_path)?)
    } else {
        None
    };
    let settings = config
        .as_ref()
        .map(|c| c.accountd.clone())
        .unwrap_or_default();
    let interval = match &args.interval {
        Some(interval) => interval.get("--interval")?,
        None => settings.sample_interval,
    };
    let job_refresh = match &args.job_refresh {
        Some(refresh) => refresh.get("--job-refresh")?,
        None => interval.max(std::time::Duration::from_secs(10)),
    };
    let node = match &args.node {
        Some(n) => n.clone(),
        None => sampler::default_node_name()
            .ok_or_else(|| UsageError("cannot tell this node's name: give --node NAME".into()))?,
    };
    sample::spool::check_node_name(&node).map_err(|e| UsageError(e.to_string()))?;
    let view: Option<Box<dyn jobs::SlurmView>> = if args.no_jobs {
        None
    } else if slurm_cli::slurm_conf().is_none() {
        say_err!("accountd sample: warning: SLURM_CONF is not set, so the jobs holding the GPUs cannot be looked up: samples carry no job (export SLURM_CONF, or pass --no-jobs to say so)");
        None
    } else {
        Some(Box::new(jobs::SlurmCommands))
    };
    let settings = sampler::SamplerSettings {
        node,
        interval,
        spool_root: args.spool.clone().unwrap_or(settings.sample_spool),
        nvml_lib: args.nvml_lib.clone(),
        once: args.once,
        job_refresh,
    };
    logging::init().map_err(UsageError)?;
    sampler::run(&settings, view)?;
    Ok(ExitStatus::Success.into())
}
