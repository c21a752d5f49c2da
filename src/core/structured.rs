//! Structured outputs held to their schema (docs/structured-outputs.md): a
//! `response_format: json_schema` answer, and the arguments of `strict`
//! tools, are validated before the client sees them.
//!
//! Where the answering route's profile emulates structured outputs (the
//! vendor takes only `json_object`; the schema went into the prompt), or
//! the schema says `strict: true`, the whole answer is held: its JSON is
//! extracted from fences and prose ([`pick`]), repaired where only the
//! syntax is broken, and validated. An answer that does not validate is
//! asked again, hidden from the client, with the validation errors, at most
//! the provider's `structured_retries` times, along the same one way to the
//! upstream (so every re-ask is measured and billed to the request). The
//! client gets only the JSON and the model's finish reason, streamed or
//! whole; an answer that never validates is a 422 (`strict`), or the best
//! effort with an `x-modelshim-warning` header. Requests that ask for none
//! of this never come here.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use futures_util::StreamExt;
use futures_util::stream::BoxStream;
use serde_json::{Map, Value, json};

use super::Core;
use super::context::RequestCtx;
use super::pipeline::{self, Reader};
use crate::config::StructuredMode;
use crate::error::ApiError;
use crate::openai::{ChatRequest, Chunk, ChunkChoice, Delta, FunctionDelta, Message, ToolCallDelta, VALIDATE_MARK};
use crate::provider::{Route, UpstreamError};

type Chunks = BoxStream<'static, Result<Chunk, UpstreamError>>;

/// Candidates looked at in one answer: fenced blocks and bracketed spans.
const MAX_CANDIDATES: usize = 16;
/// Validation errors kept per answer (told to the model, the first to the client).
const MAX_ERRORS: usize = 5;
/// The size of the content pieces a held answer is streamed in.
const PIECE: usize = 256;

/// Whether the request asks for anything checked here: a `json_schema`
/// response format, a `strict` tool, or a tool the front marked. Cheap (no
/// schema is compiled), so the plain path pays one look.
pub fn wanted(req: &ChatRequest) -> bool {
    json_schema(req).is_some()
        || req.extra.contains_key(VALIDATE_MARK)
        || req.tools.iter().flatten().any(|t| t.get("function").and_then(|f| f.get("strict")) == Some(&json!(true)))
}

/// The `json_schema` object of a `response_format`.
fn json_schema(req: &ChatRequest) -> Option<&Value> {
    let rf = req.extra.get("response_format")?;
    (rf.get("type").and_then(Value::as_str) == Some("json_schema")).then(|| rf.get("json_schema")).flatten()
}

/// A compiled schema and whether a failure to meet it fails the request.
struct Check {
    validator: jsonschema::Validator,
    strict: bool,
}

/// What this request holds its answer to.
struct Checks {
    format: Option<Check>,
    /// Tools by name whose calls' arguments are validated.
    tools: HashMap<String, Check>,
}

/// A schema compiled, or `None` (logged) when it does not compile: such a
/// schema is not checked rather than failing a request that worked before.
pub fn compile(schema: &Value, what: &str) -> Option<jsonschema::Validator> {
    match jsonschema::validator_for(schema) {
        Ok(v) => Some(v),
        Err(e) => {
            tracing::warn!(what, "the schema does not compile, the answer is not validated: {e}");
            None
        }
    }
}

impl Checks {
    fn of(req: &ChatRequest) -> Self {
        let format = json_schema(req).and_then(|js| {
            let strict = js.get("strict") == Some(&json!(true));
            let schema = js.get("schema")?;
            Some(Check { validator: compile(schema, "response_format")?, strict })
        });
        let marked = req.extra.get(VALIDATE_MARK).and_then(Value::as_str);
        let mut tools = HashMap::new();
        for f in req.tools.iter().flatten().filter_map(|t| t.get("function")) {
            let Some(name) = f.get("name").and_then(Value::as_str) else { continue };
            let strict = f.get("strict") == Some(&json!(true));
            if !strict && marked != Some(name) {
                continue;
            }
            let empty = json!({"type": "object"});
            if let Some(validator) = compile(f.get("parameters").unwrap_or(&empty), name) {
                tools.insert(name.to_string(), Check { validator, strict });
            }
        }
        Checks { format, tools }
    }
}

