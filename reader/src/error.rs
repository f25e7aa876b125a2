//! The crate's error type.

use std::path::PathBuf;

/// Everything that can go wrong while loading a checkpoint, assembling a prompt or running a
/// reader.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A file of the checkpoint folder could not be read.
    #[error("cannot read {path}: {cause}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The underlying I/O error.
        cause: std::io::Error,
    },
    /// A JSON file of the checkpoint (config.json, an index, ...) is malformed.
    #[error("malformed {path}: {cause}")]
    Json {
        /// The file.
        path: PathBuf,
        /// The parse error.
        cause: serde_json::Error,
    },
    /// The folder holds no weights file in a supported layout.
    #[error(
        "no weights in {dir}: expected model.safetensors, model-XXXXX-of-YYYYY.safetensors with \
         model.safetensors.index.json, or pytorch_model*.bin"
    )]
    NoWeights {
        /// The checkpoint folder.
        dir: PathBuf,
    },
    /// `architectures` in config.json names a model this crate does not implement.
    #[error(
        "unsupported architecture {found:?} (supported: LlamaForCausalLM, LlamaForCausalContextLM, \
         Qwen2ForCausalLM)"
    )]
    UnsupportedArchitecture {
        /// The `architectures` field of config.json.
        found: Vec<String>,
    },
    /// A config.json field has a value this crate does not implement.
    #[error("unsupported config value for `{field}`: {value}")]
    UnsupportedConfig {
        /// The config.json field.
        field: &'static str,
        /// The offending value.
        value: String,
    },
    /// The checkpoint lacks a tensor the model needs.
    #[error("missing tensor `{name}` in the checkpoint")]
    MissingTensor {
        /// Full dotted name, e.g. `model.layers.0.self_attn.q_proj.weight`.
        name: String,
    },
    /// A checkpoint tensor has a shape other than the config implies.
    #[error("tensor `{name}` has shape {actual:?}, expected {expected:?}")]
    ShapeMismatch {
        /// Full dotted name.
        name: String,
        /// Shape implied by config.json.
        expected: Vec<usize>,
        /// Shape found in the checkpoint.
        actual: Vec<usize>,
    },
    /// The caller's input is unusable (empty prompt, token id out of range, ...).
    #[error("invalid input: {reason}")]
    InvalidInput {
        /// What is wrong.
        reason: String,
    },
    /// Text input or stop strings were given but the checkpoint has no tokenizer.json.
    #[error("the checkpoint has no tokenizer.json; pass token ids instead of text")]
    NoTokenizer,
    /// The tokenizer failed to load, encode or decode.
    #[error("tokenizer: {reason}")]
    Tokenizer {
        /// The tokenizer's message.
        reason: String,
    },
    /// A tensor operation failed (device, dtype, out of memory, ...).
    #[error("tensor operation failed: {0}")]
    Tensor(candle_core::Error),
    /// A GGUF file is unreadable or describes something unsupported.
    #[error("{path}: `{key}`: {reason}")]
    Gguf {
        /// The file.
        path: PathBuf,
        /// The metadata key or tensor name at fault (`header` for the file's structure).
        key: String,
        /// What is wrong.
        reason: String,
    },
    /// The prompt and the tokens to generate do not fit the model's positions.
    #[error(
        "the prompt has {prompt_tokens} tokens; with {max_new_tokens} new tokens it exceeds the \
         model's {limit} positions (fewer passages, a lower k, or fewer new tokens)"
    )]
    PromptTooLong {
        /// Tokens of the prompt.
        prompt_tokens: usize,
        /// Tokens asked for.
        max_new_tokens: usize,
        /// The model's `max_position_embeddings`.
        limit: usize,
    },
    /// A chat template failed to compile or render.
    #[error("chat template of {source_name}: {reason}")]
    ChatTemplate {
        /// Where the template came from (a file and key).
        source_name: String,
        /// The renderer's message.
        reason: String,
    },
    /// The dense encoder (extractive reader) failed.
    #[error("sentence encoder: {0}")]
    Encoder(Box<capstan_encoder::Error>),
}

impl From<capstan_encoder::Error> for Error {
    fn from(err: capstan_encoder::Error) -> Self {
        Error::Encoder(Box::new(err))
    }
}

// Not `#[from]`: the cause is already in the message, so it is not repeated as a `source`.
impl From<candle_core::Error> for Error {
    fn from(err: candle_core::Error) -> Self {
        Error::Tensor(err)
    }
}

/// Result with this crate's [`enum@Error`].
pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    pub(crate) fn invalid(reason: impl Into<String>) -> Self {
        Error::InvalidInput {
            reason: reason.into(),
        }
    }

    /// Turns candle's weight-loading errors into [`Error::MissingTensor`] and
    /// [`Error::ShapeMismatch`]; other errors pass through as [`Error::Tensor`].
    pub(crate) fn from_load(err: candle_core::Error) -> Self {
        fn inner(err: &candle_core::Error) -> Option<Error> {
            use candle_core::Error as E;
            match err {
                E::WithBacktrace { inner: e, .. }
                | E::Context { inner: e, .. }
                | E::WithPath { inner: e, .. } => inner(e),
                E::CannotFindTensor { path } => Some(Error::MissingTensor { name: path.clone() }),
                E::UnexpectedShape { msg, expected, got } => {
                    let name = msg.strip_prefix("shape mismatch for ").unwrap_or(msg);
                    Some(Error::ShapeMismatch {
                        name: name.to_string(),
                        expected: expected.dims().to_vec(),
                        actual: got.dims().to_vec(),
                    })
                }
                _ => None,
            }
        }
        inner(&err).unwrap_or(Error::Tensor(err))
    }
}
