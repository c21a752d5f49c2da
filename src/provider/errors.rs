//! Vendor error bodies to OpenAI's error shape. Every shape seen in the wild
//! (OpenAI-like, Zhipu string business codes, SiliconFlow
//! `{code,data,message}`, MiniMax `base_resp`, Qianfan `error_code`, plain
//! text) is read here once; the status is chosen so the OpenAI SDKs raise
//! the matching exception. The upstream's own message and code are kept.

use axum::http::StatusCode;
use serde_json::{Map, Value};

use super::Profile;
use crate::openai::ErrorObject;

/// Why an upstream call failed. The upstream's own words (an error body,
/// the start of a bad answer) may echo a key: both ways out, `Display` (logs,
/// spans) and [`UpstreamError::to_openai`] (the client), redact every known
/// secret ([`crate::redact`]).
#[derive(Debug, Clone)]
pub enum UpstreamError {
    /// The upstream could not be reached.
    Connect(String),
    /// The upstream did not answer in time.
    Timeout(String),
    /// The upstream answered with an error.
    Status { status: u16, error: Box<ErrorObject> },
    /// The upstream answered something that is not a chat completion.
    Protocol(String),
    /// A stream ended without `[DONE]`: an error unless every choice had
    /// finished (vendors that stop after their finish chunk), which only the
    /// reader of the chunks knows (`core/pipeline.rs`).
    Incomplete(String),
}

impl std::error::Error for UpstreamError {}

impl std::fmt::Display for UpstreamError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let r = crate::redact::global();
        match self {
            UpstreamError::Connect(m) => write!(f, "upstream connection failed: {}", r.text(m)),
            UpstreamError::Timeout(m) => write!(f, "upstream timed out: {}", r.text(m)),
            UpstreamError::Status { status, error } => write!(f, "upstream error {status}: {}", r.text(&error.message)),
            UpstreamError::Protocol(m) => write!(f, "invalid upstream response: {}", r.text(m)),
            UpstreamError::Incomplete(m) => write!(f, "upstream stream ended early: {}", r.text(m)),
        }
    }
}

impl UpstreamError {
    /// The status and error object the client gets, secrets redacted.
    pub fn to_openai(&self) -> (StatusCode, ErrorObject) {
        let (status, mut e) = self.to_openai_raw();
        e.redact();
        (status, e)
    }

    fn to_openai_raw(&self) -> (StatusCode, ErrorObject) {
        match self {
            UpstreamError::Connect(m) => (
                StatusCode::BAD_GATEWAY,
                ErrorObject::new("api_connection_error", m.clone()).with_code("upstream_unreachable"),
            ),
            UpstreamError::Timeout(m) => (
                StatusCode::GATEWAY_TIMEOUT,
                ErrorObject::new("timeout_error", m.clone()).with_code("upstream_timeout"),
            ),
            UpstreamError::Protocol(m) => {
                (StatusCode::BAD_GATEWAY, ErrorObject::new("api_error", m.clone()).with_code("bad_upstream_response"))
            }
            UpstreamError::Incomplete(m) => (
                StatusCode::BAD_GATEWAY,
                ErrorObject::new(
                    "api_connection_error",
                    format!("The upstream stream ended before it was complete: {m}."),
                )
                .with_code("upstream_stream_incomplete"),
            ),
            UpstreamError::Status { status, error } => {
                (StatusCode::from_u16(*status).unwrap_or(StatusCode::BAD_GATEWAY), (**error).clone())
            }
        }
    }
}

