//! Prompt assembly for the generative readers.
//!
//! - Llama reader: documents as in "Lost in the Middle" (Liu et al. 2023,
//!   <https://arxiv.org/abs/2307.03172>): `Document [i] (Title: t) text`, with optional
//!   lost-in-the-middle reordering (strongest passages at both ends) and query-aware
//!   contextualization (the question before and after the documents).
//! - CEPE reader: the format of princeton-nlp/CEPE `eval_downstream.py`: the first
//!   `decoder_passages` passages in the decoder prompt as `Document (Title: {title}): {text}`
//!   joined by blank lines, then `\n\nQuestion: {q}\nAnswer:`; every further passage is its own
//!   encoder chunk of at most 256 tokens.

use tokenizers::Tokenizer;

use crate::error::{Error, Result};

/// A retrieved passage, best first.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Passage {
    /// Title of the source document (may be empty).
    pub title: String,
    /// Passage text.
    pub text: String,
}

impl Passage {
    /// A passage.
    pub fn new(title: impl Into<String>, text: impl Into<String>) -> Self {
        Self {
            title: title.into(),
            text: text.into(),
        }
    }
}

/// Options of the Llama reader's prompt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PromptOptions {
    /// Instruction opening the prompt.
    pub instruction: String,
    /// Put the strongest passages at the start and the end, the weakest in the middle.
    pub lost_in_the_middle: bool,
    /// Repeat the question before the documents as well as after them.
    pub query_aware: bool,
}

impl Default for PromptOptions {
    fn default() -> Self {
        Self {
            instruction: "Write a high-quality answer for the given question using only the \
                          provided search results (some of which might be irrelevant)."
                .to_string(),
            lost_in_the_middle: false,
            query_aware: false,
        }
    }
}

/// Reorders passages (best first) so that ranks 1, 3, 5, ... open the list and ..., 6, 4, 2
/// close it: the strongest passages sit at both ends.
pub fn lost_in_the_middle_order<T: Clone>(ranked: &[T]) -> Vec<T> {
    let front = ranked.iter().step_by(2);
    let back = ranked.iter().skip(1).step_by(2).rev();
    front.chain(back).cloned().collect()
}

/// The Llama reader's prompt.
pub fn llama_prompt(question: &str, passages: &[Passage], opts: &PromptOptions) -> String {
    let ordered = if opts.lost_in_the_middle {
        lost_in_the_middle_order(passages)
    } else {
        passages.to_vec()
    };
    let mut out = String::new();
    if !opts.instruction.is_empty() {
        out.push_str(&opts.instruction);
        out.push_str("\n\n");
    }
    if opts.query_aware {
        out.push_str(&format!("Question: {question}\n\n"));
    }
    for (i, p) in ordered.iter().enumerate() {
        out.push_str(&format!(
            "Document [{}] (Title: {}) {}\n",
            i + 1,
            p.title,
            p.text
        ));
    }
    out.push_str(&format!("\nQuestion: {question}\nAnswer:"));
    out
}

/// CEPE prompt texts: the decoder prompt and one encoder chunk text per further passage.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CepePrompt {
    /// Decoder prompt (tokenize with BOS).
    pub decoder: String,
    /// Encoder chunk texts (tokenize without BOS).
    pub encoder_chunks: Vec<String>,
}

/// Default number of passages in the CEPE decoder prompt.
pub const CEPE_DECODER_PASSAGES: usize = 10;
/// Longest CEPE encoder chunk in tokens.
pub const CEPE_CHUNK_TOKENS: usize = 256;
/// The reference truncates the decoder prompt above 4096 - 25 tokens.
pub const CEPE_DECODER_MAX_TOKENS: usize = 4096 - 25;

fn cepe_doc(p: &Passage) -> String {
    format!("Document (Title: {}): {}", p.title, p.text)
}

/// Splits passages (best first) into the CEPE decoder prompt and encoder chunks.
pub fn cepe_prompt(question: &str, passages: &[Passage], decoder_passages: usize) -> CepePrompt {
    let n = decoder_passages.min(passages.len());
    let docs: Vec<String> = passages[..n].iter().map(cepe_doc).collect();
    let mut decoder = docs.join("\n\n");
    decoder.push_str(&format!("\n\nQuestion: {question}\nAnswer:"));
    CepePrompt {
        decoder,
        encoder_chunks: passages[n..].iter().map(cepe_doc).collect(),
    }
}

