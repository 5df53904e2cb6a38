//! teamshare-slurm: accountd's reads of Slurm (DESIGN 5, 6), below everything teamshare
//! computes from them.
//!
//! The rooms, one module each:
//! - `slurm_cli`: running Slurm's client commands; `parsable`: the one reader of their
//!   `|`-separated output and its malformed-line error; `period`: instants and periods;
//! - `sacct`: the sacct invocation and the parser of its output (job runs);
//! - `job_record`: one job as Slurm holds it, typed (from libslurm, or squeue's text);
//! - `squeue`: the governor's reader of those records; `gres_detail`: where a running job's
//!   shards sit, from the records' per-node detail;
//! - `capacity`: the governed capacity measured with sinfo;
//! - `requeue_delay`: Slurm's requeue delay, lifted once it protects nothing; `requeue_check`:
//!   requeues that may have met a run's own end, told apart from accounting;
//! - `slurm_write`: the governor's writes to Slurm behind one trait, with the client commands'
//!   writer and a fake for tests;
//! - `slurm_api`: the governor's reads of jobs, nodes and partitions through libslurm (the
//!   only unsafe code of accountd); this crate links libslurm (build.rs).
//!
//! It imports teamshare-config, teamshare-policy and slurm-sys, never the accounting, the
//! replay or the daemon: it knows no SQL.
#![deny(unsafe_code)]
// Unit tests are exempt from the workspace's 80-line limit: a scenario reads top to bottom.
#![cfg_attr(test, allow(clippy::too_many_lines))]

pub mod capacity;
pub mod gres_detail;
pub mod job_record;
pub mod parsable;
pub mod period;
pub mod requeue_check;
pub mod requeue_delay;
pub mod sacct;
#[allow(unsafe_code)]
pub mod slurm_api;
pub mod slurm_cli;
pub mod slurm_write;
pub mod squeue;
