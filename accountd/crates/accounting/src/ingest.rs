//! Ingest: which window of Slurm's accounting to read, reading it, and storing it.
//!
//! The window: from the stored watermark minus an overlap (slurmdbd writes asynchronously, so a
//! record may appear after a later one was read), or 30 days back on an empty database, until now.
//! sacct selects the jobs eligible or running at some moment of the window, so a job that was
//! running when the last window closed is read again in the next one and updated when it ends.
//! Because every write is an upsert on the run's natural key, overlap costs nothing but time.
//!
//! Runaway runs: a job slurmctld lost stays RUNNING in sacct for ever. After an ingest,
//! [`check_runaways`] asks squeue once for every job slurmctld knows and clips the stored running
//! runs whose job it no longer lists ([`Store::clip_runaways`]).

use std::collections::BTreeSet;
use std::fmt;
use std::io::BufRead;
use std::time::Duration;

use chrono::TimeZone;

use crate::period::{Period, UnixSeconds};
use crate::sacct::{self, MalformedLine, SacctQuery};
use crate::slurm_cli::{SlurmCommand, SlurmCommandError};
use crate::store::{BatchOutcome, RunWriter, RunawayRun, Store, StoreError, WatermarkAdvance};

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
    #[error("cannot read sacct's output: {0}")]
    Read(std::io::Error),
    #[error("cannot tell runaway runs: {0}")]
    Squeue(SlurmCommandError),
    // A list that cannot be read whole cannot say which jobs are missing from it.
    #[error("runaway runs not checked: squeue printed a line that is not a job id: `{line}`")]
    SqueueLine { line: String },
    #[error("runaway runs not checked: squeue lists no job at all while {running} runs are running in sacct (is slurmctld up, and may this user see every job?)")]
    SqueueEmpty { running: usize },
}

/// How long the squeue of the runaway check may take.
const SQUEUE_TIMEOUT: Duration = Duration::from_secs(60);

/// Every job slurmctld knows, in any state (`-t all`: a job that ended since sacct was read is
/// still listed for MinJobAge), by its unique id (`%A`, sacct's JobIDRaw; `%i` would print
/// `123_4` for array tasks). One call, whatever the number of jobs.
pub fn squeue_all_jobs() -> SlurmCommand {
    SlurmCommand::new(
        "squeue",
        ["-h", "-a", "-t", "all", "-o", "%A"]
            .map(String::from)
            .to_vec(),
        SQUEUE_TIMEOUT,
    )
}

/// The job ids of `squeue -o %A` output; an error names the first line that is not one.
pub fn parse_job_ids(text: &str) -> Result<BTreeSet<u64>, IngestError> {
    let mut ids = BTreeSet::new();
    for line in text.lines().map(str::trim).filter(|l| !l.is_empty()) {
        match line.parse::<u64>() {
            Ok(id) => {
                ids.insert(id);
            }
            Err(_) => {
                return Err(IngestError::SqueueLine {
                    line: line.chars().take(200).collect(),
                })
            }
        }
    }
    Ok(ids)
}

/// Clip the stored running runs of `cluster` whose job slurmctld no longer knows, given the
/// jobs `known` to it at `checked_at` (after the ingest, so that a run sacct still says runs is
/// one it said so just before). An empty list while runs are running is not believed.
pub fn clip_runaways_known(
    store: &mut Store,
    cluster: &str,
    known: &BTreeSet<u64>,
    checked_at: crate::period::UnixSeconds,
) -> Result<Vec<RunawayRun>, IngestError> {
    if known.is_empty() {
        let running = store
            .runs_overlapping(cluster, checked_at, checked_at.saturating_add(1))?
            .iter()
            .filter(|r| r.end.is_none())
            .count();
        if running > 0 {
            return Err(IngestError::SqueueEmpty { running });
        }
    }
    Ok(store.clip_runaways(cluster, known, checked_at)?)
}

