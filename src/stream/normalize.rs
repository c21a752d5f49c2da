//! The stream normalizer: upstream chunks in, clean OpenAI chunks out.
//!
//! Per choice it
//! * keys native tool calls by `index`, assigns missing indexes, splits
//!   parallel calls that all say `index: 0` but carry distinct ids, puts `id`
//!   and `type` on each call's first delta only, stringifies object
//!   arguments, and sends `"{}"` for calls that never got arguments;
//! * feeds `content` through the tool-call [`Extractor`], which also routes
//!   `<think>` blocks to `reasoning_content`; recovered calls become ordinary
//!   `tool_calls` deltas (id + name first, then the arguments);
//! * maps `reasoning` (vLLM, StepFun) to `reasoning_content`, and, where the
//!   profile says the models do it, recovers call blocks written into the
//!   reasoning when the answer holds no call (see [`Settings::reasoning_formats`]);
//! * fixes `finish_reason` (`tool_calls` when calls were emitted, vendor
//!   values such as `sensitive` mapped);
//! * maps tool names the request renamed for the vendor back to the
//!   client's, and keeps only the first call when the client asked for
//!   `parallel_tool_calls: false` (upstreams may ignore it);
//! * moves usage to a final `choices: []` chunk when the client asked for
//!   `include_usage`, and otherwise onto the finish chunk.

use std::sync::Arc;

use serde_json::{Map, Value};

use super::data::Data;
use super::forward::{Forwarded, Template};
use crate::openai::{Chunk, ChunkChoice, Delta, FunctionDelta, ToolCallDelta, new_call_id};
use crate::state::conversation::TurnHash;
use crate::toolcall::{Call, Event, Extractor, FormatSet, Lead, Options, ToolIndex};

/// How the fast path reshapes a payload's text (see [`Forwarded::Reshaped`]).
struct Reshape {
    at: usize,
    len: usize,
    lead: Lead,
    keep: usize,
}

/// Settings for one response.
pub struct Settings {
    pub formats: Arc<FormatSet>,
    pub tools: Arc<ToolIndex>,
    pub starts_in_reasoning: bool,
    /// Formats read in the reasoning (profile `[tools] from_reasoning`, for
    /// requests that declared tools): their complete blocks are cut from the
    /// reasoning as it streams, and become the turn's tool calls at its end
    /// if the answer made none. `None`: the reasoning passes untouched.
    pub reasoning_formats: Option<Arc<FormatSet>>,
    pub want_usage: bool,
    /// Vendor finish reasons to OpenAI's (profile data).
    pub finish_map: std::collections::BTreeMap<String, String>,
    /// Upstream tool names → the client's (names renamed for the vendor).
    pub names_back: std::collections::BTreeMap<String, String>,
    /// Keep only the first tool call (`parallel_tool_calls: false`).
    pub single_call: bool,
    /// The profile's own usage fields → OpenAI's (see [`super::usage`]).
    pub usage_fields: std::collections::BTreeMap<String, String>,
    /// The request's console record, told of each call recovered from text.
    pub shown: Option<Arc<crate::recorder::Entry>>,
    /// Keep each choice's visible turn (hashed) and reasoning for the
    /// reasoning round trip ([`Normalizer::captures`]): only a profile that
    /// replays reasoning needs them, and hashing every delta and holding a
    /// whole reasoning cost every other stream.
    pub remember: bool,
}

/// No recovery from text, no declared tools, nothing renamed or mapped:
/// what a provider with native tool calls runs.
impl Default for Settings {
    fn default() -> Self {
        Settings {
            formats: Arc::new(FormatSet::none()),
            tools: Arc::default(),
            starts_in_reasoning: false,
            reasoning_formats: None,
            want_usage: false,
            finish_map: Default::default(),
            names_back: Default::default(),
            single_call: false,
            usage_fields: Default::default(),
            shown: None,
            remember: false,
        }
    }
}

struct NativeCall {
    upstream_index: Option<u32>,
    upstream_id: Option<String>,
    /// The upstream's name for it, to tell a repeated name from a new call.
    name: String,
    index: u32,
    /// The arguments forwarded so far.
    args: String,
    /// Whether they are whole JSON so far, kept as they grow (a re-parse per
    /// delta would be quadratic in a long stream of fragments).
    shape: Shape,
    /// A call after the first when only one is wanted: never sent.
    dropped: bool,
}

