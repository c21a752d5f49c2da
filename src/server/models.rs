//! `GET /v1/models`: every configured provider's models as `provider/model`,
//! plus the aliases.

use axum::Json;
use axum::extract::State;
use serde_json::{Value, json};

use super::Shared;

pub async fn list(State(s): State<Shared>) -> Json<Value> {
    let mut data = Vec::new();
    for p in s.providers.iter() {
        for m in &p.models {
            data.push(json!({"id": format!("{}/{m}", p.name), "object": "model", "created": 0, "owned_by": p.name}));
        }
    }
    for (alias, targets) in s.providers.aliases() {
        // A single target stays a string; a fallback chain is listed whole.
        let target = match targets.as_slice() {
            [one] => json!(one),
            many => json!(many),
        };
        data.push(json!({"id": alias, "object": "model", "created": 0, "owned_by": "modelshim", "target": target}));
    }
    Json(json!({"object": "list", "data": data}))
}
