//! `capstan eval`: batch evaluation.

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};

use anyhow::Context;
use capstan_indexer::Progress;
use capstan_retriever::{load_beir, mrr_at, ndcg_at, recall_at, Mode, Retriever};
use clap::{Args, Subcommand};
use serde::Serialize;

use super::progress::Bars;
use super::search::RetrievalArgs;

/// Arguments of `capstan eval`.
#[derive(Debug, Args)]
pub struct EvalArgs {
    #[command(subcommand)]
    task: EvalTask,
}

#[derive(Debug, Subcommand)]
enum EvalTask {
    /// Retrieval quality on a BEIR folder: recall@1/10/100, MRR@10, nDCG@10 per mode.
    Retrieval(RetrievalEvalArgs),
}

#[derive(Debug, Args)]
struct RetrievalEvalArgs {
    /// The index folder (built from the dataset's corpus.jsonl).
    index: PathBuf,
    /// BEIR folder with queries.jsonl and qrels/test.tsv.
    #[arg(long)]
    dataset: PathBuf,
    /// Output folder for results.json and results.md.
    #[arg(long)]
    out: PathBuf,
    /// Modes to evaluate.
    #[arg(long, value_delimiter = ',', default_value = "bm25,dense,hybrid")]
    modes: Vec<Mode>,
    /// No progress bars.
    #[arg(long, short)]
    quiet: bool,
    #[command(flatten)]
    retrieval: RetrievalArgs,
}

/// Runs `capstan eval`.
pub fn run(args: EvalArgs) -> anyhow::Result<()> {
    match args.task {
        EvalTask::Retrieval(a) => retrieval(a),
    }
}

/// Passages retrieved per query: enough for 100 distinct documents in most cases.
const PASSAGE_DEPTH: usize = 200;
const DOC_DEPTH: usize = 100;

#[derive(Serialize)]
struct RetrievalResults {
    dataset: String,
    queries: usize,
    modes: BTreeMap<&'static str, BTreeMap<&'static str, f64>>,
}

fn retrieval(args: RetrievalEvalArgs) -> anyhow::Result<()> {
    let data = load_beir(&args.dataset)?;
    let retriever = Retriever::open(&args.index, args.retrieval.encoder.as_deref())?;
    let bars = Bars::new(args.quiet);
    // Embed every question once, in batches, for all dense modes.
    let needs_vectors = args.modes.iter().any(|m| *m != Mode::Bm25);
    let vectors = if needs_vectors {
        bars.stage("embed", data.queries.len() as u64);
        let texts: Vec<&str> = data.queries.iter().map(|q| q.text.as_str()).collect();
        let mut v = retriever.encoder().embed(&texts)?;
        v.iter_mut().for_each(|x| capstan_indexer::normalize(x));
        bars.finish();
        v
    } else {
        Vec::new()
    };
    let mut results = RetrievalResults {
        dataset: args.dataset.display().to_string(),
        queries: data.queries.len(),
        modes: BTreeMap::new(),
    };
    let mut seen_modes = HashSet::new();
    for mode in args.modes.iter().copied().filter(|m| seen_modes.insert(*m)) {
        let opts = args.retrieval.options(mode, PASSAGE_DEPTH);
        bars.stage(mode.name(), data.queries.len() as u64);
        let mut sums = [0f64; 5];
        for (i, q) in data.queries.iter().enumerate() {
            let vector = vectors.get(i).map(|v| v.as_slice());
            let hits = retriever
                .search_with_vector(&q.text, vector, &opts)
                .with_context(|| format!("query {}", q.id))?;
            let mut docs: Vec<String> = Vec::new();
            for h in hits {
                if !docs.contains(&h.doc_id) {
                    docs.push(h.doc_id);
                }
                if docs.len() == DOC_DEPTH {
                    break;
                }
            }
            let rel = &data.qrels[&q.id];
            sums[0] += recall_at(&docs, rel, 1);
            sums[1] += recall_at(&docs, rel, 10);
            sums[2] += recall_at(&docs, rel, 100);
            sums[3] += mrr_at(&docs, rel, 10);
            sums[4] += ndcg_at(&docs, rel, 10);
            bars.advance(1);
        }
        bars.finish();
        let n = data.queries.len() as f64;
        let names = ["recall@1", "recall@10", "recall@100", "mrr@10", "ndcg@10"];
        let metrics = names.iter().zip(sums).map(|(k, s)| (*k, s / n)).collect();
        results.modes.insert(mode.name(), metrics);
    }
    write_results(&args.out, &results)
}

fn write_results(out: &Path, results: &RetrievalResults) -> anyhow::Result<()> {
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    let json = serde_json::to_string_pretty(results)?;
    std::fs::write(out.join("results.json"), json + "\n")
        .with_context(|| format!("writing {}/results.json", out.display()))?;
    let mut md = format!(
        "# Retrieval evaluation\n\nDataset: `{}`, {} queries.\n\n| mode | recall@1 | recall@10 | recall@100 | MRR@10 | nDCG@10 |\n|---|---|---|---|---|---|\n",
        results.dataset, results.queries
    );
    for (mode, m) in &results.modes {
        md.push_str(&format!(
            "| {mode} | {:.4} | {:.4} | {:.4} | {:.4} | {:.4} |\n",
            m["recall@1"], m["recall@10"], m["recall@100"], m["mrr@10"], m["ndcg@10"]
        ));
    }
    std::fs::write(out.join("results.md"), &md)
        .with_context(|| format!("writing {}/results.md", out.display()))?;
    print!("{md}");
    Ok(())
}
