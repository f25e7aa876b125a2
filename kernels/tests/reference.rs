//! The CPU references against naive f64 implementations that build each pattern's dense mask
//! explicitly from its paper's definition (no tiles, no key ranges, no shared rule code).

use candle_core::{DType, Device, Tensor};
use capstan_kernels::cpu::{self, AttnDims, AttnExtras, AttnPositions};
use capstan_kernels::{scca_rules, AttentionOptions, Pattern, SccaKind};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

fn randn(rng: &mut StdRng, n: usize) -> Vec<f32> {
    (0..n).map(|_| rng.gen_range(-2.0f32..2.0)).collect()
}

/// Naive attention: scores from `score(b, h, i_row, key_row)` (None = masked), dense softmax
/// in f64; fully masked rows give zeros.
#[allow(clippy::type_complexity)]
fn naive(
    v: &[f32],
    dims: AttnDims,
    score: &dyn Fn(usize, usize, usize, usize) -> Option<f64>,
) -> Vec<f64> {
    let AttnDims {
        batch,
        heads,
        kv_heads,
        q_len,
        kv_len,
        dim,
        ..
    } = dims;
    let mut out = vec![0f64; batch * heads * q_len * dim];
    for b in 0..batch {
        for h in 0..heads {
            let kh = h / (heads / kv_heads);
            for r in 0..q_len {
                let s: Vec<Option<f64>> = (0..kv_len).map(|j| score(b, h, r, j)).collect();
                let m = s
                    .iter()
                    .flatten()
                    .cloned()
                    .fold(f64::NEG_INFINITY, f64::max);
                if m == f64::NEG_INFINITY {
                    continue;
                }
                let e: Vec<f64> = s.iter().map(|x| x.map_or(0.0, |x| (x - m).exp())).collect();
                let z: f64 = e.iter().sum();
                for d in 0..dim {
                    let mut acc = 0.0;
                    for j in 0..kv_len {
                        acc += e[j] * v[((b * kv_heads + kh) * kv_len + j) * dim + d] as f64;
                    }
                    out[((b * heads + h) * q_len + r) * dim + d] = acc / z;
                }
            }
        }
    }
    out
}

fn dot(q: &[f32], k: &[f32], dims: AttnDims, b: usize, h: usize, r: usize, j: usize) -> f64 {
    let d = dims.dim;
    let kh = h / (dims.heads / dims.kv_heads);
    let qo = ((b * dims.heads + h) * dims.q_len + r) * d;
    let ko = ((b * dims.kv_heads + kh) * dims.kv_len + j) * d;
    (0..d)
        .map(|x| q[qo + x] as f64 * k[ko + x] as f64)
        .sum::<f64>()
        / (d as f64).sqrt()
}

fn assert_close(got: &[f32], want: &[f64], tol: f64, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    let mut worst = 0f64;
    for (g, w) in got.iter().zip(want) {
        assert!(g.is_finite(), "{what}: non-finite output");
        worst = worst.max((*g as f64 - w).abs());
    }
    assert!(worst <= tol, "{what}: max abs error {worst:e} > {tol:e}");
}

/// Shapes: (batch, heads, kv_heads, seq, dim).
const SHAPES: [(usize, usize, usize, usize, usize); 4] = [
    (1, 4, 4, 37, 16),
    (2, 8, 2, 70, 32),
    (1, 6, 3, 129, 8),
    (2, 4, 1, 16, 64),
];

struct Case {
    q: Vec<f32>,
    k: Vec<f32>,
    v: Vec<f32>,
    dims: AttnDims,
}

fn case(rng: &mut StdRng, (b, h, kvh, s, d): (usize, usize, usize, usize, usize)) -> Case {
    Case {
        q: randn(rng, b * h * s * d),
        k: randn(rng, b * kvh * s * d),
        v: randn(rng, b * kvh * s * d),
        dims: AttnDims {
            batch: b,
            heads: h,
            kv_heads: kvh,
            q_len: s,
            kv_len: s,
            kv_stride: s,
            dim: d,
        },
    }
}

