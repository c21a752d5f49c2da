//! The guards every format shares, applied once a region is complete: the
//! name must be a declared tool (mapped to its declared spelling), and the
//! arguments must become one JSON object. Model bytes pass through untouched
//! when they are valid; otherwise they are repaired (llm_json) and only then
//! re-serialized.

use serde_json::value::RawValue;
use serde_json::{Map, Value};

use super::{Args, Call, Parsed, RawCall, ToolIndex, scan, typing};

/// A region after the guards: what the engine emits.
/// Its calls are appended to a buffer the caller reuses (one allocation per
/// response, not one per region).
pub(super) struct Finished {
    pub consumed: usize,
    pub content: String,
    pub reasoning: String,
}

/// Applies the guards to a parsed region and appends its calls to `calls`.
/// `None` means the region is not a tool call after all (an undeclared name,
/// arguments that are no object) and must stay text; `calls` is then as it
/// was.
pub(super) fn finish(p: Parsed, format: &'static str, tools: &ToolIndex, calls: &mut Vec<Call>) -> Option<Finished> {
    let len = calls.len();
    for raw in p.calls {
        match finish_call(raw, format, tools) {
            Ok(call) => calls.push(call),
            // An undeclared name keeps the whole block visible, salvage or not.
            Err(Bad::Args) if p.salvage => {}
            Err(_) => {
                calls.truncate(len);
                return None;
            }
        }
    }
    Some(Finished { consumed: p.consumed, content: p.content, reasoning: p.reasoning })
}

/// Why a raw call did not pass the guards.
enum Bad {
    Name,
    Args,
}

fn finish_call(raw: RawCall, format: &'static str, tools: &ToolIndex) -> Result<Call, Bad> {
    let RawCall { name, args, id } = raw;
    // The model's string is kept when it is the declared spelling already.
    let declared = match tools.resolve(&name).ok_or(Bad::Name)? {
        d if d == name => None,
        d => Some(d.to_string()),
    };
    let name = declared.unwrap_or(name);
    // The schema only for text arguments: looking it up resolves the name again.
    let arguments = arguments(args, || tools.schema(&name)).ok_or(Bad::Args)?;
    Ok(Call { id, name, arguments, format })
}

fn arguments<'a>(args: Args, schema: impl FnOnce() -> Option<&'a Value>) -> Option<String> {
    // `bounded`: read by `json_value_end`, which takes no more than 64 levels.
    let (arguments, bounded) = match args {
        Args::Json(text) if is_plain_object(&text) => (text, true),
        Args::Json(text) => (json_arguments(&text)?, false),
        Args::Checked(text) => (checked_arguments(text)?, false),
        Args::Value(Value::Null) | Args::Empty => ("{}".to_string(), true),
        Args::Value(v @ Value::Object(_)) => (v.to_string(), false),
        Args::Value(_) => return None,
        Args::Text(text) => (text_arguments(&text, schema())?, false),
    };
    // Valid but deeper than any JSON reader downstream takes (serde_json
    // stops at 128): no call, the region stays text.
    if !bounded && scan::deeper_than(&arguments, MAX_DEPTH + 1) {
        return None;
    }
    Some(arguments)
}

/// Normalizes JSON argument text to a JSON object string.
pub fn json_arguments(text: &str) -> Option<String> {
    let t = scan::trim(text);
    if t.is_empty() || t == "null" {
        return Some("{}".to_string());
    }
    if is_plain_object(t) {
        return Some(t.to_string());
    }
    // Validated without building a tree: the bytes are kept anyway.
    if serde_json::from_str::<&RawValue>(t).is_err() {
        return repair(t);
    }
    match t.as_bytes()[0] {
        b'{' => Some(t.to_string()),
        // Double-encoded: `"arguments": "{\"a\": 1}"`.
        b'"' => {
            let inner: String = serde_json::from_str(t).ok()?;
            let inner = inner.trim();
            if inner.is_empty() {
                Some("{}".to_string())
            } else {
                (inner.starts_with('{') && serde_json::from_str::<&RawValue>(inner).is_ok()).then(|| inner.to_string())
            }
        }
        _ => None,
    }
}

/// A JSON object and nothing else, by the quick check (serde_json decides
/// whatever that does not accept).
fn is_plain_object(t: &str) -> bool {
    t.starts_with('{') && scan::json_value_end(t.as_bytes(), 0) == Some(t.len())
}

