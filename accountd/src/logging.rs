//! The daemon's log: `tracing` events, written by one subscriber as lines on stderr, one line
//! per event:
//!
//! ```text
//! 2024-05-01T00:00:00Z ERROR accountd run: ingest failed: sacct: exit 1
//! 2024-05-01T00:00:07Z  INFO accountd run: job 12 displaced by a higher class of its team job=12 team=vision kind=displaced pass{pass=8}:act{pass=7}
//! 2024-05-01T00:00:07Z DEBUG accountd run: plan: team vision GPU limit 4 -> 6: its quota, or what it runs when more (4), plus 2 GPUs it may borrow team=vision from=4 to=6 quota=4 running_gpus=3 pass{pass=9}
//! ```
//!
//! Each line is the RFC 3339 UTC time to the second, the level, where the line comes from
//! ([`RUN`] or [`SAMPLE`]) and a colon, then the text, which is what an administrator (and the
//! live tests) grep for. After the text come the event's fields, `name=value` separated by
//! spaces (the job, its team, a count, a duration in `_ms`), then the spans it happened in,
//! outermost first, each as `name{fields}`, joined by `:`: `pass{pass=8}` is the governor's
//! eighth pass since the start (its reading, plan, publication and what the daemon logs of
//! it), `act{pass=7}` the actions on the plan of pass 7 (on a thread of their own; what they
//! did is logged by the first pass after they end, inside that pass's span). A line without
//! fields or spans is the text alone, as before fields existed. The formatter ([`Line`]) keeps
//! every event on one line: a line break in a field's value is written `\n`.
//!
//! A service manager (journald) keeps stderr; `ACCOUNTD_LOG` sets the least level written
//! (`error`, `warn`, `info`, the default, `debug`, `trace`). `debug` adds, for each pass, the
//! plan's decisions with their reasons (the jobs to requeue, hold, park or release and why,
//! the order of the borrowed jobs Slurm may preempt, each team limit the plan moves), how
//! long the pass took to read, plan and publish, and what the actions on each plan took; at
//! `info`, the lines are those said before fields and spans existed, with them appended.
//!
//! [`Once`] keeps the daemon's rule that a failing step or a repeated warning is said once, not
//! at every turn: the rule lives here, the writing is the subscriber's.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::Mutex;

use tracing::{Event, Level, Subscriber};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::time::FormatTime;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields, FormattedFields};
use tracing_subscriber::registry::LookupSpan;

use crate::period;

/// Where a line comes from: the daemon and the GPU sampler.
pub const RUN: &str = "accountd run";
pub const SAMPLE: &str = "accountd sample";

/// The environment variable naming the least level written.
pub const LEVEL_VAR: &str = "ACCOUNTD_LOG";

/// RFC 3339 UTC to the second, as every instant accountd prints.
#[derive(Debug, Clone, Copy, Default)]
pub struct Rfc3339Utc;

impl FormatTime for Rfc3339Utc {
    fn format_time(&self, w: &mut Writer<'_>) -> std::fmt::Result {
        w.write_str(&period::format_rfc3339(period::now()))
    }
}

/// A duration in milliseconds, to a tenth: the value of a field named `..._ms`.
pub fn ms(d: std::time::Duration) -> f64 {
    (d.as_secs_f64() * 10_000.0).round() / 10.0
}

/// The least level `ACCOUNTD_LOG` asks for (`info` when unset).
pub fn level_from_env() -> Result<Level, String> {
    match std::env::var(LEVEL_VAR) {
        Err(std::env::VarError::NotPresent) => Ok(Level::INFO),
        Ok(v) => v
            .trim()
            .parse::<Level>()
            .map_err(|_| format!("{LEVEL_VAR}={v:?}: expected error, warn, info, debug or trace")),
        Err(e) => Err(format!("{LEVEL_VAR}: {e}")),
    }
}

/// A subscriber writing to `writer` at `level` and above, in the format above. Lines are
/// written whole; a failed write (stderr closed) is dropped, never a panic.
pub fn subscriber<W>(level: Level, writer: W) -> impl tracing::Subscriber + Send + Sync
where
    W: for<'w> tracing_subscriber::fmt::MakeWriter<'w> + Send + Sync + 'static,
{
    tracing_subscriber::fmt()
        .with_writer(writer)
        .with_ansi(false)
        .with_max_level(level)
        // Before the format is replaced: the setting is kept, and only the default format's
        // builder offers it.
        .log_internal_errors(false)
        .event_format(Line)
        .finish()
}

