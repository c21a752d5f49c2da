//! The vision bridge (issue #46, docs/vision.md) against scripted loopback
//! upstreams: a text-only vendor that answers an image part with DeepSeek's
//! own 400, and a model that sees, used as the bridge. Every front (chat
//! streamed and not, Anthropic Messages in Claude Code's screenshot shape,
//! Responses), the hidden loop's tool images, the cache, the key's usage,
//! the 400 without a bridge, a model that sees, and the URL rules.

use crate::common;

use std::collections::BTreeMap;
use std::sync::Arc;

use common::*;
use modelshim::config::vision::VisionBridgeConfig;
use modelshim::config::{Config, ModelAlias, ProviderConfig};
use modelshim::provider::Profile;
use modelshim::server::AppState;
use serde_json::{Value, json};
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, Request, Respond, ResponseTemplate};

/// What DeepSeek answers to a request with an image part.
const DEEPSEEK_400: &str = "Failed to deserialize the JSON body into the target type: messages[0]: unknown variant `image_url`, expected `text` at line 1 column 97";
const DESCRIPTION: &str = "A terminal window. Visible text: `error[E0308]: mismatched types` at src/main.rs:4.";
/// The bridge's usage per description.
const BRIDGE_TOKENS: u64 = 1234;
/// A 1×1 PNG.
pub(crate) const PNG: &str =
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==";
/// Another image (other bytes, so another description).
const PNG2: &str = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg==";

pub(crate) fn data_url(b64: &str) -> String {
    format!("data:image/png;base64,{b64}")
}

/// A text-only vendor: DeepSeek's 400 for any image part, else the script.
struct TextOnly {
    script: Script,
}

impl Respond for TextOnly {
    fn respond(&self, r: &Request) -> ResponseTemplate {
        let body: Value = serde_json::from_slice(&r.body).unwrap();
        let has_image = body["messages"]
            .as_array()
            .unwrap()
            .iter()
            .any(|m| m["content"].as_array().is_some_and(|parts| parts.iter().any(|p| p["type"] != "text")));
        if has_image {
            self.script.log.lock().unwrap().push(body);
            return ResponseTemplate::new(400).set_body_json(json!({"error": {"message": DEEPSEEK_400,
                "type": "invalid_request_error", "param": null, "code": "invalid_request_error"}}));
        }
        self.script.respond(r)
    }
}

/// The model that sees: describes whatever it is sent, with its usage.
struct Seeing {
    log: Log,
}

impl Respond for Seeing {
    fn respond(&self, r: &Request) -> ResponseTemplate {
        let body: Value = serde_json::from_slice(&r.body).unwrap();
        self.log.lock().unwrap().push(body);
        let mut c = completion(json!({"role": "assistant", "content": DESCRIPTION}), "stop");
        c["usage"] = json!({"prompt_tokens": 1000, "completion_tokens": 234, "total_tokens": BRIDGE_TOKENS});
        ResponseTemplate::new(200).set_body_json(c)
    }
}

/// The scripted upstreams and what each received.
#[derive(Clone)]
pub(crate) struct Upstreams {
    /// What the text-only vendor received (its 400s too).
    pub(crate) text: Log,
    /// What the model that sees received.
    pub(crate) seeing: Log,
    servers: Arc<(MockServer, MockServer)>,
}

pub(crate) struct Setup {
    pub(crate) proxy: Proxy,
    pub(crate) text: Log,
    pub(crate) seeing: Log,
    pub(crate) upstreams: Upstreams,
}

/// Providers `ds` (text only, `[vision] default = false`) and `vl` (sees),
/// the bridge on `vl/vision-model` unless `bridge` is false; `tweak` may
/// change the config further.
pub(crate) async fn setup(
    bridge: bool,
    brain: impl Fn(&Value) -> Value + Send + Sync + 'static,
    tweak: impl FnOnce(&mut Config),
) -> Setup {
    let (text_up, seeing_up) = (MockServer::start().await, MockServer::start().await);
    let text: Log = Arc::default();
    let seeing: Log = Arc::default();
    let script = Script { brain: Arc::new(brain), log: text.clone() };
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(TextOnly { script })
        .mount(&text_up)
        .await;
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(Seeing { log: seeing.clone() })
        .mount(&seeing_up)
        .await;
    replica(&Upstreams { text, seeing, servers: Arc::new((text_up, seeing_up)) }, bridge, tweak).await
}

