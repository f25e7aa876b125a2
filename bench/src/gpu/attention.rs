//! Attention of every pattern the readers run (causal, Zebra's local windows, SCCA_fixed,
//! SelfExtend, CAPE's cross-attention) at given lengths: seconds a call and useful TFLOP/s,
//! the peer (`bench/gpu_peers.py attention`, PyTorch's SDPA and flex_attention) timed on the
//! same cases under the same keys.
//!
//! Useful FLOPs are `4 * dim` per visible (query, key) pair of each query head, counted from the
//! patterns' rules (`capstan_kernels::key_range` / `visible`): a causal square counts half, a
//! window only its `window` keys, SelfExtend the causal pairs once (its two rotations are work
//! the method adds, not useful work). The peer counts them with the same rules.

use anyhow::{bail, Context};
use candle_core::{DType, Device, Tensor};
use capstan_kernels::{attention, key_range, scca_rules, visible, AttentionOptions, Pattern};
use serde_json::{json, Value};

use super::decode::context_key;
use super::device::timed;
use super::Heads;

/// The parameters of the patterns, as the papers' long-context settings use them.
#[derive(Debug, Clone, Copy)]
pub struct PatternParams {
    /// Zebra's local window.
    pub window: u32,
    /// SCCA_fixed's chunk (half the heads shifted by half a chunk).
    pub chunk: u32,
    /// SelfExtend's neighbour window (and its group size, which only sets the rotations).
    pub neighbor: u32,
    pub group: u32,
    /// Queries of the cross-attention case (CAPE's decoder tokens) over `context` encoder
    /// states.
    pub cross_queries: usize,
}

/// One case: `pattern:context`, e.g. `causal:8192`, `zebra:32768`.
#[derive(Debug, Clone)]
pub struct Case {
    pub name: String,
    pub context: usize,
}

impl std::str::FromStr for Case {
    type Err = anyhow::Error;
    fn from_str(s: &str) -> anyhow::Result<Self> {
        let (name, context) = s
            .split_once(':')
            .with_context(|| format!("--cases {s:?}: expected PATTERN:CONTEXT"))?;
        if !["causal", "zebra", "scca", "selfextend", "cross"].contains(&name) {
            bail!(
                "--cases {s:?}: pattern {name:?} is not causal, zebra, scca, selfextend or cross"
            );
        }
        let context = context
            .parse()
            .with_context(|| format!("--cases {s:?}: context {context:?} is not a number"))?;
        Ok(Case {
            name: name.to_string(),
            context,
        })
    }
}

/// The kernel's pattern of a case, for `heads` query heads.
fn pattern(name: &str, p: &PatternParams, heads: usize) -> Pattern {
    match name {
        "zebra" => Pattern::Local { window: p.window },
        "scca" => Pattern::Scca(scca_rules(capstan_kernels::SccaKind::Fixed, p.chunk, heads)),
        "selfextend" => Pattern::SelfExtend {
            neighbor: p.neighbor,
            group: p.group,
        },
        "cross" => Pattern::Cross,
        _ => Pattern::Causal,
    }
}

/// Visible (query, key) pairs summed over query heads: `queries` rows at positions
/// `kv - queries ..` (all of them for a square), `kv` keys from position 0.
pub fn visible_pairs(pattern: &Pattern, heads: usize, queries: usize, kv: usize) -> u64 {
    if matches!(pattern, Pattern::Cross) {
        return (heads * queries * kv) as u64;
    }
    let first = (kv - queries) as u64;
    let mut pairs = 0u64;
    for h in 0..heads {
        for i in first..kv as u64 {
            let (lo, hi) = key_range(pattern, h, i);
            let hi = hi.min(kv as u64);
            pairs += match pattern {
                // Every key of the range is visible: count it whole.
                Pattern::Causal | Pattern::SelfExtend { .. } => hi - lo,
                Pattern::Local { window } => (i + 1).min(*window as u64).min(hi - lo),
                Pattern::Scca(rules) if rules[h].dilation <= 1 => hi - lo,
                _ => (lo..hi).filter(|&p| visible(pattern, h, i, p)).count() as u64,
            };
        }
    }
    pairs
}