fn prefill(c: &Case, pattern: &Pattern) -> Vec<f32> {
    let pos = AttnPositions {
        q_pos0: 0,
        k_pos0: 0,
        scale: 1.0 / (c.dims.dim as f32).sqrt(),
    };
    cpu::attention(
        &c.q,
        &c.k,
        &c.v,
        c.dims,
        pos,
        pattern,
        AttnExtras::default(),
    )
}

/// Naive prefill with a mask `allowed(h, i, p)` over absolute positions.
fn naive_masked(c: &Case, allowed: &dyn Fn(usize, usize, usize) -> bool) -> Vec<f64> {
    naive(&c.v, c.dims, &|b, h, r, j| {
        allowed(h, r, j).then(|| dot(&c.q, &c.k, c.dims, b, h, r, j))
    })
}

#[test]
fn causal_prefill_matches_dense_mask() {
    let mut rng = StdRng::seed_from_u64(1);
    for shape in SHAPES {
        let c = case(&mut rng, shape);
        let want = naive_masked(&c, &|_, i, p| p <= i);
        assert_close(&prefill(&c, &Pattern::Causal), &want, 2e-5, "causal");
    }
}

#[test]
fn zebra_local_matches_dense_window_mask() {
    let mut rng = StdRng::seed_from_u64(2);
    for shape in SHAPES {
        let c = case(&mut rng, shape);
        for w in [1usize, 5, 16, 33, 1000] {
            // Equation (7) with the window's `w` most recent tokens (itself included).
            let want = naive_masked(&c, &|_, i, p| p <= i && p + w > i);
            let got = prefill(&c, &Pattern::Local { window: w as u32 });
            assert_close(&got, &want, 2e-5, &format!("zebra w={w} {shape:?}"));
        }
    }
}

#[test]
fn zebra_window_covering_input_is_causal() {
    let mut rng = StdRng::seed_from_u64(3);
    let c = case(&mut rng, (1, 4, 2, 40, 16));
    let full = prefill(&c, &Pattern::Causal);
    assert_eq!(prefill(&c, &Pattern::Local { window: 40 }), full);
    assert_ne!(prefill(&c, &Pattern::Local { window: 39 }), full);
}

/// The SCCA shift of head `h` written from the paper's description (not from `scca_rules`).
fn paper_shift(kind: &str, h: usize, heads: usize, w: usize, groups: usize) -> usize {
    match kind {
        "fixed" => {
            if h < heads / 2 {
                w / 2
            } else {
                0
            }
        }
        "flow" => (h / (heads / groups)) * w,
        _ => unreachable!(),
    }
}

/// Dense SCCA mask by literally rolling the key positions: slot `p + s` holds key `p`; the
/// query at `i` sees the slots of its chunk at or before itself. A head whose chunk holds no
/// such key (the roll brought only later tokens there) attends its own chunk.
fn scca_mask(i: usize, p: usize, w: usize, s: usize) -> bool {
    let sees = |s: usize| {
        let slots = (i / w) * w..(i / w + 1) * w;
        let keys: Vec<usize> = slots
            .filter(|&slot| slot >= s)
            .map(|slot| slot - s)
            .filter(|&key| key <= i)
            .collect();
        keys
    };
    let keys = sees(s);
    let keys = if keys.is_empty() { sees(0) } else { keys };
    keys.contains(&p)
}

