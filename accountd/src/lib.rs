//! accountd: teamshare's accounting (DESIGN 5, 6).
//!
//! The parts, one module each:
//! - `sacct`: the sacct invocation and the parser of its output (job runs);
//! - `store`: the SQLite database, its migrations and idempotent upserts;
//! - `ingest`: which window of accounting to read, and storing it;
//! - `report`: usage and cost per team over a period, rendered as table, CSV or JSON;
//! - `capacity`: the governed capacity measured with sinfo;
//! - `slurm_setup`: making Slurm's associations match teamshare.toml;
//! - `slurm_cli`: running Slurm's client commands; `period`: instants and periods;
//! - `sample`: NVML GPU samples on the nodes, their collection, utilisation and idle GPU-hours.
//!
//! The command line (`src/main.rs`, `src/cli.rs`) is a thin layer over these.
#![forbid(unsafe_code)]

pub mod capacity;
pub mod governor;
pub mod ingest;
pub mod model;
pub mod period;
pub mod report;
pub mod sacct;
pub mod sample;
pub mod slurm_cli;
pub mod slurm_setup;
pub mod store;
