//! Decoding on CUDA as one graph a token ([`capstan_kernels::step`]): the model's weights as
//! the step reads them ([`Llama::step_model`]: the float tensors and a GGUF file's quantized
//! blocks in place), and the step taken where it applies — one new token of one sequence, or of
//! each sequence of a continuous-batching step ([`Llama::forward_packed`]); full causal
//! attention in every layer, no encoder context or padding, each cache in the activations' type
//! with a free row — else the layers.
//!
//! Opt-in (`CAPSTAN_DECODE_STEP=graph` or `eager`, or [`Llama::set_decode_step`]) until a GPU
//! run has checked its kernels against [`capstan_kernels::step::ReferenceStep`]
//! (`kernels/tests/gpu.rs`).

use std::sync::{Arc, Mutex};

use candle_core::quantized::QMatMul;
use candle_core::{DType, Device, Tensor};
use capstan_kernels::step::{
    ggml_supported, DecodeStep, StepDims, StepKv, StepLaunch, StepLayer, StepMatrix, StepModel,
    StepSeq,
};

use super::cache::Cache;
use super::weights::{Proj, ProjGroup, TokenEmbedding};
use super::Llama;
use crate::attention::AttentionPattern;
use crate::error::{Error, Result};
use crate::gguf::GgufWeights;

/// The step of a model: how it launches, and once built, the step itself (or why it could not
/// be built: then the model decodes layer by layer).
pub(super) struct StepSlot {
    launch: Option<StepLaunch>,
    state: Mutex<StepState>,
}

enum StepState {
    Unbuilt,
    Ready(Box<DecodeStep>),
    Refused(String),
}

impl std::fmt::Debug for StepSlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "StepSlot({:?})", self.launch)
    }
}

impl StepSlot {
    pub(super) fn new(launch: Option<StepLaunch>) -> Arc<Self> {
        Arc::new(Self {
            launch,
            state: Mutex::new(StepState::Unbuilt),
        })
    }

    /// `CAPSTAN_DECODE_STEP`: `graph` or `eager`; anything else (or unset): off.
    pub(super) fn from_env() -> Arc<Self> {
        Self::new(match std::env::var("CAPSTAN_DECODE_STEP").as_deref() {
            Ok("graph") => Some(StepLaunch::Graph),
            Ok("eager") => Some(StepLaunch::Eager),
            _ => None,
        })
    }
}

/// What the decoding step did so far ([`Llama::decode_step_status`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DecodeStepStatus {
    /// Not chosen, or no step taken yet.
    Off,
    /// Built: graphs captured so far, and why capture failed if it did (the step then
    /// launches its kernels one by one).
    Ready {
        /// Graphs captured.
        graphs: usize,
        /// Why capture failed, if it did.
        capture_error: Option<String>,
    },
    /// Could not be built, and why (the model decodes layer by layer).
    Refused(String),
}

/// A matrix of a GGUF file as its blocks, where the step's kernels read its type; else
/// `None`. The layer's own quantized tensor where it holds one (read in place on the device),
/// else the file's blocks put on `device`.
fn ggml_matrix(
    gguf: &GgufWeights,
    name: &str,
    proj: Option<&Proj>,
    device: &Device,
) -> candle_core::Result<Option<StepMatrix>> {
    if let Some(Proj::Quantized {
        weight: QMatMul::QTensor(q),
        ..
    }) = proj
    {
        if ggml_supported(q.dtype()) {
            return Ok(Some(StepMatrix::Ggml(q.clone())));
        }
    }
    if !gguf.dtype(name).is_some_and(ggml_supported) {
        return Ok(None);
    }
    Ok(Some(StepMatrix::Ggml(Arc::new(
        gguf.qtensor(name, device)?,
    ))))
}

fn biases(group: &ProjGroup) -> candle_core::Result<Vec<Option<Tensor>>> {
    Ok(match group {
        ProjGroup::Separate(parts) => parts.iter().map(|p| p.bias().cloned()).collect(),
        ProjGroup::Stacked { proj, widths } => {
            let mut out = Vec::new();
            let mut at = 0;
            for &w in widths {
                out.push(match proj.bias() {
                    Some(b) => Some(b.narrow(0, at, w)?),
                    None => None,
                });
                at += w;
            }
            out
        }
    })
}

