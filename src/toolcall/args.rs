//! The guards every format shares, applied once a region is complete: the
//! name must be a declared tool (mapped to its declared spelling), and the
//! arguments must become one JSON object. Model bytes pass through untouched
//! when they are valid; otherwise they are repaired (llm_json) and only then
//! re-serialized.

use serde_json::value::RawValue;
use serde_json::{Map, Value};

use super::repair::{MAX_DEPTH, loads};
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
