//! Split invariance on the proxy path: however the upstream's stream is cut —
//! into content deltas of any size, or into TCP reads at any byte — the client
//! assembles the same answer.

use crate::common;

use std::sync::Arc;

use axum::body::{Body, Bytes};
use common::*;
use modelshim::openai::{Chunk, Completion};
use modelshim::stream::{Assembler, Data, Normalizer, completion_to_chunk, normalize::Settings};
use modelshim::toolcall::{FormatSet, ToolIndex};
use proptest::prelude::*;
use serde_json::{Value, json};

/// Model output with a reasoning block, prose, a text-embedded call and
/// multi-byte characters.
const TEXT: &str = "<think>Need the weather — both cities.</think>\n\nChecking Paris and 東京 now.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"東京\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>";
/// Native call arguments streamed in fragments.
const NATIVE_ARGS: &str = "{\"city\": \"Zürich\", \"unit\": \"celsius\"}";

fn settings() -> Settings {
    let tools = json!([{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]);
    Settings {
        formats: Arc::new(FormatSet::all()),
        tools: Arc::new(ToolIndex::from_openai(tools.as_array().unwrap())),
        ..Default::default()
    }
}

/// Cuts `s` at the given char-boundary fractions.
fn pieces<'a>(s: &'a str, cuts: &[prop::sample::Index]) -> Vec<&'a str> {
    let bounds: Vec<usize> = s.char_indices().map(|(i, _)| i).collect();
    let mut points: Vec<usize> = cuts.iter().map(|c| bounds[c.index(bounds.len())]).filter(|p| *p > 0).collect();
    points.push(s.len());
    points.sort_unstable();
    points.dedup();
    let mut out = Vec::new();
    let mut last = 0;
    for p in points {
        out.push(&s[last..p]);
        last = p;
    }
    out
}

/// Upstream chunks: the text as content deltas, then a native call whose
/// arguments arrive in pieces, then the finish.
fn upstream(text: &[&str], args: &[&str]) -> Vec<Value> {
    let mut v: Vec<Value> = text.iter().map(|t| chunk(json!({"content": t}), None)).collect();
    v.push(chunk(json!({"tool_calls": [{"index": 0, "id": "n1", "type": "function", "function": {"name": "get_weather", "arguments": ""}}]}), None));
    v.extend(args.iter().map(|a| chunk(json!({"tool_calls": [{"index": 0, "function": {"arguments": a}}]}), None)));
    v.push(chunk(json!({}), Some("tool_calls")));
    v
}

/// Runs chunks through the normalizer and returns the client's view.
fn client_view(chunks: &[Value]) -> Value {
    let mut norm = Normalizer::new(settings());
    let mut out = Vec::new();
    for c in chunks {
        norm.push(serde_json::from_value::<Chunk>(c.clone()).unwrap(), &mut out);
    }
    norm.finish(&mut out);
    let events: Vec<Value> = out.iter().map(|c| serde_json::to_value(c).unwrap()).collect();
    let streamed = without_generated_ids(assemble(&events));
    // The assembled non-streamed body agrees with the streamed view.
    let mut a = Assembler::default();
    for c in out {
        a.push(c);
    }
    let mut whole = without_generated_ids(message_view(&a.finish()));
    whole["usage"] = Value::Null;
    assert_eq!(whole, streamed);
    streamed
}

