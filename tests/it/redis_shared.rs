//! Two replicas sharing nothing but a real redis-server: state written
//! through replica A's store is read by replica B, both keep serving, a
//! key's token budget is one across replicas (spend), and a Redis that goes
//! away leaves them degraded but serving (spend counted locally, pushed
//! once it is back).
//!
//! Needs the `redis-server` binary (Debian: `apt-get install redis-server`;
//! `.ci/run` installs it) and fails with that message when it is missing.

use crate::common;
use crate::support::redis::{start_redis, start_redis_on};

use std::process::Command;
use std::time::{Duration, Instant};

use common::*;
use modelshim::state::{StateError, ns};
use serde_json::json;
use wiremock::matchers::method;
use wiremock::{Mock, MockServer, ResponseTemplate};

/// Tests whose replicas run in this process take turns: the Redis gauge
/// (`modelshim_state_backend_up`) is one per process, and one test's dead
/// Redis must not be read while another's is up.
static IN_PROCESS: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

async fn replica(upstream: &str, redis_port: u16) -> (Proxy, modelshim::server::Shared) {
    replica_with(upstream, redis_port, "", "").await
}

#[tokio::test]
async fn replicas_share_state_through_redis() {
    let _gauge = IN_PROCESS.lock().await;
    let mut redis = start_redis();
    let server = MockServer::start().await;
    let body = completion(json!({"role": "assistant", "content": "ok"}), "stop");
    Mock::given(method("POST")).respond_with(ResponseTemplate::new(200).set_body_json(body)).mount(&server).await;
    let (a, state_a) = replica(&server.uri(), redis.port).await;
    let (b, state_b) = replica(&server.uri(), redis.port).await;
    assert_eq!(state_a.store.kind(), "redis");

    // What replica A remembers about a conversation, replica B knows.
    let turn = json!({"reasoning_content": "thinking about Paris", "tool_call_ids": ["call_1"]});
    state_a.store.put(ns::REASONING, "conv-1:turn-3", turn.clone(), Duration::from_secs(60)).await.unwrap();
    assert_eq!(state_b.store.get(ns::REASONING, "conv-1:turn-3").await.unwrap(), Some(turn));
    assert_eq!(state_b.store.get(ns::SPLICE, "conv-1:turn-3").await.unwrap(), None, "namespaces are apart");
    state_b.store.put(ns::SPLICE, "k", json!([1, 2]), Duration::from_millis(200)).await.unwrap();
    assert_eq!(state_a.store.get(ns::SPLICE, "k").await.unwrap(), Some(json!([1, 2])));
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(state_a.store.get(ns::SPLICE, "k").await.unwrap(), None, "TTL is Redis's");

    // Both serve.
    assert_eq!(a.chat(json!({"model": "v/m", "messages": [{"role": "user", "content": "hi"}]})).await.0, 200);
    assert_eq!(b.chat(json!({"model": "v/m", "messages": [{"role": "user", "content": "hi"}]})).await.0, 200);

    // Redis goes away: operations fail fast, requests are still served, the
    // gauge says so.
    let _ = redis.child.kill();
    let _ = redis.child.wait();
    let t = Instant::now();
    let e = state_a.store.get(ns::REASONING, "conv-1:turn-3").await.unwrap_err();
    assert!(matches!(e, StateError::Unavailable(_)), "{e}");
    assert!(t.elapsed() < Duration::from_secs(3), "a dead Redis costs at most the op timeout: {:?}", t.elapsed());
    assert_eq!(a.chat(json!({"model": "v/m", "messages": [{"role": "user", "content": "hi"}]})).await.0, 200);
    let m = a.http.get(a.url("/metrics")).send().await.unwrap().text().await.unwrap();
    assert!(m.contains("modelshim_state_backend_up{backend=\"redis\"} 0"), "{m}");
    assert!(m.contains("modelshim_state_errors_total{backend=\"redis\",op=\"get\"}"), "{m}");
}

