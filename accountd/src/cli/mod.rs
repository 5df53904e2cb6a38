//! The command line: arguments parsed by clap, validated into ready values, then handed to the
//! library. Everything that prints lives here.

use std::collections::BTreeMap;
use std::io::{IsTerminal as _, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use anyhow::Context as _;
use clap::{Args, CommandFactory as _, FromArgMatches as _, Parser, Subcommand, ValueEnum};
use teamshare_config::{Config, ConfigError};

use accountd::capacity::{self, Capacity};
use accountd::daemon::{self, DaemonLog, DaemonOptions};
use accountd::ingest::{self, IngestError};
use accountd::logging;
use accountd::period::{self, format_local, Period, TimeError, UnixSeconds};
use accountd::report::html as report_html;
use accountd::report::utilisation;
use accountd::report::{self, CapacitySource, FairshareParams, Format, RowKind, UsageParams};
use accountd::sample::{self, collect, gpu, jobs, sampler};
use accountd::slurm_cli::{self, SlurmCommandError};
use accountd::slurm_setup::{self, Applied, Associations};
use accountd::status::{self, StatusInput};
use accountd::store::{RunawayRun, Store, StoreError};

/// A line on stderr; a closed stderr is not worth a panic (`eprintln!` would).
macro_rules! say_err {
    ($($arg:tt)*) => {{
        let _ = writeln!(std::io::stderr().lock(), $($arg)*);
    }};
}

/// [`say_err!`] without the line end (the progress bar).
macro_rules! say_err_inline {
    ($($arg:tt)*) => {{
        let _ = write!(std::io::stderr().lock(), $($arg)*);
    }};
}

mod docs;
mod generate;

pub use docs::ExitStatus;

/// The definitions of the command line; [`command`] adds each command's notes and exit codes
/// (from [`docs`]) to its help.
#[derive(Debug, Parser)]
#[command(
    name = generate::BIN,
    version,
    about = "teamshare accounting: Slurm accounting into SQLite, GPU usage and cost reports, Slurm association setup"
)]
struct Cli {
    /// teamshare.toml to use [default: teamshare.toml beside $SLURM_CONF]
    #[arg(long, global = true, value_name = "PATH")]
    config: Option<PathBuf>,

    /// SQLite database to use instead of [accountd] database of the configuration
    #[arg(long, global = true, value_name = "PATH")]
    database: Option<PathBuf>,

    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Validate teamshare.toml and print a summary; check quotas against the capacity
    CheckConfig(CheckConfigArgs),
    /// Read job runs from sacct into the database (idempotent; overlapping windows are safe)
    Ingest(IngestArgs),
    /// Reports: per-team usage, borrowing, lending and cost; jobs with idle GPUs; utilisation;
    /// fair-share
    Report(ReportArgs),
    /// The daemon: governor passes, sacct ingest, sample collection, capacity samples, and
    /// /metrics, until SIGTERM or SIGINT
    Run(RunArgs),
    /// Make Slurm's accounts match teamshare.toml with sacctmgr
    SetupSlurm(SetupSlurmArgs),
    /// Keep Slurm's job priorities and team GPU limits matching the governance rules, and
    /// publish the state the plugin reads (runs until killed; --once for one pass)
    Govern(GovernArgs),
    /// Each team now: quota, GPUs in use (in quota / borrowed), what it may hold, what it
    /// lends, its waiting jobs and why; live from Slurm and the governor's state
    Status(StatusArgs),
    /// On a GPU node: sample every GPU through NVML at an interval into the local spool
    Sample(SampleArgs),
    /// On the head: store every node's spooled GPU samples in the database (idempotent)
    CollectSamples(CollectSamplesArgs),
    /// Man pages and shell completions, made from these definitions (for packaging)
    #[command(hide = true)]
    Generate(GenerateArgs),
}

#[derive(Debug, Args)]
struct GenerateArgs {
    #[command(subcommand)]
    what: Generated,
}

#[derive(Debug, Subcommand)]
enum Generated {
    /// Write accountd.1 and a page per command (accountd-report.1, ...) into DIR; print their
    /// paths
    Man {
        /// Where the pages go (created if missing)
        #[arg(value_name = "DIR", default_value = ".")]
        dir: PathBuf,
    },
    /// Print the completion script of SHELL
    Completions {
        #[arg(value_name = "SHELL")]
        shell: clap_complete::Shell,
    },
}

#[derive(Debug, Args)]
struct SampleArgs {
    /// Sampling interval, e.g. 10s or 200ms [default: [accountd] sample_interval, else 10s]
    #[arg(long, value_name = "DURATION")]
    interval: Option<String>,
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
    job_refresh: Option<String>,
    /// Do not look up jobs: every sample carries no job
    #[arg(long)]
    no_jobs: bool,
}