/// The answer of a request [`wanted`] says asks for checks: as the model
/// gave it when nothing applies on the route that answered (a native
/// vendor, no `strict`), else held, checked, re-asked, and sent as chunks.
/// `looping` is the agent loop's registry when server-side tools are active.
pub async fn answer(
    s: &Arc<Core>,
    ctx: &Arc<RequestCtx>,
    mut req: ChatRequest,
    looping: Option<Arc<crate::tools::Registry>>,
) -> Result<Chunks, ApiError> {
    let checks = Checks::of(&req);
    let routes = super::route::routes(s, &req)?;
    let (client_stream, want_usage) = (req.is_stream(), req.is_stream() && req.wants_usage());
    let mut from = 0;
    let mut usage = None;
    let mut retry = 0;
    loop {
        let (route, chunks) = match &looping {
            Some(tools) => {
                // The loop's answer names no route: its chain's first decides.
                let chunks =
                    super::agent::chunks(s.clone(), ctx.clone(), tools.clone(), routes.clone(), req.clone()).await?;
                (routes[0].clone(), chunks)
            }
            None => {
                let begun =
                    pipeline::begin(s, ctx, &routes[from..], req.clone(), Reader::Client { as_is: false }).await?;
                from += begun.index;
                (begun.route, begun.started.chunks(s))
            }
        };
        let format_on = checks.format.as_ref().is_some_and(|f| f.strict || emulated(&route));
        if retry == 0 && !format_on && checks.tools.is_empty() {
            return Ok(chunks);
        }
        let mut answer = Answer::read(chunks).await?;
        super::agent::add_usage(&mut usage, answer.usage.take().unwrap_or(Value::Null));
        let problems = checks.judge(&mut answer, format_on);
        let Some(first) = problems.first() else {
            return Ok(emit(answer, usage, client_stream, want_usage));
        };
        let message = format!(
            "The model's answer did not validate against the {} after {} attempt{}: {}",
            first.what(),
            retry + 1,
            if retry == 0 { "" } else { "s" },
            first.errors.first().map_or("", String::as_str)
        );
        if retry < route.provider.structured_retries {
            retry += 1;
            tracing::info!(retry, first = %message, "structured output re-asked");
            if let Some(c) = &ctx.shown {
                c.timeline(json!({"type": "structured_retry", "retry": retry, "errors": first.errors}));
            }
            req.messages.extend(reask(&answer, &problems));
            continue;
        }
        if problems.iter().any(|p| p.strict) {
            return Err(ApiError::StructuredOutput(message));
        }
        ctx.warn(format!("best-effort structured output: {message}"));
        return Ok(emit(answer, usage, client_stream, want_usage));
    }
}

fn emulated(route: &Route) -> bool {
    route.provider.profile.request.structured() == StructuredMode::Emulate
}

/// One tool call of an answer, whole.
#[derive(Debug, Clone, Default)]
struct Call {
    id: Option<String>,
    name: String,
    arguments: String,
    /// The arguments as the model wrote them, for a re-ask.
    written: String,
}

#[derive(Debug, Default)]
struct Choice {
    index: u32,
    content: Option<String>,
    /// The content as the model wrote it, for a re-ask.
    written: String,
    reasoning: String,
    calls: BTreeMap<u32, Call>,
    finish: Option<String>,
    delta_extra: Map<String, Value>,
    choice_extra: Map<String, Value>,
}

/// A whole answer read from its chunks.
#[derive(Debug, Default)]
struct Answer {
    meta: Chunk,
    choices: Vec<Choice>,
    usage: Option<Value>,
}

