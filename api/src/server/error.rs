//! API errors: every failure is `{"error": {"type", "message"}}` with a 4xx
//! or 5xx status; this is the one place errors become HTTP. A 5xx never sends
//! its cause (paths, internals) to the client: the cause travels to the
//! `observe` middleware, which logs it with the request id that the response
//! carries (`x-request-id` header and body).

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use capstan_engine::Error as EngineError;

/// An error answered to a client.
#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    kind: &'static str,
    message: String,
    /// The cause of a 5xx, for the log only.
    detail: Option<String>,
}

/// The cause of a 5xx response, for the log (a response extension).
#[derive(Debug, Clone)]
pub struct InternalDetail(pub String);

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
            detail: None,
        }
    }

    /// 500 whose cause `detail` is logged, not sent.
    pub fn internal(detail: impl Into<String>) -> Self {
        Self {
            detail: Some(detail.into()),
            ..Self::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "server_error",
                "internal server error",
            )
        }
    }
}

impl From<EngineError> for ApiError {
    /// User mistakes are 400, a busy server or an unreachable index 503 (with
    /// Retry-After), the rest 500.
    fn from(err: EngineError) -> Self {
        if err.is_unavailable() {
            // The cause names the cluster's address: logged, not sent.
            Self {
                detail: Some(err.to_string()),
                ..Self::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "index_unavailable",
                    "the index is unavailable (its Qdrant cluster does not answer); retry later",
                )
            }
        } else if err.is_overloaded() {
            Self::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "overloaded",
                err.to_string(),
            )
        } else if err.is_client_error() {
            Self::invalid(err.to_string())
        } else {
            Self::internal(err.to_string())
        }
    }
}

impl ApiError {
    /// [`ApiError::body`] for an error sent inside a stream (the response's status is long
    /// gone): a 5xx's cause is logged here, since the middleware will not see it.
    pub fn logged_body(&self) -> serde_json::Value {
        if let Some(detail) = &self.detail {
            tracing::error!(status = self.status.as_u16(), "in a stream: {detail}");
        }
        self.body()
    }

    /// The JSON body: `{"error": {"type", "message"}}`.
    pub fn body(&self) -> serde_json::Value {
        json!({"error": {"type": self.kind, "message": self.message}})
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = self.body();
        let mut resp = (self.status, axum::Json(body)).into_response();
        if let Some(detail) = self.detail {
            resp.extensions_mut().insert(InternalDetail(detail));
        }
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
