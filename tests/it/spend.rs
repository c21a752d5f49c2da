//! Spend (docs/spend.md): the cost of each request from its usage, per-key
//! token and cost budgets checked before the upstream is called, a stream
//! the client cut still counted, and `GET /v1/usage`. Redis-shared budgets
//! are in tests/it/redis_shared.rs.

use crate::common;

use std::time::{Duration, Instant};

use common::*;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use wiremock::matchers::method;
use wiremock::{Mock, MockServer, ResponseTemplate};

/// DeepSeek-like prices of the test profile's models, per million tokens.
const PROFILE: &str = r#"
models = ["m"]
[prices."m*"]
input = 0.14
cached_input = 0.0028
output = 0.28
currency = "USD"
"#;

/// A DeepSeek answer: 1,000 prompt tokens of which 800 hit the cache, 500
/// completion tokens. By hand at the prices above: 200 × 0.14 + 800 ×
/// 0.0028 + 500 × 0.28 = 28 + 2.24 + 140 = 170.24 millionths of a dollar.
const HAND_COST: f64 = 0.000_170_24;

fn deepseek_usage() -> Value {
    json!({"prompt_tokens": 1000, "completion_tokens": 500, "total_tokens": 1500,
           "prompt_cache_hit_tokens": 800, "prompt_cache_miss_tokens": 200})
}

fn answer(usage: Value) -> Value {
    let mut c = completion(json!({"role": "assistant", "content": "ok"}), "stop");
    c["usage"] = usage;
    c
}

async fn upstream(body: Value) -> MockServer {
    let server = MockServer::start().await;
    Mock::given(method("POST")).respond_with(ResponseTemplate::new(200).set_body_json(body)).mount(&server).await;
    server
}

/// A proxy in front of `upstream` with one key `name` (secret `sk-{name}-key`)
/// and the `[auth]` table's extra lines.
async fn keyed(upstream: &str, name: &str, auth_extra: &str) -> Proxy {
    keyed_with(PROFILE, upstream, name, auth_extra).await
}

async fn keyed_with(profile: &str, upstream: &str, name: &str, auth_extra: &str) -> Proxy {
    let auth = format!("keys = [{{ key = \"sk-{name}-key\", name = \"{name}\" {auth_extra} }}]\n");
    let auth: modelshim::config::auth::AuthConfig = toml::from_str(&auth).unwrap();
    proxy_with(profile, upstream, move |c| c.auth = Some(auth)).await
}

async fn chat(p: &Proxy, name: &str, body: Value) -> (u16, Value, reqwest::header::HeaderMap) {
    let r = p.http.post(p.url("/v1/chat/completions")).bearer_auth(format!("sk-{name}-key")).json(&body).send().await;
    let r = r.unwrap();
    let (st, headers) = (r.status().as_u16(), r.headers().clone());
    let text = r.text().await.unwrap();
    (st, serde_json::from_str(&text).unwrap_or(Value::String(text)), headers)
}

