//! Structured outputs held to their schema (issue #45, docs/structured-outputs.md)
//! against a scripted DeepSeek-like upstream on loopback: it answers 400
//! "This response_format type is unavailable now" to `json_schema` (as
//! DeepSeek does), and otherwise says what the scenario (the model name)
//! scripts — fenced JSON, JSON in prose, a wrong type once, never valid, a
//! strict tool's arguments wrong once, a nested `$ref`/`anyOf`/`enum`
//! schema. The provider `deepseek` uses the bundled profile (emulated); `v`
//! a native vendor. Real clients run the same scenarios in
//! tests/clients/structured_client.py and structured_ai.mjs.

use std::sync::{Arc, Mutex};

use crate::clients::{Runner, run_script};

use crate::common::*;
use modelshim::config::{Config, ProviderConfig};
use serde_json::{Value, json};
use wiremock::matchers::method;
use wiremock::{Mock, MockServer, Request, Respond, ResponseTemplate};

pub const PERSON: &str = "{\"name\": \"Ada Lovelace\", \"age\": 36}";

/// The client's schema for a person (as the OpenAI SDK's `.parse()` sends it).
fn person_format(strict: bool) -> Value {
    json!({"type": "json_schema", "json_schema": {"name": "Person", "strict": strict, "schema": {
        "type": "object", "additionalProperties": false, "required": ["name", "age"],
        "properties": {"name": {"type": "string"}, "age": {"type": "integer"}}}}})
}

/// A schema with `$defs`/`$ref`, `anyOf` with null and an `enum`.
fn nested_format() -> Value {
    json!({"type": "json_schema", "json_schema": {"name": "Team", "strict": true, "schema": {
        "type": "object", "additionalProperties": false, "required": ["lead", "members"],
        "$defs": {"Member": {"type": "object", "additionalProperties": false, "required": ["name", "role", "email"],
            "properties": {"name": {"type": "string"}, "role": {"enum": ["dev", "ops"]},
                           "email": {"anyOf": [{"type": "string"}, {"type": "null"}]}}}},
        "properties": {"lead": {"$ref": "#/$defs/Member"},
                       "members": {"type": "array", "items": {"$ref": "#/$defs/Member"}}}}}})
}

pub const TEAM: &str = "{\"lead\": {\"name\": \"Ada\", \"role\": \"dev\", \"email\": null}, \"members\": [{\"name\": \"Bob\", \"role\": \"ops\", \"email\": \"b@x.org\"}]}";

fn weather_tool(strict: bool) -> Value {
    json!({"type": "function", "function": {"name": "get_weather", "strict": strict, "parameters": {
        "type": "object", "additionalProperties": false, "required": ["city"],
        "properties": {"city": {"type": "string"}}}}})
}

/// How many times the model was told its last answer did not hold.
fn reasked(body: &Value) -> usize {
    body["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|m| {
            let text = m["content"].as_str().unwrap_or_default();
            text.contains("did not validate") || text.contains("invalid arguments")
        })
        .count()
}

/// What the scripted model says, by scenario (the model name).
pub fn brain(body: &Value) -> Value {
    let again = reasked(body);
    let model = body["model"].as_str().unwrap_or_default();
    let call = |args: &str| {
        json!({"tool_calls": [{"id": format!("call_{again}"), "type": "function",
        "function": {"name": "get_weather", "arguments": args}}]})
    };
    match model {
        "fenced" => say(&format!("```json\n{PERSON}\n```")),
        "prose" => {
            say(&format!("Sure! Here is the person you asked for:\n\n{PERSON}\n\nLet me know if you need more."))
        }
        "trailing-comma" => say("{\"name\": \"Ada Lovelace\", \"age\": 36,}"),
        "once" if again == 0 => say("{\"name\": \"Ada Lovelace\", \"age\": \"thirty-six\"}"),
        "once" => say(PERSON),
        "never" => say("{\"name\": \"Ada Lovelace\"}"),
        "nested" if again == 0 => {
            say(&format!("Here you go:\n```json\n{}\n```", TEAM.replace("\"ops\"", "\"manager\"")))
        }
        "nested" => say(&format!("```\n{TEAM}\n```")),
        "tool-once" if again == 0 => call("{\"city\": 42}"),
        "tool-once" => call("{\"city\": \"Paris\"}"),
        "tool-never" => call("{\"town\": \"Paris\"}"),
        other => say(&format!("no scenario {other}")),
    }
}

/// DeepSeek's refusal of `json_schema`, else the script.
struct DeepSeekLike(Script);

