//! Key pools (`api_keys_env`), on the real binary: a key answered with 429
//! rests and the request goes on with another key (no client error), the
//! rested key is not used until its time, every key resting gives the 429
//! with the shortest wait, a refused key (401) rests for `key_rest_secs`,
//! each conversation keeps one key, and a rest taken on one replica holds on
//! another through a real redis-server. Keys never appear in logs, metrics
//! or error bodies: only their positions.

use crate::common;
use crate::support::redis::start_redis;

use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use serde_json::{Value, json};
use wiremock::matchers::method;
use wiremock::{Mock, MockServer, Request, ResponseTemplate};

/// Keys of this test file only; each test uses its own two.
fn keys(tag: &str) -> [String; 2] {
    [format!("sk-k47-{tag}-alpha-7f3a91"), format!("sk-k47-{tag}-bravo-2c8e44")]
}

/// What the upstream answers a key on its n-th use: a status and
/// `Retry-After`, or `None` for a completion.
type Answer = Arc<dyn Fn(&str, usize) -> Option<(u16, Option<u64>)> + Send + Sync>;

/// An upstream that answers by the key it was sent: what `answer` says for
/// it (status and `Retry-After`), else a completion. Records every key.
struct ByKey {
    seen: Arc<Mutex<Vec<String>>>,
    answer: Answer,
}

impl wiremock::Respond for ByKey {
    fn respond(&self, r: &Request) -> ResponseTemplate {
        let key = r
            .headers
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .unwrap_or("")
            .to_string();
        let n = {
            let mut seen = self.seen.lock().unwrap();
            seen.push(key.clone());
            seen.iter().filter(|k| **k == key).count()
        };
        match (self.answer)(&key, n) {
            Some((status, ra)) => {
                // Vendors echo the key they refused; it must not get through.
                let body = json!({"error": {"message": format!("refused for key {key}"), "type": "x"}});
                let t = ResponseTemplate::new(status).set_body_json(body);
                match ra {
                    Some(s) => t.insert_header("retry-after", s.to_string().as_str()),
                    None => t,
                }
            }
            None => ResponseTemplate::new(200)
                .set_body_json(completion(json!({"role": "assistant", "content": "ok"}), "stop")),
        }
    }
}

async fn upstream(
    answer: impl Fn(&str, usize) -> Option<(u16, Option<u64>)> + Send + Sync + 'static,
) -> (MockServer, Arc<Mutex<Vec<String>>>) {
    let server = MockServer::start().await;
    let seen = Arc::new(Mutex::new(Vec::new()));
    Mock::given(method("POST"))
        .respond_with(ByKey { seen: seen.clone(), answer: Arc::new(answer) })
        .mount(&server)
        .await;
    (server, seen)
}

fn config(upstream: &str, extra: &str) -> String {
    format!(
        "[providers.v]\nbase_url = \"{upstream}/v1\"\napi_keys_env = \"K47_POOL_KEYS\"\n{extra}\n\
         [upstream]\nbreaker_failures = 0\n"
    )
}

async fn serve(upstream: &str, keys: &[String; 2], extra: &str) -> ServeProcess {
    serve_process(&config(upstream, extra), &[("K47_POOL_KEYS", &keys.join(", "))]).await
}

fn ask(text: &str) -> Value {
    json!({"model": "v/m", "messages": [{"role": "user", "content": text}]})
}

fn count(seen: &Arc<Mutex<Vec<String>>>, key: &str) -> usize {
    seen.lock().unwrap().iter().filter(|k| *k == key).count()
}

fn assert_no_key(what: &str, text: &str, keys: &[String; 2]) {
    for k in keys {
        assert!(!text.contains(k.as_str()), "a key's value in the {what}: {text}");
    }
}

#[tokio::test]
async fn a_rate_limited_key_rests_and_the_request_goes_on_with_another() {
    let keys = keys("rl");
    // The first key the upstream sees is rate-limited, for 30 s.
    let first: Arc<Mutex<Option<String>>> = Arc::default();
    let f = first.clone();
    let (server, seen) = upstream(move |k, _| {
        let mut first = f.lock().unwrap();
        let bad = first.get_or_insert_with(|| k.to_string());
        (bad == k).then_some((429, Some(30)))
    })
    .await;
    let console = "[console]\nenabled = true\nadmin_key_env = \"K47_ADMIN\"\n";
    let p = serve_process(
        &format!("{}{console}", config(&server.uri(), "")),
        &[("K47_POOL_KEYS", &keys.join(", ")), ("K47_ADMIN", "k47-admin-key-5Tq")],
    )
    .await;
    for i in 0..6 {
        let (st, v) = p.proxy.chat(ask(&format!("conversation {i}"))).await;
        assert_eq!(st, 200, "no client error while another key is healthy: {v}");
    }
    let bad = first.lock().unwrap().clone().unwrap();
    assert_eq!(count(&seen, &bad), 1, "the rested key is not used until its time");

    let metrics = p.proxy.http.get(p.proxy.url("/metrics")).send().await.unwrap().text().await.unwrap();
    let pos = keys.iter().position(|k| *k == bad).unwrap();
    assert!(
        metrics.contains(&format!("modelshim_upstream_key_resting{{provider=\"v\",key=\"{pos}\"}} 1")),
        "{metrics}"
    );
    assert_no_key("metrics", &metrics, &keys);
    let r = p.proxy.http.get(p.proxy.url("/console/api/proxy")).bearer_auth("k47-admin-key-5Tq").send().await.unwrap();
    assert_eq!(r.status(), 200);
    let console: Value = r.json().await.unwrap();
    let shown = &console["providers"][0]["keys"];
    assert_eq!(shown[pos]["state"], "rate_limited", "{console}");
    assert_eq!(shown[1 - pos]["state"], "healthy", "{console}");
    assert_no_key("console", &console.to_string(), &keys);
    let log = p.log();
    assert!(log.contains("API key rests") && log.contains(&format!("key={pos}")), "{log}");
    assert_no_key("log", &log, &keys);
}

