//! The only place that reads Slurm's C structs: copy the request out, call the policy, write the
//! answer back with Slurm's allocator.

use std::ffi::{CStr, CString};
use std::os::raw::{c_char, c_int};
use std::panic::{catch_unwind, AssertUnwindSafe};

use slurm_sys::slurm_err_t as err;
use slurm_sys::{job_desc_msg_t, NO_VAL, NO_VAL16};
use teamshare_config::Config;
use teamshare_policy::inputs::judge_state;
use teamshare_policy::submit::{
    apply_ntasks_per_gpu, apply_whole_nodes, het_component_partition, Admission, HetJobTally,
    StateView,
};
use teamshare_policy::{
    check_modify, check_submit, check_without_config, GpuAsk, ModifyRequest, RejectKind,
    SubmitRequest, Verdict,
};

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

/// Send panic messages to slurmctld's log, with where they happened, instead of Rust's default
/// hook writing them to slurmctld's stderr. The guards still catch the panic and log what it
/// interrupted. Installed once, by `init`.
pub fn install_panic_hook() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        std::panic::set_hook(Box::new(|info| {
            let place = info
                .location()
                .map(|l| format!("{}:{}", l.file(), l.line()))
                .unwrap_or_else(|| "unknown place".to_string());
            log::error(&format!(
                "panic at {place}: {}",
                panic_message(info.payload())
            ));
        }));
    });
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
    let request = unsafe { read_request(desc, submit_uid) };

    #[cfg(feature = "test-panic")]
    {
        // SAFETY: `comment` is NULL or a NUL-terminated string owned by the request.
        if unsafe { opt_string(desc.comment) }.as_deref() == Some("teamshare-test-panic") {
            panic!("planted test panic (built with feature test-panic)");
        }
    }

    let Some(config) = state::current() else {
        return match check_without_config(&request) {
            Verdict::Accept(_) => SUCCESS,
            Verdict::Reject(r) => refuse(submit_uid, &request.account, &r, err_msg),
        };
    };

    let het_offset = (desc.het_job_offset != NO_VAL).then_some(desc.het_job_offset);
    let verdict = judge_submit(&config, &request, het_offset);
    let verdict = tally_het_job(&config, het_offset, verdict);
    match verdict {
        Verdict::Accept(admission) => {
            // SAFETY: `job_desc` is valid and exclusively ours for this call (slurmctld holds
            // its locks); strings written are Slurm-allocated.
            unsafe { apply(job_desc, &admission) };
            SUCCESS
        }
        Verdict::Reject(r) => refuse(submit_uid, &request.account, &r, err_msg),
    }
}

/// The request as the policy reads it: copied out of `desc`, with `--ntasks-per-gpu` and
/// `--exclusive` applied.
///
/// # Safety
/// `desc`'s strings are NUL-terminated C strings or NULL.
unsafe fn read_request(desc: &job_desc_msg_t, submit_uid: u32) -> SubmitRequest {
    // SAFETY: per this function's contract.
    let mut request = unsafe { copy_request(desc, submit_uid) };
    apply_ntasks_per_gpu(&mut request.gpus, u16_given(desc.ntasks_per_tres));
    // `--exclusive`: every GPU of each node (the largest node the governor last saw).
    #[allow(clippy::useless_conversion)] // the JOB_SHARED_* constants' type varies by release
    if u32::from(desc.shared) == u32::from(slurm_sys::JOB_SHARED_NONE) {
        let seen = state::governor();
        let empty = std::collections::BTreeMap::new();
        let (n, by_type) = seen
            .as_deref()
            .map_or((0, &empty), |s| (s.node_gpus, &s.node_gpus_by_type));
        apply_whole_nodes(&mut request.gpus, n, by_type);
    }
    request
}

