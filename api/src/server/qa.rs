//! `POST /v1/qa`: an answer with citations, passages, usage and timings; with
//! `"stream": true`, server-sent events (`token` pieces, then `answer`).

use std::convert::Infallible;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::Json;
use capstan_retriever::Mode;
use futures_util::stream::{self, Stream};
use serde::Deserialize;
use serde_json::json;
use tokio::sync::mpsc;

use super::{await_reply, check_k, check_question, parse_json, ApiError, AppState};
use capstan_engine::context::{AnswerMode, ContextMode};
use capstan_engine::pipeline::{Answer, QaRequest, ReaderKind, Rewrite, Role, Turn};

/// The request body.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QaBody {
    question: String,
    k: Option<usize>,
    mode: Option<Mode>,
    reader: Option<ReaderKind>,
    stream: Option<bool>,
    max_tokens: Option<usize>,
    temperature: Option<f64>,
    top_p: Option<f64>,
    top_k: Option<usize>,
    lost_in_the_middle: Option<bool>,
    query_aware: Option<bool>,
    decoder_passages: Option<usize>,
    /// `span` (copied from the passages) or `free` (generative readers).
    answer: Option<AnswerMode>,
    /// `passages` or `sentences:N` (the Llama reader).
    context: Option<ContextMode>,
    /// `{"field": value, ...}`: only documents whose metadata has every field equal.
    filter: Option<capstan_retriever::Filter>,
    /// The conversation so far, oldest first: `[{"role": "user"|"assistant", "content": …}]`.
    history: Option<Vec<HistoryTurn>>,
    /// How a follow-up is made to stand alone for retrieval: `rules` or `model`.
    rewrite: Option<Rewrite>,
    /// Strings that end the answer (at most 4).
    stop: Option<Stop>,
    /// Seed of the sampler (`temperature` > 0).
    seed: Option<u64>,
}

/// A turn of `history`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HistoryTurn {
    role: String,
    content: String,
}

/// `stop`: one string or a list, as OpenAI's API takes it.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum Stop {
    /// One stop string.
    One(String),
    /// Up to four.
    Many(Vec<String>),
}

/// Most turns a conversation may carry (the reader sees the last few).
pub const MAX_HISTORY_TURNS: usize = 64;

/// The roles a turn may have.
pub const ROLES: &str = "user, assistant, system, developer, tool or function";

/// The error for a turn whose role is none of [`ROLES`].
pub fn unknown_role(turn: usize, role: &str) -> ApiError {
    ApiError::invalid(format!("turn {turn}: `role` must be {ROLES}, got `{role}`"))
}

/// Checks a conversation's earlier turns and makes them the engine's.
pub fn history_turns(
    turns: impl IntoIterator<Item = (String, String)>,
    state: &AppState,
) -> Result<Vec<Turn>, ApiError> {
    let mut out = Vec::new();
    for (i, (role, content)) in turns.into_iter().enumerate() {
        let role = match role.as_str() {
            "user" => Role::User,
            "assistant" => Role::Assistant,
            // System and tool turns say nothing retrieval or the reader can use.
            "system" | "developer" | "tool" | "function" => continue,
            other => return Err(unknown_role(i, other)),
        };
        // An empty turn (an assistant's tool call has no content) says nothing either: read
        // as a turn, it teaches the reader to answer with nothing.
        if content.trim().is_empty() {
            continue;
        }
        if content.chars().count() > state.limits.max_question_chars * 8 {
            return Err(ApiError::invalid(format!(
                "turn {i}: `content` is longer than {} characters",
                state.limits.max_question_chars * 8
            )));
        }
        out.push(Turn { role, content });
    }
    if out.len() > MAX_HISTORY_TURNS {
        return Err(ApiError::invalid(format!(
            "the conversation has {} turns, more than {MAX_HISTORY_TURNS}",
            out.len()
        )));
    }
    Ok(out)
}

/// Applies `stop` and `seed`.
pub fn apply_stop_and_seed(
    req: &mut QaRequest,
    stop: Option<Stop>,
    seed: Option<u64>,
) -> Result<(), ApiError> {
    let stops = match stop {
        None => Vec::new(),
        Some(Stop::One(s)) => vec![s],
        Some(Stop::Many(v)) => v,
    };
    if stops.len() > 4 || stops.iter().any(String::is_empty) {
        return Err(ApiError::invalid(
            "`stop` must be a non-empty string or a list of at most 4 of them",
        ));
    }
    req.generation.stop_strings.extend(stops);
    // As OpenAI: a given seed repeats an answer, no seed samples afresh (the answer says
    // which seed it drew, so that it can be repeated).
    req.generation.seed = seed.unwrap_or_else(random_u64);
    Ok(())
}

/// A random number no earlier call drew (std's randomly keyed hasher, keyed afresh per call):
/// completion ids and the seeds of unseeded requests.
pub(super) fn random_u64() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    h.finish()
}

/// Largest `max_tokens` a request may ask for.
pub const MAX_NEW_TOKENS: usize = 1024;

