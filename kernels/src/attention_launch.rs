//! The launch of attention.cu (CUDA cores) or attention_mma.cu (tensor cores) for one call:
//! entry point, grid, shared memory and arguments, from the call's dimensions, positions and
//! options. `cuda.rs` launches it on a device; the host tests run the same launch through the
//! kernels compiled for the host ([`crate::host_kernels`]).

use crate::cpu::{AttnDims, AttnPositions};
use crate::pattern::{Pattern, TILE};
use crate::AttentionOptions;

/// Query rows per block of the attention kernel (`ROWS` in attention.cu), one warp each.
const ROWS: usize = 4;
/// Query rows per block of the tensor-core kernel (`MMA_BQ` in attention_mma.cu), 16 for
/// each of its 4 warps.
const MMA_ROWS: usize = 64;
/// Keys per tile of the tensor-core kernel (`MMA_BK`), and the padding of its shared rows.
const MMA_KEYS: usize = 64;
const MMA_PAD: usize = 8;
/// The most static shared memory of an attention kernel: the tensor-core kernel's row bounds,
/// 2 x 64 i64.
#[cfg_attr(not(feature = "cuda"), allow(dead_code))]
pub(crate) const STATIC_SHARED_BYTES: usize = 1024;
/// Threads per block of either attention kernel: 4 warps (one per query row of `ROWS`, or 16
/// rows each of `MMA_ROWS`).
const ATTENTION_THREADS: u32 = 128;

/// Kernel arguments of attention.cu and attention_mma.cu (`AttnArgs`), field for field.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub(crate) struct AttnArgs {
    batch: i32,
    heads: i32,
    kv_heads: i32,
    q_len: i32,
    kv_len: i32,
    kv_stride: i32,
    dim: i32,
    q_pos0: i64,
    k_pos0: i64,
    scale: f32,
    pattern: i32,
    window: i32,
    neighbor: i32,
    group: i32,
    has_mask: i32,
}

/// One call's launch. Its arguments in order: q, k, v, grouped q, grouped k (SelfExtend; else
/// q and k again), the key padding mask (else any byte), [`AttentionLaunch::rules`], the
/// output, [`AttentionLaunch::args`].
#[derive(Debug, Clone)]
pub(crate) struct AttentionLaunch {
    pub(crate) module: &'static str,
    pub(crate) name: String,
    pub(crate) grid: (u32, u32, u32),
    pub(crate) block: (u32, u32, u32),
    /// Dynamic shared memory in bytes.
    pub(crate) shared: u32,
    pub(crate) args: AttnArgs,
    /// Per head: chunk, shift, dilation and offset (SCCA), else one head of zeros.
    pub(crate) rules: Vec<i32>,
}

impl AttentionLaunch {
    /// The launch of a call of `dims` at `pos` with options `o` (its mask present or not) in
    /// the element type `suffix` (`f32`, `bf16`, `f16`), on tensor cores or not (the caller
    /// decides: bf16 or f16, heads of 64 or 128, at least 16 query rows, a device that has
    /// them).
    pub(crate) fn new(
        dims: &AttnDims,
        pos: &AttnPositions,
        o: &AttentionOptions,
        suffix: &str,
        tensor_cores: bool,
    ) -> Self {
        let (code, window, neighbor, group, rules) = match &o.pattern {
            Pattern::Causal => (0, 0, 0, 0, vec![0i32; 4]),
            Pattern::Local { window } => (1, *window as i32, 0, 0, vec![0i32; 4]),
            Pattern::SelfExtend { neighbor, group } => {
                (2, 0, *neighbor as i32, *group as i32, vec![0i32; 4])
            }
            Pattern::Scca(rules) => (
                3,
                0,
                0,
                0,
                rules
                    .iter()
                    .flat_map(|r| [r.chunk, r.shift, r.dilation, r.offset].map(|x| x as i32))
                    .collect(),
            ),
            Pattern::Cross => (4, 0, 0, 0, vec![0i32; 4]),
        };
        let args = AttnArgs {
            batch: dims.batch as i32,
            heads: dims.heads as i32,
            kv_heads: dims.kv_heads as i32,
            q_len: dims.q_len as i32,
            kv_len: dims.kv_len as i32,
            kv_stride: dims.kv_stride as i32,
            dim: dims.dim as i32,
            q_pos0: pos.q_pos0 as i64,
            k_pos0: pos.k_pos0 as i64,
            scale: pos.scale,
            pattern: code,
            window,
            neighbor,
            group,
            has_mask: o.key_mask.is_some() as i32,
        };
        // SelfExtend stages its grouped keys too.
        let tiles = if code == 2 { 3 } else { 2 };
        let (module, name, shared, rows) = if tensor_cores {
            let extend = if code == 2 { "_extend" } else { "" };
            (
                "attention_mma",
                format!("capstan_attention_mma_{suffix}_d{}{extend}", dims.dim),
                tiles * MMA_KEYS * (dims.dim + MMA_PAD) * 2,
                MMA_ROWS,
            )
        } else {
            (
                "attention",
                format!("capstan_attention_{suffix}"),
                tiles * TILE * dims.dim * 4,
                ROWS,
            )
        };
        Self {
            module,
            name,
            grid: (
                dims.q_len.div_ceil(rows) as u32,
                dims.heads as u32,
                dims.batch as u32,
            ),
            block: (ATTENTION_THREADS, 1, 1),
            shared: shared as u32,
            args,
            rules,
        }
    }
}

#[cfg(all(test, target_arch = "x86_64"))]
#[path = "attention_launch_tests.rs"]
mod tests;
