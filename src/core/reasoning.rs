//! The reasoning round-trip. Thinking models (DeepSeek, Kimi, GLM, MiniMax)
//! want the reasoning of every earlier assistant turn that made tool calls
//! sent back with later requests, and most clients drop `reasoning_content`
//! when they rebuild the history. So the reasoning of each such turn is
//! remembered in the conversation-state store under the key of that turn in
//! its owner's conversation ([`Chain`]: owner plus every message up to and
//! including the turn), and put back — or stripped, for vendors that reject
//! it — as the profile says. A call id alone never finds reasoning: ids are
//! guessable (`functions.f:0`) and another key may reuse them.

use serde_json::{Value, json};

use crate::openai::{ChatRequest, Message};
use crate::provider::{Profile, ReasoningReplay};
use crate::state::conversation::{Chain, call_ids};
use crate::state::{StateStore, ns};
use crate::stream::normalize::Capture;

/// Remembers the reasoning of turns that made tool calls, each the answer
/// to `conversation`. Store failures are logged: the answer was already
/// delivered, and a later request degrades to the profile's fallback.
pub async fn remember(store: &dyn StateStore, ttl: std::time::Duration, conversation: &Chain, captures: &[Capture]) {
    for c in captures.iter().filter(|c| !c.reasoning.is_empty()) {
        let mut turn = *conversation;
        turn.push_turn(&c.turn, &c.call_ids);
        remember_turn(store, ttl, &turn, &c.reasoning).await;
    }
}

/// Remembers one turn's reasoning under the turn's own key.
pub async fn remember_turn(store: &dyn StateStore, ttl: std::time::Duration, turn: &Chain, reasoning: &str) {
    if reasoning.is_empty() {
        return;
    }
    if let Err(e) = store.put(ns::REASONING, &turn.key(), json!({ "reasoning": reasoning }), ttl).await {
        tracing::warn!(store = store.kind(), "cannot remember reasoning: {e}");
    }
}

fn has_reasoning(m: &Message) -> bool {
    m.extra.get("reasoning_content").is_some_and(|r| r.as_str().is_some_and(|s| !s.is_empty()))
}

async fn lookup(store: &dyn StateStore, turn: &Chain) -> Option<String> {
    match store.get(ns::REASONING, &turn.key()).await {
        Ok(Some(v)) => v.get("reasoning").and_then(Value::as_str).map(str::to_string),
        Ok(None) => None,
        Err(e) => {
            tracing::warn!(store = store.kind(), "cannot read remembered reasoning: {e}");
            None
        }
    }
}

/// Restores or strips earlier turns' reasoning in the history, per profile.
/// For a profile that replays reasoning, returns the conversation as it
/// stood before this call changed it: the answer's turns are remembered as
/// its continuation.
pub async fn prepare_history(
    req: &mut ChatRequest,
    profile: &Profile,
    model: &str,
    store: &dyn StateStore,
    owner: Option<&str>,
) -> Option<Chain> {
    let mode = profile.thinking.replay_for(model);
    match mode {
        ReasoningReplay::Keep => None,
        ReasoningReplay::Reject => {
            for m in req.messages.iter_mut().filter(|m| m.role == "assistant") {
                m.extra.remove("reasoning_content");
                m.extra.remove("reasoning");
            }
            None
        }
        ReasoningReplay::Required | ReasoningReplay::ThinkInContent => {
            let chains = Chain::each(owner, &req.messages);
            let whole = chains.last().copied().unwrap_or_else(|| Chain::new(owner));
            for (index, (m, turn)) in req.messages.iter_mut().zip(&chains).enumerate() {
                if m.role != "assistant" {
                    continue;
                }
                let ids = call_ids(m);
                if ids.is_empty() {
                    continue;
                }
                // `reasoning` (vLLM's name) counts as the client keeping it.
                if let Some(Value::String(r)) = m.extra.remove("reasoning") {
                    m.extra.entry("reasoning_content").or_insert(Value::String(r));
                }
                if mode == ReasoningReplay::ThinkInContent {
                    restore_in_content(m, store, turn, index).await;
                    continue;
                }
                if has_reasoning(m) {
                    continue;
                }
                match lookup(store, turn).await {
                    Some(r) => attach(m, &r, mode),
                    None if profile.thinking.replay_empty_fallback => {
                        tracing::info!(index, "no remembered reasoning for this tool-call turn; sending an empty one");
                        m.extra.insert("reasoning_content".into(), Value::String(String::new()));
                    }
                    None => tracing::warn!(
                        index,
                        "no remembered reasoning for this tool-call turn; the upstream may reject it"
                    ),
                }
            }
            Some(whole)
        }
    }
}

/// Puts a turn's reasoning on an assistant message the way `mode` wants it;
/// nothing for modes that do not replay it, or for empty reasoning.
pub fn attach(m: &mut Message, reasoning: &str, mode: ReasoningReplay) {
    if reasoning.is_empty() {
        return;
    }
    match mode {
        ReasoningReplay::Required => {
            m.extra.insert("reasoning_content".into(), Value::String(reasoning.to_string()));
        }
        ReasoningReplay::ThinkInContent => {
            let content = m.content.as_str().unwrap_or("");
            m.content = Value::String(format!("<think>{reasoning}</think>\n\n{content}"));
        }
        ReasoningReplay::Keep | ReasoningReplay::Reject => {}
    }
}

