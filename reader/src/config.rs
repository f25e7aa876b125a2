//! `config.json` and `generation_config.json` of a Llama-family checkpoint.
//!
//! [`LlamaConfig`] mirrors Hugging Face's `LlamaConfig` (transformers 4.34 to 4.46) plus the
//! fields CEPE adds (`do_cross_attention`, `num_cross_attn_layers`, `encoder_hidden_size`,
//! `encoder_config`; see princeton-nlp/CEPE `modeling_llama_flash.py`). Missing fields take
//! Hugging Face's defaults.

use serde::Deserialize;

use crate::error::{Error, Result};

/// One token id or a list of them (`eos_token_id` may be either).
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(untagged)]
pub enum TokenIds {
    /// A single id.
    One(u32),
    /// Several ids.
    Many(Vec<u32>),
}

impl TokenIds {
    /// The ids as a vector.
    pub fn to_vec(&self) -> Vec<u32> {
        match self {
            TokenIds::One(id) => vec![*id],
            TokenIds::Many(ids) => ids.clone(),
        }
    }
}

/// `rope_scaling` as written in config.json: transformers < 4.45 uses `type`, later versions
/// `rope_type`.
#[derive(Debug, Clone, Deserialize, PartialEq)]
pub struct RopeScalingConfig {
    /// Old spelling of the scaling kind.
    #[serde(default, rename = "type")]
    pub kind: Option<String>,
    /// New spelling of the scaling kind.
    #[serde(default)]
    pub rope_type: Option<String>,
    /// Scaling factor.
    #[serde(default)]
    pub factor: Option<f64>,
}

/// The subset of `config.json` the Llama and CEPE readers use.
#[derive(Debug, Clone, Deserialize)]
pub struct LlamaConfig {
    /// Model classes (`LlamaForCausalLM`, `LlamaForCausalContextLM`).
    #[serde(default)]
    pub architectures: Vec<String>,
    /// Vocabulary size.
    pub vocab_size: usize,
    /// Width of the residual stream.
    pub hidden_size: usize,
    /// Width of the SwiGLU MLP.
    pub intermediate_size: usize,
    /// Number of transformer layers.
    pub num_hidden_layers: usize,
    /// Number of query heads.
    pub num_attention_heads: usize,
    /// Number of key/value heads (grouped-query attention); defaults to the query heads.
    #[serde(default)]
    pub num_key_value_heads: Option<usize>,
    /// Per-head width; defaults to `hidden_size / num_attention_heads`.
    #[serde(default)]
    pub head_dim: Option<usize>,
    /// RMSNorm epsilon.
    #[serde(default = "default_rms_norm_eps")]
    pub rms_norm_eps: f64,
    /// RoPE base (10,000 for Llama 2; 500,000 for RoPE ABF).
    #[serde(default = "default_rope_theta")]
    pub rope_theta: f64,
    /// RoPE scaling; only linear (position interpolation) is supported.
    #[serde(default)]
    pub rope_scaling: Option<RopeScalingConfig>,
    /// Longest sequence the model was trained for (informational; longer inputs are allowed).
    #[serde(default = "default_max_position_embeddings")]
    pub max_position_embeddings: usize,
    /// Whether `lm_head` shares the input embedding matrix.
    #[serde(default)]
    pub tie_word_embeddings: bool,
    /// Biases on the attention projections.
    #[serde(default)]
    pub attention_bias: bool,
    /// Biases on the MLP projections.
    #[serde(default)]
    pub mlp_bias: bool,
    /// Activation of the MLP gate; only `silu` is supported.
    #[serde(default = "default_hidden_act")]
    pub hidden_act: String,
    /// Beginning-of-sequence token.
    #[serde(default)]
    pub bos_token_id: Option<u32>,
    /// End-of-sequence token(s).
    #[serde(default)]
    pub eos_token_id: Option<TokenIds>,
    /// Padding token.
    #[serde(default)]
    pub pad_token_id: Option<u32>,
    /// CEPE: decoder layers have cross-attention blocks.
    #[serde(default)]
    pub do_cross_attention: bool,
    /// CEPE: how many of the last decoder layers have cross-attention.
    #[serde(default)]
    pub num_cross_attn_layers: usize,
    /// CEPE: width of the encoder states (input of cross-attention `k_proj`/`v_proj`).
    #[serde(default)]
    pub encoder_hidden_size: Option<usize>,
    /// CEPE: the bidirectional encoder's own config.
    #[serde(default)]
    pub encoder_config: Option<Box<LlamaConfig>>,
    /// Capstan: the decoder's self-attention pattern (`zebra:every=4,window=512`, ...; see
    /// `AttentionPattern`); absent means full attention.
    #[serde(default)]
    pub capstan_attention: Option<String>,
    /// Dtype the checkpoint was saved in (`bfloat16`, `float16`, `float32`).
    #[serde(default)]
    pub torch_dtype: Option<String>,
}

