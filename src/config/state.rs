//! The `[state]` section (the conversation-state store, see `state`).

use std::path::PathBuf;
use std::time::Duration;

/// Settings of the `[state]` config section.
#[derive(Debug, Clone, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StateConfig {
    /// A shared Redis for several replicas (`redis://` or `rediss://`, with
    /// an ACL user as `rediss://user@host`); memory when no Redis is set.
    #[serde(default)]
    pub redis_url: Option<String>,
    /// A Redis Cluster: some of its nodes' URLs (the rest are discovered).
    #[serde(default)]
    pub redis_cluster: Vec<String>,
    /// A Redis behind Sentinel: the master's name and the sentinels' URLs.
    #[serde(default)]
    pub redis_sentinel: Option<SentinelConfig>,
    /// The environment variable holding the Redis password (of the server,
    /// every cluster node, or the sentinel's master), so it is not in the file.
    #[serde(default)]
    pub redis_password_env: Option<String>,
    /// PEM CA certificates that sign the Redis server's certificate
    /// (`rediss://`); the system roots when absent.
    #[serde(default)]
    pub redis_ca_file: Option<PathBuf>,
    /// PEM client certificate and key, for a Redis that wants one (mTLS).
    #[serde(default)]
    pub redis_cert_file: Option<PathBuf>,
    #[serde(default)]
    pub redis_key_file: Option<PathBuf>,
    /// Test setups only: TLS without verifying the server's certificate.
    #[serde(default)]
    pub redis_tls_insecure: bool,
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

/// `[state] redis_sentinel = { master = "mymaster", nodes = [...] }`.
#[derive(Debug, Clone, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SentinelConfig {
    /// The name the sentinels monitor the master under.
    pub master: String,
    /// The sentinels' URLs (`redis://host:26379`, or `rediss://` for TLS to
    /// the sentinels and the master).
    pub nodes: Vec<String>,
    /// The ACL user on the master (its password: `[state] redis_password_env`).
    #[serde(default)]
    pub master_username: Option<String>,
    /// The environment variable holding the sentinels' own password, when
    /// they require one.
    #[serde(default)]
    pub password_env: Option<String>,
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
        StateConfig {
            redis_url: None,
            redis_cluster: Vec::new(),
            redis_sentinel: None,
            redis_password_env: None,
            redis_ca_file: None,
            redis_cert_file: None,
            redis_key_file: None,
            redis_tls_insecure: false,
            ttl_secs: d_ttl(),
            max_entries: d_max(),
            max_bytes: d_max_bytes(),
        }
    }
}

impl StateConfig {
    pub fn ttl(&self) -> Duration {
        Duration::from_secs(self.ttl_secs)
    }

    /// Whether a shared Redis (in any of its forms) is configured.
    pub fn uses_redis(&self) -> bool {
        self.redis_url.is_some() || !self.redis_cluster.is_empty() || self.redis_sentinel.is_some()
    }
}