/// [`clip_runaways_known`] with the list squeue prints now.
pub fn check_runaways(store: &mut Store, cluster: &str) -> Result<Vec<RunawayRun>, IngestError> {
    let checked_at = crate::period::now();
    let out = squeue_all_jobs().run().map_err(IngestError::Squeue)?;
    let known = parse_job_ids(&out.stdout)?;
    clip_runaways_known(store, cluster, &known, checked_at)
}

/// One line for a clipped run, for logs and `accountd ingest`.
pub fn describe_runaway(run: &RunawayRun) -> String {
    format!(
        "job {} of {} is RUNNING in sacct but slurmctld no longer knows it (a runaway job): its run from {} is counted as ended at {}; `sacctmgr show runaway` lists and fixes such jobs in Slurm's accounting",
        run.job_id,
        run.account,
        crate::period::format_rfc3339(run.start),
        crate::period::format_rfc3339(run.end)
    )
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
    let contiguous = watermark.is_none_or(|w| since <= w);
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
    /// Records of jobs that never started: they held no GPUs, and are stored apart (for
    /// `accountd replay`) unless their job has runs (a requeued job waiting to run again).
    pub not_started: usize,
    /// What storing those records did.
    pub unstarted: BatchOutcome,
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

/// How far a running ingest has got, for a progress bar.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Progress {
    /// Non-empty lines read so far.
    pub records: usize,
    /// How much of the window the records read so far cover (sacct prints jobs in the order
    /// they were submitted): the latest submit time read, as a fraction of the window.
    pub fraction: f64,
}

/// How often (in lines) the progress callback is called.
const PROGRESS_EVERY: usize = 10_000;

/// Store sacct's output for `plan`, its times read in `tz`: one transaction. Malformed lines are
/// skipped (and returned); the watermark moves even then, since the same lines would be malformed
/// again (re-read a period explicitly with `--since` once the cause is fixed).
pub fn store_output<Tz: TimeZone + Sync>(
    store: &mut Store,
    plan: &IngestPlan,
    sacct_output: &str,
    tz: &Tz,
    now: UnixSeconds,
) -> Result<IngestSummary, IngestError> {
    store_reader(
        store,
        plan,
        &mut sacct_output.as_bytes(),
        tz,
        now,
        &mut |_| {},
    )
}

/// [`store_output`] from a reader, calling `progress` every few thousand records.
pub fn store_reader<Tz: TimeZone + Sync>(
    store: &mut Store,
    plan: &IngestPlan,
    sacct_output: &mut (dyn BufRead + Send),
    tz: &Tz,
    now: UnixSeconds,
    progress: &mut dyn FnMut(Progress),
) -> Result<IngestSummary, IngestError> {
    let mut writer = store.run_writer(now)?;
    let read = read_into(&mut writer, sacct_output, plan.window, tz, progress)?;
    finish(writer, plan, read)
}

/// Run sacct for `plan` on the cluster of `$SLURM_CONF` and store what it prints.
pub fn ingest(
    store: &mut Store,
    plan: &IngestPlan,
    now: UnixSeconds,
) -> Result<IngestSummary, IngestError> {
    ingest_with_progress(store, plan, now, &mut |_| {})
}

/// [`ingest`], calling `progress` every few thousand records.
///
/// sacct's output is read as it comes and each record is stored as it is read, in one
/// transaction that commits only once sacct has exited successfully: memory stays flat however
/// long the window, and a failed or killed sacct (or accountd) leaves nothing behind.
pub fn ingest_with_progress(
    store: &mut Store,
    plan: &IngestPlan,
    now: UnixSeconds,
    progress: &mut dyn FnMut(Progress),
) -> Result<IngestSummary, IngestError> {
    let query = SacctQuery {
        cluster: Some(plan.cluster.clone()),
        since: plan.window.since,
        until: plan.window.until,
    };
    let mut writer = store.run_writer(now)?;
    // sacct runs with TZ=UTC (slurm_cli), so its times are UTC.
    let (read, ended) = query
        .command()
        .stream(|out| read_into(&mut writer, out, plan.window, &chrono::Utc, progress))?;
    // Our own error first: when storing failed, sacct was cut off and its failure is only that.
    let read = read?;
    ended?;
    finish(writer, plan, read)
}