/// The chunks the client is sent, as JSON; with `fast`, every payload the
/// normalizer forwards ([`Normalizer::forward`]) goes out as it came.
fn wire(chunks: &[Value], fast: bool, settings: Settings) -> (Vec<Value>, usize) {
    let mut norm = Normalizer::new(settings);
    let (mut out, mut sent, mut forwarded) = (Vec::new(), Vec::new(), 0);
    for c in chunks {
        let mut payload = Data::from(c.to_string());
        if fast {
            match norm.forward(payload) {
                Ok(wire) => {
                    sent.push(serde_json::from_str(&wire.text()).unwrap());
                    forwarded += 1;
                    continue;
                }
                Err(back) => payload = back,
            }
        }
        norm.push(serde_json::from_slice::<Chunk>(payload.bytes()).unwrap(), &mut out);
        sent.extend(out.drain(..).map(|c| serde_json::to_value(c).unwrap()));
    }
    norm.finish(&mut out);
    sent.extend(out.drain(..).map(|c| serde_json::to_value(c).unwrap()));
    for c in &mut sent {
        for tc in c["choices"][0]["delta"]["tool_calls"].as_array_mut().into_iter().flatten() {
            if tc["id"].as_str().is_some_and(|i| i.starts_with("call_")) {
                tc["id"] = json!("<generated>");
            }
        }
    }
    (sent, forwarded)
}

/// Upstream chunks of other shapes around the text: extra fields, a second
/// id, a role repeated, reasoning fields, usage.
fn odd_chunks(text: &[&str]) -> Vec<Value> {
    let mut v = Vec::new();
    for (i, t) in text.iter().enumerate() {
        let mut c = chunk(json!({"content": t}), None);
        match i % 7 {
            // The first chunk saying the role is forwarded as it is, the others not.
            0 => c["choices"][0]["delta"]["role"] = json!("assistant"),
            1 => c["system_fingerprint"] = json!("fp_1"),
            2 => c["choices"][0]["logprobs"] = Value::Null,
            3 if i > 20 => c["id"] = json!("other"),
            4 => c["choices"][0]["delta"]["reasoning_content"] = Value::Null,
            5 => c["choices"][0]["delta"]["role"] = json!("assistant"),
            6 => c["usage"] = Value::Null,
            _ => {}
        }
        v.push(c);
    }
    v.push(chunk(json!({}), Some("stop")));
    v
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    /// The fast path sends exactly the chunks the full path would, however
    /// the text is cut, with tool recovery on and off.
    #[test]
    fn forwarding_changes_no_chunk(text_cuts in prop::collection::vec(any::<prop::sample::Index>(), 0..60)) {
        let prose = "Plain prose, the common case: tokens like these, \"quoted\", 東京 and é. Then <b>tags</b> [x] {y}\n\nAnd a <thi";
        for text in [TEXT, prose] {
            for tools in [true, false] {
                let settings = || if tools { settings() } else { Settings::default() };
                for chunks in [upstream(&pieces(text, &text_cuts), &[NATIVE_ARGS]), odd_chunks(&pieces(text, &text_cuts))] {
                    let (slow, _) = wire(&chunks, false, settings());
                    let (fast, _) = wire(&chunks, true, settings());
                    prop_assert_eq!(fast, slow);
                }
            }
        }
    }

    #[test]
    fn any_delta_split_gives_the_same_answer(
        text_cuts in prop::collection::vec(any::<prop::sample::Index>(), 0..40),
        arg_cuts in prop::collection::vec(any::<prop::sample::Index>(), 0..12),
    ) {
        let whole = client_view(&upstream(&[TEXT], &[NATIVE_ARGS]));
        let split = client_view(&upstream(&pieces(TEXT, &text_cuts), &pieces(NATIVE_ARGS, &arg_cuts)));
        prop_assert_eq!(split, whole);
    }
}

/// A non-streamed answer the way the proxy sends it without the fast path:
/// normalized as one chunk, then assembled.
fn whole_normalized(body: &Value, settings: Settings) -> Value {
    let c: Completion = serde_json::from_value(body.clone()).unwrap();
    let mut norm = Normalizer::new(settings);
    let mut out = Vec::new();
    norm.push(completion_to_chunk(c), &mut out);
    norm.finish(&mut out);
    let mut a = Assembler::default();
    for c in out {
        a.push(c);
    }
    a.finish()
}

/// Whether the fast path sends `body` as it came.
fn whole_as_is(body: &Value, settings: Settings) -> bool {
    Normalizer::new(settings).whole_as_is(body.to_string().as_bytes()).is_some()
}

