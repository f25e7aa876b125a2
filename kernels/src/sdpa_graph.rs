//! cuDNN's fused attention (flash attention forward) as the operation graph of its backend API,
//! described as plain data: the tensors and operations that `crate::cuda::cudnn` turns into
//! backend descriptors, and that this module's tests interpret on the CPU against
//! [`crate::attention`], so the graph's masks and softmax are checked without a GPU.
//!
//! cuDNN 9.19 (the lent GPU machines' version) fuses attention from the "composite" graph that
//! cudnn-frontend emits for backends below 9.21: matmul, pointwise and reduction operations in
//! the frontend's order, which the fused-attention engine recognises (docs/plans/cudnn-sdpa.md
//! sections 2.3 and 2.4; its single SDPA operation cannot express causal masks before 9.21).
//! Covered: plain causal attention (queries and keys from the same position), causal attention
//! of queries at the tail of the keys (a prompt chunk after a cache: the frontend's
//! bottom-right diagonal), either with Zebra's local window (the frontend's left bound),
//! a diagonal shifted by a constant (SelfExtend's far keys; SCCA's shifted chunks, batched over
//! a sequence's chunks in place: [`SdpaBatch::Chunks`], `crate::scca_calls`), and
//! cross-attention without padding, in bf16 or f16, grouped-query heads, keys and values read
//! in place from a cache's buffer. Everything else runs on Capstan's own kernels.

/// Element types of the graph's tensors (`cudnnDataType_t`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum DataType {
    Float,
    Half,
    Bf16,
    Int32,
    Boolean,
}

impl DataType {
    /// The `cudnnDataType_t` value.
    #[cfg(feature = "cuda")]
    pub(crate) fn code(self) -> i32 {
        match self {
            Self::Float => 0,
            Self::Half => 2,
            Self::Int32 => 4,
            Self::Bf16 => 9,
            Self::Boolean => 11,
        }
    }
}

/// Pointwise modes used (`cudnnPointwiseMode_t`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Pointwise {
    Add,
    Sub,
    Mul,
    Div,
    Exp,
    Log,
    CmpGe,
    CmpGt,
    GenIndex,
    BinarySelect,
}

impl Pointwise {
    /// The `cudnnPointwiseMode_t` value.
    #[cfg(feature = "cuda")]
    pub(crate) fn code(self) -> i32 {
        match self {
            Self::Add => 0,
            Self::Mul => 1,
            Self::Div => 6,
            Self::Sub => 9,
            Self::Exp => 13,
            Self::Log => 15,
            Self::CmpGe => 303,
            Self::CmpGt => 302,
            Self::GenIndex => 501,
            Self::BinarySelect => 601,
        }
    }
}

/// One tensor descriptor: 4-D, strides in elements.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct TensorDesc {
    pub(crate) uid: i64,
    pub(crate) dtype: DataType,
    pub(crate) dims: [i64; 4],
    pub(crate) strides: [i64; 4],
    /// An intermediate the engine keeps on chip (never in the variant pack).
    pub(crate) is_virtual: bool,
    /// A scalar passed by value (a host pointer in the variant pack).
    pub(crate) by_value: bool,
}

/// One operation, its tensors named by uid.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Op {
    /// `c = a b` over the last two axes, batched over the first two (fewer heads in `b`:
    /// grouped-query heads, query head `h` reading head `h / (heads_a / heads_b)`).
    Matmul { a: i64, b: i64, c: i64 },
    /// `y = mode(x[, b[, t]])` with broadcasting of size-1 axes; `axis` for `GenIndex`.
    Pointwise {
        mode: Pointwise,
        precision: DataType,
        x: i64,
        b: Option<i64>,
        t: Option<i64>,
        y: i64,
        axis: Option<i64>,
    },
    /// `y = max` or `sum` of `x` over its last axis (`y`'s last dimension is 1).
    Reduction { max: bool, x: i64, y: i64 },
}

