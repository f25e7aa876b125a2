//! Chunking documents into passages of at most N tokens of the dense
//! encoder's tokenizer, never splitting a word, with an overlap.

use rayon::prelude::*;
use serde::{Deserialize, Serialize};
use tokenizers::Tokenizer;

use crate::document::Document;
use crate::error::{Error, Result};

/// A retrievable unit: a span of one document.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
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
        Ok(Self { tokenizer, params })
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

    /// Chunks one document.
    pub fn chunk(&self, doc: &Document) -> Vec<Passage> {
        let words = word_spans(&doc.text);
        let tokens = self.tokens_per_word(&doc.text, &words);
        let mut passages = Vec::new();
        let mut start = 0;
        let mut char_cursor = CharCursor::default();
        while start < words.len() {
            let mut end = start;
            let mut used = 0;
            while end < words.len()
                && (end == start || used + tokens[end] <= self.params.chunk_tokens)
            {
                used += tokens[end];
                end += 1;
            }
            let (byte_start, byte_end) = (words[start].0, words[end - 1].1);
            passages.push(Passage {
                id: format!("{}#{}", doc.id, passages.len()),
                doc_id: doc.id.clone(),
                title: doc.title.clone(),
                text: doc.text[byte_start..byte_end].to_string(),
                index: passages.len() as u32,
                char_start: char_cursor.char_offset(&doc.text, byte_start),
                char_end: char_cursor.char_offset(&doc.text, byte_end),
            });
            if end == words.len() {
                break;
            }
            // Step back over whole words worth at most `overlap` tokens.
            let mut next = end;
            let mut shared = 0;
            while next > start + 1 && shared + tokens[next - 1] <= self.params.overlap {
                next -= 1;
                shared += tokens[next];
            }
            start = next;
        }
        passages
    }

    fn tokens_per_word(&self, text: &str, words: &[(usize, usize)]) -> Vec<usize> {
        let mut counts = vec![0usize; words.len()];
        let Ok(encoding) = self.tokenizer.encode(text, false) else {
            // A tokenizer failure on odd input: fall back to one token a word.
            return vec![1; words.len()];
        };
        let mut w = 0;
        for &(s, e) in encoding.get_offsets() {
            if e <= s {
                continue;
            }
            while w < words.len() && words[w].1 <= s {
                w += 1;
            }
            if w == words.len() {
                break;
            }
            counts[w] += 1;
        }
        // A word the tokenizer dropped entirely still costs something.
        counts.iter_mut().for_each(|c| *c = (*c).max(1));
        counts
    }
}

/// Byte spans of whitespace-separated words.
fn word_spans(text: &str) -> Vec<(usize, usize)> {
    let mut spans = Vec::new();
    let mut start = None;
    for (i, c) in text.char_indices() {
        match (c.is_whitespace(), start) {
            (true, Some(s)) => {
                spans.push((s, i));
                start = None;
            }
            (false, None) => start = Some(i),
            _ => {}
        }
    }
    if let Some(s) = start {
        spans.push((s, text.len()));
    }
    spans
}

/// Converts increasing byte offsets to character offsets in one pass.
#[derive(Default)]
struct CharCursor {
    byte: usize,
    chars: usize,
}

impl CharCursor {
    fn char_offset(&mut self, text: &str, byte: usize) -> usize {
        if byte < self.byte {
            *self = Self::default();
        }
        self.chars += text[self.byte..byte].chars().count();
        self.byte = byte;
        self.chars
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
