//! DeepSeek-V3.2 / V3.2-Exp / V3.2-Speciale DSML:
//!
//! ```text
//! <｜DSML｜function_calls>
//! <｜DSML｜invoke name="NAME">
//! <｜DSML｜parameter name="K" string="true|false">V</｜DSML｜parameter>
//! </｜DSML｜invoke>
//! </｜DSML｜function_calls>
//! ```
//!
//! As SGLang tolerates: the `｜DSML｜` prefix may be missing or mixed between
//! opening and closing tags, and an invoke body may be a JSON object instead
//! of parameters. The prefix may also come with ASCII bars (`|DSML|`), as
//! DeepSeek writes it into its reasoning. `string="true"` keeps the raw text and `string="false"`
//! means JSON; a declared parameter schema has the last word. When the
//! output ends without the closing tag, the complete invokes are kept.
//! DeepSeek also wraps the whole arguments in one `arguments` or `input`
//! parameter (or JSON key); unless the tool declares that name, the wrapper
//! is taken off as SGLang does.

use serde_json::Value;

use crate::toolcall::formats::xml::{self, Peek};
use crate::toolcall::scan::skip_ws;
use crate::toolcall::{Args, Ctx, Format, Parsed, RawCall, Step, typing};

pub struct DeepseekV32Dsml;

/// The tag prefix, fullwidth bars and ASCII bars.
const DSML: &[&str] = &["｜DSML｜", "|DSML|"];
/// The closing tag's tail; `</` or `</｜DSML｜` comes before it.
const CLOSE: &str = "function_calls>";

impl Format for DeepseekV32Dsml {
    fn name(&self) -> &'static str {
        "deepseek_v32_dsml"
    }

    fn markers(&self) -> &'static [&'static str] {
        &["<｜DSML｜function_calls>", "<|DSML|function_calls>", "<function_calls>"]
    }

    fn strays(&self) -> &'static [&'static str] {
        &["</｜DSML｜function_calls>", "</|DSML|function_calls>", "<｜end▁of▁sentence｜>"]
    }

    fn parse(&self, region: &str, ctx: &Ctx<'_>) -> Step {
        block(region, CLOSE, ctx)
    }
}

/// One DSML block whose closing tag ends in `close` (`function_calls>`,
/// V4's `tool_calls>`), from its opening tag.
pub(super) fn block(region: &str, close: &'static str, ctx: &Ctx<'_>) -> Step {
    block_with(region, close, DSML, &["<｜DSML｜invoke", "<|DSML|invoke", "<invoke"], ctx)
}

/// [`block`] for a grammar whose tags carry other prefixes (GigaChat 3.5's
/// `｜GCML｜`); `opens` are the invoke tags, with and without them.
pub(super) fn block_with(region: &str, close: &'static str, prefixes: &[&str], opens: &[&str], ctx: &Ctx<'_>) -> Step {
    let Some(gt) = region.find('>') else {
        return Step::Reject;
    };
    let body = skip_ws(region, gt + 1);
    match xml::peek(region, body, opens) {
        Peek::Is(_) => {}
        Peek::Maybe => return xml::more(region, ctx),
        Peek::No => return Step::Reject,
    }
    let closed = |c: usize| {
        let before = &region[..c];
        before.ends_with("</") || prefixes.iter().any(|d| before.strip_suffix(d).is_some_and(|b| b.ends_with("</")))
    };
    let (text, close) = match xml::find_close(region, body, close, ctx, closed) {
        Err(step) => return step,
        Ok(Some(c)) if closed(c) => (&region[body..c], Some(c + close.len())),
        // A `function_calls>` that is not a closing tag: ignore it.
        Ok(_) => (&region[body..], None),
    };
    // Parse the plain spelling; byte offsets of the original are needed
    // only for an unclosed block, where the kept invokes end it.
    let mut plain = text.to_string();
    for d in prefixes {
        plain = plain.replace(&format!("<{d}"), "<").replace(&format!("</{d}"), "</");
    }
    let (invokes, end) = xml::invokes(&plain, "", &[]);
    // An invoke without a name, or whose body is prose (neither
    // parameters nor JSON), is dropped; the block's other calls stand.
    let calls: Vec<RawCall> = invokes.iter().filter(|inv| intact(inv)).map(|inv| call(inv, ctx)).collect();
    if calls.is_empty() && (close.is_none() || invokes.is_empty()) {
        return Step::Reject;
    }
    let consumed = match close {
        Some(c) => c,
        None => body + original_end(text, end, prefixes),
    };
    Step::Done(Parsed { consumed, calls, salvage: close.is_some(), ..Default::default() })
}

