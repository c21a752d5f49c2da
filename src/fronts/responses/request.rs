//! A `POST /v1/responses` body checked and translated into a chat request:
//! `instructions` and the input items (after the stored history of
//! `previous_response_id`) become chat messages, the Responses parameters
//! their chat names. Whatever chat completions cannot express is a 400 that
//! names it; nothing is silently dropped that would change the answer.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Map, Value, json};

use super::names::Names;
use crate::error::ApiError;
use crate::openai::{ChatRequest, Message};

/// A checked `POST /v1/responses` body.
#[derive(Debug, Clone)]
pub struct Request {
    /// The body as sent (echoed in the response object).
    pub body: Map<String, Value>,
    pub model: String,
    pub stream: bool,
    /// Kept for `previous_response_id` and `GET` (default true, like OpenAI).
    pub store: bool,
    pub previous_response_id: Option<String>,
    /// This request's input as items (a string is one user message).
    pub input: Vec<Value>,
}

/// Parses the body with OpenAI-style 400s.
pub fn parse(body: &[u8]) -> Result<Request, ApiError> {
    let v: Value = serde_json::from_slice(body)
        .map_err(|e| ApiError::invalid(format!("The request body is not valid JSON: {e}")))?;
    let Value::Object(body) = v else {
        return Err(ApiError::invalid("The request body must be a JSON object."));
    };
    let model = match body.get("model") {
        Some(Value::String(m)) if !m.is_empty() => m.clone(),
        Some(_) => return Err(ApiError::invalid_param("model", "`model` must be a non-empty string.")),
        None => return Err(ApiError::invalid_param("model", "Missing required parameter: 'model'.")),
    };
    let flag = |name: &str, default: bool| match body.get(name) {
        None | Some(Value::Null) => Ok(default),
        Some(Value::Bool(b)) => Ok(*b),
        Some(_) => Err(ApiError::invalid_param(name, format!("`{name}` must be a boolean."))),
    };
    let stream = flag("stream", false)?;
    let store = flag("store", true)?;
    if flag("background", false)? {
        return Err(unsupported("background", "Background responses are not supported by this proxy."));
    }
    if body.get("conversation").is_some_and(|c| !c.is_null()) {
        return Err(unsupported(
            "conversation",
            "The Conversations API is not supported by this proxy; use `previous_response_id` instead.",
        ));
    }
    if body.get("prompt").is_some_and(|c| !c.is_null()) {
        return Err(unsupported("prompt", "Stored prompt templates are not supported by this proxy."));
    }
    let previous_response_id = match body.get("previous_response_id") {
        None | Some(Value::Null) => None,
        Some(Value::String(id)) if !id.is_empty() => Some(id.clone()),
        Some(_) => {
            return Err(ApiError::invalid_param(
                "previous_response_id",
                "`previous_response_id` must be a non-empty string.",
            ));
        }
    };
    let input = match body.get("input") {
        Some(Value::String(text)) => vec![json!({"type": "message", "role": "user", "content": text})],
        Some(Value::Array(items)) => items.iter().map(normalize_item).collect::<Result<_, _>>()?,
        None | Some(Value::Null) => Vec::new(),
        Some(_) => {
            return Err(ApiError::invalid_param("input", "`input` must be a string or an array of input items."));
        }
    };
    if body.get("tools").is_some_and(|t| !t.is_array() && !t.is_null()) {
        return Err(ApiError::invalid_param("tools", "`tools` must be an array."));
    }
    Ok(Request { body, model, stream, store, previous_response_id, input })
}

/// An item with its `type` (an easy input message `{role, content}` has none).
fn normalize_item(item: &Value) -> Result<Value, ApiError> {
    let Value::Object(o) = item else {
        return Err(ApiError::invalid_param("input", "Every input item must be an object."));
    };
    let mut o = o.clone();
    if !o.contains_key("type") && o.contains_key("role") {
        o.insert("type".into(), json!("message"));
    }
    Ok(Value::Object(o))
}

fn unsupported(param: &str, message: &str) -> ApiError {
    ApiError::invalid_param(param, message)
}

/// The server-side tool a hosted Responses tool type stands for: the type
/// without its `_preview` and date suffixes (`web_search_preview_2025_03_11`
/// → `web_search`, `computer_use_preview` → `computer_use`).
pub fn hosted_kind(kind: &str) -> String {
    let mut k = kind.to_string();
    // A date suffix: `_YYYY_MM_DD`.
    let parts: Vec<&str> = k.rsplitn(4, '_').collect();
    if parts.len() == 4 && parts[..3].iter().all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit())) {
        k = parts[3].to_string();
    }
    if let Some(base) = k.strip_suffix("_preview") {
        k = base.to_string();
    }
    k
}

/// What the translation needs besides the body.
pub struct Options<'a> {
    /// Which configured server tool (if any) serves a hosted tool kind.
    pub server_tool: &'a dyn Fn(&str) -> Option<String>,
    /// Hosted kinds left out (with a warning) when nothing serves them.
    pub drop_hosted: &'a [String],
    /// The text of a reasoning item's `encrypted_content` this proxy sealed
    /// for this owner; `None` ignores it (the item counts as its readable text).
    pub open: &'a dyn Fn(&str) -> Option<String>,
}

