//! CUDA kernels against the CPU references (needs the `cuda` feature and a GPU; without a
//! device every test prints a note and passes, unless `CAPSTAN_REQUIRE_GPU` is set: then it
//! fails). Run on the GPU machine by scripts/gpu-check.sh (this test binary is in the bundle),
//! or `cargo test --release -p capstan-kernels --features cuda --test gpu -- --nocapture`.
//! Outputs are compared element by element at bf16/f16/f32 tolerances; with
//! `CAPSTAN_KERNELS_POISON` set every output buffer is filled with NaN before the kernel runs,
//! so an element the kernel never wrote fails the comparison.
#![cfg(feature = "cuda")]

use candle_core::{DType, Device, Tensor};
use capstan_kernels::{
    attention, scca_rules, AttentionKernel, AttentionOptions, DecodeKernel, Pattern, SccaKind,
};

fn gpu() -> Option<Device> {
    match std::panic::catch_unwind(|| Device::new_cuda(0)) {
        Ok(Ok(d)) => Some(d),
        _ => {
            assert!(
                std::env::var_os("CAPSTAN_REQUIRE_GPU").is_none(),
                "CAPSTAN_REQUIRE_GPU is set but no CUDA device opened"
            );
            eprintln!("no CUDA device: GPU test skipped");
            None
        }
    }
}

/// The largest difference of `a` from `b` past `relative` times `b`'s magnitude; a value of
/// `a` that is not finite counts as infinitely far.
fn max_diff_past(a: &Tensor, b: &Tensor, relative: f32) -> f32 {
    let flat = |t: &Tensor| {
        t.to_dtype(DType::F32)
            .unwrap()
            .flatten_all()
            .unwrap()
            .to_vec1::<f32>()
            .unwrap()
    };
    flat(a)
        .iter()
        .zip(flat(b))
        .map(|(x, y)| {
            if x.is_finite() {
                ((x - y).abs() - relative * y.abs()).max(0.0)
            } else {
                f32::INFINITY
            }
        })
        .fold(0.0, f32::max)
}

fn max_diff(a: &Tensor, b: &Tensor) -> f32 {
    max_diff_past(a, b, 0.0)
}

/// The largest difference of `a` from `b` past one rounding step of `dtype` at `b`'s
/// magnitude (2^-7 relative for bf16, 2^-10 for f16).
fn max_diff_beyond_step(a: &Tensor, b: &Tensor, dtype: DType) -> f32 {
    let step = if dtype == DType::BF16 {
        2f32.powi(-7)
    } else {
        2f32.powi(-10)
    };
    max_diff_past(a, b, step)
}

