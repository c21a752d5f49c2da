//! Configuration: the TOML file (DESIGN.md) as written, then resolved into
//! ready-to-use providers at startup so nothing is looked up by string on the
//! request path beyond the model route.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::provider::ToolMode;

/// The config file as written.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    #[serde(default)]
    pub listen: Option<String>,
    /// Providers by name; the name is the model prefix (`deepseek/…`).
    #[serde(default)]
    pub providers: BTreeMap<String, ProviderConfig>,
    /// Model aliases: `"gpt-4o" = "deepseek/deepseek-chat"`.
    #[serde(default)]
    pub models: BTreeMap<String, String>,
    /// Provider used for models with no `provider/` prefix and no alias.
    #[serde(default)]
    pub default_provider: Option<String>,
    /// A folder of profile files that override or extend the bundled ones
    /// (default `~/.modelshim/providers`).
    #[serde(default)]
    pub providers_dir: Option<PathBuf>,
    #[serde(default)]
    pub upstream: UpstreamConfig,
    /// Sections of later features, accepted so one config file serves every
    /// version; `modelshim check` says which are not active yet.
    #[serde(default)]
    pub skills: Option<toml::Value>,
    /// MCP servers whose tools run server-side.
    #[serde(default)]
    pub mcp: Option<crate::tools::McpConfig>,
    /// Server-side tools and the agent loop.
    #[serde(default)]
    pub tools: Option<crate::tools::ToolsConfig>,
    #[serde(default)]
    pub auth: Option<toml::Value>,
    #[serde(default)]
    pub state: crate::state::StateConfig,
}

/// One `[providers.NAME]` table.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProviderConfig {
    /// The profile to use (defaults to the provider name).
    #[serde(default)]
    pub profile: Option<String>,
    #[serde(default)]
    pub base_url: Option<String>,
    /// The environment variable with the key (overrides the profile's).
    #[serde(default)]
    pub api_key_env: Option<String>,
    #[serde(default)]
    pub tool_calls: Option<ToolMode>,
    /// Text tool-call formats for every model of this provider (overrides
    /// the profile's per-model formats).
    #[serde(default)]
    pub formats: Option<Vec<String>>,
    /// Models to list on `/v1/models` (overrides the profile's).
    #[serde(default)]
    pub models: Option<Vec<String>>,
    #[serde(default)]
    pub upstream: Option<UpstreamConfig>,
}

/// Upstream timeouts.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UpstreamConfig {
    #[serde(default = "d_connect")]
    pub connect_timeout_secs: f64,
    /// Until the response headers arrive (504 after that).
    #[serde(default = "d_first_byte")]
    pub first_byte_timeout_secs: f64,
    /// Longest silence inside a stream before it is ended with an error.
    #[serde(default = "d_idle")]
    pub idle_timeout_secs: f64,
    /// Accepted for forward compatibility; retries arrive with the
    /// production work.
    #[serde(default)]
    pub retries: Option<u32>,
}

fn d_connect() -> f64 {
    10.0
}
fn d_first_byte() -> f64 {
    120.0
}
fn d_idle() -> f64 {
    300.0
}

impl Default for UpstreamConfig {
    fn default() -> Self {
        UpstreamConfig {
            connect_timeout_secs: d_connect(),
            first_byte_timeout_secs: d_first_byte(),
            idle_timeout_secs: d_idle(),
            retries: None,
        }
    }
}

/// Errors reading or resolving the configuration.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read {path}: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("{path}: {source}")]
    Parse { path: PathBuf, source: Box<toml::de::Error> },
    #[error("{0}")]
    Invalid(String),
}

impl Config {
    /// Reads a config file.
    pub fn from_file(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read { path: path.into(), source })?;
        toml::from_str(&text).map_err(|e| ConfigError::Parse { path: path.into(), source: Box::new(e) })
    }

    /// The config file to use: `--config`, else `MODELSHIM_CONFIG`, else
    /// `./modelshim.toml` when present, else none.
    pub fn locate(flag: Option<PathBuf>) -> Option<PathBuf> {
        flag.or_else(|| std::env::var_os("MODELSHIM_CONFIG").map(PathBuf::from)).or_else(|| {
            let p = PathBuf::from("modelshim.toml");
            p.exists().then_some(p)
        })
    }

    /// Loads the located file, or the empty config.
    pub fn load(flag: Option<PathBuf>) -> Result<(Self, Option<PathBuf>), ConfigError> {
        match Self::locate(flag) {
            Some(p) => Ok((Self::from_file(&p)?, Some(p))),
            None => Ok((Config::default(), None)),
        }
    }

    /// Notes on sections that are accepted but not active in this version.
    pub fn inactive_sections(&self) -> Vec<&'static str> {
        let mut v = Vec::new();
        let sections = [
            (self.skills.is_some(), "skills"),
            (self.auth.is_some(), "auth"),
            (self.state.redis_url.is_some(), "state.redis_url"),
        ];
        v.extend(sections.iter().filter(|(on, _)| *on).map(|(_, n)| *n));
        v
    }
}
