//! The runs of a period with whom they ran for: what the users' idle report
//! (`report::users`) reads to give each user their allocated GPU-hours, sampled or not.

use rusqlite::params;

use super::{Store, StoreError};
use crate::period::UnixSeconds;

/// A stored run with GPUs, its job id and its user.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserRun {
    pub job_id_raw: u32,
    /// JobID as users see it: `123`, `123_4`, `123+0`.
    pub job_id: String,
    pub user: String,
    /// The Slurm account: the team.
    pub account: String,
    pub start: UnixSeconds,
    /// None while running.
    pub end: Option<UnixSeconds>,
    pub gpus: u64,
}

impl Store {
    /// The runs of `cluster` with GPUs that overlap `[since, until)`: started before `until`
    /// and not ended by `since` (a run without an end is still running), by start time, then
    /// JobIDRaw. Every partition's: the samples do not know partitions either.
    ///
    /// As in [`Store::runs_overlapping`], a finished run that overlaps started at most the
    /// longest run before `since`, so only that stretch of `job_runs_by_start` is read, and the
    /// running ones come from `job_runs_running`.
    pub fn user_runs_overlapping(
        &self,
        cluster: &str,
        since: UnixSeconds,
        until: UnixSeconds,
    ) -> Result<Vec<UserRun>, StoreError> {
        let lower = since.saturating_sub(self.longest_run(cluster)?);
        let read = || -> rusqlite::Result<Vec<UserRun>> {
            let mut stmt = self.conn.prepare_cached(
                "SELECT job_id_raw, job_id, user, account, start_time, end_time, gpus
                 FROM job_runs
                 WHERE cluster = ?1 AND start_time < ?3 AND start_time >= ?4 AND end_time > ?2
                   AND gpus > 0
                 UNION ALL
                 SELECT job_id_raw, job_id, user, account, start_time, end_time, gpus
                 FROM job_runs INDEXED BY job_runs_running
                 WHERE cluster = ?1 AND end_time IS NULL AND start_time < ?3 AND gpus > 0
                 ORDER BY 5, 1",
            )?;
            let rows = stmt.query_map(params![cluster, since, until, lower], |r| {
                Ok(UserRun {
                    job_id_raw: r.get(0)?,
                    job_id: r.get(1)?,
                    user: r.get(2)?,
                    account: r.get(3)?,
                    start: r.get(4)?,
                    end: r.get(5)?,
                    gpus: u64::try_from(r.get::<_, i64>(6)?).unwrap_or(0),
                })
            })?;
            rows.collect()
        };
        read().map_err(|e| self.sql_err(e))
    }
}

#[cfg(test)]
mod tests {
    use crate::store::tests::run;
    use crate::store::Store;

    #[test]
    fn the_runs_with_gpus_that_overlap_the_period_with_their_users() {
        let mut store = Store::open_in_memory().unwrap();
        let mut long = run(1, "a", 0, Some(5_000), 2);
        long.user = "alice".into();
        let mut runs = vec![
            long,                               // started long before, ends inside: in
            run(2, "a", 100, Some(900), 1),     // ended before the period: out
            run(3, "b", 1_500, None, 4),        // running: in
            run(4, "b", 1_200, Some(1_300), 0), // no GPUs: out
            run(5, "b", 3_000, Some(4_000), 1), // starts at the period's end: out
            run(6, "a", 1_000, Some(1_001), 1), // ends just inside: in
        ];
        runs[2].job_id = "3_7".into();
        store.record_runs(&runs, 1, None).unwrap();
        let got = store.user_runs_overlapping("c", 1_000, 3_000).unwrap();
        let ids: Vec<(u32, &str, &str, Option<i64>)> = got
            .iter()
            .map(|r| (r.job_id_raw, r.job_id.as_str(), r.user.as_str(), r.end))
            .collect();
        assert_eq!(
            ids,
            [
                (1, "1", "alice", Some(5_000)),
                (6, "6", "u", Some(1_001)),
                (3, "3_7", "u", None),
            ]
        );
        assert_eq!((got[0].account.as_str(), got[0].gpus), ("a", 2));
        assert!(store
            .user_runs_overlapping("other", 0, 9_000)
            .unwrap()
            .is_empty());
    }
}
