//! Sends one chat request upstream: along the model's fallback chain (an
//! alias with several targets), each target normalized for its own profile
//! and called through [`crate::provider::resilience`] (retries, circuit
//! breaker). Also where time-to-first-token and token usage are measured,
//! since this is where the upstream's answer first shows up.

use std::sync::Arc;

use futures_util::future::BoxFuture;
use serde_json::Value;

use super::Core;
use super::context::RequestCtx;
use crate::error::ApiError;
use crate::openai::ChatRequest;
use crate::provider::context as provider_context;
use crate::provider::request::Plan;
use crate::provider::upstream::Reply;
use crate::provider::{Route, UpstreamError, request, resilience};
use crate::state::conversation::Chain;

/// What [`send`] got back: the route that answered (and its place in the
/// chain), how its request was rewritten, its reply, and (for a profile
/// that replays reasoning) the conversation the reply answers, under whose
/// key its reasoning is kept.
pub struct Sent {
    pub route: Route,
    /// The answering route's index in the chain [`send`] was given.
    pub index: usize,
    pub plan: Plan,
    pub reply: Reply,
    pub conversation: Option<Chain>,
    /// A whole answer's turn of the request's spend, for its usage once parsed.
    pub turn: Option<Arc<crate::spend::Turn>>,
    /// A streamed answer's, for whoever reads its events.
    pub meter: Option<Meter>,
}

/// What a streamed answer used, counted by whoever reads its events (the
/// pipeline's reader, the vision bridge): every event, for an estimate when
/// no usage comes, and the upstream's `usage` (metrics, the console, spend).
/// Counted where the chunks are parsed anyway, so the events the fast path
/// forwards (which carry no usage) are not searched for it.
pub struct Meter {
    ctx: Arc<RequestCtx>,
    provider: Arc<crate::provider::Provider>,
    model: String,
    turn: Arc<crate::spend::Turn>,
}

impl Meter {
    /// One event read.
    pub fn event(&self) {
        self.turn.event();
    }

    /// A parsed chunk's usage, when it has one: at the top, or in a choice
    /// (where Kimi puts it, on the last chunk).
    pub fn chunk(&self, c: &crate::openai::Chunk) {
        let in_choice = || c.choices.iter().find_map(|ch| ch.extra.get("usage"));
        if let Some(u) = c.usage.as_ref().or_else(in_choice).filter(|u| u.is_object()) {
            let p = &self.provider;
            let fields = &p.profile.response.usage;
            self.ctx.usage(&p.name, p.metric_model(&self.model), u, Some((&self.turn, fields)));
        }
    }
}

/// A request's route or fallback chain — its scenario's (`[routes]`) or its
/// model's — or a 404 naming what would work.
pub fn routes(s: &Core, req: &ChatRequest) -> Result<Vec<Route>, ApiError> {
    let routes = s.providers.routes_for(req);
    if !routes.is_empty() {
        return Ok(routes);
    }
    Err(not_routed(s, &req.model))
}

/// The 404 of a model name no route serves.
pub fn not_routed(s: &Core, model: &str) -> ApiError {
    let names: Vec<&str> = s.providers.iter().map(|p| p.name.as_str()).collect();
    ApiError::ModelNotFound(format!(
        "The model `{model}` does not exist or is not routed: use `provider/model` with one of the configured providers ({}), or an alias from [models].",
        names.join(", ")
    ))
}

/// What a route whose model cannot see is sent instead of a request with
/// images: the request with every image described (`super::vision`).
pub trait Describer: Send + Sync {
    fn described<'a>(&'a self, req: &'a ChatRequest) -> BoxFuture<'a, Result<ChatRequest, ApiError>>;
}

