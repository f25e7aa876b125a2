//! Matrix products on Intel AMX tiles (Xeons from Sapphire Rapids on): `y = x W^T` with `W`
//! rounded to bf16, `x` carried as the sum of two bf16 values, and every output accumulated in
//! f32 by the tiles (`tdpbf16ps`: 16 x 16 outputs times 32 inputs an instruction, where
//! AVX-512 does 16 multiply-adds).
//!
//! They serve the chunks of many rows (a prompt, the candidates' pass of span answers), which
//! otherwise dequantize every matrix to f32 for the GEMM: 118 prompt tokens of SmolLM2 took
//! 0.35–0.58 s that way on 2 cores. The weights are converted to bf16 a band of rows at a time
//! as the product needs them, laid out as the tiles load them ([`band_from_f32`]); a decoding
//! step's few rows stay on the quantized kernels, which read four times fewer bytes.
//!
//! Each output row is computed from its own input row, over the columns in a fixed order: how a
//! prompt is cut into chunks does not change what a row gets (a prefix cache stays exact).
//!
//! The tiles are used only where the CPU has them and Linux grants their state to the process
//! (`arch_prctl(ARCH_REQ_XCOMP_PERM)`); `CAPSTAN_AMX=off` turns them off (the f32 GEMM then).

use std::sync::OnceLock;

use rayon::prelude::*;

use super::OutPtr;

/// Rows (of the weights, or of `x`) in a tile, and the bf16 values of a tile's line.
const TILE_ROWS: usize = 16;
const TILE_COLS: usize = 32;

/// Whether products run on AMX tiles here: the CPU has AMX-TILE and AMX-BF16, the kernel gave
/// this process their state, and `CAPSTAN_AMX` is not `off` (or `0`). Asked once.
pub fn available() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| {
        let off = std::env::var("CAPSTAN_AMX").is_ok_and(|v| v == "off" || v == "0");
        !off && tiles::enable()
    })
}

/// `v` rounded to the nearest bf16, ties to even (NaN stays NaN): as `half::bf16::from_f32`,
/// without its branches, so that the loops converting whole rows are vectorized.
#[inline(always)]
fn bf16_bits(v: f32) -> u16 {
    let b = v.to_bits();
    let rounded = (b.wrapping_add(0x7fff + ((b >> 16) & 1)) >> 16) as u16;
    if b & 0x7fff_ffff > 0x7f80_0000 {
        0x7fc0 | (b >> 16) as u16 & 0x8000
    } else {
        rounded
    }
}

/// Pairs (`u32`) of bf16 in a panel: 16 rows of the matrix by 32 columns.
pub const PANEL_PAIRS: usize = TILE_ROWS * TILE_COLS / 2;

/// Whether a `(rows, cols)` matrix is whole panels, two bands of 16 rows at a time (every
/// projection of the Llama family's sizes is).
pub fn fits(rows: usize, cols: usize) -> bool {
    rows > 0 && cols > 0 && rows.is_multiple_of(2 * TILE_ROWS) && cols.is_multiple_of(TILE_COLS)
}

/// Writes band `band` (rows `16 band..16 band + 16`) of a `(rows, cols)` matrix into `out` in
/// the panels' layout, each value rounded to bf16, from its f32 values: `values(start, out)`
/// writes `out.len()` of them from the row-major index `start` on.
///
/// The layout, `tdpbf16ps`'s second operand: the band's `cols / 32` panels in order, panel
/// `k` 16 lines, line `i` the 16 rows' values at columns `32k + 2i` and `32k + 2i + 1` side
/// by side (a pair a `u32`).
pub fn band_from_f32(
    cols: usize,
    band: usize,
    values: impl Fn(usize, &mut [f32]),
    out: &mut [u32],
) {
    let mut f = vec![0f32; TILE_ROWS * cols];
    values(band * TILE_ROWS * cols, &mut f);
    let row_pairs: Vec<u32> = f
        .chunks_exact(2)
        .map(|p| bf16_bits(p[0]) as u32 | (bf16_bits(p[1]) as u32) << 16)
        .collect();
    for (block, panel) in out.chunks_exact_mut(PANEL_PAIRS).enumerate() {
        for (line, pairs) in panel.chunks_exact_mut(TILE_ROWS).enumerate() {
            let at = block * TILE_COLS / 2 + line;
            for (r, v) in pairs.iter_mut().enumerate() {
                *v = row_pairs[r * cols / 2 + at];
            }
        }
    }
}

