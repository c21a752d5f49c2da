//! MiniMax-M1 / MiniMax-Text-01: `<tool_calls>` then one JSON call object per
//! line, then `</tool_calls>`:
//!
//! ```text
//! <tool_calls>
//! {"name": "f", "arguments": {…}}
//! {"name": "g", "arguments": {…}}
//! </tool_calls>
//! ```
//!
//! `<tool_calls>` also opens Hunyuan-A13B/Jamba (an array) and Hunyuan-V3
//! (`<tool_call>` elements): this parser takes only a body that starts with
//! `{`. Objects are read by brace matching, so one spread over several lines
//! works too. Calls inside `<think>` never get here (the engine routes them).

use super::json_calls::{json_call, need_balanced};
use crate::toolcall::scan::{byte_at, find, python_end, skip_ws};
use crate::toolcall::{Ctx, Format, Parsed, RawCall, Step, Wait};

pub struct MinimaxM1;

const OPEN: &str = "<tool_calls>";
const CLOSE: &str = "</tool_calls>";

impl Format for MinimaxM1 {
    fn name(&self) -> &'static str {
        "minimax_m1"
    }

    fn markers(&self) -> &'static [&'static str] {
        &[OPEN]
    }

    fn parse(&self, region: &str, ctx: &Ctx<'_>) -> Step {
        let body = skip_ws(region, OPEN.len());
        match byte_at(region, body) {
            None if !ctx.eof => return Step::Need(Wait::Len(body + 1)),
            Some(b'{') => {}
            _ => return Step::Reject,
        }
        // Check the first object before waiting for the closing tag, so prose
        // that merely mentions the tag is released early.
        let Some(first_end) = python_end(region, body) else {
            return need_balanced(body, ctx);
        };
        if json_call(&region[body..first_end]).is_none() {
            return Step::Reject;
        }
        let close = match find(region, CLOSE, first_end) {
            Some(close) => Some(close),
            None if ctx.eof => None,
            None => {
                return Step::Need(Wait::Marker { marker: CLOSE, from: first_end });
            }
        };
        let limit = close.unwrap_or(region.len());
        let (calls, end) = objects(&region[..limit], body);
        match close {
            // Closed: every line must be a call.
            Some(close) if region[end..close].trim().is_empty() => {
                Step::Done(Parsed { consumed: close + CLOSE.len(), calls, salvage: true, ..Default::default() })
            }
            // A broken line: the calls on the other lines stand, the broken
            // one is dropped with the block's markup.
            Some(close) => {
                let calls = region[body..close].lines().filter_map(|l| json_call(l.trim())).collect();
                Step::Done(Parsed { consumed: close + CLOSE.len(), calls, salvage: true, ..Default::default() })
            }
            // Truncated: keep the complete calls, the unfinished tail stays text.
            None => Step::Done(Parsed { consumed: end, calls, ..Default::default() }),
        }
    }
}

/// Reads call objects separated by whitespace (or commas) from `at`; returns
/// them and the end of the last one.
fn objects(s: &str, mut at: usize) -> (Vec<RawCall>, usize) {
    let mut calls = Vec::new();
    let mut end = at;
    loop {
        at = skip_ws(s, at);
        if byte_at(s, at) == Some(b',') {
            at = skip_ws(s, at + 1);
        }
        if byte_at(s, at) != Some(b'{') {
            return (calls, end);
        }
        let Some(e) = python_end(s, at) else {
            return (calls, end);
        };
        let Some(call) = json_call(&s[at..e]) else {
            return (calls, end);
        };
        calls.push(call);
        end = e;
        at = e;
    }
}
