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

/// The most characters of a result the console keeps.
const CONSOLE_RESULT_CHARS: usize = 16 * 1024;
/// The most base64 bytes of the images of one call the console keeps.
const CONSOLE_IMAGE_BYTES: usize = 2 * 1024 * 1024;

/// The console's entry of one finished call: the trace entry with a longer
/// result and the images themselves (as data URLs, while they are small).
pub fn console_entry(o: &CallOutcome, iteration: u32, max_chars: usize) -> Value {
    let mut v = entry(o, iteration, max_chars.max(CONSOLE_RESULT_CHARS));
    let mut budget = CONSOLE_IMAGE_BYTES;
    let mut images = Vec::new();
    for (mime, data) in o.output.images() {
        if data.len() > budget {
            break;
        }
        budget -= data.len();
        images.push(Value::String(format!("data:{mime};base64,{data}")));
    }
    v["image_urls"] = Value::Array(images);
    v
}
