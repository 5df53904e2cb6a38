//! `accountd generate`: the man pages and the shell completions, checked against what the
//! binary's own `--help` says (the commands, their options, their exit codes), and by `man` and
//! `bash` themselves where they are installed (`bash` must be).

// Test code: a scenario reads top to bottom, so the workspace's 80-line limit is not for it.
#![allow(clippy::too_many_lines)]

use std::collections::BTreeSet;
use std::fs;
use std::path::Path;
use std::process::{Command, Output, Stdio};

const BIN: &str = env!("CARGO_BIN_EXE_accountd");

fn accountd(args: &[&str]) -> Output {
    let o = Command::new(BIN)
        .args(args)
        .env_remove("SLURM_CONF")
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "accountd {args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    o
}

fn stdout(o: &Output) -> String {
    String::from_utf8(o.stdout.clone()).unwrap()
}

/// The lines of the `--help` section `heading`: the indented ones up to the next line that is
/// not (a heading, or the notes after the options); blank lines out.
fn help_section<'a>(help: &'a str, heading: &str) -> Vec<&'a str> {
    help.lines()
        .skip_while(|l| *l != heading)
        .skip(1)
        .take_while(|l| l.is_empty() || l.starts_with(' '))
        .filter(|l| !l.is_empty())
        .collect()
}

/// How far a line of `--help` is indented.
fn indent(line: &str) -> usize {
    line.len() - line.trim_start().len()
}

/// The commands `accountd --help` lists, without clap's `help`.
fn commands() -> Vec<String> {
    let help = stdout(&accountd(&["--help"]));
    let names: Vec<String> = help_section(&help, "Commands:")
        .iter()
        .filter(|l| indent(l) == 2)
        .map(|l| l.split_whitespace().next().unwrap().to_string())
        .filter(|n| n != "help")
        .collect();
    // The parsing found the commands (not an empty list that every check would pass).
    for known in ["check-config", "report", "run", "sample", "collect-samples"] {
        assert!(names.iter().any(|n| n == known), "{known} in {names:?}");
    }
    names
}

/// What `accountd ARGS --help` says: its option names (`--since`, `-h`), its positional
/// arguments (`KIND`), and its exit codes with their meanings (wrapped lines joined).
struct Help {
    options: Vec<String>,
    positionals: Vec<String>,
    exits: Vec<(String, String)>,
}

fn help_of(args: &[&str]) -> Help {
    let mut full = args.to_vec();
    full.push("--help");
    let help = stdout(&accountd(&full));
    let mut options = Vec::new();
    for line in help_section(&help, "Options:") {
        // Options are indented 2 (-h, --help) or 6 (--since); their help more.
        let names = line.trim_start();
        if indent(line) > 6 || !names.starts_with('-') {
            continue;
        }
        for word in names.split_whitespace() {
            let word = word.trim_end_matches(',');
            if !word.starts_with('-') {
                break;
            }
            options.push(word.to_string());
        }
    }
    let positionals = help_section(&help, "Arguments:")
        .iter()
        .filter(|l| indent(l) == 2)
        .filter_map(|l| l.split_whitespace().next())
        .filter(|w| w.starts_with('['))
        .map(|w| w.trim_matches(['[', ']', '.']).to_string())
        .collect();
    let mut exits: Vec<(String, String)> = Vec::new();
    for line in help_section(&help, "Exit codes:") {
        let mut words = line.split_whitespace();
        if indent(line) > 2 {
            let (_, meaning) = exits.last_mut().expect("a code before its continuation");
            for w in words {
                meaning.push(' ');
                meaning.push_str(w);
            }
        } else {
            let code = words.next().unwrap().to_string();
            exits.push((code, words.collect::<Vec<_>>().join(" ")));
        }
    }
    assert!(options.contains(&"--help".to_string()), "{help}");
    assert!(!exits.is_empty(), "{help}");
    Help {
        options,
        positionals,
        exits,
    }
}

/// roff made readable: escapes and font changes out.
fn unroff(text: &str) -> String {
    text.replace("\\-", "-")
        .replace("\\*(Aq", "'")
        .replace("\\fB", "")
        .replace("\\fI", "")
        .replace("\\fR", "")
}

/// The lines of a page's section `heading` (the `.SH` argument as written), up to the next.
fn roff_section<'a>(page: &'a str, heading: &str) -> Vec<&'a str> {
    let start = format!(".SH {heading}");
    let lines: Vec<&str> = page
        .lines()
        .skip_while(|l| *l != start)
        .skip(1)
        .take_while(|l| !l.starts_with(".SH "))
        .collect();
    assert!(!lines.is_empty(), "no {start} in\n{page}");
    lines
}

/// `.TP`, the term, the text under it: a section's (term, text) entries.
fn tagged(lines: &[&str]) -> Vec<(String, String)> {
    let mut entries = Vec::new();
    let mut lines = lines.iter();
    while let Some(line) = lines.next() {
        if *line == ".TP" {
            let term = unroff(lines.next().unwrap());
            let text = unroff(lines.next().unwrap());
            entries.push((term, text));
        }
    }
    entries
}

