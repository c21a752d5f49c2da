//! Split invariance on the proxy path: however the upstream's stream is cut —
//! into content deltas of any size, or into TCP reads at any byte — the client
//! assembles the same answer.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail by panicking

mod common;

use std::sync::Arc;

use axum::body::{Body, Bytes};
use common::*;
use modelshim::openai::Chunk;
use modelshim::stream::{Assembler, Normalizer, normalize::Settings};
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
        starts_in_reasoning: false,
        want_usage: false,
        finish_map: Default::default(),
        names_back: Default::default(),
        single_call: false,
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

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

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
