//! x86-64 tiles: `R` rows of the matrix times `C` quantized rows of `x`, `R * C` accumulators
//! of 8 lanes kept in registers across the blocks, each block of weights unpacked once and
//! multiplied by every row of `x`.
//!
//! The integer dot products of a block come from `maddubs` (unsigned × signed bytes to pairs
//! of i16) and `madd` with ones (AVX2), or from one `vpdpbusd` where the CPU has VNNI (AVX-VNNI
//! or AVX-512 VNNI). Each flavour is the same code compiled for its target features by
//! [`tiles!`].
//!
//! Nibbles are read two blocks at a time: 32 bytes give, masked, the first halves of both
//! blocks, and shifted, their second halves; `x`'s two blocks are permuted to match, so the
//! lanes 0-3 of the i32 sums belong to the first block and 4-7 to the second. A 5-bit
//! format's fifth bits come from planes laid out to match those registers (`fifth.rs`): a
//! mask of `0x10` in the bytes of their elements, or-ed in.

use std::arch::x86_64::*;

use super::{fifth, Layout, QMatrix, RowRef, BLOCK};
use crate::cpu::math;

/// Calls the `$f::<R, C, $g...>` monomorphised for a tile of `rn` by `c`.
macro_rules! dispatch {
    ($rn:expr, $c:expr, $f:ident $(:: $g:tt)*, $($args:expr),*) => {
        match ($rn, $c) {
            (4, 1) => $f::<4, 1 $(, $g)*>($($args),*),
            (3, 1) => $f::<3, 1 $(, $g)*>($($args),*),
            (2, 1) => $f::<2, 1 $(, $g)*>($($args),*),
            (1, 1) => $f::<1, 1 $(, $g)*>($($args),*),
            (4, 2) => $f::<4, 2 $(, $g)*>($($args),*),
            (3, 2) => $f::<3, 2 $(, $g)*>($($args),*),
            (2, 2) => $f::<2, 2 $(, $g)*>($($args),*),
            (1, 2) => $f::<1, 2 $(, $g)*>($($args),*),
            (4, 3) => $f::<4, 3 $(, $g)*>($($args),*),
            (3, 3) => $f::<3, 3 $(, $g)*>($($args),*),
            (2, 3) => $f::<2, 3 $(, $g)*>($($args),*),
            (1, 3) => $f::<1, 3 $(, $g)*>($($args),*),
            (4, 4) => $f::<4, 4 $(, $g)*>($($args),*),
            (3, 4) => $f::<3, 4 $(, $g)*>($($args),*),
            (2, 4) => $f::<2, 4 $(, $g)*>($($args),*),
            (1, 4) => $f::<1, 4 $(, $g)*>($($args),*),
            (rn, c) => unreachable!("tile of {rn} x {c}"),
        }
    };
}