/// The line of one event (see the module's documentation): time, level, target, text, fields,
/// spans. tracing's own full format writes the spans before the target, which would move the
/// text away from where every reader of the log finds it.
#[derive(Debug, Clone, Copy, Default)]
pub struct Line;

impl<S, N> FormatEvent<S, N> for Line
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> std::fmt::Result {
        let meta = event.metadata();
        // The text and fields, then the spans, gathered first so that a line break in a value
        // cannot split the event.
        let mut rest = String::new();
        ctx.format_fields(Writer::new(&mut rest), event)?;
        if let Some(scope) = ctx.event_scope() {
            let mut separator = ' ';
            for span in scope.from_root() {
                rest.push(separator);
                separator = ':';
                rest.push_str(span.metadata().name());
                if let Some(fields) = span.extensions().get::<FormattedFields<N>>() {
                    if !fields.is_empty() {
                        rest.push('{');
                        rest.push_str(fields);
                        rest.push('}');
                    }
                }
            }
        }
        Rfc3339Utc.format_time(&mut writer)?;
        if rest.contains(['\r', '\n']) {
            rest = rest.replace('\r', "\\r").replace('\n', "\\n");
        }
        writeln!(
            writer,
            " {} {}: {rest}",
            level_name(*meta.level()),
            meta.target()
        )
    }
}

/// The level as tracing's own format writes it: five characters, right-aligned.
fn level_name(level: Level) -> &'static str {
    match level {
        Level::ERROR => "ERROR",
        Level::WARN => " WARN",
        Level::INFO => " INFO",
        Level::DEBUG => "DEBUG",
        Level::TRACE => "TRACE",
    }
}

/// The process's subscriber, on stderr (once, from `main`'s commands that log).
pub fn init() -> Result<(), String> {
    let level = level_from_env()?;
    tracing::subscriber::set_global_default(subscriber(level, std::io::stderr))
        .map_err(|e| format!("cannot set up the log: {e}"))
}

/// An event of `level` from `target` ([`RUN`] or [`SAMPLE`]), one per line of `text`.
pub fn event(target: &'static str, level: Level, text: &str) {
    for line in text.lines() {
        // tracing's macros want the target and level as constants.
        match (target, level) {
            (SAMPLE, Level::ERROR) => tracing::error!(target: SAMPLE, "{line}"),
            (SAMPLE, Level::WARN) => tracing::warn!(target: SAMPLE, "{line}"),
            (SAMPLE, _) => tracing::info!(target: SAMPLE, "{line}"),
            (_, Level::ERROR) => tracing::error!(target: RUN, "{line}"),
            (_, Level::WARN) => tracing::warn!(target: RUN, "{line}"),
            (_, _) => tracing::info!(target: RUN, "{line}"),
        }
    }
}

/// How many distinct warnings [`Once::warn_once`] remembers (the oldest is forgotten, and said
/// again if it comes back).
pub const WARNINGS_REMEMBERED: usize = 10_000;

/// Said once: a failing step until it succeeds again or fails otherwise, a warning once per
/// distinct text. Events go to the subscriber that was current where the `Once` was made (so
/// the daemon's threads write where its caller does).
pub struct Once {
    target: &'static str,
    dispatch: tracing::Dispatch,
    state: Mutex<OnceState>,
}

#[derive(Default)]
struct OnceState {
    failing: BTreeMap<&'static str, String>,
    warned: BTreeSet<String>,
    warned_order: VecDeque<String>,
}

impl Once {
    pub fn new(target: &'static str) -> Once {
        Once {
            target,
            dispatch: tracing::dispatcher::get_default(Clone::clone),
            state: Mutex::new(OnceState::default()),
        }
    }

    /// Make the subscriber this log writes to the current thread's default until the guard is
    /// dropped: a thread of the daemon's that calls it writes its events (and spans) where
    /// this log does, as the daemon's caller asked.
    pub fn set_default(&self) -> tracing::dispatcher::DefaultGuard {
        tracing::dispatcher::set_default(&self.dispatch)
    }

