//! GGUF checkpoints (llama.cpp's single-file format): the model config from the metadata, the
//! tokenizer and chat template it carries, and the weights, quantized or dequantized.
//!
//! Architectures `llama` and `qwen2` become the same [`LlamaConfig`] a Hugging Face folder
//! gives, and tensors are looked up by their Hugging Face names (see [`weights`]), so one
//! model implementation serves both formats.

mod tokenizer;
mod weights;

use std::collections::HashMap;
use std::fs::File;
use std::io::BufReader;
use std::path::{Path, PathBuf};

use candle_core::quantized::gguf_file::{Content, Value};
use candle_core::quantized::GgmlDType;

use crate::config::{LlamaConfig, RopeScalingConfig, TokenIds};
use crate::error::{Error, Result};

pub use tokenizer::{build_tokenizer, keys, GgufVocab};
pub(crate) use weights::{GgufWeights, SharedGgufWeights};

/// The architectures read from `general.architecture`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GgufArch {
    /// `llama` (also Llama 3, SmolLM, Mistral-style files without sliding windows).
    Llama,
    /// `qwen2`: Llama with biases on the Q, K and V projections.
    Qwen2,
}

impl GgufArch {
    fn key(self) -> &'static str {
        match self {
            GgufArch::Llama => "llama",
            GgufArch::Qwen2 => "qwen2",
        }
    }
}

/// An opened GGUF file: metadata and tensor directory parsed, nothing else read.
#[derive(Debug)]
pub struct GgufFile {
    path: PathBuf,
    content: Content,
    arch: GgufArch,
}