struct ChoiceState {
    index: u32,
    extractor: Extractor,
    role_sent: bool,
    native: Vec<NativeCall>,
    next_call: u32,
    done: bool,
    /// What this choice said, for [`Capture`]: its reasoning, and its text
    /// hashed as it streams (only the hash is ever stored).
    reasoning: String,
    /// The reasoning grew past [`MAX_KEPT_REASONING`] and is not kept.
    reasoning_dropped: bool,
    /// `None` unless [`Settings::remember`].
    turn: Option<TurnHash>,
    call_ids: Vec<String>,
    /// Reads the reasoning for call blocks (see [`Settings::reasoning_formats`]).
    reasoning_ex: Option<Extractor>,
    /// Calls found in the reasoning, sent at the end if the answer has none.
    reasoning_calls: Vec<Call>,
    /// The bytes around the text of a plain delta the fast path took: later
    /// deltas that match are read without parsing (see [`Template`]).
    template: Option<Box<Template>>,
}

/// The most reasoning one choice keeps for the round-trip. A stream's
/// reasoning is otherwise held for its whole length, however long the
/// upstream makes it; past this it is dropped, and the next turn falls back
/// as when none was remembered.
const MAX_KEPT_REASONING: usize = 4 << 20;

fn keep_reasoning(kept: &mut String, dropped: &mut bool, more: &str) {
    if *dropped || more.is_empty() {
        return;
    }
    if kept.len() + more.len() > MAX_KEPT_REASONING {
        // Dropped for good: a truncated reasoning would be replayed as if whole.
        *kept = String::new();
        *dropped = true;
        tracing::warn!("reasoning over {MAX_KEPT_REASONING} bytes: not remembered for the next turn");
        return;
    }
    kept.push_str(more);
}

/// The visible assistant turn and its reasoning, for the reasoning
/// round-trip: captured for every choice that made tool calls.
#[derive(Clone)]
pub struct Capture {
    pub call_ids: Vec<String>,
    /// The visible message's text, hashed.
    pub turn: TurnHash,
    pub reasoning: String,
}

/// What every chunk of the response carries: taken from the first one.
#[derive(Default)]
struct Meta {
    id: String,
    created: u64,
    model: String,
}

/// Normalizes one response.
pub struct Normalizer {
    s: Settings,
    choices: Vec<ChoiceState>,
    meta: Meta,
    usage: Option<Value>,
    events: Vec<Event>,
    /// Finish chunks wait for the end of the upstream stream, so usage that
    /// arrives after them can still ride on them.
    held: Vec<Chunk>,
    /// Calls recovered from text, for metrics and the agent loop.
    pub recovered: Vec<Call>,
}

impl Normalizer {
    pub fn new(s: Settings) -> Self {
        Normalizer {
            s,
            choices: Vec::new(),
            meta: Meta::default(),
            usage: None,
            events: Vec::new(),
            held: Vec::new(),
            recovered: Vec::new(),
        }
    }

    fn state(&mut self, index: u32) -> usize {
        if let Some(i) = self.choices.iter().position(|c| c.index == index) {
            return i;
        }
        let st = self.new_choice(index);
        // Room for the one choice nearly every answer has: a `Vec` grows to
        // four at once, and every open stream would carry the other three.
        self.choices.reserve_exact(1);
        self.choices.push(st);
        self.choices.len() - 1
    }

    fn new_choice(&self, index: u32) -> ChoiceState {
        ChoiceState {
            index,
            extractor: self.extractor(),
            role_sent: false,
            native: Vec::new(),
            next_call: 0,
            done: false,
            reasoning: String::new(),
            reasoning_dropped: false,
            turn: self.s.remember.then(TurnHash::default),
            call_ids: Vec::new(),
            reasoning_ex: self.s.reasoning_formats.as_ref().map(|f| Extractor::new(f.clone(), self.s.tools.clone())),
            reasoning_calls: Vec::new(),
            template: None,
        }
    }

    /// A new choice's extractor.
    fn extractor(&self) -> Extractor {
        let opts = Options { starts_in_reasoning: self.s.starts_in_reasoning };
        Extractor::with_options(self.s.formats.clone(), self.s.tools.clone(), opts)
    }

