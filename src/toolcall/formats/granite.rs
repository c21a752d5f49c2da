//! PLACEHOLDER: granite is being written; it rejects every region until then.

use crate::toolcall::{Ctx, Format, Step};

pub struct Granite;

impl Format for Granite {
    fn name(&self) -> &'static str {
        "granite"
    }

    fn markers(&self) -> &'static [&'static str] {
        &["<|tool_call|>", "<tool_call>", "<function_call>"]
    }

    fn parse(&self, _region: &str, _ctx: &Ctx<'_>) -> Step {
        Step::Reject
    }
}
