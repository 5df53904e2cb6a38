//! `accountd replay`: a period of job history replayed under candidate configurations, the
//! figures per team side by side (`accountd::replay`).

mod batch;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Args;
use teamshare_config::{Config, ReclaimMode};

use accountd::period::{self, Period};
use accountd::replay::calibrate::{self, Tolerance};
use accountd::replay::metrics::{self, figures, worse_off};
use accountd::replay::render::{
    self, Column, Curve, CurvePoint, Replay, AS_TODAY, PLAIN_SLURM, SILOED,
};
use accountd::replay::swf::MAX_CLUSTER_GPUS;
use accountd::replay::{
    self as replay_model, curve as replay_curve, history, swf, Outcome, Secs, SimParams, Trace,
};

use super::args::{nonempty_period, time_arg, FormatArg, Time};
use super::{load_config, print, ExitStatus, UsageError};
#[cfg(test)]
use batch::without_gpus;
use batch::{curve_plan, simulate, simulate_all, total_gpus, CurvePlan, CurvePlanPoint, Run};

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

/// A candidate as named on the command line.
#[derive(Debug, Clone, PartialEq, Eq)]
enum CandidateArg {
    AsToday,
    Siloed,
    PlainSlurm,
    File(PathBuf),
}

impl CandidateArg {
    fn parse(text: &str) -> Self {
        match text {
            AS_TODAY => CandidateArg::AsToday,
            SILOED => CandidateArg::Siloed,
            PLAIN_SLURM => CandidateArg::PlainSlurm,
            path => CandidateArg::File(PathBuf::from(path)),
        }
    }
}

