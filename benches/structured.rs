//! The added cost of structured outputs (issue 45): extracting the JSON of a
//! 2 KB answer and validating it against its schema
//! (`core::structured::pick`), bare and wrapped in a fence and prose, and
//! compiling the schema (once per request). Run with
//! `cargo bench --bench structured`; the figures are in docs/structured-outputs.md.
//!
//! Nothing here asserts a timing: the benchmark measures, the docs report.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a bench fails by panicking

use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use modelshim::core::structured::{compile, pick};
use serde_json::{Value, json};

#[cfg(feature = "mimalloc")]
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// An order with nested items, `$ref`, `anyOf` with null and an enum.
fn schema() -> Value {
    json!({"type": "object", "additionalProperties": false, "required": ["id", "customer", "items", "status"],
        "$defs": {"Item": {"type": "object", "additionalProperties": false, "required": ["sku", "qty", "price", "note"],
            "properties": {"sku": {"type": "string"}, "qty": {"type": "integer", "minimum": 1},
                           "price": {"type": "number"}, "note": {"anyOf": [{"type": "string"}, {"type": "null"}]}}}},
        "properties": {"id": {"type": "string"}, "customer": {"type": "string"},
            "status": {"enum": ["open", "paid", "shipped"]},
            "items": {"type": "array", "items": {"$ref": "#/$defs/Item"}}}})
}

/// An answer of about 2 KB that validates.
fn answer() -> String {
    let items: Vec<Value> = (0..20)
        .map(|i| {
            json!({"sku": format!("SKU-{i:05}"), "qty": i + 1, "price": 9.5 + i as f64,
                        "note": if i % 2 == 0 { Value::Null } else { json!("gift wrap") }})
        })
        .collect();
    serde_json::to_string_pretty(
        &json!({"id": "ord_123", "customer": "Ada Lovelace", "status": "paid", "items": items}),
    )
    .unwrap()
}

fn bench(c: &mut Criterion) {
    let validator = compile(&schema(), "bench").unwrap();
    let bare = answer();
    let wrapped = format!("Sure! Here is the order:\n\n```json\n{bare}\n```\n\nLet me know if you need anything else.");
    let mut g = c.benchmark_group("structured");
    g.throughput(Throughput::Bytes(bare.len() as u64));
    for (name, text) in [("2KB/bare", &bare), ("2KB/fenced_prose", &wrapped)] {
        let (found, errors) = pick(text, &validator);
        assert!(found.is_some() && errors.is_empty(), "{errors:?}");
        g.bench_function(name, |b| b.iter(|| pick(black_box(text), &validator)));
    }
    g.bench_function("2KB/compile_schema", |b| b.iter(|| compile(black_box(&schema()), "bench")));
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
