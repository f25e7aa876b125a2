//! `capstan-bench`: the Capstan side of the benchmarks in bench/. Each
//! subcommand prints one JSON object; the Python scripts beside it run the
//! peer on the same data in the same run and report the ratio.

use std::collections::HashSet;
use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{bail, Context};
use capstan_indexer::{
    read_corpus, Bm25Index, Bm25Params, Bm25Writer, ChunkParams, Chunker, DenseStrategy, Encoder,
    EncoderOptions, EncoderPrecision, FrozenGraph, HnswParams,
};
use capstan_retriever::{Mode, SearchOptions};
use clap::{Parser, Subcommand};
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};
use serde_json::json;

#[derive(Parser)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Passages and inverse-cloze queries from an HTML documentation tree.
    Prepare {
        /// Folder of HTML files (e.g. `$(rustc --print sysroot)/share/doc/rust/html`).
        #[arg(long)]
        html: PathBuf,
        /// Output folder: corpus.jsonl, passages.jsonl, queries.jsonl.
        #[arg(long)]
        out: PathBuf,
        /// Encoder whose tokenizer counts chunk tokens.
        #[arg(long, env = "CAPSTAN_ENCODER")]
        encoder: PathBuf,
        /// Stop after this many passages.
        #[arg(long, default_value_t = 100_000)]
        max_passages: usize,
        /// Number of queries.
        #[arg(long, default_value_t = 1000)]
        queries: usize,
        #[arg(long, default_value_t = 1)]
        seed: u64,
    },
    /// The passages `capstan index` cuts a corpus into (default chunking), as
    /// passages.jsonl (`id`, `title`, `text`), for peers to encode the same texts.
    Passages {
        /// A corpus `capstan index` reads (JSONL, BEIR corpus.jsonl, a folder).
        #[arg(long)]
        corpus: PathBuf,
        /// The passages.jsonl to write.
        #[arg(long)]
        out: PathBuf,
        /// Encoder whose tokenizer counts chunk tokens.
        #[arg(long, env = "CAPSTAN_ENCODER")]
        encoder: PathBuf,
    },
    /// BM25: index time, single-thread queries/s and recall@10 on prepared data.
    Bm25 {
        #[arg(long)]
        data: PathBuf,
        #[arg(long, default_value_t = 1.2)]
        k1: f32,
        #[arg(long, default_value_t = 0.75)]
        b: f32,
        #[arg(long, default_value_t = 10)]
        k: usize,
    },
    /// Dense encoding throughput (passages/s) on the first N prepared passages.
    Encode {
        #[arg(long)]
        data: PathBuf,
        #[arg(long, env = "CAPSTAN_ENCODER")]
        encoder: PathBuf,
        #[arg(long, default_value_t = 1000)]
        n: usize,
        /// Linear layers in int8 (the CPU encoder's fast mode) instead of f32.
        #[arg(long)]
        int8: bool,
        /// Also write the vectors, little-endian f32 rows, to this file.
        #[arg(long)]
        out: Option<PathBuf>,
    },
    /// HNSW build time, single-thread queries/s and recall@k against exact neighbours.
    Ann {
        /// Base vectors: little-endian f32 rows, unit length.
        #[arg(long)]
        base: PathBuf,
        /// Query vectors, same format.
        #[arg(long)]
        queries: PathBuf,
        /// Exact neighbours: little-endian i32 rows of k ids per query.
        #[arg(long)]
        truth: PathBuf,
        #[arg(long)]
        dim: usize,
        #[arg(long, default_value_t = 16)]
        m: usize,
        #[arg(long, default_value_t = 100)]
        ef_construction: usize,
        /// Search breadths to measure (comma-separated).
        #[arg(long, value_delimiter = ',', default_value = "64")]
        ef: Vec<usize>,
        #[arg(long, default_value_t = 10)]
        k: usize,
    },
    /// Exact dense scan vs HNSW latency and recall at growing sizes: where the
    /// exact scan stops being the cheaper of the two.
    Crossover {
        /// Real unit vectors: an index's `vectors.f32` (little-endian f32 rows).
        #[arg(long)]
        vectors: PathBuf,
        #[arg(long, default_value_t = 384)]
        dim: usize,
        /// Questions (JSONL with `text`), embedded with --encoder; the first 200.
        #[arg(long)]
        queries: PathBuf,
        #[arg(long, env = "CAPSTAN_ENCODER")]
        encoder: PathBuf,
        /// Collection sizes (past the real rows, noisy copies of them).
        #[arg(
            long,
            value_delimiter = ',',
            default_value = "2500,5000,10000,20000,40000,80000"
        )]
        sizes: Vec<usize>,
        /// Depths (candidates per query).
        #[arg(long, value_delimiter = ',', default_value = "10,100,300")]
        depths: Vec<usize>,
        /// Noise of the copies (about the cosine distance they move).
        #[arg(long, default_value_t = 0.3)]
        noise: f32,
    },
    /// Top-k latency percentiles of `capstan search` on an index, and peak RSS.
    Latency {
        #[arg(long)]
        index: PathBuf,
        #[arg(long)]
        queries: PathBuf,
        #[arg(long, default_value = "hybrid")]
        mode: Mode,
        #[arg(long, default_value_t = 10)]
        k: usize,
        /// Hybrid fusion as /v1/search takes it, e.g. `{"method":"rrf","k":60}` [default: the
        /// retriever's default].
        #[arg(long)]
        fusion: Option<String>,
        /// Candidates per retriever [default: the retriever's default].
        #[arg(long)]
        depth: Option<usize>,
        /// Questions embedded in int8 (`true`) or f32 (`false`) [default: as the index].
        #[arg(long)]
        int8_questions: Option<bool>,
    },
    /// Llama reader prefill and decode timings on token ids. Loads the checkpoint once, then
    /// answers one JSON line per stdin line `{"prompt": [ids], "new_tokens": N}` with
    /// `{"prefill_seconds", "decode_seconds", "decode_steps", "tokens"}` (greedy; prefill is
    /// the forward over the prompt up to the first token, decode the remaining N - 1 steps).
    Llama {
        /// Checkpoint folder (Hugging Face layout).
        #[arg(long)]
        model: PathBuf,
    },
    /// The GPU benchmarks of scripts/gpu-check.sh (each also runs on the CPU at tiny shapes).
    Gpu {
        #[command(subcommand)]
        command: gpu::GpuCommand,
    },
    /// Generation throughput of the continuous-batching scheduler against one sequence at a
    /// time (`max_batch` 1), on the same model, prompts and token counts in one run: at each
    /// concurrency, that many client threads submit short chat prompts and decode exactly
    /// `new_tokens` greedy tokens each (no stop), isolating what batching does to decoding.
    Batching {
        /// Checkpoint (a .gguf file or a Hugging Face folder with a tokenizer).
        #[arg(long)]
        model: PathBuf,
        /// Concurrent clients per level.
        #[arg(long, value_delimiter = ',', default_value = "1,4,16,64")]
        concurrency: Vec<usize>,
        /// Sequences per level (at least one per client).
        #[arg(long, default_value_t = 16)]
        sequences: usize,
        /// New tokens per sequence.
        #[arg(long, default_value_t = 64)]
        new_tokens: usize,
        /// Load the weights in f32 (a GGUF file dequantized) instead of their natural form.
        #[arg(long)]
        f32: bool,
    },
}

