//! The Anthropic Messages front (`POST /v1/messages`,
//! `POST /v1/messages/count_tokens`), translated onto chat completions like
//! the Responses front: [`request`] turns the body into a `ChatRequest`,
//! which takes the chat path (routing, dispatch, tool-call recovery, prompt
//! mode, the reasoning round trip, the agent loop); [`events`] turns the
//! normalized chunks into Anthropic's event stream or one message. Errors
//! are in Anthropic's shape (`{"type":"error","error":{"type","message"}}`),
//! with the statuses the Anthropic SDKs map to their exception classes.

pub mod events;
pub mod request;

use std::sync::Arc;

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Extension, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::drive;
use crate::core::Core;
use crate::core::context::RequestCtx;
use crate::error::ApiError;
use events::Builder;

/// An error of this front, answered in Anthropic's shape.
pub struct Error(ApiError);

impl From<ApiError> for Error {
    fn from(e: ApiError) -> Self {
        Error(e)
    }
}

impl IntoResponse for Error {
    fn into_response(self) -> Response {
        let (status, obj) = self.0.to_openai();
        let message = overflow_message(&obj).unwrap_or_else(|| obj.message.clone());
        let mut r = (status, Json(error_json(status.as_u16(), &message))).into_response();
        if let Some(ra) = obj.retry_after
            && let Ok(v) = HeaderValue::from_str(&ra.as_secs_f64().ceil().max(1.0).to_string())
        {
            r.headers_mut().insert(header::RETRY_AFTER, v);
        }
        r
    }
}

/// A context overflow in the words Anthropic's API uses, which Claude Code
/// reads to compact the conversation: "prompt is too long: N tokens > M
/// maximum" (without the window when no one knows it).
fn overflow_message(e: &crate::openai::ErrorObject) -> Option<String> {
    use crate::provider::context::{OVERFLOW_CODE, TOKENS_FIELD, WINDOW_FIELD};
    if e.code.as_deref() != Some(OVERFLOW_CODE) {
        return None;
    }
    let tokens = e.extra.get(TOKENS_FIELD).and_then(Value::as_u64);
    Some(match (tokens, e.extra.get(WINDOW_FIELD).and_then(Value::as_u64)) {
        (Some(n), Some(m)) => format!("prompt is too long: {n} tokens > {m} maximum"),
        (Some(n), None) => format!("prompt is too long: {n} tokens"),
        _ => "prompt is too long".to_string(),
    })
}

/// Anthropic's error type for an HTTP status.
pub fn error_type(status: u16) -> &'static str {
    match status {
        400 | 422 => "invalid_request_error",
        401 => "authentication_error",
        403 => "permission_error",
        404 => "not_found_error",
        413 => "request_too_large",
        429 => "rate_limit_error",
        503 | 529 => "overloaded_error",
        504 => "timeout_error",
        s if s >= 500 => "api_error",
        _ => "invalid_request_error",
    }
}

/// The error body, every known secret redacted.
pub fn error_json(status: u16, message: &str) -> Value {
    let mut v = json!({"type": "error", "error": {"type": error_type(status), "message": message}});
    crate::redact::value(&mut v);
    v
}

/// An error body in OpenAI's shape (the edge's own refusals on this
/// front's routes) in Anthropic's; `None` when it is not one.
pub fn from_openai(status: u16, body: &[u8]) -> Option<Value> {
    let v: Value = serde_json::from_slice(body).ok()?;
    if v.get("type").and_then(Value::as_str) == Some("error") {
        return None;
    }
    let message = v.get("error")?.get("message")?.as_str()?;
    Some(error_json(status, message))
}

/// The names of the configured server-side tools, looked up only when the
/// request declares an Anthropic server tool (they may serve it).
async fn server_tool_names(s: &Core, body: &[u8]) -> Vec<String> {
    let typed = serde_json::from_slice::<Value>(body).ok().and_then(|v| {
        v.get("tools")
            .and_then(Value::as_array)
            .map(|tools| tools.iter().any(|t| t.get("type").and_then(Value::as_str).is_some_and(|k| k != "custom")))
    });
    if typed != Some(true) {
        return Vec::new();
    }
    crate::core::server_tool_names(s).await
}

async fn parse(s: &Core, body: &[u8]) -> Result<request::Request, ApiError> {
    let names = server_tool_names(s, body).await;
    let lookup = |kind: &str| -> Option<String> {
        let suffix = format!("__{kind}");
        names.iter().find(|n| *n == kind || n.ends_with(&suffix)).cloned()
    };
    request::parse(body, &lookup)
}

