//! The Responses API front end (`POST /v1/responses`,
//! `GET /v1/responses/{id}`), translated onto chat completions rather than
//! implemented twice: [`request`] turns the body (and the stored history of
//! `previous_response_id`) into a `ChatRequest`, which takes exactly the
//! path of `/v1/chat/completions` (routing, dispatch, the normalizer with
//! tool-call recovery, the agent loop with server-side tools and skills, the
//! reasoning round trip); [`events`] turns the normalized chunks into the
//! Responses event stream or one response object; [`store`] keeps finished
//! responses in the conversation-state store. Routes: `POST /v1/responses`,
//! `GET` and `DELETE /v1/responses/{id}`, `GET /v1/responses/{id}/input_items`.

pub mod events;
pub mod names;
pub mod request;
pub mod store;

use std::sync::Arc;

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Extension, Path, Query, State};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::drive::{self, Translate as _};
use crate::core::Core;
use crate::core::context::RequestCtx;
use crate::error::ApiError;
use crate::state::sealed::OpenError;
use events::{Builder, new_id};
use request::Request;

/// The text of an item this proxy sealed for `owner`; anything else is
/// ignored (logged): the item then counts as its readable text.
fn open_sealed(s: &Core, sealed: &str, owner: Option<&str>) -> Option<String> {
    match s.sealer.open(sealed, owner) {
        Ok(text) => Some(text),
        // Another backend's item (a conversation begun on OpenAI): expected.
        Err(e @ OpenError::Foreign) => {
            tracing::debug!("encrypted reasoning ignored: {e}");
            None
        }
        Err(e) => {
            tracing::warn!("encrypted reasoning ignored: {e}");
            None
        }
    }
}

/// Whether the request asks for `encrypted_content` in reasoning items.
fn wants_sealed(req: &Request) -> bool {
    req.body
        .get("include")
        .and_then(Value::as_array)
        .is_some_and(|i| i.iter().any(|v| v.as_str() == Some("reasoning.encrypted_content")))
}

pub async fn create(
    State(s): State<Arc<Core>>,
    Extension(ctx): Extension<Arc<RequestCtx>>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let mut req = request::parse(&body)?;
    let owner = ctx.key.clone();
    if req.input.len() > s.limits.max_messages {
        return Err(ApiError::invalid_param(
            "input",
            format!("Too many input items: {}, the limit is {}.", req.input.len(), s.limits.max_messages),
        ));
    }
    store::resolve(&s, owner.as_deref(), &mut req.input).await?;
    let history = match &req.previous_response_id {
        Some(id) => match store::load(&s, owner.as_deref(), id).await? {
            Some(stored) => stored.items,
            None => {
                return Err(ApiError::NotFound {
                    message: format!("Previous response with id '{id}' not found."),
                    param: Some("previous_response_id".into()),
                    code: "previous_response_not_found",
                });
            }
        },
        None => Vec::new(),
    };
    let names = server_tool_names(&s, &req).await;
    let lookup = |kind: &str| -> Option<String> {
        let suffix = format!("__{kind}");
        names.iter().find(|n| *n == kind || n.ends_with(&suffix)).cloned()
    };
    let (chat, names) = {
        let open = |sealed: &str| open_sealed(&s, sealed, owner.as_deref());
        let opts = request::Options { server_tool: &lookup, drop_hosted: &s.responses.drop_hosted_tools, open: &open };
        request::to_chat_with(&req, &history, &opts)?
    };
    // The edge counts the body's `tools`; a namespace or an
    // `additional_tools` item holds more, counted as offered.
    let offered = chat.tools.as_ref().map_or(0, Vec::len);
    if offered > s.limits.max_tools {
        return Err(ApiError::invalid_param(
            "tools",
            format!("Too many tools: {offered} with those in namespaces, the limit is {}.", s.limits.max_tools),
        ));
    }
    // The edge counts `messages` of chat bodies; here they exist only now,
    // with the stored history in them.
    let max = s.limits.max_messages;
    if chat.messages.len() > max {
        return Err(ApiError::invalid_param(
            "input",
            format!("Too many messages: {} with the earlier turns, the limit is {max}.", chat.messages.len()),
        ));
    }
    // Likewise the body limit: the stored turns make the upstream's body
    // larger than what the client sent.
    let max = s.limits.max_body_bytes;
    if !history.is_empty() && json_len(&chat) > max {
        crate::metrics::refused("body_too_large");
        return Err(ApiError::TooLarge(format!(
            "The request with its earlier turns (previous_response_id) is larger than the limit of {max} bytes."
        )));
    }
    let new = history.len();
    let mut items = history;
    items.extend(req.input.iter().cloned());
    let mut builder = Builder::new(skeleton(&req, &new_id("resp"))).with_names(names);
    if wants_sealed(&req) {
        let (sealer, owner) = (s.sealer.clone(), owner.clone());
        builder = builder.with_seal(Box::new(move |text| sealer.seal(text, owner.as_deref())));
    }
    // Returns once the upstream answered: an upstream that fails at once
    // gets its HTTP status and OpenAI error body here.
    let chunks = crate::core::answer(&s, &ctx, chat).await?;
    if req.stream {
        return Ok(stream(s, builder, chunks, items, new, req.store.then_some(owner)));
    }
    let mut b = builder;
    drive::whole(&mut b, chunks).await?;
    b.finish();
    if req.store {
        save(&s, owner.as_deref(), &b, items, new).await;
    }
    Ok(Json(b.response().clone()).into_response())
}

