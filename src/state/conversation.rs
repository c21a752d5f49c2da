//! The keys of conversation state. A key belongs to one owner (the proxy
//! key, or the one anonymous owner with auth off) and names one message by
//! the whole conversation up to and including it: system message, every
//! earlier message, then the message itself. So another key, or another
//! conversation that happens to end in the same few messages, never reaches
//! a state it did not make, while the owner's next turn — on any replica —
//! computes the same key from the history it sends back.
//!
//! Messages are folded in a canonical form that survives SDK round-trips:
//! the role, the text (trimmed; text parts joined; `null` is `""`), image
//! URLs, call ids and the id a tool result answers. Reasoning and argument
//! spelling are left out: clients drop the one and re-serialize the other.

use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::openai::Message;

/// The running hash of a conversation, seeded with its owner.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Chain([u8; 32]);

impl Chain {
    /// An empty conversation of `owner` (`None`: auth off).
    pub fn new(owner: Option<&str>) -> Self {
        let mut h = Sha256::new();
        h.update(b"modelshim-conversation-v2\0");
        match owner {
            Some(k) => {
                h.update(b"key\0");
                h.update(k.as_bytes());
            }
            None => h.update(b"anonymous"),
        }
        Chain(h.finalize().into())
    }

    /// The conversation with `m` after it.
    pub fn push(&mut self, m: &Message) {
        let digest =
            if m.role == "assistant" { assistant_digest(&text_of(&m.content), &call_ids(m)) } else { other_digest(m) };
        self.fold(&m.role, &digest);
    }

    /// The conversation with a visible assistant turn after it, by its
    /// [`TurnHash`] (what a stream keeps instead of the turn's text).
    pub fn push_turn(&mut self, turn: &TurnHash, call_ids: &[String]) {
        self.fold("assistant", &turn.digest(call_ids));
    }

    /// The conversation with an assistant message of this text and these
    /// call ids after it.
    pub fn push_assistant(&mut self, text: &str, call_ids: &[String]) {
        self.fold("assistant", &assistant_digest(text.trim(), call_ids));
    }

    fn fold(&mut self, role: &str, digest: &[u8; 32]) {
        let mut h = Sha256::new();
        h.update(self.0);
        h.update(role.as_bytes());
        h.update(b"\0");
        h.update(digest);
        self.0 = h.finalize().into();
    }

    /// The state key of the conversation so far (of its last message).
    pub fn key(&self) -> String {
        let mut s = String::with_capacity(64);
        for b in self.0 {
            s.push(char::from(HEX[usize::from(b >> 4)]));
            s.push(char::from(HEX[usize::from(b & 15)]));
        }
        s
    }

    /// The chain after each message: `out[i]` names `messages[i]`.
    pub fn each(owner: Option<&str>, messages: &[Message]) -> Vec<Chain> {
        let mut c = Chain::new(owner);
        messages
            .iter()
            .map(|m| {
                c.push(m);
                c
            })
            .collect()
    }
}

const HEX: &[u8; 16] = b"0123456789abcdef";

/// The text of a message's content (string or text parts), trimmed.
pub fn text_of(content: &Value) -> String {
    match content {
        Value::String(s) => s.trim().to_string(),
        Value::Array(parts) => {
            parts.iter().filter_map(|p| p.get("text").and_then(Value::as_str)).collect::<String>().trim().to_string()
        }
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

/// The tool-call ids of a message, in order.
pub fn call_ids(m: &Message) -> Vec<String> {
    m.extra
        .get("tool_calls")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|c| c.get("id").and_then(Value::as_str).map(str::to_string))
        .collect()
}

fn assistant_digest(text: &str, ids: &[String]) -> [u8; 32] {
    let mut t = TurnHash::default();
    t.push(text);
    t.digest(ids)
}

fn other_digest(m: &Message) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update(text_of(&m.content).as_bytes());
    if let Value::Array(parts) = &m.content {
        for url in parts.iter().filter_map(|p| p.pointer("/image_url/url").and_then(Value::as_str)) {
            h.update(b"\0image\0");
            h.update(url.as_bytes());
        }
    }
    if let Some(id) = m.extra.get("tool_call_id").and_then(Value::as_str) {
        h.update(b"\0answers\0");
        h.update(id.as_bytes());
    }
    h.finalize().into()
}

/// Trailing whitespace a [`TurnHash`] holds back at most.
const MAX_HELD_WS: usize = 64 << 10;