pub async fn create(
    State(s): State<Arc<Core>>,
    Extension(ctx): Extension<Arc<RequestCtx>>,
    body: Bytes,
) -> Result<Response, Error> {
    let req = parse(&s, &body).await?;
    let max = s.limits.max_messages;
    if req.chat.messages.len() > max {
        return Err(ApiError::invalid_param(
            "messages",
            format!("Too many messages: {} as chat messages, the limit is {max}.", req.chat.messages.len()),
        )
        .into());
    }
    let mut b = Builder::new(&req.model, req.stop_sequences.clone());
    // Returns once the upstream answered: an upstream that fails at once
    // gets its HTTP status here.
    let chunks = crate::core::answer(&s, &ctx, req.chat).await?;
    if !req.stream {
        drive::whole(&mut b, chunks).await.map_err(ApiError::from)?;
        return Ok(Json(b.message()).into_response());
    }
    let end: drive::Then<Builder> = Box::new(|_, closing| Box::pin(async move { closing }));
    Ok(super::sse::response(drive::events(b, chunks, end)))
}

/// An estimate of the request's input tokens: a quarter of the characters of
/// its chat translation's text (no vendor tokenizer is at hand).
pub async fn count_tokens(State(s): State<Arc<Core>>, body: Bytes) -> Result<Response, Error> {
    let req = parse(&s, &body).await?;
    Ok(Json(json!({"input_tokens": estimate(&req.chat)})).into_response())
}

fn estimate(chat: &crate::openai::ChatRequest) -> u64 {
    let mut chars = 0usize;
    for m in &chat.messages {
        chars += text_chars(&m.content);
        if let Some(calls) = m.extra.get("tool_calls") {
            chars += calls.to_string().chars().count();
        }
    }
    if let Some(tools) = &chat.tools {
        chars += tools.iter().map(|t| t.to_string().chars().count()).sum::<usize>();
    }
    chars.div_ceil(4) as u64
}

fn text_chars(v: &Value) -> usize {
    match v {
        Value::String(s) => s.chars().count(),
        Value::Array(parts) => parts.iter().map(|p| p.get("text").map_or(0, text_chars)).sum(),
        _ => 0,
    }
}

/// A model list (OpenAI's entries) in Anthropic's shape, for `GET
/// /v1/models` asked with `anthropic-version`.
pub fn model_list(data: &[Value]) -> Value {
    let models: Vec<Value> = data
        .iter()
        .filter_map(|m| m["id"].as_str())
        .map(|id| json!({"type": "model", "id": id, "display_name": id, "created_at": "1970-01-01T00:00:00Z"}))
        .collect();
    let first = models.first().map_or(Value::Null, |m| m["id"].clone());
    let last = models.last().map_or(Value::Null, |m| m["id"].clone());
    json!({"data": models, "has_more": false, "first_id": first, "last_id": last})
}

/// Whether a status is an error this front's routes answer in Anthropic's shape.
pub fn is_error(status: StatusCode) -> bool {
    status.is_client_error() || status.is_server_error()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_shapes_by_status() {
        let kinds: Vec<&str> = [400, 401, 403, 404, 413, 429, 500, 502, 529].iter().map(|s| error_type(*s)).collect();
        assert_eq!(
            kinds,
            [
                "invalid_request_error",
                "authentication_error",
                "permission_error",
                "not_found_error",
                "request_too_large",
                "rate_limit_error",
                "api_error",
                "api_error",
                "overloaded_error"
            ]
        );
        let body = br#"{"error":{"message":"Incorrect API key provided.","type":"invalid_request_error","code":"invalid_api_key"}}"#;
        assert_eq!(
            from_openai(401, body),
            Some(
                json!({"type": "error", "error": {"type": "authentication_error", "message": "Incorrect API key provided."}})
            )
        );
        assert_eq!(from_openai(401, br#"{"type":"error","error":{"type":"x","message":"m"}}"#), None);
    }

    #[test]
    fn token_estimate_is_a_quarter_of_the_text() {
        let r = request::parse(
            br#"{"model":"m","system":"abcd","messages":[{"role":"user","content":"efghij"}]}"#,
            &|_| None,
        )
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(estimate(&r.chat), 3);
    }
}
