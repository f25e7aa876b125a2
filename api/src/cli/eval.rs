//! `capstan eval`: batch evaluation. Retrieval metrics live here; the QA,
//! position and synthetic-probe evaluations in `capstan_engine::eval`.

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context;
use capstan_indexer::Progress;
use capstan_reader::{AttentionPattern, LoadOptions};
use capstan_retriever::{load_beir_split, mrr_at, ndcg_at, recall_at, Mode, SearchOptions, Unit};
use clap::{Args, Subcommand};
use serde::Serialize;

use super::device_arg::DeviceArg;
use super::pipeline_args::{
    build, default_llama_model, Command, DtypeArg, PipelineArgs, SchedulingArgs,
};
use super::progress::Bars;
use super::search::RetrievalArgs;
use capstan_engine::eval::{
    self,
    probes::{KvSettings, PasskeySettings, ProbeModel, ProbeReader},
    resume::RunSpec,
};
use capstan_engine::pipeline::{Pipeline, QaRequest, ReaderKind};

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
    /// Open-domain QA (NQ-open JSONL): exact match, F1, answer recall@1/5/20/100, latency.
    Qa(QaEvalArgs),
    /// Lost in the middle: accuracy by position of the gold passage among distractors.
    Position(PositionEvalArgs),
    /// Synthetic key-value retrieval (JSON of UUIDs) with a generative model.
    KvRetrieval(KvEvalArgs),
    /// Synthetic passkey retrieval at several lengths and depths with a generative model.
    Passkey(PasskeyEvalArgs),
    /// Next-token loss by position over long documents, per attention pattern (how far a
    /// model reads past its trained context).
    Perplexity(PerplexityEvalArgs),
}

/// Output, resumption and parallelism of the batch evaluations.
#[derive(Debug, Args)]
struct RunArgs {
    /// Output folder: config.json, items.jsonl, results.json, results.md, PNG plots.
    #[arg(long)]
    out: PathBuf,
    /// Questions (or probes) evaluated at once; with a generative reader, the sequences in
    /// flight that its scheduler batches [default: the CPU count; 16 with a generative reader].
    #[arg(long)]
    concurrency: Option<usize>,
    /// Discard the items of an earlier run in --out instead of resuming it.
    #[arg(long)]
    restart: bool,
    /// No progress bars.
    #[arg(long, short)]
    quiet: bool,
}

#[derive(Debug, Args)]
struct QaEvalArgs {
    /// The index folder.
    index: PathBuf,
    /// JSONL questions: {"question", "answers": [...]} per line.
    #[arg(long)]
    questions: PathBuf,
    #[command(flatten)]
    run: RunArgs,
    #[command(flatten)]
    pipeline: PipelineArgs,
}

#[derive(Debug, Args)]
struct PositionEvalArgs {
    /// The index folder.
    index: PathBuf,
    /// JSONL questions: {"question", "answers": [...]} per line.
    #[arg(long)]
    questions: PathBuf,
    /// Positions (0-based) of the gold passage: `all` or a list like 0,4,9.
    #[arg(long, default_value = "all")]
    positions: String,
    #[command(flatten)]
    run: RunArgs,
    #[command(flatten)]
    pipeline: PipelineArgs,
}

/// The generative model of the synthetic probes.
#[derive(Debug, Args)]
struct ProbeModelArgs {
    /// Generative checkpoint: a Hugging Face folder with tokenizer.json, or a .gguf file
    /// [default: SmolLM2-135M-Instruct under $CAPSTAN_HOME/models, when installed].
    #[arg(long)]
    model: Option<PathBuf>,
    /// Weights in this dtype (a GGUF file dequantized) instead of their natural form.
    #[arg(long, value_enum)]
    dtype: Option<DtypeArg>,
    /// Prompt an instruct model without its chat template.
    #[arg(long)]
    no_chat_template: bool,
    /// Self-attention pattern overriding the checkpoint's (e.g. `selfextend:group=4,window=1024`
    /// to read past the trained context without training).
    #[arg(long)]
    attention: Option<AttentionPattern>,
    /// Run prompts longer than the model's `max_position_embeddings` (to measure how it
    /// extrapolates, or what `--attention selfextend:...` recovers).
    #[arg(long)]
    beyond_context: bool,
    /// Device: cpu, cuda or auto.
    #[arg(long, value_enum, default_value_t = DeviceArg::Auto)]
    device: DeviceArg,
    /// Seed of the generated examples.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Examples per point [default: 50 for kv-retrieval, 5 for passkey].
    #[arg(long)]
    samples: Option<usize>,
    /// Generated tokens at most [default: 48 for kv-retrieval, 12 for passkey].
    #[arg(long)]
    max_new_tokens: Option<usize>,
    #[command(flatten)]
    scheduling: SchedulingArgs,
}

