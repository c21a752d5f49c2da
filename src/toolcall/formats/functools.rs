//! Phi-4-mini (`phi4_mini_json`) and FireFunction-v2: `functools[{"name": …,
//! "arguments"|"parameters": {…}}, …]`, one array for all calls.
//!
//! The word is ordinary Python too (`functools[1]` in prose), so the bracket
//! must hold a non-empty array of call objects.

use super::json_calls::{json_calls, need_balanced};
use crate::toolcall::scan::{byte_at, python_end, skip_ws};
use crate::toolcall::{Ctx, Format, Parsed, Step, Wait};

pub struct Functools;

const MARKER: &str = "functools[";

impl Format for Functools {
    fn name(&self) -> &'static str {
        "functools"
    }

    fn markers(&self) -> &'static [&'static str] {
        &[MARKER]
    }

    fn parse(&self, region: &str, ctx: &Ctx<'_>) -> Step {
        let open = MARKER.len() - 1;
        // Decide on the first element before buffering the whole bracket.
        let first = skip_ws(region, MARKER.len());
        match byte_at(region, first) {
            None if !ctx.eof => return Step::Need(Wait::Len(first + 1)),
            Some(b'{') => {}
            _ => return Step::Reject,
        }
        let Some(end) = python_end(region, open) else {
            return need_balanced(open, ctx);
        };
        match json_calls(&region[open..end]) {
            Some(calls) => Step::Done(Parsed { consumed: end, calls, ..Default::default() }),
            None => Step::Reject,
        }
    }
}
