//! The context of the request being served: its id, start, the model asked
//! for and the proxy key's name (set by the edge, read wherever the request
//! goes), and who served it (set here, read by the edge's access log and
//! metrics). A task-local, so no signature carries it.

use std::sync::{Arc, Mutex};
use std::time::Instant;

/// What is known about the request being served (set by the edge).
#[derive(Debug)]
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
    pub fn new(id: String, start: Instant, model: Option<String>, key: Option<String>) -> Self {
        RequestCtx {
            id,
            start,
            model,
            key,
            served: Mutex::new(None),
            spend: Default::default(),
            answered: Default::default(),
        }
    }

    pub fn set_served(&self, provider: &crate::provider::Provider, model: &str) {
        if let Ok(mut p) = self.served.lock() {
            let known = provider.knows_model(model);
            *p = Some(Served { provider: provider.name.clone(), model: model.to_string(), known });
        }
        crate::recorder::with(|e| e.served(&provider.name, model));
    }

    /// True for the request's first upstream answer only: its time to
    /// first token is the request's.
    pub fn first_answer(&self) -> bool {
        !self.answered.swap(true, std::sync::atomic::Ordering::Relaxed)
    }

    pub fn served(&self) -> Option<Served> {
        self.served.lock().ok().and_then(|p| p.clone())
    }
}

tokio::task_local! {
    /// Set by the edge around the handler of each request.
    pub static CTX: Arc<RequestCtx>;
}

/// The context of the request this task is serving, if any.
pub fn current() -> Option<Arc<RequestCtx>> {
    CTX.try_with(Arc::clone).ok()
}
