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

/// `str::trim_start`, skipping its Unicode whitespace walk when `s` opens
/// with a printable ASCII byte (every Unicode space is `<= b' '` or non-ASCII).
pub fn trim_start(s: &str) -> &str {
    match s.as_bytes().first() {
        Some(b'!'..=b'~') | None => s,
        Some(_) => s.trim_start(),
    }
}

/// `str::trim_end`, short-cut like [`trim_start`]; the ASCII spaces a
/// streamed token ends with are taken off bytewise, and only a text that
/// ends in something else walks the Unicode way.
pub fn trim_end(s: &str) -> &str {
    let b = s.as_bytes();
    let mut n = b.len();
    // Unicode's White_Space in ASCII: tab, LF, VT, FF, CR and the space.
    while n > 0 && matches!(b[n - 1], b'\t'..=b'\r' | b' ') {
        n -= 1;
    }
    let s = s.get(..n).unwrap_or(s);
    match s.as_bytes().last() {
        Some(b'!'..=b'~') | None => s,
        Some(_) => s.trim_end(),
    }
}

/// `str::trim`, short-cut like [`trim_start`].
pub fn trim(s: &str) -> &str {
    trim_end(trim_start(s))
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

/// Whether `s` nests `[`/`{` deeper than `max`, counting brackets inside
/// strings too: an upper bound of what any JSON reader (repairing or not)
/// would recurse into, found without one. Text of `max` bytes or fewer
/// cannot, so short arguments are not scanned.
pub fn deeper_than(s: &str, max: usize) -> bool {
    if s.len() <= max {
        return false;
    }
    let mut depth = 0usize;
    for b in s.bytes() {
        match b {
            b'[' | b'{' => {
                depth += 1;
                if depth > max {
                    return true;
                }
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    false
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

/// The end of the JSON value at `b[at]` (no whitespace before it), checked
/// against serde_json's grammar without building anything. `None` when the
/// value is invalid, not complete in `b`, or nested deeper than 64: callers
/// then ask serde_json, so this is a shortcut and never the last word.
pub fn json_value_end(b: &[u8], at: usize) -> Option<usize> {
    // Bit d of `objects` is set when open container d is an object.
    let mut objects = 0u64;
    let mut depth = 0u32;
    let mut i = at;
    loop {
        // A value starts at `i`.
        match *b.get(i)? {
            b'"' => i = string_end(b, i)?,
            open @ (b'{' | b'[') => {
                if depth == 64 {
                    return None;
                }
                let object = open == b'{';
                i = json_ws_end(b, i + 1);
                if b.get(i) == Some(if object { &b'}' } else { &b']' }) {
                    i += 1;
                } else {
                    depth += 1;
                    objects = objects << 1 | u64::from(object);
                    if object {
                        i = member_value(b, i)?;
                    }
                    continue;
                }
            }
            b't' => i = literal_end(b, i, b"true")?,
            b'f' => i = literal_end(b, i, b"false")?,
            b'n' => i = literal_end(b, i, b"null")?,
            b'-' | b'0'..=b'9' => i = number_end(b, i)?,
            _ => return None,
        }
        // After a value: close containers until the next element starts.
        loop {
            if depth == 0 {
                return Some(i);
            }
            i = json_ws_end(b, i);
            let object = objects & 1 == 1;
            match *b.get(i)? {
                b',' => {
                    i = json_ws_end(b, i + 1);
                    if object {
                        i = member_value(b, i)?;
                    }
                    break;
                }
                b'}' if object => {}
                b']' if !object => {}
                _ => return None,
            }
            i += 1;
            depth -= 1;
            objects >>= 1;
        }
    }
}

/// JSON whitespace (not form feed, unlike `is_ascii_whitespace`).
fn json_ws_end(b: &[u8], mut i: usize) -> usize {
    while matches!(b.get(i), Some(b' ' | b'\n' | b'\t' | b'\r')) {
        i += 1;
    }
    i
}

/// Past `"key"`, the colon and whitespace: where the member's value starts.
fn member_value(b: &[u8], i: usize) -> Option<usize> {
    if b.get(i) != Some(&b'"') {
        return None;
    }
    let i = json_ws_end(b, string_end(b, i)?);
    (b.get(i) == Some(&b':')).then(|| json_ws_end(b, i + 1))
}

/// Past the closing quote of the string that opens at `b[i]`.
fn string_end(b: &[u8], i: usize) -> Option<usize> {
    const ONES: u64 = u64::MAX / 255;
    const HIGH: u64 = ONES << 7;
    let mut j = i + 1;
    loop {
        // Eight bytes at a time to the next `"`, `\` or control character
        // (the lowest flagged byte is exact; later flags may be false).
        while let Some(chunk) = b.get(j..j + 8).and_then(|c| <[u8; 8]>::try_from(c).ok()) {
            let x = u64::from_le_bytes(chunk);
            let quote = x ^ (ONES * u64::from(b'"'));
            let slash = x ^ (ONES * u64::from(b'\\'));
            let special = (quote.wrapping_sub(ONES) & !quote
                | slash.wrapping_sub(ONES) & !slash
                | x.wrapping_sub(ONES * 0x20) & !x)
                & HIGH;
            if special != 0 {
                j += special.trailing_zeros() as usize / 8;
                break;
            }
            j += 8;
        }
        match *b.get(j)? {
            b'"' => return Some(j + 1),
            b'\\' => {
                j += match *b.get(j + 1)? {
                    b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => 2,
                    b'u' if b.get(j + 2..j + 6)?.iter().all(u8::is_ascii_hexdigit) => 6,
                    _ => return None,
                }
            }
            0..=0x1f => return None,
            _ => j += 1,
        }
    }
}

fn literal_end(b: &[u8], i: usize, lit: &[u8]) -> Option<usize> {
    (b.get(i..i + lit.len())? == lit).then_some(i + lit.len())
}

/// Past a JSON number at `b[i]`: no leading zeros, digits after `.` and `e`.
fn number_end(b: &[u8], mut i: usize) -> Option<usize> {
    let digits_end = |mut j: usize| {
        while b.get(j).is_some_and(u8::is_ascii_digit) {
            j += 1;
        }
        j
    };
    if b.get(i) == Some(&b'-') {
        i += 1;
    }
    i = match *b.get(i)? {
        b'0' if b.get(i + 1).is_some_and(u8::is_ascii_digit) => return None,
        b'0' => i + 1,
        b'1'..=b'9' => digits_end(i),
        _ => return None,
    };
    if b.get(i) == Some(&b'.') {
        let j = digits_end(i + 1);
        if j == i + 1 {
            return None;
        }
        i = j;
    }
    if matches!(b.get(i), Some(b'e' | b'E')) {
        i += 1;
        if matches!(b.get(i), Some(b'+' | b'-')) {
            i += 1;
        }
        let j = digits_end(i);
        if j == i {
            return None;
        }
        i = j;
    }
    Some(i)
}

/// A call object at `s[at]` in its plain shape, read without serde: keys and
/// name without escapes, `name` and `arguments`/`parameters` at most once,
/// arguments not `null`. (end, name, raw arguments) as [`call_object_prefix`]
/// would read them; `None` leaves the object to serde.
fn plain_call_object(s: &str, at: usize) -> Option<(usize, &str, Option<&str>)> {
    let b = s.as_bytes();
    if b.get(at) != Some(&b'{') {
        return None;
    }
    let (mut name, mut args) = (None, None);
    let mut i = json_ws_end(b, at + 1);
    loop {
        if b.get(i) != Some(&b'"') {
            return None;
        }
        let key_end = string_end(b, i)?;
        let key = &b[i + 1..key_end - 1];
        let colon = json_ws_end(b, key_end);
        if key.contains(&b'\\') || b.get(colon) != Some(&b':') {
            return None;
        }
        let v = json_ws_end(b, colon + 1);
        let v_end = json_value_end(b, v)?;
        let value = &s[v..v_end];
        match key {
            b"name" if name.is_none() && value.starts_with('"') && !value.bytes().any(|c| c == b'\\') => {
                name = Some(&value[1..value.len() - 1]);
            }
            b"arguments" | b"parameters" if args.is_none() && value != "null" => args = Some(value),
            b"name" | b"arguments" | b"parameters" => return None,
            _ => {}
        }
        i = json_ws_end(b, v_end);
        match *b.get(i)? {
            b',' => i = json_ws_end(b, i + 1),
            b'}' => return Some((i + 1, name?, args)),
            _ => return None,
        }
    }
}

/// A call object that starts `s[at..]` and is valid JSON, read in one pass
/// that also finds where it ends: (end, name, raw arguments). `None` for
/// anything else (not closed yet, damaged, no string `name`); callers then
/// take their slower paths.
pub fn call_object_prefix(s: &str, at: usize) -> Option<(usize, String, Option<String>)> {
    if let Some((end, name, args)) = plain_call_object(s, at) {
        return Some((end, name.to_string(), args.map(str::to_string)));
    }
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

/// Like [`call_object`] but keeps the model's own bytes for the arguments:
/// parses the object text and slices the raw argument value out of it, so
/// valid arguments reach the client exactly as the model wrote them.
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
    fn deeper_than_counts_every_bracket_and_skips_short_text() {
        let deep = |n: usize| format!("{}1{}", "[".repeat(n), "]".repeat(n));
        assert!(!deeper_than(&deep(5), 5));
        assert!(deeper_than(&deep(6), 5));
        // Brackets in strings count: the bound holds for any reader.
        assert!(deeper_than(r#"{"a": "[[[[[["}"#, 5));
        // Siblings do not add up: depth, not count.
        assert!(!deeper_than(&"[1],".repeat(50), 1));
        assert!(!deeper_than("[[[[[[", 6));
        assert!(deeper_than("[[[[[[[", 6));
    }

    #[test]
    fn json_end_skips_strings() {
        let s = r#"x{"a": "}\"", "b": [1, {"c": 2}]} tail"#;
        assert_eq!(json_end(s, 1), Some(s.len() - 5));
        assert_eq!(json_end(r#"{"a": 1"#, 0), None);
        assert_eq!(python_end("[f(a='x)'), g()] t", 0), Some(16));
    }

    /// serde_json's reading, which the shortcuts must agree with.
    fn serde_end(s: &str) -> Option<usize> {
        let mut values = serde_json::Deserializer::from_str(s).into_iter::<&serde_json::value::RawValue>();
        values.next()?.ok()?;
        Some(values.byte_offset())
    }

    fn serde_call(s: &str) -> Option<(usize, String, Option<String>)> {
        let mut values = serde_json::Deserializer::from_str(s).into_iter::<RawCallObject<'_>>();
        let r = values.next()?.ok()?;
        let name = serde_json::from_str::<String>(r.name?.get()).ok()?;
        Some((values.byte_offset(), name, r.arguments.map(|a| a.get().to_string())))
    }

    #[test]
    fn json_value_end_follows_the_grammar() {
        let ok = [
            "{}",
            "[]",
            r#"{"a": [1, -0.5e+3, true, false, null, "x\u00e9\n"], "b": {}}"#,
            "0",
            "-12.0E7",
            r#""é""#,
            "[ [ ] ]",
        ];
        for t in ok {
            assert_eq!(json_value_end(t.as_bytes(), 0), Some(t.len()), "{t}");
        }
        let bad = [
            "{",
            "[1,]",
            r#"{"a":1,}"#,
            "01",
            "1.",
            "-",
            "1e",
            "tru",
            r#""\x""#,
            "\"a\tb\"",
            "{a: 1}",
            "[1 2]",
            "{\"a\"}",
            r#""\u12g4""#,
            "\u{c}[]",
        ];
        for t in bad {
            assert_eq!(json_value_end(t.as_bytes(), 0).filter(|e| *e == t.len()), None, "{t}");
        }
    }

    /// JSON text with odd spacing, escapes and numbers.
    fn json_text() -> impl proptest::strategy::Strategy<Value = String> {
        use proptest::prelude::*;
        let leaf = prop_oneof![
            Just("null".to_string()),
            Just("true".to_string()),
            Just("false".to_string()),
            "-?(0|[1-9][0-9]{0,3})(\\.[0-9]{1,3})?([eE][+-]?[0-9]{1,2})?",
            r#""([a-zé _]|\\[nt"\\/]|\\u[0-9a-fA-F]{4})*""#,
        ];
        leaf.prop_recursive(4, 32, 4, |inner| {
            let ws = "[ \n\t\r]{0,2}";
            prop_oneof![
                (proptest::collection::vec((inner.clone(), ws), 0..4))
                    .prop_map(|v| format!("[{}]", v.into_iter().map(|(x, w)| x + &w).collect::<Vec<_>>().join(","))),
                (proptest::collection::vec(("(name|arguments|parameters|[a-z]{1,3})", ws, inner), 0..4)).prop_map(
                    |v| {
                        let m: Vec<String> = v.into_iter().map(|(k, w, x)| format!("{w}\"{k}\"{w}:{w}{x}")).collect();
                        format!("{{{}}}", m.join(","))
                    }
                ),
            ]
        })
    }

    #[test]
    fn string_end_sees_every_position() {
        for n in 0..24 {
            for (c, ok) in [("\"", true), ("\\n", true), ("\\q", false), ("\u{1f}", false), ("é", true)] {
                let t = format!("\"{}{c}{}\"", "a".repeat(n), "b".repeat(23 - n));
                let want = if c == "\"" { Some(n + 2) } else { ok.then_some(t.len()) };
                assert_eq!(string_end(t.as_bytes(), 0), want, "{t:?}");
            }
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig { cases: 3000, ..Default::default() })]

        #[test]
        fn trims_like_std(s in "[ \t\n\u{b}\u{c}\r\u{85}\u{a0}\u{3000}a!~\u{7f}é]{0,6}") {
            proptest::prop_assert_eq!(trim(&s), s.trim());
            proptest::prop_assert_eq!(trim_start(&s), s.trim_start());
            proptest::prop_assert_eq!(trim_end(&s), s.trim_end());
        }

        /// Whatever the shortcuts accept, serde_json reads the same way; a
        /// damaged value (one byte changed, dropped or added) included.
        #[test]
        fn shortcuts_agree_with_serde(
            text in json_text(),
            at in proptest::prelude::any::<proptest::sample::Index>(),
            edit in 0..4u8,
            byte in proptest::sample::select(b"{}[]\",:0-9.eE+-tfnul \\/\n\x01x".to_vec()),
        ) {
            let mut b = text.clone().into_bytes();
            let i = at.index(b.len() + 1);
            match edit {
                0 => {}
                1 if i < b.len() && b[i].is_ascii() => b[i] = byte,
                2 if i < b.len() && b[i].is_ascii() => { b.remove(i); }
                3 if text.is_char_boundary(i) => b.insert(i, byte),
                _ => {}
            }
            let Ok(s) = String::from_utf8(b) else { return Ok(()) };
            if edit == 0 {
                proptest::prop_assert_eq!(json_value_end(s.as_bytes(), 0), Some(s.len()));
            }
            if let Some(end) = json_value_end(s.as_bytes(), 0) {
                proptest::prop_assert_eq!(serde_end(&s[..end]), Some(end));
            }
            if let Some((end, name, args)) = plain_call_object(&s, 0) {
                proptest::prop_assert_eq!(serde_call(&s), Some((end, name.to_string(), args.map(str::to_string))));
            }
        }
    }

    #[test]
    fn call_object_keeps_raw_arguments() {
        let (n, a) = call_object_raw(r#"{"name": "f", "arguments": {"x":  1}}"#).unwrap_or_default();
        assert_eq!((n.as_str(), a.as_deref()), ("f", Some(r#"{"x":  1}"#)));
        let (n, a) = call_object_raw(r#"{"tool": "f", "parameters": {}}"#).unwrap_or_default();
        assert_eq!((n.as_str(), a.as_deref()), ("f", Some("{}")));
    }
}
