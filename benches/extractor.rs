//! Throughput of the tool-call extractor and per-chunk cost of the stream
//! normalizer. Run with `cargo bench --bench extractor`; see benches/README.md
//! for the figures and the targets they are measured against.
//!
//! Nothing here asserts a timing: the benchmark measures, the README reports.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a bench fails by panicking

use std::hint::black_box;
use std::sync::Arc;
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use criterion::{BatchSize, BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use modelshim::openai::{Chunk, ChunkChoice, Delta};
use modelshim::stream::normalize::Settings;
use modelshim::stream::{Data, Forwarded, Normalizer};
use modelshim::toolcall::{Event, Extractor, FormatSet, ToolIndex};
use serde_json::json;

/// The binary's allocator, so the figures are the shipped ones.
#[cfg(feature = "mimalloc")]
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Deterministic prose without any tool-call or reasoning marker: words,
/// punctuation, digits, newlines, and the odd `<`, `[`, `{` or `(` that can
/// start a marker but does not (`a < b`, `[1]`, `{x}`), as in real answers.
fn prose(len: usize) -> String {
    const WORDS: &[&str] = &[
        "the",
        "model",
        "answers",
        "with",
        "a",
        "short",
        "explanation",
        "of",
        "how",
        "streaming",
        "works,",
        "and",
        "then",
        "it",
        "lists",
        "three",
        "steps:",
        "first",
        "parse",
        "request;",
        "second",
        "call",
        "upstream.",
        "Note",
        "that",
        "x < y",
        "holds",
        "when",
        "[1]",
        "is",
        "cited",
        "(see",
        "above)",
        "or",
        "{braces}",
        "appear.",
        "Paris",
        "weather",
        "is",
        "mild",
        "today",
        "at",
        "21",
        "degrees.",
        "\n\n",
        "- item",
        "\n",
    ];
    let mut s = String::with_capacity(len + 32);
    let mut rng = fastrand::Rng::with_seed(7);
    while s.len() < len {
        s.push_str(WORDS[rng.usize(..WORDS.len())]);
        s.push(' ');
    }
    s.truncate(len);
    s
}

fn tools() -> Arc<ToolIndex> {
    let t = json!([
        {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
            "properties": {"city": {"type": "string"}, "unit": {"type": "string"}}}}},
        {"type": "function", "function": {"name": "search_docs", "parameters": {"type": "object",
            "properties": {"query": {"type": "string"}, "limit": {"type": "integer"}}}}},
    ]);
    Arc::new(ToolIndex::from_openai(t.as_array().unwrap()))
}

/// Text dense with calls of one format: short prose, a call, repeated.
fn dense(format: &str, len: usize) -> String {
    let mut s = String::with_capacity(len + 512);
    let mut i = 0u32;
    while s.len() < len {
        let city = ["Paris", "Berlin", "東京", "São Paulo"][i as usize % 4];
        match format {
            "hermes" => {
                s.push_str("Let me check.\n<tool_call>\n");
                s.push_str(&format!(
                    r#"{{"name": "get_weather", "arguments": {{"city": "{city}", "unit": "celsius"}}}}"#
                ));
                s.push_str("\n</tool_call>\n");
                s.push_str(&format!(
                    "<tool_call>\n{{\"name\": \"search_docs\", \"arguments\": {{\"query\": \"tokio {i}\", \"limit\": {}}}}}\n</tool_call>\n",
                    i % 9
                ));
            }
            "kimi_k2" => {
                s.push_str("Let me check. <|tool_calls_section_begin|>");
                s.push_str(&format!(
                    "<|tool_call_begin|>functions.get_weather:{i}<|tool_call_argument_begin|>{{\"city\": \"{city}\", \"unit\": \"celsius\"}}<|tool_call_end|>"
                ));
                s.push_str(&format!(
                    "<|tool_call_begin|>functions.search_docs:{}<|tool_call_argument_begin|>{{\"query\": \"tokio {i}\", \"limit\": {}}}<|tool_call_end|>",
                    i + 1,
                    i % 9
                ));
                s.push_str("<|tool_calls_section_end|>\n");
            }
            "deepseek_v31" => {
                s.push_str("Let me check.<｜tool▁calls▁begin｜>");
                s.push_str(&format!(
                    "<｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{{\"city\": \"{city}\", \"unit\": \"celsius\"}}<｜tool▁call▁end｜>"
                ));
                s.push_str(&format!(
                    "<｜tool▁call▁begin｜>search_docs<｜tool▁sep｜>{{\"query\": \"tokio {i}\", \"limit\": {}}}<｜tool▁call▁end｜>",
                    i % 9
                ));
                s.push_str("<｜tool▁calls▁end｜>\n");
            }
            _ => unreachable!("no dense text for {format}"),
        }
        i += 1;
    }
    s
}

