//! Prices per model glob (`[prices."GLOB"]` in a profile, overridden by
//! `[providers.NAME.prices."GLOB"]`; see `spend`).

use serde::Deserialize;

/// One price table: amounts per million tokens.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Price {
    /// Input tokens that missed the cache.
    pub input: f64,
    /// Input tokens served from the vendor's cache (default: `input`).
    #[serde(default)]
    pub cached_input: Option<f64>,
    pub output: f64,
    /// Reasoning tokens, where the vendor bills them apart (default: `output`).
    #[serde(default)]
    pub reasoning: Option<f64>,
    /// ISO 4217 code of the amounts (default `USD`).
    #[serde(default = "usd")]
    pub currency: String,
    /// Where a bundled price was read, and when (documentation only).
    #[serde(default)]
    pub source: Option<String>,
    #[serde(default)]
    pub as_of: Option<String>,
}

fn usd() -> String {
    "USD".into()
}

impl Price {
    /// Why the table is unusable, if it is.
    pub fn invalid(&self) -> Option<String> {
        let all = [Some(self.input), self.cached_input, Some(self.output), self.reasoning];
        if all.into_iter().flatten().any(|p| !p.is_finite() || p < 0.0) {
            return Some("prices must be finite and not negative".into());
        }
        (self.currency.len() != 3 || !self.currency.bytes().all(|b| b.is_ascii_uppercase()))
            .then(|| format!("currency {:?} is not a three-letter code like \"USD\"", self.currency))
    }
}
