//! The transparent agent loop: when server-side tools are configured, the
//! fronts hand the request over, to [`items`] (chunks and trace entries,
//! chat completions) or [`chunks`] (chunks only, the Responses API).
//!
//! Each iteration calls the upstream with the client's tools plus the
//! server's, normalized exactly like the plain path (so calls recovered from
//! text count the same as native ones). Text and reasoning stream to the
//! client as they arrive; tool-call deltas are held until the iteration ends
//! and then split by name:
//!
//! * only server calls: run them (the dispatcher), append the assistant turn
//!   and the results, call the upstream again — the client sees none of it;
//! * client calls (with or without server calls): the server calls run, the
//!   client gets only its own calls as ordinary `tool_calls`, and the hidden
//!   part is stored for the splice ([`splice`]) of the next request;
//! * no calls: the answer ends.
//!
//! The loop ends early at `[tools] max_iterations` upstream calls or at the
//! deadline, with a note in the text and `finish_reason: "length"`. Usage
//! is summed over every iteration. A client tool that has the name of a
//! server tool shadows it (the client's wins; a warning is logged).
//!
//! With Agent Skills loaded, the skills section joins the system message,
//! and the tools offered are worked out again before every iteration: a
//! tool that waits for a skill ([`crate::skills::gate`]) is offered once the
//! history (spliced exchanges included) shows that skill was read. A call of
//! a tool still waiting is answered with an error result saying which skill
//! to read.

pub mod splice;
pub mod steps;

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::stream::BoxStream;
use futures_util::{Stream, StreamExt};
use serde_json::{Map, Value, json};

use crate::core::Core;
use crate::core::context::RequestCtx;
use crate::core::pipeline::{self, Reader};
use crate::error::ApiError;
use crate::openai::{ChatRequest, Chunk, ChunkChoice, Delta, FunctionDelta, Message, ToolCallDelta};
use crate::provider::{ReasoningReplay, Route, UpstreamError};
use crate::state::conversation::Chain;
use crate::toolcall::ToolIndex;
use crate::tools::batch::run_batch;
use crate::tools::{CallOutcome, CallRequest, Catalog, Registry, Status, ToolOutput};

/// What the loop produces for the client.
pub enum Item {
    /// The first upstream answer arrived: the response can start.
    Started,
    Chunk(Chunk),
    Trace(Value),
}

/// One tool call as the model made it.
#[derive(Debug, Clone, Default)]
struct Call {
    id: String,
    name: String,
    arguments: String,
}

impl Call {
    fn to_openai(&self) -> Value {
        json!({"id": self.id, "type": "function", "function": {"name": self.name, "arguments": self.arguments}})
    }
}

/// Everything one request's loop needs.
struct Loop {
    s: Arc<Core>,
    /// The model's route or fallback chain: each iteration is sent along it
    /// from the route that answered the one before.
    routes: Vec<Route>,
    registry: Arc<Registry>,
    catalog: Arc<Catalog>,
    /// The client's request with the hidden history spliced in.
    base: ChatRequest,
    /// The conversation as the client sent it (the splice key of this
    /// turn's answer continues it).
    client_chain: Chain,
    client_tools: Vec<Value>,
    client_names: HashSet<String>,
    /// Trace entries are made (the client asked for them).
    trace: bool,
    /// The request's observer; its console record, when one is kept, gets
    /// every trace entry, asked for or not.
    ctx: Arc<RequestCtx>,
    want_usage: bool,
}

/// The loop's answer as plain chunks (no trace), for front ends that
/// translate it into another API (`/v1/responses`).
pub async fn chunks(
    s: Arc<Core>,
    ctx: Arc<RequestCtx>,
    registry: Arc<Registry>,
    routes: Vec<Route>,
    req: ChatRequest,
) -> Result<BoxStream<'static, Result<Chunk, UpstreamError>>, ApiError> {
    let items = items(s, ctx, registry, routes, req, false).await?;
    Ok(items
        .filter_map(|it| {
            futures_util::future::ready(match it {
                Ok(Item::Chunk(c)) => Some(Ok(c)),
                Ok(Item::Started | Item::Trace(_)) => None,
                Err(e) => Some(Err(e)),
            })
        })
        .boxed())
}

