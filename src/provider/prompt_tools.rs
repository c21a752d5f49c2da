//! Prompt-mode tools, for upstreams with no native tools (`tool_calls =
//! "prompt"`, `[tools] prompt_models`, or a thinking-conflict fallback).
//!
//! The request's `tools` are removed and described in a system-prompt
//! section that also says exactly how to write a call; the history is
//! rewritten to match: earlier assistant `tool_calls` become text in that
//! format, and `tool` results become user messages of `<tool_response>`
//! blocks labelled with the called tool's name. The answer is parsed by the
//! tool-call recovery engine (the format's parser is always active in prompt
//! mode), so the client sees ordinary `tool_calls`.
//!
//! The instruction text of each supported format lives in
//! `PromptFormat::how_to_call` and nowhere else.

use std::collections::HashMap;

use serde_json::{Value, json};

use super::messages::{append_system, text_of};
use super::profile::PromptFormat;
use crate::openai::{ChatRequest, Message};

impl PromptFormat {
    /// The recovery format (a `toolcall::formats` name) that parses what the
    /// prompt asks for.
    pub fn recovery_format(self) -> &'static str {
        match self {
            PromptFormat::Hermes => "hermes",
            PromptFormat::MarkdownJsonFence => "markdown_json_fence",
        }
    }

    /// How the model must write calls.
    fn how_to_call(self) -> &'static str {
        match self {
            PromptFormat::Hermes => concat!(
                "To call a function, write a block like this, with the arguments as one JSON object:\n",
                "<tool_call>\n",
                "{\"name\": \"<function name>\", \"arguments\": {\"<parameter>\": <value>}}\n",
                "</tool_call>\n",
                "Write one block per call, and write nothing after your last block: stop there and wait for the results."
            ),
            PromptFormat::MarkdownJsonFence => concat!(
                "To call a function, end your reply with one fenced JSON block, with the arguments as one JSON object:\n",
                "```json\n",
                "{\"name\": \"<function name>\", \"arguments\": {\"<parameter>\": <value>}}\n",
                "```\n",
                "For several calls, put a JSON array of such objects in that one block. Write nothing after the block: ",
                "stop there and wait for the results."
            ),
        }
    }

    /// Earlier calls as the model would have written them.
    fn render_calls(self, calls: &[Value]) -> String {
        match self {
            PromptFormat::Hermes => {
                calls.iter().map(|c| format!("<tool_call>\n{c}\n</tool_call>")).collect::<Vec<_>>().join("\n")
            }
            PromptFormat::MarkdownJsonFence => {
                let body = if let [one] = calls { one.to_string() } else { Value::Array(calls.to_vec()).to_string() };
                format!("```json\n{body}\n```")
            }
        }
    }
}

/// What `tool_choice` asks for.
enum Choice {
    None,
    Auto,
    Required,
    Named(String),
}

fn choice_of(v: Option<&Value>) -> Choice {
    match v {
        Some(Value::String(s)) if s == "none" => Choice::None,
        Some(Value::String(s)) if s == "required" => Choice::Required,
        Some(Value::Object(o)) => match o.get("function").and_then(|f| f.get("name")).and_then(Value::as_str) {
            Some(n) => Choice::Named(n.to_string()),
            None => Choice::Auto,
        },
        _ => Choice::Auto,
    }
}

/// Rewrites `req` for an upstream without tools. Returns whether any tool
/// was offered to the model (none is with `tool_choice: "none"`).
pub fn emulate(req: &mut ChatRequest, format: PromptFormat) -> bool {
    let tools = req.tools.take().unwrap_or_default();
    let choice = choice_of(req.extra.remove("tool_choice").as_ref());
    let single = req.extra.remove("parallel_tool_calls") == Some(Value::Bool(false));
    rewrite_history(&mut req.messages, format);
    let offered: Vec<&Value> = match &choice {
        Choice::None => Vec::new(),
        // A named choice offers only that tool, so the model cannot pick another.
        Choice::Named(n) => {
            let named: Vec<&Value> = tools.iter().filter(|t| tool_name(t) == Some(n.as_str())).collect();
            if named.is_empty() { tools.iter().collect() } else { named }
        }
        Choice::Auto | Choice::Required => tools.iter().collect(),
    };
    if offered.is_empty() {
        return false;
    }
    append_system(&mut req.messages, &tools_prompt(format, &offered, &choice, single));
    true
}

fn tool_name(t: &Value) -> Option<&str> {
    t.get("function").unwrap_or(t).get("name").and_then(Value::as_str)
}

/// The system-prompt section: signatures, the call format, the choice.
fn tools_prompt(format: PromptFormat, tools: &[&Value], choice: &Choice, single: bool) -> String {
    let mut s = String::from(
        "# Tools\n\nYou can call functions to help with the user's request. \
         The available functions, one JSON object per line:\n<tools>\n",
    );
    for t in tools {
        let f = t.get("function").unwrap_or(t);
        let mut sig = json!({"name": f.get("name").cloned().unwrap_or(Value::Null)});
        if let Some(d) = f.get("description").filter(|d| !d.is_null()) {
            sig["description"] = d.clone();
        }
        sig["parameters"] = f.get("parameters").cloned().unwrap_or_else(|| json!({"type": "object", "properties": {}}));
        s.push_str(&sig.to_string());
        s.push('\n');
    }
    s.push_str("</tools>\n\n");
    s.push_str(format.how_to_call());
    s.push_str(
        "\nThe results come back in a user message as <tool_response name=\"…\"> blocks, in the order of your calls.\n",
    );
    s.push_str(
        match choice {
            Choice::Required => "You must call at least one function in this reply.".to_string(),
            Choice::Named(n) => format!("You must call the function `{n}` in this reply."),
            Choice::Auto | Choice::None => "Call a function only when it helps; otherwise answer directly.".to_string(),
        }
        .as_str(),
    );
    if single {
        s.push_str("\nCall at most one function in this reply.");
    }
    s
}

