//! teamshare-accounting: the store (every SQL statement of accountd), the accounting model and
//! the reports (DESIGN 5, 6).
//!
//! The rooms, one module each:
//! - `gpu_sample`: one GPU at one sampling tick, the record the nodes spool and the store keeps;
//! - `model`: the accounting model of DESIGN 5 as pure functions;
//! - `store`: the SQLite database and all of accountd's SQL: its migrations, the job runs'
//!   idempotent upserts, the capacity history, the GPU samples and their hourly rollup;
//! - `report`: every report and its rendering: usage, borrowing, lending and cost per team over
//!   a period (`report::teams`), fair-share (`report::fairshare`), utilisation and the jobs with
//!   idle GPUs (`report::utilisation`), as table (`report::table`), CSV or JSON, and the teams
//!   report as a self-contained HTML page with charts of its days (`report::html`); the
//!   arithmetic is `model`'s;
//! - `ingest`: which window of accounting to read, and storing it.
//!
//! It imports teamshare-slurm (periods, sacct's job runs, Slurm's commands) and
//! teamshare-config, never the replay, the governor or the daemon.
#![deny(unsafe_code)]
// Unit tests are exempt from the workspace's 80-line limit: a scenario reads top to bottom.
#![cfg_attr(test, allow(clippy::too_many_lines))]

// teamshare-slurm's rooms under the paths the modules name them by (`crate::period`, ...).
use teamshare_slurm::{period, sacct, slurm_cli};

pub mod gpu_sample;
pub mod ingest;
pub mod model;
pub mod report;
pub mod store;
