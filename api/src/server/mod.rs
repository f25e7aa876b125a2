//! The HTTP API (axum): QA, search, embeddings and OpenAI-compatible chat
//! over one index, with limits, an optional API key, metrics and a web page.
//! Handlers only validate and translate; model work goes through the
//! [`Engine`](capstan_engine::workers::Engine)'s queues.

mod chat;
mod embeddings;
mod error;
mod meta;
mod metrics;
mod qa;
mod search;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{MatchedPath, Query, Request, State};
use axum::http::StatusCode;
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use futures_util::FutureExt;
use serde::de::DeserializeOwned;

pub use error::ApiError;
pub use metrics::Metrics;

use capstan_engine::pipeline::QaRequest;
use capstan_engine::workers::Engine;

/// Limits on what a request may ask.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Largest body in bytes.
    pub max_body_bytes: usize,
    /// Longest question in characters.
    pub max_question_chars: usize,
    /// Largest k.
    pub max_k: usize,
    /// Most texts in one embeddings request.
    pub max_embedding_inputs: usize,
}

/// State shared by the handlers.
pub struct AppState {
    /// The worker pools.
    pub engine: Engine,
    /// Metrics registry.
    pub metrics: Metrics,
    /// Request limits.
    pub limits: Limits,
    /// Bearer token required on every route but /health.
    pub api_key: Option<String>,
    /// Defaults of a QA request.
    pub defaults: QaRequest,
    /// Server start, for uptime and `created` fields.
    pub started: std::time::SystemTime,
}

/// The router with every route and middleware.
pub fn router(state: Arc<AppState>) -> Router {
    Router::new()
        .route("/", get(meta::ui))
        .route("/health", get(meta::health))
        .route("/metrics", get(meta::metrics))
        .route("/openapi.json", get(meta::openapi))
        .route("/v1/models", get(meta::models))
        .route("/v1/models/{model}", get(meta::model))
        .route("/v1/qa", post(qa::qa))
        .route("/v1/search", post(search::search))
        .route("/v1/embeddings", post(embeddings::embeddings))
        .route("/v1/chat/completions", post(chat::completions))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(middleware::from_fn_with_state(state.clone(), authorize))
        .layer(middleware::from_fn_with_state(state.clone(), observe))
        .layer(axum::extract::DefaultBodyLimit::max(
            state.limits.max_body_bytes,
        ))
        .with_state(state)
}

/// Seconds the requests in flight get to finish after SIGINT or SIGTERM
/// (`CAPSTAN_SHUTDOWN_GRACE`, default 30): a client that never finishes
/// sending its request must not keep the process alive.
fn shutdown_grace() -> std::time::Duration {
    let secs = std::env::var("CAPSTAN_SHUTDOWN_GRACE")
        .ok()
        .and_then(|v| v.trim().parse::<f64>().ok())
        .filter(|s| s.is_finite() && *s >= 0.0)
        .unwrap_or(30.0);
    std::time::Duration::from_secs_f64(secs)
}

/// Serves until SIGINT or SIGTERM, then finishes the requests in flight
/// (for at most the grace period).
pub async fn serve(addr: SocketAddr, state: Arc<AppState>) -> anyhow::Result<()> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    eprintln!("capstan: listening on http://{}", listener.local_addr()?);
    let grace = shutdown_grace();
    let (stopping, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = axum::serve(listener, router(state)).with_graceful_shutdown(async move {
        shutdown_signal().await;
        let _ = stopping.send(());
    });
    let deadline = async move {
        if stopped.await.is_ok() {
            tokio::time::sleep(grace).await;
        } else {
            std::future::pending::<()>().await;
        }
    };
    tokio::select! {
        served = std::future::IntoFuture::into_future(server) => served?,
        () = deadline => {
            eprintln!("capstan: requests still in flight after {grace:?}; stopping anyway");
        }
    }
    eprintln!("capstan: stopped");
    Ok(())
}

async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        if let Ok(mut s) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        {
            s.recv().await;
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {},
        _ = term => {},
    }
    eprintln!("capstan: shutting down, finishing requests in flight");
}

async fn not_found(req: Request) -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        "not_found",
        format!("no route {} {}", req.method(), req.uri().path()),
    )
}

async fn method_not_allowed(req: Request) -> ApiError {
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
        format!("{} is not allowed on {}", req.method(), req.uri().path()),
    )
}

/// The one route served without the API key: liveness.
const PUBLIC: &str = "/health";

/// The web page: a browser opening it cannot send a header, so the page
/// also takes the key as `?key=` (and passes it on as a Bearer header).
const PAGE: &str = "/";

