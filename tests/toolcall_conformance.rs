//! The conformance suite over every registered tool-call format.
//!
//! Cases are data: `fixtures/toolcall/corpus.jsonl` (public vectors) and
//! `fixtures/toolcall/cases/<format>.jsonl` (ours), one JSON object a line:
//! `{format, text, expected_tool_calls: [{name, arguments}], expected_content,
//! tools?, stream_chunks?, auto?, note?}`. Each case runs with its own
//! format, in auto mode (unless `"auto": false`), streamed in its recorded
//! chunks, in 1-byte pieces, and in random splits; every run must give the
//! same result.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail by panicking

use std::sync::Arc;

use modelshim::toolcall::{Event, Extraction, Extractor, FormatSet, ToolIndex, formats};
use proptest::prelude::*;
use serde_json::Value;

#[derive(Debug, Clone, serde::Deserialize)]
struct Case {
    format: String,
    text: String,
    expected_tool_calls: Vec<Value>,
    expected_content: Option<String>,
    #[serde(default)]
    tools: Option<Vec<Value>>,
    #[serde(default)]
    stream_chunks: Option<Vec<String>>,
    #[serde(default = "yes")]
    auto: bool,
    #[serde(default)]
    note: String,
    #[serde(skip)]
    origin: String,
}

fn yes() -> bool {
    true
}

/// Corpus cases whose format is a prompt convention that auto mode must not
/// guess, with the reason.
const NOT_IN_AUTO: &[(&str, &str)] = &[];

fn load() -> Vec<Case> {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/toolcall");
    let mut files = vec![root.join("corpus.jsonl")];
    let mut own: Vec<_> = std::fs::read_dir(root.join("cases"))
        .map(|d| d.filter_map(|e| e.ok().map(|e| e.path())).collect())
        .unwrap_or_default();
    own.sort();
    files.extend(own);
    // TOOLCALL_FORMAT=a,b runs only those formats' cases (while developing one).
    let only = std::env::var("TOOLCALL_FORMAT").ok();
    let mut cases = Vec::new();
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
        for (n, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
            let mut c: Case = serde_json::from_str(line).unwrap_or_else(|e| panic!("{}:{}: {e}", f.display(), n + 1));
            c.origin = format!("{}:{}", f.file_name().and_then(|n| n.to_str()).unwrap_or("?"), n + 1);
            if NOT_IN_AUTO.iter().any(|(fmt, _)| *fmt == c.format) {
                c.auto = false;
            }
            if only.as_ref().is_none_or(|o| o.split(',').any(|o| o == c.format)) {
                cases.push(c);
            }
        }
    }
    cases
}

fn tools(c: &Case) -> Arc<ToolIndex> {
    Arc::new(match &c.tools {
        Some(t) => ToolIndex::from_openai(t),
        None => ToolIndex::open(),
    })
}

fn own_set(c: &Case) -> Option<Arc<FormatSet>> {
    if c.format == "negative_generic" {
        return None;
    }
    Some(Arc::new(
        FormatSet::named(&[c.format.as_str()]).unwrap_or_else(|n| panic!("{}: no format named {n}", c.origin)),
    ))
}

fn run(set: &Arc<FormatSet>, tools: &Arc<ToolIndex>, chunks: &[&str]) -> Extraction {
    let mut ex = Extractor::new(set.clone(), tools.clone());
    let mut out: Vec<Event> = Vec::new();
    for ch in chunks {
        ex.feed(ch, &mut out);
    }
    ex.finish(&mut out);
    Extraction::from_events(out)
}

/// Like [`run`], but every piece the extractor lets pass
/// ([`Extractor::pass`], the stream fast path) is taken as it says.
fn run_passing(set: &Arc<FormatSet>, tools: &Arc<ToolIndex>, chunks: &[&str], reshape: bool) -> Extraction {
    let mut ex = Extractor::new(set.clone(), tools.clone());
    let mut out: Vec<Event> = Vec::new();
    for ch in chunks {
        match ex.pass(ch, reshape) {
            Some(p) => out.push(Event::Text(format!("{}{}", p.lead, &ch[..p.keep]))),
            None => ex.feed(ch, &mut out),
        }
    }
    ex.finish(&mut out);
    Extraction::from_events(out)
}

/// Splits think blocks out of an expected content string, as the extractor
/// routes them to reasoning.
fn split_reasoning(s: &str) -> (String, String) {
    let re = regex::Regex::new(concat!(
        r"(?s)<think>(.*?)</think>|<seed:think>(.*?)</seed:think>|\[THINK\](.*?)\[/THINK\]",
        r"|<\|START_THINKING\|>(.*?)<\|END_THINKING\|>",
    ))
    .unwrap_or_else(|e| panic!("{e}"));
    let mut reasoning = String::new();
    for cap in re.captures_iter(s) {
        for g in 1..=4 {
            if let Some(m) = cap.get(g) {
                reasoning.push_str(m.as_str());
            }
        }
    }
    (re.replace_all(s, "").trim().to_string(), reasoning)
}

