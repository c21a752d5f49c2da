//! Baidu ERNIE-4.5. Tool calls are hermes-style
//! (`<tool_call>\n{"name": …, "arguments": {…}}\n</tool_call>`) and are read
//! by the hermes parser; non-call answers may come wrapped in
//! `<response>…</response>`, which is removed (as vLLM does), newlines next
//! to the tags included. Thinking variants emit only `</think>`.
//!
//! `<response>` is also ordinary XML, so the wrapper is taken only when it
//! opens the output or when nothing but whitespace follows `</response>`.

use super::hermes::Hermes;
use crate::toolcall::scan::{find, skip_ws};
use crate::toolcall::{Ctx, Format, Parsed, Step, Wait};

pub struct Ernie45;

const OPEN: &str = "<response>";
const CLOSE: &str = "</response>";

impl Format for Ernie45 {
    fn name(&self) -> &'static str {
        "ernie45"
    }

    fn markers(&self) -> &'static [&'static str] {
        &[OPEN, "<tool_call>"]
    }

    fn parse(&self, region: &str, ctx: &Ctx<'_>) -> Step {
        if !region.starts_with(OPEN) {
            return Hermes.parse(region, ctx);
        }
        let Some(close) = find(region, CLOSE, OPEN.len()) else {
            return match ctx.eof {
                true => Step::Reject,
                false => Step::Need(Wait::Marker { marker: CLOSE, from: OPEN.len() }),
            };
        };
        let end = close + CLOSE.len();
        if !ctx.at_start {
            // Mid-text: only a wrapper that ends the output.
            if skip_ws(region, end) < region.len() {
                return Step::Reject;
            }
            if !ctx.eof {
                return Step::Need(Wait::NonSpaceAfter { from: end });
            }
        }
        let content = region[OPEN.len()..close].trim_matches(['\r', '\n']).to_string();
        Step::Done(Parsed { consumed: end, content, ..Default::default() })
    }
}