fn default_rms_norm_eps() -> f64 {
    1e-6
}
fn default_rope_theta() -> f64 {
    10_000.0
}
fn default_max_position_embeddings() -> usize {
    2048
}
fn default_hidden_act() -> String {
    "silu".to_string()
}

/// Supported RoPE position scaling.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum RopeScaling {
    /// Plain RoPE.
    None,
    /// Linear position interpolation: positions are divided by the factor.
    Linear(f64),
}

impl LlamaConfig {
    /// Parses a config.json text.
    pub fn from_json(text: &str) -> serde_json::Result<Self> {
        serde_json::from_str(text)
    }

    /// Number of key/value heads.
    pub fn kv_heads(&self) -> usize {
        self.num_key_value_heads.unwrap_or(self.num_attention_heads)
    }

    /// Per-head width.
    pub fn head_size(&self) -> usize {
        self.head_dim
            .unwrap_or(self.hidden_size / self.num_attention_heads.max(1))
    }

    /// Whether this is a CEPE checkpoint with an encoder and cross-attention layers.
    pub fn is_cepe(&self) -> bool {
        self.do_cross_attention && self.encoder_config.is_some()
    }

    /// The resolved RoPE scaling, or an error for unsupported kinds.
    pub fn rope_scaling(&self) -> Result<RopeScaling> {
        let Some(s) = &self.rope_scaling else {
            return Ok(RopeScaling::None);
        };
        let kind = s.rope_type.as_deref().or(s.kind.as_deref()).unwrap_or("");
        match kind {
            "default" => Ok(RopeScaling::None),
            "linear" => match s.factor {
                Some(f) if f > 0.0 => Ok(RopeScaling::Linear(f)),
                other => Err(Error::UnsupportedConfig {
                    field: "rope_scaling.factor",
                    value: format!("{other:?}"),
                }),
            },
            other => Err(Error::UnsupportedConfig {
                field: "rope_scaling",
                value: format!("type {other:?} (only \"linear\" is supported)"),
            }),
        }
    }

    /// Checks the fields the model code relies on.
    pub fn validate(&self) -> Result<()> {
        let unsupported = |field, value: String| Err(Error::UnsupportedConfig { field, value });
        if self.hidden_act != "silu" {
            return unsupported("hidden_act", self.hidden_act.clone());
        }
        if self.num_attention_heads == 0 || self.kv_heads() == 0 {
            return unsupported("num_attention_heads", self.num_attention_heads.to_string());
        }
        if !self.num_attention_heads.is_multiple_of(self.kv_heads()) {
            return unsupported(
                "num_key_value_heads",
                format!(
                    "{} does not divide num_attention_heads {}",
                    self.kv_heads(),
                    self.num_attention_heads
                ),
            );
        }
        if !self.head_size().is_multiple_of(2) {
            return unsupported(
                "head_dim",
                format!("{} (RoPE needs even)", self.head_size()),
            );
        }
        if self.num_cross_attn_layers > self.num_hidden_layers {
            return unsupported(
                "num_cross_attn_layers",
                self.num_cross_attn_layers.to_string(),
            );
        }
        if self.do_cross_attention && self.encoder_config.is_none() {
            return unsupported("encoder_config", "missing while do_cross_attention".into());
        }
        self.rope_scaling()?;
        if let Some(enc) = &self.encoder_config {
            enc.validate()?;
        }
        Ok(())
    }
}

/// The subset of `generation_config.json` the readers use.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct GenerationConfig {
    /// Beginning-of-sequence token.
    #[serde(default)]
    pub bos_token_id: Option<u32>,
    /// End-of-sequence token(s): generation stops at any of them.
    #[serde(default)]
    pub eos_token_id: Option<TokenIds>,
    /// Padding token.
    #[serde(default)]
    pub pad_token_id: Option<u32>,
}
