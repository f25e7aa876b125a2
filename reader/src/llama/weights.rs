//! Where the layers get their weights: a `VarBuilder` (Hugging Face folders, or a GGUF file
//! dequantized), plus, for GGUF files kept quantized, the quantized matrices.

use std::sync::Arc;

use candle_core::quantized::{GgmlDType, QMatMul, QTensor};
use candle_core::{Module, Shape, Tensor};
use candle_nn::{Embedding, Linear, RmsNorm, VarBuilder};
use capstan_kernels::cpu::qmatmul::{GgmlFormat, QMatrix};

use super::cache::Span;
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

    /// The GGUF file the matrices are read from, if any.
    pub(crate) fn gguf(&self) -> Option<Arc<GgufWeights>> {
        self.quantized.clone()
    }

    /// Whether the matrices stay quantized.
    pub(crate) fn is_quantized(&self) -> bool {
        self.quantized.is_some()
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

    /// The token embedding `weight` `(vocab, hidden)` under this prefix: a GGUF file's table
    /// stays quantized on the CPU where Capstan's layout holds its type.
    pub(crate) fn embedding(&self, vocab: usize, hidden: usize) -> CResult<TokenEmbedding> {
        if let Some(q) = &self.quantized {
            if let Some(table) = self.packed_matrix(q, vocab, hidden)? {
                return Ok(TokenEmbedding::Packed {
                    table: Arc::new(table),
                });
            }
        }
        Ok(TokenEmbedding::Dense(candle_nn::embedding(
            vocab,
            hidden,
            self.vb.clone(),
        )?))
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
        let bias = if bias {
            Some(self.vb.get(out_dim, "bias")?)
        } else {
            None
        };
        if let Some(weight) = self.packed_matrix(q, out_dim, in_dim)? {
            return Ok(Proj::Packed {
                weight: Arc::new(weight),
                bias,
            });
        }
        Proj::quantized(self.shaped_qtensor(q, out_dim, in_dim)?, bias)
    }

    /// The quantized `weight` `(rows, cols)` under this prefix, its shape checked.
    fn shaped_qtensor(&self, q: &GgufWeights, rows: usize, cols: usize) -> CResult<QTensor> {
        let name = self.weight_name();
        let qt = q.qtensor(&name, self.vb.device())?;
        expect_dims(&name, qt.shape(), rows, cols)?;
        Ok(qt)
    }

    /// The quantized `weight` `(rows, cols)` under this prefix in Capstan's CPU layout,
    /// repacked straight from the file's bytes, where it is bound for the CPU in a type that
    /// layout holds.
    fn packed_matrix(&self, q: &GgufWeights, rows: usize, cols: usize) -> CResult<Option<QMatrix>> {
        if !self.vb.device().is_cpu() {
            return Ok(None);
        }
        let name = self.weight_name();
        let stored = q.stored(&name)?;
        expect_dims(&name, &stored.shape, rows, cols)?;
        let Some(format) = packed_format(stored.dtype) else {
            return Ok(None);
        };
        QMatrix::from_ggml(format, rows, cols, &stored.bytes)
            .map(Some)
            .map_err(candle_core::Error::Msg)
    }

    fn weight_name(&self) -> String {
        format!("{}.weight", self.vb.prefix())
    }

    /// A projection sharing the embedding matrix (tied `lm_head`), quantized when the file is.
    pub(crate) fn tied_proj(&self, embedding: &TokenEmbedding) -> CResult<Proj> {
        match (&self.quantized, embedding) {
            (_, TokenEmbedding::Packed { table, .. }) => Ok(Proj::Packed {
                weight: table.clone(),
                bias: None,
            }),
            (None, TokenEmbedding::Dense(embedding)) => Ok(Proj::Dense(Linear::new(
                embedding.embeddings().clone(),
                None,
            ))),
            (Some(q), TokenEmbedding::Dense(_)) => Proj::quantized(
                q.qtensor(&format!("{}.weight", self.vb.prefix()), self.vb.device())?,
                None,
            ),
        }
    }
}

/// The token embedding table: a float matrix, or a GGUF file's quantized one in Capstan's CPU
/// layout ([`QMatrix`]), shared with a tied output layer, whose rows are dequantized as tokens
/// are looked up. SmolLM2's Q8_0 table (28M weights) took 113 MB of f32 and a second repacked
/// copy for the output layer at every start.
#[derive(Debug, Clone)]
pub(crate) enum TokenEmbedding {
    Dense(Embedding),
    Packed { table: Arc<QMatrix> },
}

