//! The question-answering pipeline: retrieve -> assemble -> read, with the
//! time each stage took. Shared (behind an `Arc`) by `capstan ask`, the HTTP
//! server's workers and `capstan eval qa`.
//!
//! `request.rs` holds what is asked and what comes back; `spans.rs` the span and sentence
//! answers (extractive, and the Llama reader's ranked span); `generative.rs` generated and
//! copied answers.

use std::sync::Arc;
use std::time::Instant;

use capstan_reader::{
    ExtractivePassage, ExtractiveReader, Flow, GenerationParams, Request, ScoredSentence,
};
use capstan_retriever::{Filter, Hit, Mode, Retriever, SearchOptions};

use crate::context::{AnswerMode, Context, ContextMode};
pub use crate::conversation::{Rewrite, Role, Turn};
use crate::error::{Error, Result};
pub use crate::reader_kind::ReaderKind;
use crate::scheduler::Scheduler;

mod generative;
mod request;
mod spans;

pub use generative::finish_reason;
pub use request::{
    Answer, AnswerKind, Highlight, QaRequest, Timings, TokenChoice, TokenLogprobs, Usage,
    DEFAULT_CONTEXT, DEFAULT_SENTENCE_LEXICAL_WEIGHT, DEFAULT_SPAN_END_BIAS,
};

/// Tokens a model may spend rewriting a follow-up ([`Rewrite::Model`]).
const REWRITE_TOKENS: usize = 48;

/// Retriever plus readers; each generative reader's model runs behind its own
/// continuous-batching [`Scheduler`].
pub struct Pipeline {
    retriever: Arc<Retriever>,
    /// Unit vectors of the field keys seen so far ("License", "Homepage": records repeat a
    /// few keys), for the answer ranker's key similarity.
    key_vectors: std::sync::Mutex<std::collections::HashMap<String, Arc<Vec<f32>>>>,
    extractive: ExtractiveReader,
    llama: Option<Scheduler>,
    cape: Option<Scheduler>,
    /// Search settings besides mode and k.
    pub search: SearchOptions,
}

impl Pipeline {
    /// A pipeline over `retriever` (its encoder loaded now: the extractive
    /// reader needs it), with the generative readers that were loaded.
    pub fn new(
        retriever: Arc<Retriever>,
        llama: Option<Scheduler>,
        cape: Option<Scheduler>,
        search: SearchOptions,
    ) -> Result<Self> {
        let extractive = ExtractiveReader::new(retriever.encoder()?.clone());
        Ok(Self {
            retriever,
            key_vectors: Default::default(),
            extractive,
            llama,
            cape,
            search,
        })
    }

    /// The retriever.
    pub fn retriever(&self) -> &Arc<Retriever> {
        &self.retriever
    }

    /// Readers that can answer now.
    pub fn available_readers(&self) -> Vec<ReaderKind> {
        let mut out = vec![ReaderKind::Extractive];
        if self.llama.is_some() {
            out.push(ReaderKind::Llama);
        }
        if self.cape.is_some() {
            out.push(ReaderKind::Cape);
        }
        out
    }

    /// Retrieves passages; returns them with the question's vector (when one was computed).
    pub fn retrieve(
        &self,
        question: &str,
        k: usize,
        mode: Mode,
        filter: Option<&Filter>,
    ) -> Result<(Vec<Hit>, Option<Vec<f32>>)> {
        let vector = match mode {
            Mode::Bm25 => None,
            _ => Some(self.retriever.embed_query(question)?),
        };
        let opts = SearchOptions {
            mode,
            k,
            ..self.search
        };
        let hits = self
            .retriever
            .search_with(question, vector.as_deref(), &opts, filter)?;
        Ok((hits, vector))
    }

