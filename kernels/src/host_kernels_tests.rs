//! The shim itself (shuffles, barriers, shared memory, what a GPU leaves undefined), and the
//! small kernels the GPU has not run since they changed — RMSNorm with the residual add
//! (rmsnorm.cu, now through common.cuh's block sum) and the merge of two attention passes by
//! their statistics (attention_merge.cu, SelfExtend on cuDNN) — against the CPU, launched as
//! `cuda.rs` launches them, and in other orders of turns (a race shows as another result).

use candle_core::{DType, Device, Tensor};

use super::*;
use crate::host_memory::{f32_values, tensor_bytes, Memory};

const SOURCE: &str = r#"
typedef unsigned int u32;
__device__ float warp_total(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
// Each block's sum of its threads' indices, through shared memory and shuffles.
extern "C" __global__ void block_sums(float* out) {
    __shared__ float partial[32];
    const float v = warp_total((float)threadIdx.x);
    if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = v;
    __syncthreads();
    if (threadIdx.x == 0) {
        float total = 0.f;
        for (int w = 0; w < (int)(blockDim.x / 32); w++) total += partial[w];
        out[blockIdx.x] = total;
    }
}
// Half a warp waits at the block's barrier, the other half at a shuffle of the whole warp.
extern "C" __global__ void divergent(float* out) {
    if (threadIdx.x < 16) __syncthreads();
    else out[threadIdx.x] = warp_total(1.f);
}
// Lane 5 returns before its warp shuffles.
extern "C" __global__ void early_return(float* out) {
    if (threadIdx.x == 5) return;
    out[threadIdx.x] = warp_total(1.f);
}
// A 16 x 8 by 8 x 8 product through the shim's mma.m16n8k8 on TF32, each lane's fragments
// placed as the PTX ISA lays them out (A row-major, B as B[k][n]): out = C, row-major 16 x 8.
__device__ float a_value(int r, int k) { return 1.f + 0.0123f * (r * 8 + k) + 3e-6f * r; }
__device__ float b_value(int k, int n) { return 0.5f - 0.0371f * (k * 8 + n) + 7e-6f * k; }
extern "C" __global__ void tf32_product(float* out) {
    const int g = threadIdx.x >> 2, t = threadIdx.x & 3;
    const u32 a[4] = {chost::tf32(a_value(g, t)), chost::tf32(a_value(g + 8, t)),
                      chost::tf32(a_value(g, t + 4)), chost::tf32(a_value(g + 8, t + 4))};
    float c[4] = {0.f, 0.f, 0.f, 0.f};
    chost::mma_m16n8k8_tf32(c, a, chost::tf32(b_value(t, g)), chost::tf32(b_value(t + 4, g)));
    out[g * 8 + 2 * t] = c[0];
    out[g * 8 + 2 * t + 1] = c[1];
    out[(g + 8) * 8 + 2 * t] = c[2];
    out[(g + 8) * 8 + 2 * t + 1] = c[3];
}
// Each thread writes its index to shared memory, then reads its neighbour's: `racy` without a
// barrier between (a race), `synced` with one.
extern "C" __global__ void racy(float* out) {
    extern __shared__ float slots[];
    slots[threadIdx.x] = (float)threadIdx.x;
    out[threadIdx.x] = slots[(threadIdx.x + 1) % blockDim.x];
}
extern "C" __global__ void synced(float* out) {
    extern __shared__ float slots[];
    slots[threadIdx.x] = (float)threadIdx.x;
    __syncthreads();
    out[threadIdx.x] = slots[(threadIdx.x + 1) % blockDim.x];
}
// Dynamic shared memory read before anything is written there.
extern "C" __global__ void unwritten(float* out) {
    extern __shared__ float scratch[];
    out[threadIdx.x] = scratch[threadIdx.x];
}
"#;

fn run(name: &str, blocks: u32, threads: u32, shared: u32, out: &mut [f32]) -> Result<(), String> {
    let mut p = Params::default();
    p.push(out.as_mut_ptr() as u64);
    let build = |m: &str| build_source(m, SOURCE);
    let (grid, block) = ((blocks, 1, 1), (threads, 1, 1));
    launch_with("shim_tests", build, name, grid, block, shared, &mut p)
}

#[test]
fn shuffles_barriers_and_shared_memory_behave_as_on_a_gpu() {
    let mut out = vec![0f32; 3];
    run("block_sums", 3, 256, 0, &mut out).unwrap();
    assert_eq!(out, vec![(0..256).sum::<u32>() as f32; 3]);
    let mut out = vec![0f32; 64];
    run("unwritten", 1, 64, 256, &mut out).unwrap();
    assert!(out.iter().all(|x| x.is_nan()), "{out:?}");
}

/// TF32 as cvt.rna makes it: 10 fraction bits, to nearest, ties away from zero.
fn tf32(x: f32) -> f32 {
    f32::from_bits((x.to_bits() + 0x1000) & 0xffff_e000)
}

#[test]
fn the_tf32_mma_multiplies_the_fragments_the_isa_lays_out() {
    let mut out = vec![0f32; 128];
    run("tf32_product", 1, 32, 0, &mut out).unwrap();
    let a = |r: usize, k: usize| 1.0 + 0.0123 * (r * 8 + k) as f32 + 3e-6 * r as f32;
    let b = |k: usize, n: usize| 0.5 - 0.0371 * (k * 8 + n) as f32 + 7e-6 * k as f32;
    for r in 0..16 {
        for n in 0..8 {
            let want: f32 = (0..8).map(|k| tf32(a(r, k)) * tf32(b(k, n))).sum();
            let got = out[r * 8 + n];
            assert!(
                (got - want).abs() <= 1e-5 * want.abs().max(1.0),
                "C[{r}][{n}]: {got} {want}"
            );
        }
    }
    // The rounding matters at this tolerance: unrounded inputs give another product.
    let exact: f32 = (0..8).map(|k| a(15, k) * b(k, 7)).sum();
    assert!((out[15 * 8 + 7] - exact).abs() > 1e-5, "{exact}");
}

/// A race shows as outputs that differ between orders of turns; a barrier makes them agree.
#[test]
fn a_race_changes_the_result_with_the_order_of_turns() {
    let schedules = [
        Schedule::InOrder,
        Schedule::Reversed,
        Schedule::Shuffled(7),
        Schedule::Shuffled(8),
    ];
    let outputs = |name: &str| {
        schedules.map(|s| {
            let mut out = vec![0f32; 64];
            with_schedule(s, || run(name, 2, 64, 256, &mut out)).unwrap();
            out
        })
    };
    let want: Vec<f32> = (0..64).map(|i| ((i + 1) % 64) as f32).collect();
    for out in outputs("synced") {
        assert_eq!(out, want);
    }
    let racy = outputs("racy");
    // In order, every thread but the last reads its neighbour's slot before the neighbour's
    // turn (NaN); reversed, after it (but the last, whose neighbour is thread 0); shuffled,
    // some of each, differently for each seed.
    assert!(racy[0][..63].iter().all(|x| x.is_nan()), "{:?}", racy[0]);
    assert_eq!(racy[0][63], 0.0);
    assert_eq!(racy[1][..63], want[..63]);
    assert!(racy[1][63].is_nan());
    for out in &racy[2..] {
        assert!(out.iter().any(|x| x.is_nan()) && out.iter().any(|x| !x.is_nan()));
    }
    assert_ne!(format!("{:?}", racy[2]), format!("{:?}", racy[3]));
    // The schedule is this thread's for the call only.
    let mut out = vec![0f32; 64];
    run("racy", 1, 64, 256, &mut out).unwrap();
    assert!(out[..63].iter().all(|x| x.is_nan()));
}

#[test]
fn what_a_gpu_leaves_undefined_is_an_error() {
    let mut out = vec![0f32; 128];
    let e = run("divergent", 1, 128, 0, &mut out).unwrap_err();
    assert!(e.contains("deadlock"), "{e}");
    let e = run("early_return", 1, 32, 0, &mut out).unwrap_err();
    assert!(e.contains("returned"), "{e}");
    let e = run("no_such_kernel", 1, 32, 0, &mut out).unwrap_err();
    assert!(e.contains("no entry point"), "{e}");
}

fn randn(n: usize) -> Vec<f32> {
    Tensor::randn(0f32, 1.0, n, &Device::Cpu)
        .unwrap()
        .to_vec1()
        .unwrap()
}

fn suffix(dtype: DType) -> &'static str {
    match dtype {
        DType::F32 => "f32",
        DType::BF16 => "bf16",
        _ => "f16",
    }
}

