//! Generative readers of Capstan: Llama-family decoders (RoPE, RoPE ABF, linear scaling,
//! grouped-query attention) and CEPE / CAPE (`LlamaForCausalContextLM`: a bidirectional context
//! encoder with cross-attention), loaded from local Hugging Face checkpoint folders, with
//! generation and prompt assembly.
//!
//! ```no_run
//! use capstan_reader::{Checkpoint, GenerationParams, Generator, Request};
//! use candle_core::Device;
//!
//! # fn main() -> capstan_reader::Result<()> {
//! let ckpt = Checkpoint::open("models/llama")?;
//! let model = ckpt.load_model(&Device::Cpu, None)?;
//! let generator = Generator::new(&model, ckpt.tokenizer(), 2);
//! let request = Request { prompt: vec![1, 450, 4996], ..Request::default() };
//! let out = generator.generate(&request, &GenerationParams::greedy(16))?;
//! println!("{:?} ({:.1} tokens/s)", out.tokens, out.tokens_per_second());
//! # Ok(())
//! # }
//! ```
#![warn(missing_docs)]

mod attention;
mod chat_template;
mod checkpoint;
mod config;
mod error;
mod extractive;
mod generate;
mod gguf;
mod language_model;
mod llama;
mod prompt;

pub use attention::{AttentionPattern, KV_REPORT_CONTEXT};
pub use chat_template::{ChatMessage, ChatTemplate, ChatTemplateError};
pub use checkpoint::{default_dtype, ChatTemplateSource, Checkpoint, WeightFormat};
pub use config::{GenerationConfig, LlamaConfig, RopeScaling, RopeScalingConfig, TokenIds};
pub use error::{Error, Result};
pub use extractive::{ExtractivePassage, ExtractiveReader, ScoredSentence};
pub use generate::{
    apply_repetition_penalty, argmax, Flow, Generation, GenerationParams, Generator, Request,
    StopReason,
};
pub use gguf::{GgufArch, GgufFile, GgufVocab};
pub use language_model::{LanguageModel, LoadOptions};
pub use llama::{Architecture, Cache, EncodedChunks, Llama};
pub use prompt::{
    cepe_prompt, llama_prompt, lost_in_the_middle_order, CepeInputs, CepePrompt, Passage,
    PromptOptions, CEPE_CHUNK_TOKENS, CEPE_DECODER_MAX_TOKENS, CEPE_DECODER_PASSAGES,
};
