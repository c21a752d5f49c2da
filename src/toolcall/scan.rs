//! Small text helpers the format parsers share. All work on complete byte
//! ranges of a region; the engine does the incremental part.

/// Position of `pat` in `s` at or after `from`.
pub fn find(s: &str, pat: &str, from: usize) -> Option<usize> {
    // Parsers look for short, fixed closers, usually a few bytes ahead, in a
    // region that may be long: memchr on the first byte beats building a
    // memmem searcher per call (its setup dominated the call-dense profile).
    let hay = &s.as_bytes()[from.min(s.len())..];
    let p = pat.as_bytes();
    let Some(&first) = p.first() else { return Some(from.min(s.len())) };
    let mut i = 0;
    while let Some(j) = memchr::memchr(first, &hay[i..]) {
        let at = i + j;
        if hay[at..].starts_with(p) {
            return Some(s.len() - hay.len() + at);
        }
        i = at + 1;
    }
    None
}

/// `s` split around the first `pat`. Like `str::split_once`, which builds a
/// two-way searcher per call: too dear for the short bodies parsers split.
pub fn split_once<'a>(s: &'a str, pat: &str) -> Option<(&'a str, &'a str)> {
    let at = find(s, pat, 0)?;
    Some((&s[..at], &s[at + pat.len()..]))
}

/// The first index at or after `i` that is not ASCII whitespace.
pub fn skip_ws(s: &str, i: usize) -> usize {
    let b = s.as_bytes();
    let mut i = i.min(b.len());
    while i < b.len() && b[i].is_ascii_whitespace() {
        i += 1;
    }
    i
}

/// The byte at `i`, if any.
pub fn byte_at(s: &str, i: usize) -> Option<u8> {
    s.as_bytes().get(i).copied()
}

/// Given `s[start]` is `{` or `[`, the index just past its matching closer,
/// skipping JSON strings (double quotes, backslash escapes). `None` when the
/// value is not closed in `s`.
pub fn json_end(s: &str, start: usize) -> Option<usize> {
    let b = s.as_bytes();
    let mut depth = 0usize;
    let mut in_str = false;
    let mut esc = false;
    for (i, &x) in b.iter().enumerate().skip(start) {
        if in_str {
            if esc {
                esc = false;
            } else if x == b'\\' {
                esc = true;
            } else if x == b'"' {
                in_str = false;
            }
            continue;
        }
        match x {
            b'"' => in_str = true,
            b'{' | b'[' => depth += 1,
            b'}' | b']' => {
                depth = depth.checked_sub(1)?;
                if depth == 0 {
                    return Some(i + 1);
                }
            }
            _ => {}
        }
    }
    None
}

/// Like [`json_end`] but also treats `'…'` as strings and `(`/`)` as
/// brackets (Python literals).
pub fn python_end(s: &str, start: usize) -> Option<usize> {
    let b = s.as_bytes();
    let mut depth = 0usize;
    let mut quote: Option<u8> = None;
    let mut esc = false;
    for (i, &x) in b.iter().enumerate().skip(start) {
        if let Some(q) = quote {
            if esc {
                esc = false;
            } else if x == b'\\' {
                esc = true;
            } else if x == q {
                quote = None;
            }
            continue;
        }
        match x {
            b'"' | b'\'' => quote = Some(x),
            b'{' | b'[' | b'(' => depth += 1,
            b'}' | b']' | b')' => {
                depth = depth.checked_sub(1)?;
                if depth == 0 {
                    return Some(i + 1);
                }
            }
            _ => {}
        }
    }
    None
}

/// Removes exactly one leading and one trailing newline (`\n` or `\r\n`), the
/// way chat templates wrap XML parameter values.
pub fn strip_one_newline(s: &str) -> &str {
    let s = s.strip_prefix("\r\n").or_else(|| s.strip_prefix('\n')).unwrap_or(s);
    s.strip_suffix("\r\n").or_else(|| s.strip_suffix('\n')).unwrap_or(s)
}

/// Splits a JSON call object into `(name, arguments JSON text)`, accepting the
/// key spellings models use: `name`/`function`/`tool`/`tool_name` and
/// `arguments`/`parameters`/`args`/`input`, plus the OpenAI shape
/// `{"type":"function","function":{…}}`. `None` when there is no name.
pub fn call_object(v: &serde_json::Value) -> Option<(String, Option<String>)> {
    let obj = v.as_object()?;
    if let Some(f) = obj.get("function").filter(|f| f.is_object()) {
        return call_object(f);
    }
    let name = ["name", "function", "tool", "tool_name"].iter().find_map(|k| obj.get(*k)?.as_str())?;
    let args = ["arguments", "parameters", "args", "input"].iter().find_map(|k| obj.get(*k));
    Some((name.to_string(), args.map(|a| a.to_string())))
}

/// Like [`call_object`] but keeps the model's own bytes for the arguments:
/// parses the object text and slices the raw argument value out of it, so
/// valid arguments reach the client exactly as the model wrote them.
/// A call object that starts `s[at..]` and is valid JSON, read in one pass
/// that also finds where it ends: (end, name, raw arguments). `None` for
/// anything else (not closed yet, damaged, no string `name`); callers then
/// take their slower paths.
pub fn call_object_prefix(s: &str, at: usize) -> Option<(usize, String, Option<String>)> {
    let mut values = serde_json::Deserializer::from_str(s.get(at..)?).into_iter::<RawCallObject<'_>>();
    let r = values.next()?.ok()?;
    let name = serde_json::from_str::<String>(r.name?.get()).ok()?;
    Some((at + values.byte_offset(), name, r.arguments.map(|a| a.get().to_string())))
}

/// The two fields of a call object, borrowed raw from the text.
#[derive(serde::Deserialize)]
struct RawCallObject<'a> {
    #[serde(borrow, default)]
    name: Option<&'a serde_json::value::RawValue>,
    #[serde(borrow, default, alias = "parameters")]
    arguments: Option<&'a serde_json::value::RawValue>,
}

pub fn call_object_raw(text: &str) -> Option<(String, Option<String>)> {
    if let Ok(r) = serde_json::from_str::<RawCallObject<'_>>(text)
        && let Some(name) = r.name.and_then(|n| serde_json::from_str::<String>(n.get()).ok())
    {
        return Some((name, r.arguments.map(|a| a.get().to_string())));
    }
    let v: serde_json::Value = serde_json::from_str(text).ok()?;
    call_object(&v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_end_skips_strings() {
        let s = r#"x{"a": "}\"", "b": [1, {"c": 2}]} tail"#;
        assert_eq!(json_end(s, 1), Some(s.len() - 5));
        assert_eq!(json_end(r#"{"a": 1"#, 0), None);
        assert_eq!(python_end("[f(a='x)'), g()] t", 0), Some(16));
    }

    #[test]
    fn call_object_keeps_raw_arguments() {
        let (n, a) = call_object_raw(r#"{"name": "f", "arguments": {"x":  1}}"#).unwrap_or_default();
        assert_eq!((n.as_str(), a.as_deref()), ("f", Some(r#"{"x":  1}"#)));
        let (n, a) = call_object_raw(r#"{"tool": "f", "parameters": {}}"#).unwrap_or_default();
        assert_eq!((n.as_str(), a.as_deref()), ("f", Some("{}")));
    }
}
