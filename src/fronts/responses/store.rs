//! Stored responses (`store: true`, the default): the response object and
//! the whole conversation up to it — every earlier input item, this
//! request's input and the output items — in the conversation-state store
//! (namespace `responses`, the state TTL), so `previous_response_id` and
//! `GET /v1/responses/{id}` work on any replica that shares the store.
//! Each turn's new items are also kept by item id (namespace
//! `response_items`), so an `item_reference` input finds them.

use serde_json::{Value, json};

use crate::core::Core;
use crate::error::ApiError;
use crate::state::ns;

/// A stored response and its conversation.
pub struct Stored {
    pub response: Value,
    /// Input and output items of every turn up to and including this one.
    pub items: Vec<Value>,
}

/// Saves a finished response, owned by the request's proxy key (`owner`);
/// `items[new..]` are this turn's (its input and output), indexed by item id.
/// A store failure is logged: the answer is delivered anyway, only a later
/// `previous_response_id` or `item_reference` will miss it.
pub async fn save(s: &Core, owner: Option<&str>, response: &Value, mut items: Vec<Value>, new: usize) {
    let Some(id) = response["id"].as_str() else { return };
    // Every item gets an id once, so listings page stably. Only ids the
    // proxy made are indexed: a client's own id must not displace another's.
    let outputs = response["output"].as_array().map_or(0, Vec::len);
    let first_output = items.len().saturating_sub(outputs);
    let mut indexed = vec![false; items.len()];
    for (i, it) in items.iter_mut().enumerate() {
        indexed[i] = i >= new && i >= first_output;
        if let Some(o) = it.as_object_mut()
            && !o.get("id").is_some_and(Value::is_string)
        {
            indexed[i] = i >= new;
            let prefix = match o.get("type").and_then(Value::as_str) {
                Some("function_call") => "fc",
                Some("custom_tool_call") => "ctc",
                Some("function_call_output") => "fco",
                Some("reasoning") => "rs",
                _ => "msg",
            };
            o.insert("id".into(), Value::String(super::events::new_id(prefix)));
        }
    }
    let puts = items.iter().zip(indexed).filter(|(_, keep)| *keep).filter_map(|(it, _)| {
        let item_id = it.get("id").and_then(Value::as_str)?;
        let value = json!({"item": it, "owner": owner});
        Some(async move { (item_id, s.store.put(ns::RESPONSE_ITEMS, item_id, value, s.state_ttl).await) })
    });
    for (item_id, r) in futures_util::future::join_all(puts).await {
        if let Err(e) = r {
            tracing::warn!(store = s.store.kind(), "cannot store item {item_id}: {e}");
        }
    }
    let value = json!({"response": response, "items": items, "owner": owner});
    if let Err(e) = s.store.put(ns::RESPONSES, id, value, s.state_ttl).await {
        tracing::warn!(store = s.store.kind(), "cannot store response {id}: {e}");
    }
}

/// Replaces every `item_reference` in `input` by the item it names, from
/// this proxy key's stored responses; an unknown id is a 400 naming it.
pub async fn resolve(s: &Core, owner: Option<&str>, input: &mut [Value]) -> Result<(), ApiError> {
    for (i, it) in input.iter_mut().enumerate() {
        if it.get("type").and_then(Value::as_str) != Some("item_reference") {
            continue;
        }
        let param = format!("input[{i}]");
        let Some(id) = it.get("id").and_then(Value::as_str).filter(|id| !id.is_empty()) else {
            return Err(ApiError::invalid_param(&param, "An `item_reference` needs the `id` of an item."));
        };
        let found = match s.store.get(ns::RESPONSE_ITEMS, id).await {
            Ok(Some(v)) if v.get("owner").and_then(Value::as_str) == owner => v.get("item").cloned(),
            Ok(_) => None,
            Err(e) => return Err(ApiError::Unavailable(format!("The response store is unavailable: {e}"))),
        };
        match found {
            Some(item) => *it = item,
            None => return Err(ApiError::invalid_param(&param, format!("Item with id '{id}' not found."))),
        }
    }
    Ok(())
}

/// The stored response `id`; `Ok(None)` when there is none (never stored,
/// `store: false`, expired, or made with another proxy key: keys do not
/// see each other's conversations).
pub async fn load(s: &Core, owner: Option<&str>, id: &str) -> Result<Option<Stored>, ApiError> {
    match s.store.get(ns::RESPONSES, id).await {
        Ok(Some(v)) if v.get("owner").and_then(Value::as_str) != owner => {
            tracing::warn!(id, "a stored response was asked for with another proxy key");
            Ok(None)
        }
        Ok(Some(v)) => {
            let response = v.get("response").cloned().unwrap_or(Value::Null);
            let items = v.get("items").and_then(Value::as_array).cloned().unwrap_or_default();
            Ok(Some(Stored { response, items }))
        }
        Ok(None) => Ok(None),
        Err(e) => Err(ApiError::Unavailable(format!("The response store is unavailable: {e}"))),
    }
}

/// Deletes a stored response; `false` when there was none for this key.
pub async fn delete(s: &Core, owner: Option<&str>, id: &str) -> Result<bool, ApiError> {
    if load(s, owner, id).await?.is_none() {
        return Ok(false);
    }
    s.store
        .delete(ns::RESPONSES, id)
        .await
        .map_err(|e| ApiError::Unavailable(format!("The response store is unavailable: {e}")))?;
    Ok(true)
}

/// The input items of a stored response (everything the model was given
/// except `instructions`: earlier turns' items and this request's input),
/// in conversation order, with message content as parts the way OpenAI
/// lists it.
pub fn input_items(stored: &Stored) -> Vec<Value> {
    let outputs = stored.response["output"].as_array().map_or(0, Vec::len);
    let n = stored.items.len().saturating_sub(outputs);
    stored.items[..n]
        .iter()
        .map(|it| {
            let mut it = it.clone();
            if it["type"] == "message" {
                if let Some(text) = it["content"].as_str().map(str::to_string) {
                    let kind = if it["role"] == "assistant" { "output_text" } else { "input_text" };
                    it["content"] = json!([{"type": kind, "text": text}]);
                }
                if it.get("status").is_none() {
                    it["status"] = json!("completed");
                }
            }
            it
        })
        .collect()
}
