//! Where an exact dense scan stops being cheaper than HNSW at the depths
//! hybrid retrieval asks for: for growing collections of real MiniLM vectors
//! (an index's `vectors.f32`, extended past its size by noisy copies of its
//! rows), the latency of the exact top-d scan and of the HNSW search at
//! several breadths with its recall@d against the scan, for real questions. The scan is timed
//! twice: a full sort on one thread, and the index's own (`exact_top_k`, threaded).

use std::collections::HashSet;
use std::path::Path;
use std::time::Instant;

use capstan_indexer::{dot, exact_top_k, normalize, Encoder, FrozenGraph, HnswParams};
use rand::{Rng, SeedableRng};
use serde::Deserialize;
use serde_json::{json, Value};

#[derive(Deserialize)]
struct Query {
    text: String,
}

/// The exact top `k` by a full scan, as the index's exact search does it
/// (the same dot product; a bounded selection).
fn exact(vectors: &[f32], dim: usize, q: &[f32], k: usize) -> Vec<u32> {
    let mut scored: Vec<(f32, u32)> = vectors
        .chunks_exact(dim)
        .enumerate()
        .map(|(i, v)| (dot(q, v), i as u32))
        .collect();
    let k = k.min(scored.len());
    scored.select_nth_unstable_by(k.saturating_sub(1), |a, b| b.0.total_cmp(&a.0));
    scored.truncate(k);
    scored.sort_by(|a, b| b.0.total_cmp(&a.0));
    scored.into_iter().map(|(_, i)| i).collect()
}

/// `n` rows: the real ones, then copies of them with Gaussian-ish noise of
/// scale `noise`, renormalised (deterministic for `seed`).
fn rows(real: &[f32], dim: usize, n: usize, noise: f32, seed: u64) -> Vec<f32> {
    let have = real.len() / dim;
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut out = Vec::with_capacity(n * dim);
    for i in 0..n {
        let src = &real[(i % have) * dim..(i % have + 1) * dim];
        if i < have {
            out.extend_from_slice(src);
            continue;
        }
        let mut v: Vec<f32> = src
            .iter()
            .map(|x| {
                // Sum of uniforms: close enough to Gaussian for jitter.
                let g: f32 = (0..4).map(|_| rng.gen_range(-1.0f32..1.0)).sum::<f32>() / 2.0;
                x + noise * g / (dim as f32).sqrt()
            })
            .collect();
        normalize(&mut v);
        out.extend(v);
    }
    out
}

#[allow(clippy::too_many_arguments)]
pub fn run(
    vectors: &Path,
    dim: usize,
    queries: &Path,
    encoder: &Path,
    sizes: &[usize],
    depths: &[usize],
    params: HnswParams,
    noise: f32,
) -> anyhow::Result<Value> {
    let real = super::read_f32(vectors)?;
    let queries: Vec<Query> = super::read_jsonl(queries)?;
    let encoder = Encoder::load(encoder)?;
    let texts: Vec<&str> = queries.iter().take(200).map(|q| q.text.as_str()).collect();
    let mut qv = encoder.embed(&texts)?;
    qv.iter_mut().for_each(|v| normalize(v));
    let none = HashSet::new();
    let mut out = Vec::new();
    for &n in sizes {
        let base = rows(&real, dim, n, noise, 7);
        let start = Instant::now();
        let mut graph = capstan_indexer::build_graph(&base, dim, params)?;
        graph.set_searching_mode(true);
        let build_seconds = start.elapsed().as_secs_f64();
        let frozen = FrozenGraph::freeze(&graph, n);
        drop(graph);
        for &d in depths {
            // Warm-up, then timed passes.
            for q in qv.iter().take(5) {
                exact(&base, dim, q, d);
            }
            let start = Instant::now();
            let truth: Vec<Vec<u32>> = qv.iter().map(|q| exact(&base, dim, q, d)).collect();
            let exact_ms = start.elapsed().as_secs_f64() * 1000.0 / qv.len() as f64;
            // The index's own scan: a bounded heap, on every thread past two pieces.
            let start = Instant::now();
            for (q, t) in qv.iter().zip(&truth) {
                let found = exact_top_k(&base, dim, q, d, &none);
                assert_eq!(found.len(), t.len());
            }
            let scan_ms = start.elapsed().as_secs_f64() * 1000.0 / qv.len() as f64;
            let mut hnsw = Vec::new();
            for ef in [d, 2 * d, 4 * d] {
                let start = Instant::now();
                let found: Vec<Vec<u64>> = qv
                    .iter()
                    .map(|q| {
                        frozen
                            .search(&base, dim, q, d, ef, &none)
                            .into_iter()
                            .map(|(o, _)| o)
                            .collect()
                    })
                    .collect();
                let ms = start.elapsed().as_secs_f64() * 1000.0 / qv.len() as f64;
                let hits: usize = truth
                    .iter()
                    .zip(&found)
                    .map(|(t, f)| f.iter().filter(|o| t.contains(&(**o as u32))).count())
                    .sum();
                let recall = hits as f64 / (truth.len() * d.min(n)) as f64;
                hnsw.push(json!({"ef": ef, "ms": ms, "recall": recall}));
            }
            eprintln!(
                "n {n} depth {d}: exact {exact_ms:.3} ms (the index's scan {scan_ms:.3} ms); hnsw {}",
                json!(hnsw)
            );
            out.push(json!({
                "vectors": n, "depth": d, "build_seconds": build_seconds,
                "exact_ms": exact_ms, "index_scan_ms": scan_ms, "hnsw": hnsw,
            }));
        }
    }
    Ok(json!({
        "real_vectors": real.len() / dim,
        "queries": qv.len(),
        "noise": noise,
        "m": params.m,
        "ef_construction": params.ef_construction,
        "rows": out,
    }))
}
