//! Normalized chat chunks → Anthropic's Messages events, as a state machine
//! that also builds the final message (a non-streamed request runs the same
//! machine and keeps only the message, so both agree).
//!
//! Content blocks open and close in the order the answer arrives:
//! reasoning is a `thinking` block (closed with a `signature_delta` of ours,
//! `modelshim.` + a digest of the text: no Anthropic backend would take it
//! for its own), text a `text` block, each tool call (by its chat `index`) a
//! `tool_use` block whose input streams as `input_json_delta`. Blocks cannot
//! reopen, so a call that starts while the open call's input is not yet whole
//! JSON waits (its pieces gathered) and is sent whole once the open one ends:
//! an upstream that interleaves calls' arguments loses nothing.

use std::collections::BTreeMap;

use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::fronts::drive::Translate;
use crate::openai::Chunk;
use crate::provider::UpstreamError;

#[derive(Debug)]
enum Block {
    Thinking(String),
    Text(String),
    ToolUse { id: String, name: String, input: String },
}

/// The signature of a thinking block: ours, recognizably so.
pub fn signature(thinking: &str) -> String {
    let d = Sha256::digest(thinking.as_bytes());
    let hex: String = d[..16].iter().map(|b| format!("{b:02x}")).collect();
    format!("modelshim.{hex}")
}

/// A new message id in Anthropic's style.
pub fn new_id() -> String {
    format!("msg_{:016x}{:08x}", fastrand::u64(..), fastrand::u32(..))
}

#[derive(Debug, Clone, Copy)]
enum Slot {
    Block(usize),
    Waiting(usize),
}

pub struct Builder {
    id: String,
    model: String,
    stop_sequences: Vec<String>,
    blocks: Vec<Block>,
    /// Whether the last block is still open.
    open: bool,
    /// Chat tool-call index → where its pieces go.
    calls: BTreeMap<u32, Slot>,
    /// Calls waiting for the open call to end, in order of arrival.
    waiting: Vec<Block>,
    finish: Option<String>,
    /// The matched stop string, where the upstream names it (vLLM's `stop_reason`).
    matched: Option<String>,
    usage: Option<Value>,
}

impl Builder {
    pub fn new(model: &str, stop_sequences: Vec<String>) -> Self {
        Builder {
            id: new_id(),
            model: model.to_string(),
            stop_sequences,
            blocks: Vec::new(),
            open: false,
            calls: BTreeMap::new(),
            waiting: Vec::new(),
            finish: None,
            matched: None,
            usage: None,
        }
    }

    /// The open thinking (or text) block, opened (closing the last) when the
    /// last block is not one.
    fn text_block(&mut self, thinking: bool, out: &mut Vec<Value>) -> usize {
        if self.open
            && let Some(last) = self.blocks.last()
            && matches!((last, thinking), (Block::Thinking(_), true) | (Block::Text(_), false))
        {
            return self.blocks.len() - 1;
        }
        self.settle(out);
        let i = self.blocks.len();
        let (block, start) = if thinking {
            (Block::Thinking(String::new()), json!({"type": "thinking", "thinking": "", "signature": ""}))
        } else {
            (Block::Text(String::new()), json!({"type": "text", "text": ""}))
        };
        out.push(json!({"type": "content_block_start", "index": i, "content_block": start}));
        self.blocks.push(block);
        self.open = true;
        i
    }

    /// Whether the open block is a call whose input is not yet a whole JSON value.
    fn open_call_unfinished(&self) -> bool {
        match self.blocks.last() {
            Some(Block::ToolUse { input, .. }) if self.open => {
                !input.trim().is_empty() && serde_json::from_str::<serde::de::IgnoredAny>(input).is_err()
            }
            _ => false,
        }
    }

    /// Opens a tool-use block (the last one must be closed).
    fn open_block(&mut self, block: Block, out: &mut Vec<Value>) -> usize {
        let i = self.blocks.len();
        if let Block::ToolUse { id, name, .. } = &block {
            out.push(json!({"type": "content_block_start", "index": i,
                "content_block": {"type": "tool_use", "id": id, "name": name, "input": {}}}));
        }
        self.blocks.push(block);
        self.open = true;
        i
    }

    /// Closes the open block, then sends each waiting call whole.
    fn settle(&mut self, out: &mut Vec<Value>) {
        self.close(out);
        let waiting = std::mem::take(&mut self.waiting);
        let base = self.blocks.len();
        for slot in self.calls.values_mut() {
            if let Slot::Waiting(w) = *slot {
                *slot = Slot::Block(base + w);
            }
        }
        for block in waiting {
            let input = match &block {
                Block::ToolUse { input, .. } => input.clone(),
                _ => String::new(),
            };
            let i = self.open_block(block, out);
            if !input.is_empty() {
                out.push(delta(i, json!({"type": "input_json_delta", "partial_json": input})));
            }
            self.close(out);
        }
    }

