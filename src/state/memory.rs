//! The in-process store: a moka cache bounded in entries, each entry with its
//! own time to live.

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
    pub fn new(max_entries: u64) -> Self {
        MemoryStore { cache: Cache::builder().max_capacity(max_entries).expire_after(PerEntryTtl).build() }
    }
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
            self.cache.insert(key(ns, k), Entry { value, ttl }).await;
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
}
