//! The day and month counters of every key: tokens and cost (nano-units of
//! the budget currency). With a shared store (Redis) the counters live
//! there and every replica adds to them atomically; this process keeps what
//! it added but could not push yet (Redis down: counted here, pushed with
//! the next call that reaches Redis again) and the values it last saw.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};

use super::period::{self, Periods};
use super::{Tokens, amount};
use crate::config::auth::Budget;
use crate::state::StateStore;

/// Counters are kept this long past their period (clock skew between
/// replicas).
const GRACE_SECS: u64 = 3600;

/// The four counters of a key in a period, in this order.
const WHAT: [&str; 4] = ["tokens:day", "cost:day", "tokens:month", "cost:month"];

#[derive(Debug, Default, Clone, Copy)]
struct Slot {
    /// The shared value last seen (all of it without a shared store).
    known: i64,
    /// Added here, not pushed yet.
    pending: i64,
    /// Being pushed now.
    flight: i64,
    /// When the counter expires (epoch seconds).
    expires: u64,
}

impl Slot {
    fn value(&self) -> i64 {
        self.known.saturating_add(self.pending).saturating_add(self.flight)
    }
}

/// A budget used up: which, its limit, and when it resets.
#[derive(Debug, Clone, PartialEq)]
pub struct Refusal {
    pub message: String,
    /// Seconds until the reset.
    pub retry_after: u64,
}

/// The counters of every key.
pub struct Ledger {
    store: Arc<dyn StateStore>,
    /// The currency of cost budgets.
    pub currency: String,
    /// Whether the store keeps shared counters (known after the first call).
    shared: AtomicBool,
    /// Per key name, per counter name.
    slots: Mutex<HashMap<String, HashMap<String, Slot>>>,
}

impl std::fmt::Debug for Ledger {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ledger").field("currency", &self.currency).finish_non_exhaustive()
    }
}

/// Today's and this month's values of a key.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Used {
    pub tokens_day: i64,
    pub cost_day: i64,
    pub tokens_month: i64,
    pub cost_month: i64,
}

/// The counters of `key` in the periods `p`, and when each expires. They
/// share one slot group: one script updates them together (on a cluster too).
fn names(key: &str, p: &Periods) -> [(String, u64); 4] {
    let group = crate::state::slot_group(key);
    let d = |what: &str, period: &str, ends: u64| (format!("{group}:{what}:{period}"), ends + GRACE_SECS);
    [
        d(WHAT[0], &p.day, p.day_ends),
        d(WHAT[1], &p.day, p.day_ends),
        d(WHAT[2], &p.month, p.month_ends),
        d(WHAT[3], &p.month, p.month_ends),
    ]
}

impl Ledger {
    pub fn new(store: Arc<dyn StateStore>, currency: Option<&str>) -> Self {
        Ledger {
            store,
            currency: currency.unwrap_or("USD").to_string(),
            shared: AtomicBool::new(true),
            slots: Mutex::new(HashMap::new()),
        }
    }

    /// Counts a finished request now (locally, so the key's next request
    /// sees it) and pushes it to the shared store in the background.
    pub fn charge(self: &Arc<Self>, key: &str, tokens: &Tokens, cost: u64) {
        let now = period::now();
        let deltas = [tokens.total(), cost, tokens.total(), cost].map(|n| i64::try_from(n).unwrap_or(i64::MAX));
        if let Ok(mut all) = self.slots.lock() {
            let slots = all.entry(key.to_string()).or_default();
            slots.retain(|_, s| s.expires > now);
            for ((name, expires), d) in names(key, &Periods::at(now)).into_iter().zip(deltas) {
                let s = slots.entry(name).or_insert(Slot { expires, ..Slot::default() });
                s.pending = s.pending.saturating_add(d);
            }
        }
        if self.shared.load(Ordering::Relaxed)
            && let Ok(rt) = tokio::runtime::Handle::try_current()
        {
            let (me, key) = (self.clone(), key.to_string());
            rt.spawn(async move { me.sync(&key).await });
        }
    }

