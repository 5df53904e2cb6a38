//! The governed capacity over time (`capacity_samples`): written on change and hourly, read as a
//! step function.

use std::collections::BTreeMap;

use rusqlite::{params, Connection, OptionalExtension};

use super::{Store, StoreError};
use crate::period::UnixSeconds;

/// How often an unchanged capacity is written again, so that a report can see that it was
/// measured (and when the daemon stopped measuring).
pub const CAPACITY_HEARTBEAT_SECONDS: i64 = 3600;

/// The governed capacity from an instant on (a row of `capacity_samples`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CapacitySample {
    pub ts: UnixSeconds,
    pub gpus: u32,
    /// The typed part; GPUs without a type are `gpus` minus their sum.
    pub by_type: BTreeMap<String, u32>,
}

impl Store {
    /// Store the capacity measured at `ts` unless it equals the last stored one and that one is
    /// younger than [`CAPACITY_HEARTBEAT_SECONDS`]. Returns whether a row was written. A sample
    /// at or before the last stored instant (a clock set back) is not written.
    pub fn record_capacity(
        &mut self,
        cluster: &str,
        sample: &CapacitySample,
    ) -> Result<bool, StoreError> {
        let (tx, err) = self.immediate()?;
        let last = last_capacity_before(&tx, cluster, UnixSeconds::MAX).map_err(&err)?;
        let write = match &last {
            None => true,
            Some(last) if sample.ts <= last.ts => false,
            Some(last) => {
                (last.gpus, &last.by_type) != (sample.gpus, &sample.by_type)
                    || sample.ts - last.ts >= CAPACITY_HEARTBEAT_SECONDS
            }
        };
        if write {
            tx.execute(
                "INSERT OR IGNORE INTO capacity_samples (cluster, ts, gpus) VALUES (?1, ?2, ?3)",
                params![cluster, sample.ts, sample.gpus],
            )
            .map_err(&err)?;
            let mut stmt = tx
                .prepare_cached(
                    "INSERT OR IGNORE INTO capacity_sample_types (cluster, ts, gpu_type, gpus)
                     VALUES (?1, ?2, ?3, ?4)",
                )
                .map_err(&err)?;
            for (gpu_type, n) in &sample.by_type {
                stmt.execute(params![cluster, sample.ts, gpu_type, n])
                    .map_err(&err)?;
            }
        }
        tx.commit().map_err(&err)?;
        Ok(write)
    }

    /// The capacity step function over `[since, until)`: the sample in force at `since` (the
    /// last one at or before it), then every sample inside the period, in time order.
    pub fn capacity_history(
        &self,
        cluster: &str,
        since: UnixSeconds,
        until: UnixSeconds,
    ) -> Result<Vec<CapacitySample>, StoreError> {
        let read = || -> rusqlite::Result<Vec<CapacitySample>> {
            let mut out: Vec<CapacitySample> = last_capacity_before(&self.conn, cluster, since)?
                .into_iter()
                .collect();
            let mut stmt = self.conn.prepare_cached(
                "SELECT s.ts, s.gpus, t.gpu_type, t.gpus
                 FROM capacity_samples s LEFT JOIN capacity_sample_types t
                   ON t.cluster = s.cluster AND t.ts = s.ts
                 WHERE s.cluster = ?1 AND s.ts > ?2 AND s.ts < ?3
                 ORDER BY s.ts, t.gpu_type",
            )?;
            let mut rows = stmt.query(params![cluster, since, until])?;
            while let Some(r) = rows.next()? {
                let ts: i64 = r.get(0)?;
                if out.last().map(|s| s.ts) != Some(ts) {
                    out.push(CapacitySample {
                        ts,
                        gpus: r.get(1)?,
                        by_type: BTreeMap::new(),
                    });
                }
                if let (Some(t), Some(last)) = (r.get::<_, Option<String>>(2)?, out.last_mut()) {
                    last.by_type.insert(t, r.get(3)?);
                }
            }
            Ok(out)
        };
        read().map_err(|e| self.sql_err(e))
    }
}

/// The last capacity sample of `cluster` at or before `at`.
fn last_capacity_before(
    conn: &Connection,
    cluster: &str,
    at: UnixSeconds,
) -> rusqlite::Result<Option<CapacitySample>> {
    let head: Option<(i64, u32)> = conn
        .prepare_cached(
            "SELECT ts, gpus FROM capacity_samples WHERE cluster = ?1 AND ts <= ?2
             ORDER BY ts DESC LIMIT 1",
        )?
        .query_row(params![cluster, at], |r| Ok((r.get(0)?, r.get(1)?)))
        .optional()?;
    let Some((ts, gpus)) = head else {
        return Ok(None);
    };
    let mut stmt = conn.prepare_cached(
        "SELECT gpu_type, gpus FROM capacity_sample_types WHERE cluster = ?1 AND ts = ?2",
    )?;
    let by_type = stmt
        .query_map(params![cluster, ts], |r| Ok((r.get(0)?, r.get(1)?)))?
        .collect::<rusqlite::Result<BTreeMap<String, u32>>>()?;
    Ok(Some(CapacitySample { ts, gpus, by_type }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::tests::{capacity, count};

    #[test]
    fn capacity_is_written_on_change_and_hourly() {
        let mut store = Store::open_in_memory().unwrap();
        assert!(store.record_capacity("c", &capacity(100, 8, &[])).unwrap());
        // Unchanged within the hour: nothing; a clock set back: nothing.
        assert!(!store.record_capacity("c", &capacity(160, 8, &[])).unwrap());
        assert!(!store.record_capacity("c", &capacity(50, 4, &[])).unwrap());
        assert!(store
            .record_capacity("c", &capacity(200, 8, &[("h100", 4)]))
            .unwrap());
        assert!(store.record_capacity("c", &capacity(300, 6, &[])).unwrap());
        assert!(store
            .record_capacity("c", &capacity(300 + CAPACITY_HEARTBEAT_SECONDS, 6, &[]))
            .unwrap());
        assert!(store
            .record_capacity("other", &capacity(160, 2, &[]))
            .unwrap());
        assert_eq!(count(&store, "capacity_samples"), 5);
        assert_eq!(count(&store, "capacity_sample_types"), 1);
    }

    #[test]
    fn capacity_history_starts_with_the_sample_in_force() {
        let mut store = Store::open_in_memory().unwrap();
        for s in [
            capacity(100, 8, &[("h100", 4)]),
            capacity(200, 6, &[]),
            capacity(300, 10, &[("a100", 2), ("h100", 4)]),
            capacity(400, 8, &[]),
        ] {
            store.record_capacity("c", &s).unwrap();
        }
        let h = store.capacity_history("c", 250, 400).unwrap();
        assert_eq!(
            h,
            [
                capacity(200, 6, &[]),
                capacity(300, 10, &[("a100", 2), ("h100", 4)])
            ]
        );
        let h = store.capacity_history("c", 100, 150).unwrap();
        assert_eq!(h, [capacity(100, 8, &[("h100", 4)])]);
        // Before the first sample: only the samples inside the period.
        let h = store.capacity_history("c", 0, 250).unwrap();
        assert_eq!(h.iter().map(|s| s.ts).collect::<Vec<_>>(), [100, 200]);
        assert!(store.capacity_history("c", 0, 100).unwrap().is_empty());
        assert!(store.capacity_history("x", 0, 1000).unwrap().is_empty());
    }
}
