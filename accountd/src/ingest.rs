//! Ingest: which window of Slurm's accounting to read, reading it, and storing it.
//!
//! The window: from the stored watermark minus an overlap (slurmdbd writes asynchronously, so a
//! record may appear after a later one was read), or 30 days back on an empty database, until now.
//! sacct selects the jobs eligible or running at some moment of the window, so a job that was
//! running when the last window closed is read again in the next one and updated when it ends.
//! Because every write is an upsert on the run's natural key, overlap costs nothing but time.

use std::fmt;

use chrono::TimeZone;

use crate::period::{Period, UnixSeconds};
use crate::sacct::{self, MalformedLine, SacctQuery};
use crate::slurm_cli::SlurmCommandError;
use crate::store::{BatchOutcome, Store, StoreError, WatermarkAdvance};

/// How far before the watermark the next window starts.
pub const OVERLAP_SECONDS: i64 = 3600;
/// How far back the first ingest into an empty database reads.
pub const FIRST_INGEST_LOOKBACK_SECONDS: i64 = 30 * 86_400;

#[derive(Debug, thiserror::Error)]
pub enum IngestError {
    #[error("the ingest window is empty: --since ({since}) must be before --until ({until})")]
    EmptyWindow { since: String, until: String },
    #[error("cannot read Slurm's accounting: {0}")]
    Sacct(#[from] SlurmCommandError),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// The window to read and whether reading it moves the watermark.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IngestPlan {
    pub cluster: String,
    pub window: Period,
    /// Set when the window joins what was read before (it starts at or before the watermark),
    /// so that no gap is left behind it; a window that starts later (a backfill of a chosen
    /// period) does not move it.
    pub advance_watermark_to: Option<UnixSeconds>,
}

/// Decide the window. `since`/`until` are the administrator's choices, if any.
pub fn plan(
    store: &Store,
    cluster: &str,
    since: Option<UnixSeconds>,
    until: Option<UnixSeconds>,
    now: UnixSeconds,
) -> Result<IngestPlan, IngestError> {
    let watermark = store.watermark(cluster)?;
    let since = since.unwrap_or_else(|| match watermark {
        Some(w) => w - OVERLAP_SECONDS,
        None => now - FIRST_INGEST_LOOKBACK_SECONDS,
    });
    let until = until.unwrap_or(now);
    if since >= until {
        return Err(IngestError::EmptyWindow {
            since: crate::period::format_rfc3339(since),
            until: crate::period::format_rfc3339(until),
        });
    }
    // No watermark yet, or the window does not start after it.
    let contiguous = watermark.map_or(true, |w| since <= w);
    Ok(IngestPlan {
        cluster: cluster.to_string(),
        window: Period { since, until },
        // Never past now: what has not happened yet has not been read.
        advance_watermark_to: contiguous.then_some(until.min(now)),
    })
}

/// What an ingest did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IngestSummary {
    pub window: Period,
    /// Non-empty lines sacct printed.
    pub read: usize,
    pub stored: BatchOutcome,
    /// Records of jobs that never started (not stored: they held no GPUs).
    pub not_started: usize,
    pub malformed: Vec<MalformedLine>,
}

impl fmt::Display for IngestSummary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "ingest {} .. {}: {} records read, {} new, {} updated, {} unchanged, {} never started, {} malformed skipped",
            crate::period::format_rfc3339(self.window.since),
            crate::period::format_rfc3339(self.window.until),
            self.read,
            self.stored.inserted,
            self.stored.updated,
            self.stored.unchanged,
            self.not_started,
            self.malformed.len()
        )
    }
}