/// What reading one output found, besides the runs written.
#[derive(Default)]
struct ReadCounts {
    lines: usize,
    not_started: usize,
    malformed: Vec<MalformedLine>,
}

/// Runs (and jobs that never started) parsed and not yet written, with how far the reading
/// has got.
struct Parsed {
    runs: Vec<sacct::JobRun>,
    unstarted: Vec<sacct::UnstartedJob>,
    lines: usize,
    latest_submit: UnixSeconds,
}

/// How many runs the parsing thread hands over at once.
const HANDOVER: usize = 1024;

/// Read sacct's output line by line and write each run: one thread parses while this one
/// writes (writing is most of the work; the two overlap on a second core), with a few thousand
/// runs in between at most.
fn read_into<Tz: TimeZone + Sync>(
    writer: &mut RunWriter<'_>,
    out: &mut (dyn BufRead + Send),
    window: Period,
    tz: &Tz,
    progress: &mut dyn FnMut(Progress),
) -> Result<ReadCounts, IngestError> {
    std::thread::scope(|scope| {
        let (handover, received) = std::sync::mpsc::sync_channel::<Parsed>(8);
        // Written runs go back to be freed on the parser's side, off the writer's.
        let (recycle, recycled) = std::sync::mpsc::channel::<Vec<sacct::JobRun>>();
        let parser = scope.spawn(move || parse_lines(out, window, tz, handover, recycled));
        let span = (window.until - window.since).max(1) as f64;
        let mut reported = 0;
        let mut written = Ok(());
        for parsed in received.iter() {
            if let Err(e) = writer
                .write(&parsed.runs)
                .and_then(|()| writer.write_unstarted(&parsed.unstarted))
            {
                // Dropping the receiver stops the parser at its next handover.
                written = Err(e);
                break;
            }
            let _ = recycle.send(parsed.runs);
            if parsed.lines / PROGRESS_EVERY > reported {
                reported = parsed.lines / PROGRESS_EVERY;
                progress(Progress {
                    records: parsed.lines,
                    fraction: ((parsed.latest_submit - window.since) as f64 / span).clamp(0.0, 1.0),
                });
            }
        }
        drop(received);
        let counts = parser.join().unwrap_or_else(|_| {
            Err(IngestError::Read(std::io::Error::other(
                "the parser failed",
            )))
        });
        written?;
        counts
    })
}

