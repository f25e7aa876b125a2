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

mod attend;
mod branches;
mod cache;
mod cepe;
mod layers;
mod packed;
mod passage_states;
mod rope;
mod step;
mod weights;

use std::sync::Arc;

use candle_core::{DType, Device, Module, Tensor};
use candle_nn::VarBuilder;

use crate::attention::AttentionPattern;
use crate::config::LlamaConfig;
use crate::error::{Error, Result};
use crate::gguf::GgufWeights;

use cache::KvAlloc;
pub use cache::{Cache, CrossKv, EncodedChunks, KvBlock};
pub use step::DecodeStepStatus;

/// A prompt chunk of at least this many rows runs the same kernels whatever its length
/// (smaller ones run the per-row attention path and the quantized tiles, whose rounding
/// differs): a prefix cache leaves at least this many prompt tokens to read, so that a prompt
/// started from cached keys and values gives the logits a fresh read gives.
pub const STABLE_CHUNK_ROWS: usize = if capstan_kernels::cpu::TILED_ROWS > weights::DEQUANTIZE_ROWS
{
    capstan_kernels::cpu::TILED_ROWS + 1
} else {
    weights::DEQUANTIZE_ROWS + 1
};

/// How many of a prompt's `pending` tokens to read in a pass with room for `room`: all of them,
/// or a piece of at least [`STABLE_CHUNK_ROWS`] that leaves at least as many, or none (wait for
/// more room). Every piece then runs the kernels a read of the whole prompt runs, whose rows do
/// not depend on the chunk they are read in: what a prompt computes does not depend on how it
/// was cut (by the reader's own chunks or a scheduler's step budget).
pub fn prompt_piece(pending: usize, room: usize) -> usize {
    if pending <= room {
        return pending;
    }
    let piece = room.min(pending.saturating_sub(STABLE_CHUNK_ROWS));
    if piece >= STABLE_CHUNK_ROWS {
        piece
    } else {
        0
    }
}
use layers::{LayerAttention, Stack};
pub use packed::PackedInput;
pub use passage_states::{hash_tokens, PassageCache, PassageCacheStats};
use weights::Proj;
pub(crate) use weights::Weights;

/// Additive mask value for disallowed keys: `torch.finfo(float32).min`, as Hugging Face uses,
/// so that fully masked rows (left padding) stay finite.
const MASKED: f32 = f32::MIN;

/// Prompts longer than this are processed in chunks through the KV cache (mathematically the
/// same as one pass; bounds the activation memory).
const PREFILL_CHUNK: usize = 2048;

/// Keys from which a decoding row of a full-attention layer runs on the decoding kernel rather
/// than the cuBLAS products, on CUDA with the tensor-core kernels chosen (the default). The
/// 2026-11-30 H200 run, Llama-3-8B shape through the layers: products 120.7 / 25.6 tokens/s at
/// 1K / 32K keys, the decoding kernel 95.1 / 86.3; the lines through them cross near 3.4K.
const DECODE_KERNEL_MIN_KEYS: usize = 4096;

type CResult<T> = candle_core::Result<T>;

/// Which model a checkpoint holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Architecture {
    /// `LlamaForCausalLM`.
    Llama,
    /// `LlamaForCausalContextLM` (CEPE): Llama plus encoder and cross-attention.
    Cepe,
    /// `Qwen2ForCausalLM`: Llama with biases on the Q, K and V projections.
    Qwen2,
}

