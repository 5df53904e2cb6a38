//! The governor's writes through libslurm, in process (issue 26): the RPCs scontrol and
//! scancel send, without a process per call.
//!
//! What each write sends is what the client command sends for the same words (Slurm's
//! src/scontrol/update_job.c and src/scancel/scancel.c, 22.05 to 26.05):
//! - `scontrol update jobid=A,B ...`: one `slurm_update_job2` per job named, the names as
//!   scontrol hands them on (`12_[4-9]` becomes `12_4-9`), the fields as scontrol fills them
//!   (`StartTime=now` is the time now, `now+N` N seconds on);
//! - `scontrol hold` / `uhold` / `release`: an update with priority 0 (and `alloc_sid`
//!   `ALLOC_SID_USER_HOLD` for a user's hold) or `INFINITE`;
//! - `scontrol requeue[hold] Incomplete NAME`: `slurm_requeue2` with `JOB_RUNNING` (and
//!   `JOB_REQUEUE_HOLD`);
//! - `scancel --state=RUNNING NAME`: `slurm_kill_job2(NAME, SIGKILL, 0)`. scancel leaves out a
//!   job that does not run; here "already done" and "no such job" are that answer, and the
//!   actuator has checked that the run it ends is running just before ([`SlurmWrite::running`]).
//!   A batch job requeued by someone else in between is cancelled pending where scancel (whose
//!   own check has the same window in 22.05) would skip it; only the `reclaim_mode = "cancel"`
//!   configuration cancels batch jobs.
//!
//! Team limits go through slurmdbd's API in the limits helper process
//! ([`super::LimitsHelper`], [`LibslurmWriter::with_limits_helper`]), or through sacctmgr
//! ([`CommandWriter::set_grp_tres`]) where no helper is given.

use std::collections::BTreeMap;
use std::ffi::CString;
use std::os::raw::c_char;
use std::ptr;

use slurm_sys as sys;

use super::{errno, init, text, time, LimitsHelper, SHOW_ALL};
use crate::slurm_write::{Begin, CommandWriter, JobUpdate, RunningJob, SlurmWrite, WriteError};

/// `SIGKILL`, what scancel sends when no signal is named.
const SIGKILL: u16 = 9;

/// Writes through libslurm (see the module's documentation).
#[derive(Debug, Default)]
pub struct LibslurmWriter {
    rpcs: u64,
    /// Where team limits go: the helper, or sacctmgr when there is none.
    limits: Option<LimitsHelper>,
}

impl LibslurmWriter {
    /// Limits through sacctmgr.
    pub fn new() -> LibslurmWriter {
        LibslurmWriter::default()
    }

    /// Limits through slurmdbd's API in a helper process run as `program
    /// slurm-limits-helper` (accountd's own binary).
    pub fn with_limits_helper(program: std::path::PathBuf) -> LibslurmWriter {
        LibslurmWriter {
            rpcs: 0,
            limits: Some(LimitsHelper::new(program)),
        }
    }

    /// One `slurm_update_job2` per name; `Ok(false)` when Slurm refused any.
    fn update_each(
        &mut self,
        names: &[String],
        fill: impl Fn(&mut sys::job_desc_msg_t),
    ) -> Result<bool, WriteError> {
        init().map_err(|e| call_error("slurm_init", "", e.to_string()))?;
        let mut all = true;
        for name in names {
            let Some(id) = job_id_str(name) else {
                all = false;
                continue;
            };
            // SAFETY: slurm_init_job_desc_msg sets every field of the struct it is given.
            let mut desc: sys::job_desc_msg_t = unsafe { std::mem::zeroed() };
            // SAFETY: `desc` is a valid job_desc_msg_t to initialise.
            unsafe { sys::slurm_init_job_desc_msg(&mut desc) };
            fill(&mut desc);
            desc.job_id_str = id.as_ptr().cast_mut();
            let mut resp: *mut sys::job_array_resp_msg_t = ptr::null_mut();
            self.rpcs += 1;
            // SAFETY: `desc` is initialised and its strings (`id`, the comment) outlive the
            // call; libslurm writes a response it allocated into `resp`, or leaves it NULL.
            let rc = unsafe { sys::slurm_update_job2(&mut desc, &mut resp) };
            // SAFETY: `resp` is NULL or the response of this call, freed once here.
            let refused_some = unsafe { free_array_resp(resp) };
            all &= rc == 0 && !refused_some;
        }
        Ok(all)
    }