#[derive(Serialize, Deserialize)]
struct PassageLine {
    id: String,
    title: String,
    text: String,
}

#[derive(Serialize, Deserialize)]
struct QueryLine {
    #[serde(alias = "_id")]
    id: String,
    text: String,
    /// The passage it was cut from (prepared sets; absent in BEIR queries).
    #[serde(default)]
    passage_id: String,
}

mod batching;
mod crossover;
mod gpu;

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let out = match cli.command {
        Command::Prepare {
            html,
            out,
            encoder,
            max_passages,
            queries,
            seed,
        } => prepare(&html, &out, &encoder, max_passages, queries, seed)?,
        Command::Passages {
            corpus,
            out,
            encoder,
        } => passages(&corpus, &out, &encoder)?,
        Command::Bm25 { data, k1, b, k } => bm25(&data, Bm25Params { k1, b }, k)?,
        Command::Encode {
            data,
            encoder,
            n,
            int8,
            out,
        } => encode(&data, &encoder, n, int8, out.as_deref())?,
        Command::Ann {
            base,
            queries,
            truth,
            dim,
            m,
            ef_construction,
            ef,
            k,
        } => ann(
            &base,
            &queries,
            &truth,
            dim,
            HnswParams { m, ef_construction },
            &ef,
            k,
        )?,
        Command::Latency {
            index,
            queries,
            mode,
            k,
            fusion,
            depth,
            int8_questions,
        } => {
            let mut opts = SearchOptions {
                mode,
                k,
                dense: DenseStrategy::Auto,
                ..Default::default()
            };
            if let Some(f) = fusion {
                opts.fusion = serde_json::from_str(&f).context("--fusion")?;
            }
            opts.depth = depth.unwrap_or(opts.depth);
            let precision = int8_questions.map(|int8| {
                if int8 {
                    EncoderPrecision::Int8
                } else {
                    EncoderPrecision::F32
                }
            });
            latency(&index, &queries, opts, precision)?
        }
        Command::Crossover {
            vectors,
            dim,
            queries,
            encoder,
            sizes,
            depths,
            noise,
        } => crossover::run(
            &vectors,
            dim,
            &queries,
            &encoder,
            &sizes,
            &depths,
            HnswParams::default(),
            noise,
        )?,
        Command::Llama { model } => return llama(&model),
        Command::Batching {
            model,
            concurrency,
            sequences,
            new_tokens,
            f32,
        } => batching::run(&model, &concurrency, sequences, new_tokens, f32)?,
        Command::Gpu { command } => gpu::run(command)?,
    };
    println!("{}", serde_json::to_string_pretty(&out)?);
    Ok(())
}

