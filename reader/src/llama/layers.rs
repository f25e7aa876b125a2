//! The layers of the Llama stack: self-attention, CEPE cross-attention, SwiGLU MLP.

use std::borrow::Cow;

use candle_core::{Module, Tensor};
use candle_nn::RmsNorm;
use rayon::prelude::*;

use capstan_kernels::{AttentionOptions, Pattern};

use super::attend::{append_kv, attend, attend_many};
use super::cache::{CrossContext, CrossLayerState, KvAlloc, LayerKv, Span};
use super::rope::{Rope, Rotary};
use super::weights::{Proj, ProjGroup, TokenEmbedding, Weights};
use super::CResult;
use crate::config::LlamaConfig;
use crate::error::{Error, Result};

/// Self-attention with RoPE and grouped-query heads (`LlamaAttention`).
#[derive(Debug, Clone)]
pub(super) struct SelfAttention {
    /// q, k and v.
    pub(super) qkv: ProjGroup,
    pub(super) o_proj: Proj,
    pub(super) n_heads: usize,
    pub(super) n_kv_heads: usize,
    pub(super) head_dim: usize,
}

impl SelfAttention {
    pub(super) fn load(vb: Weights, cfg: &LlamaConfig) -> CResult<Self> {
        let (h, nh, nkv, hd) = (
            cfg.hidden_size,
            cfg.num_attention_heads,
            cfg.kv_heads(),
            cfg.head_size(),
        );
        Ok(Self {
            qkv: ProjGroup::new(vec![
                vb.pp("q_proj").proj(h, nh * hd, cfg.qkv_bias())?,
                vb.pp("k_proj").proj(h, nkv * hd, cfg.qkv_bias())?,
                vb.pp("v_proj").proj(h, nkv * hd, cfg.qkv_bias())?,
            ]),
            o_proj: vb.pp("o_proj").proj(nh * hd, h, cfg.attention_bias)?,
            n_heads: nh,
            n_kv_heads: nkv,
            head_dim: hd,
        })
    }

    /// Queries, keys and values of `x` `(b, s, hidden)` as `(b, heads, s, head_dim)`, before
    /// RoPE.
    /// `spans`: a packed step's sequences ([`ProjGroup::forward_spans`]).
    fn project_heads(
        &self,
        x: &Tensor,
        spans: Option<&[Span]>,
    ) -> CResult<(Tensor, Tensor, Tensor)> {
        let (b, s, _) = x.dims3()?;
        let heads = |t: &Tensor, n: usize| -> CResult<Tensor> {
            t.reshape((b, s, n, self.head_dim))?
                .transpose(1, 2)?
                .contiguous()
        };
        let qkv = match spans {
            Some(spans) => self.qkv.forward_spans(x, spans)?,
            None => self.qkv.forward(x)?,
        };
        Ok((
            heads(&qkv[0], self.n_heads)?,
            heads(&qkv[1], self.n_kv_heads)?,
            heads(&qkv[2], self.n_kv_heads)?,
        ))
    }

