//! Reading Slurm in process through libslurm, as squeue and sinfo do, without spawning them.
//!
//! The governor reads every job of the governed partitions and every node's GPUs each pass.
//! Spawning squeue and sinfo for that cost more CPU than the governor's own work (each client
//! reads slurm.conf and loads its plugins), and their output had to be parsed back. Here the
//! same RPCs run in this process: `slurm_load_jobs`, `slurm_load_node` and
//! `slurm_load_partitions`, each given the time of the answer it holds, so that slurmctld sends
//! nothing when nothing changed (`SLURM_NO_CHANGE_IN_DATA`, partitions and nodes most passes).
//! [`Session::change_mark`] tells without reading the jobs whether they may have changed
//! (sdiag's job event counters with the nodes' and partitions' times), so that a pass reads
//! them only then (accountd's `governor::quiet`).
//!
//! Jobs become typed records ([`crate::job_record::JobRecord`]) straight from libslurm's
//! `slurm_job_info_t`, with no text between (states and reasons through the functions squeue
//! uses for them); squeue's text, on the client-command fallback, is read into the same
//! records. So there is one reader of jobs ([`crate::squeue::read_records`]), hardened against
//! what users write, whichever way they came. Nodes are still written out as the text sinfo
//! (`%N|%G|%t`) prints for [`crate::capacity::parse_sinfo`]. The live test `scale::c03` checks
//! that both ways give the same plan.
//!
//! All unsafe code of accountd is in this module: pointers come from libslurm, are read while
//! the message that owns them is alive, and each message is freed once, by its owner.

use std::ffi::CStr;
#[cfg(test)]
use std::ffi::CString;
use std::os::raw::c_char;
use std::ptr;
use std::sync::OnceLock;

use slurm_sys as sys;

use crate::job_record::{JobRecord, JobState, Origin, Records};
use crate::period::UnixSeconds;
use crate::slurm_cli::SLURM_CONF_VAR;
use teamshare_policy::offered::{Offered, PartitionGpus};

mod limits;
mod limits_helper;
mod write;
pub use limits::serve_limits;
pub use limits_helper::{LimitsHelper, HELPER_SUBCOMMAND};
pub use write::LibslurmWriter;

/// The error code libslurm gives when the data has not changed since the time we passed.
const NO_CHANGE_IN_DATA: i32 = 1900;
/// `JOB_COMPLETING` (`SLURM_BIT(15)`, a flag bindgen cannot evaluate).
const JOB_COMPLETING: u32 = 1 << 15;
/// `time_t` values Slurm uses for "not set" besides 0.
const TIME_INFINITE: i64 = u32::MAX as i64;

