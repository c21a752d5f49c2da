//! `[limits]`: what one request may weigh (body bytes, messages, tools), how
//! long a client may take to send it, how many connections and requests
//! run at once, how large an upstream answer may grow, and how long
//! shutdown waits for them. The
//! counts are read by a cheap pre-scan of the body ([`peek`]) so the chat
//! handler stays as it is.

pub use crate::config::limits::{LimitsConfig, secs};
use serde::Deserialize;
use serde::de::IgnoredAny;

/// The fields of a chat request the edge checks, read without building the
/// request (sizes only; the handler does the real parse and its 400s).
#[derive(Debug, Default)]
pub struct Peek {
    pub model: Option<String>,
    /// `max_tokens` (or `max_completion_tokens`, `max_output_tokens`): what
    /// a budget reserves for the answer.
    pub max_tokens: Option<u64>,
    messages: Option<Counted>,
    tools: Option<Counted>,
}

/// Why a body has no [`Peek`].
#[derive(Debug, PartialEq)]
pub enum PeekError {
    /// A top-level key appears twice. Parsers disagree on which one wins
    /// (the pre-scan read the first, the handler's parse the last), so the
    /// limits and the model allow-list could be checked on another value
    /// than the one served: refused with a 400.
    Duplicate(String),
    /// Not a JSON object with a string `model` (the handler reports that precisely).
    Unreadable,
}

/// A top-level key, borrowed from the body when it has no escapes.
struct Key<'de>(std::borrow::Cow<'de, str>);

impl<'de> Deserialize<'de> for Key<'de> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = Key<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Key<'de>, E> {
                Ok(Key(std::borrow::Cow::Borrowed(v)))
            }
            fn visit_str<E>(self, v: &str) -> Result<Key<'de>, E> {
                Ok(Key(std::borrow::Cow::Owned(v.to_string())))
            }
        }
        d.deserialize_str(V)
    }
}

/// The top-level object: the three fields read, every key checked for a
/// repeat (a duplicate is reported as `Err` inside, so serde's own error
/// cannot be confused with it).
struct Scan(Result<Peek, String>);

impl<'de> Deserialize<'de> for Scan {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = Scan;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Scan, A::Error> {
                let mut seen: std::collections::HashSet<std::borrow::Cow<'de, str>, foldhash::fast::RandomState> =
                    Default::default();
                let mut peek = Peek::default();
                while let Some(Key(k)) = map.next_key::<Key<'de>>()? {
                    match k.as_ref() {
                        "model" => peek.model = map.next_value()?,
                        "messages" => peek.messages = map.next_value()?,
                        "tools" => peek.tools = map.next_value()?,
                        "max_tokens" | "max_completion_tokens" | "max_output_tokens" => {
                            if let Some(n) = map.next_value::<Counted>()?.1 {
                                peek.max_tokens = Some(n);
                            }
                        }
                        _ => {
                            map.next_value::<IgnoredAny>()?;
                        }
                    }
                    if !seen.insert(k.clone()) {
                        // Read to the end only so the object closes.
                        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                        return Ok(Scan(Err(k.into_owned())));
                    }
                }
                Ok(Scan(Ok(peek)))
            }
        }
        d.deserialize_map(V)
    }
}

/// A JSON array's length (anything else counts 0, left to the handler),
/// and a whole number's value.
#[derive(Debug, Default)]
struct Counted(usize, Option<u64>);

