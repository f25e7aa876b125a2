//! What a generative reader reads, and how a grounded answer maps back to it.
//!
//! The retrieved passages go to the model whole, or only their sentences most similar to the
//! question (query-aware compression with the extractive reader's sentence scores: a small
//! model answers better from a short, relevant context, and reads it faster). Each piece of a
//! passage the model sees keeps its byte range in the passage, so a grounded answer, which is
//! a span of one piece, is cited with its exact place in the retrieved passage.

use capstan_reader::{span_text, ChatMessage, LanguageModel, Passage, ScoredSentence, SpanMatch};
use capstan_retriever::Hit;
use serde::{Deserialize, Serialize};

use crate::conversation::Role;
use crate::error::Result;
use crate::words::NON_ANSWER_STARTS;

/// What the Llama reader reads by default (chosen on the dev splits, docs/BENCHMARKS.md): 300
/// tokens answered 349 of the 592 dev questions against 352 at 400 (records / man pages /
/// prose / glossary: 112 / 79 / 47 / 111 against 112 / 83 / 45 / 112), and a one-shot `ask`
/// reads its prompt about 0.1 s sooner on 2 cores, which its 1.5 s goal needed.
pub const DEFAULT_CONTEXT: ContextMode = ContextMode::Budget(300);

/// How much of each retrieved passage the generative reader reads; spelled `passages`,
/// `sentences:N` or `budget:N`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub enum ContextMode {
    /// Whole passages.
    Passages,
    /// The `n` sentences of all the passages most similar to the question, each in its
    /// passage's document, in the passage's own order.
    Sentences(usize),
    /// Whole passages, best first, while they fit in this many tokens of the reader; past
    /// that, the best sentences of the next passages that still fit.
    Budget(usize),
}

impl std::fmt::Display for ContextMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ContextMode::Passages => write!(f, "passages"),
            ContextMode::Sentences(n) => write!(f, "sentences:{n}"),
            ContextMode::Budget(n) => write!(f, "budget:{n}"),
        }
    }
}

impl TryFrom<String> for ContextMode {
    type Error = String;
    fn try_from(s: String) -> std::result::Result<Self, String> {
        s.parse()
    }
}

impl From<ContextMode> for String {
    fn from(c: ContextMode) -> String {
        c.to_string()
    }
}

impl std::str::FromStr for ContextMode {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s.split_once(':') {
            None if s == "passages" => Ok(ContextMode::Passages),
            Some(("sentences", n)) => match n.parse::<usize>() {
                Ok(n) if n > 0 => Ok(ContextMode::Sentences(n)),
                _ => Err(format!(
                    "`{s}`: the sentence count must be a positive integer"
                )),
            },
            Some(("budget", n)) => match n.parse::<usize>() {
                Ok(n) if n >= 16 => Ok(ContextMode::Budget(n)),
                _ => Err(format!(
                    "`{s}`: the token budget must be an integer of at least 16"
                )),
            },
            _ => Err(format!(
                "unknown context `{s}` (expected passages, sentences:N or budget:N)"
            )),
        }
    }
}

/// What kind of answer a reader gives.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize, clap::ValueEnum,
)]
#[serde(rename_all = "lowercase")]
pub enum AnswerMode {
    /// A short span of the retrieved passages, chosen by ranking every candidate span
    /// ([`crate::answer`]; with a Llama reader its likelihood of each shortlisted span is
    /// one of the scores), cited where it stands, its sentence beside it.
    #[default]
    Span,
    /// A span the generative reader copies by greedy decoding constrained to the passages it
    /// read (its own choice, token by token).
    Copy,
    /// The extractive reader's whole best sentence.
    Sentence,
    /// Free text, stopped at the end of the first line.
    Free,
}

impl AnswerMode {
    /// The mode's name as users spell it.
    pub fn name(self) -> &'static str {
        match self {
            AnswerMode::Span => "span",
            AnswerMode::Copy => "copy",
            AnswerMode::Sentence => "sentence",
            AnswerMode::Free => "free",
        }
    }
}

impl std::str::FromStr for AnswerMode {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "span" => Ok(AnswerMode::Span),
            "copy" => Ok(AnswerMode::Copy),
            "sentence" => Ok(AnswerMode::Sentence),
            "free" => Ok(AnswerMode::Free),
            other => Err(format!(
                "unknown answer mode `{other}` (expected span, copy, sentence or free)"
            )),
        }
    }
}

