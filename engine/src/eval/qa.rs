//! `capstan eval qa`: open-domain QA over an index (NQ-open style questions):
//! exact match and F1 of the reader's answers, answer recall@k of retrieval and
//! the latency of each stage.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Instant;

use anyhow::{bail, Context};
use capstan_reader::Flow;
use serde::{Deserialize, Serialize};

use super::plot::{self, Labels, Series};
use super::resume::{self, RunSpec};
use super::{write_report, Latency};
use crate::pipeline::{Pipeline, QaRequest};
use crate::text::{contains_answer, exact_match, f1};

/// Passages retrieved per question for answer recall.
pub const RECALL_DEPTH: usize = 100;
/// The k of answer recall@k in results.json.
const RECALL_AT: [usize; 4] = [1, 5, 20, 100];

/// One question with its gold answers.
#[derive(Debug, Clone, Deserialize)]
pub struct Question {
    /// The question text.
    pub question: String,
    /// Acceptable answers.
    pub answers: Vec<String>,
}

/// Reads NQ-open style JSONL (`{"question", "answers": [...]}`); a bad line is
/// an error naming the file and line.
pub fn load_questions(path: &Path) -> anyhow::Result<Vec<Question>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let at = || format!("{}:{}", path.display(), i + 1);
        let q: Question = serde_json::from_str(line)
            .with_context(|| format!("{}: expected {{\"question\", \"answers\": [...]}}", at()))?;
        if q.question.trim().is_empty() {
            bail!("{}: the question is empty", at());
        }
        if q.answers.iter().all(|a| a.trim().is_empty()) {
            bail!("{}: no gold answer", at());
        }
        out.push(q);
    }
    if out.is_empty() {
        bail!("{}: no questions", path.display());
    }
    Ok(out)
}

/// Keys of questions in `items.jsonl`: their line order.
pub fn keyed(questions: Vec<Question>) -> Vec<(String, Question)> {
    questions
        .into_iter()
        .enumerate()
        .map(|(i, q)| (format!("q{i}"), q))
        .collect()
}

/// The outcome of one question.
#[derive(Debug, Serialize, Deserialize)]
struct QaItem {
    question: String,
    prediction: String,
    em: f64,
    f1: f64,
    /// The normalised prediction contains a normalised gold answer.
    #[serde(default)]
    contains: bool,
    /// The reader gave no answer (an empty span).
    #[serde(default)]
    no_answer: bool,
    /// 1-based rank of the first retrieved passage containing a gold answer.
    gold_rank: Option<usize>,
    retrieve_ms: f64,
    assemble_ms: f64,
    read_ms: f64,
    total_ms: f64,
}

#[derive(Serialize)]
struct QaResults {
    questions: usize,
    em: f64,
    f1: f64,
    contains_gold: f64,
    no_answer: usize,
    /// Questions answered per minute of this invocation's wall time (a resumed run counts
    /// only the questions it answered itself).
    questions_per_minute: f64,
    answer_recall: BTreeMap<String, f64>,
    latency_ms: BTreeMap<&'static str, Latency>,
    reader: &'static str,
    answer: &'static str,
    context: String,
    mode: &'static str,
    k: usize,
}

/// Runs the evaluation and writes results.json, results.md and answer_recall.png.
pub fn run(
    pipeline: &Pipeline,
    request: &QaRequest,
    questions: Vec<Question>,
    spec: &RunSpec,
) -> anyhow::Result<()> {
    let items = keyed(questions);
    let started = Instant::now();
    let answered = std::sync::atomic::AtomicUsize::new(0);
    let results = resume::run(spec, &items, |q| {
        // A panic answering one question ends the run with an error naming it (the answered
        // questions are kept for a resumed run), not with an abort.
        let item = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            answer(pipeline, request, q)
        }))
        .unwrap_or_else(|panic| {
            Err(anyhow::anyhow!(
                "question {:?}: {}",
                q.question,
                crate::Error::Panic(crate::error::panic_message(panic.as_ref()).to_string())
            ))
        });
        answered.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        item
    })?;
    let wall = started.elapsed().as_secs_f64();
    let n = results.len() as f64;
    let recall_at = |k: usize| {
        results
            .iter()
            .filter(|r| r.gold_rank.is_some_and(|g| g <= k))
            .count() as f64
            / n
    };
    let stage = |f: fn(&QaItem) -> f64| Latency::of(&results.iter().map(f).collect::<Vec<_>>());
    let summary = QaResults {
        questions: results.len(),
        em: results.iter().map(|r| r.em).sum::<f64>() / n,
        f1: results.iter().map(|r| r.f1).sum::<f64>() / n,
        contains_gold: results.iter().filter(|r| r.contains).count() as f64 / n,
        no_answer: results.iter().filter(|r| r.no_answer).count(),
        questions_per_minute: answered.into_inner() as f64 / wall.max(1e-9) * 60.0,
        answer_recall: RECALL_AT
            .iter()
            .map(|&k| (k.to_string(), recall_at(k)))
            .collect(),
        latency_ms: BTreeMap::from([
            ("retrieve", stage(|r| r.retrieve_ms)),
            ("assemble", stage(|r| r.assemble_ms)),
            ("read", stage(|r| r.read_ms)),
            ("total", stage(|r| r.total_ms)),
        ]),
        reader: request.reader.name(),
        answer: match request.reader {
            crate::pipeline::ReaderKind::Extractive => "sentence",
            _ => request.answer.name(),
        },
        context: request.context.to_string(),
        mode: request.mode.name(),
        k: request.k,
    };
    let curve: Vec<(f64, f64)> = (1..=RECALL_DEPTH)
        .map(|k| (k as f64, recall_at(k)))
        .collect();
    plot::lines(
        &spec.out.join("answer_recall.png"),
        &Labels {
            title: &format!(
                "Answer recall@k ({} retrieval, {} questions)",
                summary.mode, summary.questions
            ),
            x: "k (retrieved passages)",
            y: "answer recall",
        },
        &[Series {
            name: "answer recall".into(),
            points: curve,
        }],
    )?;
    write_report(spec.out, &summary, &markdown(&summary))
}

