//! The reasoning round-trip. Thinking models (DeepSeek, Kimi, GLM, MiniMax)
//! want the reasoning of every earlier assistant turn that made tool calls
//! sent back with later requests, and most clients drop `reasoning_content`
//! when they rebuild the history. So the reasoning of each such turn is
//! remembered in the conversation-state store, keyed by its tool-call ids and
//! by a hash of the visible message, and put back — or stripped, for vendors
//! that reject it — as the profile says.

use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::openai::{ChatRequest, Message};
use crate::provider::{Profile, ReasoningReplay};
use crate::state::{StateStore, ns};
use crate::stream::normalize::Capture;

/// Remembers the reasoning of turns that made tool calls. Store failures are
/// logged: the answer was already delivered, and a later request degrades to
/// the profile's fallback.
pub async fn remember(store: &dyn StateStore, ttl: std::time::Duration, captures: &[Capture]) {
    for c in captures.iter().filter(|c| !c.reasoning.is_empty()) {
        let value = json!({ "reasoning": c.reasoning });
        let mut keys: Vec<String> = c.call_ids.iter().map(|id| format!("id:{id}")).collect();
        keys.push(format!("msg:{}", c.message_hash));
        for k in keys {
            if let Err(e) = store.put(ns::REASONING, &k, value.clone(), ttl).await {
                tracing::warn!(store = store.kind(), "cannot remember reasoning: {e}");
                return;
            }
        }
    }
}

/// A stable hash of a visible assistant turn: its text and its call ids.
fn message_hash(content: &str, ids: &[String]) -> String {
    let mut t = TurnHash::default();
    t.push(content);
    t.finish(ids)
}

/// [`message_hash`] fed as the turn's text streams in, so a stream keeps a
/// hash state instead of its whole text. The text is hashed trimmed: leading
/// whitespace is skipped and a run of trailing whitespace is held back until
/// more text follows it.
#[derive(Clone, Default)]
pub struct TurnHash {
    h: Sha256,
    started: bool,
    /// Whitespace after the last text hashed, hashed only if text follows.
    ws: String,
}

impl TurnHash {
    pub fn push(&mut self, mut text: &str) {
        if !self.started {
            text = text.trim_start();
            if text.is_empty() {
                return;
            }
            self.started = true;
        }
        let body = text.trim_end();
        if body.is_empty() {
            self.ws.push_str(text);
            return;
        }
        self.h.update(self.ws.as_bytes());
        self.ws.clear();
        self.h.update(body.as_bytes());
        self.ws.push_str(&text[body.len()..]);
    }

    /// The hash of the text so far with these call ids.
    pub fn finish(&self, ids: &[String]) -> String {
        let mut h = self.h.clone();
        for id in ids {
            h.update(b"\0");
            h.update(id.as_bytes());
        }
        h.finalize().iter().take(16).map(|b| format!("{b:02x}")).collect()
    }
}

fn call_ids(m: &Message) -> Vec<String> {
    m.extra
        .get("tool_calls")
        .and_then(Value::as_array)
        .map(|calls| calls.iter().filter_map(|c| c.get("id")?.as_str().map(str::to_string)).collect())
        .unwrap_or_default()
}

fn has_reasoning(m: &Message) -> bool {
    m.extra.get("reasoning_content").is_some_and(|r| r.as_str().is_some_and(|s| !s.is_empty()))
}

async fn lookup(store: &dyn StateStore, m: &Message, ids: &[String]) -> Option<String> {
    let content = m.content.as_str().unwrap_or("");
    let mut keys: Vec<String> = ids.iter().map(|id| format!("id:{id}")).collect();
    keys.push(format!("msg:{}", message_hash(content, ids)));
    for k in keys {
        match store.get(ns::REASONING, &k).await {
            Ok(Some(v)) => return v.get("reasoning").and_then(Value::as_str).map(str::to_string),
            Ok(None) => {}
            Err(e) => {
                tracing::warn!(store = store.kind(), "cannot read remembered reasoning: {e}");
                return None;
            }
        }
    }
    None
}

