//! Trace entries of the agent loop (DESIGN.md "HTTP surface"): one per
//! server-side tool call, and one when the loop stops early; the chat front
//! writes them out as the client asked (`fronts/chat/trace.rs`).

use serde_json::{Value, json};

use crate::tools::CallOutcome;

/// The trace entry of one finished call; the result is cut to `max_chars`.
pub fn entry(o: &CallOutcome, iteration: u32, max_chars: usize) -> Value {
    let arguments = serde_json::from_str::<Value>(&o.call.arguments).unwrap_or_else(|_| json!(o.call.arguments));
    let text = o.output.model_text(false);
    let truncated = text.chars().count() > max_chars;
    let result: String = if truncated { text.chars().take(max_chars).collect() } else { text };
    json!({
        "type": "tool_call",
        "iteration": iteration,
        "id": o.call.id,
        "tool": o.call.name,
        "arguments": arguments,
        "status": o.status.as_str(),
        "duration_ms": o.duration.as_millis() as u64,
        "result": result,
        "truncated": truncated,
        "images": o.output.images().count(),
    })
}
