//! Shared test harness: runs the real server (`app(state)`) on a loopback
//! port in front of an upstream, and reads what a client sees.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::net::SocketAddr;

use modelshim::config::{Config, ProviderConfig};
use modelshim::provider::Profile;
use modelshim::server::{AppState, app};
use serde_json::{Value, json};

/// A running proxy.
pub struct Proxy {
    pub addr: SocketAddr,
    pub http: reqwest::Client,
}

impl Proxy {
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// POSTs a chat request; returns status and parsed JSON body.
    pub async fn chat(&self, body: Value) -> (u16, Value) {
        let r = self.http.post(self.url("/v1/chat/completions")).json(&body).send().await.expect("proxy reachable");
        let status = r.status().as_u16();
        let text = r.text().await.expect("body");
        (status, serde_json::from_str(&text).unwrap_or(Value::String(text)))
    }

    /// POSTs a streamed chat request; returns status and every SSE data
    /// payload (`[DONE]` included as a string).
    pub async fn chat_stream(&self, mut body: Value) -> (u16, Vec<Value>) {
        body["stream"] = json!(true);
        let r = self.http.post(self.url("/v1/chat/completions")).json(&body).send().await.expect("proxy reachable");
        let status = r.status().as_u16();
        let text = r.text().await.expect("body");
        (status, parse_sse(&text))
    }
}

/// Data payloads of an SSE body; non-JSON payloads become strings.
pub fn parse_sse(text: &str) -> Vec<Value> {
    text.split("\n\n")
        .filter_map(|ev| {
            let data: Vec<&str> = ev.lines().filter_map(|l| l.strip_prefix("data:")).map(str::trim_start).collect();
            if data.is_empty() {
                return None;
            }
            let d = data.join("\n");
            Some(serde_json::from_str(&d).unwrap_or(Value::String(d)))
        })
        .collect()
}

/// Starts a proxy with one provider `v` using the given profile TOML (the
/// `base_url` in it is replaced by `upstream`).
pub async fn proxy(profile_toml: &str, upstream: &str) -> Proxy {
    proxy_with(profile_toml, upstream, |_| {}).await
}

pub async fn proxy_with(profile_toml: &str, upstream: &str, tweak: impl FnOnce(&mut Config)) -> Proxy {
    let text = format!("name = \"test vendor\"\nbase_url = \"http://unused\"\n{profile_toml}");
    let profile = Profile::parse("testvendor", &text).expect("profile parses");
    let mut profiles = BTreeMap::new();
    profiles.insert("testvendor".to_string(), profile);
    let mut config = Config::default();
    config.providers.insert(
        "v".into(),
        ProviderConfig {
            profile: Some("testvendor".into()),
            base_url: Some(format!("{}/v1", upstream.trim_end_matches('/'))),
            ..Default::default()
        },
    );
    tweak(&mut config);
    let state = AppState::new(&config, &profiles).expect("state");
    serve_state(state).await
}

/// Serves an already built state on a loopback port.
pub async fn serve_state(state: modelshim::server::Shared) -> Proxy {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        let _ = axum::serve(listener, app(state)).await;
    });
    Proxy { addr, http: reqwest::Client::new() }
}

/// An SSE body from chunk values (and `[DONE]`).
pub fn sse_body(chunks: &[Value]) -> String {
    let mut s = String::new();
    for c in chunks {
        s.push_str("data: ");
        s.push_str(&c.to_string());
        s.push_str("\n\n");
    }
    s.push_str("data: [DONE]\n\n");
    s
}

