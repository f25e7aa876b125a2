//! CPU references of the kernels, on f32 data in contiguous `(batch, heads, seq, dim)` layout.
//! They follow the CUDA kernels' structure (tiles of [`TILE`] keys, online softmax with f32
//! accumulation, tiles outside the pattern's key range skipped) so that a GPU result can be
//! compared with them directly.

pub mod amx;
mod blocked;
pub mod int8;
mod kv;
pub mod math;
mod pool;
pub mod qmatmul;
mod rows;
mod tiled;

pub use blocked::{attention_blocked, attention_blocked_on, attention_rows_many, RowsCall};
pub use kv::KvElement;
pub use pool::on_compute_pool;
pub use tiled::{TileIsa, TILED_ROWS};

use crate::pattern::{key_range, visible, Pattern, TILE};

/// An output buffer shared by the tasks of a threaded kernel, each writing elements no other
/// task writes.
#[derive(Clone, Copy)]
pub(crate) struct OutPtr(pub(crate) *mut f32);
// SAFETY: the kernels that share one give each task disjoint elements.
unsafe impl Send for OutPtr {}
unsafe impl Sync for OutPtr {}

/// Shapes of an attention call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AttnDims {
    /// Batch.
    pub batch: usize,
    /// Query heads.
    pub heads: usize,
    /// Key/value heads (divides `heads`).
    pub kv_heads: usize,
    /// Query rows.
    pub q_len: usize,
    /// Key rows.
    pub kv_len: usize,
    /// Rows from one key/value head to the next in `k`, `v` and the grouped keys: `kv_len`
    /// when packed, a KV cache's capacity when they are views of its buffer (written in place).
    pub kv_stride: usize,
    /// Head width.
    pub dim: usize,
}

/// Where the rows sit in the sequence, and the softmax scale.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AttnPositions {
    /// Absolute position of query row 0.
    pub q_pos0: u64,
    /// Absolute position of key row 0 (a Zebra local layer's trimmed cache starts late).
    pub k_pos0: u64,
    /// Score scale (usually `1 / sqrt(dim)`).
    pub scale: f32,
}

/// The extra inputs some patterns need; `E`: the keys' element type.
#[derive(Debug, Clone, Copy)]
pub struct AttnExtras<'a, E = f32> {
    /// SelfExtend: queries rotated at grouped positions, shaped as `q`.
    pub q_grouped: Option<&'a [f32]>,
    /// SelfExtend: keys rotated at grouped positions, shaped as `k`.
    pub k_grouped: Option<&'a [E]>,
    /// `(batch, kv_len)`: false marks a padding key.
    pub key_mask: Option<&'a [bool]>,
}

impl<E> Default for AttnExtras<'_, E> {
    fn default() -> Self {
        Self {
            q_grouped: None,
            k_grouped: None,
            key_mask: None,
        }
    }
}

