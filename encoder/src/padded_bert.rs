//! The BERT of GPUs and half precision: sequences padded to the longest of
//! their batch, candle-transformers' encoder layers, and Capstan's own
//! embeddings and attention mask.
//!
//! Reference: HF transformers' `BertModel` (the additive mask is
//! `(1 - mask) * finfo(dtype).min`). candle-transformers' own `BertModel`
//! multiplies by `f32::MIN`, which rounds to -inf in f16 and in bf16, and
//! `0 * -inf` is NaN: every real token's score became NaN. Here the mask's
//! minimum is the dtype's own.

use candle_core::{DType, Module, Result, Tensor};
use candle_nn::{embedding, layer_norm, Embedding, LayerNorm, VarBuilder};
use candle_transformers::models::bert::{BertEncoder, Config};

/// Embeddings (word, position, token type; LayerNorm) and the encoder layers.
pub(crate) struct PaddedBert {
    word: Embedding,
    position: Embedding,
    token_type: Embedding,
    norm: LayerNorm,
    encoder: BertEncoder,
}

impl PaddedBert {
    /// Loads `embeddings.*` and `encoder.*` (under `bert.` in checkpoints that
    /// carry a head).
    pub(crate) fn load(vb: VarBuilder, cfg: &Config) -> Result<Self> {
        let vb = if vb.contains_tensor("bert.embeddings.word_embeddings.weight") {
            vb.pp("bert")
        } else {
            vb
        };
        let e = vb.pp("embeddings");
        Ok(Self {
            word: embedding(cfg.vocab_size, cfg.hidden_size, e.pp("word_embeddings"))?,
            position: embedding(
                cfg.max_position_embeddings,
                cfg.hidden_size,
                e.pp("position_embeddings"),
            )?,
            token_type: embedding(
                cfg.type_vocab_size,
                cfg.hidden_size,
                e.pp("token_type_embeddings"),
            )?,
            norm: layer_norm(cfg.hidden_size, cfg.layer_norm_eps, e.pp("LayerNorm"))?,
            encoder: BertEncoder::load(vb.pp("encoder"), cfg)?,
        })
    }

    /// Last hidden states `(b, len, hidden)` of `input_ids` `(b, len)`, with
    /// `mask` `(b, len)` (1: real token, 0: padding).
    pub(crate) fn forward(&self, input_ids: &Tensor, mask: &Tensor) -> Result<Tensor> {
        let (_, len) = input_ids.dims2()?;
        let positions = Tensor::arange(0u32, len as u32, input_ids.device())?;
        let x = (self.word.forward(input_ids)?
            + self.token_type.forward(&input_ids.zeros_like()?)?)?
        .broadcast_add(&self.position.forward(&positions)?)?;
        let x = self.norm.forward(&x)?;
        let dtype = x.dtype();
        let min = match dtype {
            DType::F16 => f64::from(half::f16::MIN),
            DType::BF16 => f64::from(half::bf16::MIN),
            _ => f64::from(f32::MIN),
        };
        let mask = mask.to_dtype(dtype)?;
        let additive = (mask.ones_like()? - mask)?
            .affine(min, 0.0)?
            .unsqueeze(1)?
            .unsqueeze(1)?;
        self.encoder.forward(&x, &additive)
    }
}
