//! OpenAI Chat Completions wire types: the lingua franca between the client,
//! the normalizers and every upstream. Only the fields modelshim inspects are
//! typed; everything else lands in an `extra` map (read by `with_extra!`,
//! written flattened) and goes out again untouched, so nothing the client or
//! the upstream sent is dropped.

use serde::Serialize;
use serde_json::{Map, Value};

/// `Deserialize` for a wire struct with typed fields and an `extra` map that
/// keeps every other key: `field: "key"` is required, `field: "key" = expr`
/// has a default. Keys are matched as they stream by, nothing is buffered.
macro_rules! with_extra {
    ($ty:ident { $($field:ident: $key:literal $(= $default:expr)?),* $(,)? }) => {
        impl<'de> serde::Deserialize<'de> for $ty {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                struct V;
                impl<'de> serde::de::Visitor<'de> for V {
                    type Value = $ty;
                    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                        f.write_str(concat!("a ", stringify!($ty), " object"))
                    }
                    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<$ty, A::Error> {
                        $(let mut $field = None;)*
                        let mut extra = Map::new();
                        while let Some(k) = map.next_key_seed(KeyOf(&[$($key),*]))? {
                            match k {
                                $(Ok($key) => $field = Some(map.next_value()?),)*
                                Ok(_) => {
                                    map.next_value::<serde::de::IgnoredAny>()?;
                                }
                                Err(other) => {
                                    extra.insert(other, map.next_value()?);
                                }
                            }
                        }
                        Ok($ty { $($field: match $field {
                            Some(v) => v,
                            None => with_extra!(@missing $key $($default)?),
                        },)* extra })
                    }
                }
                d.deserialize_map(V)
            }
        }
    };
    (@missing $key:literal) => { return Err(serde::de::Error::missing_field($key)) };
    (@missing $key:literal $default:expr) => { $default };
}

/// A map key: one of the typed keys, or another key (owned, for `extra`).
struct KeyOf(&'static [&'static str]);

impl<'de> serde::de::DeserializeSeed<'de> for KeyOf {
    type Value = Result<&'static str, String>;
    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_str(self)
    }
}

impl<'de> serde::de::Visitor<'de> for KeyOf {
    type Value = Result<&'static str, String>;
    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a string key")
    }
    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Self::Value, E> {
        Ok(self.0.iter().find(|k| **k == v).copied().ok_or_else(|| v.to_owned()))
    }
}

