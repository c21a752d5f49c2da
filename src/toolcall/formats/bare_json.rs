//! Bare JSON calls (Ollama-style templates, small models) and Salesforce
//! xLAM (`xlam` alias): the *whole* output is a call object or an array of
//! them, `[{"name": "get_weather", "arguments": {"city": "Lagos"}}]`, with the
//! key spellings of [`json_calls`](super::json_calls). xLAM also wraps the
//! list (vLLM `xlam` accepts all of these after prose): in a ```` ```json ````
//! fence that ends the output, after `[TOOL_CALLS]`, or in
//! `<tool_call>…</tool_call>`. A `</tool_call>` left after bare JSON (the
//! opening tag lost) belongs to the call.
//!
//! JSON without a call shape (a `response_format` answer) is content, and an
//! object whose first key is no call key is released at once instead of
//! being held to its end. Without a marker, an object with a name and no
//! arguments (`{"name": "Ada"}`, alone, not in a list of calls) is a call
//! only to a declared tool.

use super::json_calls::{Looks, calls_from_json, fence, looks_like_call, past_closer};
use crate::toolcall::scan::{byte_at, python_end, skip_ws};
use crate::toolcall::{Args, Ctx, Format, Parsed, Step, Wait};

pub struct BareJson;

const TOOL_CALLS: &str = "[TOOL_CALLS]";
const OPEN: &str = "<tool_call>";
const CLOSE: &str = "</tool_call>";

impl Format for BareJson {
    fn name(&self) -> &'static str {
        "bare_json"
    }

    fn markers(&self) -> &'static [&'static str] {
        &["```", TOOL_CALLS, OPEN]
    }

    /// The wrappers are xLAM's for `--format bare_json`; in a set with the
    /// formats that own them (auto mode), those read the lists as well.
    fn defers(&self) -> &'static [(&'static str, &'static str)] {
        &[(OPEN, "hermes"), (TOOL_CALLS, "mistral")]
    }

    fn start_bytes(&self) -> &'static [u8] {
        b"{["
    }

    fn parse(&self, region: &str, ctx: &Ctx<'_>) -> Step {
        if region.starts_with("```") {
            return fence(region, ctx, false);
        }
        if let Some(tag) = [TOOL_CALLS, OPEN].into_iter().find(|t| region.starts_with(*t)) {
            let body = skip_ws(region, tag.len());
            return match byte_at(region, body) {
                None if !ctx.eof => Step::Need(Wait::Len(body + 1)),
                Some(b'{' | b'[') => match python_end(region, body) {
                    Some(end) => whole(region, body, end, ctx),
                    None if ctx.eof => Step::Reject,
                    None => Step::Need(Wait::Balanced { from: body }),
                },
                _ => Step::Reject,
            };
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
        whole(region, 0, end, ctx)
    }
}

/// The calls of `region[body..end]`, which with an optional `</tool_call>`
/// must end the output.
fn whole(region: &str, body: usize, end: usize, ctx: &Ctx<'_>) -> Step {
    let close = match past_closer(region, end, &[CLOSE], ctx.eof) {
        Ok(c) => c,
        Err(wait) => return Step::Need(wait),
    };
    if skip_ws(region, close) < region.len() {
        return Step::Reject;
    }
    if !ctx.eof {
        return Step::Need(Wait::NonSpaceAfter { from: close });
    }
    match calls_from_json(&region[body..end]) {
        // Without a marker, a lone name-only object is a call only to a declared tool.
        Some(calls)
            if ctx.tools.is_open()
                && region[body..].starts_with('{')
                && calls.iter().all(|c| c.args == Args::Empty) =>
        {
            Step::Reject
        }
        Some(calls) => Step::Done(Parsed { consumed: region.len(), calls, ..Default::default() }),
        None => Step::Reject,
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
