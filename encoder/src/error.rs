//! The encoder's error type.

use std::path::PathBuf;

/// What can go wrong loading the encoder or embedding with it.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The encoder folder is missing a file or holds something unusable (its message names
    /// the file).
    #[error("encoder {path}: {message}")]
    Load {
        /// The encoder folder.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// A model computation failed.
    #[error("encoder computation failed: {0}")]
    Candle(#[from] candle_core::Error),
}

/// The encoder's result type.
pub type Result<T> = std::result::Result<T, Error>;
