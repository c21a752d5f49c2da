//! Configuration: the TOML file (DESIGN.md) as written, then resolved into
//! ready-to-use providers at startup so nothing is looked up by string on the
//! request path beyond the model route.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;

pub mod auth;
pub mod console;
pub mod limits;
pub mod prices;
pub mod responses;
pub mod skills;
pub mod state;
pub mod telemetry;
pub mod tools;
pub mod vision;

/// `tool_calls` modes (DESIGN.md).
#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq, Default)]
#[serde(rename_all = "snake_case")]
pub enum ToolMode {
    /// Trust and repair native tool calls only.
    Native,
    /// Native plus recovery of calls written in the text, always.
    Text,
    /// Tools are described in a prompt and the tool history is rewritten as
    /// text (upstream takes none); calls are parsed from the answer. See
    /// `provider::prompt_tools`.
    Prompt,
    /// Native plus text recovery whenever the request declared tools.
    #[default]
    Auto,
}

/// Who holds a `json_schema` answer to its schema (docs/structured-outputs.md).
#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq, Default)]
#[serde(rename_all = "snake_case")]
pub enum StructuredMode {
    /// The vendor takes `response_format: json_schema`; the answer is still
    /// validated when the schema says `strict: true`.
    #[default]
    Native,
    /// The vendor cannot enforce a schema: `json_object` plus the schema in a
    /// prompt, and modelshim extracts, validates and re-asks.
    Emulate,
}

/// The config file as written.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    #[serde(default)]
    pub listen: Option<String>,
    /// Web origins (`https://app.example`) whose pages may call the API
    /// (CORS); a request with any other `Origin`, or `Sec-Fetch-Site:
    /// cross-site`, is a 403. None by default.
    #[serde(default)]
    pub allowed_origins: Vec<String>,
    /// `Host` names a loopback listener answers besides loopback names and
    /// addresses (DNS rebinding); `name` or `name:port`.
    #[serde(default)]
    pub allowed_hosts: Vec<String>,
    /// Serving threads, each with its own runtime, socket and upstream
    /// connections (`serve`); default: one per CPU.
    #[serde(default)]
    pub threads: Option<usize>,
    /// Providers by name; the name is the model prefix (`deepseek/…`).
    #[serde(default)]
    pub providers: BTreeMap<String, ProviderConfig>,
    /// Model aliases: `"gpt-4o" = "deepseek/deepseek-chat"`, or a fallback
    /// chain `"smart" = ["deepseek/deepseek-chat", "dashscope/qwen-plus"]`.
    #[serde(default)]
    pub models: BTreeMap<String, ModelAlias>,
    /// Provider used for models with no `provider/` prefix and no alias.
    #[serde(default)]
    pub default_provider: Option<String>,
    /// Scenario routes for coding agents: long, image, background and
    /// reasoning requests to their own alias or chain.
    #[serde(default)]
    pub routes: RoutesConfig,
    /// A folder of profile files that override or extend the bundled ones
    /// (default `~/.modelshim/providers`).
    #[serde(default)]
    pub providers_dir: Option<PathBuf>,
    #[serde(default)]
    pub upstream: UpstreamConfig,
    /// Agent Skills. Absent in a config built in code (no skills); the
    /// command line fills in the defaults (`~/.modelshim/skills`, `./skills`)
    /// when the file has no `[skills]` section.
    #[serde(default)]
    pub skills: Option<skills::SkillsConfig>,
    /// MCP servers whose tools run server-side.
    #[serde(default)]
    pub mcp: Option<tools::McpConfig>,
    /// Server-side tools and the agent loop.
    #[serde(default)]
    pub tools: Option<tools::ToolsConfig>,
    /// Proxy keys (none: open, loopback only unless told otherwise).
    #[serde(default)]
    pub auth: Option<auth::AuthConfig>,
    /// Request size and concurrency limits, shutdown grace.
    #[serde(default)]
    pub limits: limits::LimitsConfig,
    #[serde(default)]
    pub state: state::StateConfig,
    /// Optional OpenTelemetry trace export.
    #[serde(default)]
    pub telemetry: telemetry::TelemetryConfig,
    /// The Responses front: reasoning keys, hosted tools it may drop.
    #[serde(default)]
    pub responses: responses::ResponsesConfig,
    /// The live console at `/console` (off by default).
    #[serde(default)]
    pub console: console::ConsoleConfig,
    /// The model that describes images for models that cannot see (none:
    /// such a request is a 400). docs/vision.md.
    #[serde(default)]
    pub vision_bridge: Option<vision::VisionBridgeConfig>,
}

/// `[routes]`: each scenario's target, an alias, `provider/model` or a
/// chain like a `[models]` entry.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RoutesConfig {
    /// Requests whose estimated prompt tokens exceed `long_context_tokens`.
    #[serde(default)]
    pub long_context: Option<ModelAlias>,
    /// Default 60000.
    #[serde(default)]
    pub long_context_tokens: Option<u64>,
    /// The client's background calls (a model name with `haiku` in it:
    /// Claude Code's small model).
    #[serde(default)]
    pub background: Option<ModelAlias>,
    /// Requests that ask for reasoning.
    #[serde(default)]
    pub think: Option<ModelAlias>,
    /// Requests with images.
    #[serde(default)]
    pub image: Option<ModelAlias>,
}

/// A `[models]` entry: one target, or targets tried in order when the
/// previous one fails before answering.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(untagged)]
pub enum ModelAlias {
    One(String),
    Chain(Vec<String>),
}

