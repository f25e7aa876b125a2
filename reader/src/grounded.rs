//! Grounded answers: decoding constrained to copy a span of the passages the model was given.
//!
//! At every step only the tokens that continue some occurrence of the answer so far in a
//! passage are allowed, plus the end of the answer (the model's stop tokens) where an
//! occurrence ends on a word boundary. The answer therefore cannot say what no passage says,
//! and its citation is exactly where the span stands.
//!
//! The constraint works on the bytes the tokens decode to, not on the passages' own token ids,
//! which is what makes copying by tokens hard: the same text is tokenized differently at a
//! span's start (a word with or without its leading space, a span starting mid-way through the
//! passage's tokenization), byte-level BPE pieces can be half a UTF-8 character, and the model
//! may prefer another case. So every vocabulary entry is turned into the bytes it decodes to
//! (GPT-2 byte-level, SentencePiece `▁` and `<0xNN>` byte fallback, or word-level), lower-cased
//! (ASCII) and stored in a byte trie; a step walks that trie along the passage bytes that follow
//! each live occurrence, so a step costs (occurrences × longest token) whatever the vocabulary.
//! The first token may carry one leading space the passage does not have (a word-initial BPE
//! piece), and a span starts and ends on word boundaries.

use std::collections::HashMap;
use std::sync::Arc;

use tokenizers::Tokenizer;

use crate::clause::{is_clause_break, is_continuation, is_word, may_start};
use crate::error::{Error, Result};

/// The byte string each token id decodes to, and a trie over them (lower-cased ASCII).
pub struct TokenBytes {
    /// Lower-cased bytes of each id; empty for ids a span can never use (special tokens).
    pieces: Vec<Vec<u8>>,
    trie: Vec<TrieNode>,
}

#[derive(Default)]
struct TrieNode {
    /// Children sorted by byte.
    children: Vec<(u8, u32)>,
    /// Token ids whose bytes end at this node.
    tokens: Vec<u32>,
}

impl std::fmt::Debug for TokenBytes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenBytes")
            .field("vocab", &self.pieces.len())
            .field("trie_nodes", &self.trie.len())
            .finish()
    }
}

/// How a tokenizer's pieces become text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PieceStyle {
    /// GPT-2 byte-level BPE: each char of a piece stands for one byte.
    ByteLevel,
    /// SentencePiece: `▁` is a space, `<0xNN>` a raw byte.
    SentencePiece,
    /// Word-level with no decoder: pieces are joined by spaces.
    Words,
}

/// GPT-2's `bytes_to_unicode`, inverted: the byte each printable stand-in char means.
fn byte_level_decoder() -> HashMap<char, u8> {
    let mut printable: Vec<u32> = (33..=126).chain(161..=172).chain(174..=255).collect();
    let mut chars: Vec<u32> = printable.clone();
    let mut n = 0;
    for b in 0..=255u32 {
        if !printable.contains(&b) {
            printable.push(b);
            chars.push(256 + n);
            n += 1;
        }
    }
    printable
        .into_iter()
        .zip(chars)
        .map(|(b, c)| (char::from_u32(c).expect("valid stand-in char"), b as u8))
        .collect()
}

fn sentencepiece_byte(piece: &str) -> Option<u8> {
    let hex = piece.strip_prefix("<0x")?.strip_suffix('>')?;
    (hex.len() == 2).then(|| u8::from_str_radix(hex, 16).ok())?
}

impl TokenBytes {
    /// The pieces of `tokenizer`'s vocabulary; special (added) tokens get no bytes.
    pub fn from_tokenizer(tokenizer: &Tokenizer) -> Self {
        let decoder = tokenizer
            .get_decoder()
            .and_then(|d| serde_json::to_string(d).ok())
            .unwrap_or_default();
        let style = if decoder.contains("\"ByteLevel\"") {
            PieceStyle::ByteLevel
        } else if decoder.is_empty() {
            PieceStyle::Words
        } else {
            PieceStyle::SentencePiece
        };
        let special: std::collections::HashSet<u32> = tokenizer
            .get_added_tokens_decoder()
            .iter()
            .filter(|(_, t)| t.special)
            .map(|(&id, _)| id)
            .collect();
        let vocab = tokenizer.get_vocab(true);
        let size = vocab.values().map(|&id| id as usize + 1).max().unwrap_or(0);
        let byte_level = byte_level_decoder();
        let mut pieces = vec![Vec::new(); size];
        for (piece, id) in vocab {
            if special.contains(&id) {
                continue;
            }
            pieces[id as usize] = match style {
                PieceStyle::ByteLevel => piece
                    .chars()
                    .map(|c| byte_level.get(&c).copied())
                    .collect::<Option<Vec<u8>>>()
                    .unwrap_or_else(|| piece.into_bytes()),
                PieceStyle::SentencePiece => match sentencepiece_byte(&piece) {
                    Some(b) => vec![b],
                    None => piece.replace('\u{2581}', " ").into_bytes(),
                },
                PieceStyle::Words => format!(" {piece}").into_bytes(),
            };
        }
        Self::from_pieces(pieces)
    }

