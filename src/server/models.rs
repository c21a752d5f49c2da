//! `GET /v1/models` and `GET /v1/models/{id}` (our ids contain `/`): every
//! configured provider's models as `provider/model`, plus the aliases; to a
//! key restricted to some models, only those. A provider whose config and
//! profile name no models lists what its upstream's own `GET /models`
//! returns ([`Discovery`], DESIGN.md "HTTP surface").

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use axum::Json;
use axum::extract::{Extension, Path, State};
use serde_json::{Map, Value, json};

use super::Shared;
use super::edge::RequestCtx;
use crate::error::ApiError;
use crate::provider::upstream::Upstream;
use crate::provider::{Provider, Providers};

/// The most bytes of an upstream's model list read.
const MAX_LIST_BYTES: usize = 8 * 1024 * 1024;
/// The most models taken from one upstream's list.
const MAX_MODELS: usize = 10_000;
/// A failed fetch is tried again after at most this long: a local server
/// started after the proxy shows up soon.
const RETRY_FAILED: Duration = Duration::from_secs(30);
/// The shortest time a list is kept, whatever the config says.
const SHORTEST_REFRESH: Duration = Duration::from_millis(100);

/// The list; asked with `anthropic-version` (the Anthropic SDKs, Claude
/// Code), in Anthropic's shape.
pub async fn list(
    State(s): State<Shared>,
    Extension(ctx): Extension<Arc<RequestCtx>>,
    headers: axum::http::HeaderMap,
) -> Json<Value> {
    let data = visible(&s, &ctx).await;
    if headers.contains_key("anthropic-version") {
        return Json(crate::fronts::messages::model_list(&data));
    }
    Json(json!({"object": "list", "data": data}))
}

/// One model of the list; an id the caller's key may not use is as unknown
/// as one that does not exist.
pub async fn retrieve(
    State(s): State<Shared>,
    Extension(ctx): Extension<Arc<RequestCtx>>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    visible(&s, &ctx).await.into_iter().find(|m| m["id"] == id.as_str()).map(Json).ok_or_else(|| {
        ApiError::ModelNotFound(format!("The model `{id}` does not exist or you do not have access to it."))
    })
}

/// Every model the caller's key may use, in list order.
async fn visible(s: &Shared, ctx: &RequestCtx) -> Vec<Value> {
    let key = ctx.key.as_deref().and_then(|name| s.edge.auth.named(name));
    let allowed = |id: &str| key.as_ref().is_none_or(|k| k.allows(id));
    let discovered = s.discovery.lists(&s.upstream).await;
    let mut data = Vec::new();
    for p in s.providers.iter() {
        for m in &p.models {
            let id = format!("{}/{m}", p.name);
            if allowed(&id) {
                data.push(json!({"id": id, "object": "model", "created": 0, "owned_by": p.name}));
            }
        }
        if let Some((_, models)) = discovered.iter().find(|(name, _)| *name == p.name) {
            data.extend(models.iter().filter(|m| m["id"].as_str().is_some_and(&allowed)).cloned());
        }
    }
    for (alias, targets) in s.providers.aliases() {
        if !allowed(alias) {
            continue;
        }
        // A single target stays a string; a fallback chain is listed whole.
        let target = match targets.as_slice() {
            [one] => json!(one),
            many => json!(many),
        };
        data.push(json!({"id": alias, "object": "model", "created": 0, "owned_by": "modelshim", "target": target}));
    }
    data
}

/// The upstreams' own model lists, for the providers whose config and
/// profile name no models: fetched when first asked for (nothing at start:
/// with no config every local engine's profile is a provider, mostly not
/// running), kept `models_refresh_secs`, then served once more while a
/// background fetch replaces them. Per replica (not in the shared state
/// store): each replica asks the upstreams itself.
pub struct Discovery {
    slots: Vec<Arc<Slot>>,
}

struct Slot {
    provider: Arc<Provider>,
    listed: Mutex<Listed>,
    /// One fetch at a time; requests arriving meanwhile wait for its result.
    fetching: tokio::sync::Mutex<()>,
    /// A background fetch is under way.
    refreshing: AtomicBool,
}

#[derive(Default)]
struct Listed {
    /// As `/v1/models` lists them (`provider/id`).
    models: Arc<[Value]>,
    /// When the last fetch ended; `None`: never fetched.
    at: Option<Instant>,
    /// The last fetch failed (said once in the log, until one succeeds).
    failing: bool,
}

impl Discovery {
    pub fn new(providers: &Providers) -> Self {
        let slots = providers
            .iter()
            .filter(|p| p.models.is_empty())
            .map(|p| {
                Arc::new(Slot {
                    provider: p.clone(),
                    listed: Mutex::default(),
                    fetching: tokio::sync::Mutex::new(()),
                    refreshing: AtomicBool::new(false),
                })
            })
            .collect();
        Discovery { slots }
    }

