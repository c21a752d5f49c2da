//! Production behaviour end to end: proxy keys, limits, upstream timeouts,
//! retries, fallback chains, circuit breaker, metrics, backpressure and
//! graceful shutdown — each against a real server on a loopback port.

use crate::common;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::response::Response;
use common::*;
use modelshim::config::{Config, ModelAlias, ProviderConfig};
use serde_json::{Value, json};
use wiremock::matchers::{header, method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

const KEY: &str = "sk-proxy-test-key-1";

fn hello() -> Value {
    json!({"model": "v/m", "messages": [{"role": "user", "content": "hi"}]})
}

fn ok_completion() -> Value {
    completion(json!({"role": "assistant", "content": "hello"}), "stop")
}

async fn ok_upstream() -> MockServer {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(ResponseTemplate::new(200).set_body_json(ok_completion()))
        .mount(&server)
        .await;
    server
}

fn upstream_table(t: &str) -> toml::Table {
    toml::from_str(t).unwrap()
}

fn with_auth(c: &mut Config, auth: &str) {
    c.auth = Some(toml::from_str(auth).unwrap());
}

async fn post(p: &Proxy, key: Option<&str>, body: &Value) -> (u16, reqwest::header::HeaderMap, Value) {
    let mut rb = p.http.post(p.url("/v1/chat/completions")).json(body);
    if let Some(k) = key {
        rb = rb.bearer_auth(k);
    }
    let r = rb.send().await.unwrap();
    let status = r.status().as_u16();
    let headers = r.headers().clone();
    let text = r.text().await.unwrap();
    (status, headers, serde_json::from_str(&text).unwrap_or(Value::String(text)))
}

// ---------------------------------------------------------------- auth

#[tokio::test]
async fn auth_none_wrong_right_and_key_never_forwarded() {
    let server = ok_upstream().await;
    // The provider's key comes from HOME (always set), so the upstream must
    // see that and never the proxy key.
    let p = proxy_with("api_key_env = \"HOME\"", &server.uri(), |c| with_auth(c, &format!("keys = [\"{KEY}\"]"))).await;
    let (st, _, body) = post(&p, None, &hello()).await;
    assert_eq!(st, 401, "{body}");
    assert_eq!(body["error"]["code"], "invalid_api_key");
    let (st, _, body) = post(&p, Some("sk-proxy-test-key-2"), &hello()).await;
    assert_eq!(st, 401, "{body}");
    assert_eq!(body["error"]["message"], "Incorrect API key provided.");
    let (st, _, body) = post(&p, Some(KEY), &hello()).await;
    assert_eq!(st, 200, "{body}");
    assert_eq!(body["choices"][0]["message"]["content"], "hello");

    let seen = server.received_requests().await.unwrap();
    assert_eq!(seen.len(), 1, "refused requests never reach the upstream");
    for r in &seen {
        for (name, value) in &r.headers {
            assert!(!value.to_str().unwrap_or_default().contains(KEY), "proxy key forwarded in {name}");
        }
        assert!(!String::from_utf8_lossy(&r.body).contains(KEY), "proxy key in the body");
        if let Ok(home) = std::env::var("HOME") {
            assert_eq!(r.headers["authorization"], format!("Bearer {home}"));
        }
    }
    // Models and embeddings are behind the key too; probes are not.
    assert_eq!(p.http.get(p.url("/v1/models")).send().await.unwrap().status(), 401);
    assert_eq!(p.http.get(p.url("/v1/models")).bearer_auth(KEY).send().await.unwrap().status(), 200);
    assert_eq!(p.http.get(p.url("/healthz")).send().await.unwrap().status(), 200);
    assert_eq!(p.http.get(p.url("/metrics")).send().await.unwrap().status(), 200);
}

#[tokio::test]
async fn per_key_models_rate_and_concurrency() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(200).set_body_json(ok_completion()).set_delay(Duration::from_millis(400)))
        .mount(&server)
        .await;
    let auth = r#"keys = [
        { key = "sk-only-w-models", models = ["w/*"] },
        { key = "sk-two-per-minute", requests_per_minute = 2 },
        { key = "sk-one-at-a-time", max_concurrent = 1 },
    ]"#;
    let p = proxy_with("", &server.uri(), |c| with_auth(c, auth)).await;
    let (st, _, body) = post(&p, Some("sk-only-w-models"), &hello()).await;
    assert_eq!((st, body["error"]["code"].as_str()), (403, Some("model_not_allowed")), "{body}");

    assert_eq!(post(&p, Some("sk-two-per-minute"), &hello()).await.0, 200);
    assert_eq!(post(&p, Some("sk-two-per-minute"), &hello()).await.0, 200);
    let (st, h, body) = post(&p, Some("sk-two-per-minute"), &hello()).await;
    assert_eq!((st, body["error"]["code"].as_str()), (429, Some("rate_limit_exceeded")), "{body}");
    assert!(h["retry-after"].to_str().unwrap().parse::<u64>().unwrap() >= 1);

    let h = hello();
    let (a, b) = tokio::join!(post(&p, Some("sk-one-at-a-time"), &h), async {
        tokio::time::sleep(Duration::from_millis(100)).await;
        post(&p, Some("sk-one-at-a-time"), &hello()).await
    });
    assert_eq!(a.0, 200);
    assert_eq!((b.0, b.2["error"]["code"].as_str()), (429, Some("concurrency_limit_exceeded")), "{}", b.2);
    // The permit is released with the response.
    assert_eq!(post(&p, Some("sk-one-at-a-time"), &hello()).await.0, 200);
}

#[tokio::test]
async fn request_id_in_and_out() {
    let server = ok_upstream().await;
    let p = proxy("", &server.uri()).await;
    let r = p
        .http
        .post(p.url("/v1/chat/completions"))
        .header("x-request-id", "trace-abc-1")
        .json(&hello())
        .send()
        .await
        .unwrap();
    assert_eq!(r.headers()["x-request-id"], "trace-abc-1");
    let r = p.http.post(p.url("/v1/chat/completions")).json(&hello()).send().await.unwrap();
    assert!(r.headers()["x-request-id"].to_str().unwrap().starts_with("req_"));
    // Errors carry it too.
    let r = p.http.post(p.url("/v1/chat/completions")).body("{").send().await.unwrap();
    assert_eq!(r.status(), 400);
    assert!(r.headers().contains_key("x-request-id"));
}

// -------------------------------------------------------------- limits

#[tokio::test]
async fn body_and_shape_limits() {
    let server = ok_upstream().await;
    let p = proxy_with("", &server.uri(), |c| {
        c.limits.max_body_bytes = 2000;
        c.limits.max_messages = 3;
        c.limits.max_tools = 1;
    })
    .await;
    let big = json!({"model": "v/m", "messages": [{"role": "user", "content": "x".repeat(5000)}]});
    let (st, _, body) = post(&p, None, &big).await;
    assert_eq!((st, body["error"]["code"].as_str()), (413, Some("request_too_large")), "{body}");
    // Without a content-length (chunked), the limit holds while reading.
    let chunks: Vec<Result<Vec<u8>, std::io::Error>> = (0..10).map(|_| Ok(vec![b' '; 500])).collect();
    let r = p
        .http
        .post(p.url("/v1/chat/completions"))
        .header("content-type", "application/json")
        .body(reqwest::Body::wrap_stream(futures_util::stream::iter(chunks)))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 413);

    let many = json!({"model": "v/m", "messages": [{"role": "user", "content": "a"}, {"role": "user", "content": "b"},
        {"role": "user", "content": "c"}, {"role": "user", "content": "d"}]});
    let (st, _, body) = post(&p, None, &many).await;
    assert_eq!((st, body["error"]["param"].as_str()), (400, Some("messages")), "{body}");
    let tools = json!({"model": "v/m", "messages": [{"role": "user", "content": "a"}], "tools": [
        {"type": "function", "function": {"name": "a"}}, {"type": "function", "function": {"name": "b"}}]});
    let (st, _, body) = post(&p, None, &tools).await;
    assert_eq!((st, body["error"]["param"].as_str()), (400, Some("tools")), "{body}");
    assert_eq!(post(&p, None, &hello()).await.0, 200);
}

// ------------------------------------------------- a scriptable upstream

/// What the scripted upstream does for one request.
#[derive(Clone)]
enum Act {
    /// A normal SSE answer of `n` content chunks, `gap` apart.
    Stream { n: usize, gap: Duration, size: usize },
    /// Headers, one chunk, then silence.
    Stall,
    /// Headers, then the connection breaks before any event.
    DropBeforeFirst,
    /// Waits before sending headers.
    Slow(Duration),
}

