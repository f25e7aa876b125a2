//! Routes about the service itself: `/`, `/health`, `/metrics`,
//! `/openapi.json`, `/v1/models`.

use std::sync::Arc;

use axum::extract::rejection::PathRejection;
use axum::extract::{Path, State};
use axum::http::header;
use axum::response::{Html, IntoResponse};
use axum::Json;
use serde_json::{json, Value};

use super::{ApiError, AppState};

/// The web page: a question box, the answer streaming in, cited passages.
pub async fn ui() -> Html<&'static str> {
    Html(include_str!("ui.html"))
}

/// Liveness and what is loaded (no API key needed). 503 when the index does
/// not answer (a Qdrant cluster that is down), so a load balancer can tell.
pub async fn health(State(state): State<Arc<AppState>>) -> axum::response::Response {
    let pipeline = state.engine.pipeline().clone();
    // A remote store's counts are a network call: off the async runtime.
    let counts = tokio::task::spawn_blocking(move || pipeline.retriever().store().counts()).await;
    let pipeline = state.engine.pipeline();
    let mut index = json!({
        // The encoder's name, not its folder: /health is public and shows no paths.
        "encoder": embedding_model_id(&state),
    });
    let ok = match counts {
        Ok(Ok(c)) => {
            index["documents"] = json!(c.documents);
            index["passages"] = json!(c.passages);
            true
        }
        Ok(Err(e)) => {
            tracing::warn!("health: the index does not answer: {e}");
            index["error"] = json!("the index does not answer");
            false
        }
        Err(_) => false,
    };
    let body = Json(json!({
        "status": if ok { "ok" } else { "unavailable" },
        "index": index,
        "readers": pipeline.available_readers(),
        "uptime_seconds": state.started.elapsed().map_or(0, |d| d.as_secs()),
    }));
    if ok {
        body.into_response()
    } else {
        (axum::http::StatusCode::SERVICE_UNAVAILABLE, body).into_response()
    }
}

/// Prometheus text format.
pub async fn metrics(State(state): State<Arc<AppState>>) -> impl IntoResponse {
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        {
            let mut text = state.metrics.render(&state.engine.queue_depths());
            let stats: Vec<_> = state
                .engine
                .pipeline()
                .schedulers()
                .into_iter()
                .map(|(reader, s)| (reader, s.stats()))
                .collect();
            capstan_engine::scheduler::render_schedulers(&mut text, &stats);
            text
        },
    )
}

/// The id under which the index's encoder serves embeddings.
pub fn embedding_model_id(state: &AppState) -> String {
    let path = &state.engine.pipeline().retriever().store().encoder().path;
    std::path::Path::new(path).file_name().map_or_else(
        || "encoder".to_string(),
        |n| n.to_string_lossy().into_owned(),
    )
}

/// Every model this server answers with: one chat model per loaded reader, plus the encoder.
fn model_list(state: &AppState) -> Vec<Value> {
    let created = state
        .started
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let mut ids: Vec<String> = state
        .engine
        .pipeline()
        .available_readers()
        .into_iter()
        .map(|r| format!("capstan-{}", r.name()))
        .collect();
    ids.push(embedding_model_id(state));
    ids.into_iter()
        .map(|id| json!({"id": id, "object": "model", "created": created, "owned_by": "capstan"}))
        .collect()
}

/// OpenAI's model list.
pub async fn models(State(state): State<Arc<AppState>>) -> Json<Value> {
    Json(json!({"object": "list", "data": model_list(&state)}))
}

/// OpenAI's model retrieval: `GET /v1/models/{model}`.
pub async fn model(
    State(state): State<Arc<AppState>>,
    id: Result<Path<String>, PathRejection>,
) -> Result<Json<Value>, ApiError> {
    let Path(id) = id.map_err(|e| ApiError::invalid(e.body_text()))?;
    model_list(&state)
        .into_iter()
        .find(|m| m["id"] == id.as_str())
        .map(Json)
        .ok_or_else(|| {
            ApiError::model_not_found(format!("model `{id}` does not exist (see GET /v1/models)"))
        })
}