/// What the model is asked for when a conversation is compacted.
const COMPACT_PROMPT: &str = "Context compaction: write a summary of the conversation above that lets another model continue the task without it. Keep the goal, the decisions made, what was done and found (files, commands, results), what is left to do, and anything the user asked for. Answer with the summary only.";

/// `POST /v1/responses/compact` (Codex's remote compaction; Codex 0.171
/// with a custom provider compacts with a plain `/v1/responses` call
/// instead): the same model summarizes the input, and the answer is the
/// input's user messages and one `compaction` item holding the summary
/// sealed like encrypted reasoning, which becomes a user message again
/// when it comes back in a later request's input.
pub async fn compact(
    State(s): State<Arc<Core>>,
    Extension(ctx): Extension<Arc<RequestCtx>>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let mut req = request::parse(&body)?;
    let owner = ctx.key.clone();
    if req.input.len() > s.limits.max_messages {
        return Err(ApiError::invalid_param(
            "input",
            format!("Too many input items: {}, the limit is {}.", req.input.len(), s.limits.max_messages),
        ));
    }
    store::resolve(&s, owner.as_deref(), &mut req.input).await?;
    let kept: Vec<Value> = req
        .input
        .iter()
        .filter(|it| it.get("type").and_then(Value::as_str) == Some("message") && it["role"] == "user")
        .cloned()
        .collect();
    req.input.push(json!({"type": "message", "role": "user", "content": COMPACT_PROMPT}));
    req.stream = false;
    for k in ["tool_choice", "parallel_tool_calls", "text", "previous_response_id"] {
        req.body.remove(k);
    }
    req.previous_response_id = None;
    let mut chat = {
        let none = |_: &str| None;
        let open = |sealed: &str| open_sealed(&s, sealed, owner.as_deref());
        // The tools stay declared (a namespace call in the history needs its
        // name) but the model is not offered them.
        let opts = request::Options { server_tool: &none, drop_hosted: &s.responses.drop_hosted_tools, open: &open };
        request::to_chat_with(&req, &[], &opts)?.0
    };
    chat.tools = None;
    chat.extra.remove("tool_choice");
    let mut b = Builder::new(json!({"id": new_id("resp"), "output": []}));
    let chunks = crate::core::answer(&s, &ctx, chat).await?;
    drive::whole(&mut b, chunks).await?;
    b.finish();
    let r = b.response();
    let summary: String = r["output"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|it| it["type"] == "message")
        .filter_map(|it| it["content"][0]["text"].as_str())
        .collect::<Vec<_>>()
        .join("\n");
    let Some(sealed) = s.sealer.seal(&summary, owner.as_deref()) else {
        return Err(ApiError::invalid("The summary could not be sealed."));
    };
    let mut output = kept;
    output.push(json!({"type": "compaction", "id": new_id("cmp"), "encrypted_content": sealed}));
    Ok(Json(json!({
        "id": r["id"],
        "object": "response.compaction",
        "created_at": crate::openai::now(),
        "output": output,
        "usage": r["usage"],
    }))
    .into_response())
}

/// The length of `v` as JSON, counted without building the text.
fn json_len(v: &impl serde::Serialize) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0 += b.len();
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut c = Count(0);
    match serde_json::to_writer(&mut c, v) {
        Ok(()) => c.0,
        Err(_) => usize::MAX,
    }
}

pub async fn retrieve(
    State(s): State<Arc<Core>>,
    Extension(ctx): Extension<Arc<RequestCtx>>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    match store::load(&s, ctx.key.as_deref(), &id).await? {
        Some(stored) => Ok(Json(stored.response).into_response()),
        None => Err(not_found(&id)),
    }
}

pub async fn delete(
    State(s): State<Arc<Core>>,
    Extension(ctx): Extension<Arc<RequestCtx>>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    if store::delete(&s, ctx.key.as_deref(), &id).await? {
        Ok(Json(json!({"id": id, "object": "response", "deleted": true})).into_response())
    } else {
        Err(not_found(&id))
    }
}

/// `order` (`asc`, `desc`: the default, as on OpenAI), `limit` (1–100,
/// default 20) and `after` (an item id) of an input-item listing.
#[derive(Debug, serde::Deserialize)]
pub struct ListParams {
    order: Option<String>,
    limit: Option<usize>,
    after: Option<String>,
}

