//! Batch-1 decoding against the bandwidth roofline, and a GGUF model's decoding.

use std::path::Path;

use candle_core::{DType, Device, Tensor, D};
use capstan_kernels::step::StepLaunch;
use capstan_reader::{
    Cache, DecodeStepStatus, GenerationParams, LanguageModel, Llama, LoadOptions, PackedInput,
    Request,
};
use serde_json::{json, Value};

use super::device::{copy_bandwidth, describe, profiled, timed};
use super::shapes::{decode_weight_bytes, kv_bytes, random_model};

/// The fused decoding step a way names: `step` (replayed as a CUDA graph), `step-eager` (its
/// kernels launched one by one); `None` for any other way (the layers).
pub fn fused_way(way: &str) -> Option<StepLaunch> {
    match way {
        "step" => Some(StepLaunch::Graph),
        "step-eager" => Some(StepLaunch::Eager),
        _ => None,
    }
}

/// A GGUF run's way (`--ways`): the fused step it names, or `None` for `layers`.
fn gguf_way(way: &str) -> anyhow::Result<Option<StepLaunch>> {
    match fused_way(way) {
        None if way != "layers" => {
            anyhow::bail!("--ways {way:?}: expected layers, step or step-eager")
        }
        fused => Ok(fused),
    }
}

/// One greedy step at the cache's end: the next token.
fn step(model: &Llama, cache: &mut Cache, token: u32) -> anyhow::Result<u32> {
    let x = Tensor::new(&[[token]], model.device())?;
    let logits = model.forward_last(&x, None, cache)?;
    Ok(logits.argmax(D::Minus1)?.to_vec1::<u32>()?[0])
}

