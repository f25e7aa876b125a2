//! The attention the CPU runs (calls of [`TILED_ROWS`] query rows or more go to
//! [`super::tiled`]): [`super::attention`]'s arithmetic (tiles of [`TILE`] keys, an
//! online softmax, f32 accumulation, every pattern) made fast. Heads and blocks of query rows
//! run on the thread pool; the query heads that share a key head read each key and value once
//! (grouped-query attention; SCCA's heads differ and run alone); keys and values are read where
//! they lie (a KV cache's buffer, never copied); and the dot products and value updates are vectorised (AVX2 + FMA picked at
//! run time). Equal to the reference up to rounding (tested for every pattern).

use rayon::prelude::*;

use super::math;
use super::tiled::{PackedKeys, TileIsa, Tiled, QUERY_BLOCK as TILED_BLOCK, TILED_ROWS};
use super::{AttnDims, AttnExtras, AttnPositions, OutPtr};
use crate::pattern::{key_range, visible, Pattern, TILE};

/// Query rows per task.
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
    attention_blocked_on(TileIsa::best(), q, k, v, dims, pos, pattern, extras)
}

/// [`attention_blocked`] with the tiled path on `isa` (for tests and probes of each one;
/// `isa` must be available on this CPU, else the portable form runs).
#[allow(clippy::too_many_arguments)]
pub fn attention_blocked_on(
    isa: TileIsa,
    q: &[f32],
    k: &[f32],
    v: &[f32],
    dims: AttnDims,
    pos: AttnPositions,
    pattern: &Pattern,
    extras: AttnExtras<'_>,
) -> Vec<f32> {
    let isa = if isa.available() {
        isa
    } else {
        TileIsa::Portable
    };
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
    let ptr = OutPtr(out.as_mut_ptr());
    if q_len >= TILED_ROWS {
        let tiled = Tiled {
            isa,
            q,
            v,
            dims,
            pos,
            pattern,
            extras,
            keys: PackedKeys::pack(k, dims, pos.k_pos0),
            grouped: match (pattern, extras.k_grouped) {
                (Pattern::SelfExtend { .. }, Some(kg)) => {
                    Some(PackedKeys::pack(kg, dims, pos.k_pos0))
                }
                _ => None,
            },
        };
        let tasks = Tasks::new(dims, pattern, TILED_BLOCK);
        (0..tasks.count()).into_par_iter().for_each(|i| {
            let t = tasks.get(i);
            // SAFETY: each task writes its own heads' rows `r0..r1`, inside `out`.
            unsafe { tiled.run(t.b, t.h0, tasks.group, t.r0, t.r1, ptr) };
        });
        return out;
    }
    let tasks = Tasks::new(dims, pattern, QUERY_BLOCK);
    let run = |i: usize| {
        let t = tasks.get(i);
        let rows = Rows {
            q,
            k,
            v,
            dims,
            pos,
            pattern,
            extras,
            b: t.b,
            h0: t.h0,
            group: tasks.group,
        };
        // SAFETY: each task writes its own heads' rows `r0..r1`, inside `out`.
        unsafe { rows.run(t.r0, t.r1, ptr) };
    };
    if batch * heads * q_len * dims.kv_len * dim < 1 << 15 {
        (0..tasks.count()).for_each(run);
    } else {
        (0..tasks.count()).into_par_iter().for_each(run);
    }
    out
}

/// How a call splits into tasks on the thread pool: blocks of `block` query rows of `group`
/// heads that share a key head. All the heads of a key head attend together, unless their key
/// ranges differ (SCCA) or there would be too few tasks to keep the threads busy (a decoding
/// step of a model with three key heads on two threads: measured slower grouped).
struct Tasks {
    heads: usize,
    q_len: usize,
    block: usize,
    blocks: usize,
    group: usize,
    groups: usize,
}

/// One task: query rows `r0..r1` of heads `h0..h0 + group` of batch row `b`.
struct Task {
    b: usize,
    h0: usize,
    r0: usize,
    r1: usize,
}

impl Tasks {
    fn new(dims: AttnDims, pattern: &Pattern, block: usize) -> Self {
        let AttnDims {
            batch,
            heads,
            kv_heads,
            q_len,
            ..
        } = dims;
        let blocks = q_len.div_ceil(block);
        let group = if matches!(pattern, Pattern::Scca(_))
            || batch * kv_heads * blocks < 4 * rayon::current_num_threads()
        {
            1
        } else {
            heads / kv_heads
        };
        Self {
            heads,
            q_len,
            block,
            blocks,
            group,
            groups: batch * heads / group,
        }
    }

    fn count(&self) -> usize {
        self.groups * self.blocks
    }

    fn get(&self, task: usize) -> Task {
        let (g, blk) = (task / self.blocks, task % self.blocks);
        let r0 = blk * self.block;
        Task {
            b: g * self.group / self.heads,
            h0: g * self.group % self.heads,
            r0,
            r1: (r0 + self.block).min(self.q_len),
        }
    }
}

/// The query rows of `group` heads from `h0` (sharing a key head) and everything they read.
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
    h0: usize,
    group: usize,
}

