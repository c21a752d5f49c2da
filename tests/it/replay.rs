//! `serve --record` and `modelshim replay`: a recorded session replays to the
//! same client-visible bytes, recordings hold no credentials, and the replay
//! server explains misses and survives bad files.

use crate::common;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use modelshim::config::{Config, ProviderConfig};
use modelshim::fixture::{Fixture, SseEvent};
use modelshim::provider::Profile;
use modelshim::server::AppState;
use modelshim::server::replay::Replay;
use serde_json::{Value, json};
use wiremock::matchers::{body_partial_json, method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

/// Unique to this test so no other test sees or sets them.
const KEY_ENV: &str = "MODELSHIM_TEST_WT_F_RECORD_KEY";
const KEY: &str = "sk-live-0123456789abcdef-recorded-secret";
const OTHER_ENV: &str = "MODELSHIM_TEST_WT_F_OTHER_KEY";
const OTHER_KEY: &str = "other-provider-secret-9876";

/// A proxy with provider `v` in front of `upstream`, recording into `record`
/// when given.
async fn proxy_at(upstream: &str, record: Option<&Path>) -> Proxy {
    let text = "name = \"test vendor\"\nbase_url = \"http://unused\"\n[tools]\nformats = { \"*\" = [\"hermes\"] }\n";
    let mut profiles = BTreeMap::new();
    profiles.insert("testvendor".to_string(), Profile::parse("testvendor", text).unwrap());
    let mut config = Config::default();
    config.providers.insert(
        "v".into(),
        ProviderConfig {
            profile: Some("testvendor".into()),
            base_url: Some(format!("{}/v1", upstream.trim_end_matches('/'))),
            ..Default::default()
        },
    );
    serve_state(AppState::build(&config, &profiles, record).unwrap()).await
}

fn tools() -> Value {
    json!([{"type": "function", "function": {"name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}])
}

fn request(stream: bool) -> Value {
    json!({"model": "v/m1", "stream": stream, "tools": tools(),
           "messages": [{"role": "user", "content": "Weather in Paris?"}]})
}

/// An upstream that thinks, writes a call into the text and reports usage.
async fn live_upstream() -> MockServer {
    let server = MockServer::start().await;
    let stream = [
        chunk(json!({"role": "assistant", "reasoning_content": "Need the weather."}), None),
        chunk(json!({"content": "Let me check. <tool_call>{\"name\": \"get_weather\", "}), None),
        chunk(json!({"content": "\"arguments\": {\"city\": \"Paris\"}}</tool_call>"}), None),
        chunk(json!({}), Some("stop")),
    ];
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .and(body_partial_json(json!({"stream": true})))
        .respond_with(
            ResponseTemplate::new(200)
                .set_body_raw(sse_body(&stream), "text/event-stream")
                .insert_header("x-request-id", "req-1"),
        )
        .with_priority(1)
        .mount(&server)
        .await;
    let whole = completion(
        json!({"role": "assistant", "reasoning_content": "Need the weather.",
               "content": "Let me check. <tool_call>{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}</tool_call>"}),
        "stop",
    );
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .and(body_partial_json(json!({"model": "m1"})))
        .respond_with(ResponseTemplate::new(200).set_body_json(whole))
        .with_priority(5)
        .mount(&server)
        .await;
    server
}

/// The raw client-visible body with generated ids masked.
async fn raw(p: &Proxy, body: &Value) -> (u16, String) {
    let r = p.http.post(p.url("/v1/chat/completions")).json(body).send().await.unwrap();
    let status = r.status().as_u16();
    let text = r.text().await.unwrap();
    let ids = regex::Regex::new(r"call_[0-9a-f]{24}|chatcmpl-[0-9a-f]{16}").unwrap();
    (status, ids.replace_all(&text, "<generated>").into_owned())
}

fn recorded(dir: &Path) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let p = e.unwrap().path();
            (p.file_name().unwrap().to_string_lossy().into_owned(), std::fs::read_to_string(&p).unwrap())
        })
        .collect();
    out.sort();
    out
}

#[tokio::test]
async fn recorded_session_replays_byte_identical() {
    let upstream = live_upstream().await;
    let dir = tempfile::tempdir().unwrap();
    let live = proxy_at(&upstream.uri(), Some(dir.path())).await;
    let streamed = raw(&live, &request(true)).await;
    let whole = raw(&live, &request(false)).await;
    assert_eq!(streamed.0, 200, "{}", streamed.1);
    assert_eq!(whole.0, 200, "{}", whole.1);
    assert!(streamed.1.contains("get_weather") && streamed.1.ends_with("data: [DONE]\n\n"), "{}", streamed.1);
    assert!(whole.1.contains("get_weather"), "{}", whole.1);

    // One readable file per exchange, named by provider, model and hash.
    let files = recorded(dir.path());
    assert_eq!(files.len(), 2, "{:?}", files.iter().map(|f| &f.0).collect::<Vec<_>>());
    for (name, text) in &files {
        assert!(name.starts_with("v__m1__") && name.ends_with(".json"), "{name}");
        assert!(text.contains("\n  \"request\": {"), "pretty JSON: {text}");
    }
    let stream_fx: Fixture = serde_json::from_str(&files.iter().find(|f| f.1.contains("\"sse\"")).unwrap().1).unwrap();
    let events = stream_fx.response.sse.unwrap();
    assert_eq!(events.len(), 5, "every event, [DONE] included");
    assert_eq!(events.last().unwrap().data, "[DONE]");
    assert_eq!(stream_fx.response.headers.get("x-request-id").map(String::as_str), Some("req-1"));
    assert!(files.iter().any(|f| f.1.contains("\"body\": {\n      \"id\": \"up-1\"")), "JSON body kept as JSON");

    // Replay the folder as the upstream: the client sees the same bytes.
    let (replay, problems) = Replay::load_dir(dir.path(), 0.0).unwrap();
    assert!(problems.is_empty(), "{problems:?}");
    let replay = Arc::new(replay);
    let addr = modelshim::server::replay::spawn(replay.clone(), "127.0.0.1:0").await.unwrap();
    let again = proxy_at(&format!("http://{addr}"), None).await;
    assert_eq!(raw(&again, &request(true)).await, streamed, "streamed");
    assert_eq!(raw(&again, &request(false)).await, whole, "non-streamed");
    assert_eq!(replay.served(), (2, 2), "every request matched its recording exactly");
}

/// Runs the real binary with `args` and `env`; returns the child and the
/// address it logged.
async fn spawn_bin(args: &[&str], env: &[(&str, &str)]) -> (tokio::process::Child, String) {
    use tokio::io::AsyncBufReadExt;
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_modelshim"));
    cmd.args(args).stderr(std::process::Stdio::piped()).kill_on_drop(true).env("RUST_LOG", "info");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().unwrap();
    let mut lines = tokio::io::BufReader::new(child.stderr.take().unwrap()).lines();
    let addr = regex::Regex::new(r"on http://([0-9.:]+)/v1").unwrap();
    let found = tokio::time::timeout(Duration::from_secs(20), async {
        while let Some(line) = lines.next_line().await.unwrap() {
            if let Some(c) = addr.captures(&line) {
                return c[1].to_string();
            }
        }
        panic!("{args:?} exited before listening");
    })
    .await
    .unwrap();
    // Keep draining the log so the child never blocks on a full pipe.
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    (child, found)
}

#[tokio::test]
async fn serve_record_writes_no_key_no_authorization_no_secret() {
    let upstream = MockServer::start().await;
    // The key really is sent upstream…
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .and(wiremock::matchers::header("authorization", format!("Bearer {KEY}").as_str()))
        .respond_with(
            ResponseTemplate::new(200)
                .set_body_json(completion(json!({"role": "assistant", "content": format!("you sent {KEY}")}), "stop")),
        )
        .mount(&upstream)
        .await;
    // …and a vendor echoes keys in its error message.
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .and(wiremock::matchers::header("authorization", format!("Bearer {OTHER_KEY}").as_str()))
        .respond_with(ResponseTemplate::new(401).set_body_json(json!({"error": {
            "message": format!("Incorrect API key provided: {OTHER_KEY}. Also not {KEY}."),
            "type": "invalid_request_error", "code": "invalid_api_key"}})))
        .mount(&upstream)
        .await;
    let dir = tempfile::tempdir().unwrap();
    let rec = dir.path().join("rec");
    let config = dir.path().join("modelshim.toml");
    std::fs::write(
        &config,
        format!(
            "[providers.v]\nprofile = \"vllm\"\nbase_url = \"{u}/v1\"\napi_key_env = \"{KEY_ENV}\"\n\n\
             [providers.w]\nprofile = \"openai\"\nbase_url = \"{u}/v1\"\napi_key_env = \"{OTHER_ENV}\"\n",
            u = upstream.uri()
        ),
    )
    .unwrap();
    let (child, addr) = spawn_bin(
        &["serve", "--config", config.to_str().unwrap(), "--listen", "127.0.0.1:0", "--record", rec.to_str().unwrap()],
        &[(KEY_ENV, KEY), (OTHER_ENV, OTHER_KEY)],
    )
    .await;
    let http = reqwest::Client::new();
    let ask = |model: &str| json!({"model": model, "messages": [{"role": "user", "content": "hi"}]});
    let url = format!("http://{addr}/v1/chat/completions");
    let ok = http.post(&url).json(&ask("v/m1")).send().await.unwrap();
    assert_eq!(ok.status().as_u16(), 200);
    let bad = http.post(&url).json(&ask("w/gpt-4o")).send().await.unwrap();
    assert_eq!(bad.status().as_u16(), 401);
    drop(child);

    let files = recorded(&rec);
    assert_eq!(files.len(), 2, "{files:?}");
    for (name, text) in &files {
        for secret in [KEY, OTHER_KEY, "Bearer", "sk-live"] {
            assert!(!text.contains(secret), "{name} contains {secret}: {text}");
        }
        let fx: Fixture = serde_json::from_str(text).unwrap();
        assert_eq!(fx.request.headers.get("authorization").map(String::as_str), Some("[REDACTED]"), "{name}");
        assert!(text.contains("[REDACTED]"));
    }

    // `modelshim replay` serves the recordings back.
    let (child, addr) = spawn_bin(&["replay", rec.to_str().unwrap(), "--listen", "127.0.0.1:0"], &[]).await;
    let r = http
        .post(format!("http://{addr}/v1/chat/completions"))
        .json(&json!({"model": "m1",
        "messages": [{"role": "user", "content": "hi"}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    assert!(r.text().await.unwrap().contains("you sent [REDACTED]"));
    drop(child);
}

#[tokio::test]
async fn recording_taps_the_stream_without_holding_it_back() {
    // The upstream's second event comes 400 ms after the first; the client
    // must get the first event before then.
    let fx = Fixture::chat("v", "m1").stream(vec![
        chunk(json!({"role": "assistant", "content": "first"}), None),
        chunk(json!({"content": " second"}), Some("stop")),
    ]);
    let mut fx = fx;
    fx.response.sse.as_mut().unwrap()[1].delay_ms = 400;
    let (replay, _) = Replay::new([("slow.json".to_string(), fx.to_pretty())], 1.0);
    let addr = modelshim::server::replay::spawn(Arc::new(replay), "127.0.0.1:0").await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let p = proxy_at(&format!("http://{addr}"), Some(dir.path())).await;
    let start = Instant::now();
    let mut resp = p
        .http
        .post(p.url("/v1/chat/completions"))
        .json(&json!({"model": "v/m1", "stream": true, "messages": [{"role": "user", "content": "Hello!"}]}))
        .send()
        .await
        .unwrap();
    let first = resp.chunk().await.unwrap().unwrap();
    assert!(String::from_utf8_lossy(&first).contains("first"));
    assert!(start.elapsed() < Duration::from_millis(350), "first event held back: {:?}", start.elapsed());
    assert!(recorded(dir.path()).is_empty(), "written only when the stream ends");
    while resp.chunk().await.unwrap().is_some() {}
    let files = recorded(dir.path());
    assert_eq!(files.len(), 1);
    let rec: Fixture = serde_json::from_str(&files[0].1).unwrap();
    let delays: Vec<u64> = rec.response.sse.unwrap().iter().map(|e| e.delay_ms).collect();
    assert!(delays[1] >= 350, "inter-chunk timing recorded: {delays:?}");
}

#[tokio::test]
async fn replay_names_the_closest_recording_on_a_miss() {
    let fx = Fixture::chat("v", "m1").json(200, completion(json!({"role": "assistant", "content": "hi"}), "stop"));
    let (replay, _) = Replay::new([("fixtures/v/hello.json".to_string(), fx.to_pretty())], 0.0);
    let addr = modelshim::server::replay::spawn(Arc::new(replay), "127.0.0.1:0").await.unwrap();
    let r = reqwest::Client::new()
        .post(format!("http://{addr}/v1/chat/completions"))
        .json(&json!({"model": "other", "messages": [{"role": "user", "content": "x"}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 404);
    let body: Value = r.json().await.unwrap();
    let msg = body["error"]["message"].as_str().unwrap();
    assert_eq!(body["error"]["code"], "no_recording");
    assert!(msg.contains("No recording matches POST /v1/chat/completions (model \"other\""), "{msg}");
    assert!(msg.contains("closest recording is fixtures/v/hello.json"), "{msg}");
}

#[tokio::test]
async fn replay_falls_back_to_recording_order_and_paces_streams() {
    // Two recordings for the same model with other prompts: served in order.
    let mut a = Fixture::chat("v", "m1").json(200, completion(json!({"role": "assistant", "content": "one"}), "stop"));
    a.recorded_at = Some(2);
    let mut b = Fixture::chat("v", "m1")
        .with("messages", json!([{"role": "user", "content": "other"}]))
        .json(200, completion(json!({"role": "assistant", "content": "zero"}), "stop"));
    b.recorded_at = Some(1);
    let mut slow = Fixture::chat("v", "m1").stream(vec![chunk(json!({"content": "x"}), Some("stop"))]);
    slow.response.sse.as_mut().unwrap()[0].delay_ms = 100;
    let files = [("a.json", a), ("b.json", b), ("s.json", slow)].map(|(n, f)| (n.to_string(), f.to_pretty()));
    for speed in [0.0, 2.0] {
        let (replay, _) = Replay::new(files.clone(), speed);
        let addr = modelshim::server::replay::spawn(Arc::new(replay), "127.0.0.1:0").await.unwrap();
        let p = proxy_at(&format!("http://{addr}"), None).await;
        let ask = json!({"model": "v/m1", "messages": [{"role": "user", "content": "unrecorded"}]});
        let first = p.chat(ask.clone()).await.1;
        let second = p.chat(ask.clone()).await.1;
        assert_eq!(first["choices"][0]["message"]["content"], "zero");
        assert_eq!(second["choices"][0]["message"]["content"], "one");
        let start = Instant::now();
        let (st, _) = p.chat_stream(ask).await;
        assert_eq!(st, 200);
        let took = start.elapsed();
        if speed == 0.0 {
            assert!(took < Duration::from_millis(150), "speed 0 sleeps not: {took:?}");
        } else {
            assert!(took >= Duration::from_millis(200), "speed 2 doubles the 100 ms delay: {took:?}");
        }
    }
}

#[test]
fn replay_dir_names_bad_files_and_serves_the_rest() {
    let dir = tempfile::tempdir().unwrap();
    let good = Fixture::chat("v", "m1").json(200, json!({"ok": true}));
    std::fs::create_dir(dir.path().join("vendor")).unwrap();
    std::fs::write(dir.path().join("vendor/good.json"), good.to_pretty()).unwrap();
    std::fs::write(dir.path().join("vendor/broken.json"), "{\"request\": ").unwrap();
    std::fs::write(dir.path().join("vendor/two_bodies.json"), {
        let mut f = good.clone();
        f.response.sse = Some(vec![SseEvent::data("[DONE]")]);
        f.to_pretty()
    })
    .unwrap();
    // A listed file that is gone by the time it is read (dangling link).
    std::os::unix::fs::symlink(dir.path().join("deleted.json"), dir.path().join("vendor/missing.json")).unwrap();
    std::fs::write(dir.path().join("notes.txt"), "ignored").unwrap();
    let (replay, problems) = Replay::load_dir(dir.path(), 0.0).unwrap();
    assert_eq!(replay.len(), 1);
    let msgs: Vec<String> = problems.iter().map(ToString::to_string).collect();
    assert_eq!(msgs.len(), 3, "{msgs:?}");
    assert!(msgs.iter().any(|m| m.contains("broken.json: not a fixture")), "{msgs:?}");
    assert!(msgs.iter().any(|m| m.contains("two_bodies.json: not a fixture: response has more than one")), "{msgs:?}");
    assert!(msgs.iter().any(|m| m.contains("missing.json: cannot read")), "{msgs:?}");

    let missing = dir.path().join("nope");
    let err = Replay::load_dir(&missing, 0.0).err().unwrap().to_string();
    assert!(err.contains("nope: cannot read"), "{err}");
}
