//! Two replicas sharing nothing but a real redis-server: state written
//! through replica A's store is read by replica B, both keep serving, and a
//! Redis that goes away leaves them degraded but serving.
//!
//! Needs the `redis-server` binary (Debian: `apt-get install redis-server`;
//! `.ci/run` installs it) and fails with that message when it is missing.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail by panicking

mod common;

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use modelshim::state::{StateError, ns};
use serde_json::json;
use wiremock::matchers::method;
use wiremock::{Mock, MockServer, ResponseTemplate};

/// A redis-server on a free loopback port, killed on drop.
struct Redis {
    child: Child,
    port: u16,
}

impl Drop for Redis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start_redis() -> Redis {
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let child = Command::new("redis-server")
        .args(["--port", &port.to_string(), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| {
            panic!("cannot start redis-server ({e}): install it with `apt-get install -y redis-server` (.ci/run does)")
        });
    let t = Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(t.elapsed() < Duration::from_secs(10), "redis-server did not come up on port {port}");
        std::thread::sleep(Duration::from_millis(20));
    }
    Redis { child, port }
}

async fn replica(upstream: &str, redis_port: u16) -> (Proxy, modelshim::server::Shared) {
    let url = format!("redis://127.0.0.1:{redis_port}/");
    let text = "name = \"test vendor\"\nbase_url = \"http://unused\"\n";
    let mut profiles = std::collections::BTreeMap::new();
    profiles.insert("testvendor".to_string(), modelshim::provider::Profile::parse("testvendor", text).unwrap());
    let mut config = modelshim::config::Config::default();
    config.providers.insert(
        "v".into(),
        modelshim::config::ProviderConfig {
            profile: Some("testvendor".into()),
            base_url: Some(format!("{upstream}/v1")),
            ..Default::default()
        },
    );
    config.state.redis_url = Some(url);
    let state = modelshim::server::AppState::new(&config, &profiles).unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let app = modelshim::server::app(state.clone());
    tokio::spawn(async move { axum::serve(listener, app).await });
    (Proxy { addr, http: reqwest::Client::new() }, state)
}

#[tokio::test]
async fn replicas_share_state_through_redis() {
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