impl Llama {
    /// The weights as the decoding step reads them: a GGUF file's matrices as its blocks
    /// (in a type the step's kernels read; others dequantized to the activations' type), a
    /// checkpoint's float matrices as they are.
    pub fn step_model(&self) -> Result<StepModel> {
        let cfg = &self.cfg;
        let dims = StepDims {
            hidden: cfg.hidden_size,
            heads: cfg.num_attention_heads,
            kv_heads: cfg.kv_heads(),
            head_dim: cfg.head_size(),
            intermediate: cfg.intermediate_size,
            vocab: cfg.vocab_size,
            eps: cfg.rms_norm_eps,
        };
        let matrix = |name: &str, proj: Option<&Proj>| -> candle_core::Result<StepMatrix> {
            if let Some(gguf) = &self.gguf {
                if let Some(m) = ggml_matrix(gguf, name, proj, &self.device)? {
                    return Ok(m);
                }
                let t = candle_nn::var_builder::SimpleBackend::get_unchecked(
                    gguf.as_ref(),
                    name,
                    self.dtype,
                    &self.device,
                )?;
                return Ok(StepMatrix::Dense(t));
            }
            match proj {
                Some(Proj::Dense(l)) => Ok(StepMatrix::Dense(l.weight().clone())),
                _ => candle_core::bail!("{name}: not a float matrix"),
            }
        };
        let group = |g: &ProjGroup, i: usize| match g {
            ProjGroup::Separate(parts) => parts.get(i).cloned(),
            ProjGroup::Stacked { .. } => None,
        };
        let build = || -> candle_core::Result<StepModel> {
            let embed = match &self.decoder.embed_tokens {
                TokenEmbedding::Dense(e) if self.gguf.is_none() => {
                    StepMatrix::Dense(e.embeddings().clone())
                }
                // A tied output layer holds the embedding's blocks on the device.
                _ => matrix(
                    "model.embed_tokens.weight",
                    cfg.tie_word_embeddings.then_some(&self.lm_head),
                )?,
            };
            let lm_head = if cfg.tie_word_embeddings {
                embed.clone()
            } else {
                matrix("lm_head.weight", Some(&self.lm_head))?
            };
            let mut layers = Vec::with_capacity(self.decoder.layers.len());
            for (i, l) in self.decoder.layers.iter().enumerate() {
                let name = |m: &str| format!("model.layers.{i}.{m}.weight");
                let attn = &l.self_attn;
                let qkv = |j: usize, m: &str| matrix(&name(m), group(&attn.qkv, j).as_ref());
                let b = biases(&attn.qkv)?;
                let qkv_bias = match (&b[..], cfg.qkv_bias()) {
                    ([Some(q), Some(k), Some(v)], true) => Some([q.clone(), k.clone(), v.clone()]),
                    (_, false) => None,
                    _ => candle_core::bail!("layer {i}: q, k and v biases missing"),
                };
                if attn.o_proj.bias().is_some() || l.mlp.down_proj.bias().is_some() {
                    candle_core::bail!("layer {i}: biases on o_proj or the MLP")
                }
                let mlp = |j: usize, m: &str| matrix(&name(m), group(&l.mlp.gate_up, j).as_ref());
                layers.push(StepLayer {
                    attn_norm: l.input_layernorm.weight().clone(),
                    q: qkv(0, "self_attn.q_proj")?,
                    k: qkv(1, "self_attn.k_proj")?,
                    v: qkv(2, "self_attn.v_proj")?,
                    qkv_bias,
                    o: matrix(&name("self_attn.o_proj"), Some(&attn.o_proj))?,
                    mlp_norm: l.post_attention_layernorm.weight().clone(),
                    gate: mlp(0, "mlp.gate_proj")?,
                    up: mlp(1, "mlp.up_proj")?,
                    down: matrix(&name("mlp.down_proj"), Some(&l.mlp.down_proj))?,
                });
            }
            let model = StepModel {
                dims,
                rope: capstan_kernels::RopeParams {
                    inv_freq: self.decoder.rope.inv_freq.clone(),
                    factor: self.decoder.rope.factor,
                },
                embed,
                layers,
                norm: self.decoder.norm.weight().clone(),
                lm_head,
            };
            model.check()?;
            Ok(model)
        };
        build().map_err(|e| Error::invalid(format!("decoding step: {e}")))
    }

