//! The Responses API front end (issue #11) against a scripted wiremock
//! upstream that speaks chat completions: the event stream and the response
//! object, input items and reasoning carried to a DeepSeek-like upstream,
//! stored responses, hosted tools, errors; then the official Python SDK's
//! `responses.create` and the OpenAI Agents SDK against the same upstream.

use crate::common;
use crate::support::pyenv;

use std::path::Path;
use std::process::Command;
use std::sync::{Arc, Mutex};

use common::*;
use modelshim::config::Config;
use serde_json::{Value, json};
use wiremock::matchers::method;
use wiremock::{Mock, MockServer, Request, Respond, ResponseTemplate};

type Log = Arc<Mutex<Vec<Value>>>;

const REASONING: [&str; 2] = ["The user wants Paris; call get_weather.", "22C in Paris; answer."];
const TEXT_CALL: &str =
    "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>";

fn err(status: u16, message: &str) -> ResponseTemplate {
    ResponseTemplate::new(status).set_body_json(
        json!({"error": {"message": message, "type": "invalid_request_error", "param": null, "code": null}}),
    )
}

fn tool_results(body: &Value) -> Vec<String> {
    body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["content"].as_str().unwrap_or("").to_string())
        .collect()
}

/// Answers by the scenario in the upstream model name (`v/<scenario>`).
struct Script {
    log: Log,
}

/// What the upstream says: reasoning, text, native calls.
struct Say {
    reasoning: Option<&'static str>,
    content: Option<String>,
    calls: Vec<Value>,
}

impl Say {
    fn text(t: &str) -> Self {
        Say { reasoning: None, content: Some(t.to_string()), calls: Vec::new() }
    }
}

fn weather_call(id: &str, city: &str) -> Value {
    json!({"id": id, "type": "function", "function": {"name": "get_weather", "arguments": json!({"city": city}).to_string()}})
}

