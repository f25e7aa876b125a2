//! Generated answers: free text (streamed trimmed, cited by its words) and CAPE's or a
//! chat model's span copied by constrained decoding.

use std::time::Instant;

use capstan_reader::{cepe_prompt, Flow, Request};
use capstan_retriever::Hit;

use super::{
    ms, Answer, AnswerKind, Pipeline, QaRequest, Timings, TokenChoice, TokenLogprobs, Usage,
};
use crate::context::{resolve_span, AnswerMode, Context, ContextMode};
use crate::error::Result;
use crate::reader_kind::ReaderKind;
use crate::scheduler::Scheduler;

impl Pipeline {
    pub(super) fn read_generative(
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
