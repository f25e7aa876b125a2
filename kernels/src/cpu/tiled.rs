//! The attention of prompt chunks on the CPU: blocks of query rows against tiles of
//! [`KEY_TILE`] keys, with an online softmax per row. Each key head's keys are transposed once
//! per call into tiles (`[dim][slot]`), so that a row's scores against a tile are `dim`
//! broadcast multiply-adds over whole vectors, with no horizontal sum per key; its value
//! update runs over whole rows of the tile in registers. The per-row path of
//! [`super::blocked`] (one dot product per key) stays for decoding steps, where a transpose
//! would cost as much as the step.
//!
//! Tiles are aligned to absolute key positions, and a row's scores, softmax and sums depend
//! only on the row and the keys it sees: the same row gives the same bits in any chunk and any
//! block of rows (what a prefix cache needs from a prompt read in other chunks).

use rayon::prelude::*;

use super::kv::KvElement;
use super::math;
use super::{AttnDims, AttnExtras, AttnPositions, OutPtr};
use crate::pattern::{key_range, visible, Pattern};

/// Keys per tile.
pub(super) const KEY_TILE: usize = 64;

/// Calls with at least this many query rows run the tiled path.
pub const TILED_ROWS: usize = 16;

/// Query rows per task.
pub(super) const QUERY_BLOCK: usize = 32;

/// Keys (or SelfExtend's grouped keys) of every key head, transposed per tile:
/// `[batch * kv_heads][tiles][dim][KEY_TILE]`, slot `x` of tile `t` holding the key at
/// absolute position `base + t * KEY_TILE + x` (zeros where there is none).
pub(super) struct PackedKeys {
    data: Vec<f32>,
    /// Absolute position of slot 0 of tile 0 (a multiple of [`KEY_TILE`]).
    pub(super) base: u64,
    /// Tiles per key head.
    pub(super) tiles: usize,
    dim: usize,
}

impl PackedKeys {
    pub(super) fn pack<E: KvElement>(k: &[E], dims: AttnDims, k_pos0: u64) -> Self {
        let AttnDims {
            batch,
            kv_heads,
            kv_len,
            kv_stride,
            dim,
            ..
        } = dims;
        let base = k_pos0 - k_pos0 % KEY_TILE as u64;
        let end = k_pos0 + kv_len as u64;
        let tiles = ((end - base) as usize).div_ceil(KEY_TILE);
        let mut data = vec![0f32; batch * kv_heads * tiles * dim * KEY_TILE];
        data.par_chunks_mut(dim * KEY_TILE)
            .enumerate()
            .for_each(|(idx, tile)| {
                let (head, t) = (idx / tiles, idx % tiles);
                let kbase = head * kv_stride * dim;
                for x in 0..KEY_TILE {
                    let p = base + (t * KEY_TILE + x) as u64;
                    if p < k_pos0 || p >= end {
                        continue;
                    }
                    let row = &k[kbase + (p - k_pos0) as usize * dim..][..dim];
                    for (c, &value) in row.iter().enumerate() {
                        tile[c * KEY_TILE + x] = value.into();
                    }
                }
            });
        Self {
            data,
            base,
            tiles,
            dim,
        }
    }

    /// Tile `t` of key head `head` (`b * kv_heads + h`).
    fn tile(&self, head: usize, t: usize) -> &[f32] {
        let size = self.dim * KEY_TILE;
        &self.data[(head * self.tiles + t) * size..][..size]
    }
}

/// The instruction sets the tiled path is written for. Each gives a row the same result in
/// any chunk; they differ from each other by rounding.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TileIsa {
    /// Plain Rust (any CPU).
    Portable,
    /// AVX2 and FMA, one row per pass over a tile.
    Avx2,
    /// AVX-512 F, four rows per pass over a tile.
    Avx512,
}

impl TileIsa {
    /// The fastest this CPU runs.
    pub fn best() -> Self {
        if math::has_avx512() {
            TileIsa::Avx512
        } else if math::has_avx2() {
            TileIsa::Avx2
        } else {
            TileIsa::Portable
        }
    }

    /// Whether this CPU runs it.
    pub fn available(self) -> bool {
        match self {
            TileIsa::Portable => true,
            TileIsa::Avx2 => math::has_avx2(),
            TileIsa::Avx512 => math::has_avx512(),
        }
    }
}