/// The verdict on a request under `config`: a component of a heterogeneous job (`het_offset`)
/// naming a partition Slurm does not have is refused; any other request is judged against the
/// governor's state where it is current, else as `on_stale_state` says.
fn judge_submit(config: &Config, request: &SubmitRequest, het_offset: Option<u32>) -> Verdict {
    let governor = state::governor();
    let now = unix_now();
    let staleness = judge_state(governor.as_deref(), config, now);
    // A component naming a partition Slurm does not have: refused before Slurm creates any
    // component (slurmctld 22.05's cancel of the components it created can deadlock).
    let unknown_partition = match (het_offset, governor.as_deref()) {
        (Some(_), Some(gs)) if staleness.is_current() => gs
            .slurm_partitions
            .as_ref()
            .and_then(|o| het_component_partition(request.partition.as_deref(), o)),
        _ => None,
    };
    match (unknown_partition, governor.as_deref()) {
        (Some(r), _) => Verdict::Reject(r),
        (None, Some(gs)) if staleness.is_current() => {
            state::note_staleness(&staleness);
            state::with_admitted(gs, |admitted| {
                let v = check_submit(
                    config,
                    request,
                    StateView::Fresh {
                        state: gs,
                        admitted,
                        now,
                    },
                );
                if let Verdict::Accept(a) = &v {
                    admitted.record(a, unix_now_ms());
                }
                v
            })
        }
        _ => {
            let v = check_submit(config, request, StateView::Stale);
            // Logged when it matters: a governed job decided without current state.
            if v.admission().is_some_and(|a| a.team.is_some())
                || matches!(&v, Verdict::Reject(r) if r.kind == RejectKind::StaleState)
            {
                state::note_staleness(&staleness);
            }
            v
        }
    }
}

/// The components of a heterogeneous job come one call each, in order, in one RPC on one
/// thread: their sum per team is checked against the team's ceiling.
fn tally_het_job(config: &Config, het_offset: Option<u32>, verdict: Verdict) -> Verdict {
    match verdict {
        Verdict::Accept(admission) => {
            match HET_JOB.with(|t| t.borrow_mut().add(config, het_offset, &admission)) {
                Some(r) => Verdict::Reject(r),
                None => Verdict::Accept(admission),
            }
        }
        other => {
            // A refused component ends its heterogeneous job.
            HET_JOB.with(|t| *t.borrow_mut() = HetJobTally::default());
            other
        }
    }
}

thread_local! {
    /// The heterogeneous job being submitted on this thread (see [`HetJobTally`]).
    static HET_JOB: std::cell::RefCell<HetJobTally> =
        std::cell::RefCell::new(HetJobTally::default());
}

/// Log a refusal at info with uid, account and reason, and hand the message to the user.
fn refuse(
    submit_uid: u32,
    account: &Option<String>,
    r: &teamshare_policy::Rejection,
    err_msg: *mut *mut c_char,
) -> c_int {
    tracing::info!(
        "reject uid={submit_uid} account={} reason={} msg=\"{}\"",
        account.as_deref().unwrap_or("-"),
        r.kind.key(),
        r.message
    );
    set_err_msg(err_msg, &r.message);
    error_code(r.kind)
}

fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

fn unix_now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
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
        set_qos(desc, qos);
    }
    // A priority of 0 is the user's `--hold`: keep it (the governor ranks the job once it is
    // released).
    if let Some(p) = admission.priority {
        if desc.priority != 0 {
            desc.priority = p;
        }
    }
    // The user's own later begin time stays (Admission::begin_time).
    #[allow(clippy::useless_conversion)] // time_t is i64 here, narrower elsewhere
    if let Some(until) = admission.begin_time(i64::from(desc.begin_time), unix_now()) {
        desc.begin_time = until as _;
    }
}

/// Replace the request's QOS with a Slurm-allocated copy of `qos`.
fn set_qos(desc: &mut job_desc_msg_t, qos: &str) {
    if let Ok(c) = CString::new(qos) {
        // SAFETY: the old string (if any) came from Slurm's allocator and is freed with it; the
        // new one is allocated by Slurm, which frees it with the request.
        unsafe {
            if !desc.qos.is_null() {
                slurm_sys::slurm_xfree((&mut desc.qos as *mut *mut c_char).cast());
            }
            desc.qos = slurm_sys::slurm_xstrdup(c.as_ptr());
        }
    }
}

