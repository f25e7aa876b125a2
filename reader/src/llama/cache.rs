//! The caller-owned decoding state.

use candle_core::Tensor;

use super::Llama;
use crate::error::{Error, Result};

/// One layer's KV cache: keys (post-RoPE), values, SelfExtend's grouped keys, and the index of
/// the first cached position (local layers drop old keys).
#[derive(Debug)]
pub(super) struct LayerKv {
    /// `(b, kv_heads, capacity, d)`: on the reference path a buffer of which the first `len`
    /// positions are filled ([`append_kv`]); on the kernels' path exactly `len` positions.
    pub(super) k: Tensor,
    pub(super) v: Tensor,
    pub(super) k_grouped: Option<Tensor>,
    pub(super) start: usize,
    pub(super) len: usize,
}

impl Clone for LayerKv {
    /// A copy with buffers of its own: the reference path appends in place.
    fn clone(&self) -> Self {
        let own = |t: &Tensor| t.copy().expect("copying a KV-cache buffer");
        Self {
            k: own(&self.k),
            v: own(&self.v),
            k_grouped: self.k_grouped.as_ref().map(own),
            start: self.start,
            len: self.len,
        }
    }
}
/// Per-layer cross-attention keys and values of the encoder context.
#[derive(Debug, Clone)]
pub(super) struct CrossLayerState {
    pub(super) k: Tensor,
    pub(super) v: Tensor,
}

/// The encoder context of a request: computed once, used at every decoding step.
#[derive(Debug, Clone)]
pub(super) struct CrossContext {
    /// Indexed by decoder layer; `None` for layers without cross-attention.
    pub(super) layers: Vec<Option<CrossLayerState>>,
    /// Additive f32 padding mask `(b, 1, 1, n)`.
    pub(super) mask: Tensor,
    /// `(b, 1, 1)`: 0 for rows without any encoder token (they then run as plain Llama).
    pub(super) row_gate: Option<Tensor>,
}

/// Caller-owned decoding state: self-attention KV cache, per-row positions and padding, and the
/// encoder context of CEPE models.
#[derive(Debug, Clone)]
pub struct Cache {
    pub(super) kv: Vec<Option<LayerKv>>,
    pub(super) cross: Option<CrossContext>,
    /// Per row, per cached position: real token (true) or padding.
    pub(super) key_mask: Vec<Vec<bool>>,
    /// Per row, the number of real tokens so far (the next position id).
    pub(super) real: Vec<u32>,
    pub(super) seq_len: usize,
}

impl Cache {
    /// An empty cache for `model`.
    pub fn new(model: &Llama) -> Self {
        Self {
            kv: vec![None; model.decoder.layers.len()],
            cross: None,
            key_mask: Vec::new(),
            real: Vec::new(),
            seq_len: 0,
        }
    }

    /// Number of positions (including padding) in the cache.
    pub fn seq_len(&self) -> usize {
        self.seq_len
    }

    /// Whether encoder context was set with [`Llama::set_encoder_context`].
    pub fn has_encoder_context(&self) -> bool {
        self.cross.is_some()
    }

    /// Drops everything: KV cache, positions and encoder context.
    pub fn clear(&mut self) {
        self.kv.iter_mut().for_each(|kv| *kv = None);
        self.cross = None;
        self.key_mask.clear();
        self.real.clear();
        self.seq_len = 0;
    }

    pub(super) fn batch(&self) -> Option<usize> {
        if self.seq_len > 0 || self.cross.is_some() {
            Some(self.key_mask.len())
        } else {
            None
        }
    }

    pub(super) fn ensure_batch(&mut self, b: usize) -> Result<()> {
        match self.batch() {
            Some(cb) if cb != b => Err(Error::invalid(format!(
                "batch size {b} does not match the cache's {cb}"
            ))),
            Some(_) => Ok(()),
            None => {
                self.key_mask = vec![Vec::new(); b];
                self.real = vec![0; b];
                Ok(())
            }
        }
    }
}

/// Encoder chunks after left padding: `hidden_states` `(chunks, len, hidden)` (after the final
/// norm) and, per chunk, which positions are real tokens.
#[derive(Debug, Clone)]
pub struct EncodedChunks {
    /// Last hidden states after the encoder's final RMSNorm.
    pub hidden_states: Tensor,
    /// `mask[c][i]`: position `i` of chunk `c` is a real token (false: left padding).
    pub mask: Vec<Vec<bool>>,
}
