//! The blocked (threaded, vectorised) CPU attention against the reference, for every pattern,
//! prefill and decoding shapes, a cache buffer larger than its keys, padded keys, and keys and
//! values kept in f32 or f16.

use capstan_kernels::cpu::{self, AttnDims, AttnExtras, AttnPositions};
use capstan_kernels::{scca_rules, Pattern, SccaKind};
use half::f16;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

fn randn(rng: &mut StdRng, n: usize) -> Vec<f32> {
    (0..n).map(|_| rng.gen_range(-2.0f32..2.0)).collect()
}

/// Every form of the tiled path (those this CPU lacks are skipped).
const ISAS: [cpu::TileIsa; 3] = [
    cpu::TileIsa::Portable,
    cpu::TileIsa::Avx2,
    cpu::TileIsa::Avx512,
];

fn patterns(heads: usize) -> Vec<Pattern> {
    vec![
        Pattern::Causal,
        Pattern::Cross,
        Pattern::Local { window: 7 },
        Pattern::SelfExtend {
            neighbor: 8,
            group: 3,
        },
        Pattern::Scca(scca_rules(SccaKind::Fixed, 16, heads)),
        Pattern::Scca(scca_rules(SccaKind::Flow { groups: 2 }, 8, heads)),
        Pattern::Scca(scca_rules(SccaKind::Dilated { dilation: 3 }, 0, heads)),
    ]
}

#[test]
fn blocked_attention_equals_the_reference() {
    let mut rng = StdRng::seed_from_u64(11);
    // (batch, heads, kv_heads, q_len, kv_len, kv_stride, dim): prefill with more rows than a
    // task's block, a decoding step over a cache buffer with spare rows, a short chunk.
    let shapes = [
        (2, 4, 2, 70, 70, 70, 16),
        (1, 6, 2, 1, 300, 384, 32),
        (1, 4, 4, 5, 133, 160, 64),
        (1, 9, 3, 40, 1100, 1100, 64),
        // Widths past the vector forms' widths: a tail of 8 (AVX-512) and of 4 (AVX2).
        (1, 4, 2, 24, 90, 96, 72),
        (1, 4, 2, 20, 60, 60, 20),
        // Decoding steps whose keys fall in several splits (the per-row path's split-K), a
        // batch of them, and a width with a tail.
        (2, 9, 3, 3, 700, 768, 64),
        (1, 4, 1, 1, 600, 600, 128),
        (1, 4, 2, 2, 530, 530, 20),
    ];
    for (batch, heads, kv_heads, q_len, kv_len, kv_stride, dim) in shapes {
        let dims = AttnDims {
            batch,
            heads,
            kv_heads,
            q_len,
            kv_len,
            kv_stride,
            dim,
        };
        let nq = batch * heads * q_len * dim;
        let nk = ((batch * kv_heads - 1) * kv_stride + kv_len) * dim;
        let (q, qg) = (randn(&mut rng, nq), randn(&mut rng, nq));
        let (k, kg, v) = (
            randn(&mut rng, nk),
            randn(&mut rng, nk),
            randn(&mut rng, nk),
        );
        let mask: Vec<bool> = (0..batch * kv_len).map(|i| i % 5 != 3).collect();
        // A KV cache kept in f16, and the f32 values it holds for the reference.
        let half = |x: &[f32]| x.iter().map(|&x| f16::from_f32(x)).collect::<Vec<_>>();
        let (k16, kg16, v16) = (half(&k), half(&kg), half(&v));
        let wide = |x: &[f16]| x.iter().map(|x| x.to_f32()).collect::<Vec<_>>();
        let (kw, kgw, vw) = (wide(&k16), wide(&kg16), wide(&v16));
        // Keys from position 0, and a cache that starts late (a Zebra local layer's, trimmed).
        for k_pos0 in [0u64, 37] {
            let pos = AttnPositions {
                q_pos0: k_pos0 + (kv_len - q_len) as u64,
                k_pos0,
                scale: 1.0 / (dim as f32).sqrt(),
            };
            for pattern in patterns(heads) {
                for masked in [false, true] {
                    let extras = AttnExtras {
                        q_grouped: Some(&qg),
                        k_grouped: Some(&kg),
                        key_mask: masked.then_some(mask.as_slice()),
                    };
                    let want = cpu::attention(&q, &k, &v, dims, pos, &pattern, extras);
                    assert!(want.iter().any(|&x| x != 0.0), "{pattern:?}: all zeros");
                    let extras_w = AttnExtras {
                        k_grouped: Some(&kgw),
                        ..extras
                    };
                    let want16 = cpu::attention(&q, &kw, &vw, dims, pos, &pattern, extras_w);
                    let extras16 = AttnExtras {
                        q_grouped: extras.q_grouped,
                        k_grouped: Some(&kg16),
                        key_mask: extras.key_mask,
                    };
                    for isa in ISAS.into_iter().filter(|i| i.available()) {
                        let check = |kv: &str, want: &[f32], got: &[f32]| {
                            let worst = want
                                .iter()
                                .zip(got)
                                .map(|(a, b)| (a - b).abs())
                                .fold(0f32, f32::max);
                            assert!(
                                worst <= 2e-5,
                                "{isa:?} {pattern:?} masked {masked} shape {dims:?} from \
                                 {k_pos0}, {kv} cache: differs by {worst}"
                            );
                        };
                        let got =
                            cpu::attention_blocked_on(isa, &q, &k, &v, dims, pos, &pattern, extras);
                        check("f32", &want, &got);
                        let got16 = cpu::attention_blocked_on(
                            isa, &q, &k16, &v16, dims, pos, &pattern, extras16,
                        );
                        check("f16", &want16, &got16);
                    }
                }
            }
        }
    }
}