#[test]
fn attention_kernels_match_the_cpu_reference() {
    let Some(dev) = gpu() else { return };
    // The CUDA-core kernel, which the others fall back to (cuDNN is the default).
    capstan_kernels::set_attention_kernel(AttentionKernel::CudaCores);
    for (b, h, kvh, s, d) in [(1, 8, 8, 100, 64), (2, 16, 4, 257, 128), (1, 4, 2, 33, 256)] {
        for (dtype, tol) in [(DType::F32, 1e-4), (DType::BF16, 2e-2), (DType::F16, 4e-3)] {
            let q = Tensor::randn(0f32, 1.0, (b, h, s, d), &Device::Cpu).unwrap();
            let k = Tensor::randn(0f32, 1.0, (b, kvh, s, d), &Device::Cpu).unwrap();
            let v = Tensor::randn(0f32, 1.0, (b, kvh, s, d), &Device::Cpu).unwrap();
            let (q, k, v) = (
                q.to_dtype(dtype).unwrap(),
                k.to_dtype(dtype).unwrap(),
                v.to_dtype(dtype).unwrap(),
            );
            let patterns = [
                Pattern::Causal,
                Pattern::Local { window: 37 },
                Pattern::Scca(scca_rules(SccaKind::Fixed, 32, h)),
                Pattern::Scca(scca_rules(SccaKind::Flow { groups: 4 }, 16, h)),
                Pattern::Scca(scca_rules(SccaKind::Mixed, 16, h)),
                Pattern::Cross,
            ];
            for p in patterns {
                let cpu = attention(&q, &k, &v, AttentionOptions::new(p.clone())).unwrap();
                let on = |t: &Tensor| t.to_device(&dev).unwrap();
                let g =
                    attention(&on(&q), &on(&k), &on(&v), AttentionOptions::new(p.clone())).unwrap();
                let diff = max_diff(&g, &cpu);
                assert!(
                    diff <= tol,
                    "{p:?} {dtype:?} {:?}: {diff}",
                    (b, h, kvh, s, d)
                );
            }
            // Decode: one query at the end over the cache.
            let q1 = q.narrow(2, s - 1, 1).unwrap();
            let mut o = AttentionOptions::new(Pattern::Causal);
            o.q_pos0 = (s - 1) as u64;
            let cpu = attention(&q1, &k, &v, o.clone()).unwrap();
            let g = attention(
                &q1.to_device(&dev).unwrap(),
                &k.to_device(&dev).unwrap(),
                &v.to_device(&dev).unwrap(),
                o,
            )
            .unwrap();
            assert!(max_diff(&g, &cpu) <= tol, "decode {dtype:?}");
            // The decoding step reading keys, values and grouped keys in place from KV-cache
            // buffers (rows 7.. of s + 20), with a key padding mask, on the patterns a cache
            // serves: causal, a local window, SelfExtend.
            let in_buffer = |t: &Tensor| {
                let zeros = |n| Tensor::zeros((b, kvh, n, d), dtype, &Device::Cpu).unwrap();
                Tensor::cat(&[&zeros(7), t, &zeros(13)], 2)
                    .unwrap()
                    .to_device(&dev)
                    .unwrap()
                    .narrow(2, 7, s)
                    .unwrap()
            };
            let mask: Vec<u8> = (0..b * s).map(|i| (i % 5 != 3) as u8).collect();
            let mask = Tensor::from_vec(mask, (b, s), &Device::Cpu).unwrap();
            let qg = (&q1 * 0.9).unwrap();
            let kg = (&k * 1.1).unwrap();
            for p in [
                Pattern::Causal,
                Pattern::Local { window: 37 },
                Pattern::SelfExtend {
                    neighbor: 16,
                    group: 4,
                },
            ] {
                let extend = matches!(p, Pattern::SelfExtend { .. });
                let mut o = AttentionOptions::new(p.clone());
                o.q_pos0 = (s - 1) as u64;
                o.key_mask = Some(mask.clone());
                if extend {
                    o.q_grouped = Some(qg.clone());
                    o.k_grouped = Some(kg.clone());
                }
                let cpu = attention(&q1, &k, &v, o.clone()).unwrap();
                let on = |t: &Tensor| t.to_device(&dev).unwrap();
                o.key_mask = Some(on(&mask));
                if extend {
                    o.q_grouped = Some(on(&qg));
                    o.k_grouped = Some(in_buffer(&kg));
                }
                let g = attention(&on(&q1), &in_buffer(&k), &in_buffer(&v), o).unwrap();
                let diff = max_diff(&g, &cpu);
                assert!(diff <= tol, "in-place decode {p:?} {dtype:?}: {diff}");
            }
        }
    }
}

#[test]
fn rope_and_rms_norm_kernels_match_the_cpu_reference() {
    let Some(dev) = gpu() else { return };
    let q = Tensor::randn(0f32, 1.0, (2, 8, 50, 128), &Device::Cpu).unwrap();
    let k = Tensor::randn(0f32, 1.0, (2, 2, 50, 128), &Device::Cpu).unwrap();
    let pos = Tensor::arange(1000u32, 1100u32, &Device::Cpu)
        .unwrap()
        .reshape((2, 50))
        .unwrap();
    let params = capstan_kernels::RopeParams::from_base(500000.0, 128, 2.0);
    let (cq, ck) = capstan_kernels::rope_qk(&q, &k, &pos, &params).unwrap();
    let on = |t: &Tensor| t.to_device(&dev).unwrap();
    let (gq, gk) = capstan_kernels::rope_qk(&on(&q), &on(&k), &on(&pos), &params).unwrap();
    assert!(max_diff(&gq, &cq) < 1e-3 && max_diff(&gk, &ck) < 1e-3);
    let x = Tensor::randn(0f32, 1.0, (7, 4096), &Device::Cpu).unwrap();
    let r = Tensor::randn(0f32, 1.0, (7, 4096), &Device::Cpu).unwrap();
    let w = Tensor::randn(0f32, 1.0, 4096, &Device::Cpu).unwrap();
    let (cs, cn) = capstan_kernels::rms_norm_residual(&x, &r, &w, 1e-5).unwrap();
    let (gs, gn) = capstan_kernels::rms_norm_residual(&on(&x), &on(&r), &on(&w), 1e-5).unwrap();
    assert!(max_diff(&gs, &cs) < 1e-5 && max_diff(&gn, &cn) < 1e-4);
}

