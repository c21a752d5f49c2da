//! Context overflow: each bundled vendor's real "context too long" error
//! (as reported in public issues, cited in its profile) reaches the chat and
//! Responses fronts as OpenAI's `context_length_exceeded` and the Messages
//! front as Anthropic's "prompt is too long: N tokens > M maximum" (what
//! Claude Code compacts on); in an alias chain an overflow moves on to the
//! next model with a larger window, never retried on the same one.

use crate::common;

use common::{Proxy, serve_state};
use modelshim::config::Config;
use modelshim::server::AppState;
use serde_json::{Value, json};
use wiremock::matchers::method;
use wiremock::{Mock, MockServer, ResponseTemplate};

/// A proxy whose providers use the bundled profiles, each table
/// `name = profile` pointing at its mock.
async fn proxy(providers: &[(&str, &str, &MockServer)], models: &str) -> Proxy {
    let mut toml = String::from("[upstream]\nretries = 0\nbreaker_failures = 0\n");
    for (name, profile, server) in providers {
        toml.push_str(&format!("[providers.{name}]\nprofile = \"{profile}\"\nbase_url = \"{}/v1\"\n", server.uri()));
    }
    toml.push_str(models);
    let config: Config = toml::from_str(&toml).expect("config parses");
    let profiles = modelshim::provider::load_profiles(None).expect("bundled profiles");
    serve_state(AppState::new(&config, &profiles).expect("state")).await
}

async fn answering(status: u16, body: &str) -> MockServer {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(status).set_body_raw(body.to_string(), "application/json"))
        .mount(&server)
        .await;
    server
}

async fn post(p: &Proxy, path: &str, body: &Value) -> (u16, Value) {
    let r = p.http.post(p.url(path)).json(body).send().await.expect("proxy reachable");
    let status = r.status().as_u16();
    let text = r.text().await.expect("body");
    (status, serde_json::from_str(&text).unwrap_or(Value::String(text)))
}

/// (profile, model, upstream status, the vendor's error body, the
/// Messages front's expected message).
const VENDORS: &[(&str, &str, u16, &str, &str)] = &[
    (
        "deepseek",
        "deepseek-chat",
        400,
        r#"{"error":{"message":"This model's maximum context length is 131072 tokens. However, you requested 131134 tokens (122942 in the messages, 8192 in the completion). Please reduce the length of the messages or completion.","type":"invalid_request_error","param":null,"code":"invalid_request_error"}}"#,
        "prompt is too long: 131134 tokens > 131072 maximum",
    ),
    (
        "dashscope",
        "qwen3-coder-plus",
        400,
        r#"{"error":{"code":"invalid_parameter_error","message":"<400> InternalError.Algo.InvalidParameter: Range of input length should be [1, 983616]","param":null,"type":"invalid_request_error"},"request_id":"81a373d6-28bd-9968-8335-e22a2127c41b"}"#,
        "prompt is too long: 983617 tokens > 983616 maximum",
    ),
    (
        "moonshot",
        "kimi-k2.5",
        400,
        r#"{"error":{"message":"Invalid request: Your request exceeded model token limit: 262144 (requested: 269030)","type":"invalid_request_error"}}"#,
        "prompt is too long: 269030 tokens > 262144 maximum",
    ),
    (
        "zhipu",
        "glm-4.7",
        400,
        r#"{"error":{"code":"1261","message":"Prompt exceeds max length"}}"#,
        "prompt is too long: 202751 tokens > 202750 maximum",
    ),
    (
        "zhipu",
        "glm-4.7",
        400,
        r#"{"error":{"message":"API 调用参数有误，请检查文档。Request 182387 input tokens exceeds the model's maximum context length 202750","code":"1210"}}"#,
        "prompt is too long: 202751 tokens > 202750 maximum",
    ),
    (
        "minimax",
        "MiniMax-M2.5",
        400,
        r#"{"error":{"type":"invalid_request_error","message":"invalid params, context window exceeds limit (2013)"}}"#,
        "prompt is too long: 204801 tokens > 204800 maximum",
    ),
    (
        "ark",
        "glm-4-7-251222",
        400,
        r#"{"error":{"code":"InvalidParameter","message":"Input length 203743 exceeds the maximum length 202752","type":"BadRequest"}}"#,
        "prompt is too long: 203743 tokens > 202752 maximum",
    ),
    (
        "vllm",
        "Qwen/Qwen3-8B",
        400,
        r#"{"object":"error","message":"This model's maximum context length is 16384 tokens. However, you requested 122946 tokens (112946 in the messages, 10000 in the completion). Please reduce the length of the messages or completion.","type":"BadRequestError","param":null,"code":400}"#,
        "prompt is too long: 122946 tokens > 16384 maximum",
    ),
    (
        "openai",
        "gpt-4o",
        400,
        r#"{"error":{"message":"This model's maximum context length is 8192 tokens. However, you requested 8213 tokens (6683 in the messages, 730 in the functions, and 800 in the completion). Please reduce the length of the messages, functions, or completion.","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}"#,
        "prompt is too long: 8213 tokens > 8192 maximum",
    ),
];

