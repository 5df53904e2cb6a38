//! teamshare-replay: `accountd replay`, a period of job history simulated under candidate
//! configurations (issue 13), in its one room `replay` (`teamshare_replay::replay`, re-exported
//! as `accountd::replay`).
//!
//! It imports teamshare-accounting (the history in the store, the accounting model, the
//! reports' rendering), teamshare-slurm (periods, sacct's records, the requeue delay),
//! teamshare-policy (the governor's `plan()`, which the simulation drives) and
//! teamshare-config, never the daemon or the governor's actions on Slurm.
#![deny(unsafe_code)]
// Unit tests are exempt from the workspace's 80-line limit: a scenario reads top to bottom.
#![cfg_attr(test, allow(clippy::too_many_lines))]

// The lower crates' rooms under the paths the replay names them by (`crate::store`, ...).
use teamshare_accounting::{model, report, store};
use teamshare_slurm::{parsable, period, requeue_delay, sacct};

pub mod replay;
