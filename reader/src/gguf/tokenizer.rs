//! Builds a [`tokenizers::Tokenizer`] from the tokenizer metadata of a GGUF file.
//!
//! A GGUF carries no `tokenizer.json`: llama.cpp stores the vocabulary, scores, token types,
//! merges and special ids as `tokenizer.ggml.*` metadata. The reference we match is Hugging Face
//! transformers (5.23), which turns that metadata into a `tokenizers` pipeline in
//! `transformers/integrations/gguf/gguf_tokenizer_mapping.py` (`get_gguf_tokenizer` +
//! `convert_gguf_tokenizer`) and then finishes it in `TokenizersBackend.__init__`
//! (named special tokens, template post-processor). Every step below mirrors one of those, so
//! that a model served from a GGUF sees exactly the ids transformers would give it; where we
//! deliberately differ, the doc comment of the step says so.
//!
//! Two kinds of vocabulary are supported, chosen by `tokenizer.ggml.model`:
//!
//! * `gpt2`: byte-level BPE with explicit merges (SmolLM2, Llama 3, Qwen2, ...). The split regex
//!   is picked from `tokenizer.ggml.pre`, see [`split_regex_for_pre`].
//! * `llama`: SentencePiece BPE (Llama 1/2, Mistral, tiny test models): scores, `<0xNN>` byte
//!   fallback tokens, `▁` for spaces. Merges are rebuilt from the scores when the file has none.
//!
//! Not covered: transformers builds `llama`-kind files of the `gemma*` and `phi3` architectures
//! (`general.architecture`) differently (Gemma renames whitespace tokens and orders merges by
//! position; Phi-3 prepends `▁` with a normalizer). This module has no architecture input and
//! always builds the Llama pipeline, so do not use it for those.

use std::collections::{HashMap, HashSet};

use serde_json::json;
use tokenizers::decoders::byte_fallback::ByteFallback;
use tokenizers::decoders::byte_level::ByteLevel as ByteLevelDecoder;
use tokenizers::decoders::fuse::Fuse;
use tokenizers::decoders::sequence::Sequence as DecoderSequence;
use tokenizers::decoders::strip::Strip;
use tokenizers::decoders::DecoderWrapper;
use tokenizers::models::bpe::{Merges, Vocab, BPE};
use tokenizers::normalizers::replace::Replace;
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::metaspace::{Metaspace, PrependScheme};
use tokenizers::pre_tokenizers::sequence::Sequence as PreTokenizerSequence;
use tokenizers::pre_tokenizers::split::{Split, SplitPattern};
use tokenizers::pre_tokenizers::PreTokenizerWrapper;
use tokenizers::processors::template::TemplateProcessing;
use tokenizers::{AddedToken, SplitDelimiterBehavior, Tokenizer};

/// GGUF metadata keys, used to name the key at fault in errors.
pub mod keys {
    pub const MODEL: &str = "tokenizer.ggml.model";
    pub const PRE: &str = "tokenizer.ggml.pre";
    pub const TOKENS: &str = "tokenizer.ggml.tokens";
    pub const SCORES: &str = "tokenizer.ggml.scores";
    pub const TOKEN_TYPE: &str = "tokenizer.ggml.token_type";
    pub const MERGES: &str = "tokenizer.ggml.merges";
    pub const BOS: &str = "tokenizer.ggml.bos_token_id";
    pub const EOS: &str = "tokenizer.ggml.eos_token_id";
    pub const UNK: &str = "tokenizer.ggml.unknown_token_id";
    pub const PAD: &str = "tokenizer.ggml.padding_token_id";
}

/// llama.cpp token types (`tokenizer.ggml.token_type`). Only the two that change how text is
/// split matter here; normal (1), unknown (2), unused (5) and byte (6) tokens, and any value
/// llama.cpp may add later, are plain vocabulary entries.
const TOKEN_TYPE_CONTROL: i32 = 3;
const TOKEN_TYPE_USER_DEFINED: i32 = 4;

/// SentencePiece's stand-in for a space.
const METASPACE: char = '\u{2581}';

