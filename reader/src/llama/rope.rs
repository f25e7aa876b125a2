//! Rotary position embeddings: the frequencies of plain RoPE, RoPE ABF (a larger base), linear
//! position interpolation and Llama 3's frequency-dependent scaling, or the per-frequency
//! divisors a GGUF file stores (`rope_freqs.weight`).

use candle_core::{DType, Device, Tensor};
use capstan_kernels::RopeParams;

use super::CResult;
use crate::config::{LlamaConfig, RopeScaling};
use crate::error::{Error, Result};

/// RoPE tables, computed in f32 as Hugging Face does (`LlamaRotaryEmbedding` and
/// `ROPE_INIT_FUNCTIONS`): `inv_freq = 1 / base^(arange(0, d, 2) / d)`, rescaled per
/// frequency for Llama 3; angle = (position / factor) * inv_freq.
#[derive(Debug, Clone)]
pub(super) struct Rope {
    pub(super) inv_freq: Vec<f32>,
    pub(super) factor: f32,
}

impl Rope {
    /// `freq_divisors`: a GGUF file's `rope_freqs.weight` (llama.cpp divides each frequency
    /// by its entry; Llama 3.1 files carry their scaling this way instead of in metadata).
    pub(super) fn new(cfg: &LlamaConfig, freq_divisors: Option<&[f32]>) -> Result<Self> {
        let d = cfg.head_size();
        let base = cfg.rope_base() as f32;
        let mut inv_freq: Vec<f32> = (0..d)
            .step_by(2)
            .map(|i| 1f32 / base.powf(i as f32 / d as f32))
            .collect();
        let mut factor = 1.0;
        match cfg.rope_scaling()? {
            RopeScaling::None => {}
            RopeScaling::Linear(f) => factor = f as f32,
            RopeScaling::Llama3 {
                factor,
                low_freq_factor,
                high_freq_factor,
                original_max_position_embeddings,
            } => llama3_scale(
                &mut inv_freq,
                factor as f32,
                low_freq_factor as f32,
                high_freq_factor as f32,
                original_max_position_embeddings as f32,
            ),
        }
        if let Some(div) = freq_divisors {
            if div.len() != inv_freq.len() {
                return Err(Error::ShapeMismatch {
                    name: "rope_freqs.weight".into(),
                    expected: vec![inv_freq.len()],
                    actual: vec![div.len()],
                });
            }
            for (f, d) in inv_freq.iter_mut().zip(div) {
                *f /= d;
            }
        }
        Ok(Self { inv_freq, factor })
    }

    /// The rotation at `positions` (one row per batch row, or one shared row): Capstan's fused
    /// q/k kernel at those positions when `fused`, else candle's `rope` with cos/sin tables.
    pub(super) fn rotary(
        &self,
        positions: &[Vec<u32>],
        fused: bool,
        dtype: DType,
        dev: &Device,
    ) -> CResult<Rotary> {
        if !fused {
            let (cos, sin) = self.cos_sin(positions, dtype, dev)?;
            return Ok(Rotary::Tables { cos, sin });
        }
        let rows = positions.len();
        let seq = positions.first().map_or(0, |p| p.len());
        let flat: Vec<u32> = positions.concat();
        let shape = if rows == 1 {
            vec![seq]
        } else {
            vec![rows, seq]
        };
        Ok(Rotary::Kernel {
            positions: Tensor::from_vec(flat, shape.as_slice(), dev)?,
            params: RopeParams {
                inv_freq: self.inv_freq.clone(),
                factor: self.factor,
            },
        })
    }

    /// cos and sin of shape `(rows, seq, d/2)` (or `(seq, d/2)` for one shared row).
    pub(super) fn cos_sin(
        &self,
        positions: &[Vec<u32>],
        dtype: DType,
        dev: &Device,
    ) -> CResult<(Tensor, Tensor)> {
        let half = self.inv_freq.len();
        let rows = positions.len();
        let seq = positions.first().map_or(0, |p| p.len());
        let mut cos = Vec::with_capacity(rows * seq * half);
        let mut sin = Vec::with_capacity(rows * seq * half);
        for row in positions {
            for &p in row {
                let t = if self.factor == 1.0 {
                    p as f32
                } else {
                    p as f32 / self.factor
                };
                for &f in &self.inv_freq {
                    let a = t * f;
                    cos.push(a.cos());
                    sin.push(a.sin());
                }
            }
        }
        let shape = if rows == 1 {
            vec![seq, half]
        } else {
            vec![rows, seq, half]
        };
        let cos = Tensor::from_vec(cos, shape.as_slice(), dev)?.to_dtype(dtype)?;
        let sin = Tensor::from_vec(sin, shape.as_slice(), dev)?.to_dtype(dtype)?;
        Ok((cos, sin))
    }
}

/// The rotation of one forward pass (see [`Rope::rotary`]).
#[derive(Debug, Clone)]
pub(super) enum Rotary {
    /// candle's `rope` with cos/sin tables `(rows, seq, d/2)` or `(seq, d/2)`.
    Tables { cos: Tensor, sin: Tensor },
    /// Capstan's fused kernel at u32 positions `(rows, seq)` or `(seq)`.
    Kernel {
        positions: Tensor,
        params: RopeParams,
    },
}

impl Rotary {
    /// `q` `(b, h, s, d)` and `k` `(b, kv_heads, s, d)` rotated.
    pub(super) fn apply(&self, q: &Tensor, k: &Tensor) -> CResult<(Tensor, Tensor)> {
        match self {
            Self::Tables { cos, sin } => Ok((
                candle_nn::rotary_emb::rope(q, cos, sin)?,
                candle_nn::rotary_emb::rope(k, cos, sin)?,
            )),
            Self::Kernel { positions, params } => {
                // Views of one (b, h + kv_heads, s, d) output: packed already when b = 1.
                let (q, k) = capstan_kernels::rope_qk(q, k, positions, params)?;
                Ok((q.contiguous()?, k.contiguous()?))
            }
        }
    }
}

/// Llama 3.1's RoPE scaling (transformers' `_compute_llama3_parameters`, in f32): wavelengths
/// longer than `original / low` are divided by `factor`, shorter than `original / high` kept,
/// and those between interpolated smoothly.
fn llama3_scale(inv_freq: &mut [f32], factor: f32, low: f32, high: f32, original: f32) {
    let low_wavelen = original / low;
    let high_wavelen = original / high;
    for f in inv_freq.iter_mut() {
        let wavelen = 2.0 * std::f32::consts::PI / *f;
        let scaled = if wavelen > low_wavelen {
            *f / factor
        } else {
            *f
        };
        // Wavelengths are finite and positive, so this is the reference's `~(w < high) & ~(w > low)`.
        let medium = wavelen >= high_wavelen && wavelen <= low_wavelen;
        *f = if medium {
            let smooth = (original / wavelen - low) / (high - low);
            (1.0 - smooth) * scaled / factor + smooth * scaled
        } else {
            scaled
        };
    }
}
