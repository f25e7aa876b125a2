//! Helpers shared by the reader's test files: fixture paths and their JSON.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

use candle_core::Tensor;
use capstan_reader::{Cache, GenerationParams, Generator, Llama, PassageCache, Request};
use serde_json::Value;

/// `tests/fixtures/NAME`. The crate's folder is read when the test runs (cargo sets
/// `CARGO_MANIFEST_DIR` for it), not compiled in: cargo reuses a test binary built in another
/// checkout sharing the target dir, whose folder may be gone.
pub fn fixture(name: &str) -> PathBuf {
    Path::new(&std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

/// The tiny fixture checkpoint `name`, on the CPU in f32.
pub fn load_f32(name: &str) -> Llama {
    capstan_reader::Checkpoint::open(fixture(name))
        .unwrap()
        .load_model(&candle_core::Device::Cpu, Some(candle_core::DType::F32))
        .unwrap()
}

pub fn json(path: &Path) -> Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap()
}

pub fn ids(v: &Value) -> Vec<u32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as u32)
        .collect()
}

/// Logits of the last of `tokens`, read after what `cache` holds (batch 1).
pub fn last_logits(model: &Llama, cache: &mut Cache, tokens: &[u32]) -> Vec<f32> {
    let input = Tensor::new(tokens, model.device())
        .unwrap()
        .unsqueeze(0)
        .unwrap();
    model
        .forward_last(&input, None, cache)
        .unwrap()
        .squeeze(0)
        .unwrap()
        .to_vec1::<f32>()
        .unwrap()
}

/// Logits of every position of batch-1 `prompt` (with optional CEPE encoder chunks).
pub fn logits(model: &Llama, prompt: &[u32], chunks: &[Vec<u32>], pad: u32) -> Vec<Vec<f32>> {
    logits_cached(model, prompt, chunks, pad, &mut PassageCache::new(0))
}

/// [`logits`] with the encoder context taken through `passages` (CAPE's passage cache).
pub fn logits_cached(
    model: &Llama,
    prompt: &[u32],
    chunks: &[Vec<u32>],
    pad: u32,
    passages: &mut PassageCache,
) -> Vec<Vec<f32>> {
    let mut cache = Cache::new(model);
    if !chunks.is_empty() {
        model
            .set_encoder_context_cached(&[chunks.to_vec()], pad, &mut cache, passages)
            .unwrap();
    }
    let input = Tensor::new(prompt, model.device())
        .unwrap()
        .unsqueeze(0)
        .unwrap();
    let out = model.forward(&input, None, &mut cache).unwrap();
    out.squeeze(0).unwrap().to_vec2::<f32>().unwrap()
}

/// Greedy tokens of batch-1 `prompt` (no stop).
pub fn greedy(model: &Llama, prompt: &[u32], chunks: &[Vec<u32>], pad: u32, n: usize) -> Vec<u32> {
    let request = Request {
        prompt: prompt.to_vec(),
        encoder_chunks: chunks.to_vec(),
    };
    Generator::new(model, None, pad)
        .generate(&request, &GenerationParams::greedy(n))
        .unwrap()
        .tokens
}
