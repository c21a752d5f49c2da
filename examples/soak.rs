//! Soak test: a `modelshim serve` process in front of a local mock upstream
//! that sometimes errors, rate-limits, stalls, drops connections or answers
//! garbage, under mixed streamed / non-streamed traffic, for a bounded time,
//! on loopback only. Checks that the proxy's RSS stays flat, that it never
//! panics, that every request gets a complete answer or a clean OpenAI error
//! (nothing lost), and that it stops cleanly on SIGTERM.
//!
//! `scripts/soak.sh` builds and runs it; by hand:
//! `cargo run --release --example soak -- --bin target/release/modelshim --secs 600`

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test harness fails by panicking

use std::collections::BTreeMap;
use std::io::Write;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

const KEY: &str = "sk-soak-test-key";

#[derive(Default)]
struct Faults {
    by_kind: std::sync::Mutex<BTreeMap<&'static str, u64>>,
}

impl Faults {
    fn note(&self, k: &'static str) {
        *self.by_kind.lock().unwrap().entry(k).or_default() += 1;
    }
}

fn chunk(delta: Value, finish: Option<&str>) -> String {
    let c = json!({"id": "up", "object": "chat.completion.chunk", "created": 1, "model": "m",
                   "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]});
    format!("data: {c}\n\n")
}

fn sse(s: impl futures_util::Stream<Item = Result<String, std::io::Error>> + Send + 'static) -> Response {
    Response::builder().header("content-type", "text/event-stream").body(Body::from_stream(s)).unwrap()
}

/// The faulty upstream: one request, one dice roll.
async fn upstream(faults: Arc<Faults>, body: axum::body::Bytes) -> Response {
    let req: Value = serde_json::from_slice(&body).unwrap_or_default();
    let stream = req["stream"] == true;
    let tools = req["tools"].is_array();
    let roll = fastrand::u32(0..100);
    let kind = match roll {
        0..60 => "ok",
        60..70 => "503",
        70..75 => "429",
        75..80 => "stall",
        80..85 => "drop_mid_stream",
        85..90 => "drop_before_first",
        90..95 => "slow_first_byte",
        _ => "garbage",
    };
    faults.note(kind);
    // A model that writes its tool call into the text, when tools are declared.
    let text = if tools {
        "Let me check. <tool_call>{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}</tool_call>"
    } else {
        "The quick brown fox jumps over the lazy dog. "
    };
    match kind {
        "503" => (axum::http::StatusCode::SERVICE_UNAVAILABLE, axum::Json(json!({"error": {"message": "overloaded"}})))
            .into_response(),
        "429" => Response::builder()
            .status(429)
            .header("retry-after-ms", "50")
            .header("content-type", "application/json")
            .body(Body::from(r#"{"error":{"message":"rate limited","type":"rate_limit"}}"#))
            .unwrap(),
        "garbage" => Response::builder().status(200).body(Body::from("<html>gateway says hi</html>")).unwrap(),
        "slow_first_byte" => {
            tokio::time::sleep(Duration::from_millis(2500)).await;
            (axum::http::StatusCode::OK, "too late").into_response()
        }
        "drop_before_first" => sse(futures_util::stream::once(async { Err(std::io::Error::other("dropped")) })),
        _ if !stream && kind == "ok" => {
            let msg = json!({"role": "assistant", "content": text.repeat(4)});
            axum::Json(json!({"id": "up", "object": "chat.completion", "created": 1, "model": "m",
                "choices": [{"index": 0, "message": msg, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 10, "completion_tokens": 20, "total_tokens": 30}}))
            .into_response()
        }
        _ => {
            // Streams (also for non-streamed clients on stall / drop).
            let parts: Vec<String> = text.split_inclusive(' ').map(str::to_string).collect();
            let s = async_stream::stream! {
                for (i, p) in parts.iter().enumerate() {
                    tokio::time::sleep(Duration::from_millis(fastrand::u64(1..8))).await;
                    if kind == "drop_mid_stream" && i == parts.len() / 2 {
                        yield Err(std::io::Error::other("connection reset"));
                        return;
                    }
                    if kind == "stall" && i == 2 {
                        std::future::pending::<()>().await;
                    }
                    yield Ok(chunk(json!({"content": p}), None));
                }
                yield Ok(chunk(json!({}), Some("stop")));
                yield Ok("data: {\"id\":\"up\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"choices\":[],\"usage\":{\"prompt_tokens\":10,\"completion_tokens\":20,\"total_tokens\":30}}\n\ndata: [DONE]\n\n".to_string());
            };
            sse(s)
        }
    }
}

#[derive(Default)]
struct Tally {
    ok: AtomicU64,
    clean_http_error: AtomicU64,
    clean_stream_error: AtomicU64,
    lost: AtomicU64,
    by_status: std::sync::Mutex<BTreeMap<u16, u64>>,
    lost_examples: std::sync::Mutex<Vec<String>>,
}

impl Tally {
    fn lost(&self, why: String) {
        self.lost.fetch_add(1, Ordering::Relaxed);
        let mut v = self.lost_examples.lock().unwrap();
        if v.len() < 10 {
            v.push(why);
        }
    }
}

/// One request; classifies the outcome.
async fn one(http: &reqwest::Client, url: &str, tally: &Tally) {
    let stream = fastrand::bool();
    let model = if fastrand::u8(0..4) == 0 { "smart" } else { "mock/m" };
    let mut body = json!({"model": model, "stream": stream,
                          "messages": [{"role": "user", "content": "Tell me about Paris."}]});
    if fastrand::bool() {
        body["tools"] = json!([{"type": "function", "function": {"name": "get_weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]);
    }
    let r = match http.post(url).bearer_auth(KEY).json(&body).send().await {
        Ok(r) => r,
        Err(e) => return tally.lost(format!("no response: {e}")),
    };
    let status = r.status().as_u16();
    *tally.by_status.lock().unwrap().entry(status).or_default() += 1;
    let text = match r.text().await {
        Ok(t) => t,
        Err(e) => return tally.lost(format!("{status}: body broken: {e}")),
    };
    if status != 200 {
        let v: Value = serde_json::from_str(&text).unwrap_or_default();
        if v["error"]["message"].is_string() {
            tally.clean_http_error.fetch_add(1, Ordering::Relaxed);
        } else {
            tally.lost(format!("{status}: not an OpenAI error: {text}"));
        }
        return;
    }
    if !stream {
        let v: Value = serde_json::from_str(&text).unwrap_or_default();
        if v["choices"][0]["message"].is_object() {
            tally.ok.fetch_add(1, Ordering::Relaxed);
        } else {
            tally.lost(format!("200 without a completion: {text}"));
        }
        return;
    }
    let events: Vec<&str> =
        text.split("\n\n").filter_map(|e| e.lines().find_map(|l| l.strip_prefix("data:")).map(str::trim)).collect();
    match events.last() {
        Some(&"[DONE]") => {
            if events.iter().any(|e| e.contains("\"error\"")) {
                tally.lost(format!("error before [DONE]: {text}"));
            } else {
                tally.ok.fetch_add(1, Ordering::Relaxed);
            }
        }
        Some(last) if serde_json::from_str::<Value>(last).is_ok_and(|v| v["error"]["message"].is_string()) => {
            tally.clean_stream_error.fetch_add(1, Ordering::Relaxed);
        }
        _ => tally.lost(format!("stream ended without [DONE] or an error: {text}")),
    }
}

fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines().find(|l| l.starts_with("VmRSS:")).and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

fn arg(name: &str, default: &str) -> String {
    let args: Vec<String> = std::env::args().collect();
    args.iter().position(|a| a == name).and_then(|i| args.get(i + 1).cloned()).unwrap_or_else(|| default.into())
}

#[tokio::main]
async fn main() {
    let bin = arg("--bin", "target/release/modelshim");
    let secs: u64 = arg("--secs", "600").parse().unwrap();
    let concurrency: usize = arg("--concurrency", "32").parse().unwrap();

    let _ = rustls::crypto::ring::default_provider().install_default();
    let faults = Arc::new(Faults::default());
    let f = faults.clone();
    let mock = axum::Router::new()
        .route("/v1/chat/completions", axum::routing::post(move |b: axum::body::Bytes| upstream(f.clone(), b)));
    let ml = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let mock_addr = ml.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(ml, mock).await });

    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("modelshim.toml");
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    std::fs::write(
        &cfg,
        format!(
            r#"
[providers.mock]
profile = "vllm"
base_url = "http://{mock_addr}/v1"
[providers.mock2]
profile = "vllm"
base_url = "http://{mock_addr}/v1"
[models]
smart = ["mock/m", "mock2/m"]
[auth]
keys = ["{KEY}"]
[upstream]
connect_timeout_secs = 1
first_byte_timeout_secs = 1
idle_timeout_secs = 1
retries = 2
retry_backoff_ms = 20
breaker_failures = 8
breaker_open_secs = 1
[limits]
shutdown_grace_secs = 5
[skills]
enabled = false
"#
        ),
    )
    .unwrap();
    let log_path = dir.path().join("modelshim.log");
    let log = std::fs::File::create(&log_path).unwrap();
    let mut child = Command::new(&bin)
        .args(["serve", "--config", cfg.to_str().unwrap(), "--listen", &format!("127.0.0.1:{port}"), "--json-logs"])
        .env("RUST_LOG", "modelshim=warn")
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {bin}: {e}"));
    let pid = child.id();
    let base = format!("http://127.0.0.1:{port}");
    let http = reqwest::Client::builder().timeout(Duration::from_secs(30)).build().unwrap();
    let t0 = Instant::now();
    while http.get(format!("{base}/healthz")).send().await.is_err() {
        assert!(t0.elapsed() < Duration::from_secs(10), "modelshim did not start; log: {}", log_path.display());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let idle_rss = rss_kib(pid);
    println!("soak: {secs}s, {concurrency} clients, modelshim pid {pid}, idle RSS {idle_rss} KiB");

    let tally = Arc::new(Tally::default());
    let deadline = Instant::now() + Duration::from_secs(secs);
    let url = format!("{base}/v1/chat/completions");
    let mut clients = Vec::new();
    for _ in 0..concurrency {
        let (http, url, tally) = (http.clone(), url.clone(), tally.clone());
        clients.push(tokio::spawn(async move {
            while Instant::now() < deadline {
                one(&http, &url, &tally).await;
            }
        }));
    }
    let mut samples: Vec<(u64, u64)> = Vec::new();
    let start = Instant::now();
    while Instant::now() < deadline {
        tokio::time::sleep(Duration::from_secs(5).min(deadline.saturating_duration_since(Instant::now()))).await;
        let s = start.elapsed().as_secs();
        let r = rss_kib(pid);
        samples.push((s, r));
        let done = tally.ok.load(Ordering::Relaxed)
            + tally.clean_http_error.load(Ordering::Relaxed)
            + tally.clean_stream_error.load(Ordering::Relaxed)
            + tally.lost.load(Ordering::Relaxed);
        if s % 60 < 5 {
            println!("  t={s:>4}s rss={r} KiB requests={done} lost={}", tally.lost.load(Ordering::Relaxed));
        }
    }
    for c in clients {
        c.await.unwrap();
    }
    let metrics = http.get(format!("{base}/metrics")).send().await.unwrap().text().await.unwrap();

    // Clean stop on SIGTERM.
    let alive = child.try_wait().unwrap().is_none();
    Command::new("kill").args(["-TERM", &pid.to_string()]).status().unwrap();
    let t = Instant::now();
    let exit = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break Some(st);
        }
        if t.elapsed() > Duration::from_secs(15) {
            let _ = child.kill();
            break None;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let log = std::fs::read_to_string(&log_path).unwrap_or_default();
    let panics = log.matches("panicked").count();

    // RSS: after warm-up (the first fifth of the run) against the last fifth.
    let n = samples.len().max(1);
    let med = |v: &[(u64, u64)]| {
        let mut r: Vec<u64> = v.iter().map(|x| x.1).collect();
        r.sort_unstable();
        r.get(r.len() / 2).copied().unwrap_or(0)
    };
    let warm = med(&samples[n / 5..(2 * n / 5).max(n / 5 + 1).min(n)]);
    let end = med(&samples[(4 * n / 5).min(n - 1)..]);
    let max = samples.iter().map(|x| x.1).max().unwrap_or(0);
    let total = tally.ok.load(Ordering::Relaxed)
        + tally.clean_http_error.load(Ordering::Relaxed)
        + tally.clean_stream_error.load(Ordering::Relaxed)
        + tally.lost.load(Ordering::Relaxed);
    let grep = |name: &str| -> f64 {
        metrics.lines().filter(|l| l.starts_with(name)).filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok()).sum()
    };
    println!("\n== soak results ({secs}s, {concurrency} clients)");
    println!("requests: {total} ({:.0}/s)", total as f64 / secs as f64);
    println!("  complete answers:        {}", tally.ok.load(Ordering::Relaxed));
    println!("  clean HTTP errors:       {}", tally.clean_http_error.load(Ordering::Relaxed));
    println!("  clean in-band errors:    {}", tally.clean_stream_error.load(Ordering::Relaxed));
    println!("  lost:                    {}", tally.lost.load(Ordering::Relaxed));
    println!("  by status: {:?}", tally.by_status.lock().unwrap());
    println!("upstream faults injected: {:?}", faults.by_kind.lock().unwrap());
    println!(
        "proxy metrics: retries {} fallbacks {} recovered tool calls {}",
        grep("modelshim_upstream_retries_total"),
        grep("modelshim_upstream_fallbacks_total"),
        grep("modelshim_tool_calls_recovered_total")
    );
    println!("RSS KiB: idle {idle_rss}, after warm-up {warm}, last fifth {end}, max {max}");
    println!("panics in log: {panics}; alive at end: {alive}; SIGTERM exit: {exit:?}");
    for l in tally.lost_examples.lock().unwrap().iter() {
        println!("  lost example: {}", &l[..l.len().min(300)]);
    }
    std::io::stdout().flush().unwrap();

    let flat = end <= warm + warm / 5 + 4096;
    let mut failed = Vec::new();
    if !flat {
        failed.push(format!("RSS grew: {warm} -> {end} KiB"));
    }
    if panics > 0 {
        failed.push(format!("{panics} panics"));
    }
    if tally.lost.load(Ordering::Relaxed) > 0 {
        failed.push("lost responses".into());
    }
    if !alive || exit.is_none_or(|s| !s.success()) {
        failed.push(format!("process alive={alive} exit={exit:?}"));
    }
    if total == 0 {
        failed.push("no traffic".into());
    }
    if failed.is_empty() {
        println!("SOAK PASSED");
    } else {
        println!("SOAK FAILED: {}", failed.join("; "));
        std::process::exit(1);
    }
}
