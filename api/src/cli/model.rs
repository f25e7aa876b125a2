//! `capstan model forward|generate|tokenize|chat-template|info`: run a generative checkpoint
//! on token ids, or its tokenizer and chat template on texts (parity checks against the
//! reference implementations).
//!
//! Input JSON: `{"input_ids": [[...]]}` (batch 1), optionally `"encoder_input_ids": [[...], ...]`
//! (unpadded CEPE encoder chunks) and `"encoder_pad_token_id"` (default: config.json's
//! `pad_token_id`, else 2).

use std::path::PathBuf;

use anyhow::{bail, Context};
use candle_core::Tensor;
use capstan_reader::{
    AttentionPattern, Cache, ChatMessage, ChatTemplate, Checkpoint, GenerationParams, Generator,
    Request, KV_REPORT_CONTEXT,
};
use clap::{Args, Subcommand};

use super::device_arg::DeviceArg;
use super::pipeline_args::DtypeArg;
use serde::Deserialize;

/// Arguments of `capstan model`.
#[derive(Debug, Args)]
pub struct ModelArgs {
    #[command(subcommand)]
    command: ModelCommand,
}

#[derive(Debug, Subcommand)]
enum ModelCommand {
    /// Logits of every input position: writes {"logits": [[...] per position]} (f32).
    Forward(CommonArgs),
    /// Greedy generation: writes {"tokens": [...]} (and "text" when the checkpoint has a
    /// tokenizer).
    Generate(GenerateArgs),
    /// Config summary, parameter count (and a GGUF file's quantization types) and KV-cache
    /// bytes per token at 32K context for each attention pattern (or only the one given).
    Info(InfoArgs),
    /// Token ids of texts, no special tokens added: IN `{"texts": [...]}`, OUT
    /// `{"ids": [[...], ...]}`.
    Tokenize(TextArgs),
    /// Conversations rendered by the checkpoint's chat template with the generation prompt:
    /// IN `{"conversations": [[{"role", "content"}, ...], ...]}`, OUT `{"rendered": [...]}`.
    ChatTemplate(TextArgs),
}

/// The checkpoint, input and output files of `forward`, `generate`, `tokenize` and
/// `chat-template`.
#[derive(Debug, Args)]
struct TextArgs {
    /// Checkpoint: a Hugging Face folder or a .gguf file (or a folder holding one).
    #[arg(long)]
    model: PathBuf,
    /// Input JSON file.
    #[arg(long)]
    input: PathBuf,
    /// Output JSON file (default: stdout).
    #[arg(long)]
    out: Option<PathBuf>,
}

#[derive(Debug, Args)]
struct InfoArgs {
    /// Checkpoint: a Hugging Face folder or a .gguf file (or a folder holding one).
    #[arg(long)]
    model: PathBuf,
    /// Report only this attention pattern (see `forward --attention`).
    #[arg(long)]
    attention: Option<AttentionPattern>,
    /// Context length of the KV-cache report.
    #[arg(long, default_value_t = KV_REPORT_CONTEXT)]
    context: usize,
}

#[derive(Debug, Args)]
struct CommonArgs {
    #[command(flatten)]
    files: TextArgs,
    /// Device to run on.
    #[arg(long, value_enum, default_value_t = DeviceArg::Auto)]
    device: DeviceArg,
    /// Weight and activation dtype (default: a GGUF file stays quantized with f32
    /// activations; other checkpoints f32 on CPU, bf16 on CUDA). A GGUF file is dequantized
    /// to the dtype given (`f32`: the parity mode).
    #[arg(long, value_enum)]
    dtype: Option<DtypeArg>,
    /// Self-attention pattern, overriding config.json's `capstan_attention`: `full`,
    /// `zebra:every=4,window=512`, `selfextend:group=4,window=64`, `scca:flow,chunk=1024`
    /// (`groups=M`, default 4), `scca:fixed,chunk=N`, `scca:sda,dilation=D`,
    /// `scca:mixed,chunk=N`.
    #[arg(long)]
    attention: Option<AttentionPattern>,
    /// Element type of the self-attention KV cache: `f16` (half the bytes a decoding step
    /// reads; the default for a GGUF file's quantized model on the CPU) or the activations'
    /// dtype (the default otherwise: exact).
    #[arg(long, value_enum)]
    kv_cache: Option<DtypeArg>,
}

#[derive(Debug, Args)]
struct GenerateArgs {
    #[command(flatten)]
    common: CommonArgs,
    /// Number of new tokens (exactly this many unless a stop matches).
    #[arg(long)]
    max_new_tokens: usize,
    /// Stop at this token id (an integer) or text (needs tokenizer.json); repeatable.
    #[arg(long)]
    stop: Vec<String>,
}

