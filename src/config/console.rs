//! The `[console]` section: the live console at `/console` (docs/console.md).

use serde::Deserialize;

/// The `[console]` section.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConsoleConfig {
    /// Serve the console at `/console` (off by default).
    #[serde(default)]
    pub enabled: bool,
    /// The environment variable holding the admin key (separate from the
    /// proxy keys); without it set, every console request is refused.
    #[serde(default = "d_admin_key_env")]
    pub admin_key_env: String,
    /// How many recent requests the console keeps (a ring, per replica);
    /// each keeps at most 8 × `max_body_bytes` of bodies, results and images.
    #[serde(default = "d_ring_size")]
    pub ring_size: usize,
    /// The most bytes kept of each recorded body (client request, upstream
    /// request and answer, what the client got).
    #[serde(default = "d_max_body_bytes")]
    pub max_body_bytes: usize,
    /// Record while no console is open too (default: only while one is).
    #[serde(default)]
    pub record_always: bool,
    /// Serve the console on a non-loopback listener (default: refuse to
    /// start with the console on and a non-loopback address).
    #[serde(default)]
    pub allow_remote: bool,
    /// How long a login session lasts (logout ends it sooner).
    #[serde(default = "d_session_ttl")]
    pub session_ttl_secs: u64,
}

fn d_session_ttl() -> u64 {
    12 * 3600
}

fn d_admin_key_env() -> String {
    "MODELSHIM_ADMIN_KEY".into()
}
fn d_ring_size() -> usize {
    100
}
fn d_max_body_bytes() -> usize {
    64 * 1024
}

impl Default for ConsoleConfig {
    fn default() -> Self {
        ConsoleConfig {
            enabled: false,
            admin_key_env: d_admin_key_env(),
            ring_size: d_ring_size(),
            max_body_bytes: d_max_body_bytes(),
            record_always: false,
            allow_remote: false,
            session_ttl_secs: d_session_ttl(),
        }
    }
}
