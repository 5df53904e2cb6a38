//! A stand-in `libnvidia-ml.so` for tests and the dev cluster: the NVML C functions that
//! `accountd sample` calls through nvml-wrapper, answering from a script (see `script`) instead
//! of a GPU.
//!
//! - `FAKE_NVML_SCRIPT`: the script file, read at every `nvmlInit*` (required).
//! - `FAKE_NVML_DEVICES`: optional comma list of minor numbers this "node" has, so that two
//!   samplers on one machine can share a script and see different GPUs.
//! - `FAKE_NVML_TIME`: optional unix seconds to freeze the clock at (default: the real clock).
//!
//! nvml-wrapper resolves every symbol when it opens the library but only fails, with
//! `FailedToLoadSymbol`, when a missing one is called; so only the functions accountd uses are
//! here. Each is wrapped in [`guard`]: no panic crosses the C boundary, it becomes
//! `NVML_ERROR_UNKNOWN`. A device handle is the GPU's NVML index plus one, never dereferenced.

// Unit tests are exempt from the workspace's 80-line limit: a scenario reads top to bottom.
#![cfg_attr(test, allow(clippy::too_many_lines))]

pub mod script;

use std::collections::BTreeSet;
use std::ffi::{c_char, c_uint, c_ulonglong, c_void, CStr};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Mutex, MutexGuard};
use std::time::{SystemTime, UNIX_EPOCH};

use script::{Call, Gpu, Script};

/// `nvmlReturn_t` values (nvml.h).
type NvmlReturn = c_uint;
const SUCCESS: NvmlReturn = 0;
const ERROR_UNINITIALIZED: NvmlReturn = 1;
const ERROR_INVALID_ARGUMENT: NvmlReturn = 2;
const ERROR_NOT_SUPPORTED: NvmlReturn = 3;
const ERROR_NOT_FOUND: NvmlReturn = 6;
const ERROR_INSUFFICIENT_SIZE: NvmlReturn = 7;
const ERROR_DRIVER_NOT_LOADED: NvmlReturn = 9;
const ERROR_GPU_IS_LOST: NvmlReturn = 15;
const ERROR_UNKNOWN: NvmlReturn = 999;

/// The version this library reports as the driver's.
const DRIVER_VERSION: &CStr = c"550.00.fake";

const MIB: u64 = 1024 * 1024;

/// `nvmlUtilization_t`
#[repr(C)]
pub struct NvmlUtilization {
    gpu: c_uint,
    memory: c_uint,
}

/// `nvmlMemory_v2_t`
#[repr(C)]
pub struct NvmlMemoryV2 {
    version: c_uint,
    total: c_ulonglong,
    reserved: c_ulonglong,
    free: c_ulonglong,
    used: c_ulonglong,
}

/// `nvmlProcessInfo_t` (v2 layout, what `nvmlDeviceGetComputeRunningProcesses_v3` fills).
#[repr(C)]
pub struct NvmlProcessInfo {
    pid: c_uint,
    used_gpu_memory: c_ulonglong,
    gpu_instance_id: c_uint,
    compute_instance_id: c_uint,
}

/// An opaque `nvmlDevice_t`.
pub type NvmlDevice = *mut c_void;

struct State {
    /// Balanced nvmlInit/nvmlShutdown calls, as the real library counts them.
    inits: u32,
    script: Script,
    /// Frozen clock, or `None` for the real one.
    time: Option<f64>,
}

static STATE: Mutex<Option<State>> = Mutex::new(None);

fn state() -> MutexGuard<'static, Option<State>> {
    // A panic while holding the lock was already turned into an error; the data is still whole.
    STATE
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Run `body`, turning a panic into `NVML_ERROR_UNKNOWN` (unwinding into C is undefined).
fn guard(body: impl FnOnce() -> NvmlReturn) -> NvmlReturn {
    catch_unwind(AssertUnwindSafe(body)).unwrap_or_else(|_| {
        eprintln!("fake-nvml: internal error (panic caught at the C boundary)");
        ERROR_UNKNOWN
    })
}