/// Starts the loop (trace entries made with `trace`); returns once the
/// first upstream answer is in hand.
pub async fn items(
    s: Arc<Core>,
    ctx: Arc<RequestCtx>,
    registry: Arc<Registry>,
    routes: Vec<Route>,
    mut req: ChatRequest,
    trace: bool,
) -> Result<BoxStream<'static, Result<Item, UpstreamError>>, ApiError> {
    registry.ensure_started().await;
    let catalog = registry.catalog();
    let client_stream = req.is_stream();
    let want_usage = client_stream && req.wants_usage();
    let client_tools: Vec<Value> = req.tools.take().unwrap_or_default();
    let client_names: HashSet<String> = ToolIndex::from_openai(&client_tools).names().map(str::to_string).collect();
    for e in catalog.offered().filter(|e| client_names.contains(&e.spec.name)) {
        tracing::warn!(tool = %e.spec.name, "a client tool shadows the server tool of the same name; the client's wins");
    }
    // The loop drives one choice.
    req.extra.remove("n");
    let owner = ctx.key.clone();
    let owner = owner.as_deref();
    let client_chain = Chain::each(owner, &req.messages).last().copied().unwrap_or_else(|| Chain::new(owner));
    req.messages = splice::apply(s.store.as_ref(), owner, std::mem::take(&mut req.messages)).await;
    // The skills section first: each iteration's request has it, so the
    // conversation its reasoning is kept under does too.
    if let Some(section) = &catalog.skills_section {
        crate::skills::prompt::apply(&mut req.messages, section);
    }
    let lp = Loop {
        s,
        routes,
        registry,
        catalog,
        base: req,
        client_chain,
        client_tools,
        client_names,
        trace,
        ctx,
        want_usage,
    };
    let mut items = lp.stream().boxed();
    // Wait for the first upstream answer so an upstream that fails at once
    // still gets a proper HTTP status.
    match items.next().await {
        Some(Err(e)) => Err(e.into()),
        None => Err(UpstreamError::Protocol("the upstream sent nothing".into()).into()),
        Some(Ok(first)) => Ok(futures_util::stream::iter([Ok(first)]).chain(items).boxed()),
    }
}

/// The tools of one iteration.
struct Offer {
    /// The client's tools and the server tools offered now.
    tools: Vec<Value>,
    /// Every server tool a call may name (offered or waiting for a skill).
    server: HashSet<String>,
    /// The skills read so far in this conversation.
    read: BTreeSet<String>,
}

impl Loop {
    /// The tools to offer given the history so far.
    fn offer(&self, history: &[Message]) -> Offer {
        let read =
            if self.catalog.locks.is_empty() { BTreeSet::new() } else { crate::skills::gate::read_skills(history) };
        let mut tools = self.client_tools.clone();
        let mut server = HashSet::new();
        for e in self.catalog.offered().filter(|e| !self.client_names.contains(&e.spec.name)) {
            server.insert(e.spec.name.clone());
            if self.catalog.locks.waiting_for(&e.spec.name, &read).is_none() {
                tools.push(e.spec.to_openai());
            }
        }
        Offer { tools, server, read }
    }

    /// The upstream request of one iteration.
    /// Rewritten for whichever route answers it, like the client's own.
    fn request(&self, history: &[Message], iteration: u32, offer: &Offer) -> ChatRequest {
        let mut req = self.base.clone();
        req.messages = history.to_vec();
        req.tools = (!offer.tools.is_empty()).then(|| offer.tools.clone());
        if iteration > 1 {
            // A forced choice would make the model call tools forever.
            if let Some(tc) = req.extra.get_mut("tool_choice")
                && tc != "none"
            {
                *tc = json!("auto");
            }
        }
        req
    }

