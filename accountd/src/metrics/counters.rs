//! The daemon's own counters (kept apart from [`super::Live`], whose fields tests build whole)
//! and their exposition.

use super::{finish, Exposition, Kind};

/// Counters of the daemon's life kept apart from [`super::Live`] (whose fields tests build whole).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counters {
    /// squeue lines the governor could not read, since the daemon started (each such job was
    /// treated as never in quota).
    pub governor_unreadable_jobs: u64,
    /// Passes whose state file could not be written (a full disk, a read-only directory):
    /// the plugin then reads an older state, stale past `state_max_age`.
    pub governor_state_write_failures: u64,
    /// Jobs held after the governor's requeue because accounting showed their run had ended
    /// by itself (so that it does not run twice): each waits for its owner's release (issue
    /// 25, finding 16).
    pub governor_run_ended_holds: u64,
    /// Of those, the holds released because accounting later recorded the run as killed by
    /// the requeue (the hold was wrong; issue 25, finding 16).
    pub governor_wrong_holds_released: u64,
}

/// The exposition of `counters` (always present: a counter at 0 says "none yet").
pub fn render_counters(counters: &Counters) -> String {
    let e = Exposition::new();
    let built = e
        .family(
            "teamshare_governor_unreadable_jobs_total",
            Kind::Counter,
            "squeue lines the governor could not read since the daemon started; their jobs were treated as never in quota (each line is logged once).",
            &[],
        )
        .and_then(|f| {
            f.sample(&[], counters.governor_unreadable_jobs as f64);
            e.family(
                "teamshare_governor_state_write_failures_total",
                Kind::Counter,
                "Governor passes that could not write the state file the plugin reads (its actions went on); the plugin keeps the last state it read, stale after state_max_age.",
                &[],
            )
        })
        .and_then(|f| {
            f.sample(&[], counters.governor_state_write_failures as f64);
            e.family(
                "teamshare_governor_run_ended_holds_total",
                Kind::Counter,
                "Jobs the governor held after requeueing them because accounting showed their run had ended by itself just before (so that it does not run twice); each waits for its owner's `scontrol release`.",
                &[],
            )
        })
        .and_then(|f| {
            f.sample(&[], counters.governor_run_ended_holds as f64);
            e.family(
                "teamshare_governor_wrong_holds_released_total",
                Kind::Counter,
                "Jobs held against a second run that the governor released because accounting later recorded their run as killed by the requeue (the hold was wrong).",
                &[],
            )
        })
        .and_then(|f| {
            f.sample(&[], counters.governor_wrong_holds_released as f64);
            e.text()
        });
    finish(built)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 25, finding 16: a job held because its run ended by itself just before the
    /// governor's requeue is counted, so that an alert can say it waits for its owner.
    #[test]
    fn issue25_16_run_ended_holds_are_counted() {
        let text = render_counters(&Counters {
            governor_run_ended_holds: 2,
            governor_wrong_holds_released: 1,
            ..Counters::default()
        });
        assert!(
            text.contains("teamshare_governor_wrong_holds_released_total 1\n"),
            "{text}"
        );
        assert!(
            text.contains("# TYPE teamshare_governor_run_ended_holds_total counter\n"),
            "{text}"
        );
        assert!(
            text.contains("teamshare_governor_run_ended_holds_total 2\n"),
            "{text}"
        );
    }
}