#[derive(Debug, Deserialize)]
struct Input {
    input_ids: Vec<Vec<u32>>,
    #[serde(default)]
    encoder_input_ids: Vec<Vec<u32>>,
    #[serde(default)]
    encoder_pad_token_id: Option<u32>,
}

struct Loaded {
    ckpt: Checkpoint,
    model: capstan_reader::Llama,
    input: Input,
    prompt: Vec<u32>,
    pad: u32,
}

fn load(args: &CommonArgs) -> anyhow::Result<Loaded> {
    let input: Input = read_input(&args.files.input)?;
    let prompt = match input.input_ids.as_slice() {
        [row] => row.clone(),
        rows => bail!(
            "input_ids must hold exactly one row (batch 1), got {}",
            rows.len()
        ),
    };
    let dev = args.device.device()?;
    let ckpt = Checkpoint::open(&args.files.model)?;
    let dtype = args.dtype.map(DtypeArg::dtype);
    let mut model = ckpt.load_model(&dev, dtype)?;
    if let Some(p) = args.attention {
        model.set_attention(p)?;
    }
    if let Some(kv) = args.kv_cache {
        model.set_kv_dtype(kv.dtype()).context("--kv-cache")?;
    }
    let pad = input
        .encoder_pad_token_id
        .or(ckpt.generation_config().pad_token_id)
        .or(ckpt.config().pad_token_id)
        .or(ckpt.eos_token_ids().first().copied())
        .unwrap_or(0);
    Ok(Loaded {
        ckpt,
        model,
        input,
        prompt,
        pad,
    })
}

fn write(out: &Option<PathBuf>, value: &impl serde::Serialize) -> anyhow::Result<()> {
    let text = serde_json::to_string(value)?;
    match out {
        Some(path) => {
            std::fs::write(path, text).with_context(|| format!("cannot write {}", path.display()))
        }
        None => {
            use std::io::Write;
            let mut stdout = std::io::stdout().lock();
            match writeln!(stdout, "{text}") {
                // A closed pipe (`| head`) is the reader's choice, not a failure.
                Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
                other => other.context("cannot write to stdout"),
            }
        }
    }
}

fn forward(args: &CommonArgs) -> anyhow::Result<()> {
    let l = load(args)?;
    let mut cache = Cache::new(&l.model);
    if !l.input.encoder_input_ids.is_empty() {
        let rows = std::slice::from_ref(&l.input.encoder_input_ids);
        l.model.set_encoder_context(rows, l.pad, &mut cache)?;
    }
    let ids = Tensor::new(l.prompt.as_slice(), l.model.device())?.unsqueeze(0)?;
    let logits = l.model.forward(&ids, None, &mut cache)?;
    let logits = logits.squeeze(0)?.to_vec2::<f32>()?;
    // Serialised from f32 (shortest round-trip form), not widened to f64.
    #[derive(serde::Serialize)]
    struct Out {
        logits: Vec<Vec<f32>>,
    }
    write(&args.files.out, &Out { logits })
}

fn generate(args: &GenerateArgs) -> anyhow::Result<()> {
    let l = load(&args.common)?;
    let mut params = GenerationParams::greedy(args.max_new_tokens);
    for s in &args.stop {
        match s.parse::<u32>() {
            Ok(id) => params.stop_token_ids.push(id),
            Err(_) => params.stop_strings.push(s.clone()),
        }
    }
    let request = Request {
        prompt: l.prompt.clone(),
        encoder_chunks: l.input.encoder_input_ids.clone(),
    };
    let out = Generator::new(&l.model, l.ckpt.tokenizer(), l.pad).generate(&request, &params)?;
    eprintln!(
        "{} new tokens, time to first token {:.1} ms, {:.1} tokens/s, stop: {:?}",
        out.tokens.len(),
        out.time_to_first_token.as_secs_f64() * 1e3,
        out.tokens_per_second(),
        out.stop_reason
    );
    let mut value = serde_json::json!({ "tokens": out.tokens });
    if let Some(text) = out.text {
        value["text"] = text.into();
    }
    write(&args.common.files.out, &value)
}