    /// Runs a batch, except calls of tools still waiting for a skill: those
    /// get an error result naming the skill to read. Results keep call order.
    async fn run_gated(&self, calls: Vec<CallRequest>, read: &BTreeSet<String>, cap: Duration) -> Vec<CallOutcome> {
        let locks = &self.catalog.locks;
        let (open, waiting): (Vec<_>, Vec<_>) =
            calls.iter().cloned().enumerate().partition(|(_, c)| locks.waiting_for(&c.name, read).is_none());
        let ran = run_batch(self.catalog.clone(), open.iter().map(|(_, c)| c.clone()).collect(), Some(cap)).await;
        let mut slots: Vec<Option<CallOutcome>> = vec![None; calls.len()];
        for ((i, _), o) in open.iter().zip(ran) {
            slots[*i] = Some(o);
        }
        for (i, call) in waiting {
            let skills = locks.waiting_for(&call.name, read).unwrap_or_default().join("`, `");
            let msg = format!(
                "The tool `{}` is available after reading the skill `{skills}` (call read_skill first).",
                call.name
            );
            slots[i] = Some(CallOutcome {
                call,
                output: ToolOutput::error(msg),
                status: Status::Unknown,
                duration: Duration::ZERO,
            });
        }
        slots.into_iter().flatten().collect()
    }

    /// Whether trace entries are made: for the client or the console.
    fn tracing(&self) -> bool {
        self.trace || self.ctx.shown.is_some()
    }

    /// A trace entry goes to the console, and to the client if it asked.
    fn pass(&self, it: Item) -> Option<Item> {
        match it {
            Item::Trace(t) => {
                if let Some(c) = &self.ctx.shown {
                    c.timeline(t.clone());
                }
                self.trace.then_some(Item::Trace(t))
            }
            it => Some(it),
        }
    }

    /// The console's timeline entry of an iteration starting: the skills
    /// read so far and the tools they unlocked.
    fn show_iteration(&self, iteration: u32, offer: &Offer, route: &Route) {
        let Some(c) = &self.ctx.shown else { return };
        let none = BTreeSet::new();
        let locks = &self.catalog.locks;
        let unlocked: Vec<&str> = offer
            .server
            .iter()
            .filter(|n| locks.waiting_for(n, &none).is_some() && locks.waiting_for(n, &offer.read).is_none())
            .map(String::as_str)
            .collect();
        let mut offered: Vec<&str> = offer.server.iter().map(String::as_str).collect();
        offered.sort_unstable();
        c.timeline(json!({"type": "iteration", "iteration": iteration, "provider": route.provider.name,
                          "model": route.model, "skills_read": offer.read, "tools_unlocked": unlocked,
                          "server_tools": offered}));
    }

    /// The console's timeline entry of what the model said in an iteration:
    /// its text and calls; `last` marks the answer the client got.
    fn show_turn(&self, iteration: u32, turn: &Turn, last: bool) {
        let Some(c) = &self.ctx.shown else { return };
        let calls: Vec<Value> = turn
            .calls
            .values()
            .map(|k| json!({"id": k.id, "tool": k.name, "arguments": arguments_value(&k.arguments)}))
            .collect();
        c.timeline(json!({"type": "model_turn", "iteration": iteration, "text": turn.content, "calls": calls,
                          "final": last, "finish_reason": turn.finish}));
    }

