//! Generic fallback for instruct models prompted with tools in the system
//! prompt (Gemma 2/3, Phi-3/4, older Llama, small Qwen): a markdown fence
//!
//! ````text
//! ```json
//! {"name": "get_weather", "arguments": {"city": "Accra"}}
//! ```
//! ````
//!
//! (or a bare ```` ``` ```` fence) whose body is a call object, an array of
//! them, `{"tool_calls": […]}` or `{"tool_call": {…}}`. Models also use fences
//! to *explain* the format, so a fence is a call only when it is the final
//! element of the output; prose after it keeps the whole fence as text, and
//! fences in other languages (```` ```python ````) are text at once.

use super::json_calls::fence;
use crate::toolcall::{Ctx, Format, Step};

pub struct MarkdownJsonFence;

impl Format for MarkdownJsonFence {
    fn name(&self) -> &'static str {
        "markdown_json_fence"
    }

    fn markers(&self) -> &'static [&'static str] {
        &["```"]
    }

    fn parse(&self, region: &str, ctx: &Ctx<'_>) -> Step {
        fence(region, ctx, false)
    }
}
