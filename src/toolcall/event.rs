//! The extractor's output vocabulary.

/// A recovered tool call, final and validated: `arguments` is always a JSON
/// object serialized as a string (`"{}"` when empty).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Call {
    /// The id the model's format carried, if any; the caller generates one
    /// otherwise.
    pub id: Option<String>,
    /// The declared spelling of the tool name.
    pub name: String,
    pub arguments: String,
    /// The format that recognised the call (for metrics and debugging).
    pub format: &'static str,
}

/// One piece of extractor output, in text order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// Visible text for `content`.
    Text(String),
    /// Reasoning text for `reasoning_content`.
    Reasoning(String),
    /// A complete tool call.
    Call(Call),
}
