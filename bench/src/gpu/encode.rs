//! The dense encoder on a device: passages/s, and its vectors against the CPU's packed f32
//! path on the same passages.

use std::io::Write;
use std::path::Path;

use anyhow::Context;
use candle_core::{DType, Device};
use capstan_indexer::{Encoder, EncoderOptions, EncoderPrecision};
use serde_json::{json, Value};

use super::device::{describe, timed};

/// Passage texts: JSONL lines with `text` (and `title`, prefixed as the indexer does).
fn texts(path: &Path, n: usize) -> anyhow::Result<Vec<String>> {
    let body =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    body.lines()
        .take(n)
        .enumerate()
        .map(|(i, line)| {
            let v: Value = serde_json::from_str(line)
                .with_context(|| format!("{}:{}", path.display(), i + 1))?;
            let text = v["text"]
                .as_str()
                .with_context(|| format!("{}:{}: no text", path.display(), i + 1))?;
            Ok(match v["title"].as_str() {
                Some(t) if !t.is_empty() => format!("{t}. {text}"),
                _ => text.to_string(),
            })
        })
        .collect()
}

pub fn run(
    passages: &Path,
    encoder: &Path,
    n: usize,
    check: usize,
    device: &Device,
    dtype: DType,
    out: Option<&Path>,
) -> anyhow::Result<Value> {
    let texts = texts(passages, n)?;
    let precision = match dtype {
        DType::F16 => EncoderPrecision::F16,
        DType::BF16 => EncoderPrecision::Bf16,
        _ => EncoderPrecision::F32,
    };
    let options = EncoderOptions {
        precision,
        padded: true,
    };
    let gpu = Encoder::load_with(encoder, device, options)?;
    gpu.embed(&texts[..texts.len().min(256)])?; // warm-up
    let (vectors, seconds) = timed(device, || Ok(gpu.embed(&texts)?))?;
    let cpu = Encoder::load(encoder)?;
    let m = check.min(texts.len());
    let reference = cpu.embed(&texts[..m])?;
    let (mut max_diff, mut min_cos) = (0f32, 1f32);
    for (a, b) in vectors.iter().zip(&reference) {
        let dot: f32 = a.iter().zip(b).map(|(x, y)| x * y).sum();
        min_cos = min_cos.min(dot);
        max_diff = a
            .iter()
            .zip(b)
            .map(|(x, y)| (x - y).abs())
            .fold(max_diff, f32::max);
    }
    if let Some(out) = out {
        let mut file = std::io::BufWriter::new(std::fs::File::create(out)?);
        for v in &vectors {
            for x in v {
                file.write_all(&x.to_le_bytes())?;
            }
        }
        file.flush()?;
    }
    Ok(json!({
        "device": describe(device),
        "dtype": format!("{dtype:?}").to_lowercase(),
        "passages": vectors.len(),
        "seconds": seconds,
        "passages_per_s": vectors.len() as f64 / seconds,
        "checked_against_cpu": m,
        "max_abs_diff_vs_cpu": max_diff,
        "min_cosine_vs_cpu": min_cos,
    }))
}
