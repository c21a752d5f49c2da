//! A `POST /v1/messages` body translated into a chat request: `system` and
//! the messages' content blocks become chat messages (tool results `tool`
//! messages, thinking blocks the assistant turn's `reasoning_content`), the
//! Messages parameters their chat names. Claude Code's newer fields that
//! chat completions cannot express (`cache_control`, `context_management`,
//! `tool_reference` blocks, the `tool_search` tools) are dropped on purpose:
//! they steer Anthropic's own backend, never the answer's meaning.

use serde_json::{Map, Value, json};

use crate::error::ApiError;
use crate::openai::{CACHE_MARK, ChatRequest, Message, VALIDATE_MARK};

/// A checked `POST /v1/messages` body and its chat translation.
#[derive(Debug, Clone)]
pub struct Request {
    /// The model name as the client sent it (echoed in the answer).
    pub model: String,
    pub stream: bool,
    /// `stop_sequences`, to tell `stop_sequence` from `end_turn`.
    pub stop_sequences: Vec<String>,
    pub chat: ChatRequest,
}

fn bad(param: &str, message: impl Into<String>) -> ApiError {
    ApiError::invalid_param(param, message)
}

/// Parses and translates the body; `server_tool` names the configured
/// server-side tool serving an Anthropic server tool kind (`web_search`).
pub fn parse(body: &[u8], server_tool: &dyn Fn(&str) -> Option<String>) -> Result<Request, ApiError> {
    let v: Value = serde_json::from_slice(body)
        .map_err(|e| ApiError::invalid(format!("The request body is not valid JSON: {e}")))?;
    let Value::Object(b) = v else {
        return Err(ApiError::invalid("The request body must be a JSON object."));
    };
    let model = match b.get("model") {
        Some(Value::String(m)) if !m.is_empty() => m.clone(),
        _ => return Err(bad("model", "model: Field required (a non-empty string).")),
    };
    let stream = match b.get("stream") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(s)) => *s,
        Some(_) => return Err(bad("stream", "stream: must be a boolean.")),
    };
    let mut messages = Vec::new();
    if let Some(system) = system_text(b.get("system"), "system")? {
        messages.push(Message { role: "system".into(), content: Value::String(system), extra: marks(b.get("system")) });
    }
    let Some(Value::Array(input)) = b.get("messages") else {
        return Err(bad("messages", "messages: Field required (an array)."));
    };
    for (i, m) in input.iter().enumerate() {
        turn(m, i, &mut messages)?;
    }
    let mut extra = Map::new();
    let tools = tools(b.get("tools"), server_tool)?;
    let parallel_off = b.get("tool_choice").and_then(|t| t.get("disable_parallel_tool_use")) == Some(&json!(true));
    if let Some(tc) = b.get("tool_choice").filter(|v| !v.is_null()) {
        extra.insert("tool_choice".into(), tool_choice(tc)?);
        // A forced tool is how Anthropic clients ask for JSON: its input is
        // validated against its schema (core/structured.rs), strict or not.
        if tc.get("type").and_then(Value::as_str) == Some("tool")
            && let Some(name) = tc.get("name").filter(|n| n.is_string())
        {
            extra.insert(VALIDATE_MARK.into(), name.clone());
        }
    }
    if parallel_off {
        extra.insert("parallel_tool_calls".into(), json!(false));
    }
    for (from, to) in
        [("max_tokens", "max_tokens"), ("temperature", "temperature"), ("top_p", "top_p"), ("top_k", "top_k")]
    {
        if let Some(v) = b.get(from).filter(|v| !v.is_null()) {
            extra.insert(to.into(), v.clone());
        }
    }
    let stop_sequences: Vec<String> = match b.get("stop_sequences") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(s)) => s.iter().filter_map(Value::as_str).map(str::to_string).collect(),
        Some(_) => return Err(bad("stop_sequences", "stop_sequences: must be an array of strings.")),
    };
    if !stop_sequences.is_empty() {
        extra.insert("stop".into(), json!(stop_sequences));
    }
    if let Some(user) = b.get("metadata").and_then(|m| m.get("user_id")).filter(|v| v.is_string()) {
        extra.insert("user".into(), user.clone());
    }
    if let Some(effort) = effort(b.get("thinking"), b.get("output_config"))? {
        extra.insert("reasoning_effort".into(), json!(effort));
    }
    if stream {
        extra.insert("stream_options".into(), json!({"include_usage": true}));
    }
    let chat = ChatRequest { model: model.clone(), messages, stream: Some(stream), tools, extra };
    Ok(Request { model, stream, stop_sequences, chat })
}

