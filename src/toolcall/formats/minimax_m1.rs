//! PLACEHOLDER: minimax_m1 is being written; it rejects every region until then.

use crate::toolcall::{Ctx, Format, Step};

pub struct MinimaxM1;

impl Format for MinimaxM1 {
    fn name(&self) -> &'static str {
        "minimax_m1"
    }

    fn markers(&self) -> &'static [&'static str] {
        &["<tool_calls>"]
    }

    fn parse(&self, _region: &str, _ctx: &Ctx<'_>) -> Step {
        Step::Reject
    }
}