/// Maps an upstream error answer (HTTP status and body) to the status the
/// client sees and an OpenAI error object.
pub fn map_error(profile: &Profile, status: u16, body: &[u8]) -> UpstreamError {
    let parsed: Option<Value> = serde_json::from_slice(body).ok();
    let (message, code, param, kind_hint) = match &parsed {
        Some(v) => read_fields(v),
        None => (String::from_utf8_lossy(body).trim().to_string(), None, None, None),
    };
    let message = if message.is_empty() { format!("upstream returned HTTP {status}") } else { message };
    let mapped = code.as_deref().and_then(|c| profile.errors.codes.get(c)).copied().unwrap_or(status);
    let (status, kind, default_code) = classify(mapped, kind_hint.as_deref());
    let mut extra = Map::new();
    extra.insert("upstream_status".into(), Value::from(mapped));
    if let Some(v) = parsed.filter(|v| v.get("error").is_none_or(|e| !e.is_object())) {
        // A non-OpenAI shape: keep the whole body so nothing is lost.
        extra.insert("upstream_body".into(), v);
    }
    UpstreamError::Status {
        status: status.as_u16(),
        error: Box::new(ErrorObject { message, kind, param, code: code.or(default_code), extra, retry_after: None }),
    }
}

/// Detects errors that some vendors send with HTTP 200 (MiniMax `base_resp`,
/// Qianfan v1 `error_code`).
pub fn error_in_success(profile: &Profile, body: &Value) -> Option<UpstreamError> {
    let failed =
        body.get("base_resp").and_then(|b| b.get("status_code")).and_then(Value::as_i64).is_some_and(|c| c != 0)
            || body.get("error_code").is_some_and(|c| !c.is_null() && c != 0)
            || (body.get("error").is_some_and(Value::is_object) && body.get("choices").is_none());
    if !failed {
        return None;
    }
    let bytes = serde_json::to_vec(body).unwrap_or_default();
    let status = profile_status(profile, body).unwrap_or(400);
    Some(map_error(profile, status, &bytes))
}

fn profile_status(profile: &Profile, body: &Value) -> Option<u16> {
    let (_, code, _, _) = read_fields(body);
    code.as_deref().and_then(|c| profile.errors.codes.get(c)).copied()
}

/// `(message, code, param, type)` from any known error body shape.
fn read_fields(v: &Value) -> (String, Option<String>, Option<String>, Option<String>) {
    let s = |x: Option<&Value>| -> Option<String> {
        match x? {
            Value::String(s) => Some(s.clone()),
            Value::Number(n) => Some(n.to_string()),
            _ => None,
        }
    };
    if let Some(e) = v.get("error") {
        if let Some(msg) = e.as_str() {
            return (msg.to_string(), s(v.get("code")), None, None);
        }
        return (s(e.get("message")).unwrap_or_default(), s(e.get("code")), s(e.get("param")), s(e.get("type")));
    }
    if let Some(b) = v.get("base_resp") {
        return (s(b.get("status_msg")).unwrap_or_default(), s(b.get("status_code")), None, None);
    }
    if v.get("error_code").is_some() {
        return (s(v.get("error_msg")).unwrap_or_default(), s(v.get("error_code")), None, None);
    }
    let msg = s(v.get("message")).or_else(|| s(v.get("msg"))).or_else(|| s(v.get("detail"))).unwrap_or_default();
    (msg, s(v.get("code")), None, None)
}

/// The status the client sees, OpenAI's error `type`, and a default code.
fn classify(status: u16, hint: Option<&str>) -> (StatusCode, String, Option<String>) {
    let (st, kind, code) = match status {
        400 | 413 | 422 => (status, "invalid_request_error", None),
        401 => (401, "authentication_error", Some("invalid_api_key")),
        // OpenAI reports an empty balance as 429 insufficient_quota.
        402 => (429, "insufficient_quota", Some("insufficient_quota")),
        403 => (403, "permission_error", None),
        404 => (404, "invalid_request_error", Some("model_not_found")),
        409 => (409, "conflict_error", None),
        429 => (429, "rate_limit_exceeded", Some("rate_limit_exceeded")),
        // "Content failed review" is a content-policy refusal of the input.
        451 => (400, "invalid_request_error", Some("content_filter")),
        s if s >= 500 => (s, "api_error", None),
        s => (s, "invalid_request_error", None),
    };
    let kind = hint.filter(|h| !h.is_empty() && st < 500).unwrap_or(kind).to_string();
    (StatusCode::from_u16(st).unwrap_or(StatusCode::BAD_GATEWAY), kind, code.map(str::to_string))
}

