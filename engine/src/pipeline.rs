//! The question-answering pipeline: retrieve -> assemble -> read, with the
//! time each stage took. Shared (behind an `Arc`) by `capstan ask`, the HTTP
//! server's workers and `capstan eval qa`.

use std::sync::Arc;
use std::time::Instant;

use capstan_reader::{
    cepe_prompt, ExtractivePassage, ExtractiveReader, Flow, GenerationParams, Request,
    ScoredSentence,
};
use capstan_retriever::{Filter, Hit, Mode, Retriever, SearchOptions};
use serde::{Deserialize, Serialize};

use crate::answer::{Candidate, Shortlist};
use crate::context::{
    resolve_span, AnswerMode, AnswerSpan, Context, ContextMode, PassageOrder, PromptStyle,
};
pub use crate::conversation::{Rewrite, Role, Turn};
use crate::error::{Error, Result};
pub use crate::reader_kind::ReaderKind;
use crate::scheduler::{Deadline, Scheduler};

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

    fn prompt_style(&self) -> PromptStyle {
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

/// Tokens a model may spend rewriting a follow-up ([`Rewrite::Model`]).
const REWRITE_TOKENS: usize = 48;

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

    fn read_extractive(
        &self,
        req: &QaRequest,
        hits: Vec<Hit>,
        vector: Option<Vec<f32>>,
        timings: &mut Timings,
        on_text: &mut impl FnMut(&str) -> Flow,
    ) -> Result<Answer> {
        // Copying is greedy decoding, which needs a generative model. Free text (what chat
        // asks for) is, from the extractive reader, its best sentence.
        if req.answer == AnswerMode::Copy {
            return Err(capstan_reader::Error::InvalidInput {
                reason: "answer `copy` needs a generative reader (llama or cape); the \
                         extractive reader answers with a span or a sentence"
                    .to_string(),
            }
            .into());
        }
        let t = Instant::now();
        let question = req.standalone_question();
        let qv = self.question_vector(&question, vector)?;
        let ranked = self.rank_sentences(&question, &hits, Some(&qv))?;
        let mut answer = if req.answer == AnswerMode::Span {
            let key_similarity = |key: &str| self.key_similarity(&qv, key);
            let shortlist = Shortlist::new(&question, &hits, &ranked, |_| true, &key_similarity);
            dump_candidates(&question, &hits, &shortlist, &[]);
            let best = shortlist.best_lexical();
            let best = best.map(|b| &shortlist.candidates[b]);
            span_answer(best, hits, &ranked, ReaderKind::Extractive)
        } else {
            let (answer, citations, highlight) = match ranked.first() {
                None => (String::new(), Vec::new(), None),
                Some(best) => {
                    let hit = &hits[best.passage];
                    let text = hit.text[best.start..best.end].to_string();
                    (
                        text,
                        vec![hit.passage_id.clone()],
                        Some(highlight_of(hit, best)),
                    )
                }
            };
            Answer {
                no_answer: answer.is_empty(),
                answer,
                citations,
                passages: hits,
                retrieval_question: None,
                highlight,
                kind: AnswerKind::Sentence,
                spans: Vec::new(),
                finish_reason: None,
                seed: None,
                logprobs: None,
                reader: ReaderKind::Extractive,
                usage: Usage::default(),
                timings: Timings::default(),
            }
        };
        timings.read_ms = ms(t);
        on_text(&answer.answer);
        answer.finish_reason = None;
        Ok(answer)
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

    /// A Llama reader's span answer by ranking: the candidates of every retrieved passage
    /// scored from retrieval and the text, the best of them scored again with the model's
    /// likelihood of each as the answer to its prompt ([`crate::answer`]).
    fn read_ranked_span(
        &self,
        req: &QaRequest,
        scheduler: &Scheduler,
        hits: Vec<Hit>,
        vector: Option<Vec<f32>>,
        timings: &mut Timings,
        on_text: &mut impl FnMut(&str) -> Flow,
    ) -> Result<Answer> {
        let model = scheduler.model();
        if hits.is_empty() {
            // Nothing to choose from (a filter no passage matches, say): no answer, and no
            // model run to say so.
            let answer = span_answer(None, hits, &[], req.reader);
            on_text(&answer.answer);
            return Ok(answer);
        }
        let t = Instant::now();
        let question = req.standalone_question();
        let qv = self.question_vector(&question, vector)?;
        let mut ranked = self.rank_sentences(&question, &hits, Some(&qv))?;
        let sentence_order = ranked.clone();
        let context = self.llama_context(req, model, &question, &hits, &mut ranked)?;
        let passages = context.passages(&hits);
        let prompt = req
            .prompt_style()
            .prompt(model, &question, &passages, &req.history)?;
        if std::env::var_os("CAPSTAN_DEBUG_PROMPT").is_some() {
            eprintln!("{}", model.decode(&prompt)?);
        }
        model.check_length(prompt.len(), capstan_reader::MAX_ANSWER_TOKENS + 1)?;
        let pieces = context.pieces();
        let titles = context.title_hits();
        let in_context = |c: &Candidate| {
            if c.in_title {
                titles.contains(&c.hit)
            } else {
                pieces
                    .iter()
                    .any(|p| p.hit == c.hit && p.start <= c.start && c.end <= p.end)
            }
        };
        let key_similarity = |key: &str| self.key_similarity(&qv, key);
        let mut shortlist = Shortlist::new(
            &question,
            &hits,
            &sentence_order,
            in_context,
            &key_similarity,
        );
        timings.assemble_ms = ms(t);
        let t = Instant::now();
        let rows = shortlist.top(crate::answer::SHORTLIST).to_vec();
        let texts: Vec<String> = rows
            .iter()
            .map(|&i| shortlist.candidates[i].text(&hits).to_string())
            .collect();
        let decoder_tokens = prompt.len();
        // Through the scheduler: admitted, queued or refused as generations are.
        let (texts, of) = crate::answer::scoring_texts(&texts);
        let scored: Vec<(f32, f32, f32)> = scheduler
            .score_until(prompt, texts, req.deadline)?
            .iter()
            .map(|l| (l.mean(), l.first, l.end))
            .collect();
        let scored = crate::answer::best_of_texts(&scored, &of);
        let (relation_texts, of) = shortlist.relation_texts(&question, &hits, &rows);
        let vectors = self.retriever.embed_texts(&relation_texts)?;
        shortlist.set_relation(&rows, &vectors, &of);
        let best = shortlist.best_with_likelihoods(&rows, &scored);
        dump_candidates(&question, &hits, &shortlist, &rows);
        timings.read_ms = ms(t);
        let best = best.map(|b| &shortlist.candidates[b]);
        let mut answer = span_answer(best, hits, &sentence_order, req.reader);
        answer.usage.decoder_tokens = decoder_tokens;
        on_text(&answer.answer);
        Ok(answer)
    }

    fn read_generative(
        &self,
        req: &QaRequest,
        scheduler: &Scheduler,
        hits: Vec<Hit>,
        vector: Option<Vec<f32>>,
        timings: &mut Timings,
        on_text: &mut impl FnMut(&str) -> Flow,
    ) -> Result<Answer> {
        if req.answer == AnswerMode::Sentence {
            return Err(capstan_reader::Error::InvalidInput {
                reason: "answer `sentence` is the extractive reader's".into(),
            }
            .into());
        }
        if req.reader == ReaderKind::Llama && req.answer == AnswerMode::Span {
            return self.read_ranked_span(req, scheduler, hits, vector, timings, on_text);
        }
        let model = scheduler.model();
        let t = Instant::now();
        let mut params = model.with_stops(req.generation.clone());
        let question = req.standalone_question();
        // CAPE reads encoder chunks the likelihood scoring does not: its span answers are
        // copied by constrained decoding.
        let span_mode = matches!(req.answer, AnswerMode::Span | AnswerMode::Copy);
        if span_mode && hits.is_empty() {
            return Err(capstan_reader::Error::InvalidInput {
                reason: "a span answer needs passages to copy from, and none was retrieved".into(),
            }
            .into());
        }
        // What the model reads: CAPE reads whole passages (decoder and encoder); the Llama
        // reader whole passages or their question-relevant sentences.
        let context = match (req.reader, req.context) {
            (ReaderKind::Llama, ContextMode::Sentences(_) | ContextMode::Budget(_)) => {
                let mut ranked = self.rank_sentences(&question, &hits, vector.as_deref())?;
                self.llama_context(req, model, &question, &hits, &mut ranked)?
            }
            _ => Context::whole(&hits),
        };
        let passages = context.passages(&hits);
        let (request, usage_in) = match req.reader {
            ReaderKind::Cape => {
                let inputs = model.cepe_inputs(&cepe_prompt(
                    &req.question,
                    &passages,
                    req.decoder_passages,
                ))?;
                let encoder_tokens = inputs.encoder_ids.iter().map(Vec::len).sum();
                let decoder_tokens = inputs.decoder_ids.len();
                (
                    Request {
                        prompt: inputs.decoder_ids,
                        encoder_chunks: inputs.encoder_ids,
                    },
                    (decoder_tokens, encoder_tokens),
                )
            }
            _ => {
                // An instruct model reads the documents and the question as a user turn and
                // ends its answer with an end-of-turn token; a base model continues the text
                // after "Answer:" and is stopped at the end of the line.
                let prompt =
                    req.prompt_style()
                        .prompt(model, &question, &passages, &req.history)?;
                if std::env::var_os("CAPSTAN_DEBUG_PROMPT").is_some() {
                    eprintln!("{}", model.decode(&prompt)?);
                }
                let n = prompt.len();
                (
                    Request {
                        prompt,
                        encoder_chunks: Vec::new(),
                    },
                    (n, 0),
                )
            }
        };
        // A short answer is one line: free text stops at the first line break (so does a base
        // model's continuation after "Answer:").
        let one_line = req.short_free_answer || !model.uses_chat_template();
        if one_line && !params.stop_strings.iter().any(|s| s == "\n") {
            params.stop_strings.push("\n".into());
        }
        let pieces = context.pieces();
        let title_hits = context.title_hits();
        let source = if span_mode {
            let texts: Vec<&str> = pieces
                .iter()
                .map(|p| &hits[p.hit].text[p.start..p.end])
                .chain(title_hits.iter().map(|&h| hits[h].title.as_str()))
                .collect();
            // An answer does not begin by repeating the question ("What did Saquafen Dulcorde
            // do?" is not answered by "Saquafen Dulcorde died in 1941").
            // Nor does it start with a function word.
            let question_words: Vec<&str> = req
                .question
                .split(|c: char| !c.is_alphanumeric())
                .filter(|w| !w.is_empty())
                .chain(crate::words::NON_ANSWER_STARTS.iter().copied())
                .collect();
            let mut source = model
                .span_source(&texts)?
                .with_end_bias(req.span_end_bias)
                .avoiding_start_words(&question_words);
            if let Some(digit) = crate::answer::asks::wants_number(&req.question) {
                source = source.starting_with_digit(digit);
            }
            let source = std::sync::Arc::new(source);
            params.span = Some(source.clone());
            Some(source)
        } else {
            None
        };
        // Free text that starts to loop ends there. (Hugging Face's repetition penalty is no
        // cure: it also penalises the prompt's tokens, so a penalised model avoids the very
        // names it should copy: "The ZebleglassWorksHQSZBWL…" for the Zezel Glassworks at
        // 1.2, EM 0.000 on the encyclopedia's test split, docs/BENCHMARKS.md.)
        params.stop_on_repetition |= !span_mode;
        model.check_length(usage_in.0, params.max_new_tokens)?;
        timings.assemble_ms = ms(t);
        let t = Instant::now();
        // Free text streams as the answer reads once trimmed: whitespace at its start is
        // dropped, and whitespace is held back until text follows it.
        let mut trimmed = TrimmedStream::default();
        let generation = scheduler.generate_stream_until(
            request,
            params,
            req.deadline,
            |_, piece| match piece {
                Some(p) if source.is_none() => trimmed.push(p, &mut *on_text),
                Some(p) if !p.is_empty() => on_text(p),
                _ => Flow::Continue,
            },
        )?;
        timings.read_ms = ms(t);
        timings.first_token_ms = Some(generation.time_to_first_token.as_secs_f64() * 1000.0);
        let finish_reason = Some(finish_reason(&generation.stop_reason).to_string());
        let (answer, citations, spans, kind) = match &source {
            Some(source) => {
                match resolve_span(source, &pieces, &title_hits, &hits, &generation.span) {
                    Some((text, spans)) => {
                        let mut citations: Vec<String> = Vec::new();
                        for s in &spans {
                            if !citations.contains(&s.passage_id) {
                                citations.push(s.passage_id.clone());
                            }
                        }
                        (text, citations, spans, AnswerKind::Span)
                    }
                    None => (String::new(), Vec::new(), Vec::new(), AnswerKind::Span),
                }
            }
            None => {
                let answer = generation
                    .text
                    .clone()
                    .unwrap_or_default()
                    .trim()
                    .to_string();
                let citations = cite(&answer, &hits);
                (answer, citations, Vec::new(), AnswerKind::Free)
            }
        };
        Ok(Answer {
            no_answer: answer.is_empty(),
            answer,
            citations,
            passages: hits,
            retrieval_question: None,
            highlight: None,
            kind,
            spans,
            finish_reason,
            seed: (!req.generation.is_greedy()).then_some(req.generation.seed),
            logprobs: match req.generation.logprobs {
                Some(_) => Some(token_logprobs(model, &generation)?),
                None => None,
            },
            reader: req.reader,
            usage: Usage {
                decoder_tokens: usage_in.0,
                encoder_tokens: usage_in.1,
                generated_tokens: generation.tokens.len(),
                rewrite_tokens: 0,
            },
            timings: Timings::default(),
        })
    }
}

/// Pieces of free text passed on as the trimmed answer reads: leading whitespace dropped,
/// whitespace held until text follows it (so that a stream ends as the answer does).
#[derive(Debug, Default)]
struct TrimmedStream {
    started: bool,
    held: String,
}

impl TrimmedStream {
    fn push(&mut self, piece: &str, on_text: &mut impl FnMut(&str) -> Flow) -> Flow {
        let piece = if self.started {
            piece
        } else {
            piece.trim_start()
        };
        let body = piece.trim_end();
        if body.is_empty() {
            if self.started {
                self.held.push_str(piece);
            }
            return Flow::Continue;
        }
        self.started = true;
        let mut text = std::mem::take(&mut self.held);
        text.push_str(body);
        self.held.push_str(&piece[body.len()..]);
        on_text(&text)
    }
}

/// The generated tokens' log-probabilities in OpenAI's form (the end-of-turn token that ended
/// the answer is not part of it, as OpenAI leaves it out).
fn token_logprobs(
    model: &capstan_reader::LanguageModel,
    generation: &capstan_reader::Generation,
) -> Result<Vec<TokenLogprobs>> {
    let keep = match generation.stop_reason {
        capstan_reader::StopReason::StopToken(_) => generation.logprobs.len().saturating_sub(1),
        _ => generation.logprobs.len(),
    };
    let choice = |token: u32, logprob: f32| -> Result<TokenChoice> {
        let text = model.decode(&[token])?;
        Ok(TokenChoice {
            bytes: text.as_bytes().to_vec(),
            token: text,
            logprob,
        })
    };
    generation.logprobs[..keep]
        .iter()
        .map(|l| {
            Ok(TokenLogprobs {
                chosen: choice(l.token, l.logprob)?,
                top_logprobs: l
                    .top
                    .iter()
                    .map(|&(t, lp)| choice(t, lp))
                    .collect::<Result<_>>()?,
            })
        })
        .collect()
}

/// The sentence `s` of `hit`, for highlighting.
fn highlight_of(hit: &Hit, s: &ScoredSentence) -> Highlight {
    Highlight {
        passage_id: hit.passage_id.clone(),
        start: hit.text[..s.start].chars().count(),
        end: hit.text[..s.end].chars().count(),
        score: s.score,
    }
}

/// The answer of a ranked span (`best`, a candidate of `hits`): its text, where it
/// stands, its passage cited and its sentence beside it; no answer when there is none.
fn span_answer(
    best: Option<&Candidate>,
    hits: Vec<Hit>,
    ranked: &[ScoredSentence],
    reader: ReaderKind,
) -> Answer {
    let mut out = Answer {
        answer: String::new(),
        citations: Vec::new(),
        passages: Vec::new(),
        retrieval_question: None,
        highlight: None,
        kind: AnswerKind::Span,
        spans: Vec::new(),
        no_answer: true,
        finish_reason: Some("stop".into()),
        seed: None,
        logprobs: None,
        reader,
        usage: Usage::default(),
        timings: Timings::default(),
    };
    if let Some(c) = best {
        let hit = &hits[c.hit];
        let source = if c.in_title { &hit.title } else { &hit.text };
        out.answer = source[c.start..c.end].to_string();
        out.no_answer = out.answer.is_empty();
        out.spans.push(AnswerSpan {
            passage_id: hit.passage_id.clone(),
            start: source[..c.start].chars().count(),
            end: source[..c.end].chars().count(),
            in_title: c.in_title,
        });
        out.citations.push(hit.passage_id.clone());
        let sentence = ranked
            .iter()
            .filter(|s| s.passage == c.hit)
            .find(|s| c.in_title || (s.start <= c.start && c.end <= s.end));
        out.highlight = sentence.map(|s| highlight_of(hit, s));
    }
    out.passages = hits;
    out
}

/// Appends a question's candidates and their features to `$CAPSTAN_DUMP_CANDIDATES` (the
/// data `bench/fit_answer_ranker.py` fits the ranker's weights on).
fn dump_candidates(question: &str, hits: &[Hit], shortlist: &Shortlist, scored: &[usize]) {
    use std::io::Write;
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let Some(path) = std::env::var_os("CAPSTAN_DUMP_CANDIDATES") else {
        return;
    };
    let line = shortlist.dump_line(question, hits, 200, scored);
    let _guard = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let written = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .and_then(|mut f| writeln!(f, "{line}"));
    if let Err(e) = written {
        eprintln!("CAPSTAN_DUMP_CANDIDATES {}: {e}", path.to_string_lossy());
    }
}

/// OpenAI's name for why generation ended.
pub fn finish_reason(stop: &capstan_reader::StopReason) -> &'static str {
    match stop {
        capstan_reader::StopReason::Length => "length",
        capstan_reader::StopReason::Cancelled => "cancelled",
        _ => "stop",
    }
}