/// Builds a pipeline request from a body and the server's defaults.
pub fn build_request(state: &AppState, body: QaBody) -> Result<(QaRequest, bool), ApiError> {
    check_question(&body.question, &state.limits)?;
    let mut req = state.defaults.clone();
    req.question = body.question;
    req.k = body.k.unwrap_or(req.k);
    check_k(req.k, &state.limits)?;
    req.mode = body.mode.unwrap_or(req.mode);
    if let Some(f) = body.filter {
        f.validate()
            .map_err(|e| ApiError::invalid(format!("`filter`: {e}")))?;
        req.filter = Some(f);
    }
    req.reader = body.reader.unwrap_or(req.reader);
    if !state
        .engine
        .pipeline()
        .available_readers()
        .contains(&req.reader)
    {
        return Err(capstan_engine::Error::NotLoaded(req.reader).into());
    }
    apply_sampling(&mut req, body.max_tokens, body.temperature, body.top_p)?;
    if let Some(k) = body.top_k {
        if k == 0 {
            return Err(ApiError::invalid("`top_k` must be at least 1"));
        }
        req.generation.top_k = Some(k);
    }
    req.lost_in_the_middle = body.lost_in_the_middle.unwrap_or(req.lost_in_the_middle);
    req.query_aware = body.query_aware.unwrap_or(req.query_aware);
    req.decoder_passages = body.decoder_passages.unwrap_or(req.decoder_passages);
    if let Some(a) = body.answer {
        req.answer = a;
    }
    req.context = body.context.unwrap_or(req.context);
    if let Some(history) = body.history {
        req.history = history_turns(history.into_iter().map(|t| (t.role, t.content)), state)?;
    }
    req.rewrite = body.rewrite.unwrap_or(req.rewrite);
    apply_stop_and_seed(&mut req, body.stop, body.seed)?;
    Ok((req, body.stream.unwrap_or(false)))
}

/// Applies and checks OpenAI-style sampling fields.
pub fn apply_sampling(
    req: &mut QaRequest,
    max_tokens: Option<usize>,
    temperature: Option<f64>,
    top_p: Option<f64>,
) -> Result<(), ApiError> {
    if let Some(n) = max_tokens {
        if n == 0 || n > MAX_NEW_TOKENS {
            return Err(ApiError::invalid(format!(
                "`max_tokens` must be within 1..={MAX_NEW_TOKENS}, got {n}"
            )));
        }
        req.generation.max_new_tokens = n;
    }
    if let Some(t) = temperature {
        if !(0.0..=2.0).contains(&t) {
            return Err(ApiError::invalid(format!(
                "`temperature` must be within [0, 2], got {t}"
            )));
        }
        req.generation.temperature = Some(t);
    }
    if let Some(p) = top_p {
        if !(p > 0.0 && p <= 1.0) {
            return Err(ApiError::invalid(format!(
                "`top_p` must be within (0, 1], got {p}"
            )));
        }
        req.generation.top_p = Some(p);
    }
    Ok(())
}

/// Records an answer's stage timings and tokens.
pub fn record(state: &AppState, answer: &Answer) {
    let t = answer.timings;
    state.metrics.stage("retrieve", t.retrieve_ms / 1000.0);
    state.metrics.stage("assemble", t.assemble_ms / 1000.0);
    state.metrics.stage("read", t.read_ms / 1000.0);
    state.metrics.generated(answer.usage.generated_tokens);
}

/// The handler.
pub async fn qa(
    State(state): State<Arc<AppState>>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let (req, stream) = build_request(&state, parse_json(body)?)?;
    if !stream {
        let answer = await_reply(state.engine.qa(req, None)?).await?;
        record(&state, &answer);
        return Ok(Json(answer).into_response());
    }
    let (tx, rx) = mpsc::unbounded_channel();
    let reply = state.engine.qa(req, Some(tx))?;
    Ok(Sse::new(qa_events(state, rx, reply))
        .keep_alive(KeepAlive::default())
        .into_response())
}

struct Streaming {
    state: Arc<AppState>,
    text: Option<mpsc::UnboundedReceiver<String>>,
    reply: Option<capstan_engine::workers::Pending<Answer>>,
}

fn qa_events(
    state: Arc<AppState>,
    text: mpsc::UnboundedReceiver<String>,
    reply: capstan_engine::workers::Pending<Answer>,
) -> impl Stream<Item = Result<Event, Infallible>> {
    let init = Streaming {
        state,
        text: Some(text),
        reply: Some(reply),
    };
    stream::unfold(init, |mut st| async move {
        if let Some(rx) = st.text.as_mut() {
            match rx.recv().await {
                Some(piece) => {
                    let ev = Event::default()
                        .event("token")
                        .data(json!({ "text": piece }).to_string());
                    return Some((Ok(ev), st));
                }
                None => st.text = None,
            }
        }
        let reply = st.reply.take()?;
        let ev = match await_reply(reply).await {
            Ok(answer) => {
                record(&st.state, &answer);
                Event::default()
                    .event("answer")
                    .data(serde_json::to_string(&answer).expect("answer serialises"))
            }
            Err(e) => Event::default()
                .event("error")
                .data(e.logged_body().to_string()),
        };
        Some((Ok(ev), st))
    })
}
