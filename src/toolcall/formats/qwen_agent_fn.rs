//! Qwen-Agent prompt-based function calling (`fncall_prompt_type='qwen'`,
//! any model coerced into it):
//!
//! ~~~text
//! ✿FUNCTION✿: get_weather
//! ✿ARGS✿: {"city": "Hangzhou"}
//! ✿FUNCTION✿: code_interpreter
//! ✿ARGS✿: ```py
//! print(1)
//! ```
//! ~~~
//!
//! Pairs repeat for parallel calls. A call runs to the next `✿FUNCTION✿` or
//! the end of output; like Qwen-Agent, anything after the arguments (a
//! trailing comment, a hallucinated `✿RESULT✿`/`✿RETURN✿`) is cut. Arguments
//! are a JSON object, a fenced code block (mapped onto the tool's one string
//! parameter, else `code`) or plain text.

use serde_json::{Map, Value};

use super::json_calls::{MAX_NAME, name_end};
use crate::toolcall::scan::{byte_at, find, python_end, skip_ws};
use crate::toolcall::typing::single_string_param;
use crate::toolcall::{Args, Ctx, Format, Parsed, RawCall, Step, Wait};

pub struct QwenAgentFn;

const FUNCTION: &str = "✿FUNCTION✿";
const ARGS: &str = "✿ARGS✿";
const STOPS: [&str; 2] = ["✿RESULT✿", "✿RETURN✿"];
const FENCE: &str = "```";

impl Format for QwenAgentFn {
    fn name(&self) -> &'static str {
        "qwen_agent_fn"
    }

    fn markers(&self) -> &'static [&'static str] {
        &[FUNCTION]
    }

    fn parse(&self, region: &str, ctx: &Ctx<'_>) -> Step {
        let more = |step| if ctx.eof { Step::Reject } else { step };
        let at = after_colon(region, FUNCTION.len());
        let end = name_end(region, at);
        if end - at > MAX_NAME {
            return Step::Reject;
        }
        if end == region.len() {
            return more(Step::Need(Wait::Len(end + 1)));
        }
        let name = &region[at..end];
        // The template is line-based: `✿ARGS✿` opens the next line.
        let tag = skip_ws(region, end);
        let rest = &region[tag..];
        let newline = region[end..tag].contains('\n');
        if name.is_empty() || !newline || !rest.starts_with(ARGS) {
            return match !name.is_empty() && ARGS.starts_with(rest) && (newline || rest.is_empty()) {
                true => more(Step::Need(Wait::Len(tag + ARGS.len()))),
                false => Step::Reject,
            };
        }
        let args_at = tag + ARGS.len();
        let seg_end = match find(region, FUNCTION, args_at) {
            Some(next) => next,
            None if ctx.eof => region.len(),
            None => {
                return Step::Need(Wait::Marker { marker: FUNCTION, from: args_at });
            }
        };
        let mut seg = &region[after_colon(region, args_at).min(seg_end)..seg_end];
        if let Some(cut) = STOPS.iter().filter_map(|s| seg.find(s)).min() {
            seg = &seg[..cut];
        }
        let Some(args) = arguments(seg.trim(), name, ctx) else {
            return Step::Reject;
        };
        let call = RawCall { name: name.to_string(), args, id: None };
        Step::Done(Parsed { consumed: seg_end, calls: vec![call], ..Default::default() })
    }
}

/// Skips whitespace, one `:` (ASCII or full-width) and the spaces after it;
/// a newline after the colon is kept, as it may open a code fence.
fn after_colon(s: &str, at: usize) -> usize {
    let rest = &s[skip_ws(s, at)..];
    let rest = rest.strip_prefix(':').or_else(|| rest.strip_prefix('：')).unwrap_or(rest);
    s.len() - rest.trim_start_matches([' ', '\t']).len()
}

/// The arguments of one call: a JSON object (junk after it cut), a fenced
/// code block, or plain text. `None` when they are missing or unfinished.
fn arguments(seg: &str, name: &str, ctx: &Ctx<'_>) -> Option<Args> {
    if seg.starts_with('{') {
        let end = python_end(seg, 0)?;
        return Some(Args::Json(seg[..end].to_string()));
    }
    if let Some(fenced) = seg.strip_prefix(FENCE) {
        let code_at = fenced.find('\n')? + 1;
        let close = fenced[code_at..].find(FENCE)? + code_at;
        let code = fenced[code_at..close].trim_end_matches(['\n', '\r']);
        if byte_at(code.trim_start(), 0) == Some(b'{') && serde_json::from_str::<Value>(code).is_ok() {
            return Some(Args::Json(code.to_string()));
        }
        let key = ctx.tools.schema(name).and_then(single_string_param).unwrap_or_else(|| "code".to_string());
        let mut m = Map::new();
        m.insert(key, Value::String(code.to_string()));
        return Some(Args::Value(Value::Object(m)));
    }
    (!seg.is_empty()).then(|| Args::Text(seg.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::toolcall::ToolIndex;
    use serde_json::json;

    #[test]
    fn code_fence_fills_the_string_parameter() {
        let tools = ToolIndex::new([("run".to_string(), json!({"properties": {"source": {"type": "string"}}}))]);
        let ctx = Ctx { tools: &tools, eof: true, at_start: true };
        let args = arguments("```py\nprint(1)\n```\ntrailing", "run", &ctx);
        assert_eq!(args, Some(Args::Value(json!({"source": "print(1)"}))));
        assert_eq!(arguments(r#"{"a": 1} <!-- note -->"#, "run", &ctx), Some(Args::Json(r#"{"a": 1}"#.into())));
        assert_eq!(arguments("```py\nprint(1", "run", &ctx), None);
    }

    #[test]
    fn name_then_args_line() {
        let tools = ToolIndex::open();
        let ctx = Ctx { tools: &tools, eof: false, at_start: true };
        assert!(matches!(QwenAgentFn.parse("✿FUNCTION✿: get_wea", &ctx), Step::Need(Wait::Len(_))));
        assert!(matches!(QwenAgentFn.parse("✿FUNCTION✿: f\n✿AR", &ctx), Step::Need(Wait::Len(_))));
        assert!(matches!(QwenAgentFn.parse("✿FUNCTION✿ and ✿ARGS✿", &ctx), Step::Reject));
        assert!(matches!(QwenAgentFn.parse("✿FUNCTION✿: f\n✿ARGS✿: {}", &ctx), Step::Need(Wait::Marker { .. })));
    }
}
