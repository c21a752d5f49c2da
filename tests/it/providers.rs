//! Providers as configured: `/v1/models` listing an upstream's own
//! `GET /models` for a provider that names no models (cached, refreshed in
//! the background, an unreachable upstream contributing nothing),
//! `GET /v1/models/{id}` with ids containing `/`, and a provider table with
//! only a `base_url` served by the generic OpenAI-compatible profile.

use crate::common;
use crate::support::pyenv;

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use common::*;
use modelshim::config::{Config, ProviderConfig};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

/// An upstream whose `GET /v1/models` lists `ids`.
async fn listing(ids: &[&str]) -> MockServer {
    let server = MockServer::start().await;
    list_on(&server, ids).await;
    server
}

async fn list_on(server: &MockServer, ids: &[&str]) {
    let data: Vec<Value> = ids.iter().map(|id| json!({"id": id, "object": "model", "owned_by": "vllm"})).collect();
    Mock::given(method("GET"))
        .and(path("/v1/models"))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({"object": "list", "data": data})))
        .mount(server)
        .await;
}

async fn model_gets(server: &MockServer) -> usize {
    server.received_requests().await.unwrap().iter().filter(|r| r.url.path() == "/v1/models").count()
}

async fn ids(p: &Proxy, key: Option<&str>) -> Vec<String> {
    let mut rb = p.http.get(p.url("/v1/models"));
    if let Some(k) = key {
        rb = rb.bearer_auth(k);
    }
    let r = rb.send().await.unwrap();
    assert_eq!(r.status(), 200);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["object"], "list");
    v["data"].as_array().unwrap().iter().map(|m| m["id"].as_str().unwrap().to_string()).collect()
}

fn provider(base: &str) -> ProviderConfig {
    ProviderConfig {
        profile: Some("testvendor".into()),
        base_url: Some(format!("{}/v1", base.trim_end_matches('/'))),
        ..Default::default()
    }
}

/// Fails a test that would otherwise wait for ever.
async fn within<T>(what: &str, f: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(10), f).await.unwrap_or_else(|_| panic!("{what}: still waiting"))
}

// ------------------------------------------------------------ /v1/models

#[tokio::test]
async fn a_provider_naming_no_models_lists_its_upstreams_own_once_per_interval() {
    let up = listing(&["Qwen/Qwen3-8B", "llama3"]).await;
    let named = listing(&["never-asked"]).await;
    let p = proxy_with("", &up.uri(), |c| {
        // A provider whose config names its models is not asked.
        c.providers.insert("n".into(), ProviderConfig { models: Some(vec!["m1".into()]), ..provider(&named.uri()) });
        c.models.insert("smart".into(), "v/llama3".into());
    })
    .await;
    let want = ["n/m1", "v/Qwen/Qwen3-8B", "v/llama3", "smart"];
    assert_eq!(ids(&p, None).await, want);
    assert_eq!(ids(&p, None).await, want);
    assert_eq!(model_gets(&up).await, 1, "the list is kept for models_refresh_secs (default 300 s)");
    assert_eq!(model_gets(&named).await, 0);
    // What the upstream said of a model is kept; it is owned by the provider.
    let v: Value = p.http.get(p.url("/v1/models")).send().await.unwrap().json().await.unwrap();
    assert_eq!(v["data"][1], json!({"id": "v/Qwen/Qwen3-8B", "object": "model", "created": 0, "owned_by": "v"}));
}