impl ModelAlias {
    pub fn targets(&self) -> Vec<String> {
        match self {
            ModelAlias::One(t) => vec![t.clone()],
            ModelAlias::Chain(v) => v.clone(),
        }
    }
}

impl From<&str> for ModelAlias {
    fn from(s: &str) -> Self {
        ModelAlias::One(s.to_string())
    }
}

impl From<String> for ModelAlias {
    fn from(s: String) -> Self {
        ModelAlias::One(s)
    }
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
    /// An environment variable with several keys, comma- or space-separated:
    /// a pool the requests spread over, each conversation sticking to one
    /// (beside or instead of `api_key_env`, whose key comes first).
    #[serde(default)]
    pub api_keys_env: Option<String>,
    /// How long a pool key answered with 401/402/403 rests (default 300 s).
    #[serde(default)]
    pub key_rest_secs: Option<f64>,
    #[serde(default)]
    pub tool_calls: Option<ToolMode>,
    /// Overrides the profile's `[request] structured_outputs`.
    #[serde(default)]
    pub structured_outputs: Option<StructuredMode>,
    /// Hidden re-asks of an answer that does not validate against its
    /// schema (structured outputs, strict tools); default 1, at most 5.
    #[serde(default)]
    pub structured_retries: Option<u32>,
    /// Text tool-call formats for every model of this provider (overrides
    /// the profile's per-model formats).
    #[serde(default)]
    pub formats: Option<Vec<String>>,
    /// Models to list on `/v1/models` (overrides the profile's).
    #[serde(default)]
    pub models: Option<Vec<String>>,
    /// Fields of `[upstream]` to override for this provider.
    #[serde(default)]
    pub upstream: Option<toml::Table>,
    /// Prices by model glob (`[providers.NAME.prices."deepseek-*"]`): when one
    /// matches, they win over the profile's `[prices]` (docs/spend.md).
    #[serde(default)]
    pub prices: BTreeMap<String, prices::Price>,
    /// Context windows in tokens by model glob; win over the profile's
    /// `[context_windows]`.
    #[serde(default)]
    pub context_windows: BTreeMap<String, u64>,
    /// Whether this provider's models take images, whatever the profile's
    /// `[vision]` says (docs/vision.md).
    #[serde(default)]
    pub vision: Option<bool>,
}

/// Upstream timeouts, retries and circuit breaker. A provider's
/// `[providers.X.upstream]` table overrides the global `[upstream]` field by
/// field.
#[derive(Debug, Clone, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct UpstreamConfig {
    #[serde(default = "d_connect")]
    pub connect_timeout_secs: f64,
    /// Until the response headers arrive (504 after that).
    #[serde(default = "d_first_byte")]
    pub first_byte_timeout_secs: f64,
    /// Longest silence inside a stream before it is ended with an error: a
    /// wait for the next complete line (bytes that complete none do not
    /// count). A non-streamed body must also arrive whole within this of
    /// its headers (504 after).
    #[serde(default = "d_idle")]
    pub idle_timeout_secs: f64,
    /// Retries of a failed attempt (429, 5xx, connection errors) before
    /// anything was sent to the client.
    #[serde(default)]
    pub retries: Option<u32>,
    /// Base of the jittered exponential backoff between retries.
    #[serde(default = "d_backoff")]
    pub retry_backoff_ms: u64,
    /// The longest wait before a retry, `Retry-After` included: an upstream
    /// asking for longer is not retried (the next provider of a chain is).
    #[serde(default = "d_max_wait")]
    pub retry_max_wait_secs: f64,
    /// Consecutive failures that open the circuit breaker (0 = never).
    #[serde(default = "d_breaker")]
    pub breaker_failures: u32,
    /// How long an open breaker refuses calls before one probe is let through.
    #[serde(default = "d_breaker_open")]
    pub breaker_open_secs: f64,
    /// A provider whose config and profile name no models lists its
    /// upstream's own `GET /models` on `/v1/models`, fetched when first
    /// asked for and kept this long; then the next request gets it once more
    /// while it is fetched again in the background (a failed fetch: after at
    /// most 30 s). Per replica, also with `[state] redis_url`.
    #[serde(default = "d_models_refresh")]
    pub models_refresh_secs: f64,
    /// The longest wait for that `GET /models` answer, whole.
    #[serde(default = "d_models_timeout")]
    pub models_timeout_secs: f64,
}

fn d_models_refresh() -> f64 {
    300.0
}
fn d_models_timeout() -> f64 {
    10.0
}

fn d_backoff() -> u64 {
    250
}
fn d_max_wait() -> f64 {
    10.0
}
fn d_breaker() -> u32 {
    5
}
fn d_breaker_open() -> f64 {
    30.0
}

/// Default retries when `retries` is not set.
pub const DEFAULT_RETRIES: u32 = 2;

impl UpstreamConfig {
    pub fn retries(&self) -> u32 {
        self.retries.unwrap_or(DEFAULT_RETRIES)
    }

    /// This table with the fields set in `over` (a provider's own table)
    /// replaced.
    pub fn merged(&self, over: &toml::Table) -> Result<UpstreamConfig, String> {
        let mut base = toml::Table::try_from(self).map_err(|e| e.to_string())?;
        for (k, v) in over {
            base.insert(k.clone(), v.clone());
        }
        base.try_into().map_err(|e: toml::de::Error| e.to_string())
    }
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
            retry_backoff_ms: d_backoff(),
            retry_max_wait_secs: d_max_wait(),
            breaker_failures: d_breaker(),
            breaker_open_secs: d_breaker_open(),
            models_refresh_secs: d_models_refresh(),
            models_timeout_secs: d_models_timeout(),
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
}
