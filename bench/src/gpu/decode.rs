//! Batch-1 decoding against the bandwidth roofline, and a GGUF model's decoding.

use std::path::Path;

use candle_core::{DType, Device, Tensor, D};
use capstan_reader::{Cache, GenerationParams, LanguageModel, Llama, LoadOptions, Request};
use serde_json::{json, Value};

use super::device::{copy_bandwidth, describe, timed};
use super::shapes::{decode_weight_bytes, kv_bytes, random_model};

/// One greedy step at the cache's end: the next token.
fn step(model: &Llama, cache: &mut Cache, token: u32) -> anyhow::Result<u32> {
    let x = Tensor::new(&[[token]], model.device())?;
    let logits = model.forward_last(&x, None, cache)?;
    Ok(logits.argmax(D::Minus1)?.to_vec1::<u32>()?[0])
}

/// Tokens/s of `steps` greedy steps after `context` positions (a synthetic cache), for each
/// context and each way full attention runs on CUDA (`kernel`: Capstan's attention kernel;
/// `matmul`: cuBLAS products, the CPU's path), with the roofline: the copy bandwidth over the
/// bytes a step must read (weights plus keys and values).
pub fn run(
    shape: &str,
    contexts: &[usize],
    steps: usize,
    paths: &[String],
    device: &Device,
    dtype: DType,
) -> anyhow::Result<Value> {
    let (mut model, cfg) = random_model(shape, dtype, device)?;
    let probe = if device.is_cuda() { 1 << 30 } else { 64 << 20 };
    let bandwidth = copy_bandwidth(device, probe)?;
    let mut by_path = serde_json::Map::new();
    for path in paths {
        model.set_full_attention_kernel(match path.as_str() {
            "kernel" => true,
            "matmul" => false,
            other => anyhow::bail!("--full-attention {other:?}: expected kernel or matmul"),
        });
        let mut rows = serde_json::Map::new();
        for &context in contexts {
            let mut cache = Cache::synthetic(&model, context)?;
            let mut token = 1;
            for _ in 0..3 {
                token = step(&model, &mut cache, token)?;
            }
            let (_, seconds) = timed(device, || {
                for _ in 0..steps {
                    token = step(&model, &mut cache, token)?;
                }
                Ok(())
            })?;
            let tokens_per_s = steps as f64 / seconds;
            let bytes =
                decode_weight_bytes(&cfg, dtype) + kv_bytes(&cfg, context + 3 + steps / 2, dtype);
            let roofline = bandwidth / bytes as f64;
            rows.insert(
                context_key(context),
                json!({
                    "context": context,
                    "steps": steps,
                    "tokens_per_s": tokens_per_s,
                    "bytes_per_token": bytes,
                    "roofline_tokens_per_s": roofline,
                    "roofline_fraction": tokens_per_s / roofline,
                }),
            );
        }
        by_path.insert(path.clone(), Value::Object(rows));
    }
    let first = paths.first().map(String::as_str).unwrap_or("kernel");
    Ok(json!({
        "shape": shape,
        "dtype": format!("{dtype:?}").to_lowercase(),
        "device": describe(device),
        "copy_bandwidth_bytes_per_s": bandwidth,
        "full_attention": first,
        "contexts": by_path.get(first).cloned().unwrap_or(Value::Null),
        "by_full_attention": by_path,
    }))
}

/// `1024` -> `1k`, `131072` -> `128k`.
pub fn context_key(n: usize) -> String {
    if n.is_multiple_of(1024) {
        format!("{}k", n / 1024)
    } else {
        n.to_string()
    }
}

/// Decoding tokens/s of a GGUF checkpoint in its quantized form (greedy, no stop).
pub fn gguf(path: &Path, new_tokens: usize, device: &Device) -> anyhow::Result<Value> {
    let lm = LanguageModel::load(path, device, LoadOptions::default())?;
    let prompt = lm.user_prompt("Write a long story about a lighthouse keeper.")?;
    let request = Request {
        prompt,
        ..Request::default()
    };
    let params = GenerationParams::greedy(new_tokens);
    lm.generator().generate(&request, &params)?; // warm-up (kernels, allocations)
    let out = lm.generator().generate(&request, &params)?;
    Ok(json!({
        "model": path.file_name().map(|n| n.to_string_lossy().into_owned()),
        "device": describe(device),
        "prompt_tokens": out.prompt_tokens,
        "new_tokens": out.tokens.len(),
        "time_to_first_token_s": out.time_to_first_token.as_secs_f64(),
        "tokens_per_s": out.tokens_per_second(),
    }))
}
