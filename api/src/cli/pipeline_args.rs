//! Settings shared by `ask`, `serve` and `eval qa`: capstan.toml merged with
//! flags and environment variables, and the pipeline they describe.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use candle_core::Device;
use capstan_reader::GenerationParams;
use capstan_retriever::{Mode, Retriever};
use clap::Args;

use super::search::RetrievalArgs;
use crate::config::FileConfig;
use crate::pipeline::{GenerativeModel, Pipeline, QaRequest, ReaderKind};

/// Flags of the QA pipeline (each overrides capstan.toml).
#[derive(Debug, Clone, Args)]
pub struct PipelineArgs {
    /// Settings file (default: ./capstan.toml when present).
    #[arg(long, env = "CAPSTAN_CONFIG")]
    pub config: Option<PathBuf>,
    /// Retrieval mode: bm25, dense or hybrid [default: hybrid].
    #[arg(long, env = "CAPSTAN_MODE")]
    pub mode: Option<Mode>,
    /// Passages retrieved per question [default: 5].
    #[arg(short, long, env = "CAPSTAN_K")]
    pub k: Option<usize>,
    /// Reader: extractive, llama or cape [default: extractive].
    #[arg(long, env = "CAPSTAN_READER")]
    pub reader: Option<ReaderKind>,
    /// Llama checkpoint folder (Hugging Face layout).
    #[arg(long, env = "CAPSTAN_LLAMA_MODEL")]
    pub llama_model: Option<PathBuf>,
    /// CEPE (CAPE) checkpoint folder.
    #[arg(long, env = "CAPSTAN_CAPE_MODEL")]
    pub cape_model: Option<PathBuf>,
    /// Device of generative readers: cpu, cuda or auto [default: auto].
    #[arg(long, env = "CAPSTAN_DEVICE")]
    pub device: Option<String>,
    /// Generated tokens at most [default: 32].
    #[arg(long, env = "CAPSTAN_MAX_NEW_TOKENS")]
    pub max_new_tokens: Option<usize>,
    /// Passages in the CAPE decoder prompt; the rest are encoder chunks [default: 10].
    #[arg(long)]
    pub decoder_passages: Option<usize>,
    /// Put the strongest passages at the start and end of the prompt.
    #[arg(long)]
    pub lost_in_the_middle: bool,
    /// Ask the question before and after the documents.
    #[arg(long)]
    pub query_aware: bool,
    #[command(flatten)]
    pub retrieval: RetrievalArgs,
}

/// Defaults of a question, after merging.
#[derive(Debug, Clone)]
pub struct QaDefaults {
    /// Template of a request (question empty).
    pub request: QaRequest,
}

/// Builds the pipeline over `index` and the request defaults.
pub fn build(
    index: &std::path::Path,
    args: &PipelineArgs,
) -> anyhow::Result<(Arc<Pipeline>, QaDefaults, FileConfig)> {
    let file = FileConfig::load(args.config.as_deref())?;
    let mode = match (&args.mode, &file.retrieval.mode) {
        (Some(m), _) => *m,
        (None, Some(m)) => m.parse().context("capstan.toml [retrieval] mode")?,
        (None, None) => Mode::Hybrid,
    };
    let reader = match (&args.reader, &file.reader.default) {
        (Some(r), _) => *r,
        (None, Some(r)) => r
            .parse()
            .map_err(anyhow::Error::msg)
            .context("capstan.toml [reader] default")?,
        (None, None) => ReaderKind::Extractive,
    };
    let encoder = args
        .retrieval
        .encoder
        .clone()
        .or(file.retrieval.encoder.clone());
    let retriever = Arc::new(Retriever::open(index, encoder.as_deref())?);
    let device_name = args
        .device
        .clone()
        .or(file.reader.device.clone())
        .unwrap_or_else(|| "auto".into());
    let device = match device_name.as_str() {
        "cpu" => Device::Cpu,
        "cuda" => Device::new_cuda(0).context("--device cuda")?,
        "auto" => Device::cuda_if_available(0).unwrap_or(Device::Cpu),
        other => anyhow::bail!("--device: `{other}` (expected cpu, cuda or auto)"),
    };
    let load = |path: Option<PathBuf>| -> anyhow::Result<Option<GenerativeModel>> {
        path.map(|p| GenerativeModel::load(&p, &device)).transpose()
    };
    let llama = load(args.llama_model.clone().or(file.reader.llama_model.clone()))?;
    let cape = load(args.cape_model.clone().or(file.reader.cape_model.clone()))?;
    let k = args.k.or(file.retrieval.k).unwrap_or(5);
    let search = args.retrieval.options(mode, k);
    let pipeline = Arc::new(Pipeline::new(retriever, llama, cape, search));
    if !pipeline.available_readers().contains(&reader) {
        return Err(crate::pipeline::NotLoaded(reader).into());
    }
    let max_new_tokens = args
        .max_new_tokens
        .or(file.reader.max_new_tokens)
        .unwrap_or(32);
    let request = QaRequest {
        question: String::new(),
        k,
        mode,
        reader,
        generation: GenerationParams {
            max_new_tokens,
            stop_strings: vec!["\n".into()],
            ..GenerationParams::default()
        },
        lost_in_the_middle: args.lost_in_the_middle
            || file.reader.lost_in_the_middle.unwrap_or(false),
        query_aware: args.query_aware || file.reader.query_aware.unwrap_or(false),
        decoder_passages: args
            .decoder_passages
            .or(file.reader.decoder_passages)
            .unwrap_or(10),
    };
    Ok((pipeline, QaDefaults { request }, file))
}
