//! Quantized matrix products on the CPU: `y = x W^T` with `W` kept in 4 or 8 bits and `x`
//! quantized per block of 32 to signed bytes (as llama.cpp's `Q8_1`), integer dot products
//! per block, f32 accumulation across blocks.
//!
//! GGML's block formats are repacked at load ([`QMatrix::from_ggml`]) into two layouts that
//! one pair of kernels serves: unsigned nibbles, with a fifth bit per weight for the 5-bit
//! formats, and a per-block scale and offset (Q4_0, Q4_1, Q4_K, Q5_0, Q5_1), and signed bytes
//! with a scale per 16 (Q8_0, Q6_K). Every weight keeps the value ggml
//! gives it. The product reuses each block of weights across up to four rows of `x` while it
//! sits in registers, so a step of many rows (a batched decoding step) costs far less than
//! that many steps; threads split the output columns.
//!
//! Kernels: AVX2 + FMA, picked at run time ([`super::math::has_avx2`]), and a portable
//! version of the same arithmetic; each tested against the f32 product of the dequantized
//! matrix.

mod fifth;
mod repack;
mod to_bf16;
#[cfg(target_arch = "x86_64")]
mod x86;

use rayon::prelude::*;

use super::amx;
use super::OutPtr;

pub use repack::GgmlFormat;

/// Weights per block (and activations per quantization block).
const BLOCK: usize = 32;

/// A quantized `(rows, cols)` matrix (`rows` outputs of `cols` inputs).
#[derive(Debug, Clone)]
pub struct QMatrix {
    rows: usize,
    cols: usize,
    layout: Layout,
}

#[derive(Debug, Clone)]
enum Layout {
    /// Per block of 32: 16 bytes (element `j` in the low nibble of byte `j`, element `j + 16`
    /// in its high nibble), `w = scale * q + offset`, `q` in `0..16`; or, for 5-bit formats,
    /// `q` in `0..32` with its fifth bit in `fifth` (planes of bits per row, laid out for the
    /// kernels: see [`fifth`]): about 24 bytes a block of Q5_0 where signed bytes took 40.
    U4 {
        nibbles: Vec<u8>,
        fifth: Option<Vec<u8>>,
        scales: Vec<f32>,
        offsets: Vec<f32>,
    },
    /// One signed byte per weight, `w = scale * q`, a scale per 16 weights.
    I8 { values: Vec<i8>, scales: Vec<f32> },
}

/// Rows of `x` quantized per block of 32: `x ≈ d q`, and `s = d Σq` per block (the offsets'
/// term of [`Layout::U4`]).
pub(crate) struct QuantizedRows {
    q: Vec<i8>,
    d: Vec<f32>,
    s: Vec<f32>,
    blocks: usize,
}

impl QuantizedRows {
    /// ggml's `quantize_row_q8_1`: `d = max|x| / 127`, `q = round(x / d)`.
    pub(crate) fn new(x: &[f32], cols: usize) -> Self {
        let blocks = cols / BLOCK;
        let n = x.len() / cols;
        let mut q = vec![0i8; x.len()];
        let mut d = Vec::with_capacity(n * blocks);
        let mut s = Vec::with_capacity(n * blocks);
        for (xb, qb) in x.chunks_exact(BLOCK).zip(q.chunks_exact_mut(BLOCK)) {
            let amax = xb.iter().fold(0f32, |m, v| m.max(v.abs()));
            let scale = amax / 127.0;
            let inv = if scale != 0.0 { 1.0 / scale } else { 0.0 };
            let mut sum = 0i32;
            for (o, &v) in qb.iter_mut().zip(xb) {
                *o = (v * inv).round() as i8;
                sum += *o as i32;
            }
            d.push(scale);
            s.push(scale * sum as f32);
        }
        Self { q, d, s, blocks }
    }

    fn row(&self, r: usize) -> RowRef<'_> {
        let b = self.blocks;
        RowRef {
            q: &self.q[r * b * BLOCK..(r + 1) * b * BLOCK],
            d: &self.d[r * b..(r + 1) * b],
            s: &self.s[r * b..(r + 1) * b],
        }
    }
}

/// One quantized row of `x`.
#[derive(Clone, Copy)]
struct RowRef<'a> {
    q: &'a [i8],
    d: &'a [f32],
    s: &'a [f32],
}

