//! One decoding step of a Llama-family model (one new token of each of one or more sequences,
//! every layer full causal attention) as a fixed sequence of fused kernels over static
//! buffers: on CUDA ([`DecodeStep`]) the sequence is captured once as a CUDA graph per batch
//! size and replayed each step, so a step costs one launch instead of one per candle op
//! (SmolLM2's step was ~170 µs a layer, almost all launch cost). A batch's products read each
//! weight row once for all its sequences (continuous batching); each sequence keeps its own
//! caches, found through tables the kernels read. Weights are read in place: float matrices from the model's
//! tensors, GGML-quantized ones as their blocks ([`StepMatrix::Ggml`]).
//!
//! [`ReferenceStep`] computes the same step on the CPU in f32 with the kernels' roundings
//! (activations entering a product, q, and the new keys and values rounded to the model's
//! float type; the residual stream and every product's accumulation in f32): the oracle the
//! GPU test compares against, and itself checked against the model's forward pass in the
//! reader.

// Without the `cuda` feature only the emulator's tests use the buffers.
#[cfg_attr(not(feature = "cuda"), allow(dead_code))]
pub(crate) mod buffers;
pub(crate) mod decode_grid;
#[cfg(test)]
mod emulate;
// Without the `cuda` feature only the emulator's tests run the plan.
#[cfg_attr(not(feature = "cuda"), allow(dead_code))]
pub(crate) mod plan;
mod random;
mod reference;

use std::sync::Arc;

use candle_core::quantized::{GgmlDType, QTensor};
use candle_core::{bail, DType, Result, Tensor};

pub use random::{RandomModel, RandomShape};
pub use reference::{ReferenceStep, StepKvHost};

use crate::RopeParams;

/// A matrix `(rows, cols)` of a product `x W^T`.
#[derive(Debug, Clone)]
pub enum StepMatrix {
    /// f32, bf16 or f16, contiguous, on the step's device.
    Dense(Tensor),
    /// GGML blocks, row after row (rows in the model's order), in a type [`ggml_supported`]
    /// accepts: the very tensor the model's quantized products read, so a CUDA step reads its
    /// blocks in place on the same device (a tensor elsewhere is copied to the step's device).
    Ggml(Arc<QTensor>),
}

impl StepMatrix {
    /// `(rows, cols)`.
    pub fn dims(&self) -> Result<(usize, usize)> {
        match self {
            Self::Dense(t) => t.dims2(),
            Self::Ggml(q) => q.shape().dims2(),
        }
    }

    /// The CUDA module of the format's products ([`crate::SOURCES`]).
    #[cfg_attr(not(feature = "cuda"), allow(dead_code))]
    pub(crate) fn module(&self) -> Result<&'static str> {
        Ok(match self.format()? {
            "q4_0" => "decode_step_q4_0",
            "q4_1" => "decode_step_q4_1",
            "q5_0" => "decode_step_q5_0",
            "q5_1" => "decode_step_q5_1",
            "q8_0" => "decode_step_q8_0",
            "q4k" => "decode_step_q4k",
            "q6k" => "decode_step_q6k",
            _ => "decode_step",
        })
    }

    /// The format's name as the kernels' entry points spell it (`capstan_step_gemv_{name}_*`).
    pub(crate) fn format(&self) -> Result<&'static str> {
        Ok(match self {
            Self::Dense(t) => match t.dtype() {
                DType::F32 => "f32",
                DType::BF16 => "bf16",
                DType::F16 => "f16",
                d => bail!("decode step: a {d:?} matrix"),
            },
            Self::Ggml(q) => match ggml_name(q.dtype()) {
                Some(name) => name,
                None => bail!("decode step: no kernel for GGML type {:?}", q.dtype()),
            },
        })
    }
}

/// The GGML block types the step's kernels read (ggml_units.cuh).
pub fn ggml_supported(dtype: GgmlDType) -> bool {
    ggml_name(dtype).is_some()
}

