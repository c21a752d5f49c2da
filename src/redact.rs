//! One redactor for every secret the process holds (every configured
//! provider key and proxy key), applied where text leaves the process:
//! error bodies to clients (`ErrorObject::to_body`, `UpstreamError::to_openai`),
//! upstream errors in logs and spans (`UpstreamError`'s `Display`), every log
//! line the binary writes ([`Writer`]) and recorded fixtures
//! (`provider/record.rs`).
//!
//! Secrets are matched as substrings with Aho-Corasick, raw and as escaped
//! inside a JSON string. Secrets shorter than [`MIN_LEN`] are not redacted:
//! a substring that short would mangle ordinary text (proxy keys are
//! refused below 8 characters anyway). Besides the configured secrets,
//! anything shaped like an OpenAI-style key (`sk-` and 20 or more key
//! characters) is redacted too. A secret written with JSON `\uXXXX`
//! escapes (`\u0073k-…`) is found in the text with those escapes decoded;
//! one split across the pieces of a stream (two SSE events' deltas) is found
//! in the pieces joined ([`Redactor::across`], [`Redactor::sse_text`]).

use std::borrow::Cow;
use std::sync::{Arc, LazyLock, Mutex};

use aho_corasick::{AhoCorasick, MatchKind};
use arc_swap::ArcSwap;
use serde_json::Value;

/// What replaces a secret.
pub const REDACTED: &str = "[REDACTED]";

/// Secrets shorter than this are not redacted (see the module doc).
pub const MIN_LEN: usize = 8;

/// `sk-` keys of any vendor, configured here or not.
static KEY_SHAPE: LazyLock<Option<regex::Regex>> =
    LazyLock::new(|| regex::Regex::new(r"\bsk-[A-Za-z0-9_\-]{20,}").ok());

/// Replaces a set of secrets in text.
#[derive(Debug, Default)]
pub struct Redactor {
    secrets: Option<AhoCorasick>,
}

impl Redactor {
    /// Built once at startup from every secret.
    pub fn new<S: AsRef<str>>(secrets: impl IntoIterator<Item = S>) -> Self {
        let mut patterns: Vec<String> = Vec::new();
        for s in secrets {
            let s = s.as_ref();
            if s.len() < MIN_LEN {
                continue;
            }
            patterns.push(s.to_string());
            let escaped = serde_json::to_string(s).unwrap_or_default();
            if let Some(inner) = escaped.strip_prefix('"').and_then(|e| e.strip_suffix('"'))
                && inner != s
            {
                patterns.push(inner.to_string());
            }
        }
        patterns.sort();
        patterns.dedup();
        // Leftmost-longest: a key that contains another key is replaced whole.
        let secrets = (!patterns.is_empty())
            .then(|| AhoCorasick::builder().match_kind(MatchKind::LeftmostLongest).build(&patterns).ok())
            .flatten();
        Redactor { secrets }
    }

