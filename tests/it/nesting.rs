//! Deep nesting from a model or a client is text or a 400, never a crash
//! (issue 25, item 1). 30,000 nested brackets inside a call region used to
//! overflow the stack of the JSON repair and abort the whole process. Every
//! check runs on a test thread, whose 2 MiB stack is that of a serving
//! thread.

use crate::common;

use std::sync::Arc;

use common::*;
use modelshim::toolcall::{Event, Extractor, FormatSet, ToolIndex, extract};
use proptest::prelude::*;
use serde_json::{Value, json};
use wiremock::matchers::method;
use wiremock::{Mock, MockServer, ResponseTemplate};

/// Call regions of the formats, with `@` where the arguments go.
const WRAPPERS: &[&str] = &[
    "<tool_call>{\"name\": \"f\", \"arguments\": @}</tool_call>",
    "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"x\": @}}\n</tool_call>",
    "[f(x=@)]",
    "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>f\n```json\n@\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
    "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>f<｜tool▁sep｜>@<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
    "<|tool_calls_section_begin|><|tool_call_begin|>functions.f:0<|tool_call_argument_begin|>@<|tool_call_end|><|tool_calls_section_end|>",
    "[TOOL_CALLS][{\"name\": \"f\", \"arguments\": @}]",
    "```json\n{\"name\": \"f\", \"arguments\": @}\n```",
    "{\"name\": \"f\", \"parameters\": @}",
    "<function=f>\n<parameter=x>\n@\n</parameter>\n</function>",
    "<tool_call>f<arg_key>x</arg_key><arg_value>@</arg_value></tool_call>",
    "<minimax:tool_call>\n<invoke name=\"f\">\n<parameter name=\"x\">@</parameter>\n</invoke>\n</minimax:tool_call>",
    "Action: f\nAction Input: @",
    "<|python_tag|>{\"name\": \"f\", \"parameters\": @}",
    "<start_function_call>call:f{x:@}<end_function_call>",
    "<|action_start|><|plugin|>\n{\"name\": \"f\", \"parameters\": @}<|action_end|>",
];

const OPENERS: &[&str] = &["[", "{", "{\"a\":", "(", "[{\"b\": ", "{'a': ["];

fn tools(typed: bool) -> Arc<ToolIndex> {
    let x = if typed { json!({"type": "object"}) } else { json!({}) };
    Arc::new(ToolIndex::from_openai(&[json!({"type": "function", "function": {"name": "f",
        "parameters": {"type": "object", "properties": {"x": x}}}})]))
}

/// Every call that comes out has JSON-object arguments.
fn check(events: &[Event]) {
    for e in events {
        if let Event::Call(c) = e {
            let v: Value = serde_json::from_str(&c.arguments)
                .unwrap_or_else(|e| panic!("{} wrote arguments that are no JSON: {e}", c.format));
            assert!(v.is_object(), "{}", c.arguments);
        }
    }
}

fn deep(opener: &str, depth: usize, closed: bool) -> String {
    let mut s = opener.repeat(depth);
    if closed {
        let closers: String = opener
            .chars()
            .rev()
            .filter_map(|c| match c {
                '[' => Some(']'),
                '{' => Some('}'),
                '(' => Some(')'),
                _ => None,
            })
            .collect();
        s.push('1');
        s.push_str(&closers.repeat(depth));
    }
    s
}

#[test]
fn thirty_thousand_brackets_in_every_format_are_text() {
    let all = Arc::new(FormatSet::all());
    for wrapper in WRAPPERS {
        for opener in ["[", "{\"a\":"] {
            for closed in [false, true] {
                let text = format!("Sure. {}", wrapper.replace('@', &deep(opener, 30_000, closed)));
                for typed in [closed] {
                    let x = extract(&text, &all, &tools(typed));
                    for c in &x.calls {
                        let parsed = serde_json::from_str::<Value>(&c.arguments);
                        assert!(parsed.is_ok(), "{} from {wrapper} {opener} {closed}: {parsed:?}", c.format);
                    }
                }
            }
        }
    }
}