/// A byte range of a retrieved passage that the model reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Piece {
    /// Index of the passage among the retrieved hits.
    pub hit: usize,
    /// Byte offset of the piece in the passage text.
    pub start: usize,
    /// Byte offset one past its end.
    pub end: usize,
}

/// The documents the model reads, best first: each a retrieved passage's pieces.
#[derive(Debug, Clone, Default)]
pub struct Context {
    /// One document per passage that kept a piece, by retrieval rank; its pieces in text order.
    pub documents: Vec<Vec<Piece>>,
}

impl Context {
    /// Every passage whole.
    pub fn whole(hits: &[Hit]) -> Self {
        Self {
            documents: hits
                .iter()
                .enumerate()
                .map(|(i, h)| {
                    vec![Piece {
                        hit: i,
                        start: 0,
                        end: h.text.len(),
                    }]
                })
                .collect(),
        }
    }

    /// The `n` best sentences of `ranked` (best first), grouped by passage; documents ordered
    /// by their best sentence (best first). Within a document the sentences keep the text's
    /// order, or, with `best_last`, go from the weakest to the best: a small model favours what
    /// it read last, so the best sentence should end the context.
    pub fn sentences(hits: &[Hit], ranked: &[ScoredSentence], n: usize, best_last: bool) -> Self {
        let mut documents: Vec<Vec<Piece>> = Vec::new();
        let mut slot: Vec<Option<usize>> = vec![None; hits.len()];
        for s in ranked.iter().take(n) {
            let i = *slot[s.passage].get_or_insert_with(|| {
                documents.push(Vec::new());
                documents.len() - 1
            });
            documents[i].push(Piece {
                hit: s.passage,
                start: s.start,
                end: s.end,
            });
        }
        for pieces in &mut documents {
            if best_last {
                pieces.reverse();
            } else {
                pieces.sort_by_key(|p| p.start);
            }
        }
        Self { documents }
    }

    /// Whole passages by retrieval rank while they fit in `budget` tokens (`tokens` counts a
    /// text's); past that, each further passage's best sentences (by `ranked`, best first)
    /// that still fit, in the text's order. Documents best first.
    pub fn budgeted(
        hits: &[Hit],
        ranked: &[ScoredSentence],
        budget: usize,
        tokens: impl Fn(&str) -> usize,
    ) -> Self {
        // What a document costs besides its text: its header and title.
        const HEADER: usize = 8;
        let mut left = budget;
        let mut documents = Vec::new();
        for (i, hit) in hits.iter().enumerate() {
            let header = HEADER + tokens(&hit.title);
            if left <= header {
                break;
            }
            let whole = tokens(&hit.text);
            if header + whole <= left {
                left -= header + whole;
                documents.push(vec![Piece {
                    hit: i,
                    start: 0,
                    end: hit.text.len(),
                }]);
                continue;
            }
            let mut room = left - header;
            let mut pieces = Vec::new();
            for s in ranked.iter().filter(|s| s.passage == i) {
                let cost = tokens(&hit.text[s.start..s.end]) + 1;
                if cost <= room {
                    room -= cost;
                    pieces.push(Piece {
                        hit: i,
                        start: s.start,
                        end: s.end,
                    });
                }
            }
            if !pieces.is_empty() {
                pieces.sort_by_key(|p| p.start);
                left = room;
                documents.push(pieces);
            }
        }
        Self { documents }
    }

    /// The documents as prompt passages (a document's pieces joined by spaces).
    pub fn passages(&self, hits: &[Hit]) -> Vec<Passage> {
        self.documents
            .iter()
            .map(|pieces| {
                let hit = &hits[pieces[0].hit];
                let text = pieces
                    .iter()
                    .map(|p| hit.text[p.start..p.end].trim())
                    .collect::<Vec<_>>()
                    .join(" ");
                Passage::new(&hit.title, text)
            })
            .collect()
    }

    /// Every piece, in document order: what a grounded answer may copy, besides the titles.
    pub fn pieces(&self) -> Vec<Piece> {
        self.documents.iter().flatten().copied().collect()
    }

    /// The hits whose titles the model reads (one per document), in document order: a
    /// grounded answer may copy a title too ("Which program is the GNU linker?" is answered
    /// by the title of the page about it).
    pub fn title_hits(&self) -> Vec<usize> {
        self.documents.iter().map(|d| d[0].hit).collect()
    }
}

/// Where a grounded answer stands in a retrieved passage (character offsets).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AnswerSpan {
    /// The passage.
    pub passage_id: String,
    /// Character offset of the answer in the passage text.
    pub start: usize,
    /// Character offset one past its end.
    pub end: usize,
    /// The offsets are in the passage's title, not its text.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub in_title: bool,
}

