//! The cuDNN graph interpreted on the CPU, operation by operation as the backend defines them,
//! against the CPU reference: what a GPU run cannot be spared (whether cuDNN's engine accepts
//! the graph) is all that is left to it.

use std::collections::HashMap;

use candle_core::{Device, Tensor};

use super::*;
use crate::{attention, AttentionOptions, Pattern};

/// A dense 4-D array.
#[derive(Clone)]
struct Arr {
    dims: [usize; 4],
    data: Vec<f32>,
}

impl Arr {
    fn at(&self, i: [usize; 4]) -> f32 {
        // Size-1 axes broadcast.
        let j: Vec<usize> = (0..4)
            .map(|a| if self.dims[a] == 1 { 0 } else { i[a] })
            .collect();
        let d = self.dims;
        self.data[((j[0] * d[1] + j[1]) * d[2] + j[2]) * d[3] + j[3]]
    }
}

fn dims_of(t: &TensorDesc) -> [usize; 4] {
    t.dims.map(|x| x as usize)
}

fn each(d: [usize; 4]) -> impl Iterator<Item = [usize; 4]> {
    (0..d[0]).flat_map(move |a| {
        (0..d[1])
            .flat_map(move |b| (0..d[2]).flat_map(move |c| (0..d[3]).map(move |e| [a, b, c, e])))
    })
}

/// The largest absolute difference of two equally long outputs.
fn max_diff(a: &[f32], b: &[f32]) -> f32 {
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0f32, f32::max)
}

/// Rounds to the tensor's element type, as the engine stores it.
fn round(dt: DataType, x: f32) -> f32 {
    match dt {
        DataType::Bf16 => half::bf16::from_f32(x).to_f32(),
        DataType::Half => half::f16::from_f32(x).to_f32(),
        _ => x,
    }
}

/// Normal values already rounded to the I/O type, as they reach cuDNN.
fn random_in(dtype: DataType, shape: (usize, usize, usize, usize)) -> Tensor {
    let dev = Device::Cpu;
    let t = Tensor::randn(0f32, 1.0, shape, &dev).unwrap();
    let v: Vec<f32> = t.flatten_all().unwrap().to_vec1().unwrap();
    let v: Vec<f32> = v.into_iter().map(|x| round(dtype, x)).collect();
    Tensor::from_vec(v, shape, &dev).unwrap()
}

