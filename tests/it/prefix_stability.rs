//! Vendors' prompt caches hit only on a byte-identical prefix. What the
//! proxy injects into a request — the skills catalog, prompt-mode tool
//! prompts, the json_schema prompt and its re-asks, image descriptions —
//! must therefore be byte-stable across identical requests, and turn N+1's
//! upstream request must start with turn N's messages exactly. One test per injection, on the bytes the
//! upstream receives.

use crate::common;

use std::sync::{Arc, Mutex};

use common::*;
use modelshim::config::Config;
use serde_json::{Value, json};
use wiremock::matchers::method;
use wiremock::{Mock, MockServer, Request, ResponseTemplate};

/// Records each upstream body as it arrived and answers with the brain's
/// message (a whole completion).
struct Raw {
    bodies: Arc<Mutex<Vec<Vec<u8>>>>,
    brain: Brain,
}

impl wiremock::Respond for Raw {
    fn respond(&self, r: &Request) -> ResponseTemplate {
        self.bodies.lock().unwrap().push(r.body.clone());
        let body: Value = serde_json::from_slice(&r.body).unwrap();
        let msg = (self.brain)(&body);
        let mut m = json!({"role": "assistant", "content": msg["content"].clone()});
        if let Some(calls) = msg.get("tool_calls") {
            m["tool_calls"] = calls.clone();
        }
        ResponseTemplate::new(200).set_body_json(completion(m, "stop"))
    }
}

struct Setup {
    _upstream: MockServer,
    proxy: Proxy,
    bodies: Arc<Mutex<Vec<Vec<u8>>>>,
}

impl Setup {
    /// Sends `req` and returns the upstream bodies it caused.
    async fn send(&self, req: &Value) -> Vec<Vec<u8>> {
        let before = self.bodies.lock().unwrap().len();
        let (st, v) = self.proxy.chat(req.clone()).await;
        assert_eq!(st, 200, "{v}");
        self.bodies.lock().unwrap()[before..].to_vec()
    }
}

async fn setup(profile: &str, config: &str, brain: impl Fn(&Value) -> Value + Send + Sync + 'static) -> Setup {
    let upstream = MockServer::start().await;
    let bodies: Arc<Mutex<Vec<Vec<u8>>>> = Arc::default();
    Mock::given(method("POST"))
        .respond_with(Raw { bodies: bodies.clone(), brain: Arc::new(brain) })
        .mount(&upstream)
        .await;
    let parsed: Config = toml::from_str(config).unwrap();
    let proxy = proxy_with(profile, &upstream.uri(), |c| {
        c.tools = parsed.tools;
        c.skills = parsed.skills;
    })
    .await;
    Setup { _upstream: upstream, proxy, bodies }
}

/// The upstream messages of a body, each as its exact JSON text.
fn messages(body: &[u8]) -> Vec<String> {
    let v: Value = serde_json::from_slice(body).unwrap();
    v["messages"].as_array().unwrap().iter().map(|m| m.to_string()).collect()
}

/// Everything of a body but its messages, as JSON text.
fn rest(body: &[u8]) -> String {
    let mut v: Value = serde_json::from_slice(body).unwrap();
    v.as_object_mut().unwrap().remove("messages");
    v.to_string()
}

/// The same request twice gives the same bytes upstream; the next turn's
/// upstream messages start with this turn's, and the rest of the body
/// (tools, response format) is unchanged.
async fn assert_stable(s: &Setup, turn1: &Value, turn2: &Value, what: &str) {
    let a = s.send(turn1).await;
    let b = s.send(turn1).await;
    assert!(!a.is_empty() && a == b, "{what}: identical requests sent different bytes upstream");
    let first = messages(a.last().unwrap());
    let next = s.send(turn2).await;
    let second = messages(&next[0]);
    assert!(second.len() > first.len(), "{what}: turn 2 is longer");
    assert_eq!(&second[..first.len()], &first[..], "{what}: turn 2 does not start with turn 1's messages");
    assert_eq!(rest(&next[0]), rest(a.last().unwrap()), "{what}: the rest of the request changed between turns");
}

