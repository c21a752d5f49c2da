//! What a server-side tool is: the [`Tool`] trait every source implements,
//! its definition, its output and its errors.

use futures_util::future::BoxFuture;
use serde_json::{Value, json};

/// Errors of the tool layer. A failing tool never fails the request: its
/// error becomes the tool result the model reads.
#[derive(Debug, thiserror::Error)]
pub enum ToolError {
    /// The configuration cannot work (unknown built-in, bad skill).
    #[error("{0}")]
    Config(String),
    /// The tool ran and failed.
    #[error("{0}")]
    Failed(String),
    /// The tool's backend (an MCP server) is not reachable.
    #[error("{0}")]
    Unavailable(String),
}

/// What a tool tells the model about itself.
#[derive(Debug, Clone)]
pub struct ToolSpec {
    pub name: String,
    pub description: String,
    /// JSON schema of the arguments (an object schema).
    pub parameters: Value,
}

impl ToolSpec {
    /// The OpenAI `tools[]` entry.
    pub fn to_openai(&self) -> Value {
        json!({"type": "function", "function": {
            "name": self.name, "description": self.description, "parameters": self.parameters}})
    }
}

/// One piece of a tool result.
#[derive(Debug, Clone, PartialEq)]
pub enum Content {
    Text(String),
    /// Base64 data and its MIME type.
    Image {
        mime: String,
        data: String,
    },
    /// A resource the tool points to (MCP `resource_link`).
    Link {
        uri: String,
        name: String,
        mime: Option<String>,
        description: Option<String>,
    },
}

/// A tool's result.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ToolOutput {
    pub content: Vec<Content>,
    /// The tool reports a failure (MCP `isError`); the model still reads it.
    pub is_error: bool,
}

impl ToolOutput {
    pub fn text(t: impl Into<String>) -> Self {
        ToolOutput { content: vec![Content::Text(t.into())], is_error: false }
    }

    pub fn error(t: impl Into<String>) -> Self {
        ToolOutput { content: vec![Content::Text(t.into())], is_error: true }
    }

    /// The images of the result.
    pub fn images(&self) -> impl Iterator<Item = (&str, &str)> {
        self.content.iter().filter_map(|c| match c {
            Content::Image { mime, data } => Some((mime.as_str(), data.as_str())),
            _ => None,
        })
    }

    /// The text the model reads in the `tool` message. Images are replaced
    /// by a placeholder: "attached below" when they follow in a user message
    /// (`vision`), else a note that they were left out.
    pub fn model_text(&self, vision: bool) -> String {
        let mut parts: Vec<String> = Vec::new();
        let mut n = 0;
        for c in &self.content {
            match c {
                Content::Text(t) => parts.push(t.clone()),
                Content::Image { mime, data } => {
                    n += 1;
                    parts.push(if vision {
                        format!("[image {n} ({mime}) is attached in the next user message]")
                    } else {
                        format!(
                            "[image {n} ({mime}, {} bytes) omitted: this model does not take images]",
                            data.len() / 4 * 3
                        )
                    });
                }
                Content::Link { uri, name, mime, description } => {
                    let mut s = format!("[resource link: {name} <{uri}>");
                    if let Some(m) = mime {
                        s.push_str(&format!(" ({m})"));
                    }
                    if let Some(d) = description {
                        s.push_str(&format!(": {d}"));
                    }
                    s.push(']');
                    parts.push(s);
                }
            }
        }
        let body = if parts.is_empty() { "(no output)".to_string() } else { parts.join("\n") };
        if self.is_error { format!("Error: {body}") } else { body }
    }
}

/// One server-side tool.
pub trait Tool: Send + Sync {
    /// Name, description and argument schema (the name is the tool's own;
    /// the registry decides the exposed name).
    fn spec(&self) -> ToolSpec;
    /// Runs the tool. `Err` is for failures around the tool (backend down);
    /// a tool that ran and failed returns `Ok` with `is_error`.
    fn call(&self, args: Value) -> BoxFuture<'_, Result<ToolOutput, ToolError>>;
}

/// A name within OpenAI's function-name rules (`^[a-zA-Z0-9_-]{1,64}$`):
/// other characters become `_`, and the name is cut to 64.
pub fn sanitize_name(name: &str) -> String {
    let mut s: String =
        name.chars().map(|c| if c.is_ascii_alphanumeric() || c == '_' || c == '-' { c } else { '_' }).collect();
    if s.is_empty() {
        s.push('_');
    }
    s.truncate(64);
    s
}
