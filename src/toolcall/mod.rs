//! Tool-call recovery: turns tool calls that models write into their text
//! (`<tool_call>{…}</tool_call>`, `[TOOL_CALLS]`, DeepSeek/Kimi special tokens,
//! XML parameters, pythonic lists, fenced or bare JSON, ReAct, harmony …) into
//! structured calls, incrementally while streaming.
//!
//! The module is pure: no I/O, no async, and nothing here returns an error.
//! Markup that does not parse is handed back as text.
//!
//! * [`Format`] is the one trait a text format implements; every format lives in
//!   its own file under `formats/` and is registered once in [`formats::ALL`].
//! * [`Extractor`] is the streaming engine: it routes reasoning blocks, finds
//!   start markers with one Aho-Corasick automaton, buffers only the region a
//!   parser asked for, and applies the guards every format shares (declared
//!   tool names, argument validation and repair, schema typing).

pub(crate) mod args;
mod engine;
mod event;
pub mod formats;
pub(crate) mod repair;
pub mod scan;
mod tools;
pub mod typing;

pub use engine::{Extraction, Extractor, FormatSet, Lead, Options, Passed, extract};
pub use event::{Call, Event};
pub use tools::ToolIndex;

/// What a parser needs from the request while it parses a region.
pub struct Ctx<'a> {
    /// The tools the request declared.
    pub tools: &'a ToolIndex,
    /// True once the whole model output has been seen.
    pub eof: bool,
    /// True when the region starts the model's visible output (nothing but
    /// whitespace came before it). Marker-less formats only trigger there.
    pub at_start: bool,
}

/// One text tool-call format.
///
/// The engine finds one of the format's [`markers`](Format::markers) in the
/// text, then calls [`parse`](Format::parse) with the text from the marker on
/// (the *region*). The parser answers at once or says what it waits for; the
/// engine only calls it again when that condition holds, which keeps the
/// whole scan O(n) however the text is chunked.
pub trait Format: Sync {
    /// The user-facing name (`hermes`, `kimi_k2` …), used in profiles and CLI.
    fn name(&self) -> &'static str;
    /// Literal strings that may open a region of this format.
    fn markers(&self) -> &'static [&'static str];
    /// Whether a region may also open at the very start of the output on one of
    /// these first non-space bytes (bare JSON `{`, pythonic `[` …).
    fn start_bytes(&self) -> &'static [u8] {
        &[]
    }
    /// Special tokens of the format that are never prose (a closing token
    /// left alone, an end-of-sentence token): dropped wherever text holds
    /// them outside a call.
    fn strays(&self) -> &'static [&'static str] {
        &[]
    }
    /// Markers this format leaves to another format when both are in a set
    /// (marker, format name): the other reads the same text in full, so a
    /// second candidate would only scan the region again.
    fn defers(&self) -> &'static [(&'static str, &'static str)] {
        &[]
    }
    /// Special tokens that end a reasoning block the model left open: it
    /// started its calls while still thinking (Kimi-K2 without `</think>`).
    fn ends_reasoning(&self) -> &'static [&'static str] {
        &[]
    }
    /// Parse the region. `region` starts at the marker (or at the start byte).
    fn parse(&self, region: &str, ctx: &Ctx<'_>) -> Step;
}

/// A parser's answer for one region.
#[derive(Debug)]
pub enum Step {
    /// This is not the format's markup: the marker is ordinary text.
    Reject,
    /// Call again once the condition holds (or at the end of output).
    Need(Wait),
    /// The region `..consumed` is complete.
    Done(Parsed),
}

/// What a parser waits for before it can decide.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wait {
    /// The region contains `marker` at or after byte `from`.
    Marker { marker: &'static str, from: usize },
    /// A bracket opened at byte `from` (`{` or `[` or `(`) is closed, strings
    /// (`"…"` and `'…'`) and escapes taken into account.
    Balanced { from: usize },
    /// The region holds at least this many bytes.
    Len(usize),
    /// A byte that is not whitespace follows byte `from`.
    NonSpaceAfter { from: usize },
    /// The end of the output.
    Eof,
}

/// The outcome of a complete region.
#[derive(Debug, Default)]
pub struct Parsed {
    /// How many bytes of the region were used; the rest is scanned again.
    pub consumed: usize,
    pub calls: Vec<RawCall>,
    /// Visible text that stands in the region's place (harmony `final`, ReAct
    /// `Final Answer`).
    pub content: String,
    /// Reasoning found in the region (harmony `analysis`).
    pub reasoning: String,
    /// The region is complete markup of the format's own tokens: a call whose
    /// arguments fail the guards is dropped with its markup, and the other
    /// calls are kept, instead of the whole region becoming text.
    pub salvage: bool,
}

/// A call as a parser saw it, before the shared guards run.
#[derive(Debug, Clone, PartialEq)]
pub struct RawCall {
    pub name: String,
    pub args: Args,
    /// An id the format carries (Kimi `functions.x:0`, Mistral `[CALL_ID]`).
    pub id: Option<String>,
}

/// Arguments in the shape the format wrote them.
#[derive(Debug, Clone, PartialEq)]
pub enum Args {
    /// JSON text as the model wrote it (passed through when it is valid).
    Json(String),
    /// JSON text already validated as part of the document it came from (a
    /// call object's `arguments`): not parsed again.
    Checked(String),
    /// A value the parser built (XML parameters, pythonic keywords).
    Value(serde_json::Value),
    /// A plain string (ReAct `Action Input`, code blocks); mapped onto the
    /// tool's single string parameter.
    Text(String),
    /// A region that was clearly a call but whose arguments are missing.
    Empty,
}

impl RawCall {
    pub fn json(name: impl Into<String>, args: impl Into<String>) -> Self {
        RawCall { name: name.into(), args: Args::Json(args.into()), id: None }
    }
    pub fn value(name: impl Into<String>, args: serde_json::Value) -> Self {
        RawCall { name: name.into(), args: Args::Value(args), id: None }
    }
}

/// Repairs near-JSON into a value (for parsers that must read a damaged call
/// object before the shared guards see its arguments).
pub fn args_repair_object(text: &str) -> Option<serde_json::Value> {
    args::repair(text).and_then(|s| serde_json::from_str(&s).ok())
}
