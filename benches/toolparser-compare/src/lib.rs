//! Shared by the differential test and the comparison bench: the fixture
//! cases, which tool-parser parser speaks each modelshim format, and one
//! runner per implementation that returns calls as `{name, arguments}` values.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a harness fails by panicking

use std::path::Path;
use std::sync::Arc;

use modelshim::toolcall::{Event, Extraction, Extractor, FormatSet, ToolIndex};
use openai_protocol::common::Tool;
use serde_json::{Value, json};
use tool_parser::{ParserFactory, ToolParser};

/// modelshim format (as named in the cases) → tool-parser parser name.
/// Formats tool-parser has no parser for are not compared.
pub const PAIRS: &[(&str, &str)] = &[
    ("hermes", "qwen"),
    ("qwen3_coder_xml", "qwen_coder"),
    ("mistral", "mistral"),
    ("mistral_pre_v11", "mistral"),
    ("mistral_v11", "mistral"),
    ("llama3_json", "llama"),
    ("pythonic", "pythonic"),
    ("deepseek_v3", "deepseek"),
    ("deepseek_v31", "deepseek31"),
    ("deepseek_v32_dsml", "deepseek32"),
    ("kimi_k2", "kimik2"),
    ("glm45", "glm45_moe"),
    ("glm47", "glm47_moe"),
    ("minimax_m2", "minimax_m2"),
    ("step3", "step3"),
    ("gemma4", "gemma4"),
    ("command_r7b", "cohere"),
    ("bare_json", "json"),
];

pub fn tool_parser_name(format: &str) -> Option<&'static str> {
    PAIRS.iter().find(|(f, _)| *f == format).map(|(_, p)| *p)
}

#[derive(Debug, Clone, serde::Deserialize)]
pub struct Case {
    pub format: String,
    pub text: String,
    pub expected_tool_calls: Vec<Value>,
    #[serde(default)]
    pub tools: Option<Vec<Value>>,
    #[serde(default)]
    pub note: String,
    #[serde(skip)]
    pub origin: String,
}

/// Every case of `fixtures/toolcall/corpus.jsonl` and `fixtures/toolcall/cases/*.jsonl`.
pub fn load_cases() -> Vec<Case> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/toolcall");
    let mut files = vec![root.join("corpus.jsonl")];
    let mut own: Vec<_> = std::fs::read_dir(root.join("cases")).unwrap().map(|e| e.unwrap().path()).collect();
    own.sort();
    files.extend(own);
    let mut cases = Vec::new();
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap();
        for (n, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
            let mut c: Case = serde_json::from_str(line).unwrap();
            c.origin = format!("{}:{}", f.file_name().unwrap().to_string_lossy(), n + 1);
            cases.push(c);
        }
    }
    cases
}

/// The case's tools for modelshim: declared, or open when the case has none.
pub fn ms_tools(c: &Case) -> Arc<ToolIndex> {
    Arc::new(match &c.tools {
        Some(t) => ToolIndex::from_openai(t),
        None => ToolIndex::open(),
    })
}

/// The case's tools for tool-parser (empty when the case has none).
pub fn tp_tools(c: &Case) -> Vec<Tool> {
    c.tools.as_ref().map(|t| serde_json::from_value(Value::Array(t.clone())).unwrap()).unwrap_or_default()
}

pub fn ms_set(format: &str) -> Arc<FormatSet> {
    Arc::new(FormatSet::named(&[format]).unwrap())
}

/// modelshim on the text fed in `chunk`-byte pieces (`usize::MAX`: whole).
pub fn modelshim(set: &Arc<FormatSet>, tools: &Arc<ToolIndex>, text: &str, chunk: usize) -> Extraction {
    let mut ex = Extractor::new(set.clone(), tools.clone());
    let mut out: Vec<Event> = Vec::new();
    for piece in pieces(text, chunk) {
        ex.feed(piece, &mut out);
    }
    ex.finish(&mut out);
    Extraction::from_events(out)
}

pub fn ms_calls(x: &Extraction) -> Vec<Value> {
    x.calls.iter().map(|k| call(&k.name, &k.arguments)).collect()
}

/// tool-parser's parsers are async; they never await anything real, so a
/// current-thread runtime drives them.
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().build().unwrap()
}

pub fn factory() -> ParserFactory {
    ParserFactory::new()
}

pub fn new_parser(f: &ParserFactory, name: &str) -> Box<dyn ToolParser> {
    f.registry().create_parser(name).unwrap_or_else(|| panic!("tool-parser has no parser {name}"))
}

/// tool-parser on the whole text (`parse_complete_with_tools`). An error is
/// reported as no calls, with the error text as normal text.
pub async fn tp_complete(p: &dyn ToolParser, text: &str, tools: &[Tool]) -> (String, Vec<Value>) {
    match p.parse_complete_with_tools(text, tools).await {
        Ok((normal, calls)) => (normal, calls.iter().map(|c| call(&c.function.name, &c.function.arguments)).collect()),
        Err(e) => (format!("<error: {e}>"), Vec::new()),
    }
}

/// tool-parser streamed in `chunk`-byte pieces (`parse_incremental`), the
/// per-call argument fragments joined, unstreamed arguments flushed at the end.
pub async fn tp_streamed(p: &mut dyn ToolParser, text: &str, tools: &[Tool], chunk: usize) -> (String, Vec<Value>) {
    let mut normal = String::new();
    let mut calls: Vec<(String, String)> = Vec::new();
    let add = |calls: &mut Vec<(String, String)>, item: tool_parser::types::ToolCallItem| {
        while calls.len() <= item.tool_index {
            calls.push((String::new(), String::new()));
        }
        let slot = &mut calls[item.tool_index];
        if let Some(n) = item.name {
            slot.0 = n;
        }
        slot.1.push_str(&item.parameters);
    };
    for piece in pieces(text, chunk) {
        match p.parse_incremental(piece, tools).await {
            Ok(r) => {
                normal.push_str(&r.normal_text);
                for item in r.calls {
                    add(&mut calls, item);
                }
            }
            Err(e) => normal.push_str(&format!("<error: {e}>")),
        }
    }
    for item in p.get_unstreamed_tool_args().unwrap_or_default() {
        add(&mut calls, item);
    }
    normal.push_str(&p.take_unstreamed_normal_text());
    (normal, calls.iter().map(|(n, a)| call(n, a)).collect())
}

/// `{name, arguments}` with the arguments parsed (left as a string when they
/// are not JSON, so a broken call shows as a disagreement, not a panic).
fn call(name: &str, arguments: &str) -> Value {
    let args = if arguments.trim().is_empty() {
        json!({})
    } else {
        serde_json::from_str(arguments).unwrap_or_else(|_| Value::String(arguments.to_string()))
    };
    json!({"name": name, "arguments": args})
}

/// `text` in `chunk`-byte pieces cut on char boundaries.
pub fn pieces(text: &str, chunk: usize) -> Vec<&str> {
    let mut v = Vec::new();
    let mut rest = text;
    while !rest.is_empty() {
        let mut cut = chunk.min(rest.len());
        while !rest.is_char_boundary(cut) {
            cut += 1;
        }
        v.push(&rest[..cut]);
        rest = &rest[cut..];
    }
    v
}
