//! [`ApiError`] as an HTTP response: its status, OpenAI's error body, and
//! `Retry-After` when the error carries one.

use axum::response::{IntoResponse, Response};

use crate::error::ApiError;

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
