//! Shared logic for formats whose calls are JSON call objects: the readers the
//! tag-wrapped JSON formats use (Mistral, Granite, Llama 3, InternLM2, MiniMax
//! M1, Hunyuan A13B, Command R7B, functools), and for formats with no
//! special tokens around them (bare JSON, xLAM arrays, markdown ```json
//! fences): the accepted call shapes, the markdown fence, and the framing of
//! special-token formats that wrap one call per `BEGIN … END` pair (DeepSeek,
//! Kimi).
//!
//! Accepted shapes: a call object (`name`/`function`/`tool`/`tool_name` plus
//! `arguments`/`parameters`/`args`/`input`, or the OpenAI shape
//! `{"type":"function","function":{…}}`), an array of call objects, and
//! llama.cpp's generic `{"tool_calls":[…]}` / `{"tool_call":{…}}`.

use std::collections::HashMap;

use serde_json::Value;
use serde_json::value::RawValue;

use crate::toolcall::args_repair_object;
use crate::toolcall::scan::{byte_at, call_object, call_object_raw, find, python_end, skip_ws};
use crate::toolcall::{Args, Ctx, Parsed, RawCall, Step, Wait};

const NAME_KEYS: &[&str] = &["name", "function", "tool", "tool_name"];
const ARG_KEYS: &[&str] = &["arguments", "parameters", "args", "input"];
/// Keys a call object may carry besides its name when it has no arguments.
const SIDE_KEYS: &[&str] = &["type", "id", "call_id", "tool_call_id"];
/// Keys that may open a call object; anything else as the first key means
/// the JSON is data (a `response_format` answer), so it can stream at once.
const FIRST_KEYS: &[&str] = &[
    "name",
    "function",
    "tool",
    "tool_name",
    "arguments",
    "parameters",
    "args",
    "input",
    "type",
    "id",
    "call_id",
    "tool_call_id",
    "tool_calls",
    "tool_call",
];

/// Reads the calls out of one complete JSON value (object or array). Valid
/// JSON keeps the model's argument bytes; damaged JSON is repaired first.
/// `None` when the value is not entirely made of calls.
pub fn calls_from_json(text: &str) -> Option<Vec<RawCall>> {
    let text = text.trim();
    let calls = match serde_json::from_str::<&RawValue>(text) {
        Ok(raw) => calls_raw(raw)?,
        Err(_) => calls_value(&crate::toolcall::repair::loads(text)?)?,
    };
    (!calls.is_empty()).then_some(calls)
}

fn calls_raw(raw: &RawValue) -> Option<Vec<RawCall>> {
    let t = raw.get().trim_start();
    if t.starts_with('[') {
        let items: Vec<&RawValue> = serde_json::from_str(t).ok()?;
        return items.into_iter().map(call_raw).collect();
    }
    let m: HashMap<String, &RawValue> = serde_json::from_str(t).ok()?;
    if let Some(list) = m.get("tool_calls") {
        return calls_raw(list).filter(|_| list.get().trim_start().starts_with('['));
    }
    if let Some(one) = m.get("tool_call") {
        return Some(vec![call_raw(one)?]);
    }
    Some(vec![call_raw(raw)?])
}

/// One call object, arguments kept as the model wrote them.
fn call_raw(raw: &RawValue) -> Option<RawCall> {
    let m: HashMap<String, &RawValue> = serde_json::from_str(raw.get()).ok()?;
    if let Some(f) = m.get("function").filter(|f| f.get().trim_start().starts_with('{')) {
        return call_raw(f);
    }
    let name = NAME_KEYS.iter().find_map(|k| serde_json::from_str::<String>(m.get(*k)?.get()).ok())?;
    let args = ARG_KEYS.iter().find_map(|k| m.get(*k));
    let keys = m.keys().map(String::as_str);
    shape(name, args.map(|a| a.get().to_string()), keys)
}

fn calls_value(v: &Value) -> Option<Vec<RawCall>> {
    match v {
        Value::Array(items) => items.iter().map(call_value).collect(),
        Value::Object(m) => match (m.get("tool_calls"), m.get("tool_call")) {
            (Some(Value::Array(items)), _) => items.iter().map(call_value).collect(),
            (Some(_), _) => None,
            (None, Some(one)) => Some(vec![call_value(one)?]),
            (None, None) => Some(vec![call_value(v)?]),
        },
        _ => None,
    }
}

