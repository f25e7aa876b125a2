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

pub mod cpu;
#[cfg(feature = "cuda")]
mod cuda;
mod op_params;
mod ops;
mod pattern;
mod qmatmul_op;
#[cfg(any(feature = "cuda", test))]
mod sdpa_graph;

pub use op_params::AttentionOptions;
pub use ops::{attention, attention_many, rms_norm_residual, rope_qk, RopeParams};
pub use pattern::{
    effective_shift, key_range, scca_rules, visible, HeadRule, Pattern, SccaKind, TILE,
};
pub use qmatmul_op::{qmatmul, qmatmul_amx};

/// Whether CUDA attention on bf16 or f16 runs on tensor cores (attention_mma.cu) for prefill
/// and cross-attention with a head width of 64 or 128: set by [`set_tensor_core_attention`],
/// else by `CAPSTAN_ATTENTION_KERNEL=mma` when first asked. Off by default until a GPU run has
/// checked it against the CPU reference (`kernels/tests/gpu.rs`); decoding and every other case
/// run on the CUDA-core kernel either way. No effect on the CPU.
pub fn tensor_core_attention() -> bool {
    match TENSOR_CORES.load(std::sync::atomic::Ordering::Relaxed) {
        1 => false,
        2 => true,
        _ => {
            let on = std::env::var("CAPSTAN_ATTENTION_KERNEL").is_ok_and(|v| v == "mma");
            set_tensor_core_attention(on);
            on
        }
    }
}

/// Chooses the tensor-core attention kernel (`true`) or the CUDA-core one for the process.
pub fn set_tensor_core_attention(on: bool) {
    TENSOR_CORES.store(if on { 2 } else { 1 }, std::sync::atomic::Ordering::Relaxed);
}

/// 0: not chosen yet (read the environment), 1: CUDA cores, 2: tensor cores.
static TENSOR_CORES: std::sync::atomic::AtomicU8 = std::sync::atomic::AtomicU8::new(0);

/// Results of this crate's ops (candle's error type: the ops run inside candle).
pub type Result<T> = candle_core::Result<T>;

/// The CUDA C sources, `(module, source)`, each with the shared `common.cuh` prepended, as
/// compiled by NVRTC (`kernels/scripts/nvrtc-check.sh` compiles the same files without a GPU).
pub const SOURCES: [(&str, &str); 4] = [
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
            include_str!("cuda/attention_mma.cu")
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
];
