//! Near-JSON from a model's text read into a value: Python's spelling read
//! exactly, other damage repaired (llm_json), prose and deep nesting refused.
//! Every repair of the tool-call layer goes through [`loads`].

use serde_json::Value;

use super::scan;

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

#[cfg(test)]
mod tests {
    use super::*;

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
}
