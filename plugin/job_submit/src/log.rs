//! slurmctld's logger, always with a fixed "%s" format so no text becomes a format string.

use std::ffi::CString;

const PREFIX: &str = "job_submit/teamshare: ";

fn c_line(msg: &str) -> CString {
    let line = format!("{PREFIX}{msg}").replace('\0', " ");
    // Interior NULs were just removed, so this cannot fail; fall back to the prefix anyway.
    CString::new(line).unwrap_or_else(|_| CString::from(c"job_submit/teamshare: (unprintable)"))
}

pub fn info(msg: &str) {
    let line = c_line(msg);
    // SAFETY: slurm_info is a printf-like logger resolved in slurmctld; the format is a fixed
    // "%s" and the argument a valid NUL-terminated string that outlives the call.
    unsafe { slurm_sys::slurm_info(c"%s".as_ptr(), line.as_ptr()) }
}

pub fn error(msg: &str) {
    let line = c_line(msg);
    // SAFETY: as in `info`.
    unsafe { slurm_sys::slurm_error(c"%s".as_ptr(), line.as_ptr()) }
}