    fn stream(self) -> impl Stream<Item = Result<Item, UpstreamError>> + Send {
        async_stream::stream! {
            let cfg = &self.registry.config;
            let max = cfg.max_iterations.max(1);
            let deadline = Instant::now() + cfg.deadline();
            let out_of_time = format!("the tool loop ran out of its time budget ({:.0}s)", cfg.deadline_secs);
            let mut history = self.base.messages.clone();
            let mut hidden: Vec<Message> = Vec::new();
            let mut out = Out::default();
            let mut started = false;
            let mut iteration = 0;
            let mut final_reasoning = String::new();
            // Where in the chain the next iteration starts: the route that
            // answered the last one (its prompt cache, its reasoning format).
            let mut from = 0;
            // For a profile that replays reasoning, the conversation as the
            // client sent it: a final turn with no hidden part keeps its
            // reasoning under this key (a hidden part carries it in the splice).
            let mut conversation = None;
            loop {
                iteration += 1;
                let remaining = deadline.saturating_duration_since(Instant::now());
                if remaining.is_zero() {
                    for it in out.stop(&out_of_time, "deadline", self.tracing()) { if let Some(it) = self.pass(it) { yield Ok(it); } }
                    break;
                }
                let offer = self.offer(&history);
                let req = self.request(&history, iteration, &offer);
                let call = pipeline::begin(&self.s, &self.ctx, &self.routes[from..], req, Reader::Loop);
                let (route, mut chunks) = match tokio::time::timeout(remaining, call).await {
                    Ok(Ok(begun)) => {
                        from += begun.index;
                        if iteration == 1 {
                            conversation = begun.conversation;
                        }
                        (begun.route, begun.started.chunks(&self.s))
                    }
                    Ok(Err(e)) => { yield Err(upstream_error(e)); return; }
                    Err(_) => {
                        for it in out.stop(&out_of_time, "deadline", self.tracing()) { if let Some(it) = self.pass(it) { yield Ok(it); } }
                        break;
                    }
                };
                self.show_iteration(iteration, &offer, &route);
                let replay = route.provider.profile.thinking.replay_for(&route.model);
                let mut turn = Turn::default();
                let mut timed_out = false;
                loop {
                    let left = deadline.saturating_duration_since(Instant::now());
                    match tokio::time::timeout(left, chunks.next()).await {
                        Err(_) => { timed_out = true; break; }
                        Ok(None) => break,
                        Ok(Some(Err(e))) => { yield Err(e); return; }
                        Ok(Some(Ok(chunk))) => {
                            if !started {
                                started = true;
                                if let Some(c) = &self.ctx.shown {
                                    c.first_token();
                                }
                                yield Ok(Item::Started);
                            }
                            for c in out.take(chunk, &mut turn) { yield Ok(Item::Chunk(c)); }
                        }
                    }
                }
                if timed_out {
                    for it in out.stop(&out_of_time, "deadline", self.tracing()) { if let Some(it) = self.pass(it) { yield Ok(it); } }
                    hidden.push(assistant(&turn, &replay, &[]));
                    break;
                }
                let (server, client): (Vec<Call>, Vec<Call>) =
                    turn.calls.values().cloned().partition(|c| offer.server.contains(&c.name));
                self.show_turn(iteration, &turn, server.is_empty());
                if server.is_empty() {
                    let finish = if client.is_empty() {
                        match turn.finish.as_deref() {
                            Some("tool_calls") | None => "stop".to_string(),
                            Some(f) => f.to_string(),
                        }
                    } else {
                        "tool_calls".to_string()
                    };
                    for c in out.finish(&client, &finish) { yield Ok(Item::Chunk(c)); }
                    hidden.push(assistant(&turn, &replay, &client));
                    final_reasoning = std::mem::take(&mut turn.reasoning);
                    break;
                }
                if iteration >= max && client.is_empty() {
                    let why =
                        format!("the model was still calling tools after {max} model calls (max_iterations = {max})");
                    for it in out.stop(&why, "max_iterations", self.tracing()) { if let Some(it) = self.pass(it) { yield Ok(it); } }
                    hidden.push(assistant(&turn, &replay, &[]));
                    break;
                }
                let requests: Vec<CallRequest> = server
                    .iter()
                    .map(|c| CallRequest { id: c.id.clone(), name: c.name.clone(), arguments: c.arguments.clone() })
                    .collect();
                let cap = deadline.saturating_duration_since(Instant::now());
                if let Some(c) = &self.ctx.shown {
                    let calls: Vec<Value> = requests.iter().map(|r| json!({"id": r.id, "tool": r.name,
                        "arguments": arguments_value(&r.arguments)})).collect();
                    c.timeline(json!({"type": "tool_calls_started", "iteration": iteration, "calls": calls}));
                }
                let outcomes = self.run_gated(requests, &offer.read, cap).await;
                if let Some(c) = &self.ctx.shown {
                    for o in &outcomes {
                        c.timeline(steps::console_entry(o, iteration, cfg.trace_result_chars));
                    }
                }
                if self.trace {
                    for o in &outcomes {
                        yield Ok(Item::Trace(steps::entry(o, iteration, cfg.trace_result_chars)));
                    }
                }
                let all: Vec<Call> = turn.calls.values().cloned().collect();
                // Images go on when the model sees them or the bridge describes them.
                let images_on = match route.provider.sees(&route.model) {
                    Some(sees) => sees || self.s.vision_bridge.is_some(),
                    None => false,
                };
                let (results, images) = tool_messages(&outcomes, images_on);
                let mut exchange = vec![assistant(&turn, &replay, &all)];
                exchange.extend(results);
                if !client.is_empty() {
                    // Mixed turn: the client answers its calls; images wait
                    // until after the client's tool results.
                    hidden.extend(exchange);
                    for c in out.finish(&client, "tool_calls") { yield Ok(Item::Chunk(c)); }
                    out.after = images.into_iter().collect();
                    break;
                }
                exchange.extend(images);
                history.extend(exchange.iter().cloned());
                hidden.extend(exchange);
            }
            if let (Some(c), Some(u)) = (&self.ctx.shown, &out.usage) {
                c.set_usage(u);
            }
            for c in out.usage_chunk(self.want_usage) { yield Ok(Item::Chunk(c)); }
            if out.saw_hidden(&hidden) {
                let mut answer = self.client_chain;
                answer.push_assistant(&out.visible, &out.client_ids);
                splice::save(self.s.store.as_ref(), self.s.state_ttl, &answer.key(), &hidden, &out.after).await;
            } else if let Some(conversation) = conversation
                && !out.client_ids.is_empty()
            {
                let mut answer = conversation;
                answer.push_assistant(&out.visible, &out.client_ids);
                crate::core::reasoning::remember_turn(self.s.store.as_ref(), self.s.state_ttl, &answer, &final_reasoning).await;
            }
        }
    }
}

