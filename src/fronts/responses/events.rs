//! Normalized chat chunks → the Responses event stream, as a state machine
//! that also builds the final response object (a non-streamed request runs
//! the same machine and keeps only the object, so both agree).
//!
//! Output items open and close in the order the answer arrives:
//! reasoning (`reasoning_content`) is a `reasoning` item whose raw text is a
//! `reasoning_text` content part (`response.reasoning_text.delta`; modelshim
//! has the model's reasoning, not a summary of it), text is a `message`
//! item with one `output_text` part, and each tool call (by its chat
//! `index`, never by id: only the first delta carries one) a `function_call`
//! item. When the request asks for a reasoning summary, the same text also
//! fills the item's `summary` (`response.reasoning_summary_text.delta`):
//! clients that read only summaries (the Vercel AI SDK, LangChain) show it. An item closes when an item of another kind starts or the answer
//! ends; calls close at the end. Every event has a `sequence_number`.

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};

use super::names::Names;
use crate::fronts::drive::Translate;
use crate::openai::Chunk;
use crate::provider::UpstreamError;

/// One output item while it is built.
#[derive(Debug)]
enum Kind {
    /// `sealed`: the text as `encrypted_content`, once the item is done.
    Reasoning {
        text: String,
        sealed: Option<String>,
    },
    Message {
        text: String,
    },
    /// `name` (and `namespace`) as the client declared the tool; `custom`
    /// calls go back as `custom_tool_call` items with the raw `input`.
    Call {
        call_id: String,
        name: String,
        namespace: Option<String>,
        custom: bool,
        arguments: String,
    },
}

#[derive(Debug)]
struct Item {
    id: String,
    kind: Kind,
    done: bool,
}

impl Item {
    fn json(&self, status: &str, summary: bool) -> Value {
        match &self.kind {
            Kind::Reasoning { text, sealed } => {
                let done = status != "in_progress";
                let content = if done { json!([reasoning_part(text)]) } else { json!([]) };
                let summary = if done && summary { json!([summary_part(text)]) } else { json!([]) };
                let mut item = json!({"id": self.id, "type": "reasoning", "summary": summary, "content": content, "status": status});
                if let Some(sealed) = sealed.as_ref().filter(|_| done) {
                    item["encrypted_content"] = json!(sealed);
                }
                item
            }
            Kind::Message { text } => {
                let content = if status == "in_progress" { json!([]) } else { json!([text_part(text)]) };
                json!({"id": self.id, "type": "message", "role": "assistant", "status": status, "content": content})
            }
            Kind::Call { call_id, name, namespace, custom, arguments } => {
                let arguments = if status == "in_progress" { "" } else { arguments.as_str() };
                let mut item = if *custom {
                    json!({"id": self.id, "type": "custom_tool_call", "status": status, "call_id": call_id, "name": name, "input": custom_input(arguments)})
                } else {
                    json!({"id": self.id, "type": "function_call", "status": status, "call_id": call_id, "name": name, "arguments": arguments})
                };
                if let Some(ns) = namespace {
                    item["namespace"] = json!(ns);
                }
                item
            }
        }
    }
}

/// A custom call's raw input: the `input` argument of the function the
/// vendor called (the whole arguments if they are not that object).
fn custom_input(arguments: &str) -> String {
    match serde_json::from_str::<Value>(arguments) {
        Ok(Value::Object(o)) => match o.get("input") {
            Some(Value::String(s)) => s.clone(),
            Some(v) => v.to_string(),
            None => arguments.to_string(),
        },
        _ => arguments.to_string(),
    }
}

fn text_part(text: &str) -> Value {
    json!({"type": "output_text", "text": text, "annotations": [], "logprobs": []})
}

fn reasoning_part(text: &str) -> Value {
    json!({"type": "reasoning_text", "text": text})
}

fn summary_part(text: &str) -> Value {
    json!({"type": "summary_text", "text": text})
}