impl<'de> Deserialize<'de> for Counted {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = Counted;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Counted, A::Error> {
                let mut n = 0;
                while seq.next_element::<IgnoredAny>()?.is_some() {
                    n += 1;
                }
                Ok(Counted(n, None))
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Counted, A::Error> {
                while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                Ok(Counted(0, None))
            }
            fn visit_unit<E>(self) -> Result<Counted, E> {
                Ok(Counted(0, None))
            }
            fn visit_bool<E>(self, _: bool) -> Result<Counted, E> {
                Ok(Counted(0, None))
            }
            fn visit_i64<E>(self, _: i64) -> Result<Counted, E> {
                Ok(Counted(0, None))
            }
            fn visit_u64<E>(self, n: u64) -> Result<Counted, E> {
                Ok(Counted(0, Some(n)))
            }
            fn visit_f64<E>(self, _: f64) -> Result<Counted, E> {
                Ok(Counted(0, None))
            }
            fn visit_str<E>(self, _: &str) -> Result<Counted, E> {
                Ok(Counted(0, None))
            }
            fn visit_none<E>(self) -> Result<Counted, E> {
                Ok(Counted(0, None))
            }
        }
        d.deserialize_any(V)
    }
}

impl Peek {
    /// Reads the body.
    pub fn of(body: &[u8]) -> Result<Peek, PeekError> {
        let mut de = serde_json::Deserializer::from_slice(body);
        let scan = Scan::deserialize(&mut de).map_err(|_| PeekError::Unreadable)?;
        let peek = scan.0.map_err(PeekError::Duplicate)?;
        de.end().map_err(|_| PeekError::Unreadable)?;
        Ok(peek)
    }

    /// The first limit the request exceeds, as (param, message).
    pub fn over(&self, l: &LimitsConfig) -> Option<(&'static str, String)> {
        let m = self.messages.as_ref().map_or(0, |c| c.0);
        if m > l.max_messages {
            return Some(("messages", format!("Too many messages: {m}, the limit is {}.", l.max_messages)));
        }
        let t = self.tools.as_ref().map_or(0, |c| c.0);
        if t > l.max_tools {
            return Some(("tools", format!("Too many tools: {t}, the limit is {}.", l.max_tools)));
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_without_building() {
        let p = Peek::of(br#"{"model":"m","messages":[{"role":"user"},{}],"tools":[1,2,3],"x":{"y":[1]}}"#).unwrap();
        assert_eq!(p.model.as_deref(), Some("m"));
        let l = LimitsConfig { max_messages: 1, ..Default::default() };
        assert_eq!(p.over(&l).unwrap().0, "messages");
        let l = LimitsConfig { max_tools: 2, ..Default::default() };
        assert_eq!(p.over(&l).unwrap().0, "tools");
        assert!(p.over(&LimitsConfig::default()).is_none());
        assert_eq!(p.max_tokens, None);
        let p = Peek::of(br#"{"model":"m","max_completion_tokens":300}"#).unwrap();
        assert_eq!(p.max_tokens, Some(300));
        assert_eq!(Peek::of(br#"{"model":"m","max_tokens":"x"}"#).unwrap().max_tokens, None);
        assert_eq!(Peek::of(b"[1]").unwrap_err(), PeekError::Unreadable);
        assert_eq!(Peek::of(br#"{"model": 3}"#).unwrap_err(), PeekError::Unreadable);
        let odd = Peek::of(br#"{"model":"m","messages":"x","tools":null}"#).unwrap();
        assert!(odd.over(&LimitsConfig { max_messages: 0, max_tools: 0, ..Default::default() }).is_none());
    }

    #[test]
    fn duplicate_top_level_keys_are_refused_whichever_key() {
        let dup = |b: &str| Peek::of(b.as_bytes()).unwrap_err();
        assert_eq!(dup(r#"{"model":"m","messages":[],"messages":[{},{}]}"#), PeekError::Duplicate("messages".into()));
        assert_eq!(dup(r#"{"model":"a","model":"b"}"#), PeekError::Duplicate("model".into()));
        // Escapes are decoded before keys are compared.
        assert_eq!(dup(r#"{"model":"m","tools":[],"tool\u0073":[1]}"#), PeekError::Duplicate("tools".into()));
        assert_eq!(dup(r#"{"model":"m","x":1,"x":2}"#), PeekError::Duplicate("x".into()));
        // Nested objects may repeat keys; only the top level is checked.
        assert!(Peek::of(br#"{"model":"m","metadata":{"a":1,"a":2}}"#).is_ok());
    }
}
