//! The observer of one request: what is known about it (its id, start, the
//! model asked for and the proxy key's name, set by the edge), and what
//! happens to it on its way (who served it, the first token, usage,
//! fallbacks), told on to the metrics, the console's record and the spend
//! tally. Made by the edge and passed down, never looked up: a signature
//! that takes one says the function reports what it does.

use std::sync::{Arc, Mutex};
use std::time::Instant;

/// A profile's usage field names, mapped onto OpenAI's.
type Fields = std::collections::BTreeMap<String, String>;

/// What is known about the request being served (set by the edge).
pub struct RequestCtx {
    pub id: String,
    pub start: Instant,
    /// The `model` the client asked for, when the body names one.
    pub model: Option<String>,
    /// The name of the proxy key that authenticated the request (none when
    /// auth is off).
    pub key: Option<String>,
    /// Provider and upstream model that served it (the last tried).
    served: Mutex<Option<Served>>,
    /// Every upstream answer's usage and price (what the request cost): read
    /// by the edge when the response ends, and by whatever shows requests live.
    pub spend: crate::spend::Tally,
    /// An upstream answered already (the agent loop calls it again).
    answered: std::sync::atomic::AtomicBool,
    /// Side calls made for the answer are under way (an image described):
    /// their first token is not the request's.
    aside: std::sync::atomic::AtomicUsize,
    /// The console's record of the request, while one is kept.
    pub shown: Option<Arc<crate::recorder::Entry>>,
    /// What the client should know though the answer went out (a
    /// best-effort structured answer): `x-modelshim-warning` headers.
    warnings: Mutex<Vec<String>>,
}

/// Side calls under way, for as long as it lives ([`RequestCtx::aside`]).
pub struct Aside<'a>(&'a RequestCtx);

impl Drop for Aside<'_> {
    fn drop(&mut self) {
        self.0.aside.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
    }
}

/// Who served a request.
#[derive(Debug, Clone)]
pub struct Served {
    pub provider: String,
    /// The upstream model name (in the access log).
    pub model: String,
    /// Whether the config knows the model: else its metrics label is
    /// `other` ([`crate::provider::Provider::metric_model`]).
    pub known: bool,
}

impl Served {
    /// The model's metrics label.
    pub fn label(&self) -> &str {
        if self.known { &self.model } else { crate::metrics::OTHER_MODEL }
    }
}

impl RequestCtx {
    pub fn new(
        id: String,
        start: Instant,
        model: Option<String>,
        key: Option<String>,
        shown: Option<Arc<crate::recorder::Entry>>,
    ) -> Self {
        RequestCtx {
            id,
            start,
            model,
            key,
            served: Mutex::new(None),
            spend: Default::default(),
            answered: Default::default(),
            aside: Default::default(),
            shown,
            warnings: Mutex::new(Vec::new()),
        }
    }

    /// The observer of work no client request started (a command, a test):
    /// no key, nothing recorded.
    pub fn detached() -> Arc<Self> {
        Arc::new(Self::new(String::new(), Instant::now(), None, None, None))
    }

    /// The console's record, for the layers below that write into it.
    pub fn shown(&self) -> crate::recorder::Shown<'_> {
        self.shown.as_ref()
    }

    pub fn set_served(&self, provider: &crate::provider::Provider, model: &str) {
        if let Ok(mut p) = self.served.lock() {
            let known = provider.knows_model(model);
            *p = Some(Served { provider: provider.name.clone(), model: model.to_string(), known });
        }
        if let Some(e) = &self.shown {
            e.served(&provider.name, model);
        }
    }

    /// An upstream answer is in hand: the request's time to first token,
    /// for its first answer only (the agent loop's later ones are not).
    pub fn first_token(&self, provider: &str, label: &str) {
        if self.aside.load(std::sync::atomic::Ordering::Relaxed) > 0 {
            return;
        }
        if self.answered.swap(true, std::sync::atomic::Ordering::Relaxed) {
            return;
        }
        crate::metrics::first_token(provider, label, self.start.elapsed());
        if let Some(e) = &self.shown {
            e.first_token();
        }
    }

    /// Marks side calls under way until the guard drops: their answers do
    /// not count as the request's first token (usage and spend still do).
    pub fn aside(&self) -> Aside<'_> {
        self.aside.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Aside(self)
    }

    /// An upstream answer's usage (OpenAI's shape, as the vendor sent it),
    /// to the token series and the console; `turn` charges its spend.
    pub fn usage(
        &self,
        provider: &str,
        label: &str,
        u: &serde_json::Value,
        turn: Option<(&crate::spend::Turn, &Fields)>,
    ) {
        crate::metrics::usage(provider, label, u);
        if let Some(e) = &self.shown {
            e.usage(u);
        }
        if let Some((t, fields)) = turn {
            let mut u = u.clone();
            crate::stream::usage::normalize(&mut u, fields);
            t.usage(&u);
        }
    }

    /// The token counts of a whole answer sent on as the upstream wrote it
    /// (its usage read without a tree).
    pub fn tokens(&self, provider: &str, label: &str, t: &crate::stream::Tokens, turn: Option<&crate::spend::Turn>) {
        if let Some(turn) = turn {
            turn.tokens(t.prompt_tokens, t.cached_tokens, t.completion_tokens);
        }
        crate::metrics::tokens(provider, label, t.prompt_tokens, t.completion_tokens);
        if let Some(e) = &self.shown {
            let total = t.prompt_tokens.zip(t.completion_tokens).map(|(a, b)| a + b);
            e.usage(&serde_json::json!({"prompt_tokens": t.prompt_tokens,
                "completion_tokens": t.completion_tokens, "total_tokens": total}));
        }
    }

    /// The chain moved from one provider to the next after `error`.
    pub fn fallback(&self, from: &str, to: &str, error: &dyn std::fmt::Display) {
        crate::metrics::fallback(from, to);
        if let Some(e) = &self.shown {
            e.fallback(from, to, &error.to_string());
        }
        tracing::warn!(from = %from, to = %to, error = %error, "falling back to the next provider");
    }

    /// A warning for the client, sent as a response header (so told before
    /// the response starts).
    pub fn warn(&self, warning: String) {
        tracing::warn!(warning = %warning, "answered with a warning");
        if let Ok(mut w) = self.warnings.lock() {
            w.push(warning);
        }
    }

    /// The warnings told so far.
    pub fn warnings(&self) -> Vec<String> {
        self.warnings.lock().map(|w| w.clone()).unwrap_or_default()
    }

    pub fn served(&self) -> Option<Served> {
        self.served.lock().ok().and_then(|p| p.clone())
    }
}
