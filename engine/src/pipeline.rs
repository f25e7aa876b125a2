//! The question-answering pipeline: retrieve -> assemble -> read, with the
//! time each stage took. Shared (behind an `Arc`) by `capstan ask`, the HTTP
//! server's workers and `capstan eval qa`.

use std::sync::Arc;
use std::time::Instant;

use capstan_reader::{
    cepe_prompt, llama_prompt, ExtractivePassage, ExtractiveReader, Flow, GenerationParams,
    PromptOptions, Request,
};
use capstan_retriever::{Filter, Hit, Mode, Retriever, SearchOptions};
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::scheduler::Scheduler;

/// Which reader answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum ReaderKind {
    /// The best sentence of the retrieved passages (dense encoder only).
    Extractive,
    /// A Llama-family decoder reading the passages in its prompt.
    Llama,
    /// CAPE (CEPE checkpoints): decoder passages plus encoder chunks.
    Cape,
}

impl ReaderKind {
    /// The reader's name as users spell it.
    pub fn name(self) -> &'static str {
        match self {
            ReaderKind::Extractive => "extractive",
            ReaderKind::Llama => "llama",
            ReaderKind::Cape => "cape",
        }
    }
}

impl std::str::FromStr for ReaderKind {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "extractive" => Ok(ReaderKind::Extractive),
            "llama" => Ok(ReaderKind::Llama),
            "cape" => Ok(ReaderKind::Cape),
            other => Err(format!(
                "unknown reader `{other}` (expected extractive, llama or cape)"
            )),
        }
    }
}

/// One question and how to answer it.
#[derive(Debug, Clone)]
pub struct QaRequest {
    /// The question.
    pub question: String,
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
    /// The extractive answer's sentence.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub highlight: Option<Highlight>,
    /// The reader that answered.
    pub reader: ReaderKind,
    /// Token counts.
    pub usage: Usage,
    /// Stage timings.
    pub timings: Timings,
}

/// Retriever plus readers; each generative reader's model runs behind its own
/// continuous-batching [`Scheduler`].
pub struct Pipeline {
    retriever: Arc<Retriever>,
    extractive: ExtractiveReader,
    llama: Option<Scheduler>,
    cape: Option<Scheduler>,
    /// Search settings besides mode and k.
    pub search: SearchOptions,
}

impl Pipeline {
    /// A pipeline over `retriever`, with the generative readers that were loaded.
    pub fn new(
        retriever: Arc<Retriever>,
        llama: Option<Scheduler>,
        cape: Option<Scheduler>,
        search: SearchOptions,
    ) -> Self {
        let extractive = ExtractiveReader::new(retriever.encoder().clone());
        Self {
            retriever,
            extractive,
            llama,
            cape,
            search,
        }
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
        let (hits, vector) = self.retrieve(&req.question, req.k, req.mode, req.filter.as_ref())?;
        self.read(req, hits, vector, start, on_text)
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
        let mut answer = match self.scheduler(req.reader)? {
            None => self.read_extractive(req, hits, vector, &mut timings, &mut on_text)?,
            Some(s) => self.read_generative(req, s, hits, &mut timings, &mut on_text)?,
        };
        timings.total_ms = ms(start);
        answer.timings = timings;
        Ok(answer)
    }

    fn read_extractive(
        &self,
        req: &QaRequest,
        hits: Vec<Hit>,
        vector: Option<Vec<f32>>,
        timings: &mut Timings,
        on_text: &mut impl FnMut(&str) -> Flow,
    ) -> Result<Answer> {
        let t = Instant::now();
        let question = match vector {
            Some(v) => v,
            None => self.retriever.embed_query(&req.question)?,
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
        timings.assemble_ms = ms(t);
        let t = Instant::now();
        let ranked = self.extractive.rank(&question, &passages)?;
        timings.read_ms = ms(t);
        let (answer, citations, highlight) = match ranked.first() {
            None => (String::new(), Vec::new(), None),
            Some(best) => {
                let hit = &hits[best.passage];
                let text = hit.text[best.start..best.end].to_string();
                let highlight = Highlight {
                    passage_id: hit.passage_id.clone(),
                    start: hit.text[..best.start].chars().count(),
                    end: hit.text[..best.end].chars().count(),
                    score: best.score,
                };
                (text, vec![hit.passage_id.clone()], Some(highlight))
            }
        };
        on_text(&answer);
        Ok(Answer {
            answer,
            citations,
            passages: hits,
            highlight,
            reader: ReaderKind::Extractive,
            usage: Usage::default(),
            timings: Timings::default(),
        })
    }

    fn read_generative(
        &self,
        req: &QaRequest,
        scheduler: &Scheduler,
        hits: Vec<Hit>,
        timings: &mut Timings,
        on_text: &mut impl FnMut(&str) -> Flow,
    ) -> Result<Answer> {
        let model = scheduler.model();
        let t = Instant::now();
        let passages: Vec<capstan_reader::Passage> = hits
            .iter()
            .map(|h| capstan_reader::Passage::new(&h.title, &h.text))
            .collect();
        let mut params = model.with_stops(req.generation.clone());
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
                let opts = PromptOptions {
                    lost_in_the_middle: req.lost_in_the_middle,
                    query_aware: req.query_aware,
                    ..PromptOptions::default()
                };
                let text = llama_prompt(&req.question, &passages, &opts);
                // An instruct model reads the documents and the question as a user turn and
                // ends its answer with an end-of-turn token; a base model continues the text
                // after "Answer:" and is stopped at the end of the line.
                let prompt = if model.uses_chat_template() {
                    model.user_prompt(&text)?
                } else {
                    if !params.stop_strings.iter().any(|s| s == "\n") {
                        params.stop_strings.push("\n".into());
                    }
                    model.plain_prompt(&text)?
                };
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
        model.check_length(usage_in.0, params.max_new_tokens)?;
        timings.assemble_ms = ms(t);
        let t = Instant::now();
        let generation = scheduler.generate_stream(request, params, |_, piece| match piece {
            Some(p) if !p.is_empty() => on_text(p),
            _ => Flow::Continue,
        })?;
        timings.read_ms = ms(t);
        timings.first_token_ms = Some(generation.time_to_first_token.as_secs_f64() * 1000.0);
        let answer = generation
            .text
            .clone()
            .unwrap_or_default()
            .trim()
            .to_string();
        let citations = cite(&answer, &hits);
        Ok(Answer {
            answer,
            citations,
            passages: hits,
            highlight: None,
            reader: req.reader,
            usage: Usage {
                decoder_tokens: usage_in.0,
                encoder_tokens: usage_in.1,
                generated_tokens: generation.tokens.len(),
            },
            timings: Timings::default(),
        })
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

    fn hit(id: &str, text: &str) -> Hit {
        Hit {
            passage_id: id.into(),
            doc_id: id.into(),
            title: String::new(),
            text: text.into(),
            score: 0.0,
            bm25: None,
            dense: None,
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
