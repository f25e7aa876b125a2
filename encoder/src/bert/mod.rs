//! A BERT encoder (Devlin et al. 2019, <https://arxiv.org/abs/1810.04805>)
//! whose forward pass is written for CPU throughput: the sequences of a batch
//! are packed end to end with no padding, Q, K and V come from one fused
//! matmul, attention runs per (sequence, head) on all cores, bias, residual,
//! GELU and LayerNorm are tight loops over contiguous `f32` rows, and the big
//! matmuls call the `gemm` crate (candle's CPU matmul) directly.
//!
//! Reference: Hugging Face transformers' `models/bert/modeling_bert.py`
//! (`BertEmbeddings`, `BertSelfAttention`, `BertSelfOutput`,
//! `BertIntermediate`, `BertOutput`, `BertLayer`), eager attention, absolute
//! positions, `f32` throughout so that results equal sentence-transformers'.

use candle_core::{bail, Result};
use candle_nn::VarBuilder;
use capstan_kernels::cpu::math::{self, sum};
use rayon::prelude::*;
use serde::Deserialize;

use crate::int8_cache::{ArrayReader, ArrayWriter};

mod linear;

use linear::{flat, observe, InputRanges, Linear, LinearInput, ReadResult};

/// The activation of the intermediate layer (`hidden_act` in config.json).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
pub enum HiddenAct {
    /// GELU with the exact erf (HF `gelu`).
    #[serde(rename = "gelu")]
    Gelu,
    /// GELU's tanh approximation (HF `gelu_new`, `gelu_pytorch_tanh`).
    #[serde(rename = "gelu_new", alias = "gelu_pytorch_tanh")]
    GeluTanh,
    /// ReLU.
    #[serde(rename = "relu")]
    Relu,
}

/// Position embeddings; only BERT's learned absolute positions are supported.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PositionEmbeddingType {
    /// Learned absolute positions.
    #[default]
    Absolute,
}

/// `config.json` of a Hugging Face BERT checkpoint (the fields the encoder uses).
#[derive(Debug, Clone, Deserialize)]
pub struct Config {
    pub vocab_size: usize,
    pub hidden_size: usize,
    pub num_hidden_layers: usize,
    pub num_attention_heads: usize,
    pub intermediate_size: usize,
    #[serde(default = "default_act")]
    pub hidden_act: HiddenAct,
    pub max_position_embeddings: usize,
    #[serde(default = "default_type_vocab_size")]
    pub type_vocab_size: usize,
    #[serde(default = "default_layer_norm_eps")]
    pub layer_norm_eps: f64,
    #[serde(default)]
    pub pad_token_id: usize,
    #[serde(default)]
    pub position_embedding_type: PositionEmbeddingType,
    #[serde(default)]
    pub model_type: Option<String>,
}

fn default_act() -> HiddenAct {
    HiddenAct::Gelu
}

fn default_type_vocab_size() -> usize {
    2
}

fn default_layer_norm_eps() -> f64 {
    1e-12
}

/// `nn.LayerNorm` over the last dimension.
struct LayerNorm {
    weight: Vec<f32>,
    bias: Vec<f32>,
    eps: f32,
}

impl LayerNorm {
    fn load(vb: VarBuilder, size: usize, eps: f64) -> Result<Self> {
        Ok(Self {
            weight: flat(&vb.get(size, "weight")?)?,
            bias: flat(&vb.get(size, "bias")?)?,
            eps: eps as f32,
        })
    }

    fn write(&self, w: &mut ArrayWriter) {
        w.f32s(&self.weight);
        w.f32s(&self.bias);
    }

    fn read(r: &mut ArrayReader, size: usize, eps: f64, what: &str) -> ReadResult<Self> {
        Ok(Self {
            weight: r.f32s(Some(size), &format!("{what} weight"))?,
            bias: r.f32s(Some(size), &format!("{what} bias"))?,
            eps: eps as f32,
        })
    }

    /// Normalises every row of `x` (`rows x size`) in place.
    fn forward_inplace(&self, x: &mut [f32]) {
        let size = self.weight.len();
        x.par_chunks_mut(size * 32).for_each(|block| {
            for row in block.chunks_exact_mut(size) {
                layer_norm_row(row, &self.weight, &self.bias, self.eps);
            }
        });
    }
}