/// Tokenizer metadata of a GGUF file (keys `tokenizer.ggml.*`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GgufVocab {
    /// `tokenizer.ggml.model`: `"gpt2"` or `"llama"`; anything else is an error.
    pub model: String,
    /// `tokenizer.ggml.pre`: llama.cpp's name of the pre-tokenizer (`"smollm"`, `"llama-bpe"`,
    /// `"qwen2"`, `"default"`, ...). Only read for `gpt2`. A name not listed in
    /// [`split_regex_for_pre`] (or none) gets GPT-2's default byte-level split, as in
    /// transformers; it is not an error.
    pub pre: Option<String>,
    /// `tokenizer.ggml.tokens`: the vocabulary, the index being the id.
    pub tokens: Vec<String>,
    /// `tokenizer.ggml.scores`: one per token; needed by `llama` files without merges.
    pub scores: Option<Vec<f32>>,
    /// `tokenizer.ggml.token_type`: one per token (1 normal, 2 unknown, 3 control,
    /// 4 user-defined, 5 unused, 6 byte).
    pub token_types: Option<Vec<i32>>,
    /// `tokenizer.ggml.merges`: `"left right"`, best first. Required for `gpt2`.
    pub merges: Option<Vec<String>>,
    /// `tokenizer.ggml.bos_token_id`.
    pub bos: Option<u32>,
    /// `tokenizer.ggml.eos_token_id`.
    pub eos: Option<u32>,
    /// `tokenizer.ggml.unknown_token_id`.
    pub unk: Option<u32>,
    /// `tokenizer.ggml.padding_token_id`.
    pub pad: Option<u32>,
    /// `tokenizer.ggml.add_bos_token`. When absent: `true` for `llama` (what llama.cpp and
    /// transformers assume for older SentencePiece files), `false` for `gpt2`.
    pub add_bos: Option<bool>,
    /// `tokenizer.ggml.add_eos_token`. When absent: `false`.
    pub add_eos: Option<bool>,
}