#[tokio::test]
async fn a_stale_list_is_served_and_replaced_in_the_background() {
    let up = listing(&["a"]).await;
    let p = proxy_with("", &up.uri(), |c| c.upstream.models_refresh_secs = 0.2).await;
    assert_eq!(ids(&p, None).await, ["v/a"]);
    up.reset().await;
    list_on(&up, &["b"]).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    // Stale: served as it was while the new list is fetched.
    assert_eq!(ids(&p, None).await, ["v/a"]);
    within("the background refresh", async {
        while ids(&p, None).await != ["v/b"] {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
}

/// Accepts connections and never answers.
async fn black_hole() -> String {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((s, _)) = l.accept().await {
            held.push(s);
        }
    });
    format!("http://{addr}")
}

#[tokio::test]
async fn unreachable_or_failing_upstreams_contribute_nothing() {
    let up = listing(&["a"]).await;
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}", l.local_addr().unwrap())
    };
    let failing = MockServer::start().await;
    Mock::given(method("GET")).respond_with(ResponseTemplate::new(500).set_body_string("boom")).mount(&failing).await;
    let not_a_list = MockServer::start().await;
    Mock::given(method("GET"))
        .respond_with(ResponseTemplate::new(200).set_body_string("<html>hi</html>"))
        .mount(&not_a_list)
        .await;
    // A redirect is not followed, like every upstream call.
    let elsewhere = listing(&["stolen"]).await;
    let moved = MockServer::start().await;
    Mock::given(method("GET"))
        .respond_with(
            ResponseTemplate::new(302).insert_header("location", format!("{}/v1/models", elsewhere.uri()).as_str()),
        )
        .mount(&moved)
        .await;
    let hole = black_hole().await;
    let p = proxy_with("", &up.uri(), |c| {
        c.providers.insert("closed".into(), provider(&closed));
        c.providers.insert("failing".into(), provider(&failing.uri()));
        c.providers.insert("html".into(), provider(&not_a_list.uri()));
        c.providers.insert("moved".into(), provider(&moved.uri()));
        let mut slow = provider(&hole);
        slow.upstream = Some(toml::from_str("models_timeout_secs = 0.2").unwrap());
        c.providers.insert("slow".into(), slow);
    })
    .await;
    assert_eq!(within("/v1/models", ids(&p, None)).await, ["v/a"]);
    assert_eq!(model_gets(&failing).await, 1);
    assert_eq!(model_gets(&moved).await, 1);
    assert_eq!(model_gets(&elsewhere).await, 0, "the redirect was not followed");
    // A failure is remembered too: not asked again on every request.
    assert_eq!(within("/v1/models", ids(&p, None)).await, ["v/a"]);
    assert_eq!(model_gets(&failing).await, 1);
}

#[tokio::test]
async fn one_model_is_retrieved_by_its_id_slashes_and_all() {
    let up = listing(&["Qwen/Qwen3-8B"]).await;
    let p = proxy_with("", &up.uri(), |c| {
        c.providers.insert(
            "deepseek".into(),
            ProviderConfig { models: Some(vec!["deepseek-chat".into()]), ..provider("http://127.0.0.1:9") },
        );
        c.models.insert("smart".into(), "deepseek/deepseek-chat".into());
    })
    .await;
    for id in ["deepseek/deepseek-chat", "v/Qwen/Qwen3-8B", "smart"] {
        let r = p.http.get(p.url(&format!("/v1/models/{id}"))).send().await.unwrap();
        assert_eq!(r.status(), 200, "{id}");
        let v: Value = r.json().await.unwrap();
        assert_eq!(v["id"], id);
        assert_eq!(v["object"], "model");
    }
    // Percent-encoded slashes name the same model.
    let r = p.http.get(p.url("/v1/models/v%2FQwen%2FQwen3-8B")).send().await.unwrap();
    assert_eq!(r.json::<Value>().await.unwrap()["id"], "v/Qwen/Qwen3-8B");
    for id in ["deepseek/nope", "nope", "v/Qwen"] {
        let r = p.http.get(p.url(&format!("/v1/models/{id}"))).send().await.unwrap();
        assert_eq!(r.status(), 404, "{id}");
        let e: Value = r.json().await.unwrap();
        assert_eq!(e["error"]["type"], "invalid_request_error", "{e}");
        assert_eq!(e["error"]["code"], "model_not_found", "{e}");
        assert!(e["error"]["message"].as_str().unwrap().contains(id), "{e}");
    }
}

