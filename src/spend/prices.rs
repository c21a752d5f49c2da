//! Prices resolved per provider, and a turn's cost from its token counts.

use std::collections::BTreeMap;
use std::sync::Arc;

pub use crate::config::prices::Price;

/// Token counts of one upstream answer, in OpenAI's sense: `input` includes
/// `cached`, `output` includes `reasoning`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Tokens {
    pub input: u64,
    pub cached: u64,
    pub output: u64,
    pub reasoning: u64,
}

impl Tokens {
    /// The counts of a normalized `usage` object (`stream::usage`).
    pub fn of(u: &serde_json::Value) -> Option<Self> {
        let n = |path: &[&str]| path.iter().try_fold(u, |v, k| v.get(k)).and_then(serde_json::Value::as_u64);
        let input = n(&["prompt_tokens"]);
        let output = n(&["completion_tokens"]);
        if input.is_none() && output.is_none() {
            return None;
        }
        let (input, output) = (input.unwrap_or(0), output.unwrap_or(0));
        Some(Tokens {
            input,
            cached: n(&["prompt_tokens_details", "cached_tokens"]).unwrap_or(0).min(input),
            output,
            reasoning: n(&["completion_tokens_details", "reasoning_tokens"]).unwrap_or(0).min(output),
        })
    }

    pub fn total(&self) -> u64 {
        self.input.saturating_add(self.output)
    }

    pub fn add(&mut self, o: &Tokens) {
        self.input = self.input.saturating_add(o.input);
        self.cached = self.cached.saturating_add(o.cached);
        self.output = self.output.saturating_add(o.output);
        self.reasoning = self.reasoning.saturating_add(o.reasoning);
    }
}

/// Costs are kept in nano-units of their currency (1e-9), integers, so
/// shared counters add exactly (Redis `INCRBY`).
pub const NANOS: f64 = 1e9;

/// The cost of `t` at `p`, in nano-units: uncached input at `input`, cache
/// hits at `cached_input`, reasoning at `reasoning`, the rest at `output`.
pub fn cost(p: &Price, t: &Tokens) -> u64 {
    // Per million tokens, in nano-units: tokens × price × 1e9 / 1e6.
    let part = |n: u64, price: f64| (n as f64 * price * 1000.0).round().max(0.0) as u64;
    let uncached = t.input - t.cached.min(t.input);
    let plain_out = t.output - t.reasoning.min(t.output);
    part(uncached, p.input)
        .saturating_add(part(t.cached, p.cached_input.unwrap_or(p.input)))
        .saturating_add(part(plain_out, p.output))
        .saturating_add(part(t.reasoning, p.reasoning.unwrap_or(p.output)))
}

/// One provider's prices: the config's globs, then the profile's; within
/// each, the longest matching glob wins.
#[derive(Debug, Default)]
pub struct Prices {
    tables: Vec<(globset::GlobMatcher, Arc<Price>)>,
}

impl Prices {
    /// `over` are `[providers.NAME.prices]`, `base` the profile's `[prices]`.
    pub fn new(over: &BTreeMap<String, Price>, base: &BTreeMap<String, Price>) -> Result<Self, String> {
        let mut tables = Vec::new();
        for set in [over, base] {
            let mut globs: Vec<_> = set.iter().collect();
            globs.sort_by_key(|(g, _)| std::cmp::Reverse(g.len()));
            for (glob, price) in globs {
                if let Some(e) = price.invalid() {
                    return Err(format!("prices {glob:?}: {e}"));
                }
                let g = globset::Glob::new(&glob.to_ascii_lowercase())
                    .map_err(|e| format!("prices: model glob {glob:?}: {e}"))?;
                tables.push((g.compile_matcher(), Arc::new(price.clone())));
            }
        }
        Ok(Prices { tables })
    }

    /// The price of an upstream model, if one is known.
    pub fn of(&self, model: &str) -> Option<Arc<Price>> {
        if self.tables.is_empty() {
            return None;
        }
        let m = model.to_ascii_lowercase();
        self.tables.iter().find(|(g, _)| g.is_match(&m)).map(|(_, p)| p.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn price(input: f64, cached: f64, output: f64) -> Price {
        Price {
            input,
            cached_input: Some(cached),
            output,
            reasoning: None,
            currency: "USD".into(),
            source: None,
            as_of: None,
        }
    }

    /// A DeepSeek answer with cache hits, by hand: 1,000 prompt tokens of
    /// which 800 hit the cache, 500 completion tokens, at $0.14 / $0.0028 /
    /// $0.28 per million: 200 × 0.14 + 800 × 0.0028 + 500 × 0.28 = 28 + 2.24
    /// + 140 millionths = $0.00017024.
    #[test]
    fn cost_of_a_deepseek_answer_with_cache_hits() {
        let mut u = json!({"prompt_tokens": 1000, "completion_tokens": 500, "total_tokens": 1500,
            "prompt_cache_hit_tokens": 800, "prompt_cache_miss_tokens": 200});
        crate::stream::usage::normalize(&mut u, &Default::default());
        let t = Tokens::of(&u).unwrap();
        assert_eq!(t, Tokens { input: 1000, cached: 800, output: 500, reasoning: 0 });
        let nanos = cost(&price(0.14, 0.0028, 0.28), &t);
        assert_eq!(nanos, 170_240);
        assert!((nanos as f64 / NANOS - 0.000_170_24).abs() < 1e-12);
        // Reasoning billed apart.
        let mut p = price(1.0, 1.0, 2.0);
        p.reasoning = Some(10.0);
        let t = Tokens { input: 0, cached: 0, output: 1000, reasoning: 400 };
        assert_eq!(cost(&p, &t), 600 * 2000 + 400 * 10_000);
    }

    #[test]
    fn the_config_wins_then_the_longest_glob() {
        let base: BTreeMap<String, Price> =
            [("*".to_string(), price(1.0, 1.0, 1.0)), ("deepseek-v4-*".to_string(), price(2.0, 2.0, 2.0))].into();
        let none = BTreeMap::new();
        let p = Prices::new(&none, &base).unwrap();
        assert_eq!(p.of("DeepSeek-V4-Flash").unwrap().input, 2.0);
        assert_eq!(p.of("other").unwrap().input, 1.0);
        let over: BTreeMap<String, Price> = [("deepseek-*".to_string(), price(3.0, 3.0, 3.0))].into();
        let p = Prices::new(&over, &base).unwrap();
        assert_eq!(p.of("deepseek-v4-flash").unwrap().input, 3.0);
        assert_eq!(p.of("other").unwrap().input, 1.0);
        assert!(Prices::new(&none, &none).unwrap().of("x").is_none());
        let bad: BTreeMap<String, Price> = [("x".to_string(), price(-1.0, 0.0, 0.0))].into();
        assert!(Prices::new(&bad, &none).is_err());
    }
}
