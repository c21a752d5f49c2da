//! An upstream SSE event's data, kept in the bytes it came in. An event of
//! one `data:` line (what vendors send for every chunk) is a slice of the
//! read it arrived in, neither copied nor checked for UTF-8 here: the fast
//! path checks only the text it reads, the parser the rest. Such an event
//! also knows its whole wire form, so one forwarded as it came is written
//! as it came.

use std::borrow::Cow;

use bytes::Bytes;

/// One event's `data`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Data {
    /// The event as it was read, or only its data.
    bytes: Bytes,
    /// Where the data is in `bytes`.
    start: usize,
    end: usize,
    /// Read from an event of one `data:` line: no line break in it.
    line: bool,
}

/// What the SSE grammar's `data: ` line adds around the data.
const PREFIX: &[u8] = b"data: ";
const SUFFIX: &[u8] = b"\n\n";

impl Data {
    /// The data of an event of one `data:` line read whole,
    /// `event[start..end]` (which holds no line break).
    pub fn in_event(event: Bytes, start: usize, end: usize) -> Self {
        let end = end.min(event.len());
        Data { bytes: event, start: start.min(end), end, line: true }
    }

    /// Known to hold no line break.
    pub fn one_line(&self) -> bool {
        self.line
    }

    pub fn bytes(&self) -> &[u8] {
        &self.bytes[self.start..self.end]
    }

    pub fn len(&self) -> usize {
        self.end - self.start
    }

    pub fn is_empty(&self) -> bool {
        self.start == self.end
    }

    /// The data as text, with any byte that is not UTF-8 replaced (for a
    /// recording, the console, an error message).
    pub fn lossy(&self) -> Cow<'_, str> {
        String::from_utf8_lossy(self.bytes())
    }

    /// The whole event when it was read as exactly `data: <data>\n\n`: what
    /// sending the data on as one event writes.
    pub fn event(&self) -> Option<&Bytes> {
        let whole = self.start == PREFIX.len()
            && self.end + SUFFIX.len() == self.bytes.len()
            && self.bytes.starts_with(PREFIX)
            && self.bytes.ends_with(SUFFIX);
        whole.then_some(&self.bytes)
    }
}

impl From<String> for Data {
    fn from(s: String) -> Self {
        let end = s.len();
        Data { bytes: Bytes::from(s), start: 0, end, line: false }
    }
}

impl PartialEq<str> for Data {
    fn eq(&self, other: &str) -> bool {
        self.bytes() == other.as_bytes()
    }
}

impl PartialEq<&str> for Data {
    fn eq(&self, other: &&str) -> bool {
        self.bytes() == other.as_bytes()
    }
}

impl From<&str> for Data {
    fn from(s: &str) -> Self {
        Data::from(s.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_event_read_whole_is_its_own_wire_form() {
        let ev = Bytes::from_static(b"data: {\"a\":1}\n\n");
        let d = Data::in_event(ev.clone(), 6, ev.len() - 2);
        assert_eq!(d.bytes(), b"{\"a\":1}");
        assert_eq!(d.event(), Some(&ev));
        // Without the space, or with only the data, it is written anew.
        let bare = Bytes::from_static(b"data:{\"a\":1}\n\n");
        assert_eq!(Data::in_event(bare.clone(), 5, bare.len() - 2).event(), None);
        assert_eq!(Data::from("{\"a\":1}").event(), None);
        assert_eq!(Data::from("{\"a\":1}").bytes(), b"{\"a\":1}");
        assert_eq!(Data::in_event(ev, 40, 50).bytes(), b"");
    }
}
