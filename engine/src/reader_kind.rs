//! Which reader answers: named by requests, the CLI and errors alike.

use serde::{Deserialize, Serialize};

/// Which reader answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum ReaderKind {
    /// The best sentence of the retrieved passages (dense encoder only).
    Extractive,
    /// A Llama-family decoder reading the passages in its prompt.
    Llama,
    /// CAPE (CEPE checkpoints): decoder passages plus encoder chunks.
    Cape,
}

impl ReaderKind {
    /// The reader's name as users spell it.
    pub fn name(self) -> &'static str {
        match self {
            ReaderKind::Extractive => "extractive",
            ReaderKind::Llama => "llama",
            ReaderKind::Cape => "cape",
        }
    }
}

impl std::str::FromStr for ReaderKind {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "extractive" => Ok(ReaderKind::Extractive),
            "llama" => Ok(ReaderKind::Llama),
            "cape" => Ok(ReaderKind::Cape),
            other => Err(format!(
                "unknown reader `{other}` (expected extractive, llama or cape)"
            )),
        }
    }
}
