//! The distance the HNSW graphs are built and searched with.

use capstan_kernels::cpu::math::dot;
use hnsw_rs::prelude::Distance;

/// Cosine distance of unit vectors, `1 - a·b`, in a form the compiler
/// vectorises (hnsw_rs's `DistCosine` recomputes both norms in f64, and its
/// `DistDot` panics when rounding puts a self-dot above 1).
#[derive(Debug, Default, Clone, Copy)]
pub struct UnitCosine;

impl Distance<f32> for UnitCosine {
    fn eval(&self, a: &[f32], b: &[f32]) -> f32 {
        (1.0 - dot(a, b)).max(0.0)
    }
}