/// The mask of a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum SdpaMask {
    /// Every key visible (cross-attention).
    None,
    /// Query row `r` sees key columns `c <= r` (queries and keys start at the same position).
    Causal,
    /// Query row `r` sees key columns `c <= r + kv_len - q_len` (the queries are the keys'
    /// last `q_len` positions).
    CausalBottomRight,
    /// Query row `r` sees key columns `c <= r + shift` (the frontend's top-left diagonal with a
    /// right bound; `shift` may be negative): SelfExtend's far keys, `i - p >= neighbor`, and
    /// SCCA's shifted chunks (`shift` > 0: the chunk's keys start before its queries).
    CausalShifted { shift: i64 },
}

/// Where a call's batch entries lie in memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum SdpaBatch {
    /// One after another: queries and output packed `(batch, heads, q_len, dim)`, keys and
    /// values `(batch, kv_heads, kv_stride, dim)`.
    Packed,
    /// Chunks of one sequence, read and written in place (SCCA's chunks, `crate::scca_calls`):
    /// entry `n` starts `n * step` rows after the first in queries, output, keys and values
    /// alike; query and output heads are `q_head_rows` rows apart, key and value heads
    /// `kv_stride`.
    Chunks { step: i64, q_head_rows: i64 },
}

/// What a call's graph (and so its execution plan) depends on: the plan cache's key. Strides
/// follow from it (`batch_layout`; keys and values `kv_stride` rows from one head to the
/// next), so different layouts never share a plan.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct SdpaKey {
    pub(crate) dtype: DataType,
    pub(crate) batch: i64,
    pub(crate) heads: i64,
    pub(crate) kv_heads: i64,
    pub(crate) q_len: i64,
    pub(crate) kv_len: i64,
    pub(crate) kv_stride: i64,
    pub(crate) dim: i64,
    pub(crate) mask: SdpaMask,
    /// Zebra's local window (keys `i - window < p <= i`), 0 for none: a second band mask.
    pub(crate) window: i64,
    /// Whether the softmax statistics (`max + ln(sum)` of each row's scaled, masked scores,
    /// f32 `(b, h, q_len, 1)`) are an output (SelfExtend merges its two passes with them).
    pub(crate) stats: bool,
    /// Where the batch entries lie.
    pub(crate) batch_layout: SdpaBatch,
}

/// The non-virtual tensors' uids (the variant pack's entries).
pub(crate) mod uid {
    pub(crate) const Q: i64 = 1;
    pub(crate) const KT: i64 = 2;
    pub(crate) const V: i64 = 3;
    pub(crate) const O: i64 = 4;
    pub(crate) const STATS: i64 = 5;
    pub(crate) const SCALE: i64 = 6;
    pub(crate) const NEG_INF: i64 = 7;
    pub(crate) const KV_LEN: i64 = 8;
    pub(crate) const Q_LEN: i64 = 9;
    pub(crate) const NEG_INF_WINDOW: i64 = 10;
    pub(crate) const LEFT_BOUND: i64 = 11;
    pub(crate) const SHIFT: i64 = 12;
}

/// A by-value scalar's value.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Scalar {
    F32(f32),
    I32(i32),
}

/// The graph of one call shape.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct SdpaGraph {
    pub(crate) tensors: Vec<TensorDesc>,
    pub(crate) ops: Vec<Op>,
}

impl SdpaGraph {
    /// The tensor of `uid`.
    #[cfg(test)]
    pub(crate) fn tensor(&self, uid: i64) -> Option<&TensorDesc> {
        self.tensors.iter().find(|t| t.uid == uid)
    }

