//! The proxy against wiremock upstreams that reproduce, each, a vendor bug
//! from the research regression table (shared/research/vendors.md) — streamed
//! and not, and asserting what an OpenAI SDK client ends up with.

use crate::common;

use common::*;
use serde_json::{Value, json};
use wiremock::matchers::{body_partial_json, method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

fn weather_tool() -> Value {
    json!([{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
        "properties": {"city": {"type": "string"}}}}},
        {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object", "properties": {}}}}])
}

fn ask(tools: bool) -> Value {
    let mut b = json!({"model": "v/m", "messages": [{"role": "user", "content": "weather in Paris and Rome?"}]});
    if tools {
        b["tools"] = weather_tool();
    }
    b
}

/// Mounts an SSE answer for streamed requests and a JSON answer for the
/// others.
async fn upstream(stream: &[Value], whole: Option<Value>) -> MockServer {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .and(body_partial_json(json!({"stream": true})))
        .respond_with(ResponseTemplate::new(200).set_body_raw(sse_body(stream), "text/event-stream"))
        .with_priority(1)
        .mount(&server)
        .await;
    if let Some(w) = whole {
        Mock::given(method("POST"))
            .and(path("/v1/chat/completions"))
            .respond_with(ResponseTemplate::new(200).set_body_json(w))
            .with_priority(5)
            .mount(&server)
            .await;
    }
    server
}

/// Runs the request streamed and not; both client views must equal `expect`.
async fn both(profile: &str, stream: &[Value], whole: Value, req: Value, expect: Value) {
    let server = upstream(stream, Some(whole)).await;
    let p = proxy(profile, &server.uri()).await;
    let (st, events) = p.chat_stream(req.clone()).await;
    assert_eq!(st, 200, "{events:?}");
    assert_eq!(events.last(), Some(&json!("[DONE]")));
    let streamed = without_generated_ids(assemble(&events));
    let (st, body) = p.chat(req).await;
    assert_eq!(st, 200, "{body}");
    assert_eq!(body["object"], "chat.completion");
    let mut whole = without_generated_ids(message_view(&body));
    whole["usage"] = Value::Null;
    let mut streamed_cmp = streamed.clone();
    streamed_cmp["usage"] = Value::Null;
    assert_eq!(streamed_cmp, expect, "streamed view");
    assert_eq!(whole, expect, "non-streamed view");
}

fn view(content: &str, reasoning: &str, calls: Value, finish: &str) -> Value {
    json!({"content": content, "reasoning": reasoning, "calls": calls, "finish": finish, "usage": null})
}

fn call(id: &str, name: &str, args: Value) -> Value {
    json!({"id": id, "name": name, "arguments": args})
}

#[tokio::test]
async fn ollama_tool_deltas_without_index() {
    // ollama/ollama#7881: streamed tool_calls lacked `index`.
    let stream = [
        chunk(json!({"role": "assistant", "content": ""}), None),
        chunk(
            json!({"tool_calls": [{"id": "call_a", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":"}}]}),
            None,
        ),
        chunk(json!({"tool_calls": [{"function": {"arguments": " \"Paris\"}"}}]}), None),
        chunk(json!({}), Some("tool_calls")),
    ];
    let whole = completion(
        json!({"role": "assistant", "content": null, "tool_calls": [
        {"id": "call_a", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]}),
        "tool_calls",
    );
    let expect = view("", "", json!([call("<generated>", "get_weather", json!({"city": "Paris"}))]), "tool_calls");
    both("", &stream, whole, ask(true), expect).await;
}

#[tokio::test]
async fn ollama_parallel_calls_all_index_zero() {
    // ollama/ollama#15457: parallel calls all carry index 0 with distinct ids.
    let stream = [
        chunk(
            json!({"tool_calls": [{"index": 0, "id": "c1", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]}),
            None,
        ),
        chunk(
            json!({"tool_calls": [{"index": 0, "id": "c2", "function": {"name": "get_weather", "arguments": {"city": "Rome"}}}]}),
            None,
        ),
        chunk(json!({}), Some("stop")),
    ];
    // Ollama's native shape: arguments as objects, no index.
    let whole = completion(
        json!({"role": "assistant", "content": "", "tool_calls": [
        {"id": "c1", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}},
        {"id": "c2", "function": {"name": "get_weather", "arguments": {"city": "Rome"}}}]}),
        "stop",
    );
    let expect = view(
        "",
        "",
        json!([
            call("c1", "get_weather", json!({"city": "Paris"})),
            call("c2", "get_weather", json!({"city": "Rome"}))
        ]),
        "tool_calls",
    );
    both("", &stream, whole, ask(true), expect).await;
}

#[tokio::test]
async fn whole_call_in_one_chunk_then_empty_finish() {
    // kubectl-ai PR #559 (GLM-4.6 on vLLM), ollama#11633.
    let stream = [
        chunk(
            json!({"role": "assistant", "tool_calls": [{"index": 0, "id": "chatcmpl-tool-1", "type": "function",
            "function": {"name": "get_weather", "arguments": "{\"city\": \"Rome\"}"}}]}),
            None,
        ),
        chunk(json!({}), Some("tool_calls")),
    ];
    let whole = completion(
        json!({"role": "assistant", "tool_calls": [{"id": "chatcmpl-tool-1", "type": "function",
        "function": {"name": "get_weather", "arguments": "{\"city\": \"Rome\"}"}}]}),
        "tool_calls",
    );
    let expect = view("", "", json!([call("chatcmpl-tool-1", "get_weather", json!({"city": "Rome"}))]), "tool_calls");
    both("", &stream, whole, ask(true), expect).await;
}

#[tokio::test]
async fn empty_arguments_become_empty_object() {
    // zai-org/GLM-4.5#146 and QwenLM/qwen-code#6249: zero-arg calls with "" or null arguments.
    let stream = [
        chunk(json!({"content": "Checking."}), None),
        chunk(
            json!({"tool_calls": [{"index": 0, "id": "t1", "type": "function", "function": {"name": "get_time", "arguments": ""}}]}),
            None,
        ),
        chunk(json!({}), Some("tool_calls")),
    ];
    let whole = completion(
        json!({"role": "assistant", "content": "Checking.", "tool_calls": [
        {"id": "t1", "type": "function", "function": {"name": "get_time", "arguments": null}}]}),
        "tool_calls",
    );
    let expect = view("Checking.", "", json!([call("t1", "get_time", json!({}))]), "tool_calls");
    both("", &stream, whole, ask(true), expect).await;
}

#[tokio::test]
async fn finish_reason_stop_with_tool_calls_is_fixed() {
    // sgl-project/sglang#2877, vllm PR #9209; missing ids: vllm#18412.
    let stream = [
        chunk(
            json!({"tool_calls": [{"index": 0, "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Oslo\"}"}}]}),
            None,
        ),
        chunk(json!({}), Some("stop")),
    ];
    let whole = completion(
        json!({"role": "assistant", "tool_calls": [{"type": "function",
        "function": {"name": "get_weather", "arguments": "{\"city\": \"Oslo\"}"}}]}),
        "stop",
    );
    let expect = view("", "", json!([call("<generated>", "get_weather", json!({"city": "Oslo"}))]), "tool_calls");
    both("", &stream, whole, ask(true), expect).await;
}

#[tokio::test]
async fn reasoning_field_variants_and_split_think_tags() {
    // vllm PR #50624: `reasoning` instead of `reasoning_content`; MiniMax /
    // Ollama: <think> in content, split across chunks.
    let stream = [
        chunk(json!({"reasoning": "The user "}), None),
        chunk(json!({"reasoning_content": "wants weather. "}), None),
        chunk(json!({"content": "<th"}), None),
        chunk(json!({"content": "ink>Still thinking.</thi"}), None),
        chunk(json!({"content": "nk>It is sunny."}), None),
        chunk(json!({}), Some("stop")),
    ];
    let whole = completion(
        json!({"role": "assistant", "reasoning": "The user wants weather. ", "content": "<think>Still thinking.</think>It is sunny."}),
        "stop",
    );
    let expect = view("It is sunny.", "The user wants weather. Still thinking.", json!([]), "stop");
    both("", &stream, whole, ask(false), expect).await;
}

#[tokio::test]
async fn kimi_ids_pass_through_byte_for_byte() {
    // openclaw PR #70030: rewriting `functions.read:0` breaks Kimi.
    let stream = [
        chunk(
            json!({"tool_calls": [{"index": 0, "id": "functions.get_weather:0", "type": "function",
            "function": {"name": "get_weather", "arguments": "{\"city\":\"Kyoto\"}"}}]}),
            None,
        ),
        chunk(json!({}), Some("tool_calls")),
    ];
    let whole = completion(
        json!({"role": "assistant", "tool_calls": [{"id": "functions.get_weather:0", "type": "function",
        "function": {"name": "get_weather", "arguments": "{\"city\":\"Kyoto\"}"}}]}),
        "tool_calls",
    );
    let expect =
        view("", "", json!([call("functions.get_weather:0", "get_weather", json!({"city": "Kyoto"}))]), "tool_calls");
    both("", &stream, whole, ask(true), expect).await;
}

#[tokio::test]
async fn tool_call_written_in_text_is_recovered() {
    // The hermes shape many self-hosted servers leak when their parser is off.
    let text = [
        "Let me look.\n<tool",
        "_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Lima\"}}\n</tool_call>",
    ];
    let stream = [
        chunk(json!({"content": text[0]}), None),
        chunk(json!({"content": text[1]}), None),
        chunk(json!({}), Some("stop")),
    ];
    let whole = completion(json!({"role": "assistant", "content": text.concat()}), "stop");
    let expect =
        view("Let me look.", "", json!([call("<generated>", "get_weather", json!({"city": "Lima"}))]), "tool_calls");
    both("", &stream, whole.clone(), ask(true), expect).await;
    // Without declared tools nothing is recovered (auto mode) and the text stays.
    // Kept alive: a dropped wiremock server goes back to its pool, where a
    // test running alongside may mount its own answers on it.
    let server = upstream(&stream, Some(whole)).await;
    let p = proxy("", &server.uri()).await;
    let (_, body) = p.chat(ask(false)).await;
    assert_eq!(body["choices"][0]["message"]["content"], text.concat(), "{body}");
    assert_eq!(body["choices"][0]["finish_reason"], "stop");
}

#[tokio::test]
async fn native_mode_leaves_text_alone() {
    let text = "<tool_call>{\"name\": \"get_weather\", \"arguments\": {}}</tool_call>";
    let server = upstream(&[], Some(completion(json!({"role": "assistant", "content": text}), "stop"))).await;
    let p = proxy("[tools]\nmode = \"native\"", &server.uri()).await;
    let (_, body) = p.chat(ask(true)).await;
    assert_eq!(body["choices"][0]["message"]["content"], text);
}

#[tokio::test]
async fn sensitive_finish_maps_to_content_filter() {
    let stream = [chunk(json!({"content": "I can"}), None), chunk(json!({}), Some("sensitive"))];
    let whole = completion(json!({"role": "assistant", "content": "I can"}), "sensitive");
    both("", &stream, whole, ask(false), view("I can", "", json!([]), "content_filter")).await;
}

#[tokio::test]
async fn usage_chunk_only_when_asked() {
    let stream = [
        chunk(json!({"content": "hi"}), None),
        chunk(json!({}), Some("stop")),
        json!({"id": "up-1", "object": "chat.completion.chunk", "created": 1, "model": "m", "choices": [],
               "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4}}),
    ];
    let server = upstream(&stream, None).await;
    let p = proxy("", &server.uri()).await;
    let mut req = ask(false);
    req["stream_options"] = json!({"include_usage": true});
    let (_, events) = p.chat_stream(req).await;
    let last = &events[events.len() - 2];
    assert_eq!(last["choices"], json!([]));
    assert_eq!(last["usage"]["total_tokens"], 4);
    // Not asked: no chunk with empty choices; usage rides on the finish chunk.
    let (_, events) = p.chat_stream(ask(false)).await;
    for e in events.iter().filter(|e| e.is_object()) {
        assert!(!e["choices"].as_array().is_some_and(Vec::is_empty), "empty choices sent: {e}");
    }
}

#[tokio::test]
async fn sse_comments_and_keepalives_are_tolerated() {
    let server = MockServer::start().await;
    let body = format!(
        ": keep-alive\n\n: ping\ndata: {}\n\n\ndata: {}\n\ndata: [DONE]\n\n",
        chunk(json!({"content": "ok"}), None),
        chunk(json!({}), Some("stop"))
    );
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(200).set_body_raw(body, "text/event-stream"))
        .mount(&server)
        .await;
    let p = proxy("", &server.uri()).await;
    let (st, events) = p.chat_stream(ask(false)).await;
    assert_eq!(st, 200);
    assert_eq!(assemble(&events)["content"], "ok");
}

#[tokio::test]
async fn stream_requested_but_upstream_answers_json() {
    // ollama/ollama#9092: with tools, stream=true returned one final block.
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(
            ResponseTemplate::new(200)
                .set_body_json(completion(json!({"role": "assistant", "content": "one block"}), "stop")),
        )
        .mount(&server)
        .await;
    let p = proxy("", &server.uri()).await;
    let (st, events) = p.chat_stream(ask(false)).await;
    assert_eq!(st, 200);
    assert_eq!(assemble(&events)["content"], "one block");
    assert_eq!(events.last(), Some(&json!("[DONE]")));
}

#[tokio::test]
async fn unknown_fields_pass_through_both_ways() {
    let server = MockServer::start().await;
    let mut whole = completion(json!({"role": "assistant", "content": "x", "annotations": [{"k": 1}]}), "stop");
    whole["system_fingerprint"] = json!("fp_1");
    whole["vendor_extra"] = json!({"a": 1});
    Mock::given(method("POST"))
        .and(body_partial_json(json!({"top_k": 5, "repetition_penalty": 1.1})))
        .respond_with(ResponseTemplate::new(200).set_body_json(whole))
        .mount(&server)
        .await;
    let p = proxy("", &server.uri()).await;
    let mut req = ask(false);
    req["top_k"] = json!(5);
    req["repetition_penalty"] = json!(1.1);
    let (st, body) = p.chat(req).await;
    assert_eq!(st, 200, "{body}");
    assert_eq!(body["system_fingerprint"], "fp_1");
    assert_eq!(body["vendor_extra"], json!({"a": 1}));
    assert_eq!(body["choices"][0]["message"]["annotations"], json!([{"k": 1}]));
}

#[tokio::test]
async fn a_plain_answer_is_sent_as_the_upstream_wrote_it() {
    // Nothing for the normalizer to change: the body goes out byte for byte
    // (key order, spacing, escapes, vendor fields), not re-serialized.
    let server = MockServer::start().await;
    let raw = r#"{"model": "m", "id": "up-1", "object": "chat.completion", "created": 1,
  "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "Hello \u00e9 there. "}}],
  "usage": {"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3}, "vendor_extra": [1, 2]}"#;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(200).set_body_raw(raw, "application/json"))
        .mount(&server)
        .await;
    let p = proxy("", &server.uri()).await;
    let r = p.http.post(p.url("/v1/chat/completions")).json(&ask(false)).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["content-type"], "application/json");
    assert_eq!(r.text().await.unwrap(), raw);
    // Markup in the text takes the normalizer's path.
    server.reset().await;
    let think = completion(json!({"role": "assistant", "content": "<think>hmm</think>Hello"}), "stop");
    Mock::given(method("POST")).respond_with(ResponseTemplate::new(200).set_body_json(think)).mount(&server).await;
    let (st, body) = p.chat(ask(false)).await;
    assert_eq!((st, &body["choices"][0]["message"]["content"]), (200, &json!("Hello")), "{body}");
}

#[tokio::test]
async fn ark_text_parts_are_flattened_for_the_upstream() {
    // CherryHQ/cherry-studio#3513: Ark wants strings, not part arrays.
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(body_partial_json(json!({"messages": [{"role": "user", "content": "a b"},
            {"role": "tool", "tool_call_id": "t", "content": "result"}]})))
        .respond_with(
            ResponseTemplate::new(200).set_body_json(completion(json!({"role": "assistant", "content": "ok"}), "stop")),
        )
        .mount(&server)
        .await;
    let p = proxy("[request]\nflatten_text_parts = true", &server.uri()).await;
    let req = json!({"model": "v/m", "messages": [
        {"role": "user", "content": [{"type": "text", "text": "a "}, {"type": "text", "text": "b"}]},
        {"role": "tool", "tool_call_id": "t", "content": [{"type": "text", "text": "result"}]}]});
    let (st, body) = p.chat(req).await;
    assert_eq!((st, &body["choices"][0]["message"]["content"]), (200, &json!("ok")), "{body}");
}

#[tokio::test]
async fn dashscope_thinking_without_stream_is_streamed_upstream() {
    // QuantumNous/new-api PR #1109: 400 "enable_thinking must be set to false
    // for non-streaming calls". The proxy streams upstream and assembles.
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(body_partial_json(json!({"stream": true})))
        .respond_with(ResponseTemplate::new(200).set_body_raw(
            sse_body(&[
                chunk(json!({"reasoning_content": "hmm"}), None),
                chunk(json!({"content": "Answer."}), None),
                chunk(json!({}), Some("stop")),
            ]),
            "text/event-stream",
        ))
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(400).set_body_json(json!({"error": {"code": "invalid_parameter_error",
            "message": "parameter.enable_thinking must be set to false for non-streaming calls", "type": "invalid_request_error"}})))
        .with_priority(10)
        .mount(&server)
        .await;
    let p = proxy("[thinking]\nstyle = \"enable_thinking\"\nstream_only = true", &server.uri()).await;
    let (st, body) = p.chat(ask(false)).await;
    assert_eq!(st, 200, "{body}");
    assert_eq!(body["choices"][0]["message"]["content"], "Answer.");
    assert_eq!(body["choices"][0]["message"]["reasoning_content"], "hmm");
}

/// Each vendor error shape, and the status the OpenAI SDKs need.
#[tokio::test]
async fn vendor_error_shapes_map_to_openai_errors() {
    let cases: Vec<(&str, u16, Value, u16, &str)> = vec![
        (
            "[errors]\ncodes = { \"1113\" = 402 }",
            429,
            json!({"error": {"code": "1113", "message": "余额不足或无可用资源包"}}),
            429,
            "余额不足或无可用资源包",
        ),
        ("", 401, json!({"code": 30014, "data": null, "message": "Token is invalid."}), 401, "Token is invalid."),
        (
            "",
            402,
            json!({"error": {"message": "Insufficient Balance", "type": "unknown_error"}}),
            429,
            "Insufficient Balance",
        ),
        ("", 451, json!({"error": {"message": "content failed review"}}), 400, "content failed review"),
        (
            "",
            400,
            json!({"error": {"code": "InvalidParameter", "message": "messages.content invalid", "param": "messages.content", "type": "BadRequest"}}),
            400,
            "messages.content invalid",
        ),
        (
            "",
            404,
            json!({"error": {"message": "model not found", "type": "invalid_request_error", "code": "1211"}}),
            404,
            "model not found",
        ),
        ("", 503, json!({"error": {"message": "Service overloaded"}}), 503, "Service overloaded"),
    ];
    for (profile, up_status, body, want_status, want_msg) in cases {
        let server = MockServer::start().await;
        Mock::given(method("POST"))
            .respond_with(ResponseTemplate::new(up_status).set_body_json(body.clone()))
            .mount(&server)
            .await;
        let p = proxy(profile, &server.uri()).await;
        for stream in [false, true] {
            let mut req = ask(false);
            req["stream"] = json!(stream);
            let (st, got) = p.chat(req).await;
            assert_eq!(st, want_status, "{body} -> {got}");
            assert_eq!(got["error"]["message"], want_msg);
            assert!(got["error"]["type"].is_string());
        }
    }
    // MiniMax legacy: an error inside HTTP 200.
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(
            ResponseTemplate::new(200)
                .set_body_json(json!({"base_resp": {"status_code": 1004, "status_msg": "login fail"}})),
        )
        .mount(&server)
        .await;
    let p = proxy("[errors]\ncodes = { \"1004\" = 401 }", &server.uri()).await;
    let (st, got) = p.chat(ask(false)).await;
    assert_eq!((st, got["error"]["message"].as_str()), (401, Some("login fail")));
    // Plain text bodies keep their text.
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(502).set_body_string("bad gateway from nginx"))
        .mount(&server)
        .await;
    let p = proxy("", &server.uri()).await;
    let (st, got) = p.chat(ask(false)).await;
    assert_eq!((st, got["error"]["message"].as_str()), (502, Some("bad gateway from nginx")));
}

