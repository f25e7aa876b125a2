//! What a question asks for and what comes back: [`QaRequest`], [`Answer`] and their parts.

use capstan_reader::GenerationParams;
use capstan_retriever::{Filter, Hit, Mode};
use serde::{Deserialize, Serialize};

use crate::context::{AnswerMode, AnswerSpan, ContextMode, PassageOrder, PromptStyle};
use crate::conversation::{Rewrite, Turn};
use crate::reader_kind::ReaderKind;
use crate::scheduler::Deadline;

/// One question and how to answer it.
#[derive(Debug, Clone)]
pub struct QaRequest {
    /// The question (a conversation's last user turn).
    pub question: String,
    /// The conversation's earlier turns, oldest first (empty for one question).
    pub history: Vec<Turn>,
    /// How a follow-up is made to stand alone for retrieval.
    pub rewrite: Rewrite,
    /// Passages to retrieve.
    pub k: usize,
    /// Retrieval mode.
    pub mode: Mode,
    /// The reader.
    pub reader: ReaderKind,
    /// Generation settings (generative readers).
    pub generation: GenerationParams,
    /// Lost-in-the-middle reordering (Llama reader).
    pub lost_in_the_middle: bool,
    /// Question before and after the documents (Llama reader).
    pub query_aware: bool,
    /// Passages in the CAPE decoder; the rest become encoder chunks.
    pub decoder_passages: usize,
    /// Metadata conditions the retrieved passages' documents meet.
    pub filter: Option<Filter>,
    /// A generative answer copied from the passages (span) or free text.
    pub answer: AnswerMode,
    /// Whole passages or only their question-relevant sentences (Llama reader).
    pub context: ContextMode,
    /// The instruction opening the Llama reader's prompt.
    pub instruction: String,
    /// The best passage last, next to the question (Llama reader).
    pub best_last: bool,
    /// A worked example in the prompt (Llama reader).
    pub example: bool,
    /// The documents' order in the prompt (Llama reader; `None`: the context mode's default,
    /// [`PassageOrder::default_for`]).
    pub passage_order: Option<PassageOrder>,
    /// Added to the end-of-answer logits of a span answer where it may end (> 0: shorter).
    pub span_end_bias: f32,
    /// Weight of the question's words in choosing sentences (`ContextMode::Sentences`).
    pub sentence_lexical_weight: f32,
    /// A free answer is one line, with a repetition penalty (a QA answer); false for a chat
    /// reply, which may run over several lines.
    pub short_free_answer: bool,
    /// When the request's wait for its turn ends (`--queue-timeout` after it was queued): a
    /// generation or scoring still waiting in its scheduler's queue then is refused
    /// ([`Error::Expired`]) instead of running late. `None`: no deadline.
    pub deadline: Option<Deadline>,
}

impl QaRequest {
    /// A request for `question` with the defaults chosen on the dev splits
    /// (docs/BENCHMARKS.md).
    pub fn new(question: impl Into<String>, reader: ReaderKind) -> Self {
        let style = PromptStyle::default();
        Self {
            question: question.into(),
            history: Vec::new(),
            rewrite: Rewrite::default(),
            k: 5,
            mode: Mode::Hybrid,
            reader,
            generation: GenerationParams::default(),
            lost_in_the_middle: style.lost_in_the_middle,
            query_aware: style.query_aware,
            decoder_passages: capstan_reader::CEPE_DECODER_PASSAGES,
            filter: None,
            answer: AnswerMode::default(),
            context: DEFAULT_CONTEXT,
            instruction: style.instruction,
            best_last: style.best_last,
            example: style.example,
            passage_order: None,
            span_end_bias: DEFAULT_SPAN_END_BIAS,
            sentence_lexical_weight: DEFAULT_SENTENCE_LEXICAL_WEIGHT,
            short_free_answer: true,
            deadline: None,
        }
    }

    /// The question as it stands alone, which retrieval and the readers read:
    /// a follow-up's "this person" resolved from the conversation
    /// ([`crate::conversation::standalone_question`]).
    pub fn standalone_question(&self) -> std::borrow::Cow<'_, str> {
        if self.history.is_empty() {
            self.question.as_str().into()
        } else {
            crate::conversation::standalone_question(&self.history, &self.question).into()
        }
    }

    pub(super) fn prompt_style(&self) -> PromptStyle {
        PromptStyle {
            instruction: self.instruction.clone(),
            best_last: self.best_last,
            lost_in_the_middle: self.lost_in_the_middle,
            query_aware: self.query_aware,
            example: self.example,
            order: self
                .passage_order
                .unwrap_or_else(|| PassageOrder::default_for(self.context)),
        }
    }
}