    /// The by-value scalars' values, in the order of `tensors`.
    pub(crate) fn scalars(&self, key: &SdpaKey, scale: f32) -> Vec<(i64, Scalar)> {
        self.tensors
            .iter()
            .filter(|t| t.by_value)
            .map(|t| {
                let v = match t.uid {
                    uid::SCALE => Scalar::F32(scale),
                    uid::NEG_INF | uid::NEG_INF_WINDOW => Scalar::F32(f32::NEG_INFINITY),
                    // Key column c is kept when c + left > row r: with r's position
                    // q_pos0 + r and c's k_pos0 + c, `window - (q_pos0 - k_pos0)`.
                    uid::LEFT_BOUND => Scalar::F32(match key.mask {
                        SdpaMask::CausalBottomRight => key.window - (key.kv_len - key.q_len),
                        _ => key.window,
                    } as f32),
                    uid::KV_LEN => Scalar::I32(key.kv_len as i32),
                    uid::SHIFT => Scalar::I32(match key.mask {
                        SdpaMask::CausalShifted { shift } => shift as i32,
                        _ => 0,
                    }),
                    _ => Scalar::I32(key.q_len as i32),
                };
                (t.uid, v)
            })
            .collect()
    }
}

/// The window of a Zebra local pattern (0: none), the key's `window`.
pub(crate) fn sdpa_window(pattern: &crate::Pattern) -> i64 {
    match pattern {
        crate::Pattern::Local { window } => (*window).max(1) as i64,
        _ => 0,
    }
}

/// Whether a call can run on cuDNN's fused attention, and with which mask: bf16 or f16
/// (checked by the caller), a head width cuDNN 9 fuses (a multiple of 8 up to 128), at least 16
/// query rows, and causal
/// attention either square from the same position or with the queries at the keys' tail, or
/// cross-attention without a padding mask.
pub(crate) fn sdpa_mask(
    pattern: &crate::Pattern,
    q_pos0: u64,
    k_pos0: u64,
    q_len: usize,
    kv_len: usize,
    dim: usize,
    has_extras: bool,
) -> Option<SdpaMask> {
    // At least 16 query rows: a plan is built per shape, and decoding rows (one more key each
    // step) would each need a new one.
    if has_extras || !dim.is_multiple_of(8) || dim == 0 || dim > 128 || q_len < 16 || kv_len == 0 {
        return None;
    }
    match pattern {
        crate::Pattern::Cross => Some(SdpaMask::None),
        crate::Pattern::Causal | crate::Pattern::Local { .. }
            if q_pos0 == k_pos0 && q_len == kv_len =>
        {
            Some(SdpaMask::Causal)
        }
        crate::Pattern::Causal | crate::Pattern::Local { .. }
            if q_len < kv_len && q_pos0 + q_len as u64 == k_pos0 + kv_len as u64 =>
        {
            Some(SdpaMask::CausalBottomRight)
        }
        _ => None,
    }
}

/// SelfExtend as two cuDNN passes merged by their statistics: the near keys (`i - p <
/// neighbor`, normal rotations) as causal attention with a window of `neighbor`, the far ones
/// (`i - p >= neighbor`, grouped rotations) as causal attention shifted left by `neighbor`.
/// `(near mask, window, far mask)`, under the same conditions as [`sdpa_mask`] (the grouped
/// rotations are the far pass's queries and keys, not extras).
pub(crate) fn selfextend_masks(
    pattern: &crate::Pattern,
    q_pos0: u64,
    k_pos0: u64,
    q_len: usize,
    kv_len: usize,
    dim: usize,
    has_mask: bool,
) -> Option<(SdpaMask, i64, SdpaMask)> {
    let crate::Pattern::SelfExtend { neighbor, .. } = pattern else {
        return None;
    };
    let near = sdpa_mask(
        &crate::Pattern::Causal,
        q_pos0,
        k_pos0,
        q_len,
        kv_len,
        dim,
        has_mask,
    )?;
    let shift = q_pos0 as i64 - k_pos0 as i64 - (*neighbor).max(1) as i64;
    Some((
        near,
        (*neighbor).max(1) as i64,
        SdpaMask::CausalShifted { shift },
    ))
}

/// Appends tensors (fresh uids for intermediates) and operations.
struct Builder {
    g: SdpaGraph,
    next: i64,
}

impl Builder {
    fn tensor(&mut self, uid: i64, dtype: DataType, dims: [i64; 4], strides: [i64; 4]) -> i64 {
        self.g.tensors.push(TensorDesc {
            uid,
            dtype,
            dims,
            strides,
            is_virtual: false,
            by_value: false,
        });
        uid
    }

