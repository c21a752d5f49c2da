//! Cohere Command-R7B / Command-A:
//! `<|START_ACTION|>[{"tool_call_id": "0", "tool_name": …, "parameters": {…}}, …]<|END_ACTION|>`.
//!
//! The visible answer comes wrapped in `<|START_RESPONSE|>…<|END_RESPONSE|>`;
//! both special tokens are dropped as soon as they arrive, so the answer
//! streams. `<|START_THINKING|>…<|END_THINKING|>` is reasoning, routed by the
//! engine. The model's `tool_call_id`s ("0", "1") are positions, not ids, and
//! are not passed on.

use super::json_calls::{json_calls, need_balanced, past_closer};
use crate::toolcall::scan::{byte_at, python_end, skip_ws};
use crate::toolcall::{Ctx, Format, Parsed, Step, Wait};

pub struct CommandR7b;

const ACTION: &str = "<|START_ACTION|>";
const END_ACTION: &str = "<|END_ACTION|>";
const RESPONSE: &str = "<|START_RESPONSE|>";
const END_RESPONSE: &str = "<|END_RESPONSE|>";

impl Format for CommandR7b {
    fn name(&self) -> &'static str {
        "command_r7b"
    }

    fn markers(&self) -> &'static [&'static str] {
        &[ACTION, RESPONSE, END_RESPONSE]
    }

    fn parse(&self, region: &str, ctx: &Ctx<'_>) -> Step {
        if let Some(tag) = [RESPONSE, END_RESPONSE].into_iter().find(|t| region.starts_with(*t)) {
            return Step::Done(Parsed { consumed: tag.len(), ..Default::default() });
        }
        let body = skip_ws(region, ACTION.len());
        match byte_at(region, body) {
            None if !ctx.eof => return Step::Need(Wait::Len(body + 1)),
            Some(b'[') => {}
            _ => return Step::Reject,
        }
        let Some(end) = python_end(region, body) else {
            return need_balanced(body, ctx);
        };
        let Some(mut calls) = json_calls(&region[body..end]) else {
            return Step::Reject;
        };
        for c in &mut calls {
            c.id = None;
        }
        match past_closer(region, end, &[END_ACTION], ctx.eof) {
            Ok(consumed) => Step::Done(Parsed { consumed, calls, ..Default::default() }),
            Err(wait) => Step::Need(wait),
        }
    }
}
