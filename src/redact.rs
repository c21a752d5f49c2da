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
//! characters) is redacted too.

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
        if let Some(ac) = &self.secrets
            && ac.is_match(text)
        {
            let mut s = String::with_capacity(text.len());
            ac.replace_all_with(text, &mut s, |_, _, dst| {
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