#[tokio::test]
async fn a_restricted_key_sees_and_retrieves_only_its_models() {
    let up = listing(&["a", "b"]).await;
    let p = proxy_with("", &up.uri(), |c| {
        c.auth = Some(
            toml::from_str(r#"keys = ["sk-sees-every-model", { key = "sk-sees-only-v-b", models = ["v/b"] }]"#)
                .unwrap(),
        );
    })
    .await;
    assert_eq!(ids(&p, Some("sk-sees-every-model")).await, ["v/a", "v/b"]);
    assert_eq!(ids(&p, Some("sk-sees-only-v-b")).await, ["v/b"]);
    let get = |id: &str, key: &str| p.http.get(p.url(&format!("/v1/models/{id}"))).bearer_auth(key).send();
    assert_eq!(get("v/b", "sk-sees-only-v-b").await.unwrap().status(), 200);
    assert_eq!(get("v/a", "sk-sees-only-v-b").await.unwrap().status(), 404);
    assert_eq!(get("v/a", "sk-sees-every-model").await.unwrap().status(), 200);
    assert_eq!(p.http.get(p.url("/v1/models/v/a")).send().await.unwrap().status(), 401);
}

#[tokio::test(flavor = "multi_thread")]
async fn official_python_sdk_lists_and_retrieves_models() {
    let py = tokio::task::spawn_blocking(pyenv::python_env).await.unwrap();
    let up = listing(&["y", "Org/Model"]).await;
    let mut config = Config::default();
    config.providers.insert("x".into(), provider(&up.uri()));
    let state = modelshim::server::AppState::new(&config, &test_profiles()).unwrap();
    let p = serve_state(state).await;
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/sdk/models.py");
    let base = p.url("/v1");
    let out = tokio::task::spawn_blocking(move || {
        pyenv::run(std::process::Command::new(py).arg(script).env("MODELSHIM_BASE_URL", base))
    })
    .await
    .unwrap();
    let out = out.unwrap_or_else(|e| panic!("{e}"));
    assert!(out.contains("models ok"), "{out}");
}

fn test_profiles() -> std::collections::BTreeMap<String, modelshim::provider::Profile> {
    let profile =
        modelshim::provider::Profile::parse("testvendor", "name = \"t\"\nbase_url = \"http://unused\"\n").unwrap();
    [("testvendor".to_string(), profile)].into()
}

// ------------------------------------------- a provider with only a base_url

/// A raw upstream counting its requests: `GET /v1/models` answers 401 with a
/// body that echoes the key it was sent; a chat request gets an answer with
/// `reasoning` and a call written as hermes text.
async fn echoing_upstream(hits: Arc<AtomicUsize>, seen_auth: Arc<std::sync::Mutex<Vec<String>>>) -> String {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            let (hits, seen_auth) = (hits.clone(), seen_auth.clone());
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                // Head, then the body by content-length.
                let head_end = loop {
                    let Ok(n) = s.read(&mut chunk).await else { return };
                    if n == 0 {
                        return;
                    }
                    buf.extend_from_slice(&chunk[..n]);
                    if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                        break i + 4;
                    }
                };
                let head = String::from_utf8_lossy(&buf[..head_end]).to_string();
                let len = head
                    .lines()
                    .find_map(|l| l.to_ascii_lowercase().strip_prefix("content-length:").map(|v| v.trim().to_string()))
                    .and_then(|v| v.parse::<usize>().ok())
                    .unwrap_or(0);
                while buf.len() < head_end + len {
                    let Ok(n) = s.read(&mut chunk).await else { return };
                    if n == 0 {
                        return;
                    }
                    buf.extend_from_slice(&chunk[..n]);
                }
                let auth = head
                    .lines()
                    .find_map(|l| {
                        l.to_ascii_lowercase().starts_with("authorization:").then(|| l[14..].trim().to_string())
                    })
                    .unwrap_or_default();
                let (status, body) = if head.starts_with("GET /v1/models ") {
                    hits.fetch_add(1, Ordering::SeqCst);
                    seen_auth.lock().unwrap().push(auth.clone());
                    ("401 Unauthorized", json!({"error": {"message": format!("invalid key: {auth}")}}).to_string())
                } else {
                    let msg = json!({"role": "assistant", "reasoning": "Weather tool.",
                        "content": "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>"});
                    ("200 OK", completion(msg, "stop").to_string())
                };
                let resp = format!(
                    "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = s.write_all(resp.as_bytes()).await;
            });
        }
    });
    format!("http://{addr}/v1")
}

const LOCAL_KEY: &str = "sk-local-upstream-secret-1234";

