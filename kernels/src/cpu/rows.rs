//! The attention of calls with fewer than [`super::TILED_ROWS`] query rows (decoding steps,
//! short chunks): one dot product per key, where a transpose of the keys into tiles (what
//! [`super::tiled`] does for prompt chunks) would cost as much as the step.
//!
//! A decoding step has one row per head, and a model with three key heads on two threads gives
//! the pool too few tasks: each row's keys are cut into splits of [`SPLIT_KEYS`] attended
//! apart and merged afterwards (split-K, as in "flash decoding"). The split size is fixed, so a
//! row's bits depend on the row and the keys it sees, never on the call's rows, batch or threads.
//!
//! The vector form takes four keys at a time (four accumulators, one horizontal reduction
//! for the four), and updates the values of a tile with eight independent accumulators of eight
//! lanes each: the old form's one accumulator chain per eight dimensions made the update wait
//! on the adder's latency for every key.

use super::kv::KvElement;
use super::math;
use super::tiled::TileIsa;
use super::{AttnDims, AttnExtras, AttnPositions, OutPtr};
use crate::pattern::{key_range, visible, Pattern};

/// Keys per tile of the online softmax (one rescaling of a row's sums per tile).
const TILE: usize = 64;

/// Keys per split of a row's key range (a multiple of [`TILE`]).
pub(super) const SPLIT_KEYS: usize = 256;

/// Where a task's rows go.
#[derive(Clone, Copy)]
pub(super) enum Sink {
    /// Normalised, into the `(batch, heads, q_len, dim)` output.
    Out(OutPtr),
    /// Split `sp` of `splits`, for [`merge`]: with `e = row * splits + sp` (`row` counting
    /// `(batch, head, query row)`), the unnormalised sums at `accs[e * dim..]`, the running
    /// maximum and sum at `states[2 * e]` and `states[2 * e + 1]`.
    Partial {
        accs: OutPtr,
        states: OutPtr,
        splits: usize,
        sp: usize,
    },
}

/// The query rows of `group` heads from `h0` (sharing a key head) and everything they read.
#[derive(Clone, Copy)]
pub(super) struct Rows<'a, E> {
    pub(super) isa: TileIsa,
    pub(super) q: &'a [f32],
    pub(super) k: &'a [E],
    pub(super) v: &'a [E],
    pub(super) dims: AttnDims,
    pub(super) pos: AttnPositions,
    pub(super) pattern: &'a Pattern,
    pub(super) extras: AttnExtras<'a, E>,
    pub(super) b: usize,
    pub(super) h0: usize,
    pub(super) group: usize,
}

