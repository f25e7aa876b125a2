//! `POST /v1/chat/completions`, OpenAI's format, retrieval-augmented: the
//! last user message is the question and the turns before it the
//! conversation (retrieval reads the previous user turn with a follow-up, the
//! generative reader the last few turns); the answer cites its passages in an
//! extra `citations` field (passage ids) and `sources` (their documents,
//! with page and section where known). Streaming sends `chat.completion.chunk` events
//! and `data: [DONE]`.

use std::convert::Infallible;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::response::sse::{Event, Sse};
use axum::response::{IntoResponse, Response};
use axum::Json;
use futures_util::stream::{self, Stream};
use serde::Deserialize;
use serde_json::{json, Value};
use tokio::sync::mpsc;

use super::qa::{apply_sampling, apply_stop_and_seed, history_turns, random_u64, record};
use super::{await_reply, check_question, parse_json, ApiError, AppState};
use capstan_engine::pipeline::{Answer, ReaderKind};

#[derive(Debug, Deserialize)]
struct Message {
    role: String,
    content: Option<Content>,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum Content {
    Text(String),
    Parts(Vec<Part>),
}

#[derive(Debug, Deserialize)]
struct Part {
    #[serde(rename = "type")]
    kind: String,
    text: Option<String>,
}

#[derive(Debug, Deserialize)]
pub struct ChatBody {
    model: Option<String>,
    messages: Vec<Message>,
    stream: Option<bool>,
    max_tokens: Option<usize>,
    max_completion_tokens: Option<usize>,
    temperature: Option<f64>,
    top_p: Option<f64>,
    n: Option<usize>,
    /// Not OpenAI's: named only to refuse `"span"` clearly (chat answers are free text).
    answer: Option<String>,
    /// Not OpenAI's: how the last user message is made to stand alone for retrieval.
    rewrite: Option<capstan_engine::pipeline::Rewrite>,
    stop: Option<super::qa::Stop>,
    seed: Option<u64>,
    logprobs: Option<bool>,
    top_logprobs: Option<usize>,
    presence_penalty: Option<f64>,
    frequency_penalty: Option<f64>,
    logit_bias: Option<std::collections::BTreeMap<String, f64>>,
    /// Only `{"type": "text"}`: JSON modes are refused, not ignored.
    response_format: Option<Value>,
    /// Only none: Capstan answers, it does not call tools.
    tools: Option<Vec<Value>>,
    tool_choice: Option<Value>,
    functions: Option<Vec<Value>>,
    function_call: Option<Value>,
}

/// Most `top_logprobs` OpenAI allows.
const MAX_TOP_LOGPROBS: usize = 20;

/// Applies what OpenAI's body asks of sampling beyond temperature and top-p (penalties, logit
/// biases, log-probabilities), and refuses what Capstan does not do (JSON modes, tools) rather
/// than answering as if it did.
fn apply_openai_options(
    req: &mut capstan_engine::pipeline::QaRequest,
    body: &ChatBody,
    state: &AppState,
) -> Result<(), ApiError> {
    if let Some(format) = &body.response_format {
        let kind = format.get("type").and_then(Value::as_str);
        if kind != Some("text") {
            return Err(ApiError::invalid(format!(
                "`response_format`: only {{\"type\": \"text\"}} is supported (answers are text \
                 grounded in the passages), got {format}"
            )));
        }
    }
    let tools = body.tools.as_ref().is_some_and(|t| !t.is_empty())
        || body.functions.as_ref().is_some_and(|f| !f.is_empty());
    if tools {
        return Err(ApiError::invalid(
            "`tools`: Capstan answers from its index and does not call tools",
        ));
    }
    for (name, choice) in [
        ("tool_choice", &body.tool_choice),
        ("function_call", &body.function_call),
    ] {
        if let Some(c) = choice
            .as_ref()
            .filter(|c| !matches!(c.as_str(), Some("none" | "auto")))
        {
            return Err(ApiError::invalid(format!(
                "`{name}`: no tool can be called, got {c}"
            )));
        }
    }
    let generative = state.engine.pipeline().scheduler(req.reader)?;
    let needs_generation = |field: &str| {
        ApiError::invalid(format!(
            "`{field}` needs a generative reader (model capstan-llama or capstan-cape); \
             the extractive reader does not sample"
        ))
    };
    for (field, value) in [
        ("presence_penalty", body.presence_penalty),
        ("frequency_penalty", body.frequency_penalty),
    ] {
        let Some(v) = value else { continue };
        if !(-2.0..=2.0).contains(&v) {
            return Err(ApiError::invalid(format!(
                "`{field}` must be within [-2, 2], got {v}"
            )));
        }
        if v != 0.0 && generative.is_none() {
            return Err(needs_generation(field));
        }
    }
    req.generation.presence_penalty = body.presence_penalty.unwrap_or(0.0) as f32;
    req.generation.frequency_penalty = body.frequency_penalty.unwrap_or(0.0) as f32;
    if let Some(bias) = body.logit_bias.as_ref().filter(|b| !b.is_empty()) {
        let Some(scheduler) = generative else {
            return Err(needs_generation("logit_bias"));
        };
        let vocab = scheduler.model().model().config().vocab_size;
        for (key, &v) in bias {
            let token = key
                .parse::<u32>()
                .ok()
                .filter(|&t| (t as usize) < vocab)
                .ok_or_else(|| {
                    ApiError::invalid(format!(
                        "`logit_bias`: `{key}` is not a token id of the model (0..{vocab})"
                    ))
                })?;
            if !(-100.0..=100.0).contains(&v) {
                return Err(ApiError::invalid(format!(
                    "`logit_bias` of {key} must be within [-100, 100], got {v}"
                )));
            }
            req.generation.logit_bias.push((token, v as f32));
        }
    }
    match (body.logprobs.unwrap_or(false), body.top_logprobs) {
        (false, Some(n)) if n > 0 => {
            return Err(ApiError::invalid("`top_logprobs` needs `logprobs: true`"))
        }
        (_, Some(n)) if n > MAX_TOP_LOGPROBS => {
            return Err(ApiError::invalid(format!(
                "`top_logprobs` must be within 0..={MAX_TOP_LOGPROBS}, got {n}"
            )))
        }
        (true, n) => {
            if generative.is_none() {
                return Err(needs_generation("logprobs"));
            }
            req.generation.logprobs = Some(n.unwrap_or(0));
        }
        _ => {}
    }
    Ok(())
}

/// Reader behind a model id: `capstan` or `capstan-extractive`, `capstan-llama`, `capstan-cape`.
pub fn reader_of(model: &str) -> Option<ReaderKind> {
    match model {
        "capstan" => None,
        m => m.strip_prefix("capstan-")?.parse().ok(),
    }
}

fn text_of(content: &Content) -> String {
    match content {
        Content::Text(s) => s.clone(),
        Content::Parts(parts) => parts
            .iter()
            .filter(|p| p.kind == "text")
            .filter_map(|p| p.text.clone())
            .collect::<Vec<_>>()
            .join("\n"),
    }
}

/// The handler.
pub async fn completions(
    State(state): State<Arc<AppState>>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let body: ChatBody = parse_json(body)?;
    if body.n.is_some_and(|n| n != 1) {
        return Err(ApiError::invalid("`n` must be 1"));
    }
    if let Some(a) = body.answer.as_deref().filter(|a| *a != "free") {
        return Err(ApiError::invalid(format!(
            "`answer`: chat completions answer in free text only, got `{a}`; \
             POST /v1/qa answers with a span of the passages"
        )));
    }
    // Every turn's role is checked, the turns after the last user turn too.
    let known = [
        "user",
        "assistant",
        "system",
        "developer",
        "tool",
        "function",
    ];
    if let Some((i, m)) = body
        .messages
        .iter()
        .enumerate()
        .find(|(_, m)| !known.contains(&m.role.as_str()))
    {
        return Err(super::qa::unknown_role(i, &m.role));
    }
    let last = body
        .messages
        .iter()
        .rposition(|m| m.role == "user")
        .ok_or_else(|| ApiError::invalid("`messages` holds no user message"))?;
    let question = body.messages[last]
        .content
        .as_ref()
        .map(text_of)
        .unwrap_or_default();
    check_question(&question, &state.limits)?;
    let history = history_turns(
        body.messages[..last].iter().map(|m| {
            (
                m.role.clone(),
                m.content.as_ref().map(text_of).unwrap_or_default(),
            )
        }),
        &state,
    )?;
    let mut req = state.defaults.clone();
    req.question = question;
    req.history = history;
    req.rewrite = body.rewrite.unwrap_or(req.rewrite);
    req.answer = capstan_engine::context::AnswerMode::Free;
    req.short_free_answer = false;
    let model = body
        .model
        .clone()
        .unwrap_or_else(|| format!("capstan-{}", req.reader.name()));
    match reader_of(&model) {
        Some(r) if state.engine.pipeline().available_readers().contains(&r) => req.reader = r,
        None if model == "capstan" => {}
        _ => {
            return Err(ApiError::model_not_found(format!(
                "model `{model}` does not exist or is not loaded (see GET /v1/models)"
            )))
        }
    }
    apply_sampling(
        &mut req,
        body.max_completion_tokens.or(body.max_tokens),
        body.temperature,
        body.top_p,
    )?;
    apply_openai_options(&mut req, &body, &state)?;
    apply_stop_and_seed(&mut req, body.stop, body.seed)?;
    let id = format!("chatcmpl-{:016x}", random_u64());
    let created = unix_now();
    if !body.stream.unwrap_or(false) {
        let answer = await_reply(state.engine.qa(req, None)?).await?;
        record(&state, &answer);
        return Ok(Json(completion(&id, created, &model, &answer)).into_response());
    }
    let (tx, rx) = mpsc::unbounded_channel();
    let reply = state.engine.qa(req, Some(tx))?;
    Ok(Sse::new(chunks(state, id, created, model, rx, reply)).into_response())
}

fn usage(answer: &Answer) -> Value {
    let prompt = answer.usage.decoder_tokens + answer.usage.encoder_tokens;
    json!({
        "prompt_tokens": prompt,
        "completion_tokens": answer.usage.generated_tokens,
        "total_tokens": prompt + answer.usage.generated_tokens,
    })
}

fn completion(id: &str, created: u64, model: &str, answer: &Answer) -> Value {
    json!({
        "id": id,
        "object": "chat.completion",
        "created": created,
        "model": model,
        "choices": [{
            "index": 0,
            "message": {"role": "assistant", "content": answer.answer},
            "finish_reason": finish_reason(answer),
            "logprobs": logprobs(answer),
        }],
        "usage": usage(answer),
        "citations": answer.citations,
        "sources": sources(answer),
        "seed": answer.seed,
    })
}

/// OpenAI's `logprobs` of a choice: `null` unless they were asked for.
fn logprobs(answer: &Answer) -> Value {
    match &answer.logprobs {
        Some(tokens) => json!({ "content": tokens }),
        None => Value::Null,
    }
}

/// OpenAI's finish reason: `length` when `max_tokens` cut the answer,
/// `stop` when it ended (an end token, a stop string, the extractive reader).
fn finish_reason(answer: &Answer) -> &'static str {
    match answer.finish_reason.as_deref() {
        Some("length") => "length",
        _ => "stop",
    }
}