/// The inputs of one call, shared by its tasks.
pub(super) struct Tiled<'a, E> {
    pub(super) isa: TileIsa,
    pub(super) q: &'a [f32],
    pub(super) v: &'a [E],
    pub(super) dims: AttnDims,
    pub(super) pos: AttnPositions,
    pub(super) pattern: &'a Pattern,
    pub(super) extras: AttnExtras<'a, E>,
    pub(super) keys: PackedKeys,
    pub(super) grouped: Option<PackedKeys>,
}

impl<E: KvElement> Tiled<'_, E> {
    /// Query rows `r0..r1` of heads `h0..h0 + group` of batch row `b` into `out`.
    ///
    /// # Safety
    /// No one else writes these rows of `out`.
    pub(super) unsafe fn run(
        &self,
        b: usize,
        h0: usize,
        group: usize,
        r0: usize,
        r1: usize,
        out: OutPtr,
    ) {
        match self.isa {
            #[cfg(target_arch = "x86_64")]
            // SAFETY: `TileIsa::available` checked that the CPU supports AVX-512 F, AVX2, FMA.
            TileIsa::Avx512 => unsafe { self.run_avx512(b, h0, group, r0, r1, out) },
            #[cfg(target_arch = "x86_64")]
            // SAFETY: `TileIsa::available` checked that the CPU supports AVX2 and FMA.
            TileIsa::Avx2 => unsafe { self.run_avx2(b, h0, group, r0, r1, out) },
            _ => unsafe { self.run_generic::<Portable>(b, h0, group, r0, r1, out) },
        }
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f,avx2,fma")]
    unsafe fn run_avx512(
        &self,
        b: usize,
        h0: usize,
        group: usize,
        r0: usize,
        r1: usize,
        out: OutPtr,
    ) {
        unsafe { self.run_generic::<Avx512>(b, h0, group, r0, r1, out) }
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn run_avx2(
        &self,
        b: usize,
        h0: usize,
        group: usize,
        r0: usize,
        r1: usize,
        out: OutPtr,
    ) {
        unsafe { self.run_generic::<Avx2>(b, h0, group, r0, r1, out) }
    }

    #[inline(always)]
    unsafe fn run_generic<K: TileKernels>(
        &self,
        b: usize,
        h0: usize,
        group: usize,
        r0: usize,
        r1: usize,
        out: OutPtr,
    ) {
        let AttnDims {
            heads,
            kv_heads,
            q_len,
            kv_len,
            kv_stride,
            dim,
            ..
        } = self.dims;
        let pos = self.pos;
        let head = b * kv_heads + h0 / (heads / kv_heads);
        let vbase = head * kv_stride * dim;
        let near = match self.pattern {
            Pattern::SelfExtend { neighbor, .. } => Some(*neighbor as u64),
            _ => None,
        };
        // Patterns whose key range is exactly what a query sees (no per-key rule).
        let range_is_visible = matches!(
            self.pattern,
            Pattern::Causal | Pattern::Cross | Pattern::SelfExtend { .. }
        ) && self.extras.key_mask.is_none();
        let rows = r1 - r0;
        // Each row's absolute key range.
        let ranges: Vec<(u64, u64)> = (r0..r1)
            .map(|r| {
                let i = pos.q_pos0 + r as u64;
                let (lo, hi) = key_range(self.pattern, h0, i);
                (lo.max(pos.k_pos0), hi.min(pos.k_pos0 + kv_len as u64))
            })
            .collect();
        let Some(lo) = ranges.iter().filter(|(l, h)| l < h).map(|r| r.0).min() else {
            return;
        };
        let hi = ranges.iter().map(|r| r.1).max().unwrap_or(lo);
        let base = self.keys.base;
        let (t_first, t_last) = (
            ((lo - base) / KEY_TILE as u64) as usize,
            ((hi - 1 - base) / KEY_TILE as u64) as usize,
        );
        let mut acc = vec![0f32; group * rows * dim];
        let mut state = vec![(f32::NEG_INFINITY, 0f32); group * rows];
        let mut scores = [[0f32; KEY_TILE]; MAX_ROWS];
        let mut grouped = [[0f32; KEY_TILE]; MAX_ROWS];
        let mut weights = [[0f32; KEY_TILE]; MAX_ROWS];
        let mut corr = [1f32; MAX_ROWS];
        let mut lanes: Vec<Lane> = Vec::with_capacity(group * rows);
        let mut widened = Vec::new();
        let qoff = |g: usize, r: usize| ((b * heads + h0 + g) * q_len + r) * dim;
        for t in t_first..=t_last.min(self.keys.tiles - 1) {
            let tabs = base + (t * KEY_TILE) as u64;
            let kt = self.keys.tile(head, t);
            let kgt = self.grouped.as_ref().map(|g| g.tile(head, t));
            // The rows (of every head of the group) that see keys of this tile.
            lanes.clear();
            for (ri, &(rlo, rhi)) in ranges.iter().enumerate() {
                let (a, z) = (rlo.max(tabs), rhi.min(tabs + KEY_TILE as u64));
                if a >= z {
                    continue;
                }
                let i = pos.q_pos0 + (r0 + ri) as u64;
                let (xa, xz) = ((a - tabs) as usize, (z - tabs) as usize);
                // SelfExtend: keys at distance >= near use the grouped scores; slots before
                // `split` are those.
                let split = match near {
                    Some(n) if i + 1 >= n => ((i + 1 - n).clamp(a, z) - tabs) as usize,
                    _ => xa,
                };
                lanes.extend((0..group).map(|g| Lane {
                    row: g * rows + ri,
                    q: qoff(g, r0 + ri),
                    i,
                    xa,
                    xz,
                    split,
                }));
            }
            if lanes.is_empty() {
                continue;
            }
            // The tile's values as f32, widened once for all its lanes where they are f16.
            let kt0 = (tabs.max(pos.k_pos0) - pos.k_pos0) as usize;
            let kt1 =
                ((tabs + KEY_TILE as u64).min(pos.k_pos0 + kv_len as u64) - pos.k_pos0) as usize;
            let vt = E::as_f32(&self.v[vbase + kt0 * dim..vbase + kt1 * dim], &mut widened);
            for batch in lanes.chunks(K::ROWS) {
                let n = batch.len();
                if batch.iter().any(|l| l.split < l.xz) {
                    let qs = lane_rows(batch, self.q, dim);
                    K::scores(&qs[..n], kt, &mut scores[..n]);
                }
                if batch.iter().any(|l| l.split > l.xa) {
                    let qg = self.extras.q_grouped.expect("q_grouped");
                    let qs = lane_rows(batch, qg, dim);
                    K::scores(&qs[..n], kgt.expect("grouped keys"), &mut grouped[..n]);
                }
                for (j, lane) in batch.iter().enumerate() {
                    // Whole tiles of slots, -inf (then weight 0) outside the lane's keys, so
                    // that every loop has a fixed length and vectorises, and the batch's
                    // product adds nothing there.
                    let (xa, xz, split, i) = (lane.xa, lane.xz, lane.split, lane.i);
                    let w = &mut weights[j];
                    let (sj, gj) = (&scores[j], &grouped[j]);
                    for x in 0..KEY_TILE {
                        let s = if x < split { gj[x] } else { sj[x] } * pos.scale;
                        w[x] = if x >= xa && x < xz {
                            s
                        } else {
                            f32::NEG_INFINITY
                        };
                    }
                    if !range_is_visible {
                        for (x, s) in w.iter_mut().enumerate().take(xz).skip(xa) {
                            let p = tabs + x as u64;
                            let kr = (p - pos.k_pos0) as usize;
                            let seen = visible(self.pattern, h0, i, p)
                                && self.extras.key_mask.is_none_or(|km| km[b * kv_len + kr]);
                            if !seen {
                                *s = f32::NEG_INFINITY;
                            }
                        }
                    }
                    let tile_max = math::max(w);
                    if tile_max == f32::NEG_INFINITY {
                        // Nothing seen: weights 0, the accumulator kept as it is.
                        w.fill(0.0);
                        corr[j] = 1.0;
                        continue;
                    }
                    let (m, l) = &mut state[lane.row];
                    let m_new = m.max(tile_max);
                    corr[j] = math::exp(*m - m_new);
                    for s in w.iter_mut() {
                        // Computed for every slot and then chosen, so that the loop vectorises.
                        let e = math::exp(*s - m_new);
                        *s = if *s == f32::NEG_INFINITY { 0.0 } else { e };
                    }
                    *l = *l * corr[j] + math::sum(w);
                    *m = m_new;
                }
                let x0 = batch.iter().map(|l| l.xa).min().expect("a lane");
                let x1 = batch.iter().map(|l| l.xz).max().expect("a lane");
                let kr0 = (tabs + x0 as u64 - pos.k_pos0) as usize - kt0;
                let vtile = &vt[kr0 * dim..(kr0 + x1 - x0) * dim];
                let mut rows_of = [0usize; MAX_ROWS];
                for (r, lane) in rows_of.iter_mut().zip(batch) {
                    *r = lane.row;
                }
                K::accumulate(
                    &weights[..n],
                    x0,
                    vtile,
                    &mut acc,
                    dim,
                    &rows_of[..n],
                    &corr[..n],
                );
            }
        }
        for g in 0..group {
            for ri in 0..rows {
                let l = state[g * rows + ri].1;
                if l > 0.0 {
                    let inv = 1.0 / l;
                    // SAFETY: this row of head h0 + g is this task's alone (see `run`).
                    let o =
                        unsafe { std::slice::from_raw_parts_mut(out.0.add(qoff(g, r0 + ri)), dim) };
                    for (o, a) in o.iter_mut().zip(&acc[(g * rows + ri) * dim..]) {
                        *o = a * inv;
                    }
                }
            }
        }
    }
}

/// Rows batched through one pass over a tile, at most.
const MAX_ROWS: usize = 4;

/// A query row of one head that sees keys of the current tile.
struct Lane {
    /// Its index in the task's accumulators.
    row: usize,
    /// Offset of its query in `q`.
    q: usize,
    /// Its absolute position.
    i: u64,
    /// The tile's slots it sees: `xa..xz`.
    xa: usize,
    xz: usize,
    /// SelfExtend: slots before this one use the grouped scores.
    split: usize,
}

/// The queries of `batch`'s lanes in `x` (rows of `dim`).
fn lane_rows<'a>(batch: &[Lane], x: &'a [f32], dim: usize) -> [&'a [f32]; MAX_ROWS] {
    let mut out: [&[f32]; MAX_ROWS] = [&[]; MAX_ROWS];
    for (o, lane) in out.iter_mut().zip(batch) {
        *o = &x[lane.q..lane.q + dim];
    }
    out
}