struct Script {
    acts: std::sync::Mutex<Vec<Act>>,
    /// Used once the script runs out.
    default: Act,
    hits: AtomicUsize,
    bytes_out: Arc<AtomicUsize>,
}

async fn scripted(acts: Vec<Act>, default: Act) -> (String, Arc<Script>) {
    let script = Arc::new(Script {
        acts: std::sync::Mutex::new(acts),
        default,
        hits: AtomicUsize::new(0),
        bytes_out: Arc::new(AtomicUsize::new(0)),
    });
    let s = script.clone();
    let app = axum::Router::new().route(
        "/v1/chat/completions",
        axum::routing::post(move || {
            let s = s.clone();
            async move {
                s.hits.fetch_add(1, Ordering::SeqCst);
                let act = {
                    let mut a = s.acts.lock().unwrap();
                    if a.is_empty() { s.default.clone() } else { a.remove(0) }
                };
                respond(act, s.bytes_out.clone()).await
            }
        }),
    );
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(l, app).await });
    (format!("http://{addr}"), script)
}

fn sse_response(body: Body) -> Response {
    Response::builder().header("content-type", "text/event-stream").body(body).unwrap()
}

fn event(content: &str) -> String {
    format!("data: {}\n\n", chunk(json!({"content": content}), None))
}

async fn respond(act: Act, bytes_out: Arc<AtomicUsize>) -> Response {
    match act {
        Act::Stream { n, gap, size } => {
            let s = async_stream::stream! {
                for i in 0..n {
                    if !gap.is_zero() { tokio::time::sleep(gap).await; }
                    let e = event(&format!("{i:06}{}", "x".repeat(size)));
                    bytes_out.fetch_add(e.len(), Ordering::SeqCst);
                    yield Ok::<_, std::io::Error>(e);
                }
                yield Ok(format!("data: {}\n\ndata: [DONE]\n\n", chunk(json!({}), Some("stop"))));
            };
            sse_response(Body::from_stream(s))
        }
        Act::Stall => {
            let s = async_stream::stream! {
                yield Ok::<_, std::io::Error>(event("first"));
                std::future::pending::<()>().await;
            };
            sse_response(Body::from_stream(s))
        }
        Act::DropBeforeFirst => {
            let s = futures_util::stream::once(async {
                Err::<String, _>(std::io::Error::other("upstream dropped the connection"))
            });
            sse_response(Body::from_stream(s))
        }
        Act::Slow(d) => {
            tokio::time::sleep(d).await;
            axum::Json(ok_completion()).into_response()
        }
    }
}

use axum::response::IntoResponse;

fn stream_req() -> Value {
    json!({"model": "v/m", "stream": true, "messages": [{"role": "user", "content": "hi"}]})
}

// ------------------------------------------------------------ timeouts

#[tokio::test]
async fn first_byte_timeout_is_504() {
    let (url, script) = scripted(vec![], Act::Slow(Duration::from_secs(3))).await;
    let p = proxy_with("", &url, |c| c.upstream.first_byte_timeout_secs = 0.3).await;
    let t = Instant::now();
    let (st, _, body) = post(&p, None, &hello()).await;
    assert_eq!((st, body["error"]["code"].as_str()), (504, Some("upstream_timeout")), "{body}");
    assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
    assert_eq!(script.hits.load(Ordering::SeqCst), 1, "a timeout is not retried on the same upstream");
}

#[tokio::test]
async fn idle_stream_timeout_ends_the_stream_in_band() {
    let (url, _) = scripted(vec![], Act::Stall).await;
    let p = proxy_with("", &url, |c| c.upstream.idle_timeout_secs = 0.3).await;
    let t = Instant::now();
    let (st, events) = p.chat_stream(stream_req()).await;
    assert_eq!(st, 200);
    assert_eq!(events[0]["choices"][0]["delta"]["content"], "first");
    let last = events.last().unwrap();
    assert_eq!(last["error"]["code"], "upstream_timeout", "{events:?}");
    assert!(t.elapsed() < Duration::from_secs(3));
}

#[tokio::test]
async fn connect_timeout() {
    // A listener whose accept queue is full drops new SYNs, so connecting
    // hangs until the client's connect timeout.
    let sock = tokio::net::TcpSocket::new_v4().unwrap();
    sock.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let listener = sock.listen(1).unwrap();
    let addr = listener.local_addr().unwrap();
    let mut held = Vec::new();
    for _ in 0..8 {
        if let Ok(Ok(s)) = tokio::time::timeout(Duration::from_millis(200), tokio::net::TcpStream::connect(addr)).await
        {
            held.push(s);
        }
    }
    let p = proxy_with("", &format!("http://{addr}"), |c| {
        c.upstream.connect_timeout_secs = 0.3;
        c.upstream.retries = Some(0);
    })
    .await;
    let t = Instant::now();
    let (st, _, body) = post(&p, None, &hello()).await;
    assert!(t.elapsed() < Duration::from_secs(3), "{:?}", t.elapsed());
    assert_eq!((st, body["error"]["code"].as_str()), (504, Some("upstream_timeout")), "{body}");
    drop(listener);
}

// --------------------------------------------------- retries, fallback

#[tokio::test]
async fn retry_then_success() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(503).set_body_json(json!({"error": {"message": "overloaded"}})))
        .up_to_n_times(2)
        .with_priority(1)
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(200).set_body_json(ok_completion()))
        .with_priority(5)
        .mount(&server)
        .await;
    let p = proxy_with("", &server.uri(), |c| c.upstream.retry_backoff_ms = 20).await;
    let (st, _, body) = post(&p, None, &hello()).await;
    assert_eq!(st, 200, "{body}");
    assert_eq!(server.received_requests().await.unwrap().len(), 3);
}

#[tokio::test]
async fn retry_honours_retry_after_and_gives_up_after_retries() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(
            ResponseTemplate::new(429)
                .insert_header("retry-after", "1")
                .set_body_json(json!({"error": {"message": "slow down"}})),
        )
        .mount(&server)
        .await;
    let p = proxy_with("", &server.uri(), |c| c.upstream.retries = Some(1)).await;
    let t = Instant::now();
    let (st, h, _) = post(&p, None, &hello()).await;
    assert_eq!(st, 429);
    assert!(t.elapsed() >= Duration::from_secs(1), "waited for Retry-After: {:?}", t.elapsed());
    assert_eq!(server.received_requests().await.unwrap().len(), 2);
    assert_eq!(h["retry-after"], "1", "the upstream's Retry-After goes on to the client");
}

