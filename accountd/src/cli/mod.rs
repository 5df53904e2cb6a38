//! The command line: arguments parsed by clap into ready values ([`args`]), handed to one
//! module per command, which calls the library. Everything that prints lives here.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{CommandFactory as _, FromArgMatches as _, Parser, Subcommand};
use teamshare_config::{Config, ConfigError};

use accountd::ingest::IngestError;
use accountd::period::TimeError;
use accountd::store::{Store, StoreError};

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

mod args;
mod check_config;
mod collect_samples;
mod docs;
mod generate;
mod govern;
mod ingest;
mod replay;
mod report;
mod run;
mod sample;
mod setup_slurm;
mod status;

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
    CheckConfig(check_config::CheckConfigArgs),
    /// Read job runs from sacct into the database (idempotent; overlapping windows are safe)
    Ingest(ingest::IngestArgs),
    /// Reports: per-team usage, borrowing, lending and cost; jobs with idle GPUs; utilisation;
    /// idle GPU-hours per user; fair-share
    Report(report::ReportArgs),
    /// Replay a period of job history under candidate configurations (as today, siloed, other
    /// teamshare.toml files) and show per team, side by side, what would change
    Replay(replay::ReplayArgs),
    /// The daemon: governor passes, sacct ingest, sample collection, capacity samples, and
    /// /metrics, until SIGTERM or SIGINT
    Run(run::RunArgs),
    /// Make Slurm's accounts match teamshare.toml with sacctmgr
    SetupSlurm(setup_slurm::SetupSlurmArgs),
    /// Keep Slurm's job priorities and team GPU limits matching the governance rules, and
    /// publish the state the plugin reads (runs until killed; --once for one pass)
    Govern(govern::GovernArgs),
    /// Each team now: quota, GPUs in use (in quota / borrowed), what it may hold, what it
    /// lends, its waiting jobs and why; live from Slurm and the governor's state
    Status(status::StatusArgs),
    /// On a GPU node: sample every GPU through NVML at an interval into the local spool
    Sample(sample::SampleArgs),
    /// On the head: store every node's spooled GPU samples in the database (idempotent)
    CollectSamples(collect_samples::CollectSamplesArgs),
    /// Man pages and shell completions, made from these definitions (for packaging)
    #[command(hide = true)]
    Generate(generate::GenerateArgs),
    /// The governor's limits helper: team limit changes read on stdin, one per line
    /// (CLUSTER<TAB>ACCOUNT<TAB>GRPTRES), made through slurmdbd's API, answered on stdout
    #[command(hide = true)]
    SlurmLimitsHelper,
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

/// Parse the command line and run its command: all that `main` does; an error returned ends
/// the program with [`exit_code_for`].
pub fn run() -> anyhow::Result<ExitCode> {
    let mut cmd = command();
    let matches = cmd.get_matches_mut();
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.format(&mut cmd).exit());
    let config_path = cli
        .config
        .clone()
        .unwrap_or_else(teamshare_config::default_path);
    match &cli.command {
        Command::Generate(args) => generate::run(args),
        Command::SlurmLimitsHelper => {
            accountd::slurm_api::serve_limits(std::io::stdin().lock(), std::io::stdout().lock())?;
            Ok(ExitCode::SUCCESS)
        }
        Command::CheckConfig(args) => check_config::run(&config_path, args),
        Command::Ingest(args) => {
            let config = load_config(&config_path)?;
            ingest::run(&config, database_path(&cli, &config), args)
        }
        Command::Report(args) => {
            let config = load_config(&config_path)?;
            report::run(&config, database_path(&cli, &config), args)
        }
        Command::Replay(args) => {
            let config = load_config(&config_path)?;
            let database = database_path(&cli, &config);
            replay::run(&config, &config_path, database, args)
        }
        Command::Status(args) => {
            let config = load_config(&config_path)?;
            status::run(&config, args)
        }
        Command::Sample(args) => sample::run(cli.config.as_deref(), &config_path, args),
        Command::CollectSamples(args) => {
            let config = load_config(&config_path)?;
            collect_samples::run(&config, database_path(&cli, &config), args)
        }
        Command::SetupSlurm(args) => {
            let config = load_config(&config_path)?;
            setup_slurm::run(&config, &config_path, args)
        }
        Command::Run(args) => {
            let config = load_config(&config_path)?;
            let database = database_path(&cli, &config);
            run::run(config, &config_path, database, args)
        }
        Command::Govern(args) => {
            let config = load_config(&config_path)?;
            let database = database_path(&cli, &config);
            govern::run(config, database, args)
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
