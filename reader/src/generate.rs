//! Token generation: greedy and sampled decoding (temperature, top-k, top-p, repetition
//! penalty), stop token ids and stop strings, streaming through a per-token callback, with time
//! to first token and throughput.
//!
//! Logit processing follows Hugging Face's `generate` order: repetition penalty, temperature,
//! top-k, top-p.

use std::sync::Arc;
use std::time::{Duration, Instant};

use candle_core::{DType, Tensor};
use rand::distributions::{Distribution, WeightedIndex};
use rand::rngs::StdRng;
use rand::SeedableRng;
use tokenizers::Tokenizer;

use crate::error::{Error, Result};
use crate::grounded::{SpanMatch, SpanSource, SpanState};
use crate::llama::{Cache, Llama};

/// Decoding parameters.
#[derive(Debug, Clone, PartialEq)]
pub struct GenerationParams {
    /// Upper bound on new tokens.
    pub max_new_tokens: usize,
    /// 0 (or `None`) means greedy; otherwise logits are divided by it and sampled.
    pub temperature: Option<f64>,
    /// Nucleus sampling: keep the smallest set of tokens with probability mass >= top_p.
    pub top_p: Option<f64>,
    /// Keep only the k most likely tokens.
    pub top_k: Option<usize>,
    /// Hugging Face's repetition penalty (1.0 = off) over prompt and generated tokens.
    pub repetition_penalty: f32,
    /// Generation stops after emitting any of these ids (the id is kept in `tokens`).
    pub stop_token_ids: Vec<u32>,
    /// Generation stops when the decoded text contains any of these (needs a tokenizer); the
    /// returned text is cut before the stop string.
    pub stop_strings: Vec<String>,
    /// Seed of the sampler.
    pub seed: u64,
    /// Grounded decoding: the answer may only copy a span of these passages (and ends with one
    /// of their end tokens); `None` for free text.
    pub span: Option<Arc<SpanSource>>,
    /// Stop when the text starts to loop: the same run of 1 to 16 tokens three times in a
    /// row ends generation, and the text keeps only its first occurrence.
    pub stop_on_repetition: bool,
    /// OpenAI's presence penalty: subtracted from the logit of every token generated so far
    /// (the prompt's tokens are not penalised; 0 = off).
    pub presence_penalty: f32,
    /// OpenAI's frequency penalty: subtracted from a token's logit once for each time it was
    /// generated so far (0 = off).
    pub frequency_penalty: f32,
    /// Added to these tokens' logits before sampling (OpenAI's `logit_bias`; -100 all but
    /// bans a token).
    pub logit_bias: Vec<(u32, f32)>,
    /// Report each new token's log-probability, and this many of the most likely tokens at
    /// its place ([`TokenLogprob`]); `None`: none reported.
    pub logprobs: Option<usize>,
}

impl Default for GenerationParams {
    fn default() -> Self {
        Self {
            max_new_tokens: 32,
            temperature: None,
            top_p: None,
            top_k: None,
            repetition_penalty: 1.0,
            stop_token_ids: Vec::new(),
            stop_strings: Vec::new(),
            seed: 0,
            span: None,
            stop_on_repetition: false,
            presence_penalty: 0.0,
            frequency_penalty: 0.0,
            logit_bias: Vec::new(),
            logprobs: None,
        }
    }
}

impl GenerationParams {
    /// Greedy decoding of exactly `max_new_tokens` tokens (no stops).
    pub fn greedy(max_new_tokens: usize) -> Self {
        Self {
            max_new_tokens,
            ..Self::default()
        }
    }

    /// Whether decoding takes the most likely token (no temperature, or 0).
    pub fn is_greedy(&self) -> bool {
        self.temperature.is_none_or(|t| t <= 0.0)
    }
}

/// Why generation ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StopReason {
    /// `max_new_tokens` reached.
    Length,
    /// A stop token id was generated.
    StopToken(u32),
    /// A stop string appeared in the text.
    StopString(String),
    /// The streaming callback asked to stop.
    Cancelled,
    /// The text started to loop ([`GenerationParams::stop_on_repetition`]).
    Repetition,
}