/// Store sacct's output for `plan`, its times read in `tz`: one transaction. Malformed lines are
/// skipped (and returned); the watermark moves even then, since the same lines would be malformed
/// again (re-read a period explicitly with `--since` once the cause is fixed).
pub fn store_output<Tz: TimeZone>(
    store: &mut Store,
    plan: &IngestPlan,
    sacct_output: &str,
    tz: &Tz,
    now: UnixSeconds,
) -> Result<IngestSummary, IngestError> {
    let batch = sacct::parse(sacct_output, tz);
    let advance = plan.advance_watermark_to.map(|to| WatermarkAdvance {
        cluster: plan.cluster.clone(),
        to,
    });
    let stored = store.record_runs(&batch.runs, now, advance.as_ref())?;
    Ok(IngestSummary {
        window: plan.window,
        read: batch.lines,
        stored,
        not_started: batch.not_started,
        malformed: batch.malformed,
    })
}

/// Run sacct for `plan` on the cluster of `$SLURM_CONF` and store what it prints.
pub fn ingest(
    store: &mut Store,
    plan: &IngestPlan,
    now: UnixSeconds,
) -> Result<IngestSummary, IngestError> {
    let query = SacctQuery {
        cluster: Some(plan.cluster.clone()),
        since: plan.window.since,
        until: plan.window.until,
    };
    let output = query.command().run()?;
    // sacct runs with TZ=UTC (slurm_cli), so its times are UTC.
    store_output(store, plan, &output.stdout, &chrono::Utc, now)
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::Utc;

    const DAY: i64 = 86_400;
    const NOW: i64 = 1_715_688_000; // 2024-05-14T12:00:00Z

    fn line(job: u32, start: &str, end: &str, state: &str, gpus: u32) -> String {
        format!("{job}|{job}|c|agents|alice|gpu|normal|{state}|2024-05-14T00:00:00|{start}|{end}|00:00:00|cpu=1,gres/gpu={gpus},node=1\n")
    }

    fn plan_for(store: &Store) -> IngestPlan {
        plan(store, "c", None, None, NOW).unwrap()
    }

    #[test]
    fn the_first_window_reaches_back_30_days_and_later_ones_overlap() {
        let mut store = Store::open_in_memory().unwrap();
        let p = plan_for(&store);
        assert_eq!(p.window.since, NOW - 30 * DAY);
        assert_eq!(p.window.until, NOW);
        assert_eq!(p.advance_watermark_to, Some(NOW));
        store_output(&mut store, &p, "", &Utc, NOW).unwrap();
        let later = plan(&store, "c", None, None, NOW + 600).unwrap();
        assert_eq!(later.window.since, NOW - OVERLAP_SECONDS);
        assert_eq!(later.window.until, NOW + 600);
    }

    #[test]
    fn a_backfill_after_a_gap_does_not_move_the_watermark() {
        let mut store = Store::open_in_memory().unwrap();
        let p = plan(&store, "c", None, Some(NOW - 10 * DAY), NOW).unwrap();
        store_output(&mut store, &p, "", &Utc, NOW).unwrap();
        assert_eq!(store.watermark("c").unwrap(), Some(NOW - 10 * DAY));
        let gap = plan(&store, "c", Some(NOW - 2 * DAY), None, NOW).unwrap();
        assert_eq!(gap.advance_watermark_to, None);
        let joined = plan(&store, "c", Some(NOW - 11 * DAY), None, NOW).unwrap();
        assert_eq!(joined.advance_watermark_to, Some(NOW));
        let future = plan(&store, "c", None, Some(NOW + DAY), NOW).unwrap();
        assert_eq!(future.advance_watermark_to, Some(NOW));
        assert!(matches!(
            plan(&store, "c", Some(NOW), Some(NOW), NOW),
            Err(IngestError::EmptyWindow { .. })
        ));
    }

    #[test]
    fn ingesting_the_same_output_twice_changes_nothing() {
        let mut store = Store::open_in_memory().unwrap();
        let text = [
            line(
                1,
                "2024-05-14T01:00:00",
                "2024-05-14T02:00:00",
                "COMPLETED",
                2,
            ),
            line(2, "2024-05-14T01:00:00", "Unknown", "RUNNING", 1),
            line(3, "Unknown", "Unknown", "PENDING", 0),
        ]
        .concat();
        let p = plan_for(&store);
        let first = store_output(&mut store, &p, &text, &Utc, NOW).unwrap();
        assert_eq!(first.read, 3);
        assert_eq!(first.stored.inserted, 2);
        assert_eq!(first.not_started, 1);
        let second = store_output(&mut store, &p, &text, &Utc, NOW + 60).unwrap();
        assert_eq!(second.stored.inserted, 0);
        assert_eq!(second.stored.updated, 0);
        assert_eq!(second.stored.unchanged, 2);
        let n: i64 = store
            .connection()
            .query_row("SELECT count(*) FROM job_runs", [], |r| r.get(0))
            .unwrap();
        assert_eq!(n, 2);
    }

    #[test]
    fn overlapping_windows_store_each_run_once_and_complete_running_ones() {
        let mut store = Store::open_in_memory().unwrap();
        let first = [
            line(
                1,
                "2024-05-14T01:00:00",
                "2024-05-14T02:00:00",
                "COMPLETED",
                2,
            ),
            line(2, "2024-05-14T01:30:00", "Unknown", "RUNNING", 1),
        ]
        .concat();
        let p = plan_for(&store);
        store_output(&mut store, &p, &first, &Utc, NOW).unwrap();
        // The next window overlaps: job 1 again, job 2 now finished, job 2 requeued and running
        // again, and a new job.
        let second = [
            line(
                1,
                "2024-05-14T01:00:00",
                "2024-05-14T02:00:00",
                "COMPLETED",
                2,
            ),
            line(
                2,
                "2024-05-14T01:30:00",
                "2024-05-14T11:00:00",
                "PREEMPTED",
                1,
            ),
            line(2, "2024-05-14T11:05:00", "Unknown", "RUNNING", 1),
            line(4, "2024-05-14T11:10:00", "Unknown", "RUNNING", 8),
        ]
        .concat();
        let p2 = plan(&store, "c", None, None, NOW + 600).unwrap();
        let s = store_output(&mut store, &p2, &second, &Utc, NOW + 600).unwrap();
        assert_eq!(
            s.stored,
            BatchOutcome {
                inserted: 2,
                updated: 1,
                unchanged: 1
            }
        );
        let rows: Vec<(u32, String, Option<i64>)> = {
            let mut st = store
                .connection()
                .prepare("SELECT job_id_raw, state, end_time FROM job_runs ORDER BY job_id_raw, start_time")
                .unwrap();
            let v = st
                .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
                .unwrap()
                .collect::<Result<_, _>>()
                .unwrap();
            v
        };
        assert_eq!(rows.len(), 4);
        assert_eq!(rows[1].1, "PREEMPTED");
        assert!(rows[1].2.is_some());
        assert_eq!(rows[2].1, "RUNNING");
        assert_eq!(store.watermark("c").unwrap(), Some(NOW + 600));
    }

    #[test]
    fn malformed_lines_are_skipped_and_the_rest_stored() {
        let mut store = Store::open_in_memory().unwrap();
        let text = [
            line(
                1,
                "2024-05-14T01:00:00",
                "2024-05-14T02:00:00",
                "COMPLETED",
                2,
            ),
            "5|5|c|agents|alice|gpu|normal|COMPLETED|x|y\n".to_string(),
            line(
                6,
                "2024-05-14T01:00:00",
                "2024-05-14T02:00:00",
                "NODE_FAIL",
                1,
            ),
        ]
        .concat();
        let p = plan_for(&store);
        let s = store_output(&mut store, &p, &text, &Utc, NOW).unwrap();
        assert_eq!(s.read, 3);
        assert_eq!(s.stored.inserted, 2);
        assert_eq!(s.malformed.len(), 1);
        assert_eq!(s.malformed[0].line_number, 2);
        let summary = s.to_string();
        assert!(
            summary.contains("3 records read, 2 new, 0 updated"),
            "{summary}"
        );
        assert!(summary.contains("1 malformed skipped"), "{summary}");
    }
}
