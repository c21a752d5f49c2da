//! Malformed input on the request path: random bytes and random JSON shapes
//! posted to `/v1/chat/completions` and `/v1/responses` (and `/compact`) always get an HTTP
//! answer (an OpenAI error or a completion), never a dropped connection (a
//! panic) or a 5xx of the proxy's own making.

use crate::common;

use common::*;
use proptest::prelude::*;
use serde_json::{Map, Value, json};
use wiremock::matchers::method;
use wiremock::{Mock, MockServer, ResponseTemplate};

fn arb_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<f64>().prop_filter("finite", |f| f.is_finite()).prop_map(Value::from),
        "\\PC{0,12}".prop_map(Value::from),
        prop_oneof![Just("user"), Just("assistant"), Just("tool"), Just("system"), Just("function"), Just("v/m")]
            .prop_map(Value::from),
        prop_oneof![
            Just("message"),
            Just("function_call"),
            Just("function_call_output"),
            Just("reasoning"),
            Just("input_text"),
            Just("output_text"),
            Just("input_image"),
            Just("reasoning_text"),
            Just("web_search"),
            Just("namespace"),
            Just("custom"),
            Just("custom_tool_call"),
            Just("additional_tools"),
            Just("compaction"),
            Just("msr1.AAAA"),
        ]
        .prop_map(Value::from),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        let keys = prop_oneof![
            Just("role".to_string()),
            Just("content".to_string()),
            Just("tool_calls".to_string()),
            Just("function".to_string()),
            Just("name".to_string()),
            Just("arguments".to_string()),
            Just("type".to_string()),
            Just("tool_call_id".to_string()),
            Just("call_id".to_string()),
            Just("output".to_string()),
            Just("text".to_string()),
            Just("summary".to_string()),
            Just("image_url".to_string()),
            Just("tools".to_string()),
            Just("namespace".to_string()),
            Just("input".to_string()),
            Just("encrypted_content".to_string()),
            "[a-z_]{1,8}",
        ];
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
            prop::collection::btree_map(keys, inner, 0..5).prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// A chat request whose every field may have any shape.
fn arb_request() -> impl Strategy<Value = Value> {
    (
        prop_oneof![Just(json!("v/m")), arb_json()],
        prop_oneof![arb_json(), prop::collection::vec(arb_json(), 0..4).prop_map(Value::Array)],
        prop::option::of(arb_json()),
        prop::option::of(prop_oneof![Just(json!(true)), Just(json!(false)), arb_json()]),
        prop::option::of(arb_json()),
        prop::option::of(arb_json()),
    )
        .prop_map(|(model, messages, tools, stream, tool_choice, extra)| {
            let mut m = Map::new();
            m.insert("model".into(), model);
            m.insert("messages".into(), messages);
            if let Some(t) = tools {
                m.insert("tools".into(), t);
            }
            if let Some(s) = stream {
                m.insert("stream".into(), s);
            }
            if let Some(t) = tool_choice {
                m.insert("tool_choice".into(), t);
            }
            if let Some(e) = extra {
                m.insert("stream_options".into(), e);
            }
            Value::Object(m)
        })
}

/// A Responses request whose every field may have any shape.
fn arb_responses_request() -> impl Strategy<Value = Value> {
    (
        prop_oneof![Just(json!("v/m")), arb_json()],
        prop_oneof![arb_json(), prop::collection::vec(arb_json(), 0..4).prop_map(Value::Array)],
        prop::option::of(arb_json()),
        prop::option::of(prop_oneof![Just(json!(true)), Just(json!(false)), arb_json()]),
        prop::option::of(arb_json()),
        prop::collection::btree_map(
            prop_oneof![
                Just("instructions"),
                Just("previous_response_id"),
                Just("text"),
                Just("reasoning"),
                Just("store"),
                Just("max_output_tokens"),
                Just("parallel_tool_calls"),
                Just("include"),
            ],
            arb_json(),
            0..3,
        ),
    )
        .prop_map(|(model, input, tools, stream, tool_choice, extra)| {
            let mut m = Map::new();
            m.insert("model".into(), model);
            m.insert("input".into(), input);
            if let Some(t) = tools {
                m.insert("tools".into(), t);
            }
            if let Some(s) = stream {
                m.insert("stream".into(), s);
            }
            if let Some(t) = tool_choice {
                m.insert("tool_choice".into(), t);
            }
            for (k, v) in extra {
                m.insert(k.into(), v);
            }
            Value::Object(m)
        })
}

struct Env {
    rt: tokio::runtime::Runtime,
    proxy: Proxy,
    _upstream: MockServer,
}

fn env() -> Env {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let (proxy, upstream) = rt.block_on(async {
        let server = MockServer::start().await;
        let body = completion(json!({"role": "assistant", "content": "ok"}), "stop");
        Mock::given(method("POST")).respond_with(ResponseTemplate::new(200).set_body_json(body)).mount(&server).await;
        (proxy("", &server.uri()).await, server)
    });
    Env { rt, proxy, _upstream: upstream }
}

fn check(env: &Env, body: Vec<u8>) -> Result<(), TestCaseError> {
    check_at(env, "/v1/chat/completions", body)
}

fn check_at(env: &Env, path: &str, body: Vec<u8>) -> Result<(), TestCaseError> {
    let (status, text) = env
        .rt
        .block_on(async {
            let r = env
                .proxy
                .http
                .post(env.proxy.url(path))
                .header("content-type", "application/json")
                .body(body.clone())
                .send()
                .await
                .map_err(|e| format!("no answer (panic?): {e}"))?;
            let status = r.status().as_u16();
            let text = r.text().await.map_err(|e| format!("body broken: {e}"))?;
            Ok::<_, String>((status, text))
        })
        .map_err(TestCaseError::fail)?;
    prop_assert!(status == 200 || (400..500).contains(&status), "status {status}: {text}");
    if status != 200 {
        let v: Value = serde_json::from_str(&text).map_err(|e| TestCaseError::fail(format!("{e}: {text}")))?;
        prop_assert!(v["error"]["message"].is_string(), "not an OpenAI error: {text}");
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    #[test]
    fn random_bytes(body in prop::collection::vec(any::<u8>(), 0..600)) {
        thread_local!(static ENV: Env = env());
        ENV.with(|e| check(e, body))?;
    }

    #[test]
    fn random_json_shapes(req in arb_request()) {
        thread_local!(static ENV: Env = env());
        ENV.with(|e| check(e, serde_json::to_vec(&req).unwrap()))?;
    }

    #[test]
    fn random_responses_shapes(req in arb_responses_request()) {
        thread_local!(static ENV: Env = env());
        ENV.with(|e| check_at(e, "/v1/responses", serde_json::to_vec(&req).unwrap()))?;
    }

    #[test]
    fn random_responses_shapes_to_compact(req in arb_responses_request()) {
        thread_local!(static ENV: Env = env());
        ENV.with(|e| check_at(e, "/v1/responses/compact", serde_json::to_vec(&req).unwrap()))?;
    }

    #[test]
    fn random_bytes_to_responses(body in prop::collection::vec(any::<u8>(), 0..600)) {
        thread_local!(static ENV: Env = env());
        ENV.with(|e| check_at(e, "/v1/responses", body))?;
    }

    #[test]
    fn random_json_values(v in arb_json()) {
        thread_local!(static ENV: Env = env());
        ENV.with(|e| check(e, serde_json::to_vec(&v).unwrap()))?;
    }
}