#[derive(Debug, Args)]
struct RunArgs {
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

#[derive(Debug, Args)]
struct StatusArgs {
    /// Only this team [default: every team]
    #[arg(long, value_name = "TEAM")]
    team: Option<String>,
    /// Output format
    #[arg(long, value_enum, default_value_t = StatusFormat::Table)]
    format: StatusFormat,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum StatusFormat {
    Table,
    Json,
}

#[derive(Debug, Args)]
struct CollectSamplesArgs {
    /// Spool root holding one directory per node [default: [accountd] sample_spool]
    #[arg(long, value_name = "DIR")]
    spool: Option<PathBuf>,
}

#[derive(Debug, Args)]
struct CheckConfigArgs {
    /// Governed capacity in GPUs; without it, it is measured with sinfo when SLURM_CONF is set
    #[arg(long, value_name = "GPUS")]
    capacity: Option<u32>,
}

#[derive(Debug, Args)]
struct IngestArgs {
    /// Start of the window [default: the stored watermark minus 1 hour, or 30 days ago]
    #[arg(long, value_name = "TIME")]
    since: Option<String>,
    /// End of the window [default: now]
    #[arg(long, value_name = "TIME")]
    until: Option<String>,
}

#[derive(Debug, Args)]
struct ReportArgs {
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
    since: Option<String>,
    /// End of the period [default: now]; fairshare: the instant usage is decayed to
    #[arg(long, value_name = "TIME")]
    until: Option<String>,
    /// Output format
    #[arg(long, value_enum, default_value_t = FormatArg::Table)]
    format: FormatArg,
    /// `jobs`: show at most N jobs
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

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum ReportKind {
    /// Per team: GPU-hours allocated, in quota, borrowed, lent; jobs; quota; cost (allocated,
    /// idle share, total), with (pool) and (idle) rows
    Teams,
    /// Job runs by idle GPU-hours (NVML samples): job, user, team, GPUs, hours, mean utilisation
    Jobs,
    /// GPU utilisation and idle GPU-hours per team (NVML samples)
    Utilisation,
    /// Per team: weight, normalised shares, decayed usage, fair-share factor
    Fairshare,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum FormatArg {
    Table,
    Csv,
    Json,
    Html,
}

impl FormatArg {
    /// The format of the text renderers; `html` is `report teams`' alone (its page has charts
    /// of the period's days besides the table: `report_html`).
    fn text(self) -> Result<Format, UsageError> {
        match self {
            FormatArg::Table => Ok(Format::Table),
            FormatArg::Csv => Ok(Format::Csv),
            FormatArg::Json => Ok(Format::Json),
            FormatArg::Html => Err(UsageError(
                "--format html applies to `report teams` only".into(),
            )),
        }
    }
}

#[derive(Debug, Args)]
struct GovernArgs {
    /// Time between passes
    #[arg(long, value_name = "DURATION", default_value = "1s", value_parser = teamshare_config::parse_duration_ms)]
    interval: std::time::Duration,
    /// Run one pass and exit
    #[arg(long)]
    once: bool,
    /// Read Slurm and plan once, print what was read and planned, and exit without publishing
    /// the state or changing anything in Slurm
    #[arg(long, conflicts_with = "once")]
    dry_run: bool,
}

#[derive(Debug, Args)]
struct SetupSlurmArgs {
    /// Add this user to every team account (repeat for several users)
    #[arg(long = "user", value_name = "NAME")]
    users: Vec<String>,
    /// Print the sacctmgr commands instead of running them
    #[arg(long)]
    dry_run: bool,
}

/// A mistake in how accountd was called ([`ExitStatus::Invalid`]).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct UsageError(String);

/// Whether `err` is a write to a reader that went away (`accountd ... | head`): the command
/// then ends quietly with success.
pub fn is_broken_pipe(err: &anyhow::Error) -> bool {
    err.chain().any(|cause| {
        cause
            .downcast_ref::<std::io::Error>()
            .is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

/// The exit status an error ends the program with.
pub fn exit_code_for(err: &anyhow::Error) -> ExitStatus {
    let invalid = err.chain().any(|cause| {
        cause.is::<UsageError>()
            || cause.is::<TimeError>()
            || matches!(
                cause.downcast_ref::<ConfigError>(),
                Some(ConfigError::Invalid(_))
            )
            || matches!(
                cause.downcast_ref::<IngestError>(),
                Some(IngestError::EmptyWindow { .. })
            )
    });
    if invalid {
        ExitStatus::Invalid
    } else {
        ExitStatus::Runtime
    }
}

/// The command line as clap sees it: [`Cli`]'s definitions, each command's help ending with its
/// notes and exit codes from [`docs`] (as its man page does).
fn command() -> clap::Command {
    Cli::command()
        .after_help(docs::COMMON.after_help())
        .mut_subcommands(|sub| {
            let doc = docs::of_command(sub.get_name());
            sub.after_help(doc.after_help())
        })
}

pub fn run() -> anyhow::Result<ExitCode> {
    let mut cmd = command();
    let matches = cmd.get_matches_mut();
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.format(&mut cmd).exit());
    let config_path = cli
        .config
        .clone()
        .unwrap_or_else(teamshare_config::default_path);
    match &cli.command {
        Command::Generate(args) => generate_cmd(args),
        Command::CheckConfig(args) => check_config(&config_path, args),
        Command::Ingest(args) => {
            let config = load_config(&config_path)?;
            ingest_cmd(&config, database_path(&cli, &config), args)
        }
        Command::Report(args) => {
            let config = load_config(&config_path)?;
            report_cmd(&config, database_path(&cli, &config), args)
        }
        Command::Status(args) => {
            let config = load_config(&config_path)?;
            status_cmd(&config, args)
        }
        Command::Sample(args) => sample_cmd(cli.config.as_deref(), &config_path, args),
        Command::CollectSamples(args) => {
            let config = load_config(&config_path)?;
            collect_samples_cmd(&config, database_path(&cli, &config), args)
        }
        Command::SetupSlurm(args) => {
            let config = load_config(&config_path)?;
            setup_slurm(&config, &config_path, args)
        }
        Command::Run(args) => {
            let config = load_config(&config_path)?;
            let database = database_path(&cli, &config);
            run_cmd(config, &config_path, database, args)
        }
        Command::Govern(args) => {
            let config = load_config(&config_path)?;
            let database = database_path(&cli, &config);
            govern(config, database, args)
        }
    }
}

fn database_path(cli: &Cli, config: &Config) -> PathBuf {
    cli.database
        .clone()
        .unwrap_or_else(|| config.accountd.database.clone())
}

/// Load the configuration; an invalid one has every problem printed, then fails with
/// [`ExitStatus::Invalid`].
fn load_config(path: &Path) -> anyhow::Result<Config> {
    match teamshare_config::load(path) {
        Ok(config) => Ok(config),
        Err(ConfigError::Invalid(diagnostics)) => {
            say_err!("{diagnostics}");
            Err(UsageError(format!(
                "{} is not a valid configuration ({} {})",
                path.display(),
                diagnostics.len(),
                plural(diagnostics.len(), "error", "errors")
            ))
            .into())
        }
        Err(e) => Err(e.into()),
    }
}

fn plural<'a>(n: usize, one: &'a str, many: &'a str) -> &'a str {
    if n == 1 {
        one
    } else {
        many
    }
}

fn time_arg(
    text: Option<&str>,
    now: UnixSeconds,
    what: &str,
) -> anyhow::Result<Option<UnixSeconds>> {
    text.map(|t| period::parse_time_arg(t, now, &chrono::Local))
        .transpose()
        .with_context(|| format!("invalid {what}"))
}

// ---------------------------------------------------------------------------------------------
// generate

fn generate_cmd(args: &GenerateArgs) -> anyhow::Result<ExitCode> {
    match &args.what {
        Generated::Man { dir } => {
            let pages = generate::man_pages(command(), dir)
                .with_context(|| format!("cannot write the man pages into {}", dir.display()))?;
            let mut out = Stdout::new();
            for page in pages {
                out.line(&page.display().to_string())?;
            }
            Ok(ExitStatus::Success.into())
        }
        Generated::Completions { shell } => {
            let script = generate::completions(&command(), *shell);
            print(&String::from_utf8_lossy(&script))
        }
    }
}

// ---------------------------------------------------------------------------------------------
// check-config

fn check_config(path: &Path, args: &CheckConfigArgs) -> anyhow::Result<ExitCode> {
    let config = match teamshare_config::load(path) {
        Ok(config) => config,
        Err(ConfigError::Invalid(diagnostics)) => {
            say_err!("{diagnostics}");
            say_err!(
                "{}: {} {}",
                path.display(),
                diagnostics.len(),
                plural(diagnostics.len(), "error", "errors")
            );
            return Ok(ExitStatus::Invalid.into());
        }
        Err(e) => return Err(e.into()),
    };
    let mut out = Stdout::new();
    out.line(&summary(path, &config))?;

    // The capacity: given, measured, or not checked (said in one line).
    let measured: Option<(u32, BTreeMap<String, u32>, String)> = match args.capacity {
        Some(total) => {
            // Only a total was given: per-type quotas cannot be checked against it.
            let unknown_types: BTreeMap<String, u32> = config
                .teams
                .iter()
                .flat_map(|t| t.quota.by_type.keys())
                .map(|t| (t.clone(), u32::MAX))
                .collect();
            let note = if unknown_types.is_empty() {
                String::new()
            } else {
                "; per-type quotas not checked".to_string()
            };
            Some((
                total,
                unknown_types,
                format!("capacity: {total} GPUs (given with --capacity{note})"),
            ))
        }
        None if slurm_cli::slurm_conf().is_none() => {
            say_err!("capacity: not checked (SLURM_CONF is not set, so sinfo cannot be asked; use --capacity N)");
            None
        }
        None => match capacity::measure(&config.cluster.partitions) {
            Ok(c) => {
                let line = capacity_line(&config, &c);
                Some((c.total, c.by_type, line))
            }
            Err(e) => {
                say_err!("capacity: not checked (sinfo unavailable: {e})");
                None
            }
        },
    };
    if let Some((total, by_type, line)) = measured {
        out.line(&line)?;
        let problems = config.check_capacity(total, &by_type);
        if !problems.is_empty() {
            for d in &problems {
                say_err!("{d}");
            }
            say_err!(
                "{}: {} {}",
                path.display(),
                problems.len(),
                plural(problems.len(), "error", "errors")
            );
            return Ok(ExitStatus::Invalid.into());
        }
    }
    Ok(ExitStatus::Success.into())
}

fn summary(path: &Path, config: &Config) -> String {
    let teams: Vec<String> = config
        .teams
        .iter()
        .map(|t| {
            let quota = if t.quota.is_typed() {
                let parts: Vec<String> = t
                    .quota
                    .by_type
                    .iter()
                    .map(|(k, n)| format!("{k} {n}"))
                    .collect();
                format!("{} ({})", t.quota.total, parts.join(", "))
            } else {
                t.quota.total.to_string()
            };
            let borrow = match t.borrow_limit {
                Some(b) => b.to_string(),
                None => "unlimited".to_string(),
            };
            format!(
                "{} (quota {quota}, borrow {borrow}, lend {}, weight {})",
                t.name, t.lend_limit, t.weight
            )
        })
        .collect();
    let classes: Vec<String> = config
        .priority_classes
        .iter()
        .map(|c| {
            if c.preemptible {
                format!("{} ({})", c.name, c.value)
            } else {
                format!("{} ({}, not preemptible)", c.name, c.value)
            }
        })
        .collect();
    let rates: Vec<String> = config
        .gpu_types
        .iter()
        .map(|(k, t)| format!("{k} {:.2}", t.rate_per_hour))
        .collect();
    let mut s = format!(
        "{} is valid. Cluster {} governs partition{} {}. {} team{} with {} GPUs of quota in all: {}.",
        path.display(),
        config.cluster.name,
        if config.cluster.partitions.len() == 1 { "" } else { "s" },
        config.cluster.partitions.join(", "),
        config.teams.len(),
        plural(config.teams.len(), "", "s"),
        config.total_quota(),
        if teams.is_empty() { "none".to_string() } else { teams.join(", ") },
    );
    if classes.is_empty() {
        s.push_str(" No priority classes.");
    } else {
        s.push_str(&format!(
            " {} priority class{}: {}.",
            classes.len(),
            plural(classes.len(), "", "es"),
            classes.join(", ")
        ));
    }
    if rates.is_empty() {
        s.push_str(" No GPU rates: reports show no cost.");
    } else {
        s.push_str(&format!(
            " Rates per GPU-hour ({}): {}.",
            config.cluster.currency,
            rates.join(", ")
        ));
    }
    s
}

fn capacity_line(config: &Config, c: &Capacity) -> String {
    let mut line = format!(
        "capacity: {} GPUs on {} usable node{} of partition{} {} (measured with sinfo)",
        c.total,
        c.usable_nodes,
        plural(c.usable_nodes, "", "s"),
        if config.cluster.partitions.len() == 1 {
            ""
        } else {
            "s"
        },
        config.cluster.partitions.join(", ")
    );
    if !c.by_type.is_empty() {
        let types: Vec<String> = c.by_type.iter().map(|(k, n)| format!("{k} {n}")).collect();
        line.push_str(&format!(", by type: {}", types.join(", ")));
    }
    if !c.unusable_nodes.is_empty() {
        let nodes: Vec<String> = c
            .unusable_nodes
            .iter()
            .map(|(n, s)| format!("{n} ({s})"))
            .collect();
        line.push_str(&format!("; not usable: {}", nodes.join(", ")));
    }
    line
}

// ---------------------------------------------------------------------------------------------
// ingest

fn ingest_cmd(config: &Config, database: PathBuf, args: &IngestArgs) -> anyhow::Result<ExitCode> {
    let now = period::now();
    let since = time_arg(args.since.as_deref(), now, "--since")?;
    let until = time_arg(args.until.as_deref(), now, "--until")?;
    if slurm_cli::slurm_conf().is_none() {
        // Said before the database is created or opened, since nothing could be read anyway.
        return Err(SlurmCommandError::SlurmConfUnset {
            program: "sacct".into(),
        }
        .into());
    }
    let mut store = Store::open(&database)?;
    let cluster = slurm_cli::slurm_name(&config.cluster.name);
    let plan = ingest::plan(&store, &cluster, since, until, now)?;
    say_err!(
        "reading sacct of cluster {cluster} from {} to {} ...",
        period::format_rfc3339(plan.window.since),
        period::format_rfc3339(plan.window.until)
    );
    let summary = if std::io::stderr().is_terminal() {
        let mut bar = ProgressBar::new();
        let summary = ingest::ingest_with_progress(&mut store, &plan, now, &mut |p| bar.draw(p));
        bar.clear();
        summary?
    } else {
        ingest::ingest(&mut store, &plan, now)?
    };
    for line in &summary.malformed {
        say_err!("accountd: warning: skipped {line}");
    }
    say_err!("{summary}");
    // The ingest is done and kept whatever squeue says; without it, runaways wait for the next.
    match ingest::check_runaways(&mut store, &cluster) {
        Ok(clipped) => {
            for run in &clipped {
                say_err!("accountd: warning: {}", ingest::describe_runaway(run));
            }
        }
        Err(e) => say_err!("accountd: warning: {e}"),
    }
    Ok(ExitStatus::Success.into())
}

/// A one-line progress bar on a terminal's stderr: how much of the window is read, records,
/// records per second. Redrawn at most every 200 ms.
struct ProgressBar {
    started: std::time::Instant,
    drawn: Option<std::time::Instant>,
}

impl ProgressBar {
    const WIDTH: usize = 30;

    fn new() -> Self {
        ProgressBar {
            started: std::time::Instant::now(),
            drawn: None,
        }
    }

    fn draw(&mut self, p: ingest::Progress) {
        if self
            .drawn
            .is_some_and(|t| t.elapsed() < std::time::Duration::from_millis(200))
        {
            return;
        }
        self.drawn = Some(std::time::Instant::now());
        let filled = ((p.fraction * Self::WIDTH as f64).round() as usize).min(Self::WIDTH);
        let rate = p.records as f64 / self.started.elapsed().as_secs_f64().max(1e-3);
        say_err_inline!(
            "\r[{}{}] {:3.0} %  {} records  {:.0}/s ",
            "#".repeat(filled),
            " ".repeat(Self::WIDTH - filled),
            p.fraction * 100.0,
            p.records,
            rate
        );
    }

    fn clear(&self) {
        if self.drawn.is_some() {
            say_err_inline!("\r{}\r", " ".repeat(Self::WIDTH + 60));
        }
    }
}

// ---------------------------------------------------------------------------------------------
// report

fn report_cmd(config: &Config, database: PathBuf, args: &ReportArgs) -> anyhow::Result<ExitCode> {
    if args.by_day && args.kind != ReportKind::Teams {
        return Err(UsageError("--by-day applies to `report teams` only".into()).into());
    }
    if args.by_type && args.kind != ReportKind::Teams {
        return Err(UsageError("--by-type applies to `report teams` only".into()).into());
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
        ReportKind::Jobs | ReportKind::Utilisation => samples_report(config, database, args),
    }
}

/// The period of a report: `--since` (default the first of this month) to `--until` (now).
fn report_period(args: &ReportArgs, now: UnixSeconds) -> anyhow::Result<Period> {
    let since = time_arg(args.since.as_deref(), now, "--since")?
        .unwrap_or_else(|| period::month_start(now, &chrono::Local));
    let until = time_arg(args.until.as_deref(), now, "--until")?.unwrap_or(now);
    if since >= until {
        return Err(UsageError(format!(
            "the period is empty: --since ({}) must be before --until ({})",
            format_local(since, &chrono::Local),
            format_local(until, &chrono::Local)
        ))
        .into());
    }
    Ok(Period { since, until })
}

/// How often a report is read again from a database that changed under it.
const REPORT_READS: usize = 3;

/// Compute a report from the database, opened read-only (a report never creates, upgrades or
/// writes one, so a user who may only read it can run reports). A database read as immutable
/// (closed, in a directory this user cannot write) that a checkpoint changed while it was read
/// is read again.
fn with_report_store<T>(
    database: &Path,
    fill_with: &str,
    read: impl Fn(&Store) -> anyhow::Result<T>,
) -> anyhow::Result<T> {
    for _ in 0..REPORT_READS {
        let store = match Store::open_read_only(database) {
            Ok(s) => s,
            Err(StoreError::Missing { .. }) => anyhow::bail!(
                "no database at {}: run `accountd {fill_with}` first (or give --database)",
                database.display()
            ),
            Err(e) => return Err(e.into()),
        };
        let result = read(&store);
        if !store.changed_while_read() {
            return result;
        }
    }
    anyhow::bail!(
        "the database {} changed while it was read, {REPORT_READS} times (accountd run writing it back): run the report again",
        database.display()
    )
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

/// Print a whole report. A reader that goes away early (`accountd report | head`) is a
/// success: the rest is not written.
fn print(text: &str) -> anyhow::Result<ExitCode> {
    Stdout::new().text(text)?;
    Ok(ExitStatus::Success.into())
}

/// Standard output that goes quiet when its reader has gone: a write that meets a closed pipe
/// (EPIPE; Rust ignores SIGPIPE) is taken as the end of the reader's interest, not an error, and
/// nothing more is written. `println!` would panic there (exit 101).
struct Stdout<W: Write = std::io::Stdout> {
    out: W,
    closed: bool,
}

impl Stdout {
    fn new() -> Self {
        Stdout::to(std::io::stdout())
    }
}

impl<W: Write> Stdout<W> {
    fn to(out: W) -> Self {
        Stdout { out, closed: false }
    }

    fn text(&mut self, text: &str) -> std::io::Result<()> {
        if self.closed {
            return Ok(());
        }
        match self
            .out
            .write_all(text.as_bytes())
            .and_then(|()| self.out.flush())
        {
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {
                self.closed = true;
                Ok(())
            }
            other => other,
        }
    }

    fn line(&mut self, line: &str) -> std::io::Result<()> {
        self.text(&format!("{line}\n"))
    }
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
        note_runaways(&runaway);
        if let Some(first) = days.first() {
            let untyped: f64 = days.iter().map(|d| d.untyped_gpu_seconds).sum();
            if first.typed && untyped > 0.0 {
                note_untyped(untyped, first, &params);
            }
            note_outside(
                &days.iter().flat_map(|d| &d.outside).collect::<Vec<_>>(),
                first,
            );
        }
        return print(&report::render_teams_by_day(
            &days,
            args.format.text()?,
            args.by_type,
            &chrono::Local,
        ));
    }
    // The page charts the period's days: the reports `--by-day` prints, from the same reading.
    let html = args.format == FormatArg::Html;
    let (usage, days, runaway) = with_report_store(&database, "ingest", |store| {
        let days = if html {
            report::usage_report_by_day(store, &params, &chrono::Local)?
        } else {
            Vec::new()
        };
        Ok((
            report::usage_report(store, &params)?,
            days,
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
    if html {
        return print(&report_html::render_teams_html(
            &usage,
            &days,
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
    let as_of = time_arg(args.until.as_deref(), now, "--until")?.unwrap_or(now);
    let since = time_arg(args.since.as_deref(), now, "--since")?;
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

// ---------------------------------------------------------------------------------------------
// run

fn run_cmd(
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

// ---------------------------------------------------------------------------------------------
// sample, collect-samples, report jobs / utilisation

fn sample_cmd(
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
        Some(text) => {
            sample::parse_interval(text).map_err(|e| UsageError(format!("--interval: {e}")))?
        }
        None => settings.sample_interval,
    };
    let job_refresh = match &args.job_refresh {
        Some(text) => {
            sample::parse_interval(text).map_err(|e| UsageError(format!("--job-refresh: {e}")))?
        }
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

fn collect_samples_cmd(
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

/// `report jobs` and `report utilisation`: from the NVML samples.
fn samples_report(
    config: &Config,
    database: PathBuf,
    args: &ReportArgs,
) -> anyhow::Result<ExitCode> {
    let now = period::now();
    let Period { since, until } = report_period(args, now)?;
    let params = utilisation::UtilisationParams {
        cluster: slurm_cli::slurm_name(&config.cluster.name),
        period: Period { since, until },
        idle_threshold: config.accountd.idle_threshold_percent,
        now,
    };
    let mut r = with_report_store(&database, "collect-samples", |store| {
        Ok(utilisation::utilisation_report(store, &params)?)
    })?;
    if !args.teams.is_empty() {
        let wanted: Vec<String> = args
            .teams
            .iter()
            .map(|t| slurm_cli::slurm_name(t))
            .collect();
        let keep =
            |team: Option<&str>| team.is_some_and(|t| wanted.contains(&slurm_cli::slurm_name(t)));
        r.jobs.retain(|j| keep(j.team.as_deref()));
        r.teams.retain(|t| keep(Some(&t.team)));
    }
    if r.from_samples {
        say_err!("accountd: note: the hourly rollup was built with another idle threshold; read from the samples (`accountd collect-samples` rebuilds it)");
    }
    let format: Format = args.format.text()?;
    let text = match args.kind {
        ReportKind::Jobs => utilisation::render_jobs(&r, format, args.limit, &chrono::Local),
        _ => utilisation::render_teams(&r, format, &chrono::Local),
    };
    print(&text)
}

// ---------------------------------------------------------------------------------------------
// govern, setup-slurm

/// `accountd govern --dry-run`: what the governor reads and would do, one line each.
fn govern_dry_run(governor: &mut accountd::governor::Governor) -> anyhow::Result<ExitCode> {
    let (reading, plan, fairshare_error) = governor.dry_run().context("cannot read Slurm")?;
    if let Some(e) = fairshare_error {
        say_err!("accountd govern: {e}");
    }
    let cap = &reading.capacity;
    let mut text = format!(
        "capacity {} GPUs on {} usable nodes\n",
        cap.total, cap.usable_nodes
    );
    for (node, gpus) in &cap.per_node {
        let types: Vec<String> = cap
            .per_node_types
            .get(node)
            .into_iter()
            .flatten()
            .map(|(k, n)| format!(" {k}={n}"))
            .collect();
        text.push_str(&format!("node {node} {gpus}{}\n", types.concat()));
    }
    for (node, state) in &cap.unusable_nodes {
        text.push_str(&format!("unusable {node} {state}\n"));
    }
    for j in &reading.jobs {
        let name = accountd::governor::address(&reading.addresses, j.id)
            .unwrap_or_else(|| format!("{} (not named)", j.id));
        text.push_str(&format!(
            "job {name} team={} {:?} gpus={}{} tasks={} priority={} submit={} start={} eligible={} parked={} park_held={} batch={} nodes={} node_count={} completing={}\n",
            j.team,
            j.phase,
            j.gpus,
            j.gpu_type.as_deref().map_or(String::new(), |k| format!(" type={k}")),
            j.tasks,
            j.priority,
            j.submit,
            j.start.map_or("-".to_string(), |t| t.to_string()),
            j.eligible,
            j.parked,
            j.park_held,
            j.batch,
            j.nodes.join(","),
            j.node_count,
            j.completing,
        ));
    }
    for u in &reading.unreadable {
        text.push_str(&format!("unreadable {u}\n"));
    }
    for (team, limit) in &plan.gpu_limits {
        let tres = accountd::governor::grp_tres(*limit, plan.type_limits.get(team));
        text.push_str(&format!("would limit {team} {tres}\n"));
    }
    let changes = reading
        .jobs
        .iter()
        .filter(|j| j.priority != 0 && plan.priorities.get(&j.id).is_some_and(|p| *p != j.priority))
        .count();
    text.push_str(&format!("would reprioritise {changes} jobs\n"));
    for (what, ids) in [
        ("reclaim", &plan.reclaim),
        ("displace", &plan.displace),
        ("requeue (violation)", &plan.violations),
        ("hold (outside every team)", &plan.outside),
        ("hold (no single GPU type)", &plan.untyped),
        ("park", &plan.park),
        ("release", &plan.release),
    ] {
        if !ids.is_empty() {
            let ids: Vec<String> = ids.iter().map(ToString::to_string).collect();
            text.push_str(&format!("would {what} {}\n", ids.join(",")));
        }
    }
    text.push_str(&format!("read with {} Slurm calls\n", reading.slurm_calls));
    print(&text)
}

fn status_cmd(config: &Config, args: &StatusArgs) -> anyhow::Result<ExitCode> {
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

fn govern(config: Config, database: PathBuf, args: &GovernArgs) -> anyhow::Result<ExitCode> {
    let reader = accountd::governor::SlurmReader::from_env().map_err(UsageError)?;
    let mut governor = accountd::governor::Governor::with_reader(config, Some(database), reader);
    if args.dry_run {
        return govern_dry_run(&mut governor);
    }
    say_err!(
        "accountd govern: publishing {} every {:?}",
        governor.state_file().display(),
        args.interval
    );
    let mut last_error: Option<String> = None;
    let cadence = accountd::governor::Cadence {
        interval: args.interval,
        once: args.once,
    };
    let failed = accountd::governor::run_loop(
        governor,
        cadence,
        || None,
        |result| {
            match result {
                Ok(report) => {
                    if last_error.take().is_some() {
                        say_err!("accountd govern: passes succeed again");
                    }
                    for (team, limit) in &report.limit_updates {
                        say_err!("accountd govern: team {team} GPU limit -> {limit}");
                    }
                    for id in &report.reclaimed {
                        say_err!(
                            "accountd govern: job {id} requeued for an in-quota job Slurm left waiting"
                        );
                    }
                    for id in &report.displaced {
                        say_err!(
                            "accountd govern: job {id} displaced by a higher class of its team"
                        );
                    }
                }
                Err(e) => {
                    if args.once {
                        return std::ops::ControlFlow::Break(e);
                    }
                    // Log each new failure once; keep trying (the plugin sees the state age).
                    let text = e.to_string();
                    if last_error.as_deref() != Some(&text) {
                        say_err!("accountd govern: pass failed: {text}");
                        last_error = Some(text);
                    }
                }
            }
            std::ops::ControlFlow::Continue(())
        },
        |deadline| {
            if let Some(rest) = deadline.checked_duration_since(std::time::Instant::now()) {
                std::thread::sleep(rest);
            }
            true
        },
    );
    match failed {
        Some(e) => Err(e).context("governor pass failed"),
        None => Ok(ExitStatus::Success.into()),
    }
}

fn setup_slurm(config: &Config, path: &Path, args: &SetupSlurmArgs) -> anyhow::Result<ExitCode> {
    if let Some(bad) = args
        .users
        .iter()
        .find(|u| u.trim().is_empty() || u.contains([' ', ',', '=']))
    {
        return Err(UsageError(format!("--user `{bad}` is not a user name")).into());
    }
    let cluster = &slurm_cli::slurm_name(&config.cluster.name);
    let want = slurm_setup::desired(config);
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
    // Per-type limits need slurmdbd to know each type's TRES, which only slurm.conf's
    // AccountingStorageTRES can make it do.
    if config.is_typed() {
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
            if !args.dry_run {
                anyhow::bail!(text);
            }
            say_err!("accountd: warning: {text}");
        }
    }
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
    // The governed jobs' QOS, and the teams' access to it (idempotent).
    for cmd in slurm_setup::qos_commands(config, cluster) {
        if args.dry_run {
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
    if !args.dry_run {
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
    Ok(ExitStatus::Success.into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cli_is_well_formed() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }

    #[test]
    fn every_command_s_help_ends_with_its_doc() {
        let cmd = command();
        cmd.clone().debug_assert();
        let after = |c: &clap::Command| c.get_after_help().map(ToString::to_string);
        assert_eq!(after(&cmd), Some(docs::COMMON.after_help()));
        for (name, doc) in docs::OWN_DOCS {
            let sub = cmd
                .find_subcommand(name)
                .unwrap_or_else(|| panic!("no {name}"));
            assert_eq!(after(sub), Some(doc.after_help()), "{name}");
            assert_ne!(doc.after_help(), docs::COMMON.after_help());
        }
        let report = cmd.find_subcommand("report").unwrap();
        assert_eq!(after(report), Some(docs::COMMON.after_help()));
        assert_eq!(cmd.get_name(), generate::BIN);
    }

    /// A reader that took what it wanted and went away.
    struct ClosedAfter(usize);

    impl Write for ClosedAfter {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            if self.0 == 0 {
                return Err(std::io::ErrorKind::BrokenPipe.into());
            }
            let n = buf.len().min(self.0);
            self.0 -= n;
            Ok(n)
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_closed_stdout_ends_the_printing_not_the_command() {
        let mut out = Stdout::to(ClosedAfter(5));
        out.line("first line").unwrap();
        assert!(out.closed);
        out.line("second line").unwrap();
        // Another error is still one.
        struct Full;
        impl Write for Full {
            fn write(&mut self, _: &[u8]) -> std::io::Result<usize> {
                Err(std::io::Error::other("disk full"))
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        assert!(Stdout::to(Full).line("x").is_err());
        let pipe: anyhow::Error =
            anyhow::Error::new(std::io::Error::from(std::io::ErrorKind::BrokenPipe))
                .context("printing");
        assert!(is_broken_pipe(&pipe));
        assert!(!is_broken_pipe(&anyhow::anyhow!("other")));
    }

    #[test]
    fn usage_and_config_errors_exit_2_others_1() {
        let usage: anyhow::Error = UsageError("x".into()).into();
        assert_eq!(exit_code_for(&usage), ExitStatus::Invalid);
        let time: anyhow::Error = anyhow::Error::new(TimeError::Unrecognised { text: "x".into() })
            .context("invalid --since");
        assert_eq!(exit_code_for(&time), ExitStatus::Invalid);
        let io: anyhow::Error = std::io::Error::other("disk").into();
        assert_eq!(exit_code_for(&io), ExitStatus::Runtime);
    }
}
