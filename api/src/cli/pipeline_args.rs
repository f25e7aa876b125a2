//! Settings shared by `ask`, `serve` and `eval qa`: capstan.toml merged with
//! flags and environment variables, and the pipeline they describe.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use capstan_reader::{CrossKv, GenerationParams, LanguageModel, LoadOptions};
use capstan_retriever::Mode;
use clap::Args;

use super::encoder_arg::default_encoder;
use super::search::RetrievalArgs;
use crate::config::FileConfig;
use capstan_engine::context::{AnswerMode, ContextMode, PassageOrder};
use capstan_engine::pipeline::{Pipeline, QaRequest, ReaderKind, Rewrite};
use capstan_engine::scheduler::PrefixStore;
use capstan_engine::{Scheduler, SchedulerSettings};

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
    /// Reader: extractive, llama or cape [default for ask and serve: llama where a generative
    /// model is at hand (--llama-model, capstan.toml, or the SmolLM2 scripts/setup.sh
    /// installs), else extractive; for eval: extractive].
    #[arg(long, env = "CAPSTAN_READER")]
    pub reader: Option<ReaderKind>,
    /// Generative checkpoint: a Hugging Face folder (Llama, Llama 3.x, Qwen2) or a .gguf file
    /// (or a folder holding one) [default: SmolLM2-135M-Instruct under $CAPSTAN_HOME/models,
    /// when scripts/setup.sh installed it].
    #[arg(long, env = "CAPSTAN_LLAMA_MODEL")]
    pub llama_model: Option<PathBuf>,
    /// Weights of the generative readers in this dtype (a GGUF file dequantized) instead of
    /// their natural form (GGUF quantized; f32 on CPU, bf16 on CUDA otherwise).
    #[arg(long, value_enum)]
    pub dtype: Option<DtypeArg>,
    /// Prompt instruct models without their chat template (as a base model).
    #[arg(long)]
    pub no_chat_template: bool,
    /// Without --llama-model, load no generative model (not even the default SmolLM2).
    #[arg(long)]
    pub no_default_model: bool,
    /// CEPE (CAPE) checkpoint folder.
    #[arg(long, env = "CAPSTAN_CAPE_MODEL")]
    pub cape_model: Option<PathBuf>,
    /// Where CAPE keeps a request's cross-attention keys and values: `cached` (every layer's,
    /// fastest decoding), `projected` (only the encoder states, each layer projecting as it runs:
    /// 1/64 of the memory for CEPE-LLaMA-2-7B), `auto[:MIB]` (cached up to MIB per request,
    /// default 1024) [default: auto].
    #[arg(long, env = "CAPSTAN_CAPE_CROSS_KV")]
    pub cape_cross_kv: Option<String>,
    /// Element type of the generative models' KV cache: `f16` (half the bytes a decoding step
    /// reads; the default for GGUF files on the CPU) or the activations' dtype (exact; the
    /// default otherwise).
    #[arg(long, value_enum, env = "CAPSTAN_KV_CACHE")]
    pub kv_cache: Option<DtypeArg>,
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
    /// The answer: `span` (a short span of the passages, chosen by ranking every candidate
    /// span; a Llama reader's likelihood of each is one of its scores; cited where it stands,
    /// its sentence beside it), `copy` (a span the Llama or CAPE reader copies by constrained
    /// greedy decoding), `sentence` (the extractive reader's best sentence) or `free` (free
    /// text, first line) [default: span].
    #[arg(long, env = "CAPSTAN_ANSWER")]
    pub answer: Option<AnswerMode>,
    /// What the Llama reader reads: `budget:N` (whole passages, best first, while they fit in
    /// N tokens; past that the best sentences that still fit), `passages` (all whole) or
    /// `sentences:N` (the N sentences of the passages most similar to the question)
    /// [default: budget:300].
    #[arg(long, env = "CAPSTAN_CONTEXT")]
    pub context: Option<ContextMode>,
    /// The instruction opening the Llama reader's prompt.
    #[arg(long)]
    pub instruction: Option<String>,
    /// The best document last, next to the question (`--best-last false`: first)
    /// [default: true].
    #[arg(long, num_args = 0..=1, default_missing_value = "true")]
    pub best_last: Option<bool>,
    /// A worked example (question, document, short answer) as an earlier turn of the prompt
    /// [default: true].
    #[arg(long, num_args = 0..=1, default_missing_value = "true")]
    pub example: Option<bool>,
    /// The documents' order in the Llama reader's prompt: `rank` (by retrieval rank) or
    /// `stable` (by title and text, so that prompts retrieving the same passages share a
    /// cached prefix) [default: stable with `--context passages`, rank with sentences].
    #[arg(long)]
    pub passage_order: Option<PassageOrder>,
    /// How a conversation's follow-up is made to stand alone for retrieval: `rules` (its
    /// "this person" replaced by the name of the previous question) or `model` (the Llama
    /// reader's model rewrites it; the rules without one) [default: rules].
    #[arg(long)]
    pub rewrite: Option<Rewrite>,
    /// Added to the end-of-answer logit of a span answer wherever it may end: higher, shorter
    /// answers [default: 2].
    #[arg(long, allow_negative_numbers = true)]
    pub span_end_bias: Option<f32>,
    /// Weight of the question's words when choosing sentences (context sentences:N).
    #[arg(long, hide = true)]
    pub sentence_lexical_weight: Option<f32>,
    #[command(flatten)]
    pub scheduling: SchedulingArgs,
    #[command(flatten)]
    pub retrieval: RetrievalArgs,
}

