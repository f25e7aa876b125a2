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
    /// How long clients may take to send requests.
    pub timeouts: Timeouts,
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
        .layer(middleware::from_fn_with_state(state.clone(), read_body))
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

/// How long a client may take to send a request.
#[derive(Debug, Clone, Copy)]
pub struct Timeouts {
    /// To send a request's headers, counted from when the connection is
    /// ready for the next request: hyper starts this clock when it waits for
    /// a request head, so it also closes idle keep-alive connections.
    pub header: std::time::Duration,
    /// To send a request's body (answered 408, and the connection closed).
    pub body: std::time::Duration,
}

/// Serves until SIGINT or SIGTERM, then finishes the requests in flight
/// (for at most the grace period). Connections are served by hyper directly
/// (axum::serve has no timeouts): a client that sends nothing, or a request
/// slowly, is cut off instead of holding its connection forever.
pub async fn serve(
    addr: SocketAddr,
    state: Arc<AppState>,
    timeouts: Timeouts,
) -> anyhow::Result<()> {
    use hyper_util::rt::{TokioIo, TokioTimer};
    use hyper_util::service::TowerToHyperService;

    let listener = tokio::net::TcpListener::bind(addr).await?;
    eprintln!("capstan: listening on http://{}", listener.local_addr()?);
    let grace = shutdown_grace();
    let app = router(state);
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(timeouts.header)
        .keep_alive(true);
    let signal = shutdown_signal();
    tokio::pin!(signal);
    loop {
        let (stream, _peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(conn) => conn,
                Err(e) => {
                    // Out of file descriptors and the like: back off, keep serving.
                    tracing::warn!("accept failed: {e}");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut signal => break,
        };
        let _ = stream.set_nodelay(true);
        let service = TowerToHyperService::new(app.clone());
        let connection = http.serve_connection(TokioIo::new(stream), service);
        let connection = graceful.watch(connection);
        tokio::spawn(async move {
            // Errors here are clients' (reset, timed out, malformed): nothing to report.
            let _ = connection.await;
        });
    }
    drop(listener);
    tokio::select! {
        () = graceful.shutdown() => {}
        () = tokio::time::sleep(grace) => {
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
        // A 500's message is replaced by the request id; other 5xx (503s) say
        // what the client can do and carry no internals.
        if detail.is_some() && resp.status() == axum::http::StatusCode::INTERNAL_SERVER_ERROR {
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

/// Reads the whole request body (after the API key was checked) within the
/// body timeout: a client that announces a body and sends it slowly, or not
/// at all, is answered 408 and its connection closed instead of holding a
/// connection and a task for as long as it likes.
async fn read_body(State(state): State<Arc<AppState>>, req: Request, next: Next) -> Response {
    let (parts, body) = req.into_parts();
    let limit = state.limits.max_body_bytes;
    let timeout = state.timeouts.body;
    match tokio::time::timeout(timeout, axum::body::to_bytes(body, limit)).await {
        Ok(Ok(bytes)) => next.run(Request::from_parts(parts, bytes.into())).await,
        Ok(Err(e)) => {
            let too_large = std::error::Error::source(&e)
                .is_some_and(|s| s.to_string().contains("length limit"))
                || e.to_string().contains("length limit");
            let mut resp = if too_large {
                ApiError::new(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    "request_too_large",
                    format!("the request body is larger than {limit} bytes"),
                )
            } else {
                ApiError::invalid(format!("the request body could not be read: {e}"))
            }
            .into_response();
            close_connection(&mut resp);
            resp
        }
        Err(_) => {
            let mut resp = ApiError::new(
                StatusCode::REQUEST_TIMEOUT,
                "request_timeout",
                format!(
                    "the request body did not arrive within {} s",
                    timeout.as_secs_f64()
                ),
            )
            .into_response();
            close_connection(&mut resp);
            resp
        }
    }
}

/// Asks hyper to close the connection after this response (its request body
/// was not read to the end, so the connection cannot carry another request).
fn close_connection(resp: &mut Response) {
    resp.headers_mut().insert(
        axum::http::header::CONNECTION,
        axum::http::HeaderValue::from_static("close"),
    );
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
    // A body that is JSON but not an object (an array, a string) would be answered by serde
    // with what it expected of a field ("invalid type: map, expected a string").
    let first = bytes.iter().find(|b| !b.is_ascii_whitespace());
    if first.is_some_and(|&b| b != b'{') {
        return Err(ApiError::invalid(
            "malformed request body: it must be a JSON object (`{...}`)",
        ));
    }
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
