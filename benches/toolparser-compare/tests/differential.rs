//! Differential test: modelshim's extractor against tool-parser on every
//! fixture case of a format both implement.
//!
//! The cases are the ground truth. The test fails only when modelshim gives
//! calls other than a case's `expected_tool_calls`; where tool-parser
//! disagrees, the report lists the case with both results. Run with
//! `cargo test --release -- --nocapture` to see the report (it is also
//! written to `target/differential-report.md`).

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail by panicking

use std::collections::BTreeMap;
use std::fmt::Write;

use serde_json::Value;
use toolparser_compare::*;

#[derive(Default)]
struct Tally {
    cases: usize,
    ms_ok: usize,
    tp_ok: usize,
    tp_stream_ok: usize,
    agree: usize,
}

#[test]
fn modelshim_vs_tool_parser() {
    let rt = runtime();
    let factory = factory();
    let mut tally: BTreeMap<&str, Tally> = BTreeMap::new();
    let mut wrong = Vec::new();
    let mut report = String::new();
    let mut disagreements = String::new();
    for c in load_cases() {
        let Some(tp_name) = tool_parser_name(&c.format) else { continue };
        let got = modelshim(&ms_set(&c.format), &ms_tools(&c), &c.text, usize::MAX);
        let ms = ms_calls(&got);
        let tools = tp_tools(&c);
        let (_, tp) = rt.block_on(tp_complete(new_parser(&factory, tp_name).as_ref(), &c.text, &tools));
        let mut streamed = new_parser(&factory, tp_name);
        let (_, tp_s) = rt.block_on(tp_streamed(streamed.as_mut(), &c.text, &tools, 8));
        let exp = &c.expected_tool_calls;
        let t = tally.entry(c.format.as_str().to_owned().leak()).or_default();
        t.cases += 1;
        t.ms_ok += usize::from(&ms == exp);
        t.tp_ok += usize::from(&tp == exp);
        t.tp_stream_ok += usize::from(&tp_s == exp);
        t.agree += usize::from(ms == tp);
        if &ms != exp {
            wrong.push(format!("{} [{}]: modelshim {} != expected {}", c.origin, c.format, show(&ms), show(exp)));
        }
        if ms != tp || tp != tp_s {
            let _ = writeln!(
                disagreements,
                "- `{}` [{} / {tp_name}] {}\n  - expected: `{}`\n  - modelshim: `{}`\n  - tool-parser: `{}`{}",
                c.origin,
                c.format,
                c.note,
                show(exp),
                show(&ms),
                show(&tp),
                if tp_s == tp { String::new() } else { format!("\n  - tool-parser streamed (8 B): `{}`", show(&tp_s)) },
            );
        }
    }
    let _ = writeln!(
        report,
        "| format | tool-parser | cases | modelshim = expected | tool-parser = expected | tool-parser streamed = expected | modelshim = tool-parser |"
    );
    let _ = writeln!(report, "| --- | --- | ---: | ---: | ---: | ---: | ---: |");
    let mut sum = Tally::default();
    for (f, t) in &tally {
        let _ = writeln!(
            report,
            "| {f} | {} | {} | {} | {} | {} | {} |",
            tool_parser_name(f).unwrap(),
            t.cases,
            t.ms_ok,
            t.tp_ok,
            t.tp_stream_ok,
            t.agree
        );
        sum.cases += t.cases;
        sum.ms_ok += t.ms_ok;
        sum.tp_ok += t.tp_ok;
        sum.tp_stream_ok += t.tp_stream_ok;
        sum.agree += t.agree;
    }
    let _ = writeln!(
        report,
        "| **all** | | {} | {} | {} | {} | {} |\n\n## Disagreements\n\n{}",
        sum.cases, sum.ms_ok, sum.tp_ok, sum.tp_stream_ok, sum.agree, disagreements
    );
    println!("{report}");
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("target/differential-report.md");
    let _ = std::fs::create_dir_all(path.parent().unwrap());
    let _ = std::fs::write(&path, &report);
    assert!(sum.cases > 100, "only {} comparable cases loaded", sum.cases);
    assert!(wrong.is_empty(), "modelshim differs from the expected calls:\n{}", wrong.join("\n"));
}

fn show(calls: &[Value]) -> String {
    serde_json::to_string(calls).unwrap()
}
