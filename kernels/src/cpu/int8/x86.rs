//! x86-64 kernels of [`Int8Matrix`] products: tiles of up to 4 rows of `x` by up to 4 panels
//! of 16 outputs, the integer sums kept in registers across the whole row, then scaled, biased
//! and stored in one pass (the epilogue).

use super::{Int8Matrix, Job, QuantizedRows, GROUP, GROUP_BYTES, PANEL};

/// AVX-512 VNNI: `vpdpbusd` adds, per 32-bit lane, the products of 4 unsigned activation
/// bytes (a broadcast group of one row) and 4 signed weight bytes (one output of a panel).
pub(super) mod avx512_vnni {
    use std::arch::x86_64::*;

    use super::*;

    /// `job`'s rows of `x W^T (+ b)` into `y` (whole rows of the output).
    ///
    /// # Safety
    /// The CPU has AVX-512 F, BW, VL and VNNI; `job.xq` is unsigned and holds the rows.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
    pub(in super::super) unsafe fn rows_into(m: &Int8Matrix, job: Job<'_>, y: &mut [f32]) {
        let Job {
            xq,
            r0,
            bias,
            accumulate,
        } = job;
        let rows = y.len() / m.rows;
        let mut p0 = 0;
        while p0 < m.panels {
            let np = (m.panels - p0).min(4);
            let mut i0 = 0;
            while i0 < rows {
                let mr = (rows - i0).min(4);
                let at = Tile {
                    m,
                    xq,
                    row: r0 + i0,
                    p0,
                    y: y.as_mut_ptr().add(i0 * m.rows),
                    bias,
                    accumulate,
                };
                match (mr, np) {
                    (4, 4) => tile::<4, 4>(at),
                    (4, 3) => tile::<4, 3>(at),
                    (4, 2) => tile::<4, 2>(at),
                    (4, 1) => tile::<4, 1>(at),
                    (3, 4) => tile::<3, 4>(at),
                    (3, 3) => tile::<3, 3>(at),
                    (3, 2) => tile::<3, 2>(at),
                    (3, 1) => tile::<3, 1>(at),
                    (2, 4) => tile::<2, 4>(at),
                    (2, 3) => tile::<2, 3>(at),
                    (2, 2) => tile::<2, 2>(at),
                    (2, 1) => tile::<2, 1>(at),
                    (1, 4) => tile::<1, 4>(at),
                    (1, 3) => tile::<1, 3>(at),
                    (1, 2) => tile::<1, 2>(at),
                    _ => tile::<1, 1>(at),
                }
                i0 += mr;
            }
            p0 += np;
        }
    }

    /// [`super::super::quantize_row`] on 16 lanes.
    ///
    /// # Safety
    /// The CPU has AVX-512 F, BW and VL; `q` holds at least `row.len()` bytes.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl")]
    pub(in super::super) unsafe fn quantize_row(
        row: &[f32],
        multiplier: Option<&[f32]>,
        q: &mut [u8],
        unsigned: bool,
    ) -> f32 {
        let n = row.len();
        let (x, out) = (row.as_ptr(), q.as_mut_ptr());
        let tail: __mmask16 = ((1u32 << (n % 16)) - 1) as u16;
        // Lanes `i..i + 16` of `z` (`x`, or `x m`), masked.
        let load = |i: usize, mask: __mmask16| {
            let v = _mm512_maskz_loadu_ps(mask, x.add(i));
            match multiplier {
                Some(m) => _mm512_mul_ps(v, _mm512_maskz_loadu_ps(mask, m.as_ptr().add(i))),
                None => v,
            }
        };
        let mut amax = _mm512_setzero_ps();
        let mut i = 0;
        while i + 16 <= n {
            amax = _mm512_max_ps(amax, _mm512_abs_ps(load(i, 0xFFFF)));
            i += 16;
        }
        if tail != 0 {
            amax = _mm512_max_ps(amax, _mm512_abs_ps(load(i, tail)));
        }
        let scale = _mm512_reduce_max_ps(amax) / 127.0;
        let inv = _mm512_set1_ps(if scale > 0.0 { 1.0 / scale } else { 0.0 });
        let shift = _mm_set1_epi8(if unsigned { -128 } else { 0 });
        // Rounds to nearest, ties to even (MXCSR's default), as the portable version.
        let quantize = |v: __m512| {
            let q = _mm512_cvtsepi32_epi8(_mm512_cvtps_epi32(_mm512_mul_ps(v, inv)));
            _mm_xor_si128(q, shift)
        };
        let mut i = 0;
        while i + 16 <= n {
            _mm_storeu_si128(out.add(i) as *mut __m128i, quantize(load(i, 0xFFFF)));
            i += 16;
        }
        if tail != 0 {
            let v = quantize(load(i, tail));
            _mm_mask_storeu_epi8(out.add(i) as *mut i8, tail, v);
        }
        scale
    }