/// Passages that contain the (normalised) generated answer; else, since a generated sentence
/// rarely appears verbatim, the passages holding the most of its words (at least half of them,
/// within 10% of the best); all passages given to the model when none does.
fn cite(answer: &str, hits: &[Hit]) -> Vec<String> {
    let all = || hits.iter().map(|h| h.passage_id.clone()).collect();
    let norm = crate::text::normalize_answer(answer);
    if norm.is_empty() {
        return all();
    }
    let texts: Vec<String> = hits
        .iter()
        .map(|h| crate::text::normalize_answer(&h.text))
        .collect();
    let containing: Vec<String> = hits
        .iter()
        .zip(&texts)
        .filter(|(_, t)| t.contains(&norm))
        .map(|(h, _)| h.passage_id.clone())
        .collect();
    if !containing.is_empty() {
        return containing;
    }
    let words: std::collections::HashSet<&str> = norm.split_whitespace().collect();
    let overlap: Vec<f64> = texts
        .iter()
        .map(|t| {
            let have: std::collections::HashSet<&str> = t.split_whitespace().collect();
            words.iter().filter(|w| have.contains(*w)).count() as f64 / words.len() as f64
        })
        .collect();
    let best = overlap.iter().copied().fold(0.0, f64::max);
    if best < 0.5 {
        return all();
    }
    hits.iter()
        .zip(&overlap)
        .filter(|(_, &o)| o >= 0.9 * best)
        .map(|(h, _)| h.passage_id.clone())
        .collect()
}

