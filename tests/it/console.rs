//! The console (issue #32) against a scripted wiremock upstream: off unless
//! enabled, the admin key (bearer and the login cookie, never a proxy key),
//! nothing recorded while no console is open, the ring's bound and the body
//! caps, a hidden tool loop's timeline under the response's `x-request-id`,
//! and no proxy, provider or admin key in anything the console serves. Then
//! the real thing: Debian's Chromium driven by Playwright for Python (pinned,
//! installed on first use), screenshots under target/console-artifacts/.

use crate::common;
use crate::support::pyenv;

use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use futures_util::StreamExt;
use serde_json::{Value, json};
use wiremock::matchers::{body_partial_json, body_string_contains, method};
use wiremock::{Mock, MockServer, ResponseTemplate};

const PROXY_KEY: &str = "sk-proxy-console-test-7Hq2mZ";
const PROVIDER_KEY: &str = "sk-provider-console-test-Xw91Lp";
const ADMIN_KEY: &str = "admin-console-test-4Rr8Kd";
const ADMIN_ENV: &str = "MODELSHIM_CONSOLE_TEST_ADMIN_KEY";
const PROVIDER_ENV: &str = "MODELSHIM_CONSOLE_TEST_PROVIDER_KEY";
/// How long the slow upstream takes over the second iteration.
const SLOW: Duration = Duration::from_millis(2500);

fn last_user(req: &Value) -> String {
    let m = req["messages"].as_array().unwrap().iter().rev().find(|m| m["role"] == "user").unwrap();
    m["content"].as_str().unwrap_or_default().to_string()
}