/// The cited passages' documents, with page and section where known: what
/// a client shows as "handbook.pdf, p. 12".
fn sources(answer: &Answer) -> Value {
    let cited = answer.citations.iter().filter_map(|id| {
        let hit = answer.passages.iter().find(|h| &h.passage_id == id)?;
        let mut source = json!({
            "passage_id": hit.passage_id,
            "doc_id": hit.doc_id,
            "title": hit.title,
        });
        if let Some(p) = hit.location.page_start {
            source["page_start"] = json!(p);
            source["page_end"] = json!(hit.location.page_end.unwrap_or(p));
        }
        if let Some(s) = &hit.location.section {
            source["section"] = json!(s);
        }
        Some(source)
    });
    Value::Array(cited.collect())
}

fn chunk(id: &str, created: u64, model: &str, delta: Value, finish: Option<&str>) -> Event {
    Event::default().data(
        json!({
            "id": id,
            "object": "chat.completion.chunk",
            "created": created,
            "model": model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": null}],
        })
        .to_string(),
    )
}

enum Phase {
    Role,
    Text,
    Final,
    Done,
    End,
}

struct Streaming {
    state: Arc<AppState>,
    id: String,
    created: u64,
    model: String,
    phase: Phase,
    text: mpsc::UnboundedReceiver<String>,
    reply: Option<capstan_engine::workers::Pending<Answer>>,
}