#[test]
fn scca_fixed_and_flow_match_rolled_dense_masks() {
    let mut rng = StdRng::seed_from_u64(4);
    for shape in SHAPES {
        let c = case(&mut rng, shape);
        let heads = shape.1;
        for w in [4usize, 8, 12, 64] {
            for (kind, groups) in [("fixed", 1usize), ("flow", 2), ("flow", heads)] {
                let sk = if kind == "fixed" {
                    SccaKind::Fixed
                } else {
                    SccaKind::Flow {
                        groups: groups as u32,
                    }
                };
                let pattern = Pattern::Scca(scca_rules(sk, w as u32, heads));
                let want = naive_masked(&c, &|h, i, p| {
                    scca_mask(i, p, w, paper_shift(kind, h, heads, w, groups))
                });
                let got = prefill(&c, &pattern);
                assert_close(&got, &want, 2e-5, &format!("scca {kind} g={groups} w={w}"));
            }
        }
    }
}

#[test]
fn scca_never_sees_a_later_token() {
    // Poison later values with huge numbers: any leak shows in the output.
    let mut rng = StdRng::seed_from_u64(5);
    let mut c = case(&mut rng, (1, 8, 8, 48, 8));
    let clean = prefill(
        &c,
        &Pattern::Scca(scca_rules(SccaKind::Flow { groups: 4 }, 8, 8)),
    );
    let cut = 20;
    for h in 0..8 {
        for j in cut + 1..48 {
            for d in 0..8 {
                c.v[(h * 48 + j) * 8 + d] = 1e6;
                c.k[(h * 48 + j) * 8 + d] = 50.0;
            }
        }
    }
    for kind in [
        SccaKind::Fixed,
        SccaKind::Flow { groups: 4 },
        SccaKind::Dilated { dilation: 3 },
        SccaKind::Mixed,
    ] {
        let got = prefill(&c, &Pattern::Scca(scca_rules(kind, 8, 8)));
        for h in 0..8 {
            for r in 0..=cut {
                for d in 0..8 {
                    let x = got[(h * 48 + r) * 8 + d];
                    assert!(
                        x.abs() < 10.0,
                        "{kind:?}: row {r} head {h} saw a later token"
                    );
                }
            }
        }
    }
    assert!(clean.iter().all(|x| x.is_finite()));
}

#[test]
fn scca_covering_chunks_are_causal() {
    let mut rng = StdRng::seed_from_u64(6);
    let c = case(&mut rng, (1, 4, 2, 30, 16));
    let full = prefill(&c, &Pattern::Causal);
    // Flow: one chunk covers the input; fixed: half a chunk does (its shift is chunk/2).
    let flow = Pattern::Scca(scca_rules(SccaKind::Flow { groups: 4 }, 30, 4));
    assert_eq!(prefill(&c, &flow), full);
    let fixed = Pattern::Scca(scca_rules(SccaKind::Fixed, 60, 4));
    assert_eq!(prefill(&c, &fixed), full);
    let short = Pattern::Scca(scca_rules(SccaKind::Fixed, 30, 4));
    assert_ne!(prefill(&c, &short), full);
}

#[test]
fn shifted_dilated_and_mixed_match_dense_masks() {
    let mut rng = StdRng::seed_from_u64(7);
    for shape in SHAPES {
        let c = case(&mut rng, shape);
        let heads = shape.1;
        for d in [2usize, 3, 4] {
            let pattern = Pattern::Scca(scca_rules(
                SccaKind::Dilated { dilation: d as u32 },
                0,
                heads,
            ));
            let want = naive_masked(&c, &|h, i, p| p <= i && (p % d == h % d || p == i));
            assert_close(&prefill(&c, &pattern), &want, 2e-5, &format!("sda {d}"));
        }
        // LongMixed (section 4): a quarter SDA_2, a half SDA_4, the rest SCCA_fixed.
        let w = 8;
        let q = heads / 4;
        let want = naive_masked(&c, &|h, i, p| {
            if h < q {
                p <= i && (p % 2 == h % 2 || p == i)
            } else if h < 3 * q {
                p <= i && (p % 4 == h % 4 || p == i)
            } else {
                let shifted = h - 3 * q < (heads - 3 * q) / 2;
                scca_mask(i, p, w, if shifted { w / 2 } else { 0 })
            }
        });
        let got = prefill(
            &c,
            &Pattern::Scca(scca_rules(SccaKind::Mixed, w as u32, heads)),
        );
        assert_close(&got, &want, 2e-5, "mixed");
    }
}

