//! CUDA implementations: the sources of [`crate::SOURCES`] compiled at run time with NVRTC for
//! the device's architecture (once per process and architecture), loaded once per device
//! (candle's module cache) and launched on candle's stream.

use candle_core::backend::BackendStorage;
use candle_core::cuda_backend::cudarc::driver::{
    sys::CUfunction_attribute_enum, CudaSlice, DevicePtr, DeviceRepr, LaunchConfig, PushKernelArg,
};
use candle_core::cuda_backend::{CudaDType, CudaStorageSlice, WrapErr};
use candle_core::{bail, CudaDevice, CudaStorage, Layout, Result, Shape, Tensor, WithDType};

pub(crate) mod cudnn;
pub(crate) mod decode_many;
mod launch;
mod scca;
mod selfextend;
pub(crate) mod step;

use launch::{cuda_of, func, offsets, output, suffix};

use crate::attention_launch::{AttentionLaunch, AttnArgs, STATIC_SHARED_BYTES};
use crate::cpu::AttnDims;
use crate::op_params::{kv_rows, AttentionOp, RmsNormOp, RopeOp};
use crate::pattern::Pattern;

/// Largest head width the attention kernel supports (`MAXD` in attention.cu).
const MAXD: usize = 256;

// SAFETY: plain-old-data with the C layout of the kernels' struct.
unsafe impl DeviceRepr for AttnArgs {}

/// An extra input's storage and element range: packed, or (`kv_span`: grouped keys) read in
/// place like the keys.
fn extra_slice<T: CudaDType + DeviceRepr>(
    t: &Option<Tensor>,
    kv_span: Option<usize>,
) -> Result<Option<(candle_core::StorageRef<'_>, usize, usize)>> {
    match t {
        Some(t) => {
            let (g, l) = t.storage_and_layout();
            let (a, b) = match kv_span {
                Some(n) => {
                    let a = kv_rows(l).map_or(0, |(a, _)| a);
                    (a, a + n)
                }
                None => offsets(l)?,
            };
            cuda_of(&g)?.as_cuda_slice::<T>()?;
            Ok(Some((g, a, b)))
        }
        None => Ok(None),
    }
}

/// Whether this call runs on the tensor-core kernel: chosen ([`crate::tensor_core_attention`]),
/// bf16 or f16, a head width of 64 or 128, at least 16 query rows (prefill or
/// cross-attention: one decoding row would leave 63 of a block's 64 idle), and a device of
/// compute capability 8.0 or more (`mma.sync.m16n8k16` on 16-bit floats).
fn uses_tensor_cores(dev: &CudaDevice, q: &CudaStorage, dims: &AttnDims) -> Result<bool> {
    if !crate::tensor_core_attention()
        || !matches!(
            &q.slice,
            CudaStorageSlice::BF16(_) | CudaStorageSlice::F16(_)
        )
        || !matches!(dims.dim, 64 | 128)
        || dims.q_len < 16
    {
        return Ok(false);
    }
    let (major, _) = dev.cuda_stream().context().compute_capability().w()?;
    Ok(major >= 8)
}

/// The cuDNN plan key of this call's shape, when cuDNN is chosen, in bf16 or f16 with every
/// operand 16-byte aligned (`starts`: first elements, in elements of 2 bytes); the mask,
/// window and statistics left to the caller.
fn cudnn_base_key(
    q: &CudaStorage,
    dims: &AttnDims,
    starts: &[usize],
) -> Option<crate::sdpa_graph::SdpaKey> {
    use crate::sdpa_graph::{DataType, SdpaBatch, SdpaKey, SdpaMask};
    if crate::attention_kernel() != crate::AttentionKernel::Cudnn {
        return None;
    }
    let dtype = match &q.slice {
        CudaStorageSlice::BF16(_) => DataType::Bf16,
        CudaStorageSlice::F16(_) => DataType::Half,
        _ => return None,
    };
    // 16 bytes: 8 elements of 2 bytes.
    if starts.iter().any(|s| s % 8 != 0) {
        return None;
    }
    Some(SdpaKey {
        dtype,
        batch: dims.batch as i64,
        heads: dims.heads as i64,
        kv_heads: dims.kv_heads as i64,
        q_len: dims.q_len as i64,
        kv_len: dims.kv_len as i64,
        kv_stride: dims.kv_stride as i64,
        dim: dims.dim as i64,
        mask: SdpaMask::None,
        window: 0,
        stats: false,
        batch_layout: SdpaBatch::Packed,
    })
}