impl Answer {
    /// Reads every chunk (the answer is bounded by `max_answer_bytes` where
    /// it is read, in the pipeline); an upstream failure is the request's.
    async fn read(mut chunks: Chunks) -> Result<Self, ApiError> {
        let mut a = Answer::default();
        let mut first = true;
        while let Some(c) = chunks.next().await {
            a.push(c?, &mut first);
        }
        Ok(a)
    }

    fn push(&mut self, mut chunk: Chunk, first: &mut bool) {
        if let Some(u) = chunk.usage.take() {
            super::agent::add_usage(&mut self.usage, u);
        }
        let choices = std::mem::take(&mut chunk.choices);
        if std::mem::take(first) {
            self.meta = chunk;
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
                c.written.push_str(&t);
                c.content.get_or_insert_with(String::new).push_str(&t);
            }
            c.reasoning.push_str(reasoning_content.as_deref().unwrap_or(""));
            for tc in tool_calls.into_iter().flatten() {
                let call = c.calls.entry(tc.index.unwrap_or(0)).or_default();
                if tc.id.is_some() {
                    call.id = tc.id;
                }
                if let Some(f) = tc.function {
                    call.name.push_str(f.name.as_deref().unwrap_or(""));
                    if let Some(Value::String(a)) = f.arguments {
                        call.arguments.push_str(&a);
                        call.written.push_str(&a);
                    }
                }
            }
            for (k, v) in extra {
                c.delta_extra.entry(k).or_insert(v);
            }
            c.choice_extra.extend(ch.extra);
            if ch.finish_reason.is_some() {
                c.finish = ch.finish_reason;
            }
        }
    }
}

/// Why an answer does not hold.
struct Problem {
    strict: bool,
    /// The tool whose call it was (none: the response format).
    tool: Option<String>,
    errors: Vec<String>,
}

impl Problem {
    fn what(&self) -> String {
        match &self.tool {
            Some(t) => format!("parameters schema of the tool `{t}`"),
            None => "response_format's JSON schema".to_string(),
        }
    }
}

impl Checks {
    /// Checks every choice, putting the extracted (or repaired) JSON in
    /// place; what does not hold, the first choice's first.
    fn judge(&self, a: &mut Answer, format_on: bool) -> Vec<Problem> {
        let mut problems = Vec::new();
        for c in &mut a.choices {
            if let Some(f) = self.format.as_ref().filter(|_| format_on) {
                // A turn that calls the client's tools answers no format.
                let text = c.content.as_deref().unwrap_or("");
                if c.calls.is_empty() || !text.trim().is_empty() {
                    let (found, errors) = pick(text, &f.validator);
                    if let Some(found) = found {
                        c.content = Some(found.text);
                    }
                    if !errors.is_empty() {
                        problems.push(Problem { strict: f.strict, tool: None, errors });
                    }
                }
            }
            for call in c.calls.values_mut() {
                let Some(t) = self.tools.get(&call.name) else { continue };
                let errors = match arguments(&call.arguments) {
                    Some(found) => {
                        let errors = errors_of(&t.validator, &found.value);
                        call.arguments = found.text;
                        errors
                    }
                    None => vec!["the arguments are not JSON".to_string()],
                };
                if !errors.is_empty() {
                    problems.push(Problem { strict: t.strict, tool: Some(call.name.clone()), errors });
                }
            }
        }
        problems
    }
}