    /// `text` with every secret replaced by [`REDACTED`]; borrowed when
    /// there was none.
    pub fn text<'a>(&self, text: &'a str) -> Cow<'a, str> {
        let mut out = Cow::Borrowed(text);
        // `\u0073k-…` is `sk-…` to whoever reads it as JSON.
        if memchr::memmem::find(text.as_bytes(), b"\\u").is_some()
            && let Some(decoded) = unescape_ascii(text)
            && !self.ranges(&decoded).is_empty()
        {
            out = Cow::Owned(decoded);
        }
        if let Some(ac) = &self.secrets
            && ac.is_match(out.as_ref())
        {
            let mut s = String::with_capacity(out.len());
            ac.replace_all_with(&out, &mut s, |_, _, dst| {
                dst.push_str(REDACTED);
                true
            });
            out = Cow::Owned(s);
        }
        if memchr::memmem::find(out.as_bytes(), b"sk-").is_some()
            && let Some(re) = KEY_SHAPE.as_ref()
            && let Cow::Owned(s) = re.replace_all(&out, REDACTED)
        {
            out = Cow::Owned(s);
        }
        out
    }

    /// Redacts every string (and object key) of a JSON value in place.
    pub fn value(&self, v: &mut Value) {
        match v {
            Value::String(s) => {
                if let Cow::Owned(r) = self.text(s) {
                    *s = r;
                }
            }
            Value::Array(items) => items.iter_mut().for_each(|x| self.value(x)),
            Value::Object(map) => {
                if map.keys().any(|k| matches!(self.text(k), Cow::Owned(_))) {
                    let old = std::mem::take(map);
                    for (k, x) in old {
                        map.insert(self.text(&k).into_owned(), x);
                    }
                }
                map.values_mut().for_each(|x| self.value(x));
            }
            _ => {}
        }
    }

    /// Redacts a string in place.
    pub fn string(&self, s: &mut String) {
        if let Cow::Owned(r) = self.text(s) {
            *s = r;
        }
    }

    /// Where secrets are in `text` (byte ranges, sorted, merged).
    fn ranges(&self, text: &str) -> Vec<(usize, usize)> {
        let mut r: Vec<(usize, usize)> = Vec::new();
        if let Some(ac) = &self.secrets {
            r.extend(ac.find_iter(text).map(|m| (m.start(), m.end())));
        }
        if memchr::memmem::find(text.as_bytes(), b"sk-").is_some()
            && let Some(re) = KEY_SHAPE.as_ref()
        {
            r.extend(re.find_iter(text).map(|m| (m.start(), m.end())));
        }
        r.sort_unstable();
        let mut merged: Vec<(usize, usize)> = Vec::with_capacity(r.len());
        for (a, b) in r {
            match merged.last_mut() {
                Some(last) if a <= last.1 => last.1 = last.1.max(b),
                _ => merged.push((a, b)),
            }
        }
        merged
    }

    /// Redacts secrets split across a stream's events: the strings at one
    /// JSON path (`/choices/0/delta/content`) are joined in event order,
    /// and a secret found in the join is cut out of every piece it touches
    /// (the piece where it starts gets [`REDACTED`]). Returns which events
    /// changed. Each piece is redacted on its own too ([`Redactor::value`]).
    pub fn across(&self, events: &mut [Value]) -> Vec<bool> {
        let mut changed = vec![false; events.len()];
        let mut paths: std::collections::BTreeMap<String, Vec<(usize, String)>> = Default::default();
        for (i, e) in events.iter().enumerate() {
            let mut leaves = Vec::new();
            leaves_of(e, &mut String::new(), &mut leaves);
            for (path, text) in leaves {
                paths.entry(path).or_default().push((i, text));
            }
        }
        for (path, pieces) in paths {
            if pieces.len() < 2 {
                continue;
            }
            let joined: String = pieces.iter().map(|(_, t)| t.as_str()).collect();
            let ranges = self.ranges(&joined);
            if ranges.is_empty() {
                continue;
            }
            let mut start = 0;
            for (i, piece) in &pieces {
                let end = start + piece.len();
                let mut out = String::with_capacity(piece.len());
                let mut pos = start;
                for &(a, b) in ranges.iter().filter(|(a, b)| *a < end && *b > start) {
                    let (from, to) = (a.max(start), b.min(end));
                    out.push_str(&joined[pos..from]);
                    if a >= start {
                        out.push_str(REDACTED);
                    }
                    pos = to;
                }
                out.push_str(&joined[pos..end]);
                if out != *piece
                    && let Some(slot) = events[*i].pointer_mut(&path)
                {
                    *slot = Value::String(out);
                    changed[*i] = true;
                }
                start = end;
            }
        }
        for (e, c) in events.iter_mut().zip(changed.iter_mut()) {
            let before = e.clone();
            self.value(e);
            *c |= *e != before;
        }
        changed
    }

    /// An SSE text (a recorded stream) with every secret redacted, also one
    /// split across events: its JSON `data:` lines go through
    /// [`Redactor::across`], then the whole text through [`Redactor::text`].
    pub fn sse_text(&self, text: &str) -> String {
        let lines: Vec<&str> = text.split_inclusive('\n').collect();
        let mut events = Vec::new();
        let mut at = Vec::new();
        for (n, line) in lines.iter().enumerate() {
            let Some(data) = line.strip_prefix("data:") else { continue };
            if let Ok(v) = serde_json::from_str::<Value>(data.trim()) {
                events.push(v);
                at.push(n);
            }
        }
        let changed = self.across(&mut events);
        let mut out = String::with_capacity(text.len());
        let mut next = at.iter().zip(events.iter().zip(changed)).peekable();
        for (n, line) in lines.iter().enumerate() {
            match next.peek() {
                Some((m, (v, true))) if **m == n => {
                    out.push_str("data: ");
                    out.push_str(&v.to_string());
                    if line.ends_with('\n') {
                        out.push('\n');
                    }
                }
                _ => out.push_str(line),
            }
            if next.peek().is_some_and(|(m, _)| **m == n) {
                next.next();
            }
        }
        self.text(&out).into_owned()
    }
}

