//! `GET /v1/models`: every configured provider's models as `provider/model`,
//! plus the aliases; to a key restricted to some models, only those.

use axum::Json;
use axum::extract::State;
use serde_json::{Value, json};

use super::Shared;

pub async fn list(State(s): State<Shared>) -> Json<Value> {
    let key = super::edge::current().and_then(|c| c.key.clone()).and_then(|name| s.edge.auth.named(&name));
    let allowed = |id: &str| key.as_ref().is_none_or(|k| k.allows(id));
    let mut data = Vec::new();
    for p in s.providers.iter() {
        for m in &p.models {
            let id = format!("{}/{m}", p.name);
            if !allowed(&id) {
                continue;
            }
            data.push(json!({"id": id, "object": "model", "created": 0, "owned_by": p.name}));
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
    Json(json!({"object": "list", "data": data}))
}