/// Issue 25, item 17: the first write after Redis restarted used to fail on
/// the dead connection and be dropped (a `store: true` response then 404 on
/// every replica). It is retried on the new connection and lands.
#[tokio::test]
async fn the_first_write_after_a_redis_restart_lands() {
    let _gauge = IN_PROCESS.lock().await;
    let mut redis = start_redis();
    let port = redis.port;
    let server = MockServer::start().await;
    let (_a, state_a) = replica(&server.uri(), port).await;
    let (_b, state_b) = replica(&server.uri(), port).await;
    state_a.store.put(ns::SPLICE, "before", json!(1), Duration::from_secs(60)).await.unwrap();
    let _ = redis.child.kill();
    let _ = redis.child.wait();
    let _restarted = start_redis_on(port);
    state_a.store.put(ns::RESPONSES, "resp_1", json!({"ok": true}), Duration::from_secs(60)).await.unwrap();
    assert_eq!(state_b.store.get(ns::RESPONSES, "resp_1").await.unwrap(), Some(json!({"ok": true})));
    assert_eq!(state_a.store.get(ns::RESPONSES, "resp_1").await.unwrap(), Some(json!({"ok": true})));
}

/// A replica with a given profile and tools config, sharing `redis_port`.
async fn replica_with(
    upstream: &str,
    redis_port: u16,
    profile_extra: &str,
    config_extra: &str,
) -> (Proxy, modelshim::server::Shared) {
    let text = format!("name = \"test vendor\"\nbase_url = \"http://unused\"\n{profile_extra}");
    let mut profiles = std::collections::BTreeMap::new();
    profiles.insert("testvendor".to_string(), modelshim::provider::Profile::parse("testvendor", &text).unwrap());
    let mut config: modelshim::config::Config = toml::from_str(config_extra).unwrap();
    config.providers.insert(
        "v".into(),
        modelshim::config::ProviderConfig {
            profile: Some("testvendor".into()),
            base_url: Some(format!("{upstream}/v1")),
            ..Default::default()
        },
    );
    config.state.redis_url = Some(format!("redis://127.0.0.1:{redis_port}/"));
    let state = modelshim::server::AppState::new(&config, &profiles).unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let app = modelshim::server::app(state.clone());
    tokio::spawn(async move { axum::serve(listener, app).await });
    (Proxy { addr, http: reqwest::Client::new() }, state)
}

/// A scripted upstream: `brain` answers each request body with a message.
struct Script {
    brain: fn(&serde_json::Value) -> ResponseTemplate,
    log: std::sync::Arc<std::sync::Mutex<Vec<serde_json::Value>>>,
}

impl wiremock::Respond for Script {
    fn respond(&self, r: &wiremock::Request) -> ResponseTemplate {
        let body: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
        self.log.lock().unwrap().push(body.clone());
        (self.brain)(&body)
    }
}

async fn scripted(
    brain: fn(&serde_json::Value) -> ResponseTemplate,
) -> (MockServer, std::sync::Arc<std::sync::Mutex<Vec<serde_json::Value>>>) {
    let server = MockServer::start().await;
    let log = std::sync::Arc::default();
    Mock::given(method("POST")).respond_with(Script { brain, log: std::sync::Arc::clone(&log) }).mount(&server).await;
    (server, log)
}

fn has_tool_result(body: &serde_json::Value) -> bool {
    body["messages"].as_array().unwrap().iter().any(|m| m["role"] == "tool")
}