fn ggml_name(dtype: GgmlDType) -> Option<&'static str> {
    Some(match dtype {
        GgmlDType::Q4_0 => "q4_0",
        GgmlDType::Q4_1 => "q4_1",
        GgmlDType::Q5_0 => "q5_0",
        GgmlDType::Q5_1 => "q5_1",
        GgmlDType::Q8_0 => "q8_0",
        GgmlDType::Q4K => "q4k",
        GgmlDType::Q6K => "q6k",
        _ => return None,
    })
}

/// The model's sizes.
#[derive(Debug, Clone, Copy)]
pub struct StepDims {
    /// Width of the residual stream.
    pub hidden: usize,
    /// Query heads.
    pub heads: usize,
    /// Key and value heads.
    pub kv_heads: usize,
    /// Width of a head.
    pub head_dim: usize,
    /// Width of the MLP.
    pub intermediate: usize,
    /// Rows of the output layer.
    pub vocab: usize,
    /// RMSNorm's epsilon.
    pub eps: f64,
}

/// One layer's weights (`LlamaDecoderLayer`).
#[derive(Debug, Clone)]
pub struct StepLayer {
    /// `input_layernorm` `(hidden)`, the model's float type.
    pub attn_norm: Tensor,
    /// q, k and v projections.
    pub q: StepMatrix,
    #[allow(missing_docs)]
    pub k: StepMatrix,
    #[allow(missing_docs)]
    pub v: StepMatrix,
    /// Biases of q, k and v (Qwen2).
    pub qkv_bias: Option<[Tensor; 3]>,
    /// `o_proj`.
    pub o: StepMatrix,
    /// `post_attention_layernorm`.
    pub mlp_norm: Tensor,
    /// SwiGLU's `gate_proj`, `up_proj` and `down_proj`.
    pub gate: StepMatrix,
    #[allow(missing_docs)]
    pub up: StepMatrix,
    #[allow(missing_docs)]
    pub down: StepMatrix,
}

/// A whole model, as the step reads it.
#[derive(Debug, Clone)]
pub struct StepModel {
    /// Sizes.
    pub dims: StepDims,
    /// The rotation (rotate-half layout, Hugging Face's row order).
    pub rope: RopeParams,
    /// Token embedding table `(vocab, hidden)`.
    pub embed: StepMatrix,
    /// The layers.
    pub layers: Vec<StepLayer>,
    /// Final norm `(hidden)`.
    pub norm: Tensor,
    /// Output layer `(vocab, hidden)` (the embedding table when tied).
    pub lm_head: StepMatrix,
}

impl StepModel {
    /// The activations' and caches' float type (the norms' type).
    pub fn dtype(&self) -> DType {
        self.norm.dtype()
    }