/// One iteration's assistant turn as it arrives.
#[derive(Default)]
struct Turn {
    content: String,
    reasoning: String,
    calls: BTreeMap<u32, Call>,
    finish: Option<String>,
}

/// What the client has been sent so far, and the pieces of the last chunks.
#[derive(Default)]
struct Out {
    meta: Option<Chunk>,
    role_sent: bool,
    /// All text the client saw.
    visible: String,
    /// Separate the text of a new iteration from the last one.
    new_iteration: bool,
    usage: Option<Value>,
    client_ids: Vec<String>,
    held_finish: Option<Chunk>,
    after: Vec<Message>,
}

impl Out {
    fn blank(&self) -> Chunk {
        let mut c = self.meta.clone().unwrap_or_default();
        c.choices.clear();
        c.usage = None;
        c
    }

    /// Takes one normalized upstream chunk: records calls and the finish
    /// reason, returns what the client should see now.
    fn take(&mut self, mut chunk: Chunk, turn: &mut Turn) -> Vec<Chunk> {
        if let Some(u) = chunk.usage.take() {
            add_usage(&mut self.usage, u);
        }
        if self.meta.is_none() {
            let mut m = chunk.clone();
            m.choices.clear();
            self.meta = Some(m);
        }
        let mut out = Vec::new();
        for ch in std::mem::take(&mut chunk.choices).into_iter().filter(|c| c.index == 0) {
            let ChunkChoice { delta, finish_reason, extra, .. } = ch;
            let Delta { content, reasoning_content, tool_calls, extra: delta_extra, .. } = delta;
            turn.reasoning.push_str(reasoning_content.as_deref().unwrap_or(""));
            for tc in tool_calls.into_iter().flatten() {
                let call = turn.calls.entry(tc.index.unwrap_or(0)).or_default();
                if let Some(id) = tc.id {
                    call.id = id;
                }
                if let Some(f) = tc.function {
                    if let Some(n) = f.name {
                        call.name.push_str(&n);
                    }
                    if let Some(Value::String(a)) = f.arguments {
                        call.arguments.push_str(&a);
                    }
                }
            }
            if finish_reason.is_some() {
                turn.finish = finish_reason;
            }
            let mut d = Delta { extra: delta_extra, ..Delta::default() };
            if let Some(t) = content.filter(|t| !t.is_empty()) {
                turn.content.push_str(&t);
                let mut t = t;
                if self.new_iteration && !self.visible.is_empty() && !self.visible.ends_with(char::is_whitespace) {
                    t.insert_str(0, "\n\n");
                }
                self.new_iteration = false;
                self.visible.push_str(&t);
                d.content = Some(t);
            }
            d.reasoning_content = reasoning_content.filter(|r| !r.is_empty());
            if d.content.is_none() && d.reasoning_content.is_none() && d.extra.is_empty() {
                continue;
            }
            let mut c = self.blank();
            c.extra = chunk.extra.clone();
            c.choices.push(ChunkChoice { index: 0, delta: self.with_role(d), finish_reason: None, extra });
            out.push(c);
        }
        // The next text comes from a later iteration.
        if turn.finish.is_some() {
            self.new_iteration = true;
        }
        out
    }

