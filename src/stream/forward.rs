//! The fast paths' reading of an upstream answer: one borrowed pass over a
//! streamed chunk that finds whether it is a plain content delta, the kind of
//! chunk the normalizer forwards unchanged (see
//! [`Normalizer::forward`](super::Normalizer::forward)), and the same for a
//! whole answer that is plain text ([`Whole`], see
//! [`Normalizer::whole_as_is`](super::Normalizer::whole_as_is)). Nothing is
//! built: the strings point into the payload, fields that do not matter are
//! skipped, and anything unusual (a second choice, reasoning, tool calls, a
//! `null` where the full path drops the key, an escaped id) is simply "not
//! plain", for the full path.

use std::borrow::Cow;
use std::fmt;

use bytes::{Bytes, BytesMut};

use serde::Deserialize;
use serde::de::{self, Deserializer, IgnoredAny, SeqAccess, Visitor};

use super::data::Data;
use crate::toolcall::Lead;

/// What the fast path needs to know of a chunk.
#[derive(Deserialize)]
pub(super) struct Plain<'a> {
    #[serde(borrow)]
    pub id: &'a str,
    #[serde(borrow)]
    pub object: &'a str,
    pub created: u64,
    #[serde(borrow)]
    pub model: &'a str,
    #[serde(borrow)]
    choices: One<Choice<'a>>,
    #[serde(default)]
    usage: Seen,
}

#[derive(Deserialize)]
struct Choice<'a> {
    index: u32,
    #[serde(borrow)]
    delta: Msg<'a, Role>,
    #[serde(default)]
    finish_reason: Null,
}

/// A delta (`R` = [`Role`]: only the first may say it) or a whole message
/// (`R` = the role): its text, and whether a key the normalizer rewrites is
/// there.
#[derive(Deserialize)]
struct Msg<'a, R> {
    #[serde(borrow)]
    content: Option<Text<'a>>,
    #[serde(default)]
    role: R,
    #[serde(default)]
    reasoning_content: Seen,
    #[serde(default)]
    reasoning: Seen,
    #[serde(default)]
    tool_calls: Seen,
}

impl<R> Msg<'_, R> {
    /// Reasoning or tool-call keys, even `null` (the full path drops those).
    fn rewritten(&self) -> bool {
        self.reasoning_content.0 || self.reasoning.0 || self.tool_calls.0
    }

    fn text(&self) -> &str {
        self.content.as_ref().map_or("", |t| &t.0)
    }
}

impl<'a> Plain<'a> {
    /// The chunk, when it has exactly one choice whose delta is only
    /// non-empty `content` (other keys pass through the full path untouched
    /// too) and perhaps `role: "assistant"` (see [`says_role`](Self::says_role)),
    /// `finish_reason: null`, and no `usage`.
    pub fn read(payload: &'a [u8]) -> Option<Self> {
        // Checked whole, once: serde's reader of bytes checks every string
        // on its own, which costs more over a chunk's many short ones.
        let p: Plain<'a> = serde_json::from_str(std::str::from_utf8(payload).ok()?).ok()?;
        let d = &p.choices.0.delta;
        let plain = p.choices.0.finish_reason.0
            && !d.text().is_empty()
            && d.role != Role::Other
            && !(p.usage.0 || d.rewritten());
        plain.then_some(p)
    }

    /// Whether the delta says `role: "assistant"`: the full path writes
    /// that on a choice's first delta and drops it from every other.
    pub fn says_role(&self) -> bool {
        self.choices.0.delta.role == Role::Assistant
    }

    pub fn index(&self) -> u32 {
        self.choices.0.index
    }

    pub fn content(&self) -> &str {
        self.choices.0.delta.text()
    }

    /// Where the content's text starts in `payload`, when it is written there
    /// as it is (no escapes), so it can be replaced in place.
    pub fn content_at(&self, payload: &[u8]) -> Option<usize> {
        match &self.choices.0.delta.content.as_ref()?.0 {
            Cow::Borrowed(c) => {
                // The borrowed string points into the payload.
                let at = (c.as_ptr() as usize).checked_sub(payload.as_ptr() as usize)?;
                (payload.get(at..at + c.len()) == Some(c.as_bytes())).then_some(at)
            }
            Cow::Owned(_) => None,
        }
    }
}

