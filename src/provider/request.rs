//! Request normalization: rewrites an OpenAI request into what one vendor
//! accepts, driven only by [`Profile`] fields. Every rewrite here is written
//! once and switched on by data; no vendor is named in code. Tool rewrites
//! live in [`super::tools`] (native downgrades) and [`super::prompt_tools`]
//! (prompt mode); this file decides which applies.

use super::messages::{append_system, text_of};
use serde_json::{Map, Value, json};

use super::profile::{ConflictFallback, Profile, ThinkingConflict, ThinkingStyle};
use super::tools::NamesBack;
use super::{prompt_tools, tools};
use crate::openai::{CACHE_MARK, ChatRequest, Message};

/// What the normalizer decided beyond the body itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// Send `stream: true` upstream even if the client did not stream (the
    /// answer is assembled before it is returned).
    pub stream_upstream: bool,
    /// Tools were emulated by prompt: the answer's text must be parsed.
    pub prompt: bool,
    /// Whether the model was offered the request's tools (not with
    /// `tool_choice: "none"` in prompt mode); calls are recovered only then.
    pub tools_offered: bool,
    /// Renamed tool names, upstream → client, for the answer.
    pub names_back: NamesBack,
}

/// Rewrites `req` in place for `profile`; `model` is the upstream model name
/// and `prompt` says whether this model's tools are emulated by prompt.
pub fn normalize(req: &mut ChatRequest, profile: &Profile, model: &str, prompt: bool) -> Plan {
    req.model = model.to_string();
    let q = &profile.request;
    for m in &mut req.messages {
        if m.role == "developer"
            && let Some(role) = &q.developer_role
        {
            m.role = role.clone();
        }
        if q.flatten_text_parts {
            flatten_text_parts(m);
        }
        if q.strip_message_name {
            m.extra.remove("name");
        }
    }
    if q.structured() == crate::config::StructuredMode::Emulate {
        json_schema_to_prompt(req);
    }
    // The Messages front's mark of a forced tool to validate: ours, not the vendor's.
    req.extra.remove(crate::openai::VALIDATE_MARK);
    if q.merge_system {
        merge_system(&mut req.messages);
    }
    let client_streams = req.is_stream();
    let mut thinking_on = thinking(req, profile);
    let mut prompt = prompt;
    if !prompt && let Some(reason) = thinking_conflict(req, profile, thinking_on) {
        match profile.tools.on_thinking_conflict {
            ConflictFallback::DisableThinking => {
                tracing::info!(model, reason, "thinking switched off for this turn");
                set_thinking(&mut req.extra, profile.thinking.style, false);
                thinking_on = Some(false);
            }
            ConflictFallback::Prompt => {
                tracing::info!(model, reason, "tools emulated by prompt for this turn");
                prompt = true;
            }
        }
    }
    let (tools_offered, names_back) = if prompt {
        (prompt_tools::emulate(req, profile.tools.prompt_format), NamesBack::new())
    } else {
        (true, tools::downgrade(req, &profile.tools))
    };
    let stream_upstream = !client_streams && profile.thinking.stream_only && thinking_on != Some(false);
    if stream_upstream {
        req.stream = Some(true);
    }
    if !req.is_stream() {
        // OpenAI rejects stream_options without stream; so do most vendors.
        req.extra.remove("stream_options");
    }
    params(&mut req.extra, profile);
    cache_marks(&mut req.messages, q.cache_control);
    Plan { stream_upstream, prompt, tools_offered, names_back }
}

/// Anthropic-front cache markers ([`CACHE_MARK`] on a message): in the
/// vendor's content-part form for a profile with `cache_control`, else
/// removed. Only system and user messages carry one (the vendor's
/// documented places); `ttl` is never sent.
fn cache_marks(messages: &mut [Message], keep: bool) {
    for m in messages {
        let Some(mark) = m.extra.remove(CACHE_MARK) else { continue };
        if !keep || !matches!(m.role.as_str(), "system" | "user") || mark.is_null() {
            continue;
        }
        let marker = json!({"type": "ephemeral"});
        match &mut m.content {
            Value::String(s) => {
                m.content = json!([{"type": "text", "text": std::mem::take(s), "cache_control": marker}]);
            }
            Value::Array(parts) => {
                if let Some(p) = parts.iter_mut().rev().find(|p| p.get("type").and_then(Value::as_str) == Some("text"))
                    && let Some(o) = p.as_object_mut()
                {
                    o.insert("cache_control".into(), marker);
                }
            }
            _ => {}
        }
    }
}