/// A cache line's bytes, aligned as one: the buffers the tiles load from are made of them,
/// because `tileloadd` reads a line that straddles two about four times slower (measured on
/// this project's Xeon VM: 2 loads of 1 KB in 9 ns aligned, 40 ns 16 bytes off, which is where
/// a large allocation of the C allocator starts).
#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Line([u8; 64]);

/// A buffer of whole cache lines, read and written as `u16` or `u32` values.
#[derive(Default)]
struct Lines(Vec<Line>);

impl Lines {
    /// At least `values` zeroed values of `T`.
    fn with_len<T: LineValue>(values: usize) -> Self {
        let mut lines = Lines::default();
        lines.resize::<T>(values);
        lines
    }

    /// Room for at least `values` values of `T`: what it held is kept where it fits, new
    /// lines are zeroed.
    fn resize<T: LineValue>(&mut self, values: usize) {
        let bytes = values * std::mem::size_of::<T>();
        self.0.resize(bytes.div_ceil(64), Line([0; 64]));
    }

    fn values<T: LineValue>(&self) -> &[T] {
        let n = self.0.len() * 64 / std::mem::size_of::<T>();
        // SAFETY: `Line` is plain bytes aligned to 64, more than `T`'s alignment; every bit
        // pattern is a valid `T` (`LineValue` is implemented for `u16` and `u32` only).
        unsafe { std::slice::from_raw_parts(self.0.as_ptr().cast::<T>(), n) }
    }

    fn values_mut<T: LineValue>(&mut self) -> &mut [T] {
        let n = self.0.len() * 64 / std::mem::size_of::<T>();
        // SAFETY: as in `values`, and the borrow is unique.
        unsafe { std::slice::from_raw_parts_mut(self.0.as_mut_ptr().cast::<T>(), n) }
    }
}

/// The plain integers a [`Lines`] buffer holds.
trait LineValue: Copy {}
impl LineValue for u16 {}
impl LineValue for u32 {}

thread_local! {
    /// Two bands of the matrix in the panels' layout, made by the task that multiplies by
    /// them (and reused by the thread's next task).
    static BANDS: std::cell::RefCell<Lines> = std::cell::RefCell::new(Lines::default());
}

/// `y = x W^T` on the tiles for a `(rows, cols)` matrix `W` given band by band (`band(b, out)`
/// writes band `b` in the panels' layout, as [`band_from_f32`] does): `x` `(n, cols)`
/// row-major, returns `(n, rows)`; `x` is carried as the sum of two bf16 values.
///
/// Each task converts two bands of the weights into a buffer of its thread and multiplies
/// every row of `x` by them: the weights are read once, and no memory the size of the matrix
/// is written (first touches of fresh memory cost as much as the products on a virtual
/// machine: SmolLM2's 270 MB of bf16 took longer to lay out than to multiply by).
///
/// # Panics
/// Where the tiles are not [`available`], the shape does not [`fits`], or `x` is not whole
/// rows.
pub fn matmul(
    x: &[f32],
    rows: usize,
    cols: usize,
    band: impl Fn(usize, &mut [u32]) + Sync,
) -> Vec<f32> {
    assert!(available(), "AMX tiles are not available");
    assert!(fits(rows, cols), "({rows}, {cols}) is not whole panels");
    assert_eq!(x.len() % cols, 0, "x is not a whole number of rows");
    let n = x.len() / cols;
    // Two tiles of x's rows at a time; the padding rows are zeros, their outputs dropped.
    let padded = n.div_ceil(2 * TILE_ROWS) * 2 * TILE_ROWS;
    // x as the sum of two bf16 rows (16 bits of its 24-bit mantissa), each multiplied by
    // the weights: rounded to one bf16, a row's outputs jumped with the rounding of its
    // inputs (logits moved by up to 0.5 on SmolLM2's parity prompt, wherever an earlier layer
    // changed a little, as an f16 KV cache changes it).
    let mut high = Lines::with_len::<u16>(padded * cols);
    let mut low = Lines::with_len::<u16>(padded * cols);
    high.values_mut::<u16>()
        .par_chunks_mut(cols)
        .zip(low.values_mut::<u16>().par_chunks_mut(cols))
        .zip(x.par_chunks(cols))
        .for_each(|((h, l), row)| {
            for ((h, l), &v) in h.iter_mut().zip(l.iter_mut()).zip(row) {
                *h = bf16_bits(v);
                *l = bf16_bits(v - f32::from_bits((*h as u32) << 16));
            }
        });
    let mut y = vec![0f32; padded * rows];
    let out = OutPtr(y.as_mut_ptr());
    let per_band = TILE_ROWS * cols / 2;
    (0..rows / (2 * TILE_ROWS))
        .into_par_iter()
        .for_each(|pair| {
            BANDS.with_borrow_mut(|bands| {
                bands.resize::<u32>(2 * per_band);
                let bands = &mut bands.values_mut::<u32>()[..2 * per_band];
                let (first, second) = bands.split_at_mut(per_band);
                band(2 * pair, first);
                band(2 * pair + 1, second);
                let xs = [high.values::<u16>(), low.values::<u16>()];
                // SAFETY: the tiles are available (asserted above); task `pair` writes output
                // columns `32 pair..32 pair + 32` of `y` only, which outlives the tasks; `high`
                // and `low` hold `padded` rows of `cols`, `bands` two bands' panels.
                unsafe { tiles::band_pair(xs, padded, cols, bands, rows, pair, out) }
            })
        });
    y.truncate(n * rows);
    y
}

