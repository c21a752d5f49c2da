//! Liquid LFM2 / LFM2.5 (vLLM `lfm2`): a pythonic call list between the
//! model's tool-call tokens, with text before or after it:
//!
//! ```text
//! <|tool_call_start|>[get_status(candidate_id='12345'), get_weather()]<|tool_call_end|>
//! ```
//!
//! The list is read by the [pythonic](super::pythonic) parser; an empty list
//! is no call, and its markup is dropped.

use super::pythonic::Pythonic;
use crate::toolcall::scan::{byte_at, skip_ws};
use crate::toolcall::{Ctx, Format, Parsed, Step, Wait};

pub struct Lfm2;

const START: &str = "<|tool_call_start|>";
const END: &str = "<|tool_call_end|>";

impl Format for Lfm2 {
    fn name(&self) -> &'static str {
        "lfm2"
    }

    fn markers(&self) -> &'static [&'static str] {
        &[START]
    }

    fn parse(&self, region: &str, ctx: &Ctx<'_>) -> Step {
        let body = skip_ws(region, START.len());
        match byte_at(region, body) {
            None if !ctx.eof => return Step::Need(Wait::Len(body + 1)),
            Some(b'[') => {}
            _ => return Step::Reject,
        }
        let inner = skip_ws(region, body + 1);
        let (end, calls) = if byte_at(region, inner) == Some(b']') {
            (inner + 1, Vec::new())
        } else {
            // The list as if it opened the output; its offsets are shifted back.
            let sub = Ctx { at_start: true, ..*ctx };
            match Pythonic.parse(&region[body..], &sub) {
                Step::Done(p) => (body + p.consumed, p.calls),
                Step::Need(w) => return Step::Need(shift(w, body)),
                Step::Reject => return Step::Reject,
            }
        };
        let after = skip_ws(region, end);
        let tail = &region[after..];
        let consumed = if tail.starts_with(END) {
            after + END.len()
        } else if !ctx.eof && END.starts_with(tail) {
            return Step::Need(Wait::Len(after + END.len()));
        } else {
            end
        };
        Step::Done(Parsed { consumed, calls, ..Default::default() })
    }
}

fn shift(w: Wait, by: usize) -> Wait {
    match w {
        Wait::Marker { marker, from } => Wait::Marker { marker, from: from + by },
        Wait::Balanced { from } => Wait::Balanced { from: from + by },
        Wait::Len(n) => Wait::Len(n + by),
        Wait::NonSpaceAfter { from } => Wait::NonSpaceAfter { from: from + by },
        Wait::Eof => Wait::Eof,
    }
}
