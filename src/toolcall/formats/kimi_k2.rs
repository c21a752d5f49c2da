//! Kimi-K2 / K2-0905 / K2-Thinking (Moonshot):
//!
//! ```text
//! <|tool_calls_section_begin|><|tool_call_begin|>functions.NAME:IDX<|tool_call_argument_begin|>{json}<|tool_call_end|>…<|tool_calls_section_end|>
//! ```
//!
//! `functions.NAME:IDX` is the call id (IDX is a conversation-wide counter)
//! and is kept byte for byte; the name is the part between `functions.` and
//! the last `:`. Names may contain dots.

use super::json_calls::{Frame, framed, whole_json};
use crate::toolcall::scan::split_once;
use crate::toolcall::{Args, Ctx, Format, RawCall, Step};

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

    fn parse(&self, region: &str, ctx: &Ctx<'_>) -> Step {
        framed(region, ctx, &FRAME, call)
    }
}

fn call(body: &str, complete: bool) -> Option<RawCall> {
    let (id, args) = split_once(body, ARGS)?;
    let id = id.trim();
    let (name, indexed) = match id.rsplit_once(':') {
        Some((name, idx)) if !idx.is_empty() && idx.bytes().all(|b| b.is_ascii_digit()) => (name, true),
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
    let args = args.trim();
    let args = if complete { args } else { whole_json(args)? };
    Some(RawCall { name: name.to_string(), args: Args::Json(args.to_string()), id: indexed.then(|| id.to_string()) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_id() {
        let c = call("functions.a.b:12<|tool_call_argument_begin|>{}", true);
        assert_eq!(
            c,
            Some(RawCall { name: "a.b".into(), args: Args::Json("{}".into()), id: Some("functions.a.b:12".into()) })
        );
        assert_eq!(call("get<|tool_call_argument_begin|>{}", true).and_then(|c| c.id), None);
        assert_eq!(call("functions.get.0<|tool_call_argument_begin|>{}", true), None);
    }
}
