//! Int8 matrix products for encoder layers: `y = x W^T + b` with `W` quantized once per output
//! channel (`w ≈ s_j q`, `q` in `-127..=127`) and `x` quantized per row at every call
//! (`x ≈ s_i q`), the dynamic quantization of ONNX Runtime's `MatMulInteger` and PyTorch's
//! `quantize_dynamic`. Each output is one exact integer dot product over the whole row, scaled
//! once: `y_ij = s_i s_j Σ_k q_ik q_jk + b_j`.
//!
//! The weights are packed at load into panels of 16 output channels whose 4 consecutive
//! inputs sit together (64 bytes a group of 4 inputs), the layout of `vpdpbusd`: one
//! instruction multiplies 4 unsigned activation bytes by 4 signed weight bytes for 16 outputs.
//! The unsigned activations are the signed ones plus 128; the `128 Σ_k q_jk` this adds is
//! subtracted once per output.
//!
//! Kernels, picked at run time ([`Int8Kernel::best`]): AVX-512 VNNI (tiles of 4 rows by 64
//! outputs, 16 accumulators of 16 lanes), AVX2 (`maddubs` on `|w|` and `x` signed by `w`, so
//! that no pair of products saturates 16 bits), and a portable version. Integer sums are
//! exact and the scaling is the same f32 operations in the same order in every kernel, so all
//! kernels give bit-identical outputs (tested), and each is tested against the f32 product.

#[cfg(target_arch = "x86_64")]
mod x86;

use rayon::prelude::*;

/// A function applied in place to rows of a product's output.
pub type Activation<'a> = &'a (dyn Fn(&mut [f32]) + Sync);

/// Output channels per panel.
const PANEL: usize = 16;
/// Inputs per group (one `vpdpbusd` lane).
const GROUP: usize = 4;
/// Bytes of one group of a panel.
const GROUP_BYTES: usize = PANEL * GROUP;

/// A weight matrix `(rows, cols)` (`rows` outputs of `cols` inputs) quantized to int8 per
/// output channel and packed for [`Int8Matrix::matmul_into`].
#[derive(Debug, Clone)]
pub struct Int8Matrix {
    rows: usize,
    cols: usize,
    /// `ceil(cols / 4)`.
    groups: usize,
    /// `ceil(rows / 16)`.
    panels: usize,
    /// `panels x groups x 16 x 4` signed bytes; padding is zero.
    packed: Vec<i8>,
    /// Per output channel (padded with zeros to `panels * 16`).
    scales: Vec<f32>,
    /// `128 Σ_k q_jk` per output channel (padded likewise): what the unsigned activations add.
    offsets: Vec<i32>,
    /// `1 / s_k` per input where the matrix was smoothed ([`Int8Matrix::quantize_smoothed`]):
    /// rows of `x` are multiplied by it before they are quantized.
    input_scale: Option<Vec<f32>>,
}

/// An [`Int8Matrix`] as stored: its shape and packed arrays, borrowed.
#[derive(Debug, Clone, Copy)]
pub struct Int8Parts<'a> {
    /// Outputs.
    pub rows: usize,
    /// Inputs.
    pub cols: usize,
    /// The weights in the kernels' panel layout, padding included.
    pub packed: &'a [i8],
    /// Per output channel, padded to whole panels.
    pub scales: &'a [f32],
    /// `128 Σ_k q_jk` per output channel, padded likewise.
    pub offsets: &'a [i32],
    /// `1 / s_k` per input of a smoothed matrix.
    pub input_scale: Option<&'a [f32]>,
}

/// Rows of `x` quantized for one product: `x_i ≈ scales[i] q_i`, each row padded with zeros
/// to whole groups; stored plus 128 (as unsigned bytes) for the VNNI kernel.
pub(crate) struct QuantizedRows {
    pub(crate) q: Vec<u8>,
    pub(crate) scales: Vec<f32>,
    /// Bytes per row (`groups * 4`).
    pub(crate) stride: usize,
}