/// MiniMax-style interleaved thinking: the `<think>` block goes back at the
/// start of the content.
async fn restore_in_content(m: &mut Message, store: &dyn StateStore, turn: &Chain, index: usize) {
    let content = m.content.as_str().unwrap_or("").to_string();
    if content.contains("<think>") {
        return;
    }
    let reasoning = match m.extra.remove("reasoning_content") {
        Some(Value::String(r)) if !r.is_empty() => Some(r),
        _ => lookup(store, turn).await,
    };
    match reasoning {
        Some(r) => attach(m, &r, ReasoningReplay::ThinkInContent),
        None => tracing::warn!(index, "no remembered reasoning to put back into this turn's content"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::MemoryStore;
    use crate::state::conversation::TurnHash;

    fn req(v: Value) -> ChatRequest {
        serde_json::from_value(v).unwrap_or_else(|e| panic!("{e}"))
    }

    fn capture(text: &str, ids: &[&str], reasoning: &str) -> Capture {
        let mut turn = TurnHash::default();
        turn.push(text);
        Capture { call_ids: ids.iter().map(|s| s.to_string()).collect(), turn, reasoning: reasoning.into() }
    }

    fn call(id: &str) -> Value {
        json!([{"id": id, "type": "function", "function": {"name": "f", "arguments": "{}"}}])
    }

    #[tokio::test]
    async fn restores_by_conversation_and_strips_on_reject() {
        let store = MemoryStore::new(100);
        let mut p = Profile::default();
        p.thinking.reasoning_replay = ReasoningReplay::Required;
        let first = json!({"model": "m", "messages": [{"role": "user", "content": "q"}]});
        let conv = prepare_history(&mut req(first), &p, "m", &store, Some("k")).await;
        let conv = conv.unwrap_or_else(|| panic!("a replaying profile returns the conversation"));
        remember(&store, std::time::Duration::from_secs(60), &conv, &[capture("Let me look.", &["c1"], "R1")]).await;
        let history = json!({"model": "m", "messages": [
            {"role": "user", "content": "q"},
            {"role": "assistant", "content": "Let me look.", "tool_calls": call("c1")},
            {"role": "tool", "tool_call_id": "c1", "content": "ok"},
            {"role": "assistant", "content": null, "tool_calls": call("c9")}
        ]});
        let mut r = req(history.clone());
        prepare_history(&mut r, &p, "m", &store, Some("k")).await;
        assert_eq!(r.messages[1].extra["reasoning_content"], "R1");
        assert!(!r.messages[3].extra.contains_key("reasoning_content"));
        p.thinking.replay_empty_fallback = true;
        let mut r = req(history.clone());
        prepare_history(&mut r, &p, "m", &store, Some("k")).await;
        assert_eq!(r.messages[3].extra["reasoning_content"], "");

        p.thinking.reasoning_replay = ReasoningReplay::ThinkInContent;
        let mut r = req(history.clone());
        prepare_history(&mut r, &p, "m", &store, Some("k")).await;
        assert_eq!(r.messages[1].content, "<think>R1</think>\n\nLet me look.");

        p.thinking.reasoning_replay = ReasoningReplay::Reject;
        let mut h = history;
        h["messages"][1]["reasoning_content"] = json!("R1");
        let mut r = req(h);
        prepare_history(&mut r, &p, "m", &store, Some("k")).await;
        assert!(!r.messages[1].extra.contains_key("reasoning_content"));
    }

    /// Issue 25, item 2: another key, another conversation, or a reused
    /// call id never gets the reasoning back.
    #[tokio::test]
    async fn reasoning_stays_with_its_owner_and_conversation() {
        let store = MemoryStore::new(100);
        let mut p = Profile::default();
        p.thinking.reasoning_replay = ReasoningReplay::Required;
        let first = json!({"model": "m", "messages": [{"role": "user", "content": "q"}]});
        let conv = prepare_history(&mut req(first), &p, "m", &store, Some("a")).await;
        let conv = conv.unwrap_or_else(|| panic!("a replaying profile returns the conversation"));
        let ttl = std::time::Duration::from_secs(60);
        remember(&store, ttl, &conv, &[capture("", &["functions.f:0"], "A's private reasoning")]).await;
        let turn = |system: bool| {
            let mut ms = vec![];
            if system {
                ms.push(json!({"role": "system", "content": "B"}));
            }
            ms.extend([
                json!({"role": "user", "content": "q"}),
                json!({"role": "assistant", "content": null, "tool_calls": call("functions.f:0")}),
                json!({"role": "tool", "tool_call_id": "functions.f:0", "content": "ok"}),
            ]);
            json!({"model": "m", "messages": ms})
        };
        let got = |owner: Option<&'static str>, system: bool| {
            let store = &store;
            let p = &p;
            async move {
                let mut r = req(turn(system));
                prepare_history(&mut r, p, "m", store, owner).await;
                r.messages.iter().find_map(|m| m.extra.get("reasoning_content").cloned())
            }
        };
        assert_eq!(got(Some("a"), false).await, Some(json!("A's private reasoning")));
        assert_eq!(got(Some("b"), false).await, None);
        assert_eq!(got(None, false).await, None);
        assert_eq!(got(Some("a"), true).await, None);
    }
}