/// The two inner products of the tiled path, over up to [`TileKernels::ROWS`] rows at once
/// (rows share each load of the tile). A row's result never depends on the rows beside it.
trait TileKernels {
    /// Rows per pass (at most [`MAX_ROWS`]).
    const ROWS: usize;
    /// `out[j][x] = Σ_c qs[j][c] * kt[c * KEY_TILE + x]` for every slot.
    fn scores(qs: &[&[f32]], kt: &[f32], out: &mut [[f32; KEY_TILE]]);
    /// For each row `j`: `acc[rows[j]] = acc[rows[j]] * corr[j] + Σ_x w[j][x] * v[x - x0]`
    /// over the slots `x0..` that `v` holds (rows of `dim`); `w[j]` is zero where row `j`
    /// sees nothing.
    fn accumulate(
        w: &[[f32; KEY_TILE]],
        x0: usize,
        v: &[f32],
        acc: &mut [f32],
        dim: usize,
        rows: &[usize],
        corr: &[f32],
    );
}

struct Portable;

impl TileKernels for Portable {
    const ROWS: usize = 1;

    #[inline(always)]
    fn scores(qs: &[&[f32]], kt: &[f32], out: &mut [[f32; KEY_TILE]]) {
        for (q, out) in qs.iter().zip(out.iter_mut()) {
            let mut acc = [0f32; KEY_TILE];
            for (&qc, row) in q.iter().zip(kt.chunks_exact(KEY_TILE)) {
                for x in 0..KEY_TILE {
                    acc[x] += qc * row[x];
                }
            }
            *out = acc;
        }
    }

