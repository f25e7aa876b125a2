//! The launch of attention_decode.cu: per-sequence tables of key and value pointers, lengths
//! and capacities, one block per (query head, or group of query heads sharing a key head;
//! sequence; range of keys: [`DecodeKernel`]), and the merge of the
//! ranges when the keys are split. Used by [`crate::attention_decode_many`] and, for one
//! sequence's decoding row, by [`crate::attention`] on CUDA.

use candle_core::cuda_backend::cudarc::driver::{
    CudaSlice, CudaView, DevicePtr, DeviceRepr, LaunchConfig, PushKernelArg,
};
use candle_core::cuda_backend::{CudaDType, CudaStorageSlice, WrapErr};
use candle_core::{bail, CudaDevice, CudaStorage, Layout, Result, Shape, Tensor, WithDType};

use super::launch::{cuda_of, func, offsets, output, suffix};
use crate::op_params::kv_rows;
use crate::step::decode_grid::{splits, DecodeArgs, DecodeKernel, DECODE_WARPS as WARPS};

/// Largest head width (`DEC_MAXD`).
pub(super) const MAXD: usize = 256;

// SAFETY: plain-old-data with the C layout of the kernel's struct.
unsafe impl DeviceRepr for DecodeArgs {}

/// One sequence's cache: device pointers to its keys' and values' first element, its length
/// and its capacity (rows from one head to the next).
pub(super) struct SeqKv {
    pub(super) k: u64,
    pub(super) v: u64,
    pub(super) len: usize,
    pub(super) cap: usize,
}

/// Decoding attention of `q` `(n, heads, dim)` against each sequence's cache, on `dev`'s
/// stream: `(n, heads, dim)`.
#[allow(clippy::too_many_arguments)]
pub(super) fn launch<T: CudaDType + DeviceRepr + WithDType>(
    dev: &CudaDevice,
    q: &CudaView<'_, T>,
    seqs: &[SeqKv],
    heads: usize,
    kv_heads: usize,
    dim: usize,
    scale: f32,
    suffix: &str,
) -> Result<CudaSlice<T>> {
    if dim > MAXD {
        bail!("decoding attention: head width {dim} > {MAXD}")
    }
    let n = seqs.len();
    // Two uploads a call (each a host-to-device copy the launch waits on), not four: the key
    // then value pointers in one buffer, the lengths then capacities in another.
    let ptrs: Vec<u64> = seqs
        .iter()
        .map(|s| s.k)
        .chain(seqs.iter().map(|s| s.v))
        .collect();
    let ptrs = dev.clone_htod(&ptrs)?;
    let sizes: Vec<i32> = seqs
        .iter()
        .map(|s| s.len as i32)
        .chain(seqs.iter().map(|s| s.cap as i32))
        .collect();
    let sizes = dev.clone_htod(&sizes)?;
    let (kptr, vptr) = (ptrs.slice(0..n), ptrs.slice(n..2 * n));
    let (lens, caps) = (sizes.slice(0..n), sizes.slice(n..2 * n));
    let longest = seqs.iter().map(|s| s.len).max().unwrap_or(0);
    let kernel = DecodeKernel::choose(dim, std::mem::size_of::<T>());
    let blocks = kernel.blocks(heads, kv_heads);
    let splits = splits(n * blocks, longest);
    let out = output::<T>(dev, n * heads * dim)?;
    // SAFETY: every split writes its whole partial row before the merge reads it.
    let partial = unsafe {
        dev.alloc::<f32>(if splits > 1 {
            n * heads * splits * (2 + dim)
        } else {
            1
        })
    }?;
    // The count of finished splits per (sequence, head): zero, and zero again after the launch.
    let counters = dev.alloc_zeros::<i32>(if splits > 1 { n * heads } else { 1 })?;
    let args = DecodeArgs {
        heads: heads as i32,
        kv_heads: kv_heads as i32,
        dim: dim as i32,
        scale,
        splits: splits as i32,
    };
    let stream = dev.cuda_stream();
    let f = func(dev, "attention_decode", &kernel.entry(suffix))?;
    let cfg = LaunchConfig {
        grid_dim: (blocks as u32, n as u32, splits as u32),
        block_dim: (32 * WARPS as u32, 1, 1),
        shared_mem_bytes: kernel.shared_bytes(dim),
    };
    let mut b = stream.launch_builder(&f);
    b.arg(q);
    b.arg(&kptr);
    b.arg(&vptr);
    b.arg(&lens);
    b.arg(&caps);
    b.arg(&out);
    b.arg(&partial);
    b.arg(&counters);
    b.arg(&args);
    // SAFETY: argument list and types match capstan_attention_decode_{,gqa_}* in
    // attention_decode.cu; every pointer in the tables is a live cache of `len` rows a head,
    // heads `cap` rows apart;
    // `partial` and `counters` hold a row and a count for every (sequence, head).
    unsafe { b.launch(cfg) }.w()?;
    Ok(out)
}

fn typed<T: CudaDType + DeviceRepr + WithDType>(
    kvs: &[(Tensor, Tensor)],
    scale: f32,
    q: &CudaStorage,
    lq: &Layout,
) -> Result<CudaSlice<T>> {
    let (_, heads, _, dim) = lq.shape().dims4()?;
    let dev = &q.device;
    let stream = dev.cuda_stream();
    let (qa, qb) = offsets(lq)?;
    let qs = q.as_cuda_slice::<T>()?.slice(qa..qb);
    let kv_heads = kvs.first().map_or(Ok(heads), |(k, _)| k.dim(1))?;
    // Every cache's storage held until the launch is queued.
    let storages: Vec<_> = kvs
        .iter()
        .map(|(k, v)| (k.storage_and_layout(), v.storage_and_layout()))
        .collect();
    let mut seqs = Vec::with_capacity(storages.len());
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
        // One stream: the launch is ordered after every write of these buffers, so the
        // pointers' synchronisation guards are not needed past this line.
        let (k, _) = kslice.device_ptr(&stream);
        let (v, _) = vslice.device_ptr(&stream);
        seqs.push(SeqKv {
            k,
            v,
            len,
            cap: kcap,
        });
    }
    launch(dev, &qs, &seqs, heads, kv_heads, dim, scale, suffix(q)?)
}

/// The forward of [`crate::attention_decode_many`]'s op: `(n, heads, 1, dim)` like the
/// queries, `kvs` each sequence's cache.
pub(crate) fn forward(
    kvs: &[(Tensor, Tensor)],
    scale: f32,
    q: &CudaStorage,
    lq: &Layout,
) -> Result<(CudaStorage, Shape)> {
    let dev = q.device.clone();
    let slice = match &q.slice {
        CudaStorageSlice::F32(_) => CudaStorageSlice::F32(typed::<f32>(kvs, scale, q, lq)?),
        CudaStorageSlice::BF16(_) => {
            CudaStorageSlice::BF16(typed::<half::bf16>(kvs, scale, q, lq)?)
        }
        CudaStorageSlice::F16(_) => CudaStorageSlice::F16(typed::<half::f16>(kvs, scale, q, lq)?),
        _ => bail!("attention_decode_many: f32, bf16 or f16 queries expected"),
    };
    Ok((CudaStorage { slice, device: dev }, lq.shape().clone()))
}
