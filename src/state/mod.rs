//! Conversation state kept between a client's requests: hidden tool
//! exchanges to splice back into the history, and the reasoning of earlier
//! assistant turns that vendors require to be replayed. The client keeps the
//! history; this store only remembers what the client never saw or dropped.
//!
//! [`StateStore`] is the interface; [`MemoryStore`] (moka: TTL, bounded) is
//! the default. A shared backend (Redis) plugs in behind the same trait so
//! replicas can continue each other's conversations.

pub mod conversation;
mod memory;
mod redis;
mod redis_conn;
pub mod sealed;

use std::num::NonZeroU32;
use std::time::Duration;

use futures_util::future::BoxFuture;
use serde_json::Value;

pub use self::redis::RedisStore;
pub use self::redis_conn::secrets as redis_secrets;
pub use memory::MemoryStore;

/// Errors of a state backend. Callers log them and go on without the state
/// (degraded, never failing the request).
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    #[error("state backend unavailable: {0}")]
    Unavailable(String),
    #[error("stored state is corrupt: {0}")]
    Corrupt(String),
}

/// Key-value storage for conversation state, by namespace.
pub trait StateStore: Send + Sync {
    /// The value under `ns`/`key`, if present and not expired.
    fn get<'a>(&'a self, ns: &'a str, key: &'a str) -> BoxFuture<'a, Result<Option<Value>, StateError>>;
    /// Stores a value for `ttl`.
    fn put<'a>(
        &'a self,
        ns: &'a str,
        key: &'a str,
        value: Value,
        ttl: Duration,
    ) -> BoxFuture<'a, Result<(), StateError>>;
    /// Removes the value under `ns`/`key` (nothing when absent).
    fn delete<'a>(&'a self, ns: &'a str, key: &'a str) -> BoxFuture<'a, Result<(), StateError>>;
    /// A short name for logs and metrics (`memory`, `redis`).
    fn kind(&self) -> &'static str;
    /// Takes one request from the shared budget `bucket` of `per_minute`
    /// requests per minute (burst: a minute's worth), so replicas enforce one
    /// limit together. A backend without shared counters answers
    /// [`RateDecision::Local`] and the caller limits in process.
    fn take_rate<'a>(
        &'a self,
        bucket: &'a str,
        per_minute: NonZeroU32,
    ) -> BoxFuture<'a, Result<RateDecision, StateError>> {
        let _ = (bucket, per_minute);
        Box::pin(async { Ok(RateDecision::Local) })
    }
    /// Adds each delta to its shared counter (made with that time to live
    /// when new) in one atomic step and returns the counters' values, so
    /// replicas keep one budget (`spend`). `None`: this backend keeps no
    /// shared counters, the caller counts in process. Not idempotent: a
    /// failed call may or may not have counted.
    fn add_counters<'a>(
        &'a self,
        counters: &'a [(String, i64, Duration)],
    ) -> BoxFuture<'a, Result<Option<Vec<i64>>, StateError>> {
        let _ = counters;
        Box::pin(async { Ok(None) })
    }
    /// Reserves `amounts[i]` on reservation counter `held[i]` when every
    /// counter with a limit (`limits[i]`, -1: none) admits it — used plus
    /// held plus the amount within the limit, or nothing held and something
    /// left — all in one atomic step (`spend::ledger`). The reservation
    /// counters live `hold_ttl` after the last reservation. `None`: this
    /// backend keeps no shared counters, the caller reserves in process.
    fn reserve_counters<'a>(
        &'a self,
        used: &'a [String],
        held: &'a [String],
        limits: &'a [i64],
        amounts: &'a [i64],
        hold_ttl: Duration,
    ) -> BoxFuture<'a, Result<Option<Reserved>, StateError>> {
        let _ = (used, held, limits, amounts, hold_ttl);
        Box::pin(async { Ok(None) })
    }
}

/// The answer of [`StateStore::reserve_counters`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reserved {
    /// Reserved; the used counters' values.
    Held(Vec<i64>),
    /// Counter `index` does not admit it: its used and held values.
    Refused { index: usize, used: i64, held: i64 },
}

/// The answer of [`StateStore::take_rate`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RateDecision {
    Admitted,
    /// Refused; the budget has room again after this long.
    Wait(Duration),
    /// This backend keeps no shared counters.
    Local,
}

pub use crate::config::state::StateConfig;

/// The hash tag that keeps keys of one group in one Redis Cluster slot:
/// every key that one script or multi-key command touches (a proxy key's
/// spend counters, …) starts with the same `slot_group(…)`, else a cluster
/// refuses the call (CROSSSLOT). A cluster hashes only what is between the
/// first `{` and the next `}`, so the group is escaped (`%`, `{`, `}`
/// percent-encoded) and never empty: distinct groups stay distinct keys.
/// Keys read or written alone need no group.
pub fn slot_group(group: &str) -> String {
    let mut out = String::with_capacity(group.len() + 3);
    out.push('{');
    for c in group.chars() {
        match c {
            '%' => out.push_str("%25"),
            '{' => out.push_str("%7B"),
            '}' => out.push_str("%7D"),
            c => out.push(c),
        }
    }
    if group.is_empty() {
        // `{}` would hash the whole key; `%` alone is no escaped group's.
        out.push('%');
    }
    out.push('}');
    out
}

/// Namespaces in use, so keys of different features never collide.
pub mod ns {
    /// Reasoning of assistant turns that made tool calls.
    pub const REASONING: &str = "reasoning";
    /// Hidden server-side tool exchanges to splice back into a history.
    pub const SPLICE: &str = "splice";
    /// Stored Responses API responses and their conversations.
    pub const RESPONSES: &str = "responses";
    /// Items of stored responses by item id, for `item_reference` inputs.
    pub const RESPONSE_ITEMS: &str = "response_items";
    /// Spend counters of proxy keys per day and month.
    pub const SPEND: &str = "spend";
    /// Rests of providers' API keys, by provider and key position.
    pub const KEY_REST: &str = "key_rest";
}

#[cfg(test)]
mod tests {
    use super::slot_group;

    /// What a Redis Cluster hashes of `key`: between the first `{` and the
    /// next `}` if that is not empty, else the whole key.
    fn hashed(key: &str) -> &str {
        if let Some(open) = key.find('{')
            && let Some(len) = key[open + 1..].find('}')
            && len > 0
        {
            return &key[open + 1..open + 1 + len];
        }
        key
    }

    #[test]
    fn a_groups_keys_hash_alike_and_groups_stay_apart() {
        for group in ["alice", "", "a}b", "{x}", "%7D", "}", "team:b"] {
            let g = slot_group(group);
            let day = format!("modelshim:spend:{g}:tokens:day:2026-12-03");
            let month = format!("modelshim:spend:{g}:cost:month:2026-12");
            assert_eq!(hashed(&day), hashed(&month), "{group:?}");
            assert_ne!(hashed(&day), day, "a real tag for {group:?}");
        }
        assert_eq!(slot_group("alice"), "{alice}");
        // Escaping is injective: names that look alike are different groups.
        let all: Vec<String> = ["a}b", "a%7Db", "a", "", "%", "%25"].iter().map(|g| slot_group(g)).collect();
        let unique: std::collections::HashSet<&String> = all.iter().collect();
        assert_eq!(unique.len(), all.len(), "{all:?}");
    }
}