/// Why this request would be refused (tools or a forced choice while
/// thinking), per `[tools] thinking_conflict`.
fn thinking_conflict(req: &ChatRequest, profile: &Profile, thinking_on: Option<bool>) -> Option<&'static str> {
    let conflict = profile.tools.thinking_conflict?;
    if !thinking_on.unwrap_or(profile.thinking.on_by_default) || !req.declares_tools() {
        return None;
    }
    let choice = req.extra.get("tool_choice");
    let forced = match choice {
        Some(Value::String(s)) if s == "none" => return None,
        Some(Value::String(s)) => s == "required",
        Some(Value::Object(_)) => true,
        _ => false,
    };
    match conflict {
        ThinkingConflict::Tools => Some("the vendor rejects tools while thinking is on"),
        ThinkingConflict::ForcedChoice if forced => {
            Some("the vendor rejects a forced tool_choice while thinking is on")
        }
        ThinkingConflict::ForcedChoice => None,
    }
}

/// Sets the vendor's thinking switch, overriding what the client sent.
fn set_thinking(body: &mut Map<String, Value>, style: ThinkingStyle, on: bool) {
    body.remove("reasoning_effort");
    match style {
        ThinkingStyle::Effort => {
            if !on {
                body.insert("reasoning_effort".into(), json!("none"));
            }
        }
        ThinkingStyle::ThinkingType => {
            body.insert("thinking".into(), json!({"type": if on { "enabled" } else { "disabled" }}));
        }
        ThinkingStyle::EnableThinking => {
            body.insert("enable_thinking".into(), json!(on));
        }
        ThinkingStyle::ChatTemplateKwargs => {
            let kw = body.entry("chat_template_kwargs").or_insert_with(|| json!({}));
            if let Some(kw) = kw.as_object_mut() {
                kw.insert("enable_thinking".into(), json!(on));
            }
        }
        ThinkingStyle::Think => {
            body.insert("think".into(), json!(on));
        }
    }
}

/// Parameter drops, renames, clamps and defaults.
fn params(body: &mut Map<String, Value>, profile: &Profile) {
    let q = &profile.request;
    for k in &q.drop {
        body.remove(k);
    }
    for (from, to) in &q.rename {
        if let Some(v) = body.remove(from) {
            body.entry(to.clone()).or_insert(v);
        }
    }
    for (k, [lo, hi]) in &q.clamp {
        if let Some(x) = body.get(k).and_then(Value::as_f64) {
            let c = x.clamp(*lo, *hi);
            if c != x {
                body.insert(k.clone(), json!(c));
            }
        }
    }
    for (k, v) in &q.defaults {
        body.entry(k.clone()).or_insert_with(|| v.clone());
    }
}

/// `[{type:text,text}]` becomes `"text"` when every part is text.
fn flatten_text_parts(m: &mut Message) {
    let Value::Array(parts) = &m.content else {
        return;
    };
    let mut text = String::new();
    for p in parts {
        match (p.get("type").and_then(Value::as_str), p.get("text").and_then(Value::as_str)) {
            (Some("text"), Some(t)) => text.push_str(t),
            _ => return,
        }
    }
    m.content = Value::String(text);
}

/// All system messages become one, placed first.
fn merge_system(messages: &mut Vec<Message>) {
    if messages.iter().filter(|m| m.role == "system").count() < 2 {
        return;
    }
    let texts: Vec<String> = messages.iter().filter(|m| m.role == "system").map(|m| text_of(&m.content)).collect();
    // A cache marker on any of them ends on the merged one.
    let mut extra = Map::new();
    if let Some(mark) = messages.iter().filter(|m| m.role == "system").find_map(|m| m.extra.get(CACHE_MARK)) {
        extra.insert(CACHE_MARK.into(), mark.clone());
    }
    messages.retain(|m| m.role != "system");
    messages.insert(0, Message { role: "system".into(), content: Value::String(texts.join("\n\n")), extra });
}

/// `response_format: json_schema` becomes `json_object` plus the schema in
/// the system prompt, for vendors without structured outputs.
fn json_schema_to_prompt(req: &mut ChatRequest) {
    let Some(rf) = req.extra.get("response_format") else {
        return;
    };
    if rf.get("type").and_then(Value::as_str) != Some("json_schema") {
        return;
    }
    let schema = rf.get("json_schema").and_then(|s| s.get("schema")).cloned().unwrap_or(Value::Null);
    req.extra.insert("response_format".into(), json!({"type": "json_object"}));
    let text = format!("Respond with a single JSON object that validates against this JSON schema:\n{schema}");
    append_system(&mut req.messages, &text);
}

