//! Kimi-K2 / K2-0905 / K2-Thinking (Moonshot):
//!
//! ```text
//! <|tool_calls_section_begin|><|tool_call_begin|>functions.NAME:IDX<|tool_call_argument_begin|>{json}<|tool_call_end|>…<|tool_calls_section_end|>
//! ```
//!
//! `functions.NAME:IDX` is the call id (IDX is a conversation-wide counter)
//! and is kept byte for byte; the name is the part between `functions.` and
//! the last `:`. Names may contain dots. A bare counter (`<|tool_call_begin|>0`)
//! names no tool: as vLLM and SGLang do, the tool is the only declared one,
//! or the one declared tool whose parameters hold every argument key.

use super::json_calls::{Frame, framed, whole_json};
use crate::toolcall::scan::{split_once, trim};
use crate::toolcall::{Args, Ctx, Format, RawCall, Step, ToolIndex};

pub struct KimiK2;

const FRAME: Frame = Frame {
    section_begin: "<|tool_calls_section_begin|>",
    call_begin: "<|tool_call_begin|>",
    call_end: "<|tool_call_end|>",
    section_end: "<|tool_calls_section_end|>",
};
const ARGS: &str = "<|tool_call_argument_begin|>";

impl Format for KimiK2 {
    fn name(&self) -> &'static str {
        "kimi_k2"
    }

    fn markers(&self) -> &'static [&'static str] {
        &[FRAME.section_begin, FRAME.call_begin]
    }

    fn strays(&self) -> &'static [&'static str] {
        &[FRAME.section_end, FRAME.call_end]
    }

    /// SGLang's Kimi-K2 reasoning parser ends the thinking at the section token too.
    fn ends_reasoning(&self) -> &'static [&'static str] {
        &[FRAME.section_begin]
    }

    fn parse(&self, region: &str, ctx: &Ctx<'_>) -> Step {
        framed(region, ctx, &FRAME, |body, complete| call(body, complete, ctx.tools))
    }
}

fn call(body: &str, complete: bool, tools: &ToolIndex) -> Option<RawCall> {
    let (id, args) = split_once(body, ARGS)?;
    let id = trim(id);
    let args = trim(args);
    let args = if complete { args } else { whole_json(args)? };
    if is_counter(id) {
        let name = infer_name(tools, args)?;
        return Some(RawCall { name, args: Args::Json(args.to_string()), id: Some(id.to_string()) });
    }
    let (name, indexed) = match id.rsplit_once(':') {
        Some((name, idx)) if is_counter(idx) => (name, true),
        _ => (id, false),
    };
    // `functions.` opens the indexed id the template writes; without its
    // `:IDX` the id is malformed (`functions.get.0`) and names no tool.
    if !indexed && name.starts_with("functions.") {
        return None;
    }
    let name = name.strip_prefix("functions.").unwrap_or(name);
    if name.is_empty() {
        return None;
    }
    Some(RawCall { name: name.to_string(), args: Args::Json(args.to_string()), id: indexed.then(|| id.to_string()) })
}

fn is_counter(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit())
}

/// The tool a bare-counter call means: the only declared tool, else the one
/// whose schema properties hold every key of the (valid, non-empty) arguments.
/// Ambiguity or malformed arguments name none, and the call is dropped.
fn infer_name(tools: &ToolIndex, args: &str) -> Option<String> {
    let mut names = tools.names();
    if let (Some(only), None) = (names.next(), names.next()) {
        return Some(only.to_string());
    }
    let serde_json::Value::Object(obj) = serde_json::from_str(args).ok()? else {
        return None;
    };
    if obj.is_empty() {
        return None;
    }
    let mut fits = tools.names().filter(|n| {
        let props = tools.schema(n).and_then(|s| s.get("properties")).and_then(|p| p.as_object());
        props.is_some_and(|p| obj.keys().all(|k| p.contains_key(k)))
    });
    match (fits.next(), fits.next()) {
        (Some(n), None) => Some(n.to_string()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_id() {
        let open = ToolIndex::open();
        let c = call("functions.a.b:12<|tool_call_argument_begin|>{}", true, &open);
        assert_eq!(
            c,
            Some(RawCall { name: "a.b".into(), args: Args::Json("{}".into()), id: Some("functions.a.b:12".into()) })
        );
        assert_eq!(call("get<|tool_call_argument_begin|>{}", true, &open).and_then(|c| c.id), None);
        assert_eq!(call("functions.get.0<|tool_call_argument_begin|>{}", true, &open), None);
    }

    fn tool(name: &str, props: &[&str]) -> (String, serde_json::Value) {
        let props: serde_json::Map<_, _> =
            props.iter().map(|p| (p.to_string(), serde_json::json!({"type": "string"}))).collect();
        (name.to_string(), serde_json::json!({"type": "object", "properties": props}))
    }

    // vLLM tests/tool_parsers/test_kimi_k2_tool_parser.py: test_bare_counter*,
    // SGLang test_kimik2_detector.py TestKimiK2BareCounterParsing.
    #[test]
    fn bare_counter_takes_the_tool_from_the_declarations() {
        let name = |tools: &ToolIndex, args: &str| {
            call(&format!("0 <|tool_call_argument_begin|>{args}"), true, tools).map(|c| (c.name, c.id))
        };
        let weather = tool("get_weather", &["city", "unit"]);
        let one = ToolIndex::new([weather.clone()]);
        assert_eq!(name(&one, r#"{"x": 1}"#), Some(("get_weather".into(), Some("0".into()))));
        let two = ToolIndex::new([tool("read_file", &["path"]), weather.clone()]);
        assert_eq!(name(&two, r#"{"city": "Tokyo", "unit": "c"}"#).map(|n| n.0), Some("get_weather".into()));
        let ambiguous = ToolIndex::new([weather, tool("book_flight", &["city"])]);
        assert_eq!(name(&ambiguous, r#"{"city": "Tokyo"}"#), None);
        assert_eq!(name(&ambiguous, r#"{"city": "Tokyo""#), None);
        assert_eq!(name(&two, r#"{"unknown_key": 1}"#), None);
        assert_eq!(name(&two, "{}"), None);
        assert_eq!(name(&ToolIndex::open(), r#"{"city": "Tokyo"}"#), None);
    }
}
