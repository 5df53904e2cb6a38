//! `accountd replay`: a period of job history replayed under candidate configurations, the
//! figures per team side by side (`accountd::replay`).

mod progress;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use clap::Args;
use teamshare_config::Config;

use accountd::period::{self, Period};
use accountd::replay::calibrate::{self, Tolerance};
use accountd::replay::render::{self, Replay, AS_TODAY, PLAIN_SLURM, SILOED};
use accountd::replay::study::{
    self, baseline_first, default_candidates, Candidate, CandidateKind, CurveParams, Findings,
    Settings, Study,
};
use accountd::replay::swf::MAX_CLUSTER_GPUS;
use accountd::replay::{
    self as replay_model, activity, curve as replay_curve, history, swf, Secs, Trace,
};

use super::args::{nonempty_period, time_arg, FormatArg, Time};
use super::{load_config, print, ExitStatus, UsageError};
#[cfg(test)]
use study::without_gpus;

/// The period replayed when `--since` is not given: this many days before `--until`.
const DEFAULT_DAYS: i64 = 30;
const DAY: i64 = 86_400;

#[derive(Debug, Args)]
pub(super) struct ReplayArgs {
    /// Replay the jobs of this Standard Workload Format file instead of the database's history
    #[arg(long, value_name = "FILE", requires = "team_map")]
    swf: Option<PathBuf>,
    /// With --swf: the file that maps SWF groups or users to teams
    #[arg(long, value_name = "FILE", requires = "swf")]
    team_map: Option<PathBuf>,
    /// Start of the period [default: 30 days before --until]
    #[arg(long, value_name = "TIME")]
    since: Option<Time>,
    /// End of the period [default: now]
    #[arg(long, value_name = "TIME")]
    until: Option<Time>,
    /// A candidate: `as-today` (the history itself, shown as the calibration), `siloed` (each
    /// team capped at its quota, nothing lent), `plain-slurm` (one pool, first come first
    /// served, no quotas) or a teamshare.toml; repeatable; the first simulated one is the
    /// baseline [default: the --current settings simulated (plain-slurm for `--current
    /// none`), as-today, siloed, and the configuration where it is not --current]
    #[arg(long = "candidate", value_name = "NAME")]
    candidates: Vec<String>,
    /// The teamshare.toml the history ran under, replayed for the calibration and the
    /// baseline; `none`: plain Slurm (the `plain-slurm` candidate) [default: the
    /// configuration]
    #[arg(long, value_name = "FILE|none")]
    current: Option<String>,
    /// A constant capacity of N GPUs (in nodes of --gpus-per-node) instead of the history's
    /// nodes and drains
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=i64::from(MAX_CLUSTER_GPUS)))]
    capacity: Option<u32>,
    /// GPUs per node, where the trace does not say (SWF, --capacity)
    #[arg(long, value_name = "N", default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..))]
    gpus_per_node: u32,
    /// A priority class or account whose jobs checkpoint every INTERVAL (a preempted job loses
    /// at most that much work); repeatable
    #[arg(long = "checkpoint", value_name = "NAME=INTERVAL", value_parser = parse_checkpoint)]
    checkpoints: Vec<(String, Secs)>,
    /// How long a requeued job waits before it may start again [default: 3s, Slurm's 121s as
    /// the governor lifts it; 0 under reclaim_mode = "cancel"]
    #[arg(long, value_name = "DURATION", value_parser = parse_secs)]
    requeue_delay: Option<Secs>,
    /// Also replay each simulated candidate with K smaller capacities (C - i x --curve-step
    /// GPUs, i = 1..K)
    #[arg(long, value_name = "K", value_parser = clap::value_parser!(u32).range(1..))]
    capacity_curve: Option<u32>,
    /// GPUs taken away at each step of the capacity curve [default: a node's, the trace's
    /// most common node size]
    #[arg(long, value_name = "N", requires = "capacity_curve", value_parser = clap::value_parser!(u32).range(1..))]
    curve_step: Option<u32>,
    /// What a smaller capacity of the curve does with quotas that no longer fit: `scale` them
    /// down in proportion (lend limits with them), or `keep` them and leave that point out
    #[arg(long, value_enum, value_name = "RULE", default_value_t = CurveQuotas::Scale)]
    curve_quotas: CurveQuotas,
    /// Calibration: simulated waits may be off by this percentage of the observed...
    #[arg(long, value_name = "PCT", default_value_t = calibrate::DEFAULT_TOLERANCE_PCT, value_parser = parse_pct)]
    tolerance_pct: f64,
    /// ...or by this many seconds, whichever is more
    #[arg(long, value_name = "SECS", default_value_t = calibrate::DEFAULT_TOLERANCE_SECS, value_parser = clap::value_parser!(i64).range(0..))]
    tolerance_secs: i64,
    /// Print the what-ifs without checking that the simulation reproduces the history
    #[arg(long)]
    skip_calibration: bool,
    /// Replays run side by side on this many threads (each is single-threaded; the output
    /// is the same for any number) [default: one more than the CPUs this process may use,
    /// so that the last runs share the CPUs rather than one finishing alone]
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    threads: Option<u32>,
    /// Output format
    #[arg(long, value_enum, default_value_t = FormatArg::Table)]
    format: FormatArg,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum CurveQuotas {
    Scale,
    Keep,
}