/// Restores or strips earlier turns' reasoning in the history, per profile.
pub async fn prepare_history(req: &mut ChatRequest, profile: &Profile, model: &str, store: &dyn StateStore) {
    let mode = profile.thinking.replay_for(model);
    match mode {
        ReasoningReplay::Keep => {}
        ReasoningReplay::Reject => {
            for m in req.messages.iter_mut().filter(|m| m.role == "assistant") {
                m.extra.remove("reasoning_content");
                m.extra.remove("reasoning");
            }
        }
        ReasoningReplay::Required | ReasoningReplay::ThinkInContent => {
            for (index, m) in req.messages.iter_mut().enumerate() {
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
                    restore_in_content(m, store, &ids, index).await;
                    continue;
                }
                if has_reasoning(m) {
                    continue;
                }
                match lookup(store, m, &ids).await {
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
async fn restore_in_content(m: &mut Message, store: &dyn StateStore, ids: &[String], index: usize) {
    let content = m.content.as_str().unwrap_or("").to_string();
    if content.contains("<think>") {
        return;
    }
    let reasoning = match m.extra.remove("reasoning_content") {
        Some(Value::String(r)) if !r.is_empty() => Some(r),
        _ => lookup(store, m, ids).await,
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

    fn req(v: Value) -> ChatRequest {
        serde_json::from_value(v).unwrap_or_else(|e| panic!("{e}"))
    }

    #[tokio::test]
    async fn restores_by_id_and_strips_on_reject() {
        let store = MemoryStore::new(100);
        let cap = Capture {
            call_ids: vec!["c1".into()],
            message_hash: message_hash("Let me look.", &["c1".into()]),
            reasoning: "R1".into(),
        };
        remember(&store, std::time::Duration::from_secs(60), &[cap]).await;
        let history = json!({"model": "m", "messages": [
            {"role": "user", "content": "q"},
            {"role": "assistant", "content": "Let me look.", "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "ok"},
            {"role": "assistant", "content": null, "tool_calls": [{"id": "c9", "type": "function", "function": {"name": "f", "arguments": "{}"}}]}
        ]});
        let mut p = Profile::default();
        p.thinking.reasoning_replay = ReasoningReplay::Required;
        let mut r = req(history.clone());
        prepare_history(&mut r, &p, "m", &store).await;
        assert_eq!(r.messages[1].extra["reasoning_content"], "R1");
        assert!(!r.messages[3].extra.contains_key("reasoning_content"));
        p.thinking.replay_empty_fallback = true;
        let mut r = req(history.clone());
        prepare_history(&mut r, &p, "m", &store).await;
        assert_eq!(r.messages[3].extra["reasoning_content"], "");

        p.thinking.reasoning_replay = ReasoningReplay::ThinkInContent;
        let mut r = req(history.clone());
        prepare_history(&mut r, &p, "m", &store).await;
        assert_eq!(r.messages[1].content, "<think>R1</think>\n\nLet me look.");

        p.thinking.reasoning_replay = ReasoningReplay::Reject;
        let mut h = history;
        h["messages"][1]["reasoning_content"] = json!("R1");
        let mut r = req(h);
        prepare_history(&mut r, &p, "m", &store).await;
        assert!(!r.messages[1].extra.contains_key("reasoning_content"));
    }

    proptest::proptest! {
        /// Fed in any pieces, the streamed hash is the hash of the trimmed
        /// whole text (the key a later request looks the turn up by).
        #[test]
        fn turn_hash_is_split_invariant(
            words in proptest::collection::vec("[ \t\n\u{3000}]{0,3}[a-z\u{4e2d}]{0,3}[ \n]{0,2}", 0..8),
            cuts in proptest::collection::vec(0usize..64, 0..6),
        ) {
            let text: String = words.concat();
            let ids = vec!["call_1".to_string(), "call_2".to_string()];
            let mut reference = Sha256::new();
            reference.update(text.trim().as_bytes());
            for id in &ids {
                reference.update(b"\0");
                reference.update(id.as_bytes());
            }
            let want: String = reference.finalize().iter().take(16).map(|b| format!("{b:02x}")).collect();
            let bounds: Vec<usize> = text.char_indices().map(|(i, _)| i).collect();
            let mut at: Vec<usize> = cuts.iter().filter_map(|c| bounds.get(c % bounds.len().max(1)).copied()).collect();
            at.sort_unstable();
            let mut t = TurnHash::default();
            let mut from = 0;
            for cut in at.into_iter().chain([text.len()]) {
                t.push(&text[from..cut.max(from)]);
                from = cut.max(from);
            }
            proptest::prop_assert_eq!(t.finish(&ids), want.clone());
            proptest::prop_assert_eq!(message_hash(&text, &ids), want);
        }
    }
}
