//! The generator's only source of randomness.
//!
//! Everything is drawn from `next_u64` of rand 0.8's `StdRng` (ChaCha12, pinned by
//! Cargo.lock) and reduced with integer arithmetic of fixed width, so the output does
//! not depend on the platform's pointer width (rand's own `gen_range::<usize>` does).

use rand::rngs::StdRng;
use rand::{RngCore, SeedableRng};

/// Independent streams derived from one seed, so that e.g. asking for more questions
/// leaves the documents unchanged.
#[derive(Clone, Copy)]
pub(crate) enum Stream {
    World = 1,
    Text = 2,
    Questions = 3,
}

pub(crate) struct Dice(StdRng);

impl Dice {
    pub(crate) fn new(seed: u64, stream: Stream) -> Self {
        // SplitMix64 finaliser: well-separated sub-seeds for the streams.
        let mut z = seed ^ (stream as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        Dice(StdRng::seed_from_u64(z ^ (z >> 31)))
    }

    /// Uniform-enough integer in `0..n` (`n > 0`), by multiply-shift.
    pub(crate) fn below(&mut self, n: usize) -> usize {
        assert!(n > 0, "Dice::below(0)");
        ((u128::from(self.0.next_u64()) * n as u128) >> 64) as usize
    }

    /// Integer in `lo..=hi`.
    pub(crate) fn range(&mut self, lo: u32, hi: u32) -> u32 {
        lo + self.below((hi - lo) as usize + 1) as u32
    }

    /// True with probability `percent` / 100.
    pub(crate) fn chance(&mut self, percent: u32) -> bool {
        self.below(100) < percent as usize
    }

    pub(crate) fn pick<'a, T>(&mut self, xs: &'a [T]) -> &'a T {
        &xs[self.below(xs.len())]
    }

    pub(crate) fn word<'a>(&mut self, xs: &[&'a str]) -> &'a str {
        xs[self.below(xs.len())]
    }

    /// Index drawn with the given integer weights.
    pub(crate) fn weighted(&mut self, weights: &[u32]) -> usize {
        let total: u32 = weights.iter().sum();
        let mut x = self.below(total as usize) as u32;
        for (i, &w) in weights.iter().enumerate() {
            if x < w {
                return i;
            }
            x -= w;
        }
        weights.len() - 1
    }

    pub(crate) fn shuffle<T>(&mut self, xs: &mut [T]) {
        for i in (1..xs.len()).rev() {
            let j = self.below(i + 1);
            xs.swap(i, j);
        }
    }
}