/// The parsing side of [`read_into`].
fn parse_lines<Tz: TimeZone>(
    out: &mut (dyn BufRead + Send),
    window: Period,
    tz: &Tz,
    handover: std::sync::mpsc::SyncSender<Parsed>,
    recycled: std::sync::mpsc::Receiver<Vec<sacct::JobRun>>,
) -> Result<ReadCounts, IngestError> {
    let mut counts = ReadCounts::default();
    let mut latest_submit = window.since;
    let mut runs = Vec::with_capacity(HANDOVER);
    let mut unstarted = Vec::new();
    let mut buf: Vec<u8> = Vec::with_capacity(512);
    let mut line_number = 0;
    loop {
        buf.clear();
        let at_end = out.read_until(b'\n', &mut buf).map_err(IngestError::Read)? == 0;
        if at_end || runs.len() + unstarted.len() >= HANDOVER {
            while let Ok(written) = recycled.try_recv() {
                drop(written);
            }
            let parsed = Parsed {
                runs: std::mem::replace(&mut runs, Vec::with_capacity(HANDOVER)),
                unstarted: std::mem::take(&mut unstarted),
                lines: counts.lines,
                latest_submit,
            };
            if handover.send(parsed).is_err() {
                // The writer stopped: its error is the one to report.
                return Ok(counts);
            }
        }
        if at_end {
            return Ok(counts);
        }
        line_number += 1;
        let bytes = buf.strip_suffix(b"\n").unwrap_or(&buf);
        let bytes = bytes.strip_suffix(b"\r").unwrap_or(bytes);
        let text = std::str::from_utf8(bytes);
        if text.is_ok_and(|t| t.trim().is_empty()) {
            continue;
        }
        counts.lines += 1;
        let read = text
            .map_err(|_| sacct::LineError::NotUtf8)
            .and_then(|line| sacct::read_line(line, tz));
        match read {
            Ok(sacct::Record::Run(run)) => {
                latest_submit = latest_submit.max(run.submit.unwrap_or(run.start));
                runs.push(run.into_job_run());
            }
            Ok(sacct::Record::Unstarted(job)) => {
                counts.not_started += 1;
                unstarted.push(job.into_unstarted_job());
            }
            Err(e) => counts.malformed.push(MalformedLine::new(
                sacct::COMMAND,
                line_number,
                e.to_string(),
                &String::from_utf8_lossy(bytes),
            )),
        }
    }
}