impl ProbeModelArgs {
    /// `--model`, else the default generative model.
    fn path(&self) -> anyhow::Result<PathBuf> {
        self.model
            .clone()
            .or_else(default_llama_model)
            .ok_or_else(|| {
                anyhow::anyhow!(
                    "no --model given and the default model is not installed (scripts/setup.sh \
                 installs SmolLM2-135M-Instruct)"
                )
            })
    }

    fn load(&self, reader: ProbeReader) -> anyhow::Result<ProbeModel> {
        let opts = LoadOptions {
            dtype: self.dtype.map(DtypeArg::dtype),
            no_chat_template: self.no_chat_template,
        };
        ProbeModel::load(
            &self.path()?,
            &self.device.device()?,
            reader,
            opts,
            self.attention,
            self.beyond_context,
            self.scheduling.settings(0)?,
        )
    }
}

#[derive(Debug, Args)]
struct KvEvalArgs {
    /// Numbers of key-value pairs.
    #[arg(long, value_delimiter = ',', default_value = "75,140,300")]
    pairs: Vec<usize>,
    /// Evenly spaced positions of the queried key (first and last included).
    #[arg(long, default_value_t = 5)]
    positions: usize,
    /// The model's kind: llama (all in the decoder) or cape (pairs in encoder chunks).
    #[arg(long, value_enum, default_value_t = ProbeReader::Llama)]
    reader: ProbeReader,
    #[command(flatten)]
    model: ProbeModelArgs,
    #[command(flatten)]
    run: RunArgs,
}

#[derive(Debug, Args)]
struct PasskeyEvalArgs {
    /// Prompt lengths in the model's tokens.
    #[arg(long, value_delimiter = ',', default_value = "1000,4000,16000")]
    lengths: Vec<usize>,
    /// Depths of the pass key in the filler text (0 = start, 1 = end).
    #[arg(long, value_delimiter = ',', default_value = "0,0.25,0.5,0.75,1")]
    depths: Vec<f64>,
    #[command(flatten)]
    model: ProbeModelArgs,
    #[command(flatten)]
    run: RunArgs,
}

#[derive(Debug, Args)]
struct PerplexityEvalArgs {
    /// Long documents in any format `capstan index` reads (JSONL, BEIR corpus, a folder of
    /// text, HTML, PDF, DOCX or EPUB files); the first ones with --length tokens are read.
    corpus: PathBuf,
    /// Generative checkpoint: a Hugging Face folder with tokenizer.json, or a .gguf file
    /// [default: SmolLM2-135M-Instruct under $CAPSTAN_HOME/models, when installed].
    #[arg(long)]
    model: Option<PathBuf>,
    /// Weights in this dtype (a GGUF file dequantized) instead of their natural form.
    #[arg(long, value_enum)]
    dtype: Option<DtypeArg>,
    /// Device: cpu, cuda or auto.
    #[arg(long, value_enum, default_value_t = DeviceArg::Auto)]
    device: DeviceArg,
    /// Self-attention patterns to compare, each over every document (repeat the flag, e.g.
    /// `--attention full --attention selfextend:group=4,window=2048`).
    #[arg(long, default_value = "full")]
    attention: Vec<AttentionPattern>,
    /// Tokens read per document (BOS included); shorter documents are skipped.
    #[arg(long, default_value_t = 16384)]
    length: usize,
    /// Width of a position bucket in tokens.
    #[arg(long, default_value_t = 1024)]
    bucket: usize,
    /// Documents read at most.
    #[arg(long, default_value_t = 4)]
    documents: usize,
    /// Tokens per forward pass (earlier ones are read from the KV cache).
    #[arg(long, default_value_t = 1024)]
    chunk: usize,
    /// Prefix lengths whose mean loss is reported, multiples of --bucket [default: every
    /// 4,096 tokens up to --length].
    #[arg(long, value_delimiter = ',')]
    report_at: Vec<usize>,
    /// Output folder: config.json, items.jsonl, results.json, results.md, perplexity.png.
    #[arg(long)]
    out: PathBuf,
    /// Discard the items of an earlier run in --out instead of resuming it.
    #[arg(long)]
    restart: bool,
    /// No progress bars.
    #[arg(long, short)]
    quiet: bool,
}