/// Output columns (matrix rows) per task of the thread pool: at most 64, and few enough that
/// every thread gets several tasks of a matrix, so that none waits long for another at the end
/// of a product (tasks of 64 gave a decoding step's 192-row `attn_v` 3 tasks for 2 threads).
/// A multiple of 4, the tiles' rows.
fn task_rows(rows: usize) -> usize {
    let threads = rayon::current_num_threads().max(1);
    (rows / (threads * 8)).clamp(8, 64) / 4 * 4
}

/// Below this many multiply-adds a product runs on the calling thread.
const PARALLEL_MIN: usize = 1 << 16;

impl QMatrix {
    fn new(rows: usize, cols: usize, layout: Layout) -> Self {
        Self { rows, cols, layout }
    }

    /// Output size.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Input size.
    pub fn cols(&self) -> usize {
        self.cols
    }

    /// Bytes held.
    pub fn bytes(&self) -> usize {
        match &self.layout {
            Layout::U4 { nibbles, fifth, .. } => {
                let planes = fifth.as_ref().map_or(0, Vec::len);
                nibbles.len() + planes + self.rows * self.cols / BLOCK * 8
            }
            Layout::I8 { values, .. } => values.len() + self.rows * self.cols / 16 * 4,
        }
    }

    /// The rows of `parts` stacked, in order (one product computes them all; fifth-bit planes
    /// are per row, so they stack too): `None` unless they share their columns and layout (a Q4_K_M file's Q6_K `attn_v` does not stack with
    /// its Q4_K `attn_q`, nor 5-bit with 4-bit matrices).
    pub fn stack(parts: &[&QMatrix]) -> Option<QMatrix> {
        let first = parts.first()?;
        if parts.iter().any(|p| p.cols != first.cols) {
            return None;
        }
        let rows = parts.iter().map(|p| p.rows).sum();
        let layout = match &first.layout {
            Layout::U4 { fifth, .. } => {
                let (mut nibbles, mut scales, mut offsets) = (Vec::new(), Vec::new(), Vec::new());
                let mut fifths = fifth.as_ref().map(|_| Vec::new());
                for p in parts {
                    let Layout::U4 {
                        nibbles: n,
                        fifth: f,
                        scales: s,
                        offsets: o,
                    } = &p.layout
                    else {
                        return None;
                    };
                    match (&mut fifths, f) {
                        (Some(all), Some(f)) => all.extend_from_slice(f),
                        (None, None) => {}
                        _ => return None,
                    }
                    nibbles.extend_from_slice(n);
                    scales.extend_from_slice(s);
                    offsets.extend_from_slice(o);
                }
                Layout::U4 {
                    nibbles,
                    fifth: fifths,
                    scales,
                    offsets,
                }
            }
            Layout::I8 { .. } => {
                let (mut values, mut scales) = (Vec::new(), Vec::new());
                for p in parts {
                    let Layout::I8 {
                        values: v,
                        scales: s,
                    } = &p.layout
                    else {
                        return None;
                    };
                    values.extend_from_slice(v);
                    scales.extend_from_slice(s);
                }
                Layout::I8 { values, scales }
            }
        };
        Some(QMatrix::new(rows, first.cols, layout))
    }

    /// The matrix in f32, row-major: each weight exactly as ggml dequantizes it.
    pub fn dequantize(&self) -> Vec<f32> {
        let mut out = vec![0f32; self.rows * self.cols];
        // A prompt chunk dequantizes each matrix it multiplies: on every thread, in pieces of
        // blocks (1 << 12 blocks: 512 KiB of floats).
        const PIECE: usize = BLOCK << 12;
        out.par_chunks_mut(PIECE)
            .enumerate()
            .for_each(|(p, piece)| self.dequantize_into(p * PIECE, piece));
        out
    }

    /// Row `r` in f32 into `out` (`cols` values), each weight as ggml dequantizes it: a token
    /// embedding looked up row by row.
    pub fn dequantize_row(&self, r: usize, out: &mut [f32]) {
        assert!(
            r < self.rows && out.len() == self.cols,
            "row {r} of {}",
            self.rows
        );
        self.dequantize_into(r * self.cols, out);
    }

    /// Weights `start..start + out.len()` (row-major; `start` a whole block) into `out`.
    fn dequantize_into(&self, start: usize, out: &mut [f32]) {
        match &self.layout {
            Layout::U4 {
                nibbles,
                fifth,
                scales,
                offsets,
            } => {
                let blocks = self.cols / BLOCK;
                for (i, o) in out.chunks_exact_mut(BLOCK).enumerate() {
                    let b = start / BLOCK + i;
                    let q = unsigned_block(nibbles, fifth.as_deref(), blocks, b);
                    let (s, m) = (scales[b], offsets[b]);
                    for (o, &q) in o.iter_mut().zip(&q) {
                        *o = s * q as f32 + m;
                    }
                }
            }
            Layout::I8 { values, scales } => {
                for (i, (o, &q)) in out.iter_mut().zip(&values[start..]).enumerate() {
                    *o = scales[(start + i) / 16] * q as f32;
                }
            }
        }
    }

