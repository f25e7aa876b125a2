//! A generative model ready to answer: checkpoint, weights, tokenizer, chat template, stop ids
//! and the context-length check, in one place for every caller (the QA pipeline, the chat
//! endpoint, the evaluation probes).

use std::path::Path;
use std::sync::{Arc, OnceLock};

use candle_core::{DType, Device};
use tokenizers::Tokenizer;

use crate::chat_template::{ChatMessage, ChatTemplate};
use crate::checkpoint::Checkpoint;
use crate::error::{Error, Result};
use crate::generate::{GenerationParams, Generator};
use crate::grounded::{SpanSource, TokenBytes};
use crate::llama::Llama;
use crate::prompt::{CepeInputs, CepePrompt};

/// How to load a [`LanguageModel`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LoadOptions {
    /// `None`: the checkpoint's natural form (a GGUF file stays quantized; a Hugging Face
    /// folder loads in [`crate::default_dtype`]); `Some`: every weight in this dtype.
    pub dtype: Option<DType>,
    /// Ignore the checkpoint's chat template (base models, or to compare prompts).
    pub no_chat_template: bool,
}

/// A loaded generative checkpoint with everything needed to turn text into a prompt and a
/// prompt into text.
pub struct LanguageModel {
    checkpoint: Checkpoint,
    model: Llama,
    template: Option<ChatTemplate>,
    stop_ids: Vec<u32>,
    pad_id: u32,
    /// The vocabulary's bytes, built at the first grounded answer.
    token_bytes: OnceLock<Arc<TokenBytes>>,
}

impl LanguageModel {
    /// Opens `path` (a Hugging Face folder, a `.gguf` file or a folder holding one) and loads
    /// it onto `device`. The checkpoint must have a tokenizer; its chat template is compiled
    /// here, so a template that does not compile is reported at load.
    pub fn load(path: &Path, device: &Device, opts: LoadOptions) -> Result<Self> {
        let checkpoint = Checkpoint::open(path)?;
        if checkpoint.tokenizer().is_none() {
            return Err(Error::NoTokenizer);
        }
        let template = match (checkpoint.chat_template(), opts.no_chat_template) {
            (Some(src), false) => Some(
                ChatTemplate::new(&src.template, &src.bos_token, &src.eos_token).map_err(|e| {
                    Error::ChatTemplate {
                        source_name: src.origin.clone(),
                        reason: e.to_string(),
                    }
                })?,
            ),
            _ => None,
        };
        let model = checkpoint.load_model(device, opts.dtype)?;
        let stop_ids = checkpoint.eos_token_ids();
        let pad_id = checkpoint
            .generation_config()
            .pad_token_id
            .or(checkpoint.config().pad_token_id)
            .or(stop_ids.first().copied())
            .unwrap_or(0);
        Ok(Self {
            checkpoint,
            model,
            template,
            stop_ids,
            pad_id,
            token_bytes: OnceLock::new(),
        })
    }

    /// The opened checkpoint.
    pub fn checkpoint(&self) -> &Checkpoint {
        &self.checkpoint
    }

    /// The model.
    pub fn model(&self) -> &Llama {
        &self.model
    }

    /// The model, to change its attention pattern.
    pub fn model_mut(&mut self) -> &mut Llama {
        &mut self.model
    }

    /// The tokenizer.
    pub fn tokenizer(&self) -> &Tokenizer {
        self.checkpoint.tokenizer().expect("checked at load")
    }

    /// Whether prompts go through the chat template.
    pub fn uses_chat_template(&self) -> bool {
        self.template.is_some()
    }

    /// Generation stops at any of these (every `eos_token_id`).
    pub fn stop_ids(&self) -> &[u32] {
        &self.stop_ids
    }

    /// Padding id (CEPE encoder chunks): `pad_token_id`, else the first eos id.
    pub fn pad_id(&self) -> u32 {
        self.pad_id
    }

    /// The model's context window in tokens.
    pub fn max_positions(&self) -> usize {
        self.model.config().max_position_embeddings
    }

