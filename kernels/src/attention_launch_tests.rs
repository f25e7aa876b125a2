//! attention.cu and attention_mma.cu compiled for the host ([`crate::host_kernels`]; the
//! tensor-core instructions computed from each warp's fragments as the PTX ISA lays them out),
//! launched as `cuda.rs` launches them, against the CPU reference on every pattern: prefill and
//! continuation from a cache read in place, Zebra's window, SelfExtend's two rotations, SCCA
//! fixed, flow and dilated, cross-attention with padding, decoding rows. The output is poisoned
//! with NaN first, so a row the kernel never writes shows.

use candle_core::{DType, Device, Tensor};

use super::*;
use crate::host_kernels::{
    assert_same_in_every_schedule, launch, with_schedule, worst_relative_diff, Params, SCHEDULES,
};
use crate::host_memory::{f32_values, tensor_bytes, Memory};
use crate::op_params::AttentionOp;
use crate::pattern::{scca_rules, SccaKind};

struct Case {
    name: &'static str,
    pattern: Pattern,
    batch: usize,
    heads: usize,
    kv_heads: usize,
    q_len: usize,
    kv_len: usize,
    /// Rows of the cache buffers the keys and values are a view of.
    cap: usize,
    dim: usize,
    q_pos0: u64,
    k_pos0: u64,
    mask: bool,
}

fn case(name: &'static str, pattern: Pattern, q_len: usize, kv_len: usize, dim: usize) -> Case {
    Case {
        name,
        pattern,
        batch: 2,
        heads: 4,
        kv_heads: 2,
        q_len,
        kv_len,
        cap: kv_len + 9,
        dim,
        q_pos0: (kv_len - q_len.min(kv_len)) as u64,
        k_pos0: 0,
        mask: false,
    }
}

/// Every pattern at `dim`, with `q_len` rows (at least 16 for the tensor-core kernel).
fn cases(dim: usize, decoding: bool) -> Vec<Case> {
    let scca = |kind| Pattern::Scca(scca_rules(kind, 32, 4));
    let mut out = vec![
        case("causal prefill", Pattern::Causal, 70, 70, dim),
        case("causal after a cache", Pattern::Causal, 40, 140, dim),
        case(
            "Zebra window 32",
            Pattern::Local { window: 32 },
            100,
            100,
            dim,
        ),
        case(
            "SelfExtend",
            Pattern::SelfExtend {
                neighbor: 24,
                group: 4,
            },
            90,
            90,
            dim,
        ),
        case("SCCA fixed", scca(SccaKind::Fixed), 100, 100, dim),
        case(
            "SCCA flow",
            scca(SccaKind::Flow { groups: 2 }),
            100,
            100,
            dim,
        ),
        case(
            "SCCA dilated",
            scca(SccaKind::Dilated { dilation: 2 }),
            100,
            100,
            dim,
        ),
        Case {
            mask: true,
            q_pos0: 0,
            ..case("cross with padding", Pattern::Cross, 40, 90, dim)
        },
        Case {
            k_pos0: 60,
            q_pos0: 81,
            ..case(
                "Zebra, a trimmed cache",
                Pattern::Local { window: 32 },
                20,
                41,
                dim,
            )
        },
    ];
    if decoding {
        out.push(case("decoding rows", Pattern::Causal, 1, 77, dim));
    }
    out
}

fn randn(shape: (usize, usize, usize, usize), dtype: DType) -> Tensor {
    Tensor::randn(0f32, 1.0, shape, &Device::Cpu)
        .unwrap()
        .to_dtype(dtype)
        .unwrap()
}