fn call_value(v: &Value) -> Option<RawCall> {
    let m = v.as_object()?;
    if let Some(f) = m.get("function").filter(|f| f.is_object()) {
        return call_value(f);
    }
    let name = NAME_KEYS.iter().find_map(|k| m.get(*k)?.as_str())?.to_string();
    let args = ARG_KEYS.iter().find_map(|k| m.get(*k)).map(Value::to_string);
    shape(name, args, m.keys().map(String::as_str))
}

/// A call needs arguments, or nothing but its name (and type/id): that keeps
/// `{"name": "Ada", "age": 36}` data rather than a call to `Ada`.
fn shape<'a>(name: String, args: Option<String>, mut keys: impl Iterator<Item = &'a str>) -> Option<RawCall> {
    if name.trim().is_empty() {
        return None;
    }
    let args = match args {
        Some(a) => Args::Checked(a),
        None if keys.all(|k| NAME_KEYS.contains(&k) || SIDE_KEYS.contains(&k)) => Args::Empty,
        None => return None,
    };
    Some(RawCall { name, args, id: None })
}

// Readers shared by the tag-wrapped JSON formats (Mistral, Granite,
// Llama 3, InternLM2, MiniMax M1, Hunyuan A13B, Command R7B, functools).

/// Names longer than this are prose, not a tool name.
pub const MAX_NAME: usize = 128;

/// The end of a tool name starting at `at`: ASCII letters, digits, `_`, `-`
/// and `.`.
pub fn name_end(s: &str, at: usize) -> usize {
    let b = s.as_bytes();
    let mut i = at.min(b.len());
    while i < b.len() && (b[i].is_ascii_alphanumeric() || matches!(b[i], b'_' | b'-' | b'.')) {
        i += 1;
    }
    i
}

/// The answer for a bracket at `from` that is not closed yet: wait for it, or
/// at the end of output reject the truncated call.
pub fn need_balanced(from: usize, ctx: &Ctx<'_>) -> Step {
    if ctx.eof { Step::Reject } else { Step::Need(Wait::Balanced { from }) }
}

/// Reads one JSON call object (`{"name": …, "arguments"|"parameters": …}`),
/// repairing near-JSON. `None` when it is not a call object.
pub fn json_call(text: &str) -> Option<RawCall> {
    let (name, args) = match call_object_raw(text) {
        Some(x) => x,
        None => call_object(&args_repair_object(text)?)?,
    };
    Some(RawCall { name, args: args.map_or(Args::Empty, Args::Checked), id: None })
}

/// Reads a JSON array of call objects, keeping each element's raw argument
/// bytes and its string `id` when it has one; near-JSON (single quotes,
/// Python literals, trailing commas) is repaired. `None` when the array is
/// empty or any element is not a call object.
pub fn json_calls(text: &str) -> Option<Vec<RawCall>> {
    let calls: Option<Vec<RawCall>> = match serde_json::from_str::<Vec<&RawValue>>(text) {
        Ok(items) => items
            .iter()
            .map(|item| {
                let mut call = json_call(item.get())?;
                call.id = serde_json::from_str::<Value>(item.get()).ok().and_then(|v| id_of(&v));
                Some(call)
            })
            .collect(),
        // Damaged: repair element by element (llm_json mangles some arrays).
        Err(_) => repaired_calls(text),
    };
    calls.filter(|c| !c.is_empty())
}

fn repaired_calls(text: &str) -> Option<Vec<RawCall>> {
    let mut calls = Vec::new();
    let mut at = skip_ws(text, 0);
    if byte_at(text, at) != Some(b'[') {
        return None;
    }
    at += 1;
    loop {
        at = skip_ws(text, at);
        match byte_at(text, at)? {
            b'{' => {
                let end = python_end(text, at)?;
                calls.push(value_call(&args_repair_object(&text[at..end])?)?);
                at = skip_ws(text, end);
                if byte_at(text, at) == Some(b',') {
                    at += 1;
                }
            }
            b']' => return Some(calls),
            _ => return None,
        }
    }
}

