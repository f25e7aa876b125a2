//! [`QMatrix`] products as a candle op (CPU only): `x (..., cols)` times the matrix's
//! transpose, in `x`'s dtype.

use std::sync::Arc;

use candle_core::backend::BackendStorage;
use candle_core::{bail, CpuStorage, CustomOp1, Layout, Result, Shape, Tensor};

use crate::cpu::qmatmul::QMatrix;
use crate::ops::{cpu_f32_at, cpu_from_f32};

/// Which kernels multiply.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Product {
    /// The quantized kernels ([`QMatrix::matmul`]).
    Quantized,
    /// AMX tiles ([`QMatrix::matmul_amx`]).
    Amx,
}

struct QMatMulOp(Arc<QMatrix>, Product);

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
        let product = |x: &[f32]| match self.1 {
            Product::Amx => m.matmul_amx(x),
            Product::Quantized => Some(m.matmul(x)),
        };
        let y = match s {
            CpuStorage::F32(v) => product(&v[a..b]),
            _ => product(&cpu_f32_at(s, a, b - a)?),
        };
        let Some(y) = y else {
            bail!(
                "capstan-qmatmul: no AMX tiles for a ({}, {}) matrix",
                m.rows(),
                m.cols()
            )
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
    x.contiguous()?
        .apply_op1_no_bwd(&QMatMulOp(w.clone(), Product::Quantized))
}

/// `x W^T` on AMX tiles (`W` rounded to bf16, `x` in two bf16 parts, f32 accumulation: the
/// product of many rows), or `None` where the CPU has none or `W` is not whole panels
/// ([`QMatrix::matmul_amx`]).
pub fn qmatmul_amx(x: &Tensor, w: &Arc<QMatrix>) -> Result<Option<Tensor>> {
    if !x.device().is_cpu() || !w.fits_amx() {
        return Ok(None);
    }
    x.contiguous()?
        .apply_op1_no_bwd(&QMatMulOp(w.clone(), Product::Amx))
        .map(Some)
}
