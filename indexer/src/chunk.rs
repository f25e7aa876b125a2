//! Chunking documents into passages of at most N tokens of the dense
//! encoder's tokenizer, never splitting a word, with an overlap.

use std::collections::VecDeque;

use rayon::prelude::*;
use serde::{Deserialize, Serialize};
use tokenizers::Tokenizer;

use crate::document::Document;
use crate::error::{Error, Result};

/// A retrievable unit: a span of one document.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Passage {
    /// `{doc_id}#{index}`.
    pub id: String,
    /// The document it comes from.
    pub doc_id: String,
    /// The document's title.
    pub title: String,
    /// The passage text (a verbatim slice of the document text).
    pub text: String,
    /// Its index within the document, from 0.
    pub index: u32,
    /// Character offset of its first character in the document text.
    pub char_start: usize,
    /// Character offset one past its last character.
    pub char_end: usize,
    /// Its pages and section, where the document has them (flattened into the
    /// record: `page_start`, `page_end`, `section`).
    #[serde(flatten)]
    pub location: Location,
}

/// Where a passage stands in its document, for citing it ("handbook.pdf, p. 12").
/// The same fields travel in passage records, search hits and Qdrant payloads.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Location {
    /// The 1-based page its first character is on, in a paged document (PDF).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub page_start: Option<u32>,
    /// The page its last character is on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub page_end: Option<u32>,
    /// The heading of the section it begins in, where the document has them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub section: Option<String>,
}

impl Location {
    /// For people: "p. 12" or "pp. 12–13", then the section heading; empty
    /// when neither is known.
    pub fn describe(&self) -> String {
        let pages = match (self.page_start, self.page_end) {
            (Some(a), Some(b)) if b > a => Some(format!("pp. {a}–{b}")),
            (Some(a), _) => Some(format!("p. {a}")),
            _ => None,
        };
        let section = self.section.as_ref().map(|s| format!("“{s}”"));
        pages
            .into_iter()
            .chain(section)
            .collect::<Vec<_>>()
            .join(", ")
    }
}

impl Passage {
    /// The text the dense encoder embeds: `title + ". " + text`.
    pub fn embedding_text(&self) -> String {
        if self.title.is_empty() {
            self.text.clone()
        } else {
            format!("{}. {}", self.title, self.text)
        }
    }
}

/// Chunking parameters, recorded in the manifest.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChunkParams {
    /// At most this many tokens a passage (a single longer word stays whole).
    pub chunk_tokens: usize,
    /// Consecutive passages of a document share about this many tokens.
    pub overlap: usize,
}

impl Default for ChunkParams {
    fn default() -> Self {
        Self {
            chunk_tokens: 256,
            overlap: 32,
        }
    }
}

impl ChunkParams {
    /// Checks the parameters make progress.
    pub fn validate(&self) -> Result<()> {
        if self.chunk_tokens < 8 {
            return Err(Error::Setting {
                name: "--chunk-tokens",
                message: format!("{} is too small (at least 8)", self.chunk_tokens),
            });
        }
        if self.overlap >= self.chunk_tokens / 2 {
            return Err(Error::Setting {
                name: "--overlap",
                message: format!(
                    "{} must be less than half of --chunk-tokens ({})",
                    self.overlap, self.chunk_tokens
                ),
            });
        }
        Ok(())
    }
}

/// Splits documents into passages with a tokenizer that does not truncate.
pub struct Chunker {
    tokenizer: Tokenizer,
    params: ChunkParams,
    /// The encoder's input window (special tokens included), when passages
    /// must fit it whole; see [`Chunker::for_encoder`].
    window: Option<usize>,
    /// Tokens the encoder adds around every input ([CLS], [SEP]).
    special_tokens: usize,
}

impl Chunker {
    /// A chunker counting tokens with (a non-truncating copy of) `tokenizer`.
    pub fn new(tokenizer: &Tokenizer, params: ChunkParams) -> Result<Self> {
        params.validate()?;
        let mut tokenizer = tokenizer.clone();
        tokenizer
            .with_truncation(None)
            .expect("disabling truncation cannot fail");
        tokenizer.with_padding(None);
        let special_tokens = tokenizer.encode("", true).map_or(0, |e| e.len());
        Ok(Self {
            tokenizer,
            params,
            window: None,
            special_tokens,
        })
    }

    /// A chunker whose passages the encoder embeds whole: the text embedded is
    /// `title + ". " + passage` between the encoder's special tokens, so a
    /// document's passages get the window less those, not `chunk_tokens`
    /// alone (which let the encoder cut the last tokens of every full
    /// passage of a titled document).
    pub fn for_encoder(encoder: &crate::Encoder, params: ChunkParams) -> Result<Self> {
        let mut chunker = Self::new(encoder.tokenizer(), params)?;
        chunker.window = Some(encoder.info().max_tokens);
        Ok(chunker)
    }