impl Int8Matrix {
    /// Quantizes `w` (`rows x cols`, row-major, as `nn.Linear.weight`) per output channel:
    /// `s_j = max_k |w_jk| / 127`, `q_jk = round(w_jk / s_j)` (ties to even).
    pub fn quantize(w: &[f32], rows: usize, cols: usize) -> Self {
        assert_eq!(w.len(), rows * cols, "weights are not rows x cols");
        let groups = cols.div_ceil(GROUP);
        let panels = rows.div_ceil(PANEL);
        let mut packed = vec![0i8; panels * groups * GROUP_BYTES];
        let mut scales = vec![0f32; panels * PANEL];
        let mut offsets = vec![0i32; panels * PANEL];
        // One panel (16 output channels) per task: panels own disjoint bytes.
        packed
            .par_chunks_mut(groups * GROUP_BYTES)
            .zip(scales.par_chunks_mut(PANEL))
            .zip(offsets.par_chunks_mut(PANEL))
            .enumerate()
            .for_each(|(panel, ((bytes, scales), offsets))| {
                let mut q = vec![0u8; cols];
                for lane in 0..PANEL {
                    let j = panel * PANEL + lane;
                    if j >= rows {
                        break;
                    }
                    // A weight row is quantized as an activation row is, on the portable path.
                    let row = &w[j * cols..(j + 1) * cols];
                    scales[lane] = quantize_row(Int8Kernel::Portable, row, None, &mut q, false);
                    let mut sum = 0i32;
                    for (k, &v) in q.iter().enumerate() {
                        let v = v as i8;
                        sum += v as i32;
                        bytes[(k / GROUP) * GROUP_BYTES + lane * GROUP + k % GROUP] = v;
                    }
                    offsets[lane] = 128 * sum;
                }
            });
        Self {
            rows,
            cols,
            groups,
            panels,
            packed,
            scales,
            offsets,
            input_scale: None,
        }
    }

    /// [`Int8Matrix::quantize`] of `W diag(s)`, whose products multiply `x` by `1 / s` before
    /// quantizing it: the same product in exact arithmetic, with the range of the inputs'
    /// outlier channels moved into the weights (SmoothQuant, Xiao et al. 2023,
    /// <https://arxiv.org/abs/2211.10438>). `smoothing` is `s`, one positive value per input.
    pub fn quantize_smoothed(w: &[f32], rows: usize, cols: usize, smoothing: &[f32]) -> Self {
        assert_eq!(smoothing.len(), cols, "one smoothing factor per input");
        assert!(
            smoothing.iter().all(|s| s.is_finite() && *s > 0.0),
            "smoothing factors are positive"
        );
        let scaled: Vec<f32> = w
            .chunks_exact(cols.max(1))
            .flat_map(|row| row.iter().zip(smoothing).map(|(w, s)| w * s))
            .collect();
        let mut m = Self::quantize(&scaled, rows, cols);
        m.input_scale = Some(smoothing.iter().map(|s| 1.0 / s).collect());
        m
    }

    /// Output size.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Input size.
    pub fn cols(&self) -> usize {
        self.cols
    }

    /// The matrix the products use, in f32, row-major (`s_j q_jk`, times `1 / s_k` where
    /// smoothed).
    pub fn dequantize(&self) -> Vec<f32> {
        let mut out = vec![0f32; self.rows * self.cols];
        for (j, row) in out.chunks_exact_mut(self.cols).enumerate() {
            for (k, o) in row.iter_mut().enumerate() {
                let input = self.input_scale.as_ref().map_or(1.0, |m| m[k]);
                *o = self.scales[j] * self.weight(j, k) as f32 * input;
            }
        }
        out
    }

