//! The dense encoder: a BERT checkpoint (Contriever family, e.g.
//! sentence-transformers/all-MiniLM-L6-v2) run in candle, with the pooling and
//! normalisation that sentence-transformers' `modules.json` and
//! `1_Pooling/config.json` ask for.
//!
//! Reference: sentence-transformers' `Transformer` -> `Pooling` -> `Normalize`
//! modules. On the CPU the BERT is Capstan's own (`bert/`: packed sequences,
//! no padding, fused kernels); on other devices candle-transformers'
//! `BertModel`. Both mirror HF transformers' `BertModel`.

use std::path::{Path, PathBuf};

use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use candle_transformers::models::bert::Config as CandleBertConfig;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use tokenizers::{Tokenizer, TruncationParams};

use crate::bert::{BertModel, Config as BertConfig};
use crate::error::{Error, Result};
use crate::int8_cache::CacheFile;
use crate::padded_bert::PaddedBert;

/// How token states become one vector (sentence-transformers' pooling modes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Pooling {
    /// Mean over the real (unmasked) tokens: Contriever, all-MiniLM.
    Mean,
    /// The `[CLS]` token's state.
    Cls,
    /// Element-wise maximum over real tokens.
    Max,
}

/// What identifies an encoder; recorded in an index's manifest so that an
/// index is never searched with vectors of another model.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EncoderInfo {
    /// The folder it was loaded from.
    pub path: String,
    /// SHA-256 of its `config.json`.
    pub config_sha256: String,
    /// Vector dimension.
    pub dimension: usize,
    /// Pooling mode.
    pub pooling: Pooling,
    /// Whether vectors are L2-normalised.
    pub normalize: bool,
    /// Inputs are truncated to this many tokens (special tokens included).
    pub max_tokens: usize,
    /// The numbers the vectors were computed with (f32 in manifests written
    /// before precisions were recorded).
    #[serde(default)]
    pub precision: EncoderPrecision,
}

/// A loaded dense encoder. Immutable; share it behind an `Arc`.
pub struct Encoder {
    model: Model,
    /// Whether the int8 model was read from the encoder cache ([`crate::int8_cache`]).
    int8_cached: bool,
    tokenizer: Tokenizer,
    pad_id: u32,
    info: EncoderInfo,
    device: Device,
}

/// The BERT behind an encoder.
enum Model {
    /// Capstan's CPU BERT over packed (unpadded) sequences.
    Cpu(BertModel),
    /// The padded BERT ([`PaddedBert`]): GPUs, f16/bf16 weights.
    Candle(PaddedBert),
}

/// The numbers an encoder computes with.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EncoderPrecision {
    /// 32-bit floats: the parity mode (Capstan's packed BERT on the CPU).
    #[default]
    F32,
    /// float16 weights and activations (candle's padded BERT: a GPU's choice).
    F16,
    /// bfloat16 weights and activations (candle's padded BERT).
    Bf16,
    /// int8 weights per output channel and int8 activations per token in
    /// every linear layer, f32 elsewhere (the CPU's packed BERT only).
    Int8,
}

impl EncoderPrecision {
    /// The precision questions are embedded at, by default, for an index
    /// built at this one: int8 where it was int8 and the CPU embeds them,
    /// else f32 (f16 and bf16 vectors are within their precision of f32's).
    pub fn for_questions(self, device: &Device) -> Self {
        match self {
            Self::Int8 if device.is_cpu() => Self::Int8,
            _ => Self::F32,
        }
    }

    /// The dtype of the weights as loaded from the checkpoint.
    fn load_dtype(self) -> DType {
        match self {
            Self::F16 => DType::F16,
            Self::Bf16 => DType::BF16,
            Self::F32 | Self::Int8 => DType::F32,
        }
    }
}

impl std::fmt::Display for EncoderPrecision {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::F32 => "f32",
            Self::F16 => "f16",
            Self::Bf16 => "bf16",
            Self::Int8 => "int8",
        })
    }
}