#[test]
fn rms_norm_residual_matches_the_cpu() {
    let (rows, dim, eps) = (5, 300, 1e-5f32);
    for (dtype, tol) in [(DType::F32, 1e-6), (DType::BF16, 1e-2), (DType::F16, 2e-3)] {
        let t = |n: usize, shape: &[usize]| {
            Tensor::from_vec(randn(n), shape, &Device::Cpu)
                .unwrap()
                .to_dtype(dtype)
                .unwrap()
        };
        let (x, r, w) = (
            t(rows * dim, &[rows, dim]),
            t(rows * dim, &[rows, dim]),
            t(dim, &[dim]),
        );
        let (sum, normed) = crate::rms_norm_residual(&x, &r, &w, eps as f64).unwrap();
        let want = f32_values(&Tensor::cat(&[sum, normed], 0).unwrap());
        let mut mem = Memory::new();
        let [xa, ra, wa] = [&x, &r, &w].map(|t| mem.put(&tensor_bytes(t)));
        let out = mem.alloc(want.len() * dtype.size_in_bytes());
        // The block's sum through shared memory, in any order of turns.
        for schedule in SCHEDULES {
            mem.put_floats(suffix(dtype), out, &vec![f32::NAN; want.len()]);
            let mut p = Params::default();
            for a in [xa, ra, wa, out] {
                p.push(a);
            }
            p.push(rows as i32).push(dim as i32).push(eps);
            let name = format!("capstan_rms_norm_residual_{}", suffix(dtype));
            let (grid, block) = ((rows as u32, 1, 1), (256, 1, 1));
            with_schedule(schedule, || {
                launch("rmsnorm", &name, grid, block, 0, &mut p)
            })
            .unwrap();
            let got = mem.floats(suffix(dtype), out, want.len());
            let scale = want.iter().fold(1f32, |a, x| a.max(x.abs()));
            for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                assert!(
                    (g - w).abs() / scale <= tol,
                    "{dtype:?}, {schedule:?} [{i}]: {g} against {w}"
                );
            }
        }
    }
}