/// Sends the request along `routes` (one route, or an alias's fallback
/// chain): the one way every upstream call of a chat request takes, the
/// agent loop's iterations included. A context overflow moves on only to a
/// later target with a larger window. Each route decides whether it sees:
/// one that cannot gets the request as `describer` describes it (made once,
/// on the first such route), or is passed over when there is none.
pub async fn send(
    s: &Core,
    ctx: &Arc<RequestCtx>,
    routes: &[Route],
    req: ChatRequest,
    describer: Option<&dyn Describer>,
) -> Result<Sent, ApiError> {
    if routes.is_empty() {
        return Err(not_routed(s, &req.model));
    }
    let images = req.has_image();
    // Each target rewrites a copy of its own; the last one takes the client's
    // request (the common single route makes no copy).
    let mut req = Some(req);
    let mut described: Option<ChatRequest> = None;
    let (mut failed, mut floor, mut blind) = (None, None, None);
    for (i, route) in routes.iter().enumerate() {
        if floor.is_some_and(|w| !provider_context::larger(route, w)) {
            continue;
        }
        let later = &routes[i + 1..];
        let r = if images && route.provider.sees(&route.model) == Some(false) {
            let Some(d) = describer else {
                blind.get_or_insert_with(|| cannot_see(route));
                continue;
            };
            if described.is_none()
                && let Some(original) = req.as_ref()
            {
                described = Some(d.described(original).await?);
            }
            if later.is_empty() { described.take() } else { described.clone() }
        } else if later.is_empty() {
            req.take()
        } else {
            req.clone()
        };
        let Some(r) = r else { break };
        let e = match attempt(s, ctx, route, r).await {
            Ok(sent) => return Ok(Sent { index: i, ..sent }),
            Err(e) if !later.is_empty() => e,
            Err(e) => return Err(ApiError::from(e)),
        };
        let next = match provider_context::moves_on(&e, route, later) {
            Some(w) => {
                floor = Some(w);
                later.iter().find(|r| provider_context::larger(r, w))
            }
            None if resilience::falls_back(&e) => {
                later.iter().find(|r| floor.is_none_or(|w| provider_context::larger(r, w)))
            }
            None => return Err(ApiError::from(e)),
        };
        let Some(next) = next else { return Err(ApiError::from(e)) };
        ctx.fallback(&route.provider.name, &next.provider.name, &e);
        failed = Some(e);
    }
    match (failed, blind) {
        (Some(e), _) => Err(ApiError::from(e)),
        (None, Some(e)) => Err(e),
        (None, None) => Err(not_routed(s, "")),
    }
}

/// The 400 of an image sent to a model that cannot see, with no
/// `[vision_bridge]` to describe it (rather than the vendor's own 400).
pub fn cannot_see(route: &Route) -> ApiError {
    ApiError::invalid_param(
        "messages",
        format!(
            "The model `{}/{}` cannot see images, and this request has an image. Set `[vision_bridge] model = \"PROVIDER/MODEL\"` in the config to a model that sees, and images are described for it; or send this request to a model that sees (docs/vision.md).",
            route.provider.name, route.model
        ),
    )
}

/// One target of the chain: the request rewritten for its profile, sent
/// with retries.
async fn attempt(s: &Core, ctx: &Arc<RequestCtx>, route: &Route, mut req: ChatRequest) -> Result<Sent, UpstreamError> {
    let p = &route.provider;
    ctx.set_served(p, &route.model);
    // Before the rewrites: prompt mode turns tool-call turns into text.
    let owner = ctx.key.as_deref();
    let conversation =
        super::reasoning::prepare_history(&mut req, &p.profile, &route.model, s.store.as_ref(), owner).await;
    let price = p.prices.of(&route.model);
    if price.is_some() || ctx.spend.counted() {
        ask_for_usage(&mut req);
    }
    let plan = request::normalize(&mut req, &p.profile, &route.model, p.prompt_for(&route.model));
    // Boxed, so the request's future splits into two allocations below the
    // allocator's 8 KiB size class: a request's future there, freed dirty
    // over both its pages, was reused as an open stream's connection buffer,
    // of which one page is used, so every open stream held a page more.
    let reply = Box::pin(resilience::post_chat(&s.upstream, p, &req, s.store.as_ref(), owner, ctx.shown())).await?;
    let (turn, meter) = measured(&reply, ctx, route, price);
    Ok(Sent { route: route.clone(), index: 0, plan, reply, conversation, turn, meter })
}

/// A streamed request asks the upstream for its usage (OpenAI-compatible
/// servers send it only when asked), so what it costs can be counted; the
/// normalizer sends the client only the usage it asked for. A profile that
/// drops `stream_options` still does.
pub(crate) fn ask_for_usage(req: &mut ChatRequest) {
    if !req.is_stream() || req.wants_usage() {
        return;
    }
    match req.extra.get_mut("stream_options").and_then(Value::as_object_mut) {
        Some(o) => {
            o.insert("include_usage".into(), Value::Bool(true));
        }
        None => {
            req.extra.insert("stream_options".into(), serde_json::json!({"include_usage": true}));
        }
    }
}

/// Records time to first token now, and starts the answer's turn of the
/// spend: a whole answer's usage is counted where it is parsed, a stream's
/// by its [`Meter`].
fn measured(
    reply: &Reply,
    ctx: &Arc<RequestCtx>,
    route: &Route,
    price: Option<Arc<crate::spend::Price>>,
) -> (Option<Arc<crate::spend::Turn>>, Option<Meter>) {
    let p = &route.provider;
    let label = p.metric_model(&route.model);
    ctx.first_token(&p.name, label);
    let turn = ctx.spend.turn(&p.name, label, price);
    match reply {
        Reply::Json(body) => {
            turn.body(body.bytes().len());
            (Some(turn), None)
        }
        Reply::Events(_) => {
            let meter = Meter { ctx: ctx.clone(), provider: p.clone(), model: route.model.clone(), turn };
            (None, Some(meter))
        }
    }
}