async fn usage(p: &Proxy, name: &str) -> Value {
    let r = p.http.get(p.url("/v1/usage")).bearer_auth(format!("sk-{name}-key")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    r.json().await.unwrap()
}

/// `/v1/usage` until `done` holds (a spend is charged when the response's
/// body is dropped, which may be just after the client read its end).
async fn usage_until(p: &Proxy, name: &str, done: impl Fn(&Value) -> bool) -> Value {
    let t = Instant::now();
    loop {
        let u = usage(p, name).await;
        if done(&u) {
            return u;
        }
        assert!(t.elapsed() < Duration::from_secs(3), "usage never got there: {u}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// An upstream that answers every request with these chunks as SSE.
async fn sse_upstream(chunks: &[Value]) -> MockServer {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(200).set_body_raw(sse_body(chunks), "text/event-stream"))
        .mount(&server)
        .await;
    server
}

/// A streamed "hi" under key `name` to an upstream that answers `chunks`
/// with DeepSeek's usage somewhere in them: billed the hand-computed cost.
async fn streamed_at_hand_cost(chunks: &[Value], name: &str) -> (MockServer, Proxy) {
    let server = sse_upstream(chunks).await;
    let p = keyed(&server.uri(), name, "").await;
    let body = json!({"model": "v/m", "stream": true, "messages": [{"role": "user", "content": "hi"}]});
    let r = p.http.post(p.url("/v1/chat/completions")).bearer_auth(format!("sk-{name}-key")).json(&body);
    let r = r.send().await.unwrap();
    assert_eq!(r.status(), 200);
    let text = r.text().await.unwrap();
    assert!(text.contains("[DONE]"), "{text}");
    let u = usage_until(&p, name, |u| u["today"]["tokens"] == 1500).await;
    assert!(close(u["today"]["cost"].as_f64().unwrap(), HAND_COST), "{u}");
    (server, p)
}

fn hi() -> Value {
    json!({"model": "v/m", "messages": [{"role": "user", "content": "hi"}]})
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-12
}

#[tokio::test]
async fn a_deepseek_answer_with_cache_hits_costs_what_the_hand_computation_says() {
    let server = upstream(answer(deepseek_usage())).await;
    let p = keyed(&server.uri(), "cachehit", "").await;
    let (st, body, _) = chat(&p, "cachehit", hi()).await;
    assert_eq!(st, 200, "{body}");
    assert_eq!(body["usage"]["prompt_tokens_details"]["cached_tokens"], 800);
    let u = usage_until(&p, "cachehit", |u| u["today"]["tokens"] == 1500).await;
    assert!(close(u["today"]["cost"].as_f64().unwrap(), HAND_COST), "{u}");
    assert!(close(u["month"]["cost"].as_f64().unwrap(), HAND_COST), "{u}");
    assert_eq!(u["currency"], "USD");
    assert_eq!(u["budgets"], json!({}), "no budgets: none listed");

    // Streamed, usage in the last chunk: the same cost again.
    let chunks = vec![
        chunk(json!({"role": "assistant", "content": "o"}), None),
        chunk(json!({"content": "k"}), Some("stop")),
        json!({"id": "up-1", "object": "chat.completion.chunk", "created": 1, "model": "m", "choices": [],
               "usage": deepseek_usage()}),
    ];
    let (sse, p) = streamed_at_hand_cost(&chunks, "cachehit-sse").await;
    // The upstream was asked for usage though the client did not ask.
    let sent: Value = serde_json::from_slice(&sse.received_requests().await.unwrap()[0].body).unwrap();
    assert_eq!(sent["stream_options"]["include_usage"], true, "{sent}");

    // Kimi puts the usage in the last chunk's choice (fixtures/moonshot/chat_stream.json):
    // billed the same, not estimated.
    let mut last = chunk(json!({}), Some("stop"));
    last["choices"][0]["usage"] = deepseek_usage();
    let chunks = vec![chunk(json!({"role": "assistant", "content": "ok"}), None), last];
    streamed_at_hand_cost(&chunks, "in-choice").await;

    // Prometheus: tokens and cost by key, provider and model.
    let m = p.http.get(p.url("/metrics")).send().await.unwrap().text().await.unwrap();
    assert!(
        m.contains(r#"modelshim_cost_nanos_total{key="cachehit",provider="v",model="m",currency="USD"} 170240"#),
        "{m}"
    );
    assert!(
        m.contains(r#"modelshim_key_tokens_total{key="cachehit-sse",provider="v",model="m",kind="cached_input"} 800"#)
    );
}

#[tokio::test]
async fn the_config_overrides_the_profile_price() {
    let server =
        upstream(answer(json!({"prompt_tokens": 1_000_000, "completion_tokens": 0, "total_tokens": 1_000_000}))).await;
    let auth: modelshim::config::auth::AuthConfig =
        toml::from_str("keys = [{ key = \"sk-override-key\", name = \"override\" }]").unwrap();
    let over: modelshim::config::Config =
        toml::from_str("[providers.v.prices.\"m\"]\ninput = 3.0\noutput = 4.0\n").unwrap();
    let p = proxy_with(PROFILE, &server.uri(), move |c| {
        c.auth = Some(auth);
        c.providers.get_mut("v").unwrap().prices = over.providers["v"].prices.clone();
    })
    .await;
    assert_eq!(chat(&p, "override", hi()).await.0, 200);
    let u = usage_until(&p, "override", |u| u["today"]["tokens"] == 1_000_000).await;
    assert!(close(u["today"]["cost"].as_f64().unwrap(), 3.0), "{u}");
}

#[tokio::test]
async fn a_key_over_its_token_budget_gets_429_on_the_next_request() {
    let server = upstream(answer(deepseek_usage())).await;
    let p = keyed(&server.uri(), "tight", ", tokens_per_day = 1000, cost_per_month = 5.0").await;
    // Under budget: served, and it uses 1,500 tokens of 1,000.
    assert_eq!(chat(&p, "tight", hi()).await.0, 200);
    usage_until(&p, "tight", |u| u["today"]["tokens"] == 1500).await;
    let (st, body, headers) = chat(&p, "tight", hi()).await;
    assert_eq!(st, 429, "{body}");
    assert_eq!(body["error"]["type"], "insufficient_quota", "{body}");
    assert_eq!(body["error"]["code"], "insufficient_quota", "{body}");
    let msg = body["error"]["message"].as_str().unwrap();
    let u = usage(&p, "tight").await;
    let resets = u["budgets"]["tokens_per_day"]["resets_at"].as_str().unwrap();
    assert!(resets.ends_with("T00:00:00Z"), "{u}");
    assert!(msg.contains("tokens_per_day") && msg.contains(resets), "says which budget and when it resets: {msg}");
    let retry: u64 = headers["retry-after"].to_str().unwrap().parse().unwrap();
    assert!((1..=86_400).contains(&retry), "{retry}");
    assert_eq!(server.received_requests().await.unwrap().len(), 1, "refused before the upstream");
    // /v1/usage: each budget with limit, used, remaining, resets_at.
    assert_eq!(u["budgets"]["tokens_per_day"]["limit"], 1000.0);
    assert_eq!(u["budgets"]["tokens_per_day"]["used"], 1500.0);
    assert_eq!(u["budgets"]["tokens_per_day"]["remaining"], 0.0);
    let month = &u["budgets"]["cost_per_month"];
    assert!(close(month["remaining"].as_f64().unwrap(), 5.0 - HAND_COST), "{u}");
    assert!(month["resets_at"].as_str().unwrap().ends_with("-01T00:00:00Z"), "{u}");

    // The Anthropic front gets the refusal in Anthropic's shape.
    let r = p
        .http
        .post(p.url("/v1/messages"))
        .header("x-api-key", "sk-tight-key")
        .json(&json!({"model": "v/m", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 429);
    let b: Value = r.json().await.unwrap();
    assert_eq!(b["type"], "error", "{b}");
    assert_eq!(b["error"]["type"], "rate_limit_error", "{b}");
    assert!(b["error"]["message"].as_str().unwrap().contains(resets), "{b}");
}

#[tokio::test]
async fn default_budgets_under_auth_apply_to_every_key() {
    let server = upstream(answer(deepseek_usage())).await;
    let auth: modelshim::config::auth::AuthConfig = toml::from_str(
        "cost_per_day = 0.0001\nkeys = [{ key = \"sk-dflt-a-key\", name = \"dflt-a\" }, \
         { key = \"sk-dflt-b-key\", name = \"dflt-b\", cost_per_day = 1.0 }]",
    )
    .unwrap();
    let p = proxy_with(PROFILE, &server.uri(), move |c| c.auth = Some(auth)).await;
    for name in ["dflt-a", "dflt-b"] {
        assert_eq!(chat(&p, name, hi()).await.0, 200);
        usage_until(&p, name, |u| u["today"]["tokens"] == 1500).await;
    }
    // 0.00017 used of the default 0.0001: refused; b's own 1.0 is not used up.
    let (st, body, _) = chat(&p, "dflt-a", hi()).await;
    assert_eq!(st, 429, "{body}");
    assert!(body["error"]["message"].as_str().unwrap().contains("cost_per_day"), "{body}");
    assert_eq!(chat(&p, "dflt-b", hi()).await.0, 200);
}

/// An upstream on a raw socket that streams a content chunk every 20 ms
/// (with a growing usage when `with_usage`) for up to 5 s and never ends
/// on its own first.
async fn endless_stream(with_usage: bool) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut sock, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut buf = vec![0u8; 65536];
                let mut got = Vec::new();
                // Headers and the body (its Content-Length).
                loop {
                    let Ok(n) = sock.read(&mut buf).await else { return };
                    if n == 0 {
                        return;
                    }
                    got.extend_from_slice(&buf[..n]);
                    let text = String::from_utf8_lossy(&got).to_string();
                    if let Some(end) = text.find("\r\n\r\n") {
                        let len = text[..end]
                            .lines()
                            .find_map(|l| {
                                l.to_ascii_lowercase().strip_prefix("content-length:").map(|v| v.trim().to_string())
                            })
                            .and_then(|v| v.parse::<usize>().ok())
                            .unwrap_or(0);
                        if got.len() >= end + 4 + len {
                            break;
                        }
                    }
                }
                let head = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n";
                if sock.write_all(head.as_bytes()).await.is_err() {
                    return;
                }
                for i in 1..=250u64 {
                    let mut c = chunk(json!({"content": "word "}), None);
                    if with_usage {
                        c["usage"] = json!({"prompt_tokens": 100, "completion_tokens": i, "total_tokens": 100 + i});
                    }
                    if sock.write_all(format!("data: {c}\n\n").as_bytes()).await.is_err() {
                        return;
                    }
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            });
        }
    });
    format!("http://{addr}")
}

/// Reads a streamed answer until `events` data events came, then hangs up.
async fn read_then_hang_up(p: &Proxy, name: &str, events: usize) {
    use futures_util::StreamExt;
    let body = json!({"model": "v/m", "stream": true, "messages": [{"role": "user", "content": "hi"}]});
    let r = p.http.post(p.url("/v1/chat/completions")).bearer_auth(format!("sk-{name}-key")).json(&body).send();
    let r = r.await.unwrap();
    assert_eq!(r.status(), 200);
    let mut stream = r.bytes_stream();
    let mut seen = String::new();
    let t = Instant::now();
    while seen.matches("data:").count() < events {
        assert!(t.elapsed() < Duration::from_secs(3), "the stream did not start: {seen}");
        let piece = tokio::time::timeout(Duration::from_secs(3), stream.next()).await.unwrap().unwrap().unwrap();
        seen.push_str(&String::from_utf8_lossy(&piece));
    }
    drop(stream);
}

#[tokio::test]
async fn a_stream_cut_off_by_the_client_is_still_counted() {
    // Usage in every chunk (growing): what was used so far, by the last.
    let up = endless_stream(true).await;
    let p = keyed(&up, "cut", "").await;
    read_then_hang_up(&p, "cut", 5).await;
    let u = usage_until(&p, "cut", |u| u["today"]["tokens"].as_u64().unwrap_or(0) > 0).await;
    let tokens = u["today"]["tokens"].as_u64().unwrap();
    assert!((105..250 + 100).contains(&tokens), "100 prompt tokens and the completion so far: {u}");
    assert!(u["today"]["cost"].as_f64().unwrap() > 0.0, "{u}");

    // No usage at all before the cut: estimated (a quarter of the request's
    // bytes in, a token per event out).
    let up = endless_stream(false).await;
    let p = keyed(&up, "cut-estimated", "").await;
    read_then_hang_up(&p, "cut-estimated", 5).await;
    let u = usage_until(&p, "cut-estimated", |u| u["today"]["tokens"].as_u64().unwrap_or(0) > 0).await;
    assert!(u["today"]["tokens"].as_u64().unwrap() >= 5, "{u}");
}

#[tokio::test]
async fn usage_without_auth_counts_the_anonymous_caller() {
    let server = upstream(answer(deepseek_usage())).await;
    let p = proxy(PROFILE, &server.uri()).await;
    assert_eq!(p.chat(hi()).await.0, 200);
    let t = Instant::now();
    loop {
        let u: Value = p.http.get(p.url("/v1/usage")).send().await.unwrap().json().await.unwrap();
        if u["today"]["tokens"] == 1500 {
            assert_eq!(u["key"], "anonymous");
            break;
        }
        assert!(t.elapsed() < Duration::from_secs(3), "{u}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[test]
fn bundled_prices_name_their_source_and_date() {
    let profiles = modelshim::provider::load_profiles(None).unwrap();
    let mut priced = 0;
    for (id, p) in &profiles {
        for (glob, price) in &p.prices {
            priced += 1;
            let src = price.source.as_deref().unwrap_or_default();
            assert!(src.starts_with("https://"), "{id} {glob}: a source URL");
            assert!(price.as_of.as_deref().is_some_and(|d| d.len() == 10), "{id} {glob}: a date");
        }
    }
    assert!(priced > 0);
    let ds = &profiles["deepseek"].prices;
    assert!(ds.keys().any(|g| globset::Glob::new(g).unwrap().compile_matcher().is_match("deepseek-v4-flash")));
}

/// Answers a server tool call first (`current_time`), then text once the
/// result is in; every answer reports 1,000 + 500 tokens with 800 cache hits.
struct LoopBrain;

impl wiremock::Respond for LoopBrain {
    fn respond(&self, r: &wiremock::Request) -> ResponseTemplate {
        let body: Value = serde_json::from_slice(&r.body).unwrap();
        let has_result = body["messages"].as_array().unwrap().iter().any(|m| m["role"] == "tool");
        let msg = if has_result {
            json!({"role": "assistant", "content": "It is late."})
        } else {
            json!({"role": "assistant", "content": null, "tool_calls": [{"id": "call_t1", "type": "function",
                "function": {"name": "current_time", "arguments": "{}"}}]})
        };
        let mut c = completion(msg, if has_result { "stop" } else { "tool_calls" });
        c["usage"] = deepseek_usage();
        ResponseTemplate::new(200).set_body_json(c)
    }
}

#[tokio::test]
async fn every_hidden_agent_loop_iteration_is_counted() {
    let server = MockServer::start().await;
    Mock::given(method("POST")).respond_with(LoopBrain).mount(&server).await;
    let auth: modelshim::config::auth::AuthConfig =
        toml::from_str("keys = [{ key = \"sk-looped-key\", name = \"looped\" }]").unwrap();
    let tools: modelshim::config::Config = toml::from_str("[tools]\nbuiltin = [\"current_time\"]\n").unwrap();
    let p = proxy_with(PROFILE, &server.uri(), move |c| {
        c.auth = Some(auth);
        c.tools = tools.tools;
    })
    .await;
    let (st, body, _) =
        chat(&p, "looped", json!({"model": "v/m", "messages": [{"role": "user", "content": "time?"}]})).await;
    assert_eq!(st, 200, "{body}");
    assert_eq!(body["choices"][0]["message"]["content"], "It is late.");
    assert_eq!(server.received_requests().await.unwrap().len(), 2, "one hidden iteration, then the answer");
    let u = usage_until(&p, "looped", |u| u["today"]["tokens"] == 3000).await;
    assert!(close(u["today"]["cost"].as_f64().unwrap(), 2.0 * HAND_COST), "{u}");
}