/// Runs `graph` on `inputs` (uid -> flat buffer read through the tensor's strides) and the
/// by-value scalars: every tensor's value, by uid.
fn interpret(
    graph: &SdpaGraph,
    inputs: &HashMap<i64, Vec<f32>>,
    scalars: &[(i64, Scalar)],
) -> HashMap<i64, Arr> {
    let mut vals: HashMap<i64, Arr> = HashMap::new();
    for t in &graph.tensors {
        if t.by_value {
            let (_, v) = scalars
                .iter()
                .find(|(u, _)| *u == t.uid)
                .expect("scalar value");
            let x = match v {
                Scalar::F32(x) => *x,
                Scalar::I32(x) => *x as f32,
            };
            vals.insert(
                t.uid,
                Arr {
                    dims: [1; 4],
                    data: vec![x],
                },
            );
        } else if let Some(buf) = inputs.get(&t.uid) {
            let d = dims_of(t);
            let data = each(d)
                .map(|i| {
                    let off: i64 = (0..4).map(|a| i[a] as i64 * t.strides[a]).sum();
                    buf[off as usize]
                })
                .collect();
            vals.insert(t.uid, Arr { dims: d, data });
        }
    }
    for op in &graph.ops {
        match op {
            Op::Matmul { a, b, c } => {
                let (x, y) = (&vals[a], &vals[b]);
                let out = graph.tensor(*c).unwrap();
                let d = dims_of(out);
                assert_eq!(x.dims[1] % y.dims[1], 0, "grouped heads");
                let rep = x.dims[1] / y.dims[1];
                let k = x.dims[3];
                assert_eq!(k, y.dims[2]);
                let data = each(d)
                    .map(|[n, h, m, j]| {
                        let s: f32 = (0..k)
                            .map(|i| x.at([n, h, m, i]) * y.at([n, h / rep, i, j]))
                            .sum();
                        round(out.dtype, s)
                    })
                    .collect();
                vals.insert(*c, Arr { dims: d, data });
            }
            Op::Pointwise {
                mode,
                x,
                b,
                t,
                y,
                axis,
                ..
            } => {
                let out = graph.tensor(*y).unwrap();
                let d = dims_of(out);
                let (xa, ba, ta) = (&vals[x], b.map(|u| &vals[&u]), t.map(|u| &vals[&u]));
                let data = each(d)
                    .map(|i| {
                        let xv = xa.at(i);
                        let bv = || ba.expect("second input").at(i);
                        let v = match mode {
                            Pointwise::Add => xv + bv(),
                            Pointwise::Sub => xv - bv(),
                            Pointwise::Mul => xv * bv(),
                            Pointwise::Div => xv / bv(),
                            Pointwise::Exp => xv.exp(),
                            Pointwise::Log => xv.ln(),
                            Pointwise::CmpGe => (xv >= bv()) as u8 as f32,
                            Pointwise::CmpGt => (xv > bv()) as u8 as f32,
                            Pointwise::GenIndex => i[axis.expect("axis") as usize] as f32,
                            Pointwise::BinarySelect => {
                                if ta.expect("mask input").at(i) != 0.0 {
                                    xv
                                } else {
                                    bv()
                                }
                            }
                        };
                        round(out.dtype, v)
                    })
                    .collect();
                vals.insert(*y, Arr { dims: d, data });
            }
            Op::Reduction { max, x, y } => {
                let xa = &vals[x];
                let d = dims_of(graph.tensor(*y).unwrap());
                assert_eq!(d[3], 1);
                let data = each(d)
                    .map(|[n, h, m, _]| {
                        let it = (0..xa.dims[3]).map(|j| xa.at([n, h, m, j]));
                        if *max {
                            it.fold(f32::NEG_INFINITY, f32::max)
                        } else {
                            it.sum()
                        }
                    })
                    .collect();
                vals.insert(*y, Arr { dims: d, data });
            }
        }
    }
    vals
}

/// The key of a call with its statistics written out: (batch, heads, kv heads, width),
/// (queries, keys, capacity), (mask, window).
fn key_of(
    dtype: DataType,
    (b, h, hk, d): (usize, usize, usize, usize),
    (sq, skv, cap): (usize, usize, usize),
    (mask, window): (SdpaMask, i64),
) -> SdpaKey {
    SdpaKey {
        dtype,
        batch: b as i64,
        heads: h as i64,
        kv_heads: hk as i64,
        q_len: sq as i64,
        kv_len: skv as i64,
        kv_stride: cap as i64,
        dim: d as i64,
        mask,
        window,
        stats: true,
        batch_layout: SdpaBatch::Packed,
    }
}