    /// From the bytes of each id (index = id; empty = never allowed).
    pub fn from_pieces(pieces: Vec<Vec<u8>>) -> Self {
        let pieces: Vec<Vec<u8>> = pieces.into_iter().map(|p| p.to_ascii_lowercase()).collect();
        let mut trie = vec![TrieNode::default()];
        for (id, piece) in pieces.iter().enumerate() {
            if piece.is_empty() {
                continue;
            }
            let mut node = 0usize;
            for &b in piece {
                node = match trie[node].children.binary_search_by_key(&b, |c| c.0) {
                    Ok(i) => trie[node].children[i].1 as usize,
                    Err(i) => {
                        trie.push(TrieNode::default());
                        let child = trie.len() - 1;
                        trie[node].children.insert(i, (b, child as u32));
                        child
                    }
                };
            }
            trie[node].tokens.push(id as u32);
        }
        Self { pieces, trie }
    }

    /// Vocabulary size (ids `0..len`).
    pub fn len(&self) -> usize {
        self.pieces.len()
    }

    /// Whether the vocabulary is empty.
    pub fn is_empty(&self) -> bool {
        self.pieces.is_empty()
    }

    /// The lower-cased bytes of `id` (empty for special tokens and unknown ids).
    pub fn piece(&self, id: u32) -> &[u8] {
        self.pieces.get(id as usize).map_or(&[], Vec::as_slice)
    }

    fn child(&self, node: usize, b: u8) -> Option<usize> {
        let children = &self.trie[node].children;
        children
            .binary_search_by_key(&b, |c| c.0)
            .ok()
            .map(|i| children[i].1 as usize)
    }

    /// Adds every token whose bytes are a prefix of `prefix ++ text` and reach past `prefix`.
    fn collect(&self, prefix: &[u8], text: &[u8], out: &mut Vec<u32>) {
        let mut node = 0;
        for &b in prefix {
            match self.child(node, b) {
                Some(n) => node = n,
                None => return,
            }
        }
        for &b in text {
            match self.child(node, b) {
                Some(n) => node = n,
                None => return,
            }
            out.extend_from_slice(&self.trie[node].tokens);
        }
    }
}

/// What a grounded answer may copy: the passages (as given to the model) and the tokens that
/// end an answer. Shared by every step of one sequence.
pub struct SpanSource {
    tokens: Arc<TokenBytes>,
    /// Passage texts as given.
    texts: Vec<String>,
    /// Lower-cased (ASCII) passage bytes.
    lowered: Vec<Vec<u8>>,
    /// Where a span may start, per passage.
    starts: Vec<Vec<u32>>,
    end_tokens: Vec<u32>,
    /// Added to the end tokens' logits where an answer may end (> 0: shorter answers).
    end_bias: f32,
}

impl std::fmt::Debug for SpanSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SpanSource")
            .field("passages", &self.texts.len())
            .field("end_tokens", &self.end_tokens)
            .finish()
    }
}

impl PartialEq for SpanSource {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.tokens, &other.tokens)
            && self.texts == other.texts
            && self.end_tokens == other.end_tokens
    }
}

/// The end of the text a span continuing at `at` may still copy (the next clause break).
fn clause_end(p: &[u8], at: usize) -> usize {
    (at..p.len())
        .find(|&i| is_clause_break(p, i))
        .unwrap_or(p.len())
}

/// Whether `piece` continues a span at `at` of `p` without crossing a clause break.
fn continues(p: &[u8], at: usize, piece: &[u8]) -> bool {
    p[at..clause_end(p, at)].starts_with(piece)
}

/// A span may end at `e`: the end of the passage, or between a word and what is not one.
fn is_end(p: &[u8], e: usize) -> bool {
    e == p.len() || (!is_continuation(p[e]) && (!is_word(p[e]) || !is_word(p[e - 1])))
}