#[inline(always)]
fn layer_norm_row(row: &mut [f32], weight: &[f32], bias: &[f32], eps: f32) {
    let n = row.len() as f32;
    let mean = sum(row) / n;
    let mut acc = [0f32; 8];
    let mut chunks = row.chunks_exact(8);
    for c in &mut chunks {
        for (a, v) in acc.iter_mut().zip(c) {
            *a += (v - mean) * (v - mean);
        }
    }
    let var = (acc.iter().sum::<f32>()
        + chunks
            .remainder()
            .iter()
            .map(|v| (v - mean) * (v - mean))
            .sum::<f32>())
        / n;
    let inv = 1.0 / (var + eps).sqrt();
    for ((v, w), b) in row.iter_mut().zip(weight).zip(bias) {
        *v = (*v - mean) * inv * w + b;
    }
}

/// `BertEmbeddings`: word + token type (always 0) + absolute position, then LayerNorm.
struct Embeddings {
    word: Vec<f32>,
    position: Vec<f32>,
    token_type0: Vec<f32>,
    layer_norm: LayerNorm,
    vocab_size: usize,
    max_positions: usize,
    hidden: usize,
}

impl Embeddings {
    fn load(vb: VarBuilder, cfg: &Config) -> Result<Self> {
        let h = cfg.hidden_size;
        let token_type = vb.get((cfg.type_vocab_size, h), "token_type_embeddings.weight")?;
        Ok(Self {
            word: flat(&vb.get((cfg.vocab_size, h), "word_embeddings.weight")?)?,
            position: flat(&vb.get(
                (cfg.max_position_embeddings, h),
                "position_embeddings.weight",
            )?)?,
            token_type0: flat(&token_type.get(0)?)?,
            layer_norm: LayerNorm::load(vb.pp("LayerNorm"), h, cfg.layer_norm_eps)?,
            vocab_size: cfg.vocab_size,
            max_positions: cfg.max_position_embeddings,
            hidden: h,
        })
    }

    /// Fills `x` (`total tokens x hidden`) for the packed sequences.
    fn forward_into(&self, seqs: &[&[u32]], x: &mut [f32]) -> Result<()> {
        let h = self.hidden;
        let mut rows = x.chunks_exact_mut(h);
        for seq in seqs {
            if seq.len() > self.max_positions {
                bail!(
                    "sequence of {} tokens, the model has {} positions",
                    seq.len(),
                    self.max_positions
                );
            }
            for (pos, &id) in seq.iter().enumerate() {
                let id = id as usize;
                if id >= self.vocab_size {
                    bail!(
                        "token id {id} outside the vocabulary of {}",
                        self.vocab_size
                    );
                }
                let row = rows.next().expect("x holds every token");
                let word = &self.word[id * h..(id + 1) * h];
                let position = &self.position[pos * h..(pos + 1) * h];
                for (((r, w), t), p) in row
                    .iter_mut()
                    .zip(word)
                    .zip(&self.token_type0)
                    .zip(position)
                {
                    *r = (w + t) + p;
                }
            }
        }
        self.layer_norm.forward_inplace(x);
        Ok(())
    }
}

/// A raw pointer that rayon tasks writing disjoint parts of one buffer share.
#[derive(Clone, Copy)]
struct SharedMut(*mut f32);
// SAFETY: every task writes a disjoint (sequence, head) block.
unsafe impl Send for SharedMut {}
unsafe impl Sync for SharedMut {}

impl SharedMut {
    /// The pointer (a method, so that closures capture the whole `Sync` struct).
    fn ptr(self) -> *mut f32 {
        self.0
    }
}

/// `BertSelfAttention` (Q, K, V fused) + `BertSelfOutput` (dense, residual, LayerNorm).
struct Attention {
    qkv: Linear,
    output: Linear,
    layer_norm: LayerNorm,
    heads: usize,
    head_dim: usize,
}

impl Attention {
    fn load(vb: VarBuilder, cfg: &Config) -> Result<Self> {
        let h = cfg.hidden_size;
        if !h.is_multiple_of(cfg.num_attention_heads) {
            bail!(
                "hidden_size {h} is not a multiple of num_attention_heads {}",
                cfg.num_attention_heads
            );
        }
        let sa = vb.pp("self");
        Ok(Self {
            qkv: Linear::load_concat(&[sa.pp("query"), sa.pp("key"), sa.pp("value")], h, h)?,
            output: Linear::load(vb.pp("output.dense"), h, h)?,
            layer_norm: LayerNorm::load(vb.pp("output.LayerNorm"), h, cfg.layer_norm_eps)?,
            heads: cfg.num_attention_heads,
            head_dim: h / cfg.num_attention_heads,
        })
    }