/// The cuDNN plan key of this call when cuDNN is chosen and one pass of its graph expresses
/// the call (`crate::sdpa_graph::sdpa_mask`).
fn cudnn_key(
    q: &CudaStorage,
    dims: &AttnDims,
    o: &crate::AttentionOptions,
    pos: &crate::cpu::AttnPositions,
    starts: [usize; 3],
) -> Option<crate::sdpa_graph::SdpaKey> {
    use crate::sdpa_graph::{sdpa_mask, sdpa_window, SdpaKey};
    let base = cudnn_base_key(q, dims, &starts)?;
    let extras = o.q_grouped.is_some() || o.k_grouped.is_some() || o.key_mask.is_some();
    let mask = sdpa_mask(
        &o.pattern,
        pos.q_pos0,
        pos.k_pos0,
        dims.q_len,
        dims.kv_len,
        dims.dim,
        extras,
    )?;
    Some(SdpaKey {
        mask,
        window: sdpa_window(&o.pattern),
        ..base
    })
}

fn attention_typed<T: CudaDType + DeviceRepr + WithDType>(
    op: &AttentionOp,
    q: &CudaStorage,
    lq: &Layout,
    k: &CudaStorage,
    lk: &Layout,
    v: &CudaStorage,
    lv: &Layout,
) -> Result<CudaSlice<T>> {
    let dims = op.dims(lq, lk, lv)?;
    if dims.dim > MAXD {
        bail!(
            "attention: head width {} > {MAXD} is not supported by the CUDA kernel",
            dims.dim
        )
    }
    let dev = &q.device;
    let pos = op.positions(dims.dim);
    let o = &op.opts;
    let (qa, qb) = offsets(lq)?;
    // Keys, values and grouped keys may be views of KV-cache buffers: read in place from
    // their first element, heads `kv_stride` rows apart.
    let span = AttentionOp::kv_span(&dims);
    let start = |l: &Layout| kv_rows(l).map_or(0, |(a, _)| a);
    let (ka, kb) = (start(lk), start(lk) + span);
    let (va, vb) = (start(lv), start(lv) + span);
    let qs = q.as_cuda_slice::<T>()?.slice(qa..qb);
    let ks = k.as_cuda_slice::<T>()?.slice(ka..kb);
    let vs = v.as_cuda_slice::<T>()?.slice(va..vb);
    // One decoding row of each sequence at the end of its cache, with the new GPU kernels
    // chosen: the decoding kernel (keys split into ranges, so that a few sequences at long
    // contexts fill the device; this kernel's layout gives one busy warp of four per block).
    let decoding = crate::tensor_core_attention()
        && dims.q_len == 1
        && o.pattern == Pattern::Causal
        && pos.q_pos0 + 1 == pos.k_pos0 + dims.kv_len as u64
        && o.q_grouped.is_none()
        && o.k_grouped.is_none()
        && o.key_mask.is_none();
    if decoding {
        let stream = dev.cuda_stream();
        let (kp, _) = ks.device_ptr(&stream);
        let (vp, _) = vs.device_ptr(&stream);
        let batch_bytes =
            (dims.kv_heads * dims.kv_stride * dims.dim * std::mem::size_of::<T>()) as u64;
        let seqs: Vec<_> = (0..dims.batch as u64)
            .map(|b| decode_many::SeqKv {
                k: kp + b * batch_bytes,
                v: vp + b * batch_bytes,
                len: dims.kv_len,
                cap: dims.kv_stride,
            })
            .collect();
        return decode_many::launch(
            dev,
            &qs,
            &seqs,
            dims.heads,
            dims.kv_heads,
            dims.dim,
            pos.scale,
            suffix(q)?,
        );
    }
    let qg = extra_slice::<T>(&o.q_grouped, None)?;
    let kg = extra_slice::<T>(&o.k_grouped, Some(span))?;
    let qg_s = match &qg {
        Some((g, a, b)) => cuda_of(g)?.as_cuda_slice::<T>()?.slice(*a..*b),
        None => q.as_cuda_slice::<T>()?.slice(qa..qb),
    };
    let kg_s = match &kg {
        Some((g, a, b)) => cuda_of(g)?.as_cuda_slice::<T>()?.slice(*a..*b),
        None => k.as_cuda_slice::<T>()?.slice(ka..kb),
    };
    let mask_guard = match &o.key_mask {
        Some(t) => {
            let (g, l) = t.storage_and_layout();
            let (a, b) = offsets(l)?;
            Some((g, a, b))
        }
        None => None,
    };
    let dummy_mask: CudaSlice<u8>;
    let mask_s = match &mask_guard {
        Some((g, a, b)) => cuda_of(g)?.as_cuda_slice::<u8>()?.slice(*a..*b),
        None => {
            dummy_mask = dev.alloc_zeros::<u8>(1)?;
            dummy_mask.slice(0..1)
        }
    };
    let n = dims.batch * dims.heads * dims.q_len * dims.dim;
    let mut out = output::<T>(dev, n)?;
    if let Some(key) = cudnn_key(q, &dims, o, &pos, [qa, ka, va]) {
        if cudnn::attention(dev, key, pos.scale, &qs, &ks, &vs, &mut out, None)? {
            return Ok(out);
        }
    }
    if let (Some((_, ga, _)), Some((_, kga, _))) = (&qg, &kg) {
        if let Some(base) = cudnn_base_key(q, &dims, &[qa, ka, va, *ga, *kga]) {
            let passes = (&qs, &ks, &vs, &qg_s, &kg_s);
            if selfextend::on_cudnn(dev, base, o, &pos, passes, &mut out, suffix(q)?)? {
                return Ok(out);
            }
        }
    }
    if let (Pattern::Scca(rules), None) = (&o.pattern, &o.key_mask) {
        if let Some(base) = cudnn_base_key(q, &dims, &[qa, ka, va]) {
            if scca::on_cudnn(dev, base, rules, &pos, (&qs, &ks, &vs), &mut out)? {
                return Ok(out);
            }
        }
    }
    let launch = AttentionLaunch::new(
        &dims,
        &pos,
        o,
        suffix(q)?,
        uses_tensor_cores(dev, q, &dims)?,
    );
    let f = func(dev, launch.module, &launch.name)?;
    let shared = launch.shared;
    // Past 48 KB a block's shared memory, its static part included (the tensor-core kernel's
    // row bounds, 1 KB), needs the opt-in attribute.
    if shared as usize + STATIC_SHARED_BYTES > 48 * 1024 {
        f.set_attribute(
            CUfunction_attribute_enum::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
            shared as i32,
        )
        .w()?;
    }
    let cfg = LaunchConfig {
        grid_dim: launch.grid,
        block_dim: launch.block,
        shared_mem_bytes: shared,
    };
    let rules = dev.clone_htod(&launch.rules)?;
    let args = launch.args;
    let stream = dev.cuda_stream();
    let mut b = stream.launch_builder(&f);
    b.arg(&qs);
    b.arg(&ks);
    b.arg(&vs);
    b.arg(&qg_s);
    b.arg(&kg_s);
    b.arg(&mask_s);
    b.arg(&rules);
    b.arg(&out);
    b.arg(&args);
    // SAFETY: argument list and types match capstan_attention_* in attention.cu.
    unsafe { b.launch(cfg) }.w()?;
    Ok(out)
}