/// Every string leaf of `v` with its JSON pointer.
fn leaves_of(v: &Value, path: &mut String, out: &mut Vec<(String, String)>) {
    match v {
        Value::String(s) => out.push((path.clone(), s.clone())),
        Value::Array(items) => {
            for (i, x) in items.iter().enumerate() {
                let len = path.len();
                path.push('/');
                path.push_str(&i.to_string());
                leaves_of(x, path, out);
                path.truncate(len);
            }
        }
        Value::Object(map) => {
            for (k, x) in map {
                let len = path.len();
                path.push('/');
                path.push_str(&k.replace('~', "~0").replace('/', "~1"));
                leaves_of(x, path, out);
                path.truncate(len);
            }
        }
        _ => {}
    }
}

/// `text` with the JSON escapes `\uXXXX` of ASCII letters, digits, `-` and
/// `_` decoded (what a key is made of); `None` when there is none. An
/// escaped backslash (`\\u…`) is left alone.
fn unescape_ascii(text: &str) -> Option<String> {
    let b = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let (mut i, mut copied, mut any) = (0, 0, false);
    while i < b.len() {
        if b[i] != b'\\' {
            i += 1;
            continue;
        }
        if b.get(i + 1) == Some(&b'u')
            && let Some(hex) = text.get(i + 2..i + 6)
            && let Ok(c) = u8::from_str_radix(hex, 16)
            && hex.bytes().all(|h| h.is_ascii_hexdigit())
            && (c.is_ascii_alphanumeric() || c == b'-' || c == b'_')
        {
            out.push_str(&text[copied..i]);
            out.push(char::from(c));
            i += 6;
            copied = i;
            any = true;
        } else {
            i += 2;
        }
    }
    if !any {
        return None;
    }
    out.push_str(&text[copied..]);
    Some(out)
}

/// Every secret made known so far, and the redactor over all of them.
static KNOWN: Mutex<Vec<String>> = Mutex::new(Vec::new());
static GLOBAL: LazyLock<ArcSwap<Redactor>> = LazyLock::new(|| ArcSwap::from_pointee(Redactor::default()));

/// Adds secrets to the process-wide redactor (each `AppState` adds its
/// own: in `serve` there is one; tests build many in one process) and
/// returns a redactor of exactly `secrets`.
pub fn install(secrets: Vec<String>) -> Arc<Redactor> {
    let mine = Arc::new(Redactor::new(&secrets));
    let mut known = KNOWN.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let before = known.len();
    for s in secrets.into_iter().filter(|s| s.len() >= MIN_LEN) {
        if !known.contains(&s) {
            known.push(s);
        }
    }
    if known.len() != before {
        GLOBAL.store(Arc::new(Redactor::new(known.iter())));
    }
    mine
}

/// The process-wide redactor.
pub fn global() -> arc_swap::Guard<Arc<Redactor>> {
    GLOBAL.load()
}

/// `text` with every known secret replaced.
pub fn text(text: &str) -> Cow<'_, str> {
    global().text(text)
}

/// Redacts every string of `v` in place.
pub fn value(v: &mut Value) {
    global().value(v)
}

/// Redacts `s` in place.
pub fn string(s: &mut String) {
    global().string(s)
}

/// A log writer that redacts every known secret from each write (the fmt
/// layer writes one whole line per call; lines are redacted on the log
/// thread, not on the serving threads).
pub struct Writer<W>(pub W);

