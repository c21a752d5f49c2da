//! The Anthropic Messages front (issue #30) against a scripted wiremock
//! upstream that speaks chat completions: the message and its event
//! stream, tool calls written as text (Hermes like Qwen, DSML like
//! DeepSeek) and in prompt mode, the thinking round trip to a DeepSeek-like
//! upstream that requires `reasoning_content` back, errors in Anthropic's
//! shape (the edge's too), `x-api-key`, count_tokens, the model list, glob
//! aliases for `claude-*`; then the official Anthropic Python SDK.

use crate::common;
use crate::support::pyenv;

use std::path::Path;
use std::process::Command;
use std::sync::{Arc, Mutex};

use common::*;
use modelshim::config::{Config, ProviderConfig, ToolMode};
use serde_json::{Value, json};
use wiremock::matchers::method;
use wiremock::{Mock, MockServer, Request, Respond, ResponseTemplate};

type Log = Arc<Mutex<Vec<Value>>>;

const KEY: &str = "proxy-test-key-0451";
const REASONING: [&str; 2] = ["The user wants Paris; call get_weather.", "22C in Paris; answer."];
const HERMES_CALL: &str =
    "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>";
const HERMES_TWO: &str = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Rome\"}}\n</tool_call>";
const DSML_CALL: &str = "<｜DSML｜function_calls>\n<｜DSML｜invoke name=\"get_weather\">\n<｜DSML｜parameter name=\"city\" string=\"true\">Paris</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜function_calls>";

fn err(status: u16, message: &str) -> ResponseTemplate {
    ResponseTemplate::new(status).set_body_json(
        json!({"error": {"message": message, "type": "invalid_request_error", "param": null, "code": null}}),
    )
}

/// Tool results: `tool` messages, or prompt mode's `<tool_response>` text.
fn tool_results(body: &Value) -> Vec<String> {
    let mut out = Vec::new();
    for m in body["messages"].as_array().unwrap() {
        let text = m["content"].as_str().unwrap_or("");
        if m["role"] == "tool" {
            out.push(text.to_string());
        } else if m["role"] == "user" {
            for block in text.split("<tool_response").skip(1) {
                let inner = block.split_once(">\n").map_or("", |(_, r)| r);
                out.push(inner.split("\n</tool_response>").next().unwrap_or("").to_string());
            }
        }
    }
    out
}

struct Say {
    reasoning: Option<&'static str>,
    content: String,
    calls: Vec<Value>,
}

fn text(t: &str) -> Say {
    Say { reasoning: None, content: t.to_string(), calls: Vec::new() }
}

/// Answers by the scenario in the upstream model name.
struct Script {
    log: Log,
}

