//! The CPU math every model runs, written once: `exp`, `erf`, sums, softmax,
//! GELU and dot products over f32 slices, each in a form the compiler
//! vectorises (eight independent lanes) and, on x86-64 CPUs with AVX2 and
//! FMA, compiled for them and picked at run time. The indexer's BERT encoder
//! and the reader's attention both call these.

/// Whether this CPU runs the AVX2 + FMA versions (detected once; cached by std).
pub fn has_avx2() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// `exp` for `x <= 88`, vectorisable, relative error below 2e-7 (Cephes'
/// `expf`: `x = n ln 2 + r`, a degree-6 polynomial in `r`, `2^n` from bits).
#[inline(always)]
pub fn exp(x: f32) -> f32 {
    const ROUND: f32 = 12_582_912.0; // 1.5 · 2^23: adding it rounds to an integer
    let x = x.clamp(-87.336_54, 88.37626);
    let shifted = x * std::f32::consts::LOG2_E + ROUND;
    let n = shifted - ROUND;
    let r = x - n * 0.693_359_4 - n * -2.121_944_4e-4;
    let p = 1.987_569_1e-4;
    let p = p * r + 1.398_199_9e-3;
    let p = p * r + 8.333_452e-3;
    let p = p * r + 4.166_579_6e-2;
    let p = p * r + 1.666_666_5e-1;
    let p = p * r + 0.5;
    let p = p * r * r + r + 1.0;
    // `2^n` from the bits of `shifted`, whose low mantissa bits hold `n` (as `(n as i32 + 127)
    // << 23`, without the float-to-int cast, which does not vectorise).
    let biased = shifted
        .to_bits()
        .wrapping_sub(ROUND.to_bits())
        .wrapping_add(127);
    p * f32::from_bits(biased << 23)
}

/// `erf`, vectorisable, absolute error below 1e-7: the rational
/// approximation of Eigen's `generic_fast_erf_float` (also XLA's), evaluated
/// in `f64` so that the division does not lose the last bits.
#[inline(always)]
pub fn erf(x: f32) -> f32 {
    let x = (x as f64).clamp(-4.0, 4.0);
    let x2 = x * x;
    let p = -2.726_142_258_013_06e-10;
    let p = p * x2 + 2.770_681_424_959_02e-8;
    let p = p * x2 + -2.101_024_020_825_08e-6;
    let p = p * x2 + -5.692_506_394_623_46e-5;
    let p = p * x2 + -7.349_906_303_268_55e-4;
    let p = p * x2 + -2.954_599_808_540_25e-3;
    let p = p * x2 + -1.609_603_332_624_15e-2;
    let q = -1.456_607_184_649_96e-5;
    let q = q * x2 + -2.133_740_552_789_05e-4;
    let q = q * x2 + -1.682_826_974_382_03e-3;
    let q = q * x2 + -7.373_329_167_204_68e-3;
    let q = q * x2 + -1.426_473_905_141_89e-2;
    (x * p / q) as f32
}

/// Sum with eight lanes, so that the reduction vectorises.
#[inline(always)]
pub fn sum(x: &[f32]) -> f32 {
    let mut acc = [0f32; 8];
    let mut chunks = x.chunks_exact(8);
    for c in &mut chunks {
        for (a, v) in acc.iter_mut().zip(c) {
            *a += v;
        }
    }
    acc.iter().sum::<f32>() + chunks.remainder().iter().sum::<f32>()
}

/// Largest element, with eight lanes (`-inf` for an empty slice).
#[inline(always)]
pub(crate) fn max(x: &[f32]) -> f32 {
    let mut lanes = [f32::NEG_INFINITY; 8];
    let mut chunks = x.chunks_exact(8);
    for c in &mut chunks {
        for (m, &v) in lanes.iter_mut().zip(c) {
            if v > *m {
                *m = v;
            }
        }
    }
    chunks
        .remainder()
        .iter()
        .chain(&lanes)
        .fold(f32::NEG_INFINITY, |m, &v| if v > m { v } else { m })
}

#[inline(always)]
fn softmax_generic(row: &mut [f32], scale: f32) {
    if scale != 1.0 {
        row.iter_mut().for_each(|x| *x *= scale);
    }
    let m = max(row);
    row.iter_mut().for_each(|x| *x = exp(*x - m));
    let inv = 1.0 / sum(row);
    row.iter_mut().for_each(|x| *x *= inv);
}

#[inline(always)]
fn gelu_generic(x: &mut [f32]) {
    for v in x.iter_mut() {
        let u = *v;
        *v = 0.5 * u * (1.0 + erf(u * std::f32::consts::FRAC_1_SQRT_2));
    }
}

