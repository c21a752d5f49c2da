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
pub mod sealed;

use std::num::NonZeroU32;
use std::time::Duration;

use futures_util::future::BoxFuture;
use serde_json::Value;

pub use self::redis::RedisStore;
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