    /// Answers a question. `on_text` receives each piece of generated text
    /// as it comes (an extractive answer arrives as one piece) and may stop
    /// generation early.
    pub fn answer(&self, req: &QaRequest, on_text: impl FnMut(&str) -> Flow) -> Result<Answer> {
        let start = Instant::now();
        self.scheduler(req.reader)?;
        let (rewritten, rewrite_tokens) = self.rewrite(req)?;
        let question = rewritten
            .clone()
            .map_or_else(|| req.standalone_question(), Into::into);
        let (hits, vector) = self.retrieve(&question, req.k, req.mode, req.filter.as_ref())?;
        // The readers read the rules' question: a model's rewrite may have changed what is
        // asked, so its vector is not theirs.
        let vector = if rewritten.is_some() { None } else { vector };
        let mut answer = self.read(req, hits, vector, start, on_text)?;
        answer.retrieval_question = (question != req.question).then(|| question.into_owned());
        answer.usage.rewrite_tokens = rewrite_tokens;
        Ok(answer)
    }

    /// A follow-up rewritten by the Llama reader's model ([`Rewrite::Model`]), with the tokens
    /// it generated: `None` for one question, by rules, without a Llama reader, or when the
    /// reply is not a question.
    fn rewrite(&self, req: &QaRequest) -> Result<(Option<String>, usize)> {
        let (Rewrite::Model, Some(scheduler)) = (req.rewrite, &self.llama) else {
            return Ok((None, 0));
        };
        let Some(prompt) = crate::conversation::rewrite_prompt(&req.history, &req.question) else {
            return Ok((None, 0));
        };
        let model = scheduler.model();
        let prompt = model.chat_prompt(&[capstan_reader::ChatMessage {
            role: "user".into(),
            content: prompt,
        }])?;
        let mut params = model.with_stops(GenerationParams {
            max_new_tokens: REWRITE_TOKENS,
            ..GenerationParams::default()
        });
        params.stop_strings.push("\n".into());
        let request = Request {
            prompt,
            encoder_chunks: Vec::new(),
        };
        let reply = scheduler.generate(request, params)?;
        let rewritten = reply
            .text
            .as_deref()
            .and_then(crate::conversation::parse_rewrite);
        Ok((rewritten, reply.tokens.len()))
    }

    /// Answers a question from the given passages, in the given order, without
    /// retrieving (`vector`: the question's embedding, when the caller has it).
    /// Used by `capstan eval` (answer recall, the lost-in-the-middle protocol).
    pub fn answer_with_passages(
        &self,
        req: &QaRequest,
        hits: Vec<Hit>,
        vector: Option<Vec<f32>>,
        on_text: impl FnMut(&str) -> Flow,
    ) -> Result<Answer> {
        self.read(req, hits, vector, Instant::now(), on_text)
    }

    /// The scheduler of a generative reader (`None` for the extractive one).
    pub fn scheduler(&self, reader: ReaderKind) -> Result<Option<&Scheduler>> {
        let loaded = match reader {
            ReaderKind::Extractive => return Ok(None),
            ReaderKind::Llama => &self.llama,
            ReaderKind::Cape => &self.cape,
        };
        loaded.as_ref().map(Some).ok_or(Error::NotLoaded(reader))
    }

    /// The generative readers' schedulers, by reader name.
    pub fn schedulers(&self) -> Vec<(&'static str, &Scheduler)> {
        [
            (ReaderKind::Llama, &self.llama),
            (ReaderKind::Cape, &self.cape),
        ]
        .into_iter()
        .filter_map(|(k, s)| s.as_ref().map(|s| (k.name(), s)))
        .collect()
    }

    /// The read step shared by [`Pipeline::answer`] and [`Pipeline::answer_with_passages`].
    fn read(
        &self,
        req: &QaRequest,
        hits: Vec<Hit>,
        vector: Option<Vec<f32>>,
        start: Instant,
        mut on_text: impl FnMut(&str) -> Flow,
    ) -> Result<Answer> {
        let mut timings = Timings {
            retrieve_ms: ms(start),
            ..Timings::default()
        };
        let sampled = req.reader != ReaderKind::Extractive
            && matches!(req.answer, AnswerMode::Free | AnswerMode::Copy);
        if !sampled && req.generation.logprobs.is_some() {
            return Err(capstan_reader::Error::InvalidInput {
                reason: format!(
                    "log-probabilities are reported for generated text (a llama or cape reader, \
                     answer `free` or `copy`), not for the {} reader's `{}` answer",
                    req.reader.name(),
                    req.answer.name()
                ),
            }
            .into());
        }
        let mut answer = match self.scheduler(req.reader)? {
            None => self.read_extractive(req, hits, vector, &mut timings, &mut on_text)?,
            Some(s) => self.read_generative(req, s, hits, vector, &mut timings, &mut on_text)?,
        };
        timings.total_ms = ms(start);
        answer.timings = timings;
        Ok(answer)
    }

