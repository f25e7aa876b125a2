//! Where attention_decode.cu's blocks go: which of its two kernels runs for a model's heads,
//! the grid and shared memory it takes, and how many ranges each sequence's keys are split
//! into. Shared by the decoding step's plan and by `attention_decode_many` on CUDA.

/// `DecodeArgs` of attention_decode.cu, field for field.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub(crate) struct DecodeArgs {
    pub(crate) heads: i32,
    pub(crate) kv_heads: i32,
    pub(crate) dim: i32,
    pub(crate) scale: f32,
    pub(crate) splits: i32,
}

/// Warps a block of attention_decode.cu.
pub(crate) const DECODE_WARPS: usize = 4;
/// `GQA_HEADS`: query heads (of one key head) a block of the grouped kernel takes.
const GQA_HEADS: usize = 4;
/// `MMA_DEC_HEADS`: the same for the tensor-core kernel (mma.sync's 8 columns).
const MMA_HEADS: usize = 8;
/// Blocks that keep an H100's or H200's 132 multiprocessors busy (a few each): below this,
/// the keys are split into ranges of at least `MIN_SPLIT_KEYS`.
const TARGET_BLOCKS: usize = 528;
/// The fewest keys a range takes, unless `CAPSTAN_DECODE_SPLIT_KEYS` says otherwise (read once;
/// 16 or more): the 2026-11-29 H200 run timed the grouped kernel at ~33 µs a layer for a 1K
/// context, whose 8 ranges of 256 (a 2K capacity) leave most of the 132 multiprocessors idle
/// while each block walks its range 16 keys an iteration, ~4 µs each. The check times 64 beside
/// the default; the default follows the measurement.
const MIN_SPLIT_KEYS: usize = 256;
/// The most ranges: one sequence of Llama 3's 8 key heads on the grouped kernel takes 8
/// blocks a range, so 64 ranges for a device's 528 blocks.
pub(crate) const MAX_SPLITS: usize = 64;

/// How many ranges attention_decode.cu splits each sequence's keys into, for `blocks` blocks a
/// range ([`DecodeKernel::blocks`] times the sequences): enough blocks for the device, ranges
/// of at least `MIN_SPLIT_KEYS` (or `CAPSTAN_DECODE_SPLIT_KEYS`).
pub(crate) fn splits(blocks: usize, longest: usize) -> usize {
    splits_of(blocks, longest, min_split_keys())
}

/// [`splits`] with ranges of at least `min_keys`.
fn splits_of(blocks: usize, longest: usize, min_keys: usize) -> usize {
    TARGET_BLOCKS
        .div_ceil(blocks.max(1))
        .min(longest.div_ceil(min_keys.max(1)))
        .clamp(1, MAX_SPLITS)
}

/// `MIN_SPLIT_KEYS`, or `CAPSTAN_DECODE_SPLIT_KEYS` where it is a number of 16 or more (read
/// once a process: a captured step replays the ranges it was captured with).
fn min_split_keys() -> usize {
    static KEYS: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *KEYS.get_or_init(|| {
        env_count("CAPSTAN_DECODE_SPLIT_KEYS", 16..=usize::MAX).unwrap_or(MIN_SPLIT_KEYS)
    })
}

/// The number the environment variable `name` holds, where it is one within `range`.
fn env_count(name: &str, range: std::ops::RangeInclusive<usize>) -> Option<usize> {
    std::env::var(name)
        .ok()
        .and_then(|v| v.trim().parse::<usize>().ok())
        .filter(|k| range.contains(k))
}

/// `CAPSTAN_DECODE_GQA_KEYS` (1 to 8, read once a process): the keys a slot of the grouped
/// kernel takes at once (`GQA_KEYS`, 2 unless set), given to NVRTC as `-DGQA_KEYS=N`. The
/// 2026-11-29 H200 run found that kernel bound by its loop's latency at 32K (~4 µs an
/// iteration, 0.91 TB/s): more keys a slot puts more loads in flight an iteration, at the cost
/// of registers. The check times 4 beside the default.
#[cfg(feature = "cuda")]
pub(crate) fn gqa_keys_define() -> Option<usize> {
    static KEYS: std::sync::OnceLock<Option<usize>> = std::sync::OnceLock::new();
    *KEYS.get_or_init(|| env_count("CAPSTAN_DECODE_GQA_KEYS", 1..=8))
}

