//! BERT's linear layers on the CPU: f32 weights through the `gemm` crate, or int8 weights per
//! output channel with activations quantized per token (SmoothQuant's scaling folded into the
//! weights), written to and read from the int8 cache; and the calibration that records each
//! input channel's range.

use candle_core::{DType, Result, Tensor};
use candle_nn::VarBuilder;
use capstan_kernels::cpu::int8::{Int8Matrix, Int8Parts};
use rayon::prelude::*;

use super::{activate, HiddenAct};
use crate::int8_cache::{ArrayReader, ArrayWriter};

/// A tensor's values as a flat `f32` vector.
pub(super) fn flat(t: &Tensor) -> Result<Vec<f32>> {
    t.to_dtype(DType::F32)?.flatten_all()?.to_vec1::<f32>()
}

/// The `(cols, rows)` transpose of a row-major `(rows, cols)` matrix, by tiles that stay in
/// the cache: an element-by-element transpose writes each value to another cache line, and
/// was most of an int8 encoder's load (the weights are transposed at load, and back for
/// int8).
pub(super) fn transpose(m: &[f32], rows: usize, cols: usize) -> Vec<f32> {
    const TILE: usize = 32;
    let mut t = vec![0f32; m.len()];
    for r0 in (0..rows).step_by(TILE) {
        for c0 in (0..cols).step_by(TILE) {
            for r in r0..(r0 + TILE).min(rows) {
                let row = &m[r * cols..(r + 1) * cols];
                for c in c0..(c0 + TILE).min(cols) {
                    t[c * rows + r] = row[c];
                }
            }
        }
    }
    t
}

/// What reading a cached int8 model gives: the error names the array that is wrong.
pub(super) type ReadResult<T> = std::result::Result<T, String>;

/// `nn.Linear`: `y = x Wᵀ + b`.
pub(super) struct Linear {
    weights: LinearWeights,
    bias: Vec<f32>,
    n_in: usize,
    n_out: usize,
}

/// The weights of a [`Linear`].
enum LinearWeights {
    /// `f32`, stored transposed (`in x out`, row-major) so that `gemm` reads it without
    /// packing.
    F32 { w_t: Vec<f32> },
    /// `int8` per output channel, activations quantized per row at each call.
    Int8(Int8Matrix),
}

impl Linear {
    /// Loads several `nn.Linear(n_in, n_out_i)` and concatenates their
    /// outputs (one matmul for Q, K and V).
    pub(super) fn load_concat(vbs: &[VarBuilder], n_in: usize, n_out: usize) -> Result<Self> {
        let mut ws = Vec::with_capacity(vbs.len());
        let mut bs = Vec::with_capacity(vbs.len());
        for vb in vbs {
            ws.push(vb.get((n_out, n_in), "weight")?);
            bs.push(vb.get(n_out, "bias")?);
        }
        let w = Tensor::cat(&ws, 0)?;
        let b = Tensor::cat(&bs, 0)?;
        let n_outs = n_out * vbs.len();
        Ok(Self {
            weights: LinearWeights::F32 {
                w_t: transpose(&flat(&w)?, n_outs, n_in),
            },
            bias: flat(&b)?,
            n_in,
            n_out: n_outs,
        })
    }

    pub(super) fn load(vb: VarBuilder, n_in: usize, n_out: usize) -> Result<Self> {
        Self::load_concat(&[vb], n_in, n_out)
    }

    /// Writes an int8 layer's arrays (`false` for an f32 one: nothing is written).
    pub(super) fn write_int8(&self, w: &mut ArrayWriter) -> bool {
        let LinearWeights::Int8(m) = &self.weights else {
            return false;
        };
        let parts = m.parts();
        w.f32s(&self.bias);
        w.u64(parts.rows as u64);
        w.u64(parts.cols as u64);
        w.i8s(parts.packed);
        w.f32s(parts.scales);
        w.i32s(parts.offsets);
        w.u64(parts.input_scale.is_some() as u64);
        w.f32s(parts.input_scale.unwrap_or(&[]));
        true
    }

    /// Reads back what [`Linear::write_int8`] wrote for a layer of this shape.
    pub(super) fn read_int8(
        r: &mut ArrayReader,
        n_in: usize,
        n_out: usize,
        what: &str,
    ) -> ReadResult<Self> {
        let bias = r.f32s(Some(n_out), &format!("{what} bias"))?;
        let rows = r.u64(what)? as usize;
        let cols = r.u64(what)? as usize;
        if (rows, cols) != (n_out, n_in) {
            return Err(format!(
                "{what}: ({rows}, {cols}) where the config asks ({n_out}, {n_in})"
            ));
        }
        let packed = r.i8s(&format!("{what} weights"))?;
        let scales = r.f32s(None, &format!("{what} scales"))?;
        let offsets = r.i32s(&format!("{what} offsets"))?;
        let smoothed = r.u64(what)? == 1;
        let input_scale = r.f32s(None, &format!("{what} input scales"))?;
        let m = Int8Matrix::from_parts(Int8Parts {
            rows,
            cols,
            packed: &packed,
            scales: &scales,
            offsets: &offsets,
            input_scale: smoothed.then_some(input_scale.as_slice()),
        })
        .map_err(|e| format!("{what}: {e}"))?;
        Ok(Self {
            weights: LinearWeights::Int8(m),
            bias,
            n_in,
            n_out,
        })
    }

