//! `capstan-bench batching`: the scheduler's generation throughput with continuous batching
//! (`max_batch` 64) and without (`max_batch` 1), same model, prompts and token counts.

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use candle_core::Device;
use capstan_engine::eval::Latency;
use capstan_engine::{Scheduler, SchedulerSettings};
use capstan_reader::{Flow, GenerationParams, LanguageModel, LoadOptions, Request};
use serde_json::{json, Value};

/// One finished sequence: time to first token and the gaps between its tokens.
struct Sample {
    ttft: Duration,
    gaps: Vec<Duration>,
    tokens: usize,
}

fn level(scheduler: &Scheduler, prompts: &[Vec<u32>], clients: usize, new_tokens: usize) -> Value {
    let per_client = prompts.len().div_ceil(clients).max(1);
    let samples = Mutex::new(Vec::new());
    let start = Instant::now();
    std::thread::scope(|s| {
        for c in 0..clients {
            let samples = &samples;
            s.spawn(move || {
                for i in 0..per_client {
                    let prompt = prompts[(c * per_client + i) % prompts.len()].clone();
                    let sent = Instant::now();
                    let mut last: Option<Instant> = None;
                    let mut ttft = Duration::ZERO;
                    let mut gaps = Vec::new();
                    let request = Request {
                        prompt,
                        encoder_chunks: Vec::new(),
                    };
                    let out = scheduler
                        .generate_stream(request, GenerationParams::greedy(new_tokens), |_, _| {
                            let now = Instant::now();
                            match last {
                                None => ttft = now - sent,
                                Some(prev) => gaps.push(now - prev),
                            }
                            last = Some(now);
                            Flow::Continue
                        })
                        .expect("generation");
                    samples.lock().unwrap().push(Sample {
                        ttft,
                        gaps,
                        tokens: out.tokens.len(),
                    });
                }
            });
        }
    });
    let wall = start.elapsed().as_secs_f64();
    let samples = samples.into_inner().unwrap();
    let tokens: usize = samples.iter().map(|s| s.tokens).sum();
    let ttft: Vec<f64> = samples.iter().map(|s| s.ttft.as_secs_f64() * 1e3).collect();
    let gaps: Vec<f64> = samples
        .iter()
        .flat_map(|s| s.gaps.iter().map(|g| g.as_secs_f64() * 1e3))
        .collect();
    let (ttft, itl) = (Latency::of(&ttft), Latency::of(&gaps));
    json!({
        "clients": clients,
        "sequences": samples.len(),
        "tokens": tokens,
        "wall_s": wall,
        "tokens_per_s": tokens as f64 / wall,
        "ttft_p50_ms": ttft.p50,
        "ttft_p99_ms": ttft.p99,
        "itl_p50_ms": itl.p50,
        "itl_p99_ms": itl.p99,
    })
}

/// Runs every level with batching, then without; prints a line per level to stderr and
/// returns the whole report.
pub fn run(
    model: &Path,
    concurrency: &[usize],
    sequences: usize,
    new_tokens: usize,
    f32: bool,
) -> anyhow::Result<Value> {
    let opts = LoadOptions {
        dtype: f32.then_some(candle_core::DType::F32),
        no_chat_template: false,
    };
    let lm = Arc::new(LanguageModel::load(model, &Device::Cpu, opts)?);
    let topics = [
        "rivers",
        "glass",
        "lighthouses",
        "bees",
        "volcanoes",
        "trains",
        "salt",
        "maps",
    ];
    let max_clients = concurrency.iter().copied().max().unwrap_or(1);
    let prompts: Vec<Vec<u32>> = (0..sequences.max(max_clients))
        .map(|i| {
            lm.user_prompt(&format!(
                "Write a long essay about {} (essay {i}).",
                topics[i % topics.len()]
            ))
        })
        .collect::<Result<_, _>>()?;
    let mut report = json!({
        "model": model.display().to_string(),
        "threads": candle_core::utils::get_num_threads(),
        "new_tokens": new_tokens,
        "weights": if f32 { "f32" } else { "natural" },
        "prompt_tokens_mean": prompts.iter().map(Vec::len).sum::<usize>() as f64 / prompts.len() as f64,
    });
    for (name, max_batch) in [("batched", 64), ("one_at_a_time", 1)] {
        let scheduler = Scheduler::start(
            "bench",
            lm.clone(),
            SchedulerSettings {
                max_batch,
                ..SchedulerSettings::default()
            },
        );
        let _ = scheduler.generate(
            Request {
                prompt: prompts[0].clone(),
                encoder_chunks: Vec::new(),
            },
            GenerationParams::greedy(2),
        )?;
        let mut rows = Vec::new();
        for &c in concurrency {
            let n = sequences.max(c);
            let row = level(&scheduler, &prompts[..n], c, new_tokens);
            eprintln!("{name} {row}");
            rows.push(row);
        }
        report[name] = Value::Array(rows);
    }
    Ok(report)
}
