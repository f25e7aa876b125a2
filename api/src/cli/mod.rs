//! Subcommands of the `capstan` binary.

mod model;

use clap::{Parser, Subcommand};

/// Capstan: retrieval-augmented long-context question answering.
#[derive(Debug, Parser)]
#[command(name = "capstan", version, about, long_about = None)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Inspect and run generative checkpoints (parity checks).
    Model(model::ModelArgs),
}

/// Runs the parsed command line.
pub fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Model(args) => model::run(args),
    }
}
