//! Hunyuan-A13B and AI21 Jamba 1.5–1.7 (alias `jamba`):
//! `<tool_calls>[{"name": …, "arguments": {…}}, …]</tool_calls>`, one array
//! for all calls.
//!
//! `<tool_calls>` also opens MiniMax-M1 (JSON lines) and Hunyuan-V3
//! (`<tool_call>` elements): this parser takes only an array. Hunyuan-A13B's
//! template leaves an `助手：` ("assistant:") prefix at the start of the
//! output; it is removed, as vLLM does.

use super::json_calls::{json_calls, need_balanced, past_closer};
use crate::toolcall::scan::{byte_at, python_end, skip_ws};
use crate::toolcall::{Ctx, Format, Parsed, Step, Wait};

pub struct HunyuanA13b;

const OPEN: &str = "<tool_calls>";
const CLOSE: &str = "</tool_calls>";
const PREFIX: &str = "助手：";

impl Format for HunyuanA13b {
    fn name(&self) -> &'static str {
        "hunyuan_a13b"
    }

    fn markers(&self) -> &'static [&'static str] {
        &[OPEN, PREFIX]
    }

    fn parse(&self, region: &str, ctx: &Ctx<'_>) -> Step {
        if region.starts_with(PREFIX) {
            return match ctx.at_start {
                true => Step::Done(Parsed { consumed: PREFIX.len(), ..Default::default() }),
                false => Step::Reject,
            };
        }
        let body = skip_ws(region, OPEN.len());
        match byte_at(region, body) {
            None if !ctx.eof => return Step::Need(Wait::Len(body + 1)),
            Some(b'[') => {}
            _ => return Step::Reject,
        }
        let Some(end) = python_end(region, body) else {
            return need_balanced(body, ctx);
        };
        let Some(calls) = json_calls(&region[body..end]) else {
            return Step::Reject;
        };
        match past_closer(region, end, &[CLOSE], ctx.eof) {
            Ok(consumed) => Step::Done(Parsed { consumed, calls, ..Default::default() }),
            Err(wait) => Step::Need(wait),
        }
    }
}