fn load() -> Result<(Script, Option<f64>), String> {
    let path = std::env::var_os("FAKE_NVML_SCRIPT")
        .filter(|p| !p.is_empty())
        .ok_or("FAKE_NVML_SCRIPT is not set: name the script of GPUs to replay")?;
    let shown = std::path::Path::new(&path).display().to_string();
    let text = std::fs::read_to_string(&path).map_err(|e| format!("cannot read {shown}: {e}"))?;
    let mtime = std::fs::metadata(&path)
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
        .map_or(0.0, |d| d.as_secs_f64());
    let devices: Option<BTreeSet<u32>> = match std::env::var("FAKE_NVML_DEVICES") {
        Ok(v) if !v.trim().is_empty() => Some(script::parse_devices(&v)?),
        _ => None,
    };
    let script =
        script::parse(&text, mtime, devices.as_ref()).map_err(|e| format!("{shown}: {e}"))?;
    let time = match std::env::var("FAKE_NVML_TIME") {
        Ok(v) if !v.trim().is_empty() => Some(
            v.trim()
                .parse::<f64>()
                .map_err(|_| format!("FAKE_NVML_TIME `{v}` is not unix seconds"))?,
        ),
        _ => None,
    };
    Ok((script, time))
}

fn init() -> NvmlReturn {
    let mut st = state();
    match load() {
        Ok((script, time)) => {
            let inits = st.as_ref().map_or(0, |s| s.inits) + 1;
            *st = Some(State {
                inits,
                script,
                time,
            });
            SUCCESS
        }
        Err(message) => {
            eprintln!("fake-nvml: {message}");
            ERROR_DRIVER_NOT_LOADED
        }
    }
}

fn now(state: &State) -> f64 {
    state.time.unwrap_or_else(|| {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64())
    })
}

/// Call `f` with the initialised state and the GPU behind `device`; `call` may be scripted to fail.
fn with_gpu(
    device: NvmlDevice,
    call: Option<Call>,
    f: impl FnOnce(&State, &Gpu) -> NvmlReturn,
) -> NvmlReturn {
    let st = state();
    let Some(state) = st.as_ref() else {
        return ERROR_UNINITIALIZED;
    };
    let index = (device as usize).wrapping_sub(1);
    let Some(gpu) = state.script.gpus.get(index) else {
        return ERROR_INVALID_ARGUMENT;
    };
    if call.is_some_and(|c| gpu.fails.contains(&c)) {
        return ERROR_GPU_IS_LOST;
    }
    f(state, gpu)
}

/// Copy `text` and its NUL into the caller's buffer of `length` bytes.
///
/// # Safety
/// `buf` is null or valid for `length` bytes of writes.
unsafe fn write_c_string(text: &str, buf: *mut c_char, length: c_uint) -> NvmlReturn {
    if buf.is_null() {
        return ERROR_INVALID_ARGUMENT;
    }
    let bytes = text.as_bytes();
    if bytes.len() + 1 > length as usize || bytes.contains(&0) {
        return ERROR_INSUFFICIENT_SIZE;
    }
    // SAFETY: buf has room for length >= bytes.len() + 1 bytes (checked above, caller's promise).
    unsafe {
        std::ptr::copy_nonoverlapping(bytes.as_ptr().cast::<c_char>(), buf, bytes.len());
        *buf.add(bytes.len()) = 0;
    }
    SUCCESS
}

#[no_mangle]
pub extern "C" fn nvmlInit_v2() -> NvmlReturn {
    guard(init)
}

#[no_mangle]
pub extern "C" fn nvmlInitWithFlags(_flags: c_uint) -> NvmlReturn {
    guard(init)
}

/// The pre-v2 entry point, for old consumers.
#[no_mangle]
pub extern "C" fn nvmlInit() -> NvmlReturn {
    guard(init)
}