async fn authorize(State(state): State<Arc<AppState>>, req: Request, next: Next) -> Response {
    if let Some(key) = &state.api_key {
        let path = req.uri().path();
        if path != PUBLIC {
            let header = req
                .headers()
                .get(axum::http::header::AUTHORIZATION)
                .and_then(|v| v.to_str().ok())
                .and_then(bearer_token)
                .map(str::to_string);
            let given = header.or_else(|| {
                (path == PAGE)
                    .then(|| Query::<HashMap<String, String>>::try_from_uri(req.uri()).ok())
                    .flatten()
                    .and_then(|q| q.0.get("key").cloned())
            });
            if !given
                .as_deref()
                .is_some_and(|g| constant_time_eq(g.as_bytes(), key.as_bytes()))
            {
                let msg = match (&given, path == PAGE) {
                    (None, true) => "missing API key (open the page as /?key=KEY)",
                    (None, false) => "missing API key (Authorization: Bearer ...)",
                    (Some(_), _) => "wrong API key",
                };
                return ApiError::new(StatusCode::UNAUTHORIZED, "authentication_error", msg)
                    .into_response();
            }
        }
    }
    next.run(req).await
}

/// The token of an `Authorization: Bearer TOKEN` header (the scheme is case-insensitive).
fn bearer_token(value: &str) -> Option<&str> {
    let (scheme, token) = value.split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Response header carrying the request id (also in 5xx bodies and the log).
pub const REQUEST_ID: &str = "x-request-id";

/// A process-unique request id: the start time and a counter, in hex.
fn request_id() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    static EPOCH: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    let epoch = *EPOCH.get_or_init(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs())
    });
    format!("{epoch:x}-{:x}", NEXT.fetch_add(1, Ordering::Relaxed))
}

/// Times and counts every request, gives it an id, and turns every 5xx into a log line with
/// that id and its cause; the client gets the id, not the cause.
async fn observe(State(state): State<Arc<AppState>>, req: Request, next: Next) -> Response {
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| "unmatched".to_string(), |p| p.as_str().to_string());
    let id = request_id();
    let start = Instant::now();
    // A panicking handler still answers, in the API's error format.
    let mut resp = match AssertUnwindSafe(next.run(req)).catch_unwind().await {
        Ok(resp) => resp,
        Err(panic) => ApiError::internal(format!(
            "handler panicked: {}",
            capstan_engine::error::panic_message(panic.as_ref())
        ))
        .into_response(),
    };
    if resp.status().is_server_error() {
        let detail = resp.extensions().get::<error::InternalDetail>().cloned();
        tracing::error!(
            request_id = %id,
            route = %route,
            status = resp.status().as_u16(),
            "{}",
            detail.as_ref().map_or("(no detail)", |d| d.0.as_str())
        );
        if detail.is_some() {
            let status = resp.status();
            resp = ApiError::new(
                status,
                "server_error",
                format!("internal server error (request id {id}; the server log has the cause)"),
            )
            .into_response();
        }
    }
    if let Ok(v) = axum::http::HeaderValue::from_str(&id) {
        resp.headers_mut().insert(REQUEST_ID, v);
    }
    state.metrics.request(
        &route,
        resp.status().as_u16(),
        start.elapsed().as_secs_f64(),
    );
    resp
}

/// Parses a JSON body, turning every failure into a 4xx that says what is wrong.
pub fn parse_json<T: DeserializeOwned>(body: Result<Bytes, BytesRejection>) -> Result<T, ApiError> {
    let bytes = body.map_err(|rejection| {
        let status = rejection.status();
        let kind = if status == StatusCode::PAYLOAD_TOO_LARGE {
            "request_too_large"
        } else {
            "invalid_request_error"
        };
        ApiError::new(status, kind, rejection.body_text())
    })?;
    serde_json::from_slice(&bytes)
        .map_err(|e| ApiError::invalid(format!("malformed request body: {e}")))
}

/// Validates a question against the limits.
pub fn check_question(question: &str, limits: &Limits) -> Result<(), ApiError> {
    if question.trim().is_empty() {
        return Err(ApiError::invalid("`question` is empty"));
    }
    let n = question.chars().count();
    if n > limits.max_question_chars {
        return Err(ApiError::invalid(format!(
            "`question` has {n} characters; the limit is {}",
            limits.max_question_chars
        )));
    }
    Ok(())
}

/// Validates k against the limits.
pub fn check_k(k: usize, limits: &Limits) -> Result<(), ApiError> {
    if k == 0 || k > limits.max_k {
        return Err(ApiError::invalid(format!(
            "`k` must be within 1..={}, got {k}",
            limits.max_k
        )));
    }
    Ok(())
}

/// Runs `addr` resolution for the CLI.
pub fn parse_addr(addr: &str) -> anyhow::Result<SocketAddr> {
    use std::net::ToSocketAddrs;
    addr.to_socket_addrs()?
        .next()
        .ok_or_else(|| anyhow::anyhow!("--addr {addr} resolves to no address"))
}

/// Waits for a worker's reply, recording stage timings of QA answers.
pub async fn await_reply<T>(rx: capstan_engine::workers::Pending<T>) -> Result<T, ApiError> {
    match rx.await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(e.into()),
        Err(_) => Err(ApiError::internal("the worker stopped before answering")),
    }
}