/// Feeds `text` in `chunk`-byte pieces (on char boundaries) and finishes;
/// returns the number of events so the work cannot be optimised away.
fn run(set: &Arc<FormatSet>, tools: &Arc<ToolIndex>, text: &str, chunk: usize) -> usize {
    let mut ex = Extractor::new(set.clone(), tools.clone());
    let mut out: Vec<Event> = Vec::new();
    let mut n = 0;
    let mut rest = text;
    while !rest.is_empty() {
        let mut cut = chunk.min(rest.len());
        while !rest.is_char_boundary(cut) {
            cut += 1;
        }
        ex.feed(&rest[..cut], &mut out);
        n += out.len();
        out.clear();
        rest = &rest[cut..];
    }
    ex.finish(&mut out);
    n + out.len()
}

fn calls_in(set: &Arc<FormatSet>, tools: &Arc<ToolIndex>, text: &str) -> usize {
    let mut ex = Extractor::new(set.clone(), tools.clone());
    let mut out = Vec::new();
    ex.feed(text, &mut out);
    ex.finish(&mut out);
    out.iter().filter(|e| matches!(e, Event::Call(_))).count()
}

fn prose_throughput(c: &mut Criterion) {
    let text = prose(256 << 10);
    let t = tools();
    let mut g = c.benchmark_group("prose");
    g.throughput(Throughput::Bytes(text.len() as u64));
    for (label, set) in [("auto", FormatSet::all()), ("hermes", FormatSet::named(&["hermes"]).unwrap())] {
        let set = Arc::new(set);
        assert_eq!(calls_in(&set, &t, &text), 0, "prose must not contain calls");
        g.bench_function(BenchmarkId::new("whole", label), |b| b.iter(|| run(&set, &t, black_box(&text), usize::MAX)));
        g.bench_function(BenchmarkId::new("chunks_64B", label), |b| b.iter(|| run(&set, &t, black_box(&text), 64)));
    }
    g.finish();
}

fn dense_throughput(c: &mut Criterion) {
    let t = tools();
    let auto = Arc::new(FormatSet::all());
    let mut g = c.benchmark_group("dense_calls");
    for format in ["hermes", "kimi_k2", "deepseek_v31"] {
        let text = dense(format, 64 << 10);
        let own = Arc::new(FormatSet::named(&[format]).unwrap());
        let expected = calls_in(&own, &t, &text);
        assert!(expected > 300, "{format}: only {expected} calls recovered");
        assert_eq!(calls_in(&auto, &t, &text), expected, "{format}: auto differs");
        g.throughput(Throughput::Bytes(text.len() as u64));
        for (mode, set) in [("own", &own), ("auto", &auto)] {
            g.bench_function(BenchmarkId::new(format!("{format}/whole"), mode), |b| {
                b.iter(|| run(set, &t, black_box(&text), usize::MAX))
            });
        }
        g.bench_function(BenchmarkId::new(format!("{format}/chunks_16B"), "own"), |b| {
            b.iter(|| run(&own, &t, black_box(&text), 16))
        });
    }
    g.finish();
}