#[tokio::test]
async fn error_after_stream_started_is_sent_in_band() {
    let server = MockServer::start().await;
    let body = format!(
        "data: {}\n\ndata: {}\n\n",
        chunk(json!({"content": "partial"}), None),
        json!({"error": {"message": "upstream overloaded mid-stream", "type": "server_error"}})
    );
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(200).set_body_raw(body, "text/event-stream"))
        .mount(&server)
        .await;
    let p = proxy("", &server.uri()).await;
    let (st, events) = p.chat_stream(ask(false)).await;
    assert_eq!(st, 200);
    assert_eq!(events[0]["choices"][0]["delta"]["content"], "partial");
    assert_eq!(events.last().map(|e| e["error"]["message"].clone()), Some(json!("upstream overloaded mid-stream")));
}

#[tokio::test]
async fn bad_client_input_gets_openai_400s() {
    let p = proxy("", "http://127.0.0.1:9").await;
    let cases = [
        ("not json", "not valid JSON"),
        ("[1,2]", "JSON object"),
        (r#"{"messages": [{"role": "user", "content": "x"}]}"#, "model"),
        (r#"{"model": 5, "messages": []}"#, "model"),
        (r#"{"model": "v/m"}"#, "messages"),
        (r#"{"model": "v/m", "messages": "hi"}"#, "messages"),
        (r#"{"model": "v/m", "messages": [{"content": "no role"}]}"#, "role"),
        (r#"{"model": "v/m", "messages": [{"role": "user"}], "stream": "yes"}"#, "stream"),
    ];
    for (body, needle) in cases {
        let r = p.http.post(p.url("/v1/chat/completions")).body(body).send().await.expect("send");
        assert_eq!(r.status().as_u16(), 400, "{body}");
        let v: Value = r.json().await.expect("json");
        let msg = v["error"]["message"].as_str().unwrap_or_default();
        assert!(msg.contains(needle), "{body}: {msg}");
        assert_eq!(v["error"]["type"], "invalid_request_error");
    }
    let (st, v) = p.chat(json!({"model": "unknown/m", "messages": [{"role": "user", "content": "x"}]})).await;
    assert_eq!((st, v["error"]["code"].as_str()), (404, Some("model_not_found")));
    // Upstream unreachable: a 502 with the reason, not a hang or a panic.
    let (st, v) = p.chat(ask(false)).await;
    assert_eq!(st, 502, "{v}");
    assert_eq!(v["error"]["type"], "api_connection_error");
}

#[tokio::test]
async fn request_rewrites_reach_the_upstream() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(body_partial_json(json!({"model": "glm-4.6", "max_tokens": 50, "temperature": 1.0, "tool_choice": "auto",
            "thinking": {"type": "disabled"}})))
        .respond_with(
            ResponseTemplate::new(200).set_body_json(completion(json!({"role": "assistant", "content": "ok"}), "stop")),
        )
        .mount(&server)
        .await;
    let profile = r#"
[request]
drop = ["frequency_penalty", "stream_options"]
rename = { max_completion_tokens = "max_tokens" }
clamp = { temperature = [0.0, 1.0] }
developer_role = "system"
strip_message_name = true
[tools]
strip_strict = true
tool_choice_auto_only = true
[thinking]
style = "thinking_type"
"#;
    let p = proxy(profile, &server.uri()).await;
    let req = json!({"model": "v/glm-4.6", "max_completion_tokens": 50, "temperature": 1.5, "frequency_penalty": 0.5,
        "reasoning_effort": "none", "tool_choice": "required",
        "messages": [{"role": "developer", "content": "be brief"}, {"role": "user", "name": "bob", "content": "hi"}],
        "tools": [{"type": "function", "function": {"name": "f", "strict": true, "parameters": {"type": "object"}}}]});
    let (st, body) = p.chat(req).await;
    assert_eq!(st, 200, "{body}");
    let sent: Value =
        serde_json::from_slice(&server.received_requests().await.unwrap_or_default()[0].body).unwrap_or_default();
    assert!(sent.get("frequency_penalty").is_none() && sent.get("reasoning_effort").is_none());
    assert!(sent["tools"][0]["function"].get("strict").is_none());
    assert!(sent["messages"][1].get("name").is_none());
    assert!(
        sent["messages"][0]["content"].as_str().unwrap_or_default().contains("You must call one of the provided tools")
    );
}

/// Sets the flag when dropped: the upstream's body stream was abandoned.
struct DropFlag(std::sync::Arc<std::sync::atomic::AtomicBool>);

impl Drop for DropFlag {
    fn drop(&mut self) {
        self.0.store(true, std::sync::atomic::Ordering::SeqCst);
    }
}

#[tokio::test]
async fn client_disconnect_cancels_the_upstream_request() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    let dropped = Arc::new(AtomicBool::new(false));
    let flag = dropped.clone();
    // An upstream that streams forever, one chunk every 20 ms.
    let app = axum::Router::new().fallback(move || {
        let guard = DropFlag(flag.clone());
        async move {
            let stream = async_stream::stream! {
                let _guard = guard;
                loop {
                    yield Ok::<_, std::io::Error>(axum::body::Bytes::from(format!("data: {}\n\n", chunk(json!({"content": "tick "}), None))));
                    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
                }
            };
            axum::response::Response::builder()
                .header("content-type", "text/event-stream")
                .body(axum::body::Body::from_stream(stream))
                .unwrap()
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    let p = proxy("", &format!("http://{addr}")).await;
    let mut req = ask(false);
    req["stream"] = json!(true);
    let mut resp = p.http.post(p.url("/v1/chat/completions")).json(&req).send().await.unwrap();
    for _ in 0..3 {
        assert!(resp.chunk().await.unwrap().is_some());
    }
    assert!(!dropped.load(Ordering::SeqCst), "upstream still streaming while the client reads");
    drop(resp);
    for _ in 0..100 {
        if dropped.load(Ordering::SeqCst) {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    panic!("the upstream stream was not cancelled within 2 s of the client leaving");
}

#[tokio::test]
async fn idless_native_calls_stay_separate() {
    // Upstreams (some OpenAI-compatible servers behind LangChain / litellm
    // users) send each call whole with neither `index` nor `id`.
    let each = |city: &str| {
        chunk(
            json!({"tool_calls": [{"type": "function", "function": {"name": "get_weather",
                "arguments": format!("{{\"city\": \"{city}\"}}")}}]}),
            None,
        )
    };
    let stream = [
        chunk(json!({"role": "assistant", "content": ""}), None),
        each("Paris"),
        each("Rome"),
        chunk(json!({"tool_calls": [{"type": "function", "function": {"name": "get_time", "arguments": "{}"}}]}), None),
        chunk(json!({}), Some("tool_calls")),
    ];
    let whole = completion(
        json!({"role": "assistant", "content": null, "tool_calls": [
            {"type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}},
            {"type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Rome\"}"}},
            {"type": "function", "function": {"name": "get_time", "arguments": "{}"}}]}),
        "tool_calls",
    );
    let expect = view(
        "",
        "",
        json!([
            call("<generated>", "get_weather", json!({"city": "Paris"})),
            call("<generated>", "get_weather", json!({"city": "Rome"})),
            call("<generated>", "get_time", json!({}))
        ]),
        "tool_calls",
    );
    both("", &stream, whole, ask(true), expect).await;
}

#[tokio::test]
async fn idless_fragments_of_one_call_still_join() {
    // A server that repeats the name on every fragment of one id-less call.
    let stream = [
        chunk(json!({"tool_calls": [{"function": {"name": "get_weather", "arguments": "{\"city\":"}}]}), None),
        chunk(json!({"tool_calls": [{"function": {"name": "get_weather", "arguments": " \"Paris\"}"}}]}), None),
        chunk(json!({}), Some("tool_calls")),
    ];
    let whole = completion(
        json!({"role": "assistant", "content": null, "tool_calls": [
            {"function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]}),
        "tool_calls",
    );
    let expect = view("", "", json!([call("<generated>", "get_weather", json!({"city": "Paris"}))]), "tool_calls");
    both("", &stream, whole, ask(true), expect).await;
}

/// Issue 27, item 8: vendors' usage fields reach OpenAI's names, streamed
/// and not; with `include_usage` the client gets exactly one usage chunk
/// with `choices: []` before `[DONE]`, wherever the vendor put it.
#[tokio::test]
async fn usage_is_normalized_and_include_usage_is_one_final_chunk() {
    let deepseek = json!({"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120,
        "prompt_cache_hit_tokens": 64, "prompt_cache_miss_tokens": 36,
        "completion_tokens_details": {"reasoning_tokens": 12}});
    let kimi = json!({"prompt_tokens": 9, "completion_tokens": 1, "total_tokens": 10, "cached_tokens": 8});
    // DeepSeek: a final `choices: []` chunk; Kimi: usage inside the last choice.
    let mut ds_last = chunk(json!({}), None);
    ds_last["choices"] = json!([]);
    ds_last["usage"] = deepseek.clone();
    let mut kimi_finish = chunk(json!({}), Some("stop"));
    kimi_finish["choices"][0]["usage"] = kimi.clone();
    let cases = [
        (
            vec![chunk(json!({"role": "assistant", "content": "Hi"}), None), chunk(json!({}), Some("stop")), ds_last],
            deepseek,
            64,
        ),
        (vec![chunk(json!({"role": "assistant", "content": "Hi"}), None), kimi_finish], kimi, 8),
    ];
    for (stream, usage, cached) in cases {
        let mut whole = completion(json!({"role": "assistant", "content": "Hi"}), "stop");
        whole["usage"] = usage.clone();
        let server = upstream(&stream, Some(whole)).await;
        let p = proxy("", &server.uri()).await;
        let (st, body) = p.chat(ask(false)).await;
        assert_eq!(st, 200, "{body}");
        assert_eq!(body["usage"]["prompt_tokens_details"]["cached_tokens"], cached, "{body}");
        for (k, v) in usage.as_object().unwrap() {
            assert_eq!(&body["usage"][k], v, "vendor field {k} kept");
        }
        let mut req = ask(false);
        req["stream_options"] = json!({"include_usage": true});
        let (st, events) = p.chat_stream(req).await;
        assert_eq!(st, 200);
        assert_eq!(events.last(), Some(&json!("[DONE]")));
        let with_usage: Vec<&Value> = events.iter().filter(|e| e.get("usage").is_some_and(|u| !u.is_null())).collect();
        assert_eq!(with_usage.len(), 1, "{events:?}");
        let last = &events[events.len() - 2];
        assert_eq!(last["choices"], json!([]), "{events:?}");
        assert_eq!(last["usage"]["prompt_tokens_details"]["cached_tokens"], cached);
        assert!(
            events.iter().all(|e| e["choices"].as_array().is_none_or(|c| c.iter().all(|c| c.get("usage").is_none())))
        );
        if usage.get("completion_tokens_details").is_some() {
            assert_eq!(last["usage"]["completion_tokens_details"]["reasoning_tokens"], 12);
        }
    }
}