fn then(turn1: &Value, assistant: Value, user: &str) -> Value {
    let mut t = turn1.clone();
    let m = t["messages"].as_array_mut().unwrap();
    m.push(assistant);
    m.push(json!({"role": "user", "content": user}));
    t
}

#[tokio::test]
async fn the_json_schema_prompt_is_byte_stable() {
    // An answer that validates: one that did not would be re-asked (docs/structured-outputs.md).
    let s =
        setup("[request]\njson_schema_to_prompt = true\n", "", |_| say("{\"city\": \"Paris\", \"temp\": 22}")).await;
    let schema = json!({"type": "object", "properties": {"city": {"type": "string"}, "temp": {"type": "number"}},
                        "required": ["city", "temp"]});
    let turn1 = json!({"model": "v/m", "messages": [
        {"role": "system", "content": "You answer in JSON."},
        {"role": "user", "content": "Weather in Paris?"}],
        "response_format": {"type": "json_schema", "json_schema": {"name": "weather", "schema": schema}}});
    let turn2 =
        then(&turn1, json!({"role": "assistant", "content": "{\"city\": \"Paris\", \"temp\": 22}"}), "And Rome?");
    assert_stable(&s, &turn1, &turn2, "json_schema prompt").await;
    let sent = String::from_utf8(s.bodies.lock().unwrap()[0].clone()).unwrap();
    assert!(sent.contains("temp") && sent.contains("json_object"), "the schema went into the prompt: {sent}");
}

fn weather_tool() -> Value {
    json!({"type": "function", "function": {"name": "get_weather", "description": "Weather of a city",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}})
}