    /// `kv` holds this layer's cached keys/values (post-RoPE) and is extended in place.
    /// `pattern`: the decoder's per-layer attention (`None`: the reference path, as for the
    /// encoder).
    /// `spans`: the rows are several sequences' (the branches of
    /// [`super::Llama::forward_branches`]): each projects as a sequence of its own length does
    /// ([`ProjGroup::forward_spans`]); the reference path only.
    pub(super) fn forward(
        &self,
        x: &Tensor,
        rope: &Rotary,
        mask: Option<&Tensor>,
        kv: &mut Option<LayerKv>,
        pattern: Option<&LayerAttention>,
        spans: Option<&[Span]>,
    ) -> CResult<Tensor> {
        let (b, s, _) = x.dims3()?;
        let (q_raw, k_raw, v) = self.project_heads(x, spans)?;
        let (q, k) = rope.apply(&q_raw, &k_raw)?;
        let Some(la) = pattern.filter(|la| la.use_kernels && spans.is_none()) else {
            let (k, v) = match pattern {
                Some(la) => append_kv(kv, &k, &v, la.kv)?,
                // The encoder: nothing to cache.
                None => (k, v),
            };
            let out = attend(&q, k, v, mask, self.n_heads / self.n_kv_heads)?;
            return match spans {
                Some(spans) => self.o_proj.forward_spans(&out, spans),
                None => self.o_proj.forward(&out),
            };
        };
        // SelfExtend: the query and key rotated at grouped positions as well.
        let grouped = match &la.grouped_rope {
            Some((rq, rk)) => Some((rq.apply(&q_raw, &k_raw)?.0, rk.apply(&q_raw, &k_raw)?.1)),
            None => None,
        };
        // Windowed layers keep only their window: no reservation.
        let alloc = KvAlloc {
            reserve: if la.kept.is_none() { la.kv.reserve } else { 0 },
            ..la.kv
        };
        LayerKv::append(kv, &k, &v, grouped.as_ref().map(|(_, gk)| gk), alloc)?;
        let cache = kv.as_mut().expect("appended above");
        let (start, len) = (cache.start, cache.len);
        let view = cache.view()?;
        // Attention over the full new chunk first, then the cache forgets what later queries
        // cannot see (Zebra local layers: all but the last `window` keys).
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
            k_grouped: view.k_grouped,
            key_mask,
        };
        let out = capstan_kernels::attention(&q, &view.k, &view.v, opts)?;
        let out = out
            .transpose(1, 2)?
            .reshape((b, s, self.n_heads * self.head_dim))?;
        cache.drop_front(la.kept.map_or(0, |keep| len.saturating_sub(keep)))?;
        self.o_proj.forward(&out)
    }
}

impl SelfAttention {
    /// [`SelfAttention::forward`] on a packed step (full causal attention, reference path):
    /// the projections run over all rows at once, attention per sequence over its own cache.
    pub(super) fn forward_packed(
        &self,
        x: &Tensor,
        rope: &Rotary,
        spans: &[Span],
        kvs: &mut [&mut Option<LayerKv>],
    ) -> CResult<Tensor> {
        let (q, k, v) = self.project_heads(x, Some(spans))?;
        let (q, k) = rope.apply(&q, &k)?;
        let n_rep = self.n_heads / self.n_kv_heads;
        let mut parts = Vec::with_capacity(spans.len());
        for (sp, kv) in spans.iter().zip(kvs.iter_mut()) {
            let part = |t: &Tensor| t.narrow(2, sp.start, sp.len)?.contiguous();
            let (ck, cv) = append_kv(kv, &part(&k)?, &part(&v)?, sp.kv)?;
            parts.push((part(&q)?, ck, cv));
        }
        let outs = attend_many(parts, n_rep)?;
        self.o_proj.forward_spans(&Tensor::cat(&outs, 1)?, spans)
    }
}

/// How one decoder layer attends in this forward pass.
#[derive(Debug, Clone)]
pub(super) struct LayerAttention {
    /// Run the kernels (a non-full pattern, or a CUDA device); else the reference path.
    pub(super) use_kernels: bool,
    pub(super) pattern: Pattern,
    /// Keys kept in the cache after this pass (`None`: all).
    pub(super) kept: Option<usize>,
    /// Absolute index of the first query row.
    pub(super) q_pos0: usize,
    /// SelfExtend: the rotations at the grouped query and key positions.
    pub(super) grouped_rope: Option<(Rotary, Rotary)>,
    /// `(b, cached + new)` u8 key padding mask, when any row is padded.
    pub(super) key_mask: Option<Tensor>,
    /// Positions to preallocate in a full-attention layer's KV buffers, and their type.
    pub(super) kv: KvAlloc,
}

/// Cross-attention to the encoder states (`LlamaCrossAttention` of the CEPE reference): its own
/// RMSNorm on the decoder states, no RoPE, no gate, no causal mask; only encoder padding is
/// masked. Keys/values come from `encoder_hidden_size`-wide states.
#[derive(Debug, Clone)]
pub(super) struct CrossAttention {
    pub(super) layernorm: RmsNorm,
    pub(super) q_proj: Proj,
    pub(super) k_proj: Proj,
    pub(super) v_proj: Proj,
    pub(super) o_proj: Proj,
    pub(super) n_heads: usize,
    pub(super) n_kv_heads: usize,
    pub(super) head_dim: usize,
}