    /// Token ids of `text`, no special tokens added.
    pub fn encode(&self, text: &str) -> Result<Vec<u32>> {
        crate::prompt::encode(self.tokenizer(), text)
    }

    /// Text of `ids`, special tokens skipped.
    pub fn decode(&self, ids: &[u32]) -> Result<String> {
        crate::prompt::decode(self.tokenizer(), ids)
    }

    /// `messages` rendered by the chat template with the generation prompt.
    pub fn render_chat(&self, messages: &[ChatMessage]) -> Result<String> {
        let template = self.template.as_ref().ok_or_else(|| {
            Error::invalid("this model has no chat template (or it was turned off)")
        })?;
        template
            .render(messages, true)
            .map_err(|e| Error::ChatTemplate {
                source_name: self
                    .checkpoint
                    .chat_template()
                    .map_or_else(String::new, |s| s.origin.clone()),
                reason: e.to_string(),
            })
    }

    /// The prompt of a conversation: through the chat template when there is one (the template
    /// adds BOS if the model wants it), else the turns' contents joined by blank lines after
    /// BOS.
    pub fn chat_prompt(&self, messages: &[ChatMessage]) -> Result<Vec<u32>> {
        if self.template.is_some() {
            return self.encode(&self.render_chat(messages)?);
        }
        let text = messages
            .iter()
            .map(|m| m.content.as_str())
            .collect::<Vec<_>>()
            .join("\n\n");
        self.plain_prompt(&text)
    }

    /// The prompt of one user turn (`text`: the documents and the question of a QA prompt).
    pub fn user_prompt(&self, text: &str) -> Result<Vec<u32>> {
        self.chat_prompt(&[ChatMessage {
            role: "user".into(),
            content: text.to_string(),
        }])
    }

    /// BOS (when the checkpoint adds one) and `text`, without any template.
    pub fn plain_prompt(&self, text: &str) -> Result<Vec<u32>> {
        let bos = self
            .checkpoint
            .add_bos_token()
            .then(|| self.checkpoint.bos_token_id());
        Ok(bos
            .flatten()
            .into_iter()
            .chain(self.encode(text)?)
            .collect())
    }

    /// CEPE inputs: the decoder prompt with BOS, the encoder chunks without.
    pub fn cepe_inputs(&self, prompt: &CepePrompt) -> Result<CepeInputs> {
        prompt.tokenize(self.tokenizer(), self.checkpoint.bos_token_id())
    }

    /// Refuses a prompt that, with `max_new_tokens` more, would exceed the model's positions.
    pub fn check_length(&self, prompt_tokens: usize, max_new_tokens: usize) -> Result<()> {
        let limit = self.max_positions();
        if prompt_tokens + max_new_tokens > limit {
            return Err(Error::PromptTooLong {
                prompt_tokens,
                max_new_tokens,
                limit,
            });
        }
        Ok(())
    }

    /// `params` with this model's stop ids added.
    pub fn with_stops(&self, mut params: GenerationParams) -> GenerationParams {
        for &id in &self.stop_ids {
            if !params.stop_token_ids.contains(&id) {
                params.stop_token_ids.push(id);
            }
        }
        params
    }

    /// The bytes each token decodes to, in a trie (built once, at first use).
    pub fn token_bytes(&self) -> &Arc<TokenBytes> {
        self.token_bytes
            .get_or_init(|| Arc::new(TokenBytes::from_tokenizer(self.tokenizer())))
    }

    /// What a grounded answer over `passages` may copy. It ends with the model's stop tokens,
    /// and, for a model prompted without a chat template (which stops at the end of the line),
    /// with a line break too.
    pub fn span_source(&self, passages: &[&str]) -> Result<SpanSource> {
        let tokens = self.token_bytes().clone();
        let mut ends = self.stop_ids.clone();
        if !self.uses_chat_template() {
            ends.extend((0..tokens.len() as u32).filter(|&id| tokens.piece(id) == b"\n"));
        }
        SpanSource::new(tokens, passages, &ends)
    }

    /// A generator over this model.
    pub fn generator(&self) -> Generator<'_> {
        Generator::new(&self.model, Some(self.tokenizer()), self.pad_id)
    }
}