fn weather_tools() -> serde_json::Value {
    json!([{"type": "function", "function": {"name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}])
}

/// Issue #10: reasoning captured by replica A is restored by replica B for a
/// DeepSeek-like upstream that rejects a tool-call turn without it.
#[tokio::test]
async fn reasoning_captured_by_one_replica_is_restored_by_the_other() {
    let _gauge = IN_PROCESS.lock().await;
    let _redis = start_redis();
    let port = _redis.port;
    let (server, _log) = scripted(|body| {
        if !has_tool_result(body) {
            let msg = json!({"role": "assistant", "content": null, "reasoning_content": "R-one: ask the tool for Paris.",
                "tool_calls": [{"id": "call_r1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}}]});
            return ResponseTemplate::new(200).set_body_json(completion(msg, "tool_calls"));
        }
        let turn = body["messages"].as_array().unwrap().iter().find(|m| m["role"] == "assistant").unwrap();
        if turn["reasoning_content"] != "R-one: ask the tool for Paris." {
            return ResponseTemplate::new(400).set_body_json(json!({"error": {"message":
                "Missing `reasoning_content` field in the assistant message at message index 1", "type": "invalid_request_error"}}));
        }
        ResponseTemplate::new(200).set_body_json(completion(json!({"role": "assistant", "content": "Paris: 22C."}), "stop"))
    })
    .await;
    let profile = "[thinking]\nreasoning_replay = \"required\"\n";
    let a = replica_with(&server.uri(), port, profile, "").await.0;
    let b = replica_with(&server.uri(), port, profile, "").await.0;
    let q = json!({"role": "user", "content": "Weather in Paris?"});
    let (st, first) = a.chat(json!({"model": "v/m", "messages": [q], "tools": weather_tools()})).await;
    assert_eq!(st, 200, "{first}");
    let call = &first["choices"][0]["message"]["tool_calls"][0];
    assert_eq!(call["id"], "call_r1");
    // The client drops reasoning_content when it rebuilds the history.
    let history = json!([q, {"role": "assistant", "content": null, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call_r1", "content": "22C"}]);
    let (st, second) = b.chat(json!({"model": "v/m", "messages": history, "tools": weather_tools()})).await;
    assert_eq!(st, 200, "replica B did not restore A's reasoning: {second}");
    assert_eq!(second["choices"][0]["message"]["content"], "Paris: 22C.");
}

/// Issue #8: a mixed server/client tool turn served by replica A is
/// continued by replica B, which splices A's hidden server call back in.
#[tokio::test]
async fn mixed_tool_turn_served_by_one_replica_is_continued_by_the_other() {
    let _gauge = IN_PROCESS.lock().await;
    let _redis = start_redis();
    let port = _redis.port;
    let (server, log) = scripted(mixed_turn_brain).await;
    let tools = "[tools]\nbuiltin = [\"current_time\"]\n";
    let a = replica_with(&server.uri(), port, "", tools).await.0;
    let b = replica_with(&server.uri(), port, "", tools).await.0;
    mixed_turn_a_then_b(&a, &b, &log).await;
}

/// The upstream of the mixed-turn tests: one server call (`current_time`)
/// and one client call (`get_weather`), then an answer once results are in;
/// a plain "hi" gets a plain answer.
fn mixed_turn_brain(body: &serde_json::Value) -> ResponseTemplate {
    let msg = if body["messages"][0]["content"] == "hi" {
        json!({"role": "assistant", "content": "hello"})
    } else if has_tool_result(body) {
        json!({"role": "assistant", "content": "Sunny, and I know the time."})
    } else {
        json!({"role": "assistant", "content": "Checking.", "tool_calls": [
            {"id": "call_s1", "type": "function", "function": {"name": "current_time", "arguments": "{}"}},
            {"id": "call_c1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}}]})
    };
    ResponseTemplate::new(200).set_body_json(completion(msg, "tool_calls"))
}

/// A mixed server/client turn served by `a`, continued by `b`: the client
/// sees only its own call, and `b` splices `a`'s hidden server call back in.
async fn mixed_turn_a_then_b(a: &Proxy, b: &Proxy, log: &std::sync::Arc<std::sync::Mutex<Vec<serde_json::Value>>>) {
    let q = json!({"role": "user", "content": "weather and time?"});
    let (st, first) = a.chat(json!({"model": "v/m", "messages": [q], "tools": weather_tools()})).await;
    assert_eq!(st, 200, "{first}");
    let calls = first["choices"][0]["message"]["tool_calls"].as_array().unwrap();
    assert_eq!(calls.len(), 1, "only the client's call reaches the client: {first}");
    assert_eq!(calls[0]["id"], "call_c1");
    log.lock().unwrap().clear();
    let history = json!([q, {"role": "assistant", "content": "Checking.", "tool_calls": [calls[0]]},
        {"role": "tool", "tool_call_id": "call_c1", "content": "sunny"}]);
    let (st, second) = b.chat(json!({"model": "v/m", "messages": history, "tools": weather_tools()})).await;
    assert_eq!(st, 200, "{second}");
    assert_eq!(second["choices"][0]["message"]["content"], "Sunny, and I know the time.");
    let seen = log.lock().unwrap().clone();
    assert_eq!(seen.len(), 1);
    let m = seen[0]["messages"].as_array().unwrap();
    let roles: Vec<&str> = m.iter().map(|m| m["role"].as_str().unwrap()).collect();
    assert_eq!(roles, ["user", "assistant", "tool", "tool"], "B spliced A's hidden exchange: {}", seen[0]);
    let ids: Vec<&str> = m[1]["tool_calls"].as_array().unwrap().iter().map(|c| c["id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["call_s1", "call_c1"]);
    assert_eq!(m[2]["tool_call_id"], "call_s1");
    assert_eq!(m[3]["tool_call_id"], "call_c1");
}

/// A client of `p` that sends `key` as its bearer token.
fn with_key(p: &Proxy, key: &str) -> Proxy {
    let mut h = reqwest::header::HeaderMap::new();
    h.insert(reqwest::header::AUTHORIZATION, format!("Bearer {key}").parse().unwrap());
    Proxy { addr: p.addr, http: reqwest::Client::builder().default_headers(h).build().unwrap() }
}

/// Issue #8 acceptance: two `modelshim` OS processes (the real binary, each
/// with its own config file) share one redis-server. A mixed server/client
/// tool turn served by process A is continued by process B, and a key's
/// rate budget is one budget across both.
#[tokio::test]
async fn two_processes_share_conversations_and_rate_budgets_through_redis() {
    let redis = start_redis();
    let (server, log) = scripted(mixed_turn_brain).await;
    let config = format!(
        r#"
[providers.v]
profile = "openai"
base_url = "{}/v1"
api_key_env = "TEST_UPSTREAM_KEY"

[tools]
builtin = ["current_time"]

[auth]
keys = ["sk-unlimited-test-key", {{ key = "sk-limited-test-key", name = "limited", requests_per_minute = 3 }}]

[state]
redis_url = "redis://127.0.0.1:{}/"
"#,
        server.uri(),
        redis.port
    );
    let env = [("TEST_UPSTREAM_KEY", "sk-upstream")];
    let proc_a = common::serve_process(&config, &env).await;
    let proc_b = common::serve_process(&config, &env).await;
    assert_ne!(proc_a.child.id(), proc_b.child.id());
    let a = with_key(&proc_a.proxy, "sk-unlimited-test-key");
    let b = with_key(&proc_b.proxy, "sk-unlimited-test-key");
    mixed_turn_a_then_b(&a, &b, &log).await;

    // One budget of 3 requests a minute across both processes.
    let (la, lb) = (with_key(&proc_a.proxy, "sk-limited-test-key"), with_key(&proc_b.proxy, "sk-limited-test-key"));
    let hi = json!({"model": "v/m", "messages": [{"role": "user", "content": "hi"}]});
    let mut statuses = Vec::new();
    for p in [&la, &lb, &la, &lb] {
        statuses.push(p.chat(hi.clone()).await.0);
    }
    assert_eq!(statuses, [200, 200, 200, 429], "the 4th request, on either process, is over the shared budget");
}

#[tokio::test]
async fn a_stored_response_is_continued_and_read_on_the_other_replica() {
    let _gauge = IN_PROCESS.lock().await;
    let mut redis = start_redis();
    let server = MockServer::start().await;
    let body = completion(json!({"role": "assistant", "content": "ok"}), "stop");
    Mock::given(method("POST")).respond_with(ResponseTemplate::new(200).set_body_json(body)).mount(&server).await;
    let (a, _) = replica(&server.uri(), redis.port).await;
    let (b, _) = replica(&server.uri(), redis.port).await;
    let post = |p: &Proxy, body: serde_json::Value| {
        let req = p.http.post(p.url("/v1/responses")).json(&body);
        async move {
            let r = req.send().await.unwrap();
            (r.status().as_u16(), r.json::<serde_json::Value>().await.unwrap())
        }
    };
    let (st, r1) = post(&a, json!({"model": "v/m", "input": "first"})).await;
    assert_eq!(st, 200, "{r1}");
    let (st, r2) = post(&b, json!({"model": "v/m", "input": "second", "previous_response_id": r1["id"]})).await;
    assert_eq!(st, 200, "{r2}");
    let reqs = server.received_requests().await.unwrap();
    let second: serde_json::Value = serde_json::from_slice(&reqs[1].body).unwrap();
    assert_eq!(
        second["messages"],
        json!([{"role": "user", "content": "first"}, {"role": "assistant", "content": "ok"}, {"role": "user", "content": "second"}])
    );
    let got = a.http.get(a.url(&format!("/v1/responses/{}", r2["id"].as_str().unwrap()))).send().await.unwrap();
    assert_eq!(got.status().as_u16(), 200);
    assert_eq!(got.json::<serde_json::Value>().await.unwrap(), r2);
    // Deleted on one replica, gone on the other.
    let r1_url = |p: &Proxy| p.url(&format!("/v1/responses/{}", r1["id"].as_str().unwrap()));
    assert_eq!(b.http.delete(r1_url(&b)).send().await.unwrap().status().as_u16(), 200);
    assert_eq!(a.http.get(r1_url(&a)).send().await.unwrap().status().as_u16(), 404);

    // Without Redis a conversation cannot be continued: 503, not a 404 that
    // would tell the client its response is gone.
    let _ = redis.child.kill();
    let _ = redis.child.wait();
    let (st, e) = post(&b, json!({"model": "v/m", "input": "third", "previous_response_id": r2["id"]})).await;
    assert_eq!(st, 503, "{e}");
    // A new conversation is still served (and simply not stored).
    let (st, _) = post(&b, json!({"model": "v/m", "input": "fresh"})).await;
    assert_eq!(st, 200);
}

/// Spend (issue 33): a `modelshim serve` process with one key `alice`
/// (`tokens_per_day = 50`) in front of `upstream`, sharing `redis_port`.
async fn spend_process(upstream: &str, redis_port: u16) -> ServeProcess {
    let config = format!(
        r#"
[providers.v]
base_url = "{upstream}/v1"
models = ["m"]
[providers.v.prices."m"]
input = 1.0
output = 2.0
[auth]
keys = [{{ key = "sk-alice-shared", name = "alice", tokens_per_day = 50 }}]
[state]
redis_url = "redis://127.0.0.1:{redis_port}/"
"#
    );
    serve_process(&config, &[]).await
}

async fn spend_chat(p: &Proxy) -> (u16, serde_json::Value) {
    let body = json!({"model": "v/m", "messages": [{"role": "user", "content": "hi"}]});
    let r = p.http.post(p.url("/v1/chat/completions")).bearer_auth("sk-alice-shared").json(&body).send().await.unwrap();
    let st = r.status().as_u16();
    (st, r.json().await.unwrap_or_default())
}

async fn spend_usage(p: &Proxy) -> serde_json::Value {
    let r = p.http.get(p.url("/v1/usage")).bearer_auth("sk-alice-shared").send().await.unwrap();
    assert_eq!(r.status(), 200);
    r.json().await.unwrap()
}

/// `/v1/usage` of `p` until today's tokens are `n` (a charge is pushed to
/// Redis just after the response).
async fn tokens_become(p: &Proxy, n: u64) -> serde_json::Value {
    let t = Instant::now();
    loop {
        let u = spend_usage(p).await;
        if u["today"]["tokens"] == n {
            return u;
        }
        assert!(t.elapsed() < Duration::from_secs(5), "today's tokens never became {n}: {u}");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

fn thirty_tokens() -> serde_json::Value {
    let mut c = completion(json!({"role": "assistant", "content": "ok"}), "stop");
    c["usage"] = json!({"prompt_tokens": 20, "completion_tokens": 10, "total_tokens": 30});
    c
}

#[tokio::test]
async fn two_processes_sharing_redis_enforce_one_budget() {
    let redis = start_redis();
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(200).set_body_json(thirty_tokens()))
        .mount(&server)
        .await;
    let a = spend_process(&server.uri(), redis.port).await;
    let b = spend_process(&server.uri(), redis.port).await;
    // 30 tokens through A; B sees them.
    assert_eq!(spend_chat(&a.proxy).await.0, 200);
    tokens_become(&b.proxy, 30).await;
    // 30 of 50 used: B still serves, and then 60 are used.
    assert_eq!(spend_chat(&b.proxy).await.0, 200);
    let u = tokens_become(&a.proxy, 60).await;
    // Twice 20 input tokens at $1 and 10 output tokens at $2 per million.
    let cost = 2.0 * (20.0 * 1.0 + 10.0 * 2.0) / 1e6;
    assert!((u["today"]["cost"].as_f64().unwrap() - cost).abs() < 1e-12, "{u}");
    // Over the one budget on both replicas.
    for p in [&a.proxy, &b.proxy] {
        let (st, body) = spend_chat(p).await;
        assert_eq!(st, 429, "{body}");
        assert_eq!(body["error"]["code"], "insufficient_quota");
    }
    assert_eq!(server.received_requests().await.unwrap().len(), 2);
}

#[tokio::test]
async fn redis_killed_mid_run_counts_locally_and_reconciles_after_the_restart() {
    let mut redis = start_redis();
    let port = redis.port;
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(200).set_body_json(thirty_tokens()))
        .mount(&server)
        .await;
    let a = spend_process(&server.uri(), port).await;
    let b = spend_process(&server.uri(), port).await;
    assert_eq!(spend_chat(&a.proxy).await.0, 200);
    tokens_become(&b.proxy, 30).await;

    // Redis goes away: requests are still served and counted by the replica
    // that served them (its own view: what it last saw plus its own).
    let _ = redis.child.kill();
    let _ = redis.child.wait();
    assert_eq!(spend_chat(&a.proxy).await.0, 200);
    tokens_become(&a.proxy, 60).await;
    // A's local count alone enforces the budget meanwhile (60 of 50).
    assert_eq!(spend_chat(&a.proxy).await.0, 429);

    // Redis is back, empty (no persistence): A pushes what it counted while
    // Redis was down, and B reads it from Redis.
    let _restarted = start_redis_on(port);
    let t = Instant::now();
    loop {
        let _ = spend_usage(&a.proxy).await; // a sync: pushes A's pending deltas
        if spend_usage(&b.proxy).await["today"]["tokens"] == 30 {
            break;
        }
        assert!(t.elapsed() < Duration::from_secs(5), "A's count while Redis was down never reached Redis");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert_eq!(server.received_requests().await.unwrap().len(), 2, "the 429 never reached the upstream");
}

/// Issue 44, item 1: 30 requests at once over two replicas sharing one
/// redis-server, on a key with `tokens_per_day = 100`, the upstream taking
/// 1 s and 15 tokens each. Both replicas reserve in Redis (one script)
/// before sending: what is served stays within the budget plus one request.
#[tokio::test]
async fn two_replicas_hold_one_budget_under_concurrency() {
    let _gauge = IN_PROCESS.lock().await;
    let redis = start_redis();
    let server = MockServer::start().await;
    let mut c = completion(json!({"role": "assistant", "content": "ok"}), "stop");
    c["usage"] = json!({"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15});
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(200).set_body_json(c).set_delay(Duration::from_secs(1)))
        .mount(&server)
        .await;
    let auth = r#"[auth]
keys = [{ key = "sk-race-shared-01", name = "race", tokens_per_day = 100 }]"#;
    let (a, _) = replica_with(&server.uri(), redis.port, "", auth).await;
    let (b, _) = replica_with(&server.uri(), redis.port, "", auth).await;
    let mut tasks = Vec::new();
    for i in 0..30 {
        let p = if i % 2 == 0 { &a } else { &b };
        let (http, url) = (p.http.clone(), p.url("/v1/chat/completions"));
        tasks.push(tokio::spawn(async move {
            let body = json!({"model": "v/m", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]});
            let r = http.post(url).bearer_auth("sk-race-shared-01").json(&body).send().await.unwrap();
            let st = r.status().as_u16();
            (st, r.json::<serde_json::Value>().await.unwrap_or_default())
        }));
    }
    let (mut served, mut refusal) = (0, None);
    for t in tasks {
        match t.await.unwrap() {
            (200, _) => served += 1,
            (429, body) => refusal = Some(body),
            (st, body) => panic!("{st}: {body}"),
        }
    }
    assert!(served >= 1 && served * 15 <= 100 + 15, "{served} served: {} tokens of a 100 budget", served * 15);
    let msg = refusal.expect("some were refused")["error"]["message"].as_str().unwrap().to_string();
    assert!(msg.contains("at most one request"), "{msg}");
    // Settled from the real usage in Redis, seen by both.
    let t = Instant::now();
    loop {
        let r = b.http.get(b.url("/v1/usage")).bearer_auth("sk-race-shared-01").send().await.unwrap();
        let u: serde_json::Value = r.json().await.unwrap();
        if u["today"]["tokens"] == served as u64 * 15 {
            break;
        }
        assert!(t.elapsed() < Duration::from_secs(5), "{u}");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    // Every key the budget script touches shares one hash tag (one Redis
    // Cluster slot).
    let keys = Command::new("redis-cli").args(["-p", &redis.port.to_string(), "--scan"]).output().unwrap();
    let keys = String::from_utf8_lossy(&keys.stdout).to_string();
    let spend: Vec<&str> = keys.lines().filter(|k| k.contains("spend")).collect();
    assert!(!spend.is_empty(), "{keys}");
    let tag = |k: &str| k.split_once('{').and_then(|(_, r)| r.split_once('}')).map(|(t, _)| t.to_string());
    let first = tag(spend[0]).unwrap_or_else(|| panic!("no hash tag in {}", spend[0]));
    assert!(spend.iter().all(|k| tag(k).as_deref() == Some(first.as_str())), "{spend:?}");
}

/// Issue 46: an image one replica had described is not described again by
/// the other (the description is kept by content hash in the shared store).
#[tokio::test]
async fn a_description_made_by_one_replica_is_reused_by_the_other() {
    use crate::vision::{PNG, ask_about, assert_described, data_url, log, replica, setup};
    let _gauge = IN_PROCESS.lock().await;
    let redis = start_redis();
    let url = format!("redis://127.0.0.1:{}", redis.port);
    let shared = |c: &mut modelshim::config::Config| c.state.redis_url = Some(url.clone());
    let a = setup(true, |_| say("ok"), shared).await;
    let b = replica(&a.upstreams, true, shared).await;
    assert_eq!(a.proxy.chat(ask_about(&data_url(PNG))).await.0, 200);
    assert_eq!(b.proxy.chat(ask_about(&data_url(PNG))).await.0, 200);
    assert_eq!(log(&a.seeing).len(), 1, "described once, on replica A");
    assert_eq!(log(&b.text).len(), 2);
    assert_described(&log(&b.text)[1]);
}