    /// Where a tile lies.
    struct Tile<'a> {
        m: &'a Int8Matrix,
        xq: &'a QuantizedRows,
        /// First row of `x`.
        row: usize,
        /// First panel.
        p0: usize,
        /// Output row `row` (its column 0), rows `m.rows` apart.
        y: *mut f32,
        bias: Option<&'a [f32]>,
        accumulate: bool,
    }

    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
    unsafe fn tile<const MR: usize, const NP: usize>(t: Tile) {
        let m = t.m;
        let panel_bytes = m.groups * GROUP_BYTES;
        let b = m.packed.as_ptr().add(t.p0 * panel_bytes);
        let a: [*const u8; MR] =
            std::array::from_fn(|i| t.xq.q.as_ptr().add((t.row + i) * t.xq.stride));
        let mut acc = [[_mm512_setzero_si512(); NP]; MR];
        for g in 0..m.groups {
            let w: [__m512i; NP] = std::array::from_fn(|p| {
                _mm512_loadu_si512(b.add(p * panel_bytes + g * GROUP_BYTES) as *const __m512i)
            });
            for i in 0..MR {
                let x = _mm512_set1_epi32((a[i].add(g * GROUP) as *const i32).read_unaligned());
                for p in 0..NP {
                    acc[i][p] = _mm512_dpbusd_epi32(acc[i][p], x, w[p]);
                }
            }
        }
        for p in 0..NP {
            let col = (t.p0 + p) * PANEL;
            let valid = (m.rows - col).min(PANEL);
            let mask: __mmask16 = if valid == PANEL {
                0xFFFF
            } else {
                (1u16 << valid) - 1
            };
            let sw = _mm512_loadu_ps(m.scales.as_ptr().add(col));
            let offset = _mm512_loadu_si512(m.offsets.as_ptr().add(col) as *const __m512i);
            let bias = match t.bias {
                Some(b) => _mm512_maskz_loadu_ps(mask, b.as_ptr().add(col)),
                None => _mm512_setzero_ps(),
            };
            for (i, acc) in acc.iter().enumerate() {
                let sx = _mm512_set1_ps(t.xq.scales[t.row + i]);
                let sums = _mm512_cvtepi32_ps(_mm512_sub_epi32(acc[p], offset));
                let mut v = _mm512_add_ps(_mm512_mul_ps(sums, _mm512_mul_ps(sx, sw)), bias);
                let out = t.y.add(i * m.rows + col);
                if t.accumulate {
                    v = _mm512_add_ps(_mm512_maskz_loadu_ps(mask, out), v);
                }
                _mm512_mask_storeu_ps(out, mask, v);
            }
        }
    }
}

/// AVX2: `maddubs` multiplies unsigned by signed bytes into saturating pairs of i16, so it is
/// given `|w|` and `x` with `w`'s sign (`sign_epi8`): each pair stays within `2 · 127²`.
pub(super) mod avx2 {
    use std::arch::x86_64::*;