/// The int8 BERT of the checkpoint whose weights are `weights`: read back from the encoder
/// cache where it holds this checkpoint's, else loaded (`load_f32`), calibrated, quantized and
/// written to the cache. The flag says whether it came from the cache.
fn int8_model(
    weights: &Path,
    config: &BertConfig,
    config_sha256: &str,
    tokenizer: &Tokenizer,
    load_f32: impl FnOnce() -> Result<BertModel>,
) -> Result<(BertModel, bool)> {
    let cache = CacheFile::for_checkpoint(weights, config_sha256, CALIBRATION_TEXT);
    let cached = cache
        .as_ref()
        .and_then(CacheFile::read)
        .and_then(|payload| BertModel::read_int8(payload.bytes(), config).ok());
    if let Some(model) = cached {
        return Ok((model, true));
    }
    let mut model = load_f32()?;
    let calibration = tokenizer
        .encode_batch(CALIBRATION_TEXT.to_vec(), true)
        .map_err(|e| candle_core::Error::Msg(format!("tokenizing the calibration text: {e}")))?;
    let ids: Vec<&[u32]> = calibration.iter().map(|e| e.get_ids()).collect();
    model.quantize_int8(&ids)?;
    if let (Some(cache), Some(bytes)) = (&cache, model.write_int8()) {
        cache.write(&bytes);
    }
    Ok((model, false))
}

/// How an encoder runs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EncoderOptions {
    /// The numbers it computes with.
    pub precision: EncoderPrecision,
    /// Run candle-transformers' padded BERT even on the CPU (what a GPU runs:
    /// it lets the GPU path be checked against the CPU's packed one here).
    pub padded: bool,
}

/// What an int8 encoder is calibrated on (the range of each input channel of
/// each linear layer, [`BertModel::quantize_int8`]): fixed, so that every
/// int8 encoder of a checkpoint, at indexing and at question time, is the
/// same; varied (questions, prose, lists, code, numbers, a word alone),
/// because the channels that run large are the model's, not the text's.
const CALIBRATION_TEXT: &[&str] = &[
    "Hello",
    "Who founded the city, and in what year was it granted its charter?",
    "The river rises in the northern hills and flows south for 212 kilometres before it reaches the sea near the old harbour town.",
    "To install the package, run `cargo install capstan` and then set CAPSTAN_HOME=/srv/capstan; see --help for every option.",
    "She was born in 1843 in a small village, trained as a glassblower, and later ran a workshop employing forty people.",
    "Returns the number of bytes written, or -1 on error, in which case errno is set to EINVAL or ENOMEM.",
    "Prices rose 3.2% in March; the central bank held rates at 4.5% and said inflation would ease by the end of the year.",
    "what is the boiling point of water at high altitude",
    "Photosynthesis converts light energy into chemical energy: carbon dioxide and water become glucose and oxygen in the chloroplasts.",
    "fn main() { let v: Vec<u32> = (0..10).map(|x| x * x).collect(); println!(\"{v:?}\"); }",
    "The committee met on 14 June 2019. Members present: A. Rossi (chair), J. Okafor, M. Lindqvist. Minutes were approved without changes.",
    "Symptoms include fever, a dry cough and fatigue; most patients recover within two weeks without treatment.",
];

/// Padded positions (sequences × longest) in one forward of the padded BERT;
/// sequences are sorted by length first, so padding stays small.
const PADDED_BATCH_TOKENS: usize = 16_384;

/// Tokens packed into one CPU forward pass (sequences are not padded).
const CPU_BATCH_TOKENS: usize = 1536;

#[derive(Deserialize)]
struct ModuleEntry {
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    path: String,
}

#[derive(Deserialize)]
struct PoolingConfig {
    #[serde(default)]
    pooling_mode_cls_token: bool,
    #[serde(default)]
    pooling_mode_mean_tokens: bool,
    #[serde(default)]
    pooling_mode_max_tokens: bool,
}

#[derive(Deserialize)]
struct SentenceBertConfig {
    max_seq_length: Option<usize>,
}

impl Encoder {
    /// Loads an encoder from a Hugging Face folder on the CPU.
    pub fn load(dir: &Path) -> Result<Self> {
        Self::load_on(dir, &Device::Cpu)
    }

    /// Loads an encoder from a Hugging Face folder (`config.json`,
    /// `tokenizer.json`, `model.safetensors` or `pytorch_model.bin`, and when
    /// present sentence-transformers' `modules.json`, `1_Pooling/config.json`,
    /// `sentence_bert_config.json`) onto `device`.
    pub fn load_on(dir: &Path, device: &Device) -> Result<Self> {
        Self::load_with(dir, device, EncoderOptions::default())
    }