#[tokio::test]
async fn stream_dropped_before_first_event_is_retried() {
    let (url, script) = scripted(vec![Act::DropBeforeFirst], Act::Stream { n: 3, gap: Duration::ZERO, size: 1 }).await;
    let p = proxy_with("", &url, |c| c.upstream.retry_backoff_ms = 10).await;
    let (st, events) = p.chat_stream(stream_req()).await;
    assert_eq!(st, 200);
    assert_eq!(events.last(), Some(&json!("[DONE]")), "{events:?}");
    assert_eq!(assemble(&events)["content"], "000000x000001x000002x");
    assert_eq!(script.hits.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn fallback_to_the_second_provider() {
    let bad = MockServer::start().await;
    Mock::given(method("POST")).respond_with(ResponseTemplate::new(500)).mount(&bad).await;
    let good = ok_upstream().await;
    let good_url = format!("{}/v1", good.uri());
    let p = proxy_with("", &bad.uri(), |c| {
        c.upstream.retries = Some(1);
        c.upstream.retry_backoff_ms = 10;
        c.providers.insert(
            "w".into(),
            ProviderConfig { profile: Some("testvendor".into()), base_url: Some(good_url), ..Default::default() },
        );
        c.models.insert("smart".into(), ModelAlias::Chain(vec!["v/m".into(), "w/m2".into()]));
        c.models.insert("plain".into(), "w/m3".into());
    })
    .await;
    let (st, _, body) =
        post(&p, None, &json!({"model": "smart", "messages": [{"role": "user", "content": "hi"}]})).await;
    assert_eq!(st, 200, "{body}");
    assert_eq!(bad.received_requests().await.unwrap().len(), 2, "first provider tried with its retries");
    let seen = good.received_requests().await.unwrap();
    assert_eq!(serde_json::from_slice::<Value>(&seen[0].body).unwrap()["model"], "m2");
    // A single-string alias still routes.
    let (st, _, _) = post(&p, None, &json!({"model": "plain", "messages": [{"role": "user", "content": "hi"}]})).await;
    assert_eq!(st, 200);
    let seen = good.received_requests().await.unwrap();
    assert_eq!(serde_json::from_slice::<Value>(&seen[1].body).unwrap()["model"], "m3");
    let models: Value = p.http.get(p.url("/v1/models")).send().await.unwrap().json().await.unwrap();
    let smart = models["data"].as_array().unwrap().iter().find(|m| m["id"] == "smart").unwrap();
    assert_eq!(smart["target"], json!(["v/m", "w/m2"]));
}

#[tokio::test]
async fn circuit_opens_after_failures() {
    let server = MockServer::start().await;
    Mock::given(method("POST")).respond_with(ResponseTemplate::new(500)).mount(&server).await;
    let p = proxy_with("", &server.uri(), |c| {
        c.providers.get_mut("v").unwrap().upstream =
            Some(upstream_table("retries = 0\nbreaker_failures = 2\nbreaker_open_secs = 60"));
    })
    .await;
    assert_eq!(post(&p, None, &hello()).await.0, 500);
    assert_eq!(post(&p, None, &hello()).await.0, 500);
    let (st, h, body) = post(&p, None, &hello()).await;
    assert_eq!((st, body["error"]["code"].as_str()), (503, Some("circuit_open")), "{body}");
    assert!(h.contains_key("retry-after"));
    assert_eq!(server.received_requests().await.unwrap().len(), 2, "an open circuit does not call the upstream");
    let m = p.http.get(p.url("/metrics")).send().await.unwrap().text().await.unwrap();
    assert!(m.contains("modelshim_circuit_state{provider=\"v\"} 2"), "{m}");
}

#[tokio::test]
async fn circuit_half_opens_and_closes() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(502))
        .up_to_n_times(1)
        .with_priority(1)
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(200).set_body_json(ok_completion()))
        .with_priority(5)
        .mount(&server)
        .await;
    let p = proxy_with("", &server.uri(), |c| {
        c.upstream.retries = Some(0);
        c.upstream.breaker_failures = 1;
        c.upstream.breaker_open_secs = 0.3;
    })
    .await;
    assert_eq!(post(&p, None, &hello()).await.0, 502);
    assert_eq!(post(&p, None, &hello()).await.0, 503);
    tokio::time::sleep(Duration::from_millis(350)).await;
    assert_eq!(post(&p, None, &hello()).await.0, 200, "the probe goes through");
    assert_eq!(post(&p, None, &hello()).await.0, 200, "and closes the circuit");
}

// ------------------------------------------------------------- metrics

/// A proxy with a provider `name` of its own (the test vendor's profile) in
/// front of `url`, so the metric series a test reads are that test's alone.
async fn proxy_with_provider(name: &str, url: &str) -> Proxy {
    proxy_with("", url, |c| {
        let base_url = Some(format!("{url}/v1"));
        // `mm` is a model the config knows: its own label in the metrics.
        let models = Some(vec!["mm".to_string()]);
        c.providers.insert(
            name.into(),
            ProviderConfig { profile: Some("testvendor".into()), base_url, models, ..Default::default() },
        );
    })
    .await
}

#[tokio::test]
async fn metrics_after_traffic() {
    let (url, _) = scripted(vec![], Act::Stream { n: 2, gap: Duration::ZERO, size: 1 }).await;
    let p = proxy_with_provider("metricsprov", &url).await;
    let req = json!({"model": "metricsprov/mm", "stream": true, "messages": [{"role": "user", "content": "hi"}]});
    let (st, _) = p.chat_stream(req).await;
    assert_eq!(st, 200);
    let r = p.http.get(p.url("/metrics")).send().await.unwrap();
    assert!(r.headers()["content-type"].to_str().unwrap().starts_with("text/plain"));
    let m = r.text().await.unwrap();
    for want in [
        "modelshim_requests_total{provider=\"metricsprov\",model=\"mm\",status=\"200\"} 1",
        "modelshim_request_duration_seconds_bucket{provider=\"metricsprov\",model=\"mm\"",
        "modelshim_time_to_first_token_seconds_bucket{provider=\"metricsprov\",model=\"mm\"",
        "modelshim_agent_loop_iterations_total",
        "modelshim_in_flight_requests",
    ] {
        assert!(m.contains(want), "missing {want} in\n{m}");
    }
}

// ------------------------------------------------------- backpressure

#[tokio::test]
async fn slow_client_backpressures_the_upstream() {
    // 4000 events of ~20 KB = ~80 MB the upstream could send at once. The
    // kernel's socket buffers on the two hops autotune (receive buffers up to
    // `tcp_rmem`'s maximum, 32 MiB on some machines), so what "nothing more"
    // may hold is generous; reading ahead of the client would take it all.
    let (url, script) = scripted(vec![], Act::Stream { n: 4000, gap: Duration::ZERO, size: 20_000 }).await;
    let p = proxy("", &url).await;
    let mut r = p.http.post(p.url("/v1/chat/completions")).json(&stream_req()).send().await.unwrap();
    assert_eq!(r.status(), 200);
    let first = r.chunk().await.unwrap().unwrap();
    assert!(!first.is_empty());
    // The client stops reading; the upstream may fill socket buffers and
    // nothing more.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let sent = script.bytes_out.load(Ordering::SeqCst);
    assert!(sent < 40 << 20, "upstream sent {sent} bytes to a client that read one chunk");
    let mut total = first.len();
    while let Some(c) = r.chunk().await.unwrap() {
        total += c.len();
    }
    assert!(total > 80_000_000, "the whole stream arrives once read: {total}");
}

// ----------------------------------------------------- graceful shutdown

/// Serves on one listener of the test's runtime (`threads: None`), or as the
/// binary does: `threads` serving threads with runtimes of their own.
async fn serve_with_shutdown(
    upstream: &str,
    grace: Duration,
    threads: Option<usize>,
) -> (SocketAddr, tokio::sync::oneshot::Sender<()>, tokio::task::JoinHandle<std::io::Result<()>>) {
    serve_with(upstream, grace, threads, |_| {}).await
}

/// [`serve_with_shutdown`] with the config changed by `tweak`.
async fn serve_with(
    upstream: &str,
    grace: Duration,
    threads: Option<usize>,
    tweak: impl FnOnce(&mut Config),
) -> (SocketAddr, tokio::sync::oneshot::Sender<()>, tokio::task::JoinHandle<std::io::Result<()>>) {
    let text = "name = \"test vendor\"\nbase_url = \"http://unused\"\n";
    let mut profiles = std::collections::BTreeMap::new();
    profiles.insert("testvendor".to_string(), modelshim::provider::Profile::parse("testvendor", text).unwrap());
    let mut config = Config::default();
    config.providers.insert(
        "v".into(),
        ProviderConfig {
            profile: Some("testvendor".into()),
            base_url: Some(format!("{upstream}/v1")),
            ..Default::default()
        },
    );
    tweak(&mut config);
    let state = modelshim::server::AppState::new(&config, &profiles).unwrap();
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let signal = async move {
        let _ = rx.await;
    };
    use modelshim::server::shutdown;
    match threads {
        None => {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let addr = listener.local_addr().unwrap();
            (addr, tx, tokio::spawn(shutdown::serve(listener, state, signal, grace)))
        }
        Some(n) => {
            let listeners = shutdown::bind("127.0.0.1:0", n).unwrap();
            assert_eq!(listeners.len(), n);
            let addr = listeners[0].local_addr().unwrap();
            (addr, tx, tokio::spawn(shutdown::serve_threads(listeners, state, signal, grace)))
        }
    }
}

#[tokio::test]
async fn graceful_shutdown_finishes_an_in_flight_stream() {
    finishes_an_in_flight_stream(None).await;
}

#[tokio::test]
async fn serving_threads_drain_like_one() {
    finishes_an_in_flight_stream(Some(2)).await;
}

async fn finishes_an_in_flight_stream(threads: Option<usize>) {
    let (url, _) = scripted(vec![], Act::Stream { n: 10, gap: Duration::from_millis(100), size: 1 }).await;
    let (addr, stop, server) = serve_with_shutdown(&url, Duration::from_secs(10), threads).await;
    let http = reqwest::Client::new();
    let mut r = http.post(format!("http://{addr}/v1/chat/completions")).json(&stream_req()).send().await.unwrap();
    let mut text = String::from_utf8(r.chunk().await.unwrap().unwrap().to_vec()).unwrap();
    stop.send(()).unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    // No new connections once shutting down.
    let refused = reqwest::Client::new().get(format!("http://{addr}/healthz")).send().await;
    assert!(refused.is_err(), "a new connection was accepted during shutdown");
    while let Some(c) = r.chunk().await.unwrap() {
        text.push_str(std::str::from_utf8(&c).unwrap());
    }
    let events = parse_sse(&text);
    assert_eq!(events.last(), Some(&json!("[DONE]")), "{text}");
    assert_eq!(assemble(&events)["content"].as_str().unwrap().len(), 70);
    let done = tokio::time::timeout(Duration::from_secs(5), server).await.expect("server stops after the stream");
    done.unwrap().unwrap();
}

