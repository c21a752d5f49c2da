//! The `[tools]` and `[mcp]` config sections (DESIGN.md keys plus the
//! server-side tool settings documented in docs/tools-and-mcp.md).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;
use serde_json::Value;

/// `[tools]`: server-side tools and the agent loop.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolsConfig {
    /// Built-in tools offered to the model on every request.
    #[serde(default)]
    pub builtin: Vec<String>,
    /// Upstream calls per client request before the loop gives up.
    #[serde(default = "d_iterations")]
    pub max_iterations: u32,
    /// Wall-clock budget of one client request's loop.
    #[serde(default = "d_deadline")]
    pub deadline_secs: f64,
    /// Default time limit of one tool call.
    #[serde(default = "d_timeout")]
    pub timeout_secs: f64,
    /// Characters of a tool result kept in a trace entry.
    #[serde(default = "d_trace_chars")]
    pub trace_result_chars: usize,
    #[serde(default)]
    pub http_fetch: HttpFetchConfig,
    /// Skill tools: one function bound to several tools.
    #[serde(default)]
    pub skill: BTreeMap<String, SkillConfig>,
}

impl Default for ToolsConfig {
    fn default() -> Self {
        ToolsConfig {
            builtin: Vec::new(),
            max_iterations: d_iterations(),
            deadline_secs: d_deadline(),
            timeout_secs: d_timeout(),
            trace_result_chars: d_trace_chars(),
            http_fetch: HttpFetchConfig::default(),
            skill: BTreeMap::new(),
        }
    }
}

impl ToolsConfig {
    pub fn timeout(&self) -> Duration {
        secs(self.timeout_secs)
    }
    pub fn deadline(&self) -> Duration {
        secs(self.deadline_secs)
    }
}

/// `[tools.http_fetch]`: the guards of the built-in `http_fetch`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HttpFetchConfig {
    /// Hosts that may be fetched (`example.com`, `*.example.com`); empty
    /// means any public host.
    #[serde(default)]
    pub allow_hosts: Vec<String>,
    /// Allow loopback, private, link-local and other non-public addresses.
    #[serde(default)]
    pub allow_private: bool,
    /// Bytes of body read at most.
    #[serde(default = "d_max_bytes")]
    pub max_bytes: usize,
    #[serde(default = "d_fetch_timeout")]
    pub timeout_secs: f64,
}

impl Default for HttpFetchConfig {
    fn default() -> Self {
        HttpFetchConfig {
            allow_hosts: Vec::new(),
            allow_private: false,
            max_bytes: d_max_bytes(),
            timeout_secs: d_fetch_timeout(),
        }
    }
}

/// How a skill tool runs its bound tools.
#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq, Default)]
#[serde(rename_all = "snake_case")]
pub enum SkillMode {
    /// One after the other, same arguments, results concatenated.
    #[default]
    Sequential,
    /// All at once, results in declared order.
    Parallel,
    /// A rule on the arguments picks the tools (run in order).
    Routing,
}

/// `[tools.skill.NAME]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SkillConfig {
    pub description: String,
    /// JSON schema of the arguments (default: any object).
    #[serde(default)]
    pub parameters: Option<Value>,
    #[serde(default)]
    pub mode: SkillMode,
    /// Bound tools, by the name the model would see (`current_time`,
    /// `server__tool`).
    #[serde(default)]
    pub tools: Vec<String>,
    /// The rule of `routing` mode.
    #[serde(default)]
    pub route: Option<RouteConfig>,
    /// Time limit of the whole skill call (default: `[tools] timeout_secs`).
    #[serde(default)]
    pub timeout_secs: Option<f64>,
}

/// `route = { arg = "kind", cases = { weather = ["a"], time = ["b"] }, default = ["c"] }`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RouteConfig {
    /// The argument whose value picks the case.
    pub arg: String,
    pub cases: BTreeMap<String, Vec<String>>,
    /// Tools for values that match no case (an error result when absent).
    #[serde(default)]
    pub default: Option<Vec<String>>,
}

/// `[mcp]`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct McpConfig {
    #[serde(default)]
    pub servers: BTreeMap<String, McpServerConfig>,
}

/// `[mcp.servers.NAME]`: a stdio server (`command`) or a Streamable HTTP
/// server (`url`).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct McpServerConfig {
    #[serde(default)]
    pub command: Option<String>,
    #[serde(default)]
    pub args: Vec<String>,
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    #[serde(default)]
    pub cwd: Option<PathBuf>,
    #[serde(default)]
    pub url: Option<String>,
    /// Extra HTTP headers for `url` servers (e.g. `Authorization`).
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// Time limit of one tool call (default: `[tools] timeout_secs`).
    #[serde(default)]
    pub timeout_secs: Option<f64>,
    /// Time allowed to start and list tools.
    #[serde(default = "d_startup")]
    pub startup_timeout_secs: f64,
    /// `false` keeps the server's tools for skill tools only (not offered
    /// to the model directly).
    #[serde(default = "d_true")]
    pub expose: bool,
    #[serde(default = "d_true")]
    pub enabled: bool,
    /// How a session starts: `initialize` (the handshake every server
    /// before MCP 2026-07-28 speaks), `discover` (2026-07-28's stateless
    /// `server/discover`, no `initialize`), or `auto` (discover, falling back
    /// to initialize for a server that does not know it).
    #[serde(default)]
    pub lifecycle: Lifecycle,
}

/// `[mcp.servers.NAME] lifecycle`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Lifecycle {
    #[default]
    Initialize,
    Discover,
    Auto,
}

fn d_iterations() -> u32 {
    8
}
fn d_deadline() -> f64 {
    300.0
}
fn d_timeout() -> f64 {
    30.0
}
fn d_trace_chars() -> usize {
    2000
}
fn d_max_bytes() -> usize {
    1 << 20
}
fn d_fetch_timeout() -> f64 {
    15.0
}
fn d_startup() -> f64 {
    60.0
}
fn d_true() -> bool {
    true
}

/// Seconds from config as a duration (negative and NaN become zero).
pub fn secs(s: f64) -> Duration {
    Duration::try_from_secs_f64(s).unwrap_or(Duration::ZERO)
}