/// The model's turn and what was wrong with it, for the hidden re-ask.
fn reask(a: &Answer, problems: &[Problem]) -> Vec<Message> {
    let Some(c) = a.choices.first() else { return Vec::new() };
    let mut out = Vec::new();
    let mut extra = Map::new();
    if !c.calls.is_empty() {
        let calls: Vec<Value> = c
            .calls
            .values()
            .map(|k| {
                json!({"id": k.id.clone().unwrap_or_default(), "type": "function",
                       "function": {"name": k.name, "arguments": k.written}})
            })
            .collect();
        extra.insert("tool_calls".into(), Value::Array(calls));
    }
    let content = if c.written.is_empty() && !c.calls.is_empty() { Value::Null } else { json!(c.written) };
    out.push(Message { role: "assistant".into(), content, extra });
    for k in c.calls.values() {
        let bad = problems.iter().find(|p| p.tool.as_deref() == Some(k.name.as_str()));
        let text = match bad {
            Some(p) => format!(
                "Error: invalid arguments for `{}`: {}. Call `{}` again with arguments that validate against its parameters schema.",
                k.name,
                p.errors.join("; "),
                k.name
            ),
            None => "Not run: another call of this turn had invalid arguments. Make the calls again.".to_string(),
        };
        let mut extra = Map::new();
        extra.insert("tool_call_id".into(), json!(k.id.clone().unwrap_or_default()));
        out.push(Message { role: "tool".into(), content: json!(text), extra });
    }
    if let Some(p) = problems.iter().find(|p| p.tool.is_none()) {
        let text = format!(
            "Your reply did not validate against the required JSON schema: {}. Reply again with only the corrected JSON, no code fences and no other text.",
            p.errors.join("; ")
        );
        out.push(Message { role: "user".into(), content: json!(text), extra: Map::new() });
    }
    out
}

/// The checked answer as chunks: per choice the role (and reasoning), the
/// content in pieces, the calls whole, the finish reason; the usage of
/// every attempt summed, where the client gets usage.
fn emit(a: Answer, usage: Option<Value>, stream: bool, want_usage: bool) -> Chunks {
    let mut blank = a.meta;
    blank.choices.clear();
    blank.usage = None;
    let one = |index: u32, delta: Delta, finish: Option<String>, extra: Map<String, Value>| {
        let mut c = blank.clone();
        c.choices.push(ChunkChoice { index, delta, finish_reason: finish, extra });
        c
    };
    let mut out = Vec::new();
    for c in a.choices {
        let reasoning = (!c.reasoning.is_empty()).then_some(c.reasoning);
        let first = Delta {
            role: Some("assistant".into()),
            reasoning_content: reasoning,
            extra: c.delta_extra,
            ..Delta::default()
        };
        out.push(one(c.index, first, None, Map::new()));
        if let Some(text) = c.content.filter(|t| !t.is_empty()) {
            for piece in pieces(&text) {
                out.push(one(
                    c.index,
                    Delta { content: Some(piece.to_string()), ..Delta::default() },
                    None,
                    Map::new(),
                ));
            }
        }
        if !c.calls.is_empty() {
            let calls = c
                .calls
                .into_values()
                .enumerate()
                .map(|(i, k)| ToolCallDelta {
                    index: Some(i as u32),
                    id: Some(k.id.unwrap_or_else(crate::openai::new_call_id)),
                    kind: Some("function".into()),
                    function: Some(FunctionDelta {
                        name: Some(k.name),
                        arguments: Some(Value::String(k.arguments)),
                        extra: Map::new(),
                    }),
                    extra: Map::new(),
                })
                .collect();
            out.push(one(c.index, Delta { tool_calls: Some(calls), ..Delta::default() }, None, Map::new()));
        }
        let finish = Some(c.finish.unwrap_or_else(|| "stop".into()));
        out.push(one(c.index, Delta::default(), finish, c.choice_extra));
    }
    match usage.filter(|u| !u.is_null()) {
        Some(u) if stream && want_usage => {
            let mut c = blank.clone();
            c.usage = Some(u);
            out.push(c);
        }
        Some(u) if !stream => {
            if let Some(last) = out.last_mut() {
                last.usage = Some(u);
            }
        }
        _ => {}
    }
    futures_util::stream::iter(out.into_iter().map(Ok)).boxed()
}

