//! The shared store for several replicas: Redis as one server, a cluster or
//! behind Sentinel (`redis_conn.rs`: one connection type for the three).
//! Every operation is bounded in time; when Redis is down, operations fail
//! fast with [`StateError::Unavailable`], callers go on without the state
//! (degraded, still serving), the `modelshim_state_backend_up` gauge shows 0
//! and one log line marks each transition.

use std::future::Future;
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures_util::future::BoxFuture;
use serde_json::Value;

use super::redis_conn::{self, Conn};
use super::{RateDecision, Reserved, StateError, StateStore};
use crate::config::state::StateConfig;

/// Longest time one Redis operation may take before the request goes on
/// without it.
const OP_TIMEOUT: Duration = Duration::from_millis(500);

/// GCRA in one atomic step, on Redis's clock so replicas' clocks don't
/// matter. KEYS[1] holds the theoretical arrival time (ms); ARGV[1] is the
/// emission interval (ms), ARGV[2] the burst window (ms). Returns 0 when
/// admitted, else the wait in ms.
const GCRA: &str = r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local interval = tonumber(ARGV[1])
local window = tonumber(ARGV[2])
local tat = tonumber(redis.call('GET', KEYS[1]) or now)
if tat < now then tat = now end
local new_tat = tat + interval
local wait = new_tat - window - now
if wait > 0 then return wait end
redis.call('SET', KEYS[1], new_tat, 'PX', new_tat - now)
return 0
";

/// Spend counters in one atomic step: KEYS are the counters, ARGV pairs
/// of delta and time to live (ms, set when the counter has none). Returns
/// every counter's value. A counter never goes below 0 (a reservation
/// released after its counter expired).
const COUNTERS: &str = r"
local out = {}
for i, k in ipairs(KEYS) do
  local d = tonumber(ARGV[2 * i - 1])
  local v
  if d ~= 0 then
    v = redis.call('INCRBY', k, d)
    if v < 0 then
      redis.call('SET', k, 0)
      v = 0
    end
    if redis.call('PTTL', k) < 0 then redis.call('PEXPIRE', k, ARGV[2 * i]) end
  else
    v = tonumber(redis.call('GET', k) or '0')
  end
  out[i] = v
end
return out
";

/// A budget reservation in one atomic step (`spend::ledger`): KEYS are n
/// used counters then their n reservation counters (one hash tag, one
/// Cluster slot); ARGV are n pairs of limit (-1: none) and amount, then the
/// reservation counters' time to live (ms). A counter admits the amount
/// when used + held + amount is within its limit, or when nothing is held
/// and something is left. Returns {1, used...} when every counter admits it
/// (and adds the amounts), else {0, index, used, held} of the first that
/// does not.
const RESERVE: &str = r"
local n = #KEYS / 2
local used = {}
for i = 1, n do
  local u = tonumber(redis.call('GET', KEYS[i]) or '0')
  local h = tonumber(redis.call('GET', KEYS[n + i]) or '0')
  if h < 0 then h = 0 end
  local limit = tonumber(ARGV[2 * i - 1])
  local amount = tonumber(ARGV[2 * i])
  if limit >= 0 and not (u + h + amount <= limit or (h == 0 and u < limit)) then
    return {0, i, u, h}
  end
  used[i] = u
end
for i = 1, n do
  local amount = tonumber(ARGV[2 * i])
  if amount ~= 0 then redis.call('INCRBY', KEYS[n + i], amount) end
  redis.call('PEXPIRE', KEYS[n + i], ARGV[2 * n + 1])
end
local out = {1}
for i = 1, n do out[i + 1] = used[i] end
return out
";

/// Conversation state in Redis, under `modelshim:{ns}:{key}`; shared rate
/// budgets under `modelshim:rate:{bucket}`.
pub struct RedisStore {
    conn: Conn,
    up: AtomicBool,
    gcra: redis::Script,
    counters: redis::Script,
    reserve: redis::Script,
}

impl RedisStore {
    /// One Redis server at `url` (see [`RedisStore::from_config`]).
    pub fn new(url: &str) -> Result<Self, StateError> {
        Self::from_config(&StateConfig { redis_url: Some(url.to_string()), ..StateConfig::default() })
    }

