//! CEPE's context encoder: chunks encoded in parallel, cross-attention keys and values cached.

use std::collections::{BTreeMap, HashMap, HashSet};

use candle_core::{Module, Tensor};

use super::cache::{Cache, CrossContext, CrossKv, CrossLayerState, EncodedChunks};
use super::passage_states::PassageCache;
use super::{CResult, Llama, MASKED};
use crate::error::{Error, Result};

/// Tokens one pass of the context encoder takes at most when chunks are batched: 64 chunks of
/// 256 tokens. CEPE-7B's encoder (24 layers of width 1024) does ~14 TFLOP a pass, far past its
/// launches' cost, and holds ~1 GB of bf16 activations at its widest (the MLP's, and the
/// attention scores), beside the 7B decoder's 17 GB of weights.
const ENCODE_BATCH_TOKENS: usize = 16 * 1024;

impl Llama {
    /// Runs CEPE's bidirectional encoder over `chunks`, each on its own: chunks are left-padded
    /// with `pad_id` to the longest, padding is masked, and positions are `arange(L)` per
    /// chunk, as in the reference.
    pub fn encode_chunks(&self, chunks: &[Vec<u32>], pad_id: u32) -> Result<EncodedChunks> {
        let enc = self
            .encoder
            .as_ref()
            .ok_or_else(|| Error::invalid("this model has no context encoder"))?;
        let enc_cfg = self
            .cfg
            .encoder_config
            .as_deref()
            .expect("encoder has a config");
        let n = chunks.len();
        let len = chunks.iter().map(Vec::len).max().unwrap_or(0);
        if n == 0 || len == 0 {
            return Err(Error::invalid("no encoder tokens"));
        }
        let mut ids = Vec::with_capacity(n * len);
        let mut mask = Vec::with_capacity(n);
        for c in chunks {
            if let Some(&bad) = c.iter().find(|&&t| t as usize >= enc_cfg.vocab_size) {
                return Err(Error::invalid(format!(
                    "encoder token id {bad} out of range (vocab_size {})",
                    enc_cfg.vocab_size
                )));
            }
            let pad = len - c.len();
            ids.extend(std::iter::repeat_n(pad_id, pad).chain(c.iter().copied()));
            mask.push((0..len).map(|i| i >= pad).collect::<Vec<bool>>());
        }
        let ids = Tensor::from_vec(ids, (n, len), &self.device)?;
        let add_mask: Vec<f32> = mask
            .iter()
            .flat_map(|r| r.iter().map(|&m| if m { 0.0 } else { MASKED }))
            .collect();
        let add_mask = Tensor::from_vec(add_mask, (n, 1, 1, len), &self.device)?;
        let positions = vec![(0..len as u32).collect::<Vec<u32>>()];
        let rope = enc
            .rope
            .rotary(&positions, self.fused_kernels, self.dtype, &self.device)?;
        let mut x = enc.embed_tokens.forward(&ids)?;
        for layer in &enc.layers {
            x = layer.forward(
                &x,
                &rope,
                Some(&add_mask),
                &mut None,
                None,
                None,
                self.fused_kernels,
                None,
            )?;
        }
        let hidden_states = enc.norm.forward(&x)?;
        Ok(EncodedChunks {
            hidden_states,
            mask,
        })
    }

    /// Encodes each row's chunks and stores the cross-attention keys/values in `cache`, once
    /// per request. `rows[r]` are the (unpadded) encoder chunks of batch row `r`; rows may
    /// have different numbers of chunks (missing ones are masked), and a row without chunks
    /// decodes as plain Llama. Nothing is kept between calls: see
    /// [`Llama::set_encoder_context_cached`].
    pub fn set_encoder_context(
        &self,
        rows: &[Vec<Vec<u32>>],
        pad_id: u32,
        cache: &mut Cache,
    ) -> Result<()> {
        self.set_encoder_context_cached(rows, pad_id, cache, &mut PassageCache::new(0))
    }

