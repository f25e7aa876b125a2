//! The reader's parity fixtures (reader/tests/fixtures: tiny checkpoints with the logits and
//! greedy tokens transformers or the official CEPE code produced) run on a device: f32 must
//! give the same greedy tokens and logits within 1e-3, bf16 logits within bf16's tolerance.

use std::path::Path;

use anyhow::Context;
use candle_core::{DType, Device, Tensor};
use capstan_reader::{Cache, Checkpoint, GenerationParams, Generator, Llama, Request};
use serde_json::{json, Value};

use super::device::describe;

const F32_TOL: f32 = 1e-3;

fn ids(v: &Value) -> Vec<u32> {
    v.as_array()
        .map(|a| {
            a.iter()
                .filter_map(|x| x.as_u64())
                .map(|x| x as u32)
                .collect()
        })
        .unwrap_or_default()
}

fn read(path: &Path) -> anyhow::Result<Value> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    Ok(serde_json::from_str(&text)?)
}

fn logits(
    model: &Llama,
    prompt: &[u32],
    chunks: &[Vec<u32>],
    pad: u32,
) -> anyhow::Result<Vec<Vec<f32>>> {
    let mut cache = Cache::new(model);
    if !chunks.is_empty() {
        model.set_encoder_context(&[chunks.to_vec()], pad, &mut cache)?;
    }
    let x = Tensor::new(prompt, model.device())?.unsqueeze(0)?;
    Ok(model
        .forward(&x, None, &mut cache)?
        .squeeze(0)?
        .to_vec2::<f32>()?)
}

/// Max |a - b| over the rows, infinite on NaN.
fn max_diff(a: &[Vec<f32>], b: &[Vec<f32>]) -> f32 {
    a.iter()
        .flatten()
        .zip(b.iter().flatten())
        .map(|(x, y)| {
            if x.is_finite() {
                (x - y).abs()
            } else {
                f32::INFINITY
            }
        })
        .fold(0.0, f32::max)
}

/// One fixture in one dtype: `(logits diff, tolerance, greedy equal)`.
fn check(
    dir: &Path,
    expected: &Value,
    with_encoder: bool,
    device: &Device,
    dtype: DType,
) -> anyhow::Result<(f32, f32, bool)> {
    let inputs = read(&dir.join("inputs.json"))?;
    let ckpt = Checkpoint::open(dir)?;
    let model = ckpt.load_model(device, Some(dtype))?;
    let prompt = ids(&inputs["input_ids"][0]);
    let chunks: Vec<Vec<u32>> = match (with_encoder, inputs["encoder_input_ids"].as_array()) {
        (true, Some(c)) => c.iter().map(ids).collect(),
        _ => Vec::new(),
    };
    let pad = inputs["encoder_pad_token_id"].as_u64().unwrap_or(2) as u32;
    let mut got = logits(&model, &prompt, &chunks, pad)?;
    if let Some(pos) = expected.get("positions") {
        got = ids(pos).iter().map(|&p| got[p as usize].clone()).collect();
    }
    let want: Vec<Vec<f32>> = expected["logits"]
        .as_array()
        .context("expected logits")?
        .iter()
        .map(|r| {
            r.as_array()
                .into_iter()
                .flatten()
                .filter_map(|x| x.as_f64())
                .map(|x| x as f32)
                .collect()
        })
        .collect();
    let diff = max_diff(&got, &want);
    let scale = want.iter().flatten().fold(1f32, |m, x| m.max(x.abs()));
    let tol = match dtype {
        DType::F32 => F32_TOL,
        // bf16 keeps 8 bits of mantissa: a few roundings per layer, relative to the logits.
        _ => 0.05 * scale,
    };
    let n = inputs["max_new_tokens"].as_u64().unwrap_or(0) as usize;
    let request = Request {
        prompt: prompt.clone(),
        encoder_chunks: chunks,
    };
    let tokens = Generator::new(&model, None, pad)
        .generate(&request, &GenerationParams::greedy(n))?
        .tokens;
    Ok((diff, tol, tokens == ids(&expected["greedy_tokens"])))
}

/// Every batch-1 fixture folder under `root` (`config.json`, `inputs.json` and an
/// `expected*.json` holding full logits and greedy tokens).
pub fn run(root: &Path, device: &Device) -> anyhow::Result<Value> {
    let mut dirs: Vec<_> = std::fs::read_dir(root)
        .with_context(|| format!("reading {}", root.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.join("config.json").is_file())
        // Batch-1 fixtures (the left-padded batch has its own expected format).
        .filter(|p| {
            read(&p.join("inputs.json"))
                .is_ok_and(|i| i["input_ids"].as_array().is_some_and(|r| r.len() == 1))
        })
        .collect();
    dirs.sort();
    let mut results = Vec::new();
    let (mut equal, mut total) = (0, 0);
    for dir in dirs {
        let name = dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        for (file, with_encoder) in [("expected.json", true), ("expected_no_encoder.json", false)] {
            let Ok(expected) = read(&dir.join(file)) else {
                continue;
            };
            if expected.get("logits").is_none() || expected.get("greedy_tokens").is_none() {
                continue;
            }
            for dtype in [DType::F32, DType::BF16] {
                total += 1;
                let row = match check(&dir, &expected, with_encoder, device, dtype) {
                    Ok((diff, tol, greedy)) => {
                        // f32 must decode the same tokens; bf16 may flip near-ties.
                        let ok = diff <= tol && (greedy || dtype != DType::F32);
                        equal += ok as usize;
                        json!({"fixture": name, "expected": file, "dtype": format!("{dtype:?}").to_lowercase(),
                               "logits_max_diff": diff, "tolerance": tol, "greedy_equal": greedy, "ok": ok})
                    }
                    Err(e) => {
                        json!({"fixture": name, "expected": file, "dtype": format!("{dtype:?}").to_lowercase(),
                                     "error": format!("{e:#}"), "ok": false})
                    }
                };
                results.push(row);
            }
        }
    }
    Ok(json!({
        "device": describe(device),
        "fixtures_equal": equal,
        "fixtures_total": total,
        "results": results,
    }))
}