fn answer(pipeline: &Pipeline, request: &QaRequest, q: &Question) -> anyhow::Result<QaItem> {
    let start = Instant::now();
    let (hits, vector) = pipeline.retrieve(
        &q.question,
        RECALL_DEPTH.max(request.k),
        request.mode,
        request.filter.as_ref(),
    )?;
    let retrieve_ms = start.elapsed().as_secs_f64() * 1000.0;
    let gold_rank = hits
        .iter()
        .position(|h| contains_answer(&h.text, &q.answers))
        .map(|i| i + 1);
    let top = hits.into_iter().take(request.k).collect();
    let req = QaRequest {
        question: q.question.clone(),
        ..request.clone()
    };
    let a = pipeline.answer_with_passages(&req, top, vector, |_| Flow::Continue)?;
    Ok(QaItem {
        question: q.question.clone(),
        em: exact_match(&a.answer, &q.answers),
        f1: f1(&a.answer, &q.answers),
        contains: !a.no_answer && contains_answer(&a.answer, &q.answers),
        no_answer: a.no_answer,
        prediction: a.answer,
        gold_rank,
        retrieve_ms,
        assemble_ms: a.timings.assemble_ms,
        read_ms: a.timings.read_ms,
        total_ms: retrieve_ms + a.timings.total_ms,
    })
}

fn markdown(r: &QaResults) -> String {
    let mut md = format!(
        "# QA evaluation\n\n{} questions; reader `{}`, retrieval `{}`, k = {} passages to the reader.\n\n\
         answer `{}`, context `{}`.\n\n\
         | metric | value |\n|---|---|\n| exact match | {:.4} |\n| F1 | {:.4} |\n\
         | contains gold | {:.4} |\n| no answer | {} |\n| questions / minute | {:.1} |\n",
        r.questions, r.reader, r.mode, r.k, r.answer, r.context, r.em, r.f1, r.contains_gold,
        r.no_answer, r.questions_per_minute
    );
    for k in RECALL_AT {
        md.push_str(&format!(
            "| answer recall@{k} | {:.4} |\n",
            r.answer_recall[&k.to_string()]
        ));
    }
    md.push_str(&format!(
        "\n## Latency (ms)\n\nRetrieval fetches {RECALL_DEPTH} passages per question (for answer recall).\n\n\
         | stage | mean | p50 | p99 |\n|---|---|---|---|\n"
    ));
    for stage in ["retrieve", "assemble", "read", "total"] {
        let l = r.latency_ms[stage];
        md.push_str(&format!(
            "| {stage} | {:.2} | {:.2} | {:.2} |\n",
            l.mean, l.p50, l.p99
        ));
    }
    md.push_str("\n![answer recall by k](answer_recall.png)\n");
    md
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_question_lines_name_file_and_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("q.jsonl");
        std::fs::write(
            &path,
            "{\"question\":\"a?\",\"answers\":[\"b\"]}\n\n{\"question\":\"c?\"}\n",
        )
        .unwrap();
        let err = format!("{:#}", load_questions(&path).unwrap_err());
        assert!(err.contains("q.jsonl:3"), "{err}");
        std::fs::write(
            &path,
            "{\"question\":\"a?\",\"answers\":[\"b\"]}\n{\"question\":\"c?\",\"answers\":[]}\n",
        )
        .unwrap();
        let err = format!("{:#}", load_questions(&path).unwrap_err());
        assert!(err.contains("q.jsonl:2: no gold answer"), "{err}");
        std::fs::write(&path, "{\"question\":\"a?\",\"answers\":[\"b\"]}\n").unwrap();
        assert_eq!(
            load_questions(&path).unwrap()[0].answers,
            vec!["b".to_string()]
        );
    }
}
