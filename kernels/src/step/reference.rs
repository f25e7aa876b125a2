//! The decoding step on the CPU, written out as decode_step.cu computes it: the oracle of the
//! CUDA step ([`super::DecodeStep`]).

use candle_core::quantized::{QStorage, QTensor};
use candle_core::{bail, DType, Device, Result, Tensor};

use super::{StepDims, StepMatrix, StepModel};
use crate::RopeParams;

/// One layer's cache on the host: per KV head, `len` rows of `head_dim` values (as stored:
/// already rounded to the model's float type).
#[derive(Debug, Clone, Default)]
pub struct StepKvHost {
    /// Keys, one `Vec` a head.
    pub k: Vec<Vec<f32>>,
    /// Values, one `Vec` a head.
    pub v: Vec<Vec<f32>>,
}

struct Layer {
    attn_norm: Vec<f32>,
    qkv: [Vec<f32>; 3],
    bias: Option<[Vec<f32>; 3]>,
    o: Vec<f32>,
    mlp_norm: Vec<f32>,
    gate: Vec<f32>,
    up: Vec<f32>,
    down: Vec<f32>,
}

/// [`StepModel`] with every matrix dequantized to f32 on the host.
pub struct ReferenceStep {
    dims: StepDims,
    rope: RopeParams,
    dtype: DType,
    embed: Vec<f32>,
    layers: Vec<Layer>,
    norm: Vec<f32>,
    lm_head: Vec<f32>,
}

fn host(t: &Tensor) -> Result<Vec<f32>> {
    t.to_device(&Device::Cpu)?
        .to_dtype(DType::F32)?
        .flatten_all()?
        .to_vec1()
}

/// The matrix's values, row after row, in f32 (candle's dequantization for GGML blocks).
pub(crate) fn dequantized(m: &StepMatrix) -> Result<Vec<f32>> {
    match m {
        StepMatrix::Dense(t) => host(t),
        StepMatrix::Ggml(q) => {
            // On the host first: candle's dequantization, wherever the blocks are.
            let storage = QStorage::from_data(q.data()?, &Device::Cpu, q.dtype())?;
            host(&QTensor::new(storage, q.shape())?.dequantize(&Device::Cpu)?)
        }
    }
}

/// `x` rounded to `dtype` (bf16 and f16 round to nearest even, as the kernels' stores).
fn round(x: f32, dtype: DType) -> f32 {
    match dtype {
        DType::BF16 => half::bf16::from_f32(x).to_f32(),
        DType::F16 => half::f16::from_f32(x).to_f32(),
        _ => x,
    }
}

/// `W x` for `W` `(rows, x.len())` row-major.
fn product(w: &[f32], x: &[f32]) -> Vec<f32> {
    w.chunks_exact(x.len())
        .map(|row| row.iter().zip(x).map(|(a, b)| a * b).sum())
        .collect()
}

