//! Context windows and "context too long" errors. Each vendor words the
//! error its own way (profile `[errors] context_overflow`, regexes on the
//! message); recognized here once, it becomes OpenAI's
//! `context_length_exceeded` with the numbers the clients act on (the
//! Messages front turns them into Anthropic's "prompt is too long: N tokens
//! \> M maximum"). A model's window (profile `[context_windows]`, by glob)
//! also decides where an alias chain goes after an overflow: only to a
//! model with a larger window.

use std::collections::BTreeMap;

use serde_json::Value;

use super::{Route, UpstreamError};
use crate::config::ConfigError;
use crate::openai::ChatRequest;

/// OpenAI's code for a request longer than the model's window.
pub const OVERFLOW_CODE: &str = "context_length_exceeded";
/// The extra fields of an overflow error: the window and the prompt's
/// tokens (the vendor's figure, else an estimate).
pub const WINDOW_FIELD: &str = "context_window";
pub const TOKENS_FIELD: &str = "prompt_tokens";

/// A provider's windows and overflow patterns. The patterns are checked at
/// start and compiled when an error first needs them: a case-insensitive
/// pattern with captures holds about 256 KB of matcher, per provider, and
/// most processes never see an overflow.
#[derive(Debug, Default)]
pub struct Context {
    /// Most specific (longest) glob first.
    windows: Vec<(globset::GlobMatcher, u64)>,
    patterns: Vec<String>,
    overflow: std::sync::OnceLock<Vec<regex::Regex>>,
}

fn compile(pattern: &str) -> Result<regex::Regex, regex::Error> {
    regex::RegexBuilder::new(pattern).case_insensitive(true).size_limit(1 << 20).build()
}

impl Context {
    /// From the profile's windows and patterns; the config's windows win.
    pub fn new(
        provider: &str,
        profile_windows: &BTreeMap<String, u64>,
        config_windows: &BTreeMap<String, u64>,
        patterns: &[String],
    ) -> Result<Self, ConfigError> {
        let mut merged = profile_windows.clone();
        merged.extend(config_windows.iter().map(|(k, v)| (k.clone(), *v)));
        let mut globs: Vec<_> = merged.into_iter().collect();
        globs.sort_by_key(|(g, _)| std::cmp::Reverse(g.len()));
        let mut windows = Vec::with_capacity(globs.len());
        for (g, tokens) in globs {
            let m = globset::Glob::new(&g.to_ascii_lowercase())
                .map_err(|e| ConfigError::Invalid(format!("provider {provider}: context_windows glob {g:?}: {e}")))?;
            windows.push((m.compile_matcher(), tokens));
        }
        for p in patterns {
            compile(p).map_err(|e| {
                ConfigError::Invalid(format!("provider {provider}: [errors] context_overflow {p:?}: {e}"))
            })?;
        }
        Ok(Context { windows, patterns: patterns.to_vec(), overflow: Default::default() })
    }

    /// `model`'s context window in tokens, when the profile or config knows it.
    pub fn window(&self, model: &str) -> Option<u64> {
        let model = model.to_ascii_lowercase();
        self.windows.iter().find(|(g, _)| g.is_match(&model)).map(|(_, t)| *t)
    }

    /// `e` as OpenAI's `context_length_exceeded` when it is this vendor's
    /// overflow error (or already that code), with the window and the
    /// prompt's tokens filled in; any other error unchanged.
    pub fn recognize(&self, e: UpstreamError, model: &str, req: &ChatRequest) -> UpstreamError {
        let UpstreamError::Status { status, mut error } = e else { return e };
        // A vendor's 5xx is never the request's length.
        if status >= 500 {
            return UpstreamError::Status { status, error };
        }
        let by_code = error.code.as_deref() == Some(OVERFLOW_CODE);
        let overflow = self.overflow.get_or_init(|| self.patterns.iter().filter_map(|p| compile(p).ok()).collect());
        let caps = overflow.iter().find_map(|re| re.captures(&error.message));
        if !by_code && caps.is_none() {
            return UpstreamError::Status { status, error };
        }
        let number = |name: &str| {
            caps.as_ref()
                .and_then(|c| c.name(name))
                .and_then(|m| m.as_str().replace([',', '_'], "").parse::<u64>().ok())
        };
        let window = number("max").or_else(|| self.window(model));
        // The vendor's count when it gave one; else a quarter of the text,
        // never at or under the window (it did overflow).
        let tokens =
            number("tokens").unwrap_or_else(|| estimate_tokens(req)).max(window.map_or(0, |w| w.saturating_add(1)));
        error.kind = "invalid_request_error".into();
        error.code = Some(OVERFLOW_CODE.into());
        error.param.get_or_insert_with(|| "messages".into());
        if let Some(w) = window {
            error.extra.insert(WINDOW_FIELD.into(), Value::from(w));
        }
        error.extra.insert(TOKENS_FIELD.into(), Value::from(tokens));
        UpstreamError::Status { status: 400, error }
    }
}

/// Whether `e` is a context overflow (after [`Context::recognize`]).
pub fn is_overflow(e: &UpstreamError) -> bool {
    matches!(e, UpstreamError::Status { error, .. } if error.code.as_deref() == Some(OVERFLOW_CODE))
}

/// After `route` overflowed with `e`: the window later routes must exceed
/// to be tried, when one of `later` does; `None` when none does (the
/// overflow is the client's answer).
pub fn moves_on(e: &UpstreamError, route: &Route, later: &[Route]) -> Option<u64> {
    if !is_overflow(e) {
        return None;
    }
    let from_error = match e {
        UpstreamError::Status { error, .. } => error.extra.get(WINDOW_FIELD).and_then(Value::as_u64),
        _ => None,
    };
    let floor = from_error.or_else(|| route.provider.context.window(&route.model))?;
    later.iter().any(|r| larger(r, floor)).then_some(floor)
}

/// Whether `route`'s window is known and larger than `floor`.
pub fn larger(route: &Route, floor: u64) -> bool {
    route.provider.context.window(&route.model).is_some_and(|w| w > floor)
}

/// A rough count of the request's input tokens: a quarter of the
/// characters of its messages and tools (no vendor tokenizer is at hand).
pub fn estimate_tokens(req: &ChatRequest) -> u64 {
    let mut chars = 0usize;
    for m in &req.messages {
        chars += text_chars(&m.content);
        if let Some(calls) = m.extra.get("tool_calls") {
            chars += calls.to_string().len();
        }
    }
    if let Some(tools) = &req.tools {
        chars += tools.iter().map(|t| t.to_string().len()).sum::<usize>();
    }
    chars.div_ceil(4) as u64
}

fn text_chars(v: &Value) -> usize {
    match v {
        Value::String(s) => s.chars().count(),
        Value::Array(parts) => parts.iter().map(|p| p.get("text").map_or(0, text_chars)).sum(),
        _ => 0,
    }
}