/// Assistant `tool_calls` become text in `format`; `tool` results become
/// user messages (consecutive results, and a user turn right after them,
/// share one). Call ids are only read, to
/// label each result with its call's name, so the client's ids stay valid.
pub fn rewrite_history(messages: &mut Vec<Message>, format: PromptFormat) {
    let mut names: HashMap<String, String> = HashMap::new();
    let mut out: Vec<Message> = Vec::with_capacity(messages.len());
    let mut last_was_result = false;
    for mut m in std::mem::take(messages) {
        if m.role == "tool" {
            let id = m.extra.get("tool_call_id").and_then(Value::as_str).unwrap_or_default();
            let name =
                names.get(id).cloned().or_else(|| m.extra.get("name").and_then(Value::as_str).map(str::to_string));
            let label = name.map(|n| format!(" name={}", Value::String(n))).unwrap_or_default();
            let block = format!("<tool_response{label}>\n{}\n</tool_response>", text_of(&m.content));
            match out.last_mut() {
                Some(prev) if last_was_result => {
                    let mut t = text_of(&prev.content);
                    t.push('\n');
                    t.push_str(&block);
                    prev.content = Value::String(t);
                }
                _ => {
                    out.push(Message { role: "user".into(), content: Value::String(block), extra: Default::default() })
                }
            }
            last_was_result = true;
            continue;
        }
        // A user turn right after results joins their message, so roles
        // still alternate (some templates reject two user turns in a row).
        if m.role == "user"
            && last_was_result
            && let (Some(prev), Value::String(t)) = (out.last_mut(), &m.content)
        {
            prev.content = Value::String(format!("{}\n\n{t}", text_of(&prev.content)));
            last_was_result = false;
            continue;
        }
        last_was_result = false;
        if m.role == "assistant"
            && let Some(Value::Array(calls)) = m.extra.remove("tool_calls")
            && !calls.is_empty()
        {
            let mut rendered = Vec::with_capacity(calls.len());
            for c in &calls {
                let f = c.get("function").unwrap_or(c);
                let name = f.get("name").and_then(Value::as_str).unwrap_or_default();
                if let Some(id) = c.get("id").and_then(Value::as_str) {
                    names.insert(id.to_string(), name.to_string());
                }
                rendered.push(json!({"name": name, "arguments": arguments_value(f.get("arguments"))}));
            }
            let text = text_of(&m.content);
            let calls_text = format.render_calls(&rendered);
            m.content =
                Value::String(if text.trim().is_empty() { calls_text } else { format!("{text}\n{calls_text}") });
        }
        out.push(m);
    }
    *messages = out;
}

/// Arguments as a JSON value (they are a JSON string on the wire).
fn arguments_value(a: Option<&Value>) -> Value {
    match a {
        Some(Value::String(s)) if s.trim().is_empty() => json!({}),
        Some(Value::String(s)) => serde_json::from_str(s).unwrap_or_else(|_| Value::String(s.clone())),
        Some(Value::Null) | None => json!({}),
        Some(v) => v.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(v: Value) -> ChatRequest {
        serde_json::from_value(v).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn history_becomes_text_and_results_user_blocks() {
        let mut r = req(json!({"model": "m", "messages": [
            {"role": "user", "content": "weather?"},
            {"role": "assistant", "content": null, "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}},
                {"id": "c2", "type": "function", "function": {"name": "get_time", "arguments": ""}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
            {"role": "tool", "tool_call_id": "c2", "content": [{"type": "text", "text": "noon"}]}
        ]}));
        rewrite_history(&mut r.messages, PromptFormat::Hermes);
        let v = serde_json::to_value(&r.messages).unwrap_or_default();
        assert_eq!(
            v,
            json!([
                {"role": "user", "content": "weather?"},
                {"role": "assistant", "content": "<tool_call>\n{\"name\":\"get_weather\",\"arguments\":{\"city\":\"Paris\"}}\n</tool_call>\n<tool_call>\n{\"name\":\"get_time\",\"arguments\":{}}\n</tool_call>"},
                {"role": "user", "content": "<tool_response name=\"get_weather\">\nsunny\n</tool_response>\n<tool_response name=\"get_time\">\nnoon\n</tool_response>"}
            ])
        );
    }

    #[test]
    fn none_offers_nothing_named_offers_one() {
        let tools =
            json!([{"type": "function", "function": {"name": "a"}}, {"type": "function", "function": {"name": "b"}}]);
        let mut r = req(json!({"model": "m", "messages": [], "tools": tools, "tool_choice": "none"}));
        assert!(!emulate(&mut r, PromptFormat::Hermes));
        assert!(r.messages.is_empty() && r.tools.is_none() && !r.extra.contains_key("tool_choice"));
        let mut r = req(json!({"model": "m", "messages": [], "tools": tools,
            "tool_choice": {"type": "function", "function": {"name": "b"}}}));
        assert!(emulate(&mut r, PromptFormat::Hermes));
        let sys = text_of(&r.messages[0].content);
        assert!(sys.contains("{\"name\":\"b\"") && !sys.contains("{\"name\":\"a\""), "{sys}");
        assert!(sys.contains("You must call the function `b`"));
    }
}