fn ms(since: Instant) -> f64 {
    since.elapsed().as_secs_f64() * 1000.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_trimmed_stream_reads_as_the_trimmed_answer() {
        for pieces in [
            vec![" ", "\n The", " answer", " ", "is", " 42", ". ", "\n"],
            vec!["x"],
            vec![" ", " "],
            vec!["a ", " b", "  "],
        ] {
            let mut out = String::new();
            let mut stream = TrimmedStream::default();
            for p in &pieces {
                stream.push(p, &mut |t: &str| {
                    out.push_str(t);
                    Flow::Continue
                });
            }
            assert_eq!(out, pieces.concat().trim(), "{pieces:?}");
        }
    }

    fn hit(id: &str, text: &str) -> Hit {
        Hit {
            passage_id: id.into(),
            doc_id: id.into(),
            title: String::new(),
            text: text.into(),
            score: 0.0,
            ..Default::default()
        }
    }

    #[test]
    fn citations_follow_the_words_of_a_generated_answer() {
        let hits = [
            hit(
                "a",
                "He was born in Thalrau and worked as a glassblower for most of his life.",
            ),
            hit(
                "b",
                "Contemporaries described him as melancholy and curious.",
            ),
            hit("c", "The glassworks closed in 1931."),
        ];
        // Verbatim: the passage that contains it.
        assert_eq!(cite("melancholy and curious", &hits), ["b"]);
        // A sentence of the model's own: the passage holding most of its words.
        assert_eq!(
            cite("He worked as a glassblower for most of his life.", &hits),
            ["a"]
        );
        // Nothing in common: every passage the model read.
        assert_eq!(cite("Paris is in France.", &hits), ["a", "b", "c"]);
    }
}
