//! Several continuations of one cached prompt read in one pass, the prompt's keys and values
//! shared in place.
//!
//! Scoring candidate answers asks, for each, what the model says after the same prompt. Each
//! branch's tokens are laid after the cached prompt in one row with the positions they would
//! have alone; a mask lets a token see the prompt and the earlier tokens of its own branch
//! only (the tree attention of speculative decoding's verifiers). The prompt is read from the
//! cache as it is: nothing is copied per branch, where a cache of its own for each of 24
//! candidates after a 540-token prompt copied 0.2–1.1 s of keys and values on 2 cores.

use candle_core::{DType, Module, Tensor};

use super::cache::KvAlloc;
use super::cache::Span;
use super::layers::LayerAttention;
use super::{Cache, Llama, MASKED};
use crate::attention::AttentionPattern;
use crate::error::{Error, Result};

impl Llama {
    /// Runs each of `branches` after what `cache` holds, each as if it alone followed the
    /// cached tokens, and returns the f32 logits of every position of every branch, in order:
    /// `(Σ len, vocab)`. The cache is left as it was.
    ///
    /// Needs full attention in every layer (a windowed layer forgets keys a branch needs) and
    /// a cache of one unpadded row, or an empty one.
    pub fn forward_branches(&self, branches: &[&[u32]], cache: &mut Cache) -> Result<Tensor> {
        self.on_pool(|| self.forward_branches_here(branches, cache))
    }

    fn forward_branches_here(&self, branches: &[&[u32]], cache: &mut Cache) -> Result<Tensor> {
        if branches.is_empty() || branches.iter().any(|b| b.is_empty()) {
            return Err(Error::invalid("forward_branches: an empty branch, or none"));
        }
        if self.attention != AttentionPattern::Full {
            return Err(Error::invalid(
                "forward_branches needs full attention in every layer",
            ));
        }
        if cache.batch().is_some_and(|b| b != 1)
            || cache.key_mask.iter().any(|r| r.iter().any(|m| !m))
        {
            return Err(Error::invalid(
                "forward_branches: the cache must hold one unpadded sequence",
            ));
        }
        if let Some(&max) = branches.iter().flat_map(|b| b.iter()).max() {
            if max as usize >= self.cfg.vocab_size {
                return Err(Error::invalid(format!(
                    "token id {max} out of range (vocab_size {})",
                    self.cfg.vocab_size
                )));
            }
        }
        let tree = PrefixTree::of(branches);
        cache.ensure_batch(1)?;
        let past = cache.seq_len;
        let next = cache.real[0];
        let s = tree.tokens.len();
        let total = past + s;
        let positions: Vec<u32> = tree.depth.iter().map(|&d| next + d as u32).collect();
        // Row-major (s, total): every node sees the prompt, its ancestors and itself.
        let mut mask = vec![MASKED; s * total];
        for node in 0..s {
            let keys = &mut mask[node * total..(node + 1) * total];
            keys[..past].fill(0.0);
            let mut at = Some(node);
            while let Some(n) = at {
                keys[past + n] = 0.0;
                at = tree.parent[n];
            }
        }
        let mask = Tensor::from_vec(mask, (1, 1, s, total), &self.device)?;
        // The rows project as short sequences do: a few rows each, on the quantized tiles,
        // where one product over all of them would dequantize every matrix for a pass of some
        // 100 rows (0.75 s against 0.5 s on the tiles for 91 rows). Rows are independent on
        // the tiles, so how they are cut does not change what they compute.
        let kv_alloc = KvAlloc {
            reserve: cache.reserve,
            dtype: self.kv_dtype,
        };
        // Where the CPU has AMX tiles, all rows go in one product on them instead: each band
        // of weights is converted to bf16 once for every row (rows are independent there too).
        let span = if capstan_kernels::cpu::amx::available() {
            s
        } else {
            TILE_SPAN
        };
        let spans: Vec<Span> = (0..s)
            .step_by(span)
            .map(|start| Span {
                start,
                len: span.min(s - start),
                kv: kv_alloc,
            })
            .collect();
        let fused = self.fused_kernels;
        let rope = self
            .decoder
            .rope
            .rotary(&[positions], fused, self.dtype, &self.device)?;
        let ids = Tensor::from_slice(&tree.tokens, (1, s), &self.device)?;
        let n_heads = self.cfg.num_attention_heads;
        let mut x = self.decoder.embed_tokens.forward(&ids)?;
        let mut outcome = Ok(());
        for (i, layer) in self.decoder.layers.iter().enumerate() {
            let state = match &cache.cross {
                Some(c) => c.layer(i, layer)?,
                None => None,
            };
            let cross = state.as_deref().zip(cache.cross.as_ref());
            // The reference path: the kernels take a causal pattern, not a tree of branches.
            let la = LayerAttention {
                use_kernels: false,
                pattern: self.attention.layer_pattern(i, n_heads),
                kept: None,
                q_pos0: past,
                grouped_rope: None,
                key_mask: None,
                kv: kv_alloc,
            };
            match layer.forward(
                &x,
                &rope,
                Some(&mask),
                &mut cache.kv[i],
                cross,
                Some(&la),
                fused,
                Some(&spans),
            ) {
                Ok(next) => x = next,
                Err(e) => {
                    outcome = Err(e);
                    break;
                }
            }
        }
        // The branches' keys leave the cache, whatever happened above.
        for kv in cache.kv.iter_mut() {
            match kv {
                Some(k) if past > 0 => k.truncate(past),
                _ => *kv = None,
            }
        }
        outcome?;
        let x = self.decoder.norm.forward(&x)?;
        // The vocabulary's product on the tiles too (dequantizing the embedding matrix for
        // ~100 rows cost more than the product), then each branch's rows from its nodes'.
        let logits = self
            .lm_head
            .forward_spans(&x, &spans)?
            .to_dtype(DType::F32)?
            .squeeze(0)?;
        let rows = Tensor::new(tree.rows.as_slice(), &self.device)?;
        Ok(logits.index_select(&rows, 0)?)
    }
}

/// Rows of a tree pass cut into spans of this many (under [`super::weights::DEQUANTIZE_ROWS`]:
/// each on the quantized tiles).
const TILE_SPAN: usize = 16;

/// Branches as a prefix tree: a token two branches share, after the same tokens, is read once
/// ("lighting", "lighting mine", "lighting mine galleries" are three tokens, not six).
/// Nodes are numbered in the order they are made, a parent before its children.
struct PrefixTree {
    tokens: Vec<u32>,
    parent: Vec<Option<usize>>,
    /// Tokens before the node in its branch (its position after the prompt).
    depth: Vec<usize>,
    /// For each token of each branch, in order, its node.
    rows: Vec<u32>,
}

impl PrefixTree {
    fn of(branches: &[&[u32]]) -> Self {
        let mut tree = PrefixTree {
            tokens: Vec::new(),
            parent: Vec::new(),
            depth: Vec::new(),
            rows: Vec::new(),
        };
        let mut children: std::collections::HashMap<(Option<usize>, u32), usize> =
            Default::default();
        for branch in branches {
            let mut at = None;
            for (d, &token) in branch.iter().enumerate() {
                let node = *children.entry((at, token)).or_insert_with(|| {
                    tree.tokens.push(token);
                    tree.parent.push(at);
                    tree.depth.push(d);
                    tree.tokens.len() - 1
                });
                tree.rows.push(node as u32);
                at = Some(node);
            }
        }
        tree
    }
}