/// A case: the graph against `attention` on the CPU, queries packed, keys and values inside a
/// cache buffer of `cap` rows a head.
#[allow(clippy::too_many_arguments)]
fn check(
    dtype: DataType,
    (b, h, hk, d): (usize, usize, usize, usize),
    (sq, skv, cap): (usize, usize, usize),
    pattern: Pattern,
    (q_pos0, k_pos0): (u64, u64),
    tol: f32,
) {
    let mask = sdpa_mask(&pattern, q_pos0, k_pos0, sq, skv, d, false).expect("eligible");
    let key = key_of(
        dtype,
        (b, h, hk, d),
        (sq, skv, cap),
        (mask, sdpa_window(&pattern)),
    );
    let graph = sdpa_graph(&key);
    // Inputs already in the I/O type, as they reach cuDNN.
    let rnd = |shape| random_in(dtype, shape);
    let q = rnd((b, h, sq, d));
    let kbuf = rnd((b, hk, cap, d));
    let vbuf = rnd((b, hk, cap, d));
    let flat = |t: &Tensor| -> Vec<f32> { t.flatten_all().unwrap().to_vec1().unwrap() };
    let scale = 1.0 / (d as f32).sqrt();
    let inputs = HashMap::from([
        (uid::Q, flat(&q)),
        (uid::KT, flat(&kbuf)),
        (uid::V, flat(&vbuf)),
    ]);
    let vals = interpret(&graph, &inputs, &graph.scalars(&key, scale));
    let got = &vals[&uid::O];
    let mut opts = AttentionOptions::new(pattern.clone());
    opts.q_pos0 = q_pos0;
    opts.k_pos0 = k_pos0;
    let (k, v) = (
        kbuf.narrow(2, 0, skv).unwrap(),
        vbuf.narrow(2, 0, skv).unwrap(),
    );
    let want = flat(&attention(&q, &k, &v, opts).unwrap());
    let worst = max_diff(&got.data, &want);
    assert!(
        worst <= tol,
        "{mask:?} {dtype:?}: max |O - reference| {worst} > {tol}"
    );

    // The statistics, written out: log-sum-exp of the scaled visible scores.
    let stats = uid::STATS;
    let (qv, kv) = (flat(&q), flat(&kbuf));
    for (n, hh, r) in [(0, 0, 0), (b - 1, h - 1, sq - 1), (0, h / 2, sq / 2)] {
        let i = q_pos0 + r as u64;
        let scores: Vec<f32> = (0..skv)
            .filter(|&c| crate::visible(&pattern, hh, i, k_pos0 + c as u64))
            .map(|c| {
                let kh = hh / (h / hk);
                (0..d)
                    .map(|x| {
                        qv[((n * h + hh) * sq + r) * d + x] * kv[((n * hk + kh) * cap + c) * d + x]
                    })
                    .sum::<f32>()
                    * scale
            })
            .collect();
        let m = scores.iter().cloned().fold(f32::NEG_INFINITY, f32::max);
        let lse = m + scores.iter().map(|s| (s - m).exp()).sum::<f32>().ln();
        let got = vals[&stats].at([n, hh, r, 0]);
        assert!(
            (got - lse).abs() <= 1e-3 * (1.0 + lse.abs()),
            "stats {got} vs {lse}"
        );
    }
}

#[test]
fn the_graph_computes_what_the_cpu_reference_computes() {
    for (dtype, tol) in [(DataType::Bf16, 2e-2), (DataType::Half, 3e-3)] {
        // (batch, heads, kv heads, width), (queries, keys, capacity), pattern, positions.
        let cases = [
            // Prefill: queries and keys from the same position (not 0: the mask is relative).
            ((2, 4, 2, 16), (37, 37, 48), Pattern::Causal, (5, 5)),
            // A prompt chunk after a cache: the queries are the keys' last 19 positions.
            ((1, 4, 1, 16), (19, 40, 64), Pattern::Causal, (21, 0)),
            // Zebra's local window, square and after a cache (keys trimmed to start late).
            (
                (2, 4, 2, 16),
                (37, 37, 48),
                Pattern::Local { window: 5 },
                (5, 5),
            ),
            (
                (1, 4, 2, 16),
                (19, 30, 64),
                Pattern::Local { window: 13 },
                (41, 30),
            ),
            // CAPE's cross-attention: every key, multi-head.
            ((2, 3, 3, 8), (17, 23, 23), Pattern::Cross, (0, 0)),
        ];
        for (dims, lens, pattern, positions) in cases {
            check(dtype, dims, lens, pattern, positions, tol);
        }
    }
}

