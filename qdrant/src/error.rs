//! The Qdrant store's error type.

/// What can go wrong with an index in a Qdrant cluster.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An index location that is not `qdrant://HOST:PORT/COLLECTION`.
    #[error("index location `{location}`: {message}")]
    Location {
        /// The text given.
        location: String,
        /// What is wrong with it.
        message: String,
    },
    /// No node of the cluster answered within the retry window.
    #[error("{location} is unavailable: {message}")]
    Unavailable {
        /// The location (nodes and collection).
        location: String,
        /// The last failure.
        message: String,
    },
    /// The cluster answered with an error that retrying will not mend.
    #[error("{location}: {what}: {message}")]
    Refused {
        /// The location.
        location: String,
        /// The call that failed.
        what: String,
        /// The server's message.
        message: String,
    },
    /// The collection does not exist.
    #[error(
        "{location}: no such collection (create it with `capstan index CORPUS --out {location}`)"
    )]
    NoCollection {
        /// The location.
        location: String,
    },
    /// The collection was built otherwise than this run would build or read it.
    #[error("{location} was built with {key} = {built}, not {given}: {advice}")]
    Mismatch {
        /// The location.
        location: String,
        /// The setting that differs.
        key: &'static str,
        /// Its value in the collection.
        built: String,
        /// Its value here.
        given: String,
        /// What to do.
        advice: &'static str,
    },
    /// The collection holds something Capstan did not write.
    #[error("{location}: {message}")]
    Foreign {
        /// The location.
        location: String,
        /// What is wrong.
        message: String,
    },
    /// A document failed to be written; the message names it.
    #[error("{location}: document `{doc_id}` was not written: {message}")]
    Document {
        /// The location.
        location: String,
        /// The document.
        doc_id: String,
        /// Why.
        message: String,
    },
    /// A bad setting (`--part`, shard counts, the API key).
    #[error("{name}: {message}")]
    Setting {
        /// The setting as users spell it.
        name: &'static str,
        /// What is wrong.
        message: String,
    },
    /// Chunking, encoding or reading the corpus failed.
    #[error(transparent)]
    Indexer(#[from] Box<capstan_indexer::Error>),
}

impl From<capstan_indexer::Error> for Error {
    fn from(e: capstan_indexer::Error) -> Self {
        Error::Indexer(Box::new(e))
    }
}

impl From<Error> for capstan_retriever::Error {
    /// An unreachable cluster stays `Unavailable` (503 in the HTTP API);
    /// everything else is the store's own error.
    fn from(e: Error) -> Self {
        match e {
            Error::Unavailable { location, message } => {
                capstan_retriever::Error::Unavailable { location, message }
            }
            Error::Indexer(e) => capstan_retriever::Error::Index(e),
            other => capstan_retriever::Error::Backend(Box::new(other)),
        }
    }
}

/// The crate's result type.
pub type Result<T> = std::result::Result<T, Error>;
