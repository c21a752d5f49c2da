//! PLACEHOLDER: kimi_k2 is being written; it rejects every region until then.

use crate::toolcall::{Ctx, Format, Step};

pub struct KimiK2;

impl Format for KimiK2 {
    fn name(&self) -> &'static str {
        "kimi_k2"
    }

    fn markers(&self) -> &'static [&'static str] {
        &["<|tool_calls_section_begin|>"]
    }

    fn parse(&self, _region: &str, _ctx: &Ctx<'_>) -> Step {
        Step::Reject
    }
}