/// `Retry-After` (seconds; HTTP dates are rare from APIs and ignored) or
/// the `retry-after-ms` some vendors send.
pub fn retry_after(h: &reqwest::header::HeaderMap) -> Option<std::time::Duration> {
    let get = |name: &str| h.get(name).and_then(|v| v.to_str().ok()).and_then(|v| v.trim().parse::<f64>().ok());
    let d = match get("retry-after-ms") {
        Some(ms) => ms / 1000.0,
        None => get("retry-after")?,
    };
    (d.is_finite() && d >= 0.0).then(|| std::time::Duration::from_secs_f64(d.min(86_400.0)))
}

/// The upstream's error with the wait it asked for.
pub fn with_retry_after(mut e: super::UpstreamError, ra: Option<std::time::Duration>) -> super::UpstreamError {
    if let super::UpstreamError::Status { error, .. } = &mut e {
        error.retry_after = ra;
    }
    e
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(p: &Profile, status: u16, body: &str) -> (u16, ErrorObject) {
        let (s, e) = map_error(p, status, body.as_bytes()).to_openai();
        (s.as_u16(), e)
    }

    #[test]
    fn vendor_shapes() {
        let mut glm = Profile::default();
        glm.errors.codes.insert("1113".into(), 402);
        let (s, e) = map(&glm, 429, r#"{"error":{"code":"1113","message":"余额不足"}}"#);
        assert_eq!((s, e.message.as_str(), e.code.as_deref()), (429, "余额不足", Some("1113")));
        assert_eq!(e.kind, "insufficient_quota");

        let p = Profile::default();
        let (s, e) = map(&p, 401, r#"{"code":30014,"data":null,"message":"Token is invalid."}"#);
        assert_eq!((s, e.message.as_str(), e.code.as_deref()), (401, "Token is invalid.", Some("30014")));
        assert!(e.extra.contains_key("upstream_body"));

        let (s, e) = map(&p, 451, r#"{"error":{"message":"content failed review","type":"x"}}"#);
        assert_eq!((s, e.code.as_deref()), (400, Some("content_filter")));

        let (s, e) = map(&p, 503, "upstream overloaded");
        assert_eq!((s, e.message.as_str(), e.kind.as_str()), (503, "upstream overloaded", "api_error"));
    }

    #[test]
    fn errors_inside_200() {
        let mut mm = Profile::default();
        mm.errors.codes.insert("1008".into(), 402);
        let body = serde_json::json!({"base_resp": {"status_code": 1008, "status_msg": "insufficient balance"}});
        let e = error_in_success(&mm, &body).map(|e| e.to_openai());
        assert_eq!(e.map(|(s, e)| (s.as_u16(), e.message)), Some((429, "insufficient balance".to_string())));
        assert!(error_in_success(&mm, &serde_json::json!({"choices": [], "base_resp": {"status_code": 0}})).is_none());
    }

    #[test]
    fn an_echoed_key_is_redacted_in_the_client_error_and_in_display() {
        crate::redact::install(vec!["unit-echoed-key-42".into()]);
        let p = Profile::default();
        let body =
            r#"{"message":"Incorrect API key provided: Bearer unit-echoed-key-42","data":{"k":"unit-echoed-key-42"}}"#;
        let e = map_error(&p, 401, body.as_bytes());
        assert!(!e.to_string().contains("unit-echoed-key-42"), "{e}");
        let (_, obj) = e.to_openai();
        let out = obj.to_body().to_string();
        assert!(!out.contains("unit-echoed-key-42") && out.contains("Bearer [REDACTED]"), "{out}");
        let proto = UpstreamError::Protocol("not JSON: unit-echoed-key-42".into());
        assert!(!format!("{proto}").contains("unit-echoed-key-42"));
        assert!(!proto.to_openai().1.message.contains("unit-echoed-key-42"));
    }
}
