//! Hardening, round 2 (issue #44): each finding of the attack, replayed at
//! the level where it happened — budgets under 40 concurrent requests, a
//! browser page on another site or port (Debian's Chromium under
//! Playwright), a rebinding `Host`, the real binary's console and
//! `--record` fixtures, implausible usage, a sidecar's loopback clients.

use crate::common;
use crate::support::pyenv;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::*;
use serde_json::{Value, json};
use wiremock::matchers::{body_string_contains, method};
use wiremock::{Mock, MockServer, ResponseTemplate};

fn fifteen_tokens() -> Value {
    let mut c = completion(json!({"role": "assistant", "content": "ok"}), "stop");
    c["usage"] = json!({"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15});
    c
}

/// An upstream that takes `delay` and answers 15 tokens.
async fn slow_upstream(delay: Duration) -> MockServer {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(200).set_body_json(fifteen_tokens()).set_delay(delay))
        .mount(&server)
        .await;
    server
}

async fn keyed_proxy(upstream: &str, auth: &str) -> Proxy {
    let auth: modelshim::config::auth::AuthConfig = toml::from_str(auth).unwrap();
    proxy_with("", upstream, move |c| c.auth = Some(auth)).await
}

/// A proxy in front of `upstream` with the top-level config keys of `toml_text`.
async fn proxy_toml(upstream: &str, toml_text: &str) -> Proxy {
    let mut parsed: modelshim::config::Config = toml::from_str(toml_text).unwrap();
    proxy_with("", upstream, move |c| {
        parsed.providers = std::mem::take(&mut c.providers);
        *c = parsed;
    })
    .await
}

fn small_request() -> Value {
    json!({"model": "v/m", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]})
}

