//! Bare JSON calls (Ollama-style templates, small models) and Salesforce
//! xLAM (`xlam` alias): the *whole* output is a call object or an array of
//! them, `[{"name": "get_weather", "arguments": {"city": "Lagos"}}]`, with the
//! key spellings of [`json_calls`](super::json_calls) — possibly inside a
//! ```` ```json ```` fence that is the whole output (xLAM does both).
//!
//! JSON without a call shape (a `response_format` answer) is content, and an
//! object whose first key is no call key is released at once instead of
//! being held to its end. Without a marker, an object with a name and no
//! arguments (`{"name": "Ada"}`, alone, not in a list of calls) is a call
//! only to a declared tool.

use super::json_calls::{Looks, calls_from_json, fence, looks_like_call};
use crate::toolcall::scan::{python_end, skip_ws};
use crate::toolcall::{Args, Ctx, Format, Parsed, Step, Wait};

pub struct BareJson;

impl Format for BareJson {
    fn name(&self) -> &'static str {
        "bare_json"
    }

    fn markers(&self) -> &'static [&'static str] {
        &["```"]
    }

    fn start_bytes(&self) -> &'static [u8] {
        b"{["
    }

    fn parse(&self, region: &str, ctx: &Ctx<'_>) -> Step {
        if region.starts_with("```") {
            return fence(region, ctx, true);
        }
        if !ctx.at_start {
            return Step::Reject;
        }
        match looks_like_call(region, 0) {
            Looks::No => return Step::Reject,
            Looks::More if ctx.eof => return Step::Reject,
            Looks::More => return Step::Need(Wait::Len(region.len() + 1)),
            Looks::Yes => {}
        }
        let Some(end) = python_end(region, 0) else {
            return if ctx.eof { Step::Reject } else { Step::Need(Wait::Balanced { from: 0 }) };
        };
        // The call must be the whole output.
        if skip_ws(region, end) < region.len() {
            return Step::Reject;
        }
        if !ctx.eof {
            return Step::Need(Wait::NonSpaceAfter { from: end });
        }
        match calls_from_json(&region[..end]) {
            Some(calls)
                if ctx.tools.is_open() && region.starts_with('{') && calls.iter().all(|c| c.args == Args::Empty) =>
            {
                Step::Reject
            }
            Some(calls) => Step::Done(Parsed { consumed: region.len(), calls, ..Default::default() }),
            None => Step::Reject,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::toolcall::ToolIndex;

    fn parse(text: &str, tools: &ToolIndex) -> bool {
        let ctx = Ctx { tools, eof: true, at_start: true };
        matches!(BareJson.parse(text, &ctx), Step::Done(_))
    }

    #[test]
    fn name_only_object_needs_a_declared_tool() {
        let declared = ToolIndex::new([("get_time".to_string(), serde_json::json!({}))]);
        assert!(!parse(r#"{"name": "get_time"}"#, &ToolIndex::open()));
        assert!(parse(r#"{"name": "get_time"}"#, &declared));
        assert!(parse(r#"{"name": "get_time", "arguments": {}}"#, &ToolIndex::open()));
        assert!(parse(r#"[{"name": "get_time"}]"#, &ToolIndex::open()));
    }
}