impl CurveQuotas {
    fn rule(self) -> replay_curve::QuotaRule {
        match self {
            CurveQuotas::Scale => replay_curve::QuotaRule::Scale,
            CurveQuotas::Keep => replay_curve::QuotaRule::Keep,
        }
    }
}

fn parse_secs(text: &str) -> Result<Secs, String> {
    let d = teamshare_config::parse_duration(text)?;
    Secs::try_from(d.as_secs()).map_err(|_| format!("`{text}` is too long"))
}

fn parse_checkpoint(text: &str) -> Result<(String, Secs), String> {
    let (name, interval) = text
        .split_once('=')
        .ok_or_else(|| format!("`{text}`: expected NAME=INTERVAL (e.g. training=30m)"))?;
    if name.is_empty() {
        return Err(format!("`{text}`: no class or account before `=`"));
    }
    let secs = parse_secs(interval)?;
    if secs == 0 {
        return Err(format!("`{text}`: the interval must be above 0"));
    }
    Ok((name.to_string(), secs))
}

fn parse_pct(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(v) if v.is_finite() && v >= 0.0 => Ok(v),
        _ => Err(format!(
            "`{text}` is not a percentage (a number, 0 or more)"
        )),
    }
}

/// Where the history comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum TraceSource {
    Database(PathBuf),
    Swf { file: PathBuf, team_map: PathBuf },
}

/// What [`load_trace`] is asked for.
#[derive(Debug, Clone)]
pub(super) struct TraceRequest {
    pub source: TraceSource,
    pub period: Period,
    /// Slurm's name of the cluster (the database's rows are per cluster).
    pub cluster: String,
    /// GPUs per node where the source does not say.
    pub gpus_per_node: u32,
    /// A constant capacity instead of the recorded one (`--capacity`).
    pub capacity: Option<u32>,
    /// `--since` or `--until` given (an SWF trace is otherwise replayed whole).
    pub explicit_period: bool,
}

/// The time limit a run stands for when sacct gave none (runs ingested before accountd read
/// time limits): a day, Slurm's usual partition default.
const DEFAULT_TIME_LIMIT: Secs = DAY;

/// The history to replay, and lines saying what was read (and what was left out, why).
pub(super) fn load_trace(
    request: &TraceRequest,
    config: &Config,
) -> anyhow::Result<(Trace, Vec<String>)> {
    let Period { since, until } = request.period;
    match &request.source {
        TraceSource::Database(db) => {
            super::with_report_store(db, "ingest", |store| database_trace(store, request, config))
        }
        TraceSource::Swf { file, team_map } => {
            let map = swf::read_team_map(team_map)?;
            let (mut trace, summary) = swf::load_file(file, &map, request.capacity)?;
            // The whole file unless --since or --until say otherwise.
            if request.explicit_period {
                let (since, until) = (since.max(trace.since), until.min(trace.until));
                trace.jobs.retain(|j| j.submit >= since && j.submit < until);
                trace.since = since;
                trace.until = until.max(since);
            }
            let read = summary.notes(&trace.source);
            Ok((trace, read))
        }
    }
}

/// The history of the database's period: its jobs, its cluster (recorded or `--capacity`), and
/// its jobs' GPU samples, idle below the configuration's `idle_threshold_percent` (issue 29).
fn database_trace(
    store: &accountd::store::Store,
    request: &TraceRequest,
    config: &Config,
) -> anyhow::Result<(Trace, Vec<String>)> {
    let Period { since, until } = request.period;
    let mut history = match request.capacity {
        Some(gpus) => {
            let types = config.governed_types();
            let gpu_type = (types.len() == 1)
                .then(|| types.iter().next().copied())
                .flatten();
            let nodes = history::constant_cluster(gpus, request.gpus_per_node, gpu_type);
            history::load_jobs(
                store,
                &request.cluster,
                since,
                until,
                DEFAULT_TIME_LIMIT,
                nodes,
            )
        }
        None => history::load(
            store,
            &request.cluster,
            since,
            until,
            request.gpus_per_node,
            DEFAULT_TIME_LIMIT,
        ),
    }?;
    let threshold = config.accountd.idle_threshold_percent;
    let activity = activity::load(store, &request.cluster, &history.trace, threshold)?;
    history.trace.activity = activity.map(Arc::new);
    let line = format!("{}: {}", history.trace.source, history.summary);
    Ok((history.trace, vec![line]))
}