/// Tokenized CEPE inputs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CepeInputs {
    /// Decoder ids, starting with BOS.
    pub decoder_ids: Vec<u32>,
    /// Encoder chunks, no BOS, at most [`CEPE_CHUNK_TOKENS`] each (left-truncated as the
    /// reference's tokenizer).
    pub encoder_ids: Vec<Vec<u32>>,
}

/// Token ids of `text`, no special tokens added.
pub(crate) fn encode(tok: &Tokenizer, text: &str) -> Result<Vec<u32>> {
    Ok(tok
        .encode(text, false)
        .map_err(|e| Error::Tokenizer {
            reason: e.to_string(),
        })?
        .get_ids()
        .to_vec())
}

/// Text of `ids`, special tokens skipped.
pub(crate) fn decode(tok: &Tokenizer, ids: &[u32]) -> Result<String> {
    tok.decode(ids, true).map_err(|e| Error::Tokenizer {
        reason: e.to_string(),
    })
}

impl CepePrompt {
    /// Adds in-context demonstrations as the reference's QA code does: all of them form ONE
    /// extra encoder chunk, placed first: `Question: {q1}\nAnswer: {a1}\n\nQuestion: ...`.
    pub fn with_demonstrations(mut self, demos: &[(String, String)]) -> Self {
        if !demos.is_empty() {
            let chunk = demos
                .iter()
                .map(|(q, a)| format!("Question: {q}\nAnswer: {a}"))
                .collect::<Vec<_>>()
                .join("\n\n");
            self.encoder_chunks.insert(0, chunk);
        }
        self
    }

    /// Tokenizes: BOS + decoder prompt (left-truncated to [`CEPE_DECODER_MAX_TOKENS`]), and
    /// each chunk without BOS, left-truncated to [`CEPE_CHUNK_TOKENS`].
    pub fn tokenize(&self, tok: &Tokenizer, bos: Option<u32>) -> Result<CepeInputs> {
        let mut dec = encode(tok, &self.decoder)?;
        let budget = CEPE_DECODER_MAX_TOKENS - usize::from(bos.is_some());
        if dec.len() > budget {
            dec.drain(..dec.len() - budget);
        }
        let decoder_ids = bos.into_iter().chain(dec).collect();
        let encoder_ids = self
            .encoder_chunks
            .iter()
            .map(|c| {
                let mut ids = encode(tok, c)?;
                if ids.len() > CEPE_CHUNK_TOKENS {
                    ids.drain(..ids.len() - CEPE_CHUNK_TOKENS);
                }
                Ok(ids)
            })
            .collect::<Result<_>>()?;
        Ok(CepeInputs {
            decoder_ids,
            encoder_ids,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lost_in_the_middle_puts_best_at_ends() {
        assert_eq!(
            lost_in_the_middle_order(&[1, 2, 3, 4, 5]),
            vec![1, 3, 5, 4, 2]
        );
        assert_eq!(lost_in_the_middle_order(&[1, 2]), vec![1, 2]);
        assert!(lost_in_the_middle_order::<u8>(&[]).is_empty());
    }

    #[test]
    fn llama_prompt_format() {
        let p = [Passage::new("A", "alpha."), Passage::new("B", "beta.")];
        let opts = PromptOptions {
            instruction: String::new(),
            query_aware: true,
            ..PromptOptions::default()
        };
        assert_eq!(
            llama_prompt("q?", &p, &opts),
            "Question: q?\n\nDocument [1] (Title: A) alpha.\nDocument [2] (Title: B) beta.\n\
             \nQuestion: q?\nAnswer:"
        );
    }

    #[test]
    fn cepe_prompt_splits_passages() {
        let p: Vec<Passage> = (0..3).map(|i| Passage::new(format!("t{i}"), "x")).collect();
        let c = cepe_prompt("q", &p, 2);
        assert_eq!(
            c.decoder,
            "Document (Title: t0): x\n\nDocument (Title: t1): x\n\nQuestion: q\nAnswer:"
        );
        assert_eq!(
            c.encoder_chunks,
            vec!["Document (Title: t2): x".to_string()]
        );
    }
}