#[tokio::test(flavor = "multi_thread")]
async fn a_provider_with_only_a_base_url_is_served_by_the_generic_profile() {
    let hits = Arc::new(AtomicUsize::new(0));
    let seen_auth = Arc::new(std::sync::Mutex::new(Vec::new()));
    let base = echoing_upstream(hits.clone(), seen_auth.clone()).await;
    let config = format!(
        "[providers.local]\nbase_url = \"{base}\"\napi_key_env = \"LOCAL_KEY\"\n[upstream]\nmodels_refresh_secs = 0.1\n"
    );
    let p = serve_process(&config, &[("RUST_LOG", "info"), ("LOCAL_KEY", LOCAL_KEY)]).await;
    let tools = json!([{"type": "function", "function": {"name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]);
    let (st, body) = p
        .proxy
        .chat(json!({"model": "local/qwen3", "tools": tools, "messages": [{"role": "user", "content": "Paris?"}]}))
        .await;
    assert_eq!(st, 200, "{body}\n{}", p.log());
    let msg = &body["choices"][0]["message"];
    // Tool calls written in the text are recovered (auto, every format) and
    // `reasoning` is read as reasoning.
    assert_eq!(msg["tool_calls"][0]["function"]["name"], "get_weather", "{body}");
    assert_eq!(msg["tool_calls"][0]["function"]["arguments"], "{\"city\": \"Paris\"}", "{body}");
    assert_eq!(msg["reasoning_content"], "Weather tool.", "{body}");
    assert_eq!(body["choices"][0]["finish_reason"], "tool_calls");
    let log = p.log();
    assert!(log.contains("no profile named local: the generic OpenAI-compatible profile"), "{log}");

    // Its models come from the upstream: refused here (401), so none are
    // listed, the failure is logged once whatever the number of fetches,
    // and the key it was sent with never reaches the log.
    let models: Value = p.proxy.http.get(p.proxy.url("/v1/models")).send().await.unwrap().json().await.unwrap();
    assert_eq!(models["data"], json!([]), "{models}");
    // Listed again and again past models_refresh_secs: fetched again each time.
    within("three fetches of the upstream's models", async {
        while hits.load(Ordering::SeqCst) < 3 {
            tokio::time::sleep(Duration::from_millis(120)).await;
            let r = p.proxy.http.get(p.proxy.url("/v1/models")).send().await.unwrap();
            assert_eq!(r.json::<Value>().await.unwrap()["data"], json!([]));
        }
    })
    .await;
    assert_eq!(seen_auth.lock().unwrap()[0], format!("Bearer {LOCAL_KEY}"), "sent with the provider's key");
    let log = p.log();
    assert_eq!(log.matches("cannot list the upstream's models").count(), 1, "{log}");
    assert!(!log.contains(LOCAL_KEY), "{log}");
}

fn run_bin(args: &[&str], config: &str, env: &[(&str, &str)]) -> (bool, String) {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("modelshim.toml");
    std::fs::write(&file, config).unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_modelshim"))
        .args(args)
        .arg("--config")
        .arg(&file)
        .env("HOME", dir.path())
        .current_dir(dir.path())
        .envs(env.iter().copied())
        .output()
        .unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.success(), text)
}

#[test]
fn check_and_providers_say_which_provider_is_generic() {
    let config = "[providers.local]\nbase_url = \"http://127.0.0.1:9/v1\"\n[providers.v]\nprofile = \"vllm\"\nbase_url = \"http://127.0.0.1:9/v1\"\n";
    let (ok, text) = run_bin(&["check"], config, &[]);
    assert!(ok, "{text}");
    let line = text.lines().find(|l| l.starts_with("ok   provider local")).unwrap_or_else(|| panic!("{text}"));
    assert!(line.contains("no profile named local: the generic OpenAI-compatible profile (generic)"), "{text}");
    let vllm = text.lines().find(|l| l.starts_with("ok   provider v ")).unwrap_or_else(|| panic!("{text}"));
    assert!(!vllm.contains("generic"), "{text}");
    let (ok, text) = run_bin(&["providers"], config, &[]);
    assert!(ok, "{text}");
    assert!(text.contains("provider local: no profile named local: the generic OpenAI-compatible profile"), "{text}");
    assert!(text.contains("provider v: profile vllm"), "{text}");
    assert!(text.lines().any(|l| l.starts_with("generic ")), "the generic profile is listed: {text}");
    // Without a base_url a name that is no profile is still a mistake.
    let (ok, text) = run_bin(&["check"], "[providers.typo]\napi_key_env = \"K\"\n", &[]);
    assert!(!ok, "{text}");
    assert!(text.contains("no profile named \"typo\""), "{text}");
}

#[test]
fn config_errors_print_the_message_without_a_backtrace() {
    let bad = "[providers.typo]\napi_key_env = \"K\"\n";
    for cmd in ["check", "serve"] {
        let (ok, text) = run_bin(&[cmd], bad, &[("RUST_BACKTRACE", "1")]);
        assert!(!ok, "{text}");
        assert!(text.contains("Error: provider typo: no profile named \"typo\""), "{cmd}: {text}");
        assert!(!text.to_ascii_lowercase().contains("stack backtrace"), "{cmd}: {text}");
    }
    let (ok, text) = run_bin(&["check"], "listen = 1\n", &[("RUST_BACKTRACE", "full")]);
    assert!(!ok, "{text}");
    assert!(text.contains("Error: ") && text.contains("listen"), "{text}");
    assert!(!text.to_ascii_lowercase().contains("stack backtrace"), "{text}");
}
