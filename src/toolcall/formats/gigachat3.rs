//! GigaChat 3 / 3.1 (Sber; vLLM `gigachat3`): one JSON call object after a
//! header, the GigaChat 3 role header or the GigaChat 3.1 token, then
//! optionally the end-of-sequence `</s>`:
//!
//! ```text
//! <|message_sep|>\n\nfunction call<|role_sep|>\n{"name": "f", "arguments": {…}}
//! <|function_call|>{"name": "f", "arguments": {…}}
//! ```

use super::json_calls::{json_call, need_balanced, past_closer};
use crate::toolcall::scan::{byte_at, json_end, skip_ws};
use crate::toolcall::{Ctx, Format, Parsed, Step, Wait};

pub struct Gigachat3;

const MESSAGE_SEP: &str = "<|message_sep|>";
const ROLE_HEADER: &str = "function call<|role_sep|>";
const FUNCTION_CALL: &str = "<|function_call|>";
const EOS: &str = "</s>";

impl Format for Gigachat3 {
    fn name(&self) -> &'static str {
        "gigachat3"
    }

    fn markers(&self) -> &'static [&'static str] {
        &[MESSAGE_SEP, FUNCTION_CALL]
    }

    fn parse(&self, region: &str, ctx: &Ctx<'_>) -> Step {
        let header_end = if region.starts_with(FUNCTION_CALL) {
            FUNCTION_CALL.len()
        } else {
            let at = skip_ws(region, MESSAGE_SEP.len());
            let rest = &region[at..];
            if rest.starts_with(ROLE_HEADER) {
                at + ROLE_HEADER.len()
            } else if !ctx.eof && ROLE_HEADER.starts_with(rest) {
                return Step::Need(Wait::Len(at + ROLE_HEADER.len()));
            } else {
                return Step::Reject;
            }
        };
        let body = skip_ws(region, header_end);
        match byte_at(region, body) {
            None if !ctx.eof => return Step::Need(Wait::Len(body + 1)),
            Some(b'{') => {}
            _ => return Step::Reject,
        }
        let Some(end) = json_end(region, body) else { return need_balanced(body, ctx) };
        let Some(call) = json_call(&region[body..end]) else { return Step::Reject };
        match past_closer(region, end, &[EOS], ctx.eof) {
            Ok(consumed) => Step::Done(Parsed { consumed, calls: vec![call], ..Default::default() }),
            Err(wait) => Step::Need(wait),
        }
    }
}