/// The bytes around the text of a plain delta ([`Plain::read`] said so, with
/// the text written as it is): a later chunk with the same bytes around a
/// non-empty string without quote, backslash or control character parses
/// the same but for its text, so its text is found by comparing bytes, not
/// by parsing (a model streams every delta in one shape).
pub(super) struct Template {
    prefix: Box<[u8]>,
    suffix: Box<[u8]>,
}

impl Template {
    /// From a plain delta whose text is `payload[at..at + len]`.
    pub fn of(payload: &[u8], at: usize, len: usize) -> Box<Self> {
        let (prefix, rest) = payload.split_at(at.min(payload.len()));
        let suffix = rest.get(len..).unwrap_or_default();
        Box::new(Template { prefix: prefix.into(), suffix: suffix.into() })
    }

    /// The text of `payload` when it fits the template.
    pub fn content<'p>(&self, payload: &'p [u8]) -> Option<&'p str> {
        let text = payload.strip_prefix(&*self.prefix)?.strip_suffix(&*self.suffix)?;
        let plain = !text.is_empty() && !text.iter().any(|b| *b == b'"' || *b == b'\\' || *b < 0x20);
        if !plain {
            return None;
        }
        // Only the text needs the check: the bytes around it are the template's.
        std::str::from_utf8(text).ok()
    }

    /// Where a fitting payload's text starts.
    pub fn at(&self) -> usize {
        self.prefix.len()
    }
}

/// A payload the fast path sends on (see
/// [`Normalizer::forward`](super::Normalizer::forward)): as it came, or with
/// its content's text reshaped in place.
#[derive(Debug, Clone)]
pub enum Forwarded {
    AsIs(Data),
    /// The text at `at..at + len` replaced by `lead` (whitespace held from
    /// earlier deltas) and the text's first `keep` bytes.
    Reshaped {
        data: Data,
        at: usize,
        len: usize,
        lead: Lead,
        keep: usize,
    },
}

impl Forwarded {
    /// The event as the upstream wrote it, when that is what goes out.
    pub fn event(&self) -> Option<&Bytes> {
        match self {
            Forwarded::AsIs(d) => d.event(),
            Forwarded::Reshaped { .. } => None,
        }
    }

    /// Whether the payload holds no line break (JSON may have one between
    /// tokens, from an event of several `data:` lines).
    pub fn one_line(&self) -> bool {
        let d = match self {
            Forwarded::AsIs(d) | Forwarded::Reshaped { data: d, .. } => d,
        };
        d.one_line() || memchr::memchr2(b'\n', b'\r', d.bytes()).is_none()
    }

    /// The payload's length as sent.
    pub fn size(&self) -> usize {
        match self {
            Forwarded::AsIs(d) => d.len(),
            Forwarded::Reshaped { data, len, lead, keep, .. } => data.len() - len + keep + escaped_len(lead.as_bytes()),
        }
    }

    /// Appends the whole event (`data: <payload>\n\n`), when the payload
    /// is one line ([`one_line`](Self::one_line)): the upstream's own bytes
    /// when it came as such an event and goes out as it came.
    pub fn write_event(&self, out: &mut BytesMut) {
        if let Some(ev) = self.event() {
            out.extend_from_slice(ev);
            return;
        }
        out.extend_from_slice(b"data: ");
        self.write(out);
        out.extend_from_slice(b"\n\n");
    }

    /// Appends the payload as sent.
    pub fn write(&self, out: &mut BytesMut) {
        match self {
            Forwarded::AsIs(d) => out.extend_from_slice(d.bytes()),
            Forwarded::Reshaped { data, at, len, lead, keep } => {
                let b = data.bytes();
                // The normalizer made the offsets from these bytes; were they
                // ever off, the payload would go out as it came, not panic.
                let (Some(head), Some(body), Some(tail)) = (b.get(..*at), b.get(*at..*at + *keep), b.get(*at + *len..))
                else {
                    out.extend_from_slice(b);
                    return;
                };
                out.extend_from_slice(head);
                escape_into(lead.as_bytes(), out);
                out.extend_from_slice(body);
                out.extend_from_slice(tail);
            }
        }
    }

    /// The payload as sent: the upstream's bytes themselves when it goes
    /// out as it came.
    pub fn payload(&self) -> Cow<'_, [u8]> {
        match self {
            Forwarded::AsIs(d) => Cow::Borrowed(d.bytes()),
            Forwarded::Reshaped { .. } => {
                let mut out = BytesMut::with_capacity(self.size());
                self.write(&mut out);
                Cow::Owned(out.to_vec())
            }
        }
    }

    /// The payload as sent, as text.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.payload()).into_owned()
    }
}

