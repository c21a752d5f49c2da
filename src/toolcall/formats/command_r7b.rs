//! Cohere Command-R7B / Command-A:
//! `<|START_ACTION|>[{"tool_call_id": "0", "tool_name": …, "parameters": {…}}, …]<|END_ACTION|>`,
//! or one call object instead of the array (smg, vLLM), with `tool_name`/
//! `parameters` or `name`/`arguments` keys; a turn may hold several action
//! blocks.
//!
//! The visible answer comes wrapped in `<|START_RESPONSE|>…<|END_RESPONSE|>`
//! (or `<|START_TEXT|>…<|END_TEXT|>`); those tokens are dropped as soon as
//! they arrive, so the answer streams. Grounded answers carry citation markup,
//! `<co>cited text</co: 0:[1,2],1:[0]>`: the tags are dropped and the cited
//! text kept, as vLLM does. `<|START_THINKING|>…<|END_THINKING|>` is
//! reasoning, routed by the engine. The model's `tool_call_id`s ("0", "1")
//! are positions, not ids, and are not passed on.

use super::json_calls::{json_call, json_calls, need_balanced, past_closer};
use crate::toolcall::scan::{byte_at, python_end, skip_ws};
use crate::toolcall::{Ctx, Format, Parsed, Step, Wait};

pub struct CommandR7b;

const ACTION: &str = "<|START_ACTION|>";
const END_ACTION: &str = "<|END_ACTION|>";
/// Tokens around visible text: dropped, the text between them kept.
const WRAPPERS: &[&str] = &["<|START_RESPONSE|>", "<|END_RESPONSE|>", "<|START_TEXT|>", "<|END_TEXT|>", CITE];
const CITE: &str = "<co>";
/// `</co: ` then the sources (`0:[1,2],1:[3]`) then `>`.
const CITE_END: &str = "</co: ";
/// Longer source lists than this are not citation markup.
const MAX_SOURCES: usize = 256;

impl Format for CommandR7b {
    fn name(&self) -> &'static str {
        "command_r7b"
    }

    fn markers(&self) -> &'static [&'static str] {
        &[ACTION, "<|START_RESPONSE|>", "<|END_RESPONSE|>", "<|START_TEXT|>", "<|END_TEXT|>", CITE, CITE_END]
    }

    fn parse(&self, region: &str, ctx: &Ctx<'_>) -> Step {
        if let Some(tag) = WRAPPERS.iter().find(|t| region.starts_with(**t)) {
            return Step::Done(Parsed { consumed: tag.len(), ..Default::default() });
        }
        if region.starts_with(CITE_END) {
            return cite_end(region, ctx);
        }
        let body = skip_ws(region, ACTION.len());
        let array = match byte_at(region, body) {
            None if !ctx.eof => return Step::Need(Wait::Len(body + 1)),
            Some(b'[') => true,
            Some(b'{') => false,
            _ => return Step::Reject,
        };
        let Some(end) = python_end(region, body) else {
            return need_balanced(body, ctx);
        };
        let text = &region[body..end];
        let calls = if array { json_calls(text) } else { json_call(text).map(|c| vec![c]) };
        let Some(mut calls) = calls else {
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

/// The closing citation tag: `</co: ` + `N:[i,j]` pairs + `>`.
fn cite_end(region: &str, ctx: &Ctx<'_>) -> Step {
    let from = CITE_END.len();
    let sources = region.as_bytes()[from..].iter().take(MAX_SOURCES + 1);
    for (i, b) in sources.enumerate() {
        match b {
            b'>' if i > 0 => return Step::Done(Parsed { consumed: from + i + 1, ..Default::default() }),
            b'0'..=b'9' | b':' | b',' | b'[' | b']' | b' ' => {}
            _ => return Step::Reject,
        }
    }
    if region.len() - from > MAX_SOURCES || ctx.eof {
        return Step::Reject;
    }
    Step::Need(Wait::Len(region.len() + 1))
}