/// The tensor-core kernel (attention_mma.cu) against the CPU reference: every pattern, both
/// 16-bit types, head widths 64 and 128, grouped-query heads, rows that do not fill a block, a
/// key padding mask, SelfExtend's two rotations, and a prompt chunk after cached rows (queries
/// from position 40 over keys from 0, as chunked prefill and the prefix cache run it).
#[test]
fn tensor_core_attention_matches_the_cpu_reference() {
    let Some(dev) = gpu() else { return };
    capstan_kernels::set_attention_kernel(AttentionKernel::TensorCores);
    let on = |t: &Tensor| t.to_device(&dev).unwrap();
    for (b, h, kvh, s, d) in [
        (1, 8, 8, 100, 64),
        (2, 16, 4, 257, 128),
        (1, 8, 2, 1030, 128),
    ] {
        for (dtype, tol) in [(DType::BF16, 2e-2), (DType::F16, 4e-3)] {
            let rand = |heads| {
                Tensor::randn(0f32, 1.0, (b, heads, s, d), &Device::Cpu)
                    .unwrap()
                    .to_dtype(dtype)
                    .unwrap()
            };
            let (q, k, v) = (rand(h), rand(kvh), rand(kvh));
            let qg = (&q * 0.9).unwrap();
            let kg = (&k * 1.1).unwrap();
            let mask: Vec<u8> = (0..b * s).map(|i| (i % 7 != 3) as u8).collect();
            let mask = Tensor::from_vec(mask, (b, s), &Device::Cpu).unwrap();
            let patterns = [
                Pattern::Causal,
                Pattern::Local { window: 37 },
                Pattern::SelfExtend {
                    neighbor: 48,
                    group: 4,
                },
                Pattern::Scca(scca_rules(SccaKind::Fixed, 32, h)),
                Pattern::Scca(scca_rules(SccaKind::Flow { groups: 4 }, 16, h)),
                Pattern::Scca(scca_rules(SccaKind::Mixed, 16, h)),
                Pattern::Cross,
            ];
            for p in patterns {
                for (masked, q_from) in [(false, 0), (true, 0), (false, 40)] {
                    let extend = matches!(p, Pattern::SelfExtend { .. });
                    let rows = |t: &Tensor| t.narrow(2, q_from, s - q_from).unwrap();
                    let mut o = AttentionOptions::new(p.clone());
                    o.q_pos0 = q_from as u64;
                    if masked {
                        o.key_mask = Some(mask.clone());
                    }
                    if extend {
                        o.q_grouped = Some(rows(&qg));
                        o.k_grouped = Some(kg.clone());
                    }
                    let cpu = attention(&rows(&q), &k, &v, o.clone()).unwrap();
                    o.key_mask = o.key_mask.as_ref().map(on);
                    o.q_grouped = o.q_grouped.as_ref().map(on);
                    o.k_grouped = o.k_grouped.as_ref().map(on);
                    let g = attention(&on(&rows(&q)), &on(&k), &on(&v), o).unwrap();
                    // The kernel rounds the softmax weights to the input type before the
                    // product with V (as FlashAttention-2 does), the reference keeps them in
                    // f32: an output of magnitude x may differ by about one step of the type
                    // at x, which for bf16 past 2.5 exceeds the absolute tolerance.
                    let diff = max_diff_beyond_step(&g, &cpu, dtype);
                    assert!(
                        diff <= tol,
                        "tensor cores: {p:?} {dtype:?} {:?} masked {masked} from {q_from}: {diff}",
                        (b, h, kvh, s, d)
                    );
                }
            }
        }
    }
    capstan_kernels::set_attention_kernel(AttentionKernel::CudaCores);
}