impl<E: KvElement> Rows<'_, E> {
    /// Query rows `r0..r1` of these heads against the keys with buffer indices in `keys`.
    ///
    /// # Safety
    /// No one else writes what `sink` names for these rows (and split).
    pub(super) unsafe fn run(&self, r0: usize, r1: usize, keys: (usize, usize), sink: Sink) {
        match self.isa {
            #[cfg(target_arch = "x86_64")]
            // SAFETY: `TileIsa::available` (checked by the caller) found AVX2 and FMA, and
            // `vector_ready` F16C where the elements need it.
            TileIsa::Avx2 | TileIsa::Avx512 if E::vector_ready() => unsafe {
                if E::F16C {
                    self.run_avx2_f16c(r0, r1, keys, sink)
                } else {
                    self.run_avx2(r0, r1, keys, sink)
                }
            },
            _ => unsafe { self.run_generic::<Portable>(r0, r1, keys, sink) },
        }
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn run_avx2(&self, r0: usize, r1: usize, keys: (usize, usize), sink: Sink) {
        unsafe { self.run_generic::<Avx2>(r0, r1, keys, sink) }
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn run_avx2_f16c(&self, r0: usize, r1: usize, keys: (usize, usize), sink: Sink) {
        unsafe { self.run_generic::<Avx2>(r0, r1, keys, sink) }
    }

    #[inline(always)]
    unsafe fn run_generic<K: RowKernels>(
        &self,
        r0: usize,
        r1: usize,
        (s0, s1): (usize, usize),
        sink: Sink,
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
        // The tile's visible keys: buffer index, and whether SelfExtend's grouped rotation
        // scores it.
        let mut seen: Vec<(usize, bool)> = Vec::with_capacity(TILE);
        for r in r0..r1 {
            let qoff = |g: usize| ((b * heads + h0 + g) * q_len + r) * dim;
            let i = pos.q_pos0 + r as u64;
            let (lo, hi) = key_range(pattern, h0, i);
            let lo = lo.max(pos.k_pos0);
            let hi = hi.min(pos.k_pos0 + kv_len as u64);
            state.fill((f32::NEG_INFINITY, 0.0));
            acc.fill(0.0);
            let (first, last) = if lo < hi {
                (
                    ((lo - pos.k_pos0) as usize).max(s0),
                    ((hi - pos.k_pos0) as usize).min(s1),
                )
            } else {
                (0, 0)
            };
            let mut t0 = first - first % TILE;
            while t0 < last {
                let (j0, j1) = (t0.max(first), (t0 + TILE).min(last));
                seen.clear();
                for kr in j0..j1 {
                    let p = pos.k_pos0 + kr as u64;
                    if every_key
                        || (visible(pattern, h0, i, p)
                            && self.extras.key_mask.is_none_or(|km| km[b * kv_len + kr]))
                    {
                        seen.push((kr, group_extend && i - p >= near));
                    }
                }
                t0 += TILE;
                if seen.is_empty() {
                    continue;
                }
                let vtile = &self.v[kbase + j0 * dim..kbase + j1 * dim];
                for g in 0..n {
                    let s = &mut scores[g * TILE..g * TILE + (j1 - j0)];
                    s.fill(f32::NEG_INFINITY);
                    let q = &self.q[qoff(g)..qoff(g) + dim];
                    let qg = self.extras.q_grouped.map(|qg| &qg[qoff(g)..qoff(g) + dim]);
                    let mut tile_max = f32::NEG_INFINITY;
                    let mut at = 0;
                    while at < seen.len() {
                        // Four keys scored with one query (the grouped rotation changes it at
                        // one key of a SelfExtend row: the four stop there).
                        let grouped = seen[at].1;
                        let mut quad = [seen[at].0; 4];
                        let mut count = 1;
                        while count < 4 && at + count < seen.len() && seen[at + count].1 == grouped
                        {
                            quad[count] = seen[at + count].0;
                            count += 1;
                        }
                        let (qs, ks) = if grouped {
                            (
                                qg.expect("q_grouped"),
                                self.extras.k_grouped.expect("k_grouped"),
                            )
                        } else {
                            (q, self.k)
                        };
                        let key = |j: usize| &ks[kbase + quad[j] * dim..][..dim];
                        // SAFETY: the run_* wrappers pick `K` for what this CPU supports.
                        let dots = unsafe { K::dot4(qs, [key(0), key(1), key(2), key(3)]) };
                        for (&kr, &d) in quad.iter().zip(&dots).take(count) {
                            let x = d * pos.scale;
                            s[kr - j0] = x;
                            tile_max = tile_max.max(x);
                        }
                        at += count;
                    }
                    if tile_max == f32::NEG_INFINITY {
                        continue;
                    }
                    let (m, l) = &mut state[g];
                    let m_new = m.max(tile_max);
                    let corr = math::exp(*m - m_new);
                    // Masked keys weigh exactly 0.
                    for x in s.iter_mut() {
                        *x = if *x == f32::NEG_INFINITY {
                            0.0
                        } else {
                            math::exp(*x - m_new)
                        };
                    }
                    *l = *l * corr + math::sum(s);
                    *m = m_new;
                    // SAFETY: as above.
                    unsafe { K::update(&mut acc[g * dim..(g + 1) * dim], corr, s, vtile) };
                }
            }
            for (g, &(m, l)) in state.iter().enumerate() {
                let a = &acc[g * dim..(g + 1) * dim];
                let row = qoff(g) / dim;
                match sink {
                    Sink::Out(out) => {
                        if l > 0.0 {
                            let inv = 1.0 / l;
                            // SAFETY: this row of head h0 + g is this task's alone (see `run`).
                            let o = unsafe {
                                std::slice::from_raw_parts_mut(out.0.add(row * dim), dim)
                            };
                            for (o, a) in o.iter_mut().zip(a) {
                                *o = a * inv;
                            }
                        }
                    }
                    Sink::Partial {
                        accs,
                        states,
                        splits,
                        sp,
                    } => {
                        let e = row * splits + sp;
                        // SAFETY: entry `e` (this row's split `sp`) is this task's alone.
                        unsafe {
                            std::slice::from_raw_parts_mut(accs.0.add(e * dim), dim)
                                .copy_from_slice(a);
                            *states.0.add(2 * e) = m;
                            *states.0.add(2 * e + 1) = l;
                        }
                    }
                }
            }
        }
    }
}

/// Merges each row's splits (as [`Sink::Partial`] left them) into `out`, normalised: a row
/// whose keys all lie in one split gets the bits an unsplit call gives it.
pub(super) fn merge(accs: &[f32], states: &[f32], splits: usize, dim: usize, out: &mut [f32]) {
    for (row, o) in out.chunks_exact_mut(dim).enumerate() {
        let (mut m, mut l) = (f32::NEG_INFINITY, 0f32);
        for sp in 0..splits {
            let e = row * splits + sp;
            let (ms, ls) = (states[2 * e], states[2 * e + 1]);
            if ls <= 0.0 {
                continue;
            }
            let a = &accs[e * dim..(e + 1) * dim];
            if l == 0.0 {
                o.copy_from_slice(a);
                (m, l) = (ms, ls);
                continue;
            }
            let m_new = m.max(ms);
            let scale = |x: f32| {
                if x == m_new {
                    1.0
                } else {
                    math::exp(x - m_new)
                }
            };
            let (c1, c2) = (scale(m), scale(ms));
            l = l * c1 + ls * c2;
            for (x, &y) in o.iter_mut().zip(a) {
                *x = *x * c1 + y * c2;
            }
            m = m_new;
        }
        if l > 0.0 {
            let inv = 1.0 / l;
            o.iter_mut().for_each(|x| *x *= inv);
        }
    }
}

/// The per-row path's arithmetic, in each instruction set's form.
trait RowKernels {
    /// The dot products of `q` with four keys (some may repeat).
    ///
    /// # Safety
    /// The CPU supports the form's instructions (for `E`'s loads too).
    unsafe fn dot4<E: KvElement>(q: &[f32], keys: [&[E]; 4]) -> [f32; 4];

    /// `acc = acc * corr + Σ_j w[j] v_j`, with `v` holding `w.len()` rows of `acc.len()`.
    ///
    /// # Safety
    /// As [`RowKernels::dot4`].
    unsafe fn update<E: KvElement>(acc: &mut [f32], corr: f32, w: &[f32], v: &[E]);
}

struct Portable;

impl RowKernels for Portable {
    #[inline(always)]
    unsafe fn dot4<E: KvElement>(q: &[f32], keys: [&[E]; 4]) -> [f32; 4] {
        keys.map(|k| math::dot_portable(q, k))
    }

    #[inline(always)]
    unsafe fn update<E: KvElement>(acc: &mut [f32], corr: f32, w: &[f32], v: &[E]) {
        update_dims(acc, corr, w, v, 0);
    }
}

/// [`RowKernels::update`] over dimensions `from..` only, in plain Rust: the portable form, and
/// the vector form's dimensions past its widths.
#[inline(always)]
fn update_dims<E: KvElement>(acc: &mut [f32], corr: f32, w: &[f32], v: &[E], from: usize) {
    let dim = acc.len();
    for (c, a) in acc.iter_mut().enumerate().skip(from) {
        let sum: f32 = w
            .iter()
            .enumerate()
            .map(|(j, &e)| e * Into::<f32>::into(v[j * dim + c]))
            .sum();
        *a = *a * corr + sum;
    }
}

#[cfg(target_arch = "x86_64")]
struct Avx2;

#[cfg(target_arch = "x86_64")]
impl RowKernels for Avx2 {
    #[inline(always)]
    unsafe fn dot4<E: KvElement>(q: &[f32], keys: [&[E]; 4]) -> [f32; 4] {
        use std::arch::x86_64::*;
        let dim = q.len();
        let mut out = [0f32; 4];
        // SAFETY: AVX2 and FMA (the caller's contract); every load is inside `q` or a key
        // (`c + 8 <= dim`, and each key is `dim` long).
        unsafe {
            let mut a = [_mm256_setzero_ps(); 4];
            let mut c = 0;
            while c + 8 <= dim {
                let qv = _mm256_loadu_ps(q.as_ptr().add(c));
                for (acc, k) in a.iter_mut().zip(&keys) {
                    *acc = _mm256_fmadd_ps(qv, E::load8(k.as_ptr().add(c)), *acc);
                }
                c += 8;
            }
            // hadd(hadd(a0, a1), hadd(a2, a3)) holds each key's sums of the low and the high
            // four lanes in its low and high halves.
            let h = _mm256_hadd_ps(_mm256_hadd_ps(a[0], a[1]), _mm256_hadd_ps(a[2], a[3]));
            let s = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps::<1>(h));
            _mm_storeu_ps(out.as_mut_ptr(), s);
            if c < dim {
                for (o, k) in out.iter_mut().zip(&keys) {
                    *o += math::dot_portable(&q[c..], &k[c..]);
                }
            }
        }
        out
    }

    #[inline(always)]
    unsafe fn update<E: KvElement>(acc: &mut [f32], corr: f32, w: &[f32], v: &[E]) {
        use std::arch::x86_64::*;
        let dim = acc.len();
        // SAFETY: AVX2 and FMA (the caller's contract); loads and stores stay inside `acc` and
        // the `w.len()` rows of `v`.
        unsafe {
            let cv = _mm256_set1_ps(corr);
            let mut c = 0;
            // Eight vectors of eight dimensions at a time: eight independent chains.
            while c + 64 <= dim {
                let mut a = [_mm256_setzero_ps(); 8];
                for (x, lane) in a.iter_mut().enumerate() {
                    *lane = _mm256_mul_ps(_mm256_loadu_ps(acc.as_ptr().add(c + 8 * x)), cv);
                }
                for (j, &e) in w.iter().enumerate() {
                    let ev = _mm256_set1_ps(e);
                    let row = v.as_ptr().add(j * dim + c);
                    for (x, lane) in a.iter_mut().enumerate() {
                        *lane = _mm256_fmadd_ps(ev, E::load8(row.add(8 * x)), *lane);
                    }
                }
                for (x, lane) in a.iter().enumerate() {
                    _mm256_storeu_ps(acc.as_mut_ptr().add(c + 8 * x), *lane);
                }
                c += 64;
            }
            while c + 8 <= dim {
                let mut lane = _mm256_mul_ps(_mm256_loadu_ps(acc.as_ptr().add(c)), cv);
                for (j, &e) in w.iter().enumerate() {
                    let row = v.as_ptr().add(j * dim + c);
                    lane = _mm256_fmadd_ps(_mm256_set1_ps(e), E::load8(row), lane);
                }
                _mm256_storeu_ps(acc.as_mut_ptr().add(c), lane);
                c += 8;
            }
        }
        update_dims(acc, corr, w, v, dim - dim % 8);
    }
}