#[tokio::test]
async fn each_vendors_overflow_reaches_every_front_in_the_shape_its_clients_act_on() {
    for (profile, model, status, body, anthropic) in VENDORS {
        let up = answering(*status, body).await;
        let p = proxy(&[(profile, profile, &up)], "").await;
        let model = format!("{profile}/{model}");
        let msgs = json!([{"role": "user", "content": "the whole repository"}]);

        let (st, v) = post(&p, "/v1/chat/completions", &json!({"model": model, "messages": msgs})).await;
        assert_eq!(st, 400, "{profile} chat: {v}");
        assert_eq!(v["error"]["code"], "context_length_exceeded", "{profile} chat: {v}");
        assert_eq!(v["error"]["type"], "invalid_request_error", "{profile} chat: {v}");

        let (st, v) =
            post(&p, "/v1/chat/completions", &json!({"model": model, "messages": msgs, "stream": true})).await;
        assert_eq!((st, &v["error"]["code"]), (400, &json!("context_length_exceeded")), "{profile} chat stream: {v}");

        let (st, v) = post(&p, "/v1/responses", &json!({"model": model, "input": "the whole repository"})).await;
        assert_eq!(st, 400, "{profile} responses: {v}");
        assert_eq!(v["error"]["code"], "context_length_exceeded", "{profile} responses: {v}");
        // Codex streams: it reads the code off the error it gets.
        let body = json!({"model": model, "input": "the whole repository", "stream": true});
        let (st, v) = post(&p, "/v1/responses", &body).await;
        assert_eq!(
            (st, &v["error"]["code"]),
            (400, &json!("context_length_exceeded")),
            "{profile} responses stream: {v}"
        );

        let m = json!({"model": model, "max_tokens": 64, "messages": msgs});
        let (st, v) = post(&p, "/v1/messages", &m).await;
        let want = json!({"type": "error", "error": {"type": "invalid_request_error", "message": anthropic}});
        assert_eq!((st, &v), (400, &want), "{profile} messages");
        let mut m = m;
        m["stream"] = json!(true);
        let (st, v) = post(&p, "/v1/messages", &m).await;
        assert_eq!((st, &v), (400, &want), "{profile} messages stream");

        // Recognized once, never retried on the same model.
        assert_eq!(up.received_requests().await.map_or(0, |r| r.len()), 6, "{profile}");
    }
}

#[tokio::test]
async fn an_unrelated_400_is_left_as_the_vendor_said_it() {
    let body = r#"{"error":{"message":"Invalid request: temperature must be 1","type":"invalid_request_error"}}"#;
    let up = answering(400, body).await;
    let p = proxy(&[("moonshot", "moonshot", &up)], "").await;
    let req = json!({"model": "moonshot/kimi-k2.5", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]});
    let (st, v) = post(&p, "/v1/messages", &req).await;
    assert_eq!((st, v["error"]["message"].as_str()), (400, Some("Invalid request: temperature must be 1")));
    let (_, v) = post(&p, "/v1/chat/completions", &req).await;
    assert_ne!(v["error"]["code"], "context_length_exceeded", "{v}");
}

async fn received(s: &MockServer) -> usize {
    s.received_requests().await.map_or(0, |r| r.len())
}

fn ok_answer() -> ResponseTemplate {
    ResponseTemplate::new(200).set_body_json(json!({
        "id": "c1", "object": "chat.completion", "created": 1, "model": "m",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "fits"}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}
    }))
}

#[tokio::test]
async fn a_chain_falls_to_the_next_model_with_a_larger_window() {
    let deepseek_overflow = VENDORS[0].3;
    let small = answering(400, deepseek_overflow).await;
    // 32K: smaller than what overflowed, so skipped.
    let smaller = answering(200, "{}").await;
    let big = MockServer::start().await;
    Mock::given(method("POST")).respond_with(ok_answer()).mount(&big).await;
    let p = proxy(
        &[("ds", "deepseek", &small), ("kimi32", "moonshot", &smaller), ("kimi", "moonshot", &big)],
        "[models]\ncoder = [\"ds/deepseek-chat\", \"kimi32/moonshot-v1-32k\", \"kimi/kimi-k2.5\"]\n",
    )
    .await;
    let msgs = json!([{"role": "user", "content": "the whole repository"}]);
    let (st, v) = post(&p, "/v1/chat/completions", &json!({"model": "coder", "messages": msgs})).await;
    assert_eq!((st, v["choices"][0]["message"]["content"].as_str()), (200, Some("fits")), "{v}");
    let (st, v) = post(&p, "/v1/messages", &json!({"model": "coder", "max_tokens": 8, "messages": msgs})).await;
    assert_eq!((st, v["content"][0]["text"].as_str()), (200, Some("fits")), "{v}");
    assert_eq!(received(&small).await, 2, "tried once per request, not retried");
    assert_eq!(received(&smaller).await, 0, "a smaller window is never tried after an overflow");
    assert_eq!(received(&big).await, 2);
}

#[tokio::test]
async fn with_no_larger_model_left_the_overflow_is_the_answer() {
    let kimi_overflow = VENDORS[2].3;
    let big = answering(400, kimi_overflow).await;
    let small = MockServer::start().await;
    Mock::given(method("POST")).respond_with(ok_answer()).mount(&small).await;
    let p = proxy(
        &[("kimi", "moonshot", &big), ("ds", "deepseek", &small)],
        "[models]\ncoder = [\"kimi/kimi-k2.5\", \"ds/deepseek-chat\"]\n",
    )
    .await;
    let msgs = json!([{"role": "user", "content": "the whole repository"}]);
    let (st, v) = post(&p, "/v1/messages", &json!({"model": "coder", "max_tokens": 8, "messages": msgs})).await;
    assert_eq!((st, v["error"]["message"].as_str()), (400, Some("prompt is too long: 269030 tokens > 262144 maximum")));
    assert_eq!(small.received_requests().await.map_or(0, |r| r.len()), 0);
}