pub(super) fn run(
    config: &Config,
    config_path: &Path,
    database: PathBuf,
    args: &ReplayArgs,
) -> anyhow::Result<ExitCode> {
    let period = requested_period(args)?;
    // Every configuration is read before the long work starts.
    let current = current_settings(config, config_path, args)?;
    let candidates = candidates(config, config_path, args)?;
    refuse_shares(config_path, config, &candidates)?;
    if args.capacity_curve.is_some() && candidates.iter().all(|c| c.config.is_none()) {
        return Err(UsageError(
            "--capacity-curve replays simulated candidates: as-today alone has none".into(),
        )
        .into());
    }
    let request = trace_request(config, database, args, period);
    let (trace, read) = load_trace(&request, config)?;
    if args.team_map.is_some() {
        refuse_unknown_teams(&trace, config_path, config, &candidates)?;
    }
    let progress = progress::Terminal::new(&trace);
    let study = Study {
        trace,
        read,
        current: current.map(|(path, config)| Settings { path, config }),
        config: config.clone(),
        candidates,
        params: study_params(args),
    };
    match study.run(&progress) {
        Findings::Complete(replay) => output(&replay, args.format),
        Findings::Misfit(replay) => misfit(replay, args.format),
    }
}

/// Only the calibration, when the model does not fit the history (exit 3).
fn misfit(mut replay: Replay, format: FormatArg) -> anyhow::Result<ExitCode> {
    replay.notes.push("the what-ifs are not printed: the model does not fit the history (give --skip-calibration to print them anyway)".into());
    output(&replay, format)?;
    Ok(ExitStatus::ModelMisfit.into())
}

/// The study's parameters of the arguments.
fn study_params(args: &ReplayArgs) -> study::Params {
    study::Params {
        requeue_delay: args.requeue_delay,
        checkpoints: args.checkpoints.clone(),
        tolerance: Tolerance {
            pct: args.tolerance_pct,
            secs: args.tolerance_secs,
        },
        skip_calibration: args.skip_calibration,
        capacity: args.capacity,
        curve: args.capacity_curve.map(|points| CurveParams {
            points,
            step: args.curve_step,
            quotas: args.curve_quotas.rule(),
        }),
        threads: threads(args),
    }
}

/// The period `--since` and `--until` ask for (by default the 30 days up to now).
fn requested_period(args: &ReplayArgs) -> anyhow::Result<Period> {
    let now = period::now();
    let until = time_arg(args.until.as_ref(), now, "--until")?.unwrap_or(now);
    let since =
        time_arg(args.since.as_ref(), now, "--since")?.unwrap_or(until - DEFAULT_DAYS * DAY);
    nonempty_period(since, until)
}

/// What [`load_trace`] is asked for: the SWF file with its team map, else the database's
/// history of `period`.
fn trace_request(
    config: &Config,
    database: PathBuf,
    args: &ReplayArgs,
    period: Period,
) -> TraceRequest {
    let source = match (&args.swf, &args.team_map) {
        (Some(file), Some(team_map)) => TraceSource::Swf {
            file: file.clone(),
            team_map: team_map.clone(),
        },
        _ => TraceSource::Database(database),
    };
    TraceRequest {
        source,
        period,
        cluster: accountd::slurm_cli::slurm_name(&config.cluster.name),
        gpus_per_node: args.gpus_per_node,
        capacity: args.capacity,
        explicit_period: args.since.is_some() || args.until.is_some(),
    }
}

/// How many threads the simulations run on (`--threads`).
fn threads(args: &ReplayArgs) -> usize {
    args.threads
        .map_or_else(study::default_threads, |n| n as usize)
}

fn output(replay: &Replay, format: FormatArg) -> anyhow::Result<ExitCode> {
    let text = match format {
        FormatArg::Table => render::render_table(replay),
        FormatArg::Csv => render::render_csv(replay),
        FormatArg::Json => render::render_json(replay),
        FormatArg::Html => render::render_html(replay),
    };
    print(&text)
}

/// The settings the history ran under (`--current`), with their file; None for `none`.
fn current_settings(
    config: &Config,
    config_path: &Path,
    args: &ReplayArgs,
) -> anyhow::Result<Option<(PathBuf, Config)>> {
    match args.current.as_deref() {
        None => Ok(Some((config_path.to_path_buf(), config.clone()))),
        Some("none") => Ok(Some((
            PathBuf::from(PLAIN_SLURM),
            replay_model::plain_slurm(config),
        ))),
        Some(path) => {
            let path = PathBuf::from(path);
            let settings = load_config(&path)?;
            Ok(Some((path, settings)))
        }
    }
}