impl GgufFile {
    /// Reads the header, metadata and tensor directory of `path`; refuses files that are not
    /// GGUF, are truncated, or hold an architecture other than `llama`/`qwen2`.
    pub fn open(path: &Path) -> Result<Self> {
        let file = File::open(path).map_err(|cause| Error::Io {
            path: path.to_path_buf(),
            cause,
        })?;
        let mut reader = BufReader::new(file);
        // candle's reader bounds every length by the file size; a panic on a hostile file
        // would still be a bug of ours to report, not a crash.
        let content =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| Content::read(&mut reader)))
                .map_err(|_| gguf_err(path, "header", "the GGUF reader panicked on this file"))?
                .map_err(|e| gguf_err(path, "header", format!("not a readable GGUF file: {e}")))?;
        let arch_name = match content.metadata.get("general.architecture") {
            Some(Value::String(s)) => s.clone(),
            Some(other) => {
                return Err(gguf_err(
                    path,
                    "general.architecture",
                    format!("expected a string, found {other:?}"),
                ))
            }
            None => return Err(gguf_err(path, "general.architecture", "missing")),
        };
        let arch = match arch_name.as_str() {
            "llama" => GgufArch::Llama,
            "qwen2" => GgufArch::Qwen2,
            other => {
                return Err(gguf_err(
                    path,
                    "general.architecture",
                    format!("{other:?} is not supported (supported: llama, qwen2)"),
                ))
            }
        };
        let me = Self {
            path: path.to_path_buf(),
            content,
            arch,
        };
        me.check_tensor_types()?;
        Ok(me)
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The architecture.
    pub fn arch(&self) -> GgufArch {
        self.arch
    }

    /// Every metadata key with its value.
    pub fn metadata(&self) -> &HashMap<String, Value> {
        &self.content.metadata
    }

    /// Number of stored elements and bytes per quantization type, largest first.
    pub fn tensor_types(&self) -> Vec<(GgmlDType, usize, usize)> {
        let mut by: HashMap<String, (GgmlDType, usize, usize)> = HashMap::new();
        for info in self.content.tensor_infos.values() {
            let n = info.shape.elem_count();
            let bytes = n / info.ggml_dtype.block_size() * info.ggml_dtype.type_size();
            let e = by
                .entry(format!("{:?}", info.ggml_dtype))
                .or_insert((info.ggml_dtype, 0, 0));
            e.1 += n;
            e.2 += bytes;
        }
        let mut v: Vec<_> = by.into_values().collect();
        v.sort_by_key(|e| std::cmp::Reverse(e.2));
        v
    }

    /// Number of tensors.
    pub fn tensor_count(&self) -> usize {
        self.content.tensor_infos.len()
    }

    /// Total number of weights stored.
    pub fn parameter_count(&self) -> usize {
        self.content
            .tensor_infos
            .values()
            .map(|i| i.shape.elem_count())
            .sum()
    }

    fn check_tensor_types(&self) -> Result<()> {
        for (name, info) in &self.content.tensor_infos {
            let n = info.shape.elem_count();
            if !n.is_multiple_of(info.ggml_dtype.block_size()) {
                return Err(gguf_err(
                    &self.path,
                    name,
                    format!(
                        "{} elements are not a whole number of {:?} blocks",
                        n, info.ggml_dtype
                    ),
                ));
            }
        }
        Ok(())
    }

    fn get(&self, key: &str) -> Option<&Value> {
        self.content.metadata.get(key)
    }

    fn arch_key(&self, suffix: &str) -> String {
        format!("{}.{suffix}", self.arch.key())
    }

    /// An unsigned integer (any integer type) at `key`.
    fn uint(&self, key: &str) -> Result<Option<u64>> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => value_u64(v).map(Some).ok_or_else(|| {
                gguf_err(&self.path, key, format!("expected an integer, found {v:?}"))
            }),
        }
    }

    fn required_uint(&self, key: &str) -> Result<usize> {
        self.uint(key)?
            .map(|v| v as usize)
            .ok_or_else(|| gguf_err(&self.path, key, "missing"))
    }

    fn float(&self, key: &str) -> Result<Option<f64>> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::F32(v)) => Ok(Some(*v as f64)),
            Some(Value::F64(v)) => Ok(Some(*v)),
            Some(v) => value_u64(v).map(|u| Some(u as f64)).ok_or_else(|| {
                gguf_err(&self.path, key, format!("expected a number, found {v:?}"))
            }),
        }
    }

    fn string(&self, key: &str) -> Result<Option<&str>> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(v) => Err(gguf_err(
                &self.path,
                key,
                format!("expected a string, found {v:?}"),
            )),
        }
    }

    fn bool(&self, key: &str) -> Result<Option<bool>> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(*b)),
            Some(v) => Err(gguf_err(
                &self.path,
                key,
                format!("expected a bool, found {v:?}"),
            )),
        }
    }

    /// The array at `key`, each element converted by `item` (`None`: not `what`).
    fn array<T>(
        &self,
        key: &str,
        what: &str,
        item: impl Fn(&Value) -> Option<T>,
    ) -> Result<Option<Vec<T>>> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::Array(a)) => a
                .iter()
                .map(|v| {
                    item(v).ok_or_else(|| {
                        gguf_err(&self.path, key, format!("expected {what}, found {v:?}"))
                    })
                })
                .collect::<Result<Vec<_>>>()
                .map(Some),
            Some(v) => Err(gguf_err(
                &self.path,
                key,
                format!("expected an array, found {v:?}"),
            )),
        }
    }

    fn token_id(&self, key: &str) -> Result<Option<u32>> {
        Ok(self.uint(key)?.map(|v| v as u32))
    }

    /// The tensor's shape (rows first, as candle reports it), if present.
    pub(crate) fn tensor_shape(&self, name: &str) -> Option<Vec<usize>> {
        self.content
            .tensor_infos
            .get(name)
            .map(|i| i.shape.dims().to_vec())
    }

    /// The model config the metadata describes, shaped as a Hugging Face config.json.
    pub fn config(&self) -> Result<LlamaConfig> {
        let k = |s: &str| self.arch_key(s);
        let hidden = self.required_uint(&k("embedding_length"))?;
        let heads = self.required_uint(&k("attention.head_count"))?;
        let kv_heads = self
            .uint(&k("attention.head_count_kv"))?
            .map_or(heads, |v| v as usize);
        let head_dim = self.uint(&k("attention.key_length"))?.map(|v| v as usize);
        let head_size = head_dim.unwrap_or(hidden / heads.max(1));
        if let Some(rot) = self.uint(&k("rope.dimension_count"))? {
            if rot as usize != head_size {
                return Err(gguf_err(
                    &self.path,
                    &k("rope.dimension_count"),
                    format!("{rot}: partial rotary embeddings (head size {head_size}) are not supported"),
                ));
            }
        }
        let vocab = match self.uint(&k("vocab_size"))? {
            Some(v) => v as usize,
            None => match self.get("tokenizer.ggml.tokens") {
                Some(Value::Array(a)) => a.len(),
                _ => self
                    .tensor_shape("token_embd.weight")
                    .and_then(|s| s.first().copied())
                    .ok_or_else(|| gguf_err(&self.path, &k("vocab_size"), "missing"))?,
            },
        };
        let rope_scaling = match self.string(&k("rope.scaling.type"))? {
            None | Some("none") => None,
            Some("linear") => Some(RopeScalingConfig {
                rope_type: Some("linear".into()),
                factor: self.float(&k("rope.scaling.factor"))?,
                ..RopeScalingConfig::default()
            }),
            Some(other) => {
                return Err(gguf_err(
                    &self.path,
                    &k("rope.scaling.type"),
                    format!("{other:?} is not supported (supported: none, linear)"),
                ))
            }
        };
        let tied = self.tensor_shape("output.weight").is_none();
        let eos = self.token_id("tokenizer.ggml.eos_token_id")?;
        let cfg = LlamaConfig {
            architectures: vec![match self.arch {
                GgufArch::Llama => "LlamaForCausalLM".into(),
                GgufArch::Qwen2 => "Qwen2ForCausalLM".into(),
            }],
            vocab_size: vocab,
            hidden_size: hidden,
            intermediate_size: self.required_uint(&k("feed_forward_length"))?,
            num_hidden_layers: self.required_uint(&k("block_count"))?,
            num_attention_heads: heads,
            num_key_value_heads: Some(kv_heads),
            head_dim,
            rms_norm_eps: self
                .float(&k("attention.layer_norm_rms_epsilon"))?
                .unwrap_or(1e-5),
            rope_theta: Some(self.float(&k("rope.freq_base"))?.unwrap_or(10_000.0)),
            rope_scaling,
            rope_parameters: None,
            use_sliding_window: false,
            max_position_embeddings: self
                .uint(&k("context_length"))?
                .map_or(2048, |v| v as usize),
            tie_word_embeddings: tied,
            attention_bias: false,
            mlp_bias: false,
            hidden_act: "silu".into(),
            bos_token_id: self.token_id("tokenizer.ggml.bos_token_id")?,
            eos_token_id: eos.map(TokenIds::One),
            pad_token_id: self.token_id("tokenizer.ggml.padding_token_id")?,
            do_cross_attention: false,
            num_cross_attn_layers: 0,
            encoder_hidden_size: None,
            encoder_config: None,
            capstan_attention: None,
            torch_dtype: None,
        };
        cfg.validate()
            .map_err(|e| gguf_err(&self.path, "metadata", e.to_string()))?;
        if let Some(shape) = self.tensor_shape("token_embd.weight") {
            if shape != [vocab, hidden] {
                return Err(gguf_err(
                    &self.path,
                    "token_embd.weight",
                    format!("shape {shape:?}, expected [{vocab}, {hidden}] from the metadata"),
                ));
            }
        }
        Ok(cfg)
    }

    /// The tokenizer metadata (`tokenizer.ggml.*`).
    pub fn vocab(&self) -> Result<GgufVocab> {
        let strings = |key: &str| {
            self.array(key, "strings", |v| match v {
                Value::String(s) => Some(s.clone()),
                _ => None,
            })
        };
        let numbers = |key: &str| {
            self.array(key, "numbers", |v| match v {
                Value::F32(f) => Some(*f as f64),
                Value::F64(f) => Some(*f),
                Value::I32(i) => Some(*i as f64),
                other => value_u64(other).map(|u| u as f64),
            })
        };
        Ok(GgufVocab {
            model: self
                .string("tokenizer.ggml.model")?
                .ok_or_else(|| {
                    gguf_err(
                        &self.path,
                        "tokenizer.ggml.model",
                        "missing: the file carries no tokenizer",
                    )
                })?
                .to_string(),
            pre: self.string(keys::PRE)?.map(str::to_string),
            tokens: strings("tokenizer.ggml.tokens")?
                .ok_or_else(|| gguf_err(&self.path, "tokenizer.ggml.tokens", "missing"))?,
            scores: numbers("tokenizer.ggml.scores")?
                .map(|v| v.into_iter().map(|f| f as f32).collect()),
            token_types: numbers("tokenizer.ggml.token_type")?
                .map(|v| v.into_iter().map(|f| f as i32).collect()),
            merges: strings("tokenizer.ggml.merges")?,
            bos: self.token_id("tokenizer.ggml.bos_token_id")?,
            eos: self.token_id("tokenizer.ggml.eos_token_id")?,
            unk: self.token_id("tokenizer.ggml.unknown_token_id")?,
            pad: self.token_id("tokenizer.ggml.padding_token_id")?,
            add_bos: self.bool("tokenizer.ggml.add_bos_token")?,
            add_eos: self.bool("tokenizer.ggml.add_eos_token")?,
        })
    }

    /// The tokenizer the metadata describes.
    pub fn tokenizer(&self) -> Result<tokenizers::Tokenizer> {
        self.tokenizer_of(&self.vocab()?)
    }

    /// The tokenizer of `vocab` (this file's [`GgufFile::vocab`]), errors naming the file.
    pub(crate) fn tokenizer_of(&self, vocab: &GgufVocab) -> Result<tokenizers::Tokenizer> {
        build_tokenizer(vocab).map_err(|e| Error::Tokenizer {
            reason: format!("{}: {e}", self.path.display()),
        })
    }

    /// `tokenizer.chat_template`, when the file has one.
    pub fn chat_template(&self) -> Result<Option<String>> {
        Ok(self.string("tokenizer.chat_template")?.map(str::to_string))
    }

    pub(crate) fn content(&self) -> &Content {
        &self.content
    }
}