    fn say(&self, level: Level, text: &str) {
        tracing::dispatcher::with_default(&self.dispatch, || event(self.target, level, text));
    }

    fn state(&self) -> std::sync::MutexGuard<'_, OnceState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn info(&self, text: &str) {
        self.say(Level::INFO, text);
    }

    /// A step failed with `error`: said when it was not already failing with that error.
    /// Errors that differ only in their numbers (a time window, a duration, an age) are the
    /// same error: a failure repeated every round with a new window is said once until its
    /// words change or it clears (issue 25, finding 17).
    pub fn failed(&self, step: &'static str, error: &str) {
        let shape = numbers_hidden(error);
        let new = self.state().failing.insert(step, shape.clone()) != Some(shape);
        if new {
            self.say(Level::ERROR, &format!("{step} failed: {error}"));
        }
    }

    /// A step succeeded: said when it was failing.
    pub fn succeeded(&self, step: &'static str) {
        if self.state().failing.remove(step).is_some() {
            self.say(Level::INFO, &format!("{step} succeeds again"));
        }
    }

    /// Said once per distinct text.
    pub fn warn_once(&self, text: &str) {
        {
            let mut s = self.state();
            if !s.warned.insert(text.to_string()) {
                return;
            }
            s.warned_order.push_back(text.to_string());
            if s.warned_order.len() > WARNINGS_REMEMBERED {
                if let Some(old) = s.warned_order.pop_front() {
                    s.warned.remove(&old);
                }
            }
        }
        self.say(Level::WARN, &format!("warning: {text}"));
    }
}

#[cfg(test)]
pub(crate) mod capture {
    //! A subscriber writing into memory, for tests of what is logged.
    use std::io::Write;
    use std::sync::{Arc, Mutex};

    #[derive(Clone, Default)]
    pub struct Lines(pub Arc<Mutex<Vec<u8>>>);

    impl Write for Lines {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl Lines {
        pub fn lines(&self) -> Vec<String> {
            String::from_utf8_lossy(&self.0.lock().unwrap())
                .lines()
                .map(str::to_string)
                .collect()
        }
    }

    /// A dispatcher writing into the returned buffer, every level.
    pub fn dispatch() -> (tracing::Dispatch, Lines) {
        dispatch_at(tracing::Level::TRACE)
    }

    /// A dispatcher writing into the returned buffer, `level` and above.
    pub fn dispatch_at(level: tracing::Level) -> (tracing::Dispatch, Lines) {
        let lines = Lines::default();
        let writer = lines.clone();
        let sub = super::subscriber(level, move || writer.clone());
        (tracing::Dispatch::new(sub), lines)
    }