/// Translates the client's `reasoning_effort` into the vendor's switch.
/// Returns whether thinking was explicitly turned on or off.
fn thinking(req: &mut ChatRequest, profile: &Profile) -> Option<bool> {
    let th = &profile.thinking;
    let explicit = explicit_switch(&req.extra);
    let Some(effort) = req.extra.get("reasoning_effort").and_then(Value::as_str).map(str::to_string) else {
        return explicit;
    };
    let on = !matches!(effort.as_str(), "none" | "off" | "disabled");
    let body = &mut req.extra;
    match th.style {
        ThinkingStyle::Effort => return Some(on),
        ThinkingStyle::ThinkingType => {
            body.entry("thinking").or_insert_with(|| json!({"type": if on { "enabled" } else { "disabled" }}));
        }
        ThinkingStyle::EnableThinking => {
            body.entry("enable_thinking").or_insert(json!(on));
        }
        ThinkingStyle::ChatTemplateKwargs => {
            let kw = body.entry("chat_template_kwargs").or_insert_with(|| json!({}));
            if let Some(kw) = kw.as_object_mut() {
                kw.entry("enable_thinking").or_insert(json!(on));
            }
        }
        ThinkingStyle::Think => {
            body.entry("think").or_insert(json!(on));
        }
    }
    if !th.keep_effort || !on {
        body.remove("reasoning_effort");
    }
    explicit.or(Some(on))
}

/// A thinking switch the client set in the vendor's own words.
fn explicit_switch(body: &Map<String, Value>) -> Option<bool> {
    if let Some(b) = body.get("enable_thinking").and_then(Value::as_bool) {
        return Some(b);
    }
    if let Some(t) = body.get("thinking").and_then(|t| t.get("type")).and_then(Value::as_str) {
        return Some(t != "disabled");
    }
    body.get("chat_template_kwargs").and_then(|k| k.get("enable_thinking")).and_then(Value::as_bool)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(v: Value) -> ChatRequest {
        serde_json::from_value(v).unwrap_or_else(|e| panic!("{e}"))
    }

    /// Qwen refuses a system message after the first turn; Claude Code sends
    /// per-turn system turns. The bundled DashScope profile merges them.
    #[test]
    fn dashscope_moves_a_mid_conversation_system_turn_first() {
        let p = Profile::parse("dashscope", include_str!("../../providers/dashscope.toml")).unwrap_or_default();
        let mut r = req(json!({"model": "x", "messages": [
            {"role": "system", "content": "You are Claude Code."},
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": "hello"},
            {"role": "system", "content": "Reminder: be brief."},
            {"role": "user", "content": "and now?"}
        ]}));
        normalize(&mut r, &p, "qwen-plus", false);
        let roles: Vec<&str> = r.messages.iter().map(|m| m.role.as_str()).collect();
        assert_eq!(roles, ["system", "user", "assistant", "user"]);
        assert_eq!(r.messages[0].content, json!("You are Claude Code.\n\nReminder: be brief."));
    }

    #[test]
    fn rewrites_follow_profile_data() {
        let mut p = Profile::default();
        p.request.developer_role = Some("system".into());
        p.request.merge_system = true;
        p.request.flatten_text_parts = true;
        p.request.drop = vec!["frequency_penalty".into()];
        p.request.rename.insert("max_completion_tokens".into(), "max_tokens".into());
        p.request.clamp.insert("temperature".into(), [0.01, 1.0]);
        let mut r = req(json!({
            "model": "x", "frequency_penalty": 1, "max_completion_tokens": 9, "temperature": 1.7,
            "messages": [
                {"role": "developer", "content": "a"},
                {"role": "system", "content": [{"type": "text", "text": "b"}]},
                {"role": "user", "content": [{"type": "text", "text": "hi"}]}
            ]
        }));
        normalize(&mut r, &p, "up", false);
        let v = serde_json::to_value(&r).unwrap_or_default();
        assert_eq!(v["model"], "up");
        assert_eq!(v["messages"][0], json!({"role": "system", "content": "a\n\nb"}));
        assert_eq!(v["messages"][1]["content"], "hi");
        assert_eq!(v["max_tokens"], 9);
        assert_eq!(v["temperature"], 1.0);
        assert!(v.get("frequency_penalty").is_none() && v.get("max_completion_tokens").is_none());
    }

    #[test]
    fn thinking_switch_and_stream_only() {
        let mut p = Profile::default();
        p.thinking.style = ThinkingStyle::EnableThinking;
        p.thinking.stream_only = true;
        let mut r = req(json!({"model": "x", "messages": [], "reasoning_effort": "high"}));
        let plan = normalize(&mut r, &p, "m", false);
        assert!(plan.stream_upstream);
        assert_eq!(r.extra["enable_thinking"], true);
        assert!(!r.extra.contains_key("reasoning_effort"));
        let mut r = req(json!({"model": "x", "messages": [], "enable_thinking": false}));
        assert!(!normalize(&mut r, &p, "m", false).stream_upstream);
    }
}
