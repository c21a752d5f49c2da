//! One upstream answer of a chat request ([`begin`]): dispatched along its
//! route chain, the answer normalized for the route that answered
//! (streamed and non-streamed answers share the normalizer, see
//! [`crate::stream`], so their outcome is the same), and the reasoning of
//! tool-call turns remembered. The plain path is one such answer; the
//! agent loop's iterations are each one.

use std::sync::Arc;

use futures_util::stream::BoxStream;
use futures_util::{Stream, StreamExt};
use serde_json::Value;

use super::Core;
use super::context::RequestCtx;
use super::route::Meter;
use crate::error::ApiError;
use crate::openai::{ChatRequest, Chunk, Completion};
use crate::provider::upstream::{Events, JsonBody, Reply};
use crate::provider::{Route, UpstreamError};
use crate::state::StateStore;
use crate::state::conversation::Chain;
use crate::stream::{Data, Forwarded, Normalizer, completion_to_chunk, normalize::Settings};
use crate::toolcall::ToolIndex;

/// The plain path (no server-side tools) up to the answer: dispatched, and
/// the answer in hand (a whole one normalized, a stream's first chunk read).
#[allow(clippy::large_enum_variant)] // made and moved once per request
pub enum Started {
    Whole(Vec<Chunk>),
    /// A whole answer the normalizer would not change, to be sent on as the
    /// upstream wrote it (made only when asked for; see
    /// [`Normalizer::whole_as_is`]).
    AsIs(JsonBody),
    Stream {
        conversation: Option<Chain>,
        events: Events,
        /// The first chunk, normalized (forwarded, or parsed to be pushed).
        first: Option<Out>,
        norm: Normalizer,
        meter: Option<Meter>,
    },
}

impl Started {
    /// The normalized chunks of the answer.
    pub fn chunks(self, s: &Core) -> BoxStream<'static, Result<Chunk, UpstreamError>> {
        match self {
            Started::Whole(chunks) => futures_util::stream::iter(chunks.into_iter().map(Ok)).boxed(),
            // (`answer` does not ask for it.) The answer as one chunk: it
            // assembles to the body, as the normalizer's chunks would.
            Started::AsIs(body) => {
                let chunk = body.parse("a chat completion").map(completion_to_chunk);
                futures_util::stream::once(async move { chunk }).boxed()
            }
            Started::Stream { events, first, norm, conversation, meter } => {
                let reading = Reading { meter, memo: memo(s, conversation), max: s.limits.max_answer_bytes };
                normalized(events, first, norm, reading).boxed()
            }
        }
    }
}

/// Who reads a started answer, which decides how it is normalized.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Reader {
    /// A front, for the client's own request. With `as_is`, a whole answer
    /// the normalizer would not change is kept as the upstream's bytes
    /// ([`Started::AsIs`]).
    Client { as_is: bool },
    /// An iteration of the agent loop: every tool (the server's too) is
    /// recovered, usage rides on the last chunk, and the loop keeps the
    /// reasoning itself.
    Loop,
}

/// An answer begun on one route of a chain.
pub struct Begun {
    /// The route that answered and its index in the chain.
    pub route: Route,
    pub index: usize,
    /// The conversation the answer continues (a profile that replays
    /// reasoning), under whose key its reasoning is kept.
    pub conversation: Option<Chain>,
    pub started: Started,
}

/// The client's request on its model's route or fallback chain.
pub async fn start(s: &Core, ctx: &Arc<RequestCtx>, req: ChatRequest, as_is: bool) -> Result<Started, ApiError> {
    let routes = super::route::routes(s, &req)?;
    Ok(begin(s, ctx, &routes, req, Reader::Client { as_is }).await?.started)
}

