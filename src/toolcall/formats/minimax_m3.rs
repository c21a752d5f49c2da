//! MiniMax-M3 (vLLM `minimax_m3`, SGLang `MinimaxM3Detector`): every tag
//! carries the namespace token `]<]minimax[>[`, and parameters nest as
//! elements:
//!
//! ```text
//! ]<]minimax[>[<tool_call>
//! ]<]minimax[>[<invoke name="create_order">]<]minimax[>[<user_id>42]<]minimax[>[</user_id>
//! ]<]minimax[>[<shipping>]<]minimax[>[<city>Singapore]<]minimax[>[</city>]<]minimax[>[</shipping>
//! ]<]minimax[>[<items>]<]minimax[>[<item>…]<]minimax[>[</item>]<]minimax[>[</items>
//! ]<]minimax[>[</invoke>
//! ]<]minimax[>[</tool_call>
//! ```
//!
//! As SGLang reads it: a leaf is typed by its schema (a string without
//! one), an element holding elements is an object (an array when its
//! schema says so, whose children are `item`s), a repeated child key makes
//! a list, and whitespace between the token and `<` is ignored. An invoke
//! whose elements do not nest is dropped; at the end of output without the
//! closing tag, the complete invokes are kept.

use serde_json::{Map, Value};

use crate::toolcall::scan::find;
use crate::toolcall::{Ctx, Format, Parsed, RawCall, Step, Wait, typing};

pub struct MinimaxM3;

const NS: &str = "]<]minimax[>[";
const OPEN: &str = "]<]minimax[>[<tool_call>";
const CLOSE: &str = "]<]minimax[>[</tool_call>";
const INVOKE: &str = "<invoke name=\"";
const INVOKE_END: &str = "]<]minimax[>[</invoke>";

impl Format for MinimaxM3 {
    fn name(&self) -> &'static str {
        "minimax_m3"
    }

    fn markers(&self) -> &'static [&'static str] {
        &[OPEN]
    }

    fn strays(&self) -> &'static [&'static str] {
        &[CLOSE]
    }

    fn parse(&self, region: &str, ctx: &Ctx<'_>) -> Step {
        let body = OPEN.len();
        let (block, close) = match find(region, CLOSE, body) {
            Some(c) => (&region[body..c], Some(c + CLOSE.len())),
            None if !ctx.eof => return Step::Need(Wait::Marker { marker: CLOSE, from: body }),
            None => (&region[body..], None),
        };
        let mut calls = Vec::new();
        let mut at = 0;
        let mut reached = 0;
        while let Some(start) = find(block, NS, at) {
            let tag = skip_space(block, start + NS.len());
            if !block[tag..].starts_with(INVOKE) {
                break;
            }
            let name_at = tag + INVOKE.len();
            let Some(name_end) = find(block, "\">", name_at) else { break };
            let Some(end) = find(block, INVOKE_END, name_end) else { break };
            let name = &block[name_at..name_end];
            let schema = ctx.tools.schema(name);
            if let Some(args) = parameters(&block[name_end + 2..end], schema) {
                calls.push(RawCall::value(name, args));
            }
            at = end + INVOKE_END.len();
            reached = at;
        }
        if calls.is_empty() && (close.is_none() || reached == 0) {
            return Step::Reject;
        }
        let consumed = close.unwrap_or(body + reached);
        Step::Done(Parsed { consumed, calls, salvage: close.is_some(), ..Default::default() })
    }
}

fn skip_space(s: &str, mut i: usize) -> usize {
    while s.as_bytes().get(i).is_some_and(|b| matches!(b, b' ' | b'\t' | b'\r' | b'\n')) {
        i += 1;
    }
    i
}

/// One open element while reading an invoke body.
struct Frame<'s> {
    tag: &'s str,
    schema: Option<&'s Value>,
    value: Value,
}

