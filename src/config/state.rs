//! The `[state]` section (the conversation-state store, see `state`).

use std::time::Duration;

/// Settings of the `[state]` config section.
#[derive(Debug, Clone, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StateConfig {
    /// A shared Redis for several replicas; memory when absent.
    #[serde(default)]
    pub redis_url: Option<String>,
    /// How long conversation state is kept.
    #[serde(default = "d_ttl")]
    pub ttl_secs: u64,
    /// Upper bound of entries kept in memory.
    #[serde(default = "d_max")]
    pub max_entries: u64,
    /// Upper bound of the bytes the memory store keeps (stored Responses
    /// conversations are the large ones); the oldest entries go first.
    #[serde(default = "d_max_bytes")]
    pub max_bytes: u64,
}

fn d_ttl() -> u64 {
    24 * 3600
}
fn d_max() -> u64 {
    100_000
}
fn d_max_bytes() -> u64 {
    256 << 20
}

impl Default for StateConfig {
    fn default() -> Self {
        StateConfig { redis_url: None, ttl_secs: d_ttl(), max_entries: d_max(), max_bytes: d_max_bytes() }
    }
}

impl StateConfig {
    pub fn ttl(&self) -> Duration {
        Duration::from_secs(self.ttl_secs)
    }
}