/// The same text shape at 1 KB and 1 MB, fed 8 bytes at a time: per-byte time
/// must not grow with the response (the engine is O(n)).
fn flat_per_chunk(c: &mut Criterion) {
    let t = tools();
    let auto = Arc::new(FormatSet::all());
    let mut g = c.benchmark_group("flat_8B_chunks");
    for (label, len) in [("1KB", 1usize << 10), ("1MB", 1 << 20)] {
        let text = prose(len);
        g.throughput(Throughput::Bytes(text.len() as u64));
        g.bench_function(BenchmarkId::new("prose", label), |b| b.iter(|| run(&auto, &t, black_box(&text), 8)));
        // One call whose argument is the whole response: the region path
        // (incremental Balanced/Marker waits) instead of the text path.
        let body = prose(len.saturating_sub(96)).replace(['"', '\\', '{', '}', '\n'], " ");
        let call = format!(
            "<tool_call>\n{{\"name\": \"search_docs\", \"arguments\": {{\"query\": \"{body}\", \"limit\": 1}}}}\n</tool_call>"
        );
        assert_eq!(calls_in(&auto, &t, &call), 1);
        g.throughput(Throughput::Bytes(call.len() as u64));
        g.bench_function(BenchmarkId::new("one_long_call", label), |b| b.iter(|| run(&auto, &t, black_box(&call), 8)));
    }
    g.finish();
}

fn settings(formats: &Arc<FormatSet>, tools: &Arc<ToolIndex>) -> Settings {
    Settings { formats: formats.clone(), tools: tools.clone(), ..Default::default() }
}

fn content_chunk(text: &str) -> Chunk {
    Chunk {
        id: "chatcmpl-9f8e7d6c5b4a".into(),
        object: "chat.completion.chunk".into(),
        created: 1_735_689_600,
        model: "deepseek-chat".into(),
        choices: vec![ChunkChoice {
            index: 0,
            delta: Delta { content: Some(text.into()), ..Delta::default() },
            finish_reason: None,
            extra: Default::default(),
        }],
        usage: None,
        extra: Default::default(),
    }
}

/// Token-sized pieces (2–8 bytes), as an upstream streams them.
fn tokens(text: &str) -> Vec<&str> {
    let mut rng = fastrand::Rng::with_seed(11);
    let mut v = Vec::new();
    let mut rest = text;
    while !rest.is_empty() {
        let mut cut = rng.usize(2..=8).min(rest.len());
        while !rest.is_char_boundary(cut) {
            cut += 1;
        }
        v.push(&rest[..cut]);
        rest = &rest[cut..];
    }
    v
}

/// CPU per re-emitted chunk on the proxy path: `Normalizer::push` over a
/// response of content deltas. Building the upstream chunks (the SSE/JSON
/// decode, not the normalizer's work) is done in the untimed setup.
fn normalizer_per_chunk(c: &mut Criterion) {
    let prose_text = prose(2 << 10);
    let with_call = format!(
        "{}\n<tool_call>\n{{\"name\": \"get_weather\", \"arguments\": {{\"city\": \"Paris\", \"unit\": \"celsius\"}}}}\n</tool_call>",
        &prose_text[..1 << 10]
    );
    let cases = [
        ("passthrough", false, prose_text.as_str()),
        ("recovery_prose", true, prose_text.as_str()),
        ("recovery_with_call", true, with_call.as_str()),
    ];
    // Built once per route in the proxy; each response clones the Arcs.
    let all = Arc::new(FormatSet::all());
    let none = Arc::new(FormatSet::none());
    let declared = tools();
    let undeclared = Arc::new(ToolIndex::default());
    let mut g = c.benchmark_group("normalizer");
    for (label, recover, text) in cases {
        let (formats, tools) = if recover { (&all, &declared) } else { (&none, &undeclared) };
        let chunks: Vec<Chunk> = tokens(text).into_iter().map(content_chunk).collect();
        g.throughput(Throughput::Elements(chunks.len() as u64));
        g.bench_function(BenchmarkId::new("push", label), |b| {
            b.iter_batched(
                || (Normalizer::new(settings(formats, tools)), chunks.clone(), Vec::with_capacity(chunks.len() + 4)),
                |(mut norm, chunks, mut out)| {
                    for ch in chunks {
                        norm.push(ch, &mut out);
                    }
                    (norm, out)
                },
                BatchSize::SmallInput,
            )
        });
    }
    g.finish();
}