/// `system` (or a `system` turn's content, at `param`) as one string: a
/// string, or text blocks joined by blank lines.
fn system_text(v: Option<&Value>, param: &str) -> Result<Option<String>, ApiError> {
    match v {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok((!s.is_empty()).then(|| s.clone())),
        Some(Value::Array(blocks)) => {
            let mut parts = Vec::new();
            for (i, blk) in blocks.iter().enumerate() {
                match blk.get("type").and_then(Value::as_str) {
                    Some("text") => parts.push(blk.get("text").and_then(Value::as_str).unwrap_or("")),
                    _ => {
                        let at = format!("{param}[{i}]");
                        return Err(bad(&at, format!("{at}: only text blocks are allowed in a system prompt.")));
                    }
                }
            }
            let text = parts.into_iter().filter(|p| !p.is_empty()).collect::<Vec<_>>().join("\n\n");
            Ok((!text.is_empty()).then_some(text))
        }
        Some(_) => Err(bad(param, format!("{param}: must be a string or an array of text blocks."))),
    }
}

/// `thinking` (and `output_config.effort`) as a chat `reasoning_effort`,
/// which each profile turns into its vendor's switch: a budget by its size,
/// `adaptive` the client's effort (else medium), `disabled` off.
fn effort(thinking: Option<&Value>, output: Option<&Value>) -> Result<Option<&'static str>, ApiError> {
    let asked = output.and_then(|o| o.get("effort")).and_then(Value::as_str).and_then(|e| match e {
        "low" => Some("low"),
        "medium" => Some("medium"),
        "high" | "max" => Some("high"),
        _ => None,
    });
    let Some(t) = thinking.filter(|t| !t.is_null()) else { return Ok(None) };
    match t.get("type").and_then(Value::as_str) {
        Some("enabled") => {
            let budget = t.get("budget_tokens").and_then(Value::as_u64).unwrap_or(0);
            Ok(Some(match budget {
                0..4096 => "low",
                4096..16384 => "medium",
                _ => "high",
            }))
        }
        Some("adaptive") => Ok(Some(asked.unwrap_or("medium"))),
        Some("disabled") => Ok(Some("none")),
        _ => Err(bad("thinking.type", "thinking.type: must be `enabled`, `adaptive` or `disabled`.")),
    }
}