/// Tokens/s of `steps` greedy steps after `context` positions (a synthetic cache), for each
/// context and each way a step runs on CUDA (`kernel`: layer by layer, full attention on
/// Capstan's attention kernel; `matmul`: layer by layer, cuBLAS products, the CPU's path;
/// `step`: the fused decoding step replayed as a CUDA graph, `step-eager`: its kernels
/// launched one by one), with the roofline: the copy bandwidth over the bytes a step must read
/// (weights plus keys and values). A fused step's first logits are compared with the layers'
/// on the same cache before it is timed.
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
        let fused = fused_way(path);
        let kernel = match path.as_str() {
            "matmul" => false,
            "kernel" => true,
            _ if fused.is_some() => true,
            other => anyhow::bail!(
                "--full-attention {other:?}: expected kernel, matmul, step or step-eager"
            ),
        };
        model.set_full_attention_kernel(kernel);
        model.set_decode_step(fused);
        let mut rows = serde_json::Map::new();
        for &context in contexts {
            let mut cache = Cache::synthetic(&model, context)?;
            let step_vs_layers = match fused {
                Some(_) => fused_vs_layers(&model, &cache)?,
                None => None,
            };
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
                    "step_vs_layers_max_rel_diff": step_vs_layers,
                    "decode_step": format!("{:?}", model.decode_step_status()),
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

/// The largest difference of the fused step's logits from the layers' on copies of `cache`
/// (relative to the layers' largest magnitude); an error if the step did not run on CUDA,
/// `None` on the CPU (where the step never runs: `--cpu` dry runs time the layers).
fn fused_vs_layers(model: &Llama, cache: &Cache) -> anyhow::Result<Option<f32>> {
    if !model.device().is_cuda() {
        return Ok(None);
    }
    let mut layers = model.clone();
    layers.set_decode_step(None);
    let x = Tensor::new(&[[1u32]], model.device())?;
    let want = layers.forward_last(&x, None, &mut cache.clone())?;
    let got = model.forward_last(&x, None, &mut cache.clone())?;
    if !matches!(model.decode_step_status(), DecodeStepStatus::Ready { .. }) {
        anyhow::bail!(
            "the decoding step did not run: {:?}",
            model.decode_step_status()
        );
    }
    Ok(Some(max_rel_diff(&got, &want)?))
}

/// The largest difference of `got` from `want` relative to `want`'s largest magnitude.
fn max_rel_diff(got: &Tensor, want: &Tensor) -> anyhow::Result<f32> {
    let largest = |t: &Tensor| -> anyhow::Result<f32> {
        Ok(t.abs()?.flatten_all()?.max(0)?.to_scalar::<f32>()?)
    };
    Ok(largest(&(got - want)?)? / largest(want)?.max(1e-6))
}

/// Every sequence's logits after its one new token, together (the packed step of continuous
/// batching): `(n, vocab)`.
fn packed_logits(model: &Llama, caches: &mut [Cache], tokens: &[u32]) -> anyhow::Result<Tensor> {
    let mut seqs: Vec<PackedInput<'_>> = caches
        .iter_mut()
        .zip(tokens)
        .map(|(cache, t)| PackedInput {
            tokens: std::slice::from_ref(t),
            cache,
        })
        .collect();
    Ok(model.forward_packed(&mut seqs)?)
}

/// One greedy packed step: each sequence's next token.
fn step_packed(model: &Llama, caches: &mut [Cache], tokens: &[u32]) -> anyhow::Result<Vec<u32>> {
    let logits = packed_logits(model, caches, tokens)?;
    Ok(logits.argmax(D::Minus1)?.to_vec1::<u32>()?)
}

/// `batch` sequences decoding together at each context (synthetic caches, packed steps):
/// tokens/s over all of them, and the largest difference of the first step's logits from each
/// sequence stepped alone through the layers (relative to the logits' largest magnitude), so
/// that the speed is only reported for a packed step that computes what the sequences compute
/// alone. `way`: `step` (the fused decoding step of the whole batch, as a CUDA graph) or
/// `step-eager` (its kernels one by one); any other, the layers over the packed rows.
pub fn run_batched(
    shape: &str,
    contexts: &[usize],
    steps: usize,
    batch: usize,
    way: &str,
    device: &Device,
    dtype: DType,
) -> anyhow::Result<Value> {
    let (model, _) = random_model(shape, dtype, device)?;
    let mut out = batched(model, contexts, steps, batch, way)?;
    out["shape"] = json!(shape);
    out["dtype"] = json!(format!("{dtype:?}").to_lowercase());
    out["device"] = json!(describe(device));
    Ok(out)
}

/// [`run_batched`]'s measurement on `model`: `batch`, `way`, `decode_step` and a row per
/// context.
fn batched(
    mut model: Llama,
    contexts: &[usize],
    steps: usize,
    batch: usize,
    way: &str,
) -> anyhow::Result<Value> {
    let device = model.device().clone();
    // The sequences alone run the layers, whichever way the batch runs.
    let alone_model = model.clone();
    let fused = fused_way(way);
    model.set_decode_step(fused);
    let way = if fused.is_some() { way } else { "packed" };
    let mut rows = serde_json::Map::new();
    for &context in contexts {
        let mut caches = (0..batch)
            .map(|_| Cache::synthetic(&model, context))
            .collect::<Result<Vec<_>, _>>()?;
        let tokens: Vec<u32> = (0..batch as u32).map(|i| 1 + i).collect();
        // Parity: the caches' clones share their buffers, and both passes write the same
        // position, each reading back what it wrote before the other writes.
        let alone_caches = caches.clone();
        let step_alone_caches = caches.clone();
        let packed = packed_logits(&model, &mut caches, &tokens)?;
        if fused.is_some()
            && device.is_cuda()
            && !matches!(model.decode_step_status(), DecodeStepStatus::Ready { .. })
        {
            anyhow::bail!(
                "the decoding step did not run: {:?}",
                model.decode_step_status()
            )
        }
        // Each sequence stepped alone through `m`, on its own clones of the caches: the largest
        // difference from its packed logits.
        let worst_alone = |m: &Llama, mut alone: Vec<Cache>| -> anyhow::Result<f32> {
            let mut worst = 0f32;
            for (i, cache) in alone.iter_mut().enumerate() {
                let x = Tensor::new(&[[tokens[i]]], &device)?;
                let row = m.forward_last(&x, None, cache)?.squeeze(0)?;
                worst = worst.max(max_rel_diff(&packed.get(i)?, &row)?);
            }
            Ok(worst)
        };
        let worst = worst_alone(&alone_model, alone_caches)?;
        // The same sequences one at a time through the batch's own way (the fused step alone,
        // where it runs): a difference here and not above is the batch's products, not the
        // step against the layers (a quantized model's layers round their inputs to 8 bits).
        let worst_same_way = worst_alone(&model, step_alone_caches)?;
        let mut next = tokens.clone();
        for _ in 0..2 {
            next = step_packed(&model, &mut caches, &next)?;
        }
        let (_, seconds) = timed(&device, || {
            for _ in 0..steps {
                next = step_packed(&model, &mut caches, &next)?;
            }
            Ok(())
        })?;
        rows.insert(
            context_key(context),
            json!({
                "context": context,
                "steps": steps,
                "batch": batch,
                "tokens_per_s": (batch * steps) as f64 / seconds,
                "steps_per_s": steps as f64 / seconds,
                "packed_vs_alone_max_rel_diff": worst,
                "packed_vs_alone_same_way_max_rel_diff": worst_same_way,
            }),
        );
    }
    Ok(json!({
        "batch": batch,
        "way": way,
        "decode_step": format!("{:?}", model.decode_step_status()),
        "contexts": rows,
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

/// Decoding tokens/s of a GGUF checkpoint in its quantized form (greedy, no stop), for each
/// way a step runs (`layers`: layer by layer; `step`: the fused decoding step as a CUDA graph;
/// `step-eager`: its kernels one by one); the top-level figures are the first way's, and each
/// other way says whether it generated the first way's tokens. Each way's logits, with the
/// first way's first tokens fed back, are compared with the same weights dequantized to f32 on
/// the CPU: the way that parts from the model shows.
pub fn gguf(
    path: &Path,
    new_tokens: usize,
    ways: &[String],
    device: &Device,
) -> anyhow::Result<Value> {
    let mut lm = LanguageModel::load(path, device, LoadOptions::default())?;
    let prompt = lm.user_prompt("Write a long story about a lighthouse keeper.")?;
    let request = Request {
        prompt,
        ..Request::default()
    };
    let params = GenerationParams::greedy(new_tokens);
    let mut by_way = serde_json::Map::new();
    let mut first: Option<(Value, Vec<u32>)> = None;
    let mut cpu_logits: Option<Vec<Tensor>> = None;
    for way in ways {
        let fused = gguf_way(way)?;
        lm.model_mut().set_decode_step(fused);
        lm.generator().generate(&request, &params)?; // warm-up (kernels, allocations, graph)
        let out = profiled(device, || Ok(lm.generator().generate(&request, &params)?))?;
        let mut row = json!({
            "prompt_tokens": out.prompt_tokens,
            "new_tokens": out.tokens.len(),
            "time_to_first_token_s": out.time_to_first_token.as_secs_f64(),
            "tokens_per_s": out.tokens_per_second(),
            "decode_step": format!("{:?}", lm.model().decode_step_status()),
        });
        if let Some((_, tokens)) = &first {
            let same = tokens
                .iter()
                .zip(&out.tokens)
                .take_while(|(a, b)| a == b)
                .count();
            row["tokens_as_first_way"] = json!(same);
        }
        if first.is_none() {
            first = Some((row.clone(), out.tokens.clone()));
        }
        // Which way computes the model: the logits after the prompt and after each of the
        // first way's first tokens fed back, against the same weights dequantized to f32 on the
        // CPU (what transformers does with a GGUF file): no 8-bit inputs, no TF32.
        let forced = &first.as_ref().expect("set above").1;
        let forced = &forced[..FORCED_TOKENS.min(forced.len())];
        if cpu_logits.is_none() {
            let f32 = LoadOptions {
                dtype: Some(DType::F32),
                ..LoadOptions::default()
            };
            let cpu = LanguageModel::load(path, &Device::Cpu, f32)?;
            cpu_logits = Some(forced_logits(cpu.model(), &request.prompt, forced)?);
        }
        let want = cpu_logits.as_ref().expect("set above");
        let got = forced_logits(lm.model(), &request.prompt, forced)?;
        let mut worst = 0f32;
        for (g, w) in got.iter().zip(want) {
            worst = worst.max(max_rel_diff(g, w)?);
        }
        row["forced_vs_cpu_f32_max_rel_diff"] = json!(worst);
        by_way.insert(way.clone(), row);
    }
    let Some((mut top, _)) = first else {
        anyhow::bail!("--ways: none given")
    };
    top["model"] = json!(path.file_name().map(|n| n.to_string_lossy().into_owned()));
    top["device"] = json!(describe(device));
    top["by_way"] = Value::Object(by_way);
    Ok(top)
}

/// Tokens fed back after the prompt in [`gguf`]'s check of each way against the CPU.
const FORCED_TOKENS: usize = 8;

/// `model`'s logits (on the CPU, f32) after `prompt` and after each of `tokens` read one at a
/// time, the model's decoding step as it is set.
fn forced_logits(model: &Llama, prompt: &[u32], tokens: &[u32]) -> anyhow::Result<Vec<Tensor>> {
    let device = model.device().clone();
    let mut cache = Cache::new(model);
    let mut read = |ids: &[u32]| -> anyhow::Result<Tensor> {
        let x = Tensor::new(ids, &device)?.unsqueeze(0)?;
        let row = model.forward_last(&x, None, &mut cache)?.squeeze(0)?;
        Ok(row.to_dtype(DType::F32)?.to_device(&Device::Cpu)?)
    };
    let mut out = vec![read(prompt)?];
    for &t in tokens {
        out.push(read(&[t])?);
    }
    Ok(out)
}

/// A GGUF checkpoint in its quantized form with `batch` sequences decoding together (the
/// packed steps of continuous batching, synthetic caches of `context` tokens), for each way
/// (`layers`: the packed layers; `step`, `step-eager`: the fused step of the whole batch, its
/// products on tensor cores where the device has them), each checked against the sequences
/// stepped alone through the layers: [`run_batched`]'s rows, by way.
pub fn gguf_batched(
    path: &Path,
    batch: usize,
    contexts: &[usize],
    steps: usize,
    ways: &[String],
    device: &Device,
) -> anyhow::Result<Value> {
    let lm = LanguageModel::load(path, device, LoadOptions::default())?;
    let mut by_way = serde_json::Map::new();
    for way in ways {
        gguf_way(way)?;
        by_way.insert(
            way.clone(),
            batched(lm.model().clone(), contexts, steps, batch, way)?,
        );
    }
    Ok(json!({
        "model": path.file_name().map(|n| n.to_string_lossy().into_owned()),
        "device": describe(device),
        "batch": batch,
        "by_way": by_way,
    }))
}