/// RoPE in f64 at one position: rotate-half layout.
fn rope64(x: &[f32], pos: f64, base: f64, factor: f64) -> Vec<f64> {
    let d = x.len();
    let half = d / 2;
    let mut out = vec![0f64; d];
    for f in 0..half {
        let a = pos / factor * base.powf(-((2 * f) as f64) / d as f64);
        let (x1, x2) = (x[f] as f64, x[f + half] as f64);
        out[f] = x1 * a.cos() - x2 * a.sin();
        out[f + half] = x1 * a.sin() + x2 * a.cos();
    }
    out
}

#[test]
fn self_extend_matches_dense_position_matrices() {
    let mut rng = StdRng::seed_from_u64(8);
    let base = 10000.0;
    for shape in SHAPES {
        let c = case(&mut rng, shape);
        let (b, h, kvh, s, d) = shape;
        for (neighbor, group) in [(4usize, 2usize), (8, 3), (16, 4), (1, 5)] {
            // CPU pipeline: the RoPE reference at normal and grouped positions, then attention.
            let inv = cpu::inv_freq(base, d);
            let normal: Vec<u32> = (0..b).flat_map(|_| 0..s as u32).collect();
            let shift = (neighbor - neighbor / group) as u32;
            let gq: Vec<u32> = normal.iter().map(|&p| p / group as u32 + shift).collect();
            let gk: Vec<u32> = normal.iter().map(|&p| p / group as u32).collect();
            let (mut q, mut qg, mut k, mut kg) =
                (c.q.clone(), c.q.clone(), c.k.clone(), c.k.clone());
            cpu::rope(&mut q, (b, h, s, d), &normal, &inv, 1.0);
            cpu::rope(&mut qg, (b, h, s, d), &gq, &inv, 1.0);
            cpu::rope(&mut k, (b, kvh, s, d), &normal, &inv, 1.0);
            cpu::rope(&mut kg, (b, kvh, s, d), &gk, &inv, 1.0);
            let pos = AttnPositions {
                q_pos0: 0,
                k_pos0: 0,
                scale: 1.0 / (d as f32).sqrt(),
            };
            let got = cpu::attention(
                &q,
                &k,
                &c.v,
                c.dims,
                pos,
                &Pattern::SelfExtend {
                    neighbor: neighbor as u32,
                    group: group as u32,
                },
                AttnExtras {
                    q_grouped: Some(&qg),
                    k_grouped: Some(&kg),
                    key_mask: None,
                },
            );
            // Naive: per (i, p) the position pair of the SelfExtend paper, rotated in f64.
            let want = naive(&c.v, c.dims, &|bb, hh, i, p| {
                if p > i {
                    return None;
                }
                let (qp, kp) = if i - p < neighbor {
                    (i as f64, p as f64)
                } else {
                    (
                        (i / group + neighbor - neighbor / group) as f64,
                        (p / group) as f64,
                    )
                };
                let kh = hh / (h / kvh);
                let qo = ((bb * h + hh) * s + i) * d;
                let ko = ((bb * kvh + kh) * s + p) * d;
                let qr = rope64(&c.q[qo..qo + d], qp, base, 1.0);
                let kr = rope64(&c.k[ko..ko + d], kp, base, 1.0);
                Some(qr.iter().zip(&kr).map(|(a, b)| a * b).sum::<f64>() / (d as f64).sqrt())
            });
            assert_close(
                &got,
                &want,
                1e-4,
                &format!("selfextend wn={neighbor} G={group}"),
            );
        }
    }
}