/// [`to_chat_with`] with nothing dropped and no reasoning keys.
pub fn to_chat(
    req: &Request,
    history: &[Value],
    server_tool: &dyn Fn(&str) -> Option<String>,
) -> Result<ChatRequest, ApiError> {
    to_chat_with(req, history, &Options { server_tool, drop_hosted: &[], open: &|_| None }).map(|(c, _)| c)
}

/// Translates to a chat request: `history` (the stored items of the
/// previous response) then this request's input; also the flattened tool
/// names, to map the vendor's calls back.
pub fn to_chat_with(req: &Request, history: &[Value], opts: &Options) -> Result<(ChatRequest, Names), ApiError> {
    let b = &req.body;
    let mut messages = Vec::new();
    match b.get("instructions") {
        Some(Value::String(s)) if !s.is_empty() => {
            messages.push(Message { role: "system".into(), content: Value::String(s.clone()), extra: Map::new() });
        }
        None | Some(Value::Null) | Some(Value::String(_)) => {}
        Some(_) => return Err(ApiError::invalid_param("instructions", "`instructions` must be a string.")),
    }
    let earlier = history.len();
    // The declared tools: `tools`, and those of `additional_tools` items.
    let mut declared: Vec<(String, &Value)> = match b.get("tools") {
        Some(Value::Array(list)) => list.iter().enumerate().map(|(i, t)| (format!("tools[{i}]"), t)).collect(),
        _ => Vec::new(),
    };
    for (i, item) in history.iter().chain(req.input.iter()).enumerate() {
        if item.get("type").and_then(Value::as_str) == Some("additional_tools")
            && let Some(list) = item.get("tools").and_then(Value::as_array)
        {
            let at = if i >= earlier { format!("input[{}]", i - earlier) } else { "previous_response_id".into() };
            declared.extend(list.iter().enumerate().map(|(j, t)| (format!("{at}.tools[{j}]"), t)));
        }
    }
    let mut names = Names::default();
    for (_, t) in &declared {
        if t.get("type").and_then(Value::as_str) == Some("function")
            && let Some(n) = t.get("name").and_then(Value::as_str)
        {
            names.plain(n);
        }
    }
    let mut hosted = BTreeMap::new();
    let mut dropped = Vec::new();
    let mut out = Vec::new();
    for (param, t) in &declared {
        match tool(t, param, opts, &mut names)? {
            Tool::Functions(f) => out.extend(f),
            Tool::Hosted { kind, server } => {
                hosted.insert(kind, server);
            }
            Tool::Dropped(kind) => dropped.push(kind),
        }
    }
    let tools = (!out.is_empty()).then_some(out);
    let items = rewrite_items(history.iter().chain(req.input.iter()), &names, opts);
    let all: Vec<&Value> = items.iter().collect();
    messages.extend(to_messages(&all, earlier)?);
    if messages.is_empty() {
        return Err(ApiError::invalid_param("input", "Missing required parameter: 'input'."));
    }
    let mut extra = Map::new();
    if let Some(tc) = b.get("tool_choice").filter(|v| !v.is_null()) {
        extra.insert("tool_choice".into(), tool_choice(tc, &hosted, &dropped, &names)?);
    }
    for (from, to) in [
        ("temperature", "temperature"),
        ("top_p", "top_p"),
        ("parallel_tool_calls", "parallel_tool_calls"),
        ("max_output_tokens", "max_tokens"),
        ("user", "user"),
        ("safety_identifier", "safety_identifier"),
        ("service_tier", "service_tier"),
        ("prompt_cache_key", "prompt_cache_key"),
    ] {
        if let Some(v) = b.get(from).filter(|v| !v.is_null()) {
            extra.insert(to.into(), v.clone());
        }
    }
    if let Some(top) = b.get("top_logprobs").filter(|v| !v.is_null()) {
        extra.insert("logprobs".into(), json!(true));
        extra.insert("top_logprobs".into(), top.clone());
    }
    if let Some(effort) = b.get("reasoning").and_then(|r| r.get("effort")).filter(|v| !v.is_null()) {
        extra.insert("reasoning_effort".into(), effort.clone());
    }
    if let Some(text) = b.get("text").filter(|v| !v.is_null()) {
        if let Some(f) = text.get("format").filter(|v| !v.is_null())
            && let Some(rf) = response_format(f)?
        {
            extra.insert("response_format".into(), rf);
        }
        if let Some(v) = text.get("verbosity").filter(|v| !v.is_null()) {
            extra.insert("verbosity".into(), v.clone());
        }
    }
    if req.stream {
        extra.insert("stream_options".into(), json!({"include_usage": true}));
    }
    Ok((ChatRequest { model: req.model.clone(), messages, stream: Some(req.stream), tools, extra }, names))
}

enum Tool {
    Functions(Vec<Value>),
    Hosted {
        kind: String,
        server: String,
    },
    /// A hosted kind nothing serves, left out.
    Dropped(String),
}

/// A function tool as a chat function under `name`.
fn function(t: &Value, name: &str) -> Value {
    let mut f = Map::new();
    f.insert("name".into(), json!(name));
    for k in ["description", "parameters", "strict"] {
        if let Some(v) = t.get(k).filter(|v| !v.is_null()) {
            f.insert(k.into(), v.clone());
        }
    }
    f.entry("parameters").or_insert_with(|| json!({"type": "object", "properties": {}}));
    json!({"type": "function", "function": f})
}

