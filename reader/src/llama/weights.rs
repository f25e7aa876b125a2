//! Where the layers get their weights: a `VarBuilder` (Hugging Face folders, or a GGUF file
//! dequantized), plus, for GGUF files kept quantized, the quantized matrices.

use std::sync::Arc;

use std::borrow::Cow;

use candle_core::quantized::{GgmlDType, QMatMul, QStorage, QTensor};
use candle_core::{Device, Module, Tensor};
use candle_nn::{Embedding, Linear, RmsNorm, VarBuilder};
use half::f16;

use super::CResult;
use crate::gguf::GgufWeights;

/// A layer's weights under a name prefix, as `VarBuilder::pp` gives.
#[derive(Clone)]
pub(crate) struct Weights<'a> {
    vb: VarBuilder<'a>,
    quantized: Option<Arc<GgufWeights>>,
}

impl<'a> Weights<'a> {
    /// Dense weights (every matrix a tensor of the builder's dtype).
    pub(crate) fn dense(vb: VarBuilder<'a>) -> Self {
        Self {
            vb,
            quantized: None,
        }
    }

    /// Matrices stay quantized (`QMatMul`); norms, biases and the embedding table come from
    /// `vb`, dequantized.
    pub(crate) fn quantized(vb: VarBuilder<'a>, gguf: Arc<GgufWeights>) -> Self {
        Self {
            vb,
            quantized: Some(gguf),
        }
    }

    pub(crate) fn pp(&self, name: impl ToString) -> Self {
        Self {
            vb: self.vb.pp(name),
            quantized: self.quantized.clone(),
        }
    }

    pub(crate) fn vb(&self) -> &VarBuilder<'a> {
        &self.vb
    }

    pub(crate) fn contains(&self, name: &str) -> bool {
        self.vb.contains_tensor(name)
    }

    pub(crate) fn rms_norm(&self, size: usize, eps: f64) -> CResult<RmsNorm> {
        candle_nn::rms_norm(size, eps, self.vb.clone())
    }

    pub(crate) fn embedding(&self, vocab: usize, hidden: usize) -> CResult<Embedding> {
        candle_nn::embedding(vocab, hidden, self.vb.clone())
    }

    /// The linear layer `weight` `(out_dim, in_dim)` (and `bias`) under this prefix.
    pub(crate) fn proj(&self, in_dim: usize, out_dim: usize, bias: bool) -> CResult<Proj> {
        let Some(q) = &self.quantized else {
            return Ok(Proj::Dense(candle_nn::linear_b(
                in_dim,
                out_dim,
                bias,
                self.vb.clone(),
            )?));
        };
        let name = format!("{}.weight", self.vb.prefix());
        let qt = q.qtensor(&name, self.vb.device())?;
        if qt.shape().dims() != [out_dim, in_dim] {
            return Err(candle_core::Error::UnexpectedShape {
                msg: format!("shape mismatch for {name}"),
                expected: (out_dim, in_dim).into(),
                got: qt.shape().clone(),
            });
        }
        let bias = if bias {
            Some(self.vb.get(out_dim, "bias")?)
        } else {
            None
        };
        Proj::quantized(qt, bias)
    }

    /// A projection sharing the embedding matrix (tied `lm_head`), quantized when the file is.
    pub(crate) fn tied_proj(&self, embedding: &Embedding) -> CResult<Proj> {
        match &self.quantized {
            None => Ok(Proj::Dense(Linear::new(
                embedding.embeddings().clone(),
                None,
            ))),
            Some(q) => Proj::quantized(
                q.qtensor(&format!("{}.weight", self.vb.prefix()), self.vb.device())?,
                None,
            ),
        }
    }
}

/// Q4_1's per-block `8 d + m` of a matrix run as Q4_0: `(out, in / 32)`, as a tensor (prompt
/// chunks) and as plain values (decoding steps).
#[derive(Debug, Clone)]
pub(crate) struct BlockOffsets {
    offsets: Tensor,
    values: std::sync::Arc<[f32]>,
}

/// A linear layer, dense or quantized (llama.cpp block formats, multiplied by candle's
/// quantized kernels on CPU and CUDA).
#[derive(Debug, Clone)]
pub(crate) enum Proj {
    Dense(Linear),
    Quantized {
        weight: QMatMul,
        /// Q4_1 on the CPU, run as Q4_0 (see [`q4_1_as_q4_0`]): `(out, in / 32)`, each block's
        /// `8 d + m`, multiplied by the input's block sums.
        block_offsets: Option<BlockOffsets>,
        bias: Option<Tensor>,
    },
}

impl Proj {
    fn quantized(qt: QTensor, bias: Option<Tensor>) -> CResult<Self> {
        let (qt, block_offsets) = if qt.dtype() == GgmlDType::Q4_1 && qt.device().is_cpu() {
            let (q4_0, offsets) = q4_1_as_q4_0(&qt)?;
            let values = offsets.flatten_all()?.to_vec1::<f32>()?.into();
            (q4_0, Some(BlockOffsets { offsets, values }))
        } else {
            (qt, None)
        };
        // F32/F16/BF16 tensors become plain f32 matrices inside QMatMul.
        Ok(Proj::Quantized {
            weight: QMatMul::from_qtensor(qt)?,
            block_offsets,
            bias,
        })
    }
}