    /// [`Encoder::load_on`] with a dtype and backend: the CPU's packed BERT
    /// for f32 on the CPU, candle-transformers' padded BERT otherwise.
    pub fn load_with(dir: &Path, device: &Device, options: EncoderOptions) -> Result<Self> {
        let err = |message: String| Error::Load {
            path: dir.to_path_buf(),
            message,
        };
        if !dir.is_dir() {
            return Err(err(
                "no such folder (run scripts/setup.sh to download the default encoder, or pass --encoder DIR)".into(),
            ));
        }
        let config_path = dir.join("config.json");
        let config_bytes =
            std::fs::read(&config_path).map_err(|e| err(format!("config.json: {e}")))?;
        let config: BertConfig = serde_json::from_slice(&config_bytes)
            .map_err(|e| err(format!("config.json is not a BERT config: {e}")))?;
        let config_sha256 = format!("{:x}", Sha256::digest(&config_bytes));

        let (pooling, normalize) = read_pooling(dir).map_err(err)?;
        let max_tokens = read_json::<SentenceBertConfig>(&dir.join("sentence_bert_config.json"))
            .map_err(err)?
            .and_then(|c| c.max_seq_length)
            .unwrap_or(512)
            .min(config.max_position_embeddings);

        let mut tokenizer = Tokenizer::from_file(dir.join("tokenizer.json"))
            .map_err(|e| err(format!("tokenizer.json: {e}")))?;
        // The checkpoint's tokenizer.json pads to 128 and truncates at 128;
        // sentence-transformers pads to the longest input and truncates at
        // max_seq_length. We pad ourselves, per length-sorted batch.
        tokenizer.with_padding(None);
        tokenizer
            .with_truncation(Some(TruncationParams {
                max_length: max_tokens,
                ..Default::default()
            }))
            .map_err(|e| err(format!("tokenizer.json: {e}")))?;

        let precision = options.precision;
        let packed = device.is_cpu()
            && matches!(precision, EncoderPrecision::F32 | EncoderPrecision::Int8)
            && !options.padded;
        if precision == EncoderPrecision::Int8 && !packed {
            return Err(err(
                "int8 runs on the CPU's own BERT only (not on a GPU, not --padded)".into(),
            ));
        }
        let dtype = precision.load_dtype();
        let safetensors = dir.join("model.safetensors");
        let pth = dir.join("pytorch_model.bin");
        let open_weights = || {
            if safetensors.is_file() {
                // SAFETY: the file is memory-mapped read-only; Capstan never writes model files.
                unsafe { VarBuilder::from_mmaped_safetensors(&[&safetensors], dtype, device) }
                    .map_err(|e| err(format!("model.safetensors: {e}")))
            } else if pth.is_file() {
                VarBuilder::from_pth(&pth, dtype, device)
                    .map_err(|e| err(format!("pytorch_model.bin: {e}")))
            } else {
                Err(err(
                    "neither model.safetensors nor pytorch_model.bin is present".into(),
                ))
            }
        };
        let mut int8_cached = false;
        let model = if packed && precision == EncoderPrecision::Int8 {
            let weights = if safetensors.is_file() {
                &safetensors
            } else {
                &pth
            };
            let (model, cached) = int8_model(weights, &config, &config_sha256, &tokenizer, || {
                BertModel::load(open_weights()?, &config).map_err(|e| err(format!("weights: {e}")))
            })
            .map_err(|e| match e {
                Error::Candle(e) => err(format!("calibrating int8: {e}")),
                e => e,
            })?;
            int8_cached = cached;
            Model::Cpu(model)
        } else if packed {
            Model::Cpu(
                BertModel::load(open_weights()?, &config)
                    .map_err(|e| err(format!("weights: {e}")))?,
            )
        } else {
            let config: CandleBertConfig = serde_json::from_slice(&config_bytes)
                .map_err(|e| err(format!("config.json is not a BERT config: {e}")))?;
            Model::Candle(
                PaddedBert::load(open_weights()?, &config)
                    .map_err(|e| err(format!("weights: {e}")))?,
            )
        };
        Ok(Self {
            model,
            int8_cached,
            tokenizer,
            pad_id: config.pad_token_id as u32,
            info: EncoderInfo {
                path: dir.display().to_string(),
                config_sha256,
                dimension: config.hidden_size,
                pooling,
                normalize,
                max_tokens,
                precision,
            },
            device: device.clone(),
        })
    }

    /// What identifies this encoder.
    pub fn info(&self) -> &EncoderInfo {
        &self.info
    }

    /// Whether this int8 encoder was read back from `$CAPSTAN_HOME/encoder-cache` rather than
    /// quantized afresh (the same arrays either way).
    pub fn int8_from_cache(&self) -> bool {
        self.int8_cached
    }

    /// Vector dimension.
    pub fn dimension(&self) -> usize {
        self.info.dimension
    }