    /// Errors unless every matrix has the shape the sizes say, a kernel for its type, and
    /// whole 32-value units where it is quantized.
    pub fn check(&self) -> Result<()> {
        let d = &self.dims;
        if !d.head_dim.is_multiple_of(2)
            || d.head_dim > 256
            || !d.heads.is_multiple_of(d.kv_heads.max(1))
        {
            bail!(
                "decode step: heads {} / {} of width {}",
                d.heads,
                d.kv_heads,
                d.head_dim
            )
        }
        if self.rope.inv_freq.len() != d.head_dim / 2 {
            bail!("decode step: {} RoPE frequencies", self.rope.inv_freq.len())
        }
        let (q, kv) = (d.heads * d.head_dim, d.kv_heads * d.head_dim);
        let expect = |m: &StepMatrix, rows: usize, cols: usize, name: &str| -> Result<()> {
            m.format()?;
            let got = m.dims()?;
            if got != (rows, cols) {
                bail!("decode step: {name} is {got:?}, expected ({rows}, {cols})")
            }
            if matches!(m, StepMatrix::Ggml(_)) && !cols.is_multiple_of(32) {
                bail!("decode step: {name} has {cols} columns, not whole blocks")
            }
            Ok(())
        };
        expect(&self.embed, d.vocab, d.hidden, "embed_tokens")?;
        expect(&self.lm_head, d.vocab, d.hidden, "lm_head")?;
        if matches!(self.embed, StepMatrix::Dense(_)) && !d.hidden.is_multiple_of(32) {
            bail!(
                "decode step: hidden size {} is not a multiple of 32",
                d.hidden
            )
        }
        for (i, l) in self.layers.iter().enumerate() {
            let name = |m: &str| format!("layer {i} {m}");
            expect(&l.q, q, d.hidden, &name("q_proj"))?;
            expect(&l.k, kv, d.hidden, &name("k_proj"))?;
            expect(&l.v, kv, d.hidden, &name("v_proj"))?;
            expect(&l.o, d.hidden, q, &name("o_proj"))?;
            expect(&l.gate, d.intermediate, d.hidden, &name("gate_proj"))?;
            expect(&l.up, d.intermediate, d.hidden, &name("up_proj"))?;
            expect(&l.down, d.hidden, d.intermediate, &name("down_proj"))?;
            for (t, m) in [(&l.attn_norm, "input_layernorm"), (&l.mlp_norm, "norm")] {
                if t.dims() != [d.hidden] || t.dtype() != self.dtype() {
                    bail!("decode step: {} is {:?} {:?}", name(m), t.dims(), t.dtype())
                }
            }
        }
        Ok(())
    }
}

/// One layer's KV cache as the step reads and extends it: buffers `(1, kv_heads, cap, d)`
/// (contiguous, the model's float type) whose rows `offset..offset + len` are the cached keys
/// and values; the step writes row `offset + len`.
#[derive(Debug, Clone, Copy)]
pub struct StepKv<'a> {
    /// Keys.
    pub k: &'a Tensor,
    /// Values.
    pub v: &'a Tensor,
    /// First cached row.
    pub offset: usize,
    /// Cached rows.
    pub len: usize,
}

/// One sequence's share of a batched step ([`DecodeStep::step_many`]): its new token at
/// position `pos`, and its layers' caches.
#[derive(Debug, Clone, Copy)]
pub struct StepSeq<'a> {
    /// The new token.
    pub token: u32,
    /// Its position.
    pub pos: usize,
    /// Each layer's cache.
    pub kvs: &'a [StepKv<'a>],
}

/// How [`DecodeStep`] runs its kernels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StepLaunch {
    /// Captured once as a CUDA graph per batch size (again when the caches' smallest
    /// capacity changes how attention splits the keys), replayed each step.
    Graph,
    /// Launched one by one each step (what the graph captures; for comparison and for
    /// devices where capture fails).
    Eager,
}

#[cfg(feature = "cuda")]
pub use crate::cuda::step::DecodeStep;

/// [`DecodeStep`] without the `cuda` feature: never built.
#[cfg(not(feature = "cuda"))]
pub struct DecodeStep(std::convert::Infallible);

#[cfg(not(feature = "cuda"))]
impl DecodeStep {
    /// Always an error: built without the `cuda` feature.
    pub fn new(_: &StepModel, _: &candle_core::Device, _: StepLaunch) -> Result<Self> {
        bail!("decode step: built without the cuda feature")
    }

    /// Never called (no value exists).
    pub fn step(&mut self, _: u32, _: usize, _: &[StepKv<'_>]) -> Result<Tensor> {
        match self.0 {}
    }

    /// Never called (no value exists).
    pub fn step_many(&mut self, _: &[StepSeq<'_>]) -> Result<Tensor> {
        match self.0 {}
    }

    /// Never called (no value exists).
    pub fn capture_error(&self) -> Option<&str> {
        match self.0 {}
    }

    /// Never called (no value exists).
    pub fn graphs_captured(&self) -> usize {
        match self.0 {}
    }
}
