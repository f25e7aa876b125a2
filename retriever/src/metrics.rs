//! Ranking metrics of BEIR: recall@k, MRR@k, nDCG@k (gain = graded relevance,
//! as pytrec_eval computes it).

use std::collections::HashMap;

/// Relevance judgements of one query: document id -> grade (> 0 relevant).
pub type Judgements = HashMap<String, i32>;

/// Fraction of the relevant documents found in the first `k` of `ranked`.
pub fn recall_at(ranked: &[String], relevant: &Judgements, k: usize) -> f64 {
    let total = relevant.values().filter(|&&g| g > 0).count();
    if total == 0 {
        return 0.0;
    }
    let found = ranked
        .iter()
        .take(k)
        .filter(|d| relevant.get(*d).is_some_and(|&g| g > 0))
        .count();
    found as f64 / total as f64
}

/// Reciprocal rank of the first relevant document within the first `k`.
pub fn mrr_at(ranked: &[String], relevant: &Judgements, k: usize) -> f64 {
    ranked
        .iter()
        .take(k)
        .position(|d| relevant.get(d).is_some_and(|&g| g > 0))
        .map_or(0.0, |i| 1.0 / (i as f64 + 1.0))
}

/// Normalised discounted cumulative gain at `k`.
pub fn ndcg_at(ranked: &[String], relevant: &Judgements, k: usize) -> f64 {
    let dcg: f64 = ranked
        .iter()
        .take(k)
        .enumerate()
        .map(|(i, d)| relevant.get(d).copied().unwrap_or(0).max(0) as f64 / (i as f64 + 2.0).log2())
        .sum();
    let mut grades: Vec<i32> = relevant.values().copied().filter(|&g| g > 0).collect();
    grades.sort_unstable_by(|a, b| b.cmp(a));
    let idcg: f64 = grades
        .iter()
        .take(k)
        .enumerate()
        .map(|(i, &g)| g as f64 / (i as f64 + 2.0).log2())
        .sum();
    if idcg == 0.0 {
        0.0
    } else {
        dcg / idcg
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn metrics_match_hand_computed_values() {
        let rel: Judgements = [
            ("a".to_string(), 1),
            ("b".to_string(), 2),
            ("z".to_string(), 0),
        ]
        .into_iter()
        .collect();
        let ranked = ids(&["x", "b", "y", "a"]);
        assert_eq!(recall_at(&ranked, &rel, 1), 0.0);
        assert_eq!(recall_at(&ranked, &rel, 2), 0.5);
        assert_eq!(recall_at(&ranked, &rel, 10), 1.0);
        assert_eq!(mrr_at(&ranked, &rel, 10), 0.5);
        assert_eq!(mrr_at(&ranked, &rel, 1), 0.0);
        let dcg = 2.0 / 3f64.log2() + 1.0 / 5f64.log2();
        let idcg = 2.0 + 1.0 / 3f64.log2();
        assert!((ndcg_at(&ranked, &rel, 10) - dcg / idcg).abs() < 1e-12);
        assert_eq!(ndcg_at(&ids(&["b", "a"]), &rel, 10), 1.0);
    }
}
