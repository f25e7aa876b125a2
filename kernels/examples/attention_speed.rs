//! Throughput of the CPU attention on a prompt chunk of SmolLM2's shape (9 query heads, 3 key
//! heads, width 64) deep in a long prompt: the tiled path (one call of the whole chunk) against
//! the per-row path (the same rows in calls below `TILED_ROWS`, which run it).
//! `cargo run --release -p capstan-kernels --example attention_speed [PAST] [ROWS]`.
//! (A probe for profiling; benchmarks against peers live in bench/.)

use std::time::Instant;

use capstan_kernels::cpu::{self, AttnDims, AttnExtras, AttnPositions};
use capstan_kernels::Pattern;

fn main() {
    let arg = |i: usize, d: usize| {
        std::env::args()
            .nth(i)
            .and_then(|a| a.parse().ok())
            .unwrap_or(d)
    };
    let (past, rows) = (arg(1, 7168), arg(2, 1024));
    let (heads, kv_heads, dim) = (9, 3, 64);
    let kv_len = past + rows;
    let fill = |n: usize, seed: usize| -> Vec<f32> {
        (0..n)
            .map(|i| (((i * 2_654_435_761 + seed) % 1000) as f32 / 500.0) - 1.0)
            .collect()
    };
    let (q, qg) = (fill(heads * rows * dim, 1), fill(heads * rows * dim, 2));
    let (k, kg, v) = (
        fill(kv_heads * kv_len * dim, 3),
        fill(kv_heads * kv_len * dim, 4),
        fill(kv_heads * kv_len * dim, 5),
    );
    let call = |r0: usize, r1: usize, pattern: &Pattern| {
        let slice = |x: &[f32]| -> Vec<f32> {
            (0..heads)
                .flat_map(|h| x[(h * rows + r0) * dim..(h * rows + r1) * dim].to_vec())
                .collect()
        };
        let dims = AttnDims {
            batch: 1,
            heads,
            kv_heads,
            q_len: r1 - r0,
            kv_len: past + r1,
            kv_stride: kv_len,
            dim,
        };
        let pos = AttnPositions {
            q_pos0: (past + r0) as u64,
            k_pos0: 0,
            scale: 0.125,
        };
        let qg = slice(&qg);
        let extras = AttnExtras {
            q_grouped: Some(&qg),
            k_grouped: Some(&kg),
            key_mask: None,
        };
        cpu::attention_blocked(&slice(&q), &k, &v, dims, pos, pattern, extras)
    };
    // Query-key pairs of the chunk, per head.
    let pairs = (rows * past + rows * (rows + 1) / 2) as f64 * heads as f64;
    for pattern in [
        Pattern::Causal,
        Pattern::SelfExtend {
            neighbor: 2048,
            group: 4,
        },
        Pattern::Local { window: 2048 },
    ] {
        let t = Instant::now();
        std::hint::black_box(call(0, rows, &pattern));
        let tiled = t.elapsed().as_secs_f64();
        let step = cpu::TILED_ROWS - 1;
        let t = Instant::now();
        for r0 in (0..rows).step_by(step) {
            std::hint::black_box(call(r0, (r0 + step).min(rows), &pattern));
        }
        let per_row = t.elapsed().as_secs_f64();
        println!(
            "{pattern:?}: {rows} rows after {past}: tiled {:.3} s ({:.2} G pairs/s), per-row {:.3} s ({:.2} G pairs/s), {:.2}x",
            tiled,
            pairs / tiled / 1e9,
            per_row,
            pairs / per_row / 1e9,
            per_row / tiled
        );
    }
}