impl Module for TokenEmbedding {
    fn forward(&self, ids: &Tensor) -> CResult<Tensor> {
        let table = match self {
            Self::Dense(e) => return e.forward(ids),
            Self::Packed { table } => table,
        };
        let hidden = table.cols();
        let flat: Vec<u32> = ids.flatten_all()?.to_vec1()?;
        let mut out = vec![0f32; flat.len() * hidden];
        for (row, &id) in out.chunks_exact_mut(hidden).zip(&flat) {
            if id as usize >= table.rows() {
                return Err(candle_core::Error::Msg(format!(
                    "token id {id} is outside the vocabulary of {} tokens",
                    table.rows()
                )));
            }
            table.dequantize_row(id as usize, row);
        }
        let mut shape = ids.dims().to_vec();
        shape.push(hidden);
        Tensor::from_vec(out, shape, ids.device())
    }
}

/// A linear layer: dense, quantized in Capstan's CPU layout ([`QMatrix`], the GGML formats
/// it repacks), or quantized as candle keeps it (CUDA, and other GGML formats).
#[derive(Debug, Clone)]
pub(crate) enum Proj {
    Dense(Linear),
    Packed {
        weight: Arc<QMatrix>,
        bias: Option<Tensor>,
    },
    Quantized {
        weight: QMatMul,
        bias: Option<Tensor>,
    },
}

/// The repacked CPU layout of a GGML type, where there is one.
fn packed_format(dtype: GgmlDType) -> Option<GgmlFormat> {
    Some(match dtype {
        GgmlDType::Q4_0 => GgmlFormat::Q4_0,
        GgmlDType::Q4_1 => GgmlFormat::Q4_1,
        GgmlDType::Q5_0 => GgmlFormat::Q5_0,
        GgmlDType::Q5_1 => GgmlFormat::Q5_1,
        GgmlDType::Q8_0 => GgmlFormat::Q8_0,
        GgmlDType::Q4K => GgmlFormat::Q4K,
        GgmlDType::Q6K => GgmlFormat::Q6K,
        _ => return None,
    })
}

/// Errors unless `shape` is `(rows, cols)`.
fn expect_dims(name: &str, shape: &Shape, rows: usize, cols: usize) -> CResult<()> {
    if shape.dims() != [rows, cols] {
        return Err(candle_core::Error::UnexpectedShape {
            msg: format!("shape mismatch for {name}"),
            expected: (rows, cols).into(),
            got: shape.clone(),
        });
    }
    Ok(())
}

impl Proj {
    /// The bias, if any.
    pub(crate) fn bias(&self) -> Option<&Tensor> {
        match self {
            Proj::Dense(l) => l.bias(),
            Proj::Packed { bias, .. } | Proj::Quantized { bias, .. } => bias.as_ref(),
        }
    }

    /// A file's matrix through candle's quantized products: where Capstan's CPU layout does
    /// not hold it ([`Weights::packed_matrix`] said `None`: another device or type).
    fn quantized(qt: QTensor, bias: Option<Tensor>) -> CResult<Self> {
        // F32/F16/BF16 tensors become plain f32 matrices inside QMatMul.
        Ok(Proj::Quantized {
            weight: QMatMul::from_qtensor(qt)?,
            bias,
        })
    }
}

/// Projections of the same input (q, k and v; gate and up): one stacked matrix where their
/// layouts allow it, so a step runs one product (one pass of the thread pool) instead of
/// several; else each on its own.
#[derive(Debug, Clone)]
pub(crate) enum ProjGroup {
    Separate(Vec<Proj>),
    Stacked { proj: Proj, widths: Vec<usize> },
}

impl ProjGroup {
    pub(crate) fn new(parts: Vec<Proj>) -> Self {
        let mut mats = Vec::new();
        let mut biases = Vec::new();
        let mut widths = Vec::new();
        for p in &parts {
            let Proj::Packed { weight, bias } = p else {
                return Self::Separate(parts);
            };
            mats.push(weight.as_ref());
            biases.push(bias.clone());
            widths.push(weight.rows());
        }
        let Some(weight) = QMatrix::stack(&mats) else {
            return Self::Separate(parts);
        };
        let bias = if biases.iter().all(Option::is_some) {
            match Tensor::cat(&biases.into_iter().flatten().collect::<Vec<_>>(), 0) {
                Ok(b) => Some(b),
                Err(_) => return Self::Separate(parts),
            }
        } else if biases.iter().all(Option::is_none) {
            None
        } else {
            return Self::Separate(parts);
        };
        Self::Stacked {
            proj: Proj::Packed {
                weight: Arc::new(weight),
                bias,
            },
            widths,
        }
    }

    /// Each projection of `x`, in order (views of one product's output when stacked).
    pub(crate) fn forward(&self, x: &Tensor) -> CResult<Vec<Tensor>> {
        self.apply(|p| p.forward(x))
    }

    /// [`ProjGroup::forward`] on a packed step's rows ([`Proj::forward_spans`]).
    pub(super) fn forward_spans(&self, x: &Tensor, spans: &[Span]) -> CResult<Vec<Tensor>> {
        self.apply(|p| p.forward_spans(x, spans))
    }