fn check(c: &Case, got: &Extraction, mode: &str) {
    let ctx = || format!("{} [{}] {mode}: {}\ntext: {:?}\ngot: {got:#?}", c.origin, c.format, c.note, c.text);
    let calls: Vec<Value> = got
        .calls
        .iter()
        .map(|k| {
            let args: Value = serde_json::from_str(&k.arguments)
                .unwrap_or_else(|e| panic!("arguments are not JSON ({e}): {}", ctx()));
            serde_json::json!({"name": k.name, "arguments": args})
        })
        .collect();
    assert_eq!(calls, c.expected_tool_calls, "calls differ: {}", ctx());
    match &c.expected_content {
        Some(exp) => {
            let (exp_content, exp_reasoning) = split_reasoning(exp);
            assert_eq!(got.content.trim(), exp_content, "content differs: {}", ctx());
            if !exp_reasoning.is_empty() {
                assert_eq!(got.reasoning.trim(), exp_reasoning.trim(), "reasoning differs: {}", ctx());
            }
        }
        // null: no visible content. For truncated outputs the corpus leaves
        // the leftover to the implementation; ours keeps the unfinished
        // markup as content (nothing the model wrote is lost), so it must be
        // the tail of the text.
        None if c.note.to_lowercase().contains("truncat") => {
            assert!(c.text.trim_end().ends_with(got.content.trim()), "content is not the truncated tail: {}", ctx())
        }
        None => assert_eq!(got.content.trim(), "", "content should be empty: {}", ctx()),
    }
}

fn char_pieces(s: &str) -> Vec<&str> {
    let mut v = Vec::new();
    let mut last = 0;
    for (i, _) in s.char_indices().skip(1) {
        v.push(&s[last..i]);
        last = i;
    }
    v.push(&s[last..]);
    v
}

#[test]
fn every_case_whole_and_streamed() {
    let cases = load();
    assert!(!cases.is_empty(), "no cases loaded");
    let auto = Arc::new(FormatSet::all());
    for c in &cases {
        let t = tools(c);
        let mut sets = Vec::new();
        if let Some(s) = own_set(c) {
            sets.push(("own", s));
        }
        if c.auto {
            sets.push(("auto", auto.clone()));
        }
        for (mode, set) in &sets {
            let whole = run(set, &t, &[&c.text]);
            check(c, &whole, mode);
            let bytes = run(set, &t, &char_pieces(&c.text));
            assert_eq!(bytes, whole, "{} {mode}: 1-char chunks differ from whole", c.origin);
            if let Some(chunks) = &c.stream_chunks {
                assert_eq!(chunks.concat(), c.text, "{}: stream_chunks do not add up", c.origin);
                let refs: Vec<&str> = chunks.iter().map(String::as_str).collect();
                assert_eq!(run(set, &t, &refs), whole, "{} {mode}: recorded chunks differ", c.origin);
            }
        }
    }
}

#[test]
fn every_format_has_cases() {
    let cases = load();
    let mut missing = Vec::new();
    for f in formats::ALL {
        let n = cases.iter().filter(|c| formats::by_name(&c.format).is_some_and(|g| g.name() == f.name())).count();
        if n < 8 {
            missing.push(format!("{} has {n} cases (needs 8)", f.name()));
        }
    }
    assert!(missing.is_empty(), "formats without enough cases:\n{}", missing.join("\n"));
    for c in &cases {
        assert!(
            c.format == "negative_generic" || formats::by_name(&c.format).is_some(),
            "{}: case names unknown format {}",
            c.origin,
            c.format
        );
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// Any chunking of any case gives exactly the unsplit result.
    #[test]
    fn split_invariance(pick in any::<prop::sample::Index>(), cuts in prop::collection::vec(any::<prop::sample::Index>(), 0..24)) {
        let cases = cases();
        let c = &cases[pick.index(cases.len())];
        let t = tools(c);
        let set = own_set(c).unwrap_or_else(|| Arc::new(FormatSet::all()));
        let whole = run(&set, &t, &[&c.text]);
        let bounds: Vec<usize> = c.text.char_indices().map(|(i, _)| i).collect();
        let mut points: Vec<usize> = cuts.iter().map(|i| bounds[i.index(bounds.len())]).collect();
        points.push(c.text.len());
        points.sort_unstable();
        points.dedup();
        let mut pieces = Vec::new();
        let mut last = 0;
        for p in points {
            pieces.push(&c.text[last..p]);
            last = p;
        }
        prop_assert_eq!(run(&set, &t, &pieces), whole.clone(), "{}", c.origin);
        // The stream fast path changes nothing either.
        prop_assert_eq!(run_passing(&set, &t, &pieces, false), whole.clone(), "{} (pass)", c.origin);
        prop_assert_eq!(run_passing(&set, &t, &pieces, true), whole, "{} (pass, reshaped)", c.origin);
    }
}

fn cases() -> &'static [Case] {
    static CASES: std::sync::OnceLock<Vec<Case>> = std::sync::OnceLock::new();
    CASES.get_or_init(load)
}