    fn close(&mut self, out: &mut Vec<Value>) {
        if !self.open {
            return;
        }
        self.open = false;
        let i = self.blocks.len() - 1;
        if let Some(Block::Thinking(t)) = self.blocks.last() {
            out.push(delta(i, json!({"type": "signature_delta", "signature": signature(t)})));
        }
        out.push(json!({"type": "content_block_stop", "index": i}));
    }

    /// `stop_reason` and `stop_sequence` from the chat finish reason.
    fn stop(&self) -> (&'static str, Value) {
        let called = self.blocks.iter().chain(&self.waiting).any(|b| matches!(b, Block::ToolUse { .. }));
        match self.finish.as_deref() {
            Some("tool_calls" | "function_call") => ("tool_use", Value::Null),
            Some("length") => ("max_tokens", Value::Null),
            Some("content_filter") => ("refusal", Value::Null),
            _ if called => ("tool_use", Value::Null),
            _ => match self.matched.as_ref().filter(|m| self.stop_sequences.contains(m)) {
                Some(m) => ("stop_sequence", json!(m)),
                None => ("end_turn", Value::Null),
            },
        }
    }

    fn usage_json(&self) -> Value {
        let u = self.usage.as_ref().unwrap_or(&Value::Null);
        let n = |v: &Value| v.as_u64().unwrap_or(0);
        let prompt = n(&u["prompt_tokens"]);
        let cached = u["prompt_tokens_details"]["cached_tokens"].as_u64().or(u["prompt_cache_hit_tokens"].as_u64());
        let cached = cached.unwrap_or(0).min(prompt);
        json!({"input_tokens": prompt - cached, "output_tokens": n(&u["completion_tokens"]),
               "cache_creation_input_tokens": 0, "cache_read_input_tokens": cached})
    }

    /// The message object; `done`: with its content, stop reason and usage.
    fn message_json(&self, done: bool) -> Value {
        // Waiting calls follow the blocks, as `settle` would send them.
        let content: Vec<Value> =
            if done { self.blocks.iter().chain(&self.waiting).map(block_json).collect() } else { Vec::new() };
        let (reason, seq) = if done {
            let (r, s) = self.stop();
            (json!(r), s)
        } else {
            (Value::Null, Value::Null)
        };
        json!({"id": self.id, "type": "message", "role": "assistant", "model": self.model, "content": content,
               "stop_reason": reason, "stop_sequence": seq, "usage": self.usage_json()})
    }

    /// The finished message (the non-streamed answer).
    pub fn message(&self) -> Value {
        self.message_json(true)
    }
}

fn delta(index: usize, d: Value) -> Value {
    json!({"type": "content_block_delta", "index": index, "delta": d})
}

fn block_json(b: &Block) -> Value {
    match b {
        Block::Thinking(t) => json!({"type": "thinking", "thinking": t, "signature": signature(t)}),
        Block::Text(t) => json!({"type": "text", "text": t}),
        Block::ToolUse { id, name, input } => {
            let parsed = if input.trim().is_empty() {
                json!({})
            } else {
                serde_json::from_str(input).unwrap_or_else(|_| json!({}))
            };
            json!({"type": "tool_use", "id": id, "name": name, "input": parsed})
        }
    }
}