/// A proxy in front of `ups` (another replica when called again).
pub(crate) async fn replica(ups: &Upstreams, bridge: bool, tweak: impl FnOnce(&mut Config)) -> Setup {
    let (text_up, seeing_up) = (&ups.servers.0, &ups.servers.1);
    let mut profiles = BTreeMap::new();
    let parse =
        |id: &str, t: &str| Profile::parse(id, &format!("name = \"{id}\"\nbase_url = \"http://unused\"\n{t}")).unwrap();
    profiles.insert("textonly".to_string(), parse("textonly", "models = [\"chat\"]\n[vision]\ndefault = false\n"));
    profiles.insert("seeing".to_string(), parse("seeing", "[vision]\ndefault = true\n"));
    let mut config = Config::default();
    let table = |profile: &str, up: &MockServer| ProviderConfig {
        profile: Some(profile.into()),
        base_url: Some(format!("{}/v1", up.uri())),
        ..Default::default()
    };
    config.providers.insert("ds".into(), table("textonly", text_up));
    config.providers.insert("vl".into(), table("seeing", seeing_up));
    if bridge {
        config.vision_bridge = Some(VisionBridgeConfig::to("vl/vision-model"));
    }
    tweak(&mut config);
    let state = AppState::new(&config, &profiles).expect("state");
    let proxy = serve_state(state).await;
    Setup { proxy, text: ups.text.clone(), seeing: ups.seeing.clone(), upstreams: ups.clone() }
}

pub(crate) fn log(l: &Log) -> Vec<Value> {
    l.lock().unwrap().clone()
}

pub(crate) fn ask_about(url: &str) -> Value {
    json!({"model": "ds/chat", "messages": [{"role": "user", "content": [
        {"type": "text", "text": "What does this error say?"},
        {"type": "image_url", "image_url": {"url": url}}]}]})
}

/// Every text of the messages a vendor received, and whether an image part was among them.
fn texts(body: &Value) -> (Vec<String>, bool) {
    let mut out = Vec::new();
    let mut image = false;
    for m in body["messages"].as_array().unwrap() {
        match &m["content"] {
            Value::String(s) => out.push(s.clone()),
            Value::Array(parts) => {
                for p in parts {
                    if p["type"] == "text" {
                        out.push(p["text"].as_str().unwrap().to_string());
                    } else {
                        image = true;
                    }
                }
            }
            _ => {}
        }
    }
    (out, image || body.to_string().contains("image_url"))
}

/// The text model got the description in the image's place, and no image.
pub(crate) fn assert_described(body: &Value) {
    let (texts, image) = texts(body);
    assert!(!image, "no image part reached the text model: {body}");
    assert!(
        texts.iter().any(|t| t.contains("Description of an image") && t.contains(DESCRIPTION)),
        "the description is there: {body}"
    );
}

