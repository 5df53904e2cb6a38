//! The running jobs' GPU samples of the idle window (issue 29), read where the database is:
//! the data flows one way, from the collected samples to the governor, which knows no SQL.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use teamshare_config::Config;

use crate::governor::{IdlenessSource, SampledWindow};
use crate::period::Period;
use crate::slurm_cli::slurm_name;
use crate::store::Store;

/// Per job run, the samples of the window of the given length that ends at `now`, in the
/// database at `database`, read-only (the daemon's collection is its only writer), idle below
/// `[accountd] idle_threshold_percent`. No database yet: nothing to read.
pub fn idleness_from_store(database: PathBuf) -> IdlenessSource {
    Box::new(move |config: &Config, window: Duration, now| {
        if !database.exists() {
            return Ok(None);
        }
        let window = i64::try_from(window.as_secs()).unwrap_or(i64::MAX);
        let period = Period {
            since: now.saturating_sub(window),
            until: now,
        };
        let threshold = config.accountd.idle_threshold_percent;
        let time = Store::open_read_only(&database)
            // The cluster as the collection stores it (Slurm's lowercase name).
            .and_then(|s| s.gpu_time_in(&slurm_name(&config.cluster.name), period, threshold))
            .map_err(|e| e.to_string())?;
        let mut out: BTreeMap<(u64, i64), SampledWindow> = BTreeMap::new();
        for (run, t) in time.by_run_gpu.iter().filter(|(r, _)| r.job_id_raw != 0) {
            let w = out
                .entry((u64::from(run.job_id_raw), run.job_start))
                .or_default();
            w.samples = w.samples.saturating_add(t.samples);
            w.sampled_ms = w.sampled_ms.saturating_add(t.sampled_ms);
            w.idle_ms = w.idle_ms.saturating_add(t.idle_ms);
        }
        Ok(Some(out))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::test_support::sample;

    #[test]
    fn the_window_sums_each_runs_samples_over_its_gpus() {
        let dir = tempfile::tempdir().expect("temp dir");
        let db = dir.path().join("accountd.db");
        let text = "[cluster]\nname = \"c\"\n[[team]]\nname = \"a\"\nquota = 1\n[governance]\nidle_window = \"60s\"\n";
        let config = teamshare_config::parse(text, "t.toml").expect("valid");
        let mut source = idleness_from_store(db.clone());
        assert_eq!(
            source(&config, config.governance.idle_window, 1_000).expect("no database"),
            None
        );
        // Job 7 (start 500): 2 GPUs, 10 s samples at 940 .. 990 on each, idle but one at 50 %.
        // Job 8's samples are before the window (it starts at 940); the no-job samples count
        // for nobody. The threshold is 5 %: 4 % is idle.
        let mut samples = Vec::new();
        for ts in (940..1_000).step_by(10) {
            samples.push(sample("GPU-a", ts, Some((7, 500)), 4));
            let util = if ts == 970 { 50 } else { 0 };
            samples.push(sample("GPU-b", ts, Some((7, 500)), util));
            samples.push(sample("GPU-c", ts, None, 0));
        }
        samples.push(sample("GPU-d", 930, Some((8, 900)), 0));
        let store = Store::open(&db).expect("store");
        store
            .record_samples("c", &samples, 5.0, 1_000)
            .expect("recorded");
        drop(store);
        let windows = source(&config, config.governance.idle_window, 1_000)
            .expect("read")
            .expect("a database");
        assert_eq!(
            windows,
            BTreeMap::from([(
                (7, 500),
                SampledWindow {
                    samples: 12,
                    sampled_ms: 120_000,
                    idle_ms: 110_000,
                }
            )])
        );
        // A ClusterName written in capitals: the collection stores Slurm's lowercase name,
        // and the windows are read under it.
        let upper =
            teamshare_config::parse(&text.replace("name = \"c\"", "name = \"C\""), "t.toml")
                .expect("valid");
        let read = source(&upper, upper.governance.idle_window, 1_000)
            .expect("read")
            .expect("a database");
        assert_eq!(read, windows);
    }
}