    fn with_role(&mut self, mut d: Delta) -> Delta {
        if !self.role_sent {
            d.role = Some("assistant".into());
            self.role_sent = true;
        }
        d
    }

    /// The client's calls and the finish chunk (held back for usage).
    fn finish(&mut self, client: &[Call], reason: &str) -> Vec<Chunk> {
        let mut out = Vec::new();
        let calls: Vec<ToolCallDelta> = client
            .iter()
            .enumerate()
            .map(|(i, c)| ToolCallDelta {
                index: Some(i as u32),
                id: Some(c.id.clone()),
                kind: Some("function".into()),
                function: Some(FunctionDelta {
                    name: Some(c.name.clone()),
                    arguments: Some(Value::String(c.arguments.clone())),
                    extra: Map::new(),
                }),
                extra: Map::new(),
            })
            .collect();
        self.client_ids = client.iter().map(|c| c.id.clone()).collect();
        if !calls.is_empty() {
            let mut c = self.blank();
            let d = self.with_role(Delta { tool_calls: Some(calls), ..Delta::default() });
            c.choices.push(ChunkChoice { index: 0, delta: d, finish_reason: None, extra: Map::new() });
            out.push(c);
        }
        let mut f = self.blank();
        let d = self.with_role(Delta::default());
        f.choices.push(ChunkChoice { index: 0, delta: d, finish_reason: Some(reason.into()), extra: Map::new() });
        self.held_finish = Some(f);
        out
    }

    /// Ends the loop early with a note the client can read.
    fn stop(&mut self, why: &str, reason: &str, trace: bool) -> Vec<Item> {
        let sep = if self.visible.is_empty() { "" } else { "\n\n" };
        let note = format!("{sep}[modelshim] Stopped: {why}.");
        self.visible.push_str(&note);
        let mut c = self.blank();
        let d = self.with_role(Delta { content: Some(note), ..Delta::default() });
        c.choices.push(ChunkChoice { index: 0, delta: d, finish_reason: None, extra: Map::new() });
        let mut items = vec![Item::Chunk(c)];
        if trace {
            items.push(Item::Trace(json!({"type": "loop_stopped", "reason": reason, "message": why})));
        }
        items.extend(self.finish(&[], "length").into_iter().map(Item::Chunk));
        items
    }

    /// The held finish chunk and the usage, as the plain path sends them.
    fn usage_chunk(&mut self, want_usage: bool) -> Vec<Chunk> {
        let mut out = Vec::new();
        let mut fin = self.held_finish.take();
        match self.usage.take() {
            Some(u) if want_usage => {
                out.extend(fin);
                let mut c = self.blank();
                c.usage = Some(u);
                out.push(c);
            }
            Some(u) => {
                if let Some(f) = fin.as_mut() {
                    f.usage = Some(u);
                }
                out.extend(fin);
            }
            None => out.extend(fin),
        }
        out
    }

    /// Whether this turn had a hidden part worth splicing back.
    fn saw_hidden(&self, hidden: &[Message]) -> bool {
        hidden.len() > 1 || !self.after.is_empty()
    }
}

/// An assistant message of the upstream history, with its reasoning in the
/// form the vendor wants it replayed (hidden turns never pass the client, so
/// nothing else would put it back).
fn assistant(turn: &Turn, replay: &ReasoningReplay, calls: &[Call]) -> Message {
    let mut extra = Map::new();
    if !calls.is_empty() {
        extra.insert("tool_calls".into(), Value::Array(calls.iter().map(Call::to_openai).collect()));
    }
    let content = &turn.content;
    let content = if content.is_empty() && !calls.is_empty() { Value::Null } else { Value::String(content.clone()) };
    let mut m = Message { role: "assistant".into(), content, extra };
    if !calls.is_empty() {
        crate::core::reasoning::attach(&mut m, &turn.reasoning, *replay);
    }
    m
}

