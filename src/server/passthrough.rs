//! Endpoints forwarded as they are: `POST /v1/embeddings`.

use std::sync::Arc;

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Extension, State};
use serde_json::Value;

use super::Shared;
use super::edge::RequestCtx;
use crate::core::route_for;
use crate::error::ApiError;
use crate::provider::UpstreamError;
use crate::provider::upstream::Reply;

pub async fn embeddings(
    State(s): State<Shared>,
    Extension(ctx): Extension<Arc<RequestCtx>>,
    body: Bytes,
) -> Result<Json<Value>, ApiError> {
    let mut v: Value =
        serde_json::from_slice(&body).map_err(|e| ApiError::invalid(format!("invalid JSON body: {e}")))?;
    let model =
        v.get("model").and_then(Value::as_str).ok_or_else(|| ApiError::invalid_param("model", "missing model"))?;
    let route = route_for(&s, model)?;
    v["model"] = Value::String(route.model.clone());
    match s.upstream.post(&route.provider, "embeddings", &v, ctx.shown()).await? {
        Reply::Json(body) => Ok(Json(body.parse("JSON")?)),
        Reply::Events(_) => Err(UpstreamError::Protocol("embeddings answered with a stream".into()).into()),
    }
}