    /// A by-value scalar, `[1, 1, 1, 1]` as the frontend expands its fused scalars.
    fn scalar(&mut self, uid: i64, dtype: DataType) -> i64 {
        self.g.tensors.push(TensorDesc {
            uid,
            dtype,
            dims: [1; 4],
            strides: [1; 4],
            is_virtual: false,
            by_value: true,
        });
        uid
    }

    /// A virtual intermediate of these dims, packed.
    fn virt(&mut self, dtype: DataType, dims: [i64; 4]) -> i64 {
        self.next += 1;
        let strides = [dims[1] * dims[2] * dims[3], dims[2] * dims[3], dims[3], 1];
        self.g.tensors.push(TensorDesc {
            uid: self.next,
            dtype,
            dims,
            strides,
            is_virtual: true,
            by_value: false,
        });
        self.next
    }

    /// The end of a band mask: the scores `x` where `compare(a, b)` holds, -inf elsewhere.
    fn band(
        &mut self,
        compare: Pointwise,
        (a, b): (i64, i64),
        x: i64,
        neg_inf: i64,
        scores: [i64; 4],
    ) -> i64 {
        use DataType::{Boolean, Float};
        let keep = self.pointwise(compare, Float, a, Some(b), None, Boolean, scores);
        self.pointwise(
            Pointwise::BinarySelect,
            Float,
            x,
            Some(neg_inf),
            Some(keep),
            Float,
            scores,
        )
    }

    /// `y = mode(x[, b[, t]])` into a new virtual tensor of `dtype` and `dims`.
    #[allow(clippy::too_many_arguments)]
    fn pointwise(
        &mut self,
        mode: Pointwise,
        precision: DataType,
        x: i64,
        b: Option<i64>,
        t: Option<i64>,
        dtype: DataType,
        dims: [i64; 4],
    ) -> i64 {
        let y = self.virt(dtype, dims);
        self.g.ops.push(Op::Pointwise {
            mode,
            precision,
            x,
            b,
            t,
            y,
            axis: None,
        });
        y
    }
}

