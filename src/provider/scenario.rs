//! Scenario routes for coding agents (`[routes]`): a request that is long,
//! carries images, is a client's background call or asks for reasoning goes
//! to the alias or chain configured for that scenario instead of the model
//! it named. Checked in this order: `long_context` (estimated prompt tokens
//! above `long_context_tokens`), `image`, `background`, `think`. A request
//! that pins `provider/model` of a configured provider is left alone.

use serde_json::Value;

use crate::config::{ModelAlias, RoutesConfig};
use crate::openai::ChatRequest;

/// Above this many estimated prompt tokens `long_context` applies when
/// `long_context_tokens` is not set.
pub const DEFAULT_LONG_CONTEXT_TOKENS: u64 = 60_000;

/// The client's background model: Claude Code sends its small, fast calls
/// (titles, summaries, quota checks) to its Haiku model.
const BACKGROUND_MODEL: &str = "haiku";

/// The resolved `[routes]`: each scenario's targets.
#[derive(Debug, Default, Clone)]
pub struct Scenarios {
    long_context: Vec<String>,
    long_context_tokens: u64,
    background: Vec<String>,
    think: Vec<String>,
    image: Vec<String>,
}

impl Scenarios {
    pub fn new(c: &RoutesConfig) -> Self {
        let targets = |a: &Option<ModelAlias>| a.as_ref().map(ModelAlias::targets).unwrap_or_default();
        Scenarios {
            long_context: targets(&c.long_context),
            long_context_tokens: c.long_context_tokens.unwrap_or(DEFAULT_LONG_CONTEXT_TOKENS),
            background: targets(&c.background),
            think: targets(&c.think),
            image: targets(&c.image),
        }
    }

    /// The targets of the first scenario `req` is in, with the scenario's
    /// name (for logs); `None` for none (or no `[routes]`).
    pub fn of(&self, req: &ChatRequest) -> Option<(&'static str, &[String])> {
        if !self.long_context.is_empty() && super::context::estimate_tokens(req) > self.long_context_tokens {
            return Some(("long_context", &self.long_context));
        }
        if !self.image.is_empty() && req.has_image() {
            return Some(("image", &self.image));
        }
        if !self.background.is_empty() && req.model.to_ascii_lowercase().contains(BACKGROUND_MODEL) {
            return Some(("background", &self.background));
        }
        if !self.think.is_empty() && thinks(req) {
            return Some(("think", &self.think));
        }
        None
    }
}

/// Reasoning asked for: a `reasoning_effort` other than `none`, or a
/// `thinking` switch turned on.
fn thinks(req: &ChatRequest) -> bool {
    let effort = req.extra.get("reasoning_effort").and_then(Value::as_str).is_some_and(|e| e != "none");
    let switch = req.extra.get("thinking").and_then(|t| t.get("type")).and_then(Value::as_str) == Some("enabled");
    effort || switch
}