impl Translate for Builder {
    /// `message_start` and a `ping`.
    fn start(&mut self) -> Vec<Value> {
        let mut m = self.message_json(false);
        m["usage"] = json!({"input_tokens": 0, "output_tokens": 0});
        vec![json!({"type": "message_start", "message": m}), json!({"type": "ping"})]
    }
    fn push(&mut self, chunk: Chunk, out: &mut Vec<Value>) {
        if let Some(u) = chunk.usage.filter(|u| !u.is_null()) {
            self.usage = Some(u);
        }
        for ch in chunk.choices.into_iter().filter(|c| c.index == 0) {
            let d = ch.delta;
            if let Some(r) = d.reasoning_content.filter(|r| !r.is_empty()) {
                let i = self.text_block(true, out);
                if let Block::Thinking(t) = &mut self.blocks[i] {
                    t.push_str(&r);
                }
                out.push(delta(i, json!({"type": "thinking_delta", "thinking": r})));
            }
            if let Some(t) = d.content.filter(|t| !t.is_empty()) {
                let i = self.text_block(false, out);
                if let Block::Text(s) = &mut self.blocks[i] {
                    s.push_str(&t);
                }
                out.push(delta(i, json!({"type": "text_delta", "text": t})));
            }
            for tc in d.tool_calls.into_iter().flatten() {
                let ix = tc.index.unwrap_or(0);
                let f = tc.function.unwrap_or_default();
                let args = match f.arguments {
                    Some(Value::String(a)) => a,
                    Some(Value::Null) | None => String::new(),
                    Some(other) => other.to_string(),
                };
                let slot = match self.calls.get(&ix) {
                    Some(&slot) => slot,
                    None => {
                        let id = tc.id.clone().unwrap_or_else(|| format!("toolu_{:016x}", fastrand::u64(..)));
                        let name = f.name.clone().unwrap_or_default();
                        let block = Block::ToolUse { id, name, input: String::new() };
                        let slot = if self.open_call_unfinished() {
                            self.waiting.push(block);
                            Slot::Waiting(self.waiting.len() - 1)
                        } else {
                            self.settle(out);
                            Slot::Block(self.open_block(block, out))
                        };
                        self.calls.insert(ix, slot);
                        slot
                    }
                };
                if args.is_empty() {
                    continue;
                }
                match slot {
                    Slot::Waiting(w) => {
                        if let Some(Block::ToolUse { input, .. }) = self.waiting.get_mut(w) {
                            input.push_str(&args);
                        }
                    }
                    Slot::Block(i) => {
                        if let Some(Block::ToolUse { input, .. }) = self.blocks.get_mut(i) {
                            input.push_str(&args);
                        }
                        // A piece of a call whose block text or thinking closed
                        // is in the final message only.
                        if self.open && i + 1 == self.blocks.len() {
                            out.push(delta(i, json!({"type": "input_json_delta", "partial_json": args})));
                        }
                    }
                }
            }
            if let Some(s) = ch.extra.get("stop_reason").and_then(Value::as_str) {
                self.matched = Some(s.to_string());
            }
            if ch.finish_reason.is_some() {
                self.finish = ch.finish_reason;
            }
        }
    }
    /// The closing events: the last block's stop, `message_delta`, `message_stop`.
    fn finish(&mut self) -> Vec<Value> {
        let mut out = Vec::new();
        self.settle(&mut out);
        let (reason, seq) = self.stop();
        out.push(json!({"type": "message_delta", "delta": {"stop_reason": reason, "stop_sequence": seq},
            "usage": self.usage_json()}));
        out.push(json!({"type": "message_stop"}));
        out
    }
    /// The in-band `error` event for an upstream failure mid-stream.
    fn fail(&mut self, e: &UpstreamError) -> Value {
        let (status, obj) = e.to_openai();
        super::error_json(status.as_u16(), &obj.message)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::openai::{ChunkChoice, Delta, FunctionDelta, ToolCallDelta};

    fn chunk(d: Delta, finish: Option<&str>) -> Chunk {
        Chunk {
            choices: vec![ChunkChoice { delta: d, finish_reason: finish.map(str::to_string), ..Default::default() }],
            ..Default::default()
        }
    }

    fn call(ix: u32, id: Option<&str>, name: Option<&str>, args: &str) -> Delta {
        Delta {
            tool_calls: Some(vec![ToolCallDelta {
                index: Some(ix),
                id: id.map(str::to_string),
                function: Some(FunctionDelta {
                    name: name.map(str::to_string),
                    arguments: Some(json!(args)),
                    ..Default::default()
                }),
                ..Default::default()
            }]),
            ..Default::default()
        }
    }

    #[test]
    fn thinking_text_and_calls_stream_in_order() {
        let mut b = Builder::new("claude-x", Vec::new());
        let mut out = Vec::new();
        let think = Delta { reasoning_content: Some("hm".into()), ..Default::default() };
        let text = Delta { content: Some("Hi".into()), ..Default::default() };
        for d in [
            think,
            text,
            call(0, Some("c0"), Some("f"), "{\"a\""),
            call(0, None, None, ":1}"),
            call(1, Some("c1"), Some("g"), "{}"),
        ] {
            b.push(chunk(d, None), &mut out);
        }
        let mut last = chunk(Delta::default(), Some("tool_calls"));
        last.usage =
            Some(json!({"prompt_tokens": 10, "completion_tokens": 4, "prompt_tokens_details": {"cached_tokens": 6}}));
        b.push(last, &mut out);
        out.extend(b.finish());
        let sig = signature("hm");
        assert_eq!(
            out,
            vec![
                json!({"type": "content_block_start", "index": 0, "content_block": {"type": "thinking", "thinking": "", "signature": ""}}),
                delta(0, json!({"type": "thinking_delta", "thinking": "hm"})),
                delta(0, json!({"type": "signature_delta", "signature": sig})),
                json!({"type": "content_block_stop", "index": 0}),
                json!({"type": "content_block_start", "index": 1, "content_block": {"type": "text", "text": ""}}),
                delta(1, json!({"type": "text_delta", "text": "Hi"})),
                json!({"type": "content_block_stop", "index": 1}),
                json!({"type": "content_block_start", "index": 2, "content_block": {"type": "tool_use", "id": "c0", "name": "f", "input": {}}}),
                delta(2, json!({"type": "input_json_delta", "partial_json": "{\"a\""})),
                delta(2, json!({"type": "input_json_delta", "partial_json": ":1}"})),
                json!({"type": "content_block_stop", "index": 2}),
                json!({"type": "content_block_start", "index": 3, "content_block": {"type": "tool_use", "id": "c1", "name": "g", "input": {}}}),
                delta(3, json!({"type": "input_json_delta", "partial_json": "{}"})),
                json!({"type": "content_block_stop", "index": 3}),
                json!({"type": "message_delta", "delta": {"stop_reason": "tool_use", "stop_sequence": null},
                       "usage": {"input_tokens": 4, "output_tokens": 4, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 6}}),
                json!({"type": "message_stop"}),
            ]
        );
        let m = b.message();
        assert_eq!(
            m["content"],
            json!([{"type": "thinking", "thinking": "hm", "signature": sig}, {"type": "text", "text": "Hi"},
                   {"type": "tool_use", "id": "c0", "name": "f", "input": {"a": 1}},
                   {"type": "tool_use", "id": "c1", "name": "g", "input": {}}])
        );
        assert!(sig.starts_with("modelshim.") && sig.len() == "modelshim.".len() + 32);
    }

    /// What a streaming client rebuilds: each block's streamed input, by index.
    fn streamed_inputs(out: &[Value]) -> BTreeMap<u64, String> {
        let mut m = BTreeMap::new();
        for e in out {
            if e["delta"]["type"] == "input_json_delta" {
                let i = e["index"].as_u64().unwrap_or(u64::MAX);
                m.entry(i).or_insert_with(String::new).push_str(e["delta"]["partial_json"].as_str().unwrap_or(""));
            }
        }
        m
    }

    #[test]
    fn a_late_piece_of_an_earlier_call_still_reaches_a_streaming_client() {
        let mut b = Builder::new("m", Vec::new());
        let mut out = Vec::new();
        for d in [
            call(0, Some("c0"), Some("f"), "{\"a\""),
            call(1, Some("c1"), Some("g"), "{\"b\":"),
            call(0, None, None, ":1}"),
            call(1, None, None, "2}"),
            call(2, Some("c2"), Some("h"), "{}"),
        ] {
            b.push(chunk(d, None), &mut out);
        }
        b.push(chunk(Delta::default(), Some("tool_calls")), &mut out);
        // The non-streamed answer reads the message without finishing the events.
        let whole = b.message();
        out.extend(b.finish());
        assert_eq!(whole, b.message());
        let starts: Vec<_> =
            out.iter().filter(|e| e["type"] == "content_block_start").map(|e| e["index"].clone()).collect();
        let stops: Vec<_> =
            out.iter().filter(|e| e["type"] == "content_block_stop").map(|e| e["index"].clone()).collect();
        assert_eq!(starts, [json!(0), json!(1), json!(2)]);
        assert_eq!(stops, starts);
        let inputs = streamed_inputs(&out);
        assert_eq!(inputs.values().map(String::as_str).collect::<Vec<_>>(), ["{\"a\":1}", "{\"b\":2}", "{}"]);
        let m = b.message();
        assert_eq!(m["content"][0]["input"], json!({"a": 1}));
        assert_eq!(m["content"][1]["input"], json!({"b": 2}));
    }

    #[test]
    fn stop_reasons() {
        let reason = |finish: &str, matched: Option<&str>| {
            let mut b = Builder::new("m", vec!["END".into()]);
            let mut c = chunk(Delta { content: Some("x".into()), ..Default::default() }, Some(finish));
            if let Some(m) = matched {
                c.choices[0].extra.insert("stop_reason".into(), json!(m));
            }
            b.push(c, &mut Vec::new());
            let m = b.message();
            (m["stop_reason"].as_str().unwrap_or("").to_string(), m["stop_sequence"].clone())
        };
        assert_eq!(reason("stop", None), ("end_turn".into(), Value::Null));
        assert_eq!(reason("length", None), ("max_tokens".into(), Value::Null));
        assert_eq!(reason("stop", Some("END")), ("stop_sequence".into(), json!("END")));
        assert_eq!(reason("stop", Some("other")), ("end_turn".into(), Value::Null));
    }
}
