//! API errors: every failure is `{"error": {"type", "message"}}` with a 4xx
//! or 5xx status; this is the one place errors become HTTP.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use capstan_engine::pipeline::NotLoaded;
use capstan_engine::workers::Overloaded;

/// An error answered to a client.
#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    kind: &'static str,
    message: String,
}

impl ApiError {
    /// 400: the request is malformed or a field is out of range.
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "invalid_request_error", message)
    }

    /// 404: the model a request names is not served here.
    pub fn model_not_found(message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, "model_not_found", message)
    }

    /// Any status.
    pub fn new(status: StatusCode, kind: &'static str, message: impl Into<String>) -> Self {
        Self {
            status,
            kind,
            message: message.into(),
        }
    }

    /// Maps a pipeline failure: user mistakes are 4xx, the rest 500.
    pub fn from_pipeline(err: anyhow::Error) -> Self {
        if let Some(e) = err.downcast_ref::<NotLoaded>() {
            return Self::invalid(e.to_string());
        }
        if let Some(e) = err.downcast_ref::<capstan_retriever::Error>() {
            if matches!(e, capstan_retriever::Error::Invalid { .. }) {
                return Self::invalid(e.to_string());
            }
        }
        let message = format!("{err:#}");
        if message.contains("exceeds the model's") {
            return Self::invalid(message);
        }
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, "server_error", message)
    }
}

impl From<Overloaded> for ApiError {
    fn from(e: Overloaded) -> Self {
        Self::new(StatusCode::SERVICE_UNAVAILABLE, "overloaded", e.to_string())
    }
}

impl ApiError {
    /// The JSON body: `{"error": {"type", "message"}}`.
    pub fn body(&self) -> serde_json::Value {
        json!({"error": {"type": self.kind, "message": self.message}})
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = self.body();
        let mut resp = (self.status, axum::Json(body)).into_response();
        if self.status == StatusCode::SERVICE_UNAVAILABLE {
            resp.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        }
        if self.status == StatusCode::UNAUTHORIZED {
            resp.headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        resp
    }
}