impl CrossAttention {
    pub(super) fn load(vb: Weights, cfg: &LlamaConfig, enc_hidden: usize) -> CResult<Self> {
        let h = cfg.hidden_size;
        let (nh, nkv) = (cfg.num_attention_heads, cfg.kv_heads());
        // The reference uses hidden_size / num_heads here, never `head_dim`.
        let hd = h / nh;
        Ok(Self {
            layernorm: vb.pp("layernorm").rms_norm(h, cfg.rms_norm_eps)?,
            q_proj: vb.pp("q_proj").proj(h, nh * hd, false)?,
            k_proj: vb.pp("k_proj").proj(enc_hidden, nkv * hd, false)?,
            v_proj: vb.pp("v_proj").proj(enc_hidden, nkv * hd, false)?,
            o_proj: vb.pp("o_proj").proj(nh * hd, h, false)?,
            n_heads: nh,
            n_kv_heads: nkv,
            head_dim: hd,
        })
    }

    /// Keys and values of the encoder states, `(b, kv_heads, n, d)` each; computed once per
    /// request.
    pub(super) fn project_kv(&self, enc: &Tensor) -> CResult<(Tensor, Tensor)> {
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

    /// Cross-attention of the decoder states `x` (before this layer's norm).
    pub(super) fn forward(
        &self,
        x: &Tensor,
        state: &CrossLayerState,
        ctx: &CrossContext,
    ) -> CResult<Tensor> {
        self.forward_normed(&self.layernorm.forward(x)?, state, ctx, false)
    }

    /// Cross-attention of states already normed by this layer's RMSNorm; `fused`: through
    /// Capstan's attention kernel with the encoder's key padding mask.
    pub(super) fn forward_normed(
        &self,
        x: &Tensor,
        state: &CrossLayerState,
        ctx: &CrossContext,
        fused: bool,
    ) -> CResult<Tensor> {
        let (b, s, _) = x.dims3()?;
        let q = self
            .q_proj
            .forward(x)?
            .reshape((b, s, self.n_heads, self.head_dim))?
            .transpose(1, 2)?
            .contiguous()?;
        let out = if fused {
            let mut opts = AttentionOptions::new(Pattern::Cross);
            opts.key_mask = ctx.key_mask.clone();
            capstan_kernels::attention(&q, &state.k, &state.v, opts)?
                .transpose(1, 2)?
                .reshape((b, s, self.n_heads * self.head_dim))?
        } else {
            attend(
                &q,
                state.k.clone(),
                state.v.clone(),
                Some(&ctx.mask),
                self.n_heads / self.n_kv_heads,
            )?
        };
        self.o_proj.forward(&out)
    }
}

/// SwiGLU feed-forward (`LlamaMLP`).
#[derive(Debug, Clone)]
pub(super) struct Mlp {
    /// gate and up.
    pub(super) gate_up: ProjGroup,
    pub(super) down_proj: Proj,
}

impl Mlp {
    pub(super) fn load(vb: Weights, cfg: &LlamaConfig) -> CResult<Self> {
        let (h, i, b) = (cfg.hidden_size, cfg.intermediate_size, cfg.mlp_bias);
        Ok(Self {
            gate_up: ProjGroup::new(vec![
                vb.pp("gate_proj").proj(h, i, b)?,
                vb.pp("up_proj").proj(h, i, b)?,
            ]),
            down_proj: vb.pp("down_proj").proj(i, h, b)?,
        })
    }

    pub(super) fn forward(&self, x: &Tensor) -> CResult<Tensor> {
        let gu = self.gate_up.forward(x)?;
        self.down_proj
            .forward(&(candle_nn::ops::silu(&gu[0])? * &gu[1])?)
    }

