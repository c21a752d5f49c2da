//! Small edits of a chat history shared by the request rewrites, the tool
//! downgrades and prompt mode.

use serde_json::{Map, Value};

use crate::openai::Message;

/// The text of a message content (parts joined by newlines).
pub fn text_of(content: &Value) -> String {
    match content {
        Value::String(s) => s.clone(),
        Value::Array(parts) => {
            parts.iter().filter_map(|p| p.get("text").and_then(Value::as_str)).collect::<Vec<_>>().join("\n")
        }
        _ => String::new(),
    }
}

/// Adds `text` to the system message (creating one first if needed).
pub fn append_system(messages: &mut Vec<Message>, text: &str) {
    if let Some(m) = messages.iter_mut().find(|m| m.role == "system") {
        let mut t = text_of(&m.content);
        t.push_str("\n\n");
        t.push_str(text);
        m.content = Value::String(t);
    } else {
        messages.insert(0, Message { role: "system".into(), content: Value::String(text.into()), extra: Map::new() });
    }
}