    /// `x = LayerNorm(x + dense(attention(x)))` over packed sequences.
    fn forward(&self, x: &mut [f32], spans: &[(usize, usize)], buf: &mut Buffers) {
        let rows = buf.rows;
        let h = self.heads * self.head_dim;
        let (d, h3) = (self.head_dim, 3 * h);
        observe(&mut buf.absmax, buf.layer, LinearInput::Qkv, x);
        self.qkv.forward_into(x, &mut buf.qkv, rows, false);
        let qkv = &buf.qkv;
        let ctx = SharedMut(buf.ctx.as_mut_ptr());
        let scale = 1.0 / (d as f32).sqrt();
        let tasks: Vec<(usize, usize, usize)> = spans
            .iter()
            .flat_map(|&(start, len)| (0..self.heads).map(move |head| (start, len, head)))
            .collect();
        tasks
            .par_iter()
            .for_each_init(Vec::new, |scores: &mut Vec<f32>, &(start, len, head)| {
                scores.resize(len * len, 0.0);
                let q = qkv[start * h3 + head * d..].as_ptr();
                let k = qkv[start * h3 + h + head * d..].as_ptr();
                let v = qkv[start * h3 + 2 * h + head * d..].as_ptr();
                // SAFETY: q, k, v address rows start..start + len of the packed
                // `rows x 3h` buffer (len rows of stride 3h, d columns each);
                // scores holds len x len; the context block (rows start..start +
                // len, columns head*d..head*d + d of `rows x h`) belongs to this
                // task alone.
                unsafe {
                    // scores = scale · Q Kᵀ
                    gemm::gemm(
                        len,
                        len,
                        d,
                        scores.as_mut_ptr(),
                        1,
                        len as isize,
                        false,
                        q,
                        1,
                        h3 as isize,
                        k,
                        h3 as isize,
                        1,
                        0.0,
                        scale,
                        false,
                        false,
                        false,
                        gemm::Parallelism::None,
                    );
                    for row in scores.chunks_exact_mut(len) {
                        math::softmax(row, 1.0);
                    }
                    // context = P V
                    gemm::gemm(
                        len,
                        d,
                        len,
                        ctx.ptr().add(start * h + head * d),
                        1,
                        h as isize,
                        false,
                        scores.as_ptr(),
                        1,
                        len as isize,
                        v,
                        1,
                        h3 as isize,
                        0.0,
                        1.0,
                        false,
                        false,
                        false,
                        gemm::Parallelism::None,
                    );
                }
            });
        observe(
            &mut buf.absmax,
            buf.layer,
            LinearInput::AttentionOutput,
            &buf.ctx,
        );
        self.output.forward_into(&buf.ctx, x, rows, true);
        self.layer_norm.forward_inplace(x);
    }
}

/// `BertIntermediate` (dense + activation) + `BertOutput` (dense, residual, LayerNorm).
struct FeedForward {
    intermediate: Linear,
    output: Linear,
    layer_norm: LayerNorm,
    act: HiddenAct,
}

impl FeedForward {
    fn load(vb: VarBuilder, cfg: &Config) -> Result<Self> {
        let (h, i) = (cfg.hidden_size, cfg.intermediate_size);
        Ok(Self {
            intermediate: Linear::load(vb.pp("intermediate.dense"), h, i)?,
            output: Linear::load(vb.pp("output.dense"), i, h)?,
            layer_norm: LayerNorm::load(vb.pp("output.LayerNorm"), h, cfg.layer_norm_eps)?,
            act: cfg.hidden_act,
        })
    }

    fn forward(&self, x: &mut [f32], buf: &mut Buffers) {
        let rows = buf.rows;
        observe(&mut buf.absmax, buf.layer, LinearInput::Intermediate, x);
        self.intermediate
            .forward_activated_into(x, &mut buf.inter, rows, self.act);
        observe(&mut buf.absmax, buf.layer, LinearInput::Output, &buf.inter);
        self.output.forward_into(&buf.inter, x, rows, true);
        self.layer_norm.forward_inplace(x);
    }
}