/// Why a tokenizer could not be built. Every variant names the metadata key at fault.
#[derive(Debug, thiserror::Error)]
pub enum GgufTokenizerError {
    /// A key this kind of tokenizer cannot do without is absent.
    #[error("GGUF metadata key `{0}` is missing")]
    MissingKey(&'static str),
    /// A value this module does not know how to build.
    #[error("GGUF metadata key `{key}` has unsupported value {value:?}")]
    Unsupported { key: &'static str, value: String },
    /// A per-token array whose length differs from `tokenizer.ggml.tokens`.
    #[error(
        "GGUF metadata key `{key}` has {found} entries, but `tokenizer.ggml.tokens` has {expected}"
    )]
    LengthMismatch {
        key: &'static str,
        expected: usize,
        found: usize,
    },
    /// A token id that is not in the vocabulary.
    #[error("GGUF metadata key `{key}` is {id}, outside the vocabulary of {vocab_size} tokens")]
    IdOutOfRange {
        key: &'static str,
        id: u32,
        vocab_size: usize,
    },
    /// A value that is present but malformed.
    #[error("GGUF metadata key `{key}` is invalid: {reason}")]
    Invalid { key: &'static str, reason: String },
    /// The `tokenizers` crate refused the pieces (should not happen after validation).
    #[error("building the tokenizer failed: {0}")]
    Build(String),
}

type Result<T> = std::result::Result<T, GgufTokenizerError>;

fn build_err(e: impl std::fmt::Display) -> GgufTokenizerError {
    GgufTokenizerError::Build(e.to_string())
}

/// Builds the tokenizer transformers would build from the same GGUF metadata.
///
/// `encode(text, true)` adds BOS/EOS as `add_bos`/`add_eos` say; `encode(text, false)` adds
/// nothing. Control tokens are special added tokens and user-defined tokens plain added tokens,
/// so `<|im_start|>` in the text is one token. BOS, EOS, UNK and PAD are special added tokens,
/// so their ids can be looked up with `token_to_id` / `get_added_vocabulary`.
pub fn build_tokenizer(v: &GgufVocab) -> Result<Tokenizer> {
    validate(v)?;
    let mut tokenizer = match v.model.as_str() {
        "gpt2" => byte_level_tokenizer(v)?,
        "llama" => sentencepiece_tokenizer(v)?,
        other => {
            return Err(GgufTokenizerError::Unsupported {
                key: keys::MODEL,
                value: other.to_owned(),
            })
        }
    };
    add_special_and_user_tokens(&mut tokenizer, v)?;
    tokenizer.with_post_processor(Some(post_processor(v)?));
    Ok(tokenizer)
}

/// Rejects metadata that would otherwise panic or silently misalign ids.
fn validate(v: &GgufVocab) -> Result<()> {
    let n = v.tokens.len();
    if n == 0 {
        return Err(GgufTokenizerError::Invalid {
            key: keys::TOKENS,
            reason: "the vocabulary is empty".into(),
        });
    }
    if u32::try_from(n).is_err() {
        return Err(GgufTokenizerError::Invalid {
            key: keys::TOKENS,
            reason: format!("{n} tokens do not fit 32-bit ids"),
        });
    }
    if let Some(scores) = &v.scores {
        check_len(keys::SCORES, n, scores.len())?;
        if let Some(i) = scores.iter().position(|s| s.is_nan()) {
            return Err(GgufTokenizerError::Invalid {
                key: keys::SCORES,
                reason: format!("score of token {i} is NaN"),
            });
        }
    }
    if let Some(types) = &v.token_types {
        check_len(keys::TOKEN_TYPE, n, types.len())?;
    }
    for (key, id) in [
        (keys::BOS, v.bos),
        (keys::EOS, v.eos),
        (keys::UNK, v.unk),
        (keys::PAD, v.pad),
    ] {
        if let Some(id) = id {
            if id as usize >= n {
                return Err(GgufTokenizerError::IdOutOfRange {
                    key,
                    id,
                    vocab_size: n,
                });
            }
        }
    }
    Ok(())
}

fn check_len(key: &'static str, expected: usize, found: usize) -> Result<()> {
    if expected == found {
        Ok(())
    } else {
        Err(GgufTokenizerError::LengthMismatch {
            key,
            expected,
            found,
        })
    }
}

// ---------------------------------------------------------------------------------------------
// gpt2: byte-level BPE
// ---------------------------------------------------------------------------------------------

/// GPT-2's map from bytes to printable characters (`bytes_to_unicode`): printable Latin-1 stays
/// itself, the other 68 bytes are moved to U+0100.. in order.
fn bytes_to_unicode() -> [char; 256] {
    let mut table = ['\0'; 256];
    let mut shifted = 0u32;
    for (b, slot) in table.iter_mut().enumerate() {
        let printable = (0x21..=0x7e).contains(&b) || (0xa1..=0xac).contains(&b) || b >= 0xae;
        let code = if printable {
            b as u32
        } else {
            shifted += 1;
            255 + shifted
        };
        // Every code is below U+0200, so it is always a valid char.
        *slot = char::from_u32(code).unwrap_or('\0');
    }
    table
}

/// llama.cpp writes most tokens in GPT-2's byte alphabet, but some converters store a token as
/// its UTF-8 text instead. Like transformers, a token with any character outside the alphabet is
/// re-spelled byte by byte so the BPE model can find it.
fn respell_byte_level(token: &str, table: &[char; 256], alphabet: &HashSet<char>) -> String {
    if token.chars().all(|c| alphabet.contains(&c)) {
        token.to_owned()
    } else {
        token.bytes().map(|b| table[b as usize]).collect()
    }
}

/// `tokenizer.ggml.pre` names for which transformers replaces GPT-2's split regex
/// (`GGUF_PRE_TOKENIZER_SPLITS`). The regexes are copied verbatim from transformers.
///
/// Any other name — including `"smollm"`, `"gpt-2"`, `"default"` and names we do not know —
/// gets GPT-2's own byte-level regex, because that is what transformers does. Note that for
/// `"smollm"` llama.cpp and SmolLM2's `tokenizer.json` first split every digit on its own; the
/// GGUF path of transformers does not. SmolLM2's merges contain no ASCII digit, so the two agree
/// on ids except where two or more spaces precede a digit (`"a  1"`) and on some non-ASCII
/// numerals (`²`, `①`, `٣`, `０`).
pub fn split_regex_for_pre(pre: &str) -> Option<&'static str> {
    const LLAMA3: &str = concat!(
        r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}",
        r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
    );
    const TEKKEN: &str = concat!(
        r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+",
        r"|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*",
        r"|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"
    );
    const GPT4O: &str = concat!(
        r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
        r"|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
        r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"
    );
    const QWEN2: &str = concat!(
        r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}",
        r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
    );
    const QWEN35: &str = concat!(
        r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}",
        r"| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
    );
    Some(match pre {
        "llama3" | "llama-v3" | "llama-bpe" | "falcon3" | "falcon-h1" | "pixtral" | "midm-2.0"
        | "lfm2" | "jina-v5-nano" | "dbrx" | "smaug-bpe" => LLAMA3,
        "tekken" => TEKKEN,
        "qwen2" | "deepseek-r1-qwen" | "kormo" | "f2llmv2" | "megrez" => QWEN2,
        "qwen35" => QWEN35,
        "gpt-4o" | "llama4" | "kanana2" | "talkie" | "minimax-m2" => GPT4O,
        _ => return None,
    })
}

