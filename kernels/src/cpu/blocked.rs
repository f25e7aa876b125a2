//! The attention the CPU runs: [`super::attention`]'s arithmetic (tiles of [`TILE`] keys, an
//! online softmax, f32 accumulation, every pattern) made fast. Heads and blocks of query rows
//! run on the thread pool, keys and values are read where they lie (a KV cache's buffer,
//! never copied), and the dot products and value updates are vectorised (AVX2 + FMA picked at
//! run time). Equal to the reference up to rounding (tested for every pattern).

use rayon::prelude::*;

use super::math;
use super::{AttnDims, AttnExtras, AttnPositions};
use crate::pattern::{key_range, visible, Pattern, TILE};

/// Query rows per task (one for a decoding step: its heads are the tasks).
const QUERY_BLOCK: usize = 16;

/// [`super::attention`], threaded and vectorised. Returns `(batch, heads, q_len, dim)`.
pub fn attention_blocked(
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
        q_len,
        dim,
        ..
    } = dims;
    let mut out = vec![0f32; batch * heads * q_len * dim];
    if out.is_empty() {
        return out;
    }
    let rows = |bh: usize| Rows {
        q,
        k,
        v,
        dims,
        pos,
        pattern,
        extras,
        b: bh / heads,
        h: bh % heads,
    };
    let block = QUERY_BLOCK.min(q_len);
    let head_len = q_len * dim;
    if batch * heads * q_len * dims.kv_len * dim < 1 << 15 {
        for (bh, head) in out.chunks_mut(head_len).enumerate() {
            for (blk, o) in head.chunks_mut(block * dim).enumerate() {
                rows(bh).run(blk * block, o);
            }
        }
    } else {
        out.par_chunks_mut(head_len)
            .enumerate()
            .for_each(|(bh, head)| {
                head.par_chunks_mut(block * dim)
                    .enumerate()
                    .for_each(|(blk, o)| rows(bh).run(blk * block, o));
            });
    }
    out
}

/// One head's query rows and everything they read.
#[derive(Clone, Copy)]
struct Rows<'a> {
    q: &'a [f32],
    k: &'a [f32],
    v: &'a [f32],
    dims: AttnDims,
    pos: AttnPositions,
    pattern: &'a Pattern,
    extras: AttnExtras<'a>,
    b: usize,
    h: usize,
}

impl Rows<'_> {
    /// Query rows `r0..` of this head into `out` (whole rows of `dim`).
    fn run(&self, r0: usize, out: &mut [f32]) {
        #[cfg(target_arch = "x86_64")]
        if math::has_avx2() {
            // SAFETY: the CPU supports AVX2 and FMA.
            return unsafe { self.run_avx2(r0, out) };
        }
        self.run_generic(r0, out)
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn run_avx2(&self, r0: usize, out: &mut [f32]) {
        self.run_generic(r0, out)
    }

    #[inline(always)]
    fn run_generic(&self, r0: usize, out: &mut [f32]) {
        let AttnDims {
            heads,
            kv_heads,
            q_len,
            kv_len,
            kv_stride,
            dim,
            ..
        } = self.dims;
        let (b, h, pos, pattern) = (self.b, self.h, self.pos, self.pattern);
        let kbase = (b * kv_heads + h / (heads / kv_heads)) * kv_stride * dim;
        let (near, group_extend) = match pattern {
            Pattern::SelfExtend { neighbor, .. } => (*neighbor as u64, true),
            _ => (u64::MAX, false),
        };
        // Causal attention sees its whole key range: no per-key test.
        let every_key =
            matches!(pattern, Pattern::Causal | Pattern::Cross) && self.extras.key_mask.is_none();
        let mut scores = [0f32; TILE];
        let mut acc = vec![0f32; dim];
        for (n, o) in out.chunks_exact_mut(dim).enumerate() {
            let r = r0 + n;
            let qoff = ((b * heads + h) * q_len + r) * dim;
            let qrow = &self.q[qoff..qoff + dim];
            let i = pos.q_pos0 + r as u64;
            let (lo, hi) = key_range(pattern, h, i);
            let lo = lo.max(pos.k_pos0);
            let hi = hi.min(pos.k_pos0 + kv_len as u64);
            let (mut m, mut l) = (f32::NEG_INFINITY, 0f32);
            acc.fill(0.0);
            if lo < hi {
                let (first, last) = ((lo - pos.k_pos0) as usize, (hi - pos.k_pos0) as usize);
                let mut t0 = first - first % TILE;
                while t0 < last {
                    let (j0, j1) = (t0.max(first), (t0 + TILE).min(last));
                    let mut tile_max = f32::NEG_INFINITY;
                    for kr in j0..j1 {
                        let s = &mut scores[kr - t0];
                        let p = pos.k_pos0 + kr as u64;
                        if !every_key
                            && (!visible(pattern, h, i, p)
                                || self.extras.key_mask.is_some_and(|km| !km[b * kv_len + kr]))
                        {
                            *s = f32::NEG_INFINITY;
                            continue;
                        }
                        let koff = kbase + kr * dim;
                        let (qs, ks) = if group_extend && i - p >= near {
                            (
                                &self.extras.q_grouped.expect("q_grouped")[qoff..qoff + dim],
                                &self.extras.k_grouped.expect("k_grouped")[koff..koff + dim],
                            )
                        } else {
                            (qrow, &self.k[koff..koff + dim])
                        };
                        *s = dot(qs, ks) * pos.scale;
                        tile_max = tile_max.max(*s);
                    }
                    if tile_max > f32::NEG_INFINITY {
                        let m_new = m.max(tile_max);
                        let corr = math::exp(m - m_new);
                        l *= corr;
                        if corr != 1.0 {
                            acc.iter_mut().for_each(|a| *a *= corr);
                        }
                        for kr in j0..j1 {
                            let s = scores[kr - t0];
                            if s == f32::NEG_INFINITY {
                                continue;
                            }
                            let e = math::exp(s - m_new);
                            l += e;
                            let voff = kbase + kr * dim;
                            for (a, &x) in acc.iter_mut().zip(&self.v[voff..voff + dim]) {
                                *a += e * x;
                            }
                        }
                        m = m_new;
                    }
                    t0 += TILE;
                }
            }
            if l > 0.0 {
                let inv = 1.0 / l;
                for (o, a) in o.iter_mut().zip(&acc) {
                    *o = a * inv;
                }
            }
        }
    }
}

/// Dot product with eight lanes (vectorised where inlined into the AVX2 build).
#[inline(always)]
fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut lanes = [0f32; 8];
    let (ca, cb) = (a.chunks_exact(8), b.chunks_exact(8));
    let tail: f32 = ca
        .remainder()
        .iter()
        .zip(cb.remainder())
        .map(|(x, y)| x * y)
        .sum();
    for (x, y) in ca.zip(cb) {
        for i in 0..8 {
            lanes[i] += x[i] * y[i];
        }
    }
    lanes.iter().sum::<f32>() + tail
}
