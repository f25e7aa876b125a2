//! Capstan's kernels: attention (with the papers' patterns), fused RoPE and RMSNorm with the
//! residual add, as candle custom ops. On CPU each op runs its reference implementation
//! ([`cpu`], f32 accumulation, the same tiling as the GPU); with the `cuda` feature on a CUDA
//! device it runs CUDA C kernels ([`SOURCES`]) compiled at run time with NVRTC for the
//! device's architecture, cached, and launched on candle's stream.
//!
//! Patterns ([`Pattern`]): full causal attention (prefill, or decode over a KV cache with
//! `q_pos0`), Zebra local attention (Song et al. 2023, "Zebra: Extending Context Window with
//! Layerwise Grouped Local-Global Attention", Appendix A), SelfExtend (Jin et al. 2024, "LLM
//! Maybe LongLM"), the SCCA family (Guo 2023, "SCCA: Shifted Cross Chunk Attention": fixed and
//! flow shifts, shifted dilated attention, LongMixed) and non-causal cross-attention with a
//! key padding mask (CAPE).
//!
//! ```
//! use candle_core::{Device, Tensor};
//! use capstan_kernels::{attention, AttentionOptions, Pattern};
//!
//! # fn main() -> candle_core::Result<()> {
//! let q = Tensor::randn(0f32, 1.0, (1, 4, 8, 16), &Device::Cpu)?;
//! let k = Tensor::randn(0f32, 1.0, (1, 2, 8, 16), &Device::Cpu)?;
//! let v = Tensor::randn(0f32, 1.0, (1, 2, 8, 16), &Device::Cpu)?;
//! let out = attention(&q, &k, &v, AttentionOptions::new(Pattern::Local { window: 4 }))?;
//! assert_eq!(out.dims(), &[1, 4, 8, 16]);
//! # Ok(())
//! # }
//! ```
#![warn(missing_docs)]

#[cfg(any(feature = "cuda", test))]
mod attention_launch;
pub mod cpu;
#[cfg(feature = "cuda")]
mod cuda;
mod decode_many;
#[cfg(all(test, target_arch = "x86_64"))]
mod host_kernels;
#[cfg(test)]
mod host_memory;
mod op_params;
mod ops;
mod pattern;
#[cfg(any(feature = "cuda", test))]
mod ptx_cache;
mod qmatmul_op;
#[cfg(any(feature = "cuda", test))]
mod scca_calls;
#[cfg(any(feature = "cuda", test))]
mod sdpa_graph;
pub mod step;

pub use decode_many::attention_decode_many;
pub use op_params::AttentionOptions;
pub use ops::{attention, attention_many, rms_norm_residual, rope_qk, RopeParams};
pub use pattern::{
    effective_shift, key_range, scca_rules, visible, HeadRule, Pattern, SccaKind, TILE,
};
pub use qmatmul_op::{qmatmul, qmatmul_amx};
pub use step::decode_grid::{decode_kernel, set_decode_kernel, DecodeKernel};

/// How CUDA attention runs where there is a choice (no effect on the CPU).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttentionKernel {
    /// One warp per query row on CUDA cores (attention.cu): every case
    /// (`CAPSTAN_ATTENTION_KERNEL=cuda-cores`); what the others fall back to.
    CudaCores,
    /// Tensor cores (attention_mma.cu) for bf16 or f16 prefill and cross-attention with a head
    /// width of 64 or 128, at least 16 query rows; CUDA cores for the rest (decoding rows).
    TensorCores,
    /// cuDNN's fused attention (loaded at run time) where its graph expresses the call: plain
    /// causal, causal with the queries at the keys' tail, either with Zebra's local window,
    /// SelfExtend (two passes merged), cross-attention without padding, in bf16 or f16 with a
    /// head width up to 128 ([`cudnn_version`] says whether it loads); tensor cores, then CUDA
    /// cores, for the rest. The default: on the H200 runs of 2026-11-29 and -30 every pattern
    /// matched the CPU reference on it, at 0.99-1.63x PyTorch's attention and 1.67-2.21x its
    /// model prefill (docs/BENCHMARKS.md, GPU).
    Cudnn,
}

/// The attention kernel chosen by [`set_attention_kernel`], else by `CAPSTAN_ATTENTION_KERNEL`
/// (`cuda-cores`, `mma`: tensor cores; anything else, or nothing, cuDNN) when first asked.
pub fn attention_kernel() -> AttentionKernel {
    match ATTENTION_KERNEL.load(std::sync::atomic::Ordering::Relaxed) {
        1 => AttentionKernel::CudaCores,
        2 => AttentionKernel::TensorCores,
        3 => AttentionKernel::Cudnn,
        _ => {
            let kernel = match std::env::var("CAPSTAN_ATTENTION_KERNEL").as_deref() {
                Ok("cuda-cores") => AttentionKernel::CudaCores,
                Ok("mma") => AttentionKernel::TensorCores,
                _ => AttentionKernel::Cudnn,
            };
            set_attention_kernel(kernel);
            kernel
        }
    }
}

/// Chooses the attention kernel for the process.
pub fn set_attention_kernel(kernel: AttentionKernel) {
    let code = match kernel {
        AttentionKernel::CudaCores => 1,
        AttentionKernel::TensorCores => 2,
        AttentionKernel::Cudnn => 3,
    };
    ATTENTION_KERNEL.store(code, std::sync::atomic::Ordering::Relaxed);
}

/// Whether one of the tensor-core kernels is chosen (cuDNN, the default, or Capstan's): CUDA
/// prefill attention then runs on tensor cores, and decoding rows of a packed step on the
/// decoding kernel, every sequence in one launch.
pub fn tensor_core_attention() -> bool {
    attention_kernel() != AttentionKernel::CudaCores
}