impl Respond for DeepSeekLike {
    fn respond(&self, r: &Request) -> ResponseTemplate {
        let body: Value = serde_json::from_slice(&r.body).unwrap();
        if body["response_format"]["type"] == "json_schema" && body["model"] != "native" {
            self.0.log.lock().unwrap().push(body);
            return ResponseTemplate::new(400).set_body_json(json!({"error": {
                "message": "This response_format type is unavailable now", "type": "invalid_request_error",
                "param": null, "code": "invalid_request_error"}}));
        }
        self.0.respond(r)
    }
}

pub struct Setup {
    _upstream: MockServer,
    pub proxy: Proxy,
    pub log: Log,
}

/// The upstream, and the proxy with `deepseek` (bundled profile:
/// emulated) and `v` (a native vendor) in front of it.
pub async fn setup() -> Setup {
    let upstream = MockServer::start().await;
    let log: Log = Arc::new(Mutex::new(Vec::new()));
    let script = Script { brain: Arc::new(brain), log: log.clone() };
    Mock::given(method("POST")).respond_with(DeepSeekLike(script)).mount(&upstream).await;
    let mut profiles = modelshim::provider::load_profiles(None).unwrap();
    let native = "name = \"native vendor\"\nbase_url = \"http://unused\"\n";
    profiles.insert("nativevendor".into(), modelshim::provider::Profile::parse("nativevendor", native).unwrap());
    let mut config = Config::default();
    for (name, profile) in [("deepseek", "deepseek"), ("v", "nativevendor")] {
        let pc = ProviderConfig {
            profile: Some(profile.into()),
            base_url: Some(format!("{}/v1", upstream.uri())),
            api_key_env: Some("MODELSHIM_STRUCTURED_TEST_NO_KEY".into()),
            ..Default::default()
        };
        config.providers.insert(name.into(), pc);
    }
    config.upstream.retries = Some(0);
    let proxy = serve_state(modelshim::server::AppState::new(&config, &profiles).unwrap()).await;
    Setup { _upstream: upstream, proxy, log }
}

fn ask(model: &str, format: Value) -> Value {
    json!({"model": model, "messages": [{"role": "user", "content": "Who wrote the first program?"}],
           "response_format": format})
}

async fn post(p: &Proxy, body: &Value) -> (u16, reqwest::header::HeaderMap, String) {
    let r = p.http.post(p.url("/v1/chat/completions")).json(body).send().await.unwrap();
    (r.status().as_u16(), r.headers().clone(), r.text().await.unwrap())
}

fn content(body: &Value) -> &str {
    body["choices"][0]["message"]["content"].as_str().unwrap_or_default()
}

#[tokio::test]
async fn fenced_json_comes_back_bare_and_byte_exact() {
    let s = setup().await;
    let (st, body) = s.proxy.chat(ask("deepseek/fenced", person_format(true))).await;
    assert_eq!(st, 200, "{body}");
    assert_eq!(content(&body), PERSON);
    assert_eq!(body["choices"][0]["finish_reason"], "stop");
    // Emulated: json_object and the schema in the prompt, never json_schema.
    let log = s.log.lock().unwrap();
    assert_eq!(log.len(), 1);
    assert_eq!(log[0]["response_format"], json!({"type": "json_object"}));
    assert!(log[0]["messages"][0]["content"].as_str().unwrap().contains("\"age\""));
}

#[tokio::test]
async fn prose_around_the_json_and_broken_syntax_are_taken_off() {
    let s = setup().await;
    let (st, body) = s.proxy.chat(ask("deepseek/prose", person_format(false))).await;
    assert_eq!((st, content(&body)), (200, PERSON), "{body}");
    let (st, body) = s.proxy.chat(ask("deepseek/trailing-comma", person_format(true))).await;
    assert_eq!(st, 200, "{body}");
    let got: Value = serde_json::from_str(content(&body)).unwrap();
    assert_eq!(got, json!({"name": "Ada Lovelace", "age": 36}));
    assert_eq!(s.log.lock().unwrap().len(), 2, "no re-ask for what a repair fixes");
}

#[tokio::test]
async fn an_invalid_answer_is_asked_again_hidden_and_its_usage_counted() {
    let s = setup().await;
    let (st, body) = s.proxy.chat(ask("deepseek/once", person_format(true))).await;
    assert_eq!((st, content(&body)), (200, PERSON), "{body}");
    // Two upstream answers of 1 + 1 tokens each.
    assert_eq!(body["usage"]["total_tokens"], 4, "{body}");
    let log = s.log.lock().unwrap();
    assert_eq!(log.len(), 2);
    let last = log[1]["messages"].as_array().unwrap();
    let feedback = last.last().unwrap()["content"].as_str().unwrap();
    assert!(feedback.contains("/age") && feedback.contains("thirty-six"), "{feedback}");
    assert_eq!(last[last.len() - 2]["role"], "assistant");
}

