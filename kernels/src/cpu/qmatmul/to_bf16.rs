//! A quantized matrix's bands as AMX panels ([`amx::band_from_f32`]'s layout): each weight as
//! ggml dequantizes it (the f32 of [`QMatrix::dequantize`]), rounded to bf16. The common
//! layouts are converted by AVX-512 straight from their blocks, the others through f32 rows.

use super::amx;
use super::{Layout, QMatrix};

impl QMatrix {
    /// Band `band` (rows `16 band..16 band + 16`) into `out` in the panels' layout.
    pub(super) fn band_bf16(&self, band: usize, out: &mut [u32]) {
        let cols = self.cols;
        #[cfg(target_arch = "x86_64")]
        if amx::available() {
            // The tiles come with AVX512-BF16 and BW ([`amx::available`] asks for them).
            match &self.layout {
                Layout::U4 {
                    nibbles,
                    fifth: None,
                    scales,
                    offsets,
                } => {
                    // SAFETY: the CPU has the features (above); the slices hold the matrix's
                    // blocks and `out` a band's panels.
                    return unsafe { x86::u4_band(nibbles, scales, offsets, cols, band, out) };
                }
                Layout::I8 { values, scales } => {
                    // SAFETY: as above.
                    return unsafe { x86::i8_band(values, scales, cols, band, out) };
                }
                Layout::U4 { .. } => {}
            }
        }
        amx::band_from_f32(cols, band, |start, f| self.dequantize_into(start, f), out)
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    use super::super::BLOCK;

    use crate::cpu::amx::PANEL_PAIRS;

    /// Rows per band.
    const BAND: usize = 16;

    /// Offsets (in `u32`) of a block's 16 pairs in its panel: line `i`, this row's column.
    #[target_feature(enable = "avx512f")]
    fn lines() -> __m512i {
        _mm512_setr_epi32(
            0, 16, 32, 48, 64, 80, 96, 112, 128, 144, 160, 176, 192, 208, 224, 240,
        )
    }

    /// Band `band` of a matrix of `cols` columns into `out`, block by block: `block(b)` gives
    /// the 32 f32 values of the matrix's block `b` (elements 0–15, then 16–31), rounded to
    /// bf16 and written as pairs down its row's column of its panel.
    ///
    /// # Safety
    /// The CPU has AVX-512 F and BF16; `block` is called for the band's blocks only.
    #[target_feature(enable = "avx512f,avx512bf16")]
    unsafe fn each_block(
        cols: usize,
        band: usize,
        out: &mut [u32],
        mut block: impl FnMut(usize) -> (__m512, __m512),
    ) {
        let blocks = cols / BLOCK;
        assert!(out.len() >= blocks * PANEL_PAIRS);
        for r in 0..BAND {
            let first = (band * BAND + r) * blocks;
            for k in 0..blocks {
                let (lo, hi) = block(first + k);
                let pairs: __m512i = std::mem::transmute(_mm512_cvtne2ps_pbh(hi, lo));
                let base = out.as_mut_ptr().add(k * PANEL_PAIRS + r) as *mut i32;
                _mm512_i32scatter_epi32::<4>(base, lines(), pairs);
            }
        }
    }

    /// Blocks past the last of band `band` (of `cols` columns).
    fn blocks_to_end_of(band: usize, cols: usize) -> usize {
        (band + 1) * BAND * (cols / BLOCK)
    }

    /// Band `band` of a [`super::Layout::U4`] matrix without fifth bits: `w = scale q + offset`
    /// (multiplied, then added, as the scalar dequantization does).
    ///
    /// # Safety
    /// The CPU has AVX-512 F, BW and BF16; the slices hold a `(rows, cols)` matrix's blocks
    /// and `out` band `band`'s `cols / 32` panels.
    #[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
    pub(super) unsafe fn u4_band(
        nibbles: &[u8],
        scales: &[f32],
        offsets: &[f32],
        cols: usize,
        band: usize,
        out: &mut [u32],
    ) {
        let end = blocks_to_end_of(band, cols);
        assert!(end * 16 <= nibbles.len() && end <= scales.len() && end <= offsets.len());
        let low = _mm_set1_epi8(0x0f);
        each_block(cols, band, out, |b| {
            let bytes = _mm_loadu_si128(nibbles.as_ptr().add(b * 16) as *const __m128i);
            let (s, m) = (_mm512_set1_ps(scales[b]), _mm512_set1_ps(offsets[b]));
            let value = |q: __m128i| {
                let q = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(q));
                _mm512_add_ps(_mm512_mul_ps(s, q), m)
            };
            (
                value(_mm_and_si128(bytes, low)),
                value(_mm_and_si128(_mm_srli_epi16::<4>(bytes), low)),
            )
        })
    }

    /// Band `band` of a [`super::Layout::I8`] matrix: `w = scale q`, a scale per 16 weights.
    ///
    /// # Safety
    /// As [`u4_band`].
    #[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
    pub(super) unsafe fn i8_band(
        values: &[i8],
        scales: &[f32],
        cols: usize,
        band: usize,
        out: &mut [u32],
    ) {
        let end = blocks_to_end_of(band, cols);
        assert!(end * BLOCK <= values.len() && 2 * end <= scales.len());
        each_block(cols, band, out, |b| {
            let value = |half: usize| {
                let at = values.as_ptr().add(b * BLOCK + 16 * half);
                let q =
                    _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(at as *const __m128i)));
                _mm512_mul_ps(_mm512_set1_ps(scales[2 * b + half]), q)
            };
            (value(0), value(1))
        })
    }
}
