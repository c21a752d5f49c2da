//! Stored responses (`store: true`, the default): the response object and
//! the whole conversation up to it — every earlier input item, this
//! request's input and the output items — in the conversation-state store
//! (namespace `responses`, the state TTL), so `previous_response_id` and
//! `GET /v1/responses/{id}` work on any replica that shares the store.

use serde_json::{Value, json};

use crate::error::ApiError;
use crate::server::Shared;
use crate::state::ns;

/// A stored response and its conversation.
pub struct Stored {
    pub response: Value,
    /// Input and output items of every turn up to and including this one.
    pub items: Vec<Value>,
}

/// Saves a finished response. A store failure is logged: the answer is
/// delivered anyway, only a later `previous_response_id` will miss it.
pub async fn save(s: &Shared, response: &Value, items: Vec<Value>) {
    let Some(id) = response["id"].as_str() else { return };
    let value = json!({"response": response, "items": items});
    if let Err(e) = s.store.put(ns::RESPONSES, id, value, s.state_ttl).await {
        tracing::warn!(store = s.store.kind(), "cannot store response {id}: {e}");
    }
}

/// The stored response `id`; `Ok(None)` when there is none (never stored,
/// `store: false`, or expired).
pub async fn load(s: &Shared, id: &str) -> Result<Option<Stored>, ApiError> {
    match s.store.get(ns::RESPONSES, id).await {
        Ok(Some(v)) => {
            let response = v.get("response").cloned().unwrap_or(Value::Null);
            let items = v.get("items").and_then(Value::as_array).cloned().unwrap_or_default();
            Ok(Some(Stored { response, items }))
        }
        Ok(None) => Ok(None),
        Err(e) => Err(ApiError::Unavailable(format!("The response store is unavailable: {e}"))),
    }
}
