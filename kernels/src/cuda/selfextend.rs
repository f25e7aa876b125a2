//! SelfExtend on cuDNN: its near keys (`i - p < neighbor`, the normal rotations) and its far
//! keys (the grouped rotations) as two fused-attention passes with their softmax statistics,
//! merged by them in one more launch (attention_merge.cu). Tested on the CPU as two graphs
//! (`sdpa_graph` tests) and on a GPU against the reference (`kernels/tests/gpu.rs`).

use candle_core::cuda_backend::cudarc::driver::{
    CudaSlice, CudaView, DeviceRepr, LaunchConfig, PushKernelArg,
};
use candle_core::cuda_backend::{CudaDType, WrapErr};
use candle_core::{CudaDevice, Result, WithDType};

use super::cudnn;
use super::launch::{func, output};
use crate::cpu::AttnPositions;
use crate::sdpa_graph::{selfextend_masks, SdpaKey};

/// Queries, keys, values, grouped queries and grouped keys, each from its first element.
type Passes<'a, 'b, T> = (
    &'a CudaView<'b, T>,
    &'a CudaView<'b, T>,
    &'a CudaView<'b, T>,
    &'a CudaView<'b, T>,
    &'a CudaView<'b, T>,
);

/// Runs SelfExtend on cuDNN into `out` when the call is one its two passes express and cuDNN
/// has plans for both (asked before either runs); `Ok(false)` otherwise. `suffix`: the merge
/// entry point's type suffix (`launch::suffix`).
pub(super) fn on_cudnn<T: CudaDType + DeviceRepr + WithDType>(
    dev: &CudaDevice,
    base: SdpaKey,
    o: &crate::AttentionOptions,
    pos: &AttnPositions,
    (q, k, v, qg, kg): Passes<'_, '_, T>,
    out: &mut CudaSlice<T>,
    suffix: &str,
) -> Result<bool> {
    let Some((near, window, far)) = selfextend_masks(
        &o.pattern,
        pos.q_pos0,
        pos.k_pos0,
        base.q_len as usize,
        base.kv_len as usize,
        base.dim as usize,
        o.key_mask.is_some(),
    ) else {
        return Ok(false);
    };
    let near = SdpaKey {
        mask: near,
        window,
        stats: true,
        ..base
    };
    let far = SdpaKey {
        mask: far,
        window: 0,
        stats: true,
        ..base
    };
    if !cudnn::ready(dev, &near)? || !cudnn::ready(dev, &far)? {
        return Ok(false);
    }
    let rows = (base.batch * base.heads * base.q_len) as usize;
    let n = rows * base.dim as usize;
    let (mut o1, mut o2) = (output::<T>(dev, n)?, output::<T>(dev, n)?);
    let (mut l1, mut l2) = (output::<f32>(dev, rows)?, output::<f32>(dev, rows)?);
    let ran = cudnn::attention(dev, near, pos.scale, q, k, v, &mut o1, Some(&mut l1))?
        && cudnn::attention(dev, far, pos.scale, qg, kg, v, &mut o2, Some(&mut l2))?;
    if !ran {
        candle_core::bail!("cuDNN SelfExtend: a pass with a plan did not run")
    }
    let f = func(
        dev,
        "attention_merge",
        &format!("capstan_attention_merge_{suffix}"),
    )?;
    let cfg = LaunchConfig {
        grid_dim: (n.div_ceil(256) as u32, 1, 1),
        block_dim: (256, 1, 1),
        shared_mem_bytes: 0,
    };
    let stream = dev.cuda_stream();
    let mut b = stream.launch_builder(&f);
    b.arg(&o1);
    b.arg(&l1);
    b.arg(&o2);
    b.arg(&l2);
    b.arg(out);
    let (rows, dim) = (rows as i32, base.dim as i32);
    b.arg(&rows);
    b.arg(&dim);
    // SAFETY: argument list and types match capstan_attention_merge_* in attention_merge.cu;
    // o1, o2 and out hold `rows * dim` elements, l1 and l2 `rows`.
    unsafe { b.launch(cfg) }.w()?;
    Ok(true)
}
