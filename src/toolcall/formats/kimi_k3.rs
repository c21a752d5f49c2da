//! Kimi-K3 XTML (Moonshot; vLLM `kimi_k3`, SGLang `kimik3`, smg `KimiK3Parser`):
//!
//! ```text
//! <|open|>response<|sep|>CONTENT<|close|>response<|sep|>
//! <|open|>tools<|sep|>
//! <|open|>call tool="NAME" index="N"<|sep|>
//! <|open|>argument key="K" type="T"<|sep|>VALUE<|close|>argument<|sep|>
//! <|close|>call<|sep|>
//! <|close|>tools<|sep|>
//! <|close|>message<|sep|>
//! ```
//!
//! The `response` channel is the visible content: its markers (and the
//! end-of-turn `<|close|>message<|sep|>`) are dropped wherever they stand.
//! `type="string"` keeps the raw value, any other type is JSON (the raw
//! string when it is not); a declared parameter schema has the last word.
//! Attribute values escape `&` and `"` (`&amp;`, `&quot;`). The `index`
//! attribute is not an id (models repeat it). A call without a tool name is
//! dropped with its markup; at the end of output without the closing
//! marker, the complete calls are kept.

use serde_json::Value;

use super::xml;
use crate::toolcall::scan::find;
use crate::toolcall::{Ctx, Format, Parsed, RawCall, Step, Wait, typing};

pub struct KimiK3;

const TOOLS_OPEN: &str = "<|open|>tools<|sep|>";
const TOOLS_CLOSE: &str = "<|close|>tools<|sep|>";
const CALL_OPEN: &str = "<|open|>call";
const CALL_CLOSE: &str = "<|close|>call<|sep|>";
const ARG_OPEN: &str = "<|open|>argument";
const ARG_CLOSE: &str = "<|close|>argument<|sep|>";
const SEP: &str = "<|sep|>";

impl Format for KimiK3 {
    fn name(&self) -> &'static str {
        "kimi_k3"
    }

    fn markers(&self) -> &'static [&'static str] {
        &[TOOLS_OPEN]
    }

    fn strays(&self) -> &'static [&'static str] {
        &[
            "<|open|>response<|sep|>",
            "<|close|>response<|sep|>",
            "<|open|> response <|sep|>",
            "<|close|> response <|sep|>",
            "<|close|>message<|sep|>",
            TOOLS_CLOSE,
        ]
    }

    fn parse(&self, region: &str, ctx: &Ctx<'_>) -> Step {
        let body = TOOLS_OPEN.len();
        let (section, close) = match find(region, TOOLS_CLOSE, body) {
            Some(c) => (&region[body..c], Some(c + TOOLS_CLOSE.len())),
            None if !ctx.eof => return Step::Need(Wait::Marker { marker: TOOLS_CLOSE, from: body }),
            None => (&region[body..], None),
        };
        let (calls, complete) = calls(section, ctx);
        let closed = close.is_some();
        if calls.is_empty() && !(closed && complete > 0) {
            return Step::Reject;
        }
        // Unclosed at the end of output: the text after the last complete
        // call is the truncated one, kept as text.
        let consumed = close.unwrap_or(body + complete);
        Step::Done(Parsed { consumed, calls, salvage: closed, ..Default::default() })
    }
}

/// The section's calls, and how far its complete call blocks reach.
fn calls(section: &str, ctx: &Ctx<'_>) -> (Vec<RawCall>, usize) {
    let mut out = Vec::new();
    let mut at = 0;
    let mut reached = 0;
    while let Some(open) = find(section, CALL_OPEN, at) {
        let Some(sep) = find(section, SEP, open + CALL_OPEN.len()) else { break };
        let Some(close) = find(section, CALL_CLOSE, sep + SEP.len()) else { break };
        let attrs = &section[open + CALL_OPEN.len()..sep];
        let name = xml::attr(attrs, "tool").map(unescape).unwrap_or_default();
        if !name.is_empty() {
            let args = arguments(&section[sep + SEP.len()..close], ctx.tools.schema(&name));
            out.push(RawCall::value(name, args));
        }
        at = close + CALL_CLOSE.len();
        reached = at;
    }
    (out, reached)
}

fn arguments(body: &str, schema: Option<&Value>) -> Value {
    let mut args = serde_json::Map::new();
    let mut at = 0;
    while let Some(open) = find(body, ARG_OPEN, at) {
        let Some(sep) = find(body, SEP, open + ARG_OPEN.len()) else { break };
        let Some(close) = find(body, ARG_CLOSE, sep + SEP.len()) else { break };
        let attrs = &body[open + ARG_OPEN.len()..sep];
        let key = xml::attr(attrs, "key").map(unescape).unwrap_or_default();
        let raw = &body[sep + SEP.len()..close];
        let value = match (typing::param(schema, &key), xml::attr(attrs, "type")) {
            (Some(s), _) => typing::coerce(raw, Some(s)),
            (None, None | Some("string")) => Value::String(raw.to_string()),
            (None, Some(_)) => serde_json::from_str(raw.trim()).unwrap_or_else(|_| Value::String(raw.to_string())),
        };
        args.insert(key, value);
        at = close + ARG_CLOSE.len();
    }
    Value::Object(args)
}

/// The encoder's attribute escapes, undone in reverse order.
fn unescape(v: &str) -> String {
    v.replace("&quot;", "\"").replace("&amp;", "&")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::toolcall::ToolIndex;

    #[test]
    fn unescapes_and_types() {
        let tools = ToolIndex::open();
        let ctx = Ctx { tools: &tools, eof: true, at_start: true };
        let section = "<|open|>call tool=\"a&amp;b&quot;c\" index=\"1\"<|sep|>\
            <|open|>argument key=\"x\" type=\"number\"<|sep|>1<|close|>argument<|sep|>\
            <|open|>argument key=\"t\" type=\"string\"<|sep|>raw<|close|>argument<|sep|>\
            <|close|>call<|sep|>";
        let (calls, reached) = calls(section, &ctx);
        assert_eq!(reached, section.len());
        assert_eq!(calls, vec![RawCall::value("a&b\"c", serde_json::json!({"x": 1, "t": "raw"}))]);
    }
}
