//! How likely a model finds each of several candidate answers after one prompt: the reader's
//! own vote in choosing a span, read by teacher forcing instead of greedy decoding.
//!
//! A small model's greedy first token is often a word it has just read or a field's name, and
//! once chosen the answer follows it. Scoring every candidate in full (each of its tokens and
//! the end of the answer after it) asks the model which of the spans it would give, not which
//! first token it likes best.
//!
//! The prompt is read once; the candidates are then read together as branches after it, its
//! keys and values shared in place ([`crate::Llama::forward_branches`]).

use candle_core::Tensor;

use crate::attention::AttentionPattern;
use crate::error::{Error, Result};
use crate::language_model::LanguageModel;
use crate::llama::Cache;

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

/// KV cache positions to reserve for the prompt's cache when scoring after a prompt of
/// `prompt_tokens`: the prompt and a pass's candidates.
pub fn scoring_cache_tokens(prompt_tokens: usize) -> usize {
    prompt_tokens + CANDIDATES_PER_PASS * MAX_ANSWER_TOKENS
}

/// KV cache tokens that scoring `answers` candidates after a prompt of `prompt_tokens` holds at
/// most: the prompt once and the tokens of a pass's candidates (with full attention), or a copy
/// of the prompt with a candidate's tokens (a windowed pattern reads candidates one at a time).
pub fn scoring_kv_tokens(prompt_tokens: usize, answers: usize) -> usize {
    prompt_tokens
        + answers.min(CANDIDATES_PER_PASS) * MAX_ANSWER_TOKENS
        + prompt_tokens
        + MAX_ANSWER_TOKENS
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
        let mut cache = Cache::new(self.model());
        cache.reserve(scoring_cache_tokens(prompt.len()));
        self.answer_likelihoods_after(prompt, answers, &mut cache)
    }

    /// As [`LanguageModel::answer_likelihoods`], `cache` holding the keys and values of a
    /// prefix of `prompt` already (a prefix cache's blocks, [`Cache::load_prefix`]; reserve
    /// [`scoring_cache_tokens`] before loading them) or nothing. The rest of the prompt is read
    /// into it, and it holds the whole prompt after, the candidates' keys gone: a prefix cache
    /// may keep its blocks.
    pub fn answer_likelihoods_after(
        &self,
        prompt: &[u32],
        answers: &[&str],
        base: &mut Cache,
    ) -> Result<Vec<AnswerLikelihood>> {
        if base.seq_len() >= prompt.len() {
            return Err(Error::invalid(
                "scoring answers needs a prompt with tokens past what the cache holds",
            ));
        }
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
        if ends.is_empty() {
            return Err(Error::invalid("the model has no end-of-answer token"));
        }
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
        // The prompt once: its last row is every candidate's first prediction. Each candidate
        // then reads its own tokens as a branch after it: row `j` predicts token `j + 1`, the
        // last row the end of the answer.
        let ids = Tensor::new(&prompt[base.seq_len()..], model.device())?.unsqueeze(0)?;
        let first_row: Vec<f32> = model
            .forward_last(&ids, None, base)?
            .squeeze(0)?
            .to_vec1()?;
        let branched = model.attention() == AttentionPattern::Full;
        let order: Vec<usize> = (0..answers.len())
            .filter(|&i| !tokenized[i].is_empty())
            .collect();
        let mut scored: Vec<Option<AnswerLikelihood>> = vec![None; answers.len()];
        for group in order.chunks(CANDIDATES_PER_PASS) {
            let branches: Vec<&[u32]> = group.iter().map(|&i| tokenized[i].as_slice()).collect();
            let logits = if branched {
                model.forward_branches(&branches, base)?
            } else {
                // A windowed layer forgets keys a branch would need: each candidate reads on
                // from a copy of the prompt's cache.
                let rows = branches
                    .iter()
                    .map(|branch| {
                        let ids = Tensor::new(*branch, model.device())?.unsqueeze(0)?;
                        Ok(model.forward(&ids, None, &mut base.clone())?.squeeze(0)?)
                    })
                    .collect::<Result<Vec<_>>>()?;
                Tensor::cat(&rows, 0)?
            };
            let logits: Vec<Vec<f32>> = logits.to_vec2()?;
            let mut row = 0;
            for (&i, answer) in group.iter().zip(&branches) {
                let n = answer.len();
                let rows = &logits[row..row + n];
                row += n;
                let first = log_softmax_at(&first_row, &answer[..1]);
                let rest: f32 = rows
                    .iter()
                    .zip(&answer[1..])
                    .map(|(r, &next)| log_softmax_at(r, &[next]))
                    .sum();
                scored[i] = Some(AnswerLikelihood {
                    logprob: first + rest,
                    tokens: n,
                    first,
                    end: log_softmax_at(&rows[n - 1], &ends),
                });
            }
        }
        Ok(scored
            .into_iter()
            .map(|s| {
                s.unwrap_or(AnswerLikelihood {
                    logprob: f32::NEG_INFINITY,
                    tokens: 0,
                    first: f32::NEG_INFINITY,
                    end: f32::NEG_INFINITY,
                })
            })
            .collect())
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