/// cuDNN's fused attention (kernels/src/sdpa_graph.rs through src/cuda/cudnn.rs) against the
/// CPU reference, in a process of its own choice of kernel: plain causal prefill, a prompt
/// chunk after a cache (the queries at the keys' tail, keys and values read in place from a
/// buffer of larger capacity), either with Zebra's local window, SelfExtend (two passes merged
/// by their statistics), cross-attention, SCCA_fixed and SCCA_flow (batched chunk calls);
/// both 16-bit types, grouped-query heads. Every case must have run on cuDNN (`cudnn_stats`):
/// a silent fallback to Capstan's kernels fails.
/// Without cuDNN on the machine it fails only when `CAPSTAN_REQUIRE_CUDNN` is set.
#[test]
fn cudnn_attention_matches_the_cpu_reference() {
    let Some(dev) = gpu() else { return };
    if let Err(why) = capstan_kernels::cudnn_version() {
        assert!(
            std::env::var_os("CAPSTAN_REQUIRE_CUDNN").is_none(),
            "CAPSTAN_REQUIRE_CUDNN is set but cuDNN did not load: {why}"
        );
        eprintln!("no cuDNN ({why}): test skipped");
        return;
    }
    eprintln!("cuDNN {:?}", capstan_kernels::cudnn_version());
    capstan_kernels::set_attention_kernel(AttentionKernel::Cudnn);
    let on = |t: &Tensor| t.to_device(&dev).unwrap();
    for (b, h, kvh, sq, skv, cap, d) in [
        (1, 8, 8, 128, 128, 128, 64),
        (2, 16, 4, 257, 257, 257, 128),
        (1, 32, 8, 1030, 1030, 1030, 128),
        (1, 8, 2, 64, 320, 512, 128),
    ] {
        for (dtype, tol) in [(DType::BF16, 2e-2), (DType::F16, 4e-3)] {
            let rand = |heads, n| {
                Tensor::randn(0f32, 1.0, (b, heads, n, d), &Device::Cpu)
                    .unwrap()
                    .to_dtype(dtype)
                    .unwrap()
            };
            let q = rand(h, sq);
            let (kbuf, vbuf) = (rand(kvh, cap), rand(kvh, cap));
            // SelfExtend's grouped rotations (its far pass's queries and keys).
            let (qg, kgbuf) = (rand(h, sq), rand(kvh, cap));
            let extend = Pattern::SelfExtend {
                neighbor: 48,
                group: 4,
            };
            // SCCA's chunked heads as batched chunk calls (SCCA_fixed's shifted heads, and
            // SCCA_flow's whole-chunk shifts); where a chunk would have fewer than 16 query
            // rows (257 and 1,030 rows) they run on Capstan's kernels, checked all the same.
            let fixed = Pattern::Scca(scca_rules(SccaKind::Fixed, 32, h));
            let flow = Pattern::Scca(scca_rules(SccaKind::Flow { groups: 2 }, 16, h));
            let scca_on_cudnn = sq % 32 == 0 && (skv - sq) % 32 == 0;
            let cases = [
                (Pattern::Causal, (skv - sq) as u64, false),
                (Pattern::Local { window: 37 }, (skv - sq) as u64, false),
                (extend, (skv - sq) as u64, true),
                (Pattern::Cross, 0, false),
                (Pattern::Cross, 0, true),
                (fixed, (skv - sq) as u64, false),
                (flow, (skv - sq) as u64, false),
            ];
            for (p, q_pos0, cached) in cases {
                let before = capstan_kernels::cudnn_stats().calls;
                let mut o = AttentionOptions::new(p.clone());
                o.q_pos0 = q_pos0;
                let cpu_kv = |t: &Tensor| t.narrow(2, 0, skv).unwrap();
                let two_passes = matches!(p, Pattern::SelfExtend { .. });
                if two_passes {
                    o.q_grouped = Some(qg.clone());
                    o.k_grouped = Some(cpu_kv(&kgbuf));
                }
                let cpu = attention(&q, &cpu_kv(&kbuf), &cpu_kv(&vbuf), o.clone()).unwrap();
                if two_passes {
                    o.q_grouped = Some(on(&qg));
                    o.k_grouped = Some(on(&kgbuf).narrow(2, 0, skv).unwrap());
                }
                // In place: views of device buffers of `cap` rows a head (a KV cache).
                let (gk, gv) = if cached || cap > skv {
                    (
                        on(&kbuf).narrow(2, 0, skv).unwrap(),
                        on(&vbuf).narrow(2, 0, skv).unwrap(),
                    )
                } else {
                    (on(&cpu_kv(&kbuf)), on(&cpu_kv(&vbuf)))
                };
                let g = attention(&on(&q), &gk, &gv, o).unwrap();
                let ran = capstan_kernels::cudnn_stats().calls - before;
                let scca = matches!(p, Pattern::Scca(_));
                assert!(
                    (scca && !scca_on_cudnn) || ran >= if two_passes { 2 } else { 1 },
                    "{p:?} {dtype:?} {:?} fell back to Capstan's kernels: {:?}",
                    (b, h, kvh, sq, skv, cap, d),
                    capstan_kernels::cudnn_stats().refusals
                );
                let diff = max_diff_beyond_step(&g, &cpu, dtype);
                assert!(
                    diff <= tol,
                    "cuDNN: {p:?} {dtype:?} {:?}: {diff}",
                    (b, h, kvh, sq, skv, cap, d)
                );
            }
        }
    }
    let stats = capstan_kernels::cudnn_stats();
    capstan_kernels::set_attention_kernel(AttentionKernel::CudaCores);
    eprintln!(
        "cuDNN: {} calls, {} plans built in {:.3} s",
        stats.calls, stats.plans, stats.plan_seconds
    );
}