/// A grounded answer's text (copied from its first occurrence) and every place it stands,
/// from the span matches over `pieces` followed by the titles of `title_hits`; `None` when
/// the span is empty.
pub fn resolve_span(
    source: &capstan_reader::SpanSource,
    pieces: &[Piece],
    title_hits: &[usize],
    hits: &[Hit],
    matches: &[SpanMatch],
) -> Option<(String, Vec<AnswerSpan>)> {
    let mut text = None;
    let mut spans: Vec<AnswerSpan> = Vec::new();
    for &m in matches {
        let Some((t, m)) = span_text(source, m) else {
            continue;
        };
        let span = match pieces.get(m.passage) {
            Some(piece) => {
                let passage = &hits[piece.hit].text;
                let (start, end) = (piece.start + m.start, piece.start + m.end);
                AnswerSpan {
                    passage_id: hits[piece.hit].passage_id.clone(),
                    start: passage[..start].chars().count(),
                    end: passage[..end].chars().count(),
                    in_title: false,
                }
            }
            None => {
                let hit = &hits[title_hits[m.passage - pieces.len()]];
                AnswerSpan {
                    passage_id: hit.passage_id.clone(),
                    start: hit.title[..m.start].chars().count(),
                    end: hit.title[..m.end].chars().count(),
                    in_title: true,
                }
            }
        };
        if !spans.contains(&span) {
            spans.push(span);
        }
        text.get_or_insert(t);
    }
    text.map(|t| (t, spans))
}

/// Re-scores ranked sentences (best first) with their lexical overlap with the question:
/// `score + weight × (share of the question's content words found in the sentence)`, words
/// compared by their first five letters (so "founded" meets "founder", "die" meets "died").
/// The sentence encoder sees every sentence of a biography as about its subject; the words
/// the question asks with ("founded", "elevation", "capital") tell the sentences apart.
pub fn add_lexical_overlap(
    question: &str,
    hits: &[Hit],
    ranked: &mut [ScoredSentence],
    weight: f32,
) {
    fn stems(text: &str) -> Vec<String> {
        text.split(|c: char| !c.is_alphanumeric())
            .filter(|w| !w.is_empty())
            .map(|w| w.to_lowercase().chars().take(5).collect())
            .collect()
    }
    if weight == 0.0 {
        return;
    }
    let wanted: Vec<String> = stems(question)
        .into_iter()
        .filter(|w| !NON_ANSWER_STARTS.contains(&w.as_str()))
        .collect();
    if wanted.is_empty() {
        return;
    }
    for s in ranked.iter_mut() {
        let have = stems(&hits[s.passage].text[s.start..s.end]);
        let found = wanted.iter().filter(|w| have.contains(w)).count();
        s.score += weight * found as f32 / wanted.len() as f32;
    }
    ranked.sort_by(|a, b| {
        b.score
            .total_cmp(&a.score)
            .then(a.passage.cmp(&b.passage))
            .then(a.start.cmp(&b.start))
    });
}

/// The worked example a prompt may carry: a question, its document and its short answer,
/// shown to the model as an earlier turn of the conversation.
/// A fact of common knowledge, in no evaluation set (an example taken from how one set was
/// written taught the model that set's questions, docs/BENCHMARKS.md).
const EXAMPLE_QUESTION: &str = "Who painted the ceiling of the Sistine Chapel?";
const EXAMPLE_DOCUMENT: (&str, &str) = (
    "Sistine Chapel",
    "The Sistine Chapel is a chapel in the Apostolic Palace in Vatican City. Its ceiling was \
     painted by Michelangelo between 1508 and 1512.",
);
const EXAMPLE_ANSWER: &str = "Michelangelo";

/// Earlier turns of a conversation the Llama reader sees (the rest are
/// dropped: the documents and the question must fit its context).
pub const HISTORY_TURNS: usize = 4;
/// The most characters of an earlier turn the reader sees.
pub const HISTORY_TURN_CHARS: usize = 600;

fn recent(history: &[crate::conversation::Turn]) -> &[crate::conversation::Turn] {
    &history[history.len().saturating_sub(HISTORY_TURNS)..]
}

fn cut(text: &str) -> String {
    match text.char_indices().nth(HISTORY_TURN_CHARS) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text.to_string(),
    }
}

