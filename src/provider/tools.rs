//! Tool downgrades for upstreams with native tools, driven by the profile's `[tools]`:
//! `strict` and unsupported schema keywords stripped, extra function fields
//! dropped, `tool_choice` degraded, tool names the vendor rejects renamed
//! (and the map back for answers), turn-scoped duplicate call ids made
//! unique, and ids mapped to a vendor's fixed id shape. Every rewrite of the
//! history is a pure function of the history, so each turn maps the same way.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};

use regex::Regex;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use super::profile::ToolQuirks;
use crate::openai::{ChatRequest, Message};

/// Upstream tool name → the client's, for answers.
pub type NamesBack = BTreeMap<String, String>;

/// Applies every native-tools downgrade the profile asks for; returns the
/// names to map back in the answer.
pub fn downgrade(req: &mut ChatRequest, t: &ToolQuirks) -> NamesBack {
    if t.drop_parallel_tool_calls {
        req.extra.remove("parallel_tool_calls");
    }
    for tool in req.tools.iter_mut().flatten() {
        let Some(f) = tool.get_mut("function").and_then(Value::as_object_mut) else {
            continue;
        };
        if t.strip_strict {
            f.remove("strict");
        }
        for k in &t.drop_function_fields {
            f.remove(k);
        }
        if !t.strip_schema_keywords.is_empty()
            && let Some(p) = f.get_mut("parameters")
        {
            strip_keywords(p, &t.strip_schema_keywords);
        }
    }
    if t.tool_choice_auto_only {
        auto_only_choice(req);
    }
    let names = NameRule::from_quirks(t).map(|r| rename_tools(req, &r)).unwrap_or_default();
    if t.dedupe_call_ids {
        dedupe_ids(&mut req.messages);
    }
    if t.call_id_alnum9 {
        map_ids(&mut req.messages, alnum9);
    }
    names
}

/// Keys whose value maps names to schemas (not keywords to values).
const NAME_MAPS: &[&str] = &["properties", "patternProperties", "$defs", "definitions", "dependentSchemas"];

/// Removes `keywords` from a schema at any depth, leaving property names alone.
pub fn strip_keywords(schema: &mut Value, keywords: &[String]) {
    match schema {
        Value::Object(o) => {
            o.retain(|k, _| !keywords.iter().any(|w| w == k));
            for (k, v) in o.iter_mut() {
                match (NAME_MAPS.contains(&k.as_str()), v) {
                    (true, Value::Object(props)) => props.values_mut().for_each(|s| strip_keywords(s, keywords)),
                    (_, v) => strip_keywords(v, keywords),
                }
            }
        }
        Value::Array(a) => a.iter_mut().for_each(|s| strip_keywords(s, keywords)),
        _ => {}
    }
}

/// `tool_choice` for vendors that take only `auto`: `none` drops the tools,
/// forced choices become `auto` plus an instruction.
fn auto_only_choice(req: &mut ChatRequest) {
    match req.extra.get("tool_choice").cloned() {
        Some(Value::String(s)) if s == "none" => {
            req.tools = None;
            req.extra.remove("tool_choice");
        }
        Some(Value::String(s)) if s == "required" => {
            req.extra.insert("tool_choice".into(), json!("auto"));
            super::messages::append_system(&mut req.messages, "You must call one of the provided tools in this reply.");
        }
        Some(Value::Object(o)) => {
            let name = o.get("function").and_then(|f| f.get("name")).and_then(Value::as_str).unwrap_or("");
            req.extra.insert("tool_choice".into(), json!("auto"));
            super::messages::append_system(
                &mut req.messages,
                &format!("You must call the tool `{name}` in this reply."),
            );
        }
        _ => {}
    }
}

/// A vendor's tool-name rule.
pub struct NameRule {
    chars: Option<Regex>,
    max_len: Option<usize>,
}