fn value_call(item: &Value) -> Option<RawCall> {
    let (name, args) = call_object(item)?;
    Some(RawCall { name, args: args.map_or(Args::Empty, Args::Checked), id: id_of(item) })
}

fn id_of(v: &Value) -> Option<String> {
    v.get("id").and_then(Value::as_str).filter(|s| !s.is_empty()).map(str::to_string)
}

/// After a body that ends at `end`, the position past an optional closing
/// tag (one of `closers`) that follows after whitespace, or `end` itself when
/// something else follows. `Err` while that is still undecided.
pub fn past_closer(region: &str, end: usize, closers: &[&str], eof: bool) -> Result<usize, Wait> {
    let at = skip_ws(region, end);
    let rest = &region[at..];
    if let Some(c) = closers.iter().find(|c| rest.starts_with(**c)) {
        return Ok(at + c.len());
    }
    if !eof {
        if rest.is_empty() {
            return Err(Wait::NonSpaceAfter { from: end });
        }
        if let Some(c) = closers.iter().filter(|c| c.starts_with(rest)).map(|c| c.len()).min() {
            return Err(Wait::Len(at + c));
        }
    }
    Ok(end)
}

/// What a prefix of JSON text says about being a call.
#[derive(Debug, PartialEq, Eq)]
pub enum Looks {
    Yes,
    No,
    /// Not enough text yet.
    More,
}

/// Checks the opening of a JSON value at `from` cheaply, so JSON data that is
/// clearly no call is released without waiting for its end: an array must
/// hold objects, and an object's first key must be a call key.
pub fn looks_like_call(s: &str, from: usize) -> Looks {
    let mut i = skip_ws(s, from);
    match byte_at(s, i) {
        None => return Looks::More,
        Some(b'[') => {
            i = skip_ws(s, i + 1);
            match byte_at(s, i) {
                None => return Looks::More,
                Some(b'{') => {}
                Some(_) => return Looks::No,
            }
        }
        Some(b'{') => {}
        Some(_) => return Looks::No,
    }
    i = skip_ws(s, i + 1);
    match byte_at(s, i) {
        None => return Looks::More,
        // Single-quoted keys are repairable damage: decide at the end.
        Some(b'"' | b'\'') => {}
        Some(_) => return Looks::No,
    }
    let key = &s.as_bytes()[i + 1..];
    let longest = FIRST_KEYS.iter().map(|k| k.len()).max().unwrap_or(0);
    match key.iter().position(|b| matches!(b, b'"' | b'\'' | b'\\')) {
        Some(n) if FIRST_KEYS.iter().any(|k| k.as_bytes() == &key[..n]) => Looks::Yes,
        Some(_) => Looks::No,
        None if key.len() > longest => Looks::No,
        None => Looks::More,
    }
}

/// Fence language tags that may hold a call; any other tag (`python`,
/// `bash` …) is text as soon as it diverges from these.
const TAGS: &[&str] = &["", "json", "json5", "jsonc", "tool_call", "tool_calls"];

