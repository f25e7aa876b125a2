//! attention_decode.cu compiled for the host ([`crate::host_kernels`]), both its kernels
//! ([`DecodeKernel`]) launched as `cuda/decode_many.rs` launches them, against the CPU path of
//! [`crate::attention_decode_many`]:
//! heads 64, 128 and 256 wide (Llama's 128 among them, which the step's random models, 64 wide,
//! do not reach), one to eight query heads a key head, caches of different lengths in buffers of
//! larger capacity, keys in one range or split (merged by the last split to finish, which sets
//! its counter back to zero), in three orders of turns that must agree bit for bit; the grouped
//! kernel also with caches that are not 16-byte aligned (read an element at a time).

use candle_core::{DType, Device, Tensor};

use crate::host_kernels::{
    assert_same_in_every_schedule, launch, with_defines, with_schedule, worst_relative_diff,
    Params, SCHEDULES,
};
use crate::host_memory::{f32_values, tensor_bytes, Memory};
use crate::step::decode_grid::{DecodeArgs, DecodeKernel, DECODE_WARPS};

/// The largest difference of `kernel`'s output from the CPU path's, relative to the CPU
/// path's largest value, for `groups` query heads over each of 2 key heads (`skew`: the caches
/// placed that many bytes past 16-byte alignment), the module built with `defines` before its
/// source (as NVRTC's `-D` options; empty: as it is).
#[allow(clippy::too_many_arguments)]
fn run(
    kernel: DecodeKernel,
    dtype: DType,
    dim: usize,
    groups: usize,
    lens: &[usize],
    splits: usize,
    skew: usize,
    defines: &str,
) -> f32 {
    let (kv_heads, n) = (2, lens.len());
    let heads = kv_heads * groups;
    let dev = Device::Cpu;
    let randn = |shape: (usize, usize, usize, usize)| {
        Tensor::randn(0f32, 1.0, shape, &dev)
            .unwrap()
            .to_dtype(dtype)
            .unwrap()
    };
    let q = randn((n, heads, 1, dim));
    let bufs: Vec<(Tensor, Tensor)> = lens
        .iter()
        .map(|&len| {
            let cap = len + 5;
            (
                randn((1, kv_heads, cap, dim)),
                randn((1, kv_heads, cap, dim)),
            )
        })
        .collect();
    let kvs: Vec<(Tensor, Tensor)> = bufs
        .iter()
        .zip(lens)
        .map(|((k, v), &len)| (k.narrow(2, 0, len).unwrap(), v.narrow(2, 0, len).unwrap()))
        .collect();
    let want = f32_values(&crate::attention_decode_many(&q, &kvs, None).unwrap());

    let t = match dtype {
        DType::F32 => "f32",
        DType::BF16 => "bf16",
        _ => "f16",
    };
    let elem = dtype.size_in_bytes();
    let mut mem = Memory::new();
    let qa = mem.put(&tensor_bytes(&q));
    let mut put = |t: &Tensor| {
        let mut bytes = vec![0u8; skew];
        bytes.extend(tensor_bytes(t));
        mem.put(&bytes) + skew as u64
    };
    let caches: Vec<(u64, u64)> = bufs.iter().map(|(k, v)| (put(k), put(v))).collect();
    let table = |f: &dyn Fn(usize) -> Vec<u8>| -> Vec<u8> { (0..n).flat_map(f).collect() };
    let kptr = mem.put(&table(&|s| caches[s].0.to_le_bytes().to_vec()));
    let vptr = mem.put(&table(&|s| caches[s].1.to_le_bytes().to_vec()));
    let lens_at = mem.put(&table(&|s| (lens[s] as i32).to_le_bytes().to_vec()));
    let caps = mem.put(&table(&|s| (lens[s] as i32 + 5).to_le_bytes().to_vec()));
    let out = mem.alloc(n * heads * dim * elem);
    let partial = mem.alloc(4 * n * heads * splits * (2 + dim));
    let counters = mem.alloc(4 * n * heads);
    let args = DecodeArgs {
        heads: heads as i32,
        kv_heads: kv_heads as i32,
        dim: dim as i32,
        scale: 1.0 / (dim as f32).sqrt(),
        splits: splits as i32,
    };
    let name = kernel.entry(t);
    let outputs = SCHEDULES.map(|schedule| {
        mem.put_floats(t, out, &vec![f32::NAN; n * heads * dim]);
        let mut p = Params::default();
        for a in [qa, kptr, vptr, lens_at, caps, out, partial, counters] {
            p.push(a);
        }
        p.push(args);
        let grid = (
            kernel.blocks(heads, kv_heads) as u32,
            n as u32,
            splits as u32,
        );
        let block = (32 * DECODE_WARPS as u32, 1, 1);
        let shared = kernel.shared_bytes(dim);
        with_schedule(schedule, || {
            with_defines(defines, || {
                launch("attention_decode", &name, grid, block, shared, &mut p)
            })
        })
        .unwrap_or_else(|e| panic!("{schedule:?}: {e}"));
        // Zero again for the next launch (the step's graph replays it as it stands).
        assert!(
            mem.read(counters, 4 * n * heads).iter().all(|&b| b == 0),
            "{kernel:?}, {t}, d {dim}, {groups} a group, {splits} splits, {schedule:?}: \
             counters left"
        );
        mem.read(out, n * heads * dim * elem).to_vec()
    });
    let what = format!("{kernel:?}, {t}, d {dim}, {groups} a group, {splits} splits, skew {skew}");
    assert_same_in_every_schedule(&outputs, &what);
    worst_relative_diff(&mem.floats(t, out, n * heads * dim), &want)
}