/// Q4_1 (`x = d q + m`, q in 0..16) as Q4_0 (`x = d (q - 8)`) with the same scales and
/// nibbles, plus a per-block offset `8 d + m`: `w . x = w0 . x + sum_b (8 d_b + m_b) S_b(x)`,
/// `S_b` the sum of the input over block `b`. Exact in the weights; it runs Q4_1 files
/// through candle's vectorised Q4_0 kernels (its Q4_1 dot product on x86 is scalar).
fn q4_1_as_q4_0(qt: &QTensor) -> CResult<(QTensor, Tensor)> {
    const BLOCK: usize = 32;
    const Q4_1_BYTES: usize = 20;
    let (rows, cols) = qt.shape().dims2()?;
    let data = qt.data()?;
    let blocks = data.len() / Q4_1_BYTES;
    if cols % BLOCK != 0 || blocks != rows * cols / BLOCK {
        candle_core::bail!(
            "Q4_1 tensor of shape ({rows}, {cols}) holds {} bytes",
            data.len()
        );
    }
    let mut q4_0 = Vec::with_capacity(blocks * 18);
    let mut offsets = Vec::with_capacity(blocks);
    for b in data.chunks_exact(Q4_1_BYTES) {
        let d = f16::from_le_bytes([b[0], b[1]]).to_f32();
        let m = f16::from_le_bytes([b[2], b[3]]).to_f32();
        q4_0.extend_from_slice(&b[0..2]);
        q4_0.extend_from_slice(&b[4..20]);
        offsets.push(8.0 * d + m);
    }
    let storage = QStorage::from_data(Cow::Owned(q4_0), &Device::Cpu, GgmlDType::Q4_0)?;
    let q4_0 = QTensor::new(storage, (rows, cols))?;
    let offsets = Tensor::from_vec(offsets, (rows, cols / BLOCK), &Device::Cpu)?;
    Ok((q4_0, offsets))
}

/// `y += S(x) offsets^T` for a few rows (decoding steps), in one pass over plain slices: as
/// four candle ops (reshape, sum, transpose-matmul, add) per matrix it cost more than the
/// quantized product itself (SmolLM2 decoding at 6 instead of 21 tokens/s).
fn add_block_offsets_rows(y: &Tensor, x: &Tensor, offsets: &BlockOffsets) -> CResult<Tensor> {
    let (out, blocks) = offsets.offsets.dims2()?;
    let off = &offsets.values;
    let xs = x.flatten_all()?.to_vec1::<f32>()?;
    let mut ys = y.flatten_all()?.to_vec1::<f32>()?;
    let mut sums = vec![0f32; blocks];
    for (xr, yr) in xs.chunks_exact(blocks * 32).zip(ys.chunks_exact_mut(out)) {
        for (s, b) in sums.iter_mut().zip(xr.chunks_exact(32)) {
            *s = b.iter().sum();
        }
        for (yo, offs) in yr.iter_mut().zip(off.chunks_exact(blocks)) {
            *yo += offs.iter().zip(&sums).map(|(o, s)| o * s).sum::<f32>();
        }
    }
    Tensor::from_vec(ys, y.shape(), y.device())
}

/// Rows (tokens) from which a quantized CPU matrix is dequantized for the product.
const DEQUANTIZE_ROWS: usize = 32;

fn rows(x: &Tensor) -> usize {
    x.dims().iter().rev().skip(1).product()
}

impl Module for Proj {
    fn forward(&self, x: &Tensor) -> CResult<Tensor> {
        match self {
            Proj::Dense(l) => l.forward(x),
            Proj::Quantized {
                weight,
                block_offsets,
                bias,
            } => {
                let mut y = match weight {
                    QMatMul::QTensor(q) if x.device().is_cpu() && rows(x) >= DEQUANTIZE_ROWS => {
                        // Prompt chunks: one matrix dequantized at a time and multiplied by the
                        // f32 GEMM is ~3x faster than candle's quantized CPU kernels, whose
                        // matrix-matrix path is a loop of dot products; decoding steps keep the
                        // quantized kernels (they read 4-8x fewer bytes).
                        x.broadcast_matmul(&q.dequantize(x.device())?.t()?)?
                    }
                    _ => weight.forward(x)?,
                };
                if let Some(off) = block_offsets {
                    y = if rows(x) < DEQUANTIZE_ROWS {
                        add_block_offsets_rows(&y, x, off)?
                    } else {
                        let mut dims = x.dims().to_vec();
                        let cols = dims.pop().unwrap_or(0);
                        dims.extend([cols / 32, 32]);
                        let sums = x.reshape(dims)?.sum(candle_core::D::Minus1)?;
                        (y + sums.broadcast_matmul(&off.offsets.t()?)?)?
                    };
                }
                match bias {
                    Some(b) => y.broadcast_add(b),
                    None => Ok(y),
                }
            }
        }
    }
}
