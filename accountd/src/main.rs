//! `accountd`: the accounting daemon and admin CLI of teamshare.
#![forbid(unsafe_code)]

mod cli;

use std::io::Write as _;
use std::process::ExitCode;

fn main() -> ExitCode {
    match cli::run() {
        Ok(code) => code,
        // The reader of stdout went away (`accountd report | head`): nothing is wrong.
        Err(err) if cli::is_broken_pipe(&err) => ExitCode::from(cli::EXIT_OK),
        Err(err) => {
            // Not eprintln!: a closed stderr is no reason to panic.
            let _ = writeln!(std::io::stderr().lock(), "accountd: error: {err:#}");
            ExitCode::from(cli::exit_code_for(&err))
        }
    }
}
