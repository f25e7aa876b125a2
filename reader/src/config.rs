//! `config.json` and `generation_config.json` of a Llama-family checkpoint.
//!
//! [`LlamaConfig`] mirrors Hugging Face's `LlamaConfig` and `Qwen2Config` in both spellings
//! found in the wild: transformers 4.x (`rope_scaling` beside a top-level `rope_theta`) and 5.x
//! (`rope_parameters` holding `rope_theta` and the scaling), plus the fields CEPE adds (`do_cross_attention`, `num_cross_attn_layers`, `encoder_hidden_size`,
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

/// `rope_scaling` (transformers 4.x) or `rope_parameters` (5.x) as written in config.json:
/// transformers < 4.45 names the kind `type`, later versions `rope_type`.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
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
    /// RoPE base (5.x `rope_parameters` only).
    #[serde(default)]
    pub rope_theta: Option<f64>,
    /// Llama 3: wavelengths above `original_max_position_embeddings / low_freq_factor` are
    /// scaled fully.
    #[serde(default)]
    pub low_freq_factor: Option<f64>,
    /// Llama 3: wavelengths below `original_max_position_embeddings / high_freq_factor` are
    /// kept.
    #[serde(default)]
    pub high_freq_factor: Option<f64>,
    /// Llama 3: the context length the model was pretrained with.
    #[serde(default)]
    pub original_max_position_embeddings: Option<usize>,
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
    /// RoPE base (10,000 for Llama 2; 500,000 for RoPE ABF and Llama 3); transformers 5.x
    /// writes it inside `rope_parameters` instead. See [`LlamaConfig::rope_base`].
    #[serde(default)]
    pub rope_theta: Option<f64>,
    /// RoPE scaling, transformers 4.x spelling: `default`, `linear` or `llama3`.
    #[serde(default)]
    pub rope_scaling: Option<RopeScalingConfig>,
    /// RoPE base and scaling, transformers 5.x spelling.
    #[serde(default)]
    pub rope_parameters: Option<RopeScalingConfig>,
    /// Qwen2: sliding-window attention in some layers (refused: not implemented).
    #[serde(default)]
    pub use_sliding_window: bool,
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
    /// Dtype the checkpoint was saved in (`bfloat16`, `float16`, `float32`); transformers 5.x
    /// names it `dtype`.
    #[serde(default, alias = "dtype")]
    pub torch_dtype: Option<String>,
}

fn default_rms_norm_eps() -> f64 {
    1e-6
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
    /// Llama 3.1's frequency-dependent scaling (`rope_type: "llama3"`).
    Llama3 {
        /// Scaling of the low frequencies.
        factor: f64,
        /// Wavelength bound (in units of the original context) of full scaling.
        low_freq_factor: f64,
        /// Wavelength bound of no scaling.
        high_freq_factor: f64,
        /// The pretraining context length.
        original_max_position_embeddings: usize,
    },
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

    /// Whether the Q, K and V projections have biases (`attention_bias`, or always for Qwen2).
    pub fn qkv_bias(&self) -> bool {
        self.attention_bias
            || self.architectures.first().map(String::as_str) == Some("Qwen2ForCausalLM")
    }

    /// Whether this is a CEPE checkpoint with an encoder and cross-attention layers.
    pub fn is_cepe(&self) -> bool {
        self.do_cross_attention && self.encoder_config.is_some()
    }

    /// The RoPE base: `rope_parameters.rope_theta` (5.x), else `rope_theta`, else 10,000.
    pub fn rope_base(&self) -> f64 {
        self.rope_parameters
            .as_ref()
            .and_then(|p| p.rope_theta)
            .or(self.rope_theta)
            .unwrap_or(10_000.0)
    }

    /// The resolved RoPE scaling (`rope_parameters` over `rope_scaling`), or an error naming
    /// the key for unsupported kinds.
    pub fn rope_scaling(&self) -> Result<RopeScaling> {
        let (s, key) = match (&self.rope_parameters, &self.rope_scaling) {
            (Some(p), _) => (p, "rope_parameters"),
            (None, Some(s)) => (s, "rope_scaling"),
            (None, None) => return Ok(RopeScaling::None),
        };
        let kind = s
            .rope_type
            .as_deref()
            .or(s.kind.as_deref())
            .unwrap_or("default");
        let positive = |field: &'static str, v: Option<f64>| match v {
            Some(f) if f > 0.0 && f.is_finite() => Ok(f),
            other => Err(Error::UnsupportedConfig {
                field,
                value: format!("{other:?} (a positive number is needed)"),
            }),
        };
        match kind {
            "default" => Ok(RopeScaling::None),
            "llama3" => {
                let low = positive("rope_scaling.low_freq_factor", s.low_freq_factor)?;
                let high = positive("rope_scaling.high_freq_factor", s.high_freq_factor)?;
                if high <= low {
                    return Err(Error::UnsupportedConfig {
                        field: "rope_scaling.high_freq_factor",
                        value: format!("{high} (must exceed low_freq_factor {low})"),
                    });
                }
                Ok(RopeScaling::Llama3 {
                    factor: positive("rope_scaling.factor", s.factor)?,
                    low_freq_factor: low,
                    high_freq_factor: high,
                    original_max_position_embeddings: match s.original_max_position_embeddings {
                        Some(n) if n > 0 => n,
                        other => {
                            return Err(Error::UnsupportedConfig {
                                field: "rope_scaling.original_max_position_embeddings",
                                value: format!("{other:?}"),
                            })
                        }
                    },
                })
            }
            "linear" => match s.factor {
                Some(f) if f > 0.0 => Ok(RopeScaling::Linear(f)),
                other => Err(Error::UnsupportedConfig {
                    field: "rope_scaling.factor",
                    value: format!("{other:?}"),
                }),
            },
            other => Err(Error::UnsupportedConfig {
                field: if key == "rope_parameters" {
                    "rope_parameters.rope_type"
                } else {
                    "rope_scaling.rope_type"
                },
                value: format!("{other:?} (supported: \"default\", \"linear\", \"llama3\")"),
            }),
        }
    }

    /// Checks the fields the model code relies on.
    pub fn validate(&self) -> Result<()> {
        let unsupported = |field, value: String| Err(Error::UnsupportedConfig { field, value });
        if self.hidden_act != "silu" {
            return unsupported("hidden_act", self.hidden_act.clone());
        }
        // Values outside what the model's arithmetic allows would give NaN logits.
        let base = self.rope_base();
        if !(base > 0.0 && base.is_finite()) {
            return unsupported("rope_theta", format!("{base} (must be positive)"));
        }
        if !(self.rms_norm_eps > 0.0 && self.rms_norm_eps.is_finite()) {
            return unsupported(
                "rms_norm_eps",
                format!("{} (must be positive)", self.rms_norm_eps),
            );
        }
        for (field, n) in [
            ("vocab_size", self.vocab_size),
            ("hidden_size", self.hidden_size),
            ("intermediate_size", self.intermediate_size),
            ("num_hidden_layers", self.num_hidden_layers),
        ] {
            if n == 0 {
                return unsupported(field, "0".into());
            }
        }
        if self.use_sliding_window {
            return unsupported(
                "use_sliding_window",
                "true (sliding-window attention is not implemented; set it to false to run \
                 with full attention)"
                    .into(),
            );
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
