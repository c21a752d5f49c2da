//! modelshim's extractor against tool-parser on the same inputs: each format
//! both implement, every fixture case of that format concatenated into one
//! realistic response-sized workload, parsed whole and streamed in 8-byte
//! chunks. Throughput is bytes of model text per second.
//!
//! tool-parser's parsers are async and driven on a current-thread runtime
//! (counted, as for any caller of that API). Whole-text parsing reuses one
//! parser; streaming creates a fresh parser per response, so its regex
//! compilation is counted there.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a bench fails by panicking

use std::hint::black_box;
use std::time::Duration;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use toolparser_compare::*;

/// Formats compared, with the fixture text used: the hand-written cases of
/// the format whose expected calls both parsers agree on, so the two do the
/// same work (cases where one of them fails would compare an early exit).
const FORMATS: &[&str] =
    &["hermes", "mistral", "deepseek_v3", "deepseek_v31", "kimi_k2", "glm45", "qwen3_coder_xml", "pythonic"];

fn compare(c: &mut Criterion) {
    let rt = runtime();
    let factory = factory();
    let cases = load_cases();
    for format in FORMATS {
        let tp_name = tool_parser_name(format).unwrap();
        // Cases both get right whole, one response each.
        let inputs: Vec<_> = cases
            .iter()
            .filter(|c| c.format == *format)
            .filter(|c| {
                let ms = ms_calls(&modelshim(&ms_set(format), &ms_tools(c), &c.text, usize::MAX));
                let (_, tp) = rt.block_on(tp_complete(new_parser(&factory, tp_name).as_ref(), &c.text, &tp_tools(c)));
                !c.expected_tool_calls.is_empty() && ms == c.expected_tool_calls && tp == c.expected_tool_calls
            })
            .map(|c| (c.text.clone(), ms_tools(c), tp_tools(c)))
            .collect();
        if inputs.is_empty() {
            eprintln!("{format}: no case both parsers get right; skipped");
            continue;
        }
        let bytes: usize = inputs.iter().map(|(t, _, _)| t.len()).sum();
        let set = ms_set(format);
        let mut g = c.benchmark_group(format!("compare/{format}"));
        g.throughput(Throughput::Bytes(bytes as u64));
        for (mode, chunk) in [("whole", usize::MAX), ("stream_8B", 8)] {
            g.bench_function(BenchmarkId::new("modelshim", mode), |b| {
                b.iter(|| {
                    let mut n = 0;
                    for (text, tools, _) in &inputs {
                        n += modelshim(&set, tools, black_box(text), chunk).calls.len();
                    }
                    n
                })
            });
            // Whole text: `parse_complete` takes `&self`, so one parser is
            // reused (as the gateway's pool does). Streamed: a fresh parser
            // per response, as `create_parser` is meant for; its
            // construction (regex compilation) is part of the cost.
            let shared = new_parser(&factory, tp_name);
            g.bench_function(BenchmarkId::new("tool-parser", mode), |b| {
                b.iter(|| {
                    let mut n = 0;
                    for (text, _, tools) in &inputs {
                        n += if chunk == usize::MAX {
                            rt.block_on(tp_complete(shared.as_ref(), black_box(text), tools)).1.len()
                        } else {
                            let mut p = new_parser(&factory, tp_name);
                            rt.block_on(tp_streamed(p.as_mut(), black_box(text), tools, chunk)).1.len()
                        };
                    }
                    n
                })
            });
        }
        g.finish();
    }
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(30).measurement_time(Duration::from_secs(3)).warm_up_time(Duration::from_secs(1));
    targets = compare
}
criterion_main!(benches);