/// A prompt read in two chunks gives every row the bits one chunk gives it (the tiled path's
/// arithmetic depends only on the row and the keys it sees), for every pattern.
#[test]
fn tiled_rows_are_the_same_in_any_chunking() {
    let mut rng = StdRng::seed_from_u64(5);
    let (heads, kv_heads, dim, past, q_len, first) = (6, 2, 64, 150, 90, 40);
    let kv_len = past + q_len;
    assert!(first >= cpu::TILED_ROWS && q_len - first >= cpu::TILED_ROWS);
    let (q, qg) = (
        randn(&mut rng, heads * q_len * dim),
        randn(&mut rng, heads * q_len * dim),
    );
    let (k, kg, v) = (
        randn(&mut rng, kv_heads * kv_len * dim),
        randn(&mut rng, kv_heads * kv_len * dim),
        randn(&mut rng, kv_heads * kv_len * dim),
    );
    // Rows `r0..r1` of the chunk, heads-major, and the keys they see (the cache buffer is the
    // whole key array: `kv_stride` stays `kv_len`).
    let rows = |x: &[f32], r0: usize, r1: usize| -> Vec<f32> {
        (0..heads)
            .flat_map(|h| x[(h * q_len + r0) * dim..(h * q_len + r1) * dim].to_vec())
            .collect()
    };
    for isa in ISAS.into_iter().filter(|i| i.available()) {
        let call = |r0: usize, r1: usize, pattern: &Pattern| -> Vec<f32> {
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
            let qg = rows(&qg, r0, r1);
            let extras = AttnExtras {
                q_grouped: Some(&qg),
                k_grouped: Some(&kg),
                key_mask: None,
            };
            cpu::attention_blocked_on(isa, &rows(&q, r0, r1), &k, &v, dims, pos, pattern, extras)
        };
        // Cross-attention sees every key: its keys do not grow with the prompt.
        for pattern in patterns(heads).into_iter().filter(|p| *p != Pattern::Cross) {
            let whole = call(0, q_len, &pattern);
            let (a, b) = (call(0, first, &pattern), call(first, q_len, &pattern));
            for h in 0..heads {
                let want = &whole[h * q_len * dim..(h + 1) * q_len * dim];
                let got: Vec<f32> = a[h * first * dim..(h + 1) * first * dim]
                    .iter()
                    .chain(&b[h * (q_len - first) * dim..(h + 1) * (q_len - first) * dim])
                    .copied()
                    .collect();
                assert!(want == got.as_slice(), "{isa:?} {pattern:?}, head {h}");
            }
        }
    }
}

