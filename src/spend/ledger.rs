//! The day and month counters of every key: tokens and cost (nano-units of
//! the budget currency). With a shared store (Redis) the counters live
//! there and every replica adds to them atomically; this process keeps what
//! it added but could not push yet (Redis down: counted here, pushed with
//! the next call that reaches Redis again) and the values it last saw.
//!
//! A request of a key with budgets reserves its estimate before it is sent
//! ([`Ledger::reserve`], one atomic step: in Redis one script) and settles
//! to its real usage when it ends ([`Hold::settle`]; dropped unsettled, it
//! releases). Reservations of requests in flight count against the budget,
//! so concurrent requests cannot all pass the check at once: a budget is
//! overrun by at most one request's usage beyond its estimate.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};

use super::period::{self, Periods};
use super::{Tokens, amount};
use crate::config::auth::Budget;
use crate::state::{Reserved, StateStore};
use sha2::Digest;

/// Counters are kept this long past their period (clock skew between
/// replicas).
const GRACE_SECS: u64 = 3600;

/// The four counters of a key in a period, in this order.
const WHAT: [&str; 4] = ["tokens:day", "cost:day", "tokens:month", "cost:month"];

/// How long a shared reservation counter lives after the last reservation
/// (a replica that died holding one does not hold it for the whole day).
const HOLD_SECS: u64 = 600;

/// The output tokens a request without `max_tokens` reserves when its
/// provider's profile names no `reserve_output_tokens`.
pub const DEFAULT_RESERVE_OUTPUT: u64 = 1024;

/// What the 429 of a budget says about how far a budget can be overrun.
const BOUND: &str = "Each request reserves its estimate (prompt plus max_tokens) before it is sent and settles to its \
                     real usage after, so a budget is overrun by at most one request's usage beyond its estimate.";

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
    /// A reservation counter (its shared copy lives [`HOLD_SECS`]).
    hold: bool,
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
    slots: Mutex<Map<Map<Slot>>>,
    /// Per key name, today's used-counter names and the day they are of:
    /// a digest and eight strings a request need not make again.
    named: Mutex<Map<(u64, Names)>>,
}

/// By key or counter name (names from the config and ours): foldhash, not
/// SipHash, as every request looks up several.
type Map<V> = HashMap<String, V, foldhash::fast::RandomState>;

/// A key's four counter names with their expiries.
type Names = Arc<[(String, u64); 4]>;

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

/// The counters' names (the store adds its prefix): every counter of one
/// key, used and reserved, day and month, shares one slot group built from a
/// digest of the key name (`state::slot_group`), so the one script that
/// reserves touches one Redis Cluster slot and no key name reaches Redis.
/// This is the only place they are named.
fn names_of(key: &str, p: &Periods, held: bool) -> [(String, u64); 4] {
    let digest = sha2::Sha256::digest(key.as_bytes());
    let tag: String = digest.iter().take(8).map(|b| format!("{b:02x}")).collect();
    let group = crate::state::slot_group(&tag);
    let kind = if held { "held:" } else { "" };
    let d = |what: &str, period: &str, ends: u64| (format!("{group}:{kind}{what}:{period}"), ends + GRACE_SECS);
    [
        d(WHAT[0], &p.day, p.day_ends),
        d(WHAT[1], &p.day, p.day_ends),
        d(WHAT[2], &p.month, p.month_ends),
        d(WHAT[3], &p.month, p.month_ends),
    ]
}

/// The used counters of `key`.
fn names(key: &str, p: &Periods) -> [(String, u64); 4] {
    names_of(key, p, false)
}

/// Whether a request reserving `est` is admitted on a counter with `limit`,
/// `used` and `held` by requests in flight: when it fits, or when nothing is
/// in flight and something is left (a lone request is never refused a
/// budget it has not used up). The Redis script (`state/redis.rs`) applies
/// the same rule.
fn admits(used: i64, held: i64, est: i64, limit: i64) -> bool {
    let held = held.max(0);
    used.saturating_add(held).saturating_add(est) <= limit || (held == 0 && used < limit)
}

/// A reservation's counters (name, expiry) and amounts.
type Held<'a> = (&'a [(String, u64); 4], &'a [i64; 4]);

/// A request's reservation, settled when it ends; dropped unsettled (the
/// request failed before anything was counted, the client went away), it
/// releases what it held.
pub struct Hold {
    ledger: Arc<Ledger>,
    key: String,
    held: [(String, u64); 4],
    amounts: [i64; 4],
    done: bool,
}

impl std::fmt::Debug for Hold {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hold").field("key", &self.key).field("amounts", &self.amounts).finish_non_exhaustive()
    }
}