#[tokio::test]
async fn every_key_resting_gives_the_429_with_the_shortest_wait() {
    let keys = keys("all");
    let k0 = keys[0].clone();
    let (server, _seen) = upstream(move |k, _| Some((429, Some(if k == k0 { 40 } else { 7 })))).await;
    let p = serve(&server.uri(), &keys, "").await;
    let r = p.proxy.http.post(p.proxy.url("/v1/chat/completions")).json(&ask("hi")).send().await.unwrap();
    assert_eq!(r.status(), 429);
    let ra: f64 = r.headers()["retry-after"].to_str().unwrap().parse().unwrap();
    assert!((6.0..=7.0).contains(&ra), "the shortest wait: {ra}");
    let body = r.text().await.unwrap();
    assert_no_key("error body", &body, &keys);
    // Also on the Messages front, where Claude Code reads it.
    let m = json!({"model": "v/m", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]});
    let r = p.proxy.http.post(p.proxy.url("/v1/messages")).json(&m).send().await.unwrap();
    assert_eq!(r.status(), 429);
    let body = r.text().await.unwrap();
    assert!(body.contains("rate_limit_error"), "{body}");
    assert_no_key("error body", &body, &keys);
    assert_no_key("log", &p.log(), &keys);
}

#[tokio::test]
async fn a_refused_key_rests_for_key_rest_secs() {
    let keys = keys("refused");
    let k1 = keys[1].clone();
    let (server, seen) = upstream(move |k, _| (k == k1).then_some((401, None))).await;
    let p = serve(&server.uri(), &keys, "key_rest_secs = 1").await;
    for i in 0..4 {
        assert_eq!(p.proxy.chat(ask(&format!("conversation {i}"))).await.0, 200);
    }
    let refused_once = count(&seen, &keys[1]);
    assert!(refused_once <= 1, "used again while resting: {refused_once}");
    // After key_rest_secs it is tried again (and rests again).
    tokio::time::sleep(Duration::from_millis(1200)).await;
    for i in 0..4 {
        assert_eq!(p.proxy.chat(ask(&format!("conversation {i}"))).await.0, 200);
    }
    assert!(count(&seen, &keys[1]) >= 1);
    let log = p.log();
    assert!(log.contains("reason=\"refused\""), "{log}");
    assert_no_key("log", &log, &keys);
}

#[tokio::test]
async fn each_conversation_keeps_its_key_over_five_turns() {
    let keys = keys("sticky");
    let (server, seen) = upstream(|_, _| None).await;
    let p = serve(&server.uri(), &keys, "").await;
    // Two conversations that start on different keys (the choice is a
    // digest of the start, so it is the same every run).
    let mut starts: Vec<(String, String)> = Vec::new();
    for i in 0..16 {
        let text = format!("conversation {i}: refactor the parser");
        assert_eq!(p.proxy.chat(ask(&text)).await.0, 200);
        let key = seen.lock().unwrap().last().cloned().unwrap();
        if starts.iter().all(|(_, k)| *k != key) {
            starts.push((text, key));
        }
        if starts.len() == 2 {
            break;
        }
    }
    assert_eq!(starts.len(), 2, "two keys in use");
    for (text, key) in &starts {
        let mut messages = vec![json!({"role": "user", "content": text})];
        for turn in 0..5 {
            messages.push(json!({"role": "assistant", "content": "ok"}));
            messages.push(json!({"role": "user", "content": format!("turn {turn}")}));
            let (st, _) = p.proxy.chat(json!({"model": "v/m", "messages": messages})).await;
            assert_eq!(st, 200);
            assert_eq!(seen.lock().unwrap().last(), Some(key), "turn {turn} of {text:?} changed keys");
        }
    }
}

#[tokio::test]
async fn a_key_rested_on_one_replica_rests_on_the_other_through_redis() {
    let redis = start_redis();
    let keys = keys("shared");
    let bad = keys[0].clone();
    let b = bad.clone();
    let (server, seen) = upstream(move |k, _| (k == b).then_some((429, Some(60)))).await;
    let state = format!("[state]\nredis_url = \"redis://127.0.0.1:{}/\"\n", redis.port);
    let a = serve(&server.uri(), &keys, &state).await;
    let other = serve(&server.uri(), &keys, &state).await;
    // A conversation that starts on the bad key, on replica A.
    let mut start = None;
    for i in 0..16 {
        let text = format!("shared conversation {i}");
        assert_eq!(a.proxy.chat(ask(&text)).await.0, 200);
        if count(&seen, &bad) == 1 {
            start = Some(text);
            break;
        }
    }
    let start = start.expect("some conversation starts on the first key");
    // Replica B has never used the key, yet knows it rests.
    for _ in 0..3 {
        assert_eq!(other.proxy.chat(ask(&start)).await.0, 200);
    }
    assert_eq!(count(&seen, &bad), 1, "replica B used a key that rests");
    let out = Command::new("redis-cli").args(["-p", &redis.port.to_string(), "--scan"]).output().unwrap();
    let stored = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(stored.contains("key_rest") && stored.contains("v:0"), "{stored}");
    assert_no_key("Redis keys", &stored, &keys);
}
