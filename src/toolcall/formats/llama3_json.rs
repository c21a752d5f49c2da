//! Llama 3.1 / 3.2 / 3.3 JSON tool calling (also Llama-4 `llama4_json`,
//! Nemotron-Llama): `{"name": "f", "parameters": {…}}` (or `"arguments"`),
//! either at the very start of the output or after `<|python_tag|>`.
//! Parallel calls are objects joined by `;`. The Llama 3.1 built-in tools
//! write `<|python_tag|>brave_search.call(query="…")`, and raw code after
//! `<|python_tag|>` is a `code_interpreter` call. A trailing `<|eom_id|>` /
//! `<|eot_id|>` is swallowed.
//!
//! JSON in the middle of prose is never a call: without the tag, only an
//! object that opens the output counts, and it must have both a name and
//! arguments.

use serde_json::{Map, Value};

use super::json_calls::{json_call, name_end, need_balanced, past_closer};
use crate::toolcall::scan::{byte_at, find, python_end, skip_ws};
use crate::toolcall::typing::{coerce, param, single_string_param};
use crate::toolcall::{Args, Ctx, Format, Parsed, RawCall, Step, Wait};

pub struct Llama3Json;

const TAG: &str = "<|python_tag|>";
const ENDS: &[&str] = &["<|eom_id|>", "<|eot_id|>"];
/// What may close a call: the end-of-message tokens, and a `</tool_call>`
/// whose opening tag the model (or a detokenizer) lost.
const CLOSERS: &[&str] = &["<|eom_id|>", "<|eot_id|>", "</tool_call>"];
const BUILTIN: &str = ".call";

impl Format for Llama3Json {
    fn name(&self) -> &'static str {
        "llama3_json"
    }

    fn markers(&self) -> &'static [&'static str] {
        &[TAG]
    }

    fn start_bytes(&self) -> &'static [u8] {
        b"{"
    }

    fn parse(&self, region: &str, ctx: &Ctx<'_>) -> Step {
        let tagged = region.starts_with(TAG);
        let at = if tagged { skip_ws(region, TAG.len()) } else { 0 };
        match byte_at(region, at) {
            None if !ctx.eof => Step::Need(Wait::Len(at + 1)),
            Some(b'{') => objects(region, at, ctx),
            Some(_) if tagged => builtin(region, at, ctx),
            _ => Step::Reject,
        }
    }
}

/// `{…}; {…}` from `at` (which holds `{`).
fn objects(region: &str, mut at: usize, ctx: &Ctx<'_>) -> Step {
    let mut calls = Vec::new();
    let mut last = at;
    loop {
        let Some(end) = python_end(region, at) else {
            if calls.is_empty() {
                return need_balanced(at, ctx);
            }
            if !ctx.eof {
                return Step::Need(Wait::Balanced { from: at });
            }
            // Truncated after complete calls: keep them, the tail stays text.
            break;
        };
        match json_call(&region[at..end]) {
            Some(call) if call.args != Args::Empty => calls.push(call),
            _ if calls.is_empty() => return Step::Reject,
            _ => break,
        }
        last = end;
        let semi = skip_ws(region, end);
        match byte_at(region, semi) {
            None if !ctx.eof => return Step::Need(Wait::NonSpaceAfter { from: end }),
            Some(b';') => {}
            _ => break,
        }
        let next = skip_ws(region, semi + 1);
        match byte_at(region, next) {
            None if !ctx.eof => return Step::Need(Wait::NonSpaceAfter { from: semi + 1 }),
            Some(b'{') => at = next,
            _ => break,
        }
    }
    done(region, last, calls, ctx)
}