/// A new id with OpenAI's prefix style (`resp_`, `msg_`, `rs_`, `fc_`).
pub fn new_id(prefix: &str) -> String {
    format!("{prefix}_{:016x}{:016x}", fastrand::u64(..), fastrand::u64(..))
}

/// Builds the events and the response object from normalized chunks.
pub struct Builder {
    response: Value,
    seq: u64,
    items: Vec<Item>,
    /// Chat tool-call index → position in `items`.
    calls: BTreeMap<u32, usize>,
    usage: Option<Value>,
    finish: Option<String>,
    /// The request asked for a reasoning summary (`reasoning.summary`).
    summary: bool,
    /// Flattened tool names → the tools the client declared.
    names: Names,
    /// Seals a reasoning item's text into `encrypted_content`, when asked.
    seal: Option<Sealer>,
}

/// Seals reasoning text for the request's owner.
pub type Sealer = Box<dyn Fn(&str) -> Option<String> + Send + Sync>;

impl Builder {
    /// `response` is the object as created (status `in_progress`, no output);
    /// its `reasoning.summary` says whether summaries are filled.
    pub fn new(response: Value) -> Self {
        let summary = response["reasoning"]["summary"].as_str().is_some_and(|s| !s.is_empty());
        Builder {
            response,
            seq: 0,
            items: Vec::new(),
            calls: BTreeMap::new(),
            usage: None,
            finish: None,
            summary,
            names: Names::default(),
            seal: None,
        }
    }

    /// Calls to these flattened names go back as the declared tools.
    pub fn with_names(mut self, names: Names) -> Self {
        self.names = names;
        self
    }

    /// Every reasoning item also carries its text sealed (`encrypted_content`).
    pub fn with_seal(mut self, seal: Sealer) -> Self {
        self.seal = Some(seal);
        self
    }

    fn event(&mut self, kind: &str, mut body: Map<String, Value>) -> Value {
        body.insert("type".into(), json!(kind));
        body.insert("sequence_number".into(), json!(self.seq));
        self.seq += 1;
        Value::Object(body)
    }

    fn at(&mut self, kind: &str, index: usize, mut fields: Value) -> Value {
        let mut body = Map::new();
        let id = self.items[index].id.clone();
        body.insert("item_id".into(), json!(id));
        body.insert("output_index".into(), json!(index));
        if let Value::Object(f) = fields.take() {
            body.extend(f);
        }
        self.event(kind, body)
    }

    /// The open reasoning (or message) item, opened (closing others) when
    /// the last item is not one.
    fn text_item(&mut self, reasoning: bool, out: &mut Vec<Value>) -> usize {
        if let Some((i, last)) = self.items.iter().enumerate().next_back()
            && !last.done
            && matches!((&last.kind, reasoning), (Kind::Reasoning { .. }, true) | (Kind::Message { .. }, false))
        {
            return i;
        }
        self.close_all(out);
        let (prefix, kind) = if reasoning {
            ("rs", Kind::Reasoning { text: String::new(), sealed: None })
        } else {
            ("msg", Kind::Message { text: String::new() })
        };
        let i = self.open(Item { id: new_id(prefix), kind, done: false }, out);
        let part = if reasoning { reasoning_part("") } else { text_part("") };
        if reasoning && self.summary {
            let ev = self.at(
                "response.reasoning_summary_part.added",
                i,
                json!({"summary_index": 0, "part": summary_part("")}),
            );
            out.push(ev);
        }
        let ev = self.at("response.content_part.added", i, json!({"content_index": 0, "part": part}));
        out.push(ev);
        i
    }

    fn open(&mut self, item: Item, out: &mut Vec<Value>) -> usize {
        let i = self.items.len();
        let json = item.json("in_progress", self.summary);
        self.items.push(item);
        let mut body = Map::new();
        body.insert("output_index".into(), json!(i));
        body.insert("item".into(), json);
        out.push(self.event("response.output_item.added", body));
        i
    }