    /// The stored form of the matrix: what [`Int8Matrix::from_parts`] takes back.
    pub fn parts(&self) -> Int8Parts<'_> {
        Int8Parts {
            rows: self.rows,
            cols: self.cols,
            packed: &self.packed,
            scales: &self.scales,
            offsets: &self.offsets,
            input_scale: self.input_scale.as_deref(),
        }
    }

    /// The matrix whose [`Int8Matrix::parts`] were `parts`, with every length checked
    /// against `rows` and `cols` (a file read back may be short or for another shape).
    pub fn from_parts(parts: Int8Parts<'_>) -> Result<Self, String> {
        let Int8Parts {
            rows,
            cols,
            packed,
            scales,
            offsets,
            input_scale,
        } = parts;
        let groups = cols.div_ceil(GROUP);
        let panels = rows.div_ceil(PANEL);
        let lengths = [
            (
                "packed weights",
                packed.len(),
                panels * groups * GROUP_BYTES,
            ),
            ("scales", scales.len(), panels * PANEL),
            ("offsets", offsets.len(), panels * PANEL),
            ("input scales", input_scale.map_or(cols, <[f32]>::len), cols),
        ];
        for (what, got, want) in lengths {
            if got != want {
                return Err(format!(
                    "{what}: {got} values where a ({rows}, {cols}) matrix has {want}"
                ));
            }
        }
        Ok(Self {
            rows,
            cols,
            groups,
            panels,
            packed: packed.to_vec(),
            scales: scales.to_vec(),
            offsets: offsets.to_vec(),
            input_scale: input_scale.map(<[f32]>::to_vec),
        })
    }

    /// The quantized weight of output `j`, input `k`.
    fn weight(&self, j: usize, k: usize) -> i8 {
        let (panel, lane) = (j / PANEL, j % PANEL);
        self.packed[(panel * self.groups + k / GROUP) * GROUP_BYTES + lane * GROUP + k % GROUP]
    }

    /// `y = x W^T + bias` (or, with `accumulate`, `y += x W^T + bias`): `x` is `n x cols`,
    /// `y` is `n x rows`, both row-major; on the best kernel this CPU runs, threaded over rows.
    pub fn matmul_into(&self, x: &[f32], y: &mut [f32], bias: Option<&[f32]>, accumulate: bool) {
        self.matmul_into_with(Int8Kernel::best(), x, y, bias, accumulate);
    }

    /// [`Int8Matrix::matmul_into`] (not accumulating) followed by `activation` on every
    /// output, applied by each thread to the rows it just computed while they are still in
    /// its cache (an activation pass over the whole output streams it from memory again).
    pub fn matmul_activated_into(
        &self,
        x: &[f32],
        y: &mut [f32],
        bias: Option<&[f32]>,
        activation: Activation<'_>,
    ) {
        self.matmul_chunks(Int8Kernel::best(), x, y, bias, false, Some(activation));
    }

    /// [`Int8Matrix::matmul_into`] on `kernel` (the best one where this CPU lacks it).
    pub fn matmul_into_with(
        &self,
        kernel: Int8Kernel,
        x: &[f32],
        y: &mut [f32],
        bias: Option<&[f32]>,
        accumulate: bool,
    ) {
        self.matmul_chunks(kernel, x, y, bias, accumulate, None);
    }

    fn matmul_chunks(
        &self,
        kernel: Int8Kernel,
        x: &[f32],
        y: &mut [f32],
        bias: Option<&[f32]>,
        accumulate: bool,
        activation: Option<Activation<'_>>,
    ) {
        assert_eq!(
            x.len() % self.cols.max(1),
            0,
            "x is not a whole number of rows"
        );
        let n = x.len() / self.cols.max(1);
        assert_eq!(y.len(), n * self.rows, "y is not n x rows");
        if let Some(b) = bias {
            assert_eq!(b.len(), self.rows, "one bias per output");
        }
        let kernel = if kernel.available() {
            kernel
        } else {
            Int8Kernel::best()
        };
        let xq = self.quantize_rows(kernel, x, n);
        let threads = rayon::current_num_threads().max(1);
        // Whole tiles of 4 rows per task, enough tasks to balance, few enough to keep each
        // panel's weights in cache across the rows of a task.
        let chunk = (n.div_ceil(threads * 2).div_ceil(4) * 4).clamp(4, 256);
        let run = |(c, y_chunk): (usize, &mut [f32])| {
            let job = Job {
                xq: &xq,
                r0: c * chunk,
                bias,
                accumulate,
            };
            self.rows_into(kernel, job, y_chunk);
            if let Some(activation) = activation {
                activation(y_chunk);
            }
        };
        if n * self.rows * self.cols < PARALLEL_MIN || threads == 1 {
            y.chunks_mut(chunk * self.rows).enumerate().for_each(run);
        } else {
            y.par_chunks_mut(chunk * self.rows)
                .enumerate()
                .for_each(run);
        }
    }

    /// Quantizes the `n` rows of `x` for `kernel` ([`quantize_row`]).
    fn quantize_rows(&self, kernel: Int8Kernel, x: &[f32], n: usize) -> QuantizedRows {
        let unsigned = kernel == Int8Kernel::Avx512Vnni;
        let stride = self.groups * GROUP;
        let mut q = vec![if unsigned { 128u8 } else { 0 }; n * stride];
        let mut scales = vec![0f32; n];
        let quantize = |((row, qr), s): ((&[f32], &mut [u8]), &mut f32)| {
            *s = quantize_row(kernel, row, self.input_scale.as_deref(), qr, unsigned);
        };
        if n * self.cols < PARALLEL_MIN {
            x.chunks_exact(self.cols)
                .zip(q.chunks_exact_mut(stride))
                .zip(scales.iter_mut())
                .for_each(quantize);
        } else {
            x.par_chunks_exact(self.cols)
                .zip(q.par_chunks_exact_mut(stride))
                .zip(scales.par_iter_mut())
                .for_each(quantize);
        }
        QuantizedRows { q, scales, stride }
    }

    /// `job`'s rows of the product into `y` (those rows of the output).
    fn rows_into(&self, kernel: Int8Kernel, job: Job<'_>, y: &mut [f32]) {
        #[cfg(target_arch = "x86_64")]
        {
            // SAFETY: `matmul_into_with` runs only kernels this CPU has; `y` holds whole
            // output rows, and `job.xq` every row from `job.r0` they need.
            match kernel {
                Int8Kernel::Avx512Vnni => {
                    return unsafe { x86::avx512_vnni::rows_into(self, job, y) }
                }
                Int8Kernel::Avx2 => return unsafe { x86::avx2::rows_into(self, job, y) },
                Int8Kernel::Portable => {}
            }
        }
        let Job {
            xq,
            r0,
            bias,
            accumulate,
        } = job;
        let rows = y.len() / self.rows;
        let _ = kernel;
        for i in 0..rows {
            let qx = &xq.q[(r0 + i) * xq.stride..(r0 + i + 1) * xq.stride];
            let sx = xq.scales[r0 + i];
            for j in 0..self.rows {
                let acc: i32 = (0..self.cols)
                    .map(|k| qx[k] as i8 as i32 * self.weight(j, k) as i32)
                    .sum();
                let out = &mut y[i * self.rows + j];
                *out = scale_output(
                    acc,
                    sx,
                    self.scales[j],
                    bias.map_or(0.0, |b| b[j]),
                    *out,
                    accumulate,
                );
            }
        }
    }
}