    /// Pushes what this process counted for `key` and reads the shared
    /// values (one atomic call); with the store down or unshared, the values
    /// this process knows.
    pub async fn sync(&self, key: &str) -> Used {
        let now = period::now();
        let current = names(key, &Periods::at(now));
        let mut batch: Vec<(String, i64, Duration)> = Vec::new();
        if let Ok(mut all) = self.slots.lock() {
            let slots = all.entry(key.to_string()).or_default();
            slots.retain(|_, s| s.expires > now);
            for (name, expires) in &current {
                slots.entry(name.clone()).or_insert(Slot { expires: *expires, ..Slot::default() });
            }
            if !self.shared.load(Ordering::Relaxed) {
                for s in slots.values_mut() {
                    s.known = s.known.saturating_add(s.pending);
                    s.pending = 0;
                }
            } else {
                // Earlier periods' deltas too (Redis was down over midnight).
                for (name, s) in slots.iter_mut() {
                    if s.pending != 0 || current.iter().any(|(n, _)| n == name) {
                        batch.push((name.clone(), s.pending, Duration::from_secs(s.expires.saturating_sub(now))));
                        s.flight = s.flight.saturating_add(s.pending);
                        s.pending = 0;
                    }
                }
            }
        }
        if !batch.is_empty() {
            let answer = self.store.add_counters(&batch).await;
            if let Ok(mut all) = self.slots.lock() {
                let slots = all.entry(key.to_string()).or_default();
                for (i, (name, d, _)) in batch.iter().enumerate() {
                    let Some(s) = slots.get_mut(name) else { continue };
                    s.flight = s.flight.saturating_sub(*d);
                    match &answer {
                        Ok(Some(v)) => s.known = v.get(i).copied().unwrap_or(s.known),
                        // No shared counters: what was in flight is this process's own.
                        Ok(None) => s.known = s.known.saturating_add(*d),
                        // Counted here; pushed with the next call that reaches the store.
                        Err(_) => s.pending = s.pending.saturating_add(*d),
                    }
                }
            }
            match answer {
                Ok(None) => self.shared.store(false, Ordering::Relaxed),
                Err(e) => tracing::debug!(error = %e, "spend counters not shared now; counted in this process"),
                Ok(Some(_)) => {}
            }
        }
        let Ok(all) = self.slots.lock() else { return Used::default() };
        let v = |i: usize| all.get(key).and_then(|s| s.get(&current[i].0)).map_or(0, Slot::value);
        Used { tokens_day: v(0), cost_day: v(1), tokens_month: v(2), cost_month: v(3) }
    }

    /// Refuses a request of `key` when one of its budgets is used up.
    pub async fn check(&self, key: &str, budget: &Budget) -> Result<(), Refusal> {
        if budget.is_empty() {
            return Ok(());
        }
        let used = self.sync(key).await;
        let now = period::now();
        let p = Periods::at(now);
        for b in self.budgets(budget, &used, &p) {
            if b.remaining <= 0.0 {
                let what = match b.name {
                    "tokens_per_day" => format!("{} tokens per day", b.limit),
                    "cost_per_day" => format!("{} {} per day", b.limit, self.currency),
                    _ => format!("{} {} per month", b.limit, self.currency),
                };
                let period = if b.name == "cost_per_month" { "the first of the month" } else { "midnight" };
                return Err(Refusal {
                    message: format!(
                        "This key has used up its budget `{}` ({what}; used {}). It resets at {} (UTC {period}).",
                        b.name,
                        b.used,
                        period::rfc3339(b.resets_at)
                    ),
                    retry_after: b.resets_at.saturating_sub(now).max(1),
                });
            }
        }
        Ok(())
    }

    fn budgets(&self, budget: &Budget, used: &Used, p: &Periods) -> Vec<Line> {
        let mut out = Vec::new();
        if let Some(l) = budget.tokens_per_day {
            let u = used.tokens_day.max(0) as f64;
            out.push(Line {
                name: "tokens_per_day",
                limit: l as f64,
                used: u,
                remaining: l as f64 - u,
                resets_at: p.day_ends,
            });
        }
        for (name, limit, u, resets_at) in [
            ("cost_per_day", budget.cost_per_day, used.cost_day, p.day_ends),
            ("cost_per_month", budget.cost_per_month, used.cost_month, p.month_ends),
        ] {
            if let Some(l) = limit {
                let u = amount(u.max(0) as u64);
                out.push(Line { name, limit: l, used: u, remaining: l - u, resets_at });
            }
        }
        out
    }

    /// `GET /v1/usage`: the key's spend today and this month, and each of
    /// its budgets.
    pub async fn report(&self, key: &str, budget: &Budget) -> Value {
        let used = self.sync(key).await;
        let p = Periods::at(period::now());
        let budgets: serde_json::Map<String, Value> = self
            .budgets(budget, &used, &p)
            .into_iter()
            .map(|b| {
                let v = json!({"limit": b.limit, "used": b.used, "remaining": b.remaining.max(0.0),
                    "resets_at": period::rfc3339(b.resets_at)});
                (b.name.to_string(), v)
            })
            .collect();
        json!({
            "object": "usage",
            "key": key,
            "currency": self.currency,
            "today": {"date": p.day, "tokens": used.tokens_day, "cost": amount(used.cost_day.max(0) as u64),
                      "resets_at": period::rfc3339(p.day_ends)},
            "month": {"month": p.month, "tokens": used.tokens_month, "cost": amount(used.cost_month.max(0) as u64),
                      "resets_at": period::rfc3339(p.month_ends)},
            "budgets": budgets,
        })
    }
}