macro_rules! dispatch {
    ($first:expr, $f:ident, $($arg:expr),*) => {{
        let dev = $first.device.clone();
        let slice = match &$first.slice {
            CudaStorageSlice::F32(_) => CudaStorageSlice::F32($f::<f32>($($arg),*)?),
            CudaStorageSlice::BF16(_) => CudaStorageSlice::BF16($f::<half::bf16>($($arg),*)?),
            CudaStorageSlice::F16(_) => CudaStorageSlice::F16($f::<half::f16>($($arg),*)?),
            _ => bail!("capstan-kernels: CUDA kernels take f32, bf16 or f16, got {:?}", $first.dtype()),
        };
        CudaStorage { slice, device: dev }
    }};
}

pub(crate) fn attention_fwd(
    op: &AttentionOp,
    q: &CudaStorage,
    lq: &Layout,
    k: &CudaStorage,
    lk: &Layout,
    v: &CudaStorage,
    lv: &Layout,
) -> Result<(CudaStorage, Shape)> {
    let out = dispatch!(q, attention_typed, op, q, lq, k, lk, v, lv);
    Ok((out, lq.shape().clone()))
}

fn rope_typed<T: CudaDType + DeviceRepr + WithDType>(
    op: &RopeOp,
    q: &CudaStorage,
    lq: &Layout,
    k: &CudaStorage,
    lk: &Layout,
    p: &CudaStorage,
    lp: &Layout,
) -> Result<CudaSlice<T>> {
    let (b, h, hk, s, d, per_row) = op.dims(lq, lk, lp)?;
    let dev = &q.device;
    let (qa, qb) = offsets(lq)?;
    let (ka, kb) = offsets(lk)?;
    let (pa, pb) = offsets(lp)?;
    let qs = q.as_cuda_slice::<T>()?.slice(qa..qb);
    let ks = k.as_cuda_slice::<T>()?.slice(ka..kb);
    let ps = p.as_cuda_slice::<u32>()?.slice(pa..pb);
    let inv = dev.clone_htod(&op.inv_freq)?;
    let n = b * (h + hk) * s * d;
    let out = output::<T>(dev, n)?;
    let f = func(dev, "rope", &format!("capstan_rope_{}", suffix(q)?))?;
    let cfg = LaunchConfig::for_num_elems((n / 2).max(1) as u32);
    let stream = dev.cuda_stream();
    let mut bld = stream.launch_builder(&f);
    bld.arg(&qs);
    bld.arg(&ks);
    bld.arg(&ps);
    bld.arg(&inv);
    bld.arg(&out);
    let ints = [b, h, hk, s, d, per_row as usize].map(|x| x as i32);
    for x in &ints {
        bld.arg(x);
    }
    bld.arg(&op.factor);
    // SAFETY: argument list and types match capstan_rope_* in rope.cu.
    unsafe { bld.launch(cfg) }.w()?;
    Ok(out)
}