/// `text` cut into pieces of about [`PIECE`] bytes on char boundaries.
fn pieces(text: &str) -> impl Iterator<Item = &str> {
    let mut rest = text;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let mut end = PIECE.min(rest.len());
        while !rest.is_char_boundary(end) {
            end += 1;
        }
        let (a, b) = rest.split_at(end);
        rest = b;
        Some(a)
    })
}

/// JSON found in an answer: its text (byte for byte as the model wrote it,
/// or the repair's serialization) and value.
#[derive(Debug, Clone, PartialEq)]
pub struct Found {
    pub text: String,
    pub value: Value,
}

/// The JSON of an answer and what keeps it from validating (empty: it
/// does). The text itself when it is JSON; else the first candidate — a
/// fenced block, a bracketed span, each read exactly or repaired — that
/// validates, else the first that parses, else the first a repair reads.
pub fn pick(text: &str, validator: &jsonschema::Validator) -> (Option<Found>, Vec<String>) {
    let t = text.trim();
    if let Ok(value) = serde_json::from_str::<Value>(t) {
        let errors = errors_of(validator, &value);
        return (Some(Found { text: t.to_string(), value }), errors);
    }
    let mut fallback: Option<(Found, Vec<String>, bool)> = None;
    for c in candidates(t) {
        let (found, exact) = match serde_json::from_str::<Value>(c) {
            Ok(value) => (Found { text: c.to_string(), value }, true),
            Err(_) => match crate::toolcall::repair::loads(c) {
                Some(value) if value.is_object() || value.is_array() => {
                    (Found { text: value.to_string(), value }, false)
                }
                _ => continue,
            },
        };
        let errors = errors_of(validator, &found.value);
        if errors.is_empty() {
            return (Some(found), errors);
        }
        // An exact reading beats a repaired one.
        if fallback.as_ref().is_none_or(|(_, _, was_exact)| exact && !was_exact) {
            fallback = Some((found, errors, exact));
        }
    }
    match fallback {
        Some((found, errors, _)) => (Some(found), errors),
        None => (None, vec!["the answer holds no JSON".to_string()]),
    }
}

/// Tool-call arguments read exactly, else repaired (syntax only).
fn arguments(text: &str) -> Option<Found> {
    let t = text.trim();
    let t = if t.is_empty() { "{}" } else { t };
    match serde_json::from_str::<Value>(t) {
        Ok(value) => Some(Found { text: text.to_string(), value }),
        Err(_) => crate::toolcall::repair::loads(t).map(|value| Found { text: value.to_string(), value }),
    }
}

/// The first validation errors, each with where in the value it is.
fn errors_of(validator: &jsonschema::Validator, value: &Value) -> Vec<String> {
    validator
        .iter_errors(value)
        .take(MAX_ERRORS)
        .map(|e| {
            let at = e.instance_path().to_string();
            if at.is_empty() { e.to_string() } else { format!("at {at}: {e}") }
        })
        .collect()
}

/// Where JSON may be in a text, in order: fenced blocks' bodies, then
/// bracketed spans (`{…}`, `[…]`, string-aware; one left open runs to the
/// end, for a repair). At most [`MAX_CANDIDATES`], found in O(n) each.
fn candidates(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut rest = text;
    while out.len() < MAX_CANDIDATES
        && let Some(i) = rest.find("```")
    {
        let after = &rest[i + 3..];
        // The info string (`json`) is one word; the body may follow on its line.
        let info = after.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '-')).unwrap_or(after.len());
        let body = &after[info..];
        match body.find("```") {
            Some(j) => {
                out.push(body[..j].trim());
                rest = &body[j + 3..];
            }
            None => {
                out.push(body.trim());
                break;
            }
        }
    }
    let bytes = text.as_bytes();
    let mut i = 0;
    while i < bytes.len() && out.len() < MAX_CANDIDATES {
        if bytes[i] == b'{' || bytes[i] == b'[' {
            match closing(bytes, i) {
                Some(end) => {
                    out.push(&text[i..=end]);
                    i = end + 1;
                    continue;
                }
                None => {
                    out.push(&text[i..]);
                    break;
                }
            }
        }
        i += 1;
    }
    out
}