    /// The tokenizer (truncating at [`EncoderInfo::max_tokens`]).
    pub fn tokenizer(&self) -> &Tokenizer {
        &self.tokenizer
    }

    /// Embeds texts, in input order. Inputs are sorted by length and encoded
    /// in batches padded to their longest member.
    pub fn embed<S: AsRef<str> + Sync>(&self, texts: &[S]) -> Result<Vec<Vec<f32>>> {
        let inputs: Vec<&str> = texts.iter().map(|t| t.as_ref()).collect();
        let encodings = self
            .tokenizer
            .encode_batch(inputs, true)
            .map_err(|e| Error::Load {
                path: PathBuf::from(&self.info.path),
                message: format!("tokenizing: {e}"),
            })?;
        let mut order: Vec<usize> = (0..encodings.len()).collect();
        order.sort_by_key(|&i| encodings[i].get_ids().len());
        let mut out = vec![Vec::new(); encodings.len()];
        let mut start = 0;
        while start < order.len() {
            let end = match self.model {
                Model::Cpu(_) => {
                    let mut end = start + 1;
                    let mut tokens = encodings[order[start]].get_ids().len();
                    while end < order.len() {
                        tokens += encodings[order[end]].get_ids().len();
                        if tokens > CPU_BATCH_TOKENS {
                            break;
                        }
                        end += 1;
                    }
                    end
                }
                Model::Candle(_) => {
                    // Sorted by length: the last of the batch is its longest.
                    let mut end = start + 1;
                    while end < order.len()
                        && (end + 1 - start) * encodings[order[end]].get_ids().len()
                            <= PADDED_BATCH_TOKENS
                    {
                        end += 1;
                    }
                    end
                }
            };
            let batch = &order[start..end];
            let ids: Vec<&[u32]> = batch.iter().map(|&i| encodings[i].get_ids()).collect();
            let vectors = match &self.model {
                Model::Cpu(model) => self.embed_packed(model, &ids)?,
                Model::Candle(model) => self.embed_padded(model, &ids)?,
            };
            for (&i, v) in batch.iter().zip(vectors) {
                out[i] = v;
            }
            start = end;
        }
        Ok(out)
    }

    /// Embeds one batch of token id sequences (already truncated) with the
    /// CPU BERT, packed without padding.
    fn embed_packed(&self, model: &BertModel, ids: &[&[u32]]) -> Result<Vec<Vec<f32>>> {
        let states = model.forward(ids)?;
        let h = self.info.dimension;
        let mut rows = states.chunks_exact(h);
        let mut out = Vec::with_capacity(ids.len());
        for seq in ids {
            let seq_rows: Vec<&[f32]> = rows.by_ref().take(seq.len()).collect();
            let mut pooled = match self.info.pooling {
                Pooling::Mean => {
                    let mut sum = vec![0f32; h];
                    for row in &seq_rows {
                        sum.iter_mut().zip(*row).for_each(|(s, v)| *s += v);
                    }
                    let count = (seq_rows.len() as f32).max(1e-9);
                    sum.iter_mut().for_each(|s| *s /= count);
                    sum
                }
                Pooling::Cls => seq_rows
                    .first()
                    .map(|r| r.to_vec())
                    .unwrap_or_else(|| vec![0f32; h]),
                Pooling::Max => {
                    let mut max = vec![f32::NEG_INFINITY; h];
                    for row in &seq_rows {
                        max.iter_mut().zip(*row).for_each(|(m, v)| *m = m.max(*v));
                    }
                    max
                }
            };
            if self.info.normalize {
                let norm = pooled.iter().map(|v| v * v).sum::<f32>().sqrt().max(1e-12);
                pooled.iter_mut().for_each(|v| *v /= norm);
            }
            out.push(pooled);
        }
        Ok(out)
    }