/// The digest of a visible assistant turn, fed as its text streams in, so a
/// stream keeps a hash state instead of its whole text. The text is hashed
/// trimmed: leading whitespace is skipped and a run of trailing whitespace
/// is held back until more text follows it.
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
            // Bounded: a stream of nothing but whitespace is hashed as it
            // goes (such a turn's key may then miss; its memory may not grow).
            if self.ws.len() > MAX_HELD_WS {
                self.h.update(self.ws.as_bytes());
                self.ws.clear();
            }
            return;
        }
        self.h.update(self.ws.as_bytes());
        self.ws.clear();
        self.h.update(body.as_bytes());
        self.ws.push_str(&text[body.len()..]);
    }

    /// The digest of the text so far with these call ids.
    pub fn digest(&self, ids: &[String]) -> [u8; 32] {
        let mut h = self.h.clone();
        for id in ids {
            h.update(b"\0");
            h.update(id.as_bytes());
        }
        h.finalize().into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn msg(v: Value) -> Message {
        serde_json::from_value(v).unwrap_or_else(|e| panic!("{e}"))
    }

    fn key_of(owner: Option<&str>, ms: &[Value]) -> String {
        let ms: Vec<Message> = ms.iter().cloned().map(msg).collect();
        Chain::each(owner, &ms).last().map(Chain::key).unwrap_or_default()
    }

    #[test]
    fn a_key_names_owner_and_whole_conversation() {
        let conv = [
            json!({"role": "user", "content": "Summarize my notes."}),
            json!({"role": "assistant", "content": "Done."}),
        ];
        let a = key_of(Some("team-a"), &conv);
        assert_eq!(a, key_of(Some("team-a"), &conv));
        assert_ne!(a, key_of(Some("team-b"), &conv));
        assert_ne!(a, key_of(None, &conv));
        let mut with_system = vec![json!({"role": "system", "content": "You are B's bot."})];
        with_system.extend(conv.iter().cloned());
        assert_ne!(a, key_of(Some("team-a"), &with_system));
        let mut longer =
            vec![json!({"role": "user", "content": "hi"}), json!({"role": "assistant", "content": "hello"})];
        longer.extend(conv.iter().cloned());
        assert_ne!(a, key_of(Some("team-a"), &longer));
    }

    #[test]
    fn keys_survive_sdk_round_trips() {
        let one = [
            json!({"role": "user", "content": "a"}),
            json!({"role": "assistant", "content": "Done. ", "reasoning_content": "r"}),
        ];
        let two = [
            json!({"role": "user", "content": [{"type": "text", "text": "a"}]}),
            json!({"role": "assistant", "content": "Done."}),
        ];
        assert_eq!(key_of(None, &one), key_of(None, &two));
        let calls = |args: &str| {
            json!({"role": "assistant", "content": null,
                   "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": args}}]})
        };
        assert_eq!(key_of(None, &[calls("{\"a\":1}")]), key_of(None, &[calls("{\"a\": 1}")]));
        let other_id = json!({"role": "assistant", "content": null,
            "tool_calls": [{"id": "c2", "type": "function", "function": {"name": "f", "arguments": "{}"}}]});
        assert_ne!(key_of(None, &[calls("{}")]), key_of(None, &[other_id]));
    }

    #[test]
    fn streamed_and_whole_turns_agree() {
        let ids = vec!["c1".to_string()];
        let m = msg(json!({"role": "assistant", "content": "  Let me look.\n",
            "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]}));
        let mut whole = Chain::new(Some("k"));
        whole.push(&m);
        let mut t = TurnHash::default();
        for piece in ["  Let", " me", " look.", "\n"] {
            t.push(piece);
        }
        let mut streamed = Chain::new(Some("k"));
        streamed.push_turn(&t, &ids);
        assert_eq!(whole, streamed);
        let mut text = Chain::new(Some("k"));
        text.push_assistant("Let me look.  ", &ids);
        assert_eq!(whole, text);
    }

    #[test]
    fn held_whitespace_is_bounded() {
        let mut t = TurnHash::default();
        t.push("a");
        for _ in 0..1000 {
            t.push(&" ".repeat(1024));
        }
        assert!(t.ws.len() <= MAX_HELD_WS);
    }

    proptest::proptest! {
        /// Fed in any pieces, the streamed digest is the digest of the
        /// trimmed whole text (the key a later request looks the turn up by).
        #[test]
        fn turn_hash_is_split_invariant(
            words in proptest::collection::vec("[ \t\n\u{3000}]{0,3}[a-z\u{4e2d}]{0,3}[ \n]{0,2}", 0..8),
            cuts in proptest::collection::vec(0usize..64, 0..6),
        ) {
            let text: String = words.concat();
            let ids = vec!["call_1".to_string(), "call_2".to_string()];
            let want = assistant_digest(text.trim(), &ids);
            let bounds: Vec<usize> = text.char_indices().map(|(i, _)| i).collect();
            let mut at: Vec<usize> = cuts.iter().filter_map(|c| bounds.get(c % bounds.len().max(1)).copied()).collect();
            at.sort_unstable();
            let mut t = TurnHash::default();
            let mut from = 0;
            for cut in at.into_iter().chain([text.len()]) {
                t.push(&text[from..cut.max(from)]);
                from = cut.max(from);
            }
            proptest::prop_assert_eq!(t.digest(&ids), want);
        }
    }
}