/// Tool definitions: custom tools as functions; server tools (`web_search`,
/// `web_fetch`) served by a configured server-side tool (offered by the
/// agent loop itself) or refused; `tool_search` tools dropped (every tool
/// is offered in full here).
fn tools(v: Option<&Value>, server_tool: &dyn Fn(&str) -> Option<String>) -> Result<Option<Vec<Value>>, ApiError> {
    let Some(Value::Array(list)) = v else { return Ok(None) };
    let mut out = Vec::new();
    for (i, t) in list.iter().enumerate() {
        let param = format!("tools[{i}]");
        let kind = t.get("type").and_then(Value::as_str).unwrap_or("custom");
        if kind == "custom" || t.get("input_schema").is_some() {
            let Some(name) = t.get("name").and_then(Value::as_str).filter(|n| !n.is_empty()) else {
                return Err(bad(&format!("{param}.name"), "tools: every tool needs a `name`."));
            };
            let mut f = Map::new();
            f.insert("name".into(), json!(name));
            if let Some(d) = t.get("description").filter(|d| d.is_string()) {
                f.insert("description".into(), d.clone());
            }
            let schema = t.get("input_schema").cloned().unwrap_or_else(|| json!({"type": "object", "properties": {}}));
            f.insert("parameters".into(), schema);
            if t.get("strict") == Some(&json!(true)) {
                f.insert("strict".into(), json!(true));
            }
            out.push(json!({"type": "function", "function": f}));
            continue;
        }
        let base = server_kind(kind);
        if base.starts_with("tool_search") {
            continue;
        }
        if let Some((description, parameters)) = client_defined(base, kind) {
            let name = t.get("name").and_then(Value::as_str).filter(|n| !n.is_empty()).unwrap_or(base);
            out.push(json!({"type": "function", "function": {"name": name, "description": description, "parameters": parameters}}));
            continue;
        }
        if server_tool(base).is_none() {
            return Err(bad(
                &param,
                format!(
                    "The tool type `{kind}` is not supported by this proxy: configure a server-side tool named `{base}` to serve it, or declare a custom tool."
                ),
            ));
        }
    }
    Ok((!out.is_empty()).then_some(out))
}

/// Anthropic-defined tools that the client runs (`bash_20250124`,
/// `text_editor_20250728`): their input schemas are Anthropic's, so the vendor
/// is offered them as functions with those schemas. `computer` needs a display
/// the vendor's models cannot be told about, so it stays refused.
fn client_defined(base: &str, kind: &str) -> Option<(&'static str, Value)> {
    match base {
        "bash" => Some((
            "Run a command in a persistent bash shell. Set `restart` to restart the shell.",
            json!({"type": "object", "properties": {
                "command": {"type": "string", "description": "The bash command to run."},
                "restart": {"type": "boolean", "description": "Restart the shell instead of running a command."}}}),
        )),
        "text_editor" => {
            // The 2025-07-28 version dropped `undo_edit`.
            let commands: &[&str] = if kind == "text_editor_20250728" {
                &["view", "create", "str_replace", "insert"]
            } else {
                &["view", "create", "str_replace", "insert", "undo_edit"]
            };
            Some((
                "View, create and edit text files. `view` shows a file with line numbers (or lists a directory), \
                 `create` writes `file_text`, `str_replace` replaces the unique `old_str` with `new_str`, \
                 `insert` adds `new_str` after line `insert_line` (0: at the start).",
                json!({"type": "object", "required": ["command", "path"], "properties": {
                    "command": {"type": "string", "enum": commands},
                    "path": {"type": "string", "description": "Path of the file or directory."},
                    "file_text": {"type": "string", "description": "The new file's content (`create`)."},
                    "old_str": {"type": "string", "description": "The exact text to replace (`str_replace`)."},
                    "new_str": {"type": "string", "description": "The replacement or inserted text."},
                    "insert_line": {"type": "integer", "description": "The line to insert after (`insert`)."},
                    "view_range": {"type": "array", "items": {"type": "integer"}, "minItems": 2, "maxItems": 2,
                        "description": "First and last line to view, 1-based; -1: to the end (`view`)."}}}),
            ))
        }
        _ => None,
    }
}

/// A server tool's kind without its version date: `web_search_20250305` →
/// `web_search`.
fn server_kind(kind: &str) -> &str {
    match kind.rsplit_once('_') {
        Some((base, date)) if date.len() == 8 && date.bytes().all(|b| b.is_ascii_digit()) => base,
        _ => kind,
    }
}

fn tool_choice(tc: &Value) -> Result<Value, ApiError> {
    match tc.get("type").and_then(Value::as_str) {
        Some("auto") => Ok(json!("auto")),
        Some("any") => Ok(json!("required")),
        Some("none") => Ok(json!("none")),
        Some("tool") => match tc.get("name").and_then(Value::as_str) {
            Some(name) => Ok(json!({"type": "function", "function": {"name": name}})),
            None => Err(bad("tool_choice.name", "tool_choice: `tool` needs a `name`.")),
        },
        _ => Err(bad("tool_choice.type", "tool_choice.type: must be `auto`, `any`, `tool` or `none`.")),
    }
}