fn read_jsonl<T: for<'de> Deserialize<'de>>(path: &Path) -> anyhow::Result<Vec<T>> {
    let file = std::fs::File::open(path).with_context(|| format!("opening {}", path.display()))?;
    std::io::BufReader::new(file)
        .lines()
        .enumerate()
        .map(|(i, l)| {
            serde_json::from_str(&l?).with_context(|| format!("{}:{}", path.display(), i + 1))
        })
        .collect()
}

fn write_jsonl<T: Serialize>(path: &Path, rows: &[T]) -> anyhow::Result<()> {
    let mut f = std::io::BufWriter::new(std::fs::File::create(path)?);
    for r in rows {
        serde_json::to_writer(&mut f, r)?;
        f.write_all(b"\n")?;
    }
    Ok(f.flush()?)
}

/// Splits text into sentences at `. `, `? `, `! `.
fn sentences(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut start = 0;
    let bytes = text.as_bytes();
    for i in 0..bytes.len().saturating_sub(1) {
        if matches!(bytes[i], b'.' | b'?' | b'!') && bytes[i + 1] == b' ' {
            out.push(text[start..=i].trim());
            start = i + 2;
        }
    }
    if start < text.len() {
        out.push(text[start..].trim());
    }
    out.into_iter().filter(|s| !s.is_empty()).collect()
}

fn passages(corpus: &Path, out: &Path, encoder: &Path) -> anyhow::Result<serde_json::Value> {
    let corpus = read_corpus(corpus, false)?;
    let encoder = Encoder::load(encoder)?;
    let chunker = Chunker::for_encoder(&encoder, ChunkParams::default())?;
    let mut lines = String::new();
    let mut count = 0;
    for doc in &corpus.documents {
        for p in chunker.chunk(doc) {
            let line = PassageLine {
                id: p.id,
                title: p.title,
                text: p.text,
            };
            lines += &serde_json::to_string(&line)?;
            lines.push('\n');
            count += 1;
        }
    }
    std::fs::write(out, lines).with_context(|| format!("writing {}", out.display()))?;
    Ok(json!({"documents": corpus.documents.len(), "passages": count}))
}