#[derive(Debug, Clone, thiserror::Error)]
pub enum ApiError {
    #[error("SLURM_CONF is not set: export SLURM_CONF=/path/to/slurm.conf so that the governor can find the cluster")]
    SlurmConfUnset,
    #[error("SLURM_CONF={0} cannot be read: {1}")]
    SlurmConfUnreadable(String, String),
    #[error("libslurm {call}: {message}")]
    Call { call: &'static str, message: String },
}

/// The most bytes of slurm.conf read to check it (a large site's is a few hundred KiB).
const SLURM_CONF_LIMIT: u64 = 64 << 20;

/// libslurm is initialised once per process (slurm.conf and the client plugins); the outcome
/// of the checks before it is kept, so every caller gets the same answer.
fn init() -> Result<(), ApiError> {
    static INIT: OnceLock<Result<(), ApiError>> = OnceLock::new();
    INIT.get_or_init(|| {
        // slurm_init ends the process (Slurm's fatal()) when it cannot read slurm.conf, and a
        // client without SLURM_CONF tries a configless lookup: both are checked first, so that
        // a missing or unreadable file is an error the daemon reports, not an exit.
        let conf = std::env::var_os(SLURM_CONF_VAR).ok_or(ApiError::SlurmConfUnset)?;
        // A readable regular file, read without blocking (a FIFO would hang the open, and
        // libslurm's own read after it).
        if let Err(e) = teamshare_config::read::read_bounded_bytes(
            std::path::Path::new(&conf),
            SLURM_CONF_LIMIT,
        ) {
            return Err(ApiError::SlurmConfUnreadable(
                conf.to_string_lossy().into_owned(),
                e.to_string(),
            ));
        }
        // SAFETY: called once per process (OnceLock), before any other libslurm call; a null
        // argument makes libslurm read SLURM_CONF, which was just checked to be readable.
        unsafe { sys::slurm_init(ptr::null()) };
        Ok(())
    })
    .clone()
}

/// `SHOW_ALL` (`SLURM_BIT(0)` from 23.02, a macro bindgen cannot evaluate; 1 in every release).
const SHOW_ALL: u16 = 1;
/// `SHOW_DETAIL` (`SLURM_BIT(1)`; 2 in every release): slurmctld adds each running job's
/// resources per node (`gres_detail_str`, where its shards sit).
const SHOW_DETAIL: u16 = 2;

/// The error code of the last libslurm call on this thread. libslurm sets errno itself
/// (`slurm_get_errno()` only returned it, and is gone from 24.11's headers).
fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// The last error of a libslurm call on this thread, as Slurm words it.
fn last_error(call: &'static str) -> ApiError {
    let errno = errno();
    // SAFETY: only reads libslurm's static message table.
    let message = unsafe { text(sys::slurm_strerror(errno)) };
    ApiError::Call { call, message }
}

/// A C string from libslurm as owned text (`""` for NULL; invalid UTF-8 replaced).
///
/// # Safety
/// `p` is NULL or points to a NUL-terminated string that stays alive during the call.
unsafe fn text(p: *const c_char) -> String {
    if p.is_null() {
        String::new()
    } else {
        // SAFETY: non-null and NUL-terminated, by the caller's contract.
        unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
    }
}

/// A message libslurm allocated, freed once when replaced or dropped.
struct Owned<T> {
    ptr: *mut T,
    free: unsafe extern "C" fn(*mut T),
}

impl<T> Drop for Owned<T> {
    fn drop(&mut self) {
        // SAFETY: `ptr` came from the matching slurm_load_* call and is freed only here.
        unsafe { (self.free)(self.ptr) }
    }
}

/// A reader of Slurm's jobs, nodes and partitions that keeps each last answer, so that the next
/// request asks only for what changed since.
#[derive(Default)]
pub struct Session {
    jobs: Option<Owned<sys::job_info_msg_t>>,
    nodes: Option<Owned<sys::node_info_msg_t>>,
    partitions: Option<Owned<sys::partition_info_msg_t>>,
    /// [`Session::offered`] for the partitions and nodes answers of these times.
    offered: Option<((sys::time_t, sys::time_t), Offered)>,
    /// RPCs made (the governor counts its Slurm calls per pass).
    pub calls: u64,
    /// Ask for the running jobs' resources per node ([`Session::set_detail`]).
    detail: bool,
}

// SAFETY: the messages are owned by the session alone and libslurm does not tie them to the
// thread that loaded them; a session is used by one thread at a time (&mut self).
unsafe impl Send for Session {}

/// One of libslurm's `slurm_load_*(update_time, &msg, show_flags)` calls.
type Load<T> = unsafe extern "C" fn(sys::time_t, *mut *mut T, u16) -> i32;

impl Session {
    pub fn new() -> Session {
        Session::default()
    }

    /// Whether [`Session::jobs`] asks for each running job's resources per node (`SHOW_DETAIL`:
    /// where its shards sit, [`crate::gres_detail`]), which slurmctld packs for running jobs
    /// only. A change drops the jobs held, so that the next answer is whole and of one kind.
    pub fn set_detail(&mut self, on: bool) {
        if self.detail != on {
            self.detail = on;
            self.jobs = None;
        }
    }

    /// Call `load` with the time of the answer in `slot`; keep the new answer, or the old one
    /// when slurmctld says nothing changed.
    fn refresh<T>(
        slot: &mut Option<Owned<T>>,
        calls: &mut u64,
        call: &'static str,
        load: Load<T>,
        free: unsafe extern "C" fn(*mut T),
        (last_update, flags): (impl Fn(&T) -> sys::time_t, u16),
    ) -> Result<(), ApiError> {
        init()?;
        // SAFETY: a held message is alive until replaced below.
        let since = slot.as_ref().map_or(0, |m| last_update(unsafe { &*m.ptr }));
        let mut out: *mut T = ptr::null_mut();
        *calls += 1;
        // SAFETY: libslurm writes a message it allocated into `out`, or leaves it NULL.
        let rc = unsafe { load(since, &mut out, flags) };
        if rc == 0 && !out.is_null() {
            *slot = Some(Owned { ptr: out, free });
            return Ok(());
        }
        if errno() == NO_CHANGE_IN_DATA && slot.is_some() {
            return Ok(());
        }
        Err(last_error(call))
    }