/// `CAPSTAN_STEP_PAIRED=0` (read once a process): the decoding step's modules compiled with
/// `-DSTEP_PAIRED=0`, one sequence's paired products (gate and up, RoPE's row pairs) walked one
/// row after the other as before 2026-11-30, for the check to time both ways.
#[cfg(feature = "cuda")]
pub(crate) fn step_paired_define() -> Option<usize> {
    static PAIRED: std::sync::OnceLock<Option<usize>> = std::sync::OnceLock::new();
    *PAIRED.get_or_init(|| env_count("CAPSTAN_STEP_PAIRED", 0..=0))
}

/// The kernels of attention_decode.cu.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DecodeKernel {
    /// `attention_decode`: a block per query head, each lane reading a key's elements one at a
    /// time: any head width up to 256.
    PerHead,
    /// `attention_decode_gqa`: a block per (up to) four query heads of one key head, each key
    /// and value row read once for all of them, in 16-byte pieces. Where a row is 16 to 512
    /// bytes, a power of two (bf16 or f16 heads 8 to 256 wide; f32 up to 128).
    Grouped,
    /// `attention_decode_mma`: the grouped kernel on tensor cores (compute capability 8.0 and
    /// up), up to eight query heads of one key head a block, each warp taking tiles of 16 keys:
    /// bf16 and f16 heads 64 or 128 wide. Chosen only by `CAPSTAN_DECODE_ATTENTION=mma` until
    /// a GPU run has timed it.
    TensorCores,
}

impl DecodeKernel {
    /// The kernel for heads `dim` wide of `elem`-byte values: grouped where it fits, unless
    /// [`set_decode_kernel`] (or `CAPSTAN_DECODE_ATTENTION=per-head`) asked for the other.
    pub(crate) fn choose(dim: usize, elem: usize) -> Self {
        let row = dim * elem;
        let fits = row.is_power_of_two() && (16..=512).contains(&row);
        let on_tensor_cores = elem == 2 && (dim == 64 || dim == 128);
        match decode_kernel() {
            DecodeKernel::TensorCores if on_tensor_cores => DecodeKernel::TensorCores,
            DecodeKernel::Grouped | DecodeKernel::TensorCores if fits => DecodeKernel::Grouped,
            _ => DecodeKernel::PerHead,
        }
    }

    /// The entry point for activations of type `suffix` (`f32`, `bf16`, `f16`).
    pub(crate) fn entry(self, suffix: &str) -> String {
        match self {
            DecodeKernel::PerHead => format!("capstan_attention_decode_{suffix}"),
            DecodeKernel::Grouped => format!("capstan_attention_decode_gqa_{suffix}"),
            DecodeKernel::TensorCores => format!("capstan_attention_decode_mma_{suffix}"),
        }
    }

    /// Query heads (of one key head) a block takes at most.
    fn heads_a_block(self) -> usize {
        match self {
            DecodeKernel::PerHead => 1,
            DecodeKernel::Grouped => GQA_HEADS,
            DecodeKernel::TensorCores => MMA_HEADS,
        }
    }

    /// Blocks a sequence and range of keys: the grid's x.
    pub(crate) fn blocks(self, heads: usize, kv_heads: usize) -> usize {
        match self {
            DecodeKernel::PerHead => heads,
            _ => kv_heads * (heads / kv_heads.max(1)).div_ceil(self.heads_a_block()),
        }
    }

    /// Dynamic shared memory a block: a part (max, sum, accumulators) per warp, per head.
    pub(crate) fn shared_bytes(self, dim: usize) -> u32 {
        (self.heads_a_block() * DECODE_WARPS * (2 + dim) * 4) as u32
    }
}