    fn close_text(&mut self, out: &mut Vec<Value>) {
        if let Some(i) = self.items.iter().position(|it| !it.done && !matches!(it.kind, Kind::Call { .. })) {
            self.close(i, out);
        }
    }

    fn close_all(&mut self, out: &mut Vec<Value>) {
        for i in 0..self.items.len() {
            if !self.items[i].done {
                self.close(i, out);
            }
        }
        self.calls.clear();
    }

    fn close(&mut self, i: usize, out: &mut Vec<Value>) {
        self.items[i].done = true;
        if let (Some(seal), Kind::Reasoning { text, sealed }) = (&self.seal, &mut self.items[i].kind)
            && !text.is_empty()
        {
            *sealed = seal(text);
        }
        let evs = match &self.items[i].kind {
            Kind::Reasoning { text, .. } => {
                let text = text.clone();
                let mut evs = Vec::new();
                if self.summary {
                    evs.push(("response.reasoning_summary_text.done", json!({"summary_index": 0, "text": text})));
                    let part = summary_part(&text);
                    evs.push(("response.reasoning_summary_part.done", json!({"summary_index": 0, "part": part})));
                }
                evs.push(("response.reasoning_text.done", json!({"content_index": 0, "text": text})));
                evs.push(("response.content_part.done", json!({"content_index": 0, "part": reasoning_part(&text)})));
                evs
            }
            Kind::Message { text } => {
                let text = text.clone();
                vec![
                    ("response.output_text.done", json!({"content_index": 0, "text": text, "logprobs": []})),
                    ("response.content_part.done", json!({"content_index": 0, "part": text_part(&text)})),
                ]
            }
            Kind::Call { custom: true, .. } => Vec::new(),
            Kind::Call { arguments, name, .. } => {
                vec![("response.function_call_arguments.done", json!({"arguments": arguments, "name": name}))]
            }
        };
        for (kind, fields) in evs {
            let ev = self.at(kind, i, fields);
            out.push(ev);
        }
        let item = self.items[i].json("completed", self.summary);
        let mut body = Map::new();
        body.insert("output_index".into(), json!(i));
        body.insert("item".into(), item);
        out.push(self.event("response.output_item.done", body));
    }

    /// The output items so far (finished ones as completed).
    pub fn output(&self) -> Vec<Value> {
        self.items.iter().map(|it| it.json(if it.done { "completed" } else { "incomplete" }, self.summary)).collect()
    }

    /// `response.completed` (or `response.incomplete`) after [`Builder::finish`].
    pub fn terminal(&mut self) -> Value {
        let kind = if self.response["status"] == "incomplete" { "response.incomplete" } else { "response.completed" };
        let mut body = Map::new();
        body.insert("response".into(), self.response.clone());
        self.event(kind, body)
    }

    /// The response object as it stands.
    pub fn response(&self) -> &Value {
        &self.response
    }
}

/// Chat usage → Responses usage (with the details the SDK types require).
pub fn usage(u: &Value) -> Value {
    let n = |v: &Value| v.as_u64().unwrap_or(0);
    let input = n(&u["prompt_tokens"]);
    let output = n(&u["completion_tokens"]);
    let total = u["total_tokens"].as_u64().unwrap_or(input + output);
    let cached = u["prompt_tokens_details"]["cached_tokens"]
        .as_u64()
        .or_else(|| u["prompt_cache_hit_tokens"].as_u64())
        .unwrap_or(0);
    let reasoning = n(&u["completion_tokens_details"]["reasoning_tokens"]);
    json!({
        "input_tokens": input,
        "input_tokens_details": {"cached_tokens": cached, "cache_write_tokens": 0},
        "output_tokens": output,
        "output_tokens_details": {"reasoning_tokens": reasoning},
        "total_tokens": total,
    })
}

