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

/// Liveness and what is loaded (no API key needed).
pub async fn health(State(state): State<Arc<AppState>>) -> Json<Value> {
    let pipeline = state.engine.pipeline();
    let manifest = pipeline.retriever().index().manifest();
    Json(json!({
        "status": "ok",
        "index": {
            "documents": manifest.counts.documents,
            "passages": manifest.counts.passages,
            "encoder": manifest.encoder.path,
        },
        "readers": pipeline.available_readers(),
        "uptime_seconds": state.started.elapsed().map_or(0, |d| d.as_secs()),
    }))
}

/// Prometheus text format.
pub async fn metrics(State(state): State<Arc<AppState>>) -> impl IntoResponse {
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        state.metrics.render(&state.engine.queue_depths()),
    )
}

/// The id under which the index's encoder serves embeddings.
pub fn embedding_model_id(state: &AppState) -> String {
    let path = &state
        .engine
        .pipeline()
        .retriever()
        .index()
        .manifest()
        .encoder
        .path;
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

/// The OpenAPI 3.1 description of this API.
pub async fn openapi() -> Json<Value> {
    let error = json!({"$ref": "#/components/schemas/Error"});
    let errors = json!({
        "400": {"description": "Invalid request", "content": {"application/json": {"schema": error}}},
        "401": {"description": "Missing or wrong API key", "content": {"application/json": {"schema": error}}},
        "413": {"description": "Body too large", "content": {"application/json": {"schema": error}}},
        "503": {"description": "At capacity; retry after the Retry-After header", "content": {"application/json": {"schema": error}}},
    });
    let post = |summary: &str, body: Value, ok: Value| {
        let mut responses = errors.clone();
        responses["200"] =
            json!({"description": "OK", "content": {"application/json": {"schema": ok}}});
        json!({"post": {"summary": summary, "requestBody": {"required": true, "content": {"application/json": {"schema": body}}}, "responses": responses}})
    };
    let get = |summary: &str, ok: Value, ctype: &str| {
        json!({"get": {"summary": summary, "responses": {
            "200": {"description": "OK", "content": {ctype: {"schema": ok}}},
            "401": errors["401"].clone()}}})
    };
    // Routes that need no API key.
    let public = |mut op: Value| {
        op["get"]["security"] = json!([]);
        op["get"]["responses"]
            .as_object_mut()
            .expect("responses")
            .remove("401");
        op
    };
    let mode = json!({"type": "string", "enum": ["bm25", "dense", "hybrid"]});
    let reader = json!({"type": "string", "enum": ["extractive", "llama", "cape"]});
    let hit = json!({"type": "object", "properties": {
        "passage_id": {"type": "string"}, "doc_id": {"type": "string"}, "title": {"type": "string"},
        "text": {"type": "string"}, "score": {"type": "number"},
        "bm25": {"type": ["object", "null"]}, "dense": {"type": ["object", "null"]}}});
    Json(json!({
        "openapi": "3.1.0",
        "info": {"title": "Capstan", "version": env!("CARGO_PKG_VERSION"),
                 "description": "Retrieval-augmented long-context question answering."},
        "components": {
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
            "schemas": {"Error": {"type": "object", "required": ["error"], "properties": {"error": {
                "type": "object", "required": ["type", "message"],
                "properties": {"type": {"type": "string"}, "message": {"type": "string"}}}}}},
        },
        "security": [{"bearer": []}],
        "paths": {
            "/v1/qa": post("Answer a question with citations (stream: server-sent events)",
                json!({"type": "object", "required": ["question"], "additionalProperties": false, "properties": {
                    "question": {"type": "string", "minLength": 1}, "k": {"type": "integer", "minimum": 1},
                    "mode": mode, "reader": reader, "stream": {"type": "boolean"},
                    "max_tokens": {"type": "integer", "minimum": 1, "maximum": 1024},
                    "temperature": {"type": "number", "minimum": 0, "maximum": 2},
                    "top_p": {"type": "number", "exclusiveMinimum": 0, "maximum": 1},
                    "top_k": {"type": "integer", "minimum": 1},
                    "lost_in_the_middle": {"type": "boolean"}, "query_aware": {"type": "boolean"},
                    "decoder_passages": {"type": "integer", "minimum": 0}}}),
                json!({"type": "object", "properties": {"answer": {"type": "string"},
                    "citations": {"type": "array", "items": {"type": "string"}},
                    "passages": {"type": "array", "items": hit}, "usage": {"type": "object"}, "timings": {"type": "object"}}})),
            "/v1/search": post("Top-k passages for a query",
                json!({"type": "object", "required": ["query"], "additionalProperties": false, "properties": {
                    "query": {"type": "string", "minLength": 1}, "k": {"type": "integer", "minimum": 1}, "mode": mode,
                    "fusion": {"type": "object"}}}),
                json!({"type": "object", "properties": {"hits": {"type": "array", "items": hit}}})),
            "/v1/embeddings": post("OpenAI-compatible embeddings",
                json!({"type": "object", "required": ["input"], "properties": {
                    "input": {"oneOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}]},
                    "model": {"type": "string"}, "encoding_format": {"type": "string", "enum": ["float", "base64"]}}}),
                json!({"type": "object"})),
            "/v1/chat/completions": post("OpenAI-compatible chat, answered from the index",
                json!({"type": "object", "required": ["messages"], "properties": {
                    "model": {"type": "string"}, "messages": {"type": "array", "items": {"type": "object"}},
                    "stream": {"type": "boolean"}, "max_tokens": {"type": "integer"}, "temperature": {"type": "number"}}}),
                json!({"type": "object"})),
            "/v1/models": get("Models this server answers with", json!({"type": "object"}), "application/json"),
            "/v1/models/{model}": {"get": {"summary": "One model",
                "parameters": [{"name": "model", "in": "path", "required": true, "schema": {"type": "string"}}],
                "responses": {"200": {"description": "OK", "content": {"application/json": {"schema": {"type": "object"}}}},
                              "401": errors["401"].clone(),
                              "404": {"description": "No such model", "content": {"application/json": {"schema": error}}}}}},
            "/health": public(get("Liveness (no API key needed)", json!({"type": "object"}), "application/json")),
            "/metrics": get("Prometheus metrics", json!({"type": "string"}), "text/plain"),
            "/openapi.json": get("This description", json!({"type": "object"}), "application/json"),
            "/": public(get("The web page (static; no API key needed: it sends ?key= itself)", json!({"type": "string"}), "text/html")),
        },
    }))
}