/// transformers' `byte_level_tokenizer` + `set_split_regex`: `GPT2Tokenizer` (BPE with empty
/// prefix/suffix, no unk, byte-level pre-tokenizer and decoder), with the split regex swapped for
/// the one `tokenizer.ggml.pre` names.
fn byte_level_tokenizer(v: &GgufVocab) -> Result<Tokenizer> {
    let table = bytes_to_unicode();
    let alphabet: HashSet<char> = table.iter().copied().collect();
    // Later duplicates win, as in transformers' `{token: index}` dict.
    let vocab: Vocab = v
        .tokens
        .iter()
        .enumerate()
        .map(|(i, t)| (respell_byte_level(t, &table, &alphabet), i as u32))
        .collect();
    let raw_merges = v
        .merges
        .as_ref()
        .ok_or(GgufTokenizerError::MissingKey(keys::MERGES))?;
    let merges = parse_merges(raw_merges, &vocab)?;
    let model = BPE::builder()
        .vocab_and_merges(vocab, merges)
        .continuing_subword_prefix(String::new())
        .end_of_word_suffix(String::new())
        .fuse_unk(false)
        .build()
        .map_err(build_err)?;

    let mut tokenizer = Tokenizer::new(model);
    let pre_tokenizer: PreTokenizerWrapper = match v.pre.as_deref().and_then(split_regex_for_pre) {
        Some(regex) => {
            let split = Split::new(
                SplitPattern::Regex(regex.to_owned()),
                SplitDelimiterBehavior::Isolated,
                false,
            )
            .map_err(build_err)?;
            PreTokenizerSequence::new(vec![
                split.into(),
                ByteLevel::new(false, true, false).into(),
            ])
            .into()
        }
        None => ByteLevel::new(false, true, true).into(),
    };
    tokenizer.with_pre_tokenizer(Some(pre_tokenizer));
    tokenizer.with_decoder(Some(ByteLevelDecoder::default()));
    Ok(tokenizer)
}

/// Parses `"left right"` merges and checks every piece, and their concatenation, is in the
/// vocabulary, so a bad file is reported against its key rather than deep inside `tokenizers`.
fn parse_merges(raw: &[String], vocab: &Vocab) -> Result<Merges> {
    raw.iter()
        .enumerate()
        .map(|(i, merge)| {
            let invalid = |why: &str| GgufTokenizerError::Invalid {
                key: keys::MERGES,
                reason: format!("entry {i} {merge:?} {why}"),
            };
            let (left, right) = merge
                .split_once(' ')
                .filter(|(l, r)| !l.is_empty() && !r.is_empty() && !r.contains(' '))
                .ok_or_else(|| invalid("is not two tokens separated by one space"))?;
            for piece in [left.to_owned(), right.to_owned(), format!("{left}{right}")] {
                if !vocab.contains_key(&piece) {
                    return Err(invalid(&format!("needs {piece:?}, which is not a token")));
                }
            }
            Ok((left.to_owned(), right.to_owned()))
        })
        .collect()
}

// ---------------------------------------------------------------------------------------------
// llama: SentencePiece BPE
// ---------------------------------------------------------------------------------------------

