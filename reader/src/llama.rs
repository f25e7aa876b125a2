//! Llama decoder (`LlamaForCausalLM`) and CEPE / CAPE (`LlamaForCausalContextLM`) in one model.
//!
//! - Llama 2: Touvron et al. 2023, <https://arxiv.org/abs/2307.09288>; reference code:
//!   Hugging Face transformers `models/llama/modeling_llama.py` (4.34 to 4.46).
//! - RoPE ABF (base 500,000): Xiong et al. 2023, "Effective Long-Context Scaling of Foundation
//!   Models", <https://arxiv.org/abs/2309.16039>; linear scaling (position interpolation):
//!   Chen et al. 2023, <https://arxiv.org/abs/2306.15595>.
//! - CEPE: Yen et al. 2024, "Long-Context Language Modeling with Parallel Context Encoding",
//!   <https://arxiv.org/abs/2402.16617>; reference code: princeton-nlp/CEPE
//!   `modeling_llama_flash.py` (`LlamaForCausalContextLM`, `LlamaCrossAttention`,
//!   `LlamaEncoder`).
//!
//! CEPE is the [`Llama`] model with an optional bidirectional [`Encoder`]-like Llama stack and
//! cross-attention blocks in the last `num_cross_attn_layers` decoder layers. Without encoder
//! context the model is plain Llama.
//!
//! The model is immutable; the KV cache, positions, padding masks and the encoder context (with
//! its projected cross-attention keys and values) live in a caller-owned [`Cache`].

use candle_core::{CpuStorage, DType, Device, InplaceOp1, Layout, Module, Tensor};
use candle_nn::{Embedding, Linear, RmsNorm, VarBuilder};

use capstan_kernels::{AttentionOptions, Pattern};

use crate::attention::AttentionPattern;
use crate::config::{LlamaConfig, RopeScaling};
use crate::error::{Error, Result};

/// Additive mask value for disallowed keys: `torch.finfo(float32).min`, as Hugging Face uses,
/// so that fully masked rows (left padding) stay finite.
const MASKED: f32 = f32::MIN;

/// Prompts longer than this are processed in chunks through the KV cache (mathematically the
/// same as one pass; bounds the activation memory).
const PREFILL_CHUNK: usize = 2048;

/// On the CPU, causal attention over a prompt chunk runs per head and per block of this many
/// queries (bounds the attention-score memory and skips keys no query of the block sees).
const QUERY_BLOCK: usize = 256;

type CResult<T> = candle_core::Result<T>;

/// RoPE tables, computed in f32 exactly as Hugging Face does (`LlamaRotaryEmbedding`):
/// `inv_freq = 1 / base^(arange(0, d, 2) / d)`, angle = (position / factor) * inv_freq.
#[derive(Debug, Clone)]
struct Rope {
    inv_freq: Vec<f32>,
    factor: f32,
}

impl Rope {
    fn new(cfg: &LlamaConfig) -> Result<Self> {
        let d = cfg.head_size();
        let base = cfg.rope_theta as f32;
        let inv_freq = (0..d)
            .step_by(2)
            .map(|i| 1f32 / base.powf(i as f32 / d as f32))
            .collect();
        let factor = match cfg.rope_scaling()? {
            RopeScaling::None => 1.0,
            RopeScaling::Linear(f) => f as f32,
        };
        Ok(Self { inv_freq, factor })
    }

    /// cos and sin of shape `(rows, seq, d/2)` (or `(seq, d/2)` for one shared row).
    fn cos_sin(
        &self,
        positions: &[Vec<u32>],
        dtype: DType,
        dev: &Device,
    ) -> CResult<(Tensor, Tensor)> {
        let half = self.inv_freq.len();
        let rows = positions.len();
        let seq = positions.first().map_or(0, |p| p.len());
        let mut cos = Vec::with_capacity(rows * seq * half);
        let mut sin = Vec::with_capacity(rows * seq * half);
        for row in positions {
            for &p in row {
                let t = if self.factor == 1.0 {
                    p as f32
                } else {
                    p as f32 / self.factor
                };
                for &f in &self.inv_freq {
                    let a = t * f;
                    cos.push(a.cos());
                    sin.push(a.sin());
                }
            }
        }
        let shape = if rows == 1 {
            vec![seq, half]
        } else {
            vec![rows, seq, half]
        };
        let cos = Tensor::from_vec(cos, shape.as_slice(), dev)?.to_dtype(dtype)?;
        let sin = Tensor::from_vec(sin, shape.as_slice(), dev)?.to_dtype(dtype)?;
        Ok((cos, sin))
    }
}

fn linear(in_dim: usize, out_dim: usize, bias: bool, vb: VarBuilder) -> CResult<Linear> {
    candle_nn::linear_b(in_dim, out_dim, bias, vb)
}