/// A request head over 8 KiB is refused with 431 (the limit keeps each
/// connection's read buffer at 8 KiB); one just under it is served.
#[tokio::test]
async fn request_heads_are_limited_to_8_kib() {
    let (url, _) = scripted(vec![], Act::Stream { n: 1, gap: Duration::from_millis(1), size: 1 }).await;
    let (addr, stop, server) = serve_with_shutdown(&url, Duration::from_secs(5), Some(1)).await;
    let http = reqwest::Client::new();
    let send = |extra: usize| {
        http.post(format!("http://{addr}/v1/chat/completions"))
            .header("x-pad", "a".repeat(extra))
            .json(&stream_req())
            .send()
    };
    assert_eq!(send(6 * 1024).await.unwrap().status(), 200);
    assert_eq!(send(9 * 1024).await.unwrap().status(), 431);
    stop.send(()).unwrap();
    tokio::time::timeout(Duration::from_secs(5), server).await.expect("server stops").unwrap().unwrap();
}

/// A connection is HTTP/2 when it opens with the preface (prior knowledge),
/// else HTTP/1.1, also when its first bytes come in pieces.
#[tokio::test]
async fn http2_and_http1_on_one_port() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let (url, _) = scripted(vec![], Act::Stream { n: 2, gap: Duration::from_millis(1), size: 1 }).await;
    let (addr, stop, server) = serve_with_shutdown(&url, Duration::from_secs(5), Some(1)).await;
    let h2 = reqwest::Client::builder().http2_prior_knowledge().build().unwrap();
    let r = h2.post(format!("http://{addr}/v1/chat/completions")).json(&stream_req()).send().await.unwrap();
    assert_eq!((r.status().as_u16(), r.version()), (200, reqwest::Version::HTTP_2));
    assert!(r.text().await.unwrap().ends_with("data: [DONE]\n\n"));

    // "P" could begin the preface or "POST": the rest decides.
    let body = stream_req().to_string();
    let head = format!(
        "OST /v1/chat/completions HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        body.len()
    );
    let mut tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    tcp.set_nodelay(true).unwrap();
    tcp.write_all(b"P").await.unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    tcp.write_all(format!("{head}{body}").as_bytes()).await.unwrap();
    let mut answer = String::new();
    tokio::time::timeout(Duration::from_secs(5), tcp.read_to_string(&mut answer)).await.unwrap().unwrap();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(answer.contains("data: [DONE]"), "{answer}");
    stop.send(()).unwrap();
    tokio::time::timeout(Duration::from_secs(5), server).await.expect("server stops").unwrap().unwrap();
}

/// Many connections over two serving threads (both sockets take some),
/// every answer right; and a port already listened on is refused, not shared.
#[tokio::test]
async fn serving_threads_share_the_port() {
    let (url, _) = scripted(vec![], Act::Stream { n: 3, gap: Duration::from_millis(1), size: 1 }).await;
    let (addr, stop, server) = serve_with_shutdown(&url, Duration::from_secs(5), Some(2)).await;
    let mut all = Vec::new();
    for _ in 0..32 {
        // A client per request: a new connection each, hashed over the sockets.
        // Built first: building one blocks this thread a while, which would
        // leave the others' connections silent past the header timeout.
        let client = reqwest::Client::new();
        all.push(tokio::spawn(async move {
            let r = client.post(format!("http://{addr}/v1/chat/completions")).json(&stream_req()).send().await.unwrap();
            r.text().await.unwrap()
        }));
    }
    for h in all {
        let text = h.await.unwrap();
        let events = parse_sse(&text);
        assert_eq!(events.last(), Some(&json!("[DONE]")), "{text}");
        assert_eq!(assemble(&events)["content"].as_str().unwrap().len(), 21, "{text}");
    }
    let taken = modelshim::server::shutdown::bind(&addr.to_string(), 2);
    assert!(taken.is_err(), "a second server joined a port already in use");
    stop.send(()).unwrap();
    tokio::time::timeout(Duration::from_secs(5), server).await.expect("server stops").unwrap().unwrap();
}

#[tokio::test]
async fn graceful_shutdown_cuts_streams_at_the_deadline() {
    let (url, _) = scripted(vec![], Act::Stream { n: 100, gap: Duration::from_millis(100), size: 1 }).await;
    let (addr, stop, server) = serve_with_shutdown(&url, Duration::from_millis(400), Some(2)).await;
    let http = reqwest::Client::new();
    let mut r = http.post(format!("http://{addr}/v1/chat/completions")).json(&stream_req()).send().await.unwrap();
    let t = Instant::now();
    stop.send(()).unwrap();
    let mut text = String::new();
    while let Ok(Some(c)) = r.chunk().await {
        text.push_str(std::str::from_utf8(&c).unwrap());
    }
    let events = parse_sse(&text);
    let last = events.last().unwrap();
    assert_eq!(last["error"]["code"], "server_shutting_down", "{text}");
    assert!(t.elapsed() < Duration::from_secs(3), "{:?}", t.elapsed());
    tokio::time::timeout(Duration::from_secs(5), server).await.expect("server stops").unwrap().unwrap();
}

/// One chat request with one extra header to a `serve_process`; its status.
async fn say_hi(p: &ServeProcess, header: &str, value: &str) -> u16 {
    let url = p.proxy.url("/v1/chat/completions");
    let body = json!({"model": "v/m", "messages": [{"role": "user", "content": "hi"}]});
    p.proxy.http.post(url).header(header, value).json(&body).send().await.unwrap().status().as_u16()
}

/// The access line is written when the body ends, outside the request's
/// span, so it carries the request id itself.
#[tokio::test]
async fn the_access_log_line_names_the_request() {
    let upstream = MockServer::start().await;
    let body = completion(json!({"role": "assistant", "content": "ok"}), "stop");
    Mock::given(method("POST")).respond_with(ResponseTemplate::new(200).set_body_json(body)).mount(&upstream).await;
    let config = format!("[providers.v]\nprofile = \"openai\"\nbase_url = \"{}/v1\"\n", upstream.uri());
    let mut p = serve_process(&config, &[("RUST_LOG", "info")]).await;
    assert_eq!(say_hi(&p, "x-request-id", "req-log-7").await, 200);
    assert!(p.terminate().success());
    let log = p.log();
    let line = log.lines().find(|l| l.contains("request done")).unwrap_or_else(|| panic!("no access line in:\n{log}"));
    assert!(line.contains("id=\"req-log-7\"") && line.contains("status=200"), "{line}");
}

/// The environment's proxy settings hold for every upstream, whichever of the
/// two clients sends: a proxied cleartext upstream is reached through the
/// proxy (absolute-form request, `Host` of the upstream), one exempted by
/// `NO_PROXY` directly.
#[tokio::test]
async fn the_environments_http_proxy_is_honoured() {
    let forward_proxy = MockServer::start().await;
    let via = completion(json!({"role": "assistant", "content": "via the proxy"}), "stop");
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .and(header("host", "llm.internal.example"))
        .respond_with(ResponseTemplate::new(200).set_body_json(via))
        .expect(1)
        .mount(&forward_proxy)
        .await;
    let upstream = MockServer::start().await;
    let direct = completion(json!({"role": "assistant", "content": "direct"}), "stop");
    Mock::given(method("POST")).respond_with(ResponseTemplate::new(200).set_body_json(direct)).mount(&upstream).await;
    let config = format!(
        "[providers.far]\nprofile = \"openai\"\nbase_url = \"http://llm.internal.example/v1\"\n\
         [providers.near]\nprofile = \"openai\"\nbase_url = \"{}/v1\"\n",
        upstream.uri()
    );
    let p = serve_process(&config, &[("HTTP_PROXY", &forward_proxy.uri()), ("NO_PROXY", "127.0.0.1")]).await;
    for (model, said) in [("far/m", "via the proxy"), ("near/m", "direct")] {
        let body = json!({"model": model, "messages": [{"role": "user", "content": "hi"}]});
        let r = p.proxy.http.post(p.proxy.url("/v1/chat/completions")).json(&body).send().await.unwrap();
        assert_eq!(r.status(), 200, "{model}: {}", p.log());
        let v: Value = r.json().await.unwrap();
        assert_eq!(v["choices"][0]["message"]["content"], said);
    }
    assert_eq!(upstream.received_requests().await.unwrap().len(), 1);
}