/// transformers' `sentencepiece_tokenizer`, i.e. `LlamaTokenizer(vocab, merges)`:
///
/// * BPE with `byte_fallback` and `fuse_unk`, and no unk token on the model: a character
///   missing from the vocabulary becomes its `<0xNN>` byte tokens (a byte token missing too
///   drops it, as in transformers).
/// * No normalizer; `Metaspace` pre-tokenizer (spaces become `▁`, no split) with
///   `prepend_scheme = first`: a `▁` is prepended only to the start of the text, not after an
///   added token, and not when the text already starts with a space. This is transformers'
///   non-legacy Llama behaviour. `tokenizer.ggml.add_space_prefix` is ignored, as transformers
///   ignores it.
/// * Decoder: `▁` → space, byte fallback, fuse, then strip the one leading space the prefix added
///   (so a text that started with a space loses it on decode, exactly as in transformers).
fn sentencepiece_tokenizer(v: &GgufVocab) -> Result<Tokenizer> {
    let vocab: Vocab = v
        .tokens
        .iter()
        .enumerate()
        .map(|(i, t)| (t.clone(), i as u32))
        .collect();
    let merges = match &v.merges {
        Some(raw) => parse_merges(raw, &vocab)?,
        None => {
            let scores = v
                .scores
                .as_ref()
                .ok_or(GgufTokenizerError::MissingKey(keys::SCORES))?;
            merges_from_scores(&v.tokens, scores)
        }
    };
    let model = BPE::builder()
        .vocab_and_merges(vocab, merges)
        .fuse_unk(true)
        .byte_fallback(true)
        .build()
        .map_err(build_err)?;

    let mut tokenizer = Tokenizer::new(model);
    tokenizer.with_pre_tokenizer(Some(Metaspace::new(METASPACE, PrependScheme::First, false)));
    let decoders: Vec<DecoderWrapper> = vec![
        Replace::new(METASPACE.to_string(), " ")
            .map_err(build_err)?
            .into(),
        ByteFallback::new().into(),
        Fuse::new().into(),
        Strip::new(' ', 1, 0).into(),
    ];
    tokenizer.with_decoder(Some(DecoderSequence::new(decoders)));
    Ok(tokenizer)
}

/// SentencePiece BPE files carry scores instead of merges. This is transformers'
/// `generate_merges(vocab, vocab_scores)`, step for step, so merge ranks (and thus ids) agree:
///
/// 1. For every distinct token, in order of first appearance, every split into two pieces that
///    are both tokens is a merge carrying that token's score (the last one, for duplicates);
///    a token's own merges are ordered by the ids of their pieces.
/// 2. All merges are then sorted, stably, by score, then left length, then right length (in
///    characters), highest first.
fn merges_from_scores(tokens: &[String], scores: &[f32]) -> Merges {
    let mut vocab: HashMap<&str, u32> = HashMap::with_capacity(tokens.len());
    let mut score_of: HashMap<&str, f32> = HashMap::with_capacity(tokens.len());
    let mut order: Vec<&str> = Vec::with_capacity(tokens.len());
    for (i, (token, &score)) in tokens.iter().zip(scores).enumerate() {
        vocab.insert(token, i as u32);
        if score_of.insert(token, score).is_none() {
            order.push(token);
        }
    }

    struct Candidate<'a> {
        left: &'a str,
        right: &'a str,
        score: f32,
        left_chars: usize,
        right_chars: usize,
    }
    let mut merges: Vec<Candidate> = Vec::new();
    for token in order {
        let score = score_of[token];
        let total_chars = token.chars().count();
        let mut local: Vec<(u32, u32, Candidate)> = token
            .char_indices()
            .skip(1)
            .enumerate()
            .filter_map(|(k, (at, _))| {
                let (left, right) = token.split_at(at);
                let (&l, &r) = (vocab.get(left)?, vocab.get(right)?);
                let left_chars = k + 1;
                Some((
                    l,
                    r,
                    Candidate {
                        left,
                        right,
                        score,
                        left_chars,
                        right_chars: total_chars - left_chars,
                    },
                ))
            })
            .collect();
        local.sort_by_key(|(l, r, _)| (*l, *r));
        merges.extend(local.into_iter().map(|(_, _, c)| c));
    }
    // Stable sort, descending: equal keys keep their order, like Python's `sorted(reverse=True)`.
    merges.sort_by(|a, b| {
        b.score
            .total_cmp(&a.score)
            .then(b.left_chars.cmp(&a.left_chars))
            .then(b.right_chars.cmp(&a.right_chars))
    });
    merges
        .into_iter()
        .map(|c| (c.left.to_owned(), c.right.to_owned()))
        .collect()
}

// ---------------------------------------------------------------------------------------------
// Added tokens and post-processing (shared)
// ---------------------------------------------------------------------------------------------