/// The `tool` messages of a batch, and a `user` message with the images
/// when the model takes images (tool messages may carry text only).
fn tool_messages(outcomes: &[CallOutcome], vision: bool) -> (Vec<Message>, Option<Message>) {
    let mut msgs = Vec::new();
    let mut parts = Vec::new();
    for o in outcomes {
        let mut extra = Map::new();
        extra.insert("tool_call_id".into(), Value::String(o.call.id.clone()));
        msgs.push(Message { role: "tool".into(), content: Value::String(o.output.model_text(vision)), extra });
        if vision {
            for (i, (mime, data)) in o.output.images().enumerate() {
                parts.push(json!({"type": "text", "text": format!("Image {} returned by the tool call {} ({}):", i + 1, o.call.id, o.call.name)}));
                parts.push(json!({"type": "image_url", "image_url": {"url": format!("data:{mime};base64,{data}")}}));
            }
        }
    }
    let images =
        (!parts.is_empty()).then(|| Message { role: "user".into(), content: Value::Array(parts), extra: Map::new() });
    (msgs, images)
}

/// Adds usage objects field by field (nested details too).
pub fn add_usage(total: &mut Option<Value>, u: Value) {
    if u.is_null() {
        return;
    }
    match total {
        None => *total = Some(u),
        Some(t) => merge_sum(t, &u),
    }
}

fn merge_sum(t: &mut Value, u: &Value) {
    match (t, u) {
        (Value::Object(a), Value::Object(b)) => {
            for (k, v) in b {
                match a.get_mut(k) {
                    Some(x) => merge_sum(x, v),
                    None => {
                        a.insert(k.clone(), v.clone());
                    }
                }
            }
        }
        (x @ Value::Number(_), Value::Number(n)) => {
            if let (Some(a), Some(b)) = (x.as_u64(), n.as_u64()) {
                *x = json!(a + b);
            } else if let (Some(a), Some(b)) = (x.as_f64(), n.as_f64()) {
                *x = json!(a + b);
            }
        }
        _ => {}
    }
}

/// A call's arguments as shown: the JSON they hold, else the text.
fn arguments_value(arguments: &str) -> Value {
    serde_json::from_str(arguments).unwrap_or_else(|_| Value::String(arguments.to_string()))
}

/// A later iteration's failure, as the loop's stream carries it.
fn upstream_error(e: ApiError) -> UpstreamError {
    match e {
        ApiError::Upstream(e) => e,
        other => UpstreamError::Protocol(other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn usage_is_summed_field_by_field() {
        let mut t = None;
        add_usage(
            &mut t,
            json!({"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4,
            "completion_tokens_details": {"reasoning_tokens": 1}}),
        );
        add_usage(
            &mut t,
            json!({"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7, "cost": 0.5,
            "completion_tokens_details": {"reasoning_tokens": 2}}),
        );
        assert_eq!(
            t.unwrap(),
            json!({"prompt_tokens": 8, "completion_tokens": 3, "total_tokens": 11,
            "completion_tokens_details": {"reasoning_tokens": 3}, "cost": 0.5})
        );
    }

    #[test]
    fn text_of_a_new_iteration_is_separated() {
        let mut out = Out::default();
        let mut turn = Turn::default();
        let mk = |content: &str, finish: Option<&str>| Chunk {
            choices: vec![ChunkChoice {
                index: 0,
                delta: Delta { content: Some(content.into()), ..Default::default() },
                finish_reason: finish.map(str::to_string),
                extra: Map::new(),
            }],
            ..Default::default()
        };
        let a = out.take(mk("Let me check.", Some("tool_calls")), &mut turn);
        assert_eq!(a[0].choices[0].delta.role.as_deref(), Some("assistant"));
        let b = out.take(mk("It is noon.", None), &mut Turn::default());
        assert_eq!(b[0].choices[0].delta.content.as_deref(), Some("\n\nIt is noon."));
        assert_eq!(out.visible, "Let me check.\n\nIt is noon.");
    }
}