/// An OTLP/HTTP collector that takes every trace export.
async fn otlp_collector() -> MockServer {
    let collector = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/traces"))
        .respond_with(ResponseTemplate::new(200))
        .mount(&collector)
        .await;
    collector
}

/// `[telemetry]`: the real binary exports the request's spans over OTLP/HTTP
/// to a collector (here a wiremock), joined to the client's `traceparent`,
/// and flushes them on SIGTERM.
#[tokio::test]
async fn spans_are_exported_over_otlp_and_join_the_clients_trace() {
    let upstream = MockServer::start().await;
    let body = completion(json!({"role": "assistant", "content": "ok"}), "stop");
    Mock::given(method("POST")).respond_with(ResponseTemplate::new(200).set_body_json(body)).mount(&upstream).await;
    let collector = otlp_collector().await;
    let config = format!(
        "[providers.v]\nprofile = \"openai\"\nbase_url = \"{}/v1\"\napi_key_env = \"TEST_UPSTREAM_KEY\"\n\n\
         [telemetry]\notlp_endpoint = \"{}\"\nservice_name = \"modelshim-under-test\"\n",
        upstream.uri(),
        collector.uri()
    );
    let mut p = serve_process(&config, &[("TEST_UPSTREAM_KEY", "sk-upstream")]).await;
    let trace_id = "4bf92f3577b34da6a3ce929d0e0e4736";
    assert_eq!(say_hi(&p, "traceparent", &format!("00-{trace_id}-00f067aa0ba902b7-01")).await, 200);
    assert!(p.terminate().success());
    let got = collector.received_requests().await.unwrap();
    assert!(!got.is_empty(), "no spans exported");
    let all: Vec<u8> = got.iter().flat_map(|r| r.body.clone()).collect();
    assert_eq!(got[0].headers.get("content-type").unwrap(), "application/x-protobuf");
    let has = |needle: &[u8]| all.windows(needle.len()).any(|w| w == needle);
    assert!(has(b"modelshim-under-test"), "service.name is exported");
    assert!(has(b"POST /v1/chat/completions") && has(b"upstream"), "request and upstream spans are exported");
    let id: Vec<u8> = (0..16).map(|i| u8::from_str_radix(&trace_id[2 * i..2 * i + 2], 16).unwrap()).collect();
    assert!(has(&id), "the spans belong to the client's trace");
}

#[tokio::test]
async fn token_counts_are_kept_whether_an_answer_is_sent_as_is_or_normalized() {
    let server = MockServer::start().await;
    let answer = |content: &str, prompt: u64, completion: u64| {
        json!({"id": "up-1", "object": "chat.completion", "created": 1, "model": "m",
               "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}],
               "usage": {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}})
    };
    // Plain text is sent as it came; `<think>` takes the normalizer's path.
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(200).set_body_json(answer("Hello.", 3, 5)))
        .up_to_n_times(1)
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(200).set_body_json(answer("<think>hmm</think>Hello.", 7, 11)))
        .mount(&server)
        .await;
    let p = proxy_with_provider("tokprov", &server.uri()).await;
    for _ in 0..2 {
        let (st, body) = p.chat(json!({"model": "tokprov/mm", "messages": [{"role": "user", "content": "hi"}]})).await;
        assert_eq!((st, &body["choices"][0]["message"]["content"]), (200, &json!("Hello.")), "{body}");
    }
    let m = p.http.get(p.url("/metrics")).send().await.unwrap().text().await.unwrap();
    for want in [
        "modelshim_tokens_total{provider=\"tokprov\",model=\"mm\",kind=\"prompt\"} 10",
        "modelshim_tokens_total{provider=\"tokprov\",model=\"mm\",kind=\"completion\"} 16",
    ] {
        assert!(m.contains(want), "missing {want} in\n{m}");
    }
}

// ------------------------------------------------------- issue 25: leaks, limits

/// A provider key the upstream echoes back (`Incorrect API key provided:
/// Bearer …`) reaches neither the client (chat, streamed chat, Responses,
/// embeddings), nor the log at any level (the WARN of the retry included),
/// nor the exported spans.
#[tokio::test]
async fn an_echoed_provider_key_reaches_no_client_no_log_and_no_trace() {
    const ECHOED: &str = "prov-key-echoed-0123456789";
    let upstream = MockServer::start().await;
    let openai_shape = json!({"error": {"message": format!("Incorrect API key provided: Bearer {ECHOED}"),
        "type": "invalid_request_error", "code": "invalid_api_key"}});
    // Overloaded first (retried, logged at WARN), then a 401 in another shape.
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(ResponseTemplate::new(503).set_body_json(&openai_shape))
        .up_to_n_times(1)
        .mount(&upstream)
        .await;
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(ResponseTemplate::new(401).set_body_json(json!({"code": 401,
            "message": format!("bad key {ECHOED}"), "data": {"key": ECHOED, ECHOED: true}})))
        .mount(&upstream)
        .await;
    Mock::given(method("POST"))
        .and(path("/v1/embeddings"))
        .respond_with(ResponseTemplate::new(401).set_body_string(format!("Invalid key {ECHOED}")))
        .mount(&upstream)
        .await;
    let collector = otlp_collector().await;
    let config = format!(
        "[upstream]\nretries = 1\nretry_backoff_ms = 10\n\n\
         [providers.v]\nprofile = \"openai\"\nbase_url = \"{}/v1\"\napi_key_env = \"TEST_ECHOED_KEY\"\n\n\
         [telemetry]\notlp_endpoint = \"{}\"\n",
        upstream.uri(),
        collector.uri()
    );
    let mut p = serve_process(&config, &[("TEST_ECHOED_KEY", ECHOED), ("RUST_LOG", "debug")]).await;
    let ask = json!({"model": "v/m", "messages": [{"role": "user", "content": "hi"}]});
    let mut streamed = ask.clone();
    streamed["stream"] = json!(true);
    let calls = [
        ("/v1/chat/completions", ask),
        ("/v1/chat/completions", streamed),
        ("/v1/responses", json!({"model": "v/m", "input": "hi"})),
        ("/v1/embeddings", json!({"model": "v/e", "input": "hi"})),
    ];
    for (route, body) in calls {
        let r = p.proxy.http.post(p.proxy.url(route)).json(&body).send().await.unwrap();
        let status = r.status().as_u16();
        let text = r.text().await.unwrap();
        assert_eq!(status, 401, "{route}: {text}");
        assert!(!text.contains(ECHOED), "{route}: the key reached the client: {text}");
        assert!(text.contains("[REDACTED]"), "{route}: the upstream's message is kept, redacted: {text}");
    }
    // The key really was sent, to its own upstream.
    let seen = upstream.received_requests().await.unwrap();
    assert!(seen.iter().all(|r| r.headers["authorization"] == format!("Bearer {ECHOED}").as_str()));
    assert!(p.terminate().success());
    let log = p.log();
    assert!(log.contains("retrying upstream"), "the retry is logged:\n{log}");
    assert!(!log.contains(ECHOED), "the key is in the log:\n{log}");
    let spans: Vec<u8> = collector.received_requests().await.unwrap().iter().flat_map(|r| r.body.clone()).collect();
    let has = |needle: &[u8]| spans.windows(needle.len()).any(|w| w == needle);
    assert!(has(b"upstream") && has(b"[REDACTED]"), "the upstream spans and their redacted errors are exported");
    assert!(!has(ECHOED.as_bytes()), "the key is in the exported spans");
}

/// A raw listener that counts connections and keeps what they send.
async fn witness() -> (String, Arc<std::sync::Mutex<(usize, Vec<u8>)>>) {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", l.local_addr().unwrap());
    let seen: Arc<std::sync::Mutex<(usize, Vec<u8>)>> = Arc::default();
    let s = seen.clone();
    tokio::spawn(async move {
        while let Ok((mut c, _)) = l.accept().await {
            s.lock().unwrap().0 += 1;
            let s = s.clone();
            tokio::spawn(async move {
                let mut buf = vec![0u8; 4096];
                while let Ok(n) = tokio::io::AsyncReadExt::read(&mut c, &mut buf).await {
                    if n == 0 {
                        break;
                    }
                    s.lock().unwrap().1.extend_from_slice(&buf[..n]);
                }
            });
        }
    });
    (url, seen)
}