struct Line {
    name: &'static str,
    limit: f64,
    used: f64,
    remaining: f64,
    resets_at: u64,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::{MemoryStore, StateError};
    use futures_util::future::BoxFuture;

    /// Shared counters that can be "down" (what Redis does, in process).
    #[derive(Default)]
    struct Shared {
        down: AtomicBool,
        counters: Mutex<HashMap<String, i64>>,
    }

    impl StateStore for Shared {
        fn get<'a>(&'a self, _: &'a str, _: &'a str) -> BoxFuture<'a, Result<Option<Value>, StateError>> {
            Box::pin(async { Ok(None) })
        }
        fn put<'a>(&'a self, _: &'a str, _: &'a str, _: Value, _: Duration) -> BoxFuture<'a, Result<(), StateError>> {
            Box::pin(async { Ok(()) })
        }
        fn delete<'a>(&'a self, _: &'a str, _: &'a str) -> BoxFuture<'a, Result<(), StateError>> {
            Box::pin(async { Ok(()) })
        }
        fn kind(&self) -> &'static str {
            "shared"
        }
        fn add_counters<'a>(
            &'a self,
            counters: &'a [(String, i64, Duration)],
        ) -> BoxFuture<'a, Result<Option<Vec<i64>>, StateError>> {
            Box::pin(async move {
                if self.down.load(Ordering::Relaxed) {
                    return Err(StateError::Unavailable("down".into()));
                }
                let mut m = self.counters.lock().unwrap();
                Ok(Some(
                    counters
                        .iter()
                        .map(|(k, d, _)| {
                            let v = m.entry(k.clone()).or_default();
                            *v += d;
                            *v
                        })
                        .collect(),
                ))
            })
        }
    }

    #[tokio::test]
    async fn while_the_store_is_down_a_replica_counts_alone_and_pushes_it_later() {
        let store = Arc::new(Shared::default());
        let a = Arc::new(Ledger::new(store.clone(), None));
        let b = Arc::new(Ledger::new(store.clone(), None));
        let t = |n| Tokens { input: n, ..Tokens::default() };
        a.charge("k", &t(10), 0);
        assert_eq!(a.sync("k").await.tokens_day, 10);
        assert_eq!(b.sync("k").await.tokens_day, 10, "one counter for both");
        store.down.store(true, Ordering::Relaxed);
        a.charge("k", &t(5), 0);
        b.charge("k", &t(7), 0);
        assert_eq!(a.sync("k").await.tokens_month, 15, "what it saw plus its own");
        assert_eq!(b.sync("k").await.tokens_month, 17);
        store.down.store(false, Ordering::Relaxed);
        assert_eq!(a.sync("k").await.tokens_day, 15);
        assert_eq!(b.sync("k").await.tokens_day, 22, "both replicas' counts reached the store, once each");
        assert_eq!(a.sync("k").await.tokens_day, 22);
    }

    #[tokio::test]
    async fn a_key_over_its_tokens_is_refused_with_the_reset() {
        let ledger = Arc::new(Ledger::new(Arc::new(MemoryStore::new(100)), None));
        let budget = Budget { tokens_per_day: Some(100), ..Budget::default() };
        assert_eq!(ledger.check("alice", &budget).await, Ok(()));
        ledger.charge("alice", &Tokens { input: 90, output: 20, ..Tokens::default() }, 5_000);
        let e = ledger.check("alice", &budget).await.unwrap_err();
        let tomorrow = period::rfc3339(Periods::at(period::now()).day_ends);
        assert!(e.message.contains("tokens_per_day") && e.message.contains(&tomorrow), "{}", e.message);
        assert!(e.retry_after >= 1 && e.retry_after <= 86_400);
        assert_eq!(ledger.check("bob", &budget).await, Ok(()), "budgets are per key");
        let r = ledger.report("alice", &budget).await;
        assert_eq!(r["today"]["tokens"], 110);
        assert_eq!(r["month"]["cost"], 0.000005);
        assert_eq!(r["budgets"]["tokens_per_day"]["remaining"], 0.0);
        assert_eq!(r["budgets"]["tokens_per_day"]["resets_at"], tomorrow.as_str());
        // A cost budget.
        let budget = Budget { cost_per_month: Some(0.00001), ..Budget::default() };
        assert_eq!(ledger.check("alice", &budget).await, Ok(()));
        ledger.charge("alice", &Tokens::default(), 5_000);
        let e = ledger.check("alice", &budget).await.unwrap_err();
        assert!(e.message.contains("cost_per_month") && e.message.contains("first of the month"), "{}", e.message);
    }
}
