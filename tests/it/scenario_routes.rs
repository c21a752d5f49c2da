//! `[routes]`: Claude Code's and Codex's requests go to the alias or chain
//! of their scenario — long context (estimated tokens), images, the
//! background (haiku) model, reasoning — and a request that pins
//! `provider/model` is left alone.

use crate::common;

use std::sync::{Arc, Mutex};

use common::*;
use modelshim::config::Config;
use serde_json::{Value, json};
use wiremock::matchers::method;
use wiremock::{Mock, MockServer, ResponseTemplate};

struct Models(Arc<Mutex<Vec<String>>>);

impl wiremock::Respond for Models {
    fn respond(&self, r: &wiremock::Request) -> ResponseTemplate {
        let body: Value = serde_json::from_slice(&r.body).unwrap();
        let model = body["model"].as_str().unwrap_or("").to_string();
        self.0.lock().unwrap().push(model.clone());
        // The first long-context target is down: the chain goes on.
        if model == "down" {
            return ResponseTemplate::new(503).set_body_json(json!({"error": {"message": "overloaded"}}));
        }
        ResponseTemplate::new(200).set_body_json(completion(json!({"role": "assistant", "content": model}), "stop"))
    }
}

async fn setup() -> (MockServer, Proxy, Arc<Mutex<Vec<String>>>) {
    let server = MockServer::start().await;
    let seen: Arc<Mutex<Vec<String>>> = Arc::default();
    Mock::given(method("POST")).respond_with(Models(seen.clone())).mount(&server).await;
    let url = format!("{}/v1", server.uri());
    let config: Config = toml::from_str(&format!(
        "[providers.main]\nbase_url = \"{url}\"\n[providers.alt]\nbase_url = \"{url}\"\n\
         [models]\n\"claude-*\" = \"main/big\"\n\"gpt-*\" = \"main/big\"\nvision = \"alt/vl\"\n\
         [routes]\nlong_context = [\"alt/down\", \"alt/long\"]\nlong_context_tokens = 1000\n\
         background = \"alt/flash\"\nthink = \"alt/reasoner\"\nimage = \"vision\"\n\
         [upstream]\nretries = 0\nbreaker_failures = 0\n"
    ))
    .unwrap();
    let profiles = modelshim::provider::load_profiles(None).unwrap();
    let proxy = serve_state(modelshim::server::AppState::new(&config, &profiles).unwrap()).await;
    (server, proxy, seen)
}

async fn messages(p: &Proxy, body: Value) -> String {
    let r = p.http.post(p.url("/v1/messages")).json(&body).send().await.unwrap();
    let v: Value = r.json().await.unwrap();
    v["content"][0]["text"].as_str().unwrap_or_else(|| panic!("{v}")).to_string()
}

fn claude(model: &str, content: Value) -> Value {
    json!({"model": model, "max_tokens": 64, "messages": [{"role": "user", "content": content}]})
}

#[tokio::test]
async fn each_scenario_goes_to_its_route() {
    let (_server, p, seen) = setup().await;
    let sonnet = "claude-sonnet-4-5-20250929";
    assert_eq!(messages(&p, claude(sonnet, json!("Fix the parser."))).await, "big");
    // Claude Code's background calls name its haiku model.
    assert_eq!(messages(&p, claude("claude-haiku-4-5-20251001", json!("Title this chat."))).await, "flash");
    let mut thinking = claude(sonnet, json!("Why does this deadlock?"));
    thinking["thinking"] = json!({"type": "enabled", "budget_tokens": 4000});
    assert_eq!(messages(&p, thinking.clone()).await, "reasoner");
    let image = json!([{"type": "text", "text": "What is this?"},
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}}]);
    assert_eq!(messages(&p, claude(sonnet, image)).await, "vl", "an alias as the target");
    // About 2000 estimated tokens: long context, along its chain.
    seen.lock().unwrap().clear();
    assert_eq!(messages(&p, claude(sonnet, json!("x ".repeat(4000)))).await, "long");
    assert_eq!(*seen.lock().unwrap(), ["down", "long"]);
    // Pinned to a provider: left alone.
    let mut pinned = thinking;
    pinned["model"] = json!("main/big");
    assert_eq!(messages(&p, pinned).await, "big");

    // Codex and other OpenAI clients: the same routes on chat completions.
    let (_, v) = p
        .chat(json!({"model": "gpt-5", "reasoning_effort": "high", "messages": [{"role": "user", "content": "plan"}]}))
        .await;
    assert_eq!(v["choices"][0]["message"]["content"], "reasoner");
    let (_, v) = p
        .chat(json!({"model": "gpt-5", "reasoning_effort": "none", "messages": [{"role": "user", "content": "plan"}]}))
        .await;
    assert_eq!(v["choices"][0]["message"]["content"], "big");
    let body = json!({"model": "gpt-5", "input": "plan", "reasoning": {"effort": "high"}});
    let v: Value = p.http.post(p.url("/v1/responses")).json(&body).send().await.unwrap().json().await.unwrap();
    assert_eq!(v["output"][0]["content"][0]["text"], "reasoner", "{v}");
    // A scenario's target is a model the config knows: its own metrics label.
    let metrics = p.http.get(p.url("/metrics")).send().await.unwrap().text().await.unwrap();
    assert!(metrics.contains("provider=\"alt\",model=\"flash\""), "{metrics}");
}