impl Translate for Builder {
    /// `response.created` and `response.in_progress`.
    fn start(&mut self) -> Vec<Value> {
        let r = self.response.clone();
        let mut created = Map::new();
        created.insert("response".into(), r.clone());
        let mut progress = Map::new();
        progress.insert("response".into(), r);
        vec![self.event("response.created", created), self.event("response.in_progress", progress)]
    }
    /// The events of one normalized chunk (choice 0 only: Responses has one).
    fn push(&mut self, chunk: Chunk, out: &mut Vec<Value>) {
        if let Some(u) = chunk.usage.filter(|u| !u.is_null()) {
            self.usage = Some(u);
        }
        for ch in chunk.choices.into_iter().filter(|c| c.index == 0) {
            let d = ch.delta;
            if let Some(r) = d.reasoning_content.filter(|r| !r.is_empty()) {
                let i = self.text_item(true, out);
                if let Kind::Reasoning { text, .. } = &mut self.items[i].kind {
                    text.push_str(&r);
                }
                if self.summary {
                    let ev =
                        self.at("response.reasoning_summary_text.delta", i, json!({"summary_index": 0, "delta": r}));
                    out.push(ev);
                }
                let ev = self.at("response.reasoning_text.delta", i, json!({"content_index": 0, "delta": r}));
                out.push(ev);
            }
            if let Some(t) = d.content.filter(|t| !t.is_empty()) {
                let i = self.text_item(false, out);
                if let Kind::Message { text } = &mut self.items[i].kind {
                    text.push_str(&t);
                }
                let ev =
                    self.at("response.output_text.delta", i, json!({"content_index": 0, "delta": t, "logprobs": []}));
                out.push(ev);
            }
            for tc in d.tool_calls.into_iter().flatten() {
                let ix = tc.index.unwrap_or(0);
                let f = tc.function.unwrap_or_default();
                let i = match self.calls.get(&ix) {
                    Some(&i) => i,
                    None => {
                        self.close_text(out);
                        let call_id = tc.id.clone().unwrap_or_else(crate::openai::new_call_id);
                        let flat = f.name.clone().unwrap_or_default();
                        let (name, namespace, custom) = match self.names.target(&flat) {
                            Some(t) => (t.name.clone(), t.namespace.clone(), t.custom),
                            None => (flat, None, false),
                        };
                        let prefix = if custom { "ctc" } else { "fc" };
                        let item = Item {
                            id: new_id(prefix),
                            kind: Kind::Call { call_id, name, namespace, custom, arguments: String::new() },
                            done: false,
                        };
                        let i = self.open(item, out);
                        self.calls.insert(ix, i);
                        i
                    }
                };
                if let Some(Value::String(a)) = f.arguments.filter(|a| a.as_str().is_some_and(|a| !a.is_empty())) {
                    let mut custom = false;
                    if let Kind::Call { arguments, custom: c, .. } = &mut self.items[i].kind {
                        arguments.push_str(&a);
                        custom = *c;
                    }
                    // A custom call's input is known only whole (it is one
                    // argument of the JSON): it comes with the item's `done`.
                    if !custom {
                        let ev = self.at("response.function_call_arguments.delta", i, json!({"delta": a}));
                        out.push(ev);
                    }
                }
            }
            if ch.finish_reason.is_some() {
                self.finish = ch.finish_reason;
            }
        }
    }
    /// Closes every item and settles the response object (status, output,
    /// usage); returns the closing events, without the terminal event
    /// (see [`Builder::terminal`]), so the caller can store the response
    /// first.
    fn finish(&mut self) -> Vec<Value> {
        let mut out = Vec::new();
        self.close_all(&mut out);
        let incomplete = match self.finish.as_deref() {
            Some("length") => Some("max_output_tokens"),
            Some("content_filter") => Some("content_filter"),
            _ => None,
        };
        let output = self.output();
        let usage = self.usage.as_ref().map(usage);
        let r = &mut self.response;
        r["status"] = json!(if incomplete.is_some() { "incomplete" } else { "completed" });
        r["incomplete_details"] = incomplete.map_or(Value::Null, |reason| json!({"reason": reason}));
        r["output"] = Value::Array(output);
        r["usage"] = usage.unwrap_or(Value::Null);
        r["completed_at"] = json!(crate::openai::now());
        out
    }
    /// `response.failed` for an upstream failure mid-stream.
    fn fail(&mut self, e: &UpstreamError) -> Value {
        let (status, obj) = e.to_openai();
        let code = if status.as_u16() == 429 { "rate_limit_exceeded" } else { "server_error" };
        let output = self.output();
        let r = &mut self.response;
        r["status"] = json!("failed");
        r["output"] = Value::Array(output);
        r["error"] = json!({"code": code, "message": obj.message, "type": obj.kind, "param": obj.param});
        let mut body = Map::new();
        body.insert("response".into(), self.response.clone());
        self.event("response.failed", body)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::openai::{ChunkChoice, Delta, FunctionDelta, ToolCallDelta};

    fn chunk(delta: Delta, finish: Option<&str>) -> Chunk {
        Chunk {
            choices: vec![ChunkChoice {
                index: 0,
                delta,
                finish_reason: finish.map(str::to_string),
                extra: Map::new(),
            }],
            ..Default::default()
        }
    }

    fn call(ix: u32, id: Option<&str>, name: Option<&str>, args: &str) -> Delta {
        Delta {
            tool_calls: Some(vec![ToolCallDelta {
                index: Some(ix),
                id: id.map(str::to_string),
                kind: Some("function".into()),
                function: Some(FunctionDelta {
                    name: name.map(str::to_string),
                    arguments: Some(json!(args)),
                    extra: Map::new(),
                }),
                extra: Map::new(),
            }]),
            ..Default::default()
        }
    }

    #[test]
    fn reasoning_text_and_calls_in_order() {
        let mut b = Builder::new(json!({"id": "resp_1", "object": "response", "status": "in_progress", "output": []}));
        let mut out = b.start();
        let r = |t: &str| Delta { reasoning_content: Some(t.into()), ..Default::default() };
        let c = |t: &str| Delta { content: Some(t.into()), ..Default::default() };
        for ch in [
            chunk(r("thin"), None),
            chunk(r("king"), None),
            chunk(c("Let me "), None),
            chunk(c("look."), None),
            chunk(call(0, Some("call_a"), Some("f"), "{\"a\""), None),
            chunk(call(0, None, None, ":1}"), None),
            chunk(call(1, Some("call_b"), Some("g"), "{}"), Some("tool_calls")),
        ] {
            b.push(ch, &mut out);
        }
        let mut u = chunk(Delta::default(), None);
        u.choices.clear();
        u.usage = Some(json!({"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}));
        b.push(u, &mut out);
        out.extend(b.finish());
        out.push(b.terminal());
        let kinds: Vec<&str> = out.iter().map(|e| e["type"].as_str().unwrap()).collect();
        assert_eq!(
            kinds,
            [
                "response.created",
                "response.in_progress",
                "response.output_item.added",
                "response.content_part.added",
                "response.reasoning_text.delta",
                "response.reasoning_text.delta",
                "response.reasoning_text.done",
                "response.content_part.done",
                "response.output_item.done",
                "response.output_item.added",
                "response.content_part.added",
                "response.output_text.delta",
                "response.output_text.delta",
                "response.output_text.done",
                "response.content_part.done",
                "response.output_item.done",
                "response.output_item.added",
                "response.function_call_arguments.delta",
                "response.function_call_arguments.delta",
                "response.output_item.added",
                "response.function_call_arguments.delta",
                "response.function_call_arguments.done",
                "response.output_item.done",
                "response.function_call_arguments.done",
                "response.output_item.done",
                "response.completed",
            ]
        );
        for (i, e) in out.iter().enumerate() {
            assert_eq!(e["sequence_number"], i as u64);
        }
        let resp = &out.last().unwrap()["response"];
        assert_eq!(resp["status"], "completed");
        assert_eq!(resp["usage"]["input_tokens"], 3);
        assert_eq!(resp["usage"]["total_tokens"], 5);
        let o = resp["output"].as_array().unwrap();
        assert_eq!(o[0]["content"][0]["text"], "thinking");
        assert_eq!(o[1]["content"][0]["text"], "Let me look.");
        assert_eq!(o[2]["arguments"], "{\"a\":1}");
        assert_eq!(o[2]["call_id"], "call_a");
        assert_eq!(o[3]["name"], "g");
        assert!(o[0]["id"].as_str().unwrap().starts_with("rs_"));
        assert!(o[1]["id"].as_str().unwrap().starts_with("msg_"));
        assert!(o[2]["id"].as_str().unwrap().starts_with("fc_"));
    }

    /// With `reasoning.summary` asked for, the reasoning also fills the
    /// summary and its events (what summary-only clients read).
    #[test]
    fn a_requested_summary_carries_the_reasoning() {
        for summary in [Value::Null, json!("auto")] {
            let mut b = Builder::new(json!({"id": "resp_1", "reasoning": {"effort": null, "summary": summary}}));
            let mut out = Vec::new();
            let r = |t: &str| Delta { reasoning_content: Some(t.into()), ..Default::default() };
            b.push(chunk(r("thin"), None), &mut out);
            b.push(chunk(r("king"), None), &mut out);
            b.push(chunk(Delta { content: Some("ok".into()), ..Default::default() }, Some("stop")), &mut out);
            out.extend(b.finish());
            let deltas: String = out
                .iter()
                .filter(|e| e["type"] == "response.reasoning_summary_text.delta")
                .map(|e| e["delta"].as_str().unwrap())
                .collect();
            let o = &b.response()["output"][0];
            assert_eq!(o["content"][0]["text"], "thinking");
            if summary.is_null() {
                assert_eq!(deltas, "");
                assert_eq!(o["summary"], json!([]));
                continue;
            }
            assert_eq!(deltas, "thinking");
            assert_eq!(o["summary"], json!([{"type": "summary_text", "text": "thinking"}]));
            let kinds: Vec<&str> = out.iter().map(|e| e["type"].as_str().unwrap()).collect();
            let pos = |k: &str| kinds.iter().position(|x| *x == k).unwrap();
            assert!(pos("response.reasoning_summary_part.added") < pos("response.reasoning_summary_text.delta"));
            assert!(pos("response.reasoning_summary_text.done") < pos("response.reasoning_summary_part.done"));
            assert!(pos("response.reasoning_summary_part.done") < pos("response.output_item.done"));
            let done = out.iter().find(|e| e["type"] == "response.reasoning_summary_part.done").unwrap();
            assert_eq!(done["part"]["text"], "thinking");
            assert_eq!(done["summary_index"], 0);
        }
    }

    #[test]
    fn length_is_incomplete_and_failure_is_failed() {
        let mut b = Builder::new(json!({"id": "resp_1"}));
        let mut out = Vec::new();
        b.push(chunk(Delta { content: Some("abc".into()), ..Default::default() }, Some("length")), &mut out);
        b.finish();
        let t = b.terminal();
        assert_eq!(t["type"], "response.incomplete");
        assert_eq!(t["response"]["incomplete_details"]["reason"], "max_output_tokens");
        let mut b = Builder::new(json!({"id": "resp_2"}));
        b.push(chunk(Delta { content: Some("abc".into()), ..Default::default() }, None), &mut out);
        let f = b.fail(&UpstreamError::Protocol("cut".into()));
        assert_eq!(f["type"], "response.failed");
        assert_eq!(f["response"]["error"]["code"], "server_error");
        assert_eq!(f["response"]["output"][0]["status"], "incomplete");
    }

    fn call_chunk(index: u32, id: Option<&str>, name: Option<&str>, args: &str) -> Chunk {
        serde_json::from_value(json!({"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m",
            "choices": [{"index": 0, "delta": {"tool_calls": [{"index": index, "id": id, "type": "function",
                "function": {"name": name, "arguments": args}}]}, "finish_reason": null}]}))
        .unwrap()
    }

    #[test]
    fn flattened_calls_go_back_as_the_declared_namespace_and_custom_tools() {
        let mut names = Names::default();
        names.plain("exec_command");
        let spawn = names.add(Some("multi_agent_v1"), "spawn_agent", false);
        let patch = names.add(None, "apply_patch", true);
        let mut b = Builder::new(json!({"id": "resp_1"})).with_names(names);
        let mut ev = Vec::new();
        b.push(call_chunk(0, Some("call_1"), Some(&spawn), "{\"task\":"), &mut ev);
        b.push(call_chunk(0, None, None, "\"x\"}"), &mut ev);
        b.push(call_chunk(1, Some("call_2"), Some(&patch), "{\"input\": \"*** Begin Patch\"}"), &mut ev);
        b.push(call_chunk(2, Some("call_3"), Some("exec_command"), "{}"), &mut ev);
        ev.extend(b.finish());
        let out = b.response()["output"].clone();
        assert_eq!(
            out[0],
            json!({"id": out[0]["id"], "type": "function_call", "status": "completed", "call_id": "call_1",
                   "name": "spawn_agent", "namespace": "multi_agent_v1", "arguments": "{\"task\":\"x\"}"})
        );
        assert_eq!(out[1]["type"], "custom_tool_call");
        assert_eq!(out[1]["name"], "apply_patch");
        assert_eq!(out[1]["input"], "*** Begin Patch");
        assert!(out[1].get("namespace").is_none());
        assert_eq!(out[2]["name"], "exec_command");
        assert!(out[2].get("namespace").is_none());
        // The done events name the declared tool; a custom call has no argument deltas.
        let done: Vec<&Value> = ev.iter().filter(|e| e["type"] == "response.output_item.done").collect();
        assert_eq!(done[0]["item"]["namespace"], "multi_agent_v1");
        assert!(!ev.iter().any(|e| e["type"] == "response.function_call_arguments.delta" && e["output_index"] == 1));
    }

    #[test]
    fn reasoning_is_sealed_once_when_asked() {
        let mut b = Builder::new(json!({"id": "resp_1"})).with_seal(Box::new(|t| Some(format!("sealed({t})"))));
        let mut ev = Vec::new();
        let chunk: Chunk = serde_json::from_value(json!({"id": "c", "object": "chat.completion.chunk", "created": 1,
            "model": "m", "choices": [{"index": 0, "delta": {"reasoning_content": "think"}, "finish_reason": null}]}))
        .unwrap();
        b.push(chunk, &mut ev);
        let added = ev.iter().find(|e| e["type"] == "response.output_item.added").unwrap();
        assert!(added["item"].get("encrypted_content").is_none());
        ev.extend(b.finish());
        let done = ev.iter().find(|e| e["type"] == "response.output_item.done").unwrap();
        assert_eq!(done["item"]["encrypted_content"], "sealed(think)");
        assert_eq!(b.response()["output"][0]["encrypted_content"], "sealed(think)");
        // Not asked: no field.
        let mut plain = Builder::new(json!({"id": "resp_2"}));
        let chunk: Chunk = serde_json::from_value(json!({"id": "c", "object": "chat.completion.chunk", "created": 1,
            "model": "m", "choices": [{"index": 0, "delta": {"reasoning_content": "think"}, "finish_reason": null}]}))
        .unwrap();
        plain.push(chunk, &mut Vec::new());
        plain.finish();
        assert!(plain.response()["output"][0].get("encrypted_content").is_none());
    }
}
