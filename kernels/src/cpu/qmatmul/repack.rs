//! GGML block formats to [`QMatrix`]'s two layouts, exactly (every weight the same f32 value
//! as ggml's `dequantize_row_*` computes it).
//!
//! - 4- and 5-bit formats (Q4_0, Q4_1, Q4_K, Q5_0, Q5_1) become [`Layout::U4`]: per block of
//!   32, 16 bytes of nibbles (byte `j`: element `j` low, element `j + 16` high, as Q4_0 stores
//!   them), the 5-bit formats' fifth bits (ggml's `qh`) in the kernels' planes
//!   ([`super::fifth`]), and an f32 `scale` and `offset`, `w = scale * q + offset`.
//! - 6- and 8-bit formats (Q6_K, Q8_0) become [`Layout::I8`]: one signed byte per weight and
//!   an f32 scale per 16 weights, `w = scale * q`.

use half::f16;

use super::{Layout, QMatrix, BLOCK};

/// A GGML quantization type this module repacks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GgmlFormat {
    /// `d (q - 8)`, 32 per block.
    Q4_0,
    /// `d q + m`, 32 per block.
    Q4_1,
    /// `d (q - 16)`, 5-bit values, 32 per block (what llama.cpp's K-quant presets fall back
    /// to where a row is not a multiple of 256 wide, as SmolLM2's 576).
    Q5_0,
    /// `d q + m`, 5-bit values, 32 per block.
    Q5_1,
    /// `d q`, signed bytes, 32 per block.
    Q8_0,
    /// 256 per super-block, 8 sub-blocks of 32 with 6-bit scales and mins.
    Q4K,
    /// 256 per super-block, 6-bit values, 16 signed 8-bit scales.
    Q6K,
}

impl GgmlFormat {
    /// `(weights, bytes)` of one block.
    pub fn block(self) -> (usize, usize) {
        match self {
            Self::Q4_0 => (32, 18),
            Self::Q4_1 => (32, 20),
            Self::Q5_0 => (32, 22),
            Self::Q5_1 => (32, 24),
            Self::Q8_0 => (32, 34),
            Self::Q4K => (256, 144),
            Self::Q6K => (256, 210),
        }
    }
}

fn half(b: &[u8], at: usize) -> f32 {
    f16::from_le_bytes([b[at], b[at + 1]]).to_f32()
}

/// ggml's `get_scale_min_k4`: sub-block `j`'s 6-bit scale and min.
fn scale_min_k4(j: usize, q: &[u8]) -> (u8, u8) {
    if j < 4 {
        (q[j] & 63, q[j + 4] & 63)
    } else {
        (
            (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4),
            (q[j + 4] >> 4) | ((q[j] >> 6) << 4),
        )
    }
}

/// Packs 32 values in `0..16` as Q4_0 stores them.
fn pack_nibbles(values: &[u8; 32], out: &mut Vec<u8>) {
    out.extend((0..16).map(|j| values[j] | (values[j + 16] << 4)));
}

impl QMatrix {
    /// Repacks a `(rows, cols)` matrix stored as `format` blocks, row after row. Errors name
    /// the shape when the bytes do not hold it.
    pub fn from_ggml(
        format: GgmlFormat,
        rows: usize,
        cols: usize,
        data: &[u8],
    ) -> Result<Self, String> {
        let (per_block, bytes) = format.block();
        if !cols.is_multiple_of(per_block) || data.len() != rows * cols / per_block * bytes {
            return Err(format!(
                "{format:?} matrix ({rows}, {cols}) cannot be {} bytes",
                data.len()
            ));
        }
        let blocks = rows * cols / BLOCK;
        let layout = match format {
            GgmlFormat::Q4_0
            | GgmlFormat::Q4_1
            | GgmlFormat::Q4K
            | GgmlFormat::Q5_0
            | GgmlFormat::Q5_1 => {
                let mut nibbles = Vec::with_capacity(blocks * 16);
                let mut scales = Vec::with_capacity(blocks);
                let mut offsets = Vec::with_capacity(blocks);
                let five = matches!(format, GgmlFormat::Q5_0 | GgmlFormat::Q5_1);
                let mut fifth = Vec::with_capacity(if five { blocks } else { 0 });
                let word = |b: &[u8], at: usize| {
                    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
                };
                for b in data.chunks_exact(bytes) {
                    match format {
                        GgmlFormat::Q5_0 => {
                            let d = half(b, 0);
                            scales.push(d);
                            offsets.push(-16.0 * d);
                            fifth.push(word(b, 2));
                            nibbles.extend_from_slice(&b[6..22]);
                        }
                        GgmlFormat::Q5_1 => {
                            scales.push(half(b, 0));
                            offsets.push(half(b, 2));
                            fifth.push(word(b, 4));
                            nibbles.extend_from_slice(&b[8..24]);
                        }
                        GgmlFormat::Q4_0 => {
                            let d = half(b, 0);
                            scales.push(d);
                            offsets.push(-8.0 * d);
                            nibbles.extend_from_slice(&b[2..18]);
                        }
                        GgmlFormat::Q4_1 => {
                            scales.push(half(b, 0));
                            offsets.push(half(b, 2));
                            nibbles.extend_from_slice(&b[4..20]);
                        }
                        _ => {
                            let (d, dmin) = (half(b, 0), half(b, 2));
                            let (sc, qs) = (&b[4..16], &b[16..144]);
                            for (chunk, q) in qs.chunks_exact(32).enumerate() {
                                for (half_idx, shift) in [(0, 0), (1, 4)] {
                                    let (s, m) = scale_min_k4(2 * chunk + half_idx, sc);
                                    scales.push(d * s as f32);
                                    offsets.push(-(dmin * m as f32));
                                    let mut v = [0u8; 32];
                                    for (l, x) in v.iter_mut().enumerate() {
                                        *x = (q[l] >> shift) & 0xF;
                                    }
                                    pack_nibbles(&v, &mut nibbles);
                                }
                            }
                        }
                    }
                }
                Layout::U4 {
                    nibbles,
                    fifth: five.then(|| super::fifth::planes(&fifth, cols / BLOCK)),
                    scales,
                    offsets,
                }
            }
            GgmlFormat::Q8_0 | GgmlFormat::Q6K => {
                let mut values = Vec::with_capacity(blocks * BLOCK);
                let mut scales = Vec::with_capacity(blocks * 2);
                for b in data.chunks_exact(bytes) {
                    if format == GgmlFormat::Q8_0 {
                        let d = half(b, 0);
                        scales.extend([d, d]);
                        values.extend(b[2..34].iter().map(|&x| x as i8));
                        continue;
                    }
                    let (ql, qh, sc) = (&b[0..128], &b[128..192], &b[192..208]);
                    let d = half(b, 208);
                    scales.extend(sc.iter().map(|&s| d * (s as i8) as f32));
                    for n in 0..2 {
                        let (ql, qh) = (&ql[64 * n..], &qh[32 * n..]);
                        let mut chunk = [0i8; 128];
                        for l in 0..32 {
                            let q = |low: u8, high: u8| (low | ((high & 3) << 4)) as i8 - 32;
                            chunk[l] = q(ql[l] & 0xF, qh[l]);
                            chunk[l + 32] = q(ql[l + 32] & 0xF, qh[l] >> 2);
                            chunk[l + 64] = q(ql[l] >> 4, qh[l] >> 4);
                            chunk[l + 96] = q(ql[l + 32] >> 4, qh[l] >> 6);
                        }
                        values.extend_from_slice(&chunk);
                    }
                }
                Layout::I8 { values, scales }
            }
        };
        Ok(Self::new(rows, cols, layout))
    }
}