/// Item 1: 40 requests at once on a key with `tokens_per_day = 100`, the
/// upstream taking 1 s and using 15 tokens each. Reserved before they are
/// sent, they cannot all pass: what is served stays within the budget plus
/// one request, and the 429 says the bound.
#[tokio::test]
async fn a_token_budget_holds_under_forty_concurrent_requests() {
    let server = slow_upstream(Duration::from_secs(1)).await;
    let p = keyed_proxy(&server.uri(), r#"keys = [{ key = "sk-race-key-0001", name = "race", tokens_per_day = 100 }]"#)
        .await;
    let mut tasks = Vec::new();
    for _ in 0..40 {
        let (http, url) = (p.http.clone(), p.url("/v1/chat/completions"));
        tasks.push(tokio::spawn(async move {
            let r = http.post(url).bearer_auth("sk-race-key-0001").json(&small_request()).send().await.unwrap();
            let st = r.status().as_u16();
            (st, r.json::<Value>().await.unwrap_or_default())
        }));
    }
    let mut served = 0;
    let mut refusal = None;
    for t in tasks {
        let (st, body) = t.await.unwrap();
        match st {
            200 => served += 1,
            429 => refusal = Some(body),
            other => panic!("unexpected {other}: {body}"),
        }
    }
    assert!(served >= 1, "nothing served");
    assert!(served * 15 <= 100 + 15, "{served} served: {} tokens of a 100 budget", served * 15);
    assert_eq!(server.received_requests().await.unwrap().len(), served);
    let refusal = refusal.expect("some were refused");
    let msg = refusal["error"]["message"].as_str().unwrap();
    assert_eq!(refusal["error"]["code"], "insufficient_quota", "{refusal}");
    assert!(msg.contains("tokens_per_day") && msg.contains("at most one request"), "says the bound: {msg}");
    // Settled from the real usage: every reservation is released.
    let t = Instant::now();
    loop {
        let r = p.http.get(p.url("/v1/usage")).bearer_auth("sk-race-key-0001").send().await.unwrap();
        let u: Value = r.json().await.unwrap();
        if u["today"]["tokens"] == served as u64 * 15 {
            break;
        }
        assert!(t.elapsed() < Duration::from_secs(5), "{u}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // A failed request releases what it held: the budget is not eaten.
    let failing = MockServer::start().await;
    Mock::given(method("POST")).respond_with(ResponseTemplate::new(500)).mount(&failing).await;
    let q = proxy_toml(
        &failing.uri(),
        "[auth]\nkeys = [{ key = \"sk-fail-key-0001\", name = \"fails\", tokens_per_day = 100 }]\n\
         [upstream]\nretries = 0\nbreaker_failures = 0\n",
    )
    .await;
    for _ in 0..20 {
        let r = q.http.post(q.url("/v1/chat/completions")).bearer_auth("sk-fail-key-0001").json(&small_request());
        assert_ne!(r.send().await.unwrap().status(), 429, "a failure kept its reservation");
    }
}

/// The same budget as a cost: reserved at the model's price.
#[tokio::test]
async fn a_cost_budget_holds_under_concurrent_requests() {
    let server = slow_upstream(Duration::from_secs(1)).await;
    // 15 tokens at 1.0 per million each way: 15e-6 a request; a budget of 6e-5.
    let auth: modelshim::config::auth::AuthConfig =
        toml::from_str(r#"keys = [{ key = "sk-cost-key-0001", name = "cost", cost_per_day = 0.00006 }]"#).unwrap();
    let p =
        proxy_with("[prices.\"m\"]\ninput = 1.0\noutput = 1.0\n", &server.uri(), move |c| c.auth = Some(auth)).await;
    let mut tasks = Vec::new();
    for _ in 0..30 {
        let (http, url) = (p.http.clone(), p.url("/v1/chat/completions"));
        tasks.push(tokio::spawn(async move {
            http.post(url).bearer_auth("sk-cost-key-0001").json(&small_request()).send().await.unwrap().status()
        }));
    }
    let mut served = 0;
    for t in tasks {
        if t.await.unwrap() == 200 {
            served += 1;
        }
    }
    assert!((1..=5).contains(&served), "{served} served on a budget of 4");
}

async fn text_plain_post(p: &Proxy, headers: &[(&str, &str)]) -> (u16, String) {
    let mut r = p
        .http
        .post(p.url("/v1/chat/completions"))
        .header("content-type", "text/plain")
        .body(json!({"model": "v/m", "messages": [{"role": "user", "content": "hi"}]}).to_string());
    for (k, v) in headers {
        r = r.header(*k, *v);
    }
    let r = r.send().await.unwrap();
    (r.status().as_u16(), r.text().await.unwrap())
}

/// Item 2, at the HTTP level: `Origin` not allowed, or `Sec-Fetch-Site:
/// cross-site`, is a 403 before anything goes upstream; an SDK (neither
/// header) is served.
#[tokio::test]
async fn an_open_proxy_refuses_browser_cross_site_requests() {
    let server = slow_upstream(Duration::ZERO).await;
    let p = proxy("", &server.uri()).await;
    for h in [
        vec![("origin", "https://evil.example")],
        vec![("origin", "null")],
        vec![("sec-fetch-site", "cross-site")],
        vec![("origin", "http://127.0.0.1:9"), ("sec-fetch-site", "same-site")],
    ] {
        let (st, body) = text_plain_post(&p, &h).await;
        assert_eq!(st, 403, "{h:?}: {body}");
        assert!(body.contains("allowed_origins"), "{body}");
    }
    assert_eq!(server.received_requests().await.unwrap().len(), 0, "the upstream was called");
    let (st, body) = text_plain_post(&p, &[]).await;
    assert_eq!(st, 200, "{body}");
}

/// Item 2: a browser app the operator lists in `allowed_origins` gets proper
/// CORS answers, the preflight included.
#[tokio::test]
async fn an_allowed_origin_gets_cors_answers() {
    let server = slow_upstream(Duration::ZERO).await;
    let p = proxy_toml(&server.uri(), r#"allowed_origins = ["https://app.example"]"#).await;
    let pre = p
        .http
        .request(reqwest::Method::OPTIONS, p.url("/v1/chat/completions"))
        .header("origin", "https://app.example")
        .header("access-control-request-method", "POST")
        .header("access-control-request-headers", "authorization, content-type")
        .send()
        .await
        .unwrap();
    assert_eq!(pre.status(), 204);
    assert_eq!(pre.headers()["access-control-allow-origin"], "https://app.example");
    assert!(pre.headers()["access-control-allow-methods"].to_str().unwrap().contains("POST"));
    let allowed = pre.headers()["access-control-allow-headers"].to_str().unwrap().to_ascii_lowercase();
    assert!(allowed.contains("authorization") && allowed.contains("content-type"), "{allowed}");
    assert!(pre.headers()["vary"].to_str().unwrap().to_ascii_lowercase().contains("origin"));
    let (st, _) = text_plain_post(&p, &[("origin", "https://app.example"), ("sec-fetch-site", "cross-site")]).await;
    assert_eq!(st, 200);
    let r = p
        .http
        .post(p.url("/v1/chat/completions"))
        .header("origin", "https://app.example")
        .json(&small_request())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["access-control-allow-origin"], "https://app.example");
    // Another origin's preflight gets no permission.
    let pre = p
        .http
        .request(reqwest::Method::OPTIONS, p.url("/v1/chat/completions"))
        .header("origin", "https://other.example")
        .header("access-control-request-method", "POST")
        .send()
        .await
        .unwrap();
    assert_eq!(pre.status(), 403);
    assert!(pre.headers().get("access-control-allow-origin").is_none());
}

/// Item 3: DNS rebinding. On a loopback listener the `Host` must be a
/// loopback name or address, or one in `allowed_hosts`.
#[tokio::test]
async fn a_rebinding_host_is_refused_on_loopback() {
    let server = slow_upstream(Duration::ZERO).await;
    let p = proxy("", &server.uri()).await;
    let send = |host: &'static str| {
        p.http.post(p.url("/v1/chat/completions")).header("host", host).json(&small_request()).send()
    };
    for host in ["rebind.evil.example", "rebind.evil.example:8787", "10.0.0.1"] {
        let st = send(host).await.unwrap().status().as_u16();
        assert!(st == 421 || st == 403, "{host}: {st}");
    }
    assert_eq!(server.received_requests().await.unwrap().len(), 0, "the upstream was called");
    for host in ["localhost:8787", "127.0.0.1", "[::1]:8787", "api.localhost"] {
        assert_eq!(send(host).await.unwrap().status(), 200, "{host}");
    }
    let q = proxy_toml(&server.uri(), r#"allowed_hosts = ["shim.internal"]"#).await;
    let r = q.http.post(q.url("/v1/chat/completions")).header("host", "shim.internal:8787").json(&small_request());
    assert_eq!(r.send().await.unwrap().status(), 200);
}

/// Item 10: an upstream reporting `u64::MAX` tokens does not lock the key
/// out: usage beyond the sane bound is estimated, logged and counted.
#[tokio::test]
async fn implausible_usage_is_estimated_not_charged() {
    let server = MockServer::start().await;
    let mut c = completion(json!({"role": "assistant", "content": "ok"}), "stop");
    c["usage"] = json!({"prompt_tokens": u64::MAX, "completion_tokens": u64::MAX, "total_tokens": u64::MAX});
    Mock::given(method("POST")).respond_with(ResponseTemplate::new(200).set_body_json(c)).mount(&server).await;
    let auth: modelshim::config::auth::AuthConfig =
        toml::from_str(r#"keys = [{ key = "sk-huge-key-0001", name = "huge", tokens_per_day = 100000 }]"#).unwrap();
    let p =
        proxy_with("[prices.\"m\"]\ninput = 1.0\noutput = 1.0\n", &server.uri(), move |c| c.auth = Some(auth)).await;
    let chat = || p.http.post(p.url("/v1/chat/completions")).bearer_auth("sk-huge-key-0001").json(&small_request());
    assert_eq!(chat().send().await.unwrap().status(), 200);
    tokio::time::sleep(Duration::from_millis(200)).await;
    let r = p.http.get(p.url("/v1/usage")).bearer_auth("sk-huge-key-0001").send().await.unwrap();
    let u: Value = r.json().await.unwrap();
    let tokens = u["today"]["tokens"].as_u64().unwrap();
    assert!(tokens > 0 && tokens < 1000, "estimated, not charged: {u}");
    assert!(u["today"]["cost"].as_f64().unwrap() < 0.01, "{u}");
    assert_eq!(chat().send().await.unwrap().status(), 200, "the key is not locked out");
    let metrics = p.http.get(p.url("/metrics")).send().await.unwrap().text().await.unwrap();
    assert!(metrics.contains("modelshim_usage_implausible_total"), "counted in a metric");
}

/// Item 12: the docs say which headers carry a proxy key.
#[test]
fn production_docs_name_both_key_headers() {
    let doc = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/production.md")).unwrap();
    assert!(doc.contains("x-api-key"), "docs/production.md does not say x-api-key carries a proxy key");
}

/// Item 11: a sidecar's app connects from 127.0.0.1 only; loopback clients
/// are not held to `max_connections_per_ip` by default (the real binary's
/// accept loop).
#[tokio::test]
async fn loopback_clients_are_not_capped_per_address() {
    let server = slow_upstream(Duration::ZERO).await;
    let config = format!(
        "[providers.v]\nbase_url = \"{}/v1\"\nmodels = [\"m\"]\n[limits]\nmax_connections_per_ip = 2\n",
        server.uri()
    );
    let s = serve_process(&config, &[]).await;
    let mut held = Vec::new();
    for _ in 0..4 {
        held.push(tokio::net::TcpStream::connect(s.proxy.addr).await.unwrap());
    }
    // A fresh client (its own connection, the fifth open one).
    let http = reqwest::Client::builder().pool_max_idle_per_host(0).build().unwrap();
    let r = tokio::time::timeout(
        Duration::from_secs(5),
        http.post(s.proxy.url("/v1/chat/completions")).json(&small_request()).send(),
    )
    .await
    .unwrap();
    assert_eq!(r.expect("the fifth loopback connection was served").status(), 200);
    drop(held);
}

// ---------------------------------------------------------------------------
// The real binary with a console and `--record`: items 4 to 9.

const PROVIDER_KEY: &str = "sk-provider-hardening-Zq81LmTT4v";
const PROVIDER_ENV: &str = "MODELSHIM_HARDENING_PROVIDER_KEY";
const ADMIN_KEY: &str = "admin-hardening-test-9Pp2Ws";
const ADMIN_ENV: &str = "MODELSHIM_HARDENING_ADMIN_KEY";
const MCP_TOKEN: &str = "mcp-arg-token-V6n3Jr0Qa";

/// `modelshim serve --record DIR` with a console, killed on drop.
struct Bin {
    child: std::process::Child,
    proxy: Proxy,
    dir: tempfile::TempDir,
}

impl Drop for Bin {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Bin {
    fn fixtures(&self) -> PathBuf {
        self.dir.path().join("recorded")
    }
}

async fn bin(upstream: &str, console_extra: &str) -> Bin {
    modelshim::provider::upstream::install_crypto_provider();
    let dir = tempfile::tempdir().unwrap();
    let skills = dir.path().join("skills");
    std::fs::create_dir_all(skills.join("note")).unwrap();
    std::fs::write(skills.join("note/SKILL.md"), "---\nname: note\ndescription: Writes notes.\n---\nBe brief.\n")
        .unwrap();
    let config = format!(
        "[providers.v]\nprofile = \"openai\"\nbase_url = \"{upstream}/v1\"\napi_key_env = \"{PROVIDER_ENV}\"\nmodels = [\"m\"]\n\
         [upstream]\nretries = 0\n\
         [skills]\ndirs = [{skills:?}]\nauto_reload = false\n\
         [mcp.servers.tokened]\ncommand = \"/bin/false\"\nargs = [\"--token\", \"{MCP_TOKEN}\"]\n\
         [console]\nenabled = true\nrecord_always = true\nadmin_key_env = \"{ADMIN_ENV}\"\n{console_extra}\n",
        skills = skills.display().to_string(),
    );
    let path = dir.path().join("modelshim.toml");
    std::fs::write(&path, config).unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let addr: SocketAddr = ([127, 0, 0, 1], port).into();
    let child = std::process::Command::new(env!("CARGO_BIN_EXE_modelshim"))
        .args(["serve", "--config"])
        .arg(&path)
        .args(["--listen", &addr.to_string(), "--record"])
        .arg(dir.path().join("recorded"))
        .current_dir(dir.path())
        .env("HOME", dir.path())
        .env("RUST_LOG", "warn")
        .env(PROVIDER_ENV, PROVIDER_KEY)
        .env(ADMIN_ENV, ADMIN_KEY)
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(dir.path().join("stderr.log")).unwrap())
        .spawn()
        .unwrap();
    let mut b = Bin { child, proxy: Proxy { addr, http: reqwest::Client::new() }, dir };
    let t = Instant::now();
    loop {
        if let Ok(r) = b.proxy.http.get(b.proxy.url("/readyz")).send().await
            && r.status() == 200
        {
            return b;
        }
        assert!(b.child.try_wait().unwrap().is_none(), "modelshim exited before it was ready");
        assert!(t.elapsed() < Duration::from_secs(30), "modelshim was not ready within 30 s");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn admin_get(p: &Proxy, path: &str) -> Value {
    let r = p.http.get(p.url(path)).bearer_auth(ADMIN_KEY).send().await.unwrap();
    assert_eq!(r.status(), 200, "{path}");
    r.json().await.unwrap()
}

/// The record of request `id`, once done.
async fn record(p: &Proxy, id: &str) -> Value {
    let t = Instant::now();
    loop {
        let r = p.http.get(p.url(&format!("/console/api/requests/{id}"))).bearer_auth(ADMIN_KEY).send().await.unwrap();
        if r.status() == 200 {
            let v: Value = r.json().await.unwrap();
            if v["done"] == true {
                return v;
            }
        }
        assert!(t.elapsed() < Duration::from_secs(10), "no finished record of {id}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Items 5, 6 and 8: the provider key streamed back split over two SSE
/// events, and JSON-escaped in a whole body, is in neither the console's
/// record nor the `--record` fixtures; the fixtures are 0600 in a 0700 folder.
#[tokio::test]
async fn split_and_escaped_keys_leak_nowhere_and_fixtures_are_private() {
    let upstream = MockServer::start().await;
    let (head, tail) = PROVIDER_KEY.split_at(PROVIDER_KEY.len() / 2);
    let events = [
        chunk(json!({"role": "assistant", "content": "the key is "}), None),
        chunk(json!({"content": head}), None),
        chunk(json!({"content": tail}), None),
        chunk(json!({}), Some("stop")),
    ];
    Mock::given(method("POST"))
        .and(body_string_contains("\"stream\":true"))
        .respond_with(ResponseTemplate::new(200).set_body_raw(sse_body(&events), "text/event-stream"))
        .with_priority(1)
        .mount(&upstream)
        .await;
    // `\u0073k-…`: the key with its first letter escaped, as JSON allows.
    let escaped = format!("\\u0073{}", &PROVIDER_KEY[1..]);
    let body = format!(
        r#"{{"id":"up-1","object":"chat.completion","created":1,"model":"m","choices":[{{"index":0,"message":{{"role":"assistant","content":"the key is {escaped}"}},"finish_reason":"stop"}}],"usage":{{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}}}"#
    );
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(200).set_body_raw(body, "application/json"))
        .with_priority(2)
        .mount(&upstream)
        .await;
    let b = bin(&upstream.uri(), "").await;
    let p = &b.proxy;
    let mut ids = Vec::new();
    for stream in [true, false] {
        let mut req = small_request();
        req["stream"] = json!(stream);
        let r = p.http.post(p.url("/v1/chat/completions")).json(&req).send().await.unwrap();
        assert_eq!(r.status(), 200);
        ids.push(r.headers()["x-request-id"].to_str().unwrap().to_string());
        r.text().await.unwrap();
    }
    let mut shown = String::new();
    for id in &ids {
        shown.push_str(&record(p, id).await.to_string());
    }
    for part in [head, tail, &PROVIDER_KEY[1..]] {
        assert!(!shown.contains(part), "the console shows {part}: {shown}");
    }
    assert!(shown.contains("[REDACTED]"), "{shown}");
    // The fixtures (written when each exchange ends).
    let dir = b.fixtures();
    let t = Instant::now();
    let files = loop {
        let files: Vec<PathBuf> =
            std::fs::read_dir(&dir).map(|d| d.map(|e| e.unwrap().path()).collect()).unwrap_or_default();
        if files.len() >= 2 {
            break files;
        }
        assert!(t.elapsed() < Duration::from_secs(10), "fixtures: {files:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777, 0o700, "the folder");
    for f in &files {
        let text = std::fs::read_to_string(f).unwrap();
        for part in [head, tail, &PROVIDER_KEY[1..]] {
            assert!(!text.contains(part), "{} holds {part}:\n{text}", f.display());
        }
        assert_eq!(std::fs::metadata(f).unwrap().permissions().mode() & 0o777, 0o600, "{}", f.display());
    }
}

/// Item 7: an MCP server's arguments (a token) are not on the console's
/// proxy page.
#[tokio::test]
async fn mcp_arguments_are_not_shown() {
    let upstream = MockServer::start().await;
    let b = bin(&upstream.uri(), "").await;
    let v = admin_get(&b.proxy, "/console/api/proxy").await;
    let text = v.to_string();
    assert!(text.contains("tokened"), "the server is listed: {text}");
    assert!(!text.contains(MCP_TOKEN), "{text}");
}

/// The session cookie and CSRF token of a login (the token from the page).
async fn login(http: &reqwest::Client, p: &Proxy) -> (String, String) {
    let r = http
        .post(p.url("/console/login"))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(format!("key={ADMIN_KEY}"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 303);
    let cookie = r.headers()["set-cookie"].to_str().unwrap().split(';').next().unwrap().to_string();
    let page = http.get(p.url("/console")).header("cookie", &cookie).send().await.unwrap().text().await.unwrap();
    let token = regex::Regex::new(r#"name="csrf-token" content="([0-9a-f]+)""#)
        .unwrap()
        .captures(&page)
        .map(|c| c[1].to_string())
        .expect("the page carries the session's CSRF token");
    (cookie, token)
}

fn no_redirects() -> reqwest::Client {
    reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap()
}

/// Item 4 at the HTTP level: a state-changing console route wants the
/// session's CSRF token and a same-origin request.
#[tokio::test]
async fn console_writes_want_the_csrf_token_and_the_same_origin() {
    let upstream = MockServer::start().await;
    let b = bin(&upstream.uri(), "").await;
    let p = &b.proxy;
    let http = no_redirects();
    let (cookie, token) = login(&http, p).await;
    let generation = || async { admin_get(p, "/console/api/proxy").await["skills"]["generation"].clone() };
    let before = generation().await;
    let reload = |headers: Vec<(&'static str, String)>| {
        let mut r = http.post(p.url("/console/api/skills/reload")).header("cookie", &cookie);
        for (k, v) in headers {
            r = r.header(k, v);
        }
        r.send()
    };
    let other_port = "http://127.0.0.1:1".to_string();
    let own = format!("http://{}", p.addr);
    for (what, h) in [
        ("no token", vec![]),
        ("a wrong token", vec![("x-csrf-token", "00".repeat(16))]),
        ("another port", vec![("x-csrf-token", token.clone()), ("origin", other_port.clone())]),
        ("same-site", vec![("x-csrf-token", token.clone()), ("sec-fetch-site", "same-site".into())]),
    ] {
        assert_eq!(reload(h).await.unwrap().status(), 403, "{what}");
    }
    assert_eq!(generation().await, before, "reloaded by a forged request");
    let r = reload(vec![
        ("x-csrf-token", token.clone()),
        ("origin", own.clone()),
        ("sec-fetch-site", "same-origin".into()),
    ]);
    assert_eq!(r.await.unwrap().status(), 200);
    assert_ne!(generation().await, before);
}

/// Item 9: logout revokes the session; repeated failed logins are slowed.
#[tokio::test]
async fn logout_revokes_the_session_and_failed_logins_are_throttled() {
    let upstream = MockServer::start().await;
    let b = bin(&upstream.uri(), "session_ttl_secs = 2").await;
    let p = &b.proxy;
    let http = no_redirects();
    let (cookie, token) = login(&http, p).await;
    let list = |c: String| http.get(p.url("/console/api/requests")).header("cookie", c).send();
    assert_eq!(list(cookie.clone()).await.unwrap().status(), 200);
    let r = http
        .post(p.url("/console/logout"))
        .header("cookie", &cookie)
        .header("content-type", "application/x-www-form-urlencoded")
        .body(format!("csrf={token}"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 303);
    assert_eq!(list(cookie.clone()).await.unwrap().status(), 401, "the cookie still works after logout");
    // Sessions expire.
    let (cookie, _) = login(&http, p).await;
    assert_eq!(list(cookie.clone()).await.unwrap().status(), 200);
    tokio::time::sleep(Duration::from_millis(2200)).await;
    assert_eq!(list(cookie).await.unwrap().status(), 401, "the session outlived session_ttl_secs");
    // Failed logins: after a few, refused without a look at the key.
    let attempt = |key: &str| {
        http.post(p.url("/console/login"))
            .header("content-type", "application/x-www-form-urlencoded")
            .body(format!("key={key}"))
            .send()
    };
    let mut throttled = None;
    for i in 0..12 {
        let r = attempt("wrong-key").await.unwrap();
        if r.status() == 429 {
            throttled = Some((i, r.headers().get("retry-after").cloned()));
            break;
        }
        assert_eq!(r.status(), 401);
    }
    let (i, retry) = throttled.expect("12 wrong keys in a row were never slowed down");
    assert!(i <= 10, "{i}");
    assert!(retry.is_some(), "a throttled login says when to retry");
    assert_eq!(attempt(ADMIN_KEY).await.unwrap().status(), 429, "even the right key waits");
}

// ---------------------------------------------------------------------------
// Chromium: items 2 and 4 where the browser is the point.

/// A page on another site (`evil.test`, resolved to 127.0.0.1 by Chromium)
/// sends the `no-cors` `text/plain` POST to the open proxy; a page on
/// another port of 127.0.0.1 submits a form to the console's skills reload
/// while the admin is logged in. Neither reaches its target.
#[tokio::test(flavor = "multi_thread")]
async fn a_page_on_another_origin_can_use_neither_the_proxy_nor_the_console() {
    assert!(Path::new("/usr/bin/chromium").exists(), "Debian's chromium is needed (apt-get install chromium)");
    let py = tokio::task::spawn_blocking(pyenv::playwright_env).await.unwrap();
    let upstream = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(200).set_body_json(fifteen_tokens()))
        .mount(&upstream)
        .await;
    let b = bin(&upstream.uri(), "").await;
    let before = admin_get(&b.proxy, "/console/api/proxy").await["skills"]["generation"].clone();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/console/cross_site.py");
    let base = b.proxy.url("");
    let out = tokio::task::spawn_blocking(move || {
        pyenv::run(Command::new(py).arg(script).env("MODELSHIM_BASE_URL", base).env("MODELSHIM_ADMIN", ADMIN_KEY))
    })
    .await
    .unwrap();
    let text = out.unwrap_or_else(|e| panic!("the browser script failed:\n{e}"));
    assert!(text.contains("ALL SENT"), "{text}");
    assert_eq!(upstream.received_requests().await.unwrap().len(), 0, "the page used the proxy:\n{text}");
    let after = admin_get(&b.proxy, "/console/api/proxy").await["skills"]["generation"].clone();
    assert_eq!(after, before, "the page on another port reloaded the skills:\n{text}");
}