impl Architecture {
    /// From config.json's `architectures` (empty means `LlamaForCausalLM`).
    pub fn from_config(cfg: &LlamaConfig) -> Result<Self> {
        match cfg.architectures.first().map(String::as_str) {
            None | Some("LlamaForCausalLM") if !cfg.is_cepe() => Ok(Self::Llama),
            None | Some("LlamaForCausalContextLM") if cfg.is_cepe() => Ok(Self::Cepe),
            Some("Qwen2ForCausalLM") if !cfg.is_cepe() => Ok(Self::Qwen2),
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

/// The KV cache's element type for weights `vb`: f16 where the matrices are quantized and the
/// model runs on the CPU (their rounding already exceeds half's, and a decoding step at long
/// context is bound by reading the cache: docs/BENCHMARKS.md, issue 24), else the activations'
/// dtype, so that float checkpoints keep the reference's exact cache.
fn default_kv_dtype(vb: &Weights) -> DType {
    if vb.is_quantized() && vb.vb().device().is_cpu() {
        DType::F16
    } else {
        vb.vb().dtype()
    }
}

/// Llama causal LM, optionally with CEPE's context encoder and cross-attention.
#[derive(Debug, Clone)]
pub struct Llama {
    decoder: Stack,
    lm_head: Proj,
    encoder: Option<Stack>,
    cfg: LlamaConfig,
    arch: Architecture,
    attention: AttentionPattern,
    device: Device,
    dtype: DType,
    /// RoPE, RMSNorm with the residual and cross-attention as Capstan's kernels (the default
    /// on CUDA); candle's ops otherwise. Attention patterns other than full causal always run
    /// the attention kernel.
    fused_kernels: bool,
    /// On CUDA, full-attention layers through the attention kernel (true) or through cuBLAS
    /// matrix products with the softmax between (false, the default: on an H200 it decoded
    /// 5.4x faster at 1K tokens of context and 47x at 32K, and prefilled 3-4x faster; see
    /// docs/BENCHMARKS.md, "The GPU path").
    full_attention_kernel: bool,
    /// Where CEPE's cross-attention keys and values live.
    cross_kv: CrossKv,
    /// The element type of the self-attention KV cache.
    kv_dtype: DType,
    /// The GGUF file of a quantized model (the decoding step reads its blocks).
    gguf: Option<Arc<GgufWeights>>,
    /// The CUDA decoding step, if chosen ([`Llama::set_decode_step`]).
    step: Arc<step::StepSlot>,
}

impl Llama {
    /// Loads the weights under `vb` (checkpoint names: `model.*`, `lm_head.weight`, and for
    /// CEPE `encoder.*`). Errors name the missing tensor or the mismatched shape.
    pub fn load(vb: VarBuilder, cfg: &LlamaConfig) -> Result<Self> {
        Self::load_weights(Weights::dense(vb), cfg)
    }

    /// [`Llama::load`] from dense or quantized weights.
    pub(crate) fn load_weights(vb: Weights, cfg: &LlamaConfig) -> Result<Self> {
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
            vb.pp("model")
                .pp("embed_tokens")
                .tied_proj(&decoder.embed_tokens)
        } else {
            vb.pp("lm_head")
                .proj(cfg.hidden_size, cfg.vocab_size, false)
        }
        .map_err(Error::from_load)?;
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
            device: vb.vb().device().clone(),
            dtype: vb.vb().dtype(),
            fused_kernels: vb.vb().device().is_cuda(),
            full_attention_kernel: false,
            cross_kv: CrossKv::default(),
            kv_dtype: default_kv_dtype(&vb),
            gguf: vb.gguf(),
            step: step::StepSlot::from_env(),
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

    /// Whether RoPE, RMSNorm with the residual and cross-attention run as Capstan's kernels
    /// (default: on CUDA devices).
    pub fn fused_kernels(&self) -> bool {
        self.fused_kernels
    }

    /// Runs RoPE, RMSNorm with the residual and cross-attention as Capstan's kernels (`true`)
    /// or as candle's ops (`false`): on the CPU the kernels run their references, which is how
    /// the CUDA path's model code is tested without a GPU.
    pub fn set_fused_kernels(&mut self, fused: bool) {
        self.fused_kernels = fused;
    }

    /// On CUDA, runs full-attention layers through Capstan's attention kernel (`true`) or
    /// through cuBLAS matrix products with the softmax between (`false`, the default, blocked
    /// by queries). Which is faster is what `capstan-bench gpu decode --full-attention`
    /// measures; other patterns always run the kernel.
    pub fn set_full_attention_kernel(&mut self, kernel: bool) {
        self.full_attention_kernel = kernel;
    }

    /// Where CEPE's cross-attention keys and values live during a request (default
    /// [`CrossKv::Auto`]); applies to encoder contexts set after the call.
    pub fn set_cross_kv(&mut self, cross_kv: CrossKv) {
        self.cross_kv = cross_kv;
    }

    /// Whether this model's products of many rows may run on AMX tiles (on a CPU that has
    /// them, its quantized matrices do: `capstan_kernels::qmatmul_amx`); their keys and values
    /// differ from the f32 GEMM's in the last bits, so a prefix cache kept on disk says which
    /// it holds.
    pub fn products_on_amx(&self) -> bool {
        self.device.is_cpu() && capstan_kernels::cpu::amx::available()
    }

    /// The element type of the self-attention KV cache: f16 for quantized weights on the CPU
    /// (as llama.cpp keeps it), the activations' dtype otherwise.
    pub fn kv_dtype(&self) -> DType {
        self.kv_dtype
    }

    /// Keeps the self-attention KV cache in `dtype`: the activations' dtype (exact), or f16
    /// (half the bytes a decoding step reads, each key and value rounded to 11 significant
    /// bits). Use a fresh [`Cache`] afterwards.
    pub fn set_kv_dtype(&mut self, dtype: DType) -> Result<()> {
        if dtype != self.dtype && dtype != DType::F16 {
            return Err(Error::invalid(format!(
                "a KV cache in {dtype:?}: f16 or the activations' {:?}",
                self.dtype
            )));
        }
        self.kv_dtype = dtype;
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

    /// Runs a forward pass: on the CPU, on a worker of the compute pool, so that its parallel
    /// ops do not each put this thread to sleep and wake it
    /// ([`capstan_kernels::cpu::on_compute_pool`]).
    fn on_pool<R: Send>(&self, pass: impl FnOnce() -> R + Send) -> R {
        if self.device.is_cpu() {
            capstan_kernels::cpu::on_compute_pool(pass)
        } else {
            pass()
        }
    }

    fn forward_impl(
        &self,
        input_ids: &Tensor,
        attention_mask: Option<&Tensor>,
        cache: &mut Cache,
        all: bool,
    ) -> Result<Tensor> {
        self.on_pool(|| self.forward_here(input_ids, attention_mask, cache, all))
    }

    fn forward_here(
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
        let host_ids = ids.flatten_all()?.to_vec1::<u32>()?;
        if let Some(&max) = host_ids.iter().max() {
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
        // One sequence's next token: the fused CUDA step where it applies.
        if b == 1 && s == 1 && mask[0][0] {
            if let Some(logits) = self.try_decode_step(host_ids[0], cache)? {
                return Ok(logits);
            }
        }
        let mut outs = Vec::new();
        let mut start = 0;
        while start < s {
            // Never 0: PREFILL_CHUNK leaves room for a piece.
            let len = prompt_piece(s - start, PREFILL_CHUNK);
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
        let shared = b > 1 && positions.iter().all(|p| *p == positions[0]);
        let rows = if shared { &positions[..1] } else { &positions };
        let fused = self.fused_kernels;
        let rope = self
            .decoder
            .rope
            .rotary(rows, fused, self.dtype, &self.device)?;
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
                    rope.rotary(&qp, fused, self.dtype, &self.device)?,
                    rope.rotary(&kp, fused, self.dtype, &self.device)?,
                ))
            }
            _ => None,
        };
        let n_heads = self.cfg.num_attention_heads;
        let on_gpu = self.device.is_cuda();
        // Prompt chunks of full-attention layers go to the kernel too when it runs on tensor
        // cores (`capstan_kernels::tensor_core_attention`): the products below materialise
        // every score, which at 8K and more is most of a prefill's time. So do decoding rows
        // past DECODE_KERNEL_MIN_KEYS keys, where the products' cost grows with the keys and
        // the decoding kernel's hardly does (rows without padding: a key mask leaves a row to
        // the general kernel, one warp a row, far slower than the products at long contexts).
        let decoding_on_kernel = s == 1 && !any_pad && total >= DECODE_KERNEL_MIN_KEYS;
        let full_on_kernel = self.full_attention_kernel
            || (capstan_kernels::tensor_core_attention() && (s >= 16 || decoding_on_kernel));
        let mut x = self.decoder.embed_tokens.forward(ids)?;
        for (i, layer) in self.decoder.layers.iter().enumerate() {
            let state = match &cache.cross {
                Some(c) => c.layer(i, layer)?,
                None => None,
            };
            let cross = state.as_deref().zip(cache.cross.as_ref());
            let full = self.attention.is_full(i);
            let la = LayerAttention {
                use_kernels: !full || (on_gpu && full_on_kernel),
                pattern: self.attention.layer_pattern(i, n_heads),
                kept: self.attention.kept_keys(i, n_heads),
                q_pos0: past,
                grouped_rope: if full { None } else { grouped_rope.clone() },
                key_mask: kernel_key_mask.clone(),
                kv: KvAlloc {
                    reserve: cache.reserve,
                    dtype: self.kv_dtype,
                },
            };
            x = layer.forward(
                &x,
                &rope,
                attn_mask.as_ref(),
                &mut cache.kv[i],
                cross,
                Some(&la),
                fused,
                None,
            )?;
        }
        if !all {
            x = x.narrow(1, s - 1, 1)?.contiguous()?;
        }
        let x = self.decoder.norm.forward(&x)?;
        Ok(self.lm_head.forward(&x)?.to_dtype(DType::F32)?)
    }
}
