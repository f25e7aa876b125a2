//! Models with random weights for the step's tests (the emulator's, and the GPU test's against
//! the oracle), in the widths of [`RandomShape`].

use std::sync::Arc;

use candle_core::quantized::{GgmlDType, QStorage, QTensor};
use candle_core::{DType, Device, Result, Tensor};

use super::{StepDims, StepLayer, StepMatrix, StepModel};
use crate::RopeParams;

/// A random model's widths.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RandomShape {
    /// The residual's width.
    pub hidden: usize,
    /// Query heads.
    pub heads: usize,
    /// Key and value heads.
    pub kv_heads: usize,
    /// A head's width.
    pub head_dim: usize,
    /// The MLP's width.
    pub intermediate: usize,
}

impl RandomShape {
    /// Hidden 256, 4 query heads over 2, MLP 512: small enough for every test.
    pub const SMALL: Self = Self {
        hidden: 256,
        heads: 4,
        kv_heads: 2,
        head_dim: 64,
        intermediate: 512,
    };
    /// SmolLM2-135M's widths: hidden 576 (18 GGML units, not a multiple of 256), 9 query heads
    /// over 3, MLP 1536.
    pub const SMOLLM2: Self = Self {
        hidden: 576,
        heads: 9,
        kv_heads: 3,
        head_dim: 64,
        intermediate: 1536,
    };
    /// Llama-3-8B's heads in a small model: 128 wide, 4 query heads over one key head (Llama 3's
    /// grouping), hidden 512, MLP 1024.
    pub const LLAMA3_HEADS: Self = Self {
        hidden: 512,
        heads: 4,
        kv_heads: 1,
        head_dim: 128,
        intermediate: 1024,
    };
}

/// What a [`StepModel::random`] model is made of.
#[derive(Debug, Clone)]
pub struct RandomModel {
    /// Its widths.
    pub shape: RandomShape,
    /// The activations' and float weights' type.
    pub dtype: DType,
    /// The formats of q, k, v, o, gate, up, down, the embedding and the output layer
    /// (`None`: dense in `dtype`).
    pub formats: [Option<GgmlDType>; 9],
    /// Layers.
    pub layers: usize,
    /// Vocabulary.
    pub vocab: usize,
    /// Biases on q, k and v.
    pub qkv_bias: bool,
    /// The rotation.
    pub rope: RopeParams,
}

impl RandomModel {
    /// Every GGML format the step reads, q, k and v in three of them (three products), gate
    /// and up in two (SwiGLU apart): q Q4_0, k Q8_0, v Q6_K, o Q4_K, gate Q5_0, up Q5_1,
    /// down Q4_1, embedding Q8_0, output Q6_K.
    pub const MIXED_FORMATS: [Option<GgmlDType>; 9] = [
        Some(GgmlDType::Q4_0),
        Some(GgmlDType::Q8_0),
        Some(GgmlDType::Q6K),
        Some(GgmlDType::Q4K),
        Some(GgmlDType::Q5_0),
        Some(GgmlDType::Q5_1),
        Some(GgmlDType::Q4_1),
        Some(GgmlDType::Q8_0),
        Some(GgmlDType::Q6K),
    ];

    /// GGML formats with q, k and v in one and gate and up in another, so that a batch's
    /// products all run on tensor cores (TF32) where the activations are f32: q, k, v Q4_0, o
    /// Q8_0, gate and up Q4_K, down Q5_1, embedding Q8_0, output Q5_0 (with
    /// [`Self::MIXED_FORMATS`]' single matrices, o Q4_K, down Q4_1 and output Q6_K: every
    /// format, every epilogue).
    pub const GROUPED_FORMATS: [Option<GgmlDType>; 9] = [
        Some(GgmlDType::Q4_0),
        Some(GgmlDType::Q4_0),
        Some(GgmlDType::Q4_0),
        Some(GgmlDType::Q8_0),
        Some(GgmlDType::Q4K),
        Some(GgmlDType::Q4K),
        Some(GgmlDType::Q5_1),
        Some(GgmlDType::Q8_0),
        Some(GgmlDType::Q5_0),
    ];
}

