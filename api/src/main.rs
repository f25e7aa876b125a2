//! `capstan`: the command-line interface and HTTP API of Capstan.
//!
//! Every subcommand lives in its own module under `cli/`; this file only parses
//! arguments and dispatches, and maps errors to a non-zero exit.

mod cli;
mod config;
mod server;

use clap::Parser;

fn main() -> std::process::ExitCode {
    let args = cli::Cli::parse();
    if !args.is_server() {
        // A closed stdout (`capstan search ... --json | head`) ends the command quietly, as it
        // ends other Unix tools, instead of a panic in `println!`. The server keeps Rust's
        // ignored SIGPIPE: a client closing its socket must not kill it.
        #[cfg(unix)]
        // SAFETY: restoring the default disposition of SIGPIPE before any thread starts.
        unsafe {
            libc::signal(libc::SIGPIPE, libc::SIG_DFL);
        }
    }
    match cli::run(args) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {}", cli::error_chain(&err));
            std::process::ExitCode::FAILURE
        }
    }
}
