//! `capstan serve`: the HTTP API over an index.

use std::path::PathBuf;
use std::sync::Arc;

use clap::Args;

use super::pipeline_args::{build, Command, PipelineArgs};
use crate::server::{parse_addr, AppState, Limits, Metrics, Timeouts};
use capstan_engine::workers::{Engine, EngineSettings};

/// Arguments of `capstan serve`.
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// The index folder.
    #[arg(long)]
    index: PathBuf,
    /// Listen address [default: 127.0.0.1:8080].
    #[arg(long, env = "CAPSTAN_ADDR")]
    addr: Option<String>,
    /// Require `Authorization: Bearer KEY` on every route but /health.
    #[arg(long, env = "CAPSTAN_API_KEY", hide_env_values = true)]
    api_key: Option<String>,
    /// Workers for retrieval and extractive answers [default: CPU count]; embeddings have
    /// half as many (at least one) in a queue of their own.
    #[arg(long, env = "CAPSTAN_WORKERS")]
    workers: Option<usize>,
    /// Requests that may wait for a worker before new ones get 503 [default: 256].
    #[arg(long, env = "CAPSTAN_QUEUE")]
    queue: Option<usize>,
    /// Generative requests in flight (retrieving, or decoding in the scheduler's batch); more
    /// wait in a queue of 4x this size, then get 503 [default: --max-batch].
    #[arg(long, env = "CAPSTAN_MAX_GENERATIONS")]
    max_generations: Option<usize>,
    /// Largest request body in bytes [default: 65536].
    #[arg(long, env = "CAPSTAN_MAX_BODY_BYTES")]
    max_body_bytes: Option<usize>,
    /// Longest question in characters [default: 2000].
    #[arg(long, env = "CAPSTAN_MAX_QUESTION_CHARS")]
    max_question_chars: Option<usize>,
    /// Largest k a request may ask [default: 100].
    #[arg(long, env = "CAPSTAN_MAX_K")]
    max_k: Option<usize>,
    /// Seconds a connection may take to send a request's headers, counted from when it is
    /// ready for the next request, so idle keep-alive connections close too [default: 30].
    #[arg(long, env = "CAPSTAN_HEADER_TIMEOUT", value_parser = seconds)]
    header_timeout: Option<f64>,
    /// Seconds a request may take to send its body; slower ones get 408 and the
    /// connection is closed [default: 30].
    #[arg(long, env = "CAPSTAN_BODY_TIMEOUT", value_parser = seconds)]
    body_timeout: Option<f64>,
    /// Seconds a request may wait in a queue; one still waiting then is answered 503
    /// without running [default: 30].
    #[arg(long, env = "CAPSTAN_QUEUE_TIMEOUT", value_parser = seconds)]
    queue_timeout: Option<f64>,
    #[command(flatten)]
    pipeline: PipelineArgs,
}

/// Runs `capstan serve`.
pub fn run(args: ServeArgs) -> anyhow::Result<()> {
    // 5xx causes and caught panics are logged to stderr, with their request ids.
    let _ = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_target(false)
        .try_init();
    let (pipeline, defaults, file) = build(&args.index, &args.pipeline, Command::Serve)?;
    pipeline.retriever().store().warm()?;
    let s = &file.server;
    let cpus = std::thread::available_parallelism().map_or(2, |n| n.get());
    let generations = args
        .max_generations
        .or(s.max_generations)
        .or(args.pipeline.scheduling.max_batch)
        .unwrap_or(capstan_engine::SchedulerSettings::default().max_batch)
        .max(1);
    let workers = args.workers.or(s.workers).unwrap_or(cpus).max(1);
    let queue = args.queue.or(s.queue).unwrap_or(256);
    let settings = EngineSettings {
        workers,
        queue,
        // Embeddings get half the workers (at least one) and a queue of their own.
        embed_workers: (workers / 2).max(1),
        embed_queue: queue,
        generations,
        generation_queue: 4 * generations,
        queue_deadline: duration(
            "queue_timeout",
            args.queue_timeout.or(s.queue_timeout).unwrap_or(30.0),
        )?,
    };
    let timeouts = Timeouts {
        header: duration(
            "header_timeout",
            args.header_timeout.or(s.header_timeout).unwrap_or(30.0),
        )?,
        body: duration(
            "body_timeout",
            args.body_timeout.or(s.body_timeout).unwrap_or(30.0),
        )?,
    };
    let limits = Limits {
        max_body_bytes: args.max_body_bytes.or(s.max_body_bytes).unwrap_or(65536),
        max_question_chars: args
            .max_question_chars
            .or(s.max_question_chars)
            .unwrap_or(2000),
        max_k: args
            .max_k
            .or(s.max_k)
            .unwrap_or(100)
            .min(capstan_retriever::MAX_K),
        max_embedding_inputs: 256,
    };
    let addr = parse_addr(
        &args
            .addr
            .clone()
            .or(s.addr.clone())
            .unwrap_or_else(|| "127.0.0.1:8080".into()),
    )?;
    let api_key = args.api_key.clone().or(s.api_key.clone());
    if api_key.as_deref().is_some_and(|k| k.trim().is_empty()) {
        // Fail closed: an empty key would otherwise mean "no key", serving every route to
        // anyone, and a blank one a key nobody can send.
        anyhow::bail!(
            "the API key is empty or blank (--api-key, CAPSTAN_API_KEY or [server] api_key in \
             capstan.toml): give a real key, or leave it unset to serve without one"
        );
    }
    let state = Arc::new(AppState {
        engine: Engine::start(pipeline, settings),
        metrics: Metrics::default(),
        limits,
        api_key,
        defaults: defaults.request,
        started: std::time::SystemTime::now(),
        timeouts,
    });
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    runtime.block_on(crate::server::serve(addr, state, timeouts))
}

/// A positive, finite number of seconds (the flag parser).
fn seconds(text: &str) -> Result<f64, String> {
    match text.trim().parse::<f64>() {
        Ok(s) if s.is_finite() && s > 0.0 => Ok(s),
        _ => Err(format!("`{text}` is not a positive number of seconds")),
    }
}

/// The same check for values from capstan.toml.
fn duration(name: &str, secs: f64) -> anyhow::Result<std::time::Duration> {
    seconds(&secs.to_string())
        .map(std::time::Duration::from_secs_f64)
        .map_err(|e| anyhow::anyhow!("[server] {name}: {e}"))
}