    /// [`Mlp::forward`] on a packed step's rows ([`Proj::forward_spans`]).
    pub(super) fn forward_spans(&self, x: &Tensor, spans: &[Span]) -> CResult<Tensor> {
        let gu = self.gate_up.forward_spans(x, spans)?;
        self.down_proj
            .forward_spans(&(candle_nn::ops::silu(&gu[0])? * &gu[1])?, spans)
    }
}

/// Pre-norm transformer layer (`LlamaDecoderLayer`), optionally with cross-attention between
/// self-attention and the MLP.
#[derive(Debug, Clone)]
pub(super) struct Layer {
    pub(super) input_layernorm: RmsNorm,
    pub(super) self_attn: SelfAttention,
    pub(super) cross_attn: Option<CrossAttention>,
    pub(super) post_attention_layernorm: RmsNorm,
    pub(super) mlp: Mlp,
}

impl Layer {
    pub(super) fn load(vb: Weights, cfg: &LlamaConfig, cross: Option<usize>) -> CResult<Self> {
        let eps = cfg.rms_norm_eps;
        let cross_attn = match cross {
            Some(enc_hidden) => Some(CrossAttention::load(vb.pp("cross_attn"), cfg, enc_hidden)?),
            None => None,
        };
        Ok(Self {
            input_layernorm: vb.pp("input_layernorm").rms_norm(cfg.hidden_size, eps)?,
            self_attn: SelfAttention::load(vb.pp("self_attn"), cfg)?,
            cross_attn,
            post_attention_layernorm: vb
                .pp("post_attention_layernorm")
                .rms_norm(cfg.hidden_size, eps)?,
            mlp: Mlp::load(vb.pp("mlp"), cfg)?,
        })
    }