/// In place on f32 scores `(b, h, s, t)`: `softmax(scores * scale)` over the causal keys of
/// each query row (row `i` sees keys `..= t - s + i`), zero beyond. What scaling, adding the
/// causal mask and `softmax_last_dim` compute, in one pass over cache-resident rows, without
/// the mask tensor or the exponentials of masked keys.
struct CausalSoftmax {
    scale: f32,
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
        let avx2 = has_avx2();
        for (r, row) in data[o1..o2].chunks_mut(t).enumerate() {
            let (live, masked) = row.split_at_mut(t - s + r % s + 1);
            #[cfg(target_arch = "x86_64")]
            if avx2 {
                // SAFETY: the CPU supports AVX2 and FMA.
                unsafe { softmax_avx2(live, self.scale) };
                masked.fill(0.0);
                continue;
            }
            let _ = avx2;
            softmax_generic(live, self.scale);
            masked.fill(0.0);
        }
        Ok(())
    }
}

fn has_avx2() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// [`softmax_generic`] compiled for AVX2 + FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn softmax_avx2(row: &mut [f32], scale: f32) {
    softmax_generic(row, scale)
}

/// `softmax(row * scale)` in place, written so that every pass vectorises (eight lanes).
#[inline(always)]
fn softmax_generic(row: &mut [f32], scale: f32) {
    row.iter_mut().for_each(|x| *x *= scale);
    let mut lanes = [f32::NEG_INFINITY; 8];
    let mut chunks = row.chunks_exact(8);
    for c in &mut chunks {
        for (m, &x) in lanes.iter_mut().zip(c) {
            if x > *m {
                *m = x;
            }
        }
    }
    let max = chunks
        .remainder()
        .iter()
        .chain(&lanes)
        .fold(f32::NEG_INFINITY, |m, &x| if x > m { x } else { m });
    row.iter_mut().for_each(|x| *x = exp(*x - max));
    let mut lanes = [0f32; 8];
    let mut chunks = row.chunks_exact(8);
    for c in &mut chunks {
        for (a, &x) in lanes.iter_mut().zip(c) {
            *a += x;
        }
    }
    let sum = lanes.iter().sum::<f32>() + chunks.remainder().iter().sum::<f32>();
    row.iter_mut().for_each(|x| *x /= sum);
}

/// `exp` for `x <= 88`, vectorisable, relative error below 1e-7 (Cephes' `expf`:
/// `x = n ln 2 + r`, a degree-6 polynomial in `r`, `2^n` from bits); as the indexer's BERT.
#[inline(always)]
fn exp(x: f32) -> f32 {
    const ROUND: f32 = 12_582_912.0; // 1.5 * 2^23: adding it rounds to an integer
    let x = x.clamp(-87.336_54, 88.37626);
    let n = (x * std::f32::consts::LOG2_E + ROUND) - ROUND;
    let r = x - n * 0.693_359_4 - n * -2.121_944_4e-4;
    let p = 1.987_569_1e-4;
    let p = p * r + 1.398_199_9e-3;
    let p = p * r + 8.333_452e-3;
    let p = p * r + 4.166_579_6e-2;
    let p = p * r + 1.666_666_5e-1;
    let p = p * r + 0.5;
    let p = p * r * r + r + 1.0;
    p * f32::from_bits(((n as i32 + 127) << 23) as u32)
}