#[test]
fn the_cuda_source_decodes_as_the_cpu_path() {
    // One key, a few, and more than the warps' unrolled loop takes in one pass.
    let lens = [1, 37, 300];
    for (dtype, tol) in [(DType::F32, 1e-5), (DType::BF16, 2e-2), (DType::F16, 4e-3)] {
        let elem = dtype.size_in_bytes();
        for dim in [64, 128, 256] {
            // Groups of 5 and 8: a key head's query heads over two blocks of the grouped kernel.
            for groups in [1, 3, 4, 5, 8] {
                // Keys in one range; split (some ranges of the shortest cache empty); and
                // (Llama 3's heads) more splits than a warp's lanes, merged in two rounds.
                let mut all_splits = vec![1, 3, 8];
                if dim == 128 && groups == 4 {
                    all_splits.push(40);
                }
                for splits in all_splits {
                    let mut kernels = vec![(DecodeKernel::PerHead, 0)];
                    if (dim * elem).is_power_of_two() && dim * elem <= 512 {
                        kernels.push((DecodeKernel::Grouped, 0));
                        if splits == 3 {
                            kernels.push((DecodeKernel::Grouped, elem));
                        }
                    }
                    if elem == 2 && (dim == 64 || dim == 128) {
                        kernels.push((DecodeKernel::TensorCores, 0));
                        if splits == 3 {
                            kernels.push((DecodeKernel::TensorCores, elem));
                        }
                    }
                    for (kernel, skew) in kernels {
                        let diff = run(kernel, dtype, dim, groups, &lens, splits, skew, "");
                        assert!(
                            diff <= tol,
                            "{kernel:?}, {dtype:?}, d {dim}, {groups} a group, {splits} splits, \
                             skew {skew}: {diff} of the largest"
                        );
                    }
                }
            }
        }
    }
}

/// The grouped kernel with another count of keys a slot takes at once (`GQA_KEYS`, which
/// `CAPSTAN_DECODE_GQA_KEYS` sets through NVRTC): 1 and 4, Llama's 128-wide heads and 64, a
/// range shorter than one pass of the block's slots and longer, aligned and not.
#[test]
fn the_grouped_kernel_decodes_as_the_cpu_path_with_other_keys_a_slot() {
    let lens = [1, 37, 300];
    for keys in [1, 4] {
        let defines = format!("#define GQA_KEYS {keys}");
        for (dtype, tol) in [(DType::F32, 1e-5), (DType::BF16, 2e-2)] {
            for dim in [64, 128] {
                for (groups, splits, skew) in [(4, 1, 0), (8, 3, 0), (5, 3, dtype.size_in_bytes())]
                {
                    let diff = run(
                        DecodeKernel::Grouped,
                        dtype,
                        dim,
                        groups,
                        &lens,
                        splits,
                        skew,
                        &defines,
                    );
                    assert!(
                        diff <= tol,
                        "GQA_KEYS {keys}, {dtype:?}, d {dim}, {groups} a group, {splits} splits, \
                         skew {skew}: {diff} of the largest"
                    );
                }
            }
        }
    }
}