#[tokio::test]
async fn chat_images_are_described_for_a_text_model_streamed_and_not_and_once() {
    let s = setup(true, |_| say("It is a type mismatch."), |_| {}).await;
    let (st, body) = s.proxy.chat(ask_about(&data_url(PNG))).await;
    assert_eq!(st, 200, "{body}");
    assert_eq!(body["choices"][0]["message"]["content"], "It is a type mismatch.");
    let sent = log(&s.text);
    assert_eq!(sent.len(), 1, "one call, no vendor 400: {sent:?}");
    assert_described(&sent[0]);
    // The user's question stays where it was, the description in the image's place.
    let parts = sent[0]["messages"][0]["content"].as_array().unwrap();
    assert_eq!(parts[0]["text"], "What does this error say?");
    assert!(parts[1]["text"].as_str().unwrap().contains(DESCRIPTION));
    // The bridge was asked for a faithful description of the very image.
    let asked = log(&s.seeing);
    assert_eq!(asked.len(), 1);
    assert_eq!(asked[0]["model"], "vision-model");
    let parts = asked[0]["messages"][0]["content"].as_array().unwrap();
    assert!(parts[0]["text"].as_str().unwrap().contains("Transcribe every piece of visible text"));
    assert_eq!(parts[1]["image_url"]["url"], data_url(PNG));

    // Streamed, the same image again: described from the cache.
    let (st, events) = s.proxy.chat_stream(ask_about(&data_url(PNG))).await;
    assert_eq!(st, 200, "{events:?}");
    assert_eq!(assemble(&events)["content"], "It is a type mismatch.");
    assert_described(&log(&s.text)[1]);
    assert_eq!(log(&s.seeing).len(), 1, "a repeated image is described once");

    // The same screenshot twice in one conversation: one description.
    let mut twice = ask_about(&data_url(PNG2));
    twice["messages"].as_array_mut().unwrap().push(json!({"role": "assistant", "content": "Looking."}));
    twice["messages"].as_array_mut().unwrap().push(ask_about(&data_url(PNG2))["messages"][0].clone());
    let (st, body) = s.proxy.chat(twice).await;
    assert_eq!(st, 200, "{body}");
    assert_eq!(log(&s.seeing).len(), 2, "one more image, one more description");
    assert_described(log(&s.text).last().unwrap());
}

#[tokio::test]
async fn claude_codes_screenshot_shapes_reach_the_text_model_as_descriptions() {
    let s = setup(true, |_| say("The build fails on a type mismatch."), |_| {}).await;
    let image =
        |b64: &str| json!({"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": b64}});
    // Claude Code's Read of a PNG: a tool_result holding an image block; then
    // a pasted screenshot as a user image block beside the question.
    let body = json!({"model": "ds/chat", "max_tokens": 256, "messages": [
        {"role": "user", "content": "Look at the screenshot in shot.png"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "Read", "input": {"file_path": "/tmp/shot.png"}}]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_1", "content": [image(PNG)]},
            image(PNG2),
            {"type": "text", "text": "And this one?"}]}],
        "tools": [{"name": "Read", "description": "Read a file", "input_schema": {"type": "object", "properties": {"file_path": {"type": "string"}}}}]});
    for stream in [false, true] {
        let mut b = body.clone();
        b["stream"] = json!(stream);
        let r = s.proxy.http.post(s.proxy.url("/v1/messages")).json(&b).send().await.unwrap();
        assert_eq!(r.status(), 200);
        let text = r.text().await.unwrap();
        // Streamed, the script splits the answer in two deltas.
        let want = if stream { "message_stop" } else { "The build fails on a type mismatch." };
        assert!(text.contains(want), "{text}");
        let sent = log(&s.text);
        let last = sent.last().unwrap();
        assert_described(last);
        let (texts, _) = texts(last);
        assert!(texts.iter().any(|t| t == "And this one?"), "the user's text stays: {last}");
        assert_eq!(texts.iter().filter(|t| t.contains(DESCRIPTION)).count(), 2, "both images: {last}");
    }
    assert_eq!(log(&s.seeing).len(), 2, "two images, each described once over both requests");
    assert!(log(&s.text).iter().all(|b| !texts(b).1), "the vendor never saw an image");
}

#[tokio::test]
async fn responses_input_image_is_described() {
    let s = setup(true, |_| say("A type mismatch."), |_| {}).await;
    let body = json!({"model": "ds/chat", "input": [{"role": "user", "content": [
        {"type": "input_text", "text": "What does this error say?"},
        {"type": "input_image", "image_url": data_url(PNG)}]}]});
    let r = s.proxy.http.post(s.proxy.url("/v1/responses")).json(&body).send().await.unwrap();
    assert_eq!(r.status(), 200);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["output"][0]["content"][0]["text"], "A type mismatch.", "{v}");
    assert_described(&log(&s.text)[0]);
    assert_eq!(log(&s.seeing).len(), 1);
}