fn prepare(
    html: &Path,
    out: &Path,
    encoder: &Path,
    max_passages: usize,
    n_queries: usize,
    seed: u64,
) -> anyhow::Result<serde_json::Value> {
    let start = Instant::now();
    let corpus = read_corpus(html, true)?;
    let encoder = Encoder::load(encoder)?;
    let chunker = Chunker::for_encoder(&encoder, ChunkParams::default())?;
    let mut docs = corpus.documents;
    // Documentation trees repeat pages (re-exports, redirects): keep one copy of each text.
    let mut seen = std::collections::HashSet::new();
    docs.retain(|d| d.text.split_whitespace().count() >= 20 && seen.insert(d.text.clone()));
    let mut passages = Vec::new();
    let mut kept_docs = Vec::new();
    for doc in docs {
        if passages.len() >= max_passages {
            break;
        }
        for p in chunker.chunk(&doc) {
            passages.push(PassageLine {
                id: p.id,
                title: p.title,
                text: p.text,
            });
        }
        kept_docs.push(doc);
    }
    passages.truncate(max_passages);
    // Inverse cloze: a sentence removed from its passage is the query.
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut order: Vec<usize> = (0..passages.len()).collect();
    order.shuffle(&mut rng);
    let mut queries = Vec::new();
    for i in order {
        if queries.len() == n_queries {
            break;
        }
        let sents = sentences(&passages[i].text);
        if sents.len() < 3 {
            continue;
        }
        let pick = rng.gen_range(1..sents.len() - 1);
        let words = sents[pick].split_whitespace().count();
        if !(6..=40).contains(&words) {
            continue;
        }
        let query = sents[pick].to_string();
        let rest: Vec<&str> = sents
            .iter()
            .enumerate()
            .filter(|(j, _)| *j != pick)
            .map(|(_, s)| *s)
            .collect();
        passages[i].text = rest.join(" ");
        queries.push(QueryLine {
            id: format!("q{}", queries.len()),
            text: query,
            passage_id: passages[i].id.clone(),
        });
    }
    std::fs::create_dir_all(out)?;
    write_jsonl(&out.join("passages.jsonl"), &passages)?;
    write_jsonl(&out.join("queries.jsonl"), &queries)?;
    let corpus_rows: Vec<serde_json::Value> = kept_docs
        .iter()
        .map(|d| json!({"_id": d.id, "title": d.title, "text": d.text}))
        .collect();
    write_jsonl(&out.join("corpus.jsonl"), &corpus_rows)?;
    Ok(json!({
        "documents": kept_docs.len(),
        "passages": passages.len(),
        "queries": queries.len(),
        "seconds": start.elapsed().as_secs_f64(),
    }))
}