#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
mod tiles {
    use std::arch::asm;

    use super::{PANEL_PAIRS, TILE_COLS, TILE_ROWS};
    use crate::cpu::OutPtr;

    /// Asks Linux for the tiles' state (it is off until a process asks), where CPUID says the
    /// CPU has AMX-TILE and AMX-BF16 (and so AVX512-BF16, which packs the panels).
    pub(super) fn enable() -> bool {
        use std::arch::x86_64::{__cpuid_count, __get_cpuid_max};
        // Leaf 7 is asked for only where it exists; EDX bit 24 is AMX-TILE, bit 22 AMX-BF16.
        let has = __get_cpuid_max(0).0 >= 7
            && {
                let leaf = __cpuid_count(7, 0);
                (leaf.edx >> 24) & 1 == 1 && (leaf.edx >> 22) & 1 == 1
            }
            && std::is_x86_feature_detected!("avx512bf16")
            && std::is_x86_feature_detected!("avx512bw");
        const ARCH_REQ_XCOMP_PERM: libc::c_long = 0x1023;
        const XFEATURE_XTILEDATA: libc::c_long = 18;
        // SAFETY: arch_prctl with these arguments only changes this process's permissions.
        has && unsafe {
            libc::syscall(
                libc::SYS_arch_prctl,
                ARCH_REQ_XCOMP_PERM,
                XFEATURE_XTILEDATA,
            )
        } == 0
    }

    /// `ldtilecfg`'s operand: palette 1, each tile's bytes per line and lines.
    #[repr(C, align(64))]
    struct TileConfig {
        palette: u8,
        start_row: u8,
        reserved: [u8; 14],
        bytes_per_row: [u16; 16],
        rows: [u8; 16],
    }