#[tokio::test]
async fn the_bridges_tokens_are_billed_to_the_requesting_key() {
    let auth: modelshim::config::auth::AuthConfig =
        toml::from_str("keys = [{ key = \"sk-eyes-key\", name = \"eyes\" }]\n").unwrap();
    let s = setup(true, |_| say("ok"), move |c| c.auth = Some(auth)).await;
    let r = s.proxy.http.post(s.proxy.url("/v1/chat/completions")).bearer_auth("sk-eyes-key");
    let r = r.json(&ask_about(&data_url(PNG))).send().await.unwrap();
    assert_eq!(r.status(), 200);
    r.text().await.unwrap();
    // The text model's 2 tokens and the bridge's.
    let want = BRIDGE_TOKENS + 2;
    billed(&s, want).await;
}

/// Waits until the key `sk-eyes-key` has been billed `want` tokens today.
async fn billed(s: &Setup, want: u64) {
    let start = std::time::Instant::now();
    loop {
        let r = s.proxy.http.get(s.proxy.url("/v1/usage")).bearer_auth("sk-eyes-key").send().await.unwrap();
        let u: Value = r.json().await.unwrap();
        if u["today"]["tokens"] == want {
            return;
        }
        assert!(start.elapsed() < std::time::Duration::from_secs(3), "usage never got there: {u}");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

/// A bridge whose upstream answers as a stream (a gateway that always
/// streams): its description is read off the events, and the usage in its
/// last event is billed, counted by the bridge's own reader of the events.
#[tokio::test]
async fn a_bridge_that_answers_as_a_stream_is_read_and_billed() {
    let auth: modelshim::config::auth::AuthConfig =
        toml::from_str("keys = [{ key = \"sk-eyes-key\", name = \"eyes\" }]\n").unwrap();
    let s = setup(true, |_| say("ok"), move |c| c.auth = Some(auth)).await;
    let (first, rest) = DESCRIPTION.split_at(DESCRIPTION.len() / 2);
    let mut last = chunk(json!({}), Some("stop"));
    last["usage"] = json!({"prompt_tokens": 1000, "completion_tokens": 234, "total_tokens": BRIDGE_TOKENS});
    let body = sse_body(&[
        chunk(json!({"role": "assistant", "content": first}), None),
        chunk(json!({"content": rest}), None),
        last,
    ]);
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(ResponseTemplate::new(200).set_body_raw(body, "text/event-stream"))
        .with_priority(1)
        .mount(&s.upstreams.servers.1)
        .await;
    let r = s.proxy.http.post(s.proxy.url("/v1/chat/completions")).bearer_auth("sk-eyes-key");
    let r = r.json(&ask_about(&data_url(PNG))).send().await.unwrap();
    assert_eq!(r.status(), 200);
    r.text().await.unwrap();
    assert_described(&log(&s.text)[0]);
    let want = BRIDGE_TOKENS + 2;
    billed(&s, want).await;
}

#[tokio::test]
async fn without_a_bridge_an_image_to_a_text_model_is_a_400_naming_the_setting_in_each_shape() {
    let s = setup(false, |_| say("never"), |_| {}).await;
    let (st, body) = s.proxy.chat(ask_about(&data_url(PNG))).await;
    assert_eq!(st, 400, "{body}");
    let msg = body["error"]["message"].as_str().unwrap();
    assert!(msg.contains("[vision_bridge]") && msg.contains("ds/chat"), "{msg}");
    assert!(!msg.contains("unknown variant"), "never the vendor's own error: {msg}");

    let anthropic = json!({"model": "ds/chat", "max_tokens": 10, "messages": [{"role": "user", "content": [
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}}]}]});
    let r = s.proxy.http.post(s.proxy.url("/v1/messages")).json(&anthropic).send().await.unwrap();
    assert_eq!(r.status(), 400);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["type"], "error", "Anthropic's shape: {v}");
    assert_eq!(v["error"]["type"], "invalid_request_error");
    assert!(v["error"]["message"].as_str().unwrap().contains("[vision_bridge]"), "{v}");

    let responses = json!({"model": "ds/chat", "input": [{"role": "user", "content": [
        {"type": "input_image", "image_url": data_url(PNG)}]}]});
    let r = s.proxy.http.post(s.proxy.url("/v1/responses")).json(&responses).send().await.unwrap();
    assert_eq!(r.status(), 400);
    let v: Value = r.json().await.unwrap();
    assert!(v["error"]["message"].as_str().unwrap().contains("[vision_bridge]"), "{v}");
    assert!(log(&s.text).is_empty(), "the vendor was not called");

    // A chain with a model that sees goes on to it, images untouched.
    let s = setup(
        false,
        |_| say("never"),
        |c| {
            c.models.insert("eyes".into(), ModelAlias::Chain(vec!["ds/chat".into(), "vl/vision-model".into()]));
        },
    )
    .await;
    let mut req = ask_about(&data_url(PNG));
    req["model"] = json!("eyes");
    let (st, body) = s.proxy.chat(req).await;
    assert_eq!(st, 200, "{body}");
    assert!(log(&s.text).is_empty());
    assert!(texts(&log(&s.seeing)[0]).1, "the model that sees got the image");
}

