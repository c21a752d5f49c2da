//! Between whole responses and chunks: a non-streamed upstream answer
//! becomes one chunk for the normalizer, and normalized chunks are assembled
//! into one `chat.completion` for clients that did not stream.

use serde_json::{Map, Value, json};

use crate::openai::{Chunk, ChunkChoice, Completion, Delta};

/// A whole completion as one chunk (each message becomes a delta).
pub fn completion_to_chunk(c: Completion) -> Chunk {
    Chunk {
        id: c.id,
        object: "chat.completion.chunk".into(),
        created: c.created,
        model: c.model,
        choices: c
            .choices
            .into_iter()
            .map(|ch| ChunkChoice {
                index: ch.index,
                delta: ch.message,
                finish_reason: Some(ch.finish_reason.unwrap_or_else(|| "stop".into())),
                extra: ch.extra,
            })
            .collect(),
        usage: c.usage,
        extra: c.extra,
    }
}

#[derive(Default)]
struct Call {
    id: Option<String>,
    name: String,
    arguments: String,
    extra: Map<String, Value>,
}

#[derive(Default)]
struct Choice {
    index: u32,
    content: Option<String>,
    reasoning: Option<String>,
    calls: Vec<(u32, Call)>,
    finish: Option<String>,
    message_extra: Map<String, Value>,
    choice_extra: Map<String, Value>,
}

/// Folds normalized chunks into one completion.
#[derive(Default)]
pub struct Assembler {
    meta: Option<Chunk>,
    choices: Vec<Choice>,
    usage: Option<Value>,
}

impl Assembler {
    pub fn push(&mut self, mut chunk: Chunk) {
        if let Some(u) = chunk.usage.take() {
            self.usage = Some(u);
        }
        let choices = std::mem::take(&mut chunk.choices);
        match &mut self.meta {
            None => self.meta = Some(chunk),
            Some(m) => {
                for (k, v) in chunk.extra {
                    m.extra.entry(k).or_insert(v);
                }
            }
        }
        for ch in choices {
            let pos = match self.choices.iter().position(|c| c.index == ch.index) {
                Some(p) => p,
                None => {
                    self.choices.push(Choice { index: ch.index, ..Default::default() });
                    self.choices.len() - 1
                }
            };
            let c = &mut self.choices[pos];
            let Delta { content, reasoning_content, tool_calls, extra, .. } = ch.delta;
            if let Some(t) = content {
                c.content.get_or_insert_with(String::new).push_str(&t);
            }
            if let Some(t) = reasoning_content {
                c.reasoning.get_or_insert_with(String::new).push_str(&t);
            }
            for tc in tool_calls.into_iter().flatten() {
                let ix = tc.index.unwrap_or(0);
                let call = match c.calls.iter().position(|(i, _)| *i == ix) {
                    Some(p) => &mut c.calls[p].1,
                    None => {
                        c.calls.push((ix, Call::default()));
                        let last = c.calls.len() - 1;
                        &mut c.calls[last].1
                    }
                };
                if tc.id.is_some() {
                    call.id = tc.id;
                }
                for (k, v) in tc.extra {
                    call.extra.entry(k).or_insert(v);
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
            for (k, v) in extra {
                c.message_extra.entry(k).or_insert(v);
            }
            for (k, v) in ch.extra {
                c.choice_extra.insert(k, v);
            }
            if ch.finish_reason.is_some() {
                c.finish = ch.finish_reason;
            }
        }
    }

    /// The assembled `chat.completion` body.
    pub fn finish(self) -> Value {
        let meta = self.meta.unwrap_or_default();
        let mut choices: Vec<Choice> = self.choices;
        choices.sort_by_key(|c| c.index);
        let choices: Vec<Value> = choices
            .into_iter()
            .map(|c| {
                let mut msg = Map::new();
                msg.insert("role".into(), json!("assistant"));
                msg.insert("content".into(), c.content.map_or(Value::Null, Value::String));
                if let Some(r) = c.reasoning {
                    msg.insert("reasoning_content".into(), Value::String(r));
                }
                if !c.calls.is_empty() {
                    let calls: Vec<Value> = c
                        .calls
                        .into_iter()
                        .map(|(_, k)| {
                            let mut v = json!({
                                "id": k.id.unwrap_or_else(crate::openai::new_call_id),
                                "type": "function",
                                "function": {"name": k.name, "arguments": k.arguments},
                            });
                            if let Some(o) = v.as_object_mut() {
                                o.extend(k.extra);
                            }
                            v
                        })
                        .collect();
                    msg.insert("tool_calls".into(), Value::Array(calls));
                }
                for (k, v) in c.message_extra {
                    msg.entry(k).or_insert(v);
                }
                let mut choice = Map::new();
                choice.insert("index".into(), json!(c.index));
                choice.insert("message".into(), Value::Object(msg));
                choice.insert("finish_reason".into(), json!(c.finish.unwrap_or_else(|| "stop".into())));
                choice.extend(c.choice_extra);
                Value::Object(choice)
            })
            .collect();
        let mut body = Map::new();
        body.insert("id".into(), json!(meta.id));
        body.insert("object".into(), json!("chat.completion"));
        body.insert("created".into(), json!(meta.created));
        body.insert("model".into(), json!(meta.model));
        body.insert("choices".into(), Value::Array(choices));
        if let Some(u) = self.usage {
            body.insert("usage".into(), u);
        }
        for (k, v) in meta.extra {
            body.entry(k).or_insert(v);
        }
        Value::Object(body)
    }
}