#[no_mangle]
pub extern "C" fn nvmlShutdown() -> NvmlReturn {
    guard(|| {
        let mut st = state();
        match st.as_mut() {
            None => ERROR_UNINITIALIZED,
            Some(s) if s.inits > 1 => {
                s.inits -= 1;
                SUCCESS
            }
            Some(_) => {
                *st = None;
                SUCCESS
            }
        }
    })
}

#[no_mangle]
pub extern "C" fn nvmlErrorString(result: NvmlReturn) -> *const c_char {
    let text: &'static CStr = match result {
        SUCCESS => c"Success",
        ERROR_UNINITIALIZED => c"Uninitialized",
        ERROR_INVALID_ARGUMENT => c"Invalid Argument",
        ERROR_NOT_SUPPORTED => c"Not Supported",
        ERROR_NOT_FOUND => c"Not Found",
        ERROR_INSUFFICIENT_SIZE => c"Insufficient Size",
        ERROR_DRIVER_NOT_LOADED => c"Driver Not Loaded",
        ERROR_GPU_IS_LOST => c"GPU is lost",
        _ => c"Unknown Error",
    };
    text.as_ptr()
}

/// # Safety
/// `version` is null or valid for `length` bytes.
#[no_mangle]
pub unsafe extern "C" fn nvmlSystemGetDriverVersion(
    version: *mut c_char,
    length: c_uint,
) -> NvmlReturn {
    guard(|| {
        if state().is_none() {
            return ERROR_UNINITIALIZED;
        }
        let text = DRIVER_VERSION.to_str().unwrap_or("0");
        // SAFETY: the caller's promise on version/length.
        unsafe { write_c_string(text, version, length) }
    })
}

/// # Safety
/// `count` is null or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetCount_v2(count: *mut c_uint) -> NvmlReturn {
    guard(|| {
        let st = state();
        let Some(state) = st.as_ref() else {
            return ERROR_UNINITIALIZED;
        };
        if count.is_null() {
            return ERROR_INVALID_ARGUMENT;
        }
        let n = c_uint::try_from(state.script.gpus.len()).unwrap_or(c_uint::MAX);
        // SAFETY: count is non-null and valid for a write (caller's promise).
        unsafe { *count = n };
        SUCCESS
    })
}

/// # Safety
/// `device` is null or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetHandleByIndex_v2(
    index: c_uint,
    device: *mut NvmlDevice,
) -> NvmlReturn {
    guard(|| {
        let st = state();
        let Some(state) = st.as_ref() else {
            return ERROR_UNINITIALIZED;
        };
        if device.is_null() || index as usize >= state.script.gpus.len() {
            return ERROR_INVALID_ARGUMENT;
        }
        // A handle is index + 1: non-null, and never dereferenced by anyone.
        let handle = (index as usize + 1) as NvmlDevice;
        // SAFETY: device is non-null and valid for a write (caller's promise).
        unsafe { *device = handle };
        SUCCESS
    })
}

/// # Safety
/// `uuid` is null or valid for `length` bytes.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetUUID(
    device: NvmlDevice,
    uuid: *mut c_char,
    length: c_uint,
) -> NvmlReturn {
    guard(|| {
        with_gpu(device, Some(Call::Uuid), |_, gpu| {
            // SAFETY: the caller's promise on uuid/length.
            unsafe { write_c_string(&gpu.uuid, uuid, length) }
        })
    })
}

/// # Safety
/// `name` is null or valid for `length` bytes.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetName(
    device: NvmlDevice,
    name: *mut c_char,
    length: c_uint,
) -> NvmlReturn {
    guard(|| {
        with_gpu(device, Some(Call::Name), |_, gpu| {
            // SAFETY: the caller's promise on name/length.
            unsafe { write_c_string(&gpu.name, name, length) }
        })
    })
}

/// # Safety
/// `minor` is null or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMinorNumber(
    device: NvmlDevice,
    minor: *mut c_uint,
) -> NvmlReturn {
    guard(|| {
        with_gpu(device, Some(Call::Minor), |_, gpu| {
            if minor.is_null() {
                return ERROR_INVALID_ARGUMENT;
            }
            // SAFETY: minor is non-null and valid for a write (caller's promise).
            unsafe { *minor = gpu.minor };
            SUCCESS
        })
    })
}