/// Whitespace as it is written inside a JSON string: the control
/// characters escaped, everything else (UTF-8) as it is.
fn escape_into(ws: &[u8], out: &mut BytesMut) {
    for &b in ws {
        match b {
            b'\n' => out.extend_from_slice(b"\\n"),
            b'\r' => out.extend_from_slice(b"\\r"),
            b'\t' => out.extend_from_slice(b"\\t"),
            b if b < 0x20 => out.extend_from_slice(format!("\\u{b:04x}").as_bytes()),
            b => out.extend_from_slice(&[b]),
        }
    }
}

fn escaped_len(ws: &[u8]) -> usize {
    ws.iter()
        .map(|&b| match b {
            b'\n' | b'\r' | b'\t' => 2,
            b if b < 0x20 => 6,
            _ => 1,
        })
        .sum()
}

/// What the fast path needs to know of a whole (non-streamed) answer.
#[derive(Deserialize)]
pub(super) struct Whole<'a> {
    #[serde(borrow)]
    id: &'a str,
    #[serde(borrow)]
    object: &'a str,
    created: u64,
    #[serde(borrow, rename = "model")]
    _model: &'a str,
    #[serde(borrow)]
    choices: One<WholeChoice<'a>>,
    #[serde(default)]
    usage: Usage,
}

#[derive(Deserialize)]
struct WholeChoice<'a> {
    #[serde(rename = "index")]
    _index: u32,
    #[serde(borrow)]
    message: Msg<'a, &'a str>,
    #[serde(borrow)]
    finish_reason: &'a str,
}

/// The token counts of an answer's `usage`, for the metrics.
#[derive(Deserialize, Default, Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tokens {
    pub prompt_tokens: Option<u64>,
    pub completion_tokens: Option<u64>,
    /// `prompt_tokens_details.cached_tokens` (billed at the cached price).
    #[serde(default)]
    pub cached_tokens: Option<u64>,
}

/// An answer's `usage`: absent, `null` (which the full path drops), an
/// object with token counts, or one the full path would rewrite (a vendor's
/// names for them, see [`super::usage`]).
#[derive(Default)]
enum Usage {
    #[default]
    Absent,
    Null,
    Tokens(Tokens),
    Vendor,
}

/// The fields of `usage` the fast path must know of.
#[derive(Deserialize)]
struct UsageFields {
    prompt_tokens: Option<u64>,
    completion_tokens: Option<u64>,
    total_tokens: Option<serde::de::IgnoredAny>,
    prompt_cache_hit_tokens: Option<serde::de::IgnoredAny>,
    cached_tokens: Option<serde::de::IgnoredAny>,
    reasoning_tokens: Option<serde::de::IgnoredAny>,
    prompt_tokens_details: Option<Details>,
}

#[derive(Deserialize)]
struct Details {
    cached_tokens: Option<u64>,
}

impl<'de> Deserialize<'de> for Usage {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Ok(match Option::<UsageFields>::deserialize(d)? {
            None => Usage::Null,
            Some(u)
                if u.prompt_cache_hit_tokens.is_some() || u.cached_tokens.is_some() || u.reasoning_tokens.is_some() =>
            {
                Usage::Vendor
            }
            Some(u) if u.total_tokens.is_none() && u.prompt_tokens.is_some() => Usage::Vendor,
            Some(u) => Usage::Tokens(Tokens {
                prompt_tokens: u.prompt_tokens,
                completion_tokens: u.completion_tokens,
                cached_tokens: u.prompt_tokens_details.and_then(|d| d.cached_tokens),
            }),
        })
    }
}

impl<'a> Whole<'a> {
    /// The answer, when it is OpenAI's `chat.completion` with its id and
    /// `created`, exactly one choice, and an assistant message of text only
    /// (no reasoning or tool-call keys, not even `null`), with a finish
    /// reason and no `usage: null` (the full path drops that key) nor vendor
    /// usage fields (the full path adds OpenAI's).
    pub fn read(body: &'a [u8]) -> Option<Self> {
        let w: Whole<'a> = serde_json::from_slice(body).ok()?;
        let m = &w.choices.0.message;
        let plain = !w.id.is_empty()
            && w.object == "chat.completion"
            && w.created != 0
            && !matches!(w.usage, Usage::Null | Usage::Vendor)
            && m.role == "assistant"
            && m.content.is_some()
            && !m.rewritten();
        plain.then_some(w)
    }

