//! Model shapes for the GPU benchmarks, with random weights made on the device: no checkpoint
//! of 7B parameters has to travel to the GPU machine.

use anyhow::bail;
use candle_core::{DType, Device, Shape, Tensor};
use candle_nn::var_builder::SimpleBackend;
use candle_nn::{Init, VarBuilder};
use capstan_reader::{Llama, LlamaConfig};
use serde_json::{json, Value};

/// The shapes `--shape` takes: Llama-2-7B, Llama-3-8B, CEPE (Llama-2-7B with cross-attention
/// in every layer and a 435M bidirectional encoder), and tiny versions of each for the CPU.
pub const SHAPES: [&str; 7] = [
    "llama2-7b",
    "llama3-8b",
    "cepe-7b",
    "cepe-smol",
    "llama2-tiny",
    "llama3-tiny",
    "cepe-tiny",
];

fn llama(
    hidden: usize,
    inter: usize,
    layers: usize,
    heads: usize,
    kv: usize,
    vocab: usize,
    theta: f64,
) -> Value {
    json!({
        "architectures": ["LlamaForCausalLM"],
        "hidden_size": hidden,
        "intermediate_size": inter,
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "num_key_value_heads": kv,
        "vocab_size": vocab,
        "rope_theta": theta,
        "rms_norm_eps": 1e-5,
        "max_position_embeddings": 131072,
    })
}

fn cepe(decoder: Value, encoder: Value) -> Value {
    let mut cfg = decoder;
    let layers = cfg["num_hidden_layers"].clone();
    let enc_hidden = encoder["hidden_size"].clone();
    cfg["architectures"] = json!(["LlamaForCausalContextLM"]);
    cfg["do_cross_attention"] = json!(true);
    cfg["num_cross_attn_layers"] = layers;
    cfg["encoder_hidden_size"] = enc_hidden;
    cfg["encoder_config"] = encoder;
    cfg
}

/// The config of a named shape.
pub fn config(shape: &str) -> anyhow::Result<LlamaConfig> {
    let value = match shape {
        "llama2-7b" => llama(4096, 11008, 32, 32, 32, 32000, 10000.0),
        "llama3-8b" => llama(4096, 14336, 32, 32, 8, 128256, 500000.0),
        // CEPE's encoder (LLaMA-MLM-Large): 24 layers of width 1024, 435M parameters.
        "cepe-7b" => cepe(
            llama(4096, 11008, 32, 32, 32, 32000, 10000.0),
            llama(1024, 4096, 24, 16, 16, 32000, 10000.0),
        ),
        // CEPE's encoder with a decoder of SmolLM2-135M's shape: what the encoder's share of a
        // request is when the decoder is small (no such checkpoint exists; a CPU-sized shape).
        "cepe-smol" => cepe(
            llama(576, 1536, 30, 9, 3, 49152, 100000.0),
            llama(1024, 4096, 24, 16, 16, 32000, 10000.0),
        ),
        "llama2-tiny" => llama(128, 256, 2, 4, 4, 512, 10000.0),
        "llama3-tiny" => llama(128, 256, 2, 4, 2, 512, 500000.0),
        "cepe-tiny" => cepe(
            llama(128, 256, 2, 4, 4, 512, 10000.0),
            llama(64, 128, 2, 2, 2, 512, 10000.0),
        ),
        other => bail!("unknown shape {other:?}; known: {}", SHAPES.join(", ")),
    };
    Ok(serde_json::from_value(value)?)
}

/// Random weights, N(0, 0.02) (norm weights 1), made on the device as the model asks for them.
struct RandomWeights;

impl SimpleBackend for RandomWeights {
    fn get(
        &self,
        s: Shape,
        name: &str,
        _: Init,
        dtype: DType,
        dev: &Device,
    ) -> candle_core::Result<Tensor> {
        if name.ends_with("norm.weight") {
            return Tensor::ones(s, dtype, dev);
        }
        Tensor::randn(0f32, 0.02, s, dev)?.to_dtype(dtype)
    }