fn bm25(data: &Path, params: Bm25Params, k: usize) -> anyhow::Result<serde_json::Value> {
    let passages: Vec<PassageLine> = read_jsonl(&data.join("passages.jsonl"))?;
    let queries: Vec<QueryLine> = read_jsonl(&data.join("queries.jsonl"))?;
    let dir = std::env::temp_dir().join(format!("capstan-bench-bm25-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let start = Instant::now();
    let mut writer = Bm25Writer::create(&dir)?;
    for (i, p) in passages.iter().enumerate() {
        writer.add(i as u64, &p.id, &p.title, &p.text)?;
    }
    writer.finish()?;
    let index_seconds = start.elapsed().as_secs_f64();
    let index = Bm25Index::open(&dir, params)?;
    let ids: std::collections::HashMap<&str, u64> = passages
        .iter()
        .enumerate()
        .map(|(i, p)| (p.id.as_str(), i as u64))
        .collect();
    // Warm-up pass (page cache, allocator), then the timed pass.
    for q in queries.iter().take(100) {
        index.search(&q.text, k)?;
    }
    let start = Instant::now();
    let mut found = 0;
    for q in &queries {
        let hits = index.search(&q.text, k)?;
        if hits
            .iter()
            .any(|h| Some(&h.0) == ids.get(q.passage_id.as_str()))
        {
            found += 1;
        }
    }
    let seconds = start.elapsed().as_secs_f64();
    let _ = std::fs::remove_dir_all(&dir);
    Ok(json!({
        "passages": passages.len(),
        "queries": queries.len(),
        "index_seconds": index_seconds,
        "query_seconds": seconds,
        "queries_per_second": queries.len() as f64 / seconds,
        "recall_at_k": found as f64 / queries.len() as f64,
        "k": k,
    }))
}

fn encode(
    data: &Path,
    encoder: &Path,
    n: usize,
    int8: bool,
    out: Option<&Path>,
) -> anyhow::Result<serde_json::Value> {
    let passages: Vec<PassageLine> = read_jsonl(&data.join("passages.jsonl"))?;
    let texts: Vec<String> = passages
        .iter()
        .take(n)
        .map(|p| format!("{}. {}", p.title, p.text))
        .collect();
    let precision = if int8 {
        EncoderPrecision::Int8
    } else {
        EncoderPrecision::F32
    };
    let options = EncoderOptions {
        precision,
        padded: false,
    };
    let encoder = Encoder::load_with(encoder, &candle_core::Device::Cpu, options)?;
    encoder.embed(&texts[..texts.len().min(64)])?; // warm-up
    let start = Instant::now();
    let vectors = encoder.embed(&texts)?;
    let seconds = start.elapsed().as_secs_f64();
    if let Some(out) = out {
        let bytes: Vec<u8> = vectors
            .iter()
            .flatten()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        std::fs::write(out, bytes).with_context(|| format!("writing {}", out.display()))?;
    }
    Ok(json!({
        "passages": vectors.len(),
        "seconds": seconds,
        "passages_per_second": vectors.len() as f64 / seconds,
        "precision": precision.to_string(),
        "threads": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1),
    }))
}

fn read_f32(path: &Path) -> anyhow::Result<Vec<f32>> {
    let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    Ok(bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect())
}

fn ann(
    base: &Path,
    queries: &Path,
    truth: &Path,
    dim: usize,
    params: HnswParams,
    efs: &[usize],
    k: usize,
) -> anyhow::Result<serde_json::Value> {
    let base = read_f32(base)?;
    let queries = read_f32(queries)?;
    let truth_bytes = std::fs::read(truth)?;
    let truth: Vec<i32> = truth_bytes
        .chunks_exact(4)
        .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    let nq = queries.len() / dim;
    if truth.len() < nq * k {
        bail!("truth has {} ids, need {} queries x {k}", truth.len(), nq);
    }
    let truth_k = truth.len() / nq;
    let start = Instant::now();
    let mut graph = capstan_indexer::build_graph(&base, dim, params)?;
    graph.set_searching_mode(true);
    let build_seconds = start.elapsed().as_secs_f64();
    let start = Instant::now();
    let frozen = FrozenGraph::freeze(&graph, base.len() / dim);
    let freeze_seconds = start.elapsed().as_secs_f64();
    let none = HashSet::new();
    let recall = |hits: &mut dyn Iterator<Item = usize>, qi: usize| {
        let gt = &truth[qi * truth_k..qi * truth_k + k];
        hits.filter(|id| gt.contains(&(*id as i32))).count()
    };
    let mut runs = Vec::new();
    for &ef in efs {
        let ef = ef.max(k);
        // Capstan's search over the frozen links (what `capstan search` runs).
        let start = Instant::now();
        let mut found = 0;
        for (qi, q) in queries.chunks_exact(dim).enumerate() {
            let hits = frozen.search(&base, dim, q, k, ef, &none);
            found += recall(&mut hits.iter().map(|h| h.0 as usize), qi);
        }
        let seconds = start.elapsed().as_secs_f64();
        // hnsw_rs's own search over the same graph.
        let start = Instant::now();
        let mut found_hnsw_rs = 0;
        for (qi, q) in queries.chunks_exact(dim).enumerate() {
            let hits = graph.search(q, k, ef);
            found_hnsw_rs += recall(&mut hits.iter().map(|h| h.d_id), qi);
        }
        let seconds_hnsw_rs = start.elapsed().as_secs_f64();
        runs.push(json!({
            "ef": ef,
            "queries_per_second": nq as f64 / seconds,
            "recall_at_k": found as f64 / (nq * k) as f64,
            "hnsw_rs_search": {
                "queries_per_second": nq as f64 / seconds_hnsw_rs,
                "recall_at_k": found_hnsw_rs as f64 / (nq * k) as f64,
            },
        }));
    }
    Ok(json!({
        "vectors": base.len() / dim,
        "dim": dim,
        "queries": nq,
        "m": params.m,
        "ef_construction": params.ef_construction,
        "build_seconds": build_seconds,
        "freeze_seconds": freeze_seconds,
        "k": k,
        "runs": runs,
    }))
}

fn peak_rss_mib() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse::<f64>().ok())
        })
        .map_or(0.0, |kb| kb / 1024.0)
}