#[test]
fn the_graph_is_well_formed() {
    for (mask, stats) in [
        (SdpaMask::None, false),
        (SdpaMask::Causal, false),
        (SdpaMask::CausalBottomRight, true),
        (SdpaMask::CausalShifted { shift: -48 }, true),
    ] {
        let key = SdpaKey {
            dtype: DataType::Bf16,
            batch: 2,
            heads: 32,
            kv_heads: 8,
            q_len: 100,
            kv_len: 257,
            kv_stride: 512,
            dim: 128,
            mask,
            window: if mask == SdpaMask::None { 0 } else { 64 },
            stats,
            batch_layout: SdpaBatch::Packed,
        };
        let g = sdpa_graph(&key);
        let mut uids: Vec<i64> = g.tensors.iter().map(|t| t.uid).collect();
        uids.sort();
        uids.dedup();
        assert_eq!(uids.len(), g.tensors.len(), "unique uids");
        // Every operation reads graph inputs or what an earlier one wrote, and writes a virtual
        // tensor, the output excepted.
        let mut ready: Vec<i64> = g
            .tensors
            .iter()
            .filter(|t| !t.is_virtual)
            .map(|t| t.uid)
            .collect();
        for op in &g.ops {
            let (ins, out) = match op {
                Op::Matmul { a, b, c } => (vec![*a, *b], *c),
                Op::Pointwise { x, b, t, y, .. } => {
                    (std::iter::once(*x).chain(*b).chain(*t).collect(), *y)
                }
                Op::Reduction { x, y, .. } => (vec![*x], *y),
            };
            for i in ins {
                assert!(ready.contains(&i), "{op:?} reads {i} before it is written");
            }
            let written = out == uid::O || (stats && out == uid::STATS);
            assert_eq!(g.tensor(out).unwrap().is_virtual, !written, "{op:?}");
            ready.push(out);
        }
        for t in g.tensors.iter().filter(|t| t.by_value) {
            assert_eq!((t.dims, t.strides), ([1; 4], [1; 4]));
        }
        let (k, v) = (g.tensor(uid::KT).unwrap(), g.tensor(uid::V).unwrap());
        assert_eq!(
            k.strides,
            [v.strides[0], v.strides[1], v.strides[3], v.strides[2]]
        );
        assert_eq!(k.dims, [2, 8, 128, 257]);
        // The probabilities bmm2 reads are in the I/O type; everything else in f32 or ints.
        let Some(Op::Matmul { a: p, .. }) = g.ops.last() else {
            panic!("bmm2 last")
        };
        assert_eq!(g.tensor(*p).unwrap().dtype, DataType::Bf16);
    }
}

#[test]
fn only_what_the_graph_expresses_goes_to_cudnn() {
    use crate::pattern::{scca_rules, SccaKind};
    let m = |p: &Pattern, qp, kp, sq, skv, d, extras| sdpa_mask(p, qp, kp, sq, skv, d, extras);
    assert_eq!(
        m(&Pattern::Causal, 0, 0, 64, 64, 128, false),
        Some(SdpaMask::Causal)
    );
    assert_eq!(
        m(&Pattern::Causal, 100, 0, 28, 128, 64, false),
        Some(SdpaMask::CausalBottomRight)
    );
    assert_eq!(
        m(&Pattern::Cross, 0, 0, 16, 9, 128, false),
        Some(SdpaMask::None)
    );
    // Zebra's window: the causal masks and a left bound. Decoding rows (a plan a length), a
    // padding mask, an unsupported width, queries neither square nor at the tail, or any other
    // pattern: Capstan's kernels.
    assert_eq!(m(&Pattern::Cross, 0, 0, 4, 9, 128, false), None);
    assert_eq!(m(&Pattern::Causal, 99, 0, 1, 100, 128, false), None);
    assert_eq!(m(&Pattern::Causal, 99, 0, 1, 100, 128, false), None);
    assert_eq!(m(&Pattern::Cross, 0, 0, 16, 9, 128, true), None);
    assert_eq!(m(&Pattern::Causal, 0, 0, 64, 64, 256, false), None);
    assert_eq!(m(&Pattern::Causal, 0, 0, 64, 64, 60, false), None);
    assert_eq!(m(&Pattern::Causal, 10, 0, 28, 128, 64, false), None);
    assert_eq!(
        m(&Pattern::Local { window: 8 }, 0, 0, 64, 64, 64, false),
        Some(SdpaMask::Causal)
    );
    assert_eq!(sdpa_window(&Pattern::Local { window: 8 }), 8);
    assert_eq!(sdpa_window(&Pattern::Causal), 0);
    let scca = Pattern::Scca(scca_rules(SccaKind::Fixed, 16, 4));
    assert_eq!(m(&scca, 0, 0, 64, 64, 64, false), None);
}

