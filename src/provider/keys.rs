//! A provider's API keys as a pool (`api_keys_env`, beside or instead of
//! `api_key_env`). A conversation sticks to one key while it is healthy,
//! because vendors' prompt caches are per key or account; a key answered
//! with 429 rests for its `Retry-After`, one answered with 401/402/403
//! (revoked, out of balance) for `key_rest_secs`. Rests are shared through
//! the state store (a rested key rests for every replica) and kept locally
//! too, so a store that is down changes nothing here. A key is only ever
//! named by its position: never logged, shown or stored by its value.

use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::{Value, json};

use crate::openai::{ChatRequest, ErrorObject};
use crate::state::conversation::Chain;
use crate::state::{StateStore, ns};

/// How long a replica trusts what it read of a key's shared rest before
/// asking the store again: at most one read per key and second.
const SYNC_EVERY: Duration = Duration::from_secs(1);
/// A 429 without `Retry-After` rests the key this long.
const DEFAULT_429_REST: Duration = Duration::from_secs(1);
/// The longest rest, whatever an upstream asks for.
const MAX_REST: Duration = Duration::from_secs(86_400);

/// Why a key rests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Why {
    /// 429: the vendor's rate limit for this key.
    RateLimited,
    /// 401/402/403: revoked, out of balance, not allowed.
    Refused,
}

impl Why {
    pub fn label(self) -> &'static str {
        match self {
            Why::RateLimited => "rate_limited",
            Why::Refused => "refused",
        }
    }
}

#[derive(Debug, Default, Clone, Copy)]
struct KeyState {
    rest_until: Option<Instant>,
    why: Option<Why>,
    /// When the shared rest was last read.
    synced: Option<Instant>,
    /// Requests sent with the key, and how many of them were answered.
    used: u64,
}

/// The keys of one provider.
#[derive(Debug)]
pub struct KeyPool {
    provider: String,
    keys: Vec<String>,
    state: Mutex<Vec<KeyState>>,
    rest_refused: Duration,
    /// Spreads requests that belong to no conversation.
    next: AtomicUsize,
}

/// What the caller knows of the request, for the choice of its key.
#[derive(Clone, Copy)]
pub struct Pick<'a> {
    /// Where rests are shared.
    pub store: &'a dyn StateStore,
    /// The conversation's affinity ([`affinity`]); `None` spreads.
    pub affinity: Option<u64>,
}

/// A key to send with: its position and value.
#[derive(Clone, Copy)]
pub struct Chosen<'a> {
    pub index: usize,
    pub key: &'a str,
}

/// A key's state for `/metrics` and the console, by position.
#[derive(Debug, Clone, serde::Serialize)]
pub struct KeyView {
    pub position: usize,
    pub state: &'static str,
    pub rest_secs: u64,
    pub used: u64,
}

impl KeyPool {
    /// `keys` in order (the single `api_key_env` key first), duplicates and
    /// empty ones dropped.
    pub fn new(provider: &str, keys: Vec<String>, rest_refused: Duration) -> Self {
        let mut uniq: Vec<String> = Vec::with_capacity(keys.len());
        for k in keys.into_iter().map(|k| k.trim().to_string()).filter(|k| !k.is_empty()) {
            if !uniq.contains(&k) {
                uniq.push(k);
            }
        }
        let n = uniq.len();
        KeyPool {
            provider: provider.to_string(),
            keys: uniq,
            state: Mutex::new(vec![KeyState::default(); n]),
            rest_refused,
            next: AtomicUsize::new(0),
        }
    }

    /// The keys from an environment variable's value: comma- or
    /// space-separated.
    pub fn split(value: &str) -> Vec<String> {
        value.split(|c: char| c == ',' || c.is_whitespace()).filter(|k| !k.is_empty()).map(str::to_string).collect()
    }

    pub fn len(&self) -> usize {
        self.keys.len()
    }

    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// Whether keys rotate (more than one): a single key keeps the plain
    /// retry behaviour (wait, then the same key again).
    pub fn rotates(&self) -> bool {
        self.keys.len() > 1
    }