/// One Messages turn as chat messages, appended to `out`.
fn turn(m: &Value, i: usize, out: &mut Vec<Message>) -> Result<(), ApiError> {
    let param = format!("messages[{i}]");
    let role = m.get("role").and_then(Value::as_str).unwrap_or("");
    let blocks: Vec<Value> = match m.get("content") {
        Some(Value::String(s)) => vec![json!({"type": "text", "text": s})],
        Some(Value::Array(b)) => b.clone(),
        _ => return Err(bad(&format!("{param}.content"), "content: must be a string or an array of blocks.")),
    };
    match role {
        "user" => user(&blocks, &param, out),
        // Claude Code's per-turn system prompts: kept in place (a profile
        // with `merge_system` moves them first for vendors that need that).
        "system" => {
            if let Some(text) = system_text(m.get("content"), &format!("{param}.content"))? {
                out.push(Message {
                    role: "system".into(),
                    content: Value::String(text),
                    extra: marks(m.get("content")),
                });
            }
            Ok(())
        }
        "assistant" => {
            let mut a = assistant(&blocks, &param)?;
            a.extra.extend(marks(m.get("content")));
            out.push(a);
            Ok(())
        }
        _ => Err(bad(&format!("{param}.role"), "role: must be `user`, `assistant` or `system`.")),
    }
}

/// A user turn: its tool results first (each a `tool` message; their images
/// in a user message after them, as chat tool messages carry text only),
/// then the rest as one user message.
fn user(blocks: &[Value], param: &str, out: &mut Vec<Message>) -> Result<(), ApiError> {
    let mut parts = Vec::new();
    let mut images = Vec::new();
    let mut marked = false;
    for (j, blk) in blocks.iter().enumerate() {
        let p = format!("{param}.content[{j}]");
        match blk.get("type").and_then(Value::as_str).unwrap_or("") {
            "tool_result" => {
                let id = blk.get("tool_use_id").and_then(Value::as_str).unwrap_or("");
                let (mut text, imgs) = tool_result(blk.get("content"), &p)?;
                if blk.get("is_error") == Some(&json!(true)) {
                    text = format!("Error: {text}");
                }
                images.extend(imgs);
                let mut extra = marks(Some(blk));
                extra.insert("tool_call_id".into(), json!(id));
                out.push(Message { role: "tool".into(), content: Value::String(text), extra });
            }
            _ => {
                marked |= !marks(Some(blk)).is_empty();
                if let Some(part) = part(blk, &p)? {
                    parts.push(part);
                }
            }
        }
    }
    images.extend(parts);
    if !images.is_empty() {
        let extra = if marked { marks(Some(&json!({"cache_control": {}}))) } else { Map::new() };
        out.push(Message { role: "user".into(), content: collapse(images), extra });
    }
    Ok(())
}

/// The chat message's fields for Anthropic `cache_control` markers on
/// `content` (a block, or any block of a list): the message-level
/// [`CACHE_MARK`] the provider turns into its vendor's form, or drops
/// (`[request] cache_control`). A `ttl` is never carried.
fn marks(content: Option<&Value>) -> Map<String, Value> {
    let has = |b: &Value| b.get("cache_control").is_some_and(|c| !c.is_null());
    let marked = match content {
        Some(Value::Array(blocks)) => blocks.iter().any(has),
        Some(b) => has(b),
        None => false,
    };
    let mut m = Map::new();
    if marked {
        m.insert(CACHE_MARK.into(), json!({"type": "ephemeral"}));
    }
    m
}

/// Text parts only: one string (what every vendor accepts).
fn collapse(parts: Vec<Value>) -> Value {
    if parts.iter().all(|p| p["type"] == "text") {
        let text: Vec<&str> = parts.iter().filter_map(|p| p["text"].as_str()).collect();
        return Value::String(text.join("\n"));
    }
    Value::Array(parts)
}