impl Respond for Script {
    fn respond(&self, r: &Request) -> ResponseTemplate {
        let body: Value = serde_json::from_slice(&r.body).unwrap();
        self.log.lock().unwrap().push(body.clone());
        let results = tool_results(&body);
        let say = match body["model"].as_str().unwrap() {
            "hello" => Say::text("Hello from upstream."),
            "echo" => {
                let users: Vec<&str> = body["messages"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .filter(|m| m["role"] == "user")
                    .filter_map(|m| m["content"].as_str())
                    .collect();
                Say::text(&format!("You said: {}", users.join(" | ")))
            }
            "weather" if results.is_empty() => {
                Say { reasoning: None, content: None, calls: vec![weather_call("call_w1", "Paris")] }
            }
            "weather" => Say::text(&format!("It is {} in Paris.", results[0])),
            "textcall" if results.is_empty() => Say::text(TEXT_CALL),
            "textcall" => Say::text(&format!("Text call answered: {}", results[0])),
            "deepseek" | "deepseek_ws" => {
                // Thinking mode: every earlier tool-call turn must carry its
                // exact reasoning.
                for (i, m) in body["messages"].as_array().unwrap().iter().enumerate() {
                    if m["role"] == "assistant" && m["tool_calls"].as_array().is_some_and(|c| !c.is_empty()) {
                        match m.get("reasoning_content").and_then(Value::as_str) {
                            None => {
                                return err(
                                    400,
                                    &format!(
                                        "Missing `reasoning_content` field in the assistant message at message index {i}"
                                    ),
                                );
                            }
                            Some(t) if t != REASONING[0] => {
                                return err(400, &format!("wrong reasoning_content at index {i}: {t:?}"));
                            }
                            Some(_) => {}
                        }
                    }
                }
                if results.is_empty() {
                    Say {
                        reasoning: Some(REASONING[0]),
                        // DeepSeek writes a blank line before some calls.
                        content: (body["model"] == "deepseek_ws").then(|| "\n\n".to_string()),
                        calls: vec![weather_call("call_ds_0", "Paris")],
                    }
                } else {
                    Say { reasoning: Some(REASONING[1]), content: Some("Paris is 22C.".into()), calls: Vec::new() }
                }
            }
            "search" if results.is_empty() => Say {
                reasoning: None,
                content: None,
                calls: vec![
                    json!({"id": "call_s1", "type": "function", "function": {"name": "web_search", "arguments": "{}"}}),
                ],
            },
            "search" => Say::text("Searched; the time tool answered."),
            "nscall" if results.is_empty() => Say {
                reasoning: None,
                content: None,
                calls: vec![json!({"id": "call_n1", "type": "function",
                                   "function": {"name": "multi_agent_v1__spawn_agent", "arguments": "{\"task\":\"t\"}"}})],
            },
            "nscall" => Say::text(&format!("Spawned: {}", results[0])),
            "err429" => return err(429, "rate limit reached"),
            "midfail" => {
                let body = format!(
                    "data: {}\n\ndata: {}\n\n",
                    chunk(json!({"role": "assistant", "content": "partial "}), None),
                    json!({"error": {"message": "server overloaded, try later", "type": "server_error"}})
                );
                return ResponseTemplate::new(200).set_body_raw(body, "text/event-stream");
            }
            other => return err(404, &format!("no scenario {other}")),
        };
        respond(&body, say)
    }
}

fn respond(body: &Value, say: Say) -> ResponseTemplate {
    let usage = json!({"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10,
                       "completion_tokens_details": {"reasoning_tokens": 1}});
    let finish = if say.calls.is_empty() { "stop" } else { "tool_calls" };
    if body["stream"] == true {
        let mut chunks = vec![chunk(json!({"role": "assistant", "content": ""}), None)];
        if let Some(r) = say.reasoning {
            let (a, b) = r.split_at(r.len() / 2);
            chunks.push(chunk(json!({"reasoning_content": a}), None));
            chunks.push(chunk(json!({"reasoning_content": b}), None));
        }
        if let Some(t) = &say.content {
            let mid = t.char_indices().nth(t.chars().count() / 2).map_or(0, |(i, _)| i);
            for piece in [&t[..mid], &t[mid..]] {
                if !piece.is_empty() {
                    chunks.push(chunk(json!({"content": piece}), None));
                }
            }
        }
        for (i, c) in say.calls.iter().enumerate() {
            let args = c["function"]["arguments"].as_str().unwrap();
            let (a, b) = args.split_at(args.len() / 2);
            let mut first = c.clone();
            first["index"] = json!(i);
            first["function"]["arguments"] = json!(a);
            chunks.push(chunk(json!({"tool_calls": [first]}), None));
            chunks.push(chunk(json!({"tool_calls": [{"index": i, "function": {"arguments": b}}]}), None));
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

const PROFILE: &str = "[thinking]\nreasoning_replay = \"required\"\n";

async fn setup_with(config: &str) -> Setup {
    setup_tweaked(config, |_| {}).await
}

async fn setup_tweaked(config: &str, tweak: impl FnOnce(&mut Config)) -> Setup {
    let upstream = MockServer::start().await;
    let log: Log = Arc::default();
    Mock::given(method("POST")).respond_with(Script { log: log.clone() }).mount(&upstream).await;
    let parsed: Config = toml::from_str(config).expect("test config parses");
    let proxy = proxy_with(PROFILE, &upstream.uri(), |c| {
        c.upstream.breaker_failures = 0;
        c.upstream.retries = Some(0);
        c.tools = parsed.tools;
        c.mcp = parsed.mcp;
        tweak(c);
    })
    .await;
    Setup { _upstream: upstream, proxy, log }
}

async fn setup() -> Setup {
    setup_with("").await
}

async fn create(p: &Proxy, body: &Value) -> (u16, Value) {
    let r = p.http.post(p.url("/v1/responses")).json(body).send().await.unwrap();
    let status = r.status().as_u16();
    let text = r.text().await.unwrap();
    (status, serde_json::from_str(&text).unwrap_or(Value::String(text)))
}

/// A streamed create: status and the events, each checked to carry its
/// type both as the SSE `event:` and in the data.
async fn create_stream(p: &Proxy, body: &Value) -> (u16, Vec<Value>) {
    let mut body = body.clone();
    body["stream"] = json!(true);
    let r = p.http.post(p.url("/v1/responses")).json(&body).send().await.unwrap();
    let status = r.status().as_u16();
    let text = r.text().await.unwrap();
    if status != 200 {
        return (status, vec![serde_json::from_str(&text).unwrap()]);
    }
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
    (status, events)
}

fn types(events: &[Value]) -> Vec<&str> {
    events.iter().map(|e| e["type"].as_str().unwrap()).collect()
}

fn weather_tool() -> Value {
    json!({"type": "function", "name": "get_weather", "description": "Weather of a city",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}})
}

#[tokio::test]
async fn non_streamed_response_object() {
    let s = setup().await;
    let (st, r) = create(
        &s.proxy,
        &json!({"model": "v/hello", "input": "Hi", "instructions": "Be brief.",
                                          "max_output_tokens": 50, "temperature": 0.2}),
    )
    .await;
    assert_eq!(st, 200, "{r}");
    let id = r["id"].as_str().unwrap();
    assert!(id.starts_with("resp_") && id.len() >= 29, "{id}");
    assert_eq!(r["object"], "response");
    assert_eq!(r["status"], "completed");
    assert_eq!(r["model"], "v/hello");
    assert_eq!(r["instructions"], "Be brief.");
    assert_eq!(r["temperature"], 0.2);
    let out = r["output"].as_array().unwrap();
    assert_eq!(out.len(), 1);
    assert_eq!(out[0]["type"], "message");
    assert_eq!(out[0]["role"], "assistant");
    assert_eq!(out[0]["status"], "completed");
    assert!(out[0]["id"].as_str().unwrap().starts_with("msg_"));
    assert_eq!(
        out[0]["content"][0],
        json!({"type": "output_text", "text": "Hello from upstream.", "annotations": [], "logprobs": []})
    );
    assert_eq!(r["usage"]["input_tokens"], 7);
    assert_eq!(r["usage"]["output_tokens"], 3);
    assert_eq!(r["usage"]["total_tokens"], 10);
    assert_eq!(r["usage"]["output_tokens_details"]["reasoning_tokens"], 1);
    assert_eq!(r["usage"]["input_tokens_details"]["cached_tokens"], 0);
    // The upstream got a chat request.
    let up = &s.requests()[0];
    assert_eq!(up["model"], "hello");
    assert_eq!(up["messages"], json!([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]));
    assert_eq!(up["max_tokens"], 50);
    assert!(up.get("input").is_none() && up.get("instructions").is_none() && up.get("store").is_none());
}

#[tokio::test]
async fn streamed_event_sequence_with_reasoning_and_a_call() {
    let s = setup().await;
    let (st, events) = create_stream(
        &s.proxy,
        &json!({"model": "v/deepseek", "input": "Weather in Paris?", "tools": [weather_tool()]}),
    )
    .await;
    assert_eq!(st, 200, "{events:?}");
    assert_eq!(
        types(&events),
        [
            "response.created",
            "response.in_progress",
            "response.output_item.added",
            "response.content_part.added",
            "response.reasoning_text.delta",
            "response.reasoning_text.delta",
            "response.reasoning_text.done",
            "response.content_part.done",
            "response.output_item.done",
            "response.output_item.added",
            "response.function_call_arguments.delta",
            "response.function_call_arguments.delta",
            "response.function_call_arguments.done",
            "response.output_item.done",
            "response.completed",
        ]
    );
    for (i, e) in events.iter().enumerate() {
        assert_eq!(e["sequence_number"], i as u64);
    }
    assert_eq!(events[0]["response"]["status"], "in_progress");
    assert_eq!(events[0]["response"]["output"], json!([]));
    assert_eq!(events[4]["output_index"], 0);
    assert_eq!(events[10]["output_index"], 1);
    let done = &events.last().unwrap()["response"];
    assert_eq!(done["status"], "completed");
    assert_eq!(done["usage"]["total_tokens"], 10);
    let out = done["output"].as_array().unwrap();
    assert_eq!(out[0]["type"], "reasoning");
    assert_eq!(out[0]["content"], json!([{"type": "reasoning_text", "text": REASONING[0]}]));
    assert_eq!(out[1]["type"], "function_call");
    assert_eq!(out[1]["call_id"], "call_ds_0");
    assert_eq!(out[1]["name"], "get_weather");
    assert_eq!(out[1]["arguments"], "{\"city\":\"Paris\"}");
    // Items in the completed response are the ones streamed.
    assert_eq!(out[1]["id"], events[13]["item"]["id"]);
    assert_eq!(events[12]["arguments"], "{\"city\":\"Paris\"}");
    // The upstream was asked for usage and got the tool in chat shape.
    let up = &s.requests()[0];
    assert_eq!(up["stream"], true);
    assert_eq!(up["tools"][0]["function"]["name"], "get_weather");
}

#[tokio::test]
async fn streamed_text_closes_message_and_matches_the_non_streamed_object() {
    let s = setup().await;
    let (_, events) = create_stream(&s.proxy, &json!({"model": "v/hello", "input": "Hi"})).await;
    let t = types(&events);
    assert_eq!(
        t,
        [
            "response.created",
            "response.in_progress",
            "response.output_item.added",
            "response.content_part.added",
            "response.output_text.delta",
            "response.output_text.delta",
            "response.output_text.done",
            "response.content_part.done",
            "response.output_item.done",
            "response.completed",
        ]
    );
    assert_eq!(events[4]["logprobs"], json!([]));
    assert_eq!(events[4]["content_index"], 0);
    assert_eq!(events[6]["text"], "Hello from upstream.");
    let (_, whole) = create(&s.proxy, &json!({"model": "v/hello", "input": "Hi"})).await;
    let streamed = &events.last().unwrap()["response"];
    let strip = |v: &Value| -> Vec<Value> {
        v["output"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| {
                let mut i = i.clone();
                i.as_object_mut().unwrap().remove("id");
                i
            })
            .collect()
    };
    assert_eq!(strip(streamed), strip(&whole));
    assert_eq!(streamed["usage"], whole["usage"]);
}

#[tokio::test]
async fn text_embedded_call_becomes_a_function_call_item() {
    let s = setup().await;
    let body = json!({"model": "v/textcall", "input": "Weather in Paris?", "tools": [weather_tool()]});
    let (st, r) = create(&s.proxy, &body).await;
    assert_eq!(st, 200, "{r}");
    let out = r["output"].as_array().unwrap();
    assert_eq!(out[0]["content"][0]["text"], "Let me check.");
    assert_eq!(out[1]["type"], "function_call");
    assert_eq!(out[1]["name"], "get_weather");
    assert_eq!(serde_json::from_str::<Value>(out[1]["arguments"].as_str().unwrap()).unwrap(), json!({"city": "Paris"}));
    let (_, events) = create_stream(&s.proxy, &body).await;
    let done = &events.last().unwrap()["response"]["output"];
    assert_eq!(done[1]["name"], "get_weather");
    assert!(!done[0]["content"][0]["text"].as_str().unwrap().contains("tool_call"));
}

#[tokio::test]
async fn previous_response_id_rebuilds_the_history_and_get_returns_it() {
    let s = setup().await;
    let (_, r1) = create(&s.proxy, &json!({"model": "v/echo", "input": "one", "instructions": "first only"})).await;
    let id1 = r1["id"].as_str().unwrap();
    let (st, r2) = create(&s.proxy, &json!({"model": "v/echo", "input": "two", "previous_response_id": id1})).await;
    assert_eq!(st, 200, "{r2}");
    assert_eq!(r2["previous_response_id"], id1);
    assert_eq!(r2["output"][0]["content"][0]["text"], "You said: one | two");
    // Instructions are not carried over (as on OpenAI); the earlier answer is.
    let up = &s.requests()[1]["messages"];
    assert_eq!(up.as_array().unwrap().len(), 3, "{up}");
    assert_eq!(up[1], json!({"role": "assistant", "content": "You said: one"}));
    // Streamed turns are stored too.
    let (_, ev) =
        create_stream(&s.proxy, &json!({"model": "v/echo", "input": "three", "previous_response_id": r2["id"]})).await;
    let r3 = &ev.last().unwrap()["response"];
    assert_eq!(r3["output"][0]["content"][0]["text"], "You said: one | two | three");
    let (st, got) = s
        .proxy
        .http
        .get(s.proxy.url(&format!("/v1/responses/{}", r3["id"].as_str().unwrap())))
        .send()
        .await
        .map(|r| (r.status().as_u16(), r))
        .unwrap();
    assert_eq!(st, 200);
    let got: Value = got.json().await.unwrap();
    assert_eq!(&got, r3);
}

#[tokio::test]
async fn unknown_ids_and_store_false_are_404() {
    let s = setup().await;
    let (st, e) =
        create(&s.proxy, &json!({"model": "v/echo", "input": "x", "previous_response_id": "resp_nope"})).await;
    assert_eq!(st, 404, "{e}");
    assert_eq!(e["error"]["code"], "previous_response_not_found");
    assert_eq!(e["error"]["param"], "previous_response_id");
    assert_eq!(e["error"]["type"], "invalid_request_error");
    assert!(e["error"]["message"].as_str().unwrap().contains("resp_nope"));
    assert!(s.requests().is_empty(), "nothing went upstream");
    let r = s.proxy.http.get(s.proxy.url("/v1/responses/resp_nope")).send().await.unwrap();
    assert_eq!(r.status().as_u16(), 404);
    let (st, r) = create(&s.proxy, &json!({"model": "v/hello", "input": "x", "store": false})).await;
    assert_eq!(st, 200);
    assert_eq!(r["store"], false);
    let id = r["id"].as_str().unwrap();
    let g = s.proxy.http.get(s.proxy.url(&format!("/v1/responses/{id}"))).send().await.unwrap();
    assert_eq!(g.status().as_u16(), 404);
    let (st, _) = create(&s.proxy, &json!({"model": "v/hello", "input": "y", "previous_response_id": id})).await;
    assert_eq!(st, 404);
}

#[tokio::test]
async fn the_message_limit_counts_the_stored_history() {
    let s = setup_tweaked("", |c| c.limits.max_messages = 3).await;
    let (_, r1) = create(&s.proxy, &json!({"model": "v/echo", "input": "one"})).await;
    let (st, r2) =
        create(&s.proxy, &json!({"model": "v/echo", "input": "two", "previous_response_id": r1["id"]})).await;
    assert_eq!(st, 200, "{r2}");
    let (st, e) =
        create(&s.proxy, &json!({"model": "v/echo", "input": "three", "previous_response_id": r2["id"]})).await;
    assert_eq!(st, 400, "{e}");
    assert_eq!(e["error"]["param"], "input");
    assert_eq!(s.requests().len(), 2);
}

#[tokio::test]
async fn stored_responses_belong_to_their_proxy_key() {
    let s = setup_tweaked("", |c| {
        c.auth = Some(toml::from_str(r#"keys = [{ key = "sk-alice-key" }, { key = "sk-bob-key-2" }]"#).unwrap());
    })
    .await;
    let p = &s.proxy;
    let send = |key: &str, body: Value| {
        let rb = p.http.post(p.url("/v1/responses")).bearer_auth(key).json(&body);
        async move {
            let r = rb.send().await.unwrap();
            let status = r.status().as_u16();
            let text = r.text().await.unwrap();
            (status, text)
        }
    };
    let get = |key: &str, id: &str| {
        let rb = p.http.get(p.url(&format!("/v1/responses/{id}"))).bearer_auth(key);
        async move { rb.send().await.unwrap().status().as_u16() }
    };
    for stream in [false, true] {
        let (st, text) = send("sk-alice-key", json!({"model": "v/echo", "input": "mine", "stream": stream})).await;
        assert_eq!(st, 200, "{text}");
        let id = if stream {
            let data = text.lines().rev().find_map(|l| l.strip_prefix("data: ")).unwrap();
            serde_json::from_str::<Value>(data).unwrap()["response"]["id"].as_str().unwrap().to_string()
        } else {
            serde_json::from_str::<Value>(&text).unwrap()["id"].as_str().unwrap().to_string()
        };
        assert_eq!(get("sk-alice-key", &id).await, 200, "stream={stream}");
        assert_eq!(get("sk-bob-key-2", &id).await, 404, "stream={stream}");
        let next = |key| send(key, json!({"model": "v/echo", "input": "next", "previous_response_id": id}));
        assert_eq!(next("sk-bob-key-2").await.0, 404);
        assert_eq!(next("sk-alice-key").await.0, 200);
    }
}

#[tokio::test]
async fn hosted_tools_are_a_400_naming_the_feature() {
    let s = setup().await;
    for (tool, name) in [
        (json!({"type": "mcp", "server_label": "x", "server_url": "http://127.0.0.1:9"}), "mcp"),
        (json!({"type": "file_search", "vector_store_ids": ["vs_1"]}), "file_search"),
        (
            json!({"type": "computer_use_preview", "display_width": 1, "display_height": 1, "environment": "linux"}),
            "computer_use_preview",
        ),
        (json!({"type": "code_interpreter", "container": {"type": "auto"}}), "code_interpreter"),
    ] {
        let (st, e) =
            create(&s.proxy, &json!({"model": "v/hello", "input": "x", "tools": [weather_tool(), tool]})).await;
        assert_eq!(st, 400, "{e}");
        assert_eq!(e["error"]["type"], "invalid_request_error");
        assert_eq!(e["error"]["param"], "tools[1]");
        assert!(e["error"]["message"].as_str().unwrap().contains(name), "{e}");
    }
    assert!(s.requests().is_empty());
}

#[tokio::test]
async fn a_hosted_tool_is_served_by_a_server_tool_of_its_kind() {
    let config = "[tools]\nbuiltin = [\"current_time\"]\n[tools.skill.web_search]\ndescription = \"Search the web\"\nmode = \"sequential\"\ntools = [\"current_time\"]\n";
    let s = setup_with(config).await;
    let (st, r) =
        create(&s.proxy, &json!({"model": "v/search", "input": "news?", "tools": [{"type": "web_search_preview"}]}))
            .await;
    assert_eq!(st, 200, "{r}");
    assert_eq!(r["output"].as_array().unwrap().len(), 1, "{r}");
    assert_eq!(r["output"][0]["content"][0]["text"], "Searched; the time tool answered.");
    let reqs = s.requests();
    assert_eq!(reqs.len(), 2);
    let names: Vec<&str> =
        reqs[0]["tools"].as_array().unwrap().iter().map(|t| t["function"]["name"].as_str().unwrap()).collect();
    assert!(names.contains(&"web_search"), "{names:?}");
    assert_eq!(tool_results(&reqs[1]).len(), 1);
    // Streamed through the agent loop: only the answer reaches the client.
    let (st, events) = create_stream(
        &s.proxy,
        &json!({"model": "v/search", "input": "news?", "tools": [{"type": "web_search_preview"}]}),
    )
    .await;
    assert_eq!(st, 200, "{events:?}");
    let done = &events.last().unwrap()["response"];
    assert_eq!(done["status"], "completed");
    assert_eq!(done["output"].as_array().unwrap().len(), 1, "{done}");
    assert_eq!(done["output"][0]["content"][0]["text"], "Searched; the time tool answered.");
    assert!(!types(&events).contains(&"response.function_call_arguments.delta"));
}

#[tokio::test]
async fn reasoning_items_reach_a_deepseek_like_upstream() {
    // Turn one on one proxy; turn two, with the items passed back by the
    // client, on a fresh proxy that remembers nothing: the reasoning must
    // come from the reasoning item itself.
    let a = setup().await;
    let b = setup().await;
    let first = json!({"model": "v/deepseek", "input": [{"role": "user", "content": "Weather in Paris?"}], "tools": [weather_tool()]});
    for stream in [false, true] {
        let r1 = if stream {
            create_stream(&a.proxy, &first).await.1.last().unwrap()["response"].clone()
        } else {
            create(&a.proxy, &first).await.1
        };
        let out = r1["output"].as_array().unwrap().clone();
        assert_eq!(out[0]["type"], "reasoning");
        let call_id = out[1]["call_id"].as_str().unwrap();
        let mut input = first["input"].as_array().unwrap().clone();
        input.extend(out.clone());
        input.push(json!({"type": "function_call_output", "call_id": call_id, "output": "22C"}));
        let second = json!({"model": "v/deepseek", "input": input, "tools": [weather_tool()], "stream": stream});
        let r2 = if stream {
            create_stream(&b.proxy, &second).await.1.last().unwrap()["response"].clone()
        } else {
            let (st, r) = create(&b.proxy, &second).await;
            assert_eq!(st, 200, "{r}");
            r
        };
        assert_eq!(r2["status"], "completed", "{r2}");
        let texts: Vec<&Value> = r2["output"].as_array().unwrap().iter().filter(|i| i["type"] == "message").collect();
        assert_eq!(texts[0]["content"][0]["text"], "Paris is 22C.");
        // Without the reasoning item the upstream refuses (as DeepSeek does).
        let mut bare = second.clone();
        bare["input"].as_array_mut().unwrap().retain(|i| i["type"] != "reasoning");
        bare["stream"] = json!(false);
        let c = setup().await;
        let (st, e) = create(&c.proxy, &bare).await;
        assert_eq!(st, 400, "{e}");
        assert!(e["error"]["message"].as_str().unwrap().contains("reasoning_content"));
    }
    let up = b.requests();
    let assistant = up[0]["messages"].as_array().unwrap().iter().find(|m| m["role"] == "assistant").unwrap().clone();
    assert_eq!(assistant["reasoning_content"], REASONING[0]);
    assert_eq!(assistant["tool_calls"][0]["id"], "call_ds_0");
}

#[tokio::test]
async fn previous_response_id_carries_reasoning_across_turns() {
    let s = setup().await;
    let (_, r1) =
        create(&s.proxy, &json!({"model": "v/deepseek", "input": "Weather in Paris?", "tools": [weather_tool()]}))
            .await;
    let call_id = r1["output"][1]["call_id"].as_str().unwrap();
    let (st, r2) = create(
        &s.proxy,
        &json!({"model": "v/deepseek", "previous_response_id": r1["id"], "tools": [weather_tool()],
        "input": [{"type": "function_call_output", "call_id": call_id, "output": "22C"}]}),
    )
    .await;
    assert_eq!(st, 200, "{r2}");
    assert_eq!(r2["output"][1]["content"][0]["text"], "Paris is 22C.");
}

#[tokio::test]
async fn upstream_errors_before_and_after_the_first_byte() {
    let s = setup().await;
    let (st, e) = create(&s.proxy, &json!({"model": "v/err429", "input": "x"})).await;
    assert_eq!(st, 429, "{e}");
    assert!(e["error"]["message"].as_str().unwrap().contains("rate limit"));
    let (st, e) = create_stream(&s.proxy, &json!({"model": "v/err429", "input": "x"})).await;
    assert_eq!(st, 429, "{e:?}");
    let (st, events) = create_stream(&s.proxy, &json!({"model": "v/midfail", "input": "x"})).await;
    assert_eq!(st, 200);
    let last = events.last().unwrap();
    assert_eq!(last["type"], "response.failed", "{events:?}");
    assert_eq!(last["response"]["status"], "failed");
    assert!(last["response"]["error"]["message"].as_str().unwrap().contains("overloaded"));
    let (st, e) =
        create(&s.proxy, &json!({"model": "v/hello", "input": [{"type": "item_reference", "id": "msg_1"}]})).await;
    assert_eq!(st, 400);
    assert_eq!(e["error"]["param"], "input[0]");
    let (st, _) = create(&s.proxy, &json!({"model": "nowhere/x", "input": "x"})).await;
    assert_eq!(st, 404);
}

fn report(name: &str, out: Result<String, String>) {
    match out {
        Ok(text) => println!("{text}"),
        Err(text) => panic!("{name} failed:\n{text}"),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn official_python_sdk_responses_create() {
    let py = tokio::task::spawn_blocking(pyenv::python_env).await.unwrap();
    let s = setup().await;
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/sdk/responses.py");
    let base = s.proxy.url("/v1");
    let out =
        tokio::task::spawn_blocking(move || pyenv::run(Command::new(py).arg(script).env("MODELSHIM_BASE_URL", base)))
            .await
            .unwrap();
    report("python responses", out);
}

#[tokio::test(flavor = "multi_thread")]
async fn openai_agents_sdk_runs_an_agent_with_a_function_tool() {
    let py = tokio::task::spawn_blocking(pyenv::agents_env).await.unwrap();
    let s = setup().await;
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/sdk/agents_responses.py");
    let base = s.proxy.url("/v1");
    let out = tokio::task::spawn_blocking(move || {
        pyenv::run(
            Command::new(py).arg(script).env("MODELSHIM_BASE_URL", base).env("OPENAI_AGENTS_DISABLE_TRACING", "1"),
        )
    })
    .await
    .unwrap();
    report("agents sdk", out);
    // The agent's second model call carried the tool's result.
    let reqs = s.requests();
    assert!(reqs.iter().any(|r| tool_results(r).iter().any(|t| t.contains("22C"))), "{reqs:?}");
}

#[tokio::test]
async fn input_items_are_listed_and_a_deleted_response_is_gone() {
    let s = setup().await;
    let p = &s.proxy;
    let (_, r1) = create(p, &json!({"model": "v/echo", "input": "one"})).await;
    let (_, r2) = create(
        p,
        &json!({"model": "v/echo", "previous_response_id": r1["id"],
        "input": [{"role": "user", "content": [{"type": "input_text", "text": "two"}]}]}),
    )
    .await;
    let id = r2["id"].as_str().unwrap();
    let list = |q: &str| {
        let rb = p.http.get(p.url(&format!("/v1/responses/{id}/input_items{q}")));
        async move { rb.send().await.unwrap().json::<Value>().await.unwrap() }
    };
    let all = list("?order=asc").await;
    assert_eq!(all["object"], "list");
    let data = all["data"].as_array().unwrap();
    let texts: Vec<&str> = data.iter().map(|i| i["content"][0]["text"].as_str().unwrap()).collect();
    assert_eq!(texts, ["one", "You said: one", "two"]);
    assert!(data.iter().all(|i| i["id"].is_string() && i["type"] == "message"));
    assert_eq!(data[1]["content"][0]["type"], "output_text");
    assert_eq!(all["has_more"], false);
    // Newest first by default; pages with `after`.
    let page = list("?limit=2").await;
    assert_eq!(page["data"][0]["content"][0]["text"], "two");
    assert_eq!(page["has_more"], true);
    let rest = list(&format!("?limit=2&after={}", page["last_id"].as_str().unwrap())).await;
    assert_eq!(rest["data"].as_array().unwrap().len(), 1);
    assert_eq!(rest["data"][0]["content"][0]["text"], "one");
    assert_eq!(list("?order=asc").await, all, "ids are stable");

    let del = p.http.delete(p.url(&format!("/v1/responses/{id}"))).send().await.unwrap();
    assert_eq!(del.status().as_u16(), 200);
    assert_eq!(del.json::<Value>().await.unwrap(), json!({"id": id, "object": "response", "deleted": true}));
    assert_eq!(p.http.get(p.url(&format!("/v1/responses/{id}"))).send().await.unwrap().status().as_u16(), 404);
    assert_eq!(p.http.delete(p.url(&format!("/v1/responses/{id}"))).send().await.unwrap().status().as_u16(), 404);
    let (st, _) = create(p, &json!({"model": "v/echo", "input": "x", "previous_response_id": id})).await;
    assert_eq!(st, 404);
}

/// Issue 25, item 12: each turn is under `max_body_bytes`, but the request
/// assembled from `previous_response_id` is not: a 413, and the upstream
/// never gets the oversized body.
#[tokio::test]
async fn the_body_limit_applies_to_the_request_assembled_from_stored_turns() {
    let setup = setup_tweaked("", |c| c.limits.max_body_bytes = 64 * 1024).await;
    let p = &setup.proxy;
    let big = "x".repeat(40 * 1024);
    let (status, first) = create(p, &json!({"model": "v/hello", "input": big})).await;
    assert_eq!(status, 200, "{first}");
    let sent = setup.requests().len();
    let body = json!({"model": "v/hello", "input": big, "previous_response_id": first["id"]});
    let (status, e) = create(p, &body).await;
    assert_eq!(status, 413, "{e}");
    assert_eq!(e["error"]["code"], "request_too_large", "{e}");
    assert_eq!(setup.requests().len(), sent, "nothing went upstream");
    let (status, _) =
        create(p, &json!({"model": "v/hello", "input": "short", "previous_response_id": first["id"]})).await;
    assert_eq!(status, 200, "a small next turn still goes through");
}

#[tokio::test]
async fn item_references_resolve_to_this_keys_stored_items() {
    // The Vercel AI SDK's `@ai-sdk/openai` (store on) sends the items this
    // proxy returned back as `item_reference`s.
    let s = setup_tweaked("", |c| {
        c.auth = Some(toml::from_str(r#"keys = [{ key = "sk-alice-key" }, { key = "sk-bob-key-2" }]"#).unwrap());
    })
    .await;
    let p = &s.proxy;
    let send = |key: &str, body: Value| {
        let rb = p.http.post(p.url("/v1/responses")).bearer_auth(key).json(&body);
        async move {
            let r = rb.send().await.unwrap();
            let status = r.status().as_u16();
            let text = r.text().await.unwrap();
            if body["stream"] == true && status == 200 {
                let data = text.lines().rev().find_map(|l| l.strip_prefix("data: ")).unwrap();
                return (status, serde_json::from_str::<Value>(data).unwrap()["response"].clone());
            }
            (status, serde_json::from_str(&text).unwrap_or(Value::String(text)))
        }
    };
    for stream in [false, true] {
        let user = json!({"role": "user", "content": "Weather in Paris?"});
        let first = json!({"model": "v/deepseek", "input": [user], "tools": [weather_tool()], "stream": stream});
        let (st, r1) = send("sk-alice-key", first).await;
        assert_eq!(st, 200, "{r1}");
        let out = r1["output"].as_array().unwrap();
        let call_id = out[1]["call_id"].as_str().unwrap();
        let mut input = vec![user.clone()];
        input.extend(out.iter().map(|it| json!({"type": "item_reference", "id": it["id"]})));
        input.push(json!({"type": "function_call_output", "call_id": call_id, "output": "22C"}));
        let second = json!({"model": "v/deepseek", "input": input, "tools": [weather_tool()], "stream": stream});
        let (st, e) = send("sk-bob-key-2", second.clone()).await;
        assert_eq!(st, 400, "another key's items are unknown to it: {e}");
        assert_eq!(e["error"]["param"], "input[1]");
        let (st, r2) = send("sk-alice-key", second).await;
        assert_eq!(st, 200, "{r2}");
        assert_eq!(r2["output"][1]["content"][0]["text"], "Paris is 22C.", "stream={stream}");
        let up = s.requests();
        let assistant = up.last().unwrap()["messages"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["role"] == "assistant")
            .unwrap()
            .clone();
        assert_eq!(assistant["reasoning_content"], REASONING[0]);
        assert_eq!(assistant["tool_calls"][0]["id"], call_id);
    }
}

#[tokio::test]
async fn a_tool_call_turns_reasoning_is_remembered_streamed_and_not() {
    // Clients that pass back the call but not the reasoning (or a reasoning
    // item with no text, as clients reading only `summary` do): the proxy's
    // memory fills it in, whichever way the first turn was asked.
    // With server-side tools configured too: then the agent loop answers.
    let agent = "[tools]\nbuiltin = [\"current_time\"]\n";
    for (config, stream, model) in [
        ("", false, "v/deepseek"),
        ("", true, "v/deepseek"),
        (agent, false, "v/deepseek"),
        (agent, true, "v/deepseek"),
        ("", false, "v/deepseek_ws"),
        ("", true, "v/deepseek_ws"),
    ] {
        for reasoning_item in [None, Some(json!({"type": "reasoning", "summary": []}))] {
            let s = setup_with(config).await;
            let user = json!({"role": "user", "content": "Weather in Paris?"});
            let first = json!({"model": model, "input": [user], "tools": [weather_tool()], "stream": stream});
            let r1 = if stream {
                create_stream(&s.proxy, &first).await.1.last().unwrap()["response"].clone()
            } else {
                create(&s.proxy, &first).await.1
            };
            let out = r1["output"].as_array().unwrap();
            let call = out.iter().find(|i| i["type"] == "function_call").unwrap().clone();
            // The output passed back as it came, but for the reasoning.
            let mut input = vec![user];
            for it in out {
                match it["type"].as_str() {
                    Some("reasoning") => input.extend(reasoning_item.clone()),
                    _ => input.push(it.clone()),
                }
            }
            input.push(json!({"type": "function_call_output", "call_id": call["call_id"], "output": "22C"}));
            let (st, r2) =
                create(&s.proxy, &json!({"model": model, "input": input, "tools": [weather_tool()], "store": false}))
                    .await;
            assert_eq!(st, 200, "{model} config={config:?} stream={stream} item={reasoning_item:?}: {r2}");
        }
    }
}

/// Codex declares `web_search` (hosted); with no server tool to serve it,
/// it is left out of what the vendor sees instead of a 400.
#[tokio::test]
async fn an_unserved_web_search_is_left_out_not_a_400() {
    let s = setup().await;
    let body = json!({"model": "v/hello", "input": "x", "tools": [weather_tool(), {"type": "web_search", "external_web_access": false}]});
    let (st, r) = create(&s.proxy, &body).await;
    assert_eq!(st, 200, "{r}");
    let up = s.requests();
    let tools: Vec<&Value> = up[0]["tools"].as_array().unwrap().iter().map(|t| &t["function"]["name"]).collect();
    assert_eq!(tools, [&json!("get_weather")]);
    // Still echoed as declared.
    assert_eq!(r["tools"][1]["type"], "web_search");
}

/// A namespace tool (Codex's `multi_agent_v1`) is offered flattened; the
/// vendor's call comes back as the namespace and tool, and that call in the
/// next turn's input reaches the vendor under the flattened name again.
#[tokio::test]
async fn namespace_tools_are_flattened_and_calls_mapped_back() {
    let s = setup().await;
    let ns = json!({"type": "namespace", "name": "multi_agent_v1", "description": "Sub-agents", "tools": [
        {"type": "function", "name": "spawn_agent", "description": "Spawn", "strict": false,
         "parameters": {"type": "object", "properties": {"task": {"type": "string"}}}}]});
    let first = json!({"model": "v/nscall", "store": false, "input": "spawn one", "tools": [weather_tool(), ns]});
    for stream in [false, true] {
        let r1 = if stream {
            let (st, ev) = create_stream(&s.proxy, &first).await;
            assert_eq!(st, 200);
            let done = ev.iter().find(|e| e["type"] == "response.output_item.done").unwrap();
            assert_eq!(done["item"]["namespace"], "multi_agent_v1");
            ev.last().unwrap()["response"].clone()
        } else {
            create(&s.proxy, &first).await.1
        };
        let call = &r1["output"][0];
        assert_eq!(call["type"], "function_call", "{r1}");
        assert_eq!((call["namespace"].as_str(), call["name"].as_str()), (Some("multi_agent_v1"), Some("spawn_agent")));
        let mut second = first.clone();
        second["input"] = json!([{"role": "user", "content": "spawn one"}, call,
            {"type": "function_call_output", "call_id": call["call_id"], "output": "agent-7"}]);
        let (st, r2) = create(&s.proxy, &second).await;
        assert_eq!(st, 200, "{r2}");
        assert_eq!(r2["output"][0]["content"][0]["text"], "Spawned: agent-7");
    }
    let up = s.requests();
    let names: Vec<&Value> = up[0]["tools"].as_array().unwrap().iter().map(|t| &t["function"]["name"]).collect();
    assert_eq!(names, [&json!("get_weather"), &json!("multi_agent_v1__spawn_agent")]);
    let assistant = up[1]["messages"].as_array().unwrap().iter().find(|m| m["role"] == "assistant").unwrap();
    assert_eq!(assistant["tool_calls"][0]["function"]["name"], "multi_agent_v1__spawn_agent");
}

async fn send_as(p: &Proxy, key: &str, body: &Value) -> (u16, Value) {
    let r = p.http.post(p.url("/v1/responses")).bearer_auth(key).json(body).send().await.unwrap();
    let status = r.status().as_u16();
    let text = r.text().await.unwrap();
    if body["stream"] == true && status == 200 {
        let data = text.lines().rev().find_map(|l| l.strip_prefix("data: ")).unwrap();
        return (status, serde_json::from_str::<Value>(data).unwrap()["response"].clone());
    }
    (status, serde_json::from_str(&text).unwrap_or(Value::String(text)))
}

/// `store: false` with `include: ["reasoning.encrypted_content"]` (Codex):
/// the reasoning goes back to the client sealed, comes back with only the
/// sealed part, and a replica that shares the key but not the store (here:
/// another proxy in this process) restores it for the DeepSeek-like
/// upstream; another proxy key's client cannot replay it.
#[tokio::test]
async fn sealed_reasoning_round_trips_through_the_client_alone() {
    let auth = |c: &mut Config| {
        c.auth = Some(toml::from_str(r#"keys = [{ key = "sk-alice-key" }, { key = "sk-bob-key-2" }]"#).unwrap());
    };
    let a = setup_tweaked("", auth).await;
    let b = setup_tweaked("", auth).await;
    let user = json!({"role": "user", "content": "Weather in Paris?"});
    for stream in [false, true] {
        let first = json!({"model": "v/deepseek", "store": false, "stream": stream,
            "include": ["reasoning.encrypted_content"], "input": [user], "tools": [weather_tool()]});
        let (st, r1) = send_as(&a.proxy, "sk-alice-key", &first).await;
        assert_eq!(st, 200, "{r1}");
        let rs = &r1["output"][0];
        assert_eq!(rs["type"], "reasoning", "{r1}");
        let sealed = rs["encrypted_content"].as_str().unwrap();
        assert!(sealed.starts_with("msr1.") && !sealed.contains("Paris"), "{sealed}");
        // Only the sealed part comes back.
        let back = json!({"type": "reasoning", "id": rs["id"], "summary": [], "encrypted_content": sealed});
        let call = &r1["output"][1];
        let mut second = first.clone();
        second["input"] =
            json!([user, back, call, {"type": "function_call_output", "call_id": call["call_id"], "output": "22C"}]);
        let (st, r2) = send_as(&b.proxy, "sk-alice-key", &second).await;
        assert_eq!(st, 200, "{r2}");
        let text = r2["output"].as_array().unwrap().iter().find(|i| i["type"] == "message").unwrap();
        assert_eq!(text["content"][0]["text"], "Paris is 22C.");
        let (st, e) = send_as(&b.proxy, "sk-bob-key-2", &second).await;
        assert_eq!(st, 400, "{e}");
        assert!(e["error"]["message"].as_str().unwrap().contains("reasoning_content"), "{e}");
    }
    let up = b.requests();
    let assistant = up[0]["messages"].as_array().unwrap().iter().find(|m| m["role"] == "assistant").unwrap().clone();
    assert_eq!(assistant["reasoning_content"], REASONING[0]);
    // Not asked for: no `encrypted_content`.
    let (_, r) =
        send_as(&a.proxy, "sk-alice-key", &json!({"model": "v/deepseek", "input": [user], "tools": [weather_tool()]}))
            .await;
    assert!(r["output"][0].get("encrypted_content").is_none(), "{r}");
}

/// `POST /v1/responses/compact`: the same model summarizes; the answer is
/// the user messages and a sealed `compaction` item, which goes upstream
/// as the summary when it comes back.
#[tokio::test]
async fn compact_summarizes_and_the_compaction_item_comes_back_as_the_summary() {
    let s = setup().await;
    let input = json!([{"role": "user", "content": "first ask"}, {"type": "message", "role": "assistant", "content": "an answer"}]);
    let r = s
        .proxy
        .http
        .post(s.proxy.url("/v1/responses/compact"))
        .json(&json!({"model": "v/echo", "input": input, "tools": [weather_tool()]}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    let c: Value = r.json().await.unwrap();
    let out = c["output"].as_array().unwrap();
    assert_eq!(out.len(), 2, "{c}");
    assert_eq!(out[0]["content"], "first ask");
    assert_eq!(out[1]["type"], "compaction");
    let up = s.requests();
    assert!(up[0].get("tools").is_none(), "{}", up[0]);
    assert!(up[0]["messages"].as_array().unwrap().last().unwrap()["content"].as_str().unwrap().contains("summary"));
    let mut next = out.clone();
    next.push(json!({"role": "user", "content": "go on"}));
    let (st, r) = create(&s.proxy, &json!({"model": "v/echo", "store": false, "input": next})).await;
    assert_eq!(st, 200, "{r}");
    let users: Vec<String> = s.requests()[1]["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "user")
        .map(|m| m["content"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(users.len(), 3, "{users:?}");
    assert!(
        users[1].starts_with("A summary of the conversation so far") && users[1].contains("You said: first ask"),
        "{users:?}"
    );
}

/// The tool limit counts the tools the vendor is offered: a namespace's
/// tools and `additional_tools` items count one by one.
#[tokio::test]
async fn the_tool_limit_counts_flattened_tools() {
    let s = setup_tweaked("", |c| c.limits.max_tools = 2).await;
    let f = |n: &str| json!({"type": "function", "name": n, "parameters": {"type": "object"}});
    let ns = json!({"type": "namespace", "name": "grp", "tools": [f("a"), f("b")]});
    let (st, e) = create(&s.proxy, &json!({"model": "v/hello", "input": "x", "tools": [f("c"), ns]})).await;
    assert_eq!(st, 400, "{e}");
    assert_eq!(e["error"]["param"], "tools");
    let extra = json!({"type": "additional_tools", "role": "developer", "tools": [f("d"), f("e")]});
    let (st, e) = create(
        &s.proxy,
        &json!({"model": "v/hello", "input": [extra, {"role": "user", "content": "x"}], "tools": [f("c")]}),
    )
    .await;
    assert_eq!(st, 400, "{e}");
    let (st, r) = create(&s.proxy, &json!({"model": "v/hello", "input": "x", "tools": [ns]})).await;
    assert_eq!(st, 200, "{r}");
    assert!(s.requests().len() == 1);
}