pub async fn input_items(
    State(s): State<Arc<Core>>,
    Extension(ctx): Extension<Arc<RequestCtx>>,
    Path(id): Path<String>,
    Query(q): Query<ListParams>,
) -> Result<Response, ApiError> {
    let Some(stored) = store::load(&s, ctx.key.as_deref(), &id).await? else {
        return Err(not_found(&id));
    };
    let mut items = store::input_items(&stored);
    match q.order.as_deref() {
        None | Some("desc") => items.reverse(),
        Some("asc") => {}
        Some(other) => {
            return Err(ApiError::invalid_param("order", format!("`order` must be `asc` or `desc`, not `{other}`.")));
        }
    }
    if let Some(after) = &q.after {
        match items.iter().position(|it| it["id"].as_str() == Some(after)) {
            Some(p) => {
                items.drain(..=p);
            }
            None => return Err(ApiError::invalid_param("after", format!("No input item `{after}` in this response."))),
        }
    }
    let limit = q.limit.unwrap_or(20).clamp(1, 100);
    let has_more = items.len() > limit;
    items.truncate(limit);
    let first = items.first().map(|it| it["id"].clone()).unwrap_or(Value::Null);
    let last = items.last().map(|it| it["id"].clone()).unwrap_or(Value::Null);
    Ok(Json(json!({"object": "list", "data": items, "first_id": first, "last_id": last, "has_more": has_more}))
        .into_response())
}

fn not_found(id: &str) -> ApiError {
    ApiError::NotFound { message: format!("Response with id '{id}' not found."), param: None, code: "not_found" }
}

/// The names of the configured server-side tools, looked up only when the
/// request declares a hosted tool (they may serve it).
async fn server_tool_names(s: &Core, req: &Request) -> Vec<String> {
    let hosted = req.body.get("tools").and_then(Value::as_array).is_some_and(|tools| {
        tools.iter().any(|t| t.get("type").and_then(Value::as_str).is_some_and(|k| k != "function"))
    });
    if !hosted {
        return Vec::new();
    }
    crate::core::server_tool_names(s).await
}

/// Stores the finished response with the conversation up to it.
async fn save(s: &Core, owner: Option<&str>, b: &Builder, mut items: Vec<Value>, new: usize) {
    let r = b.response();
    items.extend(r["output"].as_array().cloned().unwrap_or_default());
    store::save(s, owner, r, items, new).await;
}

/// The response object as created: the request's settings echoed, no output.
fn skeleton(req: &Request, id: &str) -> Value {
    let b = &req.body;
    let get = |k: &str, default: Value| b.get(k).filter(|v| !v.is_null()).cloned().unwrap_or(default);
    let effort = b.get("reasoning").and_then(|r| r.get("effort")).cloned().unwrap_or(Value::Null);
    let summary = b.get("reasoning").and_then(|r| r.get("summary")).cloned().unwrap_or(Value::Null);
    json!({
        "id": id,
        "object": "response",
        "created_at": crate::openai::now(),
        "status": "in_progress",
        "background": false,
        "error": null,
        "incomplete_details": null,
        "instructions": get("instructions", Value::Null),
        "max_output_tokens": get("max_output_tokens", Value::Null),
        "max_tool_calls": get("max_tool_calls", Value::Null),
        "model": req.model,
        "output": [],
        "parallel_tool_calls": get("parallel_tool_calls", json!(true)),
        "previous_response_id": req.previous_response_id,
        "reasoning": {"effort": effort, "summary": summary},
        "store": req.store,
        "temperature": get("temperature", json!(1.0)),
        "text": get("text", json!({"format": {"type": "text"}})),
        "tool_choice": get("tool_choice", json!("auto")),
        "tools": get("tools", json!([])),
        "top_p": get("top_p", json!(1.0)),
        "truncation": get("truncation", json!("disabled")),
        "usage": null,
        "user": get("user", Value::Null),
        "metadata": get("metadata", json!({})),
    })
}

/// The event stream. An upstream failure mid-stream is `response.failed`;
/// the response is stored before its last events go out, so a client that
/// sends the next turn the moment it sees `response.completed` finds it.
fn stream(
    s: Arc<Core>,
    b: Builder,
    chunks: drive::Chunks,
    items: Vec<Value>,
    new: usize,
    // Stored for this proxy key (`Some(None)` with auth off), or not stored.
    keep: Option<Option<String>>,
) -> Response {
    let end: drive::Then<Builder> = Box::new(move |mut b, mut closing| {
        Box::pin(async move {
            if let Some(owner) = &keep {
                save(&s, owner.as_deref(), &b, items, new).await;
            }
            closing.push(b.terminal());
            closing
        })
    });
    super::sse::response(drive::events(b, chunks, end))
}
