//! PLACEHOLDER: gemma4 is being written; it rejects every region until then.

use crate::toolcall::{Ctx, Format, Step};

pub struct Gemma4;

impl Format for Gemma4 {
    fn name(&self) -> &'static str {
        "gemma4"
    }

    fn markers(&self) -> &'static [&'static str] {
        &["<|tool_call>"]
    }

    fn parse(&self, _region: &str, _ctx: &Ctx<'_>) -> Step {
        Step::Reject
    }
}
