//! Spend: what each request cost, and token and cost budgets per proxy key
//! (docs/spend.md).
//!
//! Prices are profile data (`[prices."GLOB"]`, overridden per provider in
//! the config). Every upstream answer of a request (each agent-loop
//! iteration, each stream) is a [`Turn`] of the request's [`Tally`] (in its
//! context); when the response ends, or the client goes away, the edge
//! reads the tally for the access log and the metrics and charges the key's
//! [`ledger::Ledger`], which keeps day and month counters, in Redis when the
//! state store is shared.

pub mod ledger;
pub mod period;
pub mod prices;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

pub use ledger::{Ledger, Refusal};
pub use prices::{Price, Prices, Tokens};

/// One upstream answer: who gave it, at what price, its usage.
#[derive(Debug)]
pub struct Turn {
    pub provider: String,
    /// The model's metrics label.
    pub model: String,
    pub price: Option<Arc<Price>>,
    usage: Mutex<Option<Tokens>>,
    /// Stream events seen (the estimate of a stream cut before its usage).
    events: AtomicU64,
    /// The size of a whole answer (the estimate of one without usage).
    body_bytes: AtomicU64,
    /// The most tokens a usage may report in one count.
    cap: u64,
}

impl Turn {
    /// The answer's usage so far: a vendor that repeats a growing usage in
    /// every chunk is counted once, by its last.
    pub fn usage(&self, u: &serde_json::Value) {
        if let Some(t) = Tokens::of(u)
            && self.plausible(&t)
            && let Ok(mut slot) = self.usage.lock()
        {
            *slot = Some(t);
        }
    }

    /// Usage beyond the cap (`u64::MAX` tokens from a broken upstream) is
    /// not believed: the turn is estimated as if it had none.
    fn plausible(&self, t: &Tokens) -> bool {
        if t.input <= self.cap && t.output <= self.cap {
            return true;
        }
        crate::metrics::usage_implausible(&self.provider);
        tracing::warn!(
            provider = %self.provider, input = t.input, output = t.output, cap = self.cap,
            "upstream usage is beyond [limits] max_usage_tokens: estimated instead"
        );
        false
    }

    /// Counts read by the whole-answer fast path (OpenAI's own fields).
    pub fn tokens(&self, input: Option<u64>, cached: Option<u64>, output: Option<u64>) {
        if (input.is_some() || output.is_some())
            && let Ok(mut slot) = self.usage.lock()
        {
            let (input, output) = (input.unwrap_or(0), output.unwrap_or(0));
            let t = Tokens { input, cached: cached.unwrap_or(0).min(input), output, reasoning: 0 };
            if self.plausible(&t) {
                *slot = Some(t);
            }
        }
    }

    pub fn event(&self) {
        self.events.fetch_add(1, Ordering::Relaxed);
    }

    pub fn body(&self, bytes: usize) {
        self.body_bytes.store(bytes as u64, Ordering::Relaxed);
    }

    /// Its tokens: the usage, or, without one, an estimate (a quarter of
    /// the request's bytes in, one token per stream event or a quarter of
    /// the answer's bytes out).
    fn counted(&self, request_bytes: u64) -> (Tokens, bool) {
        if let Some(t) = self.usage.lock().ok().and_then(|u| *u) {
            return (t, false);
        }
        let out = self.events.load(Ordering::Relaxed).max(self.body_bytes.load(Ordering::Relaxed) / 4);
        (Tokens { input: request_bytes / 4, output: out, ..Tokens::default() }, true)
    }
}

/// Every turn of one request (a field of the request's context).
#[derive(Debug, Default)]
pub struct Tally {
    turns: Mutex<Vec<Arc<Turn>>>,
    request_bytes: AtomicU64,
    counted: std::sync::atomic::AtomicBool,
    /// `[limits] max_usage_tokens` (0: the default).
    usage_cap: AtomicU64,
}

/// The usage cap when the edge set none (`[limits] max_usage_tokens`'s default).
pub const DEFAULT_USAGE_CAP: u64 = 10_000_000;

/// What one request used and cost.
#[derive(Debug, Clone, Default)]
pub struct Summary {
    pub tokens: Tokens,
    /// Some turn had no usage and was estimated.
    pub estimated: bool,
    /// The cost in nano-units of the budget currency (turns priced in
    /// another currency, or not priced, add none).
    pub cost: u64,
    /// Whether any turn had a price in the budget currency.
    pub priced: bool,
    pub turns: Vec<TurnSpend>,
}