    /// The jobs of `partitions` that are pending, running, suspended or completing, as typed
    /// records: what `squeue -h -a -p PARTITIONS -t PD,R,CG,S -O <the governor's fields>`
    /// prints (see [`crate::squeue::squeue_command`]), without the text.
    pub fn jobs(&mut self, partitions: &[String]) -> Result<Records, ApiError> {
        let detail = self.detail;
        Self::refresh(
            &mut self.jobs,
            &mut self.calls,
            "slurm_load_jobs",
            sys::slurm_load_jobs,
            sys::slurm_free_job_info_msg,
            (
                |m| m.last_update,
                SHOW_ALL | if detail { SHOW_DETAIL } else { 0 },
            ),
        )?;
        let Some(msg) = &self.jobs else {
            return Ok(Records::default());
        };
        // SAFETY: the message is alive while `self.jobs` holds it; `job_array` has
        // `record_count` records.
        let jobs = unsafe {
            let m = &*msg.ptr;
            if m.job_array.is_null() {
                &[][..]
            } else {
                std::slice::from_raw_parts(m.job_array, m.record_count as usize)
            }
        };
        let mut items = Vec::with_capacity(jobs.len());
        for (i, j) in jobs.iter().enumerate() {
            // SAFETY: every pointer read is a field of a live record of the message.
            if let Some(r) = unsafe { job_record(j, partitions, i + 1) } {
                items.push(Ok(r));
            }
        }
        Ok(Records { items })
    }

    /// The nodes of `partitions`, one line each in the text of `sinfo -h -N -p PARTITIONS -o
    /// '%N|%G|%t'` (see [`crate::capacity::sinfo_command`]); all nodes when `partitions` is
    /// empty.
    pub fn nodes_text(&mut self, partitions: &[String]) -> Result<String, ApiError> {
        self.refresh_nodes()?;
        Ok(self.held_nodes_text(partitions))
    }

    /// Ask for the partitions and the nodes again (slurmctld sends them only if they changed).
    fn refresh_nodes(&mut self) -> Result<(), ApiError> {
        Self::refresh(
            &mut self.partitions,
            &mut self.calls,
            "slurm_load_partitions",
            sys::slurm_load_partitions,
            sys::slurm_free_partition_info_msg,
            (|m| m.last_update, SHOW_ALL),
        )?;
        Self::refresh(
            &mut self.nodes,
            &mut self.calls,
            "slurm_load_node",
            sys::slurm_load_node,
            sys::slurm_free_node_info_msg,
            (|m| m.last_update, SHOW_ALL),
        )
    }

    /// [`Session::nodes_text`] of the answers held, without asking again (after
    /// [`Session::change_mark`], which asked).
    pub fn held_nodes_text(&self, partitions: &[String]) -> String {
        let (Some(parts), Some(nodes)) = (&self.partitions, &self.nodes) else {
            return String::new();
        };
        // SAFETY: both messages are alive while the session holds them; each array has
        // `record_count` records, and their strings live as long as the message.
        unsafe {
            let p = &*parts.ptr;
            let n = &*nodes.ptr;
            let parts = if p.partition_array.is_null() {
                &[][..]
            } else {
                std::slice::from_raw_parts(p.partition_array, p.record_count as usize)
            };
            let nodes = if n.node_array.is_null() {
                &[][..]
            } else {
                std::slice::from_raw_parts(n.node_array, n.record_count as usize)
            };
            let mut wanted: Vec<String> = Vec::new();
            for part in parts {
                let name = text(part.name);
                if partitions.is_empty() || partitions.contains(&name) {
                    let list = text(part.nodes);
                    wanted.extend(crate::squeue::expand_hostlist(&list).unwrap_or_default());
                }
            }
            let wanted: std::collections::BTreeSet<String> = wanted.into_iter().collect();
            let mut out = String::new();
            for node in nodes {
                let name = text(node.name);
                // Slurm leaves a slot without a name for a node removed at run time.
                if name.is_empty() || !wanted.contains(&name) {
                    continue;
                }
                let gres = if node.gres.is_null() {
                    "(null)".to_string()
                } else {
                    text(node.gres)
                };
                let state =
                    text(sys::slurm_node_state_string_compact(node.node_state)).to_lowercase();
                out.push_str(&clean(&name));
                out.push('|');
                out.push_str(&clean(&gres));
                out.push('|');
                out.push_str(&clean(&state));
                out.push('\n');
            }
            out
        }
    }

