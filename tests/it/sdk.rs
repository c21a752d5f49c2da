//! Real-client conformance: the official OpenAI Python and Node SDKs, at
//! pinned versions, against the proxy in front of a scripted wiremock
//! upstream. The SDKs are installed on first run under cargo's target
//! tmp dir (a venv and an npm folder), so `cargo test` needs nothing else
//! than python3, node and the package registries.

use crate::common;
use crate::support::pyenv;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::*;
use modelshim::config::ProviderConfig;
use modelshim::provider::ToolMode;
use pyenv::{python_env, run, sdk_dir};
use serde_json::{Value, json};
use wiremock::matchers::{body_partial_json, method};
use wiremock::{Mock, MockServer, Request, ResponseTemplate};

const NODE_OPENAI: &str = "7.59.0";

/// An npm folder with the pinned `openai` package and our script in it.
fn node_env() -> PathBuf {
    let dir = sdk_dir().join("node");
    let pkg = dir.join("node_modules/openai/package.json");
    pyenv::locked(
        "node",
        || {
            std::fs::read_to_string(&pkg)
                .ok()
                .and_then(|t| serde_json::from_str::<Value>(&t).ok())
                .is_some_and(|v| v["version"] == NODE_OPENAI)
        },
        || {
            std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
            std::fs::write(dir.join("package.json"), r#"{"private": true, "type": "module"}"#)
                .map_err(|e| e.to_string())?;
            run(Command::new("npm")
                .args(["install", "--no-audit", "--no-fund", "--loglevel=error", &format!("openai@{NODE_OPENAI}")])
                .current_dir(&dir))
            .map(drop)
        },
    );
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/sdk/conformance.mjs");
    pyenv::place(&script, &dir, "conformance.mjs");
    dir
}

fn sse(chunks: &[Value]) -> ResponseTemplate {
    ResponseTemplate::new(200).set_body_raw(sse_body(chunks), "text/event-stream")
}

async fn on(server: &MockServer, model: &str, stream: Option<bool>, resp: ResponseTemplate) {
    let mut body = json!({"model": model});
    if let Some(s) = stream {
        body["stream"] = json!(s);
    }
    Mock::given(method("POST"))
        .and(body_partial_json(body))
        .respond_with(resp)
        .with_priority(if stream.is_some() { 1 } else { 5 })
        .mount(server)
        .await;
}

fn has_tool_result(r: &Request) -> bool {
    serde_json::from_slice::<Value>(&r.body)
        .ok()
        .and_then(|v| v["messages"].as_array().map(|m| m.iter().any(|m| m["role"] == "tool")))
        .unwrap_or(false)
}

fn has_tools(r: &Request) -> bool {
    serde_json::from_slice::<Value>(&r.body).ok().is_some_and(|v| v.get("tools").is_some())
}

/// The prompt-mode history a second turn must carry: the call as hermes
/// text and the result as a `<tool_response>` user message, no tool roles.
fn prompt_history_rewritten(r: &Request) -> bool {
    let Ok(v) = serde_json::from_slice::<Value>(&r.body) else { return false };
    let msgs = v["messages"].as_array().cloned().unwrap_or_default();
    let text = |m: &Value| m["content"].as_str().unwrap_or_default().to_string();
    msgs.iter().all(|m| m["role"] != "tool" && m.get("tool_calls").is_none())
        && msgs.iter().any(|m| m["role"] == "assistant" && text(m).contains("<tool_call>\n{\"name\":\"get_weather\""))
        && msgs.iter().any(|m| m["role"] == "user" && text(m).contains("<tool_response name=\"get_weather\">\n"))
}

/// A prompt-mode upstream (no native tools): 400 for any request with
/// `tools`, a hermes call in the text, then the answer once the rewritten
/// history carries the result.
async fn prompt_scenario(s: &MockServer) {
    Mock::given(method("POST"))
        .and(body_partial_json(json!({"model": "ploop"})))
        .and(has_tools)
        .respond_with(ResponseTemplate::new(400).set_body_json(
            json!({"error": {"message": "tools are not supported by this model", "type": "invalid_request_error"}}),
        ))
        .with_priority(1)
        .mount(s)
        .await;
    let answer = "It is 22C and sunny in Paris.";
    let call =
        "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>";
    for stream in [true, false] {
        let (first, second) = if stream {
            let pieces = [
                "Let me check.\n<tool_",
                "call>\n{\"name\": \"get_weather\", ",
                "\"arguments\": {\"city\": \"Paris\"}}\n</tool_call>",
            ];
            let mut c: Vec<Value> = pieces.iter().map(|p| chunk(json!({"content": p}), None)).collect();
            c.push(chunk(json!({}), Some("stop")));
            let a = [
                chunk(json!({"role": "assistant", "content": "It is 22C "}), None),
                chunk(json!({"content": "and sunny in Paris."}), None),
                chunk(json!({}), Some("stop")),
            ];
            (sse(&c), sse(&a))
        } else {
            (
                ResponseTemplate::new(200)
                    .set_body_json(completion(json!({"role": "assistant", "content": call}), "stop")),
                ResponseTemplate::new(200)
                    .set_body_json(completion(json!({"role": "assistant", "content": answer}), "stop")),
            )
        };
        // Streamed mocks match `stream: true` first; the others take the rest.
        let (body, prio) =
            if stream { (json!({"model": "ploop", "stream": true}), 2) } else { (json!({"model": "ploop"}), 4) };
        Mock::given(method("POST"))
            .and(body_partial_json(body.clone()))
            .and(prompt_history_rewritten)
            .respond_with(second)
            .with_priority(prio)
            .mount(s)
            .await;
        Mock::given(method("POST"))
            .and(body_partial_json(body))
            .respond_with(first)
            .with_priority(prio + 1)
            .mount(s)
            .await;
    }
}

/// The scripted upstream: the request's model names the scenario.
async fn scenarios() -> MockServer {
    let s = MockServer::start().await;
    let usage = json!({"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2});
    // plain
    on(
        &s,
        "plain",
        None,
        ResponseTemplate::new(200)
            .set_body_json(completion(json!({"role": "assistant", "content": "Hello from upstream."}), "stop")),
    )
    .await;
    let mut last = json!({"id": "up-1", "object": "chat.completion.chunk", "created": 1, "model": "m", "choices": [], "usage": usage});
    last["usage"] = usage.clone();
    on(
        &s,
        "plain",
        Some(true),
        sse(&[
            chunk(json!({"role": "assistant", "content": "Hello "}), None),
            chunk(json!({"content": "from upstream."}), None),
            chunk(json!({}), Some("stop")),
            last,
        ]),
    )
    .await;
    // reasoning in <think>
    on(
        &s,
        "think",
        None,
        ResponseTemplate::new(200).set_body_json(completion(
            json!({"role": "assistant", "content": "<think>Paris in June.</think>\n\nIt is sunny."}),
            "stop",
        )),
    )
    .await;
    // native tool calls, Ollama style (no index, stop)
    let native_stream = [
        chunk(
            json!({"role": "assistant", "tool_calls": [{"id": "call_n1", "function": {"name": "get_weather", "arguments": "{\"city\": "}}]}),
            None,
        ),
        chunk(json!({"tool_calls": [{"function": {"arguments": "\"Paris\"}"}}]}), None),
        chunk(json!({}), Some("stop")),
    ];
    on(&s, "native", Some(true), sse(&native_stream)).await;
    on(
        &s,
        "native",
        None,
        ResponseTemplate::new(200).set_body_json(completion(
            json!({"role": "assistant",
        "tool_calls": [{"id": "call_n1", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]}),
            "stop",
        )),
    )
    .await;
    // tool call written in the text
    let text =
        "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>";
    on(
        &s,
        "text",
        None,
        ResponseTemplate::new(200).set_body_json(completion(json!({"role": "assistant", "content": text}), "stop")),
    )
    .await;
    let pieces = [
        "Let me check.\n<tool_",
        "call>\n{\"name\": \"get_weather\", ",
        "\"arguments\": {\"city\": \"Paris\"}}\n</tool_call>",
    ];
    let mut chunks: Vec<Value> = pieces.iter().map(|p| chunk(json!({"content": p}), None)).collect();
    chunks.push(chunk(json!({}), Some("stop")));
    on(&s, "text", Some(true), sse(&chunks)).await;
    // a two-turn tool loop: call (as text), then the answer once a tool result is in the history
    Mock::given(method("POST"))
        .and(body_partial_json(json!({"model": "loop"})))
        .and(has_tool_result)
        .respond_with(ResponseTemplate::new(200).set_body_json(completion(
            json!({"role": "assistant", "content": "It is 22C and sunny in Paris."}),
            "stop",
        )))
        .with_priority(1)
        .mount(&s)
        .await;
    on(
        &s,
        "loop",
        None,
        ResponseTemplate::new(200).set_body_json(completion(json!({"role": "assistant", "content": text}), "stop")),
    )
    .await;
    // errors
    for (model, status, body) in [
        ("err401", 401, json!({"error": {"message": "Incorrect API key provided", "type": "invalid_api_key"}})),
        ("err429", 429, json!({"error": {"code": "1302", "message": "rate limit reached"}})),
        ("err400", 400, json!({"code": 20015, "data": null, "message": "max_tokens is too large"})),
        ("err404", 404, json!({"error": {"message": "model not found", "code": "1211"}})),
        ("err500", 500, json!({"error": {"message": "internal error"}})),
    ] {
        on(&s, model, None, ResponseTemplate::new(status).set_body_json(body)).await;
    }
    let mid = format!(
        "data: {}\n\ndata: {}\n\n",
        chunk(json!({"content": "partial "}), None),
        json!({"error": {"message": "server overloaded, try later", "type": "server_error"}})
    );
    on(&s, "midfail", Some(true), ResponseTemplate::new(200).set_body_raw(mid, "text/event-stream")).await;
    prompt_scenario(&s).await;
    s
}

async fn start() -> (MockServer, Proxy) {
    let upstream = scenarios().await;
    let uri = format!("{}/v1", upstream.uri());
    let p = proxy_with("", &upstream.uri(), |c| {
        // The upstream fails on purpose, over and over: a breaker or proxy
        // retries would hide the very errors under test.
        c.upstream.breaker_failures = 0;
        c.upstream.retries = Some(0);
        for (name, mode) in [("t", ToolMode::Text), ("p", ToolMode::Prompt)] {
            c.providers.insert(
                name.into(),
                ProviderConfig {
                    profile: Some("testvendor".into()),
                    base_url: Some(uri.clone()),
                    tool_calls: Some(mode),
                    ..Default::default()
                },
            );
        }
    })
    .await;
    (upstream, p)
}

fn report(name: &str, out: Result<String, String>) {
    match out {
        Ok(text) => println!("{text}"),
        Err(text) => panic!("{name} conformance failed:\n{text}"),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn official_python_sdk() {
    let py = tokio::task::spawn_blocking(python_env).await.expect("python env");
    let (_upstream, p) = start().await;
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/sdk/conformance.py");
    let base = p.url("/v1");
    let out = tokio::task::spawn_blocking(move || run(Command::new(py).arg(script).env("MODELSHIM_BASE_URL", base)))
        .await
        .expect("join");
    report("python", out);
}

#[tokio::test(flavor = "multi_thread")]
async fn official_node_sdk() {
    let dir = tokio::task::spawn_blocking(node_env).await.expect("node env");
    let (_upstream, p) = start().await;
    let base = p.url("/v1");
    let out = tokio::task::spawn_blocking(move || {
        run(Command::new("node").arg("conformance.mjs").current_dir(dir).env("MODELSHIM_BASE_URL", base))
    })
    .await
    .expect("join");
    report("node", out);
}