impl Hold {
    /// Charges the real usage and releases the reservation, in one push.
    pub fn settle(mut self, tokens: &Tokens, cost: u64) {
        self.done = true;
        self.ledger.apply(&self.key, tokens, cost, Some((&self.held, &self.amounts)));
    }
}

impl Drop for Hold {
    fn drop(&mut self) {
        if !self.done {
            self.ledger.apply(&self.key, &Tokens::default(), 0, Some((&self.held, &self.amounts)));
        }
    }
}

impl Ledger {
    pub fn new(store: Arc<dyn StateStore>, currency: Option<&str>) -> Self {
        Ledger {
            store,
            currency: currency.unwrap_or("USD").to_string(),
            shared: AtomicBool::new(true),
            slots: Mutex::new(Map::default()),
            named: Mutex::new(Map::default()),
        }
    }

    /// `names(key, ...)` for the day of `now`, made once per key and day.
    fn names_now(&self, key: &str, now: u64) -> Names {
        let day = now / 86_400;
        let Ok(mut named) = self.named.lock() else { return Arc::new(names(key, &Periods::at(now))) };
        if let Some((d, n)) = named.get(key)
            && *d == day
        {
            return n.clone();
        }
        let n: Names = Arc::new(names(key, &Periods::at(now)));
        named.insert(key.to_string(), (day, n.clone()));
        n
    }

    /// Counts a finished request that held no reservation (a key without
    /// budgets) now, locally, and pushes it to the shared store in the
    /// background.
    pub fn charge(self: &Arc<Self>, key: &str, tokens: &Tokens, cost: u64) {
        self.apply(key, tokens, cost, None);
    }

    /// Counts `tokens` and `cost` and releases `held` (a settled or dropped
    /// [`Hold`]) locally, so the key's next request sees it, and pushes both
    /// in one atomic call in the background.
    fn apply(self: &Arc<Self>, key: &str, tokens: &Tokens, cost: u64, held: Option<Held<'_>>) {
        let now = period::now();
        let deltas = [tokens.total(), cost, tokens.total(), cost].map(|n| i64::try_from(n).unwrap_or(i64::MAX));
        let current = self.names_now(key, now);
        if let Ok(mut all) = self.slots.lock() {
            if !all.contains_key(key) {
                all.insert(key.to_string(), Map::default());
            }
            let Some(slots) = all.get_mut(key) else { return };
            slots.retain(|_, s| s.expires > now);
            for ((name, expires), d) in current.iter().zip(deltas) {
                if d != 0 {
                    match slots.get_mut(name.as_str()) {
                        Some(s) => s.pending = s.pending.saturating_add(d),
                        None => {
                            slots.insert(name.clone(), Slot { expires: *expires, pending: d, ..Slot::default() });
                        }
                    }
                }
            }
            for ((name, expires), d) in held.into_iter().flat_map(|(n, a)| n.iter().zip(a.iter())) {
                if *d != 0 {
                    let s =
                        slots.entry(name.clone()).or_insert(Slot { expires: *expires, hold: true, ..Slot::default() });
                    s.pending = s.pending.saturating_sub(*d);
                }
            }
        }
        if self.shared.load(Ordering::Relaxed)
            && let Ok(rt) = tokio::runtime::Handle::try_current()
        {
            let (me, key) = (self.clone(), key.to_string());
            rt.spawn(async move { me.sync(&key).await });
        }
    }

