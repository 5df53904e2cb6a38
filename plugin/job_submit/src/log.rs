//! The plugin's log: `tracing` events (`tracing::info!`, `tracing::error!`, ...) written to
//! slurmctld's log through its own logger, always with a fixed "%s" format so no text becomes a
//! format string. [`install`] makes [`SlurmLog`] this library's subscriber (the library has its
//! own copy of tracing's statics, so nothing else in slurmctld is touched); before that, and
//! while a panic is being reported, [`info`] and [`error`] write directly.

use std::ffi::CString;
use std::fmt::Write as _;

use tracing::field::{Field, Visit};
use tracing::level_filters::LevelFilter;
use tracing::{Event, Level, Metadata};

const PREFIX: &str = "job_submit/teamshare: ";

fn c_line(msg: &str) -> CString {
    let line = format!("{PREFIX}{msg}").replace('\0', " ");
    // Interior NULs were just removed, so this cannot fail; fall back to the prefix anyway.
    CString::new(line).unwrap_or_else(|_| CString::from(c"job_submit/teamshare: (unprintable)"))
}

pub fn info(msg: &str) {
    let line = c_line(msg);
    // SAFETY: slurm_info is a printf-like logger resolved in slurmctld; the format is a fixed
    // "%s" and the argument a valid NUL-terminated string that outlives the call.
    unsafe { slurm_sys::slurm_info(c"%s".as_ptr(), line.as_ptr()) }
}

pub fn error(msg: &str) {
    let line = c_line(msg);
    // SAFETY: as in `info`.
    unsafe { slurm_sys::slurm_error(c"%s".as_ptr(), line.as_ptr()) }
}

/// Error events go to `slurm_error`, warnings to `slurm_error` with "warning: " (slurmctld has
/// no warning level a site's default `SlurmctldDebug` shows), the rest to `slurm_info`; below
/// info nothing is formatted (a disabled event costs one comparison on the submit path).
pub struct SlurmLog;

/// The text of an event: its message, then its other fields as ` name=value`.
#[derive(Default)]
struct Line(String);

impl Visit for Line {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.0.insert_str(0, value);
        } else {
            let _ = write!(self.0, " {}={value}", field.name());
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            self.0.insert_str(0, &format!("{value:?}"));
        } else {
            let _ = write!(self.0, " {}={value:?}", field.name());
        }
    }
}

impl tracing::Subscriber for SlurmLog {
    fn enabled(&self, metadata: &Metadata<'_>) -> bool {
        *metadata.level() <= Level::INFO
    }

    fn max_level_hint(&self) -> Option<LevelFilter> {
        Some(LevelFilter::INFO)
    }

    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        // Spans are not used: one id for all.
        tracing::span::Id::from_u64(1)
    }

    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}

    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}

    fn event(&self, event: &Event<'_>) {
        let mut line = Line::default();
        event.record(&mut line);
        match *event.metadata().level() {
            Level::ERROR => error(&line.0),
            Level::WARN => error(&format!("warning: {}", line.0)),
            _ => info(&line.0),
        }
    }

    fn enter(&self, _: &tracing::span::Id) {}

    fn exit(&self, _: &tracing::span::Id) {}
}

/// Make [`SlurmLog`] the subscriber of this library's events (from `init`; a second call, after
/// a reconfigure that kept the library loaded, keeps the first).
pub fn install() {
    let _ = tracing::subscriber::set_global_default(SlurmLog);
}
