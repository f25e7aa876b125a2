//! `capstan-bench gpu ...`: the Capstan side of scripts/gpu-check.sh (issue 10). Every
//! subcommand takes `--device cpu|cuda` and prints one JSON object; on the CPU, at the tiny
//! shapes, they prove the check runs on a machine without a GPU.

use std::path::PathBuf;

use clap::Subcommand;

mod attention;
mod cape;
mod decode;
mod decode_attention;
mod device;
mod encode;
mod parity;
mod passage_cache;
mod prefill;
mod shapes;

/// The attention heads a benchmark runs (Llama 3 8B's by default).
#[derive(clap::Args, Debug, Clone, Copy)]
pub struct Heads {
    /// Query heads.
    #[arg(long = "heads", default_value_t = 32)]
    pub query: usize,
    #[arg(long, default_value_t = 8)]
    pub kv_heads: usize,
    /// Head width.
    #[arg(long, default_value_t = 128)]
    pub dim: usize,
}

impl Heads {
    /// A run's result: the device, the type and these heads, then `fields` (an object).
    pub fn result(
        &self,
        device: &candle_core::Device,
        dtype: candle_core::DType,
        fields: serde_json::Value,
    ) -> serde_json::Value {
        let mut out = serde_json::json!({
            "device": device::describe(device),
            "dtype": format!("{dtype:?}").to_lowercase(),
            "heads": self.query,
            "kv_heads": self.kv_heads,
            "dim": self.dim,
        });
        if let (Some(o), serde_json::Value::Object(f)) = (out.as_object_mut(), fields) {
            o.extend(f);
        }
        out
    }
}

