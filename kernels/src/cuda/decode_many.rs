//! The launch of attention_decode.cu: per-sequence tables of key and value pointers, lengths
//! and capacities, one block per (query head, sequence).

use candle_core::cuda_backend::cudarc::driver::{
    CudaSlice, DevicePtr, DeviceRepr, LaunchConfig, PushKernelArg,
};
use candle_core::cuda_backend::{CudaDType, CudaStorageSlice, WrapErr};
use candle_core::{bail, CudaStorage, Layout, Result, Shape, WithDType};

use super::{cuda_of, func, offsets, output, suffix};
use crate::decode_many::DecodeManyOp;
use crate::op_params::kv_rows;

/// Warps a block: each takes every fourth key.
const WARPS: usize = 4;
/// Largest head width (`DEC_MAXD`).
const MAXD: usize = 256;

/// `DecodeArgs` of attention_decode.cu, field for field.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
struct DecodeArgs {
    heads: i32,
    kv_heads: i32,
    dim: i32,
    scale: f32,
}

// SAFETY: plain-old-data with the C layout of the kernel's struct.
unsafe impl DeviceRepr for DecodeArgs {}

fn typed<T: CudaDType + DeviceRepr + WithDType>(
    op: &DecodeManyOp,
    q: &CudaStorage,
    lq: &Layout,
) -> Result<CudaSlice<T>> {
    let (n, heads, _, dim) = lq.shape().dims4()?;
    if dim > MAXD {
        bail!("attention_decode_many: head width {dim} > {MAXD}")
    }
    let dev = &q.device;
    let stream = dev.cuda_stream();
    let (qa, qb) = offsets(lq)?;
    let qs = q.as_cuda_slice::<T>()?.slice(qa..qb);
    let kv_heads = op.kvs.first().map_or(Ok(heads), |(k, _)| k.dim(1))?;
    // Every cache's storage held, and its pointer's guard, until the launch is queued.
    let storages: Vec<_> = op
        .kvs
        .iter()
        .map(|(k, v)| (k.storage_and_layout(), v.storage_and_layout()))
        .collect();
    let (mut kptr, mut vptr) = (Vec::new(), Vec::new());
    let (mut lens, mut caps) = (Vec::new(), Vec::new());
    for ((ks, kl), (vs, vl)) in &storages {
        let (Some((ka, kcap)), Some((va, vcap))) = (kv_rows(kl), kv_rows(vl)) else {
            bail!("attention_decode_many: keys or values not readable in place")
        };
        if kcap != vcap {
            bail!("attention_decode_many: keys and values of different capacities")
        }
        let len = kl.shape().dims()[2];
        let span = (kv_heads - 1) * kcap * dim + len * dim;
        let kslice = cuda_of(ks)?.as_cuda_slice::<T>()?.slice(ka..ka + span);
        let vslice = cuda_of(vs)?.as_cuda_slice::<T>()?.slice(va..va + span);
        // One stream: the launch below is ordered after every write of these buffers, so the
        // pointers' synchronisation guards are not needed past this line.
        let (kp, _) = kslice.device_ptr(&stream);
        let (vp, _) = vslice.device_ptr(&stream);
        kptr.push(kp);
        vptr.push(vp);
        lens.push(len as i32);
        caps.push(kcap as i32);
    }
    let kptr = dev.clone_htod(&kptr)?;
    let vptr = dev.clone_htod(&vptr)?;
    let lens = dev.clone_htod(&lens)?;
    let caps = dev.clone_htod(&caps)?;
    let out = output::<T>(dev, n * heads * dim)?;
    let f = func(
        dev,
        "attention_decode",
        &format!("capstan_attention_decode_{}", suffix(q)?),
    )?;
    let args = DecodeArgs {
        heads: heads as i32,
        kv_heads: kv_heads as i32,
        dim: dim as i32,
        scale: op.scale,
    };
    let cfg = LaunchConfig {
        grid_dim: (heads as u32, n as u32, 1),
        block_dim: (32 * WARPS as u32, 1, 1),
        shared_mem_bytes: (WARPS * (2 + dim) * 4) as u32,
    };
    let mut b = stream.launch_builder(&f);
    b.arg(&qs);
    b.arg(&kptr);
    b.arg(&vptr);
    b.arg(&lens);
    b.arg(&caps);
    b.arg(&out);
    b.arg(&args);
    // SAFETY: argument list and types match capstan_attention_decode_* in attention_decode.cu;
    // every pointer in the tables is a live slice of `span` elements, held by `storages`.
    unsafe { b.launch(cfg) }.w()?;
    Ok(out)
}

/// The op's CUDA forward: `(n, heads, 1, dim)` like the queries.
pub(crate) fn forward(
    op: &DecodeManyOp,
    q: &CudaStorage,
    lq: &Layout,
) -> Result<(CudaStorage, Shape)> {
    let dev = q.device.clone();
    let slice = match &q.slice {
        CudaStorageSlice::F32(_) => CudaStorageSlice::F32(typed::<f32>(op, q, lq)?),
        CudaStorageSlice::BF16(_) => CudaStorageSlice::BF16(typed::<half::bf16>(op, q, lq)?),
        CudaStorageSlice::F16(_) => CudaStorageSlice::F16(typed::<half::f16>(op, q, lq)?),
        _ => bail!("attention_decode_many: f32, bf16 or f16 queries expected"),
    };
    Ok((CudaStorage { slice, device: dev }, lq.shape().clone()))
}
