//! `accountd generate`: the man pages and the shell completions, made from the clap definitions
//! and [`docs`] (hidden from `--help`: it is for packagers).
//!
//! The man pages are clap_mangen's sections (NAME, SYNOPSIS, DESCRIPTION, OPTIONS, SUBCOMMANDS)
//! followed by the notes, EXIT STATUS, ENVIRONMENT and FILES of [`docs`], SEE ALSO and VERSION;
//! the completions are clap_complete's, for the commands `--help` shows.

use std::io::{self, Write as _};
use std::path::{Path, PathBuf};

use anyhow::Context as _;
use clap::{Args, Command, Subcommand};
use clap_complete::Shell;
use clap_mangen::roff::{bold, italic, roman, Roff};
use clap_mangen::Man;

use super::docs::{self, CommandDoc, ExitStatus};
use super::{print, Stdout};

/// The program's name: that of its man page and the command its completions complete.
pub const BIN: &str = "accountd";

/// The man pages' section: user commands.
const SECTION: &str = "1";

/// Writes `accountd.1` and one page per command shown by `--help` (`accountd-report.1`, ...)
/// into `dir`, created if missing; returns the pages' paths, `accountd.1` first.
pub fn man_pages(cmd: Command, dir: &Path) -> io::Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir)?;
    // Built, every subcommand knows its display name (accountd-report) and its global options.
    let mut top = cmd.disable_help_subcommand(true);
    top.build();
    let subs: Vec<Command> = top
        .get_subcommands()
        .filter(|s| !s.is_hide_set())
        .cloned()
        .collect();
    let mut pages = vec![(top.clone(), &docs::COMMON)];
    pages.extend(
        subs.iter()
            .map(|s| (s.clone(), docs::of_command(s.get_name()))),
    );

    let top_page = format!("{BIN}({SECTION})");
    let mut written = Vec::new();
    for (page, doc) in pages {
        let has_subcommands = page.get_subcommands().any(|s| !s.is_hide_set());
        let see_also = if page.get_name() == top.get_name() {
            Vec::new()
        } else {
            vec![top_page.clone()]
        };
        // Titles in capitals, as man pages have them; the file keeps the command's name.
        let title = page
            .get_display_name()
            .unwrap_or_else(|| page.get_name())
            .to_uppercase();
        let man = Man::new(page)
            .title(title)
            .section(SECTION)
            .manual("teamshare")
            .source(format!("{BIN} {}", env!("CARGO_PKG_VERSION")));
        let path = dir.join(man.get_filename());
        let mut file = std::fs::File::create(&path)?;
        file.write_all(&man_page(&man, doc, has_subcommands, &see_also)?)?;
        file.sync_all()?;
        written.push(path);
    }
    Ok(written)
}

/// One page's roff: clap_mangen's sections and [`docs`]'s, in the usual order of a man page.
fn man_page(
    man: &Man,
    doc: &CommandDoc,
    has_subcommands: bool,
    see_also: &[String],
) -> io::Result<Vec<u8>> {
    /// A section as clap_mangen renders it.
    fn clap_section(
        man: &Man,
        render: fn(&Man, &mut dyn io::Write) -> io::Result<()>,
    ) -> io::Result<Vec<u8>> {
        let mut buf = Vec::new();
        render(man, &mut buf)?;
        Ok(buf)
    }
    let mut parts: Vec<Vec<u8>> = vec![
        clap_section(man, Man::render_title)?,
        // No hyphenation: an option named in the prose (--config) stays whole.
        Roff::new().control("nh", []).render().into_bytes(),
        clap_section(man, Man::render_name_section)?,
        clap_section(man, Man::render_synopsis_section)?,
        clap_section(man, Man::render_description_section)?,
        notes(doc.notes).render().into_bytes(),
        // clap_mangen writes no OPTIONS heading without options, but always a SUBCOMMANDS one.
        clap_section(man, Man::render_options_section)?,
    ];
    if has_subcommands {
        parts.push(clap_section(man, Man::render_subcommands_section)?);
    }
    parts.push(exit_status(doc).render().into_bytes());
    parts.push(
        definitions("ENVIRONMENT", &docs::environment(), bold)
            .render()
            .into_bytes(),
    );
    parts.push(
        definitions("FILES", &docs::files(), italic)
            .render()
            .into_bytes(),
    );
    if !see_also.is_empty() {
        let mut roff = Roff::new();
        roff.control("SH", ["SEE ALSO"]);
        roff.text([roman(see_also.join(", "))]);
        parts.push(roff.render().into_bytes());
    }
    // clap_mangen's VERSION is only for commands with a version of their own (accountd's).
    let mut version = Roff::new();
    version.control("SH", ["VERSION"]);
    version.text([roman(format!("{BIN} {}", env!("CARGO_PKG_VERSION")))]);
    parts.push(version.render().into_bytes());

    // Each part starts with roff's preamble (the apostrophe string): keep the first one only.
    let preamble = Roff::new().render();
    let mut page = Vec::new();
    for (i, part) in parts.iter().enumerate() {
        let part = match part.strip_prefix(preamble.as_bytes()) {
            Some(rest) if i > 0 => rest,
            _ => part.as_slice(),
        };
        page.extend_from_slice(part);
    }
    Ok(page)
}

