//! How likely a model finds each of several candidate answers after one prompt: the reader's
//! own vote in choosing a span, read by teacher forcing instead of greedy decoding.
//!
//! A small model's greedy first token is often a word it has just read or a field's name, and
//! once chosen the answer follows it. Scoring every candidate in full (each of its tokens and
//! the end of the answer after it) asks the model which of the spans it would give, not which
//! first token it likes best.
//!
//! The prompt is read once; each candidate then starts from a copy of its keys and values
//! ([`Cache::copy_block`] / [`Cache::load_prefix`]) and the candidates are read together in
//! packed passes ([`Llama::forward_packed_all`]).

use candle_core::Tensor;

use crate::error::{Error, Result};
use crate::language_model::LanguageModel;
use crate::llama::{Cache, PackedInput};

/// Candidates read in one packed pass (bounds the logits held at once).
const CANDIDATES_PER_PASS: usize = 32;

/// The most tokens of a candidate that are scored (a longer one is cut: what follows its first
/// words changes little of the vote, and a record's long value would cost a pass of its own).
pub const MAX_ANSWER_TOKENS: usize = 24;

/// A candidate answer's likelihood after the prompt.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AnswerLikelihood {
    /// Sum of the log-probabilities of the answer's tokens.
    pub logprob: f32,
    /// Tokens scored.
    pub tokens: usize,
    /// Log-probability of the answer's first token.
    pub first: f32,
    /// Log-probability that the answer ends after its last token (any stop token of an
    /// instruct model, a line break for a base model).
    pub end: f32,
}

impl AnswerLikelihood {
    /// Mean log-probability per token, the end included.
    pub fn mean(&self) -> f32 {
        (self.logprob + self.end) / (self.tokens + 1) as f32
    }
}

/// KV cache tokens that scoring `answers` candidates after a prompt of `prompt_tokens` holds at
/// most: the prompt once, and a copy of it with a candidate's tokens for each candidate of a
/// pass.
pub fn scoring_kv_tokens(prompt_tokens: usize, answers: usize) -> usize {
    prompt_tokens + answers.min(CANDIDATES_PER_PASS) * (prompt_tokens + MAX_ANSWER_TOKENS + 2)
}

impl LanguageModel {
    /// The likelihood of each of `answers` as the model's reply to `prompt` (a prompt made for
    /// a reply: a chat template's generation prompt, or text ending in "Answer:"). Empty
    /// answers score `-inf`.
    pub fn answer_likelihoods(
        &self,
        prompt: &[u32],
        answers: &[&str],
    ) -> Result<Vec<AnswerLikelihood>> {
        let Some((&last, prefix)) = prompt.split_last() else {
            return Err(Error::invalid("scoring answers needs a prompt"));
        };
        let model = self.model();
        let chat = self.uses_chat_template();
        // A base model's answer ends at the end of its line; an instruct model's (or one whose
        // vocabulary has no line break) at a stop token.
        let newline = if chat {
            None
        } else {
            self.encode("\n")?.last().copied()
        };
        let ends: Vec<u32> = match newline {
            Some(t) => vec![t],
            None => self.stop_ids().to_vec(),
        };
        let Some(&end_token) = ends.first() else {
            return Err(Error::invalid("the model has no end-of-answer token"));
        };
        let tokenized: Vec<Vec<u32>> = answers
            .iter()
            .map(|a| {
                let text = if chat { a.to_string() } else { format!(" {a}") };
                let mut ids = if a.is_empty() {
                    Vec::new()
                } else {
                    self.encode(&text)?
                };
                ids.truncate(MAX_ANSWER_TOKENS);
                Ok(ids)
            })
            .collect::<Result<_>>()?;
        let longest = tokenized.iter().map(Vec::len).max().unwrap_or(0);
        self.check_length(prompt.len(), longest + 1)?;
        // The prompt but its last token, once; each candidate reads that token, itself and the
        // end token after a copy of it, so every logit it needs is its own.
        let mut base = Cache::new(model);
        if !prefix.is_empty() {
            let ids = Tensor::new(prefix, model.device())?.unsqueeze(0)?;
            model.forward_last(&ids, None, &mut base)?;
        }
        let block = match prefix.len() {
            0 => None,
            n => base.copy_block(model, 0, n)?,
        };
        let mut out = Vec::with_capacity(answers.len());
        let order: Vec<usize> = (0..answers.len())
            .filter(|&i| !tokenized[i].is_empty())
            .collect();
        let mut scored: Vec<Option<AnswerLikelihood>> = vec![None; answers.len()];
        for group in order.chunks(CANDIDATES_PER_PASS) {
            let inputs: Vec<Vec<u32>> = group
                .iter()
                .map(|&i| {
                    let mut t = Vec::with_capacity(tokenized[i].len() + 2);
                    t.push(last);
                    t.extend_from_slice(&tokenized[i]);
                    t.push(end_token);
                    t
                })
                .collect();
            let mut caches: Vec<Cache> = Vec::with_capacity(group.len());
            for input in &inputs {
                let mut cache = match &block {
                    Some(block) => {
                        let mut c = Cache::new(model);
                        c.reserve(prefix.len() + input.len());
                        c.load_prefix(model, &[block])?;
                        c
                    }
                    // No reusable prefix (windowed attention): each candidate reads the prompt.
                    None => base.clone(),
                };
                cache.reserve(prefix.len() + input.len());
                caches.push(cache);
            }
            let mut seqs: Vec<PackedInput<'_>> = inputs
                .iter()
                .zip(caches.iter_mut())
                .map(|(tokens, cache)| PackedInput { tokens, cache })
                .collect();
            let logits = model.forward_packed_all(&mut seqs)?;
            let logits: Vec<Vec<f32>> = logits.to_vec2()?;
            let mut row = 0;
            for (&i, input) in group.iter().zip(&inputs) {
                let rows = &logits[row..row + input.len()];
                row += input.len();
                let n = tokenized[i].len();
                let mut logprob = 0.0;
                let mut first = 0.0;
                for (j, &next) in input[1..=n].iter().enumerate() {
                    let lp = log_softmax_at(&rows[j], &[next]);
                    logprob += lp;
                    if j == 0 {
                        first = lp;
                    }
                }
                let end = log_softmax_at(&rows[n], &ends);
                scored[i] = Some(AnswerLikelihood {
                    logprob,
                    tokens: n,
                    first,
                    end,
                });
            }
        }
        for s in scored {
            out.push(s.unwrap_or(AnswerLikelihood {
                logprob: f32::NEG_INFINITY,
                tokens: 0,
                first: f32::NEG_INFINITY,
                end: f32::NEG_INFINITY,
            }));
        }
        Ok(out)
    }
}

/// `log Σ_{t ∈ tokens} softmax(logits)_t`.
fn log_softmax_at(logits: &[f32], tokens: &[u32]) -> f32 {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let sum: f32 = logits.iter().map(|&l| (l - max).exp()).sum();
    let picked: f32 = tokens
        .iter()
        .filter_map(|&t| logits.get(t as usize))
        .map(|&l| (l - max).exp())
        .sum();
    picked.ln() - sum.ln()
}

#[cfg(test)]
mod tests {
    use super::log_softmax_at;

    #[test]
    fn log_softmax_of_picked_tokens() {
        let l = [0.0f32, 0.0, (2.0f32).ln()];
        assert!((log_softmax_at(&l, &[2]) - 0.5f32.ln()).abs() < 1e-6);
        assert!((log_softmax_at(&l, &[0, 1]) - 0.5f32.ln()).abs() < 1e-6);
    }
}