fn intact(inv: &xml::Invoke<'_>) -> bool {
    let inner = inv.inner.trim();
    !inv.name.is_empty() && (inner.is_empty() || inner.starts_with('{') || inner.starts_with("<parameter"))
}

fn call(inv: &xml::Invoke<'_>, ctx: &Ctx<'_>) -> RawCall {
    let inner = inv.inner.trim();
    let schema = ctx.tools.schema(inv.name);
    if inner.starts_with('{') {
        if let Some(args) = serde_json::from_str(inner).ok().and_then(|v| unwrap(&v, schema)) {
            return RawCall::value(inv.name, args);
        }
        return RawCall { name: inv.name.to_string(), args: Args::Json(inner.to_string()), id: None };
    }
    let mut args = serde_json::Map::new();
    for p in xml::params(inv.inner, "") {
        let value = match (typing::param(schema, p.name), xml::attr(p.tag, "string")) {
            (Some(s), _) => typing::coerce(p.value, Some(s)),
            (None, Some("false")) => {
                serde_json::from_str(p.value.trim()).unwrap_or_else(|_| Value::String(p.value.to_string()))
            }
            (None, _) => Value::String(p.value.to_string()),
        };
        args.insert(p.name.to_string(), value);
    }
    let args = Value::Object(args);
    let args = unwrap(&args, schema).unwrap_or(args);
    RawCall::value(inv.name, args)
}

/// The arguments inside a lone `arguments`/`input` wrapper the tool does
/// not declare: an object, a string holding one, or a plain string for a
/// tool with a single parameter. `None` leaves the arguments as written.
fn unwrap(args: &Value, schema: Option<&Value>) -> Option<Value> {
    let obj = args.as_object()?;
    let (key, value) = match obj.iter().next() {
        Some((k, v)) if obj.len() == 1 && (k == "arguments" || k == "input") => (k, v),
        _ => return None,
    };
    let props = schema.and_then(|s| s.get("properties")).and_then(Value::as_object);
    if props.is_some_and(|p| p.contains_key(key)) {
        return None;
    }
    match value {
        v @ Value::Object(_) => Some(v.clone()),
        Value::String(s) => match serde_json::from_str::<Value>(s.trim()) {
            Ok(v @ Value::Object(_)) => Some(v),
            _ => {
                let mut names = props?.keys();
                let (Some(only), None) = (names.next(), names.next()) else { return None };
                Some(serde_json::json!({ only.clone(): s }))
            }
        },
        _ => None,
    }
}

/// Maps an offset in the plain spelling of `text` back to `text`: the
/// plain text drops `｜DSML｜` (or `|DSML|`) after each `<` and `</`.
fn original_end(text: &str, plain_end: usize, prefixes: &[&str]) -> usize {
    let mut plain = 0;
    let mut i = 0;
    while plain < plain_end && i < text.len() {
        let rest = &text[i..];
        if let Some(tag) = rest.strip_prefix('<') {
            let slash = usize::from(tag.starts_with('/'));
            if let Some(d) = prefixes.iter().find(|d| tag[slash..].starts_with(**d)) {
                i += 1 + slash + d.len();
                plain += 1 + slash;
                continue;
            }
        }
        let ch = rest.chars().next().map_or(1, char::len_utf8);
        i += ch;
        plain += ch;
    }
    i
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_plain_offsets_back() {
        let t = "<｜DSML｜invoke name=\"f\"></｜DSML｜invoke>rest";
        let plain = t.replace("<｜DSML｜", "<").replace("</｜DSML｜", "</");
        let end = plain.find("rest").unwrap_or_default();
        assert_eq!(&t[original_end(t, end, DSML)..], "rest");
    }
}