/// 0: not chosen yet (read the environment), else [`set_attention_kernel`]'s code.
static ATTENTION_KERNEL: std::sync::atomic::AtomicU8 = std::sync::atomic::AtomicU8::new(0);

/// cuDNN's version (`91900` for 9.19.0) if `libcudnn.so.9` (or `$CAPSTAN_CUDNN_LIB`) loads,
/// else why not.
pub fn cudnn_version() -> std::result::Result<usize, String> {
    #[cfg(feature = "cuda")]
    return cuda::cudnn::version();
    #[cfg(not(feature = "cuda"))]
    Err("built without the cuda feature".into())
}

/// What cuDNN did in this process (all zero without the `cuda` feature or cuDNN).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CudnnStats {
    /// Attention calls that ran on cuDNN.
    pub calls: u64,
    /// Execution plans built (or refused), one per call shape.
    pub plans: u64,
    /// Seconds spent building them (a shape's first call pays it; later ones reuse the plan).
    pub plan_seconds: f64,
    /// Why cuDNN refused the shapes it refused (those ran on Capstan's kernels).
    pub refusals: Vec<String>,
}

/// What cuDNN did in this process so far.
pub fn cudnn_stats() -> CudnnStats {
    #[cfg(feature = "cuda")]
    {
        use std::sync::atomic::Ordering::Relaxed;
        CudnnStats {
            calls: cuda::cudnn::CALLS.load(Relaxed),
            plans: cuda::cudnn::PLANS.load(Relaxed),
            plan_seconds: cuda::cudnn::PLAN_NANOS.load(Relaxed) as f64 * 1e-9,
            refusals: cuda::cudnn::refusals(),
        }
    }
    #[cfg(not(feature = "cuda"))]
    CudnnStats::default()
}

/// Results of this crate's ops (candle's error type: the ops run inside candle).
pub type Result<T> = candle_core::Result<T>;

/// The decoding step's module of one GGML format (`decode_step_<name>`): decode_step.cu with
/// only that format's entry points (a batch's products on tensor cores among them, whose body
/// only devices of compute capability 8.0 and up compile).
macro_rules! step_ggml_source {
    ($name:literal, $ty:literal) => {
        (
            concat!("decode_step_", $name),
            concat!(
                "#define STEP_GGML(F) F(",
                $name,
                ", ",
                $ty,
                ", false)\n",
                include_str!("cuda/common.cuh"),
                include_str!("cuda/ggml_units.cuh"),
                include_str!("cuda/mma.cuh"),
                include_str!("cuda/decode_step.cu")
            ),
        )
    };
}

/// The CUDA C sources, `(module, source)`, each with the shared `common.cuh` prepended, as
/// compiled by NVRTC (`kernels/scripts/nvrtc-check.sh` compiles the same files without a GPU).
pub const SOURCES: [(&str, &str); 15] = [
    (
        "attention",
        concat!(
            include_str!("cuda/common.cuh"),
            include_str!("cuda/attention_rules.cuh"),
            include_str!("cuda/attention.cu")
        ),
    ),
    // Tensor-core attention (mma.sync m16n8k16 on bf16/f16: compute capability 8.0 and up),
    // its own module so that older devices still compile the others.
    (
        "attention_mma",
        concat!(
            include_str!("cuda/common.cuh"),
            include_str!("cuda/attention_rules.cuh"),
            include_str!("cuda/mma.cuh"),
            include_str!("cuda/attention_mma.cu")
        ),
    ),
    // Decoding rows of many sequences, each against its own cache, in one launch.
    (
        "attention_decode",
        concat!(
            include_str!("cuda/common.cuh"),
            include_str!("cuda/attention_rules.cuh"),
            include_str!("cuda/mma.cuh"),
            include_str!("cuda/attention_decode.cu")
        ),
    ),
    // Two passes over disjoint keys merged by their softmax statistics (SelfExtend on cuDNN).
    (
        "attention_merge",
        concat!(
            include_str!("cuda/common.cuh"),
            include_str!("cuda/attention_rules.cuh"),
            include_str!("cuda/attention_merge.cu")
        ),
    ),
    (
        "rope",
        concat!(
            include_str!("cuda/common.cuh"),
            include_str!("cuda/rope.cu")
        ),
    ),
    (
        "rmsnorm",
        concat!(
            include_str!("cuda/common.cuh"),
            include_str!("cuda/rmsnorm.cu")
        ),
    ),
    // One decoding step's fused kernels ([`step`]): RMSNorm, RoPE with the cache append,
    // SwiGLU, and the products and embedding of float weights with their epilogues; then the
    // products of each GGML format, a module each.
    (
        "decode_step",
        concat!(
            include_str!("cuda/common.cuh"),
            include_str!("cuda/ggml_units.cuh"),
            include_str!("cuda/decode_step.cu")
        ),
    ),
    step_ggml_source!("q4_0", "Q4_0"),
    step_ggml_source!("q4_1", "Q4_1"),
    step_ggml_source!("q5_0", "Q5_0"),
    step_ggml_source!("q5_1", "Q5_1"),
    step_ggml_source!("q8_0", "Q8_0"),
    step_ggml_source!("q4k", "Q4_K"),
    step_ggml_source!("q6k", "Q6_K"),
    // A batch's products of bf16 or f16 weights on tensor cores (compute capability 8.0 and
    // up), a module of their own so that older devices still compile the others.
    (
        "decode_step_mma",
        concat!(
            "#define STEP_MMA\n",
            include_str!("cuda/common.cuh"),
            include_str!("cuda/ggml_units.cuh"),
            include_str!("cuda/mma.cuh"),
            include_str!("cuda/decode_step.cu")
        ),
    ),
];