    #[inline(always)]
    fn accumulate(
        w: &[[f32; KEY_TILE]],
        x0: usize,
        v: &[f32],
        acc: &mut [f32],
        dim: usize,
        rows: &[usize],
        corr: &[f32],
    ) {
        accumulate_dims(w, x0, v, acc, dim, 0, rows, corr);
    }
}

/// [`TileKernels::accumulate`] over dimensions `from..dim` only, in plain Rust: the portable
/// form, and the vector forms' dimensions past their widths.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn accumulate_dims(
    w: &[[f32; KEY_TILE]],
    x0: usize,
    v: &[f32],
    acc: &mut [f32],
    dim: usize,
    from: usize,
    rows: &[usize],
    corr: &[f32],
) {
    for ((w, &row), &corr) in w.iter().zip(rows).zip(corr) {
        let acc = &mut acc[row * dim + from..(row + 1) * dim];
        for a in acc.iter_mut() {
            *a *= corr;
        }
        for (&e, vr) in w[x0..].iter().zip(v.chunks_exact(dim)) {
            for (a, &x) in acc.iter_mut().zip(&vr[from..]) {
                *a += e * x;
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
struct Avx2;

#[cfg(target_arch = "x86_64")]
impl TileKernels for Avx2 {
    const ROWS: usize = 1;

    #[inline(always)]
    fn scores(qs: &[&[f32]], kt: &[f32], out: &mut [[f32; KEY_TILE]]) {
        use std::arch::x86_64::*;
        for (q, out) in qs.iter().zip(out.iter_mut()) {
            assert!(kt.len() >= q.len() * KEY_TILE);
            // SAFETY: only reached from `run_avx2` (AVX2 and FMA present); every load is
            // inside `kt` (asserted) and every store inside `out`.
            unsafe {
                let mut acc = [_mm256_setzero_ps(); KEY_TILE / 8];
                for (c, &qc) in q.iter().enumerate() {
                    let qb = _mm256_set1_ps(qc);
                    let row = kt.as_ptr().add(c * KEY_TILE);
                    for (j, a) in acc.iter_mut().enumerate() {
                        *a = _mm256_fmadd_ps(qb, _mm256_loadu_ps(row.add(8 * j)), *a);
                    }
                }
                for (j, a) in acc.iter().enumerate() {
                    _mm256_storeu_ps(out.as_mut_ptr().add(8 * j), *a);
                }
            }
        }
    }

    #[inline(always)]
    fn accumulate(
        w: &[[f32; KEY_TILE]],
        x0: usize,
        v: &[f32],
        acc: &mut [f32],
        dim: usize,
        rows: &[usize],
        corr: &[f32],
    ) {
        use std::arch::x86_64::*;
        let keys = v.len() / dim;
        for ((w, &row), &corr) in w.iter().zip(rows).zip(corr) {
            let w = &w[x0..x0 + keys];
            let acc = &mut acc[row * dim..(row + 1) * dim];
            // SAFETY: as in `scores`: AVX2 and FMA present, loads inside `v` (`keys` rows of
            // `dim`), stores inside `acc`.
            unsafe {
                let cv = _mm256_set1_ps(corr);
                let mut c = 0;
                // Up to 64 dimensions at a time in registers, every key added in turn.
                while c + 8 <= dim {
                    let width = ((dim - c) / 8).min(8);
                    let mut lanes = [_mm256_setzero_ps(); 8];
                    for (l, lane) in lanes.iter_mut().enumerate().take(width) {
                        *lane = _mm256_mul_ps(_mm256_loadu_ps(acc.as_ptr().add(c + 8 * l)), cv);
                    }
                    for (j, &e) in w.iter().enumerate() {
                        let eb = _mm256_set1_ps(e);
                        let vr = v.as_ptr().add(j * dim + c);
                        for (l, lane) in lanes.iter_mut().enumerate().take(width) {
                            *lane = _mm256_fmadd_ps(eb, _mm256_loadu_ps(vr.add(8 * l)), *lane);
                        }
                    }
                    for (l, lane) in lanes.iter().enumerate().take(width) {
                        _mm256_storeu_ps(acc.as_mut_ptr().add(c + 8 * l), *lane);
                    }
                    c += 8 * width;
                }
            }
        }
        accumulate_dims(w, x0, v, acc, dim, dim / 8 * 8, rows, corr);
    }
}

#[cfg(target_arch = "x86_64")]
struct Avx512;

#[cfg(target_arch = "x86_64")]
impl Avx512 {
    /// [`TileKernels::scores`] for `N` rows: 4 × `N` accumulators, each tile load shared.
    ///
    /// # Safety
    /// AVX-512 F present; `kt` holds `qs[j].len()` rows of [`KEY_TILE`].
    #[inline(always)]
    unsafe fn scores_n<const N: usize>(qs: &[&[f32]], kt: &[f32], out: &mut [[f32; KEY_TILE]]) {
        use std::arch::x86_64::*;
        const V: usize = KEY_TILE / 16;
        let dim = qs[0].len();
        unsafe {
            let mut acc = [[_mm512_setzero_ps(); V]; N];
            for c in 0..dim {
                let row = kt.as_ptr().add(c * KEY_TILE);
                let k = [
                    _mm512_loadu_ps(row),
                    _mm512_loadu_ps(row.add(16)),
                    _mm512_loadu_ps(row.add(32)),
                    _mm512_loadu_ps(row.add(48)),
                ];
                for (r, acc) in acc.iter_mut().enumerate() {
                    let qb = _mm512_set1_ps(*qs[r].get_unchecked(c));
                    for j in 0..V {
                        acc[j] = _mm512_fmadd_ps(qb, k[j], acc[j]);
                    }
                }
            }
            for (r, acc) in acc.iter().enumerate() {
                for (j, a) in acc.iter().enumerate() {
                    _mm512_storeu_ps(out[r].as_mut_ptr().add(16 * j), *a);
                }
            }
        }
    }

    /// [`TileKernels::accumulate`] for `N` rows over 64 dimensions from `c`: each value load
    /// shared by the rows.
    ///
    /// # Safety
    /// AVX-512 F present; `v` holds rows of `dim >= c + 64`; `rows` index rows of `acc`.
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    unsafe fn accumulate_n<const N: usize>(
        w: &[[f32; KEY_TILE]],
        x0: usize,
        v: &[f32],
        acc: &mut [f32],
        dim: usize,
        c: usize,
        rows: &[usize],
        corr: &[f32],
    ) {
        use std::arch::x86_64::*;
        let keys = v.len() / dim;
        unsafe {
            let mut sums = [[_mm512_setzero_ps(); 4]; N];
            for x in 0..keys {
                let vr = v.as_ptr().add(x * dim + c);
                let vv = [
                    _mm512_loadu_ps(vr),
                    _mm512_loadu_ps(vr.add(16)),
                    _mm512_loadu_ps(vr.add(32)),
                    _mm512_loadu_ps(vr.add(48)),
                ];
                for (r, s) in sums.iter_mut().enumerate() {
                    let e = _mm512_set1_ps(*w[r].get_unchecked(x0 + x));
                    for l in 0..4 {
                        s[l] = _mm512_fmadd_ps(e, vv[l], s[l]);
                    }
                }
            }
            for (r, s) in sums.iter().enumerate() {
                let cv = _mm512_set1_ps(corr[r]);
                let at = acc.as_mut_ptr().add(rows[r] * dim + c);
                for (l, s) in s.iter().enumerate() {
                    let a = at.add(16 * l);
                    _mm512_storeu_ps(a, _mm512_fmadd_ps(_mm512_loadu_ps(a), cv, *s));
                }
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
impl TileKernels for Avx512 {
    const ROWS: usize = MAX_ROWS;

    #[inline(always)]
    fn scores(qs: &[&[f32]], kt: &[f32], out: &mut [[f32; KEY_TILE]]) {
        let dim = qs[0].len();
        assert!(kt.len() >= dim * KEY_TILE && qs.iter().all(|q| q.len() == dim));
        assert!(out.len() >= qs.len());
        // SAFETY: only reached from `run_avx512` (AVX-512 F present); sizes asserted.
        unsafe {
            match qs.len() {
                1 => Self::scores_n::<1>(qs, kt, out),
                2 => Self::scores_n::<2>(qs, kt, out),
                3 => Self::scores_n::<3>(qs, kt, out),
                _ => Self::scores_n::<4>(qs, kt, out),
            }
        }
    }

    #[inline(always)]
    fn accumulate(
        w: &[[f32; KEY_TILE]],
        x0: usize,
        v: &[f32],
        acc: &mut [f32],
        dim: usize,
        rows: &[usize],
        corr: &[f32],
    ) {
        let keys = v.len() / dim;
        let n = w.len();
        assert!(x0 + keys <= KEY_TILE && rows.len() == n && corr.len() == n);
        assert!(rows.iter().all(|&r| (r + 1) * dim <= acc.len()));
        let mut c = 0;
        while c + 64 <= dim {
            // SAFETY: AVX-512 F present (only reached from `run_avx512`); sizes asserted.
            unsafe {
                match n {
                    1 => Self::accumulate_n::<1>(w, x0, v, acc, dim, c, rows, corr),
                    2 => Self::accumulate_n::<2>(w, x0, v, acc, dim, c, rows, corr),
                    3 => Self::accumulate_n::<3>(w, x0, v, acc, dim, c, rows, corr),
                    _ => Self::accumulate_n::<4>(w, x0, v, acc, dim, c, rows, corr),
                }
            }
            c += 64;
        }
        accumulate_dims(w, x0, v, acc, dim, c, rows, corr);
    }
}