/// Decoding rows of many sequences in one launch (attention_decode.cu) against each sequence's
/// CPU attention: caches of different lengths (one key to 1,030) and capacities read in place,
/// grouped-query heads (7 a key head: two blocks of the grouped kernel), head widths 64, 80
/// (not a multiple of 32: the per-head kernel) and 128, every type, every kernel.
#[test]
fn decoding_many_sequences_in_one_launch_matches_the_cpu_reference() {
    let Some(dev) = gpu() else { return };
    let on = |t: &Tensor| t.to_device(&dev).unwrap();
    // The tensor-core kernel where it takes the heads (bf16, f16; 64 or 128 wide), else the
    // grouped kernel it falls back to.
    for kernel in [
        DecodeKernel::PerHead,
        DecodeKernel::Grouped,
        DecodeKernel::TensorCores,
    ] {
        capstan_kernels::set_decode_kernel(kernel);
        for (dtype, tol) in [(DType::F32, 1e-4), (DType::BF16, 2e-2), (DType::F16, 4e-3)] {
            for (h, kvh, d) in [(8, 2, 128), (4, 4, 64), (6, 3, 80), (14, 2, 64)] {
                let lens = [1usize, 17, 300, 1030, 77];
                let rand = |shape: (usize, usize, usize, usize)| {
                    Tensor::randn(0f32, 1.0, shape, &Device::Cpu)
                        .unwrap()
                        .to_dtype(dtype)
                        .unwrap()
                };
                let q = rand((lens.len(), h, 1, d));
                let caches: Vec<(Tensor, Tensor)> = lens
                    .iter()
                    .map(|&n| (rand((1, kvh, n + 64, d)), rand((1, kvh, n + 64, d))))
                    .collect();
                let view = |t: &Tensor, n: usize| t.narrow(2, 0, n).unwrap();
                let cpu_kvs: Vec<_> = caches
                    .iter()
                    .zip(lens)
                    .map(|((k, v), n)| (view(k, n), view(v, n)))
                    .collect();
                let gpu_kvs: Vec<_> = caches
                    .iter()
                    .zip(lens)
                    .map(|((k, v), n)| (view(&on(k), n), view(&on(v), n)))
                    .collect();
                let cpu = capstan_kernels::attention_decode_many(&q, &cpu_kvs, None).unwrap();
                let g = capstan_kernels::attention_decode_many(&on(&q), &gpu_kvs, None).unwrap();
                let diff = max_diff_beyond_step(&g, &cpu, dtype);
                assert!(
                    diff <= tol,
                    "decode many {kernel:?} {dtype:?} {:?}: {diff}",
                    (h, kvh, d)
                );
            }
        }
    }
    capstan_kernels::set_decode_kernel(DecodeKernel::Grouped);
}

