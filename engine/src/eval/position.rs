//! `capstan eval position`: the multi-document QA protocol of "Lost in the
//! Middle" (Liu et al., 2023). For each question, the gold passage (the
//! highest-ranked retrieved passage containing a gold answer) is placed at each
//! position among k-1 distractors (retrieved passages containing no gold
//! answer, in retrieval order) and the reader answers from exactly those
//! passages in that order. Accuracy: a normalised gold answer appears in the
//! normalised prediction.

use std::collections::BTreeMap;

use anyhow::bail;
use capstan_reader::Flow;
use serde::{Deserialize, Serialize};

use super::plot::{self, Labels, Series};
use super::qa::{keyed, Question};
use super::resume::{self, RunSpec};
use super::{mean_bool, write_report};
use crate::pipeline::{Pipeline, QaRequest};
use crate::text::contains_answer;

/// Passages retrieved per question to find the gold passage and the distractors.
const DEPTH: usize = 100;

/// Parses `--positions`: `all` (0..k) or a comma-separated list of 0-based positions below k.
pub fn parse_positions(spec: &str, k: usize) -> anyhow::Result<Vec<usize>> {
    if k == 0 {
        bail!("-k must be at least 1");
    }
    if spec.trim() == "all" {
        return Ok((0..k).collect());
    }
    let mut out = Vec::new();
    for part in spec.split(',') {
        let p: usize = part.trim().parse().map_err(|_| {
            anyhow::anyhow!("--positions: `{part}` is not a position (0-based) or `all`")
        })?;
        if p >= k {
            bail!("--positions: {p} is not below k = {k} (positions are 0-based)");
        }
        if !out.contains(&p) {
            out.push(p);
        }
    }
    out.sort_unstable();
    Ok(out)
}

/// The outcome of one question at every position.
#[derive(Debug, Serialize, Deserialize)]
struct PositionItem {
    question: String,
    /// Why the question was left out (no gold passage, too few distractors).
    skipped: Option<String>,
    /// Rank of the gold passage in retrieval (1-based).
    gold_rank: Option<usize>,
    /// Prediction at each evaluated position, in `positions` order.
    predictions: Vec<String>,
    /// Whether a gold answer is in the prediction, per position.
    correct: Vec<bool>,
}

#[derive(Serialize)]
struct PositionResults {
    questions: usize,
    evaluated: usize,
    skipped: usize,
    k: usize,
    reader: &'static str,
    mode: &'static str,
    positions: Vec<usize>,
    /// Accuracy per 0-based position of the gold passage.
    accuracy: BTreeMap<String, f64>,
}

/// Runs the protocol and writes results.json, results.md and accuracy_by_position.png.
pub fn run(
    pipeline: &Pipeline,
    request: &QaRequest,
    questions: Vec<Question>,
    positions: &[usize],
    spec: &RunSpec,
) -> anyhow::Result<()> {
    let items = keyed(questions);
    let results = resume::run(spec, &items, |q| evaluate(pipeline, request, positions, q))?;
    let done: Vec<&PositionItem> = results.iter().filter(|r| r.skipped.is_none()).collect();
    let accuracy: Vec<(usize, f64)> = positions
        .iter()
        .enumerate()
        .map(|(i, &p)| (p, mean_bool(done.iter().map(|r| r.correct[i]))))
        .collect();
    let summary = PositionResults {
        questions: results.len(),
        evaluated: done.len(),
        skipped: results.len() - done.len(),
        k: request.k,
        reader: request.reader.name(),
        mode: request.mode.name(),
        positions: positions.to_vec(),
        accuracy: accuracy.iter().map(|(p, a)| (p.to_string(), *a)).collect(),
    };
    plot::lines(
        &spec.out.join("accuracy_by_position.png"),
        &Labels {
            title: &format!(
                "Accuracy by gold position ({} reader, k = {}, {} questions)",
                summary.reader, summary.k, summary.evaluated
            ),
            x: "position of the gold passage (0 = first)",
            y: "accuracy",
        },
        &[Series {
            name: "accuracy".into(),
            points: accuracy.iter().map(|&(p, a)| (p as f64, a)).collect(),
        }],
    )?;
    let mut md = format!(
        "# Lost in the middle: accuracy by position of the gold passage\n\n\
         {} questions, {} evaluated ({} skipped: no retrieved passage with a gold answer, or fewer than k-1 distractors); \
         reader `{}`, retrieval `{}`, k = {} passages (1 gold + {} distractors).\n\n| position | accuracy |\n|---|---|\n",
        summary.questions,
        summary.evaluated,
        summary.skipped,
        summary.reader,
        summary.mode,
        summary.k,
        summary.k - 1
    );
    for (p, a) in &accuracy {
        md.push_str(&format!("| {p} | {a:.4} |\n"));
    }
    md.push_str("\n![accuracy by position](accuracy_by_position.png)\n");
    write_report(spec.out, &summary, &md)
}

fn evaluate(
    pipeline: &Pipeline,
    request: &QaRequest,
    positions: &[usize],
    q: &Question,
) -> anyhow::Result<PositionItem> {
    let k = request.k;
    let (hits, vector) = pipeline.retrieve(
        &q.question,
        DEPTH.max(4 * k),
        request.mode,
        request.filter.as_ref(),
    )?;
    let mut item = PositionItem {
        question: q.question.clone(),
        skipped: None,
        gold_rank: None,
        predictions: Vec::new(),
        correct: Vec::new(),
    };
    let Some(gold_index) = hits
        .iter()
        .position(|h| contains_answer(&h.text, &q.answers))
    else {
        item.skipped = Some("no retrieved passage contains a gold answer".into());
        return Ok(item);
    };
    item.gold_rank = Some(gold_index + 1);
    let gold = hits[gold_index].clone();
    let distractors: Vec<_> = hits
        .into_iter()
        .filter(|h| !contains_answer(&h.text, &q.answers))
        .take(k - 1)
        .collect();
    if distractors.len() < k - 1 {
        item.skipped = Some(format!(
            "{} distractors, {} needed",
            distractors.len(),
            k - 1
        ));
        return Ok(item);
    }
    let req = QaRequest {
        question: q.question.clone(),
        ..request.clone()
    };
    for &p in positions {
        let mut passages = distractors.clone();
        passages.insert(p, gold.clone());
        let a =
            pipeline.answer_with_passages(&req, passages, vector.clone(), |_| Flow::Continue)?;
        item.correct.push(contains_answer(&a.answer, &q.answers));
        item.predictions.push(a.answer);
    }
    Ok(item)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions_parse() {
        assert_eq!(parse_positions("all", 3).unwrap(), vec![0, 1, 2]);
        assert_eq!(parse_positions("9, 0,4,4", 10).unwrap(), vec![0, 4, 9]);
        assert!(parse_positions("10", 10).is_err());
        assert!(parse_positions("x", 10).is_err());
    }
}