/// `repeat_kv` of the reference: `(b, kv, t, d) -> (b, kv * n_rep, t, d)`, head `i` using kv
/// head `i / n_rep`.
fn repeat_kv(x: Tensor, n_rep: usize) -> CResult<Tensor> {
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
fn attend(
    q: &Tensor,
    k: Tensor,
    v: Tensor,
    mask: Option<&Tensor>,
    n_rep: usize,
) -> CResult<Tensor> {
    let (b, h, s, d) = q.dims4()?;
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
fn attend_heads(q: &Tensor, k: &Tensor, v: &Tensor, mask: Option<&Tensor>) -> CResult<Tensor> {
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

/// Appends `k`, `v` `(b, kv_heads, s, d)` to this layer's cache and returns views of all cached
/// keys and values. The cache is a buffer with room to spare, written in place (no copy of the
/// whole cache per step); it grows by half when full.
fn append_kv(kv: &mut Option<LayerKv>, k: &Tensor, v: &Tensor) -> CResult<(Tensor, Tensor)> {
    let s = k.dim(2)?;
    let (len, cap) = kv
        .as_ref()
        .map_or((0, 0), |c| (c.len, c.k.dim(2).unwrap_or(0)));
    let need = len + s;
    match kv {
        Some(c) if need <= cap => {
            c.k.slice_set(k, 2, len)?;
            c.v.slice_set(v, 2, len)?;
            c.len = need;
        }
        _ => {
            let new_cap = (need + need / 2).next_multiple_of(64);
            let grow = |old: Option<&Tensor>, new: &Tensor| -> CResult<Tensor> {
                let (b, h, _, d) = new.dims4()?;
                let pad = Tensor::zeros((b, h, new_cap - need, d), new.dtype(), new.device())?;
                match old {
                    Some(o) => Tensor::cat(&[&o.narrow(2, 0, len)?, new, &pad], 2),
                    None => Tensor::cat(&[new, &pad], 2),
                }
            };
            let old = kv.take();
            *kv = Some(LayerKv {
                k: grow(old.as_ref().map(|c| &c.k), k)?,
                v: grow(old.as_ref().map(|c| &c.v), v)?,
                k_grouped: None,
                start: 0,
                len: need,
            });
        }
    }
    let c = kv.as_ref().expect("set above");
    Ok((c.k.narrow(2, 0, need)?, c.v.narrow(2, 0, need)?))
}

/// Self-attention with RoPE and grouped-query heads (`LlamaAttention`).
#[derive(Debug, Clone)]
struct SelfAttention {
    q_proj: Linear,
    k_proj: Linear,
    v_proj: Linear,
    o_proj: Linear,
    n_heads: usize,
    n_kv_heads: usize,
    head_dim: usize,
}

impl SelfAttention {
    fn load(vb: VarBuilder, cfg: &LlamaConfig) -> CResult<Self> {
        let (h, nh, nkv, hd) = (
            cfg.hidden_size,
            cfg.num_attention_heads,
            cfg.kv_heads(),
            cfg.head_size(),
        );
        Ok(Self {
            q_proj: linear(h, nh * hd, cfg.attention_bias, vb.pp("q_proj"))?,
            k_proj: linear(h, nkv * hd, cfg.attention_bias, vb.pp("k_proj"))?,
            v_proj: linear(h, nkv * hd, cfg.attention_bias, vb.pp("v_proj"))?,
            o_proj: linear(nh * hd, h, cfg.attention_bias, vb.pp("o_proj"))?,
            n_heads: nh,
            n_kv_heads: nkv,
            head_dim: hd,
        })
    }

    /// `kv` holds this layer's cached keys/values (post-RoPE) and is extended in place.
    /// `pattern`: the decoder's per-layer attention (`None`: the reference path, as for the
    /// encoder).
    fn forward(
        &self,
        x: &Tensor,
        rope: &(Tensor, Tensor),
        mask: Option<&Tensor>,
        kv: &mut Option<LayerKv>,
        pattern: Option<&LayerAttention>,
    ) -> CResult<Tensor> {
        let (b, s, _) = x.dims3()?;
        let heads = |t: Tensor, n: usize| -> CResult<Tensor> {
            t.reshape((b, s, n, self.head_dim))?
                .transpose(1, 2)?
                .contiguous()
        };
        let q_raw = heads(self.q_proj.forward(x)?, self.n_heads)?;
        let k_raw = heads(self.k_proj.forward(x)?, self.n_kv_heads)?;
        let v = heads(self.v_proj.forward(x)?, self.n_kv_heads)?;
        let q = candle_nn::rotary_emb::rope(&q_raw, &rope.0, &rope.1)?;
        let k = candle_nn::rotary_emb::rope(&k_raw, &rope.0, &rope.1)?;
        let Some(la) = pattern.filter(|la| la.use_kernels) else {
            let (k, v) = match pattern {
                Some(_) => append_kv(kv, &k, &v)?,
                // The encoder: nothing to cache.
                None => (k, v),
            };
            let out = attend(&q, k, v, mask, self.n_heads / self.n_kv_heads)?;
            return self.o_proj.forward(&out);
        };
        // SelfExtend: the query and key rotated at grouped positions as well.
        let grouped = match &la.grouped_rope {
            Some((rq, rk)) => Some((
                candle_nn::rotary_emb::rope(&q_raw, &rq.0, &rq.1)?,
                candle_nn::rotary_emb::rope(&k_raw, &rk.0, &rk.1)?,
            )),
            None => None,
        };
        let (k, v, kg, start) = match kv.take() {
            Some(c) => {
                let kg = match (&c.k_grouped, &grouped) {
                    (Some(pk), Some((_, gk))) => Some(Tensor::cat(&[pk, gk], 2)?),
                    _ => grouped.as_ref().map(|(_, gk)| gk.clone()),
                };
                (
                    Tensor::cat(&[&c.k, &k], 2)?,
                    Tensor::cat(&[&c.v, &v], 2)?,
                    kg,
                    c.start,
                )
            }
            None => (k, v, grouped.as_ref().map(|(_, gk)| gk.clone()), 0),
        };
        let len = k.dim(2)?;
        // Attention over the full new chunk first, then the cache keeps only what later
        // queries can see (Zebra local layers: the last `window` keys).
        let key_mask = match &la.key_mask {
            Some(m) => Some(m.narrow(1, start, len)?),
            None => None,
        };
        let opts = AttentionOptions {
            pattern: la.pattern.clone(),
            q_pos0: la.q_pos0 as u64,
            k_pos0: start as u64,
            scale: None,
            q_grouped: grouped.as_ref().map(|(gq, _)| gq.clone()),
            k_grouped: kg.clone(),
            key_mask,
        };
        let out = capstan_kernels::attention(&q, &k, &v, opts)?;
        let out = out
            .transpose(1, 2)?
            .reshape((b, s, self.n_heads * self.head_dim))?;
        let drop = la.kept.map_or(0, |keep| len.saturating_sub(keep));
        let trim = |t: Tensor| -> CResult<Tensor> {
            if drop == 0 {
                Ok(t)
            } else {
                t.narrow(2, drop, len - drop)?.contiguous()
            }
        };
        *kv = Some(LayerKv {
            k: trim(k)?,
            v: trim(v)?,
            k_grouped: kg.map(trim).transpose()?,
            start: start + drop,
            len: len - drop,
        });
        self.o_proj.forward(&out)
    }
}

/// One layer's KV cache: keys (post-RoPE), values, SelfExtend's grouped keys, and the index of
/// the first cached position (local layers drop old keys).
#[derive(Debug)]
struct LayerKv {
    /// `(b, kv_heads, capacity, d)`: on the reference path a buffer of which the first `len`
    /// positions are filled ([`append_kv`]); on the kernels' path exactly `len` positions.
    k: Tensor,
    v: Tensor,
    k_grouped: Option<Tensor>,
    start: usize,
    len: usize,
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

/// How one decoder layer attends in this forward pass.
#[derive(Debug, Clone)]
struct LayerAttention {
    /// Run the kernels (a non-full pattern, or a CUDA device); else the reference path.
    use_kernels: bool,
    pattern: Pattern,
    /// Keys kept in the cache after this pass (`None`: all).
    kept: Option<usize>,
    /// Absolute index of the first query row.
    q_pos0: usize,
    /// SelfExtend: RoPE tables at the grouped query and key positions.
    grouped_rope: Option<((Tensor, Tensor), (Tensor, Tensor))>,
    /// `(b, cached + new)` u8 key padding mask, when any row is padded.
    key_mask: Option<Tensor>,
}

/// Cross-attention to the encoder states (`LlamaCrossAttention` of the CEPE reference): its own
/// RMSNorm on the decoder states, no RoPE, no gate, no causal mask; only encoder padding is
/// masked. Keys/values come from `encoder_hidden_size`-wide states.
#[derive(Debug, Clone)]
struct CrossAttention {
    layernorm: RmsNorm,
    q_proj: Linear,
    k_proj: Linear,
    v_proj: Linear,
    o_proj: Linear,
    n_heads: usize,
    n_kv_heads: usize,
    head_dim: usize,
}

impl CrossAttention {
    fn load(vb: VarBuilder, cfg: &LlamaConfig, enc_hidden: usize) -> CResult<Self> {
        let h = cfg.hidden_size;
        let (nh, nkv) = (cfg.num_attention_heads, cfg.kv_heads());
        // The reference uses hidden_size / num_heads here, never `head_dim`.
        let hd = h / nh;
        Ok(Self {
            layernorm: candle_nn::rms_norm(h, cfg.rms_norm_eps, vb.pp("layernorm"))?,
            q_proj: linear(h, nh * hd, false, vb.pp("q_proj"))?,
            k_proj: linear(enc_hidden, nkv * hd, false, vb.pp("k_proj"))?,
            v_proj: linear(enc_hidden, nkv * hd, false, vb.pp("v_proj"))?,
            o_proj: linear(nh * hd, h, false, vb.pp("o_proj"))?,
            n_heads: nh,
            n_kv_heads: nkv,
            head_dim: hd,
        })
    }

    /// Keys and values of the encoder states, `(b, kv_heads, n, d)` each; computed once per
    /// request.
    fn project_kv(&self, enc: &Tensor) -> CResult<(Tensor, Tensor)> {
        let (b, n, _) = enc.dims3()?;
        let heads = |t: Tensor| -> CResult<Tensor> {
            t.reshape((b, n, self.n_kv_heads, self.head_dim))?
                .transpose(1, 2)?
                .contiguous()
        };
        Ok((
            heads(self.k_proj.forward(enc)?)?,
            heads(self.v_proj.forward(enc)?)?,
        ))
    }

    fn forward(&self, x: &Tensor, ctx: &CrossLayerState, mask: &Tensor) -> CResult<Tensor> {
        let (b, s, _) = x.dims3()?;
        let x = self.layernorm.forward(x)?;
        let q = self
            .q_proj
            .forward(&x)?
            .reshape((b, s, self.n_heads, self.head_dim))?
            .transpose(1, 2)?
            .contiguous()?;
        let out = attend(
            &q,
            ctx.k.clone(),
            ctx.v.clone(),
            Some(mask),
            self.n_heads / self.n_kv_heads,
        )?;
        self.o_proj.forward(&out)
    }
}

/// SwiGLU feed-forward (`LlamaMLP`).
#[derive(Debug, Clone)]
struct Mlp {
    gate_proj: Linear,
    up_proj: Linear,
    down_proj: Linear,
}

impl Mlp {
    fn load(vb: VarBuilder, cfg: &LlamaConfig) -> CResult<Self> {
        let (h, i, b) = (cfg.hidden_size, cfg.intermediate_size, cfg.mlp_bias);
        Ok(Self {
            gate_proj: linear(h, i, b, vb.pp("gate_proj"))?,
            up_proj: linear(h, i, b, vb.pp("up_proj"))?,
            down_proj: linear(i, h, b, vb.pp("down_proj"))?,
        })
    }

    fn forward(&self, x: &Tensor) -> CResult<Tensor> {
        let gate = candle_nn::ops::silu(&self.gate_proj.forward(x)?)?;
        self.down_proj.forward(&(gate * self.up_proj.forward(x)?)?)
    }
}

/// Pre-norm transformer layer (`LlamaDecoderLayer`), optionally with cross-attention between
/// self-attention and the MLP.
#[derive(Debug, Clone)]
struct Layer {
    input_layernorm: RmsNorm,
    self_attn: SelfAttention,
    cross_attn: Option<CrossAttention>,
    post_attention_layernorm: RmsNorm,
    mlp: Mlp,
}

impl Layer {
    fn load(vb: VarBuilder, cfg: &LlamaConfig, cross: Option<usize>) -> CResult<Self> {
        let eps = cfg.rms_norm_eps;
        let cross_attn = match cross {
            Some(enc_hidden) => Some(CrossAttention::load(vb.pp("cross_attn"), cfg, enc_hidden)?),
            None => None,
        };
        Ok(Self {
            input_layernorm: candle_nn::rms_norm(cfg.hidden_size, eps, vb.pp("input_layernorm"))?,
            self_attn: SelfAttention::load(vb.pp("self_attn"), cfg)?,
            cross_attn,
            post_attention_layernorm: candle_nn::rms_norm(
                cfg.hidden_size,
                eps,
                vb.pp("post_attention_layernorm"),
            )?,
            mlp: Mlp::load(vb.pp("mlp"), cfg)?,
        })
    }

    fn forward(
        &self,
        x: &Tensor,
        rope: &(Tensor, Tensor),
        mask: Option<&Tensor>,
        kv: &mut Option<LayerKv>,
        cross: Option<(&CrossLayerState, &CrossContext)>,
        pattern: Option<&LayerAttention>,
    ) -> CResult<Tensor> {
        let h = self.input_layernorm.forward(x)?;
        let mut x = (x + self.self_attn.forward(&h, rope, mask, kv, pattern)?)?;
        if let (Some(ca), Some((state, ctx))) = (&self.cross_attn, cross) {
            let mut h = ca.forward(&x, state, &ctx.mask)?;
            if let Some(gate) = &ctx.row_gate {
                h = h.broadcast_mul(gate)?;
            }
            x = (x + h)?;
        }
        let h = self
            .mlp
            .forward(&self.post_attention_layernorm.forward(&x)?)?;
        x + h
    }
}

/// A stack of Llama layers with embeddings and final norm: the decoder's body, or CEPE's
/// bidirectional encoder (`LlamaEncoder`, a `LlamaModel` with `is_decoder = false`).
#[derive(Debug, Clone)]
struct Stack {
    embed_tokens: Embedding,
    layers: Vec<Layer>,
    norm: RmsNorm,
    rope: Rope,
}

impl Stack {
    fn load(
        vb: VarBuilder,
        cfg: &LlamaConfig,
        cross_from: usize,
        enc_hidden: Option<usize>,
    ) -> Result<Self> {
        let load = || -> CResult<(Embedding, Vec<Layer>, RmsNorm)> {
            let embed_tokens =
                candle_nn::embedding(cfg.vocab_size, cfg.hidden_size, vb.pp("embed_tokens"))?;
            let layers = (0..cfg.num_hidden_layers)
                .map(|i| {
                    let cross = enc_hidden.filter(|_| i >= cross_from);
                    Layer::load(vb.pp(format!("layers.{i}")), cfg, cross)
                })
                .collect::<CResult<Vec<_>>>()?;
            let norm = candle_nn::rms_norm(cfg.hidden_size, cfg.rms_norm_eps, vb.pp("norm"))?;
            Ok((embed_tokens, layers, norm))
        };
        let (embed_tokens, layers, norm) = load().map_err(Error::from_load)?;
        Ok(Self {
            embed_tokens,
            layers,
            norm,
            rope: Rope::new(cfg)?,
        })
    }
}

/// Per-layer cross-attention keys and values of the encoder context.
#[derive(Debug, Clone)]
struct CrossLayerState {
    k: Tensor,
    v: Tensor,
}

/// The encoder context of a request: computed once, used at every decoding step.
#[derive(Debug, Clone)]
struct CrossContext {
    /// Indexed by decoder layer; `None` for layers without cross-attention.
    layers: Vec<Option<CrossLayerState>>,
    /// Additive f32 padding mask `(b, 1, 1, n)`.
    mask: Tensor,
    /// `(b, 1, 1)`: 0 for rows without any encoder token (they then run as plain Llama).
    row_gate: Option<Tensor>,
}

/// Caller-owned decoding state: self-attention KV cache, per-row positions and padding, and the
/// encoder context of CEPE models.
#[derive(Debug, Clone)]
pub struct Cache {
    kv: Vec<Option<LayerKv>>,
    cross: Option<CrossContext>,
    /// Per row, per cached position: real token (true) or padding.
    key_mask: Vec<Vec<bool>>,
    /// Per row, the number of real tokens so far (the next position id).
    real: Vec<u32>,
    seq_len: usize,
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

    fn batch(&self) -> Option<usize> {
        if self.seq_len > 0 || self.cross.is_some() {
            Some(self.key_mask.len())
        } else {
            None
        }
    }

    fn ensure_batch(&mut self, b: usize) -> Result<()> {
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

/// Which model a checkpoint holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Architecture {
    /// `LlamaForCausalLM`.
    Llama,
    /// `LlamaForCausalContextLM` (CEPE): Llama plus encoder and cross-attention.
    Cepe,
}

impl Architecture {
    /// From config.json's `architectures` (empty means `LlamaForCausalLM`).
    pub fn from_config(cfg: &LlamaConfig) -> Result<Self> {
        match cfg.architectures.first().map(String::as_str) {
            None | Some("LlamaForCausalLM") if !cfg.is_cepe() => Ok(Self::Llama),
            None | Some("LlamaForCausalContextLM") if cfg.is_cepe() => Ok(Self::Cepe),
            Some("LlamaForCausalContextLM") => Err(Error::UnsupportedConfig {
                field: "do_cross_attention",
                value: "false or no encoder_config in a LlamaForCausalContextLM".into(),
            }),
            _ => Err(Error::UnsupportedArchitecture {
                found: cfg.architectures.clone(),
            }),
        }
    }
}

/// Llama causal LM, optionally with CEPE's context encoder and cross-attention.
#[derive(Debug, Clone)]
pub struct Llama {
    decoder: Stack,
    lm_head: Linear,
    encoder: Option<Stack>,
    cfg: LlamaConfig,
    arch: Architecture,
    attention: AttentionPattern,
    device: Device,
    dtype: DType,
}

impl Llama {
    /// Loads the weights under `vb` (checkpoint names: `model.*`, `lm_head.weight`, and for
    /// CEPE `encoder.*`). Errors name the missing tensor or the mismatched shape.
    pub fn load(vb: VarBuilder, cfg: &LlamaConfig) -> Result<Self> {
        cfg.validate()?;
        let arch = Architecture::from_config(cfg)?;
        let attention = match &cfg.capstan_attention {
            Some(p) => p.parse::<AttentionPattern>()?,
            None => AttentionPattern::Full,
        };
        attention.validate(cfg)?;
        let (cross_from, enc_hidden) = match (arch, &cfg.encoder_config) {
            (Architecture::Cepe, Some(enc)) => (
                cfg.num_hidden_layers - cfg.num_cross_attn_layers,
                Some(cfg.encoder_hidden_size.unwrap_or(enc.hidden_size)),
            ),
            _ => (cfg.num_hidden_layers, None),
        };
        let decoder = Stack::load(vb.pp("model"), cfg, cross_from, enc_hidden)?;
        let lm_head = if cfg.tie_word_embeddings {
            Linear::new(decoder.embed_tokens.embeddings().clone(), None)
        } else {
            candle_nn::linear_no_bias(cfg.hidden_size, cfg.vocab_size, vb.pp("lm_head"))
                .map_err(Error::from_load)?
        };
        let encoder = match (arch, &cfg.encoder_config) {
            (Architecture::Cepe, Some(enc)) => {
                Some(Stack::load(vb.pp("encoder"), enc, usize::MAX, None)?)
            }
            _ => None,
        };
        Ok(Self {
            decoder,
            lm_head,
            encoder,
            cfg: cfg.clone(),
            arch,
            attention,
            device: vb.device().clone(),
            dtype: vb.dtype(),
        })
    }

    /// The model's config.
    pub fn config(&self) -> &LlamaConfig {
        &self.cfg
    }

    /// Llama or CEPE.
    pub fn architecture(&self) -> Architecture {
        self.arch
    }

    /// The decoder's self-attention pattern.
    pub fn attention(&self) -> AttentionPattern {
        self.attention
    }

    /// Selects the decoder's self-attention pattern (overriding config.json's
    /// `capstan_attention`). Use a fresh [`Cache`] afterwards.
    pub fn set_attention(&mut self, pattern: AttentionPattern) -> Result<()> {
        pattern.validate(&self.cfg)?;
        self.attention = pattern;
        Ok(())
    }

    /// Device of the weights.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// Dtype of the weights and activations (logits are always returned as f32).
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// Runs the decoder on `input_ids` `(b, s)` after what `cache` holds and returns the f32
    /// logits of every new position, `(b, s, vocab)`.
    ///
    /// `attention_mask` `(b, s)` (1 = token, 0 = padding) marks left padding, as in Hugging
    /// Face's `generate`: position ids are `cumsum(mask) - 1` per row and padded keys are
    /// masked.
    pub fn forward(
        &self,
        input_ids: &Tensor,
        attention_mask: Option<&Tensor>,
        cache: &mut Cache,
    ) -> Result<Tensor> {
        self.forward_impl(input_ids, attention_mask, cache, true)
    }

    /// As [`Llama::forward`], but only the last position's logits, `(b, vocab)`.
    pub fn forward_last(
        &self,
        input_ids: &Tensor,
        attention_mask: Option<&Tensor>,
        cache: &mut Cache,
    ) -> Result<Tensor> {
        Ok(self
            .forward_impl(input_ids, attention_mask, cache, false)?
            .squeeze(1)?)
    }

    fn forward_impl(
        &self,
        input_ids: &Tensor,
        attention_mask: Option<&Tensor>,
        cache: &mut Cache,
        all: bool,
    ) -> Result<Tensor> {
        let (b, s) = input_ids.dims2()?;
        if s == 0 {
            return Err(Error::invalid("empty input_ids"));
        }
        let ids = input_ids.to_dtype(DType::U32)?;
        if let Some(max) = ids.flatten_all()?.to_vec1::<u32>()?.into_iter().max() {
            if max as usize >= self.cfg.vocab_size {
                return Err(Error::invalid(format!(
                    "token id {max} out of range (vocab_size {})",
                    self.cfg.vocab_size
                )));
            }
        }
        let mask: Vec<Vec<bool>> = match attention_mask {
            Some(m) => {
                if m.dims() != [b, s] {
                    return Err(Error::invalid(format!(
                        "attention_mask shape {:?}, expected [{b}, {s}]",
                        m.dims()
                    )));
                }
                m.to_dtype(DType::U32)?
                    .to_vec2::<u32>()?
                    .into_iter()
                    .map(|r| r.into_iter().map(|v| v != 0).collect())
                    .collect()
            }
            None => vec![vec![true; s]; b],
        };
        cache.ensure_batch(b)?;
        let mut outs = Vec::new();
        let mut start = 0;
        while start < s {
            let len = PREFILL_CHUNK.min(s - start);
            let last = start + len == s;
            let chunk_mask: Vec<Vec<bool>> = mask
                .iter()
                .map(|r| r[start..start + len].to_vec())
                .collect();
            let out = self.forward_chunk(
                &ids.narrow(1, start, len)?,
                &chunk_mask,
                cache,
                all || !last,
            )?;
            if all || last {
                outs.push(out);
            }
            start += len;
        }
        Ok(if outs.len() == 1 {
            outs.remove(0)
        } else {
            Tensor::cat(&outs, 1)?
        })
    }

    fn forward_chunk(
        &self,
        ids: &Tensor,
        mask: &[Vec<bool>],
        cache: &mut Cache,
        all: bool,
    ) -> Result<Tensor> {
        let (b, s) = ids.dims2()?;
        let past = cache.seq_len;
        let mut positions = vec![Vec::with_capacity(s); b];
        for r in 0..b {
            for &m in &mask[r] {
                if m {
                    positions[r].push(cache.real[r]);
                    cache.real[r] += 1;
                } else {
                    positions[r].push(1);
                }
            }
            cache.key_mask[r].extend_from_slice(&mask[r]);
        }
        cache.seq_len += s;
        let total = past + s;
        let any_pad = cache.key_mask.iter().any(|r| r.iter().any(|m| !m));
        // Without padding the layers run causal attention without a mask tensor.
        let attn_mask = if any_pad {
            let mut m = Vec::with_capacity(b * s * total);
            for r in 0..b {
                for i in 0..s {
                    for j in 0..total {
                        let ok = j <= past + i && cache.key_mask[r][j];
                        m.push(if ok { 0f32 } else { MASKED });
                    }
                }
            }
            Some(Tensor::from_vec(m, (b, 1, s, total), &self.device)?)
        } else {
            None
        };
        let rope = if b > 1 && positions.iter().all(|p| *p == positions[0]) {
            self.decoder
                .rope
                .cos_sin(&positions[..1], self.dtype, &self.device)?
        } else {
            self.decoder
                .rope
                .cos_sin(&positions, self.dtype, &self.device)?
        };
        let kernel_key_mask = if any_pad {
            let m: Vec<u8> = cache
                .key_mask
                .iter()
                .flat_map(|r| r.iter().map(|&k| k as u8))
                .collect();
            Some(Tensor::from_vec(m, (b, total), &self.device)?)
        } else {
            None
        };
        let grouped_rope = match self.attention {
            AttentionPattern::SelfExtend { group, window } => {
                let shift = (window - window / group) as u32;
                let g = group as u32;
                let qp: Vec<Vec<u32>> = positions
                    .iter()
                    .map(|r| r.iter().map(|p| p / g + shift).collect())
                    .collect();
                let kp: Vec<Vec<u32>> = positions
                    .iter()
                    .map(|r| r.iter().map(|p| p / g).collect())
                    .collect();
                let rope = &self.decoder.rope;
                Some((
                    rope.cos_sin(&qp, self.dtype, &self.device)?,
                    rope.cos_sin(&kp, self.dtype, &self.device)?,
                ))
            }
            _ => None,
        };
        let n_heads = self.cfg.num_attention_heads;
        let on_gpu = self.device.is_cuda();
        let mut x = self.decoder.embed_tokens.forward(ids)?;
        for (i, layer) in self.decoder.layers.iter().enumerate() {
            let cross = cache
                .cross
                .as_ref()
                .and_then(|c| c.layers[i].as_ref().map(|st| (st, c)));
            let full = self.attention.is_full(i);
            let la = LayerAttention {
                use_kernels: !full || on_gpu,
                pattern: self.attention.layer_pattern(i, n_heads),
                kept: self.attention.kept_keys(i, n_heads),
                q_pos0: past,
                grouped_rope: if full { None } else { grouped_rope.clone() },
                key_mask: kernel_key_mask.clone(),
            };
            x = layer.forward(
                &x,
                &rope,
                attn_mask.as_ref(),
                &mut cache.kv[i],
                cross,
                Some(&la),
            )?;
        }
        if !all {
            x = x.narrow(1, s - 1, 1)?.contiguous()?;
        }
        let x = self.decoder.norm.forward(&x)?;
        Ok(self.lm_head.forward(&x)?.to_dtype(DType::F32)?)
    }

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
        let rope = enc.rope.cos_sin(&positions, self.dtype, &self.device)?;
        let mut x = enc.embed_tokens.forward(&ids)?;
        for layer in &enc.layers {
            x = layer.forward(&x, &rope, Some(&add_mask), &mut None, None, None)?;
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
    /// decodes as plain Llama.
    pub fn set_encoder_context(
        &self,
        rows: &[Vec<Vec<u32>>],
        pad_id: u32,
        cache: &mut Cache,
    ) -> Result<()> {
        cache.ensure_batch(rows.len())?;
        let b = rows.len();
        let n_ctx = rows.iter().map(Vec::len).max().unwrap_or(0).max(1);
        let mut chunks = Vec::with_capacity(b * n_ctx);
        for row in rows {
            chunks.extend(row.iter().cloned());
            chunks.extend(std::iter::repeat_n(Vec::new(), n_ctx - row.len()));
        }
        let enc = self.encode_chunks(&chunks, pad_id)?;
        let (_, len, d) = enc.hidden_states.dims3()?;
        let states = enc.hidden_states.reshape((b, n_ctx * len, d))?;
        let flat: Vec<Vec<bool>> = enc.mask.chunks(n_ctx).map(|c| c.concat()).collect();
        let add: Vec<f32> = flat
            .iter()
            .flat_map(|r| r.iter().map(|&m| if m { 0.0 } else { MASKED }))
            .collect();
        let mask = Tensor::from_vec(add, (b, 1, 1, n_ctx * len), &self.device)?;
        let gates: Vec<f32> = flat
            .iter()
            .map(|r| if r.iter().any(|&m| m) { 1.0 } else { 0.0 })
            .collect();
        let row_gate = if gates.iter().all(|&g| g == 1.0) {
            None
        } else {
            Some(Tensor::from_vec(gates, (b, 1, 1), &self.device)?.to_dtype(self.dtype)?)
        };
        let layers = self
            .decoder
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
            .collect::<CResult<Vec<_>>>()?;
        cache.cross = Some(CrossContext {
            layers,
            mask,
            row_gate,
        });
        Ok(())
    }
}