/// The shortest prompt a KV budget must hold: a question and a few passages.
const MIN_PROMPT_TOKENS: usize = 512;

/// Sizes of the generative readers' continuous-batching schedulers.
#[derive(Debug, Clone, Copy, Args)]
pub struct SchedulingArgs {
    /// Sequences decoded together in one step (1: one at a time, no batching) [default: 64].
    #[arg(long, env = "CAPSTAN_MAX_BATCH")]
    pub max_batch: Option<usize>,
    /// KV-cache budget in tokens; each sequence reserves prompt + max new tokens at admission
    /// [default: 131072].
    #[arg(long, env = "CAPSTAN_KV_TOKENS")]
    pub kv_tokens: Option<usize>,
    /// Tokens per step: one per decoding sequence, the rest read prompts in chunks
    /// [default: 512].
    #[arg(long, env = "CAPSTAN_STEP_TOKENS")]
    pub step_tokens: Option<usize>,
    /// Do not keep the KV of prompts read before (automatic prefix caching is on by
    /// default: a prompt starting like an earlier one reads only what is new).
    #[arg(long)]
    pub no_prefix_cache: bool,
    /// MiB of CAPE encoder states kept by passage, so that a passage read before is not
    /// encoded again (0: none kept) [default: 256].
    #[arg(long, env = "CAPSTAN_CAPE_CACHE_MB")]
    pub cape_cache_mb: Option<usize>,
}

impl SchedulingArgs {
    /// The scheduler settings these flags describe; a KV budget that could not hold one
    /// request of `max_new_tokens` is refused here, not by every request.
    pub fn settings(&self, max_new_tokens: usize) -> anyhow::Result<SchedulerSettings> {
        let d = SchedulerSettings::default();
        let settings = SchedulerSettings {
            max_batch: self.max_batch.unwrap_or(d.max_batch),
            kv_tokens: self.kv_tokens.unwrap_or(d.kv_tokens),
            step_tokens: self.step_tokens.unwrap_or(d.step_tokens),
            queue: d.queue,
            prefix_cache: !self.no_prefix_cache,
            passage_cache_bytes: self
                .cape_cache_mb
                .map_or(d.passage_cache_bytes, |mb| mb << 20),
        };
        // The least a request needs: a short RAG prompt and its new tokens.
        let least = MIN_PROMPT_TOKENS + max_new_tokens;
        if settings.kv_tokens < least {
            anyhow::bail!(
                "--kv-tokens {} cannot hold one request: a prompt of {MIN_PROMPT_TOKENS} tokens \
                 and {max_new_tokens} new ones need {least} (the default is {})",
                settings.kv_tokens,
                d.kv_tokens
            );
        }
        Ok(settings)
    }
}

/// Defaults of a question, after merging.
#[derive(Debug, Clone)]
pub struct QaDefaults {
    /// Template of a request (question empty).
    pub request: QaRequest,
}

/// Builds the pipeline over `index` and the request defaults.
/// The default generative model, when `scripts/setup.sh` installed it:
/// `$CAPSTAN_HOME/models/SmolLM2-135M-Instruct.Q4_1.gguf`.
pub fn default_llama_model() -> Option<PathBuf> {
    capstan_reader::default_model_path().filter(|p| p.is_file())
}

/// `--dtype` of the generative readers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum DtypeArg {
    /// 32-bit floats (the parity mode).
    F32,
    /// bfloat16.
    Bf16,
    /// float16.
    F16,
}

impl std::str::FromStr for DtypeArg {
    type Err = anyhow::Error;
    fn from_str(s: &str) -> anyhow::Result<Self> {
        <Self as clap::ValueEnum>::from_str(s, true)
            .map_err(|_| anyhow::anyhow!("`{s}` (expected f32, bf16 or f16)"))
    }
}