/// A markdown fence (```` ``` ````, ```` ```json ````) whose body is a JSON call
/// value, accepted only as the final element of the output: a fence with
/// prose after it is an explanation and stays text. With `at_start` the
/// fence must also open the output (bare JSON wrapped in a fence).
pub fn fence(region: &str, ctx: &Ctx<'_>, at_start: bool) -> Step {
    const FENCE: &str = "```";
    if at_start && !ctx.at_start {
        return Step::Reject;
    }
    // The language line: a known tag, then a newline.
    let line = &region[FENCE.len()..];
    let nl = line.find('\n');
    let tag = line[..nl.unwrap_or(line.len())].trim().to_ascii_lowercase();
    let Some(nl) = nl else {
        if ctx.eof || !TAGS.iter().any(|t| t.starts_with(tag.as_str())) || line.len() > 32 {
            return Step::Reject;
        }
        return Step::Need(Wait::Len(region.len() + 1));
    };
    if !TAGS.contains(&tag.as_str()) {
        return Step::Reject;
    }
    let body = skip_ws(region, FENCE.len() + nl + 1);
    match byte_at(region, body) {
        None if ctx.eof => return Step::Reject,
        None => return Step::Need(Wait::Len(body + 1)),
        Some(b'{' | b'[') => {}
        Some(_) => return Step::Reject,
    }
    let Some(end) = python_end(region, body) else {
        return if ctx.eof { Step::Reject } else { Step::Need(Wait::Balanced { from: body }) };
    };
    let after = skip_ws(region, end);
    let close = if region[after..].starts_with(FENCE) {
        after + FENCE.len()
    } else if after == region.len() || FENCE.starts_with(&region[after..]) {
        if !ctx.eof {
            return Step::Need(Wait::Len(after + FENCE.len()));
        }
        // The output stopped before the closing fence: still the last element.
        if after < region.len() {
            return Step::Reject;
        }
        after
    } else {
        return Step::Reject;
    };
    if skip_ws(region, close) < region.len() {
        return Step::Reject;
    }
    if !ctx.eof {
        return Step::Need(Wait::NonSpaceAfter { from: close });
    }
    match calls_from_json(&region[body..end]) {
        Some(calls) => Step::Done(Parsed { consumed: region.len(), calls, ..Default::default() }),
        None => Step::Reject,
    }
}

/// The special tokens of a format that frames each call as
/// `CALL_BEGIN header ARGS CALL_END`, optionally inside a section.
pub struct Frame {
    pub section_begin: &'static str,
    pub call_begin: &'static str,
    pub call_end: &'static str,
    pub section_end: &'static str,
}

/// Parses one framed call per region (a region opens at the section or the
/// call token), so each call is emitted as soon as its end token arrives. A
/// following section end is consumed with it; a following call begin is left
/// for the next region. `body` reads what lies between the call tokens.
/// At the end of output a call without its end token is offered to `body`
/// with `complete == false`: it must then hold whole JSON arguments
/// ([`whole_json`]), so no call is fabricated from a truncated one.
pub fn framed(region: &str, ctx: &Ctx<'_>, f: &Frame, body: impl Fn(&str, bool) -> Option<RawCall>) -> Step {
    let (i, at_call) = call_start(region, f);
    let rest = &region[i..];
    if !at_call {
        return if !ctx.eof && f.call_begin.starts_with(rest) {
            Step::Need(Wait::Len(i + f.call_begin.len()))
        } else if !ctx.eof && i > 0 && region.len() < i + MAX_GAP {
            Step::Need(Wait::Marker { marker: f.call_begin, from: i })
        } else {
            Step::Reject
        };
    }
    let start = i + f.call_begin.len();
    let Some(end) = find(region, f.call_end, start) else {
        if !ctx.eof {
            return Step::Need(Wait::Marker { marker: f.call_end, from: start });
        }
        return match body(&region[start..], false) {
            Some(call) => Step::Done(Parsed { consumed: region.len(), calls: vec![call], ..Default::default() }),
            None => Step::Reject,
        };
    };
    let Some(call) = body(&region[start..end], true) else {
        return Step::Reject;
    };
    let after = end + f.call_end.len();
    let next = skip_ws(region, after);
    let tail = &region[next..];
    let consumed = if tail.starts_with(f.section_end) {
        next + f.section_end.len()
    } else if tail.starts_with(f.call_begin) {
        next
    } else if !ctx.eof && tail.is_empty() {
        return Step::Need(Wait::NonSpaceAfter { from: after });
    } else if !ctx.eof && (f.section_end.starts_with(tail) || f.call_begin.starts_with(tail)) {
        return Step::Need(Wait::Len(region.len() + 1));
    } else {
        after
    };
    // Both call tokens are there: a call with broken arguments is dropped
    // with its tokens, not shown as text.
    Step::Done(Parsed { consumed, calls: vec![call], salvage: true, ..Default::default() })
}

/// Text a model may write between the section token and its first call
/// token (dropped with the markup); past this the section token is prose.
const MAX_GAP: usize = 256;

