//! Eager attention (the reference path) and the in-place KV append.

use candle_core::{CpuStorage, DType, InplaceOp1, Layout, Tensor};
use capstan_kernels::cpu::math;
use capstan_kernels::{AttentionOptions, Pattern};

use super::cache::{KvAlloc, LayerKv};
use super::{CResult, MASKED};

/// On the CPU, causal attention over a prompt chunk runs per head and per block of this many
/// queries (bounds the attention-score memory and skips keys no query of the block sees).
pub(super) const QUERY_BLOCK: usize = 256;

/// On a GPU (the matrix-product path), per block of this many queries: 32 heads x 1,024 rows x
/// 32K keys of f32 scores are 4 GiB.
const GPU_QUERY_BLOCK: usize = 1024;

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
    if on_kernel(q, mask) {
        // Capstan's kernel reads the cache in place: one dot product per key for decoding
        // steps and short chunks, query blocks against tiles of keys for longer ones (measured
        // as fast as the matrix products at 512 and 2,048 tokens and 8% faster at 8,192:
        // docs/BENCHMARKS.md, issue 24).
        let opts = causal_after_cache(q, &k)?;
        return rows_of_heads(capstan_kernels::attention(q, &k, &v, opts)?);
    }
    // The products below take keys and values in the queries' dtype (a cache kept in f16 is
    // widened for them).
    let (k, v) = (k.to_dtype(q.dtype())?, v.to_dtype(q.dtype())?);
    // One mask for every head and row of the batch (the branches after a shared prompt).
    let shared_mask =
        mask.filter(|m| m.rank() == 4 && m.dim(0).ok() == Some(1) && m.dim(1).ok() == Some(1));
    if n_rep > 1 && ((s == 1 && mask.is_none()) || (q.device().is_cpu() && shared_mask.is_some())) {
        return attend_grouped(q, &k, &v, shared_mask, n_rep);
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

/// [`attend`] with grouped-query heads, the queries sharing a KV head attending as one block of
/// rows, so the cache is read in place instead of copied `n_rep` times (at 2K context the
/// copies were most of a SmolLM2 decoding step): a decoding step (one query, every key seen),
/// or a block of queries under a `(1, 1, s, t)` mask.
fn attend_grouped(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    mask: Option<&Tensor>,
    n_rep: usize,
) -> CResult<Tensor> {
    let (b, h, s, d) = q.dims4()?;
    let t = k.dim(2)?;
    let kv = h / n_rep;
    let qg = q.reshape((b, kv, n_rep * s, d))?;
    let scores = (qg.matmul(&k.t()?)? / (d as f64).sqrt())?.to_dtype(DType::F32)?;
    let scores = match mask {
        Some(m) => scores
            .reshape((b, kv, n_rep, s, t))?
            .broadcast_add(&m.unsqueeze(0)?)?
            .reshape((b, kv, n_rep * s, t))?,
        None => scores,
    };
    let probs = candle_nn::ops::softmax_last_dim(&scores)?.to_dtype(v.dtype())?;
    let out = probs.matmul(v)?;
    if s == 1 {
        return out.reshape((b, s, h * d));
    }
    out.reshape((b, h, s, d))?
        .transpose(1, 2)?
        .reshape((b, s, h * d))
}

/// Whether [`attend`] runs Capstan's attention kernel: causal, f32, on the CPU.
fn on_kernel(q: &Tensor, mask: Option<&Tensor>) -> bool {
    mask.is_none() && q.device().is_cpu() && q.dtype() == DType::F32
}

/// The kernel's causal attention of `q`'s rows as the last of `k`'s keys.
fn causal_after_cache(q: &Tensor, k: &Tensor) -> CResult<AttentionOptions> {
    let mut opts = AttentionOptions::new(Pattern::Causal);
    opts.q_pos0 = (k.dim(2)? - q.dim(2)?) as u64;
    Ok(opts)
}

/// `(b, h, s, d)` heads as `(b, s, h * d)` rows.
fn rows_of_heads(out: Tensor) -> CResult<Tensor> {
    let (b, h, s, d) = out.dims4()?;
    out.transpose(1, 2)?.reshape((b, s, h * d))
}

/// [`attend`] (causal, no mask) of several sequences' `(q, k, v)`, each against its own cache:
/// decoding rows on CUDA in one launch ([`capstan_kernels::attention_decode_many`]); on the
/// kernel, as one pass of the thread pool over every sequence's rows
/// ([`capstan_kernels::attention_many`]; one pass per sequence and layer cost more than the
/// attention of a decoding row), each computing what it computes alone.
pub(super) fn attend_many(
    parts: Vec<(Tensor, Tensor, Tensor)>,
    n_rep: usize,
) -> CResult<Vec<Tensor>> {
    // On CUDA with the tensor-core kernels chosen (the default; not `cuda-cores`), every
    // sequence's decoding row in one launch (a launch per sequence and layer, several for the
    // products path, cost more than the attention of a decoding row).
    let chosen = capstan_kernels::tensor_core_attention();
    let decoding_on_cuda = |(q, k, v): &(Tensor, Tensor, Tensor)| {
        q.device().is_cuda()
            && q.dim(2).ok() == Some(1)
            && k.dtype() == q.dtype()
            && v.dtype() == q.dtype()
    };
    if chosen && parts.len() > 1 && parts.iter().all(decoding_on_cuda) {
        let q = Tensor::cat(&parts.iter().map(|(q, _, _)| q).collect::<Vec<_>>(), 0)?;
        let kvs: Vec<_> = parts.into_iter().map(|(_, k, v)| (k, v)).collect();
        let out = capstan_kernels::attention_decode_many(&q, &kvs, None)?;
        return (0..kvs.len())
            .map(|i| rows_of_heads(out.narrow(0, i, 1)?))
            .collect();
    }
    if !parts.iter().all(|(q, _, _)| on_kernel(q, None)) {
        return parts
            .into_iter()
            .map(|(q, k, v)| attend(&q, k, v, None, n_rep))
            .collect();
    }
    let calls = parts
        .into_iter()
        .map(|(q, k, v)| {
            let opts = causal_after_cache(&q, &k)?;
            Ok((q, k, v, opts))
        })
        .collect::<CResult<Vec<_>>>()?;
    capstan_kernels::attention_many(calls)?
        .into_iter()
        .map(rows_of_heads)
        .collect()
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
    let block = if q.device().is_cpu() {
        QUERY_BLOCK
    } else {
        GPU_QUERY_BLOCK
    };
    if mask.is_none() && s > block {
        // Causal blocks of queries: each block's products stop at its last visible key.
        let blocks = (0..s)
            .step_by(block)
            .map(|r0| {
                let n = block.min(s - r0);
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
            let scores = (scores / scale)?.to_dtype(DType::F32)?;
            // One query (a decoding step) sees every key; a block of them, built on the
            // device: query i sees keys ..= t - s + i.
            let scores = if s == 1 {
                scores
            } else {
                scores.broadcast_add(&causal_mask(s, t, scores.device())?)?
            };
            candle_nn::ops::softmax_last_dim(&scores)?
        }
    };
    probs.to_dtype(v.dtype())?.matmul(v)
}

/// The additive causal mask `(s, t)` of `s` queries ending a `t`-key sequence (query `i` sees
/// keys `..= t - s + i`), built on the device.
fn causal_mask(s: usize, t: usize, dev: &candle_core::Device) -> CResult<Tensor> {
    let last = Tensor::arange((t - s) as u32, t as u32, dev)?.reshape((s, 1))?;
    let keys = Tensor::arange(0u32, t as u32, dev)?.reshape((1, t))?;
    let seen = keys.broadcast_le(&last)?.to_dtype(DType::F32)?;
    // 1 -> 0, 0 -> MASKED.
    seen.affine(-(MASKED as f64), MASKED as f64)
}

/// Appends `k`, `v` `(b, kv_heads, s, d)` to this layer's cache (in place, as `alloc` says)
/// and returns views of all cached keys and values.
pub(super) fn append_kv(
    kv: &mut Option<LayerKv>,
    k: &Tensor,
    v: &Tensor,
    alloc: KvAlloc,
) -> CResult<(Tensor, Tensor)> {
    LayerKv::append(kv, k, v, None, alloc)?;
    let view = kv.as_ref().expect("appended above").view()?;
    Ok((view.k, view.v))
}

#[cfg(test)]
mod tests {
    use candle_core::{Device, Tensor};

    use super::{attend_heads, causal_mask, MASKED};

    #[test]
    fn device_causal_mask_is_the_causal_rule() {
        for (s, t) in [(1, 1), (3, 3), (4, 9), (1, 5)] {
            let got = causal_mask(s, t, &Device::Cpu)
                .unwrap()
                .to_vec2::<f32>()
                .unwrap();
            for (i, row) in got.iter().enumerate() {
                for (j, &m) in row.iter().enumerate() {
                    let want = if j <= t - s + i { 0.0 } else { MASKED };
                    assert_eq!(m, want, "s {s} t {t} query {i} key {j}");
                }
            }
        }
    }

    /// The masked path (what a GPU runs with that mask) equals the CPU's fused causal softmax.
    #[test]
    fn masked_and_fused_causal_attention_agree() {
        let dev = Device::Cpu;
        let (h, s, t, d) = (2, 5, 12, 8);
        let q = Tensor::randn(0f32, 1.0, (1, h, s, d), &dev).unwrap();
        let k = Tensor::randn(0f32, 1.0, (1, h, t, d), &dev).unwrap();
        let v = Tensor::randn(0f32, 1.0, (1, h, t, d), &dev).unwrap();
        let mask = causal_mask(s, t, &dev).unwrap();
        let masked = attend_heads(&q, &k, &v, Some(&mask)).unwrap();
        let fused = attend_heads(&q, &k, &v, None).unwrap();
        let diff = (masked - fused)
            .unwrap()
            .abs()
            .unwrap()
            .flatten_all()
            .unwrap()
            .max(0)
            .unwrap()
            .to_scalar::<f32>()
            .unwrap();
        assert!(diff < 1e-6, "{diff}");
    }
}