    /// A chunk that carries this response's id/created/model.
    fn blank(&self, extra: &Map<String, Value>) -> Chunk {
        Chunk {
            id: self.meta.id.clone(),
            object: "chat.completion.chunk".into(),
            created: self.meta.created,
            model: self.meta.model.clone(),
            choices: Vec::new(),
            usage: None,
            extra: extra.clone(),
        }
    }

    /// Normalizes one upstream chunk.
    pub fn push(&mut self, mut chunk: Chunk, out: &mut Vec<Chunk>) {
        if self.meta.id.is_empty() {
            self.meta.id =
                if chunk.id.is_empty() { format!("chatcmpl-{:016x}", fastrand::u64(..)) } else { chunk.id.clone() };
            self.meta.created = if chunk.created == 0 { crate::openai::now() } else { chunk.created };
            self.meta.model = chunk.model.clone();
        }
        if let Some(u) = chunk.usage.take().filter(|u| !u.is_null()) {
            self.usage = Some(u);
        }
        let extra = std::mem::take(&mut chunk.extra);
        for choice in chunk.choices {
            self.push_choice(choice, &extra, out);
        }
    }

    /// The fast path for a streamed upstream chunk (a `data` payload):
    /// `Ok` with what to send when normalizing the chunk would change at most
    /// its text's whitespace — the payload as it came, or with the content
    /// string reshaped in place — neither parsed into a [`Chunk`] nor
    /// serialized again. The normalizer has then taken the chunk as
    /// [`push`](Self::push) would. That is a plain content delta of this
    /// response's one open choice, with this response's id, `created` and
    /// model, whose text the extractor lets pass
    /// ([`Extractor::pass`](crate::toolcall::Extractor::pass)). `Err` gives
    /// the payload back, nothing changed: push it.
    pub fn forward(&mut self, data: Data) -> Result<Forwarded, Data> {
        match self.forward_as(data.bytes()) {
            Some(None) => Ok(Forwarded::AsIs(data)),
            Some(Some(Reshape { at, len, lead, keep })) => Ok(Forwarded::Reshaped { data, at, len, lead, keep }),
            None => Err(data),
        }
    }

    /// `Some(None)`: send the payload as it is; `Some(Some(_))`: reshaped.
    fn forward_as(&mut self, payload: &[u8]) -> Option<Option<Reshape>> {
        if self.choices.is_empty() {
            return self.forward_first(payload);
        }
        let [st] = self.choices.as_mut_slice() else { return None };
        if st.done || !st.role_sent {
            return None;
        }
        if let Some(t) = &st.template
            && let Some(text) = t.content(payload)
        {
            let at = t.at();
            return Self::pass(st, text, Some(at));
        }
        let p = super::forward::Plain::read(payload)?;
        let same = p.index() == st.index
            && !p.says_role()
            && p.id == self.meta.id
            && p.model == self.meta.model
            && p.created == self.meta.created
            && p.object == "chat.completion.chunk";
        if !same {
            return None;
        }
        let at = p.content_at(payload);
        if st.template.is_none()
            && let Some(at) = at
        {
            st.template = Some(Template::of(payload, at, p.content().len()));
        }
        Self::pass(st, p.content(), at)
    }

    /// The response's first chunk, when it is plain and says the role (as
    /// Ollama's and others' do): the full path would take its id, `created`
    /// and model as the response's and send its delta with the role, as it is.
    fn forward_first(&mut self, payload: &[u8]) -> Option<Option<Reshape>> {
        if !self.meta.id.is_empty() {
            return None;
        }
        let p = super::forward::Plain::read(payload)?;
        if !p.says_role() || p.id.is_empty() || p.created == 0 || p.object != "chat.completion.chunk" {
            return None;
        }
        let mut st = self.new_choice(p.index());
        st.role_sent = true;
        // Taken only if it passes: otherwise the full path starts afresh.
        let wire = Self::pass(&mut st, p.content(), p.content_at(payload))?;
        self.meta = Meta { id: p.id.to_owned(), created: p.created, model: p.model.to_owned() };
        self.choices.reserve_exact(1);
        self.choices.push(st);
        Some(wire)
    }