/// The words of a text, cut at what cannot be in an option's name.
fn words(text: &str) -> BTreeSet<String> {
    text.split(|c: char| !(c.is_alphanumeric() || c == '-' || c == '_'))
        .filter(|w| !w.is_empty())
        .map(str::to_string)
        .collect()
}

/// The page as `man -l` shows it: `None` without man. Warnings from the formatter fail.
fn man(page: &Path) -> Option<String> {
    let available = Command::new("sh")
        .args(["-c", "command -v man"])
        .stdout(Stdio::null())
        .status()
        .unwrap()
        .success();
    if !available {
        return None;
    }
    let o = Command::new("man")
        .arg("--warnings")
        .arg("-l")
        .arg(page)
        .env("MANWIDTH", "200")
        .env("MANPAGER", "cat")
        .env("PAGER", "cat")
        .env("LC_ALL", "C.UTF-8")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "man -l {}: {stderr}", page.display());
    assert!(
        stderr.trim().is_empty(),
        "man -l {}: {stderr}",
        page.display()
    );
    let text = String::from_utf8_lossy(&o.stdout).into_owned();
    // Words hyphenated at line ends joined again, then one space between words.
    let text = text
        .split("\u{2010}\n")
        .map(str::trim_start)
        .collect::<String>();
    Some(text.split_whitespace().collect::<Vec<_>>().join(" "))
}

