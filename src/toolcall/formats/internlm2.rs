//! InternLM2 / 2.5 and Intern-S1:
//! `<|action_start|><|plugin|>\n{"name": …, "parameters"|"arguments": {…}}<|action_end|>`,
//! one block per call (SGLang renders a space between the two tokens).
//!
//! `<|action_start|><|interpreter|>` opens the code-interpreter channel,
//! which is not a function call and stays text.

use super::json_calls::{json_call, need_balanced, past_closer};
use crate::toolcall::scan::{byte_at, python_end, skip_ws};
use crate::toolcall::{Ctx, Format, Parsed, Step, Wait};

pub struct Internlm2;

const OPEN: &str = "<|action_start|>";
const PLUGIN: &str = "<|plugin|>";
const CLOSE: &str = "<|action_end|>";

impl Format for Internlm2 {
    fn name(&self) -> &'static str {
        "internlm2"
    }

    fn markers(&self) -> &'static [&'static str] {
        &[OPEN]
    }

    fn parse(&self, region: &str, ctx: &Ctx<'_>) -> Step {
        let at = skip_ws(region, OPEN.len());
        let rest = &region[at..];
        if !rest.starts_with(PLUGIN) {
            return match !ctx.eof && PLUGIN.starts_with(rest) {
                true => Step::Need(Wait::Len(at + PLUGIN.len())),
                false => Step::Reject,
            };
        }
        let body = skip_ws(region, at + PLUGIN.len());
        match byte_at(region, body) {
            None if !ctx.eof => return Step::Need(Wait::Len(body + 1)),
            Some(b'{') => {}
            _ => return Step::Reject,
        }
        let Some(end) = python_end(region, body) else {
            return need_balanced(body, ctx);
        };
        let Some(call) = json_call(&region[body..end]) else {
            return Step::Reject;
        };
        match past_closer(region, end, &[CLOSE], ctx.eof) {
            Ok(consumed) => Step::Done(Parsed { consumed, calls: vec![call], ..Default::default() }),
            Err(wait) => Step::Need(wait),
        }
    }
}
