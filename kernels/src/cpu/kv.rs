//! The element types cached keys and values are read in: f32, or f16 (IEEE half). A decoding
//! step at long context reads every cached key and value once per layer, a load-bound loop (at
//! 2,048 tokens of SmolLM2 context, 94 MB of f32 a token), so halving the bytes halves that
//! loop's traffic; the arithmetic stays in f32 (each f16 widened as it is loaded).

use half::f16;

/// An element of cached keys or values.
pub trait KvElement: Copy + Default + Send + Sync + Into<f32> + 'static {
    /// Whether the vector form ([`KvElement::load8`]) needs F16C beside AVX2.
    const F16C: bool;

    /// Whether this CPU runs the vector form ([`KvElement::load8`]) when it has AVX2 and FMA.
    fn vector_ready() -> bool;

    /// `src` as f32: itself where it is f32, else widened into `scratch`.
    fn as_f32<'a>(src: &'a [Self], scratch: &'a mut Vec<f32>) -> &'a [f32];

    /// Eight elements from `p` as f32 lanes.
    ///
    /// # Safety
    /// The CPU has AVX2 (and F16C for f16: [`KvElement::vector_ready`]); `p..p + 8` is readable.
    #[cfg(target_arch = "x86_64")]
    unsafe fn load8(p: *const Self) -> std::arch::x86_64::__m256;
}

impl KvElement for f32 {
    const F16C: bool = false;

    fn vector_ready() -> bool {
        true
    }

    fn as_f32<'a>(src: &'a [Self], _: &'a mut Vec<f32>) -> &'a [f32] {
        src
    }

    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn load8(p: *const Self) -> std::arch::x86_64::__m256 {
        // SAFETY: the caller's contract.
        unsafe { std::arch::x86_64::_mm256_loadu_ps(p) }
    }
}

impl KvElement for f16 {
    const F16C: bool = true;

    fn vector_ready() -> bool {
        #[cfg(target_arch = "x86_64")]
        {
            std::is_x86_feature_detected!("f16c")
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            false
        }
    }

    fn as_f32<'a>(src: &'a [Self], scratch: &'a mut Vec<f32>) -> &'a [f32] {
        use half::slice::HalfFloatSliceExt;
        scratch.resize(src.len(), 0.0);
        // half's conversion picks F16C at run time.
        src.convert_to_f32_slice(scratch);
        scratch
    }

    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn load8(p: *const Self) -> std::arch::x86_64::__m256 {
        use std::arch::x86_64::*;
        // SAFETY: the caller's contract (F16C present, eight halves readable); f16 is a u16.
        unsafe { _mm256_cvtph_ps(_mm_loadu_si128(p.cast::<__m128i>())) }
    }
}