    /// Output columns `32 pair..32 pair + 32` of every row of `y` (`padded` rows of `rows`):
    /// tiles 0–3 accumulate a 32 x 32 block of outputs, 4–5 hold two tiles of x's rows (its
    /// high parts, then its low), 6–7 two panels of `bands` (bands `2 pair` and `2 pair + 1`,
    /// in the panels' layout).
    ///
    /// # Safety
    /// The tiles are available ([`super::available`]); both parts of `xs` hold `padded` rows
    /// (a multiple of 32) of `cols` bf16 values, `bands` two bands of `cols`; `out` points to
    /// `padded * rows` floats no one else writes in these columns.
    pub(super) unsafe fn band_pair(
        xs: [&[u16]; 2],
        padded: usize,
        cols: usize,
        bands: &[u32],
        rows: usize,
        pair: usize,
        out: OutPtr,
    ) {
        // Every tile: 16 lines of 64 bytes (16 f32 outputs, 32 bf16 inputs, or a panel's 16
        // pairs of columns).
        let config = TileConfig {
            palette: 1,
            start_row: 0,
            reserved: [0; 14],
            bytes_per_row: [64, 64, 64, 64, 64, 64, 64, 64, 0, 0, 0, 0, 0, 0, 0, 0],
            rows: [16, 16, 16, 16, 16, 16, 16, 16, 0, 0, 0, 0, 0, 0, 0, 0],
        };
        asm!("ldtilecfg [{}]", in(reg) &config, options(nostack, readonly));
        let blocks = cols / TILE_COLS;
        let x_stride = cols * 2;
        let y_stride = rows * 4;
        assert!(bands.len() >= 2 * blocks * PANEL_PAIRS);
        assert!(xs[0].len() >= padded * cols && xs[1].len() >= padded * cols);
        let band0 = bands.as_ptr();
        let band1 = band0.add(blocks * PANEL_PAIRS);
        for r in (0..padded).step_by(2 * TILE_ROWS) {
            asm!(
                "tilezero tmm0",
                "tilezero tmm1",
                "tilezero tmm2",
                "tilezero tmm3",
                options(nostack, nomem)
            );
            let high0 = xs[0].as_ptr().add(r * cols);
            let high1 = high0.add(TILE_ROWS * cols);
            let low0 = xs[1].as_ptr().add(r * cols);
            let low1 = low0.add(TILE_ROWS * cols);
            for k in 0..blocks {
                asm!(
                    "tileloadd tmm4, [{h0} + {xs}*1]",
                    "tileloadd tmm5, [{h1} + {xs}*1]",
                    "tileloadd tmm6, [{w0} + {ws}*1]",
                    "tileloadd tmm7, [{w1} + {ws}*1]",
                    "tdpbf16ps tmm0, tmm4, tmm6",
                    "tdpbf16ps tmm1, tmm4, tmm7",
                    "tdpbf16ps tmm2, tmm5, tmm6",
                    "tdpbf16ps tmm3, tmm5, tmm7",
                    "tileloadd tmm4, [{l0} + {xs}*1]",
                    "tileloadd tmm5, [{l1} + {xs}*1]",
                    "tdpbf16ps tmm0, tmm4, tmm6",
                    "tdpbf16ps tmm1, tmm4, tmm7",
                    "tdpbf16ps tmm2, tmm5, tmm6",
                    "tdpbf16ps tmm3, tmm5, tmm7",
                    h0 = in(reg) high0.add(k * TILE_COLS),
                    h1 = in(reg) high1.add(k * TILE_COLS),
                    l0 = in(reg) low0.add(k * TILE_COLS),
                    l1 = in(reg) low1.add(k * TILE_COLS),
                    w0 = in(reg) band0.add(k * PANEL_PAIRS),
                    w1 = in(reg) band1.add(k * PANEL_PAIRS),
                    xs = in(reg) x_stride,
                    ws = in(reg) 64usize,
                    options(nostack, readonly)
                );
            }
            let y0 = out.0.add(r * rows + 2 * pair * TILE_ROWS);
            let y2 = y0.add(TILE_ROWS * rows);
            asm!(
                "tilestored [{y0} + {ys}*1], tmm0",
                "tilestored [{y1} + {ys}*1], tmm1",
                "tilestored [{y2} + {ys}*1], tmm2",
                "tilestored [{y3} + {ys}*1], tmm3",
                y0 = in(reg) y0,
                y1 = in(reg) y0.add(TILE_ROWS),
                y2 = in(reg) y2,
                y3 = in(reg) y2.add(TILE_ROWS),
                ys = in(reg) y_stride,
                options(nostack)
            );
        }
        asm!("tilerelease", options(nostack, nomem));
    }
}

#[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
mod tiles {
    use crate::cpu::OutPtr;