    /// The first key (model lists, embeddings).
    pub fn first(&self) -> Option<&str> {
        self.keys.first().map(String::as_str)
    }

    /// Every key, for the redactor.
    pub fn all(&self) -> &[String] {
        &self.keys
    }

    /// The key for a request: the conversation's own while it is healthy,
    /// else the next healthy one after it. `Err` with the shortest wait when
    /// every key rests.
    pub async fn choose(&self, pick: Option<&Pick<'_>>) -> Result<Option<Chosen<'_>>, Duration> {
        let n = self.keys.len();
        if n <= 1 {
            return Ok(self.first().map(|key| Chosen { index: 0, key }));
        }
        let start = match pick.and_then(|p| p.affinity) {
            Some(a) => (a % n as u64) as usize,
            None => self.next.fetch_add(1, Ordering::Relaxed) % n,
        };
        let mut shortest: Option<Duration> = None;
        for i in (0..n).map(|o| (start + o) % n) {
            if let Some(p) = pick {
                self.sync(p.store, i).await;
            }
            match self.resting(i) {
                None => {
                    self.with(i, |s| s.used = s.used.saturating_add(1));
                    return Ok(Some(Chosen { index: i, key: &self.keys[i] }));
                }
                Some(left) => shortest = Some(shortest.map_or(left, |s| s.min(left))),
            }
        }
        Err(shortest.unwrap_or(DEFAULT_429_REST))
    }

    /// Rests key `index` (by position in logs, metrics and the store) for
    /// `retry_after` (429) or `key_rest_secs` (401/402/403).
    pub async fn rest(&self, index: usize, why: Why, retry_after: Option<Duration>, store: Option<&dyn StateStore>) {
        if index >= self.keys.len() {
            return;
        }
        let dur = match why {
            // `Retry-After: 0` still rests the key a moment.
            Why::RateLimited => retry_after.unwrap_or(DEFAULT_429_REST).max(Duration::from_millis(100)),
            Why::Refused => self.rest_refused,
        }
        .min(MAX_REST);
        let until = Instant::now() + dur;
        self.with(index, |s| {
            s.rest_until = Some(s.rest_until.map_or(until, |u| u.max(until)));
            s.why = Some(why);
        });
        crate::metrics::key_state(&self.provider, index, 1);
        crate::metrics::key_rest(&self.provider, index, why.label());
        tracing::warn!(provider = %self.provider, key = index, reason = why.label(), rest_secs = dur.as_secs_f64(), "API key rests");
        if let Some(store) = store {
            let v = json!({"until_ms": epoch_ms().saturating_add(dur.as_millis() as u64), "why": why.label()});
            if let Err(e) = store.put(ns::KEY_REST, &self.store_key(index), v, dur.max(Duration::from_millis(1))).await
            {
                tracing::debug!(error = %e, provider = %self.provider, key = index, "key rest not shared");
            }
        }
    }

    /// Each key's state, by position.
    pub fn view(&self) -> Vec<KeyView> {
        let now = Instant::now();
        let Ok(state) = self.state.lock() else { return Vec::new() };
        state
            .iter()
            .enumerate()
            .map(|(position, s)| {
                let left = s.rest_until.and_then(|u| u.checked_duration_since(now)).filter(|d| !d.is_zero());
                let label = match (left, s.why) {
                    (Some(_), Some(w)) => w.label(),
                    _ => "healthy",
                };
                KeyView { position, state: label, rest_secs: left.map_or(0, |d| d.as_secs().max(1)), used: s.used }
            })
            .collect()
    }

    /// The remaining rest of key `i`, if it rests.
    fn resting(&self, i: usize) -> Option<Duration> {
        let now = Instant::now();
        let Ok(mut state) = self.state.lock() else { return None };
        let s = state.get_mut(i)?;
        match s.rest_until {
            Some(u) if u > now => Some(u - now),
            Some(_) => {
                s.rest_until = None;
                s.why = None;
                crate::metrics::key_state(&self.provider, i, 0);
                None
            }
            None => None,
        }
    }

    /// Reads key `i`'s shared rest when the last read is older than
    /// [`SYNC_EVERY`]. The store bounds its own wait; a failed read leaves
    /// the local state as it is.
    async fn sync(&self, store: &dyn StateStore, i: usize) {
        let now = Instant::now();
        let due = self.with(i, |s| {
            let due = s.synced.is_none_or(|t| now.duration_since(t) >= SYNC_EVERY);
            if due {
                s.synced = Some(now);
            }
            due
        });
        if due != Some(true) || store.kind() == "memory" {
            return;
        }
        let Ok(Some(v)) = store.get(ns::KEY_REST, &self.store_key(i)).await else { return };
        let Some(until_ms) = v.get("until_ms").and_then(Value::as_u64) else { return };
        let left = Duration::from_millis(until_ms.saturating_sub(epoch_ms())).min(MAX_REST);
        if left.is_zero() {
            return;
        }
        let why = match v.get("why").and_then(Value::as_str) {
            Some("refused") => Why::Refused,
            _ => Why::RateLimited,
        };
        let until = Instant::now() + left;
        self.with(i, |s| {
            s.rest_until = Some(s.rest_until.map_or(until, |u| u.max(until)));
            s.why = Some(why);
        });
        crate::metrics::key_state(&self.provider, i, 1);
    }

    fn with<T>(&self, i: usize, f: impl FnOnce(&mut KeyState) -> T) -> Option<T> {
        let Ok(mut state) = self.state.lock() else { return None };
        state.get_mut(i).map(f)
    }

    /// The store key of key `i`: the provider and the position, never the
    /// key itself.
    fn store_key(&self, i: usize) -> String {
        format!("{}:{i}", self.provider)
    }
}

/// The conversation's affinity: its owner and its start (the messages up to
/// the first user message), folded like the state store's keys
/// ([`Chain`]), so every turn of a conversation picks the same key.
pub fn affinity(owner: Option<&str>, req: &ChatRequest) -> Option<u64> {
    let first_user = req.messages.iter().position(|m| m.role == "user")?;
    let mut chain = Chain::new(owner);
    for m in &req.messages[..=first_user] {
        chain.push(m);
    }
    u64::from_str_radix(chain.key().get(..16)?, 16).ok()
}

/// The error a client gets when every key of `provider` rests: a 429 with
/// the shortest wait.
pub fn all_resting(provider: &str, n: usize, wait: Duration) -> crate::provider::UpstreamError {
    let mut e = ErrorObject::new(
        "rate_limit_exceeded",
        format!(
            "Every API key of {provider} ({n}) is resting after rate limits or refusals; one is free again in {}s.",
            wait.as_secs_f64().ceil().max(1.0)
        ),
    )
    .with_code("rate_limit_exceeded");
    e.retry_after = Some(wait);
    crate::provider::UpstreamError::Status { status: 429, error: Box::new(e) }
}

fn epoch_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_resting_key_is_passed_over_and_all_resting_gives_the_shortest_wait() {
        let pool = KeyPool::new("p", vec!["a".into(), "b".into(), "a".into(), " ".into()], Duration::from_secs(300));
        assert_eq!(pool.len(), 2);
        let store = crate::state::MemoryStore::new(100);
        let pick = Pick { store: &store, affinity: Some(0) };
        assert_eq!(pool.choose(Some(&pick)).await.map(|c| c.map(|c| c.index)), Ok(Some(0)));
        pool.rest(0, Why::RateLimited, Some(Duration::from_secs(30)), None).await;
        assert_eq!(pool.choose(Some(&pick)).await.map(|c| c.map(|c| c.index)), Ok(Some(1)));
        pool.rest(1, Why::Refused, None, None).await;
        let wait = pool.choose(Some(&pick)).await.err().unwrap_or_default();
        assert!(wait > Duration::from_secs(28) && wait <= Duration::from_secs(30), "{wait:?}");
        let v = pool.view();
        assert_eq!((v[0].state, v[1].state), ("rate_limited", "refused"));
        assert!(!format!("{v:?}").contains("\"a\""));
    }
}
