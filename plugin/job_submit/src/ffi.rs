//! The only place that reads Slurm's C structs: copy the request out, call the policy, write the
//! answer back with Slurm's allocator.

use std::ffi::{CStr, CString};
use std::os::raw::{c_char, c_int};
use std::panic::{catch_unwind, AssertUnwindSafe};

use slurm_sys::slurm_err_t as err;
use slurm_sys::{job_desc_msg_t, NO_VAL, NO_VAL16};
use teamshare_policy::submit::{Admission, StateView};
use teamshare_policy::{check_submit, GpuAsk, RejectKind, SubmitRequest, Verdict};

use crate::{log, state};

const SUCCESS: c_int = slurm_sys::SLURM_SUCCESS as c_int;

/// Run `f`, turning a panic into `on_panic` and a log line: no panic may unwind into slurmctld.
pub fn guard(what: &str, on_panic: c_int, f: impl FnOnce() -> c_int) -> c_int {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(rc) => rc,
        Err(payload) => {
            let msg = panic_message(payload.as_ref());
            // Logging allocates; if even that panics, swallow it too.
            let _ = catch_unwind(|| log::error(&format!("internal error in {what}: {msg}")));
            on_panic
        }
    }
}

/// [`guard`] for job_submit: a panic also refuses the job with a generic message.
pub fn guard_submit(err_msg: *mut *mut c_char, f: impl FnOnce() -> c_int) -> c_int {
    let rc = guard("job_submit", c_int::MIN, f);
    if rc != c_int::MIN {
        return rc;
    }
    let _ = catch_unwind(|| {
        set_err_msg(
            err_msg,
            "teamshare: internal error, job refused; the administrator can find the cause in the slurmctld log",
        )
    });
    err::ESLURM_ACCOUNTING_POLICY as c_int
}

fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "panic with a non-string payload".to_string()
    }
}

/// # Safety
/// `job_desc` is slurmctld's request for the duration of the call; `err_msg` is its out-pointer.
pub unsafe fn job_submit(
    job_desc: *mut job_desc_msg_t,
    submit_uid: u32,
    err_msg: *mut *mut c_char,
) -> c_int {
    if job_desc.is_null() {
        return SUCCESS;
    }
    // SAFETY: non-null, and slurmctld keeps it valid (under its locks) for this call.
    let desc = unsafe { &*job_desc };
    // SAFETY: as above; the strings are NUL-terminated C strings or NULL.
    let request = unsafe { copy_request(desc, submit_uid) };

    #[cfg(feature = "test-panic")]
    {
        // SAFETY: `comment` is NULL or a NUL-terminated string owned by the request.
        if unsafe { opt_string(desc.comment) }.as_deref() == Some("teamshare-test-panic") {
            panic!("planted test panic (built with feature test-panic)");
        }
    }

    let Some(snapshot) = state::current() else {
        let msg = "teamshare: no valid teamshare.toml is loaded, so GPU jobs cannot be checked; ask the administrator (slurmctld log)";
        if request.gpus != GpuAsk::default() || request.account.is_some() {
            log::info(&format!(
                "reject uid={submit_uid} account={} reason=no_configuration",
                request.account.as_deref().unwrap_or("-")
            ));
            set_err_msg(err_msg, msg);
            return slurm_sys::SLURM_ERROR;
        }
        return SUCCESS;
    };

    let governor = state::governor();
    let now = unix_now();
    let max_age =
        i64::try_from(snapshot.config.governance.state_max_age.as_secs()).unwrap_or(i64::MAX);
    let verdict = match governor.as_deref() {
        Some(gs) if now.saturating_sub(gs.generated_at) <= max_age => {
            state::with_admitted(gs.generated_at, |admitted| {
                let v = check_submit(
                    &snapshot.config,
                    &request,
                    StateView::Fresh {
                        state: gs,
                        admitted,
                        now,
                    },
                );
                if let Verdict::Accept(a) = &v {
                    admitted.record(a);
                }
                v
            })
        }
        other => {
            let v = check_submit(&snapshot.config, &request, StateView::Stale);
            if v.admission().is_some_and(|a| a.team.is_some())
                || matches!(&v, Verdict::Reject(r) if r.kind == RejectKind::StaleState)
            {
                let why = match other {
                    Some(gs) => format!(
                        "last published {} s ago",
                        now.saturating_sub(gs.generated_at)
                    ),
                    None => "nothing published yet".to_string(),
                };
                state::note_staleness(true, &why);
            }
            v
        }
    };
    if governor.is_some_and(|gs| now.saturating_sub(gs.generated_at) <= max_age) {
        state::note_staleness(false, "");
    }

    match verdict {
        Verdict::Accept(admission) => {
            // SAFETY: `job_desc` is valid and exclusively ours for this call (slurmctld holds
            // its locks); strings written are Slurm-allocated.
            unsafe { apply(job_desc, &admission) };
            SUCCESS
        }
        Verdict::Reject(r) => {
            log::info(&format!(
                "reject uid={submit_uid} account={} reason={} msg=\"{}\"",
                request.account.as_deref().unwrap_or("-"),
                r.kind.key(),
                r.message
            ));
            set_err_msg(err_msg, &r.message);
            error_code(r.kind)
        }
    }
}

fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// Write the admission into the request: the internal QOS and the priority.
///
/// # Safety
/// `job_desc` is slurmctld's request, valid and not aliased for the duration of the call.
unsafe fn apply(job_desc: *mut job_desc_msg_t, admission: &Admission) {
    // SAFETY: per this function's contract.
    let desc = unsafe { &mut *job_desc };
    if let Some(qos) = admission.qos {
        if let Ok(c) = CString::new(qos) {
            // SAFETY: the old string (if any) came from Slurm's allocator and is freed with
            // it; the new one is allocated by Slurm, which frees it with the request.
            unsafe {
                if !desc.qos.is_null() {
                    slurm_sys::slurm_xfree((&mut desc.qos as *mut *mut c_char).cast());
                }
                desc.qos = slurm_sys::slurm_xstrdup(c.as_ptr());
            }
        }
    }
    // A priority of 0 is the user's `--hold`: keep it (the governor ranks the job once it is
    // released).
    if let Some(p) = admission.priority {
        if desc.priority != 0 {
            desc.priority = p;
        }
    }
    if let Some(secs) = admission.park_secs {
        let until = unix_now().saturating_add(secs);
        desc.begin_time = until as _;
    }
}

/// `scontrol update` on a job. The request holds only the changed fields; the job record is
/// never read (its layout is internal to slurmctld), so only what the update itself says is
/// checked. 22.05 passes no err_msg here: the refusal reaches the user as the error code.
///
/// # Safety
/// `job_desc` is slurmctld's request for the duration of the call.
pub unsafe fn job_modify(job_desc: *mut job_desc_msg_t, submit_uid: u32) -> c_int {
    if job_desc.is_null() {
        return SUCCESS;
    }
    // SAFETY: non-null and valid for this call.
    let desc = unsafe { &*job_desc };
    // SAFETY: as above.
    let request = unsafe { copy_request(desc, submit_uid) };
    let Some(snapshot) = state::current() else {
        return SUCCESS;
    };
    // teamshare owns the QOS and the priority of governed jobs: users may hold (priority 0)
    // and release (INFINITE) their jobs, nothing else.
    if submit_uid != 0 {
        let priority_change =
            desc.priority != NO_VAL && desc.priority != 0 && desc.priority != slurm_sys::INFINITE;
        if request.qos.is_some() || priority_change {
            log::info(&format!(
                "reject modify uid={submit_uid} reason=internal_lever qos={} priority={}",
                request.qos.as_deref().unwrap_or("-"),
                if priority_change {
                    desc.priority.to_string()
                } else {
                    "-".into()
                }
            ));
            return err::ESLURM_ACCESS_DENIED as c_int;
        }
    }
    // Without the account in the update the team is unknown here; Slurm's association limits
    // (GrpTRES set by `accountd setup-slurm`) still bound the team.
    if request.account.is_none() {
        return SUCCESS;
    }
    match check_submit(&snapshot.config, &request, StateView::Stale) {
        Verdict::Accept(_) => SUCCESS,
        // An update is judged on what it says, not on current usage.
        Verdict::Reject(r) if r.kind == RejectKind::StaleState => SUCCESS,
        Verdict::Reject(r) => {
            log::info(&format!(
                "reject modify uid={submit_uid} account={} reason={} msg=\"{}\"",
                request.account.as_deref().unwrap_or("-"),
                r.kind.key(),
                r.message
            ));
            error_code(r.kind)
        }
    }
}