impl NameRule {
    /// The rule from profile data; `None` when the profile sets none. A bad
    /// `name_chars` regex is reported at config time (see `Providers::resolve`).
    pub fn from_quirks(t: &ToolQuirks) -> Option<Self> {
        if t.name_chars.is_none() && t.name_max_len.is_none() {
            return None;
        }
        let chars = t.name_chars.as_deref().and_then(|c| Regex::new(&format!("^(?:{c})$")).ok());
        Some(NameRule { chars, max_len: t.name_max_len })
    }

    fn char_ok(&self, c: char) -> bool {
        let mut buf = [0u8; 4];
        self.chars.as_ref().is_none_or(|r| r.is_match(c.encode_utf8(&mut buf)))
    }

    /// The upstream spelling of `name`: unchanged when it obeys the rule,
    /// else a deterministic rename (bad characters as `_`, truncated, plus
    /// a hash of the original so distinct names stay distinct).
    pub fn upstream_name(&self, name: &str) -> String {
        let too_long = self.max_len.is_some_and(|m| name.len() > m);
        if !too_long && name.chars().all(|c| self.char_ok(c)) {
            return name.to_string();
        }
        let hash = hex6(name);
        let clean: String = name.chars().map(|c| if self.char_ok(c) { c } else { '_' }).collect();
        let keep = self.max_len.map_or(clean.len(), |m| m.saturating_sub(hash.len() + 1));
        let mut head = clean;
        while head.len() > keep {
            head.pop();
        }
        // The suffix uses `_` and hex digits, which any name rule allows.
        format!("{head}_{hash}")
    }
}

fn hex6(s: &str) -> String {
    Sha256::digest(s.as_bytes()).iter().take(3).map(|b| format!("{b:02x}")).collect()
}

/// Renames tools, the named `tool_choice` and earlier calls in the history.
fn rename_tools(req: &mut ChatRequest, rule: &NameRule) -> NamesBack {
    let mut back = NamesBack::new();
    let mut rename = |slot: &mut Value| {
        if let Some(n) = slot.as_str() {
            let up = rule.upstream_name(n);
            if up != n {
                back.insert(up.clone(), n.to_string());
                *slot = Value::String(up);
            }
        }
    };
    for tool in req.tools.iter_mut().flatten() {
        if let Some(n) = tool.pointer_mut("/function/name") {
            rename(n);
        }
    }
    if let Some(n) = req.extra.get_mut("tool_choice").and_then(|c| c.pointer_mut("/function/name")) {
        rename(n);
    }
    for m in &mut req.messages {
        for call in calls_mut(m) {
            if let Some(n) = call.pointer_mut("/function/name") {
                rename(n);
            }
        }
        if m.role == "tool"
            && let Some(n) = m.extra.get_mut("name")
        {
            rename(n);
        }
    }
    back
}

fn calls_mut(m: &mut Message) -> impl Iterator<Item = &mut Value> {
    m.extra.get_mut("tool_calls").and_then(Value::as_array_mut).into_iter().flatten()
}

/// Later duplicates of a call id get `<id>-<n>` (n counts earlier uses); the
/// first occurrence is sent byte for byte. A `tool` message follows the call
/// it answers: the latest assistant message's calls, in order.
fn dedupe_ids(messages: &mut [Message]) {
    let mut seen: HashSet<String> = HashSet::new();
    let mut uses: HashMap<String, usize> = HashMap::new();
    // For the latest assistant message: original id → ids to hand out in order.
    let mut pending: HashMap<String, VecDeque<String>> = HashMap::new();
    for m in messages.iter_mut() {
        if m.role == "assistant" {
            pending.clear();
            for call in calls_mut(m) {
                let Some(id) = call.get("id").and_then(Value::as_str).map(str::to_string) else {
                    continue;
                };
                let n = uses.entry(id.clone()).or_default();
                *n += 1;
                let mut new = id.clone();
                if *n > 1 {
                    new = format!("{id}-{n}");
                    while seen.contains(&new) {
                        *n += 1;
                        new = format!("{id}-{n}");
                    }
                    call["id"] = Value::String(new.clone());
                }
                seen.insert(new.clone());
                pending.entry(id).or_default().push_back(new);
            }
        } else if m.role == "tool"
            && let Some(Value::String(id)) = m.extra.get_mut("tool_call_id")
            && let Some(q) = pending.get_mut(id.as_str())
        {
            let new = if q.len() > 1 { q.pop_front() } else { q.front().cloned() };
            if let Some(new) = new {
                *id = new;
            }
        }
    }
}