/// `scontrol update` on a job. The request holds only the changed fields; the job record is
/// never read (its layout is internal to slurmctld), so the rules of
/// `teamshare_policy::modify` decide from what the update itself says. The refusal's text goes
/// to the log, and to the user through `err_msg` where the release passes one (23.02 on;
/// NULL before: the user sees the error code's text).
///
/// # Safety
/// `job_desc` is slurmctld's request for the duration of the call; `err_msg` is NULL or its
/// out-pointer.
pub unsafe fn job_modify(
    job_desc: *mut job_desc_msg_t,
    submit_uid: u32,
    err_msg: *mut *mut c_char,
) -> c_int {
    if job_desc.is_null() {
        return SUCCESS;
    }
    // SAFETY: non-null and valid for this call.
    let desc = unsafe { &mut *job_desc };
    // SAFETY: as above; the strings are NUL-terminated C strings or NULL.
    let copied = unsafe { copy_request(desc, submit_uid) };
    let Some(config) = state::current() else {
        return SUCCESS;
    };
    let request = ModifyRequest {
        submit_uid,
        account: copied.account,
        partition: copied.partition,
        qos: copied.qos,
        priority: (desc.priority != NO_VAL).then_some(desc.priority),
        gpus: copied.gpus,
        ntasks_per_gpu: u16_given(desc.ntasks_per_tres),
    };
    // The cluster's size (per type) only from a current state; the rest needs no state.
    let governor = state::governor();
    let current = governor
        .as_deref()
        .filter(|gs| judge_state(Some(gs), &config, unix_now()).is_current());
    match check_modify(&config, &request, current) {
        Verdict::Accept(admission) => {
            if let Some(qos) = admission.qos {
                set_qos(desc, qos);
            }
            SUCCESS
        }
        Verdict::Reject(r) => {
            tracing::info!(
                "reject modify uid={submit_uid} account={} reason={} msg=\"{}\"",
                request.account.as_deref().unwrap_or("-"),
                r.kind.key(),
                r.message
            );
            set_err_msg(err_msg, &r.message);
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
        RejectKind::UntypedGpus
        | RejectKind::SeveralGpuTypes
        | RejectKind::GpuTypeNotOffered
        | RejectKind::GpuShare => err::ESLURM_INVALID_GRES,
        // job_modify: 22.05 shows only the code's text, so the code carries the gist there.
        RejectKind::QosChange | RejectKind::PriorityChange => err::ESLURM_ACCESS_DENIED,
        RejectKind::IncompleteUpdate => err::ESLURM_INVALID_GRES,
        RejectKind::UnknownPartition => err::ESLURM_INVALID_PARTITION_NAME,
    }) as c_int
}

/// # Safety
/// Every `char *` of `desc` is NULL or a valid NUL-terminated string.
unsafe fn copy_request(desc: &job_desc_msg_t, submit_uid: u32) -> SubmitRequest {
    // NO_VAL is "not given"; 0 is given (the policy reads 0 as no count where that is
    // Slurm's meaning).
    let u32_opt = |v: u32| (v != NO_VAL).then_some(v);
    // SAFETY: every opt_string call reads a field of `desc`, NULL or a NUL-terminated string
    // by this function's contract.
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
                ntasks_per_node: u16_given(desc.ntasks_per_node),
                sockets_per_node: u16_given(desc.sockets_per_node),
            },
            array: opt_string(desc.array_inx),
            waits: begins_later(desc.begin_time)
                || given(desc.dependency)
                || given(desc.reservation),
        }
    }
}

/// A begin time ahead of now (0: none given).
#[allow(clippy::useless_conversion)] // time_t is i64 here, narrower elsewhere
fn begins_later(begin: slurm_sys::time_t) -> bool {
    i64::from(begin) > unix_now()
}

/// A string field that holds something: not NULL, not empty (read without copying it).
///
/// # Safety
/// `p` is NULL or a valid NUL-terminated string.
unsafe fn given(p: *const c_char) -> bool {
    // SAFETY: non-null and NUL-terminated per the contract: its first byte is readable.
    !p.is_null() && unsafe { *p } != 0
}

/// A 16-bit count, `None` for NO_VAL16 (not given).
fn u16_given(v: u16) -> Option<u32> {
    (v != NO_VAL16 as u16).then_some(u32::from(v))
}

/// NULL is "not given"; an empty string is a value (`qos=` asks for no QOS, `TresPerNode=`
/// clears), so it is kept.
///
/// # Safety
/// `p` is NULL or a valid NUL-terminated string.
unsafe fn opt_string(p: *const c_char) -> Option<String> {
    if p.is_null() {
        return None;
    }
    // SAFETY: non-null and NUL-terminated per the contract.
    Some(unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
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