#[test]
fn man_pages_one_per_command_with_its_options_and_exit_status() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("man1");
    let o = accountd(&["generate", "man", out.to_str().unwrap()]);

    let commands = commands();
    assert!(!commands.iter().any(|c| c == "generate"), "{commands:?}");
    let mut expected: BTreeSet<String> =
        commands.iter().map(|c| format!("accountd-{c}.1")).collect();
    expected.insert("accountd.1".to_string());
    let written: BTreeSet<String> = fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(written, expected);
    // It says what it wrote.
    let said: BTreeSet<String> = stdout(&o)
        .lines()
        .map(|l| {
            Path::new(l)
                .file_name()
                .unwrap()
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    assert_eq!(said, expected);

    let mut man_checked = 0;
    let pages = std::iter::once(None).chain(commands.iter().map(Some));
    for command in pages {
        let (name, args) = match command {
            None => ("accountd".to_string(), vec![]),
            Some(c) => (format!("accountd-{c}"), vec![c.as_str()]),
        };
        let path = out.join(format!("{name}.1"));
        let page = fs::read_to_string(&path).unwrap();
        let help = help_of(&args);

        let th = page.lines().find(|l| l.starts_with(".TH ")).unwrap();
        assert!(
            th.starts_with(&format!(".TH {} 1 ", name.to_uppercase())),
            "{th}"
        );
        let name_line = roff_section(&page, "NAME").join(" ");
        assert!(
            unroff(&name_line).starts_with(&format!("{name} - ")),
            "{name_line}"
        );
        let synopsis = unroff(&roff_section(&page, "SYNOPSIS").join(" "));
        assert!(
            synopsis.starts_with(&name.replacen('-', " ", 1)),
            "{synopsis}"
        );

        // Every option and argument the help shows, under OPTIONS, and in the synopsis.
        let options = roff_section(&page, "OPTIONS");
        let option_words = words(&unroff(&options.join("\n")));
        let synopsis_words = words(&synopsis);
        for option in help.options.iter().chain(&help.positionals) {
            assert!(option_words.contains(option), "{name}: {option} in OPTIONS");
            assert!(
                synopsis_words.contains(option),
                "{name}: {option} in SYNOPSIS"
            );
        }

        // EXIT STATUS: the help's codes and meanings, the same and in the same order.
        let exits = tagged(&roff_section(&page, "\"EXIT STATUS\""));
        assert_eq!(exits, help.exits, "{name}");
        let codes: Vec<&str> = exits.iter().map(|(c, _)| c.as_str()).collect();
        // `replay` alone also ends with 3: its model does not fit the history.
        if name == "accountd-replay" {
            assert_eq!(codes, ["0", "1", "2", "3"], "{name}");
        } else {
            assert_eq!(codes, ["0", "1", "2"], "{name}");
        }

        let environment: Vec<String> = tagged(&roff_section(&page, "ENVIRONMENT"))
            .into_iter()
            .map(|(term, _)| term)
            .collect();
        assert!(environment.contains(&"SLURM_CONF".to_string()), "{name}");
        let files = tagged(&roff_section(&page, "FILES"));
        assert!(
            files
                .iter()
                .any(|(f, text)| f == "teamshare.toml" && text.contains("$SLURM_CONF")),
            "{files:?}"
        );

        let subcommands = page.lines().any(|l| l == ".SH SUBCOMMANDS");
        assert_eq!(subcommands, command.is_none(), "{name}");
        if command.is_none() {
            let listed = unroff(&roff_section(&page, "SUBCOMMANDS").join("\n"));
            for c in &commands {
                assert!(listed.contains(&format!("accountd-{c}(1)")), "{c}");
            }
            assert!(!listed.contains("generate"), "{listed}");
        }

        // As man shows it, where man is.
        if let Some(shown) = man(&path) {
            man_checked += 1;
            assert!(
                shown.starts_with(&format!("{}(1)", name.to_uppercase())),
                "{shown}"
            );
            for heading in ["NAME", "SYNOPSIS", "DESCRIPTION", "OPTIONS", "EXIT STATUS"] {
                assert!(shown.contains(&format!(" {heading} ")), "{name}: {heading}");
            }
            let shown_words = words(&shown);
            for option in help.options.iter().chain(&help.positionals) {
                assert!(shown_words.contains(option), "{name}: {option} shown");
            }
            for (code, meaning) in &help.exits {
                assert!(
                    shown.contains(&format!("{code} {meaning}")),
                    "{name}: exit {code} {meaning} in\n{shown}"
                );
            }
        }
    }
    if man_checked == 0 {
        eprintln!("man is not installed: the pages were checked as roff only");
    } else {
        assert_eq!(man_checked, commands.len() + 1);
    }
}

#[test]
fn bash_completion_completes_every_command_and_bash_accepts_it() {
    let dir = tempfile::tempdir().unwrap();
    let script = stdout(&accountd(&["generate", "completions", "bash"]));
    let commands = commands();
    let script_words = words(&script);
    for c in &commands {
        assert!(script_words.contains(c), "{c} in the bash completion");
    }
    assert!(
        !script_words.contains("generate"),
        "the hidden command is not completed"
    );
    let path = dir.path().join("accountd.bash");
    fs::write(&path, &script).unwrap();

    let o = Command::new("bash").arg("-n").arg(&path).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));

    // Loaded into bash, it completes: the function `complete` registered, called as bash would.
    let complete = |line: &str| -> Vec<String> {
        let o = Command::new("bash")
            .arg("-c")
            .arg(
                r#"source "$1" || exit 9
spec=$(complete -p accountd) || exit 8
fn=$(printf '%s\n' "$spec" | sed -n 's/.*-F \([^ ]*\) .*/\1/p')
read -r -a COMP_WORDS <<< "$2"
[ "${2: -1}" = " " ] && COMP_WORDS+=("")
COMP_CWORD=$(( ${#COMP_WORDS[@]} - 1 ))
COMP_LINE="$2"; COMP_POINT=${#COMP_LINE}
"$fn" accountd "${COMP_WORDS[COMP_CWORD]}" "${COMP_WORDS[COMP_CWORD-1]}"
printf '%s\n' "${COMPREPLY[@]}""#,
            )
            .arg("bash")
            .arg(&path)
            .arg(line)
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "{line:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        stdout(&o)
            .lines()
            .filter(|l| !l.is_empty())
            .map(str::to_string)
            .collect()
    };
    let all = complete("accountd ");
    for c in &commands {
        assert!(all.contains(c), "{c} in {all:?}");
    }
    assert!(!all.iter().any(|c| c == "generate"), "{all:?}");
    assert_eq!(complete("accountd rep"), ["report", "replay"]);
    assert_eq!(complete("accountd repo"), ["report"]);
    let by = complete("accountd report --by");
    assert_eq!(by, ["--by-day", "--by-type"]);
}

#[test]
fn zsh_and_fish_completions_name_every_command() {
    let commands = commands();
    for shell in ["zsh", "fish"] {
        let script = stdout(&accountd(&["generate", "completions", shell]));
        let script_words = words(&script);
        for c in &commands {
            assert!(script_words.contains(c), "{c} in the {shell} completion");
        }
        let installed = Command::new("sh")
            .args(["-c", &format!("command -v {shell}")])
            .stdout(Stdio::null())
            .status()
            .unwrap()
            .success();
        if installed {
            let o = Command::new(shell)
                .arg("-n")
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .and_then(|mut child| {
                    use std::io::Write as _;
                    child.stdin.take().unwrap().write_all(script.as_bytes())?;
                    child.wait_with_output()
                })
                .unwrap();
            assert!(
                o.status.success(),
                "{shell} -n: {}",
                String::from_utf8_lossy(&o.stderr)
            );
        }
    }
}

#[test]
fn generate_is_hidden_and_checks_its_arguments() {
    let help = stdout(&accountd(&["--help"]));
    assert!(!help.contains("generate"), "{help}");
    let o = Command::new(BIN)
        .args(["generate", "completions", "tcsh"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    // A directory that cannot be made: a runtime error, said.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("a-file");
    fs::write(&file, "").unwrap();
    let o = Command::new(BIN)
        .args(["generate", "man"])
        .arg(file.join("man1"))
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("cannot write the man pages"));
}