#[test]
fn the_merge_of_two_passes_matches_its_formula() {
    let (rows, dim) = (6, 40);
    // Statistics: both finite, one pass that saw no key (-inf, or NaN as cuDNN may leave),
    // both empty.
    let l1 = [
        0.5f32,
        3.0,
        f32::NEG_INFINITY,
        2.0,
        f32::NAN,
        f32::NEG_INFINITY,
    ];
    let l2 = [1.5f32, -1.0, 0.7, f32::NEG_INFINITY, 0.2, f32::NEG_INFINITY];
    for dtype in [DType::F32, DType::BF16, DType::F16] {
        let t = suffix(dtype);
        let mut mem = Memory::new();
        let (o1, o2) = (randn(rows * dim), randn(rows * dim));
        let [a1, a2] = [&o1, &o2].map(|o| {
            let at = mem.alloc(o.len() * dtype.size_in_bytes());
            mem.put_floats(t, at, o);
            at
        });
        // What the kernel reads: the values as rounded to the type.
        let (o1, o2) = (mem.floats(t, a1, o1.len()), mem.floats(t, a2, o2.len()));
        let [s1, s2] = [&l1, &l2].map(|l| {
            let at = mem.alloc(4 * rows);
            mem.put_f32s(at, l);
            at
        });
        let out = mem.alloc(rows * dim * dtype.size_in_bytes());
        mem.put_floats(t, out, &vec![f32::NAN; rows * dim]);
        let mut p = Params::default();
        for a in [a1, s1, a2, s2, out] {
            p.push(a);
        }
        p.push(rows as i32).push(dim as i32);
        let n = (rows * dim) as u32;
        let name = format!("capstan_attention_merge_{t}");
        launch(
            "attention_merge",
            &name,
            (n.div_ceil(256), 1, 1),
            (256, 1, 1),
            0,
            &mut p,
        )
        .unwrap();
        let got = mem.floats(t, out, rows * dim);
        for r in 0..rows {
            let (a, b) = (l1[r], l2[r]);
            for c in 0..dim {
                let (x1, x2) = (o1[r * dim + c], o2[r * dim + c]);
                let want = match (a.is_finite(), b.is_finite()) {
                    (_, false) if a.is_finite() => x1,
                    (_, false) => 0.0,
                    (false, true) => x2,
                    (true, true) => {
                        let m = a.max(b);
                        let (w1, w2) = ((a - m).exp(), (b - m).exp());
                        (x1 * w1 + x2 * w2) / (w1 + w2)
                    }
                };
                let g = got[r * dim + c];
                assert!(
                    (g - want).abs() <= 1e-2 * want.abs().max(1.0),
                    "{t} row {r}: {g} against {want}"
                );
            }
        }
    }
}
