//! The clap value types of the command line: what an argument parses into, so that the
//! commands receive values ready to use. A time (`--since`, `--until`) is kept as written until
//! the command resolves it against its own now (`now-2h`); an interval is parsed as it is read,
//! its mistake said by the command where it always was (after the configuration is read).

use std::time::Duration;

use anyhow::Context as _;
use clap::ValueEnum;

use accountd::period::{self, UnixSeconds};
use accountd::report::Format;
use accountd::sample;

use super::UsageError;

/// A time given on the command line (`YYYY-MM-DD`, `YYYY-MM-DDTHH:MM:SS`, `now`, `now-2h`, ...):
/// what it names depends on when the command runs, so [`time_arg`] resolves it.
#[derive(Debug, Clone)]
pub(super) struct Time(String);

impl From<String> for Time {
    fn from(text: String) -> Self {
        Time(text)
    }
}

/// The instant `time` names at `now`, local time ([`period::parse_time_arg`]); a mistake is
/// "invalid `flag`" (exit 2).
pub(super) fn time_arg(
    time: Option<&Time>,
    now: UnixSeconds,
    flag: &str,
) -> anyhow::Result<Option<UnixSeconds>> {
    time.map(|t| period::parse_time_arg(&t.0, now, &chrono::Local))
        .transpose()
        .with_context(|| format!("invalid {flag}"))
}

/// `since` to `until`, or "the period is empty" (exit 2) when `since` is not before `until`.
pub(super) fn nonempty_period(
    since: UnixSeconds,
    until: UnixSeconds,
) -> anyhow::Result<period::Period> {
    if since >= until {
        return Err(UsageError(format!(
            "the period is empty: --since ({}) must be before --until ({})",
            period::format_local(since, &chrono::Local),
            period::format_local(until, &chrono::Local)
        ))
        .into());
    }
    Ok(period::Period { since, until })
}

/// A sampling interval (`10s`, `200ms`; 10 ms to 1 h: [`sample::parse_interval`]), parsed as it
/// is read; [`Interval::get`] gives it, or its mistake.
#[derive(Debug, Clone)]
pub(super) struct Interval(Result<Duration, String>);

impl From<String> for Interval {
    fn from(text: String) -> Self {
        Interval(sample::parse_interval(&text))
    }
}

impl Interval {
    /// The interval, or a usage error naming `flag`.
    pub(super) fn get(&self, flag: &str) -> Result<Duration, UsageError> {
        self.0
            .clone()
            .map_err(|e| UsageError(format!("{flag}: {e}")))
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(super) enum ReportKind {
    /// Per team: GPU-hours allocated, in quota, borrowed, lent; jobs; quota; cost (allocated,
    /// idle share, total), with (pool) and (idle) rows
    Teams,
    /// Job runs by idle GPU-hours (NVML samples): job, user, team, GPUs, hours, mean utilisation
    Jobs,
    /// GPU utilisation and idle GPU-hours per team (NVML samples)
    Utilisation,
    /// Per user and team: allocated GPU-hours, idle and unsampled ones (NVML samples), the
    /// share idle, the most idle job runs
    Users,
    /// Per team: weight, normalised shares, decayed usage, fair-share factor
    Fairshare,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(super) enum FormatArg {
    Table,
    Csv,
    Json,
    Html,
}

impl FormatArg {
    /// The format of the text renderers; `html` is `report teams`' alone (its page has charts
    /// of the period's days and the users' idle GPU-hours besides the table: `report_html`).
    pub(super) fn text(self) -> Result<Format, UsageError> {
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

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(super) enum StatusFormat {
    Table,
    Json,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_interval_is_parsed_as_read_and_its_mistake_names_the_flag() {
        let interval = Interval::from("200ms".to_string());
        assert_eq!(
            interval.get("--interval").unwrap(),
            Duration::from_millis(200)
        );
        let short = Interval::from("5ms".to_string());
        assert_eq!(
            short.get("--job-refresh").unwrap_err().to_string(),
            "--job-refresh: interval `5ms` is shorter than 10ms"
        );
    }

    #[test]
    fn a_time_is_resolved_against_the_command_s_now() {
        let since = Time::from("now-1h".to_string());
        assert_eq!(time_arg(Some(&since), 7200, "--since").unwrap(), Some(3600));
        assert_eq!(time_arg(None, 7200, "--since").unwrap(), None);
        let bad = Time::from("last tuesday".to_string());
        let err = time_arg(Some(&bad), 7200, "--until").unwrap_err();
        assert_eq!(
            format!("{err:#}"),
            "invalid --until: `last tuesday` is not a time: expected YYYY-MM-DD, YYYY-MM-DDTHH:MM:SS, now, now-<duration> or now+<duration> (e.g. now-2h)"
        );
    }
}