impl ReferenceStep {
    /// Dequantizes `model` (checked first).
    pub fn new(model: &StepModel) -> Result<Self> {
        model.check()?;
        let layers = model
            .layers
            .iter()
            .map(|l| {
                Ok(Layer {
                    attn_norm: host(&l.attn_norm)?,
                    qkv: [dequantized(&l.q)?, dequantized(&l.k)?, dequantized(&l.v)?],
                    bias: match &l.qkv_bias {
                        Some([a, b, c]) => Some([host(a)?, host(b)?, host(c)?]),
                        None => None,
                    },
                    o: dequantized(&l.o)?,
                    mlp_norm: host(&l.mlp_norm)?,
                    gate: dequantized(&l.gate)?,
                    up: dequantized(&l.up)?,
                    down: dequantized(&l.down)?,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Self {
            dims: model.dims,
            rope: model.rope.clone(),
            dtype: model.dtype(),
            embed: dequantized(&model.embed)?,
            layers,
            norm: host(&model.norm)?,
            lm_head: dequantized(&model.lm_head)?,
        })
    }

    fn rms_norm(&self, x: &[f32], w: &[f32]) -> Vec<f32> {
        let ss: f32 = x.iter().map(|v| v * v).sum();
        let inv = 1.0 / (ss / x.len() as f32 + self.dims.eps as f32).sqrt();
        x.iter()
            .zip(w)
            .map(|(v, w)| round(v * inv * w, self.dtype))
            .collect()
    }

    /// The logits `(vocab)` after `token` at position `pos`, each layer's cache in `kv`
    /// extended by the token's key and value.
    pub fn step(&self, token: u32, pos: usize, kv: &mut [StepKvHost]) -> Result<Vec<f32>> {
        let d = self.dims;
        let (hd, half) = (d.head_dim, d.head_dim / 2);
        if kv.len() != self.layers.len() {
            bail!(
                "decode step: {} caches for {} layers",
                kv.len(),
                self.layers.len()
            )
        }
        if token as usize >= d.vocab {
            bail!(
                "decode step: token {token} outside a vocabulary of {}",
                d.vocab
            )
        }
        let mut x = self.embed[token as usize * d.hidden..][..d.hidden].to_vec();
        let t = pos as f32;
        let t = if self.rope.factor == 1.0 {
            t
        } else {
            t / self.rope.factor
        };
        let rotations: Vec<(f32, f32)> = self
            .rope
            .inv_freq
            .iter()
            .map(|f| (t * f).sin_cos())
            .collect();
        let rotate = |head: &[f32]| -> Vec<f32> {
            let mut out = vec![0f32; hd];
            for (f, &(sn, cs)) in rotations.iter().enumerate() {
                let (x1, x2) = (head[f], head[f + half]);
                out[f] = round(x1 * cs - x2 * sn, self.dtype);
                out[f + half] = round(x1 * sn + x2 * cs, self.dtype);
            }
            out
        };
        let scale = 1.0 / (hd as f32).sqrt();
        let group = d.heads / d.kv_heads;
        for (l, cache) in self.layers.iter().zip(kv.iter_mut()) {
            if cache.k.is_empty() {
                cache.k = vec![Vec::new(); d.kv_heads];
                cache.v = vec![Vec::new(); d.kv_heads];
            }
            let h = self.rms_norm(&x, &l.attn_norm);
            let mut parts = [0, 1, 2].map(|i| product(&l.qkv[i], &h));
            if let Some(bias) = &l.bias {
                for (p, b) in parts.iter_mut().zip(bias) {
                    p.iter_mut().zip(b).for_each(|(v, b)| *v += b);
                }
            }
            let q: Vec<Vec<f32>> = parts[0].chunks_exact(hd).map(rotate).collect();
            for kh in 0..d.kv_heads {
                cache.k[kh].extend(rotate(&parts[1][kh * hd..][..hd]));
                let v = &parts[2][kh * hd..][..hd];
                cache.v[kh].extend(v.iter().map(|&v| round(v, self.dtype)));
            }
            let mut attn = Vec::with_capacity(d.heads * hd);
            for (hq, qh) in q.iter().enumerate() {
                let (keys, values) = (&cache.k[hq / group], &cache.v[hq / group]);
                let scores: Vec<f32> = keys
                    .chunks_exact(hd)
                    .map(|k| qh.iter().zip(k).map(|(a, b)| a * scale * b).sum())
                    .collect();
                let big = scores.iter().cloned().fold(f32::NEG_INFINITY, f32::max);
                let e: Vec<f32> = scores.iter().map(|s| (s - big).exp()).collect();
                let total: f32 = e.iter().sum();
                let mut out = vec![0f32; hd];
                for (p, v) in e.iter().zip(values.chunks_exact(hd)) {
                    out.iter_mut().zip(v).for_each(|(o, v)| *o += p * v);
                }
                attn.extend(out.iter().map(|o| round(o / total, self.dtype)));
            }
            x.iter_mut()
                .zip(product(&l.o, &attn))
                .for_each(|(x, y)| *x += y);
            let h = self.rms_norm(&x, &l.mlp_norm);
            let (g, u) = (product(&l.gate, &h), product(&l.up, &h));
            let act: Vec<f32> = g
                .iter()
                .zip(&u)
                .map(|(g, u)| round(g / (1.0 + (-g).exp()) * u, self.dtype))
                .collect();
            x.iter_mut()
                .zip(product(&l.down, &act))
                .for_each(|(x, y)| *x += y);
        }
        let h = self.rms_norm(&x, &self.norm);
        Ok(product(&self.lm_head, &h))
    }
}