/// Uniform values from a fixed seed (splitmix64): a random model is the same in every run, so
/// a test near its tolerance passes or fails every time rather than now and then.
struct Draws(std::cell::Cell<u64>);

impl Draws {
    fn uniform(&self, lo: f32, hi: f32, n: usize) -> Vec<f32> {
        (0..n)
            .map(|_| {
                let mut z = self.0.get().wrapping_add(0x9e37_79b9_7f4a_7c15);
                self.0.set(z);
                z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
                z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
                z ^= z >> 31;
                lo + (hi - lo) * ((z >> 40) as f32 / (1u64 << 24) as f32)
            })
            .collect()
    }
}

impl StepModel {
    /// A model of `spec` with uniform random weights (matrices scaled by 1.7 / sqrt(columns),
    /// norms in [0.8, 1.2), biases in [-0.5, 0.5)), its float tensors on `device`; the same
    /// weights for the same `spec` in every run.
    pub fn random(spec: &RandomModel, device: &Device) -> Result<Self> {
        let shape = spec.shape;
        let dims = StepDims {
            hidden: shape.hidden,
            heads: shape.heads,
            kv_heads: shape.kv_heads,
            head_dim: shape.head_dim,
            intermediate: shape.intermediate,
            vocab: spec.vocab,
            eps: 1e-5,
        };
        let draws = Draws(std::cell::Cell::new(0x0005_7e90_5eed));
        let float = |lo: f32, hi: f32, n: usize| -> Result<Tensor> {
            Tensor::from_vec(draws.uniform(lo, hi, n), n, &Device::Cpu)?
                .to_dtype(spec.dtype)?
                .to_device(device)
        };
        let matrix = |rows: usize, cols: usize, which: usize| -> Result<StepMatrix> {
            let values = draws.uniform(-1.0, 1.0, rows * cols);
            let w = (Tensor::from_vec(values, (rows, cols), &Device::Cpu)?
                * (1.7 / (cols as f64).sqrt()))?;
            Ok(match spec.formats[which] {
                None => StepMatrix::Dense(w.to_dtype(spec.dtype)?.to_device(device)?),
                // Quantized on the host, the blocks then put on `device` (as a GGUF model's).
                Some(q) => {
                    let blocks = QTensor::quantize(&w, q)?;
                    let storage = QStorage::from_data(blocks.data()?, device, q)?;
                    StepMatrix::Ggml(Arc::new(QTensor::new(storage, (rows, cols))?))
                }
            })
        };
        let (h, q, kv, i) = (
            shape.hidden,
            shape.head_dim * shape.heads,
            shape.head_dim * shape.kv_heads,
            shape.intermediate,
        );
        let layers = (0..spec.layers)
            .map(|_| {
                let qkv_bias = if spec.qkv_bias {
                    Some([
                        float(-0.5, 0.5, q)?,
                        float(-0.5, 0.5, kv)?,
                        float(-0.5, 0.5, kv)?,
                    ])
                } else {
                    None
                };
                Ok(StepLayer {
                    attn_norm: float(0.8, 1.2, h)?,
                    q: matrix(q, h, 0)?,
                    k: matrix(kv, h, 1)?,
                    v: matrix(kv, h, 2)?,
                    qkv_bias,
                    o: matrix(h, q, 3)?,
                    mlp_norm: float(0.8, 1.2, h)?,
                    gate: matrix(i, h, 4)?,
                    up: matrix(i, h, 5)?,
                    down: matrix(h, i, 6)?,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(StepModel {
            dims,
            rope: spec.rope.clone(),
            embed: matrix(spec.vocab, h, 7)?,
            layers,
            norm: float(0.8, 1.2, h)?,
            lm_head: matrix(spec.vocab, h, 8)?,
        })
    }
}
