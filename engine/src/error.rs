//! The engine's error type. Each variant says whose fault it is ([`Error::is_client_error`]),
//! which the HTTP server maps to a status in one place.

use crate::reader_kind::ReaderKind;

/// What can go wrong while answering or generating.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A queue is full: retry later (HTTP 503 with Retry-After).
    #[error("the server is at capacity ({queue} queue full); retry shortly")]
    Overloaded {
        /// Which queue.
        queue: &'static str,
    },
    /// A request's deadline passed before it ran (HTTP 503).
    #[error("the request waited {waited_ms} ms in the {queue} queue, past its deadline of {deadline_ms} ms; retry shortly")]
    Expired {
        /// Which queue.
        queue: &'static str,
        /// How long it waited.
        waited_ms: u64,
        /// The deadline (`--queue-timeout`).
        deadline_ms: u64,
    },
    /// A generative reader was asked for but not configured.
    #[error("reader `{}` is not loaded: configure its checkpoint (--{}-model or capstan.toml)", .0.name(), .0.name())]
    NotLoaded(ReaderKind),
    /// A request needs more KV memory than the scheduler has in all.
    #[error("the request needs {need} tokens of KV cache, more than the server's budget of {budget} (--kv-tokens): ask with fewer passages or new tokens, or raise the budget")]
    TooLarge {
        /// Tokens the request would reserve.
        need: usize,
        /// The budget (`--kv-tokens`).
        budget: usize,
    },
    /// The reader refused or failed.
    #[error(transparent)]
    Reader(#[from] capstan_reader::Error),
    /// Retrieval refused or failed.
    #[error(transparent)]
    Retriever(#[from] capstan_retriever::Error),
    /// A panic was caught; the message is for the log, not for clients.
    #[error("internal error: {0}")]
    Panic(String),
    /// The scheduler's thread is gone (it stopped after a panic it could not contain).
    #[error("the generation scheduler has stopped")]
    SchedulerStopped,
}

impl Error {
    /// Whether the request itself is at fault (HTTP 4xx) rather than the server.
    pub fn is_client_error(&self) -> bool {
        match self {
            Error::NotLoaded(_) | Error::TooLarge { .. } => true,
            Error::Reader(e) => matches!(
                e,
                capstan_reader::Error::PromptTooLong { .. }
                    | capstan_reader::Error::InvalidInput { .. }
                    | capstan_reader::Error::ChatTemplate { .. }
            ),
            Error::Retriever(e) => matches!(e, capstan_retriever::Error::Invalid { .. }),
            _ => false,
        }
    }

    /// Whether the index's backend did not answer (a Qdrant cluster down;
    /// HTTP 503): the request may succeed once it is back.
    pub fn is_unavailable(&self) -> bool {
        matches!(
            self,
            Error::Retriever(capstan_retriever::Error::Unavailable { .. })
        )
    }

    /// Whether the server is busy (HTTP 503): the client should retry.
    pub fn is_overloaded(&self) -> bool {
        matches!(
            self,
            Error::Overloaded { .. } | Error::Expired { .. } | Error::SchedulerStopped
        )
    }
}

impl From<capstan_indexer::Error> for Error {
    fn from(e: capstan_indexer::Error) -> Self {
        Error::Retriever(e.into())
    }
}

/// The engine's result type.
pub type Result<T> = std::result::Result<T, Error>;

/// Runs `f`, turning a panic into [`Error::Panic`].
pub fn guarded<T>(f: impl FnOnce() -> Result<T>) -> Result<T> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f))
        .unwrap_or_else(|panic| Err(Error::Panic(panic_message(panic.as_ref()).to_string())))
}

/// The text of a caught panic.
pub fn panic_message(panic: &(dyn std::any::Any + Send)) -> &str {
    panic
        .downcast_ref::<String>()
        .map(String::as_str)
        .or_else(|| panic.downcast_ref::<&str>().copied())
        .unwrap_or("unknown panic")
}