/// The order of the documents in the Llama reader's prompt.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PassageOrder {
    /// By retrieval rank (best last or first, see [`PromptStyle::best_last`]).
    Rank,
    /// In a fixed order (by title, then text) whatever the question: prompts that retrieve the
    /// same passages share them as a prefix, which the prefix cache reuses.
    Stable,
}

impl PassageOrder {
    /// The default for a context mode (measured on the dev split, docs/BENCHMARKS.md): whole
    /// passages recur between questions, so stable; a question's own sentences do not, so by
    /// rank, as the prompt was chosen.
    pub fn default_for(context: ContextMode) -> Self {
        match context {
            ContextMode::Passages => PassageOrder::Stable,
            ContextMode::Sentences(_) | ContextMode::Budget(_) => PassageOrder::Rank,
        }
    }
}

impl std::str::FromStr for PassageOrder {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "rank" => Ok(PassageOrder::Rank),
            "stable" => Ok(PassageOrder::Stable),
            other => Err(format!("`{other}`: expected rank or stable")),
        }
    }
}

impl std::fmt::Display for PassageOrder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            PassageOrder::Rank => "rank",
            PassageOrder::Stable => "stable",
        })
    }
}

/// How the Llama reader's prompt is made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PromptStyle {
    /// The instruction opening the user turn.
    pub instruction: String,
    /// The best passage last, next to the question (a small model reads the end of its
    /// context best), instead of first.
    pub best_last: bool,
    /// Lost-in-the-middle order (strongest at both ends).
    pub lost_in_the_middle: bool,
    /// The question before the documents too.
    pub query_aware: bool,
    /// One worked example as an earlier turn.
    pub example: bool,
    /// The documents' order.
    pub order: PassageOrder,
}

/// The instruction of the default prompt (chosen on the dev split, docs/BENCHMARKS.md).
pub const SHORT_ANSWER_INSTRUCTION: &str =
    "Answer the question with a short phrase copied from the documents.";

impl Default for PromptStyle {
    fn default() -> Self {
        Self {
            instruction: SHORT_ANSWER_INSTRUCTION.to_string(),
            best_last: true,
            lost_in_the_middle: false,
            query_aware: false,
            example: true,
            order: PassageOrder::default_for(DEFAULT_CONTEXT),
        }
    }
}

impl PromptStyle {
    fn text(&self, question: &str, passages: &[Passage]) -> String {
        let mut ordered = passages.to_vec();
        match self.order {
            PassageOrder::Stable => {
                ordered.sort_by(|a, b| (&a.title, &a.text).cmp(&(&b.title, &b.text)))
            }
            PassageOrder::Rank if self.best_last => ordered.reverse(),
            PassageOrder::Rank => {}
        }
        capstan_reader::llama_prompt(
            question,
            &ordered,
            &capstan_reader::PromptOptions {
                instruction: self.instruction.clone(),
                lost_in_the_middle: self.lost_in_the_middle,
                query_aware: self.query_aware,
            },
        )
    }