    use super::*;
    use crate::cpu::int8::scale_output;

    /// `job`'s rows of `x W^T (+ b)` into `y` (whole rows of the output).
    ///
    /// # Safety
    /// The CPU has AVX2; `job.xq` is signed and holds the rows.
    #[target_feature(enable = "avx2")]
    pub(in super::super) unsafe fn rows_into(m: &Int8Matrix, job: Job<'_>, y: &mut [f32]) {
        let Job {
            xq,
            r0,
            bias,
            accumulate,
        } = job;
        let rows = y.len() / m.rows;
        for p in 0..m.panels {
            let mut i0 = 0;
            while i0 < rows {
                let mr = (rows - i0).min(4);
                let sums = match mr {
                    4 => panel::<4>(m, xq, r0 + i0, p),
                    3 => pad(panel::<3>(m, xq, r0 + i0, p)),
                    2 => pad(panel::<2>(m, xq, r0 + i0, p)),
                    _ => pad(panel::<1>(m, xq, r0 + i0, p)),
                };
                let col = p * PANEL;
                for (i, row_sums) in sums.iter().enumerate().take(mr) {
                    let sx = xq.scales[r0 + i0 + i];
                    let out = &mut y[(i0 + i) * m.rows..(i0 + i + 1) * m.rows];
                    for (c, &acc) in row_sums.iter().enumerate().take(m.rows - col) {
                        let j = col + c;
                        let b = bias.map_or(0.0, |b| b[j]);
                        out[j] = scale_output(acc, sx, m.scales[j], b, out[j], accumulate);
                    }
                }
                i0 += mr;
            }
        }
    }

    fn pad<const MR: usize>(sums: [[i32; PANEL]; MR]) -> [[i32; PANEL]; 4] {
        let mut out = [[0; PANEL]; 4];
        out[..MR].copy_from_slice(&sums);
        out
    }

    /// The integer sums of `MR` rows from `row` with panel `p`.
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn panel<const MR: usize>(
        m: &Int8Matrix,
        xq: &QuantizedRows,
        row: usize,
        p: usize,
    ) -> [[i32; PANEL]; MR] {
        let b = m.packed.as_ptr().add(p * m.groups * GROUP_BYTES);
        let a: [*const u8; MR] = std::array::from_fn(|i| xq.q.as_ptr().add((row + i) * xq.stride));
        let ones = _mm256_set1_epi16(1);
        let mut acc = [[_mm256_setzero_si256(); 2]; MR];
        for g in 0..m.groups {
            let w0 = _mm256_loadu_si256(b.add(g * GROUP_BYTES) as *const __m256i);
            let w1 = _mm256_loadu_si256(b.add(g * GROUP_BYTES + 32) as *const __m256i);
            let (abs0, abs1) = (_mm256_sign_epi8(w0, w0), _mm256_sign_epi8(w1, w1));
            for i in 0..MR {
                let x = _mm256_set1_epi32((a[i].add(g * GROUP) as *const i32).read_unaligned());
                let p0 = _mm256_maddubs_epi16(abs0, _mm256_sign_epi8(x, w0));
                let p1 = _mm256_maddubs_epi16(abs1, _mm256_sign_epi8(x, w1));
                acc[i][0] = _mm256_add_epi32(acc[i][0], _mm256_madd_epi16(p0, ones));
                acc[i][1] = _mm256_add_epi32(acc[i][1], _mm256_madd_epi16(p1, ones));
            }
        }
        let mut out = [[0i32; PANEL]; MR];
        for (o, a) in out.iter_mut().zip(acc) {
            _mm256_storeu_si256(o.as_mut_ptr() as *mut __m256i, a[0]);
            _mm256_storeu_si256(o.as_mut_ptr().add(8) as *mut __m256i, a[1]);
        }
        out
    }
}