    /// What tells whether Slurm's jobs or nodes changed since another mark, without reading
    /// the jobs (issue 26): the partitions and nodes asked for again (nothing comes back
    /// when they did not change) and slurmctld's counters of job events (`slurm_get_statistics`,
    /// what sdiag prints; no lock of slurmctld's is taken for it). Three small RPCs where
    /// reading 10,000 jobs is a message of megabytes, packed, hashed and unpacked.
    pub fn change_mark(&mut self) -> Result<ChangeMark, ApiError> {
        self.refresh_nodes()?;
        let events = self.job_events()?;
        let (Some(parts), Some(nodes)) = (&self.partitions, &self.nodes) else {
            return Err(ApiError::Call {
                call: "slurm_load_node",
                message: "no answer held".into(),
            });
        };
        // SAFETY: both messages are alive while the session holds them.
        let stamps = unsafe { ((*parts.ptr).last_update, (*nodes.ptr).last_update) };
        #[allow(clippy::useless_conversion)] // time_t is i64 here, narrower elsewhere
        Ok(ChangeMark {
            events,
            nodes: (i64::from(stamps.0), i64::from(stamps.1)),
        })
    }

    /// slurmctld's counts of jobs submitted, started, completed, cancelled and failed.
    fn job_events(&mut self) -> Result<[u32; 5], ApiError> {
        init()?;
        #[allow(clippy::unnecessary_cast)] // STAT_COMMAND_GET's type is bindgen's
        let mut request = sys::stats_info_request_msg_t {
            command_id: sys::STAT_COMMAND_GET as u16,
        };
        let mut out: *mut sys::stats_info_response_msg_t = ptr::null_mut();
        self.calls += 1;
        // SAFETY: libslurm writes a message it allocated into `out`, or leaves it NULL; the
        // request is read during the call only.
        let rc = unsafe { sys::slurm_get_statistics(&mut out, &mut request) };
        if rc != 0 || out.is_null() {
            return Err(last_error("slurm_get_statistics"));
        }
        let msg = Owned {
            ptr: out,
            free: sys::slurm_free_stats_response_msg,
        };
        // SAFETY: the message is alive while `msg` holds it.
        let m = unsafe { &*msg.ptr };
        Ok([
            m.jobs_submitted,
            m.jobs_started,
            m.jobs_completed,
            m.jobs_canceled,
            m.jobs_failed,
        ])
    }
}

/// Where Slurm stood at one instant, as far as the governor's plan can tell without reading
/// the jobs ([`Session::change_mark`]): two equal marks mean that no job was submitted,
/// started, ended or cancelled between them, and that no node or partition changed (a job's
/// start or end changes its nodes' allocation). What a mark does not show (a user's `scontrol
/// update` of a pending job, a hold, a begin time reached) only a read of the jobs does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChangeMark {
    /// slurmctld's counters of job events, as sdiag prints them (reset at midnight and by
    /// `sdiag -r`: a reset reads as a change).
    events: [u32; 5],
    /// The times of the partitions and nodes answers.
    nodes: (i64, i64),
}

impl ChangeMark {
    /// A mark of these counters and answer times (for tests of what uses marks).
    pub fn of(events: [u32; 5], nodes: (i64, i64)) -> ChangeMark {
        ChangeMark { events, nodes }
    }
}

impl Session {
    /// Every partition of the last answers [`Session::nodes_text`] read, with the GPUs on its
    /// nodes whatever their state (issue 25, finding 4: what a configuration may govern). No
    /// RPC: worked out again only when one of the two answers changed.
    pub fn offered(&mut self) -> Offered {
        let (Some(parts), Some(nodes)) = (&self.partitions, &self.nodes) else {
            return Offered::new();
        };
        // SAFETY: both messages are alive while the session holds them.
        let stamp = unsafe { ((*parts.ptr).last_update, (*nodes.ptr).last_update) };
        if let Some((at, offered)) = &self.offered {
            if *at == stamp {
                return offered.clone();
            }
        }
        // SAFETY: as above; each array has `record_count` records, and their strings live as
        // long as the message.
        let offered = unsafe { offered_by(&*parts.ptr, &*nodes.ptr) };
        self.offered = Some((stamp, offered.clone()));
        offered
    }
}