impl<W: std::io::Write> std::io::Write for Writer<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let text = String::from_utf8_lossy(buf);
        match text {
            Cow::Borrowed(t) => match global().text(t) {
                Cow::Borrowed(_) => self.0.write_all(buf)?,
                Cow::Owned(r) => self.0.write_all(r.as_bytes())?,
            },
            Cow::Owned(t) => self.0.write_all(global().text(&t).as_bytes())?,
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.0.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_are_redacted_raw_and_escaped_and_short_ones_kept() {
        let r = Redactor::new(["sk-abc\"defgh", "short", "provider-key-123", "provider-key-123-long"]);
        let out = r.text(r#"{"k": "sk-abc\"defgh", "s": "short", "a": "provider-key-123-long provider-key-123"}"#);
        assert_eq!(out, r#"{"k": "[REDACTED]", "s": "short", "a": "[REDACTED] [REDACTED]"}"#);
        assert!(matches!(r.text("nothing secret here"), Cow::Borrowed(_)));
    }

    #[test]
    fn key_shaped_tokens_are_redacted_even_when_not_configured() {
        let r = Redactor::default();
        assert_eq!(
            r.text("Incorrect API key provided: Bearer sk-proj-0123456789abcdefghijkl."),
            "Incorrect API key provided: Bearer [REDACTED]."
        );
        // Masked keys and short `sk-` words stay.
        assert_eq!(r.text("key sk-abc***xyz, task-list"), "key sk-abc***xyz, task-list");
    }

    #[test]
    fn escaped_and_split_secrets_are_redacted() {
        let r = Redactor::new(["sk-provider-split-0123"]);
        assert_eq!(r.text(r#"{"c":"key \u0073k-provider-split-0123!"}"#), r#"{"c":"key [REDACTED]!"}"#);
        assert_eq!(r.text(r#"a \\u0073k-provider-split-0123"#), r#"a \\u0073k-provider-split-0123"#);
        assert!(matches!(r.text(r#"plain \u0041 text"#), Cow::Borrowed(_)));
        let mut events = vec![
            serde_json::json!({"choices": [{"delta": {"content": "key sk-provider"}}]}),
            serde_json::json!({"choices": [{"delta": {"content": "-split-"}}]}),
            serde_json::json!({"choices": [{"delta": {"content": "0123 ok"}}]}),
            serde_json::json!({"choices": [{"delta": {"content": "fine"}}]}),
        ];
        assert_eq!(r.across(&mut events), [true, true, true, false]);
        let pieces: Vec<&str> = events.iter().map(|e| e["choices"][0]["delta"]["content"].as_str().unwrap()).collect();
        assert_eq!(pieces, ["key [REDACTED]", "", " ok", "fine"]);
        let sse = "data: {\"d\":\"sk-provider-\"}\n\ndata: {\"d\":\"split-0123\"}\n\ndata: [DONE]\n\n";
        let out = r.sse_text(sse);
        assert!(!out.contains("split-0123") && !out.contains("sk-provider-\""), "{out}");
        assert!(out.contains("[REDACTED]") && out.ends_with("data: [DONE]\n\n"), "{out}");
    }

    #[test]
    fn json_values_are_redacted_everywhere() {
        let r = Redactor::new(["secret-value-1"]);
        let mut v = serde_json::json!({"a": ["x secret-value-1 y"], "secret-value-1": {"b": "secret-value-1"}, "n": 1});
        r.value(&mut v);
        assert_eq!(v, serde_json::json!({"a": ["x [REDACTED] y"], "[REDACTED]": {"b": "[REDACTED]"}, "n": 1}));
    }

    #[test]
    fn the_log_writer_redacts_installed_secrets() {
        install(vec!["log-writer-secret-77".into()]);
        let mut w = Writer(Vec::new());
        std::io::Write::write_all(&mut w, b"WARN retrying error=\"bad key log-writer-secret-77\"\n").unwrap();
        assert_eq!(String::from_utf8(w.0).unwrap(), "WARN retrying error=\"bad key [REDACTED]\"\n");
    }
}
