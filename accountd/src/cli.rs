//! The command line: arguments parsed by clap, validated into ready values, then handed to the
//! library. Everything that prints lives here.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context as _;
use clap::{Args, Parser, Subcommand, ValueEnum};
use teamshare_config::{Config, ConfigError};

use accountd::capacity::{self, Capacity};
use accountd::ingest::{self, IngestError};
use accountd::period::{self, format_local, Period, TimeError, UnixSeconds};
use accountd::report::{self, Format, UsageParams};
use accountd::slurm_cli::{self, SlurmCommandError};
use accountd::slurm_setup::{self, Applied, Associations};
use accountd::store::Store;

/// Success.
pub const EXIT_OK: u8 = 0;
/// A runtime error: I/O, sacct/sinfo/sacctmgr failure, database.
pub const EXIT_RUNTIME: u8 = 1;
/// An invalid configuration or invalid command-line usage.
pub const EXIT_INVALID: u8 = 2;

const AFTER_HELP: &str = "\
Exit codes:
  0  success
  1  runtime error (I/O, sacct/sinfo/sacctmgr failure, database)
  2  invalid configuration or usage

Times (--since, --until) are YYYY-MM-DD (local midnight), YYYY-MM-DDTHH:MM:SS (local time),
`now`, or `now-<duration>`/`now+<duration>` such as now-2h, now-30m, now+1h.";

