//! Transparency across turns: the hidden part of an assistant turn (server
//! tool calls, their results, the model's text between them) is stored under
//! a key derived from the assistant message the client saw, and put back in
//! its place when the client sends that message again.
//!
//! Key: for a message with tool calls, its call ids (unique per turn) and
//! its content; for a text-only message, its content and the message before
//! it (so a short answer like "Done." in two conversations does not collide).
//! Contents are compared trimmed, and `null` equals `""`, because SDKs
//! round-trip them slightly differently.
//!
//! Value: `{"messages": [...], "after": [...]}` — `messages` replaces the
//! client's assistant message; `after` goes after the tool messages that
//! follow it (images returned in a mixed turn must come after the client's
//! own tool results, since tool messages have to follow their call at once).

use sha2::{Digest, Sha256};

use serde_json::{Value, json};

use crate::openai::Message;
use crate::state::{StateStore, ns};

/// The text of a message's content (string or text parts).
fn text_of(content: &Value) -> String {
    match content {
        Value::String(s) => s.trim().to_string(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join("")
            .trim()
            .to_string(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

/// The splice key of a client-visible assistant message.
pub fn key(prev: Option<&Message>, assistant_content: &Value, call_ids: &[String]) -> String {
    let mut h = Sha256::new();
    h.update(b"splice-v1\0");
    h.update(text_of(assistant_content).as_bytes());
    h.update(b"\0");
    if call_ids.is_empty() {
        if let Some(p) = prev {
            h.update(p.role.as_bytes());
            h.update(b"\0");
            h.update(text_of(&p.content).as_bytes());
        }
    } else {
        for id in call_ids {
            h.update(id.as_bytes());
            h.update(b"\0");
        }
    }
    h.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

/// The tool-call ids of a message.
pub fn call_ids(m: &Message) -> Vec<String> {
    m.extra
        .get("tool_calls")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|c| c.get("id").and_then(Value::as_str).map(str::to_string))
        .collect()
}

/// Stores the hidden exchange of a turn.
pub async fn save(
    store: &dyn StateStore,
    ttl: std::time::Duration,
    key: &str,
    messages: &[Message],
    after: &[Message],
) {
    let value = json!({"messages": messages, "after": after});
    if let Err(e) = store.put(ns::SPLICE, key, value, ttl).await {
        tracing::warn!("cannot store the hidden tool exchange ({}): {e}", store.kind());
    }
}

/// The history with every known hidden exchange put back. A store failure
/// leaves the history as the client sent it.
pub async fn apply(store: &dyn StateStore, messages: Vec<Message>) -> Vec<Message> {
    let mut found: Vec<Option<(Vec<Message>, Vec<Message>)>> = Vec::with_capacity(messages.len());
    let mut any = false;
    for (i, m) in messages.iter().enumerate() {
        if m.role != "assistant" {
            found.push(None);
            continue;
        }
        let k = key(i.checked_sub(1).map(|p| &messages[p]), &m.content, &call_ids(m));
        let hit = match store.get(ns::SPLICE, &k).await {
            Ok(Some(v)) => parse(&v),
            Ok(None) => None,
            Err(e) => {
                tracing::warn!("cannot read the splice store ({}): {e}", store.kind());
                None
            }
        };
        any |= hit.is_some();
        found.push(hit);
    }
    if !any {
        return messages;
    }
    let mut out = Vec::with_capacity(messages.len() + 8);
    let mut pending_after: Vec<Message> = Vec::new();
    for (m, hit) in messages.into_iter().zip(found) {
        if m.role != "tool" && !pending_after.is_empty() {
            out.append(&mut pending_after);
        }
        match hit {
            Some((replacement, after)) => {
                out.extend(replacement);
                pending_after = after;
            }
            None => out.push(m),
        }
    }
    out.append(&mut pending_after);
    out
}

fn parse(v: &Value) -> Option<(Vec<Message>, Vec<Message>)> {
    let messages: Vec<Message> = serde_json::from_value(v.get("messages")?.clone()).ok()?;
    let after: Vec<Message> = v.get("after").and_then(|a| serde_json::from_value(a.clone()).ok()).unwrap_or_default();
    (!messages.is_empty()).then_some((messages, after))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::MemoryStore;
    use std::time::Duration;

    fn msg(v: Value) -> Message {
        serde_json::from_value(v).unwrap()
    }

    #[tokio::test]
    async fn replaces_the_visible_turn_and_places_after_messages() {
        let store = MemoryStore::new(100);
        let user = msg(json!({"role": "user", "content": "hi"}));
        let visible = msg(json!({"role": "assistant", "content": "Checking.", "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "client_tool", "arguments": "{}"}}]}));
        let hidden = vec![
            msg(json!({"role": "assistant", "content": "Checking.", "tool_calls": [
                {"id": "s1", "type": "function", "function": {"name": "srv", "arguments": "{}"}},
                {"id": "c1", "type": "function", "function": {"name": "client_tool", "arguments": "{}"}}]})),
            msg(json!({"role": "tool", "tool_call_id": "s1", "content": "server result"})),
        ];
        let after = vec![msg(json!({"role": "user", "content": [{"type": "text", "text": "images"}]}))];
        let k = key(Some(&user), &visible.content, &call_ids(&visible));
        save(&store, Duration::from_secs(60), &k, &hidden, &after).await;
        let client_result = msg(json!({"role": "tool", "tool_call_id": "c1", "content": "client result"}));
        let history = vec![user.clone(), visible, client_result, msg(json!({"role": "user", "content": "next"}))];
        let out = apply(&store, history).await;
        let roles: Vec<&str> = out.iter().map(|m| m.role.as_str()).collect();
        assert_eq!(roles, ["user", "assistant", "tool", "tool", "user", "user"]);
        assert_eq!(out[2].content, "server result");
        assert_eq!(out[3].content, "client result");
        assert_eq!(out[5].content, "next");
    }

    #[test]
    fn keys_tolerate_sdk_round_trips() {
        let u1 = msg(json!({"role": "user", "content": "a"}));
        let u2 = msg(json!({"role": "user", "content": [{"type": "text", "text": "a"}]}));
        assert_eq!(key(Some(&u1), &json!("Done. "), &[]), key(Some(&u2), &json!("Done."), &[]));
        assert_ne!(key(Some(&u1), &json!("Done."), &[]), key(None, &json!("Done."), &[]));
        assert_eq!(key(None, &Value::Null, &["x".into()]), key(Some(&u1), &json!(""), &["x".into()]));
    }
}
