//! The `[limits]` section (read by the edge, see `server::limits`).

use serde::Deserialize;

/// The `[limits]` section.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LimitsConfig {
    /// Largest request body (413 above).
    #[serde(default = "d_body")]
    pub max_body_bytes: usize,
    /// Most `messages` in one chat request (400 above).
    #[serde(default = "d_messages")]
    pub max_messages: usize,
    /// Most `tools` in one chat request (400 above).
    #[serde(default = "d_tools")]
    pub max_tools: usize,
    /// Concurrent requests per proxy key (429 above); none: unlimited.
    #[serde(default)]
    pub max_concurrent_per_key: Option<u32>,
    /// Concurrent requests in total (429 above); none: unlimited.
    #[serde(default)]
    pub max_concurrent: Option<u32>,
    /// On SIGTERM, how long in-flight requests and streams may finish
    /// before open streams are ended with an in-band error.
    #[serde(default = "d_grace")]
    pub shutdown_grace_secs: f64,
    /// How long a client may take to send a request head (request line and
    /// headers), also the longest an idle keep-alive connection or a new
    /// connection that sends nothing is kept (`serve`; closed after).
    #[serde(default = "d_header_timeout")]
    pub header_read_timeout_secs: f64,
    /// How long a client may take to send a whole request body (408 after),
    /// so a slow upload cannot hold its concurrency slots.
    #[serde(default = "d_body_timeout")]
    pub body_read_timeout_secs: f64,
    /// Open connections per client address (`serve`; more are closed at
    /// once); 0: unlimited. Behind a load balancer that connects from a few
    /// addresses, raise it or set 0.
    #[serde(default = "d_per_ip")]
    pub max_connections_per_ip: u32,
    /// The most bytes of one upstream answer the proxy holds: a JSON body,
    /// one SSE event, or a stream it assembles or keeps (non-streamed
    /// client, agent loop, Responses API); 502, or an in-band error once
    /// streaming. A plain stream to a streaming client is not held.
    #[serde(default = "d_answer")]
    pub max_answer_bytes: usize,
    /// The most tokens one upstream answer's usage may report in one count
    /// (input or output); more is implausible (beyond any context window)
    /// and treated like a missing usage: estimated, logged, counted in
    /// `modelshim_usage_implausible_total` (docs/spend.md).
    #[serde(default = "d_usage")]
    pub max_usage_tokens: u64,
    /// Hold loopback clients (127.0.0.0/8, ::1) to `max_connections_per_ip`
    /// too. Off by default: a sidecar's app connects from 127.0.0.1 only
    /// (still bound by `max_concurrent`).
    #[serde(default)]
    pub cap_loopback_connections: bool,
}

fn d_body() -> usize {
    16 * 1024 * 1024
}
fn d_messages() -> usize {
    4096
}
fn d_tools() -> usize {
    512
}
fn d_grace() -> f64 {
    30.0
}
fn d_header_timeout() -> f64 {
    10.0
}
fn d_body_timeout() -> f64 {
    60.0
}
fn d_per_ip() -> u32 {
    256
}
fn d_answer() -> usize {
    64 * 1024 * 1024
}
fn d_usage() -> u64 {
    10_000_000
}

impl Default for LimitsConfig {
    fn default() -> Self {
        LimitsConfig {
            max_body_bytes: d_body(),
            max_messages: d_messages(),
            max_tools: d_tools(),
            max_concurrent_per_key: None,
            max_concurrent: None,
            shutdown_grace_secs: d_grace(),
            header_read_timeout_secs: d_header_timeout(),
            body_read_timeout_secs: d_body_timeout(),
            max_connections_per_ip: d_per_ip(),
            max_answer_bytes: d_answer(),
            max_usage_tokens: d_usage(),
            cap_loopback_connections: false,
        }
    }
}

impl LimitsConfig {
    pub fn header_read_timeout(&self) -> std::time::Duration {
        secs(self.header_read_timeout_secs)
    }

    pub fn body_read_timeout(&self) -> std::time::Duration {
        secs(self.body_read_timeout_secs)
    }
}

/// Seconds as written in the config; a negative one is zero, a huge one
/// about thirty years (never a panic, nor a deadline that overflows).
pub fn secs(s: f64) -> std::time::Duration {
    const LONGEST: std::time::Duration = std::time::Duration::from_secs(1_000_000_000);
    std::time::Duration::try_from_secs_f64(s.max(0.0)).unwrap_or(LONGEST).min(LONGEST)
}