    /// The most tokens a passage of `doc` may have.
    fn budget(&self, doc: &Document) -> usize {
        let Some(window) = self.window else {
            return self.params.chunk_tokens;
        };
        let title = if doc.title.is_empty() {
            0
        } else {
            // "title." (the space before the passage adds no token).
            self.tokenizer
                .encode(format!("{}.", doc.title), false)
                .map_or(0, |e| e.len())
        };
        // A title that leaves less than this is cut by the encoder instead.
        const MIN_PASSAGE: usize = 32;
        let room = window.saturating_sub(self.special_tokens + title);
        self.params.chunk_tokens.min(room.max(MIN_PASSAGE))
    }

    /// Chunks many documents in parallel, keeping document order.
    pub fn chunk_all(&self, docs: &[Document]) -> Vec<Passage> {
        docs.par_iter()
            .map(|d| self.chunk(d))
            .collect::<Vec<_>>()
            .into_iter()
            .flatten()
            .collect()
    }

    /// Chunks one document. Words are read and tokenized a window at a
    /// time and dropped once passed, so memory does not grow with the
    /// document (tokenizing a 50 MB document at once took 6 GB), and every
    /// offset is computed once, in one pass.
    pub fn chunk(&self, doc: &Document) -> Vec<Passage> {
        let budget = self.budget(doc);
        let mut words = WordTokens::new(&self.tokenizer, &doc.text);
        // The words from the current passage's first onwards.
        let mut ahead: VecDeque<Word> = VecDeque::new();
        let mut passages = Vec::new();
        loop {
            let mut end = 0;
            let mut used = 0;
            loop {
                if end == ahead.len() {
                    match words.next() {
                        Some(w) => ahead.push_back(w),
                        None => break,
                    }
                }
                let tokens = ahead[end].tokens;
                if end > 0 && used + tokens > budget {
                    break;
                }
                used += tokens;
                end += 1;
            }
            if end == 0 {
                break;
            }
            let (first, last) = (ahead[0], ahead[end - 1]);
            let pages = doc.layout.pages_of(first.char_start, last.char_end);
            passages.push(Passage {
                id: format!("{}#{}", doc.id, passages.len()),
                doc_id: doc.id.clone(),
                title: doc.title.clone(),
                text: doc.text[first.byte_start..last.byte_end].to_string(),
                index: passages.len() as u32,
                char_start: first.char_start,
                char_end: last.char_end,
                location: Location {
                    page_start: pages.map(|p| p.0),
                    page_end: pages.map(|p| p.1),
                    section: doc.layout.section_at(first.char_start).map(str::to_string),
                },
            });
            if end == ahead.len() {
                match words.next() {
                    Some(w) => ahead.push_back(w),
                    None => break,
                }
            }
            // Step back over whole words worth at most `overlap` tokens.
            let mut next = end;
            let mut shared = 0;
            while next > 1 && shared + ahead[next - 1].tokens <= self.params.overlap {
                next -= 1;
                shared += ahead[next].tokens;
            }
            ahead.drain(..next);
        }
        passages
    }
}

/// A whitespace-separated word with its offsets and its token count.
#[derive(Debug, Clone, Copy)]
struct Word {
    byte_start: usize,
    byte_end: usize,
    char_start: usize,
    char_end: usize,
    tokens: usize,
}

/// Words tokenized per window of this many words.
const WORD_WINDOW: usize = 2048;

/// The words of a text with their token counts, tokenized a window at a
/// time: words never span whitespace, and neither do the tokenizer's
/// pre-tokens, so a window's counts equal the whole text's.
struct WordTokens<'a> {
    tokenizer: &'a Tokenizer,
    text: &'a str,
    chars: std::iter::Peekable<std::str::CharIndices<'a>>,
    char_pos: usize,
    window: VecDeque<Word>,
}

impl<'a> WordTokens<'a> {
    fn new(tokenizer: &'a Tokenizer, text: &'a str) -> Self {
        Self {
            tokenizer,
            text,
            chars: text.char_indices().peekable(),
            char_pos: 0,
            window: VecDeque::with_capacity(WORD_WINDOW),
        }
    }

    /// The next word's offsets (token count still 0).
    fn next_span(&mut self) -> Option<Word> {
        while let Some(&(_, c)) = self.chars.peek() {
            if !c.is_whitespace() {
                break;
            }
            self.chars.next();
            self.char_pos += 1;
        }
        let &(byte_start, _) = self.chars.peek()?;
        let char_start = self.char_pos;
        let mut byte_end = self.text.len();
        while let Some(&(i, c)) = self.chars.peek() {
            if c.is_whitespace() {
                byte_end = i;
                break;
            }
            self.chars.next();
            self.char_pos += 1;
        }
        Some(Word {
            byte_start,
            byte_end,
            char_start,
            char_end: self.char_pos,
            tokens: 0,
        })
    }

    fn fill(&mut self) {
        while self.window.len() < WORD_WINDOW {
            match self.next_span() {
                Some(w) => self.window.push_back(w),
                None => break,
            }
        }
        let (Some(first), Some(last)) = (self.window.front(), self.window.back()) else {
            return;
        };
        let base = first.byte_start;
        let slice = &self.text[base..last.byte_end];
        let Ok(encoding) = self.tokenizer.encode(slice, false) else {
            // A tokenizer failure on odd input: one token a word.
            self.window.iter_mut().for_each(|w| w.tokens = 1);
            return;
        };
        let mut w = 0;
        for &(s, e) in encoding.get_offsets() {
            if e <= s {
                continue;
            }
            let s = s + base;
            while w < self.window.len() && self.window[w].byte_end <= s {
                w += 1;
            }
            if w == self.window.len() {
                break;
            }
            self.window[w].tokens += 1;
        }
        // A word the tokenizer dropped entirely still costs something.
        self.window
            .iter_mut()
            .for_each(|w| w.tokens = w.tokens.max(1));
    }
}

