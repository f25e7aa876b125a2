//! `capstan search`: the top-k passages for a question.

use std::path::{Path, PathBuf};

use candle_core::Device;
use capstan_indexer::DenseStrategy;
use capstan_indexer::EncoderPrecision;
use capstan_retriever::{Filter, Fusion, Hit, Mode, Retriever, SearchOptions, Unit};
use clap::{Args, ValueEnum};

use super::device_arg::DeviceArg;
use super::encoder_arg::default_encoder;

/// Retrieval settings shared by `search` and `eval`.
#[derive(Debug, Clone, Args)]
pub struct RetrievalArgs {
    /// Hybrid fusion: weighted (a convex combination of min-max normalised
    /// scores; the best on the real-text dev sets, docs/BENCHMARKS.md) or rrf.
    #[arg(long, value_enum, default_value_t = FusionArg::Weighted)]
    pub fusion: FusionArg,
    /// Rank constant of reciprocal rank fusion.
    #[arg(long, default_value_t = 60.0)]
    pub rrf_k: f32,
    /// BM25's weight in either fusion, in [0, 1] (dense gets 1 - w).
    #[arg(long, default_value_t = Fusion::DEFAULT_BM25_WEIGHT)]
    pub bm25_weight: f32,
    /// Dense search: auto (exact below 40,000 passages), exact or hnsw.
    #[arg(long, value_enum, default_value_t = DenseArg::Auto)]
    pub dense: DenseArg,
    /// HNSW search breadth (raised to twice the candidates the dense side gives).
    #[arg(long, default_value_t = 64)]
    pub ef: usize,
    /// Hybrid: candidates each retriever contributes to fusion (passages, or documents
    /// with --unit documents).
    #[arg(long, default_value_t = capstan_retriever::DEFAULT_DEPTH)]
    pub depth: usize,
    /// Rank passages, or documents (each component collapsed to documents before fusion;
    /// a hit is a document's best passage) [default: passages; eval retrieval scores the
    /// first 100 distinct documents of the passage ranking].
    #[arg(long, value_enum)]
    pub unit: Option<UnitArg>,
    /// Encoder folder (default: the one recorded in the index manifest).
    #[arg(long, env = "CAPSTAN_ENCODER")]
    pub encoder: Option<PathBuf>,
    /// Device of the encoder (questions, and sentences for the extractive reader) and of
    /// generative readers: cpu, cuda or auto [default: auto].
    #[arg(long, env = "CAPSTAN_DEVICE")]
    pub device: Option<String>,
    /// The encoder's numbers for questions: f32, int8 (the CPU's fast mode), f16 or bf16
    /// [default: int8 on the CPU for an index built in int8, else f32].
    #[arg(long, value_enum)]
    pub encoder_dtype: Option<super::encoder_arg::EncoderDtypeArg>,
    /// Only passages of documents whose metadata field KEY equals VALUE (a string, an
    /// integer or true/false; repeat for several conditions, all of which must hold).
    #[arg(long = "filter", value_name = "KEY=VALUE")]
    pub filters: Vec<String>,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum FusionArg {
    Rrf,
    Weighted,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum UnitArg {
    Passages,
    Documents,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum DenseArg {
    Auto,
    Exact,
    Hnsw,
}

impl RetrievalArgs {
    /// The device (`--device`, else `fallback` from a config file, else auto) and the
    /// encoder's options.
    pub fn device(
        &self,
        fallback: Option<&str>,
    ) -> anyhow::Result<(Device, Option<EncoderPrecision>)> {
        let name = self.device.as_deref().or(fallback).unwrap_or("auto");
        let device = name
            .parse::<DeviceArg>()
            .map_err(|e| anyhow::anyhow!("--device: {e}"))?
            .device()?;
        Ok((device, self.encoder_dtype.map(Into::into)))
    }

    /// The retriever over `index`, its encoder on the chosen device.
    pub fn open(&self, index: &Path) -> anyhow::Result<Retriever> {
        let (device, options) = self.device(None)?;
        Ok(capstan_qdrant::open_retriever(
            index,
            self.encoder.as_deref(),
            &default_encoder(),
            &device,
            options,
        )?)
    }

    /// The metadata filter of the `--filter` flags (`None` without any).
    pub fn filter(&self) -> anyhow::Result<Option<Filter>> {
        if self.filters.is_empty() {
            return Ok(None);
        }
        let mut filter = Filter::default();
        for f in &self.filters {
            let (key, value) = f
                .split_once('=')
                .ok_or_else(|| anyhow::anyhow!("--filter `{f}`: expected KEY=VALUE"))?;
            // An integer or a boolean stays one; anything else is a string.
            let value = match serde_json::from_str::<serde_json::Value>(value) {
                Ok(v @ (serde_json::Value::Bool(_) | serde_json::Value::Number(_))) => v,
                _ => serde_json::Value::String(value.to_string()),
            };
            filter.equals.insert(key.trim().to_string(), value);
        }
        filter
            .validate()
            .map_err(|e| anyhow::anyhow!("--filter: {e}"))?;
        Ok(Some(filter))
    }

    /// The search settings (ranking passages unless --unit says otherwise).
    pub fn options(&self, mode: Mode, k: usize) -> SearchOptions {
        SearchOptions {
            mode,
            k,
            fusion: match self.fusion {
                FusionArg::Rrf => Fusion::Rrf {
                    k: self.rrf_k,
                    bm25_weight: self.bm25_weight,
                },
                FusionArg::Weighted => Fusion::Weighted {
                    bm25_weight: self.bm25_weight,
                },
            },
            dense: match self.dense {
                DenseArg::Auto => DenseStrategy::Auto,
                DenseArg::Exact => DenseStrategy::Exact,
                DenseArg::Hnsw => DenseStrategy::Hnsw,
            },
            ef: self.ef,
            depth: self.depth,
            unit: match self.unit {
                None | Some(UnitArg::Passages) => Unit::Passages,
                Some(UnitArg::Documents) => Unit::Documents,
            },
        }
    }
}

/// Arguments of `capstan search`.
#[derive(Debug, Args)]
pub struct SearchArgs {
    /// The index folder.
    index: PathBuf,
    /// The question.
    query: String,
    /// Retrieval mode: bm25, dense or hybrid.
    #[arg(long, default_value = "hybrid")]
    mode: Mode,
    /// How many passages.
    #[arg(short, default_value_t = 10)]
    k: usize,
    /// Print the hits as JSON.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    retrieval: RetrievalArgs,
}

/// Runs `capstan search`.
pub fn run(args: SearchArgs) -> anyhow::Result<()> {
    let retriever = args.retrieval.open(&args.index)?;
    let opts = args.retrieval.options(args.mode, args.k);
    let filter = args.retrieval.filter()?;
    let hits = retriever.search_with(&args.query, None, &opts, filter.as_ref())?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&hits)?);
    } else {
        print_hits(&hits);
    }
    Ok(())
}

fn component(c: Option<capstan_retriever::ComponentScore>) -> String {
    c.map_or("-".to_string(), |c| format!("{:.3} (#{})", c.score, c.rank))
}

/// Prints hits for people: rank, scores, ids, title and a snippet.
pub fn print_hits(hits: &[Hit]) {
    if hits.is_empty() {
        println!("no passage matches");
    }
    for (i, h) in hits.iter().enumerate() {
        let location = h.location.describe();
        let location = if location.is_empty() {
            location
        } else {
            format!(" {location}")
        };
        println!(
            "{:>2}. {:.4}  {}  [{}]{location}  bm25 {}  dense {}",
            i + 1,
            h.score,
            h.passage_id,
            h.title,
            component(h.bm25),
            component(h.dense)
        );
        println!("    {}", snippet(&h.text, 200));
    }
}

/// The first `max` characters of `text` on one line.
pub fn snippet(text: &str, max: usize) -> String {
    let flat: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if flat.chars().count() <= max {
        flat
    } else {
        let cut: String = flat.chars().take(max).collect();
        format!("{cut}…")
    }
}
