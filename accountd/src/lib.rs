//! accountd: teamshare's accounting (DESIGN 5, 6).
//!
//! The parts, one module each:
//! - `slurm_setup`: making Slurm's associations match teamshare.toml;
//! - `sample`: NVML GPU samples on the nodes, their spool and their collection into the store;
//! - `governor`: Slurm's priorities and limits kept matching the governance rules;
//! - `daemon`: `accountd run`: the governor's thread, the ingest thread (sacct, runaway runs,
//!   samples, capacity), the configuration followed;
//! - `config_watch`: teamshare.toml followed while the daemon runs (changes, SIGHUP);
//! - `logging`: the daemon's and the sampler's log (`tracing`, one subscriber on stderr);
//! - `metrics`: the Prometheus exposition and the HTTP server of `/metrics`;
//! - `status`: `accountd status`, each team's quota, use, limit, lending and waiting jobs now,
//!   from Slurm and the governor's state;
//!
//! Slurm's records (`period`, `parsable`, `slurm_cli`, `slurm_api`, `squeue`, `sacct`,
//! `capacity`, `requeue_delay`, `requeue_check`) are the crate teamshare-slurm's
//! (accountd/crates/slurm); the store, the model, the reports and the ingest (`gpu_sample`,
//! `model`, `store`, `report`, `ingest`) are teamshare-accounting's (accountd/crates/accounting);
//! `replay`, the simulation of `accountd replay`, is teamshare-replay's (accountd/crates/replay).
//! All are re-exported here under their old paths.
//!
//! The command line (`src/main.rs`, `src/cli/`) is a thin layer over these.
#![deny(unsafe_code)]
// Unit tests are exempt from the workspace's 80-line limit: a scenario reads top to bottom.
#![cfg_attr(test, allow(clippy::too_many_lines))]

pub use teamshare_accounting::{gpu_sample, ingest, model, report, store};
pub use teamshare_replay::replay;
pub use teamshare_slurm::{
    capacity, gres_detail, job_record, parsable, period, requeue_check, requeue_delay, sacct,
    slurm_api, slurm_cli, slurm_write, squeue,
};

pub mod config_watch;
pub mod daemon;
pub mod governor;
pub mod logging;
pub mod metrics;
pub mod sample;
pub mod slurm_setup;
pub mod status;
#[cfg(test)]
mod test_support;
