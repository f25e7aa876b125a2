//! BM25 as sparse vectors, scored by Qdrant exactly as the embedded index
//! scores it.
//!
//! The embedded score of a passage is `sum over query terms t of
//! idf(t) * (k1 + 1) * tf / (tf + k1 * (1 - b + b * len / avg_len))`, with
//! Lucene's `idf = ln(1 + (N - df + 0.5) / (df + 0.5))`. Qdrant's `idf`
//! modifier multiplies each query weight by that same idf (computed from the
//! shard's own N and df) before the dot product. So a passage stores, for
//! each of its terms, `(k1 + 1) * tf / (tf + k1 * (1 - b + b * len / avg_len))`
//! (its length rounded as tantivy's field norm rounds it), and a query sends
//! each of its terms with its count. With one shard the scores equal the
//! embedded index's; with several, each shard's idf is its own (Qdrant 1.18
//! has no collection-wide statistics), which moves scores by a little.
//!
//! `avg_len` cannot follow the collection as it grows (stored values would
//! have to be rewritten): it is fixed when the collection is created, from
//! the passages of the run that creates it, and recorded in its description.

use std::collections::BTreeMap;

use capstan_indexer::{Bm25Analyzer, Bm25Params};
use serde::{Deserialize, Serialize};
use xxhash_rust::xxh3::xxh3_64;

/// How a term becomes a sparse index, recorded in the collection.
pub const TERM_IDS: &str = "xxh3-64 of the term's UTF-8, low 32 bits";

/// A term's sparse index.
pub fn term_id(term: &str) -> u32 {
    xxh3_64(term.as_bytes()) as u32
}

/// BM25's document-side constants of a collection.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Bm25Values {
    /// Term-frequency saturation.
    pub k1: f32,
    /// Length normalisation.
    pub b: f32,
    /// The average passage length in terms (title and text) the values are
    /// normalised by.
    pub avg_length: f32,
}

impl Bm25Values {
    /// The constants for `params` and passages of the given term counts
    /// (average 1 for an empty list).
    pub fn new(params: Bm25Params, lengths: impl IntoIterator<Item = usize>) -> Self {
        let (mut total, mut n) = (0u64, 0u64);
        for len in lengths {
            total += len as u64;
            n += 1;
        }
        let avg_length = if n == 0 || total == 0 {
            1.0
        } else {
            total as f32 / n as f32
        };
        Self {
            k1: params.k1,
            b: params.b,
            avg_length,
        }
    }
}

/// A sparse vector: sorted unique indices and their values.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Sparse {
    /// Term ids, ascending.
    pub indices: Vec<u32>,
    /// One value per index.
    pub values: Vec<f32>,
}

impl Sparse {
    /// Whether it has no term.
    pub fn is_empty(&self) -> bool {
        self.indices.is_empty()
    }

    fn from_counts(counts: BTreeMap<u32, u32>, value: impl Fn(f32) -> f32) -> Self {
        let mut out = Sparse::default();
        for (id, count) in counts {
            out.indices.push(id);
            out.values.push(value(count as f32));
        }
        out
    }
}

/// Term counts by id (two terms with one id count together, on both sides).
fn counts<'a>(terms: impl IntoIterator<Item = &'a String>) -> BTreeMap<u32, u32> {
    let mut counts = BTreeMap::new();
    for t in terms {
        *counts.entry(term_id(t)).or_insert(0) += 1;
    }
    counts
}

/// Sparse vectors of passages and queries.
#[derive(Clone)]
pub struct Bm25Encoder {
    analyzer: Bm25Analyzer,
    values: Bm25Values,
}

impl Bm25Encoder {
    /// An encoder with a collection's constants.
    pub fn new(values: Bm25Values) -> Self {
        Self {
            analyzer: Bm25Analyzer::default(),
            values,
        }
    }

    /// The number of BM25 terms of a passage (title and text), for
    /// [`Bm25Values::new`].
    pub fn length(analyzer: &Bm25Analyzer, title: &str, text: &str) -> usize {
        analyzer.terms(title).len() + analyzer.terms(text).len()
    }

    /// A passage's saturated, length-normalised term frequencies.
    pub fn passage(&self, title: &str, text: &str) -> Sparse {
        let mut terms = self.analyzer.terms(title);
        terms.extend(self.analyzer.terms(text));
        let len = Bm25Analyzer::scored_length(terms.len()) as f32;
        let Bm25Values { k1, b, avg_length } = self.values;
        let norm = k1 * (1.0 - b + b * len / avg_length.max(f32::EPSILON));
        Sparse::from_counts(counts(&terms), |tf| (k1 + 1.0) * tf / (tf + norm))
    }

    /// A query: each term with its count (a repeated term counts again, as
    /// in the embedded index).
    pub fn query(&self, text: &str) -> Sparse {
        Sparse::from_counts(counts(&self.analyzer.terms(text)), |n| n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passage_values_follow_bm25_and_queries_count_terms() {
        let values = Bm25Values {
            k1: 1.2,
            b: 0.75,
            avg_length: 4.0,
        };
        let enc = Bm25Encoder::new(values);
        // "Glass" (title) + "glass blowers blow glass": glass x3, blower, blow.
        let p = enc.passage("Glass", "glass blowers blow glass");
        assert_eq!(p.indices.len(), 3);
        assert!(p.indices.windows(2).all(|w| w[0] < w[1]));
        let len = 5.0;
        let norm = 1.2 * (1.0 - 0.75 + 0.75 * len / 4.0);
        let glass = p
            .indices
            .iter()
            .position(|&i| i == term_id("glass"))
            .unwrap();
        assert!((p.values[glass] - 2.2 * 3.0 / (3.0 + norm)).abs() < 1e-6);
        let q = enc.query("the glass, the GLASS and a blower");
        let glass = q
            .indices
            .iter()
            .position(|&i| i == term_id("glass"))
            .unwrap();
        assert_eq!(q.values[glass], 2.0);
        assert_eq!(q.indices.len(), 2); // stop words gone, "blower" stemmed
        assert!(enc.query("the and of").is_empty());
    }

    #[test]
    fn average_length_of_nothing_is_one() {
        assert_eq!(Bm25Values::new(Bm25Params::default(), []).avg_length, 1.0);
        assert_eq!(
            Bm25Values::new(Bm25Params::default(), [2, 4]).avg_length,
            3.0
        );
    }
}
