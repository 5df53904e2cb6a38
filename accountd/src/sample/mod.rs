//! GPU samples (DESIGN 5 "utilisation and waste", 6 `accountd sample`, 7 nothing counted twice
//! or lost).
//!
//! - `gpu`: reading NVML through nvml-wrapper, from a library path we choose;
//! - `jobs`: which Slurm job holds which GPU (Slurm's device assignment, by minor number);
//! - `spool`: the node's local buffer of samples, written so that a crash loses nothing written;
//! - `sampler`: the node loop of `accountd sample`;
//! - `collect`: the head importing every node's spool into the database, idempotently (the
//!   SQL is [`crate::store`]'s; the reports of the samples are [`crate::report::utilisation`]).
//!
//! A sample is one GPU at one sampling tick. Its key is (node, GPU UUID, tick): the tick is the
//! interval grid (`ts_ms` a multiple of `interval_ms`), so whoever delivers a sample and however
//! often, it is one row.

pub mod collect;
pub mod gpu;
pub mod jobs;
pub mod sampler;
pub mod spool;

#[cfg(test)]
mod collected_tests;

use std::time::Duration;

pub use crate::gpu_sample::{Sample, MAX_INTERVAL};

/// Read a sampling interval: `200ms`, or a duration in the configuration's syntax (`10s`, `1m`).
pub fn parse_interval(text: &str) -> Result<Duration, String> {
    let t = text.trim();
    let d = teamshare_config::parse_duration_ms(t)?;
    if d < Duration::from_millis(10) {
        return Err(format!("interval `{t}` is shorter than 10ms"));
    }
    if d > MAX_INTERVAL {
        return Err(format!("interval `{t}` is longer than 1h"));
    }
    Ok(d)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn sample(uuid: &str, ts_ms: i64, util: u32, job: Option<u32>) -> Sample {
        Sample {
            node: "n1".into(),
            gpu_uuid: uuid.into(),
            ts_ms,
            interval_ms: 10_000,
            minor: Some(0),
            job_id_raw: job,
            job_start: job.map(|_| 1_000),
            util_gpu: util,
            util_mem: 0,
            mem_used: 0,
            mem_total: Some(1 << 30),
            processes: Some(0),
        }
    }

    #[test]
    fn intervals_in_milliseconds_or_durations() {
        assert_eq!(parse_interval("200ms").unwrap(), Duration::from_millis(200));
        assert_eq!(parse_interval("10s").unwrap(), Duration::from_secs(10));
        assert_eq!(parse_interval("1m").unwrap(), Duration::from_secs(60));
        assert!(parse_interval("5ms").is_err());
        assert!(parse_interval("2h").is_err());
        assert!(parse_interval("fast").is_err());
    }

    #[test]
    fn impossible_samples_are_refused() {
        assert!(sample("GPU-a", 1, 5, None).check().is_ok());
        let mut s = sample("GPU-a", 1, 101, None);
        assert!(s.check().unwrap_err().contains("above 100"));
        s = sample("", 1, 5, None);
        assert!(s.check().is_err());
        s = sample("GPU-a", 0, 5, None);
        assert!(s.check().is_err());
        s = sample("GPU-a", 1, 5, None);
        s.mem_used = 2 << 30;
        assert!(s.check().unwrap_err().contains("mem_total"));
        s = sample("GPU-a", 1, 5, None);
        s.interval_ms = 0;
        assert!(s.check().is_err());
    }
}