#[derive(Debug, Parser)]
#[command(
    name = "accountd",
    version,
    about = "teamshare accounting: Slurm accounting into SQLite, GPU usage and cost reports, Slurm association setup",
    after_help = AFTER_HELP
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
    #[command(after_help = AFTER_HELP)]
    CheckConfig(CheckConfigArgs),
    /// Read job runs from sacct into the database (idempotent; overlapping windows are safe)
    #[command(after_help = AFTER_HELP)]
    Ingest(IngestArgs),
    /// GPU-hours, jobs, quota and cost per team over a period
    #[command(after_help = AFTER_HELP)]
    Report(ReportArgs),
    /// Make Slurm's accounts match teamshare.toml with sacctmgr
    #[command(after_help = AFTER_HELP)]
    SetupSlurm(SetupSlurmArgs),
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
    /// Start of the period [default: the first of this month, 00:00 local time]
    #[arg(long, value_name = "TIME")]
    since: Option<String>,
    /// End of the period [default: now]
    #[arg(long, value_name = "TIME")]
    until: Option<String>,
    /// Output format
    #[arg(long, value_enum, default_value_t = FormatArg::Table)]
    format: FormatArg,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum ReportKind {
    /// GPU-hours, jobs, quota and cost per team
    Teams,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum FormatArg {
    Table,
    Csv,
    Json,
}

impl From<FormatArg> for Format {
    fn from(f: FormatArg) -> Self {
        match f {
            FormatArg::Table => Format::Table,
            FormatArg::Csv => Format::Csv,
            FormatArg::Json => Format::Json,
        }
    }
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

/// A mistake in how accountd was called (exit 2).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct UsageError(String);

/// The exit code an error ends the program with.
pub fn exit_code_for(err: &anyhow::Error) -> u8 {
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
        EXIT_INVALID
    } else {
        EXIT_RUNTIME
    }
}

pub fn run() -> anyhow::Result<ExitCode> {
    let cli = Cli::parse();
    let config_path = cli
        .config
        .clone()
        .unwrap_or_else(teamshare_config::default_path);
    match &cli.command {
        Command::CheckConfig(args) => check_config(&config_path, args),
        Command::Ingest(args) => {
            let config = load_config(&config_path)?;
            ingest_cmd(&config, database_path(&cli, &config), args)
        }
        Command::Report(args) => {
            let config = load_config(&config_path)?;
            report_cmd(&config, database_path(&cli, &config), args)
        }
        Command::SetupSlurm(args) => {
            let config = load_config(&config_path)?;
            setup_slurm(&config, &config_path, args)
        }
    }
}

fn database_path(cli: &Cli, config: &Config) -> PathBuf {
    cli.database
        .clone()
        .unwrap_or_else(|| config.accountd.database.clone())
}

/// Load the configuration; an invalid one has every problem printed, then fails with exit 2.
fn load_config(path: &Path) -> anyhow::Result<Config> {
    match teamshare_config::load(path) {
        Ok(config) => Ok(config),
        Err(ConfigError::Invalid(diagnostics)) => {
            eprintln!("{diagnostics}");
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
// check-config

fn check_config(path: &Path, args: &CheckConfigArgs) -> anyhow::Result<ExitCode> {
    let config = match teamshare_config::load(path) {
        Ok(config) => config,
        Err(ConfigError::Invalid(diagnostics)) => {
            eprintln!("{diagnostics}");
            eprintln!(
                "{}: {} {}",
                path.display(),
                diagnostics.len(),
                plural(diagnostics.len(), "error", "errors")
            );
            return Ok(ExitCode::from(EXIT_INVALID));
        }
        Err(e) => return Err(e.into()),
    };
    println!("{}", summary(path, &config));

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
            eprintln!("capacity: not checked (SLURM_CONF is not set, so sinfo cannot be asked; use --capacity N)");
            None
        }
        None => match capacity::measure(&config.cluster.partitions) {
            Ok(c) => {
                let line = capacity_line(&config, &c);
                Some((c.total, c.by_type, line))
            }
            Err(e) => {
                eprintln!("capacity: not checked (sinfo unavailable: {e})");
                None
            }
        },
    };
    if let Some((total, by_type, line)) = measured {
        println!("{line}");
        let problems = config.check_capacity(total, &by_type);
        if !problems.is_empty() {
            for d in &problems {
                eprintln!("{d}");
            }
            eprintln!(
                "{}: {} {}",
                path.display(),
                problems.len(),
                plural(problems.len(), "error", "errors")
            );
            return Ok(ExitCode::from(EXIT_INVALID));
        }
    }
    Ok(ExitCode::from(EXIT_OK))
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
    eprintln!(
        "reading sacct of cluster {cluster} from {} to {} ...",
        period::format_rfc3339(plan.window.since),
        period::format_rfc3339(plan.window.until)
    );
    let summary = ingest::ingest(&mut store, &plan, now)?;
    for line in &summary.malformed {
        eprintln!("accountd: warning: skipped {line}");
    }
    eprintln!("{summary}");
    Ok(ExitCode::from(EXIT_OK))
}

// ---------------------------------------------------------------------------------------------
// report

fn report_cmd(config: &Config, database: PathBuf, args: &ReportArgs) -> anyhow::Result<ExitCode> {
    match args.kind {
        ReportKind::Teams => teams_report(config, database, args),
    }
}

fn teams_report(config: &Config, database: PathBuf, args: &ReportArgs) -> anyhow::Result<ExitCode> {
    let now = period::now();
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
    if !database.exists() {
        anyhow::bail!(
            "no database at {}: run `accountd ingest` first (or give --database)",
            database.display()
        );
    }
    let store = Store::open(&database)?;
    let params = UsageParams::from_config(config, Period { since, until }, now, args.teams.clone());
    let usage = report::usage_report(&store, &params)?;
    for row in &usage.rows {
        if row.quota.is_none() && row.jobs == 0 {
            eprintln!(
                "accountd: note: `{}` is not a team of the configuration and has no GPU usage in the period",
                row.team
            );
        }
    }
    let text = report::render(&usage, args.format.into(), &chrono::Local);
    let mut stdout = std::io::stdout().lock();
    stdout.write_all(text.as_bytes())?;
    stdout.flush()?;
    Ok(ExitCode::from(EXIT_OK))
}

// ---------------------------------------------------------------------------------------------
// setup-slurm

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
            eprintln!(
                "accountd: warning: cannot read the current associations ({e}); showing the commands for a cluster that has none of them"
            );
            Associations::default()
        }
        Err(e) => return Err(e).context("cannot read Slurm's associations"),
    };
    let changes = slurm_setup::plan(&want, &args.users, &current);
    if changes.is_empty() {
        println!(
            "Slurm's associations on cluster {cluster} already match {}",
            path.display()
        );
        return Ok(ExitCode::from(EXIT_OK));
    }
    for change in &changes {
        if args.dry_run {
            println!("{}", change.command(cluster).display());
            continue;
        }
        match slurm_setup::apply(change, cluster)? {
            Applied::Done => println!("{change}"),
            Applied::AlreadyThere => println!("{change}: already there"),
        }
    }
    Ok(ExitCode::from(EXIT_OK))
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
    fn usage_and_config_errors_exit_2_others_1() {
        let usage: anyhow::Error = UsageError("x".into()).into();
        assert_eq!(exit_code_for(&usage), EXIT_INVALID);
        let time: anyhow::Error = anyhow::Error::new(TimeError::Unrecognised { text: "x".into() })
            .context("invalid --since");
        assert_eq!(exit_code_for(&time), EXIT_INVALID);
        let io: anyhow::Error = std::io::Error::other("disk").into();
        assert_eq!(exit_code_for(&io), EXIT_RUNTIME);
    }
}