    /// The sentences of `hits` ranked by similarity to the question (its vector computed when
    /// the caller has none), best first.
    fn rank_sentences(
        &self,
        question: &str,
        hits: &[Hit],
        vector: Option<&[f32]>,
    ) -> Result<Vec<ScoredSentence>> {
        let computed;
        let question = match vector {
            Some(v) => v,
            None => {
                computed = self.retriever.embed_query(question)?;
                &computed
            }
        };
        let store = self.retriever.store();
        let stored: Vec<Vec<(u32, u32, Vec<f32>)>> = hits
            .iter()
            .map(|h| store.sentence_vectors(&h.passage_id))
            .collect::<std::result::Result<_, _>>()?;
        let stored: Vec<Vec<(u32, u32, &[f32])>> = stored
            .iter()
            .map(|s| s.iter().map(|(a, b, v)| (*a, *b, v.as_slice())).collect())
            .collect();
        let passages: Vec<ExtractivePassage> = hits
            .iter()
            .zip(&stored)
            .map(|(h, s)| ExtractivePassage {
                title: &h.title,
                text: &h.text,
                sentences: (!s.is_empty()).then_some(s.as_slice()),
            })
            .collect();
        Ok(self.extractive.rank(question, &passages)?)
    }

    /// The question's unit vector: the caller's, or computed.
    fn question_vector(&self, question: &str, vector: Option<Vec<f32>>) -> Result<Vec<f32>> {
        match vector {
            Some(v) => Ok(v),
            None => Ok(self.retriever.embed_query(question)?),
        }
    }

    /// The cosine similarity of a field's key to the question (0 when the key cannot be
    /// embedded).
    fn key_similarity(&self, question: &[f32], key: &str) -> f32 {
        /// Keys kept before the map starts afresh.
        const KEPT_KEYS: usize = 50_000;
        let cached = self
            .key_vectors
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(key)
            .cloned();
        let v = match cached {
            Some(v) => v,
            None => match self.retriever.embed_query(key) {
                Ok(v) => {
                    let v = Arc::new(v);
                    let mut map = self.key_vectors.lock().unwrap_or_else(|e| e.into_inner());
                    if map.len() >= KEPT_KEYS {
                        map.clear();
                    }
                    map.insert(key.to_string(), v.clone());
                    v
                }
                Err(_) => return 0.0,
            },
        };
        capstan_indexer::dot(question, &v)
    }

    /// What the Llama reader reads of `hits` (`ranked`: their sentences, best first).
    fn llama_context(
        &self,
        req: &QaRequest,
        model: &capstan_reader::LanguageModel,
        question: &str,
        hits: &[Hit],
        ranked: &mut [ScoredSentence],
    ) -> Result<Context> {
        Ok(match req.context {
            ContextMode::Sentences(n) => {
                crate::context::add_lexical_overlap(
                    question,
                    hits,
                    ranked,
                    req.sentence_lexical_weight,
                );
                Context::sentences(hits, ranked, n, req.best_last)
            }
            ContextMode::Budget(budget) => {
                let tokens = |t: &str| model.encode(t).map_or(t.len() / 3, |ids| ids.len());
                Context::budgeted(hits, ranked, budget, tokens)
            }
            ContextMode::Passages => Context::whole(hits),
        })
    }
}

fn ms(since: Instant) -> f64 {
    since.elapsed().as_secs_f64() * 1000.0
}
