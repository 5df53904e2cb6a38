//! What `--help` and the man pages say beyond clap's definitions: each command's notes and
//! exit statuses, the environment and the files. Written once, here: the help's epilogue
//! ([`CommandDoc::after_help`]) and the man pages' sections (`super::generate`) are both made
//! from it, and [`ExitStatus`] is also what the program ends with.

use std::process::ExitCode;

use teamshare_config::AccountdSettings;

/// How accountd ends: the exit codes, defined here only.
///
/// [`ExitStatus::Invalid`] is clap's own code for a usage error it finds itself, so an unknown
/// option and an invalid `--since` end alike.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExitStatus {
    /// Success; also a command whose stdout reader went away early (`accountd report | head`).
    Success,
    /// A runtime error: I/O, sacct/sinfo/sacctmgr failure, database.
    Runtime,
    /// An invalid configuration or invalid command-line usage.
    Invalid,
    /// `accountd replay`: the simulation of the current settings does not reproduce the
    /// history (calibration failed), so the what-ifs are not printed.
    ModelMisfit,
}

impl ExitStatus {
    /// Every status, in the order of their codes (the order the help lists them in).
    pub const ALL: [ExitStatus; 4] = [
        Self::Success,
        Self::Runtime,
        Self::Invalid,
        Self::ModelMisfit,
    ];

    /// The process's exit code.
    pub const fn code(self) -> u8 {
        match self {
            Self::Success => 0,
            Self::Runtime => 1,
            Self::Invalid => 2,
            Self::ModelMisfit => 3,
        }
    }
}

impl From<ExitStatus> for ExitCode {
    fn from(status: ExitStatus) -> Self {
        ExitCode::from(status.code())
    }
}

/// What each [`ExitStatus`] means for one command: a field per status, so that no command's
/// help can leave one out. Each meaning is one line of text; the help wraps it. A status only
/// some commands end with is an `Option`: None for the others, whose help does not list it.
#[derive(Debug)]
pub struct ExitMeanings {
    pub success: &'static str,
    pub runtime: &'static str,
    pub invalid: &'static str,
    /// `accountd replay` alone.
    pub model_misfit: Option<&'static str>,
}

impl ExitMeanings {
    /// What `status` means for the command; None: the command never ends with it.
    pub fn of(&self, status: ExitStatus) -> Option<&'static str> {
        match status {
            ExitStatus::Success => Some(self.success),
            ExitStatus::Runtime => Some(self.runtime),
            ExitStatus::Invalid => Some(self.invalid),
            ExitStatus::ModelMisfit => self.model_misfit,
        }
    }
}

/// The prose and the exit statuses of one command (or of `accountd` itself).
#[derive(Debug)]
pub struct CommandDoc {
    /// Paragraphs (separated by a blank line, wrapped for a terminal) shown after the options in
    /// `--help`, and in the man page's DESCRIPTION.
    pub notes: &'static str,
    pub exits: &'static ExitMeanings,
}

/// The width the exit codes are wrapped to in `--help`, that of the notes.
const HELP_WIDTH: usize = 96;

impl CommandDoc {
    /// The `--help` epilogue: the notes, then `Exit codes:` with one entry per status.
    pub fn after_help(&self) -> String {
        let mut text = String::new();
        if !self.notes.is_empty() {
            text.push_str(self.notes);
            text.push_str("\n\n");
        }
        text.push_str("Exit codes:");
        for status in ExitStatus::ALL {
            let Some(meaning) = self.exits.of(status) else {
                continue;
            };
            text.push('\n');
            let first = format!("  {}  ", status.code());
            let rest = " ".repeat(first.len());
            text.push_str(&wrap(meaning, &first, &rest, HELP_WIDTH));
        }
        text
    }
}

