//! `accountd ingest`: read job runs from sacct into the database, with a progress bar on a
//! terminal.

use std::io::{IsTerminal as _, Write as _};
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use teamshare_config::Config;

use accountd::ingest;
use accountd::period;
use accountd::slurm_cli::{self, SlurmCommandError};
use accountd::store::Store;

use super::args::{time_arg, Time};
use super::ExitStatus;

#[derive(Debug, Args)]
pub(super) struct IngestArgs {
    /// Start of the window [default: the stored watermark minus 1 hour, or 30 days ago]
    #[arg(long, value_name = "TIME")]
    since: Option<Time>,
    /// End of the window [default: now]
    #[arg(long, value_name = "TIME")]
    until: Option<Time>,
}

pub(super) fn run(
    config: &Config,
    database: PathBuf,
    args: &IngestArgs,
) -> anyhow::Result<ExitCode> {
    let now = period::now();
    let since = time_arg(args.since.as_ref(), now, "--since")?;
    let until = time_arg(args.until.as_ref(), now, "--until")?;
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