/// The upstream's brain: asks for the time (a hidden server tool) when the
/// user does, answers with the tool's result after; echoes the provider key
/// when asked to leak it.
fn brain(req: &Value) -> Value {
    let results: Vec<String> = req["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["content"].as_str().unwrap_or_default().to_string())
        .collect();
    let q = last_user(req);
    if let Some(r) = results.first() {
        return say(&format!("The tool said {r}"));
    }
    if q.contains("time") {
        return json!({"content": "Let me look.", "tool_calls": [{"id": "call_t1", "type": "function",
            "function": {"name": "current_time", "arguments": "{\"utc_offset\":\"+02:00\"}"}}]});
    }
    if q.contains("leak") {
        return say(&format!("the provider key is {PROVIDER_KEY} and the proxy key {PROXY_KEY}"));
    }
    say("Hello from upstream.")
}

struct Setup {
    _upstream: MockServer,
    _skills: tempfile::TempDir,
    _server: ServeProcess,
    proxy: Proxy,
}

/// `modelshim serve` (the binary: the admin key comes from its environment)
/// in front of the scripted upstream, with `console` in its `[console]`.
async fn setup(console: &str) -> Setup {
    let upstream = MockServer::start().await;
    // The failing upstream: any request for the model `broken`.
    Mock::given(method("POST"))
        .and(body_partial_json(json!({"model": "broken"})))
        .respond_with(ResponseTemplate::new(500).set_body_json(
            json!({"error": {"message": "upstream exploded", "type": "server_error", "param": null, "code": null}}),
        ))
        .with_priority(1)
        .mount(&upstream)
        .await;
    // A slow second iteration, to watch a loop while it runs.
    Mock::given(method("POST"))
        .and(body_string_contains("slowly"))
        .and(body_string_contains("call_t1"))
        .respond_with(
            ResponseTemplate::new(200)
                .set_body_json(completion(json!({"role": "assistant", "content": "Done, slowly."}), "stop"))
                .set_delay(SLOW),
        )
        .with_priority(1)
        .mount(&upstream)
        .await;
    Mock::given(method("POST"))
        .respond_with(Script { brain: Arc::new(brain), log: Arc::default() })
        .with_priority(3)
        .mount(&upstream)
        .await;
    let skills = tempfile::tempdir().unwrap();
    let skill = skills.path().join("weather-report");
    std::fs::create_dir_all(&skill).unwrap();
    std::fs::write(
        skill.join("SKILL.md"),
        "---\nname: weather-report\ndescription: How to write a short weather report for a city.\n---\nSay the temperature first.\n",
    )
    .unwrap();
    let config = format!(
        "[providers.v]\nprofile = \"openai\"\nbase_url = \"{}/v1\"\napi_key_env = \"{PROVIDER_ENV}\"\n\
         [providers.v.prices.\"m\"]\ninput = 1000.0\noutput = 2000.0\ncurrency = \"USD\"\n\
         [upstream]\nretries = 0\nbreaker_failures = 0\n\
         [auth]\nkeys = [{{ key = \"{PROXY_KEY}\", name = \"team-a\" }}]\n\
         [tools]\nbuiltin = [\"current_time\"]\n\
         [skills]\ndirs = [{:?}]\nauto_reload = false\n\
         [console]\n{console}\n{admin}\n",
        upstream.uri(),
        skills.path().display().to_string(),
        admin =
            if console.contains("admin_key_env") { String::new() } else { format!("admin_key_env = \"{ADMIN_ENV}\"") },
    );
    let server = serve_process(&config, &[(ADMIN_ENV, ADMIN_KEY), (PROVIDER_ENV, PROVIDER_KEY)]).await;
    let proxy = Proxy { addr: server.proxy.addr, http: reqwest::Client::new() };
    Setup { _upstream: upstream, _skills: skills, _server: server, proxy }
}

async fn on(console: &str) -> Setup {
    setup(&format!("enabled = true\n{console}")).await
}

/// A chat request with the proxy key (and that key in the body too);
/// returns status, `x-request-id` and body.
async fn chat(p: &Proxy, model: &str, q: &str, stream: bool) -> (u16, String, String) {
    let body = json!({"model": model, "stream": stream,
        "messages": [{"role": "system", "content": format!("my key is {PROXY_KEY}")}, {"role": "user", "content": q}]});
    let r = p.http.post(p.url("/v1/chat/completions")).bearer_auth(PROXY_KEY).json(&body).send().await.unwrap();
    let id = r.headers().get("x-request-id").unwrap().to_str().unwrap().to_string();
    (r.status().as_u16(), id, r.text().await.unwrap())
}

async fn get(p: &Proxy, path: &str, bearer: Option<&str>) -> (u16, String) {
    let mut rb = p.http.get(p.url(path));
    if let Some(b) = bearer {
        rb = rb.bearer_auth(b);
    }
    let r = rb.send().await.unwrap();
    (r.status().as_u16(), r.text().await.unwrap())
}

async fn api(p: &Proxy, path: &str) -> Value {
    let (st, text) = get(p, path, Some(ADMIN_KEY)).await;
    assert_eq!(st, 200, "{path}: {text}");
    serde_json::from_str(&text).unwrap()
}

/// Polls until `ok` holds of the list (the record finishes with the body).
async fn until(p: &Proxy, what: &str, ok: impl Fn(&[Value]) -> bool) -> Vec<Value> {
    let start = Instant::now();
    loop {
        let list = api(p, "/console/api/requests").await["requests"].as_array().unwrap().clone();
        if ok(&list) {
            return list;
        }
        assert!(start.elapsed() < Duration::from_secs(10), "{what}: {list:#?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// An open console: the live stream, read into a buffer in the background.
struct Live {
    text: Arc<std::sync::Mutex<String>>,
    task: tokio::task::JoinHandle<()>,
}

impl Live {
    async fn open(p: &Proxy) -> Live {
        let r = p.http.get(p.url("/console/events")).bearer_auth(ADMIN_KEY).send().await.unwrap();
        assert_eq!(r.status(), 200);
        let text: Arc<std::sync::Mutex<String>> = Arc::default();
        let mut body = r.bytes_stream();
        let first = body.next().await.unwrap().unwrap();
        text.lock().unwrap().push_str(&String::from_utf8_lossy(&first));
        let t = text.clone();
        let task = tokio::spawn(async move {
            while let Some(Ok(b)) = body.next().await {
                t.lock().unwrap().push_str(&String::from_utf8_lossy(&b));
            }
        });
        Live { text, task }
    }

    async fn wait_for(&self, needle: &str) {
        let start = Instant::now();
        while !self.text.lock().unwrap().contains(needle) {
            assert!(start.elapsed() < Duration::from_secs(10), "no {needle} in the live stream");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    fn close(self) -> String {
        self.task.abort();
        self.text.lock().unwrap().clone()
    }
}

#[tokio::test]
async fn the_console_is_off_unless_enabled() {
    let s = setup("").await;
    for path in ["/console", "/console/api/requests", "/console/events"] {
        let (st, _) = get(&s.proxy, path, Some(ADMIN_KEY)).await;
        assert_eq!(st, 404, "{path}");
    }
}

#[tokio::test]
async fn the_admin_key_as_bearer_or_login_cookie_and_never_a_proxy_key() {
    let s = on("").await;
    let p = &s.proxy;
    let (st, page) = get(p, "/console", None).await;
    assert_eq!(st, 401);
    assert!(page.contains("name=\"key\""), "the login form: {page}");
    for bearer in [None, Some("wrong"), Some(PROXY_KEY)] {
        assert_eq!(get(p, "/console/api/requests", bearer).await.0, 401, "{bearer:?}");
        assert_eq!(get(p, "/console/events", bearer).await.0, 401, "{bearer:?}");
    }
    assert_eq!(get(p, "/console", Some(ADMIN_KEY)).await.0, 200);
    // The admin key is not a proxy key.
    let r = p
        .http
        .post(p.url("/v1/chat/completions"))
        .bearer_auth(ADMIN_KEY)
        .json(&json!({"model": "v/m",
        "messages": [{"role": "user", "content": "hi"}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);

    let http = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap();
    let form = |key: &str| format!("key={key}&next=%2Fconsole%2Frequests%2Fx");
    let r = http
        .post(p.url("/console/login"))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(form("nope"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    assert!(r.headers().get("set-cookie").is_none());
    let r = http
        .post(p.url("/console/login"))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(form(ADMIN_KEY))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 303);
    assert_eq!(r.headers()["location"], "/console/requests/x");
    let cookie = r.headers()["set-cookie"].to_str().unwrap().to_string();
    assert!(cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict"), "{cookie}");
    assert!(!cookie.contains(ADMIN_KEY), "the cookie is not the key: {cookie}");
    let pair = cookie.split(';').next().unwrap().to_string();
    let r = http.get(p.url("/console/api/requests")).header("cookie", &pair).send().await.unwrap();
    assert_eq!(r.status(), 200);
    let last = if pair.ends_with('0') { '1' } else { '0' };
    let forged = format!("{}{last}", &pair[..pair.len() - 1]);
    let r = http.get(p.url("/console/api/requests")).header("cookie", forged).send().await.unwrap();
    assert_eq!(r.status(), 401);
}

#[tokio::test]
async fn the_admin_key_unset_refuses_everything() {
    let s = setup("enabled = true\nadmin_key_env = \"MODELSHIM_CONSOLE_TEST_UNSET\"").await;
    let (st, page) = get(&s.proxy, "/console", Some(ADMIN_KEY)).await;
    assert_eq!(st, 401);
    assert!(page.contains("MODELSHIM_CONSOLE_TEST_UNSET"), "{page}");
}

#[tokio::test]
async fn nothing_is_recorded_while_no_console_is_open() {
    let s = on("").await;
    let p = &s.proxy;
    assert_eq!(chat(p, "v/m", "hi", false).await.0, 200);
    assert_eq!(api(p, "/console/api/requests").await["requests"], json!([]));
    let live = Live::open(p).await;
    let (st, id, _) = chat(p, "v/m", "hi", true).await;
    assert_eq!(st, 200);
    live.wait_for(&id).await;
    let list = until(p, "the streamed request done", |l| l.len() == 1 && l[0]["done"] == true).await;
    assert_eq!(list[0]["id"], id);
    assert_eq!(list[0]["key"], "team-a");
    assert_eq!(list[0]["front"], "chat");
    live.close();
    // Closed: the open-console count goes back to zero, and nothing more is kept.
    let start = Instant::now();
    while api(p, "/console/api/requests").await["replica"]["watchers"] != 0 {
        assert!(start.elapsed() < Duration::from_secs(10), "the console is still counted open");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(chat(p, "v/m", "hi", false).await.0, 200);
    assert_eq!(api(p, "/console/api/requests").await["requests"].as_array().unwrap().len(), 1);
}

#[tokio::test]
async fn the_ring_is_bounded_and_bodies_are_capped() {
    let s = on("record_always = true\nring_size = 3\nmax_body_bytes = 300").await;
    let p = &s.proxy;
    let mut ids = Vec::new();
    for i in 0..5 {
        let q = format!("question {i} {}", "x".repeat(2000));
        let (st, id, _) = chat(p, "v/m", &q, false).await;
        assert_eq!(st, 200);
        ids.push(id);
    }
    let list = until(p, "five done", |l| l.iter().all(|r| r["done"] == true)).await;
    let kept: Vec<&str> = list.iter().map(|r| r["id"].as_str().unwrap()).collect();
    assert_eq!(kept, [ids[4].as_str(), ids[3].as_str(), ids[2].as_str()], "newest first, three kept");
    let (st, _) = get(p, &format!("/console/api/requests/{}", ids[0]), Some(ADMIN_KEY)).await;
    assert_eq!(st, 404, "fell out of the ring");
    let d = api(p, &format!("/console/api/requests/{}", ids[4])).await;
    for b in [&d["client_request"], &d["upstream"][0]["request"]] {
        assert_eq!(b["truncated"], true, "{b}");
        assert!(b["text"].as_str().unwrap().len() <= 300);
        assert!(b["bytes"].as_u64().unwrap() > 2000);
    }
}

#[tokio::test]
async fn a_request_shows_what_its_upstream_answers_cost() {
    let s = on("record_always = true").await;
    let p = &s.proxy;
    // Two upstream answers (the hidden loop), 1 prompt + 1 completion token each,
    // at 1000 and 2000 per million: 2 × (0.001 + 0.002).
    let (st, id, _) = chat(p, "v/m", "what time is it?", false).await;
    assert_eq!(st, 200);
    until(p, "the loop done", |l| l.iter().any(|r| r["id"] == id.as_str() && r["done"] == true)).await;
    let d = api(p, &format!("/console/api/requests/{id}")).await;
    assert_eq!(d["upstream_calls"], 2, "{d}");
    assert_eq!(d["cost"]["currency"], "USD");
    let amount: f64 = d["cost"]["amount"].as_str().unwrap().parse().unwrap();
    assert!((amount - 0.006).abs() < 1e-12, "{amount}");
}

#[tokio::test]
async fn a_hidden_tool_loop_is_a_timeline_under_the_request_id() {
    let s = on("record_always = true").await;
    let p = &s.proxy;
    let (st, id, body) = chat(p, "v/m", "what time is it?", true).await;
    assert_eq!(st, 200, "{body}");
    assert!(body.contains("The tool said"), "{body}");
    until(p, "done", |l| l.first().is_some_and(|r| r["done"] == true)).await;
    let d = api(p, &format!("/console/api/requests/{id}")).await;
    assert_eq!(d["id"], id);
    assert_eq!(d["status"], 200);
    assert_eq!(d["provider"], "v");
    assert_eq!(d["tool_calls"], 1);
    assert_eq!(d["upstream_calls"], 2, "two iterations upstream");
    assert!(d["ttft_ms"].is_u64());
    assert_eq!(d["usage"]["total_tokens"], 4, "summed over the iterations: {}", d["usage"]);
    let tl = d["timeline"].as_array().unwrap();
    let iterations: Vec<&Value> = tl.iter().filter(|e| e["type"] == "iteration").collect();
    assert_eq!(iterations.len(), 2, "{tl:#?}");
    assert!(iterations[0]["server_tools"].as_array().unwrap().contains(&json!("current_time")), "{tl:#?}");
    let call = tl.iter().find(|e| e["type"] == "tool_call").unwrap();
    assert_eq!(call["tool"], "current_time");
    assert_eq!(call["arguments"], json!({"utc_offset": "+02:00"}));
    assert_eq!(call["status"], "ok");
    assert!(call["result"].as_str().unwrap().contains("+02:00"), "{call}");
    // What went upstream second carries the tool's result; what the client got is the SSE.
    assert!(d["upstream"][1]["request"]["text"].as_str().unwrap().contains("call_t1"));
    assert!(d["upstream"][0]["response"]["text"].as_str().unwrap().contains("current_time"));
    assert!(d["client_response"]["text"].as_str().unwrap().contains("[DONE]"));
    // A failing upstream: its status and message.
    let (st, id, _) = chat(p, "v/broken", "hi", false).await;
    assert_eq!(st, 500);
    until(p, "the failure done", |l| l.first().is_some_and(|r| r["id"] == id && r["done"] == true)).await;
    let d = api(p, &format!("/console/api/requests/{id}")).await;
    assert!(d["error"].as_str().unwrap().contains("upstream exploded"), "{d}");
    assert_eq!(d["upstream"][0]["status"], 500);
    let proxy = api(p, "/console/api/proxy").await;
    assert_eq!(proxy["providers"][0]["name"], "v");
    assert_eq!(proxy["providers"][0]["circuit"], "closed");
    assert!(proxy["errors"].as_array().unwrap().iter().any(|e| e["id"] == id));
}

#[tokio::test]
async fn the_timeline_is_live_while_the_request_runs() {
    let s = on("record_always = true").await;
    let p = &s.proxy;
    let (http, url) = (p.http.clone(), p.url("/v1/chat/completions"));
    let body = json!({"model": "v/m", "messages": [{"role": "user", "content": "what time is it, slowly?"}]});
    let running = tokio::spawn(async move {
        let r = http.post(url).bearer_auth(PROXY_KEY).header("x-request-id", "live-1").json(&body).send().await;
        r.unwrap().text().await.unwrap()
    });
    let start = Instant::now();
    loop {
        let (st, text) = get(p, "/console/api/requests/live-1", Some(ADMIN_KEY)).await;
        if st == 200 {
            let d: Value = serde_json::from_str(&text).unwrap();
            if d["timeline"].as_array().unwrap().iter().any(|e| e["type"] == "tool_call") {
                assert_eq!(d["done"], false, "the call is shown before the answer: {d}");
                assert!(d["duration_ms"].as_u64().unwrap() < SLOW.as_millis() as u64 + 1000);
                break;
            }
        }
        assert!(start.elapsed() < SLOW, "the tool call was not shown while the request ran");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(running.await.unwrap().contains("Done, slowly."));
    let d = api(p, "/console/api/requests/live-1").await;
    assert_eq!(d["done"], true);
    assert_eq!(d["status"], 200);
}

#[tokio::test]
async fn no_key_appears_in_anything_the_console_serves() {
    let s = on("").await;
    let p = &s.proxy;
    let live = Live::open(p).await;
    let mut ids = Vec::new();
    for (model, q, stream) in [
        ("v/m", "hi", false),
        ("v/m", "leak it", false),
        ("v/m", "leak it", true),
        ("v/m", "what time is it?", true),
        ("v/broken", "hi", false),
    ] {
        let (_, id, body) = chat(p, model, q, stream).await;
        ids.push(id);
        // The leak is real: the client got what the upstream wrote.
        if q == "leak it" {
            assert!(!body.is_empty());
        }
    }
    // The Anthropic front's key header too.
    let r = p
        .http
        .post(p.url("/v1/messages"))
        .header("x-api-key", PROXY_KEY)
        .header("anthropic-version", "2023-06-01")
        .json(&json!({"model": "v/m", "max_tokens": 10, "messages": [{"role": "user", "content": format!("leak {PROXY_KEY}")}]}))
        .send()
        .await
        .unwrap();
    ids.push(r.headers()["x-request-id"].to_str().unwrap().to_string());
    let list = until(p, "all done", |l| l.len() == ids.len() && l.iter().all(|r| r["done"] == true)).await;
    assert_eq!(list[0]["front"], "messages");
    let mut served = Vec::new();
    for path in
        ["/console", "/console/assets/app.js", "/console/assets/app.css", "/console/api/requests", "/console/api/proxy"]
    {
        served.push(get(p, path, Some(ADMIN_KEY)).await.1);
    }
    for id in &ids {
        served.push(get(p, &format!("/console/requests/{id}"), Some(ADMIN_KEY)).await.1);
        let d = get(p, &format!("/console/api/requests/{id}"), Some(ADMIN_KEY)).await.1;
        assert!(d.contains("[REDACTED]") || !d.contains("leak"), "{d}");
        served.push(d);
    }
    served.push(get(p, "/console", None).await.1);
    served.push(live.close());
    let all = served.join("\n");
    assert!(all.contains("Hello from upstream"), "the bodies were served");
    for key in [PROXY_KEY, PROVIDER_KEY, ADMIN_KEY] {
        assert!(!all.contains(key), "{key} served by the console");
        // Nor a recognisable half of it.
        assert!(!all.contains(&key[..key.len() / 2 + 4]), "part of {key} served by the console");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_console_in_a_real_browser() {
    assert!(Path::new("/usr/bin/chromium").exists(), "Debian's chromium is needed (apt-get install chromium)");
    let py = tokio::task::spawn_blocking(pyenv::playwright_env).await.unwrap();
    let s = on("").await;
    let artifacts = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/console-artifacts");
    std::fs::create_dir_all(&artifacts).unwrap();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/console/browser.py");
    let base = s.proxy.url("");
    let out = tokio::task::spawn_blocking(move || {
        pyenv::run(
            Command::new(py)
                .arg(script)
                .env("MODELSHIM_BASE_URL", base)
                .env("MODELSHIM_ADMIN", ADMIN_KEY)
                .env("MODELSHIM_KEY", PROXY_KEY)
                .env("ARTIFACTS", &artifacts),
        )
    })
    .await
    .unwrap();
    match out {
        Ok(text) => {
            println!("{text}");
            assert!(text.contains("ALL OK"), "{text}");
        }
        Err(text) => panic!("the browser test failed:\n{text}"),
    }
}
