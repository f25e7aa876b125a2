//! The SCCA family's chunked heads on cuDNN: the batched chunk calls of `crate::scca_calls`,
//! each reading its queries, keys and values and writing its output in place. Tested on the
//! CPU as graphs (`sdpa_graph` tests) and on a GPU against the reference (`kernels/tests/gpu.rs`).

use candle_core::cuda_backend::cudarc::driver::{CudaSlice, CudaView, DeviceRepr};
use candle_core::{CudaDevice, Result};

use super::cudnn;
use crate::cpu::AttnPositions;
use crate::pattern::HeadRule;
use crate::scca_calls::scca_calls;
use crate::sdpa_graph::SdpaKey;

/// Runs SCCA attention with per-head `rules` on cuDNN into `out` when its calls express it and
/// cuDNN has a plan for each (asked before any runs, so that `out` is written whole or not at
/// all); `Ok(false)` otherwise. `base`: the whole call's key; `q`, `k`, `v` from their first
/// element.
pub(super) fn on_cudnn<T: DeviceRepr>(
    dev: &CudaDevice,
    base: SdpaKey,
    rules: &[HeadRule],
    pos: &AttnPositions,
    (q, k, v): (&CudaView<'_, T>, &CudaView<'_, T>, &CudaView<'_, T>),
    out: &mut CudaSlice<T>,
) -> Result<bool> {
    let Some(calls) = scca_calls(rules, &base, pos.q_pos0, pos.k_pos0) else {
        return Ok(false);
    };
    for call in &calls {
        if !cudnn::ready(dev, &call.key)? {
            return Ok(false);
        }
    }
    let d = base.dim as usize;
    for call in &calls {
        let (qa, ka) = (call.q_row as usize * d, call.kv_row as usize * d);
        let (qs, ks, vs) = (q.slice(qa..), k.slice(ka..), v.slice(ka..));
        let mut os = out.slice_mut(qa..);
        if !cudnn::attention(dev, call.key, pos.scale, &qs, &ks, &vs, &mut os, None)? {
            candle_core::bail!("cuDNN SCCA: a call with a plan did not run")
        }
    }
    Ok(true)
}