impl SpanSource {
    /// Spans of `passages`, decoded with `tokens`, ended by any of `end_tokens`.
    /// Fails when no passage has text to copy or no end token is given.
    pub fn new(tokens: Arc<TokenBytes>, passages: &[&str], end_tokens: &[u32]) -> Result<Self> {
        if end_tokens.is_empty() {
            return Err(Error::invalid(
                "a grounded answer needs an end token (the model has no stop token)",
            ));
        }
        let lowered: Vec<Vec<u8>> = passages
            .iter()
            .map(|p| p.as_bytes().to_ascii_lowercase())
            .collect();
        let starts: Vec<Vec<u32>> = lowered
            .iter()
            .map(|p| {
                (0..p.len())
                    .filter(|&s| may_start(p, s))
                    .map(|s| s as u32)
                    .collect()
            })
            .collect();
        if starts.iter().all(Vec::is_empty) {
            return Err(Error::invalid(
                "a grounded answer needs passages with text to copy",
            ));
        }
        Ok(Self {
            tokens,
            texts: passages.iter().map(|p| p.to_string()).collect(),
            lowered,
            starts,
            end_tokens: end_tokens.to_vec(),
            end_bias: 0.0,
        })
    }

    /// No span may start with one of `words` (compared lower-cased, ASCII): an answer does not
    /// begin by repeating the question. Starts inside such a word stay impossible too; every
    /// other start is kept. Refused when it would leave no start at all.
    pub fn avoiding_start_words(mut self, words: &[&str]) -> Self {
        let avoid: std::collections::HashSet<Vec<u8>> = words
            .iter()
            .map(|w| w.as_bytes().to_ascii_lowercase())
            .filter(|w| !w.is_empty())
            .collect();
        if avoid.is_empty() {
            return self;
        }
        self.retain_starts(|p, s| {
            let len = p[s..].iter().take_while(|&&b| is_word(b)).count();
            len == 0 || !avoid.contains(&p[s..s + len])
        });
        self
    }

    /// Keeps the starts `keep(passage, start)` accepts, unless that would leave none at all
    /// (a filter that rules out every span is ignored rather than leaving nothing to copy).
    fn retain_starts(&mut self, keep: impl Fn(&[u8], usize) -> bool) {
        let kept: Vec<Vec<u32>> = self
            .lowered
            .iter()
            .zip(&self.starts)
            .map(|(p, starts)| {
                starts
                    .iter()
                    .copied()
                    .filter(|&s| keep(p, s as usize))
                    .collect()
            })
            .collect();
        if kept.iter().any(|k| !k.is_empty()) {
            self.starts = kept;
        }
    }

    /// Keeps only the starts whose first byte is (`digit: true`) or is not (`false`) an ASCII
    /// digit: "In what year…" is answered by a number, "Where…" and "Who…" are not. Refused
    /// (left as it was) when it would leave no start at all.
    pub fn starting_with_digit(mut self, digit: bool) -> Self {
        self.retain_starts(|p, s| p[s].is_ascii_digit() == digit);
        self
    }

    /// Adds `bias` to the end tokens' logits wherever the answer may end: a positive bias
    /// makes the model end sooner (a short answer rather than the rest of the clause).
    pub fn with_end_bias(mut self, bias: f32) -> Self {
        self.end_bias = bias;
        self
    }

    /// The passages' texts, as given.
    pub fn passages(&self) -> &[String] {
        &self.texts
    }

    /// The tokens that end an answer.
    pub fn end_tokens(&self) -> &[u32] {
        &self.end_tokens
    }
}

/// Where a grounded answer stands: `passages[passage][start..end]` (byte offsets).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SpanMatch {
    /// Index of the passage in the list given to [`SpanSource::new`].
    pub passage: usize,
    /// Byte offset of the span's start.
    pub start: usize,
    /// Byte offset one past its end.
    pub end: usize,
}

/// One sequence's progress through its passages: the occurrences of the answer so far.
#[derive(Debug, Clone)]
pub struct SpanState {
    source: Arc<SpanSource>,
    live: Vec<SpanMatch>,
    started: bool,
}

impl SpanState {
    /// Before the first token.
    pub fn new(source: Arc<SpanSource>) -> Self {
        Self {
            source,
            live: Vec::new(),
            started: false,
        }
    }

    /// Token ids allowed next, sorted and unique: continuations of a live occurrence, and the
    /// end tokens once some occurrence ends on a word boundary.
    pub fn allowed(&self) -> Vec<u32> {
        let src = &*self.source;
        let mut out = Vec::new();
        if !self.started {
            for (p, starts) in src.lowered.iter().zip(&src.starts) {
                for &s in starts {
                    let s = s as usize;
                    let rest = &p[s..clause_end(p, s)];
                    src.tokens.collect(&[], rest, &mut out);
                    src.tokens.collect(b" ", rest, &mut out);
                }
            }
        } else {
            for m in &self.live {
                let p = &src.lowered[m.passage];
                src.tokens
                    .collect(&[], &p[m.end..clause_end(p, m.end)], &mut out);
                if is_end(p, m.end) {
                    out.extend_from_slice(&src.end_tokens);
                }
            }
        }
        // An end token only ends: in a vocabulary where it also spells text (a word-level
        // test tokenizer), copying it would end the answer where no occurrence ends.
        let may_end = self.started
            && self
                .live
                .iter()
                .any(|m| is_end(&src.lowered[m.passage], m.end));
        out.retain(|t| !src.end_tokens.contains(t));
        if may_end {
            out.extend_from_slice(&src.end_tokens);
        }
        out.sort_unstable();
        out.dedup();
        out
    }