/// `BertLayer`.
struct Layer {
    attention: Attention,
    feed_forward: FeedForward,
}

impl Layer {
    fn load(vb: VarBuilder, cfg: &Config) -> Result<Self> {
        Ok(Self {
            attention: Attention::load(vb.pp("attention"), cfg)?,
            feed_forward: FeedForward::load(vb.clone(), cfg)?,
        })
    }
}

/// Activations of one forward pass.
struct Buffers {
    rows: usize,
    /// The layer running.
    layer: usize,
    /// The ranges of the linear layers' inputs, when recording.
    absmax: Option<InputRanges>,
    qkv: Vec<f32>,
    ctx: Vec<f32>,
    inter: Vec<f32>,
}

/// `BertModel` without the pooler: packed token ids in, last hidden states out.
pub struct BertModel {
    embeddings: Embeddings,
    layers: Vec<Layer>,
    hidden: usize,
    intermediate: usize,
}

impl BertModel {
    /// Loads the weights; tensor names as in HF checkpoints (`embeddings.*`,
    /// `encoder.layer.{i}.*`), with or without a `bert.` prefix. The weights
    /// are copied to host memory as `f32`.
    pub fn load(vb: VarBuilder, cfg: &Config) -> Result<Self> {
        if !vb.device().is_cpu() {
            bail!("this BERT runs on the CPU only, got {:?}", vb.device());
        }
        // The only variant; other position types fail to deserialize.
        let PositionEmbeddingType::Absolute = cfg.position_embedding_type;
        let vb = if vb.contains_tensor("embeddings.word_embeddings.weight") {
            vb
        } else {
            vb.pp(cfg.model_type.as_deref().unwrap_or("bert"))
        };
        let embeddings = Embeddings::load(vb.pp("embeddings"), cfg)?;
        let layers = (0..cfg.num_hidden_layers)
            .map(|i| Layer::load(vb.pp(format!("encoder.layer.{i}")), cfg))
            .collect::<Result<Vec<_>>>()?;
        Ok(Self {
            embeddings,
            layers,
            hidden: cfg.hidden_size,
            intermediate: cfg.intermediate_size,
        })
    }

    /// Quantizes the weights of every linear layer to int8 per output
    /// channel, smoothed by the ranges their inputs reach on `calibration`
    /// (token id sequences, run through the f32 model once); their inputs are
    /// then quantized per token at each call (dynamic quantization).
    /// Embeddings, LayerNorms and attention stay f32.
    pub fn quantize_int8(&mut self, calibration: &[&[u32]]) -> Result<()> {
        let (_, absmax) = self.run(calibration, true)?;
        let absmax = absmax.expect("recorded");
        for (layer, seen) in self.layers.iter_mut().zip(absmax) {
            let linears = [
                (&mut layer.attention.qkv, LinearInput::Qkv),
                (&mut layer.attention.output, LinearInput::AttentionOutput),
                (
                    &mut layer.feed_forward.intermediate,
                    LinearInput::Intermediate,
                ),
                (&mut layer.feed_forward.output, LinearInput::Output),
            ];
            for (linear, input) in linears {
                linear.quantize_int8(&seen[input as usize]);
            }
        }
        Ok(())
    }

    /// An int8 model's arrays in the order [`BertModel::read_int8`] reads them; `None` for an
    /// f32 model (only the int8 form costs a calibration pass to build).
    pub(crate) fn write_int8(&self) -> Option<Vec<u8>> {
        let mut w = ArrayWriter::default();
        let e = &self.embeddings;
        w.f32s(&e.word);
        w.f32s(&e.position);
        w.f32s(&e.token_type0);
        e.layer_norm.write(&mut w);
        for layer in &self.layers {
            let (a, f) = (&layer.attention, &layer.feed_forward);
            let written = a.qkv.write_int8(&mut w)
                && a.output.write_int8(&mut w)
                && f.intermediate.write_int8(&mut w)
                && f.output.write_int8(&mut w);
            if !written {
                return None;
            }
            a.layer_norm.write(&mut w);
            f.layer_norm.write(&mut w);
        }
        Some(w.out)
    }

