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
    match cli::run(args) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {err:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