    /// Masks `logits` to the allowed tokens (see [`SpanState::allowed`]) and adds the source's
    /// end bias to the end tokens. Fails when nothing is allowed.
    pub fn constrain(&self, logits: &mut [f32]) -> Result<()> {
        let mut allowed = self.allowed();
        if allowed.is_empty() && self.started {
            // Every occurrence stopped inside a word no token continues (" t1" copied from
            // "t12" with a word-level vocabulary): the answer ends where it is.
            allowed = self.source.end_tokens.clone();
            allowed.sort_unstable();
            allowed.dedup();
        }
        if allowed.is_empty() {
            return Err(Error::invalid(
                "a grounded answer has nothing in its passages to copy",
            ));
        }
        mask_logits(logits, &allowed);
        if self.source.end_bias != 0.0 {
            for &t in &self.source.end_tokens {
                if let Some(l) = logits.get_mut(t as usize).filter(|l| l.is_finite()) {
                    *l += self.source.end_bias;
                }
            }
        }
        Ok(())
    }

    /// Whether `token` ends the answer.
    pub fn is_end_token(&self, token: u32) -> bool {
        self.source.end_tokens.contains(&token)
    }

    /// Follows `token` (which [`SpanState::allowed`] allowed); an end token changes nothing.
    pub fn advance(&mut self, token: u32) {
        if self.is_end_token(token) {
            return;
        }
        let src = &*self.source;
        let piece = src.tokens.piece(token);
        if piece.is_empty() {
            self.live.clear();
            self.started = true;
            return;
        }
        if !self.started {
            self.started = true;
            for (i, (p, starts)) in src.lowered.iter().zip(&src.starts).enumerate() {
                for &s in starts {
                    let s = s as usize;
                    let len = if continues(p, s, piece) {
                        piece.len()
                    } else if piece.len() > 1 && piece[0] == b' ' && continues(p, s, &piece[1..]) {
                        piece.len() - 1
                    } else {
                        continue;
                    };
                    self.live.push(SpanMatch {
                        passage: i,
                        start: s,
                        end: s + len,
                    });
                }
            }
        } else {
            self.live.retain_mut(|m| {
                let ok = continues(&src.lowered[m.passage], m.end, piece);
                m.end += piece.len();
                ok
            });
        }
    }

    /// The occurrences of the answer so far: those ending on a word boundary when there are
    /// any (an answer that ended normally), otherwise every live one (cut by the token limit).
    pub fn matches(&self) -> Vec<SpanMatch> {
        let src = &*self.source;
        let bounded: Vec<SpanMatch> = self
            .live
            .iter()
            .copied()
            .filter(|m| is_end(&src.lowered[m.passage], m.end))
            .collect();
        if bounded.is_empty() {
            self.live.clone()
        } else {
            bounded
        }
    }

    /// The passages this state copies from.
    pub fn source(&self) -> &Arc<SpanSource> {
        &self.source
    }
}

/// Sets every logit outside `allowed` (sorted) to minus infinity.
pub fn mask_logits(logits: &mut [f32], allowed: &[u32]) {
    let mut next = allowed.iter().peekable();
    for (i, l) in logits.iter_mut().enumerate() {
        if next.peek().is_some_and(|&&a| a as usize == i) {
            next.next();
        } else {
            *l = f32::NEG_INFINITY;
        }
    }
}

/// The answer text of a grounded span: the passage's own text, trimmed of surrounding spaces
/// and trailing `,;:.` (normalisation drops them; a reader does not want them), with the
/// trimmed span. `None` when nothing is left (an empty span is no answer).
pub fn span_text(source: &SpanSource, m: SpanMatch) -> Option<(String, SpanMatch)> {
    let text = &source.texts[m.passage];
    let mut end = m.end.min(text.len());
    while end < text.len() && !text.is_char_boundary(end) {
        end += 1;
    }
    let mut start = m.start.min(end);
    let bytes = text.as_bytes();
    while start < end && bytes[start].is_ascii_whitespace() {
        start += 1;
    }
    while end > start && (bytes[end - 1].is_ascii_whitespace() || b",;:.".contains(&bytes[end - 1]))
    {
        end -= 1;
    }
    (start < end).then(|| {
        (
            text[start..end].to_string(),
            SpanMatch {
                passage: m.passage,
                start,
                end,
            },
        )
    })
}

#[cfg(test)]
#[path = "grounded_tests.rs"]
mod tests;