/// A `custom` (free-form input) tool as a chat function with one string
/// argument `input`; its grammar, if any, is told in the description.
fn custom_function(t: &Value, name: &str) -> Value {
    let mut description = t.get("description").and_then(Value::as_str).unwrap_or("").to_string();
    if let Some(f) = t.get("format").filter(|f| f.get("type").and_then(Value::as_str) == Some("grammar")) {
        let syntax = f.get("syntax").and_then(Value::as_str).unwrap_or("");
        let definition = f.get("definition").and_then(Value::as_str).unwrap_or("");
        description.push_str(&format!("\n\nThe `input` follows this {syntax} grammar:\n{definition}"));
    }
    json!({"type": "function", "function": {
        "name": name,
        "description": description.trim(),
        "parameters": {"type": "object", "properties": {"input": {"type": "string", "description": "The tool's raw input."}}, "required": ["input"]},
    }})
}

fn tool(t: &Value, param: &str, opts: &Options, names: &mut Names) -> Result<Tool, ApiError> {
    let kind = t.get("type").and_then(Value::as_str).unwrap_or("");
    let name_of = |t: &Value, param: &str| -> Result<String, ApiError> {
        t.get("name").and_then(Value::as_str).filter(|n| !n.is_empty()).map(str::to_string).ok_or_else(|| {
            ApiError::invalid_param(&format!("{param}.name"), format!("A `{kind}` tool needs a `name`."))
        })
    };
    match kind {
        "function" => {
            let name = name_of(t, param)?;
            Ok(Tool::Functions(vec![function(t, &name)]))
        }
        "custom" => {
            let name = name_of(t, param)?;
            let flat = names.add(None, &name, true);
            Ok(Tool::Functions(vec![custom_function(t, &flat)]))
        }
        // A group of tools (Codex): each offered under a flattened name.
        "namespace" => {
            let ns = name_of(t, param)?;
            let mut out = Vec::new();
            for (j, inner) in t.get("tools").and_then(Value::as_array).into_iter().flatten().enumerate() {
                let at = format!("{param}.tools[{j}]");
                match inner.get("type").and_then(Value::as_str) {
                    Some("function") => {
                        let flat = names.add(Some(&ns), &name_of(inner, &at)?, false);
                        out.push(function(inner, &flat));
                    }
                    Some("custom") => {
                        let flat = names.add(Some(&ns), &name_of(inner, &at)?, true);
                        out.push(custom_function(inner, &flat));
                    }
                    other => {
                        return Err(ApiError::invalid_param(
                            &at,
                            format!(
                                "A `namespace` tool may hold function and custom tools, not `{}`.",
                                other.unwrap_or("")
                            ),
                        ));
                    }
                }
            }
            Ok(Tool::Functions(out))
        }
        "" => Err(ApiError::invalid_param(param, "Every tool needs a `type`.")),
        other => {
            let want = hosted_kind(other);
            match (opts.server_tool)(&want) {
                Some(server) => Ok(Tool::Hosted { kind: other.to_string(), server }),
                None if opts.drop_hosted.contains(&want) => {
                    // Codex declares it on every turn: warned once per kind.
                    static WARNED: std::sync::Mutex<BTreeSet<String>> = std::sync::Mutex::new(BTreeSet::new());
                    let first = WARNED.lock().map(|mut w| w.insert(want.clone())).unwrap_or(false);
                    if first {
                        tracing::warn!(
                            tool = other,
                            "hosted tool left out: no server-side tool `{want}` is configured to serve it"
                        );
                    } else {
                        tracing::debug!(tool = other, "hosted tool left out");
                    }
                    Ok(Tool::Dropped(other.to_string()))
                }
                None => Err(ApiError::invalid_param(
                    param,
                    format!(
                        "The hosted tool type `{other}` is not supported by this proxy: it translates the Responses API to chat completions, which only has function tools. Configure a server-side tool named `{want}` to serve it, or declare a function tool instead."
                    ),
                )),
            }
        }
    }
}

/// The items as `to_messages` reads them: calls to flattened tools under
/// the names the vendor knows, custom calls as function calls, reasoning
/// sealed by this proxy opened, compaction summaries as user messages;
/// `additional_tools` items (only declarations) left out.
fn rewrite_items<'a>(items: impl Iterator<Item = &'a Value>, names: &Names, opts: &Options) -> Vec<Value> {
    items
        .filter(|it| it.get("type").and_then(Value::as_str) != Some("additional_tools"))
        .filter_map(|it| {
            let kind = it.get("type").and_then(Value::as_str).unwrap_or("");
            let ns = it.get("namespace").and_then(Value::as_str);
            let name = it.get("name").and_then(Value::as_str);
            let v = match kind {
                "function_call" if ns.is_some() => {
                    let mut it = it.clone();
                    if let (Some(o), Some(name)) = (it.as_object_mut(), name) {
                        o.insert("name".into(), json!(names.flat(ns, name)));
                        o.remove("namespace");
                    }
                    it
                }
                "custom_tool_call" => {
                    let input = it.get("input").and_then(Value::as_str).unwrap_or("");
                    let flat = name.map(|n| names.flat_custom(ns, n));
                    json!({"type": "function_call", "call_id": it.get("call_id"), "name": flat,
                           "arguments": json!({"input": input}).to_string()})
                }
                "custom_tool_call_output" => {
                    json!({"type": "function_call_output", "call_id": it.get("call_id"), "output": it.get("output")})
                }
                "reasoning" => match it.get("encrypted_content").and_then(Value::as_str).and_then(|e| (opts.open)(e)) {
                    Some(text) => {
                        let mut it = it.clone();
                        it["content"] = json!([{"type": "reasoning_text", "text": text}]);
                        it
                    }
                    None => it.clone(),
                },
                "compaction" | "compaction_summary" => {
                    let text = it.get("encrypted_content").and_then(Value::as_str).and_then(|e| (opts.open)(e))?;
                    json!({"type": "message", "role": "user", "content": format!("{COMPACTED}{text}")})
                }
                _ => it.clone(),
            };
            Some(v)
        })
        .collect()
}