/// Applies an id mapping to every call id and `tool_call_id` in the history.
fn map_ids(messages: &mut [Message], f: fn(&str) -> String) {
    for m in messages.iter_mut() {
        for call in calls_mut(m) {
            if let Some(Value::String(id)) = call.get_mut("id") {
                *id = f(id);
            }
        }
        if let Some(Value::String(id)) = m.extra.get_mut("tool_call_id") {
            *id = f(id);
        }
    }
}

/// A 9-character alphanumeric id: kept when it already is one, else derived
/// from a hash of the id (so the call and its result map alike, every turn).
pub fn alnum9(id: &str) -> String {
    if id.len() == 9 && id.bytes().all(|b| b.is_ascii_alphanumeric()) {
        return id.to_string();
    }
    const ALPHABET: &[u8] = b"0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ";
    let digest = Sha256::digest(id.as_bytes());
    digest.iter().take(9).map(|b| ALPHABET[*b as usize % ALPHABET.len()] as char).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msgs(v: Value) -> Vec<Message> {
        serde_json::from_value(v).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn keywords_are_stripped_but_property_names_kept() {
        let mut s = json!({"type": "object", "additionalProperties": false, "properties": {
            "format": {"type": "string", "format": "date"},
            "items": {"type": "array", "items": {"type": "string", "format": "uri"}}}});
        strip_keywords(&mut s, &["format".into(), "additionalProperties".into()]);
        assert_eq!(
            s,
            json!({"type": "object", "properties": {"format": {"type": "string"},
                "items": {"type": "array", "items": {"type": "string"}}}})
        );
    }

    #[test]
    fn names_are_renamed_deterministically() {
        let r = NameRule { chars: Regex::new("^(?:[A-Za-z0-9_-])$").ok(), max_len: Some(16) };
        assert_eq!(r.upstream_name("get_weather"), "get_weather");
        let a = r.upstream_name("files.read");
        assert_eq!(a, r.upstream_name("files.read"));
        assert!(a.starts_with("files_rea") && a.len() == 16, "{a}");
        let long = r.upstream_name("a_very_long_tool_name_indeed");
        assert_eq!(long.len(), 16);
        assert_ne!(long, r.upstream_name("a_very_long_tool_name_indeed2"));
    }

    #[test]
    fn duplicates_rewritten_after_the_first() {
        let mut m = msgs(json!([
            {"role": "assistant", "content": null, "tool_calls": [{"id": "f:0"}, {"id": "f:0"}]},
            {"role": "tool", "tool_call_id": "f:0", "content": "a"},
            {"role": "tool", "tool_call_id": "f:0", "content": "b"},
            {"role": "assistant", "content": null, "tool_calls": [{"id": "f:0"}]},
            {"role": "tool", "tool_call_id": "f:0", "content": "c"}
        ]));
        dedupe_ids(&mut m);
        let ids: Vec<Value> = m
            .iter()
            .map(|m| m.extra.get("tool_call_id").cloned().unwrap_or_else(|| m.extra["tool_calls"].clone()))
            .collect();
        assert_eq!(
            ids,
            vec![
                json!([{"id": "f:0"}, {"id": "f:0-2"}]),
                json!("f:0"),
                json!("f:0-2"),
                json!([{"id": "f:0-3"}]),
                json!("f:0-3")
            ]
        );
    }

    #[test]
    fn alnum9_is_stable() {
        assert_eq!(alnum9("abcDEF123"), "abcDEF123");
        let a = alnum9("call_0123456789abcdef");
        assert_eq!(a.len(), 9);
        assert!(a.bytes().all(|b| b.is_ascii_alphanumeric()));
        assert_eq!(a, alnum9("call_0123456789abcdef"));
        assert_ne!(a, alnum9("functions.f:0"));
    }
}