fn value_u64(v: &Value) -> Option<u64> {
    match *v {
        Value::U8(x) => Some(x as u64),
        Value::U16(x) => Some(x as u64),
        Value::U32(x) => Some(x as u64),
        Value::U64(x) => Some(x),
        Value::I8(x) => u64::try_from(x).ok(),
        Value::I16(x) => u64::try_from(x).ok(),
        Value::I32(x) => u64::try_from(x).ok(),
        Value::I64(x) => u64::try_from(x).ok(),
        _ => None,
    }
}

pub(crate) fn gguf_err(path: &Path, key: &str, reason: impl Into<String>) -> Error {
    Error::Gguf {
        path: path.to_path_buf(),
        key: key.to_string(),
        reason: reason.into(),
    }
}

/// The `.gguf` file `path` names: the file itself, or the only `.gguf` in a folder.
pub fn find_gguf(path: &Path) -> Result<Option<PathBuf>> {
    if path.is_file() {
        return Ok(path
            .extension()
            .is_some_and(|e| e.eq_ignore_ascii_case("gguf"))
            .then(|| path.to_path_buf()));
    }
    if !path.is_dir() || path.join("config.json").is_file() {
        return Ok(None);
    }
    let entries = std::fs::read_dir(path).map_err(|cause| Error::Io {
        path: path.to_path_buf(),
        cause,
    })?;
    let mut found: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.extension()
                .is_some_and(|e| e.eq_ignore_ascii_case("gguf"))
        })
        .collect();
    found.sort();
    match found.len() {
        0 => Ok(None),
        1 => Ok(found.pop()),
        _ => Err(Error::invalid(format!(
            "{} holds {} .gguf files ({}); name one",
            path.display(),
            found.len(),
            found
                .iter()
                .filter_map(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
                .collect::<Vec<_>>()
                .join(", ")
        ))),
    }
}

/// `reader` must be usable by [`GgufWeights`]: re-exported for the weights module.
pub(crate) fn open_reader(path: &Path) -> Result<File> {
    File::open(path).map_err(|cause| Error::Io {
        path: path.to_path_buf(),
        cause,
    })
}