/// Where the region's first call token is (after the section token, if any;
/// a short text between the two is part of the markup, not content).
/// Also says whether the call token is there (each region is one call, so
/// its token is compared once).
#[inline(always)]
fn call_start(region: &str, f: &Frame) -> (usize, bool) {
    if !region.starts_with(f.section_begin) {
        return (0, region.starts_with(f.call_begin));
    }
    let at = skip_ws(region, f.section_begin.len());
    if region[at..].starts_with(f.call_begin) {
        return (at, true);
    }
    let mut window = (at + MAX_GAP + f.call_begin.len()).min(region.len());
    while !region.is_char_boundary(window) {
        window -= 1;
    }
    match find(&region[..window], f.call_begin, at) {
        Some(c) if find(&region[..c], f.section_end, at).is_none() => (c, true),
        _ => (at, false),
    }
}

/// Where the first call's body starts, once its call token has arrived:
/// formats that share tokens look at the body's first bytes to reject a
/// region before its call is complete.
pub fn body_start(region: &str, f: &Frame) -> Option<usize> {
    let (i, at_call) = call_start(region, f);
    at_call.then_some(i + f.call_begin.len())
}

/// The JSON value that opens `s` (after whitespace), if it is complete and
/// nothing but whitespace follows: a truncated call's arguments.
pub fn whole_json(s: &str) -> Option<&str> {
    let start = skip_ws(s, 0);
    if !matches!(byte_at(s, start), Some(b'{')) {
        return None;
    }
    let end = crate::toolcall::scan::json_end(s, start)?;
    s[end..].trim().is_empty().then(|| &s[start..end])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn closer_is_optional() {
        assert_eq!(past_closer("[1] </x>", 3, &["</x>"], false), Ok(8));
        assert_eq!(past_closer("[1] </", 3, &["</x>"], false), Err(Wait::Len(8)));
        assert_eq!(past_closer("[1] ", 3, &["</x>"], false), Err(Wait::NonSpaceAfter { from: 3 }));
        assert_eq!(past_closer("[1] text", 3, &["</x>"], false), Ok(3));
    }

    fn names(text: &str) -> Vec<String> {
        calls_from_json(text).unwrap_or_default().into_iter().map(|c| c.name).collect()
    }

    #[test]
    fn accepts_call_shapes() {
        assert_eq!(names(r#"{"name": "f", "arguments": {"a": 1}}"#), ["f"]);
        assert_eq!(names(r#"{"tool": "f", "parameters": {}}"#), ["f"]);
        assert_eq!(names(r#"{"type": "function", "function": {"name": "f", "arguments": "{}"}}"#), ["f"]);
        assert_eq!(names(r#"[{"name": "f", "arguments": {}}, {"name": "g"}]"#), ["f", "g"]);
        assert_eq!(names(r#"{"tool_calls": [{"name": "f", "arguments": {}}]}"#), ["f"]);
        assert_eq!(names(r#"{"tool_call": {"name": "f", "arguments": {}}}"#), ["f"]);
        assert_eq!(names(r#"{'name': 'f', 'arguments': {'a': True},}"#), ["f"]);
    }

    #[test]
    fn keeps_argument_bytes() {
        let calls = calls_from_json(r#"{"name": "f", "arguments": {"a":  "é"}}"#).unwrap_or_default();
        assert_eq!(calls[0].args, Args::Checked(r#"{"a":  "é"}"#.into()));
    }

    #[test]
    fn rejects_data() {
        assert!(calls_from_json(r#"{"city": "Lagos"}"#).is_none());
        assert!(calls_from_json(r#"{"name": "Ada", "age": 36}"#).is_none());
        assert!(calls_from_json("[1, 2, 3]").is_none());
        assert!(calls_from_json("[]").is_none());
        assert!(calls_from_json(r#"[{"name": "f", "arguments": {}}, 2]"#).is_none());
    }

    #[test]
    fn first_key_decides_early() {
        assert_eq!(looks_like_call(r#"{"name": "#, 0), Looks::Yes);
        assert_eq!(looks_like_call(r#"[ {"tool_calls"#, 0), Looks::More);
        assert_eq!(looks_like_call(r#"{"city": "#, 0), Looks::No);
        assert_eq!(looks_like_call("[1, 2]", 0), Looks::No);
        assert_eq!(looks_like_call(r#"{"na"#, 0), Looks::More);
    }
}
