//! Every front's entry to the core: a parsed chat request to its normalized
//! answer, through the agent loop when server-side tools or skills are
//! active, else as one upstream answer; held to its schema first when it
//! asks for structured output ([`super::structured`]). All take the same
//! way to the upstream ([`super::pipeline::begin`]).

use std::sync::Arc;

use futures_util::stream::BoxStream;

use super::Core;
use super::context::RequestCtx;
use crate::error::ApiError;
use crate::openai::{ChatRequest, Chunk};
use crate::provider::{Route, UpstreamError};

/// The normalized answer as a stream of chunks. It returns once the
/// upstream's first answer is in hand, so an upstream that fails at once is
/// an `Err` (a proper HTTP status), not a stream.
pub async fn answer(
    s: &Arc<Core>,
    ctx: &Arc<RequestCtx>,
    req: ChatRequest,
) -> Result<BoxStream<'static, Result<Chunk, UpstreamError>>, ApiError> {
    if super::structured::wanted(&req) {
        return super::structured::answer(s, ctx, req, looping(s)).await;
    }
    match looping(s) {
        Some(tools) => {
            let routes = super::route::routes(s, &req)?;
            super::agent::chunks(s.clone(), ctx.clone(), tools, routes, req).await
        }
        None => Ok(super::pipeline::start(s, ctx, req, false).await?.chunks(s)),
    }
}

/// The tool registry when the agent loop runs: a registry with nothing
/// active right now (no tool configured, no skill loaded) keeps the plain path.
pub fn looping(s: &Core) -> Option<Arc<crate::tools::Registry>> {
    s.tools.clone().filter(|t| t.active())
}

/// The first route of a model name (routes that cannot fall back: embeddings).
pub fn route_for(s: &Core, model: &str) -> Result<Route, ApiError> {
    s.providers.route(model).ok_or_else(|| super::route::not_routed(s, model))
}

/// The exposed names of the server-side tools offered to the model (a front
/// maps its hosted or typed tools onto them).
pub async fn server_tool_names(s: &Core) -> Vec<String> {
    let Some(registry) = s.tools.clone() else { return Vec::new() };
    registry.ensure_started().await;
    registry.catalog().offered().map(|e| e.spec.name.clone()).collect()
}