    /// [`Llama::set_encoder_context`] taking the states of chunks read before from
    /// `passages` and keeping those it encodes there. Each distinct chunk is encoded alone
    /// (positions `0..len`, no padding), so the result is the same, bit for bit, whatever
    /// the cache holds and in whatever order the chunks come.
    pub fn set_encoder_context_cached(
        &self,
        rows: &[Vec<Vec<u32>>],
        pad_id: u32,
        cache: &mut Cache,
        passages: &mut PassageCache,
    ) -> Result<()> {
        cache.ensure_batch(rows.len())?;
        let b = rows.len();
        let n_ctx = rows.iter().map(Vec::len).max().unwrap_or(0).max(1);
        let len = rows.iter().flatten().map(Vec::len).max().unwrap_or(0);
        if len == 0 {
            return Err(Error::invalid("no encoder tokens"));
        }
        let states_of = self.distinct_chunk_states(rows, pad_id, passages)?;
        // Each chunk's states, left-padded with zeros to `len` (padding is masked).
        let mut padded = Vec::with_capacity(b * n_ctx);
        let mut chunk_mask = Vec::with_capacity(b * n_ctx);
        for row in rows {
            for i in 0..n_ctx {
                let chunk = row.get(i).map_or(&[][..], Vec::as_slice);
                padded.push(self.padded_states(chunk, len, &states_of)?);
                chunk_mask.push(
                    (0..len)
                        .map(|p| p >= len - chunk.len())
                        .collect::<Vec<bool>>(),
                );
            }
        }
        let states = Tensor::stack(&padded, 0)?;
        let d = states.dim(2)?;
        let states = states.reshape((b, n_ctx * len, d))?;
        let flat: Vec<Vec<bool>> = chunk_mask.chunks(n_ctx).map(|c| c.concat()).collect();
        let add: Vec<f32> = flat
            .iter()
            .flat_map(|r| r.iter().map(|&m| if m { 0.0 } else { MASKED }))
            .collect();
        let mask = Tensor::from_vec(add, (b, 1, 1, n_ctx * len), &self.device)?;
        let key_mask: Vec<u8> = flat
            .iter()
            .flat_map(|r| r.iter().map(|&m| m as u8))
            .collect();
        let key_mask = if key_mask.iter().all(|&m| m == 1) {
            None
        } else {
            Some(Tensor::from_vec(key_mask, (b, n_ctx * len), &self.device)?)
        };
        let gates: Vec<f32> = flat
            .iter()
            .map(|r| if r.iter().any(|&m| m) { 1.0 } else { 0.0 })
            .collect();
        let row_gate = if gates.iter().all(|&g| g == 1.0) {
            None
        } else {
            Some(Tensor::from_vec(gates, (b, 1, 1), &self.device)?.to_dtype(self.dtype)?)
        };
        let cached_bytes: usize = self
            .decoder
            .layers
            .iter()
            .filter_map(|l| l.cross_attn.as_ref())
            .map(|ca| 2 * ca.n_kv_heads * ca.head_dim)
            .sum::<usize>()
            * b
            * n_ctx
            * len
            * self.dtype.size_in_bytes();
        let cache_all = match self.cross_kv {
            CrossKv::Cached => true,
            CrossKv::Projected => false,
            CrossKv::Auto { max_bytes } => cached_bytes <= max_bytes,
        };
        let layers = if cache_all {
            self.decoder
                .layers
                .iter()
                .map(|l| {
                    l.cross_attn
                        .as_ref()
                        .map(|ca| {
                            ca.project_kv(&states)
                                .map(|(k, v)| CrossLayerState { k, v })
                        })
                        .transpose()
                })
                .collect::<CResult<Vec<_>>>()?
        } else {
            vec![None; self.decoder.layers.len()]
        };
        let states = (!cache_all).then_some(states);
        cache.cross = Some(CrossContext {
            layers,
            states,
            mask,
            key_mask,
            row_gate,
        });
        Ok(())
    }

    /// The states of each distinct chunk of `rows`, `(len, hidden)`: from `passages`, or
    /// encoded. The chunks `passages` lacks are encoded together, those of one length in
    /// passes of at most [`ENCODE_BATCH_TOKENS`] tokens without padding (positions `0..len`,
    /// as alone): one pass for a 128K-token context's 496 chunks of 256 tokens would otherwise
    /// be 496 launch-bound passes. A chunk's states are the same function of its tokens
    /// whatever it shares a pass with (no padding, no cross-chunk attention); only a device's
    /// choice of product kernel by batch size can round them differently.
    fn distinct_chunk_states(
        &self,
        rows: &[Vec<Vec<u32>>],
        pad_id: u32,
        passages: &mut PassageCache,
    ) -> Result<HashMap<Vec<u32>, Tensor>> {
        let mut states: HashMap<Vec<u32>, Tensor> = HashMap::new();
        // Chunks to encode, by length, in the order first met (deterministic passes).
        let mut missing: BTreeMap<usize, Vec<Vec<u32>>> = BTreeMap::new();
        let mut queued: HashSet<&[u32]> = HashSet::new();
        for chunk in rows.iter().flatten().filter(|c| !c.is_empty()) {
            if states.contains_key(chunk) || queued.contains(chunk.as_slice()) {
                // Read again within the request: its states are at hand.
                passages.note_reused(chunk);
                continue;
            }
            match passages.get(chunk) {
                Some(found) => {
                    states.insert(chunk.clone(), found);
                }
                None => {
                    queued.insert(chunk);
                    missing.entry(chunk.len()).or_default().push(chunk.clone());
                }
            }
        }
        for (len, chunks) in missing {
            for pass in chunks.chunks((ENCODE_BATCH_TOKENS / len).max(1)) {
                let encoded = self.encode_chunks(pass, pad_id)?.hidden_states;
                for (i, chunk) in pass.iter().enumerate() {
                    let one = encoded.get(i)?;
                    passages.put(chunk, &one);
                    states.insert(chunk.clone(), one);
                }
            }
        }
        Ok(states)
    }

    /// One chunk's states from `states_of` (zeros for a missing chunk), left-padded with
    /// zeros to `len` rows.
    fn padded_states(
        &self,
        chunk: &[u32],
        len: usize,
        states_of: &HashMap<Vec<u32>, Tensor>,
    ) -> Result<Tensor> {
        let hidden = self
            .cfg
            .encoder_config
            .as_deref()
            .ok_or_else(|| Error::invalid("this model has no context encoder"))?
            .hidden_size;
        let zeros = |rows: usize| Tensor::zeros((rows, hidden), self.dtype, &self.device);
        if chunk.is_empty() {
            return Ok(zeros(len)?);
        }
        let states = states_of
            .get(chunk)
            .expect("every non-empty chunk's states were gathered")
            .clone();
        if chunk.len() == len {
            return Ok(states);
        }
        Ok(Tensor::cat(&[&zeros(len - chunk.len())?, &states], 0)?)
    }
}