/// Each format on its own too (auto mode tries them in its own order), a
/// depth that already overflowed a serving thread's stack.
#[test]
fn every_named_format_survives_deep_nesting() {
    let names = FormatSet::all().names().iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let body = deep("{'a': [", 3_000, false);
    for name in names {
        let set = Arc::new(FormatSet::named(&[name.as_str()]).unwrap());
        for wrapper in WRAPPERS {
            let text = wrapper.replace('@', &body);
            let _ = extract(&text, &set, &tools(true));
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// Any wrapper, opener, depth and chunking: never a crash, and what
    /// comes out as a call has object arguments.
    #[test]
    fn nesting_in_any_pieces(
        wrapper in prop::sample::select(WRAPPERS),
        opener in prop::sample::select(OPENERS),
        depth in prop_oneof![1usize..200, 5_000usize..40_000],
        closed in any::<bool>(),
        cuts in prop::collection::vec(1usize..4096, 1..16),
    ) {
        let text = wrapper.replace('@', &deep(opener, depth, closed));
        let mut ex = Extractor::new(Arc::new(FormatSet::all()), tools(true));
        let mut out = Vec::new();
        let mut rest = text.as_str();
        let mut i = 0;
        while !rest.is_empty() {
            let mut n = cuts[i % cuts.len()].min(rest.len());
            while !rest.is_char_boundary(n) {
                n += 1;
            }
            ex.feed(&rest[..n], &mut out);
            rest = &rest[n..];
            i += 1;
        }
        ex.finish(&mut out);
        check(&out);
    }
}

/// Through the proxy: an upstream writing the brackets gets its answer
/// through as text (streamed and not), and the proxy keeps serving.
#[tokio::test]
async fn a_model_writing_deep_brackets_does_not_take_the_proxy_down() {
    let upstream = MockServer::start().await;
    let text = format!("<tool_call>{{\"name\": \"f\", \"arguments\": {}</tool_call>", "[".repeat(30_000));
    Mock::given(method("POST"))
        .respond_with(
            ResponseTemplate::new(200).set_body_json(completion(json!({"role": "assistant", "content": text}), "stop")),
        )
        .mount(&upstream)
        .await;
    let p = proxy("", &upstream.uri()).await;
    let body = json!({"model": "v/m", "messages": [{"role": "user", "content": "hi"}],
        "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]});
    let (status, answer) = p.chat(body.clone()).await;
    assert_eq!(status, 200, "{answer}");
    assert!(answer["choices"][0]["message"]["content"].as_str().unwrap_or("").contains("[[[["), "{answer}");
    let (status, events) = p.chat_stream(body).await;
    assert_eq!(status, 200);
    let got = assemble(&events);
    assert!(got["content"].as_str().unwrap_or("").contains("[[[["), "{got}");
}

/// A client body nested past serde_json's limit is a 400.
#[tokio::test]
async fn a_deeply_nested_request_is_a_400() {
    let upstream = MockServer::start().await;
    let p = proxy("", &upstream.uri()).await;
    let nested = format!("{}{}", "[".repeat(30_000), "]".repeat(30_000));
    for path in ["/v1/chat/completions", "/v1/responses"] {
        let body =
            format!(r#"{{"model": "v/m", "messages": [{{"role": "user", "content": {nested}}}], "input": {nested}}}"#);
        let r = p.http.post(p.url(path)).header("content-type", "application/json").body(body).send().await.unwrap();
        assert_eq!(r.status(), 400, "{path}");
    }
}

/// Where a client can nest: message content, a tool's schema, a call's
/// arguments, Responses input; `@` is the nested value.
const REQUEST_SHAPES: &[&str] = &[
    r#"{"model": "v/m", "messages": [{"role": "user", "content": @}]}"#,
    r#"{"model": "v/m", "messages": [{"role": "user", "content": "hi"}], "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {"x": @}}}}]}"#,
    r#"{"model": "v/m", "messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": @}}]}, {"role": "tool", "tool_call_id": "c1", "content": @}]}"#,
    r#"{"model": "v/m", "messages": [{"role": "user", "content": "hi"}], "response_format": {"type": "json_schema", "json_schema": {"name": "s", "schema": @}}}"#,
    r#"{"model": "v/m", "input": @}"#,
    r#"{"model": "v/m", "input": [{"type": "message", "role": "user", "content": @}], "tools": [{"type": "function", "name": "f", "parameters": @}]}"#,
];

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// Random nesting anywhere in a chat or Responses body: an HTTP answer
    /// (200 or a 4xx), never a dropped connection or a crash.
    #[test]
    fn nested_request_bodies_get_an_answer(
        shape in prop::sample::select(REQUEST_SHAPES),
        opener in prop::sample::select(&["[", "{\"a\":", "[{\"type\": \"object\", \"properties\": {\"p\": "][..]),
        depth in prop_oneof![1usize..140, 1_000usize..40_000],
        closed in any::<bool>(),
    ) {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async {
            let upstream = MockServer::start().await;
            Mock::given(method("POST"))
                .respond_with(ResponseTemplate::new(200).set_body_json(completion(json!({"role": "assistant", "content": "ok"}), "stop")))
                .mount(&upstream)
                .await;
            let p = proxy("", &upstream.uri()).await;
            let body = shape.replace('@', &deep(opener, depth, closed));
            let path = if shape.contains("\"input\"") { "/v1/responses" } else { "/v1/chat/completions" };
            let r = p.http.post(p.url(path)).header("content-type", "application/json").body(body).send().await;
            let r = r.expect("the proxy answers");
            let status = r.status().as_u16();
            assert!(status == 200 || (400..500).contains(&status), "{status}");
            // And it still serves.
            let (ok, _) = p.chat(json!({"model": "v/m", "messages": [{"role": "user", "content": "hi"}]})).await;
            assert_eq!(ok, 200);
        });
    }
}