/// The largest difference of the kernel's output from the reference's, relative to the
/// reference's largest value.
fn run(c: &Case, dtype: DType, tensor_cores: bool) -> f32 {
    let (b, h, hk, d) = (c.batch, c.heads, c.kv_heads, c.dim);
    let q = randn((b, h, c.q_len, d), dtype);
    let caches = [0; 3].map(|_| randn((b, hk, c.cap, d), dtype));
    let view = |t: &Tensor| t.narrow(2, 0, c.kv_len).unwrap();
    let (k, v) = (view(&caches[0]), view(&caches[1]));
    let mut o = AttentionOptions::new(c.pattern.clone());
    o.q_pos0 = c.q_pos0;
    o.k_pos0 = c.k_pos0;
    let extend = matches!(c.pattern, Pattern::SelfExtend { .. });
    if extend {
        o.q_grouped = Some(randn((b, h, c.q_len, d), dtype));
        o.k_grouped = Some(view(&caches[2]));
    }
    if c.mask {
        let keep: Vec<u8> = (0..b * c.kv_len)
            .map(|i| u8::from(i % c.kv_len < c.kv_len - 17 * (i / c.kv_len)))
            .collect();
        o.key_mask = Some(Tensor::from_vec(keep, (b, c.kv_len), &Device::Cpu).unwrap());
    }
    let want = f32_values(&crate::attention(&q, &k, &v, o.clone()).unwrap());

    // The launch as cuda.rs makes it, over the same bytes.
    let op = AttentionOp { opts: o.clone() };
    let dims = op.dims(q.layout(), k.layout(), v.layout()).unwrap();
    let pos = op.positions(d);
    let t = match dtype {
        DType::F32 => "f32",
        DType::BF16 => "bf16",
        _ => "f16",
    };
    let l = AttentionLaunch::new(&dims, &pos, &o, t, tensor_cores);
    let mut mem = Memory::new();
    let qa = mem.put(&tensor_bytes(&q));
    let [ka, va, kga] = [0, 1, 2].map(|i| mem.put(&tensor_bytes(&caches[i])));
    let qga = match &o.q_grouped {
        Some(g) => mem.put(&tensor_bytes(g)),
        None => qa,
    };
    let kga = if extend { kga } else { ka };
    let mask = match &o.key_mask {
        Some(m) => mem.put(&tensor_bytes(m)),
        None => mem.alloc(1),
    };
    let rules: Vec<u8> = l.rules.iter().flat_map(|x| x.to_le_bytes()).collect();
    let rules = mem.put(&rules);
    let n = want.len();
    let out = mem.alloc(n * dtype.size_in_bytes());
    let outputs = SCHEDULES.map(|schedule| {
        mem.put_floats(t, out, &vec![f32::NAN; n]);
        let mut p = Params::default();
        for a in [qa, ka, va, qga, kga, mask, rules, out] {
            p.push(a);
        }
        p.push(l.args);
        with_schedule(schedule, || {
            launch(l.module, &l.name, l.grid, l.block, l.shared, &mut p)
        })
        .unwrap_or_else(|e| panic!("{}, {schedule:?}: {e}", c.name));
        mem.read(out, n * dtype.size_in_bytes()).to_vec()
    });
    // No atomic sums of floats here: any order of turns computes the same bits (the output
    // read below is the last schedule's, equal to the others).
    assert_same_in_every_schedule(&outputs, c.name);
    worst_relative_diff(&mem.floats(t, out, n), &want)
}

#[test]
fn the_cuda_core_kernel_computes_every_pattern_as_the_reference() {
    for (dtype, tol) in [(DType::F32, 1e-5), (DType::BF16, 2e-2), (DType::F16, 4e-3)] {
        for c in cases(64, true) {
            let diff = run(&c, dtype, false);
            assert!(diff <= tol, "{}, {dtype:?}: {diff} of the largest", c.name);
        }
    }
}

#[test]
fn the_tensor_core_kernel_computes_every_pattern_as_the_reference() {
    // bf16 keeps 8 bits of mantissa: the probabilities rounded to it before P V move an
    // output by up to a few hundredths of the largest.
    for (dtype, tol) in [(DType::BF16, 3e-2), (DType::F16, 5e-3)] {
        for dim in [64, 128] {
            for c in cases(dim, false) {
                let diff = run(&c, dtype, true);
                assert!(
                    diff <= tol,
                    "{}, {dtype:?}, d {dim}: {diff} of the largest",
                    c.name
                );
            }
        }
    }
}