#[derive(Subcommand)]
pub enum GpuCommand {
    /// The reader's parity fixtures on the device, in f32 and bf16.
    Parity {
        /// reader/tests/fixtures (or the bundle's copy).
        #[arg(long)]
        fixtures: PathBuf,
        #[arg(long, default_value = "cuda")]
        device: String,
    },
    /// Batch-1 decoding tokens/s of a model shape with random weights made on the device, at
    /// each context (a synthetic KV cache), against the copy-bandwidth roofline.
    Decode {
        /// llama2-7b, llama3-8b (or llama2-tiny, llama3-tiny on the CPU).
        #[arg(long)]
        shape: String,
        #[arg(long, value_delimiter = ',', default_value = "1024,32768")]
        contexts: Vec<usize>,
        #[arg(long, default_value_t = 64)]
        steps: usize,
        /// How a step runs on CUDA, each measured: `kernel` (layer by layer, Capstan's
        /// attention kernel), `matmul` (layer by layer, cuBLAS products with the softmax
        /// between), `step` (the fused decoding step replayed as a CUDA graph), `step-eager`
        /// (its kernels launched one by one).
        #[arg(long, value_delimiter = ',', default_value = "kernel,matmul")]
        full_attention: Vec<String>,
        /// Sequences decoding together (packed steps, as the continuous-batching scheduler
        /// runs them); above 1 the roofline is not measured, and --full-attention `step` or
        /// `step-eager` runs the batch through the fused decoding step (else the layers).
        #[arg(long, default_value_t = 1)]
        batch: usize,
        #[arg(long, default_value = "cuda")]
        device: String,
        #[arg(long, default_value = "bf16")]
        dtype: String,
    },
    /// Causal attention kernel TFLOP/s at each context, and (with --shape) a model's prefill
    /// tokens/s at --model-contexts.
    Prefill {
        #[arg(long, value_delimiter = ',', default_value = "8192,32768")]
        contexts: Vec<usize>,
        #[command(flatten)]
        heads: Heads,
        #[arg(long)]
        shape: Option<String>,
        #[arg(long, value_delimiter = ',', default_value = "8192")]
        model_contexts: Vec<usize>,
        /// Only the model's prefill (no attention-kernel timings).
        #[arg(long)]
        model_only: bool,
        #[arg(long, default_value = "cuda")]
        device: String,
        #[arg(long, default_value = "bf16")]
        dtype: String,
    },
    /// Decoding attention alone on both of attention_decode.cu's kernels (per query head,
    /// grouped): seconds a call and the caches' bytes a second at `BATCHxCONTEXT` cases.
    DecodeAttention {
        #[arg(
            long,
            value_delimiter = ',',
            default_value = "1x32768,1x131072,16x8192"
        )]
        cases: Vec<decode_attention::Case>,
        #[command(flatten)]
        heads: Heads,
        #[arg(long, default_value = "cuda")]
        device: String,
        #[arg(long, default_value = "bf16")]
        dtype: String,
    },
    /// Attention of every pattern (`causal`, `zebra`, `scca`, `selfextend`, `cross`) at given
    /// lengths: seconds a call and useful TFLOP/s (the peer: `bench/gpu_peers.py attention`).
    Attention {
        /// PATTERN:CONTEXT cases.
        #[arg(
            long,
            value_delimiter = ',',
            default_value = "causal:8192,causal:32768,causal:131072,zebra:32768,scca:32768,selfextend:32768,cross:32768"
        )]
        cases: Vec<attention::Case>,
        #[command(flatten)]
        heads: Heads,
        #[arg(long, default_value_t = 512)]
        window: u32,
        #[arg(long, default_value_t = 2048)]
        chunk: u32,
        #[arg(long, default_value_t = 512)]
        neighbor: u32,
        #[arg(long, default_value_t = 8)]
        group: u32,
        #[arg(long, default_value_t = 4096)]
        cross_queries: usize,
        #[arg(long, default_value = "cuda")]
        device: String,
        #[arg(long, default_value = "bf16")]
        dtype: String,
    },
    /// CAPE against full context (the CAPE paper's Table 1 protocol): peak memory and
    /// throughput ratios at each total number of tokens.
    Cape {
        /// cepe-7b (or cepe-tiny on the CPU).
        #[arg(long, default_value = "cepe-7b")]
        shape: String,
        #[arg(long, value_delimiter = ',', default_value = "8192,32768,131072")]
        totals: Vec<usize>,
        #[arg(long, default_value_t = 4096)]
        decoder_tokens: usize,
        #[arg(long, default_value_t = 256)]
        chunk: usize,
        /// Run the full-context pass only up to this many tokens (past it, its memory is
        /// reported as weights + KV cache, a lower bound, and no throughput).
        #[arg(long, default_value_t = 32768)]
        full_max: usize,
        #[arg(long, default_value = "cuda")]
        device: String,
        #[arg(long, default_value = "bf16")]
        dtype: String,
    },
    /// CAPE's passage cache under a RAG load (popular passages recur): encoder tokens computed
    /// and request times with the cache off and on, and whether the logits are identical.
    PassageCache {
        /// cepe-7b, cepe-smol (CEPE's encoder, a SmolLM2-shaped decoder) or cepe-tiny.
        #[arg(long, default_value = "cepe-7b")]
        shape: String,
        #[arg(long, default_value_t = 24)]
        requests: usize,
        /// Passages per request.
        #[arg(long, default_value_t = 5)]
        k: usize,
        /// Distinct passages the requests draw from (Zipf, s = 1).
        #[arg(long, default_value_t = 20)]
        pool: usize,
        #[arg(long, default_value_t = 256)]
        chunk: usize,
        #[arg(long, default_value_t = 64)]
        question: usize,
        #[arg(long, default_value = "cuda")]
        device: String,
        #[arg(long, default_value = "bf16")]
        dtype: String,
    },
    /// The dense encoder on the device: passages/s and its vectors against the CPU path.
    Encode {
        /// JSONL passages with `text` (and `title`).
        #[arg(long)]
        passages: PathBuf,
        #[arg(long, env = "CAPSTAN_ENCODER")]
        encoder: PathBuf,
        #[arg(long, default_value_t = 5000)]
        n: usize,
        /// Passages also embedded on the CPU (f32) to compare.
        #[arg(long, default_value_t = 256)]
        check: usize,
        /// Write the vectors here (little-endian f32 rows) for the peer's comparison.
        #[arg(long)]
        out: Option<PathBuf>,
        #[arg(long, default_value = "cuda")]
        device: String,
        #[arg(long, default_value = "f16")]
        dtype: String,
    },
    /// Decoding tokens/s of a GGUF checkpoint, quantized, on the device: one generation, or
    /// (`--batch N`) N sequences decoding together.
    Gguf {
        #[arg(long)]
        model: PathBuf,
        #[arg(long, default_value_t = 128)]
        new_tokens: usize,
        /// How steps run, each measured: `layers` (layer by layer), `step` (the fused decoding
        /// step as a CUDA graph), `step-eager` (its kernels one by one).
        #[arg(long, value_delimiter = ',', default_value = "layers")]
        ways: Vec<String>,
        /// Sequences decoding together (continuous batching's packed steps over synthetic
        /// caches of each `--contexts` length, `--steps` timed); 1: one generation of
        /// `--new-tokens` from a prompt.
        #[arg(long, default_value_t = 1)]
        batch: usize,
        #[arg(long, value_delimiter = ',', default_value = "1024")]
        contexts: Vec<usize>,
        #[arg(long, default_value_t = 32)]
        steps: usize,
        #[arg(long, default_value = "cuda")]
        device: String,
    },
}