#[tokio::test]
async fn a_model_that_sees_gets_the_image_untouched() {
    let s = setup(true, |_| say("never"), |_| {}).await;
    let mut req = ask_about(&data_url(PNG));
    req["model"] = json!("vl/vision-model");
    let (st, body) = s.proxy.chat(req).await;
    assert_eq!(st, 200, "{body}");
    let got = log(&s.seeing);
    assert_eq!(got.len(), 1, "no bridge call: {got:?}");
    assert_eq!(got[0]["messages"][0]["content"][1]["image_url"]["url"], data_url(PNG));
    assert_eq!(got[0]["messages"][0]["content"][0]["text"], "What does this error say?");
}

#[tokio::test]
async fn image_urls_are_fetched_only_under_http_fetchs_rules_and_bad_images_name_the_part() {
    let images = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path("/shot.png"))
        .respond_with(ResponseTemplate::new(200).set_body_raw(
            base64::Engine::decode(&base64::engine::general_purpose::STANDARD, PNG).unwrap(),
            "image/png",
        ))
        .mount(&images)
        .await;
    Mock::given(method("GET"))
        .and(path("/page.html"))
        .respond_with(ResponseTemplate::new(200).set_body_raw("<html></html>", "text/html"))
        .mount(&images)
        .await;
    let url = format!("{}/shot.png", images.uri());

    // By default a private address is refused, with a 400 naming the part.
    let s = setup(true, |_| say("never"), |_| {}).await;
    let (st, body) = s.proxy.chat(ask_about(&url)).await;
    assert_eq!(st, 400, "{body}");
    let msg = body["error"]["message"].as_str().unwrap();
    assert!(msg.contains("messages[0].content[1]") && msg.contains("non-public"), "{msg}");
    assert!(log(&s.seeing).is_empty() && log(&s.text).is_empty());
    // A data: URL that is no image, and one over the cap.
    let (st, body) = s.proxy.chat(ask_about("data:text/plain;base64,aGVsbG8=")).await;
    assert_eq!(st, 400, "{body}");
    assert!(body["error"]["message"].as_str().unwrap().contains("messages[0].content[1]"), "{body}");
    let s = setup(
        true,
        |_| say("never"),
        |c| {
            c.vision_bridge =
                Some(VisionBridgeConfig { max_image_bytes: 10, ..VisionBridgeConfig::to("vl/vision-model") })
        },
    )
    .await;
    let (st, body) = s.proxy.chat(ask_about(&data_url(PNG))).await;
    assert_eq!(st, 400, "{body}");
    assert!(body["error"]["message"].as_str().unwrap().contains("max_image_bytes"), "{body}");

    // Allowed: fetched, sent to the bridge as data, described; a page that is no image is a 400.
    let s = setup(
        true,
        |_| say("fetched"),
        |c| {
            c.vision_bridge =
                Some(VisionBridgeConfig { allow_private: true, ..VisionBridgeConfig::to("vl/vision-model") })
        },
    )
    .await;
    let (st, body) = s.proxy.chat(ask_about(&url)).await;
    assert_eq!(st, 200, "{body}");
    assert_described(&log(&s.text)[0]);
    assert_eq!(log(&s.seeing)[0]["messages"][0]["content"][1]["image_url"]["url"], data_url(PNG));
    let (st, body) = s.proxy.chat(ask_about(&format!("{}/page.html", images.uri()))).await;
    assert_eq!(st, 400, "{body}");
    assert!(body["error"]["message"].as_str().unwrap().contains("not an image"), "{body}");
}