fn info(args: &InfoArgs) -> anyhow::Result<()> {
    let ckpt = Checkpoint::open(&args.model)?;
    let cfg = ckpt.config();
    // Parameters from the weight files' shapes, without loading the model.
    let params = ckpt.parameter_count()?;
    let dtype = match ckpt.gguf() {
        // The KV cache of a quantized model on the CPU holds f16 (`Llama::kv_dtype`).
        Some(_) => "float16",
        None => cfg.torch_dtype.as_deref().unwrap_or("float32"),
    };
    let bytes = match dtype {
        "float32" => 4,
        "float64" => 8,
        _ => 2,
    };
    println!("model        {}", args.model.display());
    println!(
        "architecture {}",
        cfg.architectures
            .first()
            .map_or("LlamaForCausalLM", String::as_str)
    );
    println!("layers       {}", cfg.num_hidden_layers);
    println!("heads        {}", cfg.num_attention_heads);
    println!("kv heads     {}", cfg.kv_heads());
    println!("head dim     {}", cfg.head_size());
    println!("hidden       {}", cfg.hidden_size);
    println!("dtype        {dtype}");
    println!("parameters   {params}");
    println!("rope theta   {}", cfg.rope_base());
    println!("context      {}", cfg.max_position_embeddings);
    if let Some(g) = ckpt.gguf() {
        let size = std::fs::metadata(g.path()).map(|m| m.len()).unwrap_or(0);
        println!(
            "gguf         {} tensors, {:.1} MB, architecture {:?}",
            g.tensor_count(),
            size as f64 / 1e6,
            g.arch()
        );
        for (dtype, n, bytes) in g.tensor_types() {
            println!(
                "  {:<10} {:>12} weights {:>10.1} MB",
                format!("{dtype:?}"),
                n,
                bytes as f64 / 1e6
            );
        }
    }
    println!(
        "chat template {}",
        ckpt.chat_template()
            .map_or_else(|| "none".to_string(), |t| t.origin.clone())
    );
    println!(
        "attention    {} (config.json)",
        cfg.capstan_attention.as_deref().unwrap_or("full")
    );
    let patterns: Vec<AttentionPattern> = match args.attention {
        Some(p) => vec![p],
        None => [
            "full",
            "zebra:every=4,window=512",
            "selfextend:group=4,window=64",
            "scca:fixed,chunk=1024",
            "scca:flow,chunk=1024",
        ]
        .iter()
        .map(|s| s.parse())
        .collect::<Result<_, _>>()?,
    };
    println!(
        "KV-cache bytes per token at {} context ({dtype}):",
        args.context
    );
    for p in patterns {
        match p.validate(cfg) {
            Ok(()) => {
                let per_token = p.kv_bytes_per_token(cfg, args.context, bytes);
                println!("  {:<34} {:>12.1}", p.to_string(), per_token);
            }
            // A pattern asked for by name must fit; the default list reports what does not.
            Err(e) if args.attention.is_none() => println!("  {:<34} n/a: {e}", p.to_string()),
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

fn read_input<T: serde::de::DeserializeOwned>(path: &PathBuf) -> anyhow::Result<T> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    serde_json::from_str(&text).with_context(|| format!("malformed input {}", path.display()))
}

fn tokenize(args: &TextArgs) -> anyhow::Result<()> {
    #[derive(Deserialize)]
    struct In {
        texts: Vec<String>,
    }
    let input: In = read_input(&args.input)?;
    let ckpt = Checkpoint::open(&args.model)?;
    let tok = ckpt.tokenizer().ok_or(capstan_reader::Error::NoTokenizer)?;
    let ids = input
        .texts
        .iter()
        .enumerate()
        .map(|(i, t)| {
            tok.encode(t.as_str(), false)
                .map(|e| e.get_ids().to_vec())
                .map_err(|e| anyhow::anyhow!("{}: texts[{i}]: {e}", args.input.display()))
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    write(&args.out, &serde_json::json!({ "ids": ids }))
}

fn chat_template(args: &TextArgs) -> anyhow::Result<()> {
    #[derive(Deserialize)]
    struct In {
        conversations: Vec<Vec<ChatMessage>>,
    }
    let input: In = read_input(&args.input)?;
    let ckpt = Checkpoint::open(&args.model)?;
    let src = ckpt.chat_template().ok_or_else(|| {
        anyhow::anyhow!(
            "{}: the checkpoint has no chat template",
            args.model.display()
        )
    })?;
    let template = ChatTemplate::new(&src.template, &src.bos_token, &src.eos_token)
        .with_context(|| format!("compiling the chat template of {}", src.origin))?;
    let rendered = input
        .conversations
        .iter()
        .enumerate()
        .map(|(i, c)| {
            template.render(c, true).with_context(|| {
                format!(
                    "{}: conversations[{i}]: rendering {}",
                    args.input.display(),
                    src.origin
                )
            })
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    write(&args.out, &serde_json::json!({ "rendered": rendered }))
}

/// Runs `capstan model`.
pub fn run(args: ModelArgs) -> anyhow::Result<()> {
    match &args.command {
        ModelCommand::Forward(common) => forward(common),
        ModelCommand::Generate(gen) => generate(gen),
        ModelCommand::Info(info_args) => info(info_args),
        ModelCommand::Tokenize(t) => tokenize(t),
        ModelCommand::ChatTemplate(t) => chat_template(t),
    }
}