/// The end bias of span answers (chosen on the dev splits, docs/BENCHMARKS.md).
pub const DEFAULT_SPAN_END_BIAS: f32 = 2.0;

/// The weight of lexical overlap in choosing sentences (chosen on the dev splits).
pub const DEFAULT_SENTENCE_LEXICAL_WEIGHT: f32 = 0.0;

pub use crate::context::DEFAULT_CONTEXT;

/// What kind of text an answer is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AnswerKind {
    /// A whole sentence of a passage (the extractive reader).
    Sentence,
    /// A span copied from the passages (grounded decoding).
    Span,
    /// Free generated text.
    Free,
}

/// The sentence an extractive answer comes from, for highlighting.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Highlight {
    /// The cited passage.
    pub passage_id: String,
    /// Character offset of the sentence in the passage text.
    pub start: usize,
    /// Character offset one past its end.
    pub end: usize,
    /// Cosine similarity of the sentence to the question.
    pub score: f32,
}

/// Tokens the reader consumed and produced.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Usage {
    /// Tokens in the decoder prompt.
    pub decoder_tokens: usize,
    /// Tokens in CAPE encoder chunks.
    pub encoder_tokens: usize,
    /// Generated tokens.
    pub generated_tokens: usize,
    /// Tokens the model generated rewriting a follow-up ([`Rewrite::Model`]).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub rewrite_tokens: usize,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

/// Milliseconds spent in each stage.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Timings {
    /// Question embedding + retrieval.
    pub retrieve_ms: f64,
    /// Prompt assembly and tokenisation.
    pub assemble_ms: f64,
    /// Reading (sentence ranking or generation).
    pub read_ms: f64,
    /// Time to the first generated token (generative readers).
    pub first_token_ms: Option<f64>,
    /// Whole request.
    pub total_ms: f64,
}

/// An answer with its sources.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Answer {
    /// The answer text.
    pub answer: String,
    /// Passage ids the answer is based on.
    pub citations: Vec<String>,
    /// The retrieved passages, best first.
    pub passages: Vec<Hit>,
    /// The question retrieval read where it is not the question asked: a conversation's
    /// follow-up made to stand alone ([`QaRequest::rewrite`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retrieval_question: Option<String>,
    /// The extractive answer's sentence.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub highlight: Option<Highlight>,
    /// What kind of text the answer is.
    pub kind: AnswerKind,
    /// Where a span answer stands in its passages.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub spans: Vec<AnswerSpan>,
    /// The reader found no answer (a grounded answer that copied nothing); `answer` is empty.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub no_answer: bool,
    /// Why generation ended: `stop` (the answer ended), `length` (the token limit), or
    /// `cancelled`; absent for the extractive reader.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finish_reason: Option<String>,
    /// The seed a sampled answer was drawn with (a request without one draws a fresh seed;
    /// asking again with this one repeats the answer); absent for greedy answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<u64>,
    /// Each generated token's log-probability and the most likely tokens at its place, when
    /// the request asked for them (`generation.logprobs`), in OpenAI's form.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub logprobs: Option<Vec<TokenLogprobs>>,
    /// The reader that answered.
    pub reader: ReaderKind,
    /// Token counts.
    pub usage: Usage,
    /// Stage timings.
    pub timings: Timings,
}

/// A token as OpenAI's `logprobs` show it: its text, its log-probability and its bytes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TokenChoice {
    /// The token's text (a piece of a character shows as U+FFFD; `bytes` has it whole).
    pub token: String,
    /// Its log-probability.
    pub logprob: f32,
    /// Its UTF-8 bytes.
    pub bytes: Vec<u8>,
}

/// A generated token's log-probability, and the most likely tokens at its place.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TokenLogprobs {
    /// The token drawn.
    #[serde(flatten)]
    pub chosen: TokenChoice,
    /// The most likely tokens, best first.
    pub top_logprobs: Vec<TokenChoice>,
}
