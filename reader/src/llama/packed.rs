//! One forward pass over many independent sequences: the step of continuous batching.
//!
//! Each sequence keeps its own [`Cache`] (batch 1, no padding). Their new tokens are packed
//! into one row of `sum(len)` positions, so every projection and MLP reads the weights once for
//! all of them (on a CPU decode step that read is most of the time); attention runs per
//! sequence over its own cached keys. Nothing is padded: a sequence decoding one token and
//! one prefilling a 300-token chunk share the step at the cost of 301 rows.

use candle_core::{DType, Module, Tensor};

use super::cache::{KvAlloc, Span};
use super::{Cache, Llama, PREFILL_CHUNK};
use crate::attention::AttentionPattern;
use crate::error::{Error, Result};

/// One sequence's share of a packed step: its new tokens and its cache.
#[derive(Debug)]
pub struct PackedInput<'a> {
    /// New tokens (a prompt chunk, or the last sampled token).
    pub tokens: &'a [u32],
    /// The sequence's own cache (batch 1), extended in place.
    pub cache: &'a mut Cache,
}

impl Llama {
    /// Runs every sequence's new tokens after what its cache holds and returns, per sequence,
    /// the f32 logits of its last new position: `(n, vocab)`.
    ///
    /// The same as calling [`Llama::forward_last`] on each sequence alone, up to the rounding
    /// of matrix products over more rows. Caches must hold one unpadded row (as
    /// [`Cache::new`] and [`Llama::set_encoder_context`] with one row make them). Sequences
    /// run one by one (still correct, not batched) with a decoder attention pattern other than
    /// full, or with more than a prefill chunk of new tokens. On CUDA, one new token each runs
    /// through the fused decoding step when `CAPSTAN_DECODE_STEP` chooses it (every sequence
    /// in one launch sequence); otherwise they run packed on the tensor-core attention kernels
    /// (cuDNN's, the default, or Capstan's: decoding rows in one launch; `capstan-bench gpu
    /// decode --batch 16` measures both and checks them against each sequence alone), and one
    /// by one under `CAPSTAN_ATTENTION_KERNEL=cuda-cores`.
    pub fn forward_packed(&self, seqs: &mut [PackedInput<'_>]) -> Result<Tensor> {
        self.on_pool(|| self.forward_packed_here(seqs))
    }

    fn forward_packed_here(&self, seqs: &mut [PackedInput<'_>]) -> Result<Tensor> {
        if seqs.is_empty() {
            return Err(Error::invalid("forward_packed: no sequence"));
        }
        for s in seqs.iter() {
            if s.tokens.is_empty() {
                return Err(Error::invalid(
                    "forward_packed: a sequence without new tokens",
                ));
            }
            if let Some(&max) = s.tokens.iter().max() {
                if max as usize >= self.cfg.vocab_size {
                    return Err(Error::invalid(format!(
                        "token id {max} out of range (vocab_size {})",
                        self.cfg.vocab_size
                    )));
                }
            }
            if s.cache.batch().is_some_and(|b| b != 1)
                || s.cache.key_mask.iter().any(|r| r.iter().any(|m| !m))
            {
                return Err(Error::invalid(
                    "forward_packed: every cache must hold one unpadded sequence",
                ));
            }
        }
        // One new token each: the fused decoding step, where chosen and it applies (every
        // sequence in one launch sequence, each weight row read once for all).
        if seqs.iter().all(|s| s.tokens.len() == 1) {
            let tokens: Vec<u32> = seqs.iter().map(|s| s.tokens[0]).collect();
            let mut caches: Vec<&mut Cache> = seqs.iter_mut().map(|s| &mut *s.cache).collect();
            if let Some(logits) = self.try_decode_steps(&tokens, &mut caches)? {
                return Ok(logits);
            }
        }
        // On CUDA with the tensor-core kernels chosen (the default: their decoding kernel runs
        // every sequence's row in one launch).
        let packable = (self.device.is_cpu() || capstan_kernels::tensor_core_attention())
            && self.attention == AttentionPattern::Full
            && seqs.iter().all(|s| s.tokens.len() <= PREFILL_CHUNK);
        if !packable || seqs.len() == 1 {
            let rows = seqs
                .iter_mut()
                .map(|s| {
                    let ids = Tensor::new(s.tokens, &self.device)?.unsqueeze(0)?;
                    self.forward_last(&ids, None, s.cache)
                })
                .collect::<Result<Vec<_>>>()?;
            return Ok(Tensor::cat(&rows, 0)?);
        }
        let mut ids = Vec::new();
        let mut positions = Vec::new();
        let mut spans = Vec::with_capacity(seqs.len());
        for s in seqs.iter_mut() {
            let cache = &mut *s.cache;
            cache.ensure_batch(1)?;
            spans.push(Span {
                start: ids.len(),
                len: s.tokens.len(),
                kv: KvAlloc {
                    reserve: cache.reserve,
                    dtype: self.kv_dtype,
                },
            });
            ids.extend_from_slice(s.tokens);
            for _ in s.tokens {
                positions.push(cache.real[0]);
                cache.real[0] += 1;
            }
            cache.key_mask[0].extend(std::iter::repeat_n(true, s.tokens.len()));
            cache.seq_len += s.tokens.len();
        }
        let total = ids.len();
        let ids = Tensor::from_vec(ids, (1, total), &self.device)?;
        let rope =
            self.decoder
                .rope
                .rotary(&[positions], self.fused_kernels, self.dtype, &self.device)?;
        let mut x = self.decoder.embed_tokens.forward(&ids)?;
        for (i, layer) in self.decoder.layers.iter().enumerate() {
            // Disjoint fields of each cache: this layer's KV (written) and the encoder context.
            let mut kvs = Vec::with_capacity(seqs.len());
            let mut states = Vec::with_capacity(seqs.len());
            for s in seqs.iter_mut() {
                let cache = &mut *s.cache;
                let state = match &cache.cross {
                    Some(c) => c.layer(i, layer)?,
                    None => None,
                };
                states.push((state, cache.cross.as_ref()));
                kvs.push(&mut cache.kv[i]);
            }
            let cross: Vec<_> = states
                .iter()
                .map(|(state, ctx)| state.as_deref().zip(*ctx))
                .collect();
            x = layer.forward_packed(&x, &rope, &spans, &mut kvs, &cross)?;
        }
        let last: Vec<u32> = spans.iter().map(|s| (s.start + s.len - 1) as u32).collect();
        let n = last.len();
        let last = Tensor::from_vec(last, n, &self.device)?;
        let x = x.squeeze(0)?.index_select(&last, 0)?;
        let x = self.decoder.norm.forward(&x)?;
        // One row per sequence: the quantized kernels, as for a sequence alone.
        Ok(self.lm_head.forward_on(&x, false)?.to_dtype(DType::F32)?)
    }
}