#[test]
fn decode_rows_match_the_prefill_definition() {
    let mut rng = StdRng::seed_from_u64(9);
    for shape in SHAPES {
        let c = case(&mut rng, shape);
        let (b, h, kvh, s, d) = shape;
        for (pattern, w) in [
            (Pattern::Causal, s),
            (Pattern::Local { window: 7 }, 7),
            (Pattern::Scca(scca_rules(SccaKind::Fixed, 8, h)), s),
        ] {
            // The last query alone over a cache that keeps only the last `w` keys.
            let keep = w.min(s);
            let take = |x: &[f32], heads: usize, from: usize, len: usize| -> Vec<f32> {
                let mut out = Vec::new();
                for bh in 0..b * heads {
                    out.extend_from_slice(&x[(bh * s + from) * d..(bh * s + from + len) * d]);
                }
                out
            };
            let q1 = take(&c.q, h, s - 1, 1);
            let (k1, v1) = (
                take(&c.k, kvh, s - keep, keep),
                take(&c.v, kvh, s - keep, keep),
            );
            let dims = AttnDims {
                q_len: 1,
                kv_len: keep,
                kv_stride: keep,
                ..c.dims
            };
            let pos = AttnPositions {
                q_pos0: (s - 1) as u64,
                k_pos0: (s - keep) as u64,
                scale: 1.0 / (d as f32).sqrt(),
            };
            let got = cpu::attention(&q1, &k1, &v1, dims, pos, &pattern, AttnExtras::default());
            let full = prefill(&c, &pattern);
            let want: Vec<f64> = take(&full, h, s - 1, 1).iter().map(|&x| x as f64).collect();
            assert_close(&got, &want, 1e-6, &format!("decode {pattern:?}"));
            // The same keys read in place from the whole buffer (a KV cache's view): heads
            // `s` rows apart, starting `s - keep` rows in.
            let view = AttnDims {
                kv_stride: s,
                ..dims
            };
            let from = (s - keep) * d;
            let got = cpu::attention(
                &q1,
                &c.k[from..],
                &c.v[from..],
                view,
                pos,
                &pattern,
                AttnExtras::default(),
            );
            assert_close(&got, &want, 1e-6, &format!("decode in place {pattern:?}"));
        }
    }
}

#[test]
fn cross_attention_with_key_padding() {
    let mut rng = StdRng::seed_from_u64(10);
    for (b, h, kvh, sq, t, d) in [(2, 4, 2, 5, 33, 16), (3, 2, 2, 1, 17, 32)] {
        let q = randn(&mut rng, b * h * sq * d);
        let k = randn(&mut rng, b * kvh * t * d);
        let v = randn(&mut rng, b * kvh * t * d);
        let mut mask: Vec<bool> = (0..b * t).map(|_| rng.gen_bool(0.7)).collect();
        mask[t..2 * t].iter_mut().for_each(|m| *m = false); // a row with no context at all
        let dims = AttnDims {
            batch: b,
            heads: h,
            kv_heads: kvh,
            q_len: sq,
            kv_len: t,
            kv_stride: t,
            dim: d,
        };
        let pos = AttnPositions {
            q_pos0: 0,
            k_pos0: 0,
            scale: 1.0 / (d as f32).sqrt(),
        };
        let got = cpu::attention(
            &q,
            &k,
            &v,
            dims,
            pos,
            &Pattern::Cross,
            AttnExtras {
                key_mask: Some(&mask),
                ..Default::default()
            },
        );
        let want = naive(&v, dims, &|bb, hh, r, j| {
            mask[bb * t + j].then(|| dot(&q, &k, dims, bb, hh, r, j))
        });
        assert_close(&got, &want, 2e-5, "cross");
    }
}

