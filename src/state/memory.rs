//! The in-process store: a moka cache bounded in bytes and in entries, each
//! entry with its own time to live.

use std::time::{Duration, Instant};

use futures_util::future::BoxFuture;
use moka::Expiry;
use moka::future::Cache;
use serde_json::Value;

use super::{StateError, StateStore};

#[derive(Clone)]
struct Entry {
    value: Value,
    ttl: Duration,
    /// [`weight`] of `value`, taken once at insert.
    size: u64,
}

struct PerEntryTtl;

impl Expiry<String, Entry> for PerEntryTtl {
    fn expire_after_create(&self, _key: &String, value: &Entry, _now: Instant) -> Option<Duration> {
        Some(value.ttl)
    }
}

/// Conversation state in this process's memory.
pub struct MemoryStore {
    cache: Cache<String, Entry>,
}

impl MemoryStore {
    /// At most `max_entries` entries (default budget per entry).
    pub fn new(max_entries: u64) -> Self {
        Self::bounded(max_entries, max_entries.saturating_mul(ENTRY_FLOOR))
    }

    /// At most `max_bytes` of values and at most `max_entries` entries: the
    /// cache's capacity is bytes, and an entry weighs its size but at least
    /// `max_bytes / max_entries`, so both bounds hold.
    pub fn bounded(max_entries: u64, max_bytes: u64) -> Self {
        let floor = (max_bytes / max_entries.max(1)).max(1);
        let cache = Cache::builder()
            .max_capacity(max_bytes)
            .weigher(move |k: &String, e: &Entry| {
                let size = (k.len() as u64).saturating_add(e.size).max(floor);
                u32::try_from(size).unwrap_or(u32::MAX)
            })
            .expire_after(PerEntryTtl)
            // LRU, not TinyLFU: a new conversation's state is the one its
            // next turn asks for, and TinyLFU may refuse to admit it.
            .eviction_policy(moka::policy::EvictionPolicy::lru())
            .build();
        MemoryStore { cache }
    }
}

/// The byte budget of one entry in [`MemoryStore::new`].
const ENTRY_FLOOR: u64 = 4096;

/// About what a value holds in memory: its JSON text, plus a word per
/// node for the tree (no serialization: one walk, no allocation).
pub fn weight(v: &Value) -> u64 {
    const NODE: u64 = 32;
    let mut total = 0u64;
    let mut stack = vec![v];
    while let Some(v) = stack.pop() {
        total = total.saturating_add(NODE);
        match v {
            Value::String(s) => total = total.saturating_add(s.len() as u64),
            Value::Array(a) => stack.extend(a.iter()),
            Value::Object(m) => {
                for (k, v) in m {
                    total = total.saturating_add(k.len() as u64 + NODE);
                    stack.push(v);
                }
            }
            _ => {}
        }
    }
    total
}

fn key(ns: &str, key: &str) -> String {
    format!("{ns}:{key}")
}

impl StateStore for MemoryStore {
    fn get<'a>(&'a self, ns: &'a str, k: &'a str) -> BoxFuture<'a, Result<Option<Value>, StateError>> {
        Box::pin(async move { Ok(self.cache.get(&key(ns, k)).await.map(|e| e.value)) })
    }

    fn put<'a>(
        &'a self,
        ns: &'a str,
        k: &'a str,
        value: Value,
        ttl: Duration,
    ) -> BoxFuture<'a, Result<(), StateError>> {
        Box::pin(async move {
            let size = weight(&value);
            self.cache.insert(key(ns, k), Entry { value, ttl, size }).await;
            Ok(())
        })
    }

    fn delete<'a>(&'a self, ns: &'a str, k: &'a str) -> BoxFuture<'a, Result<(), StateError>> {
        Box::pin(async move {
            self.cache.invalidate(&key(ns, k)).await;
            Ok(())
        })
    }

    fn kind(&self) -> &'static str {
        "memory"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn stores_by_namespace_and_expires() {
        let s = MemoryStore::new(10);
        s.put("a", "k", Value::from(1), Duration::from_secs(60)).await.unwrap();
        s.put("b", "k", Value::from(2), Duration::from_millis(30)).await.unwrap();
        assert_eq!(s.get("a", "k").await.unwrap(), Some(Value::from(1)));
        assert_eq!(s.get("b", "k").await.unwrap(), Some(Value::from(2)));
        tokio::time::sleep(Duration::from_millis(80)).await;
        assert_eq!(s.get("b", "k").await.unwrap(), None);
        assert_eq!(s.get("c", "k").await.unwrap(), None);
        s.delete("a", "k").await.unwrap();
        assert_eq!(s.get("a", "k").await.unwrap(), None);
        s.delete("a", "never").await.unwrap();
    }

    /// Issue 25, item 12: twenty 4 MiB values in a 16 MiB store keep at
    /// most 16 MiB, whatever the entry count allows.
    #[tokio::test]
    async fn bounded_by_bytes() {
        let s = MemoryStore::bounded(100_000, 16 << 20);
        let big = Value::String("x".repeat(4 << 20));
        for i in 0..20 {
            s.put("responses", &format!("r{i}"), big.clone(), Duration::from_secs(60)).await.unwrap();
        }
        s.cache.run_pending_tasks().await;
        assert!(s.cache.weighted_size() <= 16 << 20, "{}", s.cache.weighted_size());
        assert!(s.cache.entry_count() <= 4, "{}", s.cache.entry_count());
        assert!(s.get("responses", "r19").await.unwrap().is_some(), "the newest is kept");
        let few = MemoryStore::bounded(3, 16 << 20);
        for i in 0..10 {
            few.put("a", &format!("k{i}"), Value::from(i), Duration::from_secs(60)).await.unwrap();
        }
        few.cache.run_pending_tasks().await;
        assert!(few.cache.entry_count() <= 3, "{}", few.cache.entry_count());
    }
}
