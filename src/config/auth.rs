//! The `[auth]` section (proxy keys; see `server::auth`).

use std::fmt;

use serde::Deserialize;

/// A secret string whose `Debug` never shows it.
#[derive(Clone, Deserialize, PartialEq)]
#[serde(transparent)]
pub struct Secret(pub String);

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("\"***\"")
    }
}

/// The `[auth]` section.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuthConfig {
    /// Keys: plain strings, or tables with per-key settings.
    #[serde(default)]
    pub keys: Vec<KeySpec>,
    /// An environment variable holding more keys, separated by commas or
    /// whitespace (for Kubernetes Secrets and the like).
    #[serde(default)]
    pub keys_env: Option<String>,
    /// Default requests per minute of each key (none: unlimited).
    #[serde(default)]
    pub requests_per_minute: Option<u32>,
    /// Default concurrent requests of each key (none: `[limits]`'s).
    #[serde(default)]
    pub max_concurrent: Option<u32>,
}

/// One entry of `keys`.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum KeySpec {
    Plain(Secret),
    Detailed(KeyConfig),
}

/// A key with its own settings.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KeyConfig {
    pub key: Secret,
    /// A name for logs and metrics (default: a digest prefix of the key).
    #[serde(default)]
    pub name: Option<String>,
    /// Model names or globs this key may use (`deepseek/*`, `smart`); all
    /// when absent.
    #[serde(default)]
    pub models: Option<Vec<String>>,
    #[serde(default)]
    pub requests_per_minute: Option<u32>,
    #[serde(default)]
    pub max_concurrent: Option<u32>,
}