    /// Reserves `tokens` and `cost` (nano-units) of `key`'s budgets for one
    /// request, or refuses it: in the shared store in one atomic step, else
    /// (no shared store, or it is down) in this process. `None`: the key
    /// has no budgets.
    pub async fn reserve(
        self: &Arc<Self>,
        key: &str,
        budget: &Budget,
        tokens: u64,
        cost: u64,
    ) -> Result<Option<Hold>, Refusal> {
        if budget.is_empty() {
            return Ok(None);
        }
        let now = period::now();
        let p = Periods::at(now);
        let used = names(key, &p);
        let held = names_of(key, &p, true);
        let amounts = [tokens, cost, tokens, cost].map(|n| i64::try_from(n).unwrap_or(i64::MAX));
        let nanos = |a: Option<f64>| a.map(|a| (a * super::prices::NANOS).round().clamp(0.0, i64::MAX as f64) as i64);
        let limits = [
            budget.tokens_per_day.map(|t| i64::try_from(t).unwrap_or(i64::MAX)),
            nanos(budget.cost_per_day),
            None,
            nanos(budget.cost_per_month),
        ];
        let hold = |ledger: &Arc<Ledger>| Hold {
            ledger: ledger.clone(),
            key: key.to_string(),
            held: held.clone(),
            amounts,
            done: false,
        };
        if self.shared.load(Ordering::Relaxed) {
            // What was counted here while the store was down goes first.
            if self.has_pending(key) {
                self.sync(key).await;
            }
            let used_names: Vec<String> = used.iter().map(|(n, _)| n.clone()).collect();
            let held_names: Vec<String> = held.iter().map(|(n, _)| n.clone()).collect();
            let shared_limits = limits.map(|l| l.unwrap_or(-1));
            let answer = self
                .store
                .reserve_counters(&used_names, &held_names, &shared_limits, &amounts, Duration::from_secs(HOLD_SECS))
                .await;
            match answer {
                Ok(Some(Reserved::Held(values))) => {
                    self.saw(key, &used, &values);
                    return Ok(Some(hold(self)));
                }
                Ok(Some(Reserved::Refused { index, used: u, held: h })) => {
                    return Err(self.refusal(index, u, h, amounts[index.min(3)], budget, &p, now));
                }
                Ok(None) => self.shared.store(false, Ordering::Relaxed),
                Err(e) => tracing::debug!(error = %e, "budget reserved in this process: the shared store is down"),
            }
        }
        let Ok(mut all) = self.slots.lock() else { return Ok(None) };
        let slots = all.entry(key.to_string()).or_default();
        slots.retain(|_, s| s.expires > now);
        for (i, limit) in limits.iter().enumerate() {
            let Some(limit) = limit else { continue };
            let u = slots.get(&used[i].0).map_or(0, Slot::value);
            let h = slots.get(&held[i].0).map_or(0, Slot::value);
            if !admits(u, h, amounts[i], *limit) {
                return Err(self.refusal(i, u, h, amounts[i], budget, &p, now));
            }
        }
        for ((name, expires), a) in held.iter().zip(amounts) {
            let s = slots.entry(name.clone()).or_insert(Slot { expires: *expires, hold: true, ..Slot::default() });
            s.pending = s.pending.saturating_add(a);
        }
        drop(all);
        Ok(Some(hold(self)))
    }

    fn has_pending(&self, key: &str) -> bool {
        self.slots.lock().is_ok_and(|all| all.get(key).is_some_and(|s| s.values().any(|s| s.pending != 0)))
    }

    /// The shared values of `key`'s used counters, as just read.
    fn saw(&self, key: &str, used: &[(String, u64); 4], values: &[i64]) {
        if let Ok(mut all) = self.slots.lock() {
            let slots = all.entry(key.to_string()).or_default();
            for ((name, expires), v) in used.iter().zip(values) {
                slots.entry(name.clone()).or_insert(Slot { expires: *expires, ..Slot::default() }).known = *v;
            }
        }
    }

    /// The 429 of counter `i` (of [`WHAT`]): used up, or held by requests
    /// in flight.
    #[allow(clippy::too_many_arguments)]
    fn refusal(&self, i: usize, used: i64, held: i64, est: i64, budget: &Budget, p: &Periods, now: u64) -> Refusal {
        let (name, limit) = match i {
            0 => ("tokens_per_day", budget.tokens_per_day.map_or(0.0, |t| t as f64)),
            1 => ("cost_per_day", budget.cost_per_day.unwrap_or(0.0)),
            _ => ("cost_per_month", budget.cost_per_month.unwrap_or(0.0)),
        };
        let tokens = i == 0;
        let show = |n: i64| if tokens { n.max(0).to_string() } else { amount(n.max(0) as u64).to_string() };
        let what = if tokens {
            format!("{limit} tokens per day")
        } else if i == 1 {
            format!("{limit} {} per day", self.currency)
        } else {
            format!("{limit} {} per month", self.currency)
        };
        let resets_at = if name == "cost_per_month" { p.month_ends } else { p.day_ends };
        let limit_n = if tokens { limit as i64 } else { (limit * super::prices::NANOS) as i64 };
        if used < limit_n {
            return Refusal {
                message: format!(
                    "This key's budget `{name}` ({what}) has {} used and {} reserved by requests in flight; this \
                     request would reserve {} more. Retry when those finish. {BOUND}",
                    show(used),
                    show(held),
                    show(est)
                ),
                retry_after: 1,
            };
        }
        let period = if name == "cost_per_month" { "the first of the month" } else { "midnight" };
        Refusal {
            message: format!(
                "This key has used up its budget `{name}` ({what}; used {}). It resets at {} (UTC {period}). {BOUND}",
                show(used),
                period::rfc3339(resets_at)
            ),
            retry_after: resets_at.saturating_sub(now).max(1),
        }
    }