/// Dot product with eight independent accumulators (SIMD-friendly; vectorised where inlined
/// into code compiled for AVX2); `b` in f32 or a type that widens to it (a KV cache's f16).
#[inline(always)]
pub(crate) fn dot_portable<T: Copy + Into<f32>>(a: &[f32], b: &[T]) -> f32 {
    let mut acc = [0f32; 8];
    let (ca, cb) = (a.chunks_exact(8), b.chunks_exact(8));
    let tail: f32 = ca
        .remainder()
        .iter()
        .zip(cb.remainder())
        .map(|(x, &y)| x * y.into())
        .sum();
    for (x, y) in ca.zip(cb) {
        for i in 0..8 {
            acc[i] += x[i] * y[i].into();
        }
    }
    acc.iter().sum::<f32>() + tail
}

/// `$generic` compiled for AVX2 + FMA.
macro_rules! with_avx2 {
    ($generic:ident, $avx2:ident, ($($arg:ident : $ty:ty),*)) => {
        #[cfg(target_arch = "x86_64")]
        #[target_feature(enable = "avx2,fma")]
        unsafe fn $avx2($($arg: $ty),*) {
            $generic($($arg),*)
        }
    };
}

/// `$generic` compiled for AVX-512 F (with AVX2 + FMA): the same code on 16 lanes.
macro_rules! with_avx512 {
    ($generic:ident, $avx512:ident, ($($arg:ident : $ty:ty),*)) => {
        #[cfg(target_arch = "x86_64")]
        #[target_feature(enable = "avx512f,avx2,fma")]
        unsafe fn $avx512($($arg: $ty),*) {
            $generic($($arg),*)
        }
    };
}

with_avx2!(softmax_generic, softmax_avx2, (row: &mut [f32], scale: f32));
with_avx2!(gelu_generic, gelu_avx2, (x: &mut [f32]));
with_avx512!(softmax_generic, softmax_avx512, (row: &mut [f32], scale: f32));
with_avx512!(gelu_generic, gelu_avx512, (x: &mut [f32]));

/// Whether this CPU runs the AVX-512 versions (detected once; cached by std).
pub fn has_avx512() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        has_avx2() && std::is_x86_feature_detected!("avx512f")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// `softmax(row * scale)` in place.
pub fn softmax(row: &mut [f32], scale: f32) {
    #[cfg(target_arch = "x86_64")]
    if has_avx512() {
        // SAFETY: the CPU supports AVX-512 F, AVX2 and FMA.
        return unsafe { softmax_avx512(row, scale) };
    }
    #[cfg(target_arch = "x86_64")]
    if has_avx2() {
        // SAFETY: the CPU supports AVX2 and FMA.
        return unsafe { softmax_avx2(row, scale) };
    }
    softmax_generic(row, scale)
}

/// GELU in its exact (erf) form, in place.
pub fn gelu(x: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if has_avx512() {
        // SAFETY: the CPU supports AVX-512 F, AVX2 and FMA.
        return unsafe { gelu_avx512(x) };
    }
    #[cfg(target_arch = "x86_64")]
    if has_avx2() {
        // SAFETY: the CPU supports AVX2 and FMA.
        return unsafe { gelu_avx2(x) };
    }
    gelu_generic(x)
}

/// Dot product (AVX2 + FMA when the CPU has them).
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    dot_fn()(a, b)
}

/// The fastest dot product this CPU runs; hot loops fetch it once.
pub fn dot_fn() -> fn(&[f32], &[f32]) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if has_avx2() {
        return |a, b| {
            // SAFETY: the CPU supports AVX2 and FMA.
            unsafe { dot_avx2(a, b) }
        };
    }
    dot_portable::<f32>
}

