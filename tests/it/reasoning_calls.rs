//! Calls written inside the reasoning (issue #28): DeepSeek writes its DSML
//! block (fullwidth or ASCII bars) into `reasoning_content` and stops with no
//! content; Kimi's thinking models do the like with their section tokens.
//! With `[tools] from_reasoning`, a complete block there becomes the turn's
//! tool call when the answer made none, the rest of the reasoning kept,
//! streamed (in small pieces) and not.

use crate::common;

use common::*;
use serde_json::{Value, json};
use wiremock::matchers::{body_partial_json, method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

const DEEPSEEK: &str = "[tools]\nfrom_reasoning = [\"deepseek_v32_dsml\", \"deepseek_v4_dsml\"]\n";
const KIMI: &str = "[tools]\nfrom_reasoning = [\"kimi_k2\"]\n";

fn request() -> Value {
    json!({"model": "v/m", "messages": [{"role": "user", "content": "Weather in Paris?"}],
           "tools": [{"type": "function", "function": {"name": "get_weather",
                      "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]})
}

/// An upstream whose answer is all reasoning: streamed in 5-byte pieces, or whole.
async fn upstream(reasoning: &str, content: Option<&str>) -> MockServer {
    let mut chunks = vec![chunk(json!({"role": "assistant"}), None)];
    let chars: Vec<char> = reasoning.chars().collect();
    for piece in chars.chunks(5) {
        chunks.push(chunk(json!({"reasoning_content": piece.iter().collect::<String>()}), None));
    }
    if let Some(c) = content {
        chunks.push(chunk(json!({"content": c}), None));
    }
    chunks.push(chunk(json!({}), Some("stop")));
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .and(body_partial_json(json!({"stream": true})))
        .respond_with(ResponseTemplate::new(200).set_body_raw(sse_body(&chunks), "text/event-stream"))
        .with_priority(1)
        .mount(&server)
        .await;
    let msg = json!({"role": "assistant", "content": content, "reasoning_content": reasoning});
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(ResponseTemplate::new(200).set_body_json(completion(msg, "stop")))
        .with_priority(5)
        .mount(&server)
        .await;
    server
}

/// The client's view, streamed and not (they must agree), generated ids dropped.
async fn views(profile: &str, reasoning: &str, content: Option<&str>) -> Value {
    let up = upstream(reasoning, content).await;
    let p = proxy(profile, &up.uri()).await;
    let (status, body) = p.chat(request()).await;
    assert_eq!(status, 200, "{body}");
    let whole = without_generated_ids(message_view(&body));
    let (status, events) = p.chat_stream(request()).await;
    assert_eq!(status, 200);
    let streamed = without_generated_ids(assemble(&events));
    assert_eq!(streamed["calls"], whole["calls"], "streamed and whole calls differ");
    assert_eq!(streamed["content"], whole["content"]);
    assert_eq!(streamed["reasoning"], whole["reasoning"]);
    assert_eq!(streamed["finish"], whole["finish"]);
    whole
}

fn paris(id: Value) -> Value {
    json!([{"id": id, "name": "get_weather", "arguments": {"city": "Paris"}}])
}

#[tokio::test]
async fn deepseek_dsml_in_reasoning_fullwidth_bars() {
    let r = "The user wants the weather; I will call the tool.\n\n<｜DSML｜function_calls>\n<｜DSML｜invoke name=\"get_weather\">\n<｜DSML｜parameter name=\"city\" string=\"true\">Paris</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜function_calls>";
    let v = views(DEEPSEEK, r, None).await;
    assert_eq!(v["calls"], paris(json!("<generated>")), "{v}");
    assert_eq!(v["finish"], "tool_calls");
    assert_eq!(v["content"], "");
    assert_eq!(v["reasoning"].as_str().unwrap().trim(), "The user wants the weather; I will call the tool.");
}

#[tokio::test]
async fn deepseek_dsml_in_reasoning_ascii_bars_v4() {
    let r = "Need the weather.<|DSML|tool_calls>\n<|DSML|invoke name=\"get_weather\">\n<|DSML|parameter name=\"city\" string=\"true\">Paris</|DSML|parameter>\n</|DSML|invoke>\n</|DSML|tool_calls>\nDone thinking.";
    let v = views(DEEPSEEK, r, None).await;
    assert_eq!(v["calls"], paris(json!("<generated>")), "{v}");
    assert_eq!(v["finish"], "tool_calls");
    let kept = v["reasoning"].as_str().unwrap();
    assert!(kept.starts_with("Need the weather.") && kept.trim_end().ends_with("Done thinking."), "{kept:?}");
    assert!(!kept.contains("DSML"), "{kept:?}");
}

#[tokio::test]
async fn kimi_section_in_reasoning() {
    let r = "Let me look it up. <|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>{\"city\": \"Paris\"}<|tool_call_end|><|tool_calls_section_end|>";
    let v = views(KIMI, r, None).await;
    assert_eq!(v["calls"], paris(json!("functions.get_weather:0")), "{v}");
    assert_eq!(v["finish"], "tool_calls");
    assert_eq!(v["reasoning"].as_str().unwrap().trim(), "Let me look it up.");
}

/// Reasoning that only talks about the tool stays reasoning: no call.
#[tokio::test]
async fn reasoning_that_mentions_a_tool_stays_reasoning() {
    let r = "I could call get_weather with <｜DSML｜function_calls> and an invoke name=\"get_weather\", but the user only said hello.";
    let v = views(DEEPSEEK, r, Some("Hello!")).await;
    assert_eq!(v["calls"], json!([]), "{v}");
    assert_eq!(v["finish"], "stop");
    assert_eq!(v["reasoning"], r);
    assert_eq!(v["content"], "Hello!");
}

/// An answer that made its own call keeps it alone; without the profile key
/// the reasoning is not read at all.
#[tokio::test]
async fn answer_calls_win_and_the_switch_is_off_by_default() {
    let block = "<｜DSML｜function_calls>\n<｜DSML｜invoke name=\"get_weather\">\n<｜DSML｜parameter name=\"city\" string=\"true\">Rome</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜function_calls>";
    let answer = "<tool_call>{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}</tool_call>";
    let v = views(DEEPSEEK, &format!("Thinking. {block}"), Some(answer)).await;
    assert_eq!(v["calls"], paris(json!("<generated>")), "{v}");
    let v = views("", &format!("Thinking. {block}"), None).await;
    assert_eq!(v["calls"], json!([]), "{v}");
    assert_eq!(v["finish"], "stop");
    assert_eq!(v["reasoning"], format!("Thinking. {block}"));
}
