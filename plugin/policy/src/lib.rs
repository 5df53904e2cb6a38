//! teamshare's policy: what the plugins and the governor decide, as pure functions over owned
//! values.
//!
//! Nothing here touches FFI, files or the network: the plugin's FFI layer copies Slurm's request
//! into these types, the governor (in accountd) feeds it what squeue shows, and tests drive the
//! same functions without slurmctld.
#![forbid(unsafe_code)]

pub mod governance;
pub mod gres;
pub mod priority;
pub mod submit;

pub use submit::{
    check_submit, gpus_requested, GpuAsk, RejectKind, Rejection, SubmitRequest, Verdict,
};