/// Pieces of model text: prose, whitespace, and the start of markup.
const PIECES: &[&str] = &[
    "word",
    " ",
    "  ",
    "\n",
    "東京",
    "é",
    "\"",
    "<tool_call>",
    "{\"name\": \"get_weather\", \"arguments\": {}}",
    "</tool_call>",
    "<think>",
    "</think>",
    "[TOOL_CALLS]",
    "get_weather(",
    "```json\n",
    "<",
    "{",
];

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    /// A whole answer sent as it came is the answer the full path would send.
    #[test]
    fn whole_answers_sent_as_is_are_unchanged(
        words in prop::collection::vec(prop::sample::select(PIECES), 0..12),
        finish in prop::sample::select(&[Some("stop"), Some("length"), Some("tool_calls"), Some("eos"), Some("sensitive"), None][..]),
        shape in 0u16..512,
        tools in any::<bool>(),
    ) {
        let mut body = json!({
            "id": if shape & 1 == 0 { "chatcmpl-1" } else { "" },
            "object": "chat.completion",
            "created": if shape & 2 == 0 { 1_700_000_000 } else { 0 },
            "model": "m",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": words.concat()}, "finish_reason": finish}],
        });
        if shape & 4 != 0 { body["system_fingerprint"] = json!("fp_1"); }
        if shape & 8 != 0 { body["choices"][0]["logprobs"] = Value::Null; body["choices"][0]["message"]["refusal"] = Value::Null; }
        if shape & 16 != 0 { body["usage"] = if shape & 32 != 0 { Value::Null } else { json!({"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3}) }; }
        if shape & 32 != 0 && shape & 16 == 0 { body["choices"][0]["message"]["reasoning_content"] = json!("hmm"); }
        // Keys the full path drops or adds.
        if shape & 64 != 0 { body["choices"][0]["message"]["tool_calls"] = Value::Null; body["choices"][0]["message"]["reasoning_content"] = Value::Null; }
        if shape & 128 != 0 { body["choices"][0].as_object_mut().unwrap().remove("index"); }
        if shape & 256 != 0 { body["choices"][0]["message"].as_object_mut().unwrap().remove("role"); }
        let settings = || if tools { settings() } else { Settings::default() };
        if whole_as_is(&body, settings()) {
            prop_assert_eq!(whole_normalized(&body, settings()), body);
        }
    }
}

#[test]
fn plain_whole_answers_are_sent_as_is() {
    let text: String = (0..64).map(|i| format!("word{i} ")).collect();
    let body = json!({
        "id": "chatcmpl-1", "object": "chat.completion", "created": 1_700_000_000, "model": "m",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "logprobs": null, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 5, "completion_tokens": 64, "total_tokens": 69},
        "system_fingerprint": "fp_1",
    });
    // Recovery off (native tool calls), as most providers run.
    let native = || Settings::default();
    assert!(whole_as_is(&body, native()));
    assert_eq!(whole_normalized(&body, native()), body);
    // What the normalizer changes takes the full path: a call in the text,
    // reasoning, a vendor finish reason, a missing id.
    let mut call = body.clone();
    call["choices"][0]["message"]["content"] =
        json!("<tool_call>{\"name\": \"get_weather\", \"arguments\": {}}</tool_call>");
    let mut think = body.clone();
    think["choices"][0]["message"]["content"] = json!("<think>hmm</think>Hello");
    let mut vendor = body.clone();
    vendor["choices"][0]["finish_reason"] = json!("eos");
    let mut no_id = body.clone();
    no_id["id"] = json!("");
    for changed in [call, think, vendor, no_id] {
        assert!(!whole_as_is(&changed, settings()), "{changed}");
        assert_ne!(whole_normalized(&changed, settings()), changed);
    }
}

#[test]
fn plain_content_deltas_are_forwarded() {
    let words: Vec<String> = (0..40).map(|i| format!(" word{i}")).collect();
    let chunks: Vec<Value> = words.iter().map(|w| chunk(json!({"content": w}), None)).collect();
    let no_tools = Settings::default();
    let (_, forwarded) = wire(&chunks, true, no_tools);
    // All but the first (which opens the response and gets its role).
    assert_eq!(forwarded, 39);
    // A first chunk that says the role itself (Ollama's do) goes as it came.
    let mut said: Vec<Value> = (0..40).map(|i| chunk(json!({"content": format!("w{i}")}), None)).collect();
    said[0]["choices"][0]["delta"]["role"] = json!("assistant");
    let no_tools = Settings::default();
    let (sent, forwarded) = wire(&said, true, no_tools);
    assert_eq!(forwarded, 40);
    assert_eq!(sent[0]["choices"][0]["delta"]["role"], "assistant");
    assert_eq!(sent[1]["choices"][0]["delta"].get("role"), None);
    // Words that end in a space (the space is held until the next word shows
    // no call follows) are forwarded too, the space moved to the next chunk.
    let trailing: Vec<Value> = (0..40).map(|i| chunk(json!({"content": format!("word{i} ")}), None)).collect();
    let no_tools = Settings::default();
    let (sent, forwarded) = wire(&trailing, true, no_tools);
    assert_eq!(forwarded, 39);
    assert_eq!(sent[1]["choices"][0]["delta"]["content"], " word1");
    // With every format on, the start of the output may open a marker-less
    // call (a bare name), so the first words wait; the rest are forwarded.
    let (_, forwarded) = wire(&chunks, true, settings());
    assert!(forwarded >= 35, "{forwarded}");
}

#[test]
fn the_unsplit_answer_is_right() {
    let v = client_view(&upstream(&[TEXT], &[NATIVE_ARGS]));
    assert_eq!(v["content"], "Checking Paris and 東京 now.");
    assert_eq!(v["reasoning"], "Need the weather — both cities.");
    let names: Vec<&str> =
        v["calls"].as_array().unwrap().iter().map(|c| c["arguments"]["city"].as_str().unwrap()).collect();
    assert_eq!(names, ["東京", "Paris", "Zürich"]);
    assert_eq!(v["finish"], "tool_calls");
}

/// An upstream that serves a fixed SSE body in the given byte pieces.
async fn byte_upstream(pieces: Vec<Vec<u8>>) -> String {
    let app = axum::Router::new().fallback(move || {
        let pieces = pieces.clone();
        async move {
            let stream =
                futures_util::stream::iter(pieces.into_iter().map(|p| Ok::<_, std::io::Error>(Bytes::from(p))));
            axum::response::Response::builder()
                .header("content-type", "text/event-stream")
                .body(Body::from_stream(stream))
                .unwrap()
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    format!("http://{addr}")
}

#[tokio::test]
async fn any_byte_split_of_the_sse_body_gives_the_same_answer() {
    let body = sse_body(&upstream(&pieces(TEXT, &[]), &[NATIVE_ARGS])).into_bytes();
    let req = json!({"model": "v/m", "messages": [{"role": "user", "content": "weather"}],
                     "tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]});
    let mut reference = None;
    let mut rng = fastrand::Rng::with_seed(7);
    for round in 0..24 {
        // Round 0 sends the body whole; round 1 one byte at a time; then random cuts.
        let mut cuts: Vec<usize> = match round {
            0 => vec![],
            1 => (1..body.len()).collect(),
            _ => (0..rng.usize(1..60)).map(|_| rng.usize(1..body.len())).collect(),
        };
        cuts.push(body.len());
        cuts.sort_unstable();
        cuts.dedup();
        let mut parts = Vec::new();
        let mut last = 0;
        for c in cuts {
            parts.push(body[last..c].to_vec());
            last = c;
        }
        let p = proxy("", &byte_upstream(parts).await).await;
        let (st, events) = p.chat_stream(req.clone()).await;
        assert_eq!(st, 200);
        let view = without_generated_ids(assemble(&events));
        match &reference {
            None => reference = Some(view),
            Some(r) => assert_eq!(&view, r, "round {round}"),
        }
    }
}