/// The command's notes, paragraph by paragraph, continuing its DESCRIPTION.
fn notes(text: &str) -> Roff {
    let mut roff = Roff::new();
    for paragraph in text.split("\n\n").filter(|p| !p.trim().is_empty()) {
        roff.control("PP", []);
        let joined: Vec<&str> = paragraph.split_whitespace().collect();
        roff.text([roman(joined.join(" "))]);
    }
    roff
}

/// EXIT STATUS: each code in bold, what it means for this command under it.
fn exit_status(doc: &CommandDoc) -> Roff {
    let mut roff = Roff::new();
    roff.control("SH", ["EXIT STATUS"]);
    for status in ExitStatus::ALL {
        let Some(meaning) = doc.exits.of(status) else {
            continue;
        };
        roff.control("TP", []);
        roff.text([bold(status.code().to_string())]);
        roff.text([roman(meaning)]);
    }
    roff
}

/// A section of terms, each in `style`, with what it is under it.
fn definitions(
    heading: &str,
    entries: &[(String, String)],
    style: fn(String) -> clap_mangen::roff::Inline,
) -> Roff {
    let mut roff = Roff::new();
    roff.control("SH", [heading]);
    for (term, meaning) in entries {
        roff.control("TP", []);
        roff.text([style(term.clone())]);
        roff.text([roman(meaning.as_str())]);
    }
    roff
}

/// The completion script of `shell` for the commands `--help` shows.
pub fn completions(cmd: &Command, shell: Shell) -> Vec<u8> {
    // clap_complete completes hidden subcommands too; `generate` stays out of them.
    let mut shown = Command::new(BIN)
        .version(env!("CARGO_PKG_VERSION"))
        .about(cmd.get_about().cloned().unwrap_or_default())
        .args(cmd.get_arguments().cloned())
        .subcommands(cmd.get_subcommands().filter(|s| !s.is_hide_set()).cloned());
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut shown, BIN, &mut script);
    script
}

#[derive(Debug, Args)]
pub(super) struct GenerateArgs {
    #[command(subcommand)]
    what: Generated,
}

#[derive(Debug, Subcommand)]
pub(super) enum Generated {
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
        shell: Shell,
    },
}

pub(super) fn run(args: &GenerateArgs) -> anyhow::Result<std::process::ExitCode> {
    match &args.what {
        Generated::Man { dir } => {
            let pages = man_pages(super::command(), dir)
                .with_context(|| format!("cannot write the man pages into {}", dir.display()))?;
            let mut out = Stdout::new();
            for page in pages {
                out.line(&page.display().to_string())?;
            }
            Ok(ExitStatus::Success.into())
        }
        Generated::Completions { shell } => {
            let script = completions(&super::command(), *shell);
            print(&String::from_utf8_lossy(&script))
        }
    }
}
