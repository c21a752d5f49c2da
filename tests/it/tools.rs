//! Tool emulation and tool downgrades, each checked on the exact request
//! modelshim sent upstream (wiremock `received_requests`) and on what the
//! client gets back, streamed and not.

use crate::common;

use common::*;
use serde_json::{Value, json};
use wiremock::matchers::{body_partial_json, method};
use wiremock::{Mock, MockServer, Request, ResponseTemplate};

fn tools() -> Value {
    json!([
        {"type": "function", "function": {"name": "get_weather", "description": "Weather for a city", "strict": true,
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}},
        {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object", "properties": {}}}}
    ])
}

/// A conversation with one earlier tool round.
fn history() -> Value {
    json!([
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function",
            "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny, 22C"},
        {"role": "user", "content": "And the time?"}
    ])
}

fn has_tools(r: &Request) -> bool {
    serde_json::from_slice::<Value>(&r.body).ok().is_some_and(|v| v.get("tools").is_some())
}

/// An upstream without native tools: 400 whenever `tools` is sent, else the
/// given answers (SSE for streamed requests).
async fn no_tools_upstream(stream: &[Value], whole: Value) -> MockServer {
    let s = MockServer::start().await;
    Mock::given(method("POST"))
        .and(has_tools)
        .respond_with(ResponseTemplate::new(400).set_body_json(json!({"error": {"message": "tools not supported"}})))
        .with_priority(1)
        .mount(&s)
        .await;
    Mock::given(method("POST"))
        .and(body_partial_json(json!({"stream": true})))
        .respond_with(ResponseTemplate::new(200).set_body_raw(sse_body(stream), "text/event-stream"))
        .with_priority(2)
        .mount(&s)
        .await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(200).set_body_json(whole))
        .with_priority(3)
        .mount(&s)
        .await;
    s
}

async fn ok_upstream() -> MockServer {
    let s = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(
            ResponseTemplate::new(200).set_body_json(completion(json!({"role": "assistant", "content": "ok"}), "stop")),
        )
        .mount(&s)
        .await;
    s
}

/// Every request body the upstream received.
async fn sent(s: &MockServer) -> Vec<Value> {
    s.received_requests().await.unwrap_or_default().iter().map(|r| serde_json::from_slice(&r.body).unwrap()).collect()
}

/// Sends `req` through a proxy with `profile` and returns the one upstream body.
async fn upstream_body(profile: &str, req: Value) -> Value {
    let s = ok_upstream().await;
    let p = proxy(profile, &s.uri()).await;
    let (st, body) = p.chat(req).await;
    assert_eq!(st, 200, "{body}");
    let mut bodies = sent(&s).await;
    assert_eq!(bodies.len(), 1);
    bodies.remove(0)
}

const PROMPT: &str = "[tools]\nmode = \"prompt\"";

#[tokio::test]
async fn prompt_mode_each_tool_choice() {
    let cases = [
        ("auto", json!({})),
        ("none", json!({"tool_choice": "none"})),
        ("required", json!({"tool_choice": "required"})),
        ("named", json!({"tool_choice": {"type": "function", "function": {"name": "get_time"}}})),
        ("single", json!({"tool_choice": "auto", "parallel_tool_calls": false})),
    ];
    for (name, extra) in cases {
        let mut req = json!({"model": "v/m", "messages": history(), "tools": tools()});
        for (k, v) in extra.as_object().unwrap() {
            req[k] = v.clone();
        }
        let body = upstream_body(PROMPT, req).await;
        for k in ["tools", "tool_choice", "parallel_tool_calls"] {
            assert!(body.get(k).is_none(), "{name}: {k} sent: {body}");
        }
        insta::assert_json_snapshot!(format!("prompt_choice_{name}"), body);
    }
}

#[tokio::test]
async fn prompt_mode_markdown_fence_format() {
    let body = upstream_body(
        "[tools]\nmode = \"prompt\"\nprompt_format = \"markdown_json_fence\"",
        json!({"model": "v/m",
        "messages": history(), "tools": tools()}),
    )
    .await;
    insta::assert_json_snapshot!("prompt_fence", body);
}