/// `text` filled into lines of at most `width` characters (a longer word stands alone), the
/// first starting with `first`, the others with `rest`.
fn wrap(text: &str, first: &str, rest: &str, width: usize) -> String {
    let mut out = String::from(first);
    let mut line_len = first.chars().count();
    let mut line_empty = true;
    for word in text.split_whitespace() {
        let len = word.chars().count();
        if !line_empty && line_len + 1 + len > width {
            out.push('\n');
            out.push_str(rest);
            line_len = rest.chars().count();
            line_empty = true;
        }
        if !line_empty {
            out.push(' ');
            line_len += 1;
        }
        out.push_str(word);
        line_len += len;
        line_empty = false;
    }
    out
}

/// Most commands' exit statuses.
const COMMON_EXITS: ExitMeanings = ExitMeanings {
    success: "success (also when stdout's reader goes away early, as with `| head`)",
    runtime: "runtime error (I/O, sacct/sinfo/sacctmgr failure, database)",
    invalid: "invalid configuration or usage",
    model_misfit: None,
};

const TIMES: &str = "\
Times (--since, --until) are YYYY-MM-DD (local midnight), YYYY-MM-DDTHH:MM:SS (local time),
`now`, or `now-<duration>`/`now+<duration>` such as now-2h, now-30m, now+1h.";

/// `accountd` itself, and every command without a doc of its own.
pub const COMMON: CommandDoc = CommandDoc {
    notes: TIMES,
    exits: &COMMON_EXITS,
};

