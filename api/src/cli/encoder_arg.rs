//! Where the dense encoder comes from: `--encoder`, `CAPSTAN_ENCODER`, or the
//! folder `scripts/setup.sh` fills.

use std::path::PathBuf;

pub use capstan_indexer::capstan_home;

/// The default encoder folder: `$CAPSTAN_HOME/models/all-MiniLM-L6-v2`, with
/// `CAPSTAN_HOME` defaulting to `~/.cache/capstan`.
pub fn default_encoder() -> PathBuf {
    capstan_home().join("models").join("all-MiniLM-L6-v2")
}

/// `--encoder-dtype`: the numbers the dense encoder computes with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum EncoderDtypeArg {
    /// 32-bit floats (the parity mode; Capstan's packed BERT on the CPU).
    F32,
    /// int8 linear layers (weights per channel, activations per token), f32 elsewhere: the
    /// CPU's fast mode.
    Int8,
    /// bfloat16 (candle's padded BERT: a GPU's choice).
    Bf16,
    /// float16 (candle's padded BERT: a GPU's choice).
    F16,
}

impl From<EncoderDtypeArg> for capstan_indexer::EncoderPrecision {
    fn from(arg: EncoderDtypeArg) -> Self {
        match arg {
            EncoderDtypeArg::F32 => Self::F32,
            EncoderDtypeArg::Int8 => Self::Int8,
            EncoderDtypeArg::Bf16 => Self::Bf16,
            EncoderDtypeArg::F16 => Self::F16,
        }
    }
}
