//! Eager attention (the reference path) and the in-place KV append.

use candle_core::{CpuStorage, DType, InplaceOp1, Layout, Tensor};
use capstan_kernels::cpu::math;

use super::cache::LayerKv;
use super::{CResult, MASKED};

/// On the CPU, causal attention over a prompt chunk runs per head and per block of this many
/// queries (bounds the attention-score memory and skips keys no query of the block sees).
pub(super) const QUERY_BLOCK: usize = 256;

/// In place on f32 scores `(b, h, s, t)`: `softmax(scores * scale)` over the causal keys of
/// each query row (row `i` sees keys `..= t - s + i`), zero beyond. What scaling, adding the
/// causal mask and `softmax_last_dim` compute, in one pass over cache-resident rows, without
/// the mask tensor or the exponentials of masked keys.
pub(super) struct CausalSoftmax {
    pub(super) scale: f32,
}

impl InplaceOp1 for CausalSoftmax {
    fn name(&self) -> &'static str {
        "causal-softmax"
    }

    fn cpu_fwd(&self, storage: &mut CpuStorage, layout: &Layout) -> CResult<()> {
        let CpuStorage::F32(data) = storage else {
            candle_core::bail!("causal-softmax: f32 scores expected")
        };
        let Some((o1, o2)) = layout.contiguous_offsets() else {
            candle_core::bail!("causal-softmax: contiguous scores expected")
        };
        let (_, _, s, t) = layout.shape().dims4()?;
        if s > t {
            candle_core::bail!("causal-softmax: {s} queries but only {t} keys");
        }
        for (r, row) in data[o1..o2].chunks_mut(t).enumerate() {
            let (live, masked) = row.split_at_mut(t - s + r % s + 1);
            math::softmax(live, self.scale);
            masked.fill(0.0);
        }
        Ok(())
    }
}

/// `repeat_kv` of the reference: `(b, kv, t, d) -> (b, kv * n_rep, t, d)`, head `i` using kv
/// head `i / n_rep`.
pub(super) fn repeat_kv(x: Tensor, n_rep: usize) -> CResult<Tensor> {
    if n_rep == 1 {
        return Ok(x);
    }
    let (b, kv, t, d) = x.dims4()?;
    x.unsqueeze(2)?
        .expand((b, kv, n_rep, t, d))?
        .reshape((b, kv * n_rep, t, d))
}

/// Eager attention as the reference: `softmax(q k^T / sqrt(d) + mask)` in f32, then `@ v`.
/// `mask` is additive f32, broadcastable to `(b, h, s, t)`; `None` is causal attention (query
/// `i` sees keys `..= t - s + i`, all of them when decoding one token). Returns
/// `(b, s, h * d)`.
pub(super) fn attend(
    q: &Tensor,
    k: Tensor,
    v: Tensor,
    mask: Option<&Tensor>,
    n_rep: usize,
) -> CResult<Tensor> {
    let (b, h, s, d) = q.dims4()?;
    if n_rep > 1 && s == 1 && mask.is_none() {
        // A decoding step with grouped-query heads: the queries sharing a KV head attend as one
        // block of rows, so the cache is read in place instead of copied `n_rep` times (at 2K
        // context the copies were most of a SmolLM2 step). One query sees every key.
        let kv = h / n_rep;
        let qg = q.reshape((b, kv, n_rep, d))?;
        let scores = (qg.matmul(&k.t()?)? / (d as f64).sqrt())?.to_dtype(DType::F32)?;
        let probs = candle_nn::ops::softmax_last_dim(&scores)?.to_dtype(v.dtype())?;
        return probs.matmul(&v)?.reshape((b, s, h * d));
    }
    // Cached keys are views of a larger buffer: the matmuls take them strided, without copies.
    let (k, v) = if n_rep == 1 {
        (k, v)
    } else {
        (
            repeat_kv(k, n_rep)?.contiguous()?,
            repeat_kv(v, n_rep)?.contiguous()?,
        )
    };
    let out = attend_heads(q, &k, &v, mask)?;
    out.transpose(1, 2)?.reshape((b, s, h * d))
}

/// [`attend`] on `(b, h, s, d)` heads, returning `(b, h, s, d)`.
pub(super) fn attend_heads(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    mask: Option<&Tensor>,
) -> CResult<Tensor> {
    let (_, h, s, d) = q.dims4()?;
    let t = k.dim(2)?;
    if mask.is_none() && q.device().is_cpu() && h > 1 && s * t >= 1 << 16 {
        // Prompt chunks: one head at a time, so that its scores stay in cache between the two
        // products and the softmax (all heads' would be `h * s * t` floats, fresh pages).
        let heads = (0..h)
            .map(|i| {
                attend_heads(
                    &q.narrow(1, i, 1)?,
                    &k.narrow(1, i, 1)?,
                    &v.narrow(1, i, 1)?,
                    None,
                )
            })
            .collect::<CResult<Vec<_>>>()?;
        return Tensor::cat(&heads, 1);
    }
    if mask.is_none() && q.device().is_cpu() && s > QUERY_BLOCK {
        // Causal blocks of queries: each block's products stop at its last visible key.
        let blocks = (0..s)
            .step_by(QUERY_BLOCK)
            .map(|r0| {
                let n = QUERY_BLOCK.min(s - r0);
                let seen = t - s + r0 + n;
                attend_heads(
                    &q.narrow(2, r0, n)?,
                    &k.narrow(2, 0, seen)?,
                    &v.narrow(2, 0, seen)?,
                    None,
                )
            })
            .collect::<CResult<Vec<_>>>()?;
        return Tensor::cat(&blocks, 2);
    }
    let scale = (d as f64).sqrt();
    let scores = q.matmul(&k.t()?)?;
    let probs = match mask {
        Some(m) => {
            let scores = (scores / scale)?.to_dtype(DType::F32)?;
            candle_nn::ops::softmax_last_dim(&scores.broadcast_add(m)?)?
        }
        None if scores.device().is_cpu() => {
            // Scaled as the masked path does: in f32 directly, else before the conversion.
            let (scores, mul) = if scores.dtype() == DType::F32 {
                (scores, (1.0 / scale) as f32)
            } else {
                ((scores / scale)?.to_dtype(DType::F32)?, 1.0)
            };
            scores.inplace_op1(&CausalSoftmax { scale: mul })?;
            scores
        }
        None => {
            let m: Vec<f32> = (0..s)
                .flat_map(|i| (0..t).map(move |j| if j <= t - s + i { 0.0 } else { MASKED }))
                .collect();
            let m = Tensor::from_vec(m, (s, t), scores.device())?;
            let scores = (scores / scale)?.to_dtype(DType::F32)?;
            candle_nn::ops::softmax_last_dim(&scores.broadcast_add(&m)?)?
        }
    };
    probs.to_dtype(v.dtype())?.matmul(v)
}

/// Appends `k`, `v` `(b, kv_heads, s, d)` to this layer's cache (in place) and returns views
/// of all cached keys and values.
pub(super) fn append_kv(
    kv: &mut Option<LayerKv>,
    k: &Tensor,
    v: &Tensor,
) -> CResult<(Tensor, Tensor)> {
    LayerKv::append(kv, k, v, None)?;
    let view = kv.as_ref().expect("appended above").view()?;
    Ok((view.k, view.v))
}