/// The result of one generation.
#[derive(Debug, Clone)]
pub struct Generation {
    /// New token ids.
    pub tokens: Vec<u32>,
    /// Decoded new text (when a tokenizer is available), cut before a stop string.
    pub text: Option<String>,
    /// Why it ended.
    pub stop_reason: StopReason,
    /// Prompt length in tokens.
    pub prompt_tokens: usize,
    /// From the call to the first new token (prefill, encoder included).
    pub time_to_first_token: Duration,
    /// Whole call.
    pub elapsed: Duration,
    /// Where a grounded answer stands in its passages (empty for free text, and for a grounded
    /// answer that ended before copying anything).
    pub span: Vec<SpanMatch>,
    /// Each new token's log-probability, when [`GenerationParams::logprobs`] asked for them.
    pub logprobs: Vec<TokenLogprob>,
}

impl Generation {
    /// Decoding throughput after the first token, in tokens per second.
    pub fn tokens_per_second(&self) -> f64 {
        let decode = self.elapsed.saturating_sub(self.time_to_first_token);
        let n = self.tokens.len().saturating_sub(1);
        if n == 0 || decode.is_zero() {
            0.0
        } else {
            n as f64 / decode.as_secs_f64()
        }
    }
}

/// Whether the streaming callback wants more tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flow {
    /// Keep generating.
    Continue,
    /// Stop now.
    Stop,
}

/// A request: prompt ids and, for CEPE models, encoder chunks.
#[derive(Debug, Clone, Default)]
pub struct Request {
    /// Decoder prompt (with BOS when the model expects one).
    pub prompt: Vec<u32>,
    /// CEPE encoder chunks (unpadded), empty for none.
    pub encoder_chunks: Vec<Vec<u32>>,
}

/// Generates with `model` (`tokenizer` is needed only for stop strings and `text`).
pub struct Generator<'a> {
    model: &'a Llama,
    tokenizer: Option<&'a Tokenizer>,
    encoder_pad_id: u32,
}

/// Hugging Face's repetition penalty, in place on a row of logits.
pub fn apply_repetition_penalty(logits: &mut [f32], seen: &[u32], penalty: f32) {
    if penalty == 1.0 {
        return;
    }
    let mut done = std::collections::HashSet::new();
    for &t in seen {
        if !done.insert(t) {
            continue;
        }
        if let Some(l) = logits.get_mut(t as usize) {
            *l = if *l < 0.0 { *l * penalty } else { *l / penalty };
        }
    }
}

/// OpenAI's presence and frequency penalties, in place on a row of logits: a token generated
/// `c > 0` times so far loses `presence + c * frequency`.
pub fn apply_presence_and_frequency(
    logits: &mut [f32],
    generated: &[u32],
    presence: f32,
    frequency: f32,
) {
    if presence == 0.0 && frequency == 0.0 {
        return;
    }
    let mut counts: std::collections::HashMap<u32, usize> = Default::default();
    for &t in generated {
        *counts.entry(t).or_default() += 1;
    }
    for (t, c) in counts {
        if let Some(l) = logits.get_mut(t as usize) {
            *l -= presence + c as f32 * frequency;
        }
    }
}

/// Every adjustment of the logits before a token is drawn: the logit biases, the repetition
/// penalty (over prompt and new tokens, `seen`), then the presence and frequency penalties
/// (over the new tokens, `generated`).
fn adjust(logits: &mut [f32], seen: &[u32], generated: &[u32], params: &GenerationParams) {
    for &(t, bias) in &params.logit_bias {
        if let Some(l) = logits.get_mut(t as usize) {
            *l += bias;
        }
    }
    apply_repetition_penalty(logits, seen, params.repetition_penalty);
    apply_presence_and_frequency(
        logits,
        generated,
        params.presence_penalty,
        params.frequency_penalty,
    );
}