#[derive(Debug, Args)]
struct RetrievalEvalArgs {
    /// The index folder (built from the dataset's corpus.jsonl).
    index: PathBuf,
    /// BEIR folder with queries.jsonl and qrels/SPLIT.tsv.
    #[arg(long)]
    dataset: PathBuf,
    /// The judgements to score: qrels/SPLIT.tsv (dev to choose settings, test to report).
    #[arg(long, default_value = "test")]
    split: String,
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
        EvalTask::Qa(a) => qa(a),
        EvalTask::Position(a) => position(a),
        EvalTask::KvRetrieval(a) => kv_retrieval(a),
        EvalTask::Passkey(a) => passkey(a),
        EvalTask::Perplexity(a) => perplexity(a),
    }
}

/// The pipeline of `eval qa` / `eval position` and the configuration its results depend on.
fn qa_setup(
    index: &Path,
    questions: &Path,
    args: &PipelineArgs,
    task: &str,
) -> anyhow::Result<(Arc<Pipeline>, QaRequest, serde_json::Value)> {
    let (pipeline, defaults, file) = build(index, args, Command::Eval)?;
    let request = defaults.request;
    let model = match request.reader {
        ReaderKind::Extractive => None,
        ReaderKind::Llama => args
            .llama_model
            .clone()
            .or(file.reader.llama_model)
            .or_else(default_llama_model),
        ReaderKind::Cape => args.cape_model.clone().or(file.reader.cape_model),
    };
    let config = serde_json::json!({
        "task": task,
        "index": canonical(index),
        "questions": canonical(questions),
        "questions_hash": eval::file_hash(questions)?,
        "reader": request.reader.name(),
        "model": model.map(|m| canonical(&m)),
        "mode": request.mode.name(),
        "k": request.k,
        "search": pipeline.search,
        "max_new_tokens": request.generation.max_new_tokens,
        "dtype": args.dtype.map(|d| format!("{d:?}")),
        "chat_template": !args.no_chat_template,
        "lost_in_the_middle": request.lost_in_the_middle,
        "query_aware": request.query_aware,
        "decoder_passages": request.decoder_passages,
        "answer": request.answer.name(),
        "context": request.context.to_string(),
        "instruction": request.instruction,
        "best_last": request.best_last,
        "passage_order": request
            .passage_order
            .unwrap_or_else(|| capstan_engine::context::PassageOrder::default_for(request.context))
            .to_string(),
        "example": request.example,
        "span_end_bias": request.span_end_bias,
        "sentence_lexical_weight": request.sentence_lexical_weight,
    });
    Ok((pipeline, request, config))
}

fn canonical(p: &Path) -> String {
    std::fs::canonicalize(p)
        .unwrap_or_else(|_| p.to_path_buf())
        .display()
        .to_string()
}

fn spec<'a>(
    run: &'a RunArgs,
    config: serde_json::Value,
    stage: &'a str,
    bars: &'a Bars,
    generative: bool,
) -> RunSpec<'a> {
    RunSpec {
        out: &run.out,
        config,
        restart: run.restart,
        concurrency: eval::concurrency(run.concurrency, generative),
        stage,
        progress: bars,
    }
}