    /// The text of each line after its target (`accountd run: `): the text, its fields, its
    /// spans.
    pub fn said(lines: &Lines, target: &str) -> Vec<String> {
        let marker = format!(" {target}: ");
        lines
            .lines()
            .iter()
            .map(|l| {
                l.split_once(&marker)
                    .map_or(l.clone(), |(_, s)| s.to_string())
            })
            .collect()
    }
}

/// `text` with each run of digits as `#`: what stays the same when a failure repeats.
fn numbers_hidden(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut in_digits = false;
    for c in text.chars() {
        if c.is_ascii_digit() {
            if !in_digits {
                out.push('#');
            }
            in_digits = true;
        } else {
            in_digits = false;
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 25, finding 17: the ingest error carried its changing time window and was logged
    /// every round during a slurmdbd outage. Said once until its words change or it clears.
    #[test]
    fn issue25_17_a_failure_repeated_with_new_numbers_is_said_once() {
        let (dispatch, lines) = capture::dispatch();
        let once = tracing::dispatcher::with_default(&dispatch, || Once::new(RUN));
        for (since, until) in [(100, 160), (160, 220), (1000, 10060)] {
            once.failed(
                "ingest",
                &format!("sacct -S {since} -E {until} failed: Connection refused"),
            );
        }
        assert_eq!(lines.lines().len(), 1, "{:?}", lines.lines());
        once.failed("ingest", "sacct -S 1 -E 2 failed: timed out after 60 s");
        assert_eq!(lines.lines().len(), 2, "{:?}", lines.lines());
        once.succeeded("ingest");
        once.failed("ingest", "sacct -S 1 -E 2 failed: timed out after 60 s");
        assert_eq!(lines.lines().len(), 4, "{:?}", lines.lines());
    }

    #[test]
    fn lines_have_a_timestamp_a_level_and_their_origin() {
        let (dispatch, lines) = capture::dispatch();
        tracing::dispatcher::with_default(&dispatch, || {
            event(SAMPLE, Level::WARN, "gpu 0 lost\nsecond line");
            event(RUN, Level::ERROR, "ingest failed: x");
        });
        let lines = lines.lines();
        assert_eq!(lines.len(), 3, "{lines:?}");
        let (ts, rest) = lines[0].split_once(' ').unwrap();
        assert!(ts.ends_with('Z') && ts.len() == 20, "{ts}");
        assert_eq!(rest.trim_start(), "WARN accountd sample: gpu 0 lost");
        assert!(lines[1].ends_with("WARN accountd sample: second line"));
        assert!(lines[2].ends_with("ERROR accountd run: ingest failed: x"));
    }

    /// The shape documented above: the text where it always was, then the fields, then the
    /// spans, on one line, whatever the values hold.
    #[test]
    fn fields_and_spans_follow_the_text_on_the_same_line() {
        let (dispatch, lines) = capture::dispatch();
        tracing::dispatcher::with_default(&dispatch, || {
            let pass = tracing::info_span!(target: RUN, "pass", pass = 8u64);
            let _pass = pass.enter();
            let act = tracing::info_span!(target: RUN, "act", pass = 7u64);
            act.in_scope(|| {
                tracing::info!(target: RUN, job = 12u64, team = %"vision", "job 12 displaced");
            });
            tracing::warn!(target: RUN, why = %"two\nlines", "odd");
            tracing::info!(target: SAMPLE, "no fields");
        });
        let lines = lines.lines();
        assert_eq!(lines.len(), 3, "{lines:?}");
        let (ts, rest) = lines[0].split_once(' ').unwrap();
        assert!(ts.ends_with('Z') && ts.len() == 20, "{ts}");
        assert_eq!(
            rest,
            " INFO accountd run: job 12 displaced job=12 team=vision pass{pass=8}:act{pass=7}"
        );
        assert!(
            lines[1].ends_with(" WARN accountd run: odd why=two\\nlines pass{pass=8}"),
            "{lines:?}"
        );
        assert!(lines[2].ends_with(" INFO accountd sample: no fields pass{pass=8}"));
    }

    /// A step's failure said by [`Once`] inside a pass shows the pass, as any event there.
    #[test]
    fn once_says_its_lines_inside_the_current_span() {
        let (dispatch, lines) = capture::dispatch();
        tracing::dispatcher::with_default(&dispatch, || {
            let once = Once::new(RUN);
            tracing::info_span!(target: RUN, "pass", pass = 3u64).in_scope(|| {
                once.failed("govern", "squeue: exit 1");
                once.failed("govern", "squeue: exit 1");
            });
        });
        assert_eq!(
            capture::said(&lines, RUN),
            ["govern failed: squeue: exit 1 pass{pass=3}"]
        );
    }

    #[test]
    fn the_level_comes_from_the_environment_or_is_refused() {
        // Parsing only: the process's environment is not changed here.
        assert_eq!("debug".parse::<Level>().unwrap(), Level::DEBUG);
        assert!("loud".parse::<Level>().is_err());
    }

    #[test]
    fn a_once_made_under_a_subscriber_writes_there_from_any_thread() {
        let (dispatch, lines) = capture::dispatch();
        let once =
            tracing::dispatcher::with_default(&dispatch, || std::sync::Arc::new(Once::new(RUN)));
        let o = std::sync::Arc::clone(&once);
        std::thread::spawn(move || o.failed("ingest", "down"))
            .join()
            .unwrap();
        once.failed("ingest", "down");
        assert_eq!(lines.lines().len(), 1, "{:?}", lines.lines());
    }
}