/// [`json_arguments`] for text known to be valid JSON: an object is kept
/// (moved, not copied) without parsing it again.
fn checked_arguments(text: String) -> Option<String> {
    let t = scan::trim(&text);
    if !t.starts_with('{') {
        return json_arguments(t);
    }
    Some(if t.len() == text.len() { text } else { t.to_string() })
}

/// Repairs near-JSON (trailing commas, single quotes, Python literals,
/// unescaped newlines, missing closers) into a JSON object string.
pub fn repair(text: &str) -> Option<String> {
    let v = loads(text)?;
    match v {
        Value::Object(m) if !m.is_empty() || text.contains('{') => Some(Value::Object(m).to_string()),
        _ => None,
    }
}

/// The deepest JSON nesting [`loads`] repairs, under serde_json's limit of
/// 128 with room for the levels around the arguments.
/// Deeper text stays text: the repairer recurses once per level, and 30,000
/// brackets from a model overflowed the stack.
pub const MAX_DEPTH: usize = 100;

/// Near-JSON repaired into a value, unless it nests deeper than
/// [`MAX_DEPTH`]. Every repair goes through here.
pub fn loads(text: &str) -> Option<Value> {
    if scan::deeper_than(text, MAX_DEPTH) || has_prose(text) {
        return None;
    }
    python_json(text).or_else(|| llm_json::loads(text, &llm_json::RepairOptions::default()).ok())
}

/// JSON written in Python's spelling (`'single'` quoted strings, `True`,
/// `False`, `None`), read exactly; `None` when the rewrite is not JSON. The
/// repairer mangles some of these (an array of dicts mixing quote styles
/// came back as its first dict).
fn python_json(text: &str) -> Option<Value> {
    let mut out = String::with_capacity(text.len() + 8);
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '"' => {
                out.push('"');
                loop {
                    let c = chars.next()?;
                    out.push(c);
                    if c == '\\' {
                        out.push(chars.next()?);
                    } else if c == '"' {
                        break;
                    }
                }
            }
            '\'' => {
                out.push('"');
                loop {
                    match chars.next()? {
                        '\\' => match chars.next()? {
                            '\'' => out.push('\''),
                            e => {
                                out.push('\\');
                                out.push(e);
                            }
                        },
                        '\'' => break,
                        '"' => out.push_str("\\\""),
                        other => out.push(other),
                    }
                }
                out.push('"');
            }
            c if c.is_ascii_alphabetic() || c == '_' => {
                let mut word = String::from(c);
                while let Some(&n) = chars.peek().filter(|n| n.is_ascii_alphanumeric() || **n == '_') {
                    word.push(n);
                    chars.next();
                }
                out.push_str(match word.as_str() {
                    "True" => "true",
                    "False" => "false",
                    "None" => "null",
                    w => w,
                });
            }
            other => out.push(other),
        }
    }
    serde_json::from_str(&out).ok()
}

/// Whether near-JSON holds words that are neither a literal, a number nor
/// an unquoted key: repair would turn them into keys or strings the model
/// never wrote (`{invalid json}` → `{"invalid json": ""}`), so it must not.
fn has_prose(text: &str) -> bool {
    let b = text.as_bytes();
    let (mut depth, mut i) = (0usize, 0);
    while i < b.len() {
        match b[i] {
            q @ (b'"' | b'\'') if depth > 0 => {
                i += 1;
                while i < b.len() && b[i] != q {
                    i += if b[i] == b'\\' { 2 } else { 1 };
                }
                i += 1;
            }
            b'{' | b'[' | b'(' => {
                depth += 1;
                i += 1;
            }
            b'}' | b']' | b')' => {
                depth = depth.saturating_sub(1);
                i += 1;
            }
            x if depth == 0 || x.is_ascii_whitespace() || matches!(x, b':' | b',') => i += 1,
            _ => {
                let start = i;
                while i < b.len()
                    && !matches!(b[i], b'"' | b'\'' | b'{' | b'}' | b'[' | b']' | b'(' | b')' | b':' | b',')
                {
                    i += 1;
                }
                let word = scan::trim(&text[start..i]);
                let key = b.get(skip_spaces(b, i)) == Some(&b':');
                if !bare_word_ok(word, key) {
                    return true;
                }
            }
        }
    }
    false
}

fn skip_spaces(b: &[u8], mut i: usize) -> usize {
    while i < b.len() && b[i].is_ascii_whitespace() {
        i += 1;
    }
    i
}