    /// `slurm_requeue2` or `slurm_kill_job2` of one job, with the message of its refusal.
    fn end(&mut self, name: &str, hold: Option<bool>) -> Result<(), WriteError> {
        let call = if hold.is_some() {
            "slurm_requeue2"
        } else {
            "slurm_kill_job2"
        };
        init().map_err(|e| call_error(call, name, e.to_string()))?;
        let id = job_id_str(name)
            .ok_or_else(|| call_error(call, name, "not a job name Slurm reads".into()))?;
        self.rpcs += 1;
        let rc = match hold {
            Some(hold) => {
                let mut flags = sys::job_states::JOB_RUNNING;
                if hold {
                    flags |= sys::JOB_REQUEUE_HOLD;
                }
                let mut resp: *mut sys::job_array_resp_msg_t = ptr::null_mut();
                // SAFETY: `id` is a NUL-terminated string alive for the call; libslurm writes
                // a response it allocated into `resp`, or leaves it NULL.
                let rc = unsafe { sys::slurm_requeue2(id.as_ptr().cast_mut(), flags, &mut resp) };
                // SAFETY: `resp` is NULL or this call's response, freed once here.
                if unsafe { free_array_resp(resp) } && rc == 0 {
                    return Err(call_error(call, name, "refused for the job".into()));
                }
                rc
            }
            // SAFETY: `id` is a NUL-terminated string alive for the call; no sibling.
            None => unsafe { sys::slurm_kill_job2(id.as_ptr(), SIGKILL, 0, ptr::null()) },
        };
        if rc == 0 {
            return Ok(());
        }
        let code = errno();
        let not_running = [
            sys::slurm_err_t::ESLURM_ALREADY_DONE,
            sys::slurm_err_t::ESLURM_INVALID_JOB_ID,
        ];
        #[allow(clippy::useless_conversion)] // slurm_err_t's type varies by release
        if hold.is_none() && not_running.iter().any(|c| i64::from(*c) == i64::from(code)) {
            return Ok(());
        }
        Err(call_error(call, name, strerror(code)))
    }

    /// The job `id` if it runs now (`slurm_load_job`).
    fn running_one(&mut self, id: u64) -> Result<Option<RunningJob>, WriteError> {
        let Ok(job_id) = u32::try_from(id) else {
            return Ok(None);
        };
        let mut msg: *mut sys::job_info_msg_t = ptr::null_mut();
        self.rpcs += 1;
        // SAFETY: libslurm writes a message it allocated into `msg`, or leaves it NULL.
        let rc = unsafe { sys::load_one_job(&mut msg, job_id, SHOW_ALL) };
        if rc != 0 || msg.is_null() {
            let code = errno();
            #[allow(clippy::useless_conversion)] // slurm_err_t's type varies by release
            if i64::from(code) == i64::from(sys::slurm_err_t::ESLURM_INVALID_JOB_ID) {
                return Ok(None);
            }
            return Err(call_error(
                "slurm_load_job",
                &id.to_string(),
                strerror(code),
            ));
        }
        // SAFETY: `msg` is this call's message: `job_array` has `record_count` records, read
        // before the message is freed, once, below.
        let found = unsafe {
            let m = &*msg;
            let jobs = if m.job_array.is_null() {
                &[][..]
            } else {
                std::slice::from_raw_parts(m.job_array, m.record_count as usize)
            };
            let found = jobs
                .iter()
                .find(|j| {
                    u64::from(j.job_id) == id
                        && j.job_state & sys::JOB_STATE_BASE == sys::job_states::JOB_RUNNING
                })
                .map(|j| running_job(j));
            sys::slurm_free_job_info_msg(msg);
            found
        };
        Ok(found)
    }
}

impl SlurmWrite for LibslurmWriter {
    fn update(&mut self, names: &[String], update: &JobUpdate) -> Result<bool, WriteError> {
        let comment = match &update.admin_comment {
            Some(c) => match CString::new(c.as_str()) {
                Ok(c) => Some(c),
                Err(_) => return Ok(false),
            },
            None => None,
        };
        let now = chrono::Utc::now().timestamp();
        self.update_each(names, |d| {
            if let Some(p) = update.priority {
                d.priority = p;
            }
            match update.begin {
                Some(Begin::Now) => d.begin_time = now as sys::time_t,
                Some(Begin::In(secs)) => d.begin_time = now.saturating_add(secs) as sys::time_t,
                None => {}
            }
            if let Some(c) = &comment {
                d.admin_comment = c.as_ptr().cast_mut();
            }
        })
    }

    fn hold(&mut self, names: &[String]) -> Result<bool, WriteError> {
        self.update_each(names, |d| {
            d.priority = 0;
            d.alloc_sid = 0;
        })
    }

    fn user_hold(&mut self, names: &[String]) -> Result<bool, WriteError> {
        self.update_each(names, |d| {
            d.priority = 0;
            d.alloc_sid = sys::ALLOC_SID_USER_HOLD;
        })
    }

    fn release(&mut self, names: &[String]) -> Result<bool, WriteError> {
        self.update_each(names, |d| d.priority = sys::INFINITE)
    }