#[tokio::test]
async fn a_streamed_answer_is_held_then_streamed_as_valid_json() {
    let s = setup().await;
    let mut req = ask("deepseek/once", person_format(true));
    req["stream_options"] = json!({"include_usage": true});
    let (st, events) = s.proxy.chat_stream(req).await;
    assert_eq!(st, 200);
    assert_eq!(events.last(), Some(&json!("[DONE]")));
    let whole = assemble(&events);
    assert_eq!(whole["content"], PERSON, "{events:?}");
    assert_eq!(whole["finish"], "stop");
    assert_eq!(whole["usage"]["total_tokens"], 4, "{events:?}");
    // The fenced case streams without its fences.
    let (_, events) = s.proxy.chat_stream(ask("deepseek/fenced", person_format(true))).await;
    assert_eq!(assemble(&events)["content"], PERSON);
}

#[tokio::test]
async fn never_valid_is_a_422_naming_structured_output_streamed_or_not() {
    let s = setup().await;
    let (st, body) = s.proxy.chat(ask("deepseek/never", person_format(true))).await;
    assert_eq!(st, 422, "{body}");
    assert_eq!(body["error"]["code"], "structured_output_invalid");
    let msg = body["error"]["message"].as_str().unwrap();
    assert!(msg.contains("\"age\" is a required property"), "{msg}");
    assert_eq!(s.log.lock().unwrap().len(), 2, "one hidden re-ask (structured_retries = 1)");
    // Held, so a stream fails before its first byte with the same status.
    let (st, events) = s.proxy.chat_stream(ask("deepseek/never", person_format(true))).await;
    assert_eq!(st, 422, "{events:?}");
}

#[tokio::test]
async fn not_strict_passes_the_best_effort_with_a_warning_header() {
    let s = setup().await;
    let (st, headers, text) = post(&s.proxy, &ask("deepseek/never", person_format(false))).await;
    assert_eq!(st, 200, "{text}");
    let body: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(content(&body), "{\"name\": \"Ada Lovelace\"}");
    let warning = headers.get("x-modelshim-warning").expect("warning header").to_str().unwrap();
    assert!(warning.contains("did not validate"), "{warning}");
    // A valid answer has none.
    let (_, headers, _) = post(&s.proxy, &ask("deepseek/fenced", person_format(false))).await;
    assert!(headers.get("x-modelshim-warning").is_none());
}

#[tokio::test]
async fn nested_schema_with_ref_any_of_and_enum() {
    let s = setup().await;
    let (st, body) = s.proxy.chat(ask("deepseek/nested", nested_format())).await;
    assert_eq!((st, content(&body)), (200, TEAM), "{body}");
    let log = s.log.lock().unwrap();
    let feedback = log[1]["messages"].as_array().unwrap().last().unwrap()["content"].as_str().unwrap().to_string();
    assert!(feedback.contains("/members/0/role"), "{feedback}");
}

#[tokio::test]
async fn strict_tool_arguments_wrong_once_are_asked_again() {
    let s = setup().await;
    for stream in [false, true] {
        let req = json!({"model": "deepseek/tool-once", "stream": stream, "tools": [weather_tool(true)],
                         "messages": [{"role": "user", "content": "Weather in Paris?"}]});
        let (st, _, text) = post(&s.proxy, &req).await;
        assert_eq!(st, 200, "{text}");
        let msg = if stream {
            assemble(&parse_sse(&text))
        } else {
            serde_json::from_str::<Value>(&text).unwrap()["choices"][0]["message"].clone()
        };
        let args = if stream {
            msg["calls"][0]["arguments"].clone()
        } else {
            serde_json::from_str(msg["tool_calls"][0]["function"]["arguments"].as_str().unwrap()).unwrap()
        };
        assert_eq!(args, json!({"city": "Paris"}), "{msg}");
    }
    let log = s.log.lock().unwrap();
    assert_eq!(log.len(), 4);
    let retry = log[1]["messages"].as_array().unwrap();
    let tool = retry.iter().find(|m| m["role"] == "tool").unwrap();
    assert!(tool["content"].as_str().unwrap().contains("/city"), "{tool}");
}

#[tokio::test]
async fn strict_tool_never_valid_is_the_same_error_and_loose_tools_pass() {
    let s = setup().await;
    let req = |strict| {
        json!({"model": "deepseek/tool-never", "tools": [weather_tool(strict)],
               "messages": [{"role": "user", "content": "Weather in Paris?"}]})
    };
    let (st, body) = s.proxy.chat(req(true)).await;
    assert_eq!(st, 422, "{body}");
    assert_eq!(body["error"]["code"], "structured_output_invalid");
    assert!(body["error"]["message"].as_str().unwrap().contains("get_weather"), "{body}");
    // Not strict: not checked, as the model gave it.
    let (st, body) = s.proxy.chat(req(false)).await;
    assert_eq!(st, 200, "{body}");
    assert!(body["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"].as_str().unwrap().contains("town"));
}