/// A decoding row (the per-row path, its keys cut into splits) gets the same bits alone, among
/// other rows, in a batch, and on any number of threads: a step's answer does not depend on
/// what else the scheduler packed into it.
#[test]
fn decoding_rows_are_the_same_alone_or_together() {
    let mut rng = StdRng::seed_from_u64(9);
    // Rows 0..5 after 253 keys: the first rows' keys lie in one split, the later ones' in two.
    let (batch, heads, kv_heads, dim, past, q_len) = (2, 6, 2, 64, 253, 5);
    let kv_len = past + q_len;
    assert!(q_len < cpu::TILED_ROWS);
    let nq = batch * heads * q_len * dim;
    let (q, qg) = (randn(&mut rng, nq), randn(&mut rng, nq));
    let nk = batch * kv_heads * kv_len * dim;
    let (k, kg, v) = (
        randn(&mut rng, nk),
        randn(&mut rng, nk),
        randn(&mut rng, nk),
    );
    // Batch row `b`'s query row `r` of every head.
    let one = |x: &[f32], b: usize, r: usize| -> Vec<f32> {
        (0..heads)
            .flat_map(|h| x[((b * heads + h) * q_len + r) * dim..][..dim].to_vec())
            .collect()
    };
    for isa in ISAS.into_iter().filter(|i| i.available()) {
        for pattern in patterns(heads).into_iter().filter(|p| *p != Pattern::Cross) {
            let extras = AttnExtras {
                q_grouped: Some(&qg),
                k_grouped: Some(&kg),
                key_mask: None,
            };
            let dims = AttnDims {
                batch,
                heads,
                kv_heads,
                q_len,
                kv_len,
                kv_stride: kv_len,
                dim,
            };
            let pos = AttnPositions {
                q_pos0: past as u64,
                k_pos0: 0,
                scale: 0.125,
            };
            let whole = cpu::attention_blocked_on(isa, &q, &k, &v, dims, pos, &pattern, extras);
            let single = rayon::ThreadPoolBuilder::new()
                .num_threads(1)
                .build()
                .unwrap()
                .install(|| {
                    cpu::attention_blocked_on(isa, &q, &k, &v, dims, pos, &pattern, extras)
                });
            assert!(whole == single, "{isa:?} {pattern:?}: one thread differs");
            for b in 0..batch {
                for r in 0..q_len {
                    // This row alone, over the keys it sees (its batch row's, in place).
                    let (qr, qgr) = (one(&q, b, r), one(&qg, b, r));
                    let alone = AttnDims {
                        batch: 1,
                        q_len: 1,
                        kv_len: past + r + 1,
                        ..dims
                    };
                    let kv = |x: &[f32]| x[b * kv_heads * kv_len * dim..].to_vec();
                    let (kb, kgb, vb) = (kv(&k), kv(&kg), kv(&v));
                    let got = cpu::attention_blocked_on(
                        isa,
                        &qr,
                        &kb,
                        &vb,
                        alone,
                        AttnPositions {
                            q_pos0: (past + r) as u64,
                            ..pos
                        },
                        &pattern,
                        AttnExtras {
                            q_grouped: Some(&qgr),
                            k_grouped: Some(&kgb),
                            key_mask: None,
                        },
                    );
                    for h in 0..heads {
                        let want = &whole[((b * heads + h) * q_len + r) * dim..][..dim];
                        assert!(
                            want == &got[h * dim..(h + 1) * dim],
                            "{isa:?} {pattern:?}: batch row {b}, row {r}, head {h}"
                        );
                    }
                }
            }
        }
    }
}

/// The sequences of a batched decoding step, each with its own cache (of its own length, read
/// in place from a larger buffer), attended in one pass: each gets what it gets alone, bit for
/// bit.
#[test]
fn many_calls_in_one_pass_equal_each_call_alone() {
    let mut rng = StdRng::seed_from_u64(11);
    let (heads, kv_heads, dim, capacity) = (9, 3, 64, 900);
    // Past keys and new rows per sequence: one split, two, four; one row and short chunks.
    let shapes = [
        (0usize, 1usize),
        (40, 1),
        (300, 1),
        (700, 3),
        (255, 2),
        (1, 1),
    ];
    let seqs: Vec<_> = shapes
        .iter()
        .map(|&(past, rows)| {
            let q = randn(&mut rng, heads * rows * dim);
            let (k, v) = (
                randn(&mut rng, kv_heads * capacity * dim),
                randn(&mut rng, kv_heads * capacity * dim),
            );
            (past, rows, q, k, v)
        })
        .collect();
    let pattern = Pattern::Causal;
    let calls: Vec<cpu::RowsCall> = seqs
        .iter()
        .map(|(past, rows, q, k, v)| cpu::RowsCall {
            q,
            k,
            v,
            dims: AttnDims {
                batch: 1,
                heads,
                kv_heads,
                q_len: *rows,
                kv_len: past + rows,
                kv_stride: capacity,
                dim,
            },
            pos: AttnPositions {
                q_pos0: *past as u64,
                k_pos0: 0,
                scale: 0.125,
            },
            pattern: &pattern,
            extras: AttnExtras::default(),
        })
        .collect();
    let together = cpu::attention_rows_many(&calls);
    for (i, c) in calls.iter().enumerate() {
        let alone = cpu::attention_blocked(c.q, c.k, c.v, c.dims, c.pos, c.pattern, c.extras);
        assert!(
            together[i] == alone,
            "sequence {i} differs from itself alone"
        );
    }
}
