//! The indexer's error type.

use std::path::PathBuf;

impl From<capstan_encoder::Error> for Error {
    fn from(err: capstan_encoder::Error) -> Self {
        match err {
            capstan_encoder::Error::Load { path, message } => Error::Encoder { path, message },
            capstan_encoder::Error::Candle(e) => Error::Candle(e),
        }
    }
}

/// Everything that can go wrong while reading a corpus, encoding it, or
/// building, opening or changing an index. Messages name the file, line or
/// field at fault so a user can fix their input.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A file or folder could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file or folder.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// A line of a corpus file is not what Capstan can index.
    #[error("{path}:{line}: {problem}")]
    BadLine {
        /// The corpus file.
        path: PathBuf,
        /// 1-based line number.
        line: usize,
        /// What is wrong with it.
        problem: LineProblem,
    },
    /// A document (file or line) has no indexable text.
    #[error("{path}: {problem}")]
    BadDocument {
        /// The corpus file.
        path: PathBuf,
        /// What is wrong with it.
        problem: LineProblem,
    },
    /// The corpus path is neither a JSONL file nor a folder of documents.
    #[error("{0}: not a corpus (expected a .jsonl file, a .txt/.md/.html/.pdf/.docx/.epub file, or a folder of them)")]
    NotACorpus(PathBuf),
    /// The corpus holds no document at all.
    #[error("{0}: the corpus holds no document")]
    EmptyCorpus(PathBuf),
    /// The dense encoder folder is missing a file or holds something unusable.
    #[error("encoder {path}: {message}")]
    Encoder {
        /// The encoder folder.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// A model computation failed.
    #[error("encoder computation failed: {0}")]
    Candle(#[from] candle_core::Error),
    /// The index folder cannot be used as it is.
    #[error("index {path}: {message}")]
    Index {
        /// The index folder.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// The index was made with another encoder than the one given.
    #[error("index {path} was built with {built}, but the encoder given is {given}: use the encoder it was built with or rebuild the index")]
    EncoderMismatch {
        /// The index folder.
        path: PathBuf,
        /// The encoder recorded in the manifest (folder, dimension, config hash).
        built: String,
        /// The encoder given now, described the same way.
        given: String,
    },
    /// A file of the index does not hold what the manifest recorded
    /// (missing, truncated, extended or changed bytes), or a loader refused it.
    #[error(
        "index file {path} is damaged: {message}; restore the index from a copy or rebuild it"
    )]
    Damaged {
        /// The damaged file.
        path: PathBuf,
        /// What is wrong with it.
        message: String,
    },
    /// The BM25 index (tantivy) failed.
    #[error("BM25 index {path}: {source}")]
    Tantivy {
        /// The BM25 folder.
        path: PathBuf,
        /// The underlying error.
        source: tantivy::TantivyError,
    },
    /// The passage store (sled) failed.
    #[error("passage store {path}: {source}")]
    Store {
        /// The store folder.
        path: PathBuf,
        /// The underlying error.
        source: sled::Error,
    },
    /// The HNSW graph could not be written or read.
    #[error("HNSW graph {path}: {message}")]
    Hnsw {
        /// The graph folder.
        path: PathBuf,
        /// What failed.
        message: String,
    },
    /// A setting is out of range.
    #[error("invalid setting {name}: {message}")]
    Setting {
        /// The setting's name (as the CLI flag spells it).
        name: &'static str,
        /// Why it is rejected.
        message: String,
    },
}

/// What is wrong with one corpus line or document.
#[derive(Debug, thiserror::Error)]
pub enum LineProblem {
    /// Not valid UTF-8.
    #[error("invalid UTF-8")]
    InvalidUtf8,
    /// Not a JSON object.
    #[error("malformed JSON: {0}")]
    Json(String),
    /// A required field is absent.
    #[error("missing field `{0}`")]
    MissingField(&'static str),
    /// A field has the wrong JSON type.
    #[error("field `{field}` must be a {expected}")]
    WrongType {
        /// The field.
        field: &'static str,
        /// The type it should have.
        expected: &'static str,
    },
    /// The document has no text.
    #[error("document `{0}` is empty")]
    Empty(String),
    /// The document is larger than the limit.
    #[error("the document is {bytes} bytes, more than the limit of {limit} (--max-document-bytes; --skip-bad skips it)")]
    TooLarge {
        /// Its size.
        bytes: usize,
        /// The limit.
        limit: usize,
    },
    /// The id was used before.
    #[error("duplicate document id `{id}` (first seen at {first})")]
    DuplicateId {
        /// The id.
        id: String,
        /// Where it was first seen (`file:line`).
        first: String,
    },
    /// A PDF, DOCX or EPUB file yields no text.
    #[error("{0}")]
    Extract(#[from] crate::extract::ExtractError),
}

impl Error {
    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io {
            path: path.into(),
            source,
        }
    }

    pub(crate) fn tantivy(
        path: &std::path::Path,
        source: impl Into<tantivy::TantivyError>,
    ) -> Self {
        Error::Tantivy {
            path: path.to_path_buf(),
            source: source.into(),
        }
    }

    pub(crate) fn store(path: &std::path::Path, source: sled::Error) -> Self {
        Error::Store {
            path: path.to_path_buf(),
            source,
        }
    }

    pub(crate) fn index(path: impl Into<PathBuf>, message: impl Into<String>) -> Self {
        Error::Index {
            path: path.into(),
            message: message.into(),
        }
    }
}

/// The indexer's result type.
pub type Result<T> = std::result::Result<T, Error>;
