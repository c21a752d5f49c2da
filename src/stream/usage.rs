//! Token usage as OpenAI names it, whatever the vendor wrote: cache hits in
//! `prompt_tokens_details.cached_tokens` and reasoning in
//! `completion_tokens_details.reasoning_tokens` (what clients and cost
//! trackers read), the vendor's own fields kept beside them.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

/// Vendor fields every profile reads (a profile's `[response] usage` adds
/// its own): DeepSeek's `prompt_cache_hit_tokens`, Kimi's and StepFun's
/// top-level `cached_tokens`, a top-level `reasoning_tokens`.
const COMMON: [(&str, &str); 3] =
    [("prompt_cache_hit_tokens", CACHED), ("cached_tokens", CACHED), ("reasoning_tokens", REASONING)];

const CACHED: &str = "prompt_tokens_details.cached_tokens";
const REASONING: &str = "completion_tokens_details.reasoning_tokens";

/// Whether [`normalize`] would change `u` (an answer whose usage is already
/// OpenAI's can be sent on as it came).
pub fn needs_normalizing(u: &Value, extra: &BTreeMap<String, String>) -> bool {
    let Some(o) = u.as_object() else { return false };
    let missing_total = !o.contains_key("total_tokens") && o.contains_key("prompt_tokens");
    missing_total || fields(extra).any(|(from, to)| get(u, from).is_some() && get(u, to).is_none())
}

/// Fills OpenAI's fields from the vendor's, never overwriting one the vendor
/// set; `total_tokens` from the two counts when it is missing.
pub fn normalize(u: &mut Value, extra: &BTreeMap<String, String>) {
    if !u.is_object() {
        return;
    }
    let fills: Vec<(&str, Value)> = fields(extra)
        .filter(|(_, to)| get(u, to).is_none())
        .filter_map(|(from, to)| get(u, from).filter(|v| v.is_u64()).map(|v| (to, v.clone())))
        .collect();
    for (to, v) in fills {
        set(u, to, v);
    }
    let n = |k: &str| u.get(k).and_then(Value::as_u64);
    if u.get("total_tokens").is_none()
        && let (Some(p), Some(c)) = (n("prompt_tokens"), n("completion_tokens"))
        && let Some(o) = u.as_object_mut()
    {
        o.insert("total_tokens".into(), Value::from(p + c));
    }
}

fn fields(extra: &BTreeMap<String, String>) -> impl Iterator<Item = (&str, &str)> {
    extra.iter().map(|(a, b)| (a.as_str(), b.as_str())).chain(COMMON)
}

/// A dotted path into the usage object.
fn get<'a>(u: &'a Value, path: &str) -> Option<&'a Value> {
    path.split('.').try_fold(u, |v, k| v.get(k)).filter(|v| !v.is_null())
}

/// Sets a dotted path, making the objects on the way (a `null` one too).
fn set(u: &mut Value, path: &str, v: Value) {
    let mut at = u;
    let mut keys = path.split('.').peekable();
    while let Some(k) = keys.next() {
        let Some(o) = at.as_object_mut() else { return };
        if keys.peek().is_none() {
            o.insert(k.into(), v);
            return;
        }
        let next = o.entry(k).or_insert_with(|| Value::Object(Map::new()));
        if next.is_null() {
            *next = Value::Object(Map::new());
        }
        at = next;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn norm(mut u: Value, extra: &[(&str, &str)]) -> Value {
        let extra: BTreeMap<String, String> = extra.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect();
        let before = u.clone();
        normalize(&mut u, &extra);
        assert_eq!(needs_normalizing(&before, &extra), before != u, "{before} → {u}");
        u
    }

    #[test]
    fn vendor_cache_and_reasoning_fields_reach_openais() {
        // DeepSeek.
        let u = norm(
            json!({"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120,
                   "prompt_cache_hit_tokens": 64, "prompt_cache_miss_tokens": 36,
                   "completion_tokens_details": {"reasoning_tokens": 12}}),
            &[],
        );
        assert_eq!(u["prompt_tokens_details"]["cached_tokens"], 64);
        assert_eq!(u["prompt_cache_hit_tokens"], 64, "vendor fields kept");
        assert_eq!(u["completion_tokens_details"]["reasoning_tokens"], 12);
        // Kimi: top-level `cached_tokens`, details `null`.
        let u = norm(
            json!({"prompt_tokens": 9, "completion_tokens": 1, "cached_tokens": 8, "prompt_tokens_details": null}),
            &[],
        );
        assert_eq!(u["prompt_tokens_details"]["cached_tokens"], 8);
        assert_eq!(u["total_tokens"], 10);
        // What the vendor set itself wins.
        let u =
            norm(json!({"total_tokens": 3, "cached_tokens": 8, "prompt_tokens_details": {"cached_tokens": 2}}), &[]);
        assert_eq!(u["prompt_tokens_details"]["cached_tokens"], 2);
        // A profile's own field.
        let u = norm(json!({"total_tokens": 3, "thoughts": 5}), &[("thoughts", REASONING)]);
        assert_eq!(u["completion_tokens_details"]["reasoning_tokens"], 5);
        // OpenAI's own shape is left alone.
        let plain = json!({"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3});
        assert_eq!(norm(plain.clone(), &[]), plain);
        assert_eq!(norm(json!("odd"), &[]), json!("odd"));
    }
}