    /// Embeds one batch of token id sequences (already truncated) with
    /// candle-transformers' BERT, padded to the longest.
    fn embed_padded(&self, model: &PaddedBert, ids: &[&[u32]]) -> Result<Vec<Vec<f32>>> {
        let n = ids.len();
        let len = ids.iter().map(|s| s.len()).max().unwrap_or(0).max(1);
        let mut flat_ids = Vec::with_capacity(n * len);
        let mut flat_mask = Vec::with_capacity(n * len);
        for seq in ids {
            flat_ids.extend_from_slice(seq);
            flat_ids.extend(std::iter::repeat_n(self.pad_id, len - seq.len()));
            flat_mask.extend(std::iter::repeat_n(1u32, seq.len()));
            flat_mask.extend(std::iter::repeat_n(0u32, len - seq.len()));
        }
        let input_ids = Tensor::from_vec(flat_ids, (n, len), &self.device)?;
        let mask = Tensor::from_vec(flat_mask, (n, len), &self.device)?;
        // Pooled in f32 whatever the model's dtype: a mean over 256 f16 states loses digits.
        let states = model.forward(&input_ids, &mask)?.to_dtype(DType::F32)?;
        let mask_f = mask.to_dtype(DType::F32)?.unsqueeze(2)?;
        let pooled = match self.info.pooling {
            Pooling::Mean => {
                let summed = states.broadcast_mul(&mask_f)?.sum(1)?;
                let counts = mask_f.sum(1)?.clamp(1e-9, f64::MAX)?;
                summed.broadcast_div(&counts)?
            }
            Pooling::Cls => states.narrow(1, 0, 1)?.squeeze(1)?,
            Pooling::Max => {
                // Padding gets -1e9 so it never wins the maximum.
                let penalty = ((mask_f.ones_like()? - &mask_f)? * -1e9)?;
                states.broadcast_add(&penalty)?.max(1)?
            }
        };
        let pooled = if self.info.normalize {
            let norm = pooled
                .sqr()?
                .sum_keepdim(1)?
                .sqrt()?
                .clamp(1e-12, f64::MAX)?;
            pooled.broadcast_div(&norm)?
        } else {
            pooled
        };
        Ok(pooled.to_vec2::<f32>()?)
    }
}

fn read_json<T: serde::de::DeserializeOwned>(
    path: &Path,
) -> std::result::Result<Option<T>, String> {
    match std::fs::read(path) {
        Ok(bytes) => serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|e| format!("{}: {e}", path.display())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(format!("{}: {e}", path.display())),
    }
}

/// Pooling mode and normalisation from sentence-transformers' files; a plain
/// HF folder (Contriever) means mean pooling without normalisation.
fn read_pooling(dir: &Path) -> std::result::Result<(Pooling, bool), String> {
    let Some(modules) = read_json::<Vec<ModuleEntry>>(&dir.join("modules.json"))? else {
        return Ok((Pooling::Mean, false));
    };
    let normalize = modules.iter().any(|m| m.kind.ends_with(".Normalize"));
    let pooling_dir = modules
        .iter()
        .find(|m| m.kind.ends_with(".Pooling"))
        .map(|m| dir.join(&m.path));
    let pooling = match pooling_dir {
        None => Pooling::Mean,
        Some(p) => {
            let cfg_path = p.join("config.json");
            let cfg = read_json::<PoolingConfig>(&cfg_path)?
                .ok_or_else(|| format!("{} is missing", cfg_path.display()))?;
            match (
                cfg.pooling_mode_mean_tokens,
                cfg.pooling_mode_cls_token,
                cfg.pooling_mode_max_tokens,
            ) {
                (true, false, false) => Pooling::Mean,
                (false, true, false) => Pooling::Cls,
                (false, false, true) => Pooling::Max,
                _ => {
                    return Err(format!(
                        "{}: exactly one of mean, cls or max pooling is supported",
                        cfg_path.display()
                    ))
                }
            }
        }
    };
    Ok((pooling, normalize))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Not a check: writes the embeddings of the first `CAPSTAN_EMBED_N`
    /// passages of a `passages.jsonl` (`title + ". " + text`) as little-endian
    /// f32 rows, for bench/encode_vs_sentence_transformers.py to compare with
    /// sentence-transformers'.
    #[test]
    #[ignore = "run by bench/encode_vs_sentence_transformers.py"]
    fn dump_embeddings() {
        let var = |name: &str| std::env::var(name).unwrap_or_else(|_| panic!("{name} is not set"));
        let n: usize = var("CAPSTAN_EMBED_N").parse().unwrap();
        let texts: Vec<String> = std::fs::read_to_string(var("CAPSTAN_EMBED_IN"))
            .unwrap()
            .lines()
            .take(n)
            .map(|l| {
                let v: serde_json::Value = serde_json::from_str(l).unwrap();
                format!(
                    "{}. {}",
                    v["title"].as_str().unwrap(),
                    v["text"].as_str().unwrap()
                )
            })
            .collect();
        let encoder = Encoder::load(Path::new(&var("CAPSTAN_ENCODER"))).unwrap();
        let bytes: Vec<u8> = encoder
            .embed(&texts)
            .unwrap()
            .iter()
            .flatten()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        std::fs::write(var("CAPSTAN_EMBED_OUT"), bytes).unwrap();
    }
}