    /// Quantizes the weights to int8 per output channel, smoothed
    /// (SmoothQuant, α = [`SMOOTHING_ALPHA`]) by the largest magnitude each
    /// input reached on the calibration text, `input_absmax`: an input channel
    /// that runs large (the outlier dimensions of a transformer's residual
    /// stream) would otherwise leave every other channel of its token a few
    /// quantization levels.
    pub(super) fn quantize_int8(&mut self, input_absmax: &[f32]) {
        if let LinearWeights::F32 { w_t } = &self.weights {
            let w = transpose(w_t, self.n_in, self.n_out);
            let w_absmax: Vec<f32> = w_t
                .chunks_exact(self.n_out)
                .map(|row| row.iter().fold(0f32, |m, v| m.max(v.abs())))
                .collect();
            let smoothing: Vec<f32> = input_absmax
                .iter()
                .zip(&w_absmax)
                .map(|(&a, &w)| {
                    let s =
                        a.max(1e-5).powf(SMOOTHING_ALPHA) / w.max(1e-5).powf(1.0 - SMOOTHING_ALPHA);
                    if s.is_finite() && s > 0.0 {
                        s
                    } else {
                        1.0
                    }
                })
                .collect();
            self.weights = LinearWeights::Int8(Int8Matrix::quantize_smoothed(
                &w, self.n_out, self.n_in, &smoothing,
            ));
        }
    }

    /// `dst = act(src · Wᵀ + b)`: in int8 the activation is applied by each
    /// thread to the rows it has just computed, still in its cache.
    pub(super) fn forward_activated_into(
        &self,
        src: &[f32],
        dst: &mut [f32],
        rows: usize,
        act: HiddenAct,
    ) {
        let activation = |rows: &mut [f32]| activate(act, rows);
        match &self.weights {
            LinearWeights::Int8(m) => {
                m.matmul_activated_into(src, dst, Some(&self.bias), &activation)
            }
            LinearWeights::F32 { .. } => {
                self.forward_into(src, dst, rows, false);
                dst.par_chunks_mut(8192).for_each(activation);
            }
        }
    }

    /// `dst = src · Wᵀ + b`, or with `accumulate` `dst += src · Wᵀ + b`
    /// (a fused residual connection); `src` is `rows x n_in`, `dst` is
    /// `rows x n_out`.
    pub(super) fn forward_into(&self, src: &[f32], dst: &mut [f32], rows: usize, accumulate: bool) {
        assert_eq!(src.len(), rows * self.n_in);
        assert_eq!(dst.len(), rows * self.n_out);
        let w_t = match &self.weights {
            LinearWeights::F32 { w_t } => w_t,
            LinearWeights::Int8(m) => {
                m.matmul_into(src, dst, Some(&self.bias), accumulate);
                return;
            }
        };
        let bias = &self.bias;
        dst.par_chunks_mut(self.n_out * 64).for_each(|block| {
            for row in block.chunks_exact_mut(self.n_out) {
                if accumulate {
                    row.iter_mut().zip(bias).for_each(|(d, b)| *d += b);
                } else {
                    row.copy_from_slice(bias);
                }
            }
        });
        // SAFETY: the slices' lengths were checked above against the shapes
        // and strides given to gemm; dst does not alias src or the weights.
        unsafe {
            gemm::gemm(
                rows,
                self.n_out,
                self.n_in,
                dst.as_mut_ptr(),
                1,
                self.n_out as isize,
                true,
                src.as_ptr(),
                1,
                self.n_in as isize,
                w_t.as_ptr(),
                1,
                self.n_out as isize,
                1.0,
                1.0,
                false,
                false,
                false,
                parallelism(rows),
            );
        }
    }
}

/// SmoothQuant's migration strength: how much of an input channel's range
/// moves into the weights (0.5 splits it evenly, the paper's default for
/// BERT-sized models).
const SMOOTHING_ALPHA: f32 = 0.5;

/// The inputs of the linear layers of one BERT layer, in order.
#[derive(Clone, Copy)]
pub(super) enum LinearInput {
    Qkv = 0,
    AttentionOutput = 1,
    Intermediate = 2,
    Output = 3,
}

/// Per layer and [`LinearInput`], the largest magnitude each input channel reached.
pub(super) type InputRanges = Vec<[Vec<f32>; 4]>;

/// Records the largest magnitude of every channel of `x` (`rows x width`)
/// into `absmax[layer][input]`, when recording.
pub(super) fn observe(
    absmax: &mut Option<InputRanges>,
    layer: usize,
    input: LinearInput,
    x: &[f32],
) {
    let Some(absmax) = absmax else { return };
    let seen = &mut absmax[layer][input as usize];
    let width = seen.len();
    for row in x.chunks_exact(width) {
        seen.iter_mut()
            .zip(row)
            .for_each(|(m, v)| *m = m.max(v.abs()));
    }
}

/// Below this many token rows a matmul runs on the calling thread: splitting
/// a short question's matmuls costs more in hand-offs than it saves, and a
/// server already runs one question per core.
const PARALLEL_ROWS: usize = 256;

/// The `gemm` parallelism for a matmul of `rows` token rows.
pub(super) fn parallelism(rows: usize) -> gemm::Parallelism {
    match rayon::current_num_threads() {
        _ if rows < PARALLEL_ROWS => gemm::Parallelism::None,
        0 | 1 => gemm::Parallelism::None,
        n => gemm::Parallelism::Rayon(n),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tiled_transpose_is_the_transpose() {
        for (rows, cols) in [(1, 1), (3, 70), (65, 33), (384, 1152)] {
            let m: Vec<f32> = (0..rows * cols).map(|i| i as f32).collect();
            let t = transpose(&m, rows, cols);
            for r in 0..rows {
                for c in 0..cols {
                    assert_eq!(t[c * rows + r], m[r * cols + c]);
                }
            }
        }
    }
}
