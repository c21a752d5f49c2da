//! `[limits]`: what one request may weigh (body bytes, messages, tools), how
//! long a client may take to send it, how many connections and requests
//! run at once, how large an upstream answer may grow, and how long
//! shutdown waits for them. The
//! counts are read by a cheap pre-scan of the body ([`peek`]) so the chat
//! handler stays as it is.

use serde::Deserialize;
use serde::de::IgnoredAny;

/// The `[limits]` section.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LimitsConfig {
    /// Largest request body (413 above).
    #[serde(default = "d_body")]
    pub max_body_bytes: usize,
    /// Most `messages` in one chat request (400 above).
    #[serde(default = "d_messages")]
    pub max_messages: usize,
    /// Most `tools` in one chat request (400 above).
    #[serde(default = "d_tools")]
    pub max_tools: usize,
    /// Concurrent requests per proxy key (429 above); none: unlimited.
    #[serde(default)]
    pub max_concurrent_per_key: Option<u32>,
    /// Concurrent requests in total (429 above); none: unlimited.
    #[serde(default)]
    pub max_concurrent: Option<u32>,
    /// On SIGTERM, how long in-flight requests and streams may finish
    /// before open streams are ended with an in-band error.
    #[serde(default = "d_grace")]
    pub shutdown_grace_secs: f64,
    /// How long a client may take to send a request head (request line and
    /// headers), also the longest an idle keep-alive connection or a new
    /// connection that sends nothing is kept (`serve`; closed after).
    #[serde(default = "d_header_timeout")]
    pub header_read_timeout_secs: f64,
    /// How long a client may take to send a whole request body (408 after),
    /// so a slow upload cannot hold its concurrency slots.
    #[serde(default = "d_body_timeout")]
    pub body_read_timeout_secs: f64,
    /// Open connections per client address (`serve`; more are closed at
    /// once); 0: unlimited. Behind a load balancer that connects from a few
    /// addresses, raise it or set 0.
    #[serde(default = "d_per_ip")]
    pub max_connections_per_ip: u32,
    /// The most bytes of one upstream answer the proxy holds: a JSON body,
    /// one SSE event, or a stream it assembles or keeps (non-streamed
    /// client, agent loop, Responses API); 502, or an in-band error once
    /// streaming. A plain stream to a streaming client is not held.
    #[serde(default = "d_answer")]
    pub max_answer_bytes: usize,
}

fn d_body() -> usize {
    16 * 1024 * 1024
}
fn d_messages() -> usize {
    4096
}
fn d_tools() -> usize {
    512
}
fn d_grace() -> f64 {
    30.0
}
fn d_header_timeout() -> f64 {
    10.0
}
fn d_body_timeout() -> f64 {
    60.0
}
fn d_per_ip() -> u32 {
    256
}
fn d_answer() -> usize {
    64 * 1024 * 1024
}

impl Default for LimitsConfig {
    fn default() -> Self {
        LimitsConfig {
            max_body_bytes: d_body(),
            max_messages: d_messages(),
            max_tools: d_tools(),
            max_concurrent_per_key: None,
            max_concurrent: None,
            shutdown_grace_secs: d_grace(),
            header_read_timeout_secs: d_header_timeout(),
            body_read_timeout_secs: d_body_timeout(),
            max_connections_per_ip: d_per_ip(),
            max_answer_bytes: d_answer(),
        }
    }
}

impl LimitsConfig {
    pub fn header_read_timeout(&self) -> std::time::Duration {
        secs(self.header_read_timeout_secs)
    }

    pub fn body_read_timeout(&self) -> std::time::Duration {
        secs(self.body_read_timeout_secs)
    }
}

/// Seconds as written in the config; a negative one is zero, a huge one
/// about thirty years (never a panic, nor a deadline that overflows).
pub fn secs(s: f64) -> std::time::Duration {
    const LONGEST: std::time::Duration = std::time::Duration::from_secs(1_000_000_000);
    std::time::Duration::try_from_secs_f64(s.max(0.0)).unwrap_or(LONGEST).min(LONGEST)
}

/// The fields of a chat request the edge checks, read without building the
/// request (sizes only; the handler does the real parse and its 400s).
#[derive(Debug, Default)]
pub struct Peek {
    pub model: Option<String>,
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

/// A JSON array's length (anything else counts 0, left to the handler).
#[derive(Debug, Default)]
struct Counted(usize);

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
                Ok(Counted(n))
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Counted, A::Error> {
                while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                Ok(Counted(0))
            }
            fn visit_unit<E>(self) -> Result<Counted, E> {
                Ok(Counted(0))
            }
            fn visit_bool<E>(self, _: bool) -> Result<Counted, E> {
                Ok(Counted(0))
            }
            fn visit_i64<E>(self, _: i64) -> Result<Counted, E> {
                Ok(Counted(0))
            }
            fn visit_u64<E>(self, _: u64) -> Result<Counted, E> {
                Ok(Counted(0))
            }
            fn visit_f64<E>(self, _: f64) -> Result<Counted, E> {
                Ok(Counted(0))
            }
            fn visit_str<E>(self, _: &str) -> Result<Counted, E> {
                Ok(Counted(0))
            }
            fn visit_none<E>(self) -> Result<Counted, E> {
                Ok(Counted(0))
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