/// One decoding row through `attention` on CUDA with the new kernels chosen (the decoding
/// kernel, keys split into ranges):
/// a batch of two at a long context, a cache view of larger capacity, and one sequence whose
/// 5,000 keys are split twenty ways, against the CPU reference.
#[test]
fn decoding_rows_split_over_keys_match_the_cpu_reference() {
    let Some(dev) = gpu() else { return };
    // The decoding kernel serves decoding rows with the new kernels chosen.
    capstan_kernels::set_attention_kernel(AttentionKernel::TensorCores);
    let on = |t: &Tensor| t.to_device(&dev).unwrap();
    for (dtype, tol) in [(DType::F32, 1e-4), (DType::BF16, 2e-2), (DType::F16, 4e-3)] {
        for (b, h, kvh, len, cap, d) in [(2, 8, 2, 3000, 3100, 128), (1, 32, 8, 5000, 5000, 128)] {
            let rand = |shape: (usize, usize, usize, usize)| {
                Tensor::randn(0f32, 1.0, shape, &Device::Cpu)
                    .unwrap()
                    .to_dtype(dtype)
                    .unwrap()
            };
            let q = rand((b, h, 1, d));
            let (k, v) = (rand((b, kvh, cap, d)), rand((b, kvh, cap, d)));
            let mut o = AttentionOptions::new(Pattern::Causal);
            o.q_pos0 = (len - 1) as u64;
            let view = |t: &Tensor| t.narrow(2, 0, len).unwrap();
            let cpu = attention(&q, &view(&k), &view(&v), o.clone()).unwrap();
            let g = attention(&on(&q), &view(&on(&k)), &view(&on(&v)), o).unwrap();
            let diff = max_diff_beyond_step(&g, &cpu, dtype);
            assert!(
                diff <= tol,
                "decoding {dtype:?} {:?}: {diff}",
                (b, h, kvh, len)
            );
        }
    }
    capstan_kernels::set_attention_kernel(AttentionKernel::CudaCores);
}

/// A random model of `shape` and `dtype` whose matrices are in `formats` (q, k, v, o, gate, up, down,
/// embedding, output; `None`: dense in `dtype`).
fn step_model(
    dev: &Device,
    shape: capstan_kernels::step::RandomShape,
    dtype: DType,
    formats: [Option<candle_core::quantized::GgmlDType>; 9],
) -> capstan_kernels::step::StepModel {
    let spec = capstan_kernels::step::RandomModel {
        shape,
        dtype,
        formats,
        layers: 3,
        vocab: 1000,
        qkv_bias: false,
        rope: capstan_kernels::RopeParams::from_base(500_000.0, shape.head_dim, 1.0),
    };
    capstan_kernels::step::StepModel::random(&spec, dev).unwrap()
}

/// The largest difference of logits from the oracle's, relative to the oracle's largest
/// magnitude (at least 1); a value not finite counts as infinitely far.
fn logits_diff(got: &[f32], want: &[f32]) -> f32 {
    let scale = want.iter().fold(1f32, |m, x| m.max(x.abs()));
    got.iter()
        .zip(want)
        .map(|(g, w)| {
            if g.is_finite() {
                (g - w).abs() / scale
            } else {
                f32::INFINITY
            }
        })
        .fold(0f32, f32::max)
}