#[tokio::test]
async fn the_hidden_loops_tool_images_are_described() {
    let images = MockServer::start().await;
    Mock::given(method("GET"))
        .respond_with(ResponseTemplate::new(200).set_body_raw(
            base64::Engine::decode(&base64::engine::general_purpose::STANDARD, PNG).unwrap(),
            "image/png",
        ))
        .mount(&images)
        .await;
    let url = format!("{}/shot.png", images.uri());
    let brain = move |req: &Value| {
        let done = req["messages"].as_array().unwrap().iter().any(|m| m["role"] == "tool");
        if done {
            say("Seen it.")
        } else {
            json!({"content": "", "tool_calls": [{"id": "call_1", "type": "function",
                "function": {"name": "http_fetch", "arguments": json!({"url": url}).to_string()}}]})
        }
    };
    let tools: modelshim::config::tools::ToolsConfig =
        toml::from_str("builtin = [\"http_fetch\"]\n[http_fetch]\nallow_private = true\n").unwrap();
    let s = setup(true, brain, move |c| c.tools = Some(tools)).await;
    let (st, body) =
        s.proxy.chat(json!({"model": "ds/chat", "messages": [{"role": "user", "content": "fetch it"}]})).await;
    assert_eq!(st, 200, "{body}");
    assert_eq!(body["choices"][0]["message"]["content"], "Seen it.");
    let sent = log(&s.text);
    assert_eq!(sent.len(), 2, "{sent:?}");
    assert_described(&sent[1]);
    assert_eq!(log(&s.seeing).len(), 1);
}

#[tokio::test]
async fn the_first_token_is_the_answering_models_not_the_bridges() {
    // Own provider names: the metrics registry is the process's.
    let s = setup(
        true,
        |_| say("ok"),
        |c| {
            let text = c.providers.remove("ds").unwrap();
            let seeing = c.providers.remove("vl").unwrap();
            c.providers.insert("dsttft".into(), text);
            c.providers.insert("vlttft".into(), seeing);
            c.vision_bridge = Some(VisionBridgeConfig::to("vlttft/vision-model"));
        },
    )
    .await;
    let mut req = ask_about(&data_url(PNG));
    req["model"] = json!("dsttft/chat");
    let (st, body) = s.proxy.chat(req).await;
    assert_eq!(st, 200, "{body}");
    let m = s.proxy.http.get(s.proxy.url("/metrics")).send().await.unwrap().text().await.unwrap();
    let series = |provider: &str| {
        m.lines()
            .find(|l| {
                l.starts_with("modelshim_time_to_first_token_seconds_count{")
                    && l.contains(&format!("provider=\"{provider}\""))
            })
            .map(str::to_string)
    };
    assert!(series("dsttft").is_some_and(|l| l.ends_with(" 1")), "{m}");
    // Every configured provider's series exists from the start, at 0.
    assert!(
        series("vlttft").is_none_or(|l| l.ends_with(" 0")),
        "the bridge's answer is not the request's first token: {m}"
    );
    assert!(
        m.lines().any(|l| l.starts_with("modelshim_tokens_total{") && l.contains("provider=\"vlttft\"")),
        "the bridge's tokens are still counted: {m}"
    );
}