fn qa(args: QaEvalArgs) -> anyhow::Result<()> {
    let questions = eval::qa::load_questions(&args.questions)?;
    let (pipeline, request, config) = qa_setup(&args.index, &args.questions, &args.pipeline, "qa")?;
    let bars = Bars::new(args.run.quiet);
    eval::qa::run(
        &pipeline,
        &request,
        questions,
        &spec(
            &args.run,
            config,
            "qa",
            &bars,
            request.reader != ReaderKind::Extractive,
        ),
    )
}

fn position(args: PositionEvalArgs) -> anyhow::Result<()> {
    if args.pipeline.lost_in_the_middle {
        anyhow::bail!(
            "--lost-in-the-middle reorders the passages, which this protocol places itself"
        );
    }
    let questions = eval::qa::load_questions(&args.questions)?;
    let mut pipeline_args = args.pipeline.clone();
    pipeline_args.k = Some(pipeline_args.k.unwrap_or(10));
    let (pipeline, mut request, mut config) =
        qa_setup(&args.index, &args.questions, &pipeline_args, "position")?;
    // The protocol places the passages itself: the model reads them whole, in that order.
    request.lost_in_the_middle = false;
    request.best_last = false;
    request.context = capstan_engine::context::ContextMode::Passages;
    config["context"] = serde_json::json!("passages");
    config["best_last"] = serde_json::json!(false);
    let positions = eval::position::parse_positions(&args.positions, request.k)?;
    config["positions"] = serde_json::json!(positions);
    let bars = Bars::new(args.run.quiet);
    eval::position::run(
        &pipeline,
        &request,
        questions,
        &positions,
        &spec(
            &args.run,
            config,
            "position",
            &bars,
            request.reader != ReaderKind::Extractive,
        ),
    )
}

fn kv_retrieval(args: KvEvalArgs) -> anyhow::Result<()> {
    let m = &args.model;
    let settings = KvSettings {
        pairs: args.pairs.clone(),
        positions: args.positions.max(1),
        samples: m.samples.unwrap_or(50),
        seed: m.seed,
        max_new_tokens: m.max_new_tokens.unwrap_or(48),
    };
    let config = serde_json::json!({
        "task": "kv-retrieval",
        "model": canonical(&m.path()?),
        "dtype": m.dtype.map(|d| format!("{d:?}")),
        "chat_template": !m.no_chat_template,
        "attention": m.attention.map(|a| a.to_string()),
        "beyond_context": m.beyond_context,
        "reader": args.reader,
        "pairs": settings.pairs,
        "positions": settings.positions,
        "samples": settings.samples,
        "seed": settings.seed,
        "max_new_tokens": settings.max_new_tokens,
    });
    let model = m.load(args.reader)?;
    let bars = Bars::new(args.run.quiet);
    eval::probes::kv_retrieval(
        &model,
        &settings,
        &spec(&args.run, config, "kv", &bars, true),
    )
}

fn passkey(args: PasskeyEvalArgs) -> anyhow::Result<()> {
    let m = &args.model;
    let settings = PasskeySettings {
        lengths: args.lengths.clone(),
        depths: args.depths.clone(),
        samples: m.samples.unwrap_or(5),
        seed: m.seed,
        max_new_tokens: m.max_new_tokens.unwrap_or(12),
    };
    let config = serde_json::json!({
        "task": "passkey",
        "model": canonical(&m.path()?),
        "dtype": m.dtype.map(|d| format!("{d:?}")),
        "chat_template": !m.no_chat_template,
        "attention": m.attention.map(|a| a.to_string()),
        "beyond_context": m.beyond_context,
        "lengths": settings.lengths,
        "depths": settings.depths,
        "samples": settings.samples,
        "seed": settings.seed,
        "max_new_tokens": settings.max_new_tokens,
    });
    let model = m.load(ProbeReader::Llama)?;
    let bars = Bars::new(args.run.quiet);
    eval::probes::passkey(
        &model,
        &settings,
        &spec(&args.run, config, "passkey", &bars, true),
    )
}

