//! Span and sentence answers: the extractive reader's, and the Llama reader's span ranked with
//! the model's likelihoods ([`crate::answer`]).

use std::time::Instant;

use capstan_reader::{Flow, ScoredSentence};
use capstan_retriever::Hit;

use super::{ms, Answer, AnswerKind, Highlight, Pipeline, QaRequest, Timings, Usage};
use crate::answer::{Candidate, Shortlist};
use crate::context::{AnswerMode, AnswerSpan};
use crate::error::Result;
use crate::reader_kind::ReaderKind;
use crate::scheduler::Scheduler;

impl Pipeline {
    pub(super) fn read_extractive(
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
    /// A Llama reader's span answer by ranking: the candidates of every retrieved passage
    /// scored from retrieval and the text, the best of them scored again with the model's
    /// likelihood of each as the answer to its prompt ([`crate::answer`]).
    pub(super) fn read_ranked_span(
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