impl DtypeArg {
    /// The candle dtype.
    pub fn dtype(self) -> candle_core::DType {
        match self {
            DtypeArg::F32 => candle_core::DType::F32,
            DtypeArg::Bf16 => candle_core::DType::BF16,
            DtypeArg::F16 => candle_core::DType::F16,
        }
    }
}

/// The command a pipeline is built for: what it loads and which reader answers by default.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Command {
    /// `capstan ask`: one answer, the best reader at hand.
    Ask,
    /// `capstan eval`: the reader a benchmark names, the extractive one unless it names another.
    Eval,
    /// `capstan serve`: every reader at hand loaded (a request may ask for any), the best one
    /// answering requests that name none.
    Serve,
}

/// Where `ask` keeps the prefix cache of the model at `path`: one file per model file (its
/// path, size and modification time), KV type and product path (AMX tiles or not: their keys
/// and values differ in the last bits), under `$CAPSTAN_HOME/prompt-cache`.
fn prompt_store(path: &std::path::Path, model: &LanguageModel) -> Option<PrefixStore> {
    let m = model.model();
    let key = format!(
        "{}|{:?}|{:?}|{:?}|amx {}",
        capstan_indexer::file_identity(path)?,
        m.kv_dtype(),
        m.dtype(),
        m.attention(),
        m.products_on_amx()
    );
    let bytes: Vec<u32> = key.bytes().map(u32::from).collect();
    let name = format!(
        "{:016x}.safetensors",
        capstan_reader::hash_tokens(&bytes, 0)
    );
    Some(PrefixStore {
        path: super::encoder_arg::capstan_home()
            .join("prompt-cache")
            .join(name),
        key,
        max_blocks: 16,
    })
}