#[tokio::test]
async fn prompt_mode_answer_becomes_tool_calls_streamed_and_not() {
    let text = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Rome\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>";
    let stream = [
        chunk(json!({"role": "assistant", "content": &text[..30]}), None),
        chunk(json!({"content": &text[30..]}), None),
        chunk(json!({}), Some("stop")),
    ];
    let whole = completion(json!({"role": "assistant", "content": text}), "stop");
    let s = no_tools_upstream(&stream, whole).await;
    let p = proxy(PROMPT, &s.uri()).await;
    let req = json!({"model": "v/m", "messages": [{"role": "user", "content": "Rome?"}], "tools": tools()});
    let both_calls = json!([
        {"id": "<generated>", "name": "get_weather", "arguments": {"city": "Rome"}},
        {"id": "<generated>", "name": "get_time", "arguments": {}}
    ]);
    let (st, events) = p.chat_stream(req.clone()).await;
    assert_eq!(st, 200, "{events:?}");
    let v = without_generated_ids(assemble(&events));
    assert_eq!((&v["calls"], &v["finish"], &v["content"]), (&both_calls, &json!("tool_calls"), &json!("")));
    let (st, body) = p.chat(req.clone()).await;
    assert_eq!(st, 200, "{body}");
    let v = without_generated_ids(message_view(&body));
    assert_eq!((&v["calls"], &v["finish"]), (&both_calls, &json!("tool_calls")));
    // parallel_tool_calls: false keeps only the first call, both ways.
    let mut single = req;
    single["parallel_tool_calls"] = json!(false);
    let (_, events) = p.chat_stream(single.clone()).await;
    let v = without_generated_ids(assemble(&events));
    assert_eq!(v["calls"], json!([both_calls[0]]));
    let (_, body) = p.chat(single).await;
    assert_eq!(without_generated_ids(message_view(&body))["calls"], json!([both_calls[0]]));
    // tool_choice none: nothing offered, so nothing is recovered.
    let none = json!({"model": "v/m", "messages": [{"role": "user", "content": "Rome?"}], "tools": tools(),
        "tool_choice": "none"});
    let (_, body) = p.chat(none).await;
    assert_eq!(body["choices"][0]["message"]["content"], text);
    assert!(sent(&s).await.iter().all(|b| b.get("tools").is_none()));
}

#[tokio::test]
async fn prompt_models_glob_selects_prompt_mode_per_model() {
    let s = ok_upstream().await;
    let p = proxy("[tools]\nprompt_models = [\"tiny-*\"]", &s.uri()).await;
    for model in ["v/tiny-1b", "v/large"] {
        let (st, _) =
            p.chat(json!({"model": model, "messages": [{"role": "user", "content": "x"}], "tools": tools()})).await;
        assert_eq!(st, 200);
    }
    let bodies = sent(&s).await;
    assert!(bodies[0].get("tools").is_none());
    assert!(bodies[0]["messages"][0]["content"].as_str().unwrap().starts_with("# Tools\n"));
    assert_eq!(bodies[1]["tools"], tools());
}

#[tokio::test]
async fn schema_keywords_and_function_fields_are_stripped() {
    let profile = r#"
[tools]
strip_strict = true
strip_schema_keywords = ["format", "additionalProperties", "$schema"]
drop_function_fields = ["input_schema"]
"#;
    let req = json!({"model": "v/m", "messages": [{"role": "user", "content": "x"}], "tools": [
        {"type": "function", "function": {"name": "book", "strict": true, "input_schema": {"type": "object"},
            "parameters": {"$schema": "https://json-schema.org/draft/2020-12/schema", "type": "object",
                "additionalProperties": false, "properties": {
                    "format": {"type": "string", "enum": ["pdf", "html"]},
                    "when": {"type": "string", "format": "date-time"},
                    "guests": {"type": "array", "items": {"type": "object", "additionalProperties": false,
                        "properties": {"email": {"type": "string", "format": "email"}}}}}}}}]});
    let body = upstream_body(profile, req).await;
    assert_eq!(
        body,
        json!({"model": "m", "messages": [{"role": "user", "content": "x"}], "tools": [
        {"type": "function", "function": {"name": "book", "parameters": {"type": "object", "properties": {
            "format": {"type": "string", "enum": ["pdf", "html"]},
            "when": {"type": "string"},
            "guests": {"type": "array", "items": {"type": "object",
                "properties": {"email": {"type": "string"}}}}}}}}]})
    );
}

/// Answers with a native call to the first tool the request offered, under
/// the name the upstream saw.
fn echo_call(stream: bool) -> impl Fn(&Request) -> ResponseTemplate {
    move |r: &Request| {
        let v: Value = serde_json::from_slice(&r.body).unwrap();
        let name = v["tools"][0]["function"]["name"].clone();
        let call = json!({"index": 0, "id": "c1", "type": "function",
            "function": {"name": name, "arguments": "{\"path\": \"a.txt\"}"}});
        if stream {
            let chunks = [chunk(json!({"tool_calls": [call]}), None), chunk(json!({}), Some("tool_calls"))];
            ResponseTemplate::new(200).set_body_raw(sse_body(&chunks), "text/event-stream")
        } else {
            ResponseTemplate::new(200)
                .set_body_json(completion(json!({"role": "assistant", "tool_calls": [call]}), "tool_calls"))
        }
    }
}