fn error_code(kind: RejectKind) -> c_int {
    (match kind {
        RejectKind::NoTeam | RejectKind::UnknownTeam => err::ESLURM_INVALID_ACCOUNT,
        RejectKind::InvalidGres => err::ESLURM_INVALID_GRES,
        RejectKind::OverTeamLimit => err::ESLURM_ACCOUNTING_POLICY,
        RejectKind::NoConfiguration | RejectKind::StaleState => err::ESLURM_ACCOUNTING_POLICY,
        RejectKind::UnknownClass | RejectKind::InternalQos => err::ESLURM_INVALID_QOS,
        RejectKind::LargerThanCluster => err::ESLURM_INVALID_GRES,
    }) as c_int
}

/// # Safety
/// Every `char *` of `desc` is NULL or a valid NUL-terminated string.
unsafe fn copy_request(desc: &job_desc_msg_t, submit_uid: u32) -> SubmitRequest {
    let u32_opt = |v: u32| (v != NO_VAL && v != 0).then_some(v);
    let u16_opt = |v: u16| (v != NO_VAL16 as u16 && v != 0).then_some(u32::from(v));
    // SAFETY (all opt_string calls): guaranteed by this function's contract.
    unsafe {
        SubmitRequest {
            account: opt_string(desc.account),
            partition: opt_string(desc.partition),
            qos: opt_string(desc.qos),
            submit_uid,
            user_id: if desc.user_id == NO_VAL {
                submit_uid
            } else {
                desc.user_id
            },
            gpus: GpuAsk {
                tres_per_job: opt_string(desc.tres_per_job),
                tres_per_node: opt_string(desc.tres_per_node),
                tres_per_task: opt_string(desc.tres_per_task),
                tres_per_socket: opt_string(desc.tres_per_socket),
                min_nodes: u32_opt(desc.min_nodes),
                num_tasks: u32_opt(desc.num_tasks),
                ntasks_per_node: u16_opt(desc.ntasks_per_node),
                sockets_per_node: u16_opt(desc.sockets_per_node),
            },
        }
    }
}

/// # Safety
/// `p` is NULL or a valid NUL-terminated string.
unsafe fn opt_string(p: *const c_char) -> Option<String> {
    if p.is_null() {
        return None;
    }
    // SAFETY: non-null and NUL-terminated per the contract.
    let s = unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned();
    (!s.is_empty()).then_some(s)
}

/// Hand a message to slurmctld, which frees it with `xfree`: it must come from Slurm's
/// allocator (`slurm_xstrdup`), never from Rust's or libc's.
fn set_err_msg(err_msg: *mut *mut c_char, msg: &str) {
    if err_msg.is_null() {
        return;
    }
    let Ok(c) = CString::new(msg.replace('\0', " ")) else {
        return;
    };
    // SAFETY: `err_msg` is slurmctld's valid out-pointer; an earlier plugin's message is freed
    // with Slurm's own xfree before ours replaces it; slurm_xstrdup copies `c`, which outlives
    // the call.
    unsafe {
        if !(*err_msg).is_null() {
            slurm_sys::slurm_xfree(err_msg.cast());
        }
        *err_msg = slurm_sys::slurm_xstrdup(c.as_ptr());
    }
}