    /// Chooses how CUDA decoding steps run: as one graph a token, the same kernels launched
    /// one by one, or (`None`) layer by layer (the default, or `CAPSTAN_DECODE_STEP`).
    pub fn set_decode_step(&mut self, launch: Option<StepLaunch>) {
        self.step = StepSlot::new(launch);
    }

    /// What the decoding step did so far.
    pub fn decode_step_status(&self) -> DecodeStepStatus {
        let state = self.step.state.lock().expect("decode step lock");
        match &*state {
            StepState::Unbuilt => DecodeStepStatus::Off,
            StepState::Ready(s) => DecodeStepStatus::Ready {
                graphs: s.graphs_captured(),
                capture_error: s.capture_error().map(str::to_string),
            },
            StepState::Refused(why) => DecodeStepStatus::Refused(why.clone()),
        }
    }

    /// The logits `(1, 1, vocab)` of `token` through the decoding step, the cache extended by
    /// it; `None` where the step does not apply (the caller runs the layers).
    pub(super) fn try_decode_step(&self, token: u32, cache: &mut Cache) -> Result<Option<Tensor>> {
        match self.try_decode_steps(&[token], &mut [cache])? {
            Some(logits) => Ok(Some(logits.reshape((1, 1, ()))?)),
            None => Ok(None),
        }
    }

    /// The f32 logits `(n, vocab)` of one new token of each of `n` sequences through the
    /// decoding step together (continuous batching: each weight row read once for all), each
    /// cache extended by its token; `None` where the step does not apply to every sequence
    /// (the caller runs the layers). Tokens are in the vocabulary (the callers check).
    pub(super) fn try_decode_steps(
        &self,
        tokens: &[u32],
        caches: &mut [&mut Cache],
    ) -> Result<Option<Tensor>> {
        let Some(launch) = self.step.launch else {
            return Ok(None);
        };
        let applies = |cache: &Cache| {
            cache.cross.is_none()
                && cache.batch() == Some(1)
                && cache.key_mask.first().is_some_and(|m| m.iter().all(|&k| k))
                && cache.kv.len() == self.decoder.layers.len()
                && cache
                    .kv
                    .iter()
                    .all(|kv| kv.as_ref().is_some_and(|kv| kv.has_free_row()))
        };
        if !self.device.is_cuda()
            || self.attention != AttentionPattern::Full
            || self.kv_dtype != self.dtype
            || tokens.len() != caches.len()
            || !caches.iter().all(|c| applies(c))
        {
            return Ok(None);
        }
        let mut state = self.step.state.lock().expect("decode step lock");
        if matches!(*state, StepState::Unbuilt) {
            *state = match self
                .step_model()
                .and_then(|m| Ok(DecodeStep::new(&m, &self.device, launch)?))
            {
                Ok(step) => StepState::Ready(Box::new(step)),
                Err(e) => StepState::Refused(e.to_string()),
            };
        }
        let StepState::Ready(step) = &mut *state else {
            return Ok(None);
        };
        let kvs: Vec<Vec<StepKv<'_>>> = caches
            .iter()
            .map(|cache| {
                cache
                    .kv
                    .iter()
                    .map(|kv| kv.as_ref().expect("checked above").step_kv())
                    .collect()
            })
            .collect();
        let seqs: Vec<StepSeq<'_>> = tokens
            .iter()
            .zip(caches.iter())
            .zip(&kvs)
            .map(|((&token, cache), kvs)| StepSeq {
                token,
                pos: cache.real[0] as usize,
                kvs,
            })
            .collect();
        let logits = match step.step_many(&seqs) {
            Ok(l) => l,
            Err(e) => {
                // The rows the step may have written are past every cache's length: the
                // layers overwrite them.
                *state = StepState::Refused(e.to_string());
                return Ok(None);
            }
        };
        drop(seqs);
        drop(kvs);
        for cache in caches.iter_mut() {
            for kv in cache.kv.iter_mut().flatten() {
                kv.count_written_row();
            }
            cache.real[0] += 1;
            cache.key_mask[0].push(true);
            cache.seq_len += 1;
        }
        Ok(Some(logits.to_dtype(DType::F32)?))
    }
}