    /// `y = x W^T` for a chunk of many rows on AMX tiles ([`amx`]: the weights rounded to
    /// bf16, `x` in two bf16 parts, f32 accumulation), `None` where this CPU has no tiles or
    /// the shape is not whole panels. Each weight is the f32 of [`QMatrix::dequantize`]
    /// rounded to bf16.
    pub fn matmul_amx(&self, x: &[f32]) -> Option<Vec<f32>> {
        if !self.fits_amx() {
            return None;
        }
        Some(amx::matmul(x, self.rows, self.cols, |band, out| {
            self.band_bf16(band, out)
        }))
    }

    /// Whether [`QMatrix::matmul_amx`] runs here: AMX tiles, a shape of whole panels.
    pub fn fits_amx(&self) -> bool {
        amx::available() && amx::fits(self.rows, self.cols)
    }

    /// `y = x W^T`: `x` `(n, cols)` row-major, returns `(n, rows)`; on the best kernel this
    /// CPU runs.
    pub fn matmul(&self, x: &[f32]) -> Vec<f32> {
        self.matmul_with(x, QKernel::best())
    }

    /// [`QMatrix::matmul`] on `kernel` (the best one where this CPU lacks it).
    pub fn matmul_with(&self, x: &[f32], kernel: QKernel) -> Vec<f32> {
        assert_eq!(x.len() % self.cols, 0, "x is not a whole number of rows");
        let kernel = if kernel.available() {
            kernel
        } else {
            QKernel::best()
        };
        let n = x.len() / self.cols;
        let xq = QuantizedRows::new(x, self.cols);
        let mut y = vec![0f32; n * self.rows];
        let out = OutPtr(y.as_mut_ptr());
        let task = task_rows(self.rows);
        let tasks = self.rows.div_ceil(task);
        let run = |t: usize| {
            let (r0, r1) = (t * task, ((t + 1) * task).min(self.rows));
            // SAFETY: tasks write disjoint output columns `r0..r1` of `y`, which outlives them.
            unsafe { self.columns(&xq, n, r0, r1, kernel, out) };
        };
        if n * self.rows * self.cols < PARALLEL_MIN {
            (0..tasks).for_each(run);
        } else {
            (0..tasks).into_par_iter().for_each(run);
        }
        y
    }

    /// Output columns `r0..r1` of every row of `y` (`n` rows of `self.rows`).
    ///
    /// # Safety
    /// `out` points to `n * self.rows` floats that no one else writes in columns `r0..r1`.
    unsafe fn columns(
        &self,
        xq: &QuantizedRows,
        n: usize,
        r0: usize,
        r1: usize,
        kernel: QKernel,
        out: OutPtr,
    ) {
        let mut c0 = 0;
        while c0 < n {
            let c = (n - c0).min(4);
            let xs: Vec<RowRef> = (c0..c0 + c).map(|i| xq.row(i)).collect();
            let mut r = r0;
            while r < r1 {
                let rn = (r1 - r).min(kernel.tile_rows(c));
                let mut tile = [[0f32; 4]; 4];
                self.tile(kernel, r, rn, &xs, &mut tile);
                for (i, row) in tile.iter().enumerate().take(rn) {
                    for (j, &v) in row.iter().enumerate().take(c) {
                        *out.0.add((c0 + j) * self.rows + r + i) = v;
                    }
                }
                r += rn;
            }
            c0 += c;
        }
    }

    /// `tile[i][j]` = row `r + i` of `W` (for `i < rn`) · `xs[j]`.
    fn tile(&self, kernel: QKernel, r: usize, rn: usize, xs: &[RowRef], tile: &mut [[f32; 4]; 4]) {
        // SAFETY: `matmul_with` runs only kernels this CPU has; the tiles lie in the matrix.
        #[cfg(target_arch = "x86_64")]
        unsafe {
            match kernel {
                QKernel::Avx2 => return x86::avx2::tile(self, r, rn, xs, tile),
                QKernel::AvxVnni => return x86::avx_vnni::tile(self, r, rn, xs, tile),
                QKernel::Avx512Vnni => return x86::avx512_vnni::tile(self, r, rn, xs, tile),
                QKernel::Avx512 => return x86::wide::tile(self, r, rn, xs, tile),
                QKernel::Portable => {}
            }
        }
        let _ = kernel;
        for (i, out) in tile.iter_mut().enumerate().take(rn) {
            for (o, x) in out.iter_mut().zip(xs) {
                *o = self.dot_portable(r + i, *x);
            }
        }
    }