/// Dot product with four 8-lane FMA accumulators; the compiler does not
/// fuse multiply-adds on its own, and that is most of the gain.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
pub(crate) unsafe fn dot_avx2(a: &[f32], b: &[f32]) -> f32 {
    use std::arch::x86_64::*;
    let n = a.len().min(b.len());
    let (pa, pb) = (a.as_ptr(), b.as_ptr());
    // SAFETY: every load reads 8 floats below `n`, inside both slices.
    unsafe {
        let mut acc = [_mm256_setzero_ps(); 4];
        let mut i = 0;
        while i + 32 <= n {
            for (j, acc) in acc.iter_mut().enumerate() {
                let x = _mm256_loadu_ps(pa.add(i + 8 * j));
                let y = _mm256_loadu_ps(pb.add(i + 8 * j));
                *acc = _mm256_fmadd_ps(x, y, *acc);
            }
            i += 32;
        }
        while i + 8 <= n {
            acc[0] = _mm256_fmadd_ps(
                _mm256_loadu_ps(pa.add(i)),
                _mm256_loadu_ps(pb.add(i)),
                acc[0],
            );
            i += 8;
        }
        let s = _mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3]));
        let mut lanes = [0f32; 8];
        _mm256_storeu_ps(lanes.as_mut_ptr(), s);
        let mut total: f32 = lanes.iter().sum();
        while i < n {
            total += *pa.add(i) * *pb.add(i);
            i += 1;
        }
        total
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn erf_and_exp_are_accurate() {
        let mut worst_erf = 0f64;
        let mut worst_exp = 0f64;
        for i in 0..=200_000 {
            let x = -6.0 + 12.0 * i as f64 / 200_000.0;
            let xf = x as f32;
            worst_erf = worst_erf.max((erf(xf) as f64 - libm_erf(xf as f64)).abs());
            let y = -80.0 + 80.0 * i as f64 / 200_000.0;
            let yf = y as f32;
            let e = (yf as f64).exp();
            worst_exp = worst_exp.max(((exp(yf) as f64) - e).abs() / e);
        }
        assert!(worst_erf < 1e-7, "erf abs error {worst_erf}");
        assert!(worst_exp < 2e-7, "exp rel error {worst_exp}");
    }

    /// erf in f64 from its Taylor series / continued fraction, for the test only.
    fn libm_erf(x: f64) -> f64 {
        if x.abs() < 3.0 {
            let mut term = x;
            let mut sum = x;
            let mut n = 0.0;
            while term.abs() > 1e-17 {
                n += 1.0;
                term *= -x * x / n;
                sum += term / (2.0 * n + 1.0);
            }
            2.0 / std::f64::consts::PI.sqrt() * sum
        } else {
            // erfc continued fraction (Lentz), accurate for |x| >= 3.
            let a = x.abs();
            let mut f = 0.0;
            for k in (1..60).rev() {
                f = (k as f64 / 2.0) / (a + f);
            }
            let erfc = (-a * a).exp() / std::f64::consts::PI.sqrt() / (a + f);
            (1.0 - erfc).copysign(x)
        }
    }

    fn pseudo_random(n: usize, seed: u32) -> Vec<f32> {
        let mut s = seed.wrapping_mul(2_654_435_761).max(1);
        (0..n)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 17;
                s ^= s << 5;
                (s as f32 / u32::MAX as f32) * 8.0 - 4.0
            })
            .collect()
    }

    #[test]
    fn softmax_and_gelu_match_their_definitions_with_and_without_avx2() {
        for len in [1, 7, 8, 9, 33, 300] {
            let x = pseudo_random(len, len as u32);
            for scale in [1.0f32, 0.125] {
                let mut fast = x.clone();
                softmax(&mut fast, scale);
                let mut portable = x.clone();
                softmax_generic(&mut portable, scale);
                let m = x
                    .iter()
                    .map(|v| (v * scale) as f64)
                    .fold(f64::MIN, f64::max);
                let z: f64 = x.iter().map(|v| ((v * scale) as f64 - m).exp()).sum();
                for ((f, p), v) in fast.iter().zip(&portable).zip(&x) {
                    let want = (((v * scale) as f64 - m).exp() / z) as f32;
                    assert!((f - want).abs() < 1e-6, "softmax len {len}");
                    assert!((p - want).abs() < 1e-6, "portable softmax len {len}");
                }
            }
            let mut g = x.clone();
            gelu(&mut g);
            for (g, v) in g.iter().zip(&x) {
                let want = 0.5 * *v as f64 * (1.0 + libm_erf(*v as f64 / 2f64.sqrt()));
                assert!((*g as f64 - want).abs() < 1e-6, "gelu({v})");
            }
        }
    }

    #[test]
    fn the_simd_dot_product_equals_the_portable_one() {
        for len in [0, 1, 7, 8, 9, 31, 32, 33, 64, 100, 384] {
            let a = pseudo_random(len, 3 + len as u32);
            let b = pseudo_random(len, 1000 + len as u32);
            let portable = dot_portable(&a, &b);
            let exact: f64 = a.iter().zip(&b).map(|(x, y)| *x as f64 * *y as f64).sum();
            assert!((dot(&a, &b) - portable).abs() < 1e-4, "length {len}");
            assert!((portable as f64 - exact).abs() < 1e-3, "length {len}");
        }
    }
}