/// An upstream answering 307 towards another port: the redirect is not
/// followed (neither by reqwest, embeddings here, nor by the direct chat
/// client), the client gets a 502 saying so, and the other port sees no
/// connection, so neither the body nor the key in the profile's own header.
#[tokio::test]
async fn a_redirect_to_another_origin_gets_neither_body_nor_key() {
    let (elsewhere, seen) = witness().await;
    let upstream = MockServer::start().await;
    for route in ["/v1/embeddings", "/v1/chat/completions"] {
        Mock::given(method("POST"))
            .and(path(route))
            .respond_with(ResponseTemplate::new(307).insert_header("location", format!("{elsewhere}{route}")))
            .mount(&upstream)
            .await;
    }
    let profile = "api_key_env = \"HOME\"\nauth_header = \"x-api-key\"\n";
    let p = proxy_with(profile, &upstream.uri(), |_| {}).await;
    let embed = json!({"model": "v/e", "input": "the body"});
    for (route, body) in [("/v1/embeddings", embed), ("/v1/chat/completions", hello())] {
        let r = p.http.post(p.url(route)).json(&body).send().await.unwrap();
        let status = r.status().as_u16();
        let body: Value = r.json().await.unwrap();
        assert_eq!(status, 502, "{route}: {body}");
        let msg = body["error"]["message"].as_str().unwrap();
        assert!(msg.contains("307") && msg.contains("not followed"), "{route}: {msg}");
    }
    assert_eq!(seen.lock().unwrap().0, 0, "the other origin was connected to");
    if let Ok(home) = std::env::var("HOME") {
        let got = upstream.received_requests().await.unwrap();
        assert!(got.iter().all(|r| r.headers["x-api-key"] == home.as_str()), "the key went to its own upstream");
    }
}

/// `follow_redirects = true`: a redirect within the upstream's origin is
/// followed (on every route, chat included), one to another origin still is not.
#[tokio::test]
async fn follow_redirects_stays_within_the_origin() {
    let (elsewhere, seen) = witness().await;
    let upstream = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/embeddings"))
        .respond_with(ResponseTemplate::new(307).insert_header("location", format!("{}/v2/embeddings", upstream.uri())))
        .mount(&upstream)
        .await;
    Mock::given(method("POST"))
        .and(path("/v2/embeddings"))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({"object": "list", "data": []})))
        .mount(&upstream)
        .await;
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(ResponseTemplate::new(308).insert_header("location", format!("{elsewhere}/v1/chat/completions")))
        .mount(&upstream)
        .await;
    let p = proxy_with(
        "follow_redirects = true\nauth_header = \"x-api-key\"\napi_key_env = \"HOME\"\n",
        &upstream.uri(),
        |_| {},
    )
    .await;
    let r = p.http.post(p.url("/v1/embeddings")).json(&json!({"model": "v/e", "input": "x"})).send().await.unwrap();
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
    let (st, _, body) = post(&p, None, &hello()).await;
    assert_eq!(st, 502, "{body}");
    assert_eq!(seen.lock().unwrap().0, 0, "the other origin was connected to");
    let v2 = upstream.received_requests().await.unwrap();
    let moved = v2.iter().find(|r| r.url.path() == "/v2/embeddings").expect("the same-origin redirect was followed");
    assert_eq!(serde_json::from_slice::<Value>(&moved.body).unwrap()["input"], "x", "with its body");
}

/// Models the config does not know share one `other` label.
#[tokio::test]
async fn unknown_models_share_one_metrics_series() {
    let server = ok_upstream().await;
    let p = proxy_with_provider("cardprov", &server.uri()).await;
    for i in 0..50 {
        let (st, _, body) = post(
            &p,
            None,
            &json!({"model": format!("cardprov/made-up-{i}"), "messages": [{"role": "user", "content": "hi"}]}),
        )
        .await;
        assert_eq!(st, 200, "{body}");
    }
    assert_eq!(
        post(&p, None, &json!({"model": "cardprov/mm", "messages": [{"role": "user", "content": "hi"}]})).await.0,
        200
    );
    let m = p.http.get(p.url("/metrics")).send().await.unwrap().text().await.unwrap();
    assert!(!m.contains("made-up-"), "{m}");
    let series: Vec<&str> = m
        .lines()
        .filter(|l| l.starts_with("modelshim_requests_total{") && l.contains("provider=\"cardprov\""))
        .collect();
    for want in [
        "modelshim_requests_total{provider=\"cardprov\",model=\"other\",status=\"200\"} 50",
        "modelshim_requests_total{provider=\"cardprov\",model=\"mm\",status=\"200\"} 1",
    ] {
        assert!(series.contains(&want), "missing {want} in {series:?}");
    }
    assert_eq!(series.len(), 2, "{series:?}");
}

