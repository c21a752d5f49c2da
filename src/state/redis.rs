//! The shared store for several replicas: Redis through the redis crate's
//! `ConnectionManager` (one multiplexed connection, reconnecting by itself).
//! Every operation is bounded in time; when Redis is down, operations fail
//! fast with [`StateError::Unavailable`], callers go on without the state
//! (degraded, still serving), the `modelshim_state_backend_up` gauge shows 0
//! and one log line marks each transition.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures_util::future::BoxFuture;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use serde_json::Value;

use super::{StateError, StateStore};

/// Longest time one Redis operation may take before the request goes on
/// without it.
const OP_TIMEOUT: Duration = Duration::from_millis(500);

/// Conversation state in Redis, under `modelshim:{ns}:{key}`.
pub struct RedisStore {
    conn: ConnectionManager,
    up: AtomicBool,
}

impl RedisStore {
    /// Connects lazily: a Redis that is down at startup does not stop the
    /// server.
    pub fn new(url: &str) -> Result<Self, StateError> {
        let client = redis::Client::open(url).map_err(|e| StateError::Unavailable(format!("redis url: {e}")))?;
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(OP_TIMEOUT))
            .set_response_timeout(Some(OP_TIMEOUT))
            .set_number_of_retries(1)
            .set_max_delay(Duration::from_millis(200));
        let conn = ConnectionManager::new_lazy_with_config(client, config)
            .map_err(|e| StateError::Unavailable(format!("redis: {e}")))?;
        crate::metrics::state_up("redis", true);
        Ok(RedisStore { conn, up: AtomicBool::new(true) })
    }

    async fn run<T: redis::FromRedisValue>(&self, op: &'static str, cmd: redis::Cmd) -> Result<T, StateError> {
        let mut conn = self.conn.clone();
        let r = match tokio::time::timeout(OP_TIMEOUT * 2, cmd.query_async::<T>(&mut conn)).await {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => Err(e.to_string()),
            Err(_) => Err(format!("no answer within {:?}", OP_TIMEOUT * 2)),
        };
        match r {
            Ok(v) => {
                if !self.up.swap(true, Ordering::Relaxed) {
                    tracing::info!("redis state store is back");
                    crate::metrics::state_up("redis", true);
                }
                Ok(v)
            }
            Err(e) => {
                crate::metrics::state_error("redis", op);
                if self.up.swap(false, Ordering::Relaxed) {
                    tracing::warn!(error = %e, "redis state store unavailable: serving without shared state (degraded)");
                    crate::metrics::state_up("redis", false);
                }
                Err(StateError::Unavailable(e))
            }
        }
    }
}

fn key(ns: &str, key: &str) -> String {
    format!("modelshim:{ns}:{key}")
}

impl StateStore for RedisStore {
    fn get<'a>(&'a self, ns: &'a str, k: &'a str) -> BoxFuture<'a, Result<Option<Value>, StateError>> {
        Box::pin(async move {
            let mut cmd = redis::cmd("GET");
            cmd.arg(key(ns, k));
            let raw: Option<String> = self.run("get", cmd).await?;
            raw.map(|s| serde_json::from_str(&s).map_err(|e| StateError::Corrupt(e.to_string()))).transpose()
        })
    }

    fn put<'a>(
        &'a self,
        ns: &'a str,
        k: &'a str,
        value: Value,
        ttl: Duration,
    ) -> BoxFuture<'a, Result<(), StateError>> {
        Box::pin(async move {
            let mut cmd = redis::cmd("SET");
            let ms = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX).max(1);
            cmd.arg(key(ns, k)).arg(value.to_string()).arg("PX").arg(ms);
            self.run::<()>("put", cmd).await
        })
    }

    fn delete<'a>(&'a self, ns: &'a str, k: &'a str) -> BoxFuture<'a, Result<(), StateError>> {
        Box::pin(async move {
            let mut cmd = redis::cmd("DEL");
            cmd.arg(key(ns, k));
            self.run::<()>("delete", cmd).await
        })
    }

    fn kind(&self) -> &'static str {
        "redis"
    }
}
