//! `capstan.toml`: settings of `ask`, `serve` and `eval qa`. Every setting
//! can be overridden by a command-line flag or its environment variable
//! (flag > environment > file > default).

use std::path::{Path, PathBuf};

use anyhow::Context;
use serde::Deserialize;

/// The file's contents; every field optional.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    /// `[retrieval]`
    #[serde(default)]
    pub retrieval: RetrievalConfig,
    /// `[reader]`
    #[serde(default)]
    pub reader: ReaderConfig,
    /// `[server]`
    #[serde(default)]
    pub server: ServerConfig,
}

/// `[retrieval]`
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RetrievalConfig {
    /// bm25 | dense | hybrid
    pub mode: Option<String>,
    /// Passages per question.
    pub k: Option<usize>,
    /// Dense encoder folder (default: the index's).
    pub encoder: Option<PathBuf>,
}

/// `[reader]`
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReaderConfig {
    /// extractive | llama | cape
    pub default: Option<String>,
    /// Generative checkpoint: a Hugging Face folder or a .gguf file.
    pub llama_model: Option<PathBuf>,
    /// CEPE checkpoint folder.
    pub cape_model: Option<PathBuf>,
    /// cached | projected | auto | auto:MIB: where CAPE keeps cross-attention keys and values.
    pub cape_cross_kv: Option<String>,
    /// f32 | f16 | bf16: the generative models' KV cache (default: f16 for GGUF files on the
    /// CPU, the activations' dtype otherwise).
    pub kv_cache: Option<String>,
    /// cpu | cuda | auto: where the readers and the encoder (questions, sentences) run.
    pub device: Option<String>,
    /// Generated tokens at most.
    pub max_new_tokens: Option<usize>,
    /// Passages in the CAPE decoder.
    pub decoder_passages: Option<usize>,
    /// Strongest passages at both ends of the prompt.
    pub lost_in_the_middle: Option<bool>,
    /// Question before and after the documents.
    pub query_aware: Option<bool>,
    /// span | free: a generative answer copied from the passages, or free text.
    pub answer: Option<String>,
    /// passages | sentences:N: what the Llama reader reads of each passage.
    pub context: Option<String>,
    /// The instruction opening the Llama reader's prompt.
    pub instruction: Option<String>,
    /// The best passage last, next to the question.
    pub best_last: Option<bool>,
    /// A worked example in the Llama reader's prompt.
    pub example: Option<bool>,
    /// rank | stable: the documents' order in the Llama reader's prompt.
    pub passage_order: Option<capstan_engine::context::PassageOrder>,
    /// rules | model: how a conversation's follow-up is made to stand alone for retrieval.
    pub rewrite: Option<capstan_engine::pipeline::Rewrite>,
}

/// `[server]`
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerConfig {
    /// Listen address.
    pub addr: Option<String>,
    /// Bearer token required on every route but /health.
    pub api_key: Option<String>,
    /// Retrieval/extractive workers.
    pub workers: Option<usize>,
    /// Waiting requests before 503.
    pub queue: Option<usize>,
    /// Concurrent generations.
    pub max_generations: Option<usize>,
    /// Largest request body in bytes.
    pub max_body_bytes: Option<usize>,
    /// Longest question in characters.
    pub max_question_chars: Option<usize>,
    /// Largest k.
    pub max_k: Option<usize>,
    /// Seconds a connection may take to send a request's headers, counted
    /// from when it is ready for one (so it also closes idle keep-alive
    /// connections).
    pub header_timeout: Option<f64>,
    /// Seconds a request may take to send its body.
    pub body_timeout: Option<f64>,
    /// Seconds a request may wait in a queue before it is answered 503
    /// without running.
    pub queue_timeout: Option<f64>,
}

impl FileConfig {
    /// Reads `path`; a missing file is an error only when it was named explicitly.
    pub fn load(path: Option<&Path>) -> anyhow::Result<Self> {
        let (path, explicit) = match path {
            Some(p) => (p.to_path_buf(), true),
            None => (PathBuf::from("capstan.toml"), false),
        };
        match std::fs::read_to_string(&path) {
            Ok(text) => toml::from_str(&text).with_context(|| format!("{}", path.display())),
            Err(e) if !explicit && e.kind() == std::io::ErrorKind::NotFound => Ok(Self::default()),
            Err(e) => Err(e).with_context(|| format!("reading {}", path.display())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_rejects_unknown_keys() {
        let c: FileConfig =
            toml::from_str("[server]\nworkers = 3\n[reader]\ndefault = \"llama\"\n").unwrap();
        assert_eq!(c.server.workers, Some(3));
        assert_eq!(c.reader.default.as_deref(), Some("llama"));
        let err = toml::from_str::<FileConfig>("[server]\nworkerz = 3\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("workerz"), "{err}");
        let c: FileConfig = toml::from_str("[reader]\npassage_order = \"stable\"\n").unwrap();
        assert_eq!(
            c.reader.passage_order,
            Some(capstan_engine::context::PassageOrder::Stable)
        );
        let err = toml::from_str::<FileConfig>("[reader]\npassage_order = \"best\"\n")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("passage_order") || err.contains("best"),
            "{err}"
        );
        // The example file parses.
        let example = include_str!("../../capstan.example.toml");
        toml::from_str::<FileConfig>(example).unwrap();
    }
}