impl Rows<'_> {
    /// Query rows `r0..r1` of these heads into `out` `(batch, heads, q_len, dim)`.
    ///
    /// # Safety
    /// No one else writes these rows of `out`.
    unsafe fn run(&self, r0: usize, r1: usize, out: OutPtr) {
        #[cfg(target_arch = "x86_64")]
        if math::has_avx2() {
            // SAFETY: the CPU supports AVX2 and FMA.
            return unsafe { self.run_avx2(r0, r1, out) };
        }
        unsafe { self.run_generic(r0, r1, out) }
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn run_avx2(&self, r0: usize, r1: usize, out: OutPtr) {
        unsafe { self.run_generic(r0, r1, out) }
    }

    #[inline(always)]
    unsafe fn run_generic(&self, r0: usize, r1: usize, out: OutPtr) {
        let AttnDims {
            heads,
            kv_heads,
            q_len,
            kv_len,
            kv_stride,
            dim,
            ..
        } = self.dims;
        let (b, h0, n, pos, pattern) = (self.b, self.h0, self.group, self.pos, self.pattern);
        let kbase = (b * kv_heads + h0 / (heads / kv_heads)) * kv_stride * dim;
        let (near, group_extend) = match pattern {
            Pattern::SelfExtend { neighbor, .. } => (*neighbor as u64, true),
            _ => (u64::MAX, false),
        };
        // Causal attention sees its whole key range: no per-key test.
        let every_key =
            matches!(pattern, Pattern::Causal | Pattern::Cross) && self.extras.key_mask.is_none();
        let mut scores = vec![0f32; n * TILE];
        let mut acc = vec![0f32; n * dim];
        let mut state = vec![(f32::NEG_INFINITY, 0f32); n];
        let mut tile_max = vec![f32::NEG_INFINITY; n];
        for r in r0..r1 {
            let qoff = |g: usize| ((b * heads + h0 + g) * q_len + r) * dim;
            let i = pos.q_pos0 + r as u64;
            let (lo, hi) = key_range(pattern, h0, i);
            let lo = lo.max(pos.k_pos0);
            let hi = hi.min(pos.k_pos0 + kv_len as u64);
            state.fill((f32::NEG_INFINITY, 0.0));
            acc.fill(0.0);
            let (first, last) = if lo < hi {
                ((lo - pos.k_pos0) as usize, (hi - pos.k_pos0) as usize)
            } else {
                (0, 0)
            };
            let mut t0 = first - first % TILE;
            while t0 < last {
                let (j0, j1) = (t0.max(first), (t0 + TILE).min(last));
                tile_max.fill(f32::NEG_INFINITY);
                for kr in j0..j1 {
                    let p = pos.k_pos0 + kr as u64;
                    let seen = every_key
                        || (visible(pattern, h0, i, p)
                            && self.extras.key_mask.is_none_or(|km| km[b * kv_len + kr]));
                    let koff = kbase + kr * dim;
                    let grouped = group_extend && i - p >= near;
                    let (qs, ks) = if grouped {
                        (
                            self.extras.q_grouped.expect("q_grouped"),
                            &self.extras.k_grouped.expect("k_grouped")[koff..koff + dim],
                        )
                    } else {
                        (self.q, &self.k[koff..koff + dim])
                    };
                    for g in 0..n {
                        let s = &mut scores[g * TILE + kr - t0];
                        if !seen {
                            *s = f32::NEG_INFINITY;
                            continue;
                        }
                        *s = math::dot_portable(&qs[qoff(g)..qoff(g) + dim], ks) * pos.scale;
                        tile_max[g] = tile_max[g].max(*s);
                    }
                }
                let vtile = &self.v[kbase + j0 * dim..kbase + j1 * dim];
                for g in 0..n {
                    if tile_max[g] > f32::NEG_INFINITY {
                        let es = &mut scores[g * TILE + j0 - t0..g * TILE + j1 - t0];
                        let (m, l) = &mut state[g];
                        update(
                            es,
                            vtile,
                            &mut acc[g * dim..(g + 1) * dim],
                            m,
                            l,
                            tile_max[g],
                        );
                    }
                }
                t0 += TILE;
            }
            for g in 0..n {
                let l = state[g].1;
                if l > 0.0 {
                    let inv = 1.0 / l;
                    // SAFETY: this row of head h0 + g is this task's alone (see `run`).
                    let o = unsafe { std::slice::from_raw_parts_mut(out.0.add(qoff(g)), dim) };
                    for (o, a) in o.iter_mut().zip(&acc[g * dim..(g + 1) * dim]) {
                        *o = a * inv;
                    }
                }
            }
        }
    }
}

/// One tile of the online softmax: `es` holds the tile's scores (`-inf`: masked), `vtile` its
/// value rows; `acc`, `m` and `l` move to include them.
#[inline(always)]
fn update(es: &mut [f32], vtile: &[f32], acc: &mut [f32], m: &mut f32, l: &mut f32, tile_max: f32) {
    let dim = acc.len();
    let m_new = m.max(tile_max);
    let corr = math::exp(*m - m_new);
    // The tile's weights, vectorised (masked keys weigh exactly 0).
    for s in es.iter_mut() {
        *s = if *s == f32::NEG_INFINITY {
            0.0
        } else {
            math::exp(*s - m_new)
        };
    }
    *l = *l * corr + math::sum(es);
    // acc = acc * corr + Σ e_j v_j, eight dimensions at a time, summed over the tile's keys in
    // registers.
    let mut c = 0;
    while c + 8 <= dim {
        let mut lanes = [0f32; 8];
        for (&e, vr) in es.iter().zip(vtile.chunks_exact(dim)) {
            let vr = &vr[c..c + 8];
            for x in 0..8 {
                lanes[x] += e * vr[x];
            }
        }
        for (a, lane) in acc[c..c + 8].iter_mut().zip(lanes) {
            *a = *a * corr + lane;
        }
        c += 8;
    }
    for c in c..dim {
        let sum: f32 = es
            .iter()
            .zip(vtile.chunks_exact(dim))
            .map(|(&e, vr)| e * vr[c])
            .sum();
        acc[c] = acc[c] * corr + sum;
    }
    *m = m_new;
}
