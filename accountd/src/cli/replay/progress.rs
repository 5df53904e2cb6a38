//! The progress of `accountd replay`'s simulations on a terminal.

use std::io::{IsTerminal as _, Write as _};
use std::time::{Duration, Instant};

use accountd::replay::study::Progress;
use accountd::replay::{Secs, Trace};

use super::DAY;

/// The progress of one or more replays on a terminal's stderr, redrawn in place at most every
/// 200 ms: `replaying siloed: 43 % (day 157 of 365)`, or for a batch `replaying 11 runs on 2
/// threads: 3 done, 41 % in all`. Nothing when stderr is not a terminal.
pub(super) struct Terminal {
    tty: bool,
    since: Secs,
    span: Secs,
    state: std::sync::Mutex<State>,
}

/// The batch being drawn.
#[derive(Default)]
struct State {
    labels: Vec<String>,
    threads: usize,
    /// Per run: how far it is (seconds of the trace), `span` when done.
    at: Vec<Secs>,
    drawn: Option<Instant>,
    width: usize,
}

impl Terminal {
    /// The progress of the replays of `trace`.
    pub(super) fn new(trace: &Trace) -> Terminal {
        Terminal {
            tty: std::io::stderr().is_terminal(),
            since: trace.since,
            span: (trace.until - trace.since).max(1),
            state: std::sync::Mutex::new(State::default()),
        }
    }

    fn report(&self, run: usize, t: Secs) {
        if !self.tty {
            return;
        }
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(a) = st.at.get_mut(run) {
            *a = (t - self.since).clamp(0, self.span);
        }
        if st
            .drawn
            .is_some_and(|d| d.elapsed() < Duration::from_millis(200))
        {
            return;
        }
        st.drawn = Some(Instant::now());
        let line = if st.labels.len() == 1 {
            let days = (self.span + DAY - 1) / DAY;
            let done = st.at[0];
            format!(
                "replaying {}: {:.0} % (day {} of {days})",
                st.labels[0],
                100.0 * done as f64 / self.span as f64,
                (done / DAY + 1).min(days)
            )
        } else {
            let total: f64 = st.at.iter().map(|a| *a as f64 / self.span as f64).sum();
            let finished = st.at.iter().filter(|a| **a >= self.span).count();
            format!(
                "replaying {} runs on {} threads: {finished} done, {:.0} % in all",
                st.labels.len(),
                st.threads,
                100.0 * total / st.labels.len() as f64
            )
        };
        st.width = st.width.max(line.len());
        say_err_inline!("\r{line:<w$}", w = st.width);
    }
}

impl Progress for Terminal {
    fn begin(&self, labels: Vec<String>, threads: usize) {
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        *st = State {
            at: vec![0; labels.len()],
            labels,
            threads,
            drawn: None,
            width: 0,
        };
    }

    fn at(&self, run: usize, t: Secs) {
        self.report(run, t);
    }

    fn done(&self, run: usize) {
        self.report(run, self.since + self.span);
    }

    fn end(&self) {
        let st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if st.drawn.is_some() {
            say_err_inline!("\r{}\r", " ".repeat(st.width));
        }
    }
}
