//! The tiles of `x86.rs` on 512-bit registers (AVX-512 F, BW, VL and VNNI): four 4-bit blocks
//! or two byte blocks per register instead of two or one, so that a tile's integer products,
//! conversions and scalings take half the instructions. A batched decoding step (16 rows of
//! `x`) runs these tiles at their arithmetic bound on the 256-bit registers, where Sapphire
//! Rapids and later cores issue two 512-bit `vpdpbusd` per cycle, as many as 256-bit ones.
//!
//! The blocks past the last whole register are read with masked loads (zeros, and zero
//! scales, in the lanes of missing blocks), so every matrix width runs here. 5-bit formats run
//! the 256-bit tiles: their fifth bits are laid out for those registers (`fifth.rs`).

use std::arch::x86_64::*;

use super::super::{Layout, QMatrix, RowRef, BLOCK};
use crate::cpu::math;

/// `tile[i][j]` = row `r + i` of `m` (for `i < rn`, `rn <= 4`) · `xs[j]` (`xs.len() <= 4`).
///
/// # Safety
/// The CPU has AVX-512 F, BW, VL and VNNI, AVX2 and FMA; `r + rn <= m.rows`; every `xs[j]`
/// holds `m.cols` values.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma")]
pub(crate) unsafe fn tile(m: &QMatrix, r: usize, rn: usize, xs: &[RowRef], t: &mut [[f32; 4]; 4]) {
    let blocks = m.cols / BLOCK;
    match &m.layout {
        Layout::U4 {
            nibbles,
            fifth: None,
            scales,
            offsets,
        } => unsafe {
            dispatch!(
                rn,
                xs.len(),
                u4_tile,
                nibbles,
                scales,
                offsets,
                blocks,
                r,
                xs,
                t
            )
        },
        Layout::U4 { fifth: Some(_), .. } => unsafe { super::avx512_vnni::tile(m, r, rn, xs, t) },
        Layout::I8 { values, scales } => unsafe {
            dispatch!(rn, xs.len(), i8_tile, values, scales, m.cols, r, xs, t)
        },
    }
}

/// The low `n` bits set.
#[inline(always)]
fn low_bits(n: usize) -> u64 {
    if n >= 64 {
        !0
    } else {
        (1u64 << n) - 1
    }
}

/// The first `n <= 4` floats at `p`, each in `16 >> SHIFT` consecutive lanes (`SHIFT` 2:
/// `[p0 ×4, p1 ×4, …]`; 3: `[p0 ×8, p1 ×8]`), zeros past `n`.
#[target_feature(enable = "avx512f,avx512vl")]
#[inline]
unsafe fn spread<const SHIFT: u32>(p: *const f32, n: usize) -> __m512 {
    unsafe {
        let few = _mm_maskz_loadu_ps(low_bits(n) as __mmask8, p);
        let lane = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
        let idx = _mm512_srli_epi32::<SHIFT>(lane);
        _mm512_permutexvar_ps(idx, _mm512_castps128_ps512(few))
    }
}