impl Respond for Script {
    fn respond(&self, r: &Request) -> ResponseTemplate {
        let body: Value = serde_json::from_slice(&r.body).unwrap();
        self.log.lock().unwrap().push(body.clone());
        let results = tool_results(&body);
        let say = match body["model"].as_str().unwrap() {
            "hello" => text("Hello from upstream."),
            "images" => {
                let last = body["messages"].as_array().unwrap().iter().rev().find(|m| m["role"] == "user").unwrap();
                let urls: Vec<&str> = last["content"]
                    .as_array()
                    .map(|p| p.iter().filter_map(|p| p["image_url"]["url"].as_str()).collect())
                    .unwrap_or_default();
                text(&format!("I see {}: {}", urls.len(), urls.join(" | ")))
            }
            "weather" if results.is_empty() => Say {
                reasoning: None,
                content: String::new(),
                calls: vec![json!({"id": "call_w1", "type": "function",
                    "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}})],
            },
            "weather" => text(&format!("It is {} in Paris.", results[0])),
            // Qwen-like: the call written as Hermes text.
            "qwen" if results.is_empty() => text(HERMES_CALL),
            "qwen" => text(&format!("Qwen says: {}", results.join(", "))),
            "parallel" if results.is_empty() => text(HERMES_TWO),
            "parallel" => text(&format!("Paris {}, Rome {}.", results[0], results[1])),
            // Prompt mode: the upstream takes no tools; calls and results are text.
            "chatonly" if body.get("tools").is_some() => return err(400, "this model takes no tools"),
            "chatonly" if results.is_empty() => text(HERMES_CALL),
            "chatonly" => text(&format!("Prompt mode got: {}", results[0])),
            "deepseek" => {
                for (i, m) in body["messages"].as_array().unwrap().iter().enumerate() {
                    if m["role"] == "assistant" && m["tool_calls"].as_array().is_some_and(|c| !c.is_empty()) {
                        match m.get("reasoning_content").and_then(Value::as_str) {
                            Some(t) if t == REASONING[0] => {}
                            other => {
                                return err(
                                    400,
                                    &format!(
                                        "Missing `reasoning_content` field in the assistant message at message index {i} ({other:?})"
                                    ),
                                );
                            }
                        }
                    }
                }
                if results.is_empty() {
                    Say { reasoning: Some(REASONING[0]), content: DSML_CALL.into(), calls: Vec::new() }
                } else {
                    Say {
                        reasoning: Some(REASONING[1]),
                        content: format!("Paris is {}.", results[0]),
                        calls: Vec::new(),
                    }
                }
            }
            // A server-side tool the proxy runs: the call as Hermes text.
            "clock" if results.is_empty() => {
                text("Let me look.\n<tool_call>\n{\"name\": \"current_time\", \"arguments\": {}}\n</tool_call>")
            }
            "clock" => text(&format!("Clock says: {}", results[0].contains("datetime"))),
            "err429" => return err(429, "rate limit reached"),
            other => return err(404, &format!("no scenario {other}")),
        };
        respond(&body, say)
    }
}

fn respond(body: &Value, say: Say) -> ResponseTemplate {
    let usage = json!({"prompt_tokens": 17, "completion_tokens": 5, "total_tokens": 22,
                       "prompt_tokens_details": {"cached_tokens": 8}});
    let finish = if say.calls.is_empty() { "stop" } else { "tool_calls" };
    if body["stream"] == true {
        let mut chunks = vec![chunk(json!({"role": "assistant", "content": ""}), None)];
        if let Some(r) = say.reasoning {
            let (a, b) = r.split_at(r.len() / 2);
            chunks.push(chunk(json!({"reasoning_content": a}), None));
            chunks.push(chunk(json!({"reasoning_content": b}), None));
        }
        let t = &say.content;
        let mid = t.char_indices().nth(t.chars().count() / 2).map_or(0, |(i, _)| i);
        for piece in [&t[..mid], &t[mid..]] {
            if !piece.is_empty() {
                chunks.push(chunk(json!({"content": piece}), None));
            }
        }
        for (i, c) in say.calls.iter().enumerate() {
            let mut first = c.clone();
            first["index"] = json!(i);
            chunks.push(chunk(json!({"tool_calls": [first]}), None));
        }
        chunks.push(chunk(json!({}), Some(finish)));
        if body["stream_options"]["include_usage"] == true {
            chunks.push(json!({"id": "up-1", "object": "chat.completion.chunk", "created": 1, "model": "m",
                               "choices": [], "usage": usage}));
        }
        return ResponseTemplate::new(200).set_body_raw(sse_body(&chunks), "text/event-stream");
    }
    let mut msg = json!({"role": "assistant", "content": say.content});
    if let Some(r) = say.reasoning {
        msg["reasoning_content"] = json!(r);
    }
    if !say.calls.is_empty() {
        msg["tool_calls"] = Value::Array(say.calls);
    }
    let mut c = completion(msg, finish);
    c["usage"] = usage;
    ResponseTemplate::new(200).set_body_json(c)
}

struct Setup {
    _upstream: MockServer,
    proxy: Proxy,
    log: Log,
}

impl Setup {
    fn requests(&self) -> Vec<Value> {
        self.log.lock().unwrap().clone()
    }
}

const PROFILE: &str =
    "[thinking]\nreasoning_replay = \"required\"\n[tools]\nformats = { \"*\" = [\"hermes\", \"deepseek_v32_dsml\"] }\n";

async fn setup() -> Setup {
    setup_with("").await
}

/// [`setup`] with the `[tools]` and `[skills]` of `config` too.
async fn setup_with(config: &str) -> Setup {
    let parsed: Config = toml::from_str(config).unwrap();
    let upstream = MockServer::start().await;
    let log: Log = Arc::default();
    Mock::given(method("POST")).respond_with(Script { log: log.clone() }).mount(&upstream).await;
    let extra: Config = toml::from_str(&format!(
        "[auth]\nkeys = [\"{KEY}\"]\n[models]\n\"claude-*\" = \"v/hello\"\n\"claude-*haiku*\" = \"v/images\"\n"
    ))
    .unwrap();
    let base = format!("{}/v1", upstream.uri());
    let proxy = proxy_with(PROFILE, &upstream.uri(), |c| {
        c.upstream.breaker_failures = 0;
        c.upstream.retries = Some(0);
        c.auth = extra.auth;
        c.models = extra.models;
        c.tools = parsed.tools;
        c.skills = parsed.skills;
        c.providers.insert(
            "p".into(),
            ProviderConfig {
                profile: Some("testvendor".into()),
                base_url: Some(base),
                tool_calls: Some(ToolMode::Prompt),
                ..Default::default()
            },
        );
    })
    .await;
    Setup { _upstream: upstream, proxy, log }
}

async fn post(p: &Proxy, path: &str, body: &Value) -> (u16, String) {
    let r = p
        .http
        .post(p.url(path))
        .header("x-api-key", KEY)
        .header("anthropic-version", "2023-06-01")
        .json(body)
        .send()
        .await
        .unwrap();
    (r.status().as_u16(), r.text().await.unwrap())
}

async fn create(p: &Proxy, body: &Value) -> (u16, Value) {
    let (st, text) = post(p, "/v1/messages", body).await;
    (st, serde_json::from_str(&text).unwrap_or(Value::String(text)))
}

/// A streamed create: the events, each checked to carry its type both as
/// the SSE `event:` and in the data.
async fn stream(p: &Proxy, body: &Value) -> Vec<Value> {
    let mut body = body.clone();
    body["stream"] = json!(true);
    let (st, text) = post(p, "/v1/messages", &body).await;
    assert_eq!(st, 200, "{text}");
    let mut events = Vec::new();
    for block in text.split("\n\n").filter(|b| !b.trim().is_empty()) {
        let name = block.lines().find_map(|l| l.strip_prefix("event:")).map(str::trim);
        let data: String = block.lines().filter_map(|l| l.strip_prefix("data:")).map(str::trim_start).collect();
        if data.is_empty() {
            continue;
        }
        let v: Value = serde_json::from_str(&data).unwrap();
        assert_eq!(name, v["type"].as_str(), "event name matches its type: {block}");
        events.push(v);
    }
    events
}

fn weather_tool() -> Value {
    json!({"name": "get_weather", "description": "Weather of a city",
           "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}})
}

fn ask(model: &str, text: &str) -> Value {
    json!({"model": model, "max_tokens": 256, "messages": [{"role": "user", "content": text}], "tools": [weather_tool()]})
}

/// Event types, with each delta's type: `content_block_delta:text_delta`.
fn kinds(events: &[Value]) -> Vec<String> {
    events
        .iter()
        .map(|e| match e["delta"]["type"].as_str() {
            Some(d) if e["type"] == "content_block_delta" => format!("delta:{d}"),
            _ => match e["content_block"]["type"].as_str() {
                Some(b) => format!("start:{b}"),
                None => e["type"].as_str().unwrap().to_string(),
            },
        })
        .collect()
}

#[tokio::test]
async fn non_streamed_text_message() {
    let s = setup().await;
    let (st, mut m) = create(
        &s.proxy,
        &json!({"model": "claude-sonnet-4-5-20250929", "max_tokens": 100,
            "system": [{"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}],
            "messages": [{"role": "user", "content": [{"type": "text", "text": "Hi", "cache_control": {"type": "ephemeral"}}]}],
            "metadata": {"user_id": "u-1"}, "stop_sequences": ["END"], "top_k": 3,
            "context_management": {"edits": [{"type": "clear_tool_uses_20250919"}]}}),
    )
    .await;
    assert_eq!(st, 200, "{m}");
    assert!(m["id"].as_str().unwrap().starts_with("msg_"));
    m.as_object_mut().unwrap().remove("id");
    assert_eq!(
        m,
        json!({"type": "message", "role": "assistant", "model": "claude-sonnet-4-5-20250929",
            "content": [{"type": "text", "text": "Hello from upstream."}], "stop_reason": "end_turn", "stop_sequence": null,
            "usage": {"input_tokens": 9, "output_tokens": 5, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 8}})
    );
    let up = &s.requests()[0];
    assert_eq!(up["model"], "hello");
    assert_eq!(up["messages"], json!([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]));
    assert_eq!((up["user"].clone(), up["stop"].clone(), up["top_k"].clone()), (json!("u-1"), json!(["END"]), json!(3)));
    assert!(up.get("context_management").is_none() && up.get("metadata").is_none(), "{up}");
}

#[tokio::test]
async fn streamed_hermes_call_then_the_result() {
    let s = setup().await;
    let ev = stream(&s.proxy, &ask("v/qwen", "Weather in Paris?")).await;
    assert_eq!(
        kinds(&ev),
        [
            "message_start",
            "ping",
            "start:text",
            "delta:text_delta",
            "content_block_stop",
            "start:tool_use",
            "delta:input_json_delta",
            "content_block_stop",
            "message_delta",
            "message_stop"
        ]
    );
    assert_eq!(ev[0]["message"]["model"], "v/qwen");
    assert_eq!(ev[3]["delta"]["text"], "Let me check.");
    let call = &ev[5]["content_block"];
    assert_eq!((call["name"].as_str(), call["input"].clone()), (Some("get_weather"), json!({})));
    assert_eq!(ev[6]["delta"]["partial_json"], "{\"city\": \"Paris\"}");
    assert_eq!(ev[8]["delta"], json!({"stop_reason": "tool_use", "stop_sequence": null}));
    assert_eq!(
        ev[8]["usage"],
        json!({"input_tokens": 9, "output_tokens": 5, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 8})
    );
    // The second turn: tool_use back, tool_result in.
    let id = call["id"].as_str().unwrap();
    let mut second = ask("v/qwen", "Weather in Paris?");
    second["messages"].as_array_mut().unwrap().extend([
        json!({"role": "assistant", "content": [{"type": "text", "text": "Let me check."},
            {"type": "tool_use", "id": id, "name": "get_weather", "input": {"city": "Paris"}}]}),
        json!({"role": "user", "content": [{"type": "tool_result", "tool_use_id": id, "content": "22C"}]}),
    ]);
    let (st, m) = create(&s.proxy, &second).await;
    assert_eq!(st, 200, "{m}");
    assert_eq!(m["content"], json!([{"type": "text", "text": "Qwen says: 22C"}]));
    let up = &s.requests()[1];
    assert_eq!(up["messages"][1]["tool_calls"][0]["function"]["arguments"], "{\"city\":\"Paris\"}");
    assert_eq!(up["messages"][2], json!({"role": "tool", "content": "22C", "tool_call_id": id}));
}

#[tokio::test]
async fn deepseek_thinking_round_trip_with_dsml_calls() {
    // Turn one on one proxy, turn two on a fresh one that remembers
    // nothing: the reasoning must come back from the thinking block itself.
    for streamed in [false, true] {
        let a = setup().await;
        let mut first = ask("v/deepseek", "Weather in Paris?");
        first["thinking"] = json!({"type": "enabled", "budget_tokens": 2048});
        let content = if streamed {
            let ev = stream(&a.proxy, &first).await;
            assert_eq!(
                kinds(&ev),
                [
                    "message_start",
                    "ping",
                    "start:thinking",
                    "delta:thinking_delta",
                    "delta:thinking_delta",
                    "delta:signature_delta",
                    "content_block_stop",
                    "start:tool_use",
                    "delta:input_json_delta",
                    "content_block_stop",
                    "message_delta",
                    "message_stop"
                ],
                "{ev:#?}"
            );
            let sig = ev[5]["delta"]["signature"].as_str().unwrap().to_string();
            let id = ev[7]["content_block"]["id"].clone();
            json!([{"type": "thinking", "thinking": REASONING[0], "signature": sig},
                   {"type": "tool_use", "id": id, "name": "get_weather", "input": {"city": "Paris"}}])
        } else {
            let (st, m) = create(&a.proxy, &first).await;
            assert_eq!(st, 200, "{m}");
            assert_eq!(m["stop_reason"], "tool_use");
            m["content"].clone()
        };
        assert_eq!(content[0]["type"], "thinking");
        assert_eq!(content[0]["thinking"], REASONING[0]);
        assert!(content[0]["signature"].as_str().unwrap().starts_with("modelshim."));
        assert_eq!(content[1]["input"], json!({"city": "Paris"}));
        assert_eq!(content.as_array().unwrap().len(), 2, "{content}");
        // The effort the profile translated: a 2048 budget is low.
        assert_eq!(a.requests()[0]["reasoning_effort"], "low");
        let id = content[1]["id"].as_str().unwrap();
        let mut second = first.clone();
        second["messages"].as_array_mut().unwrap().extend([
            json!({"role": "assistant", "content": content.clone()}),
            json!({"role": "user", "content": [{"type": "tool_result", "tool_use_id": id, "content": "22C"}]}),
        ]);
        let b = setup().await;
        let (st, m) = create(&b.proxy, &second).await;
        assert_eq!(st, 200, "{m}");
        assert_eq!(
            m["content"],
            json!([{"type": "thinking", "thinking": REASONING[1], "signature": m["content"][0]["signature"]},
                   {"type": "text", "text": "Paris is 22C."}])
        );
        assert_eq!(b.requests()[0]["messages"][1]["reasoning_content"], REASONING[0]);
        // Without the thinking block (a converter that loses it) DeepSeek refuses.
        let mut bare = second.clone();
        bare["messages"][1]["content"].as_array_mut().unwrap().remove(0);
        let c = setup().await;
        let (st, e) = create(&c.proxy, &bare).await;
        assert_eq!(st, 400, "{e}");
        assert_eq!(e["type"], "error");
        assert_eq!(e["error"]["type"], "invalid_request_error");
        assert!(e["error"]["message"].as_str().unwrap().contains("reasoning_content"), "{e}");
    }
}

#[tokio::test]
async fn prompt_mode_carries_calls_and_results_as_text() {
    let s = setup().await;
    let (st, m) = create(&s.proxy, &ask("p/chatonly", "Weather in Paris?")).await;
    assert_eq!(st, 200, "{m}");
    assert_eq!(m["stop_reason"], "tool_use");
    assert_eq!(m["content"][0], json!({"type": "text", "text": "Let me check."}));
    assert_eq!(
        (m["content"][1]["name"].clone(), m["content"][1]["input"].clone()),
        (json!("get_weather"), json!({"city": "Paris"}))
    );
    let id = m["content"][1]["id"].as_str().unwrap();
    let mut second = ask("p/chatonly", "Weather in Paris?");
    second["messages"].as_array_mut().unwrap().extend([
        json!({"role": "assistant", "content": m["content"].clone()}),
        json!({"role": "user", "content": [{"type": "tool_result", "tool_use_id": id, "content": "sunny", "is_error": false}]}),
    ]);
    let ev = stream(&s.proxy, &second).await;
    let text: String = ev.iter().filter_map(|e| e["delta"]["text"].as_str()).collect();
    assert_eq!(text, "Prompt mode got: sunny");
    assert_eq!(ev[ev.len() - 2]["delta"]["stop_reason"], "end_turn");
    assert!(s.requests().iter().all(|r| r.get("tools").is_none()));
}

#[tokio::test]
async fn errors_in_anthropic_shape_edge_included() {
    let s = setup().await;
    let p = &s.proxy;
    let body = ask("v/hello", "x");
    let r = p.http.post(p.url("/v1/messages")).json(&body).send().await.unwrap();
    assert_eq!(r.status(), 401);
    let e: Value = r.json().await.unwrap();
    assert_eq!(e["type"], "error");
    assert_eq!(e["error"]["type"], "authentication_error");
    let r = p.http.post(p.url("/v1/messages")).header("x-api-key", "wrong-key-123").json(&body).send().await.unwrap();
    assert_eq!(r.status(), 401);
    // A bearer token is the same key.
    let r = p.http.post(p.url("/v1/messages")).bearer_auth(KEY).json(&body).send().await.unwrap();
    assert_eq!(r.status(), 200);
    let (st, e) = create(p, &ask("v/err429", "x")).await;
    assert_eq!((st, e["error"]["type"].as_str()), (429, Some("rate_limit_error")), "{e}");
    assert!(e["error"]["message"].as_str().unwrap().contains("rate limit reached"));
    let (st, e) = create(p, &json!({"model": "v/hello", "max_tokens": 5})).await;
    assert_eq!(
        (st, e),
        (
            400,
            json!({"type": "error", "error": {"type": "invalid_request_error", "message": "messages: Field required (an array)."}})
        )
    );
    let (st, e) = create(p, &ask("nowhere", "x")).await;
    assert_eq!((st, e["error"]["type"].as_str()), (404, Some("not_found_error")), "{e}");
    let mut web = ask("v/hello", "x");
    web["tools"] = json!([{"type": "web_search_20250305", "name": "web_search", "max_uses": 2}]);
    let (st, e) = create(p, &web).await;
    assert_eq!(st, 400);
    assert!(e["error"]["message"].as_str().unwrap().contains("configure a server-side tool named `web_search`"), "{e}");
}

#[tokio::test]
async fn parallel_calls_images_and_claude_code_fields() {
    let s = setup().await;
    let mut req = ask("v/parallel", "Paris and Rome?");
    // Claude Code's newer fields are dropped, not refused.
    req["tools"]
        .as_array_mut()
        .unwrap()
        .push(json!({"type": "tool_search_tool_regex_20251119", "name": "tool_search_tool_regex"}));
    req["output_config"] = json!({"effort": "high"});
    let (st, m) = create(&s.proxy, &req).await;
    assert_eq!(st, 200, "{m}");
    let calls: Vec<&Value> = m["content"].as_array().unwrap().iter().filter(|b| b["type"] == "tool_use").collect();
    assert_eq!(calls.iter().map(|c| c["input"]["city"].as_str().unwrap()).collect::<Vec<_>>(), ["Paris", "Rome"]);
    assert_eq!(s.requests()[0]["tools"].as_array().unwrap().len(), 1);
    let mut second = req.clone();
    let results: Vec<Value> = calls
        .iter()
        .zip(["22C", "25C"])
        .map(|(c, r)| json!({"type": "tool_result", "tool_use_id": c["id"], "content": [{"type": "text", "text": r}]}))
        .collect();
    second["messages"].as_array_mut().unwrap().extend([
        json!({"role": "assistant", "content": m["content"].clone()}),
        json!({"role": "user", "content": results}),
    ]);
    let (st, m) = create(&s.proxy, &second).await;
    assert_eq!((st, m["content"][0]["text"].as_str()), (200, Some("Paris 22C, Rome 25C.")), "{m}");
    // A haiku-class name goes to the alias whose glob is longer.
    let (st, m) = create(
        &s.proxy,
        &json!({"model": "claude-haiku-4-5", "max_tokens": 9, "messages": [{"role": "user", "content": [
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}},
            {"type": "image", "source": {"type": "url", "url": "https://example.com/cat.png"}},
            {"type": "text", "text": "What is this?"}]}]}),
    )
    .await;
    assert_eq!(st, 200, "{m}");
    assert_eq!(m["content"][0]["text"], "I see 2: data:image/png;base64,iVBORw0KGgo= | https://example.com/cat.png");
}

#[tokio::test]
async fn count_tokens_and_the_anthropic_model_list() {
    let s = setup().await;
    let (st, text) = post(
        &s.proxy,
        "/v1/messages/count_tokens",
        &json!({"model": "claude-sonnet-4-5", "system": "abcdefgh", "messages": [{"role": "user", "content": "12345678"}]}),
    )
    .await;
    assert_eq!((st, serde_json::from_str::<Value>(&text).unwrap()), (200, json!({"input_tokens": 4})));
    let r =
        s.proxy.http.get(s.proxy.url("/v1/models")).header("x-api-key", KEY).header("anthropic-version", "2023-06-01");
    let list: Value = r.send().await.unwrap().json().await.unwrap();
    assert_eq!(list["has_more"], false);
    let ids: Vec<&str> = list["data"].as_array().unwrap().iter().map(|m| m["id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["claude-*", "claude-*haiku*"]);
    assert_eq!(list["data"][0]["type"], "model");
    assert_eq!(list["first_id"], "claude-*");
    let plain: Value =
        s.proxy.http.get(s.proxy.url("/v1/models")).bearer_auth(KEY).send().await.unwrap().json().await.unwrap();
    assert_eq!(plain["object"], "list");
}

#[tokio::test]
async fn server_side_tool_runs_in_the_hidden_loop() {
    let s = setup_with("[tools]\nbuiltin = [\"current_time\"]\n").await;
    // The client offers a tool of its own; the server tool joins it upstream only.
    let req = ask("v/clock", "What time is it?");
    let (st, m) = create(&s.proxy, &req).await;
    assert_eq!(st, 200, "{m}");
    assert_eq!(m["content"], json!([{"type": "text", "text": "Let me look.\n\nClock says: true"}]), "{m}");
    assert_eq!(m["stop_reason"], "end_turn");
    let ev = stream(&s.proxy, &req).await;
    let text: String = ev.iter().filter_map(|e| e["delta"]["text"].as_str()).collect();
    assert_eq!(text, "Let me look.\n\nClock says: true");
    assert!(ev.iter().all(|e| e["content_block"]["type"] != "tool_use"), "{ev:#?}");
    assert_eq!(ev[ev.len() - 2]["delta"]["stop_reason"], "end_turn");
    let reqs = s.requests();
    assert_eq!(reqs.len(), 4, "two iterations each");
    let offered: Vec<&str> =
        reqs[0]["tools"].as_array().unwrap().iter().map(|t| t["function"]["name"].as_str().unwrap()).collect();
    assert_eq!(offered, ["get_weather", "current_time"]);
    assert!(tool_results(&reqs[1])[0].contains("datetime"), "{}", reqs[1]);
}

/// The README's demo through the Messages front: the bundled offline
/// `demo` provider reads the repository's `commit-message` skill, then answers.
#[tokio::test]
async fn the_demo_skills_model_answers_through_messages() {
    let replay = Arc::new(modelshim::server::replay::Replay::demo());
    let addr = modelshim::server::replay::spawn(replay.clone(), "127.0.0.1:0").await.unwrap();
    let profiles = modelshim::provider::load_profiles(None).unwrap();
    let mut config = Config::default();
    config
        .providers
        .insert("demo".into(), ProviderConfig { base_url: Some(format!("http://{addr}/v1")), ..Default::default() });
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("skills");
    config.skills = Some(modelshim::skills::SkillsConfig {
        dirs: vec![dir.display().to_string()],
        auto_reload: false,
        ..Default::default()
    });
    let p = serve_state(modelshim::server::AppState::new(&config, &profiles).unwrap()).await;
    let q = json!({"model": "demo/skills", "max_tokens": 512,
                   "messages": [{"role": "user", "content": "Write a commit message: …"}]});
    let (st, m) = create(&p, &q).await;
    assert_eq!(st, 200, "{m}");
    assert_eq!(m["content"].as_array().unwrap().len(), 1, "{m}");
    assert!(
        m["content"][0]["text"].as_str().unwrap().contains("Start with defaults when the config file is empty"),
        "{m}"
    );
    assert_eq!(m["stop_reason"], "end_turn");
    assert_eq!(replay.served().0, 2, "read_skill, then the answer");
    let ev = stream(&p, &q).await;
    let text: String = ev.iter().filter_map(|e| e["delta"]["text"].as_str()).collect();
    assert!(text.contains("Start with defaults"), "{ev:#?}");
    assert!(ev.iter().all(|e| e["content_block"]["type"] != "tool_use"), "{ev:#?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn official_anthropic_python_sdk() {
    let py = tokio::task::spawn_blocking(pyenv::anthropic_env).await.unwrap();
    let s = setup().await;
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/sdk/anthropic_messages.py");
    let base = s.proxy.url("");
    let out = tokio::task::spawn_blocking(move || {
        pyenv::run(Command::new(py).arg(script).env("MODELSHIM_BASE_URL", base).env("MODELSHIM_KEY", KEY))
    })
    .await
    .unwrap();
    match out {
        Ok(text) => {
            println!("{text}");
            assert!(text.contains("ALL OK"), "{text}");
        }
        Err(text) => panic!("anthropic sdk failed:\n{text}"),
    }
}
