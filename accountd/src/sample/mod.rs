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

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// One GPU at one sampling tick, as spooled on the node (one JSON object per line) and stored
/// on the head (`gpu_samples`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sample {
    /// The Slurm node name.
    pub node: String,
    /// NVML's UUID (`GPU-...`, `MIG-...`): the GPU's identity, never its NVML index.
    pub gpu_uuid: String,
    /// The tick, UTC unix milliseconds.
    pub ts_ms: i64,
    /// The GPU-time this sample stands for, milliseconds.
    pub interval_ms: i64,
    /// `/dev/nvidia<minor>`, when NVML could tell.
    pub minor: Option<u32>,
    /// The job holding the GPU (JobIDRaw), `None` for none.
    pub job_id_raw: Option<u32>,
    /// That job's StartTime, UTC unix seconds.
    pub job_start: Option<i64>,
    /// Percent of the time a kernel ran.
    pub util_gpu: u32,
    /// Percent of the time device memory was read or written.
    pub util_mem: u32,
    /// Bytes of device memory in use.
    pub mem_used: u64,
    pub mem_total: Option<u64>,
    /// Compute processes on the GPU, when NVML could tell.
    pub processes: Option<u32>,
}

/// The longest interval a sample may stand for: longer ones are taken for corruption.
pub const MAX_INTERVAL: Duration = Duration::from_secs(3600);

impl Sample {
    /// Why this sample cannot be stored, if it cannot.
    pub fn check(&self) -> Result<(), String> {
        let name_ok =
            |s: &str| !s.is_empty() && !s.chars().any(|c| c.is_whitespace() || c.is_control());
        if !name_ok(&self.node) {
            return Err(format!("node `{}` is not a node name", self.node));
        }
        if !name_ok(&self.gpu_uuid) {
            return Err(format!("gpu_uuid `{}` is not a GPU UUID", self.gpu_uuid));
        }
        if self.ts_ms <= 0 {
            return Err(format!("ts_ms {} is not a time", self.ts_ms));
        }
        if self.interval_ms <= 0 || self.interval_ms > MAX_INTERVAL.as_millis() as i64 {
            return Err(format!(
                "interval_ms {} is not between 1 and {}",
                self.interval_ms,
                MAX_INTERVAL.as_millis()
            ));
        }
        if self.util_gpu > 100 || self.util_mem > 100 {
            return Err(format!(
                "utilisation {} % / {} % is above 100",
                self.util_gpu, self.util_mem
            ));
        }
        if let Some(total) = self.mem_total {
            if self.mem_used > total {
                return Err(format!(
                    "mem_used {} is more than mem_total {total}",
                    self.mem_used
                ));
            }
        }
        if i64::try_from(self.mem_used).is_err() {
            return Err(format!("mem_used {} is out of range", self.mem_used));
        }
        if self.job_id_raw.is_none() && self.job_start.is_some() {
            return Err("job_start without job_id_raw".into());
        }
        Ok(())
    }
}

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