/// # Safety
/// `utilization` is null or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetUtilizationRates(
    device: NvmlDevice,
    utilization: *mut NvmlUtilization,
) -> NvmlReturn {
    guard(|| {
        with_gpu(device, Some(Call::Utilization), |state, gpu| {
            if utilization.is_null() {
                return ERROR_INVALID_ARGUMENT;
            }
            if gpu.mig == Some(true) {
                return ERROR_NOT_SUPPORTED;
            }
            let (g, m) = gpu
                .step_at(now(state))
                .map_or((0, 0), |s| (s.gpu_percent, s.mem_percent));
            // SAFETY: utilization is non-null and valid for a write (caller's promise).
            unsafe { utilization.write(NvmlUtilization { gpu: g, memory: m }) };
            SUCCESS
        })
    })
}

/// # Safety
/// `current` and `pending` are null or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMigMode(
    device: NvmlDevice,
    current: *mut c_uint,
    pending: *mut c_uint,
) -> NvmlReturn {
    guard(|| {
        with_gpu(device, None, |_, gpu| {
            let Some(on) = gpu.mig else {
                return ERROR_NOT_SUPPORTED;
            };
            if current.is_null() || pending.is_null() {
                return ERROR_INVALID_ARGUMENT;
            }
            // SAFETY: both are non-null and valid for a write (caller's promise).
            unsafe {
                *current = c_uint::from(on);
                *pending = c_uint::from(on);
            }
            SUCCESS
        })
    })
}

/// # Safety
/// `memory` is null or valid for reads and writes of an `nvmlMemory_v2_t`.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMemoryInfo_v2(
    device: NvmlDevice,
    memory: *mut NvmlMemoryV2,
) -> NvmlReturn {
    guard(|| {
        with_gpu(device, Some(Call::Memory), |state, gpu| {
            if memory.is_null() {
                return ERROR_INVALID_ARGUMENT;
            }
            let total = gpu.memory_mib * MIB;
            let used = gpu
                .step_at(now(state))
                .map_or(0, |s| s.mem_used_mib * MIB)
                .min(total);
            // SAFETY: memory is non-null and valid for reads and writes (caller's promise).
            unsafe {
                let version = (*memory).version;
                memory.write(NvmlMemoryV2 {
                    version,
                    total,
                    reserved: 0,
                    free: total - used,
                    used,
                });
            }
            SUCCESS
        })
    })
}

/// # Safety
/// `count` is null or valid for reads and writes; `infos` is null or valid for `*count` writes.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetComputeRunningProcesses_v3(
    device: NvmlDevice,
    count: *mut c_uint,
    infos: *mut NvmlProcessInfo,
) -> NvmlReturn {
    guard(|| {
        with_gpu(device, Some(Call::Processes), |_, gpu| {
            if count.is_null() {
                return ERROR_INVALID_ARGUMENT;
            }
            let have = c_uint::try_from(gpu.processes.len()).unwrap_or(c_uint::MAX);
            // SAFETY: count is non-null and valid for reads and writes (caller's promise).
            let room = unsafe { *count };
            // SAFETY: as above.
            unsafe { *count = have };
            if have == 0 {
                return SUCCESS;
            }
            if infos.is_null() || room < have {
                return ERROR_INSUFFICIENT_SIZE;
            }
            for (i, p) in gpu.processes.iter().enumerate() {
                // SAFETY: i < have <= room, the number of entries infos has room for.
                unsafe {
                    infos.add(i).write(NvmlProcessInfo {
                        pid: p.pid,
                        used_gpu_memory: p.mem_used_mib * MIB,
                        gpu_instance_id: u32::MAX,
                        compute_instance_id: u32::MAX,
                    });
                }
            }
            SUCCESS
        })
    })
}