const SAMPLE: CommandDoc = CommandDoc {
    notes: "\
Samples go to SPOOL/<node>/ready/, one file per tick, written atomically; `accountd
collect-samples` on the head stores and removes them. Each GPU is keyed by its UUID and mapped to
the Slurm job holding it by its minor number (scontrol -d show job, slurmd -G); without
SLURM_CONF, or with --no-jobs, samples carry no job.",
    exits: &ExitMeanings {
        success: "success (--once)",
        runtime: "runtime error: NVML library missing or failing, spool not writable",
        invalid: COMMON_EXITS.invalid,
        model_misfit: None,
    },
};

const RUN: CommandDoc = CommandDoc {
    notes: "\
Every --govern-interval, on a thread of its own: one governor pass (as `accountd govern`). Every
[accountd] ingest_interval, on another: sacct into the database (as `accountd ingest`, with the
runaway check), the nodes' GPU samples from [accountd] sample_spool (as `accountd
collect-samples`), and the governed capacity (sinfo) into capacity_samples; a slow sacct never
delays governance. /metrics is served on [accountd] metrics_listen (127.0.0.1:9477 by default).
teamshare.toml is followed: looked at every 2 s and on SIGHUP; a valid new file is in force at
once, an invalid one is logged once and the last good one stays. A failing step is logged to
stderr (once per distinct error, with a timestamp) and tried again at its next turn; the other
steps go on. SIGTERM or SIGINT: the governor's pass under way finishes, the ingest thread's step
is waited for 5 s at most, then accountd exits; a second signal exits at once.",
    exits: &ExitMeanings {
        success: "stopped by SIGTERM/SIGINT; with --once, every step succeeded",
        runtime: "with --once, a step failed (see stderr); a runtime error before the loop \
                  started; a second SIGTERM/SIGINT while stopping; a thread of the daemon ended \
                  unexpectedly (a bug: the service manager should start it again)",
        invalid: COMMON_EXITS.invalid,
        model_misfit: None,
    },
};

const STATUS: CommandDoc = CommandDoc {
    notes: "\
Per team: QUOTA (guaranteed GPUs); IN-USE (GPUs its running jobs hold now), split into IN-QUOTA
and BORROWED (beyond its quota); MAY-HOLD (the GPU limit the governor set in its last pass:
the quota, plus the idle GPUs it may borrow now); LENT (other teams' borrowed GPUs on its idle
quota, shared among the lenders as `accountd report teams` does; (pool) lends the capacity no
quota holds); WAITING-JOBS and WAITING-GPUS, with the top reasons under the table. Where
quotas are per GPU type, each type has a line under its team's. Slurm is read as the governor
reads it (libslurm; TEAMSHARE_SLURM_READER=commands for squeue and sinfo); the governor's state
is [accountd] state_file, flagged NOT CURRENT when the plugin would not act on it (older than
[governance] state_max_age, or from another teamshare.toml).",
    exits: &ExitMeanings {
        success: "success, whatever the state's age (it is shown)",
        runtime: "runtime error: Slurm cannot be read",
        invalid: "invalid configuration or usage (--team naming no team)",
        model_misfit: None,
    },
};

const REPLAY: CommandDoc = CommandDoc {
    notes: "\
Replays a period of job history (the database's, or an SWF file's with --swf and --team-map)
under each --candidate and prints, per team and for the cluster, side by side: queue wait (mean,
p50, p95, p99, and p95 per priority class), time to start of in-quota jobs, owner reclaim
latency, GPU-hours in quota, borrowed, lent and idle, the share of the capacity allocated, cost,
preemptions and the work they lost. Candidates: as-today (the history itself), siloed (each team
capped at its quota, nothing lent), plain-slurm (one pool, first come first served, no quotas)
or a teamshare.toml; by default the --current settings simulated, as-today, siloed and the
configuration. The baseline is the first simulated candidate (by default the model of the
settings the history ran under), so that every what-if compares simulated with simulated;
as-today stands beside it as the calibration. A team worse off under another candidate (p95 wait
longer by more than max(60 s, 10 %), allocated GPU-hours down by more than 5 %, GPU-hours lost
to preemptions up by more than max(1, 10 %), more of its jobs refused) is flagged with `!` and the
reason. Percentiles are nearest-rank; a job that never
started counts its wait up to its cancellation or the period's end.

First the history is replayed under the settings it ran under (--current, default the
configuration) and compared with what happened: per team, p50 and p95 wait within
max(--tolerance-secs, --tolerance-pct) and allocated GPU-hours within 10 %. If it does not fit,
only the calibration is printed, with hints drawn from the history (held jobs, late
eligibility, drains, jobs pending at the end, runs beyond the capacity), and accountd exits 3;
--skip-calibration skips it. For a site coming from plain Slurm, --current none calibrates and
compares against the plain-slurm candidate.

Where the database holds GPU samples of the period's jobs, each job's are replayed from its
simulated start, and the baseline is also simulated with [governance] idle_first_reclaim the
other way: per team, the work each order's preemptions threw away (preempted GPU-time less what
the samples show idle) and what idle-first reclaim would have saved. Without samples (an SWF
file, a database no sampler fed) it says \"no samples\": the figure cannot be computed.

--capacity-curve K replays each simulated candidate with C - i x --curve-step GPUs (i = 1..K;
the step defaults to the trace's most common node size; quotas that no longer fit are scaled
down in proportion, or with --curve-quotas keep the point is left out and listed) and says how many GPUs the cluster could lose under each
at equal p95 wait (the baseline's, within tolerance). The candidates and the curve's points are
independent simulations, run side by side on --threads threads (default: the CPUs and one
more); the output does not depend on it. On a terminal, progress goes to stderr.
Times in the output are UTC; the same input gives the same output.",
    exits: &ExitMeanings {
        success: "success (also when stdout's reader goes away early, as with `| head`)",
        runtime: "runtime error (the history cannot be read: database, SWF file)",
        invalid: "invalid configuration (of any candidate) or usage",
        model_misfit: Some(
            "the simulation of the current settings does not reproduce the history \
             (calibration failed): the calibration is printed, the what-ifs are not",
        ),
    },
};

/// The commands whose doc is not [`COMMON`], by their names on the command line.
pub const OWN_DOCS: [(&str, &CommandDoc); 4] = [
    ("sample", &SAMPLE),
    ("run", &RUN),
    ("status", &STATUS),
    ("replay", &REPLAY),
];

/// The doc of the command clap names `name`.
pub fn of_command(name: &str) -> &'static CommandDoc {
    OWN_DOCS
        .iter()
        .find(|(n, _)| *n == name)
        .map_or(&COMMON, |(_, doc)| doc)
}

/// The environment variables accountd reads, with what each does (the man pages' ENVIRONMENT).
pub fn environment() -> Vec<(String, String)> {
    vec![
        (
            accountd::slurm_cli::SLURM_CONF_VAR.to_string(),
            format!(
                "Slurm's configuration file. {} is read from its directory unless --config is \
                 given (/etc/slurm without it); Slurm's commands (sacct, sinfo, sacctmgr, \
                 squeue, scontrol) need it.",
                teamshare_config::FILE_NAME
            ),
        ),
        (
            "SLURMD_NODENAME".to_string(),
            "accountd sample: this node's Slurm name when --node is not given (else the short \
             host name)."
                .to_string(),
        ),
        (
            accountd::governor::READER_VAR.to_string(),
            "accountd govern, run and status: how Slurm is read: libslurm (the default) or \
             commands (Slurm's client commands)."
                .to_string(),
        ),
    ]
}

/// The files accountd reads and writes, with what each is (the man pages' FILES).
pub fn files() -> Vec<(String, String)> {
    let defaults = AccountdSettings::default();
    vec![
        (
            teamshare_config::FILE_NAME.to_string(),
            "The configuration (teams, quotas, priority classes, GPU types, [accountd] settings), \
             in the directory of $SLURM_CONF (/etc/slurm without it); --config names another."
                .to_string(),
        ),
        (
            defaults.database.display().to_string(),
            "The SQLite database, unless [accountd] database or --database names another."
                .to_string(),
        ),
        (
            defaults.state_file.display().to_string(),
            "The state the governor publishes for the job_submit plugin, unless [accountd] \
             state_file names another."
                .to_string(),
        ),
        (
            defaults.sample_spool.display().to_string(),
            "The GPU samples' spool, unless [accountd] sample_spool or --spool names another: \
             accountd sample writes a node's samples under it, accountd collect-samples and run \
             store and remove them."
                .to_string(),
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_codes_are_distinct_and_invalid_is_clap_s_usage_code() {
        let codes: std::collections::BTreeSet<u8> =
            ExitStatus::ALL.iter().map(|s| s.code()).collect();
        assert_eq!(codes.len(), ExitStatus::ALL.len());
        assert_eq!(ExitStatus::Success.code(), 0);
        let clap_usage = clap::Command::new("x")
            .try_get_matches_from(["x", "--no-such-flag"])
            .unwrap_err()
            .exit_code();
        assert_eq!(i32::from(ExitStatus::Invalid.code()), clap_usage);
    }

    #[test]
    fn after_help_lists_every_status_once_in_order() {
        for doc in std::iter::once(&COMMON).chain(OWN_DOCS.iter().map(|(_, d)| *d)) {
            let text = doc.after_help();
            let (notes, exits) = text.split_once("Exit codes:\n").unwrap();
            assert_eq!(notes.trim_end(), doc.notes);
            let codes: Vec<&str> = exits
                .lines()
                .filter(|l| !l.starts_with("     "))
                .map(|l| l.split_whitespace().next().unwrap())
                .collect();
            let expected: Vec<String> = ExitStatus::ALL
                .iter()
                .filter(|s| doc.exits.of(**s).is_some())
                .map(|s| s.code().to_string())
                .collect();
            assert_eq!(codes, expected, "{text}");
            assert_eq!(&codes[..3], ["0", "1", "2"], "{text}");
            for line in exits.lines() {
                assert!(line.chars().count() <= HELP_WIDTH, "{line:?}");
            }
            // Unwrapped again, each meaning is whole.
            let joined = exits.split_whitespace().collect::<Vec<_>>().join(" ");
            for status in ExitStatus::ALL {
                let Some(meaning) = doc.exits.of(status) else {
                    continue;
                };
                assert!(joined.contains(
                    meaning
                        .split_whitespace()
                        .collect::<Vec<_>>()
                        .join(" ")
                        .as_str()
                ));
            }
        }
    }

    #[test]
    fn wrap_fills_lines_and_indents_the_rest() {
        assert_eq!(wrap("a bb ccc dd", "- ", "  ", 8), "- a bb\n  ccc dd");
        assert_eq!(wrap("abcdefghij k", "> ", "  ", 6), "> abcdefghij\n  k");
        assert_eq!(wrap("", "> ", "  ", 6), "> ");
    }
}
