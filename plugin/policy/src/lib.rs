//! teamshare's policy: what the plugins and the governor decide, as pure functions over owned
//! values.
//!
//! Nothing here touches FFI or the network: the plugin's FFI layer copies Slurm's request into
//! these types, the governor (in accountd) feeds it what squeue shows, and tests drive the same
//! functions without slurmctld. The one module that reads files, [`inputs`], is what the
//! plugin's watcher thread uses to load its configuration and the governor's state safely; the
//! submit path never calls it.
#![forbid(unsafe_code)]
// Unit tests are exempt from the workspace's 80-line limit: a scenario reads top to bottom.
#![cfg_attr(test, allow(clippy::too_many_lines))]

pub mod array;
pub mod governance;
pub mod gres;
pub mod inputs;
pub mod modify;
pub mod offered;
pub mod priority;
pub mod submit;
#[cfg(test)]
mod test_config;

pub use modify::{check_modify, ModifyRequest};
pub use submit::{
    check_submit, check_without_config, gpus_requested, GpuAsk, RejectKind, Rejection,
    SubmitRequest, Verdict,
};