/// The one way to the upstream: `req` sent along `routes` ([`super::route`]:
/// fallback, retries, breaker, rewriting, measurement), and the answer in
/// hand, normalized for the route that answered.
pub async fn begin(
    s: &Core,
    ctx: &Arc<RequestCtx>,
    routes: &[Route],
    req: ChatRequest,
    reader: Reader,
) -> Result<Begun, ApiError> {
    let looping = reader == Reader::Loop;
    let as_is = reader == Reader::Client { as_is: true };
    let client_stream = req.is_stream();
    let client_tools = req.tools.clone().unwrap_or_default();
    let declares_tools = looping || req.declares_tools();
    let want_usage = !looping && client_stream && req.wants_usage();
    let single_call = !looping && req.extra.get("parallel_tool_calls") == Some(&Value::Bool(false));
    let bridge = s.vision_bridge.as_ref().map(|c| super::vision::Bridge::new(s, ctx, c));
    let super::route::Sent { route, index, plan, reply, conversation, turn, meter } =
        super::route::send(s, ctx, routes, req, bridge.as_ref().map(|b| b as _)).await?;
    let provider = route.provider.clone();
    // The loop remembers reasoning itself (the splice, or its last turn's).
    let memo_conversation = if looping { None } else { conversation };
    let tools = if plan.tools_offered { tool_index(&client_tools, &plan.names_back) } else { ToolIndex::default() };
    let settings = Settings {
        formats: provider.formats_for(&route.model, declares_tools, plan.prompt),
        tools: Arc::new(tools),
        starts_in_reasoning: provider.profile.response.starts_in_reasoning,
        reasoning_formats: if plan.tools_offered { provider.reasoning_formats_for(declares_tools) } else { None },
        want_usage,
        finish_map: provider.profile.response.finish_reason.clone(),
        names_back: plan.names_back,
        single_call,
        usage_fields: provider.profile.response.usage.clone(),
        shown: ctx.shown.clone(),
        remember: memo_conversation.is_some(),
    };
    let mut norm = Normalizer::new(settings);
    let started = match reply {
        Reply::Json(body) => {
            let label = provider.metric_model(&route.model);
            if as_is && let Some(t) = norm.whole_as_is(body.bytes()) {
                ctx.tokens(&provider.name, label, &t, turn.as_deref());
                Started::AsIs(body)
            } else {
                let completion: Completion = body.parse("a chat completion")?;
                if let Some(u) = completion.usage.as_ref().filter(|u| u.is_object()) {
                    let fields = &provider.profile.response.usage;
                    ctx.usage(&provider.name, label, u, turn.as_deref().map(|t| (t, fields)));
                }
                let mut chunks = Vec::new();
                norm.push(completion_to_chunk(completion), &mut chunks);
                norm.finish(&mut chunks);
                if let Some(c) = &memo_conversation {
                    super::reasoning::remember(s.store.as_ref(), s.state_ttl, c, &norm.captures()).await;
                }
                Started::Whole(chunks)
            }
        }
        Reply::Events(mut events) => {
            // Wait for the first event so an upstream that fails at once
            // still gets a proper HTTP error status.
            let first = events.next().await;
            if let Some(Err(e)) = first {
                return Err(e.into());
            }
            let first = match first {
                Some(Ok(data)) => Some(read(&mut norm, data, meter.as_ref())?),
                _ => None,
            };
            Started::Stream { events, first, norm, conversation: memo_conversation, meter }
        }
    };
    Ok(Begun { route, index, conversation, started })
}

/// The client's tools, plus each renamed tool under its upstream name so a
/// call the model writes in text with that name is recognized (and mapped
/// back by the normalizer).
pub fn tool_index(tools: &[Value], names_back: &std::collections::BTreeMap<String, String>) -> ToolIndex {
    let client = ToolIndex::from_openai(tools);
    let mut all: Vec<(String, Value)> =
        client.names().map(|n| (n.to_string(), client.schema(n).cloned().unwrap_or(Value::Null))).collect();
    for (up, name) in names_back {
        all.push((up.clone(), client.schema(name).cloned().unwrap_or(Value::Null)));
    }
    ToolIndex::new(all)
}