/// One user content block as a chat content part (`None`: dropped on purpose).
fn part(blk: &Value, p: &str) -> Result<Option<Value>, ApiError> {
    match blk.get("type").and_then(Value::as_str).unwrap_or("") {
        "text" => Ok(Some(json!({"type": "text", "text": blk.get("text").and_then(Value::as_str).unwrap_or("")}))),
        "image" => image(blk, p).map(Some),
        "document" => document(blk, p).map(Some),
        // Tool search's references, and blocks only Anthropic's backend makes.
        "tool_reference" | "redacted_thinking" | "thinking" | "server_tool_use" | "web_search_tool_result" => Ok(None),
        "search_result" => {
            let texts: Vec<&str> = blk
                .get("content")
                .and_then(Value::as_array)
                .map(|c| c.iter().filter_map(|t| t.get("text").and_then(Value::as_str)).collect())
                .unwrap_or_default();
            Ok(Some(json!({"type": "text", "text": texts.join("\n")})))
        }
        other => Err(bad(p, format!("Content blocks of type `{other}` are not supported in a user message."))),
    }
}

fn image(blk: &Value, p: &str) -> Result<Value, ApiError> {
    let src = blk.get("source").unwrap_or(&Value::Null);
    let url = match src.get("type").and_then(Value::as_str) {
        Some("base64") => {
            let media = src.get("media_type").and_then(Value::as_str).unwrap_or("image/png");
            format!("data:{media};base64,{}", src.get("data").and_then(Value::as_str).unwrap_or(""))
        }
        Some("url") => src.get("url").and_then(Value::as_str).unwrap_or("").to_string(),
        _ => return Err(bad(&format!("{p}.source"), "image.source: must be `base64` or `url`.")),
    };
    Ok(json!({"type": "image_url", "image_url": {"url": url}}))
}

/// A document: a PDF as a chat `file` part, text (plain or as content
/// blocks) as text; a PDF by URL has no chat form.
fn document(blk: &Value, p: &str) -> Result<Value, ApiError> {
    let src = blk.get("source").unwrap_or(&Value::Null);
    let title = blk.get("title").and_then(Value::as_str);
    let titled = |text: &str| match title {
        Some(t) => format!("{t}\n\n{text}"),
        None => text.to_string(),
    };
    match src.get("type").and_then(Value::as_str) {
        Some("base64") => {
            let media = src.get("media_type").and_then(Value::as_str).unwrap_or("application/pdf");
            let data = src.get("data").and_then(Value::as_str).unwrap_or("");
            let mut file = json!({"file_data": format!("data:{media};base64,{data}")});
            file["filename"] = json!(title.unwrap_or("document.pdf"));
            Ok(json!({"type": "file", "file": file}))
        }
        Some("text") => {
            Ok(json!({"type": "text", "text": titled(src.get("data").and_then(Value::as_str).unwrap_or(""))}))
        }
        Some("content") => {
            let texts: Vec<&str> = match src.get("content") {
                Some(Value::String(s)) => vec![s.as_str()],
                Some(Value::Array(c)) => c.iter().filter_map(|t| t.get("text").and_then(Value::as_str)).collect(),
                _ => Vec::new(),
            };
            Ok(json!({"type": "text", "text": titled(&texts.join("\n"))}))
        }
        _ => Err(bad(
            &format!("{p}.source"),
            "document.source: only `base64`, `text` and `content` documents are supported (chat completions has no document URL).",
        )),
    }
}