fn latency(
    index: &Path,
    queries: &Path,
    opts: SearchOptions,
    precision: Option<EncoderPrecision>,
) -> anyhow::Result<serde_json::Value> {
    let start = Instant::now();
    let encoder = std::env::var_os("CAPSTAN_ENCODER").map(std::path::PathBuf::from);
    let fallback = encoder.clone().unwrap_or_default();
    let retriever = capstan_qdrant::open_retriever(
        index,
        encoder.as_deref(),
        &fallback,
        &candle_core::Device::Cpu,
        precision,
    )?;
    let open_seconds = start.elapsed().as_secs_f64();
    let queries: Vec<QueryLine> = read_jsonl(queries)?;
    for q in queries.iter().take(20) {
        retriever.search(&q.text, &opts)?;
    }
    let mut times = Vec::with_capacity(queries.len());
    for q in &queries {
        let t = Instant::now();
        retriever.search(&q.text, &opts)?;
        times.push(t.elapsed().as_secs_f64() * 1000.0);
    }
    // The question's embedding alone (what the dense and hybrid modes add to BM25's time).
    let mut embed = Vec::with_capacity(queries.len());
    for q in &queries {
        let t = Instant::now();
        retriever.embed_query(&q.text)?;
        embed.push(t.elapsed().as_secs_f64() * 1000.0);
    }
    let percentile = |times: &mut Vec<f64>, p: f64| {
        times.sort_by(f64::total_cmp);
        times[((times.len() as f64 - 1.0) * p).round() as usize]
    };
    let n = retriever.store().counts()?.passages;
    Ok(json!({
        "passages": n,
        "queries": times.len(),
        "options": opts,
        "question_precision": retriever.encoder()?.info().precision.to_string(),
        "open_seconds": open_seconds,
        "p50_ms": percentile(&mut times, 0.5),
        "p99_ms": percentile(&mut times, 0.99),
        "embed_p50_ms": percentile(&mut embed, 0.5),
        "embed_p99_ms": percentile(&mut embed, 0.99),
        "mean_ms": times.iter().sum::<f64>() / times.len() as f64,
        "peak_rss_mib": peak_rss_mib(),
    }))
}

#[derive(Deserialize)]
struct LlamaRequest {
    prompt: Vec<u32>,
    new_tokens: usize,
}

/// Serves timing requests on stdin so that the caller can alternate with its peer while the
/// model stays loaded (no process start-up or load time inside the timings).
fn llama(model_dir: &Path) -> anyhow::Result<()> {
    use candle_core::{Device, Tensor};
    use capstan_reader::{argmax, Cache, Checkpoint};

    let dev = Device::Cpu;
    let ckpt = Checkpoint::open(model_dir)?;
    let model = ckpt.load_model(&dev, None)?;
    let mut stdout = std::io::stdout().lock();
    writeln!(
        stdout,
        "{}",
        json!({
            "ready": true,
            "threads": candle_core::utils::get_num_threads(),
            "dtype": format!("{:?}", model.dtype()),
        })
    )?;
    stdout.flush()?;
    for line in std::io::stdin().lock().lines() {
        let line = line?;
        if line.trim().is_empty() {
            continue;
        }
        let req: LlamaRequest = serde_json::from_str(&line).context("request line")?;
        if req.new_tokens == 0 {
            bail!("new_tokens must be >= 1");
        }
        let mut cache = Cache::new(&model);
        let start = Instant::now();
        let ids = Tensor::new(req.prompt.as_slice(), &dev)?.unsqueeze(0)?;
        let logits = model.forward_last(&ids, None, &mut cache)?;
        let mut tokens = vec![argmax(&logits.squeeze(0)?.to_vec1::<f32>()?)];
        let prefill = start.elapsed().as_secs_f64();
        let start = Instant::now();
        while tokens.len() < req.new_tokens {
            let ids = Tensor::new(&[tokens[tokens.len() - 1]], &dev)?.unsqueeze(0)?;
            let logits = model.forward_last(&ids, None, &mut cache)?;
            tokens.push(argmax(&logits.squeeze(0)?.to_vec1::<f32>()?));
        }
        let decode = start.elapsed().as_secs_f64();
        writeln!(
            stdout,
            "{}",
            json!({
                "prompt_tokens": req.prompt.len(),
                "prefill_seconds": prefill,
                "decode_seconds": decode,
                "decode_steps": tokens.len() - 1,
                "tokens": tokens,
            })
        )?;
        stdout.flush()?;
    }
    Ok(())
}
