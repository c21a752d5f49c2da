//! The HTTP edge's error type and its one mapping to OpenAI's error body:
//! `{"error": {"message", "type", "param", "code"}}` with the status code the
//! OpenAI SDKs turn into the right exception class.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::provider::UpstreamError;

/// OpenAI's error object (the value under `"error"`).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct ErrorObject {
    pub message: String,
    #[serde(rename = "type")]
    pub kind: String,
    pub param: Option<String>,
    pub code: Option<String>,
    /// Whatever else the upstream said (kept, never dropped).
    #[serde(flatten)]
    pub extra: Map<String, Value>,
    /// The upstream's `Retry-After` (or ours), sent on as a header.
    #[serde(skip)]
    pub retry_after: Option<std::time::Duration>,
}

impl ErrorObject {
    pub fn new(kind: &str, message: impl Into<String>) -> Self {
        ErrorObject { message: message.into(), kind: kind.to_string(), ..Default::default() }
    }

    pub fn with_code(mut self, code: &str) -> Self {
        self.code = Some(code.to_string());
        self
    }

    /// The body `{"error": {...}}`, every known secret redacted.
    pub fn to_body(&self) -> Value {
        let mut v = serde_json::json!({ "error": self });
        crate::redact::value(&mut v);
        v
    }

    /// Redacts every known secret from the message, param, code and what
    /// else the upstream said.
    pub fn redact(&mut self) {
        let r = crate::redact::global();
        r.string(&mut self.message);
        for s in [&mut self.param, &mut self.code].into_iter().flatten() {
            r.string(s);
        }
        for v in self.extra.values_mut() {
            r.value(v);
        }
    }
}

/// Everything a request can fail with, by cause.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// The client sent something invalid.
    #[error("{message}")]
    InvalidRequest { message: String, param: Option<String> },
    /// The model names no configured provider.
    #[error("{0}")]
    ModelNotFound(String),
    /// A named thing (a stored response) does not exist.
    #[error("{message}")]
    NotFound { message: String, param: Option<String>, code: &'static str },
    /// A backend this request needs (the state store) is down.
    #[error("{0}")]
    Unavailable(String),
    /// The request (as the client sent it, or as assembled from stored
    /// turns) is over `max_body_bytes`.
    #[error("{0}")]
    TooLarge(String),
    #[error(transparent)]
    Upstream(#[from] UpstreamError),
}

impl ApiError {
    pub fn invalid(message: impl Into<String>) -> Self {
        ApiError::InvalidRequest { message: message.into(), param: None }
    }

    pub fn invalid_param(param: &str, message: impl Into<String>) -> Self {
        ApiError::InvalidRequest { message: message.into(), param: Some(param.to_string()) }
    }

    /// Status code and OpenAI error object.
    pub fn to_openai(&self) -> (StatusCode, ErrorObject) {
        match self {
            ApiError::InvalidRequest { message, param } => {
                let mut e = ErrorObject::new("invalid_request_error", message.clone());
                e.param = param.clone();
                (StatusCode::BAD_REQUEST, e)
            }
            ApiError::ModelNotFound(msg) => (
                StatusCode::NOT_FOUND,
                ErrorObject::new("invalid_request_error", msg.clone()).with_code("model_not_found"),
            ),
            ApiError::NotFound { message, param, code } => {
                let mut e = ErrorObject::new("invalid_request_error", message.clone()).with_code(code);
                e.param = param.clone();
                (StatusCode::NOT_FOUND, e)
            }
            ApiError::Unavailable(msg) => (
                StatusCode::SERVICE_UNAVAILABLE,
                ErrorObject::new("api_error", msg.clone()).with_code("service_unavailable"),
            ),
            ApiError::TooLarge(msg) => (
                StatusCode::PAYLOAD_TOO_LARGE,
                ErrorObject::new("invalid_request_error", msg.clone()).with_code("request_too_large"),
            ),
            ApiError::Upstream(e) => e.to_openai(),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let (status, obj) = self.to_openai();
        let mut r = (status, axum::Json(obj.to_body())).into_response();
        if let Some(ra) = obj.retry_after
            && let Ok(v) = axum::http::HeaderValue::from_str(&ra.as_secs_f64().ceil().max(1.0).to_string())
        {
            r.headers_mut().insert(axum::http::header::RETRY_AFTER, v);
        }
        r
    }
}