/// The index of the bracket closing the one at `start`, strings skipped.
fn closing(bytes: &[u8], start: usize) -> Option<usize> {
    let (mut depth, mut in_str, mut escaped) = (0usize, false, false);
    for (i, &b) in bytes.iter().enumerate().skip(start) {
        if in_str {
            match b {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_str = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_str = true,
            b'{' | b'[' => depth += 1,
            b'}' | b']' => {
                depth = depth.saturating_sub(1);
                if depth == 0 {
                    return Some(i);
                }
            }
            _ => {}
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn person() -> jsonschema::Validator {
        let schema = json!({"type": "object", "required": ["name", "age"],
            "properties": {"name": {"type": "string"}, "age": {"type": "integer"}}, "additionalProperties": false});
        jsonschema::validator_for(&schema).unwrap()
    }

    fn text_of(answer: &str) -> (Option<String>, usize) {
        let (found, errors) = pick(answer, &person());
        (found.map(|f| f.text), errors.len())
    }

    #[test]
    fn json_is_taken_byte_for_byte_from_fences_and_prose() {
        let json = "{\"name\":  \"Ada\", \"age\": 36}";
        assert_eq!(text_of(json), (Some(json.into()), 0));
        assert_eq!(text_of(&format!("```json\n{json}\n```")), (Some(json.into()), 0));
        assert_eq!(text_of(&format!("```json {json} ```")), (Some(json.into()), 0));
        assert_eq!(text_of(&format!("Sure! Here it is:\n{json}\nHope this helps.")), (Some(json.into()), 0));
        // The first span that validates, not the first span.
        assert_eq!(text_of(&format!("For {{name}} see [1]. {json}")), (Some(json.into()), 0));
    }

    #[test]
    fn broken_syntax_is_repaired_and_wrong_data_reported() {
        let (found, errors) = pick("{\"name\": \"Ada\", \"age\": 36,}", &person());
        assert_eq!(found.map(|f| f.value), Some(json!({"name": "Ada", "age": 36})));
        assert!(errors.is_empty(), "{errors:?}");
        let (found, errors) = pick("{\"name\": \"Ada\", \"age\": \"36\"}", &person());
        assert_eq!(found.map(|f| f.text), Some("{\"name\": \"Ada\", \"age\": \"36\"}".into()));
        assert!(errors[0].contains("/age"), "{errors:?}");
        let (found, errors) = pick("I cannot answer that.", &person());
        assert_eq!((found, errors.len()), (None, 1));
    }

    #[test]
    fn pieces_cut_on_char_boundaries() {
        let text = "é".repeat(300);
        let all: Vec<&str> = pieces(&text).collect();
        assert!(all.len() > 1);
        assert_eq!(all.concat(), text);
    }

    #[test]
    fn deep_or_unclosed_text_is_bounded() {
        let deep = "[".repeat(100_000);
        let (found, errors) = pick(&deep, &person());
        assert!(found.is_none() && !errors.is_empty());
        assert!(candidates(&"{} ".repeat(1000)).len() <= MAX_CANDIDATES);
    }

    #[test]
    fn only_requests_that_ask_are_checked() {
        let req = |extra: Value| -> ChatRequest {
            let mut v = json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]});
            v.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
            serde_json::from_value(v).unwrap()
        };
        assert!(!wanted(&req(json!({}))));
        assert!(!wanted(&req(json!({"response_format": {"type": "json_object"}}))));
        assert!(wanted(&req(
            json!({"response_format": {"type": "json_schema", "json_schema": {"name": "p", "schema": {}}}})
        )));
        let tool = |strict: bool| json!({"tools": [{"type": "function", "function": {"name": "f", "strict": strict, "parameters": {}}}]});
        assert!(!wanted(&req(tool(false))));
        assert!(wanted(&req(tool(true))));
    }
}