/// [`Session::offered`] of two live answers.
///
/// # Safety
/// `p` and `n` are live messages of libslurm.
unsafe fn offered_by(p: &sys::partition_info_msg_t, n: &sys::node_info_msg_t) -> Offered {
    let parts = if p.partition_array.is_null() {
        &[][..]
    } else {
        // SAFETY: per this function's contract.
        unsafe { std::slice::from_raw_parts(p.partition_array, p.record_count as usize) }
    };
    let nodes = if n.node_array.is_null() {
        &[][..]
    } else {
        // SAFETY: per this function's contract.
        unsafe { std::slice::from_raw_parts(n.node_array, n.record_count as usize) }
    };
    let mut gpus: std::collections::HashMap<String, PartitionGpus> =
        std::collections::HashMap::with_capacity(nodes.len());
    for node in nodes {
        // SAFETY: the strings of a live record.
        let (name, gres) = unsafe { (text(node.name), text(node.gres)) };
        if name.is_empty() {
            continue;
        }
        // A node whose GRES cannot be read offers no GPU here (the capacity reports it).
        let count = crate::capacity::node_gpus(&gres).unwrap_or_default();
        gpus.insert(
            name,
            PartitionGpus {
                gpus: u32::try_from(count.total).unwrap_or(u32::MAX),
                by_type: count
                    .by_type
                    .into_iter()
                    .map(|(t, k)| (t, u32::try_from(k).unwrap_or(u32::MAX)))
                    .collect(),
            },
        );
    }
    let mut out = Offered::new();
    for part in parts {
        // SAFETY: the strings of a live record.
        let (name, list) = unsafe { (text(part.name), text(part.nodes)) };
        let mut sum = PartitionGpus::default();
        for node in crate::squeue::expand_hostlist(&list).unwrap_or_default() {
            if let Some(g) = gpus.get(&node) {
                sum.gpus = sum.gpus.saturating_add(g.gpus);
                for (t, k) in &g.by_type {
                    let e = sum.by_type.entry(t.clone()).or_insert(0);
                    *e = e.saturating_add(*k);
                }
            }
        }
        out.insert(name, sum);
    }
    out
}

/// Job `j`'s record when it is in one of `partitions` and in a state the governor reads;
/// `number` is its place in libslurm's answer.
///
/// # Safety
/// `j` is a record of a live `job_info_msg_t`.
unsafe fn job_record(
    j: &sys::slurm_job_info_t,
    partitions: &[String],
    number: usize,
) -> Option<JobRecord> {
    let base = j.job_state & sys::JOB_STATE_BASE;
    let wanted_state = base == sys::job_states::JOB_PENDING
        || base == sys::job_states::JOB_RUNNING
        || base == sys::job_states::JOB_SUSPENDED
        || j.job_state & JOB_COMPLETING != 0;
    if !wanted_state {
        return None;
    }
    // SAFETY: `partition` is a string field of `j` (this function's contract).
    let partition = unsafe { text(j.partition) };
    if !partition
        .split(',')
        .any(|p| partitions.iter().any(|want| want == p))
    {
        return None;
    }
    // SAFETY: as above.
    Some(unsafe { job_fields(j, number) })
}

