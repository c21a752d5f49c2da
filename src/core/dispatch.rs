//! Sends one chat request upstream: along the model's fallback chain (an
//! alias with several targets), each target normalized for its own profile
//! and called through [`crate::provider::resilience`] (retries, circuit
//! breaker). Also where time-to-first-token and token usage are measured,
//! since this is where the upstream's answer first shows up.

use std::sync::Arc;

use futures_util::StreamExt;
use serde_json::Value;

use super::Core;
use super::context::{self, RequestCtx};
use crate::error::ApiError;
use crate::openai::ChatRequest;
use crate::provider::request::Plan;
use crate::provider::upstream::Reply;
use crate::provider::{Route, UpstreamError, request, resilience};
use crate::state::conversation::Chain;

/// What [`send`] got back: the route that answered, how its request was
/// rewritten, its reply, and (for a profile that replays reasoning) the
/// conversation the reply answers, under whose key its reasoning is kept.
pub struct Sent {
    pub route: Route,
    pub plan: Plan,
    pub reply: Reply,
    pub conversation: Option<Chain>,
}

/// Sends the request along its route or fallback chain.
pub async fn send(s: &Core, req: ChatRequest) -> Result<Sent, ApiError> {
    let routes = s.providers.routes(&req.model);
    let Some((last, before)) = routes.split_last() else {
        return Err(super::pipeline::route_for(s, &req.model)
            .err()
            .unwrap_or(ApiError::ModelNotFound(req.model.clone())));
    };
    let ctx = context::current();
    // Each target rewrites a copy of its own; the last one takes the client's
    // request (the common single route makes no copy).
    for (i, route) in before.iter().enumerate() {
        match attempt(s, ctx.as_ref(), route, req.clone()).await {
            Err(e) if resilience::falls_back(&e) => {
                let (from, to) = (&route.provider.name, &routes[i + 1].provider.name);
                crate::metrics::fallback(from, to);
                crate::console::with(|c| c.fallback(from, to, &e.to_string()));
                tracing::warn!(from = %from, to = %to, error = %e, "falling back to the next provider");
            }
            r => return r.map_err(ApiError::from),
        }
    }
    attempt(s, ctx.as_ref(), last, req).await.map_err(ApiError::from)
}

/// One target of the chain: the request rewritten for its profile, sent
/// with retries.
async fn attempt(
    s: &Core,
    ctx: Option<&Arc<RequestCtx>>,
    route: &Route,
    mut req: ChatRequest,
) -> Result<Sent, UpstreamError> {
    let p = &route.provider;
    if let Some(c) = ctx {
        c.set_served(p, &route.model);
    }
    // Before the rewrites: prompt mode turns tool-call turns into text.
    let owner = ctx.and_then(|c| c.key.as_deref());
    let conversation =
        super::reasoning::prepare_history(&mut req, &p.profile, &route.model, s.store.as_ref(), owner).await;
    let plan = request::normalize(&mut req, &p.profile, &route.model, p.prompt_for(&route.model));
    // Boxed, so the request's future splits into two allocations below the
    // allocator's 8 KiB size class: a request's future there, freed dirty
    // over both its pages, was reused as an open stream's connection buffer,
    // of which one page is used, so every open stream held a page more.
    let reply = Box::pin(resilience::post(&s.upstream, p, "chat/completions", &req)).await?;
    let reply = measured(reply, ctx.cloned(), &p.name, p.metric_model(&route.model));
    Ok(Sent { route: route.clone(), plan, reply, conversation })
}

/// Records time to first token now, and a stream's token usage when it goes by.
fn measured(reply: Reply, ctx: Option<Arc<RequestCtx>>, provider: &str, model: &str) -> Reply {
    if let Some(c) = &ctx {
        crate::metrics::first_token(provider, model, c.start.elapsed());
    }
    crate::console::with(crate::console::Entry::first_token);
    match reply {
        // A whole answer's usage is counted where it is parsed (chat::plain).
        json @ Reply::Json(_) => json,
        Reply::Events(events) => {
            let (provider, model) = (provider.to_string(), model.to_string());
            Reply::Events(Box::pin(events.inspect(move |ev| {
                // Only the chunk carrying usage is parsed twice.
                if let Ok(data) = ev
                    && data.contains("\"usage\"")
                    && let Ok(v) = serde_json::from_str::<Value>(data)
                    && let Some(u) = v.get("usage").filter(|u| u.is_object())
                {
                    crate::metrics::usage(&provider, &model, u);
                    crate::console::with(|c| c.usage(u));
                }
            })))
        }
    }
}
