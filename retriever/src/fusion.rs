//! Fusing the BM25 and dense rankings.

use std::collections::HashMap;
use std::hash::Hash;

use serde::{Deserialize, Serialize};

/// How hybrid retrieval combines its two rankings.
///
/// The default, a convex combination of min-max normalised scores with BM25
/// weighted 0.55, was chosen on the dev splits of the real-text sets
/// (bench/real_sets.py: Rust documentation and manual pages, known-item and
/// inverse-cloze queries), where it beat every RRF setting tried (k 10-60,
/// weights 0.4-0.7) and other normalisations; docs/BENCHMARKS.md has the
/// sweep and the test-split figures.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(tag = "method", rename_all = "lowercase")]
pub enum Fusion {
    /// Reciprocal rank fusion (Cormack et al., 2009), weighted:
    /// `2w / (k + rank_bm25) + 2(1 - w) / (k + rank_dense)`; with `w` = 0.5
    /// the classic `sum 1 / (k + rank)`.
    Rrf {
        /// The rank constant (60 in the paper).
        k: f32,
        /// Weight of BM25's ranking, in [0, 1] (dense gets `1 - w`).
        #[serde(default = "half")]
        bm25_weight: f32,
    },
    /// `w * bm25' + (1 - w) * dense'`, each score min-max normalised over its
    /// ranking's candidates (a candidate one ranking lacks adds 0 from it).
    Weighted {
        /// Weight of BM25, in [0, 1].
        bm25_weight: f32,
    },
}

impl Fusion {
    /// BM25's weight of the default fusion.
    pub const DEFAULT_BM25_WEIGHT: f32 = 0.55;
}

impl Default for Fusion {
    fn default() -> Self {
        Fusion::Weighted {
            bm25_weight: Self::DEFAULT_BM25_WEIGHT,
        }
    }
}

fn half() -> f32 {
    0.5
}

/// Fuses two rankings (best first, `(key, score)`; keys are passage keys
/// or document numbers), returning `(key, fused)` best first. Equal fused
/// scores keep the order in which the rankings first name them (taking
/// BM25's and dense's first, then their second, ...), so the result depends
/// only on the rankings, never on what the keys are.
pub fn fuse<K: Copy + Eq + Hash>(
    bm25: &[(K, f32)],
    dense: &[(K, f32)],
    fusion: Fusion,
) -> Vec<(K, f32)> {
    // key -> (fused score, first appearance)
    let mut fused: HashMap<K, (f32, usize)> = HashMap::new();
    for r in 0..bm25.len().max(dense.len()) {
        for list in [bm25, dense] {
            if let Some((key, _)) = list.get(r) {
                let next = fused.len();
                fused.entry(*key).or_insert((0.0, next));
            }
        }
    }
    let mut add = |key: &K, value: f32| {
        if let Some(entry) = fused.get_mut(key) {
            entry.0 += value;
        }
    };
    match fusion {
        Fusion::Rrf { k, bm25_weight } => {
            for (list, w) in [(bm25, bm25_weight), (dense, 1.0 - bm25_weight)] {
                for (rank, (key, _)) in list.iter().enumerate() {
                    add(key, 2.0 * w / (k + rank as f32 + 1.0));
                }
            }
        }
        Fusion::Weighted { bm25_weight } => {
            for (list, w) in [(bm25, bm25_weight), (dense, 1.0 - bm25_weight)] {
                let (lo, hi) = list
                    .iter()
                    .fold((f32::INFINITY, f32::NEG_INFINITY), |(lo, hi), (_, s)| {
                        (lo.min(*s), hi.max(*s))
                    });
                for (key, s) in list {
                    let norm = if hi > lo { (s - lo) / (hi - lo) } else { 1.0 };
                    add(key, w * norm);
                }
            }
        }
    }
    let mut out: Vec<(K, (f32, usize))> = fused.into_iter().collect();
    out.sort_by(|a, b| b.1 .0.total_cmp(&a.1 .0).then(a.1 .1.cmp(&b.1 .1)));
    out.into_iter()
        .map(|(key, (score, _))| (key, score))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rrf_rewards_agreement() {
        let bm25 = [(1, 9.0), (2, 5.0), (3, 1.0)];
        let dense = [(2, 0.9), (3, 0.8), (4, 0.1)];
        let out = fuse(
            &bm25,
            &dense,
            Fusion::Rrf {
                k: 60.0,
                bm25_weight: 0.5,
            },
        );
        assert_eq!(out[0].0, 2); // 1/62 + 1/61 beats 1/61 alone and 1/63 + 1/62
        let expected = 1.0 / 62.0 + 1.0 / 61.0;
        assert!((out[0].1 - expected).abs() < 1e-7);
        assert_eq!(out.len(), 4);
    }

    #[test]
    fn rrf_weights_tilt_towards_one_ranking() {
        let bm25 = [(1, 9.0), (2, 5.0)];
        let dense = [(2, 0.9), (1, 0.8)];
        let rrf = |w| {
            fuse(
                &bm25,
                &dense,
                Fusion::Rrf {
                    k: 60.0,
                    bm25_weight: w,
                },
            )[0]
            .0
        };
        assert_eq!(rrf(0.7), 1);
        assert_eq!(rrf(0.3), 2);
    }

    #[test]
    fn weighted_fusion_normalises_each_list() {
        let bm25 = [(1, 10.0), (2, 0.0)];
        let dense = [(2, 0.9), (1, 0.5)];
        let out = fuse(&bm25, &dense, Fusion::Weighted { bm25_weight: 0.7 });
        assert_eq!(out[0], (1, 0.7));
        assert!((out[1].1 - 0.3).abs() < 1e-6);
    }
}