/// The OpenAPI 3.1 description of this server: its limits, readers, models
/// and whether it wants an API key.
pub async fn openapi(State(state): State<Arc<AppState>>) -> Json<Value> {
    let limits = &state.limits;
    let keyed = state.api_key.is_some();
    let error = json!({"$ref": "#/components/schemas/Error"});
    let err = |description: &str| json!({"description": description, "content": {"application/json": {"schema": error}}});
    let mut errors = json!({
        "400": err("Invalid request"),
        "413": err("Body too large"),
        "503": err("At capacity; retry after the Retry-After header"),
    });
    if keyed {
        errors["401"] = err("Missing or wrong API key");
    }
    let post = |summary: &str, body: Value, ok: Value, extra: &[(&str, Value)]| {
        let mut responses = errors.clone();
        responses["200"] =
            json!({"description": "OK", "content": {"application/json": {"schema": ok}}});
        for (code, r) in extra {
            responses[*code] = r.clone();
        }
        json!({"post": {"summary": summary, "requestBody": {"required": true, "content": {"application/json": {"schema": body}}}, "responses": responses}})
    };
    let get = |summary: &str, ok: Value, ctype: &str| {
        let mut responses =
            json!({"200": {"description": "OK", "content": {ctype: {"schema": ok}}}});
        if keyed {
            responses["401"] = errors["401"].clone();
        }
        json!({"get": {"summary": summary, "responses": responses}})
    };
    // Routes that need no API key.
    let public = |mut op: Value| {
        op["get"]["security"] = json!([]);
        if let Some(r) = op["get"]["responses"].as_object_mut() {
            r.remove("401");
        }
        op
    };
    let sse = |mut op: Value| {
        op["post"]["responses"]["200"]["content"]["text/event-stream"] = json!({});
        op
    };
    let not_found = err("No such model");
    let models: Vec<Value> = model_list(&state)
        .into_iter()
        .map(|m| m["id"].clone())
        .collect();
    let readers: Vec<&str> = state
        .engine
        .pipeline()
        .available_readers()
        .into_iter()
        .map(|r| r.name())
        .collect();
    let chat_models: Vec<String> = std::iter::once("capstan".to_string())
        .chain(readers.iter().map(|r| format!("capstan-{r}")))
        .collect();
    let embedding_model = embedding_model_id(&state);
    let dimension = state.engine.pipeline().retriever().dimension();
    // Text with something besides white space, within the question limit.
    let question = json!({"type": "string", "minLength": 1, "maxLength": limits.max_question_chars, "pattern": "\\S"});
    let k = json!({"type": "integer", "minimum": 1, "maximum": limits.max_k});
    let mode = json!({"type": "string", "enum": ["bm25", "dense", "hybrid"]});
    let fusion = json!({"oneOf": [
        {"type": "object", "required": ["method", "k"], "additionalProperties": false, "properties": {
            "method": {"const": "rrf"}, "k": {"type": "number", "minimum": 0, "maximum": 1e6},
            "bm25_weight": {"type": "number", "minimum": 0, "maximum": 1}}},
        {"type": "object", "required": ["method", "bm25_weight"], "additionalProperties": false, "properties": {
            "method": {"const": "weighted"}, "bm25_weight": {"type": "number", "minimum": 0, "maximum": 1}}}]});
    // Metadata field -> required value.
    let filter = json!({"type": "object", "additionalProperties": {
        "oneOf": [{"type": "string"}, {"type": "integer"}, {"type": "boolean"}]}});
    let max_tokens = json!({"type": "integer", "minimum": 1, "maximum": super::qa::MAX_NEW_TOKENS});
    let temperature = json!({"type": "number", "minimum": 0, "maximum": 2});
    let top_p = json!({"type": "number", "exclusiveMinimum": 0, "maximum": 1});
    let text =
        json!({"type": "string", "minLength": 1, "maxLength": limits.max_question_chars * 8});
    let hit = json!({"type": "object", "properties": {
        "passage_id": {"type": "string"}, "doc_id": {"type": "string"}, "title": {"type": "string"},
        "text": {"type": "string"}, "score": {"type": "number"},
        "bm25": {"type": ["object", "null"]}, "dense": {"type": ["object", "null"]},
        "page_start": {"type": "integer", "minimum": 1}, "page_end": {"type": "integer", "minimum": 1},
        "section": {"type": "string"}}});
    let stop = json!({"oneOf": [{"type": "string", "minLength": 1},
        {"type": "array", "items": {"type": "string", "minLength": 1}, "maxItems": 4}]});
    let seed = json!({"type": "integer", "minimum": 0});
    let rewrite = json!({"type": "string", "enum": ["rules", "model"]});
    let history = json!({"type": "array", "maxItems": super::qa::MAX_HISTORY_TURNS, "items": {
        "type": "object", "required": ["role", "content"], "additionalProperties": false, "properties": {
            "role": {"type": "string", "enum": ["user", "assistant", "system"]}, "content": text}}});
    let content = json!({"oneOf": [{"type": "string"}, {"type": "array", "items": {"type": "object",
        "required": ["type"], "properties": {"type": {"type": "string"}, "text": {"type": "string"}}}}]});
    // Optional fields may be null (= absent), as OpenAI's clients send them.
    let nullable = |mut op: Value, method: &str| {
        let body = &mut op[method]["requestBody"]["content"]["application/json"]["schema"];
        let required: Vec<Value> = body["required"].as_array().cloned().unwrap_or_default();
        if let Some(props) = body["properties"].as_object_mut() {
            for (name, schema) in props.iter_mut() {
                if !required.contains(&json!(name)) {
                    *schema = json!({"anyOf": [schema.clone(), {"type": "null"}]});
                }
            }
        }
        op
    };
    let mut spec = json!({
        "openapi": "3.1.0",
        "info": {"title": "Capstan", "version": env!("CARGO_PKG_VERSION"),
                 "description": "Retrieval-augmented long-context question answering."},
        "components": {
            "schemas": {"Error": {"type": "object", "required": ["error"], "properties": {"error": {
                "type": "object", "required": ["type", "message"],
                "properties": {"type": {"type": "string"}, "message": {"type": "string"}}}}}},
        },
        "paths": {
            "/v1/qa": sse(post("Answer a question with citations (stream: server-sent events)",
                json!({"type": "object", "required": ["question"], "additionalProperties": false, "properties": {
                    "question": question, "k": k, "mode": mode, "reader": {"type": "string", "enum": readers},
                    "stream": {"type": "boolean"}, "max_tokens": max_tokens, "temperature": temperature,
                    "top_p": top_p, "top_k": {"type": "integer", "minimum": 1},
                    "lost_in_the_middle": {"type": "boolean"}, "query_aware": {"type": "boolean"},
                    "decoder_passages": {"type": "integer", "minimum": 0},
                    "filter": filter, "history": history, "rewrite": rewrite, "stop": stop, "seed": seed}}),
                json!({"type": "object", "properties": {"answer": {"type": "string"},
                    "retrieval_question": {"type": "string"},
                    "citations": {"type": "array", "items": {"type": "string"}},
                    "passages": {"type": "array", "items": hit}, "usage": {"type": "object"}, "timings": {"type": "object"}}}),
                &[])),
            "/v1/search": post("Top-k passages for a query",
                json!({"type": "object", "required": ["query"], "additionalProperties": false, "properties": {
                    "query": question, "k": k, "mode": mode, "fusion": fusion,
                    "unit": {"type": "string", "enum": ["passages", "documents"]},
                    "filter": filter}}),
                json!({"type": "object", "properties": {"hits": {"type": "array", "items": hit}}}),
                &[]),
            "/v1/embeddings": post("OpenAI-compatible embeddings",
                json!({"type": "object", "required": ["input"], "properties": {
                    "input": {"oneOf": [text, {"type": "array", "items": text, "minItems": 1, "maxItems": limits.max_embedding_inputs}]},
                    "model": {"type": "string", "enum": [embedding_model]},
                    "encoding_format": {"type": "string", "enum": ["float", "base64"]},
                    "dimensions": {"type": "integer", "const": dimension}}}),
                json!({"type": "object"}),
                &[("404", not_found.clone())]),
            "/v1/chat/completions": sse(post("OpenAI-compatible chat, answered from the index (the last user message is the question, the turns before it the conversation)",
                json!({"type": "object", "required": ["messages"], "properties": {
                    "model": {"type": "string", "enum": chat_models},
                    "messages": {"type": "array", "minItems": 1,
                        "items": {"type": "object", "required": ["role"], "properties": {"role": {"type": "string"}, "content": content}},
                        "contains": {"type": "object", "required": ["role", "content"], "properties": {
                            "role": {"const": "user"}, "content": question}}},
                    "stream": {"type": "boolean"}, "max_tokens": max_tokens, "max_completion_tokens": max_tokens,
                    "temperature": temperature, "top_p": top_p, "n": {"const": 1},
                    "rewrite": rewrite, "stop": stop, "seed": seed,
                    "logprobs": {"type": "boolean"},
                    "top_logprobs": {"type": "integer", "minimum": 0, "maximum": 20},
                    "presence_penalty": {"type": "number", "minimum": -2, "maximum": 2},
                    "frequency_penalty": {"type": "number", "minimum": -2, "maximum": 2},
                    "logit_bias": {"type": "object", "additionalProperties": {"type": "number", "minimum": -100, "maximum": 100}},
                    "response_format": {"type": "object", "properties": {"type": {"const": "text"}}},
                    "tools": {"type": "array", "maxItems": 0},
                    "tool_choice": {"enum": ["none", "auto"]}}}),
                json!({"type": "object"}),
                &[("404", not_found.clone())])),
            "/v1/models": get("Models this server answers with", json!({"type": "object"}), "application/json"),
            "/v1/models/{model}": {"get": {"summary": "One model",
                "parameters": [{"name": "model", "in": "path", "required": true,
                                "schema": {"type": "string"}, "examples": {"served": {"value": models[0]}}}],
                "responses": {"200": {"description": "OK", "content": {"application/json": {"schema": {"type": "object"}}}},
                              "404": not_found}}},
            "/health": public(get("Liveness (no API key needed)", json!({"type": "object"}), "application/json")),
            "/metrics": get("Prometheus metrics", json!({"type": "string"}), "text/plain"),
            "/openapi.json": get("This description", json!({"type": "object"}), "application/json"),
            "/": get("The web page; with an API key, open it as /?key=KEY (it passes the key on)", json!({"type": "string"}), "text/html"),
        },
    });
    for path in [
        "/v1/qa",
        "/v1/search",
        "/v1/embeddings",
        "/v1/chat/completions",
    ] {
        spec["paths"][path] = nullable(spec["paths"][path].take(), "post");
    }
    if keyed {
        spec["components"]["securitySchemes"] = json!({
            "bearer": {"type": "http", "scheme": "bearer"},
            "page_key": {"type": "apiKey", "in": "query", "name": "key"},
        });
        spec["security"] = json!([{"bearer": []}]);
        spec["paths"]["/"]["get"]["security"] = json!([{"bearer": []}, {"page_key": []}]);
        spec["paths"]["/v1/models/{model}"]["get"]["responses"]["401"] = errors["401"].clone();
    }
    Json(spec)
}