/// The candidates of `--candidate`, each configuration read (an invalid one: exit 2).
fn candidates(
    config: &Config,
    config_path: &Path,
    args: &ReplayArgs,
) -> anyhow::Result<Vec<Candidate>> {
    let wanted: Vec<CandidateKind> = if args.candidates.is_empty() {
        default_candidates(config_path, current_file(config_path, args))
    } else {
        baseline_first(
            args.candidates
                .iter()
                .map(|c| CandidateKind::parse(c))
                .collect(),
        )
    };
    let file_name = |p: &Path| {
        p.file_name().map_or_else(
            || p.display().to_string(),
            |n| n.to_string_lossy().into_owned(),
        )
    };
    let mut out: Vec<Candidate> = Vec::new();
    for c in wanted {
        let candidate = match c {
            CandidateKind::AsToday => Candidate {
                name: AS_TODAY.into(),
                config: None,
                path: None,
            },
            CandidateKind::Siloed => Candidate {
                name: SILOED.into(),
                config: Some(replay_model::siloed(config)),
                path: None,
            },
            CandidateKind::PlainSlurm => Candidate {
                name: PLAIN_SLURM.into(),
                config: Some(replay_model::plain_slurm(config)),
                // The name stands for the path `--current none` gives its calibration, so
                // that the candidate reuses that simulation.
                path: Some(PathBuf::from(PLAIN_SLURM)),
            },
            CandidateKind::File(path) => {
                let cfg = if path == config_path {
                    config.clone()
                } else {
                    load_config(&path)?
                };
                // By file name; by the path as given where two share one.
                let short = file_name(&path);
                let name = if out.iter().any(|o| o.name == short)
                    || args
                        .candidates
                        .iter()
                        .filter(|a| file_name(Path::new(a)) == short)
                        .count()
                        > 1
                {
                    path.display().to_string()
                } else {
                    short
                };
                Candidate {
                    name,
                    config: Some(cfg),
                    path: Some(path),
                }
            }
        };
        if out.iter().any(|o| o.name == candidate.name) {
            return Err(
                UsageError(format!("--candidate {} is given twice", candidate.name)).into(),
            );
        }
        out.push(candidate);
    }
    Ok(out)
}

/// The configuration and every candidate read from a file, with where each was read.
fn config_files<'a>(
    config_path: &'a Path,
    config: &'a Config,
    candidates: &'a [Candidate],
) -> impl Iterator<Item = (&'a Path, &'a Config)> {
    let files = candidates
        .iter()
        .filter_map(|c| Some((c.path.as_deref()?, c.config.as_ref()?)));
    std::iter::once((config_path, config)).chain(files)
}

/// A team map whose teams a configuration lacks: every job of those teams would be rejected
/// by every candidate built on it, and the replay would say nothing useful about them.
fn refuse_unknown_teams(
    trace: &Trace,
    config_path: &Path,
    config: &Config,
    candidates: &[Candidate],
) -> Result<(), UsageError> {
    for (path, cfg) in config_files(config_path, config, candidates) {
        let missing = replay_model::teams_not_configured(trace, cfg);
        if !missing.is_empty() {
            return Err(UsageError(format!(
                "the team map gives jobs to {} team{} that {} does not have: {} (map them to teams of teamshare.toml, or add the teams)",
                missing.len(),
                if missing.len() == 1 { "" } else { "s" },
                path.display(),
                missing.join(", ")
            )));
        }
    }
    Ok(())
}

/// A configuration governing shards (`[gpu_types.shard]`, issue 30): the simulated cluster
/// has nodes of one GPU type each, and a shard shares its GPU with whole-GPU jobs, which it
/// cannot model (the capacity history records the GPUs once, without their shards). Refused
/// rather than replayed wrong. GPU families of MIG slices are replayed: a slice is a device of
/// its own.
fn refuse_shares(
    config_path: &Path,
    config: &Config,
    candidates: &[Candidate],
) -> Result<(), UsageError> {
    for (path, cfg) in config_files(config_path, config, candidates) {
        if let Some(shares) = cfg.shares() {
            return Err(UsageError(format!(
                "{} governs shards of {} ([gpu_types.shard]), which replay does not model: a shard shares its GPU with whole-GPU jobs; replay a copy without [gpu_types.shard]",
                path.display(),
                shares.of
            )));
        }
    }
    Ok(())
}

/// The file of the settings the history ran under (`--current`, by default the
/// configuration); None for `--current none` (plain Slurm).
fn current_file(config_path: &Path, args: &ReplayArgs) -> Option<PathBuf> {
    match args.current.as_deref() {
        None => Some(config_path.to_path_buf()),
        Some("none") => None,
        Some(path) => Some(PathBuf::from(path)),
    }
}

#[cfg(test)]
mod tests;