    /// The text of a plain delta through the choice's extractor: `None` when
    /// the extractor wants it (nothing taken), else how to send it.
    /// `at`: where `text` is in the payload, written as it is (no escapes).
    fn pass(st: &mut ChoiceState, text: &str, at: Option<usize>) -> Option<Option<Reshape>> {
        let passed = st.extractor.pass(text, at.is_some())?;
        let body = &text[..passed.keep];
        if let Some(t) = st.turn.as_mut() {
            t.push(passed.lead.as_str());
            t.push(body);
        }
        if passed.lead.is_empty() && passed.keep == text.len() {
            return Some(None);
        }
        // `pass` reshapes only when asked, and it was asked only with `at`.
        let at = at?;
        Some(Some(Reshape { at, len: text.len(), lead: passed.lead, keep: passed.keep }))
    }

    /// The fast path for a whole (non-streamed) answer: true when pushing
    /// its body, finishing, and assembling the chunks would give the same
    /// JSON back, so the upstream's body can be sent on as it came. That is
    /// a plain answer ([`Whole`](super::forward::Whole): one choice, the
    /// assistant's text and nothing the normalizer rewrites), text the
    /// extractor lets pass whole, and a finish reason the profile keeps.
    /// `Some` with the token counts of its usage (it is read only here).
    pub fn whole_as_is(&self, body: &[u8]) -> Option<super::Tokens> {
        let w = super::forward::Whole::read(body)?;
        let finish = w.finish_reason();
        let kept = !self.s.finish_map.contains_key(finish) && common_finish(finish) == finish && finish != "tool_calls";
        // The choice's extractor as `push` would make it. The text's trailing
        // whitespace is held and given back at the end, as nothing follows.
        let kept = kept && (self.s.usage_fields.is_empty() || !w.has_usage());
        let passes = kept && self.extractor().pass(w.content(), true).is_some_and(|p| p.lead.is_empty());
        passes.then(|| w.tokens())
    }

    fn push_choice(&mut self, choice: ChunkChoice, extra: &Map<String, Value>, out: &mut Vec<Chunk>) {
        let ci = self.state(choice.index);
        if self.choices[ci].done {
            return;
        }
        let ChunkChoice { index, delta, finish_reason, extra: mut choice_extra } = choice;
        // Kimi puts the usage inside the last chunk's choice.
        if let Some(u) = choice_extra.remove("usage").filter(Value::is_object) {
            self.usage = Some(u);
        }
        let Delta { content, reasoning_content, tool_calls, extra: mut delta_extra, .. } = delta;
        let mut d = Delta { extra: Map::new(), ..Delta::default() };
        // vLLM / StepFun name the field `reasoning`.
        let reasoning = reasoning_content.or_else(|| match delta_extra.remove("reasoning") {
            Some(Value::String(s)) => Some(s),
            _ => None,
        });
        d.extra = delta_extra;
        if let Some(r) = reasoning.filter(|r| !r.is_empty()) {
            d.reasoning_content = if self.reads_reasoning(ci) { self.read_reasoning(ci, Some(&r)) } else { Some(r) };
        }
        let mut pending: Vec<Delta> = Vec::new();
        if let Some(text) = content {
            self.events.clear();
            self.choices[ci].extractor.feed(&text, &mut self.events);
            self.apply_events(ci, &mut d, &mut pending);
        }
        if let Some(tcs) = tool_calls {
            let fixed: Vec<ToolCallDelta> =
                tcs.into_iter().enumerate().filter_map(|(i, tc)| self.native_call(ci, tc, i > 0)).collect();
            if !fixed.is_empty() {
                d.tool_calls.get_or_insert_with(Vec::new).extend(fixed);
            }
        }
        pending.push(d);
        let fin = finish_reason.map(|r| self.finish_choice(ci, &r, &mut pending));
        let n = pending.len();
        for (i, mut d) in pending.into_iter().enumerate() {
            let last = i + 1 == n;
            let fr = if last { fin.clone() } else { None };
            let keeps_extra = last && !choice_extra.is_empty();
            if is_empty(&d) && fr.is_none() && !keeps_extra {
                continue;
            }
            let st = &mut self.choices[ci];
            if let Some(t) = st.turn.as_mut() {
                t.push(d.content.as_deref().unwrap_or(""));
                keep_reasoning(
                    &mut st.reasoning,
                    &mut st.reasoning_dropped,
                    d.reasoning_content.as_deref().unwrap_or(""),
                );
            }
            if !self.choices[ci].role_sent {
                d.role = Some("assistant".into());
                self.choices[ci].role_sent = true;
            }
            let mut c = self.blank(extra);
            let ce = if last { choice_extra.clone() } else { Map::new() };
            let finishing = fr.is_some();
            c.choices.push(ChunkChoice { index, delta: d, finish_reason: fr, extra: ce });
            if finishing { self.held.push(c) } else { out.push(c) }
        }
        if fin.is_some() {
            self.choices[ci].done = true;
        }
    }