pub(crate) fn rope_fwd(
    op: &RopeOp,
    q: &CudaStorage,
    lq: &Layout,
    k: &CudaStorage,
    lk: &Layout,
    p: &CudaStorage,
    lp: &Layout,
) -> Result<(CudaStorage, Shape)> {
    let (b, h, hk, s, d, _) = op.dims(lq, lk, lp)?;
    let out = dispatch!(q, rope_typed, op, q, lq, k, lk, p, lp);
    Ok((out, Shape::from((b, h + hk, s, d))))
}

fn rms_typed<T: CudaDType + DeviceRepr + WithDType>(
    op: &RmsNormOp,
    x: &CudaStorage,
    lx: &Layout,
    r: &CudaStorage,
    lr: &Layout,
    w: &CudaStorage,
    lw: &Layout,
) -> Result<CudaSlice<T>> {
    let (rows, dim) = op.dims(lx, lr, lw)?;
    let dev = &x.device;
    let (xa, xb) = offsets(lx)?;
    let (ra, rb) = offsets(lr)?;
    let (wa, wb) = offsets(lw)?;
    let xs = x.as_cuda_slice::<T>()?.slice(xa..xb);
    let rs = r.as_cuda_slice::<T>()?.slice(ra..rb);
    let ws = w.as_cuda_slice::<T>()?.slice(wa..wb);
    let out = output::<T>(dev, 2 * rows * dim)?;
    let f = func(
        dev,
        "rmsnorm",
        &format!("capstan_rms_norm_residual_{}", suffix(x)?),
    )?;
    let cfg = LaunchConfig {
        grid_dim: (rows as u32, 1, 1),
        block_dim: (256, 1, 1),
        shared_mem_bytes: 0,
    };
    let stream = dev.cuda_stream();
    let mut bld = stream.launch_builder(&f);
    bld.arg(&xs);
    bld.arg(&rs);
    bld.arg(&ws);
    bld.arg(&out);
    let (rows_i, dim_i) = (rows as i32, dim as i32);
    bld.arg(&rows_i);
    bld.arg(&dim_i);
    bld.arg(&op.eps);
    // SAFETY: argument list and types match capstan_rms_norm_residual_* in rmsnorm.cu.
    unsafe { bld.launch(cfg) }.w()?;
    Ok(out)
}

pub(crate) fn rms_norm_fwd(
    op: &RmsNormOp,
    x: &CudaStorage,
    lx: &Layout,
    r: &CudaStorage,
    lr: &Layout,
    w: &CudaStorage,
    lw: &Layout,
) -> Result<(CudaStorage, Shape)> {
    let out = dispatch!(x, rms_typed, op, x, lx, r, lr, w, lw);
    let mut dims = vec![2];
    dims.extend_from_slice(lx.shape().dims());
    Ok((out, Shape::from(dims)))
}