macro_rules! tiles {
    ($name:ident, $features:literal, |$acc:ident, $u:ident, $s:ident| $dp:expr) => {
        pub(super) mod $name {
            use super::*;

            /// `acc + Σ u * s` over groups of four bytes (u unsigned, s signed) per i32 lane.
            #[target_feature(enable = $features)]
            #[inline]
            unsafe fn dpbusd($acc: __m256i, $u: __m256i, $s: __m256i) -> __m256i {
                $dp
            }

            /// `tile[i][j]` = row `r + i` of `m` (for `i < rn`, `rn <= 4`) · `xs[j]`
            /// (`xs.len() <= 4`).
            ///
            /// # Safety
            /// The CPU has these target features; `r + rn <= m.rows`; every `xs[j]` holds
            /// `m.cols` values.
            #[target_feature(enable = $features)]
            pub(crate) unsafe fn tile(
                m: &QMatrix,
                r: usize,
                rn: usize,
                xs: &[RowRef],
                t: &mut [[f32; 4]; 4],
            ) {
                let blocks = m.cols / BLOCK;
                match &m.layout {
                    Layout::U4 {
                        nibbles,
                        fifth: None,
                        scales,
                        offsets,
                    } => dispatch!(
                        rn,
                        xs.len(),
                        u4_tile::false,
                        nibbles,
                        &[],
                        scales,
                        offsets,
                        blocks,
                        r,
                        xs,
                        t
                    ),
                    Layout::U4 {
                        nibbles,
                        fifth: Some(fifth),
                        scales,
                        offsets,
                    } => dispatch!(
                        rn,
                        xs.len(),
                        u4_tile::true,
                        nibbles,
                        fifth,
                        scales,
                        offsets,
                        blocks,
                        r,
                        xs,
                        t
                    ),
                    Layout::I8 { values, scales } => {
                        dispatch!(rn, xs.len(), i8_tile, values, scales, m.cols, r, xs, t)
                    }
                }
            }

            /// `[a ×4, b ×4]`.
            #[target_feature(enable = $features)]
            #[inline]
            unsafe fn pair(a: f32, b: f32) -> __m256 {
                _mm256_set_m128(_mm_set1_ps(b), _mm_set1_ps(a))
            }

            /// `0x10` in the bytes of `plane` that have `bit` (one bit set in every byte), else 0.
            #[target_feature(enable = $features)]
            #[inline]
            unsafe fn fifth_mask(plane: __m256i, bit: __m256i) -> __m256i {
                let set = _mm256_cmpeq_epi8(_mm256_and_si256(plane, bit), bit);
                _mm256_and_si256(set, _mm256_set1_epi8(0x10))
            }

            /// `FIVE`: the values' fifth bits come from `fifth` (planes, see `fifth.rs`).
            #[target_feature(enable = $features)]
            #[allow(clippy::too_many_arguments)]
            unsafe fn u4_tile<const R: usize, const C: usize, const FIVE: bool>(
                nibbles: &[u8],
                fifth: &[u8],
                scales: &[f32],
                offsets: &[f32],
                blocks: usize,
                r: usize,
                xs: &[RowRef],
                t: &mut [[f32; 4]; 4],
            ) {
                let low = _mm256_set1_epi8(0x0F);
                let mut acc = [[_mm256_setzero_ps(); C]; R];
                let xs: [RowRef; C] = std::array::from_fn(|j| xs[j]);
                let plane_row = fifth::row_bytes(blocks);
                // The plane of pair `b / 2` in row `r + i`, and the bit of its `lo` register.
                let plane = |i: usize, b: usize| {
                    let pair = b / 2;
                    let at = (r + i) * plane_row + pair / fifth::PAIRS_PER_PLANE * fifth::PLANE;
                    _mm256_loadu_si256(fifth.as_ptr().add(at) as *const __m256i)
                };
                let lo_bit = |b: usize| 1u8 << (2 * (b / 2 % fifth::PAIRS_PER_PLANE));
                let mut b = 0;
                while b + 2 <= blocks {
                    let mut lo = [_mm256_setzero_si256(); R];
                    let mut hi = [_mm256_setzero_si256(); R];
                    let mut ws = [_mm256_setzero_ps(); R];
                    let (bit_lo, bit_hi) = if FIVE {
                        let bit = lo_bit(b);
                        (_mm256_set1_epi8(bit as i8), _mm256_set1_epi8((bit << 1) as i8))
                    } else {
                        (low, low)
                    };
                    for i in 0..R {
                        let at = (r + i) * blocks + b;
                        let v = _mm256_loadu_si256(nibbles.as_ptr().add(at * 16) as *const __m256i);
                        lo[i] = _mm256_and_si256(v, low);
                        hi[i] = _mm256_and_si256(_mm256_srli_epi16::<4>(v), low);
                        if FIVE {
                            let p = plane(i, b);
                            lo[i] = _mm256_or_si256(lo[i], fifth_mask(p, bit_lo));
                            hi[i] = _mm256_or_si256(hi[i], fifth_mask(p, bit_hi));
                        }
                        ws[i] = pair(*scales.get_unchecked(at), *scales.get_unchecked(at + 1));
                    }
                    for j in 0..C {
                        let q = xs[j].q.as_ptr().add(b * BLOCK);
                        let a0 = _mm256_loadu_si256(q as *const __m256i);
                        let a1 = _mm256_loadu_si256(q.add(BLOCK) as *const __m256i);
                        let a_lo = _mm256_permute2x128_si256::<0x20>(a0, a1);
                        let a_hi = _mm256_permute2x128_si256::<0x31>(a0, a1);
                        let d = pair(*xs[j].d.get_unchecked(b), *xs[j].d.get_unchecked(b + 1));
                        for i in 0..R {
                            let p = dpbusd(_mm256_setzero_si256(), lo[i], a_lo);
                            let p = dpbusd(p, hi[i], a_hi);
                            let scale = _mm256_mul_ps(ws[i], d);
                            acc[i][j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), scale, acc[i][j]);
                        }
                    }
                    b += 2;
                }
                if b < blocks {
                    // An odd last block: its two halves in one register.
                    let mut w = [_mm256_setzero_si256(); R];
                    for i in 0..R {
                        let at = (r + i) * blocks + b;
                        let v = _mm_loadu_si128(nibbles.as_ptr().add(at * 16) as *const __m128i);
                        let v = _mm256_set_m128i(_mm_srli_epi16::<4>(v), v);
                        w[i] = _mm256_and_si256(v, low);
                        if FIVE {
                            let bit = _mm256_set1_epi8(lo_bit(b) as i8);
                            w[i] = _mm256_or_si256(w[i], fifth_mask(plane(i, b), bit));
                        }
                    }
                    for j in 0..C {
                        let q = xs[j].q.as_ptr().add(b * BLOCK);
                        let a = _mm256_loadu_si256(q as *const __m256i);
                        let d = *xs[j].d.get_unchecked(b);
                        for i in 0..R {
                            let at = (r + i) * blocks + b;
                            let p = dpbusd(_mm256_setzero_si256(), w[i], a);
                            let scale = _mm256_set1_ps(*scales.get_unchecked(at) * d);
                            acc[i][j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), scale, acc[i][j]);
                        }
                    }
                }
                for i in 0..R {
                    let offs = &offsets[(r + i) * blocks..(r + i + 1) * blocks];
                    for j in 0..C {
                        t[i][j] = hsum(acc[i][j]) + math::dot_avx2(offs, xs[j].s);
                    }
                }
            }

            #[target_feature(enable = $features)]
            unsafe fn i8_tile<const R: usize, const C: usize>(
                values: &[i8],
                scales: &[f32],
                cols: usize,
                r: usize,
                xs: &[RowRef],
                t: &mut [[f32; 4]; 4],
            ) {
                let mut acc = [[_mm256_setzero_ps(); C]; R];
                let xs: [RowRef; C] = std::array::from_fn(|j| xs[j]);
                for b in 0..cols / BLOCK {
                    let mut w = [_mm256_setzero_si256(); R];
                    let mut abs = [_mm256_setzero_si256(); R];
                    let mut ws = [_mm256_setzero_ps(); R];
                    for i in 0..R {
                        let at = (r + i) * cols + b * BLOCK;
                        w[i] = _mm256_loadu_si256(values.as_ptr().add(at) as *const __m256i);
                        abs[i] = _mm256_sign_epi8(w[i], w[i]);
                        // Lanes 0-3 sum elements 0-15 (first scale), lanes 4-7 elements 16-31.
                        ws[i] = pair(
                            *scales.get_unchecked(at / 16),
                            *scales.get_unchecked(at / 16 + 1),
                        );
                    }
                    for j in 0..C {
                        let q = xs[j].q.as_ptr().add(b * BLOCK);
                        let a = _mm256_loadu_si256(q as *const __m256i);
                        let d = _mm256_set1_ps(*xs[j].d.get_unchecked(b));
                        for i in 0..R {
                            // |w| (unsigned) times a with w's sign: the unsigned operand.
                            let signed = _mm256_sign_epi8(a, w[i]);
                            let p = dpbusd(_mm256_setzero_si256(), abs[i], signed);
                            let scale = _mm256_mul_ps(ws[i], d);
                            acc[i][j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), scale, acc[i][j]);
                        }
                    }
                }
                for i in 0..R {
                    for j in 0..C {
                        t[i][j] = hsum(acc[i][j]);
                    }
                }
            }

            #[target_feature(enable = $features)]
            #[inline]
            unsafe fn hsum(v: __m256) -> f32 {
                let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
                let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
                let s = _mm_add_ss(s, _mm_movehdup_ps(s));
                _mm_cvtss_f32(s)
            }
        }
    };
}

// Pairs of u8 × i8 products summed to i16 (no overflow: |u| <= 128 and |s| <= 127 here),
// then pairs of i16 to i32.
tiles!(avx2, "avx2,fma", |acc, u, s| _mm256_add_epi32(
    acc,
    _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1))
));
tiles!(avx_vnni, "avx2,fma,avxvnni", |acc, u, s| {
    _mm256_dpbusd_avx_epi32(acc, u, s)
});
tiles!(avx512_vnni, "avx2,fma,avx512vnni,avx512vl", |acc, u, s| {
    _mm256_dpbusd_epi32(acc, u, s)
});

// After `dispatch!`, which the 512-bit tiles use.
pub(super) mod wide;
