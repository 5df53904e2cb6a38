//! job_submit/teamshare: the symbols slurmctld looks up, and nothing else.
//!
//! Every exported function goes through [`ffi::guard`]: a panic is caught, logged through
//! Slurm's logger, and turned into an error return. The request is copied into owned Rust values
//! ([`ffi`]) and judged by `teamshare_policy` against the in-memory configuration ([`state`]);
//! no file, database or network is touched on the submit path.

// Unit tests are exempt from the workspace's 80-line limit: a scenario reads top to bottom.
#![cfg_attr(test, allow(clippy::too_many_lines))]

mod ffi;
mod log;
mod state;

use std::os::raw::{c_char, c_int};

use slurm_sys::{job_desc_msg_t, job_record_t};

/// Slurm reads these three symbols by name. `plugin_name` and `plugin_type` are the character
/// arrays themselves (not pointers), and `plugin_version` must equal the version of the
/// slurmctld loading the plugin, hence it comes from the headers at build time.
#[no_mangle]
#[used]
pub static plugin_name: [u8; 28] = *b"teamshare job_submit plugin\0";
#[no_mangle]
#[used]
pub static plugin_type: [u8; 21] = *b"job_submit/teamshare\0";
#[no_mangle]
#[used]
pub static plugin_version: u32 = slurm_sys::VERSION_NUMBER;

/// Called once when slurmctld loads the plugin: load teamshare.toml and start the reloader.
#[no_mangle]
pub extern "C" fn init() -> c_int {
    ffi::guard("init", slurm_sys::SLURM_SUCCESS as c_int, || {
        ffi::install_panic_hook();
        state::init()
    })
}

/// Not called on a normal slurmctld shutdown in 22.05; stops the reloader when it is.
#[no_mangle]
pub extern "C" fn fini() -> c_int {
    ffi::guard("fini", slurm_sys::SLURM_SUCCESS as c_int, state::fini)
}

/// `int job_submit(job_desc_msg_t *job_desc, uint32_t submit_uid, char **err_msg)`
///
/// # Safety
/// Called by slurmctld with a valid request and a valid `err_msg` out-pointer.
#[no_mangle]
pub unsafe extern "C" fn job_submit(
    job_desc: *mut job_desc_msg_t,
    submit_uid: u32,
    err_msg: *mut *mut c_char,
) -> c_int {
    // SAFETY: slurmctld passes a valid request and out-pointer for the duration of the call
    // (this function's contract), which is what ffi::job_submit requires.
    ffi::guard_submit(err_msg, || unsafe {
        ffi::job_submit(job_desc, submit_uid, err_msg)
    })
}

/// `int job_modify(job_desc_msg_t *job_desc, job_record_t *job_ptr, uint32_t submit_uid,
/// char **err_msg)` from 23.02: the refusal's own text reaches the user.
///
/// # Safety
/// Called by slurmctld with a valid request and a valid (or NULL) `err_msg` out-pointer;
/// `job_ptr` is never dereferenced.
#[cfg(slurm_job_modify_err_msg)]
#[no_mangle]
pub unsafe extern "C" fn job_modify(
    job_desc: *mut job_desc_msg_t,
    _job_ptr: *mut job_record_t,
    submit_uid: u32,
    err_msg: *mut *mut c_char,
) -> c_int {
    ffi::guard(
        "job_modify",
        slurm_sys::slurm_err_t::ESLURM_ACCOUNTING_POLICY as c_int,
        // SAFETY: slurmctld passes a valid request and a valid or NULL out-pointer (this
        // function's contract), which is what ffi::job_modify requires.
        || unsafe { ffi::job_modify(job_desc, submit_uid, err_msg) },
    )
}

/// `int job_modify(job_desc_msg_t *job_desc, job_record_t *job_ptr, uint32_t submit_uid)`:
/// three arguments before 23.02 (22.05), so a refusal reaches the user as its error code's
/// text only; teamshare's message goes to slurmctld's log.
///
/// # Safety
/// Called by slurmctld with a valid request; `job_ptr` is never dereferenced.
#[cfg(not(slurm_job_modify_err_msg))]
#[no_mangle]
pub unsafe extern "C" fn job_modify(
    job_desc: *mut job_desc_msg_t,
    _job_ptr: *mut job_record_t,
    submit_uid: u32,
) -> c_int {
    ffi::guard(
        "job_modify",
        slurm_sys::slurm_err_t::ESLURM_ACCOUNTING_POLICY as c_int,
        // SAFETY: slurmctld passes a valid request (this function's contract); a NULL err_msg
        // is allowed by ffi::job_modify.
        || unsafe { ffi::job_modify(job_desc, submit_uid, std::ptr::null_mut()) },
    )
}
