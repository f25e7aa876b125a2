//! Loading a Hugging Face checkpoint folder: `config.json`, weights (`model.safetensors`,
//! sharded `model-XXXXX-of-YYYYY.safetensors` with `model.safetensors.index.json`, or PyTorch
//! `pytorch_model*.bin`, sharded with `pytorch_model.bin.index.json`), `tokenizer.json`
//! (optional) and `generation_config.json` (optional).

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};

use candle_core::pickle::PthTensors;
use candle_core::{DType, Device, Shape, Tensor};
use candle_nn::var_builder::SimpleBackend;
use candle_nn::VarBuilder;
use serde::Deserialize;
use tokenizers::Tokenizer;

use crate::config::{GenerationConfig, LlamaConfig};
use crate::error::{Error, Result};
use crate::llama::{Architecture, Llama};

/// How the weights of a checkpoint are stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WeightFormat {
    /// One or more safetensors files.
    Safetensors(Vec<PathBuf>),
    /// One or more PyTorch pickles (`torch.save` zip format).
    Pytorch(Vec<PathBuf>),
}

/// A checkpoint folder, opened: configs parsed, weight files located, tokenizer loaded when
/// present. Weights are read by [`Checkpoint::load_model`].
#[derive(Debug, Clone)]
pub struct Checkpoint {
    dir: PathBuf,
    config: LlamaConfig,
    generation: GenerationConfig,
    tokenizer: Option<Tokenizer>,
    weights: WeightFormat,
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
        let t = self.load(name, dtype, dev)?;
        if t.shape() != &s {
            return Err(candle_core::Error::UnexpectedShape {
                msg: format!("shape mismatch for {name}"),
                expected: s,
                got: t.shape().clone(),
            });
        }
        Ok(t)
    }

    fn get_unchecked(&self, name: &str, dtype: DType, dev: &Device) -> candle_core::Result<Tensor> {
        self.load(name, dtype, dev)
    }

    fn contains_tensor(&self, name: &str) -> bool {
        self.routing.contains_key(name)
    }
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
    /// Opens a checkpoint folder: parses config.json (checking `architectures`),
    /// generation_config.json and tokenizer.json when present, and locates the weights.
    pub fn open(dir: impl AsRef<Path>) -> Result<Self> {
        let dir = dir.as_ref().to_path_buf();
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
        Ok(Self {
            dir,
            config,
            generation,
            tokenizer,
            weights,
        })
    }

    /// The folder.
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

    /// Beginning-of-sequence id.
    pub fn bos_token_id(&self) -> Option<u32> {
        self.generation.bos_token_id.or(self.config.bos_token_id)
    }

    /// A `VarBuilder` over the weight files, converting to `dtype` on `device`.
    pub fn var_builder(&self, dtype: DType, device: &Device) -> Result<VarBuilder<'static>> {
        Ok(match &self.weights {
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

    /// Loads the model on `device` in `dtype` (default: [`default_dtype`]).
    pub fn load_model(&self, device: &Device, dtype: Option<DType>) -> Result<Llama> {
        let dtype = dtype.unwrap_or_else(|| default_dtype(device));
        Llama::load(self.var_builder(dtype, device)?, &self.config)
    }
}