/// The fused decoding step on CUDA (captured as a graph, and launched eagerly) against its CPU
/// oracle, step after step from an empty cache, with dense weights and with GGML blocks of
/// every format (q, k and v in different formats: three products; gate and up too: SwiGLU
/// apart); the caches then move to larger buffers, which the same graph follows (it reads
/// where they are from the tables written before each replay).
#[test]
fn decode_step_matches_its_cpu_reference() {
    use candle_core::quantized::GgmlDType as G;
    use capstan_kernels::step::{DecodeStep, ReferenceStep, StepKv, StepKvHost, StepLaunch};
    let Some(dev) = gpu() else { return };
    use capstan_kernels::step::RandomShape;
    let mixed = capstan_kernels::step::RandomModel::MIXED_FORMATS;
    let same = [Some(G::Q4K); 9];
    // SmolLM2-135M's widths and formats (9 query heads over 3, Q4_1, a Q8_0 embedding).
    let (q, e) = (Some(G::Q4_1), Some(G::Q8_0));
    let smollm2 = [q, q, q, q, q, q, q, e, e];
    for (dtype, tol) in [(DType::BF16, 3e-2), (DType::F16, 1e-2), (DType::F32, 1e-3)] {
        for (name, shape, formats) in [
            ("dense", RandomShape::SMALL, [None; 9]),
            ("mixed GGML", RandomShape::SMALL, mixed),
            ("Q4_K", RandomShape::SMALL, same),
            ("SmolLM2's", RandomShape::SMOLLM2, smollm2),
            ("Llama 3's heads", RandomShape::LLAMA3_HEADS, [None; 9]),
        ] {
            for launch in [StepLaunch::Graph, StepLaunch::Eager] {
                let model = step_model(&dev, shape, dtype, formats);
                let reference = ReferenceStep::new(&model).unwrap();
                let mut step = DecodeStep::new(&model, &dev, launch).unwrap();
                let mut host = vec![StepKvHost::default(); 3];
                let zeros = |cap: usize| {
                    Tensor::zeros((1, shape.kv_heads, cap, shape.head_dim), dtype, &dev).unwrap()
                };
                let mut caches: Vec<(Tensor, Tensor)> =
                    (0..3).map(|_| (zeros(40), zeros(40))).collect();
                for pos in 0..70usize {
                    if pos == 40 {
                        // Full: the rows move to larger buffers (new addresses).
                        caches = caches
                            .iter()
                            .map(|(k, v)| {
                                let grow = |t: &Tensor| {
                                    Tensor::cat(&[t.narrow(2, 0, 40).unwrap(), zeros(60)], 2)
                                        .unwrap()
                                };
                                (grow(k), grow(v))
                            })
                            .collect();
                    }
                    let token = ((pos * 7919 + 5) % 1000) as u32;
                    let kvs: Vec<StepKv> = caches
                        .iter()
                        .map(|(k, v)| StepKv {
                            k,
                            v,
                            offset: 0,
                            len: pos,
                        })
                        .collect();
                    let got = step.step(token, pos, &kvs).unwrap();
                    let want = reference.step(token, pos, &mut host).unwrap();
                    let got: Vec<f32> = got.to_vec1().unwrap();
                    let diff = logits_diff(&got, &want);
                    assert!(
                        diff <= tol,
                        "decode step {dtype:?} {name} {launch:?}, position {pos}: {diff} of the largest logit"
                    );
                }
                if launch == StepLaunch::Graph {
                    assert_eq!(step.capture_error(), None, "{dtype:?} {name}");
                    assert_eq!(step.graphs_captured(), 1, "{dtype:?} {name}");
                }
                eprintln!("decode step {dtype:?} {name} {launch:?}: 70 steps match");
            }
        }
    }
}