    fn requeue(&mut self, name: &str, hold: bool) -> Result<(), WriteError> {
        self.end(name, Some(hold))
    }

    fn cancel_running(&mut self, name: &str) -> Result<(), WriteError> {
        self.end(name, None)
    }

    fn set_grp_tres(&mut self, cluster: &str, account: &str, tres: &str) -> Result<(), WriteError> {
        match &mut self.limits {
            Some(helper) => helper.set_grp_tres(cluster, account, tres),
            None => CommandWriter.set_grp_tres(cluster, account, tres),
        }
    }

    fn running(&mut self, jobs: &[(u64, String)]) -> Result<BTreeMap<u64, RunningJob>, WriteError> {
        init().map_err(|e| call_error("slurm_init", "", e.to_string()))?;
        let mut out = BTreeMap::new();
        for (id, _) in jobs {
            if let Some(run) = self.running_one(*id)? {
                out.insert(*id, run);
            }
        }
        Ok(out)
    }

    fn rpcs(&self) -> u64 {
        self.rpcs + self.limits.as_ref().map_or(0, |h| h.requests)
    }
}

/// A job's name as scontrol hands it to libslurm: `12_[4-9]` is sent as `12_4-9`; `None` for a
/// name that cannot be one (a NUL in it).
fn job_id_str(name: &str) -> Option<CString> {
    let sent = match name.split_once("_[") {
        Some((id, tasks)) => format!("{id}_{}", tasks.trim_end_matches(']')),
        None => name.to_string(),
    };
    CString::new(sent).ok()
}

/// Free an array response; whether it says Slurm refused any of its jobs.
///
/// # Safety
/// `resp` is NULL or a response libslurm allocated, not freed yet.
unsafe fn free_array_resp(resp: *mut sys::job_array_resp_msg_t) -> bool {
    if resp.is_null() {
        return false;
    }
    // SAFETY: a live response: `error_code` has `job_array_count` entries, or is NULL.
    unsafe {
        let r = &*resp;
        let refused = !r.error_code.is_null()
            && std::slice::from_raw_parts(r.error_code, r.job_array_count as usize)
                .iter()
                .any(|c| *c != 0);
        sys::slurm_free_job_array_resp(resp);
        refused
    }
}

/// A running job's record as the conditional actions read it.
///
/// # Safety
/// `j` is a record of a live `job_info_msg_t`.
unsafe fn running_job(j: &sys::slurm_job_info_t) -> RunningJob {
    // SAFETY: string fields of the live record (this function's contract).
    let (user, comment) = unsafe { (text(j.user_name), text(j.admin_comment)) };
    RunningJob {
        start: time(j.start_time),
        batch: j.batch_flag != 0,
        // Not always set in the record: looked up as squeue does; the uid where none is known.
        user: if user.is_empty() {
            user_name(j.user_id).unwrap_or_else(|| j.user_id.to_string())
        } else {
            user
        },
        admin_comment: comment,
    }
}

/// The name of user `uid` in the passwd database.
fn user_name(uid: u32) -> Option<String> {
    let mut buf = vec![0 as c_char; 4096];
    // SAFETY: an all-zero passwd is a valid value for getpwuid_r to overwrite.
    let mut pw: libc::passwd = unsafe { std::mem::zeroed() };
    let mut found: *mut libc::passwd = ptr::null_mut();
    // SAFETY: every pointer is valid for the call and `buf` has the length given.
    let rc = unsafe { libc::getpwuid_r(uid, &mut pw, buf.as_mut_ptr(), buf.len(), &mut found) };
    if rc != 0 || found.is_null() {
        return None;
    }
    // SAFETY: getpwuid_r set `pw_name` to a NUL-terminated string inside `buf`.
    Some(unsafe { text(pw.pw_name) })
}

fn strerror(code: i32) -> String {
    // SAFETY: libslurm's table of messages: a static string for any value.
    unsafe { text(sys::slurm_strerror(code)) }
}

fn call_error(call: &'static str, target: &str, message: String) -> WriteError {
    WriteError::Call {
        call,
        target: target.to_string(),
        message,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_users_name_is_found_by_uid() {
        assert_eq!(user_name(0).as_deref(), Some("root"));
    }

    #[test]
    fn names_reach_slurm_as_scontrol_sends_them() {
        let sent = |n: &str| job_id_str(n).map(|c| c.into_string().unwrap());
        assert_eq!(sent("12").as_deref(), Some("12"));
        assert_eq!(sent("12_7").as_deref(), Some("12_7"));
        assert_eq!(sent("12_[4-9,11]").as_deref(), Some("12_4-9,11"));
        assert_eq!(sent("1\u{0}2"), None);
    }
}