/// A new token's log-probability under the distribution it was drawn from (after the
/// adjustments and a span's constraint, before temperature, as OpenAI reports them), and the
/// `top` most likely tokens at its place with theirs, most likely first.
#[derive(Debug, Clone, PartialEq)]
pub struct TokenLogprob {
    /// The token.
    pub token: u32,
    /// Its log-probability.
    pub logprob: f32,
    /// The most likely tokens and their log-probabilities.
    pub top: Vec<(u32, f32)>,
}

impl TokenLogprob {
    /// `token`'s entry of the log-softmax of `logits`, and the `top` best.
    pub fn of(logits: &[f32], token: u32, top: usize) -> Self {
        let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let log_sum = max + logits.iter().map(|&l| (l - max).exp()).sum::<f32>().ln();
        let logprob = logits
            .get(token as usize)
            .map_or(f32::NEG_INFINITY, |&l| l - log_sum);
        let mut best: Vec<(u32, f32)> = logits
            .iter()
            .enumerate()
            .map(|(i, &l)| (i as u32, l - log_sum))
            .collect();
        let top = top.min(best.len());
        if top > 0 && top < best.len() {
            best.select_nth_unstable_by(top - 1, |a, b| b.1.total_cmp(&a.1));
        }
        best.truncate(top);
        best.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        Self {
            token,
            logprob,
            top: best,
        }
    }
}

/// Index of the largest logit (the first one on ties, as `torch.argmax`).
pub fn argmax(logits: &[f32]) -> u32 {
    let mut best = 0;
    for (i, &l) in logits.iter().enumerate() {
        if l > logits[best] {
            best = i;
        }
    }
    best as u32
}

/// Picks the next token from one row of (adjusted) logits.
fn pick(logits: &[f32], params: &GenerationParams, rng: &mut StdRng) -> Result<u32> {
    if params.is_greedy() {
        return Ok(argmax(logits));
    }
    let temp = params.temperature.unwrap_or(1.0) as f32;
    let mut cand: Vec<(usize, f32)> = logits.iter().map(|&l| l / temp).enumerate().collect();
    cand.sort_by(|a, b| b.1.total_cmp(&a.1));
    if let Some(k) = params.top_k.filter(|&k| k > 0) {
        cand.truncate(k);
    }
    let max = cand[0].1;
    let mut probs: Vec<f32> = cand.iter().map(|(_, l)| (l - max).exp()).collect();
    let sum: f32 = probs.iter().sum();
    probs.iter_mut().for_each(|p| *p /= sum);
    if let Some(top_p) = params.top_p.filter(|&p| p < 1.0) {
        let mut acc = 0.0;
        let mut keep = probs.len();
        for (i, p) in probs.iter().enumerate() {
            acc += p;
            if acc as f64 >= top_p {
                keep = i + 1;
                break;
            }
        }
        probs.truncate(keep);
        cand.truncate(keep);
    }
    let dist = WeightedIndex::new(&probs).map_err(|e| Error::invalid(format!("sampling: {e}")))?;
    Ok(cand[dist.sample(rng)].0 as u32)
}

/// The longest loop [`GenerationParams::stop_on_repetition`] looks for, in tokens. SmolLM2
/// loops on clauses: ", in the county of Dreiwek" is 9 tokens, which a bound of 8 let run to
/// the token limit.
const LOOP_PERIODS: usize = 16;

/// The period of a loop at the end of `tokens`: the same run of 1 to [`LOOP_PERIODS`] tokens
/// three times.
fn looping(tokens: &[u32]) -> Option<usize> {
    (1..=LOOP_PERIODS).find(|&p| {
        tokens.len() >= 3 * p && {
            let end = tokens.len();
            let last = &tokens[end - p..];
            last == &tokens[end - 2 * p..end - p] && last == &tokens[end - 3 * p..end - 2 * p]
        }
    })
}

/// What one sampled token produced.
#[derive(Debug, Clone)]
pub struct DecodedToken {
    /// The token.
    pub token: u32,
    /// Newly decoded text (with a tokenizer), up to a stop string.
    pub piece: Option<String>,
    /// Its log-probability, when [`GenerationParams::logprobs`] asked for them.
    pub logprob: Option<TokenLogprob>,
}