/// A literal or number; before a `:` also an identifier (an unquoted key).
fn bare_word_ok(w: &str, key: bool) -> bool {
    const LITERALS: &[&str] = &["true", "false", "null", "True", "False", "None", "NaN", "Infinity", "-Infinity"];
    if w.is_empty() || LITERALS.contains(&w) || w.parse::<f64>().is_ok() {
        return true;
    }
    key && w.bytes().all(|c| c.is_ascii_alphanumeric() || matches!(c, b'_' | b'-' | b'$' | b'.'))
}

/// Maps a plain-string argument onto the tool's schema: JSON object text is
/// used as is, otherwise the string fills the tool's one string parameter.
fn text_arguments(text: &str, schema: Option<&Value>) -> Option<String> {
    let t = scan::trim(text);
    if t.starts_with('{')
        && let Some(a) = json_arguments(t)
    {
        return Some(a);
    }
    let key = schema.and_then(typing::single_string_param).unwrap_or_else(|| "input".to_string());
    let mut m = Map::new();
    m.insert(key, Value::String(t.to_string()));
    Some(Value::Object(m).to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments_nested_past_the_limit_are_no_call_whichever_check_reads_them() {
        let nested = |n: usize| format!("{}1{}", r#"{"a": "#.repeat(n), "}".repeat(n));
        // 64 levels: read by the quick check; 65 and 101: by serde_json and
        // the bracket bound; 102: past it.
        for n in [1, 64, 65, MAX_DEPTH + 1] {
            let text = nested(n);
            assert_eq!(arguments(Args::Json(text.clone()), || None), Some(text.clone()), "{n} levels");
            assert_eq!(arguments(Args::Checked(text.clone()), || None), Some(text), "{n} levels");
        }
        let text = nested(MAX_DEPTH + 2);
        assert_eq!(arguments(Args::Json(text.clone()), || None), None);
        assert_eq!(arguments(Args::Checked(text), || None), None);
    }

    #[test]
    fn valid_json_passes_through_byte_for_byte() {
        assert_eq!(json_arguments(r#" {"a": 1,  "b":"é"} "#).as_deref(), Some(r#"{"a": 1,  "b":"é"}"#));
        assert_eq!(json_arguments("").as_deref(), Some("{}"));
        assert_eq!(json_arguments(r#""{\"a\":1}""#).as_deref(), Some(r#"{"a":1}"#));
        assert_eq!(json_arguments("[1]"), None);
    }

    // SGLang test_qwen3_coder_detector/test_cases.py::test_complex_schema_toolcall
    #[test]
    fn python_spelled_json_is_read_exactly() {
        let t = "[\n {\"content\": \"a\", \"status\": 'pending'},\n {\"content\": \"b\", \"status\": \"done\"}\n]";
        assert_eq!(
            loads(t),
            Some(serde_json::json!([{"content": "a", "status": "pending"}, {"content": "b", "status": "done"}]))
        );
        assert_eq!(
            loads(r#"{'k': 'it\'s "x"', 'n': None, 'b': True}"#),
            Some(serde_json::json!({"k": "it's \"x\"", "n": null, "b": true}))
        );
    }

    #[test]
    fn nesting_past_the_limit_is_text_not_a_crash() {
        for open in ["[", "{", "{\"a\":"] {
            let deep = open.repeat(30_000);
            assert_eq!(repair(&deep), None);
            assert_eq!(json_arguments(&format!("{{\"x\": {deep}")), None);
        }
        let ok = format!("{{\"a\": {}1{}}}", "[".repeat(100), "]".repeat(100));
        assert!(json_arguments(&ok).is_some());
    }

    #[test]
    fn repair_never_turns_prose_into_keys() {
        assert_eq!(repair("{invalid json}"), None);
        assert_eq!(repair(r#"{"name":"test","arguments": malformed}"#), None);
        assert_eq!(repair("{city: Paris}"), None);
        assert_eq!(
            repair("{a: 1, b: 'x y', c: None, d: -1.5e3}").as_deref(),
            Some(r#"{"a":1,"b":"x y","c":null,"d":-1500.0}"#)
        );
        assert_eq!(repair(r#"{"city": "Beijing""#).as_deref(), Some(r#"{"city":"Beijing"}"#));
    }

    #[test]
    fn repairs_common_damage() {
        let v: Value =
            serde_json::from_str(&json_arguments("{'a': True, 'b': [1,2,],}").unwrap_or_default()).unwrap_or_default();
        assert_eq!(v, serde_json::json!({"a": true, "b": [1, 2]}));
    }
}