/// Job `j`'s record (see [`job_record`]).
///
/// # Safety
/// `j` is a record of a live `job_info_msg_t`.
unsafe fn job_fields(j: &sys::slurm_job_info_t, number: usize) -> JobRecord {
    // The string fields of `j`, read only through this: each is NULL or a NUL-terminated
    // string owned by the live message (this function's contract). Empty is "not given".
    let field = |p: *mut c_char| {
        // SAFETY: `p` is one of `j`'s string fields, as above.
        unsafe { text(p) }
    };
    let given = |p: *mut c_char| Some(field(p)).filter(|s| !s.trim().is_empty());
    let is_array = !j.array_task_str.is_null() || j.array_task_id != sys::NO_VAL;
    let array_task = if !j.array_task_str.is_null() {
        given(j.array_task_str)
    } else if j.array_task_id != sys::NO_VAL {
        Some(j.array_task_id.to_string())
    } else {
        None
    };
    let reason = if j.state_desc.is_null() {
        // SAFETY: libslurm's table of reason names: a static string for any value.
        unsafe { text(sys::slurm_job_reason_string(u32::from(j.state_reason))) }
    } else {
        field(j.state_desc)
    };
    let tres_alloc = given(j.tres_alloc_str)
        .or_else(|| given(j.tres_req_str))
        .unwrap_or_else(|| "N/A".to_string());
    JobRecord {
        id: u64::from(j.job_id),
        account: field(j.account),
        // Slurm's name of the state with its flags, as squeue prints it (a job being
        // requeued or configured is none of the four the governor reads).
        // SAFETY: libslurm's table of state names: a static string for any value.
        state: JobState::from_name(&unsafe { text(sys::slurm_job_state_string(j.job_state)) }),
        priority: Some(j.priority),
        submit: time(j.submit_time),
        start: time(j.start_time),
        tres_alloc,
        ask: crate::job_record::TresAsk {
            per_job: given(j.tres_per_job),
            per_node: given(j.tres_per_node),
            per_task: given(j.tres_per_task),
            per_socket: given(j.tres_per_socket),
            // Not given: NO_VAL16.
            #[allow(clippy::useless_conversion)] // NO_VAL16 is a u32 or a u16 by release
            sockets_per_node: (u32::from(j.sockets_per_node) != u32::from(sys::NO_VAL16))
                .then(|| u32::from(j.sockets_per_node)),
        },
        num_nodes: Some(j.num_nodes),
        num_tasks: Some(j.num_tasks),
        reason,
        batch: j.batch_flag != 0,
        node_list: field(j.nodes),
        eligible_time: time(j.eligible_time),
        array_job_id: is_array.then(|| u64::from(j.array_job_id)),
        array_task,
        // Whole nodes (`--exclusive`, or a partition's OverSubscribe=EXCLUSIVE). `shared`
        // keeps its meaning in every release (26.05 keeps it for its legacy display).
        #[allow(clippy::useless_conversion)] // the JOB_SHARED_* constants' type varies by release
        whole_node: u32::from(j.shared) == sys::JOB_SHARED_NONE,
        // A heterogeneous job's component: its leader and offset.
        het: (j.het_job_id != 0).then(|| (u64::from(j.het_job_id), j.het_job_offset)),
        // The nodes backfill reserved for a pending job (squeue's SchedNodes).
        sched_nodes: field(j.sched_nodes),
        admin_comment: field(j.admin_comment),
        // SAFETY: `gres_detail_str` holds `gres_detail_cnt` strings of the live message.
        gres_detail: unsafe { strings(j.gres_detail_str, j.gres_detail_cnt) },
        origin: Origin::Record(number),
    }
}

/// An array of C strings from libslurm as owned text (empty for NULL).
///
/// # Safety
/// `p` is NULL or points to `count` pointers, each NULL or a NUL-terminated string, alive
/// during the call.
unsafe fn strings(p: *mut *mut c_char, count: u32) -> Vec<String> {
    if p.is_null() {
        return Vec::new();
    }
    // SAFETY: `count` pointers, by the caller's contract.
    let items = unsafe { std::slice::from_raw_parts(p, count as usize) };
    items
        .iter()
        // SAFETY: each NULL or a live NUL-terminated string, by the caller's contract.
        .map(|s| unsafe { text(*s) })
        .collect()
}

/// A field on one line (squeue prints what Slurm holds; a newline would split a record).
fn clean(s: &str) -> String {
    s.replace(['\n', '\r'], " ")
}

/// A time of a record; `None` when unset (0) or "unknown" (Slurm's infinite).
#[allow(clippy::useless_conversion)] // time_t is i64 here, narrower elsewhere
fn time(t: sys::time_t) -> Option<UnixSeconds> {
    let t = i64::from(t);
    (t != 0 && t < TIME_INFINITE).then_some(t)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_read_back_as_squeue_prints_them() {
        assert_eq!(time(0), None);
        assert_eq!(time(1_714_557_600), Some(1_714_557_600));
        assert_eq!(time(TIME_INFINITE as sys::time_t), None);
        assert_eq!(clean("a\nb"), "a b");
        let s = CString::new("x").unwrap();
        // SAFETY: a live NUL-terminated string.
        assert_eq!(unsafe { text(s.as_ptr()) }, "x");
        // SAFETY: NULL is allowed.
        assert_eq!(unsafe { text(ptr::null()) }, "");
    }
}