    /// Pushes what this process counted for `key` and reads the shared
    /// values (one atomic call); with the store down or unshared, the values
    /// this process knows.
    pub async fn sync(&self, key: &str) -> Used {
        let now = period::now();
        let current = self.names_now(key, now);
        let mut batch: Vec<(String, i64, Duration)> = Vec::new();
        if let Ok(mut all) = self.slots.lock() {
            let slots = all.entry(key.to_string()).or_default();
            slots.retain(|_, s| s.expires > now);
            for (name, expires) in current.iter() {
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
                        let ttl = if s.hold { HOLD_SECS } else { s.expires.saturating_sub(now) };
                        batch.push((name.clone(), s.pending, Duration::from_secs(ttl)));
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

    #[test]
    fn a_keys_counter_names_are_made_once_a_day_and_follow_the_day() {
        let l = Ledger::new(Arc::new(MemoryStore::new(100)), None);
        let t = 1_764_892_800; // 2025-12-05T00:00:00Z
        let a = l.names_now("k", t + 10);
        assert!(Arc::ptr_eq(&a, &l.names_now("k", t + 86_399)), "the same day: the same names");
        assert_eq!(*a, names("k", &Periods::at(t)));
        let b = l.names_now("k", t + 86_400);
        assert_eq!(*b, names("k", &Periods::at(t + 86_400)), "the next day: its own names");
        assert_ne!(a[0].0, b[0].0);
        assert_eq!(*l.names_now("other", t), names("other", &Periods::at(t)));
    }

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
    async fn reservations_of_requests_in_flight_count_and_are_released() {
        let ledger = Arc::new(Ledger::new(Arc::new(MemoryStore::new(100)), None));
        let budget = Budget { tokens_per_day: Some(100), ..Budget::default() };
        // A lone request is admitted whatever its estimate; then only what fits.
        let a = ledger.reserve("k", &budget, 150, 0).await.unwrap().unwrap();
        let e = ledger.reserve("k", &budget, 1, 0).await.unwrap_err();
        assert!(e.message.contains("reserved by requests in flight") && e.message.contains("at most one request"));
        assert_eq!(e.retry_after, 1);
        drop(a); // released unsettled
        let holds: Vec<Hold> = futures_util::future::join_all((0..5).map(|_| ledger.reserve("k", &budget, 30, 0)))
            .await
            .into_iter()
            .filter_map(|r| r.ok().flatten())
            .collect();
        assert_eq!(holds.len(), 3, "30 + 30 + 30 fit in 100, a fourth does not");
        for h in holds {
            h.settle(&Tokens { input: 20, ..Tokens::default() }, 0);
        }
        assert_eq!(ledger.sync("k").await.tokens_day, 60, "settled from the real usage");
        assert!(ledger.reserve("k", &budget, 30, 0).await.is_ok(), "nothing is held any more");
    }

    #[tokio::test]
    async fn a_key_over_its_tokens_is_refused_with_the_reset() {
        let ledger = Arc::new(Ledger::new(Arc::new(MemoryStore::new(100)), None));
        let budget = Budget { tokens_per_day: Some(100), ..Budget::default() };
        let hold = ledger.reserve("alice", &budget, 10, 0).await.unwrap().unwrap();
        hold.settle(&Tokens { input: 90, output: 20, ..Tokens::default() }, 5_000);
        let e = ledger.reserve("alice", &budget, 10, 0).await.unwrap_err();
        let tomorrow = period::rfc3339(Periods::at(period::now()).day_ends);
        assert!(e.message.contains("tokens_per_day") && e.message.contains(&tomorrow), "{}", e.message);
        assert!(e.retry_after >= 1 && e.retry_after <= 86_400);
        assert!(ledger.reserve("bob", &budget, 10, 0).await.is_ok(), "budgets are per key");
        let r = ledger.report("alice", &budget).await;
        assert_eq!(r["today"]["tokens"], 110);
        assert_eq!(r["month"]["cost"], 0.000005);
        assert_eq!(r["budgets"]["tokens_per_day"]["remaining"], 0.0);
        assert_eq!(r["budgets"]["tokens_per_day"]["resets_at"], tomorrow.as_str());
        // A cost budget.
        let budget = Budget { cost_per_month: Some(0.00001), ..Budget::default() };
        ledger.reserve("alice", &budget, 0, 1).await.unwrap().unwrap().settle(&Tokens::default(), 5_000);
        let e = ledger.reserve("alice", &budget, 0, 1).await.unwrap_err();
        assert!(e.message.contains("cost_per_month") && e.message.contains("first of the month"), "{}", e.message);
    }
}
