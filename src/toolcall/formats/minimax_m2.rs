//! PLACEHOLDER: minimax_m2 is being written; it rejects every region until then.

use crate::toolcall::{Ctx, Format, Step};

pub struct MinimaxM2;

impl Format for MinimaxM2 {
    fn name(&self) -> &'static str {
        "minimax_m2"
    }

    fn markers(&self) -> &'static [&'static str] {
        &["<minimax:tool_call>"]
    }

    fn parse(&self, _region: &str, _ctx: &Ctx<'_>) -> Step {
        Step::Reject
    }
}