/// Quantizes one row `z` (`x`, or `x_k m_k` with `multiplier` `m`): `s = max_k |z_k| / 127`,
/// `q = round(z / s)` (ties to even) into `q`, plus 128 where `unsigned`; returns `s`. The SIMD
/// versions compute the same values.
fn quantize_row(
    kernel: Int8Kernel,
    row: &[f32],
    multiplier: Option<&[f32]>,
    q: &mut [u8],
    unsigned: bool,
) -> f32 {
    #[cfg(target_arch = "x86_64")]
    match kernel {
        // SAFETY: the products run only kernels this CPU has.
        Int8Kernel::Avx512Vnni => {
            return unsafe { x86::avx512_vnni::quantize_row(row, multiplier, q, unsigned) }
        }
        Int8Kernel::Avx2 | Int8Kernel::Portable => {}
    }
    let _ = kernel;
    let z = |k: usize| multiplier.map_or(row[k], |m| row[k] * m[k]);
    let amax = (0..row.len()).fold(0f32, |m, k| m.max(z(k).abs()));
    let scale = amax / 127.0;
    let inv = if scale > 0.0 { 1.0 / scale } else { 0.0 };
    let shift = if unsigned { 128u8 } else { 0 };
    for (k, o) in q.iter_mut().take(row.len()).enumerate() {
        *o = (round_to_i8(z(k) * inv) as u8).wrapping_add(shift);
    }
    scale
}

/// One task's share of a product: the quantized rows of `x` from `r0`, and what the epilogue
/// adds.
#[derive(Clone, Copy)]
pub(crate) struct Job<'a> {
    pub(crate) xq: &'a QuantizedRows,
    pub(crate) r0: usize,
    pub(crate) bias: Option<&'a [f32]>,
    pub(crate) accumulate: bool,
}

/// One output from its integer sum: the same f32 operations, in the same order, as the SIMD
/// kernels' epilogues (no fused multiply-add).
#[inline(always)]
fn scale_output(acc: i32, sx: f32, sw: f32, bias: f32, old: f32, accumulate: bool) -> f32 {
    let v = acc as f32 * (sx * sw) + bias;
    if accumulate {
        old + v
    } else {
        v
    }
}

/// Round to nearest, ties to even, for `|v| <= 127.5` (what `cvtps2dq` does): adding
/// `1.5 * 2^23` leaves no fraction bits.
#[inline(always)]
fn round_to_i8(v: f32) -> i8 {
    const ROUND: f32 = 12_582_912.0;
    (((v + ROUND) - ROUND) as i32).clamp(-127, 127) as i8
}

/// Below this many multiply-adds a product runs on the calling thread.
const PARALLEL_MIN: usize = 1 << 18;