/// Builds the pipeline over `index` for `command`, and the request defaults.
pub fn build(
    index: &std::path::Path,
    args: &PipelineArgs,
    command: Command,
) -> anyhow::Result<(Arc<Pipeline>, QaDefaults, FileConfig)> {
    let want_llama = command == Command::Serve;
    let file = FileConfig::load(args.config.as_deref())?;
    // Settings checked before anything is opened or loaded.
    let cross_kv = match (&args.cape_cross_kv, &file.reader.cape_cross_kv) {
        (Some(v), _) => Some(
            v.parse()
                .map_err(anyhow::Error::msg)
                .context("--cape-cross-kv")?,
        ),
        (None, Some(v)) => Some(
            v.parse()
                .map_err(anyhow::Error::msg)
                .context("capstan.toml [reader] cape_cross_kv")?,
        ),
        (None, None) => None,
    };
    let kv_cache = match (args.kv_cache, &file.reader.kv_cache) {
        (Some(d), _) => Some(d),
        (None, Some(v)) => Some(v.parse().context("capstan.toml [reader] kv_cache")?),
        (None, None) => None,
    };
    let mode = match (&args.mode, &file.retrieval.mode) {
        (Some(m), _) => *m,
        (None, Some(m)) => m.parse().context("capstan.toml [retrieval] mode")?,
        (None, None) => Mode::Hybrid,
    };
    let answer = match (&args.answer, &file.reader.answer) {
        (Some(a), _) => *a,
        (None, Some(a)) => a
            .parse()
            .map_err(anyhow::Error::msg)
            .context("capstan.toml [reader] answer")?,
        (None, None) => AnswerMode::default(),
    };
    let context = match (&args.context, &file.reader.context) {
        (Some(c), _) => *c,
        (None, Some(c)) => c
            .parse()
            .map_err(anyhow::Error::msg)
            .context("capstan.toml [reader] context")?,
        (None, None) => capstan_engine::pipeline::DEFAULT_CONTEXT,
    };
    // The generative checkpoint at hand: the one named, else the default SmolLM2 where
    // scripts/setup.sh installed it (unless --no-default-model).
    let llama_at_hand = args
        .llama_model
        .clone()
        .or(file.reader.llama_model.clone())
        .or_else(|| (!args.no_default_model).then(default_llama_model).flatten());
    let reader = match (&args.reader, &file.reader.default) {
        (Some(r), _) => *r,
        (None, Some(r)) => r
            .parse()
            .map_err(anyhow::Error::msg)
            .context("capstan.toml [reader] default")?,
        // The best answer this machine can give: the Llama reader's ranked span beats the
        // extractive reader's on every test set of docs/BENCHMARKS.md "Answers", so `ask` and
        // `serve` answer with it wherever a generative model is at hand. `eval` stays with the
        // extractive reader unless told, so that a benchmark's command says what it measured.
        (None, None) => {
            if llama_at_hand.is_some() && command != Command::Eval {
                ReaderKind::Llama
            } else {
                ReaderKind::Extractive
            }
        }
    };
    let encoder = args
        .retrieval
        .encoder
        .clone()
        .or(file.retrieval.encoder.clone());
    let (device, encoder_options) = args.retrieval.device(file.reader.device.as_deref())?;
    let retriever = Arc::new(capstan_qdrant::open_retriever(
        index,
        encoder.as_deref(),
        &default_encoder(),
        &device,
        encoder_options,
    )?);
    let opts = LoadOptions {
        dtype: args.dtype.map(DtypeArg::dtype),
        no_chat_template: args.no_chat_template,
    };
    let max_new_tokens = args
        .max_new_tokens
        .or(file.reader.max_new_tokens)
        .unwrap_or(32);
    let scheduling = args.scheduling.settings(max_new_tokens)?;
    let load = |path: Option<PathBuf>,
                name: &str,
                cross_kv: Option<CrossKv>|
     -> anyhow::Result<Option<Scheduler>> {
        path.map(|p| {
            let mut model = LanguageModel::load(&p, &device, opts)
                .with_context(|| format!("loading the model {}", p.display()))?;
            if let Some(cross_kv) = cross_kv {
                model.model_mut().set_cross_kv(cross_kv);
            }
            if let Some(kv) = kv_cache {
                model
                    .model_mut()
                    .set_kv_dtype(kv.dtype())
                    .with_context(|| format!("--kv-cache for {}", p.display()))?;
            }
            // A one-shot `ask` keeps its prefix cache on disk: the next question starts from
            // the instruction and example every span prompt opens with.
            let store = (command == Command::Ask && scheduling.prefix_cache)
                .then(|| prompt_store(&p, &model))
                .flatten();
            Ok(Scheduler::start_with_store(
                name,
                Arc::new(model),
                scheduling,
                store,
            ))
        })
        .transpose()
    };
    // The default generative model is loaded only where it can be used: by a server, or
    // when the llama reader was asked for.
    let named = args.llama_model.is_some() || file.reader.llama_model.is_some();
    let wanted = named || want_llama || reader == ReaderKind::Llama;
    // The models load while the sentence encoder does (each a third of a second on 2 cores,
    // most of a one-shot `ask`'s start).
    let (llama, cape, encoder) = std::thread::scope(|scope| {
        let models = scope.spawn(|| {
            let llama = load(llama_at_hand.clone().filter(|_| wanted), "llama", None)?;
            let cape = load(
                args.cape_model.clone().or(file.reader.cape_model.clone()),
                "cape",
                cross_kv,
            )?;
            anyhow::Ok((llama, cape))
        });
        let encoder = retriever.encoder().map(|_| ());
        let (llama, cape) = models
            .join()
            .map_err(|_| anyhow::anyhow!("loading the models panicked"))??;
        anyhow::Ok((llama, cape, encoder))
    })?;
    encoder?;
    let k = args.k.or(file.retrieval.k).unwrap_or(5);
    let search = args.retrieval.options(mode, k);
    let pipeline = Arc::new(Pipeline::new(retriever, llama, cape, search)?);
    if !pipeline.available_readers().contains(&reader) {
        return Err(capstan_engine::Error::NotLoaded(reader).into());
    }
    let defaults = QaRequest::new("", reader);
    let request = QaRequest {
        k,
        mode,
        generation: GenerationParams {
            max_new_tokens,
            ..GenerationParams::default()
        },
        lost_in_the_middle: args.lost_in_the_middle
            || file.reader.lost_in_the_middle.unwrap_or(false),
        query_aware: args.query_aware || file.reader.query_aware.unwrap_or(false),
        decoder_passages: args
            .decoder_passages
            .or(file.reader.decoder_passages)
            .unwrap_or(defaults.decoder_passages),
        filter: args.retrieval.filter()?,
        answer,
        context,
        instruction: args
            .instruction
            .clone()
            .or(file.reader.instruction.clone())
            .unwrap_or(defaults.instruction.clone()),
        best_last: args
            .best_last
            .or(file.reader.best_last)
            .unwrap_or(defaults.best_last),
        example: args
            .example
            .or(file.reader.example)
            .unwrap_or(defaults.example),
        passage_order: args.passage_order.or(file.reader.passage_order),
        rewrite: args
            .rewrite
            .or(file.reader.rewrite)
            .unwrap_or(defaults.rewrite),
        span_end_bias: args.span_end_bias.unwrap_or(defaults.span_end_bias),
        sentence_lexical_weight: args
            .sentence_lexical_weight
            .unwrap_or(defaults.sentence_lexical_weight),
        ..defaults
    };
    Ok((pipeline, QaDefaults { request }, file))
}