    /// The int8 model [`BertModel::write_int8`] wrote for a checkpoint of config `cfg`; every
    /// array's length is checked against the config.
    pub(crate) fn read_int8(bytes: &[u8], cfg: &Config) -> ReadResult<Self> {
        let (h, i) = (cfg.hidden_size, cfg.intermediate_size);
        if cfg.num_attention_heads == 0 || !h.is_multiple_of(cfg.num_attention_heads) {
            return Err(format!("hidden_size {h} is not a multiple of the heads"));
        }
        let eps = cfg.layer_norm_eps;
        let mut r = ArrayReader::new(bytes);
        let embeddings = Embeddings {
            word: r.f32s(Some(cfg.vocab_size * h), "word embeddings")?,
            position: r.f32s(Some(cfg.max_position_embeddings * h), "position embeddings")?,
            token_type0: r.f32s(Some(h), "token type embeddings")?,
            layer_norm: LayerNorm::read(&mut r, h, eps, "embeddings LayerNorm")?,
            vocab_size: cfg.vocab_size,
            max_positions: cfg.max_position_embeddings,
            hidden: h,
        };
        let mut layers = Vec::with_capacity(cfg.num_hidden_layers);
        for l in 0..cfg.num_hidden_layers {
            let qkv = Linear::read_int8(&mut r, h, 3 * h, &format!("layer {l} qkv"))?;
            let output = Linear::read_int8(&mut r, h, h, &format!("layer {l} attention output"))?;
            let intermediate = Linear::read_int8(&mut r, h, i, &format!("layer {l} intermediate"))?;
            let ff_output = Linear::read_int8(&mut r, i, h, &format!("layer {l} output"))?;
            let attention_norm = LayerNorm::read(&mut r, h, eps, &format!("layer {l} LayerNorm"))?;
            let output_norm = LayerNorm::read(&mut r, h, eps, &format!("layer {l} LayerNorm"))?;
            layers.push(Layer {
                attention: Attention {
                    qkv,
                    output,
                    layer_norm: attention_norm,
                    heads: cfg.num_attention_heads,
                    head_dim: h / cfg.num_attention_heads,
                },
                feed_forward: FeedForward {
                    intermediate,
                    output: ff_output,
                    layer_norm: output_norm,
                    act: cfg.hidden_act,
                },
            });
        }
        r.finish()?;
        Ok(Self {
            embeddings,
            layers,
            hidden: h,
            intermediate: i,
        })
    }

    /// Runs the encoder over `seqs` packed end to end (no padding, so no
    /// mask; token type 0). Returns the last hidden states, `total tokens x
    /// hidden`, row-major, sequence after sequence.
    pub fn forward(&self, seqs: &[&[u32]]) -> Result<Vec<f32>> {
        Ok(self.run(seqs, false)?.0)
    }

    /// [`BertModel::forward`], recording with `record` the largest magnitude
    /// of every input channel of every linear layer.
    fn run(&self, seqs: &[&[u32]], record: bool) -> Result<(Vec<f32>, Option<InputRanges>)> {
        let mut spans = Vec::with_capacity(seqs.len());
        let mut rows = 0;
        for s in seqs {
            spans.push((rows, s.len()));
            rows += s.len();
        }
        let h = self.hidden;
        let mut x = vec![0f32; rows * h];
        self.embeddings.forward_into(seqs, &mut x)?;
        let mut buf = Buffers {
            rows,
            qkv: vec![0f32; rows * 3 * h],
            ctx: vec![0f32; rows * h],
            inter: vec![0f32; rows * self.intermediate],
            layer: 0,
            absmax: record.then(|| {
                let (h, i) = (h, self.intermediate);
                vec![
                    [vec![0f32; h], vec![0f32; h], vec![0f32; h], vec![0f32; i]];
                    self.layers.len()
                ]
            }),
        };
        for (index, layer) in self.layers.iter().enumerate() {
            buf.layer = index;
            layer.attention.forward(&mut x, &spans, &mut buf);
            layer.feed_forward.forward(&mut x, &mut buf);
        }
        Ok((x, buf.absmax))
    }
}

fn activate(act: HiddenAct, x: &mut [f32]) {
    match act {
        HiddenAct::Gelu => math::gelu(x),
        HiddenAct::GeluTanh => x.iter_mut().for_each(|v| {
            let u = *v;
            *v = 0.5
                * u
                * (1.0 + ((2.0 / std::f32::consts::PI).sqrt() * (u + 0.044715 * u * u * u)).tanh());
        }),
        HiddenAct::Relu => x.iter_mut().for_each(|v| *v = v.max(0.0)),
    }
}