    /// Each discovering provider's current list, by provider name.
    async fn lists(&self, up: &Upstream) -> Vec<(&str, Arc<[Value]>)> {
        let lists = futures_util::future::join_all(self.slots.iter().map(|s| s.current(up))).await;
        self.slots.iter().map(|s| s.provider.name.as_str()).zip(lists).collect()
    }
}

impl Slot {
    fn read(&self) -> (Arc<[Value]>, Option<Instant>, bool) {
        let l = self.listed.lock().unwrap_or_else(PoisonError::into_inner);
        (l.models.clone(), l.at, l.failing)
    }

    /// How long a list is served before it is fetched again.
    fn max_age(&self, failing: bool) -> Duration {
        let refresh = crate::server::limits::secs(self.provider.upstream.models_refresh_secs).max(SHORTEST_REFRESH);
        if failing { refresh.min(RETRY_FAILED) } else { refresh }
    }

    /// The list now: fetched first if it never was; a stale one is served
    /// and replaced in the background.
    async fn current(self: &Arc<Self>, up: &Upstream) -> Arc<[Value]> {
        let (models, at, failing) = self.read();
        match at {
            None => {
                self.refresh(up).await;
                self.read().0
            }
            Some(t) if t.elapsed() >= self.max_age(failing) => {
                if !self.refreshing.swap(true, Ordering::AcqRel) {
                    let (slot, up) = (self.clone(), up.clone());
                    tokio::spawn(async move {
                        slot.refresh(&up).await;
                        slot.refreshing.store(false, Ordering::Release);
                    });
                }
                models
            }
            Some(_) => models,
        }
    }

    /// Fetches the list, unless a fetch that ended while this one waited
    /// made it fresh. An upstream that fails lists nothing.
    async fn refresh(&self, up: &Upstream) {
        let _one = self.fetching.lock().await;
        let (_, at, failing) = self.read();
        if at.is_some_and(|t| t.elapsed() < self.max_age(failing)) {
            return;
        }
        let p = &self.provider;
        let limit = crate::server::limits::secs(p.upstream.models_timeout_secs);
        let got = match tokio::time::timeout(limit, up.get_json(p, "models", MAX_LIST_BYTES)).await {
            Ok(Ok(v)) => shaped(&p.name, &v),
            Ok(Err(e)) => Err(e.to_string()),
            Err(_) => Err(format!("no whole answer within {limit:?}")),
        };
        let mut l = self.listed.lock().unwrap_or_else(PoisonError::into_inner);
        match got {
            Ok(models) => {
                if l.failing {
                    tracing::info!(provider = %p.name, models = models.len(), "the upstream lists its models again");
                }
                l.failing = false;
                l.models = models.into();
            }
            Err(why) => {
                // `UpstreamError`'s text is redacted (crate::redact): no key in the log.
                if !l.failing {
                    tracing::warn!(provider = %p.name, "cannot list the upstream's models ({why}); /v1/models lists none of this provider until it answers");
                }
                l.failing = true;
                l.models = Arc::from([]);
            }
        }
        l.at = Some(Instant::now());
    }
}

/// An upstream's list (`{"data": [{"id": …}, …]}`, or a bare array of
/// objects or ids) as we list it: ids prefixed with the provider's name,
/// whatever else the upstream said about each model kept.
fn shaped(provider: &str, v: &Value) -> Result<Vec<Value>, String> {
    let list = v.get("data").unwrap_or(v).as_array().ok_or("the answer is not a model list (no `data` array)")?;
    let models = list
        .iter()
        .filter_map(|m| {
            let id = m.as_str().or_else(|| m.get("id")?.as_str()).filter(|id| !id.is_empty())?;
            let mut out = m.as_object().cloned().unwrap_or_else(Map::new);
            out.insert("id".into(), json!(format!("{provider}/{id}")));
            out.insert("object".into(), json!("model"));
            out.entry("created").or_insert(json!(0));
            out.insert("owned_by".into(), json!(provider));
            Some(Value::Object(out))
        })
        .take(MAX_MODELS)
        .collect();
    Ok(models)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_upstream_list_is_prefixed_and_keeps_its_fields() {
        let v = json!({"object": "list", "data": [
            {"id": "Qwen/Qwen3-8B", "object": "model", "created": 7, "owned_by": "vllm", "max_model_len": 32768},
            {"object": "model"},
        ]});
        let got = shaped("local", &v).unwrap_or_default();
        assert_eq!(
            got,
            [
                json!({"id": "local/Qwen/Qwen3-8B", "object": "model", "created": 7, "owned_by": "local", "max_model_len": 32768})
            ]
        );
        let bare = shaped("o", &json!(["a", {"id": "b"}])).unwrap_or_default();
        assert_eq!(bare.iter().map(|m| m["id"].clone()).collect::<Vec<_>>(), [json!("o/a"), json!("o/b")]);
        assert!(shaped("o", &json!({"error": "nope"})).is_err());
    }
}