    /// `fused`: RMSNorm with the residual add as one kernel, and cross-attention through the
    /// attention kernel (the CUDA path); else candle's ops as the reference computes them.
    #[allow(clippy::too_many_arguments)]
    /// `spans`: the rows are several sequences' ([`SelfAttention::forward`]).
    pub(super) fn forward(
        &self,
        x: &Tensor,
        rope: &Rotary,
        mask: Option<&Tensor>,
        kv: &mut Option<LayerKv>,
        cross: Option<(&CrossLayerState, &CrossContext)>,
        pattern: Option<&LayerAttention>,
        fused: bool,
        spans: Option<&[Span]>,
    ) -> CResult<Tensor> {
        let h = self.input_layernorm.forward(x)?;
        let mut delta = self.self_attn.forward(&h, rope, mask, kv, pattern, spans)?;
        let mut x = x.clone();
        if let (Some(ca), Some((state, ctx))) = (&self.cross_attn, cross) {
            let (sum, normed) = add_norm(&x, &delta, &ca.layernorm, fused)?;
            let mut h = ca.forward_normed(&normed, state, ctx, fused)?;
            if let Some(gate) = &ctx.row_gate {
                h = h.broadcast_mul(gate)?;
            }
            (x, delta) = (sum, h);
        }
        let (x, normed) = add_norm(&x, &delta, &self.post_attention_layernorm, fused)?;
        match spans {
            Some(spans) => x + self.mlp.forward_spans(&normed, spans)?,
            None => x + self.mlp.forward(&normed)?,
        }
    }
}

/// `(x + delta, norm(x + delta))`: one kernel when `fused` (the norm from the unrounded sum).
fn add_norm(x: &Tensor, delta: &Tensor, norm: &RmsNorm, fused: bool) -> CResult<(Tensor, Tensor)> {
    if fused {
        capstan_kernels::rms_norm_residual(delta, x, norm.weight(), norm.eps())
    } else {
        let sum = (x + delta)?;
        let normed = norm.forward(&sum)?;
        Ok((sum, normed))
    }
}

impl Layer {
    /// [`Layer::forward`] on a packed step; `cross[i]` is sequence `i`'s encoder context for
    /// this layer, if any (cross-attention runs per sequence: each has its own chunks).
    pub(super) fn forward_packed(
        &self,
        x: &Tensor,
        rope: &Rotary,
        spans: &[Span],
        kvs: &mut [&mut Option<LayerKv>],
        cross: &[Option<(&CrossLayerState, &CrossContext)>],
    ) -> CResult<Tensor> {
        let h = self.input_layernorm.forward(x)?;
        let mut x = (x + self.self_attn.forward_packed(&h, rope, spans, kvs)?)?;
        if let Some(ca) = &self.cross_attn {
            if cross.iter().any(Option::is_some) {
                let parts = spans
                    .iter()
                    .zip(cross)
                    .map(|(sp, c)| {
                        let xi = x.narrow(1, sp.start, sp.len)?;
                        let Some((state, ctx)) = c else {
                            return Ok(xi);
                        };
                        let mut h = ca.forward(&xi, state, ctx)?;
                        if let Some(gate) = &ctx.row_gate {
                            h = h.broadcast_mul(gate)?;
                        }
                        xi + h
                    })
                    .collect::<CResult<Vec<_>>>()?;
                x = Tensor::cat(&parts, 1)?;
            }
        }
        let h = self
            .mlp
            .forward_spans(&self.post_attention_layernorm.forward(&x)?, spans)?;
        x + h
    }
}

/// A stack of Llama layers with embeddings and final norm: the decoder's body, or CEPE's
/// bidirectional encoder (`LlamaEncoder`, a `LlamaModel` with `is_decoder = false`).
#[derive(Debug, Clone)]
pub(super) struct Stack {
    pub(super) embed_tokens: TokenEmbedding,
    pub(super) layers: Vec<Layer>,
    pub(super) norm: RmsNorm,
    pub(super) rope: Rope,
}

impl Stack {
    pub(super) fn load(
        vb: Weights,
        cfg: &LlamaConfig,
        cross_from: usize,
        enc_hidden: Option<usize>,
    ) -> Result<Self> {
        let load = || -> CResult<(TokenEmbedding, Vec<Layer>, RmsNorm)> {
            let embed = || {
                vb.pp("embed_tokens")
                    .embedding(cfg.vocab_size, cfg.hidden_size)
            };
            let layer = |i: usize| {
                let cross = enc_hidden.filter(|_| i >= cross_from);
                Layer::load(vb.pp(format!("layers.{i}")), cfg, cross)
            };
            // On the CPU, repacking a file's matrices is the load's work (and fresh memory's
            // page faults): the layers load on every core, beside the embedding table.
            let (embed_tokens, layers) = if vb.vb().device().is_cpu() {
                let (embed, layers) = rayon::join(embed, || {
                    (0..cfg.num_hidden_layers)
                        .into_par_iter()
                        .map(layer)
                        .collect::<Vec<_>>()
                });
                // The first layer's error in layer order, as the sequential load reports it
                // (a parallel collect would report whichever failed first in time).
                (embed?, layers.into_iter().collect::<CResult<Vec<_>>>()?)
            } else {
                let layers = (0..cfg.num_hidden_layers)
                    .map(layer)
                    .collect::<CResult<Vec<_>>>();
                (embed()?, layers?)
            };
            let norm = vb.pp("norm").rms_norm(cfg.hidden_size, cfg.rms_norm_eps)?;
            Ok((embed_tokens, layers, norm))
        };
        let (embed_tokens, layers, norm) = load().map_err(Error::from_load)?;
        let divisors = if vb.contains("rope_freqs.weight") {
            Some(
                vb.vb()
                    .get_unchecked_dtype("rope_freqs.weight", candle_core::DType::F32)?
                    .flatten_all()?
                    .to_vec1::<f32>()?,
            )
        } else {
            None
        };
        Ok(Self {
            embed_tokens,
            layers,
            norm,
            rope: Rope::new(cfg, divisors.as_deref())?,
        })
    }
}

impl CrossContext {
    /// Layer `i`'s cross-attention keys and values: cached, or projected now from the states.
    pub(super) fn layer<'a>(
        &'a self,
        i: usize,
        layer: &Layer,
    ) -> CResult<Option<Cow<'a, CrossLayerState>>> {
        Ok(match (&self.layers[i], &self.states, &layer.cross_attn) {
            (Some(state), _, _) => Some(Cow::Borrowed(state)),
            (None, Some(states), Some(ca)) => {
                let (k, v) = ca.project_kv(states)?;
                Some(Cow::Owned(CrossLayerState { k, v }))
            }
            _ => None,
        })
    }
}
