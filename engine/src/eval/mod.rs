//! Batch evaluations of `capstan eval` beyond retrieval: open-domain QA, the
//! lost-in-the-middle position protocol and the synthetic long-context probes
//! (key-value retrieval, passkey) and perplexity by position over long text.
//!
//! Every run writes into its output folder:
//! - `config.json`: what the run measures (a resumed run must match it);
//! - `items.jsonl`: one line per finished item, appended as items finish, so an
//!   interrupted run resumes where it stopped;
//! - `results.json`, `results.md` and PNG plots, written at the end.

pub mod perplexity;
pub mod plot;
pub mod position;
pub mod probes;
pub mod qa;
pub mod resume;

use std::path::Path;

use anyhow::Context;
use serde::Serialize;

/// Mean, median and 99th percentile of a sample (milliseconds).
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Latency {
    /// Arithmetic mean.
    pub mean: f64,
    /// Median (nearest rank).
    pub p50: f64,
    /// 99th percentile (nearest rank).
    pub p99: f64,
}

impl Latency {
    /// Summarises `values` (empty: all zero).
    pub fn of(values: &[f64]) -> Self {
        if values.is_empty() {
            return Self::default();
        }
        let mut v = values.to_vec();
        v.sort_by(f64::total_cmp);
        let rank = |q: f64| v[((q * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1];
        Self {
            mean: v.iter().sum::<f64>() / v.len() as f64,
            p50: rank(0.5),
            p99: rank(0.99),
        }
    }
}

/// Fraction of `true` (0 for none).
pub fn mean_bool(values: impl IntoIterator<Item = bool>) -> f64 {
    let (mut n, mut yes) = (0usize, 0usize);
    for v in values {
        n += 1;
        yes += usize::from(v);
    }
    if n == 0 {
        0.0
    } else {
        yes as f64 / n as f64
    }
}

/// Writes `results.json` and `results.md` into `out` and prints the summary.
pub fn write_report(out: &Path, results: &impl Serialize, markdown: &str) -> anyhow::Result<()> {
    let json = serde_json::to_string_pretty(results)?;
    std::fs::write(out.join("results.json"), json + "\n")
        .with_context(|| format!("writing {}/results.json", out.display()))?;
    std::fs::write(out.join("results.md"), markdown)
        .with_context(|| format!("writing {}/results.md", out.display()))?;
    print!("{markdown}");
    Ok(())
}

/// FNV-1a of a file's bytes: names the exact question file a run was made from.
pub fn file_hash(path: &Path) -> anyhow::Result<String> {
    let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    Ok(format!("{h:016x}"))
}

/// Items in flight for `--concurrency` (default: the CPU count, [`GENERATIVE_CONCURRENCY`]
/// with a generative reader).
pub fn concurrency(flag: Option<usize>, generative: bool) -> usize {
    flag.unwrap_or_else(|| {
        if generative {
            GENERATIVE_CONCURRENCY
        } else {
            std::thread::available_parallelism().map_or(1, |n| n.get())
        }
    })
    .max(1)
}

/// Default sequences in flight of a generative evaluation: enough for the scheduler to batch
/// (a decode step's cost barely grows with the batch on a CPU), few enough for its KV budget.
pub const GENERATIVE_CONCURRENCY: usize = 16;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latency_percentiles() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        let l = Latency::of(&v);
        assert_eq!((l.mean, l.p50, l.p99), (50.5, 50.0, 99.0));
        assert_eq!(Latency::of(&[3.0]).p99, 3.0);
        assert_eq!(mean_bool([true, false, true, true]), 0.75);
    }
}