/// An upstream `data` payload as a chunk; an `{"error": …}` payload is the
/// upstream failing mid-stream.
fn parse_chunk(data: &[u8]) -> Result<Chunk, UpstreamError> {
    // Straight into the struct (no JSON tree per chunk); an error payload
    // lands in `extra`, and one that is no chunk at all is read as a tree.
    let in_band = |v: &Value| {
        let status = v.get("code").and_then(Value::as_u64).filter(|c| (400..600).contains(c)).unwrap_or(502);
        crate::provider::map_error(&Default::default(), status as u16, data)
    };
    let text = || String::from_utf8_lossy(data);
    // Checked whole, once, then read as text (see `Plain::read`).
    let chunk = match std::str::from_utf8(data) {
        Ok(t) => serde_json::from_str::<Chunk>(t),
        Err(_) => serde_json::from_slice::<Chunk>(data),
    };
    match chunk {
        Ok(c) => match c.extra.get("error").filter(|e| !e.is_null()) {
            Some(e) => Err(in_band(e)),
            None => Ok(c),
        },
        Err(chunk_err) => {
            let v: Value = serde_json::from_slice(data)
                .map_err(|e| UpstreamError::Protocol(format!("bad stream event ({e}): {}", text())))?;
            match v.get("error").filter(|e| !e.is_null()) {
                Some(e) => Err(in_band(e)),
                None => Err(UpstreamError::Protocol(format!("bad stream chunk ({chunk_err}): {}", text()))),
            }
        }
    }
}

/// What the normalizer made of one upstream event.
#[allow(clippy::large_enum_variant)] // a box per chunk would cost more than the move
pub enum Out {
    Chunk(Chunk),
    /// A payload sent on as it came, or with its text's whitespace moved
    /// (see [`Normalizer::forward`]): a normalized chunk already, written
    /// out without a parse or a serialization.
    Same(Forwarded),
}

/// An upstream stream through the normalizer. The upstream is read only as
/// fast as the client takes chunks (backpressure), and dropping the stream
/// (client gone) drops the upstream connection.
pub fn outs(events: Events, first: Option<Out>, norm: Normalizer, reading: Reading) -> Outs {
    Outs::new(events, first, norm, reading)
}

/// How a stream is read besides its normalizer.
pub struct Reading {
    /// Counts its events and usage.
    pub meter: Option<Meter>,
    /// Where the reasoning of turns that made calls is remembered (none:
    /// nowhere, the caller keeps it).
    pub memo: Option<Memo>,
    /// The most payload bytes read, for a reader that holds the answer
    /// (assembled, stored, or the agent loop's history).
    pub max: usize,
}

/// Where and under which conversation a stream's reasoning is remembered.
pub struct Memo {
    store: Arc<dyn StateStore>,
    ttl: std::time::Duration,
    conversation: Chain,
}

pub fn memo(s: &Core, conversation: Option<Chain>) -> Option<Memo> {
    conversation.map(|conversation| Memo { store: s.store.clone(), ttl: s.state_ttl, conversation })
}

/// The stream [`outs`] makes. A plain stream rather than a generator, which
/// kept a slot for a chunk in flight at each of its yields, in every open
/// stream.
pub struct Outs {
    events: Events,
    norm: Normalizer,
    /// Chunks made and not yet taken, the next one last; more are made
    /// only once it is empty.
    ready: Vec<Chunk>,
    /// A payload sent on as it came, before anything else.
    same: Option<Forwarded>,
    reading: Reading,
    /// Payload bytes read so far.
    read: usize,
    state: OutsState,
}

enum OutsState {
    Reading,
    /// The upstream ended: the reasoning seen is being stored before the
    /// last chunks go out, so a client that sends its next turn the moment
    /// it sees them finds it.
    Remembering(std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>),
    /// Nothing more to read: what is ready, then the end.
    Ended,
}

impl Outs {
    fn new(events: Events, first: Option<Out>, mut norm: Normalizer, reading: Reading) -> Self {
        // Room for one chunk: most upstream chunks make one or none.
        let mut ready = Vec::with_capacity(1);
        let mut same = None;
        match first {
            Some(Out::Chunk(c)) => refill(&mut ready, |r| norm.push(c, r)),
            Some(Out::Same(wire)) => same = Some(wire),
            None => {}
        }
        Outs { events, norm, ready, same, reading, read: 0, state: OutsState::Reading }
    }
}