/// The merge of two passes by their statistics, as attention_merge.cu computes it: a pass whose
/// row saw no key (statistics not finite) adds nothing.
fn merge(o1: f32, l1: f32, o2: f32, l2: f32) -> f32 {
    if !l2.is_finite() {
        return o1;
    }
    if !l1.is_finite() {
        return o2;
    }
    let m = l1.max(l2);
    let (w1, w2) = ((l1 - m).exp(), (l2 - m).exp());
    (o1 * w1 + o2 * w2) / (w1 + w2)
}

/// SelfExtend as two graphs (near keys with the normal rotations and a window, far keys with
/// the grouped ones and a shifted diagonal) merged by their statistics, against the CPU
/// reference's SelfExtend: square, and a chunk after a cache.
#[test]
fn selfextend_as_two_passes_computes_what_the_cpu_reference_computes() {
    for (dtype, tol) in [(DataType::Bf16, 2e-2), (DataType::Half, 3e-3)] {
        for ((sq, skv, cap), (q_pos0, k_pos0), neighbor) in
            [((40, 40, 48), (0, 0), 7), ((20, 50, 64), (30, 0), 9)]
        {
            let (b, h, hk, d) = (1, 4, 2, 16);
            let pattern = Pattern::SelfExtend { neighbor, group: 3 };
            let (near, window, far) =
                selfextend_masks(&pattern, q_pos0, k_pos0, sq, skv, d, false).expect("eligible");
            let rnd = |shape| random_in(dtype, shape);
            let (q, qg) = (rnd((b, h, sq, d)), rnd((b, h, sq, d)));
            let (kbuf, kgbuf, vbuf) = (
                rnd((b, hk, cap, d)),
                rnd((b, hk, cap, d)),
                rnd((b, hk, cap, d)),
            );
            let flat = |t: &Tensor| -> Vec<f32> { t.flatten_all().unwrap().to_vec1().unwrap() };
            let scale = 1.0 / (d as f32).sqrt();
            let run = |mask, window, q: &Tensor, k: &Tensor| {
                let key = key_of(dtype, (b, h, hk, d), (sq, skv, cap), (mask, window));
                let graph = sdpa_graph(&key);
                let inputs =
                    HashMap::from([(uid::Q, flat(q)), (uid::KT, flat(k)), (uid::V, flat(&vbuf))]);
                let mut vals = interpret(&graph, &inputs, &graph.scalars(&key, scale));
                (
                    vals.remove(&uid::O).unwrap(),
                    vals.remove(&uid::STATS).unwrap(),
                )
            };
            let (o1, l1) = run(near, window, &q, &kbuf);
            let (o2, l2) = run(far, 0, &qg, &kgbuf);
            let got: Vec<f32> = o1
                .data
                .iter()
                .zip(&o2.data)
                .enumerate()
                .map(|(i, (a, c))| {
                    let row = i / d;
                    merge(*a, l1.data[row], *c, l2.data[row])
                })
                .collect();
            let mut opts = AttentionOptions::new(pattern);
            opts.q_pos0 = q_pos0;
            opts.k_pos0 = k_pos0;
            let view = |t: &Tensor| t.narrow(2, 0, skv).unwrap();
            opts.q_grouped = Some(qg.clone());
            opts.k_grouped = Some(view(&kgbuf));
            let want = flat(&attention(&q, &view(&kbuf), &view(&vbuf), opts).unwrap());
            let worst = max_diff(&got, &want);
            assert!(
                worst <= tol,
                "SelfExtend {dtype:?} {:?}: {worst}",
                (sq, skv, q_pos0)
            );
        }
    }
}