#[tokio::test]
async fn a_native_vendor_gets_json_schema_and_is_validated_when_strict() {
    let s = setup().await;
    // Not strict on a native vendor: sent as json_schema, answered as given.
    let (st, body) = s.proxy.chat(ask("v/native", person_format(false))).await;
    assert_eq!(st, 200, "{body}");
    assert_eq!(content(&body), "no scenario native");
    assert_eq!(s.log.lock().unwrap()[0]["response_format"]["type"], "json_schema");
    // Strict: validated (the answer is no JSON at all, twice).
    let (st, body) = s.proxy.chat(ask("v/native", person_format(true))).await;
    assert_eq!(st, 422, "{body}");
    assert_eq!(s.log.lock().unwrap().len(), 3);
}

#[tokio::test]
async fn the_responses_front_text_format_takes_the_same_guarantee() {
    let s = setup().await;
    let f = person_format(true)["json_schema"].clone();
    let mut format = f.as_object().unwrap().clone();
    format.insert("type".into(), json!("json_schema"));
    let req = json!({"model": "deepseek/once", "input": "Who wrote the first program?", "store": false,
                     "text": {"format": format}});
    let r = s.proxy.http.post(s.proxy.url("/v1/responses")).json(&req).send().await.unwrap();
    assert_eq!(r.status(), 200);
    let body: Value = r.json().await.unwrap();
    let text =
        body["output"].as_array().unwrap().iter().find(|o| o["type"] == "message").unwrap()["content"][0]["text"]
            .clone();
    assert_eq!(text, PERSON, "{body}");
    let mut never = req.clone();
    never["model"] = json!("deepseek/never");
    let r = s.proxy.http.post(s.proxy.url("/v1/responses")).json(&never).send().await.unwrap();
    assert_eq!(r.status(), 422);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["error"]["code"], "structured_output_invalid", "{body}");
}

#[tokio::test]
async fn the_messages_front_forced_tool_input_is_validated() {
    let s = setup().await;
    let req = |model: &str| {
        json!({"model": model, "max_tokens": 100,
               "messages": [{"role": "user", "content": "Weather in Paris?"}],
               "tools": [{"name": "get_weather", "input_schema": weather_tool(false)["function"]["parameters"]}],
               "tool_choice": {"type": "tool", "name": "get_weather"}})
    };
    let post = |body: Value| {
        let p = &s.proxy;
        async move {
            let r = p
                .http
                .post(p.url("/v1/messages"))
                .header("anthropic-version", "2023-06-01")
                .json(&body)
                .send()
                .await
                .unwrap();
            let st = r.status().as_u16();
            let headers = r.headers().clone();
            (st, headers, r.json::<Value>().await.unwrap())
        }
    };
    let (st, _, body) = post(req("deepseek/tool-once")).await;
    assert_eq!(st, 200, "{body}");
    let tool_use = body["content"].as_array().unwrap().iter().find(|b| b["type"] == "tool_use").unwrap().clone();
    assert_eq!(tool_use["input"], json!({"city": "Paris"}), "{body}");
    // The mark is modelshim's: never sent upstream.
    assert!(s.log.lock().unwrap().iter().all(|b| b.get("modelshim_validate_tool").is_none()));
    // Forced but not strict: the best effort with a warning; strict: an error.
    let (st, headers, body) = post(req("deepseek/tool-never")).await;
    assert_eq!(st, 200, "{body}");
    assert!(headers.get("x-modelshim-warning").is_some());
    let mut strict = req("deepseek/tool-never");
    strict["tools"][0]["strict"] = json!(true);
    let (st, _, body) = post(strict).await;
    assert_eq!(st, 422, "{body}");
    assert_eq!(body["type"], "error");
}
// ---- real clients, pinned (tests/it/clients.rs) ----

#[tokio::test(flavor = "multi_thread")]
async fn openai_sdk_parse_and_streamed_create() {
    let s = setup().await;
    let checks = ["sdk_parse", "sdk_parse_nested", "sdk_stream", "sdk_never", "sdk_strict_tool"];
    run_script(&s.proxy, Runner::Clients, "structured_client.py", &checks).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn langchain_and_pydantic_ai_structured() {
    let s = setup().await;
    run_script(&s.proxy, Runner::Clients, "structured_client.py", &["langchain", "pydantic_ai"]).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn instructor_structured() {
    let s = setup().await;
    run_script(&s.proxy, Runner::LlamaIndex, "structured_client.py", &["instructor"]).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn vercel_ai_generate_and_stream_object() {
    let s = setup().await;
    for major in [6, 7] {
        run_script(&s.proxy, Runner::Node(major), "structured_ai.mjs", &["generate_object", "stream_object"]).await;
    }
}
