//! Qwen3-Coder (480B, 30B-A3B, Next) and Qwen3.5 / Qwen3-Next with the XML
//! template:
//!
//! ```text
//! <tool_call>
//! <function=NAME>
//! <parameter=KEY>
//! VALUE
//! </parameter>
//! </function>
//! </tool_call>
//! ```
//!
//! Values are raw text (one leading and one trailing newline stripped),
//! typed by the tool's schema. `<tool_call>` also opens hermes JSON, GLM and
//! Granite bodies, so this parser takes only a `<function=` body. When the
//! `<tool_call>` token was stripped upstream, a bare `<function=NAME>` with
//! `<parameter=` (or `</function>`) after it is accepted too; a `{` after it
//! is Functionary v3.1's.

use crate::toolcall::formats::xml::{self, FUNCTION, Peek};
use crate::toolcall::scan::{find, skip_ws};
use crate::toolcall::{Ctx, Format, Step, Wait};

pub struct Qwen3CoderXml;

const OPEN: &str = "<tool_call>";
const CLOSE: &str = "</tool_call>";
const FUNCTION_END: &str = "</function>";

impl Format for Qwen3CoderXml {
    fn name(&self) -> &'static str {
        "qwen3_coder_xml"
    }

    fn markers(&self) -> &'static [&'static str] {
        &[OPEN, FUNCTION]
    }

    fn parse(&self, region: &str, ctx: &Ctx<'_>) -> Step {
        if region.starts_with(OPEN) { xml::qwen_block(region, OPEN, CLOSE, ctx) } else { bare(region, ctx) }
    }
}

/// `<function=NAME>…</function>` without `<tool_call>`. The `</function>`
/// that ends it must be followed by `</tool_call>` (consumed), another call,
/// or the end of output; otherwise it may be text inside a value. At the
/// end of output the first `</function>` is taken.
fn bare(region: &str, ctx: &Ctx<'_>) -> Step {
    if let Some(step) = xml::qwen_opening(region, 0, ctx) {
        return step;
    }
    let mut first = None;
    let mut from = 0;
    while let Some(p) = find(region, FUNCTION_END, from) {
        let end = p + FUNCTION_END.len();
        let after = skip_ws(region, end);
        if after == region.len() {
            if !ctx.eof {
                return Step::Need(Wait::NonSpaceAfter { from: end });
            }
            return xml::qwen_done(region, 0, end, end, ctx);
        }
        match xml::peek(region, after, &[CLOSE, FUNCTION, OPEN]) {
            Peek::Is(0) => return xml::qwen_done(region, 0, end, after + CLOSE.len(), ctx),
            Peek::Is(_) => return xml::qwen_done(region, 0, end, end, ctx),
            Peek::Maybe if !ctx.eof => return xml::more(region, ctx),
            Peek::Maybe | Peek::No => {}
        }
        first = first.or(Some(end));
        from = p + 1;
    }
    if !ctx.eof {
        return Step::Need(Wait::Marker { marker: FUNCTION_END, from });
    }
    match first {
        Some(end) => xml::qwen_done(region, 0, end, end, ctx),
        None => Step::Reject,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::toolcall::{Args, Parsed, ToolIndex};
    use serde_json::json;

    fn parse(text: &str, eof: bool) -> Step {
        let tools = ToolIndex::open();
        let ctx = Ctx { tools: &tools, eof, at_start: true };
        Qwen3CoderXml.parse(text, &ctx)
    }

    #[test]
    fn waits_for_the_closing_tag() {
        let s = "<tool_call>\n<function=f>\n<parameter=a>\nx";
        assert!(matches!(parse(s, false), Step::Need(Wait::Marker { marker: CLOSE, .. })));
        assert!(matches!(parse(s, true), Step::Reject));
    }

    #[test]
    fn rejects_other_bodies_at_once() {
        assert!(matches!(parse("<tool_call>{\"name\"", false), Step::Reject));
        assert!(matches!(parse("<tool_call>get_weather\n<arg", false), Step::Reject));
        assert!(matches!(parse("<function=f>{\"a\": 1}", false), Step::Reject));
        assert!(matches!(parse("<function=a b", false), Step::Reject));
    }

    #[test]
    fn closing_tag_inside_a_value_is_text() {
        let s = "<tool_call>\n<function=f>\n<parameter=a>\nx</tool_call>y\n</parameter>\n</function>\n</tool_call>";
        let Step::Done(Parsed { consumed, calls, .. }) = parse(s, false) else { panic!("not done") };
        assert_eq!(consumed, s.len());
        assert_eq!(calls[0].args, Args::Value(json!({"a": "x</tool_call>y"})));
    }

    // vLLM test_qwen3_xml_coder_shared.py::test_content_with_full_nested_tool_call_nonstreaming
    #[test]
    fn a_call_written_inside_a_value_is_text() {
        let doc = "<tool_call>\n<function=w>\n<parameter=c>\nhi\n</parameter>\n</function>\n</tool_call>";
        let s =
            format!("<tool_call>\n<function=w>\n<parameter=c>\n{doc}\n</parameter>\n</function>\n</tool_call> after");
        let Step::Done(Parsed { consumed, calls, .. }) = parse(&s, false) else { panic!("not done") };
        assert_eq!(&s[consumed..], " after");
        assert_eq!(calls.len(), 1);
        assert_eq!(calls[0].args, Args::Value(json!({ "c": doc })));
    }

    #[test]
    fn bare_function_consumes_a_stray_close() {
        let s = "<function=f>\n</function>\n</tool_call> after";
        let Step::Done(p) = parse(s, false) else { panic!("not done") };
        assert_eq!(&s[p.consumed..], " after");
    }
}