/// Four blocks at a time: a register of nibbles holds four blocks' 16 bytes, whose low
/// nibbles are each block's first 16 values and high nibbles its last 16; `x`'s four blocks
/// (two registers) are shuffled to match, 128-bit lane `k` holding block `k`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma")]
#[allow(clippy::too_many_arguments)]
unsafe fn u4_tile<const R: usize, const C: usize>(
    nibbles: &[u8],
    scales: &[f32],
    offsets: &[f32],
    blocks: usize,
    r: usize,
    xs: &[RowRef],
    t: &mut [[f32; 4]; 4],
) {
    unsafe {
        let low = _mm512_set1_epi8(0x0F);
        let mut acc = [[_mm512_setzero_ps(); C]; R];
        let xs: [RowRef; C] = std::array::from_fn(|j| xs[j]);
        let mut b = 0;
        while b < blocks {
            let n = (blocks - b).min(4);
            let mut lo = [_mm512_setzero_si512(); R];
            let mut hi = [_mm512_setzero_si512(); R];
            let mut ws = [_mm512_setzero_ps(); R];
            for i in 0..R {
                let at = (r + i) * blocks + b;
                let v =
                    _mm512_maskz_loadu_epi8(low_bits(16 * n), nibbles.as_ptr().add(at * 16).cast());
                lo[i] = _mm512_and_si512(v, low);
                hi[i] = _mm512_and_si512(_mm512_srli_epi16::<4>(v), low);
                ws[i] = spread::<2>(scales.as_ptr().add(at), n);
            }
            for j in 0..C {
                let q = xs[j].q.as_ptr().add(b * BLOCK);
                let x01 = _mm512_maskz_loadu_epi8(low_bits(32 * n), q.cast());
                // Past a row's end only when fully masked (no byte read): a wrapping address.
                let x23 = _mm512_maskz_loadu_epi8(
                    low_bits(32 * n.saturating_sub(2)),
                    q.wrapping_add(64).cast(),
                );
                let a_lo = _mm512_shuffle_i64x2::<0b10_00_10_00>(x01, x23);
                let a_hi = _mm512_shuffle_i64x2::<0b11_01_11_01>(x01, x23);
                let d = spread::<2>(xs[j].d.as_ptr().add(b), n);
                for i in 0..R {
                    let p = _mm512_dpbusd_epi32(_mm512_setzero_si512(), lo[i], a_lo);
                    let p = _mm512_dpbusd_epi32(p, hi[i], a_hi);
                    let scale = _mm512_mul_ps(ws[i], d);
                    acc[i][j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), scale, acc[i][j]);
                }
            }
            b += 4;
        }
        for i in 0..R {
            let offs = &offsets[(r + i) * blocks..(r + i + 1) * blocks];
            for j in 0..C {
                t[i][j] = _mm512_reduce_add_ps(acc[i][j]) + math::dot_avx2(offs, xs[j].s);
            }
        }
    }
}

/// Two blocks of bytes at a time (a scale per 16 values: four per register). `vpdpbusd` takes
/// unsigned bytes on one side: the weights' magnitudes, with their signs moved onto `x`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma")]
unsafe fn i8_tile<const R: usize, const C: usize>(
    values: &[i8],
    scales: &[f32],
    cols: usize,
    r: usize,
    xs: &[RowRef],
    t: &mut [[f32; 4]; 4],
) {
    unsafe {
        let mut acc = [[_mm512_setzero_ps(); C]; R];
        let xs: [RowRef; C] = std::array::from_fn(|j| xs[j]);
        let blocks = cols / BLOCK;
        let mut b = 0;
        while b < blocks {
            let n = (blocks - b).min(2);
            let mask = low_bits(32 * n);
            let mut abs = [_mm512_setzero_si512(); R];
            let mut neg = [0 as __mmask64; R];
            let mut ws = [_mm512_setzero_ps(); R];
            for i in 0..R {
                let at = (r + i) * cols + b * BLOCK;
                let w = _mm512_maskz_loadu_epi8(mask, values.as_ptr().add(at).cast());
                abs[i] = _mm512_abs_epi8(w);
                neg[i] = _mm512_movepi8_mask(w);
                ws[i] = spread::<2>(scales.as_ptr().add(at / 16), 2 * n);
            }
            for j in 0..C {
                let a = _mm512_maskz_loadu_epi8(mask, xs[j].q.as_ptr().add(b * BLOCK).cast());
                let d = spread::<3>(xs[j].d.as_ptr().add(b), n);
                for i in 0..R {
                    // `x` negated where the weight is negative.
                    let signed = _mm512_mask_sub_epi8(a, neg[i], _mm512_setzero_si512(), a);
                    let p = _mm512_dpbusd_epi32(_mm512_setzero_si512(), abs[i], signed);
                    let scale = _mm512_mul_ps(ws[i], d);
                    acc[i][j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), scale, acc[i][j]);
                }
            }
            b += 2;
        }
        for i in 0..R {
            for j in 0..C {
                t[i][j] = _mm512_reduce_add_ps(acc[i][j]);
            }
        }
    }
}
