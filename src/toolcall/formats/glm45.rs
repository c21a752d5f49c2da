//! GLM-4.5 / 4.5-Air / 4.6 / 4.5V and (alias `glm47`) GLM-4.7 / GLM-5.x:
//!
//! ```text
//! <tool_call>NAME
//! <arg_key>KEY</arg_key>
//! <arg_value>VALUE</arg_value>
//! </tool_call>
//! ```
//!
//! GLM-4.7 writes the same tags with no newlines; a zero-argument call is
//! `<tool_call>NAME</tool_call>`. Values are raw text typed by the tool's
//! schema. The name is cut at the first `<` and trimmed (GLM-5 sometimes
//! leaks `</arg_value>` after it); literal `\n` escapes between tags are
//! tolerated. `NAME {json}` bodies (a GLM-4.7 drift) are accepted too. A
//! body starting with `{`, `[` or `<` belongs to hermes, Granite or
//! Qwen3-Coder.

use crate::toolcall::formats::xml::{self, ARG_TAGS, Peek};
use crate::toolcall::scan::{byte_at, find};
use crate::toolcall::{Args, Ctx, Format, Parsed, RawCall, Step, typing};

pub struct Glm45;

const OPEN: &str = "<tool_call>";
const CLOSE: &str = "</tool_call>";
/// What may follow the name (the last two are Hunyuan-style and glitches).
const AFTER_NAME: &[&str] = &["<arg_key>", CLOSE, "{", "</arg_value>", "<tool_sep>"];

impl Format for Glm45 {
    fn name(&self) -> &'static str {
        "glm45"
    }

    fn markers(&self) -> &'static [&'static str] {
        &[OPEN]
    }

    fn parse(&self, region: &str, ctx: &Ctx<'_>) -> Step {
        let start = xml::skip_escaped_ws(region, OPEN.len());
        match byte_at(region, start) {
            None => return xml::more(region, ctx),
            Some(b'{' | b'[' | b'<') => return Step::Reject,
            Some(_) => {}
        }
        // The name runs to whitespace or a tag; check what follows it now so
        // that prose after a `<tool_call>` is released at once.
        let name_end = region[start..]
            .find(|c: char| c.is_ascii_whitespace() || c == '<' || c == '{')
            .map_or(region.len(), |i| start + i);
        let name = strip_escapes(&region[start..name_end]);
        let still_arriving = name.is_empty() && name_end == region.len();
        if !(xml::plausible_name(name) || still_arriving) {
            return Step::Reject;
        }
        let next = xml::skip_escaped_ws(region, name_end);
        if next == region.len() || region[next..] == *"\\" {
            return xml::more(region, ctx);
        }
        match xml::peek(region, next, AFTER_NAME) {
            Peek::Is(_) => {}
            Peek::Maybe => return xml::more(region, ctx),
            Peek::No => return Step::Reject,
        }
        // A `</tool_call>` inside an open `<arg_value>` is text of the value.
        let closed = |c: usize| {
            let before = &region[next..c];
            match before.rfind(ARG_TAGS.value) {
                Some(v) => before[v..].contains(ARG_TAGS.value_end),
                None => true,
            }
        };
        let c = match xml::find_close(region, next, CLOSE, ctx, closed) {
            Err(step) => return step,
            Ok(Some(c)) => c,
            // Truncated: no call is made up.
            Ok(None) => return Step::Reject,
        };
        let body = &region[next..c];
        let args = if body.starts_with('{') {
            Args::Json(body.trim().to_string())
        } else {
            let schema = ctx.tools.schema(name);
            Args::Value(typing::object_from_pairs(schema, xml::pairs(body, &ARG_TAGS)))
        };
        Step::Done(Parsed {
            consumed: c + CLOSE.len(),
            calls: vec![RawCall { name: name.to_string(), args, id: None }],
            ..Default::default()
        })
    }
}

/// Drops literal `\n` escapes that end a name (`get_weather\n<arg_key>`).
fn strip_escapes(mut name: &str) -> &str {
    while let Some(n) = name.strip_suffix("\\n") {
        name = n;
    }
    // A stray backslash still arriving (`name\`) is not part of the name.
    if find(name, "\\", 0).is_some_and(|i| i + 1 == name.len()) {
        name = &name[..name.len() - 1];
    }
    name
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::toolcall::{ToolIndex, Wait};
    use serde_json::json;

    fn parse(text: &str, eof: bool) -> Step {
        let tools = ToolIndex::open();
        let ctx = Ctx { tools: &tools, eof, at_start: true };
        Glm45.parse(text, &ctx)
    }

    #[test]
    fn prose_is_rejected_before_the_close_arrives() {
        assert!(matches!(parse("<tool_call> tags wrap calls", false), Step::Reject));
        assert!(matches!(parse("<tool_call>f\n<arg_", false), Step::Need(Wait::Len(_))));
        assert!(matches!(parse("<tool_call>f\n<arg_key>a</arg_key>", false), Step::Need(Wait::Marker { .. })));
    }

    #[test]
    fn close_inside_a_value_is_text() {
        let s = "<tool_call>f<arg_key>a</arg_key><arg_value>x</tool_call>y</arg_value></tool_call>";
        let Step::Done(p) = parse(s, false) else { panic!("not done") };
        assert_eq!(p.consumed, s.len());
        assert_eq!(p.calls[0].args, Args::Value(json!({"a": "x</tool_call>y"})));
    }

    #[test]
    fn name_with_json_body() {
        let Step::Done(p) = parse("<tool_call>f {\"a\": 1}</tool_call>", false) else { panic!("not done") };
        assert_eq!(p.calls[0].args, Args::Json("{\"a\": 1}".into()));
    }
}