    fn reads_reasoning(&self, ci: usize) -> bool {
        self.choices[ci].reasoning_ex.is_some()
    }

    /// Feeds reasoning through the choice's reasoning reader (`None`: the end
    /// of the reasoning): what is left of it, with call blocks cut out, and
    /// the calls held for the end. `None` when nothing is left to send yet
    /// (or the choice has no reader).
    fn read_reasoning(&mut self, ci: usize, more: Option<&str>) -> Option<String> {
        let st = &mut self.choices[ci];
        let ex = st.reasoning_ex.as_mut()?;
        let mut events = Vec::new();
        match more {
            Some(r) => ex.feed(r, &mut events),
            None => ex.finish(&mut events),
        }
        let mut left = String::new();
        for ev in events {
            match ev {
                Event::Text(t) | Event::Reasoning(t) => left.push_str(&t),
                Event::Call(c) => st.reasoning_calls.push(c),
            }
        }
        (!left.is_empty()).then_some(left)
    }

    /// Turns extractor events into deltas; a recovered call closes the
    /// current delta and adds two of its own.
    fn apply_events(&mut self, ci: usize, d: &mut Delta, pending: &mut Vec<Delta>) {
        // Taken and put back so its capacity is reused by the next chunk.
        let mut events = std::mem::take(&mut self.events);
        for ev in events.drain(..) {
            match ev {
                Event::Text(t) => push_owned(&mut d.content, t),
                Event::Reasoning(t) => push_owned(&mut d.reasoning_content, t),
                Event::Call(mut call) => {
                    let st = &mut self.choices[ci];
                    if self.s.single_call && st.next_call > 0 {
                        tracing::debug!(name = call.name, "extra tool call dropped (parallel_tool_calls: false)");
                        continue;
                    }
                    if let Some(n) = self.s.names_back.get(&call.name) {
                        call.name = n.clone();
                    }
                    pending.push(std::mem::take(d));
                    let index = st.next_call;
                    st.next_call += 1;
                    let id = call.id.clone().unwrap_or_else(new_call_id);
                    st.call_ids.push(id.clone());
                    pending.push(tool_delta(index, Some(id.clone()), Some(call.name.clone()), Some(String::new())));
                    pending.push(tool_delta(index, None, None, Some(call.arguments.clone())));
                    crate::metrics::recovered(std::slice::from_ref(&call));
                    if let Some(c) = &self.s.shown {
                        c.recovered(1);
                    }
                    self.recovered.push(call);
                }
            }
        }
        self.events = events;
    }