fn finish(
    writer: RunWriter<'_>,
    plan: &IngestPlan,
    read: ReadCounts,
) -> Result<IngestSummary, IngestError> {
    let advance = plan.advance_watermark_to.map(|to| WatermarkAdvance {
        cluster: plan.cluster.clone(),
        to,
    });
    let stored = writer.finish(advance.as_ref())?;
    Ok(IngestSummary {
        window: plan.window,
        read: read.lines,
        stored: stored.runs,
        not_started: read.not_started,
        unstarted: stored.unstarted,
        malformed: read.malformed,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::Utc;

    const DAY: i64 = 86_400;
    const NOW: i64 = 1_715_688_000; // 2024-05-14T12:00:00Z

    fn line(job: u32, start: &str, end: &str, state: &str, gpus: u32) -> String {
        format!("{job}|{job}|c|agents|alice|gpu|normal|{state}|2024-05-14T00:00:00|{start}|{end}|00:00:00|cpu=1,gres/gpu={gpus},node=1|2024-05-14T00:00:00|2880|1|cpu=1,gres/gpu={gpus},node=1\n")
    }

    fn plan_for(store: &Store) -> IngestPlan {
        plan(store, "c", None, None, NOW).unwrap()
    }

    #[test]
    fn squeue_job_ids_are_read_whole_or_not_at_all() {
        let ids = parse_job_ids("12\n 7 \n\n123456789\n").unwrap();
        assert_eq!(ids.into_iter().collect::<Vec<_>>(), [7, 12, 123_456_789]);
        assert!(parse_job_ids("").unwrap().is_empty());
        let e = parse_job_ids("12\n13_[1-4]\n").unwrap_err();
        assert!(e.to_string().contains("`13_[1-4]`"), "{e}");
        assert_eq!(squeue_all_jobs().display(), "squeue -h -a -t all -o %A");
    }

    #[test]
    fn a_run_sacct_says_runs_and_squeue_does_not_list_is_clipped() {
        let mut store = Store::open_in_memory().unwrap();
        let text = [
            line(1, "2024-05-14T01:00:00", "Unknown", "RUNNING", 2),
            line(2, "2024-05-14T02:00:00", "Unknown", "RUNNING", 1),
            line(
                3,
                "2024-05-14T01:00:00",
                "2024-05-14T02:00:00",
                "COMPLETED",
                1,
            ),
        ]
        .concat();
        let p = plan_for(&store);
        store_output(&mut store, &p, &text, &Utc, NOW).unwrap();
        // squeue (after the ingest) knows job 1 and others, not job 2.
        let known = parse_job_ids("1\n40\n41\n").unwrap();
        let clipped = clip_runaways_known(&mut store, "c", &known, NOW + 5).unwrap();
        assert_eq!(clipped.len(), 1);
        assert_eq!((clipped[0].job_id_raw, clipped[0].end), (2, NOW + 5));
        assert!(describe_runaway(&clipped[0]).contains("sacctmgr show runaway"));
        // A report no longer counts job 2 beyond its clip.
        let runs = store.runs_overlapping("c", NOW + 5, NOW + 3600).unwrap();
        assert_eq!(runs.len(), 1);
        // An empty list while runs are running is not believed: nothing is clipped.
        let e = clip_runaways_known(&mut store, "c", &BTreeSet::new(), NOW + 10).unwrap_err();
        assert!(matches!(e, IngestError::SqueueEmpty { running: 1 }), "{e}");
        assert_eq!(
            store
                .runs_overlapping("c", NOW + 10, NOW + 11)
                .unwrap()
                .len(),
            1
        );
        // The next ingest reads job 2 still RUNNING: it stays clipped.
        let again = store_output(&mut store, &p, &text, &Utc, NOW + 60).unwrap();
        assert_eq!(again.stored.updated, 0);
        assert_eq!(store.runaway_runs("c", 0, NOW + 100).unwrap().len(), 1);
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
        assert_eq!(first.unstarted.inserted, 1);
        let second = store_output(&mut store, &p, &text, &Utc, NOW + 60).unwrap();
        assert_eq!(second.stored.inserted, 0);
        assert_eq!(second.stored.updated, 0);
        assert_eq!(second.stored.unchanged, 2);
        assert_eq!(second.not_started, 1);
        assert_eq!(
            (second.unstarted.inserted, second.unstarted.updated),
            (0, 0)
        );
        let n: i64 = store
            .connection()
            .query_row("SELECT count(*) FROM job_runs", [], |r| r.get(0))
            .unwrap();
        assert_eq!(n, 2);
        // Job 3 starts: the next ingest stores its run and it is no longer pending.
        let started = line(3, "2024-05-14T03:00:00", "Unknown", "RUNNING", 0);
        store_output(&mut store, &p, &started, &Utc, NOW + 120).unwrap();
        let pending: i64 = store
            .connection()
            .query_row("SELECT count(*) FROM unstarted_jobs", [], |r| r.get(0))
            .unwrap();
        assert_eq!(pending, 0);
        let n: i64 = store
            .connection()
            .query_row("SELECT count(*) FROM job_runs", [], |r| r.get(0))
            .unwrap();
        assert_eq!(n, 3);
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
    fn progress_follows_the_submit_times_through_the_window() {
        let mut store = Store::open_in_memory().unwrap();
        let p = plan_for(&store);
        let span = p.window.until - p.window.since;
        let text: String = (0..25_000)
            .map(|i| {
                let submit = p.window.since + span * i / 25_000;
                let t = crate::period::format_local(submit, &Utc);
                format!(
                    "{i}|{i}|c|agents|alice|gpu|normal|COMPLETED|{t}|{t}|{t}|00:00:00|gres/gpu=1|{t}|2880|1|gres/gpu=1\n"
                )
            })
            .collect();
        let mut seen = Vec::new();
        let s = store_reader(&mut store, &p, &mut text.as_bytes(), &Utc, NOW, &mut |pr| {
            seen.push(pr)
        })
        .unwrap();
        assert_eq!(s.stored.inserted, 25_000);
        assert_eq!(seen.len(), 2, "{seen:?}");
        assert!(seen[0].records >= 10_000 && seen[0].records < seen[1].records);
        assert!(seen[0].fraction > 0.3 && seen[0].fraction < 0.5, "{seen:?}");
        assert!(seen[1].fraction > 0.7 && seen[1].fraction < 0.9, "{seen:?}");
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
