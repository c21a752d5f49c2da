//! One way to the upstream: a request answered by the hidden tool loop takes
//! the same path through the core as a plain one, so an alias's fallback
//! chain, the metrics and the spend hold for it on every front.

use std::sync::Arc;

use crate::common::*;
use modelshim::config::{Config, ModelAlias, ProviderConfig};
use serde_json::{Value, json};
use wiremock::matchers::method;
use wiremock::{Mock, MockServer, ResponseTemplate};

/// A good upstream's brain: "time?" makes it call the server tool
/// `current_time` first (so the loop runs), anything else is answered at once.
fn brain(req: &Value) -> Value {
    let msgs = req["messages"].as_array().cloned().unwrap_or_default();
    let result =
        msgs.iter().rev().find(|m| m["role"] == "tool").and_then(|m| m["content"].as_str().map(str::to_string));
    let asked = msgs.iter().rev().find(|m| m["role"] == "user").map(|m| m["content"].to_string()).unwrap_or_default();
    match result {
        Some(r) => say(&format!("from w, with the time: {}", r.contains("unix"))),
        None if asked.contains("time?") => json!({"content": "", "tool_calls": [
            {"id": "call_t1", "type": "function", "function": {"name": "current_time", "arguments": "{}"}}]}),
        None => say("from w"),
    }
}

struct Chain {
    bad: MockServer,
    _good: MockServer,
    log: Log,
    proxy: Proxy,
}

/// `smart` = [`v/m` (answers 500), `w/m2` (good)], with a server tool configured.
async fn chain_under_server_tools() -> Chain {
    let bad = MockServer::start().await;
    Mock::given(method("POST")).respond_with(ResponseTemplate::new(500)).mount(&bad).await;
    let good = MockServer::start().await;
    let log: Log = Arc::default();
    Mock::given(method("POST")).respond_with(Script { brain: Arc::new(brain), log: log.clone() }).mount(&good).await;
    let tools: Config = toml::from_str("[tools]\nbuiltin = [\"current_time\"]\n").unwrap();
    let good_url = format!("{}/v1", good.uri());
    let proxy = proxy_with("", &bad.uri(), |c| {
        c.upstream.retries = Some(0);
        c.tools = tools.tools;
        c.providers.insert(
            "w".into(),
            ProviderConfig { profile: Some("testvendor".into()), base_url: Some(good_url), ..Default::default() },
        );
        c.models.insert("smart".into(), ModelAlias::Chain(vec!["v/m".into(), "w/m2".into()]));
    })
    .await;
    Chain { bad, _good: good, log, proxy }
}

impl Chain {
    async fn post(&self, path: &str, body: Value) -> (u16, String) {
        let r = self.proxy.http.post(self.proxy.url(path)).json(&body).send().await.unwrap();
        (r.status().as_u16(), r.text().await.unwrap())
    }

    /// The good upstream was asked for `m2`, and the bad one was tried first.
    async fn fell_back(&self, what: &str) {
        let seen = self.log.lock().unwrap().clone();
        assert!(!seen.is_empty(), "{what}: the second target was never called");
        assert!(seen.iter().all(|r| r["model"] == "m2"), "{what}: {seen:?}");
        assert!(!self.bad.received_requests().await.unwrap().is_empty(), "{what}: the first target was not tried");
        self.log.lock().unwrap().clear();
    }
}

#[tokio::test]
async fn an_alias_chain_falls_back_under_server_tools_on_chat() {
    let c = chain_under_server_tools().await;
    for stream in [false, true] {
        for (q, want) in [("hi", "from w"), ("time?", "from w, with the time: true")] {
            let what = format!("chat, stream {stream}, {q}");
            let body = json!({"model": "smart", "stream": stream, "messages": [{"role": "user", "content": q}]});
            let (st, text) = c.post("/v1/chat/completions", body).await;
            assert_eq!(st, 200, "{what}: {text}");
            let content = if stream {
                assemble(&parse_sse(&text))["content"].clone()
            } else {
                serde_json::from_str::<Value>(&text).unwrap()["choices"][0]["message"]["content"].clone()
            };
            assert_eq!(content, want, "{what}");
            c.fell_back(&what).await;
        }
    }
}