/// Tiled attention with an online softmax. Returns `(batch, heads, q_len, dim)`; a query row
/// that sees no key gets zeros.
pub fn attention(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    dims: AttnDims,
    pos: AttnPositions,
    pattern: &Pattern,
    extras: AttnExtras<'_>,
) -> Vec<f32> {
    let AttnDims {
        batch,
        heads,
        kv_heads,
        q_len,
        kv_len,
        kv_stride,
        dim,
    } = dims;
    let n_rep = heads / kv_heads;
    let mut out = vec![0f32; batch * heads * q_len * dim];
    let (near, group_extend) = match pattern {
        Pattern::SelfExtend { neighbor, .. } => (*neighbor as u64, true),
        _ => (u64::MAX, false),
    };
    let mut scores = [0f32; TILE];
    let mut acc = vec![0f32; dim];
    for b in 0..batch {
        for h in 0..heads {
            let kh = h / n_rep;
            let kbase = (b * kv_heads + kh) * kv_stride * dim;
            for r in 0..q_len {
                let qoff = ((b * heads + h) * q_len + r) * dim;
                let qrow = &q[qoff..qoff + dim];
                let i = pos.q_pos0 + r as u64;
                let (lo, hi) = key_range(pattern, h, i);
                let lo = lo.max(pos.k_pos0);
                let hi = hi.min(pos.k_pos0 + kv_len as u64);
                let (mut m, mut l) = (f32::NEG_INFINITY, 0f32);
                acc.iter_mut().for_each(|a| *a = 0.0);
                if lo < hi {
                    let (first, last) = ((lo - pos.k_pos0) as usize, (hi - pos.k_pos0) as usize);
                    let mut t0 = first - first % TILE;
                    while t0 < last {
                        let mut tile_max = f32::NEG_INFINITY;
                        for (j, s) in scores.iter_mut().enumerate() {
                            let kr = t0 + j;
                            *s = f32::NEG_INFINITY;
                            if kr < first || kr >= last {
                                continue;
                            }
                            let p = pos.k_pos0 + kr as u64;
                            if !visible(pattern, h, i, p)
                                || extras.key_mask.is_some_and(|km| !km[b * kv_len + kr])
                            {
                                continue;
                            }
                            let koff = kbase + kr * dim;
                            let (qs, ks) = if group_extend && i - p >= near {
                                (
                                    &extras.q_grouped.expect("q_grouped")[qoff..qoff + dim],
                                    &extras.k_grouped.expect("k_grouped")[koff..koff + dim],
                                )
                            } else {
                                (qrow, &k[koff..koff + dim])
                            };
                            let dot: f32 = qs.iter().zip(ks).map(|(a, b)| a * b).sum();
                            *s = dot * pos.scale;
                            tile_max = tile_max.max(*s);
                        }
                        if tile_max > f32::NEG_INFINITY {
                            let m_new = m.max(tile_max);
                            let corr = (m - m_new).exp();
                            l *= corr;
                            acc.iter_mut().for_each(|a| *a *= corr);
                            for (j, &s) in scores.iter().enumerate() {
                                if s == f32::NEG_INFINITY {
                                    continue;
                                }
                                let e = (s - m_new).exp();
                                l += e;
                                let voff = kbase + (t0 + j) * dim;
                                for (a, &x) in acc.iter_mut().zip(&v[voff..voff + dim]) {
                                    *a += e * x;
                                }
                            }
                            m = m_new;
                        }
                        t0 += TILE;
                    }
                }
                if l > 0.0 {
                    let o = &mut out[qoff..qoff + dim];
                    for (o, a) in o.iter_mut().zip(&acc) {
                        *o = a / l;
                    }
                }
            }
        }
    }
    out
}

/// RoPE inverse frequencies as Hugging Face computes them in f32:
/// `1 / base^(arange(0, dim, 2) / dim)`.
pub fn inv_freq(base: f64, dim: usize) -> Vec<f32> {
    let base = base as f32;
    (0..dim)
        .step_by(2)
        .map(|i| 1f32 / base.powf(i as f32 / dim as f32))
        .collect()
}

/// Rotates `x` `(batch, heads, seq, dim)` in place (rotate-half layout, as Llama):
/// angle = (position / factor) * inv_freq, positions `(batch, seq)`.
pub fn rope(
    x: &mut [f32],
    (batch, heads, seq, dim): (usize, usize, usize, usize),
    positions: &[u32],
    inv_freq: &[f32],
    factor: f32,
) {
    let half = dim / 2;
    for b in 0..batch {
        for h in 0..heads {
            for s in 0..seq {
                let p = positions[b * seq + s] as f32;
                let t = if factor == 1.0 { p } else { p / factor };
                let off = ((b * heads + h) * seq + s) * dim;
                for (f, &w) in inv_freq.iter().enumerate().take(half) {
                    let a = t * w;
                    let (sin, cos) = (a.sin(), a.cos());
                    let (x1, x2) = (x[off + f], x[off + f + half]);
                    x[off + f] = x1 * cos - x2 * sin;
                    x[off + f + half] = x1 * sin + x2 * cos;
                }
            }
        }
    }
}

/// `sum = x + residual`; `normed = sum / sqrt(mean(sum^2) + eps) * weight`, rows of `dim`.
/// Returns `(sum, normed)`.
pub fn rms_norm_residual(
    x: &[f32],
    residual: &[f32],
    weight: &[f32],
    eps: f32,
) -> (Vec<f32>, Vec<f32>) {
    let dim = weight.len();
    let sum: Vec<f32> = x.iter().zip(residual).map(|(a, b)| a + b).collect();
    let mut normed = vec![0f32; sum.len()];
    for (row, out) in sum.chunks(dim).zip(normed.chunks_mut(dim)) {
        let ms = row.iter().map(|v| v * v).sum::<f32>() / dim as f32;
        let inv = 1.0 / (ms + eps).sqrt();
        for ((o, &v), &w) in out.iter_mut().zip(row).zip(weight) {
            *o = v * inv * w;
        }
    }
    (sum, normed)
}