    pub(super) fn enable() -> bool {
        false
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) unsafe fn band_pair(
        _: [&[u16]; 2],
        _: usize,
        _: usize,
        _: &[u32],
        _: usize,
        _: usize,
        _: OutPtr,
    ) {
        unreachable!("no AMX tiles off x86-64 Linux")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use half::bf16;

    fn matrix(rows: usize, cols: usize, seed: u32) -> Vec<f32> {
        (0..rows * cols)
            .map(|i| {
                let h = (i as u32 ^ seed)
                    .wrapping_mul(2_654_435_761)
                    .rotate_left(13);
                (h % 2001) as f32 / 1000.0 - 1.0
            })
            .collect()
    }

    /// `x W^T` on the tiles for a row-major f32 `w`.
    fn product(x: &[f32], w: &[f32], rows: usize, cols: usize) -> Vec<f32> {
        matmul(x, rows, cols, |b, out| {
            band_from_f32(
                cols,
                b,
                |start, f| f.copy_from_slice(&w[start..start + f.len()]),
                out,
            )
        })
    }

    fn round(v: f32) -> f64 {
        bf16::from_f32(v).to_f64()
    }

    /// The tiles' products equal the f64 products of the rows and the bf16-rounded weights to
    /// f32's accumulation error (the rows are carried in two bf16 parts), for row counts that
    /// fill no tile, one, and several with padding.
    #[test]
    fn tile_products_equal_the_rounded_reference() {
        if !available() {
            eprintln!("skipped: this CPU (or kernel) gives no AMX tiles");
            return;
        }
        let (rows, cols) = (64, 96);
        let w = matrix(rows, cols, 7);
        for n in [1, 16, 33, 70] {
            let x = matrix(n, cols, 11 + n as u32);
            let y = product(&x, &w, rows, cols);
            assert_eq!(y.len(), n * rows);
            for i in 0..n {
                for j in 0..rows {
                    let want: f64 = (0..cols)
                        .map(|c| x[i * cols + c] as f64 * round(w[j * cols + c]))
                        .sum();
                    let got = y[i * rows + j] as f64;
                    assert!(
                        (got - want).abs() < 1e-4,
                        "n {n}, ({i}, {j}): {got} against {want}"
                    );
                }
            }
        }
    }

    /// A row's outputs do not depend on the rows beside it (a prefix cache's exactness).
    #[test]
    fn a_row_gets_the_same_outputs_whatever_rows_come_with_it() {
        if !available() {
            eprintln!("skipped: this CPU (or kernel) gives no AMX tiles");
            return;
        }
        let (rows, cols) = (32, 64);
        let w = matrix(rows, cols, 3);
        let x = matrix(40, cols, 5);
        let all = product(&x, &w, rows, cols);
        for i in [0, 17, 39] {
            let alone = product(&x[i * cols..(i + 1) * cols], &w, rows, cols);
            assert_eq!(alone, all[i * rows..(i + 1) * rows]);
        }
    }

    #[test]
    fn rounding_to_bf16_is_halfs() {
        for v in [
            0.0f32,
            -0.0,
            1.0,
            1.0 + 1.0 / 256.0,
            1.0 + 3.0 / 512.0,
            -3.3e-39,
            6.5e4,
            f32::MAX,
            f32::INFINITY,
        ]
        .into_iter()
        .chain((0..1000).map(|i| (i as f32 * 0.7317).sin() * 1e3))
        {
            assert_eq!(bf16_bits(v), bf16::from_f32(v).to_bits(), "{v}");
        }
        assert!(bf16::from_bits(bf16_bits(f32::NAN)).is_nan());
        assert!(bf16::from_bits(bf16_bits(f32::from_bits(0x7f80_0001))).is_nan());
    }

    /// The buffers the tiles load from start on a cache line, whatever their size.
    #[test]
    fn line_buffers_are_aligned_to_cache_lines() {
        for values in [1, 31, 32, 4_096, 1_000_003] {
            let mut lines = Lines::with_len::<u16>(values);
            assert!(lines.values::<u16>().len() >= values);
            assert_eq!(lines.values::<u16>().as_ptr() as usize % 64, 0);
            lines.resize::<u32>(values);
            assert!(lines.values_mut::<u32>().len() >= values);
            assert_eq!(lines.values::<u32>().as_ptr() as usize % 64, 0);
        }
    }

    #[test]
    fn shapes_that_are_not_whole_panels_do_not_fit() {
        assert!(fits(576, 1536));
        assert!(!fits(48, 64));
        assert!(!fits(64, 48));
    }
}
