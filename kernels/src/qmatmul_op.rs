//! [`QMatrix`] products as a candle op (CPU only): `x (..., cols)` times the matrix's
//! transpose, in `x`'s dtype.

use std::sync::Arc;

use candle_core::backend::BackendStorage;
use candle_core::{bail, CpuStorage, CustomOp1, Layout, Result, Shape, Tensor};

use crate::cpu::qmatmul::QMatrix;
use crate::ops::{cpu_f32_at, cpu_from_f32};

struct QMatMulOp(Arc<QMatrix>);

impl CustomOp1 for QMatMulOp {
    fn name(&self) -> &'static str {
        "capstan-qmatmul"
    }

    fn cpu_fwd(&self, s: &CpuStorage, l: &Layout) -> Result<(CpuStorage, Shape)> {
        let m = &self.0;
        let Some((a, b)) = l.contiguous_offsets() else {
            bail!("capstan-qmatmul: input must be contiguous, got {l:?}")
        };
        let mut dims = l.dims().to_vec();
        if dims.last() != Some(&m.cols()) {
            bail!(
                "capstan-qmatmul: input {:?} times a ({}, {}) matrix",
                dims,
                m.rows(),
                m.cols()
            );
        }
        let y = match s {
            CpuStorage::F32(v) => m.matmul(&v[a..b]),
            _ => m.matmul(&cpu_f32_at(s, a, b - a)?),
        };
        *dims.last_mut().expect("checked above") = m.rows();
        let out = match s {
            CpuStorage::F32(_) => CpuStorage::F32(y),
            _ => cpu_from_f32(&y, s.dtype())?,
        };
        Ok((out, Shape::from(dims)))
    }
}

/// `x W^T` for a quantized `W` on the CPU (`x` contiguous, last dimension `W`'s columns).
pub fn qmatmul(x: &Tensor, w: &Arc<QMatrix>) -> Result<Tensor> {
    if !x.device().is_cpu() {
        bail!("capstan-qmatmul runs on the CPU only");
    }
    x.contiguous()?.apply_op1_no_bwd(&QMatMulOp(w.clone()))
}