/// One sequence's decoding: its sampler, the tokens and text so far, and the stop checks.
/// [`Generator`] drives one; a batching scheduler drives many, one step at a time.
#[derive(Debug)]
pub struct Decoding {
    params: GenerationParams,
    rng: StdRng,
    seen: Vec<u32>,
    tokens: Vec<u32>,
    logprobs: Vec<TokenLogprob>,
    text: String,
    /// Bytes of `text` given out as pieces so far.
    emitted: usize,
    stop: Option<StopReason>,
    span: Option<SpanState>,
}

impl Decoding {
    /// A sequence after `prompt` (the repetition penalty sees it), with its own parameters.
    pub fn new(prompt: &[u32], params: GenerationParams) -> Self {
        let stop = (params.max_new_tokens == 0).then_some(StopReason::Length);
        Self {
            span: params.span.clone().map(SpanState::new),
            rng: StdRng::seed_from_u64(params.seed),
            params,
            seen: prompt.to_vec(),
            tokens: Vec::new(),
            logprobs: Vec::new(),
            text: String::new(),
            emitted: 0,
            stop,
        }
    }

    /// Whether a stop condition (or the token limit) was reached.
    pub fn is_done(&self) -> bool {
        self.stop.is_some()
    }

    /// New tokens so far.
    pub fn tokens(&self) -> &[u32] {
        &self.tokens
    }

    /// Samples the next token from `logits` (modified in place) and applies the stop rules.
    /// `tokenizer` is needed for stop strings and text.
    pub fn push(
        &mut self,
        logits: &mut [f32],
        tokenizer: Option<&Tokenizer>,
    ) -> Result<DecodedToken> {
        if !self.params.stop_strings.is_empty() && tokenizer.is_none() {
            return Err(Error::NoTokenizer);
        }
        if let Some(span) = &self.span {
            span.constrain(logits)?;
        }
        adjust(logits, &self.seen, &self.tokens, &self.params);
        let next = pick(logits, &self.params, &mut self.rng)?;
        let logprob = self
            .params
            .logprobs
            .map(|top| TokenLogprob::of(logits, next, top));
        if let Some(l) = &logprob {
            self.logprobs.push(l.clone());
        }
        if let Some(span) = &mut self.span {
            span.advance(next);
        }
        self.tokens.push(next);
        self.seen.push(next);
        if let Some(tok) = tokenizer {
            self.text = crate::prompt::decode(tok, &self.tokens)?;
        }
        if self.params.stop_token_ids.contains(&next) {
            self.stop = Some(StopReason::StopToken(next));
        } else if let Some((s, at)) = self
            .params
            .stop_strings
            .iter()
            .filter_map(|s| self.text.find(s.as_str()).map(|at| (s, at)))
            .min_by_key(|(_, at)| *at)
        {
            self.stop = Some(StopReason::StopString(s.clone()));
            self.text.truncate(at);
        } else if let Some(period) = self
            .params
            .stop_on_repetition
            .then(|| looping(&self.tokens))
            .flatten()
        {
            self.stop = Some(StopReason::Repetition);
            // Keep the first occurrence of the loop; the repeats were streamed already, so the
            // text is cut below what was streamed and this token's piece is empty.
            self.tokens.truncate(self.tokens.len() - 2 * period);
            self.logprobs.truncate(self.tokens.len());
            if let Some(tok) = tokenizer {
                self.text = crate::prompt::decode(tok, &self.tokens)?;
            }
        } else if self.tokens.len() >= self.params.max_new_tokens {
            self.stop = Some(StopReason::Length);
        }
        // The piece is the text not given out yet, up to a stop string's cut; text that may be
        // the start of a stop string is held back until the next token tells, so a streamed
        // piece is never taken back.
        let piece = tokenizer.map(|_| {
            let held = if self.stop.is_some() {
                0
            } else {
                self.stop_prefix_len()
            };
            let end = (self.text.len() - held).max(self.emitted);
            let piece = self.text.get(self.emitted..end).unwrap_or("").to_string();
            self.emitted = end.min(self.text.len());
            piece
        });
        Ok(DecodedToken {
            token: next,
            piece,
            logprob,
        })
    }