/// What a compaction summary is introduced by when it goes back upstream.
pub const COMPACTED: &str = "A summary of the conversation so far (earlier turns were compacted):\n\n";

fn tool_choice(
    tc: &Value,
    hosted: &BTreeMap<String, String>,
    dropped: &[String],
    names: &Names,
) -> Result<Value, ApiError> {
    let bad = |m: String| ApiError::invalid_param("tool_choice", m);
    match tc {
        Value::String(s) if matches!(s.as_str(), "auto" | "none" | "required") => Ok(tc.clone()),
        Value::String(s) => Err(bad(format!("Unknown `tool_choice` value `{s}`."))),
        Value::Object(o) => match o.get("type").and_then(Value::as_str) {
            Some(kind @ ("function" | "custom")) => match o.get("name").and_then(Value::as_str) {
                Some(name) => {
                    let ns = o.get("namespace").and_then(Value::as_str);
                    let flat = if kind == "custom" { names.flat_custom(ns, name) } else { names.flat(ns, name) };
                    Ok(json!({"type": "function", "function": {"name": flat}}))
                }
                None => Err(bad(format!("A {kind} `tool_choice` needs a `name`."))),
            },
            Some("allowed_tools") => Ok(json!(o.get("mode").and_then(Value::as_str).unwrap_or("auto"))),
            Some(kind) if dropped.iter().any(|d| d == kind) => Ok(json!("auto")),
            Some(kind) => match hosted.get(kind) {
                Some(server) => Ok(json!({"type": "function", "function": {"name": server}})),
                None => Err(bad(format!("The `tool_choice` type `{kind}` is not supported by this proxy."))),
            },
            None => Err(bad("`tool_choice` needs a `type`.".into())),
        },
        _ => Err(bad("`tool_choice` must be a string or an object.".into())),
    }
}

fn response_format(f: &Value) -> Result<Option<Value>, ApiError> {
    match f.get("type").and_then(Value::as_str) {
        Some("text") | None => Ok(None),
        Some("json_object") => Ok(Some(json!({"type": "json_object"}))),
        Some("json_schema") => {
            let mut schema = Map::new();
            for k in ["name", "schema", "strict", "description"] {
                if let Some(v) = f.get(k).filter(|v| !v.is_null()) {
                    schema.insert(k.into(), v.clone());
                }
            }
            Ok(Some(json!({"type": "json_schema", "json_schema": schema})))
        }
        Some(other) => {
            Err(ApiError::invalid_param("text.format", format!("The text format `{other}` is not supported.")))
        }
    }
}