    /// Repairs one native tool-call delta; `None` for a dropped call.
    /// `later` says an earlier entry of the same delta's list came before it.
    fn native_call(&mut self, ci: usize, tc: ToolCallDelta, later: bool) -> Option<ToolCallDelta> {
        let single = self.s.single_call;
        let names_back = &self.s.names_back;
        let st = &mut self.choices[ci];
        let id = tc.id.filter(|i| !i.is_empty());
        let found = match (&id, tc.index) {
            (Some(id), _) => st.native.iter().position(|c| c.upstream_id.as_deref() == Some(id.as_str())),
            (None, Some(ix)) => st.native.iter().rposition(|c| c.upstream_index == Some(ix)),
            // Neither index nor id: a later entry of one list, or a delta
            // naming a call after the last one is whole, is a call of its own.
            (None, None) => match st.native.last() {
                Some(_) if later => None,
                Some(last) if starts_new(last, tc.function.as_ref().and_then(|f| f.name.as_deref())) => None,
                _ => st.native.len().checked_sub(1),
            },
        };
        let (slot, first) = match found {
            Some(s) => (s, false),
            None => {
                let index = st.next_call;
                let dropped = single && index > 0;
                if dropped {
                    tracing::debug!("extra native tool call dropped (parallel_tool_calls: false)");
                } else {
                    st.next_call += 1;
                }
                st.native.push(NativeCall {
                    upstream_index: tc.index,
                    upstream_id: id.clone(),
                    name: tc.function.as_ref().and_then(|f| f.name.clone()).unwrap_or_default(),
                    index,
                    args: String::new(),
                    shape: Shape::default(),
                    dropped,
                });
                (st.native.len() - 1, true)
            }
        };
        let call = &mut st.native[slot];
        if call.dropped {
            return None;
        }
        let f = tc.function.unwrap_or_default();
        let args = match f.arguments {
            Some(Value::String(s)) => Some(s),
            Some(Value::Null) | None => None,
            Some(v) => Some(v.to_string()),
        };
        // Some servers (vLLM GLM-5.1 with MTP, vllm#42167) re-send the whole
        // arguments so far instead of the next piece: forward only what is new.
        let args = args.map(|a| match a.strip_prefix(call.args.as_str()) {
            Some(rest) if !call.args.is_empty() => rest.to_string(),
            _ => a,
        });
        call.args.push_str(args.as_deref().unwrap_or(""));
        call.shape.feed(args.as_deref().unwrap_or(""));
        let mut out = ToolCallDelta {
            index: Some(call.index),
            id: None,
            kind: None,
            function: Some(FunctionDelta { name: None, arguments: args.map(Value::String), extra: f.extra }),
            extra: tc.extra,
        };
        if first {
            // Native ids (Kimi's `functions.x:0`) pass through byte for byte.
            let id = id.unwrap_or_else(new_call_id);
            st.call_ids.push(id.clone());
            out.id = Some(id);
            out.kind = Some("function".into());
            if let Some(func) = out.function.as_mut() {
                func.name = f.name.map(|n| names_back.get(&n).cloned().unwrap_or(n));
                if func.arguments.is_none() {
                    func.arguments = Some(Value::String(String::new()));
                }
            }
        }
        Some(out)
    }

    /// Flushes the extractor and fixes the finish reason of a choice.
    fn finish_choice(&mut self, ci: usize, reason: &str, pending: &mut Vec<Delta>) -> String {
        self.events.clear();
        self.choices[ci].extractor.finish(&mut self.events);
        let mut d = Delta::default();
        self.apply_events(ci, &mut d, pending);
        if let Some(r) = self.read_reasoning(ci, None) {
            push_owned(&mut d.reasoning_content, r);
        }
        let st = &mut self.choices[ci];
        let held = std::mem::take(&mut st.reasoning_calls);
        // Calls written in the reasoning stand only for an answer that made none.
        if st.next_call == 0 && !held.is_empty() {
            self.events.clear();
            self.events.extend(held.into_iter().map(Event::Call));
            self.apply_events(ci, &mut d, pending);
        } else if !held.is_empty() {
            tracing::debug!(calls = held.len(), "calls in the reasoning dropped: the answer made its own");
        }
        pending.push(d);
        let st = &self.choices[ci];
        for c in st.native.iter().filter(|c| c.args.is_empty() && !c.dropped) {
            pending.push(tool_delta(c.index, None, None, Some("{}".into())));
        }
        let emitted = st.next_call > 0;
        let mapped = self.s.finish_map.get(reason).map(String::as_str).unwrap_or_else(|| common_finish(reason));
        match mapped {
            "stop" | "" if emitted => "tool_calls".into(),
            "tool_calls" if !emitted => "stop".into(),
            m => m.to_string(),
        }
    }

    /// The turns that made tool calls, with their visible text and reasoning
    /// (complete once [`finish`](Self::finish) ran; empty of both unless
    /// [`Settings::remember`]).
    pub fn captures(&self) -> Vec<Capture> {
        self.choices
            .iter()
            .filter(|c| !c.call_ids.is_empty())
            .map(|c| Capture {
                call_ids: c.call_ids.clone(),
                turn: c.turn.clone().unwrap_or_default(),
                reasoning: c.reasoning.clone(),
            })
            .collect()
    }

    /// Every choice the upstream opened has its finish reason (a stream
    /// that ends here without `[DONE]` is complete).
    pub fn all_finished(&self) -> bool {
        !self.choices.is_empty() && self.choices.iter().all(|c| c.done)
    }

