//! CAPE's passage cache under a RAG load: requests of `k` passages drawn from a pool where a
//! few are popular (Zipf, s = 1), as retrieval returns the same popular passages to many
//! questions. Each request sets its encoder context and reads its question (its time to the
//! first token); once with the cache off, once on. Reports the encoder tokens computed and
//! the request times, and checks that both runs give the same logits.

use candle_core::{DType, Device, Tensor};
use capstan_reader::{Cache, Llama, PassageCache};
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};

use super::device::{describe, timed};
use super::shapes::random_model;

/// A request: its passages (indices into the pool) and its question.
struct Request {
    passages: Vec<usize>,
    question: Vec<u32>,
}

/// `n` requests of `k` distinct passages from a pool of `pool`, passage `i` drawn with
/// probability proportional to `1 / (i + 1)`.
fn workload(n: usize, k: usize, pool: usize, question: usize, vocab: u32) -> Vec<Request> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(11);
    let weights: Vec<f64> = (0..pool).map(|i| 1.0 / (i + 1) as f64).collect();
    let total: f64 = weights.iter().sum();
    (0..n)
        .map(|_| {
            let mut passages = Vec::with_capacity(k);
            while passages.len() < k.min(pool) {
                let mut u = rng.gen_range(0.0..total);
                let pick = weights
                    .iter()
                    .position(|w| {
                        u -= w;
                        u < 0.0
                    })
                    .unwrap_or(pool - 1);
                if !passages.contains(&pick) {
                    passages.push(pick);
                }
            }
            Request {
                passages,
                question: (0..question).map(|_| rng.gen_range(3..vocab)).collect(),
            }
        })
        .collect()
}

/// One request's time to its first token's logits.
fn request(
    model: &Llama,
    chunks: &[Vec<u32>],
    question: &Tensor,
    passages: &mut PassageCache,
) -> anyhow::Result<Tensor> {
    let mut cache = Cache::new(model);
    model.set_encoder_context_cached(&[chunks.to_vec()], 0, &mut cache, passages)?;
    Ok(model.forward_last(question, None, &mut cache)?)
}

#[allow(clippy::too_many_arguments)]
pub fn run(
    shape: &str,
    requests: usize,
    k: usize,
    pool: usize,
    chunk: usize,
    question: usize,
    device: &Device,
    dtype: DType,
) -> anyhow::Result<Value> {
    let (model, cfg) = random_model(shape, dtype, device)?;
    let enc_vocab = cfg
        .encoder_config
        .as_ref()
        .map(|e| e.vocab_size)
        .ok_or_else(|| anyhow::anyhow!("{shape} has no context encoder"))?;
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    let texts: Vec<Vec<u32>> = (0..pool)
        .map(|_| {
            (0..chunk)
                .map(|_| rng.gen_range(3..enc_vocab as u32))
                .collect()
        })
        .collect();
    let load = workload(requests, k, pool, question, cfg.vocab_size as u32);
    // Warm-up: kernels compiled, allocator primed.
    let warm = Tensor::new(load[0].question.as_slice(), device)?.unsqueeze(0)?;
    request(&model, &texts[..1], &warm, &mut PassageCache::new(0))?;
    let mut rows = serde_json::Map::new();
    let mut first_logits: Vec<Vec<f32>> = Vec::new();
    let mut identical = true;
    for (name, budget) in [("off", 0usize), ("on", usize::MAX)] {
        let mut passages = PassageCache::new(budget);
        let mut seconds = Vec::with_capacity(requests);
        for (i, r) in load.iter().enumerate() {
            let chunks: Vec<Vec<u32>> = r.passages.iter().map(|&p| texts[p].clone()).collect();
            let q = Tensor::new(r.question.as_slice(), device)?.unsqueeze(0)?;
            let (logits, s) = timed(device, || request(&model, &chunks, &q, &mut passages))?;
            seconds.push(s);
            let logits = logits
                .to_dtype(DType::F32)?
                .flatten_all()?
                .to_vec1::<f32>()?;
            match first_logits.get(i) {
                Some(want) => identical &= *want == logits,
                None => first_logits.push(logits),
            }
        }
        let stats = passages.stats();
        let mut sorted = seconds.clone();
        sorted.sort_by(f64::total_cmp);
        rows.insert(
            name.into(),
            json!({
                "encoder_tokens_computed": stats.encoded_tokens,
                "encoder_tokens_from_cache": stats.hit_tokens,
                "cached_bytes": stats.bytes,
                "total_seconds": seconds.iter().sum::<f64>(),
                "median_request_seconds": sorted[sorted.len() / 2],
                "first_request_seconds": seconds[0],
            }),
        );
    }
    let total = |m: &str| rows[m]["total_seconds"].as_f64().unwrap_or(f64::NAN);
    let computed = |m: &str| {
        rows[m]["encoder_tokens_computed"]
            .as_f64()
            .unwrap_or(f64::NAN)
    };
    Ok(json!({
        "shape": shape,
        "device": describe(device),
        "dtype": format!("{dtype:?}").to_lowercase(),
        "requests": requests,
        "passages_per_request": k,
        "pool": pool,
        "chunk_tokens": chunk,
        "question_tokens": question,
        "bytes_per_cached_passage": rows["on"]["cached_bytes"].as_f64().unwrap_or(0.0)
            / load.iter().flat_map(|r| &r.passages).collect::<std::collections::HashSet<_>>().len() as f64,
        "cache": rows,
        "encoder_tokens_ratio_on_off": computed("on") / computed("off"),
        "time_ratio_on_off": total("on") / total("off"),
        "logits_identical": identical,
    }))
}