    /// The longest end of the text that begins a stop string (without being one).
    fn stop_prefix_len(&self) -> usize {
        let mut longest = 0;
        for stop in &self.params.stop_strings {
            for k in (1..stop.len()).rev() {
                if k <= longest {
                    break;
                }
                if stop.is_char_boundary(k) && self.text.ends_with(&stop[..k]) {
                    longest = k;
                    break;
                }
            }
        }
        longest
    }

    /// Where the grounded answer so far stands in its passages (empty for free text).
    pub fn span_matches(&self) -> Vec<SpanMatch> {
        self.span
            .as_ref()
            .map(SpanState::matches)
            .unwrap_or_default()
    }

    /// The new tokens' log-probabilities so far (empty unless asked for), handed over.
    pub fn take_logprobs(&mut self) -> Vec<TokenLogprob> {
        std::mem::take(&mut self.logprobs)
    }

    /// Ends the sequence early (the client left or asked to stop).
    pub fn cancel(&mut self) {
        self.stop.get_or_insert(StopReason::Cancelled);
    }

    /// New tokens, the decoded text (when a tokenizer was given; cut before a stop string)
    /// and why decoding ended.
    pub fn finish(self) -> (Vec<u32>, String, StopReason) {
        (
            self.tokens,
            self.text,
            self.stop.unwrap_or(StopReason::Length),
        )
    }
}

impl<'a> Generator<'a> {
    /// A generator; `encoder_pad_id` pads CEPE encoder chunks (the reference uses eos = 2).
    pub fn new(model: &'a Llama, tokenizer: Option<&'a Tokenizer>, encoder_pad_id: u32) -> Self {
        Self {
            model,
            tokenizer,
            encoder_pad_id,
        }
    }

    /// Blocking generation.
    pub fn generate(&self, request: &Request, params: &GenerationParams) -> Result<Generation> {
        self.generate_stream(request, params, |_, _| Flow::Continue)
    }

    /// Streaming generation: `on_token(id, text_piece)` is called for every new token (the
    /// piece is the newly decoded text when a tokenizer is present).
    pub fn generate_stream(
        &self,
        request: &Request,
        params: &GenerationParams,
        mut on_token: impl FnMut(u32, Option<&str>) -> Flow,
    ) -> Result<Generation> {
        let start = Instant::now();
        if request.prompt.is_empty() {
            return Err(Error::invalid("empty prompt"));
        }
        if !params.stop_strings.is_empty() && self.tokenizer.is_none() {
            return Err(Error::NoTokenizer);
        }
        let dev = self.model.device();
        let mut cache = Cache::new(self.model);
        cache.reserve(request.prompt.len() + params.max_new_tokens);
        if !request.encoder_chunks.is_empty() {
            self.model.set_encoder_context(
                std::slice::from_ref(&request.encoder_chunks),
                self.encoder_pad_id,
                &mut cache,
            )?;
        }
        let mut decoding = Decoding::new(&request.prompt, params.clone());
        let mut ttft = None;
        let mut input = Tensor::new(request.prompt.as_slice(), dev)?.unsqueeze(0)?;
        while !decoding.is_done() {
            let logits = self.model.forward_last(&input, None, &mut cache)?;
            let mut row = logits.squeeze(0)?.to_dtype(DType::F32)?.to_vec1::<f32>()?;
            let step = decoding.push(&mut row, self.tokenizer)?;
            ttft.get_or_insert_with(|| start.elapsed());
            if on_token(step.token, step.piece.as_deref()) == Flow::Stop {
                decoding.cancel();
                break;
            }
            input = Tensor::new(&[step.token], dev)?.unsqueeze(0)?;
        }
        let span = decoding.span_matches();
        let logprobs = decoding.take_logprobs();
        let (tokens, text, stop_reason) = decoding.finish();
        Ok(Generation {
            span,
            logprobs,
            tokens,
            text: self.tokenizer.map(|_| text),
            stop_reason,
            prompt_tokens: request.prompt.len(),
            time_to_first_token: ttft.unwrap_or_else(|| start.elapsed()),
            elapsed: start.elapsed(),
        })
    }

