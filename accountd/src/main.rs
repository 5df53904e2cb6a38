//! `accountd`: the accounting daemon and admin CLI of teamshare.
#![forbid(unsafe_code)]

mod cli;

use std::io::Write as _;
use std::process::ExitCode;

// The replay's allocator (1.4-1.6x faster on a year; docs/design/accountd-libraries.md).
#[cfg(feature = "mimalloc")]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    // Array task lists in full (Slurm shortens them to 64 characters by default), for the
    // governor's reads through libslurm, which takes this from the environment once. Set
    // before any thread starts.
    if std::env::var_os("SLURM_BITSTR_LEN").is_none() {
        std::env::set_var("SLURM_BITSTR_LEN", "0");
    }
    match cli::run() {
        Ok(code) => code,
        // The reader of stdout went away (`accountd report | head`): nothing is wrong.
        Err(err) if cli::is_broken_pipe(&err) => cli::ExitStatus::Success.into(),
        Err(err) => {
            // Not eprintln!: a closed stderr is no reason to panic.
            let _ = writeln!(std::io::stderr().lock(), "accountd: error: {err:#}");
            cli::exit_code_for(&err).into()
        }
    }
}