    pub fn content(&self) -> &str {
        self.choices.0.message.text()
    }

    pub fn has_usage(&self) -> bool {
        !matches!(self.usage, Usage::Absent)
    }

    /// The token counts of its `usage` (none without one).
    pub fn tokens(&self) -> Tokens {
        match self.usage {
            Usage::Tokens(t) => t,
            _ => Tokens::default(),
        }
    }

    pub fn finish_reason(&self) -> &str {
        self.choices.0.finish_reason
    }
}

/// A string, borrowed from the payload unless it had escapes. (serde's own
/// `Cow` always copies, and `#[serde(borrow)]` does not reach into an
/// `Option`.)
struct Text<'a>(Cow<'a, str>);

impl<'de: 'a, 'a> Deserialize<'de> for Text<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> Visitor<'de> for V<'a> {
            type Value = Text<'a>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Text<'a>, E> {
                Ok(Text(Cow::Borrowed(v)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Text<'a>, E> {
                Ok(Text(Cow::Owned(v.to_owned())))
            }
        }
        d.deserialize_str(V(std::marker::PhantomData))
    }
}

/// A delta's `role`: absent, `"assistant"`, or anything else (`null`
/// included, which the full path drops).
#[derive(Default, PartialEq, Eq, Clone, Copy)]
enum Role {
    #[default]
    Absent,
    Assistant,
    Other,
}

impl<'de> Deserialize<'de> for Role {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Role;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a role")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Role, E> {
                Ok(if v == "assistant" { Role::Assistant } else { Role::Other })
            }
            fn visit_unit<E: de::Error>(self) -> Result<Role, E> {
                Ok(Role::Other)
            }
            fn visit_none<E: de::Error>(self) -> Result<Role, E> {
                Ok(Role::Other)
            }
        }
        d.deserialize_any(V)
    }
}

/// Whether the key was there at all (any value, `null` included).
#[derive(Default)]
struct Seen(bool);

impl<'de> Deserialize<'de> for Seen {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        IgnoredAny::deserialize(d)?;
        Ok(Seen(true))
    }
}

/// Whether the key was there with the value `null` (an absent key is not).
#[derive(Default)]
struct Null(bool);

impl<'de> Deserialize<'de> for Null {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Ok(Null(Option::<IgnoredAny>::deserialize(d)?.is_none()))
    }
}

/// An array of exactly one element, without a `Vec`.
struct One<T>(T);