/// A streamed chunk with one choice.
pub fn chunk(delta: Value, finish: Option<&str>) -> Value {
    json!({"id": "up-1", "object": "chat.completion.chunk", "created": 1, "model": "m",
           "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
}

/// A non-streamed completion with one message.
pub fn completion(message: Value, finish: &str) -> Value {
    json!({"id": "up-1", "object": "chat.completion", "created": 1, "model": "m",
           "choices": [{"index": 0, "message": message, "finish_reason": finish}],
           "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}})
}

/// What a client ends up with after a stream, assembled the way the OpenAI
/// SDKs do (tool calls by index), checking the SDK's expectations on the way:
/// each call's first delta has id, type and name; every delta has an index.
pub fn assemble(events: &[Value]) -> Value {
    let mut content = String::new();
    let mut reasoning = String::new();
    let mut calls: BTreeMap<u64, (String, String, String)> = BTreeMap::new();
    let mut finish = Value::Null;
    let mut usage = Value::Null;
    for e in events {
        if e == "[DONE]" {
            continue;
        }
        assert!(e.get("error").is_none(), "unexpected error event: {e}");
        if !e["usage"].is_null() {
            usage = e["usage"].clone();
        }
        for ch in e["choices"].as_array().into_iter().flatten() {
            let d = &ch["delta"];
            content.push_str(d["content"].as_str().unwrap_or(""));
            reasoning.push_str(d["reasoning_content"].as_str().unwrap_or(""));
            for tc in d["tool_calls"].as_array().into_iter().flatten() {
                let ix = tc["index"].as_u64().expect("every tool-call delta has an index");
                let first = !calls.contains_key(&ix);
                let entry = calls.entry(ix).or_default();
                if first {
                    assert!(tc["id"].is_string(), "first delta of call {ix} has an id: {tc}");
                    assert_eq!(tc["type"], "function", "first delta of call {ix} has a type: {tc}");
                    assert!(tc["function"]["name"].is_string(), "first delta of call {ix} has a name: {tc}");
                    entry.0 = tc["id"].as_str().unwrap_or_default().to_string();
                } else {
                    assert!(tc["id"].is_null(), "later deltas of call {ix} carry no id: {tc}");
                }
                entry.1.push_str(tc["function"]["name"].as_str().unwrap_or(""));
                entry.2.push_str(tc["function"]["arguments"].as_str().unwrap_or(""));
            }
            if !ch["finish_reason"].is_null() {
                finish = ch["finish_reason"].clone();
            }
        }
    }
    calls_json(content, reasoning, calls.into_values().collect(), finish, usage)
}

/// The same view of a non-streamed response.
pub fn message_view(body: &Value) -> Value {
    let m = &body["choices"][0]["message"];
    let calls = m["tool_calls"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|t| {
            (
                t["id"].as_str().unwrap_or_default().to_string(),
                t["function"]["name"].as_str().unwrap_or_default().to_string(),
                t["function"]["arguments"].as_str().expect("arguments is a string").to_string(),
            )
        })
        .collect();
    calls_json(
        m["content"].as_str().unwrap_or("").to_string(),
        m["reasoning_content"].as_str().unwrap_or("").to_string(),
        calls,
        body["choices"][0]["finish_reason"].clone(),
        body["usage"].clone(),
    )
}

fn calls_json(
    content: String,
    reasoning: String,
    calls: Vec<(String, String, String)>,
    finish: Value,
    usage: Value,
) -> Value {
    let calls: Vec<Value> = calls
        .into_iter()
        .map(|(id, name, args)| {
            let parsed: Value =
                serde_json::from_str(&args).unwrap_or_else(|e| panic!("arguments {args:?} not JSON: {e}"));
            json!({"id": id, "name": name, "arguments": parsed})
        })
        .collect();
    json!({"content": content, "reasoning": reasoning, "calls": calls, "finish": finish, "usage": usage})
}

/// Drops generated ids (`call_…`) so views can be compared.
pub fn without_generated_ids(mut v: Value) -> Value {
    for c in v["calls"].as_array_mut().into_iter().flatten() {
        if c["id"].as_str().is_some_and(|i| i.starts_with("call_")) {
            c["id"] = json!("<generated>");
        }
    }
    v
}

/// A `modelshim serve` OS process with its own config file, killed on drop.
pub struct ServeProcess {
    pub child: std::process::Child,
    pub proxy: Proxy,
    _dir: tempfile::TempDir,
}

impl Drop for ServeProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl ServeProcess {
    /// What the process wrote to stderr so far (its log).
    pub fn log(&self) -> String {
        std::fs::read_to_string(self._dir.path().join("stderr.log")).unwrap_or_default()
    }

    /// Sends SIGTERM and waits (bounded) for the process to exit.
    pub fn terminate(&mut self) -> std::process::ExitStatus {
        let _ = std::process::Command::new("kill").args(["-TERM", &self.child.id().to_string()]).status();
        let t = std::time::Instant::now();
        loop {
            if let Some(st) = self.child.try_wait().unwrap() {
                return st;
            }
            assert!(t.elapsed() < std::time::Duration::from_secs(30), "modelshim did not exit after SIGTERM");
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }
}

/// Starts the real binary (`CARGO_BIN_EXE_modelshim serve`) with `config_toml`
/// on a free loopback port and waits until `/readyz` answers.
pub async fn serve_process(config_toml: &str, env: &[(&str, &str)]) -> ServeProcess {
    modelshim::provider::upstream::install_crypto_provider(); // for this process's own client
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("modelshim.toml");
    std::fs::write(&path, config_toml).unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let addr: SocketAddr = ([127, 0, 0, 1], port).into();
    let child = std::process::Command::new(env!("CARGO_BIN_EXE_modelshim"))
        .args(["serve", "--config"])
        .arg(&path)
        .args(["--listen", &addr.to_string()])
        .current_dir(dir.path())
        .env("HOME", dir.path())
        .env("RUST_LOG", "warn")
        .envs(env.iter().copied())
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(dir.path().join("stderr.log")).unwrap())
        .spawn()
        .unwrap();
    let mut p = ServeProcess { child, proxy: Proxy { addr, http: reqwest::Client::new() }, _dir: dir };
    let t = std::time::Instant::now();
    loop {
        if let Ok(r) = p.proxy.http.get(p.proxy.url("/readyz")).send().await
            && r.status() == 200
        {
            return p;
        }
        if let Some(st) = p.child.try_wait().unwrap() {
            panic!("modelshim exited before it was ready: {st}\n{}", p.log());
        }
        assert!(t.elapsed() < std::time::Duration::from_secs(30), "modelshim was not ready within 30 s");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

/// What a scripted upstream answers: a function of the request body to an
/// assistant message (`content`, `tool_calls`).
pub type Brain = std::sync::Arc<dyn Fn(&Value) -> Value + Send + Sync>;
/// Every request body a scripted upstream received.
pub type Log = std::sync::Arc<std::sync::Mutex<Vec<Value>>>;

/// A plain text answer for a [`Brain`].
pub fn say(content: &str) -> Value {
    json!({"content": content})
}

/// Answers each upstream request with what the brain says, as SSE when the
/// request streams, else as one completion; every request is logged.
pub struct Script {
    pub brain: Brain,
    pub log: Log,
}

impl wiremock::Respond for Script {
    fn respond(&self, r: &wiremock::Request) -> wiremock::ResponseTemplate {
        let body: Value = serde_json::from_slice(&r.body).unwrap();
        self.log.lock().unwrap().push(body.clone());
        let msg = (self.brain)(&body);
        let usage = json!({"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2});
        let calls: Vec<Value> = msg["tool_calls"].as_array().cloned().unwrap_or_default();
        let finish = if calls.is_empty() { "stop" } else { "tool_calls" };
        if body["stream"] == true {
            let mut chunks = vec![chunk(json!({"role": "assistant", "content": ""}), None)];
            let text = msg["content"].as_str().unwrap_or("");
            let mid = text.char_indices().nth(text.chars().count() / 2).map_or(0, |(i, _)| i);
            for piece in [&text[..mid], &text[mid..]] {
                if !piece.is_empty() {
                    chunks.push(chunk(json!({"content": piece}), None));
                }
            }
            for (i, c) in calls.iter().enumerate() {
                let mut c = c.clone();
                c["index"] = json!(i);
                chunks.push(chunk(json!({"tool_calls": [c]}), None));
            }
            chunks.push(chunk(json!({}), Some(finish)));
            chunks.push(json!({"id": "up-1", "object": "chat.completion.chunk", "created": 1, "model": "m",
                               "choices": [], "usage": usage}));
            wiremock::ResponseTemplate::new(200).set_body_raw(sse_body(&chunks), "text/event-stream")
        } else {
            let mut m = json!({"role": "assistant", "content": msg["content"].clone()});
            if !calls.is_empty() {
                m["tool_calls"] = Value::Array(calls);
            }
            wiremock::ResponseTemplate::new(200).set_body_json(completion(m, finish))
        }
    }
}