pub fn run(command: GpuCommand) -> anyhow::Result<serde_json::Value> {
    match command {
        GpuCommand::Parity { fixtures, device } => parity::run(&fixtures, &device::open(&device)?),
        GpuCommand::Decode {
            shape,
            contexts,
            steps,
            full_attention,
            batch,
            device,
            dtype,
        } if batch > 1 => decode::run_batched(
            &shape,
            &contexts,
            steps,
            batch,
            // The first way given: the fused step where it names one, else the packed layers.
            full_attention.first().map_or("packed", String::as_str),
            &device::open(&device)?,
            device::dtype(&dtype)?,
        ),
        GpuCommand::Decode {
            shape,
            contexts,
            steps,
            full_attention,
            device,
            dtype,
            ..
        } => decode::run(
            &shape,
            &contexts,
            steps,
            &full_attention,
            &device::open(&device)?,
            device::dtype(&dtype)?,
        ),
        GpuCommand::Prefill {
            contexts,
            heads,
            shape,
            model_contexts,
            model_only,
            device,
            dtype,
        } => prefill::run(
            if model_only { &[] } else { &contexts },
            heads,
            shape.as_deref(),
            &model_contexts,
            &device::open(&device)?,
            device::dtype(&dtype)?,
        ),
        GpuCommand::DecodeAttention {
            cases,
            heads,
            device,
            dtype,
        } => decode_attention::run(
            &cases,
            heads,
            &device::open(&device)?,
            device::dtype(&dtype)?,
        ),
        GpuCommand::Attention {
            cases,
            heads,
            window,
            chunk,
            neighbor,
            group,
            cross_queries,
            device,
            dtype,
        } => attention::run(
            &cases,
            heads,
            &attention::PatternParams {
                window,
                chunk,
                neighbor,
                group,
                cross_queries,
            },
            &device::open(&device)?,
            device::dtype(&dtype)?,
        ),
        GpuCommand::Cape {
            shape,
            totals,
            decoder_tokens,
            chunk,
            full_max,
            device,
            dtype,
        } => cape::run(
            &shape,
            &totals,
            decoder_tokens,
            chunk,
            full_max,
            &device::open(&device)?,
            device::dtype(&dtype)?,
        ),
        GpuCommand::PassageCache {
            shape,
            requests,
            k,
            pool,
            chunk,
            question,
            device,
            dtype,
        } => passage_cache::run(
            &shape,
            requests,
            k,
            pool,
            chunk,
            question,
            &device::open(&device)?,
            device::dtype(&dtype)?,
        ),
        GpuCommand::Encode {
            passages,
            encoder,
            n,
            check,
            out,
            device,
            dtype,
        } => encode::run(
            &passages,
            &encoder,
            n,
            check,
            &device::open(&device)?,
            device::dtype(&dtype)?,
            out.as_deref(),
        ),
        GpuCommand::Gguf {
            model,
            new_tokens,
            ways,
            batch,
            contexts,
            steps,
            device,
        } => {
            let device = device::open(&device)?;
            if batch > 1 {
                decode::gguf_batched(&model, batch, &contexts, steps, &ways, &device)
            } else {
                decode::gguf(&model, new_tokens, &ways, &device)
            }
        }
    }
}
