//! Reading the GPUs of this node through NVML (nvml-wrapper), from a library path we choose:
//! the driver's `libnvidia-ml.so.1` on a GPU node, contrib/fake-nvml in tests. nvml-wrapper
//! opens the library at run time (libloading), so accountd builds and runs where there is none.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};

use nvml_wrapper::error::NvmlError;
use nvml_wrapper::Nvml;

/// The driver's NVML as the dynamic loader finds it. The versioned name: the unversioned
/// `libnvidia-ml.so` comes only with development packages.
pub const DEFAULT_NVML_LIB: &str = "libnvidia-ml.so.1";

#[derive(Debug, thiserror::Error)]
pub enum GpuError {
    #[error("cannot load NVML from {path}: {detail}; install the NVIDIA driver's NVML library (Debian: libnvidia-ml1 from the nvidia-driver packages; RHEL: nvidia-driver-NVML), or name the library with --nvml-lib PATH")]
    LibraryMissing { path: PathBuf, detail: String },
    #[error(
        "{path} is not an NVML library ({detail}); name libnvidia-ml.so.1 with --nvml-lib PATH"
    )]
    NotNvml { path: PathBuf, detail: String },
    #[error(
        "NVML ({path}) failed to start: {error} (is the NVIDIA driver loaded? try nvidia-smi)"
    )]
    Init { path: PathBuf, error: NvmlError },
    #[error("NVML cannot count the GPUs: {0}")]
    Count(NvmlError),
}

/// What NVML says about one GPU at one instant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuReading {
    /// NVML's index: for messages only, it is neither stable nor Slurm's.
    pub index: u32,
    pub uuid: String,
    pub minor: Option<u32>,
    pub util_gpu: u32,
    pub util_mem: u32,
    pub mem_used: u64,
    pub mem_total: u64,
    pub processes: Option<u32>,
}

/// A GPU that could not be read this time: said, and the others are read all the same.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuReadError {
    pub index: u32,
    /// The UUID when it could be read.
    pub uuid: Option<String>,
    pub message: String,
}

impl std::fmt::Display for GpuReadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.uuid {
            Some(u) => write!(f, "GPU {u} (NVML index {}): {}", self.index, self.message),
            None => write!(f, "GPU at NVML index {}: {}", self.index, self.message),
        }
    }
}

/// Why a MIG-enabled GPU is not sampled (docs/design/fractional-gpus.md, "Sampling").
pub const MIG_UNSAMPLED: &str = "is in MIG mode: NVML reads no utilisation of a MIG-enabled GPU nor of its instances, so it is not sampled and the jobs on its slices count as unsampled (DCGM's profiling metrics can read MIG instances)";

/// Whether NVML says `device` has MIG enabled (a driver or GPU without MIG: no).
fn in_mig_mode(device: &nvml_wrapper::Device<'_>) -> bool {
    device.mig_mode().is_ok_and(|m| m.current == 1)
}

/// An opened NVML.
pub struct Gpus {
    nvml: Nvml,
    pub path: PathBuf,
}

impl Gpus {
    /// Load NVML from `path` (a file, or a name for the dynamic loader) and initialise it.
    pub fn open(path: &Path) -> Result<Gpus, GpuError> {
        let nvml = Nvml::builder()
            .lib_path(OsStr::new(path.as_os_str()))
            .init()
            .map_err(|e| match e {
                NvmlError::LibloadingError(detail) => GpuError::LibraryMissing {
                    path: path.to_path_buf(),
                    detail: detail.to_string(),
                },
                NvmlError::FailedToLoadSymbol(detail) => GpuError::NotNvml {
                    path: path.to_path_buf(),
                    detail,
                },
                error => GpuError::Init {
                    path: path.to_path_buf(),
                    error,
                },
            })?;
        Ok(Gpus {
            nvml,
            path: path.to_path_buf(),
        })
    }

    pub fn driver_version(&self) -> Option<String> {
        self.nvml.sys_driver_version().ok()
    }

    /// (uuid, minor, name) of each GPU, for the start-up line.
    pub fn describe(&self) -> Result<Vec<String>, GpuError> {
        let n = self.nvml.device_count().map_err(GpuError::Count)?;
        Ok((0..n)
            .map(|i| match self.nvml.device_by_index(i) {
                Ok(d) => format!(
                    "{} (minor {}, {})",
                    d.uuid().unwrap_or_else(|e| format!("uuid unreadable: {e}")),
                    d.minor_number()
                        .map_or_else(|e| format!("unreadable: {e}"), |m| m.to_string()),
                    d.name().unwrap_or_else(|_| "?".into())
                ),
                Err(e) => format!("NVML index {i}: {e}"),
            })
            .collect())
    }

    /// Read every GPU. A GPU that cannot be read (its UUID, utilisation or memory) is left out
    /// with an error; the process list is optional data and only left empty.
    pub fn read(&self) -> Result<(Vec<GpuReading>, Vec<GpuReadError>), GpuError> {
        let n = self.nvml.device_count().map_err(GpuError::Count)?;
        let mut readings = Vec::new();
        let mut errors = Vec::new();
        for index in 0..n {
            let fail = |uuid: Option<&String>, what: &str, e: NvmlError| GpuReadError {
                index,
                uuid: uuid.cloned(),
                message: format!("cannot read its {what}: {e}"),
            };
            let device = match self.nvml.device_by_index(index) {
                Ok(d) => d,
                Err(e) => {
                    errors.push(fail(None, "handle", e));
                    continue;
                }
            };
            let uuid = match device.uuid() {
                Ok(u) => u,
                Err(e) => {
                    errors.push(fail(None, "UUID", e));
                    continue;
                }
            };
            let util = match device.utilization_rates() {
                Ok(u) => u,
                Err(NvmlError::NotSupported) if in_mig_mode(&device) => {
                    errors.push(GpuReadError {
                        index,
                        uuid: Some(uuid),
                        message: MIG_UNSAMPLED.into(),
                    });
                    continue;
                }
                Err(e) => {
                    errors.push(fail(Some(&uuid), "utilisation", e));
                    continue;
                }
            };
            let memory = match device.memory_info() {
                Ok(m) => m,
                Err(e) => {
                    errors.push(fail(Some(&uuid), "memory use", e));
                    continue;
                }
            };
            readings.push(GpuReading {
                index,
                minor: device.minor_number().ok(),
                util_gpu: util.gpu.min(100),
                util_mem: util.memory.min(100),
                mem_used: memory.used.min(memory.total),
                mem_total: memory.total,
                processes: device
                    .running_compute_processes()
                    .ok()
                    .map(|p| u32::try_from(p.len()).unwrap_or(u32::MAX)),
                uuid,
            });
        }
        Ok((readings, errors))
    }
}
