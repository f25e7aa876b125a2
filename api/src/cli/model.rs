//! `capstan model ...`: forward / generate on a checkpoint folder.

use clap::Args;

/// Arguments of `capstan model`.
#[derive(Debug, Args)]
pub struct ModelArgs {}

/// Runs `capstan model`.
pub fn run(_args: ModelArgs) -> anyhow::Result<()> {
    anyhow::bail!("not yet implemented")
}