    /// The prompt's token ids: for an instruct model its chat template (the worked example as
    /// an earlier user turn and its answer), for a base model plain text after BOS.
    /// `history`: the conversation's earlier turns; the last [`HISTORY_TURNS`]
    /// come before the documents' turn, each cut to [`HISTORY_TURN_CHARS`].
    pub fn prompt(
        &self,
        model: &LanguageModel,
        question: &str,
        passages: &[Passage],
        history: &[crate::conversation::Turn],
    ) -> Result<Vec<u32>> {
        let text = self.text(question, passages);
        let example = self.example.then(|| {
            let doc = Passage::new(EXAMPLE_DOCUMENT.0, EXAMPLE_DOCUMENT.1);
            (self.text(EXAMPLE_QUESTION, &[doc]), EXAMPLE_ANSWER)
        });
        let ids = if model.uses_chat_template() {
            let mut messages = Vec::new();
            if let Some((q, a)) = example {
                messages.push(ChatMessage {
                    role: "user".into(),
                    content: q,
                });
                messages.push(ChatMessage {
                    role: "assistant".into(),
                    content: a.into(),
                });
            }
            for turn in recent(history) {
                messages.push(ChatMessage {
                    role: match turn.role {
                        Role::User => "user",
                        Role::Assistant => "assistant",
                    }
                    .into(),
                    content: cut(&turn.content),
                });
            }
            messages.push(ChatMessage {
                role: "user".into(),
                content: text,
            });
            model.chat_prompt(&messages)?
        } else {
            let earlier: String = recent(history)
                .iter()
                .map(|t| match t.role {
                    Role::User => format!("Question: {}\n", cut(&t.content)),
                    Role::Assistant => format!("Answer: {}\n\n", cut(&t.content)),
                })
                .collect();
            let text = match example {
                Some((q, a)) => format!("{q} {a}\n\n{earlier}{text}"),
                None => format!("{earlier}{text}"),
            };
            model.plain_prompt(&text)?
        };
        Ok(ids)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::answer::asks::wants_number;

    /// A stable order gives the same prompt whatever the passages' ranks; by rank, the best
    /// passage ends the documents (best last) or opens them.
    #[test]
    fn stable_order_does_not_depend_on_rank() {
        let p = |t: &str, x: &str| Passage::new(t, x);
        let ranked = [p("B", "xtwo"), p("A", "xone"), p("C", "xthree")];
        let reranked = [p("C", "xthree"), p("B", "xtwo"), p("A", "xone")];
        let style = |order, best_last| PromptStyle {
            order,
            best_last,
            ..PromptStyle::default()
        };
        let stable = style(PassageOrder::Stable, true);
        assert_eq!(stable.text("q?", &ranked), stable.text("q?", &reranked));
        let text = stable.text("q?", &ranked);
        assert!(text.find("xone") < text.find("xtwo") && text.find("xtwo") < text.find("xthree"));
        let rank = style(PassageOrder::Rank, true).text("q?", &ranked);
        assert!(
            rank.find("xone") < rank.find("xtwo"),
            "best (xtwo) last: {rank}"
        );
        let first = style(PassageOrder::Rank, false).text("q?", &ranked);
        assert!(first.find("xtwo") < first.find("xone"), "{first}");
        assert_eq!(
            PassageOrder::default_for(ContextMode::Passages),
            PassageOrder::Stable
        );
        assert_eq!("stable".parse::<PassageOrder>(), Ok(PassageOrder::Stable));
        assert!("best".parse::<PassageOrder>().is_err());
    }

    fn hit(id: &str, text: &str) -> Hit {
        Hit {
            passage_id: id.into(),
            doc_id: id.into(),
            title: format!("T{id}"),
            text: text.into(),
            score: 0.0,
            ..Default::default()
        }
    }

    #[test]
    fn number_questions_are_told_apart() {
        assert_eq!(
            wants_number("In what year was Skagavey founded?"),
            Some(true)
        );
        assert_eq!(wants_number("How many employees does it have?"), Some(true));
        assert_eq!(
            wants_number("Which version of Rust does it need?"),
            Some(true)
        );
        assert_eq!(wants_number("Where was Urgaud Aelri born?"), Some(false));
        assert_eq!(wants_number("Who invented the Vebre plough?"), Some(false));
        assert_eq!(wants_number("Which option of cp copies recursively?"), None);
        assert_eq!(wants_number("When was it founded?"), None);
    }

    #[test]
    fn context_modes_parse_and_print() {
        for s in ["passages", "sentences:3"] {
            assert_eq!(s.parse::<ContextMode>().unwrap().to_string(), s);
        }
        assert!("sentences:0".parse::<ContextMode>().is_err());
        assert!("sentences".parse::<ContextMode>().is_err());
        assert!("span".parse::<AnswerMode>().is_ok() && "x".parse::<AnswerMode>().is_err());
    }

    #[test]
    fn sentences_are_grouped_by_document_best_document_first() {
        let hits = [hit("a", "One. Two. Three."), hit("b", "Four. Five.")];
        let s = |passage, start, end, score| ScoredSentence {
            passage,
            start,
            end,
            score,
        };
        let ranked = [
            s(1, 6, 11, 0.9),
            s(0, 10, 16, 0.8),
            s(0, 0, 4, 0.7),
            s(1, 0, 5, 0.1),
        ];
        let ctx = Context::sentences(&hits, &ranked, 3, false);
        let passages = ctx.passages(&hits);
        assert_eq!(passages[0].text, "Five.");
        assert_eq!(passages[1].text, "One. Three.");
        assert_eq!(ctx.pieces().len(), 3);
        // Best last: within a document, from the weakest sentence to the best.
        let ranked = [s(0, 0, 4, 0.9), s(0, 10, 16, 0.7)];
        let ctx = Context::sentences(&hits, &ranked, 2, true);
        assert_eq!(ctx.passages(&hits)[0].text, "Three. One.");
        let ctx = Context::sentences(&hits, &ranked, 2, false);
        assert_eq!(ctx.passages(&hits)[0].text, "One. Three.");
    }
}