/// Input items as chat messages. Consecutive `function_call` items (and an
/// assistant message right before them) become one assistant message with
/// `tool_calls`; a reasoning item becomes the `reasoning_content` of the
/// assistant message that follows it. `earlier` items came from the store
/// (their indexes are not the client's, so errors name the client's).
pub fn to_messages(items: &[&Value], earlier: usize) -> Result<Vec<Message>, ApiError> {
    let mut out: Vec<Message> = Vec::new();
    let mut reasoning: Option<String> = None;
    // Whether the last message is an assistant turn function calls may join.
    let mut open_assistant = false;
    for (i, item) in items.iter().enumerate() {
        let param = if i >= earlier { format!("input[{}]", i - earlier) } else { "previous_response_id".into() };
        let kind = item.get("type").and_then(Value::as_str).unwrap_or("");
        match kind {
            "message" => {
                let role = item.get("role").and_then(Value::as_str).unwrap_or("");
                if !matches!(role, "user" | "system" | "developer" | "assistant") {
                    return Err(ApiError::invalid_param(
                        &format!("{param}.role"),
                        format!("Unknown message role `{role}`."),
                    ));
                }
                let content = content(item.get("content").unwrap_or(&Value::Null), role, &param)?;
                let mut m = Message { role: role.into(), content, extra: Map::new() };
                open_assistant = role == "assistant";
                if open_assistant && let Some(r) = reasoning.take() {
                    m.extra.insert("reasoning_content".into(), Value::String(r));
                }
                out.push(m);
            }
            "function_call" => {
                let call_id = str_field(item, "call_id", &param)?;
                let name = str_field(item, "name", &param)?;
                let arguments = match item.get("arguments") {
                    Some(Value::String(a)) => a.clone(),
                    Some(v) if !v.is_null() => v.to_string(),
                    _ => "{}".into(),
                };
                let call =
                    json!({"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}});
                if !open_assistant {
                    out.push(Message { role: "assistant".into(), content: Value::Null, extra: Map::new() });
                    open_assistant = true;
                }
                if let Some(m) = out.last_mut() {
                    if let Some(r) = reasoning.take() {
                        m.extra.insert("reasoning_content".into(), Value::String(r));
                    }
                    let calls = m.extra.entry("tool_calls").or_insert_with(|| json!([]));
                    if let Value::Array(list) = calls {
                        list.push(call);
                    }
                    if m.content.as_str().is_some_and(str::is_empty) {
                        m.content = Value::Null;
                    }
                }
            }
            "function_call_output" => {
                let call_id = str_field(item, "call_id", &param)?;
                let (text, images) = tool_output(item.get("output").unwrap_or(&Value::Null));
                let mut extra = Map::new();
                extra.insert("tool_call_id".into(), Value::String(call_id.clone()));
                out.push(Message { role: "tool".into(), content: Value::String(text), extra });
                if !images.is_empty() {
                    let mut parts =
                        vec![json!({"type": "text", "text": format!("Images returned by the tool call {call_id}:")})];
                    parts.extend(images);
                    out.push(Message { role: "user".into(), content: Value::Array(parts), extra: Map::new() });
                }
                open_assistant = false;
            }
            "reasoning" => {
                let text = reasoning_text(item);
                if !text.is_empty() {
                    let r = reasoning.get_or_insert_with(String::new);
                    r.push_str(&text);
                }
            }
            "item_reference" => {
                return Err(ApiError::invalid_param(
                    &param,
                    "Input items of type `item_reference` are not supported by this proxy; send the item itself, or use `previous_response_id`.",
                ));
            }
            "" => return Err(ApiError::invalid_param(&param, "Every input item needs a `type`.")),
            other => {
                return Err(ApiError::invalid_param(
                    &param,
                    format!(
                        "Input items of type `{other}` are not supported by this proxy (it translates to chat completions)."
                    ),
                ));
            }
        }
    }
    Ok(out)
}

fn str_field(item: &Value, key: &str, param: &str) -> Result<String, ApiError> {
    item.get(key).and_then(Value::as_str).map(str::to_string).ok_or_else(|| {
        ApiError::invalid_param(&format!("{param}.{key}"), format!("Missing required parameter: '{key}'."))
    })
}

/// The text of a reasoning item: its raw `reasoning_text` content, else its
/// summaries (encrypted content cannot be read and is left out).
pub fn reasoning_text(item: &Value) -> String {
    let collect = |key: &str| -> String {
        item.get(key)
            .and_then(Value::as_array)
            .map(|parts| {
                parts.iter().filter_map(|p| p.get("text").and_then(Value::as_str)).collect::<Vec<_>>().join("\n")
            })
            .unwrap_or_default()
    };
    let content = collect("content");
    if content.is_empty() { collect("summary") } else { content }
}

/// Message content: a string stays one; parts become chat parts, and
/// all-text parts one string (what every vendor takes).
fn content(c: &Value, role: &str, param: &str) -> Result<Value, ApiError> {
    let parts = match c {
        Value::String(_) => return Ok(c.clone()),
        Value::Null => return Ok(Value::String(String::new())),
        Value::Array(parts) => parts,
        _ => {
            return Err(ApiError::invalid_param(
                &format!("{param}.content"),
                "`content` must be a string or an array of content parts.",
            ));
        }
    };
    let mut out = Vec::new();
    for (j, p) in parts.iter().enumerate() {
        let kind = p.get("type").and_then(Value::as_str).unwrap_or("");
        match kind {
            "input_text" | "output_text" | "text" | "summary_text" => {
                out.push(json!({"type": "text", "text": p.get("text").and_then(Value::as_str).unwrap_or("")}));
            }
            "refusal" => {
                out.push(json!({"type": "text", "text": p.get("refusal").and_then(Value::as_str).unwrap_or("")}));
            }
            "input_image" if role != "assistant" => {
                let Some(url) = p.get("image_url").and_then(Value::as_str) else {
                    return Err(ApiError::invalid_param(
                        &format!("{param}.content[{j}]"),
                        "Only images given by `image_url` (a URL or a data URL) are supported; `file_id` is not.",
                    ));
                };
                let mut image = json!({"url": url});
                if let Some(d) = p.get("detail").filter(|d| !d.is_null()) {
                    image["detail"] = d.clone();
                }
                out.push(json!({"type": "image_url", "image_url": image}));
            }
            "input_file" if role != "assistant" => {
                let Some(data) = p.get("file_data").and_then(Value::as_str) else {
                    return Err(ApiError::invalid_param(
                        &format!("{param}.content[{j}]"),
                        "Only files given inline by `file_data` are supported; `file_id` and `file_url` are not.",
                    ));
                };
                let mut file = json!({"file_data": data});
                if let Some(n) = p.get("filename").filter(|n| !n.is_null()) {
                    file["filename"] = n.clone();
                }
                out.push(json!({"type": "file", "file": file}));
            }
            other => {
                return Err(ApiError::invalid_param(
                    &format!("{param}.content[{j}]"),
                    format!("Content parts of type `{other}` are not supported in a `{role}` message."),
                ));
            }
        }
    }
    if out.iter().all(|p| p["type"] == "text") {
        let text: Vec<&str> = out.iter().filter_map(|p| p["text"].as_str()).collect();
        return Ok(Value::String(text.concat()));
    }
    Ok(Value::Array(out))
}

/// A function call's output as tool-message text, and its images (chat
/// tool messages carry text only; images go in a user message after it).
fn tool_output(o: &Value) -> (String, Vec<Value>) {
    match o {
        Value::String(s) => (s.clone(), Vec::new()),
        Value::Array(parts) => {
            let mut text = Vec::new();
            let mut images = Vec::new();
            for p in parts {
                match p.get("type").and_then(Value::as_str) {
                    Some("input_text" | "output_text" | "text") => {
                        text.push(p.get("text").and_then(Value::as_str).unwrap_or("").to_string());
                    }
                    Some("input_image") => {
                        if let Some(url) = p.get("image_url").and_then(Value::as_str) {
                            images.push(json!({"type": "image_url", "image_url": {"url": url}}));
                        }
                    }
                    _ => text.push(p.to_string()),
                }
            }
            (text.join("\n"), images)
        }
        Value::Null => (String::new(), Vec::new()),
        other => (other.to_string(), Vec::new()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(v: Value) -> Request {
        parse(v.to_string().as_bytes()).unwrap_or_else(|e| panic!("{e}"))
    }

    fn none(_: &str) -> Option<String> {
        None
    }

    #[test]
    fn string_input_and_instructions() {
        let r = req(json!({"model": "m", "input": "hi", "instructions": "be brief", "max_output_tokens": 9}));
        let c = to_chat(&r, &[], &none).unwrap();
        assert_eq!(c.messages.len(), 2);
        assert_eq!(c.messages[0].role, "system");
        assert_eq!(c.messages[1].content, "hi");
        assert_eq!(c.extra["max_tokens"], 9);
        assert!(r.store && !r.stream);
    }

    #[test]
    fn calls_merge_and_reasoning_goes_to_the_assistant_turn() {
        let r = req(json!({"model": "m", "input": [
            {"role": "user", "content": [{"type": "input_text", "text": "weather?"}]},
            {"type": "reasoning", "id": "rs_1", "summary": [], "content": [{"type": "reasoning_text", "text": "think"}]},
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Let me look.", "annotations": []}]},
            {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
            {"type": "function_call", "call_id": "c2", "name": "f", "arguments": "{\"a\":1}"},
            {"type": "function_call_output", "call_id": "c1", "output": "one"},
            {"type": "function_call_output", "call_id": "c2", "output": [{"type": "input_text", "text": "two"}]},
            {"type": "reasoning", "id": "rs_2", "summary": [{"type": "summary_text", "text": "again"}]},
            {"type": "function_call", "call_id": "c3", "name": "f", "arguments": "{}"}
        ]}));
        let c = to_chat(&r, &[], &none).unwrap();
        let roles: Vec<&str> = c.messages.iter().map(|m| m.role.as_str()).collect();
        assert_eq!(roles, ["user", "assistant", "tool", "tool", "assistant"]);
        assert_eq!(c.messages[0].content, "weather?");
        let a = &c.messages[1];
        assert_eq!(a.content, "Let me look.");
        assert_eq!(a.extra["reasoning_content"], "think");
        assert_eq!(a.extra["tool_calls"].as_array().unwrap().len(), 2);
        assert_eq!(c.messages[3].content, "two");
        assert_eq!(c.messages[4].content, Value::Null);
        assert_eq!(c.messages[4].extra["reasoning_content"], "again");
        assert_eq!(c.messages[4].extra["tool_calls"][0]["id"], "c3");
    }

    #[test]
    fn hosted_tools_400_unless_served() {
        let r = req(json!({"model": "m", "input": "x", "tools": [
            {"type": "function", "name": "f", "parameters": {"type": "object"}},
            {"type": "web_search_preview_2025_03_11"}
        ], "tool_choice": {"type": "web_search_preview_2025_03_11"}}));
        let e = to_chat(&r, &[], &none).unwrap_err();
        let (status, obj) = e.to_openai();
        assert_eq!(status, 400);
        assert_eq!(obj.param.as_deref(), Some("tools[1]"));
        assert!(obj.message.contains("web_search_preview_2025_03_11"), "{}", obj.message);
        let served = |k: &str| (k == "web_search").then(|| "web_search".to_string());
        let c = to_chat(&r, &[], &served).unwrap();
        assert_eq!(c.tools.unwrap().len(), 1);
        assert_eq!(c.extra["tool_choice"]["function"]["name"], "web_search");
        assert_eq!(hosted_kind("computer_use_preview"), "computer_use");
        assert_eq!(hosted_kind("file_search"), "file_search");
    }

    #[test]
    fn parameters_translate() {
        let r = req(json!({"model": "m", "input": "x", "stream": true,
            "tools": [{"type": "function", "name": "f", "description": "d", "parameters": {"type": "object"}, "strict": true}],
            "tool_choice": {"type": "function", "name": "f"}, "reasoning": {"effort": "high"},
            "text": {"format": {"type": "json_schema", "name": "o", "schema": {"type": "object"}, "strict": true}}}));
        let c = to_chat(&r, &[], &none).unwrap();
        assert_eq!(
            c.tools.unwrap()[0],
            json!({"type": "function", "function": {"name": "f", "description": "d", "parameters": {"type": "object"}, "strict": true}})
        );
        assert_eq!(c.extra["tool_choice"], json!({"type": "function", "function": {"name": "f"}}));
        assert_eq!(c.extra["reasoning_effort"], "high");
        assert_eq!(c.extra["response_format"]["json_schema"]["name"], "o");
        assert_eq!(c.extra["stream_options"]["include_usage"], true);
        assert_eq!(c.stream, Some(true));
    }

    #[test]
    fn content_parts_translate_or_are_refused_by_name() {
        let r = req(json!({"model": "m", "input": [
            {"role": "user", "content": [
                {"type": "input_text", "text": "What is this?"},
                {"type": "input_image", "image_url": "data:image/png;base64,AAAA", "detail": "low"},
                {"type": "input_file", "file_data": "data:application/pdf;base64,BBBB", "filename": "a.pdf"}
            ]},
            {"type": "function_call", "call_id": "c1", "name": "shot", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c1", "output": [
                {"type": "input_text", "text": "a cat"},
                {"type": "input_image", "image_url": "https://x/cat.png"}
            ]}
        ]}));
        let c = to_chat(&r, &[], &none).unwrap();
        assert_eq!(
            c.messages[0].content,
            json!([{"type": "text", "text": "What is this?"},
                   {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA", "detail": "low"}},
                   {"type": "file", "file": {"file_data": "data:application/pdf;base64,BBBB", "filename": "a.pdf"}}])
        );
        assert_eq!(c.messages[2].content, "a cat");
        assert_eq!(c.messages[3].role, "user");
        assert_eq!(c.messages[3].content[1]["image_url"]["url"], "https://x/cat.png");
        for (part, param) in [
            (json!({"type": "input_image", "file_id": "file_1"}), "input[0].content[0]"),
            (json!({"type": "input_audio", "input_audio": {}}), "input[0].content[0]"),
        ] {
            let r = req(json!({"model": "m", "input": [{"role": "user", "content": [part]}]}));
            assert_eq!(to_chat(&r, &[], &none).unwrap_err().to_openai().1.param.as_deref(), Some(param));
        }
    }

    #[test]
    fn bad_input_is_a_named_400() {
        for (body, param) in [
            (json!({"input": "x"}), "model"),
            (json!({"model": "m", "input": 3}), "input"),
            (json!({"model": "m", "input": "x", "background": true}), "background"),
        ] {
            let e = parse(body.to_string().as_bytes()).unwrap_err();
            assert_eq!(e.to_openai().1.param.as_deref(), Some(param));
        }
        let r = req(json!({"model": "m", "input": [{"type": "computer_call_output", "call_id": "c"}]}));
        assert_eq!(to_chat(&r, &[], &none).unwrap_err().to_openai().1.param.as_deref(), Some("input[0]"));
    }

    fn codex_opts<'a>(open: &'a dyn Fn(&str) -> Option<String>, drop: &'a [String]) -> Options<'a> {
        Options { server_tool: &none, drop_hosted: drop, open }
    }

    fn dropped() -> Vec<String> {
        crate::config::responses::ResponsesConfig::default().drop_hosted_tools
    }

    fn vendor_safe(name: &str) -> bool {
        regex::Regex::new("^[a-zA-Z0-9_-]{1,64}$").unwrap().is_match(name)
    }

    /// Codex 0.171's first request as captured (tests/codex): every tool
    /// offered under a vendor-safe name, the namespace flattened, the
    /// hosted `web_search` left out, the rest of the body accepted.
    #[test]
    fn codex_first_request_translates() {
        let body = include_str!("../../../tests/codex/first_request.json");
        let r = parse(body.as_bytes()).unwrap();
        let (c, names) = to_chat_with(&r, &[], &codex_opts(&|_| None, &dropped())).unwrap();
        let tools: Vec<&str> =
            c.tools.as_ref().unwrap().iter().map(|t| t["function"]["name"].as_str().unwrap()).collect();
        assert!(tools.iter().all(|n| vendor_safe(n)), "{tools:?}");
        assert!(tools.contains(&"exec_command") && tools.contains(&"multi_agent_v1__spawn_agent"), "{tools:?}");
        assert!(!tools.iter().any(|n| n.contains("web_search")), "{tools:?}");
        let t = names.target("multi_agent_v1__wait_agent").unwrap();
        assert_eq!((t.namespace.as_deref(), t.name.as_str()), (Some("multi_agent_v1"), "wait_agent"));
        assert_eq!(c.messages[0].role, "developer");
        assert_eq!(c.messages.last().unwrap().content, "run echo hi");
        assert_eq!(c.extra["parallel_tool_calls"], true);
        assert!(c.extra.get("client_metadata").is_none() && c.extra.get("include").is_none());
        // Without the drop list, web_search is still the named 400.
        let e = to_chat_with(&r, &[], &codex_opts(&|_| None, &[])).unwrap_err();
        assert!(e.to_openai().1.message.contains("web_search"));
    }

    /// The request Codex compacts with (a plain turn without tools, the
    /// reasoning and a call in the history) and one for a model Codex knows
    /// (tools in an `additional_tools` item, a `custom` tool in a namespace).
    #[test]
    fn codex_compaction_and_known_model_requests_translate() {
        let body = include_str!("../../../tests/codex/compaction_request.json");
        let r = parse(body.as_bytes()).unwrap();
        let (c, _) = to_chat_with(&r, &[], &codex_opts(&|_| None, &dropped())).unwrap();
        assert!(c.tools.is_none());
        let call = c.messages.iter().find(|m| m.extra.contains_key("tool_calls")).unwrap();
        assert_eq!(call.extra["tool_calls"][0]["function"]["name"], "exec_command");
        assert_eq!(call.extra["reasoning_content"], "raw thinking");

        let body = include_str!("../../../tests/codex/known_model_request.json");
        let r = parse(body.as_bytes()).unwrap();
        let (c, names) = to_chat_with(&r, &[], &codex_opts(&|_| None, &dropped())).unwrap();
        let tools = c.tools.unwrap();
        let exec = tools.iter().find(|t| t["function"]["name"] == "functions__exec").unwrap();
        assert_eq!(exec["function"]["parameters"]["required"], json!(["input"]));
        assert!(exec["function"]["description"].as_str().unwrap().contains("lark grammar"));
        assert!(names.target("functions__exec").unwrap().custom);
        assert!(tools.iter().any(|t| t["function"]["name"] == "collaboration__spawn_agent"));
        assert!(c.messages.iter().all(|m| m.role != "additional_tools"));
    }

    #[test]
    fn namespace_and_custom_calls_in_the_history_use_the_offered_names() {
        let r = req(json!({"model": "m", "store": false,
        "tools": [
            {"type": "function", "name": "exec_command", "parameters": {"type": "object"}},
            {"type": "namespace", "name": "multi_agent_v1", "description": "agents", "tools": [
                {"type": "function", "name": "spawn_agent", "parameters": {"type": "object"}}]},
            {"type": "custom", "name": "apply_patch", "description": "Patch files",
             "format": {"type": "grammar", "syntax": "lark", "definition": "start: x"}}
        ],
        "tool_choice": {"type": "function", "name": "spawn_agent", "namespace": "multi_agent_v1"},
        "input": [
            {"type": "message", "role": "user", "content": "go"},
            {"type": "function_call", "call_id": "c1", "namespace": "multi_agent_v1", "name": "spawn_agent", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c1", "output": "spawned"},
            {"type": "custom_tool_call", "call_id": "c2", "name": "apply_patch", "input": "*** Begin Patch"},
            {"type": "custom_tool_call_output", "call_id": "c2", "output": "patched"}
        ]}));
        let (c, names) = to_chat_with(&r, &[], &codex_opts(&|_| None, &[])).unwrap();
        let tools = c.tools.unwrap();
        let offered: Vec<&str> = tools.iter().map(|t| t["function"]["name"].as_str().unwrap()).collect();
        assert_eq!(offered, ["exec_command", "multi_agent_v1__spawn_agent", "apply_patch"]);
        assert_eq!(c.extra["tool_choice"]["function"]["name"], "multi_agent_v1__spawn_agent");
        assert_eq!(c.messages[1].extra["tool_calls"][0]["function"]["name"], "multi_agent_v1__spawn_agent");
        assert_eq!(c.messages[2].content, "spawned");
        let custom = &c.messages[3].extra["tool_calls"][0]["function"];
        assert_eq!(custom["name"], "apply_patch");
        assert_eq!(
            serde_json::from_str::<Value>(custom["arguments"].as_str().unwrap()).unwrap()["input"],
            "*** Begin Patch"
        );
        assert_eq!(c.messages[4].role, "tool");
        assert_eq!(c.messages[4].content, "patched");
        assert!(names.target("apply_patch").unwrap().custom);
        assert!(names.target("exec_command").is_none());
    }

    #[test]
    fn an_unserved_web_search_is_dropped_when_listed() {
        let r = req(json!({"model": "m", "input": "x", "tools": [
            {"type": "function", "name": "f", "parameters": {"type": "object"}},
            {"type": "web_search", "external_web_access": false}
        ], "tool_choice": {"type": "web_search"}}));
        let (c, _) = to_chat_with(&r, &[], &codex_opts(&|_| None, &dropped())).unwrap();
        assert_eq!(c.tools.unwrap().len(), 1);
        assert_eq!(c.extra["tool_choice"], "auto");
        // A kind not listed is still refused by name.
        let r = req(json!({"model": "m", "input": "x", "tools": [{"type": "file_search", "vector_store_ids": []}]}));
        let e = to_chat_with(&r, &[], &codex_opts(&|_| None, &dropped())).unwrap_err();
        assert_eq!(e.to_openai().1.param.as_deref(), Some("tools[0]"));
    }

    #[test]
    fn sealed_reasoning_is_opened_else_the_readable_text_counts() {
        let open = |s: &str| (s == "sealed-by-us").then(|| "the vendor's own reasoning".to_string());
        let r = req(json!({"model": "m", "input": [
            {"type": "message", "role": "user", "content": "go"},
            {"type": "reasoning", "summary": [], "encrypted_content": "sealed-by-us"},
            {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c1", "output": "ok"},
            {"type": "reasoning", "summary": [{"type": "summary_text", "text": "summary"}], "encrypted_content": "forged"},
            {"type": "function_call", "call_id": "c2", "name": "f", "arguments": "{}"}
        ]}));
        let (c, _) = to_chat_with(&r, &[], &codex_opts(&open, &[])).unwrap();
        assert_eq!(c.messages[1].extra["reasoning_content"], "the vendor's own reasoning");
        assert_eq!(c.messages[3].extra["reasoning_content"], "summary");
    }
}
