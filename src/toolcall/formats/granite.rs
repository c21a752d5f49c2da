//! IBM Granite, three generations (alias `granite_20b_fc`):
//!
//! * Granite 3.0: `<|tool_call|>[{"name": …, "arguments": {…}}, …]`;
//! * Granite 3.1–3.3: `<tool_call>[…]`, the same array after a plain-text tag
//!   and with no closing tag (a stray `</tool_call>` is swallowed);
//! * granite-20b-functioncalling: `<function_call> {"name": …, "arguments": …}`,
//!   the tag repeated before every call.
//!
//! `<tool_call>` also opens hermes, Qwen3-Coder and GLM bodies: this parser
//! takes only an array. Granite 4 writes hermes and needs no code here.

use super::json_calls::{json_call, json_calls, need_balanced, past_closer};
use crate::toolcall::scan::{byte_at, python_end, skip_ws};
use crate::toolcall::{Ctx, Format, Parsed, Step, Wait};

pub struct Granite;

const FUNCTION_CALL: &str = "<function_call>";

impl Format for Granite {
    fn name(&self) -> &'static str {
        "granite"
    }

    fn markers(&self) -> &'static [&'static str] {
        &["<|tool_call|>", "<tool_call>", FUNCTION_CALL]
    }

    fn parse(&self, region: &str, ctx: &Ctx<'_>) -> Step {
        let object = region.starts_with(FUNCTION_CALL);
        let marker_len = self.markers().iter().find(|m| region.starts_with(**m)).map_or(0, |m| m.len());
        let body = skip_ws(region, marker_len);
        match byte_at(region, body) {
            None if !ctx.eof => return Step::Need(Wait::Len(body + 1)),
            Some(b'{') if object => {}
            Some(b'[') if !object => {}
            _ => return Step::Reject,
        }
        let Some(end) = python_end(region, body) else {
            return need_balanced(body, ctx);
        };
        let text = &region[body..end];
        let calls = if object { json_call(text).map(|c| vec![c]) } else { json_calls(text) };
        let Some(calls) = calls else {
            return Step::Reject;
        };
        let consumed = if object {
            end
        } else {
            match past_closer(region, end, &["</tool_call>"], ctx.eof) {
                Ok(c) => c,
                Err(wait) => return Step::Need(wait),
            }
        };
        Step::Done(Parsed { consumed, calls, ..Default::default() })
    }
}