/// The decoding-attention kernel where it fits: chosen by [`set_decode_kernel`], else by
/// `CAPSTAN_DECODE_ATTENTION` (`per-head`, `mma`; anything else, or nothing, is grouped) when
/// first asked.
pub fn decode_kernel() -> DecodeKernel {
    use std::sync::atomic::Ordering::Relaxed;
    match DECODE_KERNEL.load(Relaxed) {
        1 => DecodeKernel::PerHead,
        2 => DecodeKernel::Grouped,
        3 => DecodeKernel::TensorCores,
        _ => {
            let kernel = match std::env::var("CAPSTAN_DECODE_ATTENTION").as_deref() {
                Ok("per-head") => DecodeKernel::PerHead,
                Ok("mma") => DecodeKernel::TensorCores,
                _ => DecodeKernel::Grouped,
            };
            set_decode_kernel(kernel);
            kernel
        }
    }
}

/// Chooses the decoding-attention kernel for the process (before a model's decoding step is
/// built: a captured step replays the kernel it was captured with).
pub fn set_decode_kernel(kernel: DecodeKernel) {
    let code = match kernel {
        DecodeKernel::PerHead => 1,
        DecodeKernel::Grouped => 2,
        DecodeKernel::TensorCores => 3,
    };
    DECODE_KERNEL.store(code, std::sync::atomic::Ordering::Relaxed);
}

/// 0: not chosen yet (read the environment), else [`set_decode_kernel`]'s code.
static DECODE_KERNEL: std::sync::atomic::AtomicU8 = std::sync::atomic::AtomicU8::new(0);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grouped_where_a_row_is_a_power_of_two_of_16_to_512_bytes() {
        for (dim, elem, grouped) in [
            (64, 2, true),
            (128, 2, true),
            (256, 2, true),
            (128, 4, true),
            (256, 4, false),
            (80, 2, false),
            (96, 2, false),
            (4, 2, false),
        ] {
            let k = DecodeKernel::choose(dim, elem);
            assert_eq!(
                k == DecodeKernel::Grouped,
                grouped && decode_kernel() == DecodeKernel::Grouped,
                "{dim} x {elem} bytes"
            );
        }
        // Llama 3 8B: 32 query heads over 8 key heads, a block per key head; 7 a group (Qwen2
        // 0.5B's 14 over 2): two blocks a key head.
        assert_eq!(DecodeKernel::Grouped.blocks(32, 8), 8);
        assert_eq!(DecodeKernel::Grouped.blocks(14, 2), 4);
        assert_eq!(DecodeKernel::Grouped.blocks(9, 9), 9);
        assert_eq!(DecodeKernel::PerHead.blocks(32, 8), 32);
        // The tensor-core kernel: up to 8 heads a block (so the step's buffers take the most
        // splits of the two grouped kernels).
        assert_eq!(DecodeKernel::TensorCores.blocks(32, 8), 8);
        assert_eq!(DecodeKernel::TensorCores.blocks(14, 2), 2);
        assert_eq!(DecodeKernel::TensorCores.blocks(64, 8), 8);
        assert_eq!(DecodeKernel::Grouped.blocks(64, 8), 16);
        // One sequence at 32K on the grouped kernel: 64 ranges (the cap), 512 blocks.
        assert_eq!(splits_of(8, 32_768, MIN_SPLIT_KEYS), 64);
        assert_eq!(splits_of(32, 32_768, MIN_SPLIT_KEYS), 17);
        // A 2K capacity (a 1K context and room to grow): 8 ranges of 256, or 32 of 64.
        assert_eq!(splits_of(8, 2_048, MIN_SPLIT_KEYS), 8);
        assert_eq!(splits_of(8, 2_048, 64), 32);
        // Never more than the device's blocks call for, nor than MAX_SPLITS.
        assert_eq!(splits_of(8, 32_768, 16), 64);
        assert_eq!(splits_of(264, 2_048, 16), 2);
    }
}