/// A tool result's content as tool-message text, and its images.
fn tool_result(c: Option<&Value>, p: &str) -> Result<(String, Vec<Value>), ApiError> {
    match c {
        None | Some(Value::Null) => Ok((String::new(), Vec::new())),
        Some(Value::String(s)) => Ok((s.clone(), Vec::new())),
        Some(Value::Array(blocks)) => {
            let mut text = Vec::new();
            let mut images = Vec::new();
            for (k, blk) in blocks.iter().enumerate() {
                match blk.get("type").and_then(Value::as_str) {
                    Some("text") => text.push(blk.get("text").and_then(Value::as_str).unwrap_or("").to_string()),
                    Some("image") => images.push(image(blk, &format!("{p}.content[{k}]"))?),
                    Some("tool_reference") => {}
                    _ => text.push(blk.to_string()),
                }
            }
            Ok((text.join("\n"), images))
        }
        Some(other) => Ok((other.to_string(), Vec::new())),
    }
}

/// An assistant turn: text as content, `tool_use` as tool calls (input as
/// a JSON string), thinking text as `reasoning_content` (whoever signed it).
fn assistant(blocks: &[Value], param: &str) -> Result<Message, ApiError> {
    let mut text = String::new();
    let mut reasoning = String::new();
    let mut calls = Vec::new();
    for (j, blk) in blocks.iter().enumerate() {
        match blk.get("type").and_then(Value::as_str).unwrap_or("") {
            "text" => text.push_str(blk.get("text").and_then(Value::as_str).unwrap_or("")),
            "thinking" => reasoning.push_str(blk.get("thinking").and_then(Value::as_str).unwrap_or("")),
            "tool_use" => {
                let id = blk.get("id").and_then(Value::as_str).unwrap_or("");
                let name = blk.get("name").and_then(Value::as_str).unwrap_or("");
                let input = blk.get("input").cloned().unwrap_or_else(|| json!({}));
                calls.push(
                    json!({"id": id, "type": "function", "function": {"name": name, "arguments": input.to_string()}}),
                );
            }
            "redacted_thinking" | "server_tool_use" | "web_search_tool_result" | "tool_reference" => {}
            other => {
                return Err(bad(
                    &format!("{param}.content[{j}]"),
                    format!("Content blocks of type `{other}` are not supported in an assistant message."),
                ));
            }
        }
    }
    let mut extra = Map::new();
    if !reasoning.is_empty() {
        extra.insert("reasoning_content".into(), Value::String(reasoning));
    }
    let content = if text.is_empty() && !calls.is_empty() { Value::Null } else { Value::String(text) };
    if !calls.is_empty() {
        extra.insert("tool_calls".into(), Value::Array(calls));
    }
    Ok(Message { role: "assistant".into(), content, extra })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn none(_: &str) -> Option<String> {
        None
    }

    fn req(v: Value) -> Request {
        parse(v.to_string().as_bytes(), &none).unwrap_or_else(|e| panic!("{e}"))
    }

    fn msgs(r: &Request) -> Value {
        serde_json::to_value(&r.chat.messages).unwrap_or_default()
    }

    #[test]
    fn system_blocks_parameters_and_choice() {
        let r = req(json!({"model": "claude-x", "max_tokens": 100, "stream": true,
            "system": [{"type": "text", "text": "A", "cache_control": {"type": "ephemeral"}}, {"type": "text", "text": "B"}],
            "messages": [{"role": "user", "content": "hi"}],
            "stop_sequences": ["END"], "metadata": {"user_id": "u1"}, "temperature": 0.5, "top_p": 0.9, "top_k": 5,
            "tool_choice": {"type": "any", "disable_parallel_tool_use": true},
            "thinking": {"type": "enabled", "budget_tokens": 5000},
            "context_management": {"edits": []}, "output_config": {"effort": "high"}}));
        // The marker rides on the message; the provider's profile decides its form.
        assert_eq!(
            msgs(&r),
            json!([{"role": "system", "content": "A\n\nB", "cache_control": {"type": "ephemeral"}},
                   {"role": "user", "content": "hi"}])
        );
        let e = &r.chat.extra;
        assert_eq!(
            Value::Object(e.clone()),
            json!({"tool_choice": "required", "parallel_tool_calls": false, "max_tokens": 100, "temperature": 0.5,
                   "top_p": 0.9, "top_k": 5, "stop": ["END"], "user": "u1", "reasoning_effort": "medium",
                   "stream_options": {"include_usage": true}})
        );
        assert_eq!(r.stop_sequences, ["END"]);
    }

    #[test]
    fn system_turns_in_the_messages_stay_in_place() {
        // Claude Code's per-turn system messages (the `per-turn-control` beta).
        let r = req(json!({"model": "m", "max_tokens": 10, "system": "S", "messages": [
            {"role": "user", "content": "hi"},
            {"role": "system", "content": [{"type": "text", "text": "# Environment", "cache_control": {"type": "ephemeral"}}]},
            {"role": "system", "content": ""},
            {"role": "assistant", "content": "ok"}]}));
        assert_eq!(
            msgs(&r),
            json!([{"role": "system", "content": "S"}, {"role": "user", "content": "hi"},
                   {"role": "system", "content": "# Environment", "cache_control": {"type": "ephemeral"}},
                   {"role": "assistant", "content": "ok"}])
        );
        let bad = json!({"model": "m", "messages": [{"role": "system", "content": [{"type": "image", "source": {}}]}]});
        let e = parse(bad.to_string().as_bytes(), &none).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(e.contains("messages[0].content[0]"), "{e}");
    }

    #[test]
    fn thinking_kinds_map_to_an_effort() {
        let t = |th: Value, oc: Value| effort(Some(&th), Some(&oc)).unwrap_or(None);
        assert_eq!(t(json!({"type": "enabled", "budget_tokens": 1024}), Value::Null), Some("low"));
        assert_eq!(t(json!({"type": "enabled", "budget_tokens": 32000}), Value::Null), Some("high"));
        assert_eq!(t(json!({"type": "adaptive"}), Value::Null), Some("medium"));
        assert_eq!(t(json!({"type": "adaptive"}), json!({"effort": "low"})), Some("low"));
        assert_eq!(t(json!({"type": "disabled"}), Value::Null), Some("none"));
        assert_eq!(effort(None, Some(&json!({"effort": "low"}))).unwrap_or(Some("x")), None);
    }

    #[test]
    fn tool_round_trip_history() {
        let r = req(json!({"model": "m", "max_tokens": 10, "messages": [
            {"role": "user", "content": [{"type": "text", "text": "look"},
                {"type": "image", "source": {"type": "base64", "media_type": "image/jpeg", "data": "QUJD"}},
                {"type": "image", "source": {"type": "url", "url": "https://x/cat.png"}}]},
            {"role": "assistant", "content": [
                {"type": "thinking", "thinking": "hmm", "signature": "modelshim.abc"},
                {"type": "text", "text": "Checking."},
                {"type": "tool_use", "id": "toolu_1", "name": "get", "input": {"a": 1}},
                {"type": "tool_use", "id": "toolu_2", "name": "get", "input": {"a": 2}}]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": "one", "cache_control": {"type": "ephemeral"}},
                {"type": "tool_result", "tool_use_id": "toolu_2", "is_error": true, "content": [
                    {"type": "text", "text": "boom"},
                    {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"}}]},
                {"type": "tool_reference", "tool_name": "x"},
                {"type": "text", "text": "go on"}]}]}));
        assert_eq!(
            msgs(&r),
            json!([
                {"role": "user", "content": [{"type": "text", "text": "look"},
                    {"type": "image_url", "image_url": {"url": "data:image/jpeg;base64,QUJD"}},
                    {"type": "image_url", "image_url": {"url": "https://x/cat.png"}}]},
                {"role": "assistant", "content": "Checking.", "reasoning_content": "hmm", "tool_calls": [
                    {"id": "toolu_1", "type": "function", "function": {"name": "get", "arguments": "{\"a\":1}"}},
                    {"id": "toolu_2", "type": "function", "function": {"name": "get", "arguments": "{\"a\":2}"}}]},
                {"role": "tool", "content": "one", "tool_call_id": "toolu_1", "cache_control": {"type": "ephemeral"}},
                {"role": "tool", "content": "Error: boom", "tool_call_id": "toolu_2"},
                {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
                    {"type": "text", "text": "go on"}]}
            ])
        );
    }

    #[test]
    fn tools_custom_server_and_tool_search() {
        let body = json!({"model": "m", "max_tokens": 1, "messages": [{"role": "user", "content": "x"}], "tools": [
            {"name": "get", "description": "d", "input_schema": {"type": "object"}, "cache_control": {"type": "ephemeral"}},
            {"type": "tool_search_tool_regex_20251119", "name": "tool_search_tool_regex"},
            {"type": "web_search_20250305", "name": "web_search"}]});
        let e = parse(body.to_string().as_bytes(), &none).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(e.contains("`web_search_20250305` is not supported") && e.contains("named `web_search`"), "{e}");
        let served = |k: &str| (k == "web_search").then(|| "web_search".to_string());
        let r = parse(body.to_string().as_bytes(), &served).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            serde_json::to_value(&r.chat.tools).unwrap_or_default(),
            json!([{"type": "function", "function": {"name": "get", "description": "d", "parameters": {"type": "object"}}}])
        );
        assert_eq!(
            tool_choice(&json!({"type": "tool", "name": "get"})).ok(),
            Some(json!({"type": "function", "function": {"name": "get"}}))
        );
        assert_eq!(tool_choice(&json!({"type": "none"})).ok(), Some(json!("none")));
    }

    #[test]
    fn anthropic_defined_client_tools_become_functions_with_their_schemas() {
        let body = json!({"model": "m", "max_tokens": 1, "messages": [{"role": "user", "content": "x"}], "tools": [
            {"type": "bash_20250124", "name": "bash"},
            {"type": "text_editor_20250728", "name": "str_replace_based_edit_tool", "max_characters": 1000},
            {"type": "text_editor_20250124", "name": "str_replace_editor"}]});
        let r = parse(body.to_string().as_bytes(), &none).unwrap_or_else(|e| panic!("{e}"));
        let tools = serde_json::to_value(&r.chat.tools).unwrap_or_default();
        let names: Vec<_> = tools.as_array().into_iter().flatten().map(|t| t["function"]["name"].clone()).collect();
        assert_eq!(names, [json!("bash"), json!("str_replace_based_edit_tool"), json!("str_replace_editor")]);
        assert_eq!(tools[0]["function"]["parameters"]["properties"]["command"]["type"], "string");
        assert_eq!(
            tools[1]["function"]["parameters"]["properties"]["command"]["enum"],
            json!(["view", "create", "str_replace", "insert"])
        );
        assert_eq!(tools[2]["function"]["parameters"]["properties"]["command"]["enum"][4], "undo_edit");
        assert_eq!(tools[1]["function"]["parameters"]["required"], json!(["command", "path"]));
        let computer = json!({"model": "m", "max_tokens": 1, "messages": [{"role": "user", "content": "x"}],
            "tools": [{"type": "computer_20250124", "name": "computer", "display_width_px": 1024, "display_height_px": 768}]});
        assert!(parse(computer.to_string().as_bytes(), &none).is_err());
    }

    #[test]
    fn documents() {
        let r = req(json!({"model": "m", "max_tokens": 1, "messages": [{"role": "user", "content": [
            {"type": "document", "title": "t.pdf", "source": {"type": "base64", "media_type": "application/pdf", "data": "JVBE"}},
            {"type": "document", "title": "Notes", "source": {"type": "text", "media_type": "text/plain", "data": "n"}}]}]}));
        assert_eq!(
            msgs(&r)[0]["content"],
            json!([{"type": "file", "file": {"file_data": "data:application/pdf;base64,JVBE", "filename": "t.pdf"}},
                   {"type": "text", "text": "Notes\n\nn"}])
        );
        let url = json!({"model": "m", "messages": [{"role": "user", "content": [{"type": "document", "source": {"type": "url", "url": "u"}}]}]});
        assert!(parse(url.to_string().as_bytes(), &none).is_err());
    }
}