impl<'de, T: Deserialize<'de>> Deserialize<'de> for One<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<T>(std::marker::PhantomData<T>);
        impl<'de, T: Deserialize<'de>> Visitor<'de> for V<T> {
            type Value = One<T>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an array of one element")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<One<T>, A::Error> {
                let first = seq.next_element()?.ok_or_else(|| de::Error::invalid_length(0, &self))?;
                match seq.next_element::<IgnoredAny>()? {
                    None => Ok(One(first)),
                    Some(_) => Err(de::Error::invalid_length(2, &self)),
                }
            }
        }
        d.deserialize_seq(V(std::marker::PhantomData))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PLAIN: &str = r#"{"id":"c1","object":"chat.completion.chunk","created":7,"model":"m","system_fingerprint":"fp","choices":[{"index":0,"delta":{"content":"Hi"},"logprobs":null,"finish_reason":null}]}"#;

    #[test]
    fn reads_a_plain_content_delta() {
        let p = Plain::read(PLAIN.as_bytes())
            .map(|p| (p.id, p.object, p.created, p.model, p.index(), p.content().to_string()));
        assert_eq!(p, Some(("c1", "chat.completion.chunk", 7, "m", 0, "Hi".to_string())));
        let escaped = PLAIN.replace(r#""Hi""#, r#""a\nb\u00e9""#);
        assert_eq!(Plain::read(escaped.as_bytes()).map(|p| p.content().to_string()), Some("a\nbé".to_string()));
        assert_eq!(Plain::read(PLAIN.as_bytes()).map(|p| p.says_role()), Some(false));
        let first = PLAIN.replace(r#""content":"Hi""#, r#""role":"assistant","content":"Hi""#);
        assert_eq!(Plain::read(first.as_bytes()).map(|p| p.says_role()), Some(true));
    }

    #[test]
    fn content_is_replaced_in_place() {
        // (A `const` may be a different copy at each use: one string here.)
        let payload = PLAIN.to_string();
        let p = Plain::read(payload.as_bytes())
            .and_then(|p| p.content_at(payload.as_bytes()).map(|at| (at, p.content().len())));
        let Some((at, len)) = p else { panic!("plain") };
        let lead = Lead::new("\n \t\u{b}\u{3000}");
        let f = Forwarded::Reshaped { data: Data::from(payload.as_str()), at, len, lead, keep: 1 };
        let out = f.text();
        assert_eq!(out.len(), f.size());
        let v: serde_json::Value = serde_json::from_str(&out).unwrap_or_default();
        assert_eq!(v["choices"][0]["delta"]["content"], "\n \t\u{b}\u{3000}H");
        let escaped = PLAIN.replace(r#""Hi""#, r#""H\u0069""#);
        assert_eq!(Plain::read(escaped.as_bytes()).and_then(|p| p.content_at(escaped.as_bytes())), None);
    }

    #[test]
    fn an_event_forwarded_as_it_came_is_written_as_it_came() {
        let ev = Bytes::from(format!("data: {PLAIN}\n\n"));
        let f = Forwarded::AsIs(Data::in_event(ev.clone(), 6, ev.len() - 2));
        assert_eq!(f.event(), Some(&ev));
        assert!(f.one_line());
        assert_eq!((f.text(), f.size()), (PLAIN.to_string(), PLAIN.len()));
        let lines = Forwarded::AsIs(Data::from(PLAIN.replace(",", ",\n")));
        assert!(!lines.one_line());
    }

    /// A reshaped payload is the same event whether the upstream sent it as
    /// one `data: ` line or in another shape.
    #[test]
    fn a_reshaped_event_is_the_same_whatever_shape_it_came_in() {
        let at = PLAIN.find("Hi").unwrap_or_default();
        let ev = Bytes::from(format!("data: {PLAIN}\n\n"));
        for (lead, keep) in [("", 1), (" ", 2), ("\n\t", 0), ("\u{3000} ", 1)] {
            let reshaped = |data| Forwarded::Reshaped { data, at, len: 2, lead: Lead::new(lead), keep };
            let read = reshaped(Data::in_event(ev.clone(), 6, ev.len() - 2));
            let framed = reshaped(Data::from(PLAIN));
            let (mut a, mut b) = (BytesMut::new(), BytesMut::new());
            read.write_event(&mut a);
            framed.write_event(&mut b);
            assert_eq!(a, b, "{lead:?}");
            assert_eq!(a, format!("data: {}\n\n", read.text()).as_bytes(), "{lead:?}");
            let v: serde_json::Value = serde_json::from_str(&read.text()).unwrap_or_default();
            assert_eq!(v["choices"][0]["delta"]["content"], format!("{lead}{}", &"Hi"[..keep]));
        }
    }

    #[test]
    fn anything_else_is_not_plain() {
        for (from, to) in [
            (r#""content":"Hi""#, r#""content":"""#),
            (r#""content":"Hi""#, r#""content":null"#),
            (r#""content":"Hi""#, r#""role":"user","content":"Hi""#),
            (r#""content":"Hi""#, r#""role":null,"content":"Hi""#),
            (r#""content":"Hi""#, r#""content":"Hi","reasoning_content":null"#),
            (r#""content":"Hi""#, r#""content":"Hi","reasoning":"r""#),
            (r#""content":"Hi""#, r#""content":"Hi","tool_calls":[]"#),
            (r#""content":"Hi""#, r#""content":"Hi","content":"Ho""#),
            (r#""finish_reason":null"#, r#""finish_reason":"stop""#),
            (r#","finish_reason":null"#, ""),
            (r#""index":0,"#, ""),
            (r#""id":"c1""#, r#""id":"c\u0031""#),
            (r#""created":7"#, r#""created":-1"#),
            (r#""model":"m","#, r#""model":"m","usage":null,"#),
            (r#"}]}"#, r#"},{"index":1,"delta":{"content":"x"},"finish_reason":null}]}"#),
            (r#""choices":[{"#, r#""choices":[],"x":[{"#),
        ] {
            let chunk = PLAIN.replace(from, to);
            assert_ne!(chunk, PLAIN, "{from}");
            assert!(Plain::read(chunk.as_bytes()).is_none(), "{chunk}");
        }
        assert!(Plain::read(b"{\"error\":{\"message\":\"x\"}}").is_none());
        assert!(Plain::read(b"not json").is_none());
    }

    const WHOLE: &str = r#"{"id":"c1","object":"chat.completion","created":7,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"Hi","refusal":null},"logprobs":null,"finish_reason":"stop"}],"usage":{"total_tokens":3}}"#;

    #[test]
    fn reads_a_plain_whole_answer() {
        let w =
            Whole::read(WHOLE.as_bytes()).map(|w| (w.content().to_string(), w.finish_reason().to_string(), w.tokens()));
        let tokens = Tokens { prompt_tokens: None, completion_tokens: None, cached_tokens: None };
        assert_eq!(w, Some(("Hi".to_string(), "stop".to_string(), tokens)));
        let counted =
            WHOLE.replace(r#"{"total_tokens":3}"#, r#"{"prompt_tokens":1,"completion_tokens":2,"total_tokens":3}"#);
        let tokens = Whole::read(counted.as_bytes()).map(|w| w.tokens());
        assert_eq!(tokens, Some(Tokens { prompt_tokens: Some(1), completion_tokens: Some(2), cached_tokens: None }));
        for (from, to) in [
            (r#""content":"Hi""#, r#""content":null"#),
            (r#""content":"Hi""#, r#""content":"Hi","tool_calls":null"#),
            (r#""content":"Hi""#, r#""content":"Hi","reasoning_content":null"#),
            (r#""content":"Hi""#, r#""content":"Hi","reasoning":"r""#),
            (r#""role":"assistant","#, ""),
            (r#""index":0,"#, ""),
            (r#""finish_reason":"stop""#, r#""finish_reason":null"#),
            (r#""usage":{"total_tokens":3}"#, r#""usage":null"#),
            // Usage the full path completes (a vendor's cache field, no total).
            (r#""usage":{"total_tokens":3}"#, r#""usage":{"total_tokens":3,"prompt_cache_hit_tokens":1}"#),
            (r#""usage":{"total_tokens":3}"#, r#""usage":{"prompt_tokens":1}"#),
            (r#""id":"c1""#, r#""id":"""#),
            (r#""created":7"#, r#""created":0"#),
            (r#""object":"chat.completion""#, r#""object":"chat.completion.chunk""#),
            (r#""model":"m","#, ""),
            (r#"}],"#, r#"},{"index":1,"message":{"role":"assistant","content":"x"},"finish_reason":"stop"}],"#),
        ] {
            let body = WHOLE.replace(from, to);
            assert_ne!(body, WHOLE, "{from}");
            assert!(Whole::read(body.as_bytes()).is_none(), "{body}");
        }
    }

    #[test]
    fn a_template_reads_only_deltas_shaped_as_the_one_it_was_made_of() {
        let payload = PLAIN.replace("\"Hi\"", "\"Hello\"");
        let p = Plain::read(payload.as_bytes()).expect("plain");
        let at = p.content_at(payload.as_bytes()).expect("as it is");
        let t = Template::of(payload.as_bytes(), at, p.content().len());
        let with = |text: &str| PLAIN.replace("\"Hi\"", &format!("\"{text}\""));
        let content = |payload: String| t.content(payload.as_bytes()).map(str::to_string);
        assert_eq!(content(with("next words")).as_deref(), Some("next words"));
        assert_eq!(t.at(), at);
        assert_eq!(content(with("東京")).as_deref(), Some("東京"));
        // Escapes, a quote that would end the string, control characters and
        // no text go to the parser.
        for odd in ["a\\nb", "a\\\"b", "a\"b", "a\u{1}b", ""] {
            assert_eq!(content(with(odd)), None, "{odd:?}");
        }
        assert_eq!(content(with("x").replace("\"c1\"", "\"c2\"")), None, "another id");
        assert_eq!(content(with("x").replace("null}]}", "\"stop\"}]}")), None, "a finish reason");
        // Bytes that are not UTF-8 in the text are not taken.
        let mut odd = with("ab").into_bytes();
        let i = at + 1;
        odd[i] = 0xff;
        assert_eq!(t.content(&odd), None);
    }
}
