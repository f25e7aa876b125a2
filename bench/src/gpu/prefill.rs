//! Prefill: the causal attention kernel's TFLOP/s, and a model's prefill tokens/s.

use candle_core::{DType, Device, Tensor};
use capstan_kernels::{attention, AttentionOptions, Pattern};
use capstan_reader::Cache;
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};

use super::decode::context_key;
use super::device::{timed, timed_without_plans};
use super::shapes::random_model;
use super::Heads;

/// Causal attention FLOPs at `s` positions (both products, the causal half).
fn causal_flops(heads: usize, dim: usize, s: usize) -> f64 {
    4.0 * heads as f64 * dim as f64 * s as f64 * s as f64 / 2.0
}

pub fn run(
    contexts: &[usize],
    run_heads @ Heads {
        query: heads,
        kv_heads,
        dim,
    }: Heads,
    shape: Option<&str>,
    model_contexts: &[usize],
    device: &Device,
    dtype: DType,
) -> anyhow::Result<Value> {
    let mut kernel = serde_json::Map::new();
    for &s in contexts {
        let rand = |h: usize| -> anyhow::Result<Tensor> {
            Ok(Tensor::randn(0f32, 1.0, (1, h, s, dim), device)?.to_dtype(dtype)?)
        };
        let (q, k, v) = (rand(heads)?, rand(kv_heads)?, rand(kv_heads)?);
        let causal = || AttentionOptions::new(Pattern::Causal);
        attention(&q, &k, &v, causal())?; // warm-up (NVRTC compilation on the first call)
        let reps = if s >= 16384 { 1 } else { 3 };
        let (_, seconds) = timed(device, || {
            for _ in 0..reps {
                attention(&q, &k, &v, causal())?;
            }
            Ok(())
        })?;
        let per_call = seconds / reps as f64;
        kernel.insert(
            context_key(s),
            json!({
                "context": s,
                "seconds": per_call,
                "attention_tflops": causal_flops(heads, dim, s) / per_call / 1e12,
            }),
        );
    }
    let mut model_rows = serde_json::Map::new();
    if let Some(shape) = shape {
        let (mut model, cfg) = random_model(shape, dtype, device)?;
        let mut rng = rand::rngs::StdRng::seed_from_u64(5);
        for &s in model_contexts {
            let ids: Vec<u32> = (0..s)
                .map(|_| rng.gen_range(3..cfg.vocab_size as u32))
                .collect();
            let x = Tensor::new(ids.as_slice(), device)?.unsqueeze(0)?;
            let warm = x.narrow(1, 0, s.min(128))?;
            let mut row = json!({"context": s});
            // Full attention through the kernel, then through cuBLAS products (on CUDA).
            for (path, kernel) in [("kernel", true), ("matmul", false)] {
                model.set_full_attention_kernel(kernel);
                model.forward_last(&warm, None, &mut Cache::new(&model))?;
                // cuDNN's plans for new shapes reported, and left out of the throughput.
                let (_, seconds, plans) = timed_without_plans(device, || {
                    Ok(model.forward_last(&x, None, &mut Cache::new(&model))?)
                })?;
                row[format!("{path}_tokens_per_s")] = json!(s as f64 / seconds);
                row[format!("{path}_cudnn_plan_seconds")] = json!(plans);
            }
            row["tokens_per_s"] = row["kernel_tokens_per_s"].clone();
            model_rows.insert(context_key(s), row);
        }
    }
    Ok(run_heads.result(
        device,
        dtype,
        json!({"kernel": kernel, "model_shape": shape, "model": model_rows}),
    ))
}