/// Fills the (empty) ready list in order, then turns it so the next chunk
/// is the one `pop` takes.
fn refill(ready: &mut Vec<Chunk>, make: impl FnOnce(&mut Vec<Chunk>)) {
    make(ready);
    ready.reverse();
}

impl Stream for Outs {
    type Item = Result<Out, UpstreamError>;

    fn poll_next(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Self::Item>> {
        use std::task::Poll;
        let this = self.get_mut();
        loop {
            if let OutsState::Remembering(stored) = &mut this.state {
                std::task::ready!(stored.as_mut().poll(cx));
                this.state = OutsState::Ended;
            }
            if let Some(wire) = this.same.take() {
                return Poll::Ready(Some(Ok(Out::Same(wire))));
            }
            if let Some(c) = this.ready.pop() {
                return Poll::Ready(Some(Ok(Out::Chunk(c))));
            }
            if !matches!(this.state, OutsState::Reading) {
                return Poll::Ready(None);
            }
            match std::task::ready!(this.events.poll_next_unpin(cx)) {
                Some(Ok(data)) => {
                    this.read += data.len();
                    let r = &this.reading;
                    let made = if this.read > r.max {
                        Err(too_large(r.max))
                    } else {
                        read(&mut this.norm, data, r.meter.as_ref())
                    };
                    match made {
                        Ok(Out::Chunk(c)) => refill(&mut this.ready, |r| this.norm.push(c, r)),
                        same @ Ok(Out::Same(_)) => return Poll::Ready(Some(same)),
                        Err(e) => {
                            this.state = OutsState::Ended;
                            return Poll::Ready(Some(Err(e)));
                        }
                    }
                }
                // Some vendors end after their finish chunk without `[DONE]`;
                // a stream that ends before that is cut, not finished.
                Some(Err(UpstreamError::Incomplete(_))) if this.norm.all_finished() => this.end(),
                Some(Err(e)) => {
                    this.state = OutsState::Ended;
                    return Poll::Ready(Some(Err(e)));
                }
                None => this.end(),
            }
        }
    }
}

impl Outs {
    /// The upstream ended: the last chunks are made, and the reasoning seen
    /// is stored before they go out.
    fn end(&mut self) {
        refill(&mut self.ready, |r| self.norm.finish(r));
        // Captured only for a reader that remembers them.
        let captures = self.reading.memo.as_ref().map(|_| self.norm.captures()).unwrap_or_default();
        self.state = match self.reading.memo.take() {
            Some(Memo { store, ttl, conversation }) if !captures.is_empty() => {
                OutsState::Remembering(Box::pin(async move {
                    super::reasoning::remember(store.as_ref(), ttl, &conversation, &captures).await;
                }))
            }
            _ => OutsState::Ended,
        };
    }
}

/// An answer over `[limits] max_answer_bytes`.
pub fn too_large(max: usize) -> UpstreamError {
    UpstreamError::Protocol(format!(
        "The upstream's answer is larger than the limit of {max} bytes ([limits] max_answer_bytes)."
    ))
}

/// An upstream payload as the normalizer takes it: sent on as it came (see
/// [`Normalizer::forward`]), or parsed for [`Normalizer::push`]; counted by
/// the meter.
fn read(norm: &mut Normalizer, data: Data, meter: Option<&Meter>) -> Result<Out, UpstreamError> {
    if let Some(m) = meter {
        m.event();
    }
    match norm.forward(data) {
        Ok(wire) => Ok(Out::Same(wire)),
        Err(data) => {
            let c = parse_chunk(data.bytes())?;
            if let Some(m) = meter {
                m.chunk(&c);
            }
            Ok(Out::Chunk(c))
        }
    }
}

/// Normalized chunks of an upstream stream (see [`outs`]), for readers that
/// hold them: at most `max_answer_bytes` of payloads.
pub fn normalized(
    events: Events,
    first: Option<Out>,
    norm: Normalizer,
    reading: Reading,
) -> impl Stream<Item = Result<Chunk, UpstreamError>> + Send {
    outs(events, first, norm, reading).map(|o| match o? {
        Out::Chunk(c) => Ok(c),
        // Forwarded, so the payload is its own normalized chunk.
        Out::Same(wire) => parse_chunk(&wire.payload()),
    })
}

impl From<Chunk> for Out {
    fn from(c: Chunk) -> Self {
        Out::Chunk(c)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::{MemoryStore, ns};
    use crate::toolcall::FormatSet;
    use serde_json::json;

    fn settings() -> Settings {
        let tools =
            json!([{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]);
        Settings {
            formats: Arc::new(FormatSet::all()),
            tools: Arc::new(ToolIndex::from_openai(tools.as_array().map(Vec::as_slice).unwrap_or_default())),
            remember: true,
            ..Default::default()
        }
    }

    fn chunk(delta: Value, finish: Option<&str>) -> String {
        let choice = json!({"index": 0, "delta": delta, "finish_reason": finish});
        json!({"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "m", "choices": [choice]})
            .to_string()
    }

    fn stream_of(events: Events, store: Arc<dyn StateStore>) -> impl Stream<Item = Result<Value, UpstreamError>> {
        let mut norm = Normalizer::new(settings());
        let first = read(&mut norm, Data::from(chunk(json!({"role": "assistant", "content": ""}), None)), None).ok();
        let memo = Memo { store, ttl: std::time::Duration::from_secs(60), conversation: Chain::new(None) };
        let outs = Outs::new(events, first, norm, Reading { meter: None, memo: Some(memo), max: 1 << 20 });
        outs.map(|o| {
            o.map(|o| match o {
                Out::Chunk(c) => serde_json::to_value(c).unwrap_or_default(),
                Out::Same(wire) => serde_json::from_str(&wire.text()).unwrap_or_default(),
            })
        })
    }

    #[tokio::test]
    async fn an_upstream_error_is_the_last_item_and_nothing_is_read_after_it() {
        let events = futures_util::stream::iter([
            Ok(Data::from(chunk(json!({"content": "a"}), None))),
            Err(UpstreamError::Protocol("broken".into())),
        ])
        .chain(futures_util::stream::poll_fn(|_| panic!("the upstream was read after its error")));
        let got: Vec<_> = stream_of(Events::new(events), Arc::new(MemoryStore::new(16))).collect().await;
        assert!(matches!(got.last(), Some(Err(UpstreamError::Protocol(_)))), "{got:?}");
        assert_eq!(got.iter().filter(|o| o.is_err()).count(), 1, "{got:?}");
    }

    #[tokio::test]
    async fn reasoning_is_stored_before_the_finish_goes_out() {
        let store: Arc<dyn StateStore> = Arc::new(MemoryStore::new(16));
        let call = json!({"index": 0, "id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}});
        let events = futures_util::stream::iter([
            Ok(Data::from(chunk(json!({"reasoning_content": "Paris first."}), None))),
            Ok(Data::from(chunk(json!({"tool_calls": [call]}), None))),
            Ok(Data::from(chunk(json!({}), Some("tool_calls")))),
        ]);
        let mut outs = Box::pin(stream_of(Events::new(events), store.clone()));
        let mut finished = false;
        while let Some(item) = outs.next().await {
            let c = item.expect("no error");
            if c["choices"][0]["finish_reason"] == "tool_calls" {
                let mut turn = Chain::new(None);
                turn.push_assistant("", &["call_1".to_string()]);
                let stored = store.get(ns::REASONING, &turn.key()).await.expect("store");
                assert_eq!(stored.as_ref().map(|v| &v["reasoning"]), Some(&json!("Paris first.")));
                finished = true;
            }
        }
        assert!(finished, "the finish chunk went out");
    }
}
