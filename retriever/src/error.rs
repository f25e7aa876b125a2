//! The retriever's error type.

use std::path::PathBuf;

/// What can go wrong while retrieving or evaluating retrieval.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The index or the encoder failed.
    #[error(transparent)]
    Index(Box<capstan_indexer::Error>),
    /// A request asked for something out of range.
    #[error("invalid {name}: {message}")]
    Invalid {
        /// The parameter (as a user spells it).
        name: &'static str,
        /// Why.
        message: String,
    },
    /// The store's backend did not answer (a Qdrant cluster down or
    /// unreachable); the same request may succeed later.
    #[error("{location} is unavailable: {message}")]
    Unavailable {
        /// The store (a `qdrant://` URL).
        location: String,
        /// What failed.
        message: String,
    },
    /// The store's backend refused or failed a request, or holds something
    /// Capstan did not write (the backend's own error, whose message names
    /// the store).
    #[error(transparent)]
    Backend(Box<dyn std::error::Error + Send + Sync>),
    /// An evaluation file is malformed.
    #[error("{path}:{line}: {message}")]
    Dataset {
        /// The file.
        path: PathBuf,
        /// 1-based line (0 when the whole file is at fault).
        line: usize,
        /// What is wrong.
        message: String,
    },
}

// The question encoder's errors read as the index's (a missing encoder folder names it).
impl From<capstan_encoder::Error> for Error {
    fn from(err: capstan_encoder::Error) -> Self {
        capstan_indexer::Error::from(err).into()
    }
}

impl From<capstan_indexer::Error> for Error {
    fn from(err: capstan_indexer::Error) -> Self {
        Error::Index(Box::new(err))
    }
}

/// The retriever's result type.
pub type Result<T> = std::result::Result<T, Error>;