/// One turn's share of a [`Summary`].
#[derive(Debug, Clone)]
pub struct TurnSpend {
    pub provider: String,
    /// The model's metrics label.
    pub model: String,
    pub tokens: Tokens,
    /// Nano-units and their currency (none without a price).
    pub cost: Option<(u64, String)>,
}

impl Tally {
    /// A new upstream answer of this request.
    pub fn turn(&self, provider: &str, model: &str, price: Option<Arc<Price>>) -> Arc<Turn> {
        let t = Arc::new(Turn {
            provider: provider.to_string(),
            model: model.to_string(),
            price,
            usage: Mutex::new(None),
            events: AtomicU64::new(0),
            body_bytes: AtomicU64::new(0),
            cap: match self.usage_cap.load(Ordering::Relaxed) {
                0 => DEFAULT_USAGE_CAP,
                n => n,
            },
        });
        if let Ok(mut turns) = self.turns.lock()
            && turns.len() < 1024
        {
            turns.push(t.clone());
        }
        t
    }

    /// The most tokens an upstream answer's usage may report in one count.
    pub fn usage_cap(&self, n: u64) {
        self.usage_cap.store(n, Ordering::Relaxed);
    }

    /// The client's request body size (for estimates).
    pub fn request_bytes(&self, n: usize) {
        self.request_bytes.store(n as u64, Ordering::Relaxed);
    }

    /// Marks the request as charged to a key with budgets (its streams then
    /// always ask the upstream for usage).
    pub fn set_counted(&self) {
        self.counted.store(true, Ordering::Relaxed);
    }

    pub fn counted(&self) -> bool {
        self.counted.load(Ordering::Relaxed)
    }

    /// Whether any upstream answer was counted.
    pub fn is_empty(&self) -> bool {
        self.turns.lock().map_or(true, |t| t.is_empty())
    }

    /// The sum of every turn, costs in `currency`.
    pub fn summary(&self, currency: &str) -> Summary {
        let mut s = Summary::default();
        let turns = self.turns.lock().map(|t| t.clone()).unwrap_or_default();
        let bytes = self.request_bytes.load(Ordering::Relaxed);
        for t in turns {
            let (tokens, estimated) = t.counted(bytes);
            s.estimated |= estimated;
            s.tokens.add(&tokens);
            let cost = t.price.as_ref().map(|p| (prices::cost(p, &tokens), p.currency.clone()));
            if let Some((n, c)) = &cost
                && c == currency
            {
                s.cost = s.cost.saturating_add(*n);
                s.priced = true;
            }
            s.turns.push(TurnSpend { provider: t.provider.clone(), model: t.model.clone(), tokens, cost });
        }
        s
    }
}

/// Nano-units as an amount with up to 9 decimals, for logs and JSON.
pub fn amount(nanos: u64) -> f64 {
    nanos as f64 / prices::NANOS
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn turns_are_summed_and_a_turn_without_usage_is_estimated() {
        let tally = Tally::default();
        tally.request_bytes(400);
        let p = Arc::new(Price {
            input: 1.0,
            cached_input: None,
            output: 2.0,
            reasoning: None,
            currency: "USD".into(),
            source: None,
            as_of: None,
        });
        let a = tally.turn("v", "m", Some(p.clone()));
        a.usage(&json!({"prompt_tokens": 5, "completion_tokens": 1}));
        // A growing usage repeated per chunk counts once.
        a.usage(&json!({"prompt_tokens": 10, "completion_tokens": 3}));
        let b = tally.turn("v", "m", Some(p));
        for _ in 0..7 {
            b.event();
        }
        let s = tally.summary("USD");
        assert!(s.estimated);
        assert_eq!(s.tokens, Tokens { input: 10 + 100, cached: 0, output: 3 + 7, reasoning: 0 });
        assert_eq!(s.cost, (110 * 1000) + (10 * 2000));
        assert_eq!(tally.summary("CNY").cost, 0, "another currency is not this budget's");
        // Usage beyond the cap is estimated instead.
        let tally = Tally::default();
        tally.request_bytes(40);
        let t = tally.turn("v", "m", None);
        t.usage(&json!({"prompt_tokens": u64::MAX, "completion_tokens": 3}));
        t.tokens(Some(u64::MAX), None, Some(u64::MAX));
        t.event();
        let s = tally.summary("USD");
        assert!(s.estimated);
        assert_eq!(s.tokens, Tokens { input: 10, output: 1, ..Tokens::default() });
    }
}