    /// Each projection by `product`, in order.
    fn apply(&self, product: impl Fn(&Proj) -> CResult<Tensor>) -> CResult<Vec<Tensor>> {
        match self {
            Self::Separate(parts) => parts.iter().map(product).collect(),
            Self::Stacked { proj, widths } => {
                let y = product(proj)?;
                let last = y.rank() - 1;
                let mut at = 0;
                widths
                    .iter()
                    .map(|&w| {
                        let part = y.narrow(last, at, w);
                        at += w;
                        part
                    })
                    .collect()
            }
        }
    }
}

/// Rows (tokens) from which a quantized CPU matrix is multiplied on AMX tiles where the CPU has
/// them (`capstan_kernels::qmatmul_amx`: 3-4x the quantized kernels at 128 rows, equal at 16),
/// else dequantized for the product and run on the f32 GEMM. Set against candle's quantized kernels (issue 9); against Capstan's tiles,
/// long chunks are 10-12% faster on the GEMM (512 and 2,048-token prompts, SmolLM2 Q4_1,
/// docs/BENCHMARKS.md). One pass dequantizes every matrix once, whatever its rows: a pass of
/// many short sequences (a batched prefill, a candidates' pass) is split by sequence
/// ([`Proj::forward_spans`]), and the GEMM pays off only where the rows of its sequences are
/// many (2026-11-27: a single pass of 32 rows 165 ms on the GEMM, 73–90 ms on the tiles; 96
/// rows 315 against 214–258; 128 rows about even; yet 16 clients' batched prefill of 42-row
/// sequences on the tiles cut batched decoding from about 240 to 190–200 tokens/s).
/// [`super::STABLE_CHUNK_ROWS`] depends on it: a prefix cache's exactness does.
pub(super) const DEQUANTIZE_ROWS: usize = 32;

fn rows(x: &Tensor) -> usize {
    x.dims().iter().rev().skip(1).product()
}

impl Module for Proj {
    fn forward(&self, x: &Tensor) -> CResult<Tensor> {
        self.forward_on(x, rows(x) >= DEQUANTIZE_ROWS)
    }
}

impl Proj {
    /// The product of many rows (`gemm`: a packed quantized matrix on AMX tiles where the CPU
    /// has them, else dequantized first for the f32 GEMM) or on the quantized kernels,
    /// whatever the rows.
    pub(super) fn forward_on(&self, x: &Tensor, gemm: bool) -> CResult<Tensor> {
        let (y, bias) = match self {
            Proj::Dense(l) => return l.forward(x),
            Proj::Packed { weight, bias } => {
                let y = if !gemm {
                    capstan_kernels::qmatmul(x, weight)?
                } else if let Some(y) = capstan_kernels::qmatmul_amx(x, weight)? {
                    y
                } else {
                    let (r, c) = (weight.rows(), weight.cols());
                    let w = Tensor::from_vec(weight.dequantize(), (r, c), x.device())?;
                    x.broadcast_matmul(&w.to_dtype(x.dtype())?.t()?)?
                };
                (y, bias)
            }
            Proj::Quantized { weight, bias } => {
                let y = match weight {
                    QMatMul::QTensor(q) if x.device().is_cpu() && gemm => {
                        x.broadcast_matmul(&q.dequantize(x.device())?.t()?)?
                    }
                    _ => weight.forward(x)?,
                };
                (y, bias)
            }
        };
        match bias {
            Some(b) => y.broadcast_add(b),
            None => Ok(y),
        }
    }

    /// The product of a packed step's rows `x` `(1, rows, in)`, each sequence's rows on the
    /// path its own number of rows picks, as [`Module::forward`] does for that sequence alone:
    /// what a sequence computes does not depend on what the scheduler packed beside it (the
    /// quantized kernels' rows are independent of each other; the GEMM's are taken as such).
    pub(super) fn forward_spans(&self, x: &Tensor, spans: &[Span]) -> CResult<Tensor> {
        let long = |sp: &Span| sp.len >= DEQUANTIZE_ROWS;
        let mut parts = Vec::new();
        let mut i = 0;
        while i < spans.len() {
            // A run of consecutive sequences on the same path.
            let mut j = i + 1;
            while j < spans.len() && long(&spans[j]) == long(&spans[i]) {
                j += 1;
            }
            let (start, end) = (spans[i].start, spans[j - 1].start + spans[j - 1].len);
            let rows = if i == 0 && j == spans.len() {
                x.clone()
            } else {
                x.narrow(1, start, end - start)?
            };
            parts.push(self.forward_on(&rows, long(&spans[i]))?);
            i = j;
        }
        if parts.len() == 1 {
            Ok(parts.remove(0))
        } else {
            Tensor::cat(&parts, 1)
        }
    }
}