    /// Ends the response: choices the upstream never finished are finished,
    /// held finish chunks are released, and usage is attached: as a final
    /// `choices: []` chunk when the client asked for `include_usage`, else on
    /// the last finish chunk (a stock client never sees an empty `choices`).
    pub fn finish(&mut self, out: &mut Vec<Chunk>) {
        let mut open: Vec<u32> = self.choices.iter().filter(|c| !c.done).map(|c| c.index).collect();
        if self.choices.is_empty() {
            open.push(0);
        }
        for index in open {
            let fin = ChunkChoice { index, finish_reason: Some("stop".into()), ..Default::default() };
            self.push_choice(fin, &Map::new(), out);
        }
        let mut held = std::mem::take(&mut self.held);
        if let Some(u) = self.usage.as_mut() {
            super::usage::normalize(u, &self.s.usage_fields);
        }
        match self.usage.take() {
            Some(u) if self.s.want_usage => {
                out.append(&mut held);
                let mut c = self.blank(&Map::new());
                c.usage = Some(u);
                out.push(c);
            }
            Some(u) => {
                if let Some(last) = held.last_mut() {
                    last.usage = Some(u);
                }
                out.append(&mut held);
            }
            None => out.append(&mut held),
        }
    }
}

/// Whether an index- and id-less delta naming `name` begins a call after
/// `last`: a different name, or the same once `last`'s arguments are whole.
fn starts_new(last: &NativeCall, name: Option<&str>) -> bool {
    match name.filter(|n| !n.is_empty()) {
        None => false,
        Some(n) if n != last.name => true,
        Some(_) => last.shape.whole(),
    }
}

/// The bracket shape of JSON text read piece by piece: whether one value
/// has opened and closed again (outside strings).
#[derive(Default)]
struct Shape {
    depth: u32,
    opened: bool,
    in_string: bool,
    escaped: bool,
}

impl Shape {
    fn feed(&mut self, text: &str) {
        for b in text.bytes() {
            if self.in_string {
                match (self.escaped, b) {
                    (true, _) => self.escaped = false,
                    (false, b'\\') => self.escaped = true,
                    (false, b'"') => self.in_string = false,
                    _ => {}
                }
                continue;
            }
            match b {
                b'"' => self.in_string = true,
                b'{' | b'[' => {
                    self.depth += 1;
                    self.opened = true;
                }
                b'}' | b']' => self.depth = self.depth.saturating_sub(1),
                _ => {}
            }
        }
    }

    fn whole(&self) -> bool {
        self.opened && self.depth == 0 && !self.in_string
    }
}

fn tool_delta(index: u32, id: Option<String>, name: Option<String>, args: Option<String>) -> Delta {
    let first = id.is_some();
    Delta {
        tool_calls: Some(vec![ToolCallDelta {
            index: Some(index),
            id,
            kind: first.then(|| "function".to_string()),
            function: Some(FunctionDelta { name, arguments: args.map(Value::String), extra: Map::new() }),
            extra: Map::new(),
        }]),
        ..Delta::default()
    }
}

/// Appends text, moving it in when the slot is empty (no copy).
fn push_owned(slot: &mut Option<String>, t: String) {
    match slot {
        _ if t.is_empty() => {}
        Some(s) => s.push_str(&t),
        None => *slot = Some(t),
    }
}

fn is_empty(d: &Delta) -> bool {
    d.role.is_none()
        && d.content.as_ref().is_none_or(String::is_empty)
        && d.reasoning_content.is_none()
        && d.tool_calls.as_ref().is_none_or(Vec::is_empty)
        && d.extra.is_empty()
}