/// A duplicate top-level key is refused before anything reads it, so the
/// limits and the model allow-list see the value that would be served.
#[tokio::test]
async fn duplicate_top_level_keys_are_refused() {
    let server = ok_upstream().await;
    let p = proxy_with("", &server.uri(), |c| {
        c.limits.max_messages = 4096;
        with_auth(c, &format!("keys = [{{ key = \"{KEY}\", models = [\"v/*\"] }}]"));
    })
    .await;
    let many: Vec<Value> = (0..6500).map(|i| json!({"role": "user", "content": format!("m{i}")})).collect();
    let many = serde_json::to_string(&many).unwrap();
    let one = r#"[{"role":"user","content":"hi"}]"#;
    let bodies = [
        (format!(r#"{{"model":"v/m","messages":{one},"messages":{many}}}"#), "messages"),
        (format!(r#"{{"model":"v/m","messages":{many},"messages":{one}}}"#), "messages"),
        (format!(r#"{{"model":"v/m","model":"w/other","messages":{one}}}"#), "model"),
        (format!(r#"{{"model":"v/m","messages":{one},"tools":[],"tools":[{{"type":"function"}}]}}"#), "tools"),
    ];
    for (body, key) in bodies {
        let r = p
            .http
            .post(p.url("/v1/chat/completions"))
            .bearer_auth(KEY)
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .unwrap();
        let status = r.status().as_u16();
        let v: Value = r.json().await.unwrap();
        assert_eq!(
            (status, v["error"]["code"].as_str(), v["error"]["param"].as_str()),
            (400, Some("duplicate_key"), Some(key)),
            "{v}"
        );
    }
    assert!(server.received_requests().await.unwrap().is_empty(), "nothing reached the upstream");
    // Too many messages under one key is still the limit's 400.
    let body = format!(r#"{{"model":"v/m","messages":{many}}}"#);
    let r = p.http.post(p.url("/v1/chat/completions")).bearer_auth(KEY).body(body).send().await.unwrap();
    assert_eq!(r.status(), 400);
    assert_eq!(r.json::<Value>().await.unwrap()["error"]["code"], "limit_exceeded");
}

/// `/v1/models` lists to each key only what it may use.
#[tokio::test]
async fn the_model_list_is_what_the_key_may_use() {
    let server = ok_upstream().await;
    let p = proxy_with("models = [\"a\", \"b\"]", &server.uri(), |c| {
        c.models.insert("smart".into(), "v/a".into());
        with_auth(c, r#"keys = ["sk-sees-every-model", { key = "sk-sees-only-v-a", models = ["v/a"] }]"#);
    })
    .await;
    let ids = |key: &'static str| {
        let p = &p;
        async move {
            let v: Value = p.http.get(p.url("/v1/models")).bearer_auth(key).send().await.unwrap().json().await.unwrap();
            v["data"].as_array().unwrap().iter().map(|m| m["id"].as_str().unwrap().to_string()).collect::<Vec<_>>()
        }
    };
    assert_eq!(ids("sk-sees-every-model").await, ["v/a", "v/b", "smart"]);
    assert_eq!(ids("sk-sees-only-v-a").await, ["v/a"]);
}

// ------------------------------- faults: raw clients and raw upstreams

use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Fails a test that would otherwise wait for ever.
async fn within<T>(limit: Duration, what: &str, f: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(limit, f).await.unwrap_or_else(|_| panic!("{what}: still waiting after {limit:?}"))
}

/// A raw HTTP/1.1 upstream on loopback: reads one request per connection
/// (head and body) and hands the socket and the request to `answer`.
async fn raw_upstream<F, Fut>(answer: F) -> String
where
    F: Fn(tokio::net::TcpStream, String) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let answer = Arc::new(answer);
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            let answer = answer.clone();
            tokio::spawn(async move {
                if let Some(req) = read_request(&mut s).await {
                    answer(s, req).await;
                }
            });
        }
    });
    format!("http://{addr}")
}

async fn read_request(s: &mut tokio::net::TcpStream) -> Option<String> {
    let mut got = Vec::new();
    let mut buf = [0u8; 16 * 1024];
    loop {
        if let Some(end) = got.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&got[..end]).to_ascii_lowercase();
            let len = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse::<usize>().ok())
                .unwrap_or(0);
            if got.len() >= end + 4 + len {
                return Some(String::from_utf8_lossy(&got).into_owned());
            }
        }
        match s.read(&mut buf).await {
            Ok(0) | Err(_) => return None,
            Ok(n) => got.extend_from_slice(&buf[..n]),
        }
    }
}

const SSE_HEAD: &[u8] = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n";

fn json_head(len: usize) -> String {
    format!("HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {len}\r\nconnection: close\r\n\r\n")
}

fn sse_event(v: &Value) -> String {
    format!("data: {v}\n\n")
}

/// An upstream that sends its headers and then nothing, or trickles its
/// body, is not waited on past `idle_timeout_secs`: with the direct client
/// (chat), with reqwest (embeddings), and in a stream.
#[tokio::test]
async fn an_upstream_that_stalls_or_trickles_its_body_times_out() {
    let url = raw_upstream(|mut s, req| async move {
        if req.contains("\"stream\":true") {
            let _ = s.write_all(SSE_HEAD).await;
            let first = sse_event(&chunk(json!({"role": "assistant", "content": "a"}), None));
            let _ = s.write_all(first.as_bytes()).await;
            // A line that never ends, one byte at a time.
            let _ = s.write_all(b"data: {\"x\": \"").await;
            while s.write_all(b"y").await.is_ok() {
                tokio::time::sleep(Duration::from_millis(30)).await;
            }
        } else {
            let _ = s.write_all(json_head(400).as_bytes()).await;
            let _ = s.write_all(b"{\"id\"").await;
            std::future::pending::<()>().await;
        }
    })
    .await;
    let p = proxy_with("", &url, |c| {
        c.upstream.idle_timeout_secs = 0.3;
        c.upstream.retries = Some(0);
    })
    .await;
    let limit = Duration::from_secs(5);
    let (st, _, body) = within(limit, "chat", post(&p, None, &hello())).await;
    assert_eq!((st, body["error"]["code"].as_str()), (504, Some("upstream_timeout")), "{body}");
    let embed = p.http.post(p.url("/v1/embeddings")).json(&json!({"model": "v/e", "input": "hi"})).send();
    let r = within(limit, "embeddings", embed).await.unwrap();
    assert_eq!(r.status(), 504);
    let (st, events) = within(limit, "stream", p.chat_stream(stream_req())).await;
    assert_eq!(st, 200);
    assert_eq!(events[0]["choices"][0]["delta"]["content"], "a", "{events:?}");
    assert_eq!(events.last().unwrap()["error"]["code"], "upstream_timeout", "{events:?}");
}

/// What one answer may weigh: a JSON body, one SSE event, a whole stream
/// assembled for a non-streamed client; and a body in a content coding (a
/// gzip bomb) is refused: an OpenAI error, before the upstream sent it all.
#[tokio::test]
async fn answers_over_max_answer_bytes_are_refused() {
    const MAX: usize = 64 * 1024;
    let sent = Arc::new(AtomicUsize::new(0));
    let s2 = sent.clone();
    let url = raw_upstream(move |mut s, req| {
        let sent = s2.clone();
        async move {
            let model = ["big-json", "many-events", "endless-event", "gzip"].into_iter().find(|m| req.contains(m));
            match model {
                Some("big-json") => {
                    let body = completion(json!({"role": "assistant", "content": "x".repeat(1 << 20)}), "stop");
                    let body = body.to_string();
                    let _ = s.write_all(json_head(body.len()).as_bytes()).await;
                    let _ = s.write_all(body.as_bytes()).await;
                }
                Some("many-events") => {
                    let _ = s.write_all(SSE_HEAD).await;
                    let e = sse_event(&chunk(json!({"content": "y".repeat(1024)}), None));
                    for _ in 0..20_000 {
                        if s.write_all(e.as_bytes()).await.is_err() {
                            return;
                        }
                        sent.fetch_add(e.len(), Ordering::SeqCst);
                    }
                    let _ = s.write_all(b"data: [DONE]\n\n").await;
                }
                Some("endless-event") => {
                    let _ = s.write_all(SSE_HEAD).await;
                    let _ = s.write_all(b"data: ").await;
                    let junk = vec![b'z'; 16 * 1024];
                    for _ in 0..4096 {
                        if s.write_all(&junk).await.is_err() {
                            return;
                        }
                        sent.fetch_add(junk.len(), Ordering::SeqCst);
                    }
                }
                _ => {
                    let head = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-encoding: gzip\r\nconnection: close\r\n\r\n";
                    let _ = s.write_all(head.as_bytes()).await;
                    let _ = s.write_all(&[0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 3]).await;
                }
            }
        }
    })
    .await;
    let p = proxy_with("", &url, |c| {
        c.limits.max_answer_bytes = MAX;
        c.upstream.retries = Some(0);
    })
    .await;
    let ask = |model: &str, stream: bool| json!({"model": format!("v/{model}"), "stream": stream, "messages": [{"role": "user", "content": "hi"}]});
    let limit = Duration::from_secs(10);
    for model in ["big-json", "many-events", "endless-event"] {
        sent.store(0, Ordering::SeqCst);
        let (st, _, body) = within(limit, model, post(&p, None, &ask(model, false))).await;
        assert_eq!(st, 502, "{model}: {body}");
        let msg = body["error"]["message"].as_str().unwrap_or_default();
        assert!(msg.contains("max_answer_bytes"), "{model}: {body}");
        // Loopback socket buffers take some MiB the proxy never reads.
        let sent = sent.load(Ordering::SeqCst);
        assert!(model == "big-json" || sent < 16 << 20, "{model}: the upstream's body was read on: {sent}");
    }
    // Streamed: one event over the cap before the first one is a 502 too.
    let r = p.http.post(p.url("/v1/chat/completions")).json(&ask("endless-event", true)).send();
    assert_eq!(within(limit, "stream", r).await.unwrap().status(), 502);
    let (st, _, body) = within(limit, "gzip", post(&p, None, &ask("gzip", false))).await;
    assert_eq!(st, 502, "{body}");
    assert!(body["error"]["message"].as_str().unwrap_or_default().contains("content-encoding gzip"), "{body}");
}

/// A stream that ends without `[DONE]` and without a finish reason was cut:
/// an in-band error (502 for a non-streamed client), never `stop`. One that
/// ends after its finish chunk without `[DONE]` (some vendors) is complete.
#[tokio::test]
async fn a_stream_cut_before_its_finish_is_an_error() {
    let url = raw_upstream(|mut s, req| async move {
        let _ = s.write_all(SSE_HEAD).await;
        let mut body = sse_event(&chunk(json!({"role": "assistant", "content": "Hel"}), None));
        if req.contains("\"finished\"") {
            body.push_str(&sse_event(&chunk(json!({"content": "lo"}), Some("stop"))));
        }
        if req.contains("\"cut-mid-event\"") {
            body.push_str("data: {\"id\": \"up-1\", \"choi");
        }
        if !req.contains("\"empty\"") {
            let _ = s.write_all(body.as_bytes()).await;
        }
    })
    .await;
    let p = proxy_with("", &url, |c| c.upstream.retries = Some(0)).await;
    let ask = |model: &str, stream: bool| json!({"model": format!("v/{model}"), "stream": stream, "messages": [{"role": "user", "content": "hi"}]});
    let (st, events) = p.chat_stream(ask("finished", true)).await;
    assert_eq!(st, 200);
    assert_eq!(events.last(), Some(&json!("[DONE]")), "{events:?}");
    assert_eq!(assemble(&events)["finish"], "stop");
    let (st, body) = p.chat(ask("finished", false)).await;
    assert_eq!((st, &body["choices"][0]["message"]["content"]), (200, &json!("Hello")), "{body}");

    for model in ["cut", "cut-mid-event"] {
        let (st, events) = p.chat_stream(ask(model, true)).await;
        assert_eq!(st, 200);
        assert_eq!(events[0]["choices"][0]["delta"]["content"], "Hel", "{events:?}");
        let last = events.last().unwrap();
        assert!(last.get("error").is_some(), "{model}: {events:?}");
        assert!(!events.contains(&json!("[DONE]")), "{model}: {events:?}");
        assert!(events.iter().all(|e| e["choices"][0]["finish_reason"].is_null()), "{model}: {events:?}");
        let (st, body) = p.chat(ask(model, false)).await;
        assert_eq!(st, 502, "{model}: {body}");
    }
    assert_eq!(
        last_error(&p.chat_stream(ask("cut", true)).await.1)["code"],
        "upstream_stream_incomplete",
        "a body that simply ends"
    );
    let (st, body) = p.chat(ask("empty", false)).await;
    assert_eq!((st, body["error"]["code"].as_str()), (502, Some("upstream_stream_incomplete")), "{body}");
}

fn last_error(events: &[Value]) -> Value {
    events.last().map(|e| e["error"].clone()).unwrap_or_default()
}

/// One content event of 1 MiB, in the reads TCP makes of it, goes through as
/// one piece of text, streamed and not (the SSE reader's own test feeds one
/// in 16,384 reads: eventsource-stream read its whole buffer again on every
/// read, 31 s for one 16 MB event).
#[tokio::test]
async fn one_huge_content_event_goes_through() {
    const SIZE: usize = 1 << 20;
    let url = raw_upstream(|mut s, _| async move {
        let _ = s.write_all(SSE_HEAD).await;
        let first = sse_event(&chunk(json!({"role": "assistant", "content": ""}), None));
        let big = sse_event(&chunk(json!({"content": "w".repeat(SIZE)}), None));
        let last = sse_event(&chunk(json!({}), Some("stop")));
        let _ = s.write_all(format!("{first}{big}{last}data: [DONE]\n\n").as_bytes()).await;
    })
    .await;
    let p = proxy("", &url).await;
    let (st, events) = within(Duration::from_secs(60), "stream", p.chat_stream(stream_req())).await;
    assert_eq!(st, 200);
    assert_eq!(assemble(&events)["content"].as_str().unwrap().len(), SIZE);
    let (st, body) = within(Duration::from_secs(60), "whole", p.chat(hello())).await;
    assert_eq!(st, 200);
    assert_eq!(body["choices"][0]["message"]["content"].as_str().unwrap().len(), SIZE);
}

/// Clients of `serve`: a connection that sends nothing, a head sent slowly,
/// an HTTP/2 connection that opens no stream are closed after the header
/// timeout; a body sent slowly gets a 408 and gives its concurrency slot back.
#[tokio::test]
async fn silent_and_slow_clients_are_cut() {
    let (url, _) = scripted(vec![], Act::Stream { n: 1, gap: Duration::ZERO, size: 1 }).await;
    let (addr, stop, server) = serve_with(&url, Duration::from_secs(5), Some(1), |c| {
        c.limits.header_read_timeout_secs = 0.3;
        c.limits.body_read_timeout_secs = 0.3;
        c.limits.max_concurrent = Some(1);
    })
    .await;
    let limit = Duration::from_secs(3);
    /// Reads until the server closes; what it wrote.
    async fn until_closed(tcp: &mut tokio::net::TcpStream) -> String {
        let mut got = Vec::new();
        let _ = tcp.read_to_end(&mut got).await;
        String::from_utf8_lossy(&got).into_owned()
    }
    let mut silent = tokio::net::TcpStream::connect(addr).await.unwrap();
    within(limit, "a silent connection", until_closed(&mut silent)).await;

    let mut slow_head = tokio::net::TcpStream::connect(addr).await.unwrap();
    slow_head.write_all(b"POST /v1/chat/completions HTTP/1.1\r\nhost: localhost\r\n").await.unwrap();
    let drip = async {
        for _ in 0..100 {
            if slow_head.write_all(b"x").await.is_err() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    within(limit, "a slow head", drip).await;

    let mut h2 = tokio::net::TcpStream::connect(addr).await.unwrap();
    h2.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00").await.unwrap();
    within(limit, "an idle HTTP/2 connection", until_closed(&mut h2)).await;

    let body = stream_req().to_string();
    let mut slow_body = tokio::net::TcpStream::connect(addr).await.unwrap();
    let head = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
        body.len()
    );
    slow_body.write_all(head.as_bytes()).await.unwrap();
    slow_body.write_all(&body.as_bytes()[..10]).await.unwrap();
    let answer = within(limit, "a slow body", until_closed(&mut slow_body)).await;
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.contains("request_timeout"), "{answer}");
    // Its slot is free again.
    let r = reqwest::Client::new().post(format!("http://{addr}/v1/chat/completions")).json(&stream_req()).send();
    assert_eq!(within(limit, "the next request", r).await.unwrap().status(), 200);
    stop.send(()).unwrap();
    within(Duration::from_secs(5), "server stops", server).await.unwrap().unwrap();
}

/// At most `max_connections_per_ip` open connections per client address:
/// more are closed at accept, and a closed one frees its place.
#[tokio::test]
async fn connections_per_address_are_capped() {
    let (url, _) = scripted(vec![], Act::Stream { n: 1, gap: Duration::ZERO, size: 1 }).await;
    let (addr, stop, server) = serve_with(&url, Duration::from_secs(5), Some(1), |c| {
        c.limits.max_connections_per_ip = 2;
        // The test's client is on loopback, exempt by default.
        c.limits.cap_loopback_connections = true;
        c.limits.header_read_timeout_secs = 30.0;
    })
    .await;
    let a = tokio::net::TcpStream::connect(addr).await.unwrap();
    let _b = tokio::net::TcpStream::connect(addr).await.unwrap();
    let mut third = tokio::net::TcpStream::connect(addr).await.unwrap();
    let mut buf = [0u8; 16];
    let n = within(Duration::from_secs(2), "the third connection", third.read(&mut buf)).await;
    assert!(matches!(n, Ok(0) | Err(_)), "the third connection was served: {n:?}");
    drop(a);
    tokio::time::sleep(Duration::from_millis(100)).await;
    let r = reqwest::Client::new().post(format!("http://{addr}/v1/chat/completions")).json(&stream_req()).send();
    assert_eq!(within(Duration::from_secs(3), "a request", r).await.unwrap().status(), 200);
    stop.send(()).unwrap();
    within(Duration::from_secs(5), "server stops", server).await.unwrap().unwrap();
}

/// HTTP/2 has the same 8 KiB head limit as HTTP/1.1.
#[tokio::test]
async fn http2_heads_are_limited_like_http1() {
    let (url, _) = scripted(vec![], Act::Stream { n: 1, gap: Duration::ZERO, size: 1 }).await;
    let (addr, stop, server) = serve_with_shutdown(&url, Duration::from_secs(5), Some(1)).await;
    let h2 = reqwest::Client::builder().http2_prior_knowledge().build().unwrap();
    let send = |extra: usize| {
        h2.post(format!("http://{addr}/v1/chat/completions"))
            .header("x-pad", "a".repeat(extra))
            .json(&stream_req())
            .send()
    };
    let ok = send(6 * 1024).await.unwrap();
    assert_eq!((ok.status().as_u16(), ok.version()), (200, reqwest::Version::HTTP_2));
    let big = send(12 * 1024).await;
    assert!(
        big.as_ref().map_or(true, |r| r.status() == 431),
        "a 12 KiB head was served: {:?}",
        big.map(|r| r.status())
    );
    stop.send(()).unwrap();
    within(Duration::from_secs(5), "server stops", server).await.unwrap().unwrap();
}

/// mimalloc advised its arenas as huge-page memory (`MADV_HUGEPAGE`) while it
/// set itself up, before `main` could turn huge pages off: where the kernel
/// gives them on advice (`madvise`, a common default) two 2 MiB pages were
/// resident at rest for a few KiB in use. With `always` the process's own
/// switch (src/main.rs) is what holds, from `main` on; with `never` there is
/// nothing to see.
#[cfg(target_os = "linux")]
#[tokio::test]
async fn the_binary_holds_no_huge_page_at_rest() {
    let mode = std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled").unwrap_or_default();
    if !mode.contains("[madvise]") {
        eprintln!("transparent huge pages are not `madvise` here ({}): nothing to check", mode.trim());
        return;
    }
    let p = serve_process("", &[]).await;
    let r = p.proxy.http.get(p.proxy.url("/healthz")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    let smaps = std::fs::read_to_string(format!("/proc/{}/smaps_rollup", p.child.id())).unwrap();
    let huge: u64 = smaps
        .lines()
        .find_map(|l| l.strip_prefix("AnonHugePages:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap();
    assert_eq!(huge, 0, "huge pages resident at rest:\n{smaps}");
}
