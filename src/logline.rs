//! How a log line's time and the fields of a text line are written: the same bytes as
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

/// A line's time as tracing-subscriber's `SystemTime` writes it
/// (`2026-12-05T10:09:11.123456Z`), with the date and time of the current
/// second kept per thread: lines in the same second format only their
/// microseconds.
#[derive(Debug, Default, Clone, Copy)]
pub struct Clock;

thread_local! {
    static SECOND: std::cell::Cell<(u64, [u8; 19])> = const { std::cell::Cell::new((u64::MAX, [0; 19])) };
}

impl tracing_subscriber::fmt::time::FormatTime for Clock {
    fn format_time(&self, w: &mut Writer<'_>) -> fmt::Result {
        let since = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        let secs = since.as_secs();
        let (cached, mut text) = SECOND.get();
        if cached != secs {
            match civil(secs) {
                Some(t) => text = t,
                // Past year 9999: the default's own format.
                None => return tracing_subscriber::fmt::time::SystemTime.format_time(w),
            }
            SECOND.set((secs, text));
        }
        let mut frac = *b".000000Z";
        let mut micros = since.subsec_micros();
        for d in frac[1..7].iter_mut().rev() {
            *d = b'0' + (micros % 10) as u8;
            micros /= 10;
        }
        // Both are ASCII digits and punctuation.
        w.write_str(std::str::from_utf8(&text).unwrap_or_default())?;
        w.write_str(std::str::from_utf8(&frac).unwrap_or_default())
    }
}

/// `YYYY-MM-DDTHH:MM:SS` of a Unix second (UTC, proleptic Gregorian), for
/// years up to 9999; the days-to-date step is Howard Hinnant's `civil_from_days`.
fn civil(secs: u64) -> Option<[u8; 19]> {
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let z = days as i64 + 719_468;
    let era = z / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    if year > 9999 {
        return None;
    }
    let mut out = *b"0000-00-00T00:00:00";
    let mut put = |at: usize, width: usize, mut v: i64| {
        for i in (at..at + width).rev() {
            out[i] = b'0' + (v % 10) as u8;
            v /= 10;
        }
    };
    put(0, 4, year);
    put(5, 2, month);
    put(8, 2, day);
    put(11, 2, (rem / 3_600) as i64);
    put(14, 2, (rem / 60 % 60) as i64);
    put(17, 2, (rem % 60) as i64);
    Some(out)
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

    fn civil_str(secs: u64) -> String {
        String::from_utf8(civil(secs).unwrap().to_vec()).unwrap()
    }

    #[test]
    fn the_clock_writes_the_defaults_time() {
        use tracing_subscriber::fmt::time::FormatTime as _;
        assert_eq!(civil_str(0), "1970-01-01T00:00:00");
        assert_eq!(civil_str(951_825_599), "2000-02-29T11:59:59");
        assert_eq!(civil_str(4_107_542_400), "2100-03-01T00:00:00");
        assert_eq!(civil_str(253_402_300_799), "9999-12-31T23:59:59");
        assert!(civil(253_402_300_800).is_none());
        // Now, through both (again if a second turned between them).
        for _ in 0..3 {
            let (mut a, mut b) = (String::new(), String::new());
            Clock.format_time(&mut Writer::new(&mut a)).unwrap();
            tracing_subscriber::fmt::time::SystemTime.format_time(&mut Writer::new(&mut b)).unwrap();
            assert_eq!(a.len(), b.len(), "{a} {b}");
            if a[..19] == b[..19] {
                return;
            }
        }
        panic!("the clock and the default disagree on the second");
    }

    proptest! {
        #[test]
        fn every_second_is_chronos(secs in 0u64..253_402_300_800) {
            let want = chrono::DateTime::from_timestamp(secs as i64, 0).unwrap().format("%Y-%m-%dT%H:%M:%S").to_string();
            prop_assert_eq!(civil_str(secs), want);
        }
    }
}
