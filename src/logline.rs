//! How the fields of a text log line are written: the same bytes as
//! tracing-subscriber's default, without its per-field `fmt` machinery for
//! the common case. Every request writes an access line and opens spans whose
//! fields are formatted when they open; through the default that was about a
//! fifth of a plain request's instructions (bench/results/issue50-ab.md).
//!
//! A plain string (printable ASCII, no quote or backslash) and a number are
//! written directly, other values by their `Debug` without the default's
//! styling calls; a message, an error, a string that needs escaping and a
//! terminal with colours go through the default visitor. A line reads exactly
//! as before (the property tests compare the two).

use std::fmt;

use tracing::field::{Field, Visit};
use tracing_subscriber::field::{MakeVisitor, VisitFmt, VisitOutput};
use tracing_subscriber::fmt::format::{DefaultVisitor, Writer};

/// The field formatter for `fmt::layer().fmt_fields(..)`.
#[derive(Debug, Default, Clone, Copy)]
pub struct Fields;

impl<'a> MakeVisitor<Writer<'a>> for Fields {
    type Visitor = Visitor<'a>;

    fn make_visitor(&self, target: Writer<'a>) -> Visitor<'a> {
        Visitor { plain: !target.has_ansi_escapes(), w: target, empty: true, result: Ok(()) }
    }
}

pub struct Visitor<'a> {
    w: Writer<'a>,
    /// No colours: the fast path writes no escape codes.
    plain: bool,
    empty: bool,
    result: fmt::Result,
}

/// Whether `{:?}` of `s` is `s` in quotes: printable ASCII that is not a
/// quote or a backslash.
fn plain_str(s: &str) -> bool {
    s.bytes().all(|b| (0x20..0x7f).contains(&b) && b != b'"' && b != b'\\')
}

impl Visitor<'_> {
    /// Whether this field may take the fast path: the default visitor treats
    /// `message`, raw identifiers and `log.` metadata specially.
    fn fast(&self, field: &Field) -> bool {
        let name = field.name();
        self.plain && self.result.is_ok() && name != "message" && !name.starts_with("r#") && !name.starts_with("log.")
    }

    fn name(&mut self, field: &Field) -> fmt::Result {
        if self.empty {
            self.empty = false;
        } else {
            self.w.write_char(' ')?;
        }
        self.w.write_str(field.name())?;
        self.w.write_char('=')
    }

    fn number(&mut self, field: &Field, digits: &str) {
        self.result = self.name(field).and_then(|()| self.w.write_str(digits));
    }

    /// Everything else: the default visitor, told whether a field came before.
    fn fallback(&mut self, field: &Field, visit: impl FnOnce(&mut DefaultVisitor<'_>)) {
        if self.result.is_err() {
            return;
        }
        let mut v = DefaultVisitor::new(self.w.by_ref(), self.empty);
        visit(&mut v);
        self.result = v.finish();
        if !field.name().starts_with("log.") {
            self.empty = false;
        }
    }
}

impl Visit for Visitor<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        if self.fast(field) && plain_str(value) {
            self.result = self.name(field).and_then(|()| {
                self.w.write_char('"')?;
                self.w.write_str(value)?;
                self.w.write_char('"')
            });
        } else {
            self.fallback(field, |v| v.record_str(field, value));
        }
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        if self.fast(field) {
            self.number(field, itoa::Buffer::new().format(value));
        } else {
            self.fallback(field, |v| v.record_u64(field, value));
        }
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        if self.fast(field) {
            self.number(field, itoa::Buffer::new().format(value));
        } else {
            self.fallback(field, |v| v.record_i64(field, value));
        }
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        if self.fast(field) {
            self.number(field, if value { "true" } else { "false" });
        } else {
            self.fallback(field, |v| v.record_bool(field, value));
        }
    }

    fn record_error(&mut self, field: &Field, value: &(dyn std::error::Error + 'static)) {
        self.fallback(field, |v| v.record_error(field, value));
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        if self.fast(field) {
            self.result = self.name(field).and_then(|()| write!(self.w, "{value:?}"));
        } else {
            self.fallback(field, |v| v.record_debug(field, value));
        }
    }
}

impl VisitOutput<fmt::Result> for Visitor<'_> {
    fn finish(self) -> fmt::Result {
        self.result
    }
}

impl VisitFmt for Visitor<'_> {
    fn writer(&mut self) -> &mut dyn fmt::Write {
        &mut self.w
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::sync::{Arc, Mutex};
    use tracing_subscriber::fmt::MakeWriter;
    use tracing_subscriber::layer::SubscriberExt as _;

    #[derive(Clone, Default)]
    struct Lines(Arc<Mutex<Vec<u8>>>);
    impl std::io::Write for Lines {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    impl<'a> MakeWriter<'a> for Lines {
        type Writer = Lines;
        fn make_writer(&'a self) -> Lines {
            self.clone()
        }
    }

    /// The text one event inside one span makes, through `fields` or the default.
    fn line(fast: bool, s: &str, n: u64, i: i64, b: bool, ansi: bool) -> String {
        let out = Lines::default();
        let layer = tracing_subscriber::fmt::layer().with_writer(out.clone()).with_ansi(ansi).without_time();
        let emit = || {
            let span = tracing::info_span!("request", id = s, n, url.path = %s, code = tracing::field::Empty);
            span.record("code", i);
            let _in = span.enter();
            let err = std::io::Error::other(s.to_string());
            tracing::info!(key = s, n, i, b, shown = %s, dbg = ?s, error = &err as &dyn std::error::Error, "said {s}");
            tracing::warn!(r#type = s, "{}", n);
        };
        if fast {
            tracing::subscriber::with_default(tracing_subscriber::registry().with(layer.fmt_fields(Fields)), emit);
        } else {
            tracing::subscriber::with_default(tracing_subscriber::registry().with(layer), emit);
        }
        String::from_utf8(out.0.lock().unwrap().clone()).unwrap()
    }

    #[test]
    fn a_plain_line_is_the_defaults() {
        let fast = line(true, "req-1", 7, -3, true, false);
        assert_eq!(fast, line(false, "req-1", 7, -3, true, false));
        assert!(fast.contains(r#"request{id="req-1" n=7 url.path=req-1 code=-3}"#), "{fast}");
        assert!(fast.contains(r#"key="req-1" n=7 i=-3 b=true"#), "{fast}");
    }

    proptest! {
        #[test]
        fn every_line_is_the_defaults(s in any::<String>(), n: u64, i: i64, b: bool, ansi: bool) {
            prop_assert_eq!(line(true, &s, n, i, b, ansi), line(false, &s, n, i, b, ansi));
        }

        #[test]
        fn ascii_lines_are_the_defaults(s in "[ -~\t\n]{0,40}", n: u64, i: i64, b: bool) {
            prop_assert_eq!(line(true, &s, n, i, b, false), line(false, &s, n, i, b, false));
        }
    }
}