pub fn run(
    cases: &[Case],
    run_heads @ Heads {
        query: heads,
        kv_heads,
        dim,
    }: Heads,
    params: &PatternParams,
    device: &Device,
    dtype: DType,
) -> anyhow::Result<Value> {
    let mut rows = serde_json::Map::new();
    for case in cases {
        let s = case.context;
        let cross = case.name == "cross";
        // Cross-attention: CAPE's decoder queries over the encoder states, as many key heads
        // as query heads (CEPE's cross-attention is multi-head).
        let (queries, kvh) = if cross {
            (params.cross_queries.min(s), heads)
        } else {
            (s, kv_heads)
        };
        let rand = |h: usize, n: usize| -> anyhow::Result<Tensor> {
            Ok(Tensor::randn(0f32, 1.0, (1, h, n, dim), device)?.to_dtype(dtype)?)
        };
        let (q, k, v) = (rand(heads, queries)?, rand(kvh, s)?, rand(kvh, s)?);
        let pat = pattern(&case.name, params, heads);
        let mut opts = AttentionOptions::new(pat.clone());
        if case.name == "selfextend" {
            opts.q_grouped = Some(rand(heads, queries)?);
            opts.k_grouped = Some(rand(kvh, s)?);
        }
        let before = capstan_kernels::cudnn_stats();
        attention(&q, &k, &v, opts.clone())?; // warm-up (NVRTC compilation, cuDNN's plan)
        let after = capstan_kernels::cudnn_stats();
        let on_cudnn = after.calls > before.calls;
        let (_, first) = timed(device, || Ok(attention(&q, &k, &v, opts.clone())?))?;
        // About a second of calls, so short cases are not one launch's timing; a call of more
        // than 10 s (a slow kernel at 128K) is timed once, so it does not spend the check's
        // budget.
        let reps = if first > 10.0 {
            0
        } else {
            ((1.0 / first) as usize).clamp(1, 20)
        };
        let (_, seconds) = timed(device, || {
            for _ in 0..reps {
                attention(&q, &k, &v, opts.clone())?;
            }
            Ok(())
        })?;
        let (per_call, reps) = if reps == 0 {
            (first, 1)
        } else {
            (seconds / reps as f64, reps)
        };
        let pairs = visible_pairs(&pat, heads, queries, s);
        let flops = 4.0 * dim as f64 * pairs as f64;
        rows.insert(
            format!("{}_{}", case.name, context_key(s)),
            json!({
                "pattern": case.name,
                "context": s,
                "queries": queries,
                "kv_heads": kvh,
                "visible_pairs": pairs,
                "seconds": per_call,
                "reps": reps,
                "useful_tflops": flops / per_call / 1e12,
                "on_cudnn": on_cudnn,
                "cudnn_plan_seconds": after.plan_seconds - before.plan_seconds,
            }),
        );
    }
    Ok(run_heads.result(
        device,
        dtype,
        json!({
            "tensor_core_attention": capstan_kernels::tensor_core_attention(),
            "attention_kernel": format!("{:?}", capstan_kernels::attention_kernel()),
            "cudnn_version": capstan_kernels::cudnn_version().ok(),
            "cudnn_refusals": capstan_kernels::cudnn_stats().refusals,
            "window": params.window,
            "chunk": params.chunk,
            "neighbor": params.neighbor,
            "group": params.group,
            "cross_queries": params.cross_queries,
            "cases": rows,
        }),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The counts against a brute-force pass over every pair with the rules themselves.
    #[test]
    fn visible_pairs_match_the_rules_pair_by_pair() {
        let p = PatternParams {
            window: 5,
            chunk: 8,
            neighbor: 4,
            group: 2,
            cross_queries: 7,
        };
        let (heads, s) = (4, 37);
        for name in ["causal", "zebra", "scca", "selfextend", "cross"] {
            let pat = pattern(name, &p, heads);
            let queries = if name == "cross" { 7 } else { s };
            let mut brute = 0u64;
            for h in 0..heads {
                for i in (s - queries) as u64..s as u64 {
                    brute += (0..s as u64).filter(|&k| visible(&pat, h, i, k)).count() as u64;
                }
            }
            assert_eq!(visible_pairs(&pat, heads, queries, s), brute, "{name}");
        }
        // The causal square counts s (s + 1) / 2 pairs a head.
        assert_eq!(
            visible_pairs(&Pattern::Causal, 1, s, s),
            (s * (s + 1) / 2) as u64
        );
    }
}
