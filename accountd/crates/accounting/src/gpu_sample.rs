//! One GPU at one sampling tick: the record `accountd sample` spools on a node and the store
//! keeps on the head (DESIGN 5 "utilisation and waste"). A type of its own, below both, so
//! the store does not import the sampler (issue 28).

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