/// Builds the graph of `key`, mirroring cudnn-frontend's composite SDPA forward for cuDNN
/// below 9.21 (docs/plans/cudnn-sdpa.md, 2.3 and 2.4): bmm1, scale, the causal mask (its
/// index generators, the bottom-right shift, compare, select), softmax with its statistics
/// (max, subtract, exp, sum, log, add: always emitted, the statistics virtual), and bmm2 on the
/// probabilities in the input type.
pub(crate) fn sdpa_graph(key: &SdpaKey) -> SdpaGraph {
    use DataType::{Float, Int32};
    let SdpaKey {
        dtype,
        batch: b,
        heads: h,
        kv_heads: hk,
        q_len: sq,
        kv_len: skv,
        kv_stride,
        dim: d,
        mask,
        window,
        stats,
        batch_layout,
    } = *key;
    let mut g = Builder {
        g: SdpaGraph {
            tensors: Vec::new(),
            ops: Vec::new(),
        },
        next: 100,
    };
    let kv_head = kv_stride * d;
    // Elements from one batch entry to the next, and from one query head to the next.
    let (q_entry, kv_entry, q_head) = match batch_layout {
        SdpaBatch::Packed => (h * sq * d, hk * kv_head, sq * d),
        SdpaBatch::Chunks { step, q_head_rows } => (step * d, step * d, q_head_rows * d),
    };
    let q = g.tensor(uid::Q, dtype, [b, h, sq, d], [q_entry, q_head, d, 1]);
    // K described transposed, (b, kv heads, d, kv_len): K's last two strides swapped.
    let kt = g.tensor(uid::KT, dtype, [b, hk, d, skv], [kv_entry, kv_head, 1, d]);
    let v = g.tensor(uid::V, dtype, [b, hk, skv, d], [kv_entry, kv_head, d, 1]);
    let o = g.tensor(uid::O, dtype, [b, h, sq, d], [q_entry, q_head, d, 1]);
    let scale = g.scalar(uid::SCALE, Float);
    let scores = [b, h, sq, skv];
    let rows = [b, h, sq, 1];
    let s = g.virt(Float, scores);
    g.g.ops.push(Op::Matmul { a: q, b: kt, c: s });
    let s1 = g.pointwise(Pointwise::Mul, Float, s, Some(scale), None, Float, scores);
    let mut masked = s1;
    if mask != SdpaMask::None {
        let neg_inf = g.scalar(uid::NEG_INF, Float);
        // Row and column indices of the scores a band mask is given.
        let index = |g: &mut Builder, x, axis| {
            let y = g.virt(Int32, scores);
            g.g.ops.push(Op::Pointwise {
                mode: Pointwise::GenIndex,
                precision: Float,
                x,
                b: None,
                t: None,
                y,
                axis: Some(axis),
            });
            y
        };
        let row = index(&mut g, s1, 2);
        let col = index(&mut g, s1, 3);
        let mut right = row;
        if mask == SdpaMask::CausalBottomRight {
            let kv_len = g.scalar(uid::KV_LEN, Int32);
            let q_len = g.scalar(uid::Q_LEN, Int32);
            let r1 = g.pointwise(
                Pointwise::Add,
                Int32,
                row,
                Some(kv_len),
                None,
                Int32,
                scores,
            );
            right = g.pointwise(Pointwise::Sub, Int32, r1, Some(q_len), None, Int32, scores);
        }
        if let SdpaMask::CausalShifted { .. } = mask {
            let shift = g.scalar(uid::SHIFT, Int32);
            right = g.pointwise(Pointwise::Add, Int32, row, Some(shift), None, Int32, scores);
        }
        masked = g.band(Pointwise::CmpGe, (right, col), s1, neg_inf, scores);
        if window > 0 {
            // The left bound, a band mask of its own (its index generators and its -inf):
            // key column c kept where c + left > row r.
            let neg_inf = g.scalar(uid::NEG_INF_WINDOW, Float);
            let left = g.scalar(uid::LEFT_BOUND, Float);
            let row = index(&mut g, masked, 2);
            let col = index(&mut g, masked, 3);
            let shifted = g.pointwise(Pointwise::Add, Float, col, Some(left), None, Float, scores);
            masked = g.band(Pointwise::CmpGt, (shifted, row), masked, neg_inf, scores);
        }
    }
    let max = g.virt(Float, rows);
    g.g.ops.push(Op::Reduction {
        max: true,
        x: masked,
        y: max,
    });
    let z = g.pointwise(
        Pointwise::Sub,
        Float,
        masked,
        Some(max),
        None,
        Float,
        scores,
    );
    let e = g.pointwise(Pointwise::Exp, Float, z, None, None, Float, scores);
    let sum = g.virt(Float, rows);
    g.g.ops.push(Op::Reduction {
        max: false,
        x: e,
        y: sum,
    });
    let log = g.pointwise(Pointwise::Log, Float, sum, None, None, Float, rows);
    let lse = g.pointwise(Pointwise::Add, Float, max, Some(log), None, Float, rows);
    if stats {
        // The statistics written out: the last row-shaped tensor made real.
        let t =
            g.g.tensors
                .iter_mut()
                .find(|t| t.uid == lse)
                .expect("statistics");
        t.is_virtual = false;
        t.uid = uid::STATS;
        if let Some(Op::Pointwise { y, .. }) = g.g.ops.last_mut() {
            *y = uid::STATS;
        }
    }
    // The probabilities in the input type: bmm2 takes its A operand as the I/O type.
    let p = g.pointwise(Pointwise::Div, Float, e, Some(sum), None, dtype, scores);
    g.g.ops.push(Op::Matmul { a: p, b: v, c: o });
    g.g
}

#[cfg(test)]
#[path = "sdpa_graph_tests.rs"]
mod tests;