#[tokio::test]
async fn prompt_mode_tool_prompts_are_byte_stable() {
    for format in ["hermes", "markdown_json_fence"] {
        let profile = format!("[tools]\nmode = \"prompt\"\nprompt_format = \"{format}\"\n");
        let s = setup(&profile, "", |_| say("Let me check.")).await;
        let turn1 = json!({"model": "v/m", "tools": [weather_tool()], "messages": [
            {"role": "system", "content": "You are helpful."},
            {"role": "user", "content": "Weather in Paris?"}]});
        // The next turn carries a call and its result, which prompt mode
        // writes as text after the turns the cache already holds.
        let mut turn2 = turn1.clone();
        let m = turn2["messages"].as_array_mut().unwrap();
        m.push(json!({"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function",
                      "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}}]}));
        m.push(json!({"role": "tool", "tool_call_id": "call_1", "content": "18 C"}));
        assert_stable(&s, &turn1, &turn2, &format!("prompt-mode tools ({format})")).await;
        let sent = String::from_utf8(s.bodies.lock().unwrap()[0].clone()).unwrap();
        assert!(sent.contains("get_weather") && !sent.contains("\"tools\""), "tools went into the prompt: {sent}");
    }
}

#[tokio::test]
async fn the_skills_catalog_is_byte_stable() {
    let dir = tempfile::tempdir().unwrap();
    for (name, description) in [("pdf-report", "Write a PDF report."), ("clock", "Tell the time in a city.")] {
        std::fs::create_dir_all(dir.path().join(name)).unwrap();
        std::fs::write(
            dir.path().join(name).join("SKILL.md"),
            format!("---\nname: {name}\ndescription: {description}\n---\n# {name}\nSteps.\n"),
        )
        .unwrap();
    }
    let config = format!("[skills]\ndirs = [{:?}]\nauto_reload = false\n", dir.path().display().to_string());
    let s = setup("", &config, |_| say("Noon.")).await;
    let turn1 = json!({"model": "v/m", "messages": [
        {"role": "system", "content": "You are helpful."},
        {"role": "user", "content": "What time is it in Rome?"}]});
    let turn2 = then(&turn1, json!({"role": "assistant", "content": "Noon."}), "And in Paris?");
    assert_stable(&s, &turn1, &turn2, "skills catalog").await;
    let sent = String::from_utf8(s.bodies.lock().unwrap()[0].clone()).unwrap();
    assert!(sent.contains("pdf-report") && sent.contains("clock"), "the catalog went upstream: {sent}");
}

/// A proxy with provider `name` on the bundled profile `profile`.
async fn bundled(profile: &str) -> Setup {
    let upstream = MockServer::start().await;
    let bodies: Arc<Mutex<Vec<Vec<u8>>>> = Arc::default();
    Mock::given(method("POST"))
        .respond_with(Raw { bodies: bodies.clone(), brain: Arc::new(|_| say("ok")) })
        .mount(&upstream)
        .await;
    let config: Config = toml::from_str(&format!(
        "[providers.v]\nprofile = \"{profile}\"\nbase_url = \"{}/v1\"\n[upstream]\nretries = 0\n",
        upstream.uri()
    ))
    .unwrap();
    let profiles = modelshim::provider::load_profiles(None).unwrap();
    let proxy = serve_state(modelshim::server::AppState::new(&config, &profiles).unwrap()).await;
    Setup { _upstream: upstream, proxy, bodies }
}

/// What Claude Code sends: markers (one with a `ttl`) on the system prompt,
/// a per-turn system block and the last user block.
fn claude_code_turn() -> Value {
    json!({"model": "v/qwen3-coder-plus", "max_tokens": 64, "system": [
        {"type": "text", "text": "You are Claude Code."},
        {"type": "text", "text": "Project instructions.", "cache_control": {"type": "ephemeral", "ttl": "1h"}}],
      "messages": [
        {"role": "user", "content": [{"type": "text", "text": "Fix the parser.", "cache_control": {"type": "ephemeral"}}]},
        {"role": "assistant", "content": [{"type": "text", "text": "Done."}]},
        {"role": "system", "content": [{"type": "text", "text": "# Environment", "cache_control": {"type": "ephemeral"}}]},
        {"role": "user", "content": [{"type": "text", "text": "Now the tests.", "cache_control": {"type": "ephemeral"}}]}]})
}

async fn messages_upstream(s: &Setup, body: &Value) -> Value {
    let before = s.bodies.lock().unwrap().len();
    let r = s.proxy.http.post(s.proxy.url("/v1/messages")).json(body).send().await.unwrap();
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
    serde_json::from_slice(&s.bodies.lock().unwrap()[before]).unwrap()
}

#[tokio::test]
async fn a_dashscope_request_carries_the_cache_markers_in_its_form_without_ttl() {
    let s = bundled("dashscope").await;
    let up = messages_upstream(&s, &claude_code_turn()).await;
    let marker = json!({"type": "ephemeral"});
    let m = up["messages"].as_array().unwrap();
    // merge_system: one system message, first, still marked.
    assert_eq!(m[0]["role"], "system");
    assert_eq!(
        m[0]["content"],
        json!([{"type": "text", "text": "You are Claude Code.\n\nProject instructions.\n\n# Environment", "cache_control": marker}])
    );
    assert_eq!(m[1]["content"], json!([{"type": "text", "text": "Fix the parser.", "cache_control": marker}]));
    assert_eq!(m[2], json!({"role": "assistant", "content": "Done."}));
    assert_eq!(m[3]["content"], json!([{"type": "text", "text": "Now the tests.", "cache_control": marker}]));
    let text = up.to_string();
    assert!(!text.contains("ttl"), "a ttl reached the vendor: {text}");
    assert_eq!(text.matches("cache_control").count(), 3, "{text}");
    // And byte-stable like every other injection.
    assert_eq!(up, messages_upstream(&s, &claude_code_turn()).await);
}

#[tokio::test]
async fn elsewhere_the_cache_markers_are_dropped() {
    for profile in ["deepseek", "moonshot", "generic"] {
        let s = bundled(profile).await;
        let up = messages_upstream(&s, &claude_code_turn()).await;
        let text = up.to_string();
        assert!(!text.contains("cache_control") && !text.contains("ttl"), "{profile}: {text}");
        assert_eq!(up["messages"][1], json!({"role": "user", "content": "Fix the parser."}), "{profile}");
    }
}

#[tokio::test]
async fn usage_and_console_show_the_cache_hit_share_per_key_and_model() {
    let upstream = MockServer::start().await;
    let mut answer = completion(json!({"role": "assistant", "content": "ok"}), "stop");
    answer["usage"] = json!({"prompt_tokens": 1000, "completion_tokens": 5, "total_tokens": 1005,
                             "prompt_tokens_details": {"cached_tokens": 800}});
    Mock::given(method("POST")).respond_with(ResponseTemplate::new(200).set_body_json(answer)).mount(&upstream).await;
    let config = format!(
        "[providers.v]\nbase_url = \"{}/v1\"\nmodels = [\"m\"]\n\
         [auth]\nkeys = [{{ key = \"sk-k47-cache-7Yh2\", name = \"team-cache\" }}]\n\
         [console]\nenabled = true\nadmin_key_env = \"K47_CACHE_ADMIN\"\n",
        upstream.uri()
    );
    let p = serve_process(&config, &[("K47_CACHE_ADMIN", "k47-cache-admin-9Qw")]).await;
    let http = &p.proxy.http;
    for _ in 0..2 {
        let r = http
            .post(p.proxy.url("/v1/chat/completions"))
            .bearer_auth("sk-k47-cache-7Yh2")
            .json(&json!({"model": "v/m", "messages": [{"role": "user", "content": "hi"}]}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
    }
    let usage: Value =
        http.get(p.proxy.url("/v1/usage")).bearer_auth("sk-k47-cache-7Yh2").send().await.unwrap().json().await.unwrap();
    assert_eq!(
        usage["cache"],
        json!([{"provider": "v", "model": "m", "input_tokens": 2000, "cached_input_tokens": 1600, "hit_share": 0.8}]),
        "{usage}"
    );
    let console: Value = http
        .get(p.proxy.url("/console/api/proxy"))
        .bearer_auth("k47-cache-admin-9Qw")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let row = &console["cache"][0];
    assert_eq!((row["key"].as_str(), row["hit_share"].as_f64()), (Some("team-cache"), Some(0.8)), "{console}");
    assert!(!console.to_string().contains("sk-k47-cache-7Yh2"));
}

#[tokio::test]
async fn a_structured_re_ask_is_byte_stable_and_extends_the_request() {
    // Invalid first (a string for a number), valid once told why.
    let s = setup("[request]\njson_schema_to_prompt = true\n", "", |body| {
        let last = body["messages"].as_array().unwrap().last().unwrap()["content"].to_string();
        if last.contains("did not validate") {
            say("{\"city\": \"Paris\", \"temp\": 22}")
        } else {
            say("{\"city\": \"Paris\", \"temp\": \"warm\"}")
        }
    })
    .await;
    let schema = json!({"type": "object", "properties": {"city": {"type": "string"}, "temp": {"type": "number"}},
                        "required": ["city", "temp"]});
    let req = json!({"model": "v/m", "messages": [{"role": "user", "content": "Weather in Paris?"}],
        "response_format": {"type": "json_schema", "json_schema": {"name": "weather", "schema": schema}}});
    let a = s.send(&req).await;
    let b = s.send(&req).await;
    assert_eq!(a.len(), 2, "asked, then asked again");
    assert_eq!(a, b, "identical requests, identical bytes upstream, the re-ask too");
    let (first, again) = (messages(&a[0]), messages(&a[1]));
    assert_eq!(&again[..first.len()], &first[..], "the re-ask starts with the request as first sent");
    assert_eq!(rest(&a[1]), rest(&a[0]), "the rest of the request is unchanged");
}

#[tokio::test]
async fn an_image_description_is_the_same_on_every_turn() {
    use crate::vision::{PNG, ask_about, data_url, log};
    let s = crate::vision::setup(true, |_| say("It says: file not found."), |_| {}).await;
    let turn1 = ask_about(&data_url(PNG));
    let turn2 = then(&turn1, json!({"role": "assistant", "content": "It says: file not found."}), "How do I fix it?");
    for t in [&turn1, &turn1, &turn2] {
        let (st, v) = s.proxy.chat(t.clone()).await;
        assert_eq!(st, 200, "{v}");
    }
    let sent: Vec<Vec<String>> =
        log(&s.text).iter().map(|b| b["messages"].as_array().unwrap().iter().map(Value::to_string).collect()).collect();
    assert_eq!(sent.len(), 3, "{sent:?}");
    assert_eq!(sent[0], sent[1], "the same request, the same description, the same bytes");
    assert_eq!(&sent[2][..sent[0].len()], &sent[0][..], "turn 2 starts with turn 1's messages as sent");
    assert_eq!(log(&s.seeing).len(), 1, "described once");
}
