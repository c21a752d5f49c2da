//! Built-in tools, enabled by name in `[tools] builtin`.

mod current_time;
mod http_fetch;

use std::sync::Arc;

use super::{Tool, ToolsConfig};

pub use http_fetch::HttpFetch;

/// Every built-in tool name.
pub const NAMES: &[&str] = &["current_time", "http_fetch"];

/// Built-ins without side effects or network access: a skill that names one
/// in `allowed-tools` gets it even when `[tools] builtin` does not list it
/// (the others need the operator to enable them).
pub const SAFE: &[&str] = &["current_time"];

/// The built-in tool called `name`.
pub fn make(name: &str, config: &ToolsConfig) -> Option<Arc<dyn Tool>> {
    match name {
        "current_time" => Some(Arc::new(current_time::CurrentTime)),
        "http_fetch" => Some(Arc::new(HttpFetch::new(config.http_fetch.clone()))),
        _ => None,
    }
}