#[test]
fn ops_run_the_references_in_every_dtype() -> candle_core::Result<()> {
    let mut rng = StdRng::seed_from_u64(11);
    let dev = Device::Cpu;
    let (b, h, kvh, s, d) = (2, 4, 2, 19, 32);
    let c = case(&mut rng, (b, h, kvh, s, d));
    let want = naive_masked(&c, &|_, i, p| p <= i && p + 6 > i);
    for (dtype, tol) in [(DType::F32, 2e-5), (DType::BF16, 4e-2), (DType::F16, 5e-3)] {
        let t = |x: &[f32], heads: usize| {
            Tensor::from_slice(x, (b, heads, s, d), &dev).and_then(|t| t.to_dtype(dtype))
        };
        let out = capstan_kernels::attention(
            &t(&c.q, h)?,
            &t(&c.k, kvh)?,
            &t(&c.v, kvh)?,
            AttentionOptions::new(Pattern::Local { window: 6 }),
        )?;
        assert_eq!(out.dtype(), dtype);
        let got = out.to_dtype(DType::F32)?.flatten_all()?.to_vec1::<f32>()?;
        assert_close(&got, &want, tol, &format!("op {dtype:?}"));
    }
    Ok(())
}

/// f32 queries against keys and values kept in f16 (views of a KV cache's larger buffer) are
/// read in place, alone and in a batched pass beside an f32 cache: each call gets what the
/// reference computes from the f16 values widened.
#[test]
fn ops_read_an_f16_cache_in_place_alone_and_together() -> candle_core::Result<()> {
    let mut rng = StdRng::seed_from_u64(13);
    let dev = Device::Cpu;
    let (h, kvh, t, cap, d) = (6, 2, 300, 384, 32);
    let q = randn(&mut rng, h * d);
    let (k, v) = (
        randn(&mut rng, kvh * cap * d),
        randn(&mut rng, kvh * cap * d),
    );
    let buffer = |x: &[f32], dtype| Tensor::from_slice(x, (1, kvh, cap, d), &dev)?.to_dtype(dtype);
    let view = |x: &[f32], dtype| buffer(x, dtype)?.narrow(2, 0, t);
    let qt = Tensor::from_slice(&q, (1, h, 1, d), &dev)?;
    let opts = || {
        let mut o = AttentionOptions::new(Pattern::Causal);
        o.q_pos0 = t as u64 - 1;
        o
    };
    let want = |dtype| -> candle_core::Result<Vec<f32>> {
        let wide = |x: &[f32]| -> candle_core::Result<Vec<f32>> {
            buffer(x, dtype)?
                .to_dtype(DType::F32)?
                .flatten_all()?
                .to_vec1::<f32>()
        };
        let dims = AttnDims {
            batch: 1,
            heads: h,
            kv_heads: kvh,
            q_len: 1,
            kv_len: t,
            kv_stride: cap,
            dim: d,
        };
        let pos = AttnPositions {
            q_pos0: t as u64 - 1,
            k_pos0: 0,
            scale: 1.0 / (d as f32).sqrt(),
        };
        let (kw, vw) = (wide(&k)?, wide(&v)?);
        Ok(cpu::attention(
            &q,
            &kw,
            &vw,
            dims,
            pos,
            &Pattern::Causal,
            AttnExtras::default(),
        ))
    };
    let (want32, want16) = (want(DType::F32)?, want(DType::F16)?);
    let gap = want32
        .iter()
        .zip(&want16)
        .map(|(a, b)| (a - b).abs())
        .fold(0f32, f32::max);
    assert!(gap > 1e-5, "f16 rounding changes the output (by {gap})");
    let close = |got: &Tensor, want: &[f32], what: &str| -> candle_core::Result<()> {
        let got = got.flatten_all()?.to_vec1::<f32>()?;
        let worst = got
            .iter()
            .zip(want)
            .map(|(a, b)| (a - b).abs())
            .fold(0f32, f32::max);
        assert!(worst <= 2e-6, "{what}: differs by {worst}");
        Ok(())
    };
    let (k16, v16) = (view(&k, DType::F16)?, view(&v, DType::F16)?);
    let alone = capstan_kernels::attention(&qt, &k16, &v16, opts())?;
    assert_eq!(alone.dtype(), DType::F32);
    close(&alone, &want16, "f16 alone")?;
    let outs = capstan_kernels::attention_many(vec![
        (qt.clone(), k16, v16, opts()),
        (
            qt.clone(),
            view(&k, DType::F32)?,
            view(&v, DType::F32)?,
            opts(),
        ),
    ])?;
    close(&outs[0], &want16, "f16 together")?;
    close(&outs[1], &want32, "f32 together")?;
    Ok(())
}