/// Adds tokens in the order transformers does, because with `tokenizers` a later add of the same
/// text with other flags replaces the earlier one:
///
/// 1. The defaults the builder class brings along (`<|endoftext|>` for GPT-2; `<unk>`, `<s>`,
///    `</s>` for Llama), as special tokens.
/// 2. `add_gguf_special_tokens`: control tokens (type 3) as special; for `gpt2` only those written
///    in the byte alphabet (others are llama.cpp mislabels). Then user-defined tokens (type 4) as
///    plain (non-special) added tokens, if the vocabulary has them under that spelling.
/// 3. BOS, EOS, UNK and PAD named by the file, as special tokens.
///
/// All are `normalized = false` and match anywhere in the text.
///
/// Deviation: transformers adds a token of steps 1 and 3 even when the vocabulary lacks that
/// text, giving it a new id past the end of the vocabulary (e.g. `<|endoftext|>` for a Llama 3
/// GGUF), which the model has no embedding for. We add only tokens whose text the vocabulary
/// maps to an id, so the vocabulary size always equals the model's.
fn add_special_and_user_tokens(tokenizer: &mut Tokenizer, v: &GgufVocab) -> Result<()> {
    let byte_level = v.model == "gpt2";
    let special = |content: &str| AddedToken::from(content.to_owned(), true).normalized(false);

    // 1. builder defaults
    let defaults: &[&str] = if byte_level {
        &["<|endoftext|>"]
    } else {
        &["<s>", "</s>", "<unk>"]
    };
    let first: Vec<AddedToken> = defaults
        .iter()
        .filter(|t| tokenizer.token_to_id(t).is_some())
        .map(|t| special(t))
        .collect();
    tokenizer.add_tokens(first).map_err(build_err)?;

    // 2. control and user-defined tokens
    if let Some(types) = &v.token_types {
        let alphabet: Option<HashSet<char>> =
            byte_level.then(|| bytes_to_unicode().iter().copied().collect());
        let control: Vec<AddedToken> = v
            .tokens
            .iter()
            .zip(types)
            .filter(|(t, &ty)| {
                ty == TOKEN_TYPE_CONTROL
                    && alphabet
                        .as_ref()
                        .is_none_or(|a| t.chars().all(|c| a.contains(&c)))
            })
            .map(|(t, _)| special(t))
            .collect();
        tokenizer.add_tokens(control).map_err(build_err)?;

        let user: Vec<AddedToken> = v
            .tokens
            .iter()
            .zip(types)
            .filter(|(t, &ty)| ty == TOKEN_TYPE_USER_DEFINED && tokenizer.token_to_id(t).is_some())
            .map(|(t, _)| AddedToken::from(t.clone(), false).normalized(false))
            .collect();
        tokenizer.add_tokens(user).map_err(build_err)?;
    }

    // 3. named special tokens
    let named: Vec<AddedToken> = [v.bos, v.eos, v.unk, v.pad]
        .into_iter()
        .flatten()
        .map(|id| v.tokens[id as usize].as_str())
        .filter(|t| tokenizer.token_to_id(t).is_some())
        .map(special)
        .collect();
    tokenizer.add_tokens(named).map_err(build_err)?;
    Ok(())
}

/// transformers' `update_post_processor`: a template that puts BOS before and EOS after each
/// sequence when the file asks for them. Built from JSON rather than template strings so that a
/// token text containing `:` or a space cannot be misparsed. The ids are the file's own
/// (transformers looks the text up instead, which differs only if that text occurs twice in the
/// vocabulary).
fn post_processor(v: &GgufVocab) -> Result<TemplateProcessing> {
    let default_bos = v.model == "llama";
    let bos = v
        .bos
        .filter(|_| v.add_bos.unwrap_or(default_bos))
        .map(|id| (v.tokens[id as usize].clone(), id));
    let eos = v
        .eos
        .filter(|_| v.add_eos.unwrap_or(false))
        .map(|id| (v.tokens[id as usize].clone(), id));

    let template = |seq: &str, type_id: u32| {
        let mut pieces = Vec::new();
        if let Some((t, _)) = &bos {
            pieces.push(json!({"SpecialToken": {"id": t, "type_id": type_id}}));
        }
        pieces.push(json!({"Sequence": {"id": seq, "type_id": type_id}}));
        if let Some((t, _)) = &eos {
            pieces.push(json!({"SpecialToken": {"id": t, "type_id": type_id}}));
        }
        pieces
    };
    let single = template("A", 0);
    let mut pair = single.clone();
    pair.extend(template("B", 1));
    let special_tokens: serde_json::Map<String, serde_json::Value> = [&bos, &eos]
        .into_iter()
        .flatten()
        .map(|(t, id)| (t.clone(), json!({"id": t, "ids": [id], "tokens": [t]})))
        .collect();
    serde_json::from_value(json!({
        "type": "TemplateProcessing",
        "single": single,
        "pair": pair,
        "special_tokens": special_tokens,
    }))
    .map_err(build_err)
}

#[cfg(test)]
#[path = "tokenizer_tests.rs"]
mod tests;