/// A candidate ready to replay.
struct Candidate {
    name: String,
    /// None: "as today" (the history, not simulated).
    config: Option<Config>,
    /// The file it was read from (to reuse the calibration's simulation).
    path: Option<PathBuf>,
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
        TraceSource::Database(db) => super::with_report_store(db, "ingest", |store| {
            let history = match request.capacity {
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
            let line = format!("{}: {}", history.trace.source, history.summary);
            Ok((history.trace, vec![line]))
        }),
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

pub(super) fn run(
    config: &Config,
    config_path: &Path,
    database: PathBuf,
    args: &ReplayArgs,
) -> anyhow::Result<ExitCode> {
    let Period { since, until } = requested_period(args)?;
    // Every configuration is read before the long work starts.
    let current = current_settings(config, config_path, args)?;
    let candidates = candidates(config, config_path, args)?;
    if args.capacity_curve.is_some() && candidates.iter().all(|c| c.config.is_none()) {
        return Err(UsageError(
            "--capacity-curve replays simulated candidates: as-today alone has none".into(),
        )
        .into());
    }
    let request = trace_request(config, database, args, Period { since, until });
    let (trace, read) = load_trace(&request, config)?;
    if args.team_map.is_some() {
        refuse_unknown_teams(&trace, config_path, config, &candidates)?;
    }
    let (since, until) = (trace.since, trace.until);
    let tolerance = Tolerance {
        pct: args.tolerance_pct,
        secs: args.tolerance_secs,
    };
    let checkpoint: BTreeMap<String, Secs> = args.checkpoints.iter().cloned().collect();
    let params_for = |c: &Config| sim_params(args, &checkpoint, c);
    let figures_config = current.as_ref().map_or(config, |(_, c)| c);
    let mut notes = notes(args, &trace);
    notes.splice(0..0, read);

    // Calibration: the current settings against the history.
    let (calibration, cached) = calibration(
        &trace,
        current.as_ref(),
        args.skip_calibration,
        tolerance,
        &params_for,
    );
    if let Some(cal) = calibration.as_ref().filter(|c| !c.fits) {
        return misfit(&trace, cal, notes, args.format);
    }

    // The candidates at the trace's capacity, then the capacity curve: every simulation is
    // independent of the others, so they run side by side; each result keeps its place.
    let full = total_gpus(&trace);
    let step = args
        .curve_step
        .unwrap_or_else(|| replay_curve::default_step(&trace));
    let plan = curve_plan(&trace, &candidates, args, step);
    let (runs, column_runs) = runs(&candidates, cached.as_ref(), &plan, &params_for);
    let first_curve_run = runs.len() - plan.points.len();
    let mut results: Vec<Option<metrics::Figures>> = simulate_all(&trace, &runs, threads(args))
        .into_iter()
        .map(Some)
        .collect();
    let columns = columns(
        &trace,
        &candidates,
        &column_runs,
        &mut results,
        cached.as_ref(),
        figures_config,
    );
    let curve = args.capacity_curve.map(|_| {
        let points = curve_points(
            &candidates,
            &columns,
            &plan.points,
            &mut results[first_curve_run..],
            full,
        );
        let reference = columns
            .first()
            .and_then(|c| c.figures.cluster().wait.p95_secs);
        let rule = args.curve_quotas.rule();
        Curve::new(full, step, reference, tolerance, points, rule, plan.skipped)
    });

    let replay = Replay {
        source: trace.source.clone(),
        since,
        until,
        columns,
        calibration,
        curve,
        notes,
    };
    output(&replay, args.format)
}

/// Only the calibration, when the model does not fit the history (exit 3).
fn misfit(
    trace: &Trace,
    cal: &calibrate::Calibration,
    mut notes: Vec<String>,
    format: FormatArg,
) -> anyhow::Result<ExitCode> {
    notes.push("the what-ifs are not printed: the model does not fit the history (give --skip-calibration to print them anyway)".into());
    let replay = Replay {
        source: trace.source.clone(),
        since: trace.since,
        until: trace.until,
        columns: Vec::new(),
        calibration: Some(cal.clone()),
        curve: None,
        notes,
    };
    output(&replay, format)?;
    Ok(ExitStatus::ModelMisfit.into())
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

/// A simulation's parameters under configuration `c`.
fn sim_params(args: &ReplayArgs, checkpoint: &BTreeMap<String, Secs>, c: &Config) -> SimParams {
    SimParams {
        requeue_delay: args.requeue_delay.unwrap_or(
            if c.governance.reclaim_mode == ReclaimMode::Cancel {
                0
            } else {
                accountd::requeue_delay::GOVERNED_DELAY_SECS
            },
        ),
        checkpoint: checkpoint.clone(),
        ..SimParams::default()
    }
}

/// The calibration of the current settings against the history (none when skipped or
/// without them), and the simulation it made, with the settings' file, for reuse.
fn calibration(
    trace: &Trace,
    current: Option<&(PathBuf, Config)>,
    skip: bool,
    tolerance: Tolerance,
    params_for: &dyn Fn(&Config) -> SimParams,
) -> (Option<calibrate::Calibration>, Option<(PathBuf, Outcome)>) {
    match (current, skip) {
        (Some((path, settings)), false) => {
            let outcome = simulate(
                trace,
                settings,
                &params_for(settings),
                "the current settings",
            );
            let observed = figures(trace, &replay_model::observed(trace), settings);
            let like_history = replay_model::without_unknown_waits(trace, &outcome);
            let simulated = figures(trace, &like_history, settings);
            let cached = Some((path.clone(), outcome));
            (
                Some(calibrate::calibrate(
                    trace, &observed, &simulated, tolerance,
                )),
                cached,
            )
        }
        _ => (None, None),
    }
}

/// The simulations to run: each simulated candidate not reusing the calibration's, then the
/// capacity curve's points; and per candidate, its place among them.
fn runs<'c>(
    candidates: &'c [Candidate],
    cached: Option<&(PathBuf, Outcome)>,
    plan: &'c CurvePlan,
    params_for: &dyn Fn(&Config) -> SimParams,
) -> (Vec<Run<'c>>, Vec<Option<usize>>) {
    let mut runs: Vec<Run<'_>> = Vec::new();
    let mut column_runs: Vec<Option<usize>> = Vec::new();
    for c in candidates {
        let Some(cfg) = &c.config else {
            column_runs.push(None);
            continue;
        };
        let reused = cached.is_some_and(|(p, _)| c.path.as_deref() == Some(p.as_path()));
        if reused {
            column_runs.push(None);
            continue;
        }
        column_runs.push(Some(runs.len()));
        runs.push(Run {
            label: c.name.clone(),
            config: cfg,
            params: params_for(cfg),
            gpus: None,
        });
    }
    for p in &plan.points {
        runs.push(Run {
            label: format!("{} at {} GPUs", candidates[p.candidate].name, p.gpus),
            config: &p.config,
            params: params_for(&p.config),
            gpus: Some(p.gpus),
        });
    }
    (runs, column_runs)
}

/// How many threads the simulations run on (`--threads`).
fn threads(args: &ReplayArgs) -> usize {
    // One thread more than CPUs: runs differ in length, and with one per CPU the last one
    // ran alone while the other CPUs idled (the 10-point curve of the synthetic year on two
    // CPUs: 59.7 s on 2 threads, 55.8 s on 3; docs/design/replay.md).
    args.threads.map_or_else(
        || std::thread::available_parallelism().map_or(1, usize::from) + 1,
        |n| n as usize,
    )
}

/// The candidates' columns: the history's figures for as-today, each simulated one's from its
/// run (or the calibration's), and who is worse off than under the first.
fn columns(
    trace: &Trace,
    candidates: &[Candidate],
    column_runs: &[Option<usize>],
    results: &mut [Option<metrics::Figures>],
    cached: Option<&(PathBuf, Outcome)>,
    figures_config: &Config,
) -> Vec<Column> {
    let mut columns: Vec<Column> = Vec::new();
    for (c, run) in candidates.iter().zip(column_runs) {
        let figures = match (&c.config, run) {
            (None, _) => figures(trace, &replay_model::observed(trace), figures_config),
            (Some(_), Some(r)) => results[*r]
                .take()
                .expect("each run's figures are taken once"),
            (Some(cfg), None) => {
                let (_, outcome) = cached.expect("a candidate not run reuses the calibration's");
                figures(trace, outcome, cfg)
            }
        };
        columns.push(Column {
            candidate: c.name.clone(),
            figures,
            worse_off: Vec::new(),
        });
    }
    if let Some((first, rest)) = columns.split_first_mut() {
        for col in rest.iter_mut().filter(|c| c.candidate != AS_TODAY) {
            col.worse_off = worse_off(&first.figures, &col.figures);
        }
    }
    columns
}

/// The capacity curve's points: each simulated candidate as configured, then each point of
/// the plan with the figures of its run (`results`, the curve's runs in the plan's order).
fn curve_points(
    candidates: &[Candidate],
    columns: &[Column],
    plan: &[CurvePlanPoint],
    results: &mut [Option<metrics::Figures>],
    full: u32,
) -> Vec<CurvePoint> {
    let mut points = Vec::new();
    for (c, col) in candidates.iter().zip(columns) {
        if c.config.is_some() {
            points.push(CurvePoint::of(&c.name, full, "as configured", &col.figures));
        }
    }
    for (i, p) in plan.iter().enumerate() {
        let figures = results[i]
            .take()
            .expect("each run's figures are taken once");
        let name = &candidates[p.candidate].name;
        points.push(CurvePoint::of(name, p.gpus, &p.quotas, &figures));
    }
    points
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
    let wanted: Vec<CandidateArg> = if args.candidates.is_empty() {
        default_candidates(config_path, args)
    } else {
        baseline_first(
            args.candidates
                .iter()
                .map(|c| CandidateArg::parse(c))
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
            CandidateArg::AsToday => Candidate {
                name: AS_TODAY.into(),
                config: None,
                path: None,
            },
            CandidateArg::Siloed => Candidate {
                name: SILOED.into(),
                config: Some(replay_model::siloed(config)),
                path: None,
            },
            CandidateArg::PlainSlurm => Candidate {
                name: PLAIN_SLURM.into(),
                config: Some(replay_model::plain_slurm(config)),
                // The name stands for the path `--current none` gives its calibration, so
                // that the candidate reuses that simulation.
                path: Some(PathBuf::from(PLAIN_SLURM)),
            },
            CandidateArg::File(path) => {
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

/// Without `--candidate`: the baseline, the model of the settings the history ran under
/// (`--current`, by default the configuration; plain Slurm for `--current none`), then the
/// observed history beside it, siloed, and the configuration where it is not the baseline.
fn default_candidates(config_path: &Path, args: &ReplayArgs) -> Vec<CandidateArg> {
    let current = match args.current.as_deref() {
        None => Some(config_path.to_path_buf()),
        Some("none") => None,
        Some(path) => Some(PathBuf::from(path)),
    };
    let mut out = vec![
        current
            .clone()
            .map_or(CandidateArg::PlainSlurm, CandidateArg::File),
        CandidateArg::AsToday,
        CandidateArg::Siloed,
    ];
    if current.as_deref() != Some(config_path) {
        out.push(CandidateArg::File(config_path.to_path_buf()));
    }
    out
}

/// The candidates given, with the first simulated one moved to the front where the observed
/// history came first: what-ifs compare simulated with simulated, and the history is the
/// calibration beside the baseline, never the yardstick.
fn baseline_first(mut given: Vec<CandidateArg>) -> Vec<CandidateArg> {
    if let Some(i) = given
        .iter()
        .position(|c| !matches!(c, CandidateArg::AsToday))
    {
        let first = given.remove(i);
        given.insert(0, first);
    }
    given
}

/// A team map whose teams a configuration lacks: every job of those teams would be rejected
/// by every candidate built on it, and the replay would say nothing useful about them.
fn refuse_unknown_teams(
    trace: &Trace,
    config_path: &Path,
    config: &Config,
    candidates: &[Candidate],
) -> Result<(), UsageError> {
    let files = candidates
        .iter()
        .filter_map(|c| Some((c.path.as_deref()?, c.config.as_ref()?)));
    for (path, cfg) in std::iter::once((config_path, config)).chain(files) {
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

/// What the figures rest on, said under them.
fn notes(args: &ReplayArgs, trace: &Trace) -> Vec<String> {
    let mut notes = vec![
        "a job that never started is replayed with its time limit as its run time".to_string(),
        "a job that never started counts its wait up to its cancellation or the end of the period (censored)".to_string(),
        "the history marks no run as borrowed and no job as in quota: as-today has no reclaim latency or in-quota start".to_string(),
        format!(
            "requeue delay {}; checkpointing: {}",
            args.requeue_delay.map_or(format!("{}s, Slurm's 121 s as the governor lifts it (0 under reclaim_mode = cancel)", accountd::requeue_delay::GOVERNED_DELAY_SECS), |d| format!("{d}s")),
            if args.checkpoints.is_empty() {
                "none (a preempted job loses all its work)".to_string()
            } else {
                args.checkpoints
                    .iter()
                    .map(|(n, s)| format!("{n} every {}", metrics::duration(*s)))
                    .collect::<Vec<_>>()
                    .join(", ")
            }
        ),
    ];
    let unknown = trace.jobs.iter().filter(|j| j.observed.wait_unknown);
    let (waits, runs) = unknown.fold((0, 0), |(w, r), j| {
        (w + 1, r + usize::from(j.observed.runs.is_empty()))
    });
    if waits > 0 {
        notes.push(format!(
            "{waits} jobs have no recorded wait (-1): their waits are left out of as-today and of the calibration, and their runs are placed at their submission{}",
            if runs > 0 { format!("; {runs} of them have no recorded run time either, and no GPU-hours in as-today") } else { String::new() }
        ));
    }
    if let Some(n) = args.capacity {
        notes.push(format!(
            "constant capacity of {n} GPUs (--capacity), in nodes of {} GPUs, no drains",
            replay_curve::default_step(trace)
        ));
    }
    notes.push(format!(
        "{} jobs, {} GPUs on {} nodes",
        trace.jobs.len(),
        total_gpus(trace),
        trace.cluster.nodes.len()
    ));
    notes
}

#[cfg(test)]
mod tests;