#[test]
fn fused_rope_matches_f64_rotation() -> candle_core::Result<()> {
    let mut rng = StdRng::seed_from_u64(12);
    let dev = Device::Cpu;
    for (b, h, kvh, s, d, base, factor) in [
        (1, 4, 2, 9, 16, 10000.0, 1.0),
        (2, 3, 3, 5, 64, 500000.0, 4.0),
        (2, 2, 1, 7, 8, 10000.0, 2.0),
    ] {
        let q = randn(&mut rng, b * h * s * d);
        let k = randn(&mut rng, b * kvh * s * d);
        let pos: Vec<u32> = (0..b * s).map(|_| rng.gen_range(0..40000)).collect();
        let (qr, kr) = capstan_kernels::rope_qk(
            &Tensor::from_slice(&q, (b, h, s, d), &dev)?,
            &Tensor::from_slice(&k, (b, kvh, s, d), &dev)?,
            &Tensor::from_slice(&pos, (b, s), &dev)?,
            &capstan_kernels::RopeParams::from_base(base, d, factor),
        )?;
        for (x, heads, got) in [(&q, h, qr), (&k, kvh, kr)] {
            let got = got.flatten_all()?.to_vec1::<f32>()?;
            let mut want = Vec::new();
            for bb in 0..b {
                for hh in 0..heads {
                    for ss in 0..s {
                        let o = ((bb * heads + hh) * s + ss) * d;
                        want.extend(rope64(&x[o..o + d], pos[bb * s + ss] as f64, base, factor));
                    }
                }
            }
            // f32 angles of positions up to 40,000: a few ulps of the angle.
            assert_close(&got, &want, 2e-2, "rope");
        }
    }
    Ok(())
}

#[test]
fn rms_norm_residual_matches_f64() -> candle_core::Result<()> {
    let mut rng = StdRng::seed_from_u64(13);
    let dev = Device::Cpu;
    for (rows, dim) in [(1, 8), (5, 64), (3, 1000)] {
        let x = randn(&mut rng, rows * dim);
        let r = randn(&mut rng, rows * dim);
        let w = randn(&mut rng, dim);
        let (sum, normed) = capstan_kernels::rms_norm_residual(
            &Tensor::from_slice(&x, (rows, dim), &dev)?,
            &Tensor::from_slice(&r, (rows, dim), &dev)?,
            &Tensor::from_slice(&w, dim, &dev)?,
            1e-6,
        )?;
        let mut want_sum = Vec::new();
        let mut want_norm = Vec::new();
        for row in 0..rows {
            let s: Vec<f64> = (0..dim)
                .map(|c| x[row * dim + c] as f64 + r[row * dim + c] as f64)
                .collect();
            let ms = s.iter().map(|v| v * v).sum::<f64>() / dim as f64;
            let inv = 1.0 / (ms + 1e-6).sqrt();
            want_norm.extend(s.iter().zip(&w).map(|(v, w)| v * inv * *w as f64));
            want_sum.extend(s);
        }
        assert_close(&sum.flatten_all()?.to_vec1()?, &want_sum, 1e-6, "sum");
        assert_close(&normed.flatten_all()?.to_vec1()?, &want_norm, 1e-5, "rms");
    }
    Ok(())
}
