//! Generative readers of Capstan: Llama-family decoders (RoPE, RoPE ABF, linear and Llama 3
//! scaling, grouped-query attention, Qwen2's Q/K/V biases) and CEPE / CAPE
//! (`LlamaForCausalContextLM`: a bidirectional context encoder with cross-attention), with
//! generation and prompt assembly.
//!
//! Checkpoints are Hugging Face folders or GGUF files (llama.cpp's format: `llama` and `qwen2`
//! architectures, every quantization type candle implements). A GGUF file carries its
//! tokenizer (built as transformers builds it) and chat template (rendered with minijinja as
//! `apply_chat_template`); its matrices stay quantized unless a dtype is asked for.
//! [`LanguageModel`] bundles checkpoint, tokenizer, template, stop ids and the context check.
//!
//! ```no_run
//! use capstan_reader::{GenerationParams, LanguageModel, LoadOptions, Request};
//! use candle_core::Device;
//!
//! # fn main() -> capstan_reader::Result<()> {
//! let lm = LanguageModel::load(
//!     "SmolLM2-135M-Instruct.Q4_1.gguf".as_ref(),
//!     &Device::Cpu,
//!     LoadOptions::default(),
//! )?;
//! let prompt = lm.user_prompt("What is the capital of France?")?;
//! lm.check_length(prompt.len(), 16)?;
//! let request = Request { prompt, ..Request::default() };
//! let out = lm.generator().generate(&request, &lm.with_stops(GenerationParams::greedy(16)))?;
//! println!("{:?} ({:.1} tokens/s)", out.text, out.tokens_per_second());
//! # Ok(())
//! # }
//! ```
#![warn(missing_docs)]

mod attention;
mod chat_template;
mod checkpoint;
mod clause;
mod config;
mod error;
mod extractive;
mod generate;
mod gguf;
mod grounded;
mod language_model;
mod likelihood;
mod llama;
mod prompt;

pub use attention::{AttentionPattern, KV_REPORT_CONTEXT};
pub use chat_template::{ChatMessage, ChatTemplate, ChatTemplateError};
pub use checkpoint::{
    default_dtype, default_model_path, ChatTemplateSource, Checkpoint, WeightFormat,
    DEFAULT_MODEL_FILE,
};
pub use clause::{is_clause_break, may_start, CLOSERS, OPENERS};
pub use config::{GenerationConfig, LlamaConfig, RopeScaling, RopeScalingConfig, TokenIds};
pub use error::{Error, Result};
pub use extractive::{ExtractivePassage, ExtractiveReader, ScoredSentence};
pub use generate::{
    apply_presence_and_frequency, apply_repetition_penalty, argmax, DecodedToken, Decoding, Flow,
    Generation, GenerationParams, Generator, Request, StopReason, TokenLogprob,
};
pub use gguf::{GgufArch, GgufFile, GgufVocab};
pub use grounded::{mask_logits, span_text, SpanMatch, SpanSource, SpanState, TokenBytes};
pub use language_model::{LanguageModel, LoadOptions};
pub use likelihood::{
    scoring_cache_tokens, scoring_kv_tokens, AnswerLikelihood, MAX_ANSWER_TOKENS,
};
pub use llama::{
    hash_tokens, prompt_piece, Architecture, Cache, CrossKv, DecodeStepStatus, EncodedChunks,
    KvBlock, Llama, PackedInput, PassageCache, PassageCacheStats, STABLE_CHUNK_ROWS,
};
pub use prompt::{
    cepe_prompt, llama_prompt, lost_in_the_middle_order, CepeInputs, CepePrompt, Passage,
    PromptOptions, CEPE_CHUNK_TOKENS, CEPE_DECODER_MAX_TOKENS, CEPE_DECODER_PASSAGES,
};
