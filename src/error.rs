//! The request's error type and its one mapping to OpenAI's error body (the
//! edge writes it, `server::error`):
//! `{"error": {"message", "type", "param", "code"}}` with the status code the
//! OpenAI SDKs turn into the right exception class.

use axum::http::StatusCode;

pub use crate::openai::ErrorObject;
use crate::provider::UpstreamError;

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
    /// The model's answer never held to the schema the client asked for
    /// (structured outputs, strict tools), re-asks included.
    #[error("{0}")]
    StructuredOutput(String),
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
            // 422: the request was fine and the SDKs do not retry it (the
            // re-asks were made already).
            ApiError::StructuredOutput(msg) => (
                StatusCode::UNPROCESSABLE_ENTITY,
                ErrorObject::new("invalid_response_error", msg.clone()).with_code("structured_output_invalid"),
            ),
            ApiError::Upstream(e) => e.to_openai(),
        }
    }
}