impl Iterator for WordTokens<'_> {
    type Item = Word;

    fn next(&mut self) -> Option<Word> {
        if self.window.is_empty() {
            self.fill();
        }
        self.window.pop_front()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A word-level stand-in: every whitespace word is one token, except
    /// words containing '-' which split in pieces.
    fn tokenizer() -> Tokenizer {
        let json = r###"{"version":"1.0","truncation":null,"padding":null,"added_tokens":[],
            "normalizer":null,"pre_tokenizer":{"type":"BertPreTokenizer"},"post_processor":null,
            "decoder":null,"model":{"type":"WordPiece","unk_token":"[UNK]",
            "continuing_subword_prefix":"##","max_input_chars_per_word":100,"vocab":{"[UNK]":0}}}"###;
        json.parse().unwrap()
    }

    fn doc(text: &str) -> Document {
        Document {
            id: "d".into(),
            title: "T".into(),
            text: text.into(),
            metadata: None,
            ..Default::default()
        }
    }

    #[test]
    fn passages_respect_the_budget_and_overlap() {
        let text: Vec<String> = (0..100).map(|i| format!("w{i}")).collect();
        let text = text.join(" ");
        let chunker = Chunker::new(
            &tokenizer(),
            ChunkParams {
                chunk_tokens: 20,
                overlap: 5,
            },
        )
        .unwrap();
        let passages = chunker.chunk(&doc(&text));
        assert!(passages.len() >= 6);
        for (i, p) in passages.iter().enumerate() {
            assert_eq!(p.id, format!("d#{i}"));
            assert!(p.text.split_whitespace().count() <= 20);
            let chars: String = text
                .chars()
                .skip(p.char_start)
                .take(p.char_end - p.char_start)
                .collect();
            assert_eq!(chars, p.text);
        }
        let first: Vec<&str> = passages[0].text.split_whitespace().collect();
        let second: Vec<&str> = passages[1].text.split_whitespace().collect();
        assert_eq!(first[15..], second[..5]);
        assert!(passages.last().unwrap().text.ends_with("w99"));
    }

    #[test]
    fn token_counts_hold_across_tokenizer_windows() {
        // More words than one tokenizer window, many of several tokens: each
        // passage, tokenized alone, fits the budget, and the passages are
        // exactly the greedy fill (one more word would not have fitted).
        let words: Vec<String> = (0..3 * WORD_WINDOW + 7)
            .map(|i| match i % 5 {
                0 => format!("a-b-{i}"),
                1 => format!("x-{i}"),
                _ => format!("w{i}"),
            })
            .collect();
        let text = words.join("  ");
        let tok = tokenizer();
        let params = ChunkParams {
            chunk_tokens: 40,
            overlap: 6,
        };
        let chunker = Chunker::new(&tok, params).unwrap();
        let passages = chunker.chunk(&doc(&text));
        let count = |t: &str| tok.encode(t, false).unwrap().len();
        let mut covered = 0;
        for p in &passages {
            assert!(count(&p.text) <= params.chunk_tokens, "{}", p.id);
            let n = p.text.split_whitespace().count();
            let head = p.text.split_whitespace().next().unwrap();
            let first = words.iter().position(|w| w == head).unwrap();
            if first + n < words.len() {
                let longer = format!("{} {}", p.text, words[first + n]);
                assert!(count(&longer) > params.chunk_tokens, "{} is not full", p.id);
            }
            covered = covered.max(first + n);
        }
        assert_eq!(covered, words.len());
    }

    #[test]
    fn words_are_never_split_and_offsets_count_characters() {
        // "a-b-c" is five tokens for the BERT pre-tokenizer but one word.
        let text = "héllo wörld a-b-c end";
        let chunker = Chunker::new(
            &tokenizer(),
            ChunkParams {
                chunk_tokens: 8,
                overlap: 0,
            },
        )
        .unwrap();
        let passages = chunker.chunk(&doc(text));
        for p in &passages {
            assert!(text.contains(&p.text));
            for w in p.text.split_whitespace() {
                assert!(text.split_whitespace().any(|x| x == w));
            }
        }
        assert_eq!(passages[0].char_start, 0);
        assert_eq!(passages.last().unwrap().char_end, text.chars().count());
    }

    #[test]
    fn bad_params_are_rejected() {
        assert!(Chunker::new(
            &tokenizer(),
            ChunkParams {
                chunk_tokens: 16,
                overlap: 8
            }
        )
        .is_err());
        assert!(Chunker::new(
            &tokenizer(),
            ChunkParams {
                chunk_tokens: 4,
                overlap: 0
            }
        )
        .is_err());
    }
}