/// SCCA's chunked heads as the batched calls of `crate::scca_calls`: each call's graph run on
/// the queries, keys and values read in place through its strides, its output scattered
/// through them into one buffer (as cuDNN writes it), against the CPU reference's SCCA —
/// SCCA_fixed with a partial last chunk, SCCA_flow, and shifts past a chunk and not a
/// multiple of it in a prompt chunk that starts mid-chunk after 40 cached keys; two
/// sequences, grouped heads, keys and values in a cache of larger capacity.
#[test]
fn scca_as_batched_chunk_calls_computes_what_the_cpu_reference_computes() {
    use crate::pattern::{scca_rules, HeadRule, SccaKind};
    use crate::scca_calls::scca_calls;
    let (b, h, hk, d) = (2, 8, 2, 16);
    let odd_shifts: Vec<HeadRule> = scca_rules(SccaKind::Fixed, 32, h)
        .into_iter()
        .enumerate()
        .map(|(i, r)| HeadRule {
            shift: if i < 4 { 40 } else { 9 },
            ..r
        })
        .collect();
    let cases = [
        (scca_rules(SccaKind::Fixed, 32, h), (88, 88, 96), 0),
        (
            scca_rules(SccaKind::Flow { groups: 2 }, 16, h),
            (96, 96, 96),
            0,
        ),
        (odd_shifts, (72, 112, 120), 40),
    ];
    for (dtype, tol) in [(DataType::Bf16, 2e-2), (DataType::Half, 3e-3)] {
        for (rules, (sq, skv, cap), q_pos0) in cases.clone() {
            let rnd = |shape| random_in(dtype, shape);
            let q = rnd((b, h, sq, d));
            let (kbuf, vbuf) = (rnd((b, hk, cap, d)), rnd((b, hk, cap, d)));
            let flat = |t: &Tensor| -> Vec<f32> { t.flatten_all().unwrap().to_vec1().unwrap() };
            let (qv, kv, vv) = (flat(&q), flat(&kbuf), flat(&vbuf));
            let scale = 1.0 / (d as f32).sqrt();
            let mut base = key_of(dtype, (b, h, hk, d), (sq, skv, cap), (SdpaMask::None, 0));
            base.stats = false;
            let calls = scca_calls(&rules, &base, q_pos0, 0).expect("expressible");
            let mut got = vec![f32::NAN; b * h * sq * d];
            for call in &calls {
                let graph = sdpa_graph(&call.key);
                let (qa, ka) = (call.q_row as usize * d, call.kv_row as usize * d);
                let inputs = HashMap::from([
                    (uid::Q, qv[qa..].to_vec()),
                    (uid::KT, kv[ka..].to_vec()),
                    (uid::V, vv[ka..].to_vec()),
                ]);
                let vals = interpret(&graph, &inputs, &graph.scalars(&call.key, scale));
                let o = graph.tensor(uid::O).unwrap();
                for (x, i) in vals[&uid::O].data.iter().zip(each(dims_of(o))) {
                    let at: i64 = (0..4).map(|a| i[a] as i64 * o.strides[a]).sum();
                    got[qa + at as usize] = *x;
                }
            }
            assert!(got.iter().all(|x| x.is_finite()), "a row no call wrote");
            let mut opts = AttentionOptions::new(Pattern::Scca(rules.clone()));
            opts.q_pos0 = q_pos0;
            let view = |t: &Tensor| t.narrow(2, 0, skv).unwrap();
            let want = flat(&attention(&q, &view(&kbuf), &view(&vbuf), opts).unwrap());
            let worst = max_diff(&got, &want);
            assert!(
                worst <= tol,
                "SCCA {dtype:?} {:?}, {} calls: {worst}",
                (sq, skv, q_pos0),
                calls.len()
            );
        }
    }
}
