//! Transparency across turns: the hidden part of an assistant turn (server
//! tool calls, their results, the model's text between them) is stored under
//! a key derived from the assistant message the client saw, and put back in
//! its place when the client sends that message again.
//!
//! Key: the owner and the whole client-visible conversation up to and
//! including that message ([`Chain`]), so another key, or another
//! conversation ending in the same "Done.", never gets this one's hidden
//! calls and results.
//!
//! Value: `{"messages": [...], "after": [...]}` — `messages` replaces the
//! client's assistant message; `after` goes after the tool messages that
//! follow it (images returned in a mixed turn must come after the client's
//! own tool results, since tool messages have to follow their call at once).

use serde_json::{Value, json};

use crate::openai::Message;
use crate::state::conversation::Chain;
use crate::state::{StateStore, ns};

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
pub async fn apply(store: &dyn StateStore, owner: Option<&str>, messages: Vec<Message>) -> Vec<Message> {
    let mut found: Vec<Option<(Vec<Message>, Vec<Message>)>> = Vec::with_capacity(messages.len());
    let mut any = false;
    for (m, chain) in messages.iter().zip(Chain::each(owner, &messages)) {
        if m.role != "assistant" {
            found.push(None);
            continue;
        }
        let hit = match store.get(ns::SPLICE, &chain.key()).await {
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

    /// The key `save` is given for the answer to `history`.
    fn answer_key(owner: Option<&str>, history: &[Message], visible: &str, ids: &[String]) -> String {
        let mut c = Chain::each(owner, history).last().copied().unwrap_or_else(|| Chain::new(owner));
        c.push_assistant(visible, ids);
        c.key()
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
        let k = answer_key(Some("a"), std::slice::from_ref(&user), "Checking.", &["c1".into()]);
        save(&store, Duration::from_secs(60), &k, &hidden, &after).await;
        let client_result = msg(json!({"role": "tool", "tool_call_id": "c1", "content": "client result"}));
        let history = vec![user.clone(), visible, client_result, msg(json!({"role": "user", "content": "next"}))];
        let out = apply(&store, Some("a"), history).await;
        let roles: Vec<&str> = out.iter().map(|m| m.role.as_str()).collect();
        assert_eq!(roles, ["user", "assistant", "tool", "tool", "user", "user"]);
        assert_eq!(out[2].content, "server result");
        assert_eq!(out[3].content, "client result");
        assert_eq!(out[5].content, "next");
    }

    /// Issue 25, item 2: another key sending the same-looking turn, or the
    /// same key in another conversation, gets nothing spliced in.
    #[tokio::test]
    async fn another_owner_or_conversation_gets_nothing() {
        let store = MemoryStore::new(100);
        let ask = msg(json!({"role": "user", "content": "Summarize my notes."}));
        let hidden = vec![
            msg(json!({"role": "assistant", "content": null, "tool_calls": [
                {"id": "s1", "type": "function", "function": {"name": "read_file", "arguments": "{}"}}]})),
            msg(json!({"role": "tool", "tool_call_id": "s1", "content": "A's secret notes"})),
            msg(json!({"role": "assistant", "content": "Done."})),
        ];
        let k = answer_key(Some("team-a"), std::slice::from_ref(&ask), "Done.", &[]);
        save(&store, Duration::from_secs(60), &k, &hidden, &[]).await;
        let replay = |system: Option<&str>| {
            let mut h: Vec<Message> =
                system.map(|s| msg(json!({"role": "system", "content": s}))).into_iter().collect();
            h.push(ask.clone());
            h.push(msg(json!({"role": "assistant", "content": "Done."})));
            h.push(msg(json!({"role": "user", "content": "more"})));
            h
        };
        let leaked = |out: &[Message]| out.iter().any(|m| m.content == "A's secret notes");
        assert!(leaked(&apply(&store, Some("team-a"), replay(None)).await));
        assert!(!leaked(&apply(&store, Some("team-b"), replay(None)).await));
        assert!(!leaked(&apply(&store, None, replay(None)).await));
        assert!(!leaked(&apply(&store, Some("team-a"), replay(Some("Another bot."))).await));
    }
}