/// `brave_search.call(query="…")` or raw code after the tag, from `at`.
fn builtin(region: &str, at: usize, ctx: &Ctx<'_>) -> Step {
    let word = name_end(region, at);
    if word == region.len() && !ctx.eof {
        return Step::Need(Wait::Len(word + 1));
    }
    if let Some(name) = region[at..word].strip_suffix(BUILTIN).filter(|n| !n.is_empty())
        && byte_at(region, word) == Some(b'(')
    {
        let Some(end) = python_end(region, word) else { return need_balanced(word, ctx) };
        let Some(args) = keywords(&region[word + 1..end - 1], ctx.tools.schema(name)) else { return Step::Reject };
        return done(region, end, vec![RawCall::value(name, args)], ctx);
    }
    // Raw Python for the code interpreter, up to the end-of-message token.
    let (code_end, consumed) = match ENDS.iter().filter_map(|e| find(region, e, at).map(|i| (i, i + e.len()))).min() {
        Some(x) => x,
        None if ctx.eof => (region.len(), region.len()),
        None => {
            return Step::Need(Wait::Marker { marker: ENDS[0], from: at });
        }
    };
    let code = region[at..code_end].trim();
    if code.is_empty() {
        return Step::Reject;
    }
    let name = "code_interpreter";
    let key = ctx.tools.schema(name).and_then(single_string_param).unwrap_or_else(|| "code".to_string());
    let mut m = Map::new();
    m.insert(key, Value::String(code.to_string()));
    Step::Done(Parsed { consumed, calls: vec![RawCall::value(name, Value::Object(m))], ..Default::default() })
}

fn done(region: &str, end: usize, calls: Vec<RawCall>, ctx: &Ctx<'_>) -> Step {
    match past_closer(region, end, CLOSERS, ctx.eof) {
        Ok(consumed) => Step::Done(Parsed { consumed, calls, ..Default::default() }),
        Err(wait) => Step::Need(wait),
    }
}

/// Python keyword arguments `k="v", n=3` as an object; literals are read as
/// JSON or Python, bare words are typed by the tool's schema.
fn keywords(inner: &str, schema: Option<&Value>) -> Option<Value> {
    let mut m = Map::new();
    for part in split_top(inner) {
        let part = part.trim();
        if part.is_empty() {
            continue;
        }
        let (k, v) = part.split_once('=')?;
        let k = k.trim();
        if k.is_empty() || name_end(k, 0) != k.len() {
            return None;
        }
        m.insert(k.to_string(), literal(v.trim(), param(schema, k)));
    }
    Some(Value::Object(m))
}

fn literal(v: &str, schema: Option<&Value>) -> Value {
    match v {
        "True" => return Value::Bool(true),
        "False" => return Value::Bool(false),
        "None" => return Value::Null,
        _ => {}
    }
    if let Ok(x) = serde_json::from_str::<Value>(v) {
        return x;
    }
    let quoted = v.len() >= 2 && v.starts_with('\'') && v.ends_with('\'');
    if (quoted || v.starts_with(['[', '{']))
        && let Some(x) = crate::toolcall::repair::loads(v)
    {
        return x;
    }
    coerce(v, schema)
}

/// Splits at commas outside strings and brackets.
fn split_top(s: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let (mut depth, mut quote, mut esc, mut last) = (0usize, None, false, 0);
    for (i, b) in s.bytes().enumerate() {
        if let Some(q) = quote {
            if esc {
                esc = false;
            } else if b == b'\\' {
                esc = true;
            } else if b == q {
                quote = None;
            }
            continue;
        }
        match b {
            b'"' | b'\'' => quote = Some(b),
            b'(' | b'[' | b'{' => depth += 1,
            b')' | b']' | b'}' => depth = depth.saturating_sub(1),
            b',' if depth == 0 => {
                parts.push(&s[last..i]);
                last = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&s[last..]);
    parts
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn python_keywords() {
        let v = keywords(r#"query="a, b", n=3, flag=True, tags=['x'], none=None"#, None);
        assert_eq!(v, Some(json!({"query": "a, b", "n": 3, "flag": true, "tags": ["x"], "none": null})));
        assert_eq!(keywords("", None), Some(json!({})));
        assert_eq!(keywords("positional", None), None);
    }
}