    fn get_unchecked(&self, name: &str, _: DType, _: &Device) -> candle_core::Result<Tensor> {
        candle_core::bail!("random weights have no unchecked tensor {name}")
    }

    fn contains_tensor(&self, name: &str) -> bool {
        // No GGUF rope_freqs: the config's RoPE applies.
        !name.contains("rope_freqs")
    }
}

/// A model of `shape` with random weights in `dtype` on `device`.
pub fn random_model(
    shape: &str,
    dtype: DType,
    device: &Device,
) -> anyhow::Result<(Llama, LlamaConfig)> {
    let cfg = config(shape)?;
    let vb = VarBuilder::from_backend(Box::new(RandomWeights), dtype, device.clone());
    let model = Llama::load(vb, &cfg)?;
    Ok((model, cfg))
}

/// Parameters of a decoder layer stack (no embeddings, no lm_head).
fn layer_params(cfg: &LlamaConfig) -> usize {
    let (h, hd) = (cfg.hidden_size, cfg.head_size());
    let attn = h * cfg.num_attention_heads * hd * 2 + h * cfg.kv_heads() * hd * 2;
    let mlp = 3 * h * cfg.intermediate_size;
    cfg.num_hidden_layers * (attn + mlp + 2 * h)
}

/// Parameters of cross-attention blocks (CEPE) and of the encoder.
fn cepe_params(cfg: &LlamaConfig) -> usize {
    let Some(enc) = &cfg.encoder_config else {
        return 0;
    };
    let h = cfg.hidden_size;
    let e = cfg.encoder_hidden_size.unwrap_or(enc.hidden_size);
    let cross = cfg.num_cross_attn_layers * (2 * h * h + 2 * e * h + h);
    cross + layer_params(enc) + enc.vocab_size * enc.hidden_size + enc.hidden_size
}

/// Bytes of the weights a decoding step reads: every layer, the final norm and the output
/// matrix (the embedding table is read one row at a time).
pub fn decode_weight_bytes(cfg: &LlamaConfig, dtype: DType) -> usize {
    (layer_params(cfg) + cfg.hidden_size + cfg.vocab_size * cfg.hidden_size) * dtype.size_in_bytes()
}

/// Bytes of every weight of the model (CEPE's encoder and cross-attention included).
pub fn model_bytes(cfg: &LlamaConfig, dtype: DType) -> usize {
    let embed = cfg.vocab_size * cfg.hidden_size;
    let head = if cfg.tie_word_embeddings { 0 } else { embed };
    (layer_params(cfg) + cfg.hidden_size + embed + head + cepe_params(cfg)) * dtype.size_in_bytes()
}

/// Bytes of keys and values a decoding step reads at `context` positions.
pub fn kv_bytes(cfg: &LlamaConfig, context: usize, dtype: DType) -> usize {
    cfg.num_hidden_layers * 2 * cfg.kv_heads() * context * cfg.head_size() * dtype.size_in_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The arithmetic against the published parameter counts.
    #[test]
    fn parameter_counts_match_the_published_models() {
        let b = |shape: &str| model_bytes(&config(shape).unwrap(), DType::F32) as f64 / 4e9;
        assert!((b("llama2-7b") - 6.74).abs() < 0.01, "{}", b("llama2-7b"));
        assert!((b("llama3-8b") - 8.03).abs() < 0.01, "{}", b("llama3-8b"));
        let enc = config("cepe-7b").unwrap().encoder_config.unwrap();
        let enc_params = model_bytes(&enc, DType::F32) as f64 / 4e6 - 32.768;
        assert!((enc_params - 435.0).abs() < 5.0, "{enc_params}");
    }

    #[test]
    fn tiny_random_models_load_and_run() {
        for shape in ["llama2-tiny", "llama3-tiny", "cepe-tiny"] {
            let (model, _) = random_model(shape, DType::F32, &Device::Cpu).unwrap();
            let mut cache = capstan_reader::Cache::new(&model);
            let x = Tensor::new(&[[1u32, 2, 3]], &Device::Cpu).unwrap();
            let out = model.forward_last(&x, None, &mut cache).unwrap();
            assert_eq!(out.dims(), &[1, 512]);
        }
    }
}