    /// Greedy or sampled generation for a batch of prompts of different lengths, left-padded
    /// (with `pad_id`) and masked as Hugging Face's `generate` does. Stops per row at stop
    /// token ids; returns each row's new tokens.
    pub fn generate_batch(
        &self,
        requests: &[Request],
        params: &GenerationParams,
        pad_id: u32,
    ) -> Result<Vec<Vec<u32>>> {
        let b = requests.len();
        if b == 0 {
            return Ok(Vec::new());
        }
        if requests.iter().any(|r| r.prompt.is_empty()) {
            return Err(Error::invalid("empty prompt in batch"));
        }
        let dev = self.model.device();
        let mut cache = Cache::new(self.model);
        let longest = requests.iter().map(|r| r.prompt.len()).max().unwrap_or(0);
        cache.reserve(longest + params.max_new_tokens);
        if requests.iter().any(|r| !r.encoder_chunks.is_empty()) {
            let rows: Vec<Vec<Vec<u32>>> =
                requests.iter().map(|r| r.encoder_chunks.clone()).collect();
            self.model
                .set_encoder_context(&rows, self.encoder_pad_id, &mut cache)?;
        }
        let len = requests.iter().map(|r| r.prompt.len()).max().unwrap_or(0);
        let mut ids = Vec::with_capacity(b * len);
        let mut mask = Vec::with_capacity(b * len);
        for r in requests {
            let pad = len - r.prompt.len();
            ids.extend(std::iter::repeat_n(pad_id, pad).chain(r.prompt.iter().copied()));
            mask.extend((0..len).map(|i| u32::from(i >= pad)));
        }
        let mut input = Tensor::from_vec(ids, (b, len), dev)?;
        let mut attn = Some(Tensor::from_vec(mask, (b, len), dev)?);
        let mut rng = StdRng::seed_from_u64(params.seed);
        let mut seen: Vec<Vec<u32>> = requests.iter().map(|r| r.prompt.clone()).collect();
        let mut out = vec![Vec::new(); b];
        let mut done = vec![false; b];
        for _ in 0..params.max_new_tokens {
            let logits = self.model.forward_last(&input, attn.as_ref(), &mut cache)?;
            let rows = logits.to_dtype(DType::F32)?.to_vec2::<f32>()?;
            let mut next = Vec::with_capacity(b);
            for (r, mut row) in rows.into_iter().enumerate() {
                adjust(&mut row, &seen[r], &out[r], params);
                let t = pick(&row, params, &mut rng)?;
                if !done[r] {
                    out[r].push(t);
                    seen[r].push(t);
                    done[r] = params.stop_token_ids.contains(&t);
                }
                next.push(t);
            }
            if done.iter().all(|&d| d) {
                break;
            }
            input = Tensor::from_vec(next, (b, 1), dev)?;
            attn = None;
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presence_and_frequency_penalties_follow_openai() {
        // OpenAI: mu[j] -= c[j] * frequency + (c[j] > 0) * presence, over the generated tokens.
        let mut l = vec![1.0, 1.0, 1.0, 1.0];
        apply_presence_and_frequency(&mut l, &[2, 1, 2, 2], 0.5, 0.25);
        assert_eq!(l, vec![1.0, 0.25, -0.25, 1.0]);
        // Negative values favour repeats; zero leaves the logits alone.
        let mut l = vec![1.0, 1.0];
        apply_presence_and_frequency(&mut l, &[1], -1.0, 0.0);
        assert_eq!(l, vec![1.0, 2.0]);
        apply_presence_and_frequency(&mut l, &[0, 1], 0.0, 0.0);
        assert_eq!(l, vec![1.0, 2.0]);
    }

    #[test]
    fn logprobs_are_the_log_softmax_with_the_best_first() {
        let l = [0.0f32, (3.0f32).ln(), 0.0, (4.0f32).ln()];
        // Probabilities 1/9, 3/9, 1/9, 4/9.
        let lp = TokenLogprob::of(&l, 1, 2);
        assert!((lp.logprob - (3.0f32 / 9.0).ln()).abs() < 1e-6);
        assert_eq!(lp.top.iter().map(|t| t.0).collect::<Vec<_>>(), vec![3, 1]);
        assert!((lp.top[0].1 - (4.0f32 / 9.0).ln()).abs() < 1e-6);
        // Ties by token id; more asked than the vocabulary holds gives them all.
        let all = TokenLogprob::of(&l, 0, 10);
        assert_eq!(
            all.top.iter().map(|t| t.0).collect::<Vec<_>>(),
            vec![3, 1, 0, 2]
        );
        assert!(TokenLogprob::of(&l, 0, 0).top.is_empty());
    }

    #[test]
    fn logit_bias_bans_a_token_and_decoding_reports_logprobs() {
        let params = GenerationParams {
            max_new_tokens: 2,
            logit_bias: vec![(2, -100.0)],
            logprobs: Some(1),
            ..GenerationParams::default()
        };
        let mut d = Decoding::new(&[0], params);
        let t = d.push(&mut [0.0, 1.0, 5.0], None).unwrap();
        assert_eq!(t.token, 1, "the biased token is not drawn");
        let lp = t.logprob.unwrap();
        assert_eq!(lp.top[0].0, 1);
        d.push(&mut [3.0, 1.0, 0.0], None).unwrap();
        assert!(d.is_done());
        assert_eq!(d.take_logprobs().len(), 2);
    }

    #[test]
    fn repetition_penalty_follows_hugging_face() {
        let mut l = vec![2.0, -2.0, 1.0];
        apply_repetition_penalty(&mut l, &[0, 1, 1], 2.0);
        assert_eq!(l, vec![1.0, -4.0, 1.0]);
    }

    #[test]
    fn loops_are_found_at_the_end_only() {
        assert_eq!(looping(&[5, 7, 7, 7]), Some(1));
        assert_eq!(looping(&[1, 2, 3, 2, 3, 2, 3]), Some(2));
        assert_eq!(looping(&[2, 3, 2, 3, 2, 3, 4]), None);
        assert_eq!(looping(&[1, 2, 1, 2]), None);
        // A clause of 9 tokens, three times.
        let clause: Vec<u32> = (10..19).collect();
        let text: Vec<u32> = [&[1u32, 2][..], &clause, &clause, &clause].concat();
        assert_eq!(looping(&text), Some(9));
        assert_eq!(looping(&text[..text.len() - 1]), None);
        let mut d = Decoding::new(
            &[],
            GenerationParams {
                max_new_tokens: 50,
                stop_on_repetition: true,
                ..GenerationParams::default()
            },
        );
        for t in [4, 9, 8, 9, 8, 9, 8] {
            let mut logits = vec![0.0; 10];
            logits[t] = 1.0;
            d.push(&mut logits, None).unwrap();
        }
        let (tokens, _, reason) = d.finish();
        assert_eq!(reason, StopReason::Repetition);
        assert_eq!(tokens, vec![4, 9, 8]);
    }

    #[test]
    fn argmax_takes_first_of_ties() {
        assert_eq!(argmax(&[0.0, 3.0, 3.0, 1.0]), 1);
    }

    #[test]
    fn top_k_one_is_greedy_and_top_p_keeps_the_nucleus() {
        let mut rng = StdRng::seed_from_u64(7);
        let params = GenerationParams {
            temperature: Some(1.0),
            top_k: Some(1),
            ..GenerationParams::default()
        };
        for _ in 0..20 {
            assert_eq!(pick(&[0.1, 2.0, 1.9], &params, &mut rng).unwrap(), 1);
        }
        let params = GenerationParams {
            temperature: Some(1.0),
            top_p: Some(0.5),
            ..GenerationParams::default()
        };
        // Token 2 alone holds > 50% of the mass.
        for _ in 0..20 {
            assert_eq!(pick(&[0.0, 0.0, 5.0], &params, &mut rng).unwrap(), 2);
        }
    }
}