    /// Row `r` of `W` · `x`, in plain Rust (the same arithmetic as the SIMD kernels).
    fn dot_portable(&self, r: usize, x: RowRef) -> f32 {
        let blocks = self.cols / BLOCK;
        let mut acc = 0f32;
        match &self.layout {
            Layout::U4 {
                nibbles,
                fifth,
                scales,
                offsets,
            } => {
                let mut off = 0f32;
                for b in 0..blocks {
                    let at = r * blocks + b;
                    let q = unsigned_block(nibbles, fifth.as_deref(), blocks, at);
                    let xq = &x.q[b * BLOCK..(b + 1) * BLOCK];
                    let isum: i32 = q.iter().zip(xq).map(|(&w, &a)| w as i32 * a as i32).sum();
                    acc += scales[at] * x.d[b] * isum as f32;
                    off += offsets[at] * x.s[b];
                }
                acc + off
            }
            Layout::I8 { values, scales } => {
                let row = &values[r * self.cols..(r + 1) * self.cols];
                for b in 0..blocks {
                    for h in 0..2 {
                        let at = b * BLOCK + h * 16;
                        let isum: i32 = row[at..at + 16]
                            .iter()
                            .zip(&x.q[at..at + 16])
                            .map(|(&w, &a)| w as i32 * a as i32)
                            .sum();
                        acc += scales[(r * self.cols + at) / 16] * x.d[b] * isum as f32;
                    }
                }
                acc
            }
        }
    }
}

/// Block `b`'s unsigned values in element order (nibbles and, for 5-bit formats, fifth bits;
/// rows of `blocks` blocks).
fn unsigned_block(nibbles: &[u8], fifth: Option<&[u8]>, blocks: usize, b: usize) -> [u8; BLOCK] {
    let nib = &nibbles[b * 16..b * 16 + 16];
    let high = fifth.map_or(0, |f| fifth::word(f, blocks, b));
    std::array::from_fn(|j| {
        let q = if j < 16 {
            nib[j] & 0xF
        } else {
            nib[j - 16] >> 4
        };
        q | (((high >> j) & 1) as u8) << 4
    })
}

/// The kernels of a product.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QKernel {
    /// Plain Rust.
    Portable,
    /// AVX2 + FMA (x86-64).
    Avx2,
    /// AVX2 with AVX-VNNI's byte dot products.
    AvxVnni,
    /// AVX2 with AVX-512 VNNI's byte dot products on 256-bit registers.
    Avx512Vnni,
    /// 512-bit registers (AVX-512 F, BW, VL and VNNI).
    Avx512,
}

impl QKernel {
    /// Every kernel, from the most portable.
    pub const ALL: [QKernel; 5] = [
        Self::Portable,
        Self::Avx2,
        Self::AvxVnni,
        Self::Avx512Vnni,
        Self::Avx512,
    ];

    /// Whether this CPU runs the kernel.
    pub fn available(self) -> bool {
        #[cfg(target_arch = "x86_64")]
        {
            let avx2 = super::math::has_avx2();
            match self {
                Self::Portable => true,
                Self::Avx2 => avx2,
                Self::AvxVnni => avx2 && std::is_x86_feature_detected!("avxvnni"),
                Self::Avx512Vnni => {
                    avx2 && std::is_x86_feature_detected!("avx512vnni")
                        && std::is_x86_feature_detected!("avx512vl")
                }
                Self::Avx512 => {
                    Self::Avx512Vnni.available()
                        && std::is_x86_feature_detected!("avx512f")
                        && std::is_x86_feature_detected!("avx512bw")
                }
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            self == Self::Portable
        }
    }

    /// Matrix rows per tile with `c` rows of `x`: as many as the accumulators (`rows x c`)
    /// and the unpacked weights leave registers for (16 of 256 bits, 32 of 512 bits).
    fn tile_rows(self, c: usize) -> usize {
        match self {
            Self::Avx512 => 4,
            _ if c == 1 => 4,
            _ => 2,
        }
    }

    /// The fastest kernel this CPU runs.
    pub fn best() -> Self {
        [Self::Avx512, Self::AvxVnni, Self::Avx512Vnni, Self::Avx2]
            .into_iter()
            .find(|k| k.available())
            .unwrap_or(Self::Portable)
    }
}
