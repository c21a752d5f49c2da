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
    /// Default budgets of each key (docs/spend.md): tokens per UTC day, cost
    /// per UTC day and per UTC month (in `currency`); none: unlimited.
    #[serde(default)]
    pub tokens_per_day: Option<u64>,
    #[serde(default)]
    pub cost_per_day: Option<f64>,
    #[serde(default)]
    pub cost_per_month: Option<f64>,
    /// The currency of the cost budgets; prices in another currency count
    /// tokens but no cost against them (default `USD`).
    #[serde(default)]
    pub currency: Option<String>,
}

/// The budgets of a key (`[auth]` defaults or a key's own).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Budget {
    pub tokens_per_day: Option<u64>,
    pub cost_per_day: Option<f64>,
    pub cost_per_month: Option<f64>,
}

impl Budget {
    /// This budget's limits, each falling back to `default`'s.
    pub fn or(self, default: Budget) -> Budget {
        Budget {
            tokens_per_day: self.tokens_per_day.or(default.tokens_per_day),
            cost_per_day: self.cost_per_day.or(default.cost_per_day),
            cost_per_month: self.cost_per_month.or(default.cost_per_month),
        }
    }

    pub fn is_empty(&self) -> bool {
        *self == Budget::default()
    }
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
    /// This key's budgets (each over the `[auth]` default).
    #[serde(default)]
    pub tokens_per_day: Option<u64>,
    #[serde(default)]
    pub cost_per_day: Option<f64>,
    #[serde(default)]
    pub cost_per_month: Option<f64>,
}

impl KeyConfig {
    /// A key with no settings of its own.
    pub fn plain(key: Secret) -> Self {
        KeyConfig {
            key,
            name: None,
            models: None,
            requests_per_minute: None,
            max_concurrent: None,
            tokens_per_day: None,
            cost_per_day: None,
            cost_per_month: None,
        }
    }

    pub fn budget(&self) -> Budget {
        Budget {
            tokens_per_day: self.tokens_per_day,
            cost_per_day: self.cost_per_day,
            cost_per_month: self.cost_per_month,
        }
    }
}

impl AuthConfig {
    /// The budgets every key has unless it sets its own.
    pub fn budget(&self) -> Budget {
        Budget {
            tokens_per_day: self.tokens_per_day,
            cost_per_day: self.cost_per_day,
            cost_per_month: self.cost_per_month,
        }
    }
}
