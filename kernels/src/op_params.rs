//! What each op is given and the shapes it accepts: the ops' structs and their checks, shared
//! by the CPU paths ([`crate::ops`]) and the CUDA ones (`crate::cuda`), which both take them
//! from here.

use candle_core::{bail, Layout, Result, Tensor};

use crate::cpu::{AttnDims, AttnPositions};
use crate::pattern::Pattern;

/// Where the rows of keys or values `(b, kv_heads, t, d)` lie in their storage: the offset of
/// the first element and the rows from one head to the next. Packed tensors qualify, and so
/// do views of a KV cache's buffer `(b, kv_heads, capacity, d)`, which is how a cache written in
/// place is read without copying it; `None` for any other layout.
pub(crate) fn kv_rows(l: &Layout) -> Option<(usize, usize)> {
    let (b, h, t, d) = l.shape().dims4().ok()?;
    let st = l.stride();
    if d == 0 || (d > 1 && st[3] != 1) || (t > 1 && st[2] != d) {
        return None;
    }
    let head = match (b, h) {
        (_, 2..) => st[1],
        (2.., 1) => st[0],
        _ => t * d,
    };
    if head % d != 0 || head / d < t || (b > 1 && h > 1 && st[0] != h * head) {
        return None;
    }
    Some((l.start_offset(), head / d))
}

/// Options of [`crate::attention`].
#[derive(Debug, Clone)]
pub struct AttentionOptions {
    /// The pattern.
    pub pattern: Pattern,
    /// Absolute position of the first query row.
    pub q_pos0: u64,
    /// Absolute position of the first key row.
    pub k_pos0: u64,
    /// Score scale; `None`: `1 / sqrt(dim)`.
    pub scale: Option<f32>,
    /// SelfExtend: queries rotated at grouped positions (shaped as `q`).
    pub q_grouped: Option<Tensor>,
    /// SelfExtend: keys rotated at grouped positions (shaped as `k`).
    pub k_grouped: Option<Tensor>,
    /// `(batch, kv_len)` u8: 0 marks a padding key.
    pub key_mask: Option<Tensor>,
}

impl AttentionOptions {
    /// Options for `pattern` with rows starting at position 0 and no extras.
    pub fn new(pattern: Pattern) -> Self {
        Self {
            pattern,
            q_pos0: 0,
            k_pos0: 0,
            scale: None,
            q_grouped: None,
            k_grouped: None,
            key_mask: None,
        }
    }
}

pub(crate) struct AttentionOp {
    pub(crate) opts: AttentionOptions,
}

impl AttentionOp {
    pub(crate) fn dims(&self, lq: &Layout, lk: &Layout, lv: &Layout) -> Result<AttnDims> {
        let (batch, heads, q_len, dim) = lq.shape().dims4()?;
        let (kb, kv_heads, kv_len, kd) = lk.shape().dims4()?;
        if kb != batch || kd != dim || lv.shape() != lk.shape() || kv_heads == 0 {
            bail!(
                "attention: q {:?}, k {:?}, v {:?} do not fit (b, h, s, d) / (b, kv, t, d)",
                lq.shape(),
                lk.shape(),
                lv.shape()
            )
        }
        let kv_stride = match (kv_rows(lk), kv_rows(lv)) {
            (Some((_, a)), Some((_, b))) if a == b => a,
            _ => bail!(
                "attention: keys {lk:?} and values {lv:?} must be packed or views of a KV cache with the same capacity"
            ),
        };
        if heads % kv_heads != 0 {
            bail!("attention: {heads} query heads are not a multiple of {kv_heads} kv heads")
        }
        if let Pattern::Scca(rules) = &self.opts.pattern {
            if rules.len() != heads {
                bail!(
                    "attention: {} SCCA head rules for {heads} heads",
                    rules.len()
                )
            }
        }
        Ok(AttnDims {
            batch,
            heads,
            kv_heads,
            q_len,
            kv_len,
            kv_stride,
            dim,
        })
    }

    /// How many elements of keys (or values) from the first one the kernel reads.
    pub(crate) fn kv_span(dims: &AttnDims) -> usize {
        ((dims.batch * dims.kv_heads - 1) * dims.kv_stride + dims.kv_len) * dims.dim
    }

    pub(crate) fn positions(&self, dim: usize) -> AttnPositions {
        AttnPositions {
            q_pos0: self.opts.q_pos0,
            k_pos0: self.opts.k_pos0,
            scale: self.opts.scale.unwrap_or(1.0 / (dim as f32).sqrt()),
        }
    }
}

pub(crate) struct RopeOp {
    pub(crate) inv_freq: Vec<f32>,
    pub(crate) factor: f32,
}

impl RopeOp {
    pub(crate) fn dims(
        &self,
        lq: &Layout,
        lk: &Layout,
        lp: &Layout,
    ) -> Result<(usize, usize, usize, usize, usize, bool)> {
        let (b, h, s, d) = lq.shape().dims4()?;
        let (kb, hk, ks, kd) = lk.shape().dims4()?;
        if kb != b || ks != s || kd != d || d % 2 != 0 || self.inv_freq.len() != d / 2 {
            bail!(
                "rope: q {:?} and k {:?} must be (b, h, s, d) with the same b, s and even d = 2 * {}",
                lq.shape(),
                lk.shape(),
                self.inv_freq.len()
            )
        }
        let per_row = match lp.shape().dims() {
            [n] if *n == s => false,
            [pb, n] if *pb == b && *n == s => true,
            other => bail!("rope: positions {other:?}, expected [{s}] or [{b}, {s}]"),
        };
        Ok((b, h, hk, s, d, per_row))
    }
}

pub(crate) struct RmsNormOp {
    pub(crate) eps: f32,
}

impl RmsNormOp {
    pub(crate) fn dims(&self, lx: &Layout, lr: &Layout, lw: &Layout) -> Result<(usize, usize)> {
        let dim = *lx.shape().dims().last().unwrap_or(&0);
        if lx.shape() != lr.shape() || lw.shape().dims() != [dim] || dim == 0 {
            bail!(
                "rms_norm_residual: x {:?}, residual {:?}, weight {:?}",
                lx.shape(),
                lr.shape(),
                lw.shape()
            )
        }
        Ok((lx.shape().elem_count() / dim, dim))
    }
}
