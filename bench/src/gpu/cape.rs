//! CAPE against the same decoder reading every token as plain context, with the CAPE paper's
//! Table 1 protocol: `total` tokens, `decoder_tokens` of them (4K; 2K at a total of 4K) in the
//! decoder and the rest in chunks of 256 tokens through the encoder; one forward pass each;
//! peak device memory (weights included, as the paper's `max_memory_allocated`; and beyond the
//! weights) and throughput, as ratios CAPE / full context.

use candle_core::{DType, Device, Tensor};
use capstan_reader::{Cache, Llama, LlamaConfig};
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};

use super::decode::context_key;
use super::device::{describe, timed_without_plans, MemoryPeak};
use super::shapes::{kv_bytes, model_bytes, random_model};

/// Prompt chunks of the plain-context pass (as the generator's chunked prefill).
const FULL_CHUNK: usize = 4096;

/// Seconds of one pass without cuDNN plan building ([`timed_without_plans`]), the bytes it
/// used beyond what was in use before (`None` on the CPU), and the plan seconds.
fn measured<T>(
    device: &Device,
    f: impl FnOnce() -> anyhow::Result<T>,
) -> anyhow::Result<(T, f64, Option<usize>, f64)> {
    let peak = MemoryPeak::start(device)?;
    let (out, seconds, plans) = timed_without_plans(device, f)?;
    let extra = peak.map(|p| {
        let base = p.baseline();
        p.finish().saturating_sub(base)
    });
    Ok((out, seconds, extra, plans))
}

/// One CAPE pass: the bytes its encoder context held (cross-attention keys and values cached,
/// or the encoder states: `capstan_reader::CrossKv`, the model's default).
fn cape_pass(model: &Llama, chunks: &[Vec<u32>], decoder: &Tensor) -> anyhow::Result<usize> {
    let mut cache = Cache::new(model);
    model.set_encoder_context(&[chunks.to_vec()], 0, &mut cache)?;
    model.forward_last(decoder, None, &mut cache)?;
    Ok(cache.encoder_context_bytes())
}

fn full_pass(model: &Llama, ids: &Tensor) -> anyhow::Result<()> {
    let mut cache = Cache::new(model);
    let n = ids.dim(1)?;
    for start in (0..n).step_by(FULL_CHUNK) {
        let len = FULL_CHUNK.min(n - start);
        model.forward_last(&ids.narrow(1, start, len)?, None, &mut cache)?;
    }
    Ok(())
}

/// The decoder alone (what the plain-context pass runs: no encoder, no cross-attention).
fn decoder_only(cfg: &LlamaConfig) -> LlamaConfig {
    let mut plain = cfg.clone();
    plain.do_cross_attention = false;
    plain.num_cross_attn_layers = 0;
    plain.encoder_config = None;
    plain.encoder_hidden_size = None;
    plain
}

#[allow(clippy::too_many_arguments)]
pub fn run(
    shape: &str,
    totals: &[usize],
    decoder_tokens: usize,
    chunk: usize,
    full_max: usize,
    device: &Device,
    dtype: DType,
) -> anyhow::Result<Value> {
    let (model, cfg) = random_model(shape, dtype, device)?;
    let plain = decoder_only(&cfg);
    let (cape_weights, full_weights) = (model_bytes(&cfg, dtype), model_bytes(&plain, dtype));
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    let mut ids = |n: usize| -> Vec<u32> {
        (0..n)
            .map(|_| rng.gen_range(3..cfg.vocab_size as u32))
            .collect()
    };
    // Warm-up: kernels compiled, allocator primed.
    let small = Tensor::new(ids(64).as_slice(), device)?.unsqueeze(0)?;
    cape_pass(&model, &[ids(chunk)], &small)?;
    let mut rows = serde_json::Map::new();
    for &total in totals {
        let in_decoder = if total <= 4096 {
            decoder_tokens / 2
        } else {
            decoder_tokens
        }
        .min(total);
        let n_chunks = (total - in_decoder) / chunk;
        let chunks: Vec<Vec<u32>> = (0..n_chunks).map(|_| ids(chunk)).collect();
        let decoder = Tensor::new(ids(in_decoder).as_slice(), device)?.unsqueeze(0)?;
        let (context_bytes, cape_s, cape_extra, cape_plans) =
            measured(device, || cape_pass(&model, &chunks, &decoder))?;
        let cape_bytes = cape_extra.map(|b| b + cape_weights);
        // Full context's keys and values alone: a lower bound of its memory, reported where it
        // is not run (past --full-max) or does not fit the device.
        let lower_bound = Some(full_weights + kv_bytes(&plain, total, dtype));
        let (full_s, full_bytes, full_note, full_plans) = if total <= full_max {
            let all = Tensor::new(ids(total).as_slice(), device)?.unsqueeze(0)?;
            match measured(device, || full_pass(&model, &all)) {
                Ok(((), s, extra, plans)) => (
                    Some(s),
                    extra.map(|b| b + full_weights),
                    "measured".to_string(),
                    plans,
                ),
                Err(e) => (
                    None,
                    lower_bound,
                    format!("lower bound: weights + KV cache; the pass failed: {e}"),
                    0.0,
                ),
            }
        } else {
            (
                None,
                lower_bound,
                "lower bound: weights + KV cache, not run".to_string(),
                0.0,
            )
        };
        let ratio = |a: Option<f64>, b: Option<f64>| a.zip(b).map(|(a, b)| a / b);
        rows.insert(
            context_key(total),
            json!({
                "total_tokens": total,
                "decoder_tokens": in_decoder,
                "encoder_chunks": n_chunks,
                "cape_seconds": cape_s,
                "full_seconds": full_s,
                "cape_cudnn_plan_seconds": cape_plans,
                "full_cudnn_plan_seconds": full_plans,
                "cape_memory_bytes": cape_bytes,
                "cape_encoder_context_bytes": context_bytes,
                "full_memory_bytes": full_bytes,
                "full_memory": full_note,
                "memory_ratio": ratio(cape_bytes.map(|b| b as f64), full_bytes.map(|b| b as f64)),
                // The same beyond each model's weights: what the context itself costs. With a
                // 7B decoder's weights counted on both sides the ratio cannot fall below about
                // a fifth at 128K (weights ~17 GB against ~80 GB), whatever CAPE saves.
                "context_memory_ratio": ratio(
                    cape_extra.map(|b| b as f64),
                    full_bytes.map(|b| b.saturating_sub(full_weights) as f64)
                ),
                // Throughput is sequences per second: CAPE's over the full context's.
                "throughput_ratio": full_s.map(|f| f / cape_s),
            }),
        );
    }
    Ok(json!({
        "shape": shape,
        "device": describe(device),
        "dtype": format!("{dtype:?}").to_lowercase(),
        "cape_weight_bytes": cape_weights,
        "full_weight_bytes": full_weights,
        "totals": rows,
    }))
}