/// `POST /v1/chat/completions` body.
#[derive(Debug, Clone, Serialize)]
pub struct ChatRequest {
    pub model: String,
    pub messages: Vec<Message>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stream: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tools: Option<Vec<Value>>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl ChatRequest {
    pub fn is_stream(&self) -> bool {
        self.stream.unwrap_or(false)
    }

    /// Whether the client asked for a usage chunk at the end of a stream.
    pub fn wants_usage(&self) -> bool {
        self.extra.get("stream_options").and_then(|o| o.get("include_usage")).and_then(Value::as_bool).unwrap_or(false)
    }

    pub fn declares_tools(&self) -> bool {
        self.tools.as_ref().is_some_and(|t| !t.is_empty())
    }

    /// Whether any message has an image part (a look at content arrays only,
    /// so a text request pays for a scan of its messages' kinds).
    pub fn has_image(&self) -> bool {
        self.messages.iter().any(|m| match &m.content {
            Value::Array(parts) => parts.iter().any(|p| p.get("type").and_then(Value::as_str) == Some("image_url")),
            _ => false,
        })
    }
}

/// A chat message's field saying an Anthropic-front `cache_control` marker
/// ended on it; the provider's rewrite puts it in the vendor's form or
/// removes it, so it never reaches a vendor as is.
pub const CACHE_MARK: &str = "cache_control";

/// A chat request's field naming a tool whose arguments modelshim validates
/// though it is not `strict` (the Messages front's forced tool, Anthropic's
/// way to ask for JSON); removed by the provider's rewrite.
pub const VALIDATE_MARK: &str = "modelshim_validate_tool";

/// One chat message. `content` may be a string, an array of parts, or null.
#[derive(Debug, Clone, Serialize)]
pub struct Message {
    pub role: String,
    pub content: Value,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// One streamed chunk (`chat.completion.chunk`).
#[derive(Debug, Clone, Default, Serialize)]
pub struct Chunk {
    pub id: String,
    pub object: String,
    pub created: u64,
    pub model: String,
    pub choices: Vec<ChunkChoice>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage: Option<Value>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

fn chunk_object() -> String {
    "chat.completion.chunk".to_string()
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct ChunkChoice {
    pub index: u32,
    pub delta: Delta,
    pub finish_reason: Option<String>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// A streamed delta, or (for non-streamed responses) a whole message.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Delta {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub role: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reasoning_content: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<Vec<ToolCallDelta>>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct ToolCallDelta {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub index: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    #[serde(rename = "type", skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub function: Option<FunctionDelta>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct FunctionDelta {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// A string on the wire; some vendors send an object, normalized later.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub arguments: Option<Value>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// A non-streamed response (`chat.completion`).
#[derive(Debug, Clone, Serialize)]
pub struct Completion {
    pub id: String,
    pub object: String,
    pub created: u64,
    pub model: String,
    pub choices: Vec<CompletionChoice>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage: Option<Value>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

fn completion_object() -> String {
    "chat.completion".to_string()
}

#[derive(Debug, Clone, Serialize)]
pub struct CompletionChoice {
    pub index: u32,
    /// Same shape as a delta; `content` is emitted as `null` when absent.
    pub message: Delta,
    pub finish_reason: Option<String>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

// Deserialization by hand (see `with_extra!`): serde's derive with
// `#[serde(flatten)]` buffers every field of the object before reading it,
// which made parsing a streamed chunk the largest cost per chunk.
with_extra!(ChatRequest { model: "model", messages: "messages", stream: "stream" = None, tools: "tools" = None });
with_extra!(Message { role: "role", content: "content" = Value::Null });
with_extra!(Chunk {
    id: "id" = String::new(),
    object: "object" = chunk_object(),
    created: "created" = 0,
    model: "model" = String::new(),
    choices: "choices" = Vec::new(),
    usage: "usage" = None,
});
with_extra!(ChunkChoice {
    index: "index" = 0,
    delta: "delta" = Delta::default(),
    finish_reason: "finish_reason" = None
});
with_extra!(Delta {
    role: "role" = None,
    content: "content" = None,
    reasoning_content: "reasoning_content" = None,
    tool_calls: "tool_calls" = None,
});
with_extra!(ToolCallDelta { index: "index" = None, id: "id" = None, kind: "type" = None, function: "function" = None });
with_extra!(FunctionDelta { name: "name" = None, arguments: "arguments" = None });
with_extra!(Completion {
    id: "id" = String::new(),
    object: "object" = completion_object(),
    created: "created" = 0,
    model: "model" = String::new(),
    choices: "choices" = Vec::new(),
    usage: "usage" = None,
});
with_extra!(CompletionChoice {
    index: "index" = 0,
    message: "message" = Delta::default(),
    finish_reason: "finish_reason" = None,
});

/// A new OpenAI-style tool-call id.
pub fn new_call_id() -> String {
    format!("call_{:016x}{:08x}", fastrand::u64(..), fastrand::u32(..))
}

/// Seconds since the Unix epoch.
pub fn now() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// OpenAI's error object (the value under `"error"`).
#[derive(Debug, Clone, Default, Serialize, serde::Deserialize, PartialEq)]
pub struct ErrorObject {
    pub message: String,
    #[serde(rename = "type")]
    pub kind: String,
    pub param: Option<String>,
    pub code: Option<String>,
    /// Whatever else the upstream said (kept, never dropped).
    #[serde(flatten)]
    pub extra: Map<String, Value>,
    /// The upstream's `Retry-After` (or ours), sent on as a header.
    #[serde(skip)]
    pub retry_after: Option<std::time::Duration>,
}

impl ErrorObject {
    pub fn new(kind: &str, message: impl Into<String>) -> Self {
        ErrorObject { message: message.into(), kind: kind.to_string(), ..Default::default() }
    }

    pub fn with_code(mut self, code: &str) -> Self {
        self.code = Some(code.to_string());
        self
    }

    /// The body `{"error": {...}}`, every known secret redacted.
    pub fn to_body(&self) -> Value {
        let mut v = serde_json::json!({ "error": self });
        crate::redact::value(&mut v);
        v
    }

    /// Redacts every known secret from the message, param, code and what
    /// else the upstream said.
    pub fn redact(&mut self) {
        let r = crate::redact::global();
        r.string(&mut self.message);
        for s in [&mut self.param, &mut self.code].into_iter().flatten() {
            r.string(s);
        }
        for v in self.extra.values_mut() {
            r.value(v);
        }
    }
}