/// The fused decoding step of a changing batch (continuous batching) on CUDA, each sequence
/// against its own run of the CPU oracle: sequences join at steps 10, 20 and 30 and leave at
/// 25 and 45, so the batch runs 1 to 3 sequences (one alone: the single-sequence products;
/// more: the batched ones, which read each weight row once for all), then 18 (two passes of the
/// batched products) from step 50, each with its own caches
/// of its own capacity (a sequence's caches move to larger buffers at its 30th token); dense
/// weights, mixed GGML blocks and GGML blocks grouped so that every batched product runs on
/// tensor cores, graph and eager.
#[test]
fn decode_step_batches_match_their_cpu_references() {
    use capstan_kernels::step::{
        DecodeStep, ReferenceStep, StepKv, StepKvHost, StepLaunch, StepSeq,
    };
    let Some(dev) = gpu() else { return };
    let mixed = capstan_kernels::step::RandomModel::MIXED_FORMATS;
    struct Seq {
        caches: Vec<(Tensor, Tensor)>,
        host: Vec<StepKvHost>,
        len: usize,
        id: usize,
    }
    let grouped = capstan_kernels::step::RandomModel::GROUPED_FORMATS;
    for (dtype, tol) in [(DType::BF16, 3e-2), (DType::F32, 1e-3)] {
        for (name, formats) in [
            ("dense", [None; 9]),
            ("mixed GGML", mixed),
            ("grouped GGML", grouped),
        ] {
            // A batch's GGML products on f32 activations run on TF32 tensor cores (sm_80 and
            // up): their inputs and weights rounded to 10 fraction bits.
            let tol = if dtype == DType::F32 && formats != [None; 9] {
                5e-3
            } else {
                tol
            };
            for launch in [StepLaunch::Graph, StepLaunch::Eager] {
                let model = step_model(
                    &dev,
                    capstan_kernels::step::RandomShape::SMALL,
                    dtype,
                    formats,
                );
                let reference = ReferenceStep::new(&model).unwrap();
                let mut step = DecodeStep::new(&model, &dev, launch).unwrap();
                let zeros = |cap: usize| Tensor::zeros((1, 2, cap, 64), dtype, &dev).unwrap();
                let fresh = |id: usize| Seq {
                    caches: (0..3).map(|_| (zeros(30 + id), zeros(30 + id))).collect(),
                    host: vec![StepKvHost::default(); 3],
                    len: 0,
                    id,
                };
                let mut seqs = vec![fresh(0)];
                for round in 0..60usize {
                    match round {
                        10 | 20 | 30 => seqs.push(fresh(round / 10)),
                        25 => drop(seqs.remove(1)),
                        45 => drop(seqs.remove(0)),
                        // More than a pass of the batched products (16 sequences): two.
                        50 => seqs.extend((10..26).map(fresh)),
                        _ => {}
                    }
                    for s in &mut seqs {
                        if s.len == 30 {
                            let grow = |t: &Tensor| {
                                Tensor::cat(&[t.narrow(2, 0, 30).unwrap(), zeros(300)], 2).unwrap()
                            };
                            s.caches = s.caches.iter().map(|(k, v)| (grow(k), grow(v))).collect();
                        }
                    }
                    let token = |s: &Seq| ((s.len * 7919 + 5 + 131 * s.id) % 1000) as u32;
                    let kvs: Vec<Vec<StepKv>> = seqs
                        .iter()
                        .map(|s| {
                            s.caches
                                .iter()
                                .map(|(k, v)| StepKv {
                                    k,
                                    v,
                                    offset: 0,
                                    len: s.len,
                                })
                                .collect()
                        })
                        .collect();
                    let batch: Vec<StepSeq> = seqs
                        .iter()
                        .zip(&kvs)
                        .map(|(s, kvs)| StepSeq {
                            token: token(s),
                            pos: s.len,
                            kvs,
                        })
                        .collect();
                    let rows: Vec<Vec<f32>> = step.step_many(&batch).unwrap().to_vec2().unwrap();
                    drop(batch);
                    drop(kvs);
                    let n = rows.len();
                    for (s, got) in seqs.iter_mut().zip(&rows) {
                        let want = reference.step(token(s), s.len, &mut s.host).unwrap();
                        let diff = logits_diff(got, &want);
                        assert!(
                            diff <= tol,
                            "batched decode step {dtype:?} {name} {launch:?}, round {round}, \
                             sequence {} of {}: {diff} of the largest logit",
                            s.id,
                            n
                        );
                        s.len += 1;
                    }
                }
                if launch == StepLaunch::Graph {
                    assert_eq!(step.capture_error(), None, "{dtype:?} {name}");
                    assert!(step.graphs_captured() >= 3, "{dtype:?} {name}");
                }
                eprintln!("batched decode step {dtype:?} {name} {launch:?}: 60 rounds match");
            }
        }
    }
}