/// The invoke body's elements as an arguments value; `None` when the tags
/// do not nest.
fn parameters(body: &str, schema: Option<&Value>) -> Option<Value> {
    let root =
        if has_type(schema, "array") && body.split(NS).map(str::trim).find(|c| !c.is_empty())?.starts_with("<item>") {
            Value::Array(Vec::new())
        } else {
            Value::Object(Map::new())
        };
    let mut stack = vec![Frame { tag: "", schema, value: root }];
    for chunk in body.split(NS).map(str::trim).filter(|c| !c.is_empty()) {
        if let Some(rest) = chunk.strip_prefix("</") {
            let tag = rest.split_once('>').map_or(rest, |(t, _)| t).trim();
            if stack.len() == 1 || stack.last().is_some_and(|f| f.tag != tag) {
                return None;
            }
            let frame = stack.pop()?;
            assign(&mut stack.last_mut()?.value, frame.tag, frame.value);
        } else if let Some(rest) = chunk.strip_prefix('<') {
            let (tag, text) = rest.split_once('>')?;
            let tag = tag.trim();
            let parent = stack.last()?;
            let child = child_schema(parent.schema, tag);
            let value = if !text.is_empty() || is_scalar(child) {
                typing::coerce(text, child)
            } else if has_type(child, "array") {
                Value::Array(Vec::new())
            } else {
                Value::Object(Map::new())
            };
            stack.push(Frame { tag, schema: child, value });
        }
        // Text outside any tag (between elements) is ignored, as SGLang does.
    }
    (stack.len() == 1).then(|| stack.pop().map(|f| f.value)).flatten()
}

fn assign(parent: &mut Value, tag: &str, value: Value) {
    match parent {
        Value::Array(items) => items.push(value),
        Value::Object(m) => match m.get_mut(tag) {
            Some(Value::Array(items)) => items.push(value),
            Some(existing) => {
                let first = existing.take();
                *existing = Value::Array(vec![first, value]);
            }
            None => {
                m.insert(tag.to_string(), value);
            }
        },
        // A leaf that also holds elements: the elements win.
        other => {
            let mut m = Map::new();
            m.insert(tag.to_string(), value);
            *other = Value::Object(m);
        }
    }
}

fn child_schema<'s>(parent: Option<&'s Value>, tag: &str) -> Option<&'s Value> {
    let parent = parent?;
    if tag == "item" && has_type(Some(parent), "array") {
        return parent.get("items").filter(|i| i.is_object());
    }
    if let Some(p) = parent.get("properties").and_then(|p| p.get(tag)) {
        return p.is_object().then_some(p);
    }
    parent.get("additionalProperties").filter(|a| a.is_object())
}

fn types(schema: Option<&Value>) -> Vec<&str> {
    match schema.and_then(|s| s.get("type")) {
        Some(Value::String(t)) => vec![t.as_str()],
        Some(Value::Array(ts)) => ts.iter().filter_map(Value::as_str).collect(),
        _ => Vec::new(),
    }
}

fn has_type(schema: Option<&Value>, t: &str) -> bool {
    types(schema).iter().any(|x| x.eq_ignore_ascii_case(t))
}

fn is_scalar(schema: Option<&Value>) -> bool {
    let ts = types(schema);
    let scalar = ["string", "str", "integer", "int", "number", "float", "boolean", "bool", "null"];
    ts.iter().any(|t| scalar.contains(t)) && !ts.iter().any(|t| matches!(*t, "object" | "array"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn nested_elements_by_schema() {
        let schema = json!({"type": "object", "properties": {
            "zip": {"type": "integer"},
            "items": {"type": "array", "items": {"type": "object", "properties": {"qty": {"type": "integer"}}}},
            "tags": {"type": "object"}
        }});
        let body = format!(
            "{NS}<zip>018956{NS}</zip>{NS}<items>{NS}<item>{NS}<qty>2{NS}</qty>{NS}</item>{NS}</items>\
             {NS}<tags>{NS}<t>a{NS}</t>{NS}<t>b{NS}</t>{NS}</tags>"
        );
        assert_eq!(
            parameters(&body, Some(&schema)),
            Some(json!({"zip": 18956, "items": [{"qty": 2}], "tags": {"t": ["a", "b"]}}))
        );
        assert_eq!(parameters(&format!("{NS}<a>1{NS}</b>"), None), None);
    }
}