/// One upstream chunk from its `data` payload to the bytes sent to the
/// client, over a response of token-sized content deltas: `full` parses each
/// payload into a `Chunk`, normalizes and serializes it; `forward` takes the
/// fast path first (`Normalizer::forward`) and the full path for the rest,
/// as the proxy does. Tokens with a leading space (as OpenAI-style
/// tokenizers stream words) and with a trailing one (held, then moved).
fn chunk_path(c: &mut Criterion) {
    let words: Vec<String> = prose(2 << 10).split(' ').map(str::to_string).collect();
    let leading: Vec<String> = words.iter().map(|w| format!(" {w}")).collect();
    let trailing: Vec<String> = words.iter().map(|w| format!("{w} ")).collect();
    let all = Arc::new(FormatSet::all());
    let none = Arc::new(FormatSet::none());
    let declared = tools();
    let undeclared = Arc::new(ToolIndex::default());
    let mut g = c.benchmark_group("chunk_path");
    for (shape, pieces) in [("leading_space", &leading), ("trailing_space", &trailing)] {
        // Each payload as the proxy reads it: a slice of the event it came in.
        let payloads: Vec<Data> = pieces
            .iter()
            .map(|p| {
                let ev = format!("data: {}\n\n", serde_json::to_string(&content_chunk(p)).unwrap_or_default());
                let end = ev.len() - 2;
                Data::in_event(Bytes::from(ev), 6, end)
            })
            .collect();
        g.throughput(Throughput::Elements(payloads.len() as u64));
        for (recovery, formats, tools) in [("no_tools", &none, &undeclared), ("recovery", &all, &declared)] {
            for fast in [false, true] {
                let id = BenchmarkId::new(format!("{shape}/{recovery}"), if fast { "forward" } else { "full" });
                g.bench_function(id, |b| {
                    b.iter_batched(
                        || {
                            (
                                Normalizer::new(settings(formats, tools)),
                                payloads.clone(),
                                BytesMut::with_capacity(64 << 10),
                            )
                        },
                        |(mut norm, payloads, mut wire)| {
                            let mut out = Vec::new();
                            for p in payloads {
                                let p = if fast {
                                    match norm.forward(p) {
                                        Ok(w) => {
                                            sse_write(&mut wire, &w);
                                            continue;
                                        }
                                        Err(p) => p,
                                    }
                                } else {
                                    p
                                };
                                if let Ok(chunk) = serde_json::from_slice::<Chunk>(p.bytes()) {
                                    norm.push(chunk, &mut out);
                                }
                                for c in out.drain(..) {
                                    wire.extend_from_slice(b"data: ");
                                    let _ = serde_json::to_writer((&mut wire).writer(), &c);
                                    wire.extend_from_slice(b"\n\n");
                                }
                            }
                            (norm, wire)
                        },
                        BatchSize::SmallInput,
                    )
                });
            }
        }
    }
    g.finish();
}

/// As the chat front writes a forwarded payload (`fronts/sse.rs`).
fn sse_write(wire: &mut BytesMut, f: &Forwarded) {
    match f.event() {
        Some(ev) => wire.extend_from_slice(ev),
        None => {
            wire.extend_from_slice(b"data: ");
            f.write(wire);
            wire.extend_from_slice(b"\n\n");
        }
    }
}

fn config() -> Criterion {
    // Two shared cores: longer measurement and more samples keep the noise down.
    Criterion::default().sample_size(60).measurement_time(Duration::from_secs(4)).warm_up_time(Duration::from_secs(1))
}

criterion_group! {
    name = benches;
    config = config();
    targets = prose_throughput, dense_throughput, flat_per_chunk, normalizer_per_chunk, chunk_path
}
criterion_main!(benches);