fn perplexity(args: PerplexityEvalArgs) -> anyhow::Result<()> {
    let path = args
        .model
        .clone()
        .or_else(default_llama_model)
        .context("no --model given and the default model is not installed (scripts/setup.sh installs SmolLM2-135M-Instruct)")?;
    let report_at = if args.report_at.is_empty() {
        (4096..args.length)
            .step_by(4096)
            .chain([args.length])
            .collect()
    } else {
        args.report_at.clone()
    };
    let settings = eval::perplexity::PerplexitySettings {
        length: args.length,
        bucket: args.bucket,
        documents: args.documents,
        chunk: args.chunk,
        report_at,
        patterns: args.attention.clone(),
    };
    let corpus = capstan_indexer::read_corpus(&args.corpus, false)
        .with_context(|| format!("reading {}", args.corpus.display()))?;
    let config = serde_json::json!({
        "task": "perplexity",
        "model": canonical(&path),
        "dtype": args.dtype.map(|d| format!("{d:?}")),
        "corpus": canonical(&args.corpus),
        "corpus_sha256": corpus.sha256,
        "length": settings.length,
        "bucket": settings.bucket,
        "documents": settings.documents,
        "chunk": settings.chunk,
    });
    let opts = LoadOptions {
        dtype: args.dtype.map(DtypeArg::dtype),
        no_chat_template: true,
    };
    let mut lm = capstan_reader::LanguageModel::load(&path, &args.device.device()?, opts)
        .with_context(|| format!("loading the model {}", path.display()))?;
    let bars = Bars::new(args.quiet);
    let spec = RunSpec {
        out: &args.out,
        config,
        restart: args.restart,
        concurrency: 1,
        stage: "perplexity",
        progress: &bars,
    };
    eval::perplexity::run(&mut lm, &corpus, &settings, &spec)
}

/// Passages retrieved per query: enough for 100 distinct documents in most cases.
const PASSAGE_DEPTH: usize = 200;
const DOC_DEPTH: usize = 100;

#[derive(Serialize)]
struct RetrievalResults {
    dataset: String,
    split: String,
    /// The search settings of the hybrid mode (unit, fusion, depth, dense strategy).
    options: SearchOptions,
    queries: usize,
    modes: BTreeMap<&'static str, BTreeMap<&'static str, f64>>,
}

fn retrieval(args: RetrievalEvalArgs) -> anyhow::Result<()> {
    let data = load_beir_split(&args.dataset, &args.split)?;
    let retriever = args.retrieval.open(&args.index)?;
    let bars = Bars::new(args.quiet);
    // Embed every question once, in batches, for all dense modes.
    let needs_vectors = args.modes.iter().any(|m| *m != Mode::Bm25);
    let vectors = if needs_vectors {
        bars.stage("embed", data.queries.len() as u64);
        let texts: Vec<&str> = data.queries.iter().map(|q| q.text.as_str()).collect();
        let mut v = retriever.encoder()?.embed(&texts)?;
        v.iter_mut().for_each(|x| capstan_indexer::normalize(x));
        bars.finish();
        v
    } else {
        Vec::new()
    };
    let mut results = RetrievalResults {
        dataset: args.dataset.display().to_string(),
        split: args.split.clone(),
        options: args.retrieval.options(Mode::Hybrid, DOC_DEPTH),
        queries: data.queries.len(),
        modes: BTreeMap::new(),
    };
    let filter = args.retrieval.filter()?;
    let mut seen_modes = HashSet::new();
    for mode in args.modes.iter().copied().filter(|m| seen_modes.insert(*m)) {
        // Judgements are documents; by default the passage ranking's first 100 distinct
        // documents are scored. --unit documents fuses document rankings instead; on the
        // rustdoc dev splits (docs/BENCHMARKS.md) it was not better, so it is not the default.
        let opts = args.retrieval.options(mode, DOC_DEPTH);
        let opts = SearchOptions {
            k: if opts.unit == Unit::Passages {
                PASSAGE_DEPTH
            } else {
                DOC_DEPTH
            },
            ..opts
        };
        bars.stage(mode.name(), data.queries.len() as u64);
        let mut sums = [0f64; 5];
        for (i, q) in data.queries.iter().enumerate() {
            let vector = vectors.get(i).map(|v| v.as_slice());
            let hits = retriever
                .search_with(&q.text, vector, &opts, filter.as_ref())
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
