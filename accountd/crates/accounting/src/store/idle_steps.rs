//! The governor's idle policy steps (issue 29), as the daemon recorded them: what `report
//! users` says the policy did to each user's jobs.

use rusqlite::params;

use super::{Store, StoreError};
use crate::period::{Period, UnixSeconds};

/// One step of the idle policy acted on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdleStepRow {
    pub ts: UnixSeconds,
    pub job_id_raw: u64,
    pub run_start: UnixSeconds,
    pub team: String,
    pub user: String,
    /// `notice`, `reclaim-first`, `requeue`, `cancel` or `cleared`.
    pub step: String,
}

impl Store {
    /// Record steps, in one transaction; a step recorded already (same run, step and
    /// instant) is not recorded twice.
    pub fn record_idle_steps(
        &mut self,
        cluster: &str,
        steps: &[IdleStepRow],
    ) -> Result<(), StoreError> {
        if steps.is_empty() {
            return Ok(());
        }
        let (tx, err) = self.immediate()?;
        {
            let mut stmt = tx
                .prepare_cached(
                    "INSERT OR IGNORE INTO idle_policy_steps
                     (cluster, ts, job_id_raw, run_start, team, user, step)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                )
                .map_err(&err)?;
            for s in steps {
                let job = i64::try_from(s.job_id_raw).unwrap_or(i64::MAX);
                stmt.execute(params![
                    cluster,
                    s.ts,
                    job,
                    s.run_start,
                    s.team,
                    s.user,
                    s.step
                ])
                .map_err(&err)?;
            }
        }
        tx.commit().map_err(&err)
    }

    /// The steps decided within the period, oldest first.
    pub fn idle_steps_in(
        &self,
        cluster: &str,
        period: Period,
    ) -> Result<Vec<IdleStepRow>, StoreError> {
        let read = || -> rusqlite::Result<Vec<IdleStepRow>> {
            let mut stmt = self.conn.prepare_cached(
                "SELECT ts, job_id_raw, run_start, team, user, step FROM idle_policy_steps
                 WHERE cluster = ?1 AND ts >= ?2 AND ts < ?3 ORDER BY ts, id",
            )?;
            let rows = stmt.query_map(params![cluster, period.since, period.until], |r| {
                Ok(IdleStepRow {
                    ts: r.get(0)?,
                    job_id_raw: u64::try_from(r.get::<_, i64>(1)?).unwrap_or(0),
                    run_start: r.get(2)?,
                    team: r.get(3)?,
                    user: r.get(4)?,
                    step: r.get(5)?,
                })
            })?;
            rows.collect()
        };
        read().map_err(|e| self.sql_err(e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_are_recorded_once_and_read_by_period() {
        let dir = tempfile::tempdir().expect("temp dir");
        let mut store = Store::open(&dir.path().join("a.db")).expect("store");
        let step = |ts, step: &str| IdleStepRow {
            ts,
            job_id_raw: 42,
            run_start: 100,
            team: "vision".into(),
            user: "alice".into(),
            step: step.into(),
        };
        let steps = [step(1_000, "notice"), step(1_600, "requeue")];
        store.record_idle_steps("c", &steps).expect("recorded");
        store.record_idle_steps("c", &steps[..1]).expect("again");
        store
            .record_idle_steps("other", &steps[..1])
            .expect("another cluster");
        let all = Period {
            since: 0,
            until: 2_000,
        };
        assert_eq!(store.idle_steps_in("c", all).expect("read"), steps);
        let first = Period {
            since: 1_000,
            until: 1_600,
        };
        assert_eq!(store.idle_steps_in("c", first).expect("read"), steps[..1]);
    }
}
