//! `POST /v1/search`: the top-k passages for a query.

use std::sync::Arc;
use std::time::Instant;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::Json;
use capstan_retriever::{Filter, Fusion, Mode, SearchOptions, Unit};
use serde::Deserialize;
use serde_json::{json, Value};

use super::{await_reply, check_k, check_question, parse_json, ApiError, AppState};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SearchBody {
    query: String,
    k: Option<usize>,
    mode: Option<Mode>,
    /// `{"method": "weighted", "bm25_weight": 0.55}` (the default) or `{"method": "rrf", "k": 60}`.
    fusion: Option<Fusion>,
    /// `"passages"` (default) or `"documents"` (one hit per document, its best passage).
    unit: Option<Unit>,
    /// `{"field": value, ...}`: only documents whose metadata has every field equal.
    filter: Option<Filter>,
}

/// The handler.
pub async fn search(
    State(state): State<Arc<AppState>>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<Value>, ApiError> {
    let body: SearchBody = parse_json(body)?;
    check_question(&body.query, &state.limits).map_err(|_| {
        ApiError::invalid(format!(
            "`query` must be 1..={} characters and not blank",
            state.limits.max_question_chars
        ))
    })?;
    let k = body.k.unwrap_or(state.defaults.k);
    check_k(k, &state.limits)?;
    if let Some(Fusion::Rrf { k, bm25_weight }) = body.fusion {
        if !(0.0..=1e6).contains(&k) {
            return Err(ApiError::invalid(format!(
                "`fusion.k` must be within [0, 1e6], got {k}"
            )));
        }
        if !(0.0..=1.0).contains(&bm25_weight) {
            return Err(ApiError::invalid(format!(
                "`fusion.bm25_weight` must be within [0, 1], got {bm25_weight}"
            )));
        }
    }
    let base = state.engine.pipeline().search;
    let options = SearchOptions {
        mode: body.mode.unwrap_or(state.defaults.mode),
        k,
        fusion: body.fusion.unwrap_or(base.fusion),
        unit: body.unit.unwrap_or(base.unit),
        ..base
    };
    let filter = body.filter.or_else(|| state.defaults.filter.clone());
    if let Some(f) = &filter {
        f.validate()
            .map_err(|e| ApiError::invalid(format!("`filter`: {e}")))?;
    }
    let start = Instant::now();
    let hits = await_reply(state.engine.search(body.query.clone(), options, filter)?).await?;
    state
        .metrics
        .stage("retrieve", start.elapsed().as_secs_f64());
    Ok(Json(json!({
        "query": body.query,
        "mode": options.mode,
        "k": k,
        "hits": hits,
        "took_ms": start.elapsed().as_secs_f64() * 1000.0,
    })))
}
