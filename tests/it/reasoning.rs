//! The reasoning round-trip (issue #10) against an upstream that behaves like
//! DeepSeek: in thinking mode it answers 400 unless every earlier tool-call
//! turn carries its exact reasoning; the R1-era reasoner answers 400 when any
//! turn carries reasoning at all. Driven by the official Python SDK.

use crate::common;
use crate::support::pyenv;

use std::collections::BTreeMap;
use std::process::Command;

use common::*;
use modelshim::config::{Config, ProviderConfig};
use modelshim::provider::Profile;
use modelshim::server::{AppState, app};
use pyenv::{python_env, run};
use serde_json::{Value, json};
use wiremock::{Mock, MockServer, Request, Respond, ResponseTemplate};

const REASONING: [&str; 3] = [
    "The user wants Paris first; I should call get_weather for Paris.",
    "Paris is 22C. Now Rome — another call, then compare.",
    "Both are 22C; answer briefly.",
];

fn err(message: String) -> ResponseTemplate {
    ResponseTemplate::new(400).set_body_json(json!({"error": {"message": message, "type": "invalid_request_error", "param": null, "code": "invalid_request_error"}}))
}

struct DeepSeek;

impl Respond for DeepSeek {
    fn respond(&self, r: &Request) -> ResponseTemplate {
        let body: Value = serde_json::from_slice(&r.body).unwrap();
        let thinking_mode = body["model"] == "deepseek-v4";
        let messages = body["messages"].as_array().unwrap();
        let mut turn = 0;
        for (i, m) in messages.iter().enumerate() {
            let rc = m.get("reasoning_content");
            if !thinking_mode && rc.is_some() {
                return err("The reasoning_content is an intermediate result for display purposes only and must not be sent back as input.".into());
            }
            if m["role"] == "assistant" && m["tool_calls"].as_array().is_some_and(|c| !c.is_empty()) {
                if thinking_mode {
                    match rc.and_then(Value::as_str) {
                        None => {
                            return err(format!(
                                "Missing `reasoning_content` field in the assistant message at message index {i}"
                            ));
                        }
                        Some(t) if t != REASONING[turn] => {
                            return err(format!(
                                "reasoning_content at message index {i} is not what was generated: {t:?}"
                            ));
                        }
                        Some(_) => {}
                    }
                }
                turn += 1;
            }
        }
        let (delta_calls, content, finish) = match turn {
            0 | 1 => {
                let city = if turn == 0 { "Paris" } else { "Rome" };
                let call = json!({"index": 0, "id": format!("call_ds_{turn}"), "type": "function",
                                  "function": {"name": "get_weather", "arguments": format!("{{\"city\": \"{city}\"}}")}});
                (Some(call), None, "tool_calls")
            }
            _ => (None, Some("Paris and Rome are both 22C."), "stop"),
        };
        let reasoning = REASONING[turn.min(2)];
        if body["stream"] == true {
            let (a, b) = reasoning.split_at(reasoning.len() / 2);
            let mut chunks = vec![
                chunk(json!({"role": "assistant", "reasoning_content": a}), None),
                chunk(json!({"reasoning_content": b}), None),
            ];
            if let Some(c) = &delta_calls {
                chunks.push(chunk(json!({"tool_calls": [c]}), None));
            }
            if let Some(t) = content {
                chunks.push(chunk(json!({"content": t}), None));
            }
            chunks.push(chunk(json!({}), Some(finish)));
            return ResponseTemplate::new(200).set_body_raw(sse_body(&chunks), "text/event-stream");
        }
        let mut msg = json!({"role": "assistant", "content": content, "reasoning_content": reasoning});
        if let Some(mut c) = delta_calls {
            c.as_object_mut().unwrap().remove("index");
            msg["tool_calls"] = json!([c]);
        }
        ResponseTemplate::new(200).set_body_json(completion(msg, finish))
    }
}

/// A proxy with two providers on the same upstream: `required` restores
/// reasoning, `reject` strips it.
async fn start(upstream: &str) -> Proxy {
    let mut profiles = BTreeMap::new();
    for (id, replay) in [("required", "required"), ("reject", "reject")] {
        let text =
            format!("name = \"{id}\"\nbase_url = \"http://unused\"\n[thinking]\nreasoning_replay = \"{replay}\"\n");
        profiles.insert(id.to_string(), Profile::parse(id, &text).unwrap());
    }
    let mut config = Config::default();
    for id in ["required", "reject"] {
        config
            .providers
            .insert(id.into(), ProviderConfig { base_url: Some(format!("{upstream}/v1")), ..Default::default() });
    }
    let state = AppState::new(&config, &profiles).unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app(state)).await.unwrap() });
    Proxy { addr, http: reqwest::Client::new() }
}

#[tokio::test(flavor = "multi_thread")]
async fn python_sdk_three_turn_conversation_keeps_deepseek_happy() {
    let py = tokio::task::spawn_blocking(python_env).await.unwrap();
    let upstream = MockServer::start().await;
    Mock::given(wiremock::matchers::method("POST")).respond_with(DeepSeek).mount(&upstream).await;
    let p = start(&upstream.uri()).await;
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/sdk/reasoning_roundtrip.py");
    let base = p.url("/v1");
    let out = tokio::task::spawn_blocking(move || run(Command::new(py).arg(script).env("MODELSHIM_BASE_URL", base)))
        .await
        .unwrap();
    match out {
        Ok(text) => println!("{text}"),
        Err(text) => panic!("{text}"),
    }
    // The upstream saw the exact reasoning of each earlier turn, and never
    // any reasoning on the reject provider.
    let mut seen = Vec::new();
    for r in upstream.received_requests().await.unwrap() {
        let body: Value = serde_json::from_slice(&r.body).unwrap();
        for m in body["messages"].as_array().unwrap() {
            if let Some(t) = m.get("reasoning_content") {
                assert_eq!(body["model"], "deepseek-v4", "reasoning reached the reject upstream");
                seen.push(t.as_str().unwrap().to_string());
            }
        }
    }
    // Per streamed/non-streamed conversation: turn 2 carries R1; turn 3 carries R1 and R2.
    let expect: Vec<String> = [REASONING[0], REASONING[0], REASONING[1]].iter().map(|s| s.to_string()).collect();
    assert_eq!(seen, [expect.clone(), expect].concat());
}
