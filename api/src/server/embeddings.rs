//! `POST /v1/embeddings` in OpenAI's format (float or base64 vectors).

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::Json;
use base64::Engine as _;
use serde::Deserialize;
use serde_json::{json, Value};

use super::meta::embedding_model_id;
use super::{await_reply, parse_json, ApiError, AppState};

#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum Input {
    One(String),
    Many(Vec<String>),
}

#[derive(Debug, Deserialize)]
pub struct EmbeddingsBody {
    input: Input,
    model: Option<String>,
    encoding_format: Option<String>,
    dimensions: Option<usize>,
}

/// The handler.
pub async fn embeddings(
    State(state): State<Arc<AppState>>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<Value>, ApiError> {
    let body: EmbeddingsBody = parse_json(body).map_err(|e| {
        if e.body()["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("did not match any variant"))
        {
            ApiError::invalid(
                "`input` must be a string or an array of strings (token arrays are not supported)",
            )
        } else {
            e
        }
    })?;
    let model = embedding_model_id(&state);
    if let Some(m) = &body.model {
        if m != &model {
            return Err(ApiError::model_not_found(format!(
                "model `{m}` does not exist; this server embeds with `{model}`"
            )));
        }
    }
    let texts = match body.input {
        Input::One(s) => vec![s],
        Input::Many(v) => v,
    };
    if texts.is_empty() || texts.len() > state.limits.max_embedding_inputs {
        return Err(ApiError::invalid(format!(
            "`input` must hold 1..={} texts, got {}",
            state.limits.max_embedding_inputs,
            texts.len()
        )));
    }
    if let Some((i, _)) = texts
        .iter()
        .enumerate()
        .find(|(_, t)| t.is_empty() || t.chars().count() > state.limits.max_question_chars * 8)
    {
        return Err(ApiError::invalid(format!(
            "`input[{i}]` must be 1..={} characters",
            state.limits.max_question_chars * 8
        )));
    }
    let dim = state.engine.pipeline().retriever().dimension();
    if body.dimensions.is_some_and(|d| d != dim) {
        return Err(ApiError::invalid(format!(
            "`dimensions`: this model has {dim}"
        )));
    }
    let base64 = match body.encoding_format.as_deref() {
        None | Some("float") => false,
        Some("base64") => true,
        Some(other) => {
            return Err(ApiError::invalid(format!(
                "`encoding_format` `{other}`: use float or base64"
            )))
        }
    };
    let (vectors, tokens) = await_reply(state.engine.embed(texts)?).await?;
    let data: Vec<Value> = vectors
        .into_iter()
        .enumerate()
        .map(|(i, v)| {
            let embedding = if base64 {
                let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
                json!(base64::engine::general_purpose::STANDARD.encode(bytes))
            } else {
                json!(v)
            };
            json!({"object": "embedding", "index": i, "embedding": embedding})
        })
        .collect();
    Ok(Json(json!({
        "object": "list",
        "data": data,
        "model": model,
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
    })))
}