    /// The store `[state]` describes (`redis_url`, `redis_cluster` or
    /// `redis_sentinel`, with TLS and the password). Connects lazily: a
    /// Redis that is down at startup does not stop the server.
    pub fn from_config(config: &StateConfig) -> Result<Self, StateError> {
        let (conn, described) = Conn::new(config, OP_TIMEOUT)?;
        if config.redis_tls_insecure {
            tracing::warn!(
                "[state] redis_tls_insecure: the Redis server's certificate is NOT verified (test setups only)"
            );
        }
        tracing::info!(redis = %described, "shared state in redis");
        crate::metrics::state_up("redis", true);
        Ok(RedisStore {
            conn,
            up: AtomicBool::new(true),
            gcra: redis::Script::new(GCRA),
            counters: redis::Script::new(COUNTERS),
            reserve: redis::Script::new(RESERVE),
        })
    }

    /// Runs an idempotent command (GET, SET, DEL). A command that failed on
    /// a connection that had died (Redis restarted) or on a master demoted
    /// by a failover is sent once more on the new connection: otherwise the
    /// first write after a restart was lost while the client was told it was
    /// stored.
    async fn run<T: redis::FromRedisValue>(&self, op: &'static str, cmd: redis::Cmd) -> Result<T, StateError> {
        let mut conn = self.conn.clone();
        self.bounded(op, async move {
            match cmd.query_async::<T>(&mut conn).await {
                Err(e) if redis_conn::worth_resending(&e) => {
                    tracing::debug!(error = %e, op, "redis connection lost; sending once more on a new one");
                    cmd.query_async::<T>(&mut conn).await
                }
                r => r,
            }
        })
        .await
    }

    /// One Redis operation, bounded in time, with the up/down bookkeeping.
    async fn bounded<T>(
        &self,
        op: &'static str,
        f: impl Future<Output = redis::RedisResult<T>>,
    ) -> Result<T, StateError> {
        let r = match tokio::time::timeout(OP_TIMEOUT * 2, f).await {
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

/// The Redis key of `key` in namespace `ns`. Keys that one script or
/// multi-key command touches together must hash to one cluster slot: name
/// them with [`super::slot_group`] (the part between the first `{` and `}`
/// is all a cluster hashes; `ns` never holds a brace).
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

    fn take_rate<'a>(
        &'a self,
        bucket: &'a str,
        per_minute: NonZeroU32,
    ) -> BoxFuture<'a, Result<RateDecision, StateError>> {
        Box::pin(async move {
            let window: u64 = 60_000;
            let interval = (window / u64::from(per_minute.get())).max(1);
            let mut conn = self.conn.clone();
            let mut inv = self.gcra.key(key("rate", bucket));
            inv.arg(interval).arg(window);
            // EVALSHA, loading the script on NOSCRIPT (a restarted Redis).
            let wait: u64 = self.bounded("rate", async move { inv.invoke_async(&mut conn).await }).await?;
            Ok(if wait == 0 { RateDecision::Admitted } else { RateDecision::Wait(Duration::from_millis(wait)) })
        })
    }

    fn add_counters<'a>(
        &'a self,
        counters: &'a [(String, i64, Duration)],
    ) -> BoxFuture<'a, Result<Option<Vec<i64>>, StateError>> {
        Box::pin(async move {
            let mut conn = self.conn.clone();
            let mut inv = self.counters.prepare_invoke();
            for (k, delta, ttl) in counters {
                let ms = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX).max(1);
                inv.key(key(super::ns::SPEND, k)).arg(*delta).arg(ms);
            }
            // Sent once: a retry after a lost answer could count twice.
            let v: Vec<i64> = self.bounded("counters", async move { inv.invoke_async(&mut conn).await }).await?;
            Ok(Some(v))
        })
    }

    fn reserve_counters<'a>(
        &'a self,
        used: &'a [String],
        held: &'a [String],
        limits: &'a [i64],
        amounts: &'a [i64],
        hold_ttl: Duration,
    ) -> BoxFuture<'a, Result<Option<Reserved>, StateError>> {
        Box::pin(async move {
            let mut conn = self.conn.clone();
            let mut inv = self.reserve.prepare_invoke();
            for k in used.iter().chain(held) {
                inv.key(key(super::ns::SPEND, k));
            }
            for (limit, amount) in limits.iter().zip(amounts) {
                inv.arg(*limit).arg(*amount);
            }
            inv.arg(u64::try_from(hold_ttl.as_millis()).unwrap_or(u64::MAX).max(1));
            // Sent once, like the counters.
            let v: Vec<i64> = self.bounded("reserve", async move { inv.invoke_async(&mut conn).await }).await?;
            match v.as_slice() {
                [1, used @ ..] => Ok(Some(Reserved::Held(used.to_vec()))),
                [0, i, u, h] => {
                    Ok(Some(Reserved::Refused { index: usize::try_from(*i - 1).unwrap_or(0), used: *u, held: *h }))
                }
                _ => Err(StateError::Corrupt(format!("budget script answered {v:?}"))),
            }
        })
    }
}