/// The kernels of a product.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Int8Kernel {
    /// Plain Rust.
    Portable,
    /// AVX2 `maddubs` (x86-64).
    Avx2,
    /// AVX-512 VNNI `vpdpbusd` on 512-bit registers.
    Avx512Vnni,
}

impl Int8Kernel {
    /// Every kernel, from the most portable.
    pub const ALL: [Int8Kernel; 3] = [Self::Portable, Self::Avx2, Self::Avx512Vnni];

    /// Whether this CPU runs the kernel.
    pub fn available(self) -> bool {
        #[cfg(target_arch = "x86_64")]
        {
            match self {
                Self::Portable => true,
                Self::Avx2 => std::is_x86_feature_detected!("avx2"),
                Self::Avx512Vnni => {
                    std::is_x86_feature_detected!("avx512f")
                        && std::is_x86_feature_detected!("avx512bw")
                        && std::is_x86_feature_detected!("avx512vl")
                        && std::is_x86_feature_detected!("avx512vnni")
                }
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            self == Self::Portable
        }
    }

    /// The fastest kernel this CPU runs.
    pub fn best() -> Self {
        [Self::Avx512Vnni, Self::Avx2]
            .into_iter()
            .find(|k| k.available())
            .unwrap_or(Self::Portable)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    fn random(n: usize, seed: u64, scale: f32) -> Vec<f32> {
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        (0..n).map(|_| rng.gen_range(-scale..scale)).collect()
    }

    /// `x W^T + b` in f64 from f32 inputs.
    fn reference(x: &[f32], w: &[f32], b: &[f32], n: usize, rows: usize, cols: usize) -> Vec<f32> {
        let mut y = vec![0f32; n * rows];
        for i in 0..n {
            for j in 0..rows {
                let dot: f64 = (0..cols)
                    .map(|k| x[i * cols + k] as f64 * w[j * cols + k] as f64)
                    .sum();
                y[i * rows + j] = (dot + b[j] as f64) as f32;
            }
        }
        y
    }

    #[test]
    fn every_kernel_equals_the_portable_one_bit_for_bit() {
        // Shapes with tails in rows, panels and groups, and the encoder's own.
        for &(n, rows, cols) in &[
            (1, 1, 1),
            (3, 17, 7),
            (5, 70, 130),
            (9, 384, 384),
            (37, 96, 1536),
        ] {
            let x = random(n * cols, 1, 2.0);
            let w = random(rows * cols, 2, 0.5);
            let b = random(rows, 3, 0.1);
            let m = Int8Matrix::quantize(&w, rows, cols);
            let mut want = random(n * rows, 4, 1.0);
            m.matmul_into_with(Int8Kernel::Portable, &x, &mut want, Some(&b), true);
            for kernel in Int8Kernel::ALL.into_iter().filter(|k| k.available()) {
                let mut got = random(n * rows, 4, 1.0);
                m.matmul_into_with(kernel, &x, &mut got, Some(&b), true);
                assert_eq!(got, want, "{kernel:?} at {n}x{rows}x{cols}");
                let mut fresh = vec![f32::NAN; n * rows];
                m.matmul_into_with(kernel, &x, &mut fresh, None, false);
                let mut fresh_want = vec![0f32; n * rows];
                m.matmul_into_with(Int8Kernel::Portable, &x, &mut fresh_want, None, false);
                assert_eq!(
                    fresh, fresh_want,
                    "{kernel:?} without bias at {n}x{rows}x{cols}"
                );
            }
        }
    }

    #[test]
    fn products_are_within_quantization_error_of_f32() {
        let (n, rows, cols) = (64, 384, 1536);
        let x = random(n * cols, 5, 1.0);
        let w = random(rows * cols, 6, 0.05);
        let b = random(rows, 7, 0.1);
        let want = reference(&x, &w, &b, n, rows, cols);
        let m = Int8Matrix::quantize(&w, rows, cols);
        for kernel in Int8Kernel::ALL.into_iter().filter(|k| k.available()) {
            let mut got = vec![0f32; n * rows];
            m.matmul_into_with(kernel, &x, &mut got, Some(&b), false);
            // Relative error of the whole output (rounding errors of 2 x 8 bits over 1,536
            // terms partly cancel): about 1% for uniform data.
            let num: f64 = got
                .iter()
                .zip(&want)
                .map(|(g, w)| ((g - w) as f64).powi(2))
                .sum();
            let den: f64 = want.iter().map(|w| (*w as f64).powi(2)).sum();
            let rel = (num / den).sqrt();
            assert!(rel < 0.02, "{kernel:?}: relative error {rel}");
            assert!(got.iter().all(|v| v.is_finite()));
        }
        // The dequantized matrix is what the product multiplies by.
        let deq = m.dequantize();
        let err = deq
            .iter()
            .zip(&w)
            .map(|(d, w)| (d - w).abs())
            .fold(0f32, f32::max);
        assert!(err <= 0.05 / 127.0 * 0.51, "weight error {err}");
    }

    #[test]
    fn smoothing_keeps_the_product_and_tames_an_outlier_channel() {
        let (n, rows, cols) = (16, 64, 384);
        let mut x = random(n * cols, 8, 1.0);
        // Channel 5 is 60 times larger than the rest, as in transformers' residual streams.
        for row in x.chunks_exact_mut(cols) {
            row[5] *= 60.0;
        }
        let w = random(rows * cols, 9, 0.05);
        let b = vec![0f32; rows];
        let want = reference(&x, &w, &b, n, rows, cols);
        let mut smoothing = vec![1f32; cols];
        smoothing[5] = 60f32.sqrt();
        let error = |m: &Int8Matrix, kernel: Int8Kernel| {
            let mut got = vec![0f32; n * rows];
            m.matmul_into_with(kernel, &x, &mut got, None, false);
            let num: f64 = got
                .iter()
                .zip(&want)
                .map(|(g, w)| ((g - w) as f64).powi(2))
                .sum();
            let den: f64 = want.iter().map(|w| (*w as f64).powi(2)).sum();
            ((num / den).sqrt(), got)
        };
        let plain = Int8Matrix::quantize(&w, rows, cols);
        let smoothed = Int8Matrix::quantize_smoothed(&w, rows, cols, &smoothing);
        let (plain_err, _) = error(&plain, Int8Kernel::Portable);
        let (smooth_err, want_bits) = error(&smoothed, Int8Kernel::Portable);
        assert!(
            smooth_err < plain_err * 0.7,
            "smoothed {smooth_err} vs plain {plain_err}"
        );
        for kernel in Int8Kernel::ALL.into_iter().filter(|k| k.available()) {
            assert!(
                error(&smoothed, kernel).1 == want_bits,
                "{kernel:?} differs"
            );
        }
    }

    #[test]
    fn zero_rows_and_zero_weights_give_the_bias() {
        let (n, rows, cols) = (2, 20, 8);
        let x = vec![0f32; n * cols];
        let w = vec![0f32; rows * cols];
        let b: Vec<f32> = (0..rows).map(|j| j as f32).collect();
        let m = Int8Matrix::quantize(&w, rows, cols);
        for kernel in Int8Kernel::ALL.into_iter().filter(|k| k.available()) {
            let mut y = vec![0f32; n * rows];
            m.matmul_into_with(kernel, &x, &mut y, Some(&b), false);
            assert_eq!(&y[..rows], &b[..], "{kernel:?}");
            assert_eq!(&y[rows..], &b[..], "{kernel:?}");
        }
    }

    #[test]
    fn a_matrix_rebuilt_from_its_parts_gives_the_same_products() {
        let (n, rows, cols) = (3, 37, 70);
        let x = random(n * cols, 11, 1.0);
        let w = random(rows * cols, 12, 0.05);
        let smoothing: Vec<f32> = (0..cols).map(|k| 0.5 + (k % 7) as f32 * 0.25).collect();
        for m in [
            Int8Matrix::quantize(&w, rows, cols),
            Int8Matrix::quantize_smoothed(&w, rows, cols, &smoothing),
        ] {
            let back = Int8Matrix::from_parts(m.parts()).expect("whole parts");
            let (mut want, mut got) = (vec![0f32; n * rows], vec![0f32; n * rows]);
            m.matmul_into(&x, &mut want, None, false);
            back.matmul_into(&x, &mut got, None, false);
            assert!(got == want);
            // A short array, or the parts given another shape, is refused, naming the array.
            let packed = &m.parts().packed[1..];
            let short = Int8Matrix::from_parts(Int8Parts {
                packed,
                ..m.parts()
            });
            assert!(short.unwrap_err().starts_with("packed weights"));
            let wider = Int8Matrix::from_parts(Int8Parts {
                cols: cols + 4,
                ..m.parts()
            });
            assert!(wider.is_err());
        }
    }
}