/// Finish reasons every profile maps.
fn common_finish(r: &str) -> &str {
    match r {
        "sensitive" | "content_filtered" | "safety" => "content_filter",
        "eos" | "eos_token" | "end_turn" | "stop_sequence" => "stop",
        "max_tokens" | "model_length" => "length",
        "tool_use" | "function_call" => "tool_calls",
        r => r,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// After one plain delta parsed, the stream's later deltas of the same
    /// shape are read off its template, and forwarded as they came.
    #[test]
    fn plain_deltas_after_the_first_are_read_off_the_template() {
        let mut n = Normalizer::new(Settings::default());
        let chunk = |delta: &str| {
            format!(
                r#"{{"id":"c1","object":"chat.completion.chunk","created":7,"model":"m","choices":[{{"index":0,"delta":{delta},"finish_reason":null}}]}}"#
            )
        };
        let as_is = |n: &mut Normalizer, c: &str| match n.forward(Data::from(c)) {
            Ok(Forwarded::AsIs(d)) => d.bytes() == c.as_bytes(),
            _ => false,
        };
        let first = chunk(r#"{"role":"assistant","content":"Hi"}"#);
        assert!(as_is(&mut n, &first));
        assert!(n.choices[0].template.is_none(), "a delta saying the role is not the shape of the rest");
        for text in ["there", "東京", "a\\nb", "again"] {
            assert!(as_is(&mut n, &chunk(&format!(r#"{{"content":"{text}"}}"#))), "{text}");
        }
        let t = n.choices[0].template.as_ref().expect("made from the second delta");
        assert_eq!(t.content(chunk(r#"{"content":"more"}"#).as_bytes()), Some("more"));
    }

    #[test]
    fn argument_shape_is_read_piece_by_piece() {
        let whole = |pieces: &[&str]| {
            let mut s = Shape::default();
            pieces.iter().for_each(|p| s.feed(p));
            s.whole()
        };
        assert!(whole(&["{\"city\":", " \"Paris\"}"]));
        assert!(!whole(&["{\"city\":"]));
        assert!(!whole(&["{\"a\": \"}", "\\\""]), "a brace inside a string, an escaped quote");
        assert!(whole(&["{\"a\": \"}\\\"\"", "}"]));
        assert!(!whole(&[""]));
        assert!(whole(&["[1, [2]]"]));
    }

    /// What the reasoning round trip needs is kept only when it is asked for:
    /// otherwise a stream hashed every delta and held its whole reasoning.
    #[test]
    fn a_stream_remembers_its_turn_only_when_asked() {
        let chunk = |delta: &str, finish: &str| {
            format!(
                r#"{{"id":"c1","object":"chat.completion.chunk","created":7,"model":"m","choices":[{{"index":0,"delta":{delta},"finish_reason":{finish}}}]}}"#
            )
        };
        let run = |remember: bool| {
            let mut n = Normalizer::new(Settings { remember, ..Default::default() });
            for (delta, finish) in [
                (r#"{"role":"assistant","reasoning_content":"think first"}"#, "null"),
                (r#"{"content":"Let me look."}"#, "null"),
                (r#"{"content":" Calling."}"#, "null"),
                (
                    r#"{"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"f","arguments":"{}"}}]}"#,
                    "null",
                ),
                ("{}", r#""tool_calls""#),
            ] {
                if let Err(payload) = n.forward(Data::from(chunk(delta, finish))) {
                    n.push(serde_json::from_slice(payload.bytes()).expect("a chunk"), &mut Vec::new());
                }
            }
            n.finish(&mut Vec::new());
            n
        };
        let kept = run(true);
        let c = kept.captures();
        assert_eq!((c.len(), c[0].reasoning.as_str()), (1, "think first"));
        let mut text = crate::state::conversation::TurnHash::default();
        text.push("Let me look. Calling.");
        assert_eq!(c[0].turn.digest(&c[0].call_ids), text.digest(&c[0].call_ids));
        let not = run(false);
        assert!(not.choices[0].turn.is_none());
        assert_eq!(not.choices[0].reasoning.capacity(), 0, "the reasoning was held");
    }

    /// A stream's reasoning is not kept past its cap (it was held for the
    /// stream's whole length).
    #[test]
    fn kept_reasoning_is_capped() {
        let (mut kept, mut dropped) = (String::new(), false);
        let piece = "r".repeat(1 << 20);
        for _ in 0..8 {
            keep_reasoning(&mut kept, &mut dropped, &piece);
        }
        assert!(dropped && kept.is_empty());
        keep_reasoning(&mut kept, &mut dropped, "tail");
        assert!(kept.is_empty(), "nothing is kept once dropped");
        let (mut kept, mut dropped) = (String::new(), false);
        keep_reasoning(&mut kept, &mut dropped, "short");
        assert_eq!((kept.as_str(), dropped), ("short", false));
    }
}