#[tokio::test]
async fn tool_names_renamed_for_the_vendor_and_mapped_back() {
    let s = MockServer::start().await;
    Mock::given(method("POST"))
        .and(body_partial_json(json!({"stream": true})))
        .respond_with(echo_call(true))
        .with_priority(1)
        .mount(&s)
        .await;
    Mock::given(method("POST")).respond_with(echo_call(false)).with_priority(2).mount(&s).await;
    let p = proxy("[tools]\nname_chars = \"[A-Za-z0-9_-]\"\nname_max_len = 20", &s.uri()).await;
    let req = json!({"model": "v/m", "tool_choice": {"type": "function", "function": {"name": "fs.read_file"}},
        "messages": [
            {"role": "user", "content": "read a"},
            {"role": "assistant", "content": null, "tool_calls": [{"id": "c0", "type": "function",
                "function": {"name": "fs.read_file", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "c0", "content": "missing path"}],
        "tools": [{"type": "function", "function": {"name": "fs.read_file", "parameters": {"type": "object",
            "properties": {"path": {"type": "string"}}}}}]});
    let want = json!([{"id": "c1", "name": "fs.read_file", "arguments": {"path": "a.txt"}}]);
    let (_, body) = p.chat(req.clone()).await;
    assert_eq!(message_view(&body)["calls"], want, "{body}");
    let (_, events) = p.chat_stream(req).await;
    assert_eq!(assemble(&events)["calls"], want);
    let up = &sent(&s).await[0];
    let renamed = up["tools"][0]["function"]["name"].as_str().unwrap().to_string();
    assert!(renamed.starts_with("fs_read_file_") && renamed.len() <= 20, "{renamed}");
    assert_eq!(up["tool_choice"]["function"]["name"], renamed.as_str());
    assert_eq!(up["messages"][1]["tool_calls"][0]["function"]["name"], renamed.as_str());
}

#[tokio::test]
async fn duplicate_turn_scoped_ids_get_stable_rewrites() {
    // openclaw/openclaw#84730: two calls `functions.exec:0` in one history → 400.
    let call = |id: &str| json!({"id": id, "type": "function", "function": {"name": "exec", "arguments": "{}"}});
    let messages = json!([
        {"role": "user", "content": "run"},
        {"role": "assistant", "content": null, "tool_calls": [call("functions.exec:0")]},
        {"role": "tool", "tool_call_id": "functions.exec:0", "content": "one"},
        {"role": "assistant", "content": null, "tool_calls": [call("functions.exec:0"), call("functions.exec:1")]},
        {"role": "tool", "tool_call_id": "functions.exec:0", "content": "two"},
        {"role": "tool", "tool_call_id": "functions.exec:1", "content": "three"}
    ]);
    let body = upstream_body("[tools]\ndedupe_call_ids = true", json!({"model": "v/m", "messages": messages})).await;
    assert_eq!(
        body["messages"],
        json!([
            {"role": "user", "content": "run"},
            {"role": "assistant", "content": null, "tool_calls": [call("functions.exec:0")]},
            {"role": "tool", "tool_call_id": "functions.exec:0", "content": "one"},
            {"role": "assistant", "content": null, "tool_calls": [call("functions.exec:0-2"), call("functions.exec:1")]},
            {"role": "tool", "tool_call_id": "functions.exec:0-2", "content": "two"},
            {"role": "tool", "tool_call_id": "functions.exec:1", "content": "three"}
        ])
    );
}

#[tokio::test]
async fn ids_mapped_to_nine_alphanumerics_the_same_way_each_turn() {
    let messages = json!([
        {"role": "user", "content": "x"},
        {"role": "assistant", "content": null, "tool_calls": [
            {"id": "call_abc123def456", "type": "function", "function": {"name": "f", "arguments": "{}"}},
            {"id": "Ab3dE6gH9", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "call_abc123def456", "content": "a"},
        {"role": "tool", "tool_call_id": "Ab3dE6gH9", "content": "b"}
    ]);
    let req = json!({"model": "v/m", "messages": messages});
    let a = upstream_body("[tools]\ncall_id_alnum9 = true", req.clone()).await;
    let b = upstream_body("[tools]\ncall_id_alnum9 = true", req).await;
    assert_eq!(a, b, "deterministic");
    let id = a["messages"][1]["tool_calls"][0]["id"].as_str().unwrap();
    assert!(id.len() == 9 && id.bytes().all(|c| c.is_ascii_alphanumeric()), "{id}");
    assert_eq!(a["messages"][2]["tool_call_id"], id);
    assert_eq!(a["messages"][1]["tool_calls"][1]["id"], "Ab3dE6gH9");
    assert_eq!(a["messages"][3]["tool_call_id"], "Ab3dE6gH9");
}

#[tokio::test]
async fn parallel_false_keeps_the_first_native_call() {
    let calls = json!([
        {"index": 0, "id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Rome\"}"}},
        {"index": 1, "id": "c2", "type": "function", "function": {"name": "get_time", "arguments": ""}}
    ]);
    let stream = [chunk(json!({"tool_calls": calls}), None), chunk(json!({}), Some("tool_calls"))];
    let whole = completion(json!({"role": "assistant", "tool_calls": calls}), "tool_calls");
    let s = MockServer::start().await;
    Mock::given(method("POST"))
        .and(body_partial_json(json!({"stream": true})))
        .respond_with(ResponseTemplate::new(200).set_body_raw(sse_body(&stream), "text/event-stream"))
        .with_priority(1)
        .mount(&s)
        .await;
    Mock::given(method("POST")).respond_with(ResponseTemplate::new(200).set_body_json(whole)).mount(&s).await;
    let p = proxy("", &s.uri()).await;
    let req = json!({"model": "v/m", "messages": [{"role": "user", "content": "x"}], "tools": tools(),
        "parallel_tool_calls": false});
    let want = json!([{"id": "c1", "name": "get_weather", "arguments": {"city": "Rome"}}]);
    let (_, events) = p.chat_stream(req.clone()).await;
    assert_eq!(assemble(&events)["calls"], want);
    let (_, body) = p.chat(req).await;
    assert_eq!(message_view(&body)["calls"], want);
    assert_eq!(body["choices"][0]["finish_reason"], "tool_calls");
}

#[tokio::test]
async fn tool_choice_auto_only_downgrades_each_mode() {
    let profile = "[tools]\ntool_choice_auto_only = true";
    let base = || json!({"model": "v/m", "messages": [{"role": "user", "content": "x"}], "tools": [tools()[1]]});
    let mut none = base();
    none["tool_choice"] = json!("none");
    assert_eq!(
        upstream_body(profile, none).await,
        json!({"model": "m", "messages": [{"role": "user", "content": "x"}]})
    );
    let mut auto = base();
    auto["tool_choice"] = json!("auto");
    let mut want = base();
    want["model"] = json!("m");
    want["tool_choice"] = json!("auto");
    assert_eq!(upstream_body(profile, auto).await, want);
    for (choice, line) in [
        (json!("required"), "You must call one of the provided tools in this reply."),
        (
            json!({"type": "function", "function": {"name": "get_time"}}),
            "You must call the tool `get_time` in this reply.",
        ),
    ] {
        let mut r = base();
        r["tool_choice"] = choice;
        let mut want = base();
        want["model"] = json!("m");
        want["tool_choice"] = json!("auto");
        want["messages"] = json!([{"role": "system", "content": line}, {"role": "user", "content": "x"}]);
        assert_eq!(upstream_body(profile, r).await, want);
    }
}

#[tokio::test]
async fn thinking_conflicts_fall_back_as_the_profile_says() {
    let req = json!({"model": "v/m", "messages": [{"role": "user", "content": "x"}], "tools": [tools()[1]],
        "tool_choice": "required"});
    // Forced choice while thinking (on by default): thinking is switched off.
    let off =
        "[thinking]\nstyle = \"thinking_type\"\non_by_default = true\n[tools]\nthinking_conflict = \"forced_choice\"";
    let mut want = req.clone();
    want["model"] = json!("m");
    want["thinking"] = json!({"type": "disabled"});
    assert_eq!(upstream_body(off, req.clone()).await, want);
    // The client asked for no thinking: nothing to fall back from.
    let mut r = req.clone();
    r["reasoning_effort"] = json!("none");
    assert_eq!(upstream_body(off, r).await["thinking"], json!({"type": "disabled"}));
    // A non-forced choice is no conflict.
    let mut r = req.clone();
    r["tool_choice"] = json!("auto");
    assert!(upstream_body(off, r).await.get("thinking").is_none());
    // Tools with thinking, fallback to prompt: thinking kept, tools in the prompt.
    let prompt = "[thinking]\nstyle = \"enable_thinking\"\n[tools]\nthinking_conflict = \"tools\"\non_thinking_conflict = \"prompt\"";
    let mut r = req;
    r["reasoning_effort"] = json!("high");
    let body = upstream_body(prompt, r).await;
    assert_eq!(body["enable_thinking"], true);
    assert!(body.get("tools").is_none() && body.get("tool_choice").is_none());
    let sys = body["messages"][0]["content"].as_str().unwrap();
    assert!(sys.contains("<tool_call>") && sys.contains("You must call at least one function"), "{sys}");
}