fn chunks(
    state: Arc<AppState>,
    id: String,
    created: u64,
    model: String,
    text: mpsc::UnboundedReceiver<String>,
    reply: capstan_engine::workers::Pending<Answer>,
) -> impl Stream<Item = Result<Event, Infallible>> {
    let init = Streaming {
        state,
        id,
        created,
        model,
        phase: Phase::Role,
        text,
        reply: Some(reply),
    };
    stream::unfold(init, |mut st| async move {
        loop {
            match st.phase {
                Phase::Role => {
                    st.phase = Phase::Text;
                    let ev = chunk(
                        &st.id,
                        st.created,
                        &st.model,
                        json!({"role": "assistant", "content": ""}),
                        None,
                    );
                    return Some((Ok(ev), st));
                }
                Phase::Text => match st.text.recv().await {
                    Some(piece) => {
                        let ev = chunk(
                            &st.id,
                            st.created,
                            &st.model,
                            json!({ "content": piece }),
                            None,
                        );
                        return Some((Ok(ev), st));
                    }
                    None => st.phase = Phase::Final,
                },
                Phase::Final => {
                    st.phase = Phase::Done;
                    let reply = st.reply.take()?;
                    let ev = match await_reply(reply).await {
                        Ok(answer) => {
                            record(&st.state, &answer);
                            let mut ev = json!({
                                "id": st.id,
                                "object": "chat.completion.chunk",
                                "created": st.created,
                                "model": st.model,
                                // The tokens' log-probabilities come whole with the last
                                // chunk (pieces are streamed as text, not token by token).
                                "choices": [{"index": 0, "delta": {}, "finish_reason": finish_reason(&answer), "logprobs": logprobs(&answer)}],
                                "usage": usage(&answer),
                            });
                            ev["citations"] = json!(answer.citations);
                            ev["sources"] = sources(&answer);
                            Event::default().data(ev.to_string())
                        }
                        Err(e) => Event::default().data(e.logged_body().to_string()),
                    };
                    return Some((Ok(ev), st));
                }
                Phase::Done => {
                    st.phase = Phase::End;
                    return Some((Ok(Event::default().data("[DONE]")), st));
                }
                Phase::End => return None,
            }
        }
    })
}

fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}