#[tokio::test]
async fn an_alias_chain_falls_back_under_server_tools_on_messages() {
    let c = chain_under_server_tools().await;
    for stream in [false, true] {
        for (q, want) in [("hi", "from w"), ("time?", "from w, with the time: true")] {
            let what = format!("messages, stream {stream}, {q}");
            let body = json!({"model": "smart", "max_tokens": 64, "stream": stream,
                              "messages": [{"role": "user", "content": q}]});
            let (st, text) = c.post("/v1/messages", body).await;
            assert_eq!(st, 200, "{what}: {text}");
            let said: String = if stream {
                parse_sse(&text)
                    .iter()
                    .filter(|e| e["type"] == "content_block_delta")
                    .filter_map(|e| e["delta"]["text"].as_str())
                    .collect()
            } else {
                let v: Value = serde_json::from_str(&text).unwrap();
                v["content"].as_array().unwrap().iter().filter_map(|b| b["text"].as_str()).collect()
            };
            assert!(said.ends_with(want), "{what}: {said:?}");
            c.fell_back(&what).await;
        }
    }
}

#[tokio::test]
async fn an_alias_chain_falls_back_under_server_tools_on_responses() {
    let c = chain_under_server_tools().await;
    for stream in [false, true] {
        for (q, want) in [("hi", "from w"), ("time?", "from w, with the time: true")] {
            let what = format!("responses, stream {stream}, {q}");
            let (st, text) = c.post("/v1/responses", json!({"model": "smart", "stream": stream, "input": q})).await;
            assert_eq!(st, 200, "{what}: {text}");
            let said = if stream {
                let events = parse_sse(&text);
                let done = events
                    .iter()
                    .find(|e| e["type"] == "response.completed")
                    .unwrap_or_else(|| panic!("{what}: {text}"));
                done["response"]["output"].to_string()
            } else {
                serde_json::from_str::<Value>(&text).unwrap()["output"].to_string()
            };
            assert!(said.contains(want), "{what}: {said}");
            c.fell_back(&what).await;
        }
    }
}

async fn metrics(p: &Proxy) -> String {
    p.http.get(p.url("/metrics")).send().await.unwrap().text().await.unwrap()
}

/// Whether a series of `name` for `provider` has a non-zero sample.
fn counted(m: &str, name: &str, provider: &str) -> bool {
    m.lines().any(|l| {
        l.starts_with(&format!("{name}{{"))
            && l.contains(&format!("provider=\"{provider}\""))
            && l.rsplit(' ').next().and_then(|n| n.parse::<f64>().ok()).is_some_and(|n| n > 0.0)
    })
}

#[tokio::test]
async fn loop_requests_feed_time_to_first_token_and_tokens() {
    let up = MockServer::start().await;
    Mock::given(method("POST")).respond_with(Script { brain: Arc::new(brain), log: Arc::default() }).mount(&up).await;
    let tools: Config = toml::from_str("[tools]\nbuiltin = [\"current_time\"]\n").unwrap();
    let url = format!("{}/v1", up.uri());
    let p = proxy_with("", &up.uri(), |c| {
        c.tools = tools.tools;
        c.providers.insert(
            "looponly".into(),
            ProviderConfig {
                profile: Some("testvendor".into()),
                base_url: Some(url),
                models: Some(vec!["mm".into()]),
                ..Default::default()
            },
        );
    })
    .await;
    for stream in [false, true] {
        let body = json!({"model": "looponly/mm", "stream": stream, "stream_options": {"include_usage": true},
                          "messages": [{"role": "user", "content": "time?"}]});
        let r = p.http.post(p.url("/v1/chat/completions")).json(&body).send().await.unwrap();
        assert_eq!(r.status(), 200);
        r.text().await.unwrap();
    }
    let m = metrics(&p).await;
    assert!(counted(&m, "modelshim_time_to_first_token_seconds_count", "looponly"), "{m}");
    assert!(counted(&m, "modelshim_tokens_total", "looponly"), "{m}");
    // Two requests, so two first tokens: the loop's later iterations are none.
    let ttft = m
        .lines()
        .find(|l| l.starts_with("modelshim_time_to_first_token_seconds_count{") && l.contains("provider=\"looponly\""))
        .unwrap();
    assert!(ttft.ends_with(" 2"), "{ttft}");
}

#[tokio::test]
async fn the_demo_provider_feeds_the_token_series() {
    // As the README's tour runs it: the repository's skills loaded, so every
    // request takes the agent loop.
    let skills = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("skills");
    let s = serve_process(&format!("[skills]\ndirs = [{:?}]\n", skills.display().to_string()), &[]).await;
    for stream in [false, true] {
        let body = json!({"model": "demo/chat", "stream": stream, "messages": [{"role": "user", "content": "Hello!"}]});
        let r = s.proxy.http.post(s.proxy.url("/v1/chat/completions")).json(&body).send().await.unwrap();
        assert_eq!(r.status(), 200);
        r.text().await.unwrap();
    }
    let m = metrics(&s.proxy).await;
    assert!(counted(&m, "modelshim_tokens_total", "demo"), "{m}");
}
