//! `accountd`: the accounting daemon and admin CLI of teamshare.
#![forbid(unsafe_code)]

mod cli;

use std::process::ExitCode;

fn main() -> ExitCode {
    match cli::run() {
        Ok(code) => code,
        Err(err) => {
            eprintln!("accountd: error: {err:#}");
            ExitCode::from(cli::exit_code_for(&err))
        }
    }
}
