//! The k best `(passage, score)` pairs of a scan, kept in a bounded min-heap.

use std::collections::BinaryHeap;

use crate::store::PassageOrd;

/// Collects the `k` highest scores; ties keep the smaller ordinal.
pub(crate) struct TopK {
    k: usize,
    heap: BinaryHeap<Worst>,
}

/// Heap entry ordered so that the *worst* hit is on top (ties: larger ord worse).
#[derive(PartialEq)]
struct Worst {
    score: f32,
    ord: PassageOrd,
}

impl Eq for Worst {}

impl PartialOrd for Worst {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Worst {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        other
            .score
            .total_cmp(&self.score)
            .then(self.ord.cmp(&other.ord))
    }
}

impl TopK {
    pub(crate) fn new(k: usize) -> Self {
        Self {
            k,
            heap: BinaryHeap::with_capacity(k + 1),
        }
    }

    /// The score a new hit must beat once `k` hits are held (else -inf).
    pub(crate) fn threshold(&self) -> f32 {
        match self.heap.peek() {
            Some(w) if self.heap.len() == self.k => w.score,
            _ => f32::NEG_INFINITY,
        }
    }

    /// Offers a hit; `ord` is only asked for when the score can enter.
    pub(crate) fn offer(&mut self, score: f32, ord: impl FnOnce() -> Option<PassageOrd>) {
        if self.k == 0 || score <= self.threshold() {
            return;
        }
        let Some(ord) = ord() else { return };
        self.heap.push(Worst { score, ord });
        if self.heap.len() > self.k {
            self.heap.pop();
        }
    }

    /// The hits, best first (ties: smaller ordinal first).
    pub(crate) fn into_sorted(self) -> Vec<(PassageOrd, f32)> {
        let mut hits: Vec<(PassageOrd, f32)> =
            self.heap.into_iter().map(|w| (w.ord, w.score)).collect();
        hits.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        hits
    }
}
